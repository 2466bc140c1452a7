"""Summarising the phase measurement and reconciling it with the fused step.

:func:`summarize` turns a :class:`~dlperf.measure.phases.PhaseLoopResult` (and, where the
framework compiles forward, backward and update into one program, the trace's split of it)
into the ``breakdown`` section of a result: per-phase statistics, shares, host (dispatch)
time, and the reconciliation: the per-iteration sum of the phases against the fused step's
median. A difference over :data:`RECONCILE_TOL` (3%) becomes a warning with its reason, chosen
from what was measured (:func:`reason`).

Statistics per phase: median, mean, sample stdev, p5, p95, min, max (numpy's linear
percentiles, as :mod:`dlperf.stats`); the raw per-iteration samples are stored by the worker.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

#: Sum of phases and fused step may differ by this share of the fused median (issue 4).
RECONCILE_TOL = 0.03
#: A step whose host dispatch time is at least this share of its device time is host-bound.
HOST_BOUND = 0.9
SPLIT_PHASES = ("t_f", "t_b", "t_u")


def describe(xs: Sequence[float]) -> dict[str, float] | None:
    """median, mean, stdev (ddof=1), p5, p95, min, max and n of ``xs`` (None if empty)."""
    if not xs:
        return None
    import numpy as np  # here: the report reads this module's constants without numpy

    a = np.asarray(xs, dtype=float)
    return {"median": float(np.median(a)), "mean": float(a.mean()),
            "stdev": float(a.std(ddof=1)) if a.size > 1 else 0.0,
            "p5": float(np.percentile(a, 5)), "p95": float(np.percentile(a, 95)),
            "min": float(a.min()), "max": float(a.max()), "n": int(a.size)}


_HOST_PHASES_SET_THE_PACE = ("the host phases (fetching and enqueueing the batch) took longer "
                             "than the device's work on the step, so they set the pace of the "
                             "phased loop")


def reason(rel: float, *, timer: str, device: str, fused: Mapping[str, Any],
           host_total_s: float | None, device_total_s: float, n_marks: int,
           host_input_s: float | None = None, device_busy_s: float | None = None) -> str:
    """Why the phases' sum differs from the fused step by ``rel`` (signed share of the fused
    median), from what was measured:

    * the fused step's own CI is as wide as the difference -> noise;
    * JAX's lagged host timer: the host input phases (``host_input_s``, the median t_io +
      t_h2d that the host's slack did not hide) are at least half the excess -> they set the
      pace of the phased loop; else the phased loop's completion intervals themselves ran
      longer than the fused loop's (the input phases are named, and they are not the cause);
    * JAX's lagged host timer, and the trace's device busy time (``device_busy_s``, kernels and
      copies per iteration) more than 3% short of both the fused step and the phases' sum: the
      device waited between kernels for the host to launch them, so both loops ran at the
      host's launch speed, which varies within a process (JAX resnet50 bf16 b=64 on an H200
      with command buffers off for the trace: 12.2 ms busy, fused 12.8-14.2 ms and phased
      13.9-14.7 ms over three runs, the two -22% to +15% apart);
    * phases timed by a blocking host clock on an asynchronous device -> each phase boundary
      waits for the device (host and device no longer overlap as in the fused step);
    * CUDA events and a host-bound step (dispatch >= 90% of device time) -> the per-phase
      event records add host work to a step the host already limits;
    * host clock on a CPU device, slower phased loop: nothing overlaps there, so the phased
      loop itself ran slower (machine load, or the phased step's own code);
    * otherwise, for a slower phased loop: the phase boundaries stop work of one phase
      overlapping the next (e.g. the optimizer's kernels queued behind backward); for a faster
      one: the fused measurement ran slower than the phased one (machine state changed).
    """
    med = fused.get("median") or 0.0
    lo, hi = fused.get("ci_low"), fused.get("ci_high")
    if med and lo is not None and hi is not None and max(hi - med, med - lo) / med >= abs(rel):
        return (f"within the noise of the fused step (its 95% CI of the median spans "
                f"{(lo - med) / med:+.1%} / {(hi - med) / med:+.1%})")
    if (timer == "lagged_host" and rel > 0 and host_input_s is not None
            and host_input_s >= 0.5 * rel * med):
        return _HOST_PHASES_SET_THE_PACE
    if (timer == "lagged_host" and device != "cpu" and device_busy_s and med
            and device_busy_s < (1 - RECONCILE_TOL) * min(med, device_total_s)):
        ref = min(med, device_total_s)
        return (f"the device was busy {device_busy_s * 1e3:.3g} ms of a {ref * 1e3:.3g} ms step "
                f"(its trace) and idle the rest, waiting for the host to launch its kernels: "
                f"both loops ran at the host's launch speed, which changed between them (the "
                f"phased loop's timer adds host work; other load); read the device time per op "
                f"class, which does not depend on it")
    if timer == "lagged_host" and rel > 0:
        excess = rel * med
        if host_input_s is not None and host_input_s < 0.5 * excess:
            return (f"the phased loop's steps completed {excess * 1e3:.3g} ms further apart "
                    f"than the fused loop's in the same process; its host input phases (t_io + "
                    f"t_h2d, {host_input_s * 1e3:.3g} ms) are not the cause: the phased loop "
                    f"itself ran slower (other load, or the phased step's own dispatch); "
                    f"compare the raw samples")
        return _HOST_PHASES_SET_THE_PACE
    if timer == "host" and device != "cpu" and rel > 0:
        return ("each phase was waited for on the host (this framework has no device events), "
                "so host dispatch and device work did not overlap as in the fused step")
    if (timer == "cuda_events" and rel > 0 and host_total_s is not None and device_total_s > 0
            and host_total_s >= HOST_BOUND * device_total_s):
        return (f"the step is bound by the host (it takes {host_total_s * 1e3:.3g} ms to issue "
                f"{device_total_s * 1e3:.3g} ms of device work), so the {n_marks} event "
                f"records per iteration add to it")
    if timer == "host" and device == "cpu" and rel > 0:
        return ("nothing overlaps on a CPU device (each phase runs to completion in the "
                "calling thread), so the phased loop itself ran slower: other load on the "
                "machine between the two measurements, or the phased step's own code; compare "
                "the raw samples")
    if rel > 0:
        return ("the phase boundaries keep work of one phase from overlapping the next, "
                "which the fused step allows")
    return ("the fused measurement was slower than the phased one: the machine's state "
            "changed between them (other load, clocks); compare the raw samples")


def summarize(loop: Any, fused: Mapping[str, Any], *, device: str,
              trace: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], list[str]]:
    """The ``breakdown`` section of a result and its warnings.

    Args:
        loop: a :class:`~dlperf.measure.phases.PhaseLoopResult`.
        fused: the fused step's summary (``median``, ``mean``, ``ci_low``, ``ci_high``, s).
        device: ``cpu`` or ``cuda``.
        trace: :func:`dlperf.measure.breakdown.trace.analyse` output of the traced iterations, used to
            split a fused compiled step (``t_fbu``) into ``t_f``/``t_b``/``t_u``.

    Returns:
        (breakdown dict, warnings). Times in seconds per iteration.
    """
    totals = loop.totals()
    host_totals = loop.totals(host=True)
    phases = {p: describe(loop.samples(p)) for p in loop.phases}
    host = {p: describe(loop.samples(p, host=True)) for p in loop.phases}
    mean_total = math.fsum(totals) / len(totals) if totals else 0.0
    shares = {p: (d["mean"] / mean_total if mean_total > 0 else None)
              for p, d in phases.items() if d}
    tot = describe(totals) or {}
    fused_med = fused.get("median")
    rel = ((tot["median"] - fused_med) / fused_med) if tot and fused_med else None
    n_marks = round(sum(len(d) for d in loop.per_iter) / max(len(loop.per_iter), 1))
    bd: dict[str, Any] = {
        "timer": loop.timer, "n_iters": len(totals), "phases_measured": list(loop.phases),
        "phases": phases, "host": host, "shares": shares, "total": tot,
        "dispatch_s": describe(host_totals), "wall_s": loop.wall_s,
        "fused_median_s": fused_med, "rel_diff": rel, "tolerance": RECONCILE_TOL,
        "reconciled": rel is not None and abs(rel) <= RECONCILE_TOL, "reason": None,
    }
    warnings: list[str] = []
    if rel is not None and fused_med and abs(rel) > RECONCILE_TOL:  # rel: fused_med is set
        why = reason(rel, timer=loop.timer, device=device, fused=fused,
                     host_total_s=(describe(host_totals) or {}).get("median"),
                     device_total_s=tot["median"], n_marks=n_marks,
                     host_input_s=(math.fsum((phases.get(p) or {}).get("median", 0.0)
                                             for p in ("t_io", "t_h2d"))
                                   if "t_fbu" in loop.phases else None),
                     device_busy_s=(trace or {}).get("busy_s"))
        bd["reason"] = why
        warnings.append(f"breakdown: the phases sum to {tot['median'] * 1e3:.4g} ms per "
                        f"iteration, {rel:+.1%} against the fused step ({fused_med * 1e3:.4g} "
                        f"ms): {why}")
    bd["split"] = _split(loop, trace)
    if bd["split"].get("warning"):
        warnings.append("breakdown: " + bd["split"]["warning"])
    return bd, warnings


def _split(loop: Any, trace: Mapping[str, Any] | None) -> dict[str, Any]:
    """Forward/backward/update: measured directly, or from the trace for a fused program."""
    if "t_fbu" not in loop.phases:
        return {"source": f"measured ({loop.timer})", "available": True}
    fbu = describe(loop.samples("t_fbu")) or {}
    if not trace or not trace.get("phases"):
        return {"source": None, "available": False,
                "warning": "forward, backward and update run as one compiled program and no "
                           "trace split them: only their sum t_fbu is reported"}
    ph = trace["phases"]
    known = {p: ph.get(p, 0.0) for p in SPLIT_PHASES}
    if not any(known.values()):
        return {"source": trace.get("phase_source"), "available": False,
                "warning": "the trace does not tell forward, backward and update apart "
                           f"({'; '.join(trace.get('notes') or []) or 'no phase names'}): "
                           "only their sum t_fbu is reported"}
    unattributed = ph.get("unattributed", 0.0)
    attributed = math.fsum(known.values()) + unattributed
    out: dict[str, Any] = {
        "source": trace.get("phase_source"), "available": True,
        "per_iter_s": {**known, "t_unattributed": unattributed},
        "samples": {p: list(trace.get("phase_samples", {}).get(p, [])) for p in SPLIT_PHASES},
        "busy_s": trace.get("busy_s"), "trace_step_wall_s": trace.get("step_wall_s"),
        "t_fbu_median_s": fbu.get("median"),
        # What the compiled step took beyond the device time the trace attributes: device
        # idle between ops, and profiler overhead (traced and phased iterations differ).
        "t_gap_s": (fbu.get("median") - attributed) if fbu.get("median") is not None else None,
    }
    if fbu.get("median"):
        out["coverage"] = attributed / fbu["median"]
        if out["coverage"] > 1 + RECONCILE_TOL:
            # The traced ops took longer than the untraced step: the profiler slowed them
            # (on a CPU device the "device" ops are host ops timed with the profiler on).
            out["warning"] = (
                f"the trace's forward/backward/update time ({attributed * 1e3:.4g} ms per "
                f"iteration) exceeds the compiled step t_fbu ({fbu['median'] * 1e3:.4g} ms) by "
                f"{out['coverage'] - 1:+.0%}: the profiler slowed the traced ops, so t_f, t_b "
                f"and t_u are too large and the gap is negative; read them as shares of the "
                f"step")
    return out
