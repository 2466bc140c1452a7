"""Device time per iteration by operator class, from the profiler trace of a run measured with
``--breakdown``/``--trace`` (``dlperf results --op-classes``, the report's "Device time per op
class" section); the classes are :data:`dlperf.measure.breakdown.opclass.OP_CLASSES`."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rich.table import Table

from dlperf.measure.breakdown.opclass import OP_CLASSES
from dlperf.report.cells import DASH, finite, fmt_sig, md_table, rich_table
from dlperf.report.tables import sort_rows
from dlperf.results.parts import Trace
from dlperf.results.schema import RunRecord
from dlperf.results.view import fields, framework_mode, median_s

__all__ = ["OTHER_LIST_SHARE", "op_classes_of", "op_class_cells", "op_class_records",
           "op_class_table", "op_class_markdown", "other_names", "class_changes"]

#: ``other`` time over this share of a result's busy time lists its largest names.
OTHER_LIST_SHARE = 0.05

Rows = Sequence[RunRecord]


def class_changes(a: Mapping[str, float], b: Mapping[str, float], classes: Iterable[str],
                  total_s: float | None, names: tuple[str, str] = ("a_s", "b_s")
                  ) -> list[dict[str, Any]]:
    """The change of each op class from ``a`` to ``b`` (s per iteration, class -> time; a
    class absent from a side counts 0), for the ``classes`` with time on either side:
    ``{"class", names[0]: a's time, names[1]: b's time, "diff_s": b - a, "share": diff_s /
    total_s}``, largest ``|diff_s|`` first (ties in the order of ``classes``). ``share`` is
    None where ``total_s`` is None or 0 (a change not attributed)."""
    out: list[dict[str, Any]] = []
    for c in classes:
        x, y = a.get(c, 0.0), b.get(c, 0.0)
        if x or y:
            out.append({"class": c, names[0]: x, names[1]: y, "diff_s": y - x,
                        "share": (y - x) / total_s if total_s else None})
    out.sort(key=lambda d: -abs(d["diff_s"]))
    return out


def ms_cell(v: Any) -> str:
    """Seconds as milliseconds, 4 significant digits (dash for a missing value)."""
    return fmt_sig(v * 1e3) if finite(v) else DASH


def op_classes_of(rec: RunRecord) -> dict[str, float] | None:
    """``{class: s per iteration}`` of a result, None if it has no op-class section."""
    oc = rec.op_classes
    return oc.per_iter_s if oc is not None else None


def _trace(rec: RunRecord) -> Trace:
    return rec.trace if rec.trace is not None else Trace()


def _class_columns(recs: Sequence[RunRecord]) -> list[str]:
    used = set()
    for r in recs:
        for c, v in (op_classes_of(r) or {}).items():
            if v:
                used.add(c)
    return [c for c in OP_CLASSES if c in used]


#: The idle column's header: the idle time is that of a traced step (``trace.step_wall_s``,
#: which the profiler lengthens), not of a measured one like the other columns.
IDLE_HEADER = "idle ms (of traced step ms)"


def _idle_cell(tr: Trace) -> str:
    """``134.5 of 172.0``: the traced step's idle time and that step's wall time (ms)."""
    cell = ms_cell(tr.idle_s)
    return cell + (f" of {ms_cell(tr.step_wall_s)}" if finite(tr.idle_s)
                   and finite(tr.step_wall_s) else "")


def op_class_cells(rows: Rows) -> tuple[list[str], list[list[str]]]:
    """(columns, cells) of the op-class table: ms per iteration per class and busy, then the
    traced step's idle time with that step's wall time (:data:`IDLE_HEADER`)."""
    rs = [r for r in sort_rows(rows) if op_classes_of(r)]
    classes = _class_columns(rs)
    cols = ["model", "framework/mode", "precision", "batch", "step ms",
            *[OP_CLASSES[c] for c in classes], "busy ms", IDLE_HEADER, "source"]
    out = []
    for r in rs:
        oc = op_classes_of(r) or {}
        tr = _trace(r)
        out.append([str(r.identity.model), framework_mode(r), str(r.identity.precision),
                    str(r.identity.batch_size), ms_cell(median_s(r)),
                    *[ms_cell(oc.get(c, 0.0)) for c in classes], ms_cell(tr.busy_s),
                    _idle_cell(tr),
                    "host ops" if tr.device_kind == "cpu" else "device kernels"])
    return cols, out


def op_class_records(rows: Rows) -> list[dict[str, Any]]:
    """The op-class table for CSV: one dict per result that has op classes, unrounded.

    Keys: ``id``, ``model``, ``framework``, ``mode``, ``device``, ``precision``,
    ``batch_size``, ``data``, ``threads``, ``step_time_median_s`` (the fused step), then
    ``<class>_s`` for every class of :data:`~dlperf.measure.breakdown.opclass.OP_CLASSES` in order
    (seconds per iteration, 0.0 where the trace had none, so every file has the same
    columns), ``busy_s`` (seconds per iteration), ``idle_s`` (seconds of one traced step,
    whose wall time the profiler lengthens: the record's ``trace.step_wall_s``),
    ``device_kind`` (``cpu``: the
    times are host time inside ops) and ``source`` (the profiler). Gaps are not here (their
    rows have another shape): ``--format json`` has both.
    """
    out = []
    for r in sort_rows(rows):
        oc = op_classes_of(r)
        if not oc:
            continue
        tr = _trace(r)
        rec: dict[str, Any] = {"id": r.stored.id if r.stored is not None else None,
                               **fields(r, ("model", "framework", "mode", "device",
                                            "precision", "batch_size", "data", "threads")),
                               "step_time_median_s": median_s(r)}
        rec.update({f"{c}_s": oc.get(c, 0.0) for c in OP_CLASSES})
        rec.update(busy_s=tr.busy_s, idle_s=tr.idle_s, device_kind=tr.device_kind,
                   source=tr.source)
        out.append(rec)
    return out


def op_class_table(rows: Rows) -> Table | None:
    """Rich op-class table (None if no result has op classes)."""
    cols, cells = op_class_cells(rows)
    return rich_table(cols, cells, "device time per op class (ms per iteration; idle: of "
                      "the traced step)", 3) if cells else None


def op_class_markdown(rows: Rows) -> str:
    """The op-class table as Markdown ("" if no result has op classes)."""
    cols, cells = op_class_cells(rows)
    if not cells:
        return ""
    return md_table(cols, cells, 3) + (
        "\nDevice time per iteration (ms; every column but *source* and the idle one) from a "
        "profiler trace of a few iterations after the measurement, by op class "
        "(dlperf.measure.breakdown.opclass); overlapping ops share their time, so the classes "
        "add up to *busy ms*. *idle ms (of traced step ms)*: the time of a traced step with no "
        "device op running, of that step's wall time, which the profiler lengthens on a "
        "host-bound step, so it can exceed *step ms*; the gap tables use fused step - busy "
        "instead. On a CPU device the times are the host's time inside ops.\n") + \
        _other_names_markdown(rows)


def other_names(rec: RunRecord, limit: int = 8) -> list[tuple[str, float]]:
    """The largest stored names of a result's ``other`` (unclassified) time: ``[(name, s per
    iteration)]``, from ``top_by_class`` (stored since it exists) or else ``top_ops`` (the 15
    largest ops of any class, all a result stored before)."""
    oc = rec.op_classes
    if oc is None:
        return []
    named = (oc.top_by_class or {}).get("other")
    if named is None:
        named = [t for t in oc.top_ops or [] if t.get("class") == "other"]
    return [(str(t.get("name")), float(t.get("s") or 0.0)) for t in named[:limit]]


def _other_names_markdown(recs: Sequence[RunRecord]) -> str:
    lines = []
    for r in sort_rows(recs):
        oc = op_classes_of(r) or {}
        busy = (r.op_classes.busy_s if r.op_classes is not None else None) or math.fsum(
            oc.values())
        other = oc.get("other") or 0.0
        if busy and other > OTHER_LIST_SHARE * busy:
            names = other_names(r)
            listed = math.fsum(s_ for _, s_ in names)
            lines.append(f"- {r.identity.model} {framework_mode(r)} {r.identity.precision} b="
                         f"{r.identity.batch_size}: other {ms_cell(other)} ms of {ms_cell(busy)}"
                         + (": " + ", ".join(f"`{n}` {ms_cell(s_)}" for n, s_ in names)
                            + ("" if listed >= 0.999 * other else
                               f" (the rest, {ms_cell(other - listed)} ms, not stored by name)")
                            if names else ": no names stored"))
    if not lines:
        return ""
    return ("\nUnclassified device time (*other*) over "
            f"{OTHER_LIST_SHARE:.0%} of a result's busy time, by name (ms per iteration):\n\n"
            + "\n".join(lines) + "\n")
