"""What is read from a prepared run after its measured segment: compile counts, the
framework's FLOP count and the measured ceilings (:func:`run_probes`), the efficiency parts of
the record built from them (:func:`efficiency`), and the exposed communication of a
data-parallel run (:func:`profile_comm`), and the breakdown and trace sections
(:func:`breakdown_into`). Each is a separate, labelled measurement after the
fused one, which stays the headline (docs/measurement.md)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from dlperf.perfmodel.datasheet import datasheet_peaks
from dlperf.perfmodel.mfu import mfu_summary
from dlperf.results.schema import RunRecord

__all__ = ["run_probes", "efficiency", "compile_info", "profile_comm", "breakdown_into"]


def run_probes(session: Any, cfg: Any, env: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """After the measurement: the framework's FLOP/byte count of one iteration and the measured
    ceilings (MFU); each failure is recorded in ``errors``, never fails the result.

    The ceilings are those of ``cfg.hardware.precision`` and the point's thread count, measured once per
    machine, framework, device, precision and thread count and cached for the sweep's points
    (:func:`dlperf.measure.ceilings.point_ceilings`: the sweep's cache file is named by
    ``$DLPERF_CEILINGS_CACHE``); ``env`` (:func:`dlperf.env.collect_env`'s dict) identifies the
    machine for the cache.

    Returns ``{"framework_flops": dict | None, "ceilings": dict | None, "errors": {probe:
    why}}``."""
    out: dict[str, Any] = {"framework_flops": None, "ceilings": None, "errors": {}}
    if session.count_flops is not None:
        try:
            out["framework_flops"] = session.count_flops()
        except Exception as e:  # noqa: BLE001
            out["errors"]["framework_flops"] = f"{type(e).__name__}: {str(e)[:300]}"
    if cfg.measure.measure_ceilings and session.ceiling_backend is not None:
        from dlperf.measure.ceilings import CACHE_ENV, machine_fingerprint, point_ceilings

        versions = session.versions or {}
        try:
            out["ceilings"] = point_ceilings(
                session.ceiling_backend(), cfg.hardware.precision,
                threads=cfg.hardware.threads or (session.flags or {}).get("threads"),
                fingerprint=machine_fingerprint(env or {}, versions, cfg.runtime.framework),
                point={"run_key": cfg.run_key(), "label": cfg.label()},
                cache_path=os.environ.get(CACHE_ENV) or None)
        except Exception as e:  # noqa: BLE001
            out["errors"]["ceilings"] = f"{type(e).__name__}: {str(e)[:300]}"
    elif not cfg.measure.measure_ceilings:
        out["errors"]["ceilings"] = "not measured (measure_ceilings is off)"
    return out


def efficiency(r: RunRecord, spec: Any, probes: Mapping[str, Any],
               device_name: str | None) -> dict[str, Any]:
    """The ``flops``, ``ceilings``, ``datasheet``, ``mfu`` and ``probe_errors`` parts of a
    record (as dicts), from its identity and throughput and the probes (:func:`run_probes`).

    ``spec``: the model's :class:`~dlperf.zoo.spec.ModelSpec` (``train_flops_per_sample``,
    ``flops_source``). ``device_name`` is the framework session's name of the device
    (``versions["device_name"]``, e.g. "NVIDIA H200"), which picks the datasheet entry on a
    GPU; it is passed in because the record's own ``versions`` are filled in only after the
    measurement. MFU is per device (:func:`dlperf.perfmodel.mfu.mfu_summary`)."""
    ident = r.identity
    fw = probes.get("framework_flops") or {}
    sheet = datasheet_peaks(device_name if ident.device == "cuda" else None)
    fw_step = fw.get("flops_per_step")  # one process's step: its per-device batch
    analytic = spec.train_flops_per_sample
    # MFU is per device: data parallel throughput is over world_size devices, the ceilings are
    # one device's.
    n_dev = ident.world_size or 1
    b_dev = ident.per_device_batch or ident.batch_size
    flops = {"analytic_train_flops_per_sample": analytic,
             "analytic_source": spec.flops_source,
             "framework_flops_per_step": fw_step,
             "framework_flops_per_sample": fw_step / b_dev if fw_step else None,
             "framework_to_analytic": (fw_step / b_dev / analytic
                                       if fw_step and analytic else None),
             "framework_source": fw.get("source"),
             "bytes_per_step": fw.get("bytes_per_step"), "bytes_source": fw.get("bytes_source"),
             "ops_per_step": fw.get("aten_ops_per_step")}
    sps = (r.throughput.samples_per_s if r.throughput is not None else None) or 0
    mfu = mfu_summary(train_flops_per_sample=analytic, samples_per_s=sps / n_dev or None,
                      precision=ident.precision, batch_size=b_dev,
                      ceilings=probes.get("ceilings"), datasheet=sheet,
                      framework_flops_per_step=fw_step, bytes_per_step=fw.get("bytes_per_step"))
    return {"flops": flops, "ceilings": probes.get("ceilings"), "datasheet": sheet, "mfu": mfu,
            "probe_errors": probes.get("errors") or None}


def compile_info(session: Any) -> dict[str, Any]:
    """Compile/trace time and counts from the session (None where it compiles nothing),
    docs/measurement.md rule 4: ``compile_time_s``, ``n_compiles``, ``recompiles_measured``
    and whatever else the framework reports."""
    info: dict[str, Any] = {"compile_time_s": None, "n_compiles": None,
                            "recompiles_measured": None}
    if session.compile_info is not None:
        info.update(session.compile_info())
    return info


def profile_comm(session: Any, iters: int, is_oom: Callable[[BaseException], bool]
                 ) -> dict[str, Any] | None:
    """Exposed communication of ``iters`` more data-parallel iterations under the framework's
    profiler (``session.comm_profile``; seconds per iteration), or None where it has none or
    ``iters`` is 0. A profiler failure is kept as the ``reason``; an out-of-memory error
    (``is_oom``) is the device's limit, not the profiler's, and is raised."""
    if session.comm_profile is None or iters <= 0:
        return None
    try:
        return session.comm_profile(iters)
    except Exception as e:  # noqa: BLE001 - the measurement stands; keep why
        if is_oom(e):
            raise
        return {"exposed": None, "profiled_iters": iters,
                "reason": f"comm profile failed: {type(e).__name__}: {e}"[:500]}


def breakdown_into(rec: RunRecord, cfg: Any, session: Any, phases: dict[str, float]) -> None:
    """Add the breakdown/trace sections of ``cfg`` (``--breakdown``/``--trace``,
    :func:`dlperf.measure.breakdown.run.run_breakdown`) to the measured record ``rec``: a
    separate, labelled measurement after the fused one, which stays the headline; its raw
    samples join ``rec.samples``, its warnings ``rec.warnings``; a failure is recorded as an
    unavailable breakdown. Its time (s) goes into ``phases["breakdown"]``."""
    from dlperf.measure.breakdown.run import run_breakdown

    t0 = time.perf_counter()
    try:
        fused = rec.summary.model_dump(exclude_unset=True) if rec.summary is not None else {}
        sections, extra, warns = run_breakdown(cfg, session, fused)
    except Exception as e:  # noqa: BLE001 - the fused result stands; the failure is kept
        sections, extra = {"breakdown": {"available": False,
                                         "error": f"{type(e).__name__}: {e}"}}, {}
        warns = [f"breakdown: failed ({type(e).__name__}: {e})"]
    phases["breakdown"] = time.perf_counter() - t0
    buckets = sections.pop("buckets_timeline", None)
    if buckets is not None and rec.dist is not None:
        rec.dist.buckets_timeline = buckets
    for k, v in sections.items():
        setattr(rec, k, v)
    samples: dict[str, list[float | int | None]] = {**(rec.samples or {})}
    samples.update({k: [*v] for k, v in extra.items()})
    rec.samples = samples
    rec.warnings = [*(rec.warnings or []), *warns]


#: Raw-sample phases of the dispatch probe (:mod:`dlperf.measure.dispatch`).
DISPATCH_SAMPLE = "host:dispatch"
SYNC_WAIT_SAMPLE = "host:sync_wait"


def dispatch_into(samples: dict[str, list[float]], cfg: Any, session: Any,
                  step_median_s: float | None) -> dict[str, Any]:
    """The ``host`` part of a record: the untraced host dispatch time per iteration
    (:func:`dlperf.measure.dispatch.probe_dispatch`), its raw samples added to ``samples``
    (:data:`DISPATCH_SAMPLE`, :data:`SYNC_WAIT_SAMPLE`). On a CPU device nothing is probed
    (the host runs the step: its dispatch is the step) and the part says so. Every process of
    a data-parallel run probes the same number of iterations (the steps hold collectives). A
    failure is kept as the part's ``error``; the measurement stands."""
    from dlperf.measure.dispatch import METHOD, probe_count, probe_dispatch  # not every run's

    if cfg.hardware.device == "cpu":
        return {"dispatch_s": None, "method": METHOD,
                "reason": "CPU device: the host runs the step, so its dispatch is the step"}
    n = probe_count(step_median_s)
    dist = getattr(session, "dist", None)
    if dist is not None and dist.world_size > 1:
        n = int(-dist.agree_max([-float(n)])[0])  # the fewest any process asked for
    try:
        out = probe_dispatch(session.step, lambda h: session.losses_to_floats([h]), n,
                             clock=getattr(session, "clock", time.perf_counter))
    except Exception as e:  # noqa: BLE001 - the fused result stands
        return {"dispatch_s": None, "method": METHOD, "error": f"{type(e).__name__}: {e}"[:500]}
    samples[DISPATCH_SAMPLE] = out.pop("dispatch_samples")
    samples[SYNC_WAIT_SAMPLE] = out.pop("sync_wait_samples")
    return out


def dist_runtime_into(session: Any, dist: Any) -> None:
    """Put what the framework's data-parallel machinery recorded of itself
    (``session.dist_details()``, e.g. DDP's buckets) into ``dist.info["runtime"]`` (stored as
    the record's ``dist.runtime``); a failure is kept there as ``error``."""
    details = getattr(session, "dist_details", None)
    if details is None:
        return
    try:
        dist.info["runtime"] = details()
    except Exception as e:  # noqa: BLE001 - the measurement stands
        dist.info["runtime"] = {"error": f"{type(e).__name__}: {e}"[:500]}
