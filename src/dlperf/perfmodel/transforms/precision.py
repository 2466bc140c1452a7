"""Another precision (:func:`to_precision`): fp32 <-> bf16 (and between two of a kind) kernel by
kernel, by the kernel's tensor-core eligibility (read off its name) and its memory-boundness,
the GEMMs together bounded by their weights' and FLOPs' roofline, and autocast's own work added
or dropped (:mod:`dlperf.perfmodel.transforms.autocast`).
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType

from dlperf.perfmodel.hardware import GpuProfile
from dlperf.perfmodel.replay import DeviceOp, StepTrace, scale_host
from dlperf.perfmodel.transforms.autocast import (
    LOSS_KERNELS_BF16,
    ActivationCasts,
    activation_casts,
    autocast_host,
    cast_times,
    drop_conv_helpers,
)
from dlperf.perfmodel.transforms.kernels import (
    KERNEL_FLOOR_S,
    is_eager,
    is_gemm,
    is_half,
    is_weight_cast,
    math_precision,
    reindex,
    without,
)
from dlperf.perfmodel.transforms.weights import (
    GEMM_WEIGHT_PASSES,
    elem_bytes,
    gemm_roofline_s,
)

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
#: (:func:`~dlperf.perfmodel.transforms.autocast.is_conv_helper`: the bias's) keep their
#: time (0.99). An XLA program's fusions do not match one to one across precisions; the same
#: table serves them (its values moved the JAX development rows of the precision back-test
#: by less than 0.2 points).
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
#: its fp32 library helper kernels (:func:`~dlperf.perfmodel.transforms.autocast.
#: is_conv_helper`: FFT and Winograd transforms, layout conversions), which
#: :func:`drop_conv_helpers` removes going to bf16 and a bf16 trace does not hold. On the
#: development points traced in both precisions on the H200 (benchmarks/replay_kernels.py,
#: part 10) the helpers take 0.007-0.40 of the fp32
#: convolution GEMMs' time, a median 0.16 over the 14 points (torch eager resnet50
#: 0.07-0.11, torch.compile 0.14-0.18, JAX 0.19-0.27, alexnet_cifar 0.01-0.40); 0.15 taken.
GEMM_HELPERS: dict[int, dict[str, float]] = {-1: {"convolution": 1.15}}


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
    :data:`GEMM_WEIGHT_PASSES` over the bandwidth (the weights' part of the roofline
    :func:`gemm_roofline_s`) and ``T_src`` the traced GEMMs' summed time (where the traced
    GEMMs ran faster than their ``W``, some parameters are not a GEMM's: embeddings, an XLA
    program's fused weights); 1 where the parameter count is unknown or the traced step has
    no GEMM kernel.

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
#: development GEMMs reach 0.92-0.99 (gpt2_small), 1.07-1.20 (fcn5 in torch eager at batch
#: 256-4096).
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
    out = replace(step, ops=tuple(reindex(scaled, new)))
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
    keep = without(_rescaled(step, src, dst, gpu, (gemm_weight_floor, gemm_roofline_cap)),
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


def to_precision(step: StepTrace, dst: str, gpu: GpuProfile) -> StepTrace:
    """``step`` at precision ``dst`` on ``gpu``: each kernel by :func:`kernel_to_precision`,
    and autocast's own work by the direction of the change (:data:`AUTOCAST_STEP`): going to
    bf16 from fp32 :func:`add_autocast`, going to fp32 :func:`drop_autocast`, between two
    precisions of a kind :func:`same_kind`."""
    src = str(step.meta.get("precision") or "fp32")
    out, note = AUTOCAST_STEP[precision_step(src, dst)](step, src, dst, gpu)
    return out.with_note(f"precision {src} -> {dst}{note}", precision=dst)
