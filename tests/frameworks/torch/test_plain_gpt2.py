"""GPT-2 small in the plain reference loops (benchmarks/plain_torch_loop.py and
benchmarks/plain_jax_loop.py): parameter counts, one short CPU run each, and the same function
as dlperf's zoo.

The plain loops are dlperf's yardsticks (issue 3: dlperf's throughput must be at least 0.95 of
theirs for gpt2_small), so they must train *the same model* as dlperf: the parameter counts are
checked against dlperf's analytic counts (GPT-2 small: 124,439,808, Hugging Face's count for
``gpt2``), and with the same weights all four implementations (plain torch, plain JAX, dlperf
torch, dlperf Flax) must give the same logits. dlperf is imported here, in the test, never in
the plain loops (checked too).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from script_runs import main_runs_in_one_process

ROOT = Path(__file__).resolve().parents[3]
TORCH_SCRIPT = ROOT / "benchmarks" / "plain_torch_loop.py"
JAX_SCRIPT = ROOT / "benchmarks" / "plain_jax_loop.py"

HAVE_TORCH = importlib.util.find_spec("torch") is not None
HAVE_JAX = all(importlib.util.find_spec(m) is not None for m in ("jax", "flax", "optax"))
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="needs torch")
needs_jax = pytest.mark.skipif(not HAVE_JAX, reason="needs jax, flax and optax")

#: Hugging Face GPT2LMHeadModel's count for "gpt2" (issue 3 / docs/zoo.md), written out.
GPT2_SMALL_PARAMS = 124_439_808


def _load(path: Path, name: str):
    """Import a benchmark script as a module (it only defines things at import). Registered
    in ``sys.modules`` first: Flax modules are dataclasses, which look their module up."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _run(script: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "JAX_PLATFORMS": "cpu"}
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True,
                          timeout=120, env=env)


def _tiny_spec():
    from dlperf.zoo.transformer.spec import SPECS

    return SPECS["gpt2_small_tiny"]


@pytest.mark.parametrize("script", [TORCH_SCRIPT, JAX_SCRIPT], ids=["torch", "jax"])
def test_plain_loops_do_not_import_dlperf(script):
    imported = set()
    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert "torch" in imported or "jax" in imported  # the walk sees the imports
    assert "dlperf" not in imported and "importlib" not in imported


def test_dlperf_analytic_counts_are_the_published_ones():
    from dlperf.zoo.transformer.spec import SPECS

    assert SPECS["gpt2_small"].params == GPT2_SMALL_PARAMS
    # The tiny variant must keep the hyper-parameters the plain loops copy.
    h = _tiny_spec().hyper
    assert (h["vocab"], h["seq_len"], h["layers"], h["d_model"], h["heads"], h["ffn"],
            h["dropout"]) == (256, 32, 2, 32, 2, 64, 0.1)


@needs_torch
def test_torch_parameter_counts():
    import torch

    mod = _load(TORCH_SCRIPT, "_bench_plain_torch_loop")
    assert mod.GPT2_SIZES["gpt2_small_tiny"] == (256, 32, 2, 32, 2, 64, 0.1)
    with torch.device("meta"):  # no memory, no init cost: shapes only
        full, kind, shape, vocab, _ = mod.build_model("gpt2_small", None)
    assert (kind, shape, vocab) == ("tokens", (1024,), 50257)
    assert sum(p.numel() for p in full.parameters()) == GPT2_SMALL_PARAMS
    # Tied output projection: no separate lm_head weight, no output bias.
    assert not any("lm_head" in n for n, _ in full.named_parameters())
    tiny = mod.build_model("gpt2_small_tiny", None)[0]
    assert sum(p.numel() for p in tiny.parameters()) == _tiny_spec().params
    with pytest.raises(ValueError, match="seq-len 2048"):
        mod.build_model("gpt2_small", 2048)


@needs_jax
def test_jax_parameter_counts():
    import jax
    import jax.numpy as jnp

    mod = _load(JAX_SCRIPT, "_bench_plain_jax_loop")
    assert mod.GPT2_SIZES["gpt2_small_tiny"] == (256, 32, 2, 32, 2, 64, 0.1)

    def count(name: str) -> int:
        model, kind, shape, vocab = mod.build_model(name, jnp.float32)
        assert (kind, shape, vocab) == (("tokens", (1024,), 50257) if name == "gpt2_small"
                                        else ("tokens", (32,), 256))
        shapes = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0),
                                                   jnp.zeros((1, *shape), jnp.int32),
                                                   train=False))
        leaves = jax.tree_util.tree_leaves(shapes["params"])
        assert all(leaf.dtype == jnp.float32 for leaf in leaves)  # fp32 parameters
        return sum(math.prod(leaf.shape) for leaf in leaves)

    assert count("gpt2_small") == GPT2_SMALL_PARAMS
    assert count("gpt2_small_tiny") == _tiny_spec().params


@pytest.fixture(scope="module")
def torch_runs(tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, Path]]:
    """The plain PyTorch loop's gpt2_small_tiny CPU runs (batch 2, 3 iterations) in fp32 and
    in bf16 (fused AdamW) in one process (:func:`script_runs.main_runs_in_one_process`: one
    PyTorch start-up; each run sets its precision's flags itself): precision -> (its
    completed run, its ``--json`` file)."""
    d = tmp_path_factory.mktemp("plain_gpt2")
    lines = {p: ["--model", "gpt2_small_tiny", "--batch-size", "2", "--device", "cpu",
                 "--precision", p, "--warmup", "1", "--iters", "3", "--json", str(d / f"{p}.json"),
                 *(["--optimizer-impl", "fused"] if p == "bf16" else [])]
             for p in ("fp32", "bf16")}
    env = {**os.environ, "OMP_NUM_THREADS": "1", "JAX_PLATFORMS": "cpu"}
    done = main_runs_in_one_process(TORCH_SCRIPT, lines, env, timeout_s=240)
    return {p: (done[p], d / f"{p}.json") for p in lines}


@needs_torch
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_torch_cpu_run(torch_runs, precision):
    # tf32 sets the same model-independent flags as for every model: tests/frameworks/torch/test_plain_loop.py.
    proc, out = torch_runs[precision]
    batch = 2
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(out.read_text())
    # The same fields as every other model's result (tests/frameworks/torch/test_plain_loop.py).
    for key in ("model", "batch_size", "precision", "device", "iters", "warmup",
                "sync_every_step", "mean_step_s", "samples_per_s", "tokens_per_s", "repeats",
                "params", "seq_len", "flags", "torch_version", "device_name"):
        assert key in r, key
    assert (r["model"], r["batch_size"], r["precision"]) == ("gpt2_small_tiny", batch, precision)
    assert r["params"] == _tiny_spec().params and r["seq_len"] == 32
    assert r["samples_per_s"] * r["mean_step_s"] == pytest.approx(batch, rel=1e-9)
    assert r["tokens_per_s"] == pytest.approx(r["samples_per_s"] * 32, rel=1e-9)
    f = r["flags"]
    assert f["allow_tf32_matmul"] is (precision == "tf32")
    assert f["allow_tf32_cudnn"] is (precision == "tf32")
    if "matmul_fp32_precision" in f:  # PyTorch >= 2.9: the fp32_precision API, set explicitly
        want = "tf32" if precision == "tf32" else "ieee"
        assert f["matmul_fp32_precision"] == f["cudnn_conv_fp32_precision"] == want
    assert f["autocast_bf16"] is (precision == "bf16")
    assert f["optimizer"] == "AdamW"
    d = f["optimizer_defaults"]
    assert (d["lr"], d["betas"], d["eps"], d["weight_decay"]) == (6e-4, [0.9, 0.95], 1e-8, 0.1)
    impl = "fused" if precision == "bf16" else "foreach"  # auto = foreach on CPU
    assert f["optimizer_impl"] == impl and d[impl] is True


@needs_jax
def test_jax_cpu_run(tmp_path):
    # fp32: XLA:CPU compiles the bf16 step twice as slowly (about 6 s against 3 s here); the
    # bf16 model is checked in test_four_implementations_compute_the_same_function, the bf16
    # step of the shared loop code in tests/frameworks/jax/test_plain_jax_loop.py (lstm_tiny).
    out = tmp_path / "r.json"
    batch, iters = 2, 3
    proc = _run(JAX_SCRIPT, "--model", "gpt2_small_tiny", "--batch-size", str(batch),
                "--device", "cpu", "--precision", "fp32", "--warmup", "1",
                "--iters", str(iters), "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(out.read_text())
    for key in ("model", "batch_size", "precision", "device", "iters", "warmup", "mean_step_s",
                "samples_per_s", "tokens_per_s", "params", "seq_len", "final_loss", "flags",
                "compile_s", "jax_version", "device_name"):
        assert key in r, key
    assert r["params"] == _tiny_spec().params and r["seq_len"] == 32
    assert math.isclose(r["samples_per_s"] * r["mean_step_s"], batch, rel_tol=1e-9)
    assert math.isclose(r["tokens_per_s"], r["samples_per_s"] * 32, rel_tol=1e-9)
    # Random tokens over a 256-word vocabulary: the loss starts near ln(256) = 5.55.
    assert 4.5 < r["final_loss"] < 6.5
    f = r["flags"]
    assert f["compute_dtype"] == "float32" and f["param_dtype"] == "float32"
    assert f["default_matmul_precision"] == "highest"  # fp32 = TF32 off
    assert f["prng_impl"] == "rbg" and f["optimizer"].startswith("adamw(lr=6e-4")
    assert "attention dropout" in f["attention"]


@needs_torch
@needs_jax
def test_four_implementations_compute_the_same_function():
    """Plain torch, plain JAX, dlperf torch and dlperf Flax GPT-2 (tiny) on the same weights
    give the same logits (eval mode: no dropout), so the yardsticks train dlperf's model."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch

    from dlperf.zoo.convert import torch_to_flax
    from dlperf.zoo.transformer import jax_impl, torch_impl

    spec = _tiny_spec()
    pt = _load(TORCH_SCRIPT, "_bench_plain_torch_loop")
    pj = _load(JAX_SCRIPT, "_bench_plain_jax_loop")
    torch.manual_seed(0)
    plain_t = pt.build_model("gpt2_small_tiny", None)[0].eval()
    sd = plain_t.state_dict()
    with torch.no_grad():
        # Weights large enough that activations reach O(1) (GPT-2's N(0, 0.02) keeps them so
        # small that GELU's tanh form and erf form agree to 1e-6), visible biases and
        # LayerNorm affine terms (they start at 0 and 1).
        for v in sd.values():
            if v.dim() == 2:
                v.normal_(0.0, 0.3)
            else:
                v.add_(0.1 * torch.randn_like(v))

    # dlperf's torch model: rename Hugging Face names to dlperf's.
    def to_dlperf(n: str) -> str:
        for a, b in ((".attn.c_attn.", ".attn.qkv."), (".attn.c_proj.", ".attn.proj."),
                     (".c_fc.", ".mlp.0."), (".c_proj.", ".mlp.2."), (".ln_1.", ".ln1."),
                     (".ln_2.", ".ln2.")):
            n = n.replace(a, b)
        return n.replace("h.", "blocks.", 1) if n.startswith("h.") else n

    dl_t = torch_impl.build(spec).eval()
    dl_t.load_state_dict({to_dlperf(n): v for n, v in sd.items()})

    # Plain JAX: Linear weight [out, in] -> Dense kernel [in, out]; LayerNorm weight -> scale.
    def np_(t):
        return t.detach().numpy()

    params: dict = {"wte": np_(sd["wte.weight"]), "wpe": np_(sd["wpe.weight"])}
    for name, v in sd.items():
        if not name.startswith("h."):
            continue
        _, i, *mod, leaf = name.split(".")
        block = params.setdefault(f"h_{i}", {})
        key = {"attn.c_attn": "c_attn", "attn.c_proj": "attn_c_proj"}.get(".".join(mod),
                                                                             mod[-1])
        if key.startswith("ln"):
            block.setdefault(key, {})["scale" if leaf == "weight" else "bias"] = np_(v)
        else:
            block.setdefault(key, {})["kernel" if leaf == "weight" else "bias"] = (
                np_(v).T if leaf == "weight" else np_(v))
    params["ln_f"] = {"scale": np_(sd["ln_f.weight"]), "bias": np_(sd["ln_f.bias"])}

    tokens = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = plain_t(tokens).numpy()
        got_dl_t = dl_t(tokens).numpy()
    jt = jnp.asarray(tokens.numpy(), jnp.int32)
    plain_j = pj.build_model("gpt2_small_tiny", jnp.float32)[0]
    with jax.default_matmul_precision("highest"):
        got_pj = np.asarray(plain_j.apply({"params": params}, jt, train=False))
        dl_f = jax_impl.build(spec)
        got_dl_f = np.asarray(dl_f.apply(torch_to_flax(spec, dl_t.state_dict()), jt,
                                         train=False))
    assert want.shape == (2, 32, 256)
    assert np.abs(want).max() > 0.1  # a real signal, not all zeros
    np.testing.assert_allclose(got_dl_t, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_pj, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got_dl_f, want, rtol=1e-4, atol=1e-4)

    # The plain JAX model in bf16 compute (what --precision bf16 runs): bf16 logits from the
    # float32 parameters, within bf16 rounding of the float32 logits.
    plain_j16 = pj.build_model("gpt2_small_tiny", jnp.bfloat16)[0]
    got16 = plain_j16.apply({"params": params}, jt, train=False)
    assert got16.dtype == jnp.bfloat16
    err = np.abs(np.asarray(got16, np.float32) - want).max()
    assert 0 < err < 0.05 * np.abs(want).max()
