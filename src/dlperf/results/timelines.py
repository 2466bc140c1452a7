"""The per-kernel timelines of stored results (``--timeline``): kept in the results file's
``timelines`` table (schema version 9), one row per result, not in ``result_json``, so that
reading results never decodes them. The record's ``timeline`` part keeps its description
(format, op and step counts, sizes) without the ``data``.

Reading: :func:`load` gives the encoded timeline of a stored result; :func:`decode` turns it
into one dict per device op (:mod:`dlperf.measure.breakdown.timeline` writes the format and
re-exports :func:`decode`).
"""

from __future__ import annotations

import base64
import json
import sqlite3
import zlib
from collections.abc import Mapping
from typing import Any

from dlperf.errors import ConfigError

#: Format of the encoded timeline; :func:`decode` refuses another.
FORMAT = "dlperf-timeline/1"
#: Per-op columns, in order (see :func:`decode`). ``op_flops``/``op_bytes`` (torch: the launching
#: ATen op's profiler FLOPs and input bytes; XLA: the kernel's HLO instruction's dot/convolution
#: FLOPs and operand + result bytes, :mod:`dlperf.measure.breakdown.hlocost`; repeated on each
#: kernel or host-op slice of the op; None where not derivable) came later: a timeline stored
#: without them decodes them as None.
COLUMNS = ("step", "kind", "stream", "device", "start_ns", "dur_ns", "name", "op_class", "op",
           "phase", "context", "grid", "block", "registers", "shared_memory", "bytes",
           "launch_start_ns", "launch_dur_ns", "op_flops", "op_bytes")
#: Columns stored as indices into the string table.
STRING_COLS = ("kind", "name", "op_class", "op", "phase", "context", "grid", "block")
#: Columns stored as numbers (or None where absent): :func:`decode` refuses any other value.
NUMBER_COLS = tuple(c for c in COLUMNS if c not in STRING_COLS)


def without_data(result: dict[str, Any]) -> dict[str, Any]:
    """``result`` (a flat record dict) with its timeline's ``data`` left out (a copy of the
    timeline part; the rest shared)."""
    tl = result.get("timeline")
    if isinstance(tl, Mapping) and "data" in tl:
        result = {**result, "timeline": {k: v for k, v in tl.items() if k != "data"}}
    return result


def save(db: sqlite3.Connection, result_id: int, timeline: Any) -> None:
    """Store the encoded ``timeline`` (the record's part, or its dict) of result ``result_id``
    (inside the caller's transaction); nothing when it has no data."""
    d = timeline.model_dump(exclude_unset=True) if hasattr(timeline, "model_dump") else timeline
    if isinstance(d, Mapping) and d.get("data"):
        db.execute("INSERT OR REPLACE INTO timelines VALUES (?, ?, ?)",
                   (result_id, d.get("format"), d["data"]))


def load(store: Any, result_id: int) -> dict[str, Any] | None:
    """The encoded timeline of the stored result ``result_id`` of ``store`` (a
    :class:`~dlperf.results.store.ResultStore`): its record's ``timeline`` part with the
    ``data`` put back; None if it has none.

    Raises:
        ConfigError: no result has that id, or its record does not read as a JSON object.
    """
    db = store._db
    row = db.execute("SELECT result_json FROM results WHERE id=?", (result_id,)).fetchone()
    if row is None:
        raise ConfigError(f"{store.path} has no result with id {result_id}; "
                          f"`dlperf results --db {store.path} --format json` lists the ids")
    got = db.execute("SELECT format, data FROM timelines WHERE result_id=?",
                     (result_id,)).fetchone()
    if got is None:
        return None
    try:
        doc = json.loads(row[0] or "{}")
    except (ValueError, RecursionError):
        doc = None
    if not isinstance(doc, Mapping):
        raise ConfigError(f"result {result_id} of {store.path} is damaged: its record does not "
                          f"read as a JSON object; `dlperf results --db {store.path}` names the "
                          f"damaged rows, re-run the point to replace it")
    part = doc.get("timeline") or {}
    return {**part, "format": got[0], "data": got[1]}


def decode(timeline: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ops of an encoded timeline (:func:`dlperf.measure.breakdown.timeline.encode`), one
    dict per op with the keys of :data:`COLUMNS` (strings restored; absent values None), in
    start order.

    Raises:
        ValueError: not a timeline of :data:`FORMAT`, or its data does not decode.
    """
    if not isinstance(timeline, Mapping) or timeline.get("format") != FORMAT:
        got = timeline.get("format") if isinstance(timeline, Mapping) else type(timeline).__name__
        raise ValueError(f"not a dlperf timeline of format {FORMAT!r} (got {got!r})")
    try:
        doc = json.loads(zlib.decompress(base64.b64decode(timeline["data"])))
        strings, cols = doc["strings"], doc["cols"]
        n = len(cols["step"])
        for c in NUMBER_COLS:  # a damaged number fails here, not as a TypeError in a reader
            bad = next((v for v in cols.get(c, ()) if v is not None
                        and (isinstance(v, bool) or not isinstance(v, (int, float)))), None)
            if bad is not None:
                raise ValueError(f"column {c!r} holds {bad!r}, not a number")
        out = []
        for i in range(n):
            row = {}
            for c in COLUMNS:
                v = cols[c][i] if c in cols else None
                row[c] = strings[v] if c in STRING_COLS and v is not None else v
            out.append(row)
        return out
    except (KeyError, IndexError, TypeError, ValueError, zlib.error) as e:
        raise ValueError(f"the stored timeline does not decode ({type(e).__name__}: {e}); "
                         f"re-run the point with --timeline") from e
