"""The env as an OpenEnv environment: a server that trainers speaking OpenEnv (TRL, SkyRL, ...) drive,
and the client that talks to it.

API (``pip install textsql-clarify[openenv]``, openenv-core 0.3):

* :class:`TextSQLClarifyEnvironment`: an ``openenv.core.Environment`` over one
  :class:`~textsql_clarify.envs.env.TextSQLClarifyEnv`. ``reset(seed=, episode_id=, sample_id=, index=)``
  and ``step(TextSQLClarifyAction(action="<clarify>...</clarify>"))`` return a
  :class:`TextSQLClarifyObservation`; ``state`` is a :class:`TextSQLClarifyState`.
* :func:`make_app(dataset, **env_kwargs) <make_app>`: the FastAPI app of OpenEnv's own
  ``create_app`` (routes ``/ws``, ``/reset``, ``/step``, ``/state``, ``/schema``, ``/health``); every
  WebSocket session gets its own environment, all sharing one sample list, one simulated user and
  one FB judge. Only the calls into that simulated user and that judge are serialised (one lock each);
  SQL runs in each session's own thread on the session's own read-only connection
  (``sql_connection="private"``, :mod:`textsql_clarify.sql.private`), so a slow query holds up no other
  session's step, on any database. A client that leaves mid-step has its SQL interrupted and its slot
  freed at once, and a disconnect logs no traceback (:mod:`.ws_sessions`).
* Errors: bad reset arguments raise :class:`ResetArgumentError` (a ``ValueError``),
  :class:`UnknownSampleError` (``KeyError``) or :class:`SampleIndexError` (``IndexError``); a step
  without a running episode raises :class:`NoEpisodeError` (``RuntimeError``). All are
  :class:`RequestError`: the WebSocket answers them with an OpenEnv error message, the HTTP routes
  with 400 (reset) or 409 (step) and ``{"detail": message}``. A reset that fails changes nothing: the
  previous episode (env and state) stays as it was.
* :class:`TextSQLClarifyClient`: an ``openenv.core.EnvClient`` for that server (async;
  ``.sync()`` gives the blocking wrapper). ``client.reset(sample_id=...)``,
  ``client.step("<sql>...</sql>")`` (a string or a :class:`TextSQLClarifyAction`), ``client.state()``.
* CLI: ``python -m textsql_clarify.integrations.openenv_server --dataset embedded --host 127.0.0.1
  --port 8000`` (uvicorn).

Protocol (OpenEnv 0.3, ``openenv/core/env_server/http_server.py``): an episode is played over the
``/ws`` WebSocket, one environment per connection, which is what :class:`TextSQLClarifyClient` (like
every OpenEnv ``EnvClient``) uses. The HTTP ``/reset`` and ``/step`` routes build a fresh environment
per request and close it after, so they cannot play a multi-turn episode (``/step`` there answers
409 "call reset() before step()"); they serve inspection only.

Action: the env's action string, tagged (``<sql>``, ``<clarify>``, ``<feedback>``, ``<category>``) or
JSON ``{"type", "content"}`` (README "Using it"); a malformed one gets the env's error
observation and ``format`` component. Observation: the env's text fields (``schema`` is
``db_schema`` here: pydantic reserves ``schema``), counters, the phase name, ``messages`` (the chat
for LLM agents, ``info["messages"]``), this turn's ``reward_components``, ``reward``, ``done``
(terminated or truncated), and at episode end ``scores`` and the ``trajectory`` as a dict. State: the
sample id, turn, episode id, step count, done, and the episode reward so far (the sum of step rewards,
as the TRL adapters count it).

The server is the env's, never the reverse: no env module imports this one (README "Design rules": data flows one
way"). Source: OpenEnv 0.3 ``Environment`` / ``create_app`` / ``EnvClient``
(``openenv/core/env_server/interfaces.py``, ``http_server.py``, ``openenv/core/env_client.py``) and its
environment template (``openenv/cli/templates/openenv_env``).
"""
from __future__ import annotations

import argparse
import functools
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional, Sequence

try:
    from openenv.core.client_types import StepResult
    from openenv.core.env_client import EnvClient
    from openenv.core.env_server.http_server import create_app
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
    from pydantic import Field
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "textsql_clarify.integrations.openenv_server needs openenv-core>=0.3: "
        "pip install 'textsql-clarify[openenv]'") from e

from .common import jsonable
from .ws_sessions import DisconnectWatch, run_step
from ..samples import Sample

__all__ = ["TextSQLClarifyAction", "TextSQLClarifyObservation", "TextSQLClarifyState",
           "TextSQLClarifyEnvironment", "TextSQLClarifyClient", "SharedResources", "make_app",
           "environment_factory", "main", "RequestError", "ResetArgumentError", "UnknownSampleError",
           "SampleIndexError", "NoEpisodeError"]

#: reset keywords the environment accepts besides OpenEnv's ``seed`` and ``episode_id``
RESET_OPTIONS = ("sample_id", "index")
#: longest ``episode_id`` accepted (OpenEnv 0.3 ``ResetRequest.episode_id`` max_length)
MAX_EPISODE_ID_CHARS = 255


class RequestError(Exception):
    """A client's request the environment refuses (bad reset argument, step without an episode).

    ``status_code`` is the HTTP status :func:`make_app` answers it with; the message names the argument.
    """

    status_code = 400

    def __str__(self) -> str:  # KeyError would quote its message
        return str(self.args[0]) if self.args else ""


class ResetArgumentError(RequestError, ValueError):
    """A reset argument with a bad type or value, an unknown keyword, or ``sample_id`` with ``index``."""


class UnknownSampleError(RequestError, KeyError):
    """``reset(sample_id=...)`` names no sample of the server."""


class SampleIndexError(RequestError, IndexError):
    """``reset(index=...)`` is out of range."""


class NoEpisodeError(RequestError, RuntimeError):
    """``step`` before ``reset`` or after the episode ended (HTTP 409)."""

    status_code = 409


class TextSQLClarifyAction(Action):
    """One action: the env's action string (tagged or JSON, README "Using it")."""

    action: str = Field(..., description="the action, e.g. '<clarify>Which year?</clarify>' or "
                                         "'{\"type\": \"sql\", \"content\": \"SELECT ...\"}'")


class TextSQLClarifyObservation(Observation):
    """What the agent sees after ``reset`` or ``step`` (the env's observation plus ``info``).

    Fields: the env's text fields (``question``, ``evidence``, ``db_schema``, ``context``, ``history``,
    ``last_message``), its counters (``turn``, ``clarifications_left``) and ``phase`` by name;
    ``messages`` (chat list, ``info["messages"]``); ``reward_components`` of this turn (``None`` =
    undefined, never 0); ``action_type``, ``error``, ``sample_id``, ``terminated``, ``truncated``;
    ``episode_reward`` (sum of step rewards so far); ``decision`` on the episode's decision turn (the env's
    ``info["decision"]``: ``{"kind", "expected"}``, whose score is the ``decision`` reward component under the
    ``decision`` / ``shaped_decision`` presets), else ``None``; at episode end ``scores`` and ``trajectory``
    (``Trajectory.to_dict()``). ``reward`` and ``done`` are OpenEnv's (done = terminated or truncated).
    """

    question: str = ""
    evidence: str = ""
    db_schema: str = ""
    context: str = ""
    history: str = ""
    last_message: str = ""
    turn: int = 0
    clarifications_left: int = 0
    phase: str = ""
    messages: list[dict[str, Any]] = Field(default_factory=list)
    reward_components: dict[str, Any] = Field(default_factory=dict)
    action_type: Optional[str] = None
    error: Optional[str] = None
    sample_id: Optional[str] = None
    terminated: bool = False
    truncated: bool = False
    episode_reward: float = 0.0
    decision: Optional[dict[str, Any]] = None
    scores: Optional[dict[str, Any]] = None
    trajectory: Optional[dict[str, Any]] = None


class TextSQLClarifyState(State):
    """Episode state: OpenEnv's ``episode_id`` and ``step_count`` plus ``sample_id``, ``turn``,
    ``done`` and ``episode_reward`` (sum of step rewards so far)."""

    sample_id: Optional[str] = None
    turn: int = 0
    done: bool = False
    episode_reward: float = 0.0


class SharedResources:
    """What every environment of one server shares: the samples, one simulated user, one FB judge, the
    env options, and the two locks that serialise calls into the simulated user and into the judge
    (OpenEnv runs each session in its own worker thread; neither a MiniLM judge loading lazily nor a
    transformers user is safe to call from two threads at once).

    Nothing else is locked here: a step's SQL runs in its session's thread on the session's own
    connection (env option ``sql_connection="private"``, the default here: each env opens its own
    read-only sandbox per database, with every limit of the shared one), so a session running a slow
    query (up to the env's ``timeout_s``) holds up no other session's clarification, feedback or query,
    on the same database or another. ``sql_connection="shared"`` (one locked connection per database,
    ``sql.sandbox.get_sandbox``) makes two sessions' queries on one database run one after the other.
    Connections per database: at most one per open session (``max_concurrent_envs``) plus one per
    HTTP request in flight. ``isolation="process"`` keeps its worker processes instead.

    Args:
        dataset: dataset spec for :func:`textsql_clarify.datasets.load_dataset` (ignored with ``samples``).
        samples: the samples (default: the dataset's).
        limit: keep the first ``limit`` samples (of the dataset, before the selection below).
        sample_ids, split, split_by, heldout_fraction, split_seed, exclude_flags: which of the samples the server
            plays (:func:`~textsql_clarify.integrations.splits.select_samples`: ids, one side of a split by database
            or by group, samples with these flags left out, e.g. ``("indistinguishable",)``).
        serialize_steps: lock the simulated user's ``respond`` and the judge's ``judge`` calls (default
            ``True``); ``False`` only for a simulator and judge that are thread-safe themselves.
        env_kwargs: :class:`~textsql_clarify.envs.env.TextSQLClarifyEnv` options (``simulator``,
            ``reward_preset``, ``max_clarifications``, ``category_mode``, ``feedback_judge`` ...).
    Attributes:
        simulator_lock, judge_lock: the locks (``threading.RLock``, or no-ops without ``serialize_steps``).
    Raises:
        DatasetError: the dataset cannot be loaded; ValueError: bad env options (checked by building one env), a
            bad selection (as ``select_samples``); KeyError: an unknown id in ``sample_ids``.
    """

    def __init__(self, dataset: str = "embedded", *, samples: Sequence[Sample] | None = None,
                 limit: int | None = None, serialize_steps: bool = True, sample_ids: Sequence[str] | None = None,
                 split: str | None = None, split_by: str = "db", heldout_fraction: float = 0.25,
                 split_seed: int = 0, exclude_flags: Sequence[str] = (), **env_kwargs: Any):
        from ..envs.env import episode_samples
        from ..rewards.feedback import default_judge
        from ..simulators import make_simulator
        from .splits import select_samples

        self.samples = select_samples(episode_samples(dataset, samples, limit), sample_ids=sample_ids, split=split,
                                      split_by=split_by, heldout_fraction=heldout_fraction, split_seed=split_seed,
                                      exclude_flags=exclude_flags)
        self.samples = list({s.id: s for s in self.samples}.values())
        self.simulator = make_simulator(env_kwargs.pop("simulator", "rule"))
        if env_kwargs.get("isolation", "in_process") != "process":
            env_kwargs.setdefault("sql_connection", "private")
        self.feedback_judge = env_kwargs.pop("feedback_judge", None) or default_judge()
        self.env_kwargs = env_kwargs
        self.simulator_lock: Any = threading.RLock() if serialize_steps else _NoLock()
        self.judge_lock: Any = threading.RLock() if serialize_steps else _NoLock()
        self._locked_judge = _LockedJudge(self.feedback_judge, self.judge_lock)
        self.make_env()  # fail at build time on bad options, not in the first session

    def make_env(self):
        """A new :class:`~textsql_clarify.envs.env.TextSQLClarifyEnv` over the shared parts; its judge
        calls hold ``judge_lock`` (the env calls the judge inside ``begin_step``). Its ``simulator`` is
        the shared one, unlocked: :meth:`TextSQLClarifyEnvironment.step` holds ``simulator_lock``
        around it."""
        from ..envs.env import TextSQLClarifyEnv

        return TextSQLClarifyEnv(samples=self.samples, simulator=self.simulator,
                                 feedback_judge=self._locked_judge, **self.env_kwargs)


class _NoLock:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _LockedJudge:
    """The shared FB judge with every ``judge`` call under ``lock``; other attributes (``name``,
    ``used``) are the judge's own."""

    def __init__(self, judge: Any, lock: Any):
        self._judge, self._lock = judge, lock

    def judge(self, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return self._judge.judge(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._judge, name)


def _check_reset_args(env: Any, seed: Any, episode_id: Any, sample_id: Any, index: Any,
                      kwargs: dict) -> tuple[Optional[int], str, Optional[int]]:
    """Check every reset argument without touching ``env``; ``(seed, episode id, sample index or None)``.

    Raises:
        ResetArgumentError, UnknownSampleError, SampleIndexError: as
        :meth:`TextSQLClarifyEnvironment.reset`.
    """
    import numpy as np

    if kwargs:
        raise ResetArgumentError(f"unknown reset argument(s) {sorted(kwargs)}; accepted: seed, episode_id, "
                                 f"{', '.join(RESET_OPTIONS)}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
        raise ResetArgumentError(f"reset argument 'seed' must be an int >= 0 or null, got {seed!r}")
    if episode_id is not None and not isinstance(episode_id, str):
        raise ResetArgumentError(f"reset argument 'episode_id' must be a string or null, "
                                 f"got {type(episode_id).__name__} {episode_id!r}")
    if episode_id is not None and len(episode_id) > MAX_EPISODE_ID_CHARS:
        raise ResetArgumentError(f"reset argument 'episode_id' is {len(episode_id)} characters long; "
                                 f"at most {MAX_EPISODE_ID_CHARS}")
    if sample_id is not None and index is not None:
        raise ResetArgumentError("give either 'sample_id' or 'index' to reset, not both")
    idx: Optional[int] = None
    if sample_id is not None:
        if not isinstance(sample_id, str):
            raise ResetArgumentError(f"reset argument 'sample_id' must be a string, "
                                     f"got {type(sample_id).__name__} {sample_id!r}")
        try:
            idx = env.sample_index(sample_id)
        except KeyError as e:
            raise UnknownSampleError(str(e.args[0]) if e.args else f"unknown sample_id {sample_id!r}") from None
    elif index is not None:
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise ResetArgumentError(f"reset argument 'index' must be an int, got {type(index).__name__} {index!r}")
        idx = int(index)
        if not 0 <= idx < len(env.samples):
            raise SampleIndexError(f"reset argument 'index' {idx} is out of range 0..{len(env.samples) - 1}")
    return (None if seed is None else int(seed)), (episode_id or uuid.uuid4().hex), idx


class TextSQLClarifyEnvironment(Environment[TextSQLClarifyAction, TextSQLClarifyObservation, TextSQLClarifyState]):
    """``TextSQLClarify-v0`` as an OpenEnv ``Environment`` (one episode at a time, one per session).

    Args:
        shared: the server's :class:`SharedResources`; ``None`` builds private ones from ``env_kwargs``
            (``dataset``, ``samples``, ``limit`` and any env option), handy in-process.
        env_kwargs: see ``shared``.

    Source: OpenEnv 0.3 ``Environment`` (``reset``/``step``/``state``, ``SUPPORTS_CONCURRENT_SESSIONS``).
    """

    #: each instance owns its env; shared parts are locked (SharedResources)
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, shared: SharedResources | None = None, **env_kwargs: Any):
        super().__init__()
        self.shared = shared if shared is not None else SharedResources(**env_kwargs)
        self.env = self.shared.make_env()
        self._state = TextSQLClarifyState()
        self._step_thread: ThreadPoolExecutor | None = None  # step_async's thread, made on first use

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None, sample_id: Optional[str] = None,
              index: Optional[int] = None, **kwargs: Any) -> TextSQLClarifyObservation:
        """Start an episode on the sample named by ``sample_id`` or ``index``, else one drawn with ``seed``.

        All or nothing: every argument is checked before the env is touched, and an env reset that fails
        anyway is undone (``TextSQLClarifyEnv.snapshot`` / ``restore``), so after an error the previous
        episode, env and :attr:`state` alike, is as it was. A new episode's ``episode_reward`` is 0.

        Args:
            seed: reset seed (int >= 0, as OpenEnv's ``ResetRequest``); episode_id: an id to record, a string
                of at most 255 characters (default: a new uuid4 hex).
            sample_id / index: the sample (give at most one).
        Raises:
            ResetArgumentError (a ``ValueError``): unknown keyword, both ``sample_id`` and ``index``, a bad
            type or value; UnknownSampleError (``KeyError``): unknown ``sample_id``; SampleIndexError
            (``IndexError``): ``index`` out of range. Over the WebSocket these come back as an OpenEnv error
            message naming the argument, which the client raises as ``RuntimeError``; over HTTP as 400.
        """
        seed, episode_id, idx = _check_reset_args(self.env, seed, episode_id, sample_id, index, kwargs)
        new_state = TextSQLClarifyState(episode_id=episode_id, step_count=0, episode_reward=0.0, done=False)
        snap = self.env.snapshot()
        try:
            obs, info = self.env.reset(seed=seed, options=None if idx is None else {"index": idx})
            new_state.sample_id = info["sample_id"]
            new_state.turn = int(obs["turn"])
        except BaseException:
            self.env.restore(snap)  # the previous episode goes on as if this reset had not been asked for
            raise
        self._state = new_state
        return self._observation(obs, None, False, False, info)

    def step(self, action: TextSQLClarifyAction | str, timeout_s: Optional[float] = None,
             **kwargs: Any) -> TextSQLClarifyObservation:
        """Apply one action (a :class:`TextSQLClarifyAction` or its string).

        The env's ``begin_step`` runs the SQL in this thread, with no lock held; only the shared FB
        judge (inside ``begin_step``, ``SharedResources.judge_lock``) and the shared simulated user
        (:func:`~textsql_clarify.envs.env.answer_clarifications`, ``SharedResources.simulator_lock``) are
        called under a lock. ``timeout_s`` is accepted for OpenEnv's HTTP route and ignored: the env
        bounds each query itself (``timeout_s`` env option).

        Raises:
            NoEpisodeError (a ``RuntimeError``): before ``reset`` or after the episode ended (HTTP 409).
            Any error of the judge or simulator, after which the episode is as it was before the step.
        """
        from ..envs.env import answer_clarifications
        from ..simulators.base import UserRequest

        st = self._state
        if st.sample_id is None or st.done:
            raise NoEpisodeError("call reset() before step(): the episode has ended or not started")
        text = action.action if isinstance(action, TextSQLClarifyAction) else action
        out = self.env.begin_step(text)
        if isinstance(out, UserRequest):
            with self.shared.simulator_lock:
                out = answer_clarifications(self.shared.simulator, [(self.env, out)])[0]
        obs, reward, terminated, truncated, info = out
        st.step_count += 1
        st.turn = int(obs["turn"])
        st.episode_reward = float(st.episode_reward + reward)
        st.done = bool(terminated or truncated)
        return self._observation(obs, float(reward), terminated, truncated, info)

    async def step_async(self, action: TextSQLClarifyAction | str, timeout_s: Optional[float] = None,
                         **kwargs: Any) -> TextSQLClarifyObservation:
        """:meth:`step` in this session's own thread (OpenEnv's ``/ws`` endpoint awaits this), interrupted
        (:meth:`interrupt`) until it returns when the WebSocket client leaves meanwhile
        (:func:`.ws_sessions.run_step`), so a dropped client's session ends within a moment, not at the
        step's time limit. Raises: as :meth:`step`."""
        if self._step_thread is None:
            self._step_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="textsql-clarify-step")
        return await run_step(functools.partial(self.step, action, timeout_s, **kwargs), self._step_thread,
                              self.interrupt)

    def interrupt(self) -> bool:
        """Abort the SQL this session runs now, from any thread (``TextSQLClarifyEnv.interrupt_sql``: only its
        own connections, ``sql_connection="private"``); the step then ends as if the query failed (kind
        ``runtime``). Returns whether the session has connections of its own to interrupt."""
        return self.env.interrupt_sql()

    def close(self) -> None:
        """End the session: interrupt its SQL, close its env (its own connections, ``TextSQLClarifyEnv.close``)
        and let its step thread go. OpenEnv calls this when the WebSocket session ends (``_destroy_session``)
        and after each HTTP request. Safe to call twice."""
        self.interrupt()
        self.env.close()
        if self._step_thread is not None:
            self._step_thread.shutdown(wait=False)
            self._step_thread = None

    def _observation(self, obs: dict, reward: float | None, terminated: bool, truncated: bool,
                     info: dict) -> TextSQLClarifyObservation:
        from ..envs.spaces import PHASES

        traj = info.get("trajectory")
        return TextSQLClarifyObservation(
            question=obs["question"], evidence=obs["evidence"], db_schema=obs["schema"], context=obs["context"],
            history=obs["history"], last_message=obs["last_message"], turn=int(obs["turn"]),
            clarifications_left=int(obs["clarifications_left"]), phase=PHASES[int(obs["phase"])],
            messages=jsonable(info["messages"]), reward_components=jsonable(info.get("reward_components") or {}),
            action_type=info.get("action_type"), error=info.get("error"), sample_id=info.get("sample_id"),
            terminated=bool(terminated), truncated=bool(truncated), episode_reward=self._state.episode_reward,
            decision=jsonable(info["decision"]) if info.get("decision") is not None else None,
            scores=jsonable(info["scores"]) if "scores" in info else None,
            trajectory=jsonable(traj.to_dict()) if traj is not None else None,
            reward=reward, done=bool(terminated or truncated))

    @property
    def state(self) -> TextSQLClarifyState:
        """The running episode's :class:`TextSQLClarifyState` (empty before the first reset)."""
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        """Name, description and version for OpenEnv's ``/metadata`` route."""
        from .. import __version__

        return EnvironmentMetadata(
            name="TextSQLClarify-v0",
            description="Text-to-SQL episodes where the agent answers (<sql>), asks (<clarify>) or refuses "
                        "(<feedback>); a simulated user answers clarifications.",
            version=__version__)


def environment_factory(shared: SharedResources):
    """The zero-argument factory OpenEnv's server calls once per session: a new
    :class:`TextSQLClarifyEnvironment` over ``shared``."""
    def factory() -> TextSQLClarifyEnvironment:
        return TextSQLClarifyEnvironment(shared)

    factory.__name__ = "TextSQLClarifyEnvironment"
    return factory


def make_app(dataset: str = "embedded", *, samples: Sequence[Sample] | None = None, limit: int | None = None,
             max_concurrent_envs: int = 8, serialize_steps: bool = True, **env_kwargs: Any):
    """The OpenEnv FastAPI app serving ``TextSQLClarify-v0`` (``openenv.core.create_app``).

    Args:
        dataset, samples, limit, serialize_steps, env_kwargs: see :class:`SharedResources`.
        max_concurrent_envs: WebSocket sessions open at once (each is one environment, with its own SQL
            connection per database under the default ``sql_connection="private"``).
    Returns:
        A ``fastapi.FastAPI`` app; serve it with ``uvicorn.run(app, host=..., port=...)``.
    Raises:
        as :class:`SharedResources`.
    """
    shared = SharedResources(dataset, samples=samples, limit=limit, serialize_steps=serialize_steps, **env_kwargs)
    app = create_app(environment_factory(shared), TextSQLClarifyAction, TextSQLClarifyObservation,
                     env_name="textsql_clarify", max_concurrent_envs=max_concurrent_envs)
    app.add_exception_handler(RequestError, _request_error_response)
    app.add_middleware(DisconnectWatch)  # a client leaving mid-step frees its slot at once, without a traceback
    return app


async def _request_error_response(_request: Any, exc: Exception):
    """FastAPI exception handler: a :class:`RequestError` from the HTTP ``/reset`` or ``/step`` route as its
    ``status_code`` with ``{"detail": message}`` (FastAPI's ``HTTPException`` body), not a bare 500.
    (The WebSocket route catches errors itself and answers with an OpenEnv error message.)"""
    from fastapi.responses import JSONResponse

    return JSONResponse(status_code=getattr(exc, "status_code", 400), content={"detail": str(exc)})


class TextSQLClarifyClient(EnvClient[TextSQLClarifyAction, TextSQLClarifyObservation, TextSQLClarifyState]):
    """OpenEnv client for a :func:`make_app` server (WebSocket session; async, ``.sync()`` for blocking use).

    ``TextSQLClarifyClient(base_url="http://127.0.0.1:8000")``; ``await client.reset(sample_id="...")``;
    ``await client.step("<clarify>...</clarify>")`` returns an OpenEnv ``StepResult`` whose
    ``observation`` is a :class:`TextSQLClarifyObservation`. A server-side error (unknown sample, step
    after the end) raises ``RuntimeError`` naming it. Source: OpenEnv 0.3 ``EnvClient``.
    """

    def _step_payload(self, action: TextSQLClarifyAction | str) -> dict[str, Any]:
        if isinstance(action, str):
            return {"action": action}
        if isinstance(action, TextSQLClarifyAction):
            return {"action": action.action}
        raise TypeError(f"an action is a string or TextSQLClarifyAction, got {type(action).__name__}")

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[TextSQLClarifyObservation]:
        obs = TextSQLClarifyObservation(**payload.get("observation", {}), reward=payload.get("reward"),
                                        done=bool(payload.get("done", False)))
        return StepResult(observation=obs, reward=payload.get("reward"), done=bool(payload.get("done", False)))

    def _parse_state(self, payload: dict[str, Any]) -> TextSQLClarifyState:
        return TextSQLClarifyState(**payload)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m textsql_clarify.integrations.openenv_server",
                                description="Serve TextSQLClarify-v0 as an OpenEnv environment (WebSocket /ws).")
    p.add_argument("--dataset", default="embedded", help="dataset spec (embedded, spider:<root>, file.jsonl, ...)")
    p.add_argument("--limit", type=int, default=None, help="keep the first N samples")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--simulator", default="rule", help="rule | transformers | transformers:<model>[,<model>...] | openai:<base_url>/<model>")
    p.add_argument("--reward-preset", default="binary", help="reward preset ('suite' needs --ex-mode suite)")
    p.add_argument("--ex-mode", default="single", choices=("single", "suite"),
                   help="'suite': also test-suite EX over --suite-k database variants (docs/metrics.md, Test-suite EX)")
    p.add_argument("--suite-k", type=int, default=None, metavar="K", help="with --ex-mode suite: variants per database")
    p.add_argument("--suite-cache-dir", default=None, metavar="DIR", help="with --ex-mode suite: the variants' cache")
    p.add_argument("--max-clarifications", type=int, default=3)
    p.add_argument("--category-mode", default="taxonomy_free")
    p.add_argument("--max-concurrent-envs", type=int, default=8, help="WebSocket sessions at once")
    p.add_argument("--sql-connection", default="private", choices=("private", "shared"),
                   help="'private' (default): each session's own read-only connection per database; "
                        "'shared': one connection per database, sessions' queries on it run one at a time")
    p.add_argument("--exclude-flag", action="append", default=[], metavar="FLAG",
                   help="leave out samples with this load-time flag (repeatable; e.g. indistinguishable)")
    p.add_argument("--split", default=None, choices=("train", "heldout"), help="serve one side of a split only")
    p.add_argument("--split-by", default="db", choices=("db", "group"), help="the split's kind (default db)")
    p.add_argument("--heldout-fraction", type=float, default=0.25, help="the split's held-out fraction")
    p.add_argument("--split-seed", type=int, default=0, help="the split's seed")
    p.add_argument("--log-level", default="info")
    return p


def main(argv: Sequence[str] | None = None) -> None:
    """CLI: build :func:`make_app` from the flags and serve it with uvicorn until interrupted.

    Raises:
        SystemExit: status 2 with one ``error:`` line (argparse's ``parser.error``) when the flags do not
            combine (:func:`app_options`'s ValueError) or the app cannot be built from them (a dataset that does
            not load, an unknown preset or simulator: ValueError or the project's errors).
    """
    from ..errors import TextSQLClarifyError

    parser = _parser()
    args = parser.parse_args(argv)
    import uvicorn

    try:
        app = make_app(args.dataset, **app_options(args))
    except (ValueError, TextSQLClarifyError) as e:
        parser.error(str(e))
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)


def app_options(args: argparse.Namespace) -> dict[str, Any]:
    """The :func:`make_app` keyword arguments of parsed :func:`_parser` flags (all but ``dataset``, ``host``,
    ``port`` and ``log_level``). The test-suite options go in only with ``--ex-mode suite`` (the env refuses
    them with ``ex_mode="single"``).

    Raises:
        ValueError: ``--suite-k`` or ``--suite-cache-dir`` without ``--ex-mode suite``; ``--suite-k``,
            ``--limit`` or ``--max-concurrent-envs`` below 1 (named by flag; OpenEnv's own check of the last is
            a several-line pydantic report).
    """
    from ..cli import suite_options

    suite = suite_options(args)
    for flag, value in (("--limit", args.limit), ("--max-concurrent-envs", args.max_concurrent_envs)):
        if value is not None and value < 1:
            raise ValueError(f"{flag} must be >= 1, got {value}")
    return dict(limit=args.limit, simulator=args.simulator, reward_preset=args.reward_preset,
                max_clarifications=args.max_clarifications, category_mode=args.category_mode,
                max_concurrent_envs=args.max_concurrent_envs, exclude_flags=tuple(args.exclude_flag),
                sql_connection=args.sql_connection,
                split=args.split, split_by=args.split_by, heldout_fraction=args.heldout_fraction,
                split_seed=args.split_seed, **suite)


if __name__ == "__main__":
    main()
