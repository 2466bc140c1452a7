"""Typed, validated run and sweep configurations.

A :class:`RunConfig` is one benchmark point (model x framework x mode x device x precision x
batch size x data). It is frozen and validated on construction; every error names the bad
field and the valid choices. Its :meth:`RunConfig.run_key` identifies the measurement, so a
resumed sweep can tell which points are already done. A :class:`SweepConfig` is a grid read
from YAML (``dlperf sweep FILE.yaml``); :func:`expand_grid` is its expansion, and that of
``dlperf run``'s flags.

The modules, by concern:

- :mod:`~dlperf.config.run`: :class:`RunConfig`, its field choices and constructors;
- :mod:`~dlperf.config.axes`: its nested sub-models (:class:`IterationPolicy`,
  :class:`DDPOptions`);
- :mod:`~dlperf.config.rules`: the rules over several fields, one function per axis, reading
  the framework registry and each framework's own ``options.py``;
- :mod:`~dlperf.config.identity`: run key, point key, label and the back-compatibility rules;
- :mod:`~dlperf.config.sweep`: sweep files and grid expansion (the only cross product);
- :mod:`~dlperf.config.messages`: error messages keyed on field locations.
"""

from __future__ import annotations

from dlperf.config.axes import DDPOptions, IterationPolicy, ddp_changes
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

__all__ = ["CLI_FLAGS", "COMPILE_MODES", "ConfigError", "DDPOptions", "DEVICES",
           "DP_LAYOUT_KINDS", "FRAMEWORKS", "FRAMEWORK_MODES", "FieldRuleError",
           "IterationPolicy", "KEY_OMIT_AT_DEFAULT", "LAYOUTS", "LOADER_IMPLS", "PRECISIONS",
           "RunConfig", "SCALINGS", "SweepConfig", "check_repeats", "crossed_compile_mode",
           "ddp_changes", "expand_grid", "format_validation", "layout_change", "load_sweep",
           "make_policy", "make_run_config", "resolve_device", "with_repeats"]
