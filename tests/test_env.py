"""The environment end to end on the embedded dataset: protocol, rewards, baselines, sandbox."""
from __future__ import annotations

import hashlib
import warnings
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import textsql_clarify  # noqa: F401  (registers the env)
from conftest import generous_bound, MeanIs
from textsql_clarify.baselines.agents import NoClarifyAgent, OracleAgent, RandomAgent
from textsql_clarify.rollout.evaluation import evaluate, run_episode
from textsql_clarify.datasets import embedded_db_path, load_dataset
from textsql_clarify.envs.env import TextSQLClarifyEnv
from textsql_clarify.samples import Sample


@pytest.fixture(scope="module")
def samples() -> list[Sample]:
    return load_dataset("embedded")


def _sha(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_gym_make_and_check_env_without_warnings():
    env = gym.make("TextSQLClarify-v0")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped, skip_render_check=True)
    msgs = [str(w.message) for w in caught]
    assert msgs == []


def test_oracle_scores_ex_and_fb_of_one(samples):
    trajs, metrics = evaluate(samples, OracleAgent(), progress=False)
    solvable = [t for t in trajs if t.group != "unanswerable"]
    unans = [t for t in trajs if t.group == "unanswerable"]
    assert solvable and unans
    assert all(t.gold_status == "ok" for t in solvable)
    assert [t.sample_id for t in solvable if t.scores["ex"] != 1.0] == []
    assert [t.sample_id for t in unans if t.scores["fb"] != 1.0] == []
    assert metrics["overall"]["EX"]["value"] == 1.0
    assert metrics["overall"]["EX"]["n"] == len(solvable)
    drift = [t for t in trajs if t.has_drift]
    assert drift and all(t.scores["ex_post"] == 1.0 and t.scores["drift_recognised"] is True for t in drift)


def test_no_clarify_is_below_oracle_on_ambiguous(samples):
    amb = [s for s in samples if s.group == "ambiguous"]
    oracle, _ = evaluate(amb, OracleAgent(), progress=False)
    naive, _ = evaluate(amb, NoClarifyAgent(), progress=False)
    ex_o = sum(t.scores["ex"] for t in oracle) / len(oracle)
    ex_n = sum(t.scores["ex"] for t in naive) / len(naive)
    assert ex_o == 1.0
    assert ex_n < ex_o


def _env(samples, **kw) -> TextSQLClarifyEnv:
    return TextSQLClarifyEnv(samples=samples, **kw)


def _first(samples, group):
    return next(s for s in samples if s.group == group and s.drift is None and s.chain is None)


def test_malformed_action_retried_once_then_abstention(samples):
    s = _first(samples, "answerable")
    env = _env(samples)
    env.reset(options={"sample_id": s.id})
    obs, r, term, trunc, info = env.step("SELECT 1")
    assert not term and not trunc
    assert info["reward_components"] == {"ex": None, "ex_strict": None, "feedback": None, "abstained": None,
                                         "format": -1.0, "turn_penalty": 0.0}
    assert "Invalid action" in obs["last_message"]
    obs, r, term, trunc, info = env.step("<sql>SELECT 1")
    assert term and not trunc
    t = info["trajectory"]
    assert t.outcome == "abstain" and [x.action_type for x in t.turns] == ["invalid", "invalid"]
    assert t.scores["ex"] == 0.0


def test_one_malformed_then_valid_goes_on(samples):
    s = _first(samples, "answerable")
    env = _env(samples)
    env.reset(options={"sample_id": s.id})
    env.step("")
    obs, r, term, trunc, info = env.step(f"<sql>{s.gold_sql}</sql>")
    assert term and r == 1.0 and info["scores"]["ex"] == 1.0


def test_clarification_budget_then_forced_final_turn(samples):
    s = _first(samples, "ambiguous")
    env = _env(samples, max_clarifications=3)
    obs, _ = env.reset(options={"sample_id": s.id})
    assert obs["clarifications_left"] == 3
    for k in range(3):
        obs, r, term, trunc, info = env.step("<clarify>Should the results be sorted?</clarify>")
        assert not term and not trunc
    assert obs["clarifications_left"] == 0 and obs["phase"] == 2  # final
    obs, r, term, trunc, info = env.step("<clarify>One more?</clarify>")
    assert trunc and not term
    assert info["trajectory"].outcome == "truncated"
    assert info["scores"]["ex"] == 0.0


def test_wrong_terminal_type_scores_zero(samples):
    env = _env(samples)
    a = _first(samples, "answerable")
    env.reset(options={"sample_id": a.id})
    _, r, term, _, info = env.step("<feedback>cannot be answered</feedback>")
    assert term and r == 0.0 and info["scores"]["fb"] == 0.0 and info["scores"]["ex"] == 0.0
    u = _first(samples, "unanswerable")
    env.reset(options={"sample_id": u.id})
    _, r, term, _, info = env.step("<sql>SELECT 1</sql>")
    assert term and r == 0.0 and info["scores"]["ex"] == 0.0 and info["scores"]["fb"] == 0.0


def test_unanswerable_clarification_is_an_irrelevant_refusal(samples):
    u = _first(samples, "unanswerable")
    env = _env(samples)
    env.reset(options={"sample_id": u.id})
    _, _, _, _, info = env.step("<clarify>What exactly do you need?</clarify>")
    env.step("<feedback>x</feedback>")
    reply = env.unwrapped._traj.turns[0].user_reply if hasattr(env, "unwrapped") else None
    assert reply["label"] == "irrelevant"


def test_reset_is_deterministic_and_sample_id_selects(samples):
    env1, env2 = _env(samples), _env(samples)
    ids1 = [env1.reset(seed=k)[1]["sample_id"] for k in range(5)]
    ids2 = [env2.reset(seed=k)[1]["sample_id"] for k in range(5)]
    assert ids1 == ids2
    target = samples[3].id
    assert env1.reset(options={"sample_id": target})[1]["sample_id"] == target
    with pytest.raises(KeyError):
        env1.reset(options={"sample_id": "nope"})


def test_same_seed_same_trajectory(samples):
    def without_timings(t):
        d = t.to_dict()
        for turn in d["turns"]:
            if turn["execution"]:
                turn["execution"].pop("elapsed_s")
        return d

    for seed in (11, 12, 13):
        t1 = run_episode(_env(samples), RandomAgent(seed=3), seed=seed)
        t2 = run_episode(_env(samples), RandomAgent(seed=3), seed=seed)
        assert without_timings(t1) == without_timings(t2)


def test_forbidden_sql_through_env_leaves_database_unchanged(samples):
    db = embedded_db_path()
    before = _sha(db)
    s = _first(samples, "answerable")
    env = _env(samples)
    for sql in ["DROP TABLE students", "INSERT INTO students DEFAULT VALUES", "ATTACH DATABASE 'x.db' AS x",
                "PRAGMA writable_schema=1", "SELECT 1; DROP TABLE courses", "SELECT load_extension('x')"]:
        env.reset(options={"sample_id": s.id})
        _, r, term, _, info = env.step(f"<sql>{sql}</sql>")
        assert term and r == 0.0
        assert info["trajectory"].turns[-1].execution["error_kind"] in ("forbidden", "syntax")
    assert _sha(db) == before


def test_runaway_query_is_interrupted_and_env_goes_on(samples):
    s = _first(samples, "answerable")
    env = _env(samples, timeout_s=0.5)
    env.reset(options={"sample_id": s.id})
    with generous_bound("a runaway query under a 0.5 s limit"):  # timing itself: bench/bench_sandbox_limits.py
        _, r, term, _, info = env.step(
            "<sql>WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT COUNT(*) FROM n</sql>")
    assert term and r == 0.0
    execution = info["trajectory"].turns[-1].execution
    assert execution["error_kind"] == "timeout" and execution["elapsed_s"] >= 0.5
    env.reset(options={"sample_id": s.id})
    _, r, term, _, _ = env.step(f"<sql>{s.gold_sql}</sql>")
    assert r == 1.0


def test_p_protocol_primes_l1(samples):
    chain = [s for s in samples if s.chain is not None]
    assert chain
    s = chain[0]
    env = _env(samples, protocol="p")
    obs, info = env.reset(options={"sample_id": s.id})
    assert s.chain.l1.question in obs["history"] and s.chain.l1.answer in obs["history"]
    t = run_episode(env, OracleAgent(), sample_id=s.id)
    assert t.protocol == "p" and t.scores["ex"] == 1.0
    assert [c.content for c in t.clarifications] == [s.chain.l2.question]


def test_drift_turn_injected_after_first_sql(samples):
    s = next(x for x in samples if x.drift is not None)
    env = _env(samples)
    env.reset(options={"sample_id": s.id})
    obs, r, term, trunc, info = env.step(f"<sql>{s.gold_sql}</sql>")
    assert not term and not trunc and r == 1.0
    assert obs["last_message"] == s.drift.utterance and obs["phase"] == 3
    # answering the drift with the same SQL: no commitment change -> not recognised, EX 0 on the post gold
    obs, r, term, trunc, info = env.step(f"<sql>{s.gold_sql}</sql>")
    assert term
    assert info["scores"]["drift_recognised"] is False and info["scores"]["ex_post"] == 0.0


def test_classification_phase_and_predicted_mode(samples):
    s = _first(samples, "ambiguous")
    env = _env(samples, category_mode="predicted")
    obs, _ = env.reset(options={"sample_id": s.id})
    assert obs["phase"] == 0
    obs, r, term, _, info = env.step("<sql>SELECT 1</sql>")
    assert not term and info["action_type"] == "invalid"
    obs, r, term, _, info = env.step(f"<category>{s.subcategory}</category>")
    assert obs["phase"] == 1 and s.subcategory in obs["context"]
    assert info["reward_components"]["classification"] == 1.0
    assert info["reward_components"]["ex"] is None and info["reward_components"]["format"] == 0.0


def test_schema_tables_hook_limits_schema_and_retrieval(samples):
    s = _first(samples, "answerable")
    env = _env(samples, schema_tables=lambda sample, tables: tables[:1])
    obs, _ = env.reset(options={"sample_id": s.id})
    shown = [ln for ln in obs["schema"].splitlines() if ln.upper().startswith("CREATE")]
    assert len(shown) == 1
    _, _, _, _, info = env.step(f"<sql>{s.gold_sql}</sql>")
    assert info["reward_components"]["table_precision"] is not None
    assert info["reward_components"]["spurious_tables"] >= 0


def test_dense_preset_does_not_pay_for_dropping_a_gold_column(samples):
    s = next(x for x in samples if x.id == "uni-ans-002")
    env = _env(samples, reward_preset="dense")
    env.reset(options={"sample_id": s.id})
    _, r, _, _, info = env.step("<sql>SELECT c.title FROM courses c</sql>")
    comps = info["reward_components"]
    assert comps["ex"] == 0.0 and comps["cell_f1"] == 1.0  # the article's cell F1 only sees paired columns
    assert comps["column_recall"] == 0.5 and comps["cell_f1_covered"] == 0.5
    # the dense preset pays sql_partial (rewards/dense.py): the gold is ordered and this query has none of its
    # ORDER BY keys, so the order factor is 0
    assert comps["sql_partial"] == 0.0 and r == 0.0
    env.reset(options={"sample_id": s.id})
    _, r, _, _, info = env.step("<sql>SELECT c.title FROM courses c LEFT JOIN student_courses sc ON sc.course_id = "
                                "c.course_id GROUP BY c.course_id, c.title ORDER BY COUNT(sc.student_id) DESC</sql>")
    # the same query with the gold's join, grouping and order but without the count column: rows 1, content 1,
    # order 1, columns F1(precision 1, recall 1/2) = 2/3
    assert info["reward_components"]["cell_f1_covered"] == 0.5 and r == pytest.approx(2 / 3)


def test_custom_preset_rejects_unknown_component(samples):
    with pytest.raises(ValueError, match="unknown reward component 'nonsense'"):
        _env(samples, reward_preset={"nonsense": 1.0})
    with pytest.raises(ValueError, match="unknown reward preset"):
        _env(samples, reward_preset="densest")
    with pytest.raises(ValueError, match="finite number"):
        _env(samples, reward_preset={"ex": float("nan")})
    env = _env(samples, reward_preset={"ex": 2.0, "turn_penalty": 0.5})
    s = _first(samples, "answerable")
    env.reset(options={"sample_id": s.id})
    _, r, _, _, _ = env.step("<clarify>Should the results be sorted?</clarify>")
    assert r == -0.5
    _, r, _, _, _ = env.step(f"<sql>{s.gold_sql}</sql>")
    assert r == 2.0


def test_dense_preset_uses_cell_f1(samples):
    s = _first(samples, "answerable")
    env = _env(samples, reward_preset="dense")
    env.reset(options={"sample_id": s.id})
    _, r, _, _, info = env.step(f"<sql>{s.gold_sql}</sql>")
    assert info["reward_components"]["cell_f1"] == 1.0 and r == 1.0


def test_step_after_end_raises(samples):
    env = _env(samples)
    s = _first(samples, "answerable")
    env.reset(options={"sample_id": s.id})
    env.step(f"<sql>{s.gold_sql}</sql>")
    with pytest.raises(RuntimeError, match="reset"):
        env.step("<sql>SELECT 1</sql>")


def test_sync_vector_env_runs(samples):
    envs = gym.make_vec("TextSQLClarify-v0", num_envs=2, vectorization_mode="sync")
    obs, infos = envs.reset(seed=0)
    assert len(obs["question"]) == 2
    obs, rewards, term, trunc, infos = envs.step(["<feedback>no</feedback>", "<feedback>no</feedback>"])
    assert term.tolist() == [True, True]
    envs.close()


def test_oracle_clarifications_are_judged_relevant(samples):
    amb = [s for s in samples if s.group == "ambiguous"]
    trajs, metrics = evaluate(amb, OracleAgent(), progress=False)
    labels = [(t.sample_id, c.user_reply["label"]) for t in trajs for c in t.clarifications]
    assert labels and [x for x in labels if x[1] != "relevant"] == []
    # AIR: after the first relevant reply the oracle answers, except on chain samples (it asks L2 next)
    n_chain = sum(1 for s in amb if s.chain is not None)
    assert metrics["overall"]["AIR"]["n"] == len(amb)
    assert metrics["overall"]["AIR"]["value"] == pytest.approx((len(amb) - n_chain) / len(amb))


def test_drift_sample_without_any_sql_counts_in_dea_and_dra(samples):
    s = next(x for x in samples if x.drift is not None)
    env = _env(samples)
    env.reset(options={"sample_id": s.id})
    _, _, term, _, info = env.step("<feedback>I cannot answer that.</feedback>")
    assert term
    sc = info["scores"]
    assert sc["ex"] == 0.0 and sc["ex_post"] == 0.0 and sc["drift_recognised"] is False
    from textsql_clarify.rewards.metrics import aggregate
    m = aggregate([info["trajectory"]])["overall"]
    assert m["DEA"] == MeanIs(0.0, 1) and m["DRA"] == MeanIs(0.0, 1)


def test_p_protocol_leaves_non_chain_samples_under_f(samples):
    s = _first(samples, "answerable")
    t = run_episode(_env(samples, protocol="p"), OracleAgent(), sample_id=s.id)
    assert t.protocol == "f" and t.scores["ex"] == 1.0


def test_episode_article_scores_describe_the_first_sql_like_ex(samples):
    s = next(x for x in samples if x.drift is not None)
    env = _env(samples)
    env.reset(options={"sample_id": s.id})
    env.step("<sql>SELECT 1</sql>")
    _, _, _, _, info = env.step(f"<sql>{s.drift.post_gold_sql}</sql>")
    sc = info["scores"]
    assert sc["ex"] == 0.0 and sc["ex_post"] == 1.0
    assert sc["cell_f1"] != 1.0  # the first SQL's, not the post-drift SQL's
    assert info["trajectory"].turns[-1].reward_components["cell_f1"] == 1.0


def test_truncated_gold_is_a_ceiling_not_an_agent_failure(samples):
    s = next(x for x in samples if x.id == "uni-ans-002")
    env = _env(samples, row_cap=1)
    env.reset(options={"sample_id": s.id})
    _, _, _, _, info = env.step(f"<sql>{s.gold_sql}</sql>")
    assert info["scores"]["ex"] is None and info["trajectory"].gold_status == "error"


def test_empty_gold_answered_without_sql_stays_a_ceiling(samples):
    import dataclasses
    base = _first(samples, "answerable")
    empty = dataclasses.replace(base, id="empty-gold", gold_sql="SELECT first_name FROM students WHERE 1 = 0")
    env = _env([empty])
    env.reset(options={"sample_id": "empty-gold"})
    _, _, _, _, info = env.step("<feedback>cannot be answered</feedback>")
    assert info["scores"]["ex"] is None and info["trajectory"].gold_status == "empty"


def test_lone_surrogate_action_is_malformed_not_a_crash(samples):
    u = _first(samples, "unanswerable")
    env = _env(samples)
    env.reset(options={"sample_id": u.id})
    _, _, term, _, info = env.step("<feedback>\ud800</feedback>")
    assert not term and info["action_type"] == "invalid" and "Unicode" in info["error"]


def test_wrong_query_that_runs_scores_zero_cell_recall(samples):
    s = _first(samples, "answerable")
    env = _env(samples)
    env.reset(options={"sample_id": s.id})
    _, _, _, _, info = env.step("<sql>SELECT 'zzz' AS q FROM students</sql>")
    comps = info["reward_components"]
    assert comps["ex"] == 0.0 and comps["cell_recall"] == 0.0 and comps["cell_f1"] == 0.0


def test_duplicate_sample_ids_are_rejected(samples):
    with pytest.raises(ValueError, match="unique"):
        _env([samples[0], samples[0]])


def test_a_preset_paying_detailed_components_needs_detailed_scores():
    # the dense preset pays sql_partial, which detailed_scores=False never computes: silently paying 0 for
    # every SQL (the gold included) would wreck an RL run, so construction refuses it
    with pytest.raises(ValueError, match=r"sql_partial.*detailed_scores=True"):
        gym.make("TextSQLClarify-v0", reward_preset="dense", detailed_scores=False)
    with pytest.raises(ValueError, match="cell_f1"):
        gym.make("TextSQLClarify-v0", reward_preset={"ex": 1.0, "cell_f1": 0.5}, detailed_scores=False)
    env = gym.make("TextSQLClarify-v0", reward_preset="strict", detailed_scores=False)  # cheap presets still run
    env.reset(options={"sample_id": "uni-ans-001"})
    s = env.unwrapped.current_sample
    assert env.step(f"<sql>{s.gold_sql}</sql>")[1] == 1.0


def test_unanswered_post_drift_request_uses_the_verdicts_gold_rule():
    # a post-drift gold that cannot score (here: truncated by the row cap) stays None whether or not the
    # agent answered it, as the EX verdict says (gold_error); before, an episode that never answered it got
    # ex_post 0.0 while one that did got None
    env = gym.make("TextSQLClarify-v0", row_cap=1)
    env.reset(options={"sample_id": "uni-drift-003"})
    s = env.unwrapped.current_sample
    assert env.unwrapped._sandbox.execute(s.drift.post_gold_sql).truncated
    *_, info = env.step("<feedback>The database does not hold this.</feedback>")
    assert info["scores"]["ex"] == 0.0 and info["scores"]["ex_post"] is None
    env.reset(options={"sample_id": "uni-drift-003"})
    env.step(f"<sql>{s.gold_sql}</sql>")
    *_, info = env.step(f"<sql>{s.drift.post_gold_sql}</sql>")
    assert info["scores"]["ex_post"] is None and info["reward_components"]["ex"] is None
