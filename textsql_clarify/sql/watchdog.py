"""The per-process watchdog thread that interrupts SQLite statements still running at their deadline.

It is the second of the two time-limit checks of :class:`textsql_clarify.sql.sandbox.SQLiteSandbox`
(the first is the progress handler). ``sqlite3_interrupt`` is the only way to stop SQLite from
another thread; wrapping a blocking call in a thread or ``asyncio.wait_for`` cannot.

Sources: SQLite's documentation of ``sqlite3_interrupt``; ``../shared/cases/execution_cases.json``
ex21 (a runaway recursive CTE must be interrupted, not waited for).
"""
from __future__ import annotations

import math
import os
import sqlite3
import threading
import time


class _Watchdog:
    """One daemon thread per process that interrupts statements still running at their deadline.

    ``sqlite3_interrupt`` is noticed at SQLite's next loop step or row, whatever the instruction
    count, so it catches rows whose instructions are each expensive (test_adversarial's
    ``heavy-rows``), which the progress handler sees only every
    :data:`~textsql_clarify.sql.sandbox.PROGRESS_EVERY` instructions.

    Protocol (:meth:`textsql_clarify.sql.sandbox.SQLiteSandbox.execute` inlines it): under
    :attr:`lock`, put ``running[key] = (deadline, connection, state)`` and call :meth:`wake` if
    ``deadline`` is earlier than :attr:`wake_at`; when the statement ends, delete the entry under
    :attr:`lock`.
    The thread interrupts only under the same lock, so it never hits a later statement. Cost
    per statement: two uncontended lock round trips (~0.4 us); the thread is woken only when a
    deadline is earlier than the one it sleeps until (at most once per ``timeout_s`` of activity),
    so no thread is started per query (a ``threading.Timer`` per query costs ~50-100 us).

    Args:
        timed_out_slot: index of the "timed out" flag in each sandbox's per-call state list; the
            thread skips statements whose flag is set and sets it before it interrupts.
    """

    def __init__(self, timed_out_slot: int) -> None:
        self._timed_out_slot = timed_out_slot
        self._reset()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self.lock = threading.Lock()
        self._cond = threading.Condition(self.lock)
        #: key -> (deadline in time.perf_counter s, connection, sandbox state); statements in flight.
        self.running: dict[int, tuple[float, sqlite3.Connection, list]] = {}
        #: When the thread looks next (time.perf_counter s; inf: only when woken).
        self.wake_at = math.inf
        self._thread: threading.Thread | None = None

    def wake(self, deadline: float) -> None:
        """Make the thread look at ``deadline`` (s); call with :attr:`lock` held."""
        self.wake_at = deadline
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._loop, name="sqlite-sandbox-watchdog", daemon=True)
            self._thread.start()
        self._cond.notify()

    def _loop(self) -> None:
        now_of = time.perf_counter
        timed_out = self._timed_out_slot
        with self._cond:
            while True:
                now = now_of()
                wake_at = math.inf
                for deadline, con, state in self.running.values():
                    if state[timed_out]:  # already stopped (by this thread or the progress handler)
                        continue
                    if deadline <= now:
                        state[timed_out] = True
                        try:
                            con.interrupt()
                        except sqlite3.Error:  # closed meanwhile: nothing left to stop
                            pass
                    elif deadline < wake_at:
                        wake_at = deadline
                self.wake_at = wake_at
                self._cond.wait(None if wake_at == math.inf else min(wake_at - now, 3600.0))
