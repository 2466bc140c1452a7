"""JAX input pipeline: numpy batches made on host threads, copied with ``jax.device_put`` by a
feeder thread into a queue (:class:`dlperf.data.pipeline.HostPipeline`), the way Flax's
examples prefetch to the device. Images are NHWC (the Flax models' layout); JPEGs are decoded
and augmented with Pillow (:func:`dlperf.data.imagefolder.load_train_image`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dlperf.config import RunConfig
from dlperf.data.pipeline import DataWaitRecorder, HostPipeline, SampleSource
from dlperf.zoo.spec import ModelSpec


def make_pipeline(jax: Any, cfg: RunConfig, spec: ModelSpec, ds: Any, dev: Any,
                  int_ids: bool) -> tuple[Any, Any, dict[str, Any], DataWaitRecorder, Any]:
    """Return ``(next_batch, first_batch, pipeline_info, data_wait, close)``.

    ``next_batch()`` gives the next ``(x, y)`` device arrays (x float32, or int32 ids; y int32);
    ``first_batch`` (made apart, for compiling the step) does not consume the stream.
    """
    source = SampleSource(ds, spec, cfg.batch_size, layout="NHWC", seed=cfg.seed)
    xdt = np.int32 if int_ids else np.float32

    def make(k: int):
        x, y = source.batch(k)
        return np.ascontiguousarray(x, dtype=xdt), np.ascontiguousarray(y, dtype=np.int32)

    def put(b):
        return jax.device_put(b, dev)

    workers = cfg.loader_workers or 0
    first = put(make(0))
    pipe = HostPipeline(make, put, workers=workers, depth=cfg.loader_prefetch)
    rec = DataWaitRecorder()
    info = {"impl": "dlperf HostPipeline (threads + device_put feeder)", "num_workers": workers,
            "threads": "python threads", "device_put": "feeder thread" if workers else "step",
            "queue_depth": cfg.loader_prefetch if workers else None,
            "sampler": "endless (fresh permutation per pass)" if not source.per_batch
            else "endless, in order (LM batches)",
            "augment_impl": "dlperf (Pillow)" if source.kind == "imagefolder" else None,
            "items_per_pass": source.n}
    return rec.wrap(pipe.next), first, info, rec, pipe.close
