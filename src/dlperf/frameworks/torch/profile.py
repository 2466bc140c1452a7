"""PyTorch under ``torch.profiler``: the breakdown's trace (:func:`profile_steps`) and the
exposed communication of data-parallel steps (:func:`profile_comm`).

Both run extra iterations after the measured segment (separate, labelled measurements); the
fused timing never runs under the profiler. Torch is imported inside the functions, so this
module imports without it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dlperf.measure.breakdown.overlap import exposed_communication, spans_from_chrome_trace
from dlperf.measure.breakdown.torch_trace import STEP_PREFIX, from_chrome_trace


def trace_activities(activity: Any, cuda: bool, purpose: str) -> list[Any]:
    """The ``torch.profiler`` activities to trace for ``purpose``.

    ``activity`` is ``torch.profiler.ProfilerActivity`` (passed in so this module imports
    without torch). ``purpose``:

    - ``"breakdown"``: CPU and, on a GPU, CUDA. The breakdown needs the CPU side: its steps
      are found by their ``record_function`` spans (CPU events) and the CPU dispatch time is
      read from the CPU ops. Traced with CUDA only, the trace has no step spans and the
      breakdown's trace fails (as it did on an H200).
    - ``"comm"``: on a GPU CUDA only (the exposed-communication rule uses kernels only, and
      tracing CPU ops slowed a host-bound step, googlenet fp32 on an H200 pair, from 31.7 to
      50.5 ms per iteration, which shifts the very overlap being measured); CPU on a CPU.

    Raises ValueError for another ``purpose``.
    """
    if purpose == "breakdown":
        return [activity.CPU] + ([activity.CUDA] if cuda else [])
    if purpose == "comm":
        return [activity.CUDA] if cuda else [activity.CPU]
    raise ValueError(f"unknown trace purpose {purpose!r}: use 'breakdown' or 'comm'")


def profile_steps(torch: Any, step: Callable[[], Any], cuda: bool, n: int,
                  folder: Any, shapes: bool = False) -> dict[str, Any]:
    """Trace one warm-up and ``n`` steps with ``torch.profiler`` (CPU ops; CUDA kernels on a
    GPU), each step in ``record_function("dlperf_step#<i>")``; write the Chrome trace
    (``export_chrome_trace``) to ``folder/trace.json`` and parse it.

    ``shapes`` (``--timeline``): profile with ``record_shapes=True, with_flops=True`` (input
    dims and types on every ATen op; more profiler overhead in the traced steps) and put each
    op's FLOPs, which torch 2.13's Chrome trace leaves out, in its event's ``args["flops"]``
    (:func:`add_flops`) before parsing; the file on disk is the profiler's own.

    Returns:
        ``{"trace": TraceData, "files": {"chrome_trace": path}}``
        (:func:`dlperf.measure.breakdown.torch_trace.from_chrome_trace`).
    """
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    acts = trace_activities(ProfilerActivity, cuda, purpose="breakdown")
    if cuda:
        torch.cuda.synchronize()
    # One warm-up step inside the profiler (CUPTI and profiler start-up costs), then n.
    with profile(activities=acts, schedule=schedule(wait=0, warmup=1, active=n, repeat=1),
                 record_shapes=shapes, with_flops=shapes) as prof:
        for i in range(n + 1):
            with record_function(f"{STEP_PREFIX}{i - 1}"):
                step()
            if i == n and cuda:
                torch.cuda.synchronize()
            prof.step()
    path = Path(folder) / "trace.json"
    prof.export_chrome_trace(str(path))
    doc = json.loads(path.read_text())
    if shapes:
        add_flops(doc, prof.events())
    trace = from_chrome_trace(doc)
    return {"trace": trace, "files": {"chrome_trace": path}}


def add_flops(doc: dict[str, Any], events: Any) -> int:
    """Put the FLOPs ``torch.profiler`` counted for each op (``FunctionEvent.flops`` of
    ``prof.events()``, torch's formulas under ``with_flops=True``) in the ``args["flops"]`` of
    its ``cpu_op`` event in the loaded Chrome trace ``doc`` (matched by ``External id`` ==
    ``FunctionEvent.id`` and the same name); an event that already has ``flops`` keeps it.
    Returns how many events got one."""
    flops = {(ev.id, ev.name): int(ev.flops) for ev in events
             if getattr(ev, "flops", 0)}
    n = 0
    for e in doc.get("traceEvents", []) if isinstance(doc, dict) else []:
        args = e.get("args") if isinstance(e, dict) and e.get("cat") == "cpu_op" else None
        if not isinstance(args, dict) or "flops" in args:
            continue
        f = flops.get((args.get("External id"), e.get("name")))
        if f is not None:
            args["flops"] = f
            n += 1
    return n


def profile_comm(torch: Any, step: Callable[[], Any], k: int, cuda: bool) -> dict[str, Any]:
    """Run ``k`` iterations under ``torch.profiler`` and return the exposed communication per
    iteration in seconds (:func:`dlperf.measure.breakdown.overlap.exposed_communication`) from
    its trace, with ``profiled_iters``, ``rule``, ``profiled_wall_s_per_iter``,
    ``exposed_share_of_step``, ``n_comm_spans`` and ``note``; ``exposed`` None with a
    ``reason`` when a CUDA trace has no kernels. Every rank runs it (DDP needs the same steps
    everywhere); rank 0's numbers are stored."""
    from torch.profiler import ProfilerActivity, profile

    acts = trace_activities(ProfilerActivity, cuda, purpose="comm")
    with profile(activities=acts) as prof:
        t0 = time.perf_counter()
        for _ in range(k):
            step()
        if cuda:
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    from dlperf.tempdirs import owned_tempdir

    with owned_tempdir("dlperf-trace-") as tmp:
        path = f"{tmp}/trace.json"
        prof.export_chrome_trace(path)
        with open(path) as f:
            trace = json.load(f)
    comm, compute, rule = spans_from_chrome_trace(trace)
    if cuda and rule != "gpu-kernels":
        return {"exposed": None, "profiled_iters": k, "rule": rule,
                "reason": "the CUDA trace has no kernels (CUPTI unavailable?)"}
    out: dict[str, Any] = exposed_communication(comm, compute, k)
    out.update(profiled_iters=k, rule=rule, profiled_wall_s_per_iter=wall / k,
               exposed_share_of_step=out["exposed"] / (wall / k) if wall > 0 else None,
               n_comm_spans=len(comm),
               note="separate profiled iterations after the measured segment")
    return out
