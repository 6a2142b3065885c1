"""OpenEnv adapter: a real OpenEnv server on 127.0.0.1 played through the real OpenEnv client, and the
in-process Environment, both checked against the local env on the same actions."""
from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request

import pytest

pytest.importorskip("openenv", reason="the OpenEnv adapter needs openenv-core (extra 'openenv')")
uvicorn = pytest.importorskip("uvicorn", reason="serving the OpenEnv app needs uvicorn (extra 'openenv')")

from textsql_clarify.baselines.agents import OracleAgent  # noqa: E402
from textsql_clarify.datasets import load_dataset  # noqa: E402
from textsql_clarify.envs.env import TextSQLClarifyEnv  # noqa: E402
from textsql_clarify.integrations.openenv_server import (  # noqa: E402
    SharedResources, TextSQLClarifyAction, TextSQLClarifyClient, TextSQLClarifyEnvironment, _parser, make_app)

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
