"""The breakdown measurement: one iteration split into phases, timed per iteration.

This is a separate, labelled measurement that the worker runs *after* the normal fused-step
measurement (:mod:`dlperf.measure.loop`), which stays the headline number and is not slowed:
nothing here runs inside it. The adapter provides a *phased step*, ``phased_step(mark)``,
that runs one iteration and calls ``mark(phase)`` at the end of each phase (Shi & Chu 2017's
split):

* ``t_io``: get the batch (data wait; synthetic data: the next batch of the on-device pool);
* ``t_h2d``: host-to-device copy of the batch (0 work for on-device data);
* ``t_f``: forward and loss; ``t_b``: backward; ``t_u``: optimizer update;
* or, where forward and backward are one compiled program (JAX, TensorFlow graph/XLA),
  ``t_fbu``: the whole compiled step (its split comes from the profiler trace instead).

A phase may be marked several times per iteration (gradient accumulation: ``t_f``, ``t_b``
per micro-batch); the times of one phase in one iteration are summed.

Timers (:class:`PhaseTimer`):

* :class:`CudaPhaseTimer`: a CUDA event recorded in the stream at each mark and read after the
  loop (no host synchronisation between phases). An interval between two consecutive events
  is the device timeline between those points, so the phases of an iteration add up exactly
  to the device time of the iteration (including any time the device waits for the host
  inside a phase, which is part of that phase's cost).
* :class:`HostPhaseTimer`: the host clock, after ``block(handle)`` waits for the phase's
  output (``tf`` on a GPU; nothing on a synchronous CPU device). A blocking timer serialises
  host and device at every phase boundary; the reconciliation reports it.
* :class:`LaggedPhaseTimer`: for a step that is one compiled program after host-side input
  phases (JAX): nothing waits at the phase boundaries; iterations are timed by their
  completion, ``lag`` iterations behind the dispatch (as :class:`~dlperf.measure.timers.
  LaggedSyncTimer` times the fused step), so host dispatch overlaps device work exactly as in
  the fused loop. The input phases (``t_io``, ``t_h2d``) count the part of their host time the
  host's slack in that iteration did not hide (the time they kept the device waiting, as
  CUDA-event phases do), and the last phase (``t_fbu``) is the rest of the completion interval.

Both also record the host clock at each mark: ``host`` times per phase are the CPU time spent
issuing each phase (the dispatch time, without a profiler).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from dlperf.config import IterationPolicy
from dlperf.measure.loop import frozen_heap
from dlperf.measure.timers import LaggedSyncTimer

#: Phase names, in iteration order.
PHASES = ("t_io", "t_h2d", "t_f", "t_b", "t_u")
FUSED_COMPUTE = "t_fbu"
#: Iterations of the phased step run before its measured iterations (the state is warm from
#: the fused measurement; these absorb any one-off cost of the phased code path).
WARMUP_ITERS = 3

Mark = Callable[..., None]


class PhaseTimer(Protocol):
    """Times phases of iterations (seconds)."""

    kind: str

    def start(self) -> None:
        """Begin a segment: the first boundary."""

    def mark(self, phase: str, handle: Any = None) -> None:
        """The phase ``phase`` ended now; ``handle`` is its output (for blocking timers)."""

    def end_iteration(self) -> None:
        """The current iteration is complete."""

    def collect(self) -> tuple[list[dict[str, float]], list[dict[str, float]]]:
        """(device or synchronised times, host times): one ``{phase: s}`` per iteration."""


def _group(labels: list[str], deltas: list[float], ends: list[int]) -> list[dict[str, float]]:
    out, k = [], 0
    for end in ends:
        d: dict[str, float] = {}
        while k < end:
            d[labels[k]] = d.get(labels[k], 0.0) + deltas[k]
            k += 1
        out.append(d)
    return out


class HostPhaseTimer:
    """Host clock at each mark, after ``block(handle)`` (module docstring).

    Args:
        block: waits for a phase's output; None on a synchronous device.
        clock: host clock in seconds (injectable for tests).
    """

    kind = "host"

    def __init__(self, block: Callable[[Any], Any] | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self._block, self._clock = block, clock
        self._t: list[float] = []
        self._host: list[float] = []
        self._labels: list[str] = []
        self._ends: list[int] = []

    def start(self) -> None:  # noqa: D102
        t = self._clock()
        self._t, self._host, self._labels, self._ends = [t], [t], [], []

    def mark(self, phase: str, handle: Any = None) -> None:  # noqa: D102
        h = self._clock()
        if self._block is not None and handle is not None:
            self._block(handle)
            t = self._clock()
        else:
            t = h
        self._host.append(h)
        self._t.append(t)
        self._labels.append(phase)

    def end_iteration(self) -> None:  # noqa: D102
        self._ends.append(len(self._labels))

    def collect(self):  # noqa: D102
        t, h = self._t, self._host
        dev = [t[i + 1] - t[i] for i in range(len(t) - 1)]
        # Host time of a phase: from the previous boundary (after its wait) to this mark.
        host = [h[i + 1] - t[i] for i in range(len(t) - 1)]
        return _group(self._labels, dev, self._ends), _group(self._labels, host, self._ends)


class LaggedPhaseTimer:
    """Phases from completion intervals, ``lag`` iterations behind the dispatch (module
    docstring). Per iteration, with ``interval`` its completion interval, ``H`` the host time of
    all its phases and ``H_in`` that of the phases before the last (the input phases): the host
    had ``slack = max(0, interval - H)`` to spare, so the input phases held the device up by
    ``exposed = min(interval, max(0, H_in - slack))`` (0 when the device is the bottleneck,
    ``H_in`` when the host is), shared among them in proportion to their host times; the last
    phase is ``interval - exposed``. So the phases add up to the interval, and like CUDA-event phases
    they count the time an input phase kept the device waiting, not the host time it hid.

    Args:
        block: waits until an iteration's output (the handle of its last mark) is computed,
            e.g. ``jax.block_until_ready``.
        lag: iterations in flight when the clock is read (>= 1).
        clock: host clock in seconds (injectable for tests).

    Raises:
        ValueError: ``lag < 1``.
    """

    kind = "lagged_host"

    def __init__(self, block: Callable[[Any], Any], lag: int = 2,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        # The completion times: the fused loop's own lagged timer (raises for lag < 1); an
        # iteration that marked no handle has nothing to wait for.
        self._done = LaggedSyncTimer(lambda h: None if h is None else block(h), lag=lag,
                                     clock=clock)
        self._host: list[float] = []  # host time of each mark's phase
        self._prev = 0.0  # the last boundary on the host (after the timer's own work)
        self._labels: list[str] = []
        self._ends: list[int] = []
        self._last: Any = None

    def start(self) -> None:  # noqa: D102
        self._done.start()
        self._host, self._labels, self._ends, self._last = [], [], [], None
        self._prev = self._clock()

    def mark(self, phase: str, handle: Any = None) -> None:  # noqa: D102
        t = self._clock()
        self._host.append(t - self._prev)
        self._prev = t
        self._labels.append(phase)
        if handle is not None:
            self._last = handle

    def end_iteration(self) -> None:  # noqa: D102
        self._ends.append(len(self._labels))
        self._done.mark(self._last)  # may wait for the iteration ``lag`` back
        self._last = None
        self._prev = self._clock()  # a wait (and this bookkeeping) is no phase's host time

    def collect(self):  # noqa: D102
        intervals = self._done.collect()
        host = _group(self._labels, self._host, self._ends)
        per_iter = []
        for hp, interval, end in zip(host, intervals, self._ends, strict=True):
            last = self._labels[end - 1] if end > 0 else None
            if last is None:
                per_iter.append(dict(hp))
                continue
            h_in = math.fsum(v for k, v in hp.items() if k != last)
            slack = max(0.0, interval - math.fsum(hp.values()))
            exposed = min(interval, max(0.0, h_in - slack))
            scale = exposed / h_in if h_in > 0 else 0.0
            it = {k: (v * scale if k != last else 0.0) for k, v in hp.items()}
            it[last] = max(0.0, interval - exposed)
            per_iter.append(it)
        return per_iter, host


class CudaPhaseTimer:
    """CUDA events recorded at each mark on the current stream; read after the loop.

    Args:
        torch: the imported ``torch`` module (this module never imports it).
        clock: host clock for the host-side times.
    """

    kind = "cuda_events"

    def __init__(self, torch: Any, clock: Callable[[], float] = time.perf_counter) -> None:
        self._torch, self._clock = torch, clock
        self._pool: list[Any] = []
        self._n = 0
        self._stream = None
        self._host: list[float] = []
        self._labels: list[str] = []
        self._ends: list[int] = []

    def reserve(self, n: int) -> None:
        """Create events for ``n`` marks ahead of the loop."""
        while len(self._pool) < n + 1:
            self._pool.append(self._torch.cuda.Event(enable_timing=True))

    def _record(self) -> None:
        if self._n >= len(self._pool):
            self.reserve(2 * len(self._pool) + 16)
        self._pool[self._n].record(self._stream)
        self._n += 1

    def start(self) -> None:  # noqa: D102
        self._n, self._labels, self._ends = 0, [], []
        self._stream = self._torch.cuda.current_stream()
        self._host = [self._clock()]
        self._record()

    def mark(self, phase: str, handle: Any = None) -> None:  # noqa: D102
        self._record()
        self._host.append(self._clock())
        self._labels.append(phase)

    def end_iteration(self) -> None:  # noqa: D102
        self._ends.append(len(self._labels))

    def collect(self):  # noqa: D102
        ev = self._pool[: self._n]
        if not ev:
            return [], []
        ev[-1].synchronize()
        # elapsed_time is in milliseconds (CUDA event resolution about 0.5 us).
        dev = [ev[i].elapsed_time(ev[i + 1]) * 1e-3 for i in range(len(ev) - 1)]
        h = self._host
        host = [h[i + 1] - h[i] for i in range(len(h) - 1)]
        return _group(self._labels, dev, self._ends), _group(self._labels, host, self._ends)


@dataclass
class PhaseLoopResult:
    """Raw outcome of :func:`measure_phases` (seconds).

    Attributes:
        phases: phase names seen, in order of first appearance.
        per_iter: ``{phase: s}`` per measured iteration (device events or synchronised host
            clock, per the timer).
        host_per_iter: ``{phase: s}`` of host time per measured iteration.
        wall_s: host wall time of the measured segment.
        timer: the timer's kind.
    """

    phases: list[str]
    per_iter: list[dict[str, float]]
    host_per_iter: list[dict[str, float]]
    wall_s: float
    timer: str
    losses: list[Any] = field(default_factory=list)

    def samples(self, phase: str, host: bool = False) -> list[float]:
        """Per-iteration times of ``phase`` (0.0 where an iteration did not mark it)."""
        src = self.host_per_iter if host else self.per_iter
        return [d.get(phase, 0.0) for d in src]

    def totals(self, host: bool = False) -> list[float]:
        """Per-iteration sum of all phases."""
        src = self.host_per_iter if host else self.per_iter
        return [math.fsum(d.values()) for d in src]


def measure_phases(phased_step: Callable[[Mark], Any], timer: PhaseTimer,
                   policy: IterationPolicy, warmup_iters: int = WARMUP_ITERS,
                   clock: Callable[[], float] = time.perf_counter,
                   agree: Callable[[list[float]], list[float]] | None = None
                   ) -> PhaseLoopResult:
    """Run ``warmup_iters`` phased iterations, then measure until ``policy.min_iters`` and
    ``policy.min_time_s`` are both reached (or ``max_iters``/``max_time_s``).

    Args:
        phased_step: runs one iteration, calling ``mark(phase, handle=None)`` after each
            phase; returns the loss handle.
        timer: where phase boundaries are recorded.
        policy: the run's iteration policy (its stop rule; warm-up settings are not used).
        warmup_iters: untimed phased iterations first.
        clock: host clock (injectable for tests).
        agree: elementwise max over the processes of a data-parallel run (``DistContext.
            agree_max``), None for one process. With it every process runs one agreed count
            of measured iterations (from the slowest estimate, within ``max_iters`` and
            ``max_time_s``), as the fused loop does (:func:`dlperf.measure.loop.measure`): the
            iterations hold collectives, so a process that stopped on its own clock would
            leave a peer waiting in its last iteration's all-reduce.

    Returns:
        PhaseLoopResult with every iteration's phase times.
    """
    expected = policy.min_iters
    est = 0.0
    warm: list[dict[str, float]] = []
    n_marks = [0]  # marks of the warm-up iterations (a phase may be marked several times)

    def counted_mark(phase: str, handle: Any = None) -> None:
        n_marks[0] += 1
        timer.mark(phase, handle)

    if warmup_iters:
        timer.start()
        for _ in range(warmup_iters):
            phased_step(counted_mark)
            timer.end_iteration()
        warm, _ = timer.collect()
        est = sorted(math.fsum(d.values()) for d in warm)[len(warm) // 2] if warm else 0.0
        if est > 0:
            expected = max(policy.min_iters, math.ceil(policy.min_time_s / est))
    min_iters, max_iters = policy.min_iters, policy.max_iters
    min_time, max_time = policy.min_time_s, policy.max_time_s
    if agree is not None:  # one count for every process; the count alone stops the segment
        budget = max_iters if est <= 0 else max(1, math.floor(max_time / est))
        expected = int(agree([float(max(1, min(expected, max_iters, budget)))])[0])
        min_iters, max_iters, min_time, max_time = expected, expected, 0.0, math.inf
    if hasattr(timer, "reserve") and warm:
        # Device events for the expected marks, created before the timed loop (every mark,
        # not every phase name: with gradient accumulation t_f and t_b repeat per micro-batch).
        marks = math.ceil(n_marks[0] / warmup_iters)
        timer.reserve(min(policy.max_iters, int(expected * 1.25) + 8) * max(marks, 1))
    losses = []
    n = 0
    with frozen_heap():  # as in the fused measurement (dlperf.measure.loop)
        t0 = clock()
        timer.start()
        while True:
            losses.append(phased_step(timer.mark))
            timer.end_iteration()
            n += 1
            el = clock() - t0
            if ((n >= min_iters and el >= min_time) or n >= max_iters
                    or el >= max_time):
                break
        per_iter, host = timer.collect()
        wall = clock() - t0
    seen: list[str] = []
    for d in per_iter:
        for k in d:
            if k not in seen:
                seen.append(k)
    order = [p for p in (*PHASES, FUSED_COMPUTE) if p in seen] + \
        [p for p in seen if p not in PHASES and p != FUSED_COMPUTE]
    return PhaseLoopResult(phases=order, per_iter=per_iter, host_per_iter=host, wall_s=wall,
                           timer=timer.kind, losses=losses)
