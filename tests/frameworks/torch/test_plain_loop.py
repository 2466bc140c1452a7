"""The plain PyTorch reference loop (benchmarks/plain_torch_loop.py) runs and reports sane numbers.

It is the yardstick for dlperf's harness overhead, so its arithmetic is tested like dlperf's
own (docs/measurement.md rule 9). It is run as a subprocess, as it will be on the GPU machine:
the three runs whose output the tests read in one process
(:func:`script_runs.main_runs_in_one_process`: one PyTorch start-up instead of three; each run
sets TF32 and cuDNN's flags itself), the refused model in a process of its own.
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

from script_runs import main_runs_in_one_process

# Checked without importing torch here: the script runs in its own process.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                reason="needs torch")

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "plain_torch_loop.py"


#: One intra-op thread: these runs check arithmetic, not speed, and spinning OpenMP threads on
#: a busy small CI machine can make a millisecond step take hundreds of milliseconds.
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
#: (model, batch, seq_len) of test_cpu_run_writes_consistent_json
CONSISTENT = [("fcn5_tiny", 8, 0), ("lstm_tiny", 4, 16)]
ITERS, WARMUP = 5, 2
SYNC_ITERS = 3


def run_script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=120, env=ENV)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, Path]]:
    """The runs of this file's tests that write JSON, in one process: name (a model of
    :data:`CONSISTENT`, or ``sync``) -> (its completed run, its ``--json`` file)."""
    d = tmp_path_factory.mktemp("plain_torch")
    lines = {m: ["--model", m, "--batch-size", str(b), "--device", "cpu", "--precision", "fp32",
                 "--warmup", str(WARMUP), "--iters", str(ITERS)] for m, b, _ in CONSISTENT}
    lines["sync"] = ["--model", "fcn5_tiny", "--batch-size", "4", "--device", "cpu",
                     "--precision", "tf32", "--warmup", "1", "--iters", str(SYNC_ITERS),
                     "--repeats", "2", "--sync-every-step"]
    for name, args in lines.items():
        args += ["--json", str(d / f"{name}.json")]
    done = main_runs_in_one_process(SCRIPT, lines, ENV, timeout_s=300)
    return {n: (done[n], d / f"{n}.json") for n in lines}


@pytest.mark.parametrize("model, batch, seq_len", CONSISTENT)
def test_cpu_run_writes_consistent_json(runs, model, batch, seq_len):
    proc, out = runs[model]
    iters, warmup = ITERS, WARMUP
    assert proc.returncode == 0, proc.stderr
    assert model in proc.stdout and "samples/s" in proc.stdout and "params=" in proc.stdout

    r = json.loads(out.read_text())
    for key in ("model", "batch_size", "precision", "device", "iters", "warmup",
                "sync_every_step", "mean_step_s", "samples_per_s", "tokens_per_s", "repeats",
                "torch_version", "device_name"):
        assert key in r, key
    assert (r["model"], r["batch_size"], r["precision"], r["device"]) == (model, batch, "fp32",
                                                                         "cpu")
    assert (r["iters"], r["warmup"], r["sync_every_step"]) == (iters, warmup, False)
    assert r["mean_step_s"] > 0 and math.isfinite(r["mean_step_s"])

    # Throughput arithmetic: samples = iters x batch over the block time, exactly.
    assert len(r["repeats"]) == 1
    block = r["repeats"][0]
    assert block["samples_per_s"] == pytest.approx(iters * batch / block["total_s"], rel=1e-9)
    assert block["mean_step_s"] == pytest.approx(block["total_s"] / iters, rel=1e-9)
    assert r["samples_per_s"] * r["mean_step_s"] == pytest.approx(batch, rel=1e-9)
    assert r["samples_per_s"] == pytest.approx(block["samples_per_s"], rel=1e-9)
    # Tokens/s only for the language model: samples/s x sequence length.
    assert r["tokens_per_s"] == pytest.approx(r["samples_per_s"] * seq_len, rel=1e-9)
    assert r["flags"]["cudnn_benchmark"] is True
    assert r["flags"]["allow_tf32_matmul"] is False and r["flags"]["allow_tf32_cudnn"] is False


def test_sync_every_step_and_repeats(runs):
    proc, out = runs["sync"]
    iters = SYNC_ITERS
    assert proc.returncode == 0, proc.stderr
    r = json.loads(out.read_text())
    assert r["sync_every_step"] is True and len(r["repeats"]) == 2
    assert r["flags"]["allow_tf32_matmul"] is True
    for block in r["repeats"]:
        # Per-step times are consecutive timestamps: they add up to the block time (less the
        # final, no-op synchronize and clock read).
        assert len(block["step_times_s"]) == iters
        assert sum(block["step_times_s"]) <= block["total_s"]
        assert sum(block["step_times_s"]) == pytest.approx(block["total_s"], rel=1e-2, abs=1e-3)
        assert block["median_step_s"] > 0
    assert r["best_mean_step_s"] <= r["mean_step_s"]
    assert r["samples_per_s"] * r["mean_step_s"] == pytest.approx(4, rel=1e-9)


def test_unknown_model_fails_clearly():
    proc = run_script("--model", "no_such_net", "--batch-size", "2", "--device", "cpu")
    assert proc.returncode != 0
    assert "unknown model 'no_such_net'" in proc.stderr
    assert "fcn5" in proc.stderr  # the message lists the valid names
