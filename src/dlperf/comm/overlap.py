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

Times in the trace are microseconds; the functions here return seconds. Pure: no framework.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["union", "length", "overlap_length", "exposed_communication",
           "spans_from_chrome_trace", "COMM_KERNEL", "COMM_ANNOTATION"]

Span = tuple[float, float]

#: NCCL kernels (``ncclDevKernel_AllReduce_Sum_f32_RING_LL``, ``ncclKernel_...``).
COMM_KERNEL = re.compile(r"nccl", re.IGNORECASE)
#: gloo's per-collective annotations (``gloo:all_reduce``, ``gloo:broadcast``).
COMM_ANNOTATION = re.compile(r"^gloo:", re.IGNORECASE)


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
