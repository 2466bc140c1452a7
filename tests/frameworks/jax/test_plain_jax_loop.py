"""The plain JAX reference loop (benchmarks/plain_jax_loop.py) runs and reports sane numbers.

It is the yardstick for dlperf's JAX harness overhead, so its arithmetic is tested like
dlperf's own. It is run as a subprocess on the CPU, as it will be run on the GPU machine.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("jax", "flax", "optax")),
    reason="needs jax, flax and optax")

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "plain_jax_loop.py"

TINY_PARAMS = {"resnet50_tiny": 34_002, "lstm_tiny": 666_896}


def run_script(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=120, env=env)


@pytest.mark.parametrize("model, batch, precision, seq_len", [
    ("resnet50_tiny", 4, "fp32", 0),
    ("lstm_tiny", 4, "fp32", 16),
    ("lstm_tiny", 2, "bf16", 16),
])
def test_cpu_run_writes_consistent_json(tmp_path, model, batch, precision, seq_len):
    out = tmp_path / "r.json"
    iters, warmup = 3, 1
    proc = run_script("--model", model, "--batch-size", str(batch), "--device", "cpu",
                      "--precision", precision, "--warmup", str(warmup),
                      "--iters", str(iters), "--json", str(out))
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


def test_unknown_model_is_rejected():
    proc = run_script("--model", "nope", "--batch-size", "2", "--device", "cpu")
    assert proc.returncode != 0
    assert "unknown model" in proc.stderr
