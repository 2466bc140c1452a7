"""PyTorch's own options (:class:`Options`: ``DistributedDataParallel``'s) and option rules
(registry ``options``; :mod:`dlperf.config.rules` calls them).

PyTorch takes every image layout (``auto``, ``nchw``, ``nhwc``: channels_last or not),
``--compile-mode`` (torch.compile's mode) and DDP's options; the last two belong to it alone
(registry ``compile_modes``, ``ddp``), so other frameworks refuse them without asking here. What
is PyTorch's own: torch.compile runs in the modes of its registry entry's ``compile_modes``
(graph) only.
"""

from __future__ import annotations

from typing import Any, ClassVar

from dlperf.config.axes import DDPOptions
from dlperf.registry import FRAMEWORKS

__all__ = ["Options", "check"]


class Options(DDPOptions):
    """PyTorch's own options: ``DistributedDataParallel``'s (:class:`~dlperf.config.axes.
    DDPOptions`: ``bucket_cap_mb``, ``gradient_as_bucket_view``, ``static_graph``,
    ``find_unused_parameters``, ``broadcast_buffers``), given as ``--bucket-cap-mb`` etc.,
    ``--framework-option KEY=VALUE`` or ``options:`` in a sweep file; they apply to a run on
    more than one device (``RunConfig.runtime.ddp``)."""

    #: Options that make a different point through ``options`` in the run key: none. DDP's
    #: options enter the key of a data-parallel point as its ``ddp``
    #: (:func:`dlperf.config.identity.run_key`), as they did before they were options.
    KEY_FIELDS: ClassVar[frozenset[str]] = frozenset()


def check(cfg: Any) -> list[tuple[str, str]]:
    """The errors of ``cfg`` (a validated :class:`dlperf.config.RunConfig` of PyTorch) that are
    PyTorch's own, as ``(field, message)``; ``[]`` when there are none.

    ``compile_mode`` other than ``default`` needs the mode torch.compile runs in (``graph``).
    """
    info = FRAMEWORKS[cfg.runtime.framework]
    if cfg.runtime.compile_mode != "default" and cfg.runtime.mode not in info.compile_modes:
        needs = " or ".join(f"--framework {cfg.runtime.framework} --mode {m}" for m in info.compile_modes)
        return [("compile_mode", f"compile_mode {cfg.runtime.compile_mode!r} is {info.compiler}'s mode: "
                                 f"it needs {needs} (got {cfg.runtime.framework}/{cfg.runtime.mode}); leave "
                                 "--compile-mode at default for the others")]
    return []
