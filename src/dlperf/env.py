"""The environment fingerprint recorded with every result (docs/measurement.md rule 12).

:func:`collect_env` is cheap (no subprocess except one ``git`` call, cached) and never imports
a framework; framework versions come from the adapter and are merged in by the worker.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import platform
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dlperf

# psutil, NVML and the placement helpers are imported by the functions that read the host:
# the readers of stored environments (dlperf compare, report) need none of them.

#: Environment variables that change speed or placement; recorded when set.
RELEVANT_ENV = ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "XLA_FLAGS",
                "XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION",
                "TF_XLA_FLAGS", "TF_FORCE_GPU_ALLOW_GROWTH", "NCCL_NVLS_ENABLE",
                "NCCL_ALGO", "NCCL_PROTO", "PYTORCH_CUDA_ALLOC_CONF", "CUBLAS_WORKSPACE_CONFIG",
                "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS", "DLPERF_DATA",
                "MXNET_CPU_WORKER_NTHREADS", "MXNET_ENGINE_TYPE", "DLPERF_MXNET_PYTHON")


def _first_cpu(text: str | None = None) -> dict[str, str] | None:
    """The ``key: value`` fields of the first processor in /proc/cpuinfo (or in ``text``, in
    its format); None where there is no such file (not Linux)."""
    if text is None:
        try:
            text = Path("/proc/cpuinfo").read_text()
        except OSError:
            return None
    fields: dict[str, str] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        k, _, v = line.partition(":")
        fields.setdefault(k.strip(), v.strip())
    return fields


def cpu_model(fields: dict[str, str] | None = None) -> str:
    """The CPU model name from /proc/cpuinfo (Linux; or from ``fields`` of :func:`_first_cpu`),
    else ``platform.processor()``."""
    fields = _first_cpu() if fields is None else fields
    if fields and fields.get("model name"):
        return fields["model name"]
    return platform.processor() or platform.machine()


def cpu_identity(text: str | None = None,
                 fields: dict[str, str] | None = None) -> dict[str, Any] | None:
    """The first CPU's identity from /proc/cpuinfo (or ``text`` in its format, or ``fields`` of
    :func:`_first_cpu`; None where there is none): ``vendor``, ``family``, ``model``,
    ``stepping``, ``microcode`` (strings as the kernel gives them), ``mhz`` (float, the current
    clock at read time) and ``cache`` (e.g. ``"107520 KB"``). On a virtual machine the model
    *name* is often generic ("Intel(R) Xeon(R) Processor", as on the project's H200 machines)
    while family/model/stepping still say which generation runs."""
    keys = {"vendor_id": "vendor", "cpu family": "family", "model": "model",
            "stepping": "stepping", "microcode": "microcode", "cpu MHz": "mhz",
            "cache size": "cache"}
    fields = _first_cpu(text) if fields is None else fields
    out: dict[str, Any] = {keys[k]: v for k, v in (fields or {}).items() if k in keys}
    if "mhz" in out:
        try:
            out["mhz"] = float(out["mhz"])
        except ValueError:
            out["mhz"] = None
    return out or None


#: What :func:`host_speed` times (stored with its result, so a changed workload is visible).
HOST_SPEED_WORKLOAD = "python loop: dict store + len + xor per iteration, 20000 iterations"


def _host_speed_work(n: int) -> int:
    d: dict[int, int] = {}
    acc = 0
    for i in range(n):
        d[i & 63] = i
        acc += len(d) ^ i
    return acc


def host_speed(rounds: int = 11, n: int = 20000,
               clock: Any = None) -> dict[str, Any]:
    """Single-thread speed of the host's Python interpreter: the *minimum* over ``rounds`` of
    the time per iteration (ns) of a fixed pure-Python loop (:data:`HOST_SPEED_WORKLOAD`).

    Why: a training step that is bound by the host (eager PyTorch launching many small
    kernels, a Python input pipeline) runs as fast as one CPU core runs Python, and machines
    of one kind differ there: on this project's H200 machines (same GPU, driver, software and
    generic CPU name) torch eager resnet50 bf16 b=64 took 16.5 ms on two machines lent one
    night and 22.8-24.8 ms on three others, while GPU-bound steps agreed within 1%. The
    minimum of several rounds is the least disturbed by other load (a fixed amount of work
    can only be slowed). About 20 ms in all (11 rounds); run once per worker before anything
    is timed.

    Returns ``{"python_loop_ns", "rounds", "workload"}``; ValueError for ``rounds`` below 1.
    """
    import time

    if rounds < 1:
        raise ValueError(f"host_speed needs at least one round, not {rounds}")
    clock = clock or time.perf_counter_ns
    best = math.inf
    for _ in range(rounds):
        t0 = clock()
        _host_speed_work(n)
        best = min(best, clock() - t0)
    return {"python_loop_ns": best / n, "rounds": rounds, "workload": HOST_SPEED_WORKLOAD}


#: Host speeds (``python_loop_ns``) further apart than this ratio are an environment difference:
#: on the 2-core development machine, busy with other tests, the minimum of 11 rounds varied by
#: 10% from call to call; the differences that matter were 1.4-1.8x.
HOST_SPEED_TOLERANCE = 1.20


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
    import psutil

    total = psutil.cpu_count(logical=True) or len(usable)
    if len(usable) >= total:
        return None
    try:
        per = psutil.cpu_percent(interval=interval_s, percpu=True)
    except Exception:  # pragma: no cover - psutil without per-CPU counters
        return None
    return [float(per[c]) for c in usable if c < len(per)]


#: Prefixes of the /proc/cpuinfo flags (x86 ``flags``, Arm ``Features``) that decide which
#: kernels a framework's CPU backend can use: vector width, fused multiply-add, bf16/int8 dot
#: products, AMX tiles, Arm SIMD/SVE. Recorded as ``cpu_flags`` (the other flags say nothing
#: about training speed and would only lengthen the record).
ISA_FLAG_PREFIXES = ("sse4", "avx", "fma", "f16c", "amx", "vnni", "asimd", "sve", "bf16",
                     "i8mm")


def cpu_isa_flags(fields: dict[str, str] | None = None) -> list[str] | None:
    """The instruction-set flags of the first CPU that matter for training speed
    (:data:`ISA_FLAG_PREFIXES`), sorted, from /proc/cpuinfo (or ``fields`` of
    :func:`_first_cpu`); None where there is no such file or field."""
    fields = _first_cpu() if fields is None else fields
    raw = (fields or {}).get("flags") or (fields or {}).get("Features")
    if raw is None:
        return None
    return sorted({f for f in raw.split() if f.startswith(ISA_FLAG_PREFIXES)})


def collect_env(speed: bool = False) -> dict[str, Any]:
    """Host, CPU, memory, GPUs (via NVML), Python, dlperf version and git SHA, relevant env vars;
    with ``speed``, the host's single-thread speed (:func:`host_speed`, ~20 ms; the worker
    measures it before anything is timed).

    The CPUs: ``cpu_affinity`` (how many this process may use), ``cpu_list`` (which, as a
    cpulist, e.g. ``"0-3"``), ``numa_nodes`` (the NUMA nodes holding them; None where the OS
    gives no NUMA information, ``numa_note`` then says so).

    Returns a JSON-able dict. Framework versions (torch, CUDA, cuDNN, NCCL) are added by the
    worker from the framework adapter.
    """
    import psutil

    from dlperf import nvml
    from dlperf.placement import NODE_DIR, format_cpulist, numa_nodes_of, numa_topology, usable_cpus

    vm = psutil.virtual_memory()
    cpu = _first_cpu()  # /proc/cpuinfo read once for the model name and the identity
    usable = usable_cpus()
    affinity = len(usable)
    topo = numa_topology()
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpu_model": cpu_model(cpu),
        "cpu_id": cpu_identity(fields=cpu),
        "cpu_flags": cpu_isa_flags(cpu),
        "host_speed": host_speed() if speed else None,
        "cpu_logical": psutil.cpu_count(logical=True),
        "cpu_physical": psutil.cpu_count(logical=False),
        "cpu_affinity": affinity,
        "cpu_list": format_cpulist(usable),
        "numa_nodes": numa_nodes_of(usable, topo),
        "numa_note": None if topo is not None else f"no NUMA information ({NODE_DIR} absent)",
        "memory_total_bytes": int(vm.total),
        "memory_available_bytes": int(vm.available),
        "load_average_1_5_15": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "usable_cpu_busy_percent": usable_cpu_busy(usable),
        "gpus": nvml.gpus(),
        "dlperf_version": dlperf.__version__,
        "git": git_sha(),
        "env": {k: os.environ[k] for k in RELEVANT_ENV if k in os.environ},
    }


def optimizer_ran(result: Mapping[str, Any]) -> str | None:
    """The optimizer implementation a result ran, from its ``flags.optimizer``: ``impl`` as
    recorded (``fused``, ``foreach``, ``single``, ``optax``, ``keras.optimizers.SGD``, ...);
    ``default`` for a result stored before ``--optimizer-impl`` existed, which recorded only
    ``foreach: "default"`` (the framework's own pick: ``foreach`` on CUDA, the for-loop on the
    CPU); None where nothing was recorded."""
    o = (result.get("flags") or {}).get("optimizer")
    if not isinstance(o, Mapping):
        return None
    if o.get("impl"):
        return str(o["impl"])
    return "default" if o.get("foreach") == "default" else None


def environment_of(result: dict[str, Any]) -> dict[str, Any]:
    """What of a result's recorded environment decides how fast the same point runs.

    Returns ``{"host", "platform", "cpu_model", "cpu", "cpus used", "python", "gpu", "gpu driver",
    "machine", "host speed", "framework", "optimizer implementation"}`` (None where the result
    did not record it): the host's name (an identity only, never a difference by itself:
    :data:`IDENTITY_ONLY`), the OS
    and kernel string (on a virtual machine it carries the hypervisor's build), the CPU model
    name and its family/model/stepping, the number of CPUs the run could use, Python, the GPU
    model(s) and driver, the machine as the uuids of its GPUs (``GPU-39397f91+...``: two lent
    machines of one kind differ there), the host's single-thread speed (:func:`host_speed`, ns
    per loop iteration; the faster of the worker's probes before and after its measurement,
    ``host_speed`` and ``host_speed_after``), ``framework version (CUDA, cuDNN)`` and the
    optimizer implementation that ran (:func:`optimizer_ran`: ``--optimizer-impl auto`` ran
    PyTorch's ``foreach`` on CUDA before issue 23 and ``fused`` since, 4-5% apart on the H200).
    Why: on this project's H200 machines
    (same GPU model, driver, software and CPU model name) host-bound steps ran up to 1.8x
    slower on some machines than on others (torch eager transformer bf16 b=64 19.37 against
    34.58 ms, on the same VM build fc-v657) while GPU-bound steps agreed within 1% (resnet50
    bf16 b=128 29.37 / 29.57 ms).
    """
    e = result.get("env") or {}
    gpus = [g for g in (e.get("gpus") or []) if isinstance(g, dict)]
    v = result.get("versions") or {}
    fw = v.get("framework")
    fwv = None
    if fw and v.get(fw):
        extra = [str(v[k]) for k in ("cuda", "cudnn") if v.get(k) is not None]
        fwv = f"{fw} {v[fw]}" + (f" ({', '.join(extra)})" if extra else "")
    cid = e.get("cpu_id") or {}
    cpu = (f"family {cid.get('family')} model {cid.get('model')} stepping {cid.get('stepping')}"
           if cid.get("model") is not None else None)
    # The machine: its GPUs' uuids (all of the host's, as NVML lists them; shortened to the
    # first 8 hex digits, which tell the project's machines apart).
    uuids = sorted({str(g["uuid"])[:12] for g in gpus if g.get("uuid")})
    # The faster of the probes before and after the measurement (a passing load slows one:
    # two workers on one H200 a minute apart read 81 and 161 ns with a single probe).
    speeds = [p["python_loop_ns"] for p in (e.get("host_speed"), e.get("host_speed_after"))
              if isinstance(p, dict) and p.get("python_loop_ns")]
    speed = min(speeds) if speeds else None
    return {"host": e.get("hostname") or None, "platform": e.get("platform"), "cpu_model": e.get("cpu_model"), "cpu": cpu,
            "cpus used": e.get("cpu_affinity"), "python": e.get("python"),
            "gpu": ", ".join(sorted({str(g["name"]) for g in gpus if g.get("name")})) or None,
            "gpu driver": ", ".join(sorted({str(g["driver"]) for g in gpus
                                            if g.get("driver")})) or None,
            "machine": "+".join(uuids) or None,
            "host speed": float(speed) if speed else None,
            "framework": fwv, "optimizer implementation": optimizer_ran(result)}


#: Fields of :func:`environment_of` that identify a machine without being a difference of
#: environment by themselves: a host's name changes with every container of one image.
IDENTITY_ONLY = ("host",)


def one_machine(envs: Sequence[Mapping[str, Any]]) -> bool:
    """Whether these environments (:func:`environment_of` dicts) are all of one machine: every
    one names the same ``machine`` (the uuids of its GPUs) or, where none names GPUs (a CPU
    host), the same ``host`` name and CPU (model and identity) with the same software
    (platform, Python)."""
    machines = [e.get("machine") for e in envs]
    if None not in machines:
        return len(set(machines)) == 1
    if any(m is not None for m in machines):
        return False
    keys = ("host", "cpu_model", "cpu", "platform", "python")
    seen = {tuple(e.get(k) for k in keys) for e in envs}
    return len(seen) == 1 and next(iter(seen))[0] is not None


def host_speeds_differ(envs: Sequence[Mapping[str, Any]]) -> bool:
    """True if the host speeds of these environments (:func:`environment_of` dicts) count as
    a difference of environment: more than :data:`HOST_SPEED_TOLERANCE` apart among those that
    recorded one, and not all of one machine (:func:`one_machine`: the probe's spread on one
    machine, see :func:`environment_differences`)."""
    speeds = [e["host speed"] for e in envs if e.get("host speed") is not None]
    if len(speeds) < 2:
        return False
    if one_machine(envs):
        return False
    return max(speeds) / min(speeds) > HOST_SPEED_TOLERANCE


def environment_differences(a: dict[str, Any], b: dict[str, Any],
                            same_framework: bool = True) -> list[str]:
    """``"field: A vs B"`` for each field of :func:`environment_of` in which results ``a`` and
    ``b`` differ (fields either did not record are skipped; ``framework`` and ``optimizer
    implementation`` only when ``same_framework``: across frameworks they differ by design; host speeds only when they
    are more than :data:`HOST_SPEED_TOLERANCE` apart, and not between two results of the same
    machine, see below). Empty: same environment as far as recorded.

    Host speed within one machine: on one H200 machine (``GPU-af969e90``, 36 workers
    in 30 minutes) the probe was bimodal, 72-97 or 132-203 ns, and both probes of a worker read
    the slow mode in 4 of the 36, so it flagged half of that machine's same-machine pairs.
    Where both results name the same machine (the uuids of its GPUs), the host-speed
    difference is therefore not counted as a second environment: the probe tells machines
    apart (1.4-1.8x between machines), not moments on one machine. A CPU host (no GPU uuids)
    is one machine where both name the same host, CPU and software (:func:`one_machine`): the
    eager and graph points of one ``dlperf run`` on a busy 2-core host read probes 1.5x
    apart."""
    ea, eb = environment_of(a), environment_of(b)
    out = []
    for k, x in ea.items():
        if k in IDENTITY_ONLY:
            continue
        y = eb[k]
        if k in ("framework", "optimizer implementation") and not same_framework:
            continue
        if x is None or y is None:
            continue
        if k == "host speed":
            if host_speeds_differ((ea, eb)):  # not on one machine: the docstring says why
                out.append(f"host speed: {x:.1f} vs {y:.1f} ns per Python loop iteration "
                           f"({max(x, y) / min(x, y):.2f}x)")
        elif x != y:
            out.append(f"{k}: {x} vs {y}")
    return out


# --- the thread policy of CPU points -----------------------------------------------------------

#: Other work on the usable CPUs (in CPUs: 1.0 = one CPU kept busy) from which a host counts as
#: busy for :func:`choose_threads`: half a CPU taken means a thread of a framework that uses
#: every CPU waits for one about every other time slice.
BUSY_OTHER_CPUS = 0.5
#: How long :func:`choose_threads` samples the CPUs' busy share (s), while dlperf itself idles.
THREAD_SAMPLE_S = 0.5
#: The measurement behind the policy (2-core Xeon VM, load average 2.7-3.3 from
#: other users; `dlperf run --threads 1,2 --min-time 1`, torch eager, b=32, fp32).
THREAD_EVIDENCE = ("on a busy 2-core host, 2 threads made resnet56_tiny take 913 ms per step "
                   "against 22 ms on 1 thread, and fcn5_tiny's p95 step 167x its median "
                   "against 1.2x on 1 thread")


@dataclass(frozen=True)
class ThreadChoice:
    """What :func:`choose_threads` chose for the CPU points whose threads were not given.

    ``threads``: the thread count given to each worker, or None for the framework's own
    default (all usable CPUs); ``usable_cpus``: the CPUs this process may use;
    ``other_busy_cpus``: CPUs kept busy by other work over the sample (None if unread);
    ``load_average_1m``: the 1-minute load average (None where the OS has none); ``busy``:
    whether that counts as a busy host; ``reason``: why, in words."""

    threads: int | None
    usable_cpus: int
    other_busy_cpus: float | None
    load_average_1m: float | None
    busy: bool
    reason: str
    #: When the choice was made, where it is a results file's earlier choice reused
    #: (:func:`dlperf.resume.stored_thread_choice`); None: measured now.
    chosen_at: str | None = None

    def record(self) -> dict[str, Any]:
        """The JSON stored with each result it applied to (``env.thread_policy``)."""
        return {"policy": "auto", **dataclasses.asdict(self), "sample_s": THREAD_SAMPLE_S,
                "busy_other_cpus_threshold": BUSY_OTHER_CPUS, "evidence": THREAD_EVIDENCE}

    @classmethod
    def from_record(cls, d: dict[str, Any], chosen_at: str | None) -> ThreadChoice:
        """The choice a stored ``env.thread_policy`` (:meth:`record`) holds, as reused now;
        ``chosen_at``: when it was made (its ``chosen_at``, else the result's date).

        Raises:
            ValueError: ``d`` is not an automatic choice with a usable CPU count.
        """
        threads, usable = d.get("threads"), d.get("usable_cpus")
        if (d.get("policy") != "auto" or not isinstance(usable, int)
                or not (threads is None or isinstance(threads, int))):
            raise ValueError(f"not a thread policy record: {d!r:.200}")
        return cls(threads, usable, d.get("other_busy_cpus"), d.get("load_average_1m"),
                   bool(d.get("busy")), str(d.get("reason") or "auto"),
                   d.get("chosen_at") or chosen_at)

    def line(self) -> str:
        """The one line printed before a run: what was chosen and why."""
        chosen = (f"{self.threads} per worker" if self.threads is not None
                  else "the framework's default")
        if self.chosen_at:
            return (f"threads: {chosen} (this results file's choice since {self.chosen_at}, "
                    f"kept so its points stay comparable: {self.reason}; --threads N chooses, "
                    "--rechoose-threads measures the host again)")
        return f"threads: {chosen} ({self.reason}; --threads N chooses)"


def other_busy_cpus(usable: Sequence[int], interval_s: float = THREAD_SAMPLE_S) -> float | None:
    """CPUs of ``usable`` kept busy by all processes over ``interval_s`` seconds (the sum of
    their busy shares, ``psutil.cpu_percent(percpu=True)`` / 100); the caller idles meanwhile,
    so this is other work. None where psutil cannot read per-CPU counters."""
    import psutil

    try:
        per = psutil.cpu_percent(interval=interval_s, percpu=True)
    except Exception:  # pragma: no cover - psutil without per-CPU counters
        return None
    return sum(float(per[c]) for c in usable if c < len(per)) / 100.0


def choose_threads(usable: Sequence[int] | None = None, other: float | None = None,
                   load_1m: float | None = None, sample: bool = True) -> ThreadChoice:
    """The thread policy for CPU points whose threads were not given, from a measurement of
    the host's load when the run starts.

    A quiet host (less than :data:`BUSY_OTHER_CPUS` CPUs of other work over
    :data:`THREAD_SAMPLE_S`, and a 1-minute load average below the usable CPUs): the
    framework's default (None: every usable CPU). A busy one: ``floor(usable - other)``
    threads, at most ``usable - 1`` and at least 1, so that the framework's threads do not wait
    for CPUs taken by other work (:data:`THREAD_EVIDENCE`). One usable CPU: nothing to choose.

    Args:
        usable: the CPUs this process may run on (default: its affinity).
        other, load_1m: the measurements, when the caller has them (tests); else measured
            (``other`` only when ``sample``).
    """
    if usable is None:
        try:
            usable = sorted(os.sched_getaffinity(0))
        except AttributeError:
            usable = list(range(os.cpu_count() or 1))
    n = len(usable)
    if load_1m is None and hasattr(os, "getloadavg"):
        load_1m = os.getloadavg()[0]
    if n <= 1:
        return ThreadChoice(None, n, other, load_1m, False, "one usable CPU: nothing to choose")
    if other is None and sample:
        other = other_busy_cpus(usable)
    by_other = other is not None and other >= BUSY_OTHER_CPUS
    by_load = load_1m is not None and load_1m >= n
    sampled = (f"other work kept {other:.1f} of the {n} usable CPUs busy over "
               f"{THREAD_SAMPLE_S:g} s" if other is not None else None)
    load = (f"load average {load_1m:.1f}" if load_1m is not None else None)
    if not (by_other or by_load):
        seen = ", ".join(x for x in (sampled or f"{n} usable CPUs", load) if x)
        return ThreadChoice(None, n, other, load_1m, False, f"auto: the host was quiet "
                            f"({seen})")
    # name what made it busy first, then the other reading (a load average of 3.4 with 0.0
    # CPUs of other work sampled is busy by the load average: processes waiting for a CPU)
    why: list[str] = []
    if by_other and sampled is not None:  # by_other: `other` was measured, so said
        why.append(sampled)
    if by_load:
        why.append(f"a load average of {load_1m:.1f} processes running or waiting for its "
                   f"{n} usable CPUs")
    also = ([f"the {THREAD_SAMPLE_S:g} s sample found {other:.1f} CPUs of other work"]
            if sampled and not by_other else [f"load average {load_1m:.1f}"]
            if load and not by_load else [])
    threads = max(1, min(n - 1, math.floor(n - (other or 0.0))))
    return ThreadChoice(threads, n, other, load_1m, True,
                        f"auto: the host was busy: {' and '.join(why)}"
                        + (f" ({also[0]})" if also else "")
                        + "; a framework on every CPU of a busy host waits for them and times "
                          "bimodally")
