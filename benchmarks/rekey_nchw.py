"""One-off: label PyTorch CNN results stored before ``layout`` existed as ``layout: nchw``.

Until commit "layout" (2026-11-30) dlperf ran every PyTorch model in NCHW. ``layout: auto``
now means channels_last for CNNs on CUDA, so those stored points are not what ``auto`` measures
any more. This rewrites their config (``layout: nchw``), flags (``layout: NCHW``) and run_key, so
that they stay in the store as NCHW measurements and a resumed sweep measures ``auto`` anew.

    PYTHONPATH=src python benchmarks/rekey_nchw.py benchmarks/results/h200/dlbench.db ...
"""

from __future__ import annotations

import json
import sqlite3
import sys

from dlperf.config import RunConfig
from dlperf.zoo import get_spec


def rekey(path: str) -> int:
    """Rewrite the qualifying rows of the store at ``path``; returns how many changed."""
    db = sqlite3.connect(path)
    n = 0
    with db:
        for rid, blob in db.execute("SELECT id, result_json FROM results WHERE framework='torch'"
                                    ).fetchall():
            r = json.loads(blob)
            cfg = r.get("config") or {}
            flags = r.get("flags") or {}
            if "layout" in flags or cfg.get("layout", "auto") != "auto":
                continue  # made after layout existed
            if get_spec(cfg["model"]).input_kind != "image":
                continue
            cfg["layout"] = "nchw"
            flags["layout"] = "NCHW"
            r["config"], r["flags"] = cfg, flags
            key = RunConfig(**cfg).run_key()
            r["run_key"] = key
            db.execute("UPDATE results SET run_key=?, result_json=? WHERE id=?",
                       (key, json.dumps(r), rid))
            n += 1
    db.close()
    return n


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(p, rekey(p), "rows labelled layout=nchw")
