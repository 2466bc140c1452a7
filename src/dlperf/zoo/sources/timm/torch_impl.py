"""PyTorch side of ``timm:`` models: build and count (timm models are PyTorch modules that map
``[B, C, H, W]`` float images to ``[B, num_classes]`` logits, the zoo's default contract, so
the adapter makes their batches and loss itself: no hooks here)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from dlperf.errors import ConfigError
from dlperf.zoo.sources import torch_count
from dlperf.zoo.sources.timm.spec import create_kwargs, timm_module
from dlperf.zoo.spec import ModelSpec


def _create(hyper: dict[str, Any]) -> nn.Module:
    timm = timm_module()
    try:
        return timm.create_model(hyper["model"], pretrained=False,
                                 **create_kwargs(hyper["options"]))
    except TypeError as e:  # a keyword the model does not take
        raise ConfigError(f"model {hyper['name']!r}: timm.create_model refused its options: "
                          f"{e}") from None


def build(spec: ModelSpec) -> nn.Module:
    """``timm.create_model(NAME, pretrained=False, **options)`` on the CPU, random weights."""
    if spec.hyper.get("source") != "timm":
        raise ValueError(f"{spec.name} is not a timm: model")
    return _create(spec.hyper)


def count(hyper: dict[str, Any]) -> dict[str, Any]:
    """``input_size`` (C, H, W: the model's default, H = W = ``image`` if given),
    ``num_classes``, ``params`` and ``forward_flops`` per sample (None if the forward fails
    on fake tensors) with ``flops_source``, of the model built on the meta device."""
    with torch.device("meta"):
        model = _create(hyper)
    cfg = getattr(model, "pretrained_cfg", None) or {}
    c, h, w = tuple(cfg.get("input_size", (3, 224, 224)))
    if "image" in hyper["options"]:
        h = w = int(hyper["options"]["image"])
    where = (f"{torch_count.COUNTER} (torch {torch_count.torch_version()}): forward of one "
             "sample on fake meta tensors, counted by dlperf.zoo.sources.timm; train = 3 x "
             "forward")
    try:
        flops: int | None = torch_count.forward_flops_fake(
            model, lambda: ((torch.randn((1, c, h, w), device="meta"),), {}))
    except Exception as e:
        flops, where = None, f"not counted: the forward failed on fake tensors ({e!r:.300})"
    return {"input_size": (int(c), int(h), int(w)),
            "num_classes": int(getattr(model, "num_classes", 0) or 0),
            "params": torch_count.count_params(model), "forward_flops": flops,
            "flops_source": where}
