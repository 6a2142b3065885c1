"""The env's ``info`` in two formats: ``python`` (``None`` = undefined) and ``typed`` (fixed types per key).

The env's own infos follow README "Design rules": an undefined reward component is ``None``, not 0. Gymnasium's
vector envs merge infos key by key and type each key's array by the first sub-env's value
(``VectorEnv._add_info``), so ``1.0`` in one sub-env and ``None`` in the next raises ``TypeError``
(``AsyncVectorEnv``, plain ``SyncVectorEnv``), and an ``int`` first truncates a later ``0.625``. The
``typed`` format is the same dict with fixed types per key, so that any Gymnasium vector env merges it
(Gymnasium ``VectorEnv`` info merging):

* ``reward_components`` and ``scores`` (and the dicts nested in them): every number, bool and ``None``
  becomes a Python ``float``; ``None`` becomes ``NaN``. ``components`` (the article's component sets,
  ``{set: {"precision": p, "recall": r}}`` in the python format) is a ``float64`` array of shape
  ``(len(COMPONENT_SETS), 2)``: row ``COMPONENT_SETS.index(set)``
  (:data:`~textsql_clarify.rewards.components.COMPONENT_SETS`), columns precision then recall, all ``NaN``
  where the python format has ``None`` (a query that cannot be analysed). One array merges as one key (a
  ``(num_envs, 6, 2)`` array) where the nested dicts were 18, and pickles smaller. In a merged vector info the
  ``_key`` mask then says whether the sub-env reported the key (``False``: absent this step) and ``NaN``
  under a ``True`` mask is "undefined" (``None`` in the ``python`` format).
* every other key keeps its type: ``clarifications_left`` ``int``; ``action_type``, ``phase``,
  ``sample_id``, ``error`` ``str`` or ``None`` (object arrays); ``messages`` a list and ``trajectory`` a
  :class:`~textsql_clarify.trajectory.Trajectory` (object arrays).

:func:`resolve_info_format` picks the format of an env built with ``info_format="auto"`` (the default):
``typed`` inside a worker process of Gymnasium's ``AsyncVectorEnv`` (``gym.make_vec(...,
vectorization_mode="async")`` builds each sub-env there through ``gym.make``, so no option reaches it
otherwise), ``python`` everywhere else.
"""
from __future__ import annotations

import math
import multiprocessing
from typing import Any

import numpy as np

from ..rewards.components import COMPONENT_SETS

__all__ = ["INFO_FORMATS", "components_array", "in_async_worker", "resolve_info_format", "typed_info"]

#: the ``info_format`` values an env accepts.
INFO_FORMATS = ("auto", "python", "typed")
#: info keys whose values (recursively) are numbers, bools or ``None``, made ``float`` in the typed format.
NUMERIC_KEYS = ("reward_components", "scores")
_NAN = math.nan
_NUMBER = (bool, int, float, np.number, np.bool_)


def in_async_worker() -> bool:
    """True in a worker process of Gymnasium's ``AsyncVectorEnv`` (a child process that Gymnasium names
    ``Worker<AsyncVectorEnv>-i``, or ``Worker<Subclass>-i``)."""
    return multiprocessing.parent_process() is not None and multiprocessing.current_process().name.startswith("Worker<")


def resolve_info_format(info_format: str) -> str:
    """``"python"`` or ``"typed"`` for an env's ``info_format`` option (``"auto"``: :func:`in_async_worker`).

    Raises:
        ValueError: ``info_format`` is not one of :data:`INFO_FORMATS`.
    """
    if info_format not in INFO_FORMATS:
        raise ValueError(f"info_format must be one of {list(INFO_FORMATS)}, got {info_format!r}")
    if info_format == "auto":
        return "typed" if in_async_worker() else "python"
    return info_format


def _floats(d: dict) -> dict:
    out = {}
    for k, v in d.items():
        if k == "components" and (v is None or isinstance(v, dict)):
            out[k] = components_array(v)
        elif v is None:
            out[k] = _NAN
        elif isinstance(v, _NUMBER):
            out[k] = float(v)
        elif isinstance(v, dict):
            out[k] = _floats(v)
        else:
            out[k] = v
    return out


def components_array(components: dict | None) -> np.ndarray:
    """The typed form of a ``components`` value: ``float64`` ``(len(COMPONENT_SETS), 2)``, precision and
    recall per component set, ``NaN`` where undefined (all ``NaN`` for ``None``)."""
    out = np.full((len(COMPONENT_SETS), 2), np.nan)
    for row, name in enumerate(COMPONENT_SETS):
        part = (components or {}).get(name) or {}
        for col, key in enumerate(("precision", "recall")):
            value = part.get(key)
            if value is not None:
                out[row, col] = value
    return out


def typed_info(info: dict[str, Any]) -> dict[str, Any]:
    """The typed format of one env ``info`` (see the module doc); a new dict, ``info`` is not changed.

    Args:
        info: an env info dict (``python`` format); a ``final_info`` dict inside it is converted too.
    Returns:
        The same keys, ``reward_components`` and ``scores`` as ``float`` (``NaN`` = undefined).
    """
    out = dict(info)
    for key in NUMERIC_KEYS:
        value = out.get(key)
        if isinstance(value, dict):
            out[key] = _floats(value)
    if isinstance(out.get("final_info"), dict):
        out["final_info"] = typed_info(out["final_info"])
    return out
