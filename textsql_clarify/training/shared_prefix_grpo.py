"""GRPO with one prompt pass per group: the prompt is run once and its KV cache shared by the group's completions.

A GRPO group is ``G`` completions of one prompt (DeepSeekMath §4.1). A trainer that pads ``G`` copies of the
prompt into one batch (TRL's ``GRPOTrainer``) runs the prompt ``G`` times forward and backward. When the prompt
is long and the completion short (a first action of ~10 tokens after a 200-800-token prompt), that is almost the
whole cost. Here the prompt runs once with batch 1, its KV cache is repeated ``G`` times
(``DynamicCache.batch_repeat_interleave``, differentiable), and only the completions run at batch ``G``. Autograd
sums the ``G`` completions' gradients into the one prompt pass, so the gradient is the one of the padded batch.

The objective is the one TRL 1.16's ``GRPOTrainer`` optimises with ``num_iterations=1`` and
``loss_type="dapo"``: on-policy, so the importance ratio is 1 and the clipped surrogate's gradient is
``A_i * grad log pi(o_i,t | q, o_i,<t)``, summed over every completion token of the step and divided by the
step's number of completion tokens (DAPO's token-level normalisation, arXiv 2503.14476 §3.3). With ``beta > 0``
each token also pays ``beta`` times the KL estimator of DeepSeekMath eq. 4 (Schulman's k3),
``exp(ref - logp) - (ref - logp) - 1`` with ``ref`` the log-probability under a frozen reference model (TRL's
``per_token_kl``); its expected gradient pulls the policy towards the reference on every group, so no group is
skipped then. Advantages are
``r_i - mean(group)``, divided by the standard deviation of the whole step's rewards (``scale="batch"``, PPO
Lite arXiv 2508.08221), of the group's (``"group"``, the original GRPO) or by nothing (``"none"``, Dr. GRPO
arXiv 2503.20783). A group whose rewards are all equal has advantage 0 and contributes no gradient, so its
backward pass is skipped (its tokens still count in the normaliser, as in TRL).

Sampling is ancestral at ``temperature`` with the prompt prefilled once and the cache repeated; a completion
ends at EOS, at a stop string (the env's closing action tags) or at ``max_new_tokens``. Log-probabilities are
taken from logits divided by the same temperature, as TRL does.

Needs ``torch`` and a ``transformers`` causal LM whose forward accepts ``past_key_values`` and
``logits_to_keep`` (Llama, SmolLM2, Qwen2; transformers >= 4.45).

Source: DeepSeekMath (Shao et al., 2024) §4.1 GRPO; DAPO §3.3 token-level loss; TRL 1.16 ``GRPOTrainer`` /
``GRPOConfig`` docs (``loss_type``, ``scale_rewards``, ``max_grad_norm``); transformers ``DynamicCache``.
"""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

__all__ = ["GroupSample", "sample_group", "completion_logprobs", "group_advantages", "frozen_reference",
           "SharedPrefixGRPO"]


@dataclass
class GroupSample:
    """The ``G`` sampled completions of one prompt.

    Attributes:
        prompt_ids: the prompt's token ids (length ``L_p``).
        completions: per completion its token ids, EOS and padding excluded, the stop string's tokens kept.
        texts: the decoded completions (special tokens skipped).
        hit_budget: per completion, True when ``max_new_tokens`` and not EOS or a stop string ended it.
        rewards: per completion the reward, filled by the caller.
    """

    prompt_ids: list[int]
    completions: list[list[int]]
    texts: list[str]
    hit_budget: list[bool]
    rewards: list[float] = field(default_factory=list)


def _cache_of(pairs: Sequence[tuple[Any, Any]]) -> Any:
    from transformers import DynamicCache

    return DynamicCache(ddp_cache_data=list(pairs))


def _layer_pairs(cache: Any) -> list[tuple[Any, Any]]:
    return [(layer.keys, layer.values) for layer in cache.layers]


@functools.lru_cache(maxsize=None)
def _cache_kwarg(model_type: type) -> str:
    """The forward argument that takes a KV cache for this model class, looked up once per class."""
    import inspect

    return "cache" if "cache" in inspect.signature(model_type.forward).parameters else "past_key_values"


def _forward(model: Any, input_ids: Any, cache: Any = None, **kw: Any) -> tuple[Any, Any]:
    """``(logits, cache)`` of a forward pass; the cache argument is ``cache`` from transformers 5.2x on and
    ``past_key_values`` before (the older name is deprecated there)."""
    key = _cache_kwarg(type(model))
    if cache is not None:
        kw[key] = cache
    out = model(input_ids=input_ids, **kw)
    new = getattr(out, "cache", None)
    if new is None:
        new = getattr(out, "past_key_values", None)
    return out.logits, new


def sample_group(model: Any, tokenizer: Any, prompt_ids: Sequence[int], *, n: int, max_new_tokens: int,
                 temperature: float = 1.0, stop_strings: Sequence[str] = (), eos_ids: Sequence[int] = (),
                 generator: Any = None) -> GroupSample:
    """Sample ``n`` completions of one prompt, prefilling the prompt once (no gradient).

    Args:
        model: a causal LM (``transformers``), any mode; it is run under ``torch.no_grad``.
        tokenizer: decodes completions to test the stop strings.
        prompt_ids: the prompt's token ids, chat template applied.
        n: completions (the group size ``G``), >= 1.
        max_new_tokens: the token budget per completion, >= 1.
        temperature: softmax temperature, > 0.
        stop_strings: a completion ends once its decoded text contains one (matched case-insensitively).
        eos_ids: token ids that end a completion (not kept).
        generator: a ``torch.Generator`` for reproducible sampling (optional).
    Returns:
        A :class:`GroupSample` with empty ``rewards``.
    Raises:
        ValueError: ``n`` or ``max_new_tokens`` below 1, ``temperature`` not positive, or an empty prompt.
    """
    import torch

    if n < 1 or max_new_tokens < 1:
        raise ValueError(f"sample_group needs n >= 1 and max_new_tokens >= 1, got n={n}, "
                         f"max_new_tokens={max_new_tokens}")
    if not temperature > 0:
        raise ValueError(f"sample_group needs temperature > 0, got {temperature}")
    if not prompt_ids:
        raise ValueError("sample_group got an empty prompt")
    device = next(model.parameters()).device
    stops = [s.lower() for s in stop_strings]
    eos = {int(e) for e in eos_ids}
    ids = torch.tensor([list(prompt_ids)], dtype=torch.long, device=device)
    out_ids: list[list[int]] = [[] for _ in range(n)]
    done = [False] * n
    hit = [False] * n
    with torch.no_grad():
        logits, cache = _forward(model, ids, use_cache=True, logits_to_keep=1)
        cache.batch_repeat_interleave(n)
        logits = logits[:, -1, :].float().expand(n, -1)
        for step in range(max_new_tokens):
            probs = torch.softmax(logits / temperature, dim=-1)
            nxt = torch.multinomial(probs, 1, generator=generator)  # (n, 1)
            for k in range(n):
                if done[k]:
                    continue
                t = int(nxt[k, 0])
                if t in eos:
                    done[k] = True
                    continue
                out_ids[k].append(t)
                if stops and any(s in tokenizer.decode(out_ids[k][-12:], skip_special_tokens=True).lower()
                                 for s in stops):
                    done[k] = True
                elif step == max_new_tokens - 1:
                    hit[k] = True
            if all(done) or step == max_new_tokens - 1:
                break
            logits, cache = _forward(model, nxt, cache, use_cache=True)
            logits = logits[:, -1, :].float()
    texts = [tokenizer.decode(c, skip_special_tokens=True) for c in out_ids]
    return GroupSample(prompt_ids=list(prompt_ids), completions=out_ids, texts=texts, hit_budget=hit)


def completion_logprobs(model: Any, prompt_ids: Sequence[int], completions: Sequence[Sequence[int]], *,
                        temperature: float = 1.0) -> tuple[Any, Any]:
    """Per-token log-probabilities of ``completions`` after one shared prompt pass, with gradient.

    The prompt runs once at batch 1 (``logits_to_keep=1``: only its last position's logits, which give each
    completion's first token); its cache is repeated to the ``G`` completions, which run right-padded at batch
    ``G``. A causal model never lets a real token attend to the padding after it, so no attention mask is needed.

    Args:
        model: a causal LM in the mode to train in.
        prompt_ids: the prompt's token ids (length ``L_p`` >= 1).
        completions: ``G`` token-id lists (each of length >= 1).
        temperature: logits are divided by it before the log-softmax (TRL's convention).
    Returns:
        ``(logp, mask)``: float tensors of shape ``(G, L_c)`` with ``L_c`` the longest completion; ``mask`` is
        1.0 on real tokens, 0.0 on padding (where ``logp`` is 0).
    Raises:
        ValueError: no completion, or an empty one.
    """
    import torch

    if not completions or any(len(c) == 0 for c in completions):
        raise ValueError("completion_logprobs needs at least one completion and no empty completion")
    device = next(model.parameters()).device
    g = len(completions)
    width = max(len(c) for c in completions)
    pad = int(completions[0][0])
    comp = torch.tensor([list(c) + [pad] * (width - len(c)) for c in completions], dtype=torch.long, device=device)
    mask = torch.tensor([[1.0] * len(c) + [0.0] * (width - len(c)) for c in completions], device=device)
    last, prompt_cache = _forward(model, torch.tensor([list(prompt_ids)], dtype=torch.long, device=device),
                                  use_cache=True, logits_to_keep=1)
    first = last[:, -1:, :].float().expand(g, 1, -1)  # (G, 1, V)
    if width > 1:
        cache = _cache_of([(k.repeat_interleave(g, dim=0), v.repeat_interleave(g, dim=0))
                           for k, v in _layer_pairs(prompt_cache)])
        rest = _forward(model, comp[:, :-1], cache, use_cache=False)[0].float()  # (G, L_c-1, V)
        logits = torch.cat([first, rest], dim=1)
    else:
        logits = first
    logp = torch.log_softmax(logits / temperature, dim=-1).gather(-1, comp.unsqueeze(-1)).squeeze(-1)
    return logp * mask, mask


def group_advantages(rewards: Sequence[Sequence[float]], scale: str = "batch") -> list[list[float]]:
    """GRPO advantages of a step's groups: each reward minus its group's mean, scaled.

    Args:
        rewards: per group its ``G`` rewards.
        scale: ``"batch"`` (divide by the standard deviation of every reward of the step), ``"group"`` (by the
            group's own), or ``"none"``. The standard deviation is the unbiased one (``torch.std``, as TRL),
            plus 1e-4 (TRL's epsilon).
    Returns:
        Per group its ``G`` advantages; a group of equal rewards gets zeros.
    Raises:
        ValueError: an unknown ``scale``, or an empty group.
    """
    import statistics

    if scale not in ("batch", "group", "none"):
        raise ValueError(f"scale must be 'batch', 'group' or 'none', got {scale!r}")
    if any(len(r) == 0 for r in rewards):
        raise ValueError("group_advantages got an empty group")
    flat = [float(x) for r in rewards for x in r]
    batch_std = statistics.stdev(flat) if len(flat) > 1 else 0.0
    out = []
    for r in rewards:
        m = sum(r) / len(r)
        centred = [float(x) - m for x in r]
        if scale == "none":
            out.append(centred)
            continue
        std = batch_std if scale == "batch" else (statistics.stdev(r) if len(r) > 1 else 0.0)
        out.append([c / (std + 1e-4) for c in centred])
    return out


def frozen_reference(model: Any) -> Any:
    """A frozen copy of ``model``'s current weights, built anew from its config (not ``copy.deepcopy``).

    A trainer may leave an instance-level ``forward`` on the model (accelerate's ``prepare`` wraps it, e.g. in
    autocast, as a closure over the original bound method). ``copy.deepcopy`` copies that closure unchanged, so
    the copy's forward would still run the original model and track its weights. A fresh instance of the same
    class, with the state dict loaded, has only the class's own forward.

    Args:
        model: a ``transformers`` ``PreTrainedModel``.
    Returns:
        A model of the same class on the same device and dtype, in eval mode, every parameter frozen.

    Source: TRL 1.16 ``GRPOTrainer`` (its ``ref_model`` is a separate model built from the initial weights);
    accelerate ``Accelerator.prepare_model`` (the forward wrapper).
    """
    import torch

    first = next(model.parameters())
    ref = type(model)(model.config).to(device=first.device, dtype=first.dtype)
    with torch.no_grad():
        ref.load_state_dict(model.state_dict())
    ref.eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


class SharedPrefixGRPO:
    """A GRPO optimiser loop that shares each prompt's pass across its group (see the module doc).

    Args:
        model: the causal LM to train (its ``requires_grad`` flags choose the trained weights).
        tokenizer: its tokenizer (for the chat template and the stop strings).
        reward_fn: ``reward_fn(row, text, hit_budget) -> float`` for one completion of a row.
        num_generations: the group size ``G`` (>= 2).
        max_new_tokens: tokens per completion.
        temperature: sampling temperature (also divides the logits of the loss).
        lr: AdamW learning rate, constant (betas 0.9 / 0.999, eps 1e-8, no weight decay: the
            ``TrainingArguments`` defaults TRL inherits).
        scale: advantage scaling, see :func:`group_advantages`.
        max_grad_norm: gradient clipping by global norm (TRL's default 1.0; 0 to disable).
        stop_strings: completion stop strings.
        seed: seeds the sampling generator.
        beta: the KL coefficient (>= 0; TRL ``GRPOConfig.beta``); 0 needs no reference model.
        ref_model: the frozen reference policy (e.g. the SFT model before GRPO), run under ``torch.no_grad``;
            required when ``beta > 0``.
    Raises:
        ValueError: ``num_generations`` < 2, no trainable parameter, a negative ``beta``, or ``beta > 0``
            without ``ref_model``.
    """

    def __init__(self, model: Any, tokenizer: Any, reward_fn: Callable[[dict, str, bool], float], *,
                 num_generations: int = 8, max_new_tokens: int = 24, temperature: float = 1.0, lr: float = 1e-5,
                 scale: str = "batch", max_grad_norm: float = 1.0, stop_strings: Sequence[str] = (), seed: int = 0,
                 beta: float = 0.0, ref_model: Any = None):
        import torch

        if num_generations < 2:
            raise ValueError(f"GRPO needs num_generations >= 2, got {num_generations}")
        if not beta >= 0:
            raise ValueError(f"SharedPrefixGRPO needs beta >= 0, got {beta}")
        if beta > 0 and ref_model is None:
            raise ValueError(f"SharedPrefixGRPO: beta={beta} needs a ref_model (the frozen reference policy)")
        self.beta, self.ref_model = float(beta), ref_model
        if ref_model is not None:
            ref_model.eval()
            for p in ref_model.parameters():
                p.requires_grad_(False)
        params = [p for p in model.parameters() if p.requires_grad]
        if not params:
            raise ValueError("SharedPrefixGRPO: the model has no trainable parameter")
        self.model, self.tokenizer, self.reward_fn = model, tokenizer, reward_fn
        self.G, self.max_new_tokens, self.temperature = num_generations, max_new_tokens, temperature
        self.scale, self.max_grad_norm, self.stop_strings = scale, max_grad_norm, tuple(stop_strings)
        self.params = params
        self.optimizer = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
        self.generator = torch.Generator(device=next(model.parameters()).device).manual_seed(seed)
        eos = {tokenizer.eos_token_id, tokenizer.pad_token_id}
        self.eos_ids = sorted(int(e) for e in eos if e is not None)

    def prompt_ids(self, messages: list[dict]) -> list[int]:
        """The chat-templated prompt's token ids (generation prompt added, no extra special tokens)."""
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def step(self, rows: Sequence[dict]) -> dict[str, Any]:
        """One optimiser step on ``rows`` (each with a ``"prompt"`` of chat messages): sample, score, update.

        Returns:
            ``{"groups": [GroupSample...], "loss", "grad_norm", "completion_tokens", "trained_groups",
            "zero_std_groups", "kl", "sample_s", "train_s"}`` (``loss`` is the DAPO surrogate's value, which is 0
            at ratio 1 up to the advantage-weighted sum and the KL term; ``kl`` is the k3 estimator's mean over
            the step's completion tokens, ``None`` at ``beta=0``).
        """
        import torch

        t0 = time.perf_counter()
        self.model.eval()
        groups = []
        for row in rows:
            gs = sample_group(self.model, self.tokenizer, self.prompt_ids(row["prompt"]), n=self.G,
                              max_new_tokens=self.max_new_tokens, temperature=self.temperature,
                              stop_strings=self.stop_strings, eos_ids=self.eos_ids, generator=self.generator)
            # an empty completion (EOS first) gets the EOS token back so it has one token to be trained on
            gs.completions = [c if c else [self.eos_ids[0]] for c in gs.completions]
            gs.rewards = [float(self.reward_fn(row, t, h)) for t, h in zip(gs.texts, gs.hit_budget)]
            groups.append(gs)
        t1 = time.perf_counter()
        adv = group_advantages([g.rewards for g in groups], self.scale)
        n_tokens = sum(len(c) for g in groups for c in g.completions)
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss_total, trained, kl_sum = 0.0, 0, 0.0
        for g, a in zip(groups, adv):
            if all(x == 0.0 for x in a) and self.beta == 0:
                continue
            logp, mask = completion_logprobs(self.model, g.prompt_ids, g.completions, temperature=self.temperature)
            at = torch.tensor(a, dtype=logp.dtype, device=logp.device).unsqueeze(1)
            # ratio exp(logp - logp.detach()) is 1 on-policy; its gradient is grad logp (TRL's dapo loss)
            ratio = torch.exp(logp - logp.detach())
            per_token = -(at * ratio)
            if self.beta > 0:
                with torch.no_grad():
                    ref, _ = completion_logprobs(self.ref_model, g.prompt_ids, g.completions,
                                                 temperature=self.temperature)
                delta = ref - logp
                kl = torch.exp(delta) - delta - 1.0
                per_token = per_token + self.beta * kl
                kl_sum += float((kl.detach() * mask).sum())
            loss = (per_token * mask).sum() / n_tokens
            loss.backward()
            loss_total += float(loss.detach())
            trained += 1
        grad_norm = None
        if trained:
            if self.max_grad_norm:
                grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, self.max_grad_norm))
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.model.eval()
        return {"groups": groups, "loss": loss_total, "grad_norm": grad_norm, "completion_tokens": n_tokens,
                "trained_groups": trained,
                "zero_std_groups": sum(1 for a in adv if all(x == 0.0 for x in a)),
                "kl": kl_sum / n_tokens if self.beta > 0 else None,
                "sample_s": round(t1 - t0, 2), "train_s": round(time.perf_counter() - t1, 2)}
