"""The plain JAX reference loop (benchmarks/plain_jax_loop.py) runs and reports sane numbers.

It is the yardstick for dlperf's JAX harness overhead, so its arithmetic is tested like
dlperf's own. It is run as a subprocess on the CPU, as it will be run on the GPU machine: the runs of
test_cpu_run_writes_consistent_json and the refused model in one process
(:func:`script_runs.main_runs_in_one_process`: one JAX and Flax start-up for all).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
from pathlib import Path

import pytest

from script_runs import main_runs_in_one_process

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("jax", "flax", "optax")),
    reason="needs jax, flax and optax")

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "plain_jax_loop.py"

TINY_PARAMS = {"resnet50_tiny": 34_002, "lstm_tiny": 666_896}


#: (model, batch, precision, seq_len) of test_cpu_run_writes_consistent_json: an image model
#: at fp32, a token model (tokens per second) at bf16 (each run compiles its model)
CONSISTENT = [("resnet50_tiny", 4, "fp32", 0), ("lstm_tiny", 2, "bf16", 16)]
ITERS, WARMUP = 3, 1


@pytest.fixture(scope="module")
def consistent_runs(tmp_path_factory) -> dict[tuple, tuple[subprocess.CompletedProcess, Path]]:
    """The runs of :data:`CONSISTENT` in one process: case -> (its completed run, its
    ``--json`` file); and ``"unknown"`` -> (the refused model's run, None), first."""
    d = tmp_path_factory.mktemp("plain_jax")
    runs = {"unknown": ["--model", "nope", "--batch-size", "2", "--device", "cpu"]}
    runs.update({str(i): ["--model", m, "--batch-size", str(b), "--device", "cpu", "--precision",
                          p, "--warmup", str(WARMUP), "--iters", str(ITERS),
                          "--json", str(d / f"{i}.json")]
                 for i, (m, b, p, _) in enumerate(CONSISTENT)})
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "OMP_NUM_THREADS": "1"}
    done = main_runs_in_one_process(SCRIPT, runs, env, timeout_s=300)
    return {"unknown": (done["unknown"], None),
            **{case: (done[str(i)], d / f"{i}.json") for i, case in enumerate(CONSISTENT)}}


@pytest.mark.parametrize("model, batch, precision, seq_len", CONSISTENT)
def test_cpu_run_writes_consistent_json(consistent_runs, model, batch, precision, seq_len):
    proc, out = consistent_runs[(model, batch, precision, seq_len)]
    iters, warmup = ITERS, WARMUP
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(out.read_text())

    for key in ("model", "batch_size", "precision", "device", "iters", "warmup", "mean_step_s",
                "samples_per_s", "tokens_per_s", "params", "jax_version", "device_name"):
        assert key in r, key
    assert (r["model"], r["batch_size"], r["precision"], r["device"], r["iters"],
            r["warmup"]) == (model, batch, precision, "cpu", iters, warmup)
    assert r["mean_step_s"] > 0
    assert math.isclose(r["samples_per_s"] * r["mean_step_s"], batch, rel_tol=1e-9)
    assert math.isclose(r["tokens_per_s"] * r["mean_step_s"], batch * seq_len, rel_tol=1e-9,
                        abs_tol=1e-12)
    assert math.isfinite(r["final_loss"])
    # Parameter count recorded and printed.
    assert r["params"] == TINY_PARAMS[model]
    assert f"params={r['params']:,}" in proc.stdout


def test_script_does_not_import_dlperf():
    src = SCRIPT.read_text()
    assert "import dlperf" not in src and "from dlperf" not in src


def test_unknown_model_is_rejected(consistent_runs):
    proc, _ = consistent_runs["unknown"]
    assert proc.returncode != 0
    assert "unknown model" in proc.stderr
