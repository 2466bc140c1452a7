"""Timeline replay: one traced iteration becomes a host thread issuing launches and device
streams running kernels, and the step time is what that queue gives in steady state.

A stored timeline (``--timeline``; :mod:`dlperf.results.timelines`) holds every device op of a
few profiled iterations with its stream, start, duration, launch geometry and, for PyTorch, the
host interval of its launch call. :func:`step_trace` turns one traced iteration into a
:class:`StepTrace`:

* **host**: the launches in host order, each with the host work before it (the gap since the
  previous launch call ended: Python, the dispatcher, autograd) and the launch call itself,
  plus the work after the last launch. A profiled iteration's host runs slower than an
  unprofiled one (the profiler's callbacks); every traced result also stores an *untraced*
  host dispatch probe (``host.dispatch_s``: the step call timed from an idle device), so the
  host intervals are scaled by ``untraced / traced`` (:func:`deinflate`). A launch call that
  blocks (the launch queue full behind a device-bound step) is waiting, not work: its time is
  replaced by the step's median launch call (:data:`BLOCKED_CALL_S`). XLA programs have no
  launch spans in the trace: their kernels are folded into the launches an unprofiled run
  makes (:func:`xla_launch_groups`, the command-buffer rules of
  :mod:`dlperf.perfmodel.hostcount`) and the untraced host time is spread evenly over those.
* **device**: each op runs on its stream (lane) in the traced order, no earlier than its
  launch returned, after the previous op of its lane and the device's gap between queued ops
  (:func:`queue_gap`), and after the ops of the other lanes that had ended when it started in
  the trace (the trace's order across streams, :func:`_cross_lane_deps`; Lumos, Liang et
  al. 2025, recovers cross-stream dependencies from traces).

:func:`simulate` runs the iteration :data:`REPEATS` times back to back without a host sync
(dlperf's measured loop never syncs inside the segment, docs/measurement.md rule 2) and
returns the steady-state period: host-bound and device-bound come out of the queue, not out of
a fitted corner. Kernel durations are used as traced: on the H200 the traced per-iteration
kernel sum equals the untraced step time of device-bound points within 0.1% (gpt2_small fp32
b=64: 1,193.6 vs 1,192.1 ms; fcn5 fp32 b=4096: 49.66 vs 49.67 ms).

Transforms (another GPU, precision, batch size) are functions ``StepTrace -> StepTrace`` in
:mod:`dlperf.perfmodel.transforms`; this module neither imports a framework nor keys on one:
what differs between frameworks is read off the timeline (launch spans, the XSpace source).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from dlperf.perfmodel import equations as eq

#: Iterations replayed back to back; the period is read between the last two after
#: :data:`WARM` warm iterations (the first fills the pipeline).
REPEATS = 4
WARM = 2
#: Traced launch calls longer than this are taken as blocked (the launch queue full, or a
#: synchronising call); their host work is the step's median launch call. Unblocked launch
#: calls read 3-50 us under the profiler on the H200 (calibration2.db); a blocked one reads
#: 0.1-100 ms.
BLOCKED_CALL_S = 200e-6
#: Where a result stores no untraced host probe, the traced host is divided by this: the
#: median traced / untraced host dispatch ratio over the development points of
#: calibration2.db (docs/replay.md, "Host de-inflation"; the issue's 1.72).
TRACED_HOST_INFLATION = 1.72
#: An op counts as queued behind its lane's previous op (for :func:`queue_gap`) when its
#: launch call returned at least this long before that op ended.
QUEUED_MARGIN_S = 5e-6
#: The queue gap of a trace with fewer than :data:`QUEUE_GAP_MIN_OPS` queued ops to read it
#: from: the median of the 48 development torch eager timelines' own gaps in calibration2.db
#: (1.25 us, range 0.99-3.55; torch.compile 1.13; benchmarks/replay_kernels.py, part 7).
QUEUE_GAP_S = 1.25e-6
QUEUE_GAP_MIN_OPS = 8
#: Device ops that take no device time of their own in a replay (the profiler's markers).
_SKIP_KINDS = ("collective", "host_op")


@dataclass(frozen=True)
class DeviceOp:
    """One device op of a traced iteration.

    Attributes:
        lane: the stream it ran on (an int; 0 where the trace names none).
        dur_s: its duration (s).
        kind: ``kernel``, ``memcpy``, ``memset``.
        name, op_class, op, phase: as stored (kernel name, op class, launching operator or HLO
            op, ``t_f``/``t_b``/``t_u``).
        launch: index of the host launch that issues it (:attr:`StepTrace.launches`).
        after: indices of ops on other lanes it waits for (inferred cross-stream events).
        grid, block: launch geometry ``(x, y, z)``, None where not recorded (XLA traces).
        registers: registers per thread; shared_memory: bytes of shared memory per block.
        flops, bytes: its share of the launching op's FLOPs and bytes (``op_flops``/
            ``op_bytes``, split over the op's kernels by duration: :func:`kernel_costs`), or
            None.
        align: for a kernel of a matmul operator whose trace holds its exact FLOPs and bytes,
            the GEMM's alignment in elements (8, 4, 2 or 1:
            :func:`dlperf.perfmodel.gemmshape.alignment`), else None.
    """

    lane: int
    dur_s: float
    kind: str
    name: str
    op_class: str | None
    op: str | None
    phase: str | None
    launch: int
    after: tuple[int, ...] = ()
    grid: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    registers: int | None = None
    shared_memory: int | None = None
    flops: float | None = None
    bytes: float | None = None
    align: int | None = None

    @property
    def blocks(self) -> int | None:
        """Thread blocks of the launch (grid x*y*z), None without a grid."""
        return _volume(self.grid)

    @property
    def threads_per_block(self) -> int | None:
        """Threads per block (block x*y*z), None without a block."""
        return _volume(self.block)


def _volume(xyz: tuple[int, int, int] | None) -> int | None:
    """``x * y * z`` of a launch geometry, None where it is not recorded."""
    return xyz[0] * xyz[1] * xyz[2] if xyz else None


@dataclass(frozen=True)
class HostLaunch:
    """One host launch: ``before_s`` of host work since the previous launch call returned,
    then the launch call of ``call_s`` (s, untraced after :func:`deinflate`)."""

    before_s: float
    call_s: float


@dataclass(frozen=True)
class StepTrace:
    """One iteration as the replay sees it.

    Attributes:
        ops: the device ops (host launch order within a lane is the traced order).
        launches: the host launches, in host order.
        tail_s: host work after the last launch until the step call returns (s).
        gap_s: the device's gap between an op and the next op of its lane already queued
            behind it (s; :func:`queue_gap`), 0 for an XLA program.
        meta: where it came from and what it is (``model``, ``framework``, ``mode``,
            ``precision``, ``batch_size``, ``device_name``, ``source``, ``result_id``,
            ``host_speed_ns``, ``measured_step_s``, ``host_untraced_s``, ``host_traced_s``,
            ``params`` (the model's parameter count), ``train_flops_per_sample`` (its
            analytic training FLOPs of one sample), ``xla``: launches folded from an XLA program) and every transform applied
            (``transforms``: a list of strings).
    """

    ops: tuple[DeviceOp, ...]
    launches: tuple[HostLaunch, ...]
    tail_s: float
    meta: Mapping[str, Any] = field(default_factory=dict)
    gap_s: float = 0.0

    @property
    def host_s(self) -> float:
        """Host work per iteration (s): every launch's work and call, and the tail."""
        return sum(h.before_s + h.call_s for h in self.launches) + self.tail_s

    @property
    def kernel_s(self) -> float:
        """Device time per iteration summed over ops (s; overlapping lanes counted twice)."""
        return sum(o.dur_s for o in self.ops)

    def with_note(self, note: str, **meta: Any) -> StepTrace:
        """A copy whose ``meta['transforms']`` ends with ``note`` (and ``meta`` updated)."""
        m = dict(self.meta)
        m.update(meta)
        m["transforms"] = [*self.meta.get("transforms", []), note]
        return replace(self, meta=m)


@dataclass(frozen=True)
class ReplayResult:
    """What :func:`simulate` gives (s): the steady-state ``step_s``, the iteration's ``host_s``
    and summed ``device_s``, the device's idle share of the period ``device_idle``, and
    ``bound`` (:func:`dlperf.perfmodel.equations.bound_of` the two)."""

    step_s: float
    host_s: float
    device_s: float
    device_idle: float
    bound: str


def _triple(s: Any) -> tuple[int, int, int] | None:
    """A launch geometry ``"x,y,z"`` (missing parts 1) as integers, None where it is not
    recorded or not positive integers."""
    try:
        parts = [int(x) for x in str(s).split(",")]
    except ValueError:
        return None
    parts = (parts + [1, 1, 1])[:3]
    return (parts[0], parts[1], parts[2]) if all(p > 0 for p in parts) else None


def _num(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if v == v else None


def iterations(tl_meta: Mapping[str, Any], ops: Sequence[Mapping[str, Any]]
               ) -> list[list[Mapping[str, Any]]]:
    """The device ops of each traced iteration, in device start order.

    PyTorch timelines assign each op to the iteration whose host window launched it (its
    ``step``; times relative to that window's start). An XLA program's device runs behind the
    host, so its ops are assigned by position instead: the ops sorted by absolute start, cut
    into ``n_steps`` equal runs (every iteration of one program runs the same ops).

    Raises:
        ValueError: the timeline has no traced iteration.
    """
    steps = tl_meta.get("steps_ns") or []
    dev = [o for o in ops if o.get("kind") not in _SKIP_KINDS and o.get("dur_ns") is not None]
    if not steps:
        raise ValueError("the timeline has no traced iterations (steps_ns is empty)")
    if _is_xla(tl_meta):
        # an op's absolute start: its iteration's window start (the first's where its step
        # is not one of them) plus its start in the window
        window_start: dict[Any, float] = {k: s[0] for k, s in enumerate(steps)}
        dev = sorted(dev, key=lambda o: window_start.get(o.get("step"), steps[0][0])
                     + o["start_ns"])
        n = len(steps)
        size = len(dev) // n
        if size == 0:
            raise ValueError("the timeline has fewer device ops than traced iterations")
        return [dev[i * size:(i + 1) * size] for i in range(n)]
    out: list[list[Mapping[str, Any]]] = [[] for _ in steps]
    for o in dev:
        k = o.get("step")
        if k is not None and 0 <= k < len(steps):
            out[k].append(o)
    return [sorted(s, key=lambda o: o["start_ns"]) for s in out]


def _is_xla(tl_meta: Mapping[str, Any]) -> bool:
    from dlperf.perfmodel.records import XLA_TIMELINE_SOURCE

    return XLA_TIMELINE_SOURCE in str(tl_meta.get("source") or "")


def pick_iteration(its: Sequence[Sequence[Mapping[str, Any]]]) -> int:
    """The traced iteration to replay: of the iterations after the first (the first runs
    right after the profiler starts), the one whose summed device time is the median (the
    lower median for an even count); the first when it is the only one."""
    cand = list(range(1, len(its))) or [0]
    cand = [i for i in cand if its[i]] or [0]
    sums = sorted((sum(o["dur_ns"] for o in its[i]), i) for i in cand)
    return sums[(len(sums) - 1) // 2][1]


def xla_launch_groups(seq: Sequence[Mapping[str, Any]]) -> list[int]:
    """For each op of one XLA iteration (device order), the index of the host launch that
    issues it in an unprofiled run: a convolution custom call is a launch of its own, a run of
    at least ``MIN_GRAPH_SIZE`` other ops between them (and between loop-body boundaries) is
    one command buffer, a shorter run one launch per op (:mod:`dlperf.perfmodel.hostcount`,
    whose :func:`~dlperf.perfmodel.hostcount.launches` counts the same launches)."""
    from dlperf.perfmodel import hostcount as hc

    ids: dict[str, int] = {}
    keys = [ids.setdefault(str(o.get("name")), len(ids)) for o in seq]
    cuts = hc.loop_starts(keys)
    group = [0] * len(seq)
    nxt = 0
    run: list[int] = []

    def flush() -> None:
        nonlocal nxt, run
        if len(run) >= hc.MIN_GRAPH_SIZE:
            for j in run:
                group[j] = nxt
            nxt += 1
        else:
            for j in run:
                group[j] = nxt
                nxt += 1
        run = []

    for i, o in enumerate(seq):
        if i in cuts:
            flush()
        if str(o.get("op") or "").startswith(hc.NOT_CAPTURED):
            flush()
            group[i] = nxt
            nxt += 1
        else:
            run.append(i)
    flush()
    return group


def _cross_lane_deps(seq: Sequence[Mapping[str, Any]], lanes: Sequence[int]
                     ) -> list[tuple[int, ...]]:
    """Inferred waits on other lanes (the trace's order across streams): op ``i`` waits, on
    each other lane, for the op that ended last at or before its traced start.

    A trace does not hold the events one stream waits on; what it shows is which ops of the
    other streams had finished when an op started, and the replay keeps that order: it never
    overlaps two ops the GPU ran one after the other. Waiting only where a start came within
    20 us of another lane's end and neither the op's own lane nor its launch explained it
    overlapped more than the GPU did on the development multi-stream
    points (cuDNN's RNNs on up to 11 streams, fp32 convolutions' helper streams; replay of
    their own trace: lstm fp32 b=128 -9.5% against -1.0%, resnet50 fp32 b=16-128 -1.1 to
    -4.8% against -0.1 to -3.8%, alexnet_cifar fp32 b=1024 -11.7% against -1.6%)."""
    ends: dict[int, list[tuple[float, int]]] = {}  # lane -> (end, index) in start order
    deps: list[tuple[int, ...]] = []
    for i, o in enumerate(seq):
        s, lane = float(o["start_ns"]), lanes[i]
        after = []
        for ln, lst in ends.items():
            if ln == lane:
                continue
            done = [(e, j) for e, j in lst[-4:] if e <= s + 1]
            if done:
                after.append(max(done)[1])
        deps.append(tuple(sorted(after)))
        ends.setdefault(lane, []).append((s + float(o["dur_ns"]), i))
    return deps


def queue_gap(seq: Sequence[Mapping[str, Any]], lanes: Sequence[int],
              ready_ns: Sequence[float | None]) -> float:
    """The device's gap between back-to-back ops of one stream (s): the median of ``start -
    previous end`` over the ops of a traced iteration queued behind their lane's previous op
    (their launch call returned :data:`QUEUED_MARGIN_S` or more before it ended), at least 0;
    :data:`QUEUE_GAP_S` where fewer than :data:`QUEUE_GAP_MIN_OPS` ops were queued.

    A kernel's traced duration leaves out the front end's work between two kernels of a
    stream (the next launch's scheduling, the previous one's drain): on the development torch
    eager timelines of calibration2.db it reads a median 1.54 us over 13,951 queued ops
    (10th-90th percentile 1.0-3.1 us; benchmarks/replay_kernels.py, part 7), and the untraced
    step of device-bound points exceeds their kernel sum by about the
    iteration's gaps (gpt2_small bf16 b=16: 0.90 ms over 0.97 ms of gaps; transformer fp32
    b=64: 0.97 over 0.99; fcn5 fp32 b=1024: 0.078 over 0.070). An XLA program's traced ops
    of one stream overlap their neighbours by a median 0.1 us (their durations hold it)."""
    margin = QUEUED_MARGIN_S * 1e9
    last: dict[int, float] = {}
    gaps: list[float] = []
    for i, o in enumerate(seq):
        lane, s = lanes[i], float(o["start_ns"])
        rdy = ready_ns[i]
        if lane in last and rdy is not None and rdy < last[lane] - margin:
            gaps.append(s - last[lane])
        last[lane] = max(last.get(lane, float("-inf")), s + float(o["dur_ns"]))
    if len(gaps) < QUEUE_GAP_MIN_OPS:
        return QUEUE_GAP_S
    return max(0.0, statistics.median(gaps)) * 1e-9


def kernel_costs(seq: Sequence[Mapping[str, Any]], order: Sequence[int]
                 ) -> tuple[list[float | None], list[float | None]]:
    """Each op's share of its launching operator's FLOPs and bytes (``op_flops``/``op_bytes``,
    which a timeline repeats on every kernel of the operator): the ops that are consecutive
    in ``order`` (host launch order for PyTorch, device order for XLA) with the same operator
    and the same FLOPs and bytes are one call of it, and split them by duration. An
    operator's figures used per kernel would count them once for each of its kernels: an LSTM
    layer's cuDNN call launches hundreds (a GEMM and an element-wise kernel per time step),
    each bounded by the whole layer's bytes. Two identical calls launched back to back are
    taken as one (their figures halved on each kernel). Returns ``(flops, bytes)`` in
    ``seq``'s order, None where the trace holds none."""
    fl: list[float | None] = [_num(o.get("op_flops")) for o in seq]
    by: list[float | None] = [_num(o.get("op_bytes")) for o in seq]
    # a call: a run of ops with the same operator and figures (one op alone keeps its own;
    # figures the trace does not hold stay None)
    for _, call in itertools.groupby(order, key=lambda i: (seq[i].get("op"), fl[i], by[i])):
        run = list(call)
        tot = sum(float(seq[j]["dur_ns"]) for j in run)
        for j in run:
            share = float(seq[j]["dur_ns"]) / tot if tot > 0 else 1.0 / len(run)
            fl[j], by[j] = _part(fl[j], share), _part(by[j], share)
    return fl, by


def _part(x: float | None, share: float) -> float | None:
    """``share`` of a figure, None where the trace holds none."""
    return None if x is None else x * share


def gemm_alignments(seq: Sequence[Mapping[str, Any]], batch: int,
                    precision: str | None = None) -> list[int | None]:
    """For each op of ``seq``, the alignment of its matmul operator's GEMM (op class
    ``matmul`` with exact ``op_flops`` and ``op_bytes``, the operator's totals, which the
    timeline repeats on each of its kernels: :func:`dlperf.perfmodel.gemmshape.alignment` at
    ``batch``, elements of the sizes ``precision`` allows), None for any other op or where
    the figures give no shape."""
    from dlperf.perfmodel.gemmshape import alignment, element_sizes

    elems = element_sizes(precision)
    return [alignment(_num(o.get("op_flops")), _num(o.get("op_bytes")), batch, elems)
            if o.get("op_class") == "matmul" else None for o in seq]


def step_trace(tl_meta: Mapping[str, Any], ops: Sequence[Mapping[str, Any]],
               meta: Mapping[str, Any] | None = None, iteration: int | None = None) -> StepTrace:
    """One traced iteration of a decoded timeline as a :class:`StepTrace`, host times *as
    traced* (:func:`deinflate` scales them to an untraced host).

    Args:
        tl_meta: the timeline's description (``steps_ns``, ``source``; the stored
            ``timeline`` part of the record without ``data``).
        ops: :func:`dlperf.results.timelines.decode` of it.
        meta: copied into :attr:`StepTrace.meta`.
        iteration: which traced iteration (default :func:`pick_iteration`).

    Raises:
        ValueError: no traced iteration, or the chosen one has no device op.
    """
    its = iterations(tl_meta, ops)
    k = pick_iteration(its) if iteration is None else iteration
    seq = its[k]
    if not seq:
        raise ValueError(f"traced iteration {k} has no device op")
    steps = tl_meta["steps_ns"]
    window_ns = steps[k][1] - steps[k][0]
    xla = _is_xla(tl_meta)
    lanes = [int(o["stream"]) if o.get("stream") is not None else 0 for o in seq]
    host = xla_host if xla else launch_host
    launches, launch_of, tail, gap, order = host(seq, lanes, window_ns)
    deps = _cross_lane_deps(seq, lanes)
    flops, nbytes = kernel_costs(seq, order)
    align = gemm_alignments(seq, int((meta or {}).get("batch_size") or 0),
                            (meta or {}).get("precision"))
    dops = tuple(
        DeviceOp(lane=lanes[i], dur_s=o["dur_ns"] * 1e-9, kind=str(o.get("kind") or "kernel"),
                 name=str(o.get("name") or ""), op_class=o.get("op_class"), op=o.get("op"),
                 phase=o.get("phase"), launch=launch_of[i], after=deps[i],
                 grid=_triple(o.get("grid")), block=_triple(o.get("block")),
                 registers=o.get("registers"), shared_memory=o.get("shared_memory"),
                 flops=flops[i], bytes=nbytes[i], align=align[i])
        for i, o in enumerate(seq))
    m = dict(meta or {})
    m.update({"iteration": k, "xla": xla, "traced_window_s": window_ns * 1e-9,
              "transforms": []})
    return StepTrace(dops, tuple(launches), tail, m, gap_s=gap)


#: What :func:`step_trace` reads of a traced iteration's host program: the launches, each op's
#: launch, the host work after the last launch (s), the device's queue gap (s,
#: :func:`queue_gap`) and the ops in issue order (for :func:`kernel_costs`).
HostProgram = tuple[list[HostLaunch], list[int], float, float, list[int]]


def xla_host(seq: Sequence[Mapping[str, Any]], lanes: Sequence[int], window_ns: float
             ) -> HostProgram:
    """An XLA iteration's host program: the launches an unprofiled run makes
    (:func:`xla_launch_groups`), each an equal share of the host (:func:`deinflate` sets the
    total), no tail, no queue gap (its traced ops of one stream overlap their neighbours),
    the ops in device order."""
    group = xla_launch_groups(seq)
    return ([HostLaunch(1.0, 0.0) for _ in range(max(group) + 1)], group, 0.0, 0.0,
            list(range(len(seq))))


def launch_host(seq: Sequence[Mapping[str, Any]], lanes: Sequence[int], window_ns: float
                ) -> HostProgram:
    """A PyTorch iteration's host program from its launch spans: the launches in host order,
    each with the host work since the previous launch call returned and the call itself (a
    blocked call, longer than :data:`BLOCKED_CALL_S`, the iteration's median call instead),
    an op without a span issued with the last launch before it, the work after the last
    launch until the window's end, the queue gap (:func:`queue_gap`) and the ops in launch
    order (those without a span last)."""
    order = sorted((i for i, o in enumerate(seq) if o.get("launch_start_ns") is not None),
                   key=lambda i: seq[i]["launch_start_ns"])
    calls = [max(0.0, float(seq[i].get("launch_dur_ns") or 0)) for i in order]
    unblocked = [c for c in calls if c <= BLOCKED_CALL_S * 1e9] or [0.0]
    med_call = statistics.median(unblocked)
    launches: list[HostLaunch] = []
    prev_end = 0.0
    pos = {}
    for j, i in enumerate(order):
        ls = float(seq[i]["launch_start_ns"])
        c = calls[j]
        launches.append(HostLaunch(max(0.0, ls - prev_end) * 1e-9,
                                   (c if c <= BLOCKED_CALL_S * 1e9 else med_call) * 1e-9))
        prev_end = max(prev_end, ls + c)
        pos[i] = j
    ready: list[float | None] = [None] * len(seq)
    launch_of = [0] * len(seq)
    cur = 0
    for i, o in enumerate(seq):  # an op without a launch span goes with the last launch
        if i in pos:
            cur = pos[i]
            ready[i] = float(o["launch_start_ns"]) + float(o.get("launch_dur_ns") or 0)
        launch_of[i] = cur
    if not launches:
        launches = [HostLaunch(0.0, 0.0)]
    issue = sorted(range(len(seq)), key=lambda i: (seq[i].get("launch_start_ns") is None,
                                                  seq[i].get("launch_start_ns") or 0, i))
    return (launches, launch_of, max(0.0, window_ns - prev_end) * 1e-9,
            queue_gap(seq, lanes, ready), issue)


def deinflate(step: StepTrace, host_untraced_s: float | None,
              host_traced_s: float | None = None) -> StepTrace:
    """``step`` with its host work scaled to an untraced host.

    With ``host_untraced_s`` (the result's ``host.dispatch_s`` median) the host intervals are
    scaled so that they sum to it; an XLA program's launches share it evenly. Without it, a
    traced host is divided by :data:`TRACED_HOST_INFLATION` (``host_traced_s``, default the
    step's own traced host work).
    """
    h = step.host_s
    if step.meta.get("xla"):
        total = host_untraced_s
        if total is None:
            total = (host_traced_s or step.meta.get("traced_window_s") or 0.0) \
                / TRACED_HOST_INFLATION
        n = len(step.launches)
        launches = tuple(HostLaunch(total / n, 0.0) for _ in step.launches)
        return replace(step, launches=launches, tail_s=0.0).with_note(
            f"host: {total * 1e3:.3f} ms over {n} launches", host_s=total)
    if host_untraced_s is not None and h > 0:
        f = host_untraced_s / h
    else:
        f = 1.0 / TRACED_HOST_INFLATION
    return scale_host(step, f).with_note(f"host de-inflated x{f:.3f}")


def scale_host(step: StepTrace, f: float) -> StepTrace:
    """``step`` with every host interval multiplied by ``f`` (no note)."""
    return replace(step, launches=tuple(HostLaunch(h.before_s * f, h.call_s * f)
                                        for h in step.launches), tail_s=step.tail_s * f)


def simulate(step: StepTrace, repeats: int = REPEATS, warm: int = WARM) -> ReplayResult:
    """Replay ``step`` ``repeats`` times back to back (the host never waits for the device)
    and return the steady-state period.

    Each op starts at the latest of: its launch call's return, its lane's previous op's end
    plus the trace's queue gap (:attr:`StepTrace.gap_s`), and the ends of the ops it waits
    for (:attr:`DeviceOp.after`, same iteration). The period
    is the mean spacing of the iterations' device ends after ``warm`` iterations, or of the
    host's, whichever is larger (a host-bound step's device idles between them).

    Raises:
        ValueError: ``repeats <= warm``.
    """
    if repeats <= warm:
        raise ValueError(f"repeats ({repeats}) must exceed warm ({warm})")
    ops, launches = step.ops, step.launches
    gap = step.gap_s
    n_l = len(launches)
    # host times of each launch's return within one iteration (relative to its start)
    ret = [0.0] * n_l
    t = 0.0
    for j, h in enumerate(launches):
        t += h.before_s + h.call_s
        ret[j] = t
    host_iter = t + step.tail_s
    lane_free = {o.lane: -math.inf for o in ops}  # a lane's first op waits for no other
    dev_end = []
    h_start = 0.0
    for _ in range(repeats):
        h0 = h_start
        end = [0.0] * len(ops)
        last = 0.0
        for i, o in enumerate(ops):
            s = max(h0 + ret[o.launch], lane_free[o.lane] + gap)
            for j in o.after:
                s = max(s, end[j])
            e = s + o.dur_s
            end[i] = e
            lane_free[o.lane] = e
            last = max(last, e)
        dev_end.append(max(last, h0 + host_iter))
        h_start = h0 + host_iter
    busy = sum(o.dur_s for o in ops)
    span = repeats - 1 - warm
    period = (dev_end[-1] - dev_end[warm]) / span if span > 0 else dev_end[-1] - dev_end[-2]
    period = max(period, host_iter)
    return ReplayResult(step_s=period, host_s=host_iter, device_s=busy,
                        device_idle=max(0.0, 1 - busy / period) if period > 0 else 0.0,
                        bound=eq.bound_of(host_iter, busy))


def load_traces(path: str, ids: Sequence[int] | None = None) -> list[tuple[Any, StepTrace]]:
    """Every stored timeline of the results file ``path`` (or those of ``ids``) as ``(Point,
    StepTrace)`` pairs, host times as traced (:func:`deinflate` not applied); results whose
    timeline does not decode or has no iteration are left out.

    Raises:
        ConfigError: ``path`` is not a results file (from the store).
    """
    from dlperf.perfmodel.records import point_of
    from dlperf.results import timelines
    from dlperf.results.store import ResultStore

    out: list[tuple[Any, StepTrace]] = []
    with ResultStore(path, read_only=True) as store:
        have = timeline_ids(path)
        for rec in store.records(samples=False, status="ok"):
            p = point_of(rec, path)
            if p is None or p.result_id not in have or (ids is not None
                                                         and p.result_id not in ids):
                continue
            tl = timelines.load(store, p.result_id)
            try:
                ops = timelines.decode(tl or {})
                st = step_trace(tl or {}, ops, meta=point_meta(p))
            except ValueError:
                continue
            out.append((p, st))
    return out


def timeline_ids(path: str) -> set[int]:
    """The result ids of the results file ``path`` that have a stored timeline (none where it
    has no timelines table, or is no SQLite file)."""
    import sqlite3

    from dlperf.results.dbfile import file_uri

    con = sqlite3.connect(file_uri(path, "ro"), uri=True)
    try:
        return {r[0] for r in con.execute("SELECT result_id FROM timelines")}
    except sqlite3.Error:
        return set()
    finally:
        con.close()


def trace_of(store: Any, p: Any) -> StepTrace | None:
    """The :class:`StepTrace` of the stored point ``p`` (a
    :class:`~dlperf.perfmodel.records.Point`) from ``store`` (its open
    :class:`~dlperf.results.store.ResultStore`), host as traced; None where its timeline is
    missing or has no iteration."""
    from dlperf.results import timelines

    tl = timelines.load(store, p.result_id)
    if not tl:
        return None
    try:
        return step_trace(tl, timelines.decode(tl), meta=point_meta(p))
    except ValueError:
        return None


def point_meta(p: Any) -> dict[str, Any]:
    """The :attr:`StepTrace.meta` of a trace of the stored point ``p`` (a
    :class:`~dlperf.perfmodel.records.Point`)."""
    hs = [x for x in p.host_speed_ns if x]
    return {"model": p.model, "framework": p.framework, "mode": p.mode,
            "precision": p.precision, "batch_size": p.batch_size,
            "device_name": p.device_name, "source": p.source, "result_id": p.result_id,
            "host_speed_ns": statistics.median(hs) if hs else None,
            "measured_step_s": p.step_time_s, "host_untraced_s": p.host_dispatch_s,
            "host_traced_s": p.dispatch_s, "compile_mode": p.compile_mode,
            "params": getattr(p, "params", None),
            "train_flops_per_sample": getattr(p, "train_flops_per_sample", None)}


def trace_key(p: Any) -> tuple[str, int]:
    """The key of a stored point's trace among the points of several results files: its file
    (``source``, as given) and its row id (``result_id``), which alone repeats across files."""
    return (p.source, p.result_id)


def host_level(points: Sequence[Any],
               kernel_s: Mapping[tuple[str, int], float] | None = None) -> float | None:
    """A configuration's untraced host time per step (s) from its stored points (each a
    :class:`~dlperf.perfmodel.records.Point`): for an eager program, the median measured step
    of its host-bound points (those whose untraced host probe ``host_dispatch_s`` is at least
    their device's busy time, ``busy_s``, else ``kernel_s[trace_key(p)]``); else, and for a
    compiled program (``mode`` other than ``eager``: an XLA program's small-batch step is
    close to its host *plus* its device, docs/replay.md, "Not done"), the median probe; None
    without a probe.

    A host-bound step *is* its host's time in the measured loop; the probe (the step call
    timed from an idle device, 5 iterations) reads it at a model's own ratio: on the
    development torch eager host-bound points of the H200 file step / probe is 0.77-0.86 for
    fcn5, 1.04-1.18 for transformer bf16. Used as the host of another point of the
    configuration, the host-bound steps gave the development rows of a batch from one trace
    5.4% median error against 7.0% for the probes (H200; 4.4% against 4.9% on the H100's
    points) and fp32 -> bf16 signs right 36 of 37 against 34 (docs/replay.md, "Back-test")."""
    probes = [p.host_dispatch_s for p in points if p.host_dispatch_s]
    if not probes:
        return None
    bound = [p.step_time_s for p in points if host_bound(p, kernel_s)]
    return statistics.median(bound) if bound else statistics.median(probes)


def host_bound(p: Any, kernel_s: Mapping[tuple[str, int], float] | None = None) -> bool:
    """Whether the stored point ``p`` (a :class:`~dlperf.perfmodel.records.Point`) is one
    whose step :func:`host_level` reads as its configuration's host: an eager program with a
    measured step whose untraced host probe ``host_dispatch_s`` is at least its device's busy
    time per step (``busy_s``, else ``kernel_s[trace_key(p)]``, s); False without either."""
    if getattr(p, "mode", "eager") != "eager":
        return False
    busy = p.busy_s if p.busy_s else (kernel_s.get(trace_key(p)) if kernel_s else None)
    return bool(p.host_dispatch_s and busy and p.host_dispatch_s >= busy and p.step_time_s)


def replay_own(p: Any, st: StepTrace) -> ReplayResult:
    """The replay of a stored point's own trace: its host de-inflated to the point's own
    untraced probe (:func:`deinflate`), kernels as traced."""
    return simulate(deinflate(st, p.host_dispatch_s, p.dispatch_s))
