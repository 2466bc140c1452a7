"""The columns of the ``results`` table and how a record becomes a row.

:data:`COLUMNS` (with SQL types, in export order) and :func:`flatten` (record -> row). A row
is read back as a record by :mod:`dlperf.results.view` (:func:`~dlperf.results.view.record_of`,
:func:`~dlperf.results.view.record_of_row`). Used by :mod:`dlperf.results.store`, which
re-exports them.
"""

from __future__ import annotations

import json
import math
from typing import Any

from dlperf.config.axes import flat_settings
from dlperf.results import timelines
from dlperf.results.migrations import MIGRATIONS
from dlperf.results.schema import RunRecord, Timing

__all__ = ["COLUMNS", "SUMMARY_KEYS", "BOOL_COLUMNS", "flatten"]

#: Columns of ``results`` after ``id``, with SQL types; order is the export order.
COLUMNS: dict[str, str] = {
    "run_key": "TEXT NOT NULL", "sweep": "TEXT", "created_at": "TEXT", "status": "TEXT NOT NULL",
    "error": "TEXT", "model": "TEXT", "framework": "TEXT", "mode": "TEXT", "device": "TEXT",
    "device_name": "TEXT", "precision": "TEXT", "batch_size": "INTEGER", "grad_accum": "INTEGER",
    "data": "TEXT", "threads": "INTEGER",
    "step_time_median_s": "REAL", "step_time_mean_s": "REAL", "step_time_stdev_s": "REAL",
    "step_time_min_s": "REAL", "step_time_max_s": "REAL", "step_time_q1_s": "REAL",
    "step_time_q3_s": "REAL", "step_time_iqr_s": "REAL", "step_time_p5_s": "REAL",
    "step_time_p95_s": "REAL", "step_time_ci_low_s": "REAL", "step_time_ci_high_s": "REAL",
    "step_time_mad_s": "REAL", "n_outliers": "INTEGER",
    "samples_per_s": "REAL", "tokens_per_s": "REAL", "samples": "INTEGER",
    "n_measured": "INTEGER", "measured_time_s": "REAL", "wall_time_s": "REAL",
    "timing_rel_diff": "REAL", "timing_consistent": "INTEGER", "first_iter_s": "REAL",
    "warmup_iters": "INTEGER", "warmup_time_s": "REAL", "steady_state": "INTEGER",
    "peak_allocated_bytes": "INTEGER", "peak_reserved_bytes": "INTEGER",
    "nvml_used_bytes": "INTEGER", "peak_rss_bytes": "INTEGER",
    "params": "INTEGER", "train_flops_per_sample": "REAL", "tokens_per_sample": "INTEGER",
    "loss_first": "REAL", "loss_last": "REAL", "framework_version": "TEXT", "git_sha": "TEXT",
    "result_json": "TEXT",
    "compile_time_s": "REAL", "n_compiles": "INTEGER", "recompiles_measured": "INTEGER",
    "warnings": "TEXT",
    "busy_fraction": "REAL", "dispatch_s": "REAL", "breakdown_rel_diff": "REAL",
    "trace_path": "TEXT",
    **MIGRATIONS[5],
    **MIGRATIONS[6],
}
SUMMARY_KEYS = ("median", "mean", "stdev", "min", "max", "q1", "q3", "iqr", "p5", "p95",
                "ci_low", "ci_high", "mad")
BOOL_COLUMNS = ("timing_consistent", "steady_state", "input_bound")


def _num(x: Any) -> Any:
    """NaN/inf are not valid JSON; store them as NULL in columns (the raw samples keep them)."""
    return None if isinstance(x, float) and not math.isfinite(x) else x


def flatten(rec: RunRecord, sweep: str | None = None) -> dict[str, Any]:
    """The ``results`` columns of a record: identity, the
    step-time statistics (s), throughput, memory peaks (bytes), the model's spec, compile,
    trace, data wait, MFU, power and convergence numbers, the first and last measured loss and
    the full record without its raw samples as ``result_json``. Missing values are None; NaN
    and infinities become None (the raw samples keep them); booleans become 0/1.
    """
    ident, t = rec.identity, rec.timing or Timing()
    row: dict[str, Any] = {
        "run_key": ident.run_key, "sweep": sweep, "created_at": ident.created_at,
        "status": ident.status, "error": ident.error, "model": ident.model,
        "framework": ident.framework, "mode": ident.mode, "device": ident.device,
        "device_name": rec.device_name, "precision": ident.precision,
        "batch_size": ident.batch_size, "grad_accum": ident.grad_accum, "data": ident.data,
        "threads": ident.threads, "world_size": ident.world_size, "nnodes": ident.nnodes,
        "per_device_batch": ident.per_device_batch, "rank_imbalance": rec.rank_imbalance,
        "exposed_comm_s": rec.exposed_comm_s,
        **{k: getattr(t, k) for k in Timing.model_fields}}
    s = rec.summary
    for k in SUMMARY_KEYS:
        row[f"step_time_{k}_s"] = getattr(s, k) if s is not None else None
    row["n_outliers"] = (len(s.outliers) if s is not None and s.outliers is not None
                         else None)
    tp = rec.throughput
    row["samples_per_s"] = tp.samples_per_s if tp else None
    row["tokens_per_s"] = tp.tokens_per_s if tp else None
    row["samples"] = tp.samples if tp else None
    if rec.memory is not None:
        row.update({k: v for k, v in rec.memory.model_dump().items() if k in COLUMNS})
    spec = ident.spec
    for k in ("params", "train_flops_per_sample", "tokens_per_sample"):
        row[k] = getattr(spec, k) if spec is not None else None
    comp = rec.compile
    for k in ("compile_time_s", "n_compiles", "recompiles_measured"):
        row[k] = getattr(comp, k) if comp is not None else None
    row["warnings"] = "; ".join(rec.warnings or []) or None
    tr = rec.trace
    row["busy_fraction"] = tr.busy_fraction if tr else None
    row["dispatch_s"] = (tr.dispatch_s or {}).get("median") if tr else None
    row["trace_path"] = (tr.files or {}).get("chrome_trace") if tr else None
    row["breakdown_rel_diff"] = rec.breakdown.rel_diff if rec.breakdown else None
    row["loader_workers"] = flat_settings(ident.config).get("loader_workers")
    dw = rec.data_wait
    row["data_wait_share"], row["input_bound"] = (dw.share, dw.input_bound) if dw else (None,
                                                                                       None)
    mfu = rec.mfu
    row["achieved_flops_per_s"] = mfu.achieved_flops_per_s if mfu else None
    row["mfu"] = mfu.mfu if mfu else None
    pw = rec.power
    row["mean_power_w"] = pw.mean_power_w if pw else None
    row["energy_per_iter_j"] = pw.energy_per_iter_j if pw else None
    row["time_to_target_s"] = rec.convergence.time_to_target_s if rec.convergence else None
    meas = (rec.losses or {}).get("measure") or []
    row["loss_first"] = meas[0] if meas else None
    row["loss_last"] = meas[-1] if meas else None
    row["framework_version"] = (rec.versions or {}).get(ident.framework or "", None)
    row["git_sha"] = ((rec.env.git if rec.env else None) or {}).get("sha")
    for k in BOOL_COLUMNS:
        if row.get(k) is not None:
            row[k] = int(bool(row[k]))
    row["result_json"] = json.dumps(timelines.without_data(rec.to_dict(raw=False)), default=str)
    return {k: _num(row.get(k)) for k in COLUMNS}
