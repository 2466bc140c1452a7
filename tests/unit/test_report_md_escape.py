"""report.md escapes stored text as report.html does (issue 40): HTML in a model name, a
warning, an error or a tag stays text, a line break inside one does not break a table row, and
a pipe does not add a column; in every section, through one pass over each section's Markdown
(dlperf.report.cells.md_safe_body) and escaped cells."""

from __future__ import annotations

import re

from test_html_report import EVIL, evil_records, rec, store_of

from dlperf.report.cells import md_safe_body
from dlperf.report.sections import write_full_report


def test_no_section_of_report_md_carries_raw_html_or_a_broken_row(tmp_path):
    recs = evil_records() + [rec(EVIL, 8, framework="jax", mode="xla", tag=EVIL),
                             rec(EVIL, 16, framework="jax", mode="xla", tag=EVIL),
                             rec(EVIL, 8, repeat=1, tag="v1"), rec(EVIL, 8, repeat=2, tag="v1")]
    md = write_full_report(store_of(tmp_path / "r.db", recs), tmp_path / "out", "t", None
                           ).read_text()
    lines = md.splitlines()
    sections = [ln for ln in lines if ln.startswith("## ")]
    assert len(sections) >= 6
    assert not re.search(r"<(script|img|b)\b", md), "raw HTML from a stored text"
    for ln in lines:
        if ln.startswith("|"):
            assert ln.rstrip().endswith("|"), f"a broken table row: {ln[:120]}"
    # every row of a table has as many cells as its header (an escaped pipe is no cell)
    heads = [i for i, ln in enumerate(lines) if ln.startswith("|") and i + 1 < len(lines)
             and lines[i + 1].startswith("|-")]
    for h in heads:
        n = len(re.findall(r"(?<!\\)\|", lines[h]))
        j = h + 2
        while j < len(lines) and lines[j].startswith("|"):
            assert len(re.findall(r"(?<!\\)\|", lines[j])) == n, (lines[h], lines[j])
            j += 1


def test_md_safe_body_joins_a_broken_row_and_escapes_tags():
    body = "| a | b |\n|---|---|\n| x<script> | y\nz |\n\n<b>text</b> 3 < 4"
    assert md_safe_body(body).split("\n") == [
        "| a | b |", "|---|---|", "| x&lt;script> | y z |", "", "&lt;b>text&lt;/b> 3 < 4"]
