"""Repeated runs of one point (``dlperf run --repeats N``): between-run variation against the
within-run CI (``dlperf results --compare repeats``, the report's "Repeated runs" section;
docs/measurement.md rule 5)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from dlperf.report.cells import fmt_opt as _f
from dlperf.report.cells import md_escape
from dlperf.report.tables import fmt_sig
from dlperf.results.schema import RunRecord
from dlperf.results.view import ci_s, fields, is_ok, label_of_record, median_s, repeat_in, result_id
from dlperf.stats import between_run

__all__ = ["REPEAT_POINT_KEYS", "point_key_of", "repeat_runs", "repeats_markdown"]


#: Point fields kept in each :func:`repeat_runs` entry.
REPEAT_POINT_KEYS = ("model", "framework", "mode", "device", "precision", "batch_size", "data",
                     "threads", "world_size")


def point_key_of(rec: RunRecord) -> str:
    """The key shared by every repeat of a result's point: the stored ``point_key`` (run key
    of repeat 0), else the result's own run key (results stored before repeats are repeat 0)."""
    return rec.identity.point_key or rec.identity.run_key or f"id:{result_id(rec)}"


def _point_label(rec: RunRecord) -> str:
    """The label of a result's point as ``dlperf run`` prints it, without the repeat number
    (:func:`~dlperf.results.view.label_of_record`)."""
    return label_of_record(rec, repeat=False)


def repeat_runs(rows: Sequence[RunRecord]) -> list[dict[str, Any]]:
    """Between-run variation of each point with at least two ok runs (docs/measurement.md rule 5).

    Runs of one point: rows with the same :func:`point_key_of` (``dlperf run --repeats N``
    stores repeats 0 .. N-1; with every stored row, ``dlperf results --all``, re-runs of a
    repeat count as runs too). Each run is one worker process and contributes its median
    iteration time; the spread of these medians across processes is what the within-run CI
    (a bootstrap CI of one run's median, from that run's iterations) cannot show: per-process
    state such as cuDNN autotuning choices, allocator layout and host dispatch speed.

    Args:
        rows: records (``ResultStore.records``): their
            status, median step time and its CI, run and point keys and config.

    Returns:
        One dict per point, sorted by model, framework, mode, device, precision, batch, data
        and label: the :data:`REPEAT_POINT_KEYS`, ``point`` (label),
        ``point_key``, ``n`` (ok runs), ``failed`` (runs of the point that did not finish ok),
        ``repeats`` and ``ids`` of the ok runs (by repeat), ``medians_ms`` (each run's median,
        ms), the :func:`dlperf.stats.between_run` summary of the medians in ms (``mean_ms``,
        ``stdev_ms``, ``min_ms``, ``max_ms``, ``olympic_mean_ms`` (None for n < 3),
        ``mean_ci_low_ms``/``mean_ci_high_ms``: Student's t 95% CI of the mean of runs) and
        ``cv`` (stdev / mean, a fraction); ``within_ci_half`` = the median over runs of each
        run's 95% CI half-width of its median relative to that median (a fraction; None when no
        run has a CI); ``between_over_within`` = cv / within_ci_half; ``between_dominates`` =
        cv > within_ci_half. A run's CI half-width is about two standard errors of its median,
        so when one between-run standard deviation exceeds it, the runs differ by more than
        their own sampling error explains and a single run's CI understates the uncertainty.
    """
    groups: dict[str, list[RunRecord]] = {}
    for r in rows:
        groups.setdefault(point_key_of(r), []).append(r)
    out = []
    for key, rs in groups.items():
        ok = [r for r in rs if is_ok(r) and _finite_pos(median_s(r))]
        if len(ok) < 2:
            continue
        ok.sort(key=lambda r: (repeat_in(r), result_id(r) or 0))
        out.append(_repeat_summary(key, rs, ok))
    return sorted(out, key=lambda d: (str(d["model"]), str(d["framework"]), str(d["mode"]),
                                      str(d["device"]), str(d["precision"]),
                                      d["batch_size"] or 0, str(d["data"]), d["point"],
                                      d["point_key"]))


def _repeat_summary(key: str, runs: list[RunRecord], ok: list[RunRecord]) -> dict[str, Any]:
    """One entry of :func:`repeat_runs`: the point ``key`` with every run ``runs`` and the ok
    ones ``ok`` (by repeat)."""
    med = [float(median_s(r)) for r in ok]
    br = between_run(med, lower_bound=0.0)  # times: the interval stops at 0
    halves = [(float(hi) - float(lo)) / 2 / m for m, (lo, hi) in zip(med, map(ci_s, ok))
              if _finite_pos(lo) and _finite_pos(hi)]
    within = statistics.median(halves) if halves else None
    cv = br["cv"]
    ms = (lambda v: None if v is None else v * 1e3)  # noqa: E731
    return {**fields(ok[-1], REPEAT_POINT_KEYS),
            "point": _point_label(ok[0]), "point_key": key, "n": br["n"],
            "failed": sum(1 for r in runs if not is_ok(r)),
            "repeats": [repeat_in(r) for r in ok], "ids": [result_id(r) for r in ok],
            "medians_ms": [v * 1e3 for v in med],
            "mean_ms": ms(br["mean"]), "stdev_ms": ms(br["stdev"]), "cv": cv,
            "min_ms": ms(br["min"]), "max_ms": ms(br["max"]),
            "olympic_mean_ms": ms(br["olympic_mean"]),
            "mean_ci_low_ms": ms(br["mean_ci_low"]),
            "mean_ci_high_ms": ms(br["mean_ci_high"]),
            "within_ci_half": within,
            "between_over_within": (cv / within if cv is not None and within else None),
            "between_dominates": (None if cv is None or within is None else cv > within)}


def _finite_pos(v: Any) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v) and v > 0


def repeats_markdown(summaries: Sequence[dict[str, Any]]) -> str:
    """A Markdown table of :func:`repeat_runs` with a legend; a note when there is none."""
    if not summaries:
        return ("No point has two or more ok runs of `--repeats N`: measure with `dlperf run "
                "... --repeats N` (or `repeats: N` in a sweep file). A point measured again "
                "by a re-run or a merged file replaces its older run here; `--compare matrix` "
                "shows the range of all its runs.\n")
    lines = ["| point | runs | run medians (ms) | mean of runs (ms) [95% CI] | stdev (ms) | CV | "
             "min / max (ms) | olympic mean (ms) | within-run CI ± | between vs within |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    for d in summaries:
        ci = ("" if d["mean_ci_low_ms"] is None else
              f" [{fmt_sig(d['mean_ci_low_ms'])}, {fmt_sig(d['mean_ci_high_ms'])}]")
        runs = str(d["n"]) + (f" (+{d['failed']} failed)" if d["failed"] else "")
        flag = {True: "**between-run > within-run**", False: "within-run CI covers it",
                None: "-"}[d["between_dominates"]]
        lines.append(
            f"| {md_escape(str(d['point']))} | {runs} | "
            f"{', '.join(fmt_sig(v) for v in d['medians_ms'])} | "
            f"{fmt_sig(d['mean_ms'])}{ci} | {fmt_sig(d['stdev_ms'])} | {_f(d['cv'], '.1%')} | "
            f"{fmt_sig(d['min_ms'])} / {fmt_sig(d['max_ms'])} | "
            f"{fmt_sig(d['olympic_mean_ms']) if d['olympic_mean_ms'] is not None else '-'} | "
            f"{_f(d['within_ci_half'], '.1%')} | {flag} |")
    lines += ["", "Each run is its own worker process; *run medians*: each run's median time per "
              "iteration, by repeat. *CV*: between-run standard deviation / mean. *olympic "
              "mean*: the mean of the run medians without the fastest and the slowest run "
              "(MLPerf Training's scoring; 3 or more runs). *within-run CI ±*: the median over "
              "runs of a run's 95% bootstrap CI half-width, relative to its median. "
              "**between-run > within-run**: the runs differ by more than one run's CI "
              "allows (CV above it), so one run's CI understates the uncertainty: quote the mean "
              "of runs (or the olympic mean) with its between-run spread. On GPUs this comes "
              "from per-process state: cuDNN/cuBLAS autotuning choices, allocator layout, host "
              "dispatch speed, clocks."]
    return "\n".join(lines) + "\n"
