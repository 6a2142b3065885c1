"""Observation and action spaces.

Gymnasium's :class:`~gymnasium.spaces.Text` accepts only its charset (alphanumeric by default). Questions,
schemas and SQL are full Unicode, so :class:`UnicodeText` accepts any ``str`` up to ``max_length``
characters. It samples from a printable ASCII-plus-accents charset (sampling exists for
``check_env`` and random agents; a full-Unicode sampling table would cost ~50 MB per space).
"""
from __future__ import annotations

import string
from typing import Any

import numpy as np
from gymnasium import spaces

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
