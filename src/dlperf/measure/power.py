"""Power and energy of the measured segment, from NVML, sampled on a background thread.

:class:`PowerSampler` starts right before the measured iterations (the worker's
``on_phase("measure")``) and stops right after them. Between, a daemon thread wakes every
``interval_s`` (default 25 ms), reads the board power and the device memory in use, and sleeps
again. The power is NVML's instantaneous reading (``nvmlDeviceGetFieldValues`` of
``NVML_FI_DEV_POWER_INSTANT``) where the driver offers it, else ``nvmlDeviceGetPowerUsage``,
which on Ampere and newer is a 1 s average (25 ms samples of it are smoothed); the result's
``power_source`` says which (:func:`dlperf.nvml.power_reader`). Energy from the counter (below)
is unaffected by the choice. It cannot slow the measured loop down much:

* it sleeps in ``threading.Event.wait``, which releases the GIL, and pynvml's ctypes calls
  release it too while the driver answers; the thread holds the GIL only for a few Python lines
  per sample (tens of microseconds every 25 ms, about 0.1% of one core: measured with
  ``benchmarks/sampler_cost.py``, see the README);
* it never touches the device's streams.

Energy: NVML's total-energy counter (``nvmlDeviceGetTotalEnergyConsumption``, mJ since the driver
loaded; Volta and newer) read at start and stop is preferred: it integrates the board's own
power readings at its internal rate. Otherwise the samples are integrated by the trapezoidal
rule over the window. Then (:func:`energy_summary`)::

    mean power P [W]            = energy over the window / window length
    energy per iteration [J]    = P x (sum of measured iteration times) / iterations
    samples per joule           = global batch / energy per iteration

A CPU run has no NVML power: the fields are None and ``reason`` says why.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: Raw power samples kept in a result (a 60 s measurement at 25 ms has 2,400).
MAX_STORED_SAMPLES = 20_000


@dataclass
class PowerRecord:
    """What one sampling window produced (times in seconds from the sampler's clock)."""

    t_start: float
    t_stop: float
    times_s: list[float] = field(default_factory=list)
    watts: list[float] = field(default_factory=list)
    energy_start_j: float | None = None
    energy_stop_j: float | None = None
    memory_used_peak_bytes: int | None = None
    errors: int = 0
    power_source: str | None = None


def trapezoid_energy_j(times_s: list[float], watts: list[float]) -> float | None:
    """Integral of power over time by the trapezoidal rule (J); None with fewer than 2 samples.

    Exact for power that is piecewise linear between the samples.
    """
    if len(times_s) < 2:
        return None
    return math.fsum((times_s[i + 1] - times_s[i]) * (watts[i] + watts[i + 1]) / 2
                     for i in range(len(times_s) - 1))


class PowerSampler:
    """Samples power (and memory) on a background thread between :meth:`start` and :meth:`stop`.

    Args:
        read_power_w: returns the current board power in watts.
        read_energy_j: returns the device's cumulative energy counter in joules, or None where
            the device has none.
        read_memory_used: returns device memory in use (bytes), or None.
        interval_s: time between samples.
        clock: monotonic host clock in seconds (injectable for tests).
        power_source: which reading ``read_power_w`` is (e.g. ``nvml_field_power_instant``),
            copied into each :class:`PowerRecord`; default: ``read_power_w.source`` if it has
            one (:class:`dlperf.nvml.PowerReader`), else None.

    A reader that raises is counted in ``errors`` and skipped, never propagated into the run.
    """

    def __init__(self, read_power_w: Callable[[], float],
                 read_energy_j: Callable[[], float] | None = None,
                 read_memory_used: Callable[[], int | None] | None = None,
                 interval_s: float = 0.025,
                 clock: Callable[[], float] = time.perf_counter,
                 power_source: str | None = None) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be > 0")
        self.power_source = power_source or getattr(read_power_w, "source", None)
        self._power, self._energy, self._mem = read_power_w, read_energy_j, read_memory_used
        self.interval_s, self._clock = interval_s, clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._rec: PowerRecord | None = None

    def _record(self) -> PowerRecord:
        """The record :meth:`start` began; RuntimeError before the first start."""
        if self._rec is None:
            raise RuntimeError("PowerSampler: start() was not called")
        return self._rec

    def _sample(self) -> None:
        rec = self._record()
        try:
            w = float(self._power())
            t = self._clock()
            rec.times_s.append(t)
            rec.watts.append(w)
            if self._mem is not None:
                m = self._mem()
                if m is not None and (rec.memory_used_peak_bytes is None
                                      or m > rec.memory_used_peak_bytes):
                    rec.memory_used_peak_bytes = int(m)
        except Exception:  # noqa: BLE001 - a failed read must never disturb the run
            rec.errors += 1

    def _read_energy(self) -> float | None:
        if self._energy is None:
            return None
        try:
            return float(self._energy())
        except Exception:  # noqa: BLE001
            self._record().errors += 1
            return None

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):  # releases the GIL while waiting
            self._sample()

    def start(self) -> None:
        """Read the energy counter and a first sample, then start the thread. A second start
        (a segment measured again after a recompile) first stops the running thread, so the
        record covers the last segment and one thread samples it."""
        if self._thread is not None and self._thread.is_alive():
            self._stop.set()
            self._thread.join(timeout=5.0)
        rec = self._rec = PowerRecord(t_start=math.nan, t_stop=math.nan,
                                      power_source=self.power_source)
        # Each clock read right after its energy read: the window matches the counter's.
        rec.energy_start_j = self._read_energy()
        rec.t_start = self._clock()
        self._sample()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="dlperf-power", daemon=True)
        self._thread.start()

    def stop(self) -> PowerRecord:
        """Stop the thread, take a last sample and read the energy counter; return the record."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        self._sample()
        rec = self._record()
        rec.energy_stop_j = self._read_energy()
        rec.t_stop = self._clock()
        return rec


def energy_summary(rec: PowerRecord | None, measured_time_s: float, n_iters: int,
                   batch_size: int, reason: str | None = None) -> dict[str, Any]:
    """Energy of the measured segment (see the module docstring for the formulas).

    Args:
        rec: the sampler's record, or None (no power measurement; then ``reason``).
        measured_time_s: sum of the measured iteration times (s).
        n_iters: measured iterations.
        batch_size: global batch (samples per iteration).
        reason: why there is no record.

    Returns:
        ``available``, ``reason``, ``energy_source`` (``"nvml_total_energy"`` or
        ``"sampled_power_trapezoid"``), ``window_s``, ``energy_j`` (over the window),
        ``mean_power_w``, ``energy_per_iter_j``, ``samples_per_j``, ``sampled_mean_power_w``,
        ``n_samples``, ``interval_s`` (mean between samples), ``memory_used_peak_bytes``,
        ``read_errors``, ``power_source`` (the NVML reading sampled: ``nvml_field_power_instant``
        or ``nvml_power_usage``, the 1 s average), ``power_times_s`` (relative to the window
        start) and ``power_w``.
    """
    none: dict[str, Any] = {"available": False, "reason": reason, "energy_source": None, "window_s": None,
            "energy_j": None, "mean_power_w": None, "energy_per_iter_j": None,
            "samples_per_j": None, "sampled_mean_power_w": None, "n_samples": 0,
            "interval_s": None, "memory_used_peak_bytes": None, "read_errors": None,
            "power_source": None, "power_times_s": [], "power_w": []}
    if rec is None:
        return none
    window = rec.t_stop - rec.t_start
    e_counter = (rec.energy_stop_j - rec.energy_start_j
                 if rec.energy_start_j is not None and rec.energy_stop_j is not None else None)
    e_trap = trapezoid_energy_j(rec.times_s, rec.watts)
    if e_counter is not None and e_counter > 0:
        energy, source = e_counter, "nvml_total_energy"
    elif e_trap is not None:
        energy, source = e_trap, "sampled_power_trapezoid"
        window = rec.times_s[-1] - rec.times_s[0]
    else:
        return {**none, "reason": "no power readings (NVML power query failed)",
                "read_errors": rec.errors, "power_source": rec.power_source}
    mean_p = energy / window if window > 0 else None
    per_iter = mean_p * measured_time_s / n_iters if mean_p is not None and n_iters else None
    n = len(rec.times_s)
    t0 = rec.times_s[0] if n else rec.t_start
    keep = range(0, n, max(1, math.ceil(n / MAX_STORED_SAMPLES)))
    return {"available": True, "reason": None, "energy_source": source, "window_s": window,
            "energy_j": energy, "mean_power_w": mean_p, "energy_per_iter_j": per_iter,
            "samples_per_j": batch_size / per_iter if per_iter else None,
            "sampled_mean_power_w": (e_trap / (rec.times_s[-1] - rec.times_s[0])
                                     if e_trap is not None and rec.times_s[-1] > rec.times_s[0]
                                     else None),
            "n_samples": n, "interval_s": (rec.times_s[-1] - rec.times_s[0]) / (n - 1)
            if n > 1 else None,
            "memory_used_peak_bytes": rec.memory_used_peak_bytes, "read_errors": rec.errors,
            "power_source": rec.power_source, "power_times_s": [rec.times_s[i] - t0 for i in keep],
            "power_w": [rec.watts[i] for i in keep]}
