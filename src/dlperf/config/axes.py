"""The nested sub-models of a :class:`~dlperf.config.RunConfig`: how long to measure
(:class:`IterationPolicy`) and the shape of PyTorch DDP's options (:class:`DDPOptions`).

``iterations`` is a field of the run config. DDP's options are options of the frameworks whose
data-parallel engine takes them (registry ``ddp``: PyTorch, and the fake framework standing in
for it): their ``Options`` models (``frameworks/<name>/options.py``) are :class:`DDPOptions`
subclasses, so they are given as a run config's ``options`` (``--bucket-cap-mb`` etc.,
``--framework-option``, ``options:`` in a sweep file; a ``ddp`` mapping, as given before, is
read into them). ``RunConfig.ddp`` is the DDP options a run applies (:func:`ddp_of` of its
options), stored as ``"ddp": {...}`` in every result's config as since DDP options existed.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dlperf.config.defaults import DDP, ITERATIONS
from dlperf.config.limits import MAX_BUCKET_MB, MAX_ITERS, MAX_SECONDS


class IterationPolicy(BaseModel):
    """How many iterations to run: warm-up detection and the stopping rule (docs/measurement.md 3, 5).

    Warm-up runs in windows of ``warmup_window`` iterations; it ends when the median of the last
    window is within ``warmup_rel_tol`` of the median of the window before it (steady state), or
    when ``max_warmup_iters`` / ``max_warmup_time_s`` is reached (then the result is flagged
    ``steady_state = False``). Measurement stops once *both* ``min_iters`` iterations and
    ``min_time_s`` seconds are reached, or earlier at ``max_iters`` / ``max_time_s`` (the time
    budget), whichever comes first. With ``ci_target_rel`` set, a segment that stopped on its
    minimums is extended (more measured steps, same conditions) until the 95% interval of the
    median is within +-``ci_target_rel`` of the median, or the budget ends (as pytest-benchmark
    and hyperfine calibrate the number of rounds).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    min_iters: int = Field(ITERATIONS.min_iters, ge=1, le=MAX_ITERS)
    min_time_s: float = Field(ITERATIONS.min_time_s, ge=0.0, le=MAX_SECONDS)
    max_iters: int = Field(ITERATIONS.max_iters, ge=1, le=MAX_ITERS)
    max_time_s: float = Field(ITERATIONS.max_time_s, gt=0.0, le=MAX_SECONDS)
    warmup_window: int = Field(ITERATIONS.warmup_window, ge=2, le=MAX_ITERS)
    warmup_rel_tol: float = Field(ITERATIONS.warmup_rel_tol, gt=0.0, lt=1.0)
    min_warmup_iters: int = Field(ITERATIONS.min_warmup_iters, ge=0, le=MAX_ITERS)
    max_warmup_iters: int = Field(ITERATIONS.max_warmup_iters, ge=0, le=MAX_ITERS)
    max_warmup_time_s: float = Field(ITERATIONS.max_warmup_time_s, ge=0.0,
                                     le=MAX_SECONDS)
    ci_target_rel: float | None = Field(None, gt=0.0, lt=1.0)

    @model_validator(mode="after")
    def _check(self) -> IterationPolicy:
        if self.max_iters < self.min_iters:
            raise ValueError(f"max_iters ({self.max_iters}) must be >= min_iters ({self.min_iters})")
        if self.max_time_s < self.min_time_s:
            raise ValueError(f"max_time_s ({self.max_time_s}) must be >= min_time_s ({self.min_time_s})")
        return self


class DDPOptions(BaseModel):
    """``torch.nn.parallel.DistributedDataParallel`` options (docs/measurement.md rule 6: recorded and
    settable). Defaults are PyTorch's own (:data:`dlperf.config.defaults.DDP`; ``broadcast_buffers`` on: rank
    0's buffers, e.g. BatchNorm running statistics, are broadcast at every forward; the rest
    off); see the PyTorch DDP documentation for what each changes. A framework takes them when
    its registry entry says ``ddp=True`` (:mod:`dlperf.registry`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    bucket_cap_mb: float = Field(DDP.bucket_cap_mb, gt=0.0, le=MAX_BUCKET_MB)
    gradient_as_bucket_view: bool = DDP.gradient_as_bucket_view
    static_graph: bool = DDP.static_graph
    find_unused_parameters: bool = DDP.find_unused_parameters
    broadcast_buffers: bool = DDP.broadcast_buffers

    def changed(self) -> list[str]:
        """``["broadcast_buffers=False", ...]``: the options not at their default, for labels."""
        return ddp_changes(self.model_dump())

    def key_dict(self) -> dict[str, Any]:
        """The options for a run key: fields added after the first results count only when
        not at their default (``broadcast_buffers``), so older keys stay valid."""
        d = self.model_dump()
        if d["broadcast_buffers"]:
            del d["broadcast_buffers"]
        return d


#: The fields of :class:`DDPOptions` (the keys of a framework's options that are DDP's).
DDP_FIELDS = tuple(DDPOptions.model_fields)


def ddp_of(options: Any) -> DDPOptions:
    """The DDP options among a run config's framework ``options`` (the others ignored; those
    not given at their default).

    Raises:
        pydantic.ValidationError: a DDP option of the wrong kind (its framework's ``Options``
            model refuses it first when the config is made).
    """
    given = {k: v for k, v in (options or {}).items() if k in DDP_FIELDS}
    return DDPOptions.model_validate(given)


def ddp_given(ddp: Any) -> dict[str, Any]:
    """The options of a ``ddp`` mapping (or :class:`DDPOptions`) as a run config was given them
    before they were framework options, those not at their default: what goes into its
    ``options``. Anything that is not a mapping is returned as it is, for the model to refuse.
    """
    if isinstance(ddp, DDPOptions):
        ddp = ddp.model_dump()
    if not isinstance(ddp, dict):
        return ddp
    dflt = DDPOptions().model_dump()
    return {k: v for k, v in ddp.items() if k not in dflt or v != dflt[k]}


def ddp_changes(options: Any) -> list[str]:
    """The DDP options of a stored result (``config.ddp``, a dict; or a run config's
    ``options``, whose keys that are not DDP's are passed over) that are not at their default,
    as ``"name=value"``; ``[]`` for none or for anything that is not a dict.

    Used by run labels, result lines and results tables, so that two runs differing only in a
    DDP option tell apart.
    """
    if not isinstance(options, dict):
        return []
    dflt = DDPOptions().model_dump()
    return [f"{k}={v}" for k, v in options.items() if k in dflt and v != dflt[k]]
