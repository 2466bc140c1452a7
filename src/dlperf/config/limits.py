"""Sane limits of every quantity a user sizes, checked before any work starts.

A number that is valid in type but absurd in size made dlperf work for minutes, fill memory or
crash before saying anything (issue 40): a batch of 2^63 (an ``OverflowError`` when stored),
``--repeats 10^9`` (a list of 10^9 configurations, then the kernel's out-of-memory killer), a
grid of 10^6 points (minutes of validation), ``seed: 2**70`` (every PyTorch point a crash),
``hf:...?layers=10^23`` (gigabytes of modules built on the meta device). Each limit here is
far above any real benchmark and far below what breaks something; a value over it is refused
with the limit in the message (:func:`over`). The ``hf:`` model sizes have their own estimate
(:func:`dlperf.zoo.sources.hf.spec.check_sizes`), ``timm:`` options theirs
(:func:`dlperf.zoo.sources.timm.spec.check_option_sizes`), and ``dlperf data
make-imagefolder``'s images, classes and seed are bounded in :mod:`dlperf.data.imagefolder`
(modules this package imports, so they hold their own limits).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["MAX_BATCH", "MAX_GRAD_ACCUM", "MAX_SEED", "MAX_THREADS", "MAX_PROCESSES",
           "MAX_NODES", "MAX_WORKERS", "MAX_PREFETCH", "MAX_ITERS", "MAX_SECONDS",
           "MAX_REPEATS", "MAX_RUNS", "MAX_BUCKET_MB", "MAX_MESSAGE_BYTES",
           "MAX_AMORTISE_ITERS", "PROCESSES_PER_CPU", "MIN_LOCAL_PROCESSES", "over",
           "check_count", "check_seconds", "local_process_limit", "check_local_processes",
           "check_points_here"]

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
#: Iterations a one-off compile is amortised over (``predict --dai-table --amortise-iters``):
#: 10^12, far beyond any training run's steps.
MAX_AMORTISE_ITERS = 10**12
#: A DDP bucket, MiB (1 TiB).
MAX_BUCKET_MB = 2.0**20
#: One all-reduce message (``dlperf allreduce --max-bytes``), bytes: 1 TiB, above any
#: device's memory (the benchmark also checks it against this machine's memory).
MAX_MESSAGE_BYTES = 2**40
#: Processes one run may start per node on this machine where they are CPU processes (gloo,
#: the CPU all-reduce): this many per usable CPU, and at least :data:`MIN_LOCAL_PROCESSES`
#: (an 8-rank CPU run on a 2-CPU laptop is slow, not harmful). GPU processes: one per visible
#: GPU (:func:`local_process_limit`). ``--nproc 100000`` started over 2,000 processes before
#: the machine stopped answering.
PROCESSES_PER_CPU = 4
MIN_LOCAL_PROCESSES = 8


def over(value: object, limit: float, what: str) -> str | None:
    """The message for ``value`` over ``limit`` (``what``: the quantity, with its unit), or
    None when it is within."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > limit:
        shown = f"{value:.4g}" if isinstance(value, float) or value > 10**30 else f"{value:,}"
        return (f"{shown} is over dlperf's limit of {limit:,.0f} {what} "
                "(dlperf.config.limits: far above any real benchmark, below what breaks)")
    return None


def check_count(value: object, flag: str, limit: float, what: str, low: int = 0) -> None:
    """Refuse a whole-number flag or field ``flag`` outside ``low .. limit`` (``what``: what
    it counts), with the limit in the message.

    Raises:
        ConfigError: not an integer, below ``low`` or over ``limit``.
    """
    from dlperf.errors import ConfigError

    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{flag} {value!r}: give a whole number from {low:,} to {limit:,.0f}")
    if value < low:
        raise ConfigError(f"{flag} {value:,}: give a whole number from {low:,} to {limit:,.0f}")
    msg = over(value, limit, what)
    if msg:
        raise ConfigError(f"{flag}: {msg}")


def check_seconds(value: float, flag: str, *, low: float = 0.0) -> None:
    """Refuse a time in seconds ``flag`` that is not a finite number above ``low`` and at most
    :data:`MAX_SECONDS` (NaN passed every ``<`` and ``>`` test, so a wait with a NaN deadline
    never ended).

    Raises:
        ConfigError: naming the flag and the range.
    """
    import math

    from dlperf.errors import ConfigError

    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or not low < value <= MAX_SECONDS:
        raise ConfigError(f"{flag} {value!r}: give a number of seconds above {low:g} and at "
                          f"most {MAX_SECONDS:,.0f} (30 days; dlperf.config.limits)")


def local_process_limit(device: str, *, cpus: int | None = None,
                        gpus: int | None = -1) -> tuple[int, str]:
    """The most processes per node one run (or the all-reduce benchmark) may start on this
    machine, and why: on ``device`` ``cuda`` with GPUs visible, one per GPU (NCCL: a rank per
    device); otherwise (CPU processes, gloo; or no GPU here, where the points are stored
    unavailable) :data:`PROCESSES_PER_CPU` per usable CPU, at least
    :data:`MIN_LOCAL_PROCESSES`. ``cpus`` (usable CPUs) and ``gpus`` (visible GPUs; None:
    unknown) default to this machine's (its affinity,
    :func:`dlperf.nvml.visible_gpu_count`)."""
    if device == "cuda":
        if gpus == -1:
            from dlperf.nvml import visible_gpu_count

            gpus = visible_gpu_count()
        if gpus:
            return gpus, f"one process per GPU: this machine's CUDA sees {gpus} GPU(s)"
    if cpus is None:  # this process's usable CPUs (as dlperf.placement.usable_cpus counts)
        import os

        try:
            cpus = len(os.sched_getaffinity(0))
        except AttributeError:  # pragma: no cover - not Linux
            cpus = os.cpu_count() or 1
    limit = max(MIN_LOCAL_PROCESSES, PROCESSES_PER_CPU * cpus)
    return limit, (f"{PROCESSES_PER_CPU} CPU processes per usable CPU, {cpus} here, at least "
                   f"{MIN_LOCAL_PROCESSES}")


def check_local_processes(nproc: int, device: str, flag: str = "--nproc", **probe: int | None
                          ) -> None:
    """Refuse, before any process starts, ``nproc`` processes on this machine over
    :func:`local_process_limit` (``probe``: its ``cpus`` and ``gpus``).

    Raises:
        ConfigError: naming ``flag``, the value, the limit and why.
    """
    from dlperf.errors import ConfigError

    limit, why = local_process_limit(device, **probe)
    if nproc > limit:
        raise ConfigError(f"{flag} {nproc:,} is over this machine's limit of {limit:,} "
                          f"processes per node ({why}; dlperf.config.limits): nothing was "
                          f"started; give --nproc {limit} or fewer")


def check_points_here(points: Sequence[Any]) -> None:
    """Refuse, before any process starts, points that would start more processes per node
    than this machine takes: each point's ``nproc`` (:func:`check_local_processes` for its
    device), and the input-pipeline workers of all its ranks (``loader_workers x nproc``, CPU
    processes or threads) against the CPU limit. ``points``: run configs
    (:class:`~dlperf.config.RunConfig`).

    Raises:
        ConfigError: naming the point, the count, the limit and why.
    """
    from dlperf.errors import ConfigError

    widest: dict[str, Any] = {}
    for p in points:
        dev, n = p.hardware.device, p.parallel.nproc
        if n > 1 and n > (widest[dev].parallel.nproc if dev in widest else 1):
            widest[dev] = p
    for dev, p in widest.items():
        try:
            check_local_processes(p.parallel.nproc, dev, flag="--nproc")
        except ConfigError as e:
            raise ConfigError(f"{p.label()}: {e}") from None
    for p in points:
        workers = (p.input.loader_workers or 0) * p.parallel.nproc
        if workers <= 1:
            continue
        try:
            check_local_processes(workers, "cpu",
                                  flag="loader workers (--loader-workers x --nproc)")
        except ConfigError as e:
            raise ConfigError(f"{p.label()}: {str(e).replace('give --nproc', 'give')} loader "
                              "workers in all") from None
