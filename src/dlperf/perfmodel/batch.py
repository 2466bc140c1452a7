"""Step time over batch size on one device: host dispatch overlapped with device execution.

A first, deliberately small part of the performance model (issue "Predict before you
measure"): it predicts the iteration time of a stored series (one model, framework, mode,
precision and device) at a batch size that was not measured, from the batch sizes that were.

The model. A training step issues a fixed amount of host work per iteration (Python, the
framework's dispatcher, kernel launches: ``H`` seconds, independent of the batch) while the
device executes kernels whose time grows with the batch (``D(B) = d0 + d1 * B``, the linear
term of a roofline whose per-sample work is fixed). With the host running ahead of the device
the step is ``max(H, D(B))`` (Dai et al. 2022, sec. 3: a step is CPU-bound or GPU-bound;
Shi & Chu 2017 eq. 1 for the additive device part). The corner between the two regimes is
rounded in practice (launch queues drain, small batches under-fill the device), so the model
uses the p-norm of the two::

    T(B) = (H**p + (d0 + d1 * B)**p) ** (1 / p),   p = SMOOTH_P

which is ``max(H, D)`` as p -> inf and ``H + D`` at p = 1. The flat start of host-bound
series, which a straight line ``a + b * B`` cannot follow, is the ``H`` term.

The fit minimises squared *relative* errors (log residuals), since step times span three
orders of magnitude in one series, with all three parameters kept positive. Framework-free:
it reads result rows (dicts with the store's columns), never a framework.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import median
from typing import Any

import numpy as np

#: The rounding of the host/device corner. 8 was chosen on the dlbench series of
#: benchmarks/results/h200/dlbench.db (held-out MdAPE 4.8% at p=1.5, 4.2% at 4, 3.9% at 8, 4.4%
#: at 32), so figures on that file are not out-of-sample for this one global constant; it is
#: not fitted per series.
SMOOTH_P = 8.0

#: The columns that make a series: every point of one series differs only in its batch size.
SERIES_KEY = ("model", "framework", "mode", "precision", "device", "data", "threads",
              "grad_accum", "world_size")


@dataclass(frozen=True)
class BatchFit:
    """Fitted ``T(B) = (H^p + (d0 + d1 B)^p)^(1/p)``; times in seconds, ``d1`` in s/sample.

    Attributes:
        host_s: ``H``, the batch-independent host time per iteration (s).
        device_fixed_s: ``d0``, the device time that does not scale with the batch (s).
        device_per_sample_s: ``d1``, device seconds per sample of the mini-batch.
        batch_sizes: the batch sizes it was fitted on.
        rms_log_residual: root mean square of ``log(measured / fitted)`` on those points.
    """

    host_s: float
    device_fixed_s: float
    device_per_sample_s: float
    batch_sizes: tuple[int, ...]
    rms_log_residual: float

    def device_s(self, batch_size: float) -> float:
        """The device part ``d0 + d1 * B`` (s)."""
        return self.device_fixed_s + self.device_per_sample_s * batch_size

    def step_time_s(self, batch_size: float) -> float:
        """Predicted iteration time at ``batch_size`` samples (s)."""
        return _model(np.array([float(batch_size)]), self.host_s, self.device_fixed_s,
                      self.device_per_sample_s)[0]

    def bound(self, batch_size: float) -> str:
        """``"host"`` when the host part is the larger of the two at this batch, else ``"device"``."""
        return "host" if self.host_s >= self.device_s(batch_size) else "device"


def _model(b: np.ndarray, h: float, d0: float, d1: float, p: float | None = None) -> np.ndarray:
    p = SMOOTH_P if p is None else p
    d = d0 + d1 * b
    m = np.maximum(h, d)  # scaled p-norm: no overflow for any p
    return m * ((h / m) ** p + (d / m) ** p) ** (1.0 / p)


def fit_batch(batch_sizes: Sequence[float], step_times_s: Sequence[float]) -> BatchFit:
    """Fit the host/device model to one series.

    Args:
        batch_sizes: mini-batch sizes (samples), at least 2 distinct.
        step_times_s: the median iteration time at each (s), positive.

    Returns:
        The fit.

    Raises:
        ValueError: fewer than 2 distinct batch sizes, or a non-positive time.
    """
    from scipy.optimize import least_squares

    b = np.asarray(batch_sizes, dtype=float)
    t = np.asarray(step_times_s, dtype=float)
    if len(set(b.tolist())) < 2:
        raise ValueError("a batch-size fit needs at least 2 distinct batch sizes, "
                         f"got {sorted(set(b.tolist()))}")
    if (t <= 0).any() or not np.isfinite(t).all():
        raise ValueError(f"step times must be positive and finite, got {t.tolist()}")
    lt = np.log(t)
    # Start from the line through the two extreme points and a host floor at the fastest step.
    i0, i1 = int(np.argmin(b)), int(np.argmax(b))
    slope = max((t[i1] - t[i0]) / (b[i1] - b[i0]), t.min() * 1e-6 / b.max())
    x0 = np.log([t.min() * 0.9, max(t[i0] - slope * b[i0], t.min() * 0.05), slope])

    def resid(x: np.ndarray) -> np.ndarray:
        h, d0, d1 = np.exp(np.clip(x, -60.0, 10.0))
        return np.log(_model(b, h, d0, d1)) - lt

    best = None
    for start in (x0, x0 + np.log([0.3, 1.0, 1.0]), x0 + np.log([1.0, 0.1, 1.0])):
        r = least_squares(resid, start, method="trf", x_scale="jac", max_nfev=400)
        if best is None or r.cost < best.cost:
            best = r
    assert best is not None  # the loop tried three starts
    h, d0, d1 = (float(v) for v in np.exp(np.clip(best.x, -60.0, 10.0)))
    rms = float(np.sqrt(np.mean(resid(best.x) ** 2)))
    return BatchFit(h, d0, d1, tuple(int(v) for v in b), rms)


def fit_linear(batch_sizes: Sequence[float], step_times_s: Sequence[float]) -> tuple[float, float]:
    """The baseline ``t(B) = a + b * B`` by least squares (s, s/sample), for comparison."""
    b, a = np.polyfit(np.asarray(batch_sizes, float), np.asarray(step_times_s, float), 1)
    return float(a), float(b)


@dataclass
class Series:
    """One stored series: the median step time per batch size of one configuration.

    ``points`` maps batch size -> (median step time in s, result id); when a batch size was
    measured more than once the newest row is used (``ResultStore.rows(latest=True)``).
    """

    key: tuple[Any, ...]
    points: dict[int, tuple[float, int]] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """``model framework/mode precision device`` (and data when not synthetic)."""
        k = dict(zip(SERIES_KEY, self.key))
        extra = f" {k['data']}" if k.get("data") not in (None, "synthetic") else ""
        return f"{k['model']} {k['framework']}/{k['mode']} {k['precision']} {k['device']}{extra}"


def series_from_rows(rows: Iterable[Mapping[str, Any]]) -> list[Series]:
    """Group ``ok`` single-device result rows into series (the store's columns as dict keys)."""
    groups: dict[tuple[Any, ...], Series] = {}
    for r in rows:
        if r.get("status") != "ok" or not r.get("step_time_median_s"):
            continue
        if (r.get("world_size") or 1) > 1:
            continue
        key = tuple(r.get(c) if c != "world_size" else (r.get(c) or 1) for c in SERIES_KEY)
        s = groups.setdefault(key, Series(key))
        s.points[int(r["batch_size"])] = (float(r["step_time_median_s"]), int(r["id"]))
    return list(groups.values())


def _ape(pred: float, meas: float) -> float:
    return abs(pred - meas) / meas * 100.0


@dataclass
class ValidationRow:
    """One held-out prediction: which series and batch, measured and predicted times (s)."""

    category: str
    series: str
    batch_size: int
    measured_s: float
    predicted_s: float
    baseline_s: float | None

    @property
    def ape(self) -> float:
        """Absolute percentage error of the model (%)."""
        return _ape(self.predicted_s, self.measured_s)

    @property
    def baseline_ape(self) -> float | None:
        """Absolute percentage error of the linear baseline (%), if it was computed."""
        return None if self.baseline_s is None else _ape(self.baseline_s, self.measured_s)


def validate_batch(series: Sequence[Series], min_points: int = 4) -> list[ValidationRow]:
    """Back-test on stored series with at least ``min_points`` batch sizes.

    Categories:
        ``held-out batch``: each batch size in turn withheld, the rest fitted, the withheld one
        predicted (leave-one-out; the smallest and largest included, so ends are extrapolated).
        ``extrapolate largest``: the largest batch predicted from all the smaller ones.

    Every prediction is judged only on a measurement it was not fitted on.
    """
    out: list[ValidationRow] = []
    for s in series:
        bs = sorted(s.points)
        if len(bs) < min_points:
            continue
        for held in bs:
            train = [b for b in bs if b != held]
            cat = ("extrapolate largest" if held == bs[-1] else "held-out batch")
            times = [s.points[b][0] for b in train]
            fit = fit_batch(train, times)
            a, slope = fit_linear(train, times)
            meas = s.points[held][0]
            out.append(ValidationRow("held-out batch", s.label, held, meas,
                                     fit.step_time_s(held), a + slope * held))
            if cat == "extrapolate largest":
                out.append(ValidationRow(cat, s.label, held, meas, fit.step_time_s(held),
                                         a + slope * held))
    return out


def summarize_validation(rows: Sequence[ValidationRow]) -> list[dict[str, Any]]:
    """Per category: count, MdAPE and max APE of the model and of the linear baseline (%)."""
    by: dict[str, list[ValidationRow]] = defaultdict(list)
    for r in rows:
        by[r.category].append(r)
    out = []
    for cat, rs in by.items():
        apes = [r.ape for r in rs]
        base = [r.baseline_ape for r in rs if r.baseline_ape is not None]
        out.append({"category": cat, "count": len(rs), "mdape_pct": median(apes),
                    "max_pct": max(apes),
                    "baseline_mdape_pct": median(base) if base else None,
                    "baseline_max_pct": max(base) if base else None})
    return out


def prediction_interval(rows: Sequence[ValidationRow], level: float = 0.9) -> tuple[float, float]:
    """Multiplicative interval ``(low, high)`` from held-out log residuals at ``level``.

    ``predicted * low .. predicted * high`` held ``level`` of the held-out measurements
    (empirical quantiles of ``log(measured / predicted)``); (1, 1) without residuals.
    """
    res = [math.log(r.measured_s / r.predicted_s) for r in rows if r.category == "held-out batch"]
    if not res:
        return 1.0, 1.0
    lo, hi = np.quantile(res, [(1 - level) / 2, (1 + level) / 2])
    return float(math.exp(min(lo, 0.0))), float(math.exp(max(hi, 0.0)))
