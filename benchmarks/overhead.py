"""Harness overhead and timing truth: dlperf against a plain hand-written loop.

For each (model, batch size) it alternates ``dlperf run`` and the plain loop of the framework
(``plain_torch_loop.py``, ``plain_jax_loop.py`` or ``plain_tf_loop.py``; each imports nothing
from dlperf), ``--rounds`` times each, in the same call and on the same device, and reports the
ratio of median throughputs (dlperf / plain; the issue asks for >= 0.98 on the GPU, >= 0.95
per framework), the round-by-round (paired) ratios and their median. ``--alternate`` runs the
plain loop first in every second round, so that a host that drifts (a shared CPU) biases
neither side.

``--mode`` is passed to ``dlperf run`` and, for TensorFlow, to the plain loop (graph =
``tf.function``, xla = ``jit_compile``, eager); without it dlperf's default mode of the
framework runs (torch eager, jax xla) and TensorFlow runs ``graph``, the mode of its plain
loop's default and of the CPU results. ``--threads N`` (TensorFlow only: the torch and JAX
plain loops do not set thread pools) is passed to both sides: dlperf's ``--threads`` and the
plain loop's intra-op N / inter-op 1, which is what dlperf's ``--threads`` sets.

With ``--truth``, for the listed models it also puts side by side (docs/measurement.md rule 2):
  * dlperf's event-timed mean time per iteration,
  * dlperf's wall time of the measured segment / iterations,
  * the plain loop with ``torch.cuda.synchronize()`` after every step (mean per step).

Usage (on the GPU machine; see benchmarks/results/h200/COMMANDS.md):
    python benchmarks/overhead.py --device cuda --precision fp32 \
        --points fcn5:64,fcn8:64,alexnet:128,resnet50:64,lstm:64 --rounds 2 \
        --truth fcn5:64,resnet50:64,lstm:64 --db OUT/overhead.db --out OUT/overhead.json

TensorFlow on a CPU (see benchmarks/results/cpu-dev/COMMANDS.md):
    python benchmarks/overhead.py --framework tensorflow --device cpu --mode graph \
        --threads 2 --points resnet50:4,lstm:16 --rounds 3 --min-time 10 --min-iters 5 \
        --plain-warmup 3 --dlperf-args "--warmup-window 2 --max-warmup-iters 6" \
        --db OUT/overhead_tf.db --out OUT/overhead_tf.json
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: framework -> (plain loop script, its name for the GPU device)
PLAIN = {"torch": (HERE / "plain_torch_loop.py", "cuda"),
         "jax": (HERE / "plain_jax_loop.py", "gpu"),
         "tensorflow": (HERE / "plain_tf_loop.py", "gpu")}
#: The mode compared when --mode is not given (None: dlperf's default for the framework).
DEFAULT_MODE = {"torch": None, "jax": None, "tensorflow": "graph"}
#: The modes each plain loop runs (the torch loop is eager, the JAX loop jax.jit).
PLAIN_MODES = {"torch": ("eager",), "jax": ("xla",), "tensorflow": ("graph", "xla", "eager")}


def parse_points(s: str) -> list[tuple[str, int]]:
    """``"fcn5:64,lstm:32"`` -> ``[("fcn5", 64), ("lstm", 32)]``."""
    out = []
    for item in filter(None, s.split(",")):
        m, _, b = item.partition(":")
        out.append((m, int(b)))
    return out


def run_dlperf(model: str, batch: int, a: argparse.Namespace) -> dict:
    """One ``dlperf run`` in a fresh process; returns the newest stored row of that point."""
    cmd = [sys.executable, "-m", "dlperf", "run", "--model", model, "--batch-size", str(batch),
           "--framework", a.framework, "--layout", a.layout,
           "--device", a.device, "--precision", a.precision, "--db", a.db, "--rerun",
           "--min-time", str(a.min_time), "--min-iters", str(a.min_iters),
           "--no-ceilings"]  # the ceilings run after the measured segment: time saved only
    if a.mode:
        cmd += ["--mode", a.mode]
    if a.threads:
        cmd += ["--threads", str(a.threads)]
    cmd += shlex.split(a.dlperf_args)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    from dlperf.results.store import ResultStore

    with ResultStore(a.db) as s:
        rows = s.rows(latest=False, model=model, batch_size=batch, precision=a.precision,
                      framework=a.framework, mode=a.mode, threads=a.threads)
    r = rows[-1]
    if r["status"] != "ok":
        raise RuntimeError(f"dlperf {model} b={batch}: {r['status']}: {r['error']}")
    return r


def applied_nhwc(row: dict) -> bool:
    """True if dlperf's stored run applied channels_last (``flags.layout == "NHWC"``)."""
    return (json.loads(row["result_json"]).get("flags") or {}).get("layout") == "NHWC"


def run_plain(model: str, batch: int, iters: int, a: argparse.Namespace, sync: bool = False,
              nhwc: bool = False) -> dict:
    """One plain-loop run in a fresh process; returns its JSON. ``nhwc``: channels_last, as
    dlperf's run applied it (its stored ``flags.layout``)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        script, gpu_name = PLAIN[a.framework]
        device = gpu_name if a.device == "cuda" else a.device
        cmd = [sys.executable, str(script), "--model", model, "--batch-size", str(batch),
               "--precision", a.precision, "--device", device, "--warmup", str(a.plain_warmup),
               "--iters", str(iters), "--json", f.name]
        if a.framework == "tensorflow":
            cmd += ["--mode", a.mode]
            if a.threads:
                cmd += ["--threads", str(a.threads)]
        if sync:
            cmd.append("--sync-every-step")
        cmd += shlex.split(a.plain_args)
        if a.framework == "torch" and nhwc:
            cmd.append("--channels-last")  # what dlperf's layout did (CNNs only)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        return json.loads(Path(f.name).read_text())


def main() -> int:
    """Run the comparison; print a table and write JSON."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--framework", default="torch", choices=sorted(PLAIN))
    p.add_argument("--precision", default="fp32")
    p.add_argument("--points", required=True, help="model:batch,... for the overhead ratio")
    p.add_argument("--truth", default="", help="model:batch,... for the timing-truth table")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--layout", default="auto", choices=("auto", "nchw", "nhwc"),
                   help="dlperf's --layout; the torch plain loop follows it (--channels-last)")
    p.add_argument("--min-time", type=float, default=3.0, help="seconds measured per run")
    p.add_argument("--min-iters", type=int, default=50,
                   help="measured iterations per run at least (dlperf's --min-iters; the plain "
                        "loop runs max(this, min-time / dlperf's mean step) iterations)")
    p.add_argument("--plain-warmup", type=int, default=30, help="the plain loop's --warmup")
    p.add_argument("--mode", default=None,
                   help="execution mode for dlperf (and the TensorFlow plain loop); default: "
                        "dlperf's for torch/jax, graph for tensorflow")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads on both sides (TensorFlow: dlperf --threads and the plain "
                        "loop's intra-op N / inter-op 1)")
    p.add_argument("--alternate", action="store_true",
                   help="run the plain loop first in every second round (default: dlperf "
                        "first in every round)")
    p.add_argument("--dlperf-args", default="",
                   help="extra arguments for dlperf run, e.g. '--warmup-window 2 "
                        "--max-warmup-iters 6' for slow CPU steps")
    p.add_argument("--plain-args", default="",
                   help="extra arguments for the plain loop, e.g. '--optimizer-impl foreach' "
                        "(torch GPT-2: dlperf's AdamW implementation instead of the fused one)")
    p.add_argument("--db", required=True)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    if a.mode is None:
        a.mode = DEFAULT_MODE[a.framework]
    elif a.mode not in PLAIN_MODES[a.framework]:
        p.error(f"--mode {a.mode}: the {a.framework} plain loop runs "
                f"{', '.join(PLAIN_MODES[a.framework])} only")
    if a.threads and a.framework != "tensorflow":
        p.error("--threads: only the TensorFlow plain loop sets its thread pools")

    report: dict = {"framework": a.framework, "precision": a.precision, "device": a.device,
                    "mode": a.mode, "threads": a.threads, "min_time_s": a.min_time,
                    "min_iters": a.min_iters, "plain_warmup": a.plain_warmup,
                    "dlperf_args": a.dlperf_args, "alternate": a.alternate,
                    "overhead": [], "truth": []}
    print(f"{'model':<14}{'batch':>6}{'dlperf samples/s':>18}{'plain samples/s':>17}{'ratio':>8}"
          f"{'paired':>8}")
    for model, batch in parse_points(a.points):
        d_runs, p_runs, plain, loads, order = [], [], {}, [], []
        r: dict = {}
        for i in range(a.rounds):
            load0 = os.getloadavg()
            # --alternate: odd rounds run the plain loop first, for as many iterations as the
            # previous round's dlperf run suggested (drift over time then cancels in pairs).
            plain_first = a.alternate and i % 2 == 1
            if plain_first:
                iters = max(a.min_iters, int(a.min_time / r["step_time_mean_s"]))
                plain = run_plain(model, batch, iters, a, nhwc=applied_nhwc(r))
            r = run_dlperf(model, batch, a)
            if not plain_first:
                iters = max(a.min_iters, int(a.min_time / r["step_time_mean_s"]))
                plain = run_plain(model, batch, iters, a, nhwc=applied_nhwc(r))
            d_runs.append(r["samples_per_s"])
            p_runs.append(plain["samples_per_s"])
            order.append("plain,dlperf" if plain_first else "dlperf,plain")
            # The 1/5/15-minute load averages before and after the round: a busy host shows
            # here (the 1-minute figure includes this round's own threads).
            loads.append({"before": list(load0), "after": list(os.getloadavg()),
                          "dlperf_warnings": r.get("warnings")})
        d, pl = statistics.median(d_runs), statistics.median(p_runs)
        # The plain loop's switches (optimizer implementation, attention, precision, PRNG...)
        # beside the numbers: dlperf's are in its stored result (--db).
        # ratio: of the medians (the number quoted); paired_ratios: round by round (dlperf's
        # run and the plain run next to it), which shows drift between rounds.
        row = {"model": model, "batch_size": batch, "dlperf_samples_per_s": d_runs,
               "plain_samples_per_s": p_runs, "ratio": d / pl,
               "paired_ratios": [x / y for x, y in zip(d_runs, p_runs)],
               "median_paired_ratio": statistics.median(x / y for x, y in zip(d_runs, p_runs)),
               "round_order": order,
               "plain_args": a.plain_args, "plain_flags": plain.get("flags"),
               "plain_params": plain.get("params"), "dlperf_params": r.get("params"),
               "load_average": loads}
        report["overhead"].append(row)
        print(f"{model:<14}{batch:>6}{d:>18,.1f}{pl:>17,.1f}{d / pl:>8.4f}"
              f"{row['median_paired_ratio']:>8.4f}", flush=True)
        Path(a.out).write_text(json.dumps(report, indent=1))  # a cut-short call keeps each point

    if a.truth and a.framework != "torch":
        p.error("--truth needs the torch plain loop (it has --sync-every-step)")
    if a.truth:
        print(f"\n{'model':<14}{'batch':>6}{'event mean ms':>15}{'wall/iters ms':>15}"
              f"{'sync-each-step ms':>19}{'no-sync plain ms':>18}")
    for model, batch in parse_points(a.truth):
        r = run_dlperf(model, batch, a)
        iters = max(a.min_iters, int(a.min_time / r["step_time_mean_s"]))
        synced = run_plain(model, batch, iters, a, sync=True, nhwc=applied_nhwc(r))
        free = run_plain(model, batch, iters, a, nhwc=applied_nhwc(r))
        row = {"model": model, "batch_size": batch,
               "event_mean_s": r["step_time_mean_s"], "event_median_s": r["step_time_median_s"],
               "wall_per_iter_s": r["wall_time_s"] / r["n_measured"], "n_measured": r["n_measured"],
               "plain_sync_each_step_mean_s": synced["mean_step_s"],
               "plain_no_sync_mean_s": free["mean_step_s"]}
        report["truth"].append(row)
        print(f"{model:<14}{batch:>6}{row['event_mean_s'] * 1e3:>15.4f}"
              f"{row['wall_per_iter_s'] * 1e3:>15.4f}{row['plain_sync_each_step_mean_s'] * 1e3:>19.4f}"
              f"{row['plain_no_sync_mean_s'] * 1e3:>18.4f}", flush=True)
        Path(a.out).write_text(json.dumps(report, indent=1))
    Path(a.out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
