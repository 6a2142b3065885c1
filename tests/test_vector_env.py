"""TextSQLClarifyVectorEnv: one respond(batch) per step for all sub-envs' clarifications, with the
trajectories of SyncVectorEnv; and the begin_step / complete_step split of the single env."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import SyncVectorEnv

import textsql_clarify  # noqa: F401  (registers the env)
from conftest import MeanIs
from textsql_clarify.datasets import load_dataset
from textsql_clarify.envs.env import TextSQLClarifyEnv
from textsql_clarify.envs.vector import TextSQLClarifyVectorEnv
from textsql_clarify.simulators.base import UserReply, UserRequest
from textsql_clarify.simulators.rule_based import RuleBasedUser


class RecordingUser:
    """The rule-based user, recording the size of every batch it is asked."""

    def __init__(self):
        self.inner = RuleBasedUser()
        self.batches: list[list[str]] = []

    def respond(self, batch):
        self.batches.append([r.clarification for r in batch])
        return self.inner.respond(batch)


SCRIPT = [  # per step, the action of sub-env i is SCRIPT[step][i % len(SCRIPT[step])]
    ["<clarify>Do you mean the average grade?</clarify>", "<clarify>Which year do you mean?</clarify>",
     "<sql>SELECT name FROM students</sql>"],
    ["<clarify>Should the names be sorted?</clarify>", "not an action", "<feedback>No such data.</feedback>"],
    ["<sql>SELECT COUNT(*) FROM students</sql>", "<clarify>Is that per department?</clarify>",
     "<clarify>Which semester?</clarify>"],
    ["<feedback>The database has no such data.</feedback>", "<sql>SELECT 1</sql>", "<sql>SELECT 2</sql>"],
]


def _actions(step: int, n: int) -> list[str]:
    row = SCRIPT[step % len(SCRIPT)]
    return [row[(i + step) % len(row)] for i in range(n)]


@pytest.fixture(scope="module")
def samples():
    return load_dataset("embedded")


def test_make_vec_builds_the_batching_vector_env_and_sync_is_still_available():
    envs = gym.make_vec("TextSQLClarify-v0", num_envs=3)
    assert isinstance(envs, TextSQLClarifyVectorEnv)
    assert envs.num_envs == 3 and len({id(e.simulator) for e in envs.envs}) == 1
    assert all(e.samples[0] is envs.envs[0].samples[0] for e in envs.envs)  # the dataset is loaded once
    sync = gym.make_vec("TextSQLClarify-v0", num_envs=2, vectorization_mode="sync")
    assert isinstance(sync, SyncVectorEnv) and not isinstance(sync, TextSQLClarifyVectorEnv)


def test_all_clarifications_of_a_step_go_in_one_batch(samples):
    user = RecordingUser()
    envs = TextSQLClarifyVectorEnv(4, samples=samples, simulator=user)
    envs.reset(seed=0)
    envs.step(["<clarify>Which year?</clarify>"] * 4)
    assert user.batches == [["Which year?"] * 4]
    # only the sub-envs that clarify are in the batch, in sub-env order; no call when nobody clarifies
    envs.step(["<clarify>a?</clarify>", "<sql>SELECT 1</sql>", "<clarify>c?</clarify>", "<feedback>no</feedback>"])
    assert user.batches[1:] == [["a?", "c?"]]
    envs.step(["<sql>SELECT 1</sql>"] * 4)
    assert len(user.batches) == 2
    assert envs.respond_calls == 2 and envs.requests_answered == 6


def _norm(obs: dict) -> dict:
    return {k: (v.item() if hasattr(v, "item") else v) for k, v in obs.items()}


def _untimed(traj: dict | None) -> dict | None:
    """A trajectory dict without its wall-clock fields (``elapsed_s`` differs from run to run)."""
    if traj is None:
        return None
    for t in traj["turns"]:
        if t.get("execution"):
            t["execution"].pop("elapsed_s", None)
    return traj


def _slice(vinfo: dict, i: int) -> dict:
    """Sub-env ``i``'s part of a vector info dict (nested dicts too), by the ``_key`` masks."""
    out = {}
    for k, v in vinfo.items():
        if k.startswith("_") or not vinfo[f"_{k}"][i]:
            continue
        out[k] = _slice(v, i) if isinstance(v, dict) else (v[i].item() if hasattr(v[i], "item") else v[i])
    return out


def _run_vector(envs, steps: int, n: int, same_step: bool):
    """Per step and sub-env: (obs, reward, terminated, truncated, trajectory dict, reward components)."""
    obs, _ = envs.reset(seed=11)
    out = [[_norm({k: v[i] for k, v in obs.items()}) for i in range(n)]]
    for k in range(steps):
        obs, rew, term, trunc, info = envs.step(_actions(k, n))
        row = []
        for i in range(n):
            src = info["final_info"] if same_step and (term[i] or trunc[i]) else info
            traj = _untimed(src["trajectory"][i].to_dict()) if src.get("_trajectory", [False] * n)[i] else None
            comps = _slice(src["reward_components"], i)
            o = info["final_obs"][i] if same_step and (term[i] or trunc[i]) else {f: v[i] for f, v in obs.items()}
            row.append((_norm(o), float(rew[i]), bool(term[i]), bool(trunc[i]), traj, comps))
        out.append(row)
    return out


def _run_single(envs: list, steps: int, same_step: bool):
    """The same script through independent single envs, autoreset by hand (Gymnasium's two modes)."""
    n = len(envs)
    out = [[_norm(e.reset(seed=11 + i)[0]) for i, e in enumerate(envs)]]
    done = [False] * n
    for k in range(steps):
        row = []
        for i, (e, a) in enumerate(zip(envs, _actions(k, n))):
            if done[i] and not same_step:
                o, _ = e.reset()
                done[i] = False
                row.append((_norm(o), 0.0, False, False, None, {}))
                continue
            o, r, t, tr, info = e.step(a)
            done[i] = t or tr
            traj = _untimed(info["trajectory"].to_dict()) if "trajectory" in info else None
            row.append((_norm(o), float(r), bool(t), bool(tr), traj, dict(info["reward_components"])))
            if same_step and done[i]:
                e.reset()
                done[i] = False
        out.append(row)
    return out


@pytest.mark.parametrize("mode", ["next_step", "same_step"])
def test_same_trajectories_as_independent_envs(samples, mode):
    n, steps = 5, 9
    mine = TextSQLClarifyVectorEnv(n, samples=samples, autoreset_mode=mode, reward_preset="shaped")
    singles = [TextSQLClarifyEnv(samples=samples, reward_preset="shaped") for _ in range(n)]
    a = _run_vector(mine, steps, n, mode == "same_step")
    b = _run_single(singles, steps, mode == "same_step")
    assert a == b
    # the script really ended episodes, clarified, and mixed defined and undefined (None) components
    assert sum(x[2] or x[3] for row in a[1:] for x in row) >= n
    assert mine.requests_answered >= 2 * n
    ex = [x[5].get("ex", "absent") for row in a[1:] for x in row]
    assert None in ex and any(isinstance(v, float) for v in ex)


def test_infos_keep_none_next_to_numbers(samples):
    envs = TextSQLClarifyVectorEnv(3, samples=samples, reward_preset="shaped")
    envs.reset(seed=0)
    ans = next(s for s in samples if s.group == "answerable")
    envs.reset(options={"sample_id": ans.id})
    _, _, _, _, info = envs.step([f"<sql>{ans.gold_sql}</sql>", "<clarify>which year?</clarify>",
                                  "<sql>SELECT 0.625</sql>"])
    ex = info["reward_components"]["ex"]
    assert ex.dtype == object and ex.tolist() == [1.0, None, 0.0]


def test_next_step_autoreset_gives_a_reset_observation_with_reward_zero(samples):
    envs = TextSQLClarifyVectorEnv(2, samples=samples)
    envs.reset(seed=3)
    _, _, term, _, _ = envs.step(["<feedback>no</feedback>", "<clarify>which year?</clarify>"])
    assert term.tolist() == [True, False]
    obs, rew, term, trunc, info = envs.step(["<sql>SELECT 1</sql>", "<feedback>no</feedback>"])
    assert rew[0] == 0.0 and not term[0] and not trunc[0] and obs["turn"][0] == 0  # sub-env 0 was reset
    assert term[1] and info["_trajectory"].tolist() == [False, True]


def test_wrong_number_of_actions_is_a_value_error(samples):
    envs = TextSQLClarifyVectorEnv(3, samples=samples)
    envs.reset(seed=0)
    with pytest.raises(ValueError, match="3 actions"):
        envs.step(["<sql>SELECT 1</sql>"] * 2)
    with pytest.raises(ValueError, match="list, tuple or 1-d array of 3 action strings"):
        envs.step("<sql>SELECT 1</sql>")
    # a numpy array of strings is a sequence too
    _, _, term, _, _ = envs.step(np.array(["<feedback>no</feedback>"] * 3))
    assert term.tolist() == [True, True, True]


class ShortUser:
    """A broken simulator: one reply fewer than requests."""

    def respond(self, batch):
        return RuleBasedUser().respond(batch)[:-1]


class FailingUser:
    def respond(self, batch):
        raise OSError("model server gone")


class NoneTextUser:
    """A broken simulator: the second reply has no text."""

    def respond(self, batch):
        out = RuleBasedUser().respond(batch)
        out[1] = UserReply(text=None, label="relevant")
        return out


class FlakyUser:
    """Fails on its ``fail_on``-th call (once), otherwise answers as the rule-based user."""

    def __init__(self, fail_on: int = 1):
        self.calls, self.fail_on = 0, fail_on

    def respond(self, batch):
        self.calls += 1
        if self.calls == self.fail_on:
            raise OSError("model server gone")
        return RuleBasedUser().respond(batch)


@pytest.mark.parametrize("user, error, message", [
    (ShortUser(), RuntimeError, "ShortUser.respond returned 2 replies for 3 requests"),
    (FailingUser(), OSError, "model server gone"),
    (NoneTextUser(), TypeError, "reply 1 is not a UserReply: its text must be a string"),
])
def test_simulator_failure_changes_no_sub_env(samples, user, error, message):
    envs = TextSQLClarifyVectorEnv(4, samples=samples, simulator=user)
    envs.reset(seed=0)
    before = [(e._turn, list(e._history), len(e._traj.turns)) for e in envs.envs]
    with pytest.raises(error, match=message):
        envs.step(["<clarify>which year?</clarify>", "<clarify>which one?</clarify>", "<sql>SELECT 1</sql>",
                   "<clarify>per term?</clarify>"])
    # every clarification undone and the SQL sub-env not stepped: all can act again, nothing was used up
    assert [(e._turn, list(e._history), len(e._traj.turns)) for e in envs.envs] == before
    _, _, term, _, _ = envs.step(["<feedback>no</feedback>"] * 4)
    assert term.tolist() == [True] * 4


class FlakyJudge:
    """An FB judge that fails once (a council out of GPU memory, say), then judges every feedback correct."""

    def __init__(self):
        self.failed = False

    def judge(self, sample, feedback, schema_identifiers=()):
        if not self.failed:
            self.failed = True
            raise MemoryError("judge out of memory")
        return True


class NoLayerReply:
    def __init__(self, text):
        self.text, self.label = text, "relevant"

    def to_dict(self):
        return {"text": self.text, "label": self.label}


class NoLayerUser:
    def respond(self, batch):
        return [NoLayerReply("I mean the spring term.") for _ in batch]


@pytest.mark.parametrize("kwargs, error", [({"feedback_judge": FlakyJudge()}, MemoryError),
                                           ({"simulator": NoLayerUser()}, TypeError)])
def test_a_step_failing_anywhere_changes_no_sub_env(samples, kwargs, error):
    envs = TextSQLClarifyVectorEnv(3, samples=samples, **kwargs)
    unans = next(i for i, s in enumerate(samples) if s.group == "unanswerable")
    envs.reset(options={"indices": [6, unans, 7]})
    def state(e):
        return (e._turn, list(e._history), len(e._traj.turns), e._clar_used, e._pending, e._done,
                dict(e._scores), e._traj.outcome, e._last_message)

    before = [state(e) for e in envs.envs]
    acts = ["<clarify>Which term?</clarify>", "<feedback>The database has no such data.</feedback>",
            "<sql>SELECT 1</sql>"]
    with pytest.raises(error):
        envs.step(acts)
    assert [state(e) for e in envs.envs] == before
    if error is MemoryError:  # the judge works now: the same step goes through, each sub-env stepped once
        _, _, term, _, info = envs.step(acts)
        assert term.tolist() == [False, True, True] and envs.envs[0]._clar_used == 1
        assert [t.turns[0].index for t in info["trajectory"][1:]] == [0, 0]


def test_reset_checks_every_choice_before_resetting_any(samples):
    envs = TextSQLClarifyVectorEnv(3, samples=samples)
    obs, _ = envs.reset(options={"indices": [1, 2, 3]})
    with pytest.raises(IndexError, match=r"indices\[2\] = 999"):
        envs.reset(options={"indices": [6, 7, 999]})
    with pytest.raises(ValueError, match="seed 1 must be an int"):
        envs.reset(seed=[0, 1.5, 2], options={"indices": [6, 7, 8]})
    assert [e.current_sample.id for e in envs.envs] == [samples[i].id for i in (1, 2, 3)]


def test_evaluate_limit_and_agent_errors_name_the_sample(samples):
    from textsql_clarify.baselines.agents import OracleAgent
    from textsql_clarify.rollout.evaluation import evaluate

    for n in (1, 3):
        trajs, _ = evaluate(samples, OracleAgent(), progress=False, limit=5, num_envs=n)
        assert [t.sample_id for t in trajs] == [s.id for s in samples[:5]]

    class Crashing(OracleAgent):
        def act(self, observation, info):
            if self._sample.id == samples[3].id:
                raise RuntimeError("CUDA out of memory")
            return super().act(observation, info)

    for n in (1, 2):
        with pytest.raises(RuntimeError, match="CUDA out of memory") as err:
            evaluate(samples[:6], Crashing(), progress=False, num_envs=n)
        if hasattr(err.value, "__notes__"):
            assert samples[3].id in err.value.__notes__[0]


def _play_retrying(envs, seed: int, script: list, error: type) -> list:
    """Reset with ``seed`` and step through ``script``; a step that raises ``error`` is sent once more."""
    envs.reset(seed=seed)
    outs = []
    for acts in script:
        try:
            outs.append(envs.step(acts))
        except error:
            outs.append(envs.step(acts))  # the same actions again
    return outs


@pytest.mark.parametrize("fail_on", [1, 2])
def test_a_retried_step_after_a_failure_gives_the_trajectory_of_no_failure(samples, fail_on):
    # fail_on=2 fails the step in which sub-env 1 autoresets: its seeded draw is undone too
    script = [["<clarify>Which year do you mean?</clarify>", "<sql>SELECT 1</sql>"],
              ["<clarify>And which term?</clarify>", "<feedback>no</feedback>"],
              ["<sql>SELECT COUNT(*) FROM students</sql>", "<feedback>no</feedback>"]]

    def run(user):
        outs = _play_retrying(TextSQLClarifyVectorEnv(2, samples=samples, simulator=user), 5, script, OSError)
        return [_untimed(t.to_dict()) for out in outs for t in out[4].get("trajectory", []) if t is not None]

    flaky, clean = run(FlakyUser(fail_on)), run(RuleBasedUser())
    assert flaky == clean and len(clean) == 3
    assert any(t["turns"][0]["action_type"] == "clarify" for t in clean)


def test_disabled_autoreset_refuses_before_any_sub_env_steps(samples):
    envs = TextSQLClarifyVectorEnv(2, samples=samples, autoreset_mode="disabled")
    envs.reset(seed=0)
    envs.step(["<feedback>no</feedback>", "<clarify>which year?</clarify>"])
    turn = envs.envs[1]._turn
    with pytest.raises(RuntimeError, match=r"sub-envs \[0\] have ended and autoreset is disabled"):
        envs.step(["<sql>SELECT 1</sql>", "<sql>SELECT 1</sql>"])
    assert envs.envs[1]._turn == turn
    envs.reset(options={"reset_mask": np.array([True, False])})
    _, _, term, _, _ = envs.step(["<feedback>no</feedback>"] * 2)
    assert term.tolist() == [True, True]


def test_set_attr_simulator_is_used(samples):
    envs = TextSQLClarifyVectorEnv(2, samples=samples)
    rec = RecordingUser()
    envs.set_attr("simulator", rec)
    assert envs.simulator is rec
    envs.reset(seed=0)
    envs.step(["<clarify>which year?</clarify>"] * 2)
    assert rec.batches == [["which year?"] * 2]


def test_reset_chooses_a_sample_per_sub_env(samples):
    envs = TextSQLClarifyVectorEnv(3, samples=samples)
    ids = [samples[4].id, samples[0].id, samples[4].id]
    obs, info = envs.reset(options={"sample_ids": ids})
    assert list(info["sample_id"]) == ids and obs["question"][0] == samples[4].question
    envs.step(["<feedback>no</feedback>", "<clarify>which?</clarify>", "<feedback>no</feedback>"])
    # sub-envs 0 and 2 ended; choosing their next samples clears their autoreset, so the step is theirs
    envs.reset(options={"indices": [7, None, 9], "reset_mask": np.array([True, False, True])})
    _, _, _, _, info = envs.step(["<sql>SELECT 1</sql>"] * 3)
    assert list(info["sample_id"]) == [samples[7].id, samples[0].id, samples[9].id]
    assert list(info["action_type"]) == ["sql"] * 3
    with pytest.raises(ValueError, match="list of 3 entries"):
        envs.reset(options={"sample_ids": ids[:2]})
    with pytest.raises(KeyError, match="unknown sample_id"):
        envs.reset(options={"sample_ids": ["nope", None, None]})
    with pytest.raises(ValueError, match="not both"):
        envs.reset(options={"sample_ids": ids, "indices": [0, 1, 2]})


def test_info_merging_keeps_typed_arrays_and_widens_exactly(samples):
    from textsql_clarify.envs.vector import as_float

    envs = TextSQLClarifyVectorEnv(3, samples=samples)
    infos = {}
    for i, v in enumerate([np.zeros(2), np.ones(2), np.full(2, 2.0)]):
        infos = envs._add_info(infos, {"x": v}, i)
    assert infos["x"].dtype == np.float64 and infos["x"].shape == (3, 2)
    infos = {}
    for i, v in enumerate([np.float16(1), 1e6, None]):
        infos = envs._add_info(infos, {"y": v}, i)
    assert infos["y"].dtype == object and infos["y"].tolist() == [1.0, 1e6, None]
    infos = {}
    for i, v in enumerate([1, 0.625, True]):
        infos = envs._add_info(infos, {"z": v}, i)
    assert infos["z"].tolist() == [1, 0.625, True]
    np.testing.assert_array_equal(as_float([1.0, None, 0.625]), [1.0, np.nan, 0.625])
    np.testing.assert_array_equal(as_float(np.array([1.0, 2.0, 3.0]), np.array([True, False, True])),
                                  [1.0, np.nan, 3.0])


def test_vector_env_rejects_bad_num_envs(samples):
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="num_envs"):
            TextSQLClarifyVectorEnv(bad, samples=samples)


def test_begin_and_complete_step_split_the_clarification(samples):
    env = TextSQLClarifyEnv(samples=samples)
    s = next(x for x in samples if x.group == "ambiguous")
    env.reset(options={"sample_id": s.id})
    req = env.begin_step("<clarify>Which one do you mean?</clarify>")
    assert isinstance(req, UserRequest) and req.sample.id == s.id and req.clarification == "Which one do you mean?"
    with pytest.raises(RuntimeError, match="waiting"):
        env.step("<sql>SELECT 1</sql>")
    with pytest.raises(TypeError, match="UserReply"):
        env.complete_step("just text")
    reply = UserReply(text="I mean the spring term.", label="relevant")
    obs, reward, term, trunc, info = env.complete_step(reply)
    assert obs["last_message"] == "I mean the spring term." and not term and info["action_type"] == "clarify"
    with pytest.raises(RuntimeError, match="no clarification is waiting"):
        env.complete_step(reply)
    # a failed user reply is undone: the next clarification finds the dialogue as it was
    obs_before = env._obs()
    env.begin_step("<clarify>And which year?</clarify>")
    env.cancel_clarification()
    assert env._obs() == obs_before
    # a non-clarification step needs no reply: begin_step returns the step result itself
    out = env.begin_step("<feedback>no</feedback>")
    assert isinstance(out, tuple) and out[2] is True


def test_single_env_step_still_asks_a_batch_of_one(samples):
    user = RecordingUser()
    env = TextSQLClarifyEnv(samples=samples, simulator=user)
    env.reset(seed=1)
    env.step("<clarify>Which year?</clarify>")
    assert user.batches == [["Which year?"]]
    assert np.isscalar(env.step("<feedback>no</feedback>")[1])


# ---------------------------------------------------------------------------------------------- lockstep eval
def _strip_times(trajs):
    return [_untimed(t.to_dict()) for t in trajs]


def test_lockstep_evaluation_gives_the_sequential_trajectories_and_batches_clarifications(samples):
    from textsql_clarify.baselines.agents import OracleAgent
    from textsql_clarify.rollout.evaluation import evaluate

    chosen = [s for s in samples if s.group == "ambiguous"][:8] + [s for s in samples if s.group != "ambiguous"][:4]
    seq, m_seq = evaluate(chosen, OracleAgent(), progress=False)
    user = RecordingUser()
    par, m_par = evaluate(chosen, OracleAgent(), progress=False, num_envs=4, simulator=user)
    assert _strip_times(par) == _strip_times(seq)
    assert m_par["overall"]["EX"] == m_seq["overall"]["EX"] == MeanIs(1.0, 8 + sum(
        1 for s in chosen[8:] if s.group == "answerable"))
    # the oracle clarifies each ambiguous sample once on its first turn: the first batch holds 4
    assert max(len(b) for b in user.batches) == 4
    assert sum(len(b) for b in user.batches) == sum(len(t.clarifications) for t in seq)


def test_random_agent_trajectories_do_not_depend_on_num_envs(samples):
    from textsql_clarify.baselines.agents import RandomAgent
    from textsql_clarify.rollout.evaluation import evaluate

    one, _ = evaluate(samples[:16], RandomAgent(3), progress=False)
    four, _ = evaluate(samples[:16], RandomAgent(3), progress=False, num_envs=np.int64(4))
    assert _strip_times(one) == _strip_times(four)
    assert len({t.outcome for t in one}) >= 2  # really random: several kinds of endings


def test_lockstep_agent_that_cannot_be_copied_gets_a_hint(samples):
    import threading

    from textsql_clarify.baselines.agents import OracleAgent
    from textsql_clarify.rollout.evaluation import evaluate

    agent = OracleAgent()
    agent.lock = threading.Lock()
    with pytest.raises(TypeError, match="fork"):
        evaluate(samples[:4], agent, progress=False, num_envs=2)


def test_lockstep_with_more_envs_than_samples_and_bad_num_envs(samples):
    from textsql_clarify.baselines.agents import RandomAgent
    from textsql_clarify.rollout.evaluation import evaluate

    few = samples[:3]
    a, _ = evaluate(few, RandomAgent(7), progress=False, num_envs=8)
    b, _ = evaluate(few, RandomAgent(7), progress=False, num_envs=8)
    assert [t.sample_id for t in a] == [s.id for s in few] and _strip_times(a) == _strip_times(b)
    with pytest.raises(ValueError, match="num_envs"):
        evaluate(few, RandomAgent(7), progress=False, num_envs=0)


def test_single_env_step_failing_in_the_judge_is_undone(samples):
    env = TextSQLClarifyEnv(samples=samples, feedback_judge=FlakyJudge())
    s = next(x for x in samples if x.group == "unanswerable")
    env.reset(options={"sample_id": s.id})
    with pytest.raises(MemoryError):
        env.step("<feedback>No such data.</feedback>")
    _, _, term, _, info = env.step("<feedback>No such data.</feedback>")
    assert term and [t.index for t in info["trajectory"].turns] == [0]
    assert [m["role"] for m in info["messages"]] == ["system", "user", "assistant"]
    assert info["scores"]["fb"] == 1.0


def test_a_failure_after_an_autoreset_undoes_the_seeded_draw(samples):
    class SteadyJudge:
        def judge(self, sample, feedback, schema_identifiers=()):
            return True

    script = [["<sql>SELECT 1</sql>", "<clarify>Which term?</clarify>"],
              ["<sql>SELECT 2</sql>", "<feedback>No such data.</feedback>"],   # sub-env 0 autoresets first
              ["<feedback>No.</feedback>", "<sql>SELECT 3</sql>"]]

    def run(judge):
        envs = TextSQLClarifyVectorEnv(2, samples=samples, feedback_judge=judge)
        return [list(out[4]["sample_id"]) for out in _play_retrying(envs, 21, script, MemoryError)]

    assert run(FlakyJudge()) == run(SteadyJudge())


# -- a failed SAME_STEP autoreset changes no sub-env ----------------------------------------------------
def _env_state(env):
    return (env.current_sample.id if env.current_sample else None, env._turn, list(env._history),
            env._np_random.bit_generator.state if env._np_random is not None else None)


def test_same_step_autoreset_that_fails_changes_no_sub_env(tmp_path):
    import copy
    import dataclasses
    import shutil

    from gymnasium.vector import AutoresetMode

    from textsql_clarify.datasets import embedded_db_path, load_dataset
    from textsql_clarify.envs.vector import TextSQLClarifyVectorEnv

    good = next(s for s in load_dataset("embedded") if s.group == "answerable")
    gone = tmp_path / "gone.sqlite"
    shutil.copyfile(embedded_db_path(), gone)
    missing = dataclasses.replace(good, id="missing-db", db_path=str(gone))
    venv = TextSQLClarifyVectorEnv(2, samples=[good, missing], autoreset_mode=AutoresetMode.SAME_STEP)
    try:
        # a seed whose autoreset draws the missing sample for sub-env 1 (sub-env 0 steps before it)
        for seed in range(100):
            venv.reset(seed=seed, options={"sample_ids": [good.id, good.id]})
            if copy.deepcopy(venv.envs[1].np_random).integers(2) == 1:
                break
        else:
            pytest.fail("no seed draws the missing sample")
        gone.unlink()  # the dataset was loaded (and validated) while it was there
        before = [_env_state(e) for e in venv.envs]
        with pytest.raises(FileNotFoundError):
            venv.step([f"<sql>{good.gold_sql}</sql>"] * 2)  # both episodes end; sub-env 1's reset cannot open
        assert [_env_state(e) for e in venv.envs] == before  # before the fix: both had stepped (turn 1, ended)
        shutil.copyfile(embedded_db_path(), gone)  # the step can be sent again
        _, rewards, terminated, _, infos = venv.step([f"<sql>{good.gold_sql}</sql>"] * 2)
        assert rewards.tolist() == [1.0, 1.0] and terminated.tolist() == [True, True]
        assert venv.envs[1].current_sample.id == "missing-db" and "final_obs" in infos
    finally:
        venv.close()
