"""The measured loop with a fake clock: exact warm-up, stopping and timing arithmetic."""

from __future__ import annotations

import math
import time

import pytest

from dlperf.config import IterationPolicy
from dlperf.frameworks import NonFiniteLoss
from dlperf.measure.loop import measure
from dlperf.measure.timers import HostTimer
from fakes import FakeClock


def scripted_step(clock: FakeClock, durations):
    """A step whose n-th call takes durations[n] (the last value repeats)."""
    it = iter(durations)
    last = [None]
    count = [0]

    def step():
        try:
            last[0] = next(it)
        except StopIteration:
            pass
        clock.t += last[0]
        count[0] += 1
        return float(count[0])

    step.count = count
    return step


def run(durations, **policy):
    clock = FakeClock()
    step = scripted_step(clock, durations)
    res = measure(step, HostTimer(clock=clock), IterationPolicy(**policy), clock=clock)
    return res, step


def test_first_iteration_and_warmup_recorded_apart_and_steady_state_detected():
    # first 0.5 s; warm-up window 1 = [.375,.25,.25,.125,.125] (median .25);
    # window 2 = five x .125 (median .125, 50% off -> not stable); window 3 = .125 -> stable.
    durations = [0.5, 0.375, 0.25, 0.25, 0.125, 0.125] + [0.125] * 200
    res, _ = run(durations, min_iters=20, min_time_s=3.0, warmup_window=5, min_warmup_iters=10)
    assert res.first_iter_s == 0.5
    assert res.warmup_s == [0.375, 0.25, 0.25, 0.125, 0.125] + [0.125] * 10
    assert res.steady_state is True
    # stop rule: n >= 20 and elapsed >= 3.0 s -> 24 iterations of 0.125 s (24 * 0.125 = 3.0).
    assert len(res.measured_s) == 24
    assert all(t == 0.125 for t in res.measured_s)
    assert res.wall_s == 3.0 and res.measured_total_s == 3.0
    assert res.timing_consistent


def test_min_count_dominates_when_steps_are_slow():
    res, _ = run([1.0], min_iters=7, min_time_s=0.5, warmup_window=2, min_warmup_iters=0)
    assert len(res.measured_s) == 7


def test_max_iters_and_time_budget_cap_the_measurement():
    res, _ = run([0.25], min_iters=10, min_time_s=100.0, max_time_s=100.0, max_iters=13,
                 warmup_window=2, min_warmup_iters=0)
    assert len(res.measured_s) == 13
    res, _ = run([0.25], min_iters=1000, min_time_s=2.0, max_time_s=2.0, max_iters=5000,
                 warmup_window=2, min_warmup_iters=0)
    assert len(res.measured_s) == 8  # 8 * 0.25 = 2.0 s budget


def test_unstable_warmup_is_flagged_not_hidden():
    # Windows of 5 alternate between median 0.125 and median 0.375: never stable.
    alternating = [0.125, 0.375] * 500
    res, _ = run([0.5] + alternating, warmup_window=5, max_warmup_iters=40, min_iters=5,
                 min_time_s=0.0)
    assert res.steady_state is False
    assert len(res.warmup_s) == 40


def test_loss_handles_kept_per_phase_and_check_can_abort():
    clock = FakeClock()
    step = scripted_step(clock, [0.125])
    res = measure(step, HostTimer(clock=clock),
                  IterationPolicy(min_iters=3, min_time_s=0.0, warmup_window=2, min_warmup_iters=0),
                  clock=clock)
    assert res.losses["first"] == [1.0]
    n_w = len(res.warmup_s)
    assert res.losses["warmup"] == [float(i) for i in range(2, 2 + n_w)]
    assert len(res.losses["measure"]) == len(res.measured_s) == 3

    def check(handles):
        if any(h >= 3 for h in handles):
            raise NonFiniteLoss("boom")

    clock = FakeClock()
    with pytest.raises(NonFiniteLoss):
        measure(scripted_step(clock, [0.125]), HostTimer(clock=clock),
                IterationPolicy(warmup_window=2), clock=clock, check_losses=check)


def test_known_duration_op_reports_at_least_its_duration():
    # docs/measurement.md rule 1 on the CPU with the real clock: a 5 ms sleep per step.
    res = measure(lambda: time.sleep(0.005), HostTimer(),
                  IterationPolicy(min_iters=5, min_time_s=0.0, warmup_window=2,
                                  min_warmup_iters=0, max_warmup_iters=4))
    assert min(res.measured_s) >= 0.005
    assert res.timing_consistent


def test_wall_mismatch_is_detected():
    # A timer that under-reports: the wall check must catch it.
    class HalfTimer(HostTimer):
        def collect(self):
            return [t / 2 for t in super().collect()]

    clock = FakeClock()
    res = measure(scripted_step(clock, [0.125]), HalfTimer(clock=clock),
                  IterationPolicy(min_iters=10, min_time_s=0.0, warmup_window=2,
                                  min_warmup_iters=0), clock=clock)
    assert not res.timing_consistent
    assert math.isclose(res.timing_rel_diff, 0.5)


@pytest.mark.gpu
def test_cuda_events_see_a_known_duration_kernel():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from dlperf.measure.timers import CudaEventTimer

    # Calibrate torch.cuda._sleep (spins N cycles) against a synchronised host clock.
    torch.cuda._sleep(1000)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    torch.cuda._sleep(50_000_000)
    torch.cuda.synchronize()
    dur = time.perf_counter() - t0
    res = measure(lambda: torch.cuda._sleep(50_000_000), CudaEventTimer(torch),
                  IterationPolicy(min_iters=5, min_time_s=0.0, warmup_window=2,
                                  min_warmup_iters=0, max_warmup_iters=2))
    assert min(res.measured_s) >= 0.9 * dur
    assert res.timing_consistent


def test_lagged_sync_timer_reads_completion_intervals():
    # A fake asynchronous device: step i completes at 0.25 * (i + 1) s; blocking on a handle
    # advances the clock to that completion time (if not already past it).
    from dlperf.measure.timers import LaggedSyncTimer

    clock = FakeClock()
    blocked = []

    def block(h):
        blocked.append(h)
        clock.t = max(clock.t, h)

    timer = LaggedSyncTimer(block, lag=2, clock=clock)
    timer.start()
    for i in range(6):
        timer.mark(0.25 * (i + 1))  # dispatch is instantaneous on the host
        # with lag 2, after marking step i only steps <= i - 2 have been waited for
        assert blocked == [0.25 * (k + 1) for k in range(max(0, i - 1))]
    assert timer.collect() == [0.25] * 6
    with pytest.raises(ValueError):
        LaggedSyncTimer(block, lag=0)


@pytest.mark.gc_state
def test_heap_frozen_while_measuring_and_restored_after():
    """dlperf's own objects are moved out of the collector's reach (gc.freeze) from the warm-up
    on, the collector stays enabled, and the freeze is undone after measure(), also on error."""
    import gc

    seen = []
    clock = FakeClock()
    inner = scripted_step(clock, [0.01])

    def step():
        seen.append((gc.get_freeze_count(), gc.isenabled()))
        return inner()

    assert gc.get_freeze_count() == 0
    measure(step, HostTimer(clock=clock), IterationPolicy(min_iters=5, min_time_s=0.0,
                                                          warmup_window=2), clock=clock)
    assert seen[0][0] == 0  # the first iteration runs before the freeze
    assert all(n > 1000 and on for n, on in seen[1:])  # warm-up and measurement: frozen, gc on
    assert gc.get_freeze_count() == 0

    def failing():
        if len(seen) > 3:
            raise RuntimeError("boom")
        return step()

    seen.clear()
    with pytest.raises(RuntimeError):
        measure(failing, HostTimer(clock=clock), IterationPolicy(min_iters=5), clock=clock)
    assert gc.get_freeze_count() == 0
