"""The fake framework's option rules (registry ``options``; :mod:`dlperf.config.rules` calls
them): as the JAX and TensorFlow models, its "models" are NHWC, so ``--layout nchw`` is refused
(the rule every framework but PyTorch had before each framework checked its own options)."""

from __future__ import annotations

from typing import Any


def check(cfg: Any) -> list[tuple[str, str]]:
    """The errors of ``cfg`` (a validated :class:`dlperf.config.RunConfig` of the fake
    framework) that are its own, as ``(field, message)``; ``[]`` when there are none."""
    if cfg.layout == "nchw":
        return [("layout", f"layout 'nchw' is a PyTorch option: the {cfg.framework} models are "
                           "NHWC (channels last); use --layout auto or nhwc")]
    return []
