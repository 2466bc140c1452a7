"""``dlperf report``: a Markdown report with plots from a results file (its sections:
:data:`dlperf.report.sections.SECTIONS`), and a self-contained interactive HTML report beside
it (:mod:`dlperf.report.html`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dlperf.cli import common
from dlperf.cli.common import check_db, check_out_dir, guard, split
from dlperf.errors import unknown_choice
from dlperf.outputs import shown_path

#: Report formats: ``md`` (report.md + PNGs, for terminals and diffs), ``html`` (report.html).
FORMATS = ("md", "html")


def report(
    db: Annotated[str, typer.Option(help="Results file, or a folder of them (its *.db read as one).")] = common.DEFAULT_DB,
    output: Annotated[Path, typer.Option("--output", "-o", help="Folder for report.md and the PNG plots, and report.html.")] = Path("dlperf-report"),
    title: Annotated[str, typer.Option(help="Report title.")] = "dlperf report",
    target_loss: Annotated[float | None, typer.Option(help="Target loss of the convergence section (default: the one stored with each run).")] = None,
    format: Annotated[str, typer.Option("--format", "-f", help="md (report.md + PNGs), html (one self-contained report.html with interactive plots), or md,html (both).")] = "md,html",
    force: Annotated[bool, typer.Option("--force", help="Replace files in the folder under the report's names (report.md, report.html, *.png) that are not an earlier report's (never a database).")] = False,
) -> None:
    """Write a Markdown report (table + plots) and an HTML report from a results file."""
    def body() -> None:
        from dlperf.report.sections import write_full_report

        formats = split(format, "format")
        for f in formats or [""]:
            if f not in FORMATS:
                raise unknown_choice("report format", f, FORMATS)
        common.check_target_loss(target_loss)
        check_db(db, must_exist=True, folder=True)
        check_out_dir(output, "--output", db, title=title, force=force)
        from dlperf.report.drawing import drawing_aside
        from dlperf.report.reuse import reusing_computations

        paths = []
        # report.md and report.html: each section computed once; the PNGs drawn by worker
        # processes meanwhile (all written when the block ends; report.md has a plot per model)
        with reusing_computations(), drawing_aside(prestart="md" in formats):
            if "md" in formats:
                paths.append(write_full_report(db, output, title, target_loss))
            if "html" in formats:
                from dlperf.report.html import write_html_report

                paths.append(write_html_report(db, output, title, target_loss))
        for path in paths:
            common.out.print(f"report: {shown_path(path)}", markup=False, highlight=False)

    guard(body)
