"""OpenEnv adapter: a real OpenEnv server on 127.0.0.1 played through the real OpenEnv client, and the
in-process Environment, both checked against the local env on the same actions."""
from __future__ import annotations

import dataclasses
import json
import shutil
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

pytest.importorskip("openenv", reason="the OpenEnv adapter needs openenv-core (extra 'openenv')")
uvicorn = pytest.importorskip("uvicorn", reason="serving the OpenEnv app needs uvicorn (extra 'openenv')")

from textsql_clarify.baselines.agents import OracleAgent  # noqa: E402
from textsql_clarify.datasets import load_dataset  # noqa: E402
from textsql_clarify.envs.env import TextSQLClarifyEnv  # noqa: E402
from textsql_clarify.integrations.openenv_server import (  # noqa: E402
    NoEpisodeError, RequestError, ResetArgumentError, SampleIndexError, SharedResources, TextSQLClarifyAction,
    TextSQLClarifyClient, TextSQLClarifyEnvironment, UnknownSampleError, _parser, make_app)
from textsql_clarify.simulators.rule_based import RuleBasedUser  # noqa: E402

SAMPLE = "uni-scope-001"  # ambiguous (scope): the oracle asks once, then answers
PRESET = "shaped"         # the clarification costs 0.05, so the episode reward is not just EX


@pytest.fixture(scope="module")
def samples():
    return load_dataset("embedded")


@pytest.fixture(scope="module")
def local_episode(samples):
    """The oracle's actions on SAMPLE with the local env, and what the env gave back for each."""
    env = TextSQLClarifyEnv(samples=samples, reward_preset=PRESET)
    obs, info = env.reset(options={"sample_id": SAMPLE})
    agent = OracleAgent()
    agent.begin_episode(env.current_sample)
    steps = []
    for _ in range(env.max_turns):
        action = agent.act(obs, info)
        obs, reward, terminated, truncated, info = env.step(action)
        steps.append({"action": action, "reward": reward, "last_message": obs["last_message"],
                      "done": terminated or truncated, "components": info["reward_components"],
                      "reply": info["messages"][-1]["content"]})
        if terminated or truncated:
            return {"steps": steps, "scores": info["scores"], "outcome": info["trajectory"].outcome}
    raise AssertionError("the oracle's episode did not end")


@pytest.fixture(scope="module")
def server_url(samples):
    """A uvicorn server for make_app on an ephemeral 127.0.0.1 port, in a thread; stopped after the module."""
    app = make_app(samples=samples, reward_preset=PRESET, max_concurrent_envs=2)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="critical"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the OpenEnv test server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


def _client(url):
    return TextSQLClarifyClient(base_url=url, connect_timeout_s=10, message_timeout_s=60).sync()


def test_full_episode_through_the_openenv_client_matches_the_local_env(server_url, local_episode):
    clarify, sql = (s["action"] for s in local_episode["steps"])
    assert clarify.startswith("<clarify>") and sql.startswith("<sql>")
    with _client(server_url) as client:
        first = client.reset(sample_id=SAMPLE)
        obs = first.observation
        assert (first.done, obs.sample_id, obs.phase, obs.turn) == (False, SAMPLE, "interactive", 0)
        assert obs.messages[0]["role"] == "system" and "Database schema:" in obs.db_schema + obs.messages[0]["content"]
        assert obs.messages[-1] == {"role": "user", "content": obs.question}

        r1 = client.step(TextSQLClarifyAction(action=clarify))
        want1 = local_episode["steps"][0]
        assert r1.done is False
        assert r1.observation.last_message == want1["last_message"] != ""  # the rule-based user's reply
        assert r1.observation.messages[-1] == {"role": "user", "content": want1["reply"]}
        assert r1.reward == pytest.approx(want1["reward"]) == pytest.approx(-0.05)
        assert r1.observation.reward_components["turn_penalty"] == -1.0
        assert r1.observation.reward_components["ex"] is None  # undefined, not 0

        r2 = client.step(sql)  # a plain string works too
        want2 = local_episode["steps"][1]
        assert r2.done is True and r2.observation.terminated is True
        assert r2.reward == pytest.approx(want2["reward"]) == pytest.approx(1.0)
        total = sum(s["reward"] for s in local_episode["steps"])
        assert r2.observation.episode_reward == pytest.approx(total) == pytest.approx(0.95)
        assert r2.observation.scores["ex"] == local_episode["scores"]["ex"] == 1.0
        assert r2.observation.trajectory["outcome"] == local_episode["outcome"] == "sql"
        assert [t["action_type"] for t in r2.observation.trajectory["turns"]] == ["clarify", "sql"]

        state = client.state()
        assert (state.sample_id, state.step_count, state.done) == (SAMPLE, 2, True)
        assert state.episode_reward == pytest.approx(0.95) and state.episode_id


def test_server_errors_reach_the_client(server_url):
    with _client(server_url) as client:
        with pytest.raises(RuntimeError, match="unknown sample_id 'nope'"):
            client.reset(sample_id="nope")
        with pytest.raises(RuntimeError, match="unknown reset argument"):
            client.reset(sample="uni-ans-001")
        client.reset(sample_id="uni-ans-001")
        r = client.step("<sql>SELECT 1</sql>")
        assert r.done is True and r.reward == 0.0 and r.observation.scores["ex"] == 0.0
        with pytest.raises(RuntimeError, match="call reset"):
            client.step("<sql>SELECT 1</sql>")
        # the session survives errors: a new episode starts on the same connection
        assert client.reset(index=0).observation.sample_id == "uni-ans-001"


def test_schema_route_describes_the_action(server_url):
    with urllib.request.urlopen(f"{server_url}/schema", timeout=30) as resp:
        schema = json.loads(resp.read())
    assert "action" in schema["action"]["properties"]
    assert {"db_schema", "messages", "reward_components", "episode_reward"} <= set(schema["observation"]["properties"])
    # the descriptions point readers to documents that ship with the package (README, docs/), not to a design file
    assert "DESIGN" not in json.dumps(schema)
    assert "README" in schema["action"]["description"]


def test_environment_in_process_matches_the_local_env(samples):
    shared = SharedResources(samples=samples, reward_preset=PRESET)
    env = TextSQLClarifyEnvironment(shared)
    assert env.state.sample_id is None and env.state.step_count == 0
    # a seed draws the same sample as the gym env with that seed
    local = TextSQLClarifyEnv(samples=samples, reward_preset=PRESET)
    _obs, info = local.reset(seed=7)
    obs = env.reset(seed=7, episode_id="ep-1")
    assert obs.sample_id == info["sample_id"] and env.state.episode_id == "ep-1"
    # a malformed action: format component -1, one retry, then the episode ends as an abstention
    env.reset(index=2)
    local.reset(options={"index": 2})
    for k in range(2):
        got = env.step(TextSQLClarifyAction(action="no tags here"))
        _o, want, terminated, _t, linfo = local.step("no tags here")
        assert got.reward == pytest.approx(want) and got.reward_components["format"] == -1.0
        assert got.done is terminated is (k == 1)
    assert got.trajectory["outcome"] == linfo["trajectory"].outcome == "abstain"
    assert env.state.done is True and env.state.step_count == 2
    with pytest.raises(ValueError, match="either 'sample_id' or 'index'"):
        env.reset(sample_id=SAMPLE, index=0)


def test_private_resources_and_bad_options():
    env = TextSQLClarifyEnvironment(limit=3, reward_preset="binary")
    assert len(env.shared.samples) == 3
    assert env.reset(index=2).sample_id == "uni-ans-003"
    with pytest.raises(ValueError, match="reward preset"):
        SharedResources(limit=1, reward_preset="no-such-preset")
    with pytest.raises(ValueError, match="max_clarifications"):
        SharedResources(limit=1, max_clarifications=-1)
    args = _parser().parse_args(["--dataset", "embedded", "--host", "127.0.0.1", "--port", "8123"])
    assert (args.dataset, args.host, args.port, args.simulator) == ("embedded", "127.0.0.1", 8123, "rule")


# -- regressions: a failed reset changes nothing; a slow query stalls no other session; HTTP 4xx ---------------
DRIFT = "uni-drift-001"   # answerable with a drift: the first correct SQL pays 1.0 and the episode goes on
OTHER = "uni-ans-002"
SLOW_SQL = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
#: "did not hang" bound of the concurrency tests (seconds); never a timing claim
HANG_S = 60.0


class _FakeJudge:
    """A FB judge that accepts every feedback and records, per call, whether another thread could take
    ``lock`` while the judge ran (it must not: judge calls are serialised)."""

    name = "fake"

    def __init__(self):
        self.lock = None
        self.free_during_call: list[bool] = []

    def judge(self, sample, feedback, schema_identifiers):
        self.free_during_call.append(_free_elsewhere(self.lock))
        return True


class _ProbingUser(RuleBasedUser):
    """The rule-based user, recording per ``respond`` whether another thread could take ``lock``."""

    def __init__(self):
        super().__init__()
        self.lock = None
        self.free_during_call: list[bool] = []

    def respond(self, batch):
        self.free_during_call.append(_free_elsewhere(self.lock))
        return super().respond(batch)


def _free_elsewhere(lock) -> bool:
    """Whether a thread other than this one can acquire ``lock`` right now."""
    got = []

    def probe():
        ok = lock.acquire(blocking=False)
        if ok:
            lock.release()
        got.append(ok)

    t = threading.Thread(target=probe)
    t.start()
    t.join()
    return got[0]


def test_failed_reset_changes_nothing_and_a_new_episode_starts_at_zero(samples):
    by_id = {s.id: s for s in samples}
    env = TextSQLClarifyEnvironment(SharedResources(samples=samples, feedback_judge=_FakeJudge()))
    env.reset(sample_id=DRIFT, episode_id="ep-drift")
    first = env.step(f"<sql>{by_id[DRIFT].gold_sql}</sql>")
    assert (first.reward, first.done, first.episode_reward) == (1.0, False, 1.0)  # the drift turn follows
    before = env.state.model_dump()
    bad = [({"sample_id": OTHER, "episode_id": 123}, ResetArgumentError, "'episode_id' must be a string"),
           ({"sample_id": OTHER, "episode_id": "x" * 256}, ResetArgumentError, "at most 255"),
           ({"seed": -1}, ResetArgumentError, "'seed' must be an int >= 0"),
           ({"seed": "x"}, ResetArgumentError, "'seed'"), ({"seed": True}, ResetArgumentError, "'seed'"),
           ({"sample_id": 5}, ResetArgumentError, "'sample_id' must be a string"),
           ({"index": "0"}, ResetArgumentError, "'index' must be an int"),
           ({"index": 999}, SampleIndexError, "'index' 999 is out of range 0..47"),
           ({"sample_id": "nope"}, UnknownSampleError, "unknown sample_id 'nope'"),
           ({"sample_id": OTHER, "index": 0}, ResetArgumentError, "either 'sample_id' or 'index'"),
           ({"sample": OTHER}, ResetArgumentError, "unknown reset argument")]
    for kwargs, error, message in bad:
        with pytest.raises(error, match=message):
            env.reset(**kwargs)
        assert env.state.model_dump() == before, kwargs
        assert env.env.current_sample.id == DRIFT, kwargs
    assert issubclass(UnknownSampleError, KeyError) and issubclass(SampleIndexError, IndexError)

    # a reset failing inside the env (here: the database of a sample not yet seen) is undone too
    def broken(_sample):
        raise OSError("database unreadable")

    env.env._build_static = broken
    with pytest.raises(OSError, match="unreadable"):
        env.reset(sample_id=OTHER)
    del env.env._build_static
    assert env.state.model_dump() == before and env.env.current_sample.id == DRIFT
    # ... so the drift episode goes on where it was, env and state in step
    post = env.step(f"<sql>{by_id[DRIFT].drift.post_gold_sql}</sql>")
    assert (post.sample_id, post.done, post.reward, post.episode_reward) == (DRIFT, True, 1.0, 2.0)
    assert (env.state.sample_id, env.state.step_count, env.state.episode_reward) == (DRIFT, 2, 2.0)

    # a new episode starts from zero: its one correct SQL makes an episode reward of 1.0, not 3.0
    obs = env.reset(sample_id=OTHER, episode_id="ep-other")
    assert (obs.episode_reward, env.state.episode_reward, env.state.step_count) == (0.0, 0.0, 0)
    assert (env.state.sample_id, env.state.episode_id, env.state.done) == (OTHER, "ep-other", False)
    r = env.step(f"<sql>{by_id[OTHER].gold_sql}</sql>")
    assert (r.sample_id, r.reward, r.episode_reward, env.state.episode_reward) == (OTHER, 1.0, 1.0, 1.0)
    with pytest.raises(NoEpisodeError, match=r"call reset\(\) before step\(\)"):
        env.step("<sql>SELECT 1</sql>")


def test_failed_reset_over_the_websocket_keeps_the_episode(server_url, samples):
    by_id = {s.id: s for s in samples}
    with _client(server_url) as client:
        client.reset(sample_id=DRIFT, episode_id="ep-ws")
        assert client.step(f"<sql>{by_id[DRIFT].gold_sql}</sql>").observation.episode_reward == pytest.approx(1.0)
        with pytest.raises(RuntimeError, match="'episode_id' must be a string"):
            client.reset(sample_id=OTHER, episode_id=123)
        state = client.state()
        assert (state.sample_id, state.episode_id, state.step_count) == (DRIFT, "ep-ws", 1)
        assert state.episode_reward == pytest.approx(1.0)
        client.reset(sample_id=OTHER)
        r = client.step(f"<sql>{by_id[OTHER].gold_sql}</sql>")
        assert (r.observation.sample_id, r.reward) == (OTHER, 1.0)
        assert r.observation.episode_reward == pytest.approx(1.0) == client.state().episode_reward


def _post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_http_routes_answer_bad_requests_with_4xx_and_the_message(server_url):
    status, body = _post(f"{server_url}/step", {"action": {"action": "<sql>SELECT 1</sql>"}})
    assert status == 409 and "call reset() before step()" in body["detail"]
    for data, message in [({"sample_id": "nope"}, "unknown sample_id 'nope'"),
                          ({"index": 999}, "'index' 999 is out of range"),
                          ({"bogus": 1}, "unknown reset argument(s) ['bogus']"),
                          ({"sample_id": OTHER, "index": 0}, "either 'sample_id' or 'index'")]:
        status, body = _post(f"{server_url}/reset", data)
        assert status == 400 and message in body["detail"], (data, status, body)
    status, body = _post(f"{server_url}/reset", {"seed": -1})  # OpenEnv's own ResetRequest check
    assert status == 422
    status, body = _post(f"{server_url}/reset", {"sample_id": OTHER})
    assert status == 200 and body["observation"]["sample_id"] == OTHER and body["done"] is False
    assert RequestError.status_code == 400 and NoEpisodeError.status_code == 409


class _SignallingSandbox:
    """A session's sandbox that signals when a query starts, then runs it on the real sandbox."""

    def __init__(self, real):
        self.real, self.started = real, threading.Event()

    def execute(self, sql):
        self.started.set()
        return self.real.execute(sql)

    def __getattr__(self, name):
        return getattr(self.real, name)


def test_a_slow_query_does_not_stall_other_sessions(samples, tmp_path):
    """A hostile session's query runs (on its own database, under a 60 s limit) while a victim session
    plays a clarification, a feedback and a SQL step; all three finish before the hostile query does,
    which only ends when the test interrupts it. With a lock held across whole steps the victim would
    wait for the query instead."""
    base = next(s for s in samples if s.id == OTHER)
    copy_db = tmp_path / "copy.sqlite"
    shutil.copy(base.db_path, copy_db)
    slow_sample = dataclasses.replace(base, id="copy-ans-002", db_path=str(copy_db))
    judge, user = _FakeJudge(), _ProbingUser()
    shared = SharedResources(samples=[*samples, slow_sample], simulator=user, feedback_judge=judge, timeout_s=HANG_S)
    judge.lock, user.lock = shared.judge_lock, shared.simulator_lock
    hostile, victim = TextSQLClarifyEnvironment(shared), TextSQLClarifyEnvironment(shared)
    hostile.reset(sample_id=slow_sample.id)
    sandbox = hostile.env._sandbox = _SignallingSandbox(hostile.env._sandbox)
    hostile_out: list = []
    hostile_thread = threading.Thread(target=lambda: hostile_out.append(hostile.step(f"<sql>{SLOW_SQL}</sql>")),
                                      daemon=True)
    hostile_thread.start()
    assert sandbox.started.wait(HANG_S), "the hostile query did not start"

    victim_out: list = []

    def play_victim():
        victim.reset(sample_id="uni-missent-001")  # unanswerable: no SQL on the way
        victim_out.append(victim.step("<clarify>Which staff do you mean?</clarify>"))
        victim_out.append(victim.step("<feedback>The database records no administrative staff.</feedback>"))
        victim.reset(sample_id=OTHER)
        victim_out.append(victim.step(f"<sql>{base.gold_sql}</sql>"))

    victim_thread = threading.Thread(target=play_victim, daemon=True)
    victim_thread.start()
    victim_thread.join(HANG_S)
    try:
        assert not victim_thread.is_alive(), "the victim's steps waited for the hostile query"
        assert hostile_thread.is_alive() and hostile_out == [], "the hostile query ended before the victim's steps"
    finally:
        while hostile_thread.is_alive():  # end the hostile query (interrupt: a runtime error, not a timeout)
            sandbox.real.interrupt()
            hostile_thread.join(0.05)
    clarify, feedback, sql = victim_out
    assert clarify.action_type == "clarify" and clarify.last_message and not clarify.done
    assert feedback.done and feedback.scores["fb"] == 1.0
    assert sql.sample_id == OTHER and sql.reward == 1.0 and sql.scores["ex"] == 1.0
    (h,) = hostile_out
    assert h.done and h.reward == 0.0 and h.trajectory["turns"][0]["execution"]["error_kind"] == "runtime"
    # the shared user and judge were each called under their lock (no other thread could take it)
    assert user.free_during_call == [False] and judge.free_during_call == [False]


def test_server_flags_serve_test_suite_ex(tmp_path):
    """``--ex-mode suite`` reaches every session's env: the gold earns ``ex_suite`` 1.0 over k=2 variants built
    into ``--suite-cache-dir``; the suite options without it are refused before anything is built."""
    from textsql_clarify.integrations.openenv_server import app_options

    args = _parser().parse_args(["--limit", "3", "--ex-mode", "suite", "--suite-k", "2",
                                 "--suite-cache-dir", str(tmp_path), "--reward-preset", "suite"])
    opts = app_options(args)
    assert (opts["ex_mode"], opts["suite_k"], opts["reward_preset"]) == ("suite", 2, "suite")
    opts.pop("max_concurrent_envs")
    env = TextSQLClarifyEnvironment(**opts)
    obs = env.reset(sample_id="uni-ans-003")
    gold = next(s for s in env.shared.samples if s.id == "uni-ans-003").gold_sql
    obs = env.step(TextSQLClarifyAction(action=f"<sql>{gold}</sql>"))
    assert obs.done and obs.reward == 1.0
    assert obs.reward_components["ex_suite"] == 1.0 and obs.reward_components["ex"] == 1.0
    assert any(tmp_path.iterdir())  # the variants were built where the flag said
    with pytest.raises(ValueError, match="need --ex-mode suite"):
        app_options(_parser().parse_args(["--suite-k", "2"]))
    assert "ex_mode" not in app_options(_parser().parse_args([]))


def test_server_cli_reports_bad_flags_in_one_line(capsys):
    """The server's entry point turns flags that do not combine, and a dataset that does not load, into
    argparse's one ``error:`` line and exit status 2, before anything is served."""
    from textsql_clarify.integrations.openenv_server import main as serve

    for argv, words in ((["--suite-k", "2"], "need --ex-mode suite"),
                        (["--dataset", "jsonl:no/such/file.jsonl"], "no/such/file.jsonl"),
                        (["--max-concurrent-envs", "0"], "--max-concurrent-envs must be >= 1, got 0"),
                        (["--limit", "0"], "--limit must be >= 1, got 0"),
                        (["--ex-mode", "suite", "--suite-k", "0"], "--suite-k must be >= 1, got 0"),
                        (["--reward-preset", "nope"], "unknown reward preset 'nope'")):
        with pytest.raises(SystemExit) as exc:
            serve(argv)
        err = capsys.readouterr().err
        assert exc.value.code == 2 and "Traceback" not in err, err
        last = err.strip().splitlines()[-1]
        assert "error: " in last and words in last, last


def test_no_docstring_points_to_a_file_outside_the_repository():
    """Readers are sent to the README and docs/*.md; DESIGN.md is not part of the repository."""
    from pathlib import Path

    import textsql_clarify

    root = Path(textsql_clarify.__file__).parent
    assert not (root.parent / "DESIGN.md").exists()
    cited = [str(p.relative_to(root.parent)) for p in sorted(root.rglob("*.py")) if "DESIGN" in p.read_text("utf-8")]
    assert cited == []
    readme = (root.parent / "README.md").read_text("utf-8")
    assert "### Design rules" in readme  # what 'README "Design rules"' in the docstrings names


def test_openenv_manifest_is_read_by_openenv_and_serves_the_env():
    """``openenv.yaml`` at the repository root, read as OpenEnv's own code reads it: the app field by its
    Daytona runtime's parser, the fields of the template ``openenv init`` writes, and the app import string
    resolved the way ``python -m uvicorn <app>`` resolves it."""
    from pathlib import Path

    import openenv.cli
    import yaml
    from fastapi import FastAPI
    from openenv.core.containers.runtime.daytona_provider import DaytonaProvider
    from uvicorn.importer import import_from_string

    import textsql_clarify
    from textsql_clarify.integrations import openenv_server

    text = (Path(textsql_clarify.__file__).parent.parent / "openenv.yaml").read_text("utf-8")
    manifest = yaml.safe_load(text)
    template = yaml.safe_load((Path(openenv.cli.__file__).parent / "templates" / "openenv_env" / "openenv.yaml")
                              .read_text("utf-8"))
    assert set(template) <= set(manifest)  # spec_version, name, type, runtime, app, port
    assert {k: manifest[k] for k in ("spec_version", "type", "runtime")} == {
        k: template[k] for k in ("spec_version", "type", "runtime")}
    assert manifest["name"] and isinstance(manifest["port"], int)
    # openenv's EnvironmentInfo takes the action and observation class names from these two fields
    assert manifest["action"] == openenv_server.TextSQLClarifyAction.__name__
    assert manifest["observation"] == openenv_server.TextSQLClarifyObservation.__name__
    app = DaytonaProvider._parse_app_field(text)
    assert app == manifest["app"] == "textsql_clarify.integrations.openenv_app:app"
    served = import_from_string(app)
    assert isinstance(served, FastAPI)
    assert {"/reset", "/step", "/state", "/schema", "/health"} <= {getattr(r, "path", None) for r in served.routes}
