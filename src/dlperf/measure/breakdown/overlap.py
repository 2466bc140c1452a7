"""Exposed communication: the part of gradient communication not hidden behind computation.

In data-parallel training the gradient all-reduce of one bucket runs while backward computes
the gradients of earlier layers (PyTorch DDP's bucketed overlap; Shi & Chu 2017's ``t_c`` and
the part of it "not hidden behind backward"). What the step pays for is the communication time
during which no computation runs:

    exposed = |C| - |C ∩ K|

where ``C`` is the union of the communication spans and ``K`` the union of the computation
spans on the same timeline (lengths of unions of intervals, so nested or repeated spans count
once). :func:`exposed_communication` computes it from spans; :func:`spans_from_chrome_trace`
finds the spans in a Chrome-format trace as written by ``torch.profiler``
(``export_chrome_trace``):

* with GPU kernels in the trace: communication = kernels whose name contains ``nccl``;
  computation = every other kernel (they overlap only when on different streams, which is how
  DDP overlaps);
* CPU only (gloo): communication = the ``gloo:<collective>`` annotations that gloo records on its
  worker threads; computation = the ``cpu_op`` events on the other threads (the training
  thread), except the ``c10d::`` calls that only enqueue a collective.

and :func:`exposed_from_xspace` in the XSpace trace of ``jax.profiler`` (read by
:mod:`dlperf.measure.breakdown.xspace`), device by device (:func:`spans_from_xspace`):

* GPU (``/device:GPU:N`` planes): the kernels on the plane's ``Stream ...`` lines (the lines
  TensorBoard derives from them, ``XLA Ops`` etc., are skipped, as are memory copies and
  sets); communication = a kernel whose name contains ``nccl`` or whose ``hlo_op`` stat is an
  XLA collective (:data:`COLLECTIVE_OP`: ``all-reduce-start.1``, ``reduce-scatter.3``, ...);
  computation = every other kernel of that device;
* CPU (XLA:CPU host devices, e.g. ``--xla_force_host_platform_device_count=2``): the thunk
  events on the ``/host:CPU`` plane that carry an ``hlo_op`` stat, grouped into devices by
  their ``device_ordinal`` stat (XLA:CPU runs a device's thunks on several pool threads);
  communication = the collective thunks (``all-reduce.2``: the time a device spends in the
  collective, its rendezvous with the other devices included); computation = the device's
  other thunks, except one that encloses a collective on the same thread (a ``while`` or
  ``call`` around it: its own time is its children's).

Times in the trace are microseconds (Chrome) or nanoseconds (XSpace); the functions here
return seconds. Pure: no framework.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["union", "length", "overlap_length", "exposed_communication", "combine_rank_comm",
           "spans_from_chrome_trace", "spans_from_xspace", "exposed_from_xspace",
           "COMM_KERNEL", "COMM_ANNOTATION", "COLLECTIVE_OP"]

Span = tuple[float, float]

#: NCCL kernels (``ncclDevKernel_AllReduce_Sum_f32_RING_LL``, ``ncclKernel_...``).
COMM_KERNEL = re.compile(r"nccl", re.IGNORECASE)
#: gloo's per-collective annotations (``gloo:all_reduce``, ``gloo:broadcast``).
COMM_ANNOTATION = re.compile(r"^gloo:", re.IGNORECASE)
#: XLA collective instructions as traces name them (HLO instruction names such as
#: ``all-reduce.2``, ``all-reduce-start.1``, ``all-gather-done``, ``reduce-scatter.3``,
#: ``collective-permute-start``; XLA's HLO opcodes) and JAX's ``psum``.
COLLECTIVE_OP = re.compile(r"all-reduce|reduce-scatter|all-gather|all-to-all|"
                           r"collective-permute|collective-broadcast|\bpsum", re.IGNORECASE)
#: GPU stream events that are memory copies or sets, not kernels (XSpace names).
_MEM_EVENT = re.compile(r"^(Memcpy|Memset)", re.IGNORECASE)


def union(spans: Iterable[Span]) -> list[Span]:
    """Merge spans ``(start, end)`` into sorted, disjoint spans (touching ones merge).

    Raises:
        ValueError: a span that ends before it starts.
    """
    out: list[list[float]] = []
    for s, e in sorted((float(a), float(b)) for a, b in spans):
        if e < s:
            raise ValueError(f"span ends before it starts: ({s}, {e})")
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def length(spans: Iterable[Span]) -> float:
    """Total length of the union of ``spans``."""
    return sum(e - s for s, e in union(spans))


def overlap_length(a: Iterable[Span], b: Iterable[Span]) -> float:
    """Length of ``union(a) ∩ union(b)`` (two-pointer sweep over the merged spans)."""
    ua, ub = union(a), union(b)
    i = j = 0
    total = 0.0
    while i < len(ua) and j < len(ub):
        lo = max(ua[i][0], ub[j][0])
        hi = min(ua[i][1], ub[j][1])
        if hi > lo:
            total += hi - lo
        if ua[i][1] < ub[j][1]:
            i += 1
        else:
            j += 1
    return total


def exposed_communication(comm: Sequence[Span], compute: Sequence[Span],
                          iterations: int = 1) -> dict[str, float]:
    """Communication, its overlap with computation and the exposed rest, per iteration.

    Args:
        comm: communication spans (any unit; the result is in the same unit).
        compute: computation spans on the same clock.
        iterations: how many iterations the spans cover (results are divided by it).

    Returns:
        ``{"comm": |C|, "compute": |K|, "overlapped": |C ∩ K|, "exposed": |C| - |C ∩ K|,
        "hidden_share": |C ∩ K| / |C| (1.0 when there is no communication)}``, each per
        iteration except the share.

    Raises:
        ValueError: ``iterations < 1`` or a malformed span.
    """
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")
    c, k = length(comm), length(compute)
    ov = overlap_length(comm, compute)
    return {"comm": c / iterations, "compute": k / iterations, "overlapped": ov / iterations,
            "exposed": (c - ov) / iterations, "hidden_share": ov / c if c > 0 else 1.0}


def spans_from_chrome_trace(trace: Mapping[str, Any]) -> tuple[list[Span], list[Span], str]:
    """(communication spans, computation spans, which rule) from a Chrome trace, in seconds.

    See the module docstring for the rules (``"gpu-kernels"`` or ``"cpu-gloo"``). Only complete
    events (``"ph": "X"``) with a duration are used.
    """
    ev = [e for e in trace.get("traceEvents", [])
          if e.get("ph") == "X" and "ts" in e and e.get("dur") is not None]
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    comm: list[Span] = []
    compute: list[Span] = []

    def span(e: Mapping[str, Any]) -> Span:
        t0 = float(e["ts"])  # microseconds
        return (t0 / 1e6, (t0 + float(e["dur"])) / 1e6)

    if kernels:
        for e in kernels:
            (comm if COMM_KERNEL.search(str(e.get("name", ""))) else compute).append(span(e))
        return comm, compute, "gpu-kernels"
    comm_events = [e for e in ev if e.get("cat") in ("user_annotation", "cpu_op")
                   and COMM_ANNOTATION.search(str(e.get("name", "")))]
    comm_threads = {(e.get("pid"), e.get("tid")) for e in comm_events}
    comm = [span(e) for e in comm_events]
    for e in ev:
        name = str(e.get("name", ""))
        if (e.get("cat") == "cpu_op" and (e.get("pid"), e.get("tid")) not in comm_threads
                and not name.startswith("c10d::") and not COMM_ANNOTATION.search(name)):
            compute.append(span(e))
    return comm, compute, "cpu-gloo"


def spans_from_xspace(planes: Sequence[Any], since_ns: float | None = None
                      ) -> tuple[dict[str, dict[str, Any]], str]:
    """Communication and computation spans of each device in an XSpace trace, in seconds.

    Args:
        planes: the trace's planes (:class:`dlperf.measure.breakdown.xspace.XPlane`: ``name`` and
            ``lines``, each line a ``name`` and ``events`` with ``name``, ``start_ns``,
            ``dur_ns``, ``stats``), e.g. from :func:`dlperf.measure.breakdown.xspace.load_planes`.
        since_ns: only events that start at or after it (the trace's clock, ns); None: all.

    Returns:
        ``({device: {"comm": [spans], "compute": [spans], "comm_ops": sorted names}}, rule)``
        with ``rule`` ``"xspace-gpu-streams"`` or ``"xspace-cpu-thunks"`` (see the module
        docstring); a device with no events is absent, so ``{}`` means the trace holds no
        device op events.
    """
    from dlperf.measure.breakdown.xspace import DERIVED_LINES

    # per device: [(line key, event)]
    found: dict[str, list[tuple[Any, Any]]] = {}
    gpus = [p for p in planes if str(p.name).startswith("/device:GPU")]
    if gpus:
        rule = "xspace-gpu-streams"
        for p in gpus:
            lines = ([ln for ln in p.lines if str(ln.name).startswith("Stream")]
                     or [ln for ln in p.lines if ln.name not in DERIVED_LINES])
            for ln in lines:
                for e in ln.events:
                    if _MEM_EVENT.match(str(e.name)) or "memcpy_details" in e.stats \
                            or "memset_details" in e.stats:
                        continue
                    found.setdefault(str(p.name), []).append(((p.name, ln.name), e))
    else:
        rule = "xspace-cpu-thunks"
        for p in planes:
            if not str(p.name).startswith("/host:"):
                continue
            for k, ln in enumerate(p.lines):
                for e in ln.events:
                    if not e.stats.get("hlo_op"):
                        continue
                    dev = f"/device:CPU:{e.stats.get('device_ordinal', 0)}"
                    found.setdefault(dev, []).append(((p.name, k), e))
    out: dict[str, dict[str, Any]] = {}
    for dev, evs in found.items():
        if since_ns is not None:
            evs = [(ln, e) for ln, e in evs if e.start_ns >= since_ns]
        if not evs:
            continue
        comm_ev = [(ln, e) for ln, e in evs if _is_collective(e)]
        comm_set = {id(e) for _, e in comm_ev}
        by_line: dict[Any, list[tuple[float, float]]] = {}
        for ln, e in comm_ev:
            by_line.setdefault(ln, []).append((e.start_ns, e.start_ns + e.dur_ns))
        compute = []
        for ln, e in evs:
            if id(e) in comm_set:
                continue
            s0, s1 = e.start_ns, e.start_ns + e.dur_ns
            if any(s0 <= a and b <= s1 for a, b in by_line.get(ln, ())):
                continue  # a parent (while/call) of a collective on the same thread
            compute.append((s0 * 1e-9, s1 * 1e-9))
        out[dev] = {"comm": [(e.start_ns * 1e-9, (e.start_ns + e.dur_ns) * 1e-9)
                             for _, e in comm_ev],
                    "compute": compute,
                    "comm_ops": sorted({str(e.stats.get("hlo_op") or e.name)
                                        for _, e in comm_ev})}
    return out, rule


def _is_collective(e: Any) -> bool:
    name = str(e.name)
    return bool(COMM_KERNEL.search(name) or COLLECTIVE_OP.search(name)
                or COLLECTIVE_OP.search(str(e.stats.get("hlo_op") or "")))


def exposed_from_xspace(planes: Sequence[Any], iterations: int,
                        since_ns: float | None = None) -> dict[str, Any]:
    """Exposed communication per iteration (s) of each device of an XSpace trace, and their mean.

    Each device's spans (:func:`spans_from_xspace`) go through
    :func:`exposed_communication` on that device's own timeline; ``comm``, ``compute``,
    ``overlapped`` and ``exposed`` are then the means over the devices (a process driving
    several devices reports them all; on one device the mean is that device),
    ``hidden_share`` = sum of overlapped / sum of comm.

    Returns:
        ``{"comm", "compute", "overlapped", "exposed", "hidden_share", "rule", "devices",
        "n_comm_spans", "comm_ops", "per_device": {device: {...}}, "reason": None}``; where the
        trace has no device ops or no collective ops, every number is None and ``reason``
        says which.

    Raises:
        ValueError: ``iterations < 1``.
    """
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")
    spans, rule = spans_from_xspace(planes, since_ns)
    out: dict[str, Any] = {"comm": None, "compute": None, "overlapped": None, "exposed": None,
                           "hidden_share": None, "rule": rule, "devices": len(spans),
                           "n_comm_spans": sum(len(d["comm"]) for d in spans.values()),
                           "comm_ops": sorted({o for d in spans.values() for o in d["comm_ops"]}),
                           "per_device": {}, "reason": None}
    if not spans:
        out["reason"] = ("the trace has no device op events (no GPU stream kernels, no XLA:CPU "
                         "thunks with an hlo_op stat)")
        return out
    if not out["n_comm_spans"]:
        out["reason"] = (f"no collective ops (all-reduce, reduce-scatter, all-gather, NCCL "
                         f"kernels) among the device ops of {len(spans)} device(s)")
        return out
    per = {dev: exposed_communication(d["comm"], d["compute"], iterations)
           for dev, d in sorted(spans.items())}
    n = len(per)
    for k in ("comm", "compute", "overlapped", "exposed"):
        out[k] = math.fsum(v[k] for v in per.values()) / n
    out["hidden_share"] = out["overlapped"] / out["comm"] if out["comm"] > 0 else 1.0
    for dev, v in per.items():
        v["n_comm_spans"] = len(spans[dev]["comm"])
    out["per_device"] = per
    return out


def combine_rank_comm(per_rank: Sequence[Mapping[str, Any] | None],
                      measured_step_s: float | None = None) -> dict[str, Any] | None:
    """One data-parallel result's exposed communication from every process's comm profile.

    A collective kernel starts when its own rank launches it and ends when every rank has
    contributed, so on a rank that reaches the collective first its time includes waiting for
    the others: skew (host jitter, a slower host thread), not communication. The device that
    waits least shows the communication the step really pays for, so the headline
    ``exposed`` is the **minimum** over all devices (every rank; within a process driving
    several devices, each of its ``per_device`` entries); ``exposed_mean`` and
    ``exposed_max`` keep the rest (max - min is the waiting on skew). On the H200 pair a
    rank-0-only figure read 16.7 ms/iteration exposed for googlenet fp32 whose step grew by
    1.5 ms over one GPU: the profiled iterations ran 1.6x slower than measured ones and the
    ranks waited on each other.

    Args:
        per_rank: each process's profile (``exposed_communication`` output plus the adapter's
            fields, or :func:`exposed_from_xspace` output with ``per_device``), rank order;
            None or a profile with ``exposed`` None for a rank without one.
        measured_step_s: the measured median step time (s); with it and a profile's
            ``profiled_wall_s_per_iter``, ``profiled_slowdown`` = profiled wall per iteration /
            measured step (how much the profiler itself slowed the iterations it saw).

    Returns:
        Rank 0's profile (or the first rank's with numbers) updated with ``exposed`` (min),
        ``exposed_mean``, ``exposed_max``, ``exposed_per_device`` (``{"rank0": s, ...}`` or
        ``{"rank0:/device:GPU:1": s, ...}``), ``headline`` (how ``exposed`` was chosen) and
        ``profiled_slowdown`` (or None); None when no rank has a profile. Profiles without
        numbers are returned unchanged (their ``reason`` says why).
    """
    present = [(r, c) for r, c in enumerate(per_rank) if c]
    if not present:
        return None
    with_numbers = [(r, c) for r, c in present if c.get("exposed") is not None]
    if not with_numbers:
        return dict(present[0][1])
    per_dev: dict[str, float] = {}
    for r, c in with_numbers:
        devs = c.get("per_device") or {}
        if devs and all(v.get("exposed") is not None for v in devs.values()):
            for d, v in devs.items():
                per_dev[f"rank{r}:{d}"] = float(v["exposed"])
        else:
            per_dev[f"rank{r}"] = float(c["exposed"])
    vals = list(per_dev.values())
    out = dict(with_numbers[0][1])
    out.update(exposed=min(vals), exposed_mean=math.fsum(vals) / len(vals),
               exposed_max=max(vals), exposed_per_device=per_dev,
               headline="min over devices (the device that waits least for the others)")
    wall = out.get("profiled_wall_s_per_iter")
    out["profiled_slowdown"] = (wall / measured_step_s
                                if wall and measured_step_s and measured_step_s > 0 else None)
    return out
