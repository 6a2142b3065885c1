"""OpenEnv sessions are isolated: each runs its SQL on its own connection, a client that leaves mid-step has its
query interrupted and its slot freed, and a disconnect logs no traceback. Orderings and events only; the bounds
below are "did not hang" bounds, never timing claims (timings: bench/bench_openenv_sessions.py)."""
from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time

import pytest

pytest.importorskip("openenv", reason="the OpenEnv adapter needs openenv-core (extra 'openenv')")
uvicorn = pytest.importorskip("uvicorn", reason="serving the OpenEnv app needs uvicorn (extra 'openenv')")
ws_client = pytest.importorskip("websockets.sync.client", reason="the raw WebSocket client needs websockets")
from websockets.exceptions import ConnectionClosed  # noqa: E402

from textsql_clarify.datasets import load_dataset  # noqa: E402
from textsql_clarify.integrations.openenv_server import (  # noqa: E402
    SharedResources, TextSQLClarifyEnvironment, make_app)
from textsql_clarify.sql import sandbox as sandbox_mod  # noqa: E402
from textsql_clarify.sql.private import open_private_count  # noqa: E402

SLOW_SQL = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
HOSTILE, VICTIM = "uni-ans-001", "uni-ans-002"  # two samples on the same database (university.sqlite)
#: "did not hang" bound (seconds); the statements' own time limit is far above it
HANG_S = 60.0
LIMIT_S = 10 * HANG_S


@pytest.fixture(scope="module")
def samples():
    return load_dataset("embedded")


class _SignallingSandbox:
    """A session's sandbox that signals when a query starts, then runs it on the real sandbox."""

    def __init__(self, real):
        self.real, self.started = real, threading.Event()

    def execute(self, sql):
        self.started.set()
        return self.real.execute(sql)

    def __getattr__(self, name):
        return getattr(self.real, name)


def test_a_slow_query_does_not_block_another_sessions_query_on_the_same_database(samples):
    by_id = {s.id: s for s in samples}
    assert by_id[HOSTILE].db_path == by_id[VICTIM].db_path
    shared = SharedResources(samples=samples, timeout_s=LIMIT_S)
    hostile, victim = TextSQLClarifyEnvironment(shared), TextSQLClarifyEnvironment(shared)
    hostile.reset(sample_id=HOSTILE)
    victim.reset(sample_id=VICTIM)
    assert hostile.env._sandbox is not victim.env._sandbox  # one connection each, to the same file
    assert hostile.env._sandbox.db_path == victim.env._sandbox.db_path
    sandbox = hostile.env._sandbox = _SignallingSandbox(hostile.env._sandbox)
    hostile_out: list = []
    hostile_thread = threading.Thread(target=lambda: hostile_out.append(hostile.step(f"<sql>{SLOW_SQL}</sql>")),
                                      daemon=True)
    hostile_thread.start()
    assert sandbox.started.wait(HANG_S), "the hostile query did not start"
    victim_out: list = []
    victim_thread = threading.Thread(target=lambda: victim_out.append(victim.step(f"<sql>{by_id[VICTIM].gold_sql}</sql>")),
                                     daemon=True)
    victim_thread.start()
    victim_thread.join(HANG_S)
    try:
        assert not victim_thread.is_alive(), "the victim's query waited for the hostile one"
        assert hostile_thread.is_alive() and hostile_out == [], "the hostile query ended before the victim's"
    finally:
        while hostile_thread.is_alive():
            assert hostile.interrupt() is True  # the session's own connection: nobody else's statement stops
            hostile_thread.join(0.05)
    (v,) = victim_out
    assert v.done and v.reward == 1.0 and v.scores["ex"] == 1.0
    (h,) = hostile_out
    execution = h.trajectory["turns"][0]["execution"]
    assert h.done and h.reward == 0.0 and execution["error_kind"] == "runtime"
    for env in (hostile, victim):
        env.close()
    assert sandbox.real.closed and victim.env._static == {}


def test_shared_connection_option_keeps_one_connection_per_database(samples):
    shared = SharedResources(samples=samples, sql_connection="shared")
    a, b = TextSQLClarifyEnvironment(shared), TextSQLClarifyEnvironment(shared)
    a.reset(sample_id=HOSTILE)
    b.reset(sample_id=VICTIM)
    assert a.env._sandbox is b.env._sandbox
    assert a.interrupt() is False  # a shared connection may be running another session's statement
    a.close()
    b.close()


@contextlib.contextmanager
def _serve(app):
    """``app`` on an ephemeral 127.0.0.1 port with uvicorn in a thread, logging through the root logger
    (``log_config=None``) at uvicorn's ``warning`` level, as ``--log-level warning`` serves it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + HANG_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the OpenEnv test server did not start")
        time.sleep(0.05)
    try:
        yield f"ws://127.0.0.1:{port}/ws"
    finally:
        server.should_exit = True
        thread.join(timeout=HANG_S)
        sock.close()


def _ask(ws, kind, data):
    ws.send(json.dumps({"type": kind, "data": data}))
    return json.loads(ws.recv(timeout=HANG_S))


def _first_reply(ws, kind, data):
    """The server's first reply to ``kind``: a refused session (CAPACITY_REACHED) is answered as soon as the
    socket opens and closed at once, so the request may find the socket closed; the refusal is read anyway."""
    with contextlib.suppress(ConnectionClosed):
        ws.send(json.dumps({"type": kind, "data": data}))
    return json.loads(ws.recv(timeout=HANG_S))


def _wait_for(condition, what):
    deadline = time.monotonic() + HANG_S
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen"
        time.sleep(0.02)


def _drop_during_slow_step(url, while_running=lambda: None):
    """A raw client that resets, sends the slow query, waits until the server runs it, calls
    ``while_running()``, and closes its socket without reading the reply."""
    with ws_client.connect(url, open_timeout=HANG_S) as ws:
        assert _ask(ws, "reset", {"sample_id": HOSTILE})["type"] == "observation"
        ws.send(json.dumps({"type": "step", "data": {"action": f"<sql>{SLOW_SQL}</sql>"}}))
        _wait_for(lambda: len(sandbox_mod._WATCHDOG.running) > 0, "the slow query's start")
        while_running()


def test_a_dropped_clients_slot_is_reused_and_its_query_interrupted(samples):
    app = make_app(samples=samples, max_concurrent_envs=1, timeout_s=LIMIT_S)
    before = open_private_count()
    with _serve(app) as url:
        held: list[int] = []
        _drop_during_slow_step(url, lambda: held.append(open_private_count()))
        assert held == [before + 1], (held, before)  # the session's own connection
        refused = 0
        deadline = time.monotonic() + HANG_S  # far below the statement's own limit (LIMIT_S)
        while True:
            with ws_client.connect(url, open_timeout=HANG_S) as ws:
                reply = _first_reply(ws, "reset", {"sample_id": VICTIM})
                if reply["type"] == "observation":
                    assert reply["data"]["observation"]["sample_id"] == VICTIM
                    step = _ask(ws, "step", {"action": f"<sql>{next(s for s in samples if s.id == VICTIM).gold_sql}</sql>"})
                    assert step["data"]["reward"] == 1.0
                    break
            assert reply["data"]["code"] == "CAPACITY_REACHED"
            refused += 1
            assert time.monotonic() < deadline, f"the dropped client's slot stayed taken ({refused} refusals)"
            time.sleep(0.05)
        assert sandbox_mod._WATCHDOG.running == {}  # the slow query is no longer running
        _wait_for(lambda: open_private_count() == before, "closing the sessions' connections")


def test_a_disconnect_logs_at_most_one_line(samples, caplog):
    app = make_app(samples=samples, max_concurrent_envs=2, timeout_s=LIMIT_S)
    caplog.set_level(logging.DEBUG)
    before = open_private_count()
    with _serve(app) as url:
        with ws_client.connect(url, open_timeout=HANG_S) as ws:  # a clean close message, then the socket closes
            assert _ask(ws, "reset", {"index": 0})["type"] == "observation"
            ws.send(json.dumps({"type": "close", "data": {}}))
        with ws_client.connect(url, open_timeout=HANG_S) as ws:  # the socket closes between episodes
            assert _ask(ws, "reset", {"index": 0})["type"] == "observation"
        _drop_during_slow_step(url)  # the socket closes during a step
        _wait_for(lambda: sandbox_mod._WATCHDOG.running == {}, "the slow query's end")
        _wait_for(lambda: open_private_count() == before, "closing the three sessions")
    records = [r for r in caplog.records if r.name.split(".")[0] in ("uvicorn", "textsql_clarify", "openenv")]
    assert [r for r in records if r.exc_info or r.levelno >= logging.WARNING] == []
    assert all("\n" not in r.getMessage() for r in records)
    assert len(records) <= 3, [r.getMessage() for r in records]  # three sessions closed, at most a line each
