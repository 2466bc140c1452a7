"""Another batch size: from one trace (:func:`to_batch`: each kernel's time above a floor by the
batch ratio, the GEMMs by their roofline and the weight casts by their activations' part) or
from two traced batches (:func:`interpolate_batch`: each kernel group's duration a power law of
the batch).
"""

from __future__ import annotations

import math
from dataclasses import replace

from dlperf.perfmodel.hardware import GpuProfile
from dlperf.perfmodel.replay import DeviceOp, StepTrace
from dlperf.perfmodel.transforms.kernels import (
    is_eager,
    is_gemm,
    is_weight_cast,
)
from dlperf.perfmodel.transforms.weights import (
    WEIGHT_CAST_BYTES,
    WEIGHT_GRAD_CAST_BYTES,
    gemm_roofline_s,
)

#: The part of a kernel's time that does not grow with the batch (launch, ramp-up, drain, the
#: latency of a kernel too small to fill the GPU), chosen on the development rows of
#: calibration2.db (benchmarks/replay_validate.py, batch from one trace, ratios 1/2-2):
#: MdAPE XLA / torch 16.2 / 4.7% at 1 us, 10.8 / 4.5% at 2, 8.9 / 4.3% at 3, 9.7 / 3.8% at 5,
#: 10.0 / 4.1% at 8 us.
BATCH_FLOOR_S = 3e-6


def gemm_batch_factor(step: StepTrace, b_dst: int, gpu: GpuProfile) -> float:
    """The factor by which the GEMM kernels of ``step`` (traced at ``meta['batch_size']``,
    positive: :func:`to_batch` refuses another) scale at batch ``b_dst``: the ratio of the
    step's GEMM roofline (:func:`gemm_roofline_s`, the FLOPs ``meta['train_flops_per_sample']``
    x the batch) at the two batches; the batch ratio where it is unknown.

    A GEMM of a small batch streams its weights: fcn5's JAX programs on the H200 run their
    GEMMs in 0.18 ms at every batch from 16 to 64 in bf16, the time of ``3 x 118 M x 2 B``
    at 4.23 TB/s, and its steps grow 0.88 -> 0.98 ms from batch 16 to 128. Its weights are a
    step's, not a kernel's: every GEMM kernel takes the step's factor."""
    b_src = int(step.meta.get("batch_size") or 0)
    params, fps = step.meta.get("params"), step.meta.get("train_flops_per_sample")
    prec = step.meta.get("precision")
    src = gemm_roofline_s(params, (fps or 0.0) * b_src, prec, gpu)
    dst = gemm_roofline_s(params, (fps or 0.0) * b_dst, prec, gpu)
    return dst / src if src and dst else b_dst / b_src


def cast_batch_factor(step: StepTrace, b_dst: int, gpu: GpuProfile) -> float:
    """The factor by which the weight casts of ``step`` (:func:`is_weight_cast`) scale at
    batch ``b_dst``: their summed time above the floor less the weights' part (the
    parameters x :data:`WEIGHT_CAST_BYTES`, and :data:`WEIGHT_GRAD_CAST_BYTES` in an eager
    program, over the bandwidth: :func:`~dlperf.perfmodel.transforms.autocast.cast_times`)
    scales with the batch (the activations cast with them), the weights' part stays; the
    batch ratio where the parameter count is unknown. fcn5's casts take 0.17-0.21 ms forward
    and 0.35-0.39 ms backward at every batch from 16 to 1024 in torch eager on the H200
    (``params x 6 / bandwidth`` is 0.17 ms)."""
    b_src = int(step.meta.get("batch_size") or 0)
    r = b_dst / b_src
    params = step.meta.get("params")
    casts = [o for o in step.ops if is_weight_cast(o)]
    total = sum(max(0.0, o.dur_s - BATCH_FLOOR_S) for o in casts)
    if not (params and total > 0):
        return r
    nbytes = params * (WEIGHT_CAST_BYTES + (WEIGHT_GRAD_CAST_BYTES if is_eager(step) else 0.0))
    w = min(total, nbytes / gpu.bandwidth_bytes_per_s)
    return (w + (total - w) * r) / total


def keeps_its_time(phase: str | None, op_class: str | None) -> bool:
    """True for a kernel of the optimizer (phase ``t_u`` or op class ``optimizer``): its work
    is the parameters', whatever the batch."""
    return phase == "t_u" or op_class == "optimizer"


def batch_scale_one(op: DeviceOp, factor: float) -> float:
    """Duration of ``op`` at another batch from one trace: a kernel of the optimizer (phase
    ``t_u`` or op class ``optimizer``) keeps its time; any other kernel's time above
    :data:`BATCH_FLOOR_S` scales by ``factor`` (:func:`to_batch`: the batch ratio, GEMMs and
    weight casts their own).

    Wave quantisation (the blocks scaled with the batch, the time with the waves on the GPU,
    a launch under one wave kept as it is; :func:`dlperf.perfmodel.hardware.waves`) was tried
    and lost on the development rows of calibration2.db (torch eager device-bound points,
    batch ratios 1/4-4: MdAPE 8.7% with waves, 10.7% keeping under-filled launches constant,
    5.9% proportional): the libraries pick other tiles and grids at another batch, so a
    traced grid does not carry over."""
    if keeps_its_time(op.phase, op.op_class):
        return op.dur_s
    floor = min(op.dur_s, BATCH_FLOOR_S)
    return floor + (op.dur_s - floor) * factor


def to_batch(step: StepTrace, b_dst: int, gpu: GpuProfile) -> StepTrace:
    """``step`` at batch ``b_dst`` from this one trace (:func:`batch_scale_one` per kernel,
    GEMM kernels by :func:`gemm_batch_factor`, weight casts by :func:`cast_batch_factor`;
    the host's work does not depend on the batch)."""
    b_src = int(step.meta.get("batch_size") or 0)
    if b_src <= 0:
        raise ValueError("the trace's batch size is unknown (meta['batch_size'])")
    fg = gemm_batch_factor(step, b_dst, gpu)
    fc = cast_batch_factor(step, b_dst, gpu)

    def f(o: DeviceOp) -> float:
        if is_gemm(o):
            return fg
        return fc if is_weight_cast(o) else b_dst / b_src

    ops = tuple(replace(o, dur_s=batch_scale_one(o, f(o))) for o in step.ops)
    return replace(step, ops=ops).with_note(
        f"batch {b_src} -> {b_dst} (one trace; GEMMs x{fg:.3f}, weight casts x{fc:.3f})",
        batch_size=b_dst, figures_batch_size=step.meta.get("figures_batch_size", b_src))


def interpolate_batch(a: StepTrace, b: StepTrace, b_dst: int) -> StepTrace:
    """The iteration at batch ``b_dst`` from traces ``a`` and ``b`` at two other batch sizes:
    the trace whose batch is nearest ``b_dst`` is the template, and each of its kernels'
    duration is a line through the batch (log-log, through both traces' summed durations of
    the kernel's (op class, phase, name) group; where the other trace lacks the group, by
    :func:`batch_scale_one`-like proportionality above the floor)."""
    ba, bb = int(a.meta["batch_size"]), int(b.meta["batch_size"])
    if ba == bb:
        raise ValueError("two traces of the same batch size give no line")
    # the nearer first (a where both are as near: the sort is stable)
    near, far = sorted((a, b), key=lambda st: abs(math.log(b_dst / int(st.meta["batch_size"]))))
    bn, bf = int(near.meta["batch_size"]), int(far.meta["batch_size"])

    def key(o: DeviceOp) -> tuple[str | None, str | None, str]:
        return (o.op_class, o.phase, o.name)

    def sums(st: StepTrace) -> dict[tuple[str | None, str | None, str], float]:
        out: dict[tuple[str | None, str | None, str], float] = {}
        for o in st.ops:
            out[key(o)] = out.get(key(o), 0.0) + max(o.dur_s - BATCH_FLOOR_S, 0.0)
        return out

    sn, sf = sums(near), sums(far)
    # exponent per group, slope of log(time above floor) against log(batch)
    cls_n: dict[tuple[str | None, str | None], float] = {}
    cls_f: dict[tuple[str | None, str | None], float] = {}
    for k, v in sn.items():
        cls_n[k[:2]] = cls_n.get(k[:2], 0.0) + v
    for k, v in sf.items():
        cls_f[k[:2]] = cls_f.get(k[:2], 0.0) + v
    lr = math.log(bf / bn)

    def slope(k: tuple[str | None, str | None, str]) -> float:
        # the group's own sums, else its op class and phase's, where both traces have time
        for t_n, t_f in ((sn.get(k, 0), sf.get(k, 0)), (cls_n.get(k[:2], 0), cls_f.get(k[:2], 0))):
            if t_n > 0 and t_f > 0:
                return math.log(t_f / t_n) / lr
        return 0.0 if keeps_its_time(k[1], k[0]) else 1.0

    t = math.log(b_dst / bn)
    ops = []
    for o in near.ops:
        floor = min(o.dur_s, BATCH_FLOOR_S)
        s = max(-0.5, min(1.5, slope(key(o))))
        ops.append(replace(o, dur_s=floor + (o.dur_s - floor) * math.exp(s * t)))
    return replace(near, ops=tuple(ops)).with_note(
        f"batch {bn} -> {b_dst} (interpolated with the trace at {bf})", batch_size=b_dst,
        figures_batch_size=near.meta.get("figures_batch_size", bn))
