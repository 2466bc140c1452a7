"""``dlperf compare BASE NEW``: two result files (or, with ``--db F``, two tags or commits of one
file) compared point by point (:mod:`dlperf.report.regress`): NEW/BASE of the step time with a
confidence interval, significance, the op-class attribution and a one-line summary;
``--fail-if-slower 5%`` exits 1 when a point regressed (for CI)."""

from __future__ import annotations

import json
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from dlperf.cli import common
from dlperf.cli.common import check_db, check_output, guard, print_markdown, same_file, split
from dlperf.errors import ConfigError, unknown_choice
from dlperf.outputs import shown_path

FORMATS = ("table", "json")

HELP = ("Compare two result files point by point (or, with --db FILE, two tags or git commits "
        "stored in it): NEW/BASE of the median step time with a 95% CI, significance, op "
        "classes where both sides were traced, and a one-line summary. A point is judged only "
        "on a run-level interval: 2 or more runs a side (dlperf run --repeats 3), each on a "
        "quiet host, without two modes or a drift; other points are 'not judged', counted, "
        "with what would make them judgeable.\n\n"
        "For CI: dlperf compare --run BASE_DIR NEW_DIR --fail-if-slower 3% -- RUN_FLAGS "
        "measures two checkouts alternately with the dlperf run flags after -- and gates on "
        "them (docs/usage.md, 'A regression gate').\n\n"
        "Exit status: 0; with --fail-if-slower: 1 when a point is significantly slower by "
        "more than the threshold or fails in NEW only (in every run, or in some where BASE's "
        "runs did not fail, or failed less often by Fisher's exact test), 3 when a point of "
        "BASE is missing from "
        "NEW or the two share no point, 5 when a point is inconclusive (slower than the "
        "threshold by the estimate, but its interval includes 1: more rounds or a quieter "
        "host would judge it), 4 when a point run on both sides could not be judged (too "
        "few runs fit to judge, other GPU or CPU models, or it failed in BASE: it is not "
        "shown to pass), a new point failed in every run, or a results "
        "file had damaged rows (skipped), in that order; 2 for a user error.")


def _describe(name: str, recs: list[Any]) -> str:
    """``a.db: 6 runs of 2 points; commit 466ebcf0; tag 'v1'``."""
    from dlperf.report.regress import point_key_of
    from dlperf.results.history import sha_of, tag_of

    shas = sorted({s[:8] for r in recs if (s := sha_of(r))})
    tags = sorted({t for r in recs if (t := tag_of(r))})
    n_pts = len({point_key_of(r) for r in recs})
    text = f"{name}: {len(recs)} runs of {n_pts} point{'s' if n_pts != 1 else ''}"
    if shas:
        text += f"; commit{'s' if len(shas) > 1 else ''} {', '.join(shas)}"
    if tags:
        text += f"; tag{'s' if len(tags) > 1 else ''} {', '.join(repr(t) for t in tags)}"
    return text


def _sides(base: str, new: str, db: str | None, models: list[str], stores: ExitStack, *,
           gate_tags: bool = False, opened: list[tuple[str, Any]] | None = None
           ) -> tuple[Any, Any, str, str]:
    """(BASE records, NEW records, BASE's description, NEW's). With ``gate_tags`` (``--run``)
    ``base`` and ``new`` are the gate's own tags in ``db`` and a side with no runs (its
    ``dlperf run`` refused the flags: a model gone from NEW) is empty instead of an error, so
    that its points count as missing. The records read their raw samples when first asked
    for (``lazy_samples``: a point in one side only needs none), from stores that ``stores``
    closes; each store opened is appended to ``opened`` as ``(path, store)``."""
    from dlperf.results.history import match_revision, revision_of, tag_of
    from dlperf.results.store import ResultStore

    def records(path: str, flag: str = "--db") -> list[Any]:
        check_db(path, must_exist=True, flag=flag)
        store = stores.enter_context(ResultStore(path, read_only=True))
        if opened is not None:
            opened.append((path, store))
        recs = store.records(latest=False, lazy_samples=True)
        return [r for r in recs if not models or r.identity.model in models]

    if db is None:
        rb, rn = records(base, "BASE"), records(new, "NEW")
        one = same_file(base, new)  # noted once (_note_same says they are one file)
        for name, recs in ((base, rb),) if one else ((base, rb), (new, rn)):
            revs = sorted({revision_of(r) for r in recs})
            if len(revs) > 1:  # all runs are used; say so, and how to pick one revision
                common.err.print(f"note: {name} holds {len(revs)} revisions ({', '.join(revs)});"
                                 " every run of a point is used: to compare two of them, "
                                 f"dlperf compare --db {name} {revs[0]} {revs[-1]}",
                                 markup=False, highlight=False)
        return rb, rn, _describe(base, rb), _describe(new, rn)
    recs = records(db)
    if gate_tags:
        rb = [r for r in recs if tag_of(r) == base]
        rn = [r for r in recs if tag_of(r) == new]
        return rb, rn, _describe(f"{db} tag {base!r}", rb), _describe(f"{db} tag {new!r}", rn)
    wb, rb = match_revision(recs, base)
    wn, rn = match_revision(recs, new)
    return (rb, rn, _describe(f"{shown_path(db)} {wb}", rb),
            _describe(f"{shown_path(db)} {wn}", rn))


def _note_same(base: str, new: str, db: str | None) -> None:
    """A note when BASE and NEW are one file (or, with ``--db``, one revision): every point
    is then compared with itself (ratio 1, nothing significant), which is rarely meant."""
    if db is None and same_file(base, new):
        what = (f"BASE and NEW are the same file ({base})" if base == new else
                f"BASE {base} and NEW {new} are the same file")
    elif db is not None and base == new:
        what = f"BASE and NEW are the same revision ({base}) of {shown_path(db)}"
    else:
        return
    common.err.print(f"note: {what}: every point is compared with itself (ratio 1); give two "
                     "different result files, or --db FILE with two tags or commits",
                     markup=False, highlight=False)


#: The results file of ``--run`` when ``--db`` is not given.
RUN_DB = "dlperf-gate.db"


def _run_sides(base: str, new: str, db: str | None, rounds: int, base_env: list[str] | None,
               new_env: list[str] | None, resume: bool, run_args: list[str]) -> str:
    """``--run``: measure BASE_DIR and NEW_DIR alternately (:mod:`dlperf.alternate`) into the
    results file (``--db``, default :data:`RUN_DB`) under the tags ``base`` and ``new``;
    returns its path.

    Raises:
        ConfigError: a side that is not a folder, an existing results file without
            ``--resume``, bad flags after ``--`` (:func:`dlperf.alternate.check_run_flags`).
    """
    from dlperf.alternate import Side, check_run_flags, parse_env, run_rounds

    args = check_run_flags(run_args)
    for name, d in (("BASE", base), ("NEW", new)):
        if not Path(d).is_dir():
            raise ConfigError(f"--run: {name} {d!r} is not a folder; give the checkouts of the "
                              "two revisions, e.g. dlperf compare --run ../base . -- FLAGS "
                              "(git worktree add ../base main makes one)")
    path = Path(db or RUN_DB).resolve()
    if path.exists() and not resume:
        raise ConfigError(f"--run: {str(path)!r} exists; give a new --db for this gate, or "
                          "--resume to go on with an interrupted one (its runs are kept)")
    check_db(str(path), must_exist=False, write=True)
    sides = (Side("BASE", "base", Path(base).resolve(), parse_env(base_env, "--base-env")),
             Side("NEW", "new", Path(new).resolve(), parse_env(new_env, "--new-env")))
    common.err.print(f"measuring BASE ({sides[0].directory}) and NEW ({sides[1].directory}) "
                     f"alternately, {rounds} runs each, into {shown_path(path)}", markup=False,
                     highlight=False)
    try:
        with common.terminated_as_interrupt():
            run_rounds(sides, args, path, rounds,
                       echo=lambda line: common.err.print(line, markup=False, highlight=False))
    except KeyboardInterrupt as e:
        from rich.markup import escape

        how = "terminated (SIGTERM)" if isinstance(e, common.Terminated) else "interrupted"
        common.err.print(f"[yellow]{how}[/]: finished runs are in {escape(shown_path(path))}; "
                         "run the "
                         "same command with --resume to go on (its runs are kept)",
                         highlight=False)
        raise typer.Exit(143 if isinstance(e, common.Terminated) else 130) from None
    return str(path)


def _rejudge_flags(fail_if_slower: str | None, level: float, model: str | None,
                   format: str | None, output: Path | None, force: bool) -> list[str]:
    """The flags of a ``dlperf compare --run`` call that decide how its runs are judged and
    where the judgement goes (the default confidence level left out), as arguments."""
    flags = [("--fail-if-slower", fail_if_slower), ("--model", model), ("--format", format),
             ("--output", None if output is None else str(output)),
             ("--level", None if level == 0.95 else f"{level:g}")]
    return [x for k, v in flags if v is not None for x in (k, v)] + (["--force"] if force else [])


def _judging_interrupted(e: KeyboardInterrupt, db: str, flags: list[str]) -> NoReturn:
    """Say that ``dlperf compare --run`` was interrupted (or terminated: SIGTERM) after every
    round was stored, while the runs were judged, and how to judge them without running them
    again (``dlperf compare --db DB tag:base tag:new`` with the judging ``flags``); exit 130
    (143 for SIGTERM)."""
    import shlex

    from rich.markup import escape

    how = "terminated (SIGTERM)" if isinstance(e, common.Terminated) else "interrupted"
    again = shlex.join(["dlperf", "compare", "--db", shown_path(db), "tag:base", "tag:new",
                        *flags])
    try:
        common.err.print(f"[yellow]{how}[/] while judging: every run is in "
                         f"{escape(shown_path(db))}; judge them without running again: "
                         f"{escape(again)}", highlight=False)
    except KeyboardInterrupt:  # a second Ctrl-C while saying so: say it plainly
        sys.stderr.write(f"{how} while judging: every run is in {shown_path(db)}; {again}\n")
    raise typer.Exit(143 if isinstance(e, common.Terminated) else 130) from None


def compare(
    ctx: typer.Context,
    base: Annotated[str, typer.Argument(metavar="BASE", help="BASE: a results file, or with --db a tag or commit (tag:NAME / sha:PREFIX to be explicit); with --run, the folder of BASE's code.")],
    new: Annotated[str, typer.Argument(metavar="NEW", help="NEW: a results file, or with --db a tag or commit; with --run, the folder of NEW's code.")],
    db: Annotated[str | None, typer.Option(help="One results file holding both sides: BASE and NEW are then tags (dlperf run --tag) or git commits in it. With --run: where the runs go (default dlperf-gate.db).")] = None,
    run: Annotated[bool, typer.Option("--run", help="Measure first: BASE and NEW are folders (checkouts of two revisions); the dlperf run flags after -- are run in each, alternately (BASE NEW NEW BASE ...), --rounds times each, then compared. The command for CI.")] = False,
    rounds: Annotated[int, typer.Option(help="With --run: runs of every point on each side (2 or more; a point is judged on 2). 5 catches a 5% slowdown with a 3% threshold at 1% run-to-run spread (3: 96% of the time).")] = 5,
    base_env: Annotated[list[str] | None, typer.Option(help="With --run: NAME=VALUE set for BASE's runs (repeatable).")] = None,
    new_env: Annotated[list[str] | None, typer.Option(help="With --run: NAME=VALUE set for NEW's runs (repeatable).")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="With --run: go on with an interrupted gate in --db (its runs are kept).")] = False,
    fail_if_slower: Annotated[str | None, typer.Option(help="The gate: exit 1 when a judged point is significantly slower by more than this percentage, with its % sign, e.g. 5% (or fails in NEW only: in every run, or in some where BASE's runs did not or less often), 3 when a point of BASE is missing from NEW, 5 when a point is slower than this by its estimate but not significantly (inconclusive), 4 when a point (or a new point that failed in every run) could not be judged.")] = None,
    level: Annotated[float, typer.Option(help="Confidence level of the intervals.")] = 0.95,
    model: Annotated[str | None, typer.Option(help="Only these models (comma-separated).")] = None,
    format: Annotated[str | None, typer.Option("--format", "-f", help="table (Markdown) or json (default: the --output file's suffix, .json or .md; else table).")] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write to this file instead of stdout.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing --output file that is not an earlier comparison of the same format (never a database).")] = False,
) -> None:
    """Compare two result files or two tags/commits point by point (help: HELP)."""
    def body() -> int:
        from dlperf.outputs import format_for
        from dlperf.report.regress import parse_threshold

        fmt = format_for(output, format, {".json": "json", ".md": "table"}, "table")
        if fmt not in FORMATS:
            raise unknown_choice("format", fmt, FORMATS)
        kind = "json" if fmt == "json" else "markdown"
        threshold = parse_threshold(fail_if_slower)
        if ctx.args and not run:
            raise ConfigError(f"unexpected arguments {' '.join(ctx.args)!r}: dlperf run flags "
                              "after -- are for --run")
        if not run:
            return judge(db, base, new, fmt, kind, threshold)
        gate_db = str(Path(db or RUN_DB).resolve())
        check_output(output, "--output", gate_db, kind=kind, force=force)
        gate_db = _run_sides(base, new, db, rounds, base_env, new_env, resume, ctx.args)
        try:
            with common.terminated_as_interrupt():
                return judge(gate_db, "base", "new", fmt, kind, threshold)
        except KeyboardInterrupt as e:
            _judging_interrupted(e, gate_db, _rejudge_flags(fail_if_slower, level, model, format,
                                                            output, force))

    def judge(gate_db: str | None, b: str, n: str, fmt: str, kind: str, threshold: Any) -> int:
        from dlperf.report.regress import compare_records
        from dlperf.report.regress_text import comparison_json, comparison_markdown, summary_line

        sides = (gate_db,) if gate_db is not None else (b, n)
        check_output(output, "--output", *sides, kind=kind, force=force)
        opened: list[tuple[str, Any]] = []
        with ExitStack() as stores:  # open while the records read their samples
            rb, rn, nb, nn = _sides(b, n, gate_db, split(model, "model"), stores,
                                    gate_tags=run, opened=opened)
            _note_same(b, n, gate_db)
            # the gate compares a side left empty and fails with exit 3: NEW empty, or with
            # --run BASE empty (its dlperf run refused the flags every round: a model that
            # only NEW's checkout has); a file given empty is a user error
            if (not rb or not rn) and (threshold is None or (not rb and not run)):
                raise ConfigError(f"nothing to compare: {nb if not rb else nn} holds no results"
                                  + (f" of model(s) {model}" if model else ""))
            comp = compare_records(rb, rn, base_name=nb, new_name=nn, level=level,
                                   threshold=threshold)
            # rows skipped as damaged (found reading the rows and the samples compared)
            comp.damaged_rows = {shown_path(path): len(dmg) for path, st in opened
                                 if (dmg := st.damaged(warn=False))}
            text = (comparison_markdown(comp) if fmt == "table"
                    else json.dumps(comparison_json(comp), indent=1, default=str) + "\n")
        if output is not None:
            common.write_file(output, text, kind, "--output", force=force, protect=sides)
            common.err.print(summary_line(comp), markup=False, highlight=False)
        elif fmt == "table":
            print_markdown(text)
        else:
            sys.stdout.write(text)
        from dlperf.report.regress import gate_status

        code, why = gate_status(comp)
        if why:
            common.err.print(why, markup=False, highlight=False)
        return code

    code = guard(body)
    if code:
        raise typer.Exit(code)
