"""The host's dispatch time per iteration, measured without a profiler.

In the fused measurement the host cannot be told apart from the device: when the device is the
bottleneck the launch queue fills and the host blocks inside a launch, so the host time of a
step call equals the step time in both regimes. The performance model (docs/perfmodel.md) needs
the host's own cost ``H`` of one iteration (Python, the framework's dispatcher, the launches),
which decides whether a point is host-bound and how it scales with batch size.

:func:`probe_dispatch` measures it after the measured segment, with a few extra iterations run
from an idle device: wait for the device, read the clock, call the step, read the clock (the
host returned: ``dispatch_s``), wait for the step's output and read the clock again
(``sync_wait_s``: the device work the host did not cover). Starting from an empty queue, the
host blocks only if one iteration launches more work than the queue holds (then ``dispatch_s``
is an upper bound, which ``sync_wait_s`` near 0 shows). On a CPU device the host runs the step
itself: nothing is probed.

Cost: :data:`DISPATCH_ITERS` iterations, fewer for long steps (:data:`DISPATCH_BUDGET_S`). The
fused result is not touched.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from dlperf.measure.breakdown.trace import time_stats

#: Probe iterations (each from an idle device), and the time they may take at most (s).
DISPATCH_ITERS = 5
DISPATCH_BUDGET_S = 1.0
METHOD = ("untraced: per iteration, wait for the device, time the step call on the host "
          "(dispatch_s) and the wait for its output after it returned (sync_wait_s)")


def probe_count(step_median_s: float | None, n: int = DISPATCH_ITERS,
                budget_s: float = DISPATCH_BUDGET_S) -> int:
    """Probe iterations for a step of ``step_median_s`` seconds: ``n``, fewer so that they take
    at most ``budget_s`` (at least 1; ``n`` when the step time is unknown)."""
    if not step_median_s or step_median_s <= 0:
        return n
    return max(1, min(n, int(budget_s // step_median_s)))


def probe_dispatch(step: Callable[[], Any], wait: Callable[[Any], Any], n: int,
                   clock: Callable[[], float] = time.perf_counter) -> dict[str, Any]:
    """Host dispatch time and device wait of ``n`` iterations, each started from an idle device.

    Args:
        step: one training iteration; returns a handle to its output (the loss).
        wait: blocks until a handle's value is ready (e.g. reads the loss).
        n: iterations to probe (>= 1); one more runs first, unmeasured, to drain the device.
        clock: host clock in seconds.

    Returns:
        ``{"dispatch_s": stats, "sync_wait_s": stats, "dispatch_samples": [s],
        "sync_wait_samples": [s], "iters": n, "method": METHOD}``; stats are
        ``{"median", "mean", "min", "max"}`` in seconds per iteration.

    Raises:
        ValueError: ``n`` < 1. Whatever ``step``/``wait`` raise.
    """
    if n < 1:
        raise ValueError(f"probe_dispatch needs n >= 1 iterations, got {n}")
    wait(step())
    disp: list[float] = []
    sync: list[float] = []
    for _ in range(n):
        t0 = clock()
        h = step()
        t1 = clock()
        wait(h)
        t2 = clock()
        disp.append(t1 - t0)
        sync.append(t2 - t1)
    return {"dispatch_s": time_stats(disp), "sync_wait_s": time_stats(sync), "dispatch_samples": disp,
            "sync_wait_samples": sync, "iters": n, "method": METHOD}
