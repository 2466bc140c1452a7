"""The device profile of a calibrated machine, assembled from the calibration's stored points.

``dlperf calibrate`` (:mod:`dlperf.cli.calibrate`) measures the profile points (a small model at
each precision with the ceilings microbenchmarks, :mod:`dlperf.measure.ceilings`, and a traced
iteration) into a results file; this module reads them back and makes one
:class:`dlperf.perfmodel.hardware.GpuProfile` of them (:func:`build_profile`): the device's
datasheet (or, for a device no datasheet names, :func:`_undocumented`: the stored environment's
SMs and clock) with everything measured put in its place:

* the GEMM ceilings per precision, the memory bandwidth and the host-speed probe
  (:func:`dlperf.perfmodel.hardware.profile_from_points`);
* the untraced launch call (:func:`launch_s_of`), the median traced launch call divided by the
  replay's traced/untraced host ratio;
* the untraced host dispatch of the profile model (the *dispatch probe*, which the replay's host
  scales by);
* the host-to-device copy bandwidth from pinned and pageable memory (:func:`h2d_of`).

Which stored points are the profile's: :func:`profile_point_ids` (the profile model's ok
results), the device they measured: :func:`device_name_of`. Storing the profile is
:func:`dlperf.perfmodel.hardware.store_profile`'s.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Any

from dlperf.errors import ConfigError
from dlperf.perfmodel import hardware, records, replay
from dlperf.perfmodel.hardware import GpuProfile
from dlperf.results.store import ResultStore, result_of


def launch_s_of(points: list[Any], db: str) -> float | None:
    """The untraced launch call of the profile points' traces (s): the median traced launch
    call over their timelines, divided by the traced/untraced host ratio
    (:data:`dlperf.perfmodel.replay.TRACED_HOST_INFLATION`); None without a launch span."""
    calls = []
    for _, st in replay.load_traces(db, [p.result_id for p in points]):
        calls += [h.call_s for h in st.launches if h.call_s > 0]
    if not calls:
        return None
    return statistics.median(calls) / replay.TRACED_HOST_INFLATION


def build_profile(db: str, name: str, device_name: str | None,
                  profile_ids: list[int]) -> GpuProfile:
    """The device profile of ``device_name`` from the results of ``db`` (its datasheet, with
    the measured ceilings, host probe and launch call in their places), named ``name``; a
    device without a datasheet (a CPU, an unknown GPU) gets one from the stored environment
    (SM count and clock from NVML, else the CPU's cores and clock). ``extra["device"]``: the
    kind of device measured (``cuda``, ``cpu``), which ``dlperf predict --gpu`` checks: a
    CPU's profile is no GPU to replay CUDA kernels on. ``profile_ids``: the result ids of
    the profile points (:func:`profile_point_ids`), whose launch call, dispatch probe and
    host-to-device copies the profile takes."""
    recs = records.load(db)
    pts = [p for p in recs.points if p.device_name == device_name]
    try:
        prof = hardware.profile_from_points(pts, device_name or "")
    except ConfigError:
        prof = _undocumented(pts, device_name)
    mine = [p for p in pts if p.result_id in profile_ids]
    disp = [p.host_dispatch_s for p in mine if p.host_dispatch_s]
    extra = {**prof.extra, "device": pts[0].device if pts else "cuda"}
    if disp and mine:
        extra["dispatch_probe"] = {"model": mine[0].model, "framework": mine[0].framework,
                                   "mode": mine[0].mode, "batch_size": mine[0].batch_size,
                                   "host_dispatch_s": statistics.median(disp),
                                   "points": len(disp)}
    h2d = h2d_of(db, profile_ids)
    prof = replace(prof, name=name, launch_s=launch_s_of(mine, db), extra=extra,
                   h2d_bytes_per_s=h2d.get("pinned"),
                   h2d_pageable_bytes_per_s=h2d.get("pageable"))
    measured = list(prof.measured) + (["launch_s"] if prof.launch_s else []) + (
        ["dispatch_probe"] if disp else []) + [f"h2d_{m}" for m in sorted(h2d)]
    return replace(prof, measured=tuple(dict.fromkeys(measured)),
                   source=f"dlperf calibrate ({prof.source})")


def h2d_of(db: str, ids: list[int]) -> dict[str, float]:
    """The host-to-device copy bandwidth (bytes/s) the results ``ids`` of ``db`` measured
    (their ceilings' ``h2d_bytes_per_s``), median per kind of host memory (``pinned``,
    ``pageable``); a kind no result measured is absent."""
    got: dict[str, list[float]] = {}
    with ResultStore(db, read_only=True) as store:
        for r in store.rows():
            if int(r["id"]) not in ids:
                continue
            c = (result_of(r) or {}).get("ceilings") or {}
            for mode, v in (c.get("h2d_bytes_per_s") or {}).items():
                if isinstance(v, (int, float)) and v > 0:
                    got.setdefault(str(mode), []).append(float(v))
    return {m: statistics.median(v) for m, v in got.items()}


def _undocumented(pts: list[Any], device_name: str | None) -> GpuProfile:
    """A profile of a device no datasheet names: the measured ceilings alone, SMs and clock
    from the stored environment (1 and 1 where it holds neither)."""
    sms, clock = 1, 1.0
    for p in pts[:1]:
        with ResultStore(p.source, read_only=True) as store:
            row = next((r for r in store.rows() if int(r["id"]) == p.result_id), None)
        env = (result_of(row) if row else {}).get("env") or {}
        gpus = env.get("gpus") or []
        if gpus:
            clock = float(gpus[0].get("clock_sm_max_mhz") or 1.0)
            sms = int(gpus[0].get("multiprocessors") or 1)
        else:
            sms = int(env.get("cpu_physical") or env.get("cpu_logical") or 1)
            clock = float((env.get("cpu_id") or {}).get("mhz") or 1.0)
    gemm: dict[str, float] = {}
    for prec in ("fp32", "tf32", "bf16"):
        v = [p.matmul_flops_per_s[prec] for p in pts if p.matmul_flops_per_s.get(prec)]
        if v:
            gemm[prec] = statistics.median(v)
    bw = [p.bandwidth_bytes_per_s for p in pts if p.bandwidth_bytes_per_s]
    hs = [x for p in pts for x in p.host_speed_ns if x]
    measured = [f"gemm_{k}" for k in gemm] + (["bandwidth"] if bw else []) + (
        ["host_speed"] if hs else [])
    return GpuProfile(name=device_name or "device", sms=sms, clock_mhz=clock,
                      bandwidth_bytes_per_s=statistics.median(bw) if bw else 1.0,
                      gemm_flops_per_s=gemm, device_name=device_name,
                      host_speed_ns=statistics.median(hs) if hs else None,
                      measured=tuple(measured), source="no datasheet: measured values only")


def profile_point_ids(db: str, model: str, framework: str, device: str,
                      batch: int) -> list[int]:
    """The result ids in ``db`` of the ok points of ``model`` at ``batch`` on ``framework``
    and ``device``: the profile points a calibration measured there (this call's and the
    earlier calls' of the same results file); empty where none finished."""
    with ResultStore(db, read_only=True) as store:
        return [int(r["id"]) for r in store.rows(model=model, framework=framework,
                                                 device=device, batch_size=batch)
                if r.get("status") == "ok"]


def device_name_of(db: str, ids: list[int]) -> str | None:
    """The device name stored with the results ``ids`` of ``db`` (a GPU's is the driver's,
    e.g. ``NVIDIA H100 80GB HBM3``): the first in the file's order that has one; None where
    none has."""
    with ResultStore(db, read_only=True) as store:
        for r in store.rows():
            if int(r["id"]) in ids and r.get("device_name"):
                return str(r["device_name"])
    return None
