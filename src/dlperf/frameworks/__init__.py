"""Framework adapters, looked up by name (imports are lazy)."""

from __future__ import annotations

import importlib

from dlperf.errors import unknown_choice
from dlperf.frameworks.base import (
    DataSource,
    DistContext,
    FrameworkAdapter,
    NonFiniteLoss,
    OutOfMemory,
    TrainingRun,
    no_mark,
)
from dlperf.registry import FRAMEWORKS

#: name -> "module:attribute" of the adapter class.
ADAPTERS: dict[str, str] = {k: v.adapter for k, v in FRAMEWORKS.items()}


def get_adapter(name: str) -> FrameworkAdapter:
    """Instantiate the adapter of framework ``name``; ConfigError names the valid ones."""
    if name not in ADAPTERS:
        raise unknown_choice("framework", name, ADAPTERS)
    mod, attr = ADAPTERS[name].split(":")
    return getattr(importlib.import_module(mod), attr)()


__all__ = ["ADAPTERS", "DataSource", "DistContext", "FrameworkAdapter", "NonFiniteLoss",
           "OutOfMemory", "TrainingRun", "get_adapter", "no_mark"]
