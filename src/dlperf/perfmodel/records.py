"""What the performance model reads from stored results: one typed record per measurement.

This is the *only* module of the performance model that reads a results file, through the
results package's one reader (:meth:`dlperf.results.store.ResultStore.records`: typed
:class:`~dlperf.results.schema.RunRecord` objects, damaged rows left out). Everything else in
:mod:`dlperf.perfmodel` works on the :class:`Point` and :class:`CollectivePoint` values made
here (:func:`point_of`), never on rows.

A :class:`Point` keeps what a model of the step time needs: the configuration (which series a
measurement belongs to), the median iteration time and the spread of its samples, the analytic
work (training FLOPs per sample from the model spec; the framework's bytes per step), the
ceilings measured in the same worker, the host-speed probe, the device busy time and op-class
times of a traced run, and the data-parallel facts (devices, per-device batch, DDP options).
Fields the result did not record are ``None``; nothing is invented here.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlperf.config.axes import ddp_changes
from dlperf.config.identity import label_of, session_of
from dlperf.jsoncache import cache_root as cache_root
from dlperf.perfmodel.special import cpu_rank_threads
from dlperf.perfmodel.special import mode_key as mode_key
from dlperf.results.dbfile import results_files

if TYPE_CHECKING:  # a prediction reads stored points, not records: these load with the store
    from dlperf.results.parts import Env
    from dlperf.results.schema import RunRecord


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
    v = _num(x)
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


def label_data(data: str) -> str | None:
    """A data set as a label names it (:func:`dlperf.config.identity.label_of`): None, left
    out, for the default ``synthetic``."""
    return None if data == "synthetic" else data


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
        session: host and day of the measurement, ``"<hostname>/<cpu>/<YYYY-MM-DD>"``
            (:func:`dlperf.config.identity.session_of`).
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
        """The point's label, written by the one label function
        (:func:`dlperf.config.identity.label_of`), data only where not synthetic."""
        return label_of({
            "model": self.model, "framework": self.framework, "mode": self.mode,
            "compile_mode": self.compile_mode, "device": self.device,
            "precision": self.precision, "batch_size": self.batch_size,
            "world_size": self.world_size, "nnodes": self.nnodes,
            "per_device_batch": self.per_device_batch,
            "data": label_data(self.data)})


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
    """Everything :func:`load` read: measurements and collective benchmarks, and the damaged
    rows each file's reader skipped (``damaged``: file -> {row id: what is wrong}, files
    without any left out; :mod:`dlperf.results.rowcheck`)."""

    points: list[Point]
    collectives: list[CollectivePoint]
    sources: list[str]
    damaged: dict[str, dict[int, str]] = field(default_factory=dict)

    def damaged_notes(self) -> list[str]:
        """One line per file with damaged rows: how many were skipped, which and why
        (:func:`dlperf.results.rowcheck.describe`, the words ``dlperf results`` uses)."""
        from dlperf.results.rowcheck import describe

        return [describe(f, bad) for f, bad in self.damaged.items() if bad]


def _num(x: Any) -> float | None:
    """``x`` as a finite float, else None (a NaN or an infinity says nothing measured)."""
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) \
        and math.isfinite(x) else None


def _median(stats: Mapping[str, Any] | None) -> float | None:
    """The ``median`` of a record's statistics dict (``host.dispatch_s``, ...)."""
    return _num((stats or {}).get("median"))


def _gpu_memory(env: Env | None, device: str) -> float | None:
    """The first GPU's memory in ``env.gpus`` (bytes) for a ``cuda`` run, else None."""
    gpus = env.gpus if env is not None and device == "cuda" else None
    first = gpus[0] if gpus and isinstance(gpus[0], Mapping) else {}
    return _num(first.get("memory_total_bytes"))


def point_of(rec: RunRecord, source: str) -> Point | None:
    """A :class:`Point` from one stored record (``ResultStore.records``), or None when it is
    not an ``ok`` measurement with a median step time."""
    from dlperf.results.parts import (
        Breakdown,
        DataWait,
        Dist,
        Env,
        Flops,
        Host,
        Memory,
        Spec,
        Summary,
        Timing,
        Trace,
    )
    from dlperf.results.view import setting

    ident = rec.identity
    summ, spec, trace = rec.summary or Summary(), ident.spec or Spec(), rec.trace or Trace()
    med = _num(summ.median)
    if ident.status != "ok" or not med or ident.batch_size is None or rec.stored is None:
        return None
    flops, dist, env = rec.flops or Flops(), rec.dist or Dist(), rec.env or Env()
    ceil, mem, dw = rec.ceilings or {}, rec.memory or Memory(), rec.data_wait or DataWait()
    bd, host = rec.breakdown or Breakdown(), rec.host or Host()
    lo, hi = _num(summ.ci_low), _num(summ.ci_high)
    world = ident.world_size or 1
    batch = ident.batch_size
    device = ident.device or ""
    return Point(
        source=source, result_id=rec.stored.id, model=ident.model or "",
        framework=ident.framework or "", mode=ident.mode or "",
        precision=ident.precision or "", device=device,
        data=ident.data or "synthetic", layout=setting(rec, "layout"),
        threads=cpu_rank_threads(ident.threads, device, world,
                                 [r.threads for r in dist.per_rank or []]),
        grad_accum=ident.grad_accum or 1,
        batch_size=batch, world_size=world, nnodes=ident.nnodes or 1,
        per_device_batch=ident.per_device_batch or batch // world,
        instrumented=bool(setting(rec, "breakdown") or setting(rec, "trace_dir")),
        step_time_s=med,
        ci_rel=(hi - lo) / 2 / med if lo is not None and hi is not None else None,
        n_measured=(rec.timing or Timing()).n_measured,
        train_flops_per_sample=_num(spec.train_flops_per_sample),
        params=int(spec.params) if spec.params is not None else None,
        bytes_per_step=_num(flops.bytes_per_step),
        matmul_flops_per_s={k: float(v) for k, v in (ceil.get("matmul_flops_per_s") or {})
                            .items() if _num(v)},
        bandwidth_bytes_per_s=_num(ceil.get("bandwidth_bytes_per_s")),
        host_speed_ns=(_num((env.host_speed or {}).get("python_loop_ns")),
                       _num((env.host_speed_after or {}).get("python_loop_ns"))),
        busy_s=_num(trace.busy_s) if trace.available else None,
        op_class_s={k: float(v) for k, v in ((rec.op_classes and rec.op_classes.per_iter_s)
                                             or {}).items() if _num(v) is not None},
        dispatch_s=_median(trace.dispatch_s),
        host_dispatch_s=_median(host.dispatch_s),
        host_sync_wait_s=_median(host.sync_wait_s),
        kernels_per_iter=_num(trace.kernels_per_iter),
        ops_per_step=flops.ops_per_step,
        exposed_comm_s=_num(rec.exposed_comm_s),
        loader_workers=setting(rec, "loader_workers"),
        data_wait_share=_num(dw.share),
        data_wait_mean_s=_num(dw.mean_s),
        step_time_mean_s=_num(summ.mean),
        loader_impl=((rec.data_info or {}).get("pipeline") or {}).get("impl"),
        t_io_s=_median((bd.host or {}).get("t_io")) or _median((bd.phases or {}).get("t_io")),
        device_name=rec.device_name,
        # the host session its host time belongs to (the one session label)
        session=session_of(env.hostname, env.cpu_model, env.cpu_id, ident.created_at),
        compile_mode=str(setting(rec, "compile_mode") or "default"),
        peak_reserved_bytes=_num(mem.peak_reserved_bytes),
        nvml_used_bytes=_num(mem.nvml_used_bytes),
        device_memory_total_bytes=_gpu_memory(env, device),
        cpu_model=env.cpu_model,
        **_data_parallel(rec, dist, world),
    )


def _data_parallel(rec: RunRecord, dist: Any, world: int) -> dict[str, Any]:
    """The data-parallel fields of a record's :class:`Point`: DDP's non-default options
    (``variant``), the recorded buckets and the process-group backend; a one-device run's
    none."""
    from dlperf.results.view import setting

    if world <= 1:
        return {"variant": "", "buckets": (), "comm_backend": None}
    return {"variant": ",".join(ddp_changes(setting(rec, "ddp"))),
            "buckets": rank_buckets(dist.buckets_timeline),
            "comm_backend": dist.process_group_backend}


#: Timelines whose host launches :mod:`hostcount` counts: those of XLA programs (their device
#: ops come from an XSpace trace with HLO ops, which the command-buffer rules are about).
XLA_TIMELINE_SOURCE = "XSpace"


def _launch_counts(store: Any, skip: Iterable[int] = ()) -> dict[int, float]:
    """``{result id: launches per iteration}`` of the XLA timelines stored in ``store``
    (:func:`dlperf.perfmodel.hostcount.launches_per_iter`; ~0.7 s for calibration2.db's 28 JAX
    timelines, kept with the file's points by :func:`read_file`); the timelines of the result
    ids in ``skip`` (the file's damaged rows) are not read."""
    from dlperf.perfmodel import hostcount
    from dlperf.results import timelines

    db = store._db
    if not db.execute("SELECT name FROM sqlite_master WHERE type='table' AND name='timelines'"
                      ).fetchone():
        return {}
    out: dict[int, float] = {}
    bad = set(skip)
    for (rid,) in db.execute("SELECT result_id FROM timelines").fetchall():
        if rid in bad:
            continue
        tl = timelines.load(store, rid)
        if not tl or XLA_TIMELINE_SOURCE not in str(tl.get("source") or ""):
            continue
        try:
            n = hostcount.launches_per_iter(timelines.decode(tl))
        except ValueError:
            continue  # a timeline that does not decode counts nothing
        if n:
            out[int(rid)] = n
    return out


def load(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> Records:
    """Read results files (or folders of ``*.db``) into :class:`Records` (:func:`read_file`
    each).

    Args:
        paths: one path or several; a folder stands for every ``*.db`` in it.

    Returns:
        The ``ok`` measurements (newest row per run key, as the store's views show them) and
        the collective benchmark rows, in file order; the damaged rows skipped per file
        (:attr:`Records.damaged`), each file's also said once as a
        :class:`~dlperf.results.rowcheck.DamagedRows` warning, whether the file was read
        through the store or its points were stored.

    Raises:
        ConfigError: a file is missing or is not a dlperf results database (from the store),
            or a folder holds no ``*.db`` (:func:`dlperf.results.dbfile.results_files`).
    """
    import warnings

    from dlperf.results.rowcheck import DamagedRows, describe

    files = results_files(paths)
    points: list[Point] = []
    colls: list[CollectivePoint] = []
    damaged: dict[str, dict[int, str]] = {}
    for f in files:
        got = read_inputs(f)
        points += got.points
        colls += got.collectives
        if got.damaged:
            damaged[f] = dict(got.damaged)
            warnings.warn(describe(f, damaged[f]), DamagedRows, stacklevel=2)
    return Records(points, colls, files, damaged)


#: The file beside results files that keeps their points (:func:`store_points`).
POINTS_NAME = "perfmodel_points.json"
#: Its format; part of every key (2: with the damaged rows skipped).
POINTS_FORMAT = 2
#: The modules whose source decides what a results file reads as (:func:`reader_key`): this
#: one and what it calls, and the results package's reader.
READER_SOURCES = ("perfmodel/records.py", "perfmodel/hostcount.py", "perfmodel/special.py",
                  "config/axes.py", "config/identity.py", "config/defaults.py", "results/store.py", "results/schema.py", "results/parts.py",
                  "results/view.py", "results/rowcheck.py", "results/migrations.py",
                  "results/timelines.py", "results/dbfile.py")


@functools.lru_cache(maxsize=1)
def reader_key() -> str:
    """A digest of :data:`READER_SOURCES`' source: the points of a file are read again when
    any of them changes."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256(f"points format {POINTS_FORMAT}".encode())
    for name in READER_SOURCES:
        h.update(name.encode())
        h.update((root / name).read_bytes())
    return h.hexdigest()[:20]


def file_key(path: str) -> str:
    """The key of one results file's points: :func:`reader_key` and the file's content
    (:func:`content_digest`)."""
    return hashlib.sha256(f"{reader_key()} {content_digest(path)}".encode()).hexdigest()[:24]


def content_digest(path: str | os.PathLike) -> str:
    """SHA-256 (hex) of a file's bytes, read once per process for the same resolved path,
    size and modification time: every key of the performance model's stores that covers a
    results file's content (:func:`file_key`, :func:`dlperf.perfmodel.fitcache.data_digest`)
    is made from it.

    Raises:
        OSError: the file cannot be read.
    """
    st = os.stat(path)
    return _content_digest(os.path.realpath(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=256)
def _content_digest(real: str, mtime_ns: int, size: int) -> str:
    with open(real, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


@dataclass(frozen=True)
class FileInputs:
    """The points and collective benchmarks of one results file, as stored by
    :func:`store_points` (``source`` empty: it is the file's path when read), and the damaged
    rows its reader skipped, ``(row id, what is wrong)`` each
    (:meth:`dlperf.results.store.ResultStore.damaged`)."""

    points: list[Point]
    collectives: list[CollectivePoint]
    damaged: list[tuple[int, str]] = field(default_factory=list)


@functools.lru_cache(maxsize=1)
def _inputs_adapter() -> Any:
    """Checks a stored :class:`FileInputs` (every field of its type, no NaN or infinity)."""
    from pydantic import ConfigDict, TypeAdapter

    return TypeAdapter(list[FileInputs], config=ConfigDict(allow_inf_nan=False))


def _inputs_of(raw: Any, path: str) -> FileInputs | None:
    """A stored entry (:func:`_inputs_json`) read back with ``path`` as its points' source;
    None when any value is not of its type."""
    from pydantic import ValidationError

    if not isinstance(raw, dict) or not all(isinstance(raw.get(k), list)
                                            for k in ("points", "collectives", "damaged")):
        return None
    try:
        return _inputs_adapter().validate_python([{**{k: [
            {**x, "source": path} if isinstance(x, dict) else x for x in raw[k]]
            for k in ("points", "collectives")}, "damaged": raw["damaged"]}])[0]
    except ValidationError:
        return None


def read_file(path: str) -> tuple[list[Point], list[CollectivePoint]]:
    """The :class:`Point` s and :class:`CollectivePoint` s of one results file
    (:func:`read_inputs`)."""
    got = read_inputs(path)
    return list(got.points), list(got.collectives)


def read_inputs(path: str) -> FileInputs:
    """The :class:`Point` s, :class:`CollectivePoint` s and damaged rows of one results file:
    those stored for its current content and reader (:func:`file_key`) beside it
    (:data:`POINTS_NAME`,
    written by :func:`store_points`: committed with the H200 results) or in the user's cache
    (``$DLPERF_CACHE_DIR``), else read through the store (:func:`read_store`) and kept in the
    user's cache, so a later process need not read and check every row again. A stored
    entry is used only if every value has its type (no NaN or infinity): anything else is
    read again from the file.

    Raises:
        ConfigError: a missing file or one that is not a dlperf results database.
    """
    from dlperf.jsoncache import read_json, write_json

    if not Path(path).is_file():
        from dlperf.results.store import ResultStore

        ResultStore(path, read_only=True)  # the store's own message
    key = file_key(path)
    got = _inputs_of(_beside(path).get(key), path)
    user = cache_root() / f"perfmodel-points-{key}.json"
    if got is None:
        got = _inputs_of((read_json(user) or {}).get(key), path)
    if got is None:
        got = read_store(path)
        write_json(user, {key: _inputs_json(got)})
        got = FileInputs([replace(p, source=path) for p in got.points],
                         [replace(c, source=path) for c in got.collectives], got.damaged)
    return got


def _beside(path: str) -> dict[str, Any]:
    """The entries (by key, as stored) of the points file beside ``path``; ``{}`` without
    one or when it does not parse."""
    f = Path(path).resolve().parent / POINTS_NAME
    try:
        st = f.stat()
    except OSError:
        return {}
    return _points_file(str(f), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=16)
def _points_file(f: str, mtime_ns: int, size: int) -> dict[str, Any]:
    """A points file parsed, once per process for the same path, size and modification time."""
    import json

    try:
        raw = json.loads(Path(f).read_text())
    except (OSError, ValueError, RecursionError):
        return {}
    return as_mapping(raw)


def as_mapping(raw: Any) -> dict[Any, Any]:
    """A stored JSON value as an object: itself, ``{}`` where it is none (a damaged or foreign
    file, an entry of another shape): nothing is read from it."""
    return raw if isinstance(raw, dict) else {}


def _inputs_json(got: FileInputs) -> dict[str, Any]:
    """A :class:`FileInputs` as stored: its points and collectives without their source, and
    its damaged rows."""
    def bare(x: Any) -> dict[str, Any]:
        d = asdict(x)
        d.pop("source")
        return d
    return {"points": [bare(p) for p in got.points],
            "collectives": [bare(c) for c in got.collectives],
            "damaged": [list(x) for x in got.damaged]}


def read_store(path: str) -> FileInputs:
    """One results file's points and collectives read through the store (typed records, damaged
    rows left out and listed; sources empty). The store's own warning of the damaged rows is
    not given here: :func:`load` says it for every file, read or stored."""
    import warnings

    from dlperf.results.rowcheck import DamagedRows
    from dlperf.results.store import ResultStore

    points: list[Point] = []
    colls: list[CollectivePoint] = []
    with ResultStore(path, read_only=True) as store, warnings.catch_warnings():
        warnings.simplefilter("ignore", DamagedRows)
        damaged = sorted(store.damaged().items())
        counts = _launch_counts(store, skip=[rid for rid, _ in damaged])
        for rec in store.records(samples=False, status="ok"):
            p = point_of(rec, "")
            if p is not None:
                points.append(replace(p, launches_per_iter=counts.get(p.result_id)))
        for c in store.collectives():
            if _num(c.get("time_s")) and c.get("size_bytes"):
                colls.append(CollectivePoint(
                    source="", run_id=str(c.get("run_id")), benchmark=c.get("benchmark") or "",
                    nranks=int(c.get("nranks") or 0), size_bytes=int(c["size_bytes"]),
                    time_s=float(c["time_s"]), busbw_gbps=_num(c.get("busbw_gbps")),
                    device_name=c.get("device_name"), backend=c.get("backend")))
    return FileInputs(points, colls, damaged)


def store_points(paths: Iterable[str]) -> list[Path]:
    """Keep the points of each results file of ``paths`` beside it (:data:`POINTS_NAME` in its
    folder, one entry per file's key, other entries of files still there kept), so that a
    clone of the files reads them without the store (``dlperf predict --validate`` and
    ``benchmarks/perfmodel_validate.py --committed`` call this); returns the files. A
    file whose current key has a valid entry already is not read again (the key covers its
    content and the reader's source); a file whose content is unchanged is not written again
    (:func:`dlperf.outputs.write_if_changed`).

    Raises:
        OSError: a folder cannot be written.
    """
    import json

    from dlperf.outputs import write_if_changed

    by_folder: dict[Path, list[str]] = {}
    for p in results_files(list(paths)):
        by_folder.setdefault(Path(p).resolve().parent, []).append(p)
    out = []
    for folder, files in by_folder.items():
        current = {file_key(str(db)) for db in folder.glob("*.db")}
        keep = {k: v for k, v in _beside(str(folder / "x")).items() if k in current}
        for f in files:  # an entry of the file's key holds what reading it again would give
            key = file_key(f)
            if _inputs_of(keep.get(key), f) is None:
                keep[key] = _inputs_json(read_store(f))
        text = json.dumps(dict(sorted(keep.items())), separators=(",", ":"))
        write_if_changed(folder / POINTS_NAME, text + "\n", mode=0o644)  # same: mtime kept
        out.append(folder / POINTS_NAME)
    return out


def point_id(p: Any) -> str:
    """``source:result_id`` of a stored point (:class:`dlperf.perfmodel.records.Point`), the
    source as its resolved path (the same file named relatively or absolutely is one file)."""
    return f"{os.path.realpath(p.source)}:{p.result_id}"
