"""Predict the points of a sweep file with the step-level model before they are measured, and
judge them once they are (docs/perfmodel.md, "Predictions made before the measurement").

    PYTHONPATH=src python benchmarks/h200/register.py benchmarks/h200/registration3.yaml \
        -o benchmarks/results/h200/registration3.json          # before measuring: commit it
    PYTHONPATH=src python benchmarks/h200/register.py benchmarks/h200/registration3.yaml \
        -o benchmarks/results/h200/registration3.json --judge benchmarks/results/h200/registration3.db

The predictions come from the committed H200 files (`benchmarks/results/h200`, `h200x2`), as
`dlperf predict` makes them; judging never re-predicts: it reads the committed JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ["benchmarks/results/h200", "benchmarks/results/h200x2"]


def points(yaml_path: str) -> list[dict]:
    """The sweep file's points as (model, framework, mode, precision, batch) dicts."""
    from dlperf.config.sweep import load_sweep

    keys = ("model", "framework", "mode", "precision", "batch_size")
    return [{k: p.flat()[k] for k in keys} for p in load_sweep(yaml_path).expand()]


def predict(p: dict) -> dict:
    """One ``dlperf predict --format json`` answer for point ``p`` (a new process, as a user's)."""
    cmd = [sys.executable, "-m", "dlperf", "predict", *sum((["--db", s] for s in SOURCES), []),
           "--model", p["model"], "--framework", p["framework"], "--mode", p["mode"],
           "--precision", p["precision"], "-b", str(p["batch_size"]), "--format", "json"]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    if r.returncode:
        return {**p, "refused": r.stderr.strip().splitlines()[-1:]}
    d = json.loads(r.stdout)
    d = d[0] if isinstance(d, list) else d
    return {**p, "predicted_s": d["predicted_step_time_s"], "interval_s": d.get("interval_s"),
            "how": d.get("how"), "bound": d.get("bound"), "gpu": d.get("gpu"),
            "interval_group": d.get("interval_group"), "host_session": d.get("host_session")}


def judge(preds: list[dict], db: str) -> list[dict]:
    """Each prediction beside the measured median step of its point in ``db``."""
    from dlperf.results.store import ResultStore
    from dlperf.results.view import median_s

    with ResultStore(db, read_only=True) as store:
        recs = [r for r in store.records(latest=True, samples=False) if r.identity.status == "ok"]
    out = []
    for p in preds:
        hit = [r for r in recs if (r.identity.model, r.identity.framework, r.identity.mode,
                                   r.identity.precision, r.identity.batch_size)
               == (p["model"], p["framework"], p["mode"], p["precision"], p["batch_size"])]
        m = median_s(hit[0]) if hit else None
        err = (p["predicted_s"] / m - 1) * 100 if m and "predicted_s" in p else None
        lo, hi = p.get("interval_s") or (None, None)
        out.append({**p, "measured_s": m, "error_pct": err,
                    "inside": (lo <= m <= hi) if m and lo is not None else None})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweep")
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--judge", metavar="DB")
    a = ap.parse_args()
    if not a.judge:
        if Path(a.out).exists():
            sys.exit(f"{a.out} exists: predictions are registered once (judge with --judge DB)")
        preds = [predict(p) for p in points(a.sweep)]
        Path(a.out).write_text(json.dumps({"sweep": a.sweep, "sources": SOURCES,
                                           "predictions": preds}, indent=1) + "\n")
        for p in preds:
            print(p["model"], p["batch_size"], p.get("predicted_s"), p.get("interval_s"),
                  p.get("refused", ""))
        return 0
    reg = json.loads(Path(a.out).read_text())
    rows = judge(reg["predictions"], a.judge)
    print("| model | batch | predicted ms | 90% interval ms | measured ms | error | inside |")
    print("|---|---:|---:|---|---:|---:|---|")
    for r in rows:
        lo, hi = r.get("interval_s") or (None, None)
        iv = f"[{lo * 1e3:.2f}, {hi * 1e3:.2f}]" if lo is not None else "-"
        pr = f"{r['predicted_s'] * 1e3:.2f}" if "predicted_s" in r else "refused"
        ms = f"{r['measured_s'] * 1e3:.2f}" if r["measured_s"] else "-"
        er = f"{r['error_pct']:+.1f}%" if r["error_pct"] is not None else "-"
        print(f"| {r['model']} | {r['batch_size']} | {pr} | {iv} | {ms} | {er} | {r['inside']} |")
    errs = [abs(r["error_pct"]) for r in rows if r["error_pct"] is not None]
    if errs:
        inside = sum(bool(r["inside"]) for r in rows if r["inside"] is not None)
        print(f"\nMdAPE {statistics.median(errs):.1f}% over {len(errs)} points; "
              f"{inside} of {len(errs)} inside their 90% intervals")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
