"""Cache keys for SQL text: whitespace-normalised text, and an LRU bounded by an estimate of bytes.

Two spellings of one query that differ only in the whitespace between tokens parse to the same sqlglot
tree (its tokenizer skips whitespace, and reads a multi-word keyword such as ``GROUP   BY`` with any run
of whitespace as one space), so an analysis that is a pure function of the tree can be kept under the
normalised text and serve both. :func:`normalise_whitespace` rewrites only whitespace outside string
literals, quoted identifiers and comments; a run that holds a line break stays a line break (it may end
a ``--`` comment), any other run becomes one space. Source: sqlglot's tokenizer (``tokenizer_core.py``:
``_scan`` skips spaces, ``_scan_keywords`` matches a multi-word keyword over any whitespace run) and
SQLite's tokenizer (``tokenize.c``: whitespace separates tokens and is otherwise ignored).
"""
from __future__ import annotations

import re
import threading
from collections import OrderedDict
from typing import Any, Callable, Hashable

#: a quoted or commented span (kept as it is), or a run of ASCII whitespace outside one (group 1)
_SPANS = re.compile(r"'[^']*(?:'|\Z)|\"[^\"]*(?:\"|\Z)|`[^`]*(?:`|\Z)|\[[^\]]*(?:\]|\Z)|--[^\n]*"
                    r"|/\*[\s\S]*?(?:\*/|\Z)|([ \t\n\r\f\v]+)")


def _space(m: re.Match) -> str:
    run = m.group(1)
    if run is None:
        return m.group(0)
    return "\n" if "\n" in run or "\r" in run else " "


def normalise_whitespace(sql: str) -> str:
    """``sql`` with each run of ASCII whitespace between tokens made one space (one ``\\n`` where the run
    holds a line break) and the ends stripped; string literals (``'...'``), quoted identifiers
    (``"..."``, ``[...]``, backquotes) and comments are kept byte for byte. Two texts with the same result
    tokenize alike (see the module docstring). Pure; never raises for a ``str``.

    Example: ``"SELECT  a ,\\n\\n b FROM t WHERE c = 'x  y'"`` -> ``"SELECT a ,\\nb FROM t WHERE c = 'x  y'"``.
    """
    return _SPANS.sub(_space, sql).strip(" \t\n\r\f\v")


class ByteBoundedLRU:
    """A least-recently-used mapping bounded by the estimated bytes of its entries, not by their count.

    Each entry is charged ``size(key, value)`` bytes (an estimate the caller gives: it need not be exact,
    only proportional to what an entry holds); inserting past ``max_bytes`` drops the least recently used
    entries until the total fits again. An entry larger than ``max_bytes`` is not kept. Thread-safe (one lock).

    Args:
        max_bytes: the budget, bytes; 0 keeps nothing.
        size: ``(key, value) -> int`` bytes charged for an entry.

    Raises:
        ValueError: ``max_bytes`` < 0.
    """

    def __init__(self, max_bytes: int, size: Callable[[Hashable, Any], int]) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.max_bytes = max_bytes
        self._size = size
        self._data: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self.bytes = 0
        self.hits = self.misses = 0
        self._lock = threading.Lock()

    def get(self, key: Hashable, default: Any = None) -> Any:
        """The value under ``key`` (now the most recently used), or ``default``. ``key`` must be hashable."""
        with self._lock:
            hit = self._data.get(key)
            if hit is None:
                self.misses += 1
                return default
            self._data.move_to_end(key)
            self.hits += 1
            return hit[0]

    def put(self, key: Hashable, value: Any) -> None:
        """Keep ``value`` under ``key``, dropping the least recently used entries past the budget."""
        n = int(self._size(key, value))
        with self._lock:
            old = self._data.pop(key, None)
            if old is not None:
                self.bytes -= old[1]
            if n > self.max_bytes:
                return
            self._data[key] = (value, n)
            self.bytes += n
            while self.bytes > self.max_bytes:
                _, (_, m) = self._data.popitem(last=False)
                self.bytes -= m

    def clear(self) -> None:
        """Drop every entry."""
        with self._lock:
            self._data.clear()
            self.bytes = 0

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._data
