"""TRL trainer adapters: splits, the tool env (environment_factory), the tagged rollout (rollout_func).

Quick tests (no model) drive the adapters with scripted policies: a character-level ChatML tokenizer
for the rollout's token bookkeeping, and the tool env's methods called as TRL calls them. Model tests
(the ``smollm2`` fixture: SmolLM2-135M-Instruct, CPU) check the shipped tool-calling chat template
against TRL's own checks and parser, and run ``GRPOTrainer`` for one or two steps with each adapter
(``max_completion_length`` <= 48).
"""
from __future__ import annotations

import copy
import inspect
import json
import os
import re
from collections import Counter

import pytest

pytest.importorskip("trl", reason="the TRL adapters need the trl extra (pip install textsql-clarify[trl])")
pytest.importorskip("datasets", reason="build_prompt_dataset needs the datasets library (trl extra)")

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from textsql_clarify.datasets import load_dataset  # noqa: E402
from textsql_clarify.envs.env import TextSQLClarifyEnv  # noqa: E402
from textsql_clarify.integrations import splits, trl_env, trl_rollout  # noqa: E402
from textsql_clarify.integrations.trl_env import (  # noqa: E402
    EPISODE_OVER, TOOL_INSTRUCTIONS, TextSQLClarifyClassifyToolEnv, TextSQLClarifyToolEnv, build_prompt_dataset,
    make_environment_factory)
from textsql_clarify.integrations.trl_rollout import make_rollout_func, rollout_reward, turn_suffix_ids  # noqa: E402


@pytest.fixture(scope="module")
def samples():
    return load_dataset("embedded")


def _by_id(samples, sid):
    return next(s for s in samples if s.id == sid)


def _tool_names(env) -> set[str]:
    """The tools TRL 1.16 exposes for an env instance (its own rule: public functions of the class,
    ``reset`` and ``get_reward`` excepted)."""
    return {n for n, _ in inspect.getmembers(type(env), predicate=inspect.isfunction)
            if n not in ("reset", "get_reward") and not n.startswith("_")}


# ----------------------------------------------------------------------------------------------- splits
def test_split_is_deterministic_disjoint_and_stratified(samples):
    train, held = splits.split_sample_ids(samples, heldout_fraction=0.25, seed=0)
    assert (train, held) == splits.split_sample_ids(samples, heldout_fraction=0.25, seed=0)
    assert not set(train) & set(held)
    assert sorted(train + held) == sorted(s.id for s in samples)
    group = {s.id: s.group for s in samples}
    # embedded: 12 answerable, 24 ambiguous, 12 unanswerable -> 3, 6, 3 held out
    assert Counter(group[i] for i in held) == {"answerable": 3, "ambiguous": 6, "unanswerable": 3}
    other = splits.split_sample_ids(samples, heldout_fraction=0.25, seed=1)[1]
    assert set(other) != set(held) and len(other) == len(held)
    assert splits.split_sample_ids(samples, heldout_fraction=0.0) == ([s.id for s in samples], [])


def test_split_keeps_sample_order_and_same_set_for_any_input_order(samples):
    train, held = splits.split_sample_ids(samples, seed=3)
    order = [s.id for s in samples]
    assert train == [i for i in order if i in set(train)]
    rtrain, rheld = splits.split_sample_ids(list(reversed(samples)), seed=3)
    assert set(rheld) == set(held) and set(rtrain) == set(train)


def test_split_small_group_and_bad_input(samples):
    two = [s for s in samples if s.group == "unanswerable"][:2]
    train, held = splits.split_sample_ids(two, heldout_fraction=0.1)
    assert len(held) == 1 and len(train) == 1
    with pytest.raises(ValueError, match="heldout_fraction"):
        splits.split_sample_ids(samples, heldout_fraction=1.0)
    with pytest.raises(ValueError, match="more than once"):
        splits.split_sample_ids([samples[0], samples[0]])


def test_load_training_samples_skips_absent_specs(samples, tmp_path):
    absent = tmp_path / "nowhere"
    with pytest.warns(UserWarning, match="nowhere"):
        got = splits.load_training_samples(["embedded", f"spider:{absent}"])
    assert [s.id for s in got] == [s.id for s in samples]
    skipped = []
    got = splits.load_training_samples(["embedded", f"spider-unanswerable:{absent}/x.json:{absent}"],
                                       on_skip=lambda spec, missing: skipped.append((spec, missing)))
    assert len(got) == 48 and skipped and str(absent) in skipped[0][1][0]
    with pytest.raises(ValueError, match="both"):
        splits.load_training_samples(["embedded", "embedded"])
    with pytest.raises(ValueError, match="no samples"):
        splits.load_training_samples([f"spider:{absent}"], on_skip=lambda *a: None)


def test_load_training_samples_spider(spider_root):
    unans = spider_root.parent / "spider_unanswerable" / "spider_no_answer.json"
    specs = ["embedded", f"spider:{spider_root}"] + ([f"spider-unanswerable:{unans}:{spider_root}"]
                                                     if unans.is_file() else [])
    got = splits.load_training_samples(specs, limit=20)
    assert len(got) == 20 * len(specs)  # limit applies per spec
    assert {s.id.split("-")[0] for s in got} == ({"uni", "spider"})
    train, held = splits.split_sample_ids(got)
    assert len(set(train) | set(held)) == len(got)


# ------------------------------------------------------------------------------------- tool env (no model)
def test_tool_env_exposes_tools_and_classify_only_in_classification_phase(samples):
    env = make_environment_factory(samples)()
    assert _tool_names(env) == {"ask_user", "submit_sql", "report_unanswerable"}
    cenv = make_environment_factory(samples, classification_phase=True)()
    assert isinstance(cenv, TextSQLClarifyClassifyToolEnv)
    assert _tool_names(cenv) == {"ask_user", "submit_sql", "report_unanswerable", "classify"}


def test_tool_env_clarification_gets_the_rule_users_reply(samples):
    sid = "uni-scope-001"
    factory = make_environment_factory(samples, reward_preset="shaped")
    env = factory()
    assert env.reset(sample_id=sid, prompt=[{"role": "user", "content": "x"}]) is None
    question = "Do you mean courses that all of them take, or any of them?"
    reply = env.ask_user(question)
    plain = TextSQLClarifyEnv(samples=samples, simulator="rule")
    plain.reset(options={"sample_id": sid})
    _o, _r, _t, _tr, info = plain.step(f"<clarify>{question}</clarify>")
    assert reply == info["messages"][-1]["content"] and reply  # the rule-based user's own reply
    assert env.tool_calls[0] == ("ask_user", question, reply)
    assert not env.done
    gold = _by_id(samples, sid).gold_sql
    assert env.submit_sql(gold) == "SQL received. The episode is over."
    assert env.done and env.scores["ex"] == 1.0
    # shaped: ex 1 - 0.05 for the clarification
    assert env.get_reward() == pytest.approx(0.95)
    assert env.reward_components["ex"] == 1.0 and env.reward_components["turn_penalty"] == -1.0
    # after the end: a message, no reward, no change
    assert env.submit_sql("SELECT 1") == EPISODE_OVER
    assert env.report_unanswerable("no") == EPISODE_OVER
    assert env.get_reward() == pytest.approx(0.95) and len(env.step_rewards) == 2


def test_tool_env_malformed_arguments_go_through_the_env_parser(samples):
    env = make_environment_factory(samples, reward_preset="shaped")()
    env.reset(sample_id="uni-ans-001")
    first = env.ask_user("")
    assert first.startswith("Invalid action: empty clarify action")
    assert env.reward_components["format"] == -1.0 and not env.done
    second = env.submit_sql(["SELECT 1"])  # a non-string argument: the JSON action is malformed
    assert "must be a string" in second and "episode is over" in second
    assert env.done and env.trajectory.outcome == "abstain"
    assert env.get_reward() == pytest.approx(-0.2)
    env.reset(sample_id="uni-missent-001")
    assert env.done is False and env.step_rewards == [] and env.tool_calls == []
    env.report_unanswerable(_by_id(samples, "uni-missent-001").hidden_knowledge)
    assert env.done and env.scores["fb"] in (0.0, 1.0) and env.get_reward() == env.scores["fb"]


def test_tool_env_reset_needs_sample_id(samples):
    env = TextSQLClarifyToolEnv(samples)
    with pytest.raises(KeyError, match="sample_id"):
        env.reset(prompt=[])
    with pytest.raises(KeyError, match="unknown sample_id"):
        env.reset(sample_id="nope")


def test_tool_env_refuses_classification_without_a_classify_tool(samples):
    # the plain tool env has no classify tool: every episode would stop at the classification phase (score 0)
    for kw in ({"classification_phase": True}, {"category_mode": "predicted"}):
        with pytest.raises(ValueError, match="no classify tool.*TextSQLClarifyClassifyToolEnv.*make_environment_factory"):
            TextSQLClarifyToolEnv(samples, **kw)
        env = make_environment_factory(samples, **kw)()  # the factory picks the classify variant
        assert isinstance(env, TextSQLClarifyClassifyToolEnv)
        env.reset(sample_id="uni-ans-001")
        assert env.classify("answerable_without_evidence") == "Category recorded. Now answer the question."
        assert env.submit_sql(_by_id(samples, "uni-ans-001").gold_sql) == "SQL received. The episode is over."
        assert env.scores["ex"] == 1.0
    with pytest.raises(ValueError, match=r"unknown env option\(s\) \['bogus'\]"):
        TextSQLClarifyToolEnv(samples, bogus=1)


def test_tool_env_refusals_name_tools_not_tags(samples):
    tag = re.compile(r"</?(sql|clarify|feedback|category)>|JSON")
    # final turn (no clarifications left): ask_user is refused in terms of the tools
    env = make_environment_factory(samples, max_clarifications=0)()
    env.reset(sample_id="uni-scope-001")
    text = env.ask_user("Which courses do you mean?")
    assert text == ("no clarifications left: this is the final turn, call submit_sql(sql) or "
                    "report_unanswerable(explanation). The episode is over without an answer.")
    assert env.trajectory.outcome == "truncated"
    # the classification phase: a submit_sql call is told to call classify
    cenv = make_environment_factory(samples, classification_phase=True)()
    cenv.reset(sample_id="uni-ans-001")
    text = cenv.submit_sql("SELECT 1")
    assert text == ("Invalid action: this is the classification phase: call classify(category) with one "
                    "subcategory name. Try again (one retry).")
    # a non-string argument: the env's JSON wording is not shown
    text = cenv.classify(5)
    assert text.startswith("the tool's argument must be a string.") and cenv.done
    for e in (env, cenv):
        assert not any(tag.search(t) for _tool, _arg, t in e.tool_calls), e.tool_calls
    # the tagged env still says it with tags (only the tools path is reworded)
    plain = TextSQLClarifyEnv(samples=samples, max_clarifications=0)
    plain.reset(options={"sample_id": "uni-scope-001"})
    assert "answer with <sql> or <feedback>" in plain.step("<clarify>Which?</clarify>")[4]["error"]
    # the prompt's classification request (a user turn) names the tool too
    row = build_prompt_dataset(samples, ["uni-ans-001"], env_kwargs={"classification_phase": True})[0]
    assert not any(tag.search(m["content"]) for m in row["prompt"])
    assert "call classify(category) with one subcategory name" in row["prompt"][-1]["content"]
    assert trl_env.tool_text("nothing to change") == "nothing to change"


def test_tool_env_argument_limit_is_the_arguments_own_length(samples):
    gold = _by_id(samples, "uni-ans-001")
    for limit in (64, 65_536):  # a small limit, and the default one
        env = make_environment_factory(samples, max_action_chars=limit)()
        assert env.max_argument_chars == limit
        for n, accepted in ((limit, True), (limit + 1, False)):
            for ch in ('"', "x", "\\"):  # JSON escapes double '"' and '\\': not counted
                env.reset(sample_id=gold.id)
                text = env.submit_sql("x" + ch * (n - 1))  # a letter: a body of quotes alone is an empty action
                if accepted:
                    assert text == "SQL received. The episode is over.", (limit, n, ch, text[:80])
                else:
                    assert text == (f"Invalid action: submit_sql argument too long: {n} characters (limit {limit}). "
                                    f"Try again (one retry)."), (limit, n, ch)
                    assert env.reward_components["format"] == -1.0 and not env.done
                assert env.env.max_action_chars == limit  # the env's own limit is left as it was
        # the tagged path: the same limit on the action text
        plain = TextSQLClarifyEnv(samples=samples, max_action_chars=limit)
        plain.reset(options={"sample_id": gold.id})
        assert plain.step("<sql>x" + '"' * (limit - 12) + "</sql>")[4]["error"] is None
        plain.reset(options={"sample_id": gold.id})
        assert plain.step("<sql>x" + '"' * (limit - 11) + "</sql>")[4]["error"].startswith("action too long")
    env = make_environment_factory(samples)()
    env.reset(sample_id=gold.id)
    assert env.submit_sql('x' + '"' * 39_999) == "SQL received. The episode is over."  # the red-team case (80,030 escaped)


def test_build_prompt_dataset_styles(samples):
    ids = ["uni-scope-001", "uni-ans-001"]
    ds = build_prompt_dataset(samples, ids)
    assert ds.column_names == ["prompt", "sample_id", "group"]
    assert ds["sample_id"] == ids and ds["group"] == ["ambiguous", "answerable"]
    row = ds[0]
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    assert all(m["sample_id"] == ids[0] for m in row["prompt"])
    assert row["prompt"][0]["content"].startswith(TOOL_INSTRUCTIONS)
    assert "<clarify>" not in row["prompt"][0]["content"] and "Database schema:" in row["prompt"][0]["content"]
    assert row["prompt"][1]["content"] == _by_id(samples, ids[0]).question
    tags = build_prompt_dataset(samples, ids, style="tags")
    env = TextSQLClarifyEnv(samples=samples)
    _o, info = env.reset(options={"sample_id": ids[0]})
    from textsql_clarify.baselines.llm_prompt import agent_messages

    assert [{"role": m["role"], "content": m["content"]} for m in tags[0]["prompt"]] == agent_messages(info)
    with pytest.raises(KeyError, match="nope"):
        build_prompt_dataset(samples, ["nope"])
    with pytest.raises(ValueError, match="style"):
        build_prompt_dataset(samples, ids, style="xml")
    with pytest.raises(ValueError, match=r"build_prompt_dataset env_kwargs: unknown env option\(s\) \['bogus'\]"):
        build_prompt_dataset(samples, ids, env_kwargs={"bogus": 1})


# ------------------------------------------------------------------------------ tagged rollout (no model)
class CharTokenizer:
    """A character-level ChatML tokenizer: one id per character, two special tokens."""

    SPECIAL = {"<|im_start|>": 1, "<|im_end|>": 2}
    eos_token_id = pad_token_id = 2
    eos_token = "<|im_end|>"

    def encode(self, text: str) -> list[int]:
        ids, i = [], 0
        while i < len(text):
            for tok, tid in self.SPECIAL.items():
                if text.startswith(tok, i):
                    ids.append(tid)
                    i += len(tok)
                    break
            else:
                ids.append(ord(text[i]) + 10)
                i += 1
        return ids

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        inv = {v: k for k, v in self.SPECIAL.items()}
        return "".join(("" if skip_special_tokens else inv[i]) if i in inv else chr(i - 10) for i in ids)

    def apply_chat_template(self, messages, tokenize=True, return_dict=False, add_generation_prompt=False, **kw):
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        if add_generation_prompt:
            text += "<|im_start|>assistant\n"
        return self.encode(text) if tokenize else text


class Scripted:
    """A scripted policy: per sample, the action text of each turn; records what it sampled."""

    def __init__(self, tok, samples, scripts):
        self.tok, self.scripts = tok, scripts
        self.questions = {s.id: s.question for s in samples if s.id in scripts}
        self.sampled: dict[str, list[list[int]]] = {sid: [] for sid in scripts}

    def __call__(self, histories, max_new):
        out = []
        for h, m in zip(histories, max_new):
            text = self.tok.decode(h)
            sid = next(i for i, q in self.questions.items() if f"user\n{q}" in text)
            turn = len(self.sampled[sid])
            ids = self.tok.encode(self.scripts[sid][turn])[:m]
            self.sampled[sid].append(ids)
            out.append((ids, [-0.25] * len(ids)))
        return out


def _prompt(sid):
    return [{"role": "system", "content": "ignored", "sample_id": sid},
            {"role": "user", "content": "q", "sample_id": sid}]


def test_rollout_env_mask_covers_exactly_the_users_reply(samples):
    tok = CharTokenizer()
    amb, ans, una = "uni-scope-001", "uni-ans-001", "uni-missent-001"
    clarify = "<clarify>Do you mean courses all of them take?</clarify>"
    sql = f"<sql>{_by_id(samples, amb).gold_sql}</sql><|im_end|>"  # this turn ends with a sampled EOS
    policy = Scripted(tok, samples, {
        amb: [clarify, sql],
        ans: [f"<sql>{_by_id(samples, ans).gold_sql}</sql>"],
        una: [f"<feedback>{_by_id(samples, una).hidden_knowledge}</feedback>"]})
    rollout = make_rollout_func(samples, tokenizer=tok, generate_fn=policy, max_completion_length=4000,
                                max_new_tokens=1000,
                                env_kwargs={"reward_preset": "shaped"})
    out = rollout([_prompt(amb), _prompt(ans), _prompt(una)], None)
    assert set(out) >= {"prompt_ids", "completion_ids", "logprobs", "env_mask", "episode_reward",
                        "reward_components", "episode_scores", "finished", "num_turns", "outcome"}
    # the user's reply, from a plain env given the same action
    plain = TextSQLClarifyEnv(samples=samples, simulator="rule")
    _o, info = plain.reset(options={"sample_id": amb})
    _o, _r, _t, _tr, info = plain.step(clarify)
    reply = info["messages"][-1]["content"]
    s0, s1 = policy.sampled[amb]
    added = [tok.eos_token_id] + turn_suffix_ids(tok, reply)
    assert tok.decode(added) == f"<|im_end|>\n<|im_start|>user\n{reply}<|im_end|>\n<|im_start|>assistant\n"
    c, m = out["completion_ids"][0], out["env_mask"][0]
    assert c == s0 + added + s1  # token in, token out: the sampled ids as sampled, the reply appended once
    assert m == [1] * len(s0) + [0] * len(added) + [1] * len(s1)
    assert out["logprobs"][0] == [-0.25] * len(s0) + [0.0] * len(added) + [-0.25] * len(s1)
    assert out["prompt_ids"][0][-len(tok.encode("<|im_start|>assistant\n")):] == tok.encode("<|im_start|>assistant\n")
    assert out["episode_reward"][0] == pytest.approx(0.95) and out["outcome"][0] == "sql"
    assert out["reward_components"][0]["turn_penalty"] == -1.0 and out["num_turns"][0] == 2
    # single-turn episodes: the sampled action, then one added EOS closing the turn (mask 0)
    s_ans = policy.sampled[ans][0]
    assert out["completion_ids"][1] == s_ans + [2] and out["env_mask"][1] == [1] * len(s_ans) + [0]
    assert out["episode_reward"][1] == 1.0 and out["episode_scores"][1]["ex"] == 1.0
    assert out["outcome"][2] == "feedback" and out["episode_reward"][2] == out["episode_scores"][2]["fb"]
    assert out["finished"] == [True, True, True]
    assert rollout_reward(prompts=None, completions=None, **out) == out["episode_reward"]


def test_rollout_prompt_is_the_envs_own_chat(samples):
    tok = CharTokenizer()
    sid = "uni-ans-001"
    policy = Scripted(tok, samples, {sid: ["<sql>SELECT 1</sql>"]})
    out = make_rollout_func(samples, tokenizer=tok, generate_fn=policy, max_completion_length=100)([_prompt(sid)], None)
    env = TextSQLClarifyEnv(samples=samples)
    _o, info = env.reset(options={"sample_id": sid})
    from textsql_clarify.baselines.llm_prompt import agent_messages

    assert out["prompt_ids"][0] == tok.apply_chat_template(agent_messages(info), add_generation_prompt=True)
    assert out["episode_reward"] == [0.0] and out["episode_scores"][0]["ex"] == 0.0


def test_rollout_budget_drift_and_question_lookup(samples):
    tok = CharTokenizer()
    drift = _by_id(samples, "uni-drift-001")
    policy = Scripted(tok, samples, {drift.id: [f"<sql>{drift.gold_sql}</sql>",
                                                f"<sql>{drift.drift.post_gold_sql}</sql>"]})
    # no sample_id key: the rollout finds the sample by its question
    prompt = [{"role": "system", "content": "s"}, {"role": "user", "content": drift.question}]
    out = make_rollout_func(samples, tokenizer=tok, generate_fn=policy, max_completion_length=4000,
                            max_new_tokens=1000)([prompt], None)
    reply = turn_suffix_ids(tok, drift.drift.utterance)
    s0, s1 = policy.sampled[drift.id]
    assert out["completion_ids"][0] == s0 + [2] + reply + s1 + [2]
    assert out["episode_scores"][0]["ex_post"] == 1.0 and out["finished"] == [True]
    # a budget that the drift utterance does not fit in: stopped after the first SQL, unfinished, within budget
    policy2 = Scripted(tok, samples, {drift.id: [f"<sql>{drift.gold_sql}</sql>", "<sql>SELECT 1</sql>"]})
    budget = len(policy2.tok.encode(f"<sql>{drift.gold_sql}</sql>")) + 5
    out2 = make_rollout_func(samples, tokenizer=tok, generate_fn=policy2, max_completion_length=budget,
                             max_new_tokens=1000)([prompt], None)
    assert out2["finished"] == [False] and out2["outcome"] == ["unfinished"]
    assert len(out2["completion_ids"][0]) <= budget and sum(out2["env_mask"][0]) == len(policy2.sampled[drift.id][0])
    assert out2["episode_reward"] == [1.0]  # the pre-drift SQL's step reward (binary EX 1)
    with pytest.raises(KeyError, match="names no sample"):
        make_rollout_func(samples, tokenizer=tok, generate_fn=policy)([[{"role": "user", "content": "?"}]], None)


def test_rollout_reward_checks_rows_and_logs_components():
    logged = {}
    r = rollout_reward(episode_reward=[1.0, 0.0], reward_components=[{"ex": 1.0, "feedback": None},
                                                                     {"ex": 0.0, "feedback": None}],
                       sample_id=["a", "b"], rollout_sample_id=["a", "b"],
                       log_metric=lambda k, v: logged.__setitem__(k, v))
    assert r == [1.0, 0.0] and logged == {"env/ex": 0.5, "env/ex_n": 2.0, "env/feedback_n": 0.0}
    with pytest.raises(ValueError, match="played"):
        rollout_reward(episode_reward=[1.0], sample_id=["a"], rollout_sample_id=["b"])
    with pytest.raises(ValueError, match="episode_reward"):
        rollout_reward(prompts=[], completions=[])
    # lists of different lengths are an error, not a shorter check (zip would stop at the shorter one)
    with pytest.raises(ValueError, match="rollout_sample_id has 1 entries but episode_reward has 2"):
        rollout_reward(episode_reward=[1.0, 1.0], sample_id=["a", "b"], rollout_sample_id=["a"])
    with pytest.raises(ValueError, match="sample_id has 2 entries but episode_reward has 1"):
        rollout_reward(episode_reward=[1.0], sample_id=["a", "b"], rollout_sample_id=["a", "b"])
    with pytest.raises(ValueError, match="reward_components has 1 entries"):
        rollout_reward(episode_reward=[1.0, 0.0], reward_components=[{"ex": 1.0}])
    with pytest.raises(ValueError, match="completions has 3 entries"):
        rollout_reward(completions=["a", "b", "c"], episode_reward=[1.0, 0.0])


# ---------------------------------------------------------------------------------------- model tests
@pytest.fixture(scope="module")
def smollm2():
    """The prepared SmolLM2-135M-Instruct folder (float32, CPU)."""
    from textsql_clarify.models import prepare_model

    try:
        return str(prepare_model("smollm2"))
    except Exception as e:  # noqa: BLE001 - no packaged model on this machine
        pytest.skip(f"SmolLM2 cannot be prepared here: {e}")


def _gold_tables(sample, names):
    """A ``schema_tables`` hook showing only the gold's tables: short prompts for the 2-core CPU tests."""
    return [n for n in names if sample.gold_sql and re.search(rf"\b{re.escape(n)}\b", sample.gold_sql, re.I)]


#: env options of the model tests (short prompts)
SHORT = {"schema_tables": _gold_tables}


def _tokenizer(folder):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


def test_tool_template_passes_trls_checks_and_parses_calls(smollm2, samples):
    from trl.chat_template_utils import is_chat_template_prefix_preserving, parse_response, supports_tool_calling

    tok = _tokenizer(smollm2)
    chats = [[{"role": "system", "content": "S"}, {"role": "user", "content": "hi"},
              {"role": "assistant", "content": "<sql>SELECT 1</sql>"}, {"role": "user", "content": "more"}],
             [{"role": "user", "content": "hi"}]]
    before = [tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in chats]
    assert not supports_tool_calling(tok)  # SmolLM2's own template drops tool calls
    trl_env.apply_tool_chat_template(tok)
    assert supports_tool_calling(tok) and is_chat_template_prefix_preserving(tok)
    assert [tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in chats] == before
    env = make_environment_factory(samples)()
    tools = [env.ask_user, env.submit_sql, env.report_unanswerable]
    prefix = tok.apply_chat_template(chats[1], tools=tools, tokenize=True, add_generation_prompt=True,
                                     return_dict=False)
    assert '"name": "ask_user"' in tok.decode(prefix)
    call = '<tool_call>\n{"name": "ask_user", "arguments": {"question": "Which year?"}}\n</tool_call><|im_end|>'
    parsed = parse_response(tok, tok.encode(call), prefix=prefix, tools=tools)
    assert parsed["tool_calls"] == [{"type": "function", "function": {"name": "ask_user",
                                                                      "arguments": {"question": "Which year?"}}}]
    plain = parse_response(tok, tok.encode("<sql>SELECT 1</sql><|im_end|>"), prefix=prefix, tools=tools)
    assert plain["content"] == "<sql>SELECT 1</sql>" and not plain.get("tool_calls")


def _grpo_args(tmp_path, **kw):
    from trl import GRPOConfig

    base = dict(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=2, num_generations=2,
                max_completion_length=48, use_cpu=True, report_to=[], logging_steps=1, save_strategy="no",
                beta=0.0, learning_rate=1e-4, seed=0, dataloader_num_workers=0, shuffle_dataset=False,
                temperature=1.0, gradient_checkpointing=False,
                # GRPOConfig defaults bf16 to True: on CPU that is bf16 autocast, which CPUs without native
                # bf16 matmuls (AVX2) run several times slower than float32, in generation, forward and backward
                bf16=False)
    base.update(kw)
    return GRPOConfig(**base)


def test_grpo_environment_factory_scripted_clarification(smollm2, samples, tmp_path):
    """Inside a TRL rollout, the model's ask_user call is executed on the env and answered by the rule
    user; the reply's tokens are masked out (tool_mask 0); the episode rewards differ, so a step trains."""
    import torch
    from trl import GRPOTrainer

    tok = trl_env.apply_tool_chat_template(_tokenizer(smollm2))
    sid = "uni-vague-001"
    gold = _by_id(samples, sid).gold_sql
    made = []
    base_factory = make_environment_factory(samples, **SHORT)

    def factory():
        made.append(base_factory())
        return made[-1]

    trainer = GRPOTrainer(model=smollm2, processing_class=tok, environment_factory=factory,
                          train_dataset=build_prompt_dataset(samples, [sid], env_kwargs=SHORT, example=False),
                          args=_grpo_args(tmp_path, max_steps=1, max_completion_length=160))
    question = "Which years count as recent?"
    scripts = [f'<tool_call>\n{{"name": "ask_user", "arguments": {json.dumps({"question": question})}}}\n</tool_call>'
               "<|im_end|>",
               f'<tool_call>\n{{"name": "submit_sql", "arguments": {json.dumps({"sql": gold})}}}\n</tool_call>'
               "<|im_end|>",
               '<tool_call>\n{"name": "submit_sql", "arguments": {"sql": "SELECT 1"}}\n</tool_call><|im_end|>']
    calls = []

    def scripted(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        calls.append(len(prompt_ids))
        if len(calls) == 1:  # both generations of the group ask first
            return [tok.encode(scripts[0]) for _ in prompt_ids], None
        return [tok.encode(scripts[1 + k]) for k in range(len(prompt_ids))], None  # then one right, one wrong

    trainer._generate_single_turn = scripted
    captured = {}
    real_generate = trainer._generate

    def capture(prompts):
        out = real_generate(prompts)
        captured["out"] = copy.deepcopy(out[:5])
        return out

    trainer._generate = capture
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    used = [e for e in made if e.sample_id == sid]
    assert len(used) >= 2
    plain = TextSQLClarifyEnv(samples=samples, simulator="rule")
    plain.reset(options={"sample_id": sid})
    reply = plain.step(f"<clarify>{question}</clarify>")[4]["messages"][-1]["content"]
    for e in used[-2:]:
        assert e.tool_calls[0] == ("ask_user", question, reply)  # answered by the simulated user
        assert e.done
    assert sorted(e.get_reward() for e in used[-2:]) == [0.0, 1.0]
    prompt_ids, completion_ids, tool_mask, completions, _lp = captured["out"]
    reply_ids = tok.encode(reply)
    for ids, mask in zip(completion_ids, tool_mask):
        masked = [t for t, m in zip(ids, mask) if m == 0]
        assert tok.decode(masked).count(reply) == 1  # the reply's tokens are all masked ...
        sampled = [t for t, m in zip(ids, mask) if m == 1]
        assert reply not in tok.decode(sampled)  # ... and none of them counts as sampled
        assert all(t in masked for t in reply_ids)
        assert ids[: len(tok.encode(scripts[0]))] == tok.encode(scripts[0])
    assert any(c["role"] == "tool" and c["content"] == reply for c in completions[0])
    log = [h for h in trainer.state.log_history if "reward" in h]
    assert log and log[0]["reward"] == pytest.approx(0.5)
    changed = any(not torch.equal(a, b.detach()) for a, b in zip(before, trainer.model.parameters()))
    assert changed  # rewards 1 and 0 in the group: a nonzero advantage, so the step moved the weights


def test_grpo_environment_factory_trains_two_steps(smollm2, samples, tmp_path):
    from trl import GRPOTrainer

    tok = trl_env.apply_tool_chat_template(_tokenizer(smollm2))
    ids = ["uni-vague-001", "uni-evd-001"]
    trainer = GRPOTrainer(model=smollm2, processing_class=tok,
                          environment_factory=make_environment_factory(samples, **SHORT),
                          train_dataset=build_prompt_dataset(samples, ids, env_kwargs=SHORT, example=False),
                          args=_grpo_args(tmp_path, max_completion_length=32, max_tool_calling_iterations=2))
    trainer.train()
    assert trainer.state.global_step == 2
    log = [h for h in trainer.state.log_history if "reward" in h]
    assert len(log) == 2
    assert all("rewards/TextSQLClarifyToolEnv/mean" in h and "tools/call_frequency" in h for h in log)
    assert all(0.0 <= h["reward"] <= 1.0 for h in log)


def test_grpo_rollout_func_trains_two_steps(smollm2, samples, tmp_path):
    import torch
    from trl import GRPOTrainer

    tok = _tokenizer(smollm2)
    ids = ["uni-vague-001", "uni-evd-001"]
    rollout = make_rollout_func(samples, max_new_tokens=24, env_kwargs={"reward_preset": "binary", **SHORT},
                                example=False)
    captured = []

    def recording(prompts, trainer):
        model = trainer.model
        real = model.generate
        seen = []

        def gen(*a, **k):
            out = real(*a, **k)
            seen.append((k["input_ids"].shape[1], out.sequences.clone()))
            return out

        model.generate = gen
        try:
            out = rollout(prompts, trainer)
        finally:
            del model.generate
        captured.append((out, seen))
        return out

    trainer = GRPOTrainer(model=smollm2, processing_class=tok, reward_funcs=rollout_reward, rollout_func=recording,
                          train_dataset=build_prompt_dataset(samples, ids, style="tags", env_kwargs=SHORT,
                                                             example=False),
                          args=_grpo_args(tmp_path))
    trainer.train()
    assert trainer.state.global_step == 2
    log = [h for h in trainer.state.log_history if "reward" in h]
    assert len(log) == 2 and all("env/format_n" in h for h in log)
    for out, seen in captured:
        assert len(out["completion_ids"]) == 2  # one episode per (repeated) prompt row
        width, seqs = seen[0]
        for r, (c, m) in enumerate(zip(out["completion_ids"], out["env_mask"])):
            assert len(c) == len(m) == len(out["logprobs"][r]) and len(c) <= 48
            n0 = m.index(0) if 0 in m else len(m)
            assert n0 >= 1 and c[:n0] == seqs[r, width:width + n0].tolist()  # the first action as sampled
            assert all(lp == 0.0 for lp, mm in zip(out["logprobs"][r], m) if mm == 0)
            assert all(lp <= 0.0 for lp in out["logprobs"][r])
        assert all(torch.isfinite(torch.tensor(out["episode_reward"])))


def test_rollout_charges_the_format_penalty_env_step_charges(samples):
    """Training parses as evaluation does: a completion the env's parser refuses (two actions, an action only
    inside a think block, an action cut at the token limit) costs the rollout the same format penalty as
    ``env.step`` of that completion; a completion it reads as one action is that action on both paths."""
    tok = CharTokenizer()
    gold = _by_id(samples, "uni-ans-001").gold_sql
    completions = {"uni-ans-001": f"<sql>{gold}</sql><sql>SELECT 1</sql>",
                   "uni-ans-002": f"<think><sql>{_by_id(samples, 'uni-ans-002').gold_sql}</sql></think>",
                   "uni-ans-003": f"<sql>{_by_id(samples, 'uni-ans-003').gold_sql}",
                   "uni-evd-001": f"Sure. <think>x</think><sql>{_by_id(samples, 'uni-evd-001').gold_sql}</sql> Done."}
    policy = Scripted(tok, samples, {sid: [c] for sid, c in completions.items()})
    out = make_rollout_func(samples, tokenizer=tok, generate_fn=policy, max_completion_length=4000, max_turns=1,
                            max_new_tokens=1000)([_prompt(sid) for sid in completions], None)
    plain = TextSQLClarifyEnv(samples=samples, simulator="rule")
    want = []
    for sid, c in completions.items():
        plain.reset(options={"sample_id": sid})
        want.append(plain.step(c)[4]["reward_components"]["format"])
    assert want == [-1.0, -1.0, -1.0, 0.0]
    assert [comps["format"] for comps in out["reward_components"]] == want
    assert out["episode_scores"][3]["ex"] == 1.0 and out["finished"] == [False, False, False, True]
