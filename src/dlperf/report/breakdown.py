"""Where the time goes in one step: the iteration breakdown table of results measured with
``--breakdown``/``--trace``, and the list of kept trace files.

* :func:`breakdown_cells`: per result, the fused step and the median of each phase (ms per
  iteration), their sum against the step, CPU dispatch and GPU busy fraction. For a step
  compiled as one program (JAX, TensorFlow graph/XLA) the forward/backward/update columns come
  from the profiler trace (marked ``*``) and ``gap`` is the compiled step's time the trace did
  not attribute (device idle between ops, profiler overhead).

Device time per op class is :mod:`dlperf.report.opclasses`, the step-time gaps between
frameworks attributed to op classes :mod:`dlperf.report.gaps`; their public names are
importable from here too (``dlperf results --op-classes`` reads them so). Outputs are rich
tables for the terminal and the same content as Markdown. Nothing here imports a framework.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from dlperf.report.cells import BATCH_CELL_KEYS, DASH, batch_cell, md_table, rich_table
from dlperf.report.gaps import (
    BASELINE_ORDER,
    ENV_NOTE,
    GAP_CI_LEVEL,
    GAP_LEGEND,
    MIN_GAP_SHARE,
    REST_WARN_SHARE,
    gap_attribution,
    gap_markdown,
    gap_significance,
    gap_tables,
    gap_verdict,
    host_paced,
    slowed_by_breakdown,
)
from dlperf.report.opclasses import (
    OTHER_LIST_SHARE,
    op_class_cells,
    op_class_markdown,
    op_class_records,
    op_class_table,
    op_classes_of,
    other_names,
)
from dlperf.report.opclasses import ms_cell as _ms
from dlperf.report.tables import sort_rows
from dlperf.results.schema import RunRecord
from dlperf.results.store import result_of  # re-exported: dlperf.cli.results reads it
from dlperf.results.view import fields, framework_mode, median_s

__all__ = ["BREAKDOWN_COLUMNS", "BREAKDOWN_LEGEND", "has_breakdown", "breakdown_cells",
           "breakdown_table", "breakdown_markdown", "trace_files_markdown",
           # from dlperf.report.opclasses and dlperf.report.gaps
           "OTHER_LIST_SHARE", "op_classes_of", "op_class_cells", "op_class_records",
           "op_class_table", "op_class_markdown", "other_names", "BASELINE_ORDER",
           "MIN_GAP_SHARE", "GAP_CI_LEVEL", "REST_WARN_SHARE", "GAP_LEGEND", "ENV_NOTE",
           "slowed_by_breakdown", "gap_significance", "host_paced", "gap_attribution",
           "gap_verdict", "gap_markdown", "gap_tables", "result_of"]

BREAKDOWN_COLUMNS = ("model", "framework/mode", "device", "precision", "batch", "step ms",
                     "t_io", "t_h2d", "t_f", "t_b", "t_u", "t_fbu", "gap", "sum vs step",
                     "dispatch ms", "busy")

Rows = Sequence[RunRecord]


def has_breakdown(rec: RunRecord) -> bool:
    """True if the result carries an available breakdown or trace section."""
    return bool((rec.breakdown is not None and rec.breakdown.available)
                or (rec.trace is not None and rec.trace.available))


def _phase_cells(rec: RunRecord) -> tuple[dict[str, str], str]:
    """The phase cells (ms) of a result's breakdown and its ``gap`` cell."""
    bd = rec.breakdown
    ph = (bd.phases if bd is not None else None) or {}
    split = (bd.split if bd is not None else None) or {}
    cells = {p: _ms((ph.get(p) or {}).get("median"))
             for p in ("t_io", "t_h2d", "t_f", "t_b", "t_u", "t_fbu")}
    gap = DASH
    if "t_fbu" in ph:
        per = split.get("per_iter_s") or {}
        for p in ("t_f", "t_b", "t_u"):
            cells[p] = (_ms(per.get(p)) + "*") if p in per else DASH
        gap = _ms(split.get("t_gap_s"))
    return cells, gap


def breakdown_cells(rec: RunRecord) -> list[str]:
    """Cells of one row of the breakdown table (:data:`BREAKDOWN_COLUMNS`)."""
    bd, tr = rec.breakdown, rec.trace
    cells, gap = _phase_cells(rec)
    sum_vs = (DASH if bd is None or bd.rel_diff is None
              else f"{bd.rel_diff:+.1%}" + ("" if bd.reconciled else " !"))
    busy_s = (DASH if tr is None or tr.busy_fraction is None
              else f"{tr.busy_fraction:.0%}" + (" (ops)" if tr.device_kind == "cpu" else ""))
    disp = ((bd.dispatch_s if bd is not None else None) or {}).get("median")
    if disp is None:
        disp = ((tr.dispatch_s if tr is not None else None) or {}).get("median")
    i = rec.identity
    return [str(i.model), framework_mode(rec), str(rec.device_name or i.device), str(i.precision),
            batch_cell(fields(rec, BATCH_CELL_KEYS)), _ms(median_s(rec)), cells["t_io"], cells["t_h2d"], cells["t_f"],
            cells["t_b"], cells["t_u"], cells["t_fbu"], gap, sum_vs, _ms(disp), busy_s]


BREAKDOWN_LEGEND = (
    "Median ms per iteration. *step ms*: the fused step (the headline measurement); the phases "
    "come from a separate, labelled measurement after it (CUDA events per phase on a GPU; the "
    "host clock, waiting for each phase, elsewhere). *t_io*: getting the batch; *t_h2d*: its "
    "host-to-device copy; *t_f*/*t_b*/*t_u*: forward (with loss), backward, optimizer update. "
    "*t_fbu*: a step compiled as one program (JAX, TensorFlow graph/XLA); its `*` columns are "
    "the profiler trace's device time of the program's forward/backward/update ops and *gap* "
    "is the rest of t_fbu (device idle between ops, profiler overhead; negative when the "
    "profiler slowed the traced ops beyond the untraced step, with a warning when by over 3%; "
    "not the framework gap of the op-class section). *sum vs step*: the "
    "phases' sum against the fused step (`!`: over 3%, the reason is in the result's "
    "warnings; a JAX GPU row's breakdown ran in a second process with command buffers off, "
    "and its phases are set against that process's own fused step, `breakdown_run.summary`, "
    "not the *step ms* shown). *dispatch ms*: host time spent issuing one iteration: from the phased "
    "measurement (no profiler running) where there is one, else from the trace (the results "
    "file's `dispatch_s` column is always the trace's, which includes the profiler's overhead "
    "and, for an asynchronous step, waits for the device). *busy*: union of device "
    "op intervals over the traced span (GPU busy fraction; `(ops)`: on a CPU device, the share "
    "of host time inside ops).")


def breakdown_table(rows: Rows) -> Table | None:
    """Rich breakdown table of the results that have one (None if none has)."""
    rs = [breakdown_cells(r) for r in sort_rows(rows) if has_breakdown(r)]
    return rich_table(BREAKDOWN_COLUMNS, rs, "where the time goes (ms per iteration)", 4) \
        if rs else None


def breakdown_markdown(rows: Rows) -> str:
    """The breakdown table as Markdown with its legend ("" if no result has a breakdown)."""
    rs = [breakdown_cells(r) for r in sort_rows(rows) if has_breakdown(r)]
    return (md_table(BREAKDOWN_COLUMNS, rs, 4) + "\n" + BREAKDOWN_LEGEND + "\n") if rs else ""


def trace_files_markdown(rows: Rows) -> str:
    """A list of the kept trace files ("" if none)."""
    lines = []
    for r in sort_rows(rows):
        files = (r.trace.files if r.trace is not None else None) or {}
        if files.get("chrome_trace"):
            lines.append(f"- {r.identity.model} {framework_mode(r)} {r.identity.precision} b="
                         f"{r.identity.batch_size}: `{files['chrome_trace']}`")
    return ("Chrome-trace JSON (opens in https://ui.perfetto.dev or chrome://tracing):\n\n"
            + "\n".join(lines) + "\n") if lines else ""
