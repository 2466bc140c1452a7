"""``file:`` models, ``dlperf.models`` entry points and ``timm:`` models
(dlperf.zoo.sources.custom and .timm): the contract, its errors, and runs on the CPU.

The entry point is registered the way pip does it: a ``*.dist-info`` folder with an
``entry_points.txt`` on ``sys.path``, read by ``importlib.metadata``. timm cannot be installed
beside this venv's CPU torch (its torchvision dependency comes only as a CUDA build that does
not import with it), so the glue of the ``timm:`` source is tested against a small stand-in
package named ``timm`` with the three functions dlperf calls (``is_model``, ``list_models``,
``create_model``); :func:`test_real_timm` runs the real one where it imports.
"""

from __future__ import annotations

import math
import os
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import dlperf.zoo as zoo  # noqa: E402
from dlperf.config import IterationPolicy, make_run_config  # noqa: E402
from dlperf.errors import ConfigError, UnavailableError  # noqa: E402
from dlperf.worker import run_config  # noqa: E402
from dlperf.zoo.sources.custom import torch_impl as custom_impl  # noqa: E402
from dlperf.zoo.spec import code_fingerprint  # noqa: E402

FAST = IterationPolicy(min_iters=4, min_time_s=0.0, warmup_window=2, min_warmup_iters=0,
                       max_warmup_iters=4)

NETS = '''
import torch

def mlp(width: int = 32, classes: int = 10):
    """A 16 -> width -> classes MLP on float features."""
    model = torch.nn.Sequential(torch.nn.Linear(16, width), torch.nn.ReLU(),
                                torch.nn.Linear(width, classes))
    def make_batch(batch_size, generator, device):
        x = torch.randn(batch_size, 16, generator=generator, device=device)
        y = torch.randint(0, classes, (batch_size,), generator=generator, device=device)
        return x, y
    return model, make_batch, torch.nn.functional.cross_entropy

def bag(vocab: int = 50, seq: int = 12):
    """Token ids -> mean embedding -> a score per sample, squared error."""
    class Bag(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(vocab, 8)
            self.out = torch.nn.Linear(8, 1)
        def forward(self, x):
            return self.out(self.emb(x).mean(1)).squeeze(1)
    def make_batch(batch_size, generator, device):
        x = torch.randint(0, vocab, (batch_size, seq), generator=generator, device=device)
        return x, torch.randn(batch_size, generator=generator, device=device)
    return Bag(), make_batch, torch.nn.functional.mse_loss

def two_parts():
    return torch.nn.Linear(2, 2), None

def one_tensor_batch():
    m, _, loss = mlp()
    return m, (lambda b, g, d: torch.randn(b, 16, generator=g, device=d)), loss

def vector_loss():
    m, make, _ = mlp()
    return m, make, lambda out, y: out.sum(1)

def not_torch():
    return "a model", (lambda b, g, d: None), (lambda o, y: None)

def short_batch():
    m, _, loss = mlp()
    def make_batch(b):
        return torch.randn(b, 16), torch.randint(0, 10, (b,))
    return m, make_batch, loss

def one_arg_loss():
    m, make, _ = mlp()
    return m, make, lambda out: out.sum()

def failing_batch():
    m, _, loss = mlp()
    def make_batch(batch_size, generator, device):
        raise TypeError("a bug inside make_batch")
    return m, make_batch, loss

def no_params():
    _, make, loss = mlp()
    return torch.nn.ReLU(), make, loss

def returns_int():
    return 3

def identity_model():
    _, make, loss = mlp()
    return torch.nn.Identity(), make, loss
'''


@pytest.fixture
def nets(tmp_path: Path) -> Path:
    p = tmp_path / "nets.py"
    p.write_text(NETS)
    return p


@pytest.fixture
def one_thread():
    n = torch.get_num_threads()
    yield 1
    torch.set_num_threads(n)


def _losses(r: dict) -> list[float]:
    return r["losses"]["first"] + r["losses"]["warmup"] + r["losses"]["measure"]


# --- file: -----------------------------------------------------------------------------------


def test_file_spec_counts_and_contract(nets):
    spec = zoo.get_spec(f"file:{nets}:mlp?width=64")
    assert spec.family == "sources.custom" and spec.loss == "custom" and not spec.default_io
    assert spec.params == 16 * 64 + 64 + 64 * 10 + 10
    # one sample: 2 * (16 * 64 + 64 * 10) FLOPs of the two Linear layers
    assert spec.forward_flops_per_sample == 2 * (16 * 64 + 64 * 10)
    assert (spec.input_kind, spec.input_shape, spec.targets, spec.num_classes) == \
        ("custom", (16,), (), 10)
    assert spec.hyper["kwargs"] == {"width": 64} and "FlopCounterMode" in spec.flops_source
    bag = zoo.get_spec(f"file:{nets}:bag")
    assert (bag.input_kind, bag.input_shape, bag.tokens_per_sample) == ("tokens", (12,), 12)


def test_file_name_is_absolute_and_canonical(nets, monkeypatch):
    monkeypatch.chdir(nets.parent)
    spec = zoo.get_spec("file:nets.py:mlp?classes=3&width=8")
    assert spec.name == f"file:{nets}:mlp?classes=3&width=8"
    assert zoo.get_spec("file:./nets.py:mlp?width=8&classes=3").name == spec.name


def test_an_edited_file_is_read_again(nets):
    """The spec is cached per name and file version: a notebook that edits the file gets the
    new model under the same name."""
    name = f"file:{nets}:mlp"
    assert zoo.get_spec(name).params == 16 * 32 + 32 + 32 * 10 + 10
    nets.write_text(NETS.replace("width: int = 32", "width: int = 4"))
    st = nets.stat()
    os.utime(nets, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # a later version, surely
    assert zoo.get_spec(name).params == 16 * 4 + 4 + 4 * 10 + 10
    assert sum(p.numel() for p in zoo.build(zoo.get_spec(name), "torch").parameters()) == 118


def test_each_build_is_a_fresh_model_and_the_hooks_are_its_parts(nets):
    spec = zoo.get_spec(f"file:{nets}:mlp")
    a, b = zoo.build(spec, "torch"), zoo.build(spec, "torch")
    assert a is not b
    g = torch.Generator().manual_seed(3)
    x, y = custom_impl.synthetic_batch(spec, 5, g, "cpu")
    assert x.shape == (5, 16) and y.shape == (5,)
    loss = custom_impl.loss_fn(spec)(b(x), y)
    assert loss.ndim == 0 and math.isfinite(loss.item())


@pytest.mark.parametrize("body, words", [
    ("missing.py:mlp", ["no such file", "missing.py"]),
    ("{nets}:mpl", ["has no function 'mpl'", "did you mean 'mlp'"]),
    ("{nets}:two_parts", ["must return (model, make_batch, loss)", "a 2-tuple of (Linear, "
                                                                  "NoneType)"]),
    ("{nets}:one_tensor_batch", ["must return (x, y)", "tensor (2, 16) float32"]),
    ("{nets}:vector_loss", ["one-element float tensor", "tensor (2,) float32"]),
    ("{nets}:not_torch", ["the model returned is a builtins.str", "torch.nn.Module"]),
    ("{nets}:mlp?widht=8", ["options ['widht'] do not fit mlp(width, classes)"]),
    ("{nets}:short_batch", ["make_batch returned is make_batch(b)", "dlperf calls make_batch("
                            "batch_size, generator, device)", "docs/zoo.md"]),
    ("{nets}:one_arg_loss", ["loss returned is <lambda>(out)", "dlperf calls loss(out, y)",
                             "docs/zoo.md"]),
    # a TypeError raised inside a make_batch of the right signature is the user's, named so
    ("{nets}:failing_batch", ["make_batch(2, generator, device) failed",
                              "a bug inside make_batch"]),
    ("{nets}:no_params", ["(a ReLU) has no trainable parameters", "at least one trainable"]),
    ("{nets}:returns_int", ["it returned an int"]),
    ("{nets}:identity_model", ["(an Identity) has no trainable parameters"]),
    ("{nets}", ["write file:PATH.py:FUNCTION"]),
])
def test_file_errors(nets, body, words):
    with pytest.raises(ConfigError) as e:
        zoo.get_spec("file:" + body.format(nets=nets))
    for w in words:
        assert w in str(e.value)


def test_file_model_through_the_worker(nets, one_thread):
    name = f"file:{nets}:mlp?width=64"
    r = run_config(make_run_config(model=name, batch_size=4, threads=one_thread,
                                   iterations=FAST))
    assert r["status"] == "ok", r["error"]
    assert r["model"] == name and r["spec"]["family"] == "sources.custom"
    assert r["spec"]["params"] == zoo.get_spec(name).params
    assert all(math.isfinite(v) and v > 0 for v in _losses(r)) and _losses(r)


def test_file_model_with_grad_accumulation(nets, one_thread):
    r = run_config(make_run_config(model=f"file:{nets}:bag", batch_size=4, grad_accum=2,
                                   threads=one_thread, iterations=FAST))
    assert r["status"] == "ok", r["error"]
    assert r["throughput"]["tokens_per_s"] == pytest.approx(
        r["throughput"]["samples_per_s"] * 12)


# --- entry points ----------------------------------------------------------------------------


def make_plugin(root: Path) -> Path:
    """A package ``dlperf_test_plugin`` registering model ``plugin_mlp`` through entry points,
    laid out as pip installs it (package folder + dist-info) under ``root``."""
    pkg = root / "dlperf_test_plugin"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(NETS)
    info = root / "dlperf_test_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: dlperf-test-plugin\n"
                                   "Version: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent("""\
        [dlperf.models]
        plugin_mlp = dlperf_test_plugin:mlp
        plugin_broken = dlperf_test_plugin:no_such_function
        """))
    return root


@pytest.fixture
def plugin(tmp_path, monkeypatch) -> Path:
    root = make_plugin(tmp_path / "site")
    monkeypatch.syspath_prepend(str(root))
    yield root
    sys.modules.pop("dlperf_test_plugin", None)


def test_entry_point_model(plugin, one_thread):
    spec = zoo.get_spec("plugin_mlp?width=8")
    assert spec.name == "plugin_mlp?width=8" and spec.family == "sources.custom"
    assert spec.params == 16 * 8 + 8 + 8 * 10 + 10
    assert spec.hyper["distribution"] == "dlperf-test-plugin"
    assert spec.hyper["value"] == "dlperf_test_plugin:mlp"
    # the entry point's module file is the model's code fingerprint
    src = (plugin / "dlperf_test_plugin" / "__init__.py").read_bytes()
    assert spec.code == code_fingerprint(src)
    r = run_config(make_run_config(model="plugin_mlp?width=8", batch_size=4,
                                   threads=one_thread, iterations=FAST))
    assert r["status"] == "ok", r["error"]
    assert _losses(r) and all(math.isfinite(v) for v in _losses(r))


def test_entry_point_errors(plugin):
    with pytest.raises(ConfigError, match="entry point plugin_broken .* does not load"):
        zoo.get_spec("plugin_broken")
    # an unknown name suggests the registered ones beside the zoo's
    with pytest.raises(ConfigError, match="did you mean 'plugin_mlp'"):
        zoo.get_spec("plugin_mpl")


# --- timm: -----------------------------------------------------------------------------------

TIMM_STANDIN = '''
"""A stand-in for timm in tests: the three functions dlperf calls."""
import torch
__version__ = "0-standin"

class TinyNet(torch.nn.Module):
    def __init__(self, num_classes=1000, drop_rate=0.0):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.drop = torch.nn.Dropout(drop_rate)
        self.fc = torch.nn.Linear(8, num_classes)
        self.num_classes = num_classes
        self.pretrained_cfg = {"input_size": (3, 32, 32)}
    def forward(self, x):
        return self.fc(self.drop(self.conv(x).relu().mean((2, 3))))

def list_models(pattern=""):
    return ["tinynet_a", "tinynet_b"]

def is_model(name):
    return name in list_models()

def create_model(name, pretrained=False, **kwargs):
    assert not pretrained, "dlperf must never ask for pretrained weights"
    return TinyNet(**kwargs)
'''


@pytest.fixture
def timm_standin(tmp_path, monkeypatch):
    (tmp_path / "standin" / "timm").mkdir(parents=True)
    (tmp_path / "standin" / "timm" / "__init__.py").write_text(TIMM_STANDIN)
    monkeypatch.syspath_prepend(str(tmp_path / "standin"))
    monkeypatch.delitem(sys.modules, "timm", raising=False)
    yield
    sys.modules.pop("timm", None)


def test_timm_source_glue(timm_standin, one_thread):
    spec = zoo.get_spec("timm:tinynet_a?classes=10&image=16&drop_rate=0.1")
    assert spec.family == "sources.timm" and spec.default_io and spec.input_kind == "image"
    assert spec.input_shape == (3, 16, 16) and spec.num_classes == 10
    assert spec.params == 3 * 8 * 9 + 8 + 8 * 10 + 10
    assert spec.forward_flops_per_sample == 2 * (16 * 16 * 8 * 27 + 8 * 10)
    assert spec.optimizer.name == "sgd" and spec.optimizer.lr == 0.1
    r = run_config(make_run_config(model=spec.name, batch_size=4, threads=one_thread,
                                   iterations=FAST))
    assert r["status"] == "ok", r["error"]
    assert _losses(r) and all(math.isfinite(v) for v in _losses(r))


def test_timm_errors(timm_standin):
    with pytest.raises(ConfigError,
                       match="unknown timm model 'tinynet_c'.*close: tinynet_b, tinynet_a"):
        zoo.get_spec("timm:tinynet_c")
    with pytest.raises(ConfigError, match="create_model refused its options"):
        zoo.get_spec("timm:tinynet_a?depth=3")
    with pytest.raises(ConfigError, match="classes=0 must be a positive integer"):
        zoo.get_spec("timm:tinynet_a?classes=0")


def test_timm_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "timm", None)  # import timm -> ModuleNotFoundError
    with pytest.raises(UnavailableError, match="pip install timm"):
        zoo.get_spec("timm:resnet18?classes=7")


def test_real_timm():
    """The real timm, where it imports (not in this repository's CPU venv: see the module
    docstring): resnet18 has 11,689,512 parameters and 1.82 G multiply-adds per 224x224
    image (3.6 GFLOPs at 2 FLOPs each)."""
    try:
        import timm  # noqa: F401
    except Exception as e:  # not installed, or a torchvision for another torch
        pytest.skip(f"timm does not import here: {e!r:.200}")
    spec = zoo.get_spec("timm:resnet18")
    assert spec.params == 11_689_512 and spec.input_shape == (3, 224, 224)
    assert spec.forward_flops_per_sample == pytest.approx(2 * 1.814e9, rel=0.01)


@pytest.mark.parametrize("framework", ["tensorflow", "jax"])
def test_a_torch_file_under_another_framework_is_refused_naming_torch(nets, framework):
    """A torch file run with --framework tensorflow/jax is refused by the config before a
    worker starts, naming --framework torch."""
    with pytest.raises(ConfigError, match="is a torch model .* not a "
                                          f"{framework} one; run it with --framework torch"):
        make_run_config(model=f"file:{nets}:mlp", framework=framework, batch_size=8)
