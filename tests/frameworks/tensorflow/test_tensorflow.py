"""The TensorFlow backend: Keras models against the specs and PyTorch, and the adapter end to end.

* every fcn/cnn/rnn model (tiny variants, and the full ones that are cheap to build) has
  ``spec.params`` trainable parameters and the documented output shape in Keras;
* with PyTorch's weights loaded (``dlperf.zoo.convert_keras``), every tiny model computes the
  same forward pass as the PyTorch one in float32 (BN statistics randomised, so the stats
  mapping is tested), BN training mode agrees too, and one SGD-momentum step of the adapter's
  loss and optimizer moves the weights as PyTorch's does;
* ``dlperf.worker.run_config`` with ``framework="tensorflow"`` in every mode on the CPU:
  status, throughput arithmetic, compile time and trace counts, flags, real data.

TensorFlow is imported once for the whole file (it takes seconds); models are tiny.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorflow")

from dlperf.frameworks.tensorflow.adapter import TensorFlowAdapter, import_tf  # noqa: E402
from dlperf.frameworks.tensorflow.input import make_source  # noqa: E402
from dlperf.frameworks.tensorflow.step import TrainStep, make_loss, make_optimizer  # noqa: E402

tf, keras = import_tf()

import dlperf.zoo as zoo  # noqa: E402
from dlperf.config import IterationPolicy, make_run_config  # noqa: E402
from dlperf.worker import run_config  # noqa: E402
from dlperf.zoo.convert_keras import keras_input, nchw_to_nhwc, torch_to_keras  # noqa: E402

FAMILIES = ("fcn", "cnn", "rnn")
TINY = sorted(n for n, s in zoo.SPECS.items() if s.family in FAMILIES and s.is_tiny)
#: Full models that build in about a second each (fcn5, fcn8, vgg16 allocate 0.5 GB and more;
#: resnet56 is resnet56_tiny's layout with more blocks).
FULL_CHEAP = [n for n in ("fcn_mnist", "alexnet_cifar", "alexnet", "resnet50", "googlenet", "lstm",
                          "deepspeech2") if n in zoo.SPECS]
FAST = IterationPolicy(min_iters=6, min_time_s=0.0, warmup_window=2, min_warmup_iters=0,
                       max_warmup_iters=6)
SHORT = IterationPolicy(min_iters=3, min_time_s=0.0, warmup_window=2, min_warmup_iters=0,
                        max_warmup_iters=2)


def _expected_output(spec) -> tuple:
    if spec.input_kind == "tokens":
        return (*spec.input_shape, spec.num_classes)
    if spec.input_kind == "spectrogram":
        from dlperf.zoo.rnn.spec import deepspeech2_geometry

        return (deepspeech2_geometry(spec.hyper)["frames"][-1], spec.num_classes)
    return (spec.num_classes,)


def _n_trainable(model) -> int:
    return sum(int(np.prod(v.shape)) for v in model.trainable_variables)


@pytest.fixture(autouse=True)
def _fresh_keras():
    """Every test starts from the float32 policy and a clean Keras name space."""
    keras.mixed_precision.set_global_policy("float32")
    yield
    keras.backend.clear_session()


# --- models -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", TINY + FULL_CHEAP)
def test_keras_parameter_count_and_output_shape(name):
    spec = zoo.SPECS[name]
    model = zoo.build(spec, "tensorflow")
    assert _n_trainable(model) == spec.params
    assert tuple(model.outputs[0].shape[1:]) == _expected_output(spec)
    if spec.input_kind == "image":  # NHWC input
        c, h, w = spec.input_shape
        assert tuple(model.inputs[0].shape[1:]) == (h, w, c)


def _torch_pair(name: str):
    """(spec, torch model in eval mode with randomised BN, Keras model with its weights)."""
    torch = pytest.importorskip("torch")
    spec = zoo.SPECS[name]
    torch.manual_seed(0)
    tm = zoo.build(spec, "torch").eval()
    g = torch.Generator().manual_seed(3)
    for m in tm.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.copy_(torch.rand(m.running_mean.shape, generator=g) - 0.5)
            m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(m.weight.shape, generator=g) + 0.5)
            m.bias.data.copy_(torch.rand(m.bias.shape, generator=g) - 0.5)
    km = zoo.build(spec, "tensorflow")
    torch_to_keras(spec, tm.state_dict(), km)
    return spec, tm, km


def _torch_batch(spec, batch: int = 4):
    import torch

    g = torch.Generator().manual_seed(1)
    if spec.input_kind == "tokens":
        return torch.randint(0, spec.num_classes, (batch, *spec.input_shape), generator=g)
    return torch.randn((batch, *spec.input_shape), generator=g)


#: float32 forward parity: max |keras - torch| <= PARITY_REL * max |torch| (measured: <= 7e-7
#: relative on an AMD EPYC with oneDNN; summation order differs between the frameworks).
PARITY_REL = 1e-5


@pytest.mark.parametrize("name", TINY)
def test_forward_matches_torch_with_converted_weights(name):
    import torch

    spec, tm, km = _torch_pair(name)
    x = _torch_batch(spec)
    with torch.no_grad():
        want = tm(x).numpy()
    got = np.asarray(km(keras_input(spec, x), training=False))
    assert got.shape == want.shape
    err = float(np.abs(got - want).max())
    assert err <= PARITY_REL * float(np.abs(want).max()), (name, err, float(np.abs(want).max()))


def test_batchnorm_training_mode_and_running_stats_match_torch():
    import torch

    spec, tm, km = _torch_pair("resnet56_tiny")
    tm.train()
    x = _torch_batch(spec, 8)
    rm0 = tm.bn1.running_mean.clone()
    rv0 = tm.bn1.running_var.clone()
    with torch.no_grad():
        want = tm(x).numpy()
    got = np.asarray(km(keras_input(spec, x), training=True))
    assert np.abs(got - want).max() <= PARITY_REL * np.abs(want).max()
    bn = km.get_layer("bn1")
    # momentum 0.1 (torch) == 0.9 (Keras): the same running mean.
    np.testing.assert_allclose(np.asarray(bn.moving_mean), tm.bn1.running_mean.numpy(),
                               rtol=1e-5, atol=1e-6)
    # Keras updates the variance with the biased batch variance, PyTorch with the unbiased one
    # (documented in zoo/cnn/tensorflow_impl.py): n = B*H*W values per channel.
    n = 8 * 32 * 32
    var_unbiased = (tm.bn1.running_var - 0.9 * rv0) / 0.1
    want_keras = 0.9 * rv0 + 0.1 * var_unbiased * (n - 1) / n
    np.testing.assert_allclose(np.asarray(bn.moving_variance), want_keras.numpy(), rtol=1e-5)
    assert not np.allclose(rm0.numpy(), tm.bn1.running_mean.numpy())  # stats did move


def test_sgd_momentum_steps_match_torch():
    """Two steps (momentum matters from the second) of the adapter's step, loss and optimizer."""
    import torch

    spec, tm, km = _torch_pair("fcn5_tiny")
    tm.train()
    o = spec.optimizer
    t_opt = torch.optim.SGD(tm.parameters(), lr=o.lr, momentum=o.momentum)
    flags: dict = {}
    k_opt, l2 = make_optimizer(keras, spec, flags)
    assert l2 == 0.0 and flags["optimizer"]["impl"] == "keras.optimizers.SGD"
    impl = __import__("dlperf.zoo.fcn.tensorflow_impl", fromlist=["build"])
    loss_fn = make_loss(tf, spec, impl)
    tvars = list(km.trainable_variables)
    k_opt.build(tvars)
    train = TrainStep(tf, km, tvars, k_opt, l2, loss_fn, grad_accum=1, replicas=1)  # the adapter's step
    g = torch.Generator().manual_seed(5)
    for _ in range(2):
        x = torch.randn((8, *spec.input_shape), generator=g)
        y = torch.randint(0, spec.num_classes, (8,), generator=g)
        t_opt.zero_grad()
        t_loss = torch.nn.functional.cross_entropy(tm(x), y)
        t_loss.backward()
        t_opt.step()
        k_loss = train.replica(tf.constant(x.numpy()), tf.constant(y.numpy()))
        assert float(k_loss) == pytest.approx(float(t_loss.detach()), rel=1e-5)
    w_torch = tm.layers[0].weight.detach().numpy().T
    np.testing.assert_allclose(np.asarray(km.get_layer("layers.0").kernel), w_torch, atol=1e-6)


def test_fused_lstm_loop_matches_keras_generic_loop(monkeypatch):
    """TorchLSTM's fused, unrolled loop (no cuDNN) computes what Keras's generic while_loop
    computes: outputs and every gradient, on the same weights and tokens."""
    from dlperf.zoo.rnn import tensorflow_impl

    spec = zoo.SPECS["lstm_tiny"]
    keras.utils.set_random_seed(0)
    model = zoo.build(spec, "tensorflow")
    layers = tensorflow_impl.recurrent_layers(model)
    assert layers and all(tensorflow_impl.rnn_loop(layer, 16) == "fused_unrolled" for layer in layers)
    x = tf.random.stateless_uniform((3, 16), (0, 1), 0, spec.num_classes, tf.int64)

    def forward_and_grads():
        with tf.GradientTape() as tape:
            out = model(x, training=False)
            loss = tf.reduce_sum(out * tf.cos(tf.range(spec.num_classes, dtype=tf.float32)))
        grads = tape.gradient(loss, model.trainable_variables)
        return out.numpy(), [tf.convert_to_tensor(g).numpy() for g in grads]

    out_f, grads_f = forward_and_grads()
    monkeypatch.setattr(tensorflow_impl, "FUSED_MAX_STEPS", 0)  # Keras's generic loop from here
    assert tensorflow_impl.rnn_loop(layers[0], 16) == "keras_while_loop"
    out_k, grads_k = forward_and_grads()
    np.testing.assert_allclose(out_f, out_k, rtol=1e-5, atol=1e-5)
    assert len(grads_f) == len(grads_k) == 1 + 2 * 4 + 2  # embedding, 2 x LSTM, decoder
    for gf, gk in zip(grads_f, grads_k):
        np.testing.assert_allclose(gf, gk, rtol=1e-4, atol=1e-5 * float(np.abs(gk).max()))


def test_ctc_loss_matches_torch():
    torch = pytest.importorskip("torch")
    if "deepspeech2_tiny" not in zoo.SPECS:
        pytest.skip("no CTC model in the zoo")
    from dlperf.zoo.rnn import tensorflow_impl, torch_impl

    spec = zoo.SPECS["deepspeech2_tiny"]
    g = torch.Generator().manual_seed(0)
    out = torch.randn((3, 20, spec.num_classes), generator=g)
    y = torch.randint(1, spec.num_classes, (3, 8), generator=g)
    want = float(torch_impl.loss_fn(spec)(out, y))
    got = float(tensorflow_impl.loss_fn(spec)(tf.constant(out.numpy()), tf.constant(y.numpy())))
    assert got == pytest.approx(want, rel=1e-5)


def test_converter_refuses_a_mismatched_state_dict():
    torch = pytest.importorskip("torch")
    spec = zoo.SPECS["fcn5_tiny"]
    sd = zoo.build(spec, "torch").state_dict()
    km = zoo.build(spec, "tensorflow")
    with pytest.raises(ValueError, match="layers.2.weight"):
        torch_to_keras(spec, {k: v for k, v in sd.items() if k != "layers.2.weight"}, km)
    with pytest.raises(ValueError, match="not used"):
        torch_to_keras(spec, {**sd, "extra.weight": torch.zeros(1)}, km)
    with pytest.raises(ValueError, match="shape"):
        torch_to_keras(spec, {**sd, "layers.0.bias": torch.zeros(3)}, km)


# --- the adapter end to end ---------------------------------------------------------------------


def _run(**kw):
    cfg = make_run_config(framework="tensorflow", iterations=kw.pop("iterations", FAST), **kw)
    r = run_config(cfg)
    assert r["status"] == "ok", r["error"]
    return r


#: every mode on fcn5_tiny; the recurrent model under XLA (cuDNN off) and an image model in
#: NHWC. lstm_tiny in graph mode runs through the adapter in
#: test_grad_accumulation_keeps_samples_per_iteration and test_real_text_data_trains_and_loss_falls
#: (the rnn flags below do not depend on the mode on a CPU).
@pytest.mark.parametrize("model,mode", [("fcn5_tiny", "eager"), ("fcn5_tiny", "graph"),
                                        ("fcn5_tiny", "xla"), ("lstm_tiny", "xla"),
                                        ("alexnet_cifar_tiny", "graph")])
def test_adapter_modes_end_to_end(model, mode):
    r = _run(model=model, mode=mode, batch_size=8)
    tp, f, c = r["throughput"], r["flags"], r["compile"]
    assert tp["samples"] == r["n_measured"] * 8
    assert r["n_measured"] == len(r["samples"]["measure"]) == len(r["losses"]["measure"])
    assert all(np.isfinite(r["losses"]["measure"]))
    assert f["mode"] == mode and f["jit_compile"] == (mode == "xla")
    assert c["compile_time_s"] == f["compile_time_s"] and c["n_compiles"] == f["retraces"]
    assert c["recompiles_measured"] == 0
    if mode == "eager":
        assert f["retraces"] == 0 and f["compile_time_s"] == 0.0
    else:
        assert f["retraces"] == 1  # traced once before timing, never again
        assert f["trace_time_s"] > 0 and f["compile_time_s"] >= f["trace_time_s"]
        assert f["first_call_s"] > 0 and f["second_call_s"] > 0
    # Synchronous CPU execution timed by the host clock: no sample is a lagged-read artefact.
    assert f["timer"].startswith("host_clock")
    meas = r["samples"]["measure"]
    assert min(meas) > 0.05 * float(np.median(meas)), meas
    assert r["versions"]["tensorflow"] == tf.__version__ and r["versions"]["keras"]
    assert r["memory"]["peak_rss_bytes"] > 50 * 2**20
    if zoo.SPECS[model].input_kind == "image":
        assert f["layout"] == "NHWC" and r["data_info"]["layout"] == "NHWC"
    if model == "lstm_tiny":
        assert f["rnn_cudnn"] is False  # CPU: no cuDNN
        assert f["rnn_loop"] == "fused_unrolled"  # zoo/rnn/tensorflow_impl.py, TorchLSTM
        assert tp["tokens_per_s"] == pytest.approx(tp["samples_per_s"] * 16)


@pytest.mark.parametrize("precision,policy,tf32", [("fp32", "float32", False),
                                                    ("tf32", "float32", True),
                                                    ("bf16", "mixed_bfloat16", False)])
def test_precision_is_applied_explicitly_and_recorded(precision, policy, tf32):
    r = _run(model="fcn5_tiny", mode="graph", batch_size=8, precision=precision,
             iterations=SHORT)
    f = r["flags"]
    assert f["keras_policy"] == policy and f["tf32"] is tf32 and f["loss_dtype"] == "float32"
    assert f["variable_dtype"] == "float32"
    assert f["compute_dtype"] == ("bfloat16" if precision == "bf16" else "float32")
    assert keras.mixed_precision.global_policy().name == "float32"  # reset on close


def test_grad_accumulation_keeps_samples_per_iteration():
    # lstm_tiny: the embedding's gradient is an IndexedSlices, summed over micro-batches.
    r = _run(model="lstm_tiny", mode="graph", batch_size=8, grad_accum=2, iterations=SHORT)
    assert r["flags"]["grad_accum"] == 2
    assert r["throughput"]["samples"] == r["n_measured"] * 8


def test_real_text_data_trains_and_loss_falls(data_env):
    pol = IterationPolicy(min_iters=40, min_time_s=0.0, warmup_window=5, min_warmup_iters=0,
                          max_warmup_iters=10)
    r = _run(model="lstm_tiny", mode="graph", batch_size=32, data="ptb", iterations=pol)
    assert r["data_info"]["kind"] == "real" and r["data_info"]["dataset"] == "ptb"
    assert r["flags"]["retraces"] == 1  # cycling real batches never retraces
    losses = r["losses"]["first"] + r["losses"]["warmup"] + r["losses"]["measure"]
    head, tail = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
    assert tail < 0.9 * head, (head, tail)


def test_real_image_data_is_transposed_to_nhwc_once(tmp_path):
    from dlperf.data import load_dataset, make_batches, write_cifar10_bin

    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (40, 3, 32, 32), dtype=np.uint8)
    y = rng.integers(0, 10, 40).astype(np.int64)
    write_cifar10_bin(tmp_path / "cifar10" / "data_batch_1.bin", x, y)
    spec = zoo.SPECS["alexnet_cifar_tiny"]
    cfg = make_run_config(model=spec.name, framework="tensorflow", mode="graph", batch_size=8,
                          data="cifar10", data_dir=str(tmp_path), iterations=SHORT)
    impl = __import__("dlperf.zoo.cnn.tensorflow_impl", fromlist=["build"])
    src = make_source(tf, cfg, spec, "/CPU:0", False, impl)
    next_batch, info, _first, fetch, to_device, wait = (src.next_batch, src.info, src.first,
                                                       src.fetch, src.to_device, src.wait)
    assert wait is None  # prepared batches: no pipeline, no data wait
    X, Y = make_batches(load_dataset("cifar10", tmp_path), spec, 8)
    assert info["layout"] == "NHWC" and info["distinct_batches"] == 5
    bx, by = next_batch()
    np.testing.assert_array_equal(bx.numpy(), nchw_to_nhwc(X[0]))
    np.testing.assert_array_equal(by.numpy(), Y[0])
    # The breakdown's two parts give the next batch the same way (on the CPU: no copy).
    cx, cy = to_device(fetch())
    np.testing.assert_array_equal(cx.numpy(), nchw_to_nhwc(X[1]))
    np.testing.assert_array_equal(cy.numpy(), Y[1])
    r = run_config(cfg)
    assert r["status"] == "ok", r["error"]
    assert r["data_info"]["dataset"] == "cifar10" and r["flags"]["retraces"] == 1


def test_failures_are_results():
    # TensorFlow already runs in this process (one op makes sure, when this test runs alone):
    # its thread pools cannot change any more.
    tf.reduce_sum(tf.ones(2)).numpy()
    r = run_config(make_run_config(model="fcn5_tiny", framework="tensorflow", batch_size=8,
                                   threads=1, iterations=SHORT))
    assert r["status"] == "error" and "fresh process" in r["error"]
    if not tf.config.list_physical_devices("GPU"):
        r = run_config(make_run_config(model="fcn5_tiny", framework="tensorflow",
                                       batch_size=8, device="cuda", iterations=SHORT))
        assert r["status"] == "unavailable" and "--device cpu" in r["error"]
    import importlib.util

    other = sorted(n for n, s in zoo.SPECS.items() if s.is_tiny and importlib.util.find_spec(
        f"dlperf.zoo.{s.family}.tensorflow_impl") is None)
    if other:  # a family without tensorflow_impl: a clean error result, not a crash
        r = run_config(make_run_config(model=other[0], framework="tensorflow", batch_size=4,
                                       iterations=SHORT))
        assert r["status"] == "error" and "no Keras implementation" in r["error"]
    ad = TensorFlowAdapter()
    assert ad.is_oom(tf.errors.ResourceExhaustedError(None, None, "OOM when allocating"))
    assert not ad.is_oom(ValueError("shapes do not match"))
    assert ad.available() == (True, tf.__version__) and "cpu" in ad.devices()


@pytest.mark.slow
def test_cli_graph_mode_with_threads_in_fresh_workers(tmp_path):
    """The documented command, plus --threads (set before TensorFlow runs, in the worker)."""
    db = tmp_path / "t.db"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3] / "src")}
    cmd = [sys.executable, "-m", "dlperf", "run", "--framework", "tensorflow", "--mode", "graph",
           "--model", "fcn5_tiny", "--device", "cpu", "--batch-size", "8", "--threads", "1",
           "--min-iters", "5", "--min-time", "0", "--max-warmup-iters", "4", "--db", str(db)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    con = sqlite3.connect(db)
    status, n_compiles, fw_version, blob = con.execute(
        "select status, n_compiles, framework_version, result_json from results").fetchone()
    assert status == "ok" and n_compiles == 1 and fw_version == tf.__version__
    f = json.loads(blob)["flags"]
    assert (f["intra_op_threads"], f["inter_op_threads"], f["threads"]) == (1, 1, 1)
