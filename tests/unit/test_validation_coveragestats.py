"""The exact binomial judgement of a cell's interval coverage (dlperf.validation.coveragestats)."""

from __future__ import annotations

import math

import pytest

from dlperf.validation import coveragestats as cs


def _le(k: int, n: int, p: float) -> float:
    return sum(math.comb(n, j) * p ** j * (1 - p) ** (n - j) for j in range(k + 1))


@pytest.mark.parametrize("k,n", [(0, 1), (1, 1), (0, 10), (7, 10), (10, 10), (17, 20),
                                 (18, 20), (10, 20), (150, 164), (33, 39)])
def test_the_tails_are_the_binomial_sums(k, n):
    assert cs.tail_le(k, n, 0.9) == pytest.approx(_le(k, n, 0.9), rel=1e-9, abs=1e-15)
    assert cs.tail_ge(k, n, 0.9) == pytest.approx(1 - _le(k - 1, n, 0.9) if k else 1.0,
                                                  rel=1e-9, abs=1e-15)


def test_the_p_value_is_the_doubled_one_sided_exact_test():
    from scipy.stats import binomtest

    for k, n in [(18, 20), (10, 20), (17, 20), (20, 20), (0, 10), (5, 6), (150, 164)]:
        less = binomtest(k, n, 0.9, alternative="less").pvalue
        greater = binomtest(k, n, 0.9, alternative="greater").pvalue
        assert cs.p_value(k, n) == pytest.approx(min(1.0, 2 * min(less, greater)), rel=1e-9)
    # by hand: 10 of 10 at 90%: 2 x 0.9^10; 0 of 10: 2 x 0.1^10
    assert cs.p_value(10, 10) == pytest.approx(2 * 0.9 ** 10)
    assert cs.p_value(0, 10) == pytest.approx(2 * 0.1 ** 10)
    assert cs.p_value(18, 20) == 1.0  # both tails above one half


def test_clopper_pearson_bounds_are_known_values():
    from scipy.stats import beta, binomtest

    # closed forms at the ends: (a/2)^(1/n) and 1 - (a/2)^(1/n)
    assert cs.clopper_pearson(10, 10) == pytest.approx((0.025 ** 0.1, 1.0))
    assert cs.clopper_pearson(0, 10) == pytest.approx((0.0, 1 - 0.025 ** 0.1))
    assert cs.clopper_pearson(18, 20) == pytest.approx((0.68302, 0.98765), abs=1e-5)
    assert cs.clopper_pearson(10, 20) == pytest.approx((0.27196, 0.72804), abs=1e-5)
    for k, n in [(1, 6), (5, 6), (33, 39), (150, 164)]:
        ci = binomtest(k, n).proportion_ci(0.95, method="exact")
        assert cs.clopper_pearson(k, n) == pytest.approx((ci.low, ci.high), rel=1e-9)
        assert cs.clopper_pearson(k, n, 0.9)[0] == pytest.approx(beta.ppf(0.05, k, n - k + 1))


def test_the_interval_and_the_p_value_agree_on_every_count():
    for n in (1, 6, 20, 39):
        for k in range(n + 1):
            j = cs.judge(k, n)
            assert j.consistent == (j.p >= 0.05 - 1e-12), (k, n)
            assert j.below == (j.high < 0.9)


def test_18_of_20_is_consistent_with_90_and_10_of_20_is_below():
    good, bad = cs.judge(18, 20), cs.judge(10, 20)
    assert good.consistent and not good.below and good.coverage == 0.9
    assert not bad.consistent and bad.below and bad.p < 1e-4
    assert not cs.judge(20, 20).below and cs.judge(20, 20).consistent  # 100% of 20: p 0.24
    assert not cs.judge(200, 200).consistent and not cs.judge(200, 200).below  # above
    with pytest.raises(ValueError, match="rows"):
        cs.judge(0, 0)
    with pytest.raises(ValueError, match="within"):
        cs.judge(21, 20)
    with pytest.raises(ValueError, match="level"):
        cs.judge(1, 2, 1.0)


def test_the_design_effect_is_one_for_a_spread_like_the_binomial_and_grows_with_clustering():
    # every model misses one row in ten: the models agree, no excess variance
    assert cs.design_effect([(9, 10)] * 4) == 1.0
    # one model misses everything, three cover everything: all the misses in one cluster
    d = cs.design_effect([(0, 10), (10, 10), (10, 10), (10, 10)])
    c = 0.75
    want = 4 / 3 * (3 * (10 - c * 10) ** 2 + (0 - c * 10) ** 2) / 40 ** 2 / (c * (1 - c) / 40)
    assert d == pytest.approx(want) and d > 5
    assert cs.design_effect([(10, 10), (5, 5)]) == 1.0  # nothing missed: no variance to scale
    assert cs.design_effect([(7, 10)]) == 10.0  # one model: one observation
    with pytest.raises(ValueError):
        cs.design_effect([])


def test_the_clustered_judgement_widens_where_one_model_holds_the_misses():
    from scipy.stats import t

    cells = [(0, 10), (10, 10), (10, 10), (10, 10)]
    plain, clus = cs.judge(30, 40), cs.clustered(cells)
    assert plain.below and not plain.consistent  # 75% of 40 independent rows
    assert clus.consistent and clus.rows < 3  # four models: a few rows of evidence
    assert clus.coverage == 0.75 and clus.high - clus.low > plain.high - plain.low
    # no excess variance: only the degrees-of-freedom factor, (t_39 / t_3)^2 by hand
    want = 40 * (t.ppf(0.975, 39) / t.ppf(0.975, 3)) ** 2
    assert cs.effective_rows([(9, 10)] * 4) == pytest.approx(want)
    same = cs.clustered([(9, 10)] * 4)
    assert (same.low, same.high, same.p) == pytest.approx(
        (cs.judge(0.9 * want, want).low, cs.judge(0.9 * want, want).high,
         cs.judge(0.9 * want, want).p))
    assert cs.effective_rows([(7, 10)]) == 1.0  # one model: one observation
    many = [(9, 10)] * 200  # many models: the factor tends to 1
    assert cs.effective_rows(many) == pytest.approx(2000, rel=0.02)
    # effective counts: the tails extend the binomial continuously, between its integers
    assert cs.tail_le(7, 10, 0.9) < cs.tail_le(7.5, 10, 0.9) < cs.tail_le(8, 10, 0.9)


def test_one_model_is_one_observation_whatever_it_reads():
    assert cs.effective_rows([(10, 10)]) == cs.effective_rows([(3, 10)]) == 1.0
    assert cs.clustered([(10, 10)]).consistent and cs.clustered([(0, 10)]).below is False
