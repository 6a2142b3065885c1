"""verifiers adapter: episodes played through verifiers' own rollout machinery (env.serving, run_slot,
interception, the harness) against a scripted OpenAI-compatible stub server on 127.0.0.1, checked
against the local env on the same actions."""
from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("verifiers.v1", reason="the verifiers adapter needs verifiers>=0.4 (extra 'verifiers')")
pytest.importorskip("openai", reason="the verifiers harness calls the model with the openai client")

import verifiers.v1 as vf  # noqa: E402

from textsql_clarify.baselines.llm_prompt import STOP_STRINGS, agent_messages  # noqa: E402
from textsql_clarify.datasets import load_dataset  # noqa: E402
from textsql_clarify.envs.env import TextSQLClarifyEnv  # noqa: E402
from textsql_clarify.integrations import verifiers_env  # noqa: E402
from textsql_clarify.integrations.verifiers_env import TASKSET_ID, load_environment  # noqa: E402

SAMPLE = "uni-scope-001"  # ambiguous: ask, then answer
PRESET = "shaped"         # the clarification costs 0.05
CLARIFY = "<clarify>Do you want only the courses that all of those students take?</clarify>"


@pytest.fixture(scope="module")
def sample():
    return {s.id: s for s in load_dataset("embedded")}[SAMPLE]


@pytest.fixture(scope="module")
def stub(sample):
    """An OpenAI-compatible chat server on an ephemeral 127.0.0.1 port: the reply is chosen by how many
    assistant messages the request already holds (0: the clarification, 1: the gold SQL, with trailing
    chatter the action cut must drop). Records every request body."""
    script = [CLARIFY, f"<sql>{sample.gold_sql}</sql> I hope this helps!"]
    seen: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's hook name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append(body)
            n = sum(1 for m in body["messages"] if m["role"] == "assistant")
            out = {"id": f"cmpl-{len(seen)}", "object": "chat.completion", "created": 0, "model": body["model"],
                   "choices": [{"index": 0, "finish_reason": "stop",
                                "message": {"role": "assistant", "content": script[min(n, len(script) - 1)]}}],
                   "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}}
            data = json.dumps(out).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield {"url": f"http://127.0.0.1:{server.server_port}/v1", "seen": seen}
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)


@pytest.fixture(scope="module")
def local(sample):
    """The same two actions on the local env: per-step rewards, the user's reply, the scores."""
    env = TextSQLClarifyEnv(samples=[sample], reward_preset=PRESET)
    env.reset(options={"sample_id": SAMPLE})
    _o, r1, *_rest, info1 = env.step(CLARIFY)
    _o, r2, terminated, _t, info2 = env.step(f"<sql>{sample.gold_sql}</sql>")
    assert terminated
    return {"rewards": [r1, r2], "reply": info1["messages"][-1]["content"], "scores": info2["scores"]}


def _play(env, stub, task):
    """One episode of ``task`` the way vf-eval runs it (env.serving + run_slot), bounded in time."""
    ctx = vf.ModelContext(model="stub-model", client=vf.EvalClientConfig(
        base_url=stub["url"], api_key_var="TEXTSQL_STUB_API_KEY", timeout={"read": 60.0}))

    async def go():
        async with env.serving():
            return await env.run_slot(env.slots(task)[0], ctx)

    return asyncio.run(asyncio.wait_for(go(), timeout=240))


@pytest.fixture(scope="module")
def vf_env():
    return load_environment("embedded", sample_ids=[SAMPLE], reward_preset=PRESET)


def test_tasks_carry_the_env_prompt_and_sample_id(vf_env):
    (task,) = list(vf_env.taskset)
    assert isinstance(vf_env, verifiers_env.TextSQLClarifyVfEnv) and isinstance(vf_env, vf.Env)
    assert task.data.sample_id == task.key == SAMPLE and task.data.group == "ambiguous"
    env = TextSQLClarifyEnv(reward_preset=PRESET)
    _obs, info = env.reset(options={"sample_id": SAMPLE})
    msgs = agent_messages(info)
    assert task.data.system_prompt == msgs[0]["content"] and task.data.prompt == msgs[1]["content"]


def test_full_episode_through_verifiers_rollouts_matches_the_local_env(vf_env, stub, local):
    (task,) = list(vf_env.taskset)
    stub["seen"].clear()
    episode = _play(vf_env, stub, task)
    assert episode.ok, episode.errors
    (trace,) = episode.traces
    assert trace.ok, trace.errors
    # the recorded completion: ask, the simulated user's reply, the SQL
    roles = [m.role for m in trace.messages]
    assert roles == ["system", "user", "assistant", "user", "assistant"]
    assert trace.messages[2].content == CLARIFY
    assert trace.messages[3].content == local["reply"] != ""
    assert trace.num_turns == 2 and len(stub["seen"]) == 2
    assert stub["seen"][0]["model"] == "stub-model" and stub["seen"][0]["stop"] == list(STOP_STRINGS)
    # the reward is the env's episode reward (sum of step rewards), components and scores kept
    want = sum(local["rewards"])
    assert want == pytest.approx(0.95)
    assert trace.rewards["episode_reward"].score == pytest.approx(want) and trace.reward == pytest.approx(want)
    rec = trace.info["textsql_clarify"]
    assert rec["step_rewards"] == pytest.approx(local["rewards"]) and rec["finished"] is True
    assert rec["actions"][1].endswith("</sql>")  # chatter after the closing tag was cut
    assert rec["reward_components"]["turn_penalty"] == -1.0 and rec["reward_components"]["ex"] == 1.0
    assert rec["reward_components"]["feedback"] is None  # undefined, never 0
    assert rec["scores"]["ex"] == local["scores"]["ex"] == 1.0 and rec["outcome"] == "sql"
    assert trace.metrics["finished"] == 1.0 and trace.metrics["component/ex"] == 1.0
    assert trace.metrics["score/ex"] == 1.0 and trace.metrics["num_actions"] == 2.0


def test_max_turns_stops_the_episode_unfinished(stub, local):
    env = load_environment("embedded", sample_ids=[SAMPLE], reward_preset=PRESET, max_turns=1)
    (task,) = list(env.taskset)
    episode = _play(env, stub, task)
    (trace,) = episode.traces
    assert trace.stop_condition == "max_turns" and trace.num_turns == 1
    rec = trace.info["textsql_clarify"]
    assert rec["finished"] is False and rec["scores"] is None and rec["replies"] == [local["reply"]]
    assert trace.rewards["episode_reward"].score == pytest.approx(local["rewards"][0]) == pytest.approx(-0.05)


def test_plugin_resolution_and_bad_options():
    import sys

    assert sys.modules[TASKSET_ID] is verifiers_env
    assert vf.environment_class(TASKSET_ID) is verifiers_env.TextSQLClarifyVfEnv
    assert vf.default_harness_id(TASKSET_ID) == TASKSET_ID
    with pytest.raises(ValueError, match="max_turns"):
        load_environment(max_turns=0)
    env = load_environment(sample_ids=["nope"])
    with pytest.raises(KeyError, match="nope"):
        list(env.taskset)
    env = load_environment(limit=2, max_clarifications=1)
    tasks = list(env.taskset)
    assert [t.data.sample_id for t in tasks] == ["uni-ans-001", "uni-ans-002"]
    assert env.taskset.make_env().max_clarifications == 1


def test_the_cli_pushes_nothing_unless_asked(monkeypatch):
    """verifiers' vf-eval uploads every run by default (EvalConfig.push); this entry point adds --no-push."""
    from verifiers.v1.cli.eval import main as vf_main
    from verifiers.v1.configs.cli.eval import EvalConfig

    assert EvalConfig.model_fields["push"].default is True  # what the default here guards against
    seen = []
    monkeypatch.setattr(vf_main, "main", lambda args: seen.append(args))
    verifiers_env.main(["-m", "my-model", "-n", "2"])
    assert seen[-1] == ["--env.taskset.id", TASKSET_ID, "-m", "my-model", "-n", "2", "--no-push"]
    verifiers_env.main(["-n", "2", "--push"])
    assert seen[-1] == ["--env.taskset.id", TASKSET_ID, "-n", "2", "--push"]
    assert verifiers_env.vf_eval_args(["--no-push"]).count("--no-push") == 1
