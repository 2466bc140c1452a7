"""Drift and two modes (dlperf.stats.trend, dlperf.stats.two_modes) on synthetic series with a
known drift or known modes, and on stationary noise of several shapes for false alarms."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from dlperf import stats

N = 200


def _normal(r, n=N):
    return 0.01 * (1 + 0.03 * r.standard_normal(n))


def _lognormal(r, n=N):
    return 0.01 * np.exp(0.2 * r.standard_normal(n))


def _ar1(r, n=N, phi=0.7, sd=0.03):
    e, x = r.standard_normal(n) * sd, np.zeros(n)
    for i in range(1, n):
        x[i] = phi * x[i - 1] + e[i]
    return 0.01 * np.exp(x)


def _exp_tail(r, n=N):
    return 0.01 * (1 + 0.1 * r.exponential(size=n))


def _outliers(r, n=N):
    return 0.01 * (1 + 0.02 * r.standard_normal(n)) * np.where(r.random(n) < 0.03, 3.0, 1.0)


def _quantised(r, n=N):
    return np.round(1e-4 * (1 + 0.01 * r.standard_normal(n)), 7)  # a 0.1 us clock


@pytest.mark.simulation
@pytest.mark.parametrize("gen", [_normal, _lognormal, _ar1, _exp_tail, _outliers, _quantised])
def test_stationary_noise_rarely_drifts_or_splits(gen):
    """Stationary series of many shapes (iid normal and lognormal, autocorrelated AR(1), an
    exponential tail, rare 3x outliers, a coarse clock): at most 1 in 100 called drifting and
    at most 1 in 100 called two modes."""
    drift = modes = 0
    for seed in range(100):
        x = gen(np.random.default_rng(seed))
        t, m = stats.trend(x), stats.two_modes(x)
        drift += bool(t and t.drifting)
        modes += bool(m and m.bimodal)
    assert drift <= 1
    assert modes <= 1


@pytest.mark.parametrize("end", [1.1, 1.5, 2.0, 0.8])
def test_known_drift_is_found_with_its_size(end):
    """A step time that moves linearly to ``end`` x its start over the segment (slower or
    faster) is drifting in 20 of 20 series, and the relative change's interval holds the true
    change."""
    true = end - 1.0
    covered = 0
    for seed in range(20):
        r = np.random.default_rng(seed)
        x = 0.01 * np.linspace(1.0, end, N) * (1 + 0.03 * r.standard_normal(N))
        t = stats.trend(x)
        assert t is not None and t.drifting
        assert math.copysign(1, t.change_rel) == math.copysign(1, true)
        # change_rel is over the median (the middle of the ramp), the true change over the start
        true_rel = true / ((1.0 + end) / 2)
        covered += t.change_rel_ci[0] <= true_rel <= t.change_rel_ci[1]
    assert covered >= 17


def test_a_small_drift_is_significant_but_not_a_drift():
    """A 2% ramp over the segment is below DRIFT_MIN_REL: not a drift, even where the trend is
    significant (the size rule, not the p-value, decides)."""
    x = 0.01 * np.linspace(1.0, 1.02, 2000) * (1 + 0.002 * np.random.default_rng(0)
                                                .standard_normal(2000))
    t = stats.trend(x)
    assert t is not None and t.p < 1e-6 and not t.drifting
    assert 0.01 < t.change_rel < 0.03


def test_trend_matches_kendall_and_theil_sen():
    """On a short series the statistic equals scipy's Kendall tau (tau-a without ties) and the
    slope and its interval equal scipy.stats.theilslopes'."""
    r = np.random.default_rng(3)
    x = 0.01 + 1e-5 * np.arange(50) + 1e-4 * r.standard_normal(50)
    t = stats.trend(x)
    assert t is not None and t.points == 50
    assert t.tau == pytest.approx(sps.kendalltau(np.arange(50), x).statistic)
    ts = sps.theilslopes(x, np.arange(50), alpha=0.95)
    assert t.slope_s == pytest.approx(ts.slope)
    assert t.slope_ci_s == pytest.approx((ts.low_slope, ts.high_slope))


def test_long_series_use_block_medians_and_stay_fast():
    """100,000 samples are tested on TREND_MAX_POINTS block medians; a drift is still found."""
    x = 0.01 * np.linspace(1.0, 1.5, 100_000) * np.exp(0.05 * np.random.default_rng(1)
                                                       .standard_normal(100_000))
    t = stats.trend(x)
    assert t is not None and t.points == stats.TREND_MAX_POINTS and t.n == 100_000
    assert t.drifting and 0.3 < t.change_rel < 0.6


@pytest.mark.parametrize("n", [401, 799, 800, 801, 1203, 5000, 12347])
def test_block_medians_are_each_blocks_median_bit_for_bit(n):
    r = np.random.default_rng(n)
    x = np.round(0.01 * np.exp(0.2 * r.standard_normal(n)), 5)  # ties too
    edges = np.linspace(0, n, stats.TREND_MAX_POINTS + 1).astype(np.int64)
    want = [np.median(x[a:b]) for a, b in zip(edges[:-1], edges[1:], strict=True)]
    idx, val = stats._blocks(x, stats.TREND_MAX_POINTS)
    assert val.tolist() == [float(v) for v in want]  # equal, not close
    assert idx.tolist() == [(a + b - 1) / 2.0 for a, b in zip(edges[:-1].tolist(),
                                                               edges[1:].tolist(), strict=True)]
    assert len({b - a for a, b in zip(edges[:-1], edges[1:], strict=True)}) == (
        1 if n % stats.TREND_MAX_POINTS == 0 else 2)  # blocks of one or two lengths


def test_trend_edges():
    assert stats.trend([0.01] * (stats.TREND_MIN_SAMPLES - 1)) is None
    flat = stats.trend([0.01] * 50)
    assert flat is not None and not flat.drifting and flat.p == 1.0
    with pytest.raises(ValueError, match="non-finite"):
        stats.trend([0.01] * 20 + [math.nan])
    with pytest.raises(ValueError, match="level"):
        stats.trend([0.01] * 20, level=1.5)


@pytest.mark.parametrize("slow,share", [(1.5, 0.4), (1.3, 0.2), (1.08, 0.5), (2.0, 0.5)])
def test_known_modes_are_found_with_their_shares(slow, share):
    """Two step times (the slow one ``slow`` x the fast, in ``share`` of the steps, 1% noise):
    two modes in 20 of 20 series, each mode's time within 2% and its share within 0.08."""
    for seed in range(20):
        r = np.random.default_rng(seed)
        is_slow = r.random(N) < share
        x = 0.01 * np.where(is_slow, slow, 1.0) * (1 + 0.01 * r.standard_normal(N))
        m = stats.two_modes(x)
        assert m is not None and m.bimodal
        assert m.fast_s == pytest.approx(0.01, rel=0.02)
        assert m.slow_s == pytest.approx(0.01 * slow, rel=0.02)
        assert m.slow_share == pytest.approx(is_slow.mean(), abs=0.08)
        assert m.fast_share + m.slow_share == pytest.approx(1.0)


def test_alternating_steps_are_two_modes_and_the_median_none_took():
    """A step alternating between 10 and 12 ms: two modes of half the steps each."""
    x = 0.01 * np.where(np.arange(N) % 2, 1.2, 1.0) * (1 + 0.005 * np.random.default_rng(0)
                                                        .standard_normal(N))
    m = stats.two_modes(x)
    assert m is not None and m.bimodal
    assert m.fast_share == pytest.approx(0.5, abs=0.01)


def test_a_rare_slow_mode_or_close_modes_are_not_two_modes():
    """A slow mode in 5% of the steps (a tail: below MODES_MIN_SHARE), and two modes 2% apart
    (below MODES_MIN_GAP_REL), are not reported."""
    r = np.random.default_rng(0)
    rare = 0.01 * np.where(np.arange(400) % 20 == 0, 1.5, 1.0) * (1 + 0.005
                                                                   * r.standard_normal(400))
    m = stats.two_modes(rare)
    assert m is not None and not m.bimodal
    close = 0.01 * np.where(np.arange(400) % 2, 1.02, 1.0) * (1 + 0.001 * r.standard_normal(400))
    m = stats.two_modes(close)
    assert m is not None and not m.bimodal


def test_two_modes_edges():
    assert stats.two_modes([0.01] * (stats.MODES_MIN_SAMPLES - 1)) is None
    assert stats.two_modes([0.01] * 100) is None  # all equal: nothing to split
    with pytest.raises(ValueError, match="positive"):
        stats.two_modes([0.01] * 30 + [0.0])
    big = 0.01 * np.where(np.arange(60_000) % 3 == 0, 1.5, 1.0)
    m = stats.two_modes(big)  # thinned to MODES_MAX_POINTS (no stride to alias), shares kept
    assert m is not None and m.bimodal and m.slow_share == pytest.approx(1 / 3, abs=0.01)
