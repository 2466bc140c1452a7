"""Exports of stored results: CSV (flat columns) and JSON (with the full record and samples).

Both read each row's record (:func:`dlperf.results.store.record_of`), upgraded to the current
schema, not the row's JSON as it was written.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from dlperf.registry import framework_info
from dlperf.results.schema import RunRecord
from dlperf.results.store import COLUMNS, ResultStore, record_of
from dlperf.results.view import batch_fields, repeat_in, setting

__all__ = ["CSV_COLUMNS", "compiles", "csv_extras", "repeat_in", "to_csv", "to_json"]

#: CSV columns: every flat column except the embedded JSON, then from the record:
#: ``repeat`` (which repeated run of its point a row is, 0 for the first and for older
#: results), ``layout`` (the ``--layout`` setting; ``auto`` for results from before it) and
#: ``compile_mode`` (the compiler's mode, e.g. torch.compile's, in a mode that takes
#: ``--compile-mode``, else empty): settings that tell apart rows of one model, framework,
#: mode and batch. Then the batch semantics: ``batch_size`` is always the global batch (samples
#: per iteration over all devices), ``per_device_batch`` the batch of one device, ``world_size``
#: the devices and ``scaling`` how ``--batch-size`` was read (``strong``: as the global batch;
#: ``weak``: as the per-device batch); for results older than these fields they are derived
#: (one device, ``strong``; :func:`dlperf.results.view.batch_fields`). ``cpu_bind``: the
#: ``--cpu-bind`` setting (``none`` for results from before it). ``optimizer_impl``: the
#: ``--optimizer-impl`` asked for (``auto`` unless given); ``optimizer_ran``: the implementation
#: the result says it ran (:func:`dlperf.env.optimizer_ran`: ``fused``, ``foreach``,
#: ``single``, ``optax``, ...; empty where nothing was recorded), so that runs of one configuration
#: with different optimizer implementations tell apart in a spreadsheet.
CSV_COLUMNS = ["id", *[c for c in COLUMNS if c != "result_json"], "repeat", "layout",
               "compile_mode", "scaling", "cpu_bind", "optimizer_impl", "optimizer_ran"]


def compiles(rec: RunRecord) -> bool:
    """True when the record's framework and mode take ``--compile-mode`` (the registry's
    ``compile_modes``, e.g. PyTorch's graph mode: torch.compile), so its ``compile_mode`` is a
    setting of the run (``default`` when not given)."""
    info = framework_info(rec.identity.framework)
    return info is not None and rec.identity.mode in info.compile_modes


def _placement(rec: RunRecord) -> dict[str, Any]:
    """The columns CSV and JSON both add: the batch fields of
    :func:`~dlperf.results.view.batch_fields` and ``cpu_bind``."""
    return {**batch_fields(rec), "cpu_bind": setting(rec, "cpu_bind") or "none"}


def csv_extras(rec: RunRecord) -> dict[str, Any]:
    """The CSV columns that come from a record rather than a store column: ``repeat``,
    ``layout``, ``compile_mode``, ``scaling``, ``cpu_bind``, ``optimizer_impl`` and
    ``optimizer_ran``, and the batch fields of
    :func:`~dlperf.results.view.batch_fields` (derived where an older row has NULL there;
    see :data:`CSV_COLUMNS`)."""
    from dlperf.env import optimizer_ran

    cm = (setting(rec, "compile_mode") or "default") if compiles(rec) else None
    return {"repeat": repeat_in(rec), "layout": setting(rec, "layout") or "auto",
            "compile_mode": cm, **_placement(rec),
            "optimizer_impl": setting(rec, "optimizer_impl") or "auto",
            "optimizer_ran": optimizer_ran({"flags": rec.flags or {}})}


def to_csv(rows: list[dict[str, Any]]) -> str:
    """Rows (as from :meth:`ResultStore.rows`) as CSV text with a header line."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({**r, **csv_extras(record_of(r))})
    return buf.getvalue()


def to_json(rows: list[dict[str, Any]], store: ResultStore | None = None,
            include_samples: bool = False) -> str:
    """Rows as a JSON list: the columns (with the batch fields and ``scaling`` of
    :func:`csv_extras`, derived for older rows, and ``cpu_bind``), and the row's record as ``result``
    (:meth:`~dlperf.results.schema.RunRecord.to_dict` without raw samples; None for a row
    without JSON); with ``include_samples`` (and a store), each row gets its raw per-iteration
    times and losses as ``raw_samples`` (``samples`` stays the count of samples measured)."""
    out = []
    for r in rows:
        d = {k: v for k, v in r.items() if k != "result_json"}
        rec = record_of(r)
        d.update(_placement(rec))
        d["result"] = rec.to_dict(raw=False) if r.get("result_json") else None
        if include_samples and store is not None:
            d["raw_samples"] = store.samples(r["id"])
        out.append(d)
    return json.dumps(out, indent=1, default=str)
