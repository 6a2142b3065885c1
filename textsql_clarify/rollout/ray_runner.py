"""Ray backend of :func:`~textsql_clarify.rollout.evaluation.evaluate` (``docs/platform.md`` "Ray").

A pool of Ray actors, each holding its envs, one simulated user and one feedback judge, plays episodes
fed to it by sample index (with the sample's id as a check) and returns their trajectories; the driver
puts them back in sample order, shows the progress bar, and computes the metrics once, as the local
runner does. The sample list and the agent go to the object store once (``ray.put``) and each actor
reads them once, at start; a task carries only indices and ids.

Episode ``i`` is reset with ``options={"index": i}`` and seed ``seed + i``, exactly as the local runner
does, so a deterministic agent and simulator give the same trajectories on any number of actors.

Ray is optional (``pip install 'textsql-clarify[ray]'``) and imported only when this backend runs.
How to point it at a cluster: ``docs/platform.md``, section "Ray".
"""
from __future__ import annotations

import math
import os
import pickle
import socket
import traceback
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

from ..errors import TextSQLClarifyError
from ..samples import Sample
from ..trajectory import Trajectory
from .episodes import _check_num_envs, run_episode, run_lockstep

#: how to install the optional dependency (named in every "no Ray" error).
RAY_INSTALL_HINT = "pip install 'textsql-clarify[ray]'"
#: chunks kept in flight per actor, so that an actor never waits on the driver between two chunks.
IN_FLIGHT_PER_ACTOR = 2
#: the largest number of episodes in one task (a chunk), whatever the dataset size.
MAX_CHUNK = 64


class RayUnavailableError(TextSQLClarifyError, ImportError):
    """``backend="ray"`` was asked for but Ray cannot be imported."""


class RayEpisodeError(TextSQLClarifyError, RuntimeError):
    """An episode failed inside a Ray actor (or the actor died while playing it).

    Attributes:
        sample_id: the id of the failing sample (``None`` when an actor died with several in hand).
        index: its position in the evaluated sample list (``None`` likewise).
        sample_ids: every sample the failed task held.
        remote_traceback: the actor's traceback text, when there is one.
    """

    def __init__(self, message: str, *, sample_id: str | None = None, index: int | None = None,
                 sample_ids: Sequence[str] = (), remote_traceback: str | None = None):
        self.sample_id, self.index = sample_id, index
        self.sample_ids = list(sample_ids)
        self.remote_traceback = remote_traceback
        super().__init__(message)


def import_ray() -> Any:
    """Import Ray, offline and quiet: usage statistics off (``RAY_USAGE_STATS_ENABLED=0`` unless the caller
    set it).

    Returns:
        the ``ray`` module.
    Raises:
        RayUnavailableError: Ray is not installed (the message says ``pip install 'textsql-clarify[ray]'``).
    """
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
    except ImportError as e:
        raise RayUnavailableError(f"backend='ray' needs Ray, which is not installed ({e}); "
                                  f"install it with: {RAY_INSTALL_HINT}") from e
    return ray


def _starts_local(address: str | None) -> bool:
    """Whether ``ray.init(address=address)`` starts a new local instance (``None`` with no ``RAY_ADDRESS``,
    or ``"local"``) rather than connecting to a running cluster (``"auto"``, ``host:port``, ``ray://...``)."""
    if address is None:
        return not os.environ.get("RAY_ADDRESS")
    return address == "local"


def init_ray(address: str | None = None, *, num_cpus: int | None = None) -> bool:
    """Connect to Ray, or start a local instance; does nothing when Ray is already initialised.

    Args:
        address: ``"local"`` (a new instance on this machine, offline: loopback address, no dashboard,
            token authentication as is Ray's default),
            ``"auto"`` (the cluster a ``ray start`` on this machine runs), ``"host:port"`` (a head
            node's GCS address), ``"ray://host:10001"`` (Ray Client), or ``None`` (``RAY_ADDRESS`` when
            set, else ``"local"``), as ``ray.init`` reads them.
        num_cpus: CPUs of a new local instance (``None``: all of this machine's); ignored when connecting.
    Returns:
        True when this call initialised Ray (the caller should ``ray.shutdown()`` when done).
    Raises:
        RayUnavailableError: Ray is not installed. ValueError: ``address`` is not a string.
        ConnectionError: nothing listens at a ``host:port`` / ``ray://host:port`` address (checked first,
            5 s), or Ray finds no cluster at ``address``.
    """
    ray = import_ray()
    if ray.is_initialized():
        return False
    if address is not None and not isinstance(address, str):
        raise ValueError(f"ray_address must be a string such as 'local', 'auto' or 'host:6379', got {address!r}")
    kwargs: dict[str, Any] = {"configure_logging": False, "log_to_driver": False}
    if _starts_local(address):
        kwargs.update(address="local", include_dashboard=False, _node_ip_address="127.0.0.1")
        if num_cpus is not None:
            kwargs["num_cpus"] = num_cpus
    else:
        if address:
            _check_reachable(address)
        kwargs["address"] = address
    import logging

    # Ray >= 2.5x enables token authentication on a new local instance and says so in a warning: keep it quiet
    notice = logging.getLogger("ray._private.authentication.authentication_token_setup")
    level = notice.level
    notice.setLevel(logging.ERROR)
    try:
        ray.init(**kwargs)
    finally:
        notice.setLevel(level)
    return True


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast when ``address`` (``host:port`` or ``ray://host:port``) has nothing listening: ``ray.init``
    itself retries such an address for minutes. ``"auto"`` and other forms are left to Ray.

    Raises:
        ConnectionError: no TCP connection to the address within ``timeout_s`` seconds.
    """
    hostport = address[len("ray://"):] if address.startswith("ray://") else address
    host, sep, port = hostport.rpartition(":")
    if not sep or not host or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise ConnectionError(f"no Ray cluster answers at {address} ({e}); start one with 'ray start --head' "
                              f"(docs/platform.md, section Ray) or use --ray local") from e


def _package_root() -> str:
    """This installation's ``textsql_clarify`` folder (the embedded dataset lives under it)."""
    return str(Path(__file__).resolve().parents[1])


def _relocate(samples: list[Sample], driver_root: str) -> list[Sample]:
    """``samples`` with each ``db_path`` under the driver's package folder (the embedded dataset) moved to
    this node's package folder, when the two installations differ; other paths are kept as they are."""
    import dataclasses

    here = _package_root()
    if here == driver_root:
        return samples
    prefix = driver_root.rstrip(os.sep) + os.sep
    return [dataclasses.replace(s, db_path=here + os.sep + s.db_path[len(prefix):])
            if s.db_path.startswith(prefix) else s for s in samples]


class EpisodeWorker:
    """The body of one Ray actor: its envs, one simulated user and one feedback judge (Ray actors docs).

    Built once per actor from the sample list and the agent (object-store references, resolved once), then
    fed chunks of ``(index, sample_id)`` pairs by :meth:`run`.

    Args:
        samples: the evaluated samples (the whole list; tasks name them by index).
        agent: the agent; this actor's copy plays every episode it is given (for ``num_envs > 1``,
            :func:`~textsql_clarify.rollout.episodes.run_lockstep` copies it per env).
        env_kwargs: :class:`~textsql_clarify.envs.env.TextSQLClarifyEnv` options; ``simulator`` (a spec
            such as ``"rule"`` or ``"transformers"``) and ``feedback_judge`` are built once here.
        num_envs: envs played in lockstep per chunk (>= 1).
        driver_root: the driver's package folder, to find the embedded databases on this node.
    Errors while building (a sample's database missing on this node: a FileNotFoundError that names the node,
    the path and the sample; any error of the simulator, the judge or the env) do not kill the actor: its
    :meth:`run` reports them, so that the driver's error names the sample.
    """

    def __init__(self, samples: list[Sample], agent: Any, env_kwargs: dict, num_envs: int, driver_root: str):
        self._init_error: dict | None = None
        try:
            self._setup(samples, agent, env_kwargs, num_envs, driver_root)
        except Exception as e:  # reported by run(), naming the sample, rather than as a dead actor
            self._init_error = _error_record(e, getattr(e, "_textsql_where", None))

    def _setup(self, samples: list[Sample], agent: Any, env_kwargs: dict, num_envs: int, driver_root: str) -> None:
        """Build what :meth:`__init__` promises (see the class doc for its errors)."""
        from ..envs.env import TextSQLClarifyEnv
        from ..rewards.feedback import default_judge
        from ..simulators import make_simulator

        self.samples = _relocate(list(samples), driver_root)
        missing: dict[str, tuple[int, str]] = {}
        for i, s in enumerate(self.samples):
            if s.db_path not in missing and not os.path.isfile(s.db_path):
                missing[s.db_path] = (i, s.id)
        if missing:
            path, (i, sid) = next(iter(missing.items()))
            e = FileNotFoundError(
                f"Ray node {socket.gethostname()}: database {path} (sample {sid}) not found"
                + (f", and {len(missing) - 1} more" if len(missing) > 1 else "")
                + "; every worker node needs the dataset's databases at the same path (or a shared filesystem), "
                  "see docs/platform.md, section Ray")
            e._textsql_where = (i, sid)  # type: ignore[attr-defined]
            raise e
        self.agent = agent
        kw = dict(env_kwargs)
        self.simulator = make_simulator(kw.pop("simulator", "rule"))
        self.judge = kw.pop("feedback_judge", None) or default_judge()
        self.env_kwargs = kw
        self.num_envs = num_envs
        self.env = (TextSQLClarifyEnv(samples=self.samples, simulator=self.simulator, feedback_judge=self.judge, **kw)
                    if num_envs == 1 else None)

    def ready(self) -> str:
        """The node's host name, once the actor is built."""
        return socket.gethostname()

    def run(self, chunk: list[tuple[int, str]], seed: int) -> dict:
        """Play the episodes of ``chunk`` (``(index, sample_id)`` pairs), episode ``i`` with reset seed
        ``seed + i``.

        Returns:
            ``{"trajectories": [...]}`` in chunk order, or, when an episode raised,
            ``{"error": {...}}`` naming its index and sample id with the error text, its traceback and
            (when it pickles) the exception itself. Never raises for an episode's error.
        """
        if self._init_error is not None:
            return {"error": self._init_error}
        current: tuple[int, str] | None = chunk[0]
        try:
            for i, sid in chunk:
                if self.samples[i].id != sid:
                    raise RuntimeError(f"sample index {i} is {self.samples[i].id!r} on this actor, the driver "
                                       f"sent {sid!r}: the actor holds a different sample list")
            if self.num_envs == 1:
                out = []
                for i, sid in chunk:
                    current = (i, sid)
                    out.append(run_episode(self.env, self.agent, index=i, seed=seed + i))
                return {"trajectories": out}
            current = None  # lockstep plays the chunk at once; the agent's notes name the sample
            return {"trajectories": run_lockstep(self.samples, self.agent, num_envs=self.num_envs, seed=seed,
                                                 indices=[i for i, _ in chunk], simulator=self.simulator,
                                                 feedback_judge=self.judge, **self.env_kwargs)}
        except Exception as e:  # reported to the driver, which raises RayEpisodeError
            if current is None:  # lockstep: find the failing sample by replaying the chunk one at a time
                current = self._locate(chunk, seed)
            return {"error": _error_record(e, current)}

    def _locate(self, chunk: list[tuple[int, str]], seed: int) -> tuple[int, str] | None:
        """The first ``(index, sample_id)`` of ``chunk`` whose episode raises when played alone on a fresh
        env, or ``None`` when none does (a failure that needs the lockstep)."""
        from ..envs.env import TextSQLClarifyEnv

        env = TextSQLClarifyEnv(samples=self.samples, simulator=self.simulator, feedback_judge=self.judge,
                                **self.env_kwargs)
        for i, sid in chunk:
            try:
                run_episode(env, self.agent, index=i, seed=seed + i)
            except Exception:
                return i, sid
        return None


def _error_record(e: BaseException, where: tuple[int, str] | None) -> dict:
    """What an actor sends back for an error: the episode ``where`` (``(index, sample_id)`` or ``None``),
    the error's type, text, notes and traceback, the node, and the exception itself when it pickles."""
    try:
        from ray import cloudpickle as dumper  # what Ray sends the result with
    except ImportError:  # pragma: no cover - only Ray runs this
        dumper = pickle
    try:
        dumper.dumps(e)
        exc: BaseException | None = e
    except Exception:
        exc = None
    return {"index": None if where is None else where[0], "sample_id": None if where is None else where[1],
            "type": type(e).__name__, "message": str(e), "notes": list(getattr(e, "__notes__", []) or []),
            "traceback": "".join(traceback.format_exception(type(e), e, e.__traceback__)), "exception": exc,
            "host": socket.gethostname()}


def _chunks(n: int, num_actors: int, chunk_size: int | None) -> list[range]:
    """Contiguous index ranges covering ``0..n-1``: ``chunk_size`` each, or, by default, about four per
    actor (at most :data:`MAX_CHUNK`), so the load balances and the progress bar moves.

    Raises:
        ValueError: ``chunk_size`` is not an int >= 1.
    """
    if chunk_size is None:
        chunk_size = max(1, min(MAX_CHUNK, math.ceil(n / (4 * num_actors))))
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be an int >= 1, got {chunk_size!r}")
    return [range(a, min(a + chunk_size, n)) for a in range(0, n, chunk_size)]


def _raise_failure(err: dict, chunk: Sequence[int], samples: Sequence[Sample], actor: int) -> None:
    """Raise :class:`RayEpisodeError` for an actor's ``{"error": ...}`` report."""
    ids = [samples[i].id for i in chunk]
    where = (f"sample {err['sample_id']} (episode {err['index']})" if err["sample_id"] is not None
             else f"one of samples {ids[0]} .. {ids[-1]} (episodes {chunk[0]}..{chunk[-1]}, played in lockstep)")
    notes = "".join(f"\n  {n}" for n in err["notes"])
    raise RayEpisodeError(
        f"{where} failed on Ray actor {actor} (host {err['host']}): {err['type']}: {err['message']}{notes}\n"
        f"actor traceback:\n{err['traceback']}",
        sample_id=err["sample_id"], index=err["index"], sample_ids=ids,
        remote_traceback=err["traceback"]) from err.get("exception")


def run_ray(samples: Sequence[Sample], agent: Any, *, seed: int = 0, num_envs: int = 1, bar: Any = None,
            address: str | None = None, num_actors: int | None = None, chunk_size: int | None = None,
            actor_cpus: float = 1.0, indices: Sequence[int] | None = None,
            on_done: Callable[[list[tuple[int, Trajectory]]], None] | None = None,
            **env_kwargs: Any) -> list[Trajectory]:
    """Play one episode per sample on a pool of Ray actors; return the trajectories in sample order.

    Args:
        samples: the samples (one episode each; episode ``i`` uses reset seed ``seed + i``).
        agent: the agent; it is pickled once into the object store and each actor plays its own copy
            (an agent holding a large model is better built inside the actor: give a small object that
            loads it lazily).
        seed: reset seed of the first episode.
        num_envs: envs each actor plays in lockstep (their clarifications reach its user in one batch).
        bar: an optional tqdm bar, advanced as each chunk's trajectories come back.
        address: the Ray address (:func:`init_ray`); used only when Ray is not initialised yet, and a Ray
            this call starts is shut down at the end.
        num_actors: actors in the pool (``None``: the cluster's CPUs divided by ``actor_cpus``), at most
            one per chunk.
        chunk_size: episodes per task (``None``: about four tasks per actor, at most :data:`MAX_CHUNK`).
        actor_cpus: CPUs each actor reserves (Ray's ``num_cpus``; > 0).
        indices: the episodes to play (``None``: all); episode ``i`` stays sample ``i`` with seed ``seed + i``,
            so a resumed run plays the ones it lacks as a full run would.
        on_done: called with each chunk's ``(index, trajectory)`` pairs as it comes back (the run journal's batch).
        env_kwargs: :class:`~textsql_clarify.envs.env.TextSQLClarifyEnv` options (``simulator`` as a spec,
            such as ``"rule"`` or ``"transformers"``, so that each actor builds its own user).
    Returns:
        The trajectories, in sample order (in ``indices`` order when given).
    Raises:
        RayUnavailableError: Ray is not installed. ValueError: bad ``num_actors``, ``chunk_size``,
        ``actor_cpus`` or ``num_envs``. RayEpisodeError: an episode raised in an actor, or an actor
        died; the message names the sample id (and the actor's traceback).
    """
    ray = import_ray()
    num_envs = _check_num_envs(num_envs)
    if num_actors is not None and (isinstance(num_actors, bool) or not isinstance(num_actors, int) or num_actors < 1):
        raise ValueError(f"num_actors (ray_actors) must be an int >= 1, got {num_actors!r}")
    if isinstance(actor_cpus, bool) or not isinstance(actor_cpus, (int, float)) or not actor_cpus > 0:
        raise ValueError(f"actor_cpus must be a number > 0, got {actor_cpus!r}")
    samples = list(samples)
    order = list(range(len(samples))) if indices is None else [int(i) for i in indices]
    if not order:
        return []
    started = init_ray(address)
    actors: list = []
    try:
        total = float(ray.cluster_resources().get("CPU", 1.0))
        if num_actors is None:
            num_actors = max(1, int(total // actor_cpus))
        chunks = [[order[j] for j in r] for r in _chunks(len(order), num_actors, chunk_size)]
        num_actors = min(num_actors, len(chunks))
        if num_actors * actor_cpus > total:
            warnings.warn(f"{num_actors} Ray actors of {actor_cpus} CPU each need {num_actors * actor_cpus:g} CPUs, "
                          f"the cluster has {total:g} now: the rest wait until the cluster grows", stacklevel=2)
        worker_cls = ray.remote(num_cpus=actor_cpus, max_restarts=0)(EpisodeWorker)
        samples_ref, agent_ref = ray.put(samples), ray.put(agent)
        actors = [worker_cls.remote(samples_ref, agent_ref, dict(env_kwargs), num_envs, _package_root())
                  for _ in range(num_actors)]
        trajs: dict[int, Trajectory] = {}
        todo = list(range(len(chunks)))[::-1]  # chunk numbers, popped from the end in order
        in_flight: dict[Any, tuple[int, int]] = {}  # object ref -> (actor, chunk number)

        def submit(k: int) -> None:
            c = todo.pop()
            pairs = [(i, samples[i].id) for i in chunks[c]]
            in_flight[actors[k].run.remote(pairs, seed)] = (k, c)

        # work goes only to actors that are up: an actor still waiting for a CPU (more actors than the
        # cluster has CPUs, e.g. a local instance that never grows) gets none, so the run never waits on it
        starting: dict[Any, int] = {actors[k].ready.remote(): k for k in range(num_actors)}
        while in_flight or (todo and starting):
            done, _ = ray.wait(list(in_flight) + list(starting), num_returns=1)
            if done[0] in starting:
                k = starting.pop(done[0])
                try:
                    ray.get(done[0])
                except ray.exceptions.RayActorError as e:  # the actor died before it could take work
                    raise RayEpisodeError(f"Ray actor {k} could not start: {getattr(e, 'cause', None) or e}") from e
                for _ in range(IN_FLIGHT_PER_ACTOR):
                    if todo:
                        submit(k)
                continue
            k, c = in_flight.pop(done[0])
            try:
                result = ray.get(done[0])
            except ray.exceptions.RayActorError as e:  # the actor died (built badly, killed, out of memory)
                ids = [samples[i].id for i in chunks[c]]
                cause = getattr(e, "cause", None) or e
                raise RayEpisodeError(
                    f"Ray actor {k} failed while holding samples {ids[0]} .. {ids[-1]} (episodes "
                    f"{chunks[c][0]}..{chunks[c][-1]}): {cause}",
                    sample_id=ids[0] if len(ids) == 1 else None, index=chunks[c][0] if len(ids) == 1 else None,
                    sample_ids=ids) from e
            if "error" in result:
                _raise_failure(result["error"], chunks[c], samples, k)
            for i, t in zip(chunks[c], result["trajectories"]):
                if t.sample_id != samples[i].id:  # a guard: results must land in sample order
                    raise RayEpisodeError(f"Ray actor {k} returned sample {t.sample_id} for episode {i} "
                                          f"({samples[i].id})", sample_id=samples[i].id, index=i)
                trajs[i] = t
            if on_done is not None:
                on_done([(i, trajs[i]) for i in chunks[c]])
            if bar is not None:
                bar.update(len(chunks[c]))
            if todo:
                submit(k)
        return [trajs[i] for i in order]
    finally:
        for a in actors:
            try:
                ray.kill(a)
            except Exception:  # already gone
                pass
        if started:
            ray.shutdown()
