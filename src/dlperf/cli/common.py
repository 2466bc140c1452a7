"""What the ``dlperf`` commands share: the consoles, flag parsing and checks, the error guard,
option groups, and running a list of points (``run`` and ``sweep``).

A user error (:class:`~dlperf.errors.DlperfError`, or a file that cannot be written or read)
prints one clear message and exits with status 2 (:func:`guard`); nothing already stored is
lost. Command modules read :data:`out` and :data:`err` through this module (``common.out``), so
a test can replace them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import re
import signal
import sys
import threading
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from dlperf.errors import ConfigError, DlperfError
from dlperf.outputs import OutputRefused, check_target, same_file, shown_path, write_output

if typing.TYPE_CHECKING:
    from dlperf.results.schema import RunRecord

#: The width of the results' console off a terminal (a pipe, a file, a log) when $COLUMNS is
#: not set: rich's default, 80, would stack every results table; 160 holds a CPU run's table
#: whole (its empty GPU columns are dropped: :func:`dlperf.report.terminal.fit_table`).
PIPE_WIDTH = 160


def console_width(is_tty: bool, environ: Any = None) -> int | None:
    """The width of the results' console: ``$COLUMNS`` where it is a positive integer (also
    on a terminal), else the terminal's own (None: rich asks it), else :data:`PIPE_WIDTH`."""
    env = os.environ if environ is None else environ
    cols = str(env.get("COLUMNS") or "").strip()
    if cols.isdigit() and int(cols) > 0:
        return int(cols)
    return None if is_tty else PIPE_WIDTH


# Off a terminal, lines of text stay whole (soft wrap: a log or a test reads them as printed);
# tables still fit the width.
out = Console(width=console_width(sys.stdout.isatty()), soft_wrap=not sys.stdout.isatty())
# Off a terminal rich would wrap at 80 columns: per-point result lines stay whole in logs.
err = Console(stderr=True, width=None if sys.stderr.isatty() else 250)


def message_width() -> int | None:
    """The width an error message is wrapped at (:func:`wrapped`), read when it is printed:
    ``$COLUMNS`` where it is a positive integer, else the terminal's (``err``'s own), else
    250 (a log or a pipe keeps lines whole). Read at each message, not when this module is
    imported: a process that sets ``$COLUMNS`` for one command does not fix every later
    message's width."""
    return console_width(True) or err.width


#: A suggested command inside a message: ``dlperf CMD`` and/or a run of ``--flag [value]``
#: (``--framework jax --mode xla``), kept on one line by :func:`wrapped`.
_COMMAND = re.compile(r"(?:dlperf [a-z][\w-]*(?: |$))?--[\w-]+(?:[ =](?!-)[^\s;,()]+)?"
                      r"(?: (?:\.\.\.|-[\w]|--[\w-]+)(?:[ =](?!-)[^\s;,()]+)?)*")


def wrapped(text: str, width: int | None, indent: str = "  ") -> str:
    """``text`` wrapped at ``width`` columns (None: not wrapped), its own lines kept, never
    breaking inside a suggested command (:data:`_COMMAND`: ``--framework jax --mode xla``
    stays whole; a command longer than the width gets a line of its own). Continuation lines
    are indented by ``indent``."""
    import textwrap

    if not width:
        return text
    out = []
    for line in text.split("\n"):
        glued = _COMMAND.sub(lambda m: m.group(0).replace(" ", "\x00"), line)
        parts = textwrap.wrap(glued, width=max(width, 20), subsequent_indent=indent,
                              break_long_words=False, break_on_hyphens=False) or [""]
        out += [x.replace("\x00", " ") for x in parts]
    return "\n".join(out)


DEFAULT_DB = "dlperf-results.db"

#: Help of ``--nccl-nvls`` (run, sweep, allreduce).
NVLS_HELP = ("NCCL's NVLink SHARP (NVLS) algorithms for multi-GPU runs: default (NCCL decides: on "
             "where the system has NVLink multicast) or off (NCCL_NVLS_ENABLE=0, and "
             "multicast off for PyTorch symmetric memory and NVSHMEM: a machine whose "
             "multicast does not work needs it). Recorded with each result (env.env).")

#: Printed under a breakdown table (``dlperf run --breakdown`` and ``dlperf results``).
BREAKDOWN_LEGEND = ("t_f/t_b/t_u marked * come from the profiler trace (a step compiled as one "
                    "program); `!`: phases and fused step differ by over 3% (reason in the "
                    "warnings). Op classes: dlperf results --op-classes")


def split(value: str | None, flag: str | None = None) -> list[str]:
    """The items of the comma-separated list of flag ``--{flag}``: ``"a, b"`` -> ``["a",
    "b"]``; ``[]`` for None or empty.

    Raises:
        ConfigError: an empty item (``8,,32``, a comma at either end): a typo that would
            silently drop a value, naming the flag and the list.
    """
    if not value:
        return []
    items = [v.strip() for v in value.split(",")]
    if any(not v for v in items):
        name = f"--{flag} " if flag else ""
        example = ",".join(v for v in items if v) or "a,b"
        raise ConfigError(f"{name}{value!r} has an empty item (two commas in a row, or a comma "
                          f"at an end); give the values separated by single commas, e.g. "
                          f"{name}{example}")
    return items


def ints(value: str, what: str, low: int = 1) -> list[int]:
    """The comma-separated integers of flag ``--{what}``, each ``>= low``.

    Raises:
        ConfigError: a value that is not an integer, is below ``low``, an empty item, or no
            value at all.
    """
    vals = []
    for v in split(value, what):
        try:
            n = int(v)
        except ValueError:
            raise ConfigError(f"--{what}: {v!r} is not an integer; give e.g. --{what} 16,32,64") from None
        if n < low:
            raise ConfigError(f"--{what}: {n} must be >= {low}")
        vals.append(n)
    if not vals:
        raise ConfigError(f"--{what}: give at least one value, e.g. --{what} 32")
    return vals


def check_target_loss(value: float | None) -> None:
    """``--target-loss`` is a finite number when given (NaN and infinities reached the
    convergence section as a raw ``ValueError``).

    Raises:
        ConfigError: naming the value.
    """
    import math

    if value is not None and not math.isfinite(value):
        raise ConfigError(f"--target-loss {value}: give a finite loss value, e.g. "
                          "--target-loss 2.0 (or leave it out for the one stored with each run)")


def _stdout_broken(e: OSError) -> bool:
    """Whether ``e`` (an error without a file name) came from writing standard output (a full
    device, a closed pipe): raised inside a console printing to it (:data:`out`), on a line
    of dlperf's that writes to it (``sys.stdout.write(``, ``typer.echo(``), or flushing it
    fails too. What it still held is then dropped (standard output pointed at
    ``os.devnull``) so the exit's own flush is quiet."""
    import linecache

    from_stdout = False
    tb = e.__traceback__
    while tb is not None and not from_stdout:
        s = tb.tb_frame.f_locals.get("self")
        line = linecache.getline(tb.tb_frame.f_code.co_filename, tb.tb_lineno)
        from_stdout = (s is out or s is sys.stdout
                       or (isinstance(s, Console) and getattr(s, "file", None) is sys.stdout)
                       or "sys.stdout.write(" in line or "typer.echo(" in line)
        tb = tb.tb_next
    if not from_stdout:
        try:
            sys.stdout.flush()
            return False
        except OSError:
            pass
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):
        pass
    return True


def guard(fn: Callable[[], Any]) -> Any:
    """Run a command body; a user error (DlperfError, or a file that cannot be written or
    read) -> one message and exit 2. An SQLite error that escaped the store's own messages
    (:mod:`dlperf.results.dbfile`) is worded the same way, never a traceback."""
    import sqlite3
    import warnings

    def show(message: Any, category: Any, filename: str, lineno: int, file: Any = None,
             line: str | None = None) -> None:  # a warning is one line, as an error is
        err.print(f"[yellow]warning:[/] {escape(shown_path(str(message), lines=True))}",
                  highlight=False)

    try:
        with warnings.catch_warnings():
            warnings.showwarning = show  # restored on leaving
            return fn()
    except DlperfError as e:
        text = wrapped("error: " + shown_path(str(e), lines=True), message_width())
        err.print(f"[bold red]error:[/]{escape(text[len('error:'):])}", highlight=False,
                  soft_wrap=True)
        raise typer.Exit(2) from None
    except OSError as e:
        if not getattr(e, "filename", None) and _stdout_broken(e):
            from dlperf.outputs import write_failed

            err.print(f"[bold red]error:[/] {escape(str(write_failed(e, 1)))}", highlight=False)
            raise typer.Exit(2) from None
        where = f" {e.filename!r}" if getattr(e, "filename", None) else ""
        err.print(f"[bold red]error:[/] cannot use{escape(where)}: "
                  f"{escape(shown_path(str(e.strerror or e), lines=True))}; "
                  "give another path",
                  highlight=False)
        raise typer.Exit(2) from None
    except sqlite3.Error as e:
        err.print(f"[bold red]error:[/] the results file could not be used "
                  f"({escape(shown_path(str(e), lines=True))}); "
                  "it may be damaged or locked: nothing stored in it was changed; check it "
                  "(sqlite3 FILE 'PRAGMA integrity_check'), or give another --db path",
                  highlight=False)
        raise typer.Exit(2) from None


def spec_bounded(body: Callable[[], Any], timeout_s: float) -> Any:
    """``body()`` with ``file:`` models' specs made in a child process stopped after
    ``timeout_s`` (:mod:`dlperf.zoo.sources.custom.isolated`): the user's file is imported
    while points are validated, before any worker (and its ``--timeout``) exists. A limit
    that is not positive is refused by the config's own check, so it is not applied here."""
    from dlperf.zoo.sources.custom.isolated import bounded

    if not timeout_s > 0:
        return body()
    with bounded(timeout_s):
        return body()


def check_output(path: str | Path | None, flag: str, *dbs: str | Path | None,
                 kind: str | None = None, force: bool = False) -> None:
    """An output file (``-o``) must not be one of the results files ``dbs`` read or written by
    the same command (``dlperf results --db r.db -o r.db`` replaced the database with CSV), a
    folder, or (with ``kind``, :data:`dlperf.outputs.KINDS`) a database or a path in a missing
    folder: checked before the command works (:func:`dlperf.outputs.check_target`); whether an
    existing file is an earlier output of that kind is checked when it is written
    (:func:`write_file`).

    Raises:
        ConfigError: naming the path and what to give instead.
    """
    if path is None:
        return
    if kind is None:
        for db in dbs:
            if db is not None and same_file(path, db):
                raise OutputRefused(f"{flag} {str(path)!r} is the results file {str(db)!r}: "
                                    "writing there would destroy it; give another file for "
                                    f"{flag}")
        return
    check_target(path, kind, None, flag=flag, force=force, protect=dbs)


def write_file(path: str | Path, text: str | bytes, kind: str, flag: str, *,
               force: bool = False, protect: tuple[str | Path | None, ...] = ()) -> Path:
    """Write a command's output file through the one door (:func:`dlperf.outputs.
    write_output`: never over a results file, a database or a file of another kind without
    ``--force``; atomically).

    Raises:
        ConfigError: the file may not be written (the message says why and what to do).
    """
    return write_output(path, text, kind, flag=flag, force=force, protect=protect)


#: Files a report folder gets: report.md, report.html and plots (``*.png``).
_REPORT_FILES, _REPORT_SUFFIXES = ("report.md", "report.html"), (".png",)


def check_out_dir(path: str | Path | None, flag: str, db: str | Path | None = None, *,
                  title: str = "dlperf report", force: bool = False) -> None:
    """A report folder must be a folder (or not exist yet), and with ``db`` the results file
    must not be one of the files the report writes there (report.md, report.html, ``*.png``).
    Files already there under those names must be an earlier report's (:func:`dlperf.outputs.
    check_target`: ``report.md`` starting with the heading ``# {title}``, ``report.html`` with
    dlperf's generator tag, ``*.png`` images), unless ``force``; a database, never; and the
    plotly.js beside report.html must be the one dlperf writes, ``--force`` or not
    (:func:`dlperf.report.html.check_plotly_js`).

    Checked before anything is measured: an empty path, a file, or a path under a file (a
    folder that could never be made there) would otherwise fail only after the run.

    Raises:
        ConfigError: naming the path and what to give instead.
    """
    _check_out_dir(path, flag, db)
    if path is None or not Path(path).is_dir():
        return
    folder = Path(path)
    check_target(folder / "report.md", "markdown", f"# {title}\n", flag=flag, force=force,
                 protect=(db,))
    check_target(folder / "report.html", "html", "", flag=flag, force=force, protect=(db,))
    for png in sorted(folder.glob("*.png")):
        check_target(png, "png", "", flag=flag, force=force, protect=(db,))
    for js in sorted(folder.glob("plotly-*.min.js")):  # report.html's plotly.js, kept
        from dlperf.report.html import check_plotly_js

        check_plotly_js(js)


def _check_out_dir(path: str | Path | None, flag: str, db: str | Path | None = None) -> None:
    """:func:`check_out_dir`'s checks of the folder itself and of the results file in it."""
    if path is not None and not str(path).strip():
        raise ConfigError(f"{flag} is empty; give a folder for the report (e.g. {flag} "
                          "dlperf-report), or leave the flag out")
    if path is not None and Path(path).exists() and not Path(path).is_dir():
        raise ConfigError(f"{flag} {str(path)!r} is a file; give a folder for the report")
    if path is not None and not Path(path).exists():
        above = next((p for p in Path(path).absolute().parents if p.exists()), None)
        if above is not None and not above.is_dir():
            raise ConfigError(f"{flag} {str(path)!r} is under {str(above)!r}, which is a "
                              "file, not a folder: the report folder cannot be made there; "
                              "give another folder")
    if path is None or db is None:
        return
    dbp = Path(db)
    inside = same_file(dbp.parent, path) if dbp.parent.exists() else False
    if inside and (dbp.name in _REPORT_FILES or dbp.suffix.lower() in _REPORT_SUFFIXES
                   or any(same_file(Path(path) / n, dbp) for n in _REPORT_FILES)):
        raise ConfigError(f"the results file {str(db)!r} is in the report folder {flag} "
                          f"{str(path)!r} under a name the report writes; give another folder "
                          f"for {flag}, or rename the results file")


def check_db(path: str, must_exist: bool, folder: bool = False, *, flag: str = "--db",
             write: bool = False) -> None:
    """A results file: not a folder (unless ``folder``: then a folder of results files, read
    as one: :func:`dlperf.results.merge.open_results`); with ``must_exist``, an existing,
    non-empty file; with ``write``, one this process can write (:func:`check_db_writable`).
    ``flag``: the argument as the user gave it in messages (``--db``, or a positional name
    such as ``BASE``).

    Raises:
        ConfigError: naming the path and what to give instead.
        WriteFailed: (``write``) the file or its folder refuses writing, with the cause.
    """
    p = Path(path)
    if p.is_dir() and folder:
        from dlperf.results.dbfile import results_files

        for f in results_files(p):
            check_db(f, must_exist, flag=flag)
        return
    if p.is_dir():
        raise ConfigError(f"{flag} {path!r} is a folder; give a results file, e.g. "
                          f"{shown_path(path)}/results.db")
    if must_exist and not p.is_file():
        raise ConfigError(f"results file {path!r} does not exist; run `dlperf run ... --db "
                          f"{shown_path(path)}` first")
    if must_exist and p.stat().st_size == 0:  # reading must not turn it into an empty store
        raise ConfigError(f"results file {path!r} is empty (0 bytes), not a dlperf results "
                          f"database; run `dlperf run ... --db {shown_path(path)}` to fill it, or give "
                          f"another {flag} path")
    if write:
        check_db_writable(path)


def check_db_writable(path: str | Path) -> None:
    """Refuse a results file this process cannot write, before anything is measured: an
    existing file must open for reading and writing, and the folder that will hold it (the
    nearest existing one: the store makes the missing ones) must take a new file (SQLite
    writes its journal beside it). Probed with real opens (a temporary file is made and
    removed), so the message names the system's cause: a read-only file system (``EROFS``),
    no permission (``EACCES``), a full device.

    Raises:
        WriteFailed: :func:`dlperf.outputs.write_failed`'s message for the refused open.
    """
    import tempfile

    from dlperf.outputs import write_failed

    p = Path(path).absolute()
    if p.is_file():
        try:
            os.close(os.open(p, os.O_RDWR))
        except OSError as e:
            raise write_failed(e, path) from None
    above = next((d for d in (p.parent, *p.parent.parents) if d.exists()), None)
    if above is None or not above.is_dir():
        return  # a file where a folder should be: the store's own message says so
    try:
        fd, probe = tempfile.mkstemp(prefix=".dlperf-probe-", dir=above)
    except OSError as e:
        raise write_failed(e, path, folder=above) from None
    os.close(fd)
    os.unlink(probe)


def check_endpoint(endpoint: str) -> None:
    """``HOST:PORT`` with a port in 1..65535; ConfigError otherwise."""
    host, _, port = endpoint.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--rdzv-endpoint {endpoint!r} is not HOST:PORT; give e.g. "
                          "node0.example.org:29500 or 127.0.0.1:29500")


def print_table(table: Any) -> None:
    """A rich table on :data:`out`, fitted to its width (:func:`dlperf.report.terminal.
    fit_table`: empty columns dropped, words never split); off a terminal drawn as plain
    lines (:func:`dlperf.report.terminal.plain_fast`: the same characters, ten times
    faster)."""
    from dlperf.report.terminal import fit_table, plain_fast

    out.print(plain_fast(fit_table(table, out.width)), soft_wrap=False)


def print_markdown(text: str) -> None:
    """Markdown tables drawn as tables fitted to the terminal's width
    (:func:`dlperf.report.terminal.markdown_blocks`); piped or redirected, the Markdown itself
    (so ``dlperf results --compare ... > x.md`` writes a Markdown file)."""
    if sys.stdout.isatty():
        from dlperf.report.terminal import markdown_blocks

        for block in markdown_blocks(text, out.width):
            out.print(block)
    else:
        sys.stdout.write(text)


def grouped(**groups: type) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: a command whose flags are the fields of dataclasses, one per group.

    Each group is a dataclass whose fields are ``Annotated[type, typer.Option(...)]`` with a
    default; the decorated function receives one instance per group (by the keyword given
    here), typer sees the fields as the command's flags, in order.
    """
    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        params = []
        for cls in groups.values():
            hints = typing.get_type_hints(cls, include_extras=True)
            params += [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY,
                                         default=f.default, annotation=hints[f.name])
                       for f in dataclasses.fields(cls)]

        def command(**flags: Any) -> Any:
            return fn(**{name: cls(**{f.name: flags[f.name] for f in dataclasses.fields(cls)})
                         for name, cls in groups.items()})

        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command.__name__, command.__doc__ = fn.__name__, fn.__doc__
        return command
    return decorate


def print_warning_lines(recs: list[Any]) -> None:
    """Under a results table: one line per result with warnings (the table's ``⚠ N``),
    :func:`dlperf.report.tables.warning_lines`, each wrapped to the console's width (words
    whole, continuation lines indented) like the table above it."""
    import textwrap

    from dlperf.report.tables import warning_lines

    for line in warning_lines(recs):
        text = textwrap.fill(line, width=max(out.width, 20), subsequent_indent="  ",
                             break_long_words=False, break_on_hyphens=False)
        out.print(text, markup=False, highlight=False, style="yellow")


def _print_outcome(rows: list[dict[str, Any]], points: list[Any]) -> None:
    """The results table of this call's points (store rows), their breakdown and repeats
    tables."""
    from dlperf.report.breakdown import breakdown_table
    from dlperf.report.tables import results_table
    from dlperf.results.view import as_records

    recs = as_records(rows)
    print_table(results_table(recs))
    print_warning_lines(recs)
    bt = breakdown_table(recs)
    if bt is not None:
        print_table(bt)
        out.print(BREAKDOWN_LEGEND, highlight=False)
    if any(p.measure.repeat for p in points):
        from dlperf.report.compare import repeat_runs, repeats_markdown

        reps = repeat_runs(recs)
        if reps:
            print_markdown(repeats_markdown(reps))


def print_glance(store: Any, rows: list[dict[str, Any]]) -> None:
    """After the results of a run or sweep: the relative summary when it measured several
    modes, frameworks or precisions (:mod:`dlperf.report.glance`) and the batch-size advice
    when it varied the batch size (:mod:`dlperf.report.batches`); nothing otherwise."""
    from dlperf.report.batches import advice_lines, batch_advice
    from dlperf.report.glance import relative_summary, summary_lines
    from dlperf.results.store import record_of

    if len(rows) < 2:
        return
    recs = [record_of(r, store.samples(r["id"])) for r in rows]
    for line in summary_lines(relative_summary(recs)) + advice_lines(batch_advice(recs)):
        out.print(line, markup=False, highlight=False)


def choose_threads_once(points: list[Any], db: str | None = None,
                        rechoose: bool = False, echo: bool = True) -> Any:
    """The thread policy's choice for the CPU points without ``--threads``, printed once;
    None when no point is such (then nothing is measured). The choice is made once per
    results file: the one ``db``'s points were measured with (:func:`dlperf.resume.
    stored_thread_choice`) is kept, so a file's points stay comparable; else (none stored,
    another count of usable CPUs, or ``rechoose``: ``--rechoose-threads``) it is measured now
    (:func:`dlperf.env.choose_threads`), with a warning where it differs from the file's.
    ``echo`` False: nothing is printed (``sweep --dry-run`` prints the choice its own way)."""
    from dlperf.env import choose_threads
    from dlperf.placement import thread_policy_cpus
    from dlperf.resume import auto_threads

    auto = [p for p in points if auto_threads(p)]
    if not auto:
        return None
    cpus = thread_policy_cpus(p.hardware.cpu_bind for p in auto)
    stored = _stored_choice(db)
    say = err.print if echo else (lambda *a, **k: None)
    if stored is not None and not rechoose:
        n = len(cpus) if cpus is not None else len(_usable())
        if stored.usable_cpus == n:
            say(stored.line(), markup=False, highlight=False)
            return stored
        say(f"note: this results file's thread choice was made for {stored.usable_cpus} "
            f"usable CPUs and this run has {n}: the thread policy chooses again",
            markup=False, highlight=False)
    choice = choose_threads(cpus)
    say(choice.line(), markup=False, highlight=False)
    if stored is not None and stored.threads != choice.threads:
        say(f"[yellow]warning:[/] the thread policy chose {_count(choice.threads)} now; this "
            f"results file's other CPU points ran with {_count(stored.threads)} (chosen "
            f"{stored.chosen_at}): comparisons between them compare thread counts too",
            highlight=False)
    return choice


def check_memory(points: list[Any], db: str) -> None:
    """Refuse, before anything runs, the points whose estimated memory exceeds the device's or
    the host's (:func:`dlperf.guards.memory_refusals`, from the model's spec and the peaks
    ``db`` holds at other batch sizes).

    Raises:
        ConfigError: naming each such point, its estimate and the largest batch that fits.
    """
    from dlperf.guards import memory_refusals

    stored: list[Any] = []
    if Path(db).is_file() and Path(db).stat().st_size:
        from dlperf.results.store import ResultStore

        with ResultStore(db, read_only=True) as store:
            stored = store.records(latest=False, samples=False)
    bad = memory_refusals(points, stored)
    if bad:
        shown = bad[:5] + ([f"... and {len(bad) - 5} more"] if len(bad) > 5 else [])
        raise ConfigError(f"{len(bad)} point(s) would not fit in memory; nothing was run:\n  "
                          + "\n  ".join(shown) + "\nGive smaller batch sizes, or "
                          "--no-memory-check to run them anyway (an estimate, module "
                          "dlperf.guards, can be wrong)")


def _count(threads: int | None) -> str:
    return f"{threads} thread(s)" if threads is not None else "the framework's default threads"


def _usable() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return list(range(os.cpu_count() or 1))


def _stored_choice(db: str | None) -> Any:
    """:func:`dlperf.resume.stored_thread_choice` of the results file ``db``; None when it
    does not exist yet or is empty."""
    if db is None or not Path(db).is_file() or Path(db).stat().st_size == 0:
        return None
    from dlperf.results.store import ResultStore
    from dlperf.resume import stored_thread_choice

    with ResultStore(db, read_only=True) as store:
        return stored_thread_choice(store)


class Terminated(KeyboardInterrupt):
    """SIGTERM while points run (:func:`terminated_as_interrupt`): handled as Ctrl-C is (the
    worker stopped, claims released, a message), then exit status 143 (128 + SIGTERM)."""


@contextlib.contextmanager
def terminated_as_interrupt() -> Iterator[None]:
    """While the block runs in the main thread, SIGTERM raises :class:`Terminated` (a
    KeyboardInterrupt), so ``kill PID`` stops a sweep as cleanly as Ctrl-C does."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(signum: int, frame: Any) -> None:
        raise Terminated()

    old = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def interrupted_exit(e: KeyboardInterrupt, db: str | Path, resume: bool) -> NoReturn:
    """Say that a run, sweep or gate was interrupted (or terminated: SIGTERM) and how to go
    on, then exit 130 (143 for SIGTERM)."""
    again = ("run the same command again to resume" if resume else
             "the points not reached yet still hold their earlier results, so run the "
             "same command (with --restart/--rerun) again to measure every point anew; "
             "without it they count as done")
    how = "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted"
    try:
        err.print(f"[yellow]{how}[/]: finished points are in {escape(shown_path(db))}; "
                  f"{again}")
    except KeyboardInterrupt:  # a second Ctrl-C while saying so: say it plainly
        sys.stderr.write(f"{how}: finished points are in {shown_path(db)}\n")
    raise typer.Exit(143 if isinstance(e, Terminated) else 130) from None


def execute(points: list[Any], db: str, *, sweep: str | None, resume: bool, retry_failed: bool,
            report_dir: str | None, sweep_config: dict | None = None,
            runner: Callable[[Any], RunRecord] | None = None,
            missing_ok: bool = False, rechoose_threads: bool = False,
            memory_check: bool = True, already: int = 0) -> None:
    """Check, run and store ``points``, print the results; exit 1 if every point that ran
    failed or any point is ``unavailable`` (missing data or framework: still to measure).

    ``already``: points the caller left out of ``points`` because they are stored (a tagged
    run's, :func:`dlperf.resume.resume_plan`), counted with those found stored here in the
    closing ``N run, M already in DB`` line.

    ``missing_ok`` (``dlperf sweep``): points of a missing data set are stored ``unavailable``
    and the others run, instead of refusing them all (:func:`dlperf.sweep.preflight`).
    """
    from dlperf.interrupts import deferring
    from dlperf.report.sections import write_full_report
    from dlperf.results.schema import now_iso
    from dlperf.results.store import ResultStore
    from dlperf.sweep import execute as run_points
    from dlperf.sweep import preflight
    from dlperf.tempdirs import reclaim_stale

    # Every moment of the command, not only the measuring: a signal that lands as a point is
    # stored, between points or while the summary prints is said as one during a measurement.
    try:
        with terminated_as_interrupt():
            gone = reclaim_stale()  # folders of a run or sweep killed with SIGKILL (issue 23)
            if gone:
                err.print(f"note: removed {len(gone)} temporary folder(s) left by dlperf processes "
                          f"that are gone: {', '.join(shown_path(p) for p in gone[:3])}"
                          f"{' ...' if len(gone) > 3 else ''}", markup=False, highlight=False)
            missing = preflight(points, allow_missing=missing_ok)
            if memory_check:
                check_memory(points, db)
            threads = choose_threads_once(points, db, rechoose_threads)
            # Trace folders are written after each measurement: one that cannot be made would leave
            # the point stored without its trace (and resumed as done), so they are made now; an
            # OSError is a user error (guard: exit 2, nothing run or stored).
            for d in sorted({p.measure.trace_dir for p in points if p.measure.trace_dir}):
                Path(d).expanduser().mkdir(parents=True, exist_ok=True)
            with ResultStore(db) as store:
                if sweep is not None and sweep_config is not None:
                    store.add_sweep(sweep, sweep_config, now_iso())
                with deferring():  # a result is stored whole
                    outcome = run_points(points, store, sweep=sweep, resume=resume,
                                         retry_failed=retry_failed, console=err, runner=runner,
                                         missing_data=missing, threads=threads)
                keys = {p.run_key() for p in outcome.points}
                rows = [r for r in store.rows() if r["run_key"] in keys]
                _print_outcome(rows, outcome.points)
                print_glance(store, rows)
                not_run = (f", {outcome.missing_data} not run (data missing)"
                           if outcome.missing_data else "")
                if outcome.elsewhere:
                    not_run += f", {outcome.elsewhere} measured by another process at the same time"
                err.print(f"{outcome.ran} run, {outcome.skipped + already} already in "
                          f"{shown_path(db)}, "
                          f"{outcome.failed} "
                          f"failed{not_run}", markup=False)
                if report_dir:
                    from dlperf.report.drawing import drawing_aside
                    from dlperf.report.html import write_html_report
                    from dlperf.report.reuse import reusing_computations

                    # report.md and report.html: each section once, PNGs drawn meanwhile
                    with reusing_computations(), drawing_aside(prestart=True):
                        path = write_full_report(db, Path(report_dir), "dlperf report", None)
                        html = write_html_report(db, Path(report_dir), "dlperf report", None)
                    out.print(f"report: {shown_path(html)} (interactive; open it in a browser) and "
                              f"{shown_path(path)}", markup=False, highlight=False)
            all_failed = outcome.ran and outcome.failed == outcome.ran
            if all_failed:
                err.print("[red]every point that ran failed[/]; see the errors above")
            if outcome.unavailable:
                err.print(f"[red]{outcome.unavailable} point(s) unavailable[/] (data or framework not "
                          "here; see the errors above): they are stored as such; run the same command "
                          "again once that is fixed to measure them")
            if outcome.left:
                err.print(f"[red]{outcome.left} point(s) left to another process[/] that still held "
                          "them when the wait ended (see above); run the same command again to measure "
                          "or collect them")
            if all_failed or outcome.unavailable or outcome.left:
                raise typer.Exit(1)
    except KeyboardInterrupt as e:
        interrupted_exit(e, db, resume)
