"""Comparisons between stored results: graph-optimisation effect, framework ratios, real
against synthetic data, and repeated runs of one point.

The first three are ratios of median iteration times with a bootstrap CI computed from the raw
samples (:func:`dlperf.stats.ratio_of_medians_ci`): ``speed-up = median(baseline) /
median(other)``, so a value above 1 means the other is faster. Only results that measured the
same thing are compared: same model, device, precision, batch size, data and threads, and the
same repeat (``dlperf run --repeats N``: repeat k against repeat k, labelled ``#k``).
:func:`repeat_runs` summarises the repeated runs of each point (between-run variation).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import math
import statistics

from dlperf.env import environment_differences
from dlperf.report.tables import (batch_cell, compile_mode_label, extra_measurements, fmt_sig,
                                  workers_kind)
from dlperf.results.store import repeat_of, result_of
from dlperf.stats import between_run, ratio_ci, ratio_of_medians_ci

#: What makes two results comparable.
POINT_KEYS = ("model", "device", "precision", "batch_size", "data", "threads", "loader_workers",
              "world_size", "grad_accum")
#: Point fields whose missing value means 1 (rows stored before the field existed).
_ONE_IF_NULL = ("world_size", "grad_accum")
#: The eager baseline of each framework's graph modes (JAX has no eager training mode here).
EAGER = {"torch": "eager", "tensorflow": "eager"}


def point_of(r: Mapping[str, Any], keys: Sequence[str] = POINT_KEYS) -> tuple:
    """The comparison point of a row: its ``keys`` values (default :data:`POINT_KEYS`).
    ``loader_workers`` None (batches prepared before timing) differs from 0 (the pipeline in
    the training thread); ``world_size`` and ``grad_accum`` NULL (rows stored before data
    parallelism) are 1."""
    return tuple((r.get(k) or 1) if k in _ONE_IF_NULL else r.get(k) for k in keys)


_point = point_of


def data_cell(c: Mapping[str, Any]) -> str:
    """The data set of a comparison, with its loader workers when a pipeline read it."""
    w = c.get("loader_workers")
    return f"{c.get('data')}" + ("" if w is None else f", {w} wkr")


def device_cell(c: Mapping[str, Any]) -> str:
    """The device of a comparison, ``xN`` for N data-parallel devices."""
    n = c.get("world_size") or 1
    return f"{c.get('device')}" + (f" x{n}" if n > 1 else "")


def layout_setting(r: Mapping[str, Any]) -> str:
    """The ``--layout`` a row ran with: ``auto`` (each framework's recommended layout, and rows
    stored before the option existed), ``nchw`` or ``nhwc`` (forced)."""
    return (result_of(r).get("config") or {}).get("layout") or "auto"


def _pairs(rows: Sequence[dict[str, Any]], match: Callable[[dict, dict], bool]):
    """Pairs of ok rows at one point, one repeat and one ``--layout`` setting (so a forced
    NCHW run is compared with forced NCHW, and ``auto`` with ``auto``) that ``match``."""
    ok = [r for r in rows if r.get("status") == "ok"]
    for base in ok:
        for other in ok:
            if (base is not other and _point(base) == _point(other)
                    and repeat_of(base) == repeat_of(other)
                    and layout_setting(base) == layout_setting(other) and match(base, other)):
                yield base, other


def _rep(r: dict[str, Any]) -> str:
    """`` #k`` for repeat k > 0 of a point, `` [reduce-overhead]`` etc. for a torch.compile
    mode other than the default and `` (nchw)``/`` (nhwc)`` for a forced layout, else empty."""
    k, lay, cm = repeat_of(r), layout_setting(r), compile_mode_label(r)
    return (f" #{k}" if k else "") + (f" {cm}" if cm else "") + (
        "" if lay == "auto" else f" ({lay})")


def _compare(pairs, samples_of: Callable[[int], list[float]]) -> list[dict[str, Any]]:
    out = []
    for base, other in pairs:
        ratio, lo, hi = ratio_of_medians_ci(samples_of(base["id"]), samples_of(other["id"]))
        out.append({**{k: base.get(k) for k in POINT_KEYS},
                    "baseline": f"{base['framework']}/{base['mode']}{_rep(base)}",
                    "other": f"{other['framework']}/{other['mode']}{_rep(other)}",
                    "speedup": ratio, "ci_low": lo, "ci_high": hi,
                    "env_differs": environment_differences(
                        result_of(base), result_of(other),
                        same_framework=base.get("framework") == other.get("framework"))})
    return sorted(out, key=lambda d: (str(d["model"]), str(d["other"]), str(d["precision"]),
                                      d["batch_size"] or 0))


def mode_speedups(rows: Sequence[dict[str, Any]],
                  samples_of: Callable[[int], list[float]]) -> list[dict[str, Any]]:
    """Graph-optimisation effect: each framework's graph/xla modes against its eager mode.

    Args:
        rows: result rows (from :meth:`ResultStore.rows`), with ``id``.
        samples_of: result id -> measured per-iteration times (s).
    """
    return _compare(_pairs(rows, lambda b, o: b["framework"] == o["framework"]
                           and EAGER.get(b["framework"]) == b["mode"] and o["mode"] != b["mode"]),
                    samples_of)


def framework_ratios(rows: Sequence[dict[str, Any]], samples_of: Callable[[int], list[float]],
                     baseline: str = "torch/eager") -> list[dict[str, Any]]:
    """Every other framework (each of its modes) against ``baseline`` (``framework/mode``) at
    the same point; modes of the baseline's own framework are :func:`mode_speedups`' job."""
    fw = baseline.split("/")[0]
    return _compare(_pairs(rows, lambda b, o: f"{b['framework']}/{b['mode']}" == baseline
                           and o["framework"] != fw), samples_of)


#: Why ``--compare modes`` / ``frameworks`` found no pair, and what to run or read instead.
NO_PAIRS = {
    "modes": ("No comparable pairs of results: --compare modes puts each framework's graph/xla "
              "modes against its own eager mode (torch/eager, tensorflow/eager, mxnet/eager) at "
              "the same point (model, precision, batch, device, data, threads); JAX has one mode, "
              "xla. Measure the eager mode there too (--mode eager,graph), or read every "
              "framework/mode and --compile-mode side by side with --compare matrix.\n"),
    "frameworks": ("No comparable pairs of results: --compare frameworks puts every other "
                   "framework/mode against torch/eager at the same point (model, precision, "
                   "batch, device, data, threads). Measure torch/eager there too, or read the "
                   "times side by side with --compare matrix.\n"),
}


def markdown(comparisons: Sequence[dict[str, Any]], kind: str | None = None) -> str:
    """A Markdown table of comparisons (speed-up with its 95% CI); with none, why
    (:data:`NO_PAIRS` of ``kind``, ``modes`` or ``frameworks``)."""
    if not comparisons:
        return NO_PAIRS.get(kind or "", "No comparable pairs of results.\n")
    lines = ["| model | precision | batch | device | data | threads | baseline | other | "
             "speed-up [95% CI] |", "|---|---|---:|---|---|---:|---|---|---:|"]
    for c in comparisons:
        lines.append(f"| {c['model']} | {c['precision']} | {batch_cell(c)} | {device_cell(c)} | "
                     f"{data_cell(c)} | {c['threads'] or '-'} | {c['baseline']} | {c['other']} | "
                     f"{c['speedup']:.3f} [{c['ci_low']:.3f}, {c['ci_high']:.3f}]"
                     f"{ENV_MARK if c.get('env_differs') else ''} |")
    lines += ["", "*speed-up* = median iteration time of the baseline / of the other: above 1 "
              "the other is faster. The CI covers the variation within the two runs; separate "
              "processes vary more (run points with --repeats N and compare with "
              "--compare repeats)."]
    return "\n".join(lines) + "\n" + env_footnote(
        (f"{c['model']} {c['precision']} b={c['batch_size']}: {c['baseline']} vs {c['other']}",
         c.get("env_differs")) for c in comparisons)


#: Marks a comparison whose two results ran in different environments (:func:`env_footnote`).
ENV_MARK = " †"


def env_footnote(pairs, compared: str = "frameworks'") -> str:
    """Markdown lines for the marked comparisons: ``(label, differences)`` pairs, from
    :func:`dlperf.env.environment_differences`; empty when none differ. A ratio across
    environments mixes the machines' difference with the one compared (``compared``: the
    ``frameworks'`` by default; ``thread counts'`` for thread scaling)."""
    marked = [(label, diffs) for label, diffs in pairs if diffs]
    if not marked:
        return ""
    lines = ["", f"{ENV_MARK.strip()} measured in different environments, so the ratio mixes "
             f"the machines' difference with the {compared}; re-measure both in one "
             "environment to compare them:"]
    lines += [f"- {label}: {'; '.join(diffs)}" for label, diffs in marked]
    return "\n".join(lines) + "\n"


#: What makes a real-data result comparable to a synthetic one (everything but the data).
DATA_POINT_KEYS = ("model", "framework", "mode", "device", "precision", "batch_size", "threads",
                   "world_size", "grad_accum")


def data_gaps(rows: Sequence[dict[str, Any]],
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
        rows: result rows (from :meth:`ResultStore.rows`), with ``id``.
        samples_of: result id -> measured per-iteration times (s).
    """
    ok = [r for r in rows if r.get("status") == "ok"]
    syn = {(point_of(r, DATA_POINT_KEYS), repeat_of(r), extra_measurements(r)): r
           for r in ok if r.get("data") == "synthetic"}
    out = []
    for r in ok:
        if r.get("data") == "synthetic":
            continue
        pt = point_of(r, DATA_POINT_KEYS)
        # the synthetic run measured the same way (plain, +breakdown, +trace), else the plain
        # one; the same repeat, else the first
        base = next((syn[k] for k in ((pt, rep, ex)
                                      for ex in dict.fromkeys((extra_measurements(r), None))
                                      for rep in (repeat_of(r), 0)) if k in syn), None)
        rel = lo = hi = slowed = None
        res = result_of(r)
        dw = res.get("data_wait") or {}
        if base is not None:
            syn_t, real_t = samples_of(base["id"]), samples_of(r["id"])
            rel, lo, hi = ratio_ci(syn_t, real_t, statistic="mean")
            if dw.get("mean_s") is not None and real_t and syn_t:
                slowed = ((math.fsum(real_t) / len(real_t) - dw["mean_s"])
                          / (math.fsum(syn_t) / len(syn_t)))
        out.append({**{k: r.get(k) for k in DATA_POINT_KEYS}, "data": r.get("data"),
                    "repeat": repeat_of(r),
                    "loader_workers": r.get("loader_workers"),
                    "pipeline": (res.get("data_info") or {}).get("placement")
                    == "pipeline",
                    "workers_kind": workers_kind(res, r.get("framework")),
                    "synthetic_samples_per_s": base.get("samples_per_s") if base else None,
                    "real_samples_per_s": r.get("samples_per_s"),
                    "relative_throughput": rel, "ci_low": lo, "ci_high": hi,
                    "data_wait_share": r.get("data_wait_share"),
                    "median_wait_share": dw.get("median_share"),
                    "busy_vs_synthetic": slowed,
                    "env_differs": (environment_differences(result_of(base), res)
                                    if base is not None else []),
                    "input_bound": r.get("input_bound")})
    return sorted(out, key=lambda d: (str(d["model"]), str(d["framework"]), str(d["mode"]),
                                      str(d["precision"]), d["batch_size"] or 0, str(d["data"]),
                                      -1 if d["loader_workers"] is None else d["loader_workers"],
                                      d["repeat"]))


def _f(v: Any, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def data_markdown(gaps: Sequence[dict[str, Any]]) -> str:
    """A Markdown table of :func:`data_gaps`."""
    if not gaps:
        return "No results with real data.\n"
    lines = ["| model | framework/mode | precision | batch | data | loader workers | "
             "synthetic samples/s | real samples/s | real / synthetic [95% CI] | data wait | "
             "input-bound | step less wait / synthetic |",
             "|---|---|---|---:|---|---:|---:|---:|---:|---:|---|---:|"]
    for g in gaps:
        rel = ("-" if g["relative_throughput"] is None else
               f"{g['relative_throughput']:.3f} [{g['ci_low']:.3f}, {g['ci_high']:.3f}]")
        lw = str(g["loader_workers"]) if g["loader_workers"] is not None else (
            "0" if g.get("pipeline") else "prepared")
        lw += f" {g['workers_kind']}" if g.get("workers_kind") else ""
        ib = "-" if g["input_bound"] is None else ("**yes**" if g["input_bound"] else "no")
        rep = f" #{g['repeat']}" if g.get("repeat") else ""
        mark = ENV_MARK if g.get("env_differs") else ""
        lines.append(f"| {g['model']} | {g['framework']}/{g['mode']} | {g['precision']} | "
                     f"{batch_cell(g)} | {g['data']}{rep} | {lw} | "
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
                 "*prepared*: batches made before timing (no pipeline).")
    lines.append(env_footnote(
        (f"{g['model']} {g['framework']}/{g['mode']} {g['precision']} b={g['batch_size']} "
         f"{g['data']} ({g['loader_workers']} workers) vs synthetic", g.get("env_differs"))
        for g in gaps))
    return "\n".join(lines) + "\n"


#: Marks a framework FLOP count that misses the library calls (:func:`library_blind_count`).
LIBRARY_BLIND_MARK = "‡"
LIBRARY_BLIND_NOTE = ("XLA's count of the *compiled* program on a GPU: the dots and convolutions "
                      "XLA hands to cuBLAS/cuDNN count 0 FLOPs there, so this is not the step's "
                      "FLOP count, and FLOP/byte and the roofline are not given. Runs since "
                      "dlperf counts the HLO before optimisation (framework source says so) do "
                      "not have this mark.")


def library_blind_count(flops: dict[str, Any], device: Any) -> bool:
    """True when a stored result's framework FLOP count is JAX's compiled-program cost analysis
    on a GPU (stored before dlperf counted the HLO before optimisation): it omits every
    cuBLAS/cuDNN custom call (measured on an H200: 1.7% of resnet50's analytic FLOPs), so
    neither the ratio to the analytic count nor the roofline built on it means anything.

    Args:
        flops: the result's ``flops`` part (``framework_source`` names the count).
        device: the result's device (``"cuda"``, ``"cpu"``).
    """
    src = str((flops or {}).get("framework_source") or "")
    return device == "cuda" and src.startswith("XLA cost analysis of the compiled step")


def datasheet_mfu(mfu: dict[str, Any], row: dict[str, Any]) -> float | None:
    """MFU against the dense datasheet peak: the stored ``mfu_datasheet``, or for a GPU row
    stored without one (until December 2026 dlperf looked the device name up before the
    session had set it, so every GPU row got None), achieved FLOP/s over
    :func:`dlperf.perfmodel.datasheet.datasheet_peaks` of the row's ``device_name`` at its
    precision; None where neither is known (CPUs, devices missing from the table)."""
    from dlperf.perfmodel.datasheet import datasheet_peaks

    if mfu.get("mfu_datasheet") is not None:
        return mfu["mfu_datasheet"]
    if row.get("device") != "cuda":
        return None
    peak = (datasheet_peaks(row.get("device_name")) or {}).get(str(row.get("precision")))
    achieved = mfu.get("achieved_flops_per_s")
    return achieved / peak if achieved is not None and peak else None


def efficiency_markdown(rows: Sequence[dict[str, Any]]) -> str:
    """MFU, the measured ceilings, roofline position and energy of each ok result (Markdown);
    empty when no result has any of them."""
    import json

    ok = [r for r in rows if r.get("status") == "ok"]
    lines = []
    for r in sorted(ok, key=lambda r: (str(r.get("model")), str(r.get("framework")),
                                       str(r.get("mode")), str(r.get("precision")),
                                       r.get("batch_size") or 0, str(r.get("data")))):
        try:
            res = json.loads(r.get("result_json") or "{}")
        except ValueError:
            res = {}
        m = res.get("mfu") or {}
        roof = m.get("roofline") or {}
        fl = res.get("flops") or {}
        ceil = (res.get("ceilings") or {})
        if not m and not res.get("power"):
            continue
        blind = library_blind_count(fl, r.get("device"))
        ratio = _f(fl.get("framework_to_analytic"), '.3f') + (" " + LIBRARY_BLIND_MARK
                                                              if blind else "")
        if blind:
            roof = {}
        lines.append(
            f"| {r.get('model')} | {r.get('framework')}/{r.get('mode')} | {device_cell(r)}"
            f"{'' if r.get('threads') is None else ', ' + str(r['threads']) + ' thr'} | "
            f"{r.get('precision')} | {r.get('batch_size')} | {r.get('data')} | "
            f"{_f(_div(m.get('achieved_flops_per_s'), 1e12), '.4g')} | "
            f"{_f(_div(m.get('ceiling_flops_per_s'), 1e12), '.4g')} | {_f(m.get('mfu'), '.1%')} | "
            f"{_f(datasheet_mfu(m, r), '.1%')} | {ratio} | "
            f"{_f(_div(ceil.get('bandwidth_bytes_per_s'), 1e9), ',.0f')} | "
            f"{_f(roof.get('intensity_flop_per_byte'), '.3g')} | {roof.get('bound') or '-'} | "
            f"{_f(r.get('mean_power_w'), '.0f')} | {_f(r.get('energy_per_iter_j'), '.4g')} |")
    if not lines:
        return ""
    head = ["| model | framework/mode | device | precision | batch | data | achieved TFLOP/s | "
            "ceiling TFLOP/s | MFU | MFU (datasheet) | framework / analytic FLOPs | "
            "bandwidth GB/s | FLOP/byte | roofline | power W | J/iter |",
            "|---|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
    foot = ["", "*achieved*: analytic training FLOPs per sample x samples/s; *ceiling*: the best "
            "square-matmul rate at the run's precision measured in the same worker; *MFU* = "
            "achieved / ceiling (datasheet: against the dense datasheet peak). *FLOP/byte*: "
            "the framework's FLOP count over its byte estimate per iteration; *roofline*: "
            "memory- or compute-bound against the measured ridge point (ceiling / bandwidth). "
            "Power and energy per iteration from NVML over the measured segment (GPU only)."]
    if any(LIBRARY_BLIND_MARK in ln for ln in lines):
        foot.append(f"{LIBRARY_BLIND_MARK} {LIBRARY_BLIND_NOTE}")
    return "\n".join(head + lines + foot) + "\n"


def _div(a: Any, b: float) -> float | None:
    return None if a is None else a / b


def collectives_markdown(rows: Sequence[dict[str, Any]]) -> str:
    """A Markdown table per stored collective benchmark run (``ResultStore.collectives()``
    rows): message size, time per call (us, the slowest rank's mean), algbw and busbw (GB/s,
    nccl-tests' definitions: algbw = bytes / time, busbw = algbw x 2(n-1)/n for all-reduce),
    rank imbalance and wrong elements."""
    if not rows:
        return "No stored all-reduce runs (dlperf allreduce --db FILE stores one).\n"
    runs: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        runs.setdefault(r["run_id"], []).append(r)
    parts = []
    for run_id, rs in runs.items():
        r0 = rs[0]
        parts.append(f"**{r0['benchmark']}** {r0['backend']}, {r0['nranks']} ranks, {r0['dtype']}"
                     f" on {r0['device_name'] or 'cpu'} (run {run_id}, {r0['created_at']})\n")
        lines = ["| size (B) | count | time (us) | algbw (GB/s) | busbw (GB/s) | imbalance | "
                 "wrong |", "|---:|---:|---:|---:|---:|---:|---:|"]
        for r in sorted(rs, key=lambda x: x["size_bytes"]):
            t = r["time_s"]
            lines.append(f"| {r['size_bytes']:,} | {_f(r['count'], ',d')} | "
                         f"{_f(None if t is None else t * 1e6, '.2f')} | "
                         f"{_f(r['algbw_gbps'], '.2f')} | {_f(r['busbw_gbps'], '.2f')} | "
                         f"{_f(r['imbalance'], '.3f')} | {_f(r['wrong'], 'd')} |")
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


#: Point fields kept in each :func:`repeat_runs` entry.
REPEAT_POINT_KEYS = ("model", "framework", "mode", "device", "precision", "batch_size", "data",
                     "threads", "world_size")


def point_key_of(row: dict[str, Any]) -> str:
    """The key shared by every repeat of a row's point: the stored ``point_key`` (run key of
    repeat 0), else the row's own run key (results stored before repeats are repeat 0)."""
    return result_of(row).get("point_key") or row.get("run_key") or f"id:{row.get('id')}"


def _point_label(row: dict[str, Any]) -> str:
    """The label of a row's point as ``dlperf run`` prints it (:meth:`RunConfig.label` of the
    stored config at repeat 0), or a shorter one from the columns when the stored config is
    not a valid configuration of this dlperf version."""
    from pydantic import ValidationError

    from dlperf.config import RunConfig

    cfg = result_of(row).get("config")
    if isinstance(cfg, dict):
        try:
            return RunConfig.model_validate({**cfg, "repeat": 0}).label()
        except (ValidationError, ValueError, TypeError):
            pass
    return (f"{row.get('model')} {row.get('framework')}/{row.get('mode')} {row.get('device')} "
            f"{row.get('precision')} b={row.get('batch_size')} {row.get('data')}")


def repeat_runs(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Between-run variation of each point with at least two ok runs (docs/measurement.md rule 5).

    Runs of one point: rows with the same :func:`point_key_of` (``dlperf run --repeats N``
    stores repeats 0 .. N-1; with every stored row, ``dlperf results --all``, re-runs of a
    repeat count as runs too). Each run is one worker process and contributes its median
    iteration time; the spread of these medians across processes is what the within-run CI
    (a bootstrap CI of one run's median, from that run's iterations) cannot show: per-process
    state such as cuDNN autotuning choices, allocator layout and host dispatch speed.

    Args:
        rows: result rows (:meth:`ResultStore.rows`) with ``status``, ``step_time_median_s``,
            ``step_time_ci_low_s``/``_high_s``, ``run_key`` and ``result_json``.

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
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(point_key_of(r), []).append(r)
    out = []
    for key, rs in groups.items():
        ok = [r for r in rs if r.get("status") == "ok"
              and _finite_pos(r.get("step_time_median_s"))]
        if len(ok) < 2:
            continue
        ok.sort(key=lambda r: (repeat_of(r), r.get("id") or 0))
        med = [float(r["step_time_median_s"]) for r in ok]
        br = between_run(med, lower_bound=0.0)  # times: the interval stops at 0
        halves = [(float(r["step_time_ci_high_s"]) - float(r["step_time_ci_low_s"]))
                  / 2 / float(r["step_time_median_s"]) for r in ok
                  if _finite_pos(r.get("step_time_ci_low_s"))
                  and _finite_pos(r.get("step_time_ci_high_s"))]
        within = statistics.median(halves) if halves else None
        cv = br["cv"]
        ms = (lambda v: None if v is None else v * 1e3)  # noqa: E731
        out.append({**{k: ok[-1].get(k) for k in REPEAT_POINT_KEYS},
                    "point": _point_label(ok[0]), "point_key": key, "n": br["n"],
                    "failed": sum(1 for r in rs if r.get("status") != "ok"),
                    "repeats": [repeat_of(r) for r in ok], "ids": [r.get("id") for r in ok],
                    "medians_ms": [v * 1e3 for v in med],
                    "mean_ms": ms(br["mean"]), "stdev_ms": ms(br["stdev"]), "cv": cv,
                    "min_ms": ms(br["min"]), "max_ms": ms(br["max"]),
                    "olympic_mean_ms": ms(br["olympic_mean"]),
                    "mean_ci_low_ms": ms(br["mean_ci_low"]),
                    "mean_ci_high_ms": ms(br["mean_ci_high"]),
                    "within_ci_half": within,
                    "between_over_within": (cv / within if cv is not None and within else None),
                    "between_dominates": (None if cv is None or within is None
                                          else cv > within)})
    return sorted(out, key=lambda d: (str(d["model"]), str(d["framework"]), str(d["mode"]),
                                      str(d["device"]), str(d["precision"]),
                                      d["batch_size"] or 0, str(d["data"]), d["point"],
                                      d["point_key"]))


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
            f"| {d['point'].replace('|', '/')} | {runs} | "
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


#: Column order of :func:`framework_matrix` (frameworks, then their modes).
_FW_ORDER = ("torch", "tensorflow", "jax", "mxnet")
_MODE_ORDER = ("eager", "graph", "xla")


def _column_order(col: str) -> tuple:
    fw, _, rest = col.partition("/")
    mode = rest.split(" ")[0]
    return (_FW_ORDER.index(fw) if fw in _FW_ORDER else len(_FW_ORDER), fw,
            _MODE_ORDER.index(mode) if mode in _MODE_ORDER else len(_MODE_ORDER), rest)


def matrix_column(r: Mapping[str, Any]) -> str:
    """The column of a row in :func:`framework_matrix`: ``framework/mode`` and whatever else
    makes it a different measurement of the same point: a torch.compile mode other than the
    default (`` [reduce-overhead]``), a forced layout (`` (nchw)``), JAX loader workers'
    kind (`` processes``/`` threads``), data-parallel options not at their default
    (`` ddp(broadcast_buffers=False)``) and ``+breakdown``/``+trace``."""
    from dlperf.report.tables import _dist_options

    parts = [f"{r.get('framework')}/{r.get('mode')}"]
    cm = compile_mode_label(r)
    if cm:
        parts.append(cm)
    if layout_setting(r) != "auto":
        parts.append(f"({layout_setting(r)})")
    for extra in (workers_kind(result_of(r), r.get("framework")) if r.get("loader_workers")
                  else None, _dist_options(r), extra_measurements(r)):
        if extra:
            parts.append(extra)
    return " ".join(parts)


def _forced_layout(col: str) -> bool:
    return "(nchw)" in col or "(nhwc)" in col


def _env_spread(newest: Mapping[str, dict[str, Any]]) -> list[str]:
    """``"field: column value, column value"`` for each field of
    :func:`dlperf.env.environment_of` in which the runs ``newest`` (column -> row) differ
    (unrecorded values skipped; ``framework`` not, it differs by design; host speeds only
    beyond :data:`dlperf.env.HOST_SPEED_TOLERANCE`, and not where every run names the same
    machine: the probe's spread on one machine, :func:`dlperf.env.environment_differences`)."""
    from dlperf.env import environment_of, host_speeds_differ

    envs = {c: environment_of(result_of(r)) for c, r in newest.items()}
    out = []
    for field in next(iter(envs.values()), {}):
        if field == "framework":
            continue
        vals = {c: e[field] for c, e in envs.items() if e.get(field) is not None}
        if len(set(vals.values())) < 2:
            continue
        if field == "host speed":
            if not host_speeds_differ(list(envs.values())):
                continue  # within tolerance, or one machine: the probe's own spread
            out.append("host speed: " + ", ".join(f"{c} {v:.1f} ns" for c, v in vals.items()))
        else:
            out.append(f"{field}: " + ", ".join(f"{c} {v}" for c, v in vals.items()))
    return out


def framework_matrix(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The cross-framework table: one entry per point, one column per framework/mode.

    Args:
        rows: result rows, every run (``ResultStore.rows(latest=False)``): a configuration
            measured more than once (a resumed sweep that measured it again, ``--repeats``, a
            merged file) shows its newest run and the range of all its runs.

    Returns:
        Per point (the :data:`POINT_KEYS`, ordered by model, device, precision, batch, data,
        threads, devices): ``columns`` (:func:`matrix_column`) -> ``{"median_s"`` (the newest
        run's median iteration time, s), ``"runs"`` (every run's median, oldest first),
        ``"steady"`` (False when the newest run did not reach steady state)``}``; ``fastest``
        (its column) and ``spread`` (slowest / fastest newest median; None with one column),
        both over the columns without a forced layout where the point has any; ``env_differs``
        (the environment fields in which the newest runs of the columns shown differ, each
        with every column's value, :func:`_env_spread`; empty: one environment as far as
        recorded).
    """
    points: dict[tuple, dict[str, list[dict[str, Any]]]] = {}
    for r in rows:
        if r.get("status") != "ok" or not r.get("step_time_median_s"):
            continue
        points.setdefault(point_of(r), {}).setdefault(matrix_column(r), []).append(r)
    out = []
    for pt, cols in points.items():
        cells, newest = {}, {}
        for col in sorted(cols, key=_column_order):
            runs = sorted(cols[col], key=lambda r: (r.get("created_at") or "", r.get("id") or 0))
            newest[col] = runs[-1]
            cells[col] = {"median_s": runs[-1]["step_time_median_s"],
                          "runs": [r["step_time_median_s"] for r in runs],
                          "steady": runs[-1].get("steady_state") is not False}
        meds = {c: v["median_s"] for c, v in cells.items()}
        if any(not _forced_layout(c) for c in meds):  # forced layouts: side notes to `auto`
            meds = {c: m for c, m in meds.items() if not _forced_layout(c)}
        fastest = min(meds, key=meds.get)
        diffs = _env_spread(newest)
        out.append({**dict(zip(POINT_KEYS, pt)), "columns": cells, "fastest": fastest,
                    "spread": max(meds.values()) / meds[fastest] if len(meds) > 1 else None,
                    "env_differs": diffs})
    return sorted(out, key=lambda d: (str(d["model"]), str(d["device"]), str(d["precision"]),
                                      d["batch_size"] or 0, str(d["data"]),
                                      d["loader_workers"] if d["loader_workers"] is not None
                                      else -1, d["threads"] or 0, d["world_size"] or 1))


def matrix_flat(points: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`framework_matrix` as flat rows for CSV: the point's fields, then per column
    ``<column> median_s``, ``<column> runs`` (how many) and ``<column> min_s``/``max_s`` of its
    runs, then ``fastest``, ``spread`` and ``env_differs`` (``; ``-joined)."""
    cols = sorted({c for p in points for c in p["columns"]}, key=_column_order)
    out = []
    for p in points:
        d = {k: p[k] for k in POINT_KEYS}
        for c in cols:
            v = p["columns"].get(c)
            d[f"{c} median_s"] = v["median_s"] if v else None
            d[f"{c} runs"] = len(v["runs"]) if v else 0
            d[f"{c} min_s"] = min(v["runs"]) if v else None
            d[f"{c} max_s"] = max(v["runs"]) if v else None
        d.update(fastest=p["fastest"], spread=p["spread"], env_differs="; ".join(p["env_differs"]))
        out.append(d)
    return out


def _ms_range(lo: float, hi: float) -> str:
    """``a–b`` in ms with enough significant digits that a != b shows (4 to 7)."""
    for digits in range(4, 8):
        a, b = f"{lo * 1e3:.{digits}g}", f"{hi * 1e3:.{digits}g}"
        if a != b or lo == hi:
            return f"{a}–{b}"
    return f"{a}–{b}"


def matrix_markdown(points: Sequence[dict[str, Any]]) -> str:
    """:func:`framework_matrix` as a Markdown table: median ms per iteration, the fastest in
    bold, the range of a configuration's runs when it ran more than once, slowest/fastest, and
    † where the runs shown in a row ran in different environments (listed below the table)."""
    if not points:
        return "No results.\n"
    cols = sorted({c for p in points for c in p["columns"]}, key=_column_order)
    lines = ["| model | precision | batch | device | data | threads | "
             + " | ".join(cols) + " | slowest / fastest |",
             "|---|---|---:|---|---|---:|" + "---:|" * len(cols) + "---:|"]
    notes = []
    for p in points:
        cells = []
        for c in cols:
            v = p["columns"].get(c)
            if v is None:
                cells.append("–")
                continue
            s = f"{v['median_s'] * 1e3:.4g}"
            s = f"**{s}**" if c == p["fastest"] and p["spread"] is not None else s
            if len(v["runs"]) > 1:
                s += f" ({len(v['runs'])} runs: {_ms_range(min(v['runs']), max(v['runs']))})"
            if not v["steady"]:
                s += " (not steady)"
            cells.append(s)
        spread = "–" if p["spread"] is None else f"{p['spread']:.2f}x"
        mark = ENV_MARK if p["env_differs"] else ""
        lines.append(f"| {p['model']} | {p['precision']} | {batch_cell(p)} | {device_cell(p)} | "
                     f"{data_cell(p)} | {p['threads'] or '-'} | " + " | ".join(cells)
                     + f" | {spread}{mark} |")
        if p["env_differs"]:
            notes.append((f"{p['model']} {p['precision']} b={p['batch_size']}",
                          p["env_differs"]))
    lines += ["", "Median ms per iteration of the newest run of each configuration (fastest in "
              "bold); *(n runs: a–b)*: the configuration ran n times (separate processes), the "
              "range of their medians; *(not steady)*: the newest run did not reach steady "
              "state. *slowest / fastest* leaves out forced layouts (nchw, nhwc) where the point "
              "has `auto` runs."]
    return "\n".join(lines) + "\n" + env_footnote(notes)
