"""A framework-free model of a profiler trace, and what dlperf reads from it.

The trace parsers (:mod:`~dlperf.measure.breakdown.torch_trace`, :mod:`~dlperf.measure.breakdown.xspace`) turn
each framework's trace of a few training iterations into a :class:`TraceData`: the device ops
(CUDA kernels and copies; on a CPU device, the time the host spends inside ops) with the names
the op classifier needs, and the host interval of each traced step. :func:`analyse` then
computes, per iteration:

* ``busy_s`` and ``busy_fraction``: the union of the op intervals, and its share of the span
  from the first op's start to the last op's end (on a GPU: the union of kernel intervals over
  the device's wall time; docs/measurement.md's "GPU busy" after Dai et al. 2022). The span starts
  at the first op, so the host's lead-in to the first traced step is not counted as idle.
* ``dispatch_s``: the host time of each traced step call (the CPU time spent issuing it; on a
  CPU device the step runs synchronously, so this is the whole step);
* device time per op class (:mod:`~dlperf.measure.breakdown.opclass`) and per phase (where the trace
  tells forward from backward from update), and the top ops.

Time is attributed by a sweep over the op intervals: each elementary time segment is split
equally among the ops active in it, so overlapping ops (several streams or threads) are not
counted twice and the class times add up to ``busy_s`` exactly.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dlperf.measure.breakdown.opclass import OP_CLASSES, classify

#: Phases a trace can attribute device time to (forward, backward, update) plus the copy.
TRACE_PHASES = ("t_h2d", "t_f", "t_b", "t_u")
#: Ops listed in the ``top_ops`` table.
TOP_OPS = 15
#: Names kept per op class in ``top_by_class`` (``other``: :data:`TOP_OTHER`), with what the
#: classifier read, so that a stored result can be checked, and re-classified, without its
#: trace (which is not kept unless --trace asks for it).
TOP_PER_CLASS = 5
TOP_OTHER = 20
#: Classifier inputs kept per name: at most this many strings of at most 200 characters.
_KEEP_INPUTS = 8


@dataclass(frozen=True)
class TraceOp:
    """One interval of device (or, on a CPU device, host-op) time. Times in seconds.

    Attributes:
        name: display name (kernel, HLO instruction or op name).
        start_s, end_s: interval on the trace's clock.
        ops, layers, context, phase: what :func:`dlperf.measure.breakdown.opclass.classify` reads.
        step: index of the traced step it belongs to, None if unknown.
        cls: the op class, if the parser already knows it (else classified on demand).
        uid: identity of the call this interval belongs to (several self-time slices of one
            host op share it); None: one interval is one call.
        kind: what the interval is: ``kernel``, ``memcpy``, ``memset`` (device activity) or
            ``host_op`` (host self time on a CPU device); None: not told by the parser
            (a device op counts as a kernel).
        extra: what else the trace said of it, for the kept timeline
            (:mod:`dlperf.measure.breakdown.timeline`): ``stream``, ``device``, ``grid``,
            ``block``, ``registers``, ``shared_memory`` (bytes per block), ``bytes`` (copies),
            ``launch_start_s``/``launch_end_s`` (the host launch call), ``op`` (launching
            operator), ``op_flops``/``op_bytes`` (that operator's FLOPs and input bytes);
            keys absent where the profiler does not say.
    """

    name: str
    start_s: float
    end_s: float
    ops: tuple[str, ...] = ()
    layers: tuple[str, ...] = ()
    context: tuple[str, ...] = ()
    phase: str | None = None
    step: int | None = None
    cls: str | None = None
    uid: int | None = None
    kind: str | None = None
    extra: dict[str, Any] | None = field(default=None, compare=False, hash=False)

    @property
    def op_class(self) -> str:
        """The op class of this interval."""
        return self.cls or classify(self.ops, self.layers, self.context, self.phase)


@dataclass
class TraceData:
    """A parsed trace of ``len(steps)`` training iterations.

    Attributes:
        ops: device ops (or host-op slices on a CPU device).
        steps: host ``(start_s, end_s)`` of each traced step call.
        device_kind: ``"gpu"`` (ops are kernels/copies) or ``"cpu"`` (ops are host-op time).
        source: what produced it, e.g. ``"torch.profiler (CUPTI kernels)"``.
        phase_source: how ``TraceOp.phase`` was decided (None if the trace has no phases).
        notes: caveats to show with the numbers.
        collectives: host spans of collectives (e.g. ``gloo:all_reduce`` on the process
            group's worker thread; ``kind="collective"``), kept for the timeline only:
            :func:`analyse` does not count them (their time is the wire's, not an op's).
    """

    ops: list[TraceOp]
    steps: list[tuple[float, float]]
    device_kind: str
    source: str
    phase_source: str | None = None
    notes: list[str] = field(default_factory=list)
    collectives: list[TraceOp] = field(default_factory=list)


def union_length(intervals: Sequence[tuple[float, float]]) -> float:
    """Total length covered by ``intervals`` (overlaps counted once), in their unit."""
    total = 0.0
    cur: tuple[float, float] | None = None  # the merged interval being extended
    for s, e in sorted(intervals):
        if cur is None or s > cur[1]:
            if cur is not None:
                total += cur[1] - cur[0]
            cur = (s, e)
        elif e > cur[1]:
            cur = (cur[0], e)
    if cur is not None:
        total += cur[1] - cur[0]
    return total


def attribute(ops: Sequence[TraceOp]) -> list[float]:
    """Time attributed to each op: every elementary segment of the timeline is split equally
    among the ops active in it. ``sum(attribute(ops)) == union_length(intervals)``."""
    events: list[tuple[float, int, int]] = []
    for i, op in enumerate(ops):
        if op.end_s > op.start_s:
            events.append((op.start_s, 1, i))
            events.append((op.end_s, 0, i))  # ends sort before starts at the same time
    events.sort()
    share = [0.0] * len(ops)
    active: set[int] = set()
    last_t = None
    for t, kind, i in events:
        if active and last_t is not None and t > last_t:
            piece = (t - last_t) / len(active)
            for j in active:
                share[j] += piece
        last_t = t
        if kind:
            active.add(i)
        else:
            active.discard(i)
    return share


def time_stats(xs: Sequence[float]) -> dict[str, float] | None:
    """``{"median", "mean", "min", "max"}`` of ``xs`` (seconds), or None when empty."""
    if not xs:
        return None
    s = sorted(xs)
    n = len(s)
    med = s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])
    return {"median": med, "mean": math.fsum(s) / n, "min": s[0], "max": s[-1]}


#: Device-op kinds that are copies (host<->device, device<->device) or fills.
COPY_KINDS = ("memcpy", "memset")


def launches_per_iter(trace: TraceData) -> dict[str, float | None]:
    """Device ops per traced iteration: ``kernels_per_iter`` (compute kernels) and
    ``copies_per_iter`` (memcpy and memset), counting the ops assigned to a traced step (the
    host launches a step issues, the quantity a per-launch host cost multiplies: Dai et al.
    2022, sec. 4; docs/perfmodel.md). None for a CPU device, whose ops are host-op slices."""
    n = len(trace.steps)
    if trace.device_kind != "gpu" or n == 0:
        return {"kernels_per_iter": None, "copies_per_iter": None}
    k = c = 0
    for op in trace.ops:
        if op.step is None or not 0 <= op.step < n:
            continue
        if op.kind in COPY_KINDS:
            c += 1
        else:
            k += 1
    return {"kernels_per_iter": k / n, "copies_per_iter": c / n}


def analyse(trace: TraceData) -> dict[str, Any]:
    """Busy fraction, dispatch time, time per op class and per phase, per iteration.

    Returns a JSON-able dict (seconds per iteration unless named otherwise):
    ``n_steps``, ``span_s`` (first op start to last op end), ``step_wall_s`` (span / steps),
    ``busy_s``, ``idle_s``, ``busy_fraction``, ``dispatch_s`` (stats over the traced steps),
    ``kernels_per_iter`` and ``copies_per_iter`` (:func:`launches_per_iter`),
    ``op_classes`` ({class: s}, every class, adding up to ``busy_s``), ``phases`` ({phase: s}
    for attributed phases, plus ``unattributed``) and ``phase_samples`` ({phase: [s per step]})
    where steps are known, ``top_ops`` (name, class, s per iteration, calls per iteration),
    and ``top_by_class`` ({class: the :data:`TOP_PER_CLASS` names with the most time in it,
    :data:`TOP_OTHER` for ``other``; each name, s, calls, and the classifier's inputs ``ops``,
    ``layers``, ``context``, ``phase`` of its longest interval}).

    Raises:
        ValueError: the trace has no steps.
    """
    n = len(trace.steps)
    if n == 0:
        raise ValueError("the trace has no traced steps (no step annotations found)")
    ops = [op for op in trace.ops if op.end_s > op.start_s]
    disp = [e - s for s, e in trace.steps]
    out: dict[str, Any] = {
        "n_steps": n, "device_kind": trace.device_kind, "source": trace.source,
        "phase_source": trace.phase_source, "notes": list(trace.notes),
        "dispatch_s": time_stats(disp), "dispatch_samples": disp,
        **launches_per_iter(trace),
    }
    if not ops:
        out.update(span_s=0.0, step_wall_s=None, busy_s=0.0, idle_s=None, busy_fraction=None,
                   op_classes={c: 0.0 for c in OP_CLASSES}, phases={}, phase_samples={},
                   top_ops=[], top_by_class={})
        out["notes"].append("the trace holds no device ops")
        return out
    span = max(op.end_s for op in ops) - min(op.start_s for op in ops)
    share = attribute(ops)
    busy = math.fsum(share)
    classes = {c: 0.0 for c in OP_CLASSES}
    phases: dict[str, float] = defaultdict(float)
    by_step: dict[str, list[float]] = {}
    names: dict[str, list[Any]] = {}
    by_class: dict[tuple[str, str], list[Any]] = {}
    for op, t in zip(ops, share):
        cls = op.op_class
        classes[cls] = classes.get(cls, 0.0) + t
        ph = op.phase if op.phase in TRACE_PHASES else "unattributed"
        phases[ph] += t
        if op.step is not None and 0 <= op.step < n:
            by_step.setdefault(ph, [0.0] * n)[op.step] += t
        rec = names.setdefault(op.name, [cls, 0.0, set()])
        rec[1] += t
        rec[2].add(op.uid if op.uid is not None else ("i", id(op)))
        crec = by_class.setdefault((cls, op.name), [0.0, set(), op])
        crec[0] += t
        crec[1].add(op.uid if op.uid is not None else ("i", id(op)))
        if op.end_s - op.start_s > crec[2].end_s - crec[2].start_s:
            crec[2] = op
    top = sorted(names.items(), key=lambda kv: -kv[1][1])[:TOP_OPS]
    top_by_class: dict[str, list[dict[str, Any]]] = {}
    for (cls, name), (t, calls, op) in sorted(by_class.items(), key=lambda kv: -kv[1][0]):
        kept = top_by_class.setdefault(cls, [])
        if len(kept) < (TOP_OTHER if cls == "other" else TOP_PER_CLASS):
            kept.append({"name": name[:200], "s": t / n, "calls": len(calls) / n,
                         "ops": [x[:200] for x in op.ops[:_KEEP_INPUTS]],
                         "layers": [x[:200] for x in op.layers[:_KEEP_INPUTS]],
                         "context": [x[:200] for x in op.context[:_KEEP_INPUTS]],
                         "phase": op.phase})
    out.update({
        "span_s": span,
        "step_wall_s": span / n,
        "busy_s": busy / n,
        "idle_s": (span - busy) / n,
        "busy_fraction": busy / span if span > 0 else None,
        "op_classes": {c: t / n for c, t in classes.items()},
        "phases": {p: t / n for p, t in phases.items()},
        "phase_samples": by_step,
        "top_ops": [{"name": k[:200], "class": v[0], "s": v[1] / n, "calls": len(v[2]) / n}
                    for k, v in top],
        "top_by_class": top_by_class,
    })
    return out
