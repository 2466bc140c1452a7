"""Sane limits of every quantity a user sizes, checked before any work starts.

A number that is valid in type but absurd in size made dlperf work for minutes, fill memory or
crash before saying anything (issue 40): a batch of 2^63 (an ``OverflowError`` when stored),
``--repeats 10^9`` (a list of 10^9 configurations, then the kernel's out-of-memory killer), a
grid of 10^6 points (minutes of validation), ``seed: 2**70`` (every PyTorch point a crash),
``hf:...?layers=10^23`` (gigabytes of modules built on the meta device). Each limit here is
far above any real benchmark and far below what breaks something; a value over it is refused
with the limit in the message (:func:`over`). The ``hf:`` model sizes have their own estimate
(:func:`dlperf.zoo.sources.hf.spec.check_sizes`).
"""

from __future__ import annotations

__all__ = ["MAX_BATCH", "MAX_GRAD_ACCUM", "MAX_SEED", "MAX_THREADS", "MAX_PROCESSES",
           "MAX_NODES", "MAX_WORKERS", "MAX_PREFETCH", "MAX_ITERS", "MAX_SECONDS",
           "MAX_REPEATS", "MAX_RUNS", "MAX_BUCKET_MB", "over"]

#: Samples per iteration (the global batch): 2^24. The largest published training batches are
#: about 2^16 sequences or images; one sample more than 2^24 fits no device's memory.
MAX_BATCH = 2**24
#: Micro-batches accumulated per optimizer step.
MAX_GRAD_ACCUM = 2**16
#: A random seed: 0 .. 2^32 - 1, what every framework's seeding takes (NumPy's legacy
#: ``np.random.seed`` and JAX's 32-bit keys the narrowest; ``torch.manual_seed`` refuses
#: values outside 64 bits, which made every PyTorch point a crash).
MAX_SEED = 2**32 - 1
#: CPU threads of one process.
MAX_THREADS = 4096
#: Processes (devices) per node.
MAX_PROCESSES = 1024
#: Nodes of a data-parallel run.
MAX_NODES = 65536
#: Input-pipeline workers of one process, and batches prefetched.
MAX_WORKERS = 1024
MAX_PREFETCH = 1024
#: Iterations in a measured segment or a warm-up (10^7: the raw samples of one run, 8 bytes
#: each, stay under 100 MB).
MAX_ITERS = 10**7
#: Any time budget or timeout in seconds: 30 days.
MAX_SECONDS = 30 * 86400.0
#: Runs of one point (``--repeats``, ``repeats:``).
MAX_REPEATS = 1000
#: Runs of one sweep or ``dlperf run`` (points x repeats), counted before the grid is built:
#: each run is a process of seconds to minutes, so 20,000 runs are days of measuring, and
#: validating them takes about 5 s of CPU (a grid of 10^6 took minutes before a word).
MAX_RUNS = 20_000
#: A DDP bucket, MiB (1 TiB).
MAX_BUCKET_MB = 2.0**20


def over(value: object, limit: float, what: str) -> str | None:
    """The message for ``value`` over ``limit`` (``what``: the quantity, with its unit), or
    None when it is within."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > limit:
        shown = f"{value:.4g}" if isinstance(value, float) or value > 10**15 else f"{value:,}"
        return (f"{shown} is over dlperf's limit of {limit:,.0f} {what} "
                "(dlperf.config.limits: far above any real benchmark, below what breaks)")
    return None
