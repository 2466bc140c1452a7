"""The host under the measurement: is it busy, and did the measuring thread wait for a CPU?

A busy machine inflates host-bound step times without any error, so a record says so in its
warnings (docs/measurement.md): :func:`busy_host_warning` reads the environment taken as the run
started (:func:`dlperf.env.collect_env`); :class:`RunDelay` reads the kernel's schedstat around
the measured segment, and :func:`cpu_wait` turns it into the thread's wait for a CPU, which
:func:`host_warnings` compares with :data:`CPU_WAIT_WARN`, beside oversubscribed threads.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from dlperf.results.schema import HostCpuWait, RunRecord
from dlperf.results.view import setting

__all__ = ["CPU_WAIT_WARN", "RunDelay", "thread_run_delay_ns", "cpu_wait", "busy_host_warning",
           "host_warnings", "host_checks"]

#: Share of the measured segment the measuring thread may wait for a CPU before a warning.
CPU_WAIT_WARN = 0.05


def thread_run_delay_ns() -> int | None:
    """Time this thread has spent runnable but waiting for a CPU (ns), from the kernel's
    schedstat (``/proc/thread-self/schedstat``, second field; Linux ``Documentation/scheduler/
    sched-stats.rst``); None where it is not available."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None


class RunDelay:
    """The measuring thread's schedstat run delay (ns) read right before and right after the
    measured segment (:meth:`start`, :meth:`stop`); None where unavailable or not read."""

    def __init__(self) -> None:
        self.start_ns: int | None = None
        self.end_ns: int | None = None
        self.wall_ns: int | None = None
        self._t0 = 0

    # The wall window encloses the two readings (its clock read before the first, after the
    # second): a wait for a CPU between the clock and a reading is counted in both, so the
    # share stays at most 1.
    def start(self) -> None:  # noqa: D102
        self._t0 = time.perf_counter_ns()
        self.start_ns = thread_run_delay_ns()

    def stop(self) -> None:  # noqa: D102
        self.end_ns = thread_run_delay_ns()
        self.wall_ns = time.perf_counter_ns() - self._t0 if self.start_ns is not None else None

    def as_dict(self) -> dict[str, int | None]:
        """``{"start": ns, "end": ns, "wall": ns}``, as :func:`cpu_wait` takes it: ``wall`` is
        the host time between the two readings, the window the run delay was counted over."""
        return {"start": self.start_ns, "end": self.end_ns, "wall": self.wall_ns}


def cpu_wait(run_delay: Mapping[str, int | None] | None, wall_s: float | None
             ) -> dict[str, float] | None:
    """The measuring thread's wait for a CPU over the measured segment: ``seconds`` and
    ``share`` of the wall time of the window the two schedstat readings bound (``wall`` in
    ns, when :class:`RunDelay` recorded it; else ``wall_s``, the segment's). The readings
    bracket the segment and a little around it, so the window's own wall time is the
    denominator: a thread descheduled just outside the segment cannot make the share exceed
    1. None without both schedstat readings."""
    if not run_delay:
        return None
    start, end = run_delay.get("start"), run_delay.get("end")
    if start is None or end is None:
        return None
    window = run_delay.get("wall")
    denom = window / 1e9 if window else wall_s
    if not denom:
        return None
    sec = (end - start) / 1e9
    return {"seconds": sec, "share": sec / denom}


def busy_host_warning(env: Mapping[str, Any]) -> str | None:
    """A warning when the host was already busy as the run started.

    Pinned to some of the machine's CPUs (``usable_cpu_busy_percent`` present): busy when the
    usable CPUs, less the busiest one (this worker itself), were on average at least half busy.
    Otherwise: when the 1-minute load average (processes running or waiting for a CPU) is at
    least the number of CPUs this process may use."""
    per, cpus = env.get("usable_cpu_busy_percent"), env.get("cpu_affinity")
    if per is not None:
        others = sorted(per)[:-1]
        if not others:  # pinned to one CPU: nothing to tell this worker's load from others'
            return None
        busy = sum(others) / len(others)
        if busy >= 50.0:
            return (f"the host was busy when this ran (the other CPUs this run may use were "
                    f"{busy:.0f}% busy): host-bound timings are unreliable; rerun on a quiet "
                    "machine")
        return None
    load = env.get("load_average_1_5_15")
    if load and cpus and load[0] >= cpus:
        return (f"the host was busy when this ran (load average {load[0]:.1f} on {cpus} usable "
                "CPUs): host-bound timings are unreliable; rerun on a quiet machine")
    return None


def host_warnings(threads: int | None, usable_cpus: int | None,
                  cw: Mapping[str, float] | None) -> list[str]:
    """Warnings about the CPUs during a measured run: ``threads`` framework threads on fewer
    ``usable_cpus`` (oversubscribed), and the measuring thread's CPU wait ``cw``
    (:func:`cpu_wait`) at :data:`CPU_WAIT_WARN` or more of the segment."""
    w: list[str] = []
    over = bool(threads and usable_cpus and threads > usable_cpus)
    if over:
        w.append(f"{threads} threads on {usable_cpus} usable CPUs: the framework's own threads "
                 "take turns on the cores (oversubscribed), which measures the "
                 f"oversubscription, not the model; use --threads {usable_cpus} or fewer")
    if cw and cw["share"] >= CPU_WAIT_WARN:
        w.append(f"the measuring thread waited for a CPU {cw['share']:.0%} of the measured time "
                 + ("(its own framework's threads, more than the CPUs, and any other work)"
                    if over else "(other work on its CPUs during the run)")
                 + ": host-bound timings are unreliable; rerun on a quiet machine")
    return w


def host_checks(rec: RunRecord, env: Mapping[str, Any], delay: RunDelay, measured: bool,
                host_clock: bool = True) -> None:
    """Add to a finished record's warnings: the input pipeline's own (``data_info``), the
    busy-host warning (:func:`busy_host_warning`) and, for a measured ``ok`` run, set its
    ``host_cpu_wait`` (:func:`cpu_wait` over ``delay``; not where the timings are not host
    time, ``host_clock`` False: the fake framework's virtual clock, whose measured segment
    lasts microseconds) and add :func:`host_warnings`. A record without a warnings list (a
    failure) is left alone."""
    if rec.warnings is None:
        return
    pipe = (rec.data_info or {}).get("pipeline")
    warns = [str(w) for w in pipe.get("warnings") or []] if isinstance(pipe, dict) else []
    busy = busy_host_warning(env)
    warns += [busy] if busy else []
    if measured and rec.identity.status == "ok":
        cw = (cpu_wait(delay.as_dict(), rec.timing.wall_time_s if rec.timing else None)
              if host_clock else None)
        rec.host_cpu_wait = HostCpuWait.model_validate(cw) if cw is not None else None
        warns += host_warnings(setting(rec, "threads"),
                               env.get("cpu_affinity"), cw)
    rec.warnings = [*rec.warnings, *warns]
