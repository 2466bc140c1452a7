"""Warnings about where a run's CPU time came from: bimodal samples and the threads of
data-parallel CPU ranks (part of :func:`dlperf.measure.warnings.quality_warnings`).

Bimodal samples: on a busy 2-core host, a run with the framework's default threads (every
CPU) timed 2 ms and 430 ms steps in one measured segment and was stored ``ok`` with the 2 ms
median: threads that wait for a CPU taken by other work stall the whole step. The median is
then the fast mode and says nothing of the slow one. :func:`bimodal_warning` flags a segment
whose slowest decile starts above :data:`BIMODAL_RATIO` times the median (Linux's CFS gives a
waiting thread a slice of several ms; a step that lost one is many times a short step).
Two modes closer than that (a step alternating between two durations) are found by
:func:`dlperf.stats.two_modes` (:func:`modes_warning`): the median then often lies between
them, a time no step took.

Drift: a step time that moves steadily over the measured segment (a leak, a cache or heap that
grows, clocks that throttle) is not a steady state, whatever the warm-up detector said:
:func:`drift_warning` reads :func:`dlperf.stats.trend` of the measured steps.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING

from dlperf.stats import Modes, Trend, trend, two_modes

if TYPE_CHECKING:  # annotations only: ``dlperf predict`` reads samples without the schema
    from dlperf.results.schema import RunRecord

__all__ = ["BIMODAL_RATIO", "BIMODAL_MIN_SAMPLES", "bimodal_warning", "rank_threads_warning",
           "spread_warnings", "drift_of", "modes_of", "drift_warning", "modes_warning",
           "drift_text", "modes_text"]

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


def _clean(samples_s: Sequence[float | None] | None) -> list[float]:
    return [float(x) for x in samples_s or () if x is not None and math.isfinite(x) and x > 0]


def drift_of(samples_s: Sequence[float | None] | None) -> Trend | None:
    """:func:`dlperf.stats.trend` of the finite, positive measured step times (s, in the order
    measured) when it is a drift; None otherwise (too few samples, or no drift)."""
    t = trend(xs) if len(xs := _clean(samples_s)) >= 2 else None
    return t if t is not None and t.drifting else None


def modes_of(samples_s: Sequence[float | None] | None) -> Modes | None:
    """:func:`dlperf.stats.two_modes` of the finite, positive measured step times (s) when they
    have two modes; None otherwise."""
    m = two_modes(xs) if len(xs := _clean(samples_s)) >= 2 else None
    return m if m is not None and m.bimodal else None


def has_two_modes(samples_s: Sequence[float | None]) -> bool:
    """Whether the measured step times ``samples_s`` (s) have two modes by either test:
    :func:`bimodal_warning` (a slow decile far above the median) or :func:`modes_of` (two
    clusters). The one rule ``dlperf compare`` flags a run by and ``dlperf predict`` warns
    of a fitted point by."""
    return bimodal_warning(samples_s) is not None or modes_of(samples_s) is not None


def drift_text(t: Trend) -> str:
    """``drifting: the step time rose 48% [41, 55] from the first measured step to the last
    (Mann-Kendall p = 1e-12)``."""
    word = "rose" if t.change_rel > 0 else "fell"
    lo, hi = sorted(abs(v) * 100 for v in t.change_rel_ci)
    return (f"drifting: the step time {word} {abs(t.change_rel):.0%} [{lo:.0f}, {hi:.0f}] of "
            f"the median over the {t.n} measured steps (Theil-Sen slope; Mann-Kendall p = "
            f"{t.p:.1g})")


def modes_text(m: Modes) -> str:
    """``two modes: 60% of the steps near 2.10 ms, 40% near 3.40 ms``."""
    return (f"two modes: {m.fast_share:.0%} of the steps near {m.fast_s * 1e3:.3g} ms, "
            f"{m.slow_share:.0%} near {m.slow_s * 1e3:.3g} ms")


def drift_warning(samples_s: Sequence[float | None] | None) -> str | None:
    """A warning when the measured steps drift (:func:`drift_of`): the run is not steady and
    its median depends on how long it was measured."""
    t = drift_of(samples_s)
    if t is None:
        return None
    return (f"{drift_text(t)}: not a steady state, so the median depends on how long the run "
            "was measured (a longer --min-time or --ci-target does not help). Look for "
            "something that grows during training (a leak, a cache, a heap) or a device that "
            "throttles; a run that drifts is not judged by `dlperf compare`")


def modes_warning(samples_s: Sequence[float | None] | None) -> str | None:
    """A warning when the measured steps have two modes (:func:`modes_of`) closer than
    :func:`bimodal_warning` looks for; None when they have not, or when that one fires."""
    if bimodal_warning(samples_s or []):
        return None
    m = modes_of(samples_s)
    if m is None:
        return None
    return (f"{modes_text(m)}: the median is one summary of two step times (it may be one no "
            "step took). Usually something that alternates (a collective or a loader that "
            "lands on every other step, a cache that holds or not) or a busy host; a run with "
            "two modes is not judged by `dlperf compare`")


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
    """:func:`bimodal_warning`, :func:`modes_warning` and :func:`drift_warning` of the measured
    steps and :func:`rank_threads_warning`, those that apply."""
    xs = r.measured_s
    return [w for w in (bimodal_warning(xs), modes_warning(xs), drift_warning(xs),
                        rank_threads_warning(r)) if w]
