"""The environment: :class:`TextSQLClarifyEnv`, its batching vector env, action parsing and observation rendering."""
from .actions import ACTION_KINDS, Action, parse_action


def __getattr__(name):  # lazy: importing the env pulls in the database and every metric module
    if name == "TextSQLClarifyEnv":
        from .env import TextSQLClarifyEnv
        return TextSQLClarifyEnv
    if name == "TextSQLClarifyVectorEnv":
        from .vector import TextSQLClarifyVectorEnv
        return TextSQLClarifyVectorEnv
    raise AttributeError(name)


__all__ = ["TextSQLClarifyEnv", "TextSQLClarifyVectorEnv", "Action", "parse_action", "ACTION_KINDS"]
