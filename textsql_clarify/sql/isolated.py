"""Process-isolated SQL execution (``isolation="process"``): an exact time bound and a memory cap per statement.

The in-process sandbox (:class:`textsql_clarify.sql.sandbox.SQLiteSandbox`) stops SQLite only between
rows and loop steps, so one row whose expressions chain many expensive built-in calls can outlive
its time limit, and what one statement allocates is the caller's memory (:mod:`.guards` says what
stays unbounded there). Here every statement runs in a worker process instead:

* a :class:`WorkerPool` holds up to ``size`` worker processes, started on demand with the
  ``forkserver`` start method (``spawn`` where that is missing, or when asked): a fresh interpreter
  that never forks a process holding torch or simulator threads;
* each worker opens the databases read-only through the project's own sandbox
  (:class:`~textsql_clarify.sql.sandbox.SQLiteSandbox`, one per database and setting, most recently
  used :data:`WORKER_SANDBOXES` kept), so every in-process limit and refusal still applies and
  ordinary results are the same;
* each worker caps its own memory with ``RLIMIT_AS`` and ``RLIMIT_DATA`` (its idle footprint plus
  ``max_memory_bytes``) and its CPU time per statement with ``RLIMIT_CPU`` (a backstop: the kernel
  ends a worker still running ``timeout_s`` + 2 s of CPU after the statement began, e.g. once the
  parent is gone);
* the parent waits for the reply at most ``timeout_s + grace_s`` (default grace:
  :data:`GRACE_FRACTION` of the limit + :data:`GRACE_S`); at the deadline it kills the worker
  (``SIGKILL``), starts a replacement and returns a ``timeout`` result. So the bound is exact:
  no statement costs the caller more than ``timeout_s * 1.05 + 0.25 s`` plus the kill (~1 ms);
* a worker that dies (out of memory, killed by the kernel) or runs out of memory gives a failed
  :class:`~textsql_clarify.sql.sandbox.ExecutionResult` (kind ``resource`` where the sandbox defines
  it, else ``runtime``), never an exception in the caller, and is replaced.

:class:`ProcessSandbox` is a drop-in for ``SQLiteSandbox``: ``execute(sql)``, ``execute_gold(key,
sql)``, ``schema``, ``interrupt()``, ``close()``, ``closed``, ``db_path``, ``timeout_s``, ``row_cap``.
:func:`make_sandbox` picks the executor by its ``isolation`` argument (:data:`ISOLATION_MODES`).
Cost: one pipe round trip and a pickle of the rows per statement (``bench/bench_isolation.py``;
``docs/platform.md`` "Process isolation" says when to choose which).

Sources: the bounds contract (a worker process is killed and replaced at the deadline, so the time bound is
exact; ``docs/platform.md`` "Process isolation"); Python's ``multiprocessing`` (start methods, ``Connection``)
and ``resource`` documentation; ``setrlimit(2)`` (``RLIMIT_AS``, ``RLIMIT_DATA``, ``RLIMIT_CPU``).
"""
from __future__ import annotations

import atexit
import math
import os
import signal
import sys
import threading
import time
import weakref
from collections import OrderedDict
from typing import Any

from . import sandbox as _sandbox
from .sandbox import ExecutionResult, SandboxClosedError, SQLiteSandbox, _is_transient, get_sandbox
from .schema import Schema

__all__ = ["ISOLATION_MODES", "ProcessSandbox", "WorkerPool", "check_isolation", "default_pool", "make_sandbox",
           "shutdown_default_pool"]

#: Values of ``isolation``: ``"in_process"`` (the default: :class:`SQLiteSandbox` in the caller's
#: process) or ``"process"`` (:class:`ProcessSandbox`: a worker process per statement in flight).
ISOLATION_MODES = ("in_process", "process")

#: Default ``max_memory_bytes``: what a worker may map beyond its idle footprint (bytes, ``RLIMIT_AS``
#: and ``RLIMIT_DATA``). The wide-row case (2,000 columns of 1 MB) peaked at 4.1 GB in-process.
MAX_WORKER_MEMORY_BYTES = 1 << 30

#: Default grace past ``timeout_s`` before the parent kills a worker: ``GRACE_FRACTION * timeout_s +
#: GRACE_S`` seconds. The worker's own sandbox normally answers a ``timeout`` within the limit; the
#: grace covers sending the rows back on a loaded machine (the bounds contract: 10 % plus a small constant).
GRACE_FRACTION = 0.05
GRACE_S = 0.25

#: Seconds a new worker may take to start and report ready (interpreter start, imports, limits).
STARTUP_TIMEOUT_S = 60.0

#: Sandboxes (one per database and setting) a worker keeps open, most recently used first.
WORKER_SANDBOXES = 32

#: Start methods a pool accepts; ``fork`` is not one of them (it would copy the caller's threads).
START_METHODS = ("forkserver", "spawn")

#: CPU seconds past ``timeout_s + grace_s`` after which the kernel ends a worker (``RLIMIT_CPU``, whole
#: seconds; a backstop for a worker whose parent can no longer kill it).
CPU_SLACK_S = 2


def check_isolation(isolation: Any) -> str:
    """Return ``isolation`` when it names an executor, else raise.

    Args:
        isolation: one of :data:`ISOLATION_MODES`.

    Raises:
        ValueError: any other value, naming the valid ones.
    """
    if not isinstance(isolation, str) or isolation not in ISOLATION_MODES:
        raise ValueError(f"isolation must be one of {list(ISOLATION_MODES)}, got {isolation!r}")
    return isolation


def _failed_kind() -> str:
    """Error kind of a statement whose worker died or ran out of memory: ``resource`` where the
    sandbox's :data:`~textsql_clarify.sql.sandbox.ERROR_KINDS` has it, else ``runtime``."""
    return "resource" if "resource" in _sandbox.ERROR_KINDS else "runtime"


def _failure(kind: str, message: str, elapsed_s: float) -> ExecutionResult:
    return ExecutionResult(columns=(), rows=(), elapsed_s=elapsed_s, error_kind=kind, error_message=message)


# -- the worker process -----------------------------------------------------------------------------
def _vm_kib(field: str) -> int:
    """``field`` (``VmSize``, ``VmData``, ``VmRSS``) of ``/proc/self/status`` in KiB; 0 where absent."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _set_limit(name: str, soft: int) -> bool:
    """Set the soft limit ``resource.<name>`` to ``soft`` (at most the hard limit); ``False`` when refused."""
    import resource

    which = getattr(resource, name, None)
    if which is None:
        return False
    _, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    try:
        resource.setrlimit(which, (soft, hard))
        return True
    except (ValueError, OSError):
        return False


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (``prctl(PR_SET_PDEATHSIG)``); best effort."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG = 1
        except (OSError, AttributeError):
            pass


def _is_memory_error(message: str | None) -> bool:
    """Whether a sandbox error message says memory ran out (SQLite's heap limit, or ``MemoryError``
    under the worker's ``RLIMIT_AS``)."""
    return bool(message) and ("out of memory" in message.lower() or message == "MemoryError")


def _worker_main(conn, max_memory_bytes: int, keep: int, die_with_parent: bool) -> None:
    """Body of one worker process: set the limits, report ready, then run statements until told to stop.

    Messages in: ``("x", db_path, settings, sql, cpu_budget_s)``, a statement to run in the sandbox
    for ``db_path`` opened with ``settings`` (``SQLiteSandbox`` keywords); ``("p", db_path, settings)``,
    open that sandbox (checking the settings) and report its ``timeout_s`` and ``row_cap``;
    ``("q",)`` to stop. Out: ``("ready", pid, limits)`` once; then per message ``("ok", ExecutionResult
    or {setting: value})``, ``("mem", message)`` (out of memory: the parent replaces the worker) or
    ``("err", type name, message, extra)`` (``extra``: a ``DatabaseOpenError``'s ``(path, reason)``).

    ``die_with_parent``: ask for SIGKILL when the parent dies; only for ``forkserver`` workers, whose
    parent is the forkserver's main thread (Linux sends it when the parent *thread* ends, and a
    ``spawn`` worker's may be a short-lived one).
    """
    if die_with_parent:
        _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C reaches the parent, which ends the pool
    _set_limit("RLIMIT_CORE", 0)  # a worker the kernel ends for CPU time leaves no core file
    limits: dict[str, int] = {}
    extra = int(max_memory_bytes)
    for name, field in (("RLIMIT_AS", "VmSize"), ("RLIMIT_DATA", "VmData")):
        base = _vm_kib(field) * 1024
        if base and _set_limit(name, base + extra):
            limits[name] = base + extra
    sandboxes: OrderedDict[tuple, SQLiteSandbox] = OrderedDict()
    conn.send(("ready", os.getpid(), limits))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            break
        if msg[0] not in ("x", "p"):
            break
        if msg[0] == "p":
            _, path, settings = msg
            sql, cpu_budget = None, STARTUP_TIMEOUT_S
        else:
            _, path, settings, sql, cpu_budget = msg
        _set_limit("RLIMIT_CPU", int(math.ceil(time.process_time() + cpu_budget)))
        try:
            key = (path, settings)
            sb = sandboxes.get(key)
            if sb is None:
                sb = sandboxes[key] = SQLiteSandbox(path, **dict(settings))
                while len(sandboxes) > keep:
                    sandboxes.popitem(last=False)[1].close()
            else:
                sandboxes.move_to_end(key)
            if sql is None:  # a probe
                res = None
                reply: tuple = ("ok", {"timeout_s": sb.timeout_s, "row_cap": sb.row_cap, "db_path": sb.db_path})
            else:
                res = sb.execute(sql)
                reply = ("ok", res)
            if res is not None and res.error_kind is not None and _is_memory_error(res.error_message):
                reply = ("mem", f"out of memory in the worker process: {res.error_message}")  # then replaced
        except MemoryError as e:
            reply = ("mem", f"out of memory in the worker process: {e or 'MemoryError'}")
        except Exception as e:  # bad settings, a database that vanished, a bug: reported, never fatal here
            extra = (e.path, e.reason) if isinstance(e, _sandbox.DatabaseOpenError) else None
            reply = ("err", type(e).__name__, str(e), extra)
        try:
            conn.send(reply)
        except MemoryError:
            reply = None
            try:
                conn.send(("mem", "out of memory in the worker process while sending the result"))
            except Exception:
                os._exit(3)
        except (OSError, ValueError):
            break
        reply = res = None  # drop the rows before waiting for the next statement


# -- the parent side --------------------------------------------------------------------------------
class _Worker:
    """One worker process and the parent's end of its pipe."""

    __slots__ = ("process", "conn", "pid", "ready", "limits", "kill_reason")

    def __init__(self, ctx, max_memory_bytes: int) -> None:
        parent_end, child_end = ctx.Pipe(duplex=True)
        forkserver = ctx.get_start_method() == "forkserver"
        self.process = ctx.Process(target=_worker_main, name="textsql-clarify-sql-worker", daemon=True,
                                   args=(child_end, max_memory_bytes, WORKER_SANDBOXES, forkserver))
        try:
            _start_even_from_a_daemon(self.process)
        except BaseException:
            parent_end.close()  # a failed start (then retried by the pool) must not leak the pipe's other end
            raise
        finally:
            child_end.close()
        self.conn = parent_end
        self.pid = self.process.pid
        self.ready = False
        self.limits: dict[str, int] = {}
        self.kill_reason: str | None = None  # "interrupt" when interrupt() killed it

    def wait_ready(self, timeout_s: float) -> str | None:
        """Wait for the ready message; ``None`` when ready, else why not."""
        if self.ready:
            return None
        try:
            if not self.conn.poll(timeout_s):
                return f"no ready message within {timeout_s:g} s"
            msg = self.conn.recv()
        except (EOFError, OSError) as e:
            return f"it exited while starting ({_exit_text(self.process)}; {type(e).__name__})"
        if not (isinstance(msg, tuple) and msg and msg[0] == "ready"):
            return f"unexpected first message {msg!r:.80}"
        self.ready, self.limits = True, dict(msg[2])
        return None

    def kill(self) -> None:
        """SIGKILL the process, reap it and close the pipe; safe to call twice."""
        try:
            if self.process.is_alive():
                self.process.kill()
            self.process.join(5.0)
        except (OSError, ValueError, AssertionError):
            pass
        try:
            self.conn.close()
        except OSError:
            pass

    def stop(self) -> None:
        """Ask the process to exit, then kill it if it has not within a second."""
        try:
            self.conn.send(("q",))
        except (OSError, ValueError):
            pass
        try:
            self.process.join(1.0)
        except (OSError, ValueError, AssertionError):
            pass
        self.kill()


_START_LOCK = threading.Lock()


def _start_even_from_a_daemon(process) -> None:
    """``process.start()``, also from a daemonic process (a Gymnasium ``AsyncVectorEnv`` worker), which
    ``multiprocessing`` refuses because it ends daemons abruptly: the flag is lifted for the call. Such
    workers still end with their caller: the pipe closes, ``RLIMIT_CPU`` ends a busy one, and under
    ``forkserver`` the forkserver (which exits when its last client does) takes them along by
    ``PR_SET_PDEATHSIG``."""
    import multiprocessing.process as mp_process

    config = getattr(mp_process.current_process(), "_config", None)
    if not isinstance(config, dict) or not config.get("daemon"):
        process.start()
        return
    with _START_LOCK:
        config["daemon"] = False
        try:
            process.start()
        finally:
            config["daemon"] = True


def _stop_workers(idle: list, busy: set, owner_pid: int) -> None:
    """Kill the busy workers and stop the idle ones (a pool's close, or its finalizer); not in a forked copy."""
    if os.getpid() != owner_pid:
        return  # a forked copy of the pool: the workers are the parent's
    workers, idle[:] = list(idle), []
    for w in list(busy):
        w.kill()
    for w in workers:
        w.stop()


def _forget_inherited_forkserver() -> bool:
    """Drop the forkserver state this process inherited through ``fork`` (``multiprocessing.forkserver``
    keeps it at module level), so the next start launches a forkserver of its own; ``False`` when this
    Python keeps that state differently."""
    from multiprocessing import forkserver

    fs = getattr(forkserver, "_forkserver", None)
    if fs is None or not all(hasattr(fs, a) for a in ("_forkserver_pid", "_forkserver_address",
                                                      "_forkserver_alive_fd")):
        return False
    fs._forkserver_pid = fs._forkserver_address = fs._forkserver_alive_fd = None
    return True


def _exit_text(process) -> str:
    code = process.exitcode
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


#: Errors a worker's probe re-raises here by name (others: RuntimeError).
_PROBE_ERRORS: dict[str, type] = {"FileNotFoundError": FileNotFoundError, "ValueError": ValueError,
                                  "TypeError": TypeError, "SandboxClosedError": SandboxClosedError}


class WorkerPool:
    """Up to ``size`` worker processes that run SQL statements for :class:`ProcessSandbox` handles.

    Workers start on demand (one per statement in flight; a single-threaded caller starts one) and
    are replaced after a kill. A statement waits for a free worker; its time limit starts when the
    worker gets it. Thread-safe.

    Args:
        size: most worker processes at once (>= 1); default ``min(4, os.cpu_count())``.
        max_memory_bytes: memory a worker may map beyond its idle footprint (bytes, >= 16 MiB;
            ``RLIMIT_AS`` and ``RLIMIT_DATA``). Default :data:`MAX_WORKER_MEMORY_BYTES`.
        start_method: ``"forkserver"`` (default where the platform has it) or ``"spawn"``
            (:data:`START_METHODS`); never ``fork``.
        startup_timeout_s: seconds a new worker may take to report ready (> 0).
        spares: idle workers kept started beyond ``size`` (0..4): with one, the statement after a kill
            (the gold right after a runaway prediction) gets a ready worker instead of waiting for a new
            one to start (0.05 s idle, up to about 1.3 s on a loaded machine; measured).

    Raises:
        ValueError: a setting out of range or an unknown start method.

    Source: ``docs/platform.md`` "Process isolation" (a pool of worker processes with memory and CPU limits);
    Python's ``multiprocessing`` docs; ``setrlimit(2)``.
    """

    def __init__(self, size: int | None = None, *, max_memory_bytes: int = MAX_WORKER_MEMORY_BYTES,
                 start_method: str | None = None, startup_timeout_s: float = STARTUP_TIMEOUT_S,
                 spares: int = 0) -> None:
        import multiprocessing

        if size is None:
            size = max(1, min(4, os.cpu_count() or 1))
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be an integer >= 1, got {size!r}")
        if isinstance(spares, bool) or not isinstance(spares, int) or not 0 <= spares <= 4:
            raise ValueError(f"spares must be an integer in 0..4, got {spares!r}")
        if isinstance(max_memory_bytes, bool) or not isinstance(max_memory_bytes, int) or max_memory_bytes < 16 << 20:
            raise ValueError(f"max_memory_bytes must be an integer >= {16 << 20} (16 MiB), got {max_memory_bytes!r}")
        if not (isinstance(startup_timeout_s, (int, float)) and 0 < startup_timeout_s < math.inf):
            raise ValueError(f"startup_timeout_s must be a positive number of seconds, got {startup_timeout_s!r}")
        available = multiprocessing.get_all_start_methods()
        if start_method is None:
            start_method = "forkserver" if "forkserver" in available else "spawn"
        if start_method not in START_METHODS or start_method not in available:
            raise ValueError(f"start_method must be one of {[m for m in START_METHODS if m in available]}, "
                             f"got {start_method!r}")
        self._ctx = multiprocessing.get_context(start_method)
        if start_method == "forkserver":  # workers fork from a server that imported this module once
            from multiprocessing import forkserver as _fs  # keep any preload the user set: add ours to it

            have = list(getattr(getattr(_fs, "_forkserver", None), "_preload_modules", None) or [])
            if have == ["__main__"]:  # Python's default, not a user's choice: don't re-import the main script
                have = []
            self._ctx.set_forkserver_preload(have if __name__ in have else have + [__name__])
        self.size = size
        self.spares = spares
        self.max_memory_bytes = max_memory_bytes
        self.start_method = start_method
        self.startup_timeout_s = float(startup_timeout_s)
        self._cond = threading.Condition()
        self._idle: list[_Worker] = []
        self._busy: set[_Worker] = set()
        self._starting = 0  # workers being created (counted against size)
        self._closed = False
        self._owner_pid = os.getpid()
        self._sandboxes: dict[tuple, ProcessSandbox] = {}
        #: workers started (including replacements) and killed at a deadline, for benchmarks and tests.
        self.started = 0
        self.killed = 0
        # a pool dropped without close() (an env never closed) still stops its workers when collected
        self._finalizer = weakref.finalize(self, _stop_workers, self._idle, self._busy, self._owner_pid)

    # -- workers ------------------------------------------------------------------------------
    def _acquire(self) -> _Worker:
        """A ready worker for this caller alone, or :class:`RuntimeError` saying why none could start."""
        dead: list[_Worker] = []
        try:
            with self._cond:
                while True:
                    if self._closed or os.getpid() != self._owner_pid:
                        raise SandboxClosedError("the worker pool is closed")
                    if self._idle:
                        worker = self._idle.pop()
                        if worker.process.exitcode is not None:  # died while idle: never hand it out
                            dead.append(worker)
                            continue
                        self._busy.add(worker)
                        if self.spares and len(self._idle) < self.spares:
                            self._spawn_prestart()
                        break
                    if len(self._busy) + self._starting < self.size:
                        self._starting += 1
                        worker = None
                        break
                    self._cond.wait()
        finally:
            for w in dead:
                w.kill()  # reap it and close its pipe
        if worker is None:
            try:
                worker = self._new_worker()
            except BaseException:
                with self._cond:
                    self._starting -= 1
                    self._cond.notify()
                raise
            with self._cond:
                self._starting -= 1
                self.started += 1
                self._busy.add(worker)
                closed = self._closed
            if closed:
                self._release(worker, False)
                raise SandboxClosedError("the worker pool is closed")
        why = worker.wait_ready(self.startup_timeout_s)
        if why is not None:
            self._release(worker, False)
            hint = ""
            if self.start_method != "fork" and getattr(sys.modules.get("__main__"), "__file__", None):
                hint = ("; a script that starts workers must keep its top-level code under "
                        "`if __name__ == \"__main__\":` (multiprocessing start methods 'forkserver' and 'spawn')")
            raise RuntimeError(f"SQL worker process {worker.pid} did not start: {why}{hint}")
        return worker

    def _new_worker(self) -> _Worker:
        """Start one worker. In a process forked from one that had started the forkserver, the
        inherited forkserver is not this process's child (``ChildProcessError``): forget it once, so a
        new one starts here."""
        try:
            return _Worker(self._ctx, self.max_memory_bytes)
        except ChildProcessError:
            if self.start_method != "forkserver" or not _forget_inherited_forkserver():
                raise
            return _Worker(self._ctx, self.max_memory_bytes)

    def _release(self, worker: _Worker, healthy: bool) -> None:
        """Give ``worker`` back (``healthy``) or kill it; a killed worker is replaced on demand."""
        with self._cond:
            self._busy.discard(worker)
            keep = healthy and not self._closed
            if keep:
                self._idle.append(worker)
            self._cond.notify()
        if not keep:
            worker.kill()

    def _spawn_prestart(self) -> None:
        threading.Thread(target=self._prestart, name="sql-worker-prestart", daemon=True).start()

    def _prestart(self) -> None:
        """Start a worker in the background: a replacement after a kill, or a spare (``spares``), so the next
        statement waits less."""
        with self._cond:
            if self._closed or len(self._idle) >= max(1, self.spares):
                return
            if len(self._idle) + len(self._busy) + self._starting >= self.size + self.spares:
                return
            self._starting += 1
        try:
            worker = self._new_worker()
        except Exception:
            worker = None
        with self._cond:
            self._starting -= 1
            if worker is not None:
                self.started += 1
                if self._closed:
                    worker.kill()
                else:
                    self._idle.append(worker)
            self._cond.notify()

    def probe(self, db_path: str, settings: tuple) -> dict[str, Any]:
        """Open the sandbox for ``db_path`` and ``settings`` in a worker (so the settings are checked
        where they apply, and this process opens no SQLite connection and sets no SQLite heap limit).

        Returns:
            dict: the worker sandbox's ``timeout_s``, ``row_cap`` and ``db_path``.

        Raises:
            FileNotFoundError, DatabaseOpenError, ValueError, TypeError: as ``SQLiteSandbox(db_path, **settings)``.
            RuntimeError: no worker could start, or the worker died while opening.
            SandboxClosedError: the pool is closed.
        """
        worker = self._acquire()
        healthy = False
        try:
            try:
                worker.conn.send(("p", db_path, settings))
                msg = worker.conn.recv() if worker.conn.poll(self.startup_timeout_s) else None
            except (EOFError, OSError, ValueError) as e:
                raise RuntimeError(f"the SQL worker process died while opening {db_path} "
                                   f"({_exit_text(worker.process)}; {type(e).__name__})") from None
            if msg is None:
                raise RuntimeError(f"the SQL worker process did not open {db_path} within {self.startup_timeout_s:g} s")
            if msg[0] == "mem":
                raise RuntimeError(f"{msg[1]} while opening {db_path}")
            healthy = True
            if msg[0] == "ok":
                return msg[1]
            _, name, message, extra = msg
            if name == "DatabaseOpenError" and extra is not None:
                raise _sandbox.DatabaseOpenError(*extra)
            raise _PROBE_ERRORS.get(name, RuntimeError)(message)
        finally:
            self._release(worker, healthy)

    def run(self, db_path: str, settings: tuple, sql: str, timeout_s: float, grace_s: float,
            inflight: set | None = None) -> ExecutionResult:
        """Run one statement in a worker and wait at most ``timeout_s + grace_s`` seconds for it.

        Args:
            db_path: resolved path of the database.
            settings: ``SQLiteSandbox`` keywords as a sorted tuple of ``(name, value)`` pairs.
            sql: the statement.
            timeout_s: the sandbox's time limit (s); grace_s: extra seconds before the kill.
            inflight: a set the worker is put in while it runs (so :meth:`ProcessSandbox.interrupt`
                can find it).

        Returns:
            ExecutionResult: the worker's (``elapsed_s`` replaced by the parent's wall time, which
            includes the round trip), or a failure: ``timeout`` (killed at the deadline), ``runtime``
            (interrupted; the worker did not start), the dead-worker kind (:func:`_failed_kind`).

        Raises:
            SandboxClosedError: the pool is closed.
        """
        t0 = time.perf_counter()
        try:
            worker = self._acquire()
        except RuntimeError as e:
            return _failure("runtime", str(e), time.perf_counter() - t0)
        t0 = time.perf_counter()
        wait = timeout_s + grace_s
        if inflight is not None:
            inflight.add(worker)
        healthy = False
        try:
            try:
                worker.conn.send(("x", db_path, settings, sql, timeout_s + grace_s + CPU_SLACK_S))
                got = worker.conn.poll(wait)
                msg = worker.conn.recv() if got else None
            except (EOFError, OSError, ValueError) as e:  # the worker died (or was killed by interrupt())
                elapsed = time.perf_counter() - t0
                worker.process.join(1.0)
                if worker.kill_reason == "interrupt":
                    return _failure("runtime", "interrupted", elapsed)
                return _failure(_failed_kind(), f"the SQL worker process died ({_exit_text(worker.process)}; "
                                f"{type(e).__name__}); memory limit {self.max_memory_bytes} bytes", elapsed)
            elapsed = time.perf_counter() - t0
            if msg is None:  # the deadline passed: kill, replace, report the limit
                with self._cond:
                    self.killed += 1
                return _failure("timeout", f"interrupted after the {timeout_s:g} s time limit "
                                           f"(SQL worker process killed at {wait:.3g} s)", elapsed)
            if msg[0] == "ok":
                healthy = True
                res = msg[1]
                return ExecutionResult(res.columns, res.rows, elapsed, res.truncated, res.error_kind, res.error_message)
            if msg[0] == "mem":
                return _failure(_failed_kind(), f"{msg[1]} (limit {self.max_memory_bytes} bytes)", elapsed)
            healthy = True
            return _failure("runtime", f"SQL worker error: {msg[1]}: {msg[2]}", elapsed)
        finally:
            if inflight is not None:
                inflight.discard(worker)
            self._release(worker, healthy)
            if not healthy:
                threading.Thread(target=self._prestart, name="sql-worker-prestart", daemon=True).start()

    def worker_pids(self) -> list[int]:
        """Process ids of the workers alive now (idle or busy)."""
        with self._cond:
            workers = list(self._idle) + list(self._busy)
        return [w.pid for w in workers if w.process.is_alive()]

    # -- handles ------------------------------------------------------------------------------
    def sandbox(self, db_path: str | os.PathLike, **kw: Any) -> "ProcessSandbox":
        """This pool's shared :class:`ProcessSandbox` for ``db_path`` and settings ``kw`` (one gold cache
        per database and setting, as :func:`~textsql_clarify.sql.sandbox.get_sandbox` in-process).

        Raises:
            as :class:`ProcessSandbox`.
        """
        from pathlib import Path

        key = (str(Path(db_path).resolve()), tuple(sorted(kw.items())))
        with self._cond:
            hit = self._sandboxes.get(key)
        if hit is not None and not hit.closed:
            return hit
        handle = ProcessSandbox(db_path, pool=self, **kw)
        with self._cond:
            self._sandboxes[key] = handle
        return handle

    @property
    def closed(self) -> bool:
        """``True`` once :meth:`close` was called."""
        return self._closed

    def close(self) -> None:
        """Stop every worker (idle ones asked to exit, busy ones killed) and close the handles; safe
        to call twice. Statements sent afterwards raise :class:`SandboxClosedError`."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            handles = list(self._sandboxes.values())
            self._sandboxes.clear()
            self._cond.notify_all()
        for h in handles:
            h._closed = True
        self._finalizer()

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"WorkerPool(size={self.size}, start_method={self.start_method!r}, "
                f"max_memory_bytes={self.max_memory_bytes}, {'closed' if self._closed else 'open'})")


class ProcessSandbox:
    """A drop-in for :class:`~textsql_clarify.sql.sandbox.SQLiteSandbox` whose statements run in a
    :class:`WorkerPool`'s worker processes.

    The settings are checked, and the file opened, by a worker (:meth:`WorkerPool.probe`), so
    construction raises what ``SQLiteSandbox`` raises, and this process opens no SQLite connection of
    its own (nor sets SQLite's process-wide heap limit); ``schema`` is read here, read-only. Results
    of ordinary statements are the in-process sandbox's (columns, rows, truncation, error kind and message); ``elapsed_s`` is the
    caller's wall time. Gold results are cached in this handle as ``SQLiteSandbox`` caches them
    (timeouts, dead workers and busy/locked errors are not cached).

    Args:
        db_path: path of a SQLite file.
        pool: the workers (default: this process's :func:`default_pool`).
        grace_s: seconds past ``timeout_s`` before the worker is killed (>= 0); default
            ``GRACE_FRACTION * timeout_s + GRACE_S``.
        **settings: ``timeout_s``, ``row_cap``, ``max_value_bytes`` ... as for ``SQLiteSandbox``.

    Raises:
        FileNotFoundError, DatabaseOpenError, ValueError, TypeError: as ``SQLiteSandbox``.
        SandboxClosedError: ``pool`` is closed.
        RuntimeError: no worker process could start.

    Source: ``docs/platform.md`` "Process isolation"; Python's ``multiprocessing`` docs.
    """

    def __init__(self, db_path: str | os.PathLike, *, pool: WorkerPool | None = None, grace_s: float | None = None,
                 **settings: Any) -> None:
        from pathlib import Path

        if not Path(db_path).is_file():
            raise FileNotFoundError(f"database file not found: {db_path}")
        if grace_s is not None and (isinstance(grace_s, bool) or not isinstance(grace_s, (int, float))
                                    or not 0 <= grace_s < math.inf):
            raise ValueError(f"grace_s must be a number of seconds >= 0, got {grace_s!r}")
        self.pool = pool if pool is not None else default_pool()
        if self.pool.closed:
            raise SandboxClosedError("the worker pool is closed")
        self._settings = tuple(sorted(settings.items()))
        opened = self.pool.probe(str(Path(db_path).resolve()), self._settings)
        self.db_path = opened["db_path"]
        self.timeout_s = float(opened["timeout_s"])
        self.row_cap = int(opened["row_cap"])
        self.settings = dict(settings)
        self.grace_s = float(GRACE_FRACTION * self.timeout_s + GRACE_S if grace_s is None else grace_s)
        self._gold_cache: dict[tuple[str, str], ExecutionResult] = {}
        self._schema: Schema | None = None
        self._inflight: set[_Worker] = set()
        self._closed = False

    def execute(self, sql: str) -> ExecutionResult:
        """Run one read-only statement in a worker process; as :meth:`SQLiteSandbox.execute`, plus a
        wall-clock bound of ``timeout_s + grace_s`` (then ``timeout``) and a memory cap (then the
        dead-worker kind, ``resource`` or ``runtime``).

        Raises:
            TypeError: ``sql`` is not a ``str``.
            SandboxClosedError: this handle or its pool was closed.
        """
        if not isinstance(sql, str):
            raise TypeError(f"sql must be a str, got {type(sql).__name__}")
        if self._closed:
            raise SandboxClosedError(f"sandbox for {self.db_path} is closed")
        return self.pool.run(self.db_path, self._settings, sql, self.timeout_s, self.grace_s, self._inflight)

    def execute_gold(self, key: str, sql: str) -> ExecutionResult:
        """Run a gold SQL once and cache its result for the handle's lifetime (as
        :meth:`SQLiteSandbox.execute_gold`; failures that can pass, a timeout, a dead worker or a
        busy/locked database, are retried on the next call).

        Raises:
            TypeError: ``key`` or ``sql`` is not a ``str``.
            SandboxClosedError: this handle or its pool was closed.
        """
        if not isinstance(key, str):
            raise TypeError(f"gold key must be a str, got {type(key).__name__}")
        cache_key = (key, sql)
        hit = self._gold_cache.get(cache_key)
        if hit is None:
            hit = self.execute(sql)
            if _cacheable(hit):
                self._gold_cache[cache_key] = hit
        return hit

    def interrupt(self) -> None:
        """Abort the statements this handle runs now, from another thread: their workers are killed
        and they end with error kind ``runtime`` ("interrupted"). A no-op when idle or closed."""
        for worker in list(self._inflight):
            worker.kill_reason = "interrupt"
            try:
                worker.process.kill()
            except (OSError, ValueError, AttributeError):
                pass

    @property
    def schema(self) -> Schema:
        """``{table: {column: type}}`` of this database, read in this process
        (:func:`textsql_clarify.sql.schema.read_schema`), as a :class:`~textsql_clarify.sql.readonly.ReadOnlySchema`;
        as :attr:`SQLiteSandbox.schema` (views SQLite cannot prepare left out, ``DatabaseOpenError`` when
        the schema cannot be read)."""
        if self._schema is None:
            self._schema = _sandbox.schema_of(self.db_path)
        return self._schema

    @property
    def unusable_views(self) -> dict[str, str]:
        """``{view: reason}`` of the views left out of :attr:`schema`, as :attr:`SQLiteSandbox.unusable_views`."""
        return _sandbox.views_unusable_in(self.db_path)

    @property
    def closed(self) -> bool:
        """``True`` once :meth:`close` (or its pool's ``close``) was called."""
        return self._closed or self.pool.closed

    def close(self) -> None:
        """Close this handle and drop its gold cache; the pool's workers stay for other handles. Safe twice."""
        self._closed = True
        self._gold_cache.clear()

    def __enter__(self) -> "ProcessSandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"ProcessSandbox({self.db_path!r}, timeout_s={self.timeout_s:g}, row_cap={self.row_cap}, "
                f"{'closed' if self.closed else 'open'})")


def _cacheable(res: ExecutionResult) -> bool:
    """Whether a gold result may be cached: not a timeout, a dead worker or a busy/locked database."""
    if res.error_kind is None:
        return True
    if res.error_kind in ("timeout", "resource"):
        return False
    msg = (res.error_message or "").lower()
    return not (msg.startswith(("the sql worker process died", "sql worker process", "out of memory in the worker",
                                "sql worker error"))  # e.g. the file briefly missing while a worker re-opened it
                or _is_transient(res))


_DEFAULT: dict[int, WorkerPool] = {}
_DEFAULT_LOCK = threading.Lock()


def default_pool() -> WorkerPool:
    """This process's shared :class:`WorkerPool` (default settings), created on first use and closed
    at interpreter exit or by :func:`shutdown_default_pool`."""
    pid = os.getpid()
    with _DEFAULT_LOCK:
        pool = _DEFAULT.get(pid)
        if pool is None or pool.closed:
            pool = _DEFAULT[pid] = WorkerPool()
        return pool


def shutdown_default_pool() -> None:
    """Close this process's :func:`default_pool` (its workers exit); the next use starts a new one."""
    with _DEFAULT_LOCK:
        pool = _DEFAULT.pop(os.getpid(), None)
    if pool is not None:
        pool.close()


atexit.register(shutdown_default_pool)


def make_sandbox(db_path: str | os.PathLike, *, isolation: str = "in_process", pool: WorkerPool | None = None,
                 **kw: Any):
    """The shared sandbox for ``db_path`` with settings ``kw``, in the executor ``isolation`` names.

    Args:
        db_path: path of a SQLite file.
        isolation: ``"in_process"`` (:func:`~textsql_clarify.sql.sandbox.get_sandbox`, the default) or
            ``"process"`` (``pool.sandbox(db_path, **kw)``, a :class:`ProcessSandbox`).
        pool: the workers for ``"process"`` (default :func:`default_pool`); must be ``None`` otherwise.
        **kw: ``timeout_s``, ``row_cap`` ... as for :class:`SQLiteSandbox`.

    Raises:
        ValueError: an unknown ``isolation``, or a ``pool`` with ``"in_process"``; otherwise as
        ``get_sandbox`` / :class:`ProcessSandbox`.

    Source: ``docs/platform.md`` "Process isolation" (when to choose which).
    """
    check_isolation(isolation)
    if isolation == "in_process":
        if pool is not None:
            raise ValueError("a worker pool only applies to isolation='process'")
        return get_sandbox(db_path, **kw)
    return (pool if pool is not None else default_pool()).sandbox(db_path, **kw)
