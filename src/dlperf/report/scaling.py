"""Scaling tables and plots for data-parallel results (:mod:`dlperf.perfmodel.scaling`).

Framework-free. The table has one row per (series, device count): a series is one
configuration (model, framework/mode, device, precision, data) under one kind of scaling at
one baseline batch (weak: the per-device batch; strong: the global batch), starting with its
one-device point.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dlperf.report.cells import ENV_MARK, env_footnote, fmt_sig, md_escape
from dlperf.report.drawing import draw

__all__ = ["scaling_markdown", "plot_scaling", "series_key", "SCALING_PLOT"]

SCALING_PLOT = "scaling.png"
DASH = "–"
#: After an efficiency that is not like for like (an entry's ``warnings``, e.g. the baseline's
#: threads differ from a rank's); the reasons follow the table.
FLAG_MARK = " ⚠"


def series_key(p: Mapping[str, Any]) -> tuple:
    """Identity of a scaling series (what stays fixed while the devices change); the last
    element is the data-parallel variant (non-default DDP options, ``""`` for none)."""
    return (p["model"], p["framework"], p["mode"], p["device"], p["precision"], p["data"],
            p.get("threads"), p["scaling"], p["baseline_batch"], p.get("repeat") or 0,
            p.get("variant") or "")


def _f(v: Any, scale: float = 1.0) -> str:
    return DASH if v is None else fmt_sig(v * scale)


def scaling_markdown(points: Sequence[Mapping[str, Any]]) -> str:
    """A Markdown table of :func:`dlperf.perfmodel.scaling.scaling_points` (one line each)."""
    if not points:
        return ("No scaling series: a data-parallel result needs the one-device result of the "
                "same configuration (at its per-device batch for weak scaling, its global batch "
                "for strong scaling) in the same results file.\n")
    lines = ["| model | framework/mode | device | precision | data | scaling | batch (fixed) | "
             "devices | global batch | median ms | samples/s | speed-up | efficiency | "
             "efficiency (medians) [95% CI] | imbalance | exposed comm ms/iter | "
             "step increase ms (T_N − T_1) |",
             "|---|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for p in points:
        ci = ""
        if p.get("ci_low") is not None:
            ci = f" [{p['ci_low']:.3f}, {p['ci_high']:.3f}]"
        em = DASH if p.get("efficiency_median") is None else f"{p['efficiency_median']:.3f}{ci}"
        if p.get("env_differs"):
            em += ENV_MARK
        fixed = f"{p['baseline_batch']}/dev" if p["scaling"] == "weak" else str(p["baseline_batch"])
        imb = DASH if p.get("imbalance") is None else f"{p['imbalance']:.3f}"
        rep = f" #{p['repeat']}" if p.get("repeat") else ""
        dev = str(p["devices"]) if (p.get("nnodes") or 1) == 1 else \
            f"{p['nnodes']}x{p['devices'] // p['nnodes']}"
        lines.append(
            f"| {md_escape(str(p['model']))} | {p['framework']}/{p['mode']}{_variant(p)}{rep} | {p['device']} | "
            f"{p['precision']} | "
            f"{p['data']} | {p['scaling']} | {fixed} | {dev} | {p['global_batch']} | "
            f"{_f(p['tn_s'], 1e3)} | {_f(p['samples_per_s_n'])} | {p['speedup']:.3f} | "
            f"{p['efficiency']:.3f} | {em} | "
            f"{imb} | "
            f"{_f(p.get('exposed_comm_s'), 1e3)} | {_increase(p)} |")
    return "\n".join(lines) + "\n" + _flag_notes(points) + env_footnote(
        (f"{p['model']} {p['framework']}/{p['mode']}{_variant(p)} {p['precision']} "
         f"{p['devices']} devices vs 1", p.get("env_differs")) for p in points)


def _flag_notes(points: Sequence[Mapping[str, Any]]) -> str:
    """The reasons behind each :data:`FLAG_MARK`, one line per flagged row; ``""`` for none."""
    notes = [f"- {FLAG_MARK.strip()} {p['model']} {p['framework']}/{p['mode']}{_variant(p)} "
             f"{p['precision']} {p['scaling']} {p['devices']} devices: {w}"
             for p in points for w in (p.get("warnings") or [])]
    return ("\n" + "\n".join(notes) + "\n") if notes else ""


def _increase(p: Mapping[str, Any]) -> str:
    """Weak scaling, N > 1: the median step's growth over one device (ms), the whole cost of
    going data-parallel (exposed communication, the engine's host work, skew); a check on
    the traced exposed communication, which cannot exceed it by more than noise."""
    if p["scaling"] != "weak" or p["devices"] == 1 or not p.get("tn_s") or not p.get("t1_s"):
        return DASH
    return f"{(p['tn_s'] - p['t1_s']) * 1e3:+.3g}"


def _variant(p: Mapping[str, Any]) -> str:
    """`` ddp(...)`` after the framework/mode of a data-parallel run with non-default options."""
    return f" {p['variant']}" if p.get("variant") else ""


def _label(key: tuple) -> str:
    """A series' legend: its label (:func:`~dlperf.config.identity.label_of`), the DDP variant,
    and the kind of scaling with its fixed batch."""
    from dlperf.config.identity import label_of

    model, fw, mode, device, precision, data, threads, kind, b, rep, variant = key
    fixed = f"{b}/dev" if kind == "weak" else f"global {b}"
    lab = label_of({"model": model, "framework": fw, "mode": mode, "device": device,
                    "precision": precision, "data": data, "threads": threads, "repeat": rep})
    return f"{lab}{f' {variant}' if variant else ''}, {kind} ({fixed})"


def plot_scaling(points: Sequence[Mapping[str, Any]], out_dir: str | Path) -> Path | None:
    """One PNG: throughput (samples/s) against devices with the ideal line (one device's
    throughput times N for weak scaling; for strong scaling the same, the ideal speed-up is
    N), and scaling efficiency against devices. None when there are no series. Drawn by
    :func:`dlperf.report.drawing.draw`: written when this returns, or, while
    :func:`dlperf.report.drawing.drawing_aside` is open, when it closes."""
    series: dict[tuple, list[Mapping[str, Any]]] = {}
    for p in points:
        series.setdefault(series_key(p), []).append(p)
    if not series:
        return None
    for key, pts in series.items():  # a variant's line starts at the shared one-device point
        if key[-1] and not any(p["devices"] == 1 for p in pts):
            pts.extend(p for p in series.get(key[:-1] + ("",), []) if p["devices"] == 1)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / SCALING_PLOT
    draw(_draw_scaling, series, max(p["efficiency"] for p in points), path)
    return path


def _draw_scaling(series: Mapping[tuple, list[Mapping[str, Any]]], top_efficiency: float,
                  path: Path) -> None:
    """Write :func:`plot_scaling`'s PNG of its ``series`` to ``path``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12.0, 4.8), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    ax_t, ax_e = fig.subplots(1, 2)
    fig.suptitle("data-parallel scaling")
    all_n: set[int] = set()
    for i, key in enumerate(sorted(series, key=str)):
        pts = sorted(series[key], key=lambda p: p["devices"])
        xs = [p["devices"] for p in pts]
        all_n.update(xs)
        color = f"C{i % 10}"
        ax_t.plot(xs, [p["samples_per_s_n"] for p in pts], marker="o", color=color,
                  label=_label(key))
        base = next((p for p in pts if p["devices"] == 1), None)
        if base is not None:
            ax_t.plot(xs, [base["samples_per_s_n"] * n for n in xs], ls=":", color=color, lw=1)
        ax_e.plot(xs, [p["efficiency"] for p in pts], marker="o", color=color)
    ticks = sorted(all_n)
    for ax in (ax_t, ax_e):
        ax.set_xticks(ticks, labels=[str(n) for n in ticks])
        ax.set_xlabel("devices")
        ax.grid(True, alpha=0.3)
    ax_t.set_ylabel("throughput (samples/s)")
    ax_t.set_title("throughput (dotted: ideal, N x one device)", fontsize=9)
    ax_e.set_ylabel("scaling efficiency S(N)/N")
    ax_e.axhline(1.0, color="0.5", lw=1, ls="--")
    ax_e.set_ylim(0, max(1.1, top_efficiency * 1.1))
    ax_e.set_title("efficiency (weak: T1/TN; strong: T1/(N TN))", fontsize=9)
    ax_t.legend(fontsize=7, loc="upper left")
    fig.savefig(path, format="png", metadata={"Software": None})


def safe_name(text: str) -> str:
    """A file-name-safe version of ``text`` (:func:`dlperf.outputs.safe_filename`: a long one
    cut, with a hash)."""
    from dlperf.outputs import safe_filename

    return safe_filename(text, ".png")[:-4]
