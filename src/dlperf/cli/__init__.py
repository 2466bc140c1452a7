"""The ``dlperf`` command line: the only argv parser; thin, calls library functions.

One module per command (``run``, ``sweep``, ``list_``, ``results``, ``report``, ``compare``,
``allreduce``, ``merge``, ``predict``, ``calibrate``, ``env``, ``data``), what they share in
:mod:`dlperf.cli.common`; this module assembles :data:`app` (the ``dlperf`` entry point,
``dlperf.cli:app``). A user error (:class:`~dlperf.errors.DlperfError`) prints one clear
message and exits with status 2; nothing already stored is lost.
"""

from __future__ import annotations

import typer

# The command modules by name (their functions are not bound here: the package's attributes
# stay the modules, e.g. dlperf.cli.list_ for a test to patch).
from dlperf.cli import (
    allreduce,
    calibrate,
    compare,
    data,
    env,
    list_,
    merge,
    predict,
    report,
    results,
    run,
    streams,
    sweep,
)

streams.make_safe()  # a terminal without UTF-8 gets ASCII, not a UnicodeEncodeError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Benchmark deep-learning training: time per iteration, throughput, "
                       "memory, over models, frameworks, devices, precisions and batch sizes.")


def version_text() -> str:
    """``dlperf 0.1.0 (git 466ebcf, modified; Python 3.11.7)``: the package version, the
    commit of a source checkout (:func:`dlperf.env.git_sha`) and the interpreter."""
    import platform

    import dlperf
    from dlperf.env import git_sha

    g = git_sha()
    where = (f"git {g['sha'][:7]}{', modified' if g.get('dirty') else ''}; " if g.get("sha")
             else "")
    return f"dlperf {dlperf.__version__} ({where}Python {platform.python_version()})"


def _version(value: bool) -> None:
    if value:
        typer.echo(version_text())
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print dlperf's version and exit.")) -> None:
    """Benchmark deep-learning training (see the commands below)."""


app.command("run")(run.run)
app.command("sweep", help=sweep.HELP)(sweep.sweep)
app.command("list")(list_.list_)
app.command("results")(results.results)
app.command("report")(report.report)
app.command("compare", help=compare.HELP,
            context_settings={"allow_extra_args": True, "ignore_unknown_options": True}
            )(compare.compare)
app.command("allreduce")(allreduce.allreduce)
app.command("merge")(merge.merge)
app.command("predict")(predict.predict)
app.command("calibrate")(calibrate.calibrate)
app.add_typer(data.data_app, name="data")
app.command("env")(env.env)

def main() -> None:  # pragma: no cover
    """Entry point for ``python -m dlperf``."""
    app()


__all__ = ["app", "main", "version_text"]
