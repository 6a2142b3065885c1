"""The environment: :class:`TextSQLClarifyEnv`, action parsing and observation rendering."""
from .actions import ACTION_KINDS, Action, parse_action


def __getattr__(name):  # lazy: importing the env pulls in the database and every metric module
    if name == "TextSQLClarifyEnv":
        from .env import TextSQLClarifyEnv
        return TextSQLClarifyEnv
    raise AttributeError(name)


__all__ = ["TextSQLClarifyEnv", "Action", "parse_action", "ACTION_KINDS"]
