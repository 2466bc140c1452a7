"""The relative summary of a run or sweep that measured several modes, frameworks or
precisions: one line per pair of sides, as hyperfine ends with "X ran 1.8 times faster than Y".

Each line takes every pair of points along one axis (:func:`dlperf.report.axes.axis_pairs`:
the same model, batch, device, ... in two modes, two frameworks or two precisions) with the
same two sides, and gives the speed-up of the other side over the baseline (step time of the
baseline / of the other) with its 95% interval: for one pair, that pair's (the interval of
``dlperf compare``: from runs, or from iterations when a side has one run); for several, the
geometric mean of the pairs' speed-ups with the interval that combines theirs on the log scale
(:func:`dlperf.report.regress.geometric_summary`, the summary of ``dlperf compare``) and the
range of the pairs.

Printed after ``dlperf run``/``sweep`` (:func:`summary_lines`) and in the report's "Relative
speed" section (:func:`summary_markdown`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from dlperf.report.axes import AXES, AxisPair, axis_pairs
from dlperf.report.regress import geometric_summary
from dlperf.results.schema import RunRecord

__all__ = ["relative_summary", "summary_lines", "summary_markdown", "MAX_LINES",
           "NOTHING_TO_SUMMARISE"]

#: At most this many comparison lines are printed after a run (the rest: one line naming the
#: ``--compare`` tables that hold them).
MAX_LINES = 4
#: ``--compare summary`` with nothing to compare.
NOTHING_TO_SUMMARISE = ("Nothing to summarise: no two results differ only in mode, framework or "
                        "precision. Measure a point in several, e.g. --mode eager,graph or "
                        "--precision fp32,bf16, or a sweep over frameworks.\n")


def _context(pairs: Sequence[AxisPair], axis: str) -> str:
    """``on resnet50 fp32 b=32`` for one pair; ``over 6 points (resnet50, vgg16, ...)``."""
    if len(pairs) == 1:
        i = pairs[0].base_rec.identity
        what = (f"{pairs[0].base_rec.identity.framework}/{i.mode}" if axis == "precision"
                else str(i.precision))
        return f"on {i.model} {what} b={i.batch_size}"
    models = list(dict.fromkeys(str(p.base_rec.identity.model) for p in pairs))
    shown = ", ".join(models[:3]) + (", ..." if len(models) > 3 else "")
    return f"over {len(pairs)} points ({shown})"


def relative_summary(records: Iterable[RunRecord], level: float = 0.95
                     ) -> list[dict[str, Any]]:
    """The relative speed of each pair of sides along each axis (modes, frameworks,
    precision; module docstring).

    Args:
        records: results with their samples (``ResultStore.records``).
        level: the intervals' confidence level.

    Returns:
        One dict per (axis, baseline, other): ``axis``, ``baseline``, ``other``, ``points``
        (pairs compared), ``speedup`` (step time of the baseline / of the other; the
        geometric mean over the points), ``ci_low``/``ci_high`` (None where no pair has an
        interval), ``min``/``max`` (the pairs' speed-ups), ``ci_from`` (``runs``,
        ``iterations`` where any pair's interval came from iterations, or None), ``context``
        (``on MODEL ... b=N`` or ``over N points (...)``) and ``models``.
    """
    recs = list(records)
    out = []
    for name, axis in AXES.items():
        by: dict[tuple[str, str], list[AxisPair]] = {}
        for p in axis_pairs(recs, axis, level):
            if p.speedup is not None:
                by.setdefault((p.base, p.other), []).append(p)
        for (base, other), pairs in by.items():
            gs = geometric_summary([p.comparison for p in pairs], level)
            speedups = [p.speedup or 0.0 for p in pairs]
            lo: float | None
            hi: float | None
            if gs is not None:
                sp, lo, hi = 1.0 / gs[0], 1.0 / gs[2], 1.0 / gs[1]
            else:  # no pair has an interval: the geometric mean alone
                sp = math.exp(sum(math.log(s) for s in speedups) / len(speedups))
                lo = hi = None
            froms = {p.ci_from for p in pairs}
            out.append({"axis": name, "baseline": base, "other": other, "points": len(pairs),
                        "speedup": sp, "ci_low": lo, "ci_high": hi,
                        "min": min(speedups), "max": max(speedups),
                        "ci_from": ("iterations" if "iterations" in froms else
                                    "runs" if "runs" in froms else None),
                        "context": _context(pairs, name),
                        "models": sorted({str(p.base_rec.identity.model) for p in pairs})})
    return out


def _tail(s: dict[str, Any]) -> str:
    """What follows the baseline in a summary line: the interval and the points."""
    ci = (f" [{s['ci_low']:.2f}, {s['ci_high']:.2f}]" if s["ci_low"] is not None else
          " (no interval)")
    lo, hi = f"{s['min']:.2f}x", f"{s['max']:.2f}x"
    rng = (f"; {lo} to {hi}" if s["points"] > 1 and lo != hi else "")
    ctx = s["context"]
    if rng:
        ctx = ctx[:-1] + rng + ")" if ctx.endswith(")") else ctx + rng
    return f"{ci} {ctx}"


def _line(s: dict[str, Any]) -> str:
    return f"{s['other']} runs {s['speedup']:.2f}x as fast as {s['baseline']}{_tail(s)}"


def summary_lines(summary: Sequence[dict[str, Any]], max_lines: int = MAX_LINES) -> list[str]:
    """The lines printed after a run (at most ``max_lines`` comparisons, then one line naming
    the ``dlperf results --compare`` tables of the rest, and one saying where an interval
    came from iterations); empty when there is nothing to compare."""
    if not summary:
        return []
    lines = ["relative speed (step time, 95% CI):"]
    lines += [f"  {_line(s)}" for s in summary[:max_lines]]
    rest = summary[max_lines:]
    if rest:
        names = ", ".join(dict.fromkeys(s["axis"] for s in rest))
        lines.append(f"  ... and {len(rest)} more: dlperf results --compare {names}")
    if any(s["ci_from"] == "iterations" for s in summary[:max_lines]):
        lines.append("  (intervals from the iterations of single runs leave out run-to-run "
                     "variation; --repeats 3 gives intervals from runs)")
    return lines


def summary_markdown(summary: Sequence[dict[str, Any]]) -> str:
    """The summary as Markdown bullets (every comparison), with how to read it; with none,
    :data:`NOTHING_TO_SUMMARISE`."""
    if not summary:
        return NOTHING_TO_SUMMARISE
    lines = [f"- **{s['other']}** runs **{s['speedup']:.2f}x** as fast as **{s['baseline']}**"
             + _tail(s) for s in summary]
    lines += ["", "Speed-up = step time of the second / of the first (above 1 the first is "
              "faster), 95% CI; over several points the geometric mean of their speed-ups, the "
              "interval combining theirs on the log scale, and their range. Per point: "
              "`dlperf results --compare modes`, `frameworks` or `precision`."]
    if any(s["ci_from"] == "iterations" for s in summary):
        lines.append("Where a side had one run the interval comes from its iterations and "
                     "leaves out run-to-run variation (--repeats 3 for intervals from runs).")
    return "\n".join(lines) + "\n"
