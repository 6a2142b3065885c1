"""Benchmark: the vector envs against a plain loop over one env, side by side in one run.

Workloads (Spider dev, 1,034 golds, one episode per sample: the seeded draw of the env, then one action):

* ``sql``: the gold SQL with EX only (``detailed_scores=False``, preset ``binary``): the cheapest step, where
  any per-step overhead of a vector env shows most;
* ``sql-detailed``: the same with the article's detailed scores on (the env's default).

Settings, each timed on a fresh env over the same number of episodes, all through ``gym.make`` /
``gym.make_vec``:

* ``loop``: ``gym.make("TextSQLClarify-v0")``, ``reset(options={"sample_id": ...})`` then ``step(gold)`` per
  episode (the baseline), over a fixed shuffled order of the 1,034 samples;
* ``sync N``: ``gym.make_vec(..., num_envs=N)`` (:class:`~textsql_clarify.envs.vector.TextSQLClarifyVectorEnv`):
  ``reset(options={"sample_ids": [...]})`` with the next N samples of the same order, then one step of N gold
  SQL actions (the GRPO pattern): the same episodes as the loop;
* ``async N``: ``gym.make_vec(..., num_envs=N, vectorization_mode="async")`` (Gymnasium's ``AsyncVectorEnv``,
  shared memory on, a worker process per sub-env; start-up not timed). Its sub-envs take one options dict, so
  they play their seeded draws, autoreset ``next_step`` (one step answers, the next resets; the agent reads
  ``info["sample_id"]``): other samples than the loop's, about as many of each over 1,000 episodes;
* ``compact N``: the same episodes as ``async N`` through
  :class:`~textsql_clarify.envs.async_vector.TextSQLClarifyAsyncVectorEnv` (``make_async_vector_env``): the
  worker sends each info as arrays and the parent merges by plan (the async results, less parent work);
* ``compact-same N``: the same env with ``autoreset_mode=same_step``: a step that ends an episode resets at
  once (the new episode's info at the top, the old one under ``final_info``), so a one-action episode costs
  one round trip instead of two.

Every setting's env is built once and warmed (``--warmup`` untimed episodes, in the order; an async env gets
3 N times as many seeded draws, so that each worker has met ~95% of the samples: the static per-sample caches
and the gold results reach their steady state); then each round times every setting once,
in order (so load drifts hit all of them). The ratio is episodes/s over the loop's in the same round, and the
table gives the median over ``--rounds``. It also gives the CPU seconds per episode (this process plus an async
env's worker processes, from ``/proc``) and the loop's CPU over the setting's: a loaded machine disturbs CPU
time less than wall-clock time, and for an async env it says how much work the parallel run adds (on 2 idle
cores its wall-clock ratio cannot pass twice its CPU ratio). Targets (``docs/platform.md`` "Vector and async envs"):
sync >= 1.0x the loop for every N on these workloads (the SQL step has nothing to batch), async with 2
workers >= 1.7x the loop on 2 idle cores.

Two more workloads show what batching buys where the user batches (not run by default):

* ``--clarify-ms X``: every episode asks one clarification first, to a rule-based user that costs
  ``X`` ms per ``respond`` call (a model server's round trip, simulated with ``time.sleep``) however many
  requests the call carries; sync N answers the N sub-envs' clarifications in one call.
* ``--transformers``: the old whole-evaluation comparison with the transformers user (SmolLM2-135M on the
  CPU by default): ``evaluate(..., num_envs=N)`` on the embedded ambiguous samples.

Usage::

    python bench/bench_vector_env.py                                   # sql + sql-detailed, 3 rounds
    python bench/bench_vector_env.py --episodes 4000 --rounds 5 --json out.json
    python bench/bench_vector_env.py --workloads sql --clarify-ms 5
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

SPIDER = REPO.parent / "shared" / "data" / "spider_dev"
WORKLOADS = {"sql": {"detailed_scores": False, "reward_preset": "binary"},
             "sql-detailed": {"detailed_scores": True, "reward_preset": "binary"}}
TARGETS = {"sync": 1.0, "async": 1.7, "compact": 1.7, "compact-same": 1.7}


class SlowUser:
    """The rule-based user plus a fixed cost per ``respond`` call (``time.sleep(ms / 1000)``), whatever the
    batch size: a stand-in for a model server's round trip."""

    def __init__(self, ms: float):
        from textsql_clarify.simulators.rule_based import RuleBasedUser

        self.inner, self.ms, self.calls = RuleBasedUser(), ms, 0

    def respond(self, batch):
        self.calls += 1
        time.sleep(self.ms / 1000)
        return self.inner.respond(batch)


def _golds(samples) -> dict[str, str]:
    return {s.id: f"<sql>{s.gold_sql}</sql>" for s in samples}


def _worker_cpu(pids: list[int]) -> float:
    """CPU seconds (user + system) the processes ``pids`` have used so far (Linux ``/proc``; 0 elsewhere)."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            pass
    return total


class Setting:
    """One way of running episodes (``loop``, ``sync N`` or ``async N``), its env built and warmed once.

    Args:
        mode: ``"loop"`` (``gym.make``), ``"sync"`` or ``"async"`` (``gym.make_vec``).
        n: number of sub-envs (1 for the loop).
        kwargs: env options. golds: sample id -> gold SQL action. clarify: one clarification per episode first.
    """

    def __init__(self, env_id: str, mode: str, n: int, kwargs: dict, golds: dict, clarify: bool, order: list[str]):
        import gymnasium as gym

        self.mode, self.n, self.golds, self.clarify, self.order = mode, n, golds, clarify, order
        self.name = "loop" if mode == "loop" else f"{mode} {n}"
        if mode == "loop":
            self.env = gym.make(env_id, **kwargs)
        elif mode == "compact":  # the compact worker and merge (textsql_clarify.envs.async_vector)
            from textsql_clarify.envs.async_vector import make_async_vector_env

            self.env = make_async_vector_env(n, **kwargs)
        elif mode == "compact-same":  # the same, autoreset same_step: one round trip per episode, not two
            from gymnasium.vector.vector_env import AutoresetMode

            from textsql_clarify.envs.async_vector import make_async_vector_env

            self.env = make_async_vector_env(n, vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP}, **kwargs)
        else:
            self.env = gym.make_vec(env_id, num_envs=n, vectorization_mode=None if mode == "sync" else mode, **kwargs)
        self.pids = [p.pid for p in getattr(self.env, "processes", [])]
        _, self.info = self.env.reset(seed=0)

    def run(self, episodes: int) -> tuple[float, float]:
        """``(wall-clock seconds, CPU seconds of this process and its async workers)`` for ``episodes``
        finished episodes. The loop and the sync env play the samples of ``order`` from its start (the same
        episodes: ``reset(options={"index": ...})`` / ``{"indices": [...]}``, then the gold SQL); the async env
        (whose sub-envs take one options dict) plays its seeded draws, autoreset ``next_step``: one step
        answers, the next one resets."""
        t0, c0, w0 = time.perf_counter(), time.process_time(), _worker_cpu(self.pids)
        done, env, info, order = 0, self.env, self.info, self.order
        if self.mode == "loop":
            for k in range(episodes):
                _, info = env.reset(options={"sample_id": order[k % len(order)]})
                if self.clarify:
                    env.step("<clarify>Which one do you mean?</clarify>")
                env.step(self.golds[info["sample_id"]])
            done = episodes
        elif self.mode == "sync":
            while done < episodes:
                ids = [order[(done + i) % len(order)] for i in range(self.n)]
                env.reset(options={"sample_ids": ids})
                if self.clarify:
                    env.step(["<clarify>Which one do you mean?</clarify>"] * self.n)
                env.step([self.golds[sid] for sid in ids])
                done += self.n
        elif self.mode == "compact-same":  # each step ends the episode and resets (info: the new episode's)
            while done < episodes:
                if self.clarify:
                    env.step(["<clarify>Which one do you mean?</clarify>"] * self.n)
                _, _, term, trunc, info = env.step([self.golds[sid] for sid in info["sample_id"]])
                done += int(term.sum() + trunc.sum())
        else:  # async / compact
            while done < episodes:
                if self.clarify:
                    env.step(["<clarify>Which one do you mean?</clarify>"] * self.n)
                _, _, term, trunc, info = env.step([self.golds[sid] for sid in info["sample_id"]])
                done += int(term.sum() + trunc.sum())
                _, _, _, _, info = env.step([""] * self.n)  # the autoreset step: actions ignored
        self.info = info
        wall = time.perf_counter() - t0
        cpu = time.process_time() - c0 + _worker_cpu(self.pids) - w0
        return wall * episodes / done, cpu * episodes / done

    def close(self) -> None:
        self.env.close()


def _echo(conn) -> None:
    """A worker that answers each message at once with a step-sized tuple (the pipe floor's other end)."""
    while (msg := conn.recv()) is not None:
        conn.send(((None, 0.0, False, False, (0, None, b"", (msg,)), ()), True))


def pipe_floor(n: int, trips: int = 20000) -> dict:
    """What one lockstep round trip to ``n`` worker processes costs with no env at all: the parent sends a
    short action down each of ``n`` pipes and reads a step-sized reply from each (as ``AsyncVectorEnv`` does
    per step). Returns wall-clock and CPU (parent, workers) microseconds per round trip."""
    import multiprocessing as mp

    ctx = mp.get_context()
    pipes, procs = [], []
    for _ in range(n):
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_echo, args=(child,), daemon=True)
        proc.start()
        pipes.append(parent)
        procs.append(proc)
    try:
        for _ in range(200):
            for p in pipes:
                p.send("<sql>SELECT 1</sql>")
            for p in pipes:
                p.recv()
        t0, c0, w0 = time.perf_counter(), time.process_time(), _worker_cpu([p.pid for p in procs])
        for _ in range(trips):
            for p in pipes:
                p.send("<sql>SELECT 1</sql>")
            for p in pipes:
                p.recv()
        return {"workers": n, "wall_us": round((time.perf_counter() - t0) / trips * 1e6, 1),
                "parent_cpu_us": round((time.process_time() - c0) / trips * 1e6, 1),
                "workers_cpu_us": round((_worker_cpu([p.pid for p in procs]) - w0) / trips * 1e6, 1)}
    finally:
        for p in pipes:
            p.send(None)
        for proc in procs:
            proc.join(5)


def bench_workloads(args) -> dict:
    """Build and warm every setting, then time each once per round; ratios to the loop of the same round."""
    import textsql_clarify  # noqa: F401  (registers the env)
    from textsql_clarify import ENV_ID
    from textsql_clarify.datasets import load_dataset

    spec = f"spider:{args.spider}"
    samples = load_dataset(spec)
    golds = _golds(samples)
    out = {}
    for name in args.workloads:
        kwargs = dict(WORKLOADS[name], dataset=spec)
        clarify = args.clarify_ms is not None
        if clarify:
            kwargs["simulator"] = SlowUser(args.clarify_ms)
        order = [samples[i].id for i in random.Random(0).sample(range(len(samples)), len(samples))]
        settings = [Setting(ENV_ID, "loop", 1, kwargs, golds, clarify, order)]
        settings += [Setting(ENV_ID, "sync", n, kwargs, golds, clarify, order) for n in args.sync]
        settings += [Setting(ENV_ID, mode, n, kwargs, golds, clarify, order) for n in args.async_
                     for mode in ("async", "compact", "compact-same")]
        try:
            for st in settings:  # steady state: static caches and gold results warm, in every async worker too
                # (an async worker meets seeded draws: 3 x 1,034 of them reach ~95% of the samples)
                st.run(args.warmup * (3 * st.n if st.mode in ("async", "compact", "compact-same") else 1))
            secs: dict[str, list[tuple[float, float]]] = {st.name: [] for st in settings}
            for _ in range(args.rounds):
                for st in settings:
                    secs[st.name].append(st.run(args.episodes))
        finally:
            for st in settings:
                st.close()
        rows = []
        for key, ts in secs.items():
            ratios = [loop[0] / t[0] for loop, t in zip(secs["loop"], ts)]
            cpu = statistics.median(loop[1] / t[1] for loop, t in zip(secs["loop"], ts))
            rows.append({"setting": key, "episodes_per_s": round(args.episodes / statistics.median(t[0] for t in ts), 1),
                         "ratio": round(statistics.median(ratios), 2), "ratios": [round(r, 2) for r in ratios],
                         "cpu_ratio": round(cpu, 2), "cpu_us_per_episode": round(statistics.median(t[1] for t in ts)
                                                                                  / args.episodes * 1e6),
                         "target": TARGETS.get(key.split()[0])})
        out[name + (f"+clarify{args.clarify_ms:g}ms" if clarify else "")] = rows
    return out


def bench_transformers(args) -> dict:
    """The whole-evaluation comparison with the transformers user (one episode at a time vs N in lockstep)."""

    import torch

    from textsql_clarify.baselines.agents import OracleAgent
    from textsql_clarify.rollout.evaluation import evaluate
    from textsql_clarify.datasets import load_dataset
    from textsql_clarify.simulators.transformers_user import TransformersUserSimulator

    class CountingUser:
        def __init__(self, inner):
            self.inner, self.calls, self.requests = inner, 0, 0

        def respond(self, batch):
            self.calls += 1
            self.requests += len(batch)
            return self.inner.respond(batch)

    counts = sorted({1, *args.sync})
    amb = [s for s in load_dataset("embedded") if s.group == "ambiguous"]
    sim = TransformersUserSimulator(None, device=args.device)
    user = CountingUser(sim)
    evaluate(amb[: max(counts)], OracleAgent(), progress=False, num_envs=max(counts), simulator=user)  # warm-up
    rows, reference = [], None
    for n in counts:
        user.calls = user.requests = 0
        t0 = time.perf_counter()
        trajs, metrics = evaluate(amb, OracleAgent(), progress=False, num_envs=n, simulator=user, detailed_scores=False)
        secs = time.perf_counter() - t0
        labels = [c.user_reply["label"] for t in trajs for c in t.clarifications]
        same = reference is None or (metrics["overall"]["EX"], labels) == reference
        reference = reference or (metrics["overall"]["EX"], labels)
        rows.append({"setting": f"lockstep {n}", "seconds": round(secs, 2), "replies_per_s": user.requests / secs,
                     "mean_batch": round(user.requests / max(user.calls, 1), 2), "same_results": same})
    for r in rows:
        r["ratio"] = round(r.pop("replies_per_s") / (user.requests / rows[0]["seconds"]), 2) if rows else None
    return {"transformers": rows, "torch_threads": torch.get_num_threads()}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spider", type=Path, default=SPIDER, help="Spider root (dev.json, database/)")
    ap.add_argument("--workloads", default="sql,sql-detailed", help=f"comma-separated: {', '.join(WORKLOADS)}")
    ap.add_argument("--sync", default="1,2,4,16", help="sync vector env sizes")
    ap.add_argument("--async", dest="async_", default="2", help="async vector env sizes ('' for none)")
    ap.add_argument("--episodes", type=int, default=2000, help="episodes per setting and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1034, help="untimed episodes per setting (per async worker) first")
    ap.add_argument("--clarify-ms", type=float, default=None, help="one clarification per episode, to a user "
                    "costing this many ms per respond call")
    ap.add_argument("--transformers", action="store_true", help="also the transformers-user evaluation")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    args.sync = [int(x) for x in args.sync.split(",") if x.strip()]
    args.async_ = [int(x) for x in args.async_.split(",") if x.strip()]
    args.workloads = [w for w in args.workloads.split(",") if w.strip()]
    bad = [w for w in args.workloads if w not in WORKLOADS]
    if bad or min(args.sync + args.async_ + [1]) < 1 or args.episodes < 1 or args.rounds < 1:
        ap.error(f"unknown workloads {bad} or non-positive sizes / episodes / rounds")
    if not (args.spider / "dev.json").is_file():
        ap.error(f"no Spider dev at {args.spider} (give --spider)")
    result = {"episodes": args.episodes, "rounds": args.rounds, "cpus": os.cpu_count(),
              "loadavg_1min": round(os.getloadavg()[0], 2), "workloads": bench_workloads(args)}
    print(f"vector envs vs a loop over one env: Spider dev, {args.episodes} episodes per setting, median of "
          f"{args.rounds} rounds, {result['cpus']} CPUs, load average {result['loadavg_1min']} at start")
    for name, rows in result["workloads"].items():
        print(f"\n{name}")
        print(f"{'setting':>14} {'episodes/s':>11} {'x loop':>7} {'target':>7} {'CPU us/ep':>10} {'x loop CPU':>11}"
              f"  per round (wall)")
        for r in rows:
            target = "" if r["target"] is None else f">={r['target']:.1f}"
            print(f"{r['setting']:>14} {r['episodes_per_s']:>11.1f} {r['ratio']:>7.2f} {target:>7} "
                  f"{r['cpu_us_per_episode']:>10} {r['cpu_ratio']:>11.2f}  {r['ratios']}")
    if args.async_:
        result["pipe_floor"] = [pipe_floor(n) for n in args.async_]
        print("\nthe pipe floor: one lockstep round trip to N echo workers, no env (an async step pays at least this)")
        for r in result["pipe_floor"]:
            print(f"  N={r['workers']}: {r['wall_us']} us wall, CPU {r['parent_cpu_us']} us parent + "
                  f"{r['workers_cpu_us']} us workers")
    if args.transformers:
        result["transformers"] = bench_transformers(args)
        print("\nevaluation with the transformers user (lockstep, ratio of replies/s)")
        for r in result["transformers"]["transformers"]:
            print(f"{r['setting']:>12} {r['seconds']:>8.2f}s  mean batch {r['mean_batch']:>5.2f}  x1 {r['ratio']:.2f}  "
                  f"same {r['same_results']}")
    result["loadavg_1min_end"] = round(os.getloadavg()[0], 2)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str))
    return result


if __name__ == "__main__":
    main()
