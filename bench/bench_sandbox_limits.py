"""Benchmark: each hostile SQL case's time and peak memory next to the bound the sandbox promises.

The bound (the bounds contract, whatever the SQL; ``docs/platform.md`` "SQL bounds"):

* time: no statement outlives its time limit by more than 10 % plus a small constant,
  ``wall <= 1.1 x limit + SLACK_S``;
* memory: no statement grows the process's peak RSS by more than :data:`MEMORY_CAP_BYTES`;
* no uncaught exception: every case ends with a result (an error kind, or rows).

Each case runs in a fresh child process (so that its memory is its own): the child opens a
:class:`textsql_clarify.sql.sandbox.SQLiteSandbox`, resets its peak-RSS counter
(``/proc/self/clear_refs``; without it each case gets its own child), runs the statement while a
thread samples the child's open temporary files, and reports as JSON:

* ``wall``: ``time.perf_counter`` around ``execute`` (s), median and max over ``--reps`` runs;
  ``ratio``: wall / limit;
* ``rss``: growth of the peak RSS (``VmHWM`` minus ``VmRSS`` before the statement), MiB;
* ``tmp``: most temporary files (SQLite's unlinked ``etilqs_*``) open at once during the statement;
* ``stopped by``: the error kind and the start of its message (``ok``: it ran to the end).

Cases: the core hostile input list (1,090 ``LIKE`` calls in 10 KB of SQL, ``json_patch`` over two
60,000-key objects, 40 ``instr``/``GLOB`` calls, the 2,000-column wide row, a sort that spilled to
temp files) and more (chains of guarded and unguarded linear calls, JSON parse-cache thrash, a
runaway CTE with and without the progress handler, a cross join, heavy rows, value and ``%c``
caps, ``DISTINCT`` and window buffers, quadratic ``trim``/``replace``). The tests
(``tests/test_hostile_sql.py``) run the same cases through :func:`run_cases` and assert the bound;
the numbers live here. Machine load changes them: say whether it was idle.

With ``--neighbours`` each child first opens what a busy process holds (:func:`neighbours_job`): 64
other sandboxes with warm page caches, a vector env of 16 that has stepped, and a trainer's own
in-memory SQLite database of :data:`BALLAST_MIB` MiB; every case must still end as it does alone,
since each statement's heap bound is its own (``docs/platform.md`` "Memory per statement and per
sandbox"). ``--idle`` measures what 64 idle sandboxes with warm caches hold (``sqlite3_memory_used``).

    python bench/bench_sandbox_limits.py [--reps 3] [--case NAME] [--neighbours] [--idle]
"""
from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: The constant of the time bound, seconds (``wall <= 1.1 x limit + SLACK_S``): the most one
#: guarded call or one stretch of unguarded linear work may add (loaded 2-core machine).
SLACK_S = 1.0

#: Most a statement may grow the process's peak RSS, bytes: SQLite's heap limit (256 MiB, which
#: also holds sorts and temp tables) plus the fetched result in Python (``max_result_bytes``,
#: 64 MiB of values, or one row of at most 256 columns x 256 KiB = 64 MiB) about 3 times over (the
#: values, SQLite's copy while a row is read, and the byte count's ``marshal`` copy), rounded up.
#: See ``docs/platform.md`` "SQL bounds".
MEMORY_CAP_BYTES = 512 << 20

_MIB = 1 << 20
_S1M = "(SELECT replace(hex(zeroblob(131000)), '0', 'a') AS s)"  # one 262,000-byte text value (the cap: 256 KiB)


def _fill(head: str, unit: str, tail: str, budget: int = 9_900) -> str:
    """``head`` + as many ``unit``s as fit in ``budget`` bytes + ``tail``, as result columns of
    ``max(unit, ... 100 units)`` (a flat chain ``u + u + ...`` would pass the expression depth limit)."""
    n = (budget - len(head) - len(tail)) // (len(unit) + 2)
    groups = [min(100, n - i) for i in range(0, n, 100)]
    cols = ["max(" + ", ".join([unit] * k) + ")" if k > 1 else unit for k in groups]
    sql = head + ", ".join(cols) + tail
    while len(sql.encode()) > budget:  # the max( ) wrappers cost a few bytes more
        groups[-1] -= 1
        cols[-1] = "max(" + ", ".join([unit] * groups[-1]) + ")"
        sql = head + ", ".join(cols) + tail
    return sql


def _json_object_sql(keys: int, prefix: str) -> str:
    return (f"(SELECT json_group_object('{prefix}' || value, value) FROM (WITH RECURSIVE r(value) AS "
            f"(SELECT 1 UNION ALL SELECT value + 1 FROM r LIMIT {keys}) SELECT value FROM r))")


@dataclass(frozen=True)
class Case:
    """One hostile statement and the limit it runs under.

    Attributes:
        name: short label.
        sql: the statement (at most the sandbox's 10,000-byte SQL limit).
        timeout_s: the sandbox's ``timeout_s`` for it, seconds.
        progress: ``False`` runs it with the progress handler off (the watchdog alone).
        env: extra environment variables for the child (e.g. a lower heap limit).
        core: ``True`` for a case of the core hostile input list (the module doc's first list).
        expect: the outcomes that show the mechanism meant to stop it fired: each ``"kind"`` or
            ``"kind: start of message"`` (``"ok"``: it ran to the end); empty: any.
    """

    name: str
    sql: str
    timeout_s: float = 0.5
    progress: bool = True
    env: dict = field(default_factory=dict)
    core: bool = False
    expect: tuple[str, ...] = ()

    def expected(self, kind: str, message: str) -> bool:
        """``True`` when ``kind``/``message`` is one of :attr:`expect` (or :attr:`expect` is empty)."""
        return not self.expect or any(
            (e == kind) if ":" not in e else f"{kind}: {message}".startswith(e) for e in self.expect)


RUNAWAY_CTE = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT COUNT(*) FROM n"
HEAVY_ROWS = ("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r LIMIT 30000) "
              "SELECT length(replace(hex(zeroblob(120000 + n)), '0', '1')) FROM r")
_BIG_ROWS = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r LIMIT 5000000) "
_PAD = "x" * 180
_SORT = _BIG_ROWS + f"SELECT x FROM (SELECT (n * 7919) % 1000003 || '{_PAD}' AS x FROM r) ORDER BY x DESC"

#: The hostile cases, in the order printed.
CASES: tuple[Case, ...] = (
    # -- the core hostile input list ---------------------------------------------------------------
    Case("LIKE calls filling 10 KB", _fill(f"WITH a(s, p) AS (SELECT s, '%' || substr(s, 1, 3) || 'b' FROM {_S1M}) "
                                          "SELECT ", "s LIKE p", " FROM a"), core=True, expect=("timeout",)),
    Case("LIKE calls, 98-byte pattern, 10 KB",
         _fill(f"WITH a(s, p) AS (SELECT s, '%' || substr(s, 1, 96) || 'b' FROM {_S1M}) SELECT ", "s LIKE p",
               " FROM a"),
         core=True,
         expect=("timeout", "runtime: like(): too expensive")),
    Case("json_patch 2 x 60,000 keys", f"SELECT length(json_patch({_json_object_sql(60000, 'k')}, "
                                       f"{_json_object_sql(60000, 'j')}))", core=True,
         expect=("runtime: value too large",)),
    Case("json_patch 2 x 15,000 keys", f"SELECT length(json_patch({_json_object_sql(15000, 'k')}, "
                                       f"{_json_object_sql(15000, 'j')}))",
         expect=("runtime: json_patch(): too expensive",)),
    Case("40 instr calls", f"WITH a(s, n) AS (SELECT s, substr(s, 1, 9500) || 'b' FROM {_S1M}) SELECT "
                           + "max(" + ", ".join(["instr(s, n)"] * 40) + ")" + " FROM a", core=True,
         expect=("timeout", "runtime: instr(): too expensive")),
    Case("40 instr calls, 3 KB needle", f"WITH a(s, n) AS (SELECT s, substr(s, 1, 3000) || 'b' FROM {_S1M}) SELECT "
                                        + "max(" + ", ".join(["instr(s, n)"] * 40) + ")" + " FROM a", core=True,
         expect=("timeout",)),
    Case("40 GLOB calls", f"WITH a(s, p) AS (SELECT s, '*' || replace(hex(zeroblob(12)), '0', '[a]') || 'b' "
                          f"FROM {_S1M}) SELECT max(" + ", ".join(["s GLOB p"] * 40) + ") FROM a", core=True,
         expect=("runtime: glob(): too expensive",)),
    Case("wide row: 2,000 columns x 1 MB", "SELECT " + ", ".join(["x"] * 2000) + " FROM (SELECT zeroblob(1048000) x)",
         core=True, expect=("runtime: too many columns",)),
    Case("wide row: 256 columns x 256 KB", "SELECT " + ", ".join(["x"] * 256) + " FROM (SELECT zeroblob(262000) x)",
         expect=("ok", "timeout")),
    Case("wide row: 256 columns x 256 KB text", "SELECT " + ", ".join(["x"] * 256) + f" FROM (SELECT s x FROM {_S1M})",
         expect=("ok", "timeout")),
    Case("wide row, 16 MiB heap limit", "SELECT " + ", ".join(["x"] * 256) + f" FROM (SELECT s x FROM {_S1M})",
         env={"TEXTSQL_CLARIFY_SQLITE_HEAP_LIMIT": str(16 << 20)}, expect=("runtime: out of memory",)),
    Case("wide rows: 256 columns x 256 KB x 40", "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r "
         "LIMIT 40) SELECT " + ", ".join(["x"] * 256) + " FROM (SELECT zeroblob(262000) x), r",
         expect=("ok", "timeout")),
    Case("sort that spilled to temp files", _SORT, timeout_s=5.0, core=True,
         expect=("timeout", "runtime: out of memory")),
    Case("sort of 2 KB rows, 64 MiB heap limit", _SORT.replace(_PAD, _PAD * 11), timeout_s=5.0,
         env={"TEXTSQL_CLARIFY_SQLITE_HEAP_LIMIT": str(64 << 20)},
         expect=("runtime: out of memory", "timeout")),
    Case("sort, 0.5 s limit", _SORT, core=True, expect=("timeout",)),
    Case("sort of 5 M small records, 5 s limit", "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r "
         "LIMIT 5000000) SELECT n FROM r ORDER BY -n", timeout_s=5.0, expect=("timeout", "ok")),
    Case("sort of 6 M small records, 10 s limit", "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r "
         "LIMIT 7000000) SELECT n FROM r ORDER BY -n", timeout_s=10.0),
    # -- more of our own -------------------------------------------------------------------------
    Case("upper() over 256 KB filling 10 KB", _fill("SELECT ", "length(upper(s))", f" FROM {_S1M}"),
         expect=("timeout", "ok")),
    Case("randomblob(256 KB) filling 10 KB", _fill("SELECT ", "length(randomblob(262000))", ""),
         expect=("timeout", "ok")),
    Case("hex(zeroblob(128 KB)) filling 10 KB", _fill("SELECT ", "length(hex(zeroblob(131000)))", ""),
         expect=("timeout", "ok")),
    Case("unguarded || over 256 KB filling 10 KB", _fill("SELECT ", "length(s||'')", f" FROM {_S1M}"),
         expect=("timeout", "ok")),
    Case("json_extract parse-cache thrash", _fill("WITH d(a, b, c, e, f) AS (SELECT o, o || ' ', o || '  ', "
         f"o || '   ', o || '    ' FROM (SELECT {_json_object_sql(15000, 'k')} AS o)) SELECT ",
         "(" + "+".join(f"json_extract({v},'$.k1')" for v in "abcef") + ")", " FROM d"), expect=("timeout", "ok")),
    Case("json_each over 15,000 keys", f"SELECT count(*) FROM json_each({_json_object_sql(15000, 'k')})",
         expect=("forbidden",)),
    # SQLite 3.40 grows json_group_array's text by doubling and checks the value cap only when it returns it:
    # the heap cap stops it when the buffer would pass 128 MiB, which a fast core reaches within 0.5 s
    # (this 2-core machine, loaded: within 1-2 s)
    Case("json_group_array to the value cap", _BIG_ROWS + f"SELECT length(json_group_array('{_PAD}')) FROM r",
         expect=("timeout", "runtime: value too large", "runtime: out of memory")),
    Case("group_concat to the value cap", _BIG_ROWS + f"SELECT length(group_concat('{_PAD}')) FROM r",
         expect=("timeout", "runtime: value too large")),
    Case("DISTINCT over 5 M rows", _BIG_ROWS + f"SELECT count(*) FROM (SELECT DISTINCT n || '{_PAD}' FROM r)",
         expect=("timeout", "runtime: out of memory")),
    Case("window over 5 M rows", _BIG_ROWS + f"SELECT max(w) FROM (SELECT count(*) OVER (ORDER BY n || '{_PAD}') w "
         "FROM r)", expect=("timeout", "runtime: out of memory")),
    Case("doubling string CTE", "WITH RECURSIVE r(s) AS (SELECT 'a' UNION ALL SELECT s || s FROM r LIMIT 40) "
         "SELECT length(s) FROM r", expect=("runtime: value too large",)),
    Case("runaway CTE", RUNAWAY_CTE, expect=("timeout",)),
    Case("runaway CTE, watchdog only", RUNAWAY_CTE, progress=False, expect=("timeout",)),
    Case("cross join x8", "SELECT count(*) FROM t a, t b, t c, t d, t e, t f, t g, t h", expect=("timeout",)),
    Case("heavy rows", HEAVY_ROWS, expect=("timeout",)),
    Case("heavy rows, watchdog only", HEAVY_ROWS, progress=False, expect=("timeout",)),
    Case("printf %c precision 4e8", "SELECT printf('%.*c', 400000000, 'x')",
         expect=("runtime: printf(): value too large",)),
    Case("printf width 9e8", "SELECT printf('%900000000d', 1)", expect=("ok",)),
    Case("quadratic ltrim", "WITH a(s) AS (SELECT replace(hex(zeroblob(40000)), '0', 'a')) "
         "SELECT length(ltrim(s, replace(s, 'a', 'b') || 'a')) FROM a", expect=("runtime: ltrim(): too expensive",)),
    Case("quadratic replace", f"SELECT length(replace(s, substr(s, 1, 131000) || 'b', '')) FROM {_S1M}",
         expect=("runtime: replace(): too expensive",)),
)

_CHILD = r"""
import json, os, sys, threading, time
sys.path.insert(0, sys.argv[1])
job = json.loads(sys.stdin.read())
import textsql_clarify.sql.sandbox as sandbox_mod
if not job["progress"]:
    sandbox_mod.PROGRESS_EVERY = 2**31 - 1  # read when the connection opens
from textsql_clarify.sql.sandbox import SQLiteSandbox

def status_kb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0

def temp_files():
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink("/proc/self/fd/" + fd)
        except OSError:
            continue
        if "etilqs" in target or (target.endswith("(deleted)") and "/memfd:" not in target):
            n += 1
    return n

from textsql_clarify.sql.sandbox import sqlite_memory_used
held = []  # neighbours: other sandboxes, a vector env, a trainer's own SQLite, all kept alive to the end
nb = job.get("neighbours")
if nb:
    ballast = __import__("sqlite3").connect(":memory:")  # the trainer's own SQLite, outside every sandbox
    ballast.execute("CREATE TABLE b AS WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r "
                    "LIMIT ?) SELECT randomblob(1000) AS v FROM r", (nb["ballast_mib"] * 1024,))
    held.append(ballast)
    for path in nb["sandboxes"]:
        other = SQLiteSandbox(path)
        for table in other.schema:
            other.execute('SELECT * FROM "' + table.replace('"', '""') + '"')  # warm its page cache
        held.append(other)
    if nb["vector_env"]:
        import gymnasium as gym
        import textsql_clarify  # noqa: F401  (registers the env)
        venv = gym.make_vec("TextSQLClarify-v0", num_envs=nb["vector_env"])
        venv.reset(seed=0)
        venv.step(["<sql>SELECT count(*) FROM students</sql>"] * nb["vector_env"])
        held.append(venv)
sb = SQLiteSandbox(job["db"], timeout_s=job["timeout_s"])
sb.execute("SELECT 1")
out = []
for sql in job["sqls"]:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM to the current RSS
        reset = True
    except OSError:
        reset = False
    base = status_kb("VmRSS")
    most, done = [0], threading.Event()
    def sample():
        while not done.wait(0.005):
            most[0] = max(most[0], temp_files())
    th = threading.Thread(target=sample, daemon=True)
    th.start()
    t0 = time.perf_counter()
    before = sqlite_memory_used()
    r = sb.execute(sql)
    wall = time.perf_counter() - t0
    done.set()
    th.join()
    out.append(dict(wall=wall, elapsed=r.elapsed_s, kind=r.error_kind or "ok",
                    message=(r.error_message or "")[:160], rss_growth=(status_kb("VmHWM") - base) * 1024,
                    hwm_reset=reset, temp_files=most[0], held=before))
print("RESULT " + json.dumps(out))
"""


def guards_cache() -> int:
    """The page cache every sandbox sets, KiB (``textsql_clarify.sql.guards.CACHE_SIZE_KIB``)."""
    from textsql_clarify.sql import guards

    return guards.CACHE_SIZE_KIB


def toy_db(folder: Path) -> Path:
    """The 20-row table ``t(x, y, z)`` of ``tests/test_database.py``, in ``folder``."""
    path = folder / "toy.sqlite"
    con = sqlite3.connect(path)
    rows = ",".join(f"({i}, 'name{i}', {i * 1.5})" for i in range(1, 21))
    con.executescript(f"CREATE TABLE t(x INTEGER PRIMARY KEY, y TEXT, z REAL); INSERT INTO t VALUES {rows};")
    con.commit()
    con.close()
    return path


#: MiB of the in-memory database a child holds as "the trainer's own SQLite" with ``--neighbours``: with
#: the 64 sandboxes, more than the 256 MiB cap leaves to a 64 MiB row under one process-wide limit.
BALLAST_MIB = 192


def neighbour_dbs(n: int, fallback: Path) -> list[str]:
    """``n`` database paths for the neighbour sandboxes: the ``../shared/data`` files over 2 MiB (larger than a
    sandbox's page cache, so its cache fills), cycled; ``fallback`` ``n`` times when there are none."""
    shared = REPO.parent / "shared" / "data"
    big = sorted(str(p) for p in shared.glob("*/**/*.sqlite") if p.stat().st_size > 2 << 20) if shared.is_dir() else []
    return [big[i % len(big)] for i in range(n)] if big else [str(fallback)] * n


def neighbours_job(db: Path, sandboxes: int = 64, vector_env: int = 16, ballast_mib: int = BALLAST_MIB) -> dict:
    """The ``neighbours`` of :func:`run_cases`: ``sandboxes`` other sandboxes (over :func:`neighbour_dbs`,
    every table scanned to warm its page cache), a ``TextSQLClarify-v0`` vector env of ``vector_env``
    sub-envs after a reset and a step, and a :mod:`sqlite3` in-memory database of ``ballast_mib`` MiB."""
    return dict(sandboxes=neighbour_dbs(sandboxes, db), vector_env=vector_env, ballast_mib=ballast_mib)


def _run_child(db: Path, sqls: list[str], timeout_s: float, progress: bool, env: dict,
               neighbours: dict | None = None) -> list[dict]:
    job = dict(db=str(db), sqls=sqls, timeout_s=timeout_s, progress=progress, neighbours=neighbours)
    child_env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **env}
    limit = 60 + len(sqls) * (2 * timeout_s + 10) + (120 if neighbours else 0)
    p = subprocess.run([sys.executable, "-c", _CHILD, str(REPO)], input=json.dumps(job), capture_output=True,
                       text=True, env=child_env, timeout=limit)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    if p.returncode != 0 or not lines:
        raise RuntimeError(f"child failed (exit {p.returncode}): {p.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def run_cases(cases: list[Case] | tuple[Case, ...], db: Path, reps: int = 1,
              neighbours: dict | None = None) -> dict[str, list[dict]]:
    """Run each case ``reps`` times in child processes; return ``{case name: [one dict per run]}``.

    Cases with the same limit, progress setting and environment share a child when the child can
    reset its peak-RSS counter; otherwise each run gets its own child. Each run's dict holds
    ``wall`` (s), ``elapsed`` (s), ``kind``, ``message``, ``rss_growth`` (bytes), ``temp_files`` and
    ``held`` (bytes the child's SQLite held just before the statement). ``neighbours``
    (:func:`neighbours_job`): what each child opens and keeps before its first case.

    Raises:
        RuntimeError: a child exited without a result (an uncaught exception: its stderr is in the message).
        subprocess.TimeoutExpired: a child hung far past every limit.
    """
    out: dict[str, list[dict]] = {c.name: [] for c in cases}
    groups: dict[tuple, list[Case]] = {}
    for c in cases:
        groups.setdefault((c.timeout_s, c.progress, tuple(sorted(c.env.items()))), []).append(c)
    for (timeout_s, progress, env), group in groups.items():
        sqls = [c.sql for c in group for _ in range(reps)]
        results = _run_child(db, sqls, timeout_s, progress, dict(env), neighbours)
        if results and not results[0]["hwm_reset"]:  # no peak reset: one child per statement
            results = [_run_child(db, [sql], timeout_s, progress, dict(env), neighbours)[0] for sql in sqls]
        for i, c in enumerate(group):
            out[c.name] = results[i * reps:(i + 1) * reps]
    return out


def idle_sandbox_memory(paths: list[str], cache_kib: int | None = None) -> dict:
    """Open one :class:`~textsql_clarify.sql.sandbox.SQLiteSandbox` per path in this process, scan every table
    of each (a warm page cache), and return what the process's SQLite holds more (``sqlite3_memory_used``),
    bytes: ``opened`` (after opening), ``warm`` (after the scans), ``per_sandbox`` (``warm / len(paths)``).
    ``cache_kib``: the page cache to set instead of ``guards.CACHE_SIZE_KIB`` (e.g. 2000, SQLite's default).
    The sandboxes are closed before it returns."""
    from textsql_clarify.sql import guards
    from textsql_clarify.sql.sandbox import SQLiteSandbox, sqlite_memory_used

    keep = guards.CACHE_SIZE_KIB
    if cache_kib is not None:
        guards.CACHE_SIZE_KIB = cache_kib
    base = sqlite_memory_used()
    try:
        sbs = [SQLiteSandbox(p) for p in paths]
    finally:
        guards.CACHE_SIZE_KIB = keep
    opened = sqlite_memory_used() - base
    for sb in sbs:
        for table in sb.schema:
            sb.execute('SELECT * FROM "' + table.replace('"', '""') + '"')
    warm = sqlite_memory_used() - base
    for sb in sbs:
        sb.close()
    return dict(opened=opened, warm=warm, per_sandbox=warm / max(1, len(paths)))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3, help="runs per case (default 3)")
    ap.add_argument("--case", action="append", help="run only the cases whose name contains this (repeatable)")
    ap.add_argument("--neighbours", action="store_true",
                    help="each child first opens 64 warm sandboxes, a vector env of 16 and a trainer's SQLite")
    ap.add_argument("--idle", action="store_true", help="only measure what 64 idle sandboxes with warm caches hold")
    args = ap.parse_args(argv)
    if args.idle:
        with tempfile.TemporaryDirectory() as tmp:
            paths = neighbour_dbs(64, toy_db(Path(tmp)))
            print(f"64 sandboxes over {len(set(paths))} databases of ../shared/data over 2 MiB, every table scanned:")
            for kib in (None, 2000):
                m = idle_sandbox_memory(paths, kib)
                label = f"cache_size {kib if kib else guards_cache()} KiB"
                print(f"  {label:<22} opened {m['opened'] / _MIB:6.1f} MiB, warm {m['warm'] / _MIB:6.1f} MiB, "
                      f"{m['per_sandbox'] / 1024:6.0f} KiB per sandbox")
        return
    cases = [c for c in CASES if not args.case or any(s.lower() in c.name.lower() for s in args.case)]
    with tempfile.TemporaryDirectory() as tmp:
        db = toy_db(Path(tmp))
        res = run_cases(cases, db, args.reps, neighbours_job(db) if args.neighbours else None)
    head = (f"{'case':<36} {'limit s':>7} {'wall med':>8} {'wall max':>8} {'bound s':>7} {'ratio max':>9} "
            f"{'rss MiB':>8} {'cap MiB':>7} {'tmp':>3}  ok  stopped by")
    print(f"hostile SQL: wall time and peak-RSS growth per statement, {args.reps} run(s) per case, each case in a "
          f"child process; bound: wall <= 1.1 x limit + {SLACK_S:g} s, RSS growth <= {MEMORY_CAP_BYTES / _MIB:.0f} MiB")
    print(head)
    print("-" * len(head))
    worst = 0.0
    for c in cases:
        runs = res[c.name]
        walls = [r["wall"] for r in runs]
        rss = max(r["rss_growth"] for r in runs) / _MIB
        bound = 1.1 * c.timeout_s + SLACK_S
        ok = (max(walls) <= bound and rss * _MIB <= MEMORY_CAP_BYTES and not any(r["temp_files"] for r in runs)
              and all(c.expected(r["kind"], r["message"]) for r in runs))
        worst = max(worst, max(walls) / bound)
        last = runs[-1]
        print(f"{c.name + (' *' if c.core else ''):<36} {c.timeout_s:>7g} {statistics.median(walls):>8.3f} "
              f"{max(walls):>8.3f} {bound:>7.2f} {max(walls) / c.timeout_s:>9.2f} {rss:>8.1f} "
              f"{MEMORY_CAP_BYTES / _MIB:>7.0f} {max(r['temp_files'] for r in runs):>3}  {'yes' if ok else 'NO '} "
              f"{last['kind']}: {last['message'][:60]}")
    if args.neighbours:
        held = [r["held"] for c in cases for r in res[c.name]]
        print(f"(each child held {min(held) / _MIB:.0f}-{max(held) / _MIB:.0f} MiB of SQLite memory before each "
              f"statement: 64 warm sandboxes, a vector env of 16, a {BALLAST_MIB} MiB in-memory database)")
    print(f"(* a case of the core hostile input list; ok: within both bounds, no temporary file, and stopped by "
          f"the expected mechanism; worst wall / bound: {worst:.2f})")


if __name__ == "__main__":
    main()
