"""GPU-only code paths exercised on the CPU with fakes (the device is absent here; what the
branch decides, and what it hands the framework, is checked instead). The same paths on a
real GPU: tests/gpu/test_gpu_smoke.py (opt-in, ``-m gpu``)."""

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
    from dlperf.frameworks.jax import adapter as jax_fw

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
    plain = cfg.with_(trace_dir=None, breakdown=False)
    assert a.breakdown_apart(plain) is None
    os.environ["XLA_FLAGS"] = ""
    flags, _ = a._process_setup(plain)
    assert "command_buffers" not in flags and os.environ["XLA_FLAGS"] == ""
    # on the CPU there are no command buffers and no second process
    assert a.breakdown_apart(cfg.with_(device="cpu")) is None


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
    import torch.nn.parallel  # noqa: F811 - the submodule, after importorskip bound torch

    from dlperf.frameworks.base import DistContext
    from dlperf.frameworks.torch import dist as torch_dist
    from dlperf.frameworks.torch.adapter import TorchAdapter
    from dlperf.zoo import get_spec

    def fake_init(torch_mod, cfg):
        return DistContext(rank=0, world_size=2, replicas=2, backend="ddp/fake",
                           info={"process_group_backend": "fake"}), torch_mod.device("cpu")

    monkeypatch.setattr(torch_dist, "init_process_group", fake_init)
    monkeypatch.setattr(torch.nn.parallel, "DistributedDataParallel", _FakeDDP)
    monkeypatch.setattr(_FakeDDP, "syncs", [])
    cfg = make_run_config(model="fcn5_tiny", batch_size=16, nproc=2, grad_accum=2,
                          device="cpu", measure_ceilings=False)
    s = TorchAdapter().prepare(cfg, get_spec(cfg.workload.model))
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


def _fake_clock(step_s: float):
    """A host clock that advances ``step_s`` per read."""
    t = [0.0]

    def clock() -> float:
        t[0] += step_s
        return t[0]

    return clock


def test_phased_measurement_of_a_multi_process_run_uses_one_agreed_count():
    """Every rank of a data-parallel run must run the same number of phased iterations (each
    holds collectives: DDP's all-reduce, XLA's): a rank that stops on its own clock one
    iteration later waits in that iteration's all-reduce for a peer that is gone, until the
    NCCL timeout (with CUDA the hosts run ahead of their devices and stop at different counts).
    The count is agreed once, before the measured iterations, as the fused loop does."""
    from dlperf.measure.phases import HostPhaseTimer, measure_phases

    asked: list[list[float]] = []

    def agree(v: list[float]) -> list[float]:  # the other rank's estimate is larger
        asked.append(list(v))
        return [max(v[0], 9.0)]

    calls = [0]

    def phased_step(mark):
        calls[0] += 1
        mark("t_f")
        mark("t_b")
        return 1.0

    clock = _fake_clock(0.01)
    pol = IterationPolicy(min_iters=2, min_time_s=0.0, max_iters=100)
    loop = measure_phases(phased_step, HostPhaseTimer(clock=clock), pol, warmup_iters=2,
                          clock=clock, agree=agree)
    assert len(asked) == 1 and asked[0][0] == 2.0  # its own count: min_iters (min_time 0)
    assert len(loop.per_iter) == 9 and calls[0] == 2 + 9
    # one process: its own stop rule, no agreement
    loop1 = measure_phases(phased_step, HostPhaseTimer(clock=clock), pol, warmup_iters=2,
                           clock=clock)
    assert len(loop1.per_iter) == 2


def test_breakdown_of_a_multi_process_run_agrees_and_keeps_each_ranks_trace(tmp_path):
    """``run_breakdown`` on rank 1 of 2: the phased count is agreed over the ranks, and its
    ``--trace DIR`` folder is its own (all ranks trace the same steps; in one folder they
    deleted and overwrote each other's files)."""
    from types import SimpleNamespace

    from dlperf.frameworks.base import DistContext
    from dlperf.measure.breakdown.run import run_breakdown, trace_folder
    from dlperf.measure.phases import HostPhaseTimer

    agreed: list[list[float]] = []
    folders: list = []

    def profile(n, folder):
        folders.append(folder)
        raise RuntimeError("no profiler in this test")

    ctx = DistContext(rank=1, world_size=2, replicas=2,
                      agree_max=lambda v: agreed.append(list(v)) or [7.0])
    session = SimpleNamespace(
        phased_step=lambda mark: (mark("t_f"), 1.0)[1], phase_timer=HostPhaseTimer,
        profile=profile, losses_to_floats=lambda hs: [float(h) for h in hs], dist=ctx)
    cfg = make_run_config(model="fcn5_tiny", batch_size=16, nproc=2, device="cpu",
                          breakdown=True, trace_dir=str(tmp_path),
                          iterations=IterationPolicy(min_iters=2, min_time_s=0.0))
    fused = {"median": 1e-3, "mean": 1e-3, "ci_low": 9e-4, "ci_high": 1.1e-3}
    out, samples, _ = run_breakdown(cfg, session, fused)
    assert len(agreed) == 1 and out["breakdown"]["n_iters"] == 7
    assert len(samples["breakdown:t_f"]) == 7
    (folder,) = folders
    assert folder.parent == tmp_path.resolve() and folder.name == trace_folder(cfg) + "-rank1"
    # rank 0 keeps the plain folder name (the one its result, the stored one, points to)
    folders.clear()
    session.dist = DistContext(rank=0, world_size=2, replicas=2, agree_max=lambda v: [7.0])
    run_breakdown(cfg, session, fused)
    assert folders[0].name == trace_folder(cfg)


def test_phase_event_pool_is_reserved_for_every_mark_of_an_iteration():
    """CUDA events for the phased loop are created before it (``CudaPhaseTimer.reserve``): as
    many as the iterations' marks. With gradient accumulation an iteration marks ``t_f`` and
    ``t_b`` once per micro-batch (K = 3: 3 + 2K marks), not once per phase name (5); counted
    by names, the pool ran out inside the timed loop and grew there (cudaEventCreate calls
    between two phases of a measured iteration)."""
    from dlperf.measure.phases import HostPhaseTimer, measure_phases

    class CountingTimer(HostPhaseTimer):
        kind = "counting"

        def __init__(self, clock):
            super().__init__(clock=clock)
            self.reserved = 0
            self.marks_measured = 0

        def reserve(self, n: int) -> None:
            self.reserved = max(self.reserved, n)

        def start(self) -> None:
            super().start()
            self.marks_measured = 0

        def mark(self, phase, handle=None):
            self.marks_measured += 1
            super().mark(phase, handle)

    K = 3

    def phased_step(mark):
        for p in ("t_io", "t_h2d"):
            mark(p)
        for _ in range(K):
            mark("t_f")
            mark("t_b")
        mark("t_u")
        return 1.0

    clock = _fake_clock(0.001)
    timer = CountingTimer(clock)
    pol = IterationPolicy(min_iters=20, min_time_s=0.0, max_iters=1000)
    loop = measure_phases(phased_step, timer, pol, warmup_iters=2, clock=clock)
    assert len(loop.per_iter) == 20 and timer.marks_measured == 20 * (3 + 2 * K)
    assert timer.reserved >= timer.marks_measured


def test_ddp_rank_without_its_gpu_is_refused_with_the_fix(monkeypatch):
    """A DDP rank on CUDA takes GPU ``LOCAL_RANK``; with fewer GPUs visible than processes per
    node (``--nproc 2`` on a one-GPU machine) ``torch.cuda.set_device`` failed with CUDA's
    "invalid device ordinal" (a crash). Now the rank says what is wrong and how to fix it,
    before it touches the device or the process group."""
    from types import SimpleNamespace

    from dlperf.errors import UnavailableError
    from dlperf.frameworks.torch.dist import init_process_group

    touched: list[str] = []
    fake_torch = SimpleNamespace(
        cuda=SimpleNamespace(device_count=lambda: 1,
                             set_device=lambda d: touched.append("set_device")),
        device=lambda s: touched.append(f"device {s}") or s)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    cfg = make_run_config(model="fcn5_tiny", batch_size=16, nproc=2, device="cuda")
    with pytest.raises(UnavailableError, match=r"LOCAL_RANK 1 .*1 GPU.*--nproc 1"):
        init_process_group(fake_torch, cfg)
    assert touched == []


def test_jax_gpu_backend_failure_keeps_jax_s_reason(monkeypatch, fresh_jax_env):
    """When JAX's GPU backend exists but fails to start (its pre-allocated pool does not fit
    beside another process, a driver/plugin mismatch), ``jax.local_devices(backend="gpu")``
    raises with the cause. It was replaced by "JAX sees no GPU (is a CUDA build of jaxlib
    installed?)", which sends the reader to reinstall JAX on a machine where it is installed."""
    jax = pytest.importorskip("jax")
    pytest.importorskip("flax")
    pytest.importorskip("optax")
    from dlperf.errors import UnavailableError
    from dlperf.zoo import get_spec

    jax_fw = fresh_jax_env
    why = ("Backend 'cuda' failed to initialize: RESOURCE_EXHAUSTED: Out of memory while "
           "trying to allocate 142606336000 bytes.")

    def local_devices(backend=None, **kw):
        if backend == "gpu":
            raise RuntimeError(why)
        return [object()]

    monkeypatch.setattr(jax, "local_devices", local_devices)
    cfg = make_run_config(model="fcn5_tiny", framework="jax", device="cuda", batch_size=8)
    with pytest.raises(UnavailableError) as e:
        jax_fw.JaxAdapter().prepare(cfg, get_spec(cfg.workload.model))
    assert "RESOURCE_EXHAUSTED: Out of memory" in str(e.value)
    assert "use --device cpu" in str(e.value)


def test_gpu_trace_without_kernels_is_unavailable_with_its_reason(tmp_path):
    """A GPU trace with steps but no device ops (on an H200, JAX's tracer inside a process
    where torch.profiler had taken CUPTI: CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) is
    not stored as a trace with 0 s in every op class: it is unavailable, with its reason."""
    from types import SimpleNamespace

    from dlperf.measure.breakdown.run import run_breakdown
    from dlperf.measure.breakdown.trace import TraceData

    def profile(n, folder):
        steps = [(i * 1e-2, i * 1e-2 + 5e-3) for i in range(n)]
        return {"trace": TraceData(ops=[], steps=steps, device_kind="gpu", source="test")}

    session = SimpleNamespace(phased_step=None, phase_timer=None, profile=profile, dist=None)
    fused = {"median": 1e-2, "mean": 1e-2, "ci_low": 9e-3, "ci_high": 1.1e-2}
    cfg = make_run_config(model="fcn5_tiny", batch_size=16, device="cuda", trace_dir=str(tmp_path))
    out, samples, warnings = run_breakdown(cfg, session, fused)
    assert out["trace"]["available"] is False and "op_classes" not in out
    assert "no device ops" in out["trace"]["error"] and "CUPTI" in out["trace"]["error"]
    assert any(w.startswith("trace: the profiler trace failed") for w in warnings)
    assert not any(k.startswith("trace:") for k in samples)
    # the same trace from a CPU device (host-op slices) stays a trace
    cfg = make_run_config(model="fcn5_tiny", batch_size=16, device="cpu", trace_dir=str(tmp_path))
    out, _, _ = run_breakdown(cfg, session, fused)
    assert out["trace"]["available"] is True


def test_traced_steps_far_slower_than_the_fused_step_are_warned_about(tmp_path):
    """Op-class times come from the traced steps: where those took far longer than the fused
    step (a busy 2-core CPU: ~200 ms traced against a 0.46 ms step), the result says so."""
    from types import SimpleNamespace

    from dlperf.measure.breakdown.run import TRACE_SLOWDOWN_WARN, run_breakdown
    from dlperf.measure.breakdown.trace import TraceData, TraceOp

    def profile_of(step_s):
        def profile(n, folder):
            steps = [(i * step_s, (i + 1) * step_s) for i in range(n)]
            ops = [TraceOp(name="gemm", start_s=a, end_s=a + 0.5 * step_s, cls="matmul")
                   for a, _ in steps]
            return {"trace": TraceData(ops=ops, steps=steps, device_kind="cpu", source="test")}
        return profile

    fused = {"median": 1e-3, "mean": 1e-3, "ci_low": 9e-4, "ci_high": 1.1e-3}
    cfg = make_run_config(model="fcn5_tiny", batch_size=16, device="cpu", trace_dir=str(tmp_path))
    slow = SimpleNamespace(phased_step=None, phase_timer=None, profile=profile_of(0.2), dist=None)
    out, _, warnings = run_breakdown(cfg, slow, fused)
    # the traced span (first op start to last op end: 4 steps + half of one) per step / fused
    assert out["trace"]["slowdown"] == pytest.approx((4 * 0.2 + 0.1) / 5 / 1e-3)
    assert any(w.startswith("trace: the traced steps took") for w in warnings)
    ok = SimpleNamespace(phased_step=None, phase_timer=None, profile=profile_of(1.2e-3),
                         dist=None)
    out, _, warnings = run_breakdown(cfg, ok, fused)
    assert out["trace"]["slowdown"] < TRACE_SLOWDOWN_WARN
    assert not any(w.startswith("trace: the traced steps took") for w in warnings)
