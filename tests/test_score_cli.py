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
     f"{N - 1} predictions for {N} samples: 1 sample has none ('spider-dev-5')"),
    (lambda g: json.dumps({"id": g[0][0]}) + "\n", "line 1, field 'sql': missing"),
    (lambda g: json.dumps({"id": g[0][0], "sql": "SELECT 1"}) + "\nSELECT 2\n", "line 2: not valid JSON"),
    (lambda g: "\n".join(q for _, q, _ in g[:-1]) + "\n",
     f"{N - 1} queries (one per non-blank line) for {N} samples"),
    (lambda g: "\n".join(q for _, q, _ in g[:-2]) + "\n",
     f"gold order; to score the first {N - 2} samples only, use --limit {N - 2} instead of {N}"),
    (lambda g: "\n".join(q + ("\tpets_1" if i == 2 else "") for i, (_, q, _) in enumerate(g)) + "\n",
     "line 3, field 'db_id': 'pets_1' is not the database of sample 'spider-dev-2'"),
    (lambda g: "\n\n", "holds no prediction; the dataset has 6 samples"),
    # an empty or whitespace-only sql is refused as a null one is, not replayed as a malformed answer
    (lambda g: "".join(json.dumps({"id": s, "sql": "" if i == 2 else q}) + "\n" for i, (s, q, _) in enumerate(g)),
     "line 3, field 'sql': empty"),
    (lambda g: "".join(json.dumps({"id": s, "sql": " \t " if i == 4 else q}) + "\n" for i, (s, q, _) in enumerate(g)),
     "line 5, field 'sql': empty"),
    # a blank line of a line file is skipped, not an empty prediction: the count no longer matches
    (lambda g: "\n".join(q if i != 3 else "  " for i, (_, q, _) in enumerate(g)) + "\n",
     f"{N - 1} queries (one per non-blank line, 1 blank line skipped: a blank line is no prediction) for {N}"),
    (lambda g: g[0][1] + "\n", f"1 query (one per non-blank line) for {N} samples"),
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


def test_a_line_file_longer_than_the_dataset_gets_no_limit_hint(spider_root, golds, tmp_path, capsys):
    preds = tmp_path / "long.txt"
    preds.write_text("\n".join([q for _, q, _ in golds] + [golds[0][1]]) + "\n")
    assert _score(spider_root, preds, tmp_path / "o") == 2
    err = capsys.readouterr().err
    assert f"{N + 1} queries (one per non-blank line) for {N} samples" in err and "--limit" not in err


def test_a_json_array_or_a_pretty_printed_object_is_named_as_such(spider_root, golds, tmp_path, capsys):
    records = [{"id": sid, "sql": sql} for sid, sql, _ in golds]
    array = tmp_path / "preds.json"
    array.write_text(json.dumps(records, indent=1) + "\n")
    assert _score(spider_root, array, tmp_path / "a") == 2
    err = capsys.readouterr().err
    assert (f"{array} looks like a JSON array; write one JSON object per line (JSONL: "
            '{"id": ..., "sql": ...})') in err
    assert "queries" not in err and "--limit" not in err and not (tmp_path / "a").exists()
    pretty = tmp_path / "pretty.jsonl"
    pretty.write_text("".join(json.dumps(r, indent=2) + "\n" for r in records))  # 4 lines each
    assert _score(spider_root, pretty, tmp_path / "p") == 2
    err = capsys.readouterr().err
    assert f"{pretty} looks like one JSON object spanning lines 1-4; write one JSON object per line" in err


def test_a_json_error_names_its_column_once(spider_root, golds, tmp_path, capsys):
    preds = tmp_path / "cut.jsonl"
    line = json.dumps({"id": golds[0][0], "sql": golds[0][1]})[:-10]  # the sql string cut before its quote
    preds.write_text(line + "\n")
    assert _score(spider_root, preds, tmp_path / "o") == 2
    err = capsys.readouterr().err
    column = line.index('"SELECT') + 1  # 1-based column of the string's opening quote
    assert f"{preds}, line 1: not valid JSON (Unterminated string starting at: column {column})" in err
    assert "at at" not in err


def test_the_limit_hint_without_a_limit_says_add(tmp_path, capsys):
    from textsql_clarify.datasets import load_dataset

    samples = load_dataset("embedded")
    preds = tmp_path / "two.txt"
    preds.write_text("".join(s.gold_sql + "\n" for s in samples[:2]))
    assert main(["score", "--dataset", "embedded", "--predictions", str(preds), "--out", str(tmp_path / "o"),
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"2 queries (one per non-blank line) for {len(samples)} samples" in err
    assert err.rstrip().endswith("to score the first 2 samples only, add --limit 2")


def test_unreadable_predictions_are_named_by_sample_id(spider_root, golds, tmp_path, capsys):
    preds = tmp_path / "p.jsonl"
    assert all(q.startswith("SELECT") for _, q, _ in golds)
    # "SELEC ...": neither the exact-match parser nor SQLite reads it; every sample's a miss
    preds.write_text("".join(json.dumps({"id": s, "sql": "SELEC" + q[6:] if i in (1, 4) else q}) + "\n"
                             for i, (s, q, _) in enumerate(golds)))
    assert _score(spider_root, preds, tmp_path / "two") == 0
    out = capsys.readouterr().out.splitlines()
    k = out.index("2 predictions unreadable (scored as misses; see their turns in trajectories.jsonl):")
    assert out[k + 1] == "  spider-dev-1, spider-dev-4"
    metrics = json.loads((tmp_path / "two" / "metrics.json").read_text())
    assert metrics["exact_match"]["pred_unreadable"] == 2
    assert metrics["exact_match"]["pred_unreadable_ids"] == ["spider-dev-1", "spider-dev-4"]
    trajs = {t["sample_id"]: t for t in map(json.loads, (tmp_path / "two" / "trajectories.jsonl").read_text().split("\n")[:-1])}
    assert trajs["spider-dev-4"]["turns"][0]["content"].startswith("SELEC ")  # where the message points
    # all six unreadable: five named, then the count of the rest
    preds.write_text("".join(json.dumps({"id": s, "sql": "SELEC" + q[6:]}) + "\n" for s, q, _ in golds))
    assert _score(spider_root, preds, tmp_path / "six") == 0
    out = capsys.readouterr().out.splitlines()
    k = out.index("6 predictions unreadable (scored as misses; see their turns in trajectories.jsonl):")
    assert out[k + 1] == "  " + ", ".join(s for s, _, _ in golds[:5]) + " and 1 more"
    # one: singular
    preds.write_text("".join(json.dumps({"id": s, "sql": "SELEC" + q[6:] if i == 0 else q}) + "\n"
                             for i, (s, q, _) in enumerate(golds)))
    assert _score(spider_root, preds, tmp_path / "one") == 0
    out = capsys.readouterr().out.splitlines()
    assert "1 prediction unreadable (scored as a miss; see its turn in trajectories.jsonl):" in out


def test_score_predictions_refuses_an_empty_prediction(spider_root, golds):
    from textsql_clarify.baselines.predictions import PredictionsError, score_predictions
    from textsql_clarify.datasets import load_dataset

    samples = load_dataset(f"spider:{spider_root}", limit=N)
    preds = {s.id: s.gold_sql for s in samples}
    preds[golds[3][0]] = "  "
    with pytest.raises(PredictionsError, match="1 sample has an empty prediction, e.g. 'spider-dev-3'"):
        score_predictions(samples, preds, progress=False)


def _section(lines, title):
    """The table whose header line starts with ``title``: its lines up to the next blank one."""
    start = next(k for k, ln in enumerate(lines) if ln.startswith(title))
    end = next((k for k in range(start, len(lines)) if not lines[k]), len(lines))
    return lines[start:end]


def _score_twenty(spider_root, tmp_path):
    """Score the first twenty Spider dev golds, every third replaced by ``SELECT 1``, from ``h2pred.sql`` into
    ``tmp_path / "o"``; returns (n, the number replaced)."""
    n = 20
    dev = json.loads((spider_root / "dev.json").read_text())[:n]
    preds = tmp_path / "h2pred.sql"
    preds.write_text("".join(("SELECT 1" if i % 3 == 0 else r["query"]) + "\t" + r["db_id"] + "\n"
                             for i, r in enumerate(dev)))
    assert main(["score", "--dataset", f"spider:{spider_root}", "--limit", str(n), "--predictions", str(preds),
                 "--out", str(tmp_path / "o"), "--no-progress"]) == 0
    return n, sum(1 for i in range(n) if i % 3 == 0)  # 7 SELECT 1: EM misses (values ignored, components differ)


def test_score_prints_no_agent_behaviour_and_em_tables_in_eval_format(spider_root, tmp_path, capsys):
    """Twenty Spider dev golds, every third replaced by ``SELECT 1``: the printed tables leave out what one SQL
    turn per episode cannot measure (named in one line), metrics.json keeps it, and the exact-match tables have
    the dashed rule and no trailing spaces of eval's tables."""
    n, wrong = _score_twenty(spider_root, tmp_path)
    lines = capsys.readouterr().out.splitlines()
    metrics = json.loads((tmp_path / "o" / "metrics.json").read_text())
    skipped = ("AR", "DEC", "DEC_bacc", "format_valid_rate", "turns", "table_recall", "table_precision",
               "spurious_tables")
    # metrics.json keeps every one (AR 0 over 20 episodes: the replay never asks)
    assert all(metrics["overall"][m]["n"] > 0 for m in skipped)
    assert metrics["overall"]["AR"] == {"value": 0.0, "n": n, "ci95": [0.0, 0.0]}
    note = " ".join(ln.strip() for ln in lines[:lines.index("")] if not ln.startswith(("dataset=", "Aggregated",
                                                                                         "95% CI")))
    assert note.startswith("left out (a predictions file is one SQL turn per episode")
    assert note.endswith(", ".join(skipped) + "; outcomes feedback, budget_spent, malformed, truncated, turns, "
                                              "clarifications")
    words = {w for ln in lines[lines.index(""):] for w in ln.split()}
    assert not set(skipped) & words  # no row, no column
    assert not {"decision", "agent", "feedback", "budget", "clarif.", "truncated", "malformed"} & words
    headline = _section(lines, "headline ")
    assert [ln.split()[0] for ln in headline[2:]] == ["EX", "DEA", "cell_f1"]
    ex = metrics["overall"]["EX"]
    assert headline[2].split()[1] == f"{ex['value']:.3f}" and headline[2].split()[-1] == str(ex["n"])
    assert _section(lines, "outcome ")[2:] == [_section(lines, "outcome ")[2]]  # sql alone
    assert _section(lines, "outcome ")[2].split()[-2:] == [str(n), str(n)]
    assert _section(lines, "group: outcomes")[0].split() == ["group:", "outcomes", "N", "sql"]
    assert _section(lines, "group ")[0].split() == ["group", "N", "EX", "DEA", "EX_strict"]
    # the exact-match tables: a dashed rule under each header, no trailing spaces
    em = _section(lines, "component ")
    assert em[0].split() == ["component", "value", "95%", "CI", "n"]
    assert set(em[1]) == {"-", " "} and len(em[1]) == len(max(em, key=len))
    assert em[2].split()[0] == "EM" and em[2].split()[1] == f"{(n - wrong) / n:.3f}" and em[2].split()[-1] == str(n)
    diff = _section(lines, "difficulty ")
    assert diff[0].split() == ["difficulty", "EM", "EX"] and set(diff[1]) == {"-", " "}
    assert diff[2].split()[:3] == ["overall", f"{(n - wrong) / n:.3f}", f"(n={n})"]
    assert [ln.split()[0] for ln in diff[3:3 + len(metrics["by_difficulty"])]] == list(metrics["by_difficulty"])
    assert not [ln for ln in lines if ln != ln.rstrip()]


def test_report_names_a_score_run_by_its_file_stem_with_an_em_column(spider_root, tmp_path, capsys):
    n, wrong = _score_twenty(spider_root, tmp_path)
    capsys.readouterr()
    metrics = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert main(["report", str(tmp_path / "o"), "--format", "md"]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = lines[lines.index("## Leaderboard") + 2]
    cols = [c.strip() for c in head.strip("|").split("|")]
    assert cols[:4] == ["run", "episodes", "EX", "EM"]
    row = [c.strip() for c in lines[lines.index("## Leaderboard") + 4].strip("|").split("|")]
    em = metrics["overall"]["EM"]
    assert row[0] == "h2pred" and row[1] == str(n)
    assert row[3] == f"{em['value']:.3f} [{em['ci95'][0]:.3f}, {em['ci95'][1]:.3f}] n={em['n']}"
    assert em["value"] == (n - wrong) / n
    by_group = next(ln for ln in lines if ln.startswith("| answerable | h2pred |"))
    assert f"{em['value']:.3f}" in by_group  # all twenty are answerable: the group row is the overall one


def test_score_predictions_holds_the_folder_lock_while_it_writes_exact_match(spider_root, golds, tmp_path, monkeypatch):
    """The Python API, not only the CLI, keeps one lock over the replay and EM's rewrite of metrics.json: another
    thread that tries the folder at the moment EM is added is refused."""
    import threading

    from textsql_clarify.baselines import predictions as mod
    from textsql_clarify.baselines.run_journal import RunFolderError, exclusive_folder
    from textsql_clarify.datasets import load_dataset

    samples = load_dataset(f"spider:{spider_root}")[:N]
    preds = {sid: sql for sid, sql, _ in golds}
    seen: list[str] = []
    real = mod.add_exact_match

    def probing(metrics, trajs, samples_, predictions_):
        def other():
            try:
                with exclusive_folder(tmp_path / "run"):
                    seen.append("entered")
            except RunFolderError:
                seen.append("refused")
        t = threading.Thread(target=other)
        t.start()
        t.join()
        return real(metrics, trajs, samples_, predictions_)

    monkeypatch.setattr(mod, "add_exact_match", probing)
    _, metrics = mod.score_predictions(samples, preds, out_dir=tmp_path / "run", progress=False)
    assert seen == ["refused"]
    written = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert written["overall"]["EM"]["value"] == metrics["overall"]["EM"]["value"] == 1.0  # six golds, each itself


def test_a_missing_predictions_file_is_named_with_its_formats(spider_root, tmp_path, capsys):
    assert _score(spider_root, tmp_path / "predicted.txt", tmp_path / "run") == 2
    err = capsys.readouterr().err
    assert "predicted.txt" in err and "no such predictions file" in err and "one query per line" in err


def test_jsonl_predicting_the_first_samples_suggests_limit(spider_root, golds, tmp_path, capsys):
    preds = tmp_path / "p.jsonl"
    preds.write_text("".join(json.dumps({"id": sid, "sql": sql}) + "\n" for sid, sql, _ in golds[:4]), encoding="utf-8")
    assert _score(spider_root, preds, tmp_path / "run") == 2
    err = capsys.readouterr().err
    assert f"4 predictions for {N} samples" in err and f"use --limit 4 instead of {N}" in err
    # ids that are not the first ones: no --limit would help, so no hint
    preds.write_text("".join(json.dumps({"id": sid, "sql": sql}) + "\n" for sid, sql, _ in golds[1:5]), encoding="utf-8")
    assert _score(spider_root, preds, tmp_path / "run2") == 2
    assert "--limit" not in capsys.readouterr().err
