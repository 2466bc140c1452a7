"""JAX's own option rules (registry ``options``; :mod:`dlperf.config.rules` calls them).

The Flax models are NHWC (channels last), so ``--layout nchw`` is refused. ``--loader-impl``
(registry ``loader_impls``: what the loader workers are, Grain processes or host threads) is
JAX's alone and applies only to a run with an input pipeline.
"""

from __future__ import annotations

from typing import Any


def check(cfg: Any) -> list[tuple[str, str]]:
    """The errors of ``cfg`` (a validated :class:`dlperf.config.RunConfig` of JAX) that are
    JAX's own, as ``(field, message)``; ``[]`` when there are none."""
    errors = []
    if cfg.runtime.layout == "nchw":
        errors.append(("layout", f"layout 'nchw' is a PyTorch option: the {cfg.runtime.framework} models "
                                 "are NHWC (channels last); use --layout auto or nhwc"))
    if (cfg.input.loader_impl != "auto" and cfg.input.loader_workers is None
            and not str(cfg.input.data).startswith("imagefolder")):
        errors.append(("loader_impl", f"loader_impl {cfg.input.loader_impl!r} applies to an input "
                                      "pipeline, and this run has none (batches prepared before "
                                      "timing); give --loader-workers N (or ImageFolder data), "
                                      "or use --loader-impl auto"))
    return errors
