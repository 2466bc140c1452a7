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

Recorded bucket order and ready times do not exist yet, so the buckets are those of PyTorch DDP's
default policy with gradients ready at a uniform rate over backward, backward taking 2/3 of ``D``
(twice the forward FLOPs, Kaplan et al. 2020), and gradients in float32 (4 bytes per parameter:
dlperf keeps float32 parameters under bf16 autocast): all three are assumptions, said so in
every prediction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from dlperf.perfmodel import comm
from dlperf.perfmodel import onedevice as od
from dlperf.perfmodel.calibrate import Calibration, Config
from dlperf.perfmodel.records import Point

#: Share of the device time that is backward (backward = 2 x forward FLOPs, Kaplan et al. 2020).
BACKWARD_SHARE = 2.0 / 3.0
#: Bytes per gradient element (float32 gradients of float32 parameters).
GRAD_BYTES_PER_PARAM = 4
#: DDP's default bucket size (MiB; PyTorch ``DistributedDataParallel(bucket_cap_mb=25)``).
DEFAULT_BUCKET_CAP_MB = 25.0

ASSUMPTIONS = (
    "gradient buckets: PyTorch DDP defaults (1 MiB first, then bucket_cap_mb), gradients ready "
    "at a uniform rate over backward (no recorded bucket ready times)",
    f"backward = {BACKWARD_SHARE:.3g} of the device time (Kaplan et al. 2020: 2x forward)",
    f"gradients: {GRAD_BYTES_PER_PARAM} bytes per parameter (float32)",
)


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
    """

    dp: Point
    base: Point | None
    cfg: Config
    host_s: float
    device_s: float
    exposed_s: float
    comm_s: float
    one_device_s: float


def gradient_bytes(params: int | None) -> float:
    """Bytes all-reduced per step: :data:`GRAD_BYTES_PER_PARAM` per parameter."""
    return float(params or 0) * GRAD_BYTES_PER_PARAM


def exposed_comm(params: int | None, device_s: float, comm_s: Callable[[float], float],
                 bucket_cap_mb: float = DEFAULT_BUCKET_CAP_MB) -> tuple[float, float]:
    """``(exposed, total)`` all-reduce time (s) of one step by the WFBP recursion."""
    tb = BACKWARD_SHARE * device_s
    g = gradient_bytes(params)
    if g <= 0 or tb <= 0:
        return 0.0, 0.0
    return comm.wfbp_exposed_s(comm.uniform_buckets(g, tb, bucket_cap_mb), comm_s, tb)


def dp_step_s(host_s: float, device_s: float, exposed_s: float, ddp: DDPOverhead | None) -> float:
    """``overlap(H (1 + rho), D + kappa H + X)`` (s); without ``ddp`` rho = kappa = 0."""
    rho, kappa = (ddp.rho, ddp.kappa) if ddp else (0.0, 0.0)
    return float(od.overlap(host_s * (1 + rho), device_s + kappa * host_s + exposed_s))


def pairs_of(cal: Calibration, comm_for: Callable[[int], Callable[[float], float]]
             ) -> list[Pair]:
    """Every stored N-device ``ok`` point of one node on synthetic data with its one-device
    model.

    Args:
        cal: the calibration (its points: the N-device points and their one-device series).
        comm_for: rank count -> all-reduce time of a message of so many bytes (s).
    """
    out = []
    for p in cal.points:
        if p.world_size < 2 or p.nnodes != 1 or p.instrumented or p.data != "synthetic":
            continue  # real data adds an input pipeline, which these terms do not model
        cfg = Config.of(p)
        bases = [q for q in cal.points if q.source == p.source and cfg.matches(q)
                 and q.per_device_batch == p.per_device_batch and not q.instrumented]
        try:
            fit, _ = cal.fit(cfg, p.source if any(cfg.matches(q) and q.source == p.source
                                                  for q in cal.points) else None)
        except (LookupError, ValueError):
            continue
        b = p.per_device_batch
        h, d = fit.host_s, fit.device_s(b)
        one = bases[-1].step_time_s if bases else fit.step_time_s(b)
        # the fit's own miss at a measured base is carried as a factor (the pair is about DDP)
        x, total = exposed_comm(p.params, d, comm_for(p.world_size))
        out.append(Pair(p, bases[-1] if bases else None, cfg, h, d, x, total, one))
    return out


def predict_pair(pair: Pair, ddp: DDPOverhead | None) -> float:
    """The N-device step of a pair (s): the DDP model relative to the one-device step, i.e.
    ``T_1 * dp_step(H, D, X) / overlap(H, D)`` so the one-device model's own miss cancels."""
    ratio = dp_step_s(pair.host_s, pair.device_s, pair.exposed_s, ddp) / float(
        od.overlap(pair.host_s, pair.device_s))
    return pair.one_device_s * ratio


def fit_ddp_overhead(pairs: Sequence[Pair]) -> DDPOverhead:
    """Fit ``rho`` and ``kappa`` on relative error over ``pairs`` (both kept in [0, 5]).

    Raises:
        ValueError: no pairs.
    """
    from scipy.optimize import least_squares

    if not pairs:
        raise ValueError("no stored N-device point with its one-device series: measure "
                         "`dlperf run --nproc 2` and the same point on one device")

    def resid(x: np.ndarray) -> np.ndarray:
        ddp = DDPOverhead(float(x[0]), float(x[1]), (), 0.0)
        return np.array([np.log(predict_pair(pr, ddp) / pr.dp.step_time_s) for pr in pairs])

    r = least_squares(resid, [0.2, 0.02], bounds=([0.0, 0.0], [5.0, 5.0]))
    res = resid(r.x)
    return DDPOverhead(float(r.x[0]), float(r.x[1]),
                       tuple(f"{pr.dp.source}:{pr.dp.result_id}" for pr in pairs),
                       float(np.sqrt(np.mean(res ** 2))))
