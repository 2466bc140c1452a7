"""``dlperf merge FILE... --db DB``: combine results files into one."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dlperf.cli import common
from dlperf.cli.common import check_db, guard
from dlperf.errors import ConfigError
from dlperf.outputs import shown_path


def merge(
    sources: Annotated[list[str], typer.Argument(metavar="FILE...", help="Results files to add (e.g. the copies that two machines or two device calls wrote); read, not changed.")],
    db: Annotated[str, typer.Option(help="Results file that receives them (created if missing; its own rows are kept). Required.")],
) -> None:
    """Combine results files into --db: every result with its raw samples once, in order of measurement, so tables keep showing each point's newest run. --db is rewritten in one SQLite transaction (an error or a kill leaves it as it was; a sweep writing into it waits, then goes on); resume a sweep from the merged file."""
    def body() -> None:
        from dlperf.results.merge import merge_stores

        check_db(db, must_exist=False, write=True)
        for s in sources:
            if Path(s).is_dir():
                raise ConfigError(f"source {s!r} is a folder; give a results file")
            if not Path(s).exists():
                raise ConfigError(f"results file {s!r} to merge does not exist; give an "
                                  "existing file")
            check_db(s, must_exist=True)
        summary = merge_stores(db, sources)
        for src, n in summary["added"].items():
            profs = (f", {n['profiles']} device profile(s)" if n.get("profiles") else "")
            common.err.print(f"{shown_path(src)}: {n['results']} new result(s), "
                             f"{n['collectives']} new "
                             f"collective run(s), {n['sweeps']} new sweep record(s){profs}",
                             highlight=False)
        common.err.print(f"{shown_path(db)} now holds {summary['results']} results "
                         f"({summary['samples']} "
                         f"raw samples), {summary['collectives']} collective runs and "
                         f"{summary['sweeps']} sweep records", highlight=False)

    guard(body)
