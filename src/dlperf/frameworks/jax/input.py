"""Where a JAX run's batches come from (:func:`make_source`).

* synthetic data: a pool of :data:`SYNTHETIC_POOL` distinct batches made on the device before
  timing, cycled (data parallel: each device draws its own rows).
* real data, prepared: batches made on the host (pageable memory), at most
  :data:`MAX_REAL_BATCHES` distinct ones, cycled, and copied with ``jax.device_put`` inside each
  step, so the host-to-device copy is part of the iteration (data parallel: each process feeds
  its rows of every global batch).
* real data through a pipeline (``--loader-workers N``, always for an ImageFolder; below).

Layout: images are NHWC (the Flax CNNs' layout); synthetic images are made NHWC, real ones
transposed once on the host before the loop. Token ids are int32 (JAX's default, x64 off).

The pipeline: numpy batches made by Grain worker processes
(:class:`dlperf.data.grain_pipeline.GrainPipeline`), or by dlperf's host threads
(:class:`dlperf.data.pipeline.HostPipeline`), copied to the device ahead of the step.

What makes the batches (``cfg.input.loader_workers`` = N, ``cfg.input.loader_impl``):

* N = 0: the batch is made and copied on the calling thread (no overlap), whatever
  ``loader_impl`` says.
* ``processes`` (and ``auto`` where Grain is installed): N Grain worker processes make whole
  batches (decode, augment, stack, in shared memory); ``grain.experimental.device_put`` copies
  them to the device ``cfg.input.loader_prefetch`` deep. Grain is the JAX ecosystem's own loader, and
  processes do not hold the GIL that the training loop needs to dispatch its step.
* ``threads`` (and ``auto`` without Grain, with a warning in the result): N Python threads make
  batches and a feeder thread ``device_put``s them into a queue ``cfg.input.loader_prefetch`` deep,
  the way Flax's examples prefetch to the device.

Every implementation gives the same batches in the same order (batch k = stream positions
k*B .. k*B+B-1 of :class:`dlperf.data.pipeline.SampleSource`). Images are NHWC (the Flax models'
layout); JPEGs are decoded and augmented with Pillow (:func:`dlperf.data.imagefolder.
load_train_image`). ``data_info["pipeline"]`` records which implementation ran and its settings.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from dlperf.config import RunConfig
from dlperf.data import load_dataset, make_batches
from dlperf.data.grain_pipeline import (
    GRAIN_START_METHOD,
    THREADS_WARNING,
    GrainPipeline,
    import_grain,
)
from dlperf.data.pipeline import DataWaitRecorder, HostPipeline, SampleSource
from dlperf.errors import ConfigError, UnavailableError
from dlperf.frameworks.base import DataSource, identity
from dlperf.zoo.spec import ModelSpec

#: Synthetic data: distinct batches made on the device before timing, cycled.
SYNTHETIC_POOL = 4
#: Real data: at most this many distinct batches are kept on the host and cycled.
MAX_REAL_BATCHES = 512

#: What ``loader_impl = "processes"`` says when Grain cannot be imported.
GRAIN_MISSING = ("loader_impl 'processes' runs JAX's loader workers as Grain processes, and "
                 "grain cannot be imported here ({err}); {hint} (it brings grain), or use "
                 "--loader-impl threads")


def resolve_impl(cfg: RunConfig) -> tuple[str, str | None]:
    """What makes the batches of a JAX pipeline: ``("calling thread" | "processes" |
    "threads", warning or None)``; ``auto`` becomes ``processes`` where Grain imports.

    Raises:
        ConfigError: ``loader_impl`` is ``processes`` and Grain cannot be imported.
    """
    if not cfg.input.loader_workers:
        return "calling thread", None
    if cfg.input.loader_impl == "threads":
        return "threads", None
    try:
        import_grain()
    except ImportError as e:
        if cfg.input.loader_impl == "processes":
            from dlperf.install import install_hint

            raise ConfigError(GRAIN_MISSING.format(err=e, hint=install_hint("jax"))) from None
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
    source = SampleSource(ds, spec, cfg.workload.batch_size, layout="NHWC", seed=cfg.workload.seed)
    xdt = np.int32 if int_ids else np.float32

    def make(k: int):
        x, y = source.batch(k)
        return np.ascontiguousarray(x, dtype=xdt), np.ascontiguousarray(y, dtype=np.int32)

    def put(b):
        return jax.device_put(b, dev)

    workers = cfg.input.loader_workers or 0
    impl, warning = resolve_impl(cfg)
    first = put(make(0))
    rec = DataWaitRecorder()
    info: dict[str, Any] = {
        "num_workers": workers, "loader_impl": cfg.input.loader_impl,
        "sampler": "endless (fresh permutation per pass)" if not source.per_batch
        else "endless, in order (LM batches)",
        "augment_impl": "dlperf (Pillow)" if source.kind == "imagefolder" else None,
        "items_per_pass": source.n, "warnings": [warning] if warning else []}
    if impl == "processes":
        pipe = GrainPipeline(source, workers, x_dtype=xdt, y_dtype=np.int32, device=dev,
                             worker_buffer=cfg.input.loader_prefetch, host_buffer=cfg.input.loader_prefetch,
                             device_buffer=cfg.input.loader_prefetch)
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
    hp = HostPipeline(make, put, workers=workers, depth=cfg.input.loader_prefetch)
    info.update({
        "impl": "dlperf HostPipeline threads" if workers
        else "dlperf HostPipeline (calling thread)",
        "workers_kind": "threads" if workers else None,
        "threads": "python threads" if workers else None,
        "device_put": "feeder thread" if workers else "step",
        "queue_depth": cfg.input.loader_prefetch if workers else None})
    return rec.wrap(hp.next), first, info, rec, hp.close


def targets_shape(spec: ModelSpec) -> tuple[int, ...]:
    """Shape of one sample's integer target (``spec.targets`` where the spec has it)."""
    t = getattr(spec, "targets", None)
    if t is not None:
        return tuple(t)
    return tuple(spec.input_shape) if spec.input_kind == "tokens" else ()


def make_source(jax: Any, cfg: RunConfig, spec: ModelSpec, dev: Any, key: Any,
                in_shape: tuple[int, ...], in_dtype: Any, sharding: Any = None) -> DataSource:
    """The run's :class:`~dlperf.frameworks.base.DataSource`.

    ``next_batch()`` gives the ``(x, y)`` device arrays of one step: ``x`` ``[B, *in_shape]``
    (float32, or int32 token ids), ``y`` ``[B, *targets]`` int32; ``first`` is what the step
    is compiled for; ``arrays`` are the device arrays it holds (freed with the run);
    ``to_device(fetch())`` is ``next_batch()`` in two parts (the batch as held, then its copy
    to the device), for the breakdown's t_io and t_h2d; ``wait`` is the recorder of a
    pipeline (else None) and ``close`` stops the pipeline. ``B`` is the global batch; with a
    ``sharding`` (data parallel) the arrays are global arrays sharded over the devices, and
    each process holds (and, for real data, feeds) only its rows.

    Raises:
        UnavailableError: a pipeline (loader workers, ImageFolder) with data parallelism.
        ConfigError: ``loader_impl`` is ``processes`` and Grain cannot be imported.
    """
    if cfg.input.data == "synthetic":
        return _synthetic(jax, cfg, spec, dev, key, in_shape, in_dtype, sharding)
    ds = load_dataset(cfg.input.data, cfg.input.data_dir)
    int_ids = bool(jax.numpy.issubdtype(in_dtype, jax.numpy.integer))
    meta = {k: v for k, v in ds.meta.items() if isinstance(v, (int, float, str, bool))}
    layout = "NHWC" if spec.input_kind == "image" else None
    if cfg.input.loader_workers is not None or ds.kind == "imagefolder":
        if sharding is not None:
            raise UnavailableError("a JAX input pipeline (loader_workers, ImageFolder) with "
                                   "data parallelism is not built yet; use --nproc 1, or "
                                   "prepared batches (no --loader-workers)")
        nxt, first, pipe, rec, close = make_pipeline(jax, cfg, spec, ds, dev, int_ids=int_ids)
        info = {"kind": "real", "dataset": ds.name, "path": str(ds.path),
                "placement": "pipeline", "pipeline": pipe, "layout": layout, **meta}
        # The pipeline hands over device arrays: no separate copy step to split off.
        return DataSource(nxt, info, nxt, identity, wait=rec, close=close, first=first,
                          arrays=[first])
    src = _host_batches(jax, cfg, spec, ds, dev, int_ids, sharding)
    src.info.update({"layout": "NHWC (transposed on the host)" if layout else None, **meta})
    return src


def _batch_hook(spec: ModelSpec) -> Any:
    """The ``synthetic_batch(spec, B, key)`` hook of the implementation module of a spec with a
    ``custom`` loss (``file:`` and entry-point models), else None."""
    if getattr(spec, "loss", "ce") != "custom":
        return None
    import importlib

    from dlperf.zoo import impl_module

    return importlib.import_module(impl_module(spec.family, "jax")).synthetic_batch


def _synthetic(jax: Any, cfg: RunConfig, spec: ModelSpec, dev: Any, key: Any,
               in_shape: tuple[int, ...], in_dtype: Any, sharding: Any) -> DataSource:
    """:data:`SYNTHETIC_POOL` random batches made on the device (inputs normal, or ids in
    ``[0, classes)``; targets in ``[0, classes)``, ``[1, classes)`` for CTC: 0 is its blank)."""
    jnp = jax.numpy
    B, tgt = cfg.global_batch, targets_shape(spec)
    y_low = 1 if getattr(spec, "loss", "ce") == "ctc" else 0
    hook = _batch_hook(spec)

    def gen(kx, ky):
        if hook is not None:  # a model from a source makes its own batches
            return hook(spec, B, kx)
        if jnp.issubdtype(in_dtype, jnp.integer):
            x = jax.random.randint(kx, (B, *in_shape), 0, spec.num_classes, in_dtype)
        else:
            x = jax.random.normal(kx, (B, *in_shape), in_dtype)
        return x, jax.random.randint(ky, (B, *tgt), y_low, spec.num_classes, jnp.int32)

    if sharding is not None:  # each device draws its own rows
        gen_sharded = jax.jit(gen, out_shardings=(sharding, sharding))
    pool = []
    for _ in range(SYNTHETIC_POOL):
        key, kx, ky = jax.random.split(key, 3)
        pool.append(gen_sharded(kx, ky) if sharding is not None
                    else jax.device_put(gen(kx, ky), dev))
    jax.block_until_ready(pool)
    it = itertools.cycle(pool)
    info = {"kind": "synthetic", "placement": "device", "distinct_batches": SYNTHETIC_POOL,
            "layout": "NHWC" if spec.input_kind == "image" else None}
    return DataSource(it.__next__, info, it.__next__, identity, first=pool[0], arrays=pool)


def _host_batches(jax: Any, cfg: RunConfig, spec: ModelSpec, ds: Any, dev: Any, int_ids: bool,
                  sharding: Any) -> DataSource:
    """Prepared batches of ``ds`` on the host (this process's rows of each global batch under
    data parallelism; images NCHW -> NHWC once), copied to the device in each step."""
    B = cfg.global_batch
    X, Y = make_batches(ds, spec, B, max_batches=MAX_REAL_BATCHES)
    rows = None
    if sharding is not None:  # this process's rows of every global batch
        b = cfg.per_device_batch * len(sharding.addressable_devices)
        first_dev = min(sharding.addressable_devices_indices_map((B,)).values(),
                        key=lambda ix: ix[0].start or 0)[0].start or 0
        X, Y = X[:, first_dev:first_dev + b], Y[:, first_dev:first_dev + b]
        rows = f"[{first_dev}, {first_dev + b}) of each global batch of {B}"
    if spec.input_kind == "image":  # NCHW -> NHWC, once, on the host
        X = X.transpose(0, 1, 3, 4, 2)
    X = np.ascontiguousarray(X, dtype=np.int32 if int_ids else np.float32)
    Y = np.ascontiguousarray(Y, dtype=np.int32)
    batches = [(X[i], Y[i]) for i in range(X.shape[0])]
    it = itertools.cycle(batches)

    if sharding is not None:
        def put(batch):
            return tuple(jax.make_array_from_process_local_data(sharding, a) for a in batch)
    else:
        def put(batch):
            return jax.device_put(batch, dev)

    def next_batch():
        return put(next(it))

    first = put(batches[0])
    info = {"kind": "real", "dataset": ds.name, "path": str(ds.path), "placement": "host",
            "distinct_batches": int(X.shape[0]), "layout": None, **({"rows": rows} if rows else {})}
    return DataSource(next_batch, info, it.__next__, put, first=first, arrays=[first])
