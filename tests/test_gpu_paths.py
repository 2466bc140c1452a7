"""GPU-only code paths exercised on the CPU with fakes (the device is absent here; what the
branch decides, and what it hands the framework, is checked instead). The same paths on a
real GPU: tests/test_gpu_smoke.py (opt-in, ``-m gpu``)."""

from __future__ import annotations

import contextlib
import os

import pytest

from dlperf.config import IterationPolicy, make_run_config

_ALLOCATOR_VARS = ("XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_PREALLOCATE",
                   "XLA_PYTHON_CLIENT_ALLOCATOR")


@pytest.fixture
def fresh_jax_env(monkeypatch):
    """As in a fresh worker process on a GPU machine: no XLA backend started yet, no XLA_FLAGS
    or allocator variables set (all restored after the test)."""
    from dlperf.frameworks import jax_fw

    monkeypatch.setenv("XLA_FLAGS", "")
    for k in _ALLOCATOR_VARS:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(jax_fw, "_backend_started", lambda: False)
    return jax_fw


@pytest.mark.parametrize("what", ["trace", "breakdown"])
def test_jax_gpu_trace_runs_without_command_buffers_and_apart(fresh_jax_env, tmp_path, what):
    """A ``--trace DIR`` run is analysed like a ``--breakdown`` one (op classes, phases from the
    kernels' HLO ops, stored and compared by ``--op-classes``), so on a GPU it needs XLA command
    buffers off as much (kernels inside one carry no HLO op), and therefore runs apart from its
    headline as the breakdown does. Before: only ``--breakdown`` turned them off."""
    jax_fw = fresh_jax_env
    kw = {"trace_dir": str(tmp_path)} if what == "trace" else {"breakdown": True}
    cfg = make_run_config(model="fcn5_tiny", framework="jax", device="cuda", batch_size=8, **kw)
    a = jax_fw.JaxAdapter()
    assert a.breakdown_apart(cfg) and "command buffers" in a.breakdown_apart(cfg)
    flags, undo = a._process_setup(cfg)
    assert undo is None
    assert flags["command_buffers"].startswith("off")
    assert os.environ["XLA_FLAGS"].split() == [jax_fw.NO_COMMAND_BUFFERS]
    assert os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] == jax_fw.GPU_MEM_FRACTION
    # a plain GPU run keeps JAX's command buffers, and needs no second process
    plain = cfg.model_copy(update={"trace_dir": None, "breakdown": False})
    assert a.breakdown_apart(plain) is None
    os.environ["XLA_FLAGS"] = ""
    flags, _ = a._process_setup(plain)
    assert "command_buffers" not in flags and os.environ["XLA_FLAGS"] == ""
    # on the CPU there are no command buffers and no second process
    assert a.breakdown_apart(cfg.model_copy(update={"device": "cpu"})) is None


class _FakeDDP:
    """Stands in for ``DistributedDataParallel`` (no process group): records, for every
    forward, whether gradients would be all-reduced in its backward (DDP decides at forward
    time: outside ``no_sync()``)."""

    syncs: list[bool] = []

    def __new__(cls, module, **kw):
        import torch

        class Wrapped(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.module = module
                self.require_backward_grad_sync = True

            def forward(self, *a, **k):
                cls.syncs.append(self.require_backward_grad_sync)
                return self.module(*a, **k)

            @contextlib.contextmanager
            def no_sync(self):
                old, self.require_backward_grad_sync = self.require_backward_grad_sync, False
                try:
                    yield
                finally:
                    self.require_backward_grad_sync = old

        return Wrapped()


def test_torch_ddp_phased_step_all_reduces_once_per_iteration_like_the_fused_step(monkeypatch):
    """With gradient accumulation under DDP the fused step runs the first K - 1 micro-batches
    under ``no_sync()`` (one all-reduce per iteration, with the last backward); the breakdown's
    phased step must do the same, or its t_b holds K all-reduces where the fused step has one.
    (On the GPU this is NCCL over the ranks; the process group is faked here.)"""
    torch = pytest.importorskip("torch")
    import torch.nn.parallel

    from dlperf.frameworks import torch_dist
    from dlperf.frameworks.base import DistContext
    from dlperf.frameworks.torch_fw import TorchAdapter
    from dlperf.zoo import get_spec

    def fake_init(torch_mod, cfg):
        return DistContext(rank=0, world_size=2, replicas=2, backend="ddp/fake",
                           info={"process_group_backend": "fake"}), torch_mod.device("cpu")

    monkeypatch.setattr(torch_dist, "init_process_group", fake_init)
    monkeypatch.setattr(torch.nn.parallel, "DistributedDataParallel", _FakeDDP)
    monkeypatch.setattr(_FakeDDP, "syncs", [])
    cfg = make_run_config(model="fcn5_tiny", batch_size=16, nproc=2, grad_accum=2,
                          device="cpu", measure_ceilings=False)
    s = TorchAdapter().prepare(cfg, get_spec(cfg.model))
    try:
        s.step()
        fused = list(_FakeDDP.syncs)
        _FakeDDP.syncs.clear()
        marks: list[str] = []
        s.phased_step(lambda phase, handle=None: marks.append(phase))
        phased = list(_FakeDDP.syncs)
    finally:
        s.close()
    assert fused == [False, True]  # K = 2: one all-reduce, with the last micro-batch
    assert phased == fused
    assert marks == ["t_io", "t_h2d", "t_f", "t_b", "t_f", "t_b", "t_u"]
