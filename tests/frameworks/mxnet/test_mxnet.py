"""The MXNet backend (MXNet 1.9.1 in its own interpreter, ``$DLPERF_MXNET_PYTHON``).

Without the MXNet interpreter (framework-free checks):
* bad configurations (cuda, bf16, data parallel, nhwc, a pipeline) are refused before anything
  runs, and a missing or broken interpreter is one ConfigError naming the variable and how to
  make the environment, also through the CLI (exit 2);
* the PyTorch -> Gluon name mapping and its refusals;
* the folder follows the adapter contract (TrainingRun, step.py, input.py, short functions).

With it (``.ci/run`` makes it; elsewhere these tests skip and say why, unless
``DLPERF_REQUIRE_MXNET=1`` makes a missing interpreter a failure):
* every MXNet model (tiny variants, and the cheap full ones) has ``spec.params`` trainable
  parameters and the documented output shape;
* with PyTorch's weights loaded, every tiny model computes PyTorch's forward pass (inference
  mode, BN statistics randomised; training-mode BN for the CNNs without dropout) within float32
  tolerance, and two SGD-momentum steps of the adapter's own staged step, loss and trainer move
  the weights as PyTorch's do;
* the staged step marks its stages in order, and the fused step (no-op marks) computes what the
  staged step computes (runs prepared by the adapter);
* the engine is asynchronous (so the adapter's wait is needed), and ``dlperf run --framework
  mxnet`` works end to end in eager and graph mode through the launcher, stored with the MXNet
  version.
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

import dlperf.zoo as zoo
from dlperf.config import make_run_config
from dlperf.errors import ConfigError
from dlperf.launch.process import check_framework_python, framework_python
from dlperf.zoo.convert_mxnet import mxnet_name, torch_to_mxnet

ROOT = Path(__file__).resolve().parents[3]
SIDE = Path(__file__).with_name("mxnet_side.py")
TINY = ["fcn5_tiny", "fcn8_tiny", "fcn_mnist_tiny", "alexnet_tiny", "alexnet_cifar_tiny",
        "resnet50_tiny", "resnet56_tiny", "lstm_tiny"]
#: Full models whose Gluon parameters are cheap to allocate (counts only).
FULL_CHEAP = ["fcn_mnist", "alexnet_cifar", "resnet56", "resnet50", "lstm"]
#: Models without dropout: their training-mode forward is deterministic (BN batch statistics).
TRAIN_MODE = {"alexnet_cifar_tiny", "resnet56_tiny", "resnet50_tiny", "fcn5_tiny"}
#: float32 forward parity: max |mxnet - torch| <= PARITY_REL * max |torch| (summation orders
#: differ between oneDNN builds; measured well below this on an AMD EPYC).
PARITY_REL = 1e-5


def _mxnet_python() -> str:
    """The MXNet interpreter: ``$DLPERF_MXNET_PYTHON``, else ``.venv-mxnet`` of the checkout."""
    path = os.environ.get("DLPERF_MXNET_PYTHON") or str(ROOT / ".venv-mxnet" / "bin" / "python")
    if Path(path).is_file():
        return path
    why = (f"no MXNet interpreter ({path} does not exist); make it with `python3 -m venv "
           f".venv-mxnet && .venv-mxnet/bin/pip install -r requirements-mxnet.txt`")
    if os.environ.get("DLPERF_REQUIRE_MXNET") == "1":
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture(scope="module")
def mxpy() -> str:
    return _mxnet_python()


# --- without MXNet ---------------------------------------------------------------------------


@pytest.mark.parametrize("kw, words", [
    ({"device": "cuda"}, ["device 'cuda'", "cpu only", "--device cpu"]),
    ({"precision": "bf16"}, ["precision 'bf16'", "--precision fp32"]),
    ({"nproc": 2}, ["data parallelism", "--nproc 1"]),
    ({"layout": "nhwc"}, ["nhwc", "NCHW"]),
    # found by a fresh user: these started a worker and were stored as errors
    ({"model": "vgg16_tiny"}, ["'vgg16_tiny' has no mxnet implementation", "resnet56"]),
    ({"model": "deepspeech2_tiny"}, ["has no mxnet implementation"]),
    ({"breakdown": True}, ["--breakdown, --trace and --timeline are not available", "mxnet"]),
    ({"data": "imagefolder:/tmp/x"}, ["no input pipeline", "synthetic"]),
])
def test_config_refuses_what_mxnet_cannot_do(kw, words):
    with pytest.raises(ConfigError) as e:
        make_run_config(framework="mxnet", batch_size=8,
                        **{"device": "cpu", "model": "fcn5_tiny", **kw})
    for w in words:
        assert w in str(e.value)
    cfg = make_run_config(model="fcn5_tiny", framework="mxnet", device="cpu", batch_size=8)
    assert cfg.runtime.mode == "eager" and cfg.hardware.precision == "fp32"
    assert make_run_config(model="fcn5_tiny", framework="mxnet", device="cpu", batch_size=8,
                           mode="graph").runtime.mode == "graph"


def test_missing_or_broken_interpreter_is_one_clear_error(monkeypatch, tmp_path):
    monkeypatch.delenv("DLPERF_MXNET_PYTHON", raising=False)
    assert framework_python("torch") is None  # the others run in this interpreter
    with pytest.raises(ConfigError, match="DLPERF_MXNET_PYTHON, which is not set.*"
                                          "requirements-mxnet.txt"):
        framework_python("mxnet")
    monkeypatch.setenv("DLPERF_MXNET_PYTHON", str(tmp_path / "nope" / "python"))
    with pytest.raises(ConfigError, match="is not an executable Python interpreter"):
        framework_python("mxnet")
    # An interpreter without mxnet (this one, numpy 2): the import error is quoted.
    monkeypatch.setenv("DLPERF_MXNET_PYTHON", sys.executable)
    if subprocess.run([sys.executable, "-c", "import mxnet"], capture_output=True).returncode == 0:
        pytest.skip("this interpreter has mxnet")
    with pytest.raises(ConfigError, match="cannot run dlperf's mxnet worker.*mxnet"):
        check_framework_python("mxnet")


def test_an_interpreter_that_reports_no_version_is_refused(monkeypatch, tmp_path):
    fake = tmp_path / "python"  # exits 0 and prints nothing, like /bin/true
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("DLPERF_MXNET_PYTHON", str(fake))
    with pytest.raises(ConfigError, match="did not report a mxnet version"):
        check_framework_python("mxnet")


def test_cli_refuses_mxnet_without_its_interpreter(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "DLPERF_MXNET_PYTHON"}
    env["PYTHONPATH"] = str(ROOT / "src")
    cp = subprocess.run([sys.executable, "-m", "dlperf", "run", "--framework", "mxnet",
                         "--model", "fcn5_tiny", "--device", "cpu", "-b", "4", "--db",
                         str(tmp_path / "r.db")], capture_output=True, text=True, env=env,
                        timeout=120)
    assert cp.returncode == 2, cp.stderr
    assert "DLPERF_MXNET_PYTHON" in cp.stderr and "venv" in cp.stderr
    assert not (tmp_path / "r.db").exists() or sqlite3.connect(tmp_path / "r.db").execute(
        "select count(*) from results").fetchone()[0] == 0


def test_torch_names_map_to_gluon_names():
    bn = {"bn1", "layers.0.bn2"}
    assert mxnet_name("bn1.weight", bn) == "bn1.gamma"
    assert mxnet_name("layers.0.bn2.bias", bn) == "layers.0.bn2.beta"
    assert mxnet_name("layers.0.bn2.running_var", bn) == "layers.0.bn2.running_var"
    assert mxnet_name("lstm.weight_ih_l1", bn) == "lstm.l1_i2h_weight"
    assert mxnet_name("lstm.bias_hh_l0", bn) == "lstm.l0_h2h_bias"
    assert mxnet_name("layers.0.weight", bn) == "layers.0.weight"  # Linear: unchanged
    sd = {"a.weight": np.zeros((2, 3)), "bn.weight": np.ones(2), "bn.bias": np.zeros(2),
          "bn.running_mean": np.zeros(2), "bn.running_var": np.ones(2),
          "bn.num_batches_tracked": np.array(0)}
    shapes = {"a.weight": (2, 3), "bn.gamma": (2,), "bn.beta": (2,), "bn.running_mean": (2,),
              "bn.running_var": (2,)}
    out = torch_to_mxnet(sd, shapes)
    assert set(out) == set(shapes) and out["bn.gamma"].dtype == np.float32
    with pytest.raises(ValueError, match="shape"):
        torch_to_mxnet({**sd, "a.weight": np.zeros((3, 2))}, shapes)
    with pytest.raises(ValueError, match="unused PyTorch tensors.*extra"):
        torch_to_mxnet({**sd, "extra": np.zeros(1)}, shapes)
    with pytest.raises(ValueError, match="without a tensor.*a.weight"):
        torch_to_mxnet({k: v for k, v in sd.items() if k != "a.weight"}, shapes)


def test_adapter_is_a_training_run_in_the_standard_files():
    """The MXNet folder follows the adapter contract (issue 19): its run is a TrainingRun with
    the staged step in step.py and the batches in input.py, no function over 120 lines, and
    what it cannot do is a registry capability (no breakdown: no phased step or profile)."""
    import ast

    from dlperf.frameworks.base import TrainingRun
    from dlperf.frameworks.mxnet import adapter, step
    from dlperf.frameworks.mxnet import input as mx_input
    from dlperf.registry import FRAMEWORKS

    assert issubclass(adapter.MXNetRun, TrainingRun)
    assert adapter.MXNetRun.staged_step is not TrainingRun.staged_step
    assert adapter.MXNetRun.phased_step is None and adapter.MXNetRun.profile is None
    assert FRAMEWORKS["mxnet"].breakdown is False and FRAMEWORKS["mxnet"].python_env
    assert adapter.MXNetAdapter.modes == FRAMEWORKS["mxnet"].modes
    folder = Path(adapter.__file__).parent
    assert {p.name for p in folder.glob("*.py")} >= {"adapter.py", "step.py", "input.py"}
    assert callable(step.GluonStep) and callable(mx_input.make_data)
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                assert n <= 120, f"{path.name}:{node.lineno} {node.name} has {n} lines"


# --- with MXNet: parity against PyTorch -------------------------------------------------------


def _batch(spec, batch: int, seed: int):
    import torch

    g = torch.Generator().manual_seed(seed)
    if spec.input_kind == "tokens":
        x = torch.randint(0, spec.num_classes, (batch, *spec.input_shape), generator=g)
        y = torch.randint(0, spec.num_classes, (batch, *spec.input_shape), generator=g)
    else:
        x = torch.randn((batch, *spec.input_shape), generator=g)
        y = torch.randint(0, spec.num_classes, (batch,), generator=g)
    return x, y


@pytest.fixture(scope="module")
def parity(mxpy, tmp_path_factory):
    """Run tests/frameworks/mxnet/mxnet_side.py once for all models; returns (torch results, mxnet results)."""
    torch = pytest.importorskip("torch")
    tmp = tmp_path_factory.mktemp("mxnet")
    data: dict[str, np.ndarray] = {"models": np.array(TINY + FULL_CHEAP)}
    want: dict[str, dict] = {}
    for name in TINY + FULL_CHEAP:
        spec = zoo.get_spec(name)
        torch.manual_seed(0)
        tm = zoo.build_torch(spec)
        tiny = name in TINY
        with torch.no_grad():  # randomised BN statistics: the inference mapping is tested
            for m in tm.modules():
                if isinstance(m, torch.nn.BatchNorm2d):
                    m.running_mean.uniform_(-0.5, 0.5)
                    m.running_var.uniform_(0.5, 1.5)
        x, _ = _batch(spec, 4 if tiny else 2, 1)
        data[f"{name}/x"] = x.numpy().astype(np.float32)
        data[f"{name}/hybridize"] = np.array(name == "resnet56_tiny")
        data[f"{name}/train_mode"] = np.array(name in TRAIN_MODE)
        for k, v in tm.state_dict().items():
            data[f"{name}/sd/{k}"] = v.detach().numpy().copy()  # not a view
        w: dict = {"n_params": spec.params}
        if tiny:
            tm.eval()
            with torch.no_grad():
                w["eval"] = tm(x).numpy()
            if name in TRAIN_MODE:
                tm.train()
                with torch.no_grad():
                    w["train"] = tm(x).numpy()
                bns = [m for m in tm.modules() if isinstance(m, torch.nn.BatchNorm2d)]
                if bns:
                    w["running_mean"] = bns[0].running_mean.numpy().copy()
                    w["running_var"] = bns[0].running_var.numpy().copy()
                    w["n_bn"] = x.shape[0] * x.shape[2] * x.shape[3]
        if name in ("fcn5_tiny", "resnet56_tiny"):  # two SGD-momentum steps
            torch.manual_seed(0)
            tm = zoo.build_torch(spec)
            with torch.no_grad():
                for m in tm.modules():
                    if isinstance(m, torch.nn.BatchNorm2d):
                        m.running_mean.uniform_(-0.5, 0.5)
                        m.running_var.uniform_(0.5, 1.5)
            for k, v in tm.state_dict().items():
                data[f"{name}/sd/{k}"] = v.detach().numpy().copy()  # not a view
            tm.train()
            o = spec.optimizer
            opt = torch.optim.SGD(tm.parameters(), lr=o.lr, momentum=o.momentum,
                                  weight_decay=o.weight_decay)
            losses = []
            for i in range(2):
                xs, ys = _batch(spec, 8, 10 + i)
                data[f"{name}/step_x{i}"] = xs.numpy().astype(np.float32)
                data[f"{name}/step_y{i}"] = ys.numpy().astype(np.float32)
                opt.zero_grad()
                loss = torch.nn.functional.cross_entropy(tm(xs), ys)
                loss.backward()
                opt.step()
                losses.append(float(loss.detach()))
            w["step_loss"] = np.array(losses)
            w["step_w"] = next(iter(tm.parameters())).detach().numpy().copy()
        want[name] = w
    np.savez(tmp / "in.npz", **data)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    cp = subprocess.run([mxpy, str(SIDE), str(tmp / "in.npz"), str(tmp / "out.npz")],
                        capture_output=True, text=True, env=env, timeout=300)
    assert cp.returncode == 0, cp.stderr[-3000:]
    got = np.load(tmp / "out.npz")
    return want, {k: got[k] for k in got.files}


def _expected_shape(spec, batch: int) -> tuple:
    if spec.input_kind == "tokens":
        return (batch, *spec.input_shape, spec.num_classes)
    return (batch, spec.num_classes)


@pytest.mark.parametrize("name", TINY + FULL_CHEAP)
def test_parameter_count_and_output_shape(parity, name):
    want, got = parity
    spec = zoo.get_spec(name)
    assert int(got[f"{name}/n_params"]) == spec.params
    batch = 4 if name in TINY else 2
    assert tuple(got[f"{name}/shape"]) == _expected_shape(spec, batch)


@pytest.mark.parametrize("name", TINY)
def test_forward_matches_torch_with_converted_weights(parity, name):
    want, got = parity
    w, g = want[name]["eval"], got[f"{name}/eval"]
    assert g.shape == w.shape
    err = float(np.abs(g - w).max())
    assert err <= PARITY_REL * float(np.abs(w).max()), (name, err)
    if name in TRAIN_MODE:  # training mode: BN batch statistics (no dropout in these)
        w, g = want[name]["train"], got[f"{name}/train"]
        assert float(np.abs(g - w).max()) <= PARITY_REL * float(np.abs(w).max()), name


def test_batchnorm_running_stats_follow_torch(parity):
    """Gluon momentum 0.9 == PyTorch momentum 0.1: the same running mean; the variance is
    updated with the biased batch variance in MXNet, the unbiased one in PyTorch."""
    want, got = parity
    w = want["resnet56_tiny"]
    np.testing.assert_allclose(got["resnet56_tiny/running_mean"], w["running_mean"],
                               rtol=1e-5, atol=1e-6)
    assert not np.allclose(got["resnet56_tiny/running_var"], w["running_var"], rtol=1e-7)
    np.testing.assert_allclose(got["resnet56_tiny/running_var"], w["running_var"], rtol=0.05)


@pytest.mark.parametrize("name", ["fcn5_tiny", "resnet56_tiny"])
def test_sgd_momentum_steps_match_torch(parity, name):
    """The adapter's loss (mean cross-entropy) and Trainer (SGD, momentum 0.9) against
    torch.optim.SGD: two steps, so the momentum buffer matters."""
    want, got = parity
    np.testing.assert_allclose(got[f"{name}/step_loss"], want[name]["step_loss"], rtol=1e-5)
    w0 = want[name]["step_w"]
    np.testing.assert_allclose(got[f"{name}/step_w"], w0, rtol=1e-4, atol=1e-6)


def test_step_marks_its_stages_in_order(parity):
    """One staged step (step.py): t_io, t_h2d, t_f, t_b, t_u (base.STAGES); with two
    accumulated micro-batches t_f, t_b once per micro-batch."""
    from dlperf.frameworks.base import STAGES

    _, got = parity
    assert list(got["fcn5_tiny/step_stages"]) == list(STAGES) * 2
    for mode in ("eager", "graph"):
        assert list(got[f"run/{mode}/stages"]) == ["t_io", "t_h2d", "t_f", "t_b", "t_f", "t_b",
                                                   "t_u"], mode


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_fused_step_is_the_staged_step(parity, mode):
    """Two runs prepared by the adapter from the same seed: three fused steps (no-op marks,
    the first two timed for the compile time) and three staged steps with recording marks
    give the same losses, so the fused timing runs the staged step's work; the loss of
    random labels over 512 classes starts near ln(512) and stays finite."""
    _, got = parity
    fused, staged = got[f"run/{mode}/fused"], got[f"run/{mode}/staged"]
    assert fused.shape == (3,) and np.all(np.isfinite(fused))
    np.testing.assert_allclose(fused, staged, rtol=1e-6)
    assert abs(fused[0] - np.log(512)) < 0.5
    assert float(got[f"run/{mode}/first_call_s"]) > 0
    assert int(got[f"run/{mode}/n_compiles"]) == (1 if mode == "graph" else 0)
    assert int(got[f"run/{mode}/recompiles_measured"]) == 0


def test_engine_is_asynchronous_so_the_step_waits(parity):
    """Dispatching five 1200^3 matmuls returns long before they have run (docs/measurement.md
    rule 1): a host clock without mx.nd.waitall() would time the dispatch only."""
    _, got = parity
    dispatch, complete = float(got["engine/dispatch_s"]), float(got["engine/complete_s"])
    assert complete > 0.01  # 5 x 3.5 GFLOP: tens of ms at least on this CPU
    assert dispatch < 0.25 * complete, (dispatch, complete)


# --- with MXNet: end to end through the launcher ----------------------------------------------


@pytest.mark.slow
def test_dlperf_run_mxnet_end_to_end(mxpy, tmp_path):
    db = tmp_path / "r.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "DLPERF_MXNET_PYTHON": mxpy}
    cp = subprocess.run([sys.executable, "-m", "dlperf", "run", "--framework", "mxnet",
                         "--mode", "eager,graph", "--model", "fcn5_tiny",
                         "--device", "cpu", "--threads", "1", "-b", "8", "--grad-accum", "2",
                         "--min-iters", "4", "--min-time", "0", "--max-warmup-iters", "4",
                         "--no-ceilings", "--db", str(db)],
                        capture_output=True, text=True, env=env, timeout=300)
    assert cp.returncode == 0, cp.stderr[-3000:]
    con = sqlite3.connect(db)
    rows = con.execute("select model, mode, status, framework_version, result_json, loss_first, "
                       "loss_last from results order by model, mode").fetchall()
    by = {(m, mode): (st, ver, {**json.loads(js), "loss_first": lf, "loss_last": ll})
          for m, mode, st, ver, js, lf, ll in rows}
    for mode in ("eager", "graph"):
        st, ver, r = by[("fcn5_tiny", mode)]
        assert st == "ok", r.get("error")
        assert ver == "1.9.1" and r["versions"]["mxnet"] == "1.9.1"
        assert r["versions"]["interpreter"] == mxpy  # the worker ran in the MXNet venv
        assert r["versions"]["numpy"].startswith("1.23")
        assert r["flags"]["omp_threads"] == 1 and r["flags"]["engine_worker_threads"] == 1
        assert r["flags"]["grad_accum"] == 2
        assert r["throughput"]["samples"] == r["n_measured"] * 8
        assert np.isfinite(r["loss_last"])
        assert r["compile"]["recompiles_measured"] == 0
        # random labels over 512 classes: the measured loss stays near ln(512)
        assert abs(r["loss_first"] - np.log(512)) < 0.5
    assert by[("fcn5_tiny", "eager")][2]["compile"]["n_compiles"] == 0
    g = by[("fcn5_tiny", "graph")][2]
    assert g["compile"]["n_compiles"] == 1 and g["flags"]["hybridize"]["static_alloc"] is True
    # a model MXNet does not implement is refused before anything runs; nothing is lost
    cp = subprocess.run([sys.executable, "-m", "dlperf", "run", "--framework", "mxnet",
                         "--model", "vgg16_tiny", "--device", "cpu", "--db", str(db)],
                        capture_output=True, text=True, env=env, timeout=120)
    assert cp.returncode == 2 and "'vgg16_tiny' has no mxnet implementation" in cp.stderr
    assert con.execute("select count(*) from results").fetchone()[0] == len(rows) == 2
