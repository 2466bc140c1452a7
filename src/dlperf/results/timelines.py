"""The per-kernel timelines of stored results (``--timeline``): kept in the results file's
``timelines`` table (schema version 9), one row per result, not in ``result_json``, so that
reading results never decodes them. The record's ``timeline`` part keeps its description
(format, op and step counts, sizes) without the ``data``.

Reading: :func:`load` gives the encoded timeline of a stored result;
:func:`dlperf.measure.breakdown.timeline.decode` turns it into one dict per device op.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from typing import Any

from dlperf.errors import ConfigError


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
        ConfigError: no result has that id.
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
    part = (json.loads(row[0] or "{}").get("timeline") or {})
    return {**part, "format": got[0], "data": got[1]}
