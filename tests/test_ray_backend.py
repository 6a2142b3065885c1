"""The Ray backend of ``evaluate``: same trajectories and metrics as the local runner.

One local Ray instance per module (2 CPUs, no dashboard, loopback address, usage statistics off), started
by :func:`textsql_clarify.rollout.ray_runner.init_ray` as ``eval --ray local`` starts it, and shut down
at the end. Tests that need Ray are marked ``ray`` and skip when it is not installed.
"""
from __future__ import annotations

import json
import os
import signal
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import MeanIs
from textsql_clarify.baselines.agents import OracleAgent, make_agent
from textsql_clarify.rollout.evaluation import evaluate
from textsql_clarify.datasets import load_dataset

#: set before Ray starts, so that its processes (which inherit the environment) stay offline and quiet.
OFFLINE_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


@pytest.fixture(scope="module")
def ray_local(tmp_path_factory):
    """A local Ray instance with 2 CPUs for the whole module (skips when Ray is not installed)."""
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'textsql-clarify[ray]')")
    import ray

    from textsql_clarify.rollout.ray_runner import init_ray

    saved = {k: os.environ.get(k) for k in [*OFFLINE_ENV, "TEXTSQL_CLARIFY_CACHE"]}
    os.environ.update(OFFLINE_ENV)
    os.environ["TEXTSQL_CLARIFY_CACHE"] = str(tmp_path_factory.mktemp("cache"))  # the actors inherit it
    if ray.is_initialized():
        ray.shutdown()
    assert init_ray("local", num_cpus=2) is True  # started here, offline: loopback, no dashboard
    assert ray.cluster_resources()["CPU"] == 2
    yield ray
    ray.shutdown()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _no_timing(d):
    """``d`` without its timing fields (``elapsed_s`` of each SQL turn's execution)."""
    if isinstance(d, dict):
        return {k: _no_timing(v) for k, v in d.items() if k != "elapsed_s"}
    if isinstance(d, list):
        return [_no_timing(x) for x in d]
    return d


def _assert_same_run(local_dir: Path, ray_dir: Path) -> dict:
    """trajectories.jsonl turn by turn and metrics.json number by number; returns the metrics."""
    a = [json.loads(line) for line in (local_dir / "trajectories.jsonl").read_text().splitlines()]
    b = [json.loads(line) for line in (ray_dir / "trajectories.jsonl").read_text().splitlines()]
    assert [t["sample_id"] for t in a] == [t["sample_id"] for t in b]  # sample order
    for ta, tb in zip(a, b):
        assert len(ta["turns"]) == len(tb["turns"]), ta["sample_id"]
        for k, (ua, ub) in enumerate(zip(ta["turns"], tb["turns"])):
            assert _no_timing(ua) == _no_timing(ub), f"{ta['sample_id']} turn {k + 1}"
        assert _no_timing(ta) == _no_timing(tb), ta["sample_id"]
    ma = json.loads((local_dir / "metrics.json").read_text())
    mb = json.loads((ray_dir / "metrics.json").read_text())
    assert _no_timing(ma) == _no_timing(mb)
    return ma


@pytest.mark.ray
@pytest.mark.parametrize("agent", ["oracle", "no-clarify", "random"])
def test_embedded_ray_matches_local(ray_local, agent, tmp_path):
    samples = load_dataset("embedded")
    evaluate(samples, make_agent(agent, seed=3), seed=3, out_dir=tmp_path / "local", progress=False)
    trajs, metrics = evaluate(samples, make_agent(agent, seed=3), seed=3, out_dir=tmp_path / "ray", progress=False,
                              backend="ray", ray_actors=2)
    assert len(trajs) == 48 and trajs[0].seed == 3 and trajs[47].seed == 50
    m = _assert_same_run(tmp_path / "local", tmp_path / "ray")
    assert m == metrics
    if agent == "oracle":
        assert m["overall"]["EX"] == MeanIs(1.0, 36) and m["overall"]["FB"] == MeanIs(1.0, 12)
    elif agent == "no-clarify":
        assert m["by_group"]["ambiguous"]["metrics"]["EX"]["value"] < 1.0


@pytest.mark.ray
def test_embedded_ray_lockstep_per_actor_matches_local(ray_local, tmp_path):
    """``num_envs=3`` on the Ray backend plays three envs in lockstep inside each actor."""
    samples = load_dataset("embedded")
    evaluate(samples, make_agent("random", seed=1), seed=1, out_dir=tmp_path / "local", progress=False)
    evaluate(samples, make_agent("random", seed=1), seed=1, out_dir=tmp_path / "ray", progress=False,
             backend="ray", ray_actors=2, num_envs=3)
    _assert_same_run(tmp_path / "local", tmp_path / "ray")


@pytest.mark.ray
@pytest.mark.parametrize("agent", ["oracle", "no-clarify"])
def test_spider_dev_200_ray_matches_local(ray_local, spider_root, agent, tmp_path):
    samples = load_dataset(f"spider:{spider_root}", limit=200)
    evaluate(samples, make_agent(agent), out_dir=tmp_path / "local", progress=False)
    evaluate(samples, make_agent(agent), out_dir=tmp_path / "ray", progress=False, backend="ray", ray_actors=2)
    m = _assert_same_run(tmp_path / "local", tmp_path / "ray")
    ex = m["overall"]["EX"]
    assert ex["n"] + m["ceilings"]["gold_empty"] == 200 and ex["n"] > 150
    if agent == "oracle":
        assert ex["value"] == 1.0


@pytest.mark.ray
def test_cli_eval_ray_local_end_to_end(ray_local, tmp_path, capsys):
    from textsql_clarify.cli import main

    base = ["eval", "--agent", "no-clarify", "--no-progress", "--json"]
    assert main(base + ["--out", str(tmp_path / "local")]) == 0
    local = json.loads(capsys.readouterr().out)
    assert main(base + ["--ray", "local", "--ray-actors", "2", "--out", str(tmp_path / "ray")]) == 0
    via_ray = json.loads(capsys.readouterr().out)
    assert via_ray == local and via_ray["overall"]["EX"]["n"] == 36
    _assert_same_run(tmp_path / "local", tmp_path / "ray")


class FailsOnSample(OracleAgent):
    """The oracle, except that it raises on one sample (for the error-naming test)."""

    def __init__(self, bad_id: str):
        super().__init__()
        self.bad_id = bad_id

    def act(self, observation, info):
        if self._sample.id == self.bad_id:
            raise ValueError("boom from the agent")
        return super().act(observation, info)


@pytest.mark.ray
@pytest.mark.parametrize("num_envs", [1, 2])
def test_actor_error_names_the_sample(ray_local, num_envs, tmp_path):
    from ray import cloudpickle

    from textsql_clarify.rollout.ray_runner import RayEpisodeError

    samples = load_dataset("embedded")
    bad = samples[7].id
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the actors cannot import this test module
    try:
        with pytest.raises(RayEpisodeError, match="boom from the agent") as ei:
            evaluate(samples, FailsOnSample(bad), out_dir=tmp_path / "run", progress=False, backend="ray",
                     ray_actors=2, num_envs=num_envs)
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    assert ei.value.sample_id == bad and ei.value.index == 7
    assert f"sample {bad} (episode 7)" in str(ei.value)
    assert isinstance(ei.value.__cause__, ValueError)
    # a failed run writes no final file; the episodes that came back before the failure (if any did) stay in
    # its journal, for a later run of the same configuration to continue from, else it leaves no folder
    run = tmp_path / "run"
    assert not run.exists() or sorted(p.name for p in run.iterdir()) == ["journal.jsonl"]


@pytest.mark.ray
def test_missing_database_on_a_node_is_named(ray_local, tmp_path):
    import dataclasses

    from textsql_clarify.rollout.ray_runner import RayEpisodeError

    samples = load_dataset("embedded")[:4]
    samples[2] = dataclasses.replace(samples[2], db_path=str(tmp_path / "absent.sqlite"))
    with pytest.raises(RayEpisodeError) as ei:
        evaluate(samples, make_agent("oracle"), progress=False, backend="ray", ray_actors=1)
    text = str(ei.value)
    assert "absent.sqlite" in text and samples[2].id in text and "same path" in text


def test_without_ray_the_error_says_how_to_install(monkeypatch, tmp_path):
    from textsql_clarify.rollout.ray_runner import RayUnavailableError

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    with pytest.raises(RayUnavailableError, match=r"pip install 'textsql-clarify\[ray\]'"):
        evaluate(load_dataset("embedded")[:2], make_agent("oracle"), out_dir=tmp_path / "r", progress=False,
                 backend="ray")
    assert not (tmp_path / "r").exists()


def test_unknown_backend_is_a_value_error():
    with pytest.raises(ValueError, match="backend must be 'local' or 'ray', got 'dask'"):
        evaluate(load_dataset("embedded")[:2], make_agent("oracle"), progress=False, backend="dask")


def test_cli_ray_actors_needs_ray(tmp_path, capsys):
    from textsql_clarify.cli import main

    assert main(["eval", "--ray-actors", "2", "--no-progress", "--out", str(tmp_path / "r")]) == 2
    assert "--ray-actors needs --ray" in capsys.readouterr().err


def test_cli_ray_alone_reads_ray_address(monkeypatch):
    from textsql_clarify.rollout.ray_runner import _starts_local
    from textsql_clarify.cli import _parser

    assert _parser().parse_args(["eval", "--ray"]).ray == ""  # -> ray_address=None
    assert _parser().parse_args(["eval", "--ray", "auto", "--ray-actors", "3"]).ray_actors == 3
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert _starts_local(None) and _starts_local("local") and not _starts_local("auto")
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert not _starts_local(None) and not _starts_local("ray://10.0.0.1:10001")


def test_an_address_with_no_cluster_fails_fast():
    import socket

    from textsql_clarify.rollout.ray_runner import _check_reachable

    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        with pytest.raises(ConnectionError, match=f"no Ray cluster answers at {address}.*ray start --head"):
            _check_reachable(address, timeout_s=2.0)
    _check_reachable("auto")  # left to Ray


# -- more actors than CPUs ---------------------------------------------------------------------------
@contextmanager
def _deadline(seconds: int, what: str):
    """Fail (instead of hanging the suite) when the block runs longer than ``seconds`` (SIGALRM)."""
    def fire(*_):
        raise TimeoutError(f"{what}: still running after {seconds} s (a hang)")
    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _no_timing_keys(metrics: dict) -> dict:
    """``metrics`` without its top-level timing keys (any key naming ``elapsed`` or ``time``)."""
    return {k: v for k, v in metrics.items() if "elapsed" not in k and "time" not in k}


@pytest.mark.ray
def test_more_ray_actors_than_cpus_does_not_hang(ray_local):
    """``evaluate(backend="ray", ray_actors=4)`` on a 2-CPU local Ray: two actors can never be scheduled.
    The runner used to hand chunks to those pending actors and wait on them forever (the run did not end
    in 570 s); now only actors that are up take work, and the metrics equal the local runner's."""
    assert ray_local.cluster_resources()["CPU"] == 2
    samples = load_dataset("embedded")[:4]
    _, local = evaluate(samples, OracleAgent(), progress=False)
    with _deadline(300, "ray_actors=4 on 2 CPUs"):
        with pytest.warns(UserWarning, match="4 Ray actors"):
            _, remote = evaluate(samples, OracleAgent(), progress=False, backend="ray", ray_actors=4)
    assert remote["n_trajectories"] == local["n_trajectories"] == 4
    assert _no_timing_keys(remote) == _no_timing_keys(local)
