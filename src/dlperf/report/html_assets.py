"""The HTML report's style sheet, its one script and its page frame (:mod:`dlperf.report.html`).

No external fonts, scripts or images: the page opens without a network. plotly.js is not in
the page but in a file beside it (:func:`dlperf.report.html.write_plotly_js`, written once
per report folder); a page opened without that file says so where the plots would be
(:data:`PLOTLY_MISSING_JS`) instead of failing in the console.

:data:`TABLE_JS` makes every table of the page sortable (click or Enter on a column header;
numbers sort as numbers: a cell's ``data-v`` when it has one, else the first number in its
text; a dash or an empty cell sorts last either way) and gives each table of more than
:data:`FILTER_MIN_ROWS` rows a filter box (rows that hold every word typed, case-insensitive;
the count of rows shown beside it). On a narrow screen (a phone) it moves the plots' legends
under the plots and makes room for the subplot titles under the plot's tool bar. It reads the page's text (``textContent``) and writes only attributes,
classes and element order: no text of a result is ever parsed as HTML.
"""

from __future__ import annotations

__all__ = ["CSS", "PAGE", "TABLE_JS", "PLOTLY_MISSING_JS", "FILTER_MIN_ROWS", "NARROW_PX"]

#: Tables with more rows than this get a filter box.
FILTER_MIN_ROWS = 8
#: Below this width (CSS px) the page uses its narrow layout (phones).
NARROW_PX = 760

CSS = """
:root { --fg:#1f2937; --muted:#6b7280; --line:#e5e7eb; --bg:#f7f8fa; --card:#fff;
  --ok:#15803d; --okbg:#dcfce7; --fail:#b91c1c; --failbg:#fee2e2; --warn:#b45309;
  --warnbg:#fef3c7; --accent:#0072b2; }
* { box-sizing: border-box; }
html { -webkit-text-size-adjust:100%; text-size-adjust:100%; }
body { margin:0; background:var(--bg); color:var(--fg);
  font:14px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif; }
header.top { background:#0f172a; color:#f8fafc; padding:18px 32px 14px; }
header.top h1 { margin:0 0 6px; font-size:22px; font-weight:650; }
header.top .sub { color:#cbd5e1; font-size:13px; overflow-wrap:anywhere; }
nav.toc { position:sticky; top:0; z-index:10; background:#fff; border-bottom:1px solid var(--line);
  padding:6px 32px; font-size:13px; display:flex; flex-wrap:wrap; gap:2px 16px;
  max-height:40vh; overflow-y:auto; }
nav.toc a { color:var(--accent); text-decoration:none; white-space:nowrap; }
main { max-width:1440px; margin:0 auto; padding:18px 16px 48px; }
section.card { background:var(--card); border:1px solid var(--line); border-radius:10px;
  padding:16px; margin:0 0 18px; box-shadow:0 1px 2px rgba(0,0,0,.04); min-width:0;
  scroll-margin-top:64px; }
section.card > h2 { margin:0 0 10px; font-size:17px; }
h3 { font-size:15px; margin:16px 0 6px; }
.badges { margin-top:8px; }
.badge { display:inline-block; border-radius:999px; padding:1px 10px; font-size:12px;
  font-weight:600; margin:0 6px 4px 0; background:#e2e8f0; color:#1e293b; }
.badge.ok { background:var(--okbg); color:var(--ok); }
.badge.fail { background:var(--failbg); color:var(--fail); }
.badge.warn { background:var(--warnbg); color:var(--warn); }
.env { display:grid; grid-template-columns:repeat(auto-fill,minmax(300px,1fr)); gap:8px 24px; }
.env div.k { color:var(--muted); font-size:12px; text-transform:uppercase; letter-spacing:.03em; }
.env div.v { font-weight:500; overflow-wrap:anywhere; }
.env .item { padding:4px 0; border-bottom:1px dashed var(--line); min-width:0; }
code, pre { font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace; font-size:12px; }
code.flag { background:#eef2ff; color:#3730a3; border-radius:4px; padding:0 4px; margin:0 3px 3px 0;
  display:inline-block; }
pre.err { white-space:pre-wrap; overflow-wrap:anywhere; background:#fff7f7;
  border:1px solid #fecaca; border-radius:6px; padding:8px 10px; margin:4px 0 12px;
  max-height:220px; overflow:auto; }
.scroll { overflow-x:auto; max-width:100%; }
table { border-collapse:collapse; width:100%; font-size:13px; margin:6px 0 10px; }
th, td { padding:5px 8px; border-bottom:1px solid var(--line); text-align:left;
  vertical-align:top; overflow-wrap:break-word; }
th { background:#f1f5f9; font-weight:600; }
th.sortable { cursor:pointer; user-select:none; }
th.sortable::after { content:"\\2195"; color:#94a3b8; font-size:10px; margin-left:2px; }
th[aria-sort=ascending]::after { content:"\\25B2"; color:var(--accent); }
th[aria-sort=descending]::after { content:"\\25BC"; color:var(--accent); }
tbody tr:nth-child(even) { background:#fafbfc; }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; }
td.num { white-space:nowrap; }
td.nw { white-space:nowrap; }
table.envt tbody th { background:#f8fafc; width:14%; font-weight:600; color:var(--muted); }
table.envt tr.differs td { background:var(--warnbg); }
tr.failed td { background:var(--failbg); }
tr.warned td:first-child { box-shadow:inset 3px 0 0 var(--warn); }
tr.hidden { display:none; }
.tfilter { display:flex; gap:10px; align-items:center; margin:4px 0 2px; flex-wrap:wrap; }
.tfilter input { font:inherit; font-size:13px; padding:3px 8px; border:1px solid #cbd5e1;
  border-radius:6px; min-width:16em; max-width:100%; }
.tfilter .count { color:var(--muted); font-size:12px; }
.st-ok { color:var(--ok); font-weight:600; }
.st-fail { color:var(--fail); font-weight:600; }
.w { color:var(--warn); }
ul.warn { margin:2px 0 0 16px; padding:0; color:var(--warn); font-size:12px; }
.note { color:var(--muted); font-size:12.5px; }
.plot { margin:4px 0 14px; border:1px solid var(--line); border-radius:8px; padding:6px 4px 2px;
  min-width:0; }
.ptitle { font-weight:600; font-size:14px; padding:2px 8px 0; }
.noplotly .plot > div:not(.ptitle) { display:none; }
.noplotly .plot::after { content:attr(data-missing); display:block; padding:10px;
  color:var(--fail); font-size:13px; }
details.w summary { color:var(--warn); font-size:12px; }
details summary { cursor:pointer; color:var(--accent); }
.md img { max-width:100%; height:auto; }
.md table { width:auto; min-width:50%; font-size:12px; }
.md th, .md td { padding:4px 6px; }
.md th { hyphens:auto; }
@media (max-width: 760px) {
  header.top { padding:12px 14px 10px; }
  header.top h1 { font-size:18px; }
  nav.toc { position:static; padding:6px 14px; max-height:none; }
  nav.toc a { white-space:normal; }
  main { padding:10px 8px 32px; }
  section.card { padding:12px 10px; border-radius:8px; }
  .env { grid-template-columns:1fr; }
  table { font-size:12px; }
  th, td { padding:4px 5px; }
  .tfilter input { min-width:0; width:100%; }
}
"""

#: Run in the page's head after plotly.js: without it (the page copied without its sibling
#: file), plot scripts find a stand-in that does nothing and each plot says what is missing.
PLOTLY_MISSING_JS = """
if (!window.Plotly) {
  window.Plotly = {newPlot: function () { return Promise.resolve(); },
                   relayout: function () {}, Plots: {resize: function () {}}};
  document.documentElement.className += " noplotly";
}
"""

TABLE_JS = """
(function () {
  "use strict";
  var FILTER_MIN_ROWS = @FILTER_MIN_ROWS@, NARROW_PX = @NARROW_PX@;
  var NUM = /[-+]?(?:\\d+\\.?\\d*|\\.\\d+)(?:[eE][-+]?\\d+)?/;
  function key(cell) {
    if (!cell) { return null; }
    var v = cell.getAttribute("data-v");
    if (v !== null) { return v === "" ? null : parseFloat(v); }
    var t = (cell.textContent || "").trim();
    if (t === "" || t === "\\u2013" || t === "-" || t === "\\u2014") { return null; }
    var m = t.match(NUM);
    if (m && t.indexOf(m[0]) === 0) { return parseFloat(m[0]); }
    return t.toLowerCase();
  }
  function compare(a, b, dir) {
    if (a === null || b === null) { return a === b ? 0 : (a === null ? 1 : -1); }
    var na = typeof a === "number", nb = typeof b === "number";
    if (na !== nb) { return na ? -1 : 1; }
    return (a < b ? -1 : a > b ? 1 : 0) * dir;
  }
  function sortTable(table, col, th) {
    var body = table.tBodies[0];
    if (!body) { return; }
    var dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
    var heads = table.tHead ? table.tHead.rows[0].cells : [];
    for (var i = 0; i < heads.length; i++) { heads[i].removeAttribute("aria-sort"); }
    th.setAttribute("aria-sort", dir === 1 ? "ascending" : "descending");
    var rows = Array.prototype.slice.call(body.rows).map(function (r, i) {
      return {row: r, k: key(r.cells[col]), i: i};
    });
    rows.sort(function (x, y) { return compare(x.k, y.k, dir) || x.i - y.i; });
    rows.forEach(function (x) { body.appendChild(x.row); });
  }
  function addFilter(table, n) {
    var box = document.createElement("div");
    box.className = "tfilter";
    var input = document.createElement("input");
    input.type = "search";
    input.placeholder = "filter rows (words, e.g. torch bf16)";
    input.setAttribute("aria-label", "filter the rows of this table");
    var count = document.createElement("span");
    count.className = "count";
    count.textContent = n + " rows";
    box.appendChild(input);
    box.appendChild(count);
    var at = table.parentNode.classList.contains("scroll") ? table.parentNode : table;
    at.parentNode.insertBefore(box, at);
    input.addEventListener("input", function () {
      var words = input.value.toLowerCase().split(/\\s+/).filter(Boolean), shown = 0;
      Array.prototype.forEach.call(table.tBodies[0].rows, function (r) {
        var text = (r.textContent || "").toLowerCase();
        var ok = words.every(function (w) { return text.indexOf(w) >= 0; });
        r.classList.toggle("hidden", !ok);
        shown += ok ? 1 : 0;
      });
      count.textContent = words.length ? shown + " of " + n + " rows" : n + " rows";
    });
  }
  function setUp(table) {
    if (!table.tHead || !table.tBodies[0] || table.classList.contains("envt")) { return; }
    var heads = table.tHead.rows[0].cells;
    Array.prototype.forEach.call(heads, function (th, col) {
      th.classList.add("sortable");
      th.tabIndex = 0;
      th.setAttribute("title", "sort by this column");
      th.addEventListener("click", function () { sortTable(table, col, th); });
      th.addEventListener("keydown", function (e) {
        if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sortTable(table, col, th); }
      });
    });
    var n = table.tBodies[0].rows.length;
    if (n > FILTER_MIN_ROWS) { addFilter(table, n); }
  }
  function narrowPlots() {
    if (!window.matchMedia || !window.matchMedia("(max-width: " + NARROW_PX + "px)").matches) {
      return;
    }
    Array.prototype.forEach.call(document.querySelectorAll(".js-plotly-plot"), function (gd) {
      var upd = {"legend.orientation": "h", "legend.x": 0, "legend.xanchor": "left",
        "legend.y": -0.22, "legend.yanchor": "top", "margin.r": 8, "margin.l": 48,
        "margin.t": 64};
      ((gd.layout && gd.layout.annotations) || []).forEach(function (a, i) {
        if (a.yref === "paper" && a.y >= 1) { upd["annotations[" + i + "].font.size"] = 10; }
      });
      window.Plotly.relayout(gd, upd);
    });
  }
  function ready() {
    Array.prototype.forEach.call(document.querySelectorAll("main table"), setUp);
    narrowPlots();
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", ready);
  } else { ready(); }
})();
""".replace("@FILTER_MIN_ROWS@", str(FILTER_MIN_ROWS)).replace("@NARROW_PX@", str(NARROW_PX))

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="dlperf">
<title>{title}</title>
<style>{css}</style>
<script src="{plotly_src}"></script>
<script>{plotly_missing}</script>
</head>
<body>
<header class="top"><h1>{title}</h1><div class="sub">{subtitle}</div>
<div class="badges">{badges}</div></header>
<nav class="toc">{toc}</nav>
<main>
{body}
</main>
<script>{table_js}</script>
</body>
</html>
"""
