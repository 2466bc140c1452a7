"""The MXNet adapter's batches: prepared before timing, held as NDArrays, cycled.

* synthetic: a pool of :data:`SYNTHETIC_POOL` distinct batches (``mx.random``, seeded by the
  adapter with ``cfg.workload.seed``; floats N(0, 1), token ids and labels uniform, as float32 ids:
  MXNet's ``Embedding`` and ``pick`` take float indices).
* real data: at most :data:`MAX_REAL_BATCHES` batches from :func:`dlperf.data.make_batches`,
  held as float32 NDArrays.

No input pipeline (``--loader-workers`` and ImageFolder data are refused: ``pipelines=False``
in the :mod:`dlperf.registry` entry, and here).
"""

from __future__ import annotations

import itertools
from typing import Any

from dlperf.config import RunConfig
from dlperf.errors import UnavailableError
from dlperf.frameworks.base import DataSource, identity
from dlperf.zoo.spec import ModelSpec

#: Synthetic data: this many distinct batches are made before timing and cycled.
SYNTHETIC_POOL = 4
#: Real data: at most this many distinct batches are kept and cycled.
MAX_REAL_BATCHES = 512


def make_data(mx: Any, cfg: RunConfig, spec: ModelSpec, ctx: Any) -> DataSource:
    """The run's batches (module docstring): ``fetch()`` and ``next_batch()`` give ``(x, y)``
    NDArrays on ``ctx`` (images NCHW float32, shape ``[B, *spec.input_shape]``; token ids and
    labels float32), B = ``cfg.global_batch``; ``to_device`` is the identity.

    Raises:
        UnavailableError: ImageFolder data (read through a pipeline, which MXNet has not got).
        DataMissing, DataError: from :func:`dlperf.data.load_dataset` / ``make_batches``.
    """
    if cfg.input.data == "synthetic":
        batches, info = _synthetic(mx, cfg.global_batch, spec, ctx)
    else:
        batches, info = _real(mx, cfg, spec, ctx)
    mx.nd.waitall()  # made before timing
    nxt = itertools.cycle(batches).__next__
    return DataSource(next_batch=nxt, info=info, fetch=nxt, to_device=identity)


def _layout(spec: ModelSpec) -> str | None:
    return "NCHW" if spec.input_kind == "image" else None


def _synthetic(mx: Any, B: int, spec: ModelSpec, ctx: Any) -> tuple[list[Any], dict[str, Any]]:
    pool = []
    for _ in range(SYNTHETIC_POOL):
        if spec.input_kind == "tokens":
            shape = (B, *spec.input_shape)
            x = mx.nd.random.randint(0, spec.num_classes, shape, ctx=ctx).astype("float32")
            y = mx.nd.random.randint(0, spec.num_classes, shape, ctx=ctx).astype("float32")
        else:
            x = mx.nd.random.normal(0, 1, (B, *spec.input_shape), ctx=ctx)
            y = mx.nd.random.randint(0, spec.num_classes, (B,), ctx=ctx).astype("float32")
        pool.append((x, y))
    return pool, {"kind": "synthetic", "placement": "device", "distinct_batches": SYNTHETIC_POOL,
                  "layout": _layout(spec)}


def _real(mx: Any, cfg: RunConfig, spec: ModelSpec, ctx: Any) -> tuple[list[Any], dict[str, Any]]:
    from dlperf.data import load_dataset, make_batches

    ds = load_dataset(cfg.input.data, cfg.input.data_dir)
    if ds.kind == "imagefolder":
        raise UnavailableError("ImageFolder data are read through an input pipeline, which "
                               "the MXNet adapter does not have; use synthetic data, mnist "
                               "or cifar10")
    X, Y = make_batches(ds, spec, cfg.global_batch, max_batches=MAX_REAL_BATCHES)
    batches = [(mx.nd.array(X[i], ctx=ctx, dtype="float32"),
                mx.nd.array(Y[i], ctx=ctx, dtype="float32")) for i in range(X.shape[0])]
    info = {"kind": "real", "dataset": ds.name, "path": str(ds.path), "placement": "host",
            "distinct_batches": len(batches), "layout": _layout(spec),
            **{k: v for k, v in ds.meta.items() if isinstance(v, (int, float, str, bool))}}
    return batches, info
