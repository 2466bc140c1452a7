"""Real data against synthetic data at the same point (``dlperf results --compare data``, the
report's "Input pipelines" section; docs/measurement.md rule 10)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from dlperf.env import environment_differences
from dlperf.report.cells import ENV_MARK, batch_cell, devices_cell, env_footnote, md_escape
from dlperf.report.cells import fmt_opt as _f
from dlperf.results.schema import RunRecord
from dlperf.results.view import (
    batch_fields,
    env_of,
    extra_measurements,
    field,
    fields,
    is_ok,
    point_of,
    repeat_in,
    result_id,
    samples_per_s,
    workers_kind,
)
from dlperf.stats import ratio_ci

__all__ = ["DATA_POINT_KEYS", "data_gaps", "data_markdown"]

#: What makes a real-data result comparable to a synthetic one (everything but the data).
DATA_POINT_KEYS = ("model", "framework", "mode", "device", "precision", "batch_size", "threads",
                   "world_size", "grad_accum")


def data_gaps(rows: Sequence[RunRecord],
              samples_of: Callable[[int], list[float]]) -> list[dict[str, Any]]:
    """Real data against synthetic data at the same point (docs/measurement.md rule 10).

    For every ok result with real data: its throughput, its data wait (share of the measured
    time spent waiting for data; ``input_bound`` label; ``median_wait_share``, the median wait
    over the median iteration), the loader workers (``workers_kind``: ``processes`` or
    ``threads`` for a JAX pipeline, None otherwise), and, where the same point ran on synthetic
    data, that throughput and ``relative_throughput`` = mean synthetic iteration time / mean
    real one, i.e. real samples/s over synthetic samples/s (1 = no input cost; below 1 the real
    pipeline slows training down), with a bootstrap CI (:func:`dlperf.stats.ratio_ci`). Means,
    not medians: a loader that stalls one iteration in N leaves the median iteration untouched
    while throughput drops (dlperf.data.pipeline). ``busy_vs_synthetic`` = (mean real iteration
    - mean data wait) / mean synthetic iteration: above 1 the step itself ran slower beside the
    pipeline, e.g. loader workers taking the CPUs the training process needs (on an H200 with 16
    DataLoader workers on 16 CPUs: 1.27 at a data wait of 0.5%); below 1 part of the wait
    overlapped the device's work on the previous step (the GPU runs ahead of the host).
    Real-data results without a synthetic twin are listed with None there. The twin is the
    synthetic run measured the same way (plain, ``+breakdown``, ``+trace``: those add work to
    the step), else the plain one; a repeated run (``repeat`` k) is set against the synthetic
    run of the same repeat, else against the synthetic repeat 0.

    Args:
        rows: records (``ResultStore.records``) read from a store (their ids name their samples).
        samples_of: result id -> measured per-iteration times (s).
    """
    ok = [r for r in rows if is_ok(r)]
    syn = {(point_of(r, DATA_POINT_KEYS), repeat_in(r), extra_measurements(r)): r
           for r in ok if r.identity.data == "synthetic"}
    out = [_data_gap(r, syn, samples_of) for r in ok if r.identity.data != "synthetic"]
    return sorted(out, key=lambda d: (str(d["model"]), str(d["framework"]), str(d["mode"]),
                                      str(d["precision"]), d["batch_size"] or 0, str(d["data"]),
                                      -1 if d["loader_workers"] is None else d["loader_workers"],
                                      d["repeat"]))


def _data_gap(r: RunRecord, syn: dict[tuple, RunRecord],
              samples_of: Callable[[int], list[float]]) -> dict[str, Any]:
    """One entry of :func:`data_gaps`: the real-data result ``r`` against its synthetic twin
    in ``syn`` ((point, repeat, extra measurements) -> result)."""
    pt = point_of(r, DATA_POINT_KEYS)
    # the synthetic run measured the same way (plain, +breakdown, +trace), else the plain
    # one; the same repeat, else the first
    base = next((syn[k] for k in ((pt, rep, ex)
                                  for ex in dict.fromkeys((extra_measurements(r), None))
                                  for rep in (repeat_in(r), 0)) if k in syn), None)
    rel = lo = hi = slowed = None
    dw = r.data_wait
    mean_wait_s = dw.mean_s if dw is not None else None
    if base is not None:
        ib, ir = result_id(base), result_id(r)  # None: not read from a store, no samples
        syn_t = samples_of(ib) if ib is not None else []
        real_t = samples_of(ir) if ir is not None else []
        rel, lo, hi = ratio_ci(syn_t, real_t, statistic="mean")
        if mean_wait_s is not None and real_t and syn_t:
            slowed = ((math.fsum(real_t) / len(real_t) - mean_wait_s)
                      / (math.fsum(syn_t) / len(syn_t)))
    return {**fields(r, DATA_POINT_KEYS), **batch_fields(r), "data": r.identity.data,
            "repeat": repeat_in(r),
            "loader_workers": field(r, "loader_workers"),
            "pipeline": (r.data_info or {}).get("placement") == "pipeline",
            "workers_kind": workers_kind(r),
            "synthetic_samples_per_s": samples_per_s(base) if base else None,
            "real_samples_per_s": samples_per_s(r),
            "relative_throughput": rel, "ci_low": lo, "ci_high": hi,
            "data_wait_share": dw.share if dw is not None else None,
            "median_wait_share": dw.median_share if dw is not None else None,
            "busy_vs_synthetic": slowed,
            "env_differs": (environment_differences(env_of(base), env_of(r))
                            if base is not None else []),
            "input_bound": dw.input_bound if dw is not None else None}


def data_markdown(gaps: Sequence[dict[str, Any]]) -> str:
    """A Markdown table of :func:`data_gaps`."""
    if not gaps:
        return "No results with real data.\n"
    lines = ["| model | framework/mode | precision | devices | scaling | global batch | "
             "per-device batch | data | loader workers | "
             "synthetic samples/s | real samples/s | real / synthetic [95% CI] | data wait | "
             "input-bound | step less wait / synthetic |",
             "|---|---|---|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---|---:|"]
    for g in gaps:
        rel = ("-" if g["relative_throughput"] is None else
               f"{g['relative_throughput']:.3f} [{g['ci_low']:.3f}, {g['ci_high']:.3f}]")
        lw = str(g["loader_workers"]) if g["loader_workers"] is not None else (
            "0" if g.get("pipeline") else "prepared")
        lw += f" {g['workers_kind']}" if g.get("workers_kind") else ""
        ib = "-" if g["input_bound"] is None else ("**yes**" if g["input_bound"] else "no")
        rep = f" #{g['repeat']}" if g.get("repeat") else ""
        mark = ENV_MARK if g.get("env_differs") else ""
        lines.append(f"| {md_escape(str(g['model']))} | {g['framework']}/{g['mode']} | {g['precision']} | "
                     f"{devices_cell(g)} | {g.get('scaling') or '-'} | {batch_cell(g)} | "
                     f"{_f(g.get('per_device_batch'), 'd')} | {g['data']}{rep} | {lw} | "
                     f"{_f(g['synthetic_samples_per_s'], ',.1f')} | "
                     f"{_f(g['real_samples_per_s'], ',.1f')} | {rel}{mark} | "
                     f"{_f(g['data_wait_share'], '.1%')} | {ib} | "
                     f"{_f(g.get('busy_vs_synthetic'), '.2f')} |")
    lines.append("")
    lines.append("*data wait*: the share of the measured time the iterations waited for their "
                 "batches; *input-bound* when above the run's threshold (10% by default). "
                 "*real / synthetic*: the ratio of throughputs (mean iteration times). "
                 "*step less wait / synthetic*: the mean iteration less its mean data wait over "
                 "the synthetic mean iteration; above 1 the step itself ran slower beside the "
                 "pipeline (loader workers competing for the CPUs); below 1 part of the wait "
                 "overlapped the device's work on the previous step. "
                 "*prepared*: batches made before timing (no pipeline). *devices*: data-"
                 "parallel replicas (real and synthetic are paired at the same count); "
                 "*scaling*: strong, --batch-size was the global batch; weak, the per-device "
                 "batch.")
    lines.append(env_footnote(
        (f"{g['model']} {g['framework']}/{g['mode']} {g['precision']} b={g['batch_size']} "
         f"{g['data']} ({g['loader_workers']} workers) vs synthetic", g.get("env_differs"))
        for g in gaps))
    return "\n".join(lines) + "\n"
