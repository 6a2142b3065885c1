"""A vector env whose sub-envs share one simulated user and put their clarifications in one batch.

Gymnasium's ``SyncVectorEnv`` steps its sub-envs one after the other, so each clarification reaches
the simulated user alone (``respond([request])``). RL rollouts ask the user thousands of times, and a
transformers user answers a batch in one padded ``generate`` per stage (ABISS §5.2's two stages), so
:class:`TextSQLClarifyVectorEnv` steps in three phases:

1. every sub-env applies its action up to the point where the user must answer
   (:meth:`TextSQLClarifyEnv.begin_step`);
2. the clarifications of all sub-envs go to the one shared simulator in a single ``respond(batch)``;
3. each sub-env records its reply (:meth:`TextSQLClarifyEnv.complete_step`).

Everything else is ``SyncVectorEnv``'s: spaces, seeding (``reset(seed=s)`` seeds sub-env ``i`` with
``s + i``), info merging and the three autoreset modes. With a deterministic simulator the
trajectories are those of ``SyncVectorEnv`` over the same sub-envs. The sub-envs also share one
sample list and one FB judge, so the dataset is loaded, and a model is held, once per process.

``gym.make_vec("TextSQLClarify-v0", num_envs=N)`` builds it (the registration's
``vector_entry_point``); ``vectorization_mode="sync"`` still gives a plain ``SyncVectorEnv``.
"""
from __future__ import annotations

import functools
from copy import deepcopy
from typing import Any, Sequence

import numpy as np
from gymnasium.vector import SyncVectorEnv
from gymnasium.vector.utils import concatenate
from gymnasium.vector.vector_env import AutoresetMode

from ..rewards.feedback import FeedbackJudge, default_judge
from ..samples import Sample
from ..simulators import make_simulator
from ..simulators.base import UserRequest
from .env import TextSQLClarifyEnv, answer_clarifications, cancel_clarifications

__all__ = ["TextSQLClarifyVectorEnv"]

_MODE_NAMES = {"next_step": AutoresetMode.NEXT_STEP, "same_step": AutoresetMode.SAME_STEP,
               "disabled": AutoresetMode.DISABLED}


class TextSQLClarifyVectorEnv(SyncVectorEnv):
    """``num_envs`` :class:`TextSQLClarifyEnv` sub-envs stepped together; one ``respond(batch)`` per step.

    Args:
        num_envs: number of sub-envs (>= 1).
        dataset, samples, limit: as :class:`TextSQLClarifyEnv`; the samples are loaded once and shared.
        simulator: as :class:`TextSQLClarifyEnv`; built once (one model per process) and shared.
        feedback_judge: as :class:`TextSQLClarifyEnv`; one judge shared by the sub-envs.
        autoreset_mode: an ``AutoresetMode`` or its name: ``"next_step"`` (Gymnasium's default),
            ``"same_step"``, ``"disabled"`` (Gymnasium's ``"NextStep"`` spellings work too).
        copy: return copies of the batched observations (as ``SyncVectorEnv``).
        env_kwargs: every other :class:`TextSQLClarifyEnv` option (reward preset, budget, modes ...).

    Observations are the sub-envs' dicts batched by ``gymnasium.vector.utils.concatenate`` (each text
    field a tuple of ``num_envs`` strings, each counter an ``int64`` array of shape ``(num_envs,)``);
    rewards ``float64 (num_envs,)``; terminated / truncated ``bool (num_envs,)``; infos merged per key
    with the ``_key`` masks of Gymnasium's vector API.

    Raises:
        ValueError: ``num_envs`` below 1, an unknown autoreset mode, or any :class:`TextSQLClarifyEnv`
            option error.
        DatasetError: the dataset cannot be loaded.
    """

    def __init__(self, num_envs: int = 1, *, dataset: str = "embedded", samples: Sequence[Sample] | None = None,
                 limit: int | None = None, simulator: Any = "rule", feedback_judge: FeedbackJudge | None = None,
                 autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP, copy: bool = True,
                 **env_kwargs: Any):
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs must be an int >= 1, got {num_envs!r}")
        if samples is None:
            from ..datasets import load_dataset
            samples = load_dataset(dataset, limit=limit)
        elif limit is not None:
            samples = list(samples)[:limit]
        if isinstance(autoreset_mode, str) and autoreset_mode.lower() in _MODE_NAMES:
            autoreset_mode = _MODE_NAMES[autoreset_mode.lower()]
        shared = list(samples)
        self.simulator = make_simulator(simulator)
        judge = feedback_judge or default_judge()
        make_one = functools.partial(TextSQLClarifyEnv, samples=shared, simulator=self.simulator,
                                     feedback_judge=judge, **env_kwargs)
        super().__init__([make_one] * int(num_envs), copy=copy, autoreset_mode=autoreset_mode)
        #: ``respond`` calls made by :meth:`step` and the requests they carried (for logs and benchmarks).
        self.respond_calls = 0
        self.requests_answered = 0

    def _add_info(self, vector_infos: dict[str, Any], env_info: dict[str, Any], env_num: int) -> dict[str, Any]:
        """Gymnasium's info merging (``infos[key][i]`` plus the ``infos["_key"]`` mask), made safe for
        values whose type differs between sub-envs.

        Gymnasium types a key's array by the first value it sees, so a reward component that is
        ``1.0`` in one sub-env and ``None`` (undefined, DESIGN "Contracts") in the next raises
        ``TypeError``, and ``0.625`` after an ``int`` would be truncated silently. Here such a key's
        array becomes an ``object`` array holding every value as given; slots of sub-envs without the
        key hold ``None``. A key that is a dict in one sub-env and a plain value (``None``) in another
        becomes an object array of the per-sub-env values, dicts kept whole.
        """
        for key, value in env_info.items():
            if key == "final_obs":
                vector_infos = super()._add_info(vector_infos, {key: value}, env_num)
                continue
            have = vector_infos.get(key)
            if isinstance(value, dict) and (have is None or isinstance(have, dict)):
                vector_infos = super()._add_info(vector_infos, {key: value}, env_num)  # recurses into ours
                continue
            if isinstance(have, dict) or (have is not None and have.dtype != object and not _fits(value, have.dtype)):
                vector_infos[key] = _as_objects(have, vector_infos[f"_{key}"], self.num_envs)
            if isinstance(value, dict):  # a dict where other sub-envs gave a plain value: kept whole
                vector_infos[key][env_num] = value
                mask = vector_infos[f"_{key}"]
                mask[env_num] = True
                continue
            vector_infos = super()._add_info(vector_infos, {key: value}, env_num)
        return vector_infos

    def step(self, actions: Any):
        """Step every sub-env; all clarifications of this step are answered in one ``respond(batch)``.

        Args:
            actions: one action string per sub-env (a tuple, list or 1-d array of ``num_envs`` strings).
        Returns:
            ``(obs, rewards, terminated, truncated, infos)`` batched as ``SyncVectorEnv.step``.
        Raises:
            ValueError: ``actions`` is a single string or not a sequence, or holds not ``num_envs`` actions.
            RuntimeError: a sub-env's step fails as :meth:`TextSQLClarifyEnv.step` does, or the simulator
                returns a different number of replies than requests (the message names it). No
                sub-env is left waiting for a reply after an error.
        """
        if isinstance(actions, (str, bytes)) or not hasattr(actions, "__len__"):
            raise ValueError(f"step needs a sequence of {self.num_envs} action strings (one per sub-env), "
                             f"got {type(actions).__name__}")
        acts = list(actions)
        if len(acts) != self.num_envs:
            raise ValueError(f"step needs {self.num_envs} actions (one per sub-env), got {len(acts)}")
        results: list[tuple | None] = [None] * self.num_envs
        pending: list[tuple[int, UserRequest]] = []
        try:
            for i, action in enumerate(acts):
                env = self.envs[i]
                if self._autoreset_envs[i]:
                    if self.autoreset_mode == AutoresetMode.NEXT_STEP:
                        obs, info = env.reset()
                        results[i] = (obs, 0.0, False, False, info)
                        continue
                    if self.autoreset_mode == AutoresetMode.DISABLED:
                        raise RuntimeError(f"sub-env {i} has ended and autoreset is disabled: reset it first "
                                           f"(reset(options={{'reset_mask': ...}}))")
                out = env.begin_step(action)
                if isinstance(out, UserRequest):
                    pending.append((i, out))
                else:
                    results[i] = out
        except BaseException:
            cancel_clarifications([self.envs[i] for i, _ in pending])
            raise
        if pending:
            done = answer_clarifications(self.simulator, [(self.envs[i], req) for i, req in pending])
            self.respond_calls += 1
            self.requests_answered += len(pending)
            for (i, _), result in zip(pending, done):
                results[i] = result
        infos: dict[str, Any] = {}
        for i, (obs, reward, terminated, truncated, info) in enumerate(results):
            self._env_obs[i] = obs
            self._rewards[i] = reward
            self._terminations[i] = terminated
            self._truncations[i] = truncated
            if self.autoreset_mode == AutoresetMode.SAME_STEP and (terminated or truncated):
                infos = self._add_info(infos, {"final_obs": obs, "final_info": info}, i)
                self._env_obs[i], info = self.envs[i].reset()
            infos = self._add_info(infos, info, i)
        self._observations = concatenate(self.single_observation_space, self._env_obs, self._observations)
        self._autoreset_envs = np.logical_or(self._terminations, self._truncations)
        return (deepcopy(self._observations) if self.copy else self._observations, np.copy(self._rewards),
                np.copy(self._terminations), np.copy(self._truncations), infos)


def _fits(value: Any, dtype: np.dtype) -> bool:
    """True when ``value`` goes into an array of ``dtype`` unchanged (no None, no float into int)."""
    if dtype == np.bool_:
        return isinstance(value, (bool, np.bool_))
    if np.issubdtype(dtype, np.integer):
        return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
    if np.issubdtype(dtype, np.floating):
        return isinstance(value, (float, np.floating))
    return True  # other arrays (np.ndarray infos) are left to Gymnasium


def _as_objects(have: Any, mask: np.ndarray, n: int) -> np.ndarray:
    """An ``object`` array of the values merged so far (a typed array, or a nested info dict rebuilt
    per sub-env); ``None`` where ``mask`` is False."""
    out = np.full(n, None, dtype=object)
    for j in np.flatnonzero(mask):
        out[j] = _unmerge(have, j) if isinstance(have, dict) else (
            have[j].item() if isinstance(have[j], np.generic) else have[j])
    return out


def _unmerge(vinfo: dict, j: int) -> dict:
    """Sub-env ``j``'s dict back from a merged (nested) vector info dict."""
    out = {}
    for k, v in vinfo.items():
        if k.startswith("_") and k[1:] in vinfo or not vinfo[f"_{k}"][j]:
            continue
        out[k] = _unmerge(v, j) if isinstance(v, dict) else (v[j].item() if isinstance(v[j], np.generic) else v[j])
    return out
