"""Datasheet peaks of accelerators: a reference beside the ceilings dlperf measures.

A view of :data:`dlperf.perfmodel.hardware.DATASHEETS`, the one table of datasheet figures
(each cited there, with its form factor and datasheet page). Dense numbers (no 2:4 structured
sparsity): NVIDIA's datasheets give the Hopper and Ada Tensor Core rates "with sparsity",
twice the dense rate, so the dense rate is half the printed number. MFU is computed against
the *measured* ceilings (:mod:`dlperf.measure.ceilings`); the datasheet gives a second,
fixed reference (``mfu_datasheet``).
"""

from __future__ import annotations

from typing import Any

from dlperf.perfmodel.hardware import DATASHEETS, short_name


def datasheet_peaks(device_name: str | None) -> dict[str, Any] | None:
    """The datasheet peaks of the GPU ``device_name`` (a driver's device name such as
    ``NVIDIA H200`` or ``NVIDIA H200 NVL``, or any name
    :func:`dlperf.perfmodel.hardware.datasheet` takes, matched exactly:
    :func:`~dlperf.perfmodel.hardware.short_name`), as ``{"name", "form_factor", "fp32",
    "tf32", "bf16", "bandwidth_bytes_per_s", "source"}``: ``name`` the part with its form
    factor (``NVIDIA H200 SXM``), peaks in FLOP/s (``fp32``: CUDA cores, TF32 off; ``tf32``,
    ``bf16``: dense Tensor Core; None where the GPU lacks the precision), bandwidth in
    bytes/s. None for unknown devices and CPUs."""
    key = short_name(device_name)
    if key is None:
        return None
    p = DATASHEETS[key]
    return {"name": p.extra["label"], "form_factor": p.extra["form_factor"],
            **{prec: p.gemm_flops_per_s.get(prec) for prec in ("fp32", "tf32", "bf16")},
            "bandwidth_bytes_per_s": p.bandwidth_bytes_per_s, "source": p.source}
