"""``file:`` and entry-point models for TensorFlow (dlperf.zoo.sources.custom.tensorflow_impl):
the Keras contract, its errors, a spec counted without starting TensorFlow's runtime (and
without TensorFlow in a `dlperf run` process, whose spec is made in a child), and `dlperf run`
of examples/keras_mlp.py with breakdown and report, and of an entry-point Keras model, on the
CPU."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

import dlperf.zoo as zoo  # noqa: E402
from dlperf.errors import ConfigError  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "keras_mlp.py"
FAST = ["--min-iters", "3", "--min-time", "0", "--warmup-window", "2", "--max-warmup-iters",
        "3", "--no-ceilings", "--threads", "1", "--device", "cpu", "--batch-size", "8"]

BAD = '''
import keras
import numpy as np
import tensorflow as tf

def dense():
    return keras.Sequential([keras.layers.Dense(3)])

def make(b):
    return tf.random.normal((b, 4)), tf.random.uniform((b,), 0, 3, tf.int64)

ce = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

def two_parts():
    return dense(), make

def one_array():
    return dense(), (lambda b: np.zeros((b, 4), "float32")), ce

def wrong_rows():
    return dense(), (lambda b: (np.zeros((b + 1, 4), "float32"), np.zeros((b,), "int64"))), ce

def int_loss():
    return dense(), make, lambda y, out: tf.cast(tf.reduce_sum(out), tf.int32)

def matrix_loss():
    return dense(), make, lambda y, out: tf.ones((3, 3))

def torch_order():
    return dense(), make, lambda out, y: keras.losses.sparse_categorical_crossentropy(
        y, out, from_logits=True)

def not_a_model():
    return "mlp", make, ce

def torch_batch():
    return dense(), (lambda b, generator, device: make(b)), ce

def one_arg_loss():
    return dense(), make, lambda y: tf.reduce_sum(y)

def no_weights():
    return keras.Sequential([keras.layers.ReLU()]), make, ce
'''

PLUGIN = '''
import keras
import tensorflow as tf

def conv(filters: int = 4):
    """A small Keras CNN on 8x8x3 images (an Input: built), Dropout, per-sample loss."""
    model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(filters, 3),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dropout(0.1),
                              keras.layers.Dense(5)])
    def make_batch(batch_size):
        return (keras.random.normal((batch_size, 8, 8, 3)),
                keras.random.randint((batch_size,), 0, 5))
    def loss(y, out):
        return keras.losses.sparse_categorical_crossentropy(y, out, from_logits=True)
    return model, make_batch, loss
'''


def _env(*extra: Path) -> dict[str, str]:
    pp = [str(ROOT / "src"), *map(str, extra), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in pp if p)}


def _python(code: str, *extra: Path) -> list:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=_env(*extra), cwd=ROOT, timeout=240, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


#: One fresh process (one TensorFlow start-up instead of three) inspects, in this order: the
#: example's spec in a process that has not started TensorFlow's runtime; PLUGIN's spec the same
#: way (staged); then, with the runtime started (as in a notebook that ran TensorFlow before),
#: PLUGIN's spec again from a copy of the file (another path: a spec and a module are cached
#: per file), which is inspected eagerly.
_INSPECT = """
import json, sys, dlperf.zoo as z
from dlperf.zoo.sources.custom.tensorflow_impl import runtime_started
example, plug, plug_eager = sys.argv[1:4]
s = z.get_spec(f'file:{example}:mlp?width=16')
fresh = [s.params, list(s.input_shape), s.num_classes, s.input_kind, s.loss,
         s.forward_flops_per_sample, s.hyper['framework'], s.hyper['x_dtype'],
         s.flops_source.split(' (')[0], runtime_started(), 'torch' in sys.modules,
         'flax' in sys.modules]
c = z.get_spec(f'file:{plug}:conv')
staged = [c.params, c.forward_flops_per_sample, runtime_started()]
import tensorflow as tf
first = runtime_started(); tf.constant(1.0) + 1
e = z.get_spec(f'file:{plug_eager}:conv')
eager = [first, runtime_started(), e.params, e.forward_flops_per_sample]
print(json.dumps({"fresh": fresh, "staged": staged, "eager": eager}))
"""


@pytest.fixture(scope="module")
def inspected(tmp_path_factory) -> dict:
    """What :data:`_INSPECT` reports (its keys ``fresh``, ``staged``, ``eager``)."""
    d = tmp_path_factory.mktemp("inspect")
    (d / "plug.py").write_text(PLUGIN)
    (d / "plug_eager.py").write_text(PLUGIN)
    out = subprocess.run([sys.executable, "-c", _INSPECT, str(EXAMPLE), str(d / "plug.py"),
                          str(d / "plug_eager.py")], capture_output=True, text=True,
                         env=_env(), cwd=ROOT, timeout=240, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_keras_file_spec_is_counted_without_starting_tensorflow(inspected):
    """In a fresh process: the spec of the example (trainable variables; forward FLOPs from
    TensorFlow's profiler) is made and TensorFlow's runtime has not started (the worker sets
    its threads and devices after reading the spec); neither torch nor Flax was imported."""
    # Dense(32 -> 16) + Dense(16 -> 10) with biases; FLOPs: 2 per multiply-add + the bias adds
    assert inspected["fresh"] == [32 * 16 + 16 + 16 * 10 + 10, [32], 10, "custom", "custom",
                                  2 * (32 * 16 + 16 * 10) + 16 + 10, "tensorflow", "float32",
                                  "tf.compat.v1.profiler float_operation()", False, False,
                                  False]


def test_keras_spec_within_bounded_leaves_tensorflow_out_of_the_process():
    """Under `dlperf run` the spec comes from a child process: the calling process (the CLI)
    imports neither TensorFlow nor Keras, and gets the same counts."""
    code = ("import json, sys, dlperf.zoo as z; "
            "from dlperf.zoo.sources.custom import isolated\n"
            "with isolated.bounded(200):\n"
            f"    s = z.get_spec('file:{EXAMPLE}:mlp?width=16')\n"
            "print(json.dumps([s.params, s.hyper['framework'], 'tensorflow' in sys.modules, "
            "'keras' in sys.modules]))")
    assert _python(code) == [698, "tensorflow", False, False]


def test_eager_inspection_where_tensorflow_already_runs(inspected):
    """A process that ran TensorFlow before (a notebook): the parts run eagerly and count the
    same as where its runtime has not started; a Dropout (a seed variable made with the layer)
    and keras.random work in both."""
    eager, staged = inspected["eager"], inspected["staged"]
    assert staged[2] is False  # the staged inspection left the runtime unstarted
    assert eager[:2] == [False, True]
    assert eager[2:] == staged[:2] and staged[0] == 3 * 3 * 3 * 4 + 4 + 4 * 5 + 5
    assert staged[1] > 2 * 6 * 6 * 27 * 4  # the convolution's multiply-adds at least


@pytest.mark.parametrize("fn, words", [
    ("two_parts", ["must return (model, make_batch, loss)", "2-tuple of (Sequential, function)"]),
    ("one_array", ["make_batch(2) must return (x, y)", "ndarray (2, 4) float32"]),
    ("wrong_rows", ["two tensors or arrays of 2 rows", "ndarray (3, 4) float32"]),
    ("int_loss", ["must return a float scalar or one value per sample", "int32"]),
    ("matrix_loss", ["must return a float scalar or one value per sample",
                     "tensor (3, 3) float32"]),
    ("torch_order", ["loss(y_true, y_pred) (Keras's order)"]),
    ("not_a_model", ["a builtins.str", "keras.Model (TensorFlow)"]),
    ("torch_batch", ["make_batch returned is <lambda>(b, generator, device)",
                     "dlperf calls make_batch(batch_size)", "docs/zoo.md"]),
    ("one_arg_loss", ["dlperf calls loss(y_true, y_pred)"]),
    ("no_weights", ["(a Sequential) has no trainable parameters"]),
])
def test_keras_file_errors(tmp_path, fn, words):
    (tmp_path / "bad.py").write_text(BAD)
    with pytest.raises(ConfigError) as e:
        zoo.get_spec(f"file:{tmp_path / 'bad.py'}:{fn}")
    for w in words:
        assert w in str(e.value)


def _run(tmp_path: Path, model: str, *args: str, extra: tuple[Path, ...] = ()
         ) -> tuple[dict, list[float]]:
    """`dlperf run` of ``model``: its one record and its losses (all phases)."""
    db = tmp_path / "r.db"
    out = subprocess.run([sys.executable, "-m", "dlperf", "run", "--framework", "tensorflow",
                          "--model", model, "--db", str(db), *FAST, *args],
                         capture_output=True, text=True, cwd=ROOT, env=_env(*extra),
                         timeout=280, check=False)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    con = sqlite3.connect(db)
    rows = con.execute("SELECT status, result_json FROM results").fetchall()
    losses = [v for (v,) in con.execute("SELECT loss FROM samples WHERE loss IS NOT NULL")]
    con.close()
    assert len(rows) == 1 and rows[0][0] == "ok", rows
    return json.loads(rows[0][1]), losses


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_dlperf_run_keras_file_model_with_breakdown_and_report(tmp_path):
    rec, losses = _run(tmp_path, "file:examples/keras_mlp.py:mlp?width=32", "--breakdown",
                       "--report", str(tmp_path / "report"))
    assert rec["config"]["workload"]["model"] == f"file:{EXAMPLE}:mlp?width=32"
    assert rec["spec"]["params"] == 32 * 32 + 32 + 32 * 10 + 10
    flops = rec["flops"]
    assert flops["analytic_train_flops_per_sample"] == 3 * (2 * (32 * 32 + 32 * 10) + 32 + 10)
    assert flops["analytic_source"].startswith("tf.compat.v1.profiler")
    assert flops["framework_flops_per_step"] > 0  # the adapter's count of the whole step
    assert rec["breakdown"]["available"], rec["breakdown"]
    assert (tmp_path / "report" / "report.html").is_file()
    assert losses and all(0 < v < 10 for v in losses)  # cross-entropy of 10 classes: ~2.3


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_dlperf_run_keras_entry_point_model_in_xla_mode(tmp_path):
    """A package registering a Keras function as a ``dlperf.models`` entry point, laid out as
    pip installs it; run compiled by XLA, its loss finite."""
    site = tmp_path / "site"
    (site / "keras_plugin").mkdir(parents=True)
    (site / "keras_plugin" / "__init__.py").write_text(PLUGIN)
    info = site / "keras_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: keras-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent("""\
        [dlperf.models]
        keras_conv = keras_plugin:conv
        """))
    rec, losses = _run(tmp_path, "keras_conv?filters=8", "--mode", "xla", extra=(site,))
    assert rec["config"]["workload"]["model"] == "keras_conv?filters=8"
    assert rec["spec"]["family"] == "sources.custom"
    assert rec["spec"]["params"] == 3 * 3 * 3 * 8 + 8 + 8 * 5 + 5
    assert rec["flags"]["jit_compile"] is True
    assert rec["framework"] == "tensorflow" and rec["mode"] == "xla"
    assert losses and all(0 < v < 10 for v in losses)  # cross-entropy of 5 classes: ~1.6


def test_recurrent_layers_hook_finds_nested_lstm_and_gru():
    """The hook the adapter uses to turn cuDNN off in xla mode: both directions of a
    Bidirectional LSTM and a GRU, in a Sequential and inside a subclassed model."""
    import keras

    from dlperf.zoo.sources.custom.tensorflow_impl import recurrent_layers

    class Sub(keras.Model):
        def __init__(self):
            super().__init__()
            self.bi = keras.layers.Bidirectional(keras.layers.LSTM(4))
            self.gru = keras.layers.GRU(3)

    seq = keras.Sequential([keras.layers.Embedding(10, 4), keras.layers.Bidirectional(
        keras.layers.LSTM(4, return_sequences=True)), keras.layers.GRU(3)])
    for model in (seq, Sub()):
        assert [type(la).__name__ for la in recurrent_layers(model)] == ["LSTM", "LSTM", "GRU"]


def test_a_keras_model_run_with_another_framework_names_the_right_one():
    """`dlperf run` without --framework tensorflow: the worker's build names the model's
    framework and the flag, instead of a type mismatch."""
    pytest.importorskip("torch")
    from dlperf.zoo.sources.custom import torch_impl

    spec = zoo.get_spec(f"file:{EXAMPLE}:mlp?width=8")
    with pytest.raises(ConfigError, match="is a tensorflow model .* run it with --framework "
                                          "tensorflow"):
        torch_impl.build(spec)


def test_a_keras_file_under_another_framework_is_refused_before_a_worker_starts(tmp_path):
    """A fresh user ran the Keras example without --framework: a worker started, an error row
    was stored and the console line was cut before the advice. Now the config refuses it."""
    from dlperf.config import make_run_config

    ex = Path(__file__).resolve().parents[2] / "examples/keras_mlp.py"
    with pytest.raises(ConfigError, match="is a tensorflow model .* --framework tensorflow"):
        make_run_config(model=f"file:{ex}:mlp", framework="torch", batch_size=8)
