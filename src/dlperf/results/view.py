"""A stored result as its readers read it: the record of a store row, and the values of a
record that they read most.

A results row (:meth:`dlperf.results.store.ResultStore.rows`) holds columns made from its
record by :func:`dlperf.results.store.flatten` and the record itself (without raw samples) as
``result_json``. Readers of stored results (``dlperf.report``, :mod:`dlperf.perfmodel.scaling`)
read the typed :class:`~dlperf.results.schema.RunRecord`, never the row's keys.

Two readings of a row: :func:`record_of` reads its ``result_json`` as stored (NaN kept, with
the row's raw samples when given: ``ResultStore.records``), and :func:`as_record`
(:func:`record_of_row`) writes the row's columns back into the fields they were made from
(:data:`COLUMN_FIELDS`). So a row that carries columns only (a test's, a tool's) reads as the record of those columns,
and where a column and the JSON disagree (a NaN stored as NULL, a flag stored as 0/1) the
column wins, as it did when readers read the columns.

This is the one reader of records: a row is read as a record once, where it leaves the store
(:func:`as_records`), and every function after that takes a record. The readers here give a
record's point (:func:`point_of`, :data:`POINT_KEYS`), its settings (:func:`setting`,
:func:`settings_of`), its label (:func:`label_of_record`) and the pieces of a label that set
a run apart from another of the same point (:func:`compile_mode_label`,
:func:`optimizer_label`, :func:`extra_measurements`, :func:`workers_kind`,
:func:`applied_layout`, :func:`dp_variant_of`). Framework facts come from the registry
(:func:`dlperf.registry.framework_info`), never from a framework's name.

Nothing here imports a framework.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from dlperf.registry import framework_info
from dlperf.results.rows import SUMMARY_KEYS
from dlperf.results.schema import RunRecord, StoredAt, Timing, upgrade

__all__ = ["COLUMN_FIELDS", "MADE_FROM_COLUMNS", "LOSS_PHASES", "result_of", "record_of",
           "attach_samples",
           "record_of_row", "as_record", "as_records",
           "config_of", "setting", "repeat_in", "result_id", "median_s", "ci_s",
           "samples_per_s", "world_of", "per_device_of", "scaling_of", "batch_fields",
           "settings_of", "label_of_record", "SERIES_SETTINGS",
           "warnings_text", "env_of", "POINT_KEYS", "field", "fields", "point_of",
           "framework_mode", "is_ok", "layout_setting", "compile_mode_label",
           "optimizer_impl_label", "optimizer_label", "extra_measurements", "workers_kind",
           "applied_layout", "dp_variant_of", "dist_options", "eager_mode_of"]

#: Store column -> ``(part, field)`` of the record it was made from (:func:`flatten`'s
#: inverse, for the columns readers read; ``""``: a top-level field of the flat result dict,
#: which is where the identity and timing fields sit). ``warnings`` (``; ``-joined) and
#: ``loader_workers`` (the config's) are written back by :func:`record_of_row` itself.
COLUMN_FIELDS: dict[str, tuple[str, str]] = {
    **{k: ("", k) for k in ("run_key", "created_at", "status", "error", "model", "framework",
                            "mode", "device", "precision", "batch_size", "grad_accum", "data",
                            "threads", "world_size", "nnodes", "per_device_batch")},
    **{k: ("", k) for k in ("device_name", "rank_imbalance", "exposed_comm_s")},
    **{k: ("", k) for k in Timing.model_fields},
    **{f"step_time_{k}_s": ("summary", k) for k in SUMMARY_KEYS},
    **{k: ("throughput", k) for k in ("samples_per_s", "tokens_per_s", "samples")},
    **{k: ("memory", k) for k in ("peak_allocated_bytes", "peak_reserved_bytes",
                                  "nvml_used_bytes", "peak_rss_bytes")},
    "data_wait_share": ("data_wait", "share"), "input_bound": ("data_wait", "input_bound"),
    "achieved_flops_per_s": ("mfu", "achieved_flops_per_s"), "mfu": ("mfu", "mfu"),
    "mean_power_w": ("power", "mean_power_w"),
    "energy_per_iter_j": ("power", "energy_per_iter_j"),
    "time_to_target_s": ("convergence", "time_to_target_s"),
}

#: Parts made from a row's columns when its record lacks them: what every measured row has
#: columns for. A column of another part (data wait, MFU, power, convergence) is a number of
#: that part and is written only into a record that has the part (every stored row whose
#: column has a value does), so a row never gains a part its record did not measure.
MADE_FROM_COLUMNS = ("summary", "throughput", "memory")

#: Columns stored as 0/1 that are flags of the record (``ResultStore.rows`` turns them into
#: booleans; a row made elsewhere may not).
_FLAGS = ("timing_consistent", "steady_state", "input_bound")


#: Phases whose losses are stored beside their times (the training phases, per rank too); other
#: phases (``data_wait``, ``breakdown:*``, ``trace:*``) have times only.
LOSS_PHASES = ("first", "warmup", "measure")


def _has_losses(phase: str) -> bool:
    return phase.rsplit(":", 1)[-1] in LOSS_PHASES and (
        ":" not in phase or phase.startswith("rank"))


def record_of(row: Mapping[str, Any],
              raw: Mapping[str, Mapping[str, list[Any]]] | None = None,
              parsed: tuple[str, RunRecord] | None = None) -> RunRecord:
    """The record of a store row (as from :meth:`ResultStore.rows`): its ``result_json`` read
    as a :class:`~dlperf.results.schema.RunRecord` (upgraded to the current schema), with its
    row id and sweep in ``stored``; with ``raw`` (:meth:`ResultStore.samples` of the row) also
    its raw ``samples`` (s) and ``losses`` (training phases, and any phase with a loss stored;
    a NaN loss reads back as None, SQLite keeps no NaN). A row without readable JSON gives the
    record of its identity columns. ``parsed``: ``(result_json, record)``, the record this
    row's JSON was read as already (:func:`dlperf.results.rowcheck.scan`), taken as it is
    where the row holds that JSON (the caller hands each such record out once).

    Raises:
        ConfigError: the row's record was written by a newer dlperf.
    """
    if (parsed is not None and not isinstance(row.get("result"), dict)
            and parsed[0] == row.get("result_json")):
        rec = parsed[1]
    else:
        res = result_of(row)
        if not res:
            res = {k: row.get(k) for k in ("run_key", "status", "error", "created_at", "model",
                                           "framework", "mode", "device", "precision",
                                           "batch_size", "grad_accum", "data", "threads")
                   if k in row}
        rec = RunRecord.from_dict(res)
    attach_samples(rec, raw)
    if row.get("id") is not None:
        rec.stored = StoredAt(id=row["id"], sweep=row.get("sweep"))
    return rec


def attach_samples(rec: RunRecord, raw: Mapping[str, Mapping[str, list[Any]]] | None) -> None:
    """Set ``rec``'s raw ``samples`` (s) and ``losses`` from ``raw`` (:meth:`ResultStore.
    samples` of its row), as :func:`record_of` does: nothing where ``raw`` is None or empty;
    losses of the training phases, and of any phase with a loss stored."""
    if raw is not None and raw:
        rec.samples = {ph: list(v["step_time_s"]) for ph, v in raw.items()}
        rec.losses = {ph: list(v["loss"]) for ph, v in raw.items()
                      if _has_losses(ph) or any(x is not None for x in v["loss"])}


def result_of(row: Mapping[str, Any]) -> dict[str, Any]:
    """The full result dict of a store row: its ``result`` dict if it carries one, else its
    ``result_json`` parsed (``{}`` when absent or unreadable)."""
    r = row.get("result")
    if isinstance(r, dict):
        return r
    try:
        res = json.loads(row.get("result_json") or "{}")
    except (TypeError, ValueError, RecursionError):
        return {}
    return res if isinstance(res, dict) else {}


def _column(col: str, value: Any) -> Any:
    if col in _FLAGS and isinstance(value, int) and not isinstance(value, bool):
        return bool(value)
    return value


def record_of_row(row: Mapping[str, Any]) -> RunRecord:
    """The record of a store row (``ResultStore.rows``, or a dict of some of its columns):
    its ``result_json`` (or ``result`` dict) upgraded to the current schema, the row's columns
    written into the fields they were made from (:data:`COLUMN_FIELDS`; parts made only as
    :data:`MADE_FROM_COLUMNS` says), ``warnings`` (the record's own list where it joins to
    the column, else the column split at ``; ``), ``loader_workers`` into the config, and the row's ``id`` and ``sweep`` as :attr:`RunRecord.stored`.

    Raises:
        ConfigError: the row's record was written by a newer dlperf.
        pydantic.ValidationError: a column holds a value of the wrong type for its field.
    """
    flat = upgrade(result_of(row))
    for col, value in row.items():
        where = COLUMN_FIELDS.get(col)
        if where is None:
            continue
        part, name = where
        value = _column(col, value)
        if not part:
            flat[name] = value
        elif isinstance(flat.get(part), dict):
            flat[part] = {**flat[part], name: value}
        elif value is not None and part in MADE_FROM_COLUMNS:
            flat[part] = {name: value}
    if "warnings" in row:  # the column joins them with "; ": the record's list if it agrees
        own, col = flat.get("warnings"), row["warnings"]
        if not (isinstance(own, list) and "; ".join(map(str, own)) == col):
            flat["warnings"] = col.split("; ") if col else None
    if "loader_workers" in row:
        cfg, lw = flat.get("config"), row["loader_workers"]
        if cfg is None or isinstance(cfg, dict):
            cfg = cfg or {}
            given = cfg.get("input")
            inp: dict[str, Any] = given if isinstance(given, dict) else {}
            if lw is not None or "loader_workers" in inp:
                flat["config"] = {**cfg, "input": {**inp, "loader_workers": lw}}
    rec = RunRecord.from_dict(flat)
    if row.get("id") is not None:
        rec.stored = StoredAt(id=row["id"], sweep=row.get("sweep"))
    return rec


def as_record(row: Mapping[str, Any]) -> RunRecord:
    """The record of a store row (:func:`record_of_row`): where a row becomes a record for its
    readers, once (a result dict, as :meth:`RunRecord.to_dict` writes it, is
    :meth:`RunRecord.from_dict`'s).

    Raises:
        ConfigError: the row's record was written by a newer dlperf.
        pydantic.ValidationError: a value of the wrong type for its field.
    """
    return record_of_row(row)


def as_records(rows: Iterable[Mapping[str, Any]]) -> list[RunRecord]:
    """:func:`as_record` of each of ``rows``, in order."""
    return [as_record(r) for r in rows]


def config_of(rec: RunRecord) -> dict[str, Any]:
    """The settings of the resolved config the record ran, by name (``{"batch_size": 64,
    "device": "cuda", "iterations": {...}, "ddp": {...}, ...}``: the stored axes read by
    :func:`dlperf.config.axes.flat_settings`; ``{}`` when it stored none). A dict, not a
    :class:`~dlperf.config.RunConfig`: an older record's config need not validate against
    this dlperf's."""
    from dlperf.config.axes import flat_settings

    return flat_settings(rec.identity.config)


def setting(rec: RunRecord, name: str, default: Any = None) -> Any:
    """The config setting ``name`` of the record (``layout``, ``compile_mode``, ...), or
    ``default`` where its config does not have it (stored before the setting existed)."""
    return config_of(rec).get(name, default)


def repeat_in(rec: RunRecord) -> int:
    """Which repeated run of its point a record is (``dlperf run --repeats N``): its
    ``repeat``, else the config's, else 0 (results from before repeats existed)."""
    rep = rec.identity.repeat
    if rep is None:
        rep = setting(rec, "repeat")
    return rep if isinstance(rep, int) and not isinstance(rep, bool) else 0


def result_id(rec: RunRecord) -> int | None:
    """The store row id of a record read from a store (None: not read from one)."""
    return rec.stored.id if rec.stored is not None else None


def median_s(rec: RunRecord) -> Any:
    """The median measured step time (s); None for a failure."""
    return rec.summary.median if rec.summary is not None else None


def ci_s(rec: RunRecord) -> tuple[Any, Any]:
    """The bootstrap CI of the median step time (s) as ``(low, high)``; Nones when absent."""
    s = rec.summary
    return (s.ci_low, s.ci_high) if s is not None else (None, None)


def samples_per_s(rec: RunRecord) -> Any:
    """Training samples per second of the measured segment (None for a failure)."""
    return rec.throughput.samples_per_s if rec.throughput is not None else None


def world_of(rec: RunRecord) -> int:
    """Data-parallel devices of the run (records from before data parallelism: 1)."""
    return int(rec.identity.world_size or 1)


def per_device_of(rec: RunRecord) -> int | None:
    """Per-device batch of the run (its batch when it ran on one device); None without a
    batch size."""
    ident = rec.identity
    if ident.per_device_batch is not None:
        return int(ident.per_device_batch)
    return None if ident.batch_size is None else int(ident.batch_size) // world_of(rec)


def scaling_of(rec: RunRecord) -> str:
    """``strong`` or ``weak``: how ``--batch-size`` was read (strong: the global batch; weak:
    the per-device batch). Records without it (before data parallelism) ran on one device,
    where both read the same: ``strong``."""
    s = rec.identity.scaling or config_of(rec).get("scaling")
    return s if s in ("strong", "weak") else "strong"


def batch_fields(rec: RunRecord) -> dict[str, Any]:
    """The batch semantics of a record, as every export names them: ``batch_size`` (the
    global batch: samples per iteration over all devices), ``per_device_batch``,
    ``world_size`` (devices), ``nnodes`` and ``scaling`` (:func:`scaling_of`); derived for
    records older than these fields (one device, strong scaling), never written back."""
    return {"batch_size": rec.identity.batch_size, "per_device_batch": per_device_of(rec),
            "world_size": world_of(rec), "nnodes": int(rec.identity.nnodes or 1),
            "scaling": scaling_of(rec)}


def settings_of(rec: RunRecord) -> dict[str, Any]:
    """The settings of a record's point for its label (:func:`dlperf.config.identity.label_of`):
    its stored config with the record's identity over it (the axes, ``batch_size`` the global
    batch, ``per_device_batch``, ``world_size``, ``repeat``), so a record that stored no
    config, or one from before a field existed, still has its axes."""
    i = rec.identity
    ident = {k: getattr(i, k) for k in ("model", "framework", "mode", "device", "precision",
                                        "data", "threads", "nproc", "nnodes", "repeat")}
    return {**config_of(rec), **{k: v for k, v in ident.items() if v is not None},
            **batch_fields(rec)}


#: The settings a series of points along the batch size shares (a plot's line): the label of
#: the series (:func:`label_of_record` with ``only=SERIES_SETTINGS``).
SERIES_SETTINGS = ("framework", "mode", "compile_mode", "device", "nproc", "nnodes",
                   "world_size", "precision", "data", "threads")


def label_of_record(rec: RunRecord, *, repeat: bool = True,
                    only: Iterable[str] | None = None) -> str:
    """The label of a record's point (:func:`dlperf.config.identity.label_of` of
    :func:`settings_of`); without the repeat number with ``repeat=False``; of the settings in
    ``only`` alone when given (the label of a group of points that share them, e.g.
    :data:`SERIES_SETTINGS`)."""
    from dlperf.config.identity import label_of

    s = settings_of(rec)
    if not repeat:
        s.pop("repeat", None)
    if only is not None:
        keep = set(only)
        s = {k: v for k, v in s.items() if k in keep}
    return label_of(s)


def warnings_text(rec: RunRecord) -> str | None:
    """The record's quality warnings ``; ``-joined (the store's ``warnings`` column), or None."""
    return "; ".join(rec.warnings or []) or None


def env_of(rec: RunRecord) -> dict[str, Any]:
    """What :func:`dlperf.env.environment_of` reads of a record: its ``env`` and
    ``versions`` as stored, and ``flags.optimizer`` (the optimizer implementation that ran)."""
    env = rec.env.model_dump(exclude_unset=True) if rec.env is not None else None
    return {"env": env, "versions": rec.versions,
            "flags": {"optimizer": (rec.flags or {}).get("optimizer")}}



#: What makes two results comparable: the point they measured (:func:`point_of`).
POINT_KEYS = ("model", "device", "precision", "batch_size", "data", "threads", "loader_workers",
              "world_size", "grad_accum")
#: Point fields whose missing value means 1 (results stored before the field existed).
_ONE_IF_NULL = ("world_size", "grad_accum")


def field(rec: RunRecord, name: str) -> Any:
    """The identity field ``name`` of a record (``model``, ``batch_size``, ...: the names of
    the store's columns), or ``loader_workers`` from its config.

    Raises:
        AttributeError: ``name`` is neither.
    """
    if name == "loader_workers":
        return setting(rec, "loader_workers")
    return getattr(rec.identity, name)


def fields(rec: RunRecord, names: Iterable[str]) -> dict[str, Any]:
    """``{name: field(rec, name)}`` for each of ``names``."""
    return {k: field(rec, k) for k in names}


def point_of(rec: RunRecord, keys: Iterable[str] = POINT_KEYS) -> tuple[Any, ...]:
    """The comparison point of a record: its ``keys`` fields (default :data:`POINT_KEYS`).
    ``loader_workers`` None (batches prepared before timing) differs from 0 (the pipeline in
    the training thread); ``world_size`` and ``grad_accum`` None (results stored before data
    parallelism) are 1."""
    return tuple((field(rec, k) or 1) if k in _ONE_IF_NULL else field(rec, k) for k in keys)


def framework_mode(rec: RunRecord) -> str:
    """``framework/mode`` of a record, e.g. ``torch/eager``."""
    return f"{rec.identity.framework}/{rec.identity.mode}"


def is_ok(rec: RunRecord) -> bool:
    """True for a record that measured (status ``ok``)."""
    return rec.identity.status == "ok"


def layout_setting(rec: RunRecord) -> str:
    """The ``--layout`` a record ran with: ``auto`` (each framework's recommended layout, and
    results stored before the option existed), ``nchw`` or ``nhwc`` (forced)."""
    return setting(rec, "layout") or "auto"


def compile_mode_label(rec: RunRecord) -> str | None:
    """``[reduce-overhead]`` etc. for a run with a compiler mode other than the default
    (``--compile-mode``), so that it tells apart from the default run; None otherwise (and
    for results stored before the option existed: default)."""
    mode = setting(rec, "compile_mode")
    return f"[{mode}]" if mode and mode != "default" else None


def optimizer_impl_label(rec: RunRecord) -> str | None:
    """``opt=fused`` etc. for a run with an optimizer implementation other than the default
    (``--optimizer-impl``), so that it tells apart from the default run; None otherwise (and
    for results stored before the option existed: auto)."""
    impl = setting(rec, "optimizer_impl")
    return f"opt={impl}" if impl and impl != "auto" else None


def optimizer_label(rec: RunRecord) -> str | None:
    """The optimizer part of a record's label in the results table: ``opt=fused`` etc. for an
    implementation asked for (:func:`optimizer_impl_label`); for ``auto``, what it ran where
    that is not the framework's own default, ``opt=fused (auto)`` (the record's
    ``flags.optimizer``: ``impl_asked`` ``auto``, ``fused`` passed, ``impl`` what ran; PyTorch
    records these); None where ``auto`` ran the framework's default (no fused kernels here, a
    fused optimizer refused, a framework with one implementation) or the record does not say
    (stored before ``--optimizer-impl``)."""
    asked = optimizer_impl_label(rec)
    if asked:
        return asked
    o = (rec.flags or {}).get("optimizer")
    if isinstance(o, Mapping) and o.get("impl_asked") == "auto" and o.get("fused") is True \
            and o.get("impl"):
        return f"opt={o['impl']} (auto)"
    return None


def extra_measurements(rec: RunRecord) -> str | None:
    """``+breakdown`` / ``+trace`` for a run measured with --breakdown / --trace (a point of
    its own: its run key says so), so that it tells apart from the plain run; else None."""
    cfg = config_of(rec)
    marks = [m for m, on in (("+breakdown", cfg.get("breakdown")),
                             ("+trace", cfg.get("trace_dir"))) if on]
    return " ".join(marks) or None


def workers_kind(rec: RunRecord) -> str | None:
    """``processes`` or ``threads``: the kind of loader workers of a pipeline with workers,
    for a framework that offers several kinds (its registry ``loader_impls``, e.g. JAX's Grain
    processes or dlperf's HostPipeline threads; results stored before ``workers_kind``
    existed ran the threads); else None."""
    pipe = (rec.data_info or {}).get("pipeline")
    info = framework_info(rec.identity.framework)
    if not isinstance(pipe, dict) or info is None or len(info.loader_impls) < 2:
        return None
    if pipe.get("workers_kind"):
        return str(pipe["workers_kind"])
    if str(pipe.get("impl", "")).startswith("dlperf HostPipeline") and pipe.get("num_workers"):
        return "threads"
    return None


def applied_layout(rec: RunRecord) -> str | None:
    """The image layout a run applied (``NCHW``/``NHWC``, from its flags) where its framework
    runs more than one (its registry ``layouts``), so that runs differing only in layout tell
    apart; None for a framework of one layout and for models without 4-D activations."""
    info = framework_info(rec.identity.framework)
    if info is None or len(info.layouts) < 2 or not isinstance(rec.flags, dict):
        return None
    return rec.flags.get("layout")


def dp_variant_of(rec: RunRecord) -> str:
    """What sets a data-parallel run apart from others of its configuration and device count:
    a data-parallel layout other than its framework's first
    (:func:`dlperf.config.identity.layout_change`) and the DDP options not at their default
    (:func:`dlperf.config.ddp_changes`), e.g. ``"ddp(broadcast_buffers=False)"``; ``""``
    for none."""
    from dlperf.config import ddp_changes
    from dlperf.config.identity import layout_change

    cfg = config_of(rec)
    parts = []
    lay = layout_change(rec.identity.framework, cfg.get("dp_layout"))
    if lay:
        parts.append(lay)
    changed = ddp_changes(cfg.get("ddp"))
    if changed:
        parts.append(f"ddp({', '.join(changed)})")
    return " ".join(parts)


def dist_options(rec: RunRecord) -> str | None:
    """A data-parallel run's options that are not at their default (:func:`dp_variant_of`:
    ``per_device``, ``ddp(broadcast_buffers=False)``), so runs differing only in them tell
    apart; None for a one-device run or none changed."""
    if world_of(rec) <= 1:
        return None
    return dp_variant_of(rec) or None


def eager_mode_of(framework: Any) -> str | None:
    """The eager mode of ``framework`` (its registry ``eager_mode``), the baseline of its
    other modes; None for a framework without one or not registered here."""
    info = framework_info(framework)
    return info.eager_mode if info is not None else None
