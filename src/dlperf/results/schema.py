"""The typed result record: one configuration's outcome, as the worker assembles it, the store
keeps it and the report reads it.

:class:`RunRecord` is a pydantic model of typed parts (:class:`Identity`, :class:`Timing`,
:class:`Summary`, :class:`Throughput`, the raw per-iteration ``samples`` and ``losses``,
:class:`Compile`, :class:`Memory`, :class:`Power`, :class:`Flops`/:class:`Mfu`, :class:`Dist`,
:class:`Breakdown`/:class:`Trace`, :class:`Env`, ``warnings``, ...). Every part refuses a key
it does not declare, and a part or field that a result did not carry stays unset, so a result
dict read with :meth:`RunRecord.from_dict` comes back from :meth:`RunRecord.to_dict` as it went
in, after the upgrade of an older record (:func:`upgrade`; numbers are never coerced: an
``int`` stays an ``int``).

:meth:`RunRecord.to_dict` is the flat dict that dlperf has always written (``run_key``,
``model``, ``summary``, ... at the top level; :data:`TOP_LEVEL_ORDER`): the stored JSON, the
worker's result file and what report/ and perfmodel/ read until they move onto the record.

One schema version (:data:`SCHEMA_VERSION`) for the record and the results file that stores it
(:mod:`dlperf.results.store`). Older records are upgraded on reading (:func:`upgrade`:
:func:`dlperf.results.migrations.upgrade_record`, then a key no part declares is kept in
``unrecognised``); a newer one is refused. :func:`failure_record` makes the record of a run
that did not measure (out of memory, a crash, a timeout, ...): the one function that makes a
failure, in the worker and in every launcher.
"""

from __future__ import annotations

import datetime as _dt
import functools
import typing
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, StrictInt, StrictStr

from dlperf.results.migrations import SCHEMA_VERSION, upgrade_record
from dlperf.results.parts import (
    Breakdown,
    BreakdownRun,
    Compile,
    Convergence,
    DataWait,
    Dist,
    Env,
    Flops,
    Host,
    HostCpuWait,
    Identity,
    Memory,
    Mfu,
    Num,
    OpClasses,
    Part,
    Power,
    RankInfo,
    RankOutcome,
    Spec,
    Summary,
    Throughput,
    Timeline,
    Timing,
    Trace,
    WorkerInfo,
)

if TYPE_CHECKING:
    from dlperf.config import RunConfig

__all__ = ["SCHEMA_VERSION", "STATUSES", "RunRecord", "Identity", "Timing", "Summary",
           "Throughput", "Compile", "Memory", "Power", "Flops", "Mfu", "Convergence", "DataWait",
           "Dist", "RankInfo", "Breakdown", "Trace", "OpClasses", "BreakdownRun", "Env",
           "HostCpuWait", "WorkerInfo", "Spec", "StoredAt", "failure_record", "new_record",
           "identity_of", "now_iso", "TOP_LEVEL_ORDER", "upgrade", "RankOutcome"]

#: How a run ended. ``ok``: measured; ``oom``, ``nan_loss``, ``crash``, ``timeout``: final
#: outcomes of the configuration; ``error``, ``unavailable``: fix and run again.
STATUSES = ("ok", "oom", "nan_loss", "error", "crash", "timeout", "unavailable")


class StoredAt(BaseModel):
    """Where a record read from a results file sits: its row id and the sweep that wrote it."""

    model_config = ConfigDict(defer_build=True)  # built when first used, as the parts are

    id: int
    sweep: str | None = None


#: Parts whose fields are top-level keys of the flat dict (:meth:`RunRecord.to_dict`).
FLAT_PARTS: dict[str, type[Part]] = {"identity": Identity, "timing": Timing}


class RunRecord(Part):
    """One configuration's result (see the module docstring). Read the typed parts, e.g.
    ``rec.identity.model``, ``rec.summary.median`` (s), ``rec.samples["measure"]`` (s, one
    per measured iteration), ``rec.mfu.mfu``.

    Raw samples: ``samples`` maps a phase (``first``, ``warmup``, ``measure``, ``data_wait``,
    ``breakdown:<phase>``, ``trace:<phase>``, ``rank<r>:<phase>``) to its per-iteration times
    in seconds; ``losses`` maps ``first``/``warmup``/``measure`` (and ``rank<r>:`` ones) to the
    per-iteration losses. A part not set is absent from :meth:`to_dict`.

    A record read from a results file with ``lazy_samples``
    (:meth:`dlperf.results.store.ResultStore.records`) gets its raw samples and losses when
    they are first asked for through :attr:`measured_s`, :meth:`to_dict` or
    :meth:`load_samples`; until then ``samples`` and ``losses`` are unset.
    """

    schema_version: StrictInt = SCHEMA_VERSION
    identity: Identity = Field(default_factory=Identity)
    timing: Timing | None = None
    summary: Summary | None = None
    throughput: Throughput | None = None
    compile: Compile | None = None
    memory: Memory | None = None
    samples: dict[str, list[Num | None]] | None = None
    losses: dict[str, list[Num | None]] | None = None
    convergence: Convergence | None = None
    data_wait: DataWait | None = None
    power: Power | None = None
    flops: Flops | None = None
    ceilings: dict[str, Any] | None = None
    datasheet: dict[str, Any] | None = None
    mfu: Mfu | None = None
    probe_errors: dict[str, Any] | None = None
    dist: Dist | None = None
    rank_imbalance: Num | None = None
    exposed_comm_s: Num | None = None
    warnings: list[StrictStr] | None = None
    breakdown: Breakdown | None = None
    op_classes: OpClasses | None = None
    trace: Trace | None = None
    timeline: Timeline | None = None
    host: Host | None = None
    breakdown_run: BreakdownRun | None = None
    versions: dict[str, Any] | None = None
    flags: dict[str, Any] | None = None
    data_info: dict[str, Any] | None = None
    device_name: StrictStr | None = None
    env: Env | None = None
    host_cpu_wait: HostCpuWait | None = None
    ranks: list[RankOutcome] | None = None
    worker: WorkerInfo | None = None
    #: Keys of an older record that no part declares, by dotted path (``"env.foo"``), kept by
    #: :func:`upgrade` instead of dropped; never written by this dlperf.
    unrecognised: dict[str, Any] | None = None
    stored: StoredAt | None = Field(default=None, exclude=True)
    #: Sets ``samples`` and ``losses`` of a record read with ``lazy_samples`` (called once,
    #: by :meth:`load_samples`); None: they are set already, or there are none to read.
    _samples_from: Any = PrivateAttr(default=None)

    def load_samples(self) -> None:
        """Read this record's raw samples and losses from its results file now, where it was
        read with ``lazy_samples`` and they are not read yet; else nothing.

        Raises:
            sqlite3.ProgrammingError: the store it was read from is closed.
        """
        load = self._samples_from
        if load is not None:
            load(self)
            self._samples_from = None

    @classmethod
    def from_dict(cls, result: Mapping[str, Any]) -> RunRecord:
        """The record of a flat result dict (a worker's, a launcher's, a stored row's JSON),
        upgraded to :data:`SCHEMA_VERSION` first (:func:`upgrade`).

        Raises:
            ConfigError: the result was written by a newer schema than this dlperf knows.
            pydantic.ValidationError: a field has a value of the wrong type, or a record of
                this version has a key no part declares (a misspelt field).
        """
        flat = upgrade(result)
        data: dict[str, Any] = {}
        for name, part in FLAT_PARTS.items():
            if name in flat:
                raise ValueError(f"a flat result has no {name!r} key; got one in "
                                 f"{flat.get('run_key')!r}")
            own = {k: flat.pop(k) for k in list(flat) if k in part.model_fields}
            if own or name == "identity":
                data[name] = own
        return cls.model_validate({**flat, **data})

    def to_dict(self, *, raw: bool = True) -> dict[str, Any]:
        """The flat result dict (see the module docstring), keys in :data:`TOP_LEVEL_ORDER`
        then extra keys; with ``raw=False`` without ``samples`` and ``losses`` (as the store's
        ``result_json``)."""
        if raw:
            self.load_samples()
        d = self.model_dump(exclude_unset=True, exclude={"schema_version", *FLAT_PARTS})
        flat: dict[str, Any] = {"schema_version": self.schema_version}
        for name in FLAT_PARTS:
            part = getattr(self, name)
            if part is not None:
                flat.update(part.model_dump(exclude_unset=True))
        flat.update(d)
        if not raw:
            flat.pop("samples", None)
            flat.pop("losses", None)
        ordered = {k: flat.pop(k) for k in TOP_LEVEL_ORDER if k in flat}
        ordered.update(flat)
        return ordered

    @property
    def measured_s(self) -> list[Any]:
        """The measured step times (s), one per iteration; empty for a failure."""
        self.load_samples()
        return list((self.samples or {}).get("measure") or [])


#: Key order of the flat dict: the order in which the worker has always assembled a result.
TOP_LEVEL_ORDER: tuple[str, ...] = (
    "schema_version", *(k for k in Identity.model_fields),
    "summary", "throughput", "first_iter_s", "warmup_iters", "warmup_time_s", "steady_state",
    "warmup_settled", "compile_handling", "remeasured", "excluded_steps", "compile", "n_measured", "measured_time_s", "wall_time_s", "timing_rel_diff",
    "timing_consistent", "memory", "samples", "losses", "convergence", "data_wait", "power",
    "flops", "ceilings", "datasheet", "mfu", "probe_errors", "dist", "rank_imbalance",
    "exposed_comm_s", "warnings", "op_classes", "trace", "breakdown", "breakdown_run",
    "versions", "flags", "data_info", "device_name", "env", "host_cpu_wait", "ranks", "worker",
    "unrecognised")


def _part_in(annotation: Any) -> tuple[type[Part] | None, bool]:
    """The part class a field's annotation holds (``Memory | None``, ``list[RankInfo] |
    None``) and whether as a list; ``(None, False)`` for a value that is not a part. Answered
    once per annotation (:func:`_part_in_uncached`; an unhashable one each time): reading a
    folder of results asks it for every key of every stored record."""
    try:
        return _part_in_cached(annotation)
    except TypeError:  # an annotation that cannot be a dict key
        return _part_in_uncached(annotation)


def _part_in_uncached(annotation: Any) -> tuple[type[Part] | None, bool]:
    """:func:`_part_in`, worked out."""
    if isinstance(annotation, type) and issubclass(annotation, Part):
        return annotation, False
    if typing.get_origin(annotation) is list:
        inner, _ = _part_in(typing.get_args(annotation)[0])
        return inner, inner is not None
    for arg in typing.get_args(annotation):
        found = _part_in(arg)
        if found[0] is not None:
            return found
    return None, False


_part_in_cached = functools.cache(_part_in_uncached)


@functools.cache
def _kinds(part: type[BaseModel]) -> dict[str, tuple[type[Part] | None, bool]]:
    """A model's fields by name -> the part each holds and whether as a list (:func:`_part_in`
    of its annotation), worked out once per class (its fields are fixed when it is made)."""
    return {n: _part_in(f.annotation) for n, f in part.model_fields.items()}


def _park(d: Mapping[str, Any], kinds: Mapping[str, tuple[type[Part] | None, bool]],
          path: str, parked: dict[str, Any]) -> dict[str, Any]:
    """``d`` with the keys that ``kinds`` (name -> (part, as a list), :func:`_kinds`) does not
    declare moved into ``parked`` under their dotted path, recursing into the parts it holds."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        kind = kinds.get(k)
        if kind is None:
            parked[f"{path}{k}"] = v
            continue
        part, many = kind
        if part is not None and many and isinstance(v, list):
            own = _kinds(part)
            v = [_park(x, own, f"{path}{k}[{i}].", parked) if isinstance(x, dict) else x
                 for i, x in enumerate(v)]
        elif part is not None and isinstance(v, dict):
            v = _park(v, _kinds(part), f"{path}{k}.", parked)
        out[k] = v
    return out


@functools.cache
def _flat_kinds() -> dict[str, tuple[type[Part] | None, bool]]:
    """:func:`_kinds` of a flat result dict: the record's own fields and those of its flat
    parts."""
    kinds = {n: k for n, k in _kinds(RunRecord).items() if n not in FLAT_PARTS and n != "stored"}
    for part in FLAT_PARTS.values():
        kinds.update(_kinds(part))
    return kinds


def upgrade(result: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the flat result dict ``result`` upgraded to :data:`SCHEMA_VERSION`: the
    version steps of :func:`~dlperf.results.migrations.upgrade_record`, then, for a record
    older than version 11 (when parts began to refuse unknown keys), every key that no part
    declares moved into ``unrecognised`` (dotted path -> value) rather than refused or lost.
    A record of the current version is left to the parts' own check.

    Raises:
        ConfigError: as :func:`~dlperf.results.migrations.upgrade_record`.
    """
    version = result.get("schema_version", 1) if isinstance(result, Mapping) else None
    flat = upgrade_record(result)
    if isinstance(version, int) and version < 11:
        parked: dict[str, Any] = {}
        flat = _park(flat, _flat_kinds(), "", parked)
        if parked:
            flat["unrecognised"] = {**(flat.get("unrecognised") or {}), **parked}
    return flat


def now_iso() -> str:
    """Current UTC time, ISO 8601 with seconds (a record's ``created_at``)."""
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def identity_of(cfg: RunConfig, status: str, error: str | None = None) -> Identity:
    """The identity part of ``cfg``'s record: run and point keys, repeat, ``status``, ``error``,
    ``created_at`` (now), the resolved config, the axes and the model's spec.

    Raises:
        ValueError: ``status`` is not one of :data:`STATUSES`.
    """
    from dlperf.zoo import get_spec

    if status not in STATUSES:
        raise ValueError(f"unknown status {status!r}; one of {', '.join(STATUSES)}")
    spec = get_spec(cfg.workload.model)
    return Identity(
        run_key=cfg.run_key(), repeat=cfg.measure.repeat, point_key=cfg.point_key(), status=status,
        error=error, created_at=now_iso(), config=cfg.model_dump(), model=cfg.workload.model,
        framework=cfg.runtime.framework, mode=cfg.runtime.mode, device=cfg.hardware.device, precision=cfg.hardware.precision,
        batch_size=cfg.global_batch, grad_accum=cfg.workload.grad_accum, data=cfg.input.data,
        threads=cfg.hardware.threads, world_size=cfg.world_size, nproc=cfg.parallel.nproc, nnodes=cfg.parallel.nnodes,
        per_device_batch=cfg.per_device_batch, scaling=cfg.parallel.scaling,
        spec=Spec(family=spec.family, params=spec.params,
                  forward_flops_per_sample=spec.forward_flops_per_sample,
                  train_flops_per_sample=spec.train_flops_per_sample,
                  tokens_per_sample=spec.tokens_per_sample, code=spec.code))


def new_record(cfg: RunConfig, status: str, error: str | None = None,
               **parts: Any) -> RunRecord:
    """A record of a run of ``cfg`` that ended with ``status`` (why in ``error``): its identity
    (:func:`identity_of`) and any further parts given (``summary=...``, ``env=...``, as dicts
    or parts; ``timing`` as a dict of :class:`Timing` fields).

    Raises:
        ValueError: ``status`` is not one of :data:`STATUSES`.
        pydantic.ValidationError: a part has a field of the wrong type.
    """
    return RunRecord.model_validate({"identity": identity_of(cfg, status, error), **parts})


def failure_record(cfg: RunConfig, status: str, error: str | None = None,
                   **parts: Any) -> RunRecord:
    """The record of a run of ``cfg`` that did not measure: ``status`` is a failure (``oom``,
    ``nan_loss``, ``error``, ``crash``, ``timeout``, ``unavailable``), ``error`` says why; any
    further parts given are kept (``env=...``, ``memory=...``, ``worker=...``, ``ranks=...``).
    The one place a failure is made: the worker's and the launchers' (their flat dict is
    :meth:`RunRecord.to_dict`).

    Raises:
        ValueError: ``status`` is ``ok`` or not one of :data:`STATUSES`.
    """
    if status == "ok":
        raise ValueError("failure_record makes failures; a measured run is new_record(cfg, 'ok')")
    return new_record(cfg, status, error, **parts)
