"""The fake framework's clock: virtual seconds that move only when something "takes time".

The fake adapter (:mod:`dlperf.frameworks.fake.adapter`) never sleeps to make a step last
its option ``step_s``: it advances a :class:`FakeClock` by that much, and every clock of the
run reads the same object (the step timer, the harness's loop, the phase timer, the data-wait
recorder, the fake trace). So a fake run's timing arithmetic is exact (a step *is* its scripted
duration, the phases add up to the fused step) and a run of 1 s of measurement costs
microseconds of real time. Unit tests that script durations themselves use the same class
(``tests/fakes.py``).
"""

from __future__ import annotations


class FakeClock:
    """A monotonic clock, in seconds, that only moves when told.

    Call it to read the time (as ``time.perf_counter``); :meth:`advance` moves it forward, as
    ``time.sleep`` would move a real clock; tests may also set :attr:`t` directly.

    Args:
        t: the starting time in seconds.
    """

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        """The current time in seconds."""
        return self.t

    def advance(self, dt_s: float) -> None:
        """Move the clock ``dt_s`` seconds forward.

        Raises:
            ValueError: ``dt_s`` is negative (a clock that goes back breaks every interval).
        """
        if dt_s < 0:
            raise ValueError(f"a clock only moves forward: advance({dt_s!r}) is negative")
        self.t += dt_s
