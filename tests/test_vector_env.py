"""TextSQLClarifyVectorEnv: one respond(batch) per step for all sub-envs' clarifications, with the
trajectories of SyncVectorEnv; and the begin_step / complete_step split of the single env."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import SyncVectorEnv

import textsql_clarify  # noqa: F401  (registers the env)
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
    with pytest.raises(ValueError, match="sequence of 3 action strings"):
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


@pytest.mark.parametrize("user, error", [(ShortUser(), RuntimeError), (FailingUser(), OSError)])
def test_simulator_failure_leaves_no_sub_env_waiting(samples, user, error):
    envs = TextSQLClarifyVectorEnv(2, samples=samples, simulator=user)
    envs.reset(seed=0)
    with pytest.raises(error, match="ShortUser.respond returned 1 replies for 2 requests|model server gone"):
        envs.step(["<clarify>which year?</clarify>"] * 2)
    # the sub-envs take actions again (the failed clarification is not waiting)
    _, _, term, _, _ = envs.step(["<feedback>no</feedback>"] * 2)
    assert term.tolist() == [True, True]


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
    from textsql_clarify.baselines.rollout import evaluate

    chosen = [s for s in samples if s.group == "ambiguous"][:8] + [s for s in samples if s.group != "ambiguous"][:4]
    seq, m_seq = evaluate(chosen, OracleAgent(), progress=False)
    user = RecordingUser()
    par, m_par = evaluate(chosen, OracleAgent(), progress=False, num_envs=4, simulator=user)
    assert _strip_times(par) == _strip_times(seq)
    assert m_par["overall"]["EX"] == m_seq["overall"]["EX"] == {"value": 1.0, "n": 8 + sum(
        1 for s in chosen[8:] if s.group == "answerable")}
    # the oracle clarifies each ambiguous sample once on its first turn: the first batch holds 4
    assert max(len(b) for b in user.batches) == 4
    assert sum(len(b) for b in user.batches) == sum(len(t.clarifications) for t in seq)


def test_lockstep_with_more_envs_than_samples_and_bad_num_envs(samples):
    from textsql_clarify.baselines.agents import RandomAgent
    from textsql_clarify.baselines.rollout import evaluate

    few = samples[:3]
    a, _ = evaluate(few, RandomAgent(7), progress=False, num_envs=8)
    b, _ = evaluate(few, RandomAgent(7), progress=False, num_envs=8)
    assert [t.sample_id for t in a] == [s.id for s in few] and _strip_times(a) == _strip_times(b)
    with pytest.raises(ValueError, match="num_envs"):
        evaluate(few, RandomAgent(7), progress=False, num_envs=0)
