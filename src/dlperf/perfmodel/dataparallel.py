"""Data parallelism: a one-device step plus DDP's own overhead plus the exposed all-reduce.

Per device the step is the one-device model's host time ``H`` and device time ``D`` at the
per-device batch (:mod:`dlperf.perfmodel.onedevice`), changed by data parallelism in three ways:

* **DDP's own work**, measured as two terms fitted on the stored 1-device/N-device pairs
  (:func:`fit_ddp_overhead`), both proportional to the one-device host time ``H``, which stands
  in for the number of layers (a step's dispatch time grows with the kernels it launches, and
  DDP's work grows with the gradient tensors, one or two per layer): ``rho``, host work added
  (autograd hooks, bucket bookkeeping, one copy launch per gradient into and out of its
  bucket), and ``kappa``, device time added (those copy kernels, a few microseconds each
  however small). ``kappa`` per unit of ``D`` instead fitted worse on its largest misses' cause,
  device-bound fp32 steps (leave-one-configuration-out MdAPE 8.3% against 7.5%);
* **the all-reduce** of the gradients, overlapped with backward by WFBP (Shi & Chu 2017;
  :func:`dlperf.perfmodel.comm.wfbp_exposed_s`): only what is left after backward ends, the
  exposed communication ``X``, adds to the device time;

so that, with ``overlap`` the p-norm of :mod:`dlperf.perfmodel.onedevice`::

    T_N = overlap(H (1 + rho), D + kappa H + X)

The buckets of the recursion are, where a stored traced DDP run of the same model, framework
and precision recorded them (``dist.buckets_timeline``, :func:`recorded_profile`), that run's
buckets in reduction order with their recorded bytes, each ready at the recorded fraction of
that run's backward span (from its first to its last non-communication backward op), so that
they transfer to another batch or device time. Otherwise they are those of PyTorch DDP's
default policy with gradients ready at a uniform rate over backward and 4 bytes per parameter
(float32 gradients: dlperf keeps float32 parameters under bf16 autocast). Either way backward
takes 2/3 of ``D`` (twice the forward FLOPs, Kaplan et al. 2020). Every prediction lists what
it assumed (:func:`assumptions`) and names the stored record it took the buckets from.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from dlperf.perfmodel import comm, lsq
from dlperf.perfmodel import equations as eq
from dlperf.perfmodel.calibrate import Calibration, Config
from dlperf.perfmodel.equations import BACKWARD_SHARE as BACKWARD_SHARE
from dlperf.perfmodel.equations import DEFAULT_BUCKET_CAP_MB as DEFAULT_BUCKET_CAP_MB
from dlperf.perfmodel.equations import GRAD_BYTES_PER_PARAM as GRAD_BYTES_PER_PARAM
from dlperf.perfmodel.records import Point, RankBuckets, Records

ASSUMPTIONS = (
    "gradient buckets: PyTorch DDP defaults (1 MiB first, then bucket_cap_mb), gradients ready "
    "at a uniform rate over backward (no recorded bucket ready times)",
    f"backward = {BACKWARD_SHARE:.3g} of the device time (Kaplan et al. 2020: 2x forward)",
    f"gradients: {GRAD_BYTES_PER_PARAM} bytes per parameter (float32)",
)


@dataclass(frozen=True)
class BucketProfile:
    """Gradient buckets as a stored DDP run recorded them, in reduction order: bytes and the
    ready time as a fraction of that run's backward span (0: backward's first op, 1: its last;
    the mean over the run's ranks), and the record they came from (``source:id``, its ranks and
    per-device batch)."""

    sizes_bytes: tuple[float, ...]
    ready_fraction: tuple[float, ...]
    record: str
    world_size: int
    per_device_batch: int

    def buckets(self, backward_s: float) -> list[comm.Bucket]:
        """The buckets of a backward of ``backward_s`` seconds (ready = fraction x span)."""
        return [comm.Bucket(m, f * backward_s) for m, f in zip(self.sizes_bytes,
                                                               self.ready_fraction)]


def ready_fractions(rank: RankBuckets) -> list[float] | None:
    """Each bucket's ready time as a fraction of the rank's backward span, clipped to [0, 1]
    (DDP hands the last bucket over just after backward's last op); None without the backward
    start, with a ready time missing, or with an empty span."""
    t0, t1 = rank.t_b_start_s, rank.t_b_end_s
    if t0 is None or t1 <= t0 or any(b.ready_s is None for b in rank.buckets):
        return None
    return [min(1.0, max(0.0, ((b.ready_s or 0.0) - t0) / (t1 - t0))) for b in rank.buckets]


def profile_of(p: Point) -> BucketProfile | None:
    """The :class:`BucketProfile` of a stored point's recorded buckets, or None when no rank's
    record gives ready fractions or the ranks' bucket layouts differ."""
    fr = [(r, f) for r in p.buckets for f in [ready_fractions(r)] if f is not None]
    if not fr or len({tuple(b.size_bytes for b in r.buckets) for r, _ in fr}) != 1:
        return None
    sizes = tuple(b.size_bytes for b in fr[0][0].buckets)
    mean = tuple(float(np.mean([f[i] for _, f in fr])) for i in range(len(sizes)))
    return BucketProfile(sizes, mean, f"{p.source}:{p.result_id}", p.world_size,
                         p.per_device_batch)


def recorded_profile(points: Sequence[Point], target: Point | Config, world: int,
                     per_device_batch: int, withheld: Sequence[Point] = ()
                     ) -> BucketProfile | None:
    """The recorded buckets a prediction of ``target`` on ``world`` devices uses: from a stored
    point of the same model, framework and precision with a usable record (:func:`profile_of`),
    with DDP's default options; never the point predicted: not in ``withheld`` and not at the
    target's own mode, device, rank count and per-device batch (in any file, whatever its
    other selectors); preferring the same mode, then device, then rank count, then the
    nearest per-device batch (log ratio). None when there is none (the uniform-bucket
    assumptions then hold)."""
    key = (target.model, target.framework, target.precision)
    out = {(w.source, w.result_id) for w in withheld}
    itself = (target.mode, target.device, world, per_device_batch)
    cands = [(q, pr) for q in points if q.buckets and not q.variant
             and (q.source, q.result_id) not in out
             and (q.mode, q.device, q.world_size, q.per_device_batch) != itself
             and (q.model, q.framework, q.precision) == key
             for pr in [profile_of(q)] if pr is not None]
    return min(cands, default=(None, None),
               key=lambda c: (c[0].mode != target.mode, c[0].device != target.device,
                              c[0].world_size != world,
                              abs(np.log(c[0].per_device_batch / per_device_batch)),
                              c[1].record))[1]


def assumptions(profile: BucketProfile | None) -> list[str]:
    """What a data-parallel prediction assumed: :data:`ASSUMPTIONS` without a recorded
    profile; with one, the record it read and the backward share."""
    if profile is None:
        return list(ASSUMPTIONS)
    return [f"gradient buckets: recorded order, sizes and ready times (as a fraction of "
            f"backward) of {profile.record} ({profile.world_size} ranks, per-device batch "
            f"{profile.per_device_batch}, {len(profile.sizes_bytes)} buckets, "
            f"{sum(profile.sizes_bytes) / 1e6:.4g} MB)", ASSUMPTIONS[1]]


@dataclass(frozen=True)
class DDPOverhead:
    """DDP's own overhead: ``rho`` (host time added per unit of host time) and ``kappa`` (device
    time added per unit of host time), the pairs (``source:id`` of the N-device results) that
    chose them; ``rms_log`` their fit's RMS."""

    rho: float
    kappa: float
    pairs: tuple[str, ...]
    rms_log: float


@dataclass(frozen=True)
class Pair:
    """A stored N-device point and the one-device model of its per-device work.

    ``base`` is the one-device point at the per-device batch in the same results file when one
    was measured (weak scaling), else None (the one-device step is then predicted).
    ``buckets``: the record (``source:id``) whose buckets the exposed all-reduce was computed
    over, None for DDP's default buckets (:func:`recorded_profile`).
    """

    dp: Point
    base: Point | None
    cfg: Config
    host_s: float
    device_s: float
    exposed_s: float
    comm_s: float
    one_device_s: float
    buckets: str | None = None


def gradient_bytes(params: int | None) -> float:
    """Bytes all-reduced per step: :data:`GRAD_BYTES_PER_PARAM` per parameter."""
    return float(params or 0) * GRAD_BYTES_PER_PARAM


def exposed_comm(params: int | None, device_s: float, comm_s: Callable[[float], float],
                 bucket_cap_mb: float = DEFAULT_BUCKET_CAP_MB,
                 profile: BucketProfile | None = None) -> tuple[float, float]:
    """``(exposed, total)`` all-reduce time (s) of one step by the WFBP recursion over the
    recorded buckets of ``profile``, else over :func:`comm.uniform_buckets` of the gradient
    bytes; backward is :data:`BACKWARD_SHARE` of ``device_s``."""
    tb = BACKWARD_SHARE * device_s
    return comm.wfbp_exposed_s(buckets_of(params, device_s, bucket_cap_mb, profile), comm_s, tb)


def buckets_of(params: int | None, device_s: float,
               bucket_cap_mb: float = DEFAULT_BUCKET_CAP_MB,
               profile: BucketProfile | None = None) -> list:
    """The gradient buckets :func:`exposed_comm` runs the WFBP recursion over (sizes in
    bytes, ready times in s from backward's start): ``profile``'s recorded ones, else
    :func:`comm.uniform_buckets` of the gradient bytes over backward (``BACKWARD_SHARE`` of
    ``device_s``); ``[]`` without gradients or backward."""
    tb = BACKWARD_SHARE * device_s
    if tb <= 0:
        return []
    if profile is not None:
        return list(profile.buckets(tb))
    # no bucket where there are no gradient bytes
    return comm.uniform_buckets(gradient_bytes(params), tb, bucket_cap_mb)


def dp_step_s(host_s: float, device_s: float, exposed_s: float, ddp: DDPOverhead) -> float:
    """``overlap(H (1 + rho), D + kappa H + X)`` (s) (:func:`equations.dp_step_s`)."""
    return eq.dp_step_s(host_s, device_s, exposed_s, ddp.rho, ddp.kappa)


def pairs_of(cal: Calibration, comm_for: Callable[[int], Callable[[float], float]]
             ) -> list[Pair]:
    """Every stored N-device ``ok`` point of one node on synthetic data with its one-device
    model; its exposed all-reduce over the buckets another stored run recorded
    (:func:`recorded_profile`, never the point's own record) where there is one.

    Args:
        cal: the calibration (its points: the N-device points and their one-device series).
        comm_for: rank count -> all-reduce time of a message of so many bytes (s).
    """
    out = []
    for p in cal.points:
        if p.world_size < 2 or p.nnodes != 1 or p.instrumented or p.data != "synthetic":
            continue  # real data adds an input pipeline, which these terms do not model
        cfg = Config.of(p)
        base = next((q for q in reversed(cal.points) if q.source == p.source and cfg.matches(q)
                     and q.per_device_batch == p.per_device_batch and not q.instrumented), None)
        try:
            fit, _ = cal.fit(cfg, p.source if any(cfg.matches(q) and q.source == p.source
                                                  for q in cal.points) else None)
        except (LookupError, ValueError):
            continue
        b = p.per_device_batch
        h, d = fit.host_s, fit.device_s(b)
        one = base.step_time_s if base else fit.step_time_s(b)
        # the fit's own miss at a measured base is carried as a factor (the pair is about DDP)
        prof = recorded_profile(cal.records.points, p, p.world_size, b, withheld=[p])
        x, total = exposed_comm(p.params, d, comm_for(p.world_size), profile=prof)
        out.append(Pair(p, base, cfg, h, d, x, total, one,
                        prof.record if prof else None))
    return out


def predict_pair(pair: Pair, ddp: DDPOverhead) -> float:
    """The N-device step of a pair (s): the DDP model relative to the one-device step, i.e.
    ``T_1 * dp_step(H, D, X) / overlap(H, D)`` so the one-device model's own miss cancels."""
    ratio = dp_step_s(pair.host_s, pair.device_s, pair.exposed_s, ddp) / eq.step_s(
        pair.host_s, pair.device_s)
    return pair.one_device_s * ratio


def fit_ddp_overhead(pairs: Sequence[Pair]) -> DDPOverhead:
    """Fit ``rho`` and ``kappa`` on relative error over ``pairs`` (both kept in [0, 5]).

    Raises:
        ValueError: no pairs.
    """
    if not pairs:
        raise ValueError("no stored N-device point with its one-device series: measure "
                         "`dlperf run --nproc 2` and the same point on one device")

    def resid(x: np.ndarray) -> np.ndarray:
        ddp = DDPOverhead(float(x[0]), float(x[1]), (), 0.0)
        return np.array([np.log(predict_pair(pr, ddp) / pr.dp.step_time_s) for pr in pairs])

    def solve() -> np.ndarray:
        from scipy.optimize import least_squares

        return least_squares(resid, [0.2, 0.02], bounds=([0.0, 0.0], [5.0, 5.0])).x

    # the pairs' numbers are the whole problem (predict_pair): solved once (lsq.solved)
    key = "ddp " + lsq.digest(np.array([[pr.host_s, pr.device_s, pr.exposed_s,
                                         pr.one_device_s, pr.dp.step_time_s] for pr in pairs]))
    x = np.array(lsq.solved(key, solve), float)
    res = resid(x)
    return DDPOverhead(float(x[0]), float(x[1]),
                       tuple(f"{pr.dp.source}:{pr.dp.result_id}" for pr in pairs),
                       float(np.sqrt(np.mean(res ** 2))))


def comm_for_records(records: Records) -> Callable[[int], Callable[[float], float]]:
    """Rank count -> all-reduce time function from the stored sweep (nvlink4 ring if none)."""
    @functools.cache
    def comm_for(n: int) -> Callable[[float], float]:
        try:
            return comm.fit_allreduce(records.collectives, n).time_s
        except ValueError:
            return functools.partial(comm.ring_allreduce_s, p=n, link=comm.LINKS["nvlink4"])
    return comm_for
