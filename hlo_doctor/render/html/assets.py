"""The page's own style sheet and script, inlined into every page (nothing is fetched).

The style follows the reader's colour scheme (``prefers-color-scheme``) and prints light, with every
table unfolded; charts take the text colour of the page (their neutral parts are ``currentColor``).
The script sorts tables by a click on a column header and draws the charts with the inlined Vega
runtime; it records any error into the page (``data-errors`` on ``<html>``) so a headless browser's
DOM tells whether the page ran clean.
"""

from __future__ import annotations

import base64
import hashlib

__all__ = ["CSP", "SCRIPT", "STYLE", "csp"]

CSP = ("default-src 'none'; script-src 'unsafe-eval'; style-src 'unsafe-inline'; "
       "img-src data:; font-src 'none'; connect-src 'none'; base-uri 'none'; form-action 'none'")
"""The page's Content-Security-Policy without its scripts: nothing may load from anywhere (Vega
compiles its expressions with ``Function``, hence ``unsafe-eval``); :func:`csp` adds the hash of each
inline script the page runs."""


def csp(scripts: list[str] | tuple[str, ...]) -> str:
    """The policy of a page whose only scripts are ``scripts`` (their exact text): each is allowed by
    its SHA-256, so no other script runs, inline or not, whatever a name in the page tried."""
    hashes = " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(s.encode()).digest()).decode()}'"
                      for s in scripts)
    return CSP.replace("script-src ", f"script-src {hashes} ", 1)

STYLE = """
:root { --bg: #ffffff; --fg: #1f2328; --muted: #59636e; --line: #d1d9e0; --stripe: #f6f8fa;
  --pass: #1a7f37; --fail: #cf222e; --warn: #9a6700; --accent: #0969da; color-scheme: light dark; }
@media (prefers-color-scheme: dark) {
  :root { --bg: #0d1117; --fg: #e6edf3; --muted: #9198a1; --line: #3d444d; --stripe: #151b23;
    --pass: #3fb950; --fail: #f85149; --warn: #d29922; --accent: #4493f8; }
}
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1100px; padding: 1.5rem 1.25rem 3rem; background: var(--bg); color: var(--fg);
  font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
h1 { font-size: 1.6rem; margin: 0 0 .25rem; } h2 { font-size: 1.25rem; margin: 2.2rem 0 .6rem;
  padding-bottom: .3rem; border-bottom: 1px solid var(--line); } h3 { font-size: 1rem; margin: 0 0 .4rem; }
a { color: var(--accent); }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: .92em; }
.verdict { font-size: 1.1rem; font-weight: 600; margin: .2rem 0 .8rem; }
.tone-pass { color: var(--pass); } .tone-fail { color: var(--fail); } .tone-warn { color: var(--warn); }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: .15rem 1rem; margin: 0 0 1rem; }
dl.facts dt { color: var(--muted); } dl.facts dd { margin: 0; word-break: break-all; }
nav.toc { font-size: .95rem; } nav.toc a { margin-right: 1rem; }
figure.chart-figure { margin: 1.2rem 0 1.8rem; }
.chart { color: var(--fg); overflow-x: auto; min-height: 40px; }
.chart svg { max-width: 100%; height: auto; }
p.alt { color: var(--muted); font-size: .9rem; margin: .3rem 0 .6rem; }
p.note { margin: .4rem 0; } p.note.tone-fail, p.note.tone-warn { font-weight: 600; }
ul.missing { border-left: 3px solid var(--warn); padding: .3rem .5rem .3rem 1.6rem; margin: .6rem 0; }
.table-wrap { overflow-x: auto; margin: .4rem 0 1rem; }
table { border-collapse: collapse; font-size: .85rem; }
caption { text-align: left; font-weight: 600; padding: .2rem 0; }
th, td { border: 1px solid var(--line); padding: .2rem .45rem; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tbody tr:nth-child(even) { background: var(--stripe); }
th button { all: unset; cursor: pointer; font-weight: 600; }
th button:focus-visible { outline: 2px solid var(--accent); }
th[aria-sort="ascending"] button::after { content: " \\25B2"; }
th[aria-sort="descending"] button::after { content: " \\25BC"; }
p.table-note, footer { color: var(--muted); font-size: .85rem; }
footer { margin-top: 3rem; border-top: 1px solid var(--line); padding-top: .6rem; }
@media print {
  :root { --bg: #ffffff; --fg: #000000; --muted: #333333; --line: #999999; --stripe: #f2f2f2;
    --pass: #1a7f37; --fail: #cf222e; --warn: #7d4e00; --accent: #000000; color-scheme: light; }
  body { max-width: none; padding: 0; font-size: 10pt; }
  nav.toc, th button::after { display: none; }
  figure.chart-figure, .table-wrap { break-inside: avoid; }
  .table-wrap { overflow: visible; } .chart { overflow: visible; }
  h2 { break-after: avoid; }
}
"""

SCRIPT = """
(function () {
  "use strict";
  var state = { errors: [], charts: 0, drawn: 0 };
  window.hloReport = state;
  var root = document.documentElement;
  function record(message) {
    state.errors.push(String(message));
    root.setAttribute("data-errors", String(state.errors.length));
    root.setAttribute("data-error-messages", state.errors.join(" | "));
  }
  window.addEventListener("error", function (e) { record(e.message || e); });
  window.addEventListener("unhandledrejection", function (e) { record(e.reason); });
  var origError = console.error;
  console.error = function () { record(Array.prototype.join.call(arguments, " ")); origError.apply(console, arguments); };

  function cellKey(row, index, numeric) {
    var cell = row.cells[index];
    if (!cell) { return numeric ? null : ""; }
    var raw = cell.getAttribute("data-value");
    if (numeric) { var n = raw === null || raw === "" ? NaN : Number(raw); return isNaN(n) ? null : n; }
    return (raw === null ? cell.textContent : raw).trim().toLowerCase();
  }
  function sortBy(th) {
    var table = th.closest("table"), body = table.tBodies[0];
    var index = Array.prototype.indexOf.call(th.parentNode.children, th);
    var numeric = th.getAttribute("data-numeric") === "1";
    var ascending = th.getAttribute("aria-sort") !== "ascending";
    Array.prototype.forEach.call(th.parentNode.children, function (other) { other.setAttribute("aria-sort", "none"); });
    th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = cellKey(a, index, numeric), y = cellKey(b, index, numeric);
      if (x === null && y === null) { return 0; } if (x === null) { return 1; } if (y === null) { return -1; }
      var c = numeric ? x - y : x.localeCompare(y);
      return ascending ? c : -c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }
  function drawCharts() {
    var charts = document.querySelectorAll(".chart[data-spec]");
    state.charts = charts.length;
    root.setAttribute("data-charts", String(charts.length));
    if (!charts.length) { root.setAttribute("data-charts-drawn", "0"); return; }
    if (!window.vegaEmbed) { record("the Vega runtime is missing from this page"); return; }
    var runs = Array.prototype.map.call(charts, function (el) {
      try {
        var spec = JSON.parse(document.getElementById(el.getAttribute("data-spec")).textContent);
        var options = { mode: "vega", renderer: "svg", actions: false };
        return window.vegaEmbed(el, spec, options).then(function () {
          el.setAttribute("data-drawn", "true"); state.drawn += 1;
        }, function (err) { el.setAttribute("data-error", String(err)); record(err); });
      } catch (err) { el.setAttribute("data-error", String(err)); record(err); return Promise.resolve(); }
    });
    Promise.all(runs).then(function () { root.setAttribute("data-charts-drawn", String(state.drawn)); });
  }
  function start() {
    Array.prototype.forEach.call(document.querySelectorAll("table.sortable th button"), function (b) {
      b.addEventListener("click", function () { sortBy(b.parentNode); });
    });
    drawCharts();
  }
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", start); } else { start(); }
})();
"""
