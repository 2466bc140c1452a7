"""Pure statistics over raw per-iteration samples (docs/measurement.md, rule 5).

Every function here takes plain numbers (a sequence or a 1-D array, in seconds unless said
otherwise) and returns plain numbers; nothing is dropped, nothing is timed, no framework is
imported. Conventions, stated once:

- **Percentiles** (q1, q3, p5, p95, IQR) use numpy's default linear interpolation, i.e.
  Hyndman & Fan (1996) definition 7 (also R's and Excel's default): for sorted ``x[0..n-1]``
  the p-th percentile sits at position ``h = (n - 1) * p / 100`` and is
  ``x[floor(h)] + (h - floor(h)) * (x[floor(h) + 1] - x[floor(h)])``.
- **Standard deviation** is the sample stdev (``ddof=1``); 0.0 for a single sample.
- **Confidence interval of the median**: percentile bootstrap (Efron & Tibshirani 1993, ch. 13)
  with a fixed seed, so the same samples always give the same interval. The bootstrap medians
  are drawn from their exact distribution instead of by materialising resamples
  (:func:`bootstrap_medians`): the same interval up to Monte Carlo noise, in O(n log n) time and
  O(n + n_resamples) memory (the resampling way took 27 s and 3.2 GB for 100,000 samples).
- **Minimum samples for a CI** (:data:`MIN_CI_SAMPLES` = 6 at 95%): below it no interval of
  the median reaches the level, whatever the method (:func:`min_samples_for_ci`).
- **Outliers** are flagged by the modified z-score of Iglewicz & Hoaglin (1993),
  ``M_i = 0.6745 * (x_i - median) / MAD`` with ``|M_i| > 3.5``; they are reported as indices and
  never removed (asv, hyperfine and pytest-benchmark do the same).
- **Repeated runs** are summarised by their between-run spread and by the MLPerf "olympic"
  mean (drop one fastest and one slowest run, average the rest; MLPerf Training rules, scoring).
- **Drift** (:func:`trend`): the Mann-Kendall trend test of step time against step index (Mann
  1945; Kendall 1975) with the Theil-Sen slope and its distribution-free interval (Theil 1950;
  Sen 1968); a drift is a significant trend whose whole interval amounts to more than
  :data:`DRIFT_MIN_REL` of the median over the series.
- **Two modes** (:func:`two_modes`): a two-component normal mixture fitted to the log step
  times by EM (Dempster, Laird & Rubin 1977), kept over one normal when the BIC (Schwarz 1978)
  prefers it strongly, the components are separated by Ashman's D (Ashman, Bird & Zepf 1994;
  :data:`MODES_MIN_D`), the fitted density dips between them and the smaller component holds
  at least :data:`MODES_MIN_SHARE` of the steps.

Invalid input (empty, non-finite, not 1-D) raises :class:`ValueError` with a message that names
the problem.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

__all__ = [
    "check_level",
    "Summary",
    "summarize",
    "mad_outliers",
    "bootstrap_median_ci",
    "olympic_mean",
    "between_run",
    "is_stable",
    "throughput",
    "ratio_of_medians_ci",
    "median_diff_ci",
    "MAD_ZERO_REL_TOL",
    "MIN_CI_SAMPLES",
    "min_samples_for_ci",
    "bootstrap_medians",
    "Trend",
    "trend",
    "DRIFT_MIN_REL",
    "DRIFT_P",
    "TREND_MAX_POINTS",
    "Modes",
    "two_modes",
    "MODES_MIN_SHARE",
    "MODES_MIN_GAP_REL",
    "MODES_MIN_SAMPLES",
    "MODES_MIN_D",
    "MODES_MIN_DBIC",
    "TREND_MIN_SAMPLES",
]

# Consistency constant of the modified z-score: 0.6745 = Phi^-1(0.75), so that MAD / 0.6745
# estimates the standard deviation of normal data (Iglewicz & Hoaglin 1993, p. 11).
_MAD_Z_CONST = 0.6745

# When MAD == 0 (more than half of the samples equal the median exactly, e.g. a coarse clock),
# the modified z-score is undefined. Rule used here: a sample is flagged iff it differs from the
# median by more than this relative tolerance, |x - median| > 1e-9 * |median| (any non-zero
# difference when the median is 0). Rationale: with a zero spread in the bulk, any value that is
# really different is infinitely many MADs away; the tolerance only absorbs float rounding.
MAD_ZERO_REL_TOL = 1e-9

# Resampling a mean (the only statistic still resampled) draws at most this many indices at a
# time: 2**22 int64 indices and their values are 64 MiB, whatever n and n_resamples are.
_RESAMPLE_CHUNK_ELEMS = 1 << 22


def check_level(level: float) -> None:
    """Refuse a confidence ``level`` outside (0, 1): the one check (and message) of every
    interval here and of :func:`dlperf.report.regress.ratio_from_runs`.

    Raises:
        ValueError: ``level`` is not in (0, 1) (NaN included).
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), e.g. 0.95; got {level!r}")


def _check_resamples(n_resamples: int) -> int:
    """``n_resamples`` as an int, refused below 1 (ValueError; TypeError for a non-integer)."""
    n = operator.index(n_resamples)
    if n < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n}")
    return n


def min_samples_for_ci(level: float = 0.95) -> int:
    """The fewest samples for which a confidence interval of the median can reach ``level``.

    The widest interval built from the samples alone, ``[min, max]``, misses the true median
    only when every sample falls on one side of it, so its coverage is ``1 - 2 * 0.5**n``
    (distribution-free confidence intervals for quantiles: David & Nagaraja 2003, *Order
    Statistics*, 3rd ed., sec. 7.1). Every narrower interval, the bootstrap's included, covers
    less. The smallest ``n`` with ``1 - 2 * 0.5**n >= level``: 6 at 95% (5 samples reach only
    93.75%), 8 at 99%.

    Raises ValueError when ``level`` is not in (0, 1).
    """
    check_level(level)
    n = 1
    while 1.0 - 2.0 * 0.5 ** n < level:
        n += 1
    return n


#: Fewest samples for a 95% CI of the median (:func:`min_samples_for_ci`): 6.
MIN_CI_SAMPLES = min_samples_for_ci(0.95)


def _as_samples(samples: Any, what: str = "samples") -> np.ndarray:
    """Validate and convert ``samples`` to a 1-D float64 array (no copy of the caller's data)."""
    try:
        x = np.asarray(samples, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{what} must be a sequence of numbers: {e}") from None
    if x.ndim != 1:
        raise ValueError(f"{what} must be one-dimensional, got an array of shape {x.shape}")
    if x.size == 0:
        raise ValueError(f"{what} is empty: at least one sample is needed")
    bad = ~np.isfinite(x)
    if bad.any():
        idx = np.flatnonzero(bad)
        raise ValueError(
            f"{what} contains {idx.size} non-finite value(s) (NaN or inf), first at index "
            f"{int(idx[0])}: {x[idx[0]]!r}"
        )
    return x


@dataclass(frozen=True)
class Summary:
    """Summary of one series of per-iteration samples. Times are in the samples' unit (s).

    ``stdev`` is the sample stdev (ddof=1; 0.0 when ``n == 1``); percentiles are Hyndman & Fan
    type 7; ``ci_low``/``ci_high`` bound the median at ``ci_level`` (percentile bootstrap; None
    when :func:`summarize` was asked for a minimum sample count and ``n`` is below it);
    ``mad`` is the raw median absolute deviation (not scaled by 1.4826); ``outliers`` are the
    indices (into the input order) flagged by :func:`mad_outliers`; they are included in every
    statistic above.
    """

    n: int
    mean: float
    median: float
    stdev: float
    min: float
    max: float
    q1: float
    q3: float
    iqr: float
    p5: float
    p95: float
    ci_low: float | None
    ci_high: float | None
    ci_level: float
    mad: float
    outliers: tuple[int, ...]

    @property
    def ci_too_few(self) -> bool:
        """True when ``n`` is below :func:`min_samples_for_ci` at ``ci_level``: no interval of
        the median can reach that level, so a caller should warn (or, with
        ``summarize(..., min_ci_samples=...)``, ``ci_low``/``ci_high`` are None)."""
        return self.n < min_samples_for_ci(self.ci_level)

    def to_dict(self) -> dict:
        """Return a JSON-serialisable dict (plain ints/floats; ``outliers`` as a list)."""
        d = asdict(self)
        d["outliers"] = list(self.outliers)
        return d


def mad_outliers(samples: Any, threshold: float = 3.5) -> np.ndarray:
    """Flag outliers by the modified z-score (Iglewicz & Hoaglin 1993); nothing is removed.

    ``M_i = 0.6745 * (x_i - median(x)) / MAD`` with ``MAD = median(|x - median(x)|)``; sample i
    is flagged when ``|M_i| > threshold`` (3.5 is the authors' recommendation). Both tails are
    flagged: a suspiciously fast step is as worth a look as a slow one.

    MAD == 0 (over half the samples equal the median): flag exactly the samples with
    ``|x_i - median| > MAD_ZERO_REL_TOL * |median|`` (1e-9 relative; any difference if the
    median is 0); see :data:`MAD_ZERO_REL_TOL`.

    Returns a boolean mask with the shape of ``samples``. Raises ValueError on empty or
    non-finite input or a non-positive threshold.
    """
    x = _as_samples(samples)
    if not (threshold > 0 and math.isfinite(threshold)):
        raise ValueError(f"threshold must be a positive finite number, got {threshold!r}")
    med = np.median(x)
    dev = np.abs(x - med)
    mad = np.median(dev)
    if mad == 0:
        return dev > MAD_ZERO_REL_TOL * abs(med)
    return _MAD_Z_CONST * dev / mad > threshold


def bootstrap_medians(sorted_x: np.ndarray, n_resamples: int, rng: np.random.Generator
                      ) -> np.ndarray:
    """``n_resamples`` bootstrap medians of the sorted 1-D sample ``sorted_x``, drawn from
    their exact distribution without building any resample.

    A resample draws ``n`` indices uniformly with replacement; since ``sorted_x`` is sorted,
    its median is ``sorted_x`` at the ``m``-th smallest index (odd ``n``, ``m = (n + 1) / 2``)
    or the mean of ``sorted_x`` at the ``m``-th and ``(m + 1)``-th smallest (even ``n``,
    ``m = n / 2``), ties included. An index is ``floor(n U)`` with ``U`` uniform on (0, 1), so
    the ``m``-th smallest index is ``floor(n U_(m))``, where the ``m``-th order statistic of
    ``n`` uniforms is ``U_(m) ~ Beta(m, n - m + 1)``; given ``U_(m) = u``, the next one is
    ``u + (1 - u) V`` with ``V ~ Beta(1, n - m)`` (order statistics form a Markov chain: David
    & Nagaraja 2003, *Order Statistics*, sec. 2.5). The same exact distribution of the
    bootstrap median as Maritz & Jarrett (1978, JASA 73:194-196). Cost: O(n_resamples) time
    and memory, whatever ``n``.

    ``sorted_x``: 1-D float array in ascending order (not checked); returns float64
    ``[n_resamples]``; ``rng``'s state advances.
    """
    n = int(sorted_x.size)
    m = (n + 1) // 2
    u = rng.beta(m, n - m + 1, size=n_resamples)
    lo = sorted_x[np.minimum((u * n).astype(np.int64), n - 1)]
    if n % 2:
        return lo
    u_next = u + (1.0 - u) * rng.beta(1, n - m, size=n_resamples)
    hi = sorted_x[np.minimum((u_next * n).astype(np.int64), n - 1)]
    return (lo + hi) / 2.0


def bootstrap_median_ci(
    samples: Any, level: float = 0.95, n_resamples: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """Percentile-bootstrap confidence interval of the median, ``(low, high)``, samples' unit.

    The ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles (linear interpolation, as
    :func:`scipy.stats.bootstrap` takes them) of ``n_resamples`` bootstrap medians drawn by
    :func:`bootstrap_medians` with ``numpy.random.default_rng(seed)``: deterministic for a
    given seed, the interval of the classic resampling bootstrap up to Monte Carlo noise, in
    O(n log n) time and O(n + n_resamples) memory (1e5 samples: milliseconds). With fewer than
    2 samples, or all equal, every resample has the same median and ``(x, x)`` is returned.
    The percentile method is chosen over BCa because BCa's jackknife acceleration is unstable
    for the median on the small, tie-heavy samples coarse clocks produce.

    Raises ValueError on empty/non-finite input, ``level`` outside (0, 1) or ``n_resamples < 1``.
    """
    x = _as_samples(samples)
    check_level(level)
    n_resamples = _check_resamples(n_resamples)
    if x.size < 2 or np.all(x == x[0]):  # degenerate: every resample has the same median
        v = float(x[0])
        return (v, v)
    boot = bootstrap_medians(np.sort(x), n_resamples, np.random.default_rng(seed))
    lo, hi = np.percentile(boot, [100 * (1 - level) / 2, 100 * (1 + level) / 2])
    return (float(lo), float(hi))


def summarize(
    samples_s: Any,
    *,
    ci_level: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
    mad_threshold: float = 3.5,
    min_ci_samples: int | None = None,
) -> Summary:
    """Summarise raw per-iteration times (seconds) into a :class:`Summary` (MEASUREMENT rule 5).

    All samples are used (outliers are flagged, not dropped). Percentiles: numpy linear
    interpolation (Hyndman & Fan type 7). CI: :func:`bootstrap_median_ci`. Outliers:
    :func:`mad_outliers`. Time O(n log n), memory O(n + n_resamples): 100,000 samples take
    tens of milliseconds.

    ``min_ci_samples``: with fewer samples, no CI (``ci_low``/``ci_high`` None); pass
    :data:`MIN_CI_SAMPLES` (or ``min_samples_for_ci(ci_level)``). None (default): a CI for any
    ``n`` (``(x, x)`` for one sample). Either way :attr:`Summary.ci_too_few` tells a caller to
    warn. Raises ValueError on empty or non-finite input, or ``min_ci_samples`` < 1.
    """
    x = _as_samples(samples_s, "samples_s")
    n = int(x.size)
    if min_ci_samples is not None and operator.index(min_ci_samples) < 1:
        raise ValueError(f"min_ci_samples must be >= 1 or None, got {min_ci_samples!r}")
    med = float(np.median(x))
    q1, q3, p5, p95 = (float(v) for v in np.percentile(x, [25.0, 75.0, 5.0, 95.0]))
    if min_ci_samples is not None and n < min_ci_samples:
        check_level(ci_level)
        lo = hi = None
    else:
        lo, hi = bootstrap_median_ci(x, level=ci_level, n_resamples=n_resamples, seed=seed)
    mask = mad_outliers(x, threshold=mad_threshold)
    return Summary(
        n=n,
        mean=float(np.mean(x)),
        median=med,
        stdev=float(np.std(x, ddof=1)) if n > 1 else 0.0,
        min=float(np.min(x)),
        max=float(np.max(x)),
        q1=q1,
        q3=q3,
        iqr=q3 - q1,
        p5=p5,
        p95=p95,
        ci_low=lo,
        ci_high=hi,
        ci_level=float(ci_level),
        mad=float(np.median(np.abs(x - med))),
        outliers=tuple(int(i) for i in np.flatnonzero(mask)),
    )


def olympic_mean(values: Sequence[float] | np.ndarray) -> float:
    """MLPerf-style olympic mean: drop one minimum and one maximum, average the rest.

    Only one copy of each extreme is dropped (ties stay). Needs at least 3 values; raises
    ValueError otherwise, or on non-finite input.
    """
    x = _as_samples(values, "values")
    if x.size < 3:
        raise ValueError(
            f"olympic mean needs at least 3 values (one min and one max are dropped), "
            f"got {x.size}"
        )
    return float(np.mean(np.sort(x)[1:-1]))


def between_run(values: Sequence[float], level: float = 0.95,
                lower_bound: float | None = None) -> dict:
    """Spread of repeated runs' summary values (e.g. each run's median step time, seconds).

    Returns ``{"n", "mean", "stdev" (ddof=1; 0.0 if n == 1), "cv" (stdev / mean; None if the
    mean is 0), "min", "max", "olympic_mean" (None if n < 3), "mean_ci_low", "mean_ci_high"}``.
    The CI of the mean treats the runs as independent draws from one normal distribution:
    ``mean -/+ t(1 - (1 - level) / 2, n - 1) * stdev / sqrt(n)`` (Student's t interval); None
    if n < 2. ``lower_bound``: the smallest value the quantity can take (0 for times); the
    interval's low end is cut there (a confidence interval intersected with the parameter space
    keeps its coverage; with 3 runs the t interval of a time can otherwise reach below zero).
    Raises ValueError on empty or non-finite input or a ``level`` outside (0, 1).
    """
    x = _as_samples(values, "values")
    check_level(level)
    n = int(x.size)
    mean = float(np.mean(x))
    stdev = float(np.std(x, ddof=1)) if n > 1 else 0.0
    from scipy import stats as _sps  # here, not at import: ~0.7 s of CPU per CLI process

    half = (float(_sps.t.ppf(1 - (1 - level) / 2, n - 1)) * stdev / math.sqrt(n)
            if n > 1 else None)
    return {
        "n": n,
        "mean": mean,
        "stdev": stdev,
        "cv": (stdev / mean) if mean != 0 else None,
        "min": float(np.min(x)),
        "max": float(np.max(x)),
        "olympic_mean": olympic_mean(x) if n >= 3 else None,
        "mean_ci_low": (None if half is None else mean - half if lower_bound is None
                        else max(lower_bound, mean - half)),
        "mean_ci_high": None if half is None else mean + half,
    }


def is_stable(prev_window: Sequence[float], cur_window: Sequence[float], rel_tol: float = 0.05) -> bool:
    """Steady-state test for warm-up (MEASUREMENT rule 3).

    True when ``|median(cur) - median(prev)| <= rel_tol * median(prev)``: the rolling median step
    time moved by at most ``rel_tol`` (relative) between two consecutive windows. Raises
    ValueError on an empty/non-finite window or a negative ``rel_tol``.
    """
    prev = _as_samples(prev_window, "prev_window")
    cur = _as_samples(cur_window, "cur_window")
    if not (rel_tol >= 0 and math.isfinite(rel_tol)):
        raise ValueError(f"rel_tol must be a finite number >= 0, got {rel_tol!r}")
    m_prev = float(np.median(prev))
    m_cur = float(np.median(cur))
    return abs(m_cur - m_prev) <= rel_tol * m_prev


def throughput(
    n_steps: int, global_batch: int, total_time_s: float, tokens_per_sample: int = 0
) -> dict:
    """Throughput of ``n_steps`` measured steps at ``global_batch`` samples per step (rule 9).

    ``global_batch`` = per-device batch x devices x gradient-accumulation steps (Shi et al. 2016).
    Returns ``{"samples": n_steps * global_batch`` (exact int), ``"samples_per_s": samples /
    total_time_s, "tokens_per_s": samples * tokens_per_sample / total_time_s}``; tokens_per_s is
    0.0 when ``tokens_per_sample`` is 0 (not a sequence model).

    Raises ValueError when ``n_steps < 1``, ``global_batch < 1``, ``tokens_per_sample < 0``,
    an argument that must be an int is not one, or ``total_time_s`` is not a finite number > 0.
    """
    try:
        n_steps = operator.index(n_steps)
        global_batch = operator.index(global_batch)
        tokens_per_sample = operator.index(tokens_per_sample)
    except TypeError as e:
        raise ValueError(
            f"n_steps, global_batch and tokens_per_sample must be integers: {e}"
        ) from None
    if n_steps < 1:
        raise ValueError(f"n_steps must be >= 1, got {n_steps}")
    if global_batch < 1:
        raise ValueError(f"global_batch must be >= 1, got {global_batch}")
    if tokens_per_sample < 0:
        raise ValueError(f"tokens_per_sample must be >= 0, got {tokens_per_sample}")
    t = float(total_time_s)
    if not (math.isfinite(t) and t > 0):
        raise ValueError(f"total_time_s must be a finite number > 0 seconds, got {total_time_s!r}")
    samples = n_steps * global_batch
    return {
        "samples": samples,
        "samples_per_s": samples / t,
        "tokens_per_s": samples * tokens_per_sample / t,
    }


def ratio_ci(a: Sequence[float], b: Sequence[float], *, statistic: str = "median",
             level: float = 0.95, n_resamples: int = 2000,
             seed: int = 0) -> tuple[float, float, float]:
    """stat(a) / stat(b) with a bootstrap percentile CI (a and b resampled independently).

    Used for speed-ups: with ``a`` the baseline's per-iteration times and ``b`` another's,
    a ratio above 1 means ``b`` is faster. Two independent samples, so the bootstrap draws
    each with replacement on its own (Efron & Tibshirani 1993, ch. 8, two-sample problems).
    ``statistic`` is ``"median"`` (a typical iteration: robust to outliers, the headline's
    statistic) or ``"mean"`` (the throughput's: samples/s = batch / mean iteration time, the
    right one when slow iterations are part of the process, e.g. a loader that stalls one
    iteration in N; resampling single iterations then ignores their order, so the CI is a
    rough one when stalls are periodic).

    Returns:
        (ratio, ci_low, ci_high).

    Raises:
        ValueError: empty or non-finite samples, an unknown ``statistic``, or a non-positive
        statistic of ``b``.
    """
    x, y = _as_samples(a, "a"), _as_samples(b, "b")
    funcs: dict[str, Callable[..., Any]] = {"median": np.median, "mean": np.mean}
    if statistic not in funcs:
        raise ValueError(f"statistic must be one of {sorted(funcs)}, got {statistic!r}")
    f = funcs[statistic]
    mb = float(f(y))
    if mb <= 0:
        raise ValueError(f"{statistic} of b must be positive")
    ratio = float(f(x)) / mb
    ma, mbs = _two_sample_stats(x, y, f, level, n_resamples, seed)
    lo, hi = np.percentile(ma / mbs, [100 * (1 - level) / 2, 100 * (1 + level) / 2])
    return ratio, float(lo), float(hi)


def ratio_of_medians_ci(a: Sequence[float], b: Sequence[float], *, level: float = 0.95,
                        n_resamples: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """median(a) / median(b) with its bootstrap CI: :func:`ratio_ci` with ``statistic="median"``."""
    return ratio_ci(a, b, statistic="median", level=level, n_resamples=n_resamples, seed=seed)


def _two_sample_stats(x: np.ndarray, y: np.ndarray, f: Callable[..., Any], level: float,
                      n_resamples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Bootstrap statistics ``f`` (np.median or np.mean) of ``x`` and of ``y``, each resampled
    on its own (``n_resamples`` each, ``default_rng(seed)``, x's draws first).

    Medians come from their exact distribution (:func:`bootstrap_medians`, no resample is
    built); means from resamples drawn :data:`_RESAMPLE_CHUNK_ELEMS` indices at a time, so the
    memory is bounded whatever the sizes (up to that many, one draw, as before)."""
    check_level(level)
    n_resamples = _check_resamples(n_resamples)
    rng = np.random.default_rng(seed)
    if f is np.median:
        return (bootstrap_medians(np.sort(x), n_resamples, rng),
                bootstrap_medians(np.sort(y), n_resamples, rng))
    return _resampled(x, f, n_resamples, rng), _resampled(y, f, n_resamples, rng)


def _resampled(x: np.ndarray, f: Callable[..., Any], n_resamples: int,
               rng: np.random.Generator) -> np.ndarray:
    """``f(resample, axis=1)`` of ``n_resamples`` resamples of ``x``, drawn in chunks of at most
    :data:`_RESAMPLE_CHUNK_ELEMS` indices (one chunk: the same draws as one call)."""
    rows = max(1, _RESAMPLE_CHUNK_ELEMS // x.size)
    if rows >= n_resamples:
        return f(x[rng.integers(0, x.size, (n_resamples, x.size))], axis=1)
    out = np.empty(n_resamples)
    for k in range(0, n_resamples, rows):
        r = min(rows, n_resamples - k)
        out[k:k + r] = f(x[rng.integers(0, x.size, (r, x.size))], axis=1)
    return out


def median_diff_ci(a: Sequence[float], b: Sequence[float], *, level: float = 0.95,
                   n_resamples: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """median(b) - median(a) with a bootstrap percentile CI (a and b resampled independently).

    The two-sample percentile bootstrap of :func:`ratio_ci` (Efron & Tibshirani 1993, ch. 8
    and 13) applied to the difference: used for the step-time gap between two runs (``a`` the
    baseline's per-iteration times, ``b`` the other's, in the same unit; a positive difference
    means ``b`` is slower). The interval covers iteration-to-iteration noise within each run
    only, not the variation between separate processes.

    Returns:
        (difference, ci_low, ci_high), in the samples' unit.

    Raises:
        ValueError: empty or non-finite samples, ``level`` outside (0, 1), ``n_resamples < 1``.
    """
    x, y = _as_samples(a, "a"), _as_samples(b, "b")
    diff = float(np.median(y)) - float(np.median(x))
    ma, mb = _two_sample_stats(x, y, np.median, level, n_resamples, seed)
    lo, hi = np.percentile(mb - ma, [100 * (1 - level) / 2, 100 * (1 + level) / 2])
    return diff, float(lo), float(hi)


# --- drift: a trend over the measured segment -------------------------------------------------

#: A trend is a drift when it is significant at this level (two-sided Mann-Kendall p-value)...
DRIFT_P = 0.01
#: ...and the whole 95% interval of the Theil-Sen slope, times the span of the series, is more
#: than this share of the median (5%: a drift that moves the median of a run by less is within
#: what a run-to-run comparison resolves anyway).
DRIFT_MIN_REL = 0.05
#: Longer series are reduced to this many consecutive block medians before the test (the test
#: and the slope are O(m^2) in the points; block medians also damp the short-range
#: autocorrelation of step times, which makes the Mann-Kendall p-value optimistic: Hamed & Rao
#: 1998, J. Hydrology 204:182-196).
TREND_MAX_POINTS = 400
#: Fewer samples than this: no trend is tested (a Mann-Kendall test of a handful of points has
#: little power and the slope interval spans everything).
TREND_MIN_SAMPLES = 10


@dataclass(frozen=True)
class Trend:
    """The trend of a series of step times against their index (:func:`trend`).

    ``n``: samples; ``points``: the points tested (``n``, or :data:`TREND_MAX_POINTS` block
    medians); ``tau``: Kendall's tau of time against index; ``z``, ``p``: the Mann-Kendall
    statistic and its two-sided p-value; ``slope_s``: the Theil-Sen slope in seconds per step,
    with its 95% interval ``slope_ci_s``; ``change_rel``: the slope times the span of the series
    (``n - 1`` steps) over the median, the relative change from the first step to the last,
    with its interval ``change_rel_ci``; ``drifting``: ``p < DRIFT_P`` and the whole of
    ``change_rel_ci`` beyond ``+-DRIFT_MIN_REL`` on the side of the trend."""

    n: int
    points: int
    tau: float
    z: float
    p: float
    slope_s: float
    slope_ci_s: tuple[float, float]
    change_rel: float
    change_rel_ci: tuple[float, float]
    drifting: bool

    def to_dict(self) -> dict:
        """A JSON-serialisable dict (tuples as lists)."""
        d = asdict(self)
        d["slope_ci_s"], d["change_rel_ci"] = list(self.slope_ci_s), list(self.change_rel_ci)
        return d


def _blocks(x: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """``(index, value)``: ``x`` itself with indices 0..n-1 when ``n <= m``, else the medians of
    ``m`` consecutive, near-equal blocks at their blocks' mean index."""
    n = x.size
    if n <= m:
        return np.arange(n, dtype=np.float64), x
    edges = np.linspace(0, n, m + 1).astype(np.int64)
    lo, hi = edges[:-1], edges[1:]
    idx = (lo + hi - 1) / 2.0
    # the blocks of one length at once, as rows of a matrix (np.median along its rows gives
    # each row's median bit for bit as np.median of the row: the same partition and mean)
    sizes = hi - lo
    val = np.empty(m, dtype=np.float64)
    for size in np.unique(sizes):
        rows = np.flatnonzero(sizes == size)
        val[rows] = np.median(x[lo[rows, None] + np.arange(size)], axis=1)
    return idx, val


def trend(samples_s: Any, level: float = 0.95) -> Trend | None:
    """The Mann-Kendall trend test of ``samples_s`` (step times in s, in the order measured)
    against their index, with the Theil-Sen slope and its interval; None for fewer than
    :data:`TREND_MIN_SAMPLES` samples.

    Mann-Kendall (Mann 1945, Econometrica 13:245-259; Kendall 1975, *Rank Correlation
    Methods*): ``S = sum_{i<j} sign(x_j - x_i)``, ``Var(S) = [m(m-1)(2m+5) - sum_t t(t-1)(2t+5)]
    / 18`` over the groups of ``t`` tied values, ``z = (S - sign(S)) / sqrt(Var S)`` (continuity
    correction), two-sided normal p-value. Theil-Sen (Theil 1950; Sen 1968, JASA 63:1379-1389):
    the median of the pairwise slopes ``(x_j - x_i) / (j - i)``; its interval is the pair of
    order statistics of the ``N`` slopes at ``(N -+ z_{(1+level)/2} sqrt(Var S)) / 2`` (Sen
    1968; Gilbert 1987, *Statistical Methods for Environmental Pollution Monitoring*, sec.
    16.5; the rule of ``scipy.stats.theilslopes``). A series longer than
    :data:`TREND_MAX_POINTS` is tested on that many block medians (:data:`TREND_MAX_POINTS`).
    The drift rule is in :class:`Trend`. Raises ValueError on non-finite samples or a level
    outside (0, 1).
    """
    x = _as_samples(samples_s, "samples_s")
    check_level(level)
    n = int(x.size)
    if n < TREND_MIN_SAMPLES:
        return None
    t, y = _blocks(x, TREND_MAX_POINTS)
    m = int(y.size)
    i, j = np.triu_indices(m, k=1)
    dy = y[j] - y[i]
    s = float(np.sign(dy).sum())
    _, counts = np.unique(y, return_counts=True)
    ties = float(np.sum(counts * (counts - 1.0) * (2.0 * counts + 5.0)))
    var = (m * (m - 1.0) * (2.0 * m + 5.0) - ties) / 18.0
    z = (s - math.copysign(1.0, s)) / math.sqrt(var) if var > 0 and s != 0 else 0.0
    p = math.erfc(abs(z) / math.sqrt(2.0))
    pairs = m * (m - 1) / 2.0
    tau = s / pairs
    slopes = np.sort(dy / (t[j] - t[i]))
    slope = float(np.median(slopes))
    zq = NormalDist().inv_cdf((1.0 + level) / 2.0)
    half = zq * math.sqrt(max(var, 0.0))
    nt = slopes.size
    lo_i = max(int(round((nt - half) / 2.0)) - 1, 0)
    hi_i = min(int(round((nt + half) / 2.0)), nt - 1)
    lo, hi = float(slopes[lo_i]), float(slopes[hi_i])
    med = float(np.median(x))
    span = (n - 1.0) / med if med > 0 else 0.0
    ch, ch_lo, ch_hi = slope * span, lo * span, hi * span
    drifting = bool(p < DRIFT_P and (ch_lo > DRIFT_MIN_REL or ch_hi < -DRIFT_MIN_REL))
    return Trend(n=n, points=m, tau=tau, z=z, p=p, slope_s=slope, slope_ci_s=(lo, hi),
                 change_rel=ch, change_rel_ci=(ch_lo, ch_hi), drifting=drifting)


# --- two modes -----------------------------------------------------------------------------

#: The smaller mode must hold at least this share of the steps (fewer are a tail, which the
#: outlier flags and the long-tail warning cover).
MODES_MIN_SHARE = 0.10
#: The modes' typical step times must differ by at least this share of the faster one (closer
#: modes move the median by less than a run-to-run comparison resolves; a coarse clock's two
#: neighbouring ticks are not two modes).
MODES_MIN_GAP_REL = 0.05
#: Ashman's D two normal components must exceed. Above 2 they are separated (Ashman, Bird &
#: Zepf 1994, AJ 108:2348-2361); but a skewed one-mode distribution (a base time plus an
#: exponential delay) fitted by two normals reaches D of 2.0-2.3, and step times are skewed, so
#: the rule asks for 3 (two real modes of the tests in tests/unit/test_stats_drift.py: 7-12).
MODES_MIN_D = 3.0
#: The BIC must prefer two components by more than this (Kass & Raftery 1995, JASA
#: 90:773-795: a difference above 10 is "very strong" evidence).
MODES_MIN_DBIC = 10.0
#: Fewer samples than this: no test (a mixture of five parameters needs data to choose it).
MODES_MIN_SAMPLES = 20
#: Longer series are thinned to this many samples drawn without replacement (seed 0: the
#: shares of the modes are kept in expectation; a stride could alias with a step that
#: alternates), so the fit costs milliseconds whatever ``n``.
MODES_MAX_POINTS = 5000
#: Floor of a component's standard deviation in log time (0.2%): a coarse clock's identical
#: readings must not make a component of zero width and infinite likelihood.
_MODES_SD_FLOOR = 2e-3


@dataclass(frozen=True)
class Modes:
    """Two modes of a series of step times (:func:`two_modes`).

    ``n``: samples; ``fast_s``, ``slow_s``: the typical step time of each mode (s: the
    exponential of its component's mean log time, a geometric mean); ``fast_share``,
    ``slow_share``: the share of the steps in each (sum 1); ``d``: Ashman's D; ``dbic``: BIC of
    one normal minus BIC of two (positive: two fit better); ``bimodal``: the rule of
    :func:`two_modes`."""

    n: int
    fast_s: float
    slow_s: float
    fast_share: float
    slow_share: float
    d: float
    dbic: float
    bimodal: bool

    def to_dict(self) -> dict:
        """A JSON-serialisable dict."""
        return asdict(self)


def _normal_logpdf(y: np.ndarray, mu: float, var: float) -> np.ndarray:
    return -0.5 * (math.log(2.0 * math.pi * var) + (y - mu) ** 2 / var)


def two_modes(samples_s: Any, max_iter: int = 200) -> Modes | None:
    """Whether the step times ``samples_s`` (s) have two modes, with both and their shares;
    None for fewer than :data:`MODES_MIN_SAMPLES` samples or when all are equal.

    On the log times (a step time's spread is relative), a two-component normal mixture is
    fitted by EM (Dempster, Laird & Rubin 1977, JRSS B 39:1-38), started from the best split of
    the sorted values into two groups (the least within-group sum of squares), and compared with
    one normal by the BIC (Schwarz 1978). Two modes when all of: the BIC prefers two
    components by more than :data:`MODES_MIN_DBIC`; Ashman's ``D = sqrt(2) |mu1 - mu2| /
    sqrt(s1^2 + s2^2) > 3`` (:data:`MODES_MIN_D`; a long tail fits a wide second component of
    small D); the fitted density has two maxima (it dips between the means: a skewed
    distribution fitted by two normals has one); the smaller component holds at least
    :data:`MODES_MIN_SHARE`; and the modes differ by at least :data:`MODES_MIN_GAP_REL`.
    Deterministic (no random start); more than :data:`MODES_MAX_POINTS` samples are thinned
    first (a seeded draw without replacement). Raises ValueError on
    non-finite or non-positive samples.
    """
    x = _as_samples(samples_s, "samples_s")
    if np.any(x <= 0):
        raise ValueError("step times must be positive (seconds)")
    n = int(x.size)
    if n < MODES_MIN_SAMPLES:
        return None
    if n > MODES_MAX_POINTS:
        x = x[np.random.default_rng(0).choice(n, MODES_MAX_POINTS, replace=False)]
    y = np.sort(np.log(x))
    if y[-1] - y[0] <= 0:
        return None
    m = y.size
    var_floor = _MODES_SD_FLOOR ** 2
    # one normal (MLE)
    mu0, var0 = float(y.mean()), max(float(y.var()), var_floor)
    ll1 = float(_normal_logpdf(y, mu0, var0).sum())
    # start: the split of the sorted values with the least within-group sum of squares
    c1, c2 = np.cumsum(y), np.cumsum(y * y)
    k = np.arange(1, m)
    left = c2[:-1] - c1[:-1] ** 2 / k
    right = (c2[-1] - c2[:-1]) - (c1[-1] - c1[:-1]) ** 2 / (m - k)
    cut = int(np.argmin(left + right)) + 1
    w = np.array([cut / m, 1.0 - cut / m])
    mu = np.array([y[:cut].mean(), y[cut:].mean()])
    var = np.maximum([y[:cut].var(), y[cut:].var()], var_floor)
    ll2 = -math.inf
    for _ in range(max_iter):
        lp = np.stack([np.log(w[c]) + _normal_logpdf(y, mu[c], var[c]) for c in (0, 1)])
        top = lp.max(axis=0)
        tot = top + np.log(np.exp(lp - top).sum(axis=0))
        new_ll = float(tot.sum())
        r = np.exp(lp - tot)
        nk = r.sum(axis=1)
        if np.any(nk < 1e-9 * m):  # a component emptied: one mode
            break
        w = nk / m
        mu = (r * y).sum(axis=1) / nk
        var = np.maximum((r * (y - mu[:, None]) ** 2).sum(axis=1) / nk, var_floor)
        if new_ll - ll2 < 1e-9 * max(1.0, abs(new_ll)):
            ll2 = new_ll
            break
        ll2 = new_ll
    if not math.isfinite(ll2):
        return None
    order = np.argsort(mu)
    w, mu, var = w[order], mu[order], var[order]
    d = float(math.sqrt(2.0) * abs(mu[1] - mu[0]) / math.sqrt(var[0] + var[1]))
    # the fitted density's maxima lie between the two means (Ray & Lindsay 2005, Ann. Stat.
    # 33:2042-2065): two modes only if it dips between them
    g = np.linspace(mu[0], mu[1], 513)
    dens = w[0] * np.exp(_normal_logpdf(g, mu[0], var[0])) + w[1] * np.exp(
        _normal_logpdf(g, mu[1], var[1]))
    peaks = int(np.sum((dens[1:-1] > dens[:-2]) & (dens[1:-1] >= dens[2:])))
    peaks += int(dens[0] > dens[1]) + int(dens[-1] > dens[-2])
    dbic = (2 * math.log(m) - 2 * ll1) - (5 * math.log(m) - 2 * ll2)
    fast, slow = float(math.exp(mu[0])), float(math.exp(mu[1]))
    bimodal = bool(dbic > MODES_MIN_DBIC and d > MODES_MIN_D and peaks >= 2
                   and min(w) >= MODES_MIN_SHARE
                   and slow >= fast * (1.0 + MODES_MIN_GAP_REL))
    return Modes(n=n, fast_s=fast, slow_s=slow, fast_share=float(w[0]), slow_share=float(w[1]),
                 d=d, dbic=float(dbic), bimodal=bimodal)
