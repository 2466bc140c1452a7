"""Collective-communication benchmarks (all-reduce in the manner of NVIDIA nccl-tests).

Names are loaded lazily so that ``python -m dlperf.comm.allreduce`` does not import the module
twice (runpy warns when the package has already imported it).
"""

from __future__ import annotations

from typing import Any

__all__ = ["algbw", "busbw", "message_sizes", "parse_size", "run_rank"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from dlperf.comm import allreduce

        return getattr(allreduce, name)
    raise AttributeError(f"module 'dlperf.comm' has no attribute {name!r}")
