"""Every comparison and report section, listed once (:data:`SECTIONS`).

``dlperf results --compare NAME`` prints the section named NAME as a table, JSON or CSV
(:func:`compare`); ``dlperf report`` (and ``run``/``sweep --report``) writes every section that
has something to show, in the order of :data:`SECTIONS`, under its title
(:func:`write_full_report`). A section is computed from stored results only (no framework is
imported). The table imports nothing heavy: each section's functions are imported when it is
computed (:func:`_lazy`), so the CLI can read the list (its help names every comparison) at once.
"""

from __future__ import annotations

import functools
import importlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlperf.errors import ConfigError
from dlperf.report.reuse import reused

if TYPE_CHECKING:
    from dlperf.results.schema import RunRecord
    from dlperf.results.store import ResultStore


def _lazy(module: str, attr: str, **kwargs: Any) -> Callable[..., Any]:
    """``module.attr`` (with ``kwargs`` bound), imported at its first call."""
    def call(*args: Any) -> Any:
        fn = getattr(importlib.import_module(module), attr)
        return fn(*args, **kwargs)
    call.__name__ = attr
    return call


_CMP, _THR = "dlperf.report.compare", "dlperf.report.threads"
_MAT, _DAT, _REP = "dlperf.report.matrix", "dlperf.report.datagaps", "dlperf.report.repeats"
_EFF, _COL = "dlperf.report.efficiency", "dlperf.report.collectives"
_BDR, _OPC, _GAP = "dlperf.report.breakdown", "dlperf.report.opclasses", "dlperf.report.gaps"
_AXS, _GLA, _BAT = "dlperf.report.axes", "dlperf.report.glance", "dlperf.report.batches"


def measured(store: ResultStore) -> Callable[[int], list[float]]:
    """result id -> its measured step times (s); empty where the result stored none."""
    return lambda rid: (store.samples(rid).get("measure") or {}).get("step_time_s") or []


def origin_of(store: ResultStore) -> Callable[[int], str]:
    """result id -> the results file it was read from (:func:`dlperf.results.merge.
    origin_of`)."""
    from dlperf.results.merge import origin_of as origin

    return origin(store)


def measured_or_none(store: ResultStore) -> Callable[[int], list[float] | None]:
    """result id -> measured step times (s), None where the result stored none."""
    return lambda rid: (store.samples(rid).get("measure") or {}).get("step_time_s") or None


@dataclass
class Inputs:
    """What a section is computed from: the store, its latest row per point (``rows``, after
    the filters; :attr:`records` reads them as records), every stored run with the same
    filters (:attr:`all_records`), the target loss of the convergence section and the report
    folder for plots (None: no plots), for report.html the interactive figures the
    sections make (:attr:`figures`), and the results file or folder the user named
    (:attr:`source`; None: the store's file). Sections read the records."""

    store: ResultStore
    rows: list[dict[str, Any]]
    filters: dict[str, Any] = field(default_factory=dict)
    target_loss: float | None = None
    output: Path | None = None
    #: report.html's interactive figures: a section puts a plotly figure here under the name
    #: of the image its Markdown links (the page shows the figure there); None: no HTML page
    figures: dict[str, Any] | None = None
    #: the results file or folder as the user named it (a folder is read into a merged copy:
    #: :func:`dlperf.results.merge.open_results`); None: :attr:`store`'s own file
    source: str | Path | None = None

    @functools.cached_property
    def records(self) -> list[RunRecord]:
        """:attr:`rows` as records (:func:`dlperf.results.view.as_records`)."""
        from dlperf.results.view import as_records

        return as_records(self.rows)

    @functools.cached_property
    def sampled(self) -> list[RunRecord]:
        """:attr:`rows` as records with their raw samples (the run-level and iteration
        intervals of the precision, summary and batch sections)."""
        from dlperf.results.store import record_of

        return [record_of(r, self.store.samples(r["id"])) for r in self.rows]

    @functools.cached_property
    def all_rows(self) -> list[dict[str, Any]]:
        """Every stored run (not only the latest per point), with :attr:`filters`."""
        return self.store.rows(latest=False, **self.filters)

    @functools.cached_property
    def all_records(self) -> list[RunRecord]:
        """:attr:`all_rows` as records."""
        from dlperf.results.view import as_records

        return as_records(self.all_rows)


@dataclass(frozen=True)
class Section:
    """One comparison or report section.

    Attributes:
        title: its heading in the report; None: ``--compare`` only.
        name: its ``dlperf results --compare`` name; None: report only.
        help: what ``--compare NAME`` shows, for the CLI's help.
        compute: the comparisons (JSON-able) from :class:`Inputs`.
        markdown: the table of what ``compute`` returns.
        as_json: what JSON (and, without ``as_csv``, CSV) shows of it; default: itself.
        as_csv: the CSV rows of it (one dict per row); default: ``as_json``.
        report: the report's body (plots included) from :class:`Inputs`, or None to leave the
            section out; default: ``markdown(compute(...))`` when that is not empty.
        figures: the body depends on :attr:`Inputs.figures` (report.html's interactive
            figures), so it is made for each page; every other section's body is made once
            while :func:`dlperf.report.reuse.reusing_computations` is open
            (:func:`report_sections`).
    """

    title: str | None
    name: str | None = None
    help: str = ""
    compute: Callable[[Inputs], Any] | None = None
    markdown: Callable[[Any], str] | None = None
    as_json: Callable[[Any], Any] | None = None
    as_csv: Callable[[Any], list[dict[str, Any]]] | None = None
    report: Callable[[Inputs], str | None] | None = None
    figures: bool = False

    def report_body(self, inp: Inputs) -> str | None:
        """The section's body in the report, or None when it has nothing to show."""
        if self.report is not None:
            return self.report(inp)
        comps = None if self.compute is None else self.compute(inp)
        return self.markdown(comps) if comps and self.markdown is not None else None


def _matrix_report(inp: Inputs) -> str | None:
    from dlperf.report import matrix as mat

    matrix = [p for p in mat.framework_matrix(inp.all_records) if len(p["columns"]) > 1]
    return mat.matrix_markdown(matrix) if matrix else None


def _threads_report(inp: Inputs) -> str | None:
    from dlperf.report import threads as thr

    groups = thr.thread_scaling(inp.records, measured_or_none(inp.store))
    if not groups:
        return None
    body = thr.threads_markdown(groups)
    for png in (thr.plot_thread_scaling(groups, inp.output) if inp.output is not None else []):
        body += f"\n![step time and speed-up against CPU threads]({png.name})\n"
    return body


def _scaling_points(inp: Inputs) -> list[dict[str, Any]]:
    """The data-parallel scaling points (:func:`dlperf.perfmodel.scaling.scaling_points`)."""
    from dlperf.perfmodel.scaling import scaling_points

    return scaling_points(inp.records, measured(inp.store))


def _scaling_markdown(points: Sequence[dict[str, Any]]) -> str:
    from dlperf.report.scaling import scaling_markdown

    return scaling_markdown(points)


#: Said under the report's scaling table.
SCALING_NOTE = ("\nEfficiency = speed-up / devices, from throughput (mean step times); the "
                "medians column uses median step times with a bootstrap CI. Weak: per-device "
                "batch fixed (E = T1/TN); strong: global batch fixed (E = T1/(N TN)). The step "
                "time of a data-parallel run is the slowest rank's per iteration; imbalance = "
                "max/median of the ranks' median step times; exposed communication: "
                "all-reduce time not overlapped by computation, from a profiled trace of rank 0.\n")


def _scaling_report(inp: Inputs) -> str | None:
    from dlperf.report.scaling import plot_scaling
    from dlperf.results.view import world_of

    if not any(world_of(r) > 1 for r in inp.records):
        return None
    pts = _scaling_points(inp)
    body = _scaling_markdown(pts)
    png = plot_scaling(pts, inp.output) if inp.output is not None else None
    if png is not None:
        body += f"\n![throughput and scaling efficiency against devices]({png.name})\n"
    return body + SCALING_NOTE


def _convergence_groups(inp: Inputs) -> list[dict[str, Any]]:
    from dlperf.report.convergence import convergence_groups

    return convergence_groups(inp.records, inp.store.samples, inp.target_loss)


def _convergence_markdown(groups: Sequence[dict[str, Any]]) -> str:
    from dlperf.report.convergence import convergence_markdown

    return convergence_markdown(groups)


def _convergence_runs(groups: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per run of each group (the group's fields and the run's, without curves)."""
    return [{**{k: v for k, v in g.items() if k != "runs"},
             **{k: v for k, v in r.items() if k not in ("times", "losses")}}
            for g in groups for r in g["runs"]]


def _convergence_report(inp: Inputs) -> str | None:
    """The report's convergence section: the groups with a target loss (given with
    ``--target-loss`` or stored with a run); None without one (a loss curve with nothing to
    reach measures no convergence: ``dlperf results --compare convergence`` still lists it)."""
    from dlperf.report.convergence import plot_convergence

    groups = [g for g in _convergence_groups(inp)
              if any(r.get("target_loss") is not None for r in g["runs"])]
    if not groups:
        return None
    body = _convergence_markdown(groups)
    for png in (plot_convergence(groups, inp.output) if inp.output is not None else []):
        body += f"\n![training loss against iterations and time]({png.name})\n"
    return body


def _warnings_report(inp: Inputs) -> str | None:
    """The quality warnings stored with each result (worker.quality_warnings), one row each."""
    from dlperf.results.view import warnings_text

    warned = [(r.identity, text) for r in inp.records if (text := warnings_text(r))]
    if not warned:
        return None
    threads = any(i.threads is not None for i, _ in warned)  # a thread sweep's rows
    lines = ["| model | framework/mode | device | precision | batch |"
             + (" threads |" if threads else "") + " warnings |",
             "|---|---|---|---|---:|" + ("---:|" if threads else "") + "---|"]
    from dlperf.report.cells import md_escape

    lines += [f"| {md_escape(str(i.model))} | {i.framework}/{i.mode} | {i.device} | "
              f"{i.precision} | {i.batch_size} |"
              + (f" {i.threads if i.threads is not None else '–'} |" if threads else "")
              + f" {md_escape(text)} |"
              for i, text in warned]
    return "\n".join(lines) + "\n"


def _records_md(module: str, attr: str) -> Callable[[Inputs], str | None]:
    """A report body from ``module.attr(records)`` (empty text: no section)."""
    fn = _lazy(module, attr)
    return lambda inp: fn(inp.records) or None


def _predicted_report(inp: Inputs) -> str | None:
    from dlperf.report.predicted import predicted_section

    if not inp.rows and not inp.store.collectives():
        return None
    return predicted_section(inp.source or inp.store.path, inp.output, inp.figures)


def _gaps_report(inp: Inputs) -> str | None:
    from dlperf.report import gaps

    return gaps.gap_markdown(gaps.gap_attribution(inp.records,
                                                  measured_or_none(inp.store))) or None


#: Every section, in the report's order.
SECTIONS: tuple[Section, ...] = (
    Section("Relative speed at a glance", "summary",
            "one line per pair of modes, frameworks or precisions: the geometric-mean speed-up "
            "over the points measured in both, with its CI",
            compute=lambda inp: _lazy(_GLA, "relative_summary")(inp.sampled),
            markdown=_lazy(_GLA, "summary_markdown")),
    Section("Frameworks and modes side by side (ms per iteration)", "matrix",
            "median ms per point x framework/mode side by side, each point's runs as a range",
            compute=lambda inp: _lazy(_MAT, "framework_matrix")(inp.all_records),
            markdown=_lazy(_MAT, "matrix_markdown"), as_csv=_lazy(_MAT, "matrix_flat"),
            report=_matrix_report),
    Section("Graph-optimisation effect (speed-up over eager)", "modes",
            "graph/xla vs eager speed-up",
            compute=lambda inp: _lazy(_CMP, "mode_speedups")(inp.records, measured(inp.store),
                                                             origin_of(inp.store)),
            markdown=_lazy(_CMP, "markdown", kind="modes")),
    Section("Frameworks against torch/eager (speed-up)", "frameworks",
            "each framework/mode vs torch/eager",
            compute=lambda inp: _lazy(_CMP, "framework_ratios")(
                inp.records, measured(inp.store), "torch/eager", origin_of(inp.store)),
            markdown=_lazy(_CMP, "markdown", kind="frameworks")),
    Section("Precision effect (speed-up over fp32)", "precision",
            "bf16/tf32 vs fp32 speed-up per point, CI from runs (--repeats) or, with one run "
            "a side, from iterations (said so)",
            compute=lambda inp: _lazy(_AXS, "precision_speedups")(inp.sampled),
            markdown=_lazy(_AXS, "precision_markdown")),
    Section("Batch size: what fits and where throughput stops growing", "batch",
            "per batch sweep: the largest batch that fit (first OOM/failure) and the smallest "
            "batch within 5% of the best throughput (CI respected)",
            compute=lambda inp: _lazy(_BAT, "batch_advice")(inp.sampled),
            markdown=_lazy(_BAT, "advice_markdown")),
    Section("Where the time goes: iteration breakdown",
            report=_records_md(_BDR, "breakdown_markdown")),
    Section("Device time per op class", report=_records_md(_OPC, "op_class_markdown")),
    Section("Step-time gaps attributed to op classes", report=_gaps_report),
    Section("Trace files", report=_records_md(_BDR, "trace_files_markdown")),
    Section("Input pipelines: real data against synthetic data", "data",
            "real-data pipelines vs synthetic data",
            compute=lambda inp: _lazy(_DAT, "data_gaps")(inp.records, measured(inp.store)),
            markdown=_lazy(_DAT, "data_markdown")),
    Section("Repeated runs: between-run variation", "repeats",
            "between-run variation of points run several times, --repeats N: run medians, mean, "
            "stdev, CV, olympic mean against the within-run CI",
            compute=lambda inp: _lazy(_REP, "repeat_runs")(inp.records),
            markdown=_lazy(_REP, "repeats_markdown")),
    Section("Efficiency: MFU, roofline, energy",
            report=_records_md(_EFF, "efficiency_markdown")),
    Section("CPU thread scaling", "threads",
            "CPU thread scaling: step time, speed-up, efficiency and Karp-Flatt serial fraction "
            "against --threads",
            compute=lambda inp: _lazy(_THR, "thread_scaling")(inp.records,
                                                              measured_or_none(inp.store)),
            markdown=_lazy(_THR, "threads_markdown"), as_csv=_lazy(_THR, "threads_flat"),
            report=_threads_report),
    Section("Data-parallel scaling", "scaling", "data-parallel efficiency against one device",
            compute=_scaling_points, markdown=_scaling_markdown, report=_scaling_report),
    Section("Convergence", "convergence",
            "loss and time to --target-loss across device counts",
            compute=_convergence_groups, markdown=_convergence_markdown,
            as_json=_convergence_runs, report=_convergence_report),
    Section("Predicted vs measured: the performance model's back-test",
            report=_predicted_report, figures=True),
    Section("All-reduce (algbw, busbw per message size)", "allreduce",
            "stored all-reduce sweeps: time, algbw, busbw per message size",
            compute=lambda inp: inp.store.collectives(),
            markdown=_lazy(_COL, "collectives_markdown")),
    Section("Warnings (results to read with care)", report=_warnings_report),
)

#: ``--compare`` name -> its section.
COMPARISONS: dict[str, Section] = {s.name: s for s in SECTIONS if s.name is not None}


def csv_text(dicts: Sequence[dict[str, Any]]) -> str:
    """CSV with a header from the first dict's keys; list and tuple cells space-separated."""
    import csv
    import io

    buf = io.StringIO()
    if dicts:
        w = csv.DictWriter(buf, fieldnames=list(dicts[0]), lineterminator="\n")
        w.writeheader()
        w.writerows({k: " ".join(map(str, v)) if isinstance(v, (list, tuple)) else v
                     for k, v in d.items()} for d in dicts)
    return buf.getvalue()


def compare(name: str, inp: Inputs, format: str) -> str:
    """The comparison ``name`` (a key of :data:`COMPARISONS`) as Markdown (``table``), JSON or
    CSV text.

    Raises:
        KeyError: ``name`` is not a comparison (the CLI checks it first).
    """
    s = COMPARISONS[name]
    if s.compute is None or s.markdown is None:  # every named section has both
        raise KeyError(name)
    comps = s.compute(inp)
    if format == "table":
        from dlperf.report.cells import md_safe_body

        return md_safe_body(s.markdown(comps))
    shown = s.as_json(comps) if s.as_json is not None else comps
    if format == "json":
        return json.dumps(shown, indent=1)
    return csv_text(s.as_csv(comps) if s.as_csv is not None else shown)


def results_key(inp: Inputs) -> tuple[Any, ...]:
    """What a section's body depends on: the results named (file or folder), the filters,
    the target loss, the rows read (their ids) and the folder its plots are written to."""
    return (str(inp.source or inp.store.path), json.dumps(inp.filters, sort_keys=True,
                                                          default=str),
            inp.target_loss, tuple(r.get("id") for r in inp.rows),
            None if inp.output is None else str(inp.output))


def report_sections(inp: Inputs) -> list[tuple[str, str]]:
    """``(title, body)`` of every report section with something to show, in order.

    While :func:`dlperf.report.reuse.reusing_computations` is open, a section's body (and the
    PNGs it writes) is made once per :func:`results_key` and reused (``dlperf report`` writes
    report.md and report.html from one computation of each); a section marked
    :attr:`Section.figures` is made for each page (its plotly figure goes to that page's
    :attr:`Inputs.figures`; its costly back-test is kept by
    :func:`dlperf.report.predicted.predicted_section` itself)."""
    out = []
    key = results_key(inp)
    for s in SECTIONS:
        if s.title is None:
            continue
        body = (s.report_body(inp) if s.figures
                else reused(("section", s.title, *key), functools.partial(s.report_body, inp)))
        if body:
            out.append((s.title, body))
    return out


def write_full_report(db: str, output: Path, title: str, target_loss: float | None) -> Path:
    """The report of ``dlperf report`` (and of ``run``/``sweep --report``): results table,
    plots, every section of :data:`SECTIONS` and the environment; the path of report.md.
    ``db``: a results file, or a folder of them read as one
    (:func:`dlperf.results.merge.open_results`).

    Raises:
        ConfigError: ``db`` holds no results and no collective runs.
    """
    from dlperf.report.markdown import write_report
    from dlperf.results.merge import open_results

    with open_results(db) as store:
        rows = store.rows()
        coll = store.collectives()
        if not rows and not coll:
            raise ConfigError(f"{db} holds no results yet: store some with "
                              f"`dlperf run ... --db {db}`")
        inp = Inputs(store, rows, target_loss=target_loss, output=output, source=db)
        sections = report_sections(inp)
        store_env = store.collectives_env() if coll else None
    # the newest result's environment, as stored
    last = inp.records[-1].env if rows else None
    env = last.model_dump(exclude_unset=True) if last is not None else None
    if env is None and coll:  # only all-reduce runs: the environment they stored
        env = store_env
    return write_report(inp.records, output, title=title, env=env, sections=sections)
