"""Wall time of an evaluation on the local runner and on the Ray backend, side by side in one run
(``docs/platform.md`` "Ray"). Prints seconds, not a target: on one machine Ray only adds start-up (the instance,
the actors, one feedback judge per actor); it pays where the actors outnumber one machine's cores.

    python bench/bench_ray.py [--dataset embedded] [--agent oracle] [--actors 2] [--limit N]

Measured, in this order, in one process: the local runner cold (the first evaluation in the process: the
feedback judge's model loads), the local runner warm, ``ray.init`` of a local instance with ``--actors``
CPUs, and the Ray evaluation (actors start, each loads its judge, plays its chunks). Each evaluation's
metrics are checked equal.
"""
from __future__ import annotations

import argparse
import os
import time


def main() -> None:
    """Run the measurement and print one line per phase (seconds) and the ratios."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="embedded")
    p.add_argument("--agent", default="oracle")
    p.add_argument("--actors", type=int, default=2)
    p.add_argument("--limit", type=int, default=None)
    a = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

    from textsql_clarify.baselines.agents import make_agent
    from textsql_clarify.rollout.ray_runner import init_ray, import_ray
    from textsql_clarify.rollout.evaluation import evaluate
    from textsql_clarify.datasets import load_dataset

    samples = load_dataset(a.dataset, limit=a.limit)
    t = time.perf_counter()
    _, m_cold = evaluate(samples, make_agent(a.agent), progress=False)
    cold = time.perf_counter() - t
    t = time.perf_counter()
    _, m_warm = evaluate(samples, make_agent(a.agent), progress=False)
    warm = time.perf_counter() - t
    ray = import_ray()
    t = time.perf_counter()
    init_ray("local", num_cpus=a.actors)
    init = time.perf_counter() - t
    t = time.perf_counter()
    _, m_ray = evaluate(samples, make_agent(a.agent), progress=False, backend="ray", ray_actors=a.actors)
    on_ray = time.perf_counter() - t
    ray.shutdown()
    assert m_cold == m_warm == m_ray, "the Ray backend's metrics differ from the local runner's"
    n = len(samples)
    print(f"{a.dataset} {a.agent}: n={n} episodes, {os.cpu_count()} cores (loaded or idle: see uptime)")
    print(f"local, cold (judge loads):           {cold:8.2f} s")
    print(f"local, warm:                         {warm:8.2f} s")
    print(f"ray.init (local, {a.actors} CPUs):             {init:8.2f} s")
    print(f"Ray, {a.actors} actors (start + play):         {on_ray:8.2f} s")
    print(f"Ray total / local cold: {(init + on_ray) / cold:.2f}x; Ray eval / local cold: {on_ray / cold:.2f}x; "
          f"metrics identical: yes")


if __name__ == "__main__":
    main()
