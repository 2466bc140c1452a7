"""What the performance model reads from stored results: one typed record per measurement.

This is the *only* module of the performance model that reads a results file. Everything else
in :mod:`dlperf.perfmodel` works on :class:`Point` and :class:`CollectivePoint` values, so when
the store grows a typed record (``dlperf.results.schema.RunRecord``) only :func:`load` changes.

A :class:`Point` keeps what a model of the step time needs: the configuration (which series a
measurement belongs to), the median iteration time and the spread of its samples, the analytic
work (training FLOPs per sample from the model spec; the framework's bytes per step), the
ceilings measured in the same worker, the host-speed probe, the device busy time and op-class
times of a traced run, and the data-parallel facts (devices, per-device batch, DDP options).
Fields the result did not record are ``None``; nothing is invented here.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dlperf.perfmodel.special import cpu_rank_threads
from dlperf.perfmodel.special import mode_key as mode_key
from dlperf.results.dbfile import results_files


@dataclass(frozen=True)
class RecordedBucket:
    """One DDP gradient bucket of one rank as recorded (``dist.buckets_timeline``; times in s
    from the traced iteration's host start, medians over the traced iterations).

    Attributes:
        index: DDP's bucket index (reduction order is the record's order).
        size_bytes: the bucket's gradient bytes.
        ready_s: when DDP handed it to the process group (the enqueue or kernel launch that
            follows the bucket's last gradient); None where not observable.
        start_s, end_s, dur_s: its all-reduce (gloo span or NCCL kernel).
    """

    index: int | None
    size_bytes: float
    ready_s: float | None
    start_s: float
    end_s: float
    dur_s: float


@dataclass(frozen=True)
class RankBuckets:
    """One rank's recorded bucket timeline (``dist.buckets_timeline.per_rank[r]``; s from the
    iteration's host start): backward's first and last non-communication op (``t_b_start_s``
    is None in records made before it was kept), the last all-reduce end and the exposed tail
    (median over iterations of max(0, last end - backward end)), the buckets in reduction
    order, and how ready times were observed (``ready_source``)."""

    rank: int
    t_b_start_s: float | None
    t_b_end_s: float
    last_end_s: float
    exposed_tail_s: float
    buckets: tuple[RecordedBucket, ...]
    ready_source: str | None


def _ns(x: Any) -> float | None:
    v = _float(x)
    return None if v is None else v * 1e-9


def rank_buckets(bt: Mapping[str, Any] | None) -> tuple[RankBuckets, ...]:
    """The matched ranks of a ``dist.buckets_timeline`` record (ns -> s); a rank that failed,
    matched no iteration or lacks its backward end or all-reduce times is left out."""
    out = []
    for r in (bt or {}).get("per_rank") or []:
        if not isinstance(r, Mapping) or not r.get("matched_iterations") or not r.get("buckets"):
            continue
        t_end, last, tail = _ns(r.get("t_b_end_ns")), _ns(r.get("last_end_ns")), _ns(
            r.get("exposed_tail_ns"))
        bks = [RecordedBucket(b.get("index"), float(b.get("bytes") or 0), _ns(b.get("ready_ns")),
                              s0, e0, _ns(b.get("dur_ns")) or e0 - s0)
               for b in r["buckets"]
               for s0, e0 in [(_ns(b.get("start_ns")), _ns(b.get("end_ns")))]
               if s0 is not None and e0 is not None]
        if t_end is None or last is None or len(bks) != len(r["buckets"]):
            continue
        out.append(RankBuckets(int(r.get("rank") or 0), _ns(r.get("t_b_start_ns")), t_end, last,
                               tail or 0.0, tuple(bks), r.get("ready_source")))
    return tuple(out)


@dataclass(frozen=True)
class Point:
    """One stored ``ok`` measurement of a training configuration (times in s, work per step).

    Attributes:
        source: the results file it came from (its path as given).
        result_id: the row id in that file.
        model, framework, mode, precision, device, data: the configuration (store columns).
        layout: the memory layout asked for (``auto``, ``nchw``, ... or None when not recorded).
        threads: host threads asked for (None: the framework's default).
        grad_accum: micro-batches accumulated per step (1: none).
        batch_size: the global mini-batch (samples per iteration over all devices).
        world_size, nnodes, per_device_batch: data-parallel shape (1, 1, batch on one device).
        variant: non-default DDP options, e.g. ``"gradient_as_bucket_view=True"`` ("" for none).
        instrumented: the run was traced or broke the step into phases (``--breakdown`` /
            ``--trace``), which changes what is measured; such points calibrate device times
            but are never used as step times.
        step_time_s: median iteration time (s).
        ci_rel: half-width of the median's 95% CI relative to the median (None if not stored).
        n_measured: measured iterations.
        train_flops_per_sample: analytic training FLOPs of one sample (model spec).
        params: parameters of the model.
        bytes_per_step: the framework's bytes moved per iteration (PyTorch: ATen operands and
            results, unfused; XLA: "bytes accessed" of the compiled step), or None.
        matmul_flops_per_s: the GEMM ceilings measured in the same worker, {precision: FLOP/s}.
        bandwidth_bytes_per_s: the STREAM-scale bandwidth measured in the same worker.
        host_speed_ns: the host-speed probe before the run (``env.host_speed.python_loop_ns``:
            ns per iteration of a fixed Python loop; larger is slower), and after it.
        busy_s: device busy time per iteration in a traced run (kernels and copies, merged).
        op_class_s: device time per op class per iteration in a traced run.
        dispatch_s: host time per iteration of a traced run (profiler on: inflated).
        host_dispatch_s: the host's untraced dispatch time per iteration, probed from an idle
            device after the measurement (record ``host.dispatch_s``, schema 9; median, s).
        host_sync_wait_s: the wait for the step's output after the host returned, in that
            probe (median, s): > 0 means the host finished issuing before the device finished.
        kernels_per_iter: device kernels per iteration of a traced run of this point.
        launches_per_iter: host launches per iteration of a compiled XLA program, counted from
            the point's stored timeline (:mod:`dlperf.perfmodel.hostcount`: kernels folded into
            the command buffers an unprofiled run launches); None without an XLA timeline.
        ops_per_step: operators one eager step dispatches (record ``flops.ops_per_step``;
            PyTorch: ATen operators other than views), counted without the device.
        exposed_comm_s: communication not hidden by compute per iteration (profiled, DP only).
        loader_workers: input-pipeline worker processes (None: data on the device).
        data_wait_share: share of the measured time spent waiting for input.
        data_wait_mean_s: mean wait for the next batch per measured iteration (record
            ``data_wait.mean_s``), None where no input pipeline was timed.
        step_time_mean_s: mean iteration time (``measured_time_s / n_measured``), None where
            not stored.
        loader_impl: the input pipeline's implementation (``data_info.pipeline.impl``, e.g.
            ``torch.utils.data.DataLoader``), None for data on the device.
        t_io_s: the training thread's time getting a batch in a ``--breakdown`` run
            (``breakdown.host.t_io`` median; the phase timer's when the host's is absent).
        device_name: the accelerator's name (``NVIDIA H200``).
        session: host and day of the measurement, ``"<hostname>/<cpu model>/<YYYY-MM-DD>"``.
        peak_reserved_bytes, nvml_used_bytes: the framework allocator's reserved peak and the
            device memory NVML saw in use (bytes; None where not recorded).
        device_memory_total_bytes: the device's memory (``env.gpus[0].memory_total_bytes``).
        cpu_model: the host CPU's name (``env.cpu_model``).
        buckets: the recorded per-bucket all-reduce timeline of a traced PyTorch DDP run
            (``dist.buckets_timeline``), one :class:`RankBuckets` per rank whose iterations
            matched; ``()`` where none was recorded.
        comm_backend: the data-parallel run's process-group backend (``dist.process_group_
            backend``: ``nccl``, ``gloo``), None on one device or where not recorded.
        compile_mode: the compiler's mode of a graph run (``config.compile_mode``; PyTorch:
            torch.compile's ``default``, ``reduce-overhead``: CUDA graphs, ...); ``default``
            where none was recorded. A mode other than ``default`` is a configuration of its
            own (:attr:`group`): replaying CUDA graphs removes the per-operator host work.
    """

    source: str
    result_id: int
    model: str
    framework: str
    mode: str
    precision: str
    device: str
    data: str
    layout: str | None
    threads: int | None
    grad_accum: int
    batch_size: int
    world_size: int
    nnodes: int
    per_device_batch: int
    variant: str
    instrumented: bool
    step_time_s: float
    ci_rel: float | None
    n_measured: int | None
    train_flops_per_sample: float | None
    params: int | None
    bytes_per_step: float | None
    matmul_flops_per_s: dict[str, float] = field(default_factory=dict)
    bandwidth_bytes_per_s: float | None = None
    host_speed_ns: tuple[float | None, float | None] = (None, None)
    busy_s: float | None = None
    op_class_s: dict[str, float] = field(default_factory=dict)
    dispatch_s: float | None = None
    host_dispatch_s: float | None = None
    host_sync_wait_s: float | None = None
    kernels_per_iter: float | None = None
    launches_per_iter: float | None = None
    ops_per_step: int | None = None
    exposed_comm_s: float | None = None
    loader_workers: int | None = None
    data_wait_share: float | None = None
    data_wait_mean_s: float | None = None
    step_time_mean_s: float | None = None
    loader_impl: str | None = None
    t_io_s: float | None = None
    device_name: str | None = None
    session: str = ""
    compile_mode: str = "default"
    peak_reserved_bytes: float | None = None
    nvml_used_bytes: float | None = None
    device_memory_total_bytes: float | None = None
    cpu_model: str | None = None
    buckets: tuple[RankBuckets, ...] = ()
    comm_backend: str | None = None

    @property
    def config(self) -> tuple[str, str, str, str, str, str]:
        """``(model, framework, mode, precision, device, data)``."""
        return (self.model, self.framework, self.mode, self.precision, self.device, self.data)

    @property
    def group(self) -> tuple[str, str, str, str]:
        """``(framework, mode, precision, device)``: what roofline efficiencies are fitted per;
        the mode carries a compile mode other than ``default`` (:func:`mode_key`)."""
        return (self.framework, mode_key(self.mode, self.compile_mode), self.precision,
                self.device)

    @property
    def label(self) -> str:
        """``model framework/mode precision device b=B [xN]``."""
        dp = f" x{self.world_size}" if self.world_size > 1 else ""
        return (f"{self.model} {self.framework}/{mode_key(self.mode, self.compile_mode)} "
                f"{self.precision} {self.device} b={self.batch_size}{dp}")


@dataclass(frozen=True)
class CollectivePoint:
    """One message size of a stored collective benchmark (``dlperf allreduce``).

    Attributes:
        source, run_id: file and benchmark run.
        benchmark: ``allreduce`` (others are ignored by the model).
        nranks: ranks taking part.
        size_bytes: message size per rank (bytes).
        time_s: the slowest rank's mean time per call (s).
        busbw_gbps: bus bandwidth (GB/s, nccl-tests' definition).
        device_name: the accelerator's name.
        backend: the process-group backend that ran it (``nccl``, ``gloo``; None: not stored).
    """

    source: str
    run_id: str
    benchmark: str
    nranks: int
    size_bytes: int
    time_s: float
    busbw_gbps: float | None
    device_name: str | None
    backend: str | None = None


@dataclass
class Records:
    """Everything :func:`load` read: measurements and collective benchmarks."""

    points: list[Point]
    collectives: list[CollectivePoint]
    sources: list[str]


def _get(d: Mapping[str, Any] | None, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, Mapping):
            return None
        d = d.get(k)
    return d


def _float(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if v == v and v not in (float("inf"), float("-inf")) else None


def _variant(cfg: Mapping[str, Any]) -> str:
    # DDP options at a non-default value (the defaults of dlperf's DDP config and PyTorch).
    ddp = cfg.get("ddp") or {}
    defaults = {"bucket_cap_mb": 25.0, "gradient_as_bucket_view": False, "static_graph": False,
                "find_unused_parameters": False, "broadcast_buffers": True}
    changed = [f"{k}={ddp[k]}" for k, v in defaults.items() if k in ddp and ddp[k] != v]
    return ",".join(changed)


def _gpu_memory(env: Mapping[str, Any], device: str) -> float | None:
    """The first GPU's memory in ``env.gpus`` (bytes) for a ``cuda`` run, else None."""
    gpus = env.get("gpus") if device == "cuda" else None
    first = gpus[0] if isinstance(gpus, list) and gpus and isinstance(gpus[0], Mapping) else {}
    return _float(first.get("memory_total_bytes"))


def point_from_row(row: Mapping[str, Any], source: str) -> Point | None:
    """A :class:`Point` from one store row (``ResultStore.rows()`` dict), or None when the row
    is not an ``ok`` measurement with a median step time."""
    from dlperf.results.store import result_of

    if row.get("status") != "ok" or not _float(row.get("step_time_median_s")):
        return None
    res = result_of(row)
    cfg = res.get("config") or {}
    env = res.get("env") or {}
    ceil = res.get("ceilings") or {}
    trace = res.get("trace") or {}
    med = float(row["step_time_median_s"])
    lo, hi = _float(row.get("step_time_ci_low_s")), _float(row.get("step_time_ci_high_s"))
    world = int(row.get("world_size") or 1)
    batch = int(row["batch_size"])
    op = _get(res, "op_classes", "per_iter_s") or {}
    return Point(
        source=source, result_id=int(row["id"]), model=row.get("model") or "",
        framework=row.get("framework") or "", mode=row.get("mode") or "",
        precision=row.get("precision") or "", device=row.get("device") or "",
        data=row.get("data") or "synthetic", layout=cfg.get("layout"),
        threads=cpu_rank_threads(row.get("threads"), row.get("device") or "", world, [
            r.get("threads") for r in (_get(res, "dist", "per_rank") or []) if isinstance(r, Mapping)]), grad_accum=int(row.get("grad_accum") or 1),
        batch_size=batch, world_size=world, nnodes=int(row.get("nnodes") or 1),
        per_device_batch=int(row.get("per_device_batch") or batch // world),
        variant=_variant(cfg) if world > 1 else "",
        instrumented=bool(cfg.get("breakdown") or cfg.get("trace_dir")),
        step_time_s=med,
        ci_rel=(hi - lo) / 2 / med if lo is not None and hi is not None else None,
        n_measured=row.get("n_measured"),
        train_flops_per_sample=_float(row.get("train_flops_per_sample")),
        params=row.get("params"),
        bytes_per_step=_float(_get(res, "flops", "bytes_per_step")),
        matmul_flops_per_s={k: float(v) for k, v in (ceil.get("matmul_flops_per_s") or {}).items()
                            if _float(v)},
        bandwidth_bytes_per_s=_float(ceil.get("bandwidth_bytes_per_s")),
        host_speed_ns=(_float(_get(env, "host_speed", "python_loop_ns")),
                       _float(_get(env, "host_speed_after", "python_loop_ns"))),
        busy_s=_float(trace.get("busy_s")) if trace.get("available") else None,
        op_class_s={k: float(v) for k, v in op.items() if _float(v) is not None},
        dispatch_s=_float(row.get("dispatch_s")),
        host_dispatch_s=_float(_get(res, "host", "dispatch_s", "median")),
        host_sync_wait_s=_float(_get(res, "host", "sync_wait_s", "median")),
        kernels_per_iter=_float(trace.get("kernels_per_iter")),
        ops_per_step=_get(res, "flops", "ops_per_step"),
        exposed_comm_s=_float(row.get("exposed_comm_s")),
        loader_workers=row.get("loader_workers"),
        data_wait_share=_float(row.get("data_wait_share")),
        data_wait_mean_s=_float(_get(res, "data_wait", "mean_s")),
        step_time_mean_s=_float(row.get("step_time_mean_s")),
        loader_impl=_get(res, "data_info", "pipeline", "impl"),
        t_io_s=_float(_get(res, "breakdown", "host", "t_io", "median")
                      or _get(res, "breakdown", "phases", "t_io", "median")),
        device_name=row.get("device_name"),
        session="/".join(str(x) for x in (env.get("hostname"), _get(env, "cpu_id", "model"),
                                         (row.get("created_at") or "")[:10])),
        compile_mode=str(cfg.get("compile_mode") or "default"),
        peak_reserved_bytes=_float(row.get("peak_reserved_bytes")),
        nvml_used_bytes=_float(row.get("nvml_used_bytes")),
        device_memory_total_bytes=_gpu_memory(env, row.get("device") or ""),
        cpu_model=env.get("cpu_model") if isinstance(env.get("cpu_model"), str) else None,
        buckets=rank_buckets(_get(res, "dist", "buckets_timeline")) if world > 1 else (),
        comm_backend=_get(res, "dist", "process_group_backend") if world > 1 else None,
    )


#: Timelines whose host launches :mod:`hostcount` counts: those of XLA programs (their device
#: ops come from an XSpace trace with HLO ops, which the command-buffer rules are about).
XLA_TIMELINE_SOURCE = "XSpace"


def cache_root() -> Path:
    """The folder of the performance model's on-disk caches (launch counts here, back-test
    residuals and roofline group fits in :mod:`dlperf.perfmodel.fitcache`):
    ``$DLPERF_CACHE_DIR``, default ``~/.cache/dlperf``."""
    return Path(os.environ.get("DLPERF_CACHE_DIR") or Path.home() / ".cache" / "dlperf")


def _launch_counts(store: Any, path: str) -> dict[int, float]:
    """``{result id: launches per iteration}`` of the XLA timelines stored in ``path`` (open as
    ``store``). Decoding them takes ~0.7 s for calibration2.db's 28 JAX timelines, so the
    counts are kept under ``$DLPERF_CACHE_DIR`` (default ``~/.cache/dlperf``), keyed by the
    file's content and the counting rule's source (``hostcount.py``)."""
    import hashlib

    from dlperf.perfmodel import hostcount
    from dlperf.results import timelines

    db = store._db
    if not db.execute("SELECT name FROM sqlite_master WHERE type='table' AND name='timelines'"
                      ).fetchone():
        return {}
    h = hashlib.sha256(Path(hostcount.__file__).read_bytes())
    h.update(Path(path).read_bytes())
    cache = cache_root() / f"perfmodel-launches-{h.hexdigest()[:20]}.json"
    from dlperf.jsoncache import read_json, write_json

    def counts(d: Any) -> dict[int, float]:  # ids and finite positive counts, or refused
        out = {int(k): float(v) for k, v in d.items()}
        if not all(0 < v < 1e9 for v in out.values()):  # NaN fails it too
            raise ValueError("a launch count out of bounds")
        return out

    got = read_json(cache, counts)
    if got is not None:
        return got
    out: dict[int, float] = {}
    for (rid,) in db.execute("SELECT result_id FROM timelines").fetchall():
        tl = timelines.load(store, rid)
        if not tl or XLA_TIMELINE_SOURCE not in str(tl.get("source") or ""):
            continue
        try:
            n = hostcount.launches_per_iter(timelines.decode(tl))
        except ValueError:
            continue  # a timeline that does not decode counts nothing
        if n:
            out[int(rid)] = n
    write_json(cache, {str(k): v for k, v in out.items()})  # a read-only home: counted again
    return out


def load(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> Records:
    """Read results files (or folders of ``*.db``) into :class:`Records`.

    Args:
        paths: one path or several; a folder stands for every ``*.db`` in it.

    Returns:
        The ``ok`` measurements (newest row per run key, as the store's views show them) and
        the collective benchmark rows, in file order.

    Raises:
        ConfigError: a file is missing or is not a dlperf results database (from the store),
            or a folder holds no ``*.db`` (:func:`dlperf.results.dbfile.results_files`).
    """
    from dlperf.results.store import ResultStore

    files = results_files(paths)
    points: list[Point] = []
    colls: list[CollectivePoint] = []
    for f in files:
        with ResultStore(f, read_only=True) as store:
            counts = _launch_counts(store, f)
            for row in store.rows():
                p = point_from_row(row, f)
                if p is not None:
                    if p.result_id in counts:
                        p = replace(p, launches_per_iter=counts[p.result_id])
                    points.append(p)
            for c in store.collectives():
                if _float(c.get("time_s")) and c.get("size_bytes"):
                    colls.append(CollectivePoint(
                        source=f, run_id=str(c.get("run_id")), benchmark=c.get("benchmark") or "",
                        nranks=int(c.get("nranks") or 0), size_bytes=int(c["size_bytes"]),
                        time_s=float(c["time_s"]), busbw_gbps=_float(c.get("busbw_gbps")),
                        device_name=c.get("device_name"), backend=c.get("backend")))
    return Records(points, colls, files)


def point_id(p: Any) -> str:
    """``source:result_id`` of a stored point (:class:`dlperf.perfmodel.records.Point`), the
    source as its resolved path (the same file named relatively or absolutely is one file)."""
    return f"{os.path.realpath(p.source)}:{p.result_id}"
