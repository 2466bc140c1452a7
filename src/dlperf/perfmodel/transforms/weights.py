"""What a training step's weights cost, whatever its batch: the bytes its GEMMs stream per
parameter (with the step's FLOPs, its GEMM roofline: :func:`gemm_roofline_s`) and the bytes
autocast's casts of them move. The batch transform keeps this part of a step
(:mod:`dlperf.perfmodel.transforms.batch`); the precision transform moves it by the element
size (:mod:`dlperf.perfmodel.transforms.precision`).
"""

from __future__ import annotations

from dlperf.perfmodel.hardware import GpuProfile
from dlperf.perfmodel.transforms.kernels import (
    is_half,
)

#: Bytes autocast moves per parameter to cast the fp32 weights to bf16 once per step (read 4,
#: write 2): on the development points whose casts are all weight casts (fcn5 in torch eager
#: and in JAX, fcn_mnist) the forward casts take 1.03-1.27x ``params x 6 / bandwidth`` at
#: every batch (H200; benchmarks/replay_kernels.py, part 8).
WEIGHT_CAST_BYTES = 6.0
#: Bytes per parameter of eager autograd's casts of the weight gradients back to fp32
#: (``ToCopyBackward0``, one per weight cast): 2.1-2.4x ``params x 6 / bandwidth`` on the same
#: points (a compiled program fuses them: fcn5's JAX backward has none).
WEIGHT_GRAD_CAST_BYTES = 12.0


#: Bytes of weights the GEMMs of a training step move per parameter and byte of element: the
#: forward reads each weight, the input gradient reads it again and the weight gradient
#: writes it (:func:`~dlperf.perfmodel.transforms.batch.gemm_batch_factor`).
GEMM_WEIGHT_PASSES = 3


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
    fp32 8.2% against 9.0% (:func:`~dlperf.perfmodel.transforms.precision.gemm_roofline_cap`)."""
    peak = gpu.gemm(str(precision or "fp32")) or gpu.gemm("fp32")
    if not (params and flops and peak):
        return None
    return (GEMM_WEIGHT_PASSES * params * elem_bytes(precision) / gpu.bandwidth_bytes_per_s
            + flops / peak)
