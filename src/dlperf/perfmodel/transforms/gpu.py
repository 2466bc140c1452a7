"""Another GPU (:func:`to_gpu`): Habitat's wave scaling (Yu et al., ATC'21; ``geoffxy/habitat``
``analysis/wave_scaling/roofline.py``) kernel by kernel, each kernel's memory-bound part by the
bandwidths and the rest by the GEMM ceilings or the clock and waves, its roofline position by its
FLOPs and bytes where the trace holds them (XLA kernels, eager matmuls); the host by a dispatch
probe.
"""

from __future__ import annotations

from dataclasses import replace

from dlperf.perfmodel.hardware import GpuProfile, waves
from dlperf.perfmodel.replay import DeviceOp, StepTrace, scale_host
from dlperf.perfmodel.transforms.kernels import (
    KERNEL_FLOOR_S,
    is_gemm,
    math_precision,
)

#: Habitat's memory-boundness (gamma) of a GEMM-like kernel whose FLOPs and bytes the trace
#: does not hold: mostly compute-bound (Habitat's roofline formula gives 0-0.5 above the ridge
#: point; 0.25 is its middle).
GEMM_GAMMA = 0.25


def _ridge(gpu: GpuProfile, precision: str) -> float:
    peak = gpu.gemm(precision) or gpu.gemm("fp32") or 1.0
    return peak / gpu.bandwidth_bytes_per_s


def gamma(op: DeviceOp, gpu: GpuProfile, precision: str) -> float:
    """Memory-boundness in [0, 1] of a GEMM-like ``op`` (:func:`is_gemm`; Habitat's gamma):
    from the arithmetic intensity ``I = flops / bytes`` against the destination's ridge point
    ``R`` where the trace holds both (``1 - 0.5 I / R`` below it, ``0.5 R / I`` above), else
    :data:`GEMM_GAMMA`. Any other kernel's is its :func:`memory_share`
    (:func:`kernel_on_gpu`)."""
    if op.flops is not None and op.bytes and op.flops > 0:
        r = _ridge(gpu, math_precision(op, precision))
        i = op.flops / op.bytes
        return 1.0 - 0.5 * i / r if i <= r else 0.5 * r / i
    return GEMM_GAMMA


#: Memory-boundness of a non-GEMM kernel whose trace holds no bytes, by op class: the
#: time-weighted bandwidth utilisation ``U`` (:func:`memory_share`) of the development
#: kernels whose traces hold their bytes (benchmarks/replay_kernels.py, table 1: 12,784
#: kernels of calibration2.db against the H200's measured 4.23 TB/s, each with its share of
#: its operator's bytes, :func:`~dlperf.perfmodel.replay.kernel_costs`; 0.48 over all of
#: them; embeddings and recurrent kernels, absent there, take the "other" and overall values).
MEMORY_SHARE = {"elementwise": 0.54, "loss": 0.49, "normalisation": 0.25, "memory_copy": 0.73,
                "attention": 0.58, "matmul": 0.68, "other": 0.29, "optimizer": 0.70,
                "convolution": 0.03, "pooling": 0.27, "embedding": 0.29, "recurrent": 0.48}
#: :data:`MEMORY_SHARE` of an op class it does not list.
MEMORY_SHARE_DEFAULT = 0.48


def memory_share(op: DeviceOp, gpu: GpuProfile) -> float:
    """Memory-boundness in [0, 1] of a non-GEMM kernel traced on ``gpu``: its bandwidth
    utilisation ``U = bytes / (duration x bandwidth)`` where the trace holds its bytes (capped
    at 1), else the op class's :data:`MEMORY_SHARE`; 1 for copies and memsets.

    A kernel moving its bytes at a tenth of the DRAM bandwidth is bound by something else
    (latency, occupancy, the L2, its own arithmetic: XLA's random-number fusions read few
    bytes and run long) and does not slow down by the full bandwidth ratio on a GPU with less
    bandwidth. On the development kernels traced in fp32 and bf16 (bf16 halves the bytes: for
    the memory part, the same change as doubling the bandwidth), ``0.5^U`` predicts the bf16
    kernel's time with a median |log error| of 0.14, against 0.66 for the whole kernel at half
    (Habitat's gamma = 1 for a kernel without FLOPs; benchmarks/replay_kernels.py, part 2).
    NeuSight (ASPLOS'25) likewise bounds each kernel's utilisation rather than assuming the
    roofline's."""
    if op.kind in ("memcpy", "memset"):
        return 1.0
    if op.bytes and op.bytes > 0 and op.dur_s > 0:
        return min(1.0, op.bytes / (op.dur_s * gpu.bandwidth_bytes_per_s))
    return MEMORY_SHARE.get(op.op_class or "", MEMORY_SHARE_DEFAULT)


def _gemm_scaling(op: DeviceOp, src: GpuProfile, dst: GpuProfile,
                  precision: str) -> tuple[float, float]:
    """``(gamma, compute factor)`` of a GEMM-like kernel: Habitat's gamma (:func:`gamma`) and
    the GEMM ceilings' ratio of its math precision, else the clock and waves'
    (:func:`_wave_factor`) where ``src`` or ``dst`` lacks the ceiling."""
    p = math_precision(op, precision)
    a, b = src.gemm(p), dst.gemm(p)
    return gamma(op, dst, precision), (a / b if a and b else _wave_factor(op, src, dst))


def _other_scaling(op: DeviceOp, src: GpuProfile, dst: GpuProfile,
                   precision: str) -> tuple[float, float]:
    """``(gamma, compute factor)`` of any other kernel: its bandwidth utilisation on ``src``
    (:func:`memory_share`) and the clock and waves' ratio (:func:`_wave_factor`)."""
    return memory_share(op, src), _wave_factor(op, src, dst)


def _wave_factor(op: DeviceOp, src: GpuProfile, dst: GpuProfile) -> float:
    """Source time / destination time of a kernel's compute part by the clock: clock x (waves
    where the launch geometry is known, else SMs)."""
    clock = src.clock_mhz / dst.clock_mhz
    if op.blocks and op.threads_per_block:
        w_s = waves(op.blocks, op.threads_per_block, op.registers, op.shared_memory, src)
        w_d = waves(op.blocks, op.threads_per_block, op.registers, op.shared_memory, dst)
        return clock * w_d / w_s
    return clock * src.sms / dst.sms


def kernel_on_gpu(op: DeviceOp, src: GpuProfile, dst: GpuProfile, precision: str) -> float:
    """Duration of ``op`` (traced on ``src``) on ``dst`` (s): above :data:`KERNEL_FLOOR_S`,
    ``t x (bandwidth_src / bandwidth_dst)^gamma x compute_factor^(1 - gamma)`` (Habitat's
    roofline wave scaling, with the GEMM ceilings' ratio as the compute factor of GEMM-like
    kernels and the waves' ratio where the geometry is known). ``gamma`` is Habitat's for a
    GEMM-like kernel (:func:`gamma`) and the kernel's bandwidth utilisation on ``src`` for
    any other (:func:`memory_share`)."""
    g, c = (_gemm_scaling(op, src, dst, precision) if is_gemm(op)
            else _other_scaling(op, src, dst, precision))
    bw = src.bandwidth_bytes_per_s / dst.bandwidth_bytes_per_s
    floor = min(op.dur_s, KERNEL_FLOOR_S)
    return floor + (op.dur_s - floor) * bw ** g * c ** (1.0 - g)


def to_gpu(step: StepTrace, src: GpuProfile, dst: GpuProfile,
           host_ratio: float | None = None) -> StepTrace:
    """``step`` (traced on ``src``) moved to ``dst``: every kernel by :func:`kernel_on_gpu`,
    the host by ``host_ratio`` (the target machine's host time / the source's for the same
    dispatch work: :func:`dlperf.perfmodel.retarget.host_ratio`); None leaves the host as it
    is, and says so. A datasheet ceiling of ``dst`` is first scaled to the share of its
    datasheet that ``src`` measured (:func:`~dlperf.perfmodel.hardware.achieved_like`).

    The host is not scaled by the Python-loop host-speed probe: across the torch eager points
    of the H200 files the probe explains little of the host dispatch time (correlation 0.19 of
    the logs within a configuration, 100 points; the probe reads 72-97 or 132-203 ns on one
    machine in no order)."""
    from dlperf.perfmodel.hardware import achieved_like

    dst = achieved_like(dst, src)
    prec = str(step.meta.get("precision") or "fp32")
    ops = tuple(replace(o, dur_s=kernel_on_gpu(o, src, dst, prec)) for o in step.ops)
    out = replace(step, ops=ops).with_note(f"gpu {src.name} -> {dst.name}",
                                           device_name=dst.device_name or dst.name)
    if host_ratio is None:
        return out.with_note("host unscaled (no dispatch probe of both machines)")
    return scale_host(out, host_ratio).with_note(f"host x{host_ratio:.3f} (dispatch probe)")
