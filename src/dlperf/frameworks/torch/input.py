"""PyTorch input pipeline: ``torch.utils.data.DataLoader`` over a :class:`SampleSource`.

Settings (recorded in ``data_info["pipeline"]``): ``num_workers = --loader-workers`` worker
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
This module imports torch; only the PyTorch adapter imports it.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch
from torch.utils.data import Dataset, Sampler

from dlperf.config import RunConfig
from dlperf.data.pipeline import SampleSource
from dlperf.zoo.spec import ModelSpec


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
            from PIL import Image

            i = src.plan(p)
            with Image.open(str(src.ds.x[i])) as im:
                return self.tv(im.convert("RGB")), int(src.ds.y[i])
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
    from dlperf.data.imagefolder import IMAGENET_MEAN, IMAGENET_STD

    return T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])


def make_loader(torch: Any, cfg: RunConfig, spec: ModelSpec, ds: Any, dev: Any
                ) -> tuple[Any, dict[str, Any], Any]:
    """Build the DataLoader; return ``(next_batch, pipeline_info, close)``.

    ``next_batch()`` returns the host batch ``(x, y)`` (pinned on CUDA); the step copies it.
    """
    from torch.utils.data import DataLoader

    source = SampleSource(ds, spec, cfg.batch_size, layout="NCHW", seed=cfg.seed)
    workers = cfg.loader_workers or 0
    tv = _torchvision_transform(spec.input_shape[1]) if source.kind == "imagefolder" else None
    items = SourceItems(source, tv)

    cuda = dev.type == "cuda"
    kw: dict[str, Any] = {}
    if workers > 0:
        kw.update(prefetch_factor=cfg.loader_prefetch, persistent_workers=True)
    g = torch.Generator().manual_seed(cfg.seed)
    if source.per_batch:
        loader = DataLoader(items, batch_size=None, sampler=EndlessSampler(), num_workers=workers,
                            pin_memory=cuda, generator=g, **kw)
    else:
        loader = DataLoader(items, batch_size=cfg.batch_size, sampler=EndlessSampler(),
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
            "pin_memory": cuda, "prefetch_factor": cfg.loader_prefetch if workers else None,
            "persistent_workers": workers > 0, "drop_last": True,
            "sampler": "endless (fresh permutation per pass)" if not source.per_batch
            else "endless, in order (LM batches)",
            "augment_impl": ("torchvision" if tv is not None else "dlperf (Pillow)")
            if source.kind == "imagefolder" else None,
            "items_per_pass": source.n}
    return (lambda: next(it)), info, close
