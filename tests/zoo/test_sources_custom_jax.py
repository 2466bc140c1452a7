"""``file:`` models for JAX (dlperf.zoo.sources.custom.jax_impl): the Flax contract, its
errors, a spec counted without starting XLA, and `dlperf run --model file:examples/jax_mlp.py`
on the CPU with breakdown and report, on one device and sharded over two."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("flax")

import dlperf.zoo as zoo  # noqa: E402
from dlperf.errors import ConfigError  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "jax_mlp.py"
FAST = ["--min-iters", "4", "--min-time", "0", "--warmup-window", "2", "--max-warmup-iters",
        "4", "--no-ceilings", "--threads", "1", "--device", "cpu"]

BAD = '''
import flax.linen as nn
import jax
import jax.numpy as jnp

class Dense(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool):
        return nn.Dense(3)(x)

class NoTrain(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(3)(x)

def make(b, key):
    return jax.random.normal(key, (b, 4)), jnp.zeros((b,), jnp.int32)

def ce(out, y):
    return -jax.nn.log_softmax(out)[jnp.arange(out.shape[0]), y].mean()

def one_array():
    return Dense(), (lambda b, k: jax.random.normal(k, (b, 4))), ce

def vector_loss():
    return Dense(), make, lambda out, y: out.sum(1)

def no_train():
    return NoTrain(), make, ce

class NoParams(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool):
        return nn.relu(x)

def torch_batch():
    return Dense(), (lambda b, generator, device: make(b, generator)), ce

def no_params():
    return NoParams(), make, lambda out, y: out.mean()
'''


def _env() -> dict[str, str]:
    pp = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": str(ROOT / "src") + (os.pathsep + pp if pp else "")}


def test_jax_file_spec_is_counted_without_starting_xla():
    """In a fresh process: the spec of the example (params from the Flax model's shapes) is made
    and XLA's backend has not started (the worker sets platform, threads and jax.distributed
    after reading the spec)."""
    code = (f"import json, dlperf.zoo as z; s = z.get_spec('file:{EXAMPLE}:mlp?width=16'); "
            "from jax._src import xla_bridge as xb; "
            "print(json.dumps([s.params, list(s.input_shape), s.num_classes, s.input_kind, "
            "s.loss, s.forward_flops_per_sample, s.hyper['framework'], s.hyper['x_dtype'], "
            "xb.backends_are_initialized()]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=_env(), timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    # Dense(32 -> 16) + Dense(16 -> 10), with biases
    assert got == [32 * 16 + 16 + 16 * 10 + 10, [32], 10, "custom", "custom", None, "jax",
                   "float32", False]


@pytest.mark.parametrize("fn, words", [
    ("one_array", ["must return (x, y)", "array (2, 4) float32"]),
    ("vector_loss", ["must return a float scalar", "array (2,) float32"]),
    ("no_train", ["__call__ must take (x, train)"]),
    ("torch_batch", ["make_batch returned is <lambda>(b, generator, device)",
                     "dlperf calls make_batch(batch_size, key)"]),
    ("no_params", ["(a NoParams) has no trainable parameters"]),
])
def test_jax_file_errors(tmp_path, fn, words):
    (tmp_path / "bad.py").write_text(BAD)
    with pytest.raises(ConfigError) as e:
        zoo.get_spec(f"file:{tmp_path / 'bad.py'}:{fn}")
    for w in words:
        assert w in str(e.value)


def _run(tmp_path: Path, *args: str) -> tuple[dict, dict]:
    db = tmp_path / "r.db"
    out = subprocess.run([sys.executable, "-m", "dlperf", "run", "--framework", "jax",
                          "--model", "file:examples/jax_mlp.py:mlp?width=32", "--db", str(db),
                          *FAST, *args], capture_output=True, text=True, cwd=ROOT, env=_env(),
                         timeout=280, check=False)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    con = sqlite3.connect(db)
    rows = con.execute("SELECT status, world_size, result_json FROM results").fetchall()
    con.close()
    assert len(rows) == 1
    return {"status": rows[0][0], "world_size": rows[0][1]}, json.loads(rows[0][2])


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_dlperf_run_jax_file_model_with_breakdown_and_report(tmp_path):
    row, rec = _run(tmp_path, "--batch-size", "8", "--breakdown", "--report",
                    str(tmp_path / "report"))
    assert row["status"] == "ok"
    assert rec["config"]["workload"]["model"] == f"file:{EXAMPLE}:mlp?width=32"
    assert rec["flops"]["framework_flops_per_step"] > 0  # XLA's count: the spec has none
    assert rec["flops"]["analytic_train_flops_per_sample"] is None
    assert rec["breakdown"]["available"], rec["breakdown"]
    assert (tmp_path / "report" / "report.html").is_file()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_jax_file_model_sharded_over_two_host_devices(tmp_path):
    """--nproc 2 (one process, sharded jit): the user's make_batch runs under jit with the
    batch sharded over the mesh."""
    row, rec = _run(tmp_path, "--batch-size", "8", "--nproc", "2", "--comm-profile-iters", "0")
    assert row["status"] == "ok" and row["world_size"] == 2
    assert rec["dist"]["backend"] == "jax-sharded-jit"
