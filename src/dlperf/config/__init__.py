"""Typed, validated run and sweep configurations.

A :class:`RunConfig` is one benchmark point (model x framework x mode x device x precision x
batch size x data). It is frozen and validated on construction; every error names the bad
field and the valid choices. Its :meth:`RunConfig.run_key` identifies the measurement, so a
resumed sweep can tell which points are already done. A :class:`SweepConfig` is a grid read
from YAML (``dlperf sweep FILE.yaml``); :func:`expand_grid` is its expansion, and that of
``dlperf run``'s flags.

The modules, by concern:

- :mod:`~dlperf.config.run`: :class:`RunConfig` and its constructors;
- :mod:`~dlperf.config.axes`: its axes, one sub-model each (:class:`Workload`,
  :class:`Runtime`, :class:`Hardware`, :class:`Input`, :class:`Parallel`, :class:`Measure`),
  their choices and the models they hold (:class:`IterationPolicy`, :class:`DDPOptions`);
- :mod:`~dlperf.config.rules`: the rules over several fields, one function per axis, reading
  the framework registry and each framework's own ``options.py``;
- :mod:`~dlperf.config.identity`: run key, point key, label and the back-compatibility rules;
- :mod:`~dlperf.config.sweep`: sweep files and grid expansion (the only cross product);
- :mod:`~dlperf.config.messages`: error messages keyed on field locations;
- :mod:`~dlperf.config.defaults`: every default, as plain values.

The names below are imported when first read (PEP 562), so that ``dlperf.config.defaults``
loads without pydantic (the CLI builds its flags from it at start-up).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dlperf.config.axes import (
        SETTINGS,
        DDPOptions,
        Hardware,
        Input,
        IterationPolicy,
        Measure,
        Parallel,
        Runtime,
        Workload,
        ddp_changes,
    )
    from dlperf.config.identity import KEY_OMIT_AT_DEFAULT, layout_change
    from dlperf.config.messages import CLI_FLAGS, FieldRuleError, format_validation
    from dlperf.config.run import (
        DEVICES,
        DP_LAYOUT_KINDS,
        LAYOUTS,
        LOADER_IMPLS,
        PRECISIONS,
        SCALINGS,
        RunConfig,
        make_policy,
        make_run_config,
        resolve_device,
    )
    from dlperf.config.sweep import (
        SweepConfig,
        check_repeats,
        crossed_compile_mode,
        expand_grid,
        load_sweep,
        with_repeats,
    )
    from dlperf.errors import ConfigError
    from dlperf.registry import COMPILE_MODES, FRAMEWORK_MODES, FRAMEWORKS

#: Public name -> the module that defines it.
_HOME: dict[str, str] = {
    **dict.fromkeys(("DDPOptions", "IterationPolicy", "ddp_changes", "SETTINGS", "Workload",
                     "Runtime", "Hardware", "Input", "Parallel", "Measure"),
                    "dlperf.config.axes"),
    **dict.fromkeys(("KEY_OMIT_AT_DEFAULT", "layout_change"), "dlperf.config.identity"),
    **dict.fromkeys(("CLI_FLAGS", "FieldRuleError", "format_validation"),
                    "dlperf.config.messages"),
    **dict.fromkeys(("DEVICES", "DP_LAYOUT_KINDS", "LAYOUTS", "LOADER_IMPLS", "PRECISIONS",
                     "SCALINGS", "RunConfig", "make_policy", "make_run_config",
                     "resolve_device"), "dlperf.config.run"),
    **dict.fromkeys(("SweepConfig", "check_repeats", "crossed_compile_mode", "expand_grid",
                     "load_sweep", "with_repeats"), "dlperf.config.sweep"),
    "ConfigError": "dlperf.errors",
    **dict.fromkeys(("COMPILE_MODES", "FRAMEWORK_MODES", "FRAMEWORKS"), "dlperf.registry"),
}

__all__ = ["CLI_FLAGS", "COMPILE_MODES", "ConfigError", "DDPOptions", "DEVICES",
           "DP_LAYOUT_KINDS", "FRAMEWORKS", "FRAMEWORK_MODES", "FieldRuleError", "Hardware",
           "Input", "IterationPolicy", "KEY_OMIT_AT_DEFAULT", "LAYOUTS", "LOADER_IMPLS",
           "Measure", "PRECISIONS", "Parallel", "Runtime", "SETTINGS", "Workload",
           "RunConfig", "SCALINGS", "SweepConfig", "check_repeats", "crossed_compile_mode",
           "ddp_changes", "expand_grid", "format_validation", "layout_change", "load_sweep",
           "make_policy", "make_run_config", "resolve_device", "with_repeats"]
assert sorted(__all__) == sorted(_HOME)


def __getattr__(name: str) -> Any:
    """A public name of the package (:data:`_HOME`), or one of its modules, imported at its
    first use.

    Raises:
        AttributeError: no such name.
    """
    if name in _HOME:
        value = getattr(importlib.import_module(_HOME[name]), name)
        globals()[name] = value
        return value
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as e:
        if e.name != f"{__name__}.{name}":
            raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME})
