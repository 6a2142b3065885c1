"""The simulated user over an OpenAI-compatible chat completions server, against our own server on 127.0.0.1.

``_Server`` is a stdlib ``http.server`` in a thread (port 0) that answers ``POST /v1/chat/completions`` by
a rule from the request: a stage-1 label request gets one label of its ``response_format`` enum, chosen by
the length of the clarification; a stage-2 request gets its ``Fact:`` line back; a judge request gets
``A``. It records every body and every answer, so a test can check that the env's user said what the
server said. Failure modes (HTTP statuses, refusing ``response_format``, slow or malformed replies) are
switched on per test. Nothing outside 127.0.0.1 is contacted.
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import gymnasium as gym
import pytest

import textsql_clarify  # noqa: F401  (registers TextSQLClarify-v0)
from textsql_clarify.baselines.agents import OracleAgent, _clarification_for
from textsql_clarify.rollout.evaluation import evaluate
from textsql_clarify.datasets import load_dataset
from textsql_clarify.simulators import UserRequest, make_simulator
from textsql_clarify.simulators.base import ALLOWED_LABELS, refusal_text
from textsql_clarify.simulators.leakage import leakage_reasons
from textsql_clarify.simulators.openai_user import (OpenAIChatBackend, OpenAIUserSimulator, UserServerError,
                                                    parse_choice, parse_openai_spec)
from textsql_clarify.simulators.prompts import fallback_reply
from textsql_clarify.simulators.rule_based import user_knowledge

MODEL = "test-user-model"


def _field(content: str, key: str) -> str | None:
    for line in content.splitlines():
        if line.startswith(key + ":"):
            return line[len(key) + 1:].strip()
    return None


class _Server:
    """A rule-based OpenAI-compatible chat completions server (see the module docstring).

    Attributes:
        bodies: every request body received, in arrival order.
        labels / replies: clarification line -> the label / reply text the server answered.
        refuse_schema: answer HTTP 400 to a body with ``response_format``.
        fail_next: HTTP statuses to answer, one per request, before normal replies.
        delay_s: seconds to wait before answering (for timeouts).
        raw: a body to send as is with status 200 (malformed replies).
        reply: a function of the request's Fact line giving the stage-2 reply (default: the fact).
        label_rule: a function of (clarification, enum) giving the label (default: by the length).
        label_text: a function of (clarification, enum, messages) giving the label reply's text (default: the
            label as JSON when ``response_format`` was sent, else the bare word).
        barrier: a ``threading.Barrier`` every request waits on (concurrency checks).
    """

    def __init__(self):
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        self.labels: dict[str, str] = {}
        self.replies: dict[str, str] = {}
        self.refuse_schema = False
        self.fail_next: list[int] = []
        self.delay_s = 0.0
        self.raw: bytes | None = None
        self.reply = lambda fact: fact
        self.label_text = None
        self.label_rule = lambda clar, enum: enum[len(clar) % len(enum)]
        self.barrier: threading.Barrier | None = None
        self.in_flight = 0
        self.peak = 0
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status: int, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    server.bodies.append(body)
                    server.headers.append(dict(self.headers))
                    server.in_flight += 1
                    server.peak = max(server.peak, server.in_flight)
                    status = server.fail_next.pop(0) if server.fail_next else None
                try:
                    if server.barrier is not None:
                        server.barrier.wait()
                    if server.delay_s:
                        time.sleep(server.delay_s)
                    if self.path != "/v1/chat/completions":
                        return self._send(404, b'{"error": "not found"}')
                    if status is not None:
                        return self._send(status, json.dumps({"error": f"status {status}"}).encode())
                    if server.refuse_schema and "response_format" in body:
                        return self._send(400, b'{"error": "response_format is not supported"}')
                    if server.raw is not None:
                        return self._send(200, server.raw)
                    content = server.answer(body)
                    self._send(200, json.dumps({"id": "x", "object": "chat.completion", "model": body["model"],
                                                "choices": [{"index": 0, "finish_reason": "stop",
                                                             "message": {"role": "assistant", "content": content}}],
                                                "usage": {"prompt_tokens": 10, "completion_tokens": 2}}).encode())
                finally:
                    with server._lock:
                        server.in_flight -= 1

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def answer(self, body: dict) -> str:
        """The completion text for ``body`` by the rule of the module docstring."""
        msgs = body["messages"]
        query = next(m["content"] for m in reversed(msgs) if m["role"] == "user" and "Clarification:" in m["content"])
        clar = _field(query, "Clarification")
        if "Reply A:" in query:
            return json.dumps({"better": "A"}) if "response_format" in body else "A"
        if "Unclear point:" in query:
            enum = (body["response_format"]["json_schema"]["schema"]["properties"]["label"]["enum"]
                    if "response_format" in body else ["relevant", "technical", "irrelevant"])
            label = self.label_rule(clar, enum)
            with self._lock:
                self.labels[clar] = label
            if self.label_text is not None:
                return self.label_text(clar, enum, msgs)
            return json.dumps({"label": label}) if "response_format" in body else label
        text = self.reply(_field(query, "Fact"))
        with self._lock:
            self.replies[clar] = text
        return text

    def label_bodies(self) -> list[dict]:
        return [b for b in self.bodies if "Unclear point:" in b["messages"][-1]["content"]
                or "exactly one word" in b["messages"][-1]["content"]]

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture()
def server():
    s = _Server()
    yield s
    s.close()


@pytest.fixture(scope="module")
def samples():
    return load_dataset("embedded")


def _by_id(samples, sid):
    return next(s for s in samples if s.id == sid)


def _ids(sample):
    from textsql_clarify.sql.schema import read_schema
    schema = read_schema(sample.db_path)
    return frozenset([t.lower() for t in schema] + [c.lower() for cs in schema.values() for c in cs])


def _sim(server, **kw):
    kw.setdefault("grounding", "lexical")
    kw.setdefault("retry_backoff_s", 0.0)
    return OpenAIUserSimulator(server.base_url, MODEL, **kw)


# ---------------------------------------------------------------------------------------------- spec


def test_spec_splits_base_url_and_model_like_the_agent_spec():
    from textsql_clarify.baselines.agents import make_agent
    pytest.importorskip("openai")
    for spec, want in (("openai:http://127.0.0.1:8000/v1/Qwen2.5-7B-Instruct",
                        ("http://127.0.0.1:8000/v1", "Qwen2.5-7B-Instruct")),
                       ("openai:http://127.0.0.1:8000/v1/Qwen/Qwen2.5-7B-Instruct",
                        ("http://127.0.0.1:8000/v1", "Qwen/Qwen2.5-7B-Instruct")),
                       ("openai:https://host.example/api/my-model", ("https://host.example/api", "my-model"))):
        assert parse_openai_spec(spec) == want
        agent = make_agent(spec)
        assert (agent.base_url, agent.model) == want


def test_hash_form_keeps_any_model_name_whole():
    assert parse_openai_spec("openai:http://127.0.0.1:8080#org/model-q4") == ("http://127.0.0.1:8080/v1", "org/model-q4")
    assert parse_openai_spec("openai:http://h:1/serve/api#a/b/c") == ("http://h:1/serve/api", "a/b/c")


@pytest.mark.parametrize("spec", ["openai:http://127.0.0.1:8000/v1", "openai:http://127.0.0.1:8000",
                                  "openai:http://127.0.0.1:8000/v1#", "openai:ftp://h/v1/m", "openai:"])
def test_spec_without_model_or_http_url_is_refused_by_name(spec):
    with pytest.raises(ValueError, match="simulator spec"):
        make_simulator(spec)


def test_make_simulator_builds_the_openai_user_and_the_api_key_comes_from_the_environment(server, monkeypatch, samples):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    sim = make_simulator({"kind": "openai", "base_url": server.base_url, "model": MODEL, "grounding": "lexical"})
    assert isinstance(sim, OpenAIUserSimulator) and sim.model_names == [f"openai:{MODEL}"]
    s = _by_id(samples, "uni-vague-003")
    sim.respond([UserRequest(s, _clarification_for(s), schema_identifiers=_ids(s))])
    assert {h.get("Authorization") for h in server.headers} == {"Bearer sk-local"}
    monkeypatch.delenv("OPENAI_API_KEY")
    server.headers.clear()
    _sim(server).respond([UserRequest(s, _clarification_for(s), schema_identifiers=_ids(s))])
    assert server.headers and all("Authorization" not in h for h in server.headers)


# ---------------------------------------------------------------------------------------------- episodes


@pytest.mark.model   # the default grounding loads MiniLM when it is installed
def test_env_episodes_with_the_openai_spec_say_what_the_server_said(server, samples):
    spec = f"openai:{server.base_url}/{MODEL}"
    trajs, metrics = evaluate(samples, OracleAgent(), num_envs=4, progress=False, simulator=spec)
    turns = [(t, traj) for traj in trajs for t in traj.turns if t.action_type == "clarify"]
    assert len(turns) >= 24   # the oracle asks on every ambiguous sample (chains twice)
    asked = 0
    for t, traj in turns:
        reply = t.user_reply
        if t.content in server.labels:   # stage 1 reached the server
            asked += 1
            assert reply["label"] == server.labels[t.content]
            if reply["label"] == "irrelevant":
                assert reply["text"] == refusal_text(t.content)
            elif reply["leak_rejections"] == 0:
                assert reply["text"] == server.replies[t.content]
        else:                            # refused before any model call: the canned refusal
            assert (reply["label"], reply["text"]) == ("irrelevant", refusal_text(t.content))
    assert asked >= 20
    assert {reply for reply in server.labels.values()} >= {"relevant", "technical"}
    # the stage-1 enums are the group's allowed labels: ambiguous samples may be relevant
    enums = {tuple(b["response_format"]["json_schema"]["schema"]["properties"]["label"]["enum"])
             for b in server.label_bodies()}
    assert enums <= {ALLOWED_LABELS["ambiguous"], ("technical", "irrelevant")}


@pytest.mark.model
def test_gym_make_with_the_openai_spec_answers_a_clarification(server, samples):
    env = gym.make("TextSQLClarify-v0", simulator=f"openai:{server.base_url}#{MODEL}")
    _, info = env.reset(options={"sample_id": "uni-vague-003"})
    s = _by_id(samples, "uni-vague-003")
    clar = _clarification_for(s)
    _, _, terminated, _, info = env.step(f"<clarify>{clar}</clarify>")
    assert not terminated
    reply = env.unwrapped._traj.turns[-1].user_reply
    assert reply["label"] == server.labels[clar]
    env.close()


def test_label_and_reply_requests_carry_the_transformers_prompts_seed_and_temperature(server, samples):
    s = _by_id(samples, "uni-vague-003")
    server.label_rule = lambda clar, enum: "relevant"
    sim = _sim(server, seed=7)
    clar = _clarification_for(s)
    sim.respond([UserRequest(s, clar, schema_identifiers=_ids(s))])
    label_body, reply_body = server.bodies[0], server.bodies[1]
    from textsql_clarify.simulators.prompts import _LABEL_INSTRUCTION, _LABEL_SHOTS, _ANSWER_INSTRUCTION
    assert label_body["model"] == MODEL
    assert label_body["messages"][0] == {"role": "system", "content": _LABEL_INSTRUCTION}
    assert len(label_body["messages"]) == 2 + 2 * len(_LABEL_SHOTS)
    assert _field(label_body["messages"][-1]["content"], "Clarification") == clar
    assert (label_body["temperature"], label_body["seed"]) == (0.0, sim._seed(1, 0, 0))
    assert reply_body["messages"][0]["content"] == _ANSWER_INSTRUCTION
    assert (reply_body["temperature"], reply_body["seed"], reply_body["max_tokens"]) == (0.0, 7, 32)


# ---------------------------------------------------------------------------------------------- leak guard


def test_leak_guard_blocks_a_server_reply_with_an_unlicensed_gold_value(server, samples):
    s = _by_id(samples, "uni-vague-003")   # gold: budget > 1000000; the user says "one million euros"
    clar = _clarification_for(s)
    leaky = "Above 1000000 a year."
    server.reply = lambda fact: leaky
    server.label_rule = lambda clar, enum: "relevant"
    assert "value:1000000" in leakage_reasons(leaky, question=s.question, clarification=clar,
                                              schema_identifiers=_ids(s), gold_sql=s.gold_sql,
                                              hidden_knowledge=user_knowledge(s))
    sim = _sim(server, max_regenerations=2, seed=3)
    [r] = sim.respond([UserRequest(s, clar, schema_identifiers=_ids(s))])
    assert r.label == server.labels[_field(server.bodies[0]["messages"][-1]["content"], "Clarification")]
    assert r.label == "relevant"
    assert r.leak_rejections == 3 and r.meta["fallback"] is True
    assert "value:1000000" in r.meta["rejection_reasons"]
    assert "1000000" not in r.text
    assert r.text == fallback_reply("relevant", r.meta["fact"], s.question, clarification=clar)
    # the regenerations are sampled at the retry temperature with the transformers user's seeds
    replies = [b for b in server.bodies if "Fact:" in b["messages"][-1]["content"]]
    assert [(b["temperature"], b["seed"]) for b in replies] == [(0.0, 3), (0.8, sim._seed(2, 0, 1)),
                                                                 (0.8, sim._seed(2, 0, 2))]


def test_unanswerable_and_probe_clarifications_never_reach_the_server(server, samples):
    una = next(s for s in samples if s.group == "unanswerable")
    amb = _by_id(samples, "uni-vague-003")
    ids = _ids(amb)
    probe = "Is it " + ", ".join(sorted(ids)[:6]) + "?"
    out = _sim(server).respond([UserRequest(una, "Which column holds that?", schema_identifiers=_ids(una)),
                                UserRequest(amb, probe, schema_identifiers=ids)])
    assert [(r.label, r.meta["refused"]) for r in out] == [("irrelevant", "unanswerable"),
                                                             ("irrelevant", "identifier_probe")]
    assert [r.text for r in out] == [refusal_text("Which column holds that?"), refusal_text(probe)]
    assert server.bodies == []


# ---------------------------------------------------------------------------------------------- constrained output


def test_server_that_refuses_response_format_gets_plain_requests_and_a_strict_parse(server, samples):
    server.refuse_schema = True
    s = _by_id(samples, "uni-vague-003")
    clar = _clarification_for(s)
    sim = _sim(server)
    [r] = sim.respond([UserRequest(s, clar, schema_identifiers=_ids(s))])
    b = sim.backends[0]
    assert b.structured is False and b.stats["schema_refused"] == 1
    assert r.label == server.labels[clar]
    assert "response_format" in server.bodies[0] and "response_format" not in server.bodies[1]
    server.bodies.clear()
    sim.respond([UserRequest(s, clar + " Please say.", schema_identifiers=_ids(s))])
    assert all("response_format" not in body for body in server.bodies)   # remembered


def test_unparsable_label_is_asked_once_more_then_votes_irrelevant(server, samples):
    s = _by_id(samples, "uni-vague-003")
    clar = _clarification_for(s)
    # first reply is prose; after the reminder, the word
    server.label_text = lambda c, enum, msgs: (enum[0] if "exactly one word" in msgs[-1]["content"]
                                               else f"I would say {enum[0]}, probably")
    sim = _sim(server)
    [r] = sim.respond([UserRequest(s, clar, schema_identifiers=_ids(s))])
    assert r.label == "relevant" and sim.backends[0].stats["unparsed"] == 1
    assert "unparsed_label" not in r.meta
    server.label_text = lambda c, enum, msgs: "no idea"
    sim = _sim(server)
    [r] = sim.respond([UserRequest(s, clar, schema_identifiers=_ids(s))])
    assert (r.label, r.text) == ("irrelevant", refusal_text(clar))
    assert r.meta["unparsed_label"] == [f"openai:{MODEL}"] and sim.stats["unparsed_labels"] == 1


@pytest.mark.parametrize("text, want", [('{"label": "technical"}', "technical"), ("Technical.", "technical"),
                                        ("Label: irrelevant", "irrelevant"), ('"technical"', "technical"),
                                        ("relevant", None), ("technical or irrelevant", None),
                                        ('{"label": "relevant"}', None), ("{broken", None), ("", None), (None, None)])
def test_parse_choice_is_strict(text, want):
    assert parse_choice(text, ("technical", "irrelevant"), "label") == want


# ---------------------------------------------------------------------------------------------- concurrency


def test_a_batch_is_sent_concurrently_and_bounded(server, samples):
    amb = [s for s in samples if s.group == "ambiguous" and s.chain is None][:6]
    prompts = [json.dumps([{"role": "user", "content": f"Unclear point: x\nClarification: {s.question}"}])
               for s in amb]
    b = OpenAIChatBackend(server.base_url, MODEL, max_concurrency=6, retry_backoff_s=0.0, timeout_s=10)
    server.barrier = threading.Barrier(6, timeout=5)   # passes only when all six are in flight together
    picks = b.choose(prompts, [("technical", "irrelevant")] * 6)
    assert picks == [server.labels[s.question] for s in amb]
    server.barrier = None
    server.peak = 0
    server.delay_s = 0.05
    b2 = OpenAIChatBackend(server.base_url, MODEL, max_concurrency=2, retry_backoff_s=0.0)
    b2.choose(prompts, [("technical", "irrelevant")] * 6)
    assert 1 <= server.peak <= 2


# ---------------------------------------------------------------------------------------------- errors


def test_timeouts_are_retried_then_the_error_names_server_and_model(server, samples):
    server.delay_s = 1.0
    s = _by_id(samples, "uni-vague-003")
    sim = _sim(server, timeout_s=0.2, max_retries=2)
    with pytest.raises(UserServerError) as e:
        sim.respond([UserRequest(s, _clarification_for(s), schema_identifiers=_ids(s))])
    msg = str(e.value)
    assert f"{server.base_url}/chat/completions" in msg and MODEL in msg and "3 time(s)" in msg
    assert len(server.bodies) == 3


def test_a_503_is_retried_and_a_404_is_not(server, samples):
    s = _by_id(samples, "uni-vague-003")
    clar = _clarification_for(s)
    server.fail_next = [503, 503]
    sim = _sim(server, max_retries=2)
    [r] = sim.respond([UserRequest(s, clar, schema_identifiers=_ids(s))])
    assert r.label == server.labels[clar] and sim.backends[0].stats["retries"] == 2
    server.fail_next = [404]
    with pytest.raises(UserServerError, match=r"refused the request for model 'test-user-model': HTTP 404"):
        _sim(server, max_retries=2).respond([UserRequest(s, clar, schema_identifiers=_ids(s))])


def test_connection_refused_names_the_url(samples):
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    s = _by_id(samples, "uni-vague-003")
    sim = OpenAIUserSimulator(f"http://127.0.0.1:{port}/v1", MODEL, grounding="lexical", max_retries=1,
                              retry_backoff_s=0.0)
    with pytest.raises(UserServerError, match=rf"127\.0\.0\.1:{port}/v1/chat/completions.*{MODEL}.*2 time"):
        sim.respond([UserRequest(s, _clarification_for(s), schema_identifiers=_ids(s))])


@pytest.mark.parametrize("raw, why", [(b"<html>oops", "not a JSON object"), (b"[1, 2]", "not a JSON object"),
                                      (b'{"object": "chat.completion"}', "no choices"),
                                      (b'{"choices": [{"message": {"content": 5}}]}', "non-text")])
def test_malformed_replies_raise_a_clear_error(server, samples, raw, why):
    server.raw = raw
    s = _by_id(samples, "uni-vague-003")
    with pytest.raises(UserServerError, match=why) as e:
        _sim(server).respond([UserRequest(s, _clarification_for(s), schema_identifiers=_ids(s))])
    assert server.base_url in str(e.value) and MODEL in str(e.value)
    assert len(server.bodies) == 1   # not retried


def test_a_failed_reply_is_undone_and_the_step_can_be_sent_again(server, samples):
    env = gym.make("TextSQLClarify-v0", simulator={"kind": "openai", "base_url": server.base_url, "model": MODEL,
                                                   "grounding": "lexical", "max_retries": 0})
    env.reset(options={"sample_id": "uni-vague-003"})
    clar = _clarification_for(_by_id(samples, "uni-vague-003"))
    server.fail_next = [500]
    with pytest.raises(UserServerError):
        env.step(f"<clarify>{clar}</clarify>")
    _, _, terminated, _, _ = env.step(f"<clarify>{clar}</clarify>")
    assert not terminated
    assert [t.user_reply["label"] for t in env.unwrapped._traj.turns] == [server.labels[clar]]
    env.close()


@pytest.mark.model
def test_cli_eval_runs_with_the_openai_simulator(server, tmp_path):
    from textsql_clarify.cli import main
    out = tmp_path / "run"
    rc = main(["eval", "--dataset", "embedded", "--agent", "oracle", "--limit", "9", "--no-progress",
               "--simulator", f"openai:{server.base_url}/{MODEL}", "--out", str(out)])
    assert rc == 0
    rows = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    clarify = [t for r in rows for t in r["turns"] if t["action_type"] == "clarify"]
    assert len(rows) == 9 and len(clarify) >= 3   # uni-scope-001..003 are ambiguous
    for t in clarify:
        want = server.labels.get(t["content"], "irrelevant")   # not asked: refused before any model call
        assert t["user_reply"]["label"] == want
