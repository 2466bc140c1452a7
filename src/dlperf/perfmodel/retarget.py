"""A prediction from stored timelines: the configuration's nearest traced iterations,
transformed kernel by kernel to the batch size, precision and GPU asked for, and replayed.

This is the replay's prediction path (``dlperf predict ... --gpu NAME``, :func:`predict`):

1. the traced points of the same model, framework and mode (any precision, batch size or GPU)
   in the results files; a torch.compile or other graph mode is predicted from its own traces
   only (a compiled program's kernels are not the eager ones: without a trace of the mode the
   answer is refused as unknown);
2. at the asked precision where traced, else from the other precision
   (:func:`~dlperf.perfmodel.transforms.precision.to_precision`);
3. at the asked batch: the trace of that batch, else interpolated between the two traced
   batches around it (:func:`~dlperf.perfmodel.transforms.batch.interpolate_batch`), else
   from the nearest one (:func:`~dlperf.perfmodel.transforms.batch.to_batch`);
4. the host de-inflated to the configuration's host level over its traced points of the
   source file (:func:`~dlperf.perfmodel.replay.host_level`: the median step of its
   host-bound points in an eager program, else the median untraced probe; the host's work
   does not depend on the batch, and one probe of 5 iterations reads 12% (log sd) off the
   step it belongs to);
5. on the asked GPU (:func:`~dlperf.perfmodel.transforms.gpu.to_gpu`) from the traces' GPU:
   each profile a stored ``dlperf calibrate`` profile, else the stored results' own ceilings on
   that GPU, else the datasheet (then said: ``datasheet_only``, and a wider interval).

The interval is the back-test's (``benchmarks/replay_validate.py``): ``h``, the 90th
percentile of the absolute relative error of the development rows of the prediction's
category (doubled for a datasheet-only GPU, nothing of it measured, and again for data
parallel, not validated), as the band ``[T / (1 + h), T (1 + h)]`` (:func:`band`).
``dlperf predict --gpu``'s answer around this prediction (the configuration completed, a batch
that cannot fit refused, a model with no timeline) is :mod:`dlperf.perfmodel.gpuanswer`.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dlperf.errors import ConfigError
from dlperf.perfmodel import equations as eq
from dlperf.perfmodel import hardware, replay
from dlperf.perfmodel.transforms.batch import interpolate_batch, to_batch
from dlperf.perfmodel.transforms.gpu import to_gpu
from dlperf.perfmodel.transforms.kernels import is_half
from dlperf.perfmodel.transforms.precision import to_precision

#: The replay model's version, recorded with predictions registered before a measurement
#: (benchmarks/h100/predict.py): 1, Habitat's gamma = 1 for every non-GEMM kernel; 2, a
#: non-GEMM kernel's memory-boundness is its bandwidth utilisation, precision ratios from
#: kernel pairs (registration ``v2`` of benchmarks/results/h100/predictions.json, made at
#: commit baf28e5, is reproduced by that commit's code); 3, the device's gap between queued
#: kernels and the trace's order across streams replayed (:mod:`dlperf.perfmodel.replay`); 4,
#: a matmul's bf16 share by its alignment (recovered from its FLOPs and bytes,
#: :mod:`dlperf.perfmodel.gemmshape`), autocast's weight casts from the parameter count, and
#: an eager configuration's host from its host-bound steps (:func:`~dlperf.perfmodel.replay.
#: host_level`); 5, a precision change's GEMMs no faster together than their weights stream
#: (:func:`~dlperf.perfmodel.transforms.precision.gemm_weight_floor`); 6, autocast's
#: activation casts (:func:`~dlperf.perfmodel.transforms.autocast.activation_casts`: the
#: float32 inputs of GEMMs, the logits' upcast, mixed adds' gradients) added to an eager step
#: going to bf16; 7, bf16 -> fp32 GEMMs no slower than their roofline moved, convolutions with
#: their fp32 helpers and no fixed part that way, cuDNN's bf16 convolutions read as bf16 math
#: (:func:`~dlperf.perfmodel.transforms.precision.gemm_roofline_cap`); 8, a JAX program's norm
#: layers at bf16 by the elementwise rule (:data:`~dlperf.perfmodel.transforms.precision.
#: PRECISION_CLASS_BY_FRAMEWORK`); 9, the step's GEMM roofline a sum of the weights' and the
#: FLOPs' time (:func:`~dlperf.perfmodel.transforms.weights.gemm_roofline_s`), not the larger.
MODEL_VERSION = 9

#: 90th percentile of |relative error| of the development rows per category
#: (benchmarks/replay_validate.py on calibration2.db; docs/replay.md, "Back-test"; batch from
#: one trace: its 1/2-2x rows; precision: fp32 -> bf16, and ``precision, to fp32`` the other
#: way). Another GPU has no back-test of its own on one GPU's files: its band is an
#: assumption (Habitat's 11.8% median over six GPUs, three times), until the H100 check's
#: rows give one.
INTERVAL_P90 = {"own trace": 0.17, "batch, interpolated": 0.24, "batch, one trace": 0.23,
                "precision": 0.18, "precision, to fp32": 0.18, "gpu": 0.35}
#: A GPU never at hand (datasheet only) doubles the interval's half-width.
DATASHEET_WIDEN = 2.0


class NoTimeline(ConfigError):
    """No stored timeline of a model, framework and mode (:func:`predict`): the replay cannot
    predict it, and :func:`dlperf.perfmodel.gpuanswer.answer` falls back to the step-level
    model for one GPU."""


def band(step_s: float, half: float) -> tuple[float, float]:
    """The interval ``[T / (1 + h), T (1 + h)]`` (s) of a step ``T`` whose relative error
    half-width is ``h`` (:data:`INTERVAL_P90`, widened): symmetric in ``log(measured /
    predicted)``, so that a wide band stays above 0 (``T (1 - h)`` reached 0 at ``h >= 1``).

    Raises:
        ValueError: ``h`` negative.
    """
    if half < 0:
        raise ValueError(f"a half-width is >= 0, got {half}")
    return step_s / (1 + half), step_s * (1 + half)


@dataclass(frozen=True)
class TracePrediction:
    """A step time predicted by the replay.

    Attributes:
        step_s: the predicted steady-state iteration time (s).
        interval_s: ``(low, high)`` (s), the back-test's 90% band of the category.
        host_s, device_s: the replayed iteration's host work and summed device time (s); with
            ``nproc > 1`` the data-parallel ``H (1 + rho)`` and ``D + kappa H + X``
            (:func:`data_parallel`). ``extra["parts"]`` holds them with what composes them
            into the step, ``extra["composition"]`` the rule in words.
        bound: ``host`` or ``device``.
        gpu: the target profile's name; ``datasheet_only``: nothing of it measured.
        category: the back-test category the prediction belongs to.
        sources: ``file:id`` of the traces used.
        transforms: what was done to them, in order.
        measured_s: the stored measurement of exactly this point on this GPU, if any.
    """

    step_s: float
    interval_s: tuple[float, float]
    host_s: float
    device_s: float
    bound: str
    gpu: str
    datasheet_only: bool
    category: str
    sources: tuple[str, ...]
    transforms: tuple[str, ...]
    measured_s: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"step_s": self.step_s, "interval_s": list(self.interval_s),
                "host_s": self.host_s, "device_s": self.device_s, "bound": self.bound,
                "gpu": self.gpu, "datasheet_only": self.datasheet_only,
                "category": self.category, "sources": list(self.sources),
                "transforms": list(self.transforms), "measured_s": self.measured_s,
                "model_version": MODEL_VERSION, **dict(self.extra)}


class TraceLibrary:
    """The traced points of some results files; each timeline is decoded when first asked
    for (:meth:`trace`), so a prediction decodes only the traces it uses.

    Args:
        paths: results files or folders of them.
    """

    def __init__(self, paths: Any) -> None:
        from dlperf.perfmodel import records
        from dlperf.results.dbfile import results_files

        self.files = results_files(paths)
        self.recs = records.load(self.files)
        self._traces: dict[tuple[str, int], replay.StepTrace | None] = {}
        self._have: dict[str, set[int]] = {}
        self._gpus: dict[str, hardware.GpuProfile] = {}

    def gpu(self, name: str) -> hardware.GpuProfile:
        """:func:`dlperf.perfmodel.hardware.resolve` of ``name`` against these files and
        their points, once per name.

        Raises:
            ConfigError: nothing is known of ``name``.
        """
        return _once(self._gpus, name, lambda: hardware.resolve(
            name, paths=self.files, points=self.recs.points))

    def _with_timeline(self, f: str) -> set[int]:
        return _once(self._have, f, lambda: replay.timeline_ids(f))

    def points(self, model: str, framework: str, mode: str) -> list[Any]:
        """Every traced one-device synthetic-data point of the family, in file order."""
        key = (model, framework, mode)
        return [p for f in self.files for p in self.recs.points
                if p.source == f and p.config[:3] == key and p.world_size == 1
                and p.data == "synthetic" and p.result_id in self._with_timeline(f)]

    def trace(self, p: Any) -> replay.StepTrace | None:
        """The :class:`~dlperf.perfmodel.replay.StepTrace` of the traced point ``p`` (host as
        traced), None where its timeline does not decode; decoded once."""
        return _once(self._traces, (p.source, p.result_id), lambda: _decode(p))


def _once(cache: dict[Any, Any], key: Any, make: Callable[[], Any]) -> Any:
    """``cache[key]``, made by ``make()`` the first time it is asked for."""
    if key not in cache:
        cache[key] = make()
    return cache[key]


def _decode(p: Any) -> replay.StepTrace | None:
    """:func:`~dlperf.perfmodel.replay.trace_of` of the stored point ``p`` from its file."""
    from dlperf.results.store import ResultStore

    with ResultStore(p.source, read_only=True) as store:
        return replay.trace_of(store, p)


def _src_profile(lib: TraceLibrary, device_name: str | None) -> hardware.GpuProfile:
    if not device_name:
        raise ConfigError("the traces name no GPU (device_name): they cannot be moved to another")
    return lib.gpu(device_name)


def predict(lib: TraceLibrary, model: str, framework: str, mode: str, precision: str,
            batch_size: int, gpu: str | None = None, *,
            exclude: Sequence[tuple[str, int]] = (), host: str = "dispatch",
            anchor: bool = True, nproc: int = 1) -> TracePrediction:
    """Predict one point from stored timelines (see the module docstring).

    Args:
        lib: the traced points (:class:`TraceLibrary`).
        model, framework, mode, precision, batch_size: the configuration (one device).
        gpu: the target GPU (a profile's name, a datasheet's short name or a driver's device
            name); None: the GPU of the traces.
        exclude: ``(file, result_id)`` of traces not to use (the back-test's held-out point).
        host: how the host moves to another machine: ``dispatch`` (the dispatch probes'
            ratio, :func:`host_ratio`; unscaled without both), ``probe`` (the Python-loop
            host-speed probes' ratio), ``none`` (unscaled).
        anchor: moving to another GPU, where the source GPU's files hold an untraced
            measurement of exactly this point, predict ``measured x replay on the target /
            replay on the source`` (the replay's own error on the source, mostly the host
            probe's noise and a batch transform's, cancels; Habitat likewise scales measured
            kernel times).
        nproc: data parallel over this many GPUs of one node, ``batch_size`` per GPU
            (:func:`data_parallel`: the step-level model's ratio on the one-GPU replay; not
            back-tested with the replay: no multi-GPU timeline is stored).

    Raises:
        NoTimeline: no trace of the model, framework and mode is stored (the step-level
            model is the fallback).
        ConfigError: the GPU is unknown, its profile gives no GEMM rate for ``precision``
            (:func:`check_precision`), or data parallel has no parameter count stored.
    """
    held_out = set(exclude)
    fam = [p for p in lib.points(model, framework, mode)
           if (p.source, p.result_id) not in held_out and p.compile_mode == "default"]
    if not fam:
        raise NoTimeline(f"no stored timeline of {model} {framework}/{mode}: the replay "
                          "cannot predict it (trace a point with --timeline, or `dlperf "
                          "calibrate --model`); the step-level model is the fallback")
    same = [p for p in fam if p.precision == precision]
    pool = same or fam
    # the source file: the one holding the most traces of the pool (one host session)
    files: dict[str, int] = {}
    for p in pool:
        files[p.source] = files.get(p.source, 0) + 1
    src_file = max(files, key=lambda f: (files[f], f))
    pool = [p for p in pool if p.source == src_file]
    src_prec = pool[0].precision  # ``precision`` where stored (pool is then ``same``)
    pool = [p for p in pool if p.precision == src_prec]
    pool.sort(key=lambda p: p.batch_size)
    probe_s = replay.host_level(pool)
    by_batch = {p.batch_size: p for p in pool}

    def step_at(b: int) -> replay.StepTrace:
        p = by_batch[b]
        st = lib.trace(p)
        if st is None:
            raise ConfigError(f"the timeline of {p.source}:{p.result_id} does not decode: "
                              "trace the point again")
        return replay.deinflate(st, probe_s, p.dispatch_s)

    src_gpu = _src_profile(lib, pool[0].device_name)
    if batch_size in by_batch:
        st = step_at(batch_size)
        used = [by_batch[batch_size]]
        category = "own trace"
    else:
        a, b = nearest_pair(sorted(by_batch), batch_size)
        if a != b:
            st = interpolate_batch(step_at(a), step_at(b), batch_size)
            category = "batch, interpolated"
        else:
            st = to_batch(step_at(a), batch_size, src_gpu)
            category = "batch, one trace"
        used = [p for p in pool if p.batch_size in (a, b)]
    key = category  # the back-test rows whose errors give the interval (INTERVAL_P90)
    if src_prec != precision:
        st = to_precision(st, precision, src_gpu)
        category = "precision"
        key = "precision" if is_half(precision) else "precision, to fp32"
    dst_gpu = src_gpu
    anchored = 1.0  # measured / replayed on the source GPU, where measured
    anchor_why = ANCHOR_SAME_GPU.format(category=key)
    hr = None
    if gpu is not None:
        dst_gpu = lib.gpu(gpu)
        check_precision(dst_gpu, precision)
        if hardware.short_name(dst_gpu.device_name) != hardware.short_name(src_gpu.device_name) \
                or dst_gpu.name != src_gpu.name:
            move = HOST_MOVES.get(host)
            if move is None:
                raise ConfigError(f"host={host!r}: use dispatch, probe or none")
            hr = move(lib, pool, src_gpu, dst_gpu)
            on_src = replay.simulate(st).step_s
            st = to_gpu(st, src_gpu, dst_gpu, host_ratio=hr)
            category = key = "gpu"
            m_pts = measured_points(lib, model, framework, mode, precision, batch_size,
                                     src_gpu.device_name or "")
            if not anchor:
                anchor_why = "none: the unanchored variant was asked for"
            elif m_pts:
                anchored = statistics.median(p.step_time_s for p in m_pts) / on_src
                st = st.with_note(f"anchored: x{anchored:.3f} ({measured_words(m_pts)} "
                                  f"/ replayed {on_src * 1e3:.3f} ms on {src_gpu.name})")
                anchor_why = (f"x{anchored:.3f}, the {src_gpu.name} measurement / its replay "
                              f"(a move to another GPU is anchored on the source GPU's stored "
                              "measurement of the point: docs/replay.md)")
            else:
                anchor_why = (f"none: no stored untraced measurement of this point on "
                              f"{src_gpu.name} to anchor the move on")
    half, source = interval(key, dst_gpu.datasheet_only, nproc)
    # every stored measurement of this point on the target ({} where none: the key is always
    # there, as in the step-level answer); for nproc > 1, of nproc ranks of one node
    dst_pts = measured_points(lib, model, framework, mode, precision, batch_size,
                               dst_gpu.device_name or "", nproc)
    measured = median_step(dst_pts)
    dp: dict[str, Any] = {"measured_points": points_dict(dst_pts)}
    r = replay.simulate(st)
    step_s, host_s, device_s, bound = r.step_s * anchored, r.host_s, r.device_s, r.bound
    dp["parts"] = {"host_s": host_s, "device_s": device_s,
                   "device_gap_s": r.step_s - r.device_s}
    dp["composition"] = (
        f"step = anchor x (device_s + device_gap_s) = {anchored:.3f} x "
        f"({r.device_s * 1e3:.3f} + {(r.step_s - r.device_s) * 1e3:.3f}) ms: the replayed "
        "queue's period, its summed kernel time plus the device's idle time waiting on "
        "launches, queue gaps and cross-stream waits (negative where streams overlap); "
        f"never below host_s ({_BOUND_WORDS[bound]})")
    if nproc > 1:  # the step-level model's data-parallel ratio on the one-GPU replay
        one = step_s
        step_s, parts, words, dp["assumptions"] = data_parallel(
            lib, one, host_s, device_s, used[0], model, framework, mode, precision,
            batch_size, nproc)
        host_s, device_s = parts["host_s"], parts["device_s"]
        bound = eq.bound_of(host_s, device_s)
        dp["parts"] = {**parts, "one_gpu_step_s": one, "one_gpu_device_gap_s":
                       r.step_s - r.device_s}
        dp["composition"] = words
        st = st.with_note(f"data parallel x{nproc}: the step-level model's DDP overhead and "
                          "WFBP all-reduce (docs/perfmodel.md, Data parallel)")
        category += f" + data parallel x{nproc} (not validated with the replay)"
    lo_s, hi_s = band(step_s, half)
    return TracePrediction(
        step_s=step_s, interval_s=(lo_s, hi_s), host_s=host_s, device_s=device_s,
        bound=bound, gpu=dst_gpu.name, datasheet_only=dst_gpu.datasheet_only,
        category=category, sources=tuple(f"{p.source}:{p.result_id}" for p in used),
        transforms=tuple(st.meta.get("transforms", [])), measured_s=measured,
        extra={"source_gpu": src_gpu.name, "source_precision": src_prec,
               "host_probe_s": probe_s, "host_move": host, "nproc": nproc,
               "gpu_name": gpu_name(dst_gpu), "interval_from": source,
               "anchor": {"factor": anchored, "rule": anchor_why},
               "host_session": host_session(used) + (
                   f", scaled to the {dst_gpu.name} profile's host by {host} probes"
                   if hr is not None else ""), **dp})


#: A replayed step's bound (:func:`dlperf.perfmodel.equations.bound_of`) in the composition's
#: words (:func:`predict`).
_BOUND_WORDS = {"host": "the host sets it: host-bound", "device": "device-bound"}

#: Why a prediction on the traces' own GPU is not anchored (:func:`predict`): anchoring is the
#: GPU move's (``measured x replay on the target / replay on the source``, docs/replay.md).
ANCHOR_SAME_GPU = (
    "none: the traces' own GPU, so the replay's own answer (back-tested as the '{category}' "
    "rows); anchored on this GPU's measurement of the point it would be that measurement, "
    "which is shown beside it where stored, and anchoring a batch or precision change was "
    "tried on the development rows and not taken (docs/replay.md)")


def nearest_pair(batches: Sequence[int], batch: int) -> tuple[int, int]:
    """The two traced batches (``batches``: sorted, at least one) a batch absent from them
    is predicted from: the two around ``batch``, else the two nearest it at the end it lies
    beyond; the one batch twice where there is one.

    ``batches[i:i + 2]`` with ``i`` the insertion point of ``batch`` less one, kept inside the
    list (:func:`bisect.bisect`)."""
    i = max(0, min(bisect.bisect(batches, batch) - 1, len(batches) - 2))
    pair = batches[i:i + 2]
    return pair[0], pair[-1]


def interval(key: str, datasheet_only: bool, nproc: int) -> tuple[float, str]:
    """A replay prediction's relative half-width ``h`` (its band: :func:`band`) and where it
    comes from, in words: the back-test category's :data:`INTERVAL_P90`, times
    :data:`DATASHEET_WIDEN` for a datasheet-only GPU and :data:`DP_WIDEN` for data parallel
    over ``nproc > 1`` GPUs.

    Raises:
        KeyError: ``key`` is not a category of :data:`INTERVAL_P90`."""
    widen = [(why, f) for why, f, on in (
        (f"x{DATASHEET_WIDEN:g}: datasheet only", DATASHEET_WIDEN, datasheet_only),
        (f"x{DP_WIDEN:g}: data parallel x{nproc}, not validated", DP_WIDEN, nproc > 1)) if on]
    half = INTERVAL_P90[key]
    for _, f in widen:
        half *= f
    return half, (f"the replay back-test's '{key}' rows (benchmarks/replay_validate.py): 90th "
                  f"percentile of |error| {INTERVAL_P90[key]:.0%}"
                  + (f" ({'; '.join(why for why, _ in widen)}) = {half:.0%}" if widen else "")
                  + ", as [T / (1 + h), T (1 + h)]")


def check_precision(dst: hardware.GpuProfile, precision: str) -> None:
    """Refuse ``precision`` on the target GPU ``dst`` where its profile gives no GEMM rate for
    it (:meth:`hardware.GpuProfile.gemm`; a datasheet's None: the GPU lacks it, e.g. the V100's
    bf16 and tf32: no such tensor cores): the replay would otherwise scale the source GPU's
    tensor-core kernels by the clock and waves alone (:func:`dlperf.perfmodel.transforms.gpu.
    kernel_on_gpu`). A measured profile (``dlperf calibrate`` on that GPU) that holds the rate
    passes.

    Raises:
        ConfigError: no rate for ``precision``; names the precisions the profile gives.
    """
    if dst.gemm(precision):
        return
    has = ", ".join(p for p in hardware.GEMM_PRECISIONS if p in dst.gemm_flops_per_s) or "none"
    what, why = _NO_RATE[dst.datasheet_only]
    raise ConfigError(
        f"--precision {precision} on {dst.name} ({gpu_name(dst)}): its {what} gives no "
        f"{precision} GEMM rate ({why.format(precision)}), so the replay cannot move "
        f"{precision} kernels onto it; it gives: {has}. Predict --precision "
        f"{has.split(', ')[0]}, or measure the GPU's ceilings with `dlperf calibrate` on it "
        "and add that file with --db")


#: :func:`check_precision`'s words by :attr:`hardware.GpuProfile.datasheet_only`: what gives
#: no rate, and why.
_NO_RATE = {True: ("datasheet", "the GPU has no {} tensor cores"),
            False: ("profile", "none measured, none in its datasheet")}


def gpu_name(prof: hardware.GpuProfile) -> str:
    """A GPU profile's device model name as the driver reports it (``NVIDIA H100 80GB HBM3``),
    else its short name."""
    return prof.device_name or prof.name


def host_session(points: Sequence[Any]) -> str:
    """The host sessions (``host/cpu/date``, :attr:`records.Point.session`) of the stored
    points a prediction's host time comes from, joined; said so where none is recorded."""
    sess = sorted({p.session for p in points if p.session})
    return ", ".join(sess) or "not recorded with the stored points"


#: Data parallel (:func:`data_parallel`) is not validated: the one-device interval's
#: half-width is doubled, a reminder rather than a measured band.
DP_WIDEN = 2.0


def data_parallel(lib: TraceLibrary, one_s: float, host_s: float, device_s: float,
                  point: Any, model: str, framework: str, mode: str, precision: str,
                  batch: int, nproc: int
                  ) -> tuple[float, dict[str, float], str, list[str]]:
    """The step of DDP over ``nproc`` GPUs of one node, ``batch`` per GPU, from one GPU's
    replayed step ``one_s`` (s, anchored where it was) and its replayed host and summed device
    times ``H``, ``D``: the step-level model's data parallel (docs/perfmodel.md, "Data
    parallel"; :func:`dlperf.perfmodel.dataparallel.predict_pair`'s form) ::

        T_N = T_1 x step_s(H (1 + rho), D + kappa H + X) / step_s(H, D)

    ``rho``, ``kappa`` DDP's own host and device work fitted on the stored N-device / 1-device
    pairs (:func:`dlperf.perfmodel.api.ddp_overhead`; refused without a pair, as the
    step-level model refuses: :func:`dlperf.perfmodel.api.no_ddp_pairs`), ``X`` the
    exposed all-reduce of the WFBP recursion over the recorded buckets of a stored DDP run of
    the model where there is one, else DDP's default buckets of ``params x 4`` B ready
    uniformly over a backward of 2/3 of ``D`` (:func:`dlperf.perfmodel.dataparallel.
    exposed_comm`), each bucket at the stored all-reduce sweep's fit for ``nproc`` ranks, else
    the link model (:func:`dlperf.perfmodel.model.comm_time_fn`).

    Returns:
        ``(T_N, parts, composition, assumptions)``: ``parts`` ``host_s`` ``H (1 + rho)``,
        ``device_s`` ``D + kappa H + X``, ``exposed_comm_s`` ``X``, ``one_device_host_s``
        ``H``, ``one_device_device_s`` ``D`` (s); ``composition`` the rule in words with its
        numbers; ``assumptions`` in words.

    Raises:
        ConfigError: the stored point has no parameter count; no stored N-device point of
            the files pairs with a one-device series (DDP's overhead is not measured).
    """
    from dlperf.perfmodel import api
    from dlperf.perfmodel import dataparallel as dpm
    from dlperf.perfmodel import model as pm
    from dlperf.perfmodel.calibrate import Calibration, Config

    if not point.params:
        raise ConfigError(f"the stored point {point.source}:{point.result_id} has no parameter "
                          "count: the gradient bytes to all-reduce are unknown")
    ddp = api.ddp_overhead(lib.recs)
    if not ddp.pairs:  # as the step-level model: rho = kappa = 0 would be 17% low (resnet50)
        raise ConfigError(api.no_ddp_pairs(
            lib.recs, f"{model} {framework}/{mode} {precision} b={batch} per GPU", nproc,
            "cuda"))
    cal = Calibration(lib.recs, share_efficiencies=api.shared_fits(lib.recs))
    fn, desc, comm_measured, _ = pm.comm_time_fn(cal, nproc, 1, None)
    prof = dpm.recorded_profile(lib.recs.points, Config(model, framework, mode, precision),
                                nproc, batch)
    x, _ = dpm.exposed_comm(point.params, device_s, fn, profile=prof)
    hn, dn = eq.dp_parts_s(host_s, device_s, x, ddp.rho, ddp.kappa)
    ratio = eq.step_s(hn, dn) / eq.step_s(host_s, device_s)
    parts = {"host_s": hn, "device_s": dn, "exposed_comm_s": x, "one_device_host_s": host_s,
             "one_device_device_s": device_s}
    words = (f"step = T_1 x step_s(H (1 + rho), D + kappa H + X) / step_s(H, D) = "
             f"{one_s * 1e3:.3f} ms x step_s({hn * 1e3:.3f}, {dn * 1e3:.3f}) / "
             f"step_s({host_s * 1e3:.3f}, {device_s * 1e3:.3f}) = {one_s * 1e3:.3f} x "
             f"{ratio:.4f}, step_s(H, D) = (H^{eq.SMOOTH_P:g} + D^{eq.SMOOTH_P:g})^"
             f"(1/{eq.SMOOTH_P:g}); T_1 the one-GPU replay, H = one_device_host_s, D = "
             f"one_device_device_s, rho = {ddp.rho:.4g}, kappa = {ddp.kappa:.4g}, X = "
             "exposed_comm_s (the step-level model's data parallel)")
    notes = [
        "the step-level model's data-parallel ratio (docs/perfmodel.md, Data parallel; "
        "back-tested there on the stored H200 2-GPU points) on the one-GPU replay; the "
        f"combination is not back-tested: the interval is the one-GPU band x{DP_WIDEN:g}",
        f"{nproc} GPUs of one node, each running the global batch / {nproc}; no input "
        "pipeline cost",
        f"DDP's own work: rho = {ddp.rho:.4g} (host), kappa = {ddp.kappa:.4g} (device, per "
        f"unit of host time), fitted on {len(ddp.pairs)} stored N-device/1-device pairs",
        f"all-reduce: {'measured' if comm_measured else 'modelled'}: {desc}",
        *dpm.assumptions(prof),
    ]
    if not prof:
        notes.append(f"gradients {dpm.gradient_bytes(point.params) / 2**20:.1f} MiB "
                     f"({point.params:,} parameters)")
    return one_s * ratio, parts, words, notes


def host_ratio(lib: TraceLibrary, src: hardware.GpuProfile,
               dst: hardware.GpuProfile) -> float | None:
    """Target host time / source host time for the same dispatch work: the ``dlperf
    calibrate`` dispatch probes of both machines (the profile model's untraced host dispatch,
    ``extra['dispatch_probe']``), when both ran the same profile configuration; None
    otherwise (a source without a calibrate profile: its stored points may have run other
    work, e.g. another optimizer implementation)."""
    a = dict(src.extra.get("dispatch_probe") or {})
    b = dict(dst.extra.get("dispatch_probe") or {})
    same = all(a.get(k) == b.get(k) for k in ("model", "framework", "mode", "batch_size"))
    if not (a.get("host_dispatch_s") and b.get("host_dispatch_s") and same):
        return None
    return b["host_dispatch_s"] / a["host_dispatch_s"]


def _host_by_dispatch(lib: TraceLibrary, pool: Sequence[Any], src: hardware.GpuProfile,
                      dst: hardware.GpuProfile) -> float | None:
    """``host="dispatch"``: :func:`host_ratio`."""
    return host_ratio(lib, src, dst)


def _host_by_probe(lib: TraceLibrary, pool: Sequence[Any], src: hardware.GpuProfile,
                   dst: hardware.GpuProfile) -> float | None:
    """``host="probe"``: the target profile's Python-loop host-speed probe over the median of
    the traced points' (``pool``); None without either."""
    hs = [x for q in pool for x in q.host_speed_ns if x]
    if hs and dst.host_speed_ns:
        return dst.host_speed_ns / statistics.median(hs)
    return None


def _host_unscaled(lib: TraceLibrary, pool: Sequence[Any], src: hardware.GpuProfile,
                   dst: hardware.GpuProfile) -> float | None:
    """``host="none"``: the host as traced."""
    return None


#: How :func:`predict` moves the host to another machine (its ``host`` argument): each gives
#: the target host's time / the source's, or None to leave it unscaled.
HOST_MOVES = {"dispatch": _host_by_dispatch, "probe": _host_by_probe, "none": _host_unscaled}


def measured_step(lib: TraceLibrary, model: str, framework: str, mode: str, precision: str,
                  batch: int, device_name: str) -> float | None:
    """The median stored untraced step (s) of exactly this one-device point (``batch`` per
    device) on the GPU named ``device_name`` (a driver's device name, ``NVIDIA H200``), over
    files and host sessions; None where none is stored."""
    return median_step(measured_points(lib, model, framework, mode, precision, batch,
                                        device_name))


def median_step(points: Sequence[Any]) -> float | None:
    """The median ``step_time_s`` of stored points (s), None where there is none."""
    return statistics.median(p.step_time_s for p in points) if points else None


def points_dict(points: Sequence[Any]) -> dict[str, float]:
    """``{file:id: step s}`` of stored points, in load order."""
    return {f"{p.source}:{p.result_id}": p.step_time_s for p in points}


def measured_words(points: Sequence[Any]) -> str:
    """The stored measurement(s) a replay is anchored on or shown beside, in words: ``measured
    X ms in file:id`` for one point, else ``the median X ms of N stored measurements (file:id
    Y ms; ...)`` (:func:`measured_step`: the median over files and host sessions)."""
    return measured_words_of(points_dict(points))


def measured_words_of(pts: Mapping[str, float]) -> str:
    """:func:`measured_words` of ``{file:id: s}``."""
    if len(pts) == 1:
        (k, v), = pts.items()
        return f"measured {v * 1e3:.3f} ms in {k}"
    med = statistics.median(pts.values())
    return (f"the median {med * 1e3:.3f} ms of {len(pts)} stored measurements ("
            + "; ".join(f"{k} {v * 1e3:.3f} ms" for k, v in pts.items()) + ")")


def measured_points(lib: TraceLibrary, model: str, framework: str, mode: str,
                     precision: str, batch: int, device_name: str, nproc: int = 1
                     ) -> list[Any]:
    """The stored untraced points of exactly this configuration on ``device_name``'s GPU:
    ``nproc`` ranks of one node (1: one device), ``batch`` per device."""
    return [p for p in lib.recs.points
            if p.config[:4] == (model, framework, mode, precision)
            and p.per_device_batch == batch and p.world_size == nproc and p.nnodes == 1
            and p.data == "synthetic" and p.compile_mode == "default"
            and not p.instrumented and p.layout in (None, "auto") and p.grad_accum == 1
            and hardware.same_gpu(p.device_name, device_name)]
