"""GPU smoke suite: every GPU-only path of dlperf once, with tiny models and short iteration
policies, to run in one device call before the sweeps (opt-in: ``-m gpu``; about 2-3 minutes
on one H200, the 2-GPU tests skipped there)::

    PYTHONPATH=src python -m pytest -q -m gpu -p no:cacheprovider tests/

(tests/conftest.py runs this file first: its JAX runs are worker processes that pre-allocate
95% of the GPU, while the older JAX GPU test in test_breakdown_frameworks.py starts JAX inside
the pytest process, where its memory pool then stays). Each test skips, with the reason,
where its device is absent: no CUDA GPU for torch, no JAX GPU backend, fewer than 2 GPUs. On
a CPU-only machine they all skip in a few seconds.

What each asserts is what a wrong GPU branch got wrong before, or would: the device timers
and memory peaks of the run (rule 7's three numbers), the TF32/precision flags as applied, the
channels_last layout of bf16 CNNs, the FLOP count from the HLO in JAX, NVML power and energy
of the same GPU, the ceilings' order (bf16 > fp32), a breakdown whose trace finds its step
spans (a CUDA-only trace finds none), pinned real data, and on 2 GPUs DDP over
NCCL with its exposed communication, the NCCL all-reduce benchmark and JAX sharded jit.
"""

from __future__ import annotations

import functools
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from dlperf.config import IterationPolicy, make_run_config

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _nvls_off(monkeypatch):
    """NVLink multicast off for every process these tests start: the project's GPU machines
    need it (their multicast is not usable); dlperf itself leaves NVLS at NCCL's default
    unless asked (--nccl-nvls off), which is what this sets."""
    from dlperf.launch.distributed import NVLS_OFF_ENV

    for k, v in NVLS_OFF_ENV.items():
        monkeypatch.setenv(k, v)

SRC = str(Path(__file__).resolve().parents[2] / "src")
#: Short but long enough for NVML's power sampler (25 ms) to take a dozen samples.
SHORT = IterationPolicy(min_iters=10, min_time_s=0.5, max_time_s=10.0, warmup_window=3,
                        min_warmup_iters=3, max_warmup_iters=60, max_warmup_time_s=10.0)


def _env() -> dict[str, str]:
    """Environment for worker processes: this tree's ``src`` first, the caller's PYTHONPATH
    kept (on the GPU machine it holds the wheels that travel, e.g. pydantic)."""
    pp = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": SRC + (os.pathsep + pp if pp else "")}


def _torch_cuda(n: int = 1):
    """torch, or skip: no torch, no CUDA GPU, or fewer than ``n`` GPUs."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible to torch")
    if torch.cuda.device_count() < n:
        pytest.skip(f"needs {n} GPUs; torch sees {torch.cuda.device_count()}")
    return torch


@functools.cache
def _jax_gpus() -> tuple[int, str]:
    """(GPUs JAX sees, why none). Asked in a child process: starting JAX's GPU backend here
    would leave its memory pool in the pytest process for every later test."""
    import importlib.util

    if importlib.util.find_spec("jax") is None:
        return 0, "jax is not installed"
    from dlperf import nvml

    if not nvml.gpus():
        return 0, "no NVIDIA GPU (NVML sees none)"
    code = "import jax; print(sum(d.platform == 'gpu' for d in jax.devices()))"
    env = {**os.environ, **_env(), "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    env.pop("JAX_PLATFORMS", None)
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=180, env=env)
    except subprocess.TimeoutExpired:
        return 0, "asking JAX for its devices timed out"
    if p.returncode != 0:
        return 0, f"JAX did not start: {p.stderr.strip()[-300:]}"
    n = int(p.stdout.split()[-1])
    return n, "" if n else "JAX sees no GPU (no CUDA build of jaxlib?)"


def _jax_gpu(n: int = 1) -> None:
    """Skip unless JAX sees ``n`` GPUs whose memory is free for its pool (95% of each, as
    dlperf sets it: a JAX backend started inside this pytest process, by another test, keeps
    its own pool, and then a worker's cannot start)."""
    have, why = _jax_gpus()
    if have < n:
        pytest.skip(why or f"needs {n} GPUs; JAX sees {have}")
    if "torch" in sys.modules and sys.modules["torch"].cuda.is_initialized():
        sys.modules["torch"].cuda.empty_cache()  # this process's cached blocks
    from dlperf import nvml

    nv = nvml._nvml()
    if nv is None:
        return
    for i in range(n):
        info = nv.nvmlDeviceGetMemoryInfo(nv.nvmlDeviceGetHandleByIndex(i))
        if info.free < 0.96 * info.total:
            pytest.skip(f"GPU {i} has {info.free / 2**30:.1f} of {info.total / 2**30:.1f} GiB "
                        "free: JAX's 95% pool would not fit (another process, or JAX started "
                        "inside this pytest process by an earlier test, holds the rest); run "
                        "tests/gpu/test_gpu_smoke.py first or alone")


def _ok(r: dict | Any) -> dict:
    """The stored form of an ok result: a launcher's record as its flat dict."""
    r = r if isinstance(r, dict) else r.to_dict()
    assert r["status"] == "ok", r.get("error")
    return r


def _check_memory_power(r: dict) -> None:
    """Rule 7's three numbers and NVML power/energy, present, positive and consistent."""
    m = r["memory"]
    assert m["peak_allocated_bytes"] > 0
    assert m["peak_reserved_bytes"] >= m["peak_allocated_bytes"]
    # NVML sees the whole device (context, the pool, other processes), at least the peak
    # allocated bytes that are still held in the framework's pool
    assert m["nvml_used_bytes"] >= m["peak_allocated_bytes"]
    assert m["nvml_used_peak_bytes"] > 0
    p = r["power"]
    assert p["available"], p["reason"]
    assert p["energy_source"] in ("nvml_total_energy", "sampled_power_trapezoid")
    assert 0 < p["mean_power_w"] < 2000  # W: a unit slip (mW, kW) falls outside
    assert 0 < p["sampled_mean_power_w"] < 2000
    assert p["energy_j"] > 0 and p["energy_per_iter_j"] > 0 and p["samples_per_j"] > 0
    assert p["n_samples"] >= 5 and p["read_errors"] == 0
    assert p["energy_per_iter_j"] == pytest.approx(
        p["mean_power_w"] * r["measured_time_s"] / r["n_measured"])


def _check_ceilings(r: dict) -> None:
    c = r["ceilings"]
    assert r["probe_errors"] is None, r["probe_errors"]
    mm = c["matmul_flops_per_s"]
    assert c["device"].startswith("cuda") and mm["fp32"] > 1e12  # FLOP/s: any current GPU
    assert mm["bf16"] > mm["fp32"] and mm["tf32"] > mm["fp32"]  # Tensor Cores
    assert c["bandwidth_bytes_per_s"] > 1e11  # bytes/s (an H200 gives about 4.2e12)
    assert r["mfu"]["mfu"] > 0
    if any(k in (r.get("device_name") or "") for k in ("H100", "H200")):
        assert r["datasheet"] is not None  # the device name matches a datasheet entry


# --- PyTorch on one GPU ------------------------------------------------------------------------

def test_torch_cuda_session_has_device_timers_and_nvml_of_its_own_gpu():
    """The adapter's CUDA branch: CUDA-event step and phase timers, and an NVML target that
    resolves by UUID to the very GPU torch runs on (power and memory of another GPU would be
    stored silently otherwise)."""
    torch = _torch_cuda()
    from dlperf import nvml
    from dlperf.frameworks.torch.adapter import TorchAdapter
    from dlperf.measure.phases import CudaPhaseTimer
    from dlperf.measure.timers import CudaEventTimer
    from dlperf.zoo import get_spec

    cfg = make_run_config(model="alexnet_cifar_tiny", batch_size=16, device="cuda",
                          precision="bf16", iterations=SHORT)
    s = TorchAdapter().prepare(cfg, get_spec(cfg.workload.model))
    try:
        assert isinstance(s.timer, CudaEventTimer)
        assert isinstance(s.phase_timer(), CudaPhaseTimer)
        uuid, index = s.nvml_target
        assert uuid, "torch gave no GPU UUID: NVML would guess the GPU by index"
        nv = nvml._nvml()
        assert nv is not None, "NVML is not available"
        h = nv.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
        bus = nv.nvmlDeviceGetPciInfo(h).busId
        bus = bus.decode() if isinstance(bus, bytes) else bus
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        if getattr(props, "pci_bus_id", None) is not None:  # "0000:19:00.0": bus 0x19
            assert int(bus.split(":")[-2], 16) == props.pci_bus_id
        readers, why = nvml.power_readers(uuid, index)
        assert readers is not None, why
        power_w, energy_j, mem_used = readers
        assert 0 < power_w() < 2000 and mem_used() > 0
        assert energy_j is not None  # Volta and newer: the total-energy counter
        e0 = energy_j()
        torch.cuda._sleep(200_000_000)  # keep the GPU busy a while
        torch.cuda.synchronize()
        time.sleep(0.2)
        assert energy_j() > e0 > 0
        assert s.step() is not None
    finally:
        s.close()


def test_torch_eager_bf16_cnn_on_cuda():
    """Eager bf16 CNN: CUDA events add up to the wall time, bf16 autocast with TF32 off for the
    rest, cudnn.benchmark, channels_last (NHWC), memory peaks, power, ceilings, FLOPs, MFU."""
    _torch_cuda()
    from dlperf.worker import run_config

    r = _ok(run_config(make_run_config(model="alexnet_cifar_tiny", batch_size=64, device="cuda",
                                       precision="bf16", iterations=SHORT)))
    f = r["flags"]
    assert f["autocast_dtype"] == "bfloat16" and f["tf32"] is False
    assert f["matmul_fp32_precision"] == "ieee" and f["cudnn_conv_fp32_precision"] == "ieee"
    assert f["cudnn_benchmark"] is True and f["layout"] == "NHWC"
    assert r["timing_consistent"], r["timing_rel_diff"]
    assert r["n_measured"] >= SHORT.min_iters and r["summary"]["median"] > 0
    v = r["versions"]
    assert v["cuda"] and v["cudnn"] and v["capability"] and v["device_name"] == r["device_name"]
    _check_memory_power(r)
    _check_ceilings(r)
    fl = r["flops"]
    assert fl["framework_source"].startswith("torch.utils.flop_counter")
    assert 0.8 < fl["framework_to_analytic"] < 1.1  # 0.91 on the CPU: the same count


def test_torch_compile_tf32_on_cuda():
    """torch.compile (Inductor) on CUDA with TF32 on: compiled once, in the first iteration,
    no recompile while measured; the TF32 flags recorded as applied."""
    _torch_cuda()
    from dlperf.worker import run_config

    r = _ok(run_config(make_run_config(model="fcn5_tiny", batch_size=64, device="cuda",
                                       mode="graph", precision="tf32", iterations=SHORT,
                                       measure_ceilings=False)))
    f = r["flags"]
    assert f["tf32"] is True and f["matmul_fp32_precision"] == "tf32"
    assert f["cudnn_conv_fp32_precision"] == "tf32" and f["autocast_dtype"] is None
    assert f["compile"]["backend"] == "inductor"
    c = r["compile"]
    assert c["compile_time_s"] > 0 and c["n_compiles"] >= 1 and c["recompiles_measured"] == 0
    assert r["first_iter_s"] > r["summary"]["median"]  # compilation is in the first iteration
    assert r["timing_consistent"], r["timing_rel_diff"]
    _check_memory_power(r)


def test_torch_compile_reduce_overhead_runs_as_cuda_graphs():
    """--compile-mode reduce-overhead on CUDA: every compiled graph captured as a CUDA graph
    (Inductor declined none), compiled once, no recompile while measured."""
    _torch_cuda()
    from dlperf.worker import run_config

    r = _ok(run_config(make_run_config(model="fcn5_tiny", batch_size=64, device="cuda",
                                       mode="graph", precision="bf16", iterations=SHORT,
                                       compile_mode="reduce-overhead", measure_ceilings=False)))
    assert r["flags"]["compile"]["mode"] == "reduce-overhead"
    c = r["compile"]
    assert c["cudagraph_skips"] == 0, c
    assert c["n_compiles"] >= 1 and c["recompiles_measured"] == 0
    assert r["timing_consistent"], r["timing_rel_diff"]


def test_torch_breakdown_and_trace_on_cuda(tmp_path):
    """--breakdown with --trace on CUDA: phases by CUDA events, the trace's step spans found
    (CPU activity traced: a CUDA-only trace has none), kernels classified."""
    _torch_cuda()
    from dlperf.worker import run_config

    r = _ok(run_config(make_run_config(model="alexnet_cifar_tiny", batch_size=64, device="cuda",
                                       precision="bf16", iterations=SHORT, breakdown=True,
                                       trace_dir=str(tmp_path), measure_ceilings=False)))
    bd = r["breakdown"]
    assert bd["available"], bd.get("error")
    assert bd["timer"] == "cuda_events"
    assert bd["phases_measured"] == ["t_io", "t_h2d", "t_f", "t_b", "t_u"]
    assert bd["n_iters"] >= SHORT.min_iters and bd["total"]["median"] > 0
    tr = r["trace"]
    assert tr["available"], tr.get("error")
    assert tr["n_steps"] == 5 and tr["device_kind"] == "gpu"
    assert 0 < tr["busy_fraction"] <= 1.0
    assert tr["phases"].get("t_b", 0) > 0 and tr["phases"].get("t_f", 0) > 0
    oc = r["op_classes"]["per_iter_s"]
    assert math.fsum(oc.values()) == pytest.approx(tr["busy_s"], rel=1e-6)
    assert oc["convolution"] > 0 and oc["optimizer"] > 0
    assert len(r["samples"]["trace:dispatch"]) == 5
    doc = json.loads(Path(tr["files"]["chrome_trace"]).read_text())
    assert any(e.get("cat") == "kernel" for e in doc["traceEvents"])


def test_torch_real_data_pipeline_pinned_on_cuda(tmp_path):
    """A DataLoader over JPEGs on CUDA: pinned host batches, 2 workers, copied in the step;
    bf16 CNN in channels_last; the data wait recorded."""
    _torch_cuda()
    pytest.importorskip("PIL")
    from dlperf.data.imagefolder import make_imagefolder
    from dlperf.worker import run_config

    make_imagefolder(tmp_path / "jpegs", images=64, classes=4, size=48, seed=1)
    r = _ok(run_config(make_run_config(
        model="resnet50_tiny", batch_size=16, device="cuda", precision="bf16",
        data=f"imagefolder:{tmp_path / 'jpegs'}", loader_workers=2, iterations=SHORT,
        measure_ceilings=False)))
    d = r["data_info"]
    assert d["placement"] == "pipeline"
    assert d["pipeline"]["pin_memory"] is True and d["pipeline"]["num_workers"] == 2
    assert r["flags"]["layout"] == "NHWC"
    w = r["data_wait"]
    assert w is not None and len(r["samples"]["data_wait"]) == r["n_measured"]
    assert all(x >= 0 for x in r["samples"]["data_wait"])


def test_torch_prepared_real_batches_pinned_on_cuda(data_env):
    """Prepared real batches (MNIST) on CUDA: held in pinned host memory and copied with
    non_blocking inside each step."""
    _torch_cuda()
    from dlperf.worker import run_config

    r = _ok(run_config(make_run_config(model="fcn_mnist_tiny", batch_size=64, device="cuda",
                                       data="mnist", iterations=SHORT, measure_ceilings=False)))
    assert r["data_info"]["placement"] == "host-pinned" and r["data_info"]["kind"] == "real"
    assert r["timing_consistent"], r["timing_rel_diff"]


# --- JAX on one GPU ----------------------------------------------------------------------------

def test_jax_on_gpu_memory_hlo_flops_power_ceilings_and_trace(tmp_path):
    """JAX on a GPU, as dlperf runs it (worker processes): the pool set to 95%, memory from
    memory_stats(), the FLOP count from the HLO before optimisation (near the analytic count
    for a CNN; the compiled program's misses cuBLAS/cuDNN calls), power, JAX's ceilings, and
    a --trace run apart from the headline with command buffers off (its kernels then carry
    HLO ops: phases and op classes attributed)."""
    _jax_gpu()
    from dlperf.frameworks.jax.adapter import HLO_FLOPS_SOURCE
    from dlperf.launch.distributed import run_point

    cfg = make_run_config(model="resnet56_tiny", framework="jax", batch_size=32, device="cuda",
                          precision="bf16", iterations=SHORT, trace_dir=str(tmp_path),
                          timeout_s=300)
    r = _ok(run_point(cfg, env=_env()))
    f = r["flags"]
    assert r["versions"]["backend"] == "gpu" and f["compute_dtype"] == "bfloat16"
    assert f["jax_default_matmul_precision"] == "highest" and f["layout"] == "NHWC"
    assert f["gpu_mem_fraction_set_by_dlperf"] is True
    assert f["xla_python_client_mem_fraction"] == "0.95"
    assert "command_buffers" not in f  # the headline keeps JAX's own settings
    assert f["reserved_bytes_source"].startswith("memory_stats()")
    _check_memory_power(r)
    _check_ceilings(r)
    fl = r["flops"]
    assert fl["framework_source"] == HLO_FLOPS_SOURCE
    assert 0.85 < fl["framework_to_analytic"] < 1.1  # 0.94 from the same HLO on the CPU
    assert r["compile"]["recompiles_measured"] == 0
    # the trace, from the second process
    run = r["breakdown_run"]
    assert run["status"] == "ok", run["error"]
    assert run["flags"]["command_buffers"].startswith("off")
    tr = r["trace"]
    assert tr["available"], tr.get("error")
    assert tr["device_kind"] == "gpu" and tr["n_steps"] == 5
    assert not any("no HLO metadata" in n for n in tr["notes"]), tr["notes"]
    assert tr["phases"].get("t_f", 0) > 0 and tr["phases"].get("t_b", 0) > 0
    oc = r["op_classes"]["per_iter_s"]
    assert oc["convolution"] > 0
    assert Path(tr["files"]["chrome_trace"]).is_file()


# --- two GPUs ----------------------------------------------------------------------------------

def test_ddp_over_nccl_two_ranks_with_breakdown_and_exposed_comm():
    """DDP over NCCL, one process per GPU: the slowest rank per iteration, both ranks'
    samples, the exposed communication from the CUDA kernels of the profiled iterations; with
    gradient accumulation and a breakdown (its phased count agreed over the ranks: the run
    ends, it does not wait for a rank stuck in an all-reduce until the timeout)."""
    _torch_cuda(2)
    from dlperf.launch.distributed import run_point

    cfg = make_run_config(model="alexnet_cifar_tiny", batch_size=64, device="cuda",
                          precision="bf16", nproc=2, grad_accum=2, breakdown=True,
                          iterations=SHORT, measure_ceilings=False, timeout_s=240)
    t0 = time.perf_counter()
    r = _ok(run_point(cfg, env=_env()))
    assert time.perf_counter() - t0 < 200
    assert r["worker"]["launcher"]["timed_out"] is False
    d = r["dist"]
    assert d["backend"] == "ddp/nccl" and d["process_group_backend"] == "nccl"
    assert r["world_size"] == 2 and len(d["per_rank"]) == 2 and r["per_device_batch"] == 32
    assert r["rank_imbalance"] >= 1.0
    c = d["comm"]
    assert c["rule"] == "gpu-kernels" and c["n_comm_spans"] > 0, c
    assert r["exposed_comm_s"] is not None and 0 <= r["exposed_comm_s"] <= c["comm"]
    assert r["breakdown"]["available"] and r["breakdown"]["timer"] == "cuda_events"
    _check_memory_power(r)


def test_nccl_allreduce_benchmark_two_ranks(tmp_path):
    """``dlperf allreduce`` over 2 GPUs (NCCL), a few sizes: correct sums, times and
    bandwidths in their units, stored in a results file."""
    _torch_cuda(2)
    out, db = tmp_path / "ar.json", tmp_path / "ar.db"
    p = subprocess.run([sys.executable, "-m", "dlperf", "allreduce", "--nproc", "2",
                        "--min-bytes", "1K", "--max-bytes", "4M", "--iters", "5",
                        "--warmup", "2", "--json", str(out), "--db", str(db)],
                       capture_output=True, text=True, timeout=240,
                       env={**os.environ, **_env()})
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    doc = json.loads(out.read_text())
    assert doc["backend"] == "nccl" and doc["nranks"] == 2 and doc["framework"]["nccl"]
    rows = doc["rows"]
    assert [r["size_bytes"] for r in rows] == [1024 * 2 ** i for i in range(13)]
    for r in rows:
        assert r["correct"] and r["wrong"] == 0 and len(r["time_s_per_rank"]) == 2
        assert 0 < r["time_s"] < 1.0  # seconds per all-reduce
        assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"])  # n = 2: 2(n-1)/n = 1
    assert rows[-1]["busbw_GBps"] > rows[0]["busbw_GBps"]  # large messages use the links
    from dlperf.results.store import ResultStore

    with ResultStore(db) as s:
        assert len(s.collectives()) == len(rows)


def test_jax_sharded_jit_over_two_gpus():
    """JAX data parallelism over two local GPUs in one process (sharded jit): the gradient
    all-reduce inserted by XLA, found on the GPUs' streams of the profiled iterations."""
    _jax_gpu(2)
    from dlperf.launch.distributed import run_point

    cfg = make_run_config(model="fcn5_tiny", framework="jax", batch_size=64, device="cuda",
                          nproc=2, iterations=SHORT, measure_ceilings=False, timeout_s=240)
    r = _ok(run_point(cfg, env=_env()))
    d = r["dist"]
    assert d["backend"] == "jax-sharded-jit" and r["world_size"] == 2
    c = d["comm"]
    assert c["reason"] is None and c["rule"] == "xspace-gpu-streams", c
    assert c["devices"] == 2 and c["n_comm_spans"] > 0
    assert 0 <= c["exposed"] <= c["comm"]
