"""Multi-turn GRPO rollouts with the env's own tagged actions: ``GRPOTrainer(rollout_func=...)``.

API: :func:`make_rollout_func(samples, max_turns=..., env_kwargs=..., max_new_tokens=..., temperature=...)
<make_rollout_func>` returns ``rollout(prompts, trainer) -> dict`` for TRL's ``GRPOTrainer(rollout_func=...)``,
and :func:`rollout_reward` is the reward function that pays what the rollout measured. Each prompt row
plays one whole episode (up to ``max_turns`` actions) on its sample: the policy writes ``<sql>``,
``<clarify>``, ``<feedback>`` or ``<category>`` actions (:mod:`textsql_clarify.baselines.llm_prompt`),
the simulated user answers the clarifications of all episodes of the batch in one ``respond`` call, and
the dialogue goes on until the episode ends. Build the rows with
``trl_env.build_prompt_dataset(samples, ids, style="tags")``: every message carries the row's
``sample_id``, which is how the rollout knows the sample (TRL passes ``rollout_func`` the prompts only).

Token in, token out. The prompt is tokenised once with the chat template; after that the ids the
model sampled are kept as they are and never re-tokenised: each user reply (a clarification's answer,
the drift utterance, a format error) is rendered once as one chat turn and its ids are appended to the
running ids. ``completion_ids`` is the model's first action, then the reply, then the next action ...;
``env_mask`` is 1 on the model's sampled tokens and 0 on every token the rollout added (the chat
markers that close a turn the model stopped at a closing tag, and each reply's turn), so TRL's loss
counts only sampled tokens (TRL 1.16 ``GRPOTrainer._generate``: ``env_mask`` from ``rollout_func``
becomes its ``tool_mask``). ``logprobs`` are the sampled tokens' log-probabilities under the
temperature-scaled model, as TRL computes them (0.0 on the added tokens).

Generation runs in-process with ``trainer.model`` through TRL's ``unwrap_model_for_generation`` and
``transformers``' ``generate`` (CPU or GPU): in TRL 1.16 ``rollout_func`` does not need vLLM (the trainer
only syncs vLLM weights when ``use_vllm`` is set), but it gives the function no generation backend
either, so this module generates itself. A completion is never longer than the trainer's
``max_completion_length``: generation is capped at what is left, and an episode whose next reply does
not fit stops there (``finished`` False).

Episode reward: the sum of the env's step rewards under the chosen preset (``reward_preset`` in
``env_kwargs``; ``docs/rewards.md``). For a finished episode this is the env's own episode return; an
episode stopped by ``max_turns`` or the token budget keeps the rewards of the steps it took (no answer:
0 under ``binary``). The rollout returns, per completion, besides the three keys TRL needs:
``env_mask``, ``episode_reward`` (float), ``reward_components`` (each component summed over the
episode's turns, ``None`` where it was never defined), ``episode_scores`` (the env's ``info["scores"]``
at the end, ``None`` when unfinished), ``finished``, ``num_turns``, ``outcome``, ``decision`` (the env's
``info["decision"]``, ``{"kind", "expected"}``, of the episode's decision turn; ``None`` before one) and
``rollout_sample_id``; TRL forwards them to the reward functions, and :func:`rollout_reward` returns
``episode_reward`` and logs the mean of each component with its n.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from .common import add_components
from ..samples import Sample

__all__ = ["make_rollout_func", "rollout_reward", "RolloutEpisode", "turn_suffix_ids", "prompt_sample_id"]

#: ``generate_fn(histories, max_new_tokens) -> [(sampled ids, logprobs), ...]``: one policy step for a batch.
GenerateFn = Callable[[list[list[int]], list[int]], list[tuple[list[int], list[float]]]]


def _tokenizer_of(processing_class: Any) -> Any:
    """The text tokenizer of a tokenizer or a processor."""
    return getattr(processing_class, "tokenizer", processing_class)


def _as_ids(out: Any) -> list[int]:
    """``apply_chat_template(tokenize=True)`` output (a list, or a dict / BatchEncoding) as a flat id list."""
    if hasattr(out, "keys") and "input_ids" in out:
        out = out["input_ids"]
    if hasattr(out, "tolist"):
        out = out.tolist()
    if out and isinstance(out[0], list):
        out = out[0]
    return [int(x) for x in out]


def clean_messages(prompt: Sequence[dict]) -> list[dict[str, Any]]:
    """Chat messages with only the keys a chat template reads (``role``, ``content`` and, where set,
    ``tool_calls`` / ``name``); the dataset's ``sample_id`` key (and ``None`` fields that
    ``datasets`` adds to make the messages one struct type) are dropped.

    Args:
        prompt: chat messages (dicts with ``role`` and ``content``).
    Returns:
        New message dicts (the input is not changed).
    Raises:
        KeyError: a message has no ``role``.
    """
    out = []
    for m in prompt:
        d = {"role": m["role"], "content": m.get("content") or ""}
        for k in ("tool_calls", "name"):
            if m.get(k) is not None:
                d[k] = m[k]
        out.append(d)
    return out


def prompt_sample_id(prompt: Any, by_question: dict[str, list[str]] | None = None) -> str:
    """The sample id of a prompt row: the ``sample_id`` key of its messages (``build_prompt_dataset``),
    else the one sample whose question message (the last user message of its start, after any earlier
    dialogue turns: :func:`textsql_clarify.envs.render.initial_history`) is the prompt's last user message.

    Args:
        prompt: a conversational prompt (list of ``{"role", "content", ...}`` dicts).
        by_question: question message -> sample ids (for prompts without the key).
    Returns:
        The sample id.
    Raises:
        TypeError: the prompt is not a list of messages.
        KeyError: no id, or a question that several samples share (add the ``sample_id`` key).
    """
    if not isinstance(prompt, (list, tuple)) or not all(isinstance(m, dict) for m in prompt):
        raise TypeError("rollout prompts must be chat messages (a list of dicts); build them with "
                        "textsql_clarify.integrations.trl_env.build_prompt_dataset(style='tags')")
    for m in prompt:
        sid = m.get("sample_id")
        if isinstance(sid, str) and sid:
            return sid
    if by_question is not None:
        last = next((m.get("content") for m in reversed(prompt) if m.get("role") == "user"), None)
        ids = by_question.get(last, [])
        if len(ids) == 1:
            return ids[0]
        if len(ids) > 1:
            raise KeyError(f"the prompt's question is shared by samples {ids[:5]}: give its messages a "
                           "'sample_id' key (build_prompt_dataset does)")
    raise KeyError("a rollout prompt names no sample: its messages have no 'sample_id' key and its question "
                   "matches no sample (build the dataset with build_prompt_dataset)")


def turn_suffix_ids(tokenizer: Any, content: str, *, chat_template_kwargs: dict | None = None) -> list[int]:
    """The ids the chat template puts after an assistant turn's end-of-turn token for one user turn
    ``content`` and the next assistant header, e.g. ``"\\n<|im_start|>user\\n{content}<|im_end|>\\n"
    "<|im_start|>assistant\\n"`` for ChatML.

    Found as TRL's ``GRPOTrainer._get_tool_suffix_ids`` finds a tool turn's ids: render a short dummy
    conversation with and without the user turn, trim the first at its last EOS, and take the rest of
    the second.

    Args:
        tokenizer: a tokenizer with a chat template and ``eos_token_id`` (the end-of-turn token).
        content: the user turn's text.
        chat_template_kwargs: passed to ``apply_chat_template``.
    Returns:
        The ids to append after the assistant's end-of-turn token (the user turn and the next
        assistant header).
    Raises:
        ValueError: the template is not prefix-preserving (the shorter rendering is not a prefix).

    Source: TRL 1.16 ``GRPOTrainer._get_tool_suffix_ids`` (``trl/trainer/grpo_trainer.py``).
    """
    kw = dict(chat_template_kwargs or {})
    dummy = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
             {"role": "assistant", "content": "a"}]
    prefix = _as_ids(tokenizer.apply_chat_template(dummy, tokenize=True, return_dict=False, **kw))
    full = _as_ids(tokenizer.apply_chat_template(dummy + [{"role": "user", "content": content}], tokenize=True,
                                                 return_dict=False, add_generation_prompt=True, **kw))
    eos = tokenizer.eos_token_id
    ends = [i for i, t in enumerate(prefix) if t == eos]
    if ends:
        prefix = prefix[: ends[-1] + 1]
    if full[: len(prefix)] != prefix:
        raise ValueError("the chat template is not prefix-preserving: a user turn cannot be appended as ids")
    return full[len(prefix):]


class RolloutEpisode:
    """The running ids and masks of one rollout episode (one prompt row).

    Attributes:
        sample_id: the episode's sample.
        prompt_ids: the tokenised prompt (chat template, generation prompt included).
        completion_ids: everything after the prompt: sampled actions and appended replies.
        env_mask: 1 per sampled token, 0 per appended token (same length as ``completion_ids``).
        logprobs: the sampled tokens' log-probabilities, 0.0 on appended tokens.
        actions: the action strings sent to the env, one per turn.
        step_rewards: the env's reward of each step.
        components: per component, the sum over turns (``None`` until a turn defines it).
        scores: the env's ``info["scores"]`` at episode end (``None`` while running).
        decision: the env's ``info["decision"]`` of the decision turn (``None`` before one).
        done, finished: the episode stopped / ended in the env (``finished`` False when ``max_turns`` or
            the token budget stopped it first).
        outcome: the trajectory's outcome (``sql``, ``feedback``, ``abstain``, ``truncated``) or
            ``"unfinished"``.
    """

    def __init__(self, sample_id: str, prompt_ids: list[int]):
        self.sample_id = sample_id
        self.prompt_ids = list(prompt_ids)
        self.completion_ids: list[int] = []
        self.env_mask: list[int] = []
        self.logprobs: list[float] = []
        self.actions: list[str] = []
        self.replies: list[str] = []
        self.step_rewards: list[float] = []
        self.components: dict[str, float | None] = {}
        self.scores: dict | None = None
        self.decision: dict | None = None
        self.done = False
        self.finished = False
        self.outcome = "unfinished"

    @property
    def history_ids(self) -> list[int]:
        """Prompt plus completion so far: what the policy conditions on next."""
        return self.prompt_ids + self.completion_ids

    def add_model(self, ids: Sequence[int], logprobs: Sequence[float]) -> None:
        """Append sampled ids (mask 1) with their log-probabilities."""
        self.completion_ids += list(ids)
        self.env_mask += [1] * len(ids)
        lp = list(logprobs) if logprobs is not None else [0.0] * len(ids)
        if len(lp) != len(ids):
            raise ValueError(f"{len(ids)} sampled ids but {len(lp)} logprobs")
        self.logprobs += [float(x) for x in lp]

    def add_env(self, ids: Sequence[int]) -> None:
        """Append ids the rollout added (chat markers, a user reply): mask 0, logprob 0.0."""
        self.completion_ids += list(ids)
        self.env_mask += [0] * len(ids)
        self.logprobs += [0.0] * len(ids)

    def record(self, reward: float, comps: dict) -> None:
        """Add one step's reward and reward components (numeric ones summed, ``None`` skipped)."""
        self.step_rewards.append(float(reward))
        add_components(self.components, comps)

    @property
    def reward(self) -> float:
        """The episode reward: the sum of the env's step rewards."""
        return float(sum(self.step_rewards))


def _default_generate(trainer: Any, tokenizer: Any, *, temperature: float, top_p: float, top_k: int,
                      stop_strings: Sequence[str]) -> GenerateFn:
    """A :data:`GenerateFn` sampling from ``trainer.model`` with ``transformers``' ``generate``.

    Each row is left-padded, sampled (greedy at temperature 0), and cut right after the first EOS or
    the first token that completes a stop string (``stop_strings``, the closing action tags); the
    log-probabilities are ``log_softmax(logits / temperature)`` at the sampled tokens (TRL's
    ``_get_per_token_logps_and_entropies`` convention). The trainer's other sampling settings apply as in
    TRL's own transformers path (``GRPOTrainer.__init__``'s ``generation_kwargs``): ``min_p`` (when set),
    ``repetition_penalty`` and ``generation_kwargs`` of its ``GRPOConfig``; TRL's log-probabilities ignore
    them too (a ``generation_kwargs`` key never replaces a setting named above). Generation goes through
    ``unwrap_model_for_generation`` with the config's
    ``gradient_checkpointing_kwargs``, so the checkpointing that it turns off for generation comes back
    as the trainer set it (TRL forces ``use_reentrant=True`` for PEFT with ZeRO-3).
    """
    import torch
    from trl.models.utils import unwrap_model_for_generation

    eos_ids = {int(tokenizer.eos_token_id)}
    gen_eos = getattr(getattr(trainer.model, "generation_config", None), "eos_token_id", None)
    if isinstance(gen_eos, int):
        eos_ids.add(gen_eos)
    elif isinstance(gen_eos, (list, tuple)):
        eos_ids.update(int(x) for x in gen_eos)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    def cut(ids: list[int]) -> int:
        for i, t in enumerate(ids):
            if t in eos_ids:
                return i + 1
            if stop_strings and ">" in tokenizer.decode([t]):
                text = tokenizer.decode(ids[: i + 1], skip_special_tokens=False)
                if any(s in text for s in stop_strings):
                    return i + 1
        return len(ids)

    def generate(histories: list[list[int]], max_new: list[int]) -> list[tuple[list[int], list[float]]]:
        device = trainer.accelerator.device
        width = max(len(h) for h in histories)
        ids = torch.full((len(histories), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(histories), width), dtype=torch.long)
        for r, h in enumerate(histories):
            ids[r, width - len(h):] = torch.tensor(h, dtype=torch.long)
            mask[r, width - len(h):] = 1
        kwargs: dict[str, Any] = {"max_new_tokens": max(max_new), "pad_token_id": pad_id,
                                  "eos_token_id": sorted(eos_ids), "return_dict_in_generate": True,
                                  "output_logits": True}
        if temperature and temperature > 0:
            kwargs.update(do_sample=True, temperature=float(temperature), top_p=float(top_p), top_k=int(top_k))
            if getattr(trainer.args, "min_p", None) is not None:
                kwargs["min_p"] = float(trainer.args.min_p)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        penalty = getattr(trainer.args, "repetition_penalty", None)
        if penalty is not None and float(penalty) != 1.0:
            kwargs["repetition_penalty"] = float(penalty)
        extra = getattr(trainer.args, "generation_kwargs", None)
        for k, v in (extra.items() if isinstance(extra, dict) else ()):
            kwargs.setdefault(k, v)  # never over the settings above (the log-probabilities assume them)
        if stop_strings:
            kwargs.update(stop_strings=list(stop_strings), tokenizer=tokenizer)
        with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator,
                                         gather_deepspeed3_params=getattr(trainer.args, "ds3_gather_for_generation",
                                                                          True),
                                         gradient_checkpointing_kwargs=getattr(
                                             trainer.args, "gradient_checkpointing_kwargs", None)) as model, \
                torch.no_grad():
            out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), **kwargs)
        new = out.sequences[:, width:].cpu()
        logits = torch.stack(out.logits, dim=1).float().cpu() if out.logits else None
        scale = float(temperature) if temperature and temperature > 0 else 1.0
        results = []
        for r in range(len(histories)):
            row = new[r].tolist()
            n = min(cut(row), max_new[r])
            row = row[:n]
            if logits is not None and n:
                lp = torch.log_softmax(logits[r, :n] / scale, dim=-1)
                lps = lp.gather(1, torch.tensor(row).unsqueeze(1)).squeeze(1).tolist()
            else:
                lps = [0.0] * n
            results.append((row, lps))
        return results

    return generate


def make_rollout_func(samples: Sequence[Sample], *, max_turns: int | None = None, env_kwargs: dict | None = None,
                      max_new_tokens: int = 64, temperature: float | None = None, top_p: float | None = None,
                      top_k: int | None = None, max_completion_length: int | None = None,
                      stop_strings: Sequence[str] | None = None, example: bool = True,
                      tokenizer: Any = None, generate_fn: GenerateFn | None = None,
                      chat_template_kwargs: dict | None = None, sample_ids: Sequence[str] | None = None,
                      split: str | None = None, split_by: str = "db", heldout_fraction: float = 0.25,
                      split_seed: int = 0) -> Callable[[list, Any], dict[str, list]]:
    """A ``rollout_func`` for TRL's ``GRPOTrainer``: one multi-turn episode per prompt row (module doc).

    Args:
        samples: the samples the rows name (every ``sample_id`` of the dataset must be among them).
        max_turns: most actions per episode; ``None``: the env's own bound (``env.max_turns``), so every
            episode ends in the env unless the token budget stops it.
        env_kwargs: :class:`~textsql_clarify.envs.env.TextSQLClarifyEnv` options (``reward_preset``,
            ``max_clarifications``, ``category_mode``, ``simulator`` ...). One simulator and one FB judge are
            built on the first call and shared by all episodes; their clarifications go to the simulator in one
            ``respond(batch)`` per turn.
        max_new_tokens: most tokens sampled per action.
        temperature, top_p, top_k: sampling settings; ``None`` takes the trainer's (``GRPOConfig``).
            Temperature 0 decodes greedily.
        max_completion_length: token budget of a whole completion (actions and replies); ``None`` takes
            ``trainer.max_completion_length``.
        stop_strings: generation stops after the first of these (default: the closing action tags,
            :data:`~textsql_clarify.baselines.llm_prompt.STOP_STRINGS`); ``()`` stops only at EOS.
        example: tokenise the env's prompt with the worked example (``agent_messages``).
        tokenizer: the tokenizer; ``None`` takes ``trainer.processing_class``.
        generate_fn: a policy step ``(histories, max_new_tokens) -> [(ids, logprobs)]`` replacing the model
            (scripted policies in tests, an external server); ``None`` samples from ``trainer.model``.
        chat_template_kwargs: passed to ``apply_chat_template``; ``None`` takes the trainer's.
        sample_ids, split, split_by, heldout_fraction, split_seed: which samples the rollout plays
            (:func:`~textsql_clarify.integrations.splits.select_samples`, e.g. ``split="train"`` of a split by
            database); ``env_kwargs["exclude_flags"]`` is applied the same way. A prompt naming a sample left out
            raises ``KeyError``.

    Returns:
        ``rollout(prompts, trainer) -> dict``: ``prompt_ids``, ``completion_ids``, ``logprobs`` (lists of
        per-row lists), ``env_mask`` and the per-row extra fields of the module doc.

    Raises:
        ValueError: bad option values (at build time); at call time a prompt naming no known sample
            (``KeyError``), or a chat template that is not prefix-preserving.

    The prompt tokenised for each row is the env's own first chat (``agent_messages(info)``: the
    instructions of the env's options, its schema, the question), so the policy reads exactly what the
    env would show; the row's prompt only names the sample. Source: TRL 1.16 ``GRPOTrainer``
    ``rollout_func`` and ``env_mask`` (``trl/trainer/grpo_trainer.py``), TIDE App. D (one action per turn).
    """
    if max_turns is not None and (isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1):
        raise ValueError(f"max_turns must be an int >= 1 or None, got {max_turns!r}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
    if max_completion_length is not None and (not isinstance(max_completion_length, int) or max_completion_length < 1):
        raise ValueError(f"max_completion_length must be an int >= 1 or None, got {max_completion_length!r}")
    if temperature is not None and (not isinstance(temperature, (int, float)) or temperature < 0):
        raise ValueError(f"temperature must be a number >= 0 or None, got {temperature!r}")
    samples = list(samples)
    if not samples:
        raise ValueError("make_rollout_func needs at least one sample")
    env_kwargs = dict(env_kwargs or {})
    for k in ("samples", "dataset", "limit"):
        if k in env_kwargs:
            raise ValueError(f"env_kwargs must not set {k!r}: the rollout's samples are given as an argument")
    from .splits import select_samples

    samples = select_samples(samples, sample_ids=sample_ids, split=split, split_by=split_by,
                             heldout_fraction=heldout_fraction, split_seed=split_seed,
                             exclude_flags=env_kwargs.pop("exclude_flags", ()))
    samples = list({s.id: s for s in samples}.values())
    from ..baselines.llm_prompt import STOP_STRINGS, agent_messages, extract_action
    from ..envs import render

    stops = tuple(STOP_STRINGS if stop_strings is None else stop_strings)
    by_question: dict[str, list[str]] = {}
    for s in samples:
        # the question's message is the last user message of the episode's start (after any earlier dialogue)
        by_question.setdefault(render.initial_history(s)[-1][1], []).append(s.id)
    state: dict[str, Any] = {"envs": [], "sim": None, "judge": None, "suffix": {}, "gen": None}

    def _envs(n: int) -> list:
        from ..envs.env import TextSQLClarifyEnv
        from ..rewards.feedback import default_judge
        from ..simulators import make_simulator

        if state["sim"] is None:
            state["sim"] = make_simulator(env_kwargs.get("simulator", "rule"))
            state["judge"] = env_kwargs.get("feedback_judge") or default_judge()
        kw = {k: v for k, v in env_kwargs.items() if k not in ("simulator", "feedback_judge")}
        while len(state["envs"]) < n:
            state["envs"].append(TextSQLClarifyEnv(samples=samples, simulator=state["sim"],
                                                   feedback_judge=state["judge"], **kw))
        return state["envs"][:n]

    def rollout(prompts: list, trainer: Any) -> dict[str, list]:
        from ..envs.env import answer_clarifications
        from ..simulators.base import UserRequest

        tok = _tokenizer_of(tokenizer if tokenizer is not None else trainer.processing_class)
        ct_kwargs = chat_template_kwargs if chat_template_kwargs is not None else \
            dict(getattr(trainer, "chat_template_kwargs", None) or {})
        budget = max_completion_length or getattr(trainer, "max_completion_length", None) or \
            getattr(getattr(trainer, "args", None), "max_completion_length", None) or 256
        gen = generate_fn
        if gen is None:
            if state["gen"] is None or state["gen"][0] is not trainer:  # one sampler per trainer
                args = trainer.args
                state["gen"] = (trainer, _default_generate(
                    trainer, tok,
                    temperature=args.temperature if temperature is None else temperature,
                    top_p=(args.top_p if args.top_p is not None else 1.0) if top_p is None else top_p,
                    top_k=(args.top_k or 0) if top_k is None else top_k, stop_strings=stops))
            gen = state["gen"][1]

        def suffix(text: str) -> list[int]:
            ids = state["suffix"].get(text)
            if ids is None:
                ids = turn_suffix_ids(tok, text, chat_template_kwargs=ct_kwargs)
                if len(state["suffix"]) > 4096:
                    state["suffix"].clear()
                state["suffix"][text] = ids
            return ids

        eos = int(tok.eos_token_id)
        ids = [prompt_sample_id(p, by_question) for p in prompts]
        envs = _envs(len(prompts))
        eps: list[RolloutEpisode] = []
        for env, sid in zip(envs, ids):
            _obs, info = env.reset(options={"sample_id": sid})
            msgs = agent_messages(info, example=example)
            p_ids = _as_ids(tok.apply_chat_template(msgs, tokenize=True, return_dict=False,
                                                    add_generation_prompt=True, **ct_kwargs))
            eps.append(RolloutEpisode(sid, p_ids))
        limit = max_turns if max_turns is not None else max(e.max_turns for e in envs)
        for _turn in range(limit):
            live = [k for k, e in enumerate(eps) if not e.done]
            if not live:
                break
            room = {k: budget - len(eps[k].completion_ids) for k in live}
            for k in [k for k in live if room[k] <= 0]:
                eps[k].done = True
            live = [k for k in live if room[k] > 0]
            if not live:
                break
            outs = gen([eps[k].history_ids for k in live], [min(max_new_tokens, room[k]) for k in live])
            if len(outs) != len(live):
                raise RuntimeError(f"generate_fn returned {len(outs)} completions for {len(live)} histories")
            results: dict[int, tuple] = {}
            pending = []
            for k, (s_ids, s_lps) in zip(live, outs):
                s_ids = list(s_ids)[: room[k]]
                s_lps = list(s_lps)[: len(s_ids)] if s_lps is not None else None
                eps[k].add_model(s_ids, s_lps)
                # generate keeps the matched stop string: the decoded text is the whole completion, read as
                # env.step reads it (one parser: a malformed completion keeps its format penalty)
                action = extract_action(tok.decode(s_ids, skip_special_tokens=True),
                                        max_chars=envs[k].max_action_chars)
                eps[k].actions.append(action)
                out = envs[k].begin_step(action)
                if isinstance(out, UserRequest):
                    pending.append((k, out))
                else:
                    results[k] = out
            if pending:
                for (k, _), out in zip(pending, answer_clarifications(state["sim"],
                                                                      [(envs[k], r) for k, r in pending])):
                    results[k] = out
            for k in live:
                _obs, reward, terminated, truncated, info = results[k]
                e = eps[k]
                e.record(reward, info.get("reward_components") or {})
                if info.get("decision") is not None:  # the decision turn (rewards/decision.py)
                    e.decision = dict(info["decision"])
                if terminated or truncated:
                    e.done = e.finished = True
                    e.scores = dict(info.get("scores") or {})
                    e.outcome = info["trajectory"].outcome if info.get("trajectory") is not None else "ended"
                    if (not e.completion_ids or e.completion_ids[-1] != eos) and len(e.completion_ids) < budget:
                        e.add_env([eos])
                    continue
                last = info["messages"][-1]
                if last.get("role") != "user":
                    raise RuntimeError(f"the env's next message is from {last.get('role')!r}, not the user")
                add = ([] if e.completion_ids and e.completion_ids[-1] == eos else [eos]) + suffix(last["content"])
                if len(e.completion_ids) + len(add) > budget:
                    e.done = True  # the reply does not fit: stopped unfinished
                    continue
                e.replies.append(last["content"])
                e.add_env(add)
        for e in eps:
            e.done = True
        return {
            "prompt_ids": [e.prompt_ids for e in eps],
            "completion_ids": [e.completion_ids for e in eps],
            "logprobs": [e.logprobs for e in eps],
            "env_mask": [e.env_mask for e in eps],
            "episode_reward": [e.reward for e in eps],
            "reward_components": [dict(e.components) for e in eps],
            "episode_scores": [e.scores for e in eps],
            "finished": [e.finished for e in eps],
            "num_turns": [len(e.actions) for e in eps],
            "outcome": [e.outcome for e in eps],
            "decision": [e.decision for e in eps],
            "rollout_sample_id": [e.sample_id for e in eps],
        }

    return rollout


def rollout_reward(prompts: Any = None, completions: Any = None, *, episode_reward: Sequence[float] | None = None,
                   reward_components: Sequence[dict] | None = None, sample_id: Sequence[str] | None = None,
                   rollout_sample_id: Sequence[str] | None = None, log_metric: Callable | None = None,
                   **kwargs: Any) -> list[float]:
    """The reward function for a ``rollout_func`` made by :func:`make_rollout_func`: the episode rewards.

    TRL calls it with the rollout's extra fields as keyword lists (one entry per completion). It returns
    ``episode_reward`` and, through TRL's ``log_metric``, logs ``env/<component>`` (the mean over the
    completions where the component was defined) and ``env/<component>_n`` (that n).

    Args:
        episode_reward: one float per completion (from the rollout).
        reward_components: one ``{component: summed value or None}`` per completion.
        sample_id: the dataset column, when present; checked against ``rollout_sample_id``.
        log_metric: TRL's metric logger (``GRPOTrainer._log_metric``).
    Returns:
        The episode rewards, one float per completion, in order.
    Raises:
        ValueError: no ``episode_reward`` (the trainer was not given this module's rollout), a field whose
            length differs from ``episode_reward``'s (``completions``, ``reward_components``, ``sample_id``,
            ``rollout_sample_id``), or a row whose rollout played another sample than its ``sample_id``
            column says.

    Source: TRL 1.16 ``GRPOTrainer._calculate_rewards`` (rollout fields as reward keywords, ``log_metric``).
    """
    if episode_reward is None:
        raise ValueError("rollout_reward needs the 'episode_reward' field of make_rollout_func's rollout: "
                         "pass rollout_func=make_rollout_func(...) to GRPOTrainer")
    n = len(episode_reward)
    for name, column in (("completions", completions), ("reward_components", reward_components),
                         ("sample_id", sample_id), ("rollout_sample_id", rollout_sample_id)):
        if column is not None and len(column) != n:
            raise ValueError(f"rollout_reward: {name} has {len(column)} entries but episode_reward has {n} "
                             f"(one per completion expected)")
    if sample_id is not None and rollout_sample_id is not None:
        for k, (a, b) in enumerate(zip(sample_id, rollout_sample_id)):
            if a != b:
                raise ValueError(f"row {k}: the dataset says sample {a!r} but the rollout played {b!r}")
    if log_metric is not None and reward_components:
        names = sorted({k for c in reward_components if c for k in c})
        for name in names:
            vals = [c[name] for c in reward_components if c and c.get(name) is not None]
            if vals:
                log_metric(f"env/{name}", float(sum(vals) / len(vals)))
            log_metric(f"env/{name}_n", float(len(vals)))
    return [float(r) for r in episode_reward]
