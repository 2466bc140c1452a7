"""``dlperf report``: a Markdown report with plots from a results file (its sections:
:data:`dlperf.report.sections.SECTIONS`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from dlperf.cli import common
from dlperf.cli.common import check_db, check_out_dir, guard


def report(
    db: Annotated[str, typer.Option(help="Results file.")] = common.DEFAULT_DB,
    output: Annotated[Path, typer.Option("--output", "-o", help="Folder for report.md and the PNG plots.")] = Path("dlperf-report"),
    title: Annotated[str, typer.Option(help="Report title.")] = "dlperf report",
    target_loss: Annotated[Optional[float], typer.Option(help="Target loss of the convergence section (default: the one stored with each run).")] = None,
) -> None:
    """Write a Markdown report (table + time-per-iteration plots) from a results file."""
    def body() -> None:
        from dlperf.report.sections import write_full_report

        check_db(db, must_exist=True)
        check_out_dir(output, "--output")
        path = write_full_report(db, output, title, target_loss)
        common.out.print(f"report: {path}")

    guard(body)
