"""Power sampling around the measured segment: on where NVML can read the run's GPU, off with
a reason elsewhere (the sampler itself: :mod:`dlperf.measure.power`)."""

from __future__ import annotations

from dlperf.measure.power import PowerRecord, PowerSampler

__all__ = ["PowerControl"]


class PowerControl:
    """Starts and stops NVML power sampling around the measured segment (dlperf.measure.power).

    ``nvml_target``: ``(uuid or None, NVML index)`` of the run's GPU, None on a CPU;
    ``interval_s``: seconds between samples. ``reason`` says why there is no sampling (a CPU
    run, no NVML) when it is off; :meth:`stop` then returns None.
    """

    def __init__(self, nvml_target: tuple[str | None, int] | None, interval_s: float) -> None:
        self.sampler: PowerSampler | None = None
        self.reason: str | None = None
        self._started = False
        if nvml_target is None:
            self.reason = "not a GPU run: NVML measures NVIDIA GPUs only"
            return
        from dlperf import nvml

        readers, why = nvml.power_readers(*nvml_target)
        if readers is None:
            self.reason = why
            return
        p, e, m = readers
        self.sampler = PowerSampler(p, e, m, interval_s=interval_s)

    def start(self) -> None:  # noqa: D102
        if self.sampler is not None and not self._started:
            self.sampler.start()
            self._started = True

    def stop(self) -> PowerRecord | None:  # noqa: D102
        if self.sampler is None or not self._started:
            return None
        self._started = False
        return self.sampler.stop()
