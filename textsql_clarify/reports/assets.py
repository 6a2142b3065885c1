"""The report page's inline stylesheet and script (a self-contained HTML file).

The script only filters the dialogue browser: it reads the filter form and each episode's ``data-*``
attributes and sets ``hidden``; it never builds markup from data (no ``innerHTML``), so text from a
trajectory is shown only as the page's escaped HTML. The page's Content-Security-Policy allows this one
script by its SHA-256 (:func:`script_hash`), no other script, no inline event handler and no network.
"""
from __future__ import annotations

import base64
import hashlib

CSS = """
:root { --fg: #1d1d1f; --muted: #666; --line: #d9d9de; --bg2: #f6f6f8; --ok: #1b7f3b; --bad: #b3261e; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
       margin: 0 auto; padding: 1rem 1.5rem 4rem; max-width: 1280px; }
h1 { font-size: 1.5rem; margin: .2rem 0 .4rem; }
h2 { font-size: 1.2rem; margin: 2rem 0 .5rem; border-bottom: 1px solid var(--line); padding-bottom: .2rem; }
h3 { font-size: 1rem; margin: 1.2rem 0 .4rem; }
nav a { margin-right: .9rem; }
.note { color: var(--muted); font-size: .9em; }
.scroll { overflow-x: auto; max-width: 100%; }
/* wide tables scroll in their own box; their first column (the row's name) stays in view */
.scroll table:not(.category) tr > :first-child, .scroll table.category .key {
  position: sticky; left: 0; z-index: 1; background: #fff; box-shadow: inset -1px 0 0 var(--line); }
.scroll table tr > th:first-child, .scroll table.category th.key { background: var(--bg2); }
table { border-collapse: collapse; margin: .4rem 0 1rem; font-size: 13px; }
th, td { border: 1px solid var(--line); padding: .25rem .5rem; text-align: left; vertical-align: top; }
th { background: var(--bg2); font-weight: 600; }
th.run-col, th.diff-col, td:first-child { white-space: nowrap; }
th.diff-col { font-weight: 500; color: var(--muted); }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.num .sub { display: block; color: var(--muted); font-size: 11px; }
.nowrap { white-space: nowrap; }
.undef { color: #999; }
.better { color: var(--ok); } .worse { color: var(--bad); } .test { color: var(--muted); }
.swatch { display: inline-block; width: .8em; height: .8em; border-radius: 2px; margin-right: .35em;
          vertical-align: -1px; }
.plots { display: grid; grid-template-columns: repeat(auto-fill, minmax(520px, 1fr)); gap: 1rem; }
figure.plot { margin: 0; border: 1px solid var(--line); border-radius: 6px; padding: .4rem; background: #fff; }
figure.plot svg { width: 100%; height: auto; display: block; }
#dlg-filters { position: sticky; top: 0; background: #fff; padding: .5rem 0; border-bottom: 1px solid var(--line);
               display: flex; flex-wrap: wrap; gap: .5rem 1rem; align-items: end; z-index: 2; }
#dlg-filters label { display: flex; flex-direction: column; font-size: 12px; color: var(--muted); }
#dlg-filters select, #dlg-filters input { font-size: 13px; padding: .15rem .3rem; min-width: 9rem; }
#dlg-count { font-weight: 600; margin-left: auto; }
details.episode { border: 1px solid var(--line); border-radius: 6px; margin: .35rem 0; background: #fff; }
details.episode > summary { cursor: pointer; padding: .35rem .6rem; list-style-position: inside; }
details.episode[open] > summary { border-bottom: 1px solid var(--line); background: var(--bg2); }
.ep-body { padding: .5rem .8rem; }
.tag { display: inline-block; border: 1px solid var(--line); border-radius: 3px; padding: 0 .35em; margin-right: .25em;
       font-size: 12px; }
.run-tag { border-left-width: 4px; font-weight: 600; }
.s-pass { color: var(--ok); font-weight: 600; } .s-fail { color: var(--bad); font-weight: 600; }
.s-undef { color: #999; }
ol.turns { padding-left: 1.4rem; }
li.turn { margin: .4rem 0 .8rem; }
.turn-head { font-weight: 600; }
pre { background: var(--bg2); border: 1px solid var(--line); border-radius: 4px; padding: .35rem .5rem; margin: .25rem 0;
      white-space: pre-wrap; word-break: break-word; font: 12.5px/1.4 ui-monospace, Menlo, Consolas, monospace; }
.reply { margin: .25rem 0; padding-left: .6rem; border-left: 3px solid var(--line); }
.label { font-size: 11px; font-weight: 700; text-transform: uppercase; border-radius: 3px; padding: 0 .35em; color: #fff; }
.label-relevant { background: #1b7f3b; } .label-technical { background: #8a6d00; } .label-irrelevant { background: #b3261e; }
.label-none { background: #888; }
.error { color: var(--bad); }
.comps { display: flex; flex-wrap: wrap; gap: .2rem .35rem; margin: .25rem 0; font-size: 12px; }
.comp { border: 1px solid var(--line); border-radius: 3px; padding: 0 .35em; background: #fff; white-space: nowrap; }
.comp .k { color: var(--muted); } .comp .v { font-variant-numeric: tabular-nums; font-weight: 600; }
.final { margin-top: .4rem; }
details.more-comps { margin: 0 0 .25rem; font-size: 12px; }
details.more-comps > summary { cursor: pointer; color: var(--muted); }
details.expected { margin: .3rem 0 .5rem; border-left: 3px solid #8a6d00; padding-left: .5rem; }
details.expected > summary { cursor: pointer; font-weight: 600; color: #8a6d00; }
.expected-body > div { margin: .25rem 0; }
ol.readings { margin: .2rem 0; padding-left: 1.4rem; }
.ep-body, .expected-body { overflow-wrap: anywhere; min-width: 0; }
[hidden] { display: none !important; }
"""

JS = """
(function () {
  "use strict";
  var form = document.getElementById("dlg-filters");
  if (!form) { return; }
  var episodes = Array.prototype.slice.call(document.querySelectorAll("#dialogues details.episode"));
  var count = document.getElementById("dlg-count");
  function value(name) { var el = form.elements[name]; return el ? el.value : ""; }
  function apply() {
    var run = value("run"), group = value("group"), sub = value("subcategory"), outcome = value("outcome");
    var score = value("score"), text = value("text").trim().toLowerCase();
    var shown = 0;
    episodes.forEach(function (el) {
      var d = el.dataset;
      var ok = (!run || d.run === run) && (!group || d.group === group) && (!sub || d.subcategory === sub) &&
        (!outcome || d.outcome === outcome) &&
        (!score || (" " + d.score + " ").indexOf(" " + score + " ") >= 0) &&
        (!text || d.search.indexOf(text) >= 0);
      el.hidden = !ok;
      if (ok) { shown += 1; }
    });
    count.textContent = shown + " of " + episodes.length + " episodes shown";
    count.setAttribute("data-shown", String(shown));
  }
  form.addEventListener("input", apply);
  form.addEventListener("change", apply);
  form.addEventListener("reset", function () { window.setTimeout(apply, 0); });
  function openAll(open) {
    episodes.forEach(function (el) { if (!el.hidden) { el.open = open; } });
  }
  var ex = document.getElementById("dlg-expand"), co = document.getElementById("dlg-collapse");
  if (ex) { ex.addEventListener("click", function () { openAll(true); }); }
  if (co) { co.addEventListener("click", function () { openAll(false); }); }
  apply();
})();
"""


def script_hash(script: str = JS) -> str:
    """The CSP source of ``script`` (``'sha256-<base64>'``), which the page's policy allows alone."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii") + "'"


def content_security_policy(script: str = JS) -> str:
    """The page's Content-Security-Policy: nothing from the network, the page's own script only (by hash),
    inline styles (matplotlib's SVG styles its shapes inline), images only as ``data:``."""
    return (f"default-src 'none'; script-src {script_hash(script)}; style-src 'unsafe-inline'; img-src data:; "
            f"base-uri 'none'; form-action 'none'")
