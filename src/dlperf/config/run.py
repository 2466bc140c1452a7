"""One benchmark point: :class:`RunConfig`, one sub-model per axis
(:mod:`dlperf.config.axes`), and the constructors that turn pydantic's errors into one
:class:`~dlperf.errors.ConfigError`.

A run config is given by its settings' names (``make_run_config(model="resnet50",
batch_size=64, device="cuda")``, ``dlperf run``'s flags, a sweep file's keys), by axis
(``RunConfig(workload={...}, hardware={...})``), or both; it is read by axis
(``cfg.workload.batch_size``, ``cfg.hardware.device``). Each axis validates its own fields;
the rules over several axes are :func:`dlperf.config.rules.check_run`. ``RunConfig.
model_dump()`` (its axes) is stored with every result, and :meth:`RunConfig.flat` (its
settings by name) makes the run key (:mod:`dlperf.config.identity`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from dlperf.config.axes import (
    AXES,
    AXIS_OF,
    DEVICES,
    DP_LAYOUT_KINDS,
    LAYOUTS,
    LOADER_IMPLS,
    PRECISIONS,
    SCALINGS,
    Hardware,
    Input,
    IterationPolicy,
    Measure,
    Parallel,
    Runtime,
    Workload,
    flat_settings,
    nest_settings,
)
from dlperf.config.identity import label, point_key, run_key
from dlperf.config.messages import format_validation
from dlperf.config.rules import check_run
from dlperf.errors import ConfigError, unknown_choice
from dlperf.registry import FRAMEWORK_MODES, framework_info

__all__ = ["RunConfig", "resolve_device", "make_policy", "make_run_config", "DEVICES",
           "DP_LAYOUT_KINDS", "LAYOUTS", "LOADER_IMPLS", "PRECISIONS", "SCALINGS"]


class RunConfig(BaseModel):
    """One benchmark point, one sub-model per axis (:mod:`dlperf.config.axes`):
    ``workload`` (what is trained), ``runtime`` (the framework and how it runs the step),
    ``hardware`` (device, precision, threads, CPU binding), ``input`` (data and input
    pipeline), ``parallel`` (data parallelism) and ``measure`` (how it is measured).

    The framework's first mode and data-parallel layout fill ``runtime.mode`` and
    ``parallel.dp_layout`` when given as ``""``; an ImageFolder without ``loader_workers`` is
    read with 0. :attr:`world_size`, :attr:`global_batch` and :attr:`per_device_batch` are the
    data-parallel shape of the batch (strong scaling: ``batch_size`` is the global batch; weak:
    the per-device one). ``measure.repeat`` is part of the run key only when non-zero, so
    repeat 0 is the point as it was always keyed; :meth:`point_key` is the key shared by all
    repeats of a point.

    Raises (on construction):
        pydantic.ValidationError: a bad value or combination; each error names its field
            (:mod:`dlperf.config.messages`), :func:`make_run_config` makes it a ConfigError.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, defer_build=True)

    workload: Workload
    runtime: Runtime = Field(default_factory=Runtime)
    hardware: Hardware = Field(default_factory=Hardware)
    input: Input = Field(default_factory=Input)
    parallel: Parallel = Field(default_factory=Parallel)
    measure: Measure = Field(default_factory=Measure)

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: Any) -> Any:
        """Settings given by name put on their axes (:func:`~dlperf.config.axes.
        nest_settings`); the framework's default mode and data-parallel layout for ``""``;
        0 loader workers for an ImageFolder without any."""
        if not isinstance(data, dict):
            return data
        data = nest_settings(data)  # axes as mappings (an axis model is dumped)
        rt, par, inp = (data.get(a, {}) for a in ("runtime", "parallel", "input"))
        name = rt.get("framework", Runtime.model_fields["framework"].default) \
            if isinstance(rt, dict) else None
        if isinstance(name, str) and name in FRAMEWORK_MODES:
            if not rt.get("mode"):
                data["runtime"] = {**rt, "mode": FRAMEWORK_MODES[name][0]}
            if isinstance(par, dict) and not par.get("dp_layout"):
                info = framework_info(name)
                data["parallel"] = {**par, "dp_layout": info.dp_layouts[0] if info
                                    else "per_device"}
        if isinstance(inp, dict) and inp.get("loader_workers") is None \
                and str(inp.get("data") or "").startswith("imagefolder"):
            # An ImageFolder is always read through the pipeline, with 0 workers by default:
            # one point, one run key (None and 0 were two keys for one measurement).
            data["input"] = {**inp, "loader_workers": 0}
        return data

    @model_validator(mode="after")
    def _check(self) -> RunConfig:
        check_run(self)
        return self

    def flat(self) -> dict[str, Any]:
        """The point's settings by name (``{"model": ..., "batch_size": ..., "device": ...,
        "iterations": {...}, "ddp": {...}, ...}``): what a sweep file and ``dlperf run``'s
        flags name, and the fields of the run key."""
        return flat_settings(self.model_dump())

    def with_(self, **changes: Any) -> RunConfig:
        """A copy with some settings changed by name (``cfg.with_(repeat=1, threads=4)``),
        not validated again (as :meth:`model_copy`).

        Raises:
            KeyError: a name that is not a setting.
        """
        by_axis: dict[str, dict[str, Any]] = {}
        for k, v in changes.items():
            by_axis.setdefault(AXIS_OF[k], {})[k] = v
        return self.model_copy(update={a: getattr(self, a).model_copy(update=u)
                                       for a, u in by_axis.items()})

    @property
    def world_size(self) -> int:
        """Data-parallel replicas (devices): ``nproc * nnodes``."""
        return self.parallel.nproc * self.parallel.nnodes

    @property
    def global_batch(self) -> int:
        """Samples per iteration over all replicas (docs/measurement.md: per-device x devices)."""
        b = self.workload.batch_size
        return b * self.world_size if self.parallel.scaling == "weak" else b

    @property
    def per_device_batch(self) -> int:
        """Samples per iteration on one replica."""
        b = self.workload.batch_size
        return b if self.parallel.scaling == "weak" else b // self.world_size

    @property
    def processes_per_node(self) -> int:
        """Processes a launcher starts on each node: ``nproc`` (per_device) or 1 (per_node)."""
        return self.parallel.nproc if self.parallel.dp_layout == "per_device" else 1

    @property
    def traced(self) -> bool:
        """True if a profiler trace is taken after the measurement (``--breakdown``,
        ``--trace`` or ``--timeline``)."""
        m = self.measure
        return bool(m.breakdown or m.trace_dir or m.timeline)

    @property
    def distributed(self) -> bool:
        """True when more than one replica trains (data parallelism)."""
        return self.world_size > 1

    def run_key(self) -> str:
        """A stable 16-hex-digit key of the point (:func:`dlperf.config.identity.run_key`)."""
        return run_key(self)

    def point_key(self) -> str:
        """The run key shared by every repeat of the point
        (:func:`dlperf.config.identity.point_key`)."""
        return point_key(self)

    def label(self) -> str:
        """Short human label (:func:`dlperf.config.identity.label`)."""
        return label(self)


#: The axes of a run config, by field (as :data:`dlperf.config.axes.AXES`).
assert tuple(RunConfig.model_fields) == tuple(AXES)


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` if a GPU is usable here, else ``cpu``; ``cpu``/``cuda`` are checked.

    Raises:
        ConfigError: an unknown device, or ``cuda`` on a machine where none is usable.
    """
    if device not in ("auto", *DEVICES):
        raise unknown_choice("device", device, ("auto", *DEVICES))
    if device == "cpu":
        return device
    from dlperf import nvml

    usable = False
    if nvml.gpus():
        try:
            import torch

            usable = torch.cuda.is_available()
        except ImportError:
            usable = True  # another framework may use it; its adapter checks
    if device == "auto":
        return "cuda" if usable else "cpu"
    if not usable:
        raise ConfigError("device 'cuda' was asked for but no CUDA GPU is usable here; "
                          "use --device cpu or --device auto")
    return device


def make_policy(**fields: Any) -> IterationPolicy:
    """Construct an :class:`IterationPolicy`; ConfigError names the CLI flag that is wrong."""
    try:
        return IterationPolicy(**fields)
    except ValidationError as e:
        raise ConfigError(format_validation(e, IterationPolicy, flags=True)) from None


def make_run_config(**fields: Any) -> RunConfig:
    """Construct a :class:`RunConfig`, turning pydantic's errors into one :class:`ConfigError`.

    Raises:
        ConfigError: naming each bad field (with its ``dlperf run`` flag), its value and what
            is allowed.
    """
    try:
        return RunConfig(**fields)
    except ValidationError as e:
        raise ConfigError(format_validation(e, RunConfig, flags=True)) from None
