"""The breakdown and trace measurements of one configuration, run by the worker after the
fused-step measurement (which stays the headline number, unchanged).

:func:`run_breakdown` asks the adapter's session for

1. (``--breakdown``) a phased measurement (:func:`dlperf.measure.phases.measure_phases`):
   t_io, t_h2d, t_f, t_b, t_u per iteration (or t_fbu for a fused compiled step);
2. (``--breakdown``, ``--trace DIR`` or ``--timeline``) a profiler trace of :data:`TRACE_ITERS` more
   iterations (after one profiled warm-up iteration), analysed by
   :func:`dlperf.measure.breakdown.trace.analyse`: GPU busy fraction, CPU dispatch time, time per op
   class, the trace's forward/backward/update split. With ``--trace DIR`` the trace files are
   kept under ``DIR`` (one new folder per traced run) and their paths stored; otherwise they go
   to a temporary folder. With ``--timeline`` the parsed per-kernel timeline is kept in the
   result, compressed (:mod:`dlperf.measure.breakdown.timeline`). Where the session's
   ``profile`` reports what the traced steps compiled (JAX: ``compiles``, nothing when the
   measured executable is reused), it is kept as ``trace.compiles``.

In a run of several processes (data parallel) every process runs both, with the same number
of iterations (the phased count is agreed over the processes: the steps hold collectives);
rank ``r > 0`` keeps its trace in ``<folder>-rank<r>`` beside rank 0's.

A failure here (a profiler that cannot start, a trace that cannot be read) never loses the
fused result: it is recorded in the section it broke, with a warning.
"""

from __future__ import annotations

import math
import re
import shutil
import time
import traceback
from pathlib import Path
from typing import Any

from dlperf.measure.breakdown.buckets import match_buckets, summarize_buckets
from dlperf.measure.breakdown.phases import summarize
from dlperf.measure.breakdown.timeline import encode as encode_timeline
from dlperf.measure.breakdown.timeline import rows as timeline_rows
from dlperf.measure.breakdown.trace import analyse
from dlperf.measure.phases import measure_phases
from dlperf.tempdirs import make_owned

#: Traced iterations (after one profiled warm-up iteration).
TRACE_ITERS = 5
#: Prefix of the raw-sample phases stored for the breakdown (samples table ``phase`` column).
SAMPLE_PREFIX = "breakdown:"
TRACE_SAMPLE_PREFIX = "trace:"


def trace_folder(cfg: Any) -> str:
    """The folder name for one configuration's trace under ``--trace DIR``."""
    parts = [cfg.workload.model, cfg.runtime.framework, cfg.runtime.mode, cfg.hardware.device, cfg.hardware.precision, f"b{cfg.workload.batch_size}",
             cfg.run_key()]
    return re.sub(r"[^\w.\-]+", "_", "-".join(str(p) for p in parts))


def _new_folder(base: Path) -> Path:
    """``base``, or ``base-2``, ``base-3``, ... the first that does not exist: a point traced
    again (``--rerun``) keeps the earlier run's trace, which its stored result points to."""
    folder, k = base, 2
    while folder.exists():
        folder, k = base.with_name(f"{base.name}-{k}"), k + 1
    return folder


#: Traced steps slower than this multiple of the fused step get a warning (op-class times
#: and the busy fraction come from them). On the H200 the profiler made host-bound torch steps
#: 1.6-2.4x longer (resnet50 bf16 b=64: 40.0 against 23.2 ms); on a busy 2-core CPU a
#: fresh user's traced fcn5_tiny steps took ~200 ms against 0.46 ms.
TRACE_SLOWDOWN_WARN = 3.0


def _traced_slowdown(analysis: dict[str, Any], fused: dict[str, Any]) -> float | None:
    """The traced steps' wall time per step over the fused step's median (None if either is
    missing): ``analysis["step_wall_s"]`` is the traced span / steps."""
    wall, med = analysis.get("step_wall_s"), fused.get("median")
    return wall / med if wall and med else None


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}\n" + "".join(traceback.format_exc(limit=6))[-2000:]


#: What ``dist.buckets_timeline`` holds (docs/measurement.md, "Per-bucket all-reduce timeline").
BUCKETS_WHAT = ("per rank, DDP's buckets in reduction order with the median over the traced "
                "iterations of the gradient-ready time, the all-reduce start and end (ns from "
                "the iteration's host start), the end of backward and the exposed tail "
                "(max(0, last all-reduce end - backward end))")


def _rank_buckets(trace: Any, dist: Any) -> dict[str, Any] | None:
    """This rank's bucket timeline (:func:`~dlperf.measure.breakdown.buckets.
    summarize_buckets`) from its parsed ``trace`` and its ``dist.info["runtime"]["buckets"]``;
    None where the run records no buckets (no DDP); a failure is kept as ``error``."""
    runtime = dist.info.get("runtime") if isinstance(dist.info, dict) else None
    buckets = runtime.get("buckets") if isinstance(runtime, dict) else None
    if not buckets:
        return None
    out: dict[str, Any] = {"rank": dist.rank}
    if trace is None:
        return {**out, "error": "the trace failed: nothing to read the buckets from"}
    try:
        per_step = match_buckets(timeline_rows(trace), buckets, len(trace.steps))
        return {**out, **summarize_buckets(per_step)}
    except Exception as e:  # noqa: BLE001 - recorded, the result stands
        return {**out, "error": f"{type(e).__name__}: {e}"[:500]}


def _gather_buckets(trace: Any, dist: Any) -> dict[str, Any] | None:
    """Every rank's :func:`_rank_buckets` (a collective: every rank of a traced
    data-parallel run calls it, trace or not), as the ``dist.buckets_timeline`` part; None
    where no rank records buckets."""
    mine = _rank_buckets(trace, dist)
    got = dist.all_gather(mine)
    ranks = sorted((r for r in got if r is not None), key=lambda r: r["rank"])
    if not ranks:
        return None
    return {"what": BUCKETS_WHAT, "unit": "ns", "per_rank": ranks,
            "source": "PyTorch DDP reducer (buckets launched in index order) matched by "
                      "order to the traced all-reduces; WFBP after Shi & Chu 2017"}


def _trace_section(analysis: dict[str, Any], cap: dict[str, Any], kept: Path | None
                   ) -> dict[str, Any]:
    """The ``trace`` section from the trace's ``analysis`` and the session's ``profile``
    result ``cap``; ``kept``: the folder under ``--trace DIR`` (its files are named), else
    None. ``compiles``: what the traced steps compiled, where the session reports it."""
    sec = {k: analysis[k] for k in ("n_steps", "source", "device_kind", "busy_fraction",
                                    "busy_s", "idle_s", "step_wall_s", "dispatch_s", "phases",
                                    "kernels_per_iter", "copies_per_iter", "phase_source",
                                    "notes")}
    sec = {"available": True, **sec,
           "files": ({k: str(v) for k, v in cap.get("files", {}).items()}
                     if kept is not None else None),
           "dir": str(kept) if kept is not None else None}
    if cap.get("compiles") is not None:
        sec["compiles"] = cap["compiles"]
    return sec


def run_breakdown(cfg: Any, session: Any, fused: dict[str, Any]
                  ) -> tuple[dict[str, Any], dict[str, list[float]], list[str]]:
    """Run the breakdown/trace measurements of ``cfg`` on a prepared ``session``.

    Args:
        cfg: the RunConfig (``breakdown``, ``trace_dir``, ``iterations``, ``device``).
        session: the adapter's :class:`~dlperf.frameworks.base.TrainingRun` (``phased_step``, ``phase_timer``, ``profile``).
        fused: the fused step's summary (median, mean, ci_low, ci_high in seconds).

    Returns:
        (result sections ``breakdown``/``op_classes``/``trace``/``timeline``, and in a traced
        data-parallel run with DDP buckets ``buckets_timeline`` (every rank's, for
        ``dist.buckets_timeline``), raw samples by phase name, warnings).
    """
    out: dict[str, Any] = {}
    samples: dict[str, list[float]] = {}
    warnings: list[str] = []
    analysis = None
    loop = None
    # Several processes (data parallel): every one runs the same phased and traced steps
    # (they hold collectives), so the phased count is agreed; each keeps its own trace folder.
    dist: Any = getattr(session, "dist", None)  # the session's (untyped) process group
    multi = dist is not None and dist.world_size > 1
    if cfg.measure.breakdown:
        if session.phased_step is None or session.phase_timer is None:
            why = f"the {cfg.runtime.framework} adapter has no phased step"
            n = getattr(cfg, "world_size", 1) or 1
            if n > 1:
                why += (f" under data parallelism ({n} devices): the phased step splits one "
                        f"device's step; run with --nproc 1 for the phases")
            out["breakdown"] = {"available": False, "reason": why}
            warnings.append(f"breakdown: not measured: {why}")
        else:
            try:
                loop = measure_phases(session.phased_step, session.phase_timer(), cfg.measure.iterations,
                                      clock=getattr(session, "clock", time.perf_counter),
                                      agree=dist.agree_max if multi else None)
                floats = session.losses_to_floats(loop.losses)
                if not all(math.isfinite(x) for x in floats):
                    warnings.append("breakdown: the loss became non-finite during the phased "
                                    "measurement")
            except Exception as e:  # noqa: BLE001 - recorded, the fused result stands
                out["breakdown"] = {"available": False, "error": _error(e)}
                warnings.append(f"breakdown: the phased measurement failed ({type(e).__name__}: "
                                f"{e})")
                loop = None
    want_trace = bool(getattr(cfg, "traced", cfg.measure.breakdown or cfg.measure.trace_dir))
    if want_trace:
        if session.profile is None:
            out["trace"] = {"available": False,
                            "reason": f"the {cfg.runtime.framework} adapter cannot trace"}
        else:
            keep = bool(cfg.measure.trace_dir)
            name = trace_folder(cfg) + (f"-rank{dist.rank}" if multi and dist.rank else "")
            # a temporary trace goes in a subfolder of an owned folder (reclaimed after a
            # SIGKILL; the owner file stays out of the profiler's tree)
            owned = None if keep else make_owned("dlperf-trace-")
            folder = (_new_folder(Path(cfg.measure.trace_dir).expanduser().resolve() / name)
                      if owned is None else owned / "trace")
            cap = None
            try:
                folder.mkdir(parents=True, exist_ok=True)
                cap = session.profile(TRACE_ITERS, folder)
                analysis = analyse(cap["trace"])
                if cfg.hardware.device != "cpu" and not analysis["busy_s"]:
                    raise ValueError(
                        "the GPU trace holds no device ops: the profiler recorded no kernels "
                        "(CUPTI takes one subscriber per process, so a profiler already "
                        "started in this process, e.g. torch.profiler, keeps another out; "
                        "dlperf's own runs trace in a fresh worker process)")
                out["op_classes"] = {
                    "per_iter_s": analysis["op_classes"], "busy_s": analysis["busy_s"],
                    "device_kind": analysis["device_kind"], "source": analysis["source"],
                    "top_ops": analysis["top_ops"], "top_by_class": analysis["top_by_class"],
                    "n_steps": analysis["n_steps"]}
                out["trace"] = _trace_section(analysis, cap, folder if keep else None)
                if cfg.measure.timeline:
                    out["timeline"] = encode_timeline(cap["trace"])
                slow = _traced_slowdown(analysis, fused)
                if slow is not None:
                    out["trace"]["slowdown"] = slow
                    if slow > TRACE_SLOWDOWN_WARN:
                        warnings.append(
                            f"trace: the traced steps took {slow:.1f}x the fused step (profiler "
                            f"overhead, or other load on the machine): the op-class times and "
                            f"busy fraction are those of the traced steps, and a gap attributed "
                            f"with them leaves a large rest")
                samples[TRACE_SAMPLE_PREFIX + "dispatch"] = list(analysis["dispatch_samples"])
                for ph, xs in analysis["phase_samples"].items():
                    samples[TRACE_SAMPLE_PREFIX + ph] = list(xs)
            except Exception as e:  # noqa: BLE001 - recorded, the fused result stands
                out["trace"] = {"available": False, "error": _error(e)}
                warnings.append(f"trace: the profiler trace failed ({type(e).__name__}: {e})")
            finally:
                if owned is not None:
                    shutil.rmtree(owned, ignore_errors=True)
            if multi:
                bt = _gather_buckets((cap or {}).get("trace"), dist)
                if bt is not None:
                    out["buckets_timeline"] = bt
    if loop is not None:
        bd, w = summarize(loop, fused, device=cfg.hardware.device, trace=analysis)
        out["breakdown"] = {"available": True, **bd}
        warnings.extend(w)
        for p in loop.phases:
            samples[SAMPLE_PREFIX + p] = loop.samples(p)
            samples[SAMPLE_PREFIX + "host_" + p] = loop.samples(p, host=True)
        samples[SAMPLE_PREFIX + "total"] = loop.totals()
    return out, samples, warnings
