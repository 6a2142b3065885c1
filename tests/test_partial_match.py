"""Spider's partial-match precision, recall and F1 per component (its evaluation.py: ``eval_partial_match`` and the
partial averages of ``evaluate``), against a set of three predictions worked out by hand, and in what ``score``
writes and prints."""
from __future__ import annotations

import pytest

from textsql_clarify.rewards.exact_match import COMPONENTS, exact_match, partial_match

#: (prediction, gold) on Spider's concert_singer schema, no schema given (columns as written).
PAIRS = (
    # 1: a changed value only: select, where and keywords {where} match
    ("SELECT name FROM singer WHERE age > 30", "SELECT name FROM singer WHERE age > 20"),
    # 2: one select item of two, ORDER BY asc for desc and no LIMIT: select, order and keywords
    #    ({order, asc} against {order, desc, limit}) miss; no WHERE in either
    ("SELECT name FROM singer ORDER BY age ASC", "SELECT name, age FROM singer ORDER BY age DESC LIMIT 1"),
    # 3: an added WHERE: select matches, where and keywords ({where} against none) miss
    ("SELECT count(*) FROM singer WHERE age > 20", "SELECT count(*) FROM singer"),
)


@pytest.fixture(scope="module")
def partial():
    return partial_match(exact_match(p, g) for p, g in PAIRS)


def _f1(p: float, r: float) -> float:
    return 2 * p * r / (p + r)


def test_select_where_order_and_keywords_as_worked_by_hand(partial):
    # select: every example has it in both; matches in 1 and 3 -> P = R = 2/3
    assert partial["select"]["precision"] == {"value": pytest.approx(2 / 3), "n": 3}
    assert partial["select"]["recall"] == {"value": pytest.approx(2 / 3), "n": 3}
    assert partial["select"]["f1"] == pytest.approx(2 / 3)
    # where: predicted in 1 and 3 (matched in 1) -> P = 1/2; in the gold of 1 only (matched) -> R = 1
    assert partial["where"]["precision"] == {"value": 0.5, "n": 2}
    assert partial["where"]["recall"] == {"value": 1.0, "n": 1}
    assert partial["where"]["f1"] == pytest.approx(_f1(0.5, 1.0))
    # order: in both queries of 2 only, not matched: P = R = 0 and F1 0 (the script would print 1 here)
    assert (partial["order"]["precision"], partial["order"]["recall"]) == ({"value": 0.0, "n": 1},
                                                                           {"value": 0.0, "n": 1})
    assert partial["order"]["f1"] == 0.0
    # keywords: predicted in all three (matched in 1) -> P = 1/3; in the golds of 1 and 2 -> R = 1/2
    assert partial["keywords"]["precision"] == {"value": pytest.approx(1 / 3), "n": 3}
    assert partial["keywords"]["recall"] == {"value": 0.5, "n": 2}
    assert partial["keywords"]["f1"] == pytest.approx(_f1(1 / 3, 1 / 2)) == pytest.approx(0.4)


def test_a_component_in_no_example_is_undefined_and_and_or_counts_as_the_script_does(partial):
    for c in ("group", "group(no having)", "IUEN"):
        assert partial[c] == {"precision": {"value": None, "n": 0}, "recall": {"value": None, "n": 0}, "f1": None}
    # eval_and_or scores two equal connector sets (here both empty) as 1 of 1: every example counts
    assert partial["and/or"] == {"precision": {"value": 1.0, "n": 3}, "recall": {"value": 1.0, "n": 3}, "f1": 1.0}
    assert list(partial) == list(COMPONENTS)


def test_an_unreadable_prediction_is_scored_as_an_empty_query():
    v = exact_match("SELEC name FROM", "SELECT name FROM singer WHERE age > 20")
    assert v.error is not None and not v.match
    assert v.partial["select"] == (0, 1, False) and v.partial["where"] == (0, 1, False)
    assert v.partial["and/or"] == (1, 1, True)  # no connector in either, as the script's empty query has none


def test_score_writes_partial_match_to_metrics_and_prints_its_table():
    """The embedded set's answerable and ambiguous samples (36), each predicted by its gold but one by a query
    with an added WHERE: metrics.json's partial block is partial_match of the run's verdicts, and the table
    prints every component with its n."""
    from textsql_clarify.baselines.predictions import render_exact_match, score_predictions
    from textsql_clarify.datasets import load_dataset
    from textsql_clarify.rewards.report import WIDTH

    samples = [s for s in load_dataset("embedded") if s.group != "unanswerable"]
    preds = {s.id: s.gold_sql for s in samples}
    first = samples[0]
    preds[first.id] = f"SELECT * FROM ({first.gold_sql}) WHERE 1 = 0"
    _, metrics = score_predictions(samples, preds, progress=False)
    block = metrics["exact_match"]["partial"]["components"]
    assert list(block) == list(COMPONENTS)
    n_em = metrics["overall"]["EM"]["n"]
    assert block["select"]["precision"]["n"] == block["select"]["recall"]["n"] == n_em
    assert block["select"]["precision"]["value"] == pytest.approx((n_em - 1) / n_em)
    text = render_exact_match(metrics).splitlines()
    start = next(k for k, ln in enumerate(text) if ln.startswith("Partial match"))
    table = text[start + 2:]
    assert table[0].split() == ["component", "precision", "recall", "F1"]
    sel = next(ln for ln in table if ln.startswith("select "))
    assert f"{block['select']['precision']['value']:.3f} (n={n_em})" in sel
    assert max(len(ln) for ln in text) <= WIDTH and not [ln for ln in text if ln != ln.rstrip()]
