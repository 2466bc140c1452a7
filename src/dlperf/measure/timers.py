"""Step timers: where the time of each iteration is read.

A timer records a *mark* at each iteration boundary and, when asked, returns the durations
between consecutive marks. It is the only thing the measured loop knows about the device:

* :class:`HostTimer` reads a host clock. Correct only where the step is synchronous (PyTorch on
  the CPU), or in tests with a fake clock.
* :class:`CudaEventTimer` records CUDA events in the stream (docs/measurement.md rule 2): recording
  an event does not block the host, so the CPU can run ahead exactly as in an unmeasured loop;
  the durations are read after the loop, with one synchronisation.

* :class:`LaggedSyncTimer` is for frameworks without device events in their API (JAX): at
  the mark after step *i* it waits for the output of step *i - lag* and reads the host clock, so
  the durations are intervals between step completions while ``lag`` steps stay queued on the
  device (the device never waits for the host unless the host is the bottleneck anyway).

All expose ``start()``, ``mark(handle)``, ``collect() -> list[float]`` (seconds) and
``reserve(n)``; ``handle`` is what the step returned (its loss), used only by the lagged timer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol


class StepTimer(Protocol):
    """Protocol of a per-iteration timer (durations in seconds)."""

    def reserve(self, n: int) -> None:
        """Prepare for ``n`` marks, so that ``mark()`` allocates nothing in the timed loop."""

    def start(self) -> None:
        """Begin a segment: record the first boundary."""

    def mark(self, handle: Any = None) -> None:
        """Record the boundary after one iteration; ``handle`` is the step's output."""

    def collect(self) -> list[float]:
        """Wait for the device, return the durations between consecutive marks of the segment."""


class HostTimer:
    """Marks read from a host clock (``time.perf_counter`` by default; injectable for tests).

    Args:
        clock: a function returning seconds as a float, monotonic.
        sync: called before each read in ``collect`` (nothing for synchronous devices).
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter,
                 sync: Callable[[], Any] | None = None) -> None:
        self._clock = clock
        self._sync = sync
        self._marks: list[float] = []

    def reserve(self, n: int) -> None:  # noqa: D102 - nothing to pre-allocate
        pass

    def start(self) -> None:  # noqa: D102
        self._marks = [self._clock()]

    def mark(self, handle: Any = None) -> None:  # noqa: D102
        self._marks.append(self._clock())

    def collect(self) -> list[float]:  # noqa: D102
        if self._sync is not None:
            self._sync()
        m = self._marks
        return [m[i + 1] - m[i] for i in range(len(m) - 1)]


class CudaEventTimer:
    """CUDA events recorded on the current stream at each boundary (no host synchronisation).

    Events are created ahead of the loop by :meth:`reserve` and reused across segments, so the
    timed loop only calls ``Event.record`` (a few microseconds of host time, asynchronous).

    Args:
        torch: the imported ``torch`` module (passed in so this module never imports it).
    """

    def __init__(self, torch: Any) -> None:
        self._torch = torch
        self._pool: list[Any] = []
        self._n = 0
        self._stream: Any = None

    def reserve(self, n: int) -> None:  # noqa: D102
        Event = self._torch.cuda.Event
        while len(self._pool) < n + 1:
            self._pool.append(Event(enable_timing=True))

    def start(self) -> None:  # noqa: D102
        self._n = 0
        # Resolved once per segment: Event.record() without a stream looks the current stream
        # up and builds a Python Stream object on every call (host time inside the loop).
        self._stream = self._torch.cuda.current_stream()
        self.mark()

    def mark(self, handle: Any = None) -> None:  # noqa: D102
        if self._n >= len(self._pool):  # outside the reserved range: grow (rare)
            self.reserve(2 * len(self._pool) + 16)
        self._pool[self._n].record(self._stream)
        self._n += 1

    def collect(self) -> list[float]:  # noqa: D102
        ev = self._pool[: self._n]
        if not ev:
            return []
        ev[-1].synchronize()
        # Event.elapsed_time is in milliseconds (resolution about 0.5 us, CUDA docs).
        return [ev[i].elapsed_time(ev[i + 1]) * 1e-3 for i in range(len(ev) - 1)]


class LaggedSyncTimer:
    """Completion times read on the host, ``lag`` steps behind the dispatch.

    Args:
        block: waits until a step's output (the handle passed to :meth:`mark`) is computed,
            e.g. ``jax.block_until_ready``. All outputs of one compiled step become ready
            together, so the loss stands for the updated parameters too.
        lag: how many dispatched steps may be in flight when the clock is read (>= 1).
        clock: host clock in seconds.
    """

    def __init__(self, block: Callable[[Any], Any], lag: int = 2,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        if lag < 1:
            raise ValueError("lag must be >= 1")
        self._block, self._lag, self._clock = block, lag, clock
        self._pending: list[Any] = []
        self._times: list[float] = []

    def reserve(self, n: int) -> None:  # noqa: D102 - nothing to pre-allocate
        pass

    def start(self) -> None:  # noqa: D102
        self._pending = []
        self._times = [self._clock()]

    def mark(self, handle: Any = None) -> None:  # noqa: D102
        self._pending.append(handle)
        if len(self._pending) > self._lag:
            self._block(self._pending.pop(0))
            self._times.append(self._clock())

    def collect(self) -> list[float]:  # noqa: D102
        while self._pending:
            self._block(self._pending.pop(0))
            self._times.append(self._clock())
        t = self._times
        return [t[i + 1] - t[i] for i in range(len(t) - 1)]
