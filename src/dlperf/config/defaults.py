"""Every default of a run's settings, written once: :class:`~dlperf.config.RunConfig`, its
sub-models and the flags of ``dlperf run`` read them from here.

Plain values, no pydantic: the CLI builds its flags from them at start-up without importing the
validation (``import dlperf.config.defaults`` loads this module alone).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ITERATIONS", "QUICK_ITERATIONS", "DDP", "RUN", "Iterations", "DDPDefaults",
           "RunDefaults", "DEFAULT_BATCH_SIZE", "DDP_BUCKET_CAP_MB"]

#: PyTorch DDP's own default gradient bucket size, MiB (``DistributedDataParallel(
#: bucket_cap_mb=25)``, torch/nn/parallel/distributed.py); also the bucket size the performance
#: model assumes for a DDP run that did not record its own.
DDP_BUCKET_CAP_MB = 25.0

#: The mini-batch of ``dlperf run`` without ``--batch-size`` (a suite may have its own:
#: ``dlperf.cli.run.SUITE_BATCH_SIZES``).
DEFAULT_BATCH_SIZE = 32


@dataclass(frozen=True)
class Iterations:
    """Defaults of :class:`~dlperf.config.IterationPolicy` (docs/measurement.md rules 3 and 5):
    iterations and seconds (s) to measure at least and at most, the warm-up window and its
    limits."""

    min_iters: int = 20
    min_time_s: float = 1.0
    max_iters: int = 100_000
    max_time_s: float = 60.0
    warmup_window: int = 5
    warmup_rel_tol: float = 0.05
    min_warmup_iters: int = 10
    max_warmup_iters: int = 500
    max_warmup_time_s: float = 20.0


#: The iteration policy's defaults.
ITERATIONS = Iterations()
#: The quick suite's (the README's main job on a laptop): shorter minimum time and warm-up.
QUICK_ITERATIONS = Iterations(min_time_s=0.5, max_warmup_time_s=5.0)


@dataclass(frozen=True)
class DDPDefaults:
    """PyTorch ``DistributedDataParallel``'s own defaults (:class:`~dlperf.config.DDPOptions`):
    bucket size in MiB; ``broadcast_buffers`` on, the rest off."""

    bucket_cap_mb: float = DDP_BUCKET_CAP_MB
    gradient_as_bucket_view: bool = False
    static_graph: bool = False
    find_unused_parameters: bool = False
    broadcast_buffers: bool = True


DDP = DDPDefaults()


@dataclass(frozen=True)
class RunDefaults:
    """Defaults of :class:`~dlperf.config.RunConfig`'s fields that ``dlperf run`` also offers as
    flags (times in s)."""

    framework: str = "torch"
    device: str = "cpu"
    precision: str = "fp32"
    grad_accum: int = 1
    data: str = "synthetic"
    cpu_bind: str = "none"
    layout: str = "auto"
    compile_mode: str = "default"
    optimizer_impl: str = "auto"
    timeout_s: float = 900.0
    loader_prefetch: int = 2
    loader_impl: str = "auto"
    input_bound_share: float = 0.10
    measure_ceilings: bool = True
    power_interval_s: float = 0.025
    nproc: int = 1
    nnodes: int = 1
    scaling: str = "strong"
    comm_profile_iters: int = 5


RUN = RunDefaults()
