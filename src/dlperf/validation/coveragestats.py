"""Whether an interval rule's coverage in one cell is consistent with its nominal level.

A cell (a path's category and a bound, :func:`dlperf.validation.coverage_cells`) covers ``k`` of
its ``n`` held-out rows. Under a rule that covers each row with probability ``level`` (an
exactly calibrated rule), ``k`` is binomial(``n``, ``level``) when the rows are independent, so
a cell of 20 rows reads anything from 80% to 100% without the rule being wrong. Two judgements:

* **binomial** (rows independent): the exact central 95% interval on the coverage (Clopper &
  Pearson 1934, *Biometrika* 26:404-413: the bounds where a one-sided binomial tail is 2.5%,
  as beta quantiles), and the exact two-sided p-value of the binomial test that matches it,
  ``min(1, 2 min(P(X <= k), P(X >= k)))`` (the "central" test; Fay 2010, *R Journal*
  2(1):53-58: ``level`` is inside the interval exactly when this p-value is at least 0.05,
  which the "minimum likelihood" p-value of ``scipy.stats.binomtest`` does not guarantee).
* **model-clustered**: rows of one model are correlated (the roofline misses a model at every
  batch), so a cell of ``n`` rows from ``m`` models carries less than ``n`` rows of evidence.
  The same interval and p-value on Korn & Graubard's effective sample: :func:`clustered`
  (chosen among five candidates on the development cells, ``benchmarks/coverage_consistency.py``
  and docs/perfmodel.md, "Is a cell's coverage consistent with 90%?": the one whose false
  alarms on a calibrated rule with the models' measured correlation stay under 5%, with the
  most power against 80%).

Effective counts are not integers; the binomial tails are taken as regularized incomplete beta
functions, ``P(X >= k) = I_p(k, n - k + 1)``, which equal the binomial sums at integer counts
and extend them continuously (Korn & Graubard 1998 use the same extension).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: The confidence of every interval on a cell's coverage (two-sided).
CONFIDENCE = 0.95


def _check(k: float, n: float, p: float | None = None) -> None:
    if not n > 0:
        raise ValueError(f"a cell needs rows, got n = {n}")
    if not 0 <= k <= n:
        raise ValueError(f"covered rows must be within 0..{n}, got {k}")
    if p is not None and not 0.0 < p < 1.0:
        raise ValueError(f"level must be in (0, 1), got {p}")


def tail_ge(k: float, n: float, p: float) -> float:
    """``P(X >= k)`` for ``X`` binomial(``n``, ``p``): ``I_p(k, n - k + 1)`` (1 at ``k = 0``);
    ``k`` and ``n`` may be effective (non-integer) counts.

    Raises:
        ValueError: ``n <= 0``, ``k`` outside ``[0, n]`` or ``p`` outside (0, 1).
    """
    from scipy.special import betainc

    _check(k, n, p)
    return 1.0 if k <= 0 else float(betainc(k, n - k + 1.0, p))


def tail_le(k: float, n: float, p: float) -> float:
    """``P(X <= k)`` for ``X`` binomial(``n``, ``p``): ``1 - I_p(k + 1, n - k)`` (1 at ``k = n``).

    Raises:
        ValueError: as :func:`tail_ge`.
    """
    from scipy.special import betainc

    _check(k, n, p)
    return 1.0 if k >= n else float(1.0 - betainc(k + 1.0, n - k, p))


def p_value(k: float, n: float, p: float = 0.9) -> float:
    """Exact two-sided (central) binomial p-value of ``k`` covered of ``n`` under coverage
    ``p``: ``min(1, 2 min(P(X <= k), P(X >= k)))``, twice the probability of a reading at least
    as far from ``p`` on the same side. ``p`` is inside :func:`clopper_pearson`'s 95% interval
    exactly when this is >= 0.05 (Fay 2010).

    Raises:
        ValueError: as :func:`tail_ge`.
    """
    return min(1.0, 2.0 * min(tail_le(k, n, p), tail_ge(k, n, p)))


def clopper_pearson(k: float, n: float, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Exact central interval on a binomial proportion from ``k`` of ``n`` (Clopper & Pearson
    1934): ``(Beta^-1(a/2; k, n - k + 1), Beta^-1(1 - a/2; k + 1, n - k))`` with
    ``a = 1 - confidence``; 0 at ``k = 0`` and 1 at ``k = n``. Proportions (0-1).

    Raises:
        ValueError: ``n <= 0``, ``k`` outside ``[0, n]`` or ``confidence`` outside (0, 1).
    """
    from scipy.special import betaincinv

    _check(k, n, confidence)
    a = 1.0 - confidence
    lo = 0.0 if k <= 0 else float(betaincinv(k, n - k + 1.0, a / 2))
    hi = 1.0 if k >= n else float(betaincinv(k + 1.0, n - k, 1.0 - a / 2))
    return lo, hi


@dataclass(frozen=True)
class Judgement:
    """One cell's coverage against a level: ``covered`` of ``rows`` (effective counts for the
    clustered judgement), ``coverage`` (0-1), the exact ``CONFIDENCE`` interval ``low``-``high``
    on it, the two-sided ``p`` of :func:`p_value`; ``consistent``: the level is inside the
    interval; ``below``: the interval lies wholly under the level (coverage significantly
    below it, the cells that fail)."""

    covered: float
    rows: float
    coverage: float
    low: float
    high: float
    p: float
    consistent: bool
    below: bool


def judge(k: float, n: float, level: float = 0.9,
          confidence: float = CONFIDENCE) -> Judgement:
    """:class:`Judgement` of ``k`` covered rows of ``n`` against ``level`` (rows independent):
    :func:`clopper_pearson` and :func:`p_value`. 18 of 20 at 90%: 68.3-98.8%, consistent;
    10 of 20: 27.2-72.8%, below.

    Raises:
        ValueError: ``n <= 0``, ``k`` outside ``[0, n]``, ``level`` or ``confidence`` outside
            (0, 1).
    """
    _check(k, n, level)
    lo, hi = clopper_pearson(k, n, confidence)
    return Judgement(k, n, k / n, lo, hi, p_value(k, n, level), lo <= level <= hi, hi < level)


def design_effect(per_model: Sequence[tuple[int, int]]) -> float:
    """Kish's design effect of a cell's coverage, from ``(covered, rows)`` per model (cluster):
    the cluster-robust variance of the covered share (linearization of a ratio over
    with-replacement clusters, ``m / (m - 1) sum_j (k_j - c n_j)^2 / n^2``, ``c = k / n``)
    over the binomial one, ``c (1 - c) / n`` (Rao & Scott 1992, *Biometrics* 48:577-585);
    at least 1 (Korn & Graubard 1998 truncate it there). 1 where the binomial variance is 0
    (every row covered, or none); ``n`` for one model (its rows one observation).

    Raises:
        ValueError: no rows, or a model with covered rows outside ``0..rows``.
    """
    for k, n in per_model:
        _check(k, n)
    m = len(per_model)
    k_all, n_all = sum(k for k, _ in per_model), sum(n for _, n in per_model)
    if m == 0:
        raise ValueError("a cell needs rows, got none")
    c = k_all / n_all
    if c in (0.0, 1.0):
        return 1.0
    if m == 1:
        return float(n_all)
    v_cluster = m / (m - 1) * sum((k - c * n) ** 2 for k, n in per_model) / n_all ** 2
    return max(1.0, v_cluster / (c * (1.0 - c) / n_all))


def effective_rows(per_model: Sequence[tuple[int, int]],
                   confidence: float = CONFIDENCE) -> float:
    """Korn & Graubard's (1998, *Survey Methodology* 24:193-201) effective sample size of a
    cell clustered by model, from ``(covered, rows)`` per model:
    ``n / d x (t_{n-1} / t_{m-1})^2``, at most ``n``, where ``d`` is :func:`design_effect`,
    ``m`` the models and ``t_v`` Student's ``1 - (1 - confidence) / 2`` quantile with ``v``
    degrees of freedom (the variance behind ``d`` is estimated from ``m`` clusters, so it
    carries ``m - 1`` of them: 2 models leave about 1/40 of the rows' evidence). 1 for one
    model, whatever its rows read.

    Raises:
        ValueError: as :func:`design_effect`, or ``confidence`` outside (0, 1).
    """
    from scipy.stats import t as student_t

    d = design_effect(per_model)
    _check(0, 1, confidence)
    m, n = len(per_model), sum(n for _, n in per_model)
    if m < 2:
        return 1.0
    q = 1.0 - (1.0 - confidence) / 2
    factor = (float(student_t.ppf(q, n - 1)) / float(student_t.ppf(q, m - 1))) ** 2
    return min(float(n), n / d * factor)


def clustered(per_model: Sequence[tuple[int, int]], level: float = 0.9,
              confidence: float = CONFIDENCE) -> Judgement:
    """:class:`Judgement` of a cell whose rows are clustered by model, from ``(covered, rows)``
    per model: the exact interval and p-value of :func:`judge` on the effective sample
    (:func:`effective_rows`, Korn & Graubard 1998), its covered share the cell's.

    Raises:
        ValueError: as :func:`design_effect`, or ``level`` / ``confidence`` outside (0, 1).
    """
    n = effective_rows(per_model, confidence)
    share = sum(k for k, _ in per_model) / sum(n for _, n in per_model)
    return judge(share * n, n, level, confidence)


__all__ = ["CONFIDENCE", "Judgement", "clopper_pearson", "clustered",
           "design_effect", "effective_rows", "judge", "p_value", "tail_ge", "tail_le"]
