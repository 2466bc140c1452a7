"""PyTorch input: the run's :class:`~dlperf.frameworks.base.DataSource` (:func:`make_source`).

* synthetic data: a pool of :data:`SYNTHETIC_POOL` distinct batches made on the device before
  timing, cycled. Models outside the default input/loss contract (``not spec.default_io``: token
  pairs, spectrograms, masked-LM or CTC; :mod:`dlperf.zoo.spec`) get their batches from their
  implementation module's ``synthetic_batch`` hook.
* real data, prepared: batches cut on the host (pinned memory on CUDA) and copied with
  ``non_blocking=True`` inside each step, so the host-to-device copy is part of the iteration.
* real data through a pipeline (``--loader-workers N``, and always for an ImageFolder): a
  ``torch.utils.data.DataLoader`` over a :class:`SampleSource` during training, the time the
  step waits for each batch recorded (:class:`~dlperf.data.pipeline.DataWaitRecorder`).

In every case ``to_device(fetch())`` is ``next_batch()`` in two parts (the DataSource contract):
the same calls, split at the host-to-device copy.

DataLoader settings (recorded in ``data_info["pipeline"]``): ``num_workers = --loader-workers`` worker
processes (0: the main process loads each batch inside ``next()``), ``pin_memory`` on CUDA
(batches land in page-locked memory, so the step's ``.to(device, non_blocking=True)`` is an
asynchronous DMA), ``prefetch_factor = --loader-prefetch`` batches per worker,
``persistent_workers`` when there are workers, ``drop_last`` (every batch full). The sampler is
endless (:class:`~dlperf.data.pipeline.IndexPlan` positions, a fresh permutation per pass), so
no epoch boundary falls into the measurement.

ImageFolder items are decoded with Pillow and augmented with torchvision's
``RandomResizedCrop(S)`` + ``RandomHorizontalFlip()`` + ``ToTensor()`` + ``Normalize(ImageNet)``
when torchvision is installed (the PyTorch ImageNet example's training transform); without
torchvision the same algorithm from :mod:`dlperf.data.imagefolder` (flag ``augment_impl``).
This module imports torch; only the PyTorch adapter imports it (when it prepares a run).
"""

from __future__ import annotations

import importlib
import itertools
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

from dlperf.config import RunConfig
from dlperf.data import load_dataset, make_batches
from dlperf.data.imagefolder import IMAGENET_MEAN, IMAGENET_STD
from dlperf.data.pipeline import DataWaitRecorder, SampleSource
from dlperf.errors import UnavailableError
from dlperf.frameworks.base import DataSource, identity
from dlperf.zoo.spec import ModelSpec

#: Synthetic data: this many distinct batches, made on the device before timing and cycled.
SYNTHETIC_POOL = 4
#: Real data: at most this many distinct batches are kept on the host and cycled.
MAX_REAL_BATCHES = 512


class SourceItems(Dataset):
    """Map-style dataset over stream positions of a :class:`SampleSource` (picklable, so any
    multiprocessing start method works)."""

    def __init__(self, source: SampleSource, tv: Any = None) -> None:
        self.source, self.tv = source, tv

    def __len__(self) -> int:
        return self.source.n

    def __getitem__(self, p: int):
        src = self.source
        if self.tv is not None:
            from dlperf.data.imagefolder import open_image

            i = src.plan(p)  # open_image: a bad file is a DataError naming it, not a crash
            return self.tv(open_image(src.ds.x[i])), int(src.ds.y[i])
        x, y = src.item(p)
        return torch.from_numpy(x), torch.as_tensor(y)


class EndlessSampler(Sampler):
    """Stream positions 0, 1, 2, ... forever (the source maps them to shuffled indices)."""

    def __init__(self) -> None:
        pass

    def __iter__(self):
        return itertools.count()


def _torchvision_transform(size: int):
    """The torchvision training transform, or None without (a working) torchvision."""
    try:
        from torchvision import transforms as T
    except Exception:  # noqa: BLE001 - missing, or built for another torch
        return None
    return T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])


def make_loader(torch: Any, cfg: RunConfig, spec: ModelSpec, ds: Any, dev: Any
                ) -> tuple[Any, dict[str, Any], Any]:
    """Build the DataLoader; return ``(next_batch, pipeline_info, close)``.

    ``next_batch()`` returns the host batch ``(x, y)`` (pinned on CUDA); the step copies it.
    """
    from torch.utils.data import DataLoader

    source = SampleSource(ds, spec, cfg.workload.batch_size, layout="NCHW", seed=cfg.workload.seed)
    workers = cfg.input.loader_workers or 0
    tv = _torchvision_transform(spec.input_shape[1]) if source.kind == "imagefolder" else None
    items = SourceItems(source, tv)

    cuda = dev.type == "cuda"
    kw: dict[str, Any] = {}
    if workers > 0:
        kw.update(prefetch_factor=cfg.input.loader_prefetch, persistent_workers=True)
    g = torch.Generator().manual_seed(cfg.workload.seed)
    if source.per_batch:
        loader = DataLoader(items, batch_size=None, sampler=EndlessSampler(), num_workers=workers,
                            pin_memory=cuda, generator=g, **kw)
    else:
        loader = DataLoader(items, batch_size=cfg.workload.batch_size, sampler=EndlessSampler(),
                            drop_last=True, num_workers=workers, pin_memory=cuda, generator=g,
                            **kw)
    it = iter(loader)

    def close() -> None:
        nonlocal it
        shutdown = getattr(it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
        it = None

    info = {"impl": "torch.utils.data.DataLoader", "num_workers": workers,
            "pin_memory": cuda, "prefetch_factor": cfg.input.loader_prefetch if workers else None,
            "persistent_workers": workers > 0, "drop_last": True,
            "sampler": "endless (fresh permutation per pass)" if not source.per_batch
            else "endless, in order (LM batches)",
            "augment_impl": ("torchvision" if tv is not None else "dlperf (Pillow)")
            if source.kind == "imagefolder" else None,
            "items_per_pass": source.n}
    return (lambda: next(it)), info, close


def make_source(cfg: RunConfig, spec: ModelSpec, dev: Any, channels_last: bool = False,
                rank: int = 0) -> DataSource:
    """The run's :class:`~dlperf.frameworks.base.DataSource` on device ``dev``: ``next_batch()``
    gives the ``(x, y)`` device tensors of one step, ``to_device(fetch())`` the same in two
    parts (the batch as it is held, then its copy: the breakdown's t_io and t_h2d). Each step
    has ``cfg.per_device_batch`` samples (rank ``rank``'s share of the global batch); with
    ``channels_last`` 4-D image batches are channels-last (NHWC in memory).

    Raises:
        UnavailableError: a DataLoader pipeline with data parallelism (not built yet).
        DataError: the data set cannot feed this model (from :mod:`dlperf.data`).
    """
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    if cfg.input.data == "synthetic":
        return _synthetic(cfg, spec, dev, fmt, rank)
    ds = load_dataset(cfg.input.data, cfg.input.data_dir)
    if cfg.input.loader_workers is not None or ds.kind == "imagefolder":
        if cfg.global_batch != cfg.per_device_batch:
            raise UnavailableError("a DataLoader pipeline (loader_workers, ImageFolder) with "
                                   "data parallelism is not built yet; use --nproc 1, or "
                                   "prepared batches (no --loader-workers)")
        return _pipeline(cfg, spec, dev, ds, fmt)
    return _prepared(cfg, spec, dev, ds, fmt, rank)


def _synthetic(cfg: RunConfig, spec: ModelSpec, dev: Any, fmt: Any, rank: int) -> DataSource:
    """:data:`SYNTHETIC_POOL` batches drawn on the device with seed ``cfg.workload.seed + rank`` (a
    host-side randn of 4 x 8192 x 26752 floats takes seconds), cycled."""
    B = cfg.per_device_batch
    g = torch.Generator(device=dev).manual_seed(cfg.workload.seed + rank)
    make = None
    if not spec.default_io:  # other inputs/targets: the model module's hook
        make = importlib.import_module(f"dlperf.zoo.{spec.family}.torch_impl").synthetic_batch
    pool = []
    for _ in range(SYNTHETIC_POOL):
        if make is not None:
            x, y = make(spec, B, g, dev)
        elif spec.input_kind == "tokens":
            x = torch.randint(0, spec.num_classes, (B, *spec.input_shape), generator=g, device=dev)
            y = torch.randint(0, spec.num_classes, (B, *spec.input_shape), generator=g, device=dev)
        else:
            x = torch.randn((B, *spec.input_shape), generator=g, device=dev)
            y = torch.randint(0, spec.num_classes, (B,), generator=g, device=dev)
            x = x.contiguous(memory_format=fmt) if x.dim() == 4 else x
        pool.append((x, y))
    it = itertools.cycle(pool)
    info = {"kind": "synthetic", "placement": "device", "distinct_batches": SYNTHETIC_POOL}
    return DataSource(it.__next__, info, it.__next__, identity)


def _prepared(cfg: RunConfig, spec: ModelSpec, dev: Any, ds: Any, fmt: Any,
              rank: int) -> DataSource:
    """Up to :data:`MAX_REAL_BATCHES` global batches cut on the host; rank ``r`` takes rows
    ``[r b, (r + 1) b)`` of each, so runs on different device counts at the same global batch
    see the same samples in the same order. On CUDA they are pinned and copied in the step."""
    B = cfg.per_device_batch
    X, Y = make_batches(ds, spec, cfg.global_batch, max_batches=MAX_REAL_BATCHES)
    if cfg.global_batch != B:  # this rank's rows of every global batch
        X, Y = X[:, rank * B:(rank + 1) * B], Y[:, rank * B:(rank + 1) * B]
    Xt, Yt = (torch.from_numpy(np.ascontiguousarray(a)) for a in (X, Y))
    cuda = dev.type == "cuda"
    if cuda:
        Xt, Yt = Xt.pin_memory(), Yt.pin_memory()
        it = itertools.cycle([(Xt[i], Yt[i]) for i in range(Xt.shape[0])])
        to_device = device_copier(dev, fmt)

        def next_batch():
            return to_device(next(it))
        fetch = it.__next__
    else:
        it = itertools.cycle([(Xt[i].contiguous(memory_format=fmt) if Xt.dim() == 5
                               else Xt[i], Yt[i]) for i in range(Xt.shape[0])])
        next_batch = fetch = it.__next__
        to_device = identity
    info = {"kind": "real", "dataset": ds.name, "path": str(ds.path),
            "rows": f"[{rank * B}, {(rank + 1) * B}) of each global batch of {cfg.global_batch}",
            "placement": "host-pinned" if cuda else "host", "distinct_batches": int(X.shape[0]),
            **_scalar_meta(ds)}
    return DataSource(next_batch, info, fetch, to_device)


def _pipeline(cfg: RunConfig, spec: ModelSpec, dev: Any, ds: Any, fmt: Any) -> DataSource:
    """Real data through a DataLoader during training (:func:`make_loader`), each batch's wait
    recorded; ``fmt``: the memory format of image batches on the device."""
    host_next, pipe, close = make_loader(torch, cfg, spec, ds, dev)
    rec = DataWaitRecorder()
    timed_next = rec.wrap(host_next)
    to_device = device_copier(dev, fmt)
    if dev.type == "cuda" or fmt is not torch.contiguous_format:
        def next_batch():
            return to_device(timed_next())
    else:
        next_batch = timed_next
        to_device = identity
    info = {"kind": "real", "dataset": ds.name, "path": str(ds.path),
            "placement": "pipeline", "pipeline": pipe, **_scalar_meta(ds)}
    return DataSource(next_batch, info, timed_next, to_device, wait=rec, close=close)


def _scalar_meta(ds: Any) -> dict[str, Any]:
    return {k: v for k, v in ds.meta.items() if isinstance(v, (int, float, str, bool))}


def device_copier(dev: Any, fmt: Any):
    """``(x, y)`` host batch -> device batch (asynchronous copies from pinned memory); 4-D
    images in memory format ``fmt`` (channels_last or contiguous)."""
    def to_device(b):
        x = b[0].to(dev, non_blocking=True)
        return (x.contiguous(memory_format=fmt) if x.dim() == 4 else x), \
            b[1].to(dev, non_blocking=True)

    return to_device
