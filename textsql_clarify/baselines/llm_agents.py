"""LLM agents on HF transformers: a local causal LM that answers every live env of a turn in one call.

:class:`TransformersAgent` renders the shared prompt (:func:`~textsql_clarify.baselines.llm_prompt.agent_messages`:
the env's ``info["messages"]`` plus one worked example) with the tokenizer's chat template, generates
greedily until the first closing action tag (:data:`~textsql_clarify.baselines.llm_prompt.STOP_STRINGS`),
and cuts the completion to one action (:func:`~textsql_clarify.baselines.llm_prompt.extract_action`).
:meth:`TransformersAgent.act_batch` takes the observations of every live env of a lockstep turn and
answers them with one left-padded ``model.generate`` call (``rollout.episodes.run_lockstep`` calls it once
per turn), so N envs cost one generate per turn rather than N.

Models load offline: ``"smollm2"`` (or any spec) goes through
:func:`textsql_clarify.models.resolve_trainable` (a packaged GGUF model is turned into a plain checkpoint
once) and :func:`textsql_clarify.simulators.hf_models.load_causal_lm` (cached per process, so the agent
and a transformers simulated user built on the same folder share one copy). An already-loaded
``(model, tokenizer)`` pair is accepted too: a training script evaluates its policy in memory.

torch and transformers are imported inside the methods (the ``hf`` extra); importing this module is light.
"""
from __future__ import annotations

import os
from typing import Any, Sequence

from .llm_prompt import STOP_STRINGS, agent_messages, extract_action, is_format_valid

__all__ = ["TransformersAgent"]


class TransformersAgent:
    """A transformers causal LM as an agent (not privileged: it sees only observations and ``info``).

    Args:
        model: a model spec (``"smollm2"`` = the prepared SmolLM2-135M-Instruct, a model folder, a
            ``.gguf`` file, an installed model package, a hub id already in the local HF cache), or an
            already-loaded ``(model, tokenizer)`` pair, or a
            :class:`~textsql_clarify.simulators.hf_models.LoadedModel`, or a model object with
            ``tokenizer=`` given.
        tokenizer: the tokenizer, when ``model`` is a loaded model object.
        max_new_tokens: most tokens generated per action (int >= 1; default 128).
        do_sample: sample instead of greedy decoding (default False: greedy, so runs repeat; ``docs/simulator.md``,
            "Determinism").
        temperature, top_p: sampling settings, used only with ``do_sample``.
        seed: with ``do_sample``, each generate call seeds torch's RNG with ``seed + call number`` inside
            a forked RNG state (the global RNG is left untouched); ``None`` leaves sampling unseeded.
        device: ``"auto"`` (CUDA when available), ``"cpu"``, ``"cuda"``; used when loading from a spec.
        dtype: ``None``/``"auto"`` (float32 on CPU, bfloat16 on CUDA), a name or a ``torch.dtype``; used
            when loading from a spec.
        batch_size: most rows per ``generate`` call; ``None`` (default) = the whole batch in one call.
        example: put the worked example in the system message (default True).
        name: the agent's name in logs and progress bars (default ``hf:<model folder name>``).

    Attributes:
        model, tokenizer: the loaded model and its tokenizer (a spec is loaded in eval mode; an in-memory
            model keeps its mode, and each ``generate`` runs in eval mode).
        generate_calls: ``model.generate`` calls made so far (one per :meth:`act_batch` unless
            ``batch_size`` splits it).
        batch_rows: rows of each ``generate`` call, in order (``sum(batch_rows) == stats["actions"]``).
        stats: ``{"actions", "format_valid", "prompt_tokens", "new_tokens"}`` counted over every action
            emitted; ``format_valid`` counts actions that the env's parser reads as one action
            (:func:`~textsql_clarify.baselines.llm_prompt.is_format_valid`).

    Raises:
        ValueError: a bad ``max_new_tokens``, ``temperature``, ``top_p`` or ``batch_size``; a model
            object without a tokenizer.
        textsql_clarify.simulators.hf_models.ModelLoadError: the spec cannot be loaded offline.
        ImportError: transformers / torch are not installed (the ``hf`` extra).

    Source: the action format and one-retry rule are TIDE App. D; generation with ``stop_strings`` and
    ``tokenizer=`` is transformers' ``GenerationMixin.generate`` (``StopStringCriteria``).
    """

    privileged = False

    def __init__(self, model: Any = "smollm2", *, tokenizer: Any = None, max_new_tokens: int = 128,
                 do_sample: bool = False, temperature: float = 1.0, top_p: float = 1.0, seed: int | None = None,
                 device: str | None = "auto", dtype: Any = None, batch_size: int | None = None,
                 example: bool = True, name: str | None = None) -> None:
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                                       or batch_size < 1):
            raise ValueError(f"batch_size must be None or an int >= 1, got {batch_size!r}")
        if do_sample and not (float(temperature) > 0):
            raise ValueError(f"temperature must be > 0 when sampling, got {temperature!r}")
        if not 0 < float(top_p) <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
        self.max_new_tokens = max_new_tokens
        self.do_sample = bool(do_sample)
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.seed = seed
        self.batch_size = batch_size
        self.example = bool(example)
        self.model, self.tokenizer, label = self._load(model, tokenizer, device, dtype)
        if self.tokenizer.pad_token_id is None:  # left padding needs a pad token; EOS is the usual one
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.name = name or f"hf:{label}"
        self.generate_calls = 0
        self.batch_rows: list[int] = []
        self.stats = {"actions": 0, "format_valid": 0, "prompt_tokens": 0, "new_tokens": 0}

    # ------------------------------------------------------------------ loading
    @staticmethod
    def _load(model: Any, tokenizer: Any, device: str | None, dtype: Any) -> tuple[Any, Any, str]:
        """``(model, tokenizer, label)`` from any accepted form of ``model`` (see the class doc)."""
        if isinstance(model, (str, os.PathLike)):
            from ..models import resolve_trainable
            from ..simulators.hf_models import load_causal_lm

            folder = resolve_trainable(model)
            lm = load_causal_lm(folder, device=device, dtype=dtype)
            return lm.model, lm.tokenizer, str(model)
        if isinstance(model, tuple):
            if len(model) != 2:
                raise ValueError(f"model as a tuple must be (model, tokenizer), got {len(model)} items")
            model, tokenizer = model
        elif hasattr(model, "model") and hasattr(model, "tokenizer") and tokenizer is None:  # LoadedModel
            model, tokenizer = model.model, model.tokenizer
        if tokenizer is None:
            raise ValueError("a loaded model needs its tokenizer: pass (model, tokenizer) or tokenizer=")
        if not callable(getattr(model, "generate", None)):
            raise ValueError(f"model {type(model).__name__} has no generate(); expected a transformers causal LM")
        label = getattr(getattr(model, "config", None), "_name_or_path", "") or type(model).__name__
        return model, tokenizer, os.path.basename(str(label).rstrip("/\\")) or type(model).__name__

    # ------------------------------------------------------------------ episode protocol
    def begin_episode(self, sample: Any) -> None:
        """Nothing to prepare: the agent keeps no episode state (its prompt is the env's messages)."""

    def fork(self, k: int) -> "TransformersAgent":
        """The agent for env ``k`` of a lockstep run: this same agent (one model, shared counters)."""
        return self

    def prompt(self, info: dict[str, Any]) -> str:
        """The rendered prompt for one turn: :func:`agent_messages` through the chat template with the
        generation prompt added (a plain ``role: content`` transcript when the tokenizer has no template).

        Raises:
            KeyError: ``info`` has no ``"messages"``.
        """
        msgs = agent_messages(info, example=self.example)
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        return "".join(f"{m['role']}: {m['content']}\n" for m in msgs) + "assistant: "

    def act(self, observation: dict[str, Any], info: dict[str, Any]) -> str:
        """One action: :meth:`act_batch` of one observation."""
        return self.act_batch([observation], [info])[0]

    def act_batch(self, observations: Sequence[dict[str, Any]], infos: Sequence[dict[str, Any]]) -> list[str]:
        """One action per live env, from one left-padded ``generate`` call (one per ``batch_size`` chunk).

        Args:
            observations: the envs' observations (unused beyond their count: the prompt is in ``info``).
            infos: the envs' ``info`` dicts, each with ``"messages"``; same length as ``observations``.
        Returns:
            The action strings, in order, each cut at its first closing tag.
        Raises:
            ValueError: the two lists differ in length.
            KeyError: an ``info`` has no ``"messages"``.
        """
        if len(observations) != len(infos):
            raise ValueError(f"act_batch got {len(observations)} observations but {len(infos)} infos")
        if not infos:
            return []
        prompts = [self.prompt(info) for info in infos]
        step = self.batch_size or len(prompts)
        out: list[str] = []
        for start in range(0, len(prompts), step):
            out.extend(self._generate(prompts[start:start + step]))
        actions = [extract_action(text) for text in out]
        self.stats["actions"] += len(actions)
        self.stats["format_valid"] += sum(is_format_valid(a) for a in actions)
        return actions

    def _generate(self, prompts: list[str]) -> list[str]:
        """Completions of ``prompts`` from one padded ``model.generate`` call (text after the prompt), in
        eval mode (no dropout) even when an in-memory model came in train mode, which it is left in."""
        import torch

        tok = self.tokenizer
        enc = tok(prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
        device = next(self.model.parameters()).device
        ids, mask = enc["input_ids"].to(device), enc["attention_mask"].to(device)
        kw: dict[str, Any] = {"max_new_tokens": self.max_new_tokens, "do_sample": self.do_sample,
                              "pad_token_id": tok.pad_token_id, "stop_strings": list(STOP_STRINGS),
                              "tokenizer": tok}
        if self.do_sample:
            kw.update(temperature=self.temperature, top_p=self.top_p)
        else:  # greedy: drop the checkpoint's sampling defaults so generate does not warn about them
            kw.update(temperature=None, top_p=None, top_k=None)
        cuda = [device.index or 0] if device.type == "cuda" else []
        # an in-memory policy may be in train mode (dropout on, e.g. LoRA's): generate in eval mode, then
        # give the model back in the mode it came in
        was_training = bool(getattr(self.model, "training", False))
        if was_training:
            self.model.eval()
        try:
            with torch.inference_mode(), torch.random.fork_rng(devices=cuda, enabled=self.do_sample):
                if self.do_sample and self.seed is not None:
                    torch.manual_seed(int(self.seed) + self.generate_calls)
                gen = self.model.generate(input_ids=ids, attention_mask=mask, **kw)
        finally:
            if was_training:
                self.model.train()
        self.generate_calls += 1
        self.batch_rows.append(len(prompts))
        new = gen[:, ids.shape[1]:]
        self.stats["prompt_tokens"] += int(mask.sum())
        self.stats["new_tokens"] += int((new != tok.pad_token_id).sum()) if tok.pad_token_id is not None else new.numel()
        return [tok.decode(row, skip_special_tokens=True) for row in new]

    def format_valid_rate(self) -> float | None:
        """Share of the actions emitted so far that parse as one action; ``None`` before any action."""
        n = self.stats["actions"]
        return self.stats["format_valid"] / n if n else None
