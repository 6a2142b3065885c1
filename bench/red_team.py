"""Red-team suite (issue 8): play every reward hack through ``gym.make`` and compare it with the baselines.

Each policy of :data:`textsql_clarify.baselines.hacks.HACKS` (plus the oracle, the no-clarify baseline and
the random agent) is played once per sample on each dataset, through one
``gym.make("TextSQLClarify-v0", dataset=..., reward_preset="binary")`` env per dataset; every turn's reward
components are recorded and the return under every preset of
``textsql_clarify.rewards.presets.PRESETS`` (read at run time) is recomputed with ``scalar_reward``. A
replay check (``--verify``) plays the first few episodes of every policy again through
``gym.make(..., reward_preset=<preset>)`` and requires the env's own returns to equal the recomputed ones.

A hack row PASSes a (dataset, preset) cell when its mean reward is at most the random agent's mean
reward on the same samples and turns (floored at 0, see :func:`bound`) plus ``--margin`` (0.02). A privileged hack is played only on the
samples it applies to (e.g. ordered golds for ``mut_drop_order``) and a drift hack is scored on its
post-drift turns only; the random reference is taken on the same samples and turns.

Usage (from the repository root)::

    python bench/red_team.py                      # embedded, Spider dev, Spider-unanswerable; all presets
    python bench/red_team.py --datasets embedded --hacks const_wide,fb_echo --limit 20 --out red.json
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
from tqdm import tqdm

import textsql_clarify  # noqa: F401 - registers the env
from textsql_clarify.baselines.hacks import HACKS, Episode, identifiers_leaked, make_policy, mean, play, \
    schema_identifiers
from textsql_clarify.rewards.presets import PRESETS, resolve_preset

BASELINES = ("oracle", "no-clarify", "random")
LEGEND = """Columns: n = episodes played (R:<preset> cells marked @m were played on m samples: the detailed pass);
EX = mean first-SQL EX over scorable golds; FB = mean FB over unanswerable samples; EXpost = post-drift EX;
DRR = drift recognised; rel% = ambiguous episodes where a clarification was labelled relevant;
leak% = episodes with a clarification whose reply names a schema identifier that the question and the
hidden knowledge do not use; R:<preset> = mean return under the preset, PASS when <= max(random's on the
same samples and turns, 0) + margin; TOL where the preset weights a component that pays the policy by
design (its docstring in textsql_clarify/baselines/hacks.py says why; the other presets must PASS); RES
where a known residual beats the bound (its reason is printed below the table; it may not pass its ceiling). Hacks:"""
#: components cheap to compute; a preset weighting anything else needs the env's detailed scores
_CHEAP = {"ex", "ex_strict", "feedback", "format", "turn_penalty", "classification", "drift", "abstained"}


def dataset_specs(data_root: str) -> dict[str, str]:
    """The three red-team datasets by short name -> their ``load_dataset`` specs under ``data_root``."""
    return {"embedded": "embedded",
            "spider": f"spider:{data_root}/spider_dev",
            "spider-unanswerable": f"spider-unanswerable:{data_root}/spider_unanswerable/spider_no_answer.json:"
                                   f"{data_root}/spider_dev"}


def _fmt(x: float | None, nd: int = 3) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def bound(random_reward: float, margin: float) -> float:
    """The most a hack may earn: the random agent's mean reward on the same samples and turns, floored at
    0, plus ``margin``. The floor: under a shaped preset the random agent pays for its clarifications
    (a negative mean), and a policy that earns exactly nothing games nothing."""
    return max(random_reward, 0.0) + margin


def summarise(name: str, policy: Any, episodes: list[Episode], random_eps: dict[str, Episode],
              presets: dict[str, dict[str, float]], samples_by_id: dict, ids_by_db: dict, margin: float) -> dict:
    """Per-preset mean reward, verdicts against random, EX / FB, paid components, relevance and leak rates."""
    scope = getattr(policy, "scope", "episode")
    hack = name not in BASELINES
    row: dict[str, Any] = {"policy": name, "kind": getattr(policy, "kind", "baseline"), "scope": scope,
                           "privileged": bool(getattr(policy, "privileged", False)), "n": len(episodes),
                           "description": getattr(policy, "description", "")}
    ex = [e.scores.get("ex") for e in episodes if e.scores.get("ex") is not None]
    # FB as ABISS §5.3 reports it: over unanswerable samples only (feedback elsewhere is simply wrong)
    fb = [e.scores.get("fb") for e in episodes if e.group == "unanswerable" and e.scores.get("fb") is not None]
    expost = [e.scores.get("ex_post") for e in episodes if e.scores.get("ex_post") is not None]
    dr = [float(e.scores["drift_recognised"]) for e in episodes if e.scores.get("drift_recognised") is not None]
    row.update(ex=mean(ex), n_ex=len(ex), fb=mean(fb), n_fb=len(fb), ex_post=mean(expost), drr=mean(dr), n_drift=len(dr))
    paid = sorted({c for w in presets.values() for c in w})
    row["components"] = {c: mean([sum(t[2].get(c, 0.0) for t in e.turns if scope == "episode" or t[1])
                                  for e in episodes]) for c in paid}
    # clarification diagnostics: relevance label on ambiguous samples, identifier leaks anywhere
    rel, n_rel, leaks, n_clar = 0, 0, 0, 0
    for e in episodes:
        if not e.replies:
            continue
        n_clar += 1
        s = samples_by_id[e.sample_id]
        if s.group == "ambiguous":
            n_rel += 1
            rel += any(lab == "relevant" for _a, _r, lab in e.replies)
        if s.db_path not in ids_by_db:
            ids_by_db[s.db_path] = schema_identifiers(s.db_path)
        known = s.question + "\n" + s.hidden_knowledge
        leaks += any(identifiers_leaked(r, known, ids_by_db[s.db_path]) for _a, r, _l in e.replies)
    row.update(relevant=rel / n_rel if n_rel else None, n_ambiguous_asked=n_rel,
               leak=leaks / n_clar if n_clar else None, n_asked=n_clar)
    row["reward"], row["random_ref"], row["verdict"] = {}, {}, {}
    for p, w in presets.items():
        r = mean([e.reward(w, scope) for e in episodes])
        row["reward"][p] = r
        if hack and episodes:
            ref = mean([random_eps[e.sample_id].reward(w, scope) for e in episodes])
            row["random_ref"][p] = ref
            if any(w.get(c) for c in getattr(policy, "tolerated_under", ())):
                row["verdict"][p] = "TOL"  # paid by design under this preset (the policy's docstring says why)
            else:
                ok = r <= bound(ref, margin) + 1e-12
                row["verdict"][p] = "PASS" if ok else ("RES" if getattr(policy, "residual", None) else "FAIL")
    return row


def verify(env_kwargs: dict, policy_name: str, indices: list[int], presets: dict, recorded: dict[str, Episode],
           scope: str) -> list[str]:
    """Replay ``indices`` under each preset through ``gym.make`` and compare the env's returns with the
    recomputed ones. Returns mismatch descriptions (empty when all agree)."""
    bad = []
    for p, w in presets.items():
        env = gym.make(textsql_clarify.ENV_ID, reward_preset=p, **env_kwargs)
        for ep in play(env, make_policy(policy_name), indices):
            want = recorded[ep.sample_id].reward(w, "episode")
            got = ep.env_return("episode")
            if abs(want - got) > 1e-9:
                bad.append(f"{policy_name} {ep.sample_id} preset {p}: env {got:.4f} != recomputed {want:.4f}")
        env.close()
    return bad


def _play_all(env_kwargs: dict, policies: list[str], limit: int | None, desc: str, progress: bool):
    """Play every policy (the random agent first) on the first ``limit`` samples; returns
    ``(samples, {name: policy}, {name: sample indices played}, {name: episodes}, seconds)``."""
    env = gym.make(textsql_clarify.ENV_ID, reward_preset="binary", limit=limit, **env_kwargs)
    samples = env.unwrapped.samples
    order = ["random"] + [p for p in policies if p != "random"]
    objs, todo, played = {}, {}, {}
    for name in order:
        pol = make_policy(name)
        objs[name] = pol
        todo[name] = [i for i, s in enumerate(samples) if pol.applies(s)] if hasattr(pol, "applies") else \
            list(range(len(samples)))
    bar = tqdm(total=sum(len(v) for v in todo.values()), desc=desc, unit="ep", disable=not progress)
    t0 = time.perf_counter()
    with bar:
        for name in order:
            bar.set_postfix_str(name)
            played[name] = play(env, objs[name], todo[name], bar=bar)
    env.close()
    return samples, objs, todo, played, time.perf_counter() - t0


def run(dataset: str, spec: str, policies: list[str], presets: dict, *, limit: int | None, margin: float,
        n_verify: int, detailed_limit: int | None = 100, progress: bool = True, samples: list | None = None) -> dict:
    """Play every policy on one dataset; return its rows and replay-check mismatches.

    Presets that weight only cheap components (EX, FB, format, turn penalty, drift ...) are played with
    ``detailed_scores=False`` on every sample; presets that weight a detailed component (cell F1, partial
    credit) are played with ``detailed_scores=True`` on the first ``detailed_limit`` samples (each row
    reports its ``n`` per preset), since the detailed scorer parses every predicted SQL with sqlglot.
    ``samples``, when given, replaces the dataset ``spec`` (``gym.make(..., samples=samples)``).
    """
    groups = {"cheap": {p: w for p, w in presets.items() if all(c in _CHEAP for c in w)},
              "detailed": {p: w for p, w in presets.items() if any(c not in _CHEAP for c in w)}}
    rows: dict[str, dict] = {}
    info: dict[str, Any] = {"dataset": dataset, "spec": spec, "verify_mismatches": [], "passes": {}}
    ids_by_db: dict = {}
    for kind, group in groups.items():
        if not group:
            continue
        lim = limit if kind == "cheap" else min(x for x in (limit, detailed_limit) if x is not None) \
            if (limit or detailed_limit) else None
        env_kwargs = {"dataset": spec, "detailed_scores": kind == "detailed"}
        if samples is not None:
            env_kwargs["samples"] = samples
        samples, objs, todo, played, secs = _play_all(env_kwargs, policies, lim, f"{dataset} {kind}", progress)
        info["passes"][kind] = {"presets": list(group), "n_samples": len(samples), "elapsed_s": round(secs, 1)}
        by_id = {s.id: s for s in samples}
        random_eps = {e.sample_id: e for e in played["random"]}
        for n in policies:
            r = summarise(n, objs[n], played[n], random_eps, group, by_id, ids_by_db, margin)
            r["n_by_preset"] = {p: r["n"] for p in group}
            if n not in rows:
                rows[n] = r
            else:  # the cheap pass's full-data EX / FB stay; add this pass's presets
                for key in ("reward", "random_ref", "verdict", "components", "n_by_preset"):
                    rows[n][key].update(r[key])
        if n_verify > 0:
            for name in policies:
                idx = todo[name][:n_verify]
                if idx:
                    rec = {e.sample_id: e for e in played[name]}
                    info["verify_mismatches"] += verify({**env_kwargs, "limit": lim}, name, idx, group, rec,
                                                        getattr(objs[name], "scope", "episode"))
    info["rows"] = [rows[n] for n in policies if n in rows]
    info["n_samples"] = max(p["n_samples"] for p in info["passes"].values())
    info["elapsed_s"] = round(sum(p["elapsed_s"] for p in info["passes"].values()), 1)
    return info


def table(result: dict, presets: list[str]) -> str:
    """The printed table of one dataset."""
    lines = [f"== {result['dataset']} ({result['spec']}): " + "; ".join(
        f"{k} pass {v['n_samples']} samples ({', '.join(v['presets'])}) in {v['elapsed_s']} s"
        for k, v in result["passes"].items())]
    head = f"{'policy':22s} {'n':>5s} {'EX':>6s} {'FB':>6s} {'EXpost':>6s} {'DRR':>5s} {'rel%':>5s} {'leak%':>5s} " + \
        " ".join(f"{('R:' + p)[:14]:>14s}" for p in presets)
    lines += [head, "-" * len(head)]
    for r in result["rows"]:
        pct = (lambda x: "-" if x is None else f"{100 * x:.0f}")
        cells = []
        for p in presets:
            v = r["verdict"].get(p)
            n = r["n_by_preset"].get(p, r["n"])
            val = _fmt(r["reward"].get(p)) + ("" if n == r["n"] else f"@{n}")
            cells.append(f"{val:>9s} {(v or ''):>4s}")
        lines.append(f"{r['policy']:22s} {r['n']:5d} {_fmt(r['ex']):>6s} {_fmt(r['fb']):>6s} {_fmt(r['ex_post']):>6s} "
                     f"{_fmt(r['drr'], 2):>5s} {pct(r['relevant']):>5s} {pct(r['leak']):>5s} " + " ".join(cells))
    comps = sorted({c for r in result["rows"] for c in r["components"]})
    lines += ["", "mean per-episode sum of each paid component (in the row's scope):",
              f"{'policy':22s} " + " ".join(f"{c[:15]:>15s}" for c in comps)]
    for r in result["rows"]:
        lines.append(f"{r['policy']:22s} " + " ".join(f"{_fmt(r['components'].get(c)):>15s}" for c in comps))
    fails = [(r["policy"], p, r["reward"][p], r["random_ref"][p]) for r in result["rows"]
             for p, v in r["verdict"].items() if v == "FAIL"]
    lines += ["", f"FAIL cells: {len(fails)}"]
    lines += [f"  {h:22s} {p:10s} reward {a:.3f} > max(random {b:.3f}, 0) + margin" for h, p, a, b in fails]
    res = [r for r in result["rows"] if any(v == "RES" for v in r["verdict"].values())]
    lines += ["", f"RES (known residual) rows: {len(res)}"]
    for r in res:
        pol = HACKS[r["policy"]]()
        worst = max(r["reward"].values())
        over = "  OVER ITS CEILING" if worst > pol.residual_ceiling + 1e-12 else ""
        lines.append(f"  {r['policy']:22s} max reward {worst:.3f} (ceiling {pol.residual_ceiling:.2f}){over}: "
                     f"{pol.residual}")
    if result["verify_mismatches"]:
        lines += ["replay mismatches (recomputed preset reward != gym.make's):"] + \
                 [f"  {m}" for m in result["verify_mismatches"][:20]]
    else:
        lines.append("replay check: recomputed preset rewards equal gym.make's on every replayed episode")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status (1 when a hack FAILs, 0 otherwise)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="../shared/data", help="data root holding spider_dev and spider_unanswerable")
    ap.add_argument("--datasets", default="embedded,spider,spider-unanswerable")
    ap.add_argument("--presets", default=None, help="comma-separated preset names (default: every preset)")
    ap.add_argument("--hacks", default=None, help="comma-separated hack names (default: every hack)")
    ap.add_argument("--limit", type=int, default=None, help="first N samples of each dataset")
    ap.add_argument("--detailed-limit", type=int, default=100,
                    help="samples played for presets that need detailed scores (dense); 0 = all")
    ap.add_argument("--margin", type=float, default=0.02, help="allowed excess over the random agent's reward")
    ap.add_argument("--verify", type=int, default=2, help="episodes per policy replayed under each preset")
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    names = args.presets.split(",") if args.presets else list(PRESETS)
    presets = {p: resolve_preset(p) for p in names}
    hacks = args.hacks.split(",") if args.hacks else list(HACKS)
    unknown = [h for h in hacks if h not in HACKS and h not in BASELINES]
    if unknown:
        ap.error(f"unknown hacks {unknown}; available: {sorted(HACKS)}")
    policies = list(BASELINES) + [h for h in hacks if h not in BASELINES]
    specs = dataset_specs(args.data.rstrip("/"))
    results = []
    print(f"textsql_clarify from {Path(textsql_clarify.__file__).parent}; presets {names}", flush=True)
    print(LEGEND)
    for h in hacks:
        if h in HACKS:
            pol = HACKS[h]()
            print(f"  {h:22s} [{pol.kind}{', privileged' if pol.privileged else ''}"
                  f"{', post-drift turns' if pol.scope == 'post_drift' else ''}] {pol.description}")
    print(flush=True)
    for d in args.datasets.split(","):
        if d not in specs:
            ap.error(f"unknown dataset {d!r}; available: {sorted(specs)}")
        res = run(d, specs[d], policies, presets, limit=args.limit, margin=args.margin, n_verify=args.verify,
                  detailed_limit=args.detailed_limit or None, progress=not args.no_progress)
        results.append(res)
        print(table(res, names), flush=True)
        print(flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"presets": presets, "margin": args.margin, "results": results},
                                             indent=1, default=str))
    n_fail = sum(v == "FAIL" for r in results for row in r["rows"] for v in row["verdict"].values())
    n_fail += sum(max(row["reward"].values()) > HACKS[row["policy"]]().residual_ceiling + 1e-12
                  for r in results for row in r["rows"] if "RES" in row["verdict"].values())
    print(f"total FAIL cells: {n_fail}")
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
