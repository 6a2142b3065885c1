"""``textsql-clarify score``: a predictions file (JSONL or one query per line) scored through the env, on real
Spider dev samples, with exact-set-match; bad files are refused with the file and line named."""
from __future__ import annotations

import json

import pytest

from textsql_clarify.cli import main

N = 6  # the first six Spider dev samples (concert_singer)


@pytest.fixture
def golds(spider_root):
    dev = json.loads((spider_root / "dev.json").read_text())[:N]
    return [(f"spider-dev-{i}", r["query"], r["db_id"]) for i, r in enumerate(dev)]


def _score(spider_root, preds, out, *extra):
    return main(["score", "--dataset", f"spider:{spider_root}", "--limit", str(N), "--predictions", str(preds),
                 "--out", str(out), "--no-progress", *extra])


def _changed(sql: str) -> str:
    """Sample 5's gold with its WHERE value changed: same components, other rows."""
    assert "'France'" in sql
    return sql.replace("'France'", "'Nowhere'")


def test_jsonl_predictions_score_exactly_as_eval_does(spider_root, golds, tmp_path, capsys):
    preds = tmp_path / "preds.jsonl"
    preds.write_text("".join(json.dumps({"id": sid, "sql": _changed(sql) if sid == "spider-dev-5" else sql}) + "\n"
                             for sid, sql, _ in golds))
    assert _score(spider_root, preds, tmp_path / "score") == 0
    out = capsys.readouterr().out
    assert "Exact-set-match" in out and "EM" in out
    metrics = json.loads((tmp_path / "score" / "metrics.json").read_text())
    trajs = [json.loads(x) for x in (tmp_path / "score" / "trajectories.jsonl").read_text().splitlines()]
    run = json.loads((tmp_path / "score" / "run.json").read_text())
    assert [t["sample_id"] for t in trajs] == [sid for sid, _, _ in golds]
    assert run["agent"].startswith("predictions:preds@") and run["privileged"] is False
    ex = {t["sample_id"]: t["scores"]["ex"] for t in trajs}
    assert ex["spider-dev-5"] == 0.0 and all(v == 1.0 for k, v in ex.items() if k != "spider-dev-5")
    # the same numbers eval gives the oracle on the golds, but for the one changed prediction
    assert main(["eval", "--dataset", f"spider:{spider_root}", "--limit", str(N), "--out", str(tmp_path / "eval"),
                 "--no-progress"]) == 0
    oracle = [json.loads(x) for x in (tmp_path / "eval" / "trajectories.jsonl").read_text().splitlines()]
    for t, o in zip(trajs, oracle):
        if t["sample_id"] != "spider-dev-5":
            assert {k: t["scores"][k] for k in ("ex", "ex_strict")} == {k: o["scores"][k] for k in ("ex", "ex_strict")}
    n = metrics["overall"]["EX"]["n"]
    assert metrics["overall"]["EX"]["value"] == pytest.approx((n - 1) / n)
    # EM ignores the value: all six match, with n and an interval
    assert metrics["overall"]["EM"] == {"value": 1.0, "n": N, "ci95": [1.0, 1.0]}
    assert set(metrics["exact_match"]["components"]) >= {"select", "where(no OP)", "IUEN", "keywords"}
    assert metrics["by_difficulty"]["easy"]["metrics"]["EM"]["n"] >= 1


def test_the_line_format_in_gold_order_gives_the_same_metrics(spider_root, golds, tmp_path, capsys):
    preds = [_changed(sql) if sid == "spider-dev-5" else sql for sid, sql, _ in golds]
    jsonl = tmp_path / "a.jsonl"
    jsonl.write_text("".join(json.dumps({"id": sid, "sql": p}) + "\n" for (sid, _, _), p in zip(golds, preds)))
    lines = tmp_path / "a.txt"  # Spider's predicted.txt; a line may carry "\t<db_id>" and blank lines are skipped
    lines.write_text("\n".join(p + ("\t" + golds[0][2] if i == 0 else "") for i, p in enumerate(preds)) + "\n\n")
    assert _score(spider_root, jsonl, tmp_path / "j") == 0
    assert _score(spider_root, lines, tmp_path / "l") == 0
    capsys.readouterr()
    a = json.loads((tmp_path / "j" / "metrics.json").read_text())
    b = json.loads((tmp_path / "l" / "metrics.json").read_text())
    assert a == b
    assert (tmp_path / "j" / "trajectories.jsonl").read_text() == (tmp_path / "l" / "trajectories.jsonl").read_text()


def test_a_wrong_aggregate_is_an_em_miss_on_its_component(spider_root, golds, tmp_path, capsys):
    preds = tmp_path / "p.txt"
    body = [sql for _, sql, _ in golds]
    assert "avg(age)" in body[5]
    body[5] = body[5].replace("avg(age)", "sum(age)")
    preds.write_text("\n".join(body) + "\n")
    assert _score(spider_root, preds, tmp_path / "o", "--json") == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["overall"]["EM"]["value"] == pytest.approx((N - 1) / N)
    comps = metrics["exact_match"]["components"]
    assert comps["select"]["value"] == pytest.approx((N - 1) / N) and comps["select(no AGG)"]["value"] == 1.0


@pytest.mark.parametrize("content, message", [
    (lambda g: "".join(json.dumps({"id": s, "sql": q}) + "\n" for s, q, _ in g[:-1])
     + json.dumps({"id": "spider-dev-999", "sql": "SELECT 1"}) + "\n",
     f"line {N}, field 'id': unknown sample id 'spider-dev-999'"),
    (lambda g: "".join(json.dumps({"id": s, "sql": q}) + "\n" for s, q, _ in g)
     + json.dumps({"id": g[0][0], "sql": "SELECT 1"}) + "\n",
     f"line {N + 1}, field 'id': sample id 'spider-dev-0' repeated (first on line 1)"),
    (lambda g: "".join(json.dumps({"id": s, "sql": q}) + "\n" for s, q, _ in g[:-1]),
     f"{N - 1} predictions for {N} samples: 1 sample(s) have none ('spider-dev-5')"),
    (lambda g: json.dumps({"id": g[0][0]}) + "\n", "line 1, field 'sql': missing"),
    (lambda g: json.dumps({"id": g[0][0], "sql": "SELECT 1"}) + "\nSELECT 2\n", "line 2: not valid JSON"),
    (lambda g: "\n".join(q for _, q, _ in g[:-1]) + "\n",
     f"{N - 1} queries (one per non-blank line) for {N} samples"),
    (lambda g: "\n".join(q + ("\tpets_1" if i == 2 else "") for i, (_, q, _) in enumerate(g)) + "\n",
     "line 3, field 'db_id': 'pets_1' is not the database of sample 'spider-dev-2'"),
    (lambda g: "\n\n", "holds no prediction; the dataset has 6 samples"),
])
def test_a_bad_predictions_file_is_refused_naming_file_and_line(spider_root, golds, tmp_path, capsys, content, message):
    preds = tmp_path / "bad.jsonl"
    preds.write_text(content(golds))
    assert _score(spider_root, preds, tmp_path / "o") == 2
    err = capsys.readouterr().err
    assert f"error: {preds}" in err and message in err
    assert not (tmp_path / "o").exists()  # refused before any episode


def test_suite_mode_adds_test_suite_ex_beside_em(spider_root, golds, tmp_path, capsys):
    preds = tmp_path / "p.txt"
    preds.write_text("\n".join(_changed(q) if s == "spider-dev-5" else q for s, q, _ in golds) + "\n")
    assert _score(spider_root, preds, tmp_path / "o", "--ex-mode", "suite", "--suite-k", "2",
                  "--suite-cache-dir", str(tmp_path / "variants"), "--json") == 0
    overall = json.loads(capsys.readouterr().out)["overall"]
    assert overall["EX_suite"]["n"] == overall["EX"]["n"] == N
    assert overall["EX_suite"]["value"] == pytest.approx((N - 1) / N)  # the changed value fails on the variants too
    assert overall["EM"]["value"] == 1.0 and overall["EM"]["n"] == N


def test_an_interrupted_journal_of_other_predictions_is_refused_and_fresh_rescores(spider_root, golds, tmp_path,
                                                                                    monkeypatch, capsys):
    """A score run cut before its final write leaves its journal; scoring another predictions file into the same
    folder is refused (the predictions' digest is in the configuration), and ``--fresh`` scores the new file."""
    from textsql_clarify.baselines import run_journal

    first, second, out = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "run"
    first.write_text("".join(json.dumps({"id": i, "sql": q}) + "\n" for i, q, _ in golds))
    second.write_text("".join(json.dumps({"id": i, "sql": "SELECT 1"}) + "\n" for i, _, _ in golds))
    monkeypatch.setattr(run_journal, "replace_files", lambda *a, **k: (_ for _ in ()).throw(OSError("disk gone")))
    assert _score(spider_root, first, out) == 2
    monkeypatch.undo()
    capsys.readouterr()
    assert _score(spider_root, second, out) == 2
    assert "another configuration" in capsys.readouterr().err
    assert _score(spider_root, second, out, "--fresh") == 0
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    assert (metrics["overall"]["EM"]["value"], metrics["overall"]["EX"]["value"]) == (0.0, 0.0)


def test_a_byte_order_mark_and_unicode_line_breaks_change_no_score(spider_root, golds, tmp_path, capsys):
    """A JSONL file written with a BOM scores as without one; a line file splits at newlines only, so a U+2028
    inside a string literal stays in its query; a JSON record in a line file is refused, naming the line."""
    plain, bom, out = tmp_path / "p.jsonl", tmp_path / "bom.jsonl", tmp_path / "o"
    body = "".join(json.dumps({"id": i, "sql": q}) + "\n" for i, q, _ in golds)
    plain.write_text(body, encoding="utf-8")
    bom.write_text("\ufeff" + body, encoding="utf-8")
    assert _score(spider_root, plain, out / "a", "--json") == 0
    a = json.loads(capsys.readouterr().out)
    assert _score(spider_root, bom, out / "b", "--json") == 0
    b = json.loads(capsys.readouterr().out)
    assert (b["overall"]["EX"]["value"], b["overall"]["EM"]["value"]) == (a["overall"]["EX"]["value"], 1.0) == (1.0, 1.0)
    lines = [q for _, q, _ in golds]
    lines[0] = lines[0] + " -- a\u2028b"  # a comment holding a Unicode line separator: still line 1
    text = tmp_path / "pred.txt"
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert _score(spider_root, text, out / "c", "--json") == 0
    assert json.loads(capsys.readouterr().out)["overall"]["EX"]["value"] == 1.0
    mixed = tmp_path / "mixed.txt"
    mixed.write_text("\n".join([lines[1], json.dumps({"id": golds[1][0], "sql": lines[1]})] + lines[2:]) + "\n")
    assert _score(spider_root, mixed, out / "d") == 2
    assert "mixed.txt" in capsys.readouterr().err
