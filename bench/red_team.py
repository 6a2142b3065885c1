"""Red-team suite: play every reward hack through ``gym.make`` on every corpus and compare it with the baselines.

Each policy of :data:`textsql_clarify.redteam.policies.HACKS` (plus the oracle, the no-clarify baseline, the
random agent and the reference policies of :data:`~textsql_clarify.redteam.policies.REFERENCES`) is played once
per sample on each corpus, through one ``gym.make("TextSQLClarify-v0", dataset=..., reward_preset="binary")``
env per corpus; every turn's reward components are recorded and the return under every preset of
``textsql_clarify.rewards.presets.PRESETS`` (read at run time) is recomputed with ``scalar_reward``. A replay
check (``--verify``) plays the first few episodes of every policy again through
``gym.make(..., reward_preset=<preset>)`` and requires the env's own returns to equal the recomputed ones.

The corpora (:func:`corpus_specs`): the embedded set, Spider dev, Spider-unanswerable, MMSQL, CoSQL (the real
release under ``<data>/cosql`` where present, and the CoSQL-format fixture of ``tests/fixtures/cosql``), AmbiQT,
mini-interact, BIRD mini-dev (``bird:<data>/bird_minidev``; skipped while its databases are not shipped) and the
generated corpora: the model-free recipes and the model recipes over the fake council, grown from Spider dev
anchors (``--generated DIR`` / ``--generated-model DIR`` name folders written by ``textsql-clarify generate``;
without them the corpora are generated afresh into the cache folder). A corpus whose data is absent is
printed as skipped, with the reason.

The presets that pay test-suite EX (``SUITE_PRESETS``: ``suite``) are played in a pass of their own through an env
with ``ex_mode="suite"`` on ``--suite-limit`` samples per corpus (default 60; the variants are built once into the
cache), where an answer prior that a single database happens to hold earns nothing.

A hack row PASSes a (corpus, preset) cell when its mean reward is at most its bound (:func:`bound`): the
random agent's mean reward on the same samples and turns, or, for a hack that names reference policies, the
best of those on the same samples (a decision made without the channel the hack attacks; a reading drawn
at chance), floored at 0, plus ``--margin`` (0.02). A privileged hack is played only on the samples it
applies to (e.g. ordered golds for ``mut_drop_order``) and a drift hack is scored on its post-drift turns only.

Under a preset that weights ``decision`` (the type of the first action against the sample's right one,
``textsql_clarify/rewards/decision.py``) that part is bounded apart: a constant first move earns its group's share
of the samples (the group prior), more than the random agent, so the bound is the bound above of the preset
without ``decision`` plus weight x (the best constant prior on the same samples, :func:`decision_prior`, plus the
hack's ``decision_margin``, 0 but for the documented surface-word classifier). A residual's ceiling is held by the
return without the decision part (``reward_rest``).

Usage (from the repository root)::

    python bench/red_team.py                               # every corpus, every preset
    python bench/red_team.py --datasets embedded,spider=200 --hacks const_wide,fb_echo --out red.json
    python bench/red_team.py --datasets generated --generated gen/   # a folder written by generate
"""
from __future__ import annotations

import argparse
import json
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
from tqdm import tqdm

import textsql_clarify  # noqa: F401 - registers the env
from textsql_clarify.redteam.policies import HACKS, REFERENCES, Episode, identifiers_leaked, make_policy, mean, \
    play, schema_identifiers
from textsql_clarify.datasets.ambiqt import OTHER_SUFFIX
from textsql_clarify.rewards.decision import DECISIONS, balanced_accuracy, decision_recalls, expected_decision, \
    first_decision
from textsql_clarify.rewards.presets import PRESETS, SUITE_PRESETS, resolve_preset
from textsql_clarify.sql.variants import DEFAULT_K

REPO = Path(__file__).resolve().parents[1]
BASELINES = ("oracle", "no-clarify", "random")
#: the model-free recipes and the model recipes of ``textsql-clarify generate`` (docs/generation.md)
MODEL_FREE_RECIPES = ("drift", "missing_schema", "lexical_overlap")
MODEL_RECIPES = ("abiss", "tide_chain", "tide_drift", "tide_triplets", "premise")
#: the council of the model recipes' corpus: two deterministic fake models (generation/fake_model.py)
FAKE_COUNCIL = ("fake", "fake:b")
#: every corpus, in print order
CORPORA = ("embedded", "spider", "spider-unanswerable", "spider-mix", "mmsql", "cosql", "cosql-fixture", "ambiqt",
           "mini-interact", "bird-minidev", "generated", "generated-model")
WIDTH = 100
#: joins the load_dataset specs of a mixed corpus (:func:`load_corpus` loads each and concatenates them)
MIX = " + "
NAME_W = 25
LEGEND = """Columns: n = episodes played; EX = mean first-SQL EX over scorable golds; FB = mean FB over
unanswerable samples; EXpost = post-drift EX; DRR = drift recognised; rel% = ambiguous episodes
where a clarification was labelled relevant; leak% = episodes with a clarification whose reply names
a schema identifier that the question and the hidden knowledge do not use; dec = decision accuracy
(first sql / clarify / feedback against the right one) and bacc = its balanced accuracy (mean recall
per right decision), over samples where it is defined. Returns: mean return per
sample under each preset (cells marked @m were played on m samples: the detailed pass); PASS when <=
the bound: max(random's on the same samples and turns, the hack's references' there, 0) + margin,
the decision part apart: weight x (best constant prior there + the hack's decision_margin);
TOL where the preset weights a component that pays the policy by design (its docstring in
textsql_clarify/redteam/policies.py says why; the other presets must PASS); RES where a known
residual beats the bound (its reason is printed below the table; it may not pass its ceiling); ref =
a reference policy (no verdict). Policies:"""
#: components cheap to compute; a preset weighting anything else needs the env's detailed scores
_CHEAP = {"ex", "ex_strict", "feedback", "format", "turn_penalty", "classification", "drift", "abstained", "decision"}
#: components only an env with ``ex_mode="suite"`` computes (test-suite EX, Zhong, Yu and Klein 2020)
_SUITE = {"ex_suite", "ex_strict_suite"}


def dataset_specs(data_root: str) -> dict[str, str]:
    """The three original red-team datasets by short name -> their ``load_dataset`` specs under ``data_root``."""
    return {"embedded": "embedded",
            "spider": f"spider:{data_root}/spider_dev",
            "spider-unanswerable": f"spider-unanswerable:{data_root}/spider_unanswerable/spider_no_answer.json:"
                                   f"{data_root}/spider_dev"}


def _cosql_file(folder: Path) -> Path | None:
    """The state-tracking file the CoSQL loader reads in ``folder`` (its candidate names), or ``None``."""
    from textsql_clarify.datasets.cosql import CANDIDATES
    return next((folder / c for c in CANDIDATES if (folder / c).is_file()), None)


def corpus_specs(data_root: str, generated: str | None = None, generated_model: str | None = None
                 ) -> dict[str, tuple[str | None, str]]:
    """Every corpus the project loads or generates: name -> ``(load_dataset spec, note)``.

    The spec is ``None`` where the corpus cannot be played here; the note then says why (data absent, no
    loader). The generated corpora's spec is ``jsonl:<dir>/samples.jsonl`` when ``generated`` /
    ``generated_model`` name a folder, else ``"generate"`` (built by :func:`build_generated`).

    Args:
        data_root: the shared data folder (``../shared/data``), without a trailing slash.
        generated: a folder written by ``textsql-clarify generate`` with the model-free recipes, or ``None``.
        generated_model: one written with the model recipes and the fake council, or ``None``.
    Returns:
        ``{name: (spec | None, note)}`` in :data:`CORPORA` order.
    """
    root = Path(data_root)
    spider = root / "spider_dev"
    has_spider = (spider / "dev.json").is_file()
    out: dict[str, tuple[str | None, str]] = {}
    base = dataset_specs(data_root)
    out["embedded"] = (base["embedded"], "the embedded set")
    out["spider"] = (base["spider"], "Spider dev") if has_spider else (None, f"absent: {spider}/dev.json")
    su = root / "spider_unanswerable" / "spider_no_answer.json"
    out["spider-unanswerable"] = (base["spider-unanswerable"], "Spider-unanswerable") \
        if su.is_file() and has_spider else (None, f"absent: {su} or {spider}")
    # the two together: mixed data, where a label reward (decision) has a prior to beat
    out["spider-mix"] = (base["spider"] + MIX + base["spider-unanswerable"], "Spider dev + Spider-unanswerable") \
        if su.is_file() and has_spider else (None, f"absent: {su} or {spider}")
    mm = root / "mmsql" / "MMSQL_test.json"
    out["mmsql"] = (f"mmsql:{mm}:{spider}", "MMSQL test") if mm.is_file() and has_spider \
        else (None, f"absent: {mm} or {spider}")
    real = _cosql_file(root / "cosql") if (root / "cosql").is_dir() else None
    out["cosql"] = (f"cosql:{root / 'cosql'}:{spider}", "CoSQL release") if real and has_spider else \
        (None, f"absent: the CoSQL release ({root / 'cosql'}/sql_state_tracking/cosql_dev.json)")
    fixture = Path("tests/fixtures/cosql") if Path("tests/fixtures/cosql").is_dir() else REPO / "tests/fixtures/cosql"
    out["cosql-fixture"] = (f"cosql:{fixture}:{spider}", "CoSQL-format fixture (tests/fixtures/cosql)") \
        if _cosql_file(fixture / "sql_state_tracking") and has_spider else (None, "absent: tests/fixtures/cosql")
    aq = root / "ambiqt"
    out["ambiqt"] = (f"ambiqt:{aq}:{spider}", "AmbiQT") if aq.is_dir() and has_spider else \
        (None, f"absent: {aq} or {spider}")
    mi = root / "mini_interact"
    out["mini-interact"] = (f"mini-interact:{mi}", "mini-interact") if (mi / "mini_interact.jsonl").is_file() \
        else (None, f"absent: {mi}/mini_interact.jsonl")
    bm = root / "bird_minidev"
    out["bird-minidev"] = (f"bird:{bm}", "BIRD mini-dev") if (bm / "dev_databases").is_dir() else \
        (None, f"the bird: loader reads {bm}/mini_dev_sqlite.json, but its databases are not shipped "
               f"(no dev_databases/): nothing to execute")
    for name, folder, what in (("generated", generated, "model-free recipes"),
                               ("generated-model", generated_model, "model recipes, fake council")):
        if folder:
            f = Path(folder) / "samples.jsonl"
            out[name] = (f"jsonl:{f}", f"generated ({what}) in {folder}") if f.is_file() else \
                (None, f"absent: {f}")
        else:
            out[name] = ("generate", f"generated ({what}) from Spider dev anchors") if has_spider else \
                (None, f"absent: {spider} (the anchors)")
    return out


def load_corpus(spec: str) -> list:
    """The samples of a corpus spec: one ``load_dataset`` spec, or several joined by :data:`MIX` (concatenated, in
    order). An ``ambiqt:`` part is loaded under both draws of its gold reading (:func:`both_draws`). Raises
    DatasetError as ``load_dataset`` does."""
    from textsql_clarify.datasets import load_dataset
    out = []
    for part in spec.split(MIX):
        out += both_draws(part) if part.startswith("ambiqt:") else load_dataset(part)
    return out


def both_draws(spec: str) -> list:
    """AmbiQT's samples under both draws of which reading is the gold, each item's two samples side by side
    (the drawn one, then ``load_ambiqt(..., reading="other")``'s). The draw is a fair coin per item
    (``gold_reading``), so a policy that cannot see it scores, over both, exactly its expectation over the draw;
    one draw's realised balance is binomial (standard deviation about 0.025 at n = 389, above ``--margin``), and
    a chooser that always picks AmbiQT's first reading would pass or fail on that balance, not on what it knows.
    :func:`spread` keeps the two together."""
    from textsql_clarify.datasets import load_dataset, split_spec_paths
    from textsql_clarify.datasets.ambiqt import SPEC_FORM, load_ambiqt
    from textsql_clarify.datasets.validate import validate_loaded

    folder, root = split_spec_paths(spec[len("ambiqt:"):], spec, SPEC_FORM)
    drawn = load_dataset(spec)  # the drawn half exactly as every other corpus loads: validated
    other = validate_loaded(load_ambiqt(folder, root, reading="other")[0], spec=spec)
    if [s.id + OTHER_SUFFIX for s in drawn] != [t.id for t in other]:  # same records, same order, or no pairs
        raise RuntimeError(f"{spec}: the two draws do not list the same AmbiQT items")
    return [s for pair in zip(drawn, other) for s in pair]


def build_generated(name: str, data_root: str, out_dir: str | Path, *, limit: int | None, seed: int = 0) -> str:
    """Generate one corpus afresh with :func:`textsql_clarify.generation.pipeline.generate` and return its spec.

    ``generated``: the model-free recipes (:data:`MODEL_FREE_RECIPES`) on the first ``limit`` Spider dev anchors;
    ``generated-model``: the model recipes (:data:`MODEL_RECIPES`) with the fake council (:data:`FAKE_COUNCIL`).
    An earlier run in ``out_dir`` is replaced (``resume=False``: the recipes' code may have changed since).

    Raises:
        ValueError: an unknown corpus name.
    """
    from textsql_clarify.generation.anchors import load_anchors
    from textsql_clarify.generation.pipeline import generate
    if name not in ("generated", "generated-model"):
        raise ValueError(f"not a generated corpus: {name!r}")
    anchors = load_anchors(f"spider:{data_root}/spider_dev", limit=limit)
    model = name == "generated-model"
    generate(anchors, list(MODEL_RECIPES if model else MODEL_FREE_RECIPES), out_dir, seed=seed,
             council=list(FAKE_COUNCIL) if model else None, resume=False, progress=False)
    return f"jsonl:{Path(out_dir) / 'samples.jsonl'}"


def _fmt(x: float | None, nd: int = 3) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def bound(random_reward: float, margin: float, references: tuple[float, ...] = ()) -> float:
    """The most a hack may earn: the best of the random agent's mean reward and its reference policies' on the
    same samples and turns, floored at 0, plus ``margin``. The floor: under a shaped preset the random agent
    pays for its clarifications (a negative mean), and a policy that earns exactly nothing games nothing. A
    reference (``HackPolicy.references``) is what a policy earns without the channel the hack attacks."""
    return max(random_reward, *references, 0.0) + margin


def decision_prior(sample_ids, samples_by_id: dict) -> float:
    """The best constant prior of the ``decision`` component on these samples: the largest share of one right
    decision (:func:`~textsql_clarify.rewards.decision.expected_decision`) among them, undefined samples counted in
    the denominator (they pay every policy 0). A policy whose first action type is constant earns exactly the
    share of its type; none earns more than this. 0 for no sample."""
    ids = list(sample_ids)
    if not ids:
        return 0.0
    counts = {d: 0 for d in DECISIONS}
    for k in ids:
        e = expected_decision(samples_by_id[k])
        if e is not None:
            counts[e] += 1
    return max(counts.values()) / len(ids)


def episode_decision(e: Episode, sample) -> tuple[str | None, str | None]:
    """``(decision taken or None, right decision or None)`` of one played episode (its first sql / clarify /
    feedback turn)."""
    return first_decision(t[0] for t in e.turns), expected_decision(sample)


def _per_sample(episodes: list[Episode], weights: dict[str, float], scope: str) -> dict[str, float]:
    """Sample id -> mean return of its episodes (a reference played once per reading has several)."""
    acc: dict[str, list[float]] = {}
    for e in episodes:
        acc.setdefault(e.sample_id, []).append(e.reward(weights, scope))
    return {k: sum(v) / len(v) for k, v in acc.items()}


def summarise(name: str, policy: Any, episodes: list[Episode], random_eps: dict[str, Episode],
              presets: dict[str, dict[str, float]], samples_by_id: dict, ids_by_db: dict, margin: float,
              ref_eps: dict[str, list[Episode]] | None = None) -> dict:
    """Per-preset mean reward, verdicts against the bound, EX / FB, paid components, relevance and leak rates.

    ``ref_eps``: the reference policies' episodes by name (those the hack's ``references`` name must be there).
    """
    scope = getattr(policy, "scope", "episode")
    hack = name in HACKS
    row: dict[str, Any] = {"policy": name, "kind": getattr(policy, "kind", "baseline"), "scope": scope,
                           "privileged": bool(getattr(policy, "privileged", False)), "n": len(episodes),
                           "description": getattr(policy, "description", ""),
                           "n_samples": len({e.sample_id for e in episodes})}
    ex = [e.scores.get("ex") for e in episodes if e.scores.get("ex") is not None]
    # FB as ABISS §5.3 reports it: over unanswerable samples only (feedback elsewhere is simply wrong)
    fb = [e.scores.get("fb") for e in episodes if e.group == "unanswerable" and e.scores.get("fb") is not None]
    expost = [e.scores.get("ex_post") for e in episodes if e.scores.get("ex_post") is not None]
    dr = [float(e.scores["drift_recognised"]) for e in episodes if e.scores.get("drift_recognised") is not None]
    row.update(ex=mean(ex), n_ex=len(ex), fb=mean(fb), n_fb=len(fb), ex_post=mean(expost), drr=mean(dr),
               n_drift=len(dr))
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
    # the decision (first action type) against the right one: accuracy over defined episodes, balanced accuracy
    pairs = [episode_decision(e, samples_by_id[e.sample_id]) for e in episodes] if scope == "episode" else []
    recalls = decision_recalls(pairs)
    defined = [int(a == b) for a, b in pairs if b is not None]
    row.update(decision=mean(defined), n_decision=len(defined), decision_recall=recalls,
               decision_bacc=balanced_accuracy(recalls)["value"])
    row["reward"], row["random_ref"], row["refs"], row["bound"], row["verdict"] = {}, {}, {}, {}, {}
    row["reward_rest"], row["prior"] = {}, {}
    refs = getattr(policy, "references", ()) if hack else ()
    for p, w in presets.items():
        per = _per_sample(episodes, w, scope)
        r = mean(list(per.values()))
        row["reward"][p] = r
        # the decision part is bounded by the best constant prior (a constant first move earns its group's share),
        # the rest of the preset as before; a post-drift scope holds no decision turn
        w_dec = w.get("decision", 0.0) if scope == "episode" else 0.0
        rest = {c: v for c, v in w.items() if c != "decision"}
        row["reward_rest"][p] = mean(list(_per_sample(episodes, rest, scope).values())) if w_dec else r
        if hack and episodes:
            ref = mean([random_eps[k].reward(rest, scope) for k in per])
            row["random_ref"][p] = ref
            rv = {}
            for rn in refs:
                by = _per_sample((ref_eps or {})[rn], rest, scope)
                rv[rn] = mean([by[k] for k in per])
            row["refs"][p] = rv
            prior = decision_prior(per, samples_by_id) if w_dec else 0.0
            row["prior"][p] = prior
            row["bound"][p] = bound(ref, margin, tuple(rv.values())) + \
                w_dec * (prior + getattr(policy, "decision_margin", 0.0))
            if any(w.get(c) for c in getattr(policy, "tolerated_under", ())):
                row["verdict"][p] = "TOL"  # paid by design under this preset (the policy's docstring says why)
            else:
                ok = r <= row["bound"][p] + 1e-12
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


def _references(policies: list[str]) -> list[str]:
    """The reference policies the hacks among ``policies`` name, in first-named order."""
    out: list[str] = []
    for n in policies:
        for r in getattr(HACKS.get(n), "references", ()):
            if r not in out:
                out.append(r)
    return out


def _play_all(env_kwargs: dict, policies: list[str], limit: int | None, desc: str, progress: bool):
    """Play every policy (the random agent first) on the first ``limit`` samples, then the references the hacks
    name (on the samples of those hacks, each sample ``repeats(sample)`` times where the reference says so);
    returns ``(samples, {name: policy}, {name: sample indices played}, {name: episodes}, seconds)``."""
    env = gym.make(textsql_clarify.ENV_ID, reward_preset="binary", limit=limit, **env_kwargs)
    samples = env.unwrapped.samples
    order = ["random"] + [p for p in policies if p != "random"]
    objs, todo, played = {}, {}, {}
    for name in order:
        pol = make_policy(name)
        objs[name] = pol
        idx = [i for i, s in enumerate(samples) if pol.applies(s)] if hasattr(pol, "applies") else \
            list(range(len(samples)))
        rep = getattr(pol, "repeats", None)  # a randomised policy played once per choice: its exact expectation
        todo[name] = [i for i in idx for _ in range(rep(samples[i]) if rep else 1)]
    for ref in _references(policies):
        pol = make_policy(ref)
        objs[ref] = pol
        users = sorted({i for n in policies if ref in getattr(HACKS.get(n), "references", ()) for i in todo[n]})
        rep = getattr(pol, "repeats", None)
        todo[ref] = [i for i in users for _ in range(rep(samples[i]) if rep else 1)]
        order.append(ref)
    bar = tqdm(total=sum(len(v) for v in todo.values()), desc=desc, unit="ep", disable=not progress)
    t0 = time.perf_counter()
    with bar:
        for name in order:
            bar.set_postfix_str(name)
            played[name] = play(env, objs[name], todo[name], bar=bar)
    env.close()
    return samples, objs, todo, played, time.perf_counter() - t0


def run(dataset: str, spec: str, policies: list[str], presets: dict, *, limit: int | None, margin: float,
        n_verify: int, detailed_limit: int | None = 100, progress: bool = True, samples: list | None = None,
        suite_limit: int | None = 60, suite_k: int = DEFAULT_K, suite_cache_dir: str | None = None) -> dict:
    """Play every policy on one dataset; return its rows and replay-check mismatches.

    Presets that weight only cheap components (EX, FB, format, turn penalty, drift ...) are played with
    ``detailed_scores=False`` on every sample; presets that weight a detailed component (cell F1, partial
    credit) are played with ``detailed_scores=True`` on ``detailed_limit`` samples spread over them (:func:`spread`;
    each row reports its ``n`` per preset), since the detailed scorer parses every predicted SQL with sqlglot.
    ``samples``, when given, replaces the dataset ``spec`` (``gym.make(..., samples=samples)``). The reference
    policies the hacks name are played too and get rows of their own (no verdict).

    Presets that weight test-suite EX (``ex_suite``, ``ex_strict_suite``: :data:`SUITE_PRESETS`) are played in a
    pass of their own through an env with ``ex_mode="suite"`` (``suite_k`` variants per database, cached under
    ``suite_cache_dir``, default the model cache's) on ``suite_limit`` samples spread over the corpus (``None``:
    all), since every SQL turn there runs on each variant too.
    """
    def kind_of(w: dict) -> str:
        if any(c in _SUITE for c in w):
            return "suite"
        return "cheap" if all(c in _CHEAP for c in w) else "detailed"

    groups = {k: {p: w for p, w in presets.items() if kind_of(w) == k} for k in ("cheap", "detailed", "suite")}
    rows: dict[str, dict] = {}
    info: dict[str, Any] = {"dataset": dataset, "spec": spec, "verify_mismatches": [], "passes": {}}
    ids_by_db: dict = {}
    refs = _references(policies)
    if samples is None:
        samples = load_corpus(spec)
    if limit is not None:
        samples = samples[:limit]
    for kind, group in groups.items():
        if not group:
            continue
        # the detailed pass: spread over the samples, so that it sees every part of a corpus written in blocks
        cap = {"cheap": None, "detailed": detailed_limit, "suite": suite_limit}[kind]
        chosen = samples if cap is None else spread(samples, cap)
        lim = None
        env_kwargs = {"dataset": spec, "detailed_scores": kind == "detailed", "samples": chosen}
        if kind == "suite":
            env_kwargs.update(ex_mode="suite", suite_k=suite_k, suite_cache_dir=suite_cache_dir)
        played_samples, objs, todo, played, secs = _play_all(env_kwargs, policies, lim, f"{dataset} {kind}",
                                                             progress)
        info["passes"][kind] = {"presets": list(group), "n_samples": len(played_samples), "elapsed_s": round(secs, 1)}
        by_id = {s.id: s for s in played_samples}
        random_eps = {e.sample_id: e for e in played["random"]}
        ref_eps = {r: played[r] for r in refs}
        for n in [*policies, *refs]:
            r = summarise(n, objs[n], played[n], random_eps, group, by_id, ids_by_db, margin, ref_eps)
            r["n_by_preset"] = {p: r["n_samples"] for p in group}
            if n not in rows:
                rows[n] = r
            else:  # the cheap pass's full-data EX / FB and component means stay; add this pass's presets
                for key in ("reward", "random_ref", "refs", "bound", "verdict", "n_by_preset"):
                    rows[n][key].update(r[key])
                rows[n]["components"].update({c: v for c, v in r["components"].items()
                                              if c not in rows[n]["components"]})
        if n_verify > 0:
            for name in policies:
                idx = list(dict.fromkeys(todo[name]))[:n_verify]
                if idx:
                    rec: dict[str, Episode] = {}
                    for e in played[name]:  # a repeated sample's first episode: what a fresh policy replays
                        rec.setdefault(e.sample_id, e)
                    info["verify_mismatches"] += verify({**env_kwargs, "limit": lim}, name, idx, group, rec,
                                                        getattr(objs[name], "scope", "episode"))
    info["rows"] = [rows[n] for n in [*policies, *refs] if n in rows]
    info["n_samples"] = max(p["n_samples"] for p in info["passes"].values())
    info["elapsed_s"] = round(sum(p["elapsed_s"] for p in info["passes"].values()), 1)
    return info


def _chunks(items: list[str], cell: int) -> list[list[str]]:
    """``items`` in runs that fit beside the policy column within :data:`WIDTH` columns, ``cell`` wide each."""
    per = max(1, (WIDTH - NAME_W) // cell)
    return [items[k:k + per] for k in range(0, len(items), per)] or [[]]


def _wrap(text: str, indent: str = "  ", sub: str = "      ") -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=sub, break_on_hyphens=False)


def table(result: dict, presets: list[str]) -> str:
    """The printed tables of one corpus, every line within :data:`WIDTH` (100) columns: scores, returns per
    preset (in runs of presets that fit), paid components, FAIL cells, residuals, the replay check."""
    lines = _wrap(f"== {result['dataset']} ({result['spec']}): " + "; ".join(
        f"{k} pass {v['n_samples']} samples ({', '.join(v['presets'])}) in {v['elapsed_s']} s"
        for k, v in result["passes"].items()), "", "   ")
    pct = (lambda x: "-" if x is None else f"{100 * x:.0f}")
    head = (f"{'policy':{NAME_W}s} {'n':>5s} {'EX':>6s} {'FB':>6s} {'EXpost':>6s} {'DRR':>5s} {'rel%':>5s} "
            f"{'leak%':>5s} {'dec':>5s} {'bacc':>5s}")
    lines += ["", head, "-" * len(head)]
    for r in result["rows"]:
        lines.append(f"{r['policy'][:NAME_W]:{NAME_W}s} {r['n']:5d} {_fmt(r['ex']):>6s} {_fmt(r['fb']):>6s} "
                     f"{_fmt(r['ex_post']):>6s} {_fmt(r['drr'], 2):>5s} {pct(r['relevant']):>5s} {pct(r['leak']):>5s} "
                     f"{_fmt(r.get('decision'), 2):>5s} {_fmt(r.get('decision_bacc'), 2):>5s}")
    for chunk in _chunks(presets, 15):
        head = f"{'policy':{NAME_W}s}" + "".join(f"{p[:14]:>15s}" for p in chunk)
        lines += ["", head, "-" * len(head)]
        for r in result["rows"]:
            cells = []
            for p in chunk:
                v = "ref" if r["policy"] in REFERENCES else (r["verdict"].get(p) or "")
                n = r["n_by_preset"].get(p, r["n_samples"])
                val = _fmt(r["reward"].get(p)) + ("" if n == r["n_samples"] else f"@{n}")
                cells.append(f"{val:>10s} {v:>4s}")
            lines.append(f"{r['policy'][:NAME_W]:{NAME_W}s}" + "".join(f"{c:>15s}" for c in cells))
    comps = sorted({c for r in result["rows"] for c in r["components"]})
    lines += ["", "mean per-episode sum of each paid component (in the row's scope):"]
    for chunk in _chunks(comps, 10):
        lines += [f"{'policy':{NAME_W}s}" + "".join(f"{c[:9]:>10s}" for c in chunk)]
        for r in result["rows"]:
            lines.append(f"{r['policy'][:NAME_W]:{NAME_W}s}" +
                         "".join(f"{_fmt(r['components'].get(c)):>10s}" for c in chunk))
    fails = [(r["policy"], p, r["reward"][p], r["bound"][p], r["n_by_preset"][p]) for r in result["rows"]
             for p, v in r["verdict"].items() if v == "FAIL"]
    lines += ["", f"FAIL cells: {len(fails)}"]
    lines += [f"  {h:{NAME_W}s} {p:8s} reward {a:.3f} > bound {b:.3f} (n={n})" for h, p, a, b, n in fails]
    res = [r for r in result["rows"] if any(v == "RES" for v in r["verdict"].values())]
    lines += ["", f"RES (known residual) rows: {len(res)}"]
    for r in res:
        pol = HACKS[r["policy"]]()
        worst = max(v for v in r["reward_rest"].values() if v is not None)
        ceil = pol.ceiling(result["dataset"])
        over = "  OVER ITS CEILING" if worst > ceil + 1e-12 else ""
        lines += _wrap(f"{r['policy']} max reward {worst:.3f} (ceiling {ceil:.2f}){over}: "
                       f"{pol.residual}")
    if result["verify_mismatches"]:
        lines += ["replay mismatches (recomputed preset reward != gym.make's):"]
        lines += [ln for m in result["verify_mismatches"][:20] for ln in _wrap(m)]
    else:
        lines += _wrap("replay check: recomputed preset rewards equal gym.make's on every replayed episode", "")
    return "\n".join(lines)


def spread(samples: list, n: int) -> list:
    """``n`` samples evenly spaced over ``samples`` (all of them when ``n >= len(samples)``), in order; an AmbiQT
    item's two draws (:func:`both_draws`) count as one sample and are kept together (so ``n`` items). The
    detailed pass takes the first ``--detailed-limit`` of these, so it is spread over the corpus too only
    when ``n`` is at most that limit."""
    units: list[list] = []  # a sample of AmbiQT's other draw stays with its drawn sample (:func:`both_draws`)
    for s in samples:
        sid, last = getattr(s, "id", None), getattr(units[-1][0], "id", None) if units else None
        if isinstance(sid, str) and isinstance(last, str) and sid == last + OTHER_SUFFIX:
            units[-1].append(s)
        else:
            units.append([s])
    if n >= len(units):
        return list(samples)
    return [s for k in range(n) for s in units[(k * len(units)) // n]]


def _parse_datasets(text: str) -> list[tuple[str, int | None]]:
    """``name[=N],...`` -> ``[(name, N or None)]`` (N: samples of that corpus, :func:`spread` over it)."""
    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, _, n = part.partition("=")
        out.append((name, int(n) if n else None))
    return out


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status (1 when a hack FAILs or a residual passes its ceiling, else 0)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="../shared/data", help="the shared data folder (spider_dev, mmsql, ...)")
    ap.add_argument("--datasets", default=",".join(CORPORA),
                    help="comma-separated corpora, each optionally name=N (N samples evenly spaced over it); "
                         "default: all of "
                         + ", ".join(CORPORA))
    ap.add_argument("--generated", default=None,
                    help="a folder written by 'textsql-clarify generate' with the model-free recipes (default: "
                         "generate one into the cache folder)")
    ap.add_argument("--generated-model", default=None,
                    help="a folder written by generate with the model recipes and the fake council (default: "
                         "generate one)")
    ap.add_argument("--generate-limit", type=int, default=None,
                    help="Spider dev anchors for a corpus generated here (default: all 935)")
    ap.add_argument("--presets", default=None, help="comma-separated preset names (default: every preset)")
    ap.add_argument("--hacks", default=None, help="comma-separated hack names (default: every hack)")
    ap.add_argument("--limit", type=int, default=None,
                    help="N samples of each corpus, evenly spaced over it (name=N overrides)")
    ap.add_argument("--detailed-limit", type=int, default=100,
                    help="samples played for presets that need detailed scores (dense); 0 = all")
    ap.add_argument("--margin", type=float, default=0.02, help="allowed excess over the bound's reference reward")
    ap.add_argument("--suite-limit", type=int, default=60,
                    help="samples per corpus for the presets that pay test-suite EX (0: all; default 60)")
    ap.add_argument("--suite-k", type=int, default=DEFAULT_K, help="database variants per database (test-suite EX)")
    ap.add_argument("--suite-cache-dir", default=None, help="the variants' cache (default: the model cache's)")
    ap.add_argument("--verify", type=int, default=2, help="episodes per policy replayed under each preset")
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    names = args.presets.split(",") if args.presets else list(PRESETS) + list(SUITE_PRESETS)
    presets = {p: resolve_preset(p) for p in names}
    hacks = args.hacks.split(",") if args.hacks else list(HACKS)
    unknown = [h for h in hacks if h not in HACKS and h not in BASELINES]
    if unknown:
        ap.error(f"unknown hacks {unknown}; available: {sorted(HACKS)}")
    chosen = _parse_datasets(args.datasets)
    bad = [d for d, _ in chosen if d not in CORPORA]
    if bad:
        ap.error(f"unknown datasets {bad}; available: {list(CORPORA)}")
    policies = list(BASELINES) + [h for h in hacks if h not in BASELINES]
    data = args.data.rstrip("/")
    specs = corpus_specs(data, args.generated, args.generated_model)
    results, skipped = [], []
    print(f"textsql_clarify from {Path(textsql_clarify.__file__).parent}", flush=True)
    print(f"presets {names}", flush=True)
    print(LEGEND)
    for h in [*hacks, *_references(policies)]:
        pol = HACKS[h]() if h in HACKS else REFERENCES.get(h, lambda: None)()
        if pol is not None:
            tags = ", ".join([pol.kind] + (["privileged"] if pol.privileged else []) +
                             (["post-drift turns"] if pol.scope == "post_drift" else []))
            print("\n".join(_wrap(f"{h} [{tags}] {pol.description}")))
    print(flush=True)
    for d, n in chosen:
        spec, note = specs[d]
        if spec is None:
            skipped.append((d, note))
            print("\n".join(_wrap(f"== {d}: skipped ({note})", "", "   ")) + "\n", flush=True)
            continue
        if spec == "generate":
            from textsql_clarify.models import cache_root
            folder = cache_root() / "red_team" / d
            t0 = time.perf_counter()
            spec = build_generated(d, data, folder, limit=args.generate_limit)
            print(f"generated {d} into {folder} in {time.perf_counter() - t0:.0f} s", flush=True)
        n = n if n is not None else args.limit
        picked = None
        if n is not None:  # spread over the corpus: a generated file is written recipe by recipe
            picked = spread(load_corpus(spec), n)
        elif MIX in spec:
            picked = load_corpus(spec)
        res = run(d, spec, policies, presets, limit=None, margin=args.margin, n_verify=args.verify,
                  detailed_limit=args.detailed_limit or None, progress=not args.no_progress, samples=picked,
                  suite_limit=args.suite_limit or None, suite_k=args.suite_k, suite_cache_dir=args.suite_cache_dir)
        results.append(res)
        print(table(res, names), flush=True)
        print(flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"presets": presets, "margin": args.margin, "results": results,
                                              "skipped": skipped}, indent=1, default=str))
    n_fail = sum(v == "FAIL" for r in results for row in r["rows"] for v in row["verdict"].values())
    n_fail += sum(max(v for v in row["reward_rest"].values() if v is not None)
                  > HACKS[row["policy"]]().ceiling(r["dataset"]) + 1e-12
                  for r in results for row in r["rows"] if "RES" in row["verdict"].values())
    print(f"total FAIL cells: {n_fail} over {len(results)} corpora"
          + (f"; skipped: {', '.join(d for d, _ in skipped)}" if skipped else ""))
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
