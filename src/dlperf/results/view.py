"""A stored result as its readers read it: the record of a store row, and the values of a
record that they read most.

A results row (:meth:`dlperf.results.store.ResultStore.rows`) holds columns made from its
record by :func:`dlperf.results.store.flatten` and the record itself (without raw samples) as
``result_json``. Readers of stored results (``dlperf.report``, :mod:`dlperf.perfmodel.scaling`)
read the typed :class:`~dlperf.results.schema.RunRecord`, never the row's keys:
:func:`as_record` gives a record as it is and reads a row with :func:`record_of_row`, which
writes the row's columns back into the fields they were made from (:data:`COLUMN_FIELDS`).
So a row that carries columns only (a test's, a tool's) reads as the record of those columns,
and where a column and the JSON disagree (a NaN stored as NULL, a flag stored as 0/1) the
column wins, as it did when readers read the columns.

Nothing here imports a framework.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dlperf.results.schema import RunRecord, StoredAt, Timing, upgrade
from dlperf.results.store import SUMMARY_KEYS, result_of

__all__ = ["COLUMN_FIELDS", "MADE_FROM_COLUMNS", "record_of_row", "as_record", "as_records",
           "config_of", "setting", "repeat_in", "result_id", "median_s", "ci_s",
           "samples_per_s", "world_of", "per_device_of", "scaling_of", "batch_fields",
           "settings_of", "label_of_record", "SERIES_SETTINGS",
           "warnings_text", "env_of"]

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
        if isinstance(cfg, dict) and (lw is not None or "loader_workers" in cfg):
            flat["config"] = {**cfg, "loader_workers": lw}
        elif cfg is None and lw is not None:
            flat["config"] = {"loader_workers": lw}
    rec = RunRecord.from_dict(flat)
    if row.get("id") is not None:
        rec.stored = StoredAt(id=row["id"], sweep=row.get("sweep"))
    return rec


def as_record(result: RunRecord | Mapping[str, Any]) -> RunRecord:
    """``result`` itself if it is a record (``ResultStore.records``), else the record of a
    store row (:func:`record_of_row`)."""
    return result if isinstance(result, RunRecord) else record_of_row(result)


def as_records(results: Iterable[RunRecord | Mapping[str, Any]]) -> list[RunRecord]:
    """:func:`as_record` of each of ``results``, in order."""
    return [as_record(r) for r in results]


def config_of(rec: RunRecord) -> dict[str, Any]:
    """The resolved config the record ran (``RunConfig.model_dump()``; ``{}`` when it stored
    none). A dict, not a :class:`~dlperf.config.RunConfig`: an older record's config need not
    validate against this dlperf's."""
    cfg = rec.identity.config
    return cfg if isinstance(cfg, dict) else {}


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

