"""One device: the step as the overlap of host dispatch and device execution, fitted.

A step issues host work ``H`` per iteration (Python, the framework's dispatcher, kernel launches;
independent of the batch) while the device executes ``D(B) = d0 + d1 B``: ``d1`` the per-sample
work, ``d0`` the part that does not shrink with the batch (weights, gradients and optimizer
state, and the floor of kernels too small to fill the device: the small-batch/wave effect, the
roofline's kernel term ``K t_k``). With the host running ahead of the device the step is
``max(H, D)`` (Dai et al. 2022, sec. 3: a step is CPU- or GPU-bound); the corner is rounded in
practice (launch queues drain, small kernels under-fill the device), so the model is the
p-norm (:data:`SMOOTH_P`)::

    T(B) = (H^p + D(B)^p)^(1/p),   p = SMOOTH_P = 8

A series is one configuration measured in one results file (one host session): its host time
is its own. ``d0`` and ``d1`` are tied to the roofline of :mod:`dlperf.perfmodel.roofline` by
a prior whose width is the roofline's own spread across models (``PRIOR_SIGMA``), and, where a
traced run of the same configuration recorded the device busy time, by that measurement. A
series with several batch sizes fixes ``H``, ``d0``, ``d1`` itself; one with a single point
leans on the prior for ``D`` and solves ``H`` from the step. Residuals are relative (log), each
weighted by the point's own uncertainty (its median's CI) plus a model floor ``SIGMA_MODEL``.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dlperf.perfmodel import lsq, special
from dlperf.perfmodel import roofline as rl
from dlperf.perfmodel.equations import SMOOTH_P as SMOOTH_P
from dlperf.perfmodel.equations import bound_of
from dlperf.perfmodel.equations import overlap as overlap
from dlperf.perfmodel.memo import once
from dlperf.perfmodel.records import Point

#: Relative error the model is assumed to have at a point besides the point's own noise.
#: Chosen on the held-out batch back-test of benchmarks/results/h200 (dlbench.db and
#: calibration.db): 0.01, 0.02, 0.04 gave MdAPE within 0.2 points of each other.
SIGMA_MODEL = 0.02
#: Log-width of the roofline prior on the per-sample device time ``d1``. The roofline's own
#: spread across models is 0.2-0.35 (log RMS of its group fits on benchmarks/results/h200), but
#: on the held-out batch back-test of dlbench.db and calibration.db a prior that tight cost
#: accuracy (MdAPE 4.2% at 0.3, 4.05% at 0.5, 3.98% at 1.0, no prior 3.95%) while any prior cut
#: the worst miss (118% without, 52-56% with): 0.5 is used. The fixed part ``d0`` has no prior
#: (a prior on it made every variant worse).
PRIOR_SIGMA = 0.5
#: Log-width of a traced device busy time as a measurement of ``D`` at its batch size (traces
#: of the same configuration on other days agree to a few percent; the profiler adds a little).
TRACE_SIGMA = 0.05
#: Log-width of a device-bound step of the same configuration measured in another results file,
#: taken as its device time (repeated device-bound points agree to 0.5% across the files of
#: benchmarks/results/h200; a step is an upper bound of its device time, hence some slack).
SESSION_SIGMA = 0.05
#: Log-width of the one-sided prior that keeps the host time below the smallest step.
HOST_PRIOR_SIGMA = 0.5
#: An unidentified host time (a device-bound series) with no host-bound series of the same model
#: elsewhere is pulled, weakly (log-width 3), towards a tenth of the smallest step: "device-bound
#: unless the data say otherwise".
HOST_PULL_CENTER = 0.1
HOST_PULL_SIGMA = 3.0
#: Log-width of the host time estimated without the model's own times
#: (:meth:`dlperf.perfmodel.calibrate.Calibration.host_of_group`: other models' host time per
#: dispatched operator or launch, times this model's count) as a prior of a series whose host
#: time no host-bound series of the same model gives. Without it a device-bound series let the
#: host absorb the curvature of its smallest batch through the rounded corner: vgg16 fp32 eager
#: (calibration.db, 35.8 ms at b=16, 5% above its device line) fitted H = 31 ms, and its bf16
#: what-if came out host-bound at 36.8 ms against 7.7 ms measured. On the back-test of
#: benchmarks/results/h200 (+h200x2) widths 0.3, 0.5 and 1.0 gave the same table within 0.1
#: points of MdAPE (held-out batch max 52.6% -> 33.5%, what-if fp32->bf16 max 377% -> 264%);
#: 0.5 is the roofline prior's width (:data:`PRIOR_SIGMA`).
HOST_ESTIMATE_SIGMA = 0.5
#: Log-width of the roofline prior on the fixed device time ``d0`` of a series of at most
#: :data:`FIXED_PRIOR_MAX_BATCHES` batch sizes: without it, a series of one or two points lets
#: ``d0`` absorb whatever ``H`` and ``d1`` leave over. Chosen on the development rows of the
#: one- and two-point series back-test (MdAPE one-point up / down, two-point up / down: no
#: prior 8.00 / 11.31 / 4.27 / 4.77%, 0.3: 7.01 / 6.99 / 4.57 / 5.20, 0.5: 6.87 / 6.60 / 4.15 /
#: 5.06, 1.0: 7.19 / 6.55 / 4.13 / 4.93, 2.0: 7.55 / 7.90 / 4.40 / 4.86; 0.5 has the lowest sum).
FIXED_PRIOR_SIGMA = 0.5
#: Series of at most this many batch sizes get the ``d0`` prior (three fix ``H``, ``d0``, ``d1``).
FIXED_PRIOR_MAX_BATCHES = 2
#: Log-width of the ``d1`` prior of a series of at most :data:`FIXED_PRIOR_MAX_BATCHES` batch
#: sizes where the same model, precision and device has series in other (framework, mode)
#: groups that show their own ``d1`` (:meth:`dlperf.perfmodel.calibrate.Calibration.
#: sibling_scale`): the roofline's ``d1`` times the median of those series' fitted ``d1`` over
#: their own roofline's, a model's own departure from its group's roofline (a random effect per
#: model and precision, estimated from its other groups: partial pooling, Gelman & Hill 2007,
#: ch. 12). Chosen on the development rows: the offset's leave-one-group-out log RMS over the
#: development models' 3+-batch series is 0.34 (0.52 for the roofline alone); one- and
#: two-point MdAPE up / down at 0.2: 5.69 / 5.82 / 4.19 / 5.22%, 0.25: 5.68 / 5.90 / 4.20 /
#: 5.12, **0.3: 6.10 / 5.96 / 4.09 / 5.04**, 0.4: 6.08 / 5.93 / 4.13 / 5.02, 0.5: 6.24 / 5.75 /
#: 4.12 / 5.10 (without: 6.87 / 6.60 / 4.15 / 5.06); sums within 0.3 points from 0.2 to 0.5,
#: and 0.3, the offset's own spread, the narrowest that moves none of the four the wrong way.
SIBLING_SIGMA = 0.3
#: Batch sizes a series needs before its host time counts as shown by the data (a prior-free
#: fit of three parameters needs three points).
IDENTIFY_MIN_BATCHES = 3
#: Log-width of a host time carried over from a host-bound series of the same model in another
#: precision or results file (host times of one point differ by up to 40% between sessions).
HOST_TRANSFER_SIGMA = 0.3
#: Log-width of the untraced host dispatch time of a point (``Point.host_dispatch_s``,
#: :mod:`dlperf.measure.dispatch`) as a measurement of the series' ``H``: the probe runs from
#: an idle device after the measured segment, a few iterations, so it sees the same host a few
#: seconds later (repeated probes of one point agree within ~5-10%).
HOST_MEAS_SIGMA = 0.1
#: Bounds (s) of the device time per kernel ``t_k`` a group's roofline fit may choose
#: (:func:`fit_group`; 1 ns: no kernel term, 100 us: past any launch latency of a GPU) and the
#: fit's start (2 us: a small kernel's busy time on the H200, busy / kernels of the JAX LSTM).
KERNEL_S_BOUNDS = (1e-9, 1e-4)
KERNEL_S_START = 2e-6
#: The probe's dispatch is ``H`` when the host returned clearly before the device finished
#: (wait after return > this share of the dispatch); otherwise the host may have blocked on a
#: full launch queue, and the dispatch is only an upper bound of ``H``.
HOST_MEAS_WAIT_SHARE = 0.05


def host_measurements(points: Sequence[Point]) -> list[tuple[float, bool]]:
    """``(dispatch_s, exact)`` of the points with an untraced host dispatch time: ``exact``
    when the probe's host returned before the device finished (:data:`HOST_MEAS_WAIT_SHARE`),
    else the dispatch is an upper bound of ``H``."""
    out = []
    for p in points:
        d = p.host_dispatch_s
        if d and d > 0:
            w = p.host_sync_wait_s or 0.0
            out.append((d, w > HOST_MEAS_WAIT_SHARE * d))
    return out


def series_key(p: Point) -> tuple:
    """What makes a series: the configuration, compile mode, layout, loader, DP shape and the
    results file."""
    return (p.config, p.compile_mode, p.layout, p.loader_workers, p.world_size, p.variant,
            p.source)


def group_series(points: Iterable[Point]) -> dict[tuple, list[Point]]:
    """Un-instrumented points grouped by :func:`series_key`, each sorted by batch size."""
    out: dict[tuple, list[Point]] = defaultdict(list)
    for p in points:
        if not p.instrumented:
            out[series_key(p)].append(p)
    return {k: sorted(v, key=lambda p: p.batch_size) for k, v in out.items()}


def _sigma(p: Point) -> float:
    ci = (p.ci_rel or 0.0) / 1.96
    return math.sqrt(ci * ci + SIGMA_MODEL ** 2)


@dataclass(frozen=True)
class FitRow:
    """One row of a series fit's least squares (:func:`fit_series`), for a reader to check:
    the fitted quantity ``term`` (``T(B=64)``, ``H``, ``d0``, ``d1``, ``D(B=32)``) pulled
    towards ``target`` (s; ``d1`` in s/sample) with log-width ``sigma``; ``side``: ``=`` (two
    sided), ``<=`` (only a fitted value above ``target`` costs); ``source``: where the target
    came from (``file:id``, ``roofline ...``, ``host probe``, ...)."""

    term: str
    target: float
    sigma: float
    side: str
    source: str


@dataclass(frozen=True)
class SeriesFit:
    """``T(B) = overlap(H, d0 + d1 B)`` of one series; times in s, ``d1`` in s/sample.

    Attributes:
        host_s, device_fixed_s, device_per_sample_s: ``H``, ``d0``, ``d1``.
        batch_sizes: per-device batch sizes of the points it was fitted on.
        result_ids: ``source:id`` of those points, in their order, then of every other
            stored result the fit read as ``D(b)`` (:class:`Anchor`: traced busy times, other
            files' device-bound steps), each result once.
        prior: what tied the device line (``roofline e_F=.., e_Y=..`` / ``trace`` / ``none``).
        rms_log: RMS log residual at the fitted points.
        rows: every row the least squares weighed (:class:`FitRow`: the points, the priors,
            the host probes, the anchors, the one-sided bounds), in the order
            :class:`_SeriesProblem` stacks them.
    """

    host_s: float
    device_fixed_s: float
    device_per_sample_s: float
    batch_sizes: tuple[int, ...]
    result_ids: tuple[str, ...]
    prior: str
    rms_log: float
    rows: tuple[FitRow, ...] = field(default=(), compare=False)

    def device_s(self, batch: float) -> float:
        """``D(B)`` (s)."""
        return self.device_fixed_s + self.device_per_sample_s * batch

    def step_time_s(self, batch: float, host_scale: float = 1.0) -> float:
        """Predicted step (s) at ``batch`` per device; ``host_scale`` multiplies ``H``."""
        return float(overlap(self.host_s * host_scale, self.device_s(batch)))

    def bound(self, batch: float, host_scale: float = 1.0) -> str:
        """``host`` when ``H`` exceeds ``D(B)``, else ``device``."""
        return bound_of(self.host_s * host_scale, self.device_s(batch))


@dataclass(frozen=True)
class Anchor:
    """A measured device time of the configuration: ``device_s`` at ``batch`` per device, good
    to ``sigma`` (log), from ``source`` (a traced busy time, or a device-bound step of the same
    configuration in another results file: ``file:id (what)``)."""

    batch: int
    device_s: float
    sigma: float
    source: str

    @property
    def result(self) -> str:
        """``file:id`` of the stored result measured (:attr:`source` without what it is)."""
        return self.source.rsplit(" (", 1)[0]


@dataclass(frozen=True)
class DevicePrior:
    """What ties a series' device line besides its own steps: the roofline's per-sample time
    ``d1`` within ``sigma`` (log; ``d1`` None: no roofline) and measured :class:`Anchor` s."""

    d1: float | None
    sigma: float
    anchors: tuple[Anchor, ...]
    label: str
    host_s: float | None = None
    host_sigma: float = 0.3
    host_label: str = ""
    #: the roofline's fixed device time ``y0 / (e_Y W) + K t_k`` (s), a prior of ``d0`` for a
    #: series of :data:`FIXED_PRIOR_MAX_BATCHES` batch sizes or fewer (None: none)
    d0: float | None = None


#: The prior of a series fit given none: nothing ties its device line or host time but its
#: own steps (and the weak pull of :data:`HOST_PULL_CENTER`).
NO_PRIOR = DevicePrior(None, 1.0, (), "none")


class _SeriesProblem:
    """The residuals of :func:`fit_series` over ``x = log(H, d0, d1)`` and their Jacobian.

    Rows, each divided by its log-width: the points' ``log T(B) - log t`` (weighted by their
    noise); the priors linear in ``x`` (``d1`` and ``d0`` from the roofline, ``H`` from
    elsewhere or pulled towards a tenth of the smallest step, the two-sided host
    measurements); the anchors' ``log D(b) - log D_measured``; and the one-sided rows (``H``
    above the smallest step, ``H`` above a probe that may have blocked), zero on their
    allowed side. The Jacobian is analytic: ``d log T / d log H = H^p / (H^p + D^p)``."""

    def __init__(self, b: np.ndarray, t: np.ndarray, w: np.ndarray,
                 prior: DevicePrior, fixed_prior: float | None,
                 hosts: list[tuple[float, bool]], tmin: float) -> None:
        self.b, self.lt, self.w = b, np.log(t), w
        two_sided, one_sided = _prior_rows(prior, fixed_prior, hosts, tmin)
        # (parameter, target log, width)
        lin = [(_PARAM[r.term], math.log(r.target), r.sigma) for r in two_sided]
        self.lin_i = np.array([i for i, _, _ in lin], int)
        self.lin_c = np.array([c for _, c, _ in lin], float)
        self.lin_s = np.array([s for _, _, s in lin], float)
        anchors = prior.anchors
        self.ab = np.array([a.batch for a in anchors], float)
        self.ad = np.log(np.array([a.device_s for a in anchors], float))
        self.asg = np.array([a.sigma for a in anchors], float)
        # one-sided rows on log H: (bound, width, +1: H <= bound, -1... ) as "excess above"
        ub = [(math.log(r.target), r.sigma) for r in one_sided]
        self.ub_c = np.array([c for c, _ in ub], float)
        self.ub_s = np.array([s for _, s in ub], float)
        self.ub_sign = np.array([-1.0] + [1.0] * (len(ub) - 1))
        # constant parts of resid and jac, each the same numbers they would compute per call
        self._ub_mul = np.where(self.ub_sign < 0, -1.0, 1.0)
        self._over_jac = self._ub_mul / self.ub_s  # the active one-sided rows' d/d log H
        nb, nl, na = len(b), len(lin), len(anchors)
        self._rows = (nb, nb + nl, nb + nl + na, nb + nl + na + len(ub))
        self._lin_jac = np.zeros((nl, 3))
        self._lin_jac[np.arange(nl), self.lin_i] = 1.0 / self.lin_s

    def resid(self, x: np.ndarray) -> np.ndarray:
        """The residual vector at ``x`` (module docstring's rows, in this order)."""
        u = np.minimum(np.maximum(x, -60.0), 10.0)  # np.clip's numbers, without its wrapper
        h, d0, d1 = np.exp(u)
        data = (np.log(overlap(h, d0 + d1 * self.b)) - self.lt) * self.w
        lin = (u[self.lin_i] - self.lin_c) / self.lin_s
        over = np.maximum(0.0, u[0] - self.ub_c) * self._ub_mul / self.ub_s
        anchor = (np.log(d0 + d1 * self.ab) - self.ad) / self.asg  # empty without anchors
        return np.concatenate([data, lin, anchor, over])

    def jac(self, x: np.ndarray) -> np.ndarray:
        """The Jacobian of :meth:`resid` (rows x 3), zero in a column whose ``x`` is clipped."""
        u = np.minimum(np.maximum(x, -60.0), 10.0)
        h, d0, d1 = np.exp(u)
        d = d0 + d1 * self.b
        m = np.maximum(np.maximum(h, d), 1e-300)
        hp, dp = (h / m) ** SMOOTH_P, (d / m) ** SMOOTH_P
        both = hp + dp
        sd = dp / both
        n_data, n_lin, n_anchor, n = self._rows
        out = np.empty((n, 3))
        out[:n_data, 0] = hp / both * self.w
        out[:n_data, 1] = sd * d0 / d * self.w
        out[:n_data, 2] = sd * d1 * self.b / d * self.w
        out[n_data:n_lin] = self._lin_jac
        da = d0 + d1 * self.ab  # the anchors' rows: none without anchors
        out[n_lin:n_anchor, 0] = 0.0
        out[n_lin:n_anchor, 1] = d0 / da / self.asg
        out[n_lin:n_anchor, 2] = d1 * self.ab / da / self.asg
        out[n_anchor:, 0] = np.where(u[0] > self.ub_c, self._over_jac, 0.0)
        out[n_anchor:, 1:] = 0.0
        # a clipped x's column is zero (x 1.0 elsewhere changes no number)
        out *= ((x >= -60.0) & (x <= 10.0)).astype(float)[None, :]
        return out

    def key(self, x0: np.ndarray) -> str:
        """A digest of every number the fit from ``x0`` reads (its rows' data, priors,
        anchors and bounds, and the start): equal problems, equal solutions."""
        return "series " + lsq.digest(self.b, self.lt, self.w, self.lin_i, self.lin_c,
                                      self.lin_s, self.ab, self.ad, self.asg, self.ub_c,
                                      self.ub_s, self.ub_sign, x0)


def fit_series(points: Sequence[Point], prior: DevicePrior | None) -> SeriesFit:
    """Fit ``H``, ``d0``, ``d1`` to the points of one series.

    Args:
        points: un-instrumented points of one series (:func:`group_series`), at least one.
        prior: the device prior, or None (then at least 2 distinct batch sizes are needed).

    Raises:
        ValueError: no points, or one batch size and no prior.
    """
    if not points:
        raise ValueError("fit_series needs at least one point")
    prior = prior or NO_PRIOR
    b = np.array([p.per_device_batch for p in points], float)
    t = np.array([p.step_time_s for p in points], float)
    w = 1.0 / np.array([_sigma(p) for p in points])
    hosts = host_measurements(points)
    if prior.d1 is None and not prior.anchors and len(set(b.tolist())) < 2 and not hosts:
        raise ValueError("one batch size and no device prior: the host and device parts "
                         "cannot be told apart; measure another batch size (dlperf run ... -b N)")
    tmin = float(t.min())
    anchors = prior.anchors
    if prior.d1 or anchors:
        d1_0 = prior.d1 or float(np.median([a.device_s / a.batch for a in anchors]))
        d0_0 = tmin * 0.05
    else:
        i0, i1 = int(np.argmin(b)), int(np.argmax(b))
        slope = (t[i1] - t[i0]) / (b[i1] - b[i0]) if b[i1] > b[i0] else 0.0  # repeats of one B
        d1_0 = max(slope, tmin * 1e-4 / b.max())
        d0_0 = max(t[i0] - d1_0 * b[i0], tmin * 0.05)
    x0 = np.log([tmin * 0.9, d0_0, d1_0])
    fixed_prior = (prior.d0 if prior.d0 and prior.d0 > 0
                   and len(set(b.tolist())) <= FIXED_PRIOR_MAX_BATCHES else None)
    problem = _SeriesProblem(b, t, w, prior, fixed_prior, hosts, tmin)
    x = _solved(problem, x0)
    h, d0, d1 = (float(v) for v in np.exp(np.clip(np.array(x), -60.0, 10.0)))
    fit_res = np.log(overlap(h, d0 + d1 * b)) - np.log(t)
    ids = tuple(dict.fromkeys([*(f"{p.source}:{p.result_id}" for p in points),
                               *(a.result for a in anchors)]))
    label = prior.label + (f"; host prior {prior.host_label}" if prior.host_s else "")
    if hosts:
        label += f"; host dispatch measured at {len(hosts)} point(s)"
    return SeriesFit(h, d0, d1, tuple(int(v) for v in b), ids, label,
                     float(np.sqrt(np.mean(fit_res ** 2))),
                     _fit_rows(points, prior, fixed_prior, hosts, tmin))


#: The parameter of ``x = log(H, d0, d1)`` a two-sided prior row pulls (:func:`_prior_rows`).
_PARAM = {"H": 0, "d0": 1, "d1": 2}


def _prior_rows(prior: DevicePrior, fixed_prior: float | None,
                hosts: list[tuple[float, bool]], tmin: float
                ) -> tuple[list[FitRow], list[FitRow]]:
    """A series fit's rows besides its points and anchors, in :class:`_SeriesProblem`'s
    order: the two-sided priors on one parameter each (``d1`` and ``d0`` from the roofline,
    the host probes that waited on the device, ``H`` from elsewhere or pulled towards
    :data:`HOST_PULL_CENTER` x the smallest step ``tmin``), then the one-sided bounds on ``H``
    (the smallest step, the probes that never waited)."""
    two_sided = []
    if prior.d1:
        two_sided.append(FitRow("d1", prior.d1, prior.sigma, "=", prior.label.split(";")[0]))
    if fixed_prior:
        two_sided.append(FitRow("d0", fixed_prior, FIXED_PRIOR_SIGMA, "=",
                                "roofline fixed time"))
    two_sided += [FitRow("H", m, HOST_MEAS_SIGMA, "=", "host probe (waited on the device)")
                  for m, exact in hosts if exact]
    two_sided.append(FitRow("H", prior.host_s, prior.host_sigma, "=",
                            f"host prior {prior.host_label}") if prior.host_s else
                     FitRow("H", HOST_PULL_CENTER * tmin, HOST_PULL_SIGMA, "=",
                            f"pull to {HOST_PULL_CENTER:g} x the smallest step"))
    one_sided = [FitRow("H", tmin, HOST_PRIOR_SIGMA, "<=", "the smallest step")]
    one_sided += [FitRow("H", m, HOST_MEAS_SIGMA, "<=", "host probe (never waited: an upper "
                         "bound)") for m, exact in hosts if not exact]
    return two_sided, one_sided


def _fit_rows(points: Sequence[Point], prior: DevicePrior, fixed_prior: float | None,
              hosts: list[tuple[float, bool]], tmin: float) -> tuple[FitRow, ...]:
    """The rows :class:`_SeriesProblem` builds from the same inputs, in its order, as
    :class:`FitRow` s (what ``dlperf predict --explain`` prints): the points, the two-sided
    priors (:func:`_prior_rows`), the anchors, the one-sided bounds."""
    two_sided, one_sided = _prior_rows(prior, fixed_prior, hosts, tmin)
    rows = [FitRow(f"T(B={p.per_device_batch})", p.step_time_s, _sigma(p), "=",
                   f"{p.source}:{p.result_id}") for p in points]
    rows += two_sided
    rows += [FitRow(f"D(B={a.batch})", a.device_s, a.sigma, "=", a.source)
             for a in prior.anchors]
    return tuple(rows + one_sided)


#: Evaluations of the residuals one start of a series fit may use.
SERIES_MAX_NFEV = 300
#: Evaluations of the residuals a group fit may use.
GROUP_MAX_NFEV = 400
#: The least-squares solutions of the group fits this process made (:func:`fit_group`), by
#: problem (every row, weight, bound and the start): a calibration that withholds points
#: outside a group fits it on the same rows as one that withholds none.
GROUP_SOLVED: dict[str, np.ndarray] = {}


def _solved(problem: _SeriesProblem, x0: np.ndarray) -> lsq.Solution:
    """The solution ``log(H, d0, d1)`` of ``problem`` (kept by :func:`dlperf.perfmodel.lsq.
    solved`): the best (least cost; ties: the first) of three least-squares starts, ``x0``
    and ``x0`` with ``H`` x 0.3 or ``d0`` x 0.2 (:func:`dlperf.perfmodel.lsq.trf`, scipy's
    TRF)."""
    def solve() -> np.ndarray:
        starts = (x0, x0 + np.log([0.3, 1.0, 1.0]), x0 + np.log([1.0, 0.2, 1.0]))
        return min((lsq.trf(problem.resid, problem.jac, start, max_nfev=SERIES_MAX_NFEV)
                    for start in starts), key=lambda x_cost: x_cost[1])[0]  # ties: the first
    return lsq.solved(problem.key(x0), solve)


def fit_group(points: Sequence[Point], group: tuple[str, str, str, str],
              work_for: Callable[[Point], rl.Work], ceiling: rl.Ceiling,
              exclude: Callable[[Point], bool] = lambda p: False,
              device_groups: Iterable[tuple[str, str, str, str]] = (),
              kernels_for: Callable[[Point], float | None] = lambda p: None,
              fit_own: Callable[[Sequence[Point], DevicePrior | None], SeriesFit] = fit_series
              ) -> rl.Efficiency:
    """Fit ``e_F``, ``e_Y`` (and ``t_k``) of one group jointly with one host time per series.

    The device time of a point is :func:`dlperf.perfmodel.roofline.device_time_s` with its
    kernel count; ``t_k`` is fitted (within :data:`KERNEL_S_BOUNDS`) when some point has a
    count, else it is 0 and the fit is the roofline alone.

    Args:
        points: all stored points; those of ``group`` on one device that ``exclude`` does not
            reject are used (steps of un-instrumented runs; device busy times of traced runs).
        group: ``(framework, mode, precision, device)``.
        work_for: the work model of a point's (model, framework, precision).
        ceiling: the group's ceilings.
        exclude: points to leave out (a held-out model, a held-out batch size).
        device_groups: other groups whose points run the same device kernels (a compile mode
            that replays CUDA graphs runs its base mode's kernels): they calibrate ``e_F``,
            ``e_Y`` with a host time of their own per series, and are not in the result's
            ``hosts``.
        kernels_for: ``K``, device kernels per step of a point (None: not counted, no kernel
            term at that point).
        fit_own: how a series is fitted on its own points and its configuration's traced
            busy times, to identify its own host time (:func:`fit_series`); a
            calibration passes its memoised fit (a series and its traced anchors give the same
            fit whatever else the group holds, so the fits of a group without one model and
            without another share it).

    Raises:
        ValueError: no usable point in the group.
    """
    from scipy.optimize import least_squares

    groups = {group, *device_groups}
    use = [p for p in points if p.group in groups and p.world_size == 1 and not exclude(p)]
    steps = [p for p in use if not p.instrumented]
    traced = [p for p in use if p.busy_s]
    if not steps and not traced:
        raise ValueError(f"no stored point of {'/'.join(group)} to fit its roofline on")
    series = list(group_series(steps).values())
    # (F/P, Y/W, K, measured, series index or -1 for a busy time, weight)
    rows = [(*_terms(p, work_for, ceiling, kernels_for), p.step_time_s, i, 1.0 / _sigma(p))
            for i, s in enumerate(series) for p in s]
    rows += [(*_terms(p, work_for, ceiling, kernels_for), p.busy_s or 0.0, -1,
              1.0 / TRACE_SIGMA) for p in traced]
    a = np.array(rows, float)
    fl, by, kn, meas = a[:, 0], a[:, 1], a[:, 2], a[:, 3]
    si, wt = a[:, 4].astype(int), a[:, 5]
    # one vote per model: a model's rows share a total weight (their squared weights sum to
    # one model's), so that the models measured at many batch sizes and in many files
    # (resnet50) do not set the efficiencies that a model without measurements is predicted
    # with. Chosen on the leave-one-model-out back-test of benchmarks/results/h200 (+h200x2):
    # MdAPE 21.20% per point, 21.12% per model; JAX fcn5 (whose efficiencies came from the
    # conv nets' many points) 114% -> 48%.
    row_models = [p.model for s in series for p in s] + [p.model for p in traced]
    per_model = Counter(row_models)
    wt = wt / np.sqrt(np.array([per_model[m] for m in row_models], float))
    tmins = np.array([min(p.step_time_s for p in s) for s in series], float)
    is_step = si >= 0
    fit_k = bool((kn > 0).any())
    n_s = len(series)
    k_lo, k_hi = np.log(KERNEL_S_BOUNDS)
    f_hi = math.log(special.flops_efficiency_cap(group[2]))
    # the parameters, (start, lower, upper bound) by block: log e_F and log e_Y, log t_k where
    # a point has a kernel count, then one log H per series
    blocks: list[tuple[Any, Any, Any]] = [(np.log([0.5, 0.5]), [-7.0, -7.0], [f_hi, 2.0])]
    if fit_k:
        blocks.append(([np.log(KERNEL_S_START)], [k_lo], [k_hi]))
    n0 = sum(len(b[0]) for b in blocks)
    blocks.append((np.log(tmins * 0.5), np.full(n_s, -20.0), np.full(n_s, 3.0)))
    x0, lo, hi = (np.concatenate(c) for c in zip(*blocks))

    def resid(x: np.ndarray) -> np.ndarray:
        ef, ey = np.exp(x[:2])
        d = fl / ef + by / ey + (kn * math.exp(x[2]) if fit_k else 0.0)
        pred = d.copy()  # the steps overlap their series' H (none: nothing to change)
        pred[is_step] = overlap(np.exp(x[n0:])[si[is_step]], d[is_step])
        r = (np.log(pred) - np.log(meas)) * wt
        hp = np.minimum(0.0, np.log(tmins) - x[n0:]) / HOST_PRIOR_SIGMA
        return np.concatenate([r, hp])

    from scipy.sparse import lil_matrix

    # each host time touches only its own series' rows: a sparse Jacobian keeps the finite
    # differences to a few evaluations per step however many series there are
    sparsity = lil_matrix((len(meas) + n_s, n0 + n_s), dtype=int)
    sparsity[: len(meas), :n0] = 1
    step_rows = np.flatnonzero(is_step)
    sparsity[step_rows, n0 + si[step_rows]] = 1
    sparsity[len(meas) + np.arange(n_s), n0 + np.arange(n_s)] = 1
    # the same rows, weights and bounds: the same solution
    x = once(GROUP_SOLVED, lsq.digest(a, wt, tmins, x0, lo, hi,
                                      np.array([n0, n_s, GROUP_MAX_NFEV])),
             lambda: least_squares(resid, x0, bounds=(lo, hi), method="trf", x_scale="jac",
                                   max_nfev=GROUP_MAX_NFEV, jac_sparsity=sparsity).x)
    ef, ey = (float(v) for v in np.exp(x[:2]))
    tk = float(np.exp(x[2])) if fit_k else 0.0
    res = resid(x)[: len(meas)] / wt
    models = tuple(sorted({p.model for p in steps} | {p.model for p in traced}))
    k_models = tuple(sorted({m for m, k in zip(row_models, kn) if k > 0}))
    ids = tuple(f"{p.source}:{p.result_id}" for s in series for p in s) + tuple(
        f"{p.source}:{p.result_id}" for p in traced)
    hosts = []
    for i, s in enumerate(series):
        p0 = s[0]
        if p0.group != group:
            continue
        f0, y0, k0 = _terms(p0, work_for, ceiling, kernels_for)
        d_small = f0 / ef + y0 / ey + k0 * tk
        h = float(np.exp(x[n0 + i]))
        n_b = len({p.batch_size for p in s})
        exact = [m for m, ok in host_measurements(s) if ok]
        measured = 2 * len(exact) > len(s)
        if n_b >= IDENTIFY_MIN_BATCHES or measured:
            # the series shows its own host time (its batch sizes, or the host probe's two-sided
            # measurements): fitted on its points alone, no roofline, with the configuration's
            # traced device busy times (a flat series is host-bound only if its device is not
            # as slow: the trace tells)
            own = fit_own(s, _busy_prior(s[0], traced))
            hosts.append(rl.SeriesHost(p0.model, p0.data, p0.layout or "auto", own.host_s,
                                       own.bound(min(own.batch_sizes)) == "host", n_b,
                                       measured))
        else:
            hosts.append(rl.SeriesHost(p0.model, p0.data, p0.layout or "auto", h,
                                       h >= d_small, n_b))
    return rl.Efficiency(group, ef, ey, models, ids, float(np.sqrt(np.mean(res ** 2))),
                         tuple(hosts), tk, k_models)


def _terms(p: Point, work_for: Callable[[Point], rl.Work], ceiling: rl.Ceiling,
           kernels_for: Callable[[Point], float | None]) -> tuple[float, float, float]:
    """``(F / P, Y / W, K)`` of a point: its roofline terms at efficiency 1 (s) and its kernel
    count (0 where not counted)."""
    wk = work_for(p)
    b = p.per_device_batch
    return (wk.flops(b) / ceiling.flops_per_s, wk.bytes(b) / ceiling.bandwidth_bytes_per_s,
            float(kernels_for(p) or 0.0))


def _busy_prior(p0: Point, traced: Sequence[Point]) -> DevicePrior | None:
    """The traced device busy times of ``p0``'s configuration (any results file: device time
    does not depend on the host) as a prior of its own series fit; None when there are none."""
    key = series_key(p0)[:-1]
    anchors = tuple(Anchor(p.per_device_batch, p.busy_s, TRACE_SIGMA,
                           f"{p.source}:{p.result_id} (trace busy)")
                    for p in traced if p.busy_s and series_key(p)[:-1] == key)
    return DevicePrior(None, 1.0, anchors, f"{len(anchors)} traced busy time(s)") if anchors \
        else None


def device_prior(work: rl.Work | None, ceiling: rl.Ceiling | None,
                 eff: rl.Efficiency | None, anchors: Sequence[Anchor] = (),
                 host: tuple[float, str] | None = None,
                 host_sigma: float = HOST_TRANSFER_SIGMA,
                 kernels: float | None = None,
                 d1_scale: tuple[float, str] | None = None) -> DevicePrior | None:
    """The prior of one configuration: its group's roofline (when ``eff`` is given), its
    measured anchors and a host time from elsewhere (``(s, where from)``, log-width
    ``host_sigma``: :data:`HOST_TRANSFER_SIGMA` for one carried over from the same model,
    :data:`HOST_ESTIMATE_SIGMA` for one estimated from other models); None when there is none
    of these. ``d1_scale``: ``(factor, where from)``, the model's own departure from the
    roofline's ``d1`` measured in its other groups (``Calibration.sibling_scale``): the ``d1``
    prior is the roofline's times ``factor``, log-width :data:`SIBLING_SIGMA`."""
    hs, hl = host if host else (None, "")
    if eff is None or work is None or ceiling is None:
        if not anchors and not hs:
            return None
        return DevicePrior(None, 1.0, tuple(anchors), f"{len(anchors)} measured device time(s)",
                           hs, host_sigma, hl)
    d1 = (work.flops_per_sample / (eff.e_flops * ceiling.flops_per_s)
          + work.bytes_per_sample / (eff.e_bytes * ceiling.bandwidth_bytes_per_s))
    d0 = (work.bytes_fixed / (eff.e_bytes * ceiling.bandwidth_bytes_per_s)
          + (kernels or 0.0) * eff.kernel_s)
    sigma = PRIOR_SIGMA
    label = f"roofline {eff.describe()}"
    if d1_scale is not None:  # the label's first part names the d1 prior's target (_prior_rows)
        d1, sigma = d1 * d1_scale[0], SIBLING_SIGMA
        label += f" d1 x {d1_scale[0]:.3g} ({d1_scale[1]})"
    label += f"; {len(anchors)} measured device time(s)" if anchors else ""
    return DevicePrior(d1, sigma, tuple(anchors), label, hs, host_sigma, hl, d0 or None)
