"""TensorFlow input pipeline: ``tf.data`` (map / batch / prefetch), on the host CPU.

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

from typing import Any

import numpy as np

from dlperf.config import RunConfig
from dlperf.zoo.spec import ModelSpec

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
    from dlperf.data import make_batches
    from dlperf.data.dataset import NORMALISATION
    from dlperf.data.imagefolder import CROP_RATIO, CROP_SCALE, IMAGENET_MEAN, IMAGENET_STD
    from dlperf.errors import DataError

    B, workers, seed = batch or cfg.global_batch, cfg.loader_workers or 0, cfg.seed
    W, index = shard or (1, 0)
    par = tf.data.AUTOTUNE if workers > 0 else None
    with tf.device("/CPU:0"):
        if ds.kind == "tokens":
            X, Y = make_batches(ds, spec, B * W)
            if W > 1:
                X, Y = X[:, index * B:(index + 1) * B], Y[:, index * B:(index + 1) * B]
            d = tf.data.Dataset.from_tensor_slices((X, Y)).repeat()
        else:
            from dlperf.data.batches import _check_fits

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
