"""What a kernel of a traced iteration is, for the transforms
(:mod:`dlperf.perfmodel.transforms`), read from the trace alone (no framework is named): a GEMM
or convolution kernel by its op class and name, its arithmetic precision by its name (cuBLAS,
cuDNN and CUTLASS name the math: ``sgemm``/``ffma`` FP32 SIMT, ``tf32``, ``bf16``/``f16``/
``hmma``/``wgmma`` tensor cores), a precision cast of the weights by its operator and name, a
program eager or compiled by the trace's ``meta``; the fixed cost every kernel has; and
kernels dropped from a trace with the cross-lane dependencies of the rest renumbered.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import replace

from dlperf.perfmodel.replay import DeviceOp, StepTrace

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


def is_weight_cast(op: DeviceOp) -> bool:
    """True for a precision cast a step makes of its weights: autocast's casts of a GEMM's
    operands and autograd's casts back (:func:`_is_cast`), an XLA ``convert`` fusion."""
    return op.kind == "kernel" and (_is_cast(op) or "convert" in op.name.lower())


def _is_cast(op: DeviceOp) -> bool:
    """A dtype conversion kernel of autocast: one launched by a GEMM op (the cast of an
    operand) or autograd's cast of a gradient back (``ToCopyBackward0``)."""
    return op.op == "ToCopyBackward0" or (
        op.op_class in GEMM_CLASSES and not is_gemm(op)
        and ("copy_kernel" in op.name or "cast" in op.name.lower()))


def is_half(precision: str | None) -> bool:
    """True for a half precision (``bf16``, ``fp16``)."""
    return precision in ("bf16", "fp16")


def is_eager(step: StepTrace) -> bool:
    """True for an eager program's trace: neither an XLA program (``meta['xla']``) nor a
    torch.compile graph (``meta['mode'] == 'graph'``)."""
    return not (step.meta.get("xla") or step.meta.get("mode") == "graph")


def without(ops: Sequence[DeviceOp], drop: Callable[[DeviceOp], bool]) -> list[DeviceOp]:
    """``ops`` less those ``drop`` is true of, cross-lane dependencies renumbered
    (:func:`reindex`)."""
    return reindex(ops, [o for o in ops if not drop(o)])


def reindex(old: Sequence[DeviceOp], new: Sequence[DeviceOp]) -> list[DeviceOp]:
    """``new`` (a subsequence of ``old`` with inserted ops) with cross-lane dependencies
    dropped where the op they named is gone and renumbered otherwise."""
    pos = {id(o): i for i, o in enumerate(new)}
    idx_of_old = {i: pos.get(id(o)) for i, o in enumerate(old)}
    return [replace(o, after=tuple(j for j in (idx_of_old.get(a) for a in o.after)
                                   if j is not None)) for o in new]
