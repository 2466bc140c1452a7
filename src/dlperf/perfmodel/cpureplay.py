"""Data parallel on a CPU timeline: DDP's bucket all-reduces placed at their gradient-ready ops
of one rank's traced iteration, the host's cores shared between the step and the all-reduces.

On a CPU device the timeline (``--timeline`` of a ``--device cpu`` run) holds host ops, the
self time of each ATen op of the training thread, and, under DDP over gloo, the
``gloo:all_reduce`` spans of the process group's worker threads. There is no device lane:
the step *is* the training thread's work, and an all-reduce runs on a gloo thread that needs
the same cores. :func:`cpu_iteration` turns one traced iteration of rank 0 of an N-rank run
into a :class:`CpuStep`: the training thread's work in host order with its all-reduces removed
(the gloo spans dropped, and the training thread's wait for them after backward, the gap
before DDP copies the reduced buckets back, cut out), and each bucket's *gradient-ready op*:
the hook of its last parameter's ``AccumulateGrad``, counted in the order backward produces
gradients (DDP's rebuilt buckets hold consecutive parameters of that order; the runtime
record gives each bucket's parameter count). :func:`simulate` puts each bucket's all-reduce
(its time from the stored all-reduce sweep of the same rank count: a measurement of the
collective alone) on one communication thread after its ready op, in reduction order, the ops
after backward after the last one (WFBP), and shares the CPU between the two threads: while
both run, the training thread progresses at ``compute_rate`` and the all-reduce at
``comm_rate`` of their own speed (1, 1: overlapped for free, as NCCL on a GPU; 0, 1: not
overlapped at all). The rates are chosen on the development models (docs/replay.md,
"Data parallel on CPU (gloo)").

What the input carries: the training thread's ops as rank 0 ran them beside rank 1 and the
gloo threads (a 2-rank gloo run on the 2-core development VM is itself contended), DDP's own
work in the hooks (the gradient copy into its bucket) and the profiler's cost; no 1-rank
timeline of these configurations is stored (``benchmarks/results/cpu-dev/ddp_buckets.db``).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: The hook slice that begins one parameter's gradient accumulation (two slices of this name
#: per parameter in a torch.profiler CPU trace; the first follows the engine's
#: ``evaluate_function`` slice).
ACCUMULATE = "torch::autograd::AccumulateGrad"
_EVALUATE = "autograd::engine::evaluate_function"
#: DDP's enqueue of a bucket's all-reduce on the training thread (for :func:`ready_check`).
ENQUEUE = "c10d::allreduce_"
#: The share of its own speed each thread keeps while the training thread and an all-reduce
#: run at once (:func:`simulate`): 2 ranks, each a training thread and a gloo thread, on the
#: 2 cores of the development VM. Chosen on the development rows (fcn5 2x32 and 2x64, lstm
#: 2x16; docs/replay.md): 0.5 with the traced overlap de-contended 2.1% MdAPE, 0.7 1.8%,
#: 0.3 6.9%, free overlap (1, 1) 3.2%, not overlapped (0, 1) 17.7%.
COMPUTE_RATE = 0.5
COMM_RATE = 0.5
#: Gaps of the training thread shorter than this are its own work (Python, the dispatcher),
#: never a wait for an all-reduce.
WAIT_MIN_S = 1e-3


@dataclass(frozen=True)
class CpuStep:
    """One rank's traced iteration on a CPU, its all-reduces removed.

    Attributes:
        work_s: the training thread's work items in host order (s): each host op's self
            time plus the gap before it (the wait for the all-reduces cut out).
        overlap_s: the part of each item that ran while a traced all-reduce of this iteration
            was running (s; for :func:`decontend`).
        ready: for each bucket in reduction order, the index of the item after which its
            gradients are ready (its last parameter's ``AccumulateGrad`` hook).
        barrier: index of the first item after backward (it waits for every all-reduce;
            ``len(work_s)`` when nothing follows backward).
        enqueue: the item index of each ``c10d::allreduce_`` of the iteration (DDP's own
            enqueue, to check :attr:`ready` against).
        backward: the item indices of backward (phase ``t_b``), first and last.
        waits_s: the training thread's waits cut out (s).
        window_s: the traced iteration's host window (s).
    """

    work_s: tuple[float, ...]
    overlap_s: tuple[float, ...]
    ready: tuple[int, ...]
    barrier: int
    enqueue: tuple[int, ...]
    backward: tuple[int, int]
    waits_s: float
    window_s: float

    @property
    def compute_s(self) -> float:
        """The training thread's work per iteration without the all-reduces (s)."""
        return sum(self.work_s)


def _union(spans: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _inside(a: float, b: float, spans: Sequence[tuple[float, float]]) -> float:
    return sum(max(0.0, min(b, e) - max(a, s)) for s, e in spans)


def cpu_iteration(tl_meta: Mapping[str, Any], ops: Sequence[Mapping[str, Any]], k: int,
                  bucket_params: Sequence[int]) -> CpuStep:
    """Traced iteration ``k`` of a decoded CPU timeline as a :class:`CpuStep`.

    Args:
        tl_meta: the timeline's description (``steps_ns``).
        ops: :func:`dlperf.results.timelines.decode` of it (``host_op`` and ``collective``
            kinds; times in ns from the iteration's start).
        k: the traced iteration.
        bucket_params: each bucket's parameter count in reduction order (DDP's runtime
            record, ``dist.runtime.rebuilt_per_bucket_param_indices``).

    Raises:
        ValueError: the iteration has no host op or no backward, or its backward holds fewer
            ``AccumulateGrad`` hooks than the buckets' parameters.
    """
    steps = tl_meta.get("steps_ns") or []
    if not 0 <= k < len(steps):
        raise ValueError(f"the timeline has no traced iteration {k}")
    window = float(steps[k][1] - steps[k][0])
    by_kind: dict[Any, list[Mapping[str, Any]]] = {}
    for o in ops:
        if o.get("step") == k and o.get("dur_ns") is not None:
            by_kind.setdefault(o.get("kind"), []).append(o)
    host = sorted(by_kind.get("host_op", []), key=lambda o: float(o["start_ns"]))
    comm = _union([(float(o["start_ns"]), float(o["start_ns"]) + float(o["dur_ns"]))
                   for o in by_kind.get("collective", [])])
    if not host:
        raise ValueError(f"traced iteration {k} has no host op")
    back = [i for i, o in enumerate(host) if o.get("phase") == "t_b"]
    if not back:
        raise ValueError(f"traced iteration {k} has no backward op (phase t_b)")
    b0, b1 = back[0], back[-1]
    work, over = [], []
    waits = 0.0
    end = 0.0
    for i, o in enumerate(host):
        s, d = float(o["start_ns"]), float(o["dur_ns"])
        gap = max(0.0, s - end)
        cut = 0.0
        if i > b1 and gap >= WAIT_MIN_S * 1e9:  # after backward: waiting for the buckets
            cut = _inside(end, s, comm)
        waits += cut
        work.append((gap - cut + d) * 1e-9)
        over.append(max(0.0, _inside(end, s + d, comm) - cut) * 1e-9)
        end = max(end, s + d)
    work[-1] += max(0.0, window - end) * 1e-9  # the window after the last op: the return
    # gradient-ready items: the hooks of the parameters, in backward's order
    starts = [i for i in range(b0, b1 + 1)
              if host[i].get("name") == ACCUMULATE
              and str(host[i - 1].get("name") or "").startswith(_EVALUATE)]
    need = sum(bucket_params)
    if len(starts) < need:
        raise ValueError(f"traced iteration {k}: {len(starts)} AccumulateGrad hooks in "
                         f"backward, the buckets hold {need} parameters")

    stops = [*starts[1:], b1 + 1]

    def hook_end(j: int) -> int:
        # the last op of parameter j's hook: up to the next parameter's hook (or backward's
        # end) or the next op of another autograd node (its context no longer the
        # AccumulateGrad's)
        i = starts[j]
        while i + 1 < stops[j] and "AccumulateGrad" in str(host[i + 1].get("context") or ""):
            i += 1
        return i

    ready, done = [], 0
    for n in bucket_params:
        done += n
        ready.append(hook_end(done - 1))
    enq = tuple(i for i in range(b0, len(host)) if host[i].get("name") == ENQUEUE)
    return CpuStep(tuple(work), tuple(over), tuple(ready), b1 + 1, enq, (b0, b1),
                   waits * 1e-9, window * 1e-9)


def ddp_compute_s(result: Mapping[str, Any]) -> float | None:
    """The untraced forward and backward compute of one step (s) by DDP's own logger
    (``dist.runtime``: ``avg_forward_compute_time + avg_backward_compute_time``, ns, the mean
    over the iterations DDP samples in the measured loop, not under the profiler: forward's
    start to backward's start, then to the last gradient ready); None where not recorded."""
    rt = (result.get("dist") or {}).get("runtime") or {}
    f, b = rt.get("avg_forward_compute_time"), rt.get("avg_backward_compute_time")
    if not isinstance(f, (int, float)) or not isinstance(b, (int, float)) or f + b <= 0:
        return None
    return (f + b) * 1e-9


def scale(step: CpuStep, factor: float) -> CpuStep:
    """``step`` with every work item (and its overlapped part) times ``factor``."""
    return CpuStep(tuple(w * factor for w in step.work_s),
                   tuple(o * factor for o in step.overlap_s), step.ready, step.barrier,
                   step.enqueue, step.backward, step.waits_s * factor, step.window_s)


def deinflate(step: CpuStep, untraced_s: float | None) -> CpuStep:
    """``step`` scaled so that its work up to backward's end sums to ``untraced_s`` (the
    untraced forward and backward, :func:`ddp_compute_s`): the profiler's cost per op
    (torch.profiler records every ATen op's self time: resnet56 runs 10,756 of them per
    iteration) taken out in proportion; unchanged without ``untraced_s``."""
    traced = sum(step.work_s[:step.backward[1] + 1])
    if not untraced_s or traced <= 0:
        return step
    return scale(step, untraced_s / traced)


def decontend(step: CpuStep, compute_rate: float) -> CpuStep:
    """``step`` with the part of each item that ran beside a traced all-reduce at the speed
    it would have had alone: that part's time times ``compute_rate`` (the rate
    :func:`simulate` gives the training thread beside an all-reduce; 1: unchanged)."""
    work = tuple(w - (1 - compute_rate) * o for w, o in zip(step.work_s, step.overlap_s))
    return CpuStep(work, tuple(0.0 for _ in work), step.ready, step.barrier, step.enqueue,
                   step.backward, step.waits_s, step.window_s)


@dataclass(frozen=True)
class DpResult:
    """What :func:`simulate` gives (s): the step, the training thread's work, the summed
    all-reduce time (alone), and the exposed part (``step - compute``)."""

    step_s: float
    compute_s: float
    comm_s: float
    exposed_s: float


def simulate(step: CpuStep, bucket_bytes: Sequence[float],
             allreduce_s: Callable[[float], float], compute_rate: float = 1.0,
             comm_rate: float = 1.0) -> DpResult:
    """The iteration with each bucket's all-reduce inserted after its gradient-ready item.

    One communication thread runs the all-reduces one at a time in reduction order, each
    ``allreduce_s(bytes)`` of work released when its ready item ends; the items from
    :attr:`CpuStep.barrier` on wait for the last one to end. While both threads have work the
    training thread progresses at ``compute_rate`` and the all-reduce at ``comm_rate`` of
    their speed alone (processor sharing; each alone runs at 1).

    Raises:
        ValueError: bucket counts of ``bucket_bytes`` and ``step.ready`` differ, or a rate is
            outside [0, 1] with both 0.
    """
    if len(bucket_bytes) != len(step.ready):
        raise ValueError(f"{len(bucket_bytes)} bucket sizes for {len(step.ready)} ready ops")
    if not (0 <= compute_rate <= 1 and 0 <= comm_rate <= 1) or compute_rate + comm_rate == 0:
        raise ValueError("rates must lie in [0, 1], not both 0")
    jobs = [float(allreduce_s(b)) for b in bucket_bytes]
    release_after: dict[int, list[int]] = {}
    for j, i in enumerate(step.ready):
        release_after.setdefault(i, []).append(j)
    # (training thread's rate, all-reduce's rate) by which of the two have work
    rates = {(True, True): (compute_rate, comm_rate), (True, False): (1.0, 0.0),
             (False, True): (0.0, 1.0)}
    t = 0.0
    queue: list[float] = []     # remaining work of released, unfinished all-reduces (FIFO)
    n_done = 0
    i = 0
    work = (*step.work_s, 0.0)  # nothing left once the last item is done
    left = work[0]
    n = len(step.work_s)

    def active() -> tuple[bool, bool]:
        # (the training thread may work: an item is left and, past the barrier, every
        # all-reduce is done; an all-reduce is released and unfinished); neither: the step is
        # done, or waits for an all-reduce no item releases
        return i < n and not (i >= step.barrier and n_done < len(jobs)), bool(queue)

    computing, comm = active()
    while computing or comm:
        rc, rm = rates[computing, comm]
        dt_c = left / rc if rc > 0 else float("inf")
        dt_m = queue[0] / rm if rm > 0 else float("inf")
        dt = min(dt_c, dt_m)
        t += dt
        left -= rc * dt  # rc is 0 while the training thread waits
        if comm:
            queue[0] -= rm * dt
            if dt == dt_m:
                queue.pop(0)
                n_done += 1
        if dt == dt_c:  # the item ends (never while waiting: dt_c is infinite then)
            for j in release_after.get(i, []):
                queue.append(jobs[j])
            i += 1
            left = work[i]
        computing, comm = active()
    comp = step.compute_s
    return DpResult(t, comp, sum(jobs), t - comp)


def bucket_params_of(result: Mapping[str, Any]) -> list[int] | None:
    """Each DDP bucket's parameter count in reduction order from a stored result's
    ``dist.runtime.rebuilt_per_bucket_param_indices`` (``"7 6, 5 4 3 2, 1 0"``), else from
    rank 0's ``dist.buckets_timeline`` ``n_params``; None where neither is recorded."""
    dist = result.get("dist") or {}
    idx = (dist.get("runtime") or {}).get("rebuilt_per_bucket_param_indices")
    if isinstance(idx, str) and idx.strip():
        return [len(part.split()) for part in idx.split(",")]
    ranks = (dist.get("buckets_timeline") or {}).get("per_rank") or []
    if ranks:
        got = [b.get("n_params") for b in ranks[0].get("buckets") or []]
        if got and all(isinstance(x, int) for x in got):
            return got
    return None


def ready_check(step: CpuStep) -> list[int]:
    """For each bucket, how many training-thread items its predicted ready item lies after
    DDP's own enqueue of that bucket (:data:`ENQUEUE`; 0: the enqueue itself, negative:
    before it); empty when the trace holds a different number of enqueues. On the stored
    2-rank gloo runs it is 1 or 2 for every bucket and traced iteration: the hook's last
    slices after the enqueue."""
    if len(step.enqueue) != len(step.ready):
        return []
    return [r - e for r, e in zip(step.ready, step.enqueue)]


def median_prediction(steps: Sequence[CpuStep], fn: Callable[[CpuStep], float]) -> float:
    """The median of ``fn`` over the traced iterations ``steps`` after the first (the first
    runs right after the profiler starts; all of them where there is one)."""
    use = list(steps[1:]) or list(steps)
    return statistics.median(fn(s) for s in use)


def predict(step: CpuStep, untraced_s: float | None, bucket_bytes: Sequence[float],
            allreduce_s: Callable[[float], float], compute_rate: float = COMPUTE_RATE,
            comm_rate: float = COMM_RATE, contended: bool = True) -> DpResult:
    """The N-rank step from one rank's traced iteration (its all-reduces removed): work
    de-inflated to DDP's untraced compute (:func:`deinflate`), the traced overlap with the
    all-reduces de-contended at ``compute_rate`` (:func:`decontend`; not with ``contended``
    False), then :func:`simulate` with each bucket's all-reduce at ``allreduce_s(bytes)``."""
    s = deinflate(step, untraced_s)
    if contended:
        s = decontend(s, compute_rate)
    return simulate(s, bucket_bytes, allreduce_s, compute_rate, comm_rate)
