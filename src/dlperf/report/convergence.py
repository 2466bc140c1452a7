"""Convergence tables and plots: training loss against iterations and training time, compared
across device counts at the same global batch (:mod:`dlperf.measure.convergence`). Framework-free."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dlperf.config.identity import label_of
from dlperf.measure.convergence import (
    DEFAULT_WINDOW,
    curve,
    smoothed,
    summarize_convergence,
    training_time,
)
from dlperf.report.cells import fmt_sig, md_escape
from dlperf.report.drawing import draw
from dlperf.report.scaling import safe_name
from dlperf.results.schema import RunRecord
from dlperf.results.view import fields, is_ok, result_id, setting, world_of

__all__ = ["GROUP_KEYS", "convergence_groups", "convergence_markdown", "plot_convergence"]

#: What stays fixed in a convergence comparison (the devices change).
GROUP_KEYS = ("model", "framework", "mode", "device", "precision", "data", "threads",
              "batch_size")
DASH = "–"


def convergence_groups(rows: Sequence[RunRecord],
                       samples_of: Callable[[int], dict[str, dict[str, list[float]]]],
                       target_loss: float | None = None,
                       window: int = DEFAULT_WINDOW) -> list[dict[str, Any]]:
    """Groups of ok results that trained the same thing at the same global batch.

    Only real-data results are compared (synthetic labels are noise, their loss says nothing
    about convergence) unless a target loss was given or stored.

    Args:
        rows: records read from a store (``ResultStore.records``):
            their status, devices, config (``target_loss``) and the :data:`GROUP_KEYS`.
        samples_of: result id -> ``{phase: {"step_time_s": [...], "loss": [...]}}``
            (``ResultStore.samples``).
        target_loss: overrides the target stored with each result.
        window: smoothing window (iterations).

    Returns:
        ``[{**group keys, "runs": [{"devices", "nnodes", "id", "times" (per-iteration step
        times, s), "losses",
        **summarize_convergence(...)}]}]``, runs sorted by devices; compile is counted from
        each record's ``compile.compiled_at`` and ``compile.compile_before_loop_s`` (absent
        before schema 10 and in eager modes: the first iteration is the only compile step and
        nothing is known of compile work before the loop, shown as "not recorded").
    """
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        rid = result_id(r)
        if not is_ok(r) or rid is None:
            continue
        target = target_loss if target_loss is not None else setting(r, "target_loss")
        if r.identity.data == "synthetic" and target is None:
            continue
        raw = samples_of(rid)
        s = {ph: v["step_time_s"] for ph, v in raw.items() if ":" not in ph}
        ls = {ph: v["loss"] for ph, v in raw.items() if ":" not in ph}
        times, losses = curve(s, ls)
        if not losses or any(x is None for x in losses):
            continue
        comp = r.compile
        run = {"devices": world_of(r), "nnodes": int(r.identity.nnodes or 1),
               "id": rid, "times": times, "losses": losses,
               **summarize_convergence(
                   s, ls, target, window,
                   compiled_at=comp.compiled_at if comp is not None else None,
                   compile_before_loop_s=comp.compile_before_loop_s if comp is not None
                   else None)}
        groups.setdefault(tuple(fields(r, GROUP_KEYS).values()), []).append(run)
    out = []
    for key, runs in groups.items():
        out.append({**dict(zip(GROUP_KEYS, key)),
                    "runs": sorted(runs, key=lambda x: (x["devices"], x["id"]))})
    return sorted(out, key=lambda g: tuple(str(g[k]) for k in GROUP_KEYS))


def _compile_cell(r: Mapping[str, Any]) -> str:
    """``total (before loop + in loop)`` compile seconds; where the run recorded no compile
    work before the loop (an eager mode, or a record before schema 10), ``total (in loop;
    before the loop: not recorded)``."""
    before = r.get("compile_before_loop_s")
    if before is None:
        return (f"{fmt_sig(r.get('compile_time_s'))} (in loop; before the loop: "
                "not recorded)")
    return (f"{fmt_sig(r.get('compile_time_s'))} "
            f"({fmt_sig(before)} + {fmt_sig(r.get('compile_in_loop_s'))})")


def convergence_markdown(groups: Sequence[Mapping[str, Any]]) -> str:
    """One line per run: devices, iterations, training time (with compile), final smoothed
    loss, the iterations and training time to the target loss with and without compile, the
    compile time (before the loop + in it, s) and the recompiles
    (:func:`dlperf.measure.convergence.summarize_convergence`)."""
    if not groups:
        return ("No convergence runs (ok results on real data, or with --target-loss).\n")
    lines = ["| model | framework/mode | device | precision | data | global batch | devices | "
             "iterations | training s | final loss (smoothed) | target loss | "
             "iterations to target | s to target | s to target without compile | "
             "compile s (before loop + in loop) | recompiles |",
             "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for g in groups:
        for r in g["runs"]:
            tgt = r.get("target_loss")
            hit = r.get("reached")
            lines.append(
                f"| {md_escape(str(g['model']))} | {g['framework']}/{g['mode']} | {g['device']} | "
                f"{g['precision']} | {g['data']} | {g['batch_size']} | {r['devices']} | "
                f"{r['iterations']} | {fmt_sig(r['training_time_s'])} | "
                f"{fmt_sig(r['final_smoothed_loss'])} | {DASH if tgt is None else f'{tgt:g}'} | "
                f"{r['iterations_to_target'] if hit else ('not reached' if tgt is not None else DASH)} | "
                f"{fmt_sig(r['time_to_target_s']) if hit else DASH} | "
                f"{fmt_sig(r.get('time_to_target_no_compile_s')) if hit else DASH} | "
                f"{_compile_cell(r)} | {r.get('recompiles', DASH)} |")
    return "\n".join(lines) + "\n"


def plot_convergence(groups: Sequence[Mapping[str, Any]], out_dir: str | Path,
                     window: int = DEFAULT_WINDOW) -> list[Path]:
    """One PNG per group: smoothed training loss against iterations (left) and against
    training time (right), one line per device count, the target as a dashed line. Drawn
    by :func:`dlperf.report.drawing.draw`: written when this returns, or, while
    :func:`dlperf.report.drawing.drawing_aside` is open, when it closes."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for g in groups:
        name = safe_name(f"convergence_{g['model']}_{g['framework']}_{g['mode']}_{g['device']}_"
                         f"{g['precision']}_{g['data']}_b{g['batch_size']}") + ".png"
        path = out / name
        draw(_draw_convergence, g, window, path)
        paths.append(path)
    return paths


def _draw_convergence(g: Mapping[str, Any], window: int, path: Path) -> None:
    """Write :func:`plot_convergence`'s PNG of the group ``g`` to ``path``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12.0, 4.5), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    ax_i, ax_t = fig.subplots(1, 2)
    fig.suptitle(f"{label_of({k: g[k] for k in GROUP_KEYS})}: training loss")
    for i, r in enumerate(g["runs"]):
        sm = smoothed(r["losses"], window)
        xs = [k + 1 for k, v in enumerate(sm) if v is not None]
        ys = [v for v in sm if v is not None]
        cum = training_time(r["times"])
        before = r.get("compile_before_loop_s") or 0.0  # training time counts compile
        ts = [before + cum[k - 1] for k in xs]
        label = f"{r['devices']} device{'s' if r['devices'] > 1 else ''}"
        ax_i.plot(xs, ys, color=f"C{i % 10}", label=label)
        ax_t.plot(ts, ys, color=f"C{i % 10}", label=label)
        if r.get("target_loss") is not None:
            for ax in (ax_i, ax_t):
                ax.axhline(r["target_loss"], color="0.4", ls="--", lw=1)
    ax_i.set_xlabel("iteration")
    ax_t.set_xlabel("training time (s: compile before the loop + iteration times)")
    for ax in (ax_i, ax_t):
        ax.set_ylabel(f"loss (mean of last {window})")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.savefig(path, format="png", metadata={"Software": None})
