"""evaluate() as a new user calls it: an agent given by its spec string is the
agent that spec builds, and the envs a run opens are closed when it ends."""
from __future__ import annotations

from textsql_clarify.baselines.agents import make_agent
from textsql_clarify.rollout.evaluation import evaluate
from textsql_clarify.datasets import load_dataset
from textsql_clarify.envs.env import TextSQLClarifyEnv


def _strip(m):
    """``m`` without its timing fields (``elapsed_s`` at any depth): everything else must be equal."""
    if isinstance(m, dict):
        return {k: _strip(v) for k, v in m.items() if k != "elapsed_s"}
    if isinstance(m, list):
        return [_strip(v) for v in m]
    return m


def test_a_spec_string_is_the_agent_it_names():
    samples = load_dataset("embedded")
    for spec in ("oracle", "no-clarify", "random"):
        t1, m1 = evaluate(samples, spec, seed=3, progress=False)
        t2, m2 = evaluate(samples, make_agent(spec, seed=3), seed=3, progress=False)
        assert _strip([t.to_dict() for t in t1]) == _strip([t.to_dict() for t in t2]), spec
        assert m1["run"]["agent"] == spec
        assert _strip(m1) == {**_strip(m2), "run": m1["run"]}
        assert m1["run"]["privileged"] == m2["run"]["privileged"] == bool(make_agent(spec).privileged)


def test_the_envs_of_a_run_are_closed(monkeypatch):
    closed: list[int] = []
    real = TextSQLClarifyEnv.close

    def counting(self):
        closed.append(id(self))
        return real(self)

    monkeypatch.setattr(TextSQLClarifyEnv, "close", counting)
    samples = load_dataset("embedded", limit=6)
    evaluate(samples, "oracle", progress=False)
    assert len(closed) == 1
    evaluate(samples, "oracle", progress=False, num_envs=3)
    assert len(closed) == 1 + 3


def test_no_samples_is_an_error_for_every_backend():
    import pytest

    samples = load_dataset("embedded")
    for backend in ("local", "ray"):
        with pytest.raises(ValueError, match="at least one sample"):
            evaluate(samples, "oracle", progress=False, limit=0, backend=backend)
