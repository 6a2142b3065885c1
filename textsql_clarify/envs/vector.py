"""A vector env whose sub-envs share one simulated user and put their clarifications in one batch.

Gymnasium's ``SyncVectorEnv`` steps its sub-envs one after the other, so each clarification reaches
the simulated user alone (``respond([request])``). RL rollouts ask the user thousands of times, and a
transformers user answers a batch in one padded ``generate`` per stage (ABISS §5.2's two stages), so
:class:`TextSQLClarifyVectorEnv` steps in three phases:

1. every sub-env applies its action up to the point where the user must answer
   (:meth:`TextSQLClarifyEnv.begin_step`);
2. the clarifications of all sub-envs go to the one shared simulator in a single ``respond(batch)``;
3. each sub-env records its reply (:meth:`TextSQLClarifyEnv.complete_step`); then the other sub-envs
   step. If the simulator fails, the clarifications are undone and nothing else has stepped.

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
from .env import TextSQLClarifyEnv, episode_samples, fetch_replies

__all__ = ["TextSQLClarifyVectorEnv", "as_float"]

_MODE_NAMES = {"next_step": AutoresetMode.NEXT_STEP, "same_step": AutoresetMode.SAME_STEP,
               "disabled": AutoresetMode.DISABLED}


class TextSQLClarifyVectorEnv(SyncVectorEnv):
    """``num_envs`` :class:`TextSQLClarifyEnv` sub-envs stepped together; one ``respond(batch)`` per step.

    Args:
        num_envs: number of sub-envs (>= 1).
        dataset, samples, limit, db_root, validate, exclude_flags: as :class:`TextSQLClarifyEnv`; the samples are
            loaded once and shared.
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
                 db_root: str | None = None, validate: bool = True, exclude_flags: Sequence[str] = (),
                 **env_kwargs: Any):
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs must be an int >= 1, got {num_envs!r}")
        if isinstance(autoreset_mode, str) and autoreset_mode.lower() in _MODE_NAMES:
            autoreset_mode = _MODE_NAMES[autoreset_mode.lower()]
        shared = episode_samples(dataset, samples, limit, db_root=db_root, validate=validate,
                                 exclude_flags=exclude_flags)
        user = make_simulator(simulator)
        judge = feedback_judge or default_judge()
        # isolation="process": one worker pool for the sub-envs (they step one after another), closed by close()
        self._worker_pool = None
        if env_kwargs.get("isolation") == "process" and env_kwargs.get("worker_pool") is None:
            from ..sql.isolated import WorkerPool
            self._worker_pool = env_kwargs["worker_pool"] = WorkerPool(size=1)
        make_one = functools.partial(TextSQLClarifyEnv, samples=shared, simulator=user,
                                     feedback_judge=judge, **env_kwargs)
        super().__init__([make_one] * int(num_envs), copy=copy, autoreset_mode=autoreset_mode)
        #: ``respond`` calls made by :meth:`step` and the requests they carried (for logs and benchmarks).
        self.respond_calls = 0
        self.requests_answered = 0

    def close_extras(self, **kwargs: Any) -> None:
        """Close the sub-envs (as ``SyncVectorEnv``), then the worker pool they share under ``isolation="process"``."""
        super().close_extras(**kwargs)
        if getattr(self, "_worker_pool", None) is not None:
            self._worker_pool.close()

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
            if isinstance(have, dict) or (have is not None and have.dtype != object and not isinstance(value, np.ndarray)
                                          and not _fits(value, have.dtype)):
                vector_infos[key] = _as_objects(have, vector_infos[f"_{key}"], self.num_envs)
            if isinstance(value, dict):  # a dict where other sub-envs gave a plain value: kept whole
                vector_infos[key][env_num] = value
                mask = vector_infos[f"_{key}"]
                mask[env_num] = True
                continue
            vector_infos = super()._add_info(vector_infos, {key: value}, env_num)
        return vector_infos

    def reset(self, *, seed: int | Sequence[int | None] | None = None, options: dict | None = None):
        """Reset the sub-envs, as ``SyncVectorEnv.reset``, plus a sample chosen per sub-env.

        Args:
            seed: ``None``, an int (sub-env ``i`` gets ``seed + i``) or one seed per sub-env.
            options: as ``SyncVectorEnv.reset`` (the same dict goes to every sub-env; ``reset_mask`` resets
                only the masked ones), or with ``"sample_ids"`` / ``"indices"``: a list of ``num_envs``
                sample ids / indices, one per sub-env (``None`` = drawn from the seed), e.g. to score a
                GRPO group of completions on chosen samples. They combine with ``reset_mask``; entries of
                unmasked sub-envs are ignored.
        Returns:
            ``(obs, infos)`` batched as ``SyncVectorEnv.reset``.
        Raises:
            ValueError: a per-sub-env list of the wrong length or type, both lists, other options with
                them, or a bad ``reset_mask`` / seed list. KeyError / IndexError: an unknown id or index.
        """
        options = dict(options or {})
        keys = [k for k in ("sample_ids", "indices") if k in options]
        if not keys:
            return super().reset(seed=seed, options=options or None)
        if len(keys) > 1:
            raise ValueError("give either 'sample_ids' or 'indices' in reset options, not both")
        chosen = options.pop(keys[0])
        mask = options.pop("reset_mask", None)
        if options:
            raise ValueError(f"reset options {sorted(options)} cannot be combined with {keys[0]!r}")
        if not isinstance(chosen, (list, tuple, np.ndarray)) or len(chosen) != self.num_envs:
            raise ValueError(f"reset option {keys[0]!r} needs a list of {self.num_envs} entries (one per sub-env), "
                             f"got {type(chosen).__name__}")
        if mask is None:
            mask = np.ones(self.num_envs, dtype=bool)
        elif not (isinstance(mask, np.ndarray) and mask.dtype == np.bool_ and mask.shape == (self.num_envs,)):
            raise ValueError(f"reset_mask must be a bool numpy array of shape ({self.num_envs},)")
        if seed is None or isinstance(seed, (int, np.integer)):
            seeds = [None if seed is None else int(seed) + i for i in range(self.num_envs)]
        elif len(seed) == self.num_envs:
            seeds = list(seed)
        else:
            raise ValueError(f"seed needs one entry per sub-env ({self.num_envs}), got {len(seed)}")
        for i, seed_i in enumerate(seeds):
            if seed_i is not None and (isinstance(seed_i, bool) or not isinstance(seed_i, (int, np.integer))):
                raise ValueError(f"seed {i} must be an int or None, got {seed_i!r}")
        sub = "sample_id" if keys[0] == "sample_ids" else "index"
        for i in np.flatnonzero(mask):  # every choice checked before any sub-env is reset
            pick = chosen[i]
            if pick is None:
                continue
            if sub == "sample_id":
                self.envs[i].sample_index(str(pick) if isinstance(pick, np.str_) else pick)
            elif isinstance(pick, bool) or not isinstance(pick, (int, np.integer)) or \
                    not 0 <= int(pick) < len(self.envs[i].samples):
                raise IndexError(f"indices[{i}] = {pick!r} is not a sample index 0..{len(self.envs[i].samples) - 1}")
        infos: dict[str, Any] = {}
        for i in np.flatnonzero(mask):
            pick = chosen[i]
            if isinstance(pick, np.generic):
                pick = pick.item()
            self._env_obs[i], info = self.envs[i].reset(seed=seeds[i], options=None if pick is None else {sub: pick})
            self._terminations[i] = self._truncations[i] = self._autoreset_envs[i] = False
            infos = self._add_info(infos, info, int(i))
        self._observations = concatenate(self.single_observation_space, self._env_obs, self._observations)
        return (deepcopy(self._observations) if self.copy else self._observations), infos

    @property
    def simulator(self) -> Any:
        """The simulated user of sub-env 0 (all sub-envs share it unless ``set_attr`` changed that)."""
        return self.envs[0].simulator

    @simulator.setter
    def simulator(self, value: Any) -> None:
        for env in self.envs:
            env.simulator = value

    def step(self, actions: Any):
        """Step every sub-env; all clarifications of this step are answered in one ``respond(batch)``
        (one per distinct simulator object, when ``set_attr`` gave sub-envs different ones).

        The clarifications go first, then the other sub-envs step (or autoreset). A step that fails
        anywhere (the simulator, an FB judge, a scorer) changes no sub-env: each is put back as it was
        (:meth:`TextSQLClarifyEnv.snapshot`), so the step can be sent again or the env reset.

        Args:
            actions: one action string per sub-env: a list, tuple or 1-d array of ``num_envs`` items.
        Returns:
            ``(obs, rewards, terminated, truncated, infos)`` batched as ``SyncVectorEnv.step``.
        Raises:
            ValueError: ``actions`` is not a list, tuple or 1-d array, or holds not ``num_envs`` actions.
            RuntimeError: autoreset is disabled and a sub-env has ended (checked before any sub-env
                steps); a sub-env's step fails as :meth:`TextSQLClarifyEnv.step` does; the simulator
                returns a different number of replies than requests (the message names it).
            TypeError: a reply is not a ``UserReply`` (the message gives its position).
        """
        if isinstance(actions, np.ndarray) and actions.ndim == 1:
            acts = actions.tolist()
        elif isinstance(actions, (list, tuple)):
            acts = list(actions)
        else:
            raise ValueError(f"step needs a list, tuple or 1-d array of {self.num_envs} action strings "
                             f"(one per sub-env), got {type(actions).__name__}")
        if len(acts) != self.num_envs:
            raise ValueError(f"step needs {self.num_envs} actions (one per sub-env), got {len(acts)}")
        resetting = self._autoreset_envs.copy() if self.autoreset_mode == AutoresetMode.NEXT_STEP else \
            np.zeros(self.num_envs, dtype=bool)
        if self.autoreset_mode == AutoresetMode.DISABLED and self._autoreset_envs.any():
            ended = np.flatnonzero(self._autoreset_envs).tolist()
            raise RuntimeError(f"sub-envs {ended} have ended and autoreset is disabled: reset them first "
                               f"(reset(options={{'reset_mask': ...}}))")
        results: list[tuple | None] = [None] * self.num_envs
        snaps = [env.snapshot(rng=bool(r)) for env, r in zip(self.envs, resetting)]  # only resets draw
        try:
            # 1. clarifications: begun, answered per simulator, and only then recorded
            asks = [i for i in range(self.num_envs) if not resetting[i] and self.envs[i].needs_reply(acts[i])]
            pending = [(i, self.envs[i].begin_step(acts[i])) for i in asks]
            groups: dict[int, list[tuple[int, UserRequest]]] = {}
            for i, req in pending:
                groups.setdefault(id(self.envs[i].simulator), []).append((i, req))
            replies: dict[int, Any] = {}
            for members in groups.values():
                sim = self.envs[members[0][0]].simulator
                for (i, _), reply in zip(members, fetch_replies(sim, [req for _, req in members])):
                    replies[i] = reply
            for i, _ in pending:
                results[i] = self.envs[i].complete_step(replies[i])
            # 2. every other sub-env: autoreset, or a step that needs no reply
            for i in range(self.num_envs):
                if results[i] is not None:
                    continue
                if resetting[i]:
                    obs, info = self.envs[i].reset()
                    results[i] = (obs, 0.0, False, False, info)
                else:
                    results[i] = self.envs[i].begin_step(acts[i])
        except BaseException:
            for env, snap in zip(self.envs, snaps):  # a step that fails anywhere changes no sub-env
                env.restore(snap)
            raise
        self.respond_calls += len(groups)
        self.requests_answered += len(pending)
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
    """True when ``value`` goes into an array of ``dtype`` unchanged: not ``None``, a bool only into a
    bool array, and a number whose type numpy casts safely (no ``0.625`` into an int array, no ``1e6``
    into ``float16``, no Python float into ``float32``)."""
    if value is None or isinstance(value, (str, bytes)):
        return False
    if isinstance(value, (bool, np.bool_)) != (dtype == np.bool_):
        return False
    if not isinstance(value, (int, float, np.number, np.bool_)):
        return False
    return bool(np.can_cast(np.asarray(value).dtype, dtype, casting="safe"))


def as_float(values: Any, mask: Any = None) -> np.ndarray:
    """A vector info array as ``float64``, ``NaN`` where a value is ``None`` (undefined) or, given the
    info's ``_key`` mask, where a sub-env had no value; e.g.
    ``as_float(rc["ex"], rc["_ex"])`` with ``rc = infos["reward_components"]``, before ``np.nanmean``.

    Args:
        values: a 1-d array (typed or ``object``) or list of numbers, bools and ``None``.
        mask: optional 1-d bool array, the info's ``_key`` mask (False -> ``NaN``).
    Returns:
        ``float64`` array of the same length.
    Raises:
        TypeError: a value that is neither a number, a bool nor ``None``.
    """
    out = np.empty(len(values), dtype=np.float64)
    for i, v in enumerate(values):
        if v is None:
            out[i] = np.nan
        elif isinstance(v, (bool, int, float, np.number, np.bool_)):
            out[i] = float(v)
        else:
            raise TypeError(f"value {i} is a {type(v).__name__}, not a number or None")
    if mask is not None:
        out[~np.asarray(mask, dtype=bool)] = np.nan
    return out


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
