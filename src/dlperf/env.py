"""The environment fingerprint recorded with every result (MEASUREMENT.md rule 12).

:func:`collect_env` is cheap (no subprocess except one ``git`` call, cached) and never imports
a framework; framework versions come from the adapter and are merged in by the worker.
"""

from __future__ import annotations

import functools
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil

import dlperf
from dlperf import nvml

#: Environment variables that change speed or placement; recorded when set.
RELEVANT_ENV = ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "XLA_FLAGS",
                "XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION",
                "TF_XLA_FLAGS", "TF_FORCE_GPU_ALLOW_GROWTH", "NCCL_NVLS_ENABLE",
                "NCCL_ALGO", "NCCL_PROTO", "PYTORCH_CUDA_ALLOC_CONF", "CUBLAS_WORKSPACE_CONFIG",
                "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS", "DLPERF_DATA",
                "MXNET_CPU_WORKER_NTHREADS", "MXNET_ENGINE_TYPE", "DLPERF_MXNET_PYTHON")


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (Linux), else ``platform.processor()``."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.cache
def git_sha() -> dict[str, Any]:
    """The git commit of the dlperf source and whether the tree had changes.

    ``$DLPERF_GIT_SHA`` wins (for copies of the tree without ``.git``, e.g. a GPU machine).
    """
    if os.environ.get("DLPERF_GIT_SHA"):
        return {"sha": os.environ["DLPERF_GIT_SHA"], "dirty": None, "source": "DLPERF_GIT_SHA"}
    root = Path(dlperf.__file__).resolve().parents[2]
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip() != ""
        return {"sha": sha, "dirty": dirty, "source": "git"}
    except Exception:
        return {"sha": None, "dirty": None, "source": "unknown"}


def usable_cpu_busy(usable: list[int], interval_s: float = 0.1) -> list[float] | None:
    """Busy share (percent) of each CPU this process may run on, over ``interval_s`` seconds
    (``psutil.cpu_percent(percpu=True)``), when that is a subset of the machine's CPUs; None
    when it may run on all of them (the load average then says the same, at no cost). A process
    pinned to a few CPUs of a busy machine is not slowed by load on the other CPUs: the load
    average cannot tell, these numbers can."""
    total = psutil.cpu_count(logical=True) or len(usable)
    if len(usable) >= total:
        return None
    try:
        per = psutil.cpu_percent(interval=interval_s, percpu=True)
    except Exception:  # pragma: no cover - psutil without per-CPU counters
        return None
    return [float(per[c]) for c in usable if c < len(per)]


def collect_env() -> dict[str, Any]:
    """Host, CPU, memory, GPUs (via NVML), Python, dlperf version and git SHA, relevant env vars.

    Returns a JSON-able dict. Framework versions (torch, CUDA, cuDNN, NCCL) are added by the
    worker from the framework adapter.
    """
    vm = psutil.virtual_memory()
    try:
        usable = sorted(os.sched_getaffinity(0))
    except AttributeError:
        usable = list(range(os.cpu_count() or 1))
    affinity = len(usable)
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpu_model": cpu_model(),
        "cpu_logical": psutil.cpu_count(logical=True),
        "cpu_physical": psutil.cpu_count(logical=False),
        "cpu_affinity": affinity,
        "memory_total_bytes": int(vm.total),
        "memory_available_bytes": int(vm.available),
        "load_average_1_5_15": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "usable_cpu_busy_percent": usable_cpu_busy(usable),
        "gpus": nvml.gpus(),
        "dlperf_version": dlperf.__version__,
        "git": git_sha(),
        "env": {k: os.environ[k] for k in RELEVANT_ENV if k in os.environ},
    }


def environment_of(result: dict[str, Any]) -> dict[str, Any]:
    """What of a result's recorded environment decides how fast the same point runs.

    Returns ``{"platform", "cpu_model", "cpus used", "python", "gpu", "gpu driver",
    "framework"}`` (None where the result did not record it): the OS and kernel string (on a
    virtual machine it carries the hypervisor's build), the CPU model and the number of CPUs
    the run could use, Python, the GPU model(s) and driver, and ``framework version (CUDA,
    cuDNN)``. Why: two H200 sessions of this project ran on VM builds ``fc-v657`` and
    ``fc-v973`` of the same machine kind; GPU-bound steps agreed within 1% (resnet50 bf16 b=128
    29.37 / 29.57 ms) while host-bound ones ran up to 1.8x slower on the second (torch eager
    transformer bf16 b=64 19.37 / 34.84 ms).
    """
    e = result.get("env") or {}
    gpus = [g for g in (e.get("gpus") or []) if isinstance(g, dict)]
    v = result.get("versions") or {}
    fw = v.get("framework")
    fwv = None
    if fw and v.get(fw):
        extra = [str(v[k]) for k in ("cuda", "cudnn") if v.get(k) is not None]
        fwv = f"{fw} {v[fw]}" + (f" ({', '.join(extra)})" if extra else "")
    return {"platform": e.get("platform"), "cpu_model": e.get("cpu_model"),
            "cpus used": e.get("cpu_affinity"), "python": e.get("python"),
            "gpu": ", ".join(sorted({str(g.get("name")) for g in gpus})) or None,
            "gpu driver": ", ".join(sorted({str(g.get("driver")) for g in gpus})) or None,
            "framework": fwv}


def environment_differences(a: dict[str, Any], b: dict[str, Any],
                            same_framework: bool = True) -> list[str]:
    """``"field: A vs B"`` for each field of :func:`environment_of` in which results ``a`` and
    ``b`` differ (fields either did not record are skipped; ``framework`` only when
    ``same_framework``: across frameworks it differs by design). Empty: same environment as
    far as recorded."""
    ea, eb = environment_of(a), environment_of(b)
    out = []
    for k, x in ea.items():
        y = eb[k]
        if k == "framework" and not same_framework:
            continue
        if x is not None and y is not None and x != y:
            out.append(f"{k}: {x} vs {y}")
    return out
