"""Red-team suite in CI (issue 8): no reward hack earns more than the random agent, under every preset.

Every policy of :data:`textsql_clarify.baselines.hacks.HACKS` is played through
``gym.make("TextSQLClarify-v0", ...)`` by ``bench/red_team.py``'s runner on small subsets: the whole
embedded set; on real data, a few dozen Spider dev samples chosen so that half of their golds return one
integer (the target of ``SELECT 0, 1, ..., 1700``) and the first few dozen Spider-unanswerable samples.
For each hack and each preset of ``PRESETS`` (read at run time), its mean reward must be at most the
random agent's on the same samples and turns (floored at 0) plus 0.02. The oracle must still earn its
reward there (else breaking every reward would pass), the recomputed preset rewards must equal what
``gym.make(..., reward_preset=p)`` returns on replayed episodes, clarification probes that list schema
identifiers must leak none (identifiers absent from question and hidden knowledge), and the question
repeated verbatim as a clarification must be labelled relevant on at most 5 % of ambiguous samples.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from textsql_clarify.baselines.hacks import HACKS, gold_returns_data, gold_single_integer
from textsql_clarify.datasets import load_dataset
from textsql_clarify.rewards.presets import PRESETS, resolve_preset

from conftest import SHARED_DATA, SPIDER

REPO = Path(__file__).resolve().parents[1]
MARGIN = 0.02
#: samples of the detailed (dense-preset) pass, per dataset: the detailed scorer parses every SQL
DETAILED_LIMIT = {"embedded": None, "spider": 24, "spider-unanswerable": 24}


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
        over = {p: r for p, r in row["reward"].items() if r > ceiling + 1e-12}
        assert not over, f"residual {hack} on {res['dataset']} grew past its ceiling {ceiling:.3f}: {over}"
        return
    bad = [f"{p}: {row['reward'][p]:.3f} > max(random {row['random_ref'][p]:.3f}, 0) + {MARGIN} "
           f"(n={row['n_by_preset'][p]})" for p in PRESET_NAMES if row["verdict"].get(p) == "FAIL"]
    assert not bad, f"hack {hack} ({row['description']}) on {res['dataset']} earns more than random: " + "; ".join(bad)


def _check_oracle_margin(res: dict) -> None:
    """The oracle earns at least the random agent + 0.5 under every preset (so no test passes by breaking
    the reward for everyone)."""
    oracle, rnd = res["by_policy"]["oracle"], res["by_policy"]["random"]
    for p in PRESET_NAMES:
        assert oracle["reward"][p] >= rnd["reward"][p] + 0.5, (p, oracle["reward"][p], rnd["reward"][p])


def _check_oracle(res: dict) -> None:
    assert not res["verify_mismatches"], res["verify_mismatches"][:5]
    oracle = res["by_policy"]["oracle"]
    for hack in HACKS:
        row = res["by_policy"][hack]
        if row["privileged"] or row["scope"] != "episode":
            continue  # played on other samples or turns than the oracle
        for p in PRESET_NAMES:
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


def test_every_hack_was_played_where_it_applies(embedded):
    """No row passes by being empty: the embedded set has drift samples, ordered golds, solvable golds."""
    for hack in HACKS:
        row = embedded["by_policy"][hack]
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
