"""Bar charts with 95 % intervals as inline SVG, drawn by matplotlib (Agg, SVG output).

Each chart is one metric over one breakdown's categories, the runs side by side (grouped horizontal
bars, so that long subcategory names stay readable), each bar with its bootstrap interval as an error
bar and its n written beside it; a category where a run's metric is undefined gets no bar and a "n=0"
note (undefined is not zero). The SVG is returned as text to be put inside the HTML page: no file, no
network, text kept as text (``svg.fonttype = none``), ids salted per chart so that several charts on one
page do not share clip paths.
"""
from __future__ import annotations

import io
import re
from typing import Any, Sequence

#: run colours (matplotlib's tab10, in order).
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf")


def _import_pyplot():
    try:
        import matplotlib
    except ImportError as e:  # pragma: no cover - the 'report' extra
        raise ImportError("textsql-clarify report draws its charts with matplotlib: "
                          "pip install 'textsql-clarify[report]'") from e
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def bar_chart_svg(title: str, categories: Sequence[str], series: Sequence[tuple[str, Sequence[dict[str, Any] | None]]],
                  *, xmax: float | None = 1.0, xlabel: str = "", salt: str = "chart") -> str:
    """One grouped horizontal bar chart as an ``<svg>`` element.

    Args:
        title: the chart's title (plain text; matplotlib escapes it in the SVG).
        categories: the category names, top to bottom.
        series: ``[(run name, [mean per category])]``; a mean is ``{"value", "n", "ci95"}`` (``ci95`` may be
            missing or ``None``: no error bar) or ``None``/``n == 0`` (undefined: no bar).
        xmax: the axis' upper end (1.0 for rates; ``None``: from the data).
        xlabel: the value axis' label.
        salt: makes the SVG's ids unique on the page (use a different one per chart).
    Returns:
        The SVG markup (no XML prolog), with ``class="chart"`` on its root.
    Raises:
        ValueError: a series does not have one entry per category.
        ImportError: matplotlib is not installed.
    """
    plt = _import_pyplot()
    k = max(1, len(series))
    for name, vals in series:
        if len(vals) != len(categories):
            raise ValueError(f"series {name!r} has {len(vals)} values for {len(categories)} categories")
    bar_h = 0.8 / k
    height = 1.2 + 0.28 * len(categories) * k + (0.35 if k > 1 else 0)
    # text.parse_math off: a run or category name with "$" is text, not mathtext (which raised on "$\\frac{$")
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt, "font.size": 9,
                         "font.family": "sans-serif", "text.parse_math": False}):
        fig, ax = plt.subplots(figsize=(7.2, height))
        try:
            top = 0.0
            for j, (name, vals) in enumerate(series):
                ys, xs, lo, hi, labels, missing = [], [], [], [], [], []
                for i, m in enumerate(vals):
                    y = i + (j - (k - 1) / 2) * bar_h
                    if not m or not m.get("n") or m.get("value") is None:
                        missing.append(y)
                        continue
                    v = float(m["value"])
                    ci = m.get("ci95")
                    ys.append(y)
                    xs.append(v)
                    lo.append(v - float(ci[0]) if ci else 0.0)
                    hi.append(float(ci[1]) - v if ci else 0.0)
                    labels.append(f"{v:.2f} (n={m['n']})")
                    top = max(top, float(ci[1]) if ci else v)
                colour = COLOURS[j % len(COLOURS)]
                ax.barh(ys, xs, height=bar_h * 0.92, color=colour,
                        xerr=[lo, hi], error_kw={"ecolor": "#222", "capsize": 2, "elinewidth": 0.9})
                for y, x, h, text in zip(ys, xs, hi, labels):
                    ax.text(x + h + 0.01 * (xmax or max(top, 1.0)), y, text, va="center", fontsize=7, color="#333")
                for y in missing:
                    ax.text(0.005 * (xmax or max(top, 1.0)), y, "undefined (n=0)", va="center", fontsize=7,
                            color="#888", style="italic")
            ax.set_yticks(range(len(categories)))
            ax.set_yticklabels(list(categories))
            ax.set_ylim(len(categories) - 0.5, -0.5)  # first category on top; fixed, whatever has a bar
            right = (xmax if xmax is not None else max(top, 1e-9)) * 1.28
            ax.set_xlim(0, right)
            if xmax is not None:  # ticks stop at the scale's end; the room beyond is for the labels
                ax.axvline(xmax, color="#bbb", lw=0.6, ls=":")
                ax.set_xticks([xmax * i / 5 for i in range(6)])
            ax.set_title(title, fontsize=10, loc="left")
            if xlabel:
                ax.set_xlabel(xlabel)
            ax.grid(axis="x", color="#e5e5e5", lw=0.6)
            ax.set_axisbelow(True)
            for side in ("top", "right"):
                ax.spines[side].set_visible(False)
            if k > 1:  # handles drawn here: a run with no bar in this chart keeps its colour in the legend
                from matplotlib.patches import Patch

                handles = [Patch(facecolor=COLOURS[j % len(COLOURS)], label=name) for j, (name, _) in enumerate(series)]
                ax.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.0 + 0.35 / height),
                          ncol=min(k, 4), fontsize=8, frameon=False, borderaxespad=0.8)
            buf = io.StringIO()
            fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
        finally:
            plt.close(fig)
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]  # drop the XML prolog and doctype: the SVG sits inside HTML
    return re.sub(r"^<svg\b", '<svg class="chart" role="img"', svg, count=1)
