"""Per-bucket gradient-ready time and all-reduce start/end of a data-parallel run, from one
rank's kept timeline (``--timeline``, :mod:`dlperf.measure.breakdown.timeline`) and that rank's
bucket layout (the record's ``dist.runtime.buckets``: DDP's buckets in reduction order).

Pure functions over decoded timeline ops (no framework import). What the performance model's
wait-free-backprop recursion reads (Shi & Chu 2017, "Performance modeling and evaluation of
distributed deep learning frameworks on GPUs", WFBP: ``s_i = max(r_i, s_{i-1} + c_{i-1})``):

* ``ready_ns`` (r_i): when bucket i's gradients were ready;
* ``start_ns``/``end_ns`` (s_i, s_i + c_i): its all-reduce on the wire;
* ``t_b_start_ns``: the start of backward computation (its first non-communication op), so
  that a ready time is also a fraction of the backward span;
* ``t_b_end_ns``: the end of backward computation, so that the exposed tail is
  ``last all-reduce end - t_b_end``.

Matching is by order: the PyTorch DDP reducer launches bucket i's all-reduce when the bucket's
last gradient is ready and, by construction, in bucket order (``Reducer::mark_bucket_ready``
launches buckets only in index order), so the k-th all-reduce of an iteration is bucket k. An
iteration whose count of all-reduces differs from the bucket count is not matched; its
``reason`` says why.

Where the spans come from (what the trace holds):

* GPU (NCCL): the all-reduce kernels (a kernel named ``nccl...AllReduce...``): start/end on the
  device; ready = the host launch call's start (``ready_source = "kernel_launch"``: DDP enqueues
  right after the bucket's last gradient, plus the copy into the bucket).
* CPU (gloo): the collective's ``gloo:all_reduce`` span on gloo's worker thread (timeline kind
  ``collective``): start/end; ready = the start of the ``c10d::allreduce_`` call on the
  training thread (``ready_source = "allreduce_enqueue"``). A timeline without collective spans
  (recorded before they were kept) is not matched.

All times are integer nanoseconds from the host start of the op's traced iteration (the
timeline's clock).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from dlperf.measure.breakdown.nccl import bucket_algorithms

__all__ = ["match_buckets", "summarize_buckets", "READY_SOURCES"]

#: A device kernel of an all-reduce (NCCL names them ``ncclDevKernel_AllReduce_...`` /
#: ``ncclKernel_AllReduce_...``).
_KERNEL_RX = re.compile(r"nccl.*all_?reduce", re.IGNORECASE)
#: A host collective span (record_function of the process-group backend, e.g.
#: ``gloo:all_reduce``, ``nccl:all_reduce``).
_SPAN_RX = re.compile(r"^(gloo|nccl|ucc|mpi):all_?reduce", re.IGNORECASE)
#: The process group's all-reduce call on the training thread (the enqueue).
_ENQUEUE_OPS = ("c10d::allreduce_",)
#: How ``ready_ns`` was obtained.
READY_SOURCES = {"kernel_launch": "host launch call of the all-reduce kernel (DDP launches it "
                                  "when the bucket's last gradient is ready)",
                 "allreduce_enqueue": "start of the process group's all-reduce call on the "
                                      "training thread (DDP calls it when the bucket's last "
                                      "gradient is ready)"}


def _is_kernel_allreduce(o: Mapping[str, Any]) -> bool:
    return o.get("kind") == "kernel" and bool(_KERNEL_RX.search(o.get("name") or ""))


def _is_span_allreduce(o: Mapping[str, Any]) -> bool:
    return o.get("kind") == "collective" and bool(_SPAN_RX.match(o.get("name") or ""))


def _enqueues(step_ops: Sequence[Mapping[str, Any]]) -> list[int]:
    """Start (ns) of each all-reduce call on the training thread: contiguous self-time slices
    of one ``c10d::allreduce_`` call count once (the timeline keeps self-time slices)."""
    out: list[int] = []
    prev_in = False
    for o in step_ops:
        if o.get("kind") == "collective":
            continue
        inside = (o.get("op") in _ENQUEUE_OPS) or (o.get("name") in _ENQUEUE_OPS)
        if inside and not prev_in:
            out.append(int(o["start_ns"]))
        prev_in = inside
    return out


def _backward_ops(step_ops: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The backward ops (phase ``t_b``) that are not communication."""
    return [o for o in step_ops
            if o.get("phase") == "t_b" and o.get("kind") != "collective"
            and o.get("op_class") != "communication"
            and not _is_kernel_allreduce(o) and o.get("op") not in _ENQUEUE_OPS]


def _backward_span(step_ops: Sequence[Mapping[str, Any]]) -> tuple[int | None, int | None]:
    """Start of the first and end of the last backward op that is not communication (ns),
    ``(None, None)`` if none."""
    bw = _backward_ops(step_ops)
    if not bw:
        return None, None
    return (min(int(o["start_ns"]) for o in bw),
            max(int(o["start_ns"]) + int(o["dur_ns"] or 0) for o in bw))


def match_buckets(ops: Sequence[Mapping[str, Any]], buckets: Sequence[Mapping[str, Any]],
                  n_steps: int | None = None) -> list[dict[str, Any]]:
    """Per traced iteration, DDP's buckets with their all-reduce and ready times.

    Args:
        ops: one rank's decoded timeline ops (:func:`dlperf.measure.breakdown.timeline.decode`:
            dicts with ``step``, ``kind``, ``name``, ``op``, ``phase``, ``op_class``,
            ``start_ns``, ``dur_ns``, ``launch_start_ns``); ops of no iteration are ignored.
        buckets: that rank's buckets in reduction order (``dist.runtime.buckets``: dicts with
            ``index``, ``bytes``, ``params``).
        n_steps: traced iterations (default: 1 + the largest ``step`` in ``ops``).

    Returns:
        One dict per iteration ``{"step", "matched", "t_b_start_ns", "t_b_end_ns", "source",
        "ready_source", "buckets", "reason"}``; ``buckets`` (when matched) is one
        ``{"index", "bytes", "params", "ready_ns", "start_ns", "end_ns", "algorithm",
        "protocol", "nccl_kernel"}`` per bucket in reduction order (ns from the iteration's
        start; ``ready_ns`` None where not observable; ``algorithm``/``protocol`` what the
        NCCL kernel's name determines, :func:`dlperf.measure.breakdown.nccl.parse_kernel`,
        None where it does not or for a gloo span; ``nccl_kernel`` the kernel's name);
        ``reason`` says why an iteration was not matched (``buckets`` then []).

    Raises:
        ValueError: ``buckets`` is empty (nothing to match).
    """
    if not buckets:
        raise ValueError("no DDP buckets to match: dist.runtime has no 'buckets' (a run "
                         "without DistributedDataParallel, or its layout was not recorded)")
    if n_steps is None:
        n_steps = 1 + max((o["step"] for o in ops if o.get("step") is not None), default=-1)
    by_step: dict[int, list[Mapping[str, Any]]] = {k: [] for k in range(n_steps)}
    for o in ops:
        k = o.get("step")
        if k is not None and k in by_step:
            by_step[k].append(o)
    out = []
    for k in range(n_steps):
        step_ops = sorted(by_step[k], key=lambda o: o["start_ns"])
        out.append(_match_step(k, step_ops, buckets))
    return out


def _match_step(k: int, step_ops: list[Mapping[str, Any]],
                buckets: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One iteration of :func:`match_buckets`."""
    t_b_start, t_b_end = _backward_span(step_ops)
    row: dict[str, Any] = {"step": k, "matched": False, "t_b_end_ns": t_b_end,
                           "t_b_start_ns": t_b_start,
                           "source": None, "ready_source": None, "buckets": [], "reason": None}
    kernels = [o for o in step_ops if _is_kernel_allreduce(o)]
    spans = [o for o in step_ops if _is_span_allreduce(o)]
    if kernels:
        coll, row["source"] = kernels, "all-reduce kernels (device time)"
        ready = [o.get("launch_start_ns") for o in kernels]
        row["ready_source"] = "kernel_launch" if any(r is not None for r in ready) else None
    elif spans:
        coll, row["source"] = spans, "collective spans of the process group's worker thread"
        enq = _enqueues(step_ops)
        ready = list(enq) if len(enq) == len(spans) else [None] * len(spans)
        row["ready_source"] = "allreduce_enqueue" if len(enq) == len(spans) else None
    else:
        row["reason"] = ("no all-reduce in this iteration's timeline (no NCCL all-reduce kernel "
                         "and no gloo/nccl all_reduce span; a timeline recorded before "
                         "collective spans were kept holds neither)")
        return row
    if len(coll) != len(buckets):
        row["reason"] = (f"{len(coll)} all-reduces in the iteration but {len(buckets)} DDP "
                         f"buckets: matching by order needs one per bucket (other collectives "
                         f"in the step, or a bucket layout that changed)")
        return row
    names = [o.get("name") if o.get("kind") == "kernel" else None for o in coll]
    for b, o, r, a in zip(buckets, coll, ready, bucket_algorithms(names)):
        start = int(o["start_ns"])
        row["buckets"].append({"index": b.get("index"), "bytes": b.get("bytes"),
                               "params": b.get("params"),
                               "ready_ns": int(r) if r is not None else None,
                               "start_ns": start, "end_ns": start + int(o["dur_ns"] or 0),
                               **a})
    row["matched"] = True
    return row


def _median(xs: Sequence[int | None]) -> int | None:
    have = [x for x in xs if x is not None]
    return int(round(statistics.median(have))) if have else None


def _agreed(xs: Sequence[Any]) -> Any:
    """The one value every entry of ``xs`` has, else None (none, or they differ)."""
    return xs[0] if xs and all(x == xs[0] for x in xs) else None


def summarize_buckets(per_step: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The small record of one rank (``dist.buckets_timeline.per_rank[r]``) from
    :func:`match_buckets`'s output: medians over the matched iterations.

    Returns ``{"n_iterations", "matched_iterations", "n_buckets", "source", "ready_source",
    "t_b_start_ns", "t_b_end_ns", "last_end_ns", "exposed_tail_ns", "buckets", "reasons",
    "nccl_kernels"}``;
    ``buckets`` is one ``{"index", "bytes", "n_params", "ready_ns", "start_ns", "end_ns",
    "dur_ns", "algorithm", "protocol"}`` per bucket (times the median over matched
    iterations, ns from the iteration start; ``algorithm``/``protocol`` where every matched
    iteration's kernel name gives the same one, else None); ``nccl_kernels`` the distinct
    all-reduce kernel names seen;
    ``exposed_tail_ns`` is the median over matched iterations of ``max(0, last all-reduce end
    - t_b_end)`` (the communication left after backward, WFBP's exposed part); ``reasons``
    the distinct reasons of unmatched iterations.
    """
    ok = [s for s in per_step if s.get("matched")]
    reasons = sorted({s["reason"] for s in per_step if s.get("reason")})
    out: dict[str, Any] = {"n_iterations": len(per_step), "matched_iterations": len(ok),
                           "n_buckets": len(ok[0]["buckets"]) if ok else None,
                           "source": ok[0]["source"] if ok else None,
                           "ready_source": ok[0]["ready_source"] if ok else None,
                           "t_b_start_ns": _median([s.get("t_b_start_ns") for s in ok]),
                           "t_b_end_ns": _median([s.get("t_b_end_ns") for s in ok]),
                           "last_end_ns": None, "exposed_tail_ns": None, "buckets": [],
                           "reasons": reasons,
                           "nccl_kernels": sorted({b["nccl_kernel"] for s in ok
                                                   for b in s["buckets"]
                                                   if b.get("nccl_kernel")})}
    if not ok:
        return out
    n = len(ok[0]["buckets"])
    for i in range(n):
        col = [s["buckets"][i] for s in ok]
        params = col[0].get("params")
        out["buckets"].append({
            "index": col[0].get("index"), "bytes": col[0].get("bytes"),
            "n_params": len(params) if isinstance(params, list) else None,
            "ready_ns": _median([c.get("ready_ns") for c in col]),
            "start_ns": _median([c["start_ns"] for c in col]),
            "end_ns": _median([c["end_ns"] for c in col]),
            "dur_ns": _median([c["end_ns"] - c["start_ns"] for c in col]),
            "algorithm": _agreed([c.get("algorithm") for c in col]),
            "protocol": _agreed([c.get("protocol") for c in col])})
    lasts = [max(b["end_ns"] for b in s["buckets"]) for s in ok]
    out["last_end_ns"] = _median(lasts)
    tails = [max(0, last - s["t_b_end_ns"]) for s, last in zip(ok, lasts)
             if s.get("t_b_end_ns") is not None]
    out["exposed_tail_ns"] = _median(tails)
    return out
