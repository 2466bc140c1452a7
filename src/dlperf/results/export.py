"""Exports of stored results: CSV (flat columns) and JSON (with the full result and samples)."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from dlperf.results.store import COLUMNS, ResultStore, repeat_of, result_of

#: CSV columns: every flat column except the embedded JSON, then from the result JSON:
#: ``repeat`` (which repeated run of its point a row is, 0 for the first and for older
#: results), ``layout`` (the ``--layout`` setting; ``auto`` for results from before it) and
#: ``compile_mode`` (torch.compile's mode in torch graph runs, else empty): settings that tell
#: apart rows of one model, framework, mode and batch.
CSV_COLUMNS = ["id", *[c for c in COLUMNS if c != "result_json"], "repeat", "layout",
               "compile_mode"]


def to_csv(rows: list[dict[str, Any]]) -> str:
    """Rows (as from :meth:`ResultStore.rows`) as CSV text with a header line."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        cfg = result_of(r).get("config") or {}
        cm = ((cfg.get("compile_mode") or "default")
              if (r.get("framework"), r.get("mode")) == ("torch", "graph") else None)
        w.writerow({**r, "repeat": repeat_of(r), "layout": cfg.get("layout") or "auto",
                    "compile_mode": cm})
    return buf.getvalue()


def to_json(rows: list[dict[str, Any]], store: ResultStore | None = None,
            include_samples: bool = False) -> str:
    """Rows as a JSON list; ``result_json`` is parsed into ``result``; with ``include_samples``
    (and a store), each row gets its raw per-iteration times and losses as ``raw_samples``
    (``samples`` stays the count of samples measured)."""
    out = []
    for r in rows:
        d = {k: v for k, v in r.items() if k != "result_json"}
        d["result"] = json.loads(r["result_json"]) if r.get("result_json") else None
        if include_samples and store is not None:
            d["raw_samples"] = store.samples(r["id"])
        out.append(d)
    return json.dumps(out, indent=1, default=str)
