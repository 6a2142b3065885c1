"""Helpers the protocol adapters share (OpenEnv server, verifiers environment); no library imports."""
from __future__ import annotations

import math
from typing import Any

__all__ = ["jsonable"]


def jsonable(x: Any) -> Any:
    """``x`` as JSON types, for payloads that leave the process (an OpenEnv observation, a verifiers trace).

    Dicts get string keys; tuples become lists; sets become sorted lists; numpy scalars become Python
    scalars (``.item()``); non-finite floats become ``None``; an object with ``to_dict()`` (a
    :class:`~textsql_clarify.trajectory.Trajectory`) is converted through it; anything else becomes ``str``.

    Args:
        x: any value (nested dicts / lists allowed).
    Returns:
        A value that ``json.dumps`` accepts with ``allow_nan=False``. Never raises.
    """
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, (set, frozenset)):
        return sorted((jsonable(v) for v in x), key=repr)
    if hasattr(x, "item") and callable(x.item) and not isinstance(x, (str, bytes)):
        try:
            x = x.item()
        except (TypeError, ValueError):
            return str(x)
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if x is None or isinstance(x, (str, int, float, bool)):
        return x
    if hasattr(x, "to_dict"):
        return jsonable(x.to_dict())
    return str(x)
