"""``dlperf ARGS`` run in the test's own process, for the tests of what a command says and
returns rather than of the process (imported as ``from cli_here import dlperf_here``: pytest
puts this folder on ``sys.path``).

A ``python -m dlperf`` process costs 1-3 s on 2 cores (the interpreter, typer, pydantic, numpy
and the command's modules); a command that reads files, refuses its arguments or lists a dry
run does the same work here in milliseconds. Tests of the process itself (its exit on a
signal, ``$COLUMNS`` read at start, a run's worker processes, ``python -m dlperf`` as the
README gives it) keep their subprocesses.
"""

from __future__ import annotations

import os
import subprocess


def dlperf_here(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``dlperf ARGS`` through the app :func:`dlperf.cli.main` builds for them (that
    command's app, or every command's for ``--help``/``--version``), with typer's CliRunner.

    Args:
        args: the command line after ``dlperf``.
        env: variables set for the call; the whole environment is restored after it (a command
            that sets one before refusing leaves this process as it was). With
            ``DLPERF_FAKE_FRAMEWORK=1`` the fake framework is registered for the call, as a
            process started with it registers it at import, and unregistered after.

    Returns:
        A :class:`subprocess.CompletedProcess` with the exit status (``returncode``), stdout
        and stderr, as ``subprocess.run([..., "-m", "dlperf", *args], text=True)`` gives them.

    Raises:
        AssertionError: an exception other than SystemExit escaped the command (in a process,
            a traceback on stderr).
    """

    # imported before ``env`` is set: the registry reads DLPERF_FAKE_FRAMEWORK when imported
    from dlperf import frameworks, registry
    from dlperf.cli import COMMANDS, build_app

    tables = (registry.FRAMEWORKS, registry.FRAMEWORK_MODES, frameworks.ADAPTERS)
    saved, saved_tables = dict(os.environ), [dict(t) for t in tables]
    os.environ.update(env or {})
    if (env or {}).get("DLPERF_FAKE_FRAMEWORK") == "1":  # what the registry does at import
        doubles = registry.TEST_DOUBLES
        registry.FRAMEWORKS.update(doubles)
        registry.FRAMEWORK_MODES.update({k: v.modes for k, v in doubles.items()})
        frameworks.ADAPTERS.update({k: v.adapter for k, v in doubles.items()})
    try:
        r = _runner().invoke(build_app(args[0] if args and args[0] in COMMANDS else None),
                               list(args), prog_name="dlperf")
    finally:
        os.environ.clear()
        os.environ.update(saved)
        for table, was in zip(tables, saved_tables, strict=True):
            table.clear()
            table.update(was)
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    return subprocess.CompletedProcess(list(args), r.exit_code, r.stdout, r.stderr)


def _runner():
    """A CliRunner that keeps stderr apart from stdout: click < 8.2 (the dependency floors'
    click) mixes them unless ``mix_stderr=False``, an argument click >= 8.2 no longer has."""
    from typer.testing import CliRunner

    try:
        return CliRunner(mix_stderr=False)
    except TypeError:
        return CliRunner()


def cli(*args: str) -> tuple[int, str]:
    """(exit code, stdout and stderr as one line of words); an exception that is not an exit
    fails the test."""
    from typer.testing import CliRunner

    from dlperf.cli import app

    r = CliRunner().invoke(app, list(args))
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    return r.exit_code, " ".join(r.output.split())
