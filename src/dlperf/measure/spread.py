"""Warnings about where a run's CPU time came from: bimodal samples and the threads of
data-parallel CPU ranks (part of :func:`dlperf.measure.warnings.quality_warnings`).

Bimodal samples: on a busy 2-core host, a run with the framework's default threads (every
CPU) timed 2 ms and 430 ms steps in one measured segment and was stored ``ok`` with the 2 ms
median: threads that wait for a CPU taken by other work stall the whole step. The median is
then the fast mode and says nothing of the slow one. :func:`bimodal_warning` flags a segment
whose slowest decile starts above :data:`BIMODAL_RATIO` times the median (Linux's CFS gives a
waiting thread a slice of several ms; a step that lost one is many times a short step).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from dlperf.results.schema import RunRecord

__all__ = ["BIMODAL_RATIO", "BIMODAL_MIN_SAMPLES", "bimodal_warning", "rank_threads_warning",
           "spread_warnings"]

#: The slowest decile of the measured steps starting above this many medians is two speeds.
BIMODAL_RATIO = 10.0
#: Fewer measured steps than this have no decile to speak of: not judged.
BIMODAL_MIN_SAMPLES = 10


def bimodal_warning(samples_s: Sequence[float | None]) -> str | None:
    """A warning when the measured step times ``samples_s`` (s) are bimodal: the fastest of
    the slowest decile (the ``n - ceil(n / 10)``-th smallest) is over :data:`BIMODAL_RATIO`
    times the median; None otherwise, and for fewer than :data:`BIMODAL_MIN_SAMPLES` finite
    samples."""
    xs = sorted(float(x) for x in samples_s if x is not None and math.isfinite(x))
    n = len(xs)
    if n < BIMODAL_MIN_SAMPLES:
        return None
    med = statistics.median(xs)
    tail = xs[n - math.ceil(n / 10)]
    if not med > 0 or tail <= BIMODAL_RATIO * med:
        return None
    slow = sum(x > BIMODAL_RATIO * med for x in xs)
    return (f"bimodal step times: {slow} of {n} measured steps took over {BIMODAL_RATIO:g}x "
            f"the median ({med * 1e3:.3g} ms; the slowest decile from {tail * 1e3:.3g} ms): "
            "the median is the fast mode only. Usually a busy host (other work on the CPUs the "
            "framework's threads use); measure on a quiet host, with fewer --threads or with "
            "--cpu-bind, and --rerun")


def rank_threads_warning(r: RunRecord) -> str | None:
    """A warning for a data-parallel CPU run whose threads were not given: each rank ran the
    launchers' one thread (``env.thread_policy``, :func:`dlperf.worker.rank_thread_policy`),
    while a one-device run without ``--threads`` takes the thread policy's count, so an
    efficiency against such a baseline may compare thread counts too; None for other runs."""
    ident = r.identity
    if ident.device != "cpu" or (ident.world_size or 1) < 2 or ident.threads is not None:
        return None
    t = (r.flags or {}).get("threads")
    per = f"{t} thread(s)" if isinstance(t, int) else "the launcher's default threads"
    return (f"each of the {ident.world_size} CPU ranks ran {per} (--threads not given); a "
            "one-device run without --threads takes the thread policy's count (every usable "
            "CPU on a quiet host), so a scaling efficiency against it may measure threads as "
            "well as devices (the scaling table says when): give the same --threads to both")


def spread_warnings(r: RunRecord) -> list[str]:
    """:func:`bimodal_warning` of the measured steps and :func:`rank_threads_warning`, those
    that apply."""
    return [w for w in (bimodal_warning(r.measured_s), rank_threads_warning(r)) if w]
