"""``dlperf predict --gpu GPU``'s answer (:func:`answer`): the configuration completed from the
model's stored traces, a per-GPU batch that cannot fit in the target GPU's memory refused
(:func:`device_memory_bytes`), the replay's prediction
(:func:`dlperf.perfmodel.retarget.predict`) or, for a model with no stored timeline, the
median replay ratio of the traced models of its group on the step it has (:func:`fallback`);
as JSON under the step-level answer's key names (:func:`cli_keys`) and as text
(:func:`text`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping
from typing import Any

from dlperf.config.axes import PRECISIONS
from dlperf.config.identity import label_of
from dlperf.errors import ConfigError, unknown_choice
from dlperf.perfmodel import hardware
from dlperf.perfmodel.retarget import (
    NoTimeline,
    TraceLibrary,
    TracePrediction,
    band,
    check_precision,
    gpu_name,
    host_session,
    interval,
    measured_points,
    measured_words,
    measured_words_of,
    median_step,
    points_dict,
    predict,
)


def answer(db: Any, model: str, framework: str | None, mode: str | None,
           precision: str | None, batch_size: int, gpu: str, nproc: int = 1) -> dict[str, Any]:
    """``dlperf predict --gpu GPU [--nproc N]``: :func:`~dlperf.perfmodel.retarget.predict`
    of the configuration on ``gpu`` (``batch_size`` the global mini-batch: ``batch_size /
    nproc`` per GPU), the unspecified framework, mode and precision taken from the model's
    stored traces (the only one, else refused naming the candidates), as a JSON-ready dict
    with ``config``.

    Raises:
        ConfigError: a profile that is not a GPU's (:func:`refuse_a_cpu_profile`), no trace
            of the model, a precision neither dlperf's (fp32, tf32, bf16) nor stored in the
            files, a precision the GPU's profile gives no rate for
            (:func:`~dlperf.perfmodel.retarget.check_precision`), several candidates, an unknown GPU, a batch
            that ``nproc`` does not divide, or one that does not fit in the GPU's memory
            (:func:`_check_memory`).
    """
    refuse_a_cpu_profile(gpu, db)
    if nproc < 1 or batch_size % nproc:
        raise ConfigError(f"--batch-size {batch_size} is the global mini-batch: give a "
                          f"multiple of --nproc {nproc} (each GPU runs batch / nproc)")
    lib = TraceLibrary(db)
    if precision is not None:  # as the step-level model's request refuses it (request.py)
        known = set(PRECISIONS) | {p.precision for p in lib.recs.points}
        if precision not in known:
            raise unknown_choice("precision", precision, known)
    cands = sorted({(p.framework, p.mode, p.precision) for p in lib.recs.points
                    if p.model == model and p.world_size == 1
                    and (framework is None or p.framework == framework)
                    and (mode is None or p.mode == mode)})
    fms = sorted({c[:2] for c in cands})
    if not fms:
        raise ConfigError(f"no stored result of {model!r}"
                          + (f" in {framework}" if framework else "") + " in the --db files: "
                          "measure it first\n  dlperf run --model "
                          f"{model} --framework {framework or 'F'} --precision P -b N "
                          "--timeline --db FILE\nand predict from that file (--timeline "
                          "stores the trace the replay moves to the GPU; `dlperf results "
                          "--db FILE` lists what is stored)")
    if len(fms) > 1:
        raise ConfigError(f"{model} is stored in several frameworks/modes: "
                          f"{', '.join('/'.join(x) for x in fms)}; give --framework and --mode")
    fw, md = fms[0]
    precs = sorted({c[2] for c in cands})
    if not precision and len(precs) > 1:
        raise ConfigError(f"{model} {fw}/{md} is stored in several precisions "
                          f"({', '.join(precs)}); give --precision")
    prec = precision or precs[0]
    dst = lib.gpu(gpu)
    check_precision(dst, prec)  # also before the fallback, which does not replay
    _check_memory(lib, model, fw, md, prec, batch_size // nproc, dst)
    try:
        p = predict(lib, model, fw, md, prec, batch_size // nproc, gpu, nproc=nproc)
    except NoTimeline:
        if nproc > 1:
            raise
        p = fallback(lib, db, model, fw, md, prec, batch_size, gpu)
    out = cli_keys(p.to_dict(), batch_size)
    out["config"] = {"model": model, "framework": fw, "mode": md, "precision": prec,
                     "batch_size": batch_size, "gpu": gpu, "nproc": nproc}
    return out


def refuse_a_cpu_profile(gpu: str, db: Any) -> None:
    """Refuse ``--gpu NAME`` where NAME is a stored profile that is not a GPU's
    (:attr:`~dlperf.perfmodel.hardware.GpuProfile.device_kind`): one ``dlperf calibrate
    --device cpu`` stored, or one stored without a device kind that holds nothing only a GPU
    gives (no datasheet device name, launch call or pinned copy). The replay moves each CUDA
    kernel by the target's SMs, clock and memory bandwidth, which a CPU's cores and host memory
    are not (a CPU profile gave an H200 trace 19 s per step on a 2-core VM, with the GPU
    back-test's band). A name no stored profile has is left to the replay, which says what it
    knows.

    :func:`answer` calls it first, so ``dlperf predict --gpu`` and the Python API refuse alike.

    Raises:
        ConfigError: the profile was measured on a CPU, or says neither what it was measured
            on nor anything only a GPU gives; the message names its ceilings and the command
            that stores a GPU's profile.
    """
    try:
        prof = hardware.resolve(gpu, db)
    except ConfigError:
        return
    kind = prof.device_kind
    if kind == "cuda":
        return
    todo = ("calibrate the GPU (dlperf calibrate --device cuda --name NAME on it) or name a "
            "datasheet GPU (h100, a100, l40s, ...), or drop --gpu and predict the CPU from its "
            "stored series (--device cpu)")
    if kind is not None:
        raise ConfigError(
            f"--gpu {gpu}: the profile {prof.name!r} was measured on a {kind} "
            f"({prof.device_name}) by dlperf calibrate --device {kind}; --gpu replays CUDA "
            f"kernels on a GPU's SMs, clock and memory, so it predicts only on a GPU: {todo}")
    fp32 = prof.gemm("fp32")
    ceilings = ", ".join(
        ([f"fp32 GEMM {fp32 / 1e12:.3g} TFLOP/s"] if fp32 else [])
        + [f"bandwidth {prof.bandwidth_bytes_per_s / 1e9:.3g} GB/s"])
    raise ConfigError(
        f"--gpu {gpu}: the profile {prof.name!r} ({prof.device_name or 'no device name'}; "
        f"{ceilings}) does not say what it was measured on, and holds nothing only a GPU "
        "gives (a datasheet GPU's name, a kernel launch call, a pinned copy): a CPU's profile "
        "stored without its device kind reads so. --gpu replays CUDA kernels on a GPU's SMs, "
        f"clock and memory, so it predicts only on a GPU: {todo}; a GPU's profile stored "
        "without its kind is stored again with it by the same dlperf calibrate on the GPU")


#: :meth:`TracePrediction.to_dict`'s keys -> the step-level answer's keys for the same things
#: (:meth:`dlperf.perfmodel.api.Prediction.to_dict`), in ``dlperf predict --gpu``'s JSON.
CLI_KEYS = {"step_s": "predicted_step_time_s", "measured_s": "measured_step_time_s",
            "category": "validation_category", "interval_from": "interval_group",
            "gpu": "gpu_profile", "gpu_name": "gpu"}


def cli_keys(d: Mapping[str, Any], batch_size: int) -> dict[str, Any]:
    """A :meth:`TracePrediction.to_dict` under the step-level answer's key names
    (:data:`CLI_KEYS`: ``predicted_step_time_s``, ``gpu`` the device model name, ...), with
    ``samples_per_s`` (the global ``batch_size`` / the step), ``interval_level`` (0.9) and
    ``parts``: the prediction's own (:func:`~dlperf.perfmodel.retarget.predict`: ``host_s``,
    ``device_s`` and what composes them into the step, the rule in ``composition``), else
    ``host_s`` and ``device_s`` as it has them (empty where no timeline was replayed).
    """
    out = {CLI_KEYS.get(k, k): v for k, v in d.items() if k not in ("host_s", "device_s")}
    out["samples_per_s"] = batch_size / d["step_s"]
    out["interval_level"] = 0.9
    out["parts"] = {k: v for k, v in (d.get("parts") or {
        k: d.get(k) for k in ("host_s", "device_s")}).items()
        if isinstance(v, float) and math.isfinite(v)}
    return out


def device_memory_bytes(lib: TraceLibrary, prof: hardware.GpuProfile) -> float | None:
    """The memory of the GPU of ``prof`` (bytes): the median the stored results on it recorded
    (``env.gpus[0].memory_total_bytes``), else its datasheet's
    (``extra["memory_bytes"]`` of its :data:`~dlperf.perfmodel.hardware.DATASHEETS` entry, for
    the memory check of :func:`answer` where no stored result ran on it); None if neither is
    known."""
    want = hardware.short_name(prof.device_name or prof.name)
    v = [p.device_memory_total_bytes for p in lib.recs.points if p.device_memory_total_bytes
         and hardware.same_gpu(p.device_name, prof.device_name or prof.name)]
    if v:
        return float(statistics.median(v))
    return float(hardware.DATASHEETS[want].extra["memory_bytes"]) if want else None


def _check_memory(lib: TraceLibrary, model: str, framework: str, mode: str,
                  precision: str, batch: int, prof: hardware.GpuProfile) -> None:
    """Refuse a per-GPU ``batch`` that does not fit in ``prof``'s GPU memory, naming the
    largest that does: the configuration's memory line from its stored points on any GPU
    (:func:`dlperf.perfmodel.memory.check`, as the step-level model refuses one) with the
    target's memory (:func:`device_memory_bytes`). Not judged without either.

    Raises:
        ConfigError: the batch does not fit.
    """
    from dlperf.perfmodel import memory

    total = device_memory_bytes(lib, prof)
    pts = [p for p in lib.recs.points if p.config[:4] == (model, framework, mode, precision)
           and p.device == "cuda"]
    if total is None or not pts:
        return
    _, no_fit = memory.check(pts, batch, on=(total, gpu_name(prof)))
    if no_fit:
        raise ConfigError(f"{model} {framework}/{mode} {precision} on {gpu_name(prof)}: "
                          f"{no_fit}")


#: At most this many traced models of the group give the fallback's GPU ratio.
FALLBACK_MODELS = 4


def fallback(lib: TraceLibrary, db: Any, model: str, framework: str, mode: str,
             precision: str, batch_size: int, gpu: str) -> TracePrediction:
    """A model with no stored timeline on ``gpu``: the source GPU's step (its measurement
    where stored, else the step-level model, :func:`dlperf.perfmodel.api.predict`) times the
    median target / source replay ratio of up to :data:`FALLBACK_MODELS` traced models of
    the same framework, mode and precision.

    Raises:
        ConfigError: no traced model of the group, or the step-level model refuses.
    """
    others = sorted({p.model for p in lib.recs.points if p.model != model
                     and (p.framework, p.mode, p.precision) == (framework, mode, precision)
                     and p.source in lib.files and p.result_id in lib._with_timeline(p.source)})
    ratios, src_gpu = [], None
    for m in others[:FALLBACK_MODELS]:
        b = min((q.batch_size for q in lib.points(m, framework, mode)
                 if q.precision == precision),
                key=lambda x: abs(math.log(x / batch_size)), default=None)
        if b is None:
            continue
        a = predict(lib, m, framework, mode, precision, b, gpu, host="none", anchor=False)
        o = predict(lib, m, framework, mode, precision, b, anchor=False)
        ratios.append(a.step_s / o.step_s)
        src_gpu = a.extra.get("source_gpu")
    if not ratios:
        raise ConfigError(f"no stored timeline of {model} {framework}/{mode} nor of another "
                          f"model of {framework}/{mode} {precision}: nothing to replay. "
                          "--gpu replays a traced GPU iteration: it needs one in the --db "
                          "files (store one with dlperf run --device cuda --trace, or "
                          "dlperf calibrate, on a GPU), or another --db that holds one; "
                          "drop --gpu to predict from the stored results' own device")
    src_name = next((p.device_name for p in lib.recs.points if p.device_name
                     and hardware.short_name(p.device_name) == src_gpu), src_gpu or "")
    src_pts = measured_points(lib, model, framework, mode, precision, batch_size, src_name)
    if src_pts:
        base = statistics.median(p.step_time_s for p in src_pts)
        how, session = measured_words(src_pts), host_session(src_pts)
        basis = "measured"
    else:
        from dlperf.perfmodel.api import predict as step_level

        sl = step_level(db, model, framework, mode, precision, src_name or "cuda",
                        batch_size=batch_size)
        base, session = sl.predicted_step_time_s, sl.host_session or host_session(src_pts)
        how, basis = f"the step-level model's {base * 1e3:.3f} ms", "step-level model's"
    f = statistics.median(ratios)
    dst = lib.gpu(gpu)
    dst_pts = measured_points(lib, model, framework, mode, precision, batch_size,
                               dst.device_name or "")
    half, source = interval("gpu", dst.datasheet_only, 1)
    return TracePrediction(
        step_s=base * f, interval_s=band(base * f, half),
        host_s=math.nan, device_s=math.nan, bound="unknown", gpu=dst.name,
        datasheet_only=dst.datasheet_only, category="gpu, no trace", sources=(),
        transforms=(f"on {src_gpu}, {how}, x the median {gpu} / {src_gpu} "
                    f"replay ratio {f:.3f} of {len(ratios)} traced models of the group",),
        measured_s=median_step(dst_pts),
        extra={"source_gpu": src_gpu, "gpu_name": gpu_name(dst),
               "interval_from": source, "measured_points": points_dict(dst_pts),
               "host_session": f"{session} (the {basis} step on {src_gpu})"})


def text(d: Mapping[str, Any]) -> str:
    """:func:`answer`'s dict as a few readable lines."""
    c = d["config"]
    lo, hi = d["interval_s"]
    mark = " (datasheet only: nothing of this GPU measured)" if d.get("datasheet_only") else ""
    name = _gpu_named(d)
    gpus = f"{c['nproc']} x {name}" if c.get("nproc", 1) > 1 else name
    what = label_of({k: c.get(k) for k in ("model", "framework", "mode", "precision",
                                            "batch_size")})
    src = (f"replayed from {', '.join(d['sources'])}" if d.get("sources")
           else f"no stored timeline of {c.get('model')}, not replayed")
    lines = [f"{what} on {gpus}{mark}: {d['predicted_step_time_s'] * 1e3:.3f} ms per "
             f"iteration [{lo * 1e3:.3f}, {hi * 1e3:.3f}] (90% band of the "
             f"{d['validation_category']} back-test), {d['samples_per_s']:.1f} samples/s, "
             f"{_BOUND_TEXT[d['bound']]}",
             f"{src}: {'; '.join(d['transforms'])}"]
    lines += [line(d) for k, line in _TEXT_LINES if d.get(k)]
    return "\n".join(lines)


#: An answer's bound (:class:`TracePrediction`: :func:`~dlperf.perfmodel.retarget.predict`'s
#: replay, or ``unknown`` where :func:`fallback` replayed no timeline of the model) in
#: :func:`text`'s words.
_BOUND_TEXT = {"host": "host-bound", "device": "device-bound",
               "unknown": "bound not known (no timeline replayed)"}


def _gpu_named(d: Mapping[str, Any]) -> str:
    """The GPU an answer of :func:`answer` is for: its device model name, else its profile's."""
    return str(d.get("gpu") or d.get("gpu_profile"))


#: The lines :func:`text` adds after the first two, in order, each where the answer holds its
#: key (``measured_step_time_s``: the median of the measured points, :func:`median_step`;
#: none in a data-parallel answer: :func:`~dlperf.perfmodel.retarget.predict`).
_TEXT_LINES: tuple[tuple[str, Callable[[Mapping[str, Any]], str]], ...] = (
    ("parts", lambda d: "parts: " + ", ".join(f"{k} {v * 1e3:.3f} ms"
                                              for k, v in d["parts"].items())),
    ("composition", lambda d: f"composed: {d['composition']}"),
    ("measured_step_time_s",
     lambda d: f"on {_gpu_named(d)}: {measured_words_of(d['measured_points'])}"),
    ("anchor", lambda d: f"anchor: {d['anchor']['rule']}"),
    ("host_session", lambda d: f"host time from: {d['host_session']}"),
    ("interval_group", lambda d: f"interval from: {d['interval_group']}"),
    ("assumptions", lambda d: "\n".join(["data parallel, assuming:",
                                         *(f"  - {a}" for a in d["assumptions"])])),
)
