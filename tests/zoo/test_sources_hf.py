"""``hf:`` models (dlperf.zoo.sources.hf): names, options, counts and runs on the CPU.

Counts are checked against independent numbers: the zoo's own GPT-2 small (whose analytic
parameter count equals Hugging Face's ``GPT2LMHeadModel`` and whose FLOPs follow the zoo's
formula), and the same tiny model built for real on the CPU and counted there.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

import dlperf.zoo as zoo  # noqa: E402
from dlperf.config import IterationPolicy, make_run_config  # noqa: E402
from dlperf.errors import ConfigError  # noqa: E402
from dlperf.worker import run_config  # noqa: E402

TINY_GPT2 = "hf:gpt2?layers=2&hidden=64&heads=2&vocab=512&seq=32"
TINY_T5 = "hf:t5?layers=1&hidden=32&heads=2&d_kv=16&d_ff=64&vocab=256&seq=16"
TINY_VIT = "hf:vit?layers=1&hidden=32&heads=2&ffn=64&image=32&patch_size=8&classes=10"
FAST = IterationPolicy(min_iters=4, min_time_s=0.0, warmup_window=2, min_warmup_iters=0,
                       max_warmup_iters=4)


@pytest.fixture
def one_thread():
    """One intra-op thread for runs (restored afterwards; see tests/zoo/test_zoo_more.py)."""
    n = torch.get_num_threads()
    yield 1
    torch.set_num_threads(n)


def test_gpt2_defaults_match_the_zoo_gpt2_small():
    """``hf:gpt2`` is GPT-2 small from transformers' defaults: its parameter count is the zoo's
    analytic one (= GPT2LMHeadModel's 124,439,808) and its counted forward FLOPs equal the
    zoo's formula at the same length; the source and the counter are recorded."""
    spec = zoo.get_spec("hf:gpt2")
    ours = zoo.SPECS["gpt2_small"]
    assert spec.family == "sources.hf" and spec.input_kind == "tokens"
    assert spec.params == ours.params == 124_439_808
    assert spec.input_shape == ours.input_shape == (1024,) and spec.num_classes == 50257
    assert spec.forward_flops_per_sample == ours.forward_flops_per_sample
    assert spec.train_flops_per_sample == 3 * spec.forward_flops_per_sample
    assert "FlopCounterMode" in spec.flops_source and "GPT2LMHeadModel" in spec.source
    assert spec.hyper["model_class"] == "GPT2LMHeadModel" and spec.optimizer.name == "adamw"


def test_tiny_counts_equal_the_real_model_on_the_cpu():
    """Parameters and FLOPs counted on the meta device equal those of the model built for real
    (math attention, so that every attention matmul is an ``aten`` op the counter sees)."""
    spec = zoo.get_spec(TINY_GPT2)
    torch.manual_seed(0)
    model = zoo.build(spec, "torch")
    assert sum(p.numel() for p in model.parameters()) == spec.params == 198_400
    x = torch.randint(0, spec.num_classes, (2, *spec.input_shape))
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        out = model(x)
    assert out.shape == (2, 32, 512)
    assert counter.get_total_flops() == 2 * spec.forward_flops_per_sample


def test_options_and_canonical_name():
    """Options in any order name one model (sorted in the name); they reach the config."""
    a = zoo.get_spec("hf:gpt2?vocab=512&seq=32&heads=2&hidden=64&layers=2")
    assert a.name == TINY_GPT2.replace("layers=2&hidden=64&heads=2&vocab=512&seq=32",
                                        "heads=2&hidden=64&layers=2&seq=32&vocab=512")
    assert a == zoo.get_spec(TINY_GPT2)
    assert a.input_shape == (32,) and a.num_classes == 512 and a.tokens_per_sample == 32
    assert a.hyper["options"] == {"vocab": 512, "seq": 32, "heads": 2, "hidden": 64,
                                  "layers": 2}
    # GPT-2's token ids (50256) are beyond a vocabulary of 512: clipped, and said so
    assert a.hyper["clipped_token_ids"] == {"bos_token_id": 50256, "eos_token_id": 50256}
    # the resolved config is the model's code fingerprint: another config, another code
    b = zoo.get_spec("hf:gpt2?vocab=512&seq=32&heads=2&hidden=64&layers=3")
    assert a.code and a.code.startswith("sha256:") and b.code and a.code != b.code


def test_a_local_config_json_is_the_same_model(tmp_path):
    """``hf:PATH`` reads a config.json (file or folder); options apply on top."""
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=512)
    cfg.save_pretrained(tmp_path)  # writes tmp_path/config.json, nothing else
    by_file = zoo.get_spec(f"hf:{tmp_path / 'config.json'}?seq=32")
    by_dir = zoo.get_spec(f"hf:{tmp_path}?seq=32")
    by_type = zoo.get_spec(TINY_GPT2)
    assert by_file.params == by_dir.params == by_type.params
    assert by_file.forward_flops_per_sample == by_type.forward_flops_per_sample
    assert by_file.hyper["config_path"] == str(tmp_path / "config.json")
    assert by_file.hyper["task"] == "causal-lm"  # from "architectures": GPT2LMHeadModel


def test_tasks():
    """An encoder-decoder type is a seq2seq LM on token pairs; BERT a masked LM; ViT an image
    classifier; ``task=`` picks another head the type has."""
    t5 = zoo.get_spec(TINY_T5)
    assert (t5.input_kind, t5.input_shape, t5.hyper["task"]) == ("token_pairs", (2, 16),
                                                                 "seq2seq-lm")
    assert not t5.default_io and t5.targets == (16,)
    vit = zoo.get_spec(TINY_VIT)
    assert (vit.input_kind, vit.input_shape, vit.num_classes) == ("image", (3, 32, 32), 10)
    bert = zoo.get_spec("hf:bert?layers=1&hidden=32&heads=2&ffn=64&vocab=128&seq=16")
    assert bert.hyper["task"] == "masked-lm" and bert.default_io
    causal = zoo.get_spec("hf:bert?layers=1&hidden=32&heads=2&ffn=64&vocab=128&seq=16"
                          "&task=causal-lm&is_decoder=true")
    assert causal.hyper["model_class"] == "BertLMHeadModel"


@pytest.mark.parametrize("name, words", [
    ("hf:lama", ["unknown Hugging Face model type 'lama'", "close: llama"]),
    ("hf:gpt2?layerz=2", ["GPT2Config has no attribute 'layerz'", "n_layer"]),
    ("hf:gpt2?ffn=128", ["has no attribute 'intermediate_size' (option 'ffn')"]),
    ("hf:gpt2?layers=2.5", ["layers=2.5", "takes int values"]),
    ("hf:gpt2?seq=2048", ["seq=2048 must be in 1..1024", "positions=N"]),
    ("hf:gpt2?task=image-classification", ["task 'image-classification' is not one of gpt2's"]),
    ("hf:gpt2?layers", ["option 'layers' is not KEY=VALUE"]),
    ("hf:./no/such/config.json", ["no config file", "no/such/config.json"]),
    ("hg:gpt2", ["unknown model source 'hg:'", "did you mean 'hf'"]),
    ("gpt2_smal", ["did you mean 'gpt2_small'", "hf:TYPE", "file:PATH.py:FUNCTION"]),
])
def test_clear_errors(name, words):
    with pytest.raises(ConfigError) as e:
        zoo.get_spec(name)
    for w in words:
        assert w in str(e.value)


def test_a_json_that_is_no_transformers_config(tmp_path):
    p = tmp_path / "config.json"
    p.write_text('{"hidden": 3}')
    with pytest.raises(ConfigError, match='no known "model_type"'):
        zoo.get_spec(f"hf:{p}")


def test_run_config_validates_and_canonicalises_the_name():
    cfg = make_run_config(model="hf:gpt2?seq=32&vocab=512&heads=2&hidden=64&layers=2",
                          batch_size=2)
    assert cfg.workload.model == zoo.get_spec(TINY_GPT2).name
    with pytest.raises(ConfigError, match="close: llama"):
        make_run_config(model="hf:lama", batch_size=2)


@pytest.mark.parametrize("name", [TINY_GPT2, TINY_T5, TINY_VIT])
def test_training_through_the_worker(name, one_thread):
    """dlperf.worker.run_config trains the hf model on the CPU (causal LM: the adapter's own
    batches and loss; T5: the source's token-pair hooks; ViT: images), finite losses, and the
    counted FLOPs and their source in the result."""
    spec = zoo.get_spec(name)
    r = run_config(make_run_config(model=name, batch_size=4, threads=one_thread,
                                   iterations=FAST))
    assert r["status"] == "ok", r["error"]
    assert r["spec"]["family"] == "sources.hf" and r["spec"]["params"] == spec.params
    assert r["spec"]["train_flops_per_sample"] == spec.train_flops_per_sample > 0
    assert r["spec"]["tokens_per_sample"] == spec.tokens_per_sample
    losses = r["losses"]["first"] + r["losses"]["warmup"] + r["losses"]["measure"]
    assert losses and all(math.isfinite(v) and v > 0 for v in losses)
    assert r["flags"]["optimizer"]["name"] == "adamw"


def test_grad_accumulation_and_bf16(one_thread):
    r = run_config(make_run_config(model=TINY_GPT2, batch_size=4, grad_accum=2,
                                   precision="bf16", threads=one_thread, iterations=FAST))
    assert r["status"] == "ok", r["error"]
    assert r["flags"]["grad_accum"] == 2
