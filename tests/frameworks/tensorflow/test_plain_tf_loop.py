"""The plain TensorFlow reference loop (benchmarks/plain_tf_loop.py) runs and reports sane numbers.

It is the yardstick for dlperf's TensorFlow harness overhead (benchmarks/overhead.py
--framework tensorflow), so it must train the same models as dlperf's TensorFlow adapter
(trainable parameter counts equal to dlperf's specs, which dlperf's Keras models match exactly:
tests/frameworks/tensorflow/test_tensorflow.py), and its arithmetic is tested like dlperf's own. It is run as a
subprocess on the CPU, as it is run by the comparison: the runs of one thread count
(``--threads 1``) share one process (:func:`script_runs.main_runs_in_one_process`: one
TensorFlow start-up instead of six); the refused model and the overhead driver's runs are
processes of their own.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from dlperf.zoo import get_spec
from script_runs import main_runs_in_one_process

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("tensorflow", "keras")),
    reason="needs tensorflow and keras")

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "plain_tf_loop.py"

#: The plain loop's tiny models, as dlperf counts them (also pinned here: a change to either
#: side shows).
TINY_PARAMS = {"resnet50_tiny": 511_514, "lstm_tiny": 666_896, "gpt2_small_tiny": 26_368}


def run_script(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=300, env=env)


#: (model, seq_len) of test_cpu_run_writes_consistent_json; batch 4, 20 iterations, warm-up 2
CONSISTENT = [("resnet50_tiny", 0), ("lstm_tiny", 16), ("gpt2_small_tiny", 32)]
LSTM_IMPLS = ("keras", "keras_rnn")


@pytest.fixture(scope="module")
def threads1_runs(tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, Path]]:
    """The ``--threads 1`` CPU runs of this file's tests, in one process: name -> (its
    completed run, its ``--json`` file)."""
    d = tmp_path_factory.mktemp("plain_tf")
    common = ["--device", "cpu", "--threads", "1"]
    runs = {f"consistent-{m}": ["--model", m, "--batch-size", "4", *common, "--mode", "graph",
                                "--warmup", "2", "--iters", "20"] for m, _ in CONSISTENT}
    runs["xla"] = ["--model", "lstm_tiny", "--batch-size", "2", *common, "--mode", "xla",
                   "--warmup", "2", "--iters", "3"]
    runs.update({f"lstm-{impl}": ["--model", "lstm_tiny", "--batch-size", "2", *common,
                                  "--lstm-impl", impl, "--warmup", "1", "--iters", "2"]
                 for impl in LSTM_IMPLS})
    for name, args in runs.items():
        args += ["--json", str(d / f"{name}.json")]
    done = main_runs_in_one_process(SCRIPT, runs, {**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    return {n: (done[n], d / f"{n}.json") for n in runs}


@pytest.mark.parametrize("model, seq_len", CONSISTENT)
def test_cpu_run_writes_consistent_json(threads1_runs, model, seq_len):
    proc, out = threads1_runs[f"consistent-{model}"]
    batch, iters, warmup = 4, 20, 2
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(out.read_text())

    for key in ("model", "batch_size", "precision", "device", "mode", "iters", "warmup",
                "mean_step_s", "samples_per_s", "tokens_per_s", "params", "flags",
                "tensorflow_version", "keras_version", "device_name"):
        assert key in r, key
    assert (r["model"], r["batch_size"], r["precision"], r["device"], r["mode"], r["iters"],
            r["warmup"]) == (model, batch, "fp32", "cpu", "graph", iters, warmup)
    assert r["mean_step_s"] > 0
    assert math.isclose(r["mean_step_s"] * iters, r["total_s"], rel_tol=1e-9)
    assert math.isclose(r["samples_per_s"] * r["mean_step_s"], batch, rel_tol=1e-9)
    assert math.isclose(r["tokens_per_s"] * r["mean_step_s"], batch * seq_len, rel_tol=1e-9,
                        abs_tol=1e-12)
    # The same model as dlperf's TensorFlow one: its parameter count, printed and recorded.
    assert r["params"] == get_spec(model).params == TINY_PARAMS[model]
    assert f"params={r['params']:,}" in proc.stdout
    # Traced once, never again; the thread pools as dlperf's --threads 1 sets them; fp32 is
    # TF32 off.
    assert r["traces"] == 1
    f = r["flags"]
    assert (f["intra_op_threads"], f["inter_op_threads"], f["tf32"]) == (1, 1, False)
    assert f["keras_policy"] == "float32" and f["jit_compile"] is False
    # It trains: the first loss is the uniform guess ln(classes), and after 21 more steps on
    # 4 cycled batches the loss is lower.
    classes = get_spec(model).num_classes
    assert abs(r["first_loss"] - math.log(classes)) < 0.35 * math.log(classes)
    assert math.isfinite(r["final_loss"]) and r["final_loss"] < r["first_loss"]


def test_xla_mode_compiles_once(threads1_runs):
    proc, out = threads1_runs["xla"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["mode"] == "xla" and r["flags"]["jit_compile"] is True and r["traces"] == 1
    assert r["params"] == TINY_PARAMS["lstm_tiny"] and math.isfinite(r["final_loss"])


@pytest.mark.parametrize("impl", LSTM_IMPLS)
def test_keras_lstm_variants_are_the_same_model(threads1_runs, impl):
    # --lstm-impl keras / keras_rnn (Keras's LSTM / RNN layers with a two-bias cell): the same
    # parameters as the default fused loop and dlperf's model.
    proc, out = threads1_runs[f"lstm-{impl}"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["params"] == TINY_PARAMS["lstm_tiny"] and r["flags"]["lstm_impl"] == impl
    assert abs(r["first_loss"] - math.log(10000)) < 0.5


def test_script_does_not_import_dlperf():
    src = SCRIPT.read_text()
    assert "import dlperf" not in src and "from dlperf" not in src


def test_unknown_model_is_rejected():
    proc = run_script("--model", "nope", "--batch-size", "2", "--device", "cpu")
    assert proc.returncode != 0
    assert "unknown model" in proc.stderr


@pytest.mark.slow
def test_overhead_driver_compares_dlperf_and_the_plain_loop(tmp_path):
    """benchmarks/overhead.py --framework tensorflow: both sides in the same mode and thread
    pools, rounds alternating their order, the same parameter count on both sides."""
    out = tmp_path / "o.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT.parent / "overhead.py"), "--framework", "tensorflow",
         "--device", "cpu", "--mode", "graph", "--threads", "1", "--alternate",
         "--points", "lstm_tiny:2", "--rounds", "2", "--min-time", "0.2", "--min-iters", "3",
         "--plain-warmup", "2", "--dlperf-args", "--warmup-window 2 --max-warmup-iters 2",
         "--db", str(tmp_path / "o.db"), "--out", str(out)],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(out.read_text())
    assert (r["framework"], r["mode"], r["threads"], r["alternate"]) == ("tensorflow", "graph",
                                                                       1, True)
    (row,) = r["overhead"]
    assert row["round_order"] == ["dlperf,plain", "plain,dlperf"]
    assert row["plain_params"] == row["dlperf_params"] == TINY_PARAMS["lstm_tiny"]
    f = row["plain_flags"]
    assert (f["mode"], f["intra_op_threads"], f["inter_op_threads"]) == ("graph", 1, 1)
    assert len(row["paired_ratios"]) == 2 and all(x > 0 for x in row["paired_ratios"])
    assert row["ratio"] == pytest.approx(statistics.median(row["dlperf_samples_per_s"])
                                         / statistics.median(row["plain_samples_per_s"]))
    assert row["paired_ratios"][1] == pytest.approx(row["dlperf_samples_per_s"][1]
                                                    / row["plain_samples_per_s"][1])
    assert len(row["load_average"]) == 2 and len(row["load_average"][0]["before"]) == 3
