"""Private sandboxes: one owner's own read-only connections, one per database, a bounded number open.

:func:`~textsql_clarify.sql.sandbox.get_sandbox` hands every caller in a process the same
:class:`~textsql_clarify.sql.sandbox.SQLiteSandbox` per database, whose lock runs one statement at a
time: two OpenEnv sessions on one database then wait for each other's queries (each up to its time
limit). :class:`PrivateSandboxes` gives one owner (an env, ``sql_connection="private"``) connections
of its own instead, so that a slow statement holds up only its owner, and so that its owner can
interrupt what runs on them (``sqlite3_interrupt``) without touching anyone else's statement.

Each private sandbox is an ordinary :class:`~textsql_clarify.sql.sandbox.SQLiteSandbox`: the same
read-only open, authorizer, time, work, heap, value, row and result limits, and its own gold cache.
The pool is bounded twice: an owner keeps at most ``limit`` open (least recently used closed first,
never the one in use), and the owners themselves are bounded by whoever makes them (the OpenEnv
server's ``max_concurrent_envs``), so a database has at most ``owners x 1`` private connections.

Source: SQLite's documentation of ``sqlite3_interrupt`` (it stops the statements of one connection
only) and of threading mode "serialized" (one connection runs one statement at a time).
"""
from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from pathlib import Path
from typing import Any

from .sandbox import SQLiteSandbox

#: Most private sandboxes one :class:`PrivateSandboxes` keeps open (one per database; an env whose
#: samples span more databases reopens the least recently used one when it comes back to it).
MAX_PRIVATE_SANDBOXES = 4

_OPEN: "weakref.WeakSet[SQLiteSandbox]" = weakref.WeakSet()  # every private sandbox opened here
_OPEN_LOCK = threading.Lock()


def open_private_count() -> int:
    """Number of private sandboxes (made by any :class:`PrivateSandboxes`) still open in this process."""
    with _OPEN_LOCK:
        return sum(1 for s in list(_OPEN) if not s.closed)


class PrivateSandboxes:
    """The private :class:`~textsql_clarify.sql.sandbox.SQLiteSandbox` connections of one owner.

    Thread-safe: :meth:`get` runs in the owner's thread, :meth:`interrupt` may come from any other
    (the OpenEnv server's event loop, when the client leaves mid-step), :meth:`close` from a third.

    Args:
        limit: most sandboxes kept open (>= 1; default :data:`MAX_PRIVATE_SANDBOXES`).
    Raises:
        ValueError: ``limit`` is not an int >= 1.
    """

    def __init__(self, limit: int = MAX_PRIVATE_SANDBOXES):
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be an int >= 1, got {limit!r}")
        self.limit = limit
        self._open: "OrderedDict[tuple, SQLiteSandbox]" = OrderedDict()
        self._lock = threading.Lock()

    def get(self, db_path: str | os.PathLike, *, keep: SQLiteSandbox | None = None,
            **settings: Any) -> tuple[SQLiteSandbox, list[SQLiteSandbox]]:
        """This owner's open sandbox for ``db_path`` with ``settings``, opened when there is none.

        Args:
            db_path: a SQLite file.
            keep: a sandbox that must stay open (the one the owner's running episode uses).
            settings: :class:`~textsql_clarify.sql.sandbox.SQLiteSandbox` keywords (``timeout_s``, ``row_cap`` ...).
        Returns:
            ``(sandbox, closed)``: the sandbox, and the sandboxes closed to stay within :attr:`limit`
            (least recently used first; the owner drops what it kept of them).
        Raises:
            FileNotFoundError, DatabaseOpenError, ValueError, TypeError: as :class:`SQLiteSandbox`.
        """
        key = (str(Path(db_path).resolve()), tuple(sorted(settings.items())))
        with self._lock:
            sandbox = self._open.get(key)
            if sandbox is not None and not sandbox.closed:
                self._open.move_to_end(key)
                return sandbox, []
        sandbox = SQLiteSandbox(db_path, **settings)  # outside the lock: opening reads the file
        with _OPEN_LOCK:
            _OPEN.add(sandbox)
        closed: list[SQLiteSandbox] = []
        with self._lock:
            self._open[key] = sandbox
            self._open.move_to_end(key)
            for old_key in list(self._open):
                if len(self._open) <= self.limit:
                    break
                old = self._open[old_key]
                if old is sandbox or old is keep:
                    continue
                del self._open[old_key]
                closed.append(old)
        for old in closed:
            old.close()
        return sandbox, closed

    def interrupt(self) -> int:
        """Abort the statements running now on these connections (``SQLiteSandbox.interrupt``: they end with
        kind ``runtime``); a no-op for an idle one. Returns how many open connections were signalled."""
        with self._lock:
            boxes = list(self._open.values())
        for sandbox in boxes:
            sandbox.interrupt()
        return len(boxes)

    def close(self) -> None:
        """Close every sandbox (a running statement is interrupted first, then waited for). Safe twice;
        :meth:`get` opens new ones afterwards."""
        with self._lock:
            boxes = list(self._open.values())
            self._open.clear()
        for sandbox in boxes:
            sandbox.interrupt()
            sandbox.close()

    def __len__(self) -> int:
        with self._lock:
            return sum(1 for s in self._open.values() if not s.closed)
