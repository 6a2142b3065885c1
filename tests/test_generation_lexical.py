"""The lexical-overlap recipe (ABISS §3.2 lexical overlap).

The embedded university database's golds and real Spider dev anchors by id, with the exact swap and hidden
knowledge; every check can reject; the source is never written; the same seed gives the same samples; the
oracle scores EX 1.0 and the no-clarify agent 0.0 on them; they pass load-time validation unflagged.
"""
from __future__ import annotations

import hashlib
import random
import sqlite3
from pathlib import Path

import pytest

from textsql_clarify.datasets import embedded_db_path, load_dataset
from textsql_clarify.generation.base import Accepted, Anchor, GenContext, Recipe
from textsql_clarify.generation.derived_db import column_comments
from textsql_clarify.generation.gold_refs import source_schema
from textsql_clarify.generation.lexical_overlap import LexicalOverlapRecipe, Pair, affinity, overlap_pairs, \
    question_fits, swap_column


def _anchor(s) -> Anchor:
    return Anchor(s.id, s.db_id, s.db_path, s.question, s.gold_sql, s.difficulty)


@pytest.fixture(scope="module")
def embedded():
    return {s.id: s for s in load_dataset("embedded")}


def _run(anchor, tmp_path, seed=0, **opts):
    ctx = GenContext(work_dir=tmp_path / "databases", options=opts)
    return LexicalOverlapRecipe().run(anchor, random.Random(seed), ctx)


def test_recipe_contract():
    r = LexicalOverlapRecipe()
    assert isinstance(r, Recipe) and r.name == "lexical_overlap" and r.needs_model is False
    assert r.stages == ("pair_found", "question_fits_both", "swap_executes", "swap_nonempty", "results_differ")


def test_affinity_follows_sqlite_rules():
    assert [affinity(t) for t in ("int", "VARCHAR(255)", "", "double", "DECIMAL(10,2)", "BIGINT", "blob")] == \
        ["INTEGER", "TEXT", "BLOB", "REAL", "NUMERIC", "INTEGER", "BLOB"]


def test_embedded_residence_city(embedded, tmp_path):
    s = embedded["uni-overlap-002"]  # Students whose city is Bologna. (residence_city)
    sha = hashlib.sha256(Path(s.db_path).read_bytes()).hexdigest()
    out = _run(_anchor(s), tmp_path)
    assert hashlib.sha256(Path(s.db_path).read_bytes()).hexdigest() == sha
    assert len(out) == 1 and isinstance(out[0], Accepted)
    smp = out[0].sample
    assert smp.id == "lexical_overlap-uni-overlap-002-residence_city-home_city"
    assert (smp.group, smp.subcategory, smp.gold_sql, smp.db_path) == \
        ("ambiguous", "lexical_overlap", s.gold_sql, s.db_path)
    # the columns' own comments give the user's words
    assert smp.hidden_knowledge == "I mean the city where the student lives during term, not the city of the family home."
    (alt,) = smp.interpretations
    assert alt.gold_sql == "SELECT first_name, last_name FROM students WHERE home_city = 'Bologna'"
    assert alt.hidden_knowledge == "I mean the city of the family home, not the city where the student lives during term."
    assert alt.description == "students.home_city in place of students.residence_city"
    assert smp.provenance == {"columns": ["students.residence_city", "students.home_city"], "shared": ["city"],
                              "distinguishing": ["residence", "home"]}
    assert list(out[0].verdicts) == list(LexicalOverlapRecipe.stages)


def test_embedded_email(embedded, tmp_path):
    s = embedded["uni-overlap-001"]  # the email addresses of the Databases students (institutional_email)
    out = _run(_anchor(s), tmp_path)
    smp = out[-1].sample
    assert smp.hidden_knowledge == "I mean the institutional email, not the personal email."
    assert smp.interpretations[0].gold_sql == (
        "SELECT s.personal_email FROM students AS s JOIN student_courses AS sc ON sc.student_id = s.student_id "
        "JOIN courses AS c ON c.course_id = sc.course_id WHERE c.title = 'Databases'")


def test_embedded_run_counts(embedded, tmp_path):
    acc, stages = [], []
    for s in embedded.values():
        if s.gold_sql is None:
            continue
        for o in _run(_anchor(s), tmp_path, seed=s.id):
            (acc if isinstance(o, Accepted) else stages).append(o if isinstance(o, Accepted) else o.stage)
    assert sorted(o.sample.id for o in acc) == ["lexical_overlap-uni-overlap-001-institutional_email-personal_email",
                                                 "lexical_overlap-uni-overlap-002-residence_city-home_city"]
    # uni-entity-001 (two enrolment dates in joined tables) names "course": the wording picks a table
    assert sorted(stages).count("question_fits_both") == 2 and stages.count("pair_found") == 33


def test_spider_dev_summary(tmp_path, spider_root):
    from textsql_clarify.datasets.spider import load_spider

    samples = {s.id: s for s in load_spider(spider_root)}
    s = samples["spider-dev-540"]  # What is the program id and the summary of the degree that has the most ...
    out = _run(_anchor(s), tmp_path)
    smp = out[-1].sample
    assert smp.id == "lexical_overlap-spider-dev-540-degree_summary_name-degree_summary_description"
    assert smp.hidden_knowledge == "I mean the degree summary name, not the degree summary description."
    assert "T1.degree_summary_description" in smp.interpretations[0].gold_sql
    assert "degree_summary_name" not in smp.interpretations[0].gold_sql
    # a pair whose distinguishing word the question says is rejected: "first name" picks first_name
    pairs = overlap_pairs(samples["spider-dev-0"].gold_sql, source_schema(samples["spider-dev-0"].db_path))
    assert pairs == []


# ------------------------------------------------------------------------------- every check can reject
def _db(tmp_path, ddl, rows) -> Path:
    p = tmp_path / f"src{len(list(tmp_path.glob('src*.sqlite')))}.sqlite"  # a new file each call
    con = sqlite3.connect(p)
    for x in [*ddl, *rows]:
        con.execute(x)
    con.commit()
    con.close()
    return p


PEOPLE = ["CREATE TABLE people (id INTEGER PRIMARY KEY, home_city TEXT, work_city TEXT, age INT)"]


def _toy(tmp_path, gold, question, rows=("INSERT INTO people VALUES (1, 'Rome', 'Milan', 30)",)):
    db = _db(tmp_path, PEOPLE, rows)
    return Anchor("t1", "toy", str(db), question, gold)


def test_pairs_and_swap_of_a_toy_schema(tmp_path):
    a = _toy(tmp_path, "SELECT p.home_city FROM people AS p WHERE age > 1", "Which city?")
    schema = source_schema(a.db_path)
    pairs = overlap_pairs(a.gold_sql, schema)
    assert pairs == [Pair(("people", "home_city"), ("people", "work_city"), ("city",), ("home", "work"))]
    assert swap_column(a.gold_sql, pairs[0], schema) == "SELECT p.work_city FROM people AS p WHERE age > 1"
    assert question_fits("Which city do they live in?", pairs[0]) is None
    assert question_fits("Which home town?", pairs[0]) == "the question names the distinguishing word 'home'"
    assert question_fits("Which place?", pairs[0]) == "the question does not name the shared part 'city'"


def test_pair_found_rejects(tmp_path):
    out = _run(_toy(tmp_path, "SELECT age FROM people", "How old?"), tmp_path)
    assert [(o.stage, o.reason) for o in out] == [("pair_found", "no column of the gold has a look-alike of the same type")]
    out = _run(_toy(tmp_path, "SELEC age FRM people", "How old?"), tmp_path)
    assert out[0].stage == "pair_found" and out[0].reason.startswith("the gold cannot be analysed")


def test_question_fits_both_rejects(tmp_path):
    out = _run(_toy(tmp_path, "SELECT home_city FROM people", "What is the home city?"), tmp_path)
    assert [(o.stage, o.reason) for o in out] == [("question_fits_both",
                                                   "the question names the distinguishing word 'home'")]


def test_swap_executes_rejects(tmp_path, monkeypatch):
    import textsql_clarify.generation.lexical_overlap as lo

    monkeypatch.setattr(lo, "swap_column", lambda sql, pair, schema: "SELECT nope FROM people")
    out = _run(_toy(tmp_path, "SELECT home_city FROM people", "Which city?"), tmp_path)
    assert [o.stage for o in out] == ["swap_executes"] and out[0].reason.startswith("the swapped gold fails")


def test_swap_nonempty_rejects(tmp_path):
    rows = ("INSERT INTO people VALUES (1, 'Rome', NULL, 30)",)
    out = _run(_toy(tmp_path, "SELECT id FROM people WHERE home_city = 'Rome'", "Who is in the city of Rome?",
                    rows), tmp_path)
    assert [(o.stage, o.reason) for o in out] == [("swap_nonempty", "the swapped gold returns no rows")]


def test_results_differ_rejects(tmp_path):
    rows = ("INSERT INTO people VALUES (1, 'Rome', 'Rome', 30)",)
    out = _run(_toy(tmp_path, "SELECT home_city FROM people", "Which city?", rows), tmp_path)
    assert [(o.stage, o.reason) for o in out] == [("results_differ", "the swapped gold returns the anchor's rows")]


def test_deterministic(embedded, tmp_path):
    a = _anchor(embedded["uni-overlap-002"])
    one = [o.sample.to_dict() for o in _run(a, tmp_path, seed=3) if isinstance(o, Accepted)]
    two = [o.sample.to_dict() for o in _run(a, tmp_path, seed=3) if isinstance(o, Accepted)]
    assert one == two and len(one) == 1


def test_column_comments_of_the_embedded_schema():
    con = sqlite3.connect(f"file:{embedded_db_path()}?mode=ro", uri=True)
    sql = con.execute("SELECT sql FROM sqlite_master WHERE name = 'students'").fetchone()[0]
    con.close()
    assert column_comments(sql)["residence_city"] == "city where the student lives during term"
    assert "first_name" not in column_comments(sql)


def test_oracle_and_no_clarify_on_generated(embedded, tmp_path):
    from textsql_clarify.baselines.agents import NoClarifyAgent, OracleAgent
    from textsql_clarify.rollout.evaluation import evaluate
    from textsql_clarify.datasets.validate import validate_samples
    from textsql_clarify.rewards.feedback import LexicalFeedbackJudge

    gen = [o.sample for i in ("uni-overlap-001", "uni-overlap-002") for o in _run(_anchor(embedded[i]), tmp_path)
           if isinstance(o, Accepted)]
    assert validate_samples(gen, use_cache=False).n_flagged == 0
    judge = LexicalFeedbackJudge()
    _, m = evaluate(gen, OracleAgent(), progress=False, feedback_judge=judge)
    assert m["overall"]["EX"] == {**m["overall"]["EX"], "value": 1.0, "n": 2}
    _, m = evaluate(gen, NoClarifyAgent(), progress=False, feedback_judge=judge)
    assert m["overall"]["EX"]["value"] == 0.0
