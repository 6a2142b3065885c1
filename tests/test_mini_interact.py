"""mini-interact loader (BIRD-Interact, gold withheld): counts, hidden knowledge, evidence, bad records, and the
clarification-only episode contract (EX / FB None, nothing paid, clarification metrics defined)."""
from __future__ import annotations

import collections
import functools
import json
import sqlite3
from pathlib import Path

import pytest

from conftest import MeanIs
from textsql_clarify.baselines.agents import WITHHELD_FEEDBACK, make_agent
from textsql_clarify.rollout.evaluation import evaluate
from textsql_clarify.sql.sandbox import get_sandbox
from textsql_clarify.datasets import load_dataset
from textsql_clarify.datasets.mini_interact import (
    describe_snippet, evidence_of, hidden_knowledge_of, load_mini_interact, plain_math)
from textsql_clarify.envs.scoring import score_sql_turn
from textsql_clarify.errors import DatasetError
from textsql_clarify.rewards.metrics import MetricsError, aggregate
from textsql_clarify.samples import sample_from_dict
from textsql_clarify.simulators.base import UserRequest
from textsql_clarify.simulators.rule_based import RuleBasedUser
from textsql_clarify.trajectory import Trajectory

ALIEN_1_HK = (
    "By 'signal quality' I mean Signal-to-Noise Quality Indicator (SNQI): Combines SNR and noise floor to provide a "
    "unified signal quality metric. SNQI = SnrRatio - 0.1 × |NoiseFloorDbm|, where higher values indicate better "
    "detection quality. Positive values generally indicate analyzable signals. By 'good signals' I mean the number "
    "of records where snqi is more than 0 (analyzable signals).")


@functools.lru_cache(maxsize=1)
def _load(path: str):
    return load_mini_interact(path)


@pytest.fixture
def mini_dir(shared_data) -> Path:
    d = shared_data / "mini_interact"
    if not (d / "mini_interact.jsonl").is_file():
        pytest.skip("real data absent: ../shared/data/mini_interact/mini_interact.jsonl not found")
    return d


@pytest.fixture
def loaded(mini_dir):
    return _load(str(mini_dir))   # read once per session (samples are immutable)


@pytest.fixture
def by_id(loaded):
    return {s.id: s for s in loaded.samples}


# ----------------------------------------------------------------------------- real data: counts and content

def test_counts_on_the_real_release(loaded):
    assert loaded.n_tasks == 300
    assert len(loaded.samples) == 261
    assert {db: len(v) for db, v in loaded.skipped.items()} == {"cybermarket": 10, "exchange_traded_funds": 13,
                                                                  "hulushows": 16}
    assert loaded.n_skipped == 39 == 300 - 261
    assert len({s.db_id for s in loaded.samples}) == 23  # 24 databases present; sports_events has no task
    ids = [s.id for s in loaded.samples]
    assert len(set(ids)) == 261 and ids[0] == "mini-interact-alien_1"
    assert all(s.group == "ambiguous" and s.subcategory is None and s.difficulty == "unknown" for s in loaded.samples)
    assert all(s.gold_sql is None and s.gold_withheld and not s.solvable for s in loaded.samples)
    assert all(s.provenance["gold"] == "withheld" for s in loaded.samples)
    assert all(Path(s.db_path).is_file() and s.db_path.endswith(f"{s.db_id}/{s.db_id}.sqlite") for s in loaded.samples)


def test_the_spec_loads_the_same(mini_dir):
    samples = load_dataset(f"mini-interact:{mini_dir}")
    assert len(samples) == 261 and samples[-1].id == "mini-interact-solar_11"
    with pytest.raises(DatasetError, match="mini-interact:<dir>"):
        load_dataset("mini-interact:")
    with pytest.raises(DatasetError, match="mini-interact folder not found"):
        load_dataset(f"mini-interact:{mini_dir / 'nope'}")


def test_hidden_knowledge_of_alien_1_states_each_term(by_id):
    s = by_id["mini-interact-alien_1"]
    assert s.question.startswith("I want to analyze how the signal quality varies across different atmospheric")
    # 'signal quality' shares its snippet with the knowledge ambiguity on KB entry 0 (SNQI): stated from the KB;
    # 'good signals' from its snippet SUM(CASE WHEN SNQI > 0 THEN 1 ELSE 0 END) as analyzable_signals, in words
    assert s.hidden_knowledge == ALIEN_1_HK
    assert s.provenance["hidden_knowledge_from"] == {"kb": 1, "words": 1, "quoted": 0, "knowledge": 0}
    assert s.provenance["critical_terms"] == ["signal quality", "good signals"]
    assert s.provenance["non_critical_ambiguity"] == [{"term": "order", "type": "sort_ambiguity",
                                                       "sql_snippet": "ORDER BY avg_snqi DESC"}]


def test_hidden_knowledge_of_alien_2_adds_the_masked_knowledge(by_id):
    hk = by_id["mini-interact-alien_2"].hidden_knowledge
    assert hk.startswith("By 'score level' I mean \"Low\" when tech sig prob times (1 minus nat src prob) times sig "
                         "unique times (0.5 plus anom score divided by 10) is less than 0.25, \"Medium\" when")
    assert "By 'anomaly metric' I mean the square root of" in hk
    # knowledge_ambiguity deletes KB entry 52 (TOLS Category), resolved by no term: its own sentence
    assert hk.endswith("For TOLS Category I go by this definition: Classification of signals based on TOLS thresholds. "
                       "Categorized as 'Low' if TOLS < 0.25, 'Medium' if TOLS < 0.75, and 'High' otherwise.")


def test_evidence_is_the_knowledge_base_minus_the_masked_entries(by_id, mini_dir):
    kb = [json.loads(x) for x in (mini_dir / "alien" / "alien_kb.jsonl").read_text(encoding="utf-8").splitlines()]
    s1, s2 = by_id["mini-interact-alien_1"], by_id["mini-interact-alien_2"]
    assert len(kb) == 56 and len(s1.evidence) == 55 and len(s2.evidence) == 55
    assert not any(e.startswith("Signal-to-Noise Quality Indicator (SNQI):") for e in s1.evidence)  # KB 0 deleted
    assert any(e.startswith("Signal-to-Noise Quality Indicator (SNQI):") for e in s2.evidence)
    assert not any(e.startswith("TOLS Category:") for e in s2.evidence)                            # KB 52 deleted
    assert s1.evidence[0] == ("Atmospheric Observability Index (AOI): AOI = AtmosTransparency × (1 - (HumidityRate) "
                              "/ (100)) × (1 - 0.02 × WindSpeedMs), where values closer to 1 indicate ideal "
                              "observation conditions.")
    assert all("$" not in e and "\\" not in e for s in by_id.values() for e in s.evidence)
    assert all(sum(len(e) + 3 for e in s.evidence) <= 16_000 for s in by_id.values())
    left = {sid: s.provenance["evidence_left_out"] for sid, s in by_id.items() if s.provenance["evidence_left_out"]}
    assert len(left) == 12 and all(sid.startswith("mini-interact-cold_chain_pharma_compliance_") for sid in left)


def test_describe_snippet_real_snippets():
    assert describe_snippet("SUM(CASE WHEN SNQI > 0 THEN 1 ELSE 0 END) as analyzable_signals") == \
        "the number of records where snqi is more than 0 (analyzable signals)"
    assert describe_snippet("WHERE tm.match_status = 'Completed' AND cm.hla_mis_count = 1") == \
        'only where match status is "Completed" and hla mis count is 1'
    assert describe_snippet("AND CAST(JSON_EXTRACT(p.dwelling_specs, '$.Room_Count') AS REAL) > 0") == \
        "only where the room count recorded in dwelling specs is more than 0"
    assert describe_snippet("ROUND(AVG(credscore), 2) AS average_credscore") == \
        "the average credscore rounded to 2 decimals"
    assert describe_snippet("ORDER BY max_ape_rank DESC\nLIMIT 50") == \
        "sorted from highest to lowest by max ape rank; only the first 50 results"
    assert describe_snippet("(t.deliverysuccessrate / 100.0) * (1 - t.avgdeliveryh") is None  # truncated upstream


def test_plain_math():
    assert plain_math(r"$\text{SNQI} = \text{SnrRatio} - 0.1 \times |\text{NoiseFloorDbm}|$") == \
        "SNQI = SnrRatio - 0.1 × |NoiseFloorDbm|"
    assert plain_math(r"$S = \sum_{i \in \{A, B\}} (x_i \neq y_i)$") == "S = Σ_i ∈ (A, B) (x_i ≠ y_i)"
    assert plain_math(r"$X = \begin{cases} 2 & \text{if } a \\ 0 & \text{otherwise} \end{cases}$") == \
        "X = 2 if a ; 0 otherwise"


# ----------------------------------------------------------------------------- the rule-based user on real tasks

def _ask(s, clarification):
    return RuleBasedUser().respond([UserRequest(sample=s, clarification=clarification, history=(),
                                                schema_identifiers=frozenset(), l1_resolved=False, gold_sql=None)])[0]


def test_a_question_about_each_critical_term_is_relevant(loaded):
    labels = collections.Counter()
    for s in loaded.samples:
        for term in dict.fromkeys(s.provenance["critical_terms"]):
            labels[_ask(s, f"What do you mean by '{term}'?").label] += 1
    n = sum(labels.values())
    assert n == 631
    assert labels["relevant"] / n >= 0.95, labels  # measured 611 / 631; 12 technical (top-k, ranking), 8 irrelevant


def test_technical_question_on_a_withheld_gold_leaves_the_detail_to_the_agent(by_id):
    r = _ask(by_id["mini-interact-alien_1"], "Should the results be sorted from highest to lowest?")
    assert r.label == "technical" and r.meta["reason"] == "technical_withheld"
    assert r.text == "I'd rather leave that detail to you."


# ----------------------------------------------------------------------------- episodes: EX None, nothing paid

def _clar_labels(trajs):
    return collections.Counter(t.user_reply["label"] for tr in trajs for t in tr.turns if t.action_type == "clarify")


def test_oracle_asks_then_ends_without_pay(loaded):
    trajs, m = evaluate(loaded.samples, make_agent("oracle"), progress=False)
    assert len(trajs) == 261
    assert all(t.scores["ex"] is None and t.scores["ex_strict"] is None and t.scores["fb"] is None for t in trajs)
    assert all(t.gold_status == "withheld" and t.outcome == "feedback" for t in trajs)
    assert all(t.turns[-1].content == WITHHELD_FEEDBACK for t in trajs)
    assert sum(x.reward for t in trajs for x in t.turns) == 0.0
    labels = _clar_labels(trajs)
    assert labels == {"relevant": 260, "irrelevant": 1}  # gaming_9: "my favorite ... categories" reads as personal
    ov = m["overall"]
    assert ov["EX"] == MeanIs(None, 0) and ov["FB"] == MeanIs(None, 0)
    assert ov["DEA"] == MeanIs(None, 0)
    assert ov["AR"] == MeanIs(1.0, 261)
    assert ov["AIR"] == MeanIs(1.0, 260)
    assert ov["turns"] == MeanIs(2.0, 261)
    assert m["ceilings"]["gold_withheld"] == 261
    assert m["by_subcategory"]["unknown"]["n_trajectories"] == 261
    leaked = sum(t.user_reply["leak_rejections"] > 0 for tr in trajs for t in tr.turns if t.action_type == "clarify")
    assert leaked == 18  # hidden knowledge that reads as SQL to the guard (a quoted snippet, "where x = ...")


def test_recognition_is_defined_with_the_classification_phase(loaded):
    trajs, m = evaluate(loaded.samples[:20], make_agent("oracle"), progress=False, classification_phase=True)
    assert m["overall"]["Rec"] == MeanIs(1.0, 20)   # the oracle names the group: the subcategory is unknown
    assert m["overall"]["Cls"] == MeanIs(None, 0)
    assert all(t.scores["ex"] is None for t in trajs)


class _Policy:
    """A scripted red-team policy: ``always_ask`` clarifies while it may, then (like ``never_ask``) sends SQL."""

    privileged = False

    def __init__(self, name: str, final: str = "<sql>SELECT 1</sql>", ask: bool = False):
        self.name, self.final, self.ask = name, final, ask

    def begin_episode(self, sample):
        pass

    def act(self, observation, info):
        if self.ask and observation["clarifications_left"] > 0:
            return "<clarify>What exactly do you mean by the terms in your question, and which definition holds?</clarify>"
        return self.final


@pytest.mark.parametrize("preset, expected", [
    ("binary", {"oracle": 0.0, "never_ask": 0.0, "always_ask": 0.0, "refuse": 0.0}),
    ("shaped", {"oracle": -0.05, "never_ask": 0.0, "always_ask": -0.15, "refuse": 0.0}),
])
def test_no_policy_farms_reward_on_withheld_golds(loaded, preset, expected):
    samples = loaded.samples[:40]
    policies = {"oracle": make_agent("oracle"), "never_ask": _Policy("never_ask"),
                "always_ask": _Policy("always_ask", ask=True), "refuse": _Policy("refuse", "<feedback>No.</feedback>")}
    for name, agent in policies.items():
        trajs, m = evaluate(samples, agent, progress=False, reward_preset=preset)
        returns = {round(sum(x.reward for x in t.turns), 6) for t in trajs}
        assert returns == {expected[name]}, (name, returns)
        assert all(t.scores["ex"] is None and t.scores["fb"] is None for t in trajs)
        assert m["overall"]["EX"]["n"] == 0
    # the always-asking policy spends the whole budget on one generic question; the rule-based user's
    # "which definition" cue labels it relevant every time (a known limit of the relevancy metric, documented in
    # docs/datasets.md), yet it earns nothing: relevancy is measured, never paid
    trajs, m = evaluate(samples, policies["always_ask"], progress=False)
    assert all(len(t.clarifications) == 3 for t in trajs)
    assert _clar_labels(trajs) == {"relevant": 120}
    assert m["overall"]["AIR"] == MeanIs(0.0, 40)   # it never turns the answer into an ending


# ----------------------------------------------------------------------------- the withheld gold in the format

def _native(**kw):
    rec = dict(id="a", db_id="d", db_path="/nowhere.sqlite", question="List the good ones.", group="ambiguous",
               subcategory=None, hidden_knowledge="By 'good' I mean a score above 3.", gold_sql=None,
               provenance={"gold": "withheld"})
    rec.update(kw)
    return sample_from_dict(rec, check_db_exists=False)


def test_withheld_gold_only_for_an_ambiguous_sample():
    s, probs = _native()
    assert probs == [] and s.gold_withheld and not s.solvable
    assert sample_from_dict(s.to_dict(), check_db_exists=False)[0] == s
    _, probs = _native(provenance={})
    assert [(p.field, p.message[:27]) for p in probs] == [("gold_sql", "is required for group 'ambi")]
    _, probs = _native(group="answerable", subcategory="answerable_without_evidence")
    assert [p.field for p in probs] == ["provenance.gold"]
    _, probs = _native(gold_sql="SELECT 1")
    assert [p.field for p in probs] == ["provenance.gold"]
    _, probs = _native(interpretations=[{"gold_sql": "SELECT 2", "hidden_knowledge": "I mean two."}])
    assert [p.field for p in probs] == ["provenance.gold"]


def test_score_sql_turn_with_a_withheld_gold(tmp_path):
    db = tmp_path / "t.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE t (x INTEGER)")
    con.execute("INSERT INTO t VALUES (1)")
    con.commit()
    con.close()
    res = score_sql_turn("SELECT x FROM t", None, get_sandbox(str(db)), gold_key="w", gold_withheld=True)
    assert res.gold_status == "withheld" and res.ex_status == "gold_withheld"
    assert res.components["ex"] is None and res.components["ex_strict"] is None and res.components["cell_f1"] is None
    assert res.execution["n_rows"] == 1 and res.execution["error_kind"] is None
    unanswerable = score_sql_turn("SELECT x FROM t", None, get_sandbox(str(db)), gold_key="u")
    assert unanswerable.components["ex"] == 0.0 and unanswerable.gold_status == "none"


def test_metrics_reject_withheld_outside_ambiguous():
    t = Trajectory(sample_id="u", db_id="d", group="unanswerable", subcategory=None, gold_status="withheld",
                   outcome="feedback", scores={})
    with pytest.raises(MetricsError, match="gold_status"):
        aggregate([t])


# ----------------------------------------------------------------------------- a built release: records and golds

def _build_release(root: Path, tasks: list, *, kb: list | None = None, db: str = "shop") -> Path:
    (root / db).mkdir(parents=True)
    con = sqlite3.connect(root / db / f"{db}.sqlite")
    con.execute("CREATE TABLE items (itemid INTEGER PRIMARY KEY, price REAL, rating REAL)")
    con.executemany("INSERT INTO items VALUES (?, ?, ?)", [(1, 9.5, 4.5), (2, 20.0, 2.0), (3, 5.0, 3.5)])
    con.commit()
    con.close()
    kb = kb if kb is not None else [
        {"id": 0, "knowledge": "Value Score (VS)", "description": "Rating per price.",
         "definition": r"$\text{VS} = \frac{\text{rating}}{\text{price}}$", "type": "calculation_knowledge",
         "children_knowledge": -1},
        {"id": 1, "knowledge": "Good Item", "description": "An item worth buying.", "definition": "VS above 0.3.",
         "type": "domain_knowledge", "children_knowledge": [0]}]
    (root / db / f"{db}_kb.jsonl").write_text("".join(json.dumps(k) + "\n" for k in kb), encoding="utf-8")
    (root / "mini_interact.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks), encoding="utf-8")
    return root


def _task(iid="shop_1", db="shop", **kw):
    t = {"instance_id": iid, "selected_database": db, "amb_user_query": "Show the good items by value.",
         "preprocess_sql": [], "clean_up_sqls": [], "sol_sql": [], "external_knowledge": [], "test_cases": [],
         "high_level": False, "category": "Query",
         "user_query_ambiguity": {
             "critical_ambiguity": [{"term": "good items", "sql_snippet": "WHERE rating / price > 0.3",
                                     "is_mask": True, "type": "knowledge_linking_ambiguity"}],
             "non_critical_ambiguity": [{"term": "order", "sql_snippet": "ORDER BY rating DESC", "is_mask": False,
                                         "type": "sort_ambiguity"}]},
         "knowledge_ambiguity": [{"term": "Good Item", "sql_snippet": "WHERE rating / price > 0.3", "is_mask": True,
                                  "type": "knowledge_ambiguity", "deleted_knowledge": 1}]}
    t.update(kw)
    return t


def test_built_release_maps_one_task(tmp_path):
    root = _build_release(tmp_path / "rel", [_task(), _task("gone_1", db="gone")])
    from textsql_clarify.errors import SkippedRecordsWarning

    with pytest.warns(SkippedRecordsWarning, match=r"1 of 2 tasks skipped, their database is absent: gone \(1\)"):
        out = load_mini_interact(root)
    assert out.n_tasks == 2 and out.skipped == {"gone": ["gone_1"]}
    (s,) = out.samples
    assert s.id == "mini-interact-shop_1" and s.gold_withheld
    assert s.hidden_knowledge == "By 'good items' I mean Good Item: An item worth buying. VS above 0.3."
    assert s.evidence == ("Value Score (VS): VS = (rating) / (price)",)  # entry 1 is masked


def test_bad_records_all_reported_with_line_and_field(tmp_path):
    bad = [
        _task("shop_1"),
        _task("shop_1"),                                                             # duplicate id
        _task("shop_3", amb_user_query=""),                                          # empty question
        _task("shop_4", knowledge_ambiguity=[{"term": "x", "sql_snippet": "", "deleted_knowledge": 7}]),
        _task("shop_5", user_query_ambiguity={"critical_ambiguity": [], "non_critical_ambiguity": []},
              knowledge_ambiguity=[]),                                               # nothing to clarify
        "not an object",
    ]
    root = _build_release(tmp_path / "rel", bad)
    with root.joinpath("mini_interact.jsonl").open("a", encoding="utf-8") as fh:
        fh.write("{broken json\n")
    with pytest.raises(DatasetError) as ei:
        load_mini_interact(root)
    got = [(p.line, p.field) for p in ei.value.problems]
    assert got == [(2, "instance_id"), (3, "amb_user_query"), (4, "knowledge_ambiguity[0].deleted_knowledge"),
                   (5, "user_query_ambiguity"), (6, "<record>"), (7, "<record>")]
    assert all(p.file.endswith("mini_interact.jsonl") for p in ei.value.problems)


def test_no_database_present_is_an_error(tmp_path):
    root = _build_release(tmp_path / "rel", [_task("gone_1", db="gone")])
    with pytest.raises(DatasetError, match="no mini-interact task"):
        load_mini_interact(root)


def test_a_merged_ground_truth_is_used_as_gold(tmp_path):
    gold = "SELECT itemid FROM items WHERE rating / price > 0.3 ORDER BY rating DESC"
    root = _build_release(tmp_path / "rel", [_task(sol_sql=[gold]),
                                             _task("shop_2", sol_sql=[gold], preprocess_sql=["UPDATE items SET price = 1"])])
    s1, s2 = load_mini_interact(root).samples
    assert s1.gold_sql == gold and s1.provenance["gold"] == "given" and not s1.gold_withheld
    assert s2.gold_withheld and "preprocess_sql" in s2.provenance["gold_note"]
    trajs, m = evaluate([s1, s2], make_agent("oracle"), progress=False)
    assert [t.scores["ex"] for t in trajs] == [1.0, None]
    assert m["overall"]["EX"] == MeanIs(1.0, 1)


def test_hidden_knowledge_and_evidence_helpers_on_a_record():
    kb = {0: {"knowledge": "VS", "description": "d", "definition": "x"}, 5: {"knowledge": "Masked", "definition": "m"}}
    task = _task(knowledge_ambiguity=[{"term": "Masked", "sql_snippet": "zz", "deleted_knowledge": 5}])
    hk, counts = hidden_knowledge_of(task, kb)
    assert hk == "By 'good items' I mean only where rating divided by price is more than 0.3. " \
                 "For Masked I go by this definition: m."
    assert counts == {"kb": 0, "words": 1, "quoted": 0, "knowledge": 1}
    assert evidence_of(task, kb) == (["VS: x"], 0)
    assert evidence_of(task, kb, limit=3) == ([], 1)
