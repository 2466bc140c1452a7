"""Tests of the rest of the zoo: vgg16, googlenet, deepspeech2, transformer, bert_base,
gpt2_small and their tiny variants (the same checks as tests/zoo/test_zoo.py, plus the input/loss
contract of zoo/spec.py that these models added).

The full models are built once per module on the ``meta`` device: a meta module has every
parameter with its real shape but no storage, and a forward pass over meta tensors runs every
op's shape function, so parameter counts and FlopCounterMode's FLOPs are exact, yet building
GPT-2 costs no memory and its 0.6 TFLOP forward pass no time. The tiny variants (the same
code) are built and trained for real on the CPU.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from contextlib import contextmanager

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

import dlperf.zoo as zoo  # noqa: E402
from dlperf.config import IterationPolicy, make_run_config  # noqa: E402
from dlperf.worker import run_config  # noqa: E402
from dlperf.zoo.cnn.spec import googlenet_counts, vgg_counts  # noqa: E402
from dlperf.zoo.rnn import torch_impl as rnn_impl  # noqa: E402
from dlperf.zoo.rnn.spec import deepspeech2_geometry, deepspeech2_spec  # noqa: E402
from dlperf.zoo.transformer import torch_impl as tf_impl  # noqa: E402
from dlperf.zoo.transformer.spec import (  # noqa: E402
    bert_spec,
    gpt2_params,
    mlm_positions,
    transformer_spec,
)

FULL = ("vgg16", "googlenet", "deepspeech2", "transformer", "bert_base", "gpt2_small")
TINY = tuple(f"{n}_tiny" for n in FULL)
ALL = FULL + TINY
FAST = IterationPolicy(min_iters=4, min_time_s=0.0, warmup_window=2, min_warmup_iters=0,
                       max_warmup_iters=4)


@pytest.fixture(scope="module")
def models():
    """Lazy per-module cache: full models on ``meta`` (see module docstring), tiny on CPU."""
    cache: dict[str, torch.nn.Module] = {}

    def get(name: str) -> torch.nn.Module:
        if name not in cache:
            spec = zoo.SPECS[name]
            torch.manual_seed(0)
            with torch.device("cpu" if spec.is_tiny else "meta"):
                cache[name] = zoo.build_torch(spec)
        return cache[name]

    yield get
    cache.clear()


def _device(spec) -> str:
    return "cpu" if spec.is_tiny else "meta"


def _batch(spec, batch: int, seed: int = 1):
    """``(x, y)`` for ``spec`` as the harness makes them (default contract or the hook)."""
    g = torch.Generator().manual_seed(seed)
    if not spec.default_io:
        impl = tf_impl if spec.family == "transformer" else rnn_impl
        x, y = impl.synthetic_batch(spec, batch, g, "cpu")
    elif spec.input_kind == "tokens":
        x = torch.randint(0, spec.num_classes, (batch, *spec.input_shape), generator=g)
        y = torch.randint(0, spec.num_classes, (batch, *spec.input_shape), generator=g)
    else:
        x = torch.randn((batch, *spec.input_shape), generator=g)
        y = torch.randint(0, spec.num_classes, (batch,), generator=g)
    dev = _device(spec)
    return x.to(dev), y.to(dev)


def _loss_fn(spec):
    if spec.default_io:
        return lambda out, y: F.cross_entropy(out.reshape(-1, spec.num_classes), y.reshape(-1))
    return (tf_impl if spec.family == "transformer" else rnn_impl).loss_fn(spec)


@contextmanager
def _countable():
    """Run attention so that FlopCounterMode sees its matmuls.

    On CPU ``scaled_dot_product_attention`` dispatches to the fused kernel
    ``aten._scaled_dot_product_flash_attention_for_cpu``, which FlopCounterMode has no formula
    for (it counts 0 FLOPs for attention; it does have formulas for the CUDA flash/efficient
    kernels). The math backend computes the same attention as ``bmm`` calls (full T x T
    scores, also when causal: the convention of zoo/spec.py), so the count is exact. The GRU
    needs nothing: on CPU ``nn.GRU`` runs PyTorch's reference implementation (oneDNN's fused
    RNN is used for ``nn.LSTM`` only), made of ``mm``/``addmm`` calls that are counted.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with sdpa_kernel(SDPBackend.MATH):
            yield


def _expected_out_shape(spec, batch: int) -> tuple[int, ...]:
    if spec.input_kind == "spectrogram":
        t_out = deepspeech2_geometry(spec.hyper)["frames"][-1]
        return (batch, t_out, spec.num_classes)
    if spec.input_kind in ("image", "vector"):
        return (batch, spec.num_classes)
    return (batch, *spec.targets, spec.num_classes)


# --- parameter counts ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_param_count_matches_spec(models, name):
    model = models(name)
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) == zoo.SPECS[name].params


def test_literal_param_counts(models):
    """docs/zoo.md's counts; GPT-2's is Hugging Face ``GPT2LMHeadModel.from_pretrained("gpt2")``
    (124,439,808: the "124M" model, tied output, learned positions, biases), BERT's is
    ``BertForMaskedLM`` of bert-base-uncased (109,514,298: no pooler, no NSP head)."""
    expected = {"vgg16": 138_357_544, "googlenet": 6_624_904, "gpt2_small": 124_439_808,
                "bert_base": 109_514_298, "transformer": 60_522_496, "deepspeech2": 25_800_733}
    for name, n in expected.items():
        assert zoo.SPECS[name].params == n, name
        assert sum(p.numel() for p in models(name).parameters()) == n, name


def test_param_formulas_by_hand():
    # GPT-2 small: wte + wpe + 12 x (2 LN + qkv + proj + fc + proj) + ln_f.
    d = 768
    layer = 2 * 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * 4 * d + 4 * d) + (4 * d * d + d)
    assert zoo.SPECS["gpt2_small"].params == 50257 * d + 1024 * d + 12 * layer + 2 * d
    # The same formula for GPT-2 medium (24 layers, 1024) gives the released 354,823,168.
    medium = {**zoo.SPECS["gpt2_small"].hyper, "d_model": 1024, "ffn": 4096, "layers": 24}
    assert gpt2_params(medium) == 354_823_168
    # BERT-Base: embeddings + 12 layers = BertModel without the pooler (109,482,240 - 590,592),
    # plus the MLM head (dense, LN, output bias).
    pooler = d * d + d
    assert zoo.SPECS["bert_base"].params == (109_482_240 - pooler) + (d * d + d) + 2 * d + 30522
    # The position table has 512 rows whatever the length: length 512 has the same count.
    assert bert_spec(seq_len=512).params == zoo.SPECS["bert_base"].params
    # Transformer base: shared embedding, 6 encoder layers (attn, FFN, 2 LN), 6 decoder layers
    # (2 attn, FFN, 3 LN).
    dm, f = 512, 2048
    attn, ffn = 4 * (dm * dm + dm), dm * f + f + f * dm + dm
    enc, dec = attn + ffn + 4 * dm, 2 * attn + ffn + 6 * dm
    assert zoo.SPECS["transformer"].params == 32000 * dm + 6 * enc + 6 * dec
    # The sequence length changes the FLOPs, not the parameters.
    assert transformer_spec(seq_len=256).params == zoo.SPECS["transformer"].params
    # DeepSpeech2: convs (bias-free) + BN, 3 bidirectional GRU layers (1312 then 800 inputs:
    # directions summed), FC 800 -> 29.
    h = 800
    gru = lambda n_in: 2 * (3 * h * (n_in + h) + 6 * h)  # noqa: E731
    conv = 32 * 41 * 11 + 64 + 32 * 32 * 21 * 11 + 64
    assert zoo.SPECS["deepspeech2"].params == conv + gru(32 * 41) + 2 * gru(h) + h * 29 + 29


# --- FLOPs and output shapes --------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_forward_flops_and_shape(models, name):
    """FlopCounterMode (matmul/conv only, 2 per multiply-add) on a batch of 2 / 2 == spec."""
    spec = zoo.SPECS[name]
    model = models(name).eval()
    x, _ = _batch(spec, 2)
    with torch.no_grad(), _countable(), FlopCounterMode(display=False) as counter:
        out = model(x)
    assert tuple(out.shape) == _expected_out_shape(spec, 2)
    assert out.dtype == torch.float32
    assert counter.get_total_flops() == 2 * spec.forward_flops_per_sample


@pytest.mark.parametrize("name", TINY)
def test_train_step_flops_between_2_5_and_3_forward(models, name):
    """Forward + backward with the model's own loss is about 3x forward (zoo/spec.py)."""
    spec = zoo.SPECS[name]
    model = models(name).train()
    x, y = _batch(spec, 2)
    with _countable(), FlopCounterMode(display=False) as counter:
        _loss_fn(spec)(model(x), y).backward()
    model.zero_grad(set_to_none=True)
    ratio = counter.get_total_flops() / (2 * spec.forward_flops_per_sample)
    assert 2.5 <= ratio <= 3.0, ratio


def test_flop_formulas_against_published_numbers():
    s = zoo.SPECS
    # torchvision's model docs: VGG-16 15.47 and GoogLeNet 1.50 GMACs ("GFLOPS") at 224x224.
    assert round(s["vgg16"].forward_flops_per_sample / 2e9, 2) == 15.47
    assert round(s["googlenet"].forward_flops_per_sample / 2e9, 2) == 1.50
    # GPT-2: 2 x non-embedding parameters per token (Kaplan et al. 2020 table 1), plus
    # attention 4 * T * d per layer and token, plus the tied output 2 * d * vocab.
    gpt2 = s["gpt2_small"]
    n_layers = gpt2.params - (50257 + 1024) * 768 - 2 * 768
    matmul_params = n_layers - 12 * (4 * 768 + 3 * 768 + 768 + 3072 + 768)  # minus LN, biases
    per_token = 2 * matmul_params + 12 * 4 * 1024 * 768 + 2 * 768 * 50257
    assert gpt2.forward_flops_per_sample == 1024 * per_token
    # BERT: the encoder over 128 tokens, the head over 20.
    bert = s["bert_base"]
    enc = 12 * (2 * 128 * (4 * 768**2 + 2 * 768 * 3072) + 4 * 128**2 * 768)
    assert bert.forward_flops_per_sample == enc + 20 * 2 * (768**2 + 768 * 30522)
    # Transformer: encoder 6 x (self-attn + FFN), decoder 6 x (self-attn + cross + FFN), output.
    t, d, f, v = 128, 512, 2048, 32000
    self_attn = 8 * t * d * d + 4 * t * t * d
    cross = 8 * t * d * d + 4 * t * t * d  # S == T
    enc, dec = self_attn + 4 * t * d * f, self_attn + cross + 4 * t * d * f
    assert s["transformer"].forward_flops_per_sample == 6 * enc + 6 * dec + 2 * t * d * v
    # DeepSpeech2 per 2 s utterance: convs, 3 bidirectional GRU layers over 100 frames, FC.
    conv = 2 * 41 * 11 * 32 * 81 * 100 + 2 * 32 * 21 * 11 * 32 * 41 * 100
    gru = 100 * 2 * 2 * 3 * 800 * ((1312 + 800) + 2 * (800 + 800))
    assert s["deepspeech2"].forward_flops_per_sample == conv + gru + 100 * 2 * 800 * 29


def test_cnn_count_functions_follow_hyper():
    # VGG-11 (config A) and VGG-19 (config E) with the same function: torchvision's counts.
    blocks_a = ((64,), (128,), (256, 256), (512, 512), (512, 512))
    blocks_e = ((64, 64), (128, 128), (256,) * 4, (512,) * 4, (512,) * 4)
    hyper = zoo.SPECS["vgg16"].hyper
    assert vgg_counts({**hyper, "blocks": blocks_a}, (3, 224, 224), 1000)[0] == 132_863_336
    assert vgg_counts({**hyper, "blocks": blocks_e}, (3, 224, 224), 1000)[0] == 143_667_240
    # GoogLeNet with 10 classes: only the FC changes.
    p10, _ = googlenet_counts(zoo.SPECS["googlenet"].hyper, (3, 224, 224), 10)
    assert p10 == 6_624_904 - 1024 * 990 - 990


# --- the input/loss contract --------------------------------------------------------------------


def test_contract_fields():
    s = zoo.SPECS
    old = ("fcn5", "fcn8", "fcn_mnist", "alexnet", "alexnet_cifar", "resnet50", "resnet56",
           "lstm")
    for name in old + ("vgg16", "googlenet", "gpt2_small"):
        for n in (name, f"{name}_tiny"):
            assert s[n].default_io and s[n].loss == "ce" and s[n].target_shape is None, n
    assert [s[n].default_io for n in ("deepspeech2", "transformer", "bert_base")] == [False] * 3
    assert (s["transformer"].input_kind, s["transformer"].input_shape) == ("token_pairs", (2, 128))
    assert (s["transformer"].targets, s["transformer"].label_smoothing) == ((128,), 0.1)
    assert (s["bert_base"].input_kind, s["bert_base"].loss, s["bert_base"].targets) == (
        "tokens", "mlm", (20,))
    assert (s["deepspeech2"].input_kind, s["deepspeech2"].input_shape) == ("spectrogram",
                                                                           (161, 200))
    assert (s["deepspeech2"].loss, s["deepspeech2"].targets, s["deepspeech2"].num_classes) == (
        "ctc", (30,), 29)
    assert s["gpt2_small"].input_shape == (1024,) and s["gpt2_small"].num_classes == 50257
    assert s["lstm"].targets == (35,) and s["resnet50"].targets == ()
    # tokens per sample: sequence length; source + target; input frames (10 ms each).
    assert [s[n].tokens_per_sample for n in ("gpt2_small", "bert_base", "transformer",
                                             "deepspeech2", "vgg16")] == [1024, 128, 256, 200, 0]
    # optimizers
    assert (s["transformer"].optimizer.name, s["transformer"].optimizer.betas,
            s["transformer"].optimizer.eps) == ("adam", (0.9, 0.98), 1e-9)
    assert s["bert_base"].optimizer.name == s["gpt2_small"].optimizer.name == "adamw"
    assert s["vgg16"].optimizer.name == s["deepspeech2"].optimizer.name == "sgd"
    assert {sp.family for sp in s.values()} == {"fcn", "cnn", "rnn", "transformer"}


def test_mlm_positions_are_fixed_and_spread():
    pos = mlm_positions(128, 20)
    assert pos == zoo.SPECS["bert_base"].hyper["positions"]
    assert len(set(pos)) == 20 and pos[0] == 1 and pos[-1] <= 126
    assert bert_spec(seq_len=512).targets == (77,)  # ceil(0.15 * 512)


def test_deepspeech2_geometry_and_length():
    g = deepspeech2_geometry(zoo.SPECS["deepspeech2"].hyper)
    assert g == {"bins": [161, 81, 41], "frames": [200, 100, 100], "rnn_in": 1312}
    ten_s = deepspeech2_spec(1000)  # 10 s: FLOPs scale with the length, parameters do not
    assert ten_s.params == zoo.SPECS["deepspeech2"].params and ten_s.tokens_per_sample == 1000
    assert ten_s.forward_flops_per_sample == 5 * zoo.SPECS["deepspeech2"].forward_flops_per_sample
    with pytest.raises(ValueError, match="output frames"):
        deepspeech2_spec(40)  # 20 output frames cannot carry 30 characters


@pytest.mark.parametrize("name", ["deepspeech2_tiny", "transformer_tiny", "bert_base_tiny"])
def test_hook_batches_follow_the_contract(name):
    spec = zoo.SPECS[name]
    x, y = _batch(spec, 3)
    assert tuple(x.shape) == (3, *spec.input_shape)
    assert tuple(y.shape) == (3, *spec.targets) and y.dtype == torch.int64
    if spec.input_kind == "spectrogram":
        assert x.dtype == torch.float32
        assert int(y.min()) >= 1 and int(y.max()) < spec.num_classes  # 0 is the blank
    else:
        assert x.dtype == torch.int64 and 0 <= int(x.min()) and int(x.max()) < spec.num_classes
    # Same generator seed, same batch (the harness's pool is reproducible).
    x2, y2 = _batch(spec, 3)
    assert torch.equal(x, x2) and torch.equal(y, y2)


def test_losses():
    torch.manual_seed(0)
    out, y = torch.randn(2, 6, 11), torch.randint(0, 11, (2, 6))
    tr = _loss_fn(dataclasses.replace(zoo.SPECS["transformer"], num_classes=11))
    assert torch.allclose(tr(out, y), F.cross_entropy(out.reshape(-1, 11), y.reshape(-1),
                                                      label_smoothing=0.1))
    # CTC: mean over the batch of each utterance's negative log-likelihood / target length.
    logits, labels = torch.randn(2, 10, 5), torch.randint(1, 5, (2, 3))
    lp = logits.log_softmax(-1).transpose(0, 1)
    per_utt = F.ctc_loss(lp, labels, (10, 10), (3, 3), reduction="none")
    ctc = _loss_fn(zoo.SPECS["deepspeech2"])(logits, labels)
    assert torch.allclose(ctc, (per_utt / 3).mean())
    # Chunks of equal size average to the full batch's loss (gradient accumulation).
    halves = [_loss_fn(zoo.SPECS["deepspeech2"])(a, b) for a, b in
              zip(logits.chunk(2), labels.chunk(2))]
    assert torch.allclose(ctc, sum(halves) / 2)


@pytest.mark.parametrize("name", ["gpt2_small_tiny", "transformer_tiny"])
def test_decoders_are_causal(models, name):
    """Changing the last decoder input token changes no earlier position's logits."""
    spec = zoo.SPECS[name]
    model = models(name).eval()
    x, _ = _batch(spec, 1)
    x2 = x.clone()
    x2[..., -1] = (x2[..., -1] + 1) % spec.num_classes  # last target (and source) token
    if spec.input_kind == "token_pairs":
        x2[:, 0] = x[:, 0]  # keep the source: only the decoder input changes
    with torch.no_grad():
        a, b = model(x), model(x2)
    torch.testing.assert_close(a[:, :-1], b[:, :-1], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(a[:, -1], b[:, -1])


# --- tiny variants, suites, training through the harness ------------------------------------------


@pytest.mark.parametrize("name", TINY)
def test_tiny_variant_matches_its_full_model(name):
    tiny, full = zoo.SPECS[name], zoo.SPECS[zoo.SPECS[name].tiny_of]
    assert name == f"{full.name}_tiny" and not full.is_tiny
    assert (tiny.family, tiny.input_kind, tiny.optimizer, tiny.loss, tiny.label_smoothing) == (
        full.family, full.input_kind, full.optimizer, full.loss, full.label_smoothing)
    assert tiny.default_io == full.default_io
    assert tiny.hyper.get("arch") == full.hyper.get("arch") and set(tiny.hyper) == set(full.hyper)
    assert tiny.params < full.params
    assert tiny.forward_flops_per_sample < full.forward_flops_per_sample


def test_suites():
    names = lambda suite: [e.model for e in zoo.get_suite(suite)]  # noqa: E731
    assert names("seven") == ["resnet50", "vgg16", "googlenet", "lstm", "deepspeech2",
                              "transformer", "bert_base"]
    assert names("distributed") == ["alexnet", "googlenet", "resnet50"]
    assert set(TINY) <= set(names("tiny"))  # every tiny variant; quick: one per family
    assert set(names("quick")) <= set(names("tiny"))
    assert all(e.data == "synthetic" for s in ("seven", "distributed") for e in zoo.get_suite(s))


@pytest.mark.parametrize("name", TINY)
def test_bf16_autocast_forward(models, name):
    spec = zoo.SPECS[name]
    x, y = _batch(spec, 2)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = models(name).eval()(x)
        loss = _loss_fn(spec)(out, y)
    assert tuple(out.shape) == _expected_out_shape(spec, 2) and torch.isfinite(out).all()
    assert math.isfinite(loss.item())


@pytest.fixture
def one_thread():
    """Runs use one intra-op thread (``threads=1``), restored afterwards: with two threads a
    step slows down many-fold when another process keeps the cores busy (spinning OpenMP
    workers, see tests/zoo/test_zoo.py), which turns seconds into tens of seconds."""
    n = torch.get_num_threads()
    yield 1
    torch.set_num_threads(n)


@pytest.mark.parametrize("name", TINY)
def test_training_through_the_harness(name, one_thread):
    """dlperf.worker.run_config on CPU with torch: the adapter takes the data and the loss
    from the spec (and the model module's hooks), and the run succeeds with finite losses."""
    spec = zoo.SPECS[name]
    r = run_config(make_run_config(model=name, batch_size=4, threads=one_thread,
                                   iterations=FAST))
    assert r["status"] == "ok", r["error"]
    assert r["spec"]["tokens_per_sample"] == spec.tokens_per_sample
    assert r["throughput"]["tokens_per_s"] == pytest.approx(
        r["throughput"]["samples_per_s"] * spec.tokens_per_sample)
    losses = r["losses"]["first"] + r["losses"]["warmup"] + r["losses"]["measure"]
    assert losses and all(math.isfinite(v) and v > 0 for v in losses)
    if spec.optimizer.name != "sgd":
        assert r["flags"]["optimizer"]["betas"] == list(spec.optimizer.betas)
        assert r["flags"]["optimizer"]["eps"] == spec.optimizer.eps


@pytest.mark.parametrize("name", ["deepspeech2_tiny", "transformer_tiny"])
def test_grad_accumulation_and_bf16_through_the_harness(name, one_thread):
    r = run_config(make_run_config(model=name, batch_size=4, grad_accum=2, precision="bf16",
                                   threads=one_thread, iterations=FAST))
    assert r["status"] == "ok", r["error"]
    assert r["flags"]["grad_accum"] == 2 and r["flags"]["autocast_dtype"] == "bfloat16"
