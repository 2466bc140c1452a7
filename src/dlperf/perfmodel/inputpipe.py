"""The input pipeline's part of a step: Shi & Chu's prefetch overlap with the measured t_io.

Shi & Chu 2017 ("Performance modeling and evaluation of distributed deep learning frameworks
on GPUs", sec. III-A) write one iteration with I/O prefetching as

    t_iter = max(t_io, t_c)              (a loader thread prefetches the next batch)
    t_iter = t_io + t_c                  (no prefetching: the training thread loads it)

with ``t_c`` the rest of the iteration (copy, forward, backward, update). dlperf's loaders:
``loader_workers = 0`` loads on the training thread (the serial form); ``w >= 1`` workers
prefetch, and ``t_io,w(B)`` is the time the *pool* needs to produce one batch of ``B``:

    w = 0:   t(B) = t_io(B) + t_c(B)
    w >= 1:  t(B) = max(t_c(B), t_io,w(B))

``t`` is the *mean* iteration (its inverse is the throughput); a pool slower than the step
makes most steps find a prefetched batch and a few wait long (the stored median step can
then be the compute step while the mean is the pool's rate: resnet50 torch b=128, 4 workers,
median 31 ms, mean 110 ms), so the model is judged against the mean.

**What is measured** (a stored real-data point of the same model, framework, mode, precision,
device, data set and loader implementation, :class:`Rung`):

* ``w = 0``: ``t_io`` = the mean wait for the batch (``data_wait.mean_s``), or the breakdown's
  ``t_io`` where a ``--breakdown`` run recorded it;
* ``w >= 1`` and *input-bound* (waits >= :data:`INPUT_BOUND_SHARE` of the measured time, the
  threshold ``dlperf run`` flags with): every step waits for the pool, so the pool's time per
  batch is the mean step;
* ``w >= 1`` and not input-bound: the pool kept up; its time is only bounded by the step
  (no value; at that worker count the input is taken as hidden).

**Assumptions** (each printed with a prediction that uses it):

* production time scales linearly in the batch (per-sample decode and augmentation cost);
* a worker count that was not measured takes the nearest measured one (with a value; a tie
  goes to the larger count) scaled ``w_measured / w`` (ideal parallel loaders; from ``w = 0``
  the serial ``t_io`` is one worker's time per batch, and back);
* nothing real stored for the configuration: 0 input time (said so), as for synthetic data.

Pure functions over :class:`dlperf.perfmodel.records.Point`; no framework imported.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from dlperf.perfmodel import equations as eq
from dlperf.perfmodel import model as pm
from dlperf.perfmodel.calibrate import Calibration, Config
from dlperf.perfmodel.records import Point

#: The back-test category of a prediction whose input is modelled from a worker ladder
#: (:mod:`dlperf.validation.inputcheck`), and so the residuals its interval comes from.
INPUT_CATEGORY = "input: leave-one-worker-count-out"

#: Share of the measured time spent waiting for input at or above which the loader bounds the
#: step (``dlperf run``'s default ``input_bound_share``, stored in each record's ``data_wait``).
INPUT_BOUND_SHARE = 0.1

#: Shi & Chu 2017's I/O overlap, cited in every provenance line this module writes.
SOURCE = ("Shi & Chu 2017, sec. III-A: t = t_io + t_c without prefetching, max(t_c, t_io) "
          "with it")


@dataclass(frozen=True)
class Rung:
    """One stored real-data measurement of a loader-worker ladder (times in s, per iteration).

    Attributes:
        workers: loader workers (0: loading on the training thread).
        batch: the per-device batch.
        step_mean_s: mean iteration (measured time / measured iterations).
        step_median_s: the stored median iteration.
        wait_mean_s: mean wait for the next batch.
        t_io_s: the breakdown's training-thread ``t_io`` where recorded, else None.
        tag: ``file:id`` of the result.
    """

    workers: int
    batch: int
    step_mean_s: float
    step_median_s: float
    wait_mean_s: float
    t_io_s: float | None
    tag: str

    @property
    def input_bound(self) -> bool:
        """The waits are >= :data:`INPUT_BOUND_SHARE` of the measured time."""
        return self.wait_mean_s >= INPUT_BOUND_SHARE * self.step_mean_s

    @property
    def production_s(self) -> float | None:
        """The loader's time per batch of :attr:`batch` at :attr:`workers` (s): ``w = 0`` the
        serial ``t_io`` (the breakdown's, else the mean wait); ``w >= 1`` the mean step when
        input-bound (the pool sets the rate); None when the pool kept up (only bounded)."""
        if self.workers == 0:
            return self.t_io_s if self.t_io_s is not None else self.wait_mean_s
        return self.step_mean_s if self.input_bound else None

    @property
    def share(self) -> float:
        """Mean wait / mean step (the stored data-wait share)."""
        return self.wait_mean_s / self.step_mean_s


def ladder_key(p: Point) -> tuple[Config, str | None]:
    """What a ladder shares: the configuration but its worker count (model, framework, mode,
    precision, device, data set, layout, ...) and the loader's implementation (threads and
    processes of one framework are not one ladder)."""
    return Config.of(p).with_(loader_workers=None), p.loader_impl


def compute_config(cfg: Config) -> Config:
    """The same configuration on synthetic data on the device: its step is ``t_c``."""
    return cfg.with_(data="synthetic", loader_workers=None)


def rung_of(p: Point) -> Rung | None:
    """The :class:`Rung` of a one-device, un-instrumented real-data point with its loader's
    worker count, mean step and mean wait stored; else None."""
    if (p.data == "synthetic" or p.loader_workers is None or p.world_size != 1
            or p.instrumented or not p.step_time_mean_s or p.data_wait_mean_s is None):
        return None
    return Rung(int(p.loader_workers), p.per_device_batch, p.step_time_mean_s, p.step_time_s,
                p.data_wait_mean_s, p.t_io_s, f"{p.source}:{p.result_id}")


iteration_s = eq.input_iteration_s


@dataclass
class InputEstimate:
    """The input's part of one predicted iteration.

    Attributes:
        step_s: Shi & Chu's mean iteration with this input (s).
        input_s: ``step_s - compute_s``: the input time prefetching does not hide (s).
        t_io_s: the loader's time per batch at this worker count and batch (s); None when it
            is only known to be hidden, or nothing was stored.
        provenance: where ``t_io_s`` came from.
        calibrated_on: ``file:id`` of the stored point(s) used.
        assumptions: what was assumed (linear in the batch, 1/w scaling, nothing stored).
    """

    step_s: float
    input_s: float
    t_io_s: float | None
    provenance: str
    calibrated_on: list[str] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)


def _pick(rungs: Sequence[Rung], batch: int) -> Rung:
    return min(rungs, key=lambda r: (abs(r.batch - batch), -r.batch))


def _source(rungs: Sequence[Rung], workers: int) -> Rung | None:
    """The nearest measured worker count with a production time (a tie: the larger)."""
    known = [r for r in rungs if r.production_s is not None]
    return min(known, key=lambda r: (abs(r.workers - workers), -r.workers), default=None)


def estimate(rungs: Iterable[Rung], workers: int, batch: int, compute_s: float) -> InputEstimate:
    """The input's part of an iteration of ``batch`` with ``workers`` loader workers.

    Args:
        rungs: the stored measurements of the configuration's ladder (:func:`ladder_key`),
            the predicted point itself excluded by the caller.
        workers: loader workers of the prediction (0: the training thread loads).
        batch: per-device batch of the prediction.
        compute_s: ``t_c(batch)``, the iteration without input (s), e.g. the synthetic-data
            step of the same configuration.

    Raises:
        ValueError: a negative ``workers`` or ``compute_s``, or ``batch`` < 1.
    """
    if workers < 0 or compute_s < 0 or batch < 1:
        raise ValueError(f"workers >= 0, compute_s >= 0 and batch >= 1 needed (got {workers}, "
                         f"{compute_s}, {batch})")
    rungs = list(rungs)
    lin = f"loader time per batch taken linear in the batch (per-sample cost x {batch})"
    own = [r for r in rungs if r.workers == workers]
    if own and _pick(own, batch).production_s is None:
        r = _pick(own, batch)
        return InputEstimate(compute_s, 0.0, None,
                             f"measured: {workers} workers kept up at b={r.batch} "
                             f"(waits {r.share:.1%} of the time) [{r.tag}]", [r.tag],
                             [f"input hidden at {workers} workers: the stored pool kept up with "
                              f"a {r.step_mean_s * 1e3:.3g} ms step; its own time is not known"])
    src = _pick(own, batch) if own else _source(rungs, workers)
    if src is None:
        what = ("the stored worker counts all kept up (no time known)" if rungs else
                "no loader-worker measurement (data_wait) of this configuration stored")
        return InputEstimate(compute_s, 0.0, None, f"not recorded: {what}: 0", [],
                             [f"input time 0: {what}"])
    prod = float(src.production_s or 0.0) * batch / src.batch
    notes = [lin] if src.batch != batch else []
    how = f"measured at {workers} workers"
    if src.workers != workers:
        per_worker = prod * max(src.workers, 1)
        prod = per_worker / max(workers, 1)
        notes.append(f"{workers} workers: no stored measurement used (none stored, or only "
                     f"the predicted point's own, withheld): the nearest measured count "
                     f"({src.workers}) scaled {max(src.workers, 1)}/{max(workers, 1)} (ideal "
                     "parallel loaders; workers contending for the host are not modelled)")
        how = f"scaled from {src.workers} workers"
    step = iteration_s(compute_s, prod, workers)
    return InputEstimate(step, step - compute_s, prod,
                         f"{how}: t_io,w = {prod * 1e3:.3g} ms per batch of {batch} "
                         f"[{src.tag}]; {SOURCE}", [src.tag], notes)


def ladder_for(points: Iterable[Point], cfg: Config,
               withheld: Sequence[Point] = ()) -> tuple[list[Rung], list[str]]:
    """The stored rungs of ``cfg``'s ladder (any worker count), ``withheld`` left out, and a
    note when several loader implementations were stored (the one of the newest result, the
    last loaded, is used)."""
    key = cfg.with_(loader_workers=None)
    by: dict[str | None, list[tuple[Point, Rung]]] = {}
    for p in points:
        r = rung_of(p)
        if r is not None and p not in withheld and ladder_key(p)[0] == key:
            by.setdefault(p.loader_impl, []).append((p, r))
    if not by:
        return [], []
    # the predicted point's own implementation where it is stored, else one that measured the
    # asked worker count, else the newest: never two pipelines' rungs in one ladder
    own = [p.loader_impl for p in withheld if p.loader_impl in by]
    has_w = [i for i, prs in by.items() if any(p.loader_workers == cfg.loader_workers
                                              for p, _ in prs)]
    impls, why = next((c, w) for c, w in ((own, "the predicted point's own"),
                                          (has_w, "one that measured this worker count"),
                                          (list(by), "the last loaded")) if c)
    impl = impls[-1]
    notes = ([f"loader implementations {', '.join(map(str, by))} stored for this "
              f"configuration: {impl} is used ({why})"] if len(by) > 1 else [])
    return [r for _, r in by[impl]], notes


def compute_part(cal: Calibration, one: pm.OneDevice) -> tuple[pm.OneDevice, list[str]]:
    """``t_c``: the synthetic-data prediction of ``one``'s configuration at its batch (its
    series, else the analytic model); ``one`` itself (a real-data fit) when neither exists."""
    syn = compute_config(one.cfg)
    try:
        c = (pm.from_series(cal, syn, one.batch) if cal.series(syn)
             else pm.analytic(cal, syn, one.batch))
    except (LookupError, ValueError):
        return one, ["no synthetic-data step of this configuration: t_c from its real-data "
                     "points (their input included)"]
    prov = {**c.provenance, "t_c": f"the synthetic-data step of {syn.label()} ({c.how})"}
    return replace(c, cfg=one.cfg, provenance=prov), []
