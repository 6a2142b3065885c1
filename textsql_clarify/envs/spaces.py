"""Observation and action spaces.

Gymnasium's :class:`~gymnasium.spaces.Text` accepts only its charset (alphanumeric by default). Questions,
schemas and SQL are full Unicode, so :class:`UnicodeText` accepts any ``str`` up to ``max_length``
characters. It samples from a printable ASCII-plus-accents charset (sampling exists for
``check_env`` and random agents; a full-Unicode sampling table would cost ~50 MB per space).

Gymnasium's shared-memory helpers (``gymnasium.vector.utils.create_shared_memory``,
``read_from_shared_memory``, ``write_to_shared_memory``, used by ``AsyncVectorEnv(shared_memory=True)``,
the default) store a ``Text`` as indices into its charset, so any character outside the sampling charset
raises ``KeyError`` (Spider dev has ``'？'`` and ``'‘'``), and they decode the buffer once, when the vector
env is built, so the observations they return never change. This module registers :class:`UnicodeText`
with all three (``functools.singledispatch``): one ``int32`` row of ``max_length + 1`` slots per
sub-env, the string's length then its code points (UTF-32, lone surrogates and NUL included), and a
live :class:`SharedTextBatch` view that decodes on access (a ``deepcopy``, which ``AsyncVectorEnv``
makes when ``copy=True``, gives a plain ``tuple`` of ``str``). A step writes only the characters of each
string, not the whole ``max_length`` row.
"""
from __future__ import annotations

import multiprocessing as mp
import string
from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory

_SAMPLE_CHARS = string.ascii_letters + string.digits + string.punctuation + " \n" + "éèàüößçñ’“”–"


class UnicodeText(spaces.Text):
    """A Text space whose members are any Unicode strings of length ``min_length..max_length``.

    Args:
        max_length: maximum length in characters.
        min_length: minimum length in characters (default 0: empty strings allowed).
    """

    def __init__(self, max_length: int, *, min_length: int = 0, seed: int | np.random.Generator | None = None):
        super().__init__(max_length, min_length=min_length, charset=_SAMPLE_CHARS, seed=seed)

    def contains(self, x: Any) -> bool:
        """True for any ``str`` whose length is within bounds (every code point is allowed)."""
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"

    def __eq__(self, other: object, /) -> bool:
        return (isinstance(other, UnicodeText) and self.min_length == other.min_length
                and self.max_length == other.max_length)

    __hash__ = None  # type: ignore[assignment]


def _rows(space: UnicodeText, shared_memory: Any, n: int) -> np.ndarray:
    """The shared buffer as an ``int32`` array of shape ``(n, max_length + 1)`` (no copy)."""
    return np.frombuffer(shared_memory.get_obj(), dtype=np.int32).reshape((n, space.max_length + 1))


class SharedTextBatch(Sequence):
    """The strings of ``n`` sub-envs in a shared ``int32`` buffer, decoded on access (a live view).

    Row ``i`` holds sub-env ``i``'s string: its length in slot 0, then its code points. ``batch[i]`` is a
    ``str``; ``tuple(batch)``, ``copy.deepcopy(batch)`` and ``pickle`` give a ``tuple`` of ``str``, a
    snapshot. Equality compares with any sequence of strings. Source: Gymnasium's vector
    ``batch_space`` / ``concatenate`` docs (async vector envs).

    Args:
        space: the sub-envs' :class:`UnicodeText` space.
        shared_memory: the buffer of :func:`create_shared_memory` for that space.
        n: number of sub-envs (rows).
    """

    def __init__(self, space: UnicodeText, shared_memory: Any, n: int):
        self._rows = _rows(space, shared_memory, n)

    def __len__(self) -> int:
        return self._rows.shape[0]

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(self[j] for j in range(*i.indices(len(self))))
        row = self._rows[i]
        return row[1:1 + int(row[0])].tobytes().decode("utf-32-le", "surrogatepass")

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, (Sequence, np.ndarray)) and not isinstance(other, str) and \
            len(other) == len(self) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    def __deepcopy__(self, memo: dict) -> tuple[str, ...]:
        return tuple(self)

    def __reduce__(self):
        return tuple, (tuple(self),)

    def __repr__(self) -> str:
        return f"SharedTextBatch({tuple(self)!r})"


@create_shared_memory.register(UnicodeText)
def _create_unicode_shared_memory(space: UnicodeText, n: int = 1, ctx: Any = mp) -> Any:
    """``n`` rows of ``max_length + 1`` ``int32`` slots (length, then code points), zeroed: empty strings."""
    return ctx.Array(np.dtype(np.int32).char, n * (space.max_length + 1))


@read_from_shared_memory.register(UnicodeText)
def _read_unicode_from_shared_memory(space: UnicodeText, shared_memory: Any, n: int = 1) -> SharedTextBatch:
    """A live :class:`SharedTextBatch` view of the ``n`` rows."""
    return SharedTextBatch(space, shared_memory, n)


@write_to_shared_memory.register(UnicodeText)
def _write_unicode_to_shared_memory(space: UnicodeText, index: int, value: str, shared_memory: Any) -> None:
    """Write one sub-env's string into row ``index``: its length, then its code points (only those).

    Raises:
        TypeError: ``value`` is not a ``str``. ValueError: it is longer than the space's ``max_length``.
    """
    if not isinstance(value, str):
        raise TypeError(f"a UnicodeText observation must be a str, got {type(value).__name__}")
    codes = np.frombuffer(value.encode("utf-32-le", "surrogatepass"), dtype=np.int32)
    if codes.size > space.max_length:
        raise ValueError(f"a UnicodeText({space.max_length}) observation got {codes.size} characters")
    row = np.frombuffer(shared_memory.get_obj(), dtype=np.int32)[index * (space.max_length + 1):]
    row[0] = codes.size
    row[1:1 + codes.size] = codes


#: observation text fields and their maximum lengths (characters). Longer content is cut with a marker.
TEXT_FIELDS = {
    "question": 4_096,
    "evidence": 16_384,
    "schema": 262_144,
    "context": 16_384,
    "history": 262_144,
    "last_message": 16_384,
}
#: phase codes in the observation's ``phase`` field.
PHASES = ("classification", "interactive", "final", "post_drift")


def observation_space(max_clarifications: int, max_turns: int) -> spaces.Dict:
    """The observation space: Unicode text fields plus small integer counters.

    Args:
        max_clarifications: clarification budget (counter ``clarifications_left`` in ``0..budget``).
        max_turns: upper bound on agent turns in an episode (counter ``turn`` in ``0..max_turns``).
    """
    fields: dict[str, spaces.Space] = {k: UnicodeText(n) for k, n in TEXT_FIELDS.items()}
    fields["turn"] = spaces.Discrete(max_turns + 1)
    fields["clarifications_left"] = spaces.Discrete(max_clarifications + 1)
    fields["phase"] = spaces.Discrete(len(PHASES))
    return spaces.Dict(fields)


def clip_text(text: str, field: str) -> str:
    """Cut ``text`` to the field's maximum length, marking the cut."""
    limit = TEXT_FIELDS[field]
    if len(text) <= limit:
        return text
    marker = "\n…[cut]"
    return text[: limit - len(marker)] + marker
