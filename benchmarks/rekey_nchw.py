"""One-off: label PyTorch CNN results stored before ``layout`` existed as ``layout: nchw``.

Until commit "layout" (2026-11-30) dlperf ran every PyTorch model in NCHW. ``layout: auto``
now means channels_last for CNNs on CUDA, so those stored points are not what ``auto`` measures
any more. This rewrites their config (``layout: nchw``), flags (``layout: NCHW``) and run_key, so
that they stay in the store as NCHW measurements and a resumed sweep measures ``auto`` anew.

    PYTHONPATH=src python benchmarks/rekey_nchw.py benchmarks/results/h200/dlbench.db ...

Second change (``--auto-policy``): ``layout: auto`` became channels_last only in bf16/tf32 (NCHW
in fp32, where channels_last measured slower). Points stored as ``auto`` whose applied layout
(``flags.layout``) is not what ``auto`` now picks get the layout they ran in (``nhwc``/``nchw``),
so they stay as measured and a resumed sweep measures the new ``auto``.
"""

from __future__ import annotations

import json
import sqlite3
import sys

from dlperf.config import RunConfig
from dlperf.config.axes import flat_settings
from dlperf.zoo import get_spec


def reseal(db: sqlite3.Connection, rid: int) -> None:
    """The row's checksums after this deliberate rewrite (dlperf.results.rowcheck), where the
    file has them; otherwise the next writer seals the row."""
    from dlperf.results.rowcheck import seal
    from dlperf.results.rows import COLUMNS

    if db.execute("SELECT 1 FROM sqlite_master WHERE name='row_sums'").fetchone():
        seal(db, rid, COLUMNS)

def _relabel(path: str, change) -> int:
    """Apply ``change(result) -> bool`` (it edits a torch result's config/flags in place and
    says whether it did) to every torch row of the store at ``path``; a changed row gets its
    new run key. Returns how many changed."""
    db = sqlite3.connect(path)
    n = 0
    with db:
        for rid, blob in db.execute("SELECT id, result_json FROM results WHERE framework='torch'"
                                    ).fetchall():
            r = json.loads(blob)
            if not change(r):
                continue
            r["run_key"] = RunConfig(**r["config"]).run_key()
            db.execute("UPDATE results SET run_key=?, result_json=? WHERE id=?",
                       (r["run_key"], json.dumps(r), rid))
            reseal(db, rid)
            n += 1
    db.close()
    return n


def _to_nchw(r: dict) -> bool:
    cfg, flags = flat_settings(r.get("config")), r.get("flags") or {}
    if "layout" in flags or cfg.get("layout", "auto") != "auto":
        return False  # made after layout existed
    if get_spec(cfg["model"]).input_kind != "image":
        return False
    cfg["layout"] = "nchw"
    flags["layout"] = "NCHW"
    r["config"], r["flags"] = cfg, flags
    return True


def _to_layout_ran(r: dict) -> bool:
    from dlperf.frameworks.torch.adapter import TorchAdapter

    cfg, flags = flat_settings(r.get("config")), r.get("flags") or {}
    if cfg.get("layout", "auto") != "auto" or flags.get("layout") not in ("NCHW", "NHWC"):
        return False
    ran_nhwc = flags["layout"] == "NHWC"
    if TorchAdapter.channels_last(RunConfig(**cfg), get_spec(cfg["model"])) == ran_nhwc:
        return False
    cfg["layout"] = "nhwc" if ran_nhwc else "nchw"
    r["config"] = cfg
    return True


def rekey(path: str) -> int:
    """Label the torch CNN rows stored before ``layout`` existed ``nchw``; returns how many."""
    return _relabel(path, _to_nchw)


def rekey_auto(path: str) -> int:
    """Label ``auto`` points by the layout they ran in where ``auto`` now picks another."""
    return _relabel(path, _to_layout_ran)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--auto-policy"]:
        for p in sys.argv[2:]:
            print(p, rekey_auto(p), "auto rows labelled with the layout they ran in")
    else:
        for p in sys.argv[1:]:
            print(p, rekey(p), "rows labelled layout=nchw")
