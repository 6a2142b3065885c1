"""The shared-prefix GRPO loop (textsql_clarify/training/shared_prefix_grpo.py) on a tiny random Llama.

The model is built from a ``LlamaConfig`` (2 layers, hidden 32), so nothing is loaded: the tests check that
sharing the prompt pass changes neither the log-probabilities nor the gradient of the padded batch TRL would
run, that the advantages follow GRPO's definition, and that a step moves the policy towards rewarded tokens.
"""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from textsql_clarify.training.shared_prefix_grpo import (  # noqa: E402
    SharedPrefixGRPO,
    completion_logprobs,
    group_advantages,
    sample_group,
)

PROMPT = [5, 7, 9, 11, 13, 2, 3]
COMPLETIONS = [[4, 8, 15], [16], [23, 42, 1, 2]]


def tiny_llama(seed: int = 0):
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    return transformers.LlamaForCausalLM(cfg).eval()


class IdTokenizer:
    """Decodes token ids as their numbers; token 0 is EOS and padding."""

    eos_token_id = 0
    pad_token_id = 0

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(str(int(i)) for i in ids if not (skip_special_tokens and int(i) == 0))

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
        return messages[-1]["content"]

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [int(x) for x in text.split()]}


def full_sequence_logprobs(model, prompt, completion, temperature=1.0):
    """Reference: one unshared forward pass over prompt + completion."""
    logits = model(input_ids=torch.tensor([prompt + completion])).logits[0].float() / temperature
    lp = torch.log_softmax(logits, -1)
    return torch.stack([lp[len(prompt) - 1 + t, completion[t]] for t in range(len(completion))])


def test_shared_prompt_pass_gives_the_unshared_log_probabilities():
    model = tiny_llama()
    logp, mask = completion_logprobs(model, PROMPT, COMPLETIONS, temperature=0.7)
    assert tuple(logp.shape) == (3, 4)
    assert mask.tolist() == [[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]]
    for k, c in enumerate(COMPLETIONS):
        ref = full_sequence_logprobs(model, PROMPT, c, temperature=0.7)
        assert torch.allclose(logp[k, :len(c)], ref, atol=1e-5)
        assert float(logp[k, len(c):].abs().sum()) == 0.0


def test_shared_prompt_pass_gives_the_gradient_of_the_padded_batch():
    model = tiny_llama()
    weights = torch.tensor([[0.5], [-1.0], [2.0]])
    logp, mask = completion_logprobs(model, PROMPT, COMPLETIONS)
    (weights * logp * mask).sum().backward()
    shared = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    total = sum(float(w) * full_sequence_logprobs(model, PROMPT, c).sum() for w, c in zip(weights, COMPLETIONS))
    total.backward()
    for a, p in zip(shared, model.parameters()):
        assert torch.allclose(a, p.grad, atol=1e-5)


def test_a_single_token_completion_needs_no_second_pass():
    model = tiny_llama()
    logp, mask = completion_logprobs(model, PROMPT, [[4], [9]])
    ref = torch.log_softmax(model(input_ids=torch.tensor([PROMPT])).logits[0, -1].float(), -1)
    assert torch.allclose(logp[:, 0], ref[[4, 9]], atol=1e-6)


def test_advantages_centre_on_the_group_and_scale_by_the_step():
    # one success in 4 and a saturated group: the 8 rewards have mean 5/8 and unbiased variance
    # (5 (3/8)^2 + 3 (5/8)^2) / 7 = 15/56, so the batch std is 0.51755
    adv = group_advantages([[1, 0, 0, 0], [1, 1, 1, 1]], "batch")
    s = math.sqrt(15 / 56) + 1e-4
    assert adv[0] == pytest.approx([0.75 / s, -0.25 / s, -0.25 / s, -0.25 / s])
    assert adv[1] == [0.0, 0.0, 0.0, 0.0]
    # the group's own std: sqrt(0.25) = 0.5 for a 1-in-4 group (GRPO's original scaling)
    assert group_advantages([[1, 0, 0, 0]], "group")[0][0] == pytest.approx(0.75 / (0.5 + 1e-4))
    assert group_advantages([[1, 0, 0, 0]], "none") == [[0.75, -0.25, -0.25, -0.25]]
    with pytest.raises(ValueError, match="scale"):
        group_advantages([[1, 0]], "rank")
    with pytest.raises(ValueError, match="empty"):
        group_advantages([[]])


def test_near_zero_temperature_sampling_is_greedy_decoding():
    model = tiny_llama()
    gs = sample_group(model, IdTokenizer(), PROMPT, n=3, max_new_tokens=6, temperature=1e-6,
                      generator=torch.Generator().manual_seed(0))
    greedy = model.generate(torch.tensor([PROMPT]), max_new_tokens=6, do_sample=False, pad_token_id=0,
                            eos_token_id=None)[0, len(PROMPT):].tolist()
    assert gs.completions == [greedy] * 3
    assert gs.hit_budget == [True] * 3


def test_sampling_stops_at_a_stop_string_and_keeps_its_token():
    model = tiny_llama()
    greedy = model.generate(torch.tensor([PROMPT]), max_new_tokens=6, do_sample=False, pad_token_id=0,
                            eos_token_id=None)[0, len(PROMPT):].tolist()
    stop = str(greedy[2])
    gs = sample_group(model, IdTokenizer(), PROMPT, n=2, max_new_tokens=6, temperature=1e-6, stop_strings=[stop],
                      generator=torch.Generator().manual_seed(0))
    first = next(i for i in range(6) if stop in IdTokenizer().decode(greedy[:i + 1]))
    assert gs.completions[0] == greedy[:first + 1]
    assert gs.hit_budget == [False, False]


def test_bad_sampling_arguments_are_refused():
    model = tiny_llama()
    with pytest.raises(ValueError, match="n >= 1"):
        sample_group(model, IdTokenizer(), PROMPT, n=0, max_new_tokens=4)
    with pytest.raises(ValueError, match="temperature"):
        sample_group(model, IdTokenizer(), PROMPT, n=2, max_new_tokens=4, temperature=0.0)
    with pytest.raises(ValueError, match="empty prompt"):
        sample_group(model, IdTokenizer(), [], n=2, max_new_tokens=4)
    with pytest.raises(ValueError, match="num_generations"):
        SharedPrefixGRPO(model, IdTokenizer(), lambda r, t, h: 0.0, num_generations=1)


def test_steps_on_a_first_token_reward_raise_the_rewarded_tokens_probability():
    model = tiny_llama(seed=1)
    row = {"prompt": [{"role": "user", "content": " ".join(map(str, PROMPT))}]}
    even = torch.arange(2, 97, 2)  # the rewarded first tokens (token 0, EOS, excluded): about half the mass

    def mass_on_even():
        with torch.no_grad():
            return float(torch.softmax(model(input_ids=torch.tensor([PROMPT])).logits[0, -1], -1)[even].sum())

    def reward(r, text, hit):
        first = text.split()[:1]
        return 1.0 if first and int(first[0]) % 2 == 0 else 0.0

    before = mass_on_even()
    loop = SharedPrefixGRPO(model, IdTokenizer(), reward, num_generations=16, max_new_tokens=2, lr=1e-2, seed=0)
    trained = 0
    for _ in range(10):
        out = loop.step([row])
        trained += out["trained_groups"]
        assert out["completion_tokens"] == sum(len(c) for c in out["groups"][0].completions)
    assert trained == 10
    assert 0.3 < before < 0.7
    assert mass_on_even() > before + 0.15  # measured 0.496 -> 0.720 (seeded)


def test_a_group_of_equal_rewards_is_not_trained_on():
    model = tiny_llama()
    before = [p.detach().clone() for p in model.parameters()]
    loop = SharedPrefixGRPO(model, IdTokenizer(), lambda r, t, h: 1.0, num_generations=4, max_new_tokens=2, seed=0)
    out = loop.step([{"prompt": [{"role": "user", "content": "5 7 9"}]}])
    assert (out["trained_groups"], out["zero_std_groups"], out["grad_norm"]) == (0, 1, None)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_kl_term_is_zero_and_leaves_the_gradient_unchanged_when_the_policy_is_the_reference():
    # k3 = exp(d) - d - 1 with d = ref - logp: 0 at d = 0, and its gradient (1 - exp(d)) grad logp is 0 there
    grads = []
    for beta in (0.0, 0.5):
        model, ref = tiny_llama(), tiny_llama()
        reward = (lambda r, text, hit: 1.0 if text.split() and int(text.split()[0]) % 2 == 0 else 0.0)
        loop = SharedPrefixGRPO(model, IdTokenizer(), reward, num_generations=8, max_new_tokens=3, lr=0.0,
                                seed=3, beta=beta, ref_model=ref if beta else None)
        loop.optimizer.step = lambda: None  # keep the gradient for the comparison
        loop.optimizer.zero_grad = lambda set_to_none=True: None
        out = loop.step([{"prompt": [{"role": "user", "content": " ".join(map(str, PROMPT))}]}])
        assert out["trained_groups"] == 1
        assert out["kl"] is None if beta == 0 else out["kl"] == pytest.approx(0.0, abs=1e-6)
        grads.append([p.grad.clone() for p in model.parameters()])
    for a, b in zip(*grads):
        assert torch.allclose(a, b, atol=1e-6)


def test_kl_term_equals_the_k3_estimator_against_another_reference():
    model, ref = tiny_llama(seed=0), tiny_llama(seed=5)
    loop = SharedPrefixGRPO(model, IdTokenizer(), lambda r, t, h: 1.0, num_generations=4, max_new_tokens=3, lr=0.0,
                            seed=0, beta=0.1, ref_model=ref)
    out = loop.step([{"prompt": [{"role": "user", "content": " ".join(map(str, PROMPT))}]}])
    comps = out["groups"][0].completions
    total, n = 0.0, 0
    for c in comps:  # the estimator from unshared passes of each model
        d = full_sequence_logprobs(ref, PROMPT, c) - full_sequence_logprobs(model, PROMPT, c)
        total += float((torch.exp(d) - d - 1).sum())
        n += len(c)
    assert out["kl"] == pytest.approx(total / n, rel=1e-4)
    assert out["kl"] > 0.01  # two random initialisations disagree
    # equal rewards give zero advantages, but the KL term still trains the group
    assert (out["zero_std_groups"], out["trained_groups"]) == (1, 1)
    assert all(not p.requires_grad for p in ref.parameters())


def test_kl_steps_on_equal_rewards_move_the_policy_towards_the_reference():
    model, ref = tiny_llama(seed=0), tiny_llama(seed=5)
    with torch.no_grad():  # a sharper reference, far from the near-uniform random policy
        ref.lm_head.weight.mul_(20.0)
    row = {"prompt": [{"role": "user", "content": " ".join(map(str, PROMPT))}]}

    def first_token_kl():  # exact KL(ref || policy) of the first completion token's distribution
        with torch.no_grad():
            lp = torch.log_softmax(model(input_ids=torch.tensor([PROMPT])).logits[0, -1], -1)
            lr = torch.log_softmax(ref(input_ids=torch.tensor([PROMPT])).logits[0, -1], -1)
            return float((lr.exp() * (lr - lp)).sum())

    before = first_token_kl()
    loop = SharedPrefixGRPO(model, IdTokenizer(), lambda r, t, h: 0.0, num_generations=16, max_new_tokens=1,
                            lr=1e-2, seed=0, beta=1.0, ref_model=ref)
    for _ in range(10):
        loop.step([row])
    after = first_token_kl()
    assert before > 0.5
    assert after < 0.8 * before, (before, after)  # measured 3.12 -> 2.17 (seeded)


def test_a_kl_coefficient_needs_a_reference_and_a_sign():
    model = tiny_llama()
    with pytest.raises(ValueError, match="ref_model"):
        SharedPrefixGRPO(model, IdTokenizer(), lambda r, t, h: 0.0, beta=0.04)
    with pytest.raises(ValueError, match="beta >= 0"):
        SharedPrefixGRPO(model, IdTokenizer(), lambda r, t, h: 0.0, beta=-0.1, ref_model=tiny_llama())


def test_frozen_reference_keeps_its_weights_when_the_policy_has_an_instance_forward():
    from textsql_clarify.training.shared_prefix_grpo import frozen_reference

    model = tiny_llama()
    original = model.forward

    def wrapped(*a, **k):  # what accelerate's prepare leaves on a trained model: a closure over the bound forward
        return original(*a, **k)

    model.forward = wrapped
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        before = model(input_ids=ids).logits.clone()
    ref = frozen_reference(model)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05)
        moved = model(input_ids=ids).logits
        kept = ref(input_ids=ids).logits
    assert not torch.allclose(moved, before, atol=1e-3)
    assert torch.allclose(kept, before, atol=1e-6)
    assert all(not p.requires_grad for p in ref.parameters()) and not ref.training
    import copy  # the copy it replaces follows the policy through the copied closure

    dup = copy.deepcopy(model)
    with torch.no_grad():
        assert torch.allclose(dup(input_ids=ids).logits, model(input_ids=ids).logits)
