"""Which frameworks exist and which execution modes each has (no framework imports).

This is the one table to edit when a framework is added: the adapter class (imported lazily,
``"module:attribute"``) and its modes. ``config`` validates ``--framework`` / ``--mode``
against it and ``frameworks.get_adapter`` instantiates the adapter.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class FrameworkInfo:
    """A framework dlperf can drive: its adapter and execution modes."""

    adapter: str
    modes: tuple[str, ...]


FRAMEWORKS: dict[str, FrameworkInfo] = {
    "torch": FrameworkInfo("dlperf.frameworks.torch_fw:TorchAdapter", ("eager", "graph")),
    "jax": FrameworkInfo("dlperf.frameworks.jax_fw:JaxAdapter", ("xla",)),
    "tensorflow": FrameworkInfo("dlperf.frameworks.tf_fw:TensorFlowAdapter",
                                ("eager", "graph", "xla")),
}

if os.environ.get("DLPERF_FAKE_FRAMEWORK") == "1":  # test double, see frameworks/fake.py
    FRAMEWORKS["fake"] = FrameworkInfo("dlperf.frameworks.fake:FakeAdapter", ("eager",))

#: framework -> modes, for validation.
FRAMEWORK_MODES: dict[str, tuple[str, ...]] = {k: v.modes for k, v in FRAMEWORKS.items()}
