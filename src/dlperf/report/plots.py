"""PNG plots of stored results (matplotlib, Agg canvas; never opens a window).

The figures are built with :class:`matplotlib.figure.Figure` and the Agg canvas directly, not
through ``pyplot``: no global backend switch, no figure registry to leak, safe in a worker.
"""

from __future__ import annotations

import functools
import math
import operator
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from dlperf.report.drawing import draw
from dlperf.report.tables import sort_rows, status_label
from dlperf.results.schema import RunRecord
from dlperf.results.view import (
    ci_s,
    field,
    is_ok,
    label_of_record,
    median_s,
    repeat_in,
    samples_per_s,
    world_of,
)

__all__ = ["plot_step_time_vs_batch", "group_key", "plot_filename", "plot_filenames"]

#: The settings a plotted line's points share (:func:`group_key`), which its legend names.
_LINE_SETTINGS = ("framework", "mode", "device", "nproc", "nnodes", "world_size", "precision",
                  "data", "threads")

_MARKERS = ("o", "s", "^", "D", "v", "P", "*", "<", ">", "h")


@functools.cache
def _plain_log_formatter() -> type:
    """The class of :func:`_PlainLogFormatter` (matplotlib is imported here, by the process
    that draws)."""
    from matplotlib.ticker import LogFormatter

    class PlainLogFormatter(LogFormatter):
        """LogFormatter's choice of which ticks to label, printed as plain numbers."""

        def __call__(self, x: float, pos: int | None = None) -> str:
            return f"{x:g}" if super().__call__(x, pos) else ""

    return PlainLogFormatter


def _PlainLogFormatter(**kwargs: Any) -> Any:  # noqa: N802 (stands for the class it makes)
    """A ``LogFormatter(**kwargs)`` whose labels (its choice of which ticks to label) are
    printed as plain numbers (0.1, 40, 6000)."""
    return _plain_log_formatter()(**kwargs)


def _finite(v: Any) -> bool:
    return v is not None and isinstance(v, (int, float)) and math.isfinite(v)


def group_key(rec: RunRecord) -> tuple[str, ...]:
    """Line identity: (framework, mode, device, precision, data, threads, devices), as strings
    (devices: ``""`` for one, ``"x2"``, ``"2x2"`` for 2 nodes of 2). The x axis is the global
    batch.

    ``threads`` is part of the key because rows that differ only in CPU threads are different
    configurations; drawing them as one line would zig-zag between them.
    """
    key = tuple(
        "" if field(rec, k) is None else str(field(rec, k))
        for k in ("framework", "mode", "device", "precision", "data", "threads")
    )
    n, nodes = world_of(rec), int(rec.identity.nnodes or 1)
    return key + ("" if n == 1 else (f"x{n}" if nodes == 1 else f"{nodes}x{n // nodes}"),)


def plot_filename(model: str, against: str = "batch") -> str:
    """File name of a model's plot: ``step_time_vs_<against>_<model>.png`` (unsafe chars ->
    '_', a long name cut with a hash: :func:`dlperf.outputs.safe_filename`); ``against`` is the x axis: ``batch`` (this module), ``threads``
    (:func:`dlperf.report.threads.plot_thread_scaling`)."""
    from dlperf.outputs import safe_filename

    return safe_filename(f"step_time_vs_{against}_{model}", ".png")


def plot_filenames(models: Iterable[str], against: str = "batch") -> dict[str, str]:
    """:func:`plot_filename` of each model, in sorted order, with ``_2``, ``_3``, ... added
    where two model names sanitise to the same file name (so no plot overwrites another)."""
    names: dict[str, str] = {}
    used: set[str] = set()
    for model in sorted(models):
        name = plot_filename(model, against)
        stem, k = name[:-4], 2
        while name in used:
            name, k = f"{stem}_{k}.png", k + 1
        used.add(name)
        names[model] = name
    return names


def _batch(rec: RunRecord) -> int | None:
    """The result's batch size as a positive int, or None (missing, not an integer, < 1)."""
    b = rec.identity.batch_size
    if b is None or isinstance(b, bool):
        return None
    try:
        b = operator.index(b)
    except TypeError:
        return None
    return b if b >= 1 else None


def _latest(recs: list[RunRecord]) -> RunRecord:
    """Of several ok results for one run (re-runs), the newest (created_at, then run_key)."""
    return max(recs, key=lambda r: (str(r.identity.created_at or ""),
                                    str(r.identity.run_key or "")))


def _point(rows: Sequence[RunRecord]
           ) -> tuple[float, float, float, float | None, int]:
    """One plotted point from the ok rows of one point: ``(median ms, low ms, high ms,
    samples/s, runs)``. Re-runs of a repeat count once (the newest); one run gives its median
    and the bootstrap CI of its median; several repeats (``--repeats``) give the median of
    their medians and the range from the fastest to the slowest run (between-run variation,
    which one run's CI does not show)."""
    by_rep: dict[int, list[RunRecord]] = {}
    for r in rows:
        by_rep.setdefault(repeat_in(r), []).append(r)
    runs = [_latest(rs) for _, rs in sorted(by_rep.items())]
    if len(runs) == 1:
        r = runs[0]
        m = median_s(r) * 1e3
        c_lo, c_hi = ci_s(r)
        lo = c_lo * 1e3 if _finite(c_lo) else m
        hi = c_hi * 1e3 if _finite(c_hi) else m
        sps = samples_per_s(r) if _finite(samples_per_s(r)) else None
        return m, lo, hi, sps, 1
    meds = [median_s(r) * 1e3 for r in runs]
    sps_all = [samples_per_s(r) for r in runs if _finite(samples_per_s(r))]
    return (statistics.median(meds), min(meds), max(meds),
            statistics.median(sps_all) if sps_all else None, len(runs))


def _model_lines(model: str, rows: list[RunRecord]) -> dict[str, Any]:
    """What :func:`_draw_model` draws of one model's rows, as plain data (it may be drawn in
    another process: :func:`dlperf.report.drawing.draw`): ``lines`` (one per group, in
    :func:`group_key` order: ``label``, ``color``, ``marker``, ``points`` ``(batch, median
    ms, ms below, ms above)``, ``sps`` ``(batch, samples/s)``, ``failed`` ``(batch, y in axes
    fraction, status label)``), the ``batches`` of the x axis, whether a point has
    ``several`` repeats and which panels have data."""
    groups: dict[tuple[str, ...], list[RunRecord]] = {}
    for r in rows:
        groups.setdefault(group_key(r), []).append(r)
    all_batches: set[int] = set()
    n_fail_marks = 0
    several = False  # a point with several repeats (plotted as median of runs, min-max bars)
    has_t = has_s = False
    lines: list[dict[str, Any]] = []
    for gi, key in enumerate(sorted(groups)):
        by_batch: dict[int, list[RunRecord]] = {}
        failed: dict[int, RunRecord] = {}
        for r in groups[key]:
            b = _batch(r)
            if b is None:
                continue  # no place on a log2 axis
            all_batches.add(b)
            if is_ok(r) and _finite(median_s(r)):
                by_batch.setdefault(b, []).append(r)
            elif not is_ok(r):
                failed.setdefault(b, r)  # first failure per batch (rows arrive sorted)
        pts = [(b, _point(rs)) for b, rs in sorted(by_batch.items())]
        several |= any(p[4] > 1 for _, p in pts)
        sps = [(b, p[3]) for b, p in pts if p[3] is not None]
        has_t |= bool(pts)
        has_s |= bool(sps)
        marks = []
        for b, r in sorted(failed.items()):
            if b in by_batch:
                continue  # a later run at this point succeeded; the table still lists the failure
            marks.append((b, 0.95 - 0.06 * (n_fail_marks % 8), status_label(r.identity.status)))
            n_fail_marks += 1
        lines.append({"label": label_of_record(groups[key][0], only=_LINE_SETTINGS),
                      "color": f"C{gi % 10}", "marker": _MARKERS[gi % len(_MARKERS)],
                      "points": [(b, p[0], max(0.0, p[0] - p[1]), max(0.0, p[2] - p[0]))
                                 for b, p in pts],
                      "sps": sps, "any_failed": bool(failed), "failed": marks})
    return {"model": model, "lines": lines, "batches": sorted(all_batches),
            "several": several, "has_t": has_t, "has_s": has_s}


def _draw_model(fig_data: dict[str, Any], path: Path) -> None:
    """Write the PNG of :func:`_model_lines`'s data to ``path``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullLocator
    from matplotlib.transforms import blended_transform_factory

    fig = Figure(figsize=(12.0, 4.8), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    ax_t, ax_s = fig.subplots(1, 2)
    fig.suptitle(f"{fig_data['model']}: step time and throughput vs batch size")
    trans_t = blended_transform_factory(ax_t.transData, ax_t.transAxes)
    trans_s = blended_transform_factory(ax_s.transData, ax_s.transAxes)
    for line in fig_data["lines"]:
        color, marker, label = line["color"], line["marker"], line["label"]
        if line["points"]:
            xs = [p[0] for p in line["points"]]
            med = [p[1] for p in line["points"]]
            yerr = [[p[2] for p in line["points"]], [p[3] for p in line["points"]]]
            ax_t.errorbar(xs, med, yerr=yerr, color=color, marker=marker, ms=5, capsize=3, lw=1.5, label=label)
            if line["sps"]:
                ax_s.plot([b for b, _ in line["sps"]], [v for _, v in line["sps"]], color=color, marker=marker, ms=5, lw=1.5, label=label)
        elif line["any_failed"]:
            # keep the group in the legend even when every point failed
            ax_t.plot([], [], color=color, marker=marker, label=label)

        # failures are results (rule 11): an 'x' at the top of both panels, labelled
        for b, y, text in line["failed"]:
            for ax, tr in ((ax_t, trans_t), (ax_s, trans_s)):
                ax.plot([b], [y], transform=tr, marker="x", ms=9, mew=2, color=color, ls="none", clip_on=False)
                ax.annotate(text, (b, y), xycoords=tr, xytext=(6, -3), textcoords="offset points", fontsize=7, color=color)

    batches = fig_data["batches"]
    for ax, has_data in ((ax_t, fig_data["has_t"]), (ax_s, fig_data["has_s"])):
        ax.set_xscale("log", base=2)
        if batches:
            ax.set_xticks(batches, labels=[str(b) for b in batches])
            lo_b, hi_b = batches[0], batches[-1]
            ax.set_xlim(lo_b / 1.5, hi_b * 1.5 if hi_b > lo_b else lo_b * 1.5)
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_yscale("log")
        # plain numbers ("40", "6") instead of 4x10^1; minor labels only when the range is short
        ax.yaxis.set_major_formatter(_PlainLogFormatter())
        ax.yaxis.set_minor_formatter(_PlainLogFormatter(labelOnlyBase=False, minor_thresholds=(1, 0.4)))
        if not has_data:  # every point failed: a log axis needs some positive range
            ax.set_ylim(1.0, 10.0)
            ax.text(0.5, 0.5, "no successful runs", transform=ax.transAxes, ha="center", va="center", color="0.4")
        ax.set_xlabel("batch size (samples per step, log2 axis)")
        ax.grid(True, which="both", alpha=0.3)
    ax_t.set_ylabel("median step time (ms, log axis)")
    ax_t.set_title("time per iteration (error bars: bootstrap CI of the median"
                   + ("; points with repeats: median of the runs' medians, bars fastest to "
                      "slowest run)" if fig_data["several"] else ")"), fontsize=9)
    ax_s.set_ylabel("throughput (samples/s, log axis)")
    ax_s.set_title("samples per second", fontsize=9)
    if fig_data["lines"]:
        ax_t.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0.0, 0.85), framealpha=0.8)
    fig.savefig(path, format="png", metadata={"Software": None})


def plot_step_time_vs_batch(rows: Sequence[RunRecord],
                            out_dir: str | Path) -> list[Path]:
    """One PNG per model: median step time (ms) and samples/s against batch size.

    Left panel: x = batch size (log2 axis), y = median time per iteration in ms (log axis) with
    the bootstrap CI of the median as error bars; one line per (framework, mode, device,
    precision, data, threads) group. Right panel: samples/s on the same x. A failed point
    (status != "ok") with no successful run of the same group and batch is drawn as an 'x' at
    the top of both panels, labelled with its status ("OOM", "crash", ...). Several ok rows for
    one point (repeated runs) plot the newest by ``created_at``.

    Creates ``out_dir``; returns the PNG paths in sorted model order (empty for no rows).
    The PNGs are drawn by :func:`dlperf.report.drawing.draw`: written when this returns, or,
    while :func:`dlperf.report.drawing.drawing_aside` is open, when it closes.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    by_model: dict[str, list[RunRecord]] = {}
    for r in sort_rows(rows):
        by_model.setdefault(str(r.identity.model), []).append(r)
    paths: list[Path] = []
    names = plot_filenames(by_model)
    for model in sorted(by_model):
        path = out / names[model]
        draw(_draw_model, _model_lines(model, by_model[model]), path)
        paths.append(path)
    return paths
