"""Predictions registered before their points are measured, by category, and their judging
(docs/perfmodel.md, "Predictions made before the measurement"; issue 38 point 4, issue 42).

Five registrations, ``registration4`` to ``registration8`` (:data:`PLANS`), each a sweep file
and a committed predictions file (``registration3``, the step-level model's answers for one
sweep file, is benchmarks/h200/register.py's):

* ``registration4`` (benchmarks/h200/registration4.yaml): the step-level model's paths that
  fall short of issue 38's goals, each point predicted by ``dlperf predict`` in a new process
  as a user runs it: one-point series (asked at 2x or 1/2x the stored batch), extrapolation
  down (half the smallest stored batch), eager -> graph (``--what-if mode=graph`` from the
  eager series; the compiled series' own answer beside it);
* ``registration5`` (benchmarks/h200/registration5.yaml): the timeline replay's transforms
  (:func:`dlperf.perfmodel.retarget.predict`, the path of ``dlperf predict --gpu``, with the
  traces a transform is not to use withheld through its ``exclude``): fp32 -> bf16 (the
  configuration's fp32 traces interpolated to the batch, then moved to bf16) and a batch from
  one trace (each neighbouring trace alone); ``dlperf predict --gpu h200`` (every trace) and
  the step-level ``dlperf predict`` beside them as baselines. Its points are traced, so the
  judge adds each point's own-trace replay (made after the measurement, labelled so);
* ``registration6`` (benchmarks/h100/registration6.yaml, written to
  benchmarks/results/h100/registration6.json): points on the **H100** no committed H100 file
  holds, predicted from the H200 files (and the H100's ``dlperf calibrate`` profile,
  benchmarks/results/h100/calibrate.db) so that the cross-GPU path composes with the
  transforms: registration5's configurations (fp32 -> bf16, a batch from one trace, each
  replayed with ``gpu="h100"``) and some of registration4's (one-point series, extrapolation
  down, eager -> graph) by ``dlperf predict --gpu h100``; baselines: the step-level
  ``dlperf predict`` on the committed H100 files, and the naive H200 step (its measurement
  where stored, else the step-level model on the H200 files). The judge scores only points
  measured on the registered GPU (a file measured on another GPU is said so, not judged);
* ``registration7`` and ``registration8`` (benchmarks/h100/registration7.yaml,
  registration8.yaml): the H100's own traces transformed on the H100 (fp32 -> bf16, a batch
  from one trace) beside registration6's methods; registration8 measures every point beside
  its fp32/bf16 pair in one call, so its sign check takes no stored fp32 step.

    PYTHONPATH=src python benchmarks/h200/preregister.py registration4      # predict, once
    PYTHONPATH=src python benchmarks/h200/preregister.py registration4 --judge DB [--md OUT]

Predicting refuses a point any committed file of the registration's GPU holds (``held``),
and an existing predictions file (a registration is made once). Judging reads the committed predictions and the measured
``DB`` only: it never predicts again.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ["benchmarks/results/h200", "benchmarks/results/h200x2"]
SPLIT = json.loads((ROOT / "benchmarks/results/split.json").read_text())
KEY = ("model", "framework", "mode", "precision", "batch_size")


def _pt(model: str, framework: str, mode: str, precision: str, batch: int, category: str,
        methods: list[dict[str, Any]], stored: str) -> dict[str, Any]:
    return {"model": model, "framework": framework, "mode": mode, "precision": precision,
            "batch_size": batch, "category": category, "stored": stored, "methods": methods}


#: A method: ``predict`` (``dlperf predict`` with ``args`` beside the point's own
#: ``--model/-b``; ``as`` overrides the point fields the command names) or ``replay``
#: (:func:`retarget.predict` with the traces of ``withhold`` left out: ``precision`` withholds
#: every trace of the point's precision, ``batch`` every trace of its precision but ``from``).
SERIES = {"kind": "predict", "name": "dlperf predict (series)"}
WHAT_IF_GRAPH = {"kind": "predict", "name": "dlperf predict --what-if mode=graph",
                 "as": {"mode": "eager"}, "args": ["--what-if", "mode=graph"]}
REPLAY_USER = {"kind": "predict", "name": "dlperf predict --gpu h200 (replay, every trace)",
               "args": ["--gpu", "h200"], "sources": ["benchmarks/results/h200"]}
WHAT_IF_BF16 = {"kind": "predict", "name": "dlperf predict --what-if precision=bf16",
                "as": {"precision": "fp32"}, "args": ["--what-if", "precision=bf16"]}
TO_BF16 = {"kind": "replay", "name": "replay fp32 -> bf16", "withhold": "precision"}


def _one(b: int) -> dict[str, Any]:
    return {"kind": "replay", "name": f"replay, one trace (b={b})", "withhold": "batch",
            "from": b}


#: registration6's methods: the H200 files moved to the H100 (its calibrate profile).
H100_SOURCES = ["benchmarks/results/h200", "benchmarks/results/h100/calibrate.db"]
TO_BF16_H100 = {"kind": "replay", "name": "replay fp32 -> bf16, H200 -> H100",
                "withhold": "precision"}
GPU_H100 = {"kind": "predict", "name": "dlperf predict --gpu h100 (replay, every trace)",
            "args": ["--gpu", "h100"], "sources": H100_SOURCES}
STEP_H100 = {"kind": "predict", "name": "dlperf predict, H100 files (step-level)",
             "sources": ["benchmarks/results/h100"]}
NAIVE_H200 = {"kind": "naive", "name": "naive: the H200 step (measured, else step-level)"}

#: registration7's methods: the H100's own traces (the committed H100 files and
#: registration6's measured file) transformed on the H100 itself, beside registration6's.
H100_OWN = ["benchmarks/results/h100", "benchmarks/results/h100/registered/registration6.db"]
TO_BF16_OWN = {"kind": "replay", "name": "replay fp32 -> bf16, H100 traces",
               "withhold": "precision", "lib": H100_OWN, "primary": True}
EVERY_OWN = {"kind": "replay", "name": "replay, H100 traces (every trace)", "withhold": "none",
             "lib": H100_OWN, "primary": False}
STEP_H100_OWN = {"kind": "predict", "name": "dlperf predict, H100 files (step-level)",
                 "sources": H100_OWN}


def _one_own(b: int) -> dict[str, Any]:
    return {"kind": "replay", "name": f"replay, one trace (b={b}), H100 traces",
            "withhold": "batch", "from": b, "lib": H100_OWN, "primary": True}


def _one_h200(b: int, primary: bool) -> dict[str, Any]:
    return {**_one(b), "primary": primary}


#: registration8's methods: registration7's, the H100 files with registration7's measured
#: file added (a folder is read without its subfolders, so each registered file is named).
H100_OWN8 = [*H100_OWN, "benchmarks/results/h100/registered/registration7.db"]

#: Files that measure registered points again after their registration (a second
#: measurement of the same point, benchmarks/results/h100/COMMANDS.md "Repeats"): no method
#: reads them, and a plan's points may be stored there besides its own measured file.
REPEATS = "benchmarks/results/h100/repeats"
TO_BF16_OWN8 = {**TO_BF16_OWN, "lib": H100_OWN8}
EVERY_OWN8 = {**EVERY_OWN, "lib": H100_OWN8}
STEP_H100_OWN8 = {**STEP_H100_OWN, "sources": H100_OWN8}


def _pair8(model: str, batch: int, own: list[int], h200: list[int], stored: str
           ) -> list[dict[str, Any]]:
    """registration8's pair at one batch, fp32 then bf16 (the sweep's order): the fp32 point
    from each neighbouring H100 fp32 trace in ``own`` alone (H200 traces ``h200`` beside),
    the bf16 point from the H100 fp32 traces moved to bf16; registration7's baselines, on
    :data:`H100_OWN8`."""
    return [
        _pt(model, "torch", "eager", "fp32", batch, "batch, one trace, H100 traces",
            [*({**_one_own(b), "lib": H100_OWN8} for b in own),
             *(_one_h200(b, False) for b in h200), EVERY_OWN8, GPU_H100, STEP_H100_OWN8,
             NAIVE_H200], stored),
        _pt(model, "torch", "eager", "bf16", batch, "fp32 -> bf16, H100 traces",
            [TO_BF16_OWN8, TO_BF16_H100, GPU_H100, STEP_H100_OWN8, NAIVE_H200], stored)]


PLANS: dict[str, dict[str, Any]] = {
    "registration4": {"sweep": "benchmarks/h200/registration4.yaml", "points": [
        _pt("fcn8", "torch", "graph", "bf16", 2048, "one-point series, 2x", [SERIES], "1024"),
        _pt("deepspeech2", "torch", "graph", "fp32", 64, "one-point series, 2x", [SERIES],
            "32"),
        _pt("googlenet", "jax", "xla", "fp32", 64, "one-point series, 1/2x", [SERIES], "128"),
        _pt("alexnet_cifar", "jax", "xla", "bf16", 256, "one-point series, 2x", [SERIES],
            "128"),
        _pt("vgg16", "torch", "eager", "bf16", 8, "extrapolation down", [SERIES],
            "16, 32, 48, 64, 128"),
        _pt("resnet56", "torch", "eager", "fp32", 8, "extrapolation down", [SERIES],
            "16, 64, 128, 256, 1024"),
        _pt("transformer", "torch", "eager", "fp32", 4, "extrapolation down", [SERIES],
            "8, 16, 32, 64, 128"),
        _pt("lstm", "torch", "graph", "fp32", 32, "eager -> graph",
            [WHAT_IF_GRAPH, SERIES], "graph 64, 128; eager 16-256"),
        _pt("fcn5", "torch", "graph", "bf16", 256, "eager -> graph", [WHAT_IF_GRAPH, SERIES],
            "graph 1024; eager 16-8192"),
        _pt("deepspeech2", "torch", "graph", "bf16", 16, "eager -> graph",
            [WHAT_IF_GRAPH, SERIES], "graph 32; eager 8-64"),
    ]},
    "registration5": {"sweep": "benchmarks/h200/registration5.yaml", "points": [
        _pt("resnet50", "torch", "eager", "bf16", 48, "fp32 -> bf16",
            [TO_BF16, REPLAY_USER, WHAT_IF_BF16, SERIES], "fp32 traces 32, 64"),
        _pt("transformer", "torch", "eager", "bf16", 48, "fp32 -> bf16",
            [TO_BF16, REPLAY_USER, WHAT_IF_BF16, SERIES], "fp32 traces 32, 64"),
        _pt("lstm", "torch", "eager", "bf16", 96, "fp32 -> bf16",
            [TO_BF16, REPLAY_USER, WHAT_IF_BF16, SERIES], "fp32 traces 64, 128"),
        _pt("bert_base", "torch", "eager", "bf16", 24, "fp32 -> bf16",
            [TO_BF16, REPLAY_USER, WHAT_IF_BF16, SERIES], "fp32 traces 16, 32"),
        _pt("fcn8", "torch", "eager", "bf16", 2048, "fp32 -> bf16",
            [TO_BF16, REPLAY_USER, WHAT_IF_BF16, SERIES], "fp32 traces 1024, 4096"),
        _pt("alexnet", "torch", "eager", "fp32", 48, "batch, one trace",
            [_one(32), _one(64), REPLAY_USER, SERIES], "fp32 traces 32, 64"),
        _pt("deepspeech2", "torch", "eager", "fp32", 48, "batch, one trace",
            [_one(32), _one(64), REPLAY_USER, SERIES], "fp32 traces 32, 64"),
        _pt("resnet50", "torch", "eager", "fp32", 48, "batch, one trace",
            [_one(32), _one(64), REPLAY_USER, SERIES], "fp32 traces 32, 64"),
        _pt("lstm", "torch", "eager", "fp32", 96, "batch, one trace",
            [_one(64), _one(128), REPLAY_USER, SERIES], "fp32 traces 64, 128"),
        _pt("alexnet_cifar", "torch", "eager", "fp32", 512, "batch, one trace",
            [_one(256), _one(1024), REPLAY_USER, SERIES], "fp32 traces 256, 1024"),
    ]},
    # on the H100, from the H200 files: cross-GPU composed with the transforms
    "registration6": {
        "sweep": "benchmarks/h100/registration6.yaml", "gpu": "h100", "device": "H100",
        "lib": H100_SOURCES, "held": ["benchmarks/results/h100"],
        "out": "benchmarks/results/h100/registration6.json",
        "measured": "benchmarks/results/h100/registered/registration6.db",
        "anchors": ["benchmarks/results/h100"], "points": [
            _pt("resnet50", "torch", "eager", "bf16", 48, "fp32 -> bf16, H200 -> H100",
                [TO_BF16_H100, GPU_H100, STEP_H100, NAIVE_H200], "H200 fp32 traces 32, 64"),
            _pt("transformer", "torch", "eager", "bf16", 48, "fp32 -> bf16, H200 -> H100",
                [TO_BF16_H100, GPU_H100, STEP_H100, NAIVE_H200], "H200 fp32 traces 32, 64"),
            _pt("lstm", "torch", "eager", "bf16", 96, "fp32 -> bf16, H200 -> H100",
                [TO_BF16_H100, GPU_H100, STEP_H100, NAIVE_H200], "H200 fp32 traces 64, 128"),
            _pt("fcn8", "torch", "eager", "bf16", 2048, "fp32 -> bf16, H200 -> H100",
                [TO_BF16_H100, GPU_H100, STEP_H100, NAIVE_H200],
                "H200 fp32 traces 1024, 4096"),
            _pt("resnet50", "torch", "eager", "fp32", 48, "batch, one trace, H200 -> H100",
                [_one(32), _one(64), GPU_H100, STEP_H100, NAIVE_H200],
                "H200 fp32 traces 32, 64"),
            _pt("alexnet", "torch", "eager", "fp32", 48, "batch, one trace, H200 -> H100",
                [_one(32), _one(64), GPU_H100, STEP_H100, NAIVE_H200],
                "H200 fp32 traces 32, 64"),
            _pt("lstm", "torch", "eager", "fp32", 96, "batch, one trace, H200 -> H100",
                [_one(64), _one(128), GPU_H100, STEP_H100, NAIVE_H200],
                "H200 fp32 traces 64, 128"),
            _pt("transformer", "torch", "eager", "fp32", 4,
                "extrapolation down, H200 -> H100", [GPU_H100, STEP_H100, NAIVE_H200],
                "H200 fp32 traces 8-64"),
            _pt("resnet56", "torch", "eager", "fp32", 8, "extrapolation down, H200 -> H100",
                [GPU_H100, STEP_H100, NAIVE_H200], "H200 fp32 traces 16-1024"),
            _pt("lstm", "torch", "graph", "fp32", 32, "eager -> graph, H200 -> H100",
                [GPU_H100, STEP_H100, NAIVE_H200],
                "H200 graph bf16 traces 8-64, graph fp32 64, 128 untraced"),
            _pt("fcn8", "torch", "graph", "bf16", 2048, "one-point series, 2x, H200 -> H100",
                [GPU_H100, STEP_H100, NAIVE_H200], "H200 graph bf16 1024 untraced"),
        ]},
    # on the H100: its own traces transformed (fp32 -> bf16, a batch from one trace) beside
    # the H200 -> H100 replay, fp32/bf16 pairs at one batch (benchmarks/h100/registration7.yaml)
    "registration7": {
        "sweep": "benchmarks/h100/registration7.yaml", "gpu": "h100", "device": "H100",
        "lib": H100_SOURCES,
        "held": ["benchmarks/results/h100", "benchmarks/results/h200",
                 "benchmarks/results/h200x2"],
        "out": "benchmarks/results/h100/registration7.json",
        "measured": "benchmarks/results/h100/registered/registration7.db",
        "anchors": H100_OWN, "sign_anchors": H100_OWN, "points": [
            _pt("bert_base", "torch", "eager", "bf16", 48, "fp32 -> bf16, H100 traces",
                [TO_BF16_OWN, TO_BF16_H100, GPU_H100, STEP_H100_OWN, NAIVE_H200],
                "H100 fp32 traces 16, 32, 64; H200 fp32 traces 8-64"),
            _pt("bert_base", "torch", "eager", "fp32", 48, "batch, one trace, H100 traces",
                [_one_own(32), _one_own(64), _one_h200(32, False), _one_h200(64, False),
                 EVERY_OWN, GPU_H100, STEP_H100_OWN, NAIVE_H200],
                "H100 fp32 traces 16, 32, 64; H200 fp32 traces 8-64"),
            _pt("resnet50", "torch", "eager", "bf16", 80, "fp32 -> bf16, H100 traces",
                [TO_BF16_OWN, TO_BF16_H100, GPU_H100, STEP_H100_OWN, NAIVE_H200],
                "H100 fp32 traces 32, 48, 64, 128; H200 fp32 traces 16-512"),
            _pt("resnet50", "torch", "eager", "fp32", 80, "batch, one trace, H100 traces",
                [_one_own(64), _one_own(128), _one_h200(64, False), _one_h200(128, False),
                 EVERY_OWN, GPU_H100, STEP_H100_OWN, NAIVE_H200],
                "H100 fp32 traces 32, 48, 64, 128; H200 fp32 traces 16-512"),
            _pt("deepspeech2", "torch", "eager", "bf16", 48, "fp32 -> bf16, H200 -> H100",
                [TO_BF16_H100, GPU_H100, STEP_H100_OWN, NAIVE_H200],
                "H200 fp32 traces 8-64; none on the H100"),
            _pt("deepspeech2", "torch", "eager", "fp32", 48, "batch, one trace, H200 -> H100",
                [_one_h200(32, True), _one_h200(64, True), GPU_H100, STEP_H100_OWN,
                 NAIVE_H200], "H200 fp32 traces 8-64; none on the H100"),
            _pt("vgg16", "torch", "eager", "bf16", 96, "fp32 -> bf16, H100 traces",
                [TO_BF16_OWN, TO_BF16_H100, GPU_H100, STEP_H100_OWN, NAIVE_H200],
                "H100 fp32 traces 32, 64, 128; H200 fp32 traces 16-128"),
            _pt("vgg16", "torch", "eager", "fp32", 96, "batch, one trace, H100 traces",
                [_one_own(64), _one_own(128), _one_h200(64, False), _one_h200(128, False),
                 EVERY_OWN, GPU_H100, STEP_H100_OWN, NAIVE_H200],
                "H100 fp32 traces 32, 64, 128; H200 fp32 traces 16-128"),
            _pt("lstm", "torch", "eager", "bf16", 192, "fp32 -> bf16, H100 traces",
                [TO_BF16_OWN, TO_BF16_H100, GPU_H100, STEP_H100_OWN, NAIVE_H200],
                "H100 fp32 traces 32-128 (beyond); H200 fp32 traces 16-256"),
            _pt("lstm", "torch", "eager", "fp32", 192, "batch, one trace, H100 traces",
                [_one_own(128), _one_h200(128, False), _one_h200(256, False), EVERY_OWN,
                 GPU_H100, STEP_H100_OWN, NAIVE_H200],
                "H100 fp32 traces 32-128 (beyond); H200 fp32 traces 16-256"),
            # fp32 -> bf16 at the batch of an H100 fp32 trace (registration6's points)
            _pt("alexnet", "torch", "eager", "bf16", 48, "fp32 -> bf16, H100 traces",
                [TO_BF16_OWN, TO_BF16_H100, GPU_H100, STEP_H100_OWN, NAIVE_H200],
                "H100 fp32 trace 48 (same batch); H200 fp32 traces 16-2048"),
            _pt("resnet56", "torch", "eager", "bf16", 8, "fp32 -> bf16, H100 traces",
                [TO_BF16_OWN, TO_BF16_H100, GPU_H100, STEP_H100_OWN, NAIVE_H200],
                "H100 fp32 trace 8 (same batch); H200 fp32 traces 16-1024"),
            _pt("transformer", "torch", "eager", "bf16", 4, "fp32 -> bf16, H100 traces",
                [TO_BF16_OWN, TO_BF16_H100, GPU_H100, STEP_H100_OWN, NAIVE_H200],
                "H100 fp32 traces 4 (same batch), 16, 32, 64; H200 fp32 traces 8-128"),
        ]},
    # on the H100: fp32/bf16 pairs measured in one call (benchmarks/h100/registration8.yaml),
    # the bf16 side from the H100 fp32 traces, the fp32 side from one neighbouring H100 trace;
    # no sign_anchors: the sign check uses the fp32 point of the same call only
    "registration8": {
        "sweep": "benchmarks/h100/registration8.yaml", "gpu": "h100", "device": "H100",
        "lib": H100_SOURCES,
        "held": ["benchmarks/results/h100", "benchmarks/results/h200",
                 "benchmarks/results/h200x2"],
        "out": "benchmarks/results/h100/registration8.json",
        "measured": "benchmarks/results/h100/registered/registration8.db",
        "anchors": H100_OWN8, "points": [
            *_pair8("bert_base", 24, [16, 32], [16, 32],
                    "H100 fp32 traces 16, 32, 48, 64; H200 fp32 traces 8-64"),
            *_pair8("resnet56", 32, [8], [16, 64],
                    "H100 fp32 trace 8 (beyond); H200 fp32 traces 16-1024"),
            *_pair8("alexnet", 96, [48], [64, 128],
                    "H100 fp32 trace 48 (beyond); H200 fp32 traces 16-128"),
            *_pair8("deepspeech2", 24, [48], [16, 32],
                    "H100 fp32 trace 48 (beyond); H200 fp32 traces 8-64"),
            *_pair8("resnet50", 24, [32], [16, 32],
                    "H100 fp32 traces 32-128 (beyond); H200 fp32 traces 16-128"),
            *_pair8("transformer", 12, [4, 16], [8, 16],
                    "H100 fp32 traces 4, 16, 32, 64; H200 fp32 traces 8-64"),
            *_pair8("vgg16", 40, [32, 64], [32, 64],
                    "H100 fp32 traces 32, 64, 96, 128; no H200 eager trace"),
        ]},
}


def side(model: str) -> str:
    """``test`` or ``dev``: the model's side of the frozen split (benchmarks/results/split.json)."""
    return "test" if model in SPLIT["test_models"] else "dev"


def sweep_points(yaml_path: str | Path) -> list[tuple[str, str, str, str, int]]:
    """The sweep file's points as ``(model, framework, mode, precision, batch)`` tuples."""
    from dlperf.config.sweep import load_sweep

    return [tuple(p.flat()[k] for k in KEY) for p in load_sweep(str(yaml_path)).expand()]


def stored_points(paths: list[str], exclude: tuple[str, ...] = ()
                  ) -> set[tuple[str, str, str, str, int]]:
    """Every one-device CUDA synthetic-data ``(model, framework, mode, precision, batch)`` of
    the results files under ``paths`` (files or folders, recursively), any compile mode;
    the files ``exclude`` names (paths from the repository root) left out."""
    from dlperf.perfmodel import records

    skip = {(ROOT / e).resolve() for e in exclude}
    files = sorted({str(f) for p in paths for f in
                    ([Path(p)] if Path(p).is_file() else (ROOT / p).rglob("*.db"))
                    if Path(f).resolve() not in skip})
    return {(p.model, p.framework, p.mode, p.precision, p.batch_size)
            for p in records.load(files).points
            if p.world_size == 1 and (p.device or "").startswith("cuda")
            and p.data == "synthetic"}


def _cli(point: dict[str, Any], m: dict[str, Any]) -> list[str]:
    q = {**point, **m.get("as", {})}
    return ["dlperf", "predict", *sum((["--db", s] for s in m.get("sources", SOURCES)), []),
            "--model", q["model"], "--framework", q["framework"], "--mode", q["mode"],
            "--precision", q["precision"], "-b", str(q["batch_size"]),
            *([] if "--gpu" in m.get("args", []) else ["--device", "cuda", "--data",
                                                        "synthetic"]),
            *m.get("args", [])]


def run_predict(point: dict[str, Any], m: dict[str, Any]) -> dict[str, Any]:
    """One ``dlperf predict`` answer (a new process, as a user's): the number and interval it
    prints (its first line), its path, category and interval source (from ``--format json``)."""
    cli = _cli(point, m)
    cmd = [sys.executable, "-m", *cli]
    txt = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    js = subprocess.run([*cmd, "--format", "json"], cwd=ROOT, capture_output=True, text=True,
                        check=False)
    out: dict[str, Any] = {"command": " ".join(cli), "printed": txt.stdout.strip().splitlines()[:1]
                           or txt.stderr.strip().splitlines()[-1:]}
    if js.returncode:
        return {**out, "refused": js.stderr.strip().splitlines()[-1:]}
    d = json.loads(js.stdout)
    d = d[0] if isinstance(d, list) else d
    if "--gpu" in m.get("args", []):
        return {**out, "predicted_s": d["predicted_step_time_s"], "interval_s": d["interval_s"],
                "category": d.get("validation_category"), "bound": d.get("bound"),
                "gpu": d.get("gpu"), "interval_from": d.get("interval_group"),
                "host_session": d.get("host_session"), "sources": d.get("sources"),
                "transforms": d.get("transforms")}
    return {**out, "predicted_s": d["predicted_step_time_s"], "interval_s": d.get("interval_s"),
            "category": d.get("validation_category"), "how": d.get("how"),
            "bound": d.get("bound"), "gpu": d.get("gpu"),
            "interval_from": d.get("interval_group"), "host_session": d.get("host_session"),
            "warnings": d.get("warnings")}


def run_replay(lib: Any, point: dict[str, Any], m: dict[str, Any], gpu: str = "h200",
               lib_paths: list[str] | None = None) -> dict[str, Any]:
    """:func:`dlperf.perfmodel.retarget.predict` of ``point`` on ``gpu`` (a profile's or a
    datasheet's name; the traces are the H200 files') with the traces the method withholds
    left out (see :data:`PLANS`); ``lib_paths`` names ``lib``'s files in the command."""
    from dlperf.errors import ConfigError
    from dlperf.perfmodel import retarget

    fam = lib.points(point["model"], point["framework"], point["mode"])
    if m["withhold"] == "none":
        drop = []
    elif m["withhold"] == "precision":
        drop = [p for p in fam if p.precision == point["precision"]]
    else:
        drop = [p for p in fam if p.precision == point["precision"]
                and p.batch_size != m["from"]]
    names = (lib_paths or SOURCES[:1])
    call = (f"retarget.predict(TraceLibrary({names[0] if len(names) == 1 else names!r}), "
            f"{point['model']!r}, {point['framework']!r}, {point['mode']!r}, "
            f"{point['precision']!r}, {point['batch_size']}, {gpu!r}, "
            f"exclude=<{len(drop)} traces: {m['withhold']}>)")
    try:
        p = retarget.predict(lib, *(point[k] for k in KEY), gpu,
                             exclude=[(q.source, q.result_id) for q in drop])
    except ConfigError as e:
        return {"command": call, "refused": [str(e)]}
    d = p.to_dict()
    return {"command": call, "predicted_s": d["step_s"], "interval_s": d["interval_s"],
            "category": d.get("category"), "bound": d.get("bound"), "gpu": d.get("gpu_name"),
            "interval_from": d.get("interval_from"), "host_session": d.get("host_session"),
            "sources": d.get("sources"), "transforms": d.get("transforms"),
            "model_version": d.get("model_version")}


def refuse_stored(points: list[dict[str, Any]], paths: list[str]
                  ) -> set[tuple[str, str, str, str, int]]:
    """The ``(model, framework, mode, precision, batch)`` of ``points`` that a results file
    under ``paths`` already holds (:func:`stored_points`): a registration must name none."""
    return stored_points(paths) & {tuple(p[k] for k in KEY) for p in points}


def stored_step(point: dict[str, Any], paths: list[str] | None = None,
                mode: str | None = None) -> tuple[float, float] | None:
    """The committed measurement of ``point`` (its mode replaced by ``mode`` where given):
    ``(median step s, CI half-width / median)`` of the median-step result of the ok
    one-device synthetic-data CUDA results of the results files under ``paths`` (default
    :data:`SOURCES`), None where none is stored."""
    from dlperf.results.store import ResultStore
    from dlperf.results.view import ci_s, median_s

    files = sorted({str(f) for p in (paths or SOURCES) for f in
                    ([Path(p)] if Path(p).is_file() else (ROOT / p).glob("*.db"))})
    want = (point["model"], point["framework"], mode or point["mode"], point["precision"],
            point["batch_size"])
    found = []
    for f in files:
        with ResultStore(f, read_only=True) as store:
            for r in store.records(latest=True, samples=False):
                i = r.identity
                if (i.status == "ok" and i.world_size == 1 and i.data == "synthetic"
                        and (i.device or "").startswith("cuda")
                        and (i.model, i.framework, i.mode, i.precision, i.batch_size)
                        == want):
                    m = median_s(r)
                    lo, hi = ci_s(r)
                    if m:
                        found.append((m, (hi - lo) / 2 / m if lo is not None
                                      and hi is not None else 0.0))
    if not found:
        return None
    found.sort()
    return found[len(found) // 2]


def run_naive(point: dict[str, Any]) -> dict[str, Any]:
    """The naive cross-GPU answer: the point's step on the H200, its committed measurement
    (:func:`stored_step` of :data:`SOURCES`) where stored, else the step-level ``dlperf
    predict`` on the H200 files (:func:`run_predict`); the interval is the measurement's CI
    or the step-level model's."""
    got = stored_step(point)
    if got is None:
        return {**run_predict(point, SERIES), "how": "H200 step-level model"}
    m, ci = got
    return {"command": f"stored_step({point['model']} {point['mode']} {point['precision']} "
                       f"b={point['batch_size']}, {SOURCES})",
            "predicted_s": m, "interval_s": [m * (1 - ci), m * (1 + ci)],
            "category": "naive (H200 measured)", "how": "H200 measured"}


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                          check=False).stdout.strip()


def register(name: str, out: Path) -> dict[str, Any]:
    """Predict every point of the registration ``name`` (:data:`PLANS`) and write ``out``.

    Raises:
        SystemExit: ``out`` exists, the plan and its sweep file disagree, or a point is held
            by a committed file of the registration's GPU (the plan's ``held``, default the
            H200 files).
    """
    plan = PLANS[name]
    gpu = plan.get("gpu", "h200")
    lib_paths = plan.get("lib", SOURCES[:1])
    if out.exists():
        sys.exit(f"{out} exists: predictions are registered once (judge with --judge DB)")
    pts = plan["points"]
    if sorted(tuple(p[k] for k in KEY) for p in pts) != sorted(sweep_points(ROOT /
                                                                            plan["sweep"])):
        sys.exit(f"the plan of {name} and {plan['sweep']} name different points")
    held = refuse_stored(pts, plan.get("held", SOURCES))
    if held:
        sys.exit(f"already stored in {', '.join(plan.get('held', SOURCES))}: {sorted(held)}")
    libs: dict[tuple[str, ...], Any] = {}
    rows = []
    for p in pts:
        preds = []
        for m in p["methods"]:
            if m["kind"] == "replay":
                paths = m.get("lib", lib_paths)
                if tuple(paths) not in libs:
                    from dlperf.perfmodel import retarget

                    libs[tuple(paths)] = retarget.TraceLibrary(paths if len(paths) > 1
                                                               else paths[0])
                preds.append({"method": m["name"],
                              **({"primary": m["primary"]} if "primary" in m else {}),
                              **run_replay(libs[tuple(paths)], p, m, gpu, paths)})
            elif m["kind"] == "naive":
                preds.append({"method": m["name"], **run_naive(p)})
            else:
                preds.append({"method": m["name"],
                              **({"primary": m["primary"]} if "primary" in m else {}),
                              **run_predict(p, m)})
        base = {k: v for k, v in p.items() if k != "methods"}
        rows.append({**base, "side": side(p["model"]), "predictions": preds})
        for q in preds:
            v = q.get("predicted_s")
            print(f"{p['model']} {p['mode']} {p['precision']} b={p['batch_size']} "
                  f"[{q['method']}]: " + (f"{v * 1e3:.3f} ms" if v else f"{q.get('refused')}"))
    import dlperf

    doc = {"registration": name, "sweep": plan["sweep"],
           "sources": sorted({*SOURCES, *lib_paths, *(s for p in pts for m in p["methods"]
                                                       for s in m.get("lib", []))})
           if "lib" in plan else SOURCES,
           "gpu": gpu, "device": plan.get("device", "H200"),
           "made_at_commit": _git("rev-parse", "HEAD"),
           "tree_clean_except_output": not [ln for ln in _git("status", "--porcelain").
                                            splitlines() if not ln.endswith(out.name)],
           "made_at_utc": datetime.datetime.now(datetime.UTC).isoformat(
               timespec="seconds"),
           "dlperf_version": dlperf.__version__,
           "command": f"PYTHONPATH=src python benchmarks/h200/preregister.py {name}",
           "points": rows}
    out.write_text(json.dumps(doc, indent=1) + "\n")
    return doc


#: Each category's goal (median |error|) in issue 38 and issue 42, for the summary.
GOALS = {"one-point series, 2x": 8.0, "one-point series, 1/2x": 8.0,
         "extrapolation down": 5.0, "eager -> graph": 8.0, "fp32 -> bf16": 8.0,
         "batch, one trace": 6.0, "own trace (after measurement)": 3.0,
         # registration6: a transform composed with H200 -> H100; issue 42's cross-GPU goal
         "fp32 -> bf16, H200 -> H100": 10.0, "batch, one trace, H200 -> H100": 10.0,
         "extrapolation down, H200 -> H100": 10.0, "eager -> graph, H200 -> H100": 10.0,
         "one-point series, 2x, H200 -> H100": 10.0,
         # registration7: the H100's own traces transformed on the H100 (issue 42's goals)
         "fp32 -> bf16, H100 traces": 8.0, "batch, one trace, H100 traces": 6.0}
#: The noise floor of a sign check: a measured change smaller than this (or than the two
#: medians' CIs together) counts as no change (as benchmarks/replay_validate.py does).
SIGN_NOISE = 0.02


def method_group(point: dict[str, Any], q: dict[str, Any]) -> str:
    """The method a prediction is summarised under: its name, with a one-trace replay's batch
    turned into its direction (``from below``/``from above`` the asked batch), so the points
    of a category pool."""
    m = re.fullmatch(r"replay, one trace \(b=(\d+)\)(.*)", q["method"])
    if not m:
        return q["method"]
    return ("replay, one trace from below" if int(m.group(1)) < point["batch_size"]
            else "replay, one trace from above") + m.group(2)


def measured(db: str) -> dict[tuple, Any]:
    """``(model, framework, mode, precision, batch) -> RunRecord`` of the latest one-device
    results of ``db``: the ok one where a point has one, else its failure (status not
    ``ok``), so the judge can say a point failed rather than that it was not run."""
    from dlperf.results.store import ResultStore

    with ResultStore(db, read_only=True) as store:
        recs = [r for r in store.records(latest=True, samples=False)
                if r.identity.world_size == 1]
    out: dict[tuple, Any] = {}
    for r in recs:
        k = tuple(getattr(r.identity, f) for f in KEY)
        if k not in out or r.identity.status == "ok":
            out[k] = r
    return out


def on_device(device_name: str | None, want: str | None) -> bool:
    """Whether a result measured on ``device_name`` (the driver's name) is on the GPU a
    registration names (``want``, e.g. ``H100``; None: any)."""
    return want is None or want.lower() in (device_name or "").lower()


def judge(reg: dict[str, Any], db: str) -> list[dict[str, Any]]:
    """One row per registered prediction: the point, its method and category, the
    prediction and interval, the measured median step of the point in ``db`` (None where not
    measured), the signed error ``predicted / measured - 1`` (%) and whether the measurement
    is inside the interval. Registered predictions only: nothing is predicted again."""
    from dlperf.results.view import ci_s, median_s

    got = measured(db)
    rows = []
    for p in reg["points"]:
        rec = got.get(tuple(p[k] for k in KEY))
        failed = rec.identity.error or rec.identity.status \
            if rec is not None and rec.identity.status != "ok" else None
        if not failed and rec is not None and not on_device(rec.device_name,
                                                            reg.get("device")):
            failed = f"measured on {rec.device_name}, not the registered {reg['device']}"
        rec = None if failed else rec
        m = median_s(rec) if rec is not None else None
        lo_m, hi_m = ci_s(rec) if rec is not None else (None, None)
        ci = (hi_m - lo_m) / 2 / m if m and lo_m is not None and hi_m is not None else None
        for i, q in enumerate(p["predictions"]):
            v = q.get("predicted_s")
            lo, hi = q.get("interval_s") or (None, None)
            rows.append({**{k: p[k] for k in (*KEY, "category", "side")},
                         "method": q["method"], "group": method_group(p, q),
                         "primary": q["primary"] if "primary" in q else (
                             i == 0 or q["method"].startswith("replay, one trace")),
                         "path": q.get("category"),
                         "predicted_s": v, "interval_s": q.get("interval_s"),
                         "measured_s": m, "measured_ci_rel": ci, "failed": failed,
                         "error_pct": (v / m - 1) * 100 if m and v else None,
                         "inside": (lo <= m <= hi) if m and lo is not None else None,
                         "registered": True})
    return rows


def eager_anchor(point: dict[str, Any], paths: list[str] | None = None
                 ) -> tuple[float, float] | None:
    """The committed eager measurement of a compiled point's configuration at its batch
    (:func:`stored_step` with mode ``eager``), None where none is stored."""
    return stored_step(point, paths, mode="eager")


def graph_signs(rows: list[dict[str, Any]], paths: list[str] | None = None) -> list[str]:
    """The eager -> graph sign check (issue 38's goal: more signs right than the best
    trivial rule, "compiled is always faster"): per measured compiled point, the measured
    and predicted change against the committed eager step at its batch; a change within
    the noise (:data:`SIGN_NOISE` or the two CIs together) is not counted."""
    pts = {tuple(r[k] for k in KEY): r for r in rows
           if r["category"] == "eager -> graph" and r["measured_s"]}
    if not pts:
        return []
    out = ["| model | precision | batch | eager (stored) ms | compiled (measured) ms | "
           "measured change | counted | " + " | ".join(sorted({r["group"] for r in rows
                                                                if r["category"]
                                                                == "eager -> graph"}))
           + " | rule: compiled faster |", ""]
    groups = sorted({r["group"] for r in rows if r["category"] == "eager -> graph"})
    out[1] = "|---|---|---:|---:|---:|---:|---|" + "---|" * (len(groups) + 1)
    right = dict.fromkeys([*groups, "rule"], 0)
    counted = 0
    for key, r in pts.items():
        a = eager_anchor(dict(zip(KEY, key)), paths)
        if a is None:
            continue
        e, ci_e = a
        change = r["measured_s"] / e - 1
        noise = max(SIGN_NOISE, ci_e + (r["measured_ci_rel"] or 0.0))
        use = abs(change) > noise
        counted += use
        cells = []
        for g in groups:
            q = next((x for x in rows if tuple(x[k] for k in KEY) == key and x["group"] == g),
                     None)
            if q is None or not q["predicted_s"]:
                cells.append("-")
                continue
            pc = q["predicted_s"] / e - 1
            ok = (pc < 0) == (change < 0)
            right[g] += use and ok
            cells.append(f"{pc * 100:+.1f}% ({'right' if ok else 'wrong'})")
        right["rule"] += use and change < 0
        cells.append("right" if change < 0 else "wrong")
        out.append(f"| {key[0]} | {key[3]} | {key[4]} | {e * 1e3:.2f} | "
                   f"{r['measured_s'] * 1e3:.2f} | {change * 100:+.1f}% | "
                   f"{'yes' if use else 'no (noise)'} | " + " | ".join(cells) + " |")
    out += ["", f"Signs right beyond the noise, of {counted}: "
            + ", ".join(f"{g} {right[g]}" for g in groups)
            + f"; the rule \"compiled is always faster\" {right['rule']}"]
    return out


def precision_signs(rows: list[dict[str, Any]], paths: list[str] | None = None) -> list[str]:
    """The fp32 -> bf16 sign check where a registration measures both precisions of a
    configuration at one batch: per such pair, the measured change ``bf16 / fp32 - 1`` and
    each method's predicted change (its bf16 prediction over its fp32 one, methods both
    points carry; the replay's fp32 -> bf16 over the fp32 point's ``--gpu`` answer, and the
    H100-trace replay's fp32 -> bf16 over the fp32 point's every-trace H100 replay where the
    points carry those); a change within the noise (:data:`SIGN_NOISE` or the two CIs
    together) is not counted. The trivial rule is "bf16 is always faster".

    With ``paths`` (results files or folders), a measured bf16 point whose fp32 side the
    registration does not measure is checked against the committed fp32 measurement at its
    batch (:func:`stored_step`): measured and predicted change both over that stored step."""
    by = {}
    for r in rows:
        if r.get("registered", True) and r["measured_s"]:
            by.setdefault(tuple(r[k] for k in KEY), []).append(r)
    pairs = [(k, (*k[:3], "fp32", k[4])) for k in by if k[3] == "bf16"
             and (*k[:3], "fp32", k[4]) in by]
    singles = []
    for k in (k for k in by if k[3] == "bf16" and (*k[:3], "fp32", k[4]) not in by):
        a = stored_step(dict(zip(KEY, (*k[:3], "fp32", k[4]))), paths) if paths else None
        if a is not None:
            singles.append((k, a))
    if not pairs and not singles:
        return []

    def pred(rs, group):
        return next((r["predicted_s"] for r in rs if r["group"] == group
                     and r["predicted_s"]), None)

    groups = sorted({r["group"] for k, f in pairs for r in by[k]}
                    & {r["group"] for k, f in pairs for r in by[f]})
    repl = "replay fp32 -> bf16, H200 -> H100 / --gpu h100"
    own = f"{TO_BF16_OWN['name']} / {EVERY_OWN['name']}"
    # the fp32 side of each composed column: (bf16 group, fp32 group)
    composed = {repl: ("replay fp32 -> bf16, H200 -> H100", GPU_H100["name"]),
                own: (TO_BF16_OWN["name"], EVERY_OWN["name"])}
    cols = [*groups, repl] + ([own] if any(pred(by[kb], TO_BF16_OWN["name"])
                                           for kb, _ in [*pairs, *singles]) else [])
    out = ["| model | mode | batch | fp32 measured ms | bf16 measured ms | measured change | "
           "counted | " + " | ".join(cols) + " | rule: bf16 faster |",
           "|---|---|---:|---:|---:|---:|---|" + "---|" * (len(cols) + 1)]
    right = dict.fromkeys([*cols, "rule"], 0)
    counted = 0
    for kb, fp in [*pairs, *singles]:
        b = by[kb]
        mb = b[0]["measured_s"]
        if isinstance(fp, tuple) and isinstance(fp[0], str):
            f = by[fp]
            mf, ci_f, note = f[0]["measured_s"], f[0]["measured_ci_rel"] or 0, ""
        else:
            f, (mf, ci_f), note = None, fp, " (stored)"
        change = mb / mf - 1
        noise = max(SIGN_NOISE, (b[0]["measured_ci_rel"] or 0) + ci_f)
        use = abs(change) > noise
        counted += use
        cells = []
        for g in cols:
            gb, gf = composed.get(g, (g, g))
            pb = pred(b, gb)
            pf = (pred(f, gf) if f is not None else mf)
            if not pb or not pf:
                cells.append("-")
                continue
            pc = pb / pf - 1
            ok = (pc < 0) == (change < 0)
            right[g] += use and ok
            cells.append(f"{pc * 100:+.1f}% ({'right' if ok else 'wrong'})")
        right["rule"] += use and change < 0
        cells.append("right" if change < 0 else "wrong")
        out.append(f"| {kb[0]} | {kb[1]}/{kb[2]} | {kb[4]} | {mf * 1e3:.2f}{note} | "
                   f"{mb * 1e3:.2f} | {change * 100:+.1f}% | {'yes' if use else 'no (noise)'} | "
                   + " | ".join(cells) + " |")
    out += ["", f"fp32 -> bf16 signs right beyond the noise, of {counted}: "
            + ", ".join(f"{g} {right[g]}" for g in cols)
            + f"; the rule \"bf16 is always faster\" {right['rule']}"]
    if singles:
        out += ["", "A fp32 side marked (stored) is the committed measurement at the batch "
                "(another session): each method's change is its bf16 prediction over it."]
    return out


def own_trace_rows(reg: dict[str, Any], db: str) -> list[dict[str, Any]]:
    """Each traced point of the registration measured in ``db`` replayed from its own trace
    (:func:`dlperf.perfmodel.replay.replay_own`): made after the measurement, so labelled
    ``registered: False``; no interval."""
    from dlperf.perfmodel import replay

    want = {tuple(p[k] for k in KEY): p for p in reg["points"]}
    rows = []
    for pt, st in replay.load_traces(db):
        key = (pt.model, pt.framework, pt.mode, pt.precision, pt.batch_size)
        if key not in want or pt.world_size != 1 or not on_device(pt.device_name,
                                                                  reg.get("device")):
            continue
        v = replay.replay_own(pt, st).step_s
        m = pt.step_time_s
        rows.append({**dict(zip(KEY, key)), "category": "own trace (after measurement)",
                     "side": side(pt.model), "method": "replay of its own trace",
                     "path": "own trace", "predicted_s": v, "interval_s": None,
                     "group": "replay of its own trace", "primary": True,
                     "measured_s": m, "measured_ci_rel": None,
                     "error_pct": (v / m - 1) * 100 if m else None,
                     "inside": None, "registered": False})
    return rows


def table(rows: list[dict[str, Any]]) -> list[str]:
    """The judged rows as a Markdown table (ms)."""
    out = ["| model | side | fw/mode | precision | batch | category | method | path | "
           "predicted ms | 90% interval ms | measured ms | measured CI | error | inside |",
           "|---|---|---|---|---:|---|---|---|---:|---|---:|---:|---:|---|"]
    for r in rows:
        lo, hi = r.get("interval_s") or (None, None)
        iv = f"[{lo * 1e3:.2f}, {hi * 1e3:.2f}]" if lo is not None else "-"
        pr = f"{r['predicted_s'] * 1e3:.2f}" if r["predicted_s"] else "refused"
        ms = f"{r['measured_s'] * 1e3:.2f}" if r["measured_s"] else (
            f"failed: {str(r['failed']).splitlines()[0][:60]}" if r.get("failed")
            else "not measured")
        er = f"{r['error_pct']:+.1f}%" if r["error_pct"] is not None else "-"
        ins = "-" if r["inside"] is None else ("yes" if r["inside"] else "no")
        ci = f"+-{r['measured_ci_rel'] * 100:.1f}%" if r.get("measured_ci_rel") else "-"
        out.append(f"| {r['model']} | {r['side']} | {r['framework']}/{r['mode']} | "
                   f"{r['precision']} | {r['batch_size']} | {r['category']} | {r['method']} | "
                   f"{r['path'] or '-'} | {pr} | {iv} | {ms} | {ci} | {er} | {ins} |")
    return out


def summary(rows: list[dict[str, Any]]) -> list[str]:
    """MdAPE, the largest |error| and interval coverage per (category, method), development
    and test models apart and together."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        if r["error_pct"] is not None:
            groups.setdefault((r["category"], r.get("group", r["method"])), []).append(r)
            d = re.fullmatch(r"replay, one trace from (?:below|above)(.*)", r.get("group", ""))
            if d:
                groups.setdefault((r["category"], "replay, one trace (both directions)"
                                   + d.group(1)), []).append(r)
    out = ["| category | method | registered for the category | side | predictions | MdAPE | "
           "max |error| | inside 90% | goal |", "|---|---|---|---|---:|---:|---:|---:|---:|"]
    for (cat, meth), rs in groups.items():
        prim = "yes" if all(r.get("primary") for r in rs) else "baseline"
        goal = GOALS.get(cat)
        for s in ("dev", "test", "all"):
            sub = [r for r in rs if s in ("all", r["side"])]
            if not sub or (s == "all" and len({r["side"] for r in rs}) < 2):
                continue
            e = [abs(r["error_pct"]) for r in sub]
            iv = [r["inside"] for r in sub if r["inside"] is not None]
            md = statistics.median(e)
            met = "-" if goal is None or prim != "yes" else (
                f"<= {goal:g}%: {'met' if md <= goal else 'not met'}")
            out.append(f"| {cat} | {meth} | {prim} | {s} | {len(sub)} | {md:.1f}% | "
                       f"{max(e):.1f}% | " + (f"{sum(iv)}/{len(iv)}" if iv else "-")
                       + f" | {met} |")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("registration", choices=sorted(PLANS))
    ap.add_argument("-o", "--out", default=None,
                    help="predictions file (default the plan's out, else "
                         "benchmarks/results/h200/NAME.json)")
    ap.add_argument("--judge", metavar="DB", help="judge the registered predictions on DB")
    ap.add_argument("--md", default=None, help="with --judge: also write the tables here")
    ap.add_argument("--json", default=None, help="with --judge: also write the rows here")
    a = ap.parse_args(argv)
    plan = PLANS[a.registration]
    out = Path(a.out) if a.out else ROOT / plan.get(
        "out", f"benchmarks/results/h200/{a.registration}.json")
    if not a.judge:
        register(a.registration, out)
        return 0
    reg = json.loads(out.read_text())
    rows = judge(reg, a.judge)
    try:
        rows += own_trace_rows(reg, a.judge)
    except Exception as e:  # noqa: BLE001 - the own-trace rows are an extra, said when absent
        print(f"(own-trace replay rows left out: {e})", file=sys.stderr)
    n_meas = len({tuple(r[k] for k in KEY) for r in rows if r["measured_s"]})
    signs = graph_signs(rows, plan.get("anchors"))
    psigns = precision_signs(rows, plan.get("sign_anchors"))
    lines = [f"{reg['registration']}: predictions made at {reg['made_at_commit'][:10]} "
             f"({reg['made_at_utc']}, dlperf {reg['dlperf_version']}), judged on {a.judge}: "
             f"{n_meas} of {len(reg['points'])} points measured", "", *table(rows), "",
             *summary(rows), *(["", *signs] if signs else []),
             *(["", *psigns] if psigns else [])]
    print("\n".join(lines))
    if a.md:
        Path(a.md).write_text("\n".join(lines) + "\n")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
