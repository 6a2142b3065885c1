"""A/B record of the EX-only step: rewards, reward components, episode scores and the EX verdicts (status,
score, reason, column mapping), so that a change to how the EX path reads the SQL can be shown to change none
of them.

Predictions, each scored through the env with ``detailed_scores=False`` under the presets ``binary`` and
``shaped`` (one step per prediction; a red-team episode runs to its end):

* the embedded set's golds and Spider dev's golds;
* the perturbations of ``bench/bench_exact_match.py`` (alias rename, select reorder, where reorder, value
  change, aggregate change, dropped condition, flipped order, dropped GROUP BY) of every Spider dev gold;
* two spellings that only whitespace tells apart from the gold (spaces after the first word, a newline
  before ``FROM``), and the gold with one extra space inside its first string literal (a different query:
  a cache keyed by whitespace-normalised text must keep it apart);
* the SQL red-team policies (``textsql_clarify.redteam.policies``, kinds ``sql`` and ``mutation``) on every
  ``--hack-stride``-th Spider dev sample;
* the golds and whitespace spellings once more (a second epoch: every text seen before).

Beside each env step, :func:`textsql_clarify.rewards.execution.score_execution` is called directly on the
same SQL (relaxed and strict verdicts with their reasons). One JSON line per step goes to ``--out``;
``--compare A B`` reads two such files and prints how many records are identical.

    python bench/bench_ex_lazy_ab.py --out before.jsonl [--spider ../shared/data/spider_dev] [--hack-stride 3]
    python bench/bench_ex_lazy_ab.py --compare before.jsonl after.jsonl
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

PRESETS = ("binary", "shaped")
WS_KINDS = ("ws_spaces", "ws_newline")


def _ws_spaces(sql: str) -> str:
    head, _, rest = sql.partition(" ")
    return head + "   " + rest


def _ws_newline(sql: str) -> str | None:
    m = re.search(r"\s+FROM\s", sql, re.IGNORECASE)
    return None if m is None else sql[:m.start()] + "\n  FROM " + sql[m.end():]


def _literal_space(sql: str) -> str | None:
    m = re.search(r"'([^']*?) ([^']*)'", sql)
    return None if m is None else sql[:m.start()] + f"'{m.group(1)}  {m.group(2)}'" + sql[m.end():]


def _verdicts(sandbox, sample, pred_sql: str, gold_key: str) -> dict:
    from textsql_clarify.rewards.execution import score_execution
    gold = sandbox.execute_gold(gold_key, sample.gold_sql)
    relaxed, strict = score_execution(sandbox.execute(pred_sql), gold, pred_sql, sample.gold_sql, sandbox,
                                      gold_key=gold_key)
    return {k: [v.score, v.status, v.reason, list(v.column_mapping) if v.column_mapping else None,
                v.second_answer] for k, v in (("relaxed", relaxed), ("strict", strict))}


class _Recorder:
    """Wraps a policy and keeps the SQL of its actions (for the direct verdicts)."""

    def __init__(self, policy):
        self.policy, self.sql = policy, []
        self.privileged = getattr(policy, "privileged", False)

    def begin_episode(self, sample):
        self.sql = []
        self.policy.begin_episode(sample)

    def act(self, obs, info):
        a = self.policy.act(obs, info)
        m = re.match(r"<sql>(.*)</sql>$", a, re.DOTALL)
        if m:
            self.sql.append(m.group(1))
        return a


def record(args) -> int:
    import bench_exact_match as bem
    from textsql_clarify.redteam.policies import HACKS, play
    from textsql_clarify.datasets import load_dataset
    from textsql_clarify.envs.env import TextSQLClarifyEnv
    from textsql_clarify.sql.sandbox import SQLiteSandbox

    sets = {"embedded": load_dataset("embedded"), "spider": load_dataset(f"spider:{args.spider}", limit=args.limit)}
    sandboxes: dict[str, SQLiteSandbox] = {}
    kinds = dict(bem.KINDS)
    kinds.update(ws_spaces=_ws_spaces, ws_newline=_ws_newline, literal_space=_literal_space)
    out = open(args.out, "w", encoding="utf-8")
    n = 0
    t0 = time.perf_counter()

    def write(rec: dict) -> None:
        nonlocal n
        out.write(json.dumps(rec, sort_keys=True, default=repr) + "\n")
        n += 1

    for preset in PRESETS:
        for set_name, samples in sets.items():
            env = TextSQLClarifyEnv(samples=samples, detailed_scores=False, reward_preset=preset)
            jobs = []  # (kind, index, sql)
            for kind, rewrite in kinds.items():
                if set_name == "embedded" and kind not in ("gold", *WS_KINDS, "literal_space"):
                    continue
                for i, s in enumerate(samples):
                    if not s.gold_sql:
                        continue
                    try:
                        new = rewrite(s.gold_sql)
                    except Exception:  # noqa: BLE001 - a rewrite that does not apply
                        new = None
                    if new is not None:
                        jobs.append((kind, i, new))
            jobs += [("epoch2_" + k, i, q) for k, i, q in jobs if k in ("gold", *WS_KINDS)]
            for kind, i, sql in jobs:
                s = samples[i]
                env.reset(options={"index": i})
                _, r, term, trunc, info = env.step(f"<sql>{sql}</sql>")
                sb = sandboxes.setdefault(s.db_path, SQLiteSandbox(s.db_path))
                write({"preset": preset, "set": set_name, "kind": kind, "sample": s.id, "reward": r,
                       "terminated": term, "truncated": trunc, "components": info.get("reward_components"),
                       "scores": info.get("scores"), "verdicts": _verdicts(sb, s, sql, "ab:" + s.id)})
            env.close()
        spider = sets["spider"]
        idx = list(range(0, len(spider), args.hack_stride))
        env = TextSQLClarifyEnv(samples=spider, detailed_scores=False, reward_preset=preset)
        for name, cls in sorted(HACKS.items()):
            if cls.kind not in ("sql", "mutation"):
                continue
            pol = _Recorder(cls())
            for i in idx:
                ep = play(env, pol, [i])[0]
                s = spider[i]
                sb = sandboxes.setdefault(s.db_path, SQLiteSandbox(s.db_path))
                for k, (atype, post, comps, r) in enumerate(ep.turns):
                    write({"preset": preset, "set": "spider", "kind": "hack:" + name, "sample": s.id, "turn": k,
                           "action_type": atype, "reward": r, "components": comps,
                           "scores": ep.scores if k == len(ep.turns) - 1 else None,
                           "verdicts": _verdicts(sb, s, pol.sql[0], "ab:" + s.id) if k == 0 and pol.sql else None})
        env.close()
    out.close()
    print(f"{n} env steps recorded to {args.out} in {time.perf_counter() - t0:.0f} s")
    return 0


def compare(a: str, b: str) -> int:
    la = Path(a).read_text(encoding="utf-8").splitlines()
    lb = Path(b).read_text(encoding="utf-8").splitlines()
    same = sum(x == y for x, y in zip(la, lb))
    print(f"{a}: {len(la)} steps; {b}: {len(lb)} steps; identical records: {same}")
    diffs = [(k, x, y) for k, (x, y) in enumerate(zip(la, lb)) if x != y]
    for k, x, y in diffs[:10]:
        print(f"  line {k + 1}:\n    A {x[:400]}\n    B {y[:400]}")
    return 0 if same == len(la) == len(lb) else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spider", default=str(REPO.parent / "shared" / "data" / "spider_dev"))
    ap.add_argument("--limit", type=int, default=None, help="first N Spider dev samples (default: all 1,034)")
    ap.add_argument("--hack-stride", type=int, default=3, help="red-team policies on every k-th Spider sample")
    ap.add_argument("--out", help="write the records here (JSON lines)")
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"), help="compare two record files")
    args = ap.parse_args()
    if args.compare:
        return compare(*args.compare)
    if not args.out:
        ap.error("--out or --compare is needed")
    return record(args)


if __name__ == "__main__":
    raise SystemExit(main())
