"""Tests for dlperf.stats: hand-computed values on small arrays; the arithmetic is in comments.

Percentiles are Hyndman & Fan type 7: for sorted x[0..n-1] the p-th percentile is at position
h = (n - 1) * p / 100, value x[floor(h)] + frac(h) * (x[floor(h)+1] - x[floor(h)]).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from dlperf import stats
from dlperf.stats import (
    Summary,
    between_run,
    bootstrap_median_ci,
    is_stable,
    mad_outliers,
    olympic_mean,
    summarize,
    throughput,
)

APPROX = dict(rel=1e-12, abs=1e-12)


# --------------------------------------------------------------------------- summarize


def test_summarize_hand_computed_with_outlier():
    s = summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert s.n == 5
    # mean = (1 + 2 + 3 + 4 + 100) / 5 = 110 / 5 = 22
    assert s.mean == pytest.approx(22.0, **APPROX)
    assert s.median == 3.0
    # deviations from 22: -21 -20 -19 -18 78; squares 441 400 361 324 6084, sum 7610
    # sample variance 7610 / (5 - 1) = 1902.5
    assert s.stdev == pytest.approx(math.sqrt(1902.5), **APPROX)
    assert (s.min, s.max) == (1.0, 100.0)
    # q1: h = 4 * 0.25 = 1 -> x[1] = 2 ; q3: h = 3 -> x[3] = 4 ; iqr = 4 - 2 = 2
    assert (s.q1, s.q3, s.iqr) == (2.0, 4.0, 2.0)
    # p5: h = 4 * 0.05 = 0.2 -> 1 + 0.2 * (2 - 1) = 1.2
    assert s.p5 == pytest.approx(1.2, **APPROX)
    # p95: h = 4 * 0.95 = 3.8 -> 4 + 0.8 * (100 - 4) = 4 + 76.8 = 80.8
    assert s.p95 == pytest.approx(80.8, **APPROX)
    # |x - 3| = 2 1 0 1 97 -> sorted 0 1 1 2 97 -> MAD = 1
    assert s.mad == 1.0
    # modified z of 100: 0.6745 * 97 / 1 = 65.4 > 3.5; of 1: 0.6745 * 2 = 1.35 < 3.5
    assert s.outliers == (4,)
    assert s.ci_level == 0.95
    assert s.ci_low <= s.median <= s.ci_high


def test_summarize_even_n_hand_computed():
    x = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]
    s = summarize(x)
    assert s.n == 8
    # mean = 40 / 8 = 5
    assert s.mean == pytest.approx(5.0, **APPROX)
    # median = (x[3] + x[4]) / 2 = (4 + 5) / 2 = 4.5
    assert s.median == 4.5
    # deviations from 5: -3 -1 -1 -1 0 0 2 4; squares sum 9+1+1+1+0+0+4+16 = 32; var = 32 / 7
    assert s.stdev == pytest.approx(math.sqrt(32 / 7), **APPROX)
    # q1: h = 7 * 0.25 = 1.75 -> 4 + 0.75 * (4 - 4) = 4
    # q3: h = 7 * 0.75 = 5.25 -> 5 + 0.25 * (7 - 5) = 5.5 ; iqr = 1.5
    assert (s.q1, s.q3) == (pytest.approx(4.0), pytest.approx(5.5))
    assert s.iqr == pytest.approx(1.5, **APPROX)
    # p5: h = 0.35 -> 2 + 0.35 * 2 = 2.7 ; p95: h = 6.65 -> 7 + 0.65 * 2 = 8.3
    assert s.p5 == pytest.approx(2.7, **APPROX)
    assert s.p95 == pytest.approx(8.3, **APPROX)
    # |x - 4.5| = 2.5 .5 .5 .5 .5 .5 2.5 4.5 -> sorted: five 0.5, 2.5, 2.5, 4.5 -> MAD = 0.5
    assert s.mad == 0.5
    # z(9) = 0.6745 * 4.5 / 0.5 = 6.07 > 3.5 (flagged); z(2) = z(7) = 0.6745 * 5 = 3.37 < 3.5
    assert s.outliers == (7,)


def test_summarize_single_sample():
    s = summarize([0.25])
    assert s.n == 1
    assert s.mean == s.median == s.min == s.max == s.q1 == s.q3 == s.p5 == s.p95 == 0.25
    assert s.stdev == 0.0 and s.iqr == 0.0 and s.mad == 0.0
    assert (s.ci_low, s.ci_high) == (0.25, 0.25)
    assert s.outliers == ()


def test_summarize_keeps_outliers_in_statistics():
    # The outlier is flagged but still counted: the max and the mean include it.
    s = summarize([1.0, 1.1, 0.9, 1.0, 50.0])
    assert s.outliers == (4,)
    assert s.max == 50.0 and s.n == 5
    assert s.mean == pytest.approx((1.0 + 1.1 + 0.9 + 1.0 + 50.0) / 5, **APPROX)


def test_summary_to_dict_is_json_able():
    s = summarize(np.array([0.010, 0.011, 0.012, 0.5]))
    d = s.to_dict()
    assert isinstance(d["outliers"], list)
    assert set(d) == {f for f in Summary.__dataclass_fields__}
    back = json.loads(json.dumps(d))
    assert back == d
    assert all(type(d[k]) is float for k in d if k not in ("n", "outliers"))
    assert type(d["n"]) is int


def test_summary_is_frozen():
    s = summarize([1.0, 2.0])
    with pytest.raises(AttributeError):
        s.mean = 3.0  # type: ignore[misc]


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("fn", [summarize, mad_outliers, bootstrap_median_ci])
def test_empty_input_raises(fn):
    with pytest.raises(ValueError, match="empty"):
        fn([])


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("fn", [summarize, mad_outliers, bootstrap_median_ci, olympic_mean])
def test_non_finite_raises(fn, bad):
    with pytest.raises(ValueError, match="non-finite.*index 2"):
        fn([1.0, 2.0, bad, 4.0])


def test_two_dimensional_raises():
    with pytest.raises(ValueError, match="one-dimensional"):
        summarize([[1.0, 2.0], [3.0, 4.0]])


def test_non_numeric_raises():
    with pytest.raises(ValueError, match="numbers"):
        summarize(["a", "b"])


# --------------------------------------------------------------------------- MAD outliers


def test_mad_outliers_mask():
    m = mad_outliers([1.0, 2.0, 3.0, 4.0, 100.0])
    assert m.dtype == bool
    assert m.tolist() == [False, False, False, False, True]


def test_mad_outliers_flags_both_tails():
    # median 10, |x - 10| = 0 0 0 1 1 9 -> MAD = median = (0 + 1) / 2 = 0.5
    # z(1) = 0.6745 * 9 / 0.5 = 12.1 -> flagged (fast outlier); z(11) = z(9) = 1.35
    m = mad_outliers([10.0, 10.0, 10.0, 11.0, 9.0, 1.0])
    assert m.tolist() == [False, False, False, False, False, True]


def test_mad_outliers_threshold():
    # [2,4,4,4,5,5,7,9]: MAD 0.5, z(2) = z(7) = 0.6745 * 2.5 / 0.5 = 3.3725
    x = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]
    assert np.flatnonzero(mad_outliers(x, threshold=3.5)).tolist() == [7]
    assert np.flatnonzero(mad_outliers(x, threshold=3.3)).tolist() == [0, 6, 7]
    with pytest.raises(ValueError, match="threshold"):
        mad_outliers(x, threshold=0)


def test_mad_zero_rule():
    # More than half equal -> MAD == 0; only values differing by > 1e-9 relative are flagged.
    x = [1.0, 1.0, 1.0, 1.0 + 1e-12, 1.5]
    assert mad_outliers(x).tolist() == [False, False, False, False, True]
    # all identical: nothing flagged
    assert not mad_outliers([0.5] * 7).any()
    # median 0: any non-zero value is flagged
    assert mad_outliers([0.0, 0.0, 0.0, 1e-6]).tolist() == [False, False, False, True]


# --------------------------------------------------------------------------- bootstrap CI


def test_bootstrap_ci_contains_median_and_is_deterministic():
    rng = np.random.default_rng(42)
    x = rng.lognormal(mean=np.log(0.01), sigma=0.1, size=50)
    lo, hi = bootstrap_median_ci(x, seed=7)
    assert lo <= np.median(x) <= hi
    assert lo < hi
    assert bootstrap_median_ci(x, seed=7) == (lo, hi)
    # the seed is used: bootstrap medians take few distinct values, so two seeds can give the
    # same interval; over several seeds at a small n_resamples they must differ somewhere
    assert len({bootstrap_median_ci(x, n_resamples=50, seed=k) for k in range(5)}) > 1


def test_bootstrap_ci_narrows_with_more_samples():
    rng = np.random.default_rng(1)
    small = rng.normal(1.0, 0.1, size=20)
    large = rng.normal(1.0, 0.1, size=2000)
    w_small = np.subtract(*bootstrap_median_ci(small)[::-1])
    w_large = np.subtract(*bootstrap_median_ci(large)[::-1])
    assert w_large < w_small / 3  # width ~ 1/sqrt(n): sqrt(100) = 10x expected


def test_bootstrap_ci_wider_at_higher_level():
    x = np.random.default_rng(3).normal(1.0, 0.1, size=100)
    lo90, hi90 = bootstrap_median_ci(x, level=0.90)
    lo99, hi99 = bootstrap_median_ci(x, level=0.99)
    assert lo99 <= lo90 and hi90 <= hi99


def test_bootstrap_ci_small_and_degenerate():
    assert bootstrap_median_ci([3.0]) == (3.0, 3.0)
    assert bootstrap_median_ci([2.0, 2.0, 2.0]) == (2.0, 2.0)
    # n = 2: resampled medians are 1, 1.5 or 2 -> the interval spans the two values
    lo, hi = bootstrap_median_ci([1.0, 2.0])
    assert 1.0 <= lo <= 1.5 <= hi <= 2.0


def test_bootstrap_ci_bad_args():
    with pytest.raises(ValueError, match="level"):
        bootstrap_median_ci([1.0, 2.0], level=1.5)
    with pytest.raises(ValueError, match="n_resamples"):
        bootstrap_median_ci([1.0, 2.0], n_resamples=0)


def test_summarize_ci_matches_bootstrap_function():
    x = np.random.default_rng(5).normal(0.02, 0.001, size=30)
    s = summarize(x, ci_level=0.9, n_resamples=500, seed=11)
    assert (s.ci_low, s.ci_high) == bootstrap_median_ci(x, level=0.9, n_resamples=500, seed=11)
    assert s.ci_level == 0.9


# --------------------------------------------------------------------------- repeated runs


def test_olympic_mean():
    # sorted 1 2 3 4 100 -> drop 1 and 100 -> (2 + 3 + 4) / 3 = 3
    assert olympic_mean([4.0, 100.0, 1.0, 3.0, 2.0]) == pytest.approx(3.0, **APPROX)
    # three values: only the middle one remains
    assert olympic_mean([5.0, 1.0, 9.0]) == 5.0
    # ties: only one copy of the min and the max is dropped: [1,1,2,3,3] -> (1 + 2 + 3) / 3 = 2
    assert olympic_mean([1.0, 3.0, 1.0, 3.0, 2.0]) == pytest.approx(2.0, **APPROX)


@pytest.mark.parametrize("values", [[], [1.0], [1.0, 2.0]])
def test_olympic_mean_needs_three(values):
    with pytest.raises(ValueError, match="at least 3|empty"):
        olympic_mean(values)


def test_between_run():
    d = between_run([0.010, 0.012, 0.011, 0.013])
    assert d["n"] == 4
    # mean = 0.046 / 4 = 0.0115
    assert d["mean"] == pytest.approx(0.0115, rel=1e-12)
    # deviations -1.5 .5 -.5 1.5 (x 1e-3); squares 2.25 .25 .25 2.25 = 5 (x 1e-6); var = 5/3 e-6
    assert d["stdev"] == pytest.approx(math.sqrt(5 / 3) * 1e-3, rel=1e-12)
    assert d["cv"] == pytest.approx(math.sqrt(5 / 3) * 1e-3 / 0.0115, rel=1e-12)
    assert (d["min"], d["max"]) == (0.010, 0.013)
    # drop 0.010 and 0.013 -> (0.011 + 0.012) / 2 = 0.0115
    assert d["olympic_mean"] == pytest.approx(0.0115, rel=1e-12)
    json.dumps(d)


def test_between_run_small_n():
    d = between_run([2.0, 4.0])
    assert d["olympic_mean"] is None
    assert d["stdev"] == pytest.approx(math.sqrt(2.0))  # deviations -1, 1 -> var 2 / 1
    d1 = between_run([3.0])
    assert d1["stdev"] == 0.0 and d1["cv"] == 0.0 and d1["olympic_mean"] is None
    with pytest.raises(ValueError, match="empty"):
        between_run([])


# --------------------------------------------------------------------------- stability


def test_is_stable():
    # medians 1.0 and 1.04: |diff| 0.04 <= 0.05 * 1.0
    assert is_stable([0.9, 1.0, 1.1], [1.04, 1.03, 1.05])
    # medians 1.0 and 1.06: 0.06 > 0.05
    assert not is_stable([0.9, 1.0, 1.1], [1.06, 1.06, 1.07])
    # decreasing just as much is just as unstable (e.g. still warming up)
    assert not is_stable([1.0, 1.0, 1.0], [0.9, 0.9, 0.9])
    assert is_stable([1.0], [1.1], rel_tol=0.1 + 1e-12)
    with pytest.raises(ValueError, match="empty"):
        is_stable([], [1.0])
    with pytest.raises(ValueError, match="rel_tol"):
        is_stable([1.0], [1.0], rel_tol=-0.1)


# --------------------------------------------------------------------------- throughput


def test_throughput_exact_arithmetic():
    t = throughput(n_steps=100, global_batch=256, total_time_s=12.8)
    assert t["samples"] == 25600 and type(t["samples"]) is int  # 100 x 256, exact
    assert t["samples_per_s"] == pytest.approx(2000.0, rel=1e-12)  # 25600 / 12.8
    assert t["tokens_per_s"] == 0.0
    t = throughput(n_steps=10, global_batch=32, total_time_s=2.0, tokens_per_sample=512)
    assert t["samples"] == 320
    assert t["samples_per_s"] == 160.0  # 320 / 2
    assert t["tokens_per_s"] == 81920.0  # 320 * 512 / 2
    assert set(t) == {"samples", "samples_per_s", "tokens_per_s"}


def test_throughput_large_ints_stay_exact():
    # Python ints do not overflow or round: 10**7 steps x 2**20 batch
    t = throughput(10**7, 2**20, 1.0)
    assert t["samples"] == 10485760000000
    t = throughput(np.int64(3), np.int32(7), 1.0)
    assert t["samples"] == 21 and type(t["samples"]) is int


@pytest.mark.parametrize(
    "args, match",
    [
        ((0, 32, 1.0), "n_steps"),
        ((10, 0, 1.0), "global_batch"),
        ((10, 32, 0.0), "total_time_s"),
        ((10, 32, -1.0), "total_time_s"),
        ((10, 32, math.nan), "total_time_s"),
        ((10, 32, math.inf), "total_time_s"),
        ((10.5, 32, 1.0), "integers"),
        ((10, 32, 1.0, -1), "tokens_per_sample"),
    ],
)
def test_throughput_errors(args, match):
    with pytest.raises(ValueError, match=match):
        throughput(*args)


def test_module_constant_documented():
    assert stats.MAD_ZERO_REL_TOL == 1e-9
    assert "Hyndman" in stats.__doc__ and "Iglewicz" in stats.__doc__


# --------------------------------------------------------------------------- median_diff_ci


def test_median_diff_ci_separated_and_overlapping_samples():
    rng = np.random.default_rng(1)
    a = 0.010 + 0.0002 * rng.standard_normal(60)
    b = a[::-1] + 0.001  # the same spread, 1 ms slower
    d, lo, hi = stats.median_diff_ci(a, b)
    assert d == pytest.approx(float(np.median(b) - np.median(a)))
    assert d == pytest.approx(0.001) and lo <= d <= hi and 0 < lo < hi
    # the same distribution twice: the interval holds 0
    c = 0.010 + 0.0002 * rng.standard_normal(60)
    d, lo, hi = stats.median_diff_ci(a, c)
    assert lo < 0 < hi
    # deterministic for a seed; b - a is minus a - b
    assert stats.median_diff_ci(a, c) == (d, lo, hi)
    d2, lo2, hi2 = stats.median_diff_ci(c, a)
    assert d2 == pytest.approx(-d) and hi2 > 0 > lo2
    with pytest.raises(ValueError, match="level"):
        stats.median_diff_ci(a, c, level=1.0)
    with pytest.raises(ValueError):
        stats.median_diff_ci([], c)


# --------------------------------------------------------------------------- bootstrap cost


def test_bootstrap_medians_exact_distribution_odd_n():
    # For sorted x = 0..n-1 the bootstrap median is the m-th smallest of n uniform indices:
    # P(median <= j) = P(Binomial(n, (j + 1) / n) >= m), m = (n + 1) / 2.
    from scipy.stats import binom

    for n in (5, 9, 31):
        b = stats.bootstrap_medians(np.arange(n, dtype=float), 200_000, np.random.default_rng(1))
        m = (n + 1) // 2
        exact = np.array([binom.sf(m - 1, n, (j + 1) / n) for j in range(n)])
        emp = np.array([(b <= j).mean() for j in range(n)])
        assert np.abs(exact - emp).max() < 0.005  # 200k draws: sd of a frequency <= 0.0011


def test_bootstrap_medians_match_resampling_even_n_and_ties():
    rng = np.random.default_rng(2)
    for x in (np.arange(10, dtype=float), np.round(rng.normal(1, 0.05, 30), 2)):
        xs = np.sort(x)
        b = stats.bootstrap_medians(xs, 100_000, np.random.default_rng(3))
        brute = np.median(x[rng.integers(0, x.size, (100_000, x.size))], axis=1)
        for g in np.unique(brute):
            assert abs((b <= g).mean() - (brute <= g).mean()) < 0.01


def test_bootstrap_ci_agrees_with_classic_resampling():
    # scipy.stats.bootstrap (resampling, the method before) and the exact-distribution draws
    # give the same interval up to Monte Carlo noise: compare means over 30 seeds each.
    from scipy.stats import bootstrap

    x = np.random.default_rng(4).lognormal(np.log(0.01), 0.1, 60)
    old = np.array([[bootstrap((x,), np.median, n_resamples=2000, vectorized=True,
                               confidence_level=0.95, method="percentile",
                               rng=np.random.default_rng(s)).confidence_interval[k]
                     for k in (0, 1)] for s in range(30)])
    new = np.array([bootstrap_median_ci(x, seed=s) for s in range(30)])
    noise = np.sqrt(old.var(axis=0) / 30 + new.var(axis=0) / 30)
    assert np.all(np.abs(old.mean(axis=0) - new.mean(axis=0)) < 4 * noise + 1e-12)


def test_summarize_1e5_samples_fast_and_bounded():
    import time
    import tracemalloc

    x = np.random.default_rng(0).lognormal(np.log(0.01), 0.2, 100_000)
    tracemalloc.start()
    t0 = time.perf_counter()
    s = summarize(x)
    elapsed = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert elapsed < 1.0  # was 27 s
    assert peak < 64 * 2**20  # was 3.2 GB: O(n + n_resamples) now
    assert s.ci_low < s.median < s.ci_high and (s.ci_high - s.ci_low) / s.median < 0.01
    # two-sample CIs of medians and means are bounded too (means: resampled in chunks)
    tracemalloc.start()
    stats.median_diff_ci(x, x * 1.01)
    stats.ratio_ci(x[:20_000], x[:20_000] * 1.01, statistic="mean")
    assert tracemalloc.get_traced_memory()[1] < 160 * 2**20
    tracemalloc.stop()


def test_mean_resampling_unchanged_within_one_chunk():
    # Up to _RESAMPLE_CHUNK_ELEMS indices the draws are one call, as before the chunking.
    a, b = [0.030] * 16, [0.330, 0.030, 0.030, 0.030] * 4
    rng = np.random.default_rng(0)
    ma = np.mean(np.asarray(a)[rng.integers(0, 16, (2000, 16))], axis=1)
    mb = np.mean(np.asarray(b)[rng.integers(0, 16, (2000, 16))], axis=1)
    lo, hi = np.percentile(ma / mb, [2.5, 97.5])
    assert stats.ratio_ci(a, b, statistic="mean")[1:] == (float(lo), float(hi))


def test_min_samples_for_ci_and_summary_flag():
    # [min, max] covers the median with probability 1 - 2 * 0.5**n (David & Nagaraja 7.1):
    # n = 5 -> 0.9375 < 0.95; n = 6 -> 0.96875
    assert stats.MIN_CI_SAMPLES == stats.min_samples_for_ci(0.95) == 6
    assert stats.min_samples_for_ci(0.99) == 8 and stats.min_samples_for_ci(0.9) == 5
    with pytest.raises(ValueError, match="level"):
        stats.min_samples_for_ci(1.0)
    few = summarize([1.0, 1.1, 0.9], min_ci_samples=stats.MIN_CI_SAMPLES)
    assert few.ci_low is None and few.ci_high is None and few.ci_too_few
    assert few.median == 1.0 and json.loads(json.dumps(few.to_dict()))["ci_low"] is None
    assert summarize([1.0, 1.1, 0.9]).ci_too_few  # the flag without dropping the CI
    enough = summarize([1.0, 1.1, 0.9, 1.2, 1.0, 0.95], min_ci_samples=stats.MIN_CI_SAMPLES)
    assert not enough.ci_too_few and enough.ci_low <= enough.median <= enough.ci_high
    with pytest.raises(ValueError, match="min_ci_samples"):
        summarize([1.0], min_ci_samples=0)


@pytest.mark.parametrize("level", [0.0, 1.0, 1.5, -0.1, float("nan")])
def test_every_interval_refuses_a_level_outside_0_1_in_the_same_words(level):
    """One check of the confidence level (:func:`dlperf.stats.check_level`) for every
    interval of stats and for the gate's run-level ratio: the same ValueError, which names
    the level given and an example."""
    from dlperf.report.regress import ratio_from_runs

    x = [0.010, 0.011, 0.012, 0.0105, 0.0102, 0.0111, 0.0108, 0.0099]
    calls = [lambda: stats.min_samples_for_ci(level),
             lambda: stats.bootstrap_median_ci(x, level=level),
             lambda: stats.summarize(x[:3], ci_level=level, min_ci_samples=6),
             lambda: stats.between_run(x, level=level),
             lambda: stats.ratio_ci(x, x, level=level),
             lambda: stats.ratio_ci(x, x, statistic="mean", level=level),
             lambda: stats.median_diff_ci(x, x, level=level),
             lambda: stats.trend(x * 5, level=level),
             lambda: ratio_from_runs(x[:3], x[3:6], level=level)]
    for call in calls:
        with pytest.raises(ValueError) as e:
            call()
        assert str(e.value) == f"level must be in (0, 1), e.g. 0.95; got {level!r}"
