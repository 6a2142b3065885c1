"""OpenAIAgent against a local OpenAI-compatible server (stdlib http.server on 127.0.0.1, port 0).

The server answers ``POST /v1/chat/completions`` with a canned completion chosen from the request's
messages: a clarification on the first turn of an ambiguous sample, the gold SQL once the user has
replied, the gold SQL at once for an answerable sample, feedback for an unanswerable one. Like vLLM and
SGLang it drops the matched stop string, so every completion arrives without its closing tag.
"""
from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("openai", reason="the openai extra is not installed")

from textsql_clarify.baselines.agents import OracleAgent, _clarification_for  # noqa: E402
from textsql_clarify.baselines.llm_prompt import STOP_STRINGS, WORKED_EXAMPLE  # noqa: E402
from textsql_clarify.baselines.openai_agent import AgentServerError, OpenAIAgent, normalize_base_url  # noqa: E402
from textsql_clarify.rollout.evaluation import evaluate  # noqa: E402
from textsql_clarify.datasets import load_dataset  # noqa: E402
from textsql_clarify.envs.render import first_user_message  # noqa: E402

MODEL = "test-model"
#: one answerable, two ambiguous and one unanswerable embedded sample
IDS = ("uni-ans-001", "uni-scope-001", "uni-vague-001", "uni-missent-001")
#: the most requests one test may send; past it the server answers 400 (not retried), so a runaway fails fast
REQUEST_LIMIT = 40


@pytest.fixture(scope="module")
def samples():
    by_id = {s.id: s for s in load_dataset("embedded")}
    return [by_id[i] for i in IDS]


class _Server:
    """A canned OpenAI-compatible chat completions server; ``plans`` maps a first user message to
    ``(completion for turn 1, completion after the user's reply or None)``."""

    def __init__(self, plans: dict[str, tuple[str, str | None]]):
        self.plans = plans
        self.bodies: list[dict] = []
        self.fail_next: list[int] = []  # HTTP statuses to answer before the next normal reply
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep pytest output clean
                pass

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.bodies.append(body)
                    n = len(server.bodies)
                    fail = server.fail_next.pop(0) if server.fail_next else None
                if self.path != "/v1/chat/completions":
                    return self._send(404, {"error": {"message": f"no route {self.path}"}})
                if n > REQUEST_LIMIT:
                    return self._send(400, {"error": {"message": "request limit of the test server"}})
                if fail is not None:
                    return self._send(fail, {"error": {"message": "injected failure"}})
                self._send(200, server.reply(body))

        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def reply(self, body: dict) -> dict:
        msgs = body["messages"]
        users = [m["content"] for m in msgs if m["role"] == "user"]
        first, second = self.plans.get(users[0], ("I do not know.", None))
        text = first if len(users) == 1 or second is None else second
        for stop in body.get("stop") or []:  # the server drops the stop string, as vLLM and SGLang do
            if stop in text:
                text = text[:text.index(stop)]
        return {"id": f"cmpl-{len(self.bodies)}", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": text}}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}}


def _plans(samples) -> dict[str, tuple[str, str | None]]:
    """What the server says per sample: the oracle's actions (clarify, then SQL; SQL; feedback)."""
    plans = {}
    for s in samples:
        q = first_user_message(s)
        if s.group == "ambiguous":
            plans[q] = (f"<clarify>{_clarification_for(s)}</clarify>", f"<sql>{s.gold_sql}</sql>")
        elif s.group == "answerable":
            plans[q] = (f"<sql>{s.gold_sql}</sql>", None)
        else:
            plans[q] = (f"<feedback>{s.hidden_knowledge}</feedback>", None)
    return plans


@pytest.fixture
def server(samples):
    srv = _Server(_plans(samples))
    srv.thread.start()
    try:
        yield srv
    finally:
        srv.httpd.shutdown()
        srv.httpd.server_close()
        srv.thread.join(timeout=5)


def _agent(srv: _Server, **kw) -> OpenAIAgent:
    kw.setdefault("retry_backoff_s", 0.01)
    return OpenAIAgent(srv.base_url, MODEL, api_key="EMPTY", **kw)


def test_episode_through_evaluate_matches_the_oracle(server, samples):
    agent = _agent(server)
    trajs, metrics = evaluate(samples, agent, num_envs=4, progress=False)
    oracle_trajs, _ = evaluate(samples, OracleAgent(), num_envs=1, progress=False)
    # clarify then the served gold SQL: the same trajectory as the oracle's, EX 1.0 on the ambiguous sample
    for t, o in zip(trajs, oracle_trajs):
        assert t.sample_id == o.sample_id
        assert [(u.action_type, u.content) for u in t.turns] == [(u.action_type, u.content) for u in o.turns]
        assert [u.user_reply for u in t.turns] == [u.user_reply for u in o.turns]
    by_id = {t.sample_id: t for t in trajs}
    amb = by_id["uni-scope-001"]
    assert [u.action_type for u in amb.turns] == ["clarify", "sql"]
    assert amb.turns[0].user_reply["label"] == "relevant"
    assert amb.scores["ex"] == 1.0
    assert by_id["uni-ans-001"].scores["ex"] == 1.0
    assert by_id["uni-missent-001"].outcome == "feedback"
    # one request per turn: 1 + 2 + 2 + 1
    assert agent.requests_sent == agent.completions == len(server.bodies) == 6
    assert agent.prompt_tokens == 600 and agent.completion_tokens == 60


def test_request_body(server, samples):
    agent = _agent(server)
    evaluate(samples[1:2], agent, progress=False)  # the scope sample: clarify, then SQL
    assert len(server.bodies) == 2
    body = server.bodies[0]
    assert body["model"] == MODEL
    assert body["stop"] == list(STOP_STRINGS)
    assert body["temperature"] == 0.0
    assert body["max_tokens"] == 256
    system = body["messages"][0]
    assert system["role"] == "system"
    assert "Database schema:" in system["content"] and "CREATE TABLE" in system["content"]
    assert "students" in system["content"]
    assert system["content"].endswith(WORKED_EXAMPLE)
    assert body["messages"][1] == {"role": "user", "content": first_user_message(samples[1])}
    # the second turn shows the agent's clarification (closing tag restored) and the user's reply
    second = server.bodies[1]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert second[2]["content"] == f"<clarify>{_clarification_for(samples[1])}</clarify>"
    # example=False leaves the env's system message as it is
    server.bodies.clear()
    evaluate(samples[:1], _agent(server, example=False), progress=False)
    assert WORKED_EXAMPLE not in server.bodies[0]["messages"][0]["content"]


def test_missing_closing_tag_is_restored(server, samples):
    agent = _agent(server)
    info = {"messages": [{"role": "system", "content": "schema"}, {"role": "user", "content": first_user_message(samples[0])}]}
    raw = agent.complete(agent.messages(info))
    assert raw == f"<sql>{samples[0].gold_sql}"  # the server dropped "</sql>"
    assert agent.act({}, info) == f"<sql>{samples[0].gold_sql}</sql>"


def test_act_batch_keeps_order(server, samples):
    agent = _agent(server, max_concurrency=3)
    infos = [{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": first_user_message(s)}]}
             for s in samples]
    out = agent.act_batch([{}] * len(infos), infos)
    assert [a.split(">")[0] + ">" for a in out] == ["<sql>", "<clarify>", "<clarify>", "<feedback>"]
    assert out[0] == f"<sql>{samples[0].gold_sql}</sql>"
    assert agent.requests_sent == 4
    with pytest.raises(ValueError, match="2 observations and 1 infos"):
        agent.act_batch([{}, {}], infos[:1])


def test_server_error_is_retried(server, samples):
    agent = _agent(server)
    info = {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": first_user_message(samples[0])}]}
    server.fail_next = [500]
    assert agent.act({}, info) == f"<sql>{samples[0].gold_sql}</sql>"
    assert agent.requests_sent == 2 and agent.completions == 1
    # retries are bounded: 503 three times with max_retries=2 is an error naming the server and model
    server.fail_next = [503, 503, 503]
    agent2 = _agent(server, max_retries=2)
    with pytest.raises(AgentServerError, match=r"127\.0\.0\.1.*'test-model'.*failed 3 time"):
        agent2.act({}, info)
    assert agent2.requests_sent == 3


def test_bad_request_is_not_retried(server):
    agent = OpenAIAgent(f"http://127.0.0.1:{server.port}/wrong", MODEL, retry_backoff_s=0.01)
    with pytest.raises(AgentServerError, match=r"refused the request for model 'test-model': HTTP 404"):
        agent.act({}, {"messages": [{"role": "user", "content": "hi"}]})
    assert agent.requests_sent == 1


def test_dead_port_raises_clear_error():
    with socket.socket() as sock:  # a port that nothing listens on once the socket is closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    agent = OpenAIAgent(f"http://127.0.0.1:{port}", "m", max_retries=1, retry_backoff_s=0.01, timeout_s=5)
    assert agent.base_url == f"http://127.0.0.1:{port}/v1"
    with pytest.raises(AgentServerError) as err:
        agent.act({}, {"messages": [{"role": "user", "content": "hi"}]})
    msg = str(err.value)
    assert f"http://127.0.0.1:{port}/v1" in msg and "'m'" in msg and "failed 2 time(s)" in msg
    assert "APIConnectionError" in msg
    assert agent.requests_sent == 2


def test_agent_protocol_and_arguments(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    agent = OpenAIAgent("http://localhost:8000/v1/", "  qwen  ")
    assert agent._client.api_key == "sk-from-env"
    assert (agent.base_url, agent.model, agent.name, agent.privileged) == ("http://localhost:8000/v1", "qwen",
                                                                           "openai:qwen", False)
    assert agent.fork(3) is agent
    assert agent.begin_episode(None) is None
    monkeypatch.delenv("OPENAI_API_KEY")
    assert OpenAIAgent("http://localhost:8000", "m")._client.api_key == "EMPTY"
    assert normalize_base_url("https://host/openai/v1") == "https://host/openai/v1"
    with pytest.raises(ValueError, match="base_url"):
        OpenAIAgent("localhost:8000", "m")
    with pytest.raises(ValueError, match="model"):
        OpenAIAgent("http://localhost:8000", "")
    with pytest.raises(ValueError, match="max_concurrency"):
        OpenAIAgent("http://localhost:8000", "m", max_concurrency=0)


def test_make_agent_spec_builds_this_agent(server, samples):
    from textsql_clarify.baselines.agents import make_agent

    agent = make_agent(f"openai:{server.base_url}/{MODEL}", max_new_tokens=64)
    assert isinstance(agent, OpenAIAgent)
    assert (agent.base_url, agent.model, agent.max_tokens) == (server.base_url, MODEL, 64)
    trajs, _ = evaluate(samples[:1], agent, progress=False)
    assert trajs[0].scores["ex"] == 1.0 and server.bodies[0]["max_tokens"] == 64
