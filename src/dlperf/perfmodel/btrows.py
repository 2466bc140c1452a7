"""A back-test's rows and its budget (:mod:`dlperf.perfmodel.backtest` and
:mod:`dlperf.perfmodel.bucketcheck` both make rows)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from dlperf.perfmodel.records import point_id as point_id


@dataclass
class Row:
    """One held-out prediction (times in s); ``sign_ok`` for what-ifs, ``eff_err_pts`` (scaling
    efficiency error in points) for N-device rows, ``bound`` of the model's prediction,
    ``point``: the measured point's identity ``source:result_id`` (:func:`point_id`; None for
    rows that measure no stored point, e.g. an all-reduce size), so that a prediction of that
    very point can leave this row's residual out of its interval; ``model`` of the predicted
    point, or ``run_id`` of the all-reduce run, which decide its side of the frozen
    development/test split (:meth:`dlperf.perfmodel.split.Split.side`)."""

    category: str
    label: str
    measured_s: float
    predicted_s: float
    baseline_s: float | None = None
    sign_ok: bool | None = None
    eff_err_pts: float | None = None
    bound: str | None = None
    point: str | None = None
    model: str | None = None
    run_id: str | None = None

    @property
    def ape(self) -> float:
        """Absolute percentage error of the model (%)."""
        return abs(self.predicted_s / self.measured_s - 1.0) * 100.0

    @property
    def baseline_ape(self) -> float | None:
        """Absolute percentage error of the baseline (%)."""
        return None if self.baseline_s is None else abs(self.baseline_s / self.measured_s - 1) * 100


#: Estimated seconds per unit of back-test work, by kind: per prediction, except
#: leave-one-model-out, whose cost is its roofline refits: per (framework, mode, precision,
#: device) group the model is in. The largest seen on the committed H200 files
#: (benchmarks/results/h200/*.db, h200x2) on the project's shared 2-core VM: held-out batch
#: 0.042 s per prediction (calibration.db), leave-one-model-out 0.094 s per group (alexnet in
#: frameworks.db, 6 groups, 0.56 s), what-if 0.15 s per prediction (mfu_inputs.db), 2-GPU
#: 0.028 s per pair (h200x2); a repeat row costs the series fit that labels its bound, taken
#: as a held-out batch row's. Only a :class:`Budget` reads them: they bound a back-test run
#: inside a report, never a fit.
COST_S = {"batch": 0.045, "lomo": 0.1, "what-if": 0.15, "all-reduce": 0.002, "2-GPU": 0.03,
          "repeat": 0.045, "wfbp": 0.002, "input": 0.002}


@dataclass
class Budget:
    """A bound on a back-test's *estimated* time (s), so a report can include a back-test
    without waiting for all of it. Work comes in units (a series for the batch categories, a
    model for leave-one-model-out, one pair or size otherwise), each estimated by
    :data:`COST_S`; a unit runs only when its estimate fits in what
    is left, else its predictions are counted in ``left_out`` (category -> predictions). The
    estimate, not a clock, decides: the same files give the same rows on every machine.

    Raises:
        ValueError: a negative ``seconds``.
    """

    seconds: float
    spent_s: float = 0.0
    left_out: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.seconds < 0:
            raise ValueError(f"a back-test budget must be >= 0 s, got {self.seconds}")

    def take(self, kind: str, rows: Sequence[str], units: int | None = None) -> bool:
        """True (and charged) when the unit of ``rows`` (their categories) made by ``kind``
        (a key of :data:`COST_S`) fits; else False and counted as left out. ``units``: what
        :data:`COST_S` counts for ``kind`` (None: the rows)."""
        cost = COST_S[kind] * (len(rows) if units is None else units)
        if self.spent_s + cost <= self.seconds:
            self.spent_s += cost
            return True
        for cat in rows:
            self.left_out[cat] = self.left_out.get(cat, 0) + 1
        return False


def charge(budget: Budget | None, kind: str, rows: Sequence[str],
           units: int | None = None) -> bool:
    """True when there is no budget or :meth:`Budget.take` took the unit."""
    return budget is None or budget.take(kind, rows, units)
