"""The candidate-action wrapper for classic RL (``envs/wrappers.py``) and the MaskablePPO example.

Every test uses the model-free :class:`HashEncoder` and the lexical FB judge: nothing loads MiniLM.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from textsql_clarify.datasets import load_dataset
from textsql_clarify.envs.env import TextSQLClarifyEnv
from textsql_clarify.envs.wrappers import (ASK, ASK_TEMPLATE, CandidateActionWrapper, HashEncoder, candidate_sqls,
                                           mutations, supported_samples)
from textsql_clarify.rewards.feedback import LexicalFeedbackJudge

K = 6
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture(scope="module")
def embedded():
    return load_dataset("embedded")


def _wrapper(samples, **kw):
    kw.setdefault("encoder", HashEncoder(16))
    return CandidateActionWrapper(samples=samples, n_candidates=K, feedback_judge=LexicalFeedbackJudge(), **kw)


@pytest.fixture(scope="module")
def wrapper(embedded):
    return _wrapper(embedded)


def test_spaces_and_observation_shape_are_fixed_across_samples(wrapper):
    assert wrapper.action_space.n == K + 2
    # 16-dim embeddings: question, schema, 6 candidates, reply; 9 x 6 per-candidate features; the flag
    assert wrapper.observation_space.shape == (16 * 9 + 9 * K + 1,)
    for s in wrapper.env.unwrapped.samples:
        obs, info = wrapper.reset(options={"sample_id": s.id})
        assert obs.shape == wrapper.observation_space.shape and obs.dtype == np.float32
        assert wrapper.observation_space.contains(obs)
        assert len(info["candidates"]) == K
        assert len({" ".join(c.lower().split()) for c in info["candidates"]}) == K  # no repeat
        assert obs[wrapper.feature_slices["asked"]][0] == 0.0
        assert not obs[wrapper.feature_slices["reply"]].any()  # zeros before asking


def test_drift_samples_are_left_out_and_a_given_env_with_one_is_refused(embedded):
    kept = supported_samples(embedded)
    assert len(embedded) == 48 and len(kept) == 42  # the 6 embedded drift samples cannot be candidate episodes
    drift = next(s for s in embedded if s.drift is not None)
    env = TextSQLClarifyEnv(samples=[drift], feedback_judge=LexicalFeedbackJudge())
    with pytest.raises(ValueError, match=drift.id):
        CandidateActionWrapper(env, encoder=HashEncoder(8))


def test_gold_index_varies_so_a_fixed_index_policy_is_at_chance(wrapper):
    """On the 42 embedded episodes the gold sits at every index (4 to 6 times each over the 30 solvable ones);
    always answering with one index earns 0.10-0.17 under binary, the gold's index 30 / 42 = 0.714."""
    samples = wrapper.env.unwrapped.samples
    positions, fixed, oracle = [], np.zeros(K + 1), []
    for s in samples:
        for a in range(1, K + 1):
            _, info = wrapper.reset(options={"sample_id": s.id})
            fixed[a] += wrapper.step(a)[1]
        kinds = info["candidate_kinds"]
        if "reading0" in kinds:
            positions.append(kinds.index("reading0"))
            wrapper.reset(options={"sample_id": s.id})
            oracle.append(wrapper.step(kinds.index("reading0") + 1)[1])
    assert len(positions) == 30 and set(positions) == set(range(K))
    assert max(np.bincount(positions)) <= 6
    assert sum(oracle) == 30.0
    assert max(fixed[1:]) / len(samples) <= 0.2 < sum(oracle) / len(samples)


def test_unanswerable_candidates_are_distractors_and_answerable_have_the_gold(wrapper):
    for s in wrapper.env.unwrapped.samples:
        _, info = wrapper.reset(options={"sample_id": s.id})
        kinds = info["candidate_kinds"]
        readings = sorted(k for k in kinds if k != "distractor")
        expected = {"unanswerable": [], "answerable": ["reading0"], "ambiguous": ["reading0", "reading1"]}
        assert readings == expected[s.group]  # n_anchors = 2: the gold and the first interpretation


def test_candidates_are_deterministic_per_seed(embedded):
    s = next(x for x in embedded if x.id == "uni-user-001")
    schema = {"students": ["student_id", "first_name", "last_name", "dept_id"], "departments": ["dept_id", "name"]}
    a = candidate_sqls(s, n_candidates=K, pool=[], schema=schema, seed=0)
    assert a == candidate_sqls(s, n_candidates=K, pool=[], schema=schema, seed=0)
    orders = {tuple(candidate_sqls(s, n_candidates=K, pool=[], schema=schema, seed=k)[1]) for k in range(6)}
    assert len(orders) > 1  # the order moves with the seed


def test_mutations_drop_where_and_flip_comparison():
    out = mutations("SELECT title FROM courses WHERE year = 2024", {"courses": ["course_id", "title", "year"]})
    assert out[0] == "SELECT title FROM courses"
    assert "SELECT year FROM courses WHERE year = 2024" in out  # the next column not already shown
    assert "SELECT title FROM courses WHERE year <> 2024" in out


def test_ask_is_masked_once_taken(wrapper):
    wrapper.reset(options={"sample_id": "uni-user-001"})
    assert wrapper.action_masks().tolist() == [True] * (K + 2)
    obs, r, term, trunc, info = wrapper.step(ASK)
    assert not (term or trunc) and info["asked"]
    assert wrapper.action_masks().tolist() == [False] + [True] * (K + 1)
    assert obs[wrapper.feature_slices["asked"]][0] == 1.0


@pytest.mark.parametrize("preset, ask_reward", [("binary", 0.0), ("shaped", -0.05)])
def test_ask_then_pick_gives_the_env_reward(embedded, preset, ask_reward):
    w = _wrapper(embedded, reward_preset=preset)
    _, info = w.reset(options={"sample_id": "uni-user-001"})
    gold = info["candidate_kinds"].index("reading0") + 1
    _, r_ask, *_ = w.step(ASK)
    _, r_sql, term, _, info = w.step(gold)
    env = TextSQLClarifyEnv(samples=supported_samples(embedded), reward_preset=preset, max_clarifications=1,
                            feedback_judge=LexicalFeedbackJudge())
    env.reset(options={"sample_id": "uni-user-001"})
    _, e_ask, *_ = env.step(json.dumps({"type": "clarify", "content": ASK_TEMPLATE}))
    _, e_sql, e_term, *_ = env.step(json.dumps({"type": "sql", "content": info["candidates"][gold - 1]}))
    assert (r_ask, r_sql, term) == (e_ask, e_sql, e_term) == (ask_reward, 1.0, True)


def test_refuse_sends_the_templated_feedback(wrapper):
    wrapper.reset(options={"sample_id": "uni-ans-001"})
    _, r, term, _, info = wrapper.step(wrapper.refuse_action)
    assert term and info["action_type"] == "feedback" and r == 0.0  # feedback on an answerable question: FB 0


@pytest.mark.parametrize("sample_id", ["uni-user-001", "uni-user-003"])
def test_reply_features_point_to_the_reading_the_user_means(embedded, sample_id):
    """Swap which reading the user means (gold and hidden knowledge against the interpretation's): the reply
    differs, and its word overlap ranks the meant reading above the other one in both cases."""
    s = next(x for x in embedded if x.id == sample_id)
    it = s.interpretations[0]
    swapped = dataclasses.replace(s, gold_sql=it.gold_sql, hidden_knowledge=it.hidden_knowledge,
                                  interpretations=(dataclasses.replace(it, gold_sql=s.gold_sql,
                                                                       hidden_knowledge=s.hidden_knowledge),))
    feats = {}
    for variant in (s, swapped):
        w = _wrapper([variant])
        _, info = w.reset(options={"sample_id": s.id})
        obs = w.step(ASK)[0]
        ov = obs[w.feature_slices["cand_reply_overlap"]]
        meant = info["candidates"].index(variant.gold_sql)
        other = info["candidates"].index(variant.interpretations[0].gold_sql)
        assert ov[meant] > ov[other]
        feats[variant.gold_sql] = obs[w.feature_slices["reply"]]
    assert not np.allclose(*feats.values())


def test_reply_is_uninformative_on_an_answerable_sample(wrapper):
    """The template is irrelevant to an answerable question: the user's refusal is the same constant text."""
    replies = []
    for sid in ("uni-ans-001", "uni-ans-002"):
        wrapper.reset(options={"sample_id": sid})
        replies.append(wrapper.step(ASK)[0][wrapper.feature_slices["reply"]])
    assert np.array_equal(*replies) and replies[0].any()


def test_passes_gymnasium_env_checker(embedded):
    from gymnasium.utils.env_checker import check_env

    check_env(_wrapper(embedded[:12]), skip_render_check=True)


def test_train_sb3_smoke_runs_and_reports_baselines(tmp_path):
    if importlib.util.find_spec("sb3_contrib") is None:
        pytest.skip("sb3-contrib is not installed (extra 'sb3'): the MaskablePPO example cannot run")
    spec = importlib.util.spec_from_file_location("train_sb3", EXAMPLES / "train_sb3.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    report = mod.main(["--smoke", "--out", str(tmp_path)])
    assert json.loads((tmp_path / "report.json").read_text())["timesteps"] == 64
    held = report["heldout"]
    assert report["n_train"] + report["n_heldout"] == 42
    assert held["always_ask"]["ask_rate_other"]["mean"] == 1.0
    assert held["never_ask"]["ask_rate_distinguishable"]["mean"] == 0.0
    assert held["maskable_ppo"]["reward"]["n"] == report["n_heldout"]


def _train_sb3():
    spec = importlib.util.spec_from_file_location("train_sb3", EXAMPLES / "train_sb3.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_play_records_the_first_action_against_the_right_one(wrapper):
    """Always-ask on the embedded episodes: the first action is an ask everywhere, so it is right exactly on the
    24 ambiguous samples (all distinguishable) and wrong on the 6 answerable and 12 unanswerable ones."""
    mod = _train_sb3()
    rows = mod.play(wrapper, mod.always_ask)
    assert len(rows) == 42 and all(r["decision"] == "clarify" and r["asked"] for r in rows)
    assert sum(r["decision_correct"] for r in rows) == sum(r["group"] == "ambiguous" for r in rows) == 24
    assert {r["expected_decision"] for r in rows if r["group"] == "unanswerable"} == {"feedback"}
    assert mod.action_kind(wrapper, wrapper.refuse_action) == "feedback" and mod.action_kind(wrapper, 1) == "sql"


def test_paired_test_counts_discordant_episodes_and_keeps_the_pairing():
    """Four episodes on two databases: A is right where B is wrong on 3, never the reverse; exact McNemar gives
    p = 2 * 0.5 ** 3 = 0.25 (two-sided binomial on 3 discordant pairs). The reward differences are 1, 1, 1, 0,
    so the paired mean is 0.75; a database resample (db1: 1, 1; db2: 1, 0) stays within [0.5, 1]."""
    mod = _train_sb3()

    def rec(sid, db, reward, correct):
        return {"sample_id": sid, "db_id": db, "group": "answerable", "distinguishable": False, "reward": reward,
                "asked": False, "decision_correct": correct}

    a = [rec("e1", "db1", 1.0, True), rec("e2", "db1", 1.0, True), rec("e3", "db2", 1.0, True),
         rec("e4", "db2", 0.0, False)]
    b = [rec("e1", "db1", 0.0, False), rec("e2", "db1", 0.0, False), rec("e3", "db2", 0.0, False),
         rec("e4", "db2", 0.0, False)]
    boot, unit = mod._cluster_bootstrap(a)
    mod._cluster_bootstrap(b)
    assert unit == "database"
    out = mod.paired_test(a, b, boot)
    assert out["mcnemar_decision"] == {"n": 4, "a_only": 3, "b_only": 0, "p_value": 0.25}
    d = out["reward_diff"]
    assert d["mean"] == 0.75 and d["n"] == 4 and d["n_db"] == 2
    assert 0.5 <= d["ci95"][0] <= 0.75 <= d["ci95"][1] <= 1.0
    assert out["reward_diff_episode_bootstrap"]["value"] == 0.75
    with pytest.raises(ValueError, match="different episodes"):
        mod.paired_test(a, b[::-1], boot)


def test_one_database_falls_back_to_an_episode_bootstrap():
    mod = _train_sb3()
    rows = [{"sample_id": f"e{k}", "db_id": "only"} for k in range(3)]
    boot, unit = mod._cluster_bootstrap(rows)
    assert unit == "episode" and boot.db_ids == ["e0", "e1", "e2"]


def test_asking_pays_on_the_distinguishable_embedded_samples_only(wrapper):
    """On the embedded episodes the user's reply names the meant reading, so always-ask's picks score a higher
    EX than never-ask's on the 24 ambiguous samples; on answerable and unanswerable ones the reply is the constant
    refusal, the question decides the pick, and the ask only costs its turn penalty."""
    mod = _train_sb3()
    w = _wrapper(wrapper.env.unwrapped.samples, reward_preset="shaped")
    out = mod.ask_pays(mod.play(w, mod.never_ask), mod.play(w, mod.always_ask))
    assert set(out) == {"distinguishable", "answerable", "unanswerable"} and out["distinguishable"]["n"] == 24
    assert out["distinguishable"]["ex_always"] > out["distinguishable"]["ex_never"]
    assert out["distinguishable"]["reward_diff"] > 0
    for k in ("answerable", "unanswerable"):
        assert out[k]["ex_always"] == out[k]["ex_never"] and out[k]["reward_diff"] == pytest.approx(-0.05)
