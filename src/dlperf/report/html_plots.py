"""Interactive plots of the HTML report (:mod:`dlperf.report.html`), made with plotly.

The report's points (:class:`PointView`: every run of a benchmark point, ok or not) are drawn
as:

- per model, step time and throughput against the global batch (:func:`batch_figure`), one
  line per series (every setting of the run key but the batch: framework/mode, layout,
  compile mode, optimizer, device, devices, precision, data, threads, ...; labelled as the
  results table writes them, with the settings that tell two series of one label apart),
  for the series that have two or more batch sizes;
- a throughput overview across models (:func:`overview_figure`) for the series with one batch
  size (a suite run at one batch: no one-dot plots);
- per model, the step time of each point across revisions (tags or commits,
  :func:`dlperf.results.history.revision_of`) in the order they were measured
  (:func:`trend_figure`), for points measured at two or more revisions.

Every marker's hover names the point's settings, its step time with the interval, its runs and
its warnings; points with warnings get an amber ring; failed and unavailable points are not
data: they appear as a red cross on the axis with their status (and the error in the hover).
All text taken from results is HTML-escaped before plotly sees it (plotly renders a subset of
HTML in labels).
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dlperf.report.regress import point_key_of, run_median_s
from dlperf.report.series import series_of, tell_apart
from dlperf.report.tables import fmt_sig, status_label
from dlperf.results.history import created_of, revision_of, sha_of, tag_of
from dlperf.results.schema import RunRecord
from dlperf.results.view import setting

__all__ = ["PointView", "points_of", "batch_figure", "overview_figure", "trend_figure",
           "trend_points", "figure_title", "style_figure", "log_ticks", "series_colors", "esc", "COLORS",
           "FAIL_COLOR", "WARN_COLOR"]

#: Series colours: the colour-blind-safe Okabe-Ito palette (Okabe & Ito 2008; its yellow
#: darkened for a white page), then Paul Tol's muted scheme (Tol 2021, "Colour schemes",
#: SRON/EPS/TN/09-002), then repeated.
COLORS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#C9B31C",
          "#000000", "#882255", "#44AA99", "#332288", "#999933", "#AA4499", "#117733",
          "#88CCEE", "#DDCC77")
FAIL_COLOR = "#C62828"
WARN_COLOR = "#F59E0B"
_FONT = "system-ui, -apple-system, Segoe UI, Roboto, sans-serif"


def esc(text: Any) -> str:
    """``text`` HTML-escaped, whitespace (newlines too) collapsed to single spaces."""
    return html.escape(" ".join(str(text).split()))


@dataclass
class PointView:
    """One benchmark point in the report: all its runs (ok or not) and what is drawn of it.

    ``step_s``/``ci_s``: the step time (s) and its interval: one ok run, its median and the
    bootstrap CI of the median it stored; several, the mean of their medians with Student's t
    interval (:func:`dlperf.stats.between_run`, cut at 0). ``samples_per_s``: the mean of the
    runs' throughputs, with an interval scaled from the step time's (``tp_ci``).
    """

    key: str
    model: str
    series: tuple[str, ...]
    series_label: str
    batch: int
    runs: list[RunRecord]
    ok: list[RunRecord] = field(default_factory=list)
    step_s: float | None = None
    ci_s: tuple[float, float] | None = None
    ci_text: str = ""
    samples_per_s: float | None = None
    tp_ci: tuple[float, float] | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        """``ok``; ``ok (2 of 3 runs)`` when some failed; else the failures' status labels."""
        if self.ok:
            n = len(self.runs)
            return "ok" if len(self.ok) == n else f"ok ({len(self.ok)} of {n} runs)"
        return ", ".join(sorted({status_label(r.identity.status) for r in self.runs}))

    @property
    def error(self) -> str:
        """The newest failed run's error text ('' when none failed)."""
        errs = [r.identity.error for r in self.runs if r.identity.status != "ok"]
        return str(errs[-1] or "") if errs else ""

    @property
    def label(self) -> str:
        """``model series b=N``."""
        return f"{self.model} {self.series_label} b={self.batch}"

    def hover(self) -> str:
        """The hover text (escaped HTML): settings, step time and interval, throughput, runs,
        warnings or the error."""
        rec = (self.ok or self.runs)[-1]
        it = setting(rec, "iterations") or {}
        lines = [f"<b>{esc(self.model)}</b> {esc(self.series_label)}",
                 f"global batch {self.batch}" + (f", grad accum {rec.identity.grad_accum}"
                                                 if (rec.identity.grad_accum or 1) > 1 else "")]
        if self.step_s is not None:
            lines.append(f"step {fmt_sig(self.step_s * 1e3)} ms"
                         + (f" [{fmt_sig(self.ci_s[0] * 1e3)}, {fmt_sig(self.ci_s[1] * 1e3)}]"
                            if self.ci_s else "") + f" ({esc(self.ci_text)})")
        if self.samples_per_s is not None:
            lines.append(f"{fmt_sig(self.samples_per_s)} samples/s")
        n_meas = [r.timing.n_measured for r in self.ok if r.timing and r.timing.n_measured]
        if it:
            lines.append(f"iterations: min {it.get('min_iters')}, min time "
                         f"{it.get('min_time_s')} s" + (f"; measured {', '.join(map(str, n_meas))}"
                                                        if n_meas else ""))
        lines.append(f"status: {esc(self.status)}; {len(self.runs)} run(s), "
                     f"revision {esc(revision_of(rec))}")
        if self.error:
            lines.append(f"<span style='color:{FAIL_COLOR}'>{esc(self.error[:200])}</span>")
        for w in self.warnings[:4]:
            lines.append(f"<span style='color:#B45309'>⚠ {esc(w[:160])}</span>")
        return "<br>".join(lines)


def _aggregate(pv: PointView) -> None:
    from dlperf.stats import between_run

    meds = [m for r in pv.ok if (m := run_median_s(r)) is not None]
    if len(meds) == 1:
        s = pv.ok[0].summary
        pv.step_s = meds[0]
        if s is not None and s.ci_low is not None and s.ci_high is not None:
            pv.ci_s = (float(s.ci_low), float(s.ci_high))
        pv.ci_text = "median, 95% bootstrap CI, 1 run"
    elif meds:
        br = between_run(meds, lower_bound=0.0)
        pv.step_s, pv.ci_s = br["mean"], (br["mean_ci_low"], br["mean_ci_high"])
        pv.ci_text = f"mean of {len(meds)} run medians, 95% t CI"
    tps = [r.throughput.samples_per_s for r in pv.ok
           if r.throughput is not None and r.throughput.samples_per_s]
    if tps:
        pv.samples_per_s = float(sum(tps) / len(tps))
        if pv.ci_s and pv.step_s:
            pv.tp_ci = (pv.samples_per_s * pv.step_s / pv.ci_s[1],
                        pv.samples_per_s * pv.step_s / max(pv.ci_s[0], 1e-30))
    pv.warnings = list(dict.fromkeys(w for r in pv.runs for w in (r.warnings or [])))


def points_of(records: Sequence[RunRecord]) -> list[PointView]:
    """The records grouped by point (:func:`~dlperf.report.regress.point_key_of`), each
    aggregated (:class:`PointView`), in model, series, batch order."""
    by: dict[str, PointView] = {}
    for r in records:
        k = point_key_of(r)
        if k not in by:
            key, label = series_of(r)
            by[k] = PointView(k, str(r.identity.model), key, label, int(r.identity.batch_size or 0),
                              [])
        by[k].runs.append(r)
    for pv in by.values():
        pv.ok = [r for r in pv.runs if r.identity.status == "ok" and run_median_s(r) is not None]
        _aggregate(pv)
    tell_apart(list(by.values()))
    return sorted(by.values(), key=lambda p: (p.model, p.series, p.batch))


def series_colors(pts: Sequence[PointView]) -> dict[tuple[str, ...], str]:
    """One colour per series (:data:`COLORS` in series order), the same in every figure;
    empty when there are more series than colours (then each figure colours its own series,
    so no two lines of one figure share a colour)."""
    order = sorted({p.series for p in pts})
    if len(order) > len(COLORS):
        return {}
    return {s: COLORS[n % len(COLORS)] for n, s in enumerate(order)}


#: A figure with more legend entries than this puts its legend under the plots (at the
#: right, a long legend takes the plots' width).
LEGEND_RIGHT_MAX = 10


def _layout(fig: go.Figure, title: str, height: int) -> None:
    """The report's look: white template, legend at the right (under the plots when it has
    more than :data:`LEGEND_RIGHT_MAX` entries, the figure taller by its lines), ``title``
    kept as the figure's name in its metadata (the page shows it as a heading:
    :func:`figure_title`)."""
    names = [t.name for t in fig.data if t.showlegend is not False and t.name]
    entries = len(dict.fromkeys(names))
    legend: dict[str, Any] = {"orientation": "v", "x": 1.02, "xanchor": "left", "y": 1.0,
                              "yanchor": "top", "font": {"size": 11}}
    margin = {"l": 64, "r": 16, "t": 36, "b": 56}
    if entries > LEGEND_RIGHT_MAX:
        margin["b"] = 80 + 30 * entries  # a legend line with a marker: about 29 px
        legend = {"orientation": "v", "x": 0.0, "xanchor": "left", "y": -0.08,
                  "yanchor": "top", "font": {"size": 11}, "maxheight": margin["b"]}
        height += margin["b"] - 56
        legend["y"] = -56 / max(height - margin["b"] - margin["t"], 1)
    fig.update_layout(
        height=height, template="plotly_white", font={"family": _FONT, "size": 12},
        margin=margin, hovermode="closest", legend=legend,
        hoverlabel={"align": "left"}, meta={"title": title})


#: The report's look for a figure made elsewhere (:mod:`dlperf.report.predicted`).
style_figure = _layout


def figure_title(fig: go.Figure) -> str:
    """The title :func:`_layout` gave ``fig`` (plain text, not escaped)."""
    meta = fig.layout.meta
    return str(meta.get("title", "")) if isinstance(meta, dict) else ""


def log_ticks(lo: float, hi: float) -> tuple[list[float], list[str]] | None:
    """Ticks of a log axis from ``lo`` to ``hi`` on the 1-2-5 series, labelled plainly (``500``,
    ``1k``, ``2.5M`` style: 4 significant digits at most); None when fewer than 3 fall in the
    range (plotly's own ticks then)."""
    if not (lo > 0 and hi > lo):
        return None
    vals = [m * 10.0 ** e for e in range(math.floor(math.log10(lo)) - 1,
                                         math.ceil(math.log10(hi)) + 1) for m in (1, 2, 5)]
    vals = [v for v in vals if lo <= v <= hi]
    if len(vals) < 3:
        return None

    def label(v: float) -> str:
        for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
            if v >= div:
                return f"{v / div:g}{unit}"
        return f"{v:g}"
    return vals, [label(v) for v in vals]


def _err(v: float | None, ci: tuple[float, float] | None, scale: float = 1.0) -> tuple:
    if v is None or ci is None:
        return (0.0, 0.0)
    return (max(0.0, (ci[1] - v) * scale), max(0.0, (v - ci[0]) * scale))


def _warn_trace(pts: Sequence[PointView], xs: Sequence[Any], ys: Sequence[float | None],
                row: int | None, col: int | None, fig: go.Figure, show: bool) -> None:
    """Amber rings on the points with warnings (hover: the warnings)."""
    sel = [i for i, p in enumerate(pts) if p.warnings and ys[i] is not None]
    show = show and not any(t.legendgroup == "warn" for t in fig.data)
    if sel:
        fig.add_trace(go.Scatter(
            x=[xs[i] for i in sel], y=[ys[i] for i in sel], mode="markers",
            marker={"symbol": "circle-open", "size": 17, "color": WARN_COLOR,
                    "line": {"width": 2.5}},
            name="⚠ has warnings (hover)", legendgroup="warn", showlegend=show,
            hovertext=[pts[i].hover() for i in sel], hoverinfo="text"), row=row, col=col)


def _fail_marks(fig: go.Figure, pts: Sequence[PointView], xs: list[Any], n_cols: int,
                log_x: bool) -> None:
    """Failed/unavailable points: a red cross at the bottom of each panel with the status, one
    per x (not data: placed on the axis; every failed point and its error in the hover)."""
    at: dict[Any, list[PointView]] = {}
    for x, p in zip(xs, pts):
        if not p.ok:
            at.setdefault(x, []).append(p)
    for x, fails in at.items():
        statuses = sorted({p.status for p in fails})
        text = f"✗ {esc(', '.join(statuses))}" + (f" ×{len(fails)}" if len(fails) > 1 else "")
        hover = "<br><br>".join(p.hover() for p in fails)
        for c in range(1, n_cols + 1):
            ax = "" if c == 1 else str(c)
            fig.add_annotation(x=math.log10(x) if log_x else x, y=0.0, xref=f"x{ax}",
                               yref=f"y{ax} domain", text=text, showarrow=False,
                               yanchor="bottom", textangle=-90, hovertext=hover,
                               font={"color": FAIL_COLOR, "size": 11},
                               bgcolor="rgba(255,255,255,0.85)")


def batch_figure(model: str, pts: Sequence[PointView],
                 colors: dict[tuple[str, ...], str] | None = None) -> go.Figure:
    """Step time (ms, left) and throughput (samples/s, right) against the global batch (log
    axes) for ``model``'s points, one line per series (``colors``: :func:`series_colors`);
    error bars: the step time's interval (throughput's scaled from it)."""
    colors = colors or series_colors(pts)
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.09,
                        subplot_titles=("step time per iteration (ms, log)",
                                        "throughput (samples/s, log)"))
    series = list(dict.fromkeys(p.series for p in pts))
    fails: list[PointView] = []
    spans: dict[int, list[float]] = {1: [], 2: []}
    for n, s in enumerate(series):
        sp = [p for p in pts if p.series == s]
        ok = [p for p in sp if p.step_s is not None]
        fails += [p for p in sp if not p.ok]
        color = colors.get(s, COLORS[n % len(COLORS)])
        xs = [p.batch for p in ok]
        for col, ys, err in (
                (1, [(p.step_s or 0.0) * 1e3 for p in ok],
                 [_err(p.step_s, p.ci_s, 1e3) for p in ok]),
                (2, [p.samples_per_s or 0.0 for p in ok],
                 [_err(p.samples_per_s, p.tp_ci) for p in ok])):
            spans[col] += [y + e[0] for y, e in zip(ys, err)]
            spans[col] += [y - e[1] for y, e in zip(ys, err) if y - e[1] > 0]
            fig.add_trace(go.Scatter(
                x=xs, y=ys, mode="lines+markers", name=esc(sp[0].series_label),
                legendgroup=str(n), showlegend=col == 1, line={"color": color, "width": 2},
                marker={"size": 8, "color": color},
                error_y={"type": "data", "array": [e[0] for e in err],
                         "arrayminus": [e[1] for e in err], "thickness": 1.2, "width": 4},
                hovertext=[p.hover() for p in ok], hoverinfo="text"), row=1, col=col)
            _warn_trace(ok, xs, ys, 1, col, fig, show=col == 1)
    _fail_marks(fig, fails, [p.batch for p in fails], 2, log_x=True)
    batches = sorted({p.batch for p in pts if p.batch > 0})
    pad = 0.08 * max(0.3, math.log10(batches[-1] / batches[0])) if batches else 0.1
    for col in (1, 2):
        fig.update_xaxes(type="log", title_text="global batch size", row=1, col=col,
                         tickvals=batches, ticktext=[str(b) for b in batches],
                         range=[math.log10(batches[0]) - pad, math.log10(batches[-1]) + pad]
                         if batches else None)
        ys = [y for y in spans[col] if y > 0]
        ticks = log_ticks(min(ys) / 1.15, max(ys) * 1.15) if ys else None
        fig.update_yaxes(type="log", row=1, col=col, tickvals=ticks[0] if ticks else None,
                         ticktext=ticks[1] if ticks else None)
    _layout(fig, f"{model}: step time and throughput against batch size", 460)
    return fig


def overview_figure(pts: Sequence[PointView],
                    colors: dict[tuple[str, ...], str] | None = None) -> go.Figure:
    """Throughput (samples/s) of each point whose series has one batch size: small multiples,
    one panel per model with its own linear axis from 0 (models differ by orders of
    magnitude), one bar per series in one colour across panels, its interval as an error bar;
    points with warnings marked ⚠, failed points as a red cross and their status in place of
    the bar (``colors``: :func:`series_colors`)."""
    colors = colors or series_colors(pts)
    models = list(dict.fromkeys(p.model for p in pts))
    series = list(dict.fromkeys(p.series for p in pts))
    labels = {p.series: esc(p.series_label) for p in pts}
    cols = min(3, len(models))
    rows = math.ceil(len(models) / cols)
    panel_px = 46 + 22 * len(series)
    height = max(40 + rows * (panel_px + 56), 130 + 28 * (len(series) + 2))  # the legend fits
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[esc(m) for m in models],
                        horizontal_spacing=0.05, vertical_spacing=min(0.3, 56 / height))
    shown: set[tuple[str, ...]] = set()
    for i, model in enumerate(models):
        r, c = i // cols + 1, i % cols + 1
        for n, s in enumerate(series):
            p = next((q for q in pts if q.model == model and q.series == s), None)
            if p is None:
                continue
            color = colors.get(s, COLORS[n % len(COLORS)])
            if p.samples_per_s is not None:
                e = _err(p.samples_per_s, p.tp_ci)
                fig.add_trace(go.Bar(
                    y=[len(series) - 1 - n], x=[p.samples_per_s], orientation="h", name=labels[s],
                    legendgroup=labels[s], showlegend=s not in shown,
                    marker={"color": color}, width=0.75,
                    error_x={"type": "data", "array": [e[0]], "arrayminus": [e[1]],
                             "thickness": 1.2, "width": 3},
                    text=["⚠" if p.warnings else ""], textposition="outside",
                    textfont={"color": WARN_COLOR, "size": 13}, cliponaxis=False,
                    hovertext=[p.hover()], hoverinfo="text"), row=r, col=c)
                shown.add(s)
            elif not p.ok:
                ax = "" if i == 0 else str(i + 1)
                fig.add_annotation(x=0, y=len(series) - 1 - n, xref=f"x{ax}", yref=f"y{ax}",
                                   xanchor="left", showarrow=False,
                                   text=f"✗ {esc(p.status)}", hovertext=p.hover(),
                                   font={"color": FAIL_COLOR, "size": 11})
        # one slot per series in every panel (numeric: a series missing here leaves its gap)
        fig.update_yaxes(range=[-0.6, len(series) - 0.4], showticklabels=False, showgrid=False,
                         zeroline=False, row=r, col=c)
        measured = any(q.model == model and q.samples_per_s is not None for q in pts)
        fig.update_xaxes(rangemode="tozero", row=r, col=c, tickformat="~s",
                         showticklabels=measured, showgrid=measured, range=None if measured
                         else [0, 1])
    if any(not p.ok for p in pts):
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name="✗ failed / "
                                 "unavailable (not measured)",
                                 marker={"symbol": "x", "color": FAIL_COLOR, "size": 10}))
    if any(p.warnings for p in pts):
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name="⚠ has warnings "
                                 "(hover)", marker={"symbol": "triangle-up-open", "size": 10,
                                                    "color": WARN_COLOR}))
    fig.update_layout(bargap=0.15)
    _layout(fig, "Throughput across models, samples/s (one batch size per series)", height)
    return fig


def trend_points(records: Sequence[RunRecord]) -> dict[str, list[tuple[str, list[RunRecord]]]]:
    """Point key -> ``[(revision, runs), ...]`` in the order the revisions were first measured
    (:func:`~dlperf.results.history.revision_of`), for the points measured at two or more
    revisions and ok at one at least (a point that failed at every revision has no trend: the
    failures section lists it)."""
    first: dict[str, Any] = {}
    by: dict[str, dict[str, list[RunRecord]]] = {}
    for r in records:
        rev = revision_of(r)
        t = created_of(r)
        if t is not None and (rev not in first or t < first[rev]):
            first[rev] = t
        first.setdefault(rev, None)
        by.setdefault(point_key_of(r), {}).setdefault(rev, []).append(r)
    order = sorted(first, key=lambda v: (first[v] is None, first[v] or 0, v))
    return {k: [(v, revs[v]) for v in order if v in revs] for k, revs in by.items()
            if len(revs) >= 2 and any(r.identity.status == "ok" for rs in revs.values()
                                      for r in rs)}


def _rev_hover(pv: PointView, rev: str, runs: Sequence[RunRecord]) -> str:
    shas = sorted({s[:10] for r in runs if (s := sha_of(r))})
    tags = sorted({t for r in runs if (t := tag_of(r))})
    when = sorted(str(r.identity.created_at) for r in runs if r.identity.created_at)
    extra = [f"revision <b>{esc(rev)}</b>" + (f" (commit {esc(', '.join(shas))})" if shas else "")
             + (f", tag {esc(', '.join(tags))}" if tags and rev not in tags else ""),
             f"measured {esc(when[0] if when else '?')}"]
    return "<br>".join(extra) + "<br>" + pv.hover()


def trend_figure(model: str, trends: Sequence[tuple[str, list[tuple[str, list[RunRecord]]]]]
                 ) -> go.Figure:
    """``model``'s points across revisions: per point (a line) the step time at each revision
    relative to the point's first measured revision (1.0: unchanged; so points of different
    speeds share one axis), each revision's :class:`PointView` of its runs with its interval
    and each run's median as a small dot; failed revisions as red crosses on the axis. The
    hover gives the absolute times."""
    fig = go.Figure()
    revs_all: list[str] = []
    fails: list[tuple[str, PointView]] = []
    for n, (_key, revs) in enumerate(trends):
        color = COLORS[n % len(COLORS)]
        views = [(rev, points_of(runs)[0]) for rev, runs in revs]
        revs_all += [rev for rev, _ in views if rev not in revs_all]
        fails += [(rev, pv) for rev, pv in views if not pv.ok]
        ok = [(rev, pv) for rev, pv in views if pv.step_s is not None]
        if not ok:
            continue
        ref = ok[0][1].step_s or 1.0
        first = esc(ok[0][0])
        name = esc(views[0][1].series_label + f" b={views[0][1].batch}")
        ys = [(pv.step_s or 0.0) / ref for _, pv in ok]
        err = [_err(pv.step_s, pv.ci_s, 1.0 / ref) for _, pv in ok]
        fig.add_trace(go.Scatter(
            x=[esc(rev) for rev, _ in ok], y=ys, mode="lines+markers", name=name,
            legendgroup=str(n), line={"color": color, "width": 2},
            marker={"size": 9, "color": color},
            error_y={"type": "data", "array": [e[0] for e in err],
                     "arrayminus": [e[1] for e in err], "thickness": 1.2, "width": 4},
            hovertext=[f"{y:.3f}x the step time at {first}<br>" + _rev_hover(pv, rev, pv.runs)
                       for y, (rev, pv) in zip(ys, ok)], hoverinfo="text"))
        dots = [(rev, m / ref) for rev, pv in ok for r in pv.ok
                if (m := run_median_s(r)) is not None]
        if any(len(pv.ok) > 1 for _, pv in ok):
            fig.add_trace(go.Scatter(
                x=[esc(rev) for rev, _ in dots], y=[m for _, m in dots], mode="markers",
                marker={"size": 5, "color": color, "opacity": 0.45}, legendgroup=str(n),
                showlegend=False, hoverinfo="y", name=name + " runs"))
        _warn_trace([pv for _, pv in ok], [esc(rev) for rev, _ in ok], ys, None, None, fig,
                    show=True)
    at: dict[str, list[tuple[str, PointView]]] = {}
    for rev, pv in fails:
        at.setdefault(rev, []).append((rev, pv))
    for rev, fl in at.items():
        statuses = sorted({pv.status for _, pv in fl})
        fig.add_annotation(x=esc(rev), y=0.0, yref="y domain", showarrow=False,
                           text=f"✗ {esc(', '.join(statuses))}"
                                + (f" ×{len(fl)}" if len(fl) > 1 else ""), yanchor="bottom",
                           font={"color": FAIL_COLOR, "size": 11},
                           bgcolor="rgba(255,255,255,0.85)",
                           hovertext="<br><br>".join(_rev_hover(pv, r, pv.runs) for r, pv in fl))
    fig.add_hline(y=1.0, line={"color": "#9ca3af", "width": 1, "dash": "dash"})
    fig.update_xaxes(type="category", categoryorder="array",
                     categoryarray=[esc(r) for r in revs_all],
                     title_text="revision (tag, else commit), in the order measured")
    fig.update_yaxes(title_text="step time / at the first revision", tickformat=".3~f",
                     ticksuffix="×")
    _layout(fig, f"{model}: step time across revisions (relative to each point's first)", 420)
    return fig
