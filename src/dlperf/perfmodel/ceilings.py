"""Hardware ceilings measured in the run itself: a matmul microbenchmark per precision and a
memory-bandwidth microbenchmark, on the run's device, with the run's framework.

MFU needs a ceiling, and datasheet peaks are not what a machine delivers (clocks, power caps,
library versions: docs/measurement.md measured 753 TFLOP/s bf16 against a 989 TFLOP/s dense datasheet
peak on one H200). So each worker process measures, once per framework and device (cached for
the life of the process), with the framework's own kernels:

* **matmul**: square ``n x n @ n x n`` products, ``2 n^3`` FLOPs each, for ``fp32`` (IEEE float32:
  TF32 explicitly off), ``tf32`` (float32 with TensorFloat-32 allowed) and ``bf16`` (bfloat16
  inputs and output, float32 accumulation); several sizes, the best rate counts (a GEMM reaches
  its peak only when large enough to fill the device; too large only costs time);
* **bandwidth**: ``y = 2 * x`` over a float32 array much larger than the last-level cache
  (STREAM's "scale" kernel, McCalpin 1995), counted as ``2 * nbytes`` moved (read + write).

Each kernel is timed on the host around ``reps`` back-to-back calls with one wait for the device
at the end (``block``), after warm-up calls (compilation, autotuning, allocation); ``reps`` grows
until the timed calls take ``target_s``. The kernels are large (milliseconds on a GPU), so the
host clock and one synchronisation add well under 1%.

Backends (``frameworks/*_probes.py``) provide :class:`CeilingBackend`; this module never imports
a framework.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from typing import Any, Protocol

MATMUL_PRECISIONS = ("fp32", "tf32", "bf16")

#: Sizes tried per device kind (ascending; larger ones are skipped once one call takes longer
#: than ``max_call_s``).
#: A CPU gets one size each (a 1024^3 GEMM already runs at the CPU's matmul rate; 128 MiB is
#: several times a server CPU's last-level cache) so that the probes cost well under a second.
MATMUL_SIZES = {"cuda": (2048, 4096, 8192), "cpu": (1024,)}
BANDWIDTH_BYTES = {"cuda": (256 * 2**20, 1024 * 2**20), "cpu": (128 * 2**20,)}
#: Timing target per kernel and size, and the longest single call worth trying a larger size.
TARGET_S = {"cuda": 0.05, "cpu": 0.05}
MAX_CALL_S = {"cuda": 0.25, "cpu": 0.15}
#: Untimed calls before timing (compilation, autotuning, first-touch of the pages).
WARMUP = {"cuda": 2, "cpu": 1}

_CACHE: dict[tuple[str, str], dict[str, Any]] = {}


class CeilingBackend(Protocol):
    """What a framework provides for the microbenchmarks."""

    framework: str
    device_kind: str  #: ``"cuda"`` or ``"cpu"``
    device_key: str   #: identifies the device for the cache, e.g. ``"cuda:0"``

    def precision(self, precision: str) -> contextlib.AbstractContextManager:
        """Context in which float32 matmuls run at ``precision`` (fp32: TF32 off; tf32: on)."""

    def matmul(self, n: int, precision: str) -> Callable[[], Any]:
        """Allocate two ``n x n`` operands (bfloat16 for ``bf16``, else float32); return a
        function that computes one product and returns it."""

    def scale(self, nbytes: int) -> Callable[[], Any]:
        """Allocate a float32 array of ``nbytes``; return a function computing ``2 * x``."""

    def block(self, out: Any) -> None:
        """Wait until ``out`` is computed."""

    def release(self) -> None:
        """Free what the kernels allocated (caches of the framework's allocator)."""


def time_calls(fn: Callable[[], Any], block: Callable[[Any], None], target_s: float,
               warmup: int = 2, max_reps: int = 50,
               clock: Callable[[], float] = time.perf_counter) -> tuple[float, int]:
    """Mean seconds per call of ``fn`` and the number of timed calls.

    ``warmup`` untimed calls, then one timed call to size the loop, then ``reps`` calls (at
    least 2, at most ``max_reps``, enough to take ``target_s``) timed together with one
    ``block`` at the end; the mean of those is returned.
    """
    for _ in range(warmup):
        block(fn())
    t0 = clock()
    block(fn())
    first = clock() - t0
    reps = max(2, min(max_reps, math.ceil(target_s / first - 1e-9) if first > 0 else max_reps))
    t0 = clock()
    out = None
    for _ in range(reps):
        out = fn()
    block(out)
    return (clock() - t0) / reps, reps


def _ladder(make: Callable[[int], Callable[[], Any]], sizes: tuple[int, ...],
            work: Callable[[int], float], backend: CeilingBackend, kind: str,
            clock: Callable[[], float]) -> dict[str, Any]:
    """Run ``make(size)`` for each size; ``work(size)`` = FLOPs or bytes per call."""
    rows: list[dict[str, Any]] = []
    error = None
    for size in sizes:
        try:
            fn = make(size)
            t, reps = time_calls(fn, backend.block, TARGET_S[kind], warmup=WARMUP[kind],
                                 clock=clock)
        except Exception as e:  # noqa: BLE001 - out of memory, unsupported dtype: recorded
            error = f"{type(e).__name__}: {str(e)[:200]}"
            break
        finally:
            fn = None  # noqa: F841 - drop the operands before the next size
        rows.append({"size": size, "s_per_call": t, "reps": reps, "rate": work(size) / t})
        if t > MAX_CALL_S[kind]:
            break
    best = max(rows, key=lambda r: r["rate"]) if rows else None
    return {"best": best["rate"] if best else None, "best_size": best["size"] if best else None,
            "runs": rows, "error": error}


def measure_ceilings(backend: CeilingBackend, precisions: tuple[str, ...] = MATMUL_PRECISIONS,
                     clock: Callable[[], float] = time.perf_counter,
                     use_cache: bool = True) -> dict[str, Any]:
    """Measure (or return this process's cached) matmul and bandwidth ceilings.

    Returns:
        ``{"framework", "device", "matmul_flops_per_s": {precision: best FLOP/s or None},
        "bandwidth_bytes_per_s": best bytes/s or None, "matmul": {precision: {"best",
        "best_size", "runs": [{"size", "s_per_call", "reps", "rate"}], "error"}},
        "bandwidth": {...same, size in bytes...}, "elapsed_s", "cached", "method"}``.
    """
    key = (backend.framework, backend.device_key)
    if use_cache and key in _CACHE:
        return {**_CACHE[key], "cached": True}
    kind = backend.device_kind
    t0 = clock()
    matmul: dict[str, Any] = {}
    for p in precisions:
        with backend.precision(p):
            matmul[p] = _ladder(lambda n, p=p: backend.matmul(n, p), MATMUL_SIZES[kind],
                                lambda n: 2.0 * n ** 3, backend, kind, clock)
        backend.release()
    bw = _ladder(backend.scale, BANDWIDTH_BYTES[kind], lambda b: 2.0 * b, backend, kind, clock)
    backend.release()
    out = {"framework": backend.framework, "device": backend.device_key,
           "matmul_flops_per_s": {p: matmul[p]["best"] for p in precisions},
           "bandwidth_bytes_per_s": bw["best"], "matmul": matmul, "bandwidth": bw,
           "elapsed_s": clock() - t0, "cached": False,
           "method": "square GEMM 2n^3 FLOPs, best over sizes; bandwidth y=2x (STREAM scale), "
                     "2 x bytes; host clock over back-to-back calls, one device wait"}
    if use_cache:
        _CACHE[key] = out
    return out

