"""The trainer adapters (prompt dataset, TRL tool env, TRL rollout, OpenEnv, verifiers) honour exclude_flags, a
split by database, and pass the ``decision`` reward component (presets ``decision`` / ``shaped_decision``)
through. Scripted policies and in-process envs only: no model, no server."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from textsql_clarify.datasets import load_dataset
from textsql_clarify.integrations import splits

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
UNA = DATA / "spider_unanswerable" / "spider_no_answer.json"
SPIDER = DATA / "spider_dev"
AMB, UNA_ID, ANS = "uni-scope-001", "uni-missent-001", "uni-ans-001"


@pytest.fixture(scope="module")
def samples():
    return load_dataset("embedded")


@pytest.fixture(scope="module")
def flagged(samples):
    """The embedded sample that carries a load-time flag (duplicate_gold: one)."""
    out = [s for s in samples if s.flags]
    assert [s.flags for s in out] == [("duplicate_gold",)]
    return out[0]


@pytest.fixture(scope="module")
def mixed(samples):
    """Embedded (one database) plus Spider-unanswerable (20 databases): 228 samples a split by database can cut."""
    if not (UNA.is_file() and (SPIDER / "database").is_dir()):
        pytest.skip(f"Spider-unanswerable or Spider dev absent from {DATA}")
    return [*samples, *load_dataset(f"spider-unanswerable:{UNA}:{SPIDER}")]


def _by_id(samples, sid):
    return next(s for s in samples if s.id == sid)


def test_select_samples_split_then_flags(samples, flagged, mixed):
    train, held = splits.split_sample_ids(mixed, by="db", seed=0)
    assert (len(train), len(held)) == (174, 54)
    got = splits.select_samples(mixed, split="heldout")
    assert [s.id for s in got] == held
    kept = splits.select_samples(mixed, split="train", exclude_flags=("duplicate_gold",))
    assert [s.id for s in kept] == [i for i in train if i != flagged.id]
    with pytest.raises(ValueError, match="not on the 'train' side"):
        splits.select_samples(mixed, split="train", sample_ids=[held[0]])
    with pytest.raises(ValueError, match="unknown flag"):
        splits.select_samples(samples, exclude_flags=("shiny",))


# ------------------------------------------------------------------------------------------ prompt dataset
def test_prompt_dataset_skips_flagged_and_keeps_one_side(samples, flagged, mixed):
    pytest.importorskip("datasets", reason="build_prompt_dataset needs the datasets library (trl extra)")
    from textsql_clarify.integrations.trl_env import build_prompt_dataset

    ds = build_prompt_dataset(samples, exclude_flags=("duplicate_gold",), example=False)
    assert len(ds) == 47 and flagged.id not in ds["sample_id"]
    named = build_prompt_dataset(samples, [ANS, flagged.id], env_kwargs={"exclude_flags": ["duplicate_gold"]},
                                 example=False)
    assert named["sample_id"] == [ANS]
    held = splits.split_sample_ids(mixed, by="db", seed=0)[1]
    tags = build_prompt_dataset(mixed, style="tags", split="heldout", example=False)
    assert tags["sample_id"] == held and set(tags["group"]) == {"unanswerable"}


# ------------------------------------------------------------------------------------------ TRL tool env
def test_tool_env_pays_the_decision_preset_and_refuses_excluded_samples(samples, flagged):
    pytest.importorskip("trl", reason="the TRL adapters need the trl extra")
    from textsql_clarify.integrations.trl_env import make_environment_factory

    factory = make_environment_factory(samples, reward_preset="decision", exclude_flags=("duplicate_gold",))
    env = factory()
    env.reset(sample_id=AMB)
    env.ask_user("Do you want only the courses that all of those students take?")
    assert env.reward_components["decision"] == 1.0 and env.decision == {"kind": "clarify", "expected": "clarify"}
    env.submit_sql(_by_id(samples, AMB).gold_sql)
    assert env.done and env.get_reward() == 1.0 and env.reward_components["decision"] == 1.0
    env.reset(sample_id=UNA_ID)
    env.submit_sql("SELECT 1")  # answering an unanswerable question: the wrong decision
    assert env.reward_components["decision"] == 0.0 and env.get_reward() == 0.0
    with pytest.raises(KeyError):
        env.reset(sample_id=flagged.id)


# ------------------------------------------------------------------------------------------ TRL rollout
class _CharTokenizer:
    """A character-level ChatML tokenizer: one id per character, two special tokens."""

    SPECIAL = {"<|im_start|>": 1, "<|im_end|>": 2}
    eos_token_id = pad_token_id = 2

    def encode(self, text):
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

    def decode(self, ids, skip_special_tokens=False):
        inv = {v: k for k, v in self.SPECIAL.items()}
        return "".join(("" if skip_special_tokens else inv[i]) if i in inv else chr(i - 10) for i in ids)

    def apply_chat_template(self, messages, tokenize=True, return_dict=False, add_generation_prompt=False, **kw):
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        if add_generation_prompt:
            text += "<|im_start|>assistant\n"
        return self.encode(text) if tokenize else text


def test_rollout_passes_the_decision_component_and_honours_the_split(samples, mixed):
    from textsql_clarify.integrations.trl_rollout import make_rollout_func, rollout_reward

    tok = _CharTokenizer()
    gold = _by_id(samples, AMB).gold_sql
    script = {AMB: ["<clarify>Only the courses all of them take?</clarify>", f"<sql>{gold}</sql>"],
              UNA_ID: ["<sql>SELECT 1</sql>"]}
    questions = {sid: _by_id(samples, sid).question for sid in script}
    turns = {sid: 0 for sid in script}

    def policy(histories, max_new):
        out = []
        for h, m in zip(histories, max_new):
            text = tok.decode(h)
            sid = next(i for i, q in questions.items() if f"user\n{q}" in text)
            ids = tok.encode(script[sid][turns[sid]])[:m]
            turns[sid] += 1
            out.append((ids, [0.0] * len(ids)))
        return out

    rollout = make_rollout_func(samples, tokenizer=tok, generate_fn=policy, max_completion_length=4000,
                                max_new_tokens=1000, env_kwargs={"reward_preset": "shaped_decision"})
    prompts = [[{"role": "user", "content": "q", "sample_id": sid}] for sid in (AMB, UNA_ID)]
    out = rollout(prompts, None)
    assert [c["decision"] for c in out["reward_components"]] == [1.0, 0.0]
    assert out["decision"] == [{"kind": "clarify", "expected": "clarify"}, {"kind": "sql", "expected": "feedback"}]
    # shaped_decision: ex 1 + decision 1 - one clarification 0.05; the wrong answer earns nothing
    assert out["episode_reward"] == [pytest.approx(1.95), 0.0]
    logged = {}
    rollout_reward(log_metric=logged.__setitem__, **out)
    assert logged["env/decision"] == 0.5 and logged["env/decision_n"] == 2.0
    # a rollout over the held-out side of a split by database refuses a training sample's prompt
    held_only = make_rollout_func(mixed, tokenizer=tok, generate_fn=policy, split="heldout")
    with pytest.raises(KeyError):
        held_only([[{"role": "user", "content": "q", "sample_id": AMB}]], None)


# ------------------------------------------------------------------------------------------ OpenEnv
def test_openenv_observation_carries_the_decision(samples, flagged, mixed):
    pytest.importorskip("openenv", reason="the OpenEnv adapter needs openenv-core (extra 'openenv')")
    from textsql_clarify.integrations.openenv_server import (SharedResources, TextSQLClarifyAction,
                                                            TextSQLClarifyEnvironment, UnknownSampleError)

    env = TextSQLClarifyEnvironment(samples=samples, reward_preset="decision", exclude_flags=("duplicate_gold",))
    env.reset(sample_id=AMB)
    obs = env.step(TextSQLClarifyAction(action="<clarify>Only the courses all of them take?</clarify>"))
    assert obs.reward == 1.0 and obs.reward_components["decision"] == 1.0 and not obs.done
    assert obs.decision == {"kind": "clarify", "expected": "clarify"}
    obs = env.step(TextSQLClarifyAction(action=f"<sql>{_by_id(samples, AMB).gold_sql}</sql>"))
    assert obs.done and obs.decision is None and obs.reward_components.get("decision") is None
    assert env.state.episode_reward == 1.0
    with pytest.raises(UnknownSampleError):
        env.reset(sample_id=flagged.id)
    shared = SharedResources(samples=mixed, split="train", split_seed=0)
    assert [s.id for s in shared.samples] == splits.split_sample_ids(mixed, by="db", seed=0)[0]


# ------------------------------------------------------------------------------------------ verifiers
def test_verifiers_taskset_selects_and_records_the_decision(samples, flagged):
    pytest.importorskip("verifiers.v1", reason="the verifiers adapter needs verifiers>=0.4 (extra 'verifiers')")
    from textsql_clarify.integrations import verifiers_env as ve

    cfg = ve.TextSQLClarifyTasksetConfig(dataset="embedded", reward_preset="decision",
                                         exclude_flags=["duplicate_gold"])
    ts = ve.TextSQLClarifyTaskset(cfg)
    ids = [t.data.sample_id for t in ts.load()]
    assert len(ids) == 47 and flagged.id not in ids
    env = ts.make_env()
    env.reset(options={"sample_id": AMB})
    st = ve.TextSQLClarifyState()
    _o, reward, _t, _tr, info = env.step("<clarify>Only the courses all of them take?</clarify>")
    st.record(reward, info.get("reward_components") or {})
    assert st.episode_reward == 1.0 and st.reward_components["decision"] == 1.0
    assert info["decision"] == {"kind": "clarify", "expected": "clarify"}
    # the taskset config takes a dataset spec; embedded is one database, so its split here is by group
    env2 = ve.load_environment("embedded", split="heldout", split_by="group", reward_preset="decision")
    got = [t.data.sample_id for t in env2.taskset.load()]
    assert got == splits.split_sample_ids(samples, by="group", seed=0)[1] and len(got) == 12
