"""Predict the H100 cross-GPU check's points from the H200 files, before they are measured.

For each point of benchmarks/h100/suite.yaml and suite_jax.yaml: the timeline replay
(:mod:`dlperf.perfmodel.retarget`) of the H200 traces, moved to the H100 profile, with the
H100's device profile measured by ``dlperf calibrate`` (benchmarks/results/h100/
calibrate.db, the target's profile, not its answers) and from the datasheet alone. The
registered prediction (``profile``) is anchored (the H200's measured step of the point, where
stored, times the replay's H100 / H200 ratio; ``profile_unanchored`` beside it) and leaves the
host unscaled: on the H200 files the Python
host-speed probe explains little of the dispatch time (log correlation 0.19 within a
configuration), and the calibrate dispatch probe ran PyTorch's fused SGD (dlperf's ``auto``
since the H200 files were measured) where the H200's profile model ran foreach, so the two are
not the same work. The variants ``profile_probe`` (host x the Python probes' ratio) and
``profile_dispatch`` (host x the dispatch probes' ratio) are registered beside it. A model with no H200 trace (vgg16, googlenet) falls back to the H200 step (measured
where stored, else the step-level model, :func:`dlperf.perfmodel.api.predict`) times the median
H100/H200 ratio the replay gives the traced models of the same framework, mode and precision.

    PYTHONPATH=src python benchmarks/h100/predict.py [--out benchmarks/results/h100]

A later model registers its predictions of the points not measured yet (suite_jax.yaml's
rest, suite_extra.yaml) beside the first ones, with the commit and model version that made
them, before they are measured:

    PYTHONPATH=src python benchmarks/h100/predict.py --register v2

appends a registration to ``predictions.json`` (``registrations``) and a section to
``predictions.md``; the commit must be clean (committed code made the numbers).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from dlperf.config.sweep import SweepConfig
from dlperf.errors import ConfigError
from dlperf.perfmodel import retarget
from dlperf.yamlsafe import load_yaml_file

ROOT = Path(__file__).resolve().parents[2]


def points(yamls: tuple[str, ...] = ("suite.yaml", "suite_jax.yaml")
           ) -> list[tuple[str, str, str, str, int]]:
    out = []
    for y in yamls:
        sc = SweepConfig(**load_yaml_file(ROOT / "benchmarks/h100" / y))
        for p in sc.expand():
            f = p.flat()
            out.append((f["model"], f["framework"], f["mode"], f["precision"], f["batch_size"]))
    return list(dict.fromkeys(out))


def h200_step(files: list[str], lib: retarget.TraceLibrary, cfg: tuple) -> tuple[float, str]:
    model, fw, mode, prec, b = cfg
    m = retarget.measured_step(lib, model, fw, mode, prec, b, "NVIDIA H200")
    if m:
        return m, "H200 measured"
    from dlperf.perfmodel.api import predict

    p = predict(files, model, fw, mode, prec, "cuda", batch_size=b)
    return p.predicted_step_time_s, "H200 step-level model"


def _ms(d: dict) -> str:
    return f"{d['step_s'] * 1e3:.2f}" if "step_s" in d else "-"


TARGETS = {"profile": ("h100", "none", True), "datasheet": ("datasheet:h100", "none", True),
           "profile_probe": ("h100", "probe", True),
           "profile_dispatch": ("h100", "dispatch", True),
           "profile_unanchored": ("h100", "none", False)}


def predict_rows(lib: retarget.TraceLibrary, h200: list[str],
                 cfgs: list[tuple[str, str, str, str, int]], targets: dict) -> list[dict]:
    """Each point of ``cfgs`` predicted on every target (a model without an H200 trace: the
    H200 step times the median ratio of the group's traced points)."""
    rows = []
    ratios: dict[tuple[str, str, str, str], list[float]] = {}
    pending = []
    for cfg in cfgs:
        model, fw, mode, prec, b = cfg
        row = {"model": model, "framework": fw, "mode": mode, "precision": prec,
               "batch_size": b}
        for kind, (gpu, host, anchor) in targets.items():
            t = time.perf_counter()
            try:
                p = retarget.predict(lib, model, fw, mode, prec, b, gpu=gpu, host=host,
                                     anchor=anchor)
            except ConfigError as e:
                row[kind] = {"error": str(e)}
                continue
            src = retarget.predict(lib, model, fw, mode, prec, b)
            row[kind] = {**p.to_dict(), "seconds": round(time.perf_counter() - t, 3),
                         "h200_replay_s": src.step_s}
            base = src.measured_s if anchor and src.measured_s else src.step_s
            ratios.setdefault((kind, fw, mode, prec), []).append(p.step_s / base)
        rows.append(row)
        if any("error" in row.get(k, {}) for k in targets):
            pending.append(row)
    for row in pending:
        cfg = (row["model"], row["framework"], row["mode"], row["precision"], row["batch_size"])
        base, how = h200_step(h200, lib, cfg)
        for kind in targets:
            if "error" not in row.get(kind, {}):
                continue
            r = ratios.get((kind, *cfg[1:4]))
            if not r:
                continue
            f = statistics.median(r)
            half = retarget.INTERVAL_P90["gpu"] * (retarget.DATASHEET_WIDEN
                                                    if kind == "datasheet" else 1.0)
            row[kind] = {"step_s": base * f, "interval_s": [base * f * (1 - half),
                                                          base * f * (1 + half)],
                         "category": "gpu, no trace (step x other models' ratio)",
                         "how": f"{how} {base * 1e3:.2f} ms x median H100/H200 replay ratio "
                                f"{f:.3f} of {len(r)} traced points of the group",
                         "datasheet_only": kind == "datasheet",
                         "model_version": retarget.MODEL_VERSION}
    return rows


def table(rows: list[dict]) -> list[str]:
    lines = ["| model | framework | precision | batch | H100 predicted (profile) ms | "
             "90% band | datasheet only | host x probe | host x dispatch | unanchored | how |",
             "|---|---|---|---:|---:|---|---:|---:|---:|---:|---|"]
    for r in rows:
        pr, ds = r.get("profile") or {}, r.get("datasheet") or {}
        band = pr.get("interval_s") or ds.get("interval_s") or [float("nan")] * 2
        lines.append(f"| {r['model']} | {r['framework']}/{r['mode']} | {r['precision']} | "
                     f"{r['batch_size']} | {_ms(pr)} | [{band[0] * 1e3:.1f}, {band[1] * 1e3:.1f}] "
                     f"| {_ms(ds)} | {_ms(r.get('profile_probe') or {})} | "
                     f"{_ms(r.get('profile_dispatch') or {})} | "
                     f"{_ms(r.get('profile_unanchored') or {})} | {(pr or ds).get('category', '')} |")
    return lines


def measured_on_h100() -> set[tuple[str, str, str, str, int]]:
    """The configurations the H100 files already hold a measurement of."""
    files = [str(f) for f in sorted((ROOT / "benchmarks/results/h100").glob("suite*.db"))]
    if not files:
        return set()
    from dlperf.perfmodel import records

    return {(p.model, p.framework, p.mode, p.precision, p.batch_size)
            for p in records.load(files).points if p.world_size == 1}


def _commit() -> str:
    import subprocess

    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "src"],
                           cwd=ROOT, capture_output=True, text=True).stdout.strip()
    if dirty:
        raise SystemExit("src/ has uncommitted changes: commit the model first, so the "
                         "registration names the code that made it")
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout.strip()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/h100"))
    ap.add_argument("--register", metavar="LABEL", default=None,
                    help="append a registration of the points not measured yet")
    args = ap.parse_args()
    h200 = sorted(str(p) for p in (ROOT / "benchmarks/results/h200").glob("*.db"))
    cal = ROOT / "benchmarks/results/h100/calibrate.db"
    files = h200 + ([str(cal)] if cal.exists() else [])
    lib = retarget.TraceLibrary(files)
    targets = dict(TARGETS)
    if not cal.exists():
        targets = {k: v for k, v in targets.items() if not k.startswith("profile")}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.register:
        commit = _commit()
        done = measured_on_h100()
        cfgs = [c for c in points(("suite.yaml", "suite_jax.yaml", "suite_extra.yaml"))
                if c not in done]
        rows = predict_rows(lib, h200, cfgs, targets)
        pj = json.loads((out / "predictions.json").read_text())
        regs = pj.setdefault("registrations", [])
        if any(r["label"] == args.register for r in regs):
            raise SystemExit(f"registration {args.register!r} exists; give another label")
        regs.append({"label": args.register, "made_before_measuring": True, "commit": commit,
                     "model_version": retarget.MODEL_VERSION,
                     "files": [str(Path(f).relative_to(ROOT)) for f in files],
                     "targets": {k: {"gpu": v[0], "host": v[1], "anchor": v[2]}
                                 for k, v in targets.items()},
                     "registered": "profile", "points": rows})
        (out / "predictions.json").write_text(json.dumps(pj, indent=1) + "\n")
        lines = ["", f"## Registration {args.register}: model version "
                 f"{retarget.MODEL_VERSION}, commit {commit[:12]}, before measuring", "",
                 f"The {len(rows)} points of suite.yaml, suite_jax.yaml and suite_extra.yaml "
                 "not measured on the H100 when registered.", "", *table(rows)]
        with (out / "predictions.md").open("a") as fh:
            fh.write("\n".join(lines) + "\n")
        print("\n".join(lines))
        return 0
    rows = predict_rows(lib, h200, points(), targets)
    (out / "predictions.json").write_text(json.dumps(
        {"made_before_measuring": True, "files": [str(Path(f).relative_to(ROOT)) for f in files],
         "targets": {k: {"gpu": v[0], "host": v[1], "anchor": v[2]}
                     for k, v in targets.items()},
         "registered": "profile", "points": rows}, indent=1) + "\n")
    lines = table(rows)
    (out / "predictions.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
