"""Shared test fixtures and the test suite's markers.

* Where ../shared/data is, and skips when it is absent (``spider_root``, ``shared_data``).
* :func:`generous_bound`: the one way a test bounds wall-clock time. Tests assert that a mechanism
  fired (a ``timeout`` error kind, a guard's message, an interrupt); the bound only says "it did not
  hang", several seconds, so that a loaded machine keeps it. Tight timings live in ``bench/``
  (``bench/bench_sandbox_limits.py``).
* Automatic markers (``pytest_collection_modifyitems``): a test is marked ``model`` when it uses a
  model-loading fixture or calls a model-loading helper (:data:`MODEL_FIXTURES`,
  :data:`MODEL_HELPERS`), and ``realdata`` when it uses ``spider_root`` / ``shared_data`` or names
  ``SHARED`` / ``SHARED_DATA`` / ``SPIDER``. So ``pytest -m "not model"`` is the quick loop.
* A runtime check of those markers: every test that actually loaded a model (MiniLM through
  ``textsql_clarify.minilm``, a causal LM through ``textsql_clarify.simulators.hf_models``) without
  the ``model`` marker is listed at the end of the run. The env's default feedback judge loads
  MiniLM lazily (~6 s, once per process), so env tests load it without naming it; they stay in the
  quick loop on purpose, so that it scores feedback with the same judge as the full run.
"""
from __future__ import annotations

import inspect
import re
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
SHARED_DATA = SHARED / "data"
SPIDER = SHARED_DATA / "spider_dev"

#: Seconds a "did not hang" bound allows (:func:`generous_bound`): far above any time limit the tests
#: set (<= 0.5 s), so only a mechanism that did not fire can pass it.
GENEROUS_S = 10.0

#: Fixtures that load a real model (tests using them are marked ``model``).
MODEL_FIXTURES = frozenset({"smollm2"})
#: Helpers whose call in a test's source loads (or needs) a real model.
MODEL_HELPERS = re.compile(r"\b(_smollm2_or_skip\(|_minilm_or_skip\(|test_minilm_\w+|load_minilm\(|load_causal_lm\(|"
                           r"load_backend\(|MiniLMGrounder\()|\"kind\": \"transformers\"")
#: Fixtures and names that read ../shared/data (tests using them are marked ``realdata``).
REALDATA_FIXTURES = frozenset({"spider_root", "shared_data"})
REALDATA_NAMES = re.compile(r"\b(SHARED|SHARED_DATA|SPIDER)\b")


@pytest.fixture
def spider_root() -> Path:
    """Path of ../shared/data/spider_dev; skips the test when it is absent."""
    if not (SPIDER / "dev.json").is_file():
        pytest.skip("real data absent: ../shared/data/spider_dev/dev.json not found")
    return SPIDER


@pytest.fixture
def shared_data() -> Path:
    """Path of ../shared/data; skips the test when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip("real data absent: ../shared/data not found")
    return SHARED_DATA


# -- wall-clock: a generous "did not hang" bound, never a tight one --------------------------------
@contextmanager
def generous_bound(what: str, seconds: float = GENEROUS_S, *,
                   stop: Callable[[], None] | None = None) -> Iterator[None]:
    """Fail the test when the ``with`` block runs longer than ``seconds`` (wall clock).

    Args:
        what: what the block does, for the failure message.
        seconds: the bound, in seconds; keep the default (:data:`GENEROUS_S`) unless the block is
            known to need more. Assert the mechanism (an error kind, a message) separately.
        stop: called from a timer thread once ``seconds`` have passed (e.g. ``sandbox.interrupt``),
            so that a mechanism that did not fire fails the test instead of hanging it.

    Raises:
        pytest.fail.Exception: the block took longer than ``seconds``.
    """
    timer = threading.Timer(seconds, stop) if stop is not None else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    t0 = time.perf_counter()
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()
    check_generous(time.perf_counter() - t0, what, seconds)


def check_generous(spent: float, what: str, seconds: float = GENEROUS_S) -> None:
    """Fail the test when ``spent`` (wall seconds, measured elsewhere, e.g. in a child process) is over the
    generous bound :func:`generous_bound` uses. Assert the mechanism (an error kind, a message) separately.

    Raises:
        pytest.fail.Exception: ``spent > seconds``.
    """
    if spent > seconds:
        pytest.fail(f"{what} took {spent:.2f} s, over the generous {seconds:g} s bound: the limit did not fire")


# -- metrics.json cells ----------------------------------------------------------------------------
class MeanIs:
    """Compares equal to a metrics mean cell ``{"value", "n", "ci95"}`` (or a ``Mean.to_dict()``) with this
    value and n: ``m["overall"]["EX"] == MeanIs(1.0, 36)``. The interval (``ci95``) is asserted
    by tests/test_bootstrap.py; here only value and n. ``value`` may be a ``pytest.approx``."""

    def __init__(self, value, n: int):
        self.value, self.n = value, n

    def __eq__(self, other) -> bool:
        if not isinstance(other, dict) or not {"value", "n"} <= set(other):
            return NotImplemented if not isinstance(other, dict) else False
        return self.value == other["value"] and self.n == other["n"]

    def __repr__(self) -> str:
        return f"MeanIs(value={self.value!r}, n={self.n!r})"


# -- markers ---------------------------------------------------------------------------------------
def _source(item: pytest.Item) -> str:
    fn = getattr(item, "function", None)
    try:
        return inspect.getsource(fn) if fn is not None else ""
    except (OSError, TypeError):
        return ""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``model`` / ``realdata`` the tests that use a model-loading or real-data fixture or helper."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        src = _source(item)
        if names & MODEL_FIXTURES or MODEL_HELPERS.search(src) or MODEL_HELPERS.search(item.name):
            item.add_marker(pytest.mark.model)
        if names & REALDATA_FIXTURES or REALDATA_NAMES.search(src):
            item.add_marker(pytest.mark.realdata)


# -- runtime check: which tests really loaded a model ---------------------------------------------
_LOADS: list[str] = []  # model loads during the current test
_UNMARKED: dict[str, list[str]] = {}  # test id -> loads, for tests without the model marker


def _watch(module, name: str, label: str) -> None:
    real = getattr(module, name)

    def watched(*args, **kwargs):
        _LOADS.append(label)
        return real(*args, **kwargs)

    watched.__wrapped__ = real  # type: ignore[attr-defined]
    watched.__doc__ = real.__doc__
    setattr(module, name, watched)


def pytest_configure(config: pytest.Config) -> None:
    """Watch the two model loaders (``minilm._load``, ``hf_models.load_causal_lm``)."""
    from textsql_clarify import minilm
    from textsql_clarify.simulators import hf_models

    if getattr(minilm._load, "_watched", False) is False:
        _watch(minilm, "_load", "MiniLM")
        minilm._load._watched = True  # type: ignore[attr-defined]
        _watch(hf_models, "load_causal_lm", "causal LM")
        hf_models.load_causal_lm._watched = True  # type: ignore[attr-defined]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    """Record, per test, the model loads of a test that carries no ``model`` marker."""
    _LOADS.clear()
    marked = item.get_closest_marker("model") is not None
    try:
        yield
    finally:
        if _LOADS and not marked:
            _UNMARKED[item.nodeid] = sorted(set(_LOADS))
        _LOADS.clear()


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    """List the tests that loaded a model without the ``model`` marker (MiniLM through the env's judge)."""
    if not _UNMARKED:
        return
    terminalreporter.section("tests that load a model without @pytest.mark.model")
    for nodeid, loads in _UNMARKED.items():
        terminalreporter.write_line(f"{nodeid}: loaded {', '.join(loads)}")
