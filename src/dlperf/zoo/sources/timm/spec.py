"""``timm:NAME`` models: PyTorch Image Models' ``create_model(NAME, pretrained=False)``.

Random weights, never a download. Options (``timm:resnet50?classes=10&image=128``):
``classes`` (``num_classes``, default the model's, 1000 for ImageNet models), ``image``
(input height = width; default the model's ``pretrained_cfg["input_size"]``; a ViT whose
position table depends on it also needs ``img_size=N``), and any other keyword argument of
``timm.create_model`` or the model class by its own name (``drop_rate=0.1``,
``img_size=128``). Inputs are images ``[C, H, W]`` and the loss is the zoo's softmax
cross-entropy, so these specs are ``default_io``: the adapters make the batches and the loss.

Optimizer: SGD, momentum 0.9, lr 0.1, weight decay 2e-5: the defaults of timm's ``train.py``
(``--opt sgd``, ``--momentum 0.9``, ``--weight-decay 2e-5``, ``--lr-base 0.1`` for a batch of
256).
"""

from __future__ import annotations

from typing import Any

from dlperf.errors import UnavailableError
from dlperf.zoo.spec import OptimizerSpec

FAMILY = "sources.timm"
OWN_OPTIONS = ("classes", "image")
OPTIMIZER = OptimizerSpec(name="sgd", lr=0.1, momentum=0.9, weight_decay=2e-5)


def timm_module() -> Any:
    """The imported ``timm``.

    Raises:
        UnavailableError: timm is not installed, or does not import (timm imports
            torchvision, whose wheel must match the installed torch build).
    """
    try:
        import timm
    except ModuleNotFoundError as e:
        raise UnavailableError(f"timm: models need timm, which is not installed ({e.name} is "
                               "missing); pip install timm (it needs a torchvision built for "
                               "the installed torch)") from None
    except Exception as e:  # e.g. a torchvision wheel built for another torch
        raise UnavailableError(f"timm is installed but does not import: {e!r:.300} (a "
                               "torchvision built for another torch? install the torchvision "
                               "release that matches your torch)") from None
    return timm


def create_kwargs(options: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of ``timm.create_model`` for the name's options."""
    kw = {k: v for k, v in options.items() if k not in OWN_OPTIONS}
    if "classes" in options:
        kw["num_classes"] = options["classes"]
    return kw
