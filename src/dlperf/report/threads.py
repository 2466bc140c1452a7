"""CPU thread scaling: time per iteration against ``--threads`` (``dlperf results --compare
threads``, the report's "CPU thread scaling" section and its plots).

Shi et al. 2016 (DLBench, section IV and Figs. 3-5) ran each network on the CPU at 1 to 32
threads and plotted the time per mini-batch against the thread count; this module gives the
same view of stored results. For each group of results that differ only in their thread count
(same model, framework/mode column, device, precision, batch, data, ...), with ``n0`` the
fewest threads measured and ``T(n)`` the median iteration time at ``n`` threads:

* speed-up ``S(n) = T(n0) / T(n)``, with a bootstrap CI of the ratio of medians from the raw
  samples (:func:`dlperf.stats.ratio_of_medians_ci`) where they are stored;
* parallel efficiency ``E(n) = S(n) / (n / n0)`` (1 = linear scaling);
* the Karp-Flatt metric, the experimentally determined serial fraction
  ``e(n) = (1/S - 1/p) / (1 - 1/p)`` with ``p = n / n0`` (Karp & Flatt 1990, "Measuring
  parallel processor performance", CACM 33(5)): constant ``e`` across ``p`` is Amdahl's law
  with serial fraction ``e``; an ``e`` that grows with ``p`` is parallel overhead (threads
  contending for memory bandwidth, synchronisation), not a serial part.

Only the newest run of a configuration counts (``ResultStore.records()``); a failed run (timeout,
crash, OOM) at a thread count is kept as a point with its status, since a failure is a result.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dlperf.env import environment_differences
from dlperf.report.cells import (
    ENV_MARK,
    batch_cell,
    data_cell,
    device_cell,
    env_footnote,
    md_escape,
)
from dlperf.report.matrix import matrix_column
from dlperf.report.tables import status_label
from dlperf.results.schema import RunRecord
from dlperf.results.view import ci_s, env_of, is_ok, median_s, point_of, result_id, warnings_text
from dlperf.stats import ratio_of_medians_ci

__all__ = ["GROUP_KEYS", "thread_scaling", "threads_flat", "threads_markdown",
           "plot_thread_scaling", "karp_flatt"]

#: What a group of a thread sweep shares: every comparison key but ``threads``
#: (:data:`dlperf.results.view.POINT_KEYS`), plus the framework/mode column.
GROUP_KEYS = ("model", "device", "precision", "batch_size", "data", "loader_workers",
              "world_size", "grad_accum")


def karp_flatt(speedup: float, p: float) -> float | None:
    """The Karp-Flatt serial fraction ``e = (1/S - 1/p) / (1 - 1/p)`` of a speed-up ``S`` on
    ``p`` times the processors (Karp & Flatt 1990); None for ``p <= 1`` or a non-positive or
    non-finite ``S``. 0: linear scaling; 1: no gain; above 1: slower than on fewer threads."""
    if not (p > 1) or not (speedup > 0) or not math.isfinite(speedup):
        return None
    return (1.0 / speedup - 1.0 / p) / (1.0 - 1.0 / p)


#: The fields of a point of :func:`thread_scaling` (a failed one has them all None).
_EMPTY_POINT = {"threads": None, "status": None, "median_s": None, "ci_low_s": None,
                "ci_high_s": None, "steady": None, "speedup": None, "speedup_ci_low": None,
                "speedup_ci_high": None, "efficiency": None, "karp_flatt": None,
                "warnings": None}


def _ok(r: RunRecord) -> bool:
    return is_ok(r) and bool(median_s(r))


def thread_scaling(rows: Sequence[RunRecord],
                   samples_of: Callable[[int], list[float] | None] | None = None
                   ) -> list[dict[str, Any]]:
    """Thread-count groups of stored results with their speed-ups and efficiencies.

    Args:
        rows: records (``ResultStore.records()``: the newest run per configuration) read
            from a store. Results without a ``threads`` value (GPU runs, CPU runs at the framework's
            default thread count) are not part of any group.
        samples_of: result id -> measured per-iteration times (s), or None where none were
            stored; without it (or without samples) the speed-ups have no CI.

    Returns:
        One dict per group with results (ok or failed) at two or more thread counts, ordered
        by model, column, precision and batch: the :data:`GROUP_KEYS`, ``column``
        (framework/mode and its variant, :func:`dlperf.report.matrix.matrix_column`),
        ``base_threads`` (``n0``, the fewest threads that ran ok; None when none did),
        ``best_threads`` (the fastest; None likewise), ``points`` (by threads, every one with
        the same fields: ``threads``, ``status``, ``median_s``, ``ci_low_s``, ``ci_high_s``
        (s), ``steady``, ``speedup``, ``speedup_ci_low``/``_high`` (None without samples),
        ``efficiency``, ``karp_flatt`` (None at ``n0``); None for a failed point),
        ``warnings`` (the result's stored quality warnings, ``; ``-joined, or None) and
        ``env_differs`` (environment differences of any point from the base run,
        :func:`dlperf.env.environment_differences`; a thread sweep is meant to run on one
        machine).
    """
    groups: dict[tuple, dict[int, RunRecord]] = {}
    for r in rows:
        n = r.identity.threads
        if n is None:
            continue
        key = point_of(r, GROUP_KEYS) + (matrix_column(r),)
        cur = groups.setdefault(key, {}).get(n)
        # the newest result wins; an ok one beats a failed one of the same thread count
        if cur is None or (_ok(r), result_id(r) or 0) >= (_ok(cur), result_id(cur) or 0):
            groups[key][n] = r
    out = [_group(key, by_n, samples_of) for key, by_n in groups.items()
           if len(by_n) >= 2]  # one thread count: nothing scales
    return sorted(out, key=lambda g: (str(g["model"]), str(g["column"]), str(g["precision"]),
                                      g["batch_size"] or 0, str(g["device"]), str(g["data"])))


def _group(key: tuple, by_n: dict[int, RunRecord],
           samples_of: Callable[[int], list[float] | None] | None) -> dict[str, Any]:
    """One group of :func:`thread_scaling`: ``key`` (the group's fields and column) and its
    result at each thread count."""
    ok = {n: r for n, r in by_n.items() if _ok(r)}
    n0 = min(ok) if ok else None
    base = ok[n0] if n0 is not None else None
    base_id = result_id(base) if base is not None else None  # None: not read from a store
    base_samples = samples_of(base_id) if samples_of and base_id is not None else None
    points: list[dict[str, Any]] = []
    diffs: list[str] = []
    for n in sorted(by_n):
        r = by_n[n]
        if not _ok(r):  # a failure is a result: kept, with every field empty
            points.append({**_EMPTY_POINT, "threads": n, "status": r.identity.status,
                           "warnings": warnings_text(r)})
            continue
        assert base is not None and n0 is not None  # r is ok: `ok` holds it, so base is set
        t = median_s(r)
        s = median_s(base) / t
        lo = hi = None
        rid = result_id(r)
        samples = (samples_of(rid) if samples_of and base_samples and rid is not None
                   else None)
        if base_samples and samples:
            _, lo, hi = ratio_of_medians_ci(base_samples, samples)
        p = n / n0
        ci_low, ci_high = ci_s(r)
        points.append({"threads": n, "status": "ok", "median_s": t,
                       "ci_low_s": ci_low, "ci_high_s": ci_high,
                       "steady": (r.timing.steady_state if r.timing else None) is not False,
                       "speedup": s, "speedup_ci_low": lo, "speedup_ci_high": hi,
                       "efficiency": s / p, "karp_flatt": karp_flatt(s, p),
                       "warnings": warnings_text(r)})
        if r is not base:
            for d in environment_differences(env_of(base), env_of(r)):
                if d not in diffs:
                    diffs.append(d)
    return {**dict(zip(GROUP_KEYS, key[:-1])), "column": key[-1], "base_threads": n0,
            "best_threads": (min(ok, key=lambda n: median_s(ok[n])) if ok else None),
            "points": points, "env_differs": diffs}


def threads_flat(groups: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`thread_scaling` as flat rows for CSV: one row per group and thread count."""
    out = []
    for g in groups:
        head = {k: g[k] for k in GROUP_KEYS}
        head.update(column=g["column"], base_threads=g["base_threads"])
        for p in g["points"]:
            out.append({**head, **p, "env_differs": "; ".join(g["env_differs"])})
    return out


def _cell(p: Mapping[str, Any]) -> str:
    if p["status"] != "ok":
        return status_label(p["status"])
    s = f"{p['median_s'] * 1e3:.4g} ({p['speedup']:.2f}x"
    s += ", slower)" if p["speedup"] < 1 else ")"
    return s + ("" if p["steady"] else " (not steady)") + (" ⚠" if p.get("warnings") else "")


def threads_markdown(groups: Sequence[dict[str, Any]]) -> str:
    """:func:`thread_scaling` as a Markdown table: per group, the median ms per iteration at
    each thread count with its speed-up over the fewest threads, then the efficiency and the
    Karp-Flatt serial fraction at the most threads, and the fastest thread count."""
    if not groups:
        return "No configuration ran at two or more thread counts.\n"
    counts = sorted({p["threads"] for g in groups for p in g["points"]})
    lines = ["| model | framework/mode | precision | batch | device | data | "
             + " | ".join(f"{n} thr" for n in counts)
             + " | efficiency at most | serial fraction e | fastest |",
             "|---|---|---|---:|---|---|" + "---:|" * len(counts) + "---:|---:|---:|"]
    for g in groups:
        by_n = {p["threads"]: p for p in g["points"]}
        cells = [_cell(by_n[n]) if n in by_n else "–" for n in counts]
        oks = [p for p in g["points"] if p["status"] == "ok"]
        last = oks[-1] if len(oks) > 1 else None  # efficiency needs two counts that ran
        kf = last["karp_flatt"] if last else None
        lines.append(
            f"| {md_escape(str(g['model']))} | {g['column']} | {g['precision']} | {batch_cell(g)} | "
            f"{device_cell(g)} | {data_cell(g)} | " + " | ".join(cells)
            + (f" | {last['efficiency']:.0%} at {last['threads']} | " if last else " | – | ")
            + ("–" if kf is None else f"{kf:.2f}" + (" (slower)" if kf > 1 else ""))
            + f" | {g['best_threads'] if g['best_threads'] is not None else '–'}"
            + f"{ENV_MARK if g['env_differs'] else ''} |")
    lines += ["", "Median ms per iteration at each thread count (newest run), *(S x)* the "
              "speed-up S = T(n0) / T(n) over the fewest threads measured (n0); *efficiency* "
              "= S / (n / n0) at the most threads that ran; *serial fraction e*: the "
              "Karp-Flatt metric (1/S - 1/p) / (1 - 1/p), p = n / n0 (Karp & Flatt 1990): the "
              "same e at every p is Amdahl's serial fraction, an e that grows with p is "
              "parallel overhead; *slower*: S < 1, more threads took longer (then e > 1, "
              "which is no serial fraction: look for oversubscribed cores or a busy host). "
              "⚠: the result has quality warnings (a wide CI, a busy host, ...: `dlperf "
              "results -f csv` and the report's Warnings table list them). `dlperf results "
              "--compare threads -f json` gives every point's speed-up CI."]
    return "\n".join(lines) + "\n" + env_footnote(
        [(f"{g['model']} {g['column']} {g['precision']} b={g['batch_size']}", g["env_differs"])
         for g in groups], compared="thread counts'")


def plot_thread_scaling(groups: Sequence[dict[str, Any]], out_dir: str | Path) -> list[Path]:
    """One PNG per model, ``step_time_vs_threads_<model>.png`` in ``out_dir`` (created).

    Left panel: median ms per iteration against threads (log2 x, log y), the bootstrap CI of
    the median as error bars and, dashed, linear scaling from the fewest threads
    (``T(n0) n0 / n``); right panel: speed-up against threads (log2-log2, so linear
    scaling, the dashed ``n / n0``, is a straight line).
    One line per group of :func:`thread_scaling`; failed points are left out (the table lists
    them). Returns the paths in model order; empty for no groups. The PNGs are drawn by
    :func:`dlperf.report.drawing.draw`: written when this returns, or, while
    :func:`dlperf.report.drawing.drawing_aside` is open, when it closes.
    """
    from dlperf.report.drawing import draw
    from dlperf.report.plots import plot_filenames

    out = Path(out_dir)
    by_model: dict[str, list[dict[str, Any]]] = {}
    for g in groups:
        if any(p["status"] == "ok" for p in g["points"]):  # all failed: nothing to draw
            by_model.setdefault(str(g["model"]), []).append(g)
    if by_model:
        out.mkdir(parents=True, exist_ok=True)
    paths = []
    names = plot_filenames(by_model, against="threads")
    for model in sorted(by_model):
        path = out / names[model]
        draw(_draw_threads, model, by_model[model], path)
        paths.append(path)
    return paths


def _draw_threads(model: str, groups: Sequence[dict[str, Any]], path: Path) -> None:
    """Write the PNG of :func:`plot_thread_scaling` of one model's groups to ``path``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullLocator

    from dlperf.report.plots import _MARKERS, _PlainLogFormatter

    fig = Figure(figsize=(12.0, 4.8), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    ax_t, ax_s = fig.subplots(1, 2)
    fig.suptitle(f"{model}: CPU thread scaling")
    counts: set[int] = set()
    top, low = 1.0, 1.0
    for i, g in enumerate(groups):
        c, m = f"C{i % 10}", _MARKERS[i % len(_MARKERS)]
        label = f"{g['column']} {g['precision']} b={g['batch_size']}"
        pts = [p for p in g["points"] if p["status"] == "ok"]
        xs = [p["threads"] for p in pts]
        counts.update(xs)
        ms = [p["median_s"] * 1e3 for p in pts]
        lo = [max(0.0, v - (p["ci_low_s"] or p["median_s"]) * 1e3) for v, p in zip(ms, pts)]
        hi = [max(0.0, (p["ci_high_s"] or p["median_s"]) * 1e3 - v) for v, p in zip(ms, pts)]
        ax_t.errorbar(xs, ms, yerr=[lo, hi], color=c, marker=m, ms=5, capsize=3, lw=1.5,
                      label=label)
        n0, t0 = xs[0], ms[0]
        ax_t.plot(xs, [t0 * n0 / n for n in xs], color=c, ls="--", lw=0.8, alpha=0.6)
        ax_s.plot(xs, [p["speedup"] for p in pts], color=c, marker=m, ms=5, lw=1.5,
                  label=label)
        top = max(top, xs[-1] / n0, max(p["speedup"] for p in pts))
        low = min(low, min(p["speedup"] for p in pts))
    ideal = sorted(counts)
    ax_s.plot(ideal, [n / ideal[0] for n in ideal], color="0.5", ls="--", lw=1,
              label="linear")
    for ax in (ax_t, ax_s):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ideal, labels=[str(n) for n in ideal])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel("threads (log2 axis)")
        ax.grid(True, which="both", alpha=0.3)
    ax_t.set_yscale("log")
    ax_t.yaxis.set_major_formatter(_PlainLogFormatter())
    ax_t.yaxis.set_minor_formatter(_PlainLogFormatter(labelOnlyBase=False,
                                                      minor_thresholds=(1, 0.4)))
    ax_t.set_ylabel("median step time (ms, log axis)")
    ax_t.set_title("time per iteration (bars: bootstrap CI of the median; dashed: linear "
                   "scaling)", fontsize=9)
    ax_s.set_yscale("log", base=2)  # linear scaling is a straight line on log2-log2
    ax_s.set_ylim(low / 1.3, top * 1.3)
    ticks = [2.0 ** k for k in range(math.floor(math.log2(low / 1.3)),
                                      math.ceil(math.log2(top * 1.3)) + 1)]
    ax_s.set_yticks(ticks, labels=[f"{t:g}" for t in ticks])
    ax_s.set_ylim(low / 1.3, top * 1.3)
    ax_s.yaxis.set_minor_locator(NullLocator())
    ax_s.set_ylabel("speed-up over the fewest threads (log2 axis)")
    ax_s.set_title("speed-up T(n0) / T(n)", fontsize=9)
    ax_t.legend(fontsize=7, loc="upper right", framealpha=0.8)
    fig.savefig(path, format="png", metadata={"Software": None})
