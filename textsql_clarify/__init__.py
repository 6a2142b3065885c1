"""textsql-clarify: a Gymnasium environment for text-to-SQL agents that must answer, ask or refuse.

``import textsql_clarify`` registers ``TextSQLClarify-v0``::

    import gymnasium as gym
    import textsql_clarify  # noqa: F401
    env = gym.make("TextSQLClarify-v0")                       # embedded dataset, rule-based user
    env = gym.make("TextSQLClarify-v0", dataset="spider:../shared/data/spider_dev")
    envs = gym.make_vec("TextSQLClarify-v0", num_envs=8)    # one respond(batch) per step for all 8
"""
from __future__ import annotations

from gymnasium.envs.registration import register, registry

from .errors import ActionError, DatasetError, SQLParseError, TextSQLClarifyError
from .samples import Sample, load_jsonl
from .trajectory import Trajectory, Turn

__version__ = "0.1.0"
ENV_ID = "TextSQLClarify-v0"

if ENV_ID not in registry:
    # no TimeLimit wrapper: the env bounds its own episodes (clarification budget + forced final turn)
    # gym.make_vec(ENV_ID, num_envs=N) builds the vector env that batches clarifications across sub-envs;
    # gym.make_vec(ENV_ID, num_envs=N, processes=True) the compact async one (a worker process per sub-env)
    register(id=ENV_ID, entry_point="textsql_clarify.envs.env:TextSQLClarifyEnv", disable_env_checker=False,
             vector_entry_point="textsql_clarify.envs.async_vector:vector_entry_point")


def make_env(**kwargs):
    """``gym.make("TextSQLClarify-v0", **kwargs)``, unwrapped of nothing (convenience)."""
    import gymnasium as gym

    return gym.make(ENV_ID, **kwargs)


__all__ = ["ENV_ID", "make_env", "Sample", "load_jsonl", "Trajectory", "Turn", "ActionError", "DatasetError",
           "SQLParseError", "TextSQLClarifyError", "__version__"]
