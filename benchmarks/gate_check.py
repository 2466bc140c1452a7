"""How often the regression gate errs, measured through its CI command (issue 39's "done when").

``dlperf compare --run DIR DIR --fail-if-slower T -- FLAGS`` is run ``--pairs`` times with two
identical sides (a verdict of regression there is a false alarm) and ``--pairs`` times with NEW
made ``--slowdown`` slower (the fake's option ``slowdown`` in NEW's ``DLPERF_FAKE_OPTIONS``:
both sides run the same flags; a regression the gate must catch), on the fake framework with
run-to-run noise (its option ``run_noise``, in each side's ``DLPERF_FAKE_OPTIONS``: one factor
per run, the variation between processes; ``--new-run-noise`` gives NEW's runs a spread of
their own, as on a host loaded while NEW ran) and step noise (``noise``). Then a pair of
result files where NEW lacks a point of BASE is compared (the gate must fail with 3).

    PYTHONPATH=src DLPERF_FAKE_FRAMEWORK=1 python benchmarks/gate_check.py \
        [--pairs 20] [--rounds 5] [--threshold 3%] [--slowdown 0.05] [--run-noise 0.01] \
        [--new-run-noise X] [--step-noise 0.05] [-o benchmarks/results/cpu-dev/gate_check.json]

Writes the JSON (every gate's exit status, ratio and interval) and prints the counts: exit 1
(a regression: a false alarm for identical sides, caught for NEW slower), exit 5 (inconclusive:
slower than the threshold by the estimate, the interval including 1) and exit 0.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

FLAGS = ["-m", "fcn5_tiny", "--framework", "fake", "-b", "8", "--no-ceilings",
         "--max-warmup-time", "2", "--framework-option", "step_s=0.001"]


def noise_flags(a: argparse.Namespace) -> list[str]:
    """The fake's run-to-run and step noise of every run, as its options."""
    return ["--framework-option", f"run_noise={a.run_noise}",
            "--framework-option", f"noise={a.step_noise}"]


def side_options(run_noise: float, slowdown: float = 1.0) -> str:
    """One side's ``DLPERF_FAKE_OPTIONS``: its run-to-run noise and slowdown."""
    return "{" + f"run_noise: {run_noise}" + (f", slowdown: {slowdown}" if slowdown != 1 else "") + "}"


def dlperf(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dlperf", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, check=False, timeout=1800)


def gate(work: Path, name: str, slowdown: float, env: dict[str, str],
         a: argparse.Namespace) -> dict[str, Any]:
    """One gate run, NEW ``slowdown`` times as slow; its exit status and the point's
    comparison from the JSON output."""
    out = work / f"{name}.json"
    new_noise = a.run_noise if a.new_run_noise is None else a.new_run_noise
    extra = ["--base-env", f"DLPERF_FAKE_OPTIONS={side_options(a.run_noise)}",
             "--new-env", f"DLPERF_FAKE_OPTIONS={side_options(new_noise, slowdown)}"]
    t0 = time.monotonic()
    r = dlperf(["compare", "--run", str(work), str(work), "--rounds", str(a.rounds),
                "--db", str(work / f"{name}.db"), "--fail-if-slower", a.threshold,
                "-o", str(out), *extra, "--", *FLAGS, "--framework-option",
                f"noise={a.step_noise}"], env, work)
    row: dict[str, Any] = {"name": name, "returncode": r.returncode,
                           "seconds": round(time.monotonic() - t0, 1)}
    if out.is_file():
        (p,) = json.loads(out.read_text())["points"]
        row.update(ratio=p["ratio"], ci=p["ci"], judged=p["judged"], verdict=p["verdict"],
                   regression=p["regression"], inconclusive=p.get("inconclusive"))
    else:
        row["stderr"] = r.stderr[-2000:]
    return row


def vanished(work: Path, env: dict[str, str], a: argparse.Namespace) -> dict[str, Any]:
    """BASE measures batches 8 and 16, NEW only 8 (twice each): the gate's exit status."""
    for name, b in (("vb", "8,16"), ("vn", "8")):
        r = dlperf(["run", "-m", "fcn5_tiny", "--framework", "fake", "-b", b, "--repeats", "2",
                    "--no-ceilings", "--max-warmup-time", "2", "--db", str(work / f"{name}.db"),
                    *noise_flags(a)], env, work)
        if r.returncode:
            return {"returncode": None, "stderr": r.stderr[-2000:]}
    r = dlperf(["compare", str(work / "vb.db"), str(work / "vn.db"), "--fail-if-slower", "5%"],
               env, work)
    return {"returncode": r.returncode, "message": r.stderr.strip().splitlines()[-1:]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threshold", default="3%")
    ap.add_argument("--slowdown", type=float, default=0.05)
    ap.add_argument("--run-noise", type=float, default=0.01)
    ap.add_argument("--new-run-noise", type=float, default=None,
                    help="NEW's run-to-run noise (default: --run-noise)")
    ap.add_argument("--step-noise", type=float, default=0.05)
    ap.add_argument("-o", "--output", type=Path)
    a = ap.parse_args()
    env = {**os.environ, "DLPERF_FAKE_FRAMEWORK": "1"}
    rows: dict[str, list[dict[str, Any]]] = {"same": [], "slow": []}
    with tempfile.TemporaryDirectory(prefix="gate-check-") as tmp:
        work = Path(tmp)
        for i in range(a.pairs):
            rows["same"].append(gate(work, f"same{i}", 1.0, env, a))
            rows["slow"].append(gate(work, f"slow{i}", 1 + a.slowdown, env, a))
            print(f"pair {i + 1}/{a.pairs}: same exit {rows['same'][-1]['returncode']}, slow "
                  f"exit {rows['slow'][-1]['returncode']}", flush=True)
        gone = vanished(work, env, a)
    summary = {
        "false_alarms": sum(r["returncode"] == 1 for r in rows["same"]),
        "same_not_zero": sum(r["returncode"] != 0 for r in rows["same"]),
        "same_inconclusive": sum(r["returncode"] == 5 for r in rows["same"]),
        "caught": sum(r["returncode"] == 1 for r in rows["slow"]),
        "slow_inconclusive": sum(r["returncode"] == 5 for r in rows["slow"]),
        "slow_passed": sum(r["returncode"] == 0 for r in rows["slow"]),
        "pairs": a.pairs, "vanished_exit": gone.get("returncode"),
        "settings": {k: v for k, v in vars(a).items() if k != "output"},
    }
    print(json.dumps(summary, indent=1))
    if a.output:
        a.output.write_text(json.dumps({"summary": summary, "vanished": gone, **rows},
                                       indent=1) + "\n")


if __name__ == "__main__":
    main()
