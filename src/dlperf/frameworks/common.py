"""What every framework adapter shares: the memory record, the optimizer record and the
process's peak RSS (no framework imports here)."""

from __future__ import annotations

import resource
import sys
from typing import Any


def peak_rss_bytes() -> int:
    """This process's peak resident set size in bytes (``getrusage``: KiB on Linux, bytes on
    macOS)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)


def memory_record(peak_allocated_bytes: int | None = None, peak_reserved_bytes: int | None = None,
                  nvml_used_bytes: int | None = None) -> dict[str, int | None]:
    """The memory part of a result, in bytes, with the process's peak RSS filled in; the
    device fields are None where the framework cannot tell them (a CPU run)."""
    return {"peak_rss_bytes": peak_rss_bytes(), "peak_allocated_bytes": peak_allocated_bytes,
            "peak_reserved_bytes": peak_reserved_bytes, "nvml_used_bytes": nvml_used_bytes}


def optimizer_flags(o: Any, implementation: str = "default") -> dict[str, Any]:
    """The ``flags["optimizer"]`` record of a zoo :class:`~dlperf.zoo.spec.OptimizerSpec` ``o``
    (name, learning rate, momentum, weight decay; betas and eps for Adam/AdamW) and the
    framework's ``implementation`` of it (e.g. torch's ``foreach``)."""
    rec: dict[str, Any] = {"name": o.name, "lr": o.lr, "momentum": o.momentum,
                           "weight_decay": o.weight_decay, "foreach": implementation}
    if o.name != "sgd":
        rec.update(betas=list(o.betas), eps=o.eps)
    return rec
