"""Model FLOPs utilisation (MFU) and roofline numbers of one result: pure arithmetic.

MFU (Chowdhery et al. 2022, PaLM, appendix B) = achieved model FLOP/s / peak FLOP/s, where the
achieved rate counts the FLOPs the model needs (the analytic training FLOPs of the spec: forward
+ backward = ``3 x`` the forward FLOPs, Kaplan et al. 2020; zoo/spec.py) per sample, times
samples/s.
Recomputation and framework overheads do not count. Here the peak is the matmul ceiling
*measured in the same run* at the run's precision (:mod:`dlperf.measure.ceilings`);
``mfu_datasheet`` divides by the datasheet's dense peak instead, where known.

The framework's own FLOP count (PyTorch ``FlopCounterMode``, XLA's cost analysis, TensorFlow's
profiler) is reported beside the analytic one with its own utilisation, ``mfu_framework``.

Roofline (Williams, Waterman & Patterson 2009): arithmetic intensity ``I = FLOPs / bytes`` per
iteration, with bytes from the framework's estimate where it has one (XLA's "bytes accessed";
for PyTorch the sum of the operands and results of every ATen operator, an upper bound of the
DRAM traffic of unfused eager execution); attainable rate ``min(peak, I x bandwidth)``; the
ridge point ``peak / bandwidth`` separates memory-bound (left) from compute-bound (right).
"""

from __future__ import annotations

from typing import Any


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _product(a: float | None, b: float | None) -> float | None:
    return a * b if a is not None and b is not None else None


def mfu_summary(*, train_flops_per_sample: float | None, samples_per_s: float | None,
                precision: str | None, batch_size: int | None,
                ceilings: dict[str, Any] | None,
                datasheet: dict[str, Any] | None,
                framework_flops_per_step: float | None = None,
                bytes_per_step: float | None = None) -> dict[str, Any]:
    """MFU against the measured ceiling (and the datasheet), plus roofline numbers.

    Args:
        train_flops_per_sample: analytic training FLOPs of one sample (spec).
        samples_per_s: measured throughput.
        precision: ``fp32``, ``tf32`` or ``bf16`` (chooses the ceiling; None: unknown, no
            ceiling).
        batch_size: samples per iteration (to turn per-step counts into per-sample ones;
            None: unknown, no per-sample framework counts).
        ceilings: :func:`dlperf.measure.ceilings.measure_ceilings`'s result, or None.
        datasheet: :func:`dlperf.perfmodel.datasheet.datasheet_peaks`'s result, or None.
        framework_flops_per_step: the framework's FLOP count of one iteration, if any.
        bytes_per_step: the framework's estimate of bytes moved in one iteration, if any.

    Returns:
        ``achieved_flops_per_s``, ``ceiling_flops_per_s`` (measured, at ``precision``), ``mfu``,
        ``datasheet_flops_per_s``, ``mfu_datasheet``, ``framework_flops_per_sample``,
        ``framework_achieved_flops_per_s``, ``mfu_framework``, and ``roofline`` (``flops_per_step``,
        ``bytes_per_step``, ``intensity_flop_per_byte``, ``bandwidth_bytes_per_s``,
        ``ridge_flop_per_byte``, ``attainable_flops_per_s``, ``bound``: "memory" or "compute");
        a number that cannot be computed is None.
    """
    achieved = _product(train_flops_per_sample, samples_per_s)
    ceil = ((ceilings or {}).get("matmul_flops_per_s") or {}).get(precision)
    sheet = (datasheet or {}).get(precision) if precision is not None else None
    fw_per_sample = _ratio(framework_flops_per_step or None, batch_size)
    fw_achieved = _product(fw_per_sample, samples_per_s)
    bw = (ceilings or {}).get("bandwidth_bytes_per_s")
    step_flops = framework_flops_per_step or _product(train_flops_per_sample, batch_size)
    intensity = _ratio(step_flops, bytes_per_step)
    ridge = _ratio(ceil, bw)
    attainable = (min(ceil, intensity * bw) if intensity is not None and ceil and bw else None)
    return {
        "achieved_flops_per_s": achieved, "ceiling_flops_per_s": ceil,
        "ceiling_source": f"measured matmul {precision}" if ceil else None,
        "mfu": _ratio(achieved, ceil),
        "datasheet_flops_per_s": sheet, "mfu_datasheet": _ratio(achieved, sheet),
        "framework_flops_per_sample": fw_per_sample,
        "framework_achieved_flops_per_s": fw_achieved, "mfu_framework": _ratio(fw_achieved, ceil),
        "roofline": {"flops_per_step": step_flops, "bytes_per_step": bytes_per_step,
                     "intensity_flop_per_byte": intensity, "bandwidth_bytes_per_s": bw,
                     "ridge_flop_per_byte": ridge, "attainable_flops_per_s": attainable,
                     "bound": (None if intensity is None or ridge is None
                               else "memory" if intensity < ridge else "compute")},
    }
