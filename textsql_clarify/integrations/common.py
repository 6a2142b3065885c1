"""Helpers the protocol adapters share (OpenEnv server, verifiers environment); no library imports."""
from __future__ import annotations

import math
from typing import Any

__all__ = ["add_components", "jsonable"]


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


def add_components(totals: dict[str, float | None], components: dict[str, Any] | None) -> dict[str, float | None]:
    """Add one step's reward components to an episode's per-component sums, in place.

    Numeric components (bools as 0/1) are summed; a component that is ``None`` or not finite on a
    step leaves its sum as it was (``None`` until some step defines it: README "Design rules": undefined is not
    zero); nested dicts (the ``components`` detail) are skipped. Used by every adapter that reports an
    episode's components (TRL tool env, TRL rollout, verifiers).

    Args:
        totals: component name -> running sum or ``None``; changed in place.
        components: the step's ``info["reward_components"]`` (``None`` = no components).
    Returns:
        ``totals``.
    """
    for k, v in (components or {}).items():
        if isinstance(v, dict):
            continue
        if isinstance(v, (bool, int, float)) and math.isfinite(float(v)):
            totals[k] = (totals.get(k) or 0.0) + float(v)
        else:
            totals.setdefault(k, None)
    return totals
