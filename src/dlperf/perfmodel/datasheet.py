"""Datasheet peaks of accelerators: a reference beside the ceilings dlperf measures.

Dense numbers (no 2:4 structured sparsity): NVIDIA's datasheets give the Tensor Core rates
"with sparsity", which is twice the dense rate, so the dense rate is half the printed number.
MFU is computed against the *measured* ceilings (:mod:`dlperf.perfmodel.ceilings`); the
datasheet gives a second, fixed reference (``mfu_datasheet``).

Sources:

* H200 SXM and H200 NVL: NVIDIA H200 Tensor Core GPU datasheet / product page
  (https://www.nvidia.com/en-us/data-center/h200/), "Technical Specifications": FP32 67 (SXM) /
  60 (NVL) TFLOPS; TF32 Tensor Core 989 / 835 TFLOPS*; BF16 Tensor Core 1,979 / 1,671 TFLOPS*;
  GPU memory bandwidth 4.8 TB/s; "* With sparsity".
* H100 SXM: NVIDIA H100 Tensor Core GPU datasheet (https://www.nvidia.com/en-us/data-center/h100/):
  FP32 67 TFLOPS; TF32 Tensor Core 989 TFLOPS*; BF16 Tensor Core 1,979 TFLOPS*; 3.35 TB/s;
  "* With sparsity".
"""

from __future__ import annotations

from typing import Any

#: name -> (substrings that identify it in a device name, checked in order; peaks).
#: Peaks in FLOP/s per precision (fp32 = CUDA cores, TF32 off; tf32/bf16 = dense Tensor Core)
#: and memory bandwidth in bytes/s.
DATASHEET: dict[str, dict[str, Any]] = {
    "NVIDIA H200 NVL": {"match": ("H200 NVL",), "fp32": 60e12, "tf32": 835e12 / 2,
                        "bf16": 1671e12 / 2, "bandwidth_bytes_per_s": 4.8e12,
                        "source": "NVIDIA H200 datasheet (NVL column), dense = sparse / 2"},
    "NVIDIA H200 SXM": {"match": ("H200",), "fp32": 67e12, "tf32": 989e12 / 2,
                        "bf16": 1979e12 / 2, "bandwidth_bytes_per_s": 4.8e12,
                        "source": "NVIDIA H200 datasheet (SXM column), dense = sparse / 2"},
    "NVIDIA H100 SXM": {"match": ("H100 80GB HBM3", "H100 SXM"), "fp32": 67e12,
                        "tf32": 989e12 / 2, "bf16": 1979e12 / 2,
                        "bandwidth_bytes_per_s": 3.35e12,
                        "source": "NVIDIA H100 datasheet (SXM column), dense = sparse / 2"},
}


def datasheet_peaks(device_name: str | None) -> dict[str, Any] | None:
    """The datasheet entry whose ``match`` substrings occur in ``device_name`` (first match in
    table order, so the NVL variant wins over the SXM one), as ``{"name", "fp32", "tf32",
    "bf16", "bandwidth_bytes_per_s", "source"}``; None for unknown devices and CPUs."""
    if not device_name:
        return None
    for name, e in DATASHEET.items():
        if any(m in device_name for m in e["match"]):
            return {"name": name, **{k: v for k, v in e.items() if k != "match"}}
    return None
