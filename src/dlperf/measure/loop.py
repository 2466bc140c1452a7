"""The measured training loop: first iteration, detected warm-up, steady-state measurement.

This is the one place where dlperf times training (docs/architecture.md habit 4). It knows nothing
about frameworks: it calls ``step()`` (one full iteration: input, forward, backward, update),
reads durations from a :class:`~dlperf.measure.timers.StepTimer`, and applies the rules of
docs/measurement.md:

* rule 3: the first iteration and the warm-up are recorded apart from the measurement; warm-up
  ends when the rolling step time is stable (:func:`dlperf.stats.is_stable` over two
  consecutive windows), not after a fixed count;
* rule 2: in the measured segment nothing synchronises the host with the device; the timer
  records a mark per iteration and is read once after the loop; the sum of the per-iteration
  times is checked against the loop's wall time;
* rule 5: stop when both a minimum count and a minimum time are reached (or at the budget);
  every raw sample is kept.

Compiles (docs/measurement.md, "Recompiles"): where the framework counts its compilations
(``compiles``: a cheap Python read, e.g. Dynamo's graph counter, JAX's trace and XLA-compile
counts, ``tf.function``'s tracing count), the loop reads the counter after each step and
records the steps after which it moved (``LoopResult.compiled_at``). Warm-up does not end
while compiles still happen: two windows agree only if neither holds a compile. A measured
segment in which the step compiled after a settled warm-up is left behind (it becomes
warm-up), warm-up starts again and the segment is measured again, at most
:data:`MAX_REMEASURES` times and within the time budget (``max_time_s``, counted from the first
measured segment's start; the new segment always gets its minimums). A step that compiled all
through warm-up (it never settled) is not measured again: it would compile again. If the last
segment still compiled, its compile steps are reported (and :mod:`dlperf.measure.segment`
leaves them out of the statistics).

Python's garbage collector: after the first iteration, :func:`measure` collects once and
freezes every object alive (``gc.collect(); gc.freeze()``), and unfreezes them at the end. The
collector stays on, so the cyclic garbage the training step makes is collected as in any loop,
but its full collections no longer walk the objects dlperf itself holds (its imports, config,
store: some 340,000 objects in a worker, against far fewer in a hand-written training script).
Without this, full collections of that heap took 9% of the measured time of a 0.45 ms
host-bound step (fcn5_tiny, batch 1, on a CPU; dlperf read 0.88 of the plain loop's throughput
there, 0.98 with the freeze), the likely cause of the 3-6% the host-bound models lost against
the plain loop across processes on the H200 (benchmarks/results/h200/overhead_fp32_s3quiet.json).
``gc.freeze`` (Python >= 3.7) moves every tracked object to a permanent generation that later
collections ignore; ``gc.unfreeze`` moves them back to the oldest generation. The breakdown's
phased loop (:mod:`dlperf.measure.phases`) runs under the same :func:`frozen_heap`.

Data parallelism: the processes of one run must run the same number of steps (each step ends
in a collective all of them join). With ``agree`` (an elementwise max over processes) the
decisions are made together, only where the host reads the timer anyway: warm-up goes on
until *every* process is steady (or any reaches its budget), and the measured count is fixed
before the measured segment, from the slowest process's warm-up estimate, so nothing is
exchanged inside the measured segment.
"""

from __future__ import annotations

import contextlib
import gc
import math
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from dlperf.config import IterationPolicy
from dlperf.measure.timers import StepTimer
from dlperf.stats import MIN_CI_SAMPLES, TREND_MIN_SAMPLES, is_stable, trend

#: Event times and wall time must agree within this share of the wall time, or within
#: ``WALL_CHECK_ABS_S``: the wall includes one launch latency and one synchronisation
#: (tens of microseconds), which dominates only very short segments.
WALL_CHECK_REL = 0.05
WALL_CHECK_ABS_S = 2e-3
#: How many times a measured segment in which the step compiled is measured again (after a
#: fresh warm-up) before its compile steps are excluded instead: a step that keeps
#: recompiling (a shape that changes every few steps) would otherwise never be measured.
MAX_REMEASURES = 2
#: z of the two-sided 95% interval; :func:`median_ci_rel` uses it.
Z95 = 1.959964


@dataclass
class LoopResult:
    """Raw outcome of :func:`measure`. All times in seconds.

    Attributes:
        first_iter_s: the first iteration alone (compilation, autotuning, allocator growth).
        warmup_s: each warm-up iteration, in order.
        steady_state: True if the (last) warm-up ended because two consecutive windows
            agreed, with no compile in either; None when warm-up was switched off
            (``max_warmup_iters == 0``): steady state was not looked for.
        measured_s: each measured iteration, in order (never filtered).
        wall_s: host wall time of the measured segment, from before the first step to after the
            device finished the last one.
        losses: opaque per-iteration loss handles for ``first``, ``warmup`` and ``measure``
            (the framework turns them into floats after the loop, without syncing inside it).
        compiled_at: ``{"first", "warmup", "measure"}`` -> indices (into that phase's
            samples) of the steps after which the compile counter moved; None where the
            framework has no counter.
        remeasured: how many measured segments were left behind (moved to the warm-up)
            because the step compiled in them.
        ci_extensions: how many times the measured segment was extended to reach
            ``policy.ci_target_rel`` (0 without a target).
        ci_rel: with a target, the relative half-width of the median's 95% interval
            (:func:`median_ci_rel`) at the end; None without one.
    """

    first_iter_s: float
    warmup_s: list[float]
    steady_state: bool | None
    measured_s: list[float]
    wall_s: float
    losses: dict[str, list[Any]] = field(default_factory=dict)
    compiled_at: dict[str, list[int]] | None = None
    remeasured: int = 0
    ci_extensions: int = 0
    ci_rel: float | None = None

    @property
    def measured_total_s(self) -> float:
        """Sum of the measured per-iteration times."""
        return math.fsum(self.measured_s)

    @property
    def timing_rel_diff(self) -> float:
        """(wall - sum of iteration times) / wall: how far the device timeline is from the wall."""
        return (self.wall_s - self.measured_total_s) / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def timing_consistent(self) -> bool:
        """True if event times add up to the wall time (docs/measurement.md rule 2)."""
        diff = abs(self.wall_s - self.measured_total_s)
        return diff <= max(WALL_CHECK_REL * self.wall_s, WALL_CHECK_ABS_S)


def measure(step: Callable[[], Any], timer: StepTimer, policy: IterationPolicy,
            clock: Callable[[], float] = time.perf_counter,
            check_losses: Callable[[list[Any]], None] | None = None,
            on_phase: Callable[[str], None] | None = None,
            agree: Callable[[list[float]], list[float]] | None = None,
            compiles: Callable[[], int] | None = None) -> LoopResult:
    """Run and time one configuration: first iteration, warm-up, measurement.

    Args:
        step: runs one training iteration and returns a loss handle (e.g. a device tensor; it
            is not read inside the loop).
        timer: where boundaries are marked and durations read.
        policy: warm-up and stopping rules.
        clock: host clock in seconds (injectable for tests with a fake clock).
        check_losses: called with the loss handles of the first iteration and of each warm-up
            window, after the timer has synchronised; may raise (e.g. on a NaN loss) to abort.
        on_phase: called with ``"measure"`` just before the measured segment starts.
        agree: elementwise max of a list of floats over the processes of a data-parallel run
            (see the module docstring); None for one process.
        compiles: the framework's count of compilations so far (a cheap read: it is called
            after every step); None where it has none (see the module docstring).

    Returns:
        LoopResult with every raw sample.
    """
    losses: dict[str, list[Any]] = {"first": [], "warmup": [], "measure": []}

    # 1. The first iteration, alone.
    timer.reserve(max(policy.warmup_window, 1))
    count = _Count(compiles)
    timer.start()
    h = step()
    losses["first"].append(h)
    timer.mark(h)
    first = timer.collect()[0]
    first_compiled = count.moved()
    if check_losses is not None:
        check_losses(losses["first"])
    with frozen_heap():
        return _warm_and_measure(step, timer, policy, clock, check_losses, on_phase, agree,
                                 losses, first, count, first_compiled)


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Collect, move every live object to the collector's permanent generation for the body,
    and move them back after (also on an exception); see the module docstring. Nothing where
    ``gc.freeze`` does not exist (not CPython). The collector stays enabled."""
    if not hasattr(gc, "freeze"):  # pragma: no cover - CPython has it since 3.7
        yield
        return
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


class _Count:
    """The run's compile counter (``read``: a cheap Python read, or None where the framework
    has none) and its last value seen (``last``)."""

    def __init__(self, read: Callable[[], int] | None) -> None:
        self.read = read
        self.last = read() if read is not None else 0

    def moved(self) -> bool:
        """Read the counter; True if it changed since the last read (a compile happened)."""
        if self.read is None:
            return False
        c = self.read()
        if c == self.last:
            return False
        self.last = c
        return True


def _warm_up(step: Callable[[], Any], timer: StepTimer, policy: IterationPolicy,
             clock: Callable[[], float], check_losses: Callable[[list[Any]], None] | None,
             agree: Callable[[list[float]], list[float]] | None, losses: dict[str, list[Any]],
             warm: list[float], compiled: list[int], count: _Count, time_cap_s: float
             ) -> bool | None:
    """One warm-up in windows (one sync per window, not per step), appended to ``warm`` (s),
    ``losses["warmup"]`` and ``compiled`` (indices into ``warm`` of the steps after which the
    compile counter moved). Steady when the last two windows agree (:func:`is_stable`) and
    no step in them compiled; else it stops at ``max_warmup_iters`` (counted from this
    warm-up's start) or ``time_cap_s``. Returns whether it reached steady state; None when
    warm-up is switched off (``max_warmup_iters == 0``): steady state is not looked for (the
    same on every process, so no exchange is needed)."""
    if policy.max_warmup_iters == 0:
        return None
    w, n0 = policy.warmup_window, len(warm)
    t_warm0 = clock()
    while True:
        done = len(warm) - n0
        go = done < policy.max_warmup_iters and clock() - t_warm0 < time_cap_s
        if agree is not None:  # stop when any process reached its warm-up budget
            go = agree([0.0 if go else 1.0])[0] == 0.0
        if not go:
            return False
        n = min(w, policy.max_warmup_iters - done)
        timer.start()
        window_losses = []
        for i in range(n):
            h = step()
            window_losses.append(h)
            timer.mark(h)
            if count.moved():
                compiled.append(len(warm) + i)
        warm.extend(timer.collect())
        losses["warmup"].extend(window_losses)
        if check_losses is not None:
            check_losses(window_losses)
        quiet = not compiled or compiled[-1] < len(warm) - 2 * w  # no compile in either window
        stable = (len(warm) - n0 >= max(2 * w, policy.min_warmup_iters) and quiet
                  and is_stable(warm[-2 * w:-w], warm[-w:], policy.warmup_rel_tol))
        if agree is not None:  # steady when every process is
            stable = agree([0.0 if stable else 1.0])[0] == 0.0
        if stable:
            return True


def _segment(step: Callable[[], Any], timer: StepTimer, policy: IterationPolicy,
             clock: Callable[[], float], on_phase: Callable[[str], None] | None,
             agree: Callable[[list[float]], list[float]] | None, meas_losses: list[Any],
             est: float, count: _Count, max_time_s: float
             ) -> tuple[list[float], float, list[int]]:
    """One measured segment: no host sync until the end (marks pre-allocated for the
    expected count). Returns its step times (s), its wall time (s) and the indices of the
    steps after which the compile counter moved. The counter is read per step only where the
    framework has one: a Python attribute read (docs/measurement.md, "Recompiles")."""
    expected = policy.min_iters if est <= 0 else max(policy.min_iters,
                                                     math.ceil(policy.min_time_s / est))
    fixed: int | None = None
    if agree is not None:
        # One count for every process, from the slowest estimate, within the budget.
        budget = policy.max_iters if est <= 0 else max(1, math.floor(max_time_s / est))
        fixed = int(agree([float(min(expected, policy.max_iters, max(budget, 1)))])[0])
        expected = fixed
    timer.reserve(min(policy.max_iters, int(expected * 1.25) + 8))
    min_iters, min_time = policy.min_iters, min(policy.min_time_s, max_time_s)
    max_iters, max_time = policy.max_iters, max_time_s
    if fixed is not None:  # the count alone stops the agreed segment
        min_iters, max_iters, min_time, max_time = fixed, fixed, 0.0, math.inf
    if on_phase is not None:
        on_phase("measure")
    read, last, compiled = count.read, count.last, []
    n = 0
    t0 = clock()
    timer.start()
    while True:
        h = step()
        meas_losses.append(h)
        timer.mark(h)
        n += 1
        if read is not None:
            c = read()
            if c != last:
                compiled.append(n - 1)
                last = c
        elapsed = clock() - t0
        if (n >= min_iters and elapsed >= min_time) or n >= max_iters or elapsed >= max_time:
            break
    measured = timer.collect()
    wall = clock() - t0
    count.last = last
    return measured, wall, compiled


def median_ci_rel(xs: Sequence[float]) -> float:
    """Half the width of the distribution-free 95% interval of the median of ``xs``, over the
    median: the order statistics ``x_(j)``, ``x_(k)`` with ``j, k = n/2 -+ z sqrt(n)/2``
    (the normal approximation to the binomial; Conover, *Practical Nonparametric Statistics*,
    3rd ed., 1999, sec. 3.2). A sort, no resampling: cheap enough between two segments. The
    stored interval is the bootstrap's (:mod:`dlperf.stats`); the two agree closely for the
    sample sizes a target asks for. ``inf`` for fewer than :data:`~dlperf.stats.MIN_CI_SAMPLES`
    (6) samples, too few for any 95% interval of the median, or a zero median."""
    n = len(xs)
    if n < MIN_CI_SAMPLES:
        return math.inf
    ys = sorted(xs)
    half = Z95 * math.sqrt(n) / 2.0
    j = max(0, math.floor(n / 2.0 - half) - 1)
    k = min(n - 1, math.ceil(n / 2.0 + half) - 1)
    med = statistics.median(ys)
    return (ys[k] - ys[j]) / (2.0 * med) if med > 0 else math.inf


def _extend_to_ci(step: Callable[[], Any], timer: StepTimer, policy: IterationPolicy,
                  clock: Callable[[], float], agree: Callable[[list[float]], list[float]] | None,
                  losses: dict[str, list[Any]], count: _Count, measured: list[float],
                  wall: float, moved: list[int], t_budget0: float
                  ) -> tuple[list[float], float, list[int], int, float | None]:
    """Extend the measured segment until :func:`median_ci_rel` of its steps (less the
    compiled ones) is within ``policy.ci_target_rel``, or ``max_iters`` / ``max_time_s``
    (from ``t_budget0``) run out. Each extension asks for as many steps again as were
    measured (the interval narrows as 1/sqrt(n)), capped by the budget; all processes extend
    together (``agree``). A segment whose steps drift (:func:`dlperf.stats.trend`) is not
    extended: more steps of a drift move the median further instead of narrowing its interval
    (the record's warnings say so). Returns the steps, wall (s), compile indices, extensions and the
    final relative half-width.

    The budget is counted in the segment's own pace, its wall time per step so far (the
    slowest process's where they agree), not the median step: a data-parallel extension's
    count is fixed before it starts, and sized from the median it overran the budget wherever
    slow steps lift the mean above the median (``--nproc 2``, ``--max-time 8`` measured
    9.84 s that way). So an extension starts only where a warm-up window of steps fits in
    what is left, at that pace, and asks for no more steps than fit: it ends
    within the budget, or about one step past it where the pace changes."""
    target = policy.ci_target_rel
    if target is None:
        return measured, wall, moved, 0, None
    ext = 0
    while True:
        skip = set(moved)
        clean = [x for i, x in enumerate(measured) if i not in skip] or measured
        rel = median_ci_rel(clean)
        left_s = policy.max_time_s - (clock() - t_budget0)
        pace = max(wall / len(measured), statistics.median(clean))
        if agree is not None:  # the slowest process's pace and time left decide for all
            pace, neg_left = agree([pace, -left_s])
            left_s = -neg_left
        fit = math.floor(left_s / pace) if pace > 0 else policy.max_iters
        n_more = min(len(measured), policy.max_iters - len(measured), fit)
        more = rel > target and n_more >= 1 and left_s > policy.warmup_window * pace
        if more and _drifting(clean):  # more steps of a drift move the median, not narrow it
            more = False
        if agree is not None:
            more = agree([1.0 if more else 0.0])[0] > 0.0
        if not more:
            return measured, wall, moved, ext, rel
        sub = policy.model_copy(update={"min_iters": n_more, "max_iters": n_more,
                                        "min_time_s": 0.0})
        m2, w2, moved2 = _segment(step, timer, sub, clock, None, agree, losses["measure"],
                                  pace, count, max(left_s, pace))
        moved = moved + [len(measured) + i for i in moved2]
        measured, wall, ext = measured + m2, wall + w2, ext + 1


def _drifting(xs: Sequence[float]) -> bool:
    """Whether the step times ``xs`` (s, in order) drift (:func:`dlperf.stats.trend`): the
    measured segment is then not extended for a CI target."""
    t = trend(xs) if len(xs) >= TREND_MIN_SAMPLES else None
    return bool(t is not None and t.drifting)


def _warm_and_measure(step: Callable[[], Any], timer: StepTimer, policy: IterationPolicy,
                      clock: Callable[[], float],
                      check_losses: Callable[[list[Any]], None] | None,
                      on_phase: Callable[[str], None] | None,
                      agree: Callable[[list[float]], list[float]] | None,
                      losses: dict[str, list[Any]], first: float, count: _Count,
                      first_compiled: bool) -> LoopResult:
    """Warm-up and measured segment of :func:`measure` (after its first iteration), measured
    again after a fresh warm-up while the step compiles in the measured segment (when the
    warm-up before it had settled, at most :data:`MAX_REMEASURES` times, within
    ``policy.max_time_s``; the segment left behind becomes warm-up)."""
    warm: list[float] = []
    compiled: dict[str, list[int]] = {"first": [0] if first_compiled else [], "warmup": [],
                                      "measure": []}
    steady = _warm_up(step, timer, policy, clock, check_losses, agree, losses, warm,
                      compiled["warmup"], count, policy.max_warmup_time_s)
    remeasured, t_budget0, seg_s = 0, clock(), policy.max_time_s
    while True:
        recent = warm[-policy.warmup_window:] if warm else [first]
        measured, wall, moved = _segment(step, timer, policy, clock, on_phase, agree,
                                         losses["measure"], statistics.median(recent), count,
                                         seg_s)
        if count.read is None:  # no counter: nothing known of compiles (no exchange either)
            break
        left_s = policy.max_time_s - (clock() - t_budget0)
        # what a new warm-up (two windows at least) and a new segment need of the budget
        clean = [x for i, x in enumerate(measured) if i not in set(moved)] or measured
        est = statistics.median(clean)
        keep_s = max(policy.min_time_s, policy.min_iters * est) + policy.warmup_window * est
        fits = left_s - keep_s >= 2 * policy.warmup_window * est
        # a step that compiled all through warm-up (it never settled) would compile again:
        # its compile steps are excluded instead
        again = [1.0 if moved else 0.0,
                 0.0 if steady and remeasured < MAX_REMEASURES and fits else 1.0]
        if agree is not None:  # every process measures again if any compiled
            again = agree(again)
        if again[0] == 0.0 or again[1] != 0.0:
            break
        compiled["warmup"] += [len(warm) + i for i in moved]
        warm.extend(measured)
        losses["warmup"].extend(losses["measure"])
        losses["measure"] = []
        remeasured += 1
        steady = _warm_up(step, timer, policy, clock, check_losses, agree, losses, warm,
                          compiled["warmup"], count, min(policy.max_warmup_time_s,
                                                         left_s - keep_s))
        # what is left of the budget, but never less than the segment's minimums need (a
        # window's overshoot of the warm-up at most exceeds the budget)
        seg_s = max(policy.max_time_s - (clock() - t_budget0), keep_s)
    measured, wall, moved, ext, ci_rel = _extend_to_ci(step, timer, policy, clock, agree,
                                                       losses, count, measured, wall, moved,
                                                       t_budget0)
    compiled["measure"] = moved
    return LoopResult(first_iter_s=first, warmup_s=warm, steady_state=steady,
                      measured_s=measured, wall_s=wall, losses=losses,
                      compiled_at=compiled if count.read is not None else None,
                      remeasured=remeasured, ci_extensions=ext, ci_rel=ci_rel)
