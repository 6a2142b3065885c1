"""One parse and one qualify of the prediction per SQL step, and the same rewards as before.

Inside a step the scorers (cells' column origins, components, the dense reward, retrieval, commitments, hedge
detection) share the prediction's analysis through :func:`textsql_clarify.sql.schema.shared_analysis`. These
tests run Spider dev golds and wrong predictions through the env with detailed scores on and check every
reward component against the scorer functions called directly on the raw SQL strings (each parses on its
own), and count the parses of the prediction in a step.
"""
from __future__ import annotations

import math

import pytest
import sqlglot
from sqlglot import exp

import textsql_clarify.sql.schema as schema_mod
from textsql_clarify.datasets import load_dataset
from textsql_clarify.envs import scoring
from textsql_clarify.envs.env import TextSQLClarifyEnv
from textsql_clarify.errors import SQLParseError
from textsql_clarify.rewards.cells import ResultTable, column_origins, score_cells
from textsql_clarify.rewards.commitments import commitment_set, drift_revision, is_drift
from textsql_clarify.rewards.components import component_sets, score_components
from textsql_clarify.rewards.retrieval import score_retrieval, tables_read
from textsql_clarify.rewards.sql_canonical import prepare_sql
from textsql_clarify.sql.sandbox import get_sandbox
from textsql_clarify.sql.schema import (
    active_memo, mapping_schema, parse_for_analysis, qualified_for_analysis, read_schema, shared_analysis,
)

N_SPIDER = 200


@pytest.fixture(scope="module")
def spider_samples(tmp_path_factory):
    from conftest import SPIDER

    if not (SPIDER / "dev.json").is_file():
        pytest.skip("real data absent: ../shared/data/spider_dev/dev.json not found")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TEXTSQL_CLARIFY_CACHE", str(tmp_path_factory.mktemp("cache")))
        return load_dataset(f"spider:{SPIDER}", limit=N_SPIDER)


def _variants(i: int, samples: list) -> list[str]:
    """The gold and wrong predictions for sample ``i``: the gold without its last output column, another
    sample's gold on the same database, the gold with a pagination LIMIT, and ``SELECT *`` of a table."""
    s = samples[i]
    out = [s.gold_sql]
    tree = sqlglot.parse_one(s.gold_sql, read="sqlite")
    if isinstance(tree, exp.Select) and len(tree.expressions) >= 2:
        dropped = tree.copy()
        dropped.set("expressions", dropped.expressions[:-1])
        out.append(dropped.sql(dialect="sqlite"))
    other = next((o.gold_sql for o in samples[i + 1:] + samples[:i]
                  if o.db_path == s.db_path and o.gold_sql != s.gold_sql), None)
    if other is not None:
        out.append(other)
    if "limit" not in s.gold_sql.lower():
        out.append(s.gold_sql.rstrip("; ") + " LIMIT 1000")
    out.append("SELECT * FROM " + sorted(read_schema(s.db_path))[0])
    return out


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def _direct_reference(pred_sql: str, gold_sql: str, db_path: str) -> dict:
    """Cells, columns, components and retrieval computed the old way: each scorer called on the raw SQL
    strings outside any shared analysis (each one parses and qualifies on its own)."""
    assert active_memo() is None
    box = get_sandbox(db_path)
    pred, gold = box.execute(pred_sql), box.execute(gold_sql)
    schema = box.schema
    out: dict = {}
    if pred.ok:
        def origins(sql):
            try:
                return column_origins(sql, schema)
            except SQLParseError:
                return None
        cs = score_cells(ResultTable(pred.columns, pred.rows, origins(pred_sql)),
                         ResultTable(gold.columns, gold.rows, origins(gold_sql)))
        out.update(cell_precision=cs.cell_precision, column_precision=cs.column_precision,
                   column_recall=cs.column_recall)
        if cs.cell_recall is not None:
            out["cell_recall"] = cs.cell_recall
    try:
        out["components"] = score_components(pred_sql, gold_sql, schema)
    except SQLParseError:
        out["components"] = None
    rs = score_retrieval(tables_read(gold_sql), schema.keys())
    out.update(table_recall=rs.recall, table_precision=rs.precision, spurious_tables=rs.spurious)
    return out


@pytest.mark.realdata
def test_detailed_step_components_equal_the_scorers_called_directly(spider_samples):
    env = TextSQLClarifyEnv(samples=spider_samples, detailed_scores=True)
    checked = wrong = 0
    for i, s in enumerate(spider_samples):
        for pred_sql in _variants(i, spider_samples):
            env.reset(options={"index": i})
            comps = env.step(f"<sql>{pred_sql}</sql>")[4]["reward_components"]
            # the whole turn the old way: the same scoring with no shared analysis (every scorer parses alone)
            box = get_sandbox(s.db_path)
            old = scoring._score_sql_turn(pred_sql, s.gold_sql, box, gold_key=s.id, detailed=True,
                                          offered_tables=None, ex_options=env.ex_options, gold_withheld=False,
                                          other_readings=())
            for k, v in old.components.items():
                assert _same(comps[k], v), (s.id, pred_sql, k, comps[k], v)
            if old.gold_status != "ok":
                continue
            for k, v in _direct_reference(pred_sql, s.gold_sql, s.db_path).items():
                assert _same(comps[k], v), (s.id, pred_sql, k, comps[k], v)
            checked += 1
            wrong += comps["ex"] != 1.0
    # real values: most golds score, and the wrong predictions really are wrong
    assert checked >= 3 * N_SPIDER
    assert wrong >= N_SPIDER


@pytest.mark.realdata
def test_exactly_one_parse_of_the_prediction_per_detailed_step(spider_samples, monkeypatch):
    env = TextSQLClarifyEnv(samples=spider_samples, detailed_scores=True)
    counts: dict[str, int] = {}
    real = schema_mod.parse_sql

    def counting(sql):
        counts[sql] = counts.get(sql, 0) + 1
        return real(sql)

    monkeypatch.setattr(schema_mod, "parse_sql", counting)
    steps = 0
    for i, s in enumerate(spider_samples[:60]):
        for k, pred_sql in enumerate(_variants(i, spider_samples)):
            # a text no earlier step saw (more spaces after the first word), so no cache across steps answers
            head, _, rest = pred_sql.partition(" ")
            fresh = head + " " * (k + 2 + 7 * i) + rest
            env.reset(options={"index": i})
            counts.clear()
            comps = env.step(f"<sql>{fresh}</sql>")[4]["reward_components"]
            if comps["cell_f1"] is None and comps["components"] is None:
                continue  # the gold could not be scored: no detailed family ran
            assert counts.get(fresh) == 1, (s.id, fresh, counts.get(fresh))
            # the same text again, on the same database: its kept analysis answers, no parse at all, same scores
            env.reset(options={"index": i})
            counts.clear()
            again = env.step(f"<sql>{fresh}</sql>")[4]["reward_components"]
            assert counts.get(fresh) is None, (s.id, fresh, counts.get(fresh))
            assert all(_same(again[k], v) for k, v in comps.items()), (s.id, fresh)
            steps += 1
    assert steps >= 150


def _db(path, ddl: str, rows: str):
    import sqlite3

    con = sqlite3.connect(path)
    con.executescript(ddl + rows)
    con.commit()
    con.close()
    return str(path)


def test_kept_analysis_never_crosses_databases(tmp_path):
    """One SQL text on two databases whose ``t`` differs: each step gets its own database's analysis, in any
    order and however often; and on one path, a schema with another fingerprint gets its own too."""
    a = _db(tmp_path / "a.sqlite", "CREATE TABLE t (name TEXT, age INT);", "INSERT INTO t VALUES ('x', 3), ('y', 4);")
    b = _db(tmp_path / "b.sqlite", "CREATE TABLE t (city TEXT);", "INSERT INTO t VALUES ('p'), ('q');")
    sql = "SELECT * FROM t"
    box_a, box_b = get_sandbox(a), get_sandbox(b)
    for _ in range(2):
        for box, want in ((box_a, ("t.name", "t.age")), (box_b, ("t.city",)), (box_a, ("t.name", "t.age"))):
            with shared_analysis(sql, box.db_path, box.schema):
                assert column_origins(sql, box.schema) == want
            gold = "SELECT name FROM t" if box is box_a else "SELECT city FROM t"
            res = scoring.score_sql_turn(sql, gold, box, gold_key=f"k{box.db_path}", detailed=True)
            old = scoring._score_sql_turn(sql, gold, box, gold_key=f"k{box.db_path}", detailed=True,
                                          offered_tables=None, ex_options=None, gold_withheld=False,
                                          other_readings=())
            assert res.components == old.components
            # a's two columns against one gold column; b's one column is the gold's
            assert res.components["column_precision"] == (0.5 if box is box_a else 1.0), res.components
    # the same path, another schema (a file replaced between runs): another key, another answer
    other = {"t": {"zip": "TEXT"}}
    with shared_analysis(sql, box_a.db_path, other):
        assert column_origins(sql, other) == ("t.zip",)
    with shared_analysis(sql, box_a.db_path, box_a.schema):
        assert column_origins(sql, box_a.schema) == ("t.name", "t.age")


def test_kept_analyses_are_bounded_and_can_be_dropped(monkeypatch):
    schema = {"singer": {"name": "TEXT", "age": "INT"}}
    schema_mod.clear_analysis_cache()
    monkeypatch.setattr(schema_mod, "ANALYSIS_CACHE_SIZE", 3)
    texts = [f"SELECT name FROM singer WHERE age > {k}" for k in range(5)]
    for sql in texts:
        with shared_analysis(sql, "db", schema):
            parse_for_analysis(sql)
    kept = list(schema_mod._CROSS_STEP)
    assert [k[0] for k in kept] == texts[2:]  # the least recently used went first
    with shared_analysis(texts[2], "db", schema) as memo:
        assert memo.calls == {"parse": 1}  # kept from its first step: nothing parsed again
        parse_for_analysis(texts[2])
        assert memo.calls == {"parse": 1}
    assert [k[0] for k in schema_mod._CROSS_STEP][-1] == texts[2]
    monkeypatch.setattr(schema_mod, "ANALYSIS_CACHE_SIZE", 0)  # off: a fresh memo per step
    with shared_analysis(texts[3], "db", schema) as memo:
        assert memo.calls == {}
    schema_mod.clear_analysis_cache()
    assert not schema_mod._CROSS_STEP


def test_an_error_kept_across_steps_does_not_grow_its_traceback():
    bad = "SELEC name FROM singer"
    tb_lengths = []
    for _ in range(5):
        with shared_analysis(bad, "db", {"singer": {"name": "TEXT"}}):
            with pytest.raises(SQLParseError, match="parse error") as info:
                parse_for_analysis(bad)
        n, tb = 0, info.value.__traceback__
        while tb is not None:
            n, tb = n + 1, tb.tb_next
        tb_lengths.append(n)
    assert tb_lengths[1:] == tb_lengths[1:2] * 4, tb_lengths


def test_without_the_shared_scope_each_scorer_parses_alone(monkeypatch):
    sql = "SELECT T1.name FROM singer AS T1 JOIN concert AS T2 ON T1.id = T2.singer_id WHERE T2.year > 2014"
    schema = {"singer": {"id": "INT", "name": "TEXT"}, "concert": {"singer_id": "INT", "year": "INT"}}
    counts = []
    real = schema_mod.parse_sql
    monkeypatch.setattr(schema_mod, "parse_sql", lambda s: counts.append(s) or real(s))
    origins = column_origins(sql, schema)
    component_sets(sql, schema)
    assert len(counts) == 2 and origins == ("singer.name",)
    counts.clear()
    with shared_analysis() as memo:
        assert column_origins(sql, schema) == origins
        sets = component_sets(sql, schema)
        commitment_set(sql, schema)
        assert component_sets(sql, schema) == sets
    assert len(counts) == 1
    assert memo.calls["parse"] == 1 and memo.calls["qualify"] == 1 and memo.calls["prepare"] == 1
    assert sets["tables"] == {"singer", "concert"}
    assert active_memo() is None


def test_shared_results_are_copies_and_errors_repeat():
    sql = "SELECT name FROM singer WHERE age > 30"
    schema = {"singer": {"name": "TEXT", "age": "INT"}}
    with shared_analysis() as memo:
        a = parse_for_analysis(sql)
        a.set("where", None)  # the caller may mutate what it got
        assert parse_for_analysis(sql).args.get("where") is not None
        p = prepare_sql(sql, schema)
        p.tree.set("where", None)
        assert prepare_sql(sql, schema).tree.args.get("where") is not None
        q = qualified_for_analysis(sql, schema)
        assert q is qualified_for_analysis(sql, schema)  # shared, read only
        with shared_analysis() as inner:
            assert inner is memo  # nested use joins the open scope
        for _ in range(2):
            with pytest.raises(SQLParseError, match="parse error"):
                parse_for_analysis("SELEC name FROM")
        assert memo.calls["parse"] == 2
    assert active_memo() is None


def test_schema_object_built_once_per_database_schema():
    s1 = {"singer": {"name": "TEXT", "age": "INT"}}
    s2 = {"singer": {"name": "TEXT", "age": "INT"}}
    assert mapping_schema(s1) is mapping_schema(s2)
    assert mapping_schema({"singer": {"age": "INT", "name": "TEXT"}}) is not mapping_schema(s1)  # order counts
    assert mapping_schema(None) is None and mapping_schema({}) is None
    assert mapping_schema(mapping_schema(s1)) is mapping_schema(s1)


def test_drift_step_commitments_equal_the_functions_called_directly(tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTSQL_CLARIFY_CACHE", str(tmp_path))
    samples = [s for s in load_dataset("embedded") if s.drift is not None]
    assert samples
    env = TextSQLClarifyEnv(samples=samples, detailed_scores=True)
    seen = 0
    for i, s in enumerate(samples):
        schema = get_sandbox(s.db_path).schema
        for pre, post in ((s.gold_sql, s.drift.post_gold_sql), (s.gold_sql, s.gold_sql),
                          (s.drift.post_gold_sql, s.drift.post_gold_sql)):
            env.reset(options={"index": i})
            env.step(f"<sql>{pre}</sql>")
            info = env.step(f"<sql>{post}</sql>")[4]
            comps = info["reward_components"]
            rev = drift_revision(s.gold_sql, s.drift.post_gold_sql, pre, post, subtype=s.drift.subtype,
                                 schema=schema)
            assert comps["drift_revised"] == float(rev.revised), (s.id, pre, post)
            assert env._traj.turns[-1].commitment_drift == is_drift(pre, post), (s.id, pre, post)
            seen += 1
    assert seen == 3 * len(samples)
