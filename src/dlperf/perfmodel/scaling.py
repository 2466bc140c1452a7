"""Scaling efficiency of data-parallel results against their one-device point (pure).

Definitions (docs/measurement.md "Scaling", after Shi et al. 2016 and Shi & Chu 2017): with ``N``
devices, global batch ``B_N`` and step time ``T_N``, throughput is ``B_N / T_N`` and the speed-up
over one device is ``S(N) = (B_N / T_N) / (B_1 / T_1)``. Scaling efficiency is ``E(N) = S(N) / N``:

* **weak scaling** (per-device batch fixed, ``B_N = N B_1``): ``E = T_1 / T_N``;
* **strong scaling** (global batch fixed, ``B_N = B_1``): ``E = T_1 / (N T_N)``.

:func:`efficiency` is that one formula; :func:`scaling_points` finds, for every stored
data-parallel result, the one-device result of the same configuration that serves as its
baseline (same model, framework, mode, device, precision, data, threads, gradient
accumulation; batch = its per-device batch for weak scaling, its global batch for strong
scaling) and computes both the efficiency from throughput (mean step times) and from the
median step times with a bootstrap CI (:func:`dlperf.stats.ratio_of_medians_ci`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dlperf.config import ddp_changes, layout_change
from dlperf.env import environment_differences
from dlperf.results.store import result_of
from dlperf.stats import ratio_of_medians_ci

__all__ = ["efficiency", "speedup", "scaling_points", "MATCH_KEYS", "world_of",
           "per_device_of", "variant_of"]

#: What must be equal between a data-parallel result and its one-device baseline.
MATCH_KEYS = ("model", "framework", "mode", "device", "precision", "data", "threads",
              "grad_accum")


def speedup(t1_s: float, tn_s: float, b1: int, bn: int) -> float:
    """``S = (bn / tn) / (b1 / t1)``: throughput with N devices over throughput with one.

    Raises:
        ValueError: a time or batch that is not > 0.
    """
    for name, v in (("t1_s", t1_s), ("tn_s", tn_s), ("b1", b1), ("bn", bn)):
        if not v > 0:
            raise ValueError(f"{name} must be > 0, got {v!r}")
    return (bn / tn_s) / (b1 / t1_s)


def efficiency(t1_s: float, tn_s: float, b1: int, bn: int, n: int) -> float:
    """Scaling efficiency ``E(N) = S(N) / N`` (weak: ``t1/tn``; strong: ``t1/(n tn)``).

    Args:
        t1_s, tn_s: step time (s) on one device and on ``n`` devices.
        b1, bn: global batch on one device and on ``n`` devices.
        n: devices (>= 1).

    Raises:
        ValueError: ``n < 1`` or a time or batch that is not > 0.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n!r}")
    return speedup(t1_s, tn_s, b1, bn) / n


def world_of(row: Mapping[str, Any]) -> int:
    """Devices of a stored row (rows made before data parallelism have none: 1)."""
    return int(row.get("world_size") or 1)


def per_device_of(row: Mapping[str, Any]) -> int | None:
    """Per-device batch of a stored row (its batch when it ran on one device)."""
    if row.get("per_device_batch") is not None:
        return int(row["per_device_batch"])
    b = row.get("batch_size")
    return None if b is None else int(b) // world_of(row)


#: Config fields (kept in the result JSON, not in columns) that also change what is measured:
#: a baseline must agree on them too (a --breakdown or --trace run is another measurement);
#: repeated runs (``--repeats``) form one series per repeat (repeat k against repeat k).
MATCH_CONFIG = {"layout": "auto", "loader_workers": None, "loader_impl": "auto",
                "breakdown": False, "trace_dir": None, "repeat": 0}


def _config(row: Mapping[str, Any]) -> dict[str, Any]:
    return result_of(row).get("config") or {}


def variant_of(row: Mapping[str, Any]) -> str:
    """What sets a data-parallel run apart from others of its configuration and device count:
    the DDP options not at their default and a non-default data-parallel layout, e.g.
    ``"ddp(broadcast_buffers=False)"``; ``""`` for none (and for one-device rows)."""
    cfg = _config(row)
    if not isinstance(cfg, dict):
        return ""
    parts = []
    lay = layout_change(row.get("framework"), cfg.get("dp_layout"))
    if lay:
        parts.append(lay)
    changed = ddp_changes(cfg.get("ddp"))
    if changed:
        parts.append(f"ddp({', '.join(changed)})")
    return " ".join(parts)


def _match(row: Mapping[str, Any]) -> tuple:
    cfg = _config(row)
    extra = tuple(bool(cfg.get(k)) if k == "trace_dir" else cfg.get(k, default)
                  for k, default in MATCH_CONFIG.items())
    return tuple(row.get(k) if not (k == "grad_accum" and row.get(k) is None) else 1
                 for k in MATCH_KEYS) + extra


def scaling_points(rows: Sequence[Mapping[str, Any]],
                   samples_of: Callable[[int], list[float]] | None = None
                   ) -> list[dict[str, Any]]:
    """One entry per (data-parallel ok result, kind of scaling with a baseline in ``rows``).

    Args:
        rows: store rows (``ResultStore.rows``): columns ``id``, ``status``, ``batch_size``
            (global), ``per_device_batch``, ``world_size``, ``nnodes``,
            ``step_time_median_s``, ``samples_per_s``, ``exposed_comm_s``,
            ``rank_imbalance`` and the :data:`MATCH_KEYS`.
        samples_of: result id -> measured step times (s), for the CI of the median-based
            efficiency; without it the CI is omitted.

    Returns:
        Dicts with the match keys, ``variant`` (:func:`variant_of`: non-default DDP options
        or data-parallel layout, ``""`` for none), ``scaling`` (``weak``/``strong``), ``devices``,
        ``nnodes``, ``global_batch``, ``per_device_batch``, ``baseline_batch``, ``t1_s`` and
        ``tn_s`` (medians), ``samples_per_s_1`` / ``_n``, ``speedup``, ``efficiency`` (from
        throughput), ``efficiency_median`` with ``ci_low`` / ``ci_high``, ``imbalance``,
        ``exposed_comm_s`` and the two result ids; sorted by model, precision, batch, devices.
        One-device results with the baseline's batch appear as ``devices = 1`` rows
        (efficiency 1) so a table or plot starts at one device.
    """
    ok = [r for r in rows if r.get("status") == "ok" and r.get("samples_per_s")]
    base: dict[tuple, Mapping[str, Any]] = {}
    for r in ok:  # newest one-device row per (configuration, batch)
        if world_of(r) == 1:
            base[(_match(r), int(r["batch_size"]))] = r
    out: list[dict[str, Any]] = []
    used: set[tuple[int, str]] = set()
    for r in ok:
        n = world_of(r)
        if n == 1:
            continue
        pdb, gb = per_device_of(r), int(r["batch_size"])
        for kind, b1 in (("weak", pdb), ("strong", gb)):
            b = base.get((_match(r), b1))
            if b is None:
                continue
            t1, tn = b["step_time_median_s"], r["step_time_median_s"]
            e_thr = (r["samples_per_s"] / b["samples_per_s"]) / n
            rep = _match(r)[len(MATCH_KEYS) + list(MATCH_CONFIG).index("repeat")]
            entry = {**{k: r.get(k) for k in MATCH_KEYS}, "variant": variant_of(r),
                     "repeat": rep, "scaling": kind, "devices": n,
                     "nnodes": r.get("nnodes") or 1, "global_batch": gb,
                     "per_device_batch": pdb, "baseline_batch": b1, "t1_s": t1, "tn_s": tn,
                     "samples_per_s_1": b["samples_per_s"], "samples_per_s_n": r["samples_per_s"],
                     "speedup": e_thr * n, "efficiency": e_thr,
                     "efficiency_median": efficiency(t1, tn, b1, gb, n) if t1 and tn else None,
                     "ci_low": None, "ci_high": None, "imbalance": r.get("rank_imbalance"),
                     "exposed_comm_s": r.get("exposed_comm_s"),
                     "id_1": b.get("id"), "id_n": r.get("id"),
                     "env_differs": environment_differences(result_of(b), result_of(r))}
            if samples_of is not None and b.get("id") is not None and r.get("id") is not None:
                ratio, lo, hi = ratio_of_medians_ci(samples_of(b["id"]), samples_of(r["id"]))
                f = gb / (n * b1)
                entry.update(efficiency_median=ratio * f, ci_low=lo * f, ci_high=hi * f)
            out.append(entry)
            if (id(b), kind) not in used:
                used.add((id(b), kind))
                out.append({**{k: b.get(k) for k in MATCH_KEYS}, "variant": "",
                            "repeat": rep, "scaling": kind, "devices": 1,
                            "nnodes": 1, "global_batch": b1, "per_device_batch": b1,
                            "baseline_batch": b1, "t1_s": t1, "tn_s": t1,
                            "samples_per_s_1": b["samples_per_s"],
                            "samples_per_s_n": b["samples_per_s"], "speedup": 1.0,
                            "efficiency": 1.0, "efficiency_median": 1.0, "ci_low": None,
                            "ci_high": None, "imbalance": None, "exposed_comm_s": None,
                            "id_1": b.get("id"), "id_n": b.get("id")})
    # A series (weak: per-device batch fixed; strong: global batch fixed) is identified by
    # its baseline batch.
    return sorted(out, key=lambda e: (str(e["model"]), str(e["framework"]), str(e["mode"]),
                                      str(e["device"]), str(e["precision"]), str(e["data"]),
                                      e["scaling"], e["baseline_batch"], e["repeat"],
                                      e["devices"], e["variant"]))
