"""JAX input pipeline: numpy batches made by Grain worker processes
(:class:`dlperf.data.grain_pipeline.GrainPipeline`), or by dlperf's host threads
(:class:`dlperf.data.pipeline.HostPipeline`), copied to the device ahead of the step.

What makes the batches (``cfg.loader_workers`` = N, ``cfg.loader_impl``):

* N = 0: the batch is made and copied on the calling thread (no overlap), whatever
  ``loader_impl`` says.
* ``processes`` (and ``auto`` where Grain is installed): N Grain worker processes make whole
  batches (decode, augment, stack, in shared memory); ``grain.experimental.device_put`` copies
  them to the device ``cfg.loader_prefetch`` deep. Grain is the JAX ecosystem's own loader, and
  processes do not hold the GIL that the training loop needs to dispatch its step.
* ``threads`` (and ``auto`` without Grain, with a warning in the result): N Python threads make
  batches and a feeder thread ``device_put``s them into a queue ``cfg.loader_prefetch`` deep,
  the way Flax's examples prefetch to the device.

Every implementation gives the same batches in the same order (batch k = stream positions
k*B .. k*B+B-1 of :class:`dlperf.data.pipeline.SampleSource`). Images are NHWC (the Flax models'
layout); JPEGs are decoded and augmented with Pillow (:func:`dlperf.data.imagefolder.
load_train_image`). ``data_info["pipeline"]`` records which implementation ran and its settings.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dlperf.config import RunConfig
from dlperf.data.grain_pipeline import (GRAIN_START_METHOD, THREADS_WARNING, GrainPipeline,
                                        import_grain)
from dlperf.data.pipeline import DataWaitRecorder, HostPipeline, SampleSource
from dlperf.errors import ConfigError
from dlperf.zoo.spec import ModelSpec

#: What ``loader_impl = "processes"`` says when Grain cannot be imported.
GRAIN_MISSING = ("loader_impl 'processes' runs JAX's loader workers as Grain processes, and "
                 "grain cannot be imported here ({err}); pip install grain (or "
                 "pip install 'dlperf[jax]'), or use --loader-impl threads")


def resolve_impl(cfg: RunConfig) -> tuple[str, str | None]:
    """What makes the batches of a JAX pipeline: ``("calling thread" | "processes" |
    "threads", warning or None)``; ``auto`` becomes ``processes`` where Grain imports.

    Raises:
        ConfigError: ``loader_impl`` is ``processes`` and Grain cannot be imported.
    """
    if not cfg.loader_workers:
        return "calling thread", None
    if cfg.loader_impl == "threads":
        return "threads", None
    try:
        import_grain()
    except ImportError as e:
        if cfg.loader_impl == "processes":
            raise ConfigError(GRAIN_MISSING.format(err=e)) from None
        return "threads", THREADS_WARNING
    return "processes", None


def make_pipeline(jax: Any, cfg: RunConfig, spec: ModelSpec, ds: Any, dev: Any,
                  int_ids: bool) -> tuple[Any, Any, dict[str, Any], DataWaitRecorder, Any]:
    """Return ``(next_batch, first_batch, pipeline_info, data_wait, close)``.

    ``next_batch()`` gives the next ``(x, y)`` device arrays (x float32 ``[B, H, W, C]`` or
    ``[B, ...]``, or int32 ids; y int32 ``[B, ...]``); ``first_batch`` (batch 0, made apart on
    the calling thread, for compiling the step) does not consume the stream. ``close()`` stops
    the workers and, for Grain, adds ``workers_alive_at_close`` and the observed start method to
    ``pipeline_info``. ``pipeline_info["warnings"]`` (a list, possibly empty) goes into the
    result's warnings.

    Raises:
        ConfigError: ``loader_impl`` is ``processes`` and Grain cannot be imported.
    """
    source = SampleSource(ds, spec, cfg.batch_size, layout="NHWC", seed=cfg.seed)
    xdt = np.int32 if int_ids else np.float32

    def make(k: int):
        x, y = source.batch(k)
        return np.ascontiguousarray(x, dtype=xdt), np.ascontiguousarray(y, dtype=np.int32)

    def put(b):
        return jax.device_put(b, dev)

    workers = cfg.loader_workers or 0
    impl, warning = resolve_impl(cfg)
    first = put(make(0))
    rec = DataWaitRecorder()
    info: dict[str, Any] = {
        "num_workers": workers, "loader_impl": cfg.loader_impl,
        "sampler": "endless (fresh permutation per pass)" if not source.per_batch
        else "endless, in order (LM batches)",
        "augment_impl": "dlperf (Pillow)" if source.kind == "imagefolder" else None,
        "items_per_pass": source.n, "warnings": [warning] if warning else []}
    if impl == "processes":
        pipe = GrainPipeline(source, workers, x_dtype=xdt, y_dtype=np.int32, device=dev,
                             worker_buffer=cfg.loader_prefetch, host_buffer=cfg.loader_prefetch,
                             device_buffer=cfg.loader_prefetch)
        info.update({
            "impl": f"grain {pipe.version} processes", "workers_kind": "processes",
            "start_method": GRAIN_START_METHOD, "batching": "in the workers (MapDataset.batch)",
            "read_options": {"num_threads": pipe.read_options.num_threads,
                             "prefetch_buffer_size": pipe.read_options.prefetch_buffer_size},
            "per_worker_buffer_size": pipe.mp_options.per_worker_buffer_size,
            "device_put": "grain.experimental.device_put (thread)",
            "host_buffer_size": pipe.host_buffer, "queue_depth": pipe.device_buffer})

        def close() -> None:
            pipe.close()
            seen = pipe.seen_at_close or []
            info["workers_alive_at_close"] = len(seen)
            methods = sorted({m for _, m in seen})
            if methods:
                info["start_method"] = ",".join(methods)

        return rec.wrap(pipe.next), first, info, rec, close
    hp = HostPipeline(make, put, workers=workers, depth=cfg.loader_prefetch)
    info.update({
        "impl": "dlperf HostPipeline threads" if workers
        else "dlperf HostPipeline (calling thread)",
        "workers_kind": "threads" if workers else None,
        "threads": "python threads" if workers else None,
        "device_put": "feeder thread" if workers else "step",
        "queue_depth": cfg.loader_prefetch if workers else None})
    return rec.wrap(hp.next), first, info, rec, hp.close
