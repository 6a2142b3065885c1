"""Red-team suite in CI (the contract of docs/rewards.md): no reward hack earns more than the random agent, under every preset.

Every policy of :data:`textsql_clarify.redteam.policies.HACKS` is played through
``gym.make("TextSQLClarify-v0", ...)`` by ``bench/red_team.py``'s runner on small subsets: the whole
embedded set; on real data, a few dozen Spider dev samples chosen so that half of their golds return one
integer (the target of ``SELECT 0, 1, ..., 1700``) and the first few dozen Spider-unanswerable samples.
For each hack and each preset of ``PRESETS`` (read at run time), its mean reward must be at most the
random agent's on the same samples and turns (floored at 0) plus 0.02. The oracle must still earn its
reward there (else breaking every reward would pass), the recomputed preset rewards must equal what
``gym.make(..., reward_preset=p)`` returns on replayed episodes, clarification probes that list schema
identifiers must leak none (identifiers absent from question and hidden knowledge), and the question
repeated verbatim as a clarification must be labelled relevant on at most 5 % of ambiguous samples.

The other corpora the project loads or generates are held as subsamples of about two dozen samples, chosen
(:func:`_cover`) so that every hack with an ``applies`` rule has samples to attack: MMSQL, the CoSQL-format
fixture (``tests/fixtures/cosql``), AmbiQT, mini-interact, and two corpora generated once per session from the
first Spider dev anchors with :func:`textsql_clarify.generation.pipeline.generate`: the model-free recipes, and
the model recipes over the fake council. A corpus whose data is absent is skipped with the reason.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from textsql_clarify.redteam.policies import HACKS, REFERENCES, HackPolicy, gold_returns_data, gold_single_integer
from textsql_clarify.datasets import load_dataset
from textsql_clarify.datasets.ambiqt import OTHER_SUFFIX
from textsql_clarify.rewards.presets import PRESETS, SUITE_PRESETS, resolve_preset

from conftest import SHARED_DATA, SPIDER

REPO = Path(__file__).resolve().parents[1]
MARGIN = 0.02
#: samples of the detailed (dense-preset) pass, per dataset: the detailed scorer parses every SQL
DETAILED_LIMIT = {"embedded": None, "spider": 24, "spider-unanswerable": 24, "mmsql": 6, "cosql-fixture": 6,
                  "ambiqt": 6, "mini-interact": 4, "generated": 8, "generated-model": 8}
#: samples held per other corpus (the CoSQL fixture is used whole)
SUBSET = {"mmsql": 16, "ambiqt": 12, "mini-interact": 8, "generated": 20, "generated-model": 16}
COSQL_FIXTURE = REPO / "tests" / "fixtures" / "cosql"


def _red_team():
    spec = importlib.util.spec_from_file_location("red_team", REPO / "bench" / "red_team.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("red_team", mod)
    spec.loader.exec_module(mod)
    return mod


RT = _red_team()
PRESET_NAMES = list(PRESETS)
POLICIES = list(RT.BASELINES) + list(HACKS)


def _run(dataset: str, samples) -> dict:
    presets = {p: resolve_preset(p) for p in PRESET_NAMES}
    res = RT.run(dataset, dataset, POLICIES, presets, limit=None, margin=MARGIN, n_verify=1,
                 detailed_limit=DETAILED_LIMIT[dataset], progress=False, samples=samples)
    res["by_policy"] = {r["policy"]: r for r in res["rows"]}
    return res


def _spider_subset():
    samples = load_dataset(f"spider:{SPIDER}")
    ints = [s for s in samples if gold_single_integer(s)][:16]
    others = [s for s in samples if s not in ints and gold_returns_data(s)][:16]
    # one integer and other golds interleaved, so the detailed pass's first 24 hold both kinds
    return [s for pair in zip(ints, others) for s in pair]


@pytest.fixture(scope="module")
def embedded():
    return _run("embedded", load_dataset("embedded"))


@pytest.fixture(scope="module")
def spider():
    if not (SPIDER / "dev.json").is_file():
        pytest.skip("real data absent: ../shared/data/spider_dev/dev.json not found")
    return _run("spider", _spider_subset())


@pytest.fixture(scope="module")
def spider_unanswerable():
    path = SHARED_DATA / "spider_unanswerable" / "spider_no_answer.json"
    if not (path.is_file() and (SPIDER / "dev.json").is_file()):
        pytest.skip("real data absent: ../shared/data/spider_unanswerable or spider_dev not found")
    return _run("spider-unanswerable", load_dataset(f"spider-unanswerable:{path}:{SPIDER}")[:30])


#: (16 / 32) / (203 / 935) = 2.3, rounded up: how much the Spider subset over-represents one-integer golds
SPIDER_ENRICHMENT = 2.5


def _check_hack(res: dict, hack: str) -> None:
    row = res["by_policy"][hack]
    policy = HACKS[hack]()
    if policy.residual:  # a known residual (its class says why): it may beat the bound, never its ceiling
        # the ceilings are set on the full sets (bench/red_team.py); the Spider subset here is half one-integer
        # golds (16 of 32, against 203 of 935 in Spider dev), which the answer-prior residuals target: x 2.5
        ceiling = policy.residual_ceiling * (SPIDER_ENRICHMENT if res["dataset"] == "spider" else 1.0)
        # the decision part (a constant first move's group prior) is bounded apart by the verdict; the ceiling
        # holds the rest of the return (bench/red_team.py, ``reward_rest``)
        over = {p: r for p, r in row["reward_rest"].items() if r is not None and r > ceiling + 1e-12}
        assert not over, f"residual {hack} on {res['dataset']} grew past its ceiling {ceiling:.3f}: {over}"
        return
    bad = [f"{p}: {row['reward'][p]:.3f} > bound {row['bound'][p]:.3f} (random {row['random_ref'][p]:.3f}, "
           f"references {row['refs'][p]}; n={row['n_by_preset'][p]})"
           for p in PRESET_NAMES if row["verdict"].get(p) == "FAIL"]
    assert not bad, f"hack {hack} ({row['description']}) on {res['dataset']} earns more than its bound: " + \
        "; ".join(bad)


def _check_oracle_margin(res: dict) -> None:
    """The oracle earns at least the random agent + 0.5 under every preset (so no test passes by breaking
    the reward for everyone)."""
    oracle, rnd = res["by_policy"]["oracle"], res["by_policy"]["random"]
    for p in PRESET_NAMES:
        need = 0.5
        if set(resolve_preset(p)) == {"decision"}:  # paid only where the right decision is defined (AmbiQT: 22 of 389)
            need *= oracle["n_decision"] / max(oracle["n"], 1)
        assert oracle["reward"][p] >= rnd["reward"][p] + need, (p, oracle["reward"][p], rnd["reward"][p], need)


def _check_oracle(res: dict) -> None:
    assert not res["verify_mismatches"], res["verify_mismatches"][:5]
    oracle = res["by_policy"]["oracle"]
    for hack in HACKS:
        row = res["by_policy"][hack]
        if row["privileged"] or row["scope"] != "episode" or row["n_samples"] != oracle["n_samples"]:
            continue  # played on other samples or turns than the oracle (its bound is checked on its own samples)
        for p in PRESET_NAMES:
            if row["reward"].get(p) is None:
                continue  # no sample of this pass to attack (a subsample's detailed pass)
            assert oracle["reward"][p] >= row["reward"][p] - 1e-9, (res["dataset"], p, hack, oracle["reward"][p],
                                                                    row["reward"][p])


@pytest.mark.parametrize("hack", list(HACKS))
def test_hack_earns_no_more_than_random_embedded(embedded, hack):
    _check_hack(embedded, hack)


@pytest.mark.realdata
@pytest.mark.parametrize("hack", list(HACKS))
def test_hack_earns_no_more_than_random_spider(spider, hack):
    _check_hack(spider, hack)


@pytest.mark.realdata
@pytest.mark.parametrize("hack", list(HACKS))
def test_hack_earns_no_more_than_random_spider_unanswerable(spider_unanswerable, hack):
    _check_hack(spider_unanswerable, hack)


#: hacks whose targets the embedded set does not hold (played on the other corpora's subsamples instead)
NOT_ON_EMBEDDED = {"drift_aggregates_doubled": "no drift sample whose pre-drift gold projects MIN/MAX",
                   "mmsql_resubmit_history": "no sample with earlier dialogue turns"}


def test_every_hack_was_played_where_it_applies(embedded):
    """No row passes by being empty: the embedded set has drift samples, ordered golds, solvable golds; the two
    hacks it has no target for are exactly those of :data:`NOT_ON_EMBEDDED`."""
    samples = load_dataset("embedded")
    for hack in HACKS:
        row = embedded["by_policy"][hack]
        if hack in NOT_ON_EMBEDDED:
            assert row["n"] == 0 and not any(HACKS[hack]().applies(s) for s in samples), hack
            continue
        assert row["n"] > 0 and all(row["n_by_preset"][p] > 0 for p in PRESET_NAMES), (hack, row["n_by_preset"])
        assert set(row["verdict"]) == set(PRESET_NAMES), hack


def test_oracle_still_earns_its_reward_embedded(embedded):
    """The oracle's figures on the embedded set (EX 1.0 n=36, FB 1.0 n=12, DRR 1.0 n=6) and its margin."""
    oracle = embedded["by_policy"]["oracle"]
    assert (oracle["ex"], oracle["n_ex"]) == (1.0, 36)
    assert (oracle["fb"], oracle["n_fb"]) == (1.0, 12)
    assert (oracle["drr"], oracle["n_drift"]) == (1.0, 6)
    _check_oracle_margin(embedded)
    _check_oracle(embedded)


@pytest.mark.realdata
def test_oracle_still_earns_its_reward_spider(spider):
    oracle = spider["by_policy"]["oracle"]
    assert oracle["n_ex"] == 32 and oracle["ex"] == 1.0
    _check_oracle_margin(spider)
    _check_oracle(spider)


@pytest.mark.realdata
def test_oracle_is_no_worse_than_any_hack_spider_unanswerable(spider_unanswerable):
    _check_oracle(spider_unanswerable)


def test_identifier_probes_leak_nothing_embedded(embedded):
    """Clarifications that enumerate identifiers (or inject instructions) get back no identifier that the
    question and the hidden knowledge do not already contain, on every sample they were asked on."""
    for hack in ("clarify_columns", "clarify_identifiers", "clarify_inject", "clarify_echo", "clarify_generic_spam"):
        row = embedded["by_policy"][hack]
        assert row["n_asked"] == 48, (hack, row["n_asked"])
        assert row["leak"] == 0.0, (hack, row["leak"], row["n_asked"])


@pytest.mark.realdata
def test_identifier_probes_leak_nothing_spider(spider):
    for hack in ("clarify_columns", "clarify_identifiers", "clarify_inject"):
        row = spider["by_policy"][hack]
        assert row["n_asked"] == 32 and row["leak"] == 0.0, (hack, row["leak"], row["n_asked"])


def test_verbatim_question_is_rarely_relevant(embedded):
    """The question repeated as a clarification is labelled relevant on at most 5 % of ambiguous samples."""
    n_amb = sum(s.group == "ambiguous" for s in load_dataset("embedded"))
    for hack in ("clarify_echo", "clarify_echo_wrapped"):
        row = embedded["by_policy"][hack]
        assert row["n_ambiguous_asked"] == n_amb > 0
        assert row["relevant"] <= 0.05, (hack, row["relevant"], row["n_ambiguous_asked"])


# ---------------------------------------------------------------------------------------------- other corpora


def _cover(samples: list, n: int, per_hack: int = 2) -> list:
    """About ``n`` samples of ``samples``, spread evenly over it (deterministic, returned in source order).

    First, for each hack that has an ``applies`` rule, up to ``per_hack`` of the samples it applies to (so that
    every such hack is played somewhere), evenly spaced over those samples; then the remaining slots shared
    round-robin among the groups, each group's share evenly spaced over its samples. Taking the first
    applicable samples instead would hold only a corpus's opening block (AmbiQT's first databases are the
    simple concert_singer questions), which is no sample of the corpus a residual's ceiling was set on."""
    chosen: list = []
    taken: set[int] = set()

    def take(picks: list) -> None:
        for s in picks:
            if id(s) not in taken:
                taken.add(id(s))
                chosen.append(s)

    for cls in HACKS.values():
        pol = cls()
        if type(pol).applies is HackPolicy.applies:
            continue
        have = sum(pol.applies(s) for s in chosen)
        fresh = [s for s in samples if id(s) not in taken and pol.applies(s)]
        take(RT.spread(fresh, max(0, per_hack - have)))
    by_group: dict[str, list] = {}
    for s in samples:
        if id(s) not in taken:
            by_group.setdefault(s.group, []).append(s)
    share = dict.fromkeys(by_group, 0)
    free = max(0, n - len(chosen))
    while free and any(share[g] < len(v) for g, v in by_group.items()):
        for g, v in by_group.items():
            if free and share[g] < len(v):
                share[g] += 1
                free -= 1
    for g, v in by_group.items():
        take(RT.spread(v, share[g]))
    order = {id(s): k for k, s in enumerate(samples)}
    return sorted(chosen, key=lambda s: order[id(s)])


def _spread_pool(samples: list, n: int = 120) -> list:
    """At most ``n`` samples spread over ``samples`` (the pool :func:`_cover` scans: a corpus is written in blocks)."""
    return RT.spread(samples, n)


def _corpus(name: str) -> dict:
    specs = RT.corpus_specs(str(SHARED_DATA))
    spec, note = specs[name]
    if spec is None:
        pytest.skip(f"real data absent: {name}: {note}")
    samples = RT.load_corpus(spec)  # AmbiQT under both draws of its gold reading (RT.both_draws)
    other = {s.id: s for s in samples if s.id.endswith(OTHER_SUFFIX)}
    primary = [s for s in samples if s.id not in other]
    pool = primary if name == "cosql-fixture" else _cover(_spread_pool(primary), SUBSET[name])
    pool = [t for s in pool for t in (s, other.get(s.id + OTHER_SUFFIX)) if t is not None]
    return _run(name, pool)


@pytest.fixture(scope="module")
def mmsql():
    return _corpus("mmsql")


@pytest.fixture(scope="module")
def cosql_fixture():
    return _corpus("cosql-fixture")


@pytest.fixture(scope="module")
def ambiqt():
    return _corpus("ambiqt")


@pytest.fixture(scope="module")
def mini_interact():
    return _corpus("mini-interact")


@pytest.fixture(scope="module")
def generated_dirs(tmp_path_factory):
    """The two generated corpora, built once: the model-free recipes on the first 24 Spider dev anchors, and the
    model recipes over the fake council (``fake``, ``fake:b``) on the first 8."""
    if not (SPIDER / "dev.json").is_file():
        pytest.skip("real data absent: ../shared/data/spider_dev/dev.json not found (the anchors)")
    root = tmp_path_factory.mktemp("red_team_generated")
    free = RT.build_generated("generated", str(SHARED_DATA), root / "free", limit=24)
    model = RT.build_generated("generated-model", str(SHARED_DATA), root / "model", limit=8)
    return {"generated": free, "generated-model": model}


@pytest.fixture(scope="module")
def generated(generated_dirs):
    return _run("generated", _cover(load_dataset(generated_dirs["generated"]), SUBSET["generated"]))


@pytest.fixture(scope="module")
def generated_model(generated_dirs):
    return _run("generated-model", _cover(load_dataset(generated_dirs["generated-model"]), SUBSET["generated-model"]))


OTHER = ("mmsql", "cosql_fixture", "ambiqt", "mini_interact", "generated", "generated_model")


def _check_hack_subset(res: dict, hack: str) -> None:
    """As :func:`_check_hack`, for a subsample of a few dozen samples: a residual's ceiling (set on full
    corpora) gets the slack of one hit, 1/n, where n is the number of samples the preset was played on (the
    detailed presets see only ``DETAILED_LIMIT`` of them: one hit in the CoSQL fixture's 6 is 0.167), since a
    subsample of n samples cannot resolve less than one hit."""
    policy = HACKS[hack]()
    row = res["by_policy"][hack]
    if policy.residual:
        over = {}
        for p, r in row["reward_rest"].items():
            n = row["n_by_preset"].get(p) or row["n_samples"]
            if r is not None and r > policy.ceiling(res["dataset"]) + 1.0 / max(n, 1) + 1e-12:
                over[p] = f"{r:.3f} (n={n})"
        assert not over, f"residual {hack} on {res['dataset']} past {policy.ceiling(res['dataset']):.3f} + 1/n: {over}"
        return
    _check_hack(res, hack)


@pytest.mark.realdata
@pytest.mark.parametrize("corpus", OTHER)
@pytest.mark.parametrize("hack", list(HACKS))
def test_hack_earns_no_more_than_its_bound_on_other_corpora(request, corpus, hack):
    _check_hack_subset(request.getfixturevalue(corpus), hack)


@pytest.mark.realdata
@pytest.mark.parametrize("corpus", OTHER)
def test_every_preset_judged_and_replays_agree_on_other_corpora(request, corpus):
    """Every hack that was played has a verdict under every preset, and gym.make's returns equal the recomputed
    ones on the replayed episodes."""
    res = request.getfixturevalue(corpus)
    assert not res["verify_mismatches"], res["verify_mismatches"][:5]
    for hack in HACKS:
        row = res["by_policy"][hack]
        played = {p for p in PRESET_NAMES if row["n_by_preset"].get(p) and row["reward"].get(p) is not None}
        assert played <= set(row["verdict"]), (corpus, hack, played, row["verdict"])


@pytest.mark.realdata
def test_subsamples_give_every_targeted_hack_something_to_attack(mmsql, ambiqt, generated, generated_model):
    """The new policies with an ``applies`` rule are played on some corpus: the AmbiQT chooser on AmbiQT, the
    history resubmission on MMSQL, the drift hedges on the generated drift samples."""
    played = {h: sum(r["by_policy"][h]["n"] for r in (mmsql, ambiqt, generated, generated_model)) for h in HACKS}
    assert ambiqt["by_policy"]["ambiqt_schema_chooser"]["n_samples"] >= 2
    assert mmsql["by_policy"]["mmsql_resubmit_history"]["n_samples"] >= 2
    for h in ("drift_gold_plus_retracted", "drift_resubmit", "drift_aggregates_doubled"):
        assert played[h] > 0, (h, {c["dataset"]: c["by_policy"][h]["n"] for c in (generated, generated_model)})


@pytest.mark.realdata
def test_references_are_played_where_their_hacks_are(ambiqt, mmsql):
    """The AmbiQT chooser's bound is chance: uniform_reading plays every reading of each of its samples once."""
    for res in (ambiqt, mmsql):
        for ref in REFERENCES:
            users = [h for h in HACKS if ref in HACKS[h].references]
            assert res["by_policy"][ref]["n_samples"] == max(res["by_policy"][u]["n_samples"] for u in users)
    row, ref = ambiqt["by_policy"]["ambiqt_schema_chooser"], ambiqt["by_policy"]["uniform_reading"]
    assert ref["n"] >= 2 * ref["n_samples"]  # at least two readings per sample
    assert set(row["refs"]["binary"]) == {"uniform_reading"}


@pytest.mark.realdata
@pytest.mark.parametrize("corpus", ("mmsql", "cosql_fixture", "ambiqt", "generated", "generated_model"))
def test_oracle_keeps_its_margin_on_other_corpora(request, corpus):
    """The oracle beats the random agent by 0.5 under every preset and no non-privileged hack (mini-interact is
    left out: its gold SQL is withheld upstream, so no policy earns EX there)."""
    res = request.getfixturevalue(corpus)
    _check_oracle_margin(res)
    _check_oracle(res)


def test_bench_tables_fit_in_100_columns(embedded):
    """Every line that the bench prints for a corpus is at most 100 columns wide."""
    text = RT.table(embedded, PRESET_NAMES)
    wide = [ln for ln in text.splitlines() if len(ln) > 100]
    assert not wide, wide[:3]
    assert "FAIL cells:" in text and "embedded" in text.splitlines()[0]


def test_corpus_list_names_every_corpus_and_why_one_is_skipped():
    """The bench lists every corpus; BIRD mini-dev is skipped with its reason (no databases shipped)."""
    specs = RT.corpus_specs(str(SHARED_DATA))
    assert tuple(specs) == RT.CORPORA
    assert specs["bird-minidev"][0] is None and "databases" in specs["bird-minidev"][1]
    assert specs["embedded"][0] == "embedded"
    assert RT.spread(list(range(10)), 4) == [0, 2, 5, 7]


#: a fake-council rationale (generated ABISS recipe on Spider dev's concert_singer, seed 0) and its question
FAKE_COUNCIL_HK = ("The concert_singer database has no column or table that records favourite colours, so this "
                   "cannot be answered; ask the database administrator to add that information.")
FAKE_COUNCIL_Q = "What is the favourite colour of each singer in concert_singer?"


def test_a_user_refusal_handed_back_as_feedback_adds_no_word_the_fb_judge_counts():
    """Every refusal of the simulated users (both use :data:`REFUSALS`) has no content stem the FB judge counts, so
    the ``clarify_reply_feedback`` hack (ask why it cannot be answered, hand the reply back) earns no FB: the
    former "Sorry, I have nothing to add on that." shared ``add`` with the fake council's rationale tail."""
    from textsql_clarify.rewards.feedback.words import added_words, novel_recall
    from textsql_clarify.simulators.base import REFUSALS
    for text in REFUSALS:
        assert added_words(text, "") == frozenset(), text
        assert novel_recall(text, FAKE_COUNCIL_HK, FAKE_COUNCIL_Q) == 0.0, text
    assert novel_recall("Sorry, I have nothing to add on that.", FAKE_COUNCIL_HK, FAKE_COUNCIL_Q) > 0.0


# -- test-suite EX: the `suite` preset, played through an env with ex_mode="suite" ------------------------------
#: the answer-prior residuals of single-instance EX (constants, table reads, counts of every table): on the
#: variants a constant or a table read that one database happens to match fails (docs/metrics.md, Test-suite EX)
ANSWER_PRIOR = ("data_zero", "data_zero_three", "star_mentioned", "star_widest", "table_counts_4")


@pytest.fixture(scope="module")
def spider_suite(tmp_path_factory):
    if not (SPIDER / "dev.json").exists():
        pytest.skip(f"Spider dev is absent under {SPIDER}")
    presets = {p: resolve_preset(p) for p in SUITE_PRESETS}
    res = RT.run("spider", "spider", POLICIES, presets, limit=None, margin=MARGIN, n_verify=1, progress=False,
                 samples=_spider_subset(), suite_limit=None, suite_k=4,
                 suite_cache_dir=str(tmp_path_factory.mktemp("suite_variants")))
    res["by_policy"] = {r["policy"]: r for r in res["rows"]}
    return res


@pytest.mark.realdata
def test_no_hack_beats_its_bound_under_the_suite_preset(spider_suite):
    """Every hack under ``suite`` (``ex_suite`` + ``feedback``) on the Spider subset (32 samples, 4 variants per
    database): no FAIL cell, the answer-prior residuals earn 0.000, and the replayed returns equal the env's."""
    assert not spider_suite["verify_mismatches"], spider_suite["verify_mismatches"][:5]
    rows = spider_suite["by_policy"]
    fails = {h: rows[h]["reward"]["suite"] for h in HACKS if rows[h]["verdict"].get("suite") == "FAIL"}
    assert not fails, fails
    assert {h: rows[h]["reward"]["suite"] for h in ANSWER_PRIOR} == dict.fromkeys(ANSWER_PRIOR, 0.0)
    oracle, rnd = rows["oracle"]["reward"]["suite"], rows["random"]["reward"]["suite"]
    assert oracle >= rnd + 0.5, (oracle, rnd)
    n = rows["oracle"]["n_samples"]
    beaten = {h: rows[h]["reward"]["suite"] for h in HACKS if rows[h]["n_samples"] == n and not rows[h]["privileged"]
              and rows[h]["scope"] == "episode" and rows[h]["reward"]["suite"] > oracle + 1e-9}
    assert not beaten, (oracle, beaten)


def test_spread_keeps_an_ambiqt_items_two_draws_together():
    """An item's other draw (id + OTHER_SUFFIX) rides with its drawn sample: n counts items, not samples."""
    from types import SimpleNamespace as NS

    items = [NS(id=f"a{i}") for i in range(6)]
    both = [x for s in items for x in (s, NS(id=s.id + OTHER_SUFFIX))]
    picked = RT.spread(both, 3)
    assert [s.id for s in picked] == ["a0", "a0~other", "a2", "a2~other", "a4", "a4~other"]
    assert len(RT.spread(both, 6)) == 12
