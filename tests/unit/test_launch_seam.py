"""launch/ knows launchers, not frameworks: what differs between frameworks comes from their
registry entries (hooks into their own folders), launch/ imports no adapter, and frameworks/
imports nothing from launch/ (issue 19: no frameworks <-> launch cycle, function-level imports
included)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from dlperf.config import make_run_config
from dlperf.launch.distributed import launch_command
from dlperf.launch.spawn import _process_envs
from dlperf.registry import (
    FRAMEWORKS,
    LAUNCHERS,
    TEST_DOUBLES,
    FrameworkInfo,
    launch_info,
    load_hook,
)

SRC = Path(__file__).resolve().parents[2] / "src" / "dlperf"
NAMES = {"torch", "jax", "tensorflow", "mxnet", "fake"}
HOOKS = ("spawn_args", "process_env", "rank_exit", "breakdown_apart")


def _imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.append(node.module)
        elif isinstance(node, ast.Import):
            out += [a.name for a in node.names]
    return out


def _strings_outside_docstrings(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
            and n.body and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)}
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
            and isinstance(n.value, str) and id(n) not in docs}


@pytest.mark.parametrize("path", sorted((SRC / "launch").glob("*.py")), ids=lambda p: p.name)
def test_launch_names_no_framework_and_imports_no_adapter(path):
    assert not NAMES & _strings_outside_docstrings(path), path.name
    for mod in _imports(path):
        assert not mod.startswith("dlperf.frameworks") or mod == "dlperf.frameworks.common", mod


def test_frameworks_import_nothing_from_launch():
    for path in (SRC / "frameworks").rglob("*.py"):
        assert not [m for m in _imports(path) if m.startswith("dlperf.launch")], path


@pytest.mark.parametrize("name", sorted({**TEST_DOUBLES, **FRAMEWORKS}))
def test_every_registry_hook_resolves_and_the_launcher_is_known(name):
    info = launch_info(name)  # the test double's entry too, enabled here or not
    assert info.launcher in LAUNCHERS
    for field in HOOKS:
        ref = getattr(info, field)
        assert ref is None or callable(load_hook(ref)), (name, field, ref)
        assert ref is None or ".adapter:" not in ref or name == "fake", (name, field, ref)


def test_load_hook_refuses_a_malformed_reference():
    with pytest.raises(KeyError, match="unknown framework 'nope'"):
        launch_info("nope")
    assert load_hook(None) is None
    with pytest.raises(ValueError, match="module:function"):
        load_hook("dlperf.frameworks.jax.dist")


def test_the_launcher_comes_from_the_registry(tmp_path, monkeypatch):
    """A framework's entry, not its name, picks torchrun or the spawner and its options."""
    cfg = make_run_config(model="fcn5_tiny", framework="tensorflow", batch_size=16, nproc=2,
                          dp_layout="per_device")
    assert FRAMEWORKS["torch"].launcher == "torchrun"
    cmd = launch_command(cfg, tmp_path / "c.json", tmp_path)
    assert cmd[1:3] == ["-m", "dlperf.launch.spawn"]
    assert cmd[cmd.index("--framework") + 1] == "tensorflow"
    assert cmd[cmd.index("--") + 1:] == load_hook(FRAMEWORKS["tensorflow"].spawn_args)(cfg)
    monkeypatch.setitem(FRAMEWORKS, "tensorflow",
                        FrameworkInfo("x:Y", ("eager", "graph", "xla"), launcher="torchrun"))
    cmd = launch_command(cfg, tmp_path / "c.json", tmp_path)
    assert cmd[1:3] == ["-m", "torch.distributed.run"] and "--" not in cmd


def test_spawner_environment_comes_from_the_framework_hook():
    """TensorFlow's hook gives each local process TF_CONFIG of its global rank (one node: the
    ports are picked here); a framework without a hook adds nothing."""
    from argparse import Namespace

    a = Namespace(framework="tensorflow", nproc=2, nnodes=1, node_rank=0,
                  coordinator="127.0.0.1:1")
    envs = _process_envs(a, ["--tf-config", "--run-id", "dlperf-x", "--timeout", "30"])
    tasks = [json.loads(e["TF_CONFIG"]) for e in envs]
    assert [t["task"]["index"] for t in tasks] == [0, 1]
    assert len(tasks[0]["cluster"]["worker"]) == 2
    assert _process_envs(Namespace(**{**vars(a), "framework": "jax"}), []) == [{}, {}]
    with pytest.raises(ValueError, match="unknown framework"):
        _process_envs(Namespace(**{**vars(a), "framework": "nope"}), [])


def test_jax_breakdown_apart_hook_agrees_with_the_adapter(monkeypatch):
    """The registry hook (jax/dist.py, read by launch/) and JaxAdapter.breakdown_apart give the
    same answer, with and without the user's XLA_FLAGS."""
    pytest.importorskip("jax")
    from dlperf.frameworks.jax.adapter import JaxAdapter

    hook = load_hook(FRAMEWORKS["jax"].breakdown_apart)
    base = make_run_config(model="fcn5_tiny", framework="jax", device="cuda", batch_size=8)
    cfgs = [base.with_(**u) for u in ({"breakdown": True}, {"trace_dir": "/tmp/t"},
                                                {}, {"breakdown": True, "device": "cpu"})]
    for flags in ("", "--xla_gpu_enable_command_buffer="):
        monkeypatch.setenv("XLA_FLAGS", flags)
        got = [hook(c) for c in cfgs]
        assert got == [JaxAdapter().breakdown_apart(c) for c in cfgs]
        assert (got[0] is not None) is (flags == "") and got[2] is None and got[3] is None
