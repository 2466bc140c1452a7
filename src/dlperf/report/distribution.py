"""The per-iteration distribution of each point in the HTML report: a box plot per point from
its stored raw step times (the measured iterations of every ok run of the point, pooled), as
pytest-benchmark and hyperfine show a benchmark's spread.

A box is drawn from statistics of all of the point's samples, computed here
(:func:`box_stats`), not from a subsample: quartiles by linear interpolation between order
statistics (Hyndman & Fan 1996, "Sample quantiles in statistical packages", definition 7:
NumPy's and plotly's default), whiskers to the most extreme sample within 1.5 IQR of the
quartiles and the samples beyond them drawn as outliers (Tukey 1977, "Exploratory Data
Analysis", the rule pytest-benchmark's outlier count also uses), and the mean as a dashed
line. Only the outliers are sent to the page as single samples (the most extreme
:data:`MAX_OUTLIERS` of a point), so a point of 10,000 iterations costs the page what one of
20 does.

One figure per model (:func:`distribution_figure`): a row per point, grouped by batch size,
coloured by series as in the step-time plots (:func:`dlperf.report.html_plots.series_colors`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from dlperf.report.html_plots import (
    COLORS,
    PointView,
    esc,
    log_ticks,
    series_colors,
    style_figure,
)
from dlperf.report.tables import fmt_sig

__all__ = ["box_stats", "point_samples_s", "distribution_figure", "MAX_OUTLIERS", "TUKEY_K"]

#: Tukey's fence: whiskers end at the last sample within TUKEY_K x IQR of the quartiles.
TUKEY_K = 1.5
#: Outliers of one point drawn as dots (the most extreme ones; the hover counts them all).
MAX_OUTLIERS = 40


def point_samples_s(pv: PointView) -> list[float]:
    """The measured step times (s) of every ok run of the point, pooled, finite and positive
    only (a failed run has none)."""
    return [float(x) for r in pv.ok for x in r.measured_s
            if isinstance(x, (int, float)) and math.isfinite(x) and x > 0]


def box_stats(xs: Sequence[float]) -> dict[str, Any]:
    """Box-plot statistics of ``xs`` (any unit; at least one value).

    Returns:
        ``{"n", "min", "max", "mean", "q1", "median", "q3", "lowerfence", "upperfence",
        "outliers"}``: quartiles by linear interpolation (Hyndman & Fan definition 7), the
        fences at the most extreme values within :data:`TUKEY_K` x IQR of the quartiles
        (Tukey), and the values outside them, the most extreme :data:`MAX_OUTLIERS` first
        (``n_outliers`` counts them all).

    Raises:
        ValueError: ``xs`` is empty.
    """
    a = np.sort(np.asarray(xs, dtype=float))
    if a.size == 0:
        raise ValueError("box_stats needs at least one value")
    q1, med, q3 = (float(v) for v in np.percentile(a, [25, 50, 75]))
    iqr = q3 - q1
    inside = a[(a >= q1 - TUKEY_K * iqr) & (a <= q3 + TUKEY_K * iqr)]
    lo, hi = float(inside[0]), float(inside[-1])
    out = a[(a < lo) | (a > hi)]
    far = out[np.argsort(-np.abs(out - med), kind="stable")][:MAX_OUTLIERS]
    return {"n": int(a.size), "min": float(a[0]), "max": float(a[-1]), "mean": float(a.mean()),
            "q1": q1, "median": med, "q3": q3, "lowerfence": lo, "upperfence": hi,
            "outliers": [float(v) for v in far], "n_outliers": int(out.size)}


def _hover(pv: PointView, st: dict[str, Any]) -> str:
    ms = {k: fmt_sig(st[k] * 1e3) for k in ("min", "q1", "median", "q3", "max", "mean")}
    iqr_rel = (st["q3"] - st["q1"]) / st["median"] if st["median"] else float("nan")
    runs = len(pv.ok)
    return "<br>".join([
        f"<b>{esc(pv.model)}</b> {esc(pv.series_label)} b={pv.batch}",
        f"{st['n']} measured iterations" + (f" of {runs} runs, pooled" if runs > 1 else ""),
        f"median {ms['median']} ms, mean {ms['mean']} ms",
        f"quartiles {ms['q1']} to {ms['q3']} ms (IQR {iqr_rel:.1%} of the median)",
        f"min {ms['min']} ms, max {ms['max']} ms",
        f"{st['n_outliers']} beyond {TUKEY_K} IQR (Tukey)"
        + (f", the {len(st['outliers'])} most extreme drawn" if st["n_outliers"] > len(
            st["outliers"]) else "")])


def distribution_figure(model: str, pts: Sequence[PointView],
                        colors: dict[Any, str] | None = None) -> go.Figure | None:
    """``model``'s points as horizontal box plots of their per-iteration step time (ms), one
    row per point with raw samples, rows grouped by batch size (a gap between batches, the
    batch as the tick label), one colour per series (``colors``:
    :func:`~dlperf.report.html_plots.series_colors`); the axis is logarithmic when the points
    span more than a factor of 10. None when no point of ``model`` has samples."""
    colors = colors or series_colors(pts)
    rows = [(pv, box_stats(xs)) for pv in pts if pv.model == model
            and (xs := point_samples_s(pv))]
    if not rows:
        return None
    batches = sorted({pv.batch for pv, _ in rows})
    series = list(dict.fromkeys(pv.series for pv, _ in sorted(rows, key=lambda r: r[0].series)))
    pos: dict[tuple[Any, int], float] = {}
    ticks, labels = [], []
    y = 0.0
    for b in reversed(batches):  # the smallest batch at the top
        here = [s for s in reversed(series) if any(pv.series == s and pv.batch == b
                                                   for pv, _ in rows)]
        first = y
        for s in here:
            pos[(s, b)] = y
            y += 1
        ticks.append((first + y - 1) / 2)
        labels.append(f"b={b}")
        y += 0.8  # the gap between batch sizes
    fig = go.Figure()
    for n, s in enumerate(series):
        mine = [(pv, st) for pv, st in rows if pv.series == s]
        color = colors.get(s, COLORS[n % len(COLORS)])
        name = esc(mine[0][0].series_label)
        ys = [pos[(s, pv.batch)] for pv, _ in mine]

        def col(key: str, ms: list[tuple[PointView, dict[str, Any]]] = mine) -> list[float]:
            return [st[key] * 1e3 for _, st in ms]
        fig.add_trace(go.Box(
            y=ys, q1=col("q1"), median=col("median"), q3=col("q3"), lowerfence=col("lowerfence"),
            upperfence=col("upperfence"), mean=col("mean"), orientation="h", name=name,
            legendgroup=name, marker={"color": color}, line={"color": color, "width": 1.5},
            fillcolor=_tint(color), width=0.7, boxmean=True, hoverinfo="skip"))
        # the hover of each box (a box's own hover lists the numbers without the point)
        fig.add_trace(go.Scatter(
            x=col("median"), y=ys, mode="markers", marker={"size": 14, "opacity": 0},
            legendgroup=name, showlegend=False, name=name,
            hovertext=[_hover(pv, st) for pv, st in mine], hoverinfo="text"))
        ox = [v * 1e3 for _, st in mine for v in st["outliers"]]
        oy = [yy for (_, st), yy in zip(mine, ys) for _ in st["outliers"]]
        if ox:
            fig.add_trace(go.Scatter(
                x=ox, y=oy, mode="markers", legendgroup=name, showlegend=False, name=name,
                marker={"size": 4, "color": color, "opacity": 0.6, "symbol": "circle-open"},
                hovertemplate="%{x:.4g} ms (outlier)<extra></extra>"))
    lo = min(st["min"] for _, st in rows) * 1e3
    hi = max(st["max"] for _, st in rows) * 1e3
    if hi / lo > 10:
        t = log_ticks(lo / 1.1, hi * 1.1)
        fig.update_xaxes(type="log", tickvals=t[0] if t else None,
                         ticktext=t[1] if t else None)
    fig.update_xaxes(title_text="step time per iteration (ms)" + (" (log)" if hi / lo > 10
                                                                  else ""))
    fig.update_yaxes(tickvals=ticks, ticktext=labels, range=[-0.8, y - 0.2], zeroline=False,
                     showgrid=False)
    style_figure(fig, f"{model}: per-iteration step time, one box per point", int(
        max(220, 110 + 22 * len(pos) + 14 * len(batches))))
    fig.update_layout(showlegend=True)
    return fig


def _tint(hex_color: str, alpha: float = 0.25) -> str:
    """``#RRGGBB`` as an ``rgba`` fill of opacity ``alpha``."""
    h = hex_color.lstrip("#")
    r, g, b = (int(h[i:i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha})"
