"""A vector env whose sub-envs share one simulated user, one FB judge and one per-sample cache, and put
their clarifications (and feedback judgements) in one batch.

Gymnasium's ``SyncVectorEnv`` steps its sub-envs one after the other, so each clarification reaches
the simulated user alone (``respond([request])``). RL rollouts ask the user thousands of times, and a
transformers user answers a batch in one padded ``generate`` per stage (ABISS §5.2's two stages), so
:class:`TextSQLClarifyVectorEnv` steps in three phases:

1. the feedback judgements of the step are made in one batch per judge (``judge_many(samples, feedbacks,
   schema_identifiers_list)`` where the judge has it, one ``judge`` call each otherwise);
2. every clarifying sub-env applies its action up to the point where the user must answer
   (:meth:`TextSQLClarifyEnv.begin_step`), and the clarifications of all sub-envs go to the one shared
   simulator in a single ``respond(batch)``; each sub-env then records its reply
   (:meth:`TextSQLClarifyEnv.complete_step`);
3. the other sub-envs step (or autoreset). If anything fails, every sub-env is put back as it was.

Seeding (``reset(seed=s)`` seeds sub-env ``i`` with ``s + i``), spaces and the three autoreset modes are
``SyncVectorEnv``'s, and so is the layout of the results: each text field a tuple of ``num_envs`` strings,
each counter an ``int64`` array, infos merged per key with the ``_key`` masks. With a deterministic
simulator the trajectories are those of ``SyncVectorEnv`` over the same sub-envs.

What makes it no slower than a loop over one env (``bench/bench_vector_env.py``): the sub-envs
share the samples, the simulator, the judge and the static per-sample cache (question, schema text,
sandbox, system prompt: built once per sample, not once per sample and sub-env); observations are
batched field by field without Gymnasium's ``concatenate`` and never deep-copied (the strings are
immutable, the counter arrays are new each step); infos are merged in one pass over the sub-envs, each
key's type decided once (:func:`merge_infos`), not value by value.

``gym.make_vec("TextSQLClarify-v0", num_envs=N)`` builds it (the registration's
``vector_entry_point``); ``vectorization_mode="sync"`` still gives a plain ``SyncVectorEnv`` and
``vectorization_mode="async"`` Gymnasium's ``AsyncVectorEnv`` (one process per sub-env; the text
observations travel through shared memory, :mod:`.spaces`, and the infos in the typed format,
:mod:`.infos`). ``docs/platform.md`` ("Vector and async envs") says which to choose.
"""
from __future__ import annotations

import functools
from typing import Any, Sequence

import numpy as np
from gymnasium import spaces as gym_spaces
from gymnasium.vector import SyncVectorEnv
from gymnasium.vector.utils import concatenate
from gymnasium.vector.vector_env import AutoresetMode

from ..rewards.feedback import FeedbackJudge, default_judge
from ..samples import Sample
from ..simulators import make_simulator
from ..simulators.base import UserRequest
from .env import TextSQLClarifyEnv, episode_samples, fetch_replies
from .infos import resolve_info_format, typed_info

__all__ = ["TextSQLClarifyVectorEnv", "as_float", "merge_infos"]

_MODE_NAMES = {"next_step": AutoresetMode.NEXT_STEP, "same_step": AutoresetMode.SAME_STEP,
               "disabled": AutoresetMode.DISABLED}


class TextSQLClarifyVectorEnv(SyncVectorEnv):
    """``num_envs`` :class:`TextSQLClarifyEnv` sub-envs stepped together; one ``respond(batch)`` per step.

    Args:
        num_envs: number of sub-envs (>= 1).
        dataset, samples, limit, db_root, validate, exclude_flags: as :class:`TextSQLClarifyEnv`; the samples are
            loaded once and shared.
        simulator: as :class:`TextSQLClarifyEnv`; built once (one model per process) and shared.
        feedback_judge: as :class:`TextSQLClarifyEnv`; one judge shared by the sub-envs, asked once per step
            for all the step's feedback actions (``judge_many`` where it has one).
        autoreset_mode: an ``AutoresetMode`` or its name: ``"next_step"`` (Gymnasium's default),
            ``"same_step"``, ``"disabled"`` (Gymnasium's ``"NextStep"`` spellings work too).
        copy: kept for ``SyncVectorEnv`` compatibility; both values return observations that later steps do
            not change (text fields are tuples of immutable strings, counters new arrays every step), so no
            deep copy is ever made.
        env_kwargs: every other :class:`TextSQLClarifyEnv` option (reward preset, budget, modes,
            ``info_format``, ``ex_mode`` / ``suite_k`` / ``suite_cache_dir`` ...; with ``ex_mode="suite"`` the
            variants are built once and the sub-envs share their connections); with ``isolation="process"`` the
            sub-envs share one worker pool, shut down by :meth:`close`; with ``sql_connection="private"`` each
            sub-env has its own connections (and per-sample cache), so one can be interrupted alone
            (``TextSQLClarifyEnv.interrupt_sql``); the sub-envs still step one after another.

    Observations are the sub-envs' dicts batched per field (each text field a tuple of ``num_envs``
    strings, each counter an ``int64`` array of shape ``(num_envs,)``, as ``gymnasium.vector.utils.concatenate``
    gives them); rewards ``float64 (num_envs,)``; terminated / truncated ``bool (num_envs,)``; infos merged
    per key with the ``_key`` masks of Gymnasium's vector API (:func:`merge_infos`). With
    ``info_format="typed"`` the sub-envs' infos are first put in the typed format (:mod:`.infos`), so
    reward components and scores merge into ``float64`` arrays (``NaN`` = undefined).

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
            self._worker_pool = env_kwargs["worker_pool"] = WorkerPool(size=1, spares=1)
        make_one = functools.partial(TextSQLClarifyEnv, samples=shared, simulator=user,
                                     feedback_judge=judge, **env_kwargs)
        super().__init__([make_one] * int(num_envs), copy=copy, autoreset_mode=autoreset_mode)
        # one static per-sample cache (sandbox, schema text, system prompt ...) for every sub-env: they share
        # the samples and every option that goes into it, so each sample's entry is built once, not N times
        # (not with isolation="process" and a worker pool per sub-env: a cached sandbox belongs to one pool)
        # (nor with sql_connection="private": each sub-env keeps its own connections and what is built on them)
        private = getattr(self.envs[0], "sql_connection", "shared") == "private"
        if len({id(getattr(env, "worker_pool", None)) for env in self.envs}) == 1 and not private:
            for env in self.envs[1:]:
                env._static = self.envs[0]._static
        # ex_mode="suite": one set of variant connections per database for every sub-env (they step one after
        # another), not N
        for env in self.envs[1:] if not private else ():
            env._suites = self.envs[0]._suites
        self._typed = resolve_info_format(getattr(self.envs[0], "info_format", "python")) == "typed"
        self._batch_obs = _observation_batcher(self.single_observation_space, self.num_envs)
        #: ``respond`` calls made by :meth:`step` and the requests they carried (for logs and benchmarks).
        self.respond_calls = 0
        self.requests_answered = 0
        #: feedback-judge calls made by :meth:`step` (``judge_many`` or one per feedback) and the feedbacks judged.
        self.judge_calls = 0
        self.feedbacks_judged = 0

    @property
    def static_cache(self) -> dict:
        """The per-sample cache of sub-env 0, which every sub-env shares (``{sample id: static entry}``); held by
        the sub-envs only, so that ``close()`` (each sub-env lets go of it) frees its sandboxes."""
        return self.envs[0]._static

    def close_extras(self, **kwargs: Any) -> None:
        """Close the sub-envs (as ``SyncVectorEnv``), then the worker pool they share under ``isolation="process"``."""
        super().close_extras(**kwargs)
        if getattr(self, "_worker_pool", None) is not None:
            self._worker_pool.close()

    def _add_info(self, vector_infos: dict[str, Any], env_info: dict[str, Any], env_num: int) -> dict[str, Any]:
        """Gymnasium's info merging of one sub-env (``infos[key][i]`` plus the ``infos["_key"]`` mask), made safe
        for values whose type differs between sub-envs; :meth:`step` and :meth:`reset` merge all sub-envs at
        once with :func:`merge_infos` (same result), this stays for callers of the Gymnasium method.

        Gymnasium types a key's array by the first value it sees, so a reward component that is
        ``1.0`` in one sub-env and ``None`` (undefined, README "Design rules") in the next raises
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

    def _merge(self, entries: list[tuple[int, dict]]) -> dict[str, Any]:
        if self._typed:
            entries = [(i, typed_info(info)) for i, info in entries]
        return merge_infos(entries, self.num_envs)

    def _observe(self) -> Any:
        """The batched observations of ``self._env_obs`` (new objects: nothing later changes them)."""
        self._observations = self._batch_obs(self._env_obs, self._observations)
        return self._observations

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
                them, or a bad ``reset_mask`` / seed list. TypeError: a ``reset_mask`` that is not a bool
                numpy array (without a per-sub-env list, as ``SyncVectorEnv``). KeyError / IndexError: an
                unknown id or index. FileNotFoundError / DatabaseOpenError: a chosen sample's database is
                missing or unreadable; no sub-env is changed then (each keeps its episode and RNG).
        """
        options = dict(options or {})
        keys = [k for k in ("sample_ids", "indices") if k in options]
        if len(keys) > 1:
            raise ValueError("give either 'sample_ids' or 'indices' in reset options, not both")
        mask = options.pop("reset_mask", None)
        if mask is not None:
            _check_mask(mask, self.num_envs, strict_type=not keys)
        if not keys:
            seeds = _seed_list(seed, self.num_envs, check=False)
            chosen, sub = None, None
        else:
            chosen = options.pop(keys[0])
            if options:
                raise ValueError(f"reset options {sorted(options)} cannot be combined with {keys[0]!r}")
            if not isinstance(chosen, (list, tuple, np.ndarray)) or len(chosen) != self.num_envs:
                raise ValueError(f"reset option {keys[0]!r} needs a list of {self.num_envs} entries (one per sub-env), "
                                 f"got {type(chosen).__name__}")
            seeds = _seed_list(seed, self.num_envs, check=True)
            sub = "sample_id" if keys[0] == "sample_ids" else "index"
        todo = range(self.num_envs) if mask is None else np.flatnonzero(mask).tolist()
        if chosen is not None:
            for i in todo:  # every choice checked before any sub-env is reset
                pick = chosen[i]
                if pick is None:
                    continue
                if sub == "sample_id":
                    self.envs[i].sample_index(str(pick) if isinstance(pick, np.str_) else pick)
                elif isinstance(pick, bool) or not isinstance(pick, (int, np.integer)) or \
                        not 0 <= int(pick) < len(self.envs[i].samples):
                    raise IndexError(f"indices[{i}] = {pick!r} is not a sample index 0..{len(self.envs[i].samples) - 1}")
        entries = []
        undo = [(i, self.envs[i].snapshot(), self._env_obs[i], self._terminations[i], self._truncations[i],
                 self._autoreset_envs[i]) for i in todo]
        try:
            for i in todo:
                if chosen is None:
                    env_options = options or None
                else:
                    pick = chosen[i]
                    if isinstance(pick, np.generic):
                        pick = pick.item()
                    env_options = None if pick is None else {sub: pick}
                self._env_obs[i], info = self.envs[i].reset(seed=seeds[i], options=env_options)
                self._terminations[i] = self._truncations[i] = self._autoreset_envs[i] = False
                entries.append((i, info))
        except BaseException:
            # all or nothing, as a single env's reset: a sample whose database is missing puts
            # back the sub-envs already reset, episode and RNG
            for i, snap, obs, term, trunc, auto in undo:
                self.envs[i].restore(snap)
                self._env_obs[i], self._terminations[i], self._truncations[i], self._autoreset_envs[i] = \
                    obs, term, trunc, auto
            raise
        return self._observe(), self._merge(entries)

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
        (one per distinct simulator object, when ``set_attr`` gave sub-envs different ones), and all its
        feedback actions judged in one ``judge_many`` per judge (or one ``judge`` call each, for a judge
        without ``judge_many``).

        The feedback judgements go first, then the clarifications, then the other sub-envs step (or
        autoreset). A step that fails anywhere (the simulator, an FB judge, a scorer) changes no sub-env:
        each is put back as it was (:meth:`TextSQLClarifyEnv.snapshot`), so the step can be sent again or
        the env reset.

        Args:
            actions: one action string per sub-env: a list, tuple or 1-d array of ``num_envs`` items.
        Returns:
            ``(obs, rewards, terminated, truncated, infos)`` batched as ``SyncVectorEnv.step``.
        Raises:
            ValueError: ``actions`` is not a list, tuple or 1-d array, or holds not ``num_envs`` actions.
            RuntimeError: autoreset is disabled and a sub-env has ended (checked before any sub-env
                steps); a sub-env's step fails as :meth:`TextSQLClarifyEnv.step` does; the simulator
                returns a different number of replies than requests, or a judge's ``judge_many`` a different
                number of verdicts than feedbacks (the message names it).
            TypeError: a reply is not a ``UserReply`` (the message gives its position).
        """
        if isinstance(actions, np.ndarray) and actions.ndim == 1:
            acts = actions.tolist()
        elif isinstance(actions, (list, tuple)):
            acts = list(actions)
        else:
            raise ValueError(f"step needs a list, tuple or 1-d array of {self.num_envs} action strings "
                             f"(one per sub-env), got {type(actions).__name__}")
        n = self.num_envs
        if len(acts) != n:
            raise ValueError(f"step needs {n} actions (one per sub-env), got {len(acts)}")
        mode = self.autoreset_mode
        if mode == AutoresetMode.DISABLED and self._autoreset_envs.any():
            ended = np.flatnonzero(self._autoreset_envs).tolist()
            raise RuntimeError(f"sub-envs {ended} have ended and autoreset is disabled: reset them first "
                               f"(reset(options={{'reset_mask': ...}}))")
        resetting = self._autoreset_envs.tolist() if mode == AutoresetMode.NEXT_STEP else [False] * n
        same_step = mode == AutoresetMode.SAME_STEP
        envs = self.envs
        results: list[tuple | None] = [None] * n
        # each sub-env's state is saved just before the step first changes it (only resets draw from the RNG),
        # so that a failure anywhere puts every changed sub-env back; the last sub-env to step needs none
        # when it only begins a step, which undoes itself when it fails (TextSQLClarifyEnv.begin_step)
        snaps: list[tuple[TextSQLClarifyEnv, tuple]] = []
        judged: list[tuple[TextSQLClarifyEnv, Any]] = []
        groups: dict[int, list[tuple[int, UserRequest]]] = {}
        pending: list[tuple[int, UserRequest]] = []
        try:
            # 1. feedback judgements, one batch per judge; each judging sub-env gets its verdict
            self._prejudge(acts, resetting, judged)
            # 2. clarifications: begun, answered per simulator, and only then recorded
            for i in range(n):
                if not resetting[i] and envs[i].needs_reply(acts[i]):
                    snaps.append((envs[i], envs[i].snapshot(rng=False)))
                    pending.append((i, envs[i].begin_step(acts[i])))
            for i, req in pending:
                groups.setdefault(id(envs[i].simulator), []).append((i, req))
            replies: dict[int, Any] = {}
            for members in groups.values():
                sim = envs[members[0][0]].simulator
                for (i, _), reply in zip(members, fetch_replies(sim, [req for _, req in members])):
                    replies[i] = reply
            for i, _ in pending:
                results[i] = envs[i].complete_step(replies[i])
            # 3. every other sub-env: autoreset, or a step that needs no reply
            rest = [i for i in range(n) if results[i] is None]
            last = rest[-1] if rest else -1
            for i in rest:
                env = envs[i]
                if resetting[i]:
                    snaps.append((env, env.snapshot(rng=True)))
                    obs, info = env.reset()
                    results[i] = (obs, 0.0, False, False, info)
                else:
                    if i != last or same_step:  # a same-step autoreset after it may still fail
                        snaps.append((env, env.snapshot(rng=False)))
                    results[i] = env.begin_step(acts[i])
            # 4. same-step autoresets, inside the try: a reset that fails (a sample whose database is missing)
            # puts back every sub-env, those that already stepped too
            for i, res in enumerate(results) if same_step else ():
                if res[2] or res[3]:
                    snaps.append((envs[i], envs[i].snapshot(rng=True)))
                    obs, info = envs[i].reset()
                    results[i] = (obs, res[1], res[2], res[3], {"final_obs": res[0], "final_info": res[4], **info})
        except BaseException:
            for env, snap in reversed(snaps):  # a step that fails anywhere changes no sub-env
                env.restore(snap)
            raise
        finally:
            for env, judge in judged:
                env.feedback_judge = judge
        self.respond_calls += len(groups)
        self.requests_answered += len(pending)
        entries = []
        for i, (obs, reward, terminated, truncated, info) in enumerate(results):
            self._rewards[i] = reward
            self._terminations[i] = terminated
            self._truncations[i] = truncated
            self._env_obs[i] = obs
            entries.append((i, info))
        self._autoreset_envs = np.logical_or(self._terminations, self._truncations)
        return (self._observe(), self._rewards.copy(), self._terminations.copy(), self._truncations.copy(),
                self._merge(entries))

    def _prejudge(self, acts: list, resetting: list, judged: list) -> None:
        """Judge this step's feedback actions in one batch per judge and give each judging sub-env its verdict
        (a one-shot :class:`_Verdict` in place of its judge, which the caller puts back: ``judged`` gets the
        ``(env, judge)`` pairs). A sub-env whose judgement was not foreseen asks its own judge as usual."""
        asks: dict[int, list] = {}
        for i, env in enumerate(self.envs):
            if not resetting[i]:
                req = _judge_request(env, acts[i])
                if req is not None:
                    asks.setdefault(id(env.feedback_judge), []).append((env, req))
        for members in asks.values():
            judge = members[0][0].feedback_judge
            reqs = [req for _, req in members]
            many = getattr(judge, "judge_many", None)
            if callable(many):
                verdicts = list(many([r[0] for r in reqs], [r[1] for r in reqs], [r[2] for r in reqs]))
                if len(verdicts) != len(reqs):
                    raise RuntimeError(f"feedback judge {type(judge).__name__}.judge_many returned {len(verdicts)} "
                                       f"verdicts for {len(reqs)} feedbacks")
                self.judge_calls += 1
            else:
                verdicts = [judge.judge(*r) for r in reqs]
                self.judge_calls += len(reqs)
            self.feedbacks_judged += len(reqs)
            for (env, req), verdict in zip(members, verdicts):
                judged.append((env, judge))
                env.feedback_judge = _Verdict(judge, req, bool(verdict))


class _Verdict:
    """A judge standing in for ``inner`` during one vector step: the verdict made in the step's batch for
    ``(sample, feedback)``, once; any other call goes to ``inner``."""

    def __init__(self, inner: Any, request: tuple, verdict: bool):
        self.inner, self.request, self.verdict = inner, request, verdict

    def judge(self, sample: Sample, feedback: str, schema_identifiers: Any = ()) -> bool:
        """The batch's verdict for the foreseen ``(sample, feedback)``, else ``inner.judge(...)``."""
        req = self.request
        if req is not None and sample is req[0] and feedback == req[1]:
            self.request = None
            return self.verdict
        return self.inner.judge(sample, feedback, schema_identifiers)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _judge_request(env: TextSQLClarifyEnv, action: Any) -> tuple | None:
    """``(sample, feedback, schema_identifiers)`` when ``env.begin_step(action)`` will ask its FB judge (a
    well-formed feedback action on an unanswerable sample whose gold is not withheld, see
    ``TextSQLClarifyEnv._feedback``), else ``None``. Changes nothing (the parse is remembered for the step)."""
    s = env.current_sample
    if s is None or s.group != "unanswerable" or s.gold_withheld or env._done or env._pending is not None:
        return None
    act, error = env._parse(action)
    if error is not None or act.type != "feedback":
        return None
    return s, act.content, env._schema_ids


def _check_mask(mask: Any, n: int, *, strict_type: bool) -> None:
    """``reset_mask`` checks: a bool numpy array of shape ``(n,)`` with a True; ``strict_type`` raises
    ``TypeError`` for a wrong type or dtype (``SyncVectorEnv``'s errors), else ``ValueError``."""
    if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_:
        if strict_type:
            raise TypeError(f"`options['reset_mask']` must be a numpy array of dtype np.bool_, got {type(mask)}")
        raise ValueError(f"reset_mask must be a bool numpy array of shape ({n},)")
    if mask.shape != (n,):
        raise ValueError(f"reset_mask must be a bool numpy array of shape ({n},), got shape {mask.shape}")
    if not mask.any():
        raise ValueError("`options['reset_mask']` must contain at least one True value")


def _seed_list(seed: Any, n: int, *, check: bool) -> list:
    """One seed per sub-env from ``None``, an int (``seed + i``) or a list of ``n``; ``check`` also refuses
    entries that are neither ints nor ``None``."""
    if seed is None:
        return [None] * n
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        return [int(seed) + i for i in range(n)]
    seeds = list(seed)
    if len(seeds) != n:
        raise ValueError(f"seed needs one entry per sub-env ({n}), got {len(seeds)}")
    if check:
        for i, seed_i in enumerate(seeds):
            if seed_i is not None and (isinstance(seed_i, bool) or not isinstance(seed_i, (int, np.integer))):
                raise ValueError(f"seed {i} must be an int or None, got {seed_i!r}")
    return seeds


def _observation_batcher(space: Any, n: int):
    """A function ``(sub-env observations, previous batch) -> batch`` for ``space``: text fields as tuples
    of strings and ``Discrete`` counters as new ``int64`` arrays (what Gymnasium's ``concatenate`` gives,
    without its per-field dispatch and copies); Gymnasium's ``concatenate`` for any other space."""
    if isinstance(space, gym_spaces.Dict) and all(isinstance(sub, (gym_spaces.Text, gym_spaces.Discrete))
                                                   for sub in space.spaces.values()):
        plan = [(key, None if isinstance(sub, gym_spaces.Text) else sub.dtype) for key, sub in space.spaces.items()]

        def batch(items: list, _previous: Any) -> dict:
            out = {}
            for key, dtype in plan:
                if dtype is None:
                    out[key] = tuple([o[key] for o in items])
                else:
                    out[key] = np.fromiter([o[key] for o in items], dtype=dtype, count=n)
            return out

        return batch
    return lambda items, previous: concatenate(space, items, previous)


_SCALARS = (int, float, bool)


def merge_infos(entries: Sequence[tuple[int, dict]], num_envs: int) -> dict[str, Any]:
    """The vector info of sub-env infos, in Gymnasium's layout: ``infos[key]`` an array of ``num_envs``
    values and ``infos["_key"]`` the bool mask of the sub-envs that reported ``key``; a dict value merged
    recursively. One pass per key over the sub-envs (Gymnasium's ``_add_info`` types and fills
    value by value).

    Types, as :meth:`TextSQLClarifyVectorEnv._add_info` gives them sub-env by sub-env: the first reported
    value of a key decides (a Python ``int`` / ``float`` / ``bool`` or a numpy number: an array of that type,
    0 where unreported; a numpy array: a stacked array); a later value that does not fit that type unchanged
    (``None``, a ``float`` after an ``int``, a bool among numbers, :func:`_fits`) makes it an ``object`` array of
    the values as given, ``None`` where unreported; anything else (strings, ``None``, lists, objects) is an
    ``object`` array. ``final_obs`` is an ``object`` array of observation dicts; a key that is a dict in one
    sub-env and not in another is an ``object`` array with the dicts kept whole.

    Args:
        entries: ``(sub-env index, info dict)`` pairs, in sub-env order (a sub-env may be missing).
        num_envs: the vector env's number of sub-envs.
    Returns:
        The merged info dict (keys in order of first appearance, each followed by its ``_key`` mask).
    """
    if not entries:
        return {}
    if len(entries) == num_envs:
        first = entries[0][1]
        if num_envs == 1 or all(d.keys() == first.keys() for _, d in entries):
            return _merge_full([d for _, d in entries], num_envs)
    seen: dict[str, None] = {}
    for _, d in entries:
        seen.update(dict.fromkeys(d))
    out: dict[str, Any] = {}
    for key in seen:
        pairs = [(i, d[key]) for i, d in entries if key in d]
        idx = [i for i, _ in pairs]
        mask = np.zeros(num_envs, dtype=np.bool_)
        mask[idx] = True
        out[key] = _merge_values(key, [v for _, v in pairs], idx, num_envs)
        out[f"_{key}"] = mask
    return out


_DTYPES = {float: np.dtype(np.float64), int: np.dtype(np.int64), bool: np.dtype(np.bool_)}


_MASK_KEYS: dict[str, str] = {}


def _merge_full(dicts: list[dict], n: int) -> dict[str, Any]:
    """:func:`merge_infos` of ``n`` dicts with the same keys, one per sub-env: the common case, kept cheap.
    The leaves of one type (``float``, ``int``, ``bool``, objects) and the masks are filled into one 2-d
    array each; every key gets its own row (a view: no two keys share memory)."""
    floats: list = []
    others: list = []  # (dest, key, values, dtype or None for object)
    masks: list = []
    out = _walk(dicts, n, floats, others, masks)
    if floats:
        block = np.array([v for _, _, vals in floats for v in vals], dtype=np.float64).reshape(len(floats), n)
        for (dest, key, _), row in zip(floats, block):  # iterating the block makes its row views in C
            dest[key] = row
    objects = [leaf for leaf in others if leaf[3] is None]
    if objects:
        block = np.empty((len(objects), n), dtype=object)
        for (dest, key, vals, _), row in zip(objects, block):
            for i, v in enumerate(vals):
                row[i] = v
            dest[key] = row
    for dest, key, vals, dtype in others:
        if dtype is not None:
            dest[key] = np.array(vals, dtype=dtype)
    block = np.empty((len(masks), n), dtype=np.bool_)
    block.fill(True)
    for (dest, key), row in zip(masks, block):
        dest[key] = row
    return out


def _walk(dicts: list[dict], n: int, floats: list, others: list, masks: list) -> dict[str, Any]:
    """The output skeleton of :func:`_merge_full`; typed and object leaves are queued for it."""
    d0 = dicts[0]
    one = n == 1
    out: dict[str, Any] = {}
    for key, v0 in d0.items():
        vals = (v0,) if one else [d[key] for d in dicts]
        t0 = type(v0)
        mkey = _MASK_KEYS.get(key)
        if mkey is None:
            mkey = _MASK_KEYS.setdefault(key, "_" + key) if len(_MASK_KEYS) < 65536 else "_" + key
        out[key] = out[mkey] = None  # placeholders keep Gymnasium's key order: key, then its mask
        masks.append((out, mkey))
        if t0 is float:
            if one or all(type(v) is float for v in vals):
                floats.append((out, key, vals))
            else:
                out[key] = _merge_values(key, list(vals), None, n)
        elif t0 is int or t0 is bool:
            if one or all(type(v) is t0 for v in vals):
                others.append((out, key, vals, _DTYPES[t0]))
            else:
                out[key] = _merge_values(key, list(vals), None, n)
        elif t0 is dict and key != "final_obs":
            out[key] = _walk(vals, n, floats, others, masks) if one or all(
                type(v) is dict and v.keys() == v0.keys() for v in vals) else _merge_values(key, list(vals), None, n)
        elif t0 is dict or isinstance(v0, (dict, np.ndarray, np.number)):
            out[key] = _merge_values(key, list(vals), None, n)
        else:  # strings, None, lists, objects: the first value makes it an object array, whatever follows
            others.append((out, key, vals, None))
    return out


def _merge_values(key: str, vals: list, idx: list | None, n: int) -> Any:
    """One key's merged array (or nested dict) for the values ``vals`` of sub-envs ``idx`` (``None``: all)."""
    v0 = vals[0]
    t0 = type(v0)
    if key != "final_obs":
        if t0 is dict or isinstance(v0, dict):
            if all(isinstance(v, dict) for v in vals):
                return merge_infos(list(zip(range(n) if idx is None else idx, vals)), n)
        elif t0 in _SCALARS or isinstance(v0, np.number):
            dtype = np.dtype(t0)
            if all(type(v) is t0 for v in vals) or all(_fits(v, dtype) for v in vals):
                if idx is None:
                    return np.array(vals, dtype=dtype)
                arr = np.zeros(n, dtype=dtype)
                arr[idx] = vals
                return arr
        elif isinstance(v0, np.ndarray):
            if all(isinstance(v, np.ndarray) and v.shape == v0.shape and np.can_cast(v.dtype, v0.dtype, "safe")
                   for v in vals):
                arr = np.zeros((n, *v0.shape), dtype=v0.dtype)
                for i, v in zip(range(n) if idx is None else idx, vals):
                    arr[i] = v
                return arr
    arr = np.full(n, None, dtype=object)
    for i, v in zip(range(n) if idx is None else idx, vals):
        arr[i] = v
    return arr


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
