"""The JAX backend: Flax models against the spec and against torch; the xla adapter end to end."""

from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")
pytest.importorskip("optax")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from dlperf.config import IterationPolicy, make_run_config  # noqa: E402
from dlperf.frameworks import get_adapter  # noqa: E402
from dlperf.worker import run_config  # noqa: E402
from dlperf.zoo import SPECS, build, get_spec  # noqa: E402
from dlperf.zoo.convert import flax_input_shape, torch_to_flax  # noqa: E402

FAST = IterationPolicy(min_iters=6, min_time_s=0.0, warmup_window=2, min_warmup_iters=0,
                       max_warmup_iters=6)
FAMILIES = ("fcn", "cnn", "rnn")
PARITY = ("fcn5_tiny", "fcn_mnist_tiny", "alexnet_tiny", "alexnet_cifar_tiny", "vgg16_tiny",
          "googlenet_tiny", "resnet50_tiny", "resnet56_tiny", "lstm_tiny")


def _flax_model(spec):
    try:
        return build(spec, "jax")
    except NotImplementedError as e:
        pytest.skip(str(e))


def _input_struct(spec, batch=2):
    dtype = jnp.int32 if spec.input_kind == "tokens" else jnp.float32
    return jax.ShapeDtypeStruct((batch, *flax_input_shape(spec)), dtype)


# DeepSpeech2 (spectrogram in, [B, T_out, classes] out) is checked in tests/frameworks/jax/test_jax_more.py.
@pytest.mark.parametrize("name", [n for n, s in SPECS.items() if s.family in FAMILIES
                                  and s.input_kind != "spectrogram"])
def test_flax_parameter_count_and_output_shape_match_spec(name):
    # Abstract evaluation only (no compilation), so the full-size models are cheap too.
    spec = get_spec(name)
    model = _flax_model(spec)
    x = _input_struct(spec)
    variables = jax.eval_shape(lambda x: model.init(jax.random.key(0), x, train=False), x)
    assert sum(p.size for p in jax.tree.leaves(variables["params"])) == spec.params
    out = jax.eval_shape(lambda v, x: model.apply(v, x, train=False), variables, x)
    want = (2, *spec.input_shape, spec.num_classes) if spec.input_kind == "tokens" \
        else (2, spec.num_classes)
    assert out.shape == want


def _torch_pair(name):
    torch = pytest.importorskip("torch")
    spec = get_spec(name)
    torch.manual_seed(0)
    tm = build(spec, "torch")
    bn = any(isinstance(m, torch.nn.BatchNorm2d) for m in tm.modules())
    # Dropout off on both sides; BN normalises with batch statistics on both sides.
    tm.train(bn)
    for m in tm.modules():
        if isinstance(m, torch.nn.Dropout):
            m.eval()
    g = torch.Generator().manual_seed(1)
    B = 4
    if spec.input_kind == "tokens":
        x = torch.randint(0, spec.num_classes, (B, *spec.input_shape), generator=g)
        y = torch.randint(0, spec.num_classes, (B, *spec.input_shape), generator=g)
        xj = jnp.asarray(x.numpy(), jnp.int32)
    else:
        x = torch.randn((B, *spec.input_shape), generator=g)
        y = torch.randint(0, spec.num_classes, (B,), generator=g)
        xj = jnp.asarray(x.numpy())
        if spec.input_kind == "image":
            xj = xj.transpose(0, 2, 3, 1)  # NCHW -> NHWC
    return torch, spec, tm, bn, x, y, xj, jnp.asarray(y.numpy(), jnp.int32)


def _flax_no_dropout(spec):
    """The Flax model of ``spec`` with dropout rate 0 (so BN can run in train mode without it)."""
    fm = build(spec, "jax")
    return fm.clone(dropout=0.0) if hasattr(fm, "dropout") else fm


def _ce(logits, y, n):
    import optax

    return optax.softmax_cross_entropy_with_integer_labels(
        logits.astype(jnp.float32).reshape(-1, n), y.reshape(-1)).mean()


@pytest.mark.parametrize("name", PARITY)
def test_forward_and_loss_match_torch_with_converted_weights(name):
    torch, spec, tm, bn, x, y, xj, yj = _torch_pair(name)
    fm = _flax_no_dropout(spec)
    variables = torch_to_flax(spec, tm.state_dict())
    with torch.no_grad():
        out_t = tm(x)
    loss_t = torch.nn.functional.cross_entropy(out_t.reshape(-1, spec.num_classes), y.reshape(-1))

    @jax.jit
    def fwd(v, x, y):
        if bn:
            out, upd = fm.apply(v, x, train=True, mutable=["batch_stats"])
        else:
            out, upd = fm.apply(v, x, train=False), None
        return out, _ce(out, y, spec.num_classes), upd

    with jax.default_matmul_precision("highest"):
        out_j, loss_j, upd = fwd(variables, xj, yj)
    np.testing.assert_allclose(np.asarray(out_j), out_t.detach().numpy(), rtol=1e-4, atol=1e-5)
    assert float(loss_j) == pytest.approx(loss_t.item(), rel=1e-5)
    if bn:  # every running mean moved the same way (torch momentum 0.1 == flax momentum 0.9);
        # the running variances differ by design (flax: biased batch variance, torch: unbiased)
        want = torch_to_flax(spec, tm.state_dict())["batch_stats"]
        got = jax.tree_util.tree_flatten_with_path(upd["batch_stats"])[0]
        for (path, g), w in zip(got, jax.tree.leaves(want), strict=True):
            if jax.tree_util.keystr(path).endswith("['mean']"):
                np.testing.assert_allclose(np.asarray(g), w, rtol=1e-4, atol=1e-6,
                                           err_msg=jax.tree_util.keystr(path))


@pytest.mark.parametrize("name", ["fcn_mnist_tiny", "resnet56_tiny", "lstm_tiny"])
def test_gradients_match_torch(name):
    torch, spec, tm, bn, x, y, xj, yj = _torch_pair(name)
    fm = _flax_no_dropout(spec)
    variables = torch_to_flax(spec, tm.state_dict())
    loss_t = torch.nn.functional.cross_entropy(tm(x).reshape(-1, spec.num_classes), y.reshape(-1))
    loss_t.backward()
    grads_t = {k: p.grad for k, p in tm.named_parameters()}
    grads_t.update({k: v for k, v in tm.state_dict().items() if "running" in k})
    want = torch_to_flax(spec, grads_t)["params"]

    def loss(params, v, x, y):
        v = {**v, "params": params}
        if bn:
            out, _ = fm.apply(v, x, train=True, mutable=["batch_stats"])
        else:
            out = fm.apply(v, x, train=False)
        return _ce(out, y, spec.num_classes)

    with jax.default_matmul_precision("highest"):
        got = jax.jit(jax.grad(loss))(variables["params"], variables, xj, yj)
    for (path, g), w in zip(jax.tree_util.tree_flatten_with_path(got)[0], jax.tree.leaves(want),
                            strict=True):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-3, atol=1e-6,
                                   err_msg=jax.tree_util.keystr(path))


def _session(model, **kw):
    spec = get_spec(model)
    cfg = make_run_config(model=model, framework="jax", mode="xla", **kw)
    return get_adapter("jax").prepare(cfg, spec)


def test_jit_train_step_lowers_the_loss_on_fixed_batches():
    s = _session("fcn_mnist_tiny", batch_size=16)
    try:
        # The 4 synthetic batches (random labels), cycled: the same 4 batches are seen again
        # and again, and the loss on them falls (slowly: sigmoids, SGD lr 0.01).
        losses = s.losses_to_floats([s.step() for _ in range(120)])
    finally:
        s.close()
    assert sum(losses[-4:]) < 0.95 * sum(losses[:4]), losses
    assert s.flags["retraces"] == 1 and s.flags["recompiles"] == 0


def test_gradient_accumulation_gives_the_same_updates():
    # fcn5_tiny has no BN and no dropout: K micro-batches of B/K average to the full-batch step.
    runs = []
    for k in (1, 4):
        s = _session("fcn5_tiny", batch_size=16, grad_accum=k)
        try:
            runs.append(s.losses_to_floats([s.step() for _ in range(5)]))
        finally:
            s.close()
    np.testing.assert_allclose(runs[0], runs[1], rtol=1e-5)


#: (model, precision, threads): each path of the adapter once, the precisions and --threads
#: spread over them (each run compiles, which dominates the cost on a small CPU): a vector input
#: without BN or dropout (fcn), an image in NHWC with dropout (alexnet_tiny), an image with BN
#: statistics in the state (resnet56), tokens with dropout (lstm). The adapter reads a model
#: through its family, input kind, BN and dropout only (each on its own); the other tiny
#: models are run through it elsewhere: fcn_mnist_tiny (test_real_data_trains_and_loss_falls
#: below), resnet50_tiny (tests/frameworks/jax/test_grain_pipeline.py, end to end through
#: `dlperf run`), tokens at fp32 (tests/frameworks/jax/test_jax_more.py); the Flax models
#: themselves are checked against their specs and against PyTorch above (fcn8_tiny against
#: its spec).
E2E = [("fcn5_tiny", "tf32", 1), ("alexnet_tiny", "fp32", None),
       ("resnet56_tiny", "bf16", None), ("lstm_tiny", "bf16", None)]
PRECISION_FLAGS = {"fp32": ("highest", "float32"), "tf32": ("tensorfloat32", "float32"),
                   "bf16": ("highest", "bfloat16")}


@pytest.mark.parametrize("name,precision,threads", E2E)
def test_adapter_end_to_end_on_cpu(name, precision, threads):
    spec = get_spec(name)
    affinity = os.sched_getaffinity(0)
    r = run_config(make_run_config(model=name, framework="jax", mode="xla", batch_size=8,
                                   precision=precision, threads=threads, iterations=FAST))
    assert r["status"] == "ok", r["error"]
    tp = r["throughput"]
    assert tp["samples"] == r["n_measured"] * 8
    assert r["n_measured"] == len(r["samples"]["measure"]) == len(r["losses"]["measure"])
    assert all(np.isfinite(r["losses"]["measure"]))
    f = r["flags"]
    assert f["compile_time_s"] > 0 and f["lower_time_s"] > 0
    assert f["retraces"] == 1 and f["recompiles"] == 0  # steady state: compiled once
    c = r["compile"]
    assert c["compile_time_s"] == f["compile_time_s"] and c["n_compiles"] == 1
    assert c["recompiles_measured"] == 0
    # Precision applied explicitly and recorded (rule 6).
    mm, dtype = PRECISION_FLAGS[precision]
    assert f["jax_default_matmul_precision"] == mm and f["tf32"] is (precision == "tf32")
    assert f["compute_dtype"] == dtype and f["param_dtype"] == "float32"
    assert f["layout"] == ("NHWC" if spec.input_kind == "image" else None)
    assert r["versions"]["jax"] == jax.__version__ and r["versions"]["flax"]
    assert r["memory"]["peak_rss_bytes"] > 0
    if spec.input_kind == "tokens":
        assert tp["tokens_per_s"] == pytest.approx(tp["samples_per_s"] * spec.input_shape[0])
    if threads:
        assert f["threads"] == threads and len(f["cpu_affinity"]) == threads
    assert os.sched_getaffinity(0) == affinity  # an in-process run gives the CPUs back


def test_real_data_trains_and_loss_falls(data_env):
    pol = IterationPolicy(min_iters=300, min_time_s=0.0, warmup_window=5, min_warmup_iters=0,
                          max_warmup_iters=20)
    r = run_config(make_run_config(model="fcn_mnist_tiny", framework="jax", mode="xla",
                                   batch_size=32, data="mnist", iterations=pol))
    assert r["status"] == "ok", r["error"]
    assert r["data_info"]["kind"] == "real" and r["data_info"]["dataset"] == "mnist"
    assert r["flags"]["retraces"] == 1 and r["flags"]["recompiles"] == 0
    losses = r["losses"]["first"] + r["losses"]["warmup"] + r["losses"]["measure"]
    head, tail = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
    assert tail < 0.9 * head, (head, tail)


def test_out_of_memory_is_recognised():
    a = get_adapter("jax")
    assert a.is_oom(RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
                                 "123 bytes."))
    assert a.is_oom(MemoryError())
    assert not a.is_oom(RuntimeError("INVALID_ARGUMENT: shapes differ"))
    assert not a.is_oom(ValueError("RESOURCE_EXHAUSTED"))


def test_cuda_requested_without_gpu_is_an_unavailable_result():
    if any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("this machine has a GPU")
    r = run_config(make_run_config(model="fcn5_tiny", framework="jax", mode="xla", batch_size=8,
                                   device="cuda", iterations=FAST))
    assert r["status"] == "unavailable" and "--device cpu" in r["error"]
