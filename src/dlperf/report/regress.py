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

A change is *significant* when its interval excludes 1.

**The gate** (``dlperf compare``, :func:`compare_records`): a point is *judged* only on a
run-level interval, from at least :data:`MIN_RUNS` runs a side that are each fit to be judged
(:func:`run_flags`: a run whose measuring thread waited for a CPU, whose steps have two modes or
drift is left out, with the reason). Iterations of one run share its process, so their
interval leaves out the variation between processes (JIT and autotuning choices, memory layout,
clocks): two runs of the same code then differ "significantly" (+6% and +48% were seen on two
hosts). A point with fewer fit runs is *not judged*: it gets a ratio (and the descriptive
interval) but no verdict, the summary counts it with the reason, and the output says what
would make it judgeable (:func:`judge_advice`). Runs are best interleaved in time (BASE, NEW,
NEW, BASE, ...: ``dlperf compare --run``, as ``asv run --interleave-processes`` does), so that a
slow change of the host falls on both sides; a comparison whose BASE runs all came before its
NEW runs (or after) says so in a note. A judged point is a *regression* when it is
significantly slower and its ratio exceeds ``1 + threshold`` (the rule of ``asv compare
--factor``: a ratio beyond the factor and a statistically significant difference; asv's
``is_different`` asks for a Mann-Whitney test or non-overlapping intervals of the samples).
A point that measured in BASE and failed in NEW (out of memory, a crash, ...) is a regression
too, and so, with a threshold, is a point some of whose NEW runs failed (a status other than
``ok``: 1 out of memory in 5 rounds) where none of BASE's did, even when the runs that
measured are not slower: a new failure is what a gate is there to catch. Where BASE's runs
failed too, the failed shares decide (:func:`failure_test`: Fisher's exact test, one-sided,
at the gate's level): NEW failing more often is a regression, else the step time is judged
on the runs that measured, with a note of both counts. A point that failed in BASE, or on
both sides, is not judged (NEW has nothing to be judged against), nor is a new point (only
in NEW) whose every run failed (nothing shows it passes), like a point with too few runs fit
to judge, and, with a threshold, so is one
whose BASE and NEW runs name other GPU or CPU models (:func:`hardware_differences`: the
ratio would measure the hardware; without one, comparing two GPUs is a question the report
answers, with a note). Other differences of the environment (the framework's version,
another machine of the same models) are judged, with a note naming them: a dependency's
upgrade is a change a gate is there to judge. A run stored ``ok`` without a positive step
time (0, or a damaged value) is left out with a note, and a side without a run that has one
counts as failed (:func:`ok_runs`); it is not a failed run of the failure rule above. A run
read twice into one side (the same row, or an identical stored row: :func:`run_identity`)
counts once, with a note: twice, it would narrow the interval. A judged point is
*inconclusive* when its ratio exceeds ``1 + threshold`` but its interval includes 1
(:func:`gate_verdict`): the data lean towards a regression larger than the
threshold and show neither it nor its absence ("absence of evidence is not evidence of
absence", Altman & Bland 1995, BMJ 311: 485). asv marks such a ratio with ``~`` (beyond the
factor, not significant: ``asv compare``) and ``asv continuous`` passes it. A gate that
passed it would let through 30% of 2x slowdowns measured in 3 rounds with one side's runs
spread by 25% (a loaded host; ``benchmarks/gate_simulate.py``), so the gate fails on it with
an exit status of its own and says what would judge it (:func:`inconclusive_advice`: the
spread of each side's runs, the rounds that spread needs, a quieter host). The stricter rule
of a non-inferiority test, pass only when the interval's upper end is below ``1 +
threshold`` (Schuirmann 1987, J. Pharmacokinet. Biopharm. 15: 657-680), is not used: at the
documented run-to-run spread of 2% and 5 rounds it fails identical code about half the time
(``benchmarks/gate_simulate.py --rule noninferiority``). With a threshold the comparison also
fails when a point of BASE is missing from NEW (or the two share no point) and when a point
run on both sides could not be judged, or none could, or a results file had damaged rows
that its reader skipped (:attr:`Comparison.damaged_rows`): a benchmark the gate silently
does not judge protects no more than one that vanished (:func:`gate_status`, exit codes
:data:`EXIT_REGRESSION`, :data:`EXIT_MISSING`, :data:`EXIT_INCONCLUSIVE`,
:data:`EXIT_NOT_JUDGED`).

The summary is the geometric mean of the compared points' ratios (as hyperfine and asv
summarise relative speed), with an interval that combines the points' own intervals on the log
scale (each point's standard error taken from its interval's half-width, points independent:
``se = sqrt(sum se_i^2) / n``, normal quantile; the delta method).

Nothing here imports a framework; records come from :meth:`dlperf.results.store.ResultStore.
records`. The comparison as text and JSON: :mod:`dlperf.report.regress_text`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dlperf.errors import ConfigError
from dlperf.results.schema import RunRecord
from dlperf.results.view import config_of, label_of_record
from dlperf.stats import MIN_CI_SAMPLES, check_level

__all__ = ["PointComparison", "Comparison", "parse_threshold", "threshold_text", "point_key_of",
           "point_label",
           "run_median_s", "ratio_from_runs", "ratio_from_iterations", "attribute_op_classes",
           "compare_records", "geometric_summary", "MIN_ATTRIBUTED_SHARE", "ok_runs",
           "MIN_RUNS", "run_flags", "judge_advice", "gate_status", "EXIT_REGRESSION",
           "EXIT_MISSING", "EXIT_NOT_JUDGED", "EXIT_INCONCLUSIVE", "gate_verdict",
           "run_cv", "rounds_to_tell", "inconclusive_advice", "MAX_ROUNDS_ADVISED",
           "change_text", "pct_change", "damaged_text", "hardware_differences",
           "HARDWARE_FIELDS", "failure_test", "run_identity"]

#: Op classes whose change is at least this share of the step's change are named in the
#: attribution text (the rest is in the JSON).
MIN_ATTRIBUTED_SHARE = 0.10
#: Runs each side needs, each fit to be judged (:func:`run_flags`), for a point to be judged.
MIN_RUNS = 2
#: A run's measuring thread must also have waited this long (s) to count as on a busy host: a
#: segment of microseconds of real time (a fake clock) that lost one scheduler slice has a
#: large share and says nothing.
BUSY_MIN_WAIT_S = 0.01
#: Exit statuses of ``dlperf compare`` with a threshold (2 is a user error, as for every
#: command): a regression; a point of BASE missing from NEW, or no point in common; a point
#: not judged (or none judged); a judged point inconclusive (:func:`gate_verdict`).
EXIT_REGRESSION = 1
EXIT_MISSING = 3
EXIT_NOT_JUDGED = 4
EXIT_INCONCLUSIVE = 5
#: :func:`rounds_to_tell` looks no further: beyond this many runs a side, the advice is a
#: quieter host.
MAX_ROUNDS_ADVISED = 50


def parse_threshold(text: str | None) -> float | None:
    """``--fail-if-slower``: a percentage with its ``%`` sign, ``"5%"`` -> 0.05; None for None.

    A bare number is refused: ``5`` could mean 5% or (as a fraction) 500%, and ``0.05`` could
    mean 5% or 0.05%; the ``%`` sign says which. One ``%`` only (``5%%`` is refused).

    Raises:
        ConfigError: no ``%`` sign (the message suggests ``<number>%``), not a number, or not
            in (0, 1000) percent.
    """
    if text is None:
        return None
    t = text.strip()
    body = t[:-1].strip() if t.endswith("%") else t
    try:
        pct = float(body)
    except ValueError:
        pct = float("nan")
    if "%" not in t and 0 < pct < 1000:
        raise ConfigError(f"--fail-if-slower {text!r}: give a percentage with its % sign (a "
                          f"bare number is ambiguous: percent or fraction?): did you mean "
                          f"--fail-if-slower {body}%?")
    if not 0 < pct < 1000 or "%" in body:
        raise ConfigError(f"--fail-if-slower {text!r}: give a percentage above 0 with one % "
                          "sign, e.g. --fail-if-slower 5% (fail when a point is significantly "
                          "more than 5% slower)")
    return pct / 100.0


def threshold_text(threshold: float) -> str:
    """A threshold as a percentage with the digits it was given: 0.0005 -> ``"0.05%"``,
    0.125 -> ``"12.5%"`` (up to 6 significant digits, as :func:`parse_threshold` read them)."""
    return f"{threshold * 100:.6g}%"


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


def _log_runs(base_s: Sequence[float], new_s: Sequence[float]
              ) -> tuple[np.ndarray, np.ndarray]:
    """The natural logs of BASE's and NEW's run medians (s), the input of
    :func:`ratio_from_runs` and :func:`rounds_to_tell`.

    Raises:
        ValueError: fewer than 2 runs on a side, or a non-positive median.
    """
    if len(base_s) < 2 or len(new_s) < 2:
        raise ValueError("a run-level interval needs at least 2 runs on each side")
    if min(base_s) <= 0 or min(new_s) <= 0:
        raise ValueError("run medians must be positive (seconds)")
    return np.log(np.asarray(base_s, float)), np.log(np.asarray(new_s, float))


def ratio_from_runs(base_s: Sequence[float], new_s: Sequence[float],
                    level: float = 0.95) -> tuple[float, float, float]:
    """Ratio of the geometric means of NEW's and BASE's run medians, with Welch's t interval
    on their logs (module docstring). Returns ``(ratio, low, high)``.

    Raises:
        ValueError: fewer than 2 runs on a side, a non-positive median, or ``level`` outside
            (0, 1).
    """
    check_level(level)
    lb, ln = _log_runs(base_s, new_s)
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
    from dlperf.report.opclasses import class_changes

    classes = class_changes(cb, cn, sorted(set(cb) | set(cn)), delta_s or None,
                            ("base_s", "new_s"))
    total = math.fsum(c["diff_s"] for c in classes)
    return {"classes": classes, "class_diff_s": total,
            "explained": total / delta_s if delta_s else None, "runs": [nb, nn]}


def run_flags(rec: RunRecord) -> list[str]:
    """Why a run is not fit to be judged by the gate, in words (empty: fit): its measuring
    thread waited for a CPU :data:`~dlperf.measure.host.CPU_WAIT_WARN` or more of the measured
    time and at least :data:`BUSY_MIN_WAIT_S` (``host_cpu_wait``: a busy host), its measured steps are bimodal
    (:func:`~dlperf.measure.spread.bimodal_warning`) or have two modes
    (:func:`~dlperf.measure.spread.modes_of`), or they drift
    (:func:`~dlperf.measure.spread.drift_of`). Computed from the stored samples, so records
    stored before these tests existed are judged by them too."""
    from dlperf.measure.host import CPU_WAIT_WARN
    from dlperf.measure.spread import drift_of, has_two_modes

    out = []
    cw = rec.host_cpu_wait
    share = getattr(cw, "share", None) if cw is not None else None
    sec = getattr(cw, "seconds", None) if cw is not None else None
    if (isinstance(share, (int, float)) and share >= CPU_WAIT_WARN
            and isinstance(sec, (int, float)) and sec >= BUSY_MIN_WAIT_S):
        out.append("busy host")
    xs = _finite(rec.measured_s)
    if has_two_modes(xs):
        out.append("two modes")
    if drift_of(xs) is not None:
        out.append("drifting")
    return out


#: What would make a point judgeable, by the reason it was not.
_ADVICE = {
    "runs": "measure each side with --repeats 3 (dlperf run --repeats 3 --tag NAME), or let "
            "dlperf compare --run measure BASE and NEW alternately",
    "busy host": "measure on a quiet host (nothing else on its CPUs, or CPUs set aside for "
                 "the runs)",
    "two modes": "find what alternates (the run's warnings name both modes; other work on "
                 "the host is one cause)",
    "drifting": "find what grows while the run trains (the run's warnings give the drift); a "
                "drifting step has no steady median to compare",
    "hardware": "measure BASE and NEW on one machine (dlperf compare --run BASE_DIR NEW_DIR "
                "measures both checkouts there, alternately): across GPU or CPU models the "
                "ratio measures the hardware, not the code",
}

#: Fields of :func:`dlperf.env.environment_of` that name the hardware: a point whose BASE and
#: NEW runs name other values is not judged by the gate (:func:`hardware_differences`).
HARDWARE_FIELDS = ("gpu", "cpu_model")


def hardware_differences(base: Sequence[RunRecord], new: Sequence[RunRecord]) -> list[str]:
    """``"gpu: NVIDIA H100 80GB HBM3 vs NVIDIA H200"`` for each of :data:`HARDWARE_FIELDS`
    whose values over ``base``'s runs differ from those over ``new``'s (a field a side did not
    record is skipped, as in :func:`dlperf.env.environment_differences`; several values of a
    side are joined with ``" / "``). Empty: the same hardware as far as recorded."""
    from dlperf.env import environment_of
    from dlperf.results.view import env_of

    def values(runs: Sequence[RunRecord]) -> dict[str, set[str]]:
        envs = [environment_of(env_of(r)) for r in runs]
        return {f: {str(e[f]) for e in envs if e.get(f) is not None} for f in HARDWARE_FIELDS}

    vb, vn = values(base), values(new)
    return [f"{f}: {' / '.join(sorted(vb[f]))} vs {' / '.join(sorted(vn[f]))}"
            for f in HARDWARE_FIELDS if vb[f] and vn[f] and vb[f] != vn[f]]


def judge_advice(keys: Iterable[str]) -> str:
    """What would make a point judgeable, in words, for the causes ``keys``: ``"runs"`` (too
    few runs measured) and the reasons of :func:`run_flags`."""
    keys = [k for k in dict.fromkeys(keys) if k in _ADVICE] or ["runs"]
    return "; ".join(_ADVICE[k] for k in keys)


def gate_verdict(ratio: float, low: float, high: float, threshold: float) -> str:
    """The gate's rule on a judged point (module docstring): ``"regression"`` when the ratio
    NEW/BASE exceeds ``1 + threshold`` and its interval ``[low, high]`` excludes 1;
    ``"inconclusive"`` when the ratio exceeds ``1 + threshold`` but the interval includes 1 (a
    regression larger than the threshold is neither shown nor excluded); else ``"pass"``.
    ``threshold``: a fraction (0.03 = 3%)."""
    if ratio <= 1.0 + threshold:
        return "pass"
    return "inconclusive" if low <= 1.0 <= high else "regression"


def run_cv(medians_s: Sequence[float]) -> float | None:
    """The run-to-run coefficient of variation of a side's run medians: the ``cv`` of
    :func:`dlperf.stats.between_run` (stdev with ddof=1 over the mean, as ``dlperf results
    --compare repeats`` gives it) of the finite ones; None for fewer than 2 of them or a mean
    of 0."""
    from dlperf.stats import between_run

    x = _finite(medians_s)
    if len(x) < 2:
        return None
    cv = between_run(x)["cv"]
    return None if cv is None else float(cv)


def rounds_to_tell(base_s: Sequence[float], new_s: Sequence[float], level: float = 0.95,
                   power: float = 0.8) -> int | None:
    """Runs a side (the same on both) at which the interval of :func:`ratio_from_runs` would
    exclude 1 with probability ``power`` if the true ratio and each side's spread were those
    of these runs (``base_s``, ``new_s``: run medians, s): the smallest ``n`` with
    ``(t(1 - (1 - level) / 2, df) + t(power, df)) * sqrt((sb^2 + sn^2) / n) <= |d|``, ``d``
    the difference of the log means, ``sb``, ``sn`` the stdevs of the logs, ``df`` Welch's
    for ``n`` a side (the usual power approximation of a two-sample t test, e.g. Chow, Shao &
    Wang 2008, "Sample Size Calculations in Clinical Research", 2nd ed., section 3.2). An
    estimate: with 3 runs a side the spread itself is uncertain. None when more than
    :data:`MAX_ROUNDS_ADVISED` would be needed, or the sides do not differ.

    Raises:
        ValueError: fewer than 2 runs on a side, or a non-positive median.
    """
    lb, ln = _log_runs(base_s, new_s)
    d = abs(float(ln.mean() - lb.mean()))
    vb, vn = float(lb.var(ddof=1)), float(ln.var(ddof=1))
    if d == 0.0:
        return None
    if vb + vn == 0.0:
        return MIN_RUNS
    from scipy import stats as _sps  # here, not at import (as above)

    for n in range(MIN_RUNS, MAX_ROUNDS_ADVISED + 1):
        df = (vb + vn) ** 2 * (n - 1) / (vb ** 2 + vn ** 2)
        q = float(_sps.t.ppf(1 - (1 - level) / 2, df) + _sps.t.ppf(power, df))
        if q * math.sqrt((vb + vn) / n) <= d:
            return n
    return None


def inconclusive_advice(pc: PointComparison) -> str:
    """What would judge an inconclusive point (:func:`gate_verdict`), in words: each side's
    run-to-run CV (:attr:`PointComparison.run_cv`), which side spreads more, the runs a side
    that spread needs (:attr:`PointComparison.rounds_needed`, :func:`rounds_to_tell`), and a
    quieter host."""
    cb, cn = pc.run_cv or (None, None)

    def pct(c: float | None) -> str:
        return "?" if c is None else f"{c:.1%}"

    out = f"its runs spread by CV {pct(cb)} (BASE) and {pct(cn)} (NEW)"
    if cb is not None and cn is not None and max(cb, cn) > 3 * min(cb, cn):
        wide = "NEW" if cn > cb else "BASE"
        out += f"; {wide}'s runs spread far more than the other side's (was the host busy while {wide} ran?)"
    change = pct_change(pc.ratio or 1.0, 0)
    n = pc.rounds_needed
    if n is not None:
        out += (f"; at that spread about {n} runs a side would show a change of this size "
                f"({change}) as significant 4 times in 5 (dlperf compare --run --rounds {n}, "
                f"or dlperf run --repeats {n})")
    else:
        out += (f"; at that spread more than {MAX_ROUNDS_ADVISED} runs a side would be needed "
                f"to show a change of this size ({change})")
    return out + "; a quiet host (nothing else on its CPUs or GPUs) narrows the spread itself"


@dataclass
class PointComparison:
    """One point compared: its runs on each side and, where both measured, the ratio NEW/BASE
    of the step time with its interval (``ci_from``: ``"runs"`` or ``"iterations"``), the
    verdict and the op-class attribution. ``outcome``: ``compared``, ``only in BASE``, ``only
    in NEW``, ``failed in NEW``, ``failed in BASE`` or ``failed in both``. ``failed_runs``: on
    a point measured on both sides some of whose NEW runs failed, in a gate comparison, the
    failure rule's counts and answer (``{"base": [failed, runs], "new": [failed, runs], "p":
    Fisher's one-sided p or None where BASE failed in none, "regression", "text"}``). In a
    gate comparison
    (:func:`compare_records`) ``judged`` says whether a compared point was judged (None
    outside one), ``not_judged`` why not, ``advice`` what would make it judgeable
    (:func:`judge_advice`; for an inconclusive point :func:`inconclusive_advice`), and
    ``left_out`` the runs not fit to judge, as ``(side, repeat, reasons)``. ``base_used`` and
    ``new_used``: the runs the step times and the interval come from (a judged point's runs
    fit to judge, else every ok run). With a threshold, ``regression`` and ``inconclusive``
    are :func:`gate_verdict`'s answers; ``run_cv``: the run-to-run CV of BASE's and NEW's
    run medians (:func:`run_cv`; an interval from runs), ``rounds_needed``: for an
    inconclusive point, :func:`rounds_to_tell`."""

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
    judged: bool | None = None
    not_judged: list[str] = field(default_factory=list)
    left_out: list[tuple[str, int, list[str]]] = field(default_factory=list)
    advice: str | None = None
    base_used: list[RunRecord] = field(default_factory=list)
    new_used: list[RunRecord] = field(default_factory=list)
    inconclusive: bool = False
    run_cv: tuple[float | None, float | None] | None = None
    rounds_needed: int | None = None
    failed_runs: dict[str, Any] | None = None

    @property
    def verdict(self) -> str:
        """``failed in some NEW runs`` (a regression by the failure rule: ``failed_runs``),
        ``slower``, ``faster``, ``no significant change``, ``not judged``, ``inconclusive``, or
        the outcome when not compared."""
        if self.outcome != "compared":
            return self.outcome
        if self.failed_runs is not None and self.failed_runs["regression"]:
            return "failed in some NEW runs"
        if self.judged is False:
            return "not judged"
        if self.inconclusive:
            return "inconclusive"
        if not self.significant:
            return "no significant change"
        return "slower" if (self.ratio or 1.0) > 1 else "faster"


def _positive(x: float | None) -> bool:
    return x is not None and x > 0


def _has_median(rec: RunRecord) -> bool:
    """Whether ``rec`` has a positive step time: its summary's median is finite and positive
    (its samples unread: :func:`compare_point` checks their median where the point is
    compared), else :func:`run_median_s` is positive. A stored time of 0 or below (a damaged
    row, a broken clock) is no measurement: a ratio of it means nothing."""
    med = rec.summary.median if rec.summary is not None else None
    if isinstance(med, (int, float)) and math.isfinite(med) and med > 0:
        return True
    return _positive(run_median_s(rec))


def ok_runs(runs: Sequence[RunRecord]) -> list[RunRecord]:
    """The runs that measured (status ``ok`` with a positive median step time,
    :func:`run_median_s`). Reads no samples of a run whose summary has a positive median
    (records read with ``lazy_samples`` keep them unread)."""
    return [r for r in runs if r.identity.status == "ok" and _has_median(r)]


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


def _fit_runs(pc: PointComparison, ob: list[RunRecord], on: list[RunRecord]
              ) -> tuple[list[RunRecord], list[RunRecord]]:
    """The gate's judgement of ``pc`` (module docstring): the runs of each side fit to be
    judged; sets ``judged``, ``not_judged`` and ``left_out``."""
    fit: dict[str, list[RunRecord]] = {"BASE": [], "NEW": []}
    counts: dict[str, int] = {}
    for side, runs in (("BASE", ob), ("NEW", on)):
        for r in runs:
            flags = run_flags(r)
            if flags:
                pc.left_out.append((side, int(r.identity.repeat or 0), flags))
                for f in flags:
                    counts[f] = counts.get(f, 0) + 1
            else:
                fit[side].append(r)
    for side, runs in (("BASE", ob), ("NEW", on)):
        n = len(fit[side])
        if n < MIN_RUNS:
            left = len(runs) - n
            pc.not_judged.append(f"{n} run{'s' if n != 1 else ''} in {side}"
                                 + (f" fit to judge ({left} left out)" if left else "")
                                 + f", {MIN_RUNS} needed")
    if pc.not_judged:
        pc.not_judged += [f"{f}: {c} run{'s' if c != 1 else ''}" for f, c in counts.items()]
        causes = ["runs"] if min(len(ob), len(on)) < MIN_RUNS else []
        pc.advice = judge_advice(causes + list(counts))
    pc.judged = not pc.not_judged
    return fit["BASE"], fit["NEW"]


def _status_word(rec: RunRecord) -> str:
    """A run's status, or for an ``ok`` run without a positive step time (:func:`ok_runs`)
    ``"ok without a positive step time"``."""
    st = str(rec.identity.status)
    return ("ok without a positive step time"
            if st == "ok" and not _positive(run_median_s(rec)) else st)


def _failures(runs: Sequence[RunRecord]) -> str:
    """``3 runs oom`` / ``2 runs crash, 1 run ok without a positive step time``: how a side's
    failed runs failed, by status (:func:`_status_word`)."""
    by: dict[str, int] = {}
    for r in runs:
        st = _status_word(r)
        by[st] = by.get(st, 0) + 1
    return ", ".join(f"{n} run{'s' if n != 1 else ''} {st}" for st, n in sorted(by.items()))


def _failed_not_judged(pc: PointComparison, failed_base: Sequence[RunRecord],
                       failed_new: Sequence[RunRecord]) -> None:
    """The gate's judgement of a point that failed in BASE, or on both sides: not judged (no
    BASE step time to judge NEW against, so it is not shown to pass); sets ``judged``,
    ``not_judged`` and ``advice``."""
    pc.judged = False
    for side, runs in (("BASE", failed_base), ("NEW", failed_new)):
        if runs:
            pc.not_judged.append(f"failed in {side}: {_failures(runs)}")
    both = bool(failed_base) and bool(failed_new)
    pc.advice = ("make the point run on both sides (dlperf results lists each run's status "
                 "and error), or leave it out of the gate with --model" if both else
                 "find why BASE failed (dlperf results lists each run's status and error) and "
                 "measure BASE again: NEW has nothing to be judged against; or leave the "
                 "point out of the gate with --model")


def failure_test(failed_base: int, runs_base: int, failed_new: int, runs_new: int) -> float:
    """The one-sided p-value that NEW's runs fail more often than BASE's: Fisher's exact test
    on the 2x2 table of failed and measured runs (``scipy.stats.fisher_exact``,
    ``alternative="greater"``: the probability, under the hypergeometric distribution of
    the failures given both margins, of NEW having ``failed_new`` failures or more; Fisher
    1935, "The Design of Experiments", section 2; Agresti 2002, "Categorical Data
    Analysis", 2nd ed., section 3.5.1). Counts of runs; ``failed_* <= runs_*``.

    Raises:
        ValueError: a count below 0, or more failed runs than runs on a side.
    """
    if not (0 <= failed_base <= runs_base and 0 <= failed_new <= runs_new):
        raise ValueError(f"failed runs must be in [0, runs] on each side; got BASE "
                         f"{failed_base} of {runs_base}, NEW {failed_new} of {runs_new}")
    from scipy import stats as _sps  # here, not at import (as above)

    table = [[failed_new, runs_new - failed_new], [failed_base, runs_base - failed_base]]
    return float(_sps.fisher_exact(table, alternative="greater").pvalue)


def _judge_failures(pc: PointComparison, base: Sequence[RunRecord], new: Sequence[RunRecord],
                    failed_b: Sequence[RunRecord], failed_n: Sequence[RunRecord],
                    level: float, threshold: float | None) -> None:
    """The gate's rule on a point measured on both sides some of whose NEW runs failed
    (module docstring): with no failed run in BASE a regression; else a regression when NEW's
    runs fail more often than BASE's by :func:`failure_test` at the gate's level (p below
    ``1 - level``), otherwise the step time stays judged on the runs that measured, with a
    note of both counts. A regression only with a ``threshold`` (without one the rule's
    text is a note). Sets ``failed_runs``, ``regression``, ``notes``; a regression makes the
    point judged (on its failures): a step time that could not be judged is left out of the
    summary (its interval dropped) and said in a note."""
    kb, nb, kn, nn = len(failed_b), len(base), len(failed_n), len(new)
    how_n = _failures(failed_n)
    p = failure_test(kb, nb, kn, nn) if kb else None
    regressed = p is None or p < 1 - level
    if p is None:
        text = f"failed in {kn} of {nn} NEW runs ({how_n}), in none of {nb} BASE runs"
    else:
        more = "more often than" if regressed else "not shown more often than"
        text = (f"failed in {kn} of {nn} NEW runs ({how_n}), {more} in BASE ({kb} of {nb}: "
                f"{_failures(failed_b)}; Fisher's exact test, one-sided p = {p:.2g}"
                + (")" if regressed else f" >= {1 - level:.2g}): the step time is judged on "
                   "the runs that measured"))
    pc.failed_runs = {"base": [kb, nb], "new": [kn, nn], "p": p,
                      "regression": regressed and threshold is not None, "text": text}
    pc.notes.append(text)
    if not regressed or threshold is None:
        return
    pc.regression, pc.inconclusive, pc.rounds_needed = True, False, None
    if pc.judged is False:  # the failures judge it; the step time is only described
        pc.notes.append(f"step time not judged ({'; '.join(pc.not_judged)}): "
                        f"{change_text(pc)} (CI from {pc.ci_from or '-'}), left out of the "
                        "summary")
        pc.judged, pc.not_judged, pc.ci, pc.significant = True, [], None, False
    pc.advice = None


def _interleaving_note(base: list[RunRecord], new: list[RunRecord]) -> str | None:
    """A note when every BASE run was made before every NEW run (or after): a change of the
    host between them is then read as a change of the point."""
    from dlperf.results.history import created_of

    tb = [t for r in base if (t := created_of(r)) is not None]
    tn = [t for r in new if (t := created_of(r)) is not None]
    if len(tb) < 2 or len(tn) < 2 or not (max(tb) < min(tn) or max(tn) < min(tb)):
        return None
    first = "BASE" if max(tb) < min(tn) else "NEW"
    return (f"every {first} run was made before every {'NEW' if first == 'BASE' else 'BASE'} "
            "run: a change of the host between them (other work, clocks, temperature) reads "
            "as a change of the point; dlperf compare --run alternates them")


def compare_point(key: str, base: list[RunRecord], new: list[RunRecord], *, level: float = 0.95,
                  threshold: float | None = None, gate: bool = False) -> PointComparison:
    """Compare one point's BASE and NEW runs (module docstring); ``threshold``: the regression
    threshold (0.05 = 5%), None: no regression verdict beyond failures. ``gate``: judge it as
    ``dlperf compare`` does (run-level intervals from runs fit to be judged, else not judged;
    module docstring); off, the interval comes from the runs or else the iterations, as for
    the descriptive comparisons of one file (modes, frameworks, batch sizes)."""
    label = point_label((base or new)[0])
    pc = PointComparison(key, label, list(base), list(new))
    if not base or not new:
        pc.outcome = "only in BASE" if base else "only in NEW"
        if gate and not base and not ok_runs(new):  # ok_runs: a positive step, samples unread
            # a new point that never measured: nothing shows it passes (module docstring)
            pc.judged = False
            pc.not_judged = [f"new point, every run failed ({_failures(new)})"]
            pc.advice = ("find why NEW fails (dlperf results lists each run's status and "
                         "error) and measure it again, or leave the point out of the gate "
                         "with --model")
        return pc
    # a summary's median at odds with its samples' (a damaged row): the samples' decides
    ob = [r for r in ok_runs(base) if _positive(run_median_s(r))]
    on = [r for r in ok_runs(new) if _positive(run_median_s(r))]
    # runs that failed (a status other than ok); an ok run without a step time is a damaged
    # row, left out with a note, not a failure of the code measured
    failed_b = [r for r in base if r.identity.status != "ok"]
    failed_n = [r for r in new if r.identity.status != "ok"]
    if not ob or not on:
        pc.outcome = ("failed in both" if not ob and not on else
                      "failed in NEW" if not on else "failed in BASE")
        pc.regression = pc.outcome == "failed in NEW"
        if pc.regression:
            pc.notes.append(f"failed in NEW: {_failures(new)}")
        elif gate:  # nothing to judge NEW against
            _failed_not_judged(pc, base if not ob else [], new if not on else [])
        return pc
    if gate:
        fb, fn = _fit_runs(pc, ob, on)
        hw = hardware_differences(ob, on) if threshold is not None else []
        if hw:  # the ratio would measure the machines: not judged (module docstring)
            pc.not_judged += [f"other hardware: {d}" for d in hw]
            pc.advice = "; ".join(a for a in (pc.advice, _ADVICE["hardware"]) if a)
            pc.judged = False
        if pc.judged:
            ob, on = fb, fn
            note = _interleaving_note(ob, on)
            pc.notes += [note] if note else []
    pc.base_used, pc.new_used = list(ob), list(on)
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
            if not gate:
                pc.notes.append(f"interval from iterations ({len(ob)} and {len(on)} run(s)): "
                                "run-to-run variation not included; --repeats 3 on both "
                                "sides for a run-level interval")
    if lo is not None and hi is not None:
        pc.ci = (lo, hi)
        pc.significant = not lo <= 1.0 <= hi
    if pc.ci_from == "runs":
        pc.run_cv = (run_cv(mb), run_cv(mn))
    if (threshold is not None and pc.ci is not None and pc.ratio is not None
            and pc.judged is not False):
        rule = gate_verdict(pc.ratio, pc.ci[0], pc.ci[1], threshold)
        pc.regression = rule == "regression"
        pc.inconclusive = rule == "inconclusive"
        if pc.inconclusive and pc.ci_from == "runs":
            pc.rounds_needed = rounds_to_tell(mb, mn, level)
            pc.advice = inconclusive_advice(pc)
    if gate and failed_n:
        _judge_failures(pc, base, new, failed_b, failed_n, level, threshold)
    pc.attribution = attribute_op_classes(ob, on, pc.new_step_s - pc.base_step_s)
    for what, runs, used in (("BASE", base, ob), ("NEW", new, on)):
        bad = [_status_word(r) for r in runs if not any(r is u for u in used)]
        if bad:
            pc.notes.append(f"{what}: {len(bad)} of {len(runs)} runs not used "
                            f"({', '.join(sorted(set(map(str, bad))))})")
    from dlperf.env import environment_differences

    a, b = ob[-1].to_dict(raw=False), on[-1].to_dict(raw=False)
    pc.notes += [f"environment differs: {d}" for d in environment_differences(a, b)]
    diff = _config_diff(config_of(ob[-1]), config_of(on[-1]))
    pc.notes += [f"settings differ: {d}" for d in diff]
    return pc


def geometric_summary(points: Sequence[PointComparison],
                      level: float = 0.95) -> tuple[float, float, float, int] | None:
    """The geometric mean of the compared points' ratios with its interval (module
    docstring): ``(ratio, low, high, n_points)``; None when no point was compared. Points a
    gate did not judge are left out."""
    done = [p for p in points if p.ratio is not None and p.ci is not None
            and p.judged is not False]
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
    was (``base_name``, ``new_name``), the level of the intervals and the threshold.
    ``damaged_rows``: results file -> the rows its reader skipped as damaged
    (:meth:`dlperf.results.store.ResultStore.damaged`; set by ``dlperf compare``): the points
    they held are in neither side, so the gate does not pass (:func:`gate_status`)."""

    points: list[PointComparison]
    base_name: str
    new_name: str
    level: float = 0.95
    threshold: float | None = None
    damaged_rows: dict[str, int] = field(default_factory=dict)

    @property
    def summary(self) -> tuple[float, float, float, int] | None:
        """:func:`geometric_summary` of :attr:`points`."""
        return geometric_summary(self.points, self.level)

    @property
    def regressions(self) -> list[PointComparison]:
        """Points significantly slower than the threshold allows, or failing only in NEW:
        in every NEW run, or in some where BASE's runs did not fail or failed less often."""
        return [p for p in self.points if p.regression]

    @property
    def inconclusive(self) -> list[PointComparison]:
        """Judged points slower than the threshold allows by their estimate whose interval
        includes 1 (:func:`gate_verdict`): a regression neither shown nor excluded."""
        return [p for p in self.points if p.inconclusive]

    @property
    def judged(self) -> list[PointComparison]:
        """The points judged (measured on both sides with enough runs fit to judge)."""
        return [p for p in self.points if p.judged]

    @property
    def not_judged(self) -> list[PointComparison]:
        """The points not judged: run on both sides with too few runs fit to judge, other
        hardware on the two sides (with a threshold), or failed in BASE or on both sides; or
        new (only in NEW) with every run failed (:attr:`PointComparison.not_judged` says
        why)."""
        return [p for p in self.points if p.judged is False]

    @property
    def missing(self) -> list[PointComparison]:
        """The points of BASE that NEW lacks."""
        return [p for p in self.points if p.outcome == "only in BASE"]


def pct_change(ratio: float, decimals: int = 1) -> str:
    """A ratio NEW/BASE as a signed change in percent: 1.06 -> ``"+6.0%"`` (``decimals``
    digits after the point; 0: whole percent, ``"+6%"``)."""
    return f"{(ratio - 1) * 100:+.{decimals}f}%"


def change_text(pc: PointComparison, decimals: int = 1) -> str:
    """``+6.0% [+4.0, +8.0]``: the change of the step time with its interval (``decimals``
    digits after the point: 0 gives ``+165% [-43, +1133]``), or the outcome of a point
    without an interval."""
    if pc.ratio is None or pc.ci is None:
        return pc.outcome
    lo, hi = ((f"{(c - 1) * 100:+.{decimals}f}") for c in pc.ci)
    return f"{pct_change(pc.ratio, decimals)} [{lo}, {hi}]"


def damaged_text(damaged_rows: dict[str, int]) -> str:
    """``3 damaged row(s) of a.db skipped``, one clause a file (``; `` between)."""
    return "; ".join(f"{n} damaged row(s) of {path} skipped" for path, n in damaged_rows.items())


def gate_status(comp: Comparison) -> tuple[int, str | None]:
    """The exit status of ``dlperf compare`` and its one-line reason (None with status 0).
    Without a threshold: 0. With one, the first that applies: :data:`EXIT_REGRESSION` (a
    point regressed, failed in NEW only, or failed in some NEW runs where BASE's did not or
    less often: the reason names the failures), :data:`EXIT_MISSING` (a point of BASE is missing
    from NEW, or no point is in both), :data:`EXIT_INCONCLUSIVE` (a judged point is
    inconclusive: :func:`gate_verdict`), :data:`EXIT_NOT_JUDGED` (a results file had damaged
    rows, skipped: :attr:`Comparison.damaged_rows`; a point run on both sides was not judged,
    with too few runs fit to judge or failed in BASE, a new point failed in every run, or no
    point was judged: a point the gate could
    not judge is not shown to pass, as a point missing from NEW is not; the others may have
    passed); else 0."""
    if comp.threshold is None:
        return 0, None
    regs = comp.regressions
    if regs:
        return EXIT_REGRESSION, (f"{len(regs)} point(s) regressed (--fail-if-slower "
                                 f"{threshold_text(comp.threshold)}): " + "; ".join(
                                     p.label + (f" ({p.failed_runs['text']})"
                                                if p.failed_runs and p.failed_runs["regression"]
                                                else "") for p in regs))
    both = [p for p in comp.points if p.base and p.new]
    if not both:
        return EXIT_MISSING, ("BASE and NEW have no point in common: nothing was compared (were "
                              "the same settings measured on both sides?)")
    miss = comp.missing
    if miss:
        return EXIT_MISSING, (f"{len(miss)} point(s) of BASE missing from NEW: "
                              + "; ".join(p.label for p in miss[:5])
                              + (" ..." if len(miss) > 5 else ""))
    inc = comp.inconclusive
    if inc:
        return EXIT_INCONCLUSIVE, (
            f"{len(inc)} point(s) inconclusive (--fail-if-slower "
            f"{threshold_text(comp.threshold)}): slower than the threshold by the estimate, but "
            "the interval includes 1, so a regression is neither shown nor excluded: "
            + "; ".join(f"{p.label} {change_text(p, 0)}" for p in inc[:5])
            + (" ..." if len(inc) > 5 else "")
            + "; the comparison says what would judge them (more rounds, a quieter host)")
    if comp.damaged_rows:
        return EXIT_NOT_JUDGED, (
            f"{damaged_text(comp.damaged_rows)}: the points they held are not judged, so not "
            "shown to pass; restore the file from a copy, or `dlperf merge` it into a new file "
            "(which takes the intact rows only) and compare that")
    nj = comp.not_judged
    if not comp.judged:
        return EXIT_NOT_JUDGED, (f"no point could be judged ({len(nj)} not "
                                 "judged; the table says why and what would make them "
                                 "judgeable)")
    if nj:
        both_nj = [p for p in nj if p.base]
        new_nj = [p for p in nj if not p.base]
        parts = []
        for pts, head in ((both_nj, f"{len(both_nj)} of {len(both_nj) + len(comp.judged)} "
                                    "point(s) run on both sides not judged"),
                          (new_nj, f"{len(new_nj)} new point(s) not judged")):
            if pts:
                parts.append(head + ", so not shown to pass: "
                             + "; ".join(f"{p.label} ({', '.join(p.not_judged[:2])})"
                                         for p in pts[:5])
                             + (" ..." if len(pts) > 5 else ""))
        return EXIT_NOT_JUDGED, ("; ".join(parts) + "; the table says what would make them "
                                 "judgeable (or --model leaves a point out of the gate)")
    return 0, None


def _sort_key(rec: RunRecord) -> tuple[Any, ...]:
    i = rec.identity
    return (str(i.model), str(i.framework), str(i.mode), str(i.device), str(i.precision),
            i.batch_size or 0, str(i.data), i.threads or 0, i.world_size or 1)


def compare_records(base: Iterable[RunRecord], new: Iterable[RunRecord], *,
                    base_name: str = "BASE", new_name: str = "NEW", level: float = 0.95,
                    threshold: float | None = None) -> Comparison:
    """Compare every point (matched by :func:`point_key_of`) of ``base`` and ``new`` records
    as the gate does (:func:`compare_point` with ``gate``: all fit runs of each point on each
    side are used). Points in model, framework, mode, device,
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
    # key -> notes of the runs left out: read twice, then of older code (in this order: both
    # edit by_b and by_n in place)
    dropped: dict[str, list[str]] = {}
    for drop in (_drop_duplicates, _drop_old_code):
        for by, side in ((by_b, "BASE"), (by_n, "NEW")):
            for k, notes in drop(by, side).items():
                dropped.setdefault(k, []).extend(notes)
    moved = _match_moved_files(by_b, by_n)
    keys = sorted(set(by_b) | set(by_n), key=lambda k: (k not in by_b, _sort_key(
        (by_b.get(k) or by_n[k])[0]), k))
    pts = [compare_point(k, by_b.get(k, []), by_n.get(k, []), level=level, threshold=threshold,
                         gate=True) for k in keys]
    for p in pts:
        p.notes += dropped.get(p.key, [])
        if p.key in moved:
            p.notes.append(moved[p.key])
    return Comparison(pts, base_name, new_name, level, threshold)


def run_identity(rec: RunRecord) -> str:
    """What makes two records one run: the stored result (:meth:`RunRecord.to_dict` without
    the raw samples, as a results file's ``result_json``; it holds the run key and
    ``created_at``), as :func:`dlperf.results.merge.merge_stores` keeps a result once. The
    row id is not part of it: the same row read from two copies of a file is one run."""
    import json

    return json.dumps(rec.to_dict(raw=False), sort_keys=True, default=str)


def _run_stamp(rec: RunRecord) -> tuple[Any, ...]:
    """A run's key, repeat, time and status: records alike here are compared in full
    (:func:`run_identity`) by :func:`_drop_duplicates`."""
    i = rec.identity
    return (i.run_key, i.repeat, i.created_at, i.status)


def _drop_duplicates(by: dict[str, list[RunRecord]], side: str) -> dict[str, list[str]]:
    """Count a run read twice into one side (the same row, or an identical stored row:
    :func:`run_identity`) once, in place: a run counted twice would narrow the point's
    interval as if it had been measured twice. Returns key -> the note saying how many."""
    notes: dict[str, list[str]] = {}
    for k, runs in by.items():
        # the whole stored result only where the run key, time and status are alike
        # (serialising every record costs ~2 ms each)
        alike = Counter(_run_stamp(r) for r in runs)
        if max(alike.values(), default=0) < 2:
            continue
        seen: set[str] = set()
        keep = []
        for r in runs:
            if alike[_run_stamp(r)] < 2:
                keep.append(r)
                continue
            ident = run_identity(r)
            if ident not in seen:
                seen.add(ident)
                keep.append(r)
        if len(keep) < len(runs):
            n = len(runs) - len(keep)
            notes[k] = [f"{side}: {n} run(s) read twice (an identical stored row: the same "
                        "run key, time and result) counted once"]
            by[k] = keep
    return notes


def _code(rec: RunRecord) -> str | None:
    spec = rec.identity.spec
    return spec.code if spec is not None else None


def _drop_old_code(by: dict[str, list[RunRecord]], side: str) -> dict[str, list[str]]:
    """Leave out, in place, the runs of a point measured with other code than its newest run
    (a ``file:`` model edited and measured again: :attr:`dlperf.zoo.spec.ModelSpec.code`);
    returns key -> the note saying how many."""
    from dlperf.results.history import created_of

    notes: dict[str, list[str]] = {}
    for k, runs in by.items():
        codes = {_code(r) for r in runs}
        if len(codes - {None}) < 2:
            continue
        newest = max(runs, key=lambda r: (created_of(r) is not None, created_of(r) or 0,
                                          r.stored.id if r.stored else 0))
        keep = [r for r in runs if _code(r) == _code(newest)]
        notes[k] = [f"{side}: {len(runs) - len(keep)} run(s) of older code of the model left "
                    f"out (its newest runs are of code {_code(newest)})"]
        by[k] = keep
    return notes


#: Config fields that do not tell two points apart when matching a moved ``file:`` model.
_LOOSE_SKIP = frozenset({"model", "repeat", "data_dir", "timeout_s", "iterations", "trace_dir"})


def _loose_key(rec: RunRecord) -> str | None:
    """For a ``file:`` model: its settings with the file named by its base name only (the same
    model in two checkouts has two absolute paths); None for other models."""
    import json
    import posixpath

    model = str(rec.identity.model or "")
    if not model.startswith("file:"):
        return None
    body, _, query = model[5:].partition("?")
    path, _, fn = body.rpartition(":")
    cfg = {k: v for k, v in config_of(rec).items() if k not in _LOOSE_SKIP}
    return json.dumps([posixpath.basename(path.replace("\\", "/")), fn, query, cfg],
                      sort_keys=True, default=str)


def _match_moved_files(by_b: dict[str, list[RunRecord]], by_n: dict[str, list[RunRecord]]
                       ) -> dict[str, str]:
    """Pair, in place, a BASE point and a NEW point of a ``file:`` model that no key matched
    but whose file has the same name and whose settings are the same (``dlperf compare --run``
    measures the two checkouts' copies of one file): NEW's runs move under BASE's key. Only
    one-to-one pairs are made. Returns BASE key -> the note saying so."""
    def loose(by: dict[str, list[RunRecord]], keys: set[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        seen: dict[str, int] = {}
        for k in keys:
            lk = _loose_key(by[k][0])
            if lk is not None:
                out[lk] = k
                seen[lk] = seen.get(lk, 0) + 1
        return {lk: k for lk, k in out.items() if seen[lk] == 1}

    lb = loose(by_b, set(by_b) - set(by_n))
    ln = loose(by_n, set(by_n) - set(by_b))
    notes = {}
    for lk, kb in lb.items():
        kn = ln.get(lk)
        if kn is None:
            continue
        mb, mn = by_b[kb][0].identity.model, by_n[kn][0].identity.model
        by_n[kb] = by_n.pop(kn)
        notes[kb] = (f"matched by the file's name: BASE measured {mb}, NEW {mn} (the same "
                     "settings)")
    return notes
