"""Batch-size advice from a batch sweep: the largest batch that fit in memory and where the
throughput stops growing.

Points that differ only in their batch size (:func:`dlperf.report.axes.free_key` without
``batch_size``) form one series; a series of two or more batch sizes gets advice:

- **fits**: the largest batch with an ok run; the smallest batch whose runs all failed is the
  *first failure*, with its status (``OOM`` where it ran out of memory, else the failure).
- **plateau**: throughput T(b) = b / median step time(b) (samples per second). The best batch
  is the one with the highest T; the plateau is the smallest batch b whose throughput is within
  :data:`PLATEAU_TOLERANCE` of the best *with the interval respected*: the lower end of the
  95% interval of T(b) / T(best) is at least ``1 - tolerance``. The interval is that of the
  step-time ratio step(best) / step(b) (:func:`dlperf.report.regress.compare_point`: from runs
  when both have two or more, else from iterations, said by ``ci_from``), scaled by the exact
  factor b / b_best. Where the best batch is the largest tried and nothing failed above it,
  throughput may still grow: the advice says to try larger batches. The samples/s printed
  beside the advice is T(best), the statistic that ranks, with the step time it comes from
  (the results table's ms/iter), because the median and its interval resist a few slow
  iterations. The results table's samples/s (mean: total samples / total time) can rank
  another batch first when iterations are noisy; the advice then says so, with both means.
  Every ok run counts, steady or not.

Printed after a run or sweep that varied the batch size (:func:`advice_lines`) and in the
report's "Batch size" section (:func:`advice_markdown`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from dlperf.report.axes import free_key, mode_label, points_of
from dlperf.report.cells import fmt_sig, md_escape
from dlperf.report.regress import compare_point, ok_runs, run_median_s
from dlperf.report.tables import fmt_bytes_triple, short_error, status_label
from dlperf.results.schema import RunRecord
from dlperf.results.view import SERIES_SETTINGS, label_of_record, samples_per_s

__all__ = ["PLATEAU_TOLERANCE", "batch_advice", "advice_lines", "advice_markdown",
           "NO_BATCH_SERIES"]

#: A batch whose throughput is within this share of the best counts as on the plateau: a
#: tolerance, not a measured constant; 5% is about the run-to-run spread of CPU timings on a
#: shared host (docs/measurement.md) and well above a GPU's.
PLATEAU_TOLERANCE = 0.05
#: ``--compare batch`` without a series of batch sizes.
NO_BATCH_SERIES = ("No batch sweep here: batch-size advice needs one point (model, framework/"
                   "mode, device, precision, data) measured at two or more batch sizes, e.g. "
                   "dlperf run -m resnet50 -b 16,32,64,128,256.\n")


def _series(records: Iterable[RunRecord]) -> list[dict[int, list[RunRecord]]]:
    """Batch size -> every run at it, for each series of points differing only in batch."""
    by: dict[str, dict[int, list[RunRecord]]] = {}
    for runs in points_of(records):
        b = runs[0].identity.batch_size
        if b is None:
            continue
        by.setdefault(free_key(runs[0], ("batch_size",)), {}).setdefault(int(b), []).extend(runs)
    return [s for s in by.values() if len(s) >= 2]


def _step_s(runs: Sequence[RunRecord]) -> float:
    """A batch's step time (s) as :func:`~dlperf.report.regress.compare_point` reads it: the
    geometric mean of the run medians with two or more runs, else the median of the measured
    iterations (else the run's median)."""
    meds = [m for r in runs if (m := run_median_s(r)) is not None and m > 0]
    if len(meds) >= 2:
        return float(np.exp(np.mean(np.log(meds))))
    xs = [float(x) for r in runs for x in r.measured_s
          if isinstance(x, (int, float)) and math.isfinite(x)]
    return float(np.median(xs)) if xs else (meds[0] if meds else 0.0)


def _mean_tput(runs: Sequence[RunRecord], fallback: float) -> float:
    """The throughput the results tables show (``samples/s (mean)``: total samples over total
    measured time, DLBench's definition), averaged over the batch's ok runs; ``fallback``
    (b / the median step) for records that stored none. The ranking and the plateau use the
    median step and its interval; this is compared with it only to say where the table's
    mean ranks another batch first."""
    xs = [float(t) for r in runs if (t := samples_per_s(r)) is not None and t > 0]
    return float(np.mean(xs)) if xs else fallback


def _failure(runs: Sequence[RunRecord]) -> dict[str, Any]:
    r = runs[-1]
    return {"status": status_label(r.identity.status), "error": short_error(r.identity.error)}


def _advice_text(a: dict[str, Any]) -> str:
    ff = a["first_failure"]
    fits = (f"fits up to b={a['fits_up_to']}" if a["fits_up_to"] is not None
            else "no batch ran")
    if ff is not None:
        fits += f" (b={ff['batch']}: {ff['status']})"
    elif a["fits_up_to"] is not None:
        fits += " (nothing larger tried)"
    if a["best_batch"] is None:
        return fits
    b = a["best_batch"]
    best = (f"{fmt_sig(a['best_median_samples_per_s'])} samples/s at b={b}: {b} / "
            f"{fmt_sig(a['best_step_s'] * 1e3)} ms median step")
    if a["still_growing"]:
        text = (f"{fits}; throughput still grows at the largest batch tried ({best}): try "
                "larger batches")
    else:
        pl = a["plateau"]
        ci = (f" [{pl['ci_low']:.0%}, {pl['ci_high']:.0%}]" if pl["ci_low"] is not None
              else "")
        if pl["batch"] == a["best_batch"]:
            text = f"{fits}; throughput peaks at b={a['best_batch']} ({best})"
        else:
            text = (f"{fits}; throughput stops growing at b={pl['batch']}: "
                    f"{pl['share']:.0%}{ci} of the best ({best})")
    note = _mean_note(a)
    return text + (f"; {note}" if note else "")


def _best_cell(a: dict[str, Any]) -> str:
    """T(best) with where it comes from: ``413.2 (b=8: 8 / 19.36 ms median step)``."""
    b = a["best_batch"]
    return (f"{fmt_sig(a['best_median_samples_per_s'])} (b={b}: {b} / "
            f"{fmt_sig(a['best_step_s'] * 1e3)} ms median step)")


def _mean_note(a: dict[str, Any]) -> str:
    """Where the results table's samples/s (mean) ranks another batch first: which, with both
    means; else empty."""
    mb = a.get("mean_best_batch")
    if mb is None or mb == a["best_batch"]:
        return ""
    means = {r["batch"]: r["samples_per_s"] for r in a["per_batch"]}
    return (f"the results table's samples/s (mean) ranks b={mb} first ({fmt_sig(means[mb])} vs "
            f"{fmt_sig(means[a['best_batch']])} at b={a['best_batch']}): noisy iterations, "
            "which the median resists")


def _one_series(by_batch: dict[int, list[RunRecord]], tolerance: float,
                level: float) -> dict[str, Any]:
    batches = sorted(by_batch)
    ok = {b: ok_runs(by_batch[b]) for b in batches}
    fitting = [b for b in batches if ok[b]]
    failed = [b for b in batches if not ok[b]]
    rep = next(r for b in batches for r in by_batch[b])
    i = rep.identity
    out: dict[str, Any] = {
        "model": i.model, "framework": i.framework, "mode": i.mode, "label": mode_label(rep),
        "series": label_of_record(rep, only=("model", *SERIES_SETTINGS)),
        "device": i.device, "world_size": i.world_size or 1, "precision": i.precision,
        "data": i.data, "threads": i.threads, "batches": batches,
        "fits_up_to": max(fitting) if fitting else None,
        "first_failure": ({"batch": min(failed), **_failure(by_batch[min(failed)])}
                          if failed else None),
        "peak_memory": (fmt_bytes_triple(ok[max(fitting)][-1]) if fitting else None),
        "tolerance": tolerance, "per_batch": [], "best_batch": None,
        "best_samples_per_s": None, "best_median_samples_per_s": None, "best_step_s": None,
        "mean_best_batch": None, "plateau": None, "still_growing": False}
    if not fitting:
        out["advice"] = _advice_text(out)
        return out
    step = {b: _step_s(ok[b]) for b in fitting}
    tput = {b: b / step[b] for b in fitting if step[b] > 0}
    shown = {b: _mean_tput(ok[b], tput[b]) for b in tput}
    if not tput:  # no step time stored (a hand-made record): nothing to rank
        out["advice"] = _advice_text(out)
        return out
    best = max(tput, key=lambda b: tput[b])
    plateau = None
    lo: float | None
    hi: float | None
    for b in tput:
        if b == best:
            share, lo, hi, src = 1.0, 1.0, 1.0, None
        else:
            pc = compare_point(str(b), ok[b], ok[best], level=level)  # step(best) / step(b)
            scale = b / best
            share = (pc.ratio or 0.0) * scale
            lo, hi = ((pc.ci[0] * scale, pc.ci[1] * scale) if pc.ci is not None
                      else (None, None))
            src = pc.ci_from
        row = {"batch": b, "samples_per_s": shown[b], "median_samples_per_s": tput[b],
               "share": share, "ci_low": lo,
               "ci_high": hi, "ci_from": src}
        out["per_batch"].append(row)
        if plateau is None and (lo if lo is not None else share) >= 1.0 - tolerance:
            plateau = row
    out.update(best_batch=best, best_samples_per_s=shown[best],
               best_median_samples_per_s=tput[best], best_step_s=step[best],
               mean_best_batch=max(shown, key=lambda b: shown[b]), plateau=plateau,
               still_growing=(best == max(fitting) == max(batches) and len(fitting) >= 2
                              and plateau is not None and plateau["batch"] == best))
    out["advice"] = _advice_text(out)
    return out


def batch_advice(records: Iterable[RunRecord], tolerance: float = PLATEAU_TOLERANCE,
                 level: float = 0.95) -> list[dict[str, Any]]:
    """The batch-size advice of every series of two or more batch sizes (module docstring).

    Args:
        records: results with their samples (``ResultStore.records``); every run of a point
            is used.
        tolerance: the plateau's tolerance, a share of the best throughput (0.05 = 5%).
        level: the intervals' confidence level.

    Returns:
        One dict per series: ``model``, ``framework``, ``mode``, ``label``, ``device``,
        ``world_size``, ``precision``, ``data``, ``threads``, ``batches`` (tried, ascending),
        ``fits_up_to`` (the largest batch with an ok run; None if none ran),
        ``first_failure`` (``{"batch", "status", "error"}`` of the smallest batch that only
        failed, or None), ``peak_memory`` (the memory cell of the largest batch that fit),
        ``best_batch`` (highest b / median step), ``best_median_samples_per_s`` (that
        throughput, samples/s), ``best_step_s`` (its step time, s), ``best_samples_per_s``
        (the results table's mean samples/s at ``best_batch``), ``mean_best_batch`` (the
        batch the table's mean ranks first), ``per_batch`` (per ok batch:
        ``batch``, ``samples_per_s`` (mean), ``median_samples_per_s``, ``share`` of the best,
        its interval ``ci_low``,
        ``ci_high`` and ``ci_from``), ``plateau`` (the ``per_batch`` entry where throughput
        stops growing), ``still_growing`` (the best is the largest batch tried, nothing failed
        above it, and no smaller batch is within the tolerance), ``tolerance`` and
        ``advice`` (one sentence).

    Raises:
        ValueError: ``tolerance`` not in (0, 1).
    """
    if not 0 < tolerance < 1:
        raise ValueError(f"tolerance must be in (0, 1), got {tolerance}")
    out = [_one_series(s, tolerance, level) for s in _series(records)]
    return sorted(out, key=lambda a: (str(a["model"]), str(a["label"]), str(a["device"]),
                                      str(a["precision"]), str(a["data"]), a["threads"] or 0))


def _who(a: dict[str, Any]) -> str:
    return str(a["series"])


def advice_lines(advice: Sequence[dict[str, Any]], max_lines: int = 6) -> list[str]:
    """The lines printed after a batch sweep: one per series (at most ``max_lines``, then
    where the rest is); empty when no series varied the batch size."""
    if not advice:
        return []
    lines = [f"batch size (within {advice[0]['tolerance']:.0%} of the best throughput, "
             "95% CI):"]
    lines += [f"  {_who(a)}: {a['advice']}" for a in advice[:max_lines]]
    if len(advice) > max_lines:
        lines.append(f"  ... and {len(advice) - max_lines} more in the report (dlperf report)")
    return lines


def advice_markdown(advice: Sequence[dict[str, Any]]) -> str:
    """The advice as a Markdown table with its legend; with none, :data:`NO_BATCH_SERIES`."""
    if not advice:
        return NO_BATCH_SERIES
    lines = ["| model | framework/mode | device | precision | data | batches tried | fits up to "
             "| first failure | best samples/s (b / median step) | throughput stops growing at |",
             "|---|---|---|---|---|---|---:|---|---:|---:|"]
    for a in advice:
        ff = a["first_failure"]
        pl = a["plateau"]
        stop = "–" if pl is None else (
            f"b={pl['batch']}: {pl['share']:.0%}"
            + (f" [{pl['ci_low']:.0%}, {pl['ci_high']:.0%}]" if pl["ci_low"] is not None
               else ""))
        if a["still_growing"]:
            stop = f"still growing at b={a['best_batch']}: try larger batches"
        mem = a["peak_memory"]
        cells = [a["model"], a["label"], a["device"], a["precision"], a["data"],
                 ", ".join(map(str, a["batches"])),
                 "–" if a["fits_up_to"] is None else
                 f"{a['fits_up_to']}" + (f" ({mem})" if mem and mem != "–" else ""),
                 "–" if ff is None else f"b={ff['batch']}: {ff['status']}",
                 "–" if a["best_batch"] is None else
                 _best_cell(a) + (f"; {note}" if (note := _mean_note(a)) else ""), stop]
        lines.append("| " + " | ".join(md_escape(str(c)) for c in cells) + " |")
    tol = advice[0]["tolerance"]
    lines += ["", f"*fits up to*: the largest batch that ran (peak memory alloc / resv / NVML, "
              f"or the process RSS); *first failure*: the smallest batch that only failed. "
              "*best samples/s*: the batch size over its median step time (the results "
              "table's ms/iter), the statistic that ranks the batches; where the table's "
              "samples/s (mean: total samples / total time) ranks another batch first, the "
              "cell says so. Every ok run counts, steady or not. "
              f"*throughput stops growing at*: the smallest batch whose throughput "
              f"(samples/s) is within {tol:.0%} of the best with its 95% interval: the lower "
              "end of the interval of its share of the best is at least "
              f"{1 - tol:.0%} (intervals as `dlperf compare`: from runs where both batches "
              "have two or more, else from iterations, which leave out run-to-run variation)."]
    return "\n".join(lines) + "\n"
