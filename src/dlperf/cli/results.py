"""``dlperf results``: stored results as a table, CSV or JSON; a comparison
(``--compare NAME``, one of :data:`dlperf.report.sections.COMPARISONS`); or the op classes of
results measured with ``--breakdown``/``--trace``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from dlperf.cli import common
from dlperf.cli.common import check_db, check_output, guard, print_markdown, split
from dlperf.errors import ConfigError, did_you_mean, unknown_choice
from dlperf.outputs import shown_path
from dlperf.report.sections import COMPARISONS

FORMATS = ("table", "csv", "json")
#: The format an ``--output`` file's suffix names when ``--format`` is not given.
SUFFIX_FORMATS = {".csv": "csv", ".json": "json", ".md": "table", ".markdown": "table"}
#: The output kind (:data:`dlperf.outputs.KINDS`) a format writes.
KIND = {"table": "markdown", "csv": "csv", "json": "json"}

#: ``--compare``'s help, from the one list of comparisons.
COMPARE_HELP = ("Instead of the results: "
                + ", ".join(f"'{n}' ({s.help})" for n, s in COMPARISONS.items()) + ".")


def _op_classes_text(rows: list[dict[str, Any]], format: str, samples_of: Any = None,
                     to_file: bool = False) -> str | None:
    """The op-class table and gap attribution; printed directly (None) for ``table``, or as
    Markdown (the report's sections) when ``to_file``. ``samples_of``: result id -> measured
    samples, for the gaps' CIs.

    Raises:
        ConfigError: no result has op classes.
    """
    from dlperf.report import breakdown as bdr
    from dlperf.report.sections import csv_text
    from dlperf.results.view import as_records

    recs = as_records(rows)
    if not any(bdr.op_classes_of(r) for r in recs):
        raise ConfigError("no result here has op classes; measure with --breakdown or "
                          "--trace DIR")
    gaps = bdr.gap_attribution(recs, samples_of)
    if format == "table" and to_file:
        return bdr.op_class_markdown(recs) + ("\n" + bdr.gap_markdown(gaps) if gaps else "")
    if format == "table":
        common.print_table(bdr.op_class_table(recs))
        md = bdr.op_class_markdown(recs)
        if "Unclassified device time" in md:
            common.out.print(md[md.index("Unclassified device time"):].rstrip(), markup=False,
                             highlight=False)
        for g in bdr.gap_tables(gaps):
            common.print_table(g)
        if gaps:
            common.out.print(bdr.GAP_LEGEND, markup=False, highlight=False)
        return None
    if format == "json":
        per = [{"id": r.get("id"), "model": r.get("model"), "framework": r.get("framework"),
                "mode": r.get("mode"), "device": r.get("device"), "precision": r.get("precision"),
                "batch_size": r.get("batch_size"), "step_time_median_s": r.get("step_time_median_s"),
                "op_classes": bdr.result_of(r).get("op_classes"),
                "trace": bdr.result_of(r).get("trace")}
               for r, rec in zip(rows, recs, strict=True) if bdr.op_classes_of(rec)]
        return json.dumps({"results": per, "gaps": gaps}, indent=1, default=str)
    return csv_text(bdr.op_class_records(recs))


def _write(text: str, output: Path | None, format: str, db: str = "",
           force: bool = False) -> None:
    """``text`` to ``output`` (through :func:`dlperf.cli.common.write_file`: never over the
    results file ``db``, a database, or a file of another kind without ``force``), or to
    stdout (a table drawn in a terminal)."""
    if output:
        common.write_file(output, text, KIND[format], "--output", force=force, protect=(db,))
    elif format == "table":
        print_markdown(text)
    else:
        sys.stdout.write(text)


def _check_flags(db: str, format: str, compare: str | None, op_classes: bool, samples: bool,
                 target_loss: float | None, status: str | None) -> None:
    """Flags that would do nothing where they were given, and bad values, are refused."""
    from dlperf.results.schema import STATUSES

    if format not in FORMATS:
        raise unknown_choice("format", format, FORMATS)
    check_db(db, must_exist=True, folder=True)
    common.check_target_loss(target_loss)
    if target_loss is not None and compare != "convergence":
        raise ConfigError("--target-loss is the target of --compare convergence; add "
                          "--compare convergence, or leave --target-loss out")
    if samples and (format != "json" or compare is not None or op_classes):
        raise ConfigError("--samples adds the raw samples to the JSON of the results: give "
                          "--format json without --compare/--op-classes, or leave --samples "
                          "out")
    for s in split(status, "status"):
        if s not in STATUSES:
            raise unknown_choice("status", s, STATUSES, plural="statuses")
    if op_classes and compare is not None:
        raise ConfigError("give --op-classes or --compare, not both")
    if compare is not None and compare not in COMPARISONS:
        raise unknown_choice("comparison", compare, COMPARISONS)


def _check_tags(store: Any, tags: list[str], db: str) -> None:
    """Each of ``tags`` is the tag of some stored result (a misspelt tag read as an empty
    table, exit 0, where ``dlperf compare --db`` refused it).

    Raises:
        ConfigError: naming the first unknown tag, the closest stored one and every stored tag.
    """
    from dlperf.results.history import tag_of

    have = sorted({t for r in store.records(latest=False, samples=False) if (t := tag_of(r))})
    for t in tags:
        if t not in have:
            raise ConfigError(f"no result in {db} has tag {t!r}{did_you_mean(t, have) or ';'} "
                              f"tags there: {', '.join(have) or 'none'} (dlperf run --tag NAME "
                              "tags results)")


def _show_results(store: Any, rows: list[dict[str, Any]], db: str, format: str,
                  output: Path | None, samples: bool, history: bool = False,
                  force: bool = False) -> None:
    """The results table (with the breakdown table and the results' warnings), or their CSV
    or JSON; ``history``: the table has the tag, time and commit columns; ``force``: an
    ``output`` that is not an earlier export is replaced."""
    from dlperf.report.tables import results_table
    from dlperf.results.export import to_csv, to_json
    from dlperf.results.view import as_records

    if format == "table":
        if output:
            raise ConfigError(f"--output {str(output)!r}: dlperf results writes CSV or JSON "
                              "(the file's suffix, .csv or .json, or --format csv|json "
                              "chooses); the table is for the terminal, and dlperf report "
                              "-o DIR writes it as report.md")
        recs = as_records(rows)
        common.print_table(results_table(recs, history=history))
        common.print_warning_lines(recs)
        if not rows and store.collectives():
            common.err.print(f"{shown_path(db)} holds all-reduce rows only: dlperf results "
                             f"--db {shown_path(db)} "
                             "--compare allreduce", markup=False, highlight=False)
        from dlperf.report.breakdown import breakdown_table

        bt = breakdown_table(recs)
        if bt is not None:
            common.print_table(bt)
            common.out.print(common.BREAKDOWN_LEGEND, highlight=False)
        return
    text = to_csv(rows) if format == "csv" else to_json(rows, store, include_samples=samples)
    if output:
        _write(text, output, format, db, force)
        common.err.print(f"wrote {len(rows)} rows to {shown_path(output)}", markup=False,
                         highlight=False)
    else:
        sys.stdout.write(text)


def results(
    db: Annotated[str, typer.Option(help="Results file, or a folder of them (its *.db read as one).")] = common.DEFAULT_DB,
    format: Annotated[str | None, typer.Option("--format", "-f", help="table, csv or json (default: the --output file's suffix, .csv, .json or .md; else table).")] = None,
    model: Annotated[str | None, typer.Option(help="Only these models (comma-separated).")] = None,
    status: Annotated[str | None, typer.Option(help="Only these statuses, e.g. ok,oom.")] = None,
    all_runs: Annotated[bool, typer.Option("--all", help="Every stored run, not only the latest per point; the table adds each run's tag, time and commit.")] = False,
    samples: Annotated[bool, typer.Option("--samples", help="JSON: include raw per-iteration samples.")] = False,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write to this file instead of stdout.")] = None,
    compare: Annotated[str | None, typer.Option(help=COMPARE_HELP)] = None,
    op_classes: Annotated[bool, typer.Option("--op-classes", help="Instead of the results: device time per op class of results measured with --breakdown/--trace, and step-time gaps between frameworks/modes at the same point attributed to op classes (the gaps in the table and JSON; CSV: one row per result, seconds per iteration).")] = False,
    target_loss: Annotated[float | None, typer.Option(help="With --compare convergence: the target loss (default: the one stored with each run).")] = None,
    tag: Annotated[str | None, typer.Option(help="Only results with these tags (dlperf run --tag; comma-separated).")] = None,
    sha: Annotated[str | None, typer.Option(help="Only results measured at this git commit (4-40 hex digits).")] = None,
    since: Annotated[str | None, typer.Option(help="Only results created at or after this date (ISO, UTC), e.g. 2026-01-31.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing --output file that is not an earlier export of the same format (never a database).")] = False,
) -> None:
    """Show stored results as a table, CSV or JSON, or compare modes and frameworks."""
    def body() -> None:
        from dlperf.outputs import format_for
        from dlperf.report.sections import Inputs, measured_or_none
        from dlperf.report.sections import compare as comparison
        from dlperf.results.merge import open_results

        fmt = format_for(output, format, SUFFIX_FORMATS, "table")
        _check_flags(db, fmt, compare, op_classes, samples, target_loss, status)
        check_output(output, "--output", db, kind=KIND.get(fmt, "markdown"), force=force)
        filters = {"model": split(model, "model") or None,
                   "status": split(status, "status") or None}
        with open_results(db) as store:
            rows = store.rows(latest=not all_runs, **filters)
            history = tag or sha or since
            if tag:
                _check_tags(store, split(tag, "tag"), db)
            if history:  # the newest run per point among those that match
                from dlperf.results.history import select_rows

                matching = store.rows(latest=False, **filters)
                every = select_rows(matching, tag=split(tag, "tag"), sha=sha, since=since,
                                    latest=False)
                rows = select_rows(every, latest=not all_runs)
                if since and not rows and matching and fmt == "table" and output is None:
                    newest = max(str(r.get("created_at") or "") for r in matching)
                    common.err.print(f"note: no result in {shown_path(db)} was created at or after "
                                     f"{since} (UTC); the newest is from {newest[:19]}",
                                     markup=False, highlight=False)
            if model and not rows:  # a misspelt filter reads as an empty file otherwise
                stored = sorted({r["model"] for r in store.rows(latest=True)})
                missing = [m for m in split(model, "model") if m not in stored]
                if missing and stored:
                    raise unknown_choice("model", missing[0], stored,
                                         plural=f"models in {shown_path(db)}")
            if (not rows and fmt == "table" and output is None and not store.rows(latest=False)
                    and not store.collectives()):
                # an empty file: say so, as `dlperf report` does, not an empty table (a file of
                # all-reduce rows only gets its `--compare allreduce` hint below)
                common.err.print(f"note: {shown_path(db)} holds no results yet: store some with "
                                 f"`dlperf run ... --db {shown_path(db)}`", markup=False,
                                 highlight=False)
                return
            if op_classes:
                text = _op_classes_text(rows, fmt, measured_or_none(store),
                                        to_file=output is not None)
                if text is not None:
                    _write(text, output, fmt, db, force) if output else sys.stdout.write(text)
                return
            if compare is not None:
                inp = Inputs(store, rows, filters=filters, target_loss=target_loss)
                if history:
                    inp.all_rows = every
                _write(comparison(compare, inp, fmt), output, fmt, db, force)
                return
            _show_results(store, rows, db, fmt, output, samples,
                          history=bool(all_runs or history), force=force)

    guard(body)
