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

from typing import Any, Final

from dlperf.errors import ConfigError, UnavailableError
from dlperf.zoo.spec import OptimizerSpec

FAMILY: Final = "sources.timm"  # Final: typed as its Literal (a spec.Family)
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


#: Limits of ``timm:`` options, checked before the model is built (even on the meta device a
#: model is built layer by layer: ``depth=10^9`` never ended). ``image``: the input side in
#: pixels (8192, the largest image dlperf's ImageFolder reader decodes); ``classes``: 2^24;
#: a depth (``depth``, ``layers``, ``num_layers``): 4,096 (as ``hf:`` models'); any other
#: whole number: at most 2^31 - 1 in size (the limit of a config size).
MAX_IMAGE = 8192
MAX_CLASSES = 2**24
MAX_DEPTH = 4096
MAX_OPTION_INT = 2**31 - 1
DEPTH_OPTIONS = ("depth", "layers", "num_layers", "n_layers")


def check_option_sizes(options: dict[str, Any], name: str) -> None:
    """Refuse a ``timm:`` option over its limit (:data:`MAX_IMAGE`, :data:`MAX_CLASSES`,
    :data:`MAX_DEPTH`, :data:`MAX_OPTION_INT`), or a number that is not finite.

    Raises:
        ConfigError: naming the model, the option, its value and the limit.
    """
    import math

    limits = {"image": (MAX_IMAGE, "pixels a side"), "classes": (MAX_CLASSES, "classes"),
              **{k: (MAX_DEPTH, "layers") for k in DEPTH_OPTIONS}}
    for key, value in options.items():
        if isinstance(value, bool):
            continue
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"model {name!r}: {key}={value}: give a finite number")
        if not isinstance(value, int):
            continue
        limit, what = limits.get(key, (MAX_OPTION_INT, "(the limit of a config size)"))
        if abs(value) > limit:
            raise ConfigError(f"model {name!r}: {key}={value:,} is over dlperf's limit of "
                              f"{limit:,} {what} (dlperf.zoo.sources.timm.spec); give a "
                              "smaller value")
