"""Async vector envs: ``gym.make_vec(..., vectorization_mode="async")`` runs and matches the sync
vector env. The UnicodeText space's shared-memory encoding takes any Unicode, the typed info format merges in
Gymnasium's own vector envs, and 1,000 async steps on Spider dev with detailed scores give the sync results."""
from __future__ import annotations

import copy
import math
import pickle

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AsyncVectorEnv, VectorEnv
from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory

import textsql_clarify  # noqa: F401  (registers the env)
from textsql_clarify.datasets import load_dataset
from textsql_clarify.envs.env import TextSQLClarifyEnv
from textsql_clarify.envs.infos import in_async_worker, resolve_info_format, typed_info
from textsql_clarify.envs.spaces import TEXT_FIELDS, SharedTextBatch, UnicodeText, observation_space
from textsql_clarify.envs.vector import TextSQLClarifyVectorEnv, as_float
from textsql_clarify.rewards.components import COMPONENT_SETS
from textsql_clarify.rewards.feedback import LexicalFeedbackJudge

ENV_ID = "TextSQLClarify-v0"
HARD = ["Wie viele？", "‘quoted’", "emoji 😀 and ü", "lone \ud83d surrogate", "nul \x00 inside", ""]


# ------------------------------------------------------------------------------------------ shared memory
def test_unicode_text_shared_memory_takes_any_unicode_and_stays_live():
    space = UnicodeText(32)
    mem = create_shared_memory(space, n=len(HARD))
    view = read_from_shared_memory(space, mem, n=len(HARD))
    assert isinstance(view, SharedTextBatch) and tuple(view) == ("",) * len(HARD)  # zeroed: empty strings
    for i, text in enumerate(HARD):
        write_to_shared_memory(space, i, text, mem)
    assert tuple(view) == tuple(HARD) and view == HARD and view[1] == "‘quoted’"
    # the view read once at construction (as AsyncVectorEnv does) sees every later write; a shorter
    # string leaves nothing of the longer one behind
    write_to_shared_memory(space, 0, "ab", mem)
    assert view[0] == "ab" and view[:2] == ("ab", "‘quoted’")
    snap = copy.deepcopy(view)  # what AsyncVectorEnv(copy=True) returns: a plain, frozen tuple
    write_to_shared_memory(space, 0, "changed", mem)
    assert type(snap) is tuple and snap[0] == "ab" and view[0] == "changed"
    assert pickle.loads(pickle.dumps(view)) == ("changed", *HARD[1:])
    write_to_shared_memory(space, 1, "x" * 32, mem)  # exactly max_length
    assert view[1] == "x" * 32
    with pytest.raises(ValueError, match="33 characters"):
        write_to_shared_memory(space, 1, "x" * 33, mem)
    with pytest.raises(TypeError, match="must be a str"):
        write_to_shared_memory(space, 1, b"bytes", mem)


def test_gymnasium_text_shared_memory_is_what_failed():
    """Gymnasium's own Text encoding indexes its charset: the characters Spider dev has raise KeyError."""
    plain = spaces.Text(16, charset=UnicodeText(16).character_set)
    mem = create_shared_memory(plain, n=1)
    with pytest.raises(KeyError):
        write_to_shared_memory(plain, 0, "Wie viele？", mem)


def test_dict_observation_round_trips_through_shared_memory():
    space = observation_space(3, 20)
    mem = create_shared_memory(space, n=2)
    view = read_from_shared_memory(space, mem, n=2)
    obs = {k: f"{k}: {HARD[j % len(HARD)]}" for j, k in enumerate(TEXT_FIELDS)}
    obs.update(turn=4, clarifications_left=2, phase=3)
    write_to_shared_memory(space, 1, obs, mem)
    assert {k: view[k][1] for k in TEXT_FIELDS} == {k: obs[k] for k in TEXT_FIELDS}
    assert [int(view[k][1]) for k in ("turn", "clarifications_left", "phase")] == [4, 2, 3]
    assert view["question"][0] == ""


def test_every_spider_dev_question_goes_through_shared_memory(spider_root):
    samples = load_dataset(f"spider:{spider_root}")
    space = UnicodeText(TEXT_FIELDS["question"])
    mem = create_shared_memory(space, n=1)
    view = read_from_shared_memory(space, mem, n=1)
    odd = set()
    for s in samples:
        write_to_shared_memory(space, 0, s.question, mem)
        assert view[0] == s.question, s.id
        odd |= {c for c in s.question if ord(c) > 127}
    assert {"？", "‘"} <= odd  # the characters that made Gymnasium's Text encoding raise KeyError


# ------------------------------------------------------------------------------------------ typed infos
@pytest.fixture(scope="module")
def samples():
    return load_dataset("embedded")


def _first(samples, group):
    return next(s for s in samples if s.group == group)


def test_typed_info_has_fixed_types_and_leaves_the_python_info_alone(samples):
    env = TextSQLClarifyEnv(samples=samples, feedback_judge=LexicalFeedbackJudge())
    assert env.info_format == "auto" and resolve_info_format("auto") == "python" and not in_async_worker()
    s = _first(samples, "answerable")
    env.reset(options={"sample_id": s.id})
    _, _, term, _, info = env.step("<sql>SELECT name FROM nosuchtable</sql>")  # fails: components None
    assert term and info["reward_components"]["feedback"] is None and info["reward_components"]["ex"] == 0.0
    typed = typed_info(info)
    rc = typed["reward_components"]
    assert math.isnan(rc["feedback"]) and rc["ex"] == 0.0 and info["reward_components"]["feedback"] is None
    assert all(type(v) is float for k, v in rc.items() if k != "components")
    parts = info["reward_components"]["components"]  # {set: {"precision": p, "recall": r}}, None = undefined
    assert rc["components"].shape == (len(COMPONENT_SETS), 2)
    assert _same(rc["components"].tolist(), [[math.nan if parts[name][k] is None else parts[name][k]
                                              for k in ("precision", "recall")] for name in COMPONENT_SETS])
    assert np.isnan(rc["components"]).any() and not np.isnan(rc["components"]).all()
    sc = typed["scores"]
    assert type(sc["pred_truncated"]) is float and math.isnan(sc["fb"]) and info["scores"]["fb"] is None
    assert typed["sample_id"] == s.id and typed["error"] is None and typed["clarifications_left"] == 3
    assert typed["trajectory"] is info["trajectory"] and typed["messages"] is info["messages"]
    parts = {"tables": {"precision": 0.5, "recall": 1.0}, "joins": {"precision": None, "recall": None}}
    arr = typed_info({"reward_components": {"components": parts}})["reward_components"]["components"]
    assert arr[COMPONENT_SETS.index("tables")].tolist() == [0.5, 1.0]
    assert np.isnan(arr[COMPONENT_SETS.index("joins")]).all() and arr.dtype == np.float64
    with pytest.raises(ValueError, match="info_format"):
        TextSQLClarifyEnv(samples=samples, info_format="numpy")


def _two_step_infos(samples, info_format):
    """Infos of two detailed SQL steps: the gold of an answerable sample (``spurious_tables`` an int, ``ex``
    1.0) and SQL on an unanswerable one (both ``None``: there is no gold to compare with)."""
    s, u = _first(samples, "answerable"), _first(samples, "unanswerable")
    a = TextSQLClarifyEnv(samples=samples, info_format=info_format)
    b = TextSQLClarifyEnv(samples=samples, info_format=info_format)
    a.reset(options={"sample_id": s.id})
    b.reset(options={"sample_id": u.id})
    return a.step(f"<sql>{s.gold_sql}</sql>")[4], b.step("<sql>SELECT 1</sql>")[4]


def test_gymnasium_merges_typed_infos_where_python_infos_raise(samples):
    class Plain(VectorEnv):
        num_envs = 2

    sql, other = _two_step_infos(samples, "python")
    assert type(sql["reward_components"]["spurious_tables"]) is int and other["reward_components"]["spurious_tables"] is None
    with pytest.raises(TypeError):  # the int makes an int64 array, into which None does not go
        Plain()._add_info(Plain()._add_info({}, sql, 0), other, 1)
    sql, other = _two_step_infos(samples, "typed")
    for order in ((sql, other), (other, sql)):
        v = Plain()
        rc = v._add_info(v._add_info({}, order[0], 0), order[1], 1)["reward_components"]
        assert sorted(rc["ex"].tolist()) == [0.0, 1.0]
        for key in ("spurious_tables", "cell_f1", "table_recall"):
            assert rc[key].dtype == np.float64 and np.isnan(rc[key]).sum() == 1, key
        assert rc["components"].dtype == np.float64 and rc["components"].shape == (2, len(COMPONENT_SETS), 2)


def test_sync_vector_env_with_typed_infos_gives_float_arrays(samples):
    ans = _first(samples, "answerable")
    acts = [f"<sql>{ans.gold_sql}</sql>", "<clarify>Which year?</clarify>", "<sql>SELECT 0.625</sql>"]
    out = {}
    for fmt in ("python", "typed"):
        envs = TextSQLClarifyVectorEnv(3, samples=samples, info_format=fmt)
        envs.reset(options={"sample_ids": [ans.id] * 3})
        out[fmt] = envs.step(acts)[4]["reward_components"]
    assert out["python"]["ex"].dtype == object and out["python"]["ex"].tolist() == [1.0, None, 0.0]
    assert out["typed"]["ex"].dtype == np.float64
    np.testing.assert_array_equal(out["typed"]["ex"], as_float(out["python"]["ex"]))


# ------------------------------------------------------------------------------------------ async == sync
def _slice(vinfo: dict, i: int) -> dict:
    """Sub-env ``i``'s info back from a merged vector info (nested dicts too), by the ``_key`` masks."""
    out = {}
    for k, v in vinfo.items():
        if k.startswith("_") and k[1:] in vinfo or not vinfo[f"_{k}"][i]:
            continue
        out[k] = _slice(v, i) if isinstance(v, dict) else (v[i].item() if isinstance(v[i], np.generic) else v[i])
    return out


def _same(a, b) -> bool:
    """Equality with NaN equal to NaN, through dicts and lists."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and np.array_equal(a, b, equal_nan=True)
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _untimed(traj):
    d = traj.to_dict()
    for t in d["turns"]:
        if t.get("execution"):
            t["execution"].pop("elapsed_s", None)
    return d


def _action(k: int, i: int, sample_id: str, gold: str | None) -> str:
    """The test's policy: mostly the gold SQL, plus wrong SQL, clarifications, feedback and malformed actions;
    on one sample in six it only clarifies (past the budget: the episode ends truncated)."""
    r = (7 * k + 3 * i) % 10
    if r in (0, 5) or sum(map(ord, sample_id)) % 6 == 0:
        return "<clarify>Do you mean all of them?</clarify>"
    if r == 1:
        return "<sql>SELECT 1</sql>"
    if r == 2:
        return "<feedback>The database cannot answer this question.</feedback>"
    if r == 3:
        return "not an action"
    return f"<sql>{gold or 'SELECT 1'}</sql>"


def _play(envs, steps: int, golds: dict, seed: int, first_id: str | None):
    """Per step: (obs per sub-env, rewards, terminated, truncated, typed info per sub-env, trajectories)."""
    n = envs.num_envs
    obs, info = envs.reset(seed=seed, options=None if first_id is None else {"sample_id": first_id})
    rows = []
    for k in range(steps):
        acts = [_action(k, i, sid, golds.get(sid)) for i, sid in enumerate(info["sample_id"])]
        obs, rew, term, trunc, info = envs.step(acts)
        per = [typed_info({key: v for key, v in _slice(info, i).items() if key != "trajectory"}) for i in range(n)]
        trajs = [_untimed(info["trajectory"][i]) if info.get("_trajectory", np.zeros(n, bool))[i] else None
                 for i in range(n)]
        views = [{f: (obs[f][i] if f in TEXT_FIELDS else int(obs[f][i])) for f in obs} for i in range(n)]
        rows.append((views, rew.tolist(), term.tolist(), trunc.tolist(), per, trajs))
    return rows


def _assert_same_runs(a, b):
    assert len(a) == len(b)
    for k, (x, y) in enumerate(zip(a, b)):
        assert x[0] == y[0], f"observations differ at step {k}"
        assert x[1:4] == y[1:4], f"rewards / terminated / truncated differ at step {k}"
        assert all(_same(p, q) for p, q in zip(x[4], y[4])), f"infos differ at step {k}: {x[4]} vs {y[4]}"
        assert x[5] == y[5], f"trajectories differ at step {k}"


@pytest.mark.parametrize("shared_memory", [True, False])
def test_async_matches_sync_on_the_embedded_set(samples, shared_memory):
    golds = {s.id: s.gold_sql for s in samples}
    kwargs = {"feedback_judge": LexicalFeedbackJudge(), "reward_preset": "shaped"}
    envs = gym.make_vec(ENV_ID, num_envs=2, vectorization_mode="async",
                        vector_kwargs={"shared_memory": shared_memory}, **kwargs)
    assert isinstance(envs, AsyncVectorEnv)
    try:
        got = _play(envs, 40, golds, 3, None)
    finally:
        envs.close()
    want = _play(TextSQLClarifyVectorEnv(2, samples=samples, **kwargs), 40, golds, 3, None)
    _assert_same_runs(got, want)
    # the run mixed endings, undefined components and judged feedback
    assert any(any(row[2]) for row in want) and any(any(row[3]) for row in want)
    fbs = [p["reward_components"].get("feedback") for row in want for p in row[4]]
    assert 1.0 in fbs or 0.0 in fbs


def test_async_runs_1000_spider_steps_with_detailed_scores_and_matches_sync(spider_root):
    spec = f"spider:{spider_root}"
    samples = load_dataset(spec)
    golds = {s.id: s.gold_sql for s in samples}
    odd = next(s for s in samples if "？" in s.question)  # both sub-envs start on it
    kwargs = {"dataset": spec, "detailed_scores": True, "reward_preset": "shaped"}
    envs = gym.make_vec(ENV_ID, num_envs=2, vectorization_mode="async", **kwargs)
    try:
        got = _play(envs, 1000, golds, 11, odd.id)
    finally:
        envs.close()
    want = _play(TextSQLClarifyVectorEnv(2, **kwargs), 1000, golds, 11, odd.id)
    _assert_same_runs(got, want)
    ended = sum(t is not None for row in want for t in row[5])
    details = [p["reward_components"]["cell_f1"] for row in want for p in row[4] if "cell_f1" in p["reward_components"]]
    assert ended >= 400 and sum(v == 1.0 for v in details) >= 200 and any(math.isnan(v) for v in
                                                                             [p["reward_components"].get("ex", 0.0)
                                                                              for row in want for p in row[4]])
    assert any(any(row[3]) for row in want)  # truncated episodes (a clarification refused on the final turn)


# ------------------------------------------------------------------------------------------ sync vector env
class BatchJudge:
    """The lexical judge behind ``judge_many``, recording each batch; ``judge`` counts single calls."""

    def __init__(self):
        self.inner, self.batches, self.singles = LexicalFeedbackJudge(), [], 0

    def judge_many(self, samples, feedbacks, schema_identifiers_list):
        self.batches.append(len(samples))
        return [self.inner.judge(s, f, ids) for s, f, ids in zip(samples, feedbacks, schema_identifiers_list)]

    def judge(self, sample, feedback, schema_identifiers=()):
        self.singles += 1
        return self.inner.judge(sample, feedback, schema_identifiers)


class LoopJudge:
    """A judge without ``judge_many``."""

    def __init__(self):
        self.inner, self.calls = LexicalFeedbackJudge(), 0

    def judge(self, sample, feedback, schema_identifiers=()):
        self.calls += 1
        return self.inner.judge(sample, feedback, schema_identifiers)


def test_feedback_judgements_of_a_step_go_in_one_batch(samples):
    unans = [s for s in samples if s.group == "unanswerable" and s.hidden_knowledge.strip()][:4]
    ans = _first(samples, "answerable")
    acts = [f"<feedback>{unans[0].hidden_knowledge}</feedback>", "<feedback>No such data.</feedback>",
            "<feedback>There is no table for that.</feedback>", f"<feedback>{unans[3].hidden_knowledge}</feedback>"]
    want = []
    for s, a in zip(unans, acts):  # one env at a time, the lexical judge
        env = TextSQLClarifyEnv(samples=samples, feedback_judge=LexicalFeedbackJudge())
        env.reset(options={"sample_id": s.id})
        want.append(env.step(a)[4]["reward_components"]["feedback"])
    assert 1.0 in want and 0.0 in want
    judge = BatchJudge()
    envs = TextSQLClarifyVectorEnv(5, samples=samples, feedback_judge=judge)
    envs.reset(options={"sample_ids": [s.id for s in unans] + [ans.id]})
    _, _, term, _, info = envs.step(acts + ["<feedback>No such data.</feedback>"])  # answerable: no judgement
    assert term.all() and info["reward_components"]["feedback"].tolist() == want + [0.0]
    assert judge.batches == [4] and judge.singles == 0
    assert envs.judge_calls == 1 and envs.feedbacks_judged == 4
    assert all(e.feedback_judge is judge for e in envs.envs)  # the step's stand-in is gone
    loop = LoopJudge()
    envs = TextSQLClarifyVectorEnv(4, samples=samples, feedback_judge=loop)
    envs.reset(options={"sample_ids": [s.id for s in unans]})
    assert envs.step(acts)[4]["reward_components"]["feedback"].tolist() == want
    assert loop.calls == 4 and envs.judge_calls == 4


def test_sub_envs_share_one_static_cache_built_once_per_sample(samples, monkeypatch):
    builds = []
    original = TextSQLClarifyEnv._build_static

    def counting(self, s):
        builds.append(s.id)
        return original(self, s)

    monkeypatch.setattr(TextSQLClarifyEnv, "_build_static", counting)
    envs = TextSQLClarifyVectorEnv(4, samples=samples)
    assert all(e._static is envs.static_cache for e in envs.envs)
    ids = [samples[0].id, samples[1].id]
    envs.reset(options={"sample_ids": ids * 2})
    envs.reset(options={"sample_ids": ids[::-1] * 2})
    assert sorted(builds) == sorted(ids) and set(envs.static_cache) == set(ids)
    obs, _ = envs.reset(options={"sample_ids": ids * 2})
    assert obs["question"] == (samples[0].question, samples[1].question) * 2
    envs.close()
    assert envs.static_cache == {}
