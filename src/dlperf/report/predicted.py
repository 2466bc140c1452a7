"""The report's "Predicted vs measured" section: the performance model's back-test
(:func:`dlperf.validation.validate`) on the report's own results file.

Every prediction shown was made with its measurement withheld from every fit it used
(:mod:`dlperf.validation.backtest`). The section has the per-category error table (count, MdAPE,
max, and the same for the category's baseline) and a log-log scatter of predicted against
measured step time of the held-out step-time predictions, coloured by category, with the
``y = x`` line: a PNG in the Markdown report, an interactive plotly figure in report.html
(the point's configuration, batch, file and errors in its hover).

A report must stay quick, and the full back-test is not (15 s on frameworks.db of the committed
H200 results on a 2-core VM): the section runs it under a :class:`~dlperf.validation.backtest.
Budget` of :data:`BUDGET_S` estimated seconds (deterministic: the same file gives the same
section on every machine), without the what-if categories (their first predictions refit whole
groups, seconds each), and says what it left out and the command that runs all of it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dlperf.errors import ConfigError

__all__ = ["BUDGET_S", "REPORT_CATEGORIES", "STEP_CATEGORIES", "PLOT_NAME", "BASELINES",
           "backtest", "validation_markdown", "plot_predicted", "predicted_figure",
           "predicted_section"]

#: Estimated seconds of back-test a report may spend (:class:`dlperf.validation.backtest.Budget`):
#: with loading and the plot the section adds about 1 s to ``dlperf report`` on the committed
#: H200 files on an idle 2-core VM (benchmarks/results/h200/*.db: at most 1.0 s of back-test).
BUDGET_S = 1.0
#: The back-test categories a report runs (no what-ifs: see the module's docstring).
REPORT_CATEGORIES = ("held-out batch", "extrapolate 2x", "leave-one-model-out",
                     "all-reduce >= 1 MiB", "2-GPU from 1-GPU", "repeat (noise floor)")
#: Categories whose rows are step times (the scatter's points, in its legend's order;
#: all-reduce rows are collective times, repeat rows one measurement against another): those
#: of :data:`REPORT_CATEGORIES` and every what-if category of the back-test
#: (:data:`dlperf.validation.backtest.WHATIF_CATEGORIES`), which a report's back-test does not
#: run but a full validation's rows hold.
STEP_CATEGORIES = ("held-out batch", "extrapolate 2x", "leave-one-model-out",
                   "what-if fp32->bf16", "what-if eager->graph", "what-if torch->jax",
                   "what-if jax->torch", "what-if torch graph->jax", "what-if jax->torch graph",
                   "what-if two changes", "what-if B->2B", "2-GPU from 1-GPU")
PLOT_NAME = "predicted_vs_measured.png"
#: What each category's baseline is (docs/perfmodel.md).
BASELINES = {
    "held-out batch": "t(B) = a + b B on the same points",
    "extrapolate 2x": "t(B) = a + b B on the same points",
    "leave-one-model-out": "FLOPs / (measured ceiling x the group's median efficiency)",
    "all-reduce >= 1 MiB": "one a + b M line over the sizes >= 1 MiB",
    "2-GPU from 1-GPU": "1-GPU step + the gradient all-reduce, no overlap",
    "repeat (noise floor)": "none (the earlier file's measurement is the prediction)",
}


def backtest(db: str | Path, budget_s: float | None = BUDGET_S) -> Any:
    """The bounded back-test of one results file (:func:`dlperf.validation.validate` over
    :data:`REPORT_CATEGORIES`); a :class:`dlperf.validation.backtest.Validation`.

    Raises:
        ConfigError: the file is missing or not a results database.
    """
    from dlperf import validation

    return validation.validate(db, REPORT_CATEGORIES, budget_s=budget_s)


def _pct(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def validation_markdown(v: Any) -> str:
    """The error table: per category count, MdAPE and max of the model and of the baseline (%),
    and the predictions the budget left out."""
    summary = {d["category"]: d for d in v.summary()}
    cats = [c for c in REPORT_CATEGORIES if c in summary or v.left_out.get(c)]
    lines = ["| category | n | MdAPE % | max % | baseline MdAPE % | baseline max % | "
             "left out |", "|---|---:|---:|---:|---:|---:|---:|"]
    for c in cats:
        d = summary.get(c)
        if d is None:
            lines.append(f"| {c} | 0 | – | – | – | – | {v.left_out.get(c, 0)} |")
            continue
        lines.append(f"| {c} | {d['count']} | {_pct(d['mdape_pct'], 2)} | {_pct(d['max_pct'])} "
                     f"| {_pct(d['baseline_mdape_pct'], 2)} | {_pct(d['baseline_max_pct'])} | "
                     f"{v.left_out.get(c, 0)} |")
    return "\n".join(lines) + "\n"


def _step_rows(v: Any) -> list[Any]:
    return [r for r in v.rows if r.category in STEP_CATEGORIES
            and r.measured_s > 0 and r.predicted_s > 0]


def _short(label: str) -> str:
    """A row's label with the results file shortened to its name (``... [dlbench.db]``)."""
    head, sep, tail = label.rpartition(" [")
    if not sep:
        return label
    return f"{head} [{' -> '.join(Path(p.strip()).name for p in tail.rstrip(']').split('->'))}]"


def plot_predicted(rows: Sequence[Any], out_dir: str | Path) -> Path | None:
    """PNG (matplotlib): predicted against measured step time (ms, log-log), one colour per
    category, the ``y = x`` line and +-10% lines; None when there is no row. Drawn by
    :func:`dlperf.report.drawing.draw`: written when this returns, or, while
    :func:`dlperf.report.drawing.drawing_aside` is open, when it closes."""
    from dlperf.report.drawing import draw

    if not rows:
        return None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / PLOT_NAME
    lo, hi = _range(rows)
    draw(_draw_predicted, [(r.category, r.measured_s, r.predicted_s) for r in rows], lo, hi, path)
    return path


def _draw_predicted(points: Sequence[tuple[str, float, float]], lo: float, hi: float,
                    path: Path) -> None:
    """Write :func:`plot_predicted`'s PNG of ``(category, measured s, predicted s)`` points,
    axes from ``lo`` to ``hi`` ms, to ``path``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    fig = Figure(figsize=(6.4, 5.6), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    ax.plot([lo, hi], [lo, hi], color="0.3", lw=1, label="y = x")
    for f, ls in ((1.1, ":"), (1 / 1.1, ":")):
        ax.plot([lo, hi], [lo * f, hi * f], color="0.6", lw=0.8, ls=ls)
    for i, cat in enumerate(c for c in STEP_CATEGORIES if any(p[0] == c for p in points)):
        ps = [p for p in points if p[0] == cat]
        ax.scatter([p[1] * 1e3 for p in ps], [p[2] * 1e3 for p in ps], s=18,
                   color=f"C{i % 10}", label=f"{cat} ({len(ps)})", alpha=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):  # 1-2-5 ticks as plain numbers (2, 5, 10, 20 ms)
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        axis.set_minor_formatter(NullFormatter())
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured step time (ms)")
    ax.set_ylabel("predicted step time (ms), measurement withheld")
    ax.set_title("performance model back-test (dotted: +-10%)", fontsize=9)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7, loc="upper left")
    fig.savefig(path, format="png", metadata={"Software": None})


def _range(rows: Sequence[Any]) -> tuple[float, float]:
    vals = [x * 1e3 for r in rows for x in (r.measured_s, r.predicted_s)]
    return min(vals) / 1.25, max(vals) * 1.25


def _hover(r: Any) -> str:
    from dlperf.report.html_plots import esc

    base = ("" if r.baseline_s is None else
            f"<br>baseline {r.baseline_s * 1e3:.4g} ms ({r.baseline_ape:.1f}% off)")
    bound = f"<br>{esc(r.bound)}-bound (model)" if r.bound else ""
    return (f"{esc(_short(r.label))}<br>{esc(r.category)}<br>measured "
            f"{r.measured_s * 1e3:.4g} ms, predicted {r.predicted_s * 1e3:.4g} ms "
            f"({r.predicted_s / r.measured_s - 1:+.1%}){base}{bound}")


def predicted_figure(rows: Sequence[Any]) -> Any:
    """The plotly figure of :func:`plot_predicted` (hover: the point's configuration, batch,
    results file, both times, the error, the baseline's and the model's bound)."""
    import plotly.graph_objects as go

    from dlperf.report.html_plots import COLORS, log_ticks, style_figure

    lo, hi = _range(rows)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="y = x",
                             line={"color": "#555", "width": 1}, hoverinfo="skip"))
    for f, name in ((1.1, "+10%"), (1 / 1.1, "-10%")):
        fig.add_trace(go.Scatter(x=[lo, hi], y=[lo * f, hi * f], mode="lines", name=name,
                                 line={"color": "#aaa", "width": 1, "dash": "dot"},
                                 hoverinfo="skip", showlegend=False))
    for i, cat in enumerate(c for c in STEP_CATEGORIES if any(r.category == c for r in rows)):
        rs = [r for r in rows if r.category == cat]
        fig.add_trace(go.Scatter(
            x=[r.measured_s * 1e3 for r in rs], y=[r.predicted_s * 1e3 for r in rs],
            mode="markers", name=f"{cat} ({len(rs)})",
            marker={"color": COLORS[i % len(COLORS)], "size": 8, "opacity": 0.85},
            hovertext=[_hover(r) for r in rs], hoverinfo="text"))
    ticks = log_ticks(lo, hi)
    axis: dict[str, Any] = {"type": "log", "range": [math.log10(lo), math.log10(hi)]}
    if ticks:
        axis.update(tickvals=ticks[0], ticktext=ticks[1])
    fig.update_xaxes(title_text="measured step time (ms)", **axis)
    fig.update_yaxes(title_text="predicted step time (ms), measurement withheld",
                     scaleanchor="x", **axis)
    style_figure(fig, "Predicted against measured step time (held-out predictions)", 520)
    return fig


def validate_command(db: str | Path) -> str:
    """The command that runs the full back-test of the report's results: ``db`` as the report
    was given it (relative to where ``dlperf report`` ran, as every ``--db`` is), quoted for a
    shell where it needs it; the file's name alone ran only in its own folder (``--db h200``
    of ``--db benchmarks/results/h200``)."""
    import shlex

    from dlperf.outputs import shown_path

    return f"dlperf predict --validate --db {shlex.quote(shown_path(str(db)))}"


def _note(v: Any, db: str | Path) -> str:
    left = sum(v.left_out.values())
    text = ("Every prediction was made with its measurement withheld from every fit "
            "(docs/perfmodel.md, \"Validation\"). Baselines: "
            + "; ".join(f"*{c}*: {BASELINES[c]}" for c in REPORT_CATEGORIES
                        if any(r.category == c for r in v.rows)) + ". ")
    text += (f"To keep the report quick this back-test ran under a budget of {v.budget_s:.1f} "
             "estimated seconds (cheap categories first, whole series or models at a time) "
             "and without the what-if categories")
    text += (f"; it left out {left} prediction(s), counted per category above" if left else "")
    return text + f". The full back-test: `{validate_command(db)}`.\n"


def predicted_section(db: str | Path, output: Path | None,
                      figures: dict[str, Any] | None = None,
                      budget_s: float | None = BUDGET_S) -> str | None:
    """The section's Markdown body (a one-line note when the back-test failed or its budget
    left every prediction out); None when the file has too few points to back-test (a
    series with 4+ batch sizes, two models in a framework/mode/precision group, an all-reduce
    sweep or a 2-GPU point with its 1-GPU series): the report shows sections with data only.

    Args:
        db: the report's results file.
        output: the report's folder for the PNG (None: no plot).
        figures: where report.html collects interactive figures (PNG name -> plotly figure);
            given, the plotly figure is put there instead of writing the PNG.
        budget_s: the back-test's budget (:data:`BUDGET_S`; None: all of it).
    """
    try:
        from dlperf.report.reuse import reused

        v = reused(("backtest", str(db), budget_s), lambda: backtest(db, budget_s))
    except (ConfigError, ValueError, LookupError, ArithmeticError) as e:
        return f"The performance model could not back-test this file: {e}\n"
    if not v.rows:
        if v.left_out:
            return ("No back-test prediction fits in the report's budget: "
                    f"`{validate_command(db)}` runs them.\n")
        return None  # too few points to back-test: no section
    body = validation_markdown(v) + "\n" + _note(v, db)
    rows = _step_rows(v)
    if rows and figures is not None:
        figures[PLOT_NAME] = predicted_figure(rows)
        body += f"\n![predicted against measured step time]({PLOT_NAME})\n"
    elif rows and output is not None and (png := plot_predicted(rows, output)) is not None:
        body += f"\n![predicted against measured step time]({png.name})\n"
    return body

