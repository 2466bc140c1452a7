"""Device time as a roofline over the work of one training step, with fitted efficiencies.

Work per step (per device) at mini-batch ``B``:

* ``F(B) = f1 * B``: the analytic training FLOPs (model spec: matmuls and convolutions,
  forward + backward = 3 x forward, Kaplan et al. 2020; :mod:`dlperf.zoo.spec`);
* ``Y(B) = y0 + y1 * B``: bytes moved, from the framework's own count stored with each result
  (PyTorch: operands and results of every ATen operator, unfused; XLA: "bytes accessed" of the
  compiled step). ``y0`` is the batch-independent part (weights, gradients, optimizer state),
  ``y1`` the activations; both come from a least-squares line through the stored counts of the
  same (model, framework, precision) on the same device kind when two or more batch sizes are
  stored, else ``y0`` is ``BYTES_PER_PARAM`` bytes per parameter (see there) and ``y1`` the
  rest. The count is made on the device that ran: the ATen operators a step dispatches, and
  the program XLA compiles, are the device's, so a CPU run's count is no GPU's (1.0-1.4x the
  GPU's in PyTorch, 1.6-2.7x in JAX, at the same batch in the H200 folder: :func:`work_of`).

Device time (Williams, Waterman & Patterson 2009, the roofline; summed rather than maxed over
the step because a step is a sequence of kernels of which some are compute- and some
memory-bound, as in Dai et al. 2022's per-layer accounting), plus a per-kernel cost where the
step's kernel count is known::

    D(B) = F(B) / (e_F * P) + Y(B) / (e_Y * W) + K * t_k

with ``P`` the GEMM ceiling at the run's precision and ``W`` the STREAM bandwidth, both
*measured* by dlperf's own microbenchmarks in the workers (:mod:`dlperf.measure.ceilings`;
the median over every stored result of the same framework and device), and ``e_F``, ``e_Y``
two efficiencies fitted per (framework, mode, precision, device) group. ``K`` is the number of
device kernels one step runs (a traced run's ``trace.kernels_per_iter``, the kernels of its
stored timeline per step; :meth:`dlperf.perfmodel.calibrate.Calibration.kernel_count`) and
``t_k`` a device time per kernel fitted per group with ``e_F`` and ``e_Y``: every kernel costs a
launch latency and a ramp-up/drain of the device that neither its FLOPs nor its bytes pay for,
so a step of many small kernels (an LSTM's time-step loop, a small batch) takes ``~K t_k``
however little work it has: the kernel-launch floor of Dai et al. 2022's "GPU work", and the
per-kernel overheads that Lin et al. 2022 (arXiv:2201.07821) model apart from the kernels' own
times. On the H200 files ``t_k`` comes out at 2-8 us (docs/perfmodel.md). A configuration
without a kernel count is modelled without the term, with efficiencies fitted without it
(:meth:`dlperf.perfmodel.calibrate.Calibration.roofline`). The fit is joint with one
host time per measured series (:mod:`dlperf.perfmodel.onedevice`), since a step is the overlap
of host dispatch and device execution and most small-batch points say nothing about ``D``.
Traced runs (``--breakdown``/``--trace``) add direct observations of ``D`` (the device busy
time per iteration).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import median

import numpy as np

from dlperf.perfmodel import equations as eq
from dlperf.perfmodel import special
from dlperf.perfmodel.records import Point

#: Batch-independent bytes per parameter when only one batch size of a model was stored:
#: the median of ``y0 / params`` over the 45 (model, framework, precision) lines through 2+
#: stored batch sizes in benchmarks/results/h200 (PyTorch 26-81, median 41: fp32 weights read
#: in forward and backward, gradients written and read, momentum read and written; XLA's counts
#: scatter more). Chosen on that data.
BYTES_PER_PARAM = 45.0

#: Op classes whose time scales with FLOPs; the rest scale with bytes.
COMPUTE_CLASSES = ("convolution", "matmul", "attention", "recurrent")


@dataclass(frozen=True)
class Ceiling:
    """Ceilings of one (framework, device, precision): FLOP/s, bytes/s, and where they come from
    (``measured: median of N workers`` or ``datasheet``)."""

    flops_per_s: float
    bandwidth_bytes_per_s: float
    source: str


def ceiling_of(points: Iterable[Point], framework: str, precision: str,
               device_name: str | None) -> Ceiling:
    """Median measured ceilings of ``framework`` on ``device_name`` at ``precision``.

    Falls back to the same device measured by any framework, then to the datasheet
    (:mod:`dlperf.perfmodel.datasheet`, marked ``datasheet``).

    Raises:
        ValueError: nothing measured and no datasheet entry for the device.
    """
    from dlperf.perfmodel.datasheet import datasheet_peaks

    # (point, its bandwidth) of every point with both ceilings measured on the device
    pts = [(p, bw) for p in points if p.matmul_flops_per_s.get(precision)
           and (bw := p.bandwidth_bytes_per_s) and special.ceilings_read(p.device)
           and (device_name is None or p.device_name == device_name)]
    for cand, note in (([x for x in pts if x[0].framework == framework], ""),
                       (pts, " (another framework)")):
        if cand:
            return Ceiling(median(p.matmul_flops_per_s[precision] for p, _ in cand),
                           median(bw for _, bw in cand),
                           f"measured: median of {len(cand)} workers{note}")
    sheet = datasheet_peaks(device_name)
    if sheet and sheet.get(precision):
        return Ceiling(float(sheet[precision]), float(sheet["bandwidth_bytes_per_s"]),
                       f"datasheet ({sheet['source']})")
    raise ValueError(f"no measured ceiling for {framework} {precision} on {device_name!r} and "
                     "no datasheet entry: run one point with --measure-ceilings")


@dataclass(frozen=True)
class Work:
    """Work of one step per device: ``F(B) = f1 B`` FLOPs, ``Y(B) = y0 + y1 B`` bytes.

    ``source`` says where ``Y`` came from (a fitted line, one point, or none: ``Y = 0``).
    """

    flops_per_sample: float
    bytes_fixed: float
    bytes_per_sample: float
    source: str

    def flops(self, batch: float) -> float:
        """Training FLOPs of one step at ``batch`` samples per device."""
        return self.flops_per_sample * batch

    def bytes(self, batch: float) -> float:
        """Bytes moved by one step at ``batch`` samples per device."""
        return self.bytes_fixed + self.bytes_per_sample * batch


class NoFlopCount(ValueError):
    """No FLOP count of a model anywhere (:func:`work_of`): neither a stored point nor the
    spec gives one."""


def work_of(points: Iterable[Point], model: str, framework: str, precision: str,
            device: str, flops_per_sample: float | None = None, params: int | None = None
            ) -> Work:
    """The work model of (model, framework, precision) on device kind ``device`` from the
    stored counts: the analytic FLOPs (the model spec's, the same on any device) and the byte
    line through the counts of the one-device points of ``device`` alone (``cuda``,
    ``cpu``: :attr:`~dlperf.perfmodel.records.Point.device`). A byte count is measured on the
    device that ran, not derived from the model: PyTorch's counts the ATen operators the step
    dispatches there (a CPU's convolution, attention and optimizer operators are not a GPU's),
    XLA's the program compiled for that backend; at the same batch the H200 folder's CPU runs
    count 1.0-1.4x the GPU runs' bytes in PyTorch (alexnet 1.32, fcn5 1.39, resnet50 1.02) and
    1.6-2.7x in JAX (fcn5 1.65, resnet50 2.65).

    Args:
        points: stored measurements (any mode; PyTorch counts eager operators in both modes).
        device: the device kind whose byte counts the line goes through.
        flops_per_sample, params: the spec's numbers when no point carries them.

    Raises:
        NoFlopCount: no FLOP count anywhere (neither a stored point nor ``flops_per_sample``).
    """
    pts = [p for p in points if p.model == model and p.framework == framework
           and p.precision == precision and p.world_size == 1 and p.device == device]
    f1 = next((p.train_flops_per_sample for p in pts if p.train_flops_per_sample), None)
    f1 = f1 or flops_per_sample
    params = next((p.params for p in pts if p.params), None) or params
    if not f1:
        raise NoFlopCount(f"no FLOP count for {model}: not in the stored results, not given")
    by_batch: dict[int, list[float]] = defaultdict(list)
    for p in pts:
        if p.bytes_per_step:
            by_batch[p.per_device_batch].append(p.bytes_per_step)
    bs = sorted(by_batch)
    ys = [median(by_batch[b]) for b in bs]
    if len(bs) >= 2:
        y1, y0 = np.polyfit(bs, ys, 1)
        return Work(f1, max(float(y0), 0.0), max(float(y1), 0.0),
                    f"bytes: line through {len(bs)} stored batch sizes")
    if len(bs) == 1:
        y0 = min(BYTES_PER_PARAM * (params or 0), 0.5 * ys[0])
        return Work(f1, y0, (ys[0] - y0) / bs[0],
                    f"bytes: one stored batch size ({bs[0]}), {BYTES_PER_PARAM:g} B/param fixed")
    return Work(f1, 0.0, 0.0, "bytes: none stored (memory term 0)")


@dataclass(frozen=True)
class SeriesHost:
    """The host time of one series fitted jointly with its group's roofline (s), and whether
    the series' smallest batch is host-bound (the host time is then identified by the data)."""

    model: str
    data: str
    layout: str
    host_s: float
    host_bound: bool
    n_batch_sizes: int = 1
    measured: bool = False

    @property
    def identified(self) -> bool:
        """The data show the host time: host-bound at its smallest batch in a fit of its own
        3+ batch sizes, or ``measured``: most of its points carry an untraced host dispatch
        time taken while the device was still busy (two-sided, :func:`dlperf.perfmodel.
        onedevice.host_measurements`), which shows ``H`` of a device-bound series too."""
        return (self.host_bound and self.n_batch_sizes >= 3) or self.measured


@dataclass(frozen=True)
class Efficiency:
    """Fitted roofline efficiencies of one (framework, mode, precision, device) group.

    ``e_flops`` and ``e_bytes`` multiply the ceilings; ``models`` are the models whose
    measurements chose them, ``result_ids`` those measurements (``source:id``);
    ``rms_log`` is the root mean square of the log residuals of the joint fit; ``hosts`` the
    host time of every series in the fit; ``kernel_s`` the device time per kernel ``t_k`` (s;
    0 for a fit without kernel counts) and ``kernel_models`` the models whose kernel counts
    were in the fit.
    """

    group: tuple[str, str, str, str]
    e_flops: float
    e_bytes: float
    models: tuple[str, ...]
    result_ids: tuple[str, ...]
    rms_log: float
    hosts: tuple[SeriesHost, ...] = ()
    kernel_s: float = 0.0
    kernel_models: tuple[str, ...] = ()

    def describe(self) -> str:
        """``e_F``, ``e_Y`` and ``t_k`` in words, for a prediction's provenance: says when
        ``e_F`` sits at its cap (:func:`special.flops_efficiency_cap`) and when the fit had no kernel
        term (no kernel counts)."""
        cap = self.e_flops >= special.flops_efficiency_cap(self.group[2]) * (1 - 1e-6)
        return (f"e_F={self.e_flops:.3g}{' (capped: the GEMM ceiling)' if cap else ''}, "
                f"e_Y={self.e_bytes:.3g}, " + (f"t_k={self.kernel_s * 1e6:.3g} us per kernel"
                                               if self.kernel_s else "no kernel term"))

    def host_floor(self) -> tuple[float, str, tuple[str, ...]] | None:
        """``(host time (s), its model, models)``: the smallest identified host time of the
        group (:attr:`SeriesHost.identified`), the model of the series that has it, and every
        model with an identified host time; None if none. The smallest, not the median:
        a model's host time follows its kernel count, which nothing stored before the model ran
        tells, and the floor missed least on the leave-one-model-out back-test of
        benchmarks/results/h200 (see docs/perfmodel.md)."""
        hs = [h for h in self.hosts if h.identified]
        if not hs:
            return None
        low = min(hs, key=lambda h: h.host_s)
        return low.host_s, low.model, tuple(sorted({h.model for h in hs}))


def device_time_s(work: Work, ceiling: Ceiling, eff: Efficiency, batch: float,
                  kernels: float | None = None) -> float:
    """Roofline device time of one step (s): ``F/(e_F P) + Y/(e_Y W) + K t_k``.

    Args:
        work, ceiling, eff: the work model, the ceilings and the group's fitted efficiencies
            (``eff.kernel_s`` is ``t_k``).
        batch: samples per device.
        kernels: ``K``, device kernels per step; None: no kernel term.
    """
    return eq.roofline_device_s(work.flops(batch), work.bytes(batch), kernels,
                                ceiling.flops_per_s, ceiling.bandwidth_bytes_per_s,
                                eff.e_flops, eff.e_bytes, eff.kernel_s)


def class_times_s(traced: Sequence[Point], work: Work, batch: float) -> dict[str, float] | None:
    """Device time per op class at ``batch``, scaled from the newest of ``traced``, the
    series' points that carry op classes (``Point.op_class_s``), in file order.

    Each class's measured time per iteration is scaled by the work ratio of its kind (FLOPs
    for :data:`COMPUTE_CLASSES`, bytes for the others) between ``batch`` and the traced batch.
    None when there is no traced point.
    """
    if not traced:
        return None
    p = traced[-1]
    b0 = p.per_device_batch
    rf = work.flops(batch) / work.flops(b0)  # > 0: work_of refuses a model without FLOPs
    ry = work.bytes(batch) / work.bytes(b0) if work.bytes(b0) else rf
    return {c: t * (rf if c in COMPUTE_CLASSES else ry) for c, t in p.op_class_s.items() if t > 0}
