"""The self-contained HTML report: one file, no network at view time.

Sections: the runs (what each one was, from ``run.json``), the leaderboard (headline metrics with 95 %
intervals and n) and each run's paired difference from the first run, the outcomes per run, bar charts
per breakdown (inline SVG from :mod:`~textsql_clarify.reports.plots`), the per-category tables, and a
dialogue browser: every trajectory, filterable by run, group, subcategory, outcome and score, showing the
question, each turn (the action, the user's reply with its relevancy label, the SQL, the execution), each turn's
reward components (the headline ones first, the rest folded) and, behind a toggle, what the episode expected: the
gold SQL (and the post-drift gold), the hidden knowledge, the other readings and the sample's flags, read from the
dataset that ``run.json`` names (:mod:`~textsql_clarify.reports.expected`).

Every piece of text from a run (agent output above all) goes through :func:`html.escape`; the page's one
script (:mod:`~textsql_clarify.reports.assets`) never turns data into markup, and its Content-Security-Policy
allows no other script, no inline event handler and no request.
"""
from __future__ import annotations

import html
import math
from typing import Any, Iterable, Sequence

from . import assets
from .leaderboard import (ALPHA, DEFAULT_BY, NOT_APPLICABLE, NOT_SIGNIFICANT, PLOTTED, UNBOUNDED, applies_outcome,
                          category_table, leaderboard, outcome_table)
from .expected import ExpectedSource, expected_sources
from .plots import COLOURS, bar_chart_svg
from .runs import Run

UNDEFINED = "—"
#: the cell of a metric that does not apply to its run (an agent-behaviour metric of a predictions replay).
NOT_APPLICABLE_MARK = "n/a"
_NOT_APPLICABLE_TITLE = "not applicable: a predictions replay (textsql-clarify score) is one SQL turn per episode"
#: per-episode scores the dialogue browser can filter on (``scores`` key -> label), where some episode has them.
SCORE_FILTERS = (("ex", "EX"), ("fb", "FB"), ("ex_post", "EX_post"), ("abstained", "abstained"))
#: the chips shown first, in this order, on a turn's components and an episode's final scores; every other
#: component or score is folded behind a toggle (about 30 per SQL turn would bury these).
HEADLINE_CHIPS = ("reward", "ex", "ex_post", "fb", "decision")


def esc(value: Any) -> str:
    """``value`` as HTML text (``&``, ``<``, ``>``, both quotes escaped; ``None`` -> ``""``)."""
    return "" if value is None else html.escape(str(value), quote=True)


def fmt(v: Any, digits: int = 3) -> str:
    """A number for a table cell (``None`` -> the undefined mark, bools as true/false)."""
    if v is None:
        return UNDEFINED
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return UNDEFINED if not math.isfinite(v) else f"{v:.{digits}f}"
    return str(v)


def _mean_cell(m: dict[str, Any]) -> str:
    if m and m.get("not_applicable"):
        return f'<td class="num undef na" title="{esc(_NOT_APPLICABLE_TITLE)}">{NOT_APPLICABLE_MARK}</td>'
    if not m or not m.get("n") or m.get("value") is None:
        return f'<td class="num undef" title="undefined (n=0)">{UNDEFINED}</td>'
    ci = m.get("ci95")
    ci_txt = f"[{fmt(ci[0])}, {fmt(ci[1])}] " if ci else ""
    return f'<td class="num">{fmt(m["value"])}<span class="sub">{ci_txt}<span class="n">n={esc(m["n"])}</span></span></td>'


def fmt_p(p: float) -> str:
    """A p-value for a cell: three decimals, or two significant digits below 0.001 (``2.9e-11``), so that
    a small exact p is never printed as 0."""
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def _diff_cell(d: dict[str, Any] | None) -> str:
    from ..rewards.paired_test import TEST_LABELS

    if not d or not d.get("n") or d.get("value") is None:
        return f'<td class="num undef" title="no sample defined in both runs">{UNDEFINED}</td>'
    v = d["value"]
    # the label (leaderboard.significance_label): better / worse (coloured) at p < ALPHA by the metric's
    # direction; "n.s. (higher|lower)" above it, uncoloured and marked n.s.; "" (no direction) uncoloured
    verdict = d.get("verdict") or ""
    cls = verdict if verdict in ("better", "worse") else "ns" if verdict else ""
    ci = d.get("ci95")
    ci_txt = f"[{fmt(ci[0], 3)}, {fmt(ci[1], 3)}] " if ci else ""
    p = d.get("p_value")
    label = TEST_LABELS.get(d.get("test"), d.get("test") or "")
    p_txt = f' p={fmt_p(p)} <span class="test">{esc(label)}</span>' if p is not None else ""
    if cls == "ns":
        p_txt += f' <span class="ns">{esc(NOT_SIGNIFICANT)}</span>'
    title = {"better": f"better (the metric's direction, p < {ALPHA})",
             "worse": f"worse (the metric's direction, p < {ALPHA})",
             "ns": f"not significant (p ≥ {ALPHA}): {verdict[len(NOT_SIGNIFICANT):].strip(' ()')} than the reference"}
    title_attr = f' title="{esc(title[cls])}"' if cls else ""
    return (f'<td class="num"><span class="{cls}"{title_attr}>{v:+.3f}</span><span class="sub">{ci_txt}'
            f'<span class="n">n={esc(d["n"])}{p_txt}</span></span></td>')


def _swatch(k: int) -> str:
    return f'<span class="swatch" style="background:{COLOURS[k % len(COLOURS)]}"></span>'


def _runs_section(runs: Sequence[Run]) -> str:
    rows = []
    for k, r in enumerate(runs):
        info = r.info
        priv = " (privileged: sees the gold)" if r.privileged else ""
        rows.append(
            "<tr>" + f"<td>{_swatch(k)}<b>{esc(r.name)}</b>{esc(priv)}</td>"
            + "".join(f"<td>{esc(fmt(info.get(key)) if info.get(key) is not None else UNDEFINED)}</td>"
                      for key in ("dataset", "simulator", "seed", "max_clarifications", "protocol", "isolation",
                                  "backend", "version"))
            + f'<td class="num">{esc(len(r.trajectories))}</td><td title="{esc(r.path)}">{esc(r.path.name)}</td>'
            + f"<td>{esc(r.metrics_source)}</td></tr>")
    head = ("<tr><th>run (agent)</th><th>dataset</th><th>simulator</th><th>seed</th><th>budget</th><th>protocol</th>"
            "<th>isolation</th><th>backend</th><th>version</th><th>episodes</th><th>folder</th><th>metrics</th></tr>")
    return ('<section id="runs"><h2>Runs</h2><div class="scroll"><table>' + head + "".join(rows)
            + '</table></div><p class="note">"metrics": read from the run\'s metrics.json ("file") or recomputed '
              "from its trajectories (an older folder without intervals). Undefined values are shown as "
            + UNDEFINED + ", never 0.</p></section>")


def _leaderboard_section(runs: Sequence[Run], board: dict[str, Any]) -> str:
    """Rows: the headline metrics; columns: each run, and after each run but the first its paired
    difference from the first (so that a few runs fit the page however many metrics are defined)."""
    names = board["metrics"]
    rows = board["rows"]
    head = ["<tr><th>metric</th>"]
    for k, row in enumerate(rows):
        head.append(f'<th class="run-col">{_swatch(k)}{esc(row["run"])}</th>')
        if k > 0:
            head.append(f'<th class="diff-col">Δ {esc(row["run"])} − {esc(board["reference"])}</th>')
    head.append("</tr>")
    body = ['<tr><td>episodes</td>']
    for k, row in enumerate(rows):
        body.append(f'<td class="num">{esc(row["n_trajectories"])}</td>' + ("<td></td>" if k > 0 else ""))
    body.append("</tr>")
    for m in names:
        body.append(f'<tr data-metric="{esc(m)}"><td>{esc(m)}</td>')
        for k, row in enumerate(rows):
            na = row["metrics"][m].get("not_applicable") or rows[0]["metrics"][m].get("not_applicable")
            diff = "" if k == 0 else _mean_cell(NOT_APPLICABLE) if na else _diff_cell(row["diff"][m])
            body.append(_mean_cell(row["metrics"][m]) + diff)
        body.append("</tr>")
    note = ("Each run's cell: its mean, the 95 % bootstrap interval over samples, and n (the samples it is taken "
            "over). Metrics undefined in every run are left out.")
    if any(r.replay for r in runs):
        from ..rewards.report import REPLAY_SKIPPED

        note += (f" A predictions replay (textsql-clarify score) is one SQL turn per episode, so "
                 f"{esc(', '.join(REPLAY_SKIPPED))} describe no agent there: "
                 + ("they are not shown." if all(r.replay for r in runs) else
                    f"its cells read {NOT_APPLICABLE_MARK} and have no Δ."))
    if len(runs) > 1:
        note += (f" Δ: the run minus {esc(board['reference'])} over the samples both runs define (n), with the paired "
                 "bootstrap's 95 % interval (PremiseSQL) and a two-sided p named by its test: exact McNemar for 0/1 "
                 "values, else the paired sign-flip test (exact up to 16 non-zero differences, else Monte Carlo). "
                 f"Green is better and red worse by each metric's direction where p < {ALPHA} (turns: fewer is "
                 "better; AR: fewer asks on answerable samples, more on ambiguous ones, uncoloured over a mix); a "
                 f"difference with p ≥ {ALPHA} is uncoloured and marked {NOT_SIGNIFICANT} (not significant).")
        ref_ids = {t.sample_id for t in runs[0].trajectories}
        for r in runs[1:]:
            ids = {t.sample_id for t in r.trajectories}
            if ids != ref_ids:  # the means side by side are then over different samples
                note += (f" <b>Not the same samples</b>: {esc(r.name)} has {len(ids & ref_ids)} of the "
                         f"{len(ref_ids)} sample ids of {esc(board['reference'])} and {len(ids - ref_ids)} others, so "
                         "its means are not comparable with the reference's; the Δ is "
                         + ("undefined (no shared sample)." if not ids & ref_ids else
                            f"over the {len(ids & ref_ids)} shared ones (n)."))
    return ('<section id="leaderboard"><h2>Leaderboard</h2>' f'<p class="note">{note}</p>'
            '<div class="scroll"><table class="leaderboard">' + "".join(head) + "".join(body) + "</table></div></section>")


def _outcomes_section(runs: Sequence[Run]) -> str:
    from ..rewards.outcomes import OUTCOMES

    # a column that applies to no run (a report of predictions replays only: one SQL turn per episode) is left out
    shown = [o for o in OUTCOMES if any(applies_outcome(r, o) for r in runs)]
    means = [c for c in ("turns", "clarifications") if any(applies_outcome(r, c) for r in runs)]
    head = ("<tr><th>run</th><th>episodes</th>" + "".join(f"<th>{esc(o)}</th>" for o in shown + means) + "</tr>")
    body = []
    for k, r in enumerate(runs):
        t = outcome_table(r)
        cells = []
        for o in shown:
            s = (t.get("shares") or {}).get(o) or {}
            cell = _mean_cell(s if applies_outcome(r, o) else NOT_APPLICABLE)
            if s.get("n") and applies_outcome(r, o):
                cell = cell.replace('<span class="n">', f'<span class="n">{esc(s.get("count"))} of ', 1)
            cells.append(cell)
        cells += [_mean_cell((t.get(c) or {}) if applies_outcome(r, c) else NOT_APPLICABLE) for c in means]
        body.append(f"<tr><td>{_swatch(k)}{esc(r.name)}</td><td class=\"num\">{esc(t.get('n'))}</td>" + "".join(cells)
                    + "</tr>")
    replay_note = (" A predictions replay (textsql-clarify score) is one SQL turn per episode: only its sql share "
                   "applies." if any(r.replay for r in runs) else "")
    return ('<section id="outcomes"><h2>Outcomes</h2><p class="note">How each run\'s episodes ended: share with its '
            "95 % interval and count of n; sql / feedback: ended on that action; budget_spent: still asking when the "
            "clarification budget was spent; malformed: two malformed actions in a row (TIDE App. D); truncated: the "
            "turn cap. Turns and clarifications are means per episode." + replay_note + "</p>"
            '<div class="scroll"><table class="outcomes">' + head + "".join(body) + "</table></div></section>")


def _plots_section(runs: Sequence[Run], tables: Sequence[dict[str, Any]]) -> str:
    out = ['<section id="plots"><h2>Per-category charts</h2><p class="note">Bars: the mean; whiskers: its 95 % '
           "bootstrap interval; n beside each bar. A category where a run's metric is undefined has no bar.</p>"]
    for tab in tables:
        by = tab["by"]
        figs = []
        for m in (x for x in PLOTTED if x in tab["metrics"]):
            keys = [k for k in tab["keys"]
                    if any(row["key"] == k and row["metrics"][m].get("n") for row in tab["rows"])]
            if not keys:
                continue
            series = []
            for r in runs:
                by_key = {row["key"]: row["metrics"][m] for row in tab["rows"] if row["run"] == r.name}
                series.append((r.name, [by_key.get(k) for k in keys]))
            xmax = UNBOUNDED.get(m, 1.0)
            svg = bar_chart_svg(f"{m} by {by}", keys, series, xmax=xmax, salt=f"{by}-{m}")
            figs.append(f'<figure class="plot" data-by="{esc(by)}" data-metric="{esc(m)}">{svg}</figure>')
        if figs:
            out.append(f'<h3>By {esc(by)}</h3><div class="plots">' + "".join(figs) + "</div>")
    out.append("</section>")
    return "".join(out)


def _tables_section(tables: Sequence[dict[str, Any]]) -> str:
    out = ['<section id="tables"><h2>Per-category tables</h2>']
    for tab in tables:
        names = tab["metrics"]
        out.append(f'<details open><summary><b>By {esc(tab["by"])}</b></summary><div class="scroll">'
                   f'<table class="category" data-by="{esc(tab["by"])}">'
                   f"<tr><th class=\"key\">{esc(tab['by'])}</th><th>run</th><th>episodes</th>"
                   + "".join(f"<th>{esc(m)}</th>" for m in names) + "</tr>")
        per_key = max(1, len(tab["rows"]) // max(1, len(tab["keys"])))  # one row per run and key, key-major
        for j, row in enumerate(tab["rows"]):
            # the whole name as text (never cut) and as its title, which stays readable where the cell is narrow
            key_td = (f'<td class="key" rowspan="{per_key}" title="{esc(row["key"])}">{esc(row["key"])}</td>'
                      if j % per_key == 0 else "")
            out.append(f"<tr>{key_td}<td class=\"nowrap\">{esc(row['run'])}</td>"
                       f"<td class=\"num\">{esc(row['n_trajectories'])}</td>"
                       + "".join(_mean_cell(row["metrics"][m]) for m in names) + "</tr>")
        out.append("</table></div></details>")
    out.append("</section>")
    return "".join(out)


def _flatten(d: dict[str, Any], prefix: str = "") -> Iterable[tuple[str, Any]]:
    for k, v in d.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            yield from _flatten(v, name + ".")
        else:
            yield name, v


def score_state(v: Any) -> str:
    """An episode score as the browser's filter reads it: ``pass`` (1), ``fail`` (defined, below 1),
    ``undef`` (``None``: undefined, not 0)."""
    if v is None:
        return "undef"
    return "pass" if float(v) >= 1.0 else "fail"


def _chip(k: str, v: Any) -> str:
    return f'<span class="comp" data-key="{esc(k)}"><span class="k">{esc(k)}</span> <span class="v">{esc(fmt(v))}</span></span>'


def _chips(items: Sequence[tuple[str, Any]], title: str, what: str) -> str:
    """Score chips: the :data:`HEADLINE_CHIPS` present first, in their order, then every other one folded in a
    closed ``<details class="more-comps">`` whose summary counts them."""
    head = {k: v for k, v in items if k in HEADLINE_CHIPS}
    rest = [(k, v) for k, v in items if k not in HEADLINE_CHIPS]
    out = [f'<div class="comps" title="{esc(title)}"><span class="note">{esc(what)}:</span>'
           + "".join(_chip(k, head[k]) for k in HEADLINE_CHIPS if k in head) + "</div>"]
    if rest:
        out.append(f'<details class="more-comps"><summary>{len(rest)} more</summary><div class="comps">'
                   + "".join(_chip(k, v) for k, v in rest) + "</div></details>")
    return "".join(out)


def _sql_block(label: str, sql: str | None, missing: str) -> str:
    if sql is None:
        return f'<div><b>{esc(label)}:</b> <span class="note">{esc(missing)}</span></div>'
    return f'<div><b>{esc(label)}:</b><pre class="gold">{esc(sql)}</pre></div>'


def _expected_html(t: Any, source: ExpectedSource) -> str:
    """The closed ``<details class="expected">`` of one episode: the sample's gold SQL (and post-drift gold), hidden
    knowledge, evidence, chain, other readings (each with its gold and hidden knowledge), premise flaw and flags."""
    flags = ", ".join(t.flags) if t.flags else "none"
    body = []
    sample, reason = source.sample(t.sample_id)
    if sample is None:
        body.append(f'<p class="note">Not available: {esc(reason)}.</p>')
    else:
        missing = ("withheld by the source (clarification only; EX undefined)" if sample.gold_withheld
                   else "none (an unanswerable sample has no gold SQL)")
        body.append(_sql_block("gold SQL", sample.gold_sql, missing))
        if sample.drift is not None:
            body.append(f'<div><b>drift ({esc(sample.drift.subtype)}):</b> user: {esc(sample.drift.utterance)}</div>'
                        + _sql_block("post-drift gold SQL", sample.drift.post_gold_sql, ""))
        body.append(f'<div><b>hidden knowledge:</b> {esc(sample.hidden_knowledge or "(none)")}</div>')
        if sample.evidence:
            body.append("<div><b>evidence (shown to the agent):</b> " + esc(" | ".join(sample.evidence)) + "</div>")
        if sample.chain is not None:
            c = sample.chain
            body.append(f"<div><b>chain ({esc(c.verdict)}):</b> " + " · ".join(
                f"{lay}: {esc(x.question)} → {esc(x.answer)} (not {esc(x.alternative)})"
                for lay, x in (("L1", c.l1), ("L2", c.l2))) + "</div>")
        if sample.interpretations:
            items = "".join(f'<li class="reading"><b>{esc(i.description or f"reading {n + 2}")}</b>: '
                            f'{esc(i.hidden_knowledge)}<pre class="alt">{esc(i.gold_sql)}</pre></li>'
                            for n, i in enumerate(sample.interpretations))
            body.append(f'<div><b>other readings ({len(sample.interpretations)}):</b><ol class="readings">{items}'
                        "</ol></div>")
        elif t.group == "ambiguous":
            body.append('<div><b>other readings:</b> <span class="note">none recorded</span></div>')
    body.append(f"<div><b>flags:</b> {esc(flags)}</div>")
    return ('<details class="expected"><summary>expected: gold SQL, hidden knowledge, other readings, flags</summary>'
            '<div class="expected-body">' + "".join(body) + "</div></details>")


def _turn_html(turn: Any) -> str:
    parts = [f'<li class="turn t-{esc(turn.action_type)}"><div class="turn-head">turn {esc(turn.index + 1)} · '
             f"{esc(turn.phase)} · {esc(turn.action_type)} · reward {esc(fmt(turn.reward))}</div>"]
    cls = "sql" if turn.action_type == "sql" else "text"
    parts.append(f'<pre class="{cls}">{esc(turn.content)}</pre>')
    if turn.error:
        parts.append(f'<div class="error">error: {esc(turn.error)}</div>')
    r = turn.user_reply
    if r:
        label = r.get("label")
        extra = " ".join(esc(x) for x in (r.get("layer"), r.get("route")) if x)
        parts.append(f'<div class="reply"><span class="label label-{esc(label or "none")}">{esc(label or "no label")}'
                     f"</span> {extra} user: {esc(r.get('text'))}</div>")
    if turn.drift_utterance:
        parts.append(f'<div class="reply drift"><span class="label label-none">drift</span> user: '
                     f"{esc(turn.drift_utterance)}</div>")
    ex = turn.execution
    if ex:
        bits = [f"rows: {fmt(ex.get('n_rows'))}"]
        if ex.get("truncated"):
            bits.append("truncated at the row cap")
        if ex.get("error_kind"):
            bits.append(f"error: {ex.get('error_kind')}: {ex.get('error_message') or ''}")
        parts.append(f'<div class="note exec">{esc("; ".join(bits))}</div>')
    if turn.commitment_drift is not None:
        parts.append(f'<div class="note">commitment drift (TIDE Rec(τ)): {esc(fmt(turn.commitment_drift))}</div>')
    comps = list(_flatten(turn.reward_components or {}))
    if comps:
        parts.append(_chips([("reward", turn.reward)] + comps, "this turn's reward and reward components (— = undefined)",
                            "reward components"))
    parts.append("</li>")
    return "".join(parts)


def _episode_html(k: int, run: Run, t: Any, source: ExpectedSource) -> str:
    from ..rewards.metrics import UNKNOWN_SUBCATEGORY
    from ..rewards.outcomes import episode_outcome

    sub = t.subcategory or UNKNOWN_SUBCATEGORY
    outcome = episode_outcome(t)
    scores = " ".join(f"{key}:{score_state(t.scores.get(key))}" for key, _ in SCORE_FILTERS)
    search = f"{t.sample_id} {t.db_id} {t.question}".lower()
    marks = []
    for key, label in SCORE_FILTERS[:2]:
        st = score_state(t.scores.get(key))
        marks.append(f'<span class="s-{st}">{esc(label)} {esc(fmt(t.scores.get(key), 0) if st != "undef" else UNDEFINED)}</span>')
    n_clar = len(t.clarifications)
    summary = (f'<span class="tag run-tag" style="border-left-color:{COLOURS[k % len(COLOURS)]}">{esc(run.name)}</span>'
               f"<code>{esc(t.sample_id)}</code> · {esc(t.group)} / {esc(sub)}"
               + (" · p-protocol" if t.protocol == "p" else "")
               + f" · <b>{esc(outcome)}</b> · " + " · ".join(marks)
               + f" · {esc(len(t.turns))} turn(s), {esc(n_clar)} clarification(s)")
    meta = [f"database {t.db_id}", f"difficulty {t.difficulty}", f"gold {t.gold_status}", f"seed {fmt(t.seed)}"]
    if t.premise_flaw:
        meta.append(f"premise flaw {t.premise_flaw}")
    if t.has_drift:
        meta.append(f"drift {t.drift_subtype}")
    if t.flags:
        meta.append("flags " + ", ".join(t.flags))
    scores_tab = [(k2, v) for k2, v in _flatten(t.scores) if not isinstance(v, (list, tuple))]
    question = t.question or "(not recorded: this run was written before trajectories carried the question)"
    return (f'<details class="episode" data-run="r{k}" data-group="{esc(t.group)}" data-subcategory="{esc(sub)}" '
            f'data-outcome="{esc(outcome)}" data-score="{esc(scores)}" data-search="{esc(search)}">'
            f"<summary>{summary}</summary><div class=\"ep-body\">"
            f'<p class="question"><b>Question:</b> {esc(question)}</p>'
            f'<p class="note">{esc(" · ".join(meta))}</p>' + _expected_html(t, source)
            + '<ol class="turns">' + "".join(_turn_html(turn) for turn in t.turns) + "</ol>"
            '<div class="final"><b>Final scores</b>'
            + _chips(scores_tab, "the episode's final scores (— = undefined)", "scores") + "</div></div></details>")


def _options(name: str, label: str, values: Sequence[tuple[str, str]]) -> str:
    opts = '<option value="">all</option>' + "".join(f'<option value="{esc(v)}">{esc(t)}</option>' for v, t in values)
    return f'<label>{esc(label)}<select name="{esc(name)}">{opts}</select></label>'


def _dialogues_section(runs: Sequence[Run], sources: Sequence[ExpectedSource]) -> str:
    from ..rewards.metrics import UNKNOWN_SUBCATEGORY
    from ..rewards.outcomes import OUTCOMES, episode_outcome
    from ..taxonomy import GROUPS, SUBCATEGORIES

    trajs = [(k, r, t) for k, r in enumerate(runs) for t in r.trajectories]
    groups = [g for g in GROUPS if any(t.group == g for _, _, t in trajs)]
    subs_present = {t.subcategory or UNKNOWN_SUBCATEGORY for _, _, t in trajs}
    subs = [s for s in SUBCATEGORIES if s in subs_present] + sorted(subs_present - set(SUBCATEGORIES))
    outcomes = {episode_outcome(t) for _, _, t in trajs}
    score_opts = []
    for key, label in SCORE_FILTERS:
        if key in ("ex", "fb") or any(t.scores.get(key) is not None for _, _, t in trajs):
            score_opts += [(f"{key}:pass", f"{label} = 1"), (f"{key}:fail", f"{label} < 1"),
                           (f"{key}:undef", f"{label} undefined")]
    form = ('<form id="dlg-filters" autocomplete="off">'
            + _options("run", "run", [(f"r{k}", r.name) for k, r in enumerate(runs)])
            + _options("group", "group", [(g, g) for g in groups])
            + _options("subcategory", "subcategory", [(s, s) for s in subs])
            + _options("outcome", "outcome", [(o, o) for o in OUTCOMES if o in outcomes])
            + _options("score", "score", score_opts)
            + '<label>search (id, database, question)<input type="search" name="text"></label>'
            + '<button type="reset">clear filters</button><button type="button" id="dlg-expand">open shown</button>'
            + '<button type="button" id="dlg-collapse">close all</button>'
            + f'<span id="dlg-count" data-shown="{len(trajs)}">{len(trajs)} of {len(trajs)} episodes shown</span>'
            + "</form>")
    return ('<section id="dialogues"><h2>Dialogue browser</h2><p class="note">Every episode of every run. Click one '
            "to read its question, each turn (the agent's action, the simulated user's reply with its relevancy label, "
            "the SQL and how it ran) and each turn's reward components (reward, EX, FB, decision first; the rest under "
            "'more'). 'expected' opens what the episode expected: the gold SQL (and the post-drift gold), the hidden "
            "knowledge, the other readings and the sample's flags, from the dataset run.json names.</p>" + form
            + '<div id="episodes">' + "".join(_episode_html(k, r, t, sources[k]) for k, r, t in trajs)
            + "</div></section>")


def render_html(runs: Sequence[Run], *, by: Sequence[str] = DEFAULT_BY, title: str | None = None) -> str:
    """The whole report page.

    Args:
        runs: the runs (:func:`~textsql_clarify.reports.runs.load_runs`); the first is the reference of
            the paired differences.
        by: the breakdowns charted and tabled (``metrics.json``'s ``by_<name>``), in order.
        title: the page title (default: "textsql-clarify report: <run names>").
    Returns:
        One HTML document (UTF-8 text) with inline CSS, script and SVG, and nothing it must fetch. Each run's
        dataset (``run.json``'s ``dataset`` spec) is loaded once, without validation, for the episodes' expected
        side (:func:`~textsql_clarify.reports.expected.expected_sources`); one that does not load is named on its
        episodes instead.
    Raises:
        ValueError: an unknown breakdown.
        ImportError: matplotlib is not installed (the ``report`` extra).
    """
    from .. import __version__

    tables = [category_table(runs, b) for b in by]
    board = leaderboard(runs)
    title = title or "textsql-clarify report: " + ", ".join(r.name for r in runs)
    boot = next((r.metrics.get("bootstrap") for r in runs if isinstance(r.metrics.get("bootstrap"), dict)), None)
    boot_txt = (f"Intervals: percentile bootstrap over samples, {boot.get('n_resamples')} resamples, seed "
                f"{boot.get('seed')}, level {boot.get('level')}." if boot else "Intervals: percentile bootstrap over samples.")
    nav = "".join(f'<a href="#{a}">{t}</a>' for a, t in (("runs", "Runs"), ("leaderboard", "Leaderboard"),
                                                          ("outcomes", "Outcomes"), ("plots", "Charts"),
                                                          ("tables", "Tables"), ("dialogues", "Dialogues")))
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{esc(assets.content_security_policy())}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(title)}</title><style>{assets.CSS}</style></head><body>"
            f"<h1>{esc(title)}</h1><p class=\"note\">textsql-clarify {esc(__version__)} · {esc(len(runs))} run(s) · "
            f"{esc(sum(len(r.trajectories) for r in runs))} episodes · {esc(boot_txt)}</p><nav>{nav}</nav>"
            + _runs_section(runs) + _leaderboard_section(runs, board) + _outcomes_section(runs)
            + _plots_section(runs, tables) + _tables_section(tables)
            + _dialogues_section(runs, expected_sources(runs))
            + f"<script>{assets.JS}</script></body></html>\n")
