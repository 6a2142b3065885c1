"""Sampling settings and model modes, without loading a language model (stub models and tokenizers):
the TRL rollout sampler (trainer's sampling settings, gradient-checkpointing kwargs, log-probabilities
aligned with the sampled ids) and TransformersAgent on an in-memory model in train mode."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest


# ------------------------------------------------------------------------------ stubs
class CharTok:
    """One id per character (ord + 10); ``<|im_end|>`` is id 2 (EOS and pad)."""

    eos_token_id = pad_token_id = 2
    eos_token = pad_token = "<|im_end|>"
    chat_template = None

    def encode(self, text):
        return [ord(c) + 10 for c in text]

    def decode(self, ids, skip_special_tokens=False):
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        return "".join(("" if skip_special_tokens else self.eos_token) if i == 2 else chr(i - 10) for i in ids)

    def __call__(self, prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False):
        import torch

        assert padding_side == "left" and padding
        rows = [self.encode(p) for p in prompts]
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for k, r in enumerate(rows):
            ids[k, width - len(r):] = torch.tensor(r)
            mask[k, width - len(r):] = 1
        return {"input_ids": ids, "attention_mask": mask}


class ScriptedLM:
    """A stub causal LM: ``generate`` appends each row's scripted ids (padded with EOS) and returns
    per-step logits that put ``logit`` on the scripted token; records its calls."""

    def __init__(self, tok, texts, vocab=200, logit=3.0):
        import torch

        self.tok, self.texts, self.vocab, self.logit = tok, texts, vocab, logit
        self.training = True
        self.calls: list[dict] = []
        self.modes: list[bool] = []
        self.is_gradient_checkpointing = True
        self.checkpointing: list = []
        self.generation_config = SimpleNamespace(eos_token_id=2)
        self._p = torch.nn.Parameter(torch.zeros(1))

    # torch.nn.Module-like surface that the code under test touches
    def parameters(self):
        yield self._p

    def eval(self):
        self.training = False
        return self

    def train(self, mode=True):
        self.training = mode
        return self

    def gradient_checkpointing_disable(self):
        self.checkpointing.append("off")

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs=None):
        self.checkpointing.append(("on", gradient_checkpointing_kwargs))

    def generate(self, input_ids, attention_mask, **kw):
        import torch

        self.calls.append(kw)
        self.modes.append(self.training)
        rows = [self.tok.encode(t) for t in self.texts[: input_ids.shape[0]]]
        steps = min(kw["max_new_tokens"], max(len(r) for r in rows) + 1)  # room for one EOS after the text
        new = torch.full((input_ids.shape[0], steps), 2, dtype=torch.long)
        logits = torch.zeros((input_ids.shape[0], steps, self.vocab))
        for k, r in enumerate(rows):
            r = r[:steps]
            new[k, : len(r)] = torch.tensor(r, dtype=torch.long)
        for t in range(steps):
            logits[torch.arange(new.shape[0]), t, new[:, t]] = self.logit
        seq = torch.cat([input_ids, new], dim=1)
        if kw.get("return_dict_in_generate"):
            return SimpleNamespace(sequences=seq, logits=tuple(logits[:, t] for t in range(steps)))
        return seq


# ------------------------------------------------------------------------------ TRL rollout sampler
def _trainer(model, **args):
    import torch

    base = dict(temperature=0.7, top_p=1.0, top_k=0, min_p=None, repetition_penalty=1.0, generation_kwargs=None,
                ds3_gather_for_generation=True, gradient_checkpointing_kwargs=None)
    base.update(args)
    acc = SimpleNamespace(device=torch.device("cpu"), unwrap_model=lambda m: m,
                          state=SimpleNamespace(deepspeed_plugin=None, fsdp_plugin=None))
    return SimpleNamespace(model=model, model_wrapped=model, accelerator=acc, args=SimpleNamespace(**base))


def test_rollout_sampler_uses_the_trainers_settings_and_restores_checkpointing_kwargs():
    pytest.importorskip("trl", reason="the rollout sampler uses TRL's unwrap_model_for_generation (trl extra)")
    from textsql_clarify.baselines.llm_prompt import STOP_STRINGS
    from textsql_clarify.integrations.trl_rollout import _default_generate

    tok = CharTok()
    lm = ScriptedLM(tok, ["<sql>SELECT 1</sql> trailing", "<clarify>Which?</clarify>"])
    ck = {"use_reentrant": True}  # what TRL forces for PEFT + ZeRO-3
    trainer = _trainer(lm, min_p=0.05, repetition_penalty=1.2, gradient_checkpointing_kwargs=ck,
                       generation_kwargs={"no_repeat_ngram_size": 3, "temperature": 5.0})
    gen = _default_generate(trainer, tok, temperature=0.7, top_p=1.0, top_k=0, stop_strings=STOP_STRINGS)
    out = gen([tok.encode("abc"), tok.encode("a")], [64, 5])
    kw = lm.calls[0]
    assert kw["min_p"] == 0.05 and kw["repetition_penalty"] == 1.2 and kw["no_repeat_ngram_size"] == 3
    assert kw["temperature"] == 0.7 and kw["do_sample"] is True  # generation_kwargs never override ours
    # checkpointing turned off for generation and back on with the trainer's kwargs (not transformers' default)
    assert lm.checkpointing == ["off", ("on", ck)]
    # row 0 cut right after its closing tag; row 1 capped at its own max_new (5)
    ids0, lps0 = out[0]
    assert tok.decode(ids0) == "<sql>SELECT 1</sql>" and len(lps0) == len(ids0)
    assert tok.decode(out[1][0]) == "<clar" and len(out[1][1]) == 5
    # log-probabilities: log_softmax(logits / temperature) at the sampled ids
    p = math.exp(3.0 / 0.7)
    expected = math.log(p / (p + 199))
    assert lps0 == pytest.approx([expected] * len(ids0), rel=1e-5)


def test_rollout_sampler_greedy_sends_no_sampling_settings():
    pytest.importorskip("trl", reason="the rollout sampler uses TRL's unwrap_model_for_generation (trl extra)")
    from textsql_clarify.integrations.trl_rollout import _default_generate

    tok = CharTok()
    lm = ScriptedLM(tok, ["<sql>x</sql>"])
    gen = _default_generate(_trainer(lm, min_p=0.1), tok, temperature=0, top_p=1.0, top_k=0, stop_strings=())
    (ids, lps), = gen([tok.encode("q")], [20])
    kw = lm.calls[0]
    assert kw["do_sample"] is False and "min_p" not in kw and "repetition_penalty" not in kw
    assert tok.decode(ids) == "<sql>x</sql><|im_end|>"  # no stop strings: cut at the first EOS
    assert lm.checkpointing == ["off", ("on", None)]
    p = math.exp(3.0)
    assert lps == pytest.approx([math.log(p / (p + 199))] * len(ids), rel=1e-5)


# ------------------------------------------------------------------------------ TransformersAgent
def test_transformers_agent_generates_in_eval_mode_and_gives_the_model_back_in_train_mode():
    pytest.importorskip("torch", reason="TransformersAgent needs torch (hf extra)")
    from textsql_clarify.baselines.llm_agents import TransformersAgent

    tok = CharTok()
    lm = ScriptedLM(tok, ["<sql>SELECT 1</sql>", "<clarify>Which year?</clarify>"])
    agent = TransformersAgent((lm, tok), max_new_tokens=40)
    infos = [{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": q}]}
             for q in ("How many?", "Which one do you mean?")]
    actions = agent.act_batch([{}, {}], infos)
    assert actions == ["<sql>SELECT 1</sql>", "<clarify>Which year?</clarify>"]
    assert lm.modes == [False]          # dropout off while generating (a LoRA policy has lora_dropout)
    assert lm.training is True          # the training script gets its model back as it was
    assert agent.generate_calls == 1 and agent.batch_rows == [2]
    lm.eval()
    agent.act({}, infos[0])
    assert lm.modes == [False, False] and lm.training is False  # an eval-mode model stays in eval mode
