"""Tests of the model zoo: specs (analytic counts) against the PyTorch implementations.

Every model is built at most once per session (the module-scoped ``models`` cache); the full
fcn5/fcn8/alexnet/resnet50 are large but cheap enough to build on CPU once.
"""

from __future__ import annotations

import math
import time
import warnings
from contextlib import contextmanager

import pytest

torch = pytest.importorskip("torch")

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

import dlperf.zoo as zoo  # noqa: E402
from dlperf.zoo.cnn.spec import (  # noqa: E402
    cnn_spec,
    resnet_bottleneck_counts,
    resnet_cifar_counts,
)
from dlperf.zoo.fcn.spec import fcn_forward_flops, fcn_params  # noqa: E402
from dlperf.zoo.rnn.spec import lstm_forward_flops, lstm_params, lstm_spec  # noqa: E402

# vgg16, googlenet, deepspeech2 and the Transformers (other inputs and losses, models built on
# the meta device) are tested in tests/zoo/test_zoo_more.py.
_MORE = {"vgg16", "googlenet", "deepspeech2", "transformer", "bert_base", "gpt2_small"}
_HERE = {n: s for n, s in zoo.SPECS.items() if (s.tiny_of or n) not in _MORE}
ALL = sorted(_HERE)
TINY = sorted(n for n, s in _HERE.items() if s.is_tiny)
FULL = sorted(n for n, s in _HERE.items() if not s.is_tiny)


@pytest.fixture(scope="module")
def models():
    """Lazy per-module cache: ``models(name)`` builds each zoo model once, on CPU."""
    cache: dict[str, torch.nn.Module] = {}

    def get(name: str) -> torch.nn.Module:
        if name not in cache:
            torch.manual_seed(0)
            cache[name] = zoo.build_torch(zoo.SPECS[name])
        return cache[name]

    yield get
    cache.clear()


def _batch(spec, batch: int) -> torch.Tensor:
    """A random input batch for ``spec``: float features/images or int64 token ids."""
    g = torch.Generator().manual_seed(1)
    if spec.input_kind == "tokens":
        return torch.randint(0, spec.num_classes, (batch, *spec.input_shape), generator=g)
    return torch.randn((batch, *spec.input_shape), generator=g)


def _loss(spec, logits: torch.Tensor, batch: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(2)
    if spec.input_kind == "tokens":
        target = torch.randint(0, spec.num_classes, (batch, *spec.input_shape), generator=g)
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), target.flatten())
    target = torch.randint(0, spec.num_classes, (batch,), generator=g)
    return torch.nn.functional.cross_entropy(logits, target)


@contextmanager
def _countable(spec):
    """Run ops so that FlopCounterMode sees every matmul.

    On CPU ``nn.LSTM`` dispatches to the fused oneDNN kernel ``aten.mkldnn_rnn``, which
    FlopCounterMode has no formula for (it counts 0 FLOPs for the whole LSTM). With oneDNN
    disabled PyTorch runs its reference implementation, which is made of ``aten.mm``/``addmm``
    calls (input and recurrent gate matmuls of every step), so the count is exact and
    directly comparable with the analytic formula. (On CUDA the cuDNN kernel is opaque too.)
    """
    if spec.family == "rnn":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a TF32-on-oneDNN notice from flags()
            with torch.backends.mkldnn.flags(enabled=False):
                yield
    else:
        yield


def _expected_out_shape(spec, batch: int) -> tuple[int, ...]:
    if spec.input_kind == "tokens":
        return (batch, spec.input_shape[0], spec.num_classes)
    return (batch, spec.num_classes)


# --- parameter counts ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_param_count_matches_spec(models, name):
    spec = zoo.SPECS[name]
    model = models(name)
    n = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert n == spec.params


def test_literal_param_counts_from_models_md(models):
    assert zoo.SPECS["alexnet"].params == 61_100_840
    assert zoo.SPECS["resnet50"].params == 25_557_032
    for name, expected in (("alexnet", 61_100_840), ("resnet50", 25_557_032)):
        assert sum(p.numel() for p in models(name).parameters()) == expected


# --- FLOPs ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_forward_flops_and_shape(models, name):
    """FlopCounterMode (matmul/conv only, 2 per multiply-add) on a batch of 2 / 2 == spec."""
    spec = zoo.SPECS[name]
    model = models(name).eval()
    x = _batch(spec, 2)
    with torch.no_grad(), _countable(spec), FlopCounterMode(display=False) as counter:
        out = model(x)
    assert tuple(out.shape) == _expected_out_shape(spec, 2)
    assert out.dtype == torch.float32
    assert counter.get_total_flops() == 2 * spec.forward_flops_per_sample


@pytest.mark.parametrize("name", TINY)
def test_train_step_flops_between_2_5_and_3_forward(models, name):
    """Forward + backward is about 3x forward (zoo/spec.py), slightly less: layers whose input
    needs no gradient (the first conv/linear; the LSTM's step 0, whose h0 is a constant zero)
    skip the input-gradient matmul."""
    spec = zoo.SPECS[name]
    model = models(name).train()
    x = _batch(spec, 2)
    with _countable(spec), FlopCounterMode(display=False) as counter:
        _loss(spec, model(x), 2).backward()
    model.zero_grad(set_to_none=True)
    ratio = counter.get_total_flops() / (2 * spec.forward_flops_per_sample)
    assert 2.5 <= ratio <= 3.0, ratio


# --- training ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", TINY)
def test_sgd_step_changes_params_and_loss_is_finite(name):
    spec = zoo.SPECS[name]
    torch.manual_seed(0)
    model = zoo.build_torch(spec).train()
    opt = spec.optimizer
    sgd = torch.optim.SGD(model.parameters(), lr=opt.lr, momentum=opt.momentum,
                          weight_decay=opt.weight_decay)
    before = [p.detach().clone() for p in model.parameters()]
    x = _batch(spec, 8)
    loss = _loss(spec, model(x), 8)
    assert math.isfinite(loss.item())
    sgd.zero_grad()
    loss.backward()
    sgd.step()
    changed = [not torch.equal(b, p) for b, p in zip(before, model.parameters())]
    assert all(changed), [n for (n, _), c in zip(model.named_parameters(), changed) if not c]
    # A second step still gives a finite loss.
    assert math.isfinite(_loss(spec, model(x), 8).item())


@pytest.mark.parametrize("name", TINY)
def test_tiny_train_step_is_fast(name):
    """A batch-8 training step of a tiny model is fast on CPU (target: well under 100 ms on 2
    cores; each takes under 10 ms on one core). Measured on one thread, because intra-op
    threads that share their cores with another busy process can slow a step down 100-fold
    (spinning OpenMP workers); the bound is loose so that a loaded CI machine passes."""
    spec = zoo.SPECS[name]
    model = zoo.build_torch(spec).train()
    sgd = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = _batch(spec, 8)

    def step():
        sgd.zero_grad(set_to_none=True)
        _loss(spec, model(x), 8).backward()
        sgd.step()

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        step()  # warm-up
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
    finally:
        torch.set_num_threads(threads)
    assert min(times) < 0.25, times


@pytest.mark.parametrize("name", TINY)
def test_training_through_the_harness(name):
    """dlperf.worker.run_config on the CPU with PyTorch, as a quick-suite point runs in its
    worker: the run is ok with finite, positive losses and a consistent throughput. (The
    command line runs the whole quick suite once, on the fake framework:
    tests/integration/test_cli.py; tests/zoo/test_zoo_more.py does this for the other
    families.)"""
    from dlperf.config import IterationPolicy, make_run_config
    from dlperf.worker import run_config

    assert name in zoo.SPECS
    n = torch.get_num_threads()
    try:  # one thread: intra-op threads sharing 2 busy cores can slow a step 100-fold
        r = run_config(make_run_config(model=name, batch_size=8, threads=1, iterations=(
            IterationPolicy(min_iters=4, min_time_s=0.0, warmup_window=2, min_warmup_iters=0,
                            max_warmup_iters=4))))
    finally:
        torch.set_num_threads(n)
    assert r["status"] == "ok", r["error"]
    assert r["n_measured"] >= 4 and r["throughput"]["samples_per_s"] > 0
    assert r["throughput"]["samples_per_s"] == pytest.approx(
        r["n_measured"] * 8 / r["measured_time_s"])
    losses = r["losses"]["first"] + r["losses"]["warmup"] + r["losses"]["measure"]
    assert losses and all(math.isfinite(v) and v > 0 for v in losses)


@pytest.mark.parametrize("name", ["alexnet_tiny", "alexnet_cifar_tiny", "resnet50_tiny",
                                  "resnet56_tiny"])
def test_cnn_channels_last_and_bf16_autocast(models, name):
    spec = zoo.SPECS[name]
    model = models(name).eval()
    x = _batch(spec, 2)
    with torch.no_grad():
        ref = model(x)
        cl = model.to(memory_format=torch.channels_last)(x.to(memory_format=torch.channels_last))
        model.to(memory_format=torch.contiguous_format)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = model(x)
    torch.testing.assert_close(cl, ref, rtol=1e-4, atol=1e-4)
    assert low.shape == ref.shape and torch.isfinite(low).all()


def test_lstm_bf16_autocast(models):
    """bf16 LSTM on the CPU runs where oneDNN has bf16 kernels; elsewhere (AVX2 only) dlperf
    refuses it with the reason, and stores the point as unavailable rather than a crash."""
    from dlperf.errors import UnavailableError
    from dlperf.frameworks.torch.adapter import _check_cpu_bf16_lstm

    spec = zoo.SPECS["lstm_tiny"]
    try:
        _check_cpu_bf16_lstm(torch)
    except UnavailableError as e:
        assert "bf16 on this CPU" in str(e) and "--precision fp32" in str(e)
        with pytest.raises(RuntimeError, match="primitive descriptor"):
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
                models("lstm_tiny").eval()(_batch(spec, 2))
        from dlperf.config import make_run_config
        from dlperf.worker import run_config

        r = run_config(make_run_config(model="lstm_tiny", device="cpu", precision="bf16",
                                       batch_size=2, measure_ceilings=False))
        assert r["status"] == "unavailable" and "bf16 on this CPU" in r["error"], r["error"]
        return
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = models("lstm_tiny").eval()(_batch(spec, 2))
    assert out.shape == _expected_out_shape(spec, 2) and torch.isfinite(out).all()


# --- the specs and their analytic formulas ------------------------------------------------------


@pytest.mark.parametrize("name", TINY)
def test_tiny_variant_matches_its_full_model(name):
    tiny = zoo.SPECS[name]
    full = zoo.SPECS[tiny.tiny_of]
    assert name == f"{full.name}_tiny" and not full.is_tiny
    assert (tiny.family, tiny.input_kind, tiny.optimizer) == (
        full.family, full.input_kind, full.optimizer)
    assert tiny.hyper.get("arch") == full.hyper.get("arch")
    assert set(tiny.hyper) == set(full.hyper)
    assert tiny.params < full.params
    assert tiny.forward_flops_per_sample < full.forward_flops_per_sample
    assert set(tiny.real_data) <= set(full.real_data)
    if tiny.input_shape == full.input_shape and tiny.num_classes == full.num_classes:
        assert tiny.real_data == full.real_data


def test_spec_inputs_and_data_match_models_md():
    s = zoo.SPECS
    for name in ("fcn5", "fcn8"):
        assert (s[name].input_kind, s[name].input_shape, s[name].num_classes) == (
            "vector", (26752,), 26752)
    assert (s["fcn_mnist"].input_shape, s["fcn_mnist"].num_classes) == ((784,), 10)
    for name in ("alexnet", "resnet50"):
        assert (s[name].input_kind, s[name].input_shape, s[name].num_classes) == (
            "image", (3, 224, 224), 1000)
    for name in ("alexnet_cifar", "resnet56", "alexnet_cifar_tiny", "resnet56_tiny"):
        assert (s[name].input_shape, s[name].num_classes, s[name].real_data) == (
            (3, 32, 32), 10, ("cifar10",))
    assert s["fcn_mnist_tiny"].input_shape == (784,) and s["fcn_mnist_tiny"].num_classes == 10
    assert s["fcn_mnist_tiny"].real_data == ("mnist",)
    lstm = s["lstm"]
    assert (lstm.input_kind, lstm.input_shape, lstm.num_classes) == ("tokens", (35,), 10000)
    assert lstm.real_data == ("ptb", "wikitext2") == s["lstm_tiny"].real_data
    assert s["lstm_tiny"].num_classes == 10000 and s["lstm_tiny"].input_shape == (16,)
    assert (lstm.optimizer.lr, lstm.optimizer.momentum) == (1.0, 0.0)
    assert s["resnet50"].optimizer.momentum == 0.9
    assert {sp.family for sp in _HERE.values()} == {"fcn", "cnn", "rnn"}


def test_fcn_formulas_by_hand():
    assert fcn_params((10, 5, 3)) == (10 * 5 + 5) + (5 * 3 + 3)
    assert fcn_forward_flops((10, 5, 3)) == 2 * (10 * 5 + 5 * 3)
    # fcn5: 26752 -> 2048 x3 -> 26752.
    assert zoo.SPECS["fcn5"].params == 2 * (26752 * 2048) + 2 * 2048 * 2048 + 3 * 2048 + 26752
    assert zoo.SPECS["fcn5"].forward_flops_per_sample == 2 * (2 * 26752 * 2048 + 2 * 2048**2)


def test_lstm_formulas_by_hand_and_seq_len():
    lstm = zoo.SPECS["lstm"]
    # Embedding 10000x650, 2 layers x (W_ih + W_hh + b_ih + b_hh), decoder 650x10000 + 10000.
    per_layer = 4 * 650 * 650 * 2 + 2 * 4 * 650
    assert lstm.params == 10000 * 650 + 2 * per_layer + 650 * 10000 + 10000 == 19_780_400
    per_token = 2 * (2 * 4 * 650 * (650 + 650)) + 2 * 650 * 10000
    assert lstm.forward_flops_per_sample == 35 * per_token
    for t in (32, 64):
        s = lstm_spec(t)
        assert s.input_shape == (t,) and s.params == lstm.params
        assert s.forward_flops_per_sample == t * per_token == lstm_forward_flops(s.hyper, t)
    assert lstm_params({**lstm.hyper, "layers": 3}) == lstm.params + per_layer


def test_cnn_formulas_follow_hyper():
    # He et al. 2016 table 6: CIFAR ResNets with n = 3, 5, 7, 9, 18 have 0.27M, 0.46M, 0.66M,
    # 0.85M and 1.7M parameters.
    base = zoo.SPECS["resnet56"].hyper
    for n, millions in ((3, 0.27), (5, 0.46), (7, 0.66), (9, 0.85), (18, 1.7)):
        p, _ = resnet_cifar_counts({**base, "blocks": (n,) * 3}, (3, 32, 32), 10)
        assert round(p / 1e6, 2 if n < 18 else 1) == millions, (n, p)
    # The same formula with ResNet-101's blocks (He et al. 2016 table 1) gives torchvision's
    # resnet101 (v1.5 layout, like resnet50): 44,549,160 parameters and 7.80 GMACs (its docs
    # call multiply-adds "GFLOPS"; the paper's 7.6e9 is v1, stride in the first 1x1 conv).
    r50 = zoo.SPECS["resnet50"].hyper
    p101, f101 = resnet_bottleneck_counts({**r50, "blocks": (3, 4, 23, 3)}, (3, 224, 224), 1000)
    assert p101 == 44_549_160
    assert round(f101 / 2e9, 1) == 7.8
    # resnet50 forward: torchvision reports 4.09 GMACs.
    assert round(zoo.SPECS["resnet50"].forward_flops_per_sample / 2e9, 2) == 4.09


def test_spec_built_from_changed_hyper_matches_its_model():
    """The implementation reads its sizes from ``hyper``: a spec with other sizes builds a model
    whose parameter and FLOP counts again equal the analytic ones."""
    spec = cnn_spec("resnet_cifar_check", "resnet_cifar",
                    {"channels": (4, 8, 12), "blocks": (2, 1, 2)}, (3, 20, 24), 7, "test")
    model = zoo.build_torch(spec)
    assert sum(p.numel() for p in model.parameters()) == spec.params
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        out = model(torch.randn(2, 3, 20, 24))
    assert out.shape == (2, 7)
    assert counter.get_total_flops() == 2 * spec.forward_flops_per_sample


def test_unknown_model_names_the_closest():
    with pytest.raises(ValueError, match="resnet50"):
        zoo.get_spec("resnet5")
