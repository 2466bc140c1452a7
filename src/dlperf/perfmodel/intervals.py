"""Prediction intervals from held-out back-test residuals.

A prediction's interval is ``prediction x [low_ratio, high_ratio]``, the ratios taken from the
held-out residuals ``log(measured / predicted)`` of the back-test category that matches how the
prediction was made (:mod:`dlperf.perfmodel.api`). Two rules:

* ``pooled`` (for comparison): the empirical ``(1 - level) / 2`` and
  ``(1 + level) / 2`` quantiles (``numpy.quantile``, linear interpolation) of all the
  category's residuals;
* ``mondrian`` (the rule :func:`dlperf.perfmodel.api.predict` uses): Mondrian conformal
  prediction (Vovk, Gammerman & Shafer 2005, *Algorithmic Learning in a Random World*, ch. 4):
  the residuals of the prediction's own (category, bound) group when that group has at least
  :data:`MIN_GROUP_ROWS` of them, else the whole category's; from those ``n`` residuals the
  finite-sample conformal quantiles (:func:`conformal_bounds`), which hold the next
  exchangeable residual with probability >= ``level``.

Both are widened to include 0, so the prediction itself is always inside its interval (a
wider interval: coverage can only rise).

How often such intervals hold a held-out measurement is judged apart from prediction
(:func:`dlperf.validation.intervalcheck.coverage`).

A category with too few rows for a finite two-sided conformal interval of its own is pooled with
the categories that predict the same quantity (:data:`POOLED_WITH`): the N-GPU step through
``predict --nproc`` with the 2-GPU step from the 1-GPU one. An interval borrowed from another
GPU's residuals is widened by the measured cross-GPU error (:func:`widened`,
:data:`CROSS_GPU_ERROR`).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np

#: Fewest residuals a (category, bound) group needs to get an interval of its own (else the
#: category's pooled residuals): 20 gives finite two-sided 90% conformal quantiles (19 do).
MIN_GROUP_ROWS = 20

#: Back-test categories :func:`dlperf.perfmodel.api.predict` takes intervals from whose
#: leave-one-point-out coverage ``--validate`` prints
#: (:meth:`dlperf.validation.Validation.coverage`, the default of
#: :func:`dlperf.validation.intervalcheck.coverage`): every what-if category of the back-test
#: (:data:`dlperf.validation.backtest.WHATIF_CATEGORIES`; the framework ones are
#: :data:`dlperf.perfmodel.whatifs.FRAMEWORK_WHATIFS`'s). The split table judges every category
#: leave-one-model-out (:meth:`dlperf.validation.Validation.split_table`).
INTERVAL_CATEGORIES = ("held-out batch", "leave-one-model-out", "what-if fp32->bf16",
                       "what-if eager->graph", "what-if torch->jax", "what-if jax->torch",
                       "what-if torch graph->jax", "what-if jax->torch graph",
                       "what-if two changes", "what-if B->2B", "2-GPU from 1-GPU")

#: Categories whose rows are pooled with others' for an interval (:func:`calibration_categories`):
#: the stored one-node N-device points through ``predict --nproc`` (8 on the committed H200
#: files, under the 19 a two-sided 90% conformal interval needs) with the 2-GPU-from-1-GPU
#: pairs, both errors of an N-device step on the same points. Chosen on development rows:
#: leave-one-model-out 5 of 6 covered pooled against 3 of 6 alone (2 development models);
#: leave-one-point-out 5 of 6 either way (alone: ``max |r|`` of 5 rows).
POOLED_WITH: dict[str, tuple[str, ...]] = {
    "N-GPU via predict --nproc": ("2-GPU from 1-GPU",)}

#: Median relative error of a step predicted for one GPU from another's measurements, where a
#: prediction's interval comes from residuals measured on another GPU (:func:`widened`):
#: H200 -> H100, 23 points, 4.8% (``benchmarks/results/h100/judged_v2.md``, the profile
#: method; H100 -> H200 4.1%). The one pair of GPUs measured; other pairs use it too and say so.
CROSS_GPU_ERROR = 0.048
#: The GPUs :data:`CROSS_GPU_ERROR` was measured between.
CROSS_GPU_MEASURED = ("NVIDIA H200", "NVIDIA H100 80GB HBM3")

#: One held-out residual: ``(log(measured / predicted), bound of the prediction or None)``.
Residual = tuple[float, str | None]
#: A residual with the identity (``source:result_id``, :func:`records.point_id`) of the measured
#: point it is the error on, or None: ``(log ratio, bound, point)``.
KeyedResidual = tuple[float, str | None, str | None]


@dataclass(frozen=True)
class Interval:
    """Multiplicative interval around a prediction.

    Attributes:
        low_ratio, high_ratio: the interval is ``prediction x [low_ratio, high_ratio]``
            (``low_ratio <= 1 <= high_ratio``).
        group: which residuals it came from, e.g. ``held-out batch, host-bound`` or
            ``2-GPU from 1-GPU, pooled``.
        n: how many residuals.
        method: ``conformal`` (two one-sided conformal quantiles), ``conformal |r|`` (a
            symmetric one: too few rows for two sides), ``max |r|`` (too few rows for any
            finite conformal interval at this level: ``+-`` the largest ``|r|``,
            :func:`conformal_bounds`), ``empirical`` (the pooled rule).
    """

    low_ratio: float
    high_ratio: float
    group: str
    n: int
    method: str

    def describe(self) -> str:
        """``held-out batch, host-bound: 105 rows, conformal``."""
        return f"{self.group}: {self.n} rows, {self.method}"


def calibration_categories(category: str) -> tuple[str, ...]:
    """The back-test categories whose residuals build ``category``'s interval: its own, then
    those of :data:`POOLED_WITH`."""
    return (category, *POOLED_WITH.get(category, ()))


def widened(ivl: Interval, error: float) -> Interval:
    """``ivl`` widened on both sides by a relative ``error`` (``low / (1 + error)``,
    ``high * (1 + error)``): the interval of residuals measured where the prediction's own
    errors were not (another GPU's: :data:`CROSS_GPU_ERROR`).

    Raises:
        ValueError: ``error`` negative.
    """
    if error < 0:
        raise ValueError(f"a widening error must be >= 0, got {error}")
    return Interval(ivl.low_ratio / (1 + error), ivl.high_ratio * (1 + error), ivl.group,
                    ivl.n, ivl.method)


def cross_gpu(ivl: Interval, gpu: str | None, gpus: Collection[str],
              device: str | None = None) -> tuple[Interval, str]:
    """``(interval, words)``: a borrowed interval ``ivl`` widened by :data:`CROSS_GPU_ERROR`
    (:func:`widened`) where the devices its residuals were measured on (``gpus``: device
    names of the borrowed table's fits, ``NVIDIA H200``) do not include the prediction's
    ``gpu``, else unchanged; ``words`` say which and why (an unknown device on either side:
    not widened, said so; a pair of GPUs other than :data:`CROSS_GPU_MEASURED`: widened by the
    same error, said to be measured on that pair only). A ``device`` of kind ``cpu`` (the
    prediction's device kind) borrowing another table's residuals: not widened (the error was
    measured between two GPUs, not a GPU and a CPU), and said to be not validated for this
    CPU."""
    if gpus and gpu in gpus:
        return ivl, f"residuals measured on this device ({gpu})"
    if device == "cpu" and gpus:
        return ivl, (f"borrowed for a CPU ({gpu or 'model not recorded'}) from residuals of "
                     f"fits on {', '.join(sorted(gpus))}, mostly GPU ones: not validated for "
                     "this CPU, and not widened, since the cross-GPU error was measured "
                     "between two GPUs")
    if not gpus or gpu is None:
        return ivl, ("not widened for another GPU: the GPU of "
                     + ("these residuals" if not gpus else "this prediction") + " is not known")
    gpus = set(gpus)
    src = ", ".join(sorted(gpus))
    pair = set(CROSS_GPU_MEASURED)
    said = ("" if gpu in pair and gpus & pair else
            f"; measured between {' and '.join(CROSS_GPU_MEASURED)} only")
    why = (f"widened by {CROSS_GPU_ERROR:.1%} for {gpu} from {src} residuals (median "
           f"cross-GPU error, benchmarks/results/h100/judged_v2.md{said})")
    return widened(ivl, CROSS_GPU_ERROR), why


def _rank(x: float) -> int:
    """``ceil(x)`` robust to float error just above an integer (``20 * 0.95``)."""
    return math.ceil(x - 1e-9)


def empirical_bounds(values: Sequence[float], level: float) -> tuple[float, float]:
    """The central ``level`` of ``values`` by ``numpy.quantile`` (log-ratio units).

    Raises:
        ValueError: no values, or ``level`` outside (0, 1).
    """
    _check(values, level)
    lo, hi = np.quantile(np.asarray(values, float), [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def conformal_bounds(values: Sequence[float], level: float) -> tuple[float, float, str]:
    """Split-conformal bounds from ``n`` exchangeable residuals (log-ratio units) and the
    method used; monotone in ``level`` for every ``n`` (the lower bound never rises, the upper
    never falls, as ``level`` grows).

    Two-sided: with ``alpha = 1 - level`` and ``k = ceil((n + 1)(1 - alpha / 2))``, the k-th
    smallest residual is the upper bound and the (n + 1 - k)-th smallest the lower one; each
    side misses a new exchangeable residual with probability <= alpha / 2 (Vovk et al. 2005;
    Lei et al. 2018, "Distribution-free predictive inference for regression", JASA, Lemma 2),
    so together <= alpha. Needs ``k <= n`` (``alpha >= 2 / (n + 1)``: n >= 19 at 90%).
    Otherwise the symmetric score ``|r|``: ``+-`` its ``k = ceil((n + 1)(1 - alpha))``-th
    smallest (the same lemma for one score), which misses with probability <= alpha where
    ``k <= n`` (``alpha >= 1 / (n + 1)``: n >= 9 at 90%), printed ``conformal |r|``. Where two
    sides need ``k > n``, ``(n + 1)(1 - alpha) > n - 1``, so this ``k`` is ``n``: the largest
    ``|r|``, whose ``+-`` holds the two-sided rule's widest bounds (the smallest and largest
    residual). Where it too is ``n + 1`` (``alpha < 1 / (n + 1)``), no rank of the ``n``
    residuals is a conformal quantile at ``level`` (the lemma's rank exceeds ``n``): no finite
    interval is guaranteed to hold ``level``, and ``+-`` the largest ``|r|`` is returned all
    the same, printed ``max |r|``: the widest bounds of any conformal rank of these residuals
    (the ``|r|`` rule's at level ``n / (n + 1)``, the most they guarantee), so never narrower
    than a lower level's. Within each rule the ranks rise with ``level``, and each rule's
    bounds hold those of the rule used below it, hence the monotonicity.

    Raises:
        ValueError: no values, or ``level`` outside (0, 1).
    """
    _check(values, level)
    s = np.sort(np.asarray(values, float))
    n, alpha = len(s), 1.0 - level
    k = _rank((n + 1) * (1 - alpha / 2))
    if k <= n:
        return float(s[n - k]), float(s[k - 1]), "conformal"
    # k of |r| >= n here (above); n + 1: no finite conformal rank, the largest |r| all the same
    a = float(np.max(np.abs(s)))
    return -a, a, "conformal |r|" if _rank((n + 1) * (1 - alpha)) <= n else "max |r|"


def ranks_of(n: int, level: float, method: str) -> str:
    """Which order statistics of ``n`` residuals :func:`conformal_bounds` took at ``level`` by
    ``method``, in words (``ranks 5 and 106 of 110 ascending ...``), for a reader to check;
    the ``empirical`` method is the pooled rule's (:func:`pooled`)."""
    alpha = 1.0 - level
    if method == "conformal":
        k = _rank((n + 1) * (1 - alpha / 2))
        return (f"ranks {n + 1 - k} and {k} of {n} ascending (k = ceil({n + 1} x "
                f"{1 - alpha / 2:g}) = {k})")
    k = _rank((n + 1) * (1 - alpha))
    if method == "conformal |r|":
        return (f"+- rank {k} of {n} |r| ascending (k = ceil({n + 1} x {1 - alpha:g}) = "
                f"{k})")
    if method == "max |r|":
        return (f"+- the largest of {n} |r| (k = ceil({n + 1} x {1 - alpha:g}) = {k} > {n}: "
                f"no finite conformal rank at this level; the |r| rule's at "
                f"{n / (n + 1):.3g})")
    return (f"numpy.quantile at {(1 - level) / 2:g} and {(1 + level) / 2:g} of {n} (the "
            "pooled rule: no conformal rank)")


def _check(values: Sequence[float], level: float) -> None:
    if not len(values):
        raise ValueError("an interval needs at least one residual")
    check_level(level)


def check_level(level: float) -> None:
    """Refuse an interval level outside (0, 1) (``ValueError``)."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"interval level must be in (0, 1), got {level}")


def _ratios(lo: float, hi: float) -> tuple[float, float]:
    """Log bounds -> ratios, widened to include 1 (the prediction itself)."""
    return math.exp(min(lo, 0.0)), math.exp(max(hi, 0.0))


def pooled(residuals: Sequence[Residual], bound: str | None, level: float,
           category: str = "") -> Interval | None:
    """The pooled empirical rule (module docstring); None without residuals."""
    if not residuals:
        return None
    lo, hi = _ratios(*empirical_bounds([r for r, _ in residuals], level))
    return Interval(lo, hi, f"{category}, pooled", len(residuals), "empirical")


def mondrian(residuals: Sequence[Residual], bound: str | None, level: float,
             category: str = "") -> Interval | None:
    """The Mondrian conformal rule (module docstring): the (category, ``bound``) group's
    residuals when there are :data:`MIN_GROUP_ROWS` of them, else all; None without any."""
    if not residuals:
        return None
    own = [r for r, b in residuals if bound is not None and b == bound]
    if len(own) >= MIN_GROUP_ROWS:
        vals, group = own, f"{category}, {bound}-bound"
    else:
        vals, group = [r for r, _ in residuals], f"{category}, pooled"
    lo, hi, method = conformal_bounds(vals, level)
    return Interval(*_ratios(lo, hi), group, len(vals), method)


def without_points(keyed: Sequence[KeyedResidual], points: Collection[str]) -> list[Residual]:
    """The residuals of ``keyed`` whose measured point is not in ``points`` (``source:
    result_id``): a prediction of a stored point takes its interval without that point's own
    back-test residual (leave-one-out, as :func:`dlperf.validation.intervalcheck.coverage`
    judges the rule), else a small category's interval would reach the point's measurement by
    construction."""
    return [(r, b) for r, b, p in keyed if p is None or p not in points]


