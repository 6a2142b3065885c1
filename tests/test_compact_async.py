"""The compact async vector env (``textsql_clarify/envs/async_vector.py``): the same results as
Gymnasium's ``AsyncVectorEnv`` (key order, dtypes, masks, every autoreset mode) and as the sync vector env
(1,000 Spider dev steps with detailed scores), with the info sent as arrays and merged by plan."""
from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AsyncVectorEnv
from gymnasium.vector.vector_env import AutoresetMode
from test_async_vector import _assert_same_runs, _play  # the sync comparison of tests/test_async_vector.py

import textsql_clarify  # noqa: F401  (registers the env)
from textsql_clarify.datasets import load_dataset
from textsql_clarify.envs.async_vector import (TextSQLClarifyAsyncVectorEnv, _Encoder, compact_worker, flatten_info,
                                               vector_entry_point)
from textsql_clarify.envs.vector import TextSQLClarifyVectorEnv
from textsql_clarify.errors import TextSQLClarifyError
from textsql_clarify.rewards.feedback import LexicalFeedbackJudge

ENV_ID = "TextSQLClarify-v0"


@pytest.fixture(scope="module")
def samples():
    return load_dataset("embedded")


def _strict(a, b, path="info"):
    """Equal as Gymnasium returns them: dict key order, array dtype and shape, NaN = NaN, objects by ==."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), f"{path}: keys {list(a)} vs {list(b)}"
        for k in a:
            _strict(a[k], b[k], f"{path}/{k}")
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and (a.dtype, a.shape) == (b.dtype, b.shape), f"{path}: {a!r} vs {b!r}"
        if a.dtype == object:
            for x, y in zip(a, b):
                if hasattr(x, "turns"):  # a Trajectory: its execution times differ run to run
                    x, y = x.to_dict(), y.to_dict()
                    for t in x["turns"] + y["turns"]:
                        (t.get("execution") or {}).pop("elapsed_s", None)
                assert x == y or (x != x and y != y), f"{path}: {x!r} vs {y!r}"
        else:
            assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), f"{path}: {a!r} vs {b!r}"
    elif isinstance(a, tuple):
        assert type(b) is tuple and len(a) == len(b), f"{path}: {a!r} vs {b!r}"
        for j, (x, y) in enumerate(zip(a, b)):
            _strict(x, y, f"{path}[{j}]")
    else:
        assert type(a) is type(b) and a == b, f"{path}: {a!r} vs {b!r}"


def _policy(k: int, sample_ids, golds: dict) -> list[str]:
    out = []
    for i, sid in enumerate(sample_ids):
        r = (7 * k + 3 * i) % 10
        out.append("<clarify>Which one?</clarify>" if r in (0, 5) else "<sql>SELECT 1</sql>" if r == 1 else
                   "<feedback>The database cannot answer this.</feedback>" if r == 2 else "nonsense" if r == 3 else
                   f"<sql>{golds.get(sid, 'SELECT 1')}</sql>")
    return out


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED])
def test_compact_gives_gymnasiums_async_results_exactly(samples, mode):
    golds = {s.id: s.gold_sql for s in samples}
    fn = functools.partial(gym.make, ENV_ID, feedback_judge=LexicalFeedbackJudge(), reward_preset="shaped")
    ours, theirs = TextSQLClarifyAsyncVectorEnv([fn] * 2, autoreset_mode=mode), AsyncVectorEnv([fn] * 2,
                                                                                               autoreset_mode=mode)
    try:
        a, b = ours.reset(seed=5), theirs.reset(seed=5)
        _strict(a, b, "reset")
        info, ended, nested = a[1], 0, 0
        for k in range(60):
            acts = _policy(k, info.get("sample_id", [None, None]), golds)
            a, b = ours.step(acts), theirs.step(acts)
            for name, x, y in zip(("obs", "reward", "terminated", "truncated", "info"), a, b):
                _strict(x, y, f"step {k} {name}")
            info = a[4]
            nested += "final_info" in info
            if mode == AutoresetMode.DISABLED and (a[2] | a[3]).any():
                m = a[2] | a[3]
                ended += int(m.sum())
                a, b = ours.reset(options={"reset_mask": m}), theirs.reset(options={"reset_mask": m})
                _strict(a, b, f"reset {k}")
                info = a[1]
        assert type(a[0]["question"]) is tuple and a[0]["question"][0]  # a frozen copy, as deepcopy gave
        if mode == AutoresetMode.SAME_STEP:
            assert nested > 0  # final_info / final_obs went through the plan too
        if mode == AutoresetMode.DISABLED:
            assert ended > 0  # reset-noop payloads of the sub-envs not reset
        assert len(ours._plans) >= 2  # more than one schema combination met
        assert ours.get_attr("info_format") == theirs.get_attr("info_format")
    finally:
        ours.close()
        theirs.close()


def test_make_vec_processes_true_matches_sync_on_the_embedded_set(samples):
    golds = {s.id: s.gold_sql for s in samples}
    kwargs = {"feedback_judge": LexicalFeedbackJudge(), "reward_preset": "shaped"}
    envs = gym.make_vec(ENV_ID, num_envs=2, processes=True, async_options={"shared_memory": False}, **kwargs)
    assert isinstance(envs, TextSQLClarifyAsyncVectorEnv) and not envs.shared_memory
    try:
        got = _play(envs, 40, golds, 3, None)
    finally:
        envs.close()
    _assert_same_runs(got, _play(TextSQLClarifyVectorEnv(2, samples=samples, **kwargs), 40, golds, 3, None))
    assert type(gym.make_vec(ENV_ID, num_envs=2)) is TextSQLClarifyVectorEnv  # the default is unchanged


def test_compact_runs_1000_spider_steps_with_detailed_scores_and_matches_sync(spider_root):
    spec = f"spider:{spider_root}"
    all_samples = load_dataset(spec)
    golds = {s.id: s.gold_sql for s in all_samples}
    odd = next(s for s in all_samples if "？" in s.question)
    kwargs = {"dataset": spec, "detailed_scores": True, "reward_preset": "shaped"}
    envs = gym.make_vec(ENV_ID, num_envs=2, processes=True, **kwargs)
    try:
        got = _play(envs, 1000, golds, 11, odd.id)
    finally:
        envs.close()
    want = _play(TextSQLClarifyVectorEnv(2, **kwargs), 1000, golds, 11, odd.id)
    _assert_same_runs(got, want)
    assert sum(t is not None for row in want for t in row[5]) >= 400


def _merged_by_plan(infos: list[dict]) -> dict:
    """The parent's merge of ``infos`` (one per sub-env) through the payloads the worker would send."""
    env = TextSQLClarifyAsyncVectorEnv.__new__(TextSQLClarifyAsyncVectorEnv)
    env.num_envs, env._schemas, env._plans = len(infos), [{} for _ in infos], {}
    return env._decode([_Encoder()(info) for info in infos]), env


def test_plan_merge_equals_add_info_including_gaps_and_conflicts():
    a = {"x": 1.0, "n": 3, "ok": True, "s": "a", "arr": np.arange(4.0).reshape(2, 2), "i32": np.int32(7),
         "d": {"p": 0.5, "q": None, "e": {}}, "final_obs": {"question": "q"}}
    b = {"s": None, "x": float("nan"), "d": {"q": "text", "r": 2.0}, "extra": [1, 2]}
    for infos in ([a, b], [b, a], [a, a], [{}, a], [a, {}, b]):
        got, env = _merged_by_plan(infos)
        want: dict = {}
        for i, info in enumerate(infos):
            want = env._add_info(want, info, i)
        _strict(got, want)
    # a key that is a float in one sub-env and a string in the other: Gymnasium's own merge decides
    conflict = [{"k": 1.0}, {"k": "two"}]
    env = TextSQLClarifyAsyncVectorEnv.__new__(TextSQLClarifyAsyncVectorEnv)
    env.num_envs = 2
    with pytest.raises(ValueError):
        env._add_info(env._add_info({}, conflict[0], 0), conflict[1], 1)
    with pytest.raises(ValueError):
        _merged_by_plan(conflict)
    assert not next(iter(_merged_by_plan(conflict[::-1])[1]._plans.values())).ok
    got, _ = _merged_by_plan(conflict[::-1])
    assert got["k"].tolist() == ["two", 1.0] and got["_k"].tolist() == [True, True]


def test_flatten_info_schema_and_encoder_sends_each_schema_once():
    schema, floats, others = flatten_info({"a": 1.0, "b": {"c": 2.0, "d": None}, "e": 4, "f": True})
    assert schema == ((("a",), "f"), (("b",), "d"), (("b", "c"), "f"), (("b", "d"), "o"), (("e",), "i"),
                      (("f",), "b"))
    assert floats.tolist() == [1.0, 2.0] and others == (None, 4, True)
    enc = _Encoder()
    first, second = enc({"a": 1.0}), enc({"a": 2.0})
    assert first[0] == second[0] == 0 and first[1] is not None and second[1] is None
    assert enc({"b": 1.0})[:2] == (1, ((("b",), "f"),))


def test_option_errors():
    with pytest.raises(TextSQLClarifyError, match="its own worker"):
        TextSQLClarifyAsyncVectorEnv([lambda: None], worker=compact_worker)
    with pytest.raises(ValueError, match="processes=True"):
        vector_entry_point(2, async_options={"copy": False})
    with pytest.raises(ValueError, match="num_envs"):
        vector_entry_point(0, processes=True)
