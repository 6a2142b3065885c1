"""Table retrieval scores (textsql_clarify.rewards.retrieval): the article's worked example and Spider dev.

The article is ``../shared/reference/002_*.txt`` ("Retrieval: did the agent have the tables?").
"""
from __future__ import annotations

import json
import re

import pytest

from textsql_clarify.errors import SQLParseError
from textsql_clarify.rewards.retrieval import RetrievalScores, score_retrieval, tables_read
from textsql_clarify.sql.schema import read_schema

ARTICLE_GOLD = (
    "SELECT c.name, SUM(l.quantity * l.price) AS revenue FROM orders o "
    "JOIN order_lines l ON l.order_id = o.order_id JOIN customers c ON c.customer_id = o.customer_id "
    "GROUP BY c.name")


def test_article_retrieval_example():
    required = tables_read(ARTICLE_GOLD)
    assert required == {"orders", "order_lines", "customers"}
    offered = ["orders", "customers", "products", "invoices", "suppliers"]  # five tables, no order_lines
    s = score_retrieval(required, offered)
    assert s.recall == pytest.approx(2 / 3)
    assert s.precision == pytest.approx(2 / 5)
    assert s.spurious == 3
    assert s.required == frozenset(required) and s.offered == frozenset(offered)


def test_names_are_case_insensitive_and_deduplicated():
    s = score_retrieval(["Orders", "orders "], ["ORDERS", "orders", "Customers"])
    assert s == RetrievalScores(recall=1.0, precision=0.5, spurious=1,
                                required=frozenset({"orders"}), offered=frozenset({"orders", "customers"}))


def test_empty_sides_are_undefined_not_zero():
    nothing_offered = score_retrieval(["orders"], [])
    assert nothing_offered.recall == 0.0 and nothing_offered.precision is None and nothing_offered.spurious == 0
    nothing_required = score_retrieval([], ["orders", "customers"])
    assert nothing_required.recall is None and nothing_required.precision == 0.0
    assert nothing_required.spurious == 2
    both = score_retrieval([], [])
    assert both.recall is None and both.precision is None


def test_bad_arguments_raise_typed_errors():
    with pytest.raises(TypeError, match="single str"):
        score_retrieval("orders", ["orders"])
    with pytest.raises(TypeError, match=r"offered\[1\]"):
        score_retrieval(["orders"], ["orders", None])
    with pytest.raises(TypeError, match=r"required\[0\]"):
        score_retrieval([""], [])


def test_tables_read_scopes_ctes_and_subqueries():
    assert tables_read("WITH big AS (SELECT * FROM orders WHERE amount > 9) SELECT * FROM big") == {"orders"}
    # a CTE that shadows a real table name is not the table
    assert tables_read("WITH orders AS (SELECT * FROM customers) SELECT * FROM orders") == {"customers"}
    assert tables_read("SELECT name FROM Singer WHERE id IN (SELECT singer_id FROM concert) "
                       "EXCEPT SELECT name FROM main.Artist") == {"singer", "concert", "artist"}
    assert tables_read("SELECT x.n FROM (SELECT count(*) AS n FROM stadium) AS x") == {"stadium"}
    assert tables_read("SELECT 1") == frozenset()


def test_tables_read_errors():
    schema = {"singer": {"name": "TEXT"}}
    assert tables_read("SELECT name FROM SINGER", schema) == {"singer"}
    with pytest.raises(SQLParseError, match="not in the schema: concert"):
        tables_read("SELECT name FROM singer JOIN concert", schema)
    with pytest.raises(SQLParseError):
        tables_read("SELECT FROM WHERE")
    with pytest.raises(SQLParseError):
        tables_read("")
    # sqlglot's own failures are typed too, and a query too big to analyse is refused before parsing
    assert tables_read("SELECT * FROM singer ORDER BY 1") == {"singer"}
    with pytest.raises(SQLParseError, match="too long to analyse"):
        tables_read("SELECT 1 FROM singer WHERE " + "s.a = 1 OR " * 2000 + "1 = 1")
    with pytest.raises(SQLParseError, match="nested too deeply to analyse"):
        tables_read("SELECT 1 FROM singer WHERE " + " OR ".join(f"a = {i}" for i in range(200)))


def _spider_tables(sql: dict, names: list[str]) -> set[str]:
    """Tables Spider's own parse (dev.json ``sql``) lists, through nested queries."""
    out: set[str] = set()

    def walk(node):
        if isinstance(node, dict):
            if "from" in node and "select" in node:
                for kind, unit in node["from"]["table_units"]:
                    if kind == "table_unit":
                        out.add(names[unit].lower())
            for value in node.values():
                walk(value)
        elif isinstance(node, (list, tuple)):
            for value in node:
                walk(value)

    walk(sql)
    return out


@pytest.mark.realdata
def test_spider_dev_gold_tables_agree_with_spiders_parse(spider_root):
    dev = json.loads((spider_root / "dev.json").read_text())
    tables = {t["db_id"]: t for t in json.loads((spider_root / "tables.json").read_text())}
    differ = 0
    for ex in dev:
        schema = read_schema(str(spider_root / "database" / ex["db_id"] / f"{ex['db_id']}.sqlite"))
        ours = tables_read(ex["query"], schema)
        theirs = _spider_tables(ex["sql"], tables[ex["db_id"]]["table_names_original"])
        assert ours and ours <= set(schema), ex["query"]
        assert theirs <= ours, ex["query"]
        if ours != theirs:
            # Spider's parser keeps only two table units for a three-or-more-table join; every
            # difference is such a query, and the extra tables are joined in the SQL text.
            differ += 1
            assert len(re.findall(r"\bjoin\b", ex["query"], flags=re.I)) >= 2, ex["query"]
            for t in ours - theirs:
                assert re.search(rf"\bjoin\s+{t}\b", ex["query"], flags=re.I), (t, ex["query"])
        # offering the whole database schema: recall 1.0, spurious = the tables not read
        s = score_retrieval(ours, schema)
        assert s.recall == 1.0 and s.spurious == len(schema) - len(ours)
    assert differ == 57  # measured over the 1,034 dev golds
