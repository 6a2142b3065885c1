"""Benchmark: OpenEnv session isolation on one database, against a local server.

The server is ``python -m textsql_clarify.integrations.openenv_server --dataset embedded`` (48 samples, one
database) in a subprocess on a free 127.0.0.1 port, ``--log-level warning``, once per ``--modes`` value of
``--sql-connection`` (``private``: each session's own connection, the server's default; ``shared``: one
locked connection per database, the former behaviour). The clients are raw WebSocket clients speaking
OpenEnv's ``/ws`` protocol (``reset`` / ``step`` / ``close`` JSON messages) in this process's event loop.

Phases, per mode:

* ``baseline``: ``--sessions`` sessions (32) each play episodes back to back for ``--seconds``: reset on an
  answerable sample, then one step with its gold SQL. Step latency is the time from sending the step to
  its reply; calls/s counts resets and steps. Calls that start in the first ``--warmup`` seconds are
  left out.
* ``slow``: the same, but ``--slow`` of the sessions (4) send a query that runs to the server's time limit
  (5 s: a recursive CTE without end) back to back instead. The table gives the other sessions' figures
  and their p95 step latency over the baseline's (target: within 1.5x).
* ``drop``: ``--drop-clients`` clients (8, the server's default ``--max-concurrent-envs``; the server runs
  with that many slots in this phase) each reset, send the slow query, and close their socket 0.2 s later
  without reading the reply. Then a new client tries to open a session every 50 ms: the table gives the
  seconds from the drops to the first session granted, the CAPACITY_REACHED refusals on the way, and the
  refusals when ``--drop-clients`` clients then open sessions at once (0 when every slot came back).
* ``cycles``: ``--cycles`` sessions (1,000) opened and closed, 4 at a time, each playing one episode (reset,
  gold SQL step, close message); the server's RSS (``/proc/<pid>/status`` VmRSS) after 50 warm-up cycles
  and after the rest (target: +< 10 MB).

Also: the server's log lines and bytes over the whole run (tracebacks included), per closed session.

Usage::

    python bench/bench_openenv_sessions.py                       # both modes, 15 s phases, 1,000 cycles
    python bench/bench_openenv_sessions.py --seconds 8 --cycles 300 --modes private --json out.json
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import websockets

ROOT = Path(__file__).resolve().parent.parent
SLOW_SQL = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
SLOW_SAMPLE = "uni-ans-001"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """The OpenEnv server in a subprocess; ``url`` its ``/ws`` address, ``rss_mb()`` its resident memory."""

    def __init__(self, mode: str, max_envs: int):
        self.port = _free_port()
        self.log = tempfile.NamedTemporaryFile("w+b", suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "textsql_clarify.integrations.openenv_server", "--dataset", "embedded",
             "--port", str(self.port), "--log-level", "warning", "--max-concurrent-envs", str(max_envs),
             "--sql-connection", mode], cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT)
        self.url = f"ws://127.0.0.1:{self.port}/ws"
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2):
                    break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"server did not start: {Path(self.log.name).read_text()[-2000:]}")
                time.sleep(0.2)
        self.log_start = Path(self.log.name).stat().st_size

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def log_figures(self) -> tuple[int, int, int]:
        """(lines, bytes, tracebacks) the server logged since it started serving."""
        text = Path(self.log.name).read_bytes()[self.log_start:]
        return text.count(b"\n"), len(text), text.count(b"Traceback (most recent call last)")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        os.unlink(self.log.name)


async def _call(ws, kind: str, data: dict) -> dict:
    await ws.send(json.dumps({"type": kind, "data": data}))
    return json.loads(await ws.recv())


def _answerable() -> list[tuple[str, str]]:
    from textsql_clarify.datasets import load_dataset

    return [(s.id, f"<sql>{s.gold_sql}</sql>") for s in load_dataset("embedded")
            if s.group == "answerable" and s.gold_sql and s.drift is None]


async def _player(url: str, episodes: list, slow: bool, t_measure: float, t_stop: float, out: dict) -> None:
    """Play episodes until ``t_stop``; record step latencies and call counts of calls started after ``t_measure``."""
    try:
        async with websockets.connect(url, max_size=None, open_timeout=60) as ws:
            k = 0
            while time.monotonic() < t_stop:
                sid, action = (SLOW_SAMPLE, f"<sql>{SLOW_SQL}</sql>") if slow else episodes[k % len(episodes)]
                k += 1
                t0 = time.monotonic()
                r = await _call(ws, "reset", {"sample_id": sid})
                if t0 >= t_measure:
                    out["calls"] += 1
                    out["errors"] += r.get("type") == "error"
                t1 = time.monotonic()
                r = await _call(ws, "step", {"action": action})
                dt = time.monotonic() - t1
                if t1 >= t_measure:
                    out["calls"] += 1
                    out["errors"] += r.get("type") == "error"
                    out["steps"].append(dt)
    except Exception as e:  # noqa: BLE001 - counted, the phase goes on
        out["errors"] += 1
        out.setdefault("exceptions", []).append(repr(e)[:200])


async def _load_phase(url: str, sessions: int, slow: int, seconds: float, warmup: float) -> dict:
    episodes = _answerable()
    now = time.monotonic()
    t_measure, t_stop = now + warmup, now + warmup + seconds
    normal = {"calls": 0, "errors": 0, "steps": []}
    slowed = {"calls": 0, "errors": 0, "steps": []}
    tasks = [_player(url, episodes[i:] + episodes[:i], i < slow, t_measure, t_stop, slowed if i < slow else normal)
             for i in range(sessions)]
    await asyncio.gather(*tasks)
    steps = sorted(normal["steps"])
    q = statistics.quantiles(steps, n=100) if len(steps) >= 2 else [float("nan")] * 99
    return {"sessions": sessions - slow, "calls_per_s": normal["calls"] / seconds, "steps": len(steps),
            "p50_s": q[49], "p95_s": q[94], "max_s": steps[-1] if steps else float("nan"),
            "errors": normal["errors"], "slow_steps": len(slowed["steps"]), "slow_errors": slowed["errors"],
            "exceptions": normal.get("exceptions", [])[:3]}


async def _try_session(url: str, sample_id: str = SLOW_SAMPLE) -> tuple[object | None, bool]:
    """(open socket with a session reset on ``sample_id``, or None; whether the refusal was CAPACITY_REACHED)."""
    ws = await websockets.connect(url, max_size=None, open_timeout=60)
    try:
        try:
            await ws.send(json.dumps({"type": "reset", "data": {"sample_id": sample_id}}))
        except websockets.ConnectionClosed:
            pass
        r = json.loads(await ws.recv())
    except websockets.ConnectionClosed:
        await ws.close()
        return None, False
    if r.get("type") == "error":
        await ws.close()
        return None, r.get("data", {}).get("code") == "CAPACITY_REACHED"
    return ws, False


async def _drop_phase(url: str, clients: int) -> dict:
    dropped = []
    for _ in range(clients):
        ws = await websockets.connect(url, max_size=None, open_timeout=60)
        await _call(ws, "reset", {"sample_id": SLOW_SAMPLE})
        await ws.send(json.dumps({"type": "step", "data": {"action": f"<sql>{SLOW_SQL}</sql>"}}))
        dropped.append(ws)
    await asyncio.sleep(0.2)
    t0 = time.monotonic()
    await asyncio.gather(*(ws.close() for ws in dropped))
    refused = 0
    while True:
        ws, capacity = await _try_session(url)
        if ws is not None:
            freed_s = time.monotonic() - t0
            await ws.close()
            break
        refused += capacity
        if time.monotonic() - t0 > 120:
            freed_s = float("inf")
            break
        await asyncio.sleep(0.05)
    opened = await asyncio.gather(*(_try_session(url) for _ in range(clients)))
    at_once_refused = sum(1 for ws, cap in opened if ws is None and cap)
    await asyncio.gather(*(ws.close() for ws, _ in opened if ws is not None))
    return {"first_session_s": freed_s, "capacity_refusals": refused, "refused_of_all_at_once": at_once_refused}


async def _cycles(url: str, n: int) -> dict:
    """``n`` sessions, 4 at a time, each one episode; ``{"errors": ..., "refused": ...}`` (refused: the server
    had not yet freed the slot of a session that had just closed)."""
    episodes = _answerable()
    counts = {"errors": 0, "refused": 0}
    todo = iter(range(n))

    async def worker():
        for i in todo:
            sid, action = episodes[i % len(episodes)]
            try:
                ws, capacity = await _try_session(url, sid)
                if ws is None:
                    counts["refused" if capacity else "errors"] += 1
                    continue
                async with ws:
                    counts["errors"] += (await _call(ws, "step", {"action": action})).get("type") == "error"
                    await ws.send(json.dumps({"type": "close", "data": {}}))
            except Exception:  # noqa: BLE001 - counted
                counts["errors"] += 1

    await asyncio.gather(*(worker() for _ in range(4)))
    return counts


def run_mode(mode: str, args: argparse.Namespace) -> dict:
    out: dict = {"mode": mode}
    server = Server(mode, max_envs=args.sessions + 8)
    try:
        out["baseline"] = asyncio.run(_load_phase(server.url, args.sessions, 0, args.seconds, args.warmup))
        out["slow"] = asyncio.run(_load_phase(server.url, args.sessions, args.slow, args.seconds, args.warmup))
        base, slow = out["baseline"]["p95_s"], out["slow"]["p95_s"]
        out["p95_ratio"] = slow / base if base else float("nan")
        out["log"] = server.log_figures()
        out["sessions_closed"] = 2 * args.sessions
    finally:
        server.stop()
    server = Server(mode, max_envs=args.drop_clients)
    try:
        out["drop"] = asyncio.run(_drop_phase(server.url, args.drop_clients))
        if args.cycles:
            asyncio.run(_cycles(server.url, 50))
            rss0 = server.rss_mb()
            t0 = time.monotonic()
            counts = asyncio.run(_cycles(server.url, args.cycles))
            out["cycles"] = {"n": args.cycles, **counts, "rss_before_mb": rss0, "rss_after_mb": server.rss_mb(),
                             "per_s": args.cycles / (time.monotonic() - t0)}
        lines, nbytes, tracebacks = server.log_figures()
        closed = args.drop_clients * 2 + 1 + (args.cycles + 50 if args.cycles else 0)
        out["log_drop_cycles"] = (lines, nbytes, tracebacks, closed)
    finally:
        server.stop()
    return out


def _print(results: list[dict], args: argparse.Namespace) -> None:
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else "?"
    print(f"machine: {os.cpu_count()} CPUs, load average at the end {' '.join(load)}; sessions {args.sessions} "
          f"({args.slow} slow), {args.seconds:g} s per phase after {args.warmup:g} s warm-up")
    print("| mode | phase | sessions measured | calls/s | step p50 s | step p95 s | step max s | errors |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        for phase in ("baseline", "slow"):
            p = r[phase]
            print(f"| {r['mode']} | {phase} | {p['sessions']} | {p['calls_per_s']:.1f} | {p['p50_s']:.3f} | "
                  f"{p['p95_s']:.3f} | {p['max_s']:.3f} | {p['errors']} |")
    print()
    print("| mode | p95 slow / baseline | drop: first session after s | CAPACITY_REACHED on the way | refused of "
          f"{args.drop_clients} at once | cycles | RSS before MB | RSS after MB | delta MB | log lines / bytes / tracebacks "
          "(load phases) | (drop + cycles) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for r in results:
        d, c = r["drop"], r.get("cycles")
        cyc = (f"{c['n']} ({c['errors']} errors, {c['refused']} refused, {c['per_s']:.0f}/s) | {c['rss_before_mb']:.1f} | {c['rss_after_mb']:.1f} | "
               f"{c['rss_after_mb'] - c['rss_before_mb']:+.1f}") if c else "- | - | - | -"
        lines, nbytes, tb = r["log"]
        l2, b2, tb2, closed = r["log_drop_cycles"]
        print(f"| {r['mode']} | {r['p95_ratio']:.2f} | {d['first_session_s']:.2f} | {d['capacity_refusals']} | "
              f"{d['refused_of_all_at_once']} | {cyc} | {lines} / {nbytes} / {tb} ({r['sessions_closed']} sessions) | "
              f"{l2} / {b2} / {tb2} ({closed} sessions) |")
    for r in results:
        for phase in ("baseline", "slow"):
            if r[phase]["exceptions"]:
                print(f"{r['mode']} {phase} exceptions: {r[phase]['exceptions']}")


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=32)
    ap.add_argument("--slow", type=int, default=4, help="sessions sending the slow query in the 'slow' phase")
    ap.add_argument("--seconds", type=float, default=15.0, help="measured seconds per load phase")
    ap.add_argument("--warmup", type=float, default=3.0, help="unmeasured seconds at the start of a load phase")
    ap.add_argument("--drop-clients", type=int, default=8)
    ap.add_argument("--cycles", type=int, default=1000, help="session open/close cycles for RSS (0: skip)")
    ap.add_argument("--modes", default="private,shared", help="comma-separated --sql-connection values")
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args(argv)
    results = [run_mode(m, args) for m in args.modes.split(",")]
    _print(results, args)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    return results


if __name__ == "__main__":
    main()
