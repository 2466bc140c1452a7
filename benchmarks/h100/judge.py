"""Judge the H100 cross-GPU check: the predictions committed before the measurement
(benchmarks/results/h100/predictions.json) against the H100 points measured afterwards
(benchmarks/results/h100/suite.db, suite_jax.db), beside the naive baseline "the H100 runs as
the H200 measured"; then the reverse, H100 -> H200: the H100 traces replayed on the H200
profile (measured ceilings of the H200 files), against the H200 files' measurements.

    PYTHONPATH=src python benchmarks/h100/judge.py [--md OUT.md] [--predictions JSON]
        [--registration LABEL]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from dlperf.errors import ConfigError
from dlperf.perfmodel import retarget

ROOT = Path(__file__).resolve().parents[2]
H100 = ROOT / "benchmarks/results/h100"


def _mdape(errs: list[float]) -> str:
    a = [abs(e) for e in errs]
    return f"{statistics.median(a) * 100:.1f}% (n={len(a)})" if a else "-"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--md", default=None)
    ap.add_argument("--predictions", default=str(H100 / "predictions.json"),
                    help="the predictions to judge (default: the registered ones)")
    ap.add_argument("--registration", default=None,
                    help="judge this later registration of the file (its label, e.g. v2)")
    args = ap.parse_args()
    pred = json.loads(Path(args.predictions).read_text())
    if args.registration:
        regs = {r["label"]: r for r in pred.get("registrations", [])}
        if args.registration not in regs:
            raise SystemExit(f"no registration {args.registration!r}; the file holds "
                             f"{', '.join(regs) or 'none'}")
        pred = regs[args.registration]
    measured_files = [str(f) for f in (H100 / "suite.db", H100 / "suite_jax.db",
                                       H100 / "suite_extra.db") if f.exists()]
    h200 = sorted(str(p) for p in (ROOT / "benchmarks/results/h200").glob("*.db"))
    lib_h200 = retarget.TraceLibrary(h200)
    lib_h100 = retarget.TraceLibrary(measured_files + [str(H100 / "calibrate.db")])
    kinds = list(pred["targets"])
    out = ["| model | framework | precision | batch | H100 measured ms | registered ms | error | "
           + " | ".join(kinds[1:]) + " | H200 measured (naive) error |",
           "|---|---|---|---:|---:|---:|---:|" + "---:|" * (len(kinds) - 1) + "---:|"]
    errs: dict[str, list[float]] = {k: [] for k in [*kinds, "naive"]}
    by_group: dict[tuple[str, str, str], list[float]] = {}
    naive_group: dict[tuple[str, str, str], list[float]] = {}
    for r in pred["points"]:
        cfg = (r["model"], r["framework"], r["mode"], r["precision"], r["batch_size"])
        m = retarget.measured_step(lib_h100, *cfg, "NVIDIA H100 80GB HBM3")
        if not m:
            continue
        cells = []
        for k in kinds:
            d = r.get(k) or {}
            if "step_s" in d:
                e = d["step_s"] / m - 1
                errs[k].append(e)
                cells.append(f"{e * 100:+.1f}%")
                if k == kinds[0]:
                    by_group.setdefault(cfg[1:4], []).append(e)
            else:
                cells.append("-")
        naive = retarget.measured_step(lib_h200, *cfg, "NVIDIA H200")
        if naive:
            errs["naive"].append(naive / m - 1)
            naive_group.setdefault(cfg[1:4], []).append(naive / m - 1)
        reg = r.get(kinds[0]) or {}
        out.append(f"| {cfg[0]} | {cfg[1]}/{cfg[2]} | {cfg[3]} | {cfg[4]} | {m * 1e3:.2f} | "
                   + (f"{reg['step_s'] * 1e3:.2f}" if "step_s" in reg else "-") + " | "
                   + " | ".join(cells) + " | "
                   + (f"{(naive / m - 1) * 100:+.1f}%" if naive else "-") + " |")
    out.append("")
    out.append("MdAPE H200 -> H100: " + "; ".join(f"{k} {_mdape(v)}" for k, v in errs.items()))
    for g, v in sorted(by_group.items()):
        out.append(f"- {'/'.join(g)}: registered {_mdape(v)}; naive (the H200's measured step) "
                   f"{_mdape(naive_group.get(g, []))}")
    # the reverse: H100 traces -> H200
    out += ["", "| model | framework | precision | batch | H200 measured ms | from H100 ms | "
            "error | unanchored error |", "|---|---|---|---:|---:|---:|---:|---:|"]
    rev: list[float] = []
    rev_u: list[float] = []
    rev_n: list[float] = []
    for r in pred["points"]:
        cfg = (r["model"], r["framework"], r["mode"], r["precision"], r["batch_size"])
        m200 = retarget.measured_step(lib_h200, *cfg, "NVIDIA H200")
        if not m200:
            continue
        try:
            lib_h100.recs.points.extend(p for p in lib_h200.recs.points if p.matmul_flops_per_s
                                        and p not in lib_h100.recs.points)
            p = retarget.predict(lib_h100, *cfg, gpu="NVIDIA H200", host="none")
            u = retarget.predict(lib_h100, *cfg, gpu="NVIDIA H200", host="none", anchor=False)
        except ConfigError:
            continue
        if not p.sources or "h100" not in p.extra.get("source_gpu", ""):
            continue
        rev.append(p.step_s / m200 - 1)
        rev_u.append(u.step_s / m200 - 1)
        m100 = retarget.measured_step(lib_h100, *cfg, "NVIDIA H100 80GB HBM3")
        if m100:
            rev_n.append(m100 / m200 - 1)
        out.append(f"| {cfg[0]} | {cfg[1]}/{cfg[2]} | {cfg[3]} | {cfg[4]} | {m200 * 1e3:.2f} | "
                   f"{p.step_s * 1e3:.2f} | {rev[-1] * 100:+.1f}% | {rev_u[-1] * 100:+.1f}% |")
    out.append("")
    out.append(f"MdAPE H100 -> H200: anchored {_mdape(rev)}; unanchored {_mdape(rev_u)}; naive "
               f"(the H100's measured step, where measured) {_mdape(rev_n)}")
    text = "\n".join(out)
    print(text)
    if args.md:
        Path(args.md).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
