"""Comparing two sets of results point by point (``dlperf compare BASE NEW``): the ratio
NEW/BASE of the step time with a confidence interval, significance, a regression threshold, the
change attributed to op classes, and one relative summary over all points.

Every run of a point is used (repeats and re-runs alike); a comparison says how many runs each
side had and where its interval comes from:

- **runs** (>= 2 ok runs on each side): each run's median step time is one observation; the
  ratio is the ratio of the geometric means of the run medians, ``exp(mean(log new) -
  mean(log base))``, with Welch's t interval on the log run medians (Welch 1947, Biometrika 34:
  28-35; the log scale makes it an interval of a ratio, as for ratios of geometric means in
  bioequivalence, FDA 2001 guidance "Statistical approaches to establishing bioequivalence").
  Run-level repetition is what carries process-to-process variation (JIT and autotuning
  choices, memory layout, clocks): Kalibera & Jones 2013, "Rigorous benchmarking in
  reasonable time", ISMM, who build the interval of a ratio from the highest level of
  repetition.
- **iterations** (a side with one run): median(NEW iterations) / median(BASE iterations), all
  runs' measured iterations pooled per side, with the two-sample percentile bootstrap of
  :func:`dlperf.stats.ratio_ci` (Efron & Tibshirani 1993, ch. 8). It covers iteration noise
  within the runs only, not the variation between processes, and says so.

A change is *significant* when its interval excludes 1. A point is a *regression* when it is
significantly slower and its ratio exceeds ``1 + threshold`` (the rule of ``asv compare
--factor``: a ratio beyond the factor and a statistically significant difference). A point
that measured in BASE and failed in NEW (out of memory, a crash, ...) is a regression too.

The summary is the geometric mean of the compared points' ratios (as hyperfine and asv
summarise relative speed), with an interval that combines the points' own intervals on the log
scale (each point's standard error taken from its interval's half-width, points independent:
``se = sqrt(sum se_i^2) / n``, normal quantile; the delta method).

Nothing here imports a framework; records come from :meth:`dlperf.results.store.ResultStore.
records`. The comparison as text and JSON: :mod:`dlperf.report.regress_text`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dlperf.errors import ConfigError
from dlperf.results.schema import RunRecord
from dlperf.results.view import label_of_record
from dlperf.stats import MIN_CI_SAMPLES

__all__ = ["PointComparison", "Comparison", "parse_threshold", "point_key_of", "point_label",
           "run_median_s", "ratio_from_runs", "ratio_from_iterations", "attribute_op_classes",
           "compare_records", "geometric_summary", "MIN_ATTRIBUTED_SHARE", "ok_runs"]

#: Op classes whose change is at least this share of the step's change are named in the
#: attribution text (the rest is in the JSON).
MIN_ATTRIBUTED_SHARE = 0.10


def parse_threshold(text: str | None) -> float | None:
    """``--fail-if-slower``: ``"5%"`` or ``"5"`` (percent) -> 0.05; None for None.

    Raises:
        ConfigError: not a number, or not in (0, 1000) percent.
    """
    if text is None:
        return None
    t = text.strip().rstrip("%").strip()
    try:
        pct = float(t)
    except ValueError:
        pct = float("nan")
    if not 0 < pct < 1000:
        raise ConfigError(f"--fail-if-slower {text!r}: give a percentage above 0, e.g. "
                          "--fail-if-slower 5% (fail when a point is significantly more than "
                          "5% slower)")
    return pct / 100.0


def point_key_of(rec: RunRecord) -> str:
    """The point a record measured (the same for its repeats): its ``point_key``, else (records
    stored before point keys, all repeat 0) its run key."""
    ident = rec.identity
    return str(ident.point_key or ident.run_key or "")


def point_label(rec: RunRecord) -> str:
    """The point's label as ``dlperf run`` prints it, without the repeat number
    (:func:`~dlperf.results.view.label_of_record`)."""
    return label_of_record(rec, repeat=False)


def _finite(xs: Iterable[Any]) -> list[float]:
    return [float(x) for x in xs if isinstance(x, (int, float)) and math.isfinite(x)]


def run_median_s(rec: RunRecord) -> float | None:
    """A run's median step time (s): of its stored measured samples, else its summary's."""
    xs = _finite(rec.measured_s)
    if xs:
        return float(np.median(xs))
    med = rec.summary.median if rec.summary is not None else None
    return float(med) if isinstance(med, (int, float)) and math.isfinite(med) else None


def ratio_from_runs(base_s: Sequence[float], new_s: Sequence[float],
                    level: float = 0.95) -> tuple[float, float, float]:
    """Ratio of the geometric means of NEW's and BASE's run medians, with Welch's t interval
    on their logs (module docstring). Returns ``(ratio, low, high)``.

    Raises:
        ValueError: fewer than 2 runs on a side, a non-positive median, or ``level`` outside
            (0, 1).
    """
    if len(base_s) < 2 or len(new_s) < 2:
        raise ValueError("a run-level interval needs at least 2 runs on each side")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if min(base_s) <= 0 or min(new_s) <= 0:
        raise ValueError("run medians must be positive (seconds)")
    lb, ln = np.log(np.asarray(base_s, float)), np.log(np.asarray(new_s, float))
    d = float(ln.mean() - lb.mean())
    vb, vn = float(lb.var(ddof=1)) / lb.size, float(ln.var(ddof=1)) / ln.size
    se = math.sqrt(vb + vn)
    if se == 0.0:  # every run the same on both sides (e.g. a fake clock): no spread to widen
        return math.exp(d), math.exp(d), math.exp(d)
    # Welch-Satterthwaite degrees of freedom (Welch 1947)
    df = (vb + vn) ** 2 / ((vb ** 2 / (lb.size - 1) if vb else 0.0)
                           + (vn ** 2 / (ln.size - 1) if vn else 0.0))
    from scipy import stats as _sps  # here, not at import: ~0.8 s of CPU per CLI process

    half = float(_sps.t.ppf(1 - (1 - level) / 2, df)) * se
    return math.exp(d), math.exp(d - half), math.exp(d + half)


def ratio_from_iterations(base_s: Sequence[float], new_s: Sequence[float],
                          level: float = 0.95) -> tuple[float, float, float]:
    """median(NEW) / median(BASE) of the measured iterations with the two-sample percentile
    bootstrap interval (:func:`dlperf.stats.ratio_ci`, seed 0). Returns ``(ratio, low,
    high)``.

    Raises:
        ValueError: an empty side, non-finite samples, or a non-positive BASE median.
    """
    from dlperf.stats import ratio_ci

    return ratio_ci(new_s, base_s, statistic="median", level=level)


def attribute_op_classes(base: Sequence[RunRecord], new: Sequence[RunRecord],
                         delta_s: float) -> dict[str, Any] | None:
    """The change of the step time ``delta_s`` (s per iteration, NEW - BASE) attributed to op
    classes: per class the mean device time per iteration (s) over the runs of each side that
    have op classes (``op_classes.per_iter_s``, from a profiler trace: ``--breakdown`` or
    ``--trace``), its change and its share of ``delta_s``; ``explained`` = sum of the class
    changes / ``delta_s``. None when a side has no run with op classes.

    Returns:
        ``{"classes": [{"class", "base_s", "new_s", "diff_s", "share"}, ...] (largest change
        first), "class_diff_s", "explained", "runs": [n_base, n_new]}``; shares and
        ``explained`` are None when ``delta_s`` is 0.
    """
    def mean_classes(runs: Sequence[RunRecord]) -> tuple[dict[str, float], int]:
        have = [r.op_classes.per_iter_s for r in runs
                if r.op_classes is not None and r.op_classes.per_iter_s]
        if not have:
            return {}, 0
        keys = sorted({k for d in have for k in d})
        return {k: float(np.mean([float(d.get(k) or 0.0) for d in have])) for k in keys}, len(have)

    cb, nb = mean_classes(base)
    cn, nn = mean_classes(new)
    if not nb or not nn:
        return None
    classes: list[dict[str, Any]] = []
    for k in sorted(set(cb) | set(cn)):
        b, n = cb.get(k, 0.0), cn.get(k, 0.0)
        if b or n:
            classes.append({"class": k, "base_s": b, "new_s": n, "diff_s": n - b,
                            "share": (n - b) / delta_s if delta_s else None})
    classes.sort(key=lambda c: -abs(c["diff_s"]))
    total = math.fsum(c["diff_s"] for c in classes)
    return {"classes": classes, "class_diff_s": total,
            "explained": total / delta_s if delta_s else None, "runs": [nb, nn]}


@dataclass
class PointComparison:
    """One point compared: its runs on each side and, where both measured, the ratio NEW/BASE
    of the step time with its interval (``ci_from``: ``"runs"`` or ``"iterations"``), the
    verdict and the op-class attribution. ``outcome``: ``compared``, ``only in BASE``, ``only
    in NEW``, ``failed in NEW``, ``failed in BASE`` or ``failed in both``."""

    key: str
    label: str
    base: list[RunRecord]
    new: list[RunRecord]
    outcome: str = "compared"
    ratio: float | None = None
    ci: tuple[float, float] | None = None
    ci_from: str | None = None
    base_step_s: float | None = None
    new_step_s: float | None = None
    significant: bool = False
    regression: bool = False
    attribution: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        """``slower``, ``faster``, ``no significant change``, or the outcome when not
        compared."""
        if self.outcome != "compared":
            return self.outcome
        if not self.significant:
            return "no significant change"
        return "slower" if (self.ratio or 1.0) > 1 else "faster"


def ok_runs(runs: Sequence[RunRecord]) -> list[RunRecord]:
    """The runs that measured (status ``ok`` with a median step time)."""
    return [r for r in runs if r.identity.status == "ok" and run_median_s(r) is not None]


def _config_diff(a: dict[str, Any], b: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for k in sorted(set(a) | set(b)):
        if k == "repeat":
            continue
        x, y = a.get(k), b.get(k)
        if isinstance(x, dict) and isinstance(y, dict):
            out += _config_diff(x, y, f"{prefix}{k}.")
        elif x != y and x is not None and y is not None:  # None: not recorded on a side
            out.append(f"{prefix}{k}: {x} vs {y}")
    return out


def compare_point(key: str, base: list[RunRecord], new: list[RunRecord], *, level: float = 0.95,
                  threshold: float | None = None) -> PointComparison:
    """Compare one point's BASE and NEW runs (module docstring); ``threshold``: the regression
    threshold (0.05 = 5%), None: no regression verdict beyond failures."""
    label = point_label((base or new)[0])
    pc = PointComparison(key, label, list(base), list(new))
    ob, on = ok_runs(base), ok_runs(new)
    if not base or not new:
        pc.outcome = "only in BASE" if base else "only in NEW"
        return pc
    if not ob or not on:
        pc.outcome = ("failed in both" if not ob and not on else
                      "failed in NEW" if not on else "failed in BASE")
        pc.regression = pc.outcome == "failed in NEW"
        return pc
    mb, mn = [run_median_s(r) or 0.0 for r in ob], [run_median_s(r) or 0.0 for r in on]
    lo: float | None
    hi: float | None
    if len(ob) >= 2 and len(on) >= 2:
        pc.ratio, lo, hi = ratio_from_runs(mb, mn, level)
        pc.ci_from = "runs"
        pc.base_step_s = float(np.exp(np.mean(np.log(mb))))
        pc.new_step_s = float(np.exp(np.mean(np.log(mn))))
    else:
        xb = [x for r in ob for x in _finite(r.measured_s)] or mb
        xn = [x for r in on for x in _finite(r.measured_s)] or mn
        pc.base_step_s, pc.new_step_s = float(np.median(xb)), float(np.median(xn))
        if len(xb) < 2 or len(xn) < 2:  # one median a side, no samples: nothing to resample
            pc.ratio = pc.new_step_s / pc.base_step_s
            pc.notes.append("no interval: a side has one run and no stored samples (only its "
                            "median); not called significant, left out of the summary")
            lo = hi = None
        elif min(len(xb), len(xn)) < MIN_CI_SAMPLES:  # no interval reaches the level
            pc.ratio = pc.new_step_s / pc.base_step_s
            pc.notes.append(f"no interval: a side has only {min(len(xb), len(xn))} measured "
                            f"iterations (a 95% interval needs {MIN_CI_SAMPLES}); not called "
                            "significant, left out of the summary; measure with a larger "
                            "--min-iters")
            lo = hi = None
        else:
            pc.ratio, lo, hi = ratio_from_iterations(xb, xn, level)
            pc.ci_from = "iterations"
            pc.notes.append(f"interval from iterations ({len(ob)} and {len(on)} run(s)): "
                            "run-to-run variation not included; --repeats 3 on both sides "
                            "for a run-level interval")
    if lo is not None and hi is not None:
        pc.ci = (lo, hi)
        pc.significant = not lo <= 1.0 <= hi
    pc.regression = bool(threshold is not None and pc.significant
                         and pc.ratio > 1.0 + threshold)
    pc.attribution = attribute_op_classes(ob, on, pc.new_step_s - pc.base_step_s)
    for what, runs, used in (("BASE", base, ob), ("NEW", new, on)):
        bad = [r.identity.status for r in runs if not any(r is u for u in used)]
        if bad:
            pc.notes.append(f"{what}: {len(bad)} of {len(runs)} runs not used "
                            f"({', '.join(sorted(set(map(str, bad))))})")
    from dlperf.env import environment_differences

    a, b = ob[-1].to_dict(raw=False), on[-1].to_dict(raw=False)
    pc.notes += [f"environment differs: {d}" for d in environment_differences(a, b)]
    diff = _config_diff(a.get("config") or {}, b.get("config") or {})
    pc.notes += [f"settings differ: {d}" for d in diff]
    return pc


def geometric_summary(points: Sequence[PointComparison],
                      level: float = 0.95) -> tuple[float, float, float, int] | None:
    """The geometric mean of the compared points' ratios with its interval (module
    docstring): ``(ratio, low, high, n_points)``; None when no point was compared."""
    done = [p for p in points if p.ratio is not None and p.ci is not None]
    if not done:
        return None
    from scipy import stats as _sps  # here, not at import (as above)

    z = float(_sps.norm.ppf(1 - (1 - level) / 2))
    logs = [math.log(p.ratio or 1.0) for p in done]
    ses = [(math.log(p.ci[1]) - math.log(p.ci[0])) / (2 * z) for p in done if p.ci is not None]
    m = math.fsum(logs) / len(done)
    se = math.sqrt(math.fsum(s * s for s in ses)) / len(done)
    return math.exp(m), math.exp(m - z * se), math.exp(m + z * se), len(done)


@dataclass
class Comparison:
    """Every point of BASE and NEW compared (:func:`compare_records`), with what each side
    was (``base_name``, ``new_name``), the level of the intervals and the threshold."""

    points: list[PointComparison]
    base_name: str
    new_name: str
    level: float = 0.95
    threshold: float | None = None

    @property
    def summary(self) -> tuple[float, float, float, int] | None:
        """:func:`geometric_summary` of :attr:`points`."""
        return geometric_summary(self.points, self.level)

    @property
    def regressions(self) -> list[PointComparison]:
        """Points significantly slower than the threshold allows, or failing only in NEW."""
        return [p for p in self.points if p.regression]


def _sort_key(rec: RunRecord) -> tuple[Any, ...]:
    i = rec.identity
    return (str(i.model), str(i.framework), str(i.mode), str(i.device), str(i.precision),
            i.batch_size or 0, str(i.data), i.threads or 0, i.world_size or 1)


def compare_records(base: Iterable[RunRecord], new: Iterable[RunRecord], *,
                    base_name: str = "BASE", new_name: str = "NEW", level: float = 0.95,
                    threshold: float | None = None) -> Comparison:
    """Compare every point (matched by :func:`point_key_of`) of ``base`` and ``new`` records
    (all runs of each point on each side are used). Points in model, framework, mode, device,
    precision, batch order; the points only in NEW last.

    Raises:
        ConfigError: ``level`` is not in (0, 1), or neither side has any record.
    """
    if not 0 < level < 1:
        raise ConfigError(f"--level {level}: give a confidence level in (0, 1), e.g. 0.95")
    by_b: dict[str, list[RunRecord]] = {}
    by_n: dict[str, list[RunRecord]] = {}
    for recs, by in ((base, by_b), (new, by_n)):
        for r in recs:
            by.setdefault(point_key_of(r), []).append(r)
    if not by_b and not by_n:
        raise ConfigError(f"no results in {base_name} or {new_name}: nothing to compare")
    keys = sorted(set(by_b) | set(by_n), key=lambda k: (k not in by_b, _sort_key(
        (by_b.get(k) or by_n[k])[0]), k))
    pts = [compare_point(k, by_b.get(k, []), by_n.get(k, []), level=level, threshold=threshold)
           for k in keys]
    return Comparison(pts, base_name, new_name, level, threshold)
