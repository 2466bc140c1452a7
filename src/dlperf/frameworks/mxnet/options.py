"""MXNet's own option rules (registry ``options``; :mod:`dlperf.config.rules` calls them).

The Gluon models are NCHW, MXNet's native layout: ``--layout nhwc`` is refused (``nchw`` is
what they do anyway). Devices, precision, models, breakdown, pipelines and data parallelism
are limited by its registry entry.
"""

from __future__ import annotations

from typing import Any


def check(cfg: Any) -> list[tuple[str, str]]:
    """The errors of ``cfg`` (a validated :class:`dlperf.config.RunConfig` of MXNet) that are
    MXNet's own, as ``(field, message)``; ``[]`` when there are none."""
    if cfg.runtime.layout == "nhwc":
        return [("layout", f"layout 'nhwc' is not available for framework {cfg.runtime.framework!r}: its "
                           "models are NCHW (MXNet's native layout); use --layout auto")]
    return []
