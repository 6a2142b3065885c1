"""A compact async vector env: Gymnasium's ``AsyncVectorEnv`` with a worker that sends each step's info as
arrays and a parent that merges them by plan, not key by key
(``docs/platform.md`` "Compact async").

Gymnasium's ``AsyncVectorEnv`` pickles each sub-env's whole ``info`` dict, then merges it key by key in the
parent (``VectorEnv._add_info``: a new array and mask per key and sub-env, recursing into nested dicts), and
deep-copies the observations. On an EX-only Spider step that parent work alone costs more than the step.
:class:`TextSQLClarifyAsyncVectorEnv` keeps Gymnasium's processes, pipes, shared-memory observations,
autoreset modes, errors and ``call``/``get_attr``/``set_attr``, and changes only the payload:

* the worker (:func:`compact_worker`) flattens the info into a *schema* (the key paths in order, each with
  its kind: ``float``, ``int``, ``bool``, ``array``, ``object`` or a nested ``dict``), one ``float64``
  buffer of the float leaves and a tuple of the other leaves. A schema is sent once per worker and then
  named by a small int;
* the parent builds, once per combination of the sub-envs' schemas, a plan that reproduces
  ``_add_info``'s result (key order, dtypes, ``_key`` masks, nested dicts); each step then fills one
  ``(keys, num_envs)`` matrix per dtype and hands out its rows. Where the sub-envs disagree on a key's kind
  (never with the env's typed infos) it merges with Gymnasium's own ``_add_info``;
* observations still travel through shared memory, but a worker writes only the text fields whose string
  changed (the schema, question and evidence stay for the whole episode) and says which; the parent decodes
  only those and keeps the others' strings. ``copy=True`` then gives a tuple of strings per text field and a
  new array per counter (what ``deepcopy`` gave) without decoding every field of every sub-env each step.

The results are those of Gymnasium's ``AsyncVectorEnv`` over the same sub-envs (``tests/test_async_vector.py``).
Build it with :func:`make_async_vector_env` or ``gym.make_vec("TextSQLClarify-v0", num_envs=N,
processes=True)`` (the registered ``vector_entry_point``, :func:`vector_entry_point`). ``docs/platform.md``
("Vector and async envs", "Compact async") says when it pays.
"""
from __future__ import annotations

import functools
import multiprocessing
import signal
import sys
import traceback
from typing import Any

import numpy as np
from gymnasium.vector import AsyncVectorEnv
from gymnasium.vector.async_vector_env import AsyncState
from gymnasium.vector.utils import concatenate, write_to_shared_memory
from gymnasium.vector.vector_env import AutoresetMode

from ..errors import TextSQLClarifyError

__all__ = ["TextSQLClarifyAsyncVectorEnv", "WorkerDiedError", "compact_worker", "flatten_info",
           "make_async_vector_env", "vector_entry_point"]

class WorkerDiedError(TextSQLClarifyError, RuntimeError):
    """A worker process of :class:`TextSQLClarifyAsyncVectorEnv` is gone (killed by a signal, or exited) while the
    parent sent it a command or waited for its reply; Gymnasium's own path only sees a bare ``BrokenPipeError`` or
    ``EOFError`` of the pipe. The vector env cannot go on (the sub-env's state died with it): ``close()`` it, which
    then returns cleanly, and build a new one.

    Attributes:
        index: the sub-env's index (0-based, its position in ``env_fns``).
        name: the worker process's name (``Worker<TextSQLClarifyAsyncVectorEnv>-<index>``).
        pid: its process id.
        exitcode: ``multiprocessing``'s exit code: ``-N`` for signal N, the exit status otherwise, ``None`` where
            the process is still there but its pipe is closed.
    Source: Python ``multiprocessing.Process.exitcode`` docs; gymnasium 1.4 ``AsyncVectorEnv``.
    """

    def __init__(self, index: int, name: str, pid: int | None, exitcode: int | None):
        self.index, self.name, self.pid, self.exitcode = index, name, pid, exitcode
        if exitcode is None:
            how = "closed its pipe but has not exited"
        elif exitcode < 0:
            try:
                sig = signal.Signals(-exitcode).name
            except ValueError:
                sig = f"signal {-exitcode}"
            how = f"was killed by {sig} (exit code {exitcode})"
        else:
            how = f"exited with code {exitcode}"
        super().__init__(f"worker {name} (pid {pid}) of sub-env {index} {how}; the vector env cannot continue: "
                         f"close() it and make a new one")


class _WorkerPipe:
    """The parent's end of one worker's pipe: ``send`` / ``recv`` / ``poll`` / ``close`` of the
    ``multiprocessing`` connection, where a broken pipe, a reset connection or an end of file (the worker is gone)
    becomes :class:`WorkerDiedError` naming the worker; after that every use raises it again and ``closed`` is true
    (so Gymnasium's ``close_extras`` skips it)."""

    def __init__(self, conn: Any, env: "TextSQLClarifyAsyncVectorEnv", index: int):
        self._conn, self._env, self._index = conn, env, index
        self.dead: WorkerDiedError | None = None

    @property
    def closed(self) -> bool:
        return self.dead is not None or self._conn.closed

    def _died(self, cause: BaseException) -> WorkerDiedError:
        if self.dead is None:
            self.dead = self._env._worker_died(self._index)
            self._conn.close()
        return self.dead

    def send(self, obj: Any) -> None:
        if self.dead is not None:
            raise self.dead
        try:
            self._conn.send(obj)
        except (BrokenPipeError, ConnectionResetError, EOFError) as e:
            raise self._died(e) from e

    def recv(self) -> Any:
        if self.dead is not None:
            raise self.dead
        try:
            return self._conn.recv()
        except (EOFError, ConnectionResetError, BrokenPipeError) as e:
            raise self._died(e) from e

    def poll(self, timeout: float | None = 0.0) -> bool:
        if self.dead is not None:
            return True  # readable: the next recv says why
        try:
            return self._conn.poll(timeout)
        except (EOFError, ConnectionResetError, BrokenPipeError):
            return True

    def close(self) -> None:
        self._conn.close()


# leaf kinds of a schema entry; "d" marks a nested dict (its children follow, one level deeper)
_FLOAT, _INT, _BOOL, _ARRAY, _OBJECT, _DICT = "f", "i", "b", "a", "o", "d"


def _walk(info: dict, prefix: tuple, schema: list, floats: list, others: list) -> None:
    for key, value in info.items():
        path = prefix + (key,)
        t = type(value)
        if key == "final_obs":  # Gymnasium's _add_info: an object array whatever the value (before the dict case)
            schema.append((path, _OBJECT))
            others.append(value)
        elif t is float:
            schema.append((path, _FLOAT))
            floats.append(value)
        elif t is dict:
            schema.append((path, _DICT))
            _walk(value, path, schema, floats, others)
        elif t is int:
            schema.append((path, _INT))
            others.append(value)
        elif t is bool:
            schema.append((path, _BOOL))
            others.append(value)
        elif isinstance(value, dict):
            schema.append((path, _DICT))
            _walk(value, path, schema, floats, others)
        elif isinstance(value, (np.ndarray, np.number)):  # typed as Gymnasium does, in the parent
            schema.append((path, _ARRAY))
            others.append(value)
        else:
            schema.append((path, _OBJECT))
            others.append(value)


def flatten_info(info: dict[str, Any]) -> tuple[tuple, np.ndarray, tuple]:
    """``(schema, floats, others)`` of one info dict, the compact payload of :func:`compact_worker`.

    Args:
        info: a sub-env's info (any nesting of dicts).
    Returns:
        ``schema``: a tuple of ``(key path, kind)`` in the dict's order (a nested dict's entry before its
        keys); ``floats``: the ``float`` leaves as one ``float64`` array; ``others``: the other leaves, in order.
    """
    schema: list = []
    floats: list = []
    others: list = []
    _walk(info, (), schema, floats, others)
    return tuple(schema), np.array(floats, dtype=np.float64), tuple(others)


def _writer(space: Any):
    """A function ``write(index, observation, shared_memory) -> changed`` for the worker: for the env's ``Dict``
    space it writes the counters and only the text fields whose string changed since its last write, and
    returns those fields' names (the parent decodes only them again); for any other space it writes all and
    returns ``None``."""
    from gymnasium import spaces

    from .spaces import UnicodeText

    if not isinstance(space, spaces.Dict):
        def write_all(index: int, observation: Any, shared_memory: Any) -> None:
            write_to_shared_memory(space, index, observation, shared_memory)
        return write_all
    texts = [k for k, sub in space.spaces.items() if isinstance(sub, UnicodeText)]
    rest = [k for k in space.spaces if k not in texts]
    last: dict[str, str] = {}

    def write(index: int, observation: dict, shared_memory: Any) -> tuple:
        changed = []
        for key in texts:
            value = observation[key]
            old = last.get(key)
            if old is None or (value is not old and value != old):
                write_to_shared_memory(space[key], index, value, shared_memory[key])
                last[key] = value
                changed.append(key)
        for key in rest:
            write_to_shared_memory(space[key], index, observation[key], shared_memory[key])
        return tuple(changed)
    return write


class _Encoder:
    """Per worker: schema -> small int, the schema itself sent only the first time."""

    def __init__(self):
        self.ids: dict[tuple, int] = {}

    def __call__(self, info: dict) -> tuple:
        schema, floats, others = flatten_info(info)
        sid = self.ids.get(schema)
        if sid is None:
            sid = self.ids[schema] = len(self.ids)
            return sid, schema, floats.tobytes(), others
        return sid, None, floats.tobytes(), others


def compact_worker(index: int, env_fn: Any, pipe: Any, parent_pipe: Any, shared_memory: Any, error_queue: Any,
                   autoreset_mode: AutoresetMode, semaphore: Any) -> None:
    """The worker process of :class:`TextSQLClarifyAsyncVectorEnv`: Gymnasium's ``_async_worker`` (the same
    commands, autoreset modes and error reporting; gymnasium 1.4) with compact results: a reset sends
    ``(obs or None, info payload)``, a step ``(obs or None, reward, terminated, truncated, info payload)``,
    the payload from :class:`_Encoder` (schema id, the schema the first time, float bytes, other leaves), then
    (with shared memory) the text fields written again (:func:`_writer`; ``None``: a space other than the env's)."""
    env = env_fn()
    observation_space, action_space = env.observation_space, env.action_space
    autoreset, observation, encode, changed = False, None, _Encoder(), None
    write = _writer(observation_space) if shared_memory else None
    parent_pipe.close()
    try:
        while True:
            command, data = pipe.recv()
            permit_held = semaphore is not None and command in ("reset", "step")
            if permit_held:
                semaphore.acquire()
            try:
                if command == "reset":
                    observation, info = env.reset(**data)
                    if shared_memory:
                        changed = write(index, observation, shared_memory)
                        observation = None
                        autoreset = False
                    if permit_held:
                        permit_held = False
                        semaphore.release()
                    pipe.send(((observation, encode(info), changed), True))
                elif command == "reset-noop":
                    pipe.send(((observation, encode({}), ()), True))
                elif command == "step":
                    if autoreset_mode == AutoresetMode.NEXT_STEP:
                        if autoreset:
                            observation, info = env.reset()
                            reward, terminated, truncated = 0, False, False
                        else:
                            observation, reward, terminated, truncated, info = env.step(data)
                        autoreset = terminated or truncated
                    elif autoreset_mode == AutoresetMode.SAME_STEP:
                        observation, reward, terminated, truncated, info = env.step(data)
                        if terminated or truncated:
                            reset_observation, reset_info = env.reset()
                            info = {"final_info": info, "final_obs": observation, **reset_info}
                            observation = reset_observation
                    elif autoreset_mode == AutoresetMode.DISABLED:
                        assert autoreset is False
                        observation, reward, terminated, truncated, info = env.step(data)
                    else:
                        raise ValueError(f"Unexpected autoreset_mode: {autoreset_mode}")
                    if shared_memory:
                        changed = write(index, observation, shared_memory)
                        observation = None
                    if permit_held:
                        permit_held = False
                        semaphore.release()
                    pipe.send(((observation, reward, terminated, truncated, encode(info), changed), True))
                elif command == "close":
                    pipe.send((None, True))
                    break
                elif command == "_call":
                    name, args, kwargs = data
                    if name in ["reset", "step", "close", "_setattr", "_check_spaces"]:
                        raise ValueError(f"Trying to call function `{name}` with `call`, use `{name}` directly "
                                         "instead.")
                    attr = env.get_wrapper_attr(name)
                    pipe.send((attr(*args, **kwargs) if callable(attr) else attr, True))
                elif command == "_setattr":
                    name, value = data
                    env.set_wrapper_attr(name, value)
                    pipe.send((None, True))
                elif command == "_check_spaces":
                    from gymnasium.spaces.utils import is_space_dtype_shape_equiv

                    obs_mode, single_obs_space, single_action_space = data
                    same_obs = (single_obs_space == observation_space if obs_mode == "same"
                                else is_space_dtype_shape_equiv(single_obs_space, observation_space))
                    pipe.send(((same_obs, single_action_space == action_space), True))
                else:
                    raise RuntimeError(f"Received unknown command `{command}`.")
            finally:
                if permit_held:
                    semaphore.release()
    except (KeyboardInterrupt, Exception):
        error_type, error_message, _ = sys.exc_info()
        error_queue.put((index, error_type, error_message, traceback.format_exc()))
        pipe.send((None, False))
    finally:
        env.close()


class _Plan:
    """How to build the merged info of one combination of sub-env schemas (``_add_info``'s result).

    ``nodes``: ``(parent dict index, key, kind, slot)`` in Gymnasium's insertion order (``slot``: the row in
    the kind's matrix, or a nested dict's index); ``counts``: rows per kind; ``sources[e]``: per kind, the rows
    sub-env ``e``'s leaves go to (in its schema order); ``mask``: ``(nodes, num_envs)``, who reported what;
    ``ok``: False where a key has two kinds (the caller merges with ``_add_info``)."""

    def __init__(self, schemas: list[tuple], n: int):
        index: dict[tuple, tuple] = {}   # path -> (kind, row or dict index)
        counts = {_FLOAT: 0, _INT: 0, _BOOL: 0, _ARRAY: 0, _OBJECT: 0}
        self.nodes: list[tuple] = []
        self.dicts = 1  # dict 0 is the top level
        self.mask = None
        masks: list[list[int]] = []  # node -> envs reporting it
        self.sources: list[dict[str, list[int]]] = []
        self.ok = True
        for e, schema in enumerate(schemas):
            src: dict[str, list[int]] = {_FLOAT: [], _INT: [], _BOOL: [], _ARRAY: [], _OBJECT: []}
            for path, kind in schema:
                have = index.get(path)
                if have is None:
                    parent = 0 if len(path) == 1 else index.get(path[:-1], (None, None, None))[1]
                    if kind == _DICT:
                        slot, self.dicts = self.dicts, self.dicts + 1
                    else:
                        slot, counts[kind] = counts[kind], counts[kind] + 1
                    have = index[path] = (kind, slot, len(self.nodes))
                    self.nodes.append((parent, path[-1], kind, slot))
                    masks.append([])
                elif have[0] != kind:
                    self.ok = False  # a key of two kinds: Gymnasium's _add_info decides
                    return
                masks[have[2]].append(e)
                if kind != _DICT:
                    src[kind].append(have[1])
            self.sources.append({k: np.array(v, dtype=np.intp) for k, v in src.items()})
        self.counts = counts
        self.mask = np.zeros((len(self.nodes), n), dtype=np.bool_)
        for j, envs in enumerate(masks):
            self.mask[j, envs] = True


class TextSQLClarifyAsyncVectorEnv(AsyncVectorEnv):
    """Gymnasium's ``AsyncVectorEnv`` with :func:`compact_worker` and a merge by plan (see the module doc).

    Args:
        env_fns, shared_memory, copy, context, daemon, observation_mode, autoreset_mode, max_concurrency: as
            ``gymnasium.vector.AsyncVectorEnv`` (gymnasium 1.4); ``worker`` is always :func:`compact_worker`.
    A worker that dies (a signal such as SIGKILL from the OOM killer, a native crash) is reported as
    :class:`WorkerDiedError` naming the worker, its pid, its exit signal or code and the sub-env index, on the call
    that meets it and on every later call; ``close()`` then returns cleanly (the live workers are closed, the dead
    one is reaped).

    Raises:
        As ``AsyncVectorEnv``; :class:`~textsql_clarify.errors.TextSQLClarifyError` if ``worker`` is given;
        :class:`WorkerDiedError` as above.
    """

    def __init__(self, env_fns: Any, **kwargs: Any):
        if kwargs.get("worker") is not None:
            raise TextSQLClarifyError("TextSQLClarifyAsyncVectorEnv uses its own worker (compact_worker)")
        kwargs["worker"] = compact_worker
        self._schemas: list[dict[int, tuple]] = [{} for _ in env_fns]
        self._plans: dict[tuple, _Plan] = {}
        #: per sub-env, the strings of its text fields as last written to shared memory (decoded once each)
        self._texts: list[dict[str, str]] = [{} for _ in env_fns]
        super().__init__(env_fns, **kwargs)

    # ----------------------------------------------------------------------------------- dead workers
    def _check_spaces(self):
        """Gymnasium's first exchange with the workers (end of ``__init__``): the pipes are wrapped first, so a
        worker that dies at start is named too."""
        self.parent_pipes = [p if p is None or isinstance(p, _WorkerPipe) else _WorkerPipe(p, self, i)
                             for i, p in enumerate(self.parent_pipes)]
        return super()._check_spaces()

    def _worker_died(self, index: int) -> WorkerDiedError:
        """The error for worker ``index``, whose pipe broke: its exit code once the process is reaped (an end of
        file comes as the process exits, so the wait is short)."""
        process = self.processes[index]
        process.join(5.0)
        self._state = AsyncState.DEFAULT  # no reply of the pending call will come
        return WorkerDiedError(index, process.name, process.pid, process.exitcode)

    def _poll_pipe_envs(self, timeout: float | None = None) -> bool:
        """As Gymnasium's, but a dead worker's pipe raises :class:`WorkerDiedError` instead of reading as a
        time-out."""
        for pipe in self.parent_pipes:
            if isinstance(pipe, _WorkerPipe) and pipe.dead is not None:
                raise pipe.dead
        return super()._poll_pipe_envs(timeout)

    def close_extras(self, timeout: float | None = None, terminate: bool = False) -> None:
        """As ``AsyncVectorEnv.close_extras``; where a worker is dead (seen before, found now, or met while closing)
        the live workers are terminated (SIGTERM, Gymnasium's ``terminate=True`` path) and every process is reaped,
        and nothing is raised."""
        gone = [i for i, p in enumerate(self.parent_pipes) if isinstance(p, _WorkerPipe)
                and (p.dead is not None or not self.processes[i].is_alive())]
        if not gone:
            try:
                super().close_extras(timeout=timeout, terminate=terminate)
                return
            except WorkerDiedError:  # a worker died while closing
                pass
        for pipe in self.parent_pipes:
            if pipe is not None:
                pipe.close()
        for process in self.processes:
            if process.is_alive():
                process.terminate()
        for process in self.processes:
            process.join()

    # ----------------------------------------------------------------------------------- merging
    def _decode(self, payloads: list[tuple]) -> dict[str, Any]:
        key = []
        for e, (sid, schema, _, _) in enumerate(payloads):
            if schema is not None:
                self._schemas[e][sid] = schema
            key.append(sid)
        key = tuple(key)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = _Plan([self._schemas[e][sid] for e, sid in enumerate(key)], self.num_envs)
        if not plan.ok:
            infos: dict = {}
            for e, payload in enumerate(payloads):
                infos = self._add_info(infos, self._rebuild(e, payload), e)
            return infos
        return self._merge(plan, payloads)

    def _rebuild(self, e: int, payload: tuple) -> dict:
        """One sub-env's info dict again, from its payload (the fallback merge)."""
        sid, _, fbytes, others = payload
        floats, others = iter(np.frombuffer(fbytes).tolist()), iter(others)
        out: dict = {}
        dicts = {(): out}
        for path, kind in self._schemas[e][sid]:
            parent = dicts[path[:-1]]
            if kind == _DICT:
                parent[path[-1]] = dicts[path] = {}
            else:
                parent[path[-1]] = next(floats) if kind == _FLOAT else next(others)
        return out

    def _merge(self, plan: _Plan, payloads: list[tuple]) -> dict[str, Any]:
        n, counts = self.num_envs, plan.counts
        fmat = np.zeros((counts[_FLOAT], n)) if counts[_FLOAT] else None
        imat = np.zeros((counts[_INT], n), dtype=np.int64) if counts[_INT] else None
        bmat = np.zeros((counts[_BOOL], n), dtype=np.bool_) if counts[_BOOL] else None
        omat = np.full((counts[_OBJECT], n), None, dtype=object) if counts[_OBJECT] else None
        arrays: list = [None] * counts[_ARRAY]
        for e, (_, _, fbytes, others) in enumerate(payloads):
            src = plan.sources[e]
            if fmat is not None and len(src[_FLOAT]):
                fmat[src[_FLOAT], e] = np.frombuffer(fbytes)
            it = iter(others)
            # the other leaves come in schema order; split them by kind (rows are in that order per kind)
            ii = bi = ai = oi = 0
            kinds = self._kinds(e, payloads[e][0])
            for kind in kinds:
                value = next(it)
                if kind == _INT:
                    imat[src[_INT][ii], e] = value
                    ii += 1
                elif kind == _BOOL:
                    bmat[src[_BOOL][bi], e] = value
                    bi += 1
                elif kind == _OBJECT:
                    omat[src[_OBJECT][oi], e] = value
                    oi += 1
                else:
                    row = src[_ARRAY][ai]
                    ai += 1
                    if arrays[row] is None:  # typed by the first sub-env reporting it, as _add_info
                        arrays[row] = (np.zeros((n, *value.shape), dtype=value.dtype) if isinstance(value, np.ndarray)
                                       else np.zeros(n, dtype=type(value)))
                    arrays[row][e] = value
        mats = {_FLOAT: fmat, _INT: imat, _BOOL: bmat, _OBJECT: omat}
        mask = plan.mask.copy()
        dicts: list = [None] * plan.dicts
        dicts[0] = {}
        for j, (parent, key, kind, slot) in enumerate(plan.nodes):
            if kind == _DICT:
                value = dicts[slot] = {}
            elif kind == _ARRAY:
                value = arrays[slot]
            else:
                value = mats[kind][slot]
            target = dicts[parent]
            target[key] = value
            target["_" + key] = mask[j]
        return dicts[0]

    def _kinds(self, e: int, sid: int) -> tuple:
        """The kinds of env ``e``'s non-float leaves under schema ``sid`` (cached)."""
        cache = self.__dict__.setdefault("_kind_cache", {})
        got = cache.get((e, sid))
        if got is None:
            got = cache[(e, sid)] = tuple(k for _, k in self._schemas[e][sid] if k not in (_FLOAT, _DICT))
        return got

    def _observe(self, changed: Any = None) -> Any:
        obs = self.observations
        if not self.copy:
            return obs
        if self.shared_memory and changed is not None and None not in changed:
            # decode only the text fields a worker wrote again; the others are the strings decoded before
            for e, fields in enumerate(changed):
                texts = self._texts[e]
                for key in fields:
                    texts[key] = obs[key][e]
            texts, n = self._texts, self.num_envs
            return {k: v.copy() if isinstance(v, np.ndarray) else tuple([texts[e].get(k, "") for e in range(n)])
                    for k, v in obs.items()}
        if not self.copy:
            return obs
        if isinstance(obs, dict):  # the env's Dict space: a frozen tuple per text field, a new array per counter
            return {k: v.copy() if isinstance(v, np.ndarray) else tuple(v) for k, v in obs.items()}
        from copy import deepcopy

        return deepcopy(obs)

    # ----------------------------------------------------------------------------------- Gymnasium's waits
    def reset_wait(self, timeout: float | None = None):
        """As ``AsyncVectorEnv.reset_wait``, with the compact infos (same results)."""
        self._assert_is_running()
        if self._state != AsyncState.WAITING_RESET:
            from gymnasium.error import NoAsyncCallError

            raise NoAsyncCallError("Calling `reset_wait` without any prior call to `reset_async`.",
                                   AsyncState.WAITING_RESET.value)
        if not self._poll_pipe_envs(timeout):
            self._state = AsyncState.DEFAULT
            raise multiprocessing.TimeoutError(f"The call to `reset_wait` has timed out after {timeout} second(s).")
        results, successes = zip(*[pipe.recv() for pipe in self.parent_pipes], strict=True)
        self._raise_if_errors(successes)
        observations, payloads, changed = zip(*results, strict=True)
        infos = self._decode(list(payloads))
        if not self.shared_memory:
            self.observations = concatenate(self.single_observation_space, observations, self.observations)
        self._state = AsyncState.DEFAULT
        return self._observe(changed), infos

    def step_wait(self, timeout: float | None = None):
        """As ``AsyncVectorEnv.step_wait``, with the compact infos (same results)."""
        self._assert_is_running()
        if self._state != AsyncState.WAITING_STEP:
            from gymnasium.error import NoAsyncCallError

            raise NoAsyncCallError("Calling `step_wait` without any prior call to `step_async`.",
                                   AsyncState.WAITING_STEP.value)
        if not self._poll_pipe_envs(timeout):
            self._state = AsyncState.DEFAULT
            raise multiprocessing.TimeoutError(f"The call to `step_wait` has timed out after {timeout} second(s).")
        results, successes = zip(*[pipe.recv() for pipe in self.parent_pipes], strict=True)
        self._raise_if_errors(successes)
        observations, rewards, terminations, truncations, payloads, changed = zip(*results, strict=True)
        infos = self._decode(list(payloads))
        if not self.shared_memory:
            self.observations = concatenate(self.single_observation_space, observations, self.observations)
        self._state = AsyncState.DEFAULT
        return (self._observe(changed), np.array(rewards, dtype=np.float64), np.array(terminations, dtype=np.bool_),
                np.array(truncations, dtype=np.bool_), infos)


def make_async_vector_env(num_envs: int = 1, *, vector_kwargs: dict | None = None, **env_kwargs: Any):
    """``num_envs`` ``gym.make("TextSQLClarify-v0", **env_kwargs)`` sub-envs, one worker process each, in a
    :class:`TextSQLClarifyAsyncVectorEnv` (what ``gym.make_vec(..., vectorization_mode="async")`` builds,
    with the compact worker and merge).

    Args:
        num_envs: number of sub-envs and worker processes (>= 1).
        vector_kwargs: ``AsyncVectorEnv`` options (``shared_memory``, ``copy``, ``context``, ``autoreset_mode``,
            ``max_concurrency`` ...).
        env_kwargs: the env's options (``info_format`` defaults to ``"auto"``: typed inside the workers).
    Raises:
        ValueError: ``num_envs`` below 1.
    """
    import gymnasium as gym

    from .. import ENV_ID

    if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
        raise ValueError(f"num_envs must be an int >= 1, got {num_envs!r}")
    env_fn = functools.partial(gym.make, ENV_ID, **env_kwargs)
    return TextSQLClarifyAsyncVectorEnv([env_fn] * int(num_envs), **(vector_kwargs or {}))


def vector_entry_point(num_envs: int = 1, *, processes: bool = False, async_options: dict | None = None,
                       **kwargs: Any):
    """The registration's ``vector_entry_point``: what ``gym.make_vec("TextSQLClarify-v0", num_envs=N, **kwargs)``
    builds (``vectorization_mode`` unset or ``"vector_entry_point"``).

    Args:
        num_envs: number of sub-envs (>= 1).
        processes: ``False`` (default): the batching in-process
            :class:`~textsql_clarify.envs.vector.TextSQLClarifyVectorEnv`; ``True``: one worker process per
            sub-env, :class:`TextSQLClarifyAsyncVectorEnv` (the compact async path).
        async_options: with ``processes=True``, ``AsyncVectorEnv`` options (``shared_memory``, ``copy``,
            ``context``, ``autoreset_mode``, ``max_concurrency`` ...); ``make_vec`` keeps its own ``vector_kwargs``
            for the ``"sync"``/``"async"`` modes.
        kwargs: the env's options (and the vector env's, e.g. ``autoreset_mode`` for the in-process one).
    Raises:
        ValueError: ``num_envs`` below 1, or ``async_options`` without ``processes=True``.
    """
    if not processes:
        if async_options:
            raise ValueError("async_options needs processes=True")
        from .vector import TextSQLClarifyVectorEnv

        return TextSQLClarifyVectorEnv(num_envs, **kwargs)
    return make_async_vector_env(num_envs, vector_kwargs=async_options, **kwargs)
