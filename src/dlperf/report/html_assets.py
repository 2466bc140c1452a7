"""The HTML report's style sheet and page frame (:mod:`dlperf.report.html`): no external
fonts, scripts or images, so the page opens without a network."""

from __future__ import annotations

__all__ = ["CSS", "PAGE"]

CSS = """
:root { --fg:#1f2937; --muted:#6b7280; --line:#e5e7eb; --bg:#f7f8fa; --card:#fff;
  --ok:#15803d; --okbg:#dcfce7; --fail:#b91c1c; --failbg:#fee2e2; --warn:#b45309;
  --warnbg:#fef3c7; --accent:#0072b2; }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--fg);
  font:14px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif; }
header.top { background:#0f172a; color:#f8fafc; padding:18px 32px 14px; }
header.top h1 { margin:0 0 6px; font-size:22px; font-weight:650; }
header.top .sub { color:#cbd5e1; font-size:13px; }
nav.toc { position:sticky; top:0; z-index:10; background:#fff; border-bottom:1px solid var(--line);
  padding:8px 32px; font-size:13px; white-space:nowrap; overflow-x:auto; }
nav.toc a { color:var(--accent); text-decoration:none; margin-right:18px; }
main { max-width:1320px; margin:0 auto; padding:18px 32px 48px; }
section.card { background:var(--card); border:1px solid var(--line); border-radius:10px;
  padding:16px 20px; margin:0 0 18px; box-shadow:0 1px 2px rgba(0,0,0,.04); }
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
.env div.v { font-weight:500; word-break:break-word; }
.env .item { padding:4px 0; border-bottom:1px dashed var(--line); }
code, pre { font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace; font-size:12px; }
code.flag { background:#eef2ff; color:#3730a3; border-radius:4px; padding:0 4px; margin:0 3px 3px 0;
  display:inline-block; }
pre.err { white-space:pre-wrap; background:#fff7f7; border:1px solid #fecaca; border-radius:6px;
  padding:8px 10px; margin:4px 0 12px; max-height:220px; overflow:auto; }
.scroll { overflow-x:auto; }
table { border-collapse:collapse; width:100%; font-size:13px; margin:6px 0 10px; }
th, td { padding:5px 9px; border-bottom:1px solid var(--line); text-align:left;
  vertical-align:top; }
th { background:#f1f5f9; font-weight:600; position:sticky; top:0; }
tbody tr:nth-child(even) { background:#fafbfc; }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; white-space:nowrap; }
td.nw { white-space:nowrap; }
table.envt tbody th { background:#f8fafc; width:14%; font-weight:600; color:var(--muted); }
table.envt tr.differs td { background:var(--warnbg); }
tr.failed td { background:var(--failbg); }
tr.warned td:first-child { box-shadow:inset 3px 0 0 var(--warn); }
.st-ok { color:var(--ok); font-weight:600; }
.st-fail { color:var(--fail); font-weight:600; }
.w { color:var(--warn); }
ul.warn { margin:2px 0 0 16px; padding:0; color:var(--warn); font-size:12px; }
.note { color:var(--muted); font-size:12.5px; }
.plot { margin:4px 0 14px; border:1px solid var(--line); border-radius:8px; padding:6px 4px 2px; }
.ptitle { font-weight:600; font-size:14px; padding:2px 8px 0; }
details.w summary { color:var(--warn); font-size:12px; }
details summary { cursor:pointer; color:var(--accent); }
.md img { max-width:100%; height:auto; }
.md table { width:auto; }
"""

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="dlperf">
<title>{title}</title>
<style>{css}</style>
<script>{plotlyjs}</script>
</head>
<body>
<header class="top"><h1>{title}</h1><div class="sub">{subtitle}</div>
<div class="badges">{badges}</div></header>
<nav class="toc">{toc}</nav>
<main>
{body}
</main>
</body>
</html>
"""
