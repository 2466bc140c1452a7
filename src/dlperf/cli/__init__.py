"""The ``dlperf`` command line: the only argv parser; thin, calls library functions.

One module per command (``run``, ``sweep``, ``list_``, ``results``, ``report``, ``compare``,
``allreduce``, ``merge``, ``predict``, ``calibrate``, ``env``, ``data``), what they share in
:mod:`dlperf.cli.common`; this module assembles the app (:func:`build_app`; :data:`app` holds
every command) and runs it (:func:`main`, the ``dlperf`` entry point). A user error
(:class:`~dlperf.errors.DlperfError`) prints one clear message and exits with status 2;
nothing already stored is lost.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable
from typing import Any, NoReturn

import typer

from dlperf.cli import streams

streams.make_safe()  # a terminal without UTF-8 gets ASCII, not a UnicodeEncodeError

#: ``dlperf``'s commands in the order ``dlperf --help`` lists them: name -> (module of
#: :mod:`dlperf.cli`, its function or sub-app, ``command`` or ``typer``). A module is imported
#: when an app with its command is built (:func:`build_app`); the package's attributes are
#: the modules (``dlperf.cli.list_``, for a test to patch).
COMMANDS: dict[str, tuple[str, str, str]] = {
    "run": ("run", "run", "command"), "sweep": ("sweep", "sweep", "command"),
    "list": ("list_", "list_", "command"), "results": ("results", "results", "command"),
    "report": ("report", "report", "command"), "compare": ("compare", "compare", "command"),
    "allreduce": ("allreduce", "allreduce", "command"), "merge": ("merge", "merge", "command"),
    "predict": ("predict", "predict", "command"),
    "calibrate": ("calibrate", "calibrate", "command"), "data": ("data", "data_app", "typer"),
    "env": ("env", "env", "command")}
#: Commands added with settings of their own: their help text (the module's ``HELP``) and,
#: for ``compare``, unknown options passed on to its runs.
_SETTINGS: dict[str, dict[str, Any]] = {
    "compare": {"context_settings": {"allow_extra_args": True, "ignore_unknown_options": True}}}
_HELP_ATTR = {"sweep": "HELP", "compare": "HELP"}


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


def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print dlperf's version and exit.")) -> None:
    """Benchmark deep-learning training (see the commands below)."""


def option_suggestions(option: str, options: Iterable[str]) -> list[str]:
    """The options to suggest for an unknown ``option``: those of ``options`` whose names,
    without their leading dashes, are close to its (:func:`difflib.get_close_matches`,
    cutoff 0.6). Compared with the dashes, the shared ``--`` alone would make ``--bogus``
    suggest ``--gpu``."""
    from difflib import get_close_matches

    by_name: dict[str, str] = {}
    for o in options:
        by_name.setdefault(o.lstrip("-"), o)
    return [by_name[n] for n in get_close_matches(option.lstrip("-"), list(by_name))]


def _strict_suggestions() -> None:
    """The unknown-option error of Typer's click keeps only the suggestions
    :func:`option_suggestions` finds among those its parser matched with the dashes (its
    ``__init__`` wrapped once per process)."""
    try:
        import typer._click.exceptions as ce
    except ImportError:  # a Typer that uses click itself
        import click.exceptions as ce  # type: ignore[no-redef]

    init = ce.NoSuchOption.__init__
    if getattr(init, "_dlperf", False):
        return

    def wrapped(self: Any, option_name: str, message: str | None = None,
                possibilities: Iterable[str] | None = None, ctx: Any = None) -> None:
        init(self, option_name, message, None, ctx)
        self.possibilities = option_suggestions(option_name, possibilities or ()) or None

    wrapped._dlperf = True  # type: ignore[attr-defined]
    ce.NoSuchOption.__init__ = wrapped  # type: ignore[method-assign]


def build_app(only: str | None = None) -> typer.Typer:
    """The ``dlperf`` app with every command of :data:`COMMANDS`, or with the command ``only``
    alone (:func:`main`: a call of one command then imports that command's module, not the
    other commands' stores, reports and launchers; its usage, help and errors read the same).

    Raises:
        KeyError: ``only`` is not a command.
    """
    app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                      help="Benchmark deep-learning training: time per iteration, throughput, "
                           "memory, over models, frameworks, devices, precisions and batch "
                           "sizes.")
    _strict_suggestions()
    app.callback()(_root)
    for name in [only] if only is not None else COMMANDS:
        module, attr, kind = COMMANDS[name]
        mod = importlib.import_module(f"dlperf.cli.{module}")
        if kind == "typer":
            app.add_typer(getattr(mod, attr), name=name)
            continue
        settings = dict(_SETTINGS.get(name, {}))
        if name in _HELP_ATTR:
            settings["help"] = getattr(mod, _HELP_ATTR[name])
        app.command(name, **settings)(getattr(mod, attr))
    return app


def __getattr__(name: str) -> Any:
    """``dlperf.cli.app`` (every command; built on first use) and the command modules
    (``dlperf.cli.list_``), imported when first asked for."""
    if name == "app":
        globals()["app"] = built = build_app()
        return built
    if name in {m for m, _, _ in COMMANDS.values()} | {"common"}:
        return importlib.import_module(f"dlperf.cli.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: list[str] | None = None) -> None:
    """Run ``dlperf`` on ``argv`` (default: the process's arguments): a call that names a
    command first (``dlperf predict ...``) runs an app of that command alone
    (:func:`build_app`), anything else (``dlperf --help``, ``dlperf --version``) the app of
    every command."""
    args = sys.argv[1:] if argv is None else list(argv)
    if argv is None:  # the process's own command line: dlperf is its program
        import dlperf

        dlperf.OWNS_PROCESS = True
    try:
        build_app(args[0] if args and args[0] in COMMANDS else None)(args=args,
                                                                     prog_name="dlperf")
    except KeyboardInterrupt:
        _interrupted(argv is None)
    except (SystemExit, Exception) as e:
        # typer ends a command that a KeyboardInterrupt left with a silent exit 130 (typer
        # 0.29: ``Exit(130) from`` it; click's Abort, exit 1, in older versions), and Python
        # 3.11 raises one that lands in a class being made (an import) as the RuntimeError
        # "Error calling __set_name__" from it
        if _unsaid_interrupt(e):
            _interrupted(argv is None)
        raise
    finally:
        if argv is None:
            _quiet_exit()


def _interrupted(own_process: bool) -> NoReturn:
    """A Ctrl-C outside the handlers of the commands that measure (arguments being read, a
    sweep file loaded, after the summary): said, never a silent exit 130 or a traceback."""
    if own_process:
        _quiet_exit()
    sys.stderr.write("interrupted: what was stored before stays stored\n")
    raise SystemExit(130) from None


def _unsaid_interrupt(e: BaseException) -> bool:
    """Whether ``e`` ends a chain of exceptions (the one its traceback shows: ``__cause__``,
    else ``__context__`` unless raised ``from None``) that holds a ``KeyboardInterrupt``: an
    interrupt that typer or click turned into an exit without a word, or Python into another
    exception. dlperf's own interrupted exits (:func:`dlperf.cli.common.interrupted_exit`)
    are raised ``from None`` and end no such chain."""
    seen: set[int] = set()
    c: BaseException | None = e
    while c is not None and id(c) not in seen:
        seen.add(id(c))
        if isinstance(c, KeyboardInterrupt):
            return True
        c = c.__cause__ if c.__cause__ is not None else (
            None if c.__suppress_context__ else c.__context__)
    return False


def _quiet_exit() -> None:
    """The process ends now: a SIGINT that lands while it does is ignored (it would raise
    ``KeyboardInterrupt`` into the exit and end the process by the signal, without a word)."""
    import signal

    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread
        pass


__all__ = ["COMMANDS", "app", "build_app", "main", "version_text"]
