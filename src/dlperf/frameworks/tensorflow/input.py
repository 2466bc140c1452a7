"""TensorFlow input: the run's batches (:func:`make_source`) and the ``tf.data`` pipeline.

Batches (:func:`make_source`, a :class:`~dlperf.frameworks.base.DataSource`):

* synthetic data: a pool of :data:`SYNTHETIC_POOL` distinct batches made on the device before
  timing (stateless RNG, seeded by ``cfg.workload.seed``; images NHWC), cycled;
* real data without a pipeline: batches from :func:`dlperf.data.make_batches` (images
  transposed NCHW -> NHWC once, on the host), at most :data:`MAX_REAL_BATCHES` of them, kept
  as host tensors; on a GPU each step copies its batch to the device (inside the iteration, as
  PyTorch's adapter does; TensorFlow has no pinned host tensors, so the copy is from pageable
  memory);
* real data through a pipeline (``--loader-workers N``, always for an ImageFolder): the
  ``tf.data`` pipeline below; the time the step waits for ``next(iterator)`` is recorded.

The pipeline (:func:`make_dataset`), on the host CPU:

* MNIST / CIFAR-10: ``from_tensor_slices((uint8 images, labels))``, shuffled over the whole data
  set each pass (``reshuffle_each_iteration``), repeated, mapped to normalised float32 (NHWC, or
  the flat vector of an FCN), batched with ``drop_remainder``;
* ImageFolder: ``from_tensor_slices((paths, labels))``, shuffled, repeated, mapped through
  ``tf.io.read_file`` -> a random crop drawn by ``tf.image.sample_distorted_bounding_box``
  (area 0.08..1, aspect 3/4..4/3, at least 10% of the image, 10 attempts) ->
  ``tf.io.decode_and_crop_jpeg`` (decodes only the crop) -> bilinear resize to the model's input
  -> ``tf.image.random_flip_left_right`` -> ImageNet normalisation: the ImageNet training
  preprocessing of the TensorFlow Model Garden (tensorflow/models, official ResNet
  ``preprocess_ops.random_crop_image`` / ``decode_and_random_crop``);
* token files: the LM batches of :func:`dlperf.data.make_batches`, in order, repeated.

Parallelism (recorded): with ``--loader-workers N`` > 0 the map runs with
``num_parallel_calls = tf.data.AUTOTUNE`` on a private thread pool of N threads
(``options.threading.private_threadpool_size``) and the batches are prefetched with
``prefetch(tf.data.AUTOTUNE)``; with 0 the map is sequential and nothing is prefetched, so each
batch is made inside ``next()``. Batches stay on the host; on a GPU the step copies them.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from dlperf.config import RunConfig
from dlperf.data import load_dataset, make_batches
from dlperf.data.batches import _check_fits
from dlperf.data.dataset import NORMALISATION
from dlperf.data.imagefolder import CROP_RATIO, CROP_SCALE, IMAGENET_MEAN, IMAGENET_STD
from dlperf.data.pipeline import DataWaitRecorder
from dlperf.errors import DataError, UnavailableError
from dlperf.frameworks.base import DataSource, identity
from dlperf.zoo.convert_keras import nchw_to_nhwc
from dlperf.zoo.spec import ModelSpec

#: Distinct synthetic batches made before timing and cycled.
SYNTHETIC_POOL = 4
#: Real data: at most this many distinct batches are kept on the host and cycled.
MAX_REAL_BATCHES = 512
#: Crop sampling of the TensorFlow Model Garden's ImageNet preprocessing.
MIN_OBJECT_COVERED = 0.1


def make_dataset(tf: Any, cfg: RunConfig, spec: ModelSpec, ds: Any, batch: int | None = None,
                 shard: tuple[int, int] | None = None) -> tuple[Any, dict[str, Any], Any]:
    """Return ``(next_batch, pipeline_info, close)``; ``next_batch()`` gives host ``(x, y)``.

    ``batch``: rows per batch (default ``cfg.global_batch``). ``shard = (W, i)`` (worker ``i``
    of ``W`` in a multi-worker run, ``batch`` = its rows): image sets take every ``W``-th sample
    from ``i`` of the shuffled, repeated stream (``Dataset.shard``, before decoding), so
    the ``W`` workers' ``j``-th batches hold the samples of the unsharded ``j``-th global batch
    of ``W * batch``; token batches take rows ``[i batch, (i + 1) batch)`` of each global
    batch."""

    B, workers, seed = batch or cfg.global_batch, cfg.input.loader_workers or 0, cfg.workload.seed
    W, index = shard or (1, 0)
    par = tf.data.AUTOTUNE if workers > 0 else None
    with tf.device("/CPU:0"):
        if ds.kind == "tokens":
            X, Y = make_batches(ds, spec, B * W)
            if W > 1:
                X, Y = X[:, index * B:(index + 1) * B], Y[:, index * B:(index + 1) * B]
            d = tf.data.Dataset.from_tensor_slices((X, Y)).repeat()
        else:
            _check_fits(ds, spec)
            n = int(ds.x.shape[0])
            if n < B * W:
                raise DataError(f"data set {ds.name!r} ({ds.path}) has {n} samples, too few for "
                                f"one batch of {B * W}: the largest batch size that works is {n}")
            d = tf.data.Dataset.from_tensor_slices((ds.x, ds.y)).shuffle(
                n, seed=seed, reshuffle_each_iteration=True).repeat()
            if W > 1:  # the same seeded order on every worker: each takes its samples
                d = d.shard(W, index)
            if ds.kind == "image":
                mean, std = (np.asarray(v, np.float32) for v in NORMALISATION[ds.name])
                vector = spec.input_kind != "image"

                def prep(x, y):
                    x = (tf.cast(x, tf.float32) / 255.0 - mean.reshape(-1, 1, 1)) \
                        / std.reshape(-1, 1, 1)  # [C, H, W]
                    if vector:  # the flat C*H*W vector, as make_batches gives it
                        return tf.reshape(x, spec.input_shape), y
                    return tf.transpose(x, [1, 2, 0]), y  # NHWC
            else:
                size = int(spec.input_shape[1])
                mean, std = np.asarray(IMAGENET_MEAN, np.float32), np.asarray(IMAGENET_STD, np.float32)
                whole = tf.constant([0.0, 0.0, 1.0, 1.0], tf.float32, shape=[1, 1, 4])

                def prep(path, y):
                    raw = tf.io.read_file(path)
                    begin, extent, _ = tf.image.sample_distorted_bounding_box(
                        tf.io.extract_jpeg_shape(raw), bounding_boxes=whole,
                        min_object_covered=MIN_OBJECT_COVERED, aspect_ratio_range=CROP_RATIO,
                        area_range=CROP_SCALE, max_attempts=10,
                        use_image_if_no_bounding_boxes=True)
                    oy, ox, _ = tf.unstack(begin)
                    h, w, _ = tf.unstack(extent)
                    img = tf.io.decode_and_crop_jpeg(raw, tf.stack([oy, ox, h, w]), channels=3)
                    img = tf.image.resize(img, [size, size], method="bilinear")
                    img = tf.image.random_flip_left_right(img)
                    return (img / 255.0 - mean) / std, y

            d = d.map(prep, num_parallel_calls=par).batch(B, drop_remainder=True)
        if workers > 0:
            d = d.prefetch(tf.data.AUTOTUNE)
        opts = tf.data.Options()
        opts.deterministic = True
        if workers > 0:
            opts.threading.private_threadpool_size = workers
        d = d.with_options(opts)
        it = iter(d)

    info = {"impl": "tf.data", "num_workers": workers,
            "map_num_parallel_calls": "AUTOTUNE" if workers > 0 else "sequential",
            "prefetch": "AUTOTUNE" if workers > 0 else None,
            "private_threadpool_size": workers or None, "deterministic": True,
            "shard": {"workers": W, "index": index} if W > 1 else None,
            "shuffle": "whole data set, reshuffled each pass" if ds.kind != "tokens" else None,
            "augment_impl": ("tf.image (sample_distorted_bounding_box, decode_and_crop_jpeg)"
                             if ds.kind == "imagefolder" else None)}

    def close() -> None:
        nonlocal it
        it = None

    return (lambda: next(it)), info, close


def make_source(tf: Any, cfg: RunConfig, spec: ModelSpec, dev: str, gpu: bool, impl: Any,
                rows: tuple[int, int] | None = None, on_host: bool = False) -> DataSource:
    """The run's :class:`~dlperf.frameworks.base.DataSource` (module docstring):
    ``next_batch()`` gives ``(x, y)``; ``to_device(fetch())`` gives the same in two parts (the
    batch as held, then placed on the run's device ``dev``), for the breakdown's t_io and
    t_h2d; ``first`` is the batch the step is traced for; ``wait`` is the recorder of a
    pipeline (else None).

    The batches are global batches (``cfg.global_batch`` rows; data parallel: split across
    the replicas by :func:`dlperf.frameworks.tensorflow.dist.distribute_source`), or with
    ``rows = (lo, hi)`` (a multi-worker process) rows ``[lo, hi)`` of each global batch:
    synthetic batches are drawn for the global batch and cut (the same samples as one process
    would train on), prepared real batches are cut on the host, and a ``tf.data`` pipeline is
    sharded (worker ``i`` of ``W`` takes every ``W``-th sample from ``i``, before decoding, so
    each global batch holds the same samples as without sharding). ``on_host``: synthetic
    batches are drawn on the host CPU (the caller places the replicas' rows on their devices),
    so no device holds a global batch.

    Raises:
        UnavailableError: a spec outside the default input contract whose implementation
            module ``impl`` has no ``synthetic_batch`` hook.
        DataError: the data set cannot feed this model (from :mod:`dlperf.data`).
    """
    if cfg.input.data == "synthetic":
        return _synthetic_source(tf, cfg, spec, dev, impl, rows, on_host)
    ds = load_dataset(cfg.input.data, cfg.input.data_dir)
    if cfg.input.loader_workers is not None or ds.kind == "imagefolder":
        return _pipeline_source(tf, cfg, spec, ds, gpu, rows)
    return _prepared_source(tf, cfg, spec, ds, dev, gpu, rows)


def _synthetic_source(tf: Any, cfg: RunConfig, spec: ModelSpec, dev: str, impl: Any,
                      rows: tuple[int, int] | None, on_host: bool) -> DataSource:
    """:data:`SYNTHETIC_POOL` seeded batches on ``dev`` (or the host CPU), cycled."""
    B = cfg.global_batch
    lo, hi = rows if rows is not None else (0, B)
    image = spec.input_kind == "image"
    hook = None
    if not getattr(spec, "default_io", True):
        hook = getattr(impl, "synthetic_batch", None)
        if hook is None:
            raise UnavailableError(f"{spec.name}: {impl.__name__} has no "
                                   f"synthetic_batch hook for {spec.input_kind} inputs")
    pool = []
    with tf.device("/CPU:0" if on_host else dev):
        for i in range(SYNTHETIC_POOL):
            x, y = _synthetic_batch(tf, spec, B, (cfg.workload.seed, 2 * i), (cfg.workload.seed, 2 * i + 1), hook)
            if rows is not None:  # this worker's rows only (a copy: the rest is freed)
                x, y = tf.identity(x[lo:hi]), tf.identity(y[lo:hi])
            pool.append((x, y))
    it = itertools.cycle(pool)
    info: dict[str, Any] = {"kind": "synthetic", "placement": "device",
                            "distinct_batches": SYNTHETIC_POOL,
                            "layout": "NHWC" if image else None}
    if on_host:
        info["drawn_on"] = "host, then the replicas' rows copied to their devices"
    if rows is not None:
        info["rows"] = f"[{lo}, {hi}) of each global batch of {B}"
    return DataSource(it.__next__, info, it.__next__, identity, first=pool[0])


def _synthetic_batch(tf: Any, spec: ModelSpec, B: int, sx: tuple[int, int],
                     sy: tuple[int, int], hook: Any) -> tuple[Any, Any]:
    """One synthetic ``(x, y)`` of ``B`` rows from the stateless seeds ``sx``, ``sy``: the
    implementation's ``hook(spec, B, sx)``, token ids, or normal inputs (images NHWC) and
    class labels."""
    if hook is not None:
        return hook(spec, B, sx)
    if spec.input_kind == "tokens":
        shape = (B, *spec.input_shape)
        return (tf.random.stateless_uniform(shape, sx, 0, spec.num_classes, tf.int64),
                tf.random.stateless_uniform(shape, sy, 0, spec.num_classes, tf.int64))
    c_h_w = tuple(spec.input_shape)
    shape = (B, *c_h_w[1:], c_h_w[0]) if spec.input_kind == "image" else (B, *c_h_w)
    return (tf.random.stateless_normal(shape, sx, dtype=tf.float32),
            tf.random.stateless_uniform((B,), sy, 0, spec.num_classes, tf.int64))


def _real_info(ds: Any) -> dict[str, Any]:
    """The head of a real data set's ``data_info``: kind, name and path."""
    return {"kind": "real", "dataset": ds.name, "path": str(ds.path)}


def _scalar_meta(ds: Any) -> dict[str, Any]:
    """The data set's metadata that is a plain scalar (stored in ``data_info``)."""
    return {k: v for k, v in ds.meta.items() if isinstance(v, (int, float, str, bool))}


def _pipeline_source(tf: Any, cfg: RunConfig, spec: ModelSpec, ds: Any, gpu: bool,
                     rows: tuple[int, int] | None) -> DataSource:
    """Batches from the ``tf.data`` pipeline (sharded for a multi-worker process), with the
    time the step waits for each recorded."""
    B = cfg.global_batch
    lo, hi = rows if rows is not None else (0, B)
    shard = None
    if rows is not None:
        shard = (B // (hi - lo), lo // (hi - lo))  # (workers, this worker's index)
    host_next, pipe, close = make_dataset(tf, cfg, spec, ds, batch=hi - lo, shard=shard)
    first = host_next()  # for tracing; not part of the recorded waits
    rec = DataWaitRecorder()
    info = {**_real_info(ds), "placement": "pipeline" + ("-host-pageable" if gpu else ""),
            "pipeline": pipe, "layout": "NHWC" if spec.input_kind == "image" else None,
            **_scalar_meta(ds)}
    nxt = rec.wrap(host_next)  # tf.data places the batches itself: no copy to split off
    return DataSource(nxt, info, nxt, identity, wait=rec, close=close, first=first)


def _prepared_source(tf: Any, cfg: RunConfig, spec: ModelSpec, ds: Any, dev: str, gpu: bool,
                     rows: tuple[int, int] | None) -> DataSource:
    """Up to :data:`MAX_REAL_BATCHES` batches of ``ds`` as host tensors, cycled; on a GPU
    ``to_device`` copies one to ``dev``."""
    B = cfg.global_batch
    image = spec.input_kind == "image"
    X, Y = make_batches(ds, spec, B, max_batches=MAX_REAL_BATCHES)
    if rows is not None:  # this worker's rows of every global batch
        X, Y = X[:, rows[0]:rows[1]], Y[:, rows[0]:rows[1]]
    if image:
        X = nchw_to_nhwc(X)  # [nb, B, C, H, W] -> [nb, B, H, W, C], once, on the host
    with tf.device("/CPU:0"):
        batches = [(tf.constant(X[i]), tf.constant(Y[i])) for i in range(X.shape[0])]
    it = itertools.cycle(batches)
    info = {**_real_info(ds), "placement": "host-pageable" if gpu else "host",
            "distinct_batches": int(X.shape[0]), "layout": "NHWC" if image else None,
            **({"rows": f"[{rows[0]}, {rows[1]}) of each global batch of {B}"} if rows else {}),
            **_scalar_meta(ds)}

    def to_device(b: tuple[Any, Any]) -> tuple[Any, Any]:
        # The step function places its inputs on its device; here the copy is explicit so
        # that it is its own phase (an identity on the CPU).
        if not gpu:
            return b
        with tf.device(dev):
            return tf.identity(b[0]), tf.identity(b[1])

    return DataSource(it.__next__, info, it.__next__, to_device, first=batches[0])
