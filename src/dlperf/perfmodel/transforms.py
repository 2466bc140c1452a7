"""Per-kernel transforms of a traced iteration (:class:`~dlperf.perfmodel.replay.StepTrace`):
each a small named function ``StepTrace -> StepTrace`` that says what it did in
``meta['transforms']``. :func:`~dlperf.perfmodel.replay.simulate` then replays the result.

* :func:`to_gpu`: another GPU, Habitat's wave scaling (Yu et al., ATC'21; ``geoffxy/habitat``
  ``analysis/wave_scaling/roofline.py``) kernel by kernel, the host by a dispatch probe;
* :func:`to_precision`: fp32 <-> bf16 by the kernel's tensor-core eligibility (read off its
  name), its memory-boundness and the mixed-precision casts autocast adds;
* :func:`to_batch`, :func:`interpolate_batch`: another batch size, from two traced batches
  (each kernel group's duration a power law of the batch) or from one;
* :func:`to_data_parallel`: DDP's bucketed all-reduces inserted at their gradient-ready ops
  and overlapped with the rest of the backward (WFBP).

What a kernel is, is read from the trace alone (no framework is named): a GEMM or
convolution kernel by its op class and name, its arithmetic precision by its name (cuBLAS,
cuDNN and CUTLASS name the math: ``sgemm``/``ffma`` FP32 SIMT, ``tf32``, ``bf16``/``f16``/
``hmma``/``wgmma`` tensor cores), its roofline position by its FLOPs and bytes where the trace
holds them (XLA kernels, eager matmuls).
"""

from __future__ import annotations

import bisect
import itertools
import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from dlperf.perfmodel.gemmshape import gemm_dims
from dlperf.perfmodel.hardware import GpuProfile, waves
from dlperf.perfmodel.replay import DeviceOp, StepTrace, scale_host

#: Op classes whose kernels are GEMM-like (tensor-core eligible): their compute part scales
#: with the GEMM ceiling, not the clock alone.
GEMM_CLASSES = ("matmul", "convolution", "attention", "recurrent")
#: Kernel-name fragments of GEMM/convolution math (cuBLAS, cuBLASLt ``nvjet``, CUTLASS, cuDNN,
#: XLA's Triton GEMMs, flash attention). A name TorchInductor gives a pointwise, reduction or
#: persistent-reduction kernel (``triton_poi_``, ``triton_red_``, ``triton_per_``;
#: ``torch/_inductor/codegen/triton.py``) is never one, whatever operators it fused
#: (``triton_poi_fused_convolution_backward_native_batch_norm_backward``: a batch norm's
#: backward; ``triton_poi_fused_mm_t_view``: a GEMM operand's layout copy).
_GEMM_NAME = re.compile(r"^(?!triton_(?:poi|red|per)_).*(?:gemm|xmma|nvjet|cutlass|"
                        r"implicit_convolve|fprop|dgrad|wgrad|fmha|flash|sdpa|conv|triton_.*mm|"
                        r"__cudnn|cublas)", re.I)
#: Kernel-name fragments of the math's precision, in order of precedence.
_PREC_NAME = (
    ("fp32", re.compile(r"sgemm|ffma|simt|_f32f32_f32f32_f32|implicit_convolve_sgemm|"
                        r"engine<float|fft2d|(?<!\d)_f32_", re.I)),
    ("tf32", re.compile(r"tf32", re.I)),
    ("bf16", re.compile(r"bf16|f16|hmma|wgmma|s1688|s16816|h884|_h_|hsh|tensorop|tst_", re.I)),
)
#: Habitat's memory-boundness (gamma) of a GEMM-like kernel whose FLOPs and bytes the trace
#: does not hold: mostly compute-bound (Habitat's roofline formula gives 0-0.5 above the ridge
#: point; 0.25 is its middle).
GEMM_GAMMA = 0.25
#: A kernel's fixed cost (launch, ramp-up, drain) that neither bandwidth nor FLOPs scale: the
#: 5th-10th percentile of the 142,456 kernel durations of calibration2.db's replayed
#: iterations is 0.83-0.96 us (median 2.6 us).
KERNEL_FLOOR_S = 1.0e-6


def is_gemm(op: DeviceOp) -> bool:
    """True for a GEMM-like kernel: a GEMM op class with GEMM math in its name (a cast or
    transpose kernel launched by a matmul op is not one)."""
    return (op.kind == "kernel" and (op.op_class in GEMM_CLASSES)
            and bool(_GEMM_NAME.search(op.name)))


def math_precision(op: DeviceOp, default: str) -> str:
    """The arithmetic precision a GEMM-like kernel runs at, from its name (``fp32`` SIMT,
    ``tf32`` or ``bf16`` tensor cores), else ``default``."""
    for prec, rx in _PREC_NAME:
        if rx.search(op.name):
            return prec
    return default


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


# --- precision ------------------------------------------------------------------------------

#: A non-GEMM kernel's time at bf16 / its time at fp32, by op class, as ``(fixed, ratio)``:
#: the first ``fixed`` seconds stay, the rest scales by ``ratio``. From the same torch eager
#: kernels traced in fp32 and in bf16 at the same batch on the development models
#: (benchmarks/replay_kernels.py, part 3: 2,500 matched pairs): elementwise kernels shrink
#: with their size (1.0 under 2 us, 0.86 at 2-5, 0.79 at 5-20, 0.61-0.66 above: a fixed 4 us
#: and 0.6 of the rest fit best), copies halve, while normalisation (autocast runs
#: ``layer_norm`` in fp32), the optimizer (fp32 master weights) and embeddings keep their
#: time (0.97-1.03). Pooling and losses take 0.8: summed over each operator's kernels in
#: both precisions (benchmarks/replay_kernels.py, part 3, the H200 and H100 development
#: traces), a pooling's bf16 time is 0.93 / 0.74 of its fp32 time (vgg16's max-pool backward
#: 0.62) and a loss's 0.83 / 0.76 (its bf16 kernels read bf16 logits, 0.55, after autocast's
#: upcast of them, a kernel more). A convolution's own non-GEMM kernels that stay at bf16
#: (:func:`is_conv_helper`: the bias's) keep their time (0.99). An XLA program's fusions do
#: not match one to one across precisions; the same table serves them (its values moved the
#: JAX development rows of the precision back-test by less than 0.2 points).
PRECISION_RATIO: dict[str, tuple[float, float]] = {
    "elementwise": (4e-6, 0.6), "memory_copy": (1e-6, 0.5), "normalisation": (0.0, 1.0),
    "optimizer": (0.0, 1.0), "loss": (0.0, 0.8), "pooling": (0.0, 0.8), "other": (0.0, 1.0),
    "embedding": (0.0, 1.0), "convolution": (0.0, 1.0)}
#: A batch norm's backward kernels at bf16 / at fp32: autocast runs batch norm in the input's
#: precision (unlike ``layer_norm``, which it runs in fp32), and cuDNN's fp32 backward
#: (``CudnnBatchNormBackward0``) gives way to a native bf16 one that moves half the bytes: 27.0
#: -> 11.7 ms summed over the development resnet50 points traced in both precisions (0.43;
#: its forward keeps its time, 13.2 -> 13.7 ms; benchmarks/replay_kernels.py, part 5).
BATCH_NORM_BACKWARD_BF16 = 0.43


def is_batch_norm_backward(op: DeviceOp) -> bool:
    """True for a kernel of a batch norm's backward (its launching operator names batch norm,
    phase ``t_b``): PyTorch's ``CudnnBatchNormBackward0``, ``NativeBatchNormBackward0``."""
    return op.phase == "t_b" and "batchnorm" in (op.op or "").lower().replace("_", "")


#: :data:`PRECISION_RATIO` of an op class it does not list.
PRECISION_RATIO_DEFAULT = (1e-6, 0.5)
#: A GEMM-like kernel at bf16 reaches this share of the efficiency (achieved / ceiling) it
#: has at fp32: its time above :data:`GEMM_FIXED_S` scales by ``ceiling ratio / share``. For
#: a matmul whose leading dimensions are multiples of 8 elements, or unknown: the same torch
#: eager GEMM kernels traced in fp32 and bf16 on the development models (kernel pairs,
#: benchmarks/replay_kernels.py, part 5: the summed bf16 time predicted / measured at share
#: 1.0 is 0.98 on the H200 and 0.96 on the H100 for the aligned matmuls; 0.83 for those whose
#: trace holds no figures, small fcn and classifier GEMMs).
BF16_GEMM_SHARE = 1.0
#: :data:`BF16_GEMM_SHARE` of the op classes whose kernel pairs differ from it (part 5, H200 /
#: H100 predicted / measured): a convolution's GEMM kernels (cuDNN's fp32 ``implicit_gemm``/
#: ``wgrad``/``dgrad`` engines against its bf16 tensor-core ones) 0.6 above a fixed 8 us
#: (:data:`GEMM_FIXED_S_BY_CLASS`; the summed time per point a mean 3% low); attention (cuDNN
#: and memory-efficient SDPA) 0.5 above 6 us (4% low); cuDNN's recurrent GEMMs 0.3 (0.92 /
#: 1.04 of the kernel pairs' bf16 time).
BF16_GEMM_SHARE_BY_CLASS = {"convolution": 0.6, "attention": 0.5, "recurrent": 0.3}
#: :data:`BF16_GEMM_SHARE` of a matmul by its alignment in elements
#: (:mod:`dlperf.perfmodel.gemmshape`): cuBLAS runs a bf16 GEMM with an odd leading dimension
#: on the Turing-era ``cutlass_75_tensorop_bf16_s1688gemm_..._align1`` kernels (GPT-2's
#: 50,257-word output layer: 0.36-0.55 of its fp32 time, 0.12-0.19 of the bf16 ceiling; part
#: 5: 1.07 / 1.06 at 0.15) and one with a leading dimension of 2 or 4 on Ampere's
#: ``tensorop_..._align2/4`` (LSTM's decoder, ``k = 650``: 1.13 at 0.25, 0.95 at 0.3 on the
#: H100, the only development GEMMs of this kind that hold their figures). An alignment of 8
#: and an unknown one (None) are not listed: :data:`BF16_GEMM_SHARE_BY_CLASS` gives theirs.
BF16_GEMM_SHARE_BY_ALIGN: dict[int | None, float] = {1: 0.15, 2: 0.3, 4: 0.3}
#: A tensor-core kernel's name that states its alignment (CUTLASS ``..._align1``).
_ALIGN_NAME = re.compile(r"tensorop.*_align(\d)", re.I)


def gemm_alignment(op: DeviceOp) -> int | None:
    """A GEMM kernel's alignment in elements: stated in a tensor-core kernel's name (CUTLASS
    ``tensorop_..._alignN``; an fp32 SIMT kernel's ``align1`` says nothing of the bf16
    kernels), else recovered from its operator's FLOPs and bytes (:attr:`DeviceOp.align`),
    else None."""
    m = _ALIGN_NAME.search(op.name)
    if m:
        return int(m.group(1))
    return op.align


def bf16_share(op: DeviceOp) -> float:
    """The share of its fp32 efficiency a GEMM-like kernel reaches at bf16: by alignment for a
    misaligned matmul (:data:`BF16_GEMM_SHARE_BY_ALIGN`), else by op class
    (:data:`BF16_GEMM_SHARE_BY_CLASS`, :data:`BF16_GEMM_SHARE`)."""
    a = gemm_alignment(op) if op.op_class == "matmul" else None
    return BF16_GEMM_SHARE_BY_ALIGN.get(
        a, BF16_GEMM_SHARE_BY_CLASS.get(op.op_class or "", BF16_GEMM_SHARE))


#: The part of a GEMM-like kernel's time that its precision does not change (launch, ramp-up,
#: the tail wave): the best fit of the kernel-level pairs (median |log error| 0.19 at 3 us,
#: 0.21-0.22 at 2 and 4 us, with a share of 1).
GEMM_FIXED_S = 3e-6
#: :data:`GEMM_FIXED_S` of the op classes whose summed GEMM time per traced point fits better
#: with a larger one (benchmarks/replay_kernels.py, part 5: mean |log(predicted / measured)|
#: over the H200 / H100 development points): convolutions 0.59 / 0.18 at 3 us and share 0.6,
#: 0.47 / 0.16 at 8 us (cuDNN's small and few-channel convolutions, alexnet_cifar's, gain
#: little at bf16); attention 0.15 / 0.17 at 3 us and 0.4, 0.08 / 0.08 at 6 us and 0.5.
GEMM_FIXED_S_BY_CLASS = {"convolution": 8e-6, "attention": 6e-6}


#: :data:`GEMM_FIXED_S_BY_CLASS` of a kernel whose math goes from bf16 to fp32: a
#: convolution's none. A bf16 convolution's time does not show the fixed part its fp32
#: kernel has (cuDNN picks other kernels, tiles and helpers at fp32): summed over each
#: development resnet50 point traced in both precisions on the H200 (torch eager, JAX,
#: torch.compile; benchmarks/replay_kernels.py, part 10) the fp32 convolution GEMMs take
#: 6.3-10.3x the bf16 ones (8.0-10.3x at batch 16-128 in torch eager and JAX), and the
#: ceilings' ratio times the share 0.6 over the whole time gives 9.1x, where over the time
#: above 8 us it gives 3-5x.
GEMM_FIXED_S_FROM_BF16 = {"convolution": 0.0, "attention": GEMM_FIXED_S_BY_CLASS["attention"]}
#: The fixed parts by the direction of the math precision's change (``gemm_to_precision``).
_GEMM_FIXED_BY_DIRECTION = {1: GEMM_FIXED_S_BY_CLASS, 0: GEMM_FIXED_S_BY_CLASS,
                            -1: GEMM_FIXED_S_FROM_BF16}


def gemm_fixed_s(op: DeviceOp, direction: int = 1) -> float:
    """The part of a GEMM-like kernel's time its precision does not change (s): by op class
    and the direction of its math precision's change (1 to bf16, -1 from it, 0 between
    fp32 and tf32; :data:`GEMM_FIXED_S_BY_CLASS`, :data:`GEMM_FIXED_S_FROM_BF16`), else
    :data:`GEMM_FIXED_S`."""
    return _GEMM_FIXED_BY_DIRECTION[direction].get(op.op_class or "", GEMM_FIXED_S)


#: A GEMM-like kernel's time at the new precision times this, by the direction of its math
#: precision's change and its op class: going from bf16 to fp32 a convolution brings back
#: its fp32 library helper kernels (:func:`is_conv_helper`: FFT and Winograd transforms,
#: layout conversions), which :func:`drop_conv_helpers` removes going to bf16 and a bf16
#: trace does not hold. On the development points traced in both precisions on the H200
#: (benchmarks/replay_kernels.py, part 10) the helpers take 0.007-0.40 of the fp32
#: convolution GEMMs' time, a median 0.16 over the 14 points (torch eager resnet50
#: 0.07-0.11, torch.compile 0.14-0.18, JAX 0.19-0.27, alexnet_cifar 0.01-0.40); 0.15 taken.
GEMM_HELPERS: dict[int, dict[str, float]] = {-1: {"convolution": 1.15}}


def is_half(precision: str | None) -> bool:
    """True for a half precision (``bf16``, ``fp16``)."""
    return precision in ("bf16", "fp16")


def precision_step(src: str | None, dst: str | None) -> int:
    """The direction of a change of precision: 1 from a full precision (``fp32``, ``tf32``)
    to a half one (:func:`is_half`), -1 back, 0 between two of a kind."""
    return int(is_half(dst)) - int(is_half(src))


#: A non-GEMM kernel's time above its fixed part with its ratio (:func:`precision_ratio`), by
#: the direction of the change (:func:`precision_step`; 0 leaves the kernel as it is).
_OTHER_STEP: dict[int, Callable[[float, float], float]] = {1: operator.mul,
                                                           -1: operator.truediv}


#: No op class taken as another (:func:`precision_ratio`'s default ``alias``).
_NO_ALIAS: Mapping[str, str] = MappingProxyType({})


def precision_ratio(op: DeviceOp, alias: Mapping[str, str] = _NO_ALIAS
                    ) -> tuple[float, float]:
    """``(fixed, ratio)`` of a non-GEMM kernel at bf16 / at fp32: a batch norm's backward
    kernel (:func:`is_batch_norm_backward`) :data:`BATCH_NORM_BACKWARD_BF16` of its whole
    time, another kernel its op class's :data:`PRECISION_RATIO` (the class ``alias`` maps
    it to where it names it: :data:`PRECISION_CLASS_BY_FRAMEWORK`)."""
    if is_batch_norm_backward(op):
        return 0.0, BATCH_NORM_BACKWARD_BF16
    cls = op.op_class or ""
    return PRECISION_RATIO.get(alias.get(cls, cls), PRECISION_RATIO_DEFAULT)


def gemm_to_precision(op: DeviceOp, src: str, dst: str, gpu: GpuProfile) -> float:
    """Duration of the GEMM-like ``op`` (traced at precision ``src``) at precision ``dst`` on
    ``gpu``: its time above its fixed part (:func:`gemm_fixed_s`) by the ceilings' ratio of
    its math precisions (read off its name; at ``dst`` bf16 for a half precision, else TF32
    where it ran TF32 and fp32 otherwise) times the ratio of its efficiency shares at the two
    (:func:`bf16_share` at bf16, 1 at fp32 and tf32), no less than its bytes at the new
    element size (half going to bf16, twice coming from it) over the bandwidth where the
    trace holds them; as traced where ``gpu`` lacks either ceiling."""
    p_src = math_precision(op, src)
    p_dst = "bf16" if is_half(dst) else ("tf32" if p_src == "tf32" else "fp32")
    a, b = gpu.gemm(p_src), gpu.gemm(p_dst)
    if not (a and b):
        return op.dur_s
    direction = int(p_dst == "bf16") - int(p_src == "bf16")
    floor = min(op.dur_s, gemm_fixed_s(op, direction))
    share = {"bf16": bf16_share(op)}  # of the kernel's fp32 efficiency, by math precision
    t = (op.dur_s - floor) * (a / b * share.get(p_src, 1.0) / share.get(p_dst, 1.0))
    if op.bytes:  # the roofline: no faster than its bytes at the new precision
        t = max(t, op.bytes * 2.0 ** -direction / gpu.bandwidth_bytes_per_s)
    return (floor + t) * GEMM_HELPERS.get(direction, {}).get(op.op_class or "", 1.0)


def kernel_to_precision(op: DeviceOp, src: str, dst: str, gpu: GpuProfile,
                        alias: Mapping[str, str] = _NO_ALIAS) -> float:
    """Duration of ``op`` (traced at precision ``src``) at precision ``dst`` on ``gpu``: a
    GEMM-like kernel by :func:`gemm_to_precision`; another kernel's time above its fixed part
    by its :func:`precision_ratio` (its op class taken as ``alias`` maps it), inverted going
    to fp32, unchanged between two full (or two half) precisions (a convolution's non-GEMM
    kernels are dropped going to bf16 by :func:`to_precision`, not here)."""
    if src == dst:
        return op.dur_s
    if is_gemm(op):
        return gemm_to_precision(op, src, dst, gpu)
    step = precision_step(src, dst)
    if step == 0:
        return op.dur_s
    fixed, r = precision_ratio(op, alias)
    floor = min(op.dur_s, fixed)
    return floor + _OTHER_STEP[step](op.dur_s - floor, r)


#: An eager program's untraced host time under bf16 autocast / at fp32: the median over the
#: development torch eager models of calibration2.db of their median bf16 host probe over
#: their median fp32 one (transformer 0.98, fcn5 1.12, fcn_mnist 1.14, lstm 1.16,
#: alexnet_cifar 1.22, resnet50 1.32, gpt2_small 1.63; benchmarks/replay_kernels.py, part 6).
#: Their host levels (:func:`~dlperf.perfmodel.replay.host_level`) give 1.19 on the H200 and
#: 1.10 on the H100's development models (vgg16 0.79: its fp32 convolutions' helper
#: launches), 1.14 over both; the probes 1.16 and 1.09.
AUTOCAST_HOST = 1.16


def autocast_host(step: StepTrace) -> float:
    """The factor by which bf16 autocast multiplies the host work of ``step``'s program:
    :data:`AUTOCAST_HOST` for an eager program, 1 for a compiled one (an XLA program, or a
    torch.compile graph, ``meta['mode'] == 'graph'``: the casts are in the graph, not
    dispatched operator by operator).

    Autocast dispatches more operators (the casts of GEMM operands and their backward): a
    torch eager bf16 step runs 1.4-2.5x the fp32 step's ATen operators (``ops_per_step`` on
    calibration2.db), each through the dispatcher (docs/perfmodel.md: the host is per
    operator), but the casts are cheaper than the average operator: the untraced host probes
    give the whole step's host 1.16x (an added host cost per cast, 16 or 40 us, gave the
    fp32 -> bf16 development rows of calibration2.db 10.8% and 12.7% median error against
    10.0% without: the factor already covers the casts' dispatch)."""
    return AUTOCAST_HOST if is_eager(step) else 1.0


def is_eager(step: StepTrace) -> bool:
    """True for an eager program's trace: neither an XLA program (``meta['xla']``) nor a
    torch.compile graph (``meta['mode'] == 'graph'``)."""
    return not (step.meta.get("xla") or step.meta.get("mode") == "graph")


def is_conv_helper(op: DeviceOp) -> bool:
    """True for a library kernel of a convolution that is not its GEMM (op class
    ``convolution``): cuDNN's fp32 FFT and Winograd transforms, layout conversions and split
    reductions around the GEMM. The framework's own kernels of the operator (PyTorch's
    ``at::native`` bias addition and bias-gradient reduction, an XLA fusion, a TorchInductor
    kernel, :data:`_FRAMEWORK_KERNEL`) are not: they run
    in both precisions (vgg16's on the H100, the only development model with convolution
    biases: 15.5 ms at fp32 and 15.3 ms at bf16 over its three traced batches,
    benchmarks/replay_kernels.py, part 5)."""
    return (op.kind == "kernel" and op.op_class == "convolution" and not is_gemm(op)
            and not _FRAMEWORK_KERNEL.search(op.name))


#: A kernel the framework generated or owns rather than the convolution library: PyTorch's
#: ``at::native`` kernels, an XLA fusion, a TorchInductor kernel (``triton_...``).
_FRAMEWORK_KERNEL = re.compile(r"at::native|fusion|^triton_")


def drop_conv_helpers(step: StepTrace) -> StepTrace:
    """``step`` without its convolutions' library helper kernels (:func:`is_conv_helper`), as
    at bf16: cuDNN and XLA's bf16 convolutions run their tensor-core kernels without them. On
    the development points traced in both precisions what remains of them at bf16 is 4% of
    their fp32 time in torch eager (ConvolutionBackward0: 14.9 -> 0.56 ms, 643 -> 170
    kernels) and 2% in XLA programs (22.8 -> 0.40 ms), while the GEMM kernels keep their
    count. An XLA program loses the launches left without a kernel, and their share of the
    host (its host is spread over launches, :func:`~dlperf.perfmodel.replay.deinflate`; the
    development resnet50 XLA programs launch 0.53x as often at bf16 and probe 0.64x the
    host); a PyTorch program keeps its launches: :data:`AUTOCAST_HOST` is the net of the
    helpers' launches gone and the casts' and batch norms' added (dropping the helpers'
    launch calls and their work inside the operator, then re-deriving the factor, 1.16
    again, gave fp32 -> bf16 8.4% on the H200 development rows and 6.4% on the H100's,
    against 7.4% and 6.7%: the convolution nets' bf16 host grows by more than the others')."""
    ops = _without(step.ops, is_conv_helper)
    launches = step.launches
    if step.meta.get("xla"):
        used = sorted({o.launch for o in ops})
        new = {old: i for i, old in enumerate(used)}
        ops = [replace(o, launch=new[o.launch]) for o in ops]
        launches = tuple(step.launches[i] for i in used)
    return replace(step, ops=tuple(ops), launches=launches)


#: Bytes autocast moves per parameter to cast the fp32 weights to bf16 once per step (read 4,
#: write 2): on the development points whose casts are all weight casts (fcn5 in torch eager
#: and in JAX, fcn_mnist) the forward casts take 1.03-1.27x ``params x 6 / bandwidth`` at
#: every batch (H200; benchmarks/replay_kernels.py, part 8).
WEIGHT_CAST_BYTES = 6.0
#: Bytes per parameter of eager autograd's casts of the weight gradients back to fp32
#: (``ToCopyBackward0``, one per weight cast): 2.1-2.4x ``params x 6 / bandwidth`` on the same
#: points (a compiled program fuses them: fcn5's JAX backward has none).
WEIGHT_GRAD_CAST_BYTES = 12.0


def cast_times(step: StepTrace, gpu: GpuProfile, n_fwd: int, n_bwd: int
               ) -> tuple[float | None, float | None]:
    """Duration (s) of each of the ``n_fwd`` forward casts and ``n_bwd`` backward casts bf16
    autocast adds to ``step``: :data:`KERNEL_FLOOR_S` plus an even share of the model's
    parameters (``meta['params']``) x :data:`WEIGHT_CAST_BYTES` (forward) or
    :data:`WEIGHT_GRAD_CAST_BYTES` (backward, eager programs only: 0 for a compiled one) over
    ``gpu``'s bandwidth; ``(None, None)`` where the parameter count is unknown."""
    params = step.meta.get("params")
    if not params:
        return None, None
    bw = gpu.bandwidth_bytes_per_s
    fwd = KERNEL_FLOOR_S + params * WEIGHT_CAST_BYTES / bw / max(1, n_fwd)
    bwd = KERNEL_FLOOR_S + params * WEIGHT_GRAD_CAST_BYTES / bw / max(1, n_bwd) \
        if is_eager(step) else 0.0
    return fwd, bwd


#: Forward operators whose output autocast leaves in float32 (PyTorch, "Automatic Mixed
#: Precision package - torch.amp", "CUDA Ops that can autocast to float32": ``layer_norm``,
#: ``group_norm``, ``softmax``, ``log_softmax`` among them) and the embedding, which no list
#: names and which runs in its float32 weight's type: a GEMM fed from one of them gets its
#: input cast to bf16 (one kernel), and in backward autograd casts that input's gradient
#: back to float32 (``ToCopyBackward0``). A GEMM fed from another GEMM (the lower-precision
#: list: ``linear``, ``matmul``, convolutions, attention) reads bf16 and needs no cast.
AUTOCAST_FP32_OPS = re.compile(r"layer_norm|group_norm|softmax|embedding", re.I)
#: Bytes per element of a cast down to bf16 (read 4, write 2: PyTorch's vectorized
#: ``bfloat16_copy_kernel_cuda``) and of a cast up to float32 (``direct_copy_kernel_cuda``,
#: unrolled: it moves its 6 bytes at half the bandwidth). The same figures per parameter as
#: :data:`WEIGHT_CAST_BYTES` and :data:`WEIGHT_GRAD_CAST_BYTES`; on the development GPT-2
#: points the logits' upcast in forward takes 1.00-1.02x ``12 B`` a logit over the H200's
#: bandwidth and its gradient's downcast 0.96-1.02x ``6 B`` (benchmarks/replay_kernels.py,
#: part 9).
DOWNCAST_BYTES = WEIGHT_CAST_BYTES
UPCAST_BYTES = WEIGHT_GRAD_CAST_BYTES
#: A loss's own kernels at bf16 / at fp32 where autocast's upcast of its logits is a kernel of
#: its own (:func:`activation_casts`): summed over the development torch eager points traced
#: in both precisions, 0.477 on the H200 and 0.471 / 0.484 on the H100's two files
#: (:data:`PRECISION_RATIO`'s 0.8 for losses is the same operators with the upcast kernel in
#: them: 0.81 / 0.72-0.75; benchmarks/replay_kernels.py, part 9).
LOSS_KERNELS_BF16 = 0.48


@dataclass(frozen=True)
class ActivationCasts:
    """The activation casts bf16 autocast adds to an eager step (:func:`activation_casts`).

    Attributes:
        fwd: op index of a forward GEMM kernel -> bytes of its input's cast to bf16.
        loss_at: op index of the first forward kernel of the loss whose bf16 logits autocast
            casts up (None where the trace holds no loss with bytes).
        loss_bytes: bytes of that upcast (the logits x :data:`UPCAST_BYTES`).
        bwd_bytes: bytes of the backward casts: the cast-in activations' gradients back to
            float32, the logits' gradient down to bf16, and the gradients of mixed adds
            (float32 + bf16) down to bf16.
        bwd_kernels: how many backward cast kernels those are.
    """

    fwd: dict[int, float] = field(default_factory=dict)
    loss_at: int | None = None
    loss_bytes: float = 0.0
    bwd_bytes: float = 0.0
    bwd_kernels: int = 0


def _gemm_input_elems(ks: Sequence[DeviceOp], batch: int) -> float | None:
    """Elements of the activation input (``m x k``) of the matmul call of kernels ``ks``
    (traced at fp32): its shape from its FLOPs and bytes (:func:`gemm_dims` at 4 B, the
    rows ``m`` a multiple of ``batch``; the median over the shapes that fit), None where
    the trace holds no figures or they give no such shape."""
    g = [k for k in ks if is_gemm(k) and k.flops and k.bytes]
    if not g or batch <= 0:
        return None
    fl, nb = round(sum(k.flops or 0.0 for k in g)), round(sum(k.bytes or 0.0 for k in g))
    try:
        dims = gemm_dims(fl, nb, 4)
    except ValueError:
        return None
    mk = sorted(m * k for m, _, k in dims if m % batch == 0)
    return float(mk[len(mk) // 2]) if mk else None


#: autocast's walk over an eager step's forward calls (:func:`activation_casts`) as data: for
#: a call's role (:func:`_autocast_role`) and the dtype state its input is in, the state after
#: it and the cast autocast adds there (:data:`AUTOCAST_CASTS`); a state a role does not
#: name is kept, with no cast. The states: ``data`` the step's input (float32, no gradient),
#: ``bf16`` a GEMM's output with no float32 producer run yet, ``fp32`` a float32 op's output,
#: ``bf16+fp32`` a GEMM's output beside a float32 stream (a residual connection). The roles
#: follow PyTorch's op lists ("Automatic Mixed Precision package - torch.amp", "CUDA Ops
#: that can autocast to bfloat16/float16": ``linear``, ``matmul``, the convolutions, the RNN
#: cells, ``scaled_dot_product_attention``, one per GEMM op class of :data:`GEMM_CLASSES`;
#: "CUDA Ops that can autocast to float32": :data:`AUTOCAST_FP32_OPS` as ``fp32`` and the
#: losses, ``loss``, which read their logits in float32 and leave the stream's type as it
#: is) and type promotion (``aten::add`` of a bf16 tensor to the float32 stream gives
#: float32); other operators keep the type they are given. Only a matmul's float32 input is
#: sized (the other GEMM classes' inputs have no figures in most traces, and a network's
#: image is its only float32 convolution input). A compiled program (XLA, torch.compile)
#: fuses its casts and is not walked; a JAX model's layers run in the dtype it names
#: (:data:`PRECISION_CLASS_BY_FRAMEWORK`).
AUTOCAST_WALK: dict[str, dict[str, tuple[str, str]]] = {
    "matmul": {"data": ("bf16", "input"), "bf16": ("bf16", ""),
               "fp32": ("bf16+fp32", "input+grad"), "bf16+fp32": ("bf16+fp32", "")},
    "convolution": {"data": ("bf16", ""), "fp32": ("bf16+fp32", "")},
    "attention": {"data": ("bf16", ""), "fp32": ("bf16+fp32", "")},
    "recurrent": {"data": ("bf16", ""), "fp32": ("bf16+fp32", "")},
    "loss": {"bf16": ("bf16", "logits"), "bf16+fp32": ("bf16+fp32", "logits")},
    "fp32": {"data": ("fp32", ""), "bf16": ("fp32", ""), "fp32": ("fp32", ""),
             "bf16+fp32": ("fp32", "")},
    "aten::add": {"bf16+fp32": ("fp32", "add")}}
#: The casts of :data:`AUTOCAST_WALK` as ``(elements, forward bytes, backward bytes, backward
#: kernels)`` a call's kernels give: the elements from the call's figures (None or 0 where
#: the trace holds none: no cast), the bytes per element of the forward cast and of the
#: backward one. ``input``: a matmul's ``m x k`` input (:func:`_gemm_input_elems`) cast down,
#: the step's data's with no gradient to cast back; ``input+grad``: another float32 input's,
#: its gradient cast back up; ``logits``: a loss's bf16 logits (its recorded input bytes / 4,
#: the maximum over its kernels, each of which may repeat the operator's figures) cast up,
#: their gradient down; ``add``: a mixed ``add``'s bf16 input (its recorded bytes / 8), its
#: gradient down.
AUTOCAST_CASTS: dict[str, tuple[Callable[[Sequence[DeviceOp], int], float | None],
                                float, float, int]] = {
    "": (lambda ks, b: None, 0.0, 0.0, 0),
    "input": (_gemm_input_elems, DOWNCAST_BYTES, 0.0, 0),
    "input+grad": (_gemm_input_elems, DOWNCAST_BYTES, UPCAST_BYTES, 1),
    "logits": (lambda ks, b: max(o.bytes or 0.0 for o in ks) / 4, UPCAST_BYTES,
               DOWNCAST_BYTES, 1),
    "add": (lambda ks, b: sum(o.bytes or 0.0 for o in ks) / 8, 0.0, DOWNCAST_BYTES, 1)}


def _autocast_role(op: str, kernels: Sequence[DeviceOp]) -> str:
    """A forward call's role in :data:`AUTOCAST_WALK`: its GEMM op class where it launches a
    GEMM-like kernel (:func:`is_gemm`), ``loss``, ``fp32`` for :data:`AUTOCAST_FP32_OPS`,
    else the operator's name."""
    cls = kernels[0].op_class or ""
    if cls in GEMM_CLASSES and any(is_gemm(o) for o in kernels):
        return cls
    if cls == "loss":
        return cls
    return "fp32" if AUTOCAST_FP32_OPS.search(op) else op


def activation_casts(step: StepTrace) -> ActivationCasts:
    """The activation casts bf16 autocast adds to ``step`` (an eager fp32 trace), from its
    forward operators in launch order (consecutive kernels of one operator are one call),
    walked through :data:`AUTOCAST_WALK` from the state ``data``, each cast sized by
    :data:`AUTOCAST_CASTS`: a matmul's input cast joins its first GEMM kernel's forward
    cast (:attr:`ActivationCasts.fwd`), the first loss's logits' upcast is a kernel of its
    own (:attr:`ActivationCasts.loss_at`), the backward casts are summed.

    Figures recorded at another batch (the trace's before a batch transform,
    ``meta['figures_batch_size']``) are scaled to ``meta['batch_size']``. A matmul, loss or
    add whose trace holds no figures adds nothing."""
    batch = int(step.meta.get("batch_size") or 0)
    b_fig = int(step.meta.get("figures_batch_size") or batch)
    scale = batch / b_fig if b_fig > 0 else 1.0
    forward = [(i, o) for i, o in enumerate(step.ops)
               if o.kind == "kernel" and o.phase in (None, "t_f")]
    fwd: dict[int, float] = {}
    loss_at, loss_bytes, bwd_bytes, bwd_kernels = None, 0.0, 0.0, 0
    state = "data"
    for op, call in itertools.groupby(forward, key=lambda io: io[1].op or ""):
        ks = list(call)  # one call: consecutive kernels of the operator ``op``
        kernels = [o for _, o in ks]
        state, cast = AUTOCAST_WALK.get(_autocast_role(op, kernels), {}).get(state,
                                                                             (state, ""))
        elems, fwd_b, bwd_b, n_bwd = AUTOCAST_CASTS[cast]
        n = elems(kernels, b_fig)
        if not n or (cast == "logits" and loss_at is not None):
            continue
        if cast == "logits":
            loss_at, loss_bytes = ks[0][0], n * scale * fwd_b
        elif fwd_b:
            fwd[next(i for i, o in ks if is_gemm(o))] = n * scale * fwd_b
        bwd_bytes += n * scale * bwd_b
        bwd_kernels += n_bwd
    return ActivationCasts(fwd, loss_at, loss_bytes, bwd_bytes, bwd_kernels)


def to_precision(step: StepTrace, dst: str, gpu: GpuProfile) -> StepTrace:
    """``step`` at precision ``dst`` on ``gpu``: each kernel by :func:`kernel_to_precision`,
    and autocast's own work by the direction of the change (:data:`AUTOCAST_STEP`): going to
    bf16 from fp32 :func:`add_autocast`, going to fp32 :func:`drop_autocast`, between two
    precisions of a kind :func:`same_kind`."""
    src = str(step.meta.get("precision") or "fp32")
    out, note = AUTOCAST_STEP[precision_step(src, dst)](step, src, dst, gpu)
    return out.with_note(f"precision {src} -> {dst}{note}", precision=dst)


#: Every op class weighed 1 (:func:`gemm_s`'s default).
_NO_WEIGHT: Mapping[str, float] = MappingProxyType({})


def gemm_s(ops: Sequence[DeviceOp], weight: Mapping[str, float] = _NO_WEIGHT) -> float:
    """Summed duration (s) of the GEMM-like kernels of ``ops`` (:func:`is_gemm`), each times
    its op class's ``weight`` (1 for a class it does not name)."""
    return sum(o.dur_s * weight.get(o.op_class or "", 1.0) for o in ops if is_gemm(o))


def gemm_weight_floor(step: StepTrace, ops: Sequence[DeviceOp], dst: str,
                      gpu: GpuProfile) -> float:
    """The factor (>= 1) on the GEMM-like kernels of ``ops`` (``step``'s ops moved to
    precision ``dst``, index for index) that keeps their summed time at or above the time
    their weights take to stream at ``dst``'s element size: ``min(W, T_src x e_dst /
    e_src)``, with ``W`` the parameters (``meta['params']``) x the element size x
    :data:`GEMM_WEIGHT_PASSES` over the bandwidth (the roofline of :func:`gemm_batch_factor`)
    and ``T_src`` the traced GEMMs' summed time (where the traced GEMMs ran faster than their
    ``W``, some parameters are not a GEMM's: embeddings, an XLA program's fused weights);
    1 where the parameter count is unknown or the traced step has no GEMM kernel.

    Each kernel's ceiling ratio (:func:`gemm_to_precision`) speeds a GEMM up by its
    arithmetic; a small batch's GEMMs stream their weights, which bf16 only halves: fcn5's
    GEMMs (118 M parameters, no FLOPs or bytes in the H200 file's trace) take 0.19-0.24 ms
    at bf16 on the H200 at batch 16-128 in JAX and 0.21-0.22 ms at 16-64 in torch eager,
    against ``3 x 118 M x 2 B / 4.23 TB/s = 0.17 ms``, while the ceiling ratio alone gives
    0.07-0.14 ms (benchmarks/replay_kernels.py's kernel pairs). Every GEMM kernel takes the
    step's factor (the weights are the step's, not a kernel's)."""
    params = step.meta.get("params")
    t_src, t_dst = gemm_s(step.ops), gemm_s(ops)
    if not (params and t_src > 0 and t_dst > 0):
        return 1.0
    e_src, e_dst = elem_bytes(step.meta.get("precision")), elem_bytes(dst)
    w = GEMM_WEIGHT_PASSES * params * e_dst / gpu.bandwidth_bytes_per_s
    return max(1.0, min(w, t_src * e_dst / e_src) / t_dst)


#: The share of the fp32 GEMM ceiling (square ``sgemm``, measured) a GEMM-like kernel of an
#: op class reaches at fp32, where it is not 1 (:func:`gemm_roofline_cap`): cuDNN's fp32
#: convolutions on the development resnet50 points traced in both precisions on the H200
#: run the step's FLOPs at 0.50-0.73 of it (batch 16-128, torch eager and JAX; a median
#: 0.61 of 8 points; benchmarks/replay_kernels.py, part 10). The fp32 matmuls of the large
#: development GEMMs reach 0.92-0.99 (gpt2_small), 1.07-1.20 (fcn5 in torch eager at batch 256-4096).
FP32_GEMM_EFFICIENCY = {"convolution": 0.6}


def gemm_roofline_cap(step: StepTrace, ops: Sequence[DeviceOp], dst: str,
                      gpu: GpuProfile) -> float:
    """The factor (<= 1) on the GEMM-like kernels of ``ops`` (``step``'s ops moved from bf16
    to the full precision ``dst``, index for index) that keeps their summed time at or below
    the traced GEMMs' time ``T`` with their roofline part moved to ``dst``: ``T - R_src +
    R_dst / e``, the roofline ``R`` (:func:`gemm_roofline_s`: weight bytes / bandwidth +
    FLOPs / GEMM ceiling) at each precision (the step's FLOPs
    ``meta['train_flops_per_sample']`` x the batch; ``R_src`` at most ``T``) and ``e`` the time-
    weighted :data:`FP32_GEMM_EFFICIENCY` of the traced GEMMs' op classes; 1 where the
    parameters, FLOPs or ceilings are unknown. :func:`drop_autocast` applies it, the one
    change from bf16 to a full precision.

    Each kernel's ceiling ratio (:func:`gemm_to_precision`) assumes its bf16 time is its
    arithmetic; a bf16 GEMM bound by its weights or by latency (fcn5 and fcn_mnist at small
    batches, alexnet_cifar's small convolutions, JAX's LSTM) runs its time above the roofline
    at fp32 as well, not 15x longer: on the development points traced in both precisions on
    the H200 the fp32 GEMMs take 1.7-16.5x the bf16 ones, the ceilings' ratio is 15.2x, and
    the bf16 GEMMs reach 0.02-1.38 of their roofline (benchmarks/replay_kernels.py, part 10).
    Going to bf16 the share (:func:`bf16_share`) and :func:`gemm_weight_floor` bound the
    GEMMs instead (bf16 kernels reach less of their ceiling than fp32 ones)."""
    src = str(step.meta.get("precision") or "fp32")
    params, fps = step.meta.get("params"), step.meta.get("train_flops_per_sample")
    flops = (fps or 0.0) * int(step.meta.get("batch_size") or 0)
    r_src = gemm_roofline_s(params, flops, src, gpu)
    r_dst = gemm_roofline_s(params, flops, dst, gpu)
    t_src, t_dst = gemm_s(step.ops), gemm_s(ops)
    if not (r_src and r_dst and t_dst):
        return 1.0
    e = gemm_s(step.ops, FP32_GEMM_EFFICIENCY) / t_src
    return min(1.0, (t_src - min(t_src, r_src) + r_dst / e) / t_dst)


#: Op classes whose kernels change with the precision as another class's do, by framework:
#: dlperf's JAX models run their norm layers in the compute dtype (``flax.linen.BatchNorm`` /
#: ``LayerNorm`` with ``dtype=bfloat16``, parameters float32: ``zoo/cnn/jax_impl.py``,
#: ``zoo/transformer/jax_impl.py``; Flax reduces the statistics in float32 and reads and
#: writes the activations in bf16), where PyTorch's autocast runs ``layer_norm`` in float32
#: and batch norm's forward at its fp32 time (:data:`PRECISION_RATIO`): a JAX norm kernel
#: moves half the bytes at bf16, as an elementwise kernel does. On the development JAX points
#: traced in both precisions on the H200 the normalisation kernels take 0.71-1.04 of their
#: fp32 time in backward and 0.85-1.28 in forward (resnet50 at batch 128 down to 16), 0.43
#: and 0.54 (transformer; benchmarks/replay_kernels.py, part 10): the elementwise rule's
#: fixed 4 us and 0.6 of the rest. With it the fp32 -> bf16 development rows of the
#: back-test read 4.7% against 6.0% (median), bf16 -> fp32 9.0% either way.
PRECISION_CLASS_BY_FRAMEWORK: dict[str, dict[str, str]] = {
    "jax": {"normalisation": "elementwise"}}


#: A bound on the GEMM-like kernels of a step moved to another precision: ``(step, its ops at
#: the new precision, the precision, the GPU) -> factor`` (:func:`gemm_weight_floor`,
#: :func:`gemm_roofline_cap`).
GemmBound = Callable[[StepTrace, Sequence[DeviceOp], str, GpuProfile], float]


def _rescaled(step: StepTrace, src: str, dst: str, gpu: GpuProfile,
              bounds: Sequence[GemmBound]) -> list[DeviceOp]:
    """The ops of ``step`` at precision ``dst`` (:func:`kernel_to_precision`, a kernel of an
    op class :data:`PRECISION_CLASS_BY_FRAMEWORK` names for the step's framework as one of
    the class it names), the GEMM-like kernels times the product of ``bounds`` (each no
    faster together than their weights' roofline, :func:`gemm_weight_floor`, and going to
    fp32 no slower than their roofline moved, :func:`gemm_roofline_cap`), index for index
    (what ``after`` refers to)."""
    alias = PRECISION_CLASS_BY_FRAMEWORK.get(str(step.meta.get("framework")), _NO_ALIAS)
    ops = [replace(o, dur_s=kernel_to_precision(o, src, dst, gpu, alias)) for o in step.ops]
    f = math.prod(bound(step, ops, dst, gpu) for bound in bounds)
    return [replace(o, dur_s=o.dur_s * f) if is_gemm(o) else o for o in ops]


def _with_host(out: StepTrace, f: float, note: str) -> tuple[StepTrace, str]:
    """``out`` with its host times ``f`` (autocast's, :func:`autocast_host`), said in
    ``note``; a compiled program's (``f`` 1) as it is."""
    if f != 1.0:
        return scale_host(out, f), note + f", host x{f:.3f} (autocast)"
    return out, note


def add_autocast(step: StepTrace, src: str, dst: str, gpu: GpuProfile
                 ) -> tuple[StepTrace, str]:
    """``step`` (full precision) under bf16 autocast, and what was done in words: the
    convolutions' non-GEMM kernels dropped (:func:`drop_conv_helpers`), each kernel by
    :func:`kernel_to_precision`, autocast's casts added and the host multiplied by
    :func:`autocast_host`.

    The casts: one before each forward GEMM kernel and, in an eager program, one after each
    backward GEMM kernel, issued with it, their durations from the parameter count
    (:func:`cast_times`; where it is unknown, a forward cast of :data:`KERNEL_FLOOR_S` plus
    its GEMM's bytes at 3/4, read fp32, write bf16, and no backward one). In an eager program
    also the activations' (:func:`activation_casts`, each :data:`KERNEL_FLOOR_S` plus its
    bytes over the bandwidth): a GEMM's input cast joins that GEMM's forward cast, the
    logits' upcast is a kernel before the loss (whose own kernels then take
    :data:`LOSS_KERNELS_BF16` of their fp32 time), and the backward ones are spread evenly
    over the backward casts. A compiled program (XLA, torch.compile) fuses its casts into
    its other kernels and gets the weights' only."""
    step = drop_conv_helpers(step)
    scaled = _rescaled(step, src, dst, gpu, (gemm_weight_floor,))
    fwd = [is_gemm(o) and o.phase in (None, "t_f") for o in scaled]
    bwd = [is_gemm(o) and o.phase == "t_b" for o in scaled]
    t_f, t_b = cast_times(step, gpu, sum(fwd), sum(bwd))
    bw = gpu.bandwidth_bytes_per_s
    ac = activation_casts(step) if is_eager(step) else ActivationCasts()
    # each backward GEMM's share of them (none is added without a backward GEMM)
    t_b_act = (ac.bwd_kernels * KERNEL_FLOOR_S + ac.bwd_bytes / bw) / max(1, sum(bwd))

    def cast(o: DeviceOp, dur: float, nbytes: float) -> DeviceOp:
        return replace(o, dur_s=dur, name="cast (autocast)", op_class="elementwise",
                       after=(), flops=0.0, bytes=nbytes, grid=None, block=None, align=None)

    def by_bytes(o: DeviceOp) -> DeviceOp:
        nbytes = (o.bytes or 0.0) * 0.75  # read fp32 (4 B), write bf16 (2 B)
        return cast(o, KERNEL_FLOOR_S + nbytes / bw, nbytes)

    def fwd_cast(i: int, o: DeviceOp) -> DeviceOp:
        if t_f is None:  # the GEMM's bytes: its activations' with its weights'
            return by_bytes(o)
        a = ac.fwd.get(i, 0.0)
        dur = t_f + (KERNEL_FLOOR_S + a / bw if a else 0.0)
        return cast(o, dur, (dur - KERNEL_FLOOR_S) * bw)

    tb = (t_b or 0.0) + t_b_act  # each backward cast's duration
    new: list[DeviceOp] = []
    for i, (o, f, b) in enumerate(zip(scaled, fwd, bwd)):
        if f:
            new.append(fwd_cast(i, o))
        if ac.loss_at is not None and o.op_class == "loss":  # never a GEMM-like kernel
            if i == ac.loss_at:
                new.append(cast(o, KERNEL_FLOOR_S + ac.loss_bytes / bw, ac.loss_bytes))
            o = replace(o, dur_s=step.ops[i].dur_s * LOSS_KERNELS_BF16)
            scaled[i] = o
        new.append(o)
        if b and tb:
            new.append(cast(o, tb, (tb - KERNEL_FLOOR_S) * bw))
    out = replace(step, ops=tuple(_reindex(scaled, new)))
    acts = f" ({len(ac.fwd)} activations'{', the logits' if ac.loss_at is not None else ''})" \
        if ac.fwd or ac.loss_at is not None else ""
    return _with_host(out, autocast_host(step), f", +{len(new) - len(scaled)} casts{acts}")


def drop_autocast(step: StepTrace, src: str, dst: str, gpu: GpuProfile
                  ) -> tuple[StepTrace, str]:
    """``step`` (under bf16 autocast) at full precision, and what was done in words: each
    kernel by :func:`kernel_to_precision`, the trace's cast kernels dropped
    (:func:`is_weight_cast`: autocast's, and an XLA program's ``convert`` fusions, which its
    fp32 programs do not run: 0.13-6.1 ms in the development JAX bf16 traces, 0.003 ms in
    their fp32 ones) and the host divided by :func:`autocast_host`."""
    keep = _without(_rescaled(step, src, dst, gpu, (gemm_weight_floor, gemm_roofline_cap)),
                    is_weight_cast)
    out = replace(step, ops=tuple(keep))
    return _with_host(out, 1.0 / autocast_host(step), f", -{len(step.ops) - len(keep)} casts")


def same_kind(step: StepTrace, src: str, dst: str, gpu: GpuProfile
              ) -> tuple[StepTrace, str]:
    """``step`` between two precisions of a kind (fp32 and tf32, or bf16 and fp16): each
    kernel by :func:`kernel_to_precision`, nothing added or dropped."""
    return replace(step, ops=tuple(_rescaled(step, src, dst, gpu, (gemm_weight_floor,)))), ""


#: What :func:`to_precision` does besides moving each kernel, by the direction of the change
#: (:func:`precision_step`).
AUTOCAST_STEP: dict[int, Callable[[StepTrace, str, str, GpuProfile],
                                  tuple[StepTrace, str]]] = {
    1: add_autocast, -1: drop_autocast, 0: same_kind}


def _is_cast(op: DeviceOp) -> bool:
    """A dtype conversion kernel of autocast: one launched by a GEMM op (the cast of an
    operand) or autograd's cast of a gradient back (``ToCopyBackward0``)."""
    return op.op == "ToCopyBackward0" or (
        op.op_class in GEMM_CLASSES and not is_gemm(op)
        and ("copy_kernel" in op.name or "cast" in op.name.lower()))


def _without(ops: Sequence[DeviceOp], drop: Callable[[DeviceOp], bool]) -> list[DeviceOp]:
    """``ops`` less those ``drop`` is true of, cross-lane dependencies renumbered
    (:func:`_reindex`)."""
    return _reindex(ops, [o for o in ops if not drop(o)])


def _reindex(old: Sequence[DeviceOp], new: Sequence[DeviceOp]) -> list[DeviceOp]:
    """``new`` (a subsequence of ``old`` with inserted ops) with cross-lane dependencies
    dropped where the op they named is gone and renumbered otherwise."""
    pos = {id(o): i for i, o in enumerate(new)}
    idx_of_old = {i: pos.get(id(o)) for i, o in enumerate(old)}
    return [replace(o, after=tuple(j for j in (idx_of_old.get(a) for a in o.after)
                                   if j is not None)) for o in new]


# --- batch size -----------------------------------------------------------------------------

#: The part of a kernel's time that does not grow with the batch (launch, ramp-up, drain, the
#: latency of a kernel too small to fill the GPU), chosen on the development rows of
#: calibration2.db (benchmarks/replay_validate.py, batch from one trace, ratios 1/2-2):
#: MdAPE XLA / torch 16.2 / 4.7% at 1 us, 10.8 / 4.5% at 2, 8.9 / 4.3% at 3, 9.7 / 3.8% at 5,
#: 10.0 / 4.1% at 8 us.
BATCH_FLOOR_S = 3e-6

#: Bytes of weights the GEMMs of a training step move per parameter and byte of element: the
#: forward reads each weight, the input gradient reads it again and the weight gradient
#: writes it (:func:`gemm_batch_factor`).
GEMM_WEIGHT_PASSES = 3


def is_weight_cast(op: DeviceOp) -> bool:
    """True for a precision cast a step makes of its weights: autocast's casts of a GEMM's
    operands and autograd's casts back (:func:`_is_cast`), an XLA ``convert`` fusion."""
    return op.kind == "kernel" and (_is_cast(op) or "convert" in op.name.lower())


def elem_bytes(precision: str | None) -> int:
    """Bytes of an element at ``precision``: 2 for a half precision (:func:`is_half`), else
    4."""
    return 2 if is_half(precision) else 4


def gemm_roofline_s(params: float | None, flops: float | None, precision: str | None,
                    gpu: GpuProfile) -> float | None:
    """A roofline of a training step's GEMMs (s): their weights' bytes over the bandwidth
    (``params`` x the element size of ``precision`` x :data:`GEMM_WEIGHT_PASSES`) plus their
    ``flops`` over ``gpu``'s GEMM ceiling at ``precision`` (else at fp32); None where the
    parameters, the FLOPs or the ceiling are unknown.

    The sum, not the larger of the two: a GEMM streaming its weights does not hide its
    arithmetic behind them, nor the other way. On the development fcn5 points of the H200 the
    fp32 GEMMs take ``0.32 + 0.0108 b`` ms from batch 16 to 128 in JAX (least squares; the
    weights alone 0.335 ms), and in torch eager the sum's ratios between its traced batches
    16, 64 and 256 are nearer the traced ones than the maximum's (2.2 and 3.2 for 1.6 and 2.8
    measured; the maximum 2.6 and 4.0); on the back-test (development rows of
    calibration2.db) batch from one trace
    reads 4.0% (1/2-2x) and 10.2% (further) against 4.1% and 12.3% with the maximum, bf16 ->
    fp32 8.2% against 9.0% (:func:`gemm_roofline_cap`)."""
    peak = gpu.gemm(str(precision or "fp32")) or gpu.gemm("fp32")
    if not (params and flops and peak):
        return None
    return (GEMM_WEIGHT_PASSES * params * elem_bytes(precision) / gpu.bandwidth_bytes_per_s
            + flops / peak)


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
    program, over the bandwidth: :func:`cast_times`) scales with the batch (the activations
    cast with them), the weights' part stays; the batch ratio where the parameter count is
    unknown. fcn5's casts take 0.17-0.21 ms forward and 0.35-0.39 ms backward at every batch
    from 16 to 1024 in torch eager on the H200 (``params x 6 / bandwidth`` is 0.17 ms)."""
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


# --- data parallel --------------------------------------------------------------------------

#: The lane of the inserted all-reduces (a stream of its own, as NCCL's and gloo's are).
COMM_LANE = -1


def to_data_parallel(step: StepTrace, bucket_bytes: Sequence[float],
                     allreduce_s: Callable[[float], float]) -> StepTrace:
    """``step`` (one device) with DDP's gradient all-reduces inserted, wait-free
    backpropagation (WFBP, Zhang et al. 2017; PyTorch DDP, Li et al. VLDB 2020):

    * bucket ``k`` (``bucket_bytes`` in reduction order: DDP fills buckets in reverse
      parameter order, which is the order backward produces gradients) is ready when the
      backward (phase ``t_b``) has run the share ``sum(bytes[:k+1]) / sum(bytes)`` of its
      device time: the first backward op past that share is its gradient-ready op;
    * its all-reduce (``allreduce_s(bytes)``: a measured all-reduce sweep or the link model,
      :mod:`dlperf.perfmodel.comm`) runs on :data:`COMM_LANE` after that op and after the
      previous bucket's all-reduce;
    * the ops after the backward (the optimizer) wait for the last all-reduce.

    Raises:
        ValueError: no bucket, or no backward op in the trace.
    """
    if not bucket_bytes:
        raise ValueError("no gradient bucket to all-reduce")
    ops = list(step.ops)
    back = [i for i, o in enumerate(ops) if o.phase == "t_b"]
    if not back:
        raise ValueError("the trace has no backward op (phase t_b): the gradients' ready times "
                         "are unknown")
    total_b = sum(ops[i].dur_s for i in back) or 1.0
    total_bytes = float(sum(bucket_bytes))
    # the backward's time up to and including each of its ops; a bucket's ready op is the
    # first whose sum reaches the bucket's share (the last op where rounding leaves none)
    upto = list(itertools.accumulate(ops[i].dur_s for i in back))
    ready = [back[min(bisect.bisect_left(upto, done / total_bytes * total_b - 1e-15),
                      len(back) - 1)]
             for done in itertools.accumulate(map(float, bucket_bytes))]
    # each all-reduce goes right after its ready op (``ready`` does not decrease): the ops'
    # indices once they are in, and the last all-reduce's
    buckets_at: dict[int, list[int]] = {}
    for k, i in enumerate(ready):
        buckets_at.setdefault(i, []).append(k)
    pos, n = [], 0
    for i in range(len(ops)):
        pos.append(n)
        n += 1 + len(buckets_at.get(i, ()))
    last_comm = pos[ready[-1]] + len(buckets_at[ready[-1]])
    out: list[DeviceOp] = []
    for i, o in enumerate(ops):
        after = tuple(pos[a] for a in o.after)
        if i > back[-1]:  # after the backward (every t_b op is at or before back[-1])
            after = (*after, last_comm)
        out.append(replace(o, after=after))
        out += [DeviceOp(lane=COMM_LANE, dur_s=allreduce_s(bucket_bytes[k]), kind="collective",
                         name=f"all-reduce bucket {k}", op_class="communication",
                         op="all_reduce", phase="t_b", launch=o.launch, after=(pos[i],),
                         bytes=bucket_bytes[k])
                for k in buckets_at.get(i, ())]
    return replace(step, ops=tuple(out)).with_note(
        f"data parallel: {len(bucket_bytes)} buckets, {total_bytes / 2**20:.1f} MiB all-reduced")
