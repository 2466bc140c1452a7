"""The JAX backend for the Transformers and DeepSpeech2: Flax models against the spec and
against torch (converted weights), the spec losses, and the xla adapter end to end."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")
pytest.importorskip("optax")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from dlperf.config import IterationPolicy, make_run_config  # noqa: E402
from dlperf.frameworks.jax.step import make_loss_fn  # noqa: E402
from dlperf.worker import run_config  # noqa: E402
from dlperf.zoo import SPECS, build, get_spec  # noqa: E402
from dlperf.zoo.convert import flax_input_shape, torch_to_flax  # noqa: E402

FAST = IterationPolicy(min_iters=4, min_time_s=0.0, warmup_window=2, min_warmup_iters=0,
                       max_warmup_iters=4)
NEW = [n for n, s in SPECS.items()
       if s.family == "transformer" or s.hyper.get("arch") == "deepspeech2"]
TINY = [n for n in NEW if SPECS[n].is_tiny]


def _struct(spec, batch=2):
    dtype = jnp.int32 if spec.input_kind in ("tokens", "token_pairs") else jnp.float32
    return jax.ShapeDtypeStruct((batch, *flax_input_shape(spec)), dtype)


def _out_shape(spec, batch=2):
    if spec.input_kind == "spectrogram":
        from dlperf.zoo.rnn.spec import deepspeech2_geometry

        return (batch, deepspeech2_geometry(spec.hyper)["frames"][-1], spec.num_classes)
    return (batch, *spec.targets, spec.num_classes)


@pytest.mark.parametrize("name", NEW)
def test_flax_parameter_count_and_output_shape_match_spec(name):
    # Abstract evaluation (no allocation, no compilation): the full-size models are cheap too.
    spec = get_spec(name)
    model = build(spec, "jax")
    x = _struct(spec)
    variables = jax.eval_shape(lambda x: model.init(jax.random.key(0), x, train=False), x)
    assert sum(p.size for p in jax.tree.leaves(variables["params"])) == spec.params
    out = jax.eval_shape(lambda v, x: model.apply(v, x, train=False), variables, x)
    assert out.shape == _out_shape(spec)


@pytest.mark.parametrize("name", TINY)
def test_forward_and_loss_match_torch_with_converted_weights(name):
    torch = pytest.importorskip("torch")
    import importlib

    spec = get_spec(name)
    torch.manual_seed(0)
    tm = build(spec, "torch").eval()  # dropout off; DeepSpeech2's BN on running statistics
    timpl = importlib.import_module(f"dlperf.zoo.{spec.family}.torch_impl")
    g = torch.Generator().manual_seed(1)
    if spec.default_io:
        x = torch.randint(0, spec.num_classes, (4, *spec.input_shape), generator=g)
        y = torch.randint(0, spec.num_classes, (4, *spec.targets), generator=g)
        loss_t_fn = lambda o, t: torch.nn.functional.cross_entropy(  # noqa: E731
            o.reshape(-1, spec.num_classes), t.reshape(-1))
    else:
        x, y = timpl.synthetic_batch(spec, 4, g, "cpu")
        loss_t_fn = timpl.loss_fn(spec)
    with torch.no_grad():
        out_t = tm(x)
        loss_t = loss_t_fn(out_t, y)
    fm = build(spec, "jax")
    variables = torch_to_flax(spec, tm.state_dict())
    xj = jnp.asarray(x.numpy(), jnp.float32 if x.is_floating_point() else jnp.int32)
    yj = jnp.asarray(y.numpy(), jnp.int32)
    loss = make_loss_fn(spec)

    @jax.jit
    def fwd(v, x, y):
        out = fm.apply(v, x, train=False)
        return out, loss(out, y)

    with jax.default_matmul_precision("highest"):
        out_j, loss_j = fwd(variables, xj, yj)
    np.testing.assert_allclose(np.asarray(out_j), out_t.numpy(), rtol=1e-4, atol=1e-5)
    assert float(loss_j) == pytest.approx(loss_t.item(), rel=1e-5)


def test_label_smoothing_and_ctc_losses_match_torch():
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(2)
    spec = get_spec("transformer_tiny")
    assert spec.label_smoothing > 0
    out = torch.randn(3, 16, spec.num_classes, generator=g)
    y = torch.randint(0, spec.num_classes, (3, 16), generator=g)
    want = F.cross_entropy(out.reshape(-1, spec.num_classes), y.reshape(-1),
                           label_smoothing=spec.label_smoothing)
    got = make_loss_fn(spec)(jnp.asarray(out.numpy()), jnp.asarray(y.numpy(), jnp.int32))
    assert float(got) == pytest.approx(want.item(), rel=1e-5)

    from dlperf.zoo.rnn.torch_impl import ctc_loss

    spec = get_spec("deepspeech2_tiny")
    out = torch.randn(3, 20, spec.num_classes, generator=g)
    y = torch.randint(1, spec.num_classes, (3, *spec.targets), generator=g)
    got = make_loss_fn(spec)(jnp.asarray(out.numpy()), jnp.asarray(y.numpy(), jnp.int32))
    assert float(got) == pytest.approx(ctc_loss(out, y).item(), rel=1e-5)


@pytest.mark.parametrize("name", TINY)
def test_adapter_end_to_end_on_cpu(name):
    spec = get_spec(name)
    r = run_config(make_run_config(model=name, framework="jax", mode="xla", batch_size=4,
                                   iterations=FAST))
    assert r["status"] == "ok", r["error"]
    assert r["n_measured"] == len(r["losses"]["measure"]) >= 4
    assert all(np.isfinite(r["losses"]["measure"]))
    f = r["flags"]
    assert f["retraces"] == 1 and f["recompiles"] == 0
    assert f["dropout_rng"] is (spec.hyper.get("dropout", 0.0) > 0)
    tp = r["throughput"]
    assert tp["tokens_per_s"] == pytest.approx(tp["samples_per_s"] * spec.tokens_per_sample)
