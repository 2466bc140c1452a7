"""Reading the XSpace traces of jax.profiler and tf.profiler (``*.xplane.pb``).

Both profilers write an XSpace protobuf (planes -> lines -> events with stats) under
``LOGDIR/plugins/profile/<run>/<host>.xplane.pb``, the format TensorBoard's profile plugin
reads. It is read with the framework's own reader: ``jax.profiler.ProfileData`` for JAX
(jaxlib's C++ reader) and TensorFlow's bundled ``xplane_pb2`` protobuf module for TensorFlow,
into plain :class:`XEvent` lists, so the rest of dlperf never sees a protobuf.
:func:`to_chrome_trace` writes the same events as Chrome-trace JSON (one process per plane,
one thread per line, times in microseconds), which Perfetto and chrome://tracing open (JAX
also writes its own ``*.trace.json.gz``; TensorFlow 2.x writes only the XSpace).

What the parsers take from a trace, checked on the CPU here (GPU layouts from XLA's profiler
sources and public traces; not verified on a GPU by this project yet):

* steps: the ``dlperf_step`` annotations the worker puts around each traced step (host plane);
* XLA device ops: events carrying an ``hlo_op`` stat (XLA:CPU thunks on the host plane; on a
  GPU, kernels and copies on the ``Stream #...`` lines of ``/device:GPU:N`` planes), named by
  the HLO instruction; grouped into steps by their ``run_id`` stat;
* TensorFlow graph ops (executor): host events named ``name:Type`` (e.g.
  ``gradient_tape/model/conv1/Conv2D/Conv2DBackpropFilter:Conv2DBackpropFilter``);
* TensorFlow eager ops: ``EagerExecute`` events with their ``eager_op`` stat (the op type; on
  the CPU an eager op runs synchronously inside this event), under the worker's
  ``dlperf_phase:t_x`` annotations.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlperf.measure.breakdown.hlocost import kernel_costs
from dlperf.measure.breakdown.trace import TraceData, TraceOp
from dlperf.measure.breakdown.xla import (
    HloInstr,
    infer_phases,
    jax_names,
    jax_phase,
    tf_names,
    tf_phase,
)

STEP_NAME = "dlperf_step"
PHASE_PREFIX = "dlperf_phase:"
#: Lines of a device plane that TensorBoard derives from the stream lines (never raw time).
DERIVED_LINES = {"XLA Modules", "XLA Ops", "XLA TraceMe", "Framework Ops", "Framework Name Scope",
                 "TensorFlow Ops", "TensorFlow Name Scope", "Steps", "Source code",
                 "Launch Stats", "Async XLA Ops"}
_TF_OP = re.compile(r"^([^\s:]+):([A-Za-z_][\w]*)$")
_TF_WRAPPERS = re.compile(r"^(__inference|__forward|__backward|StatefulPartitionedCall|"
                          r"PartitionedCall|While|If|StatelessWhile)")


@dataclass
class XEvent:
    """One trace event: name, start and duration in nanoseconds, stats (name -> value)."""

    name: str
    start_ns: float
    dur_ns: float
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def end_ns(self) -> float:
        """End time in nanoseconds."""
        return self.start_ns + self.dur_ns


@dataclass
class XLine:
    """A line (thread or stream) of a plane."""

    name: str
    events: list[XEvent]


@dataclass
class XPlane:
    """A plane (``/host:CPU``, ``/device:GPU:0``, ...)."""

    name: str
    lines: list[XLine]


def find_xplane(logdir: str | Path) -> Path | None:
    """The newest ``*.xplane.pb`` under ``logdir`` (profilers nest it two folders down)."""
    files = glob.glob(os.path.join(str(logdir), "**", "*.xplane.pb"), recursive=True)
    return Path(max(files, key=os.path.getmtime)) if files else None


def _val(v: Any) -> Any:
    return v.decode(errors="replace") if isinstance(v, bytes) else v


def read_with_profiledata(path: str | Path) -> list[XPlane]:
    """Read an XSpace with ``jax.profiler.ProfileData`` (jaxlib's reader)."""
    from jax.profiler import ProfileData

    pd = ProfileData.from_file(str(path))
    planes = []
    for p in pd.planes:
        lines = []
        for ln in p.lines:
            evs = [XEvent(e.name, float(e.start_ns), float(e.duration_ns),
                          {k: _val(v) for k, v in e.stats}) for e in ln.events]
            lines.append(XLine(ln.name, evs))
        planes.append(XPlane(p.name, lines))
    return planes


def read_with_protobuf(path: str | Path) -> list[XPlane]:
    """Read an XSpace with TensorFlow's bundled ``xplane_pb2`` protobuf module."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    xs = xplane_pb2.XSpace()
    xs.ParseFromString(Path(path).read_bytes())
    planes = []
    for p in xs.planes:
        em, sm = p.event_metadata, p.stat_metadata

        def stat(s):
            which = s.WhichOneof("value")
            if which == "ref_value":
                return sm[s.ref_value].name if s.ref_value in sm else s.ref_value  # noqa: B023 - called in this pass
            return _val(getattr(s, which)) if which else None

        lines = []
        for ln in p.lines:
            evs = []
            for e in ln.events:
                meta = em[e.metadata_id] if e.metadata_id in em else None
                st = {sm[s.metadata_id].name: stat(s) for s in e.stats if s.metadata_id in sm}
                if meta is not None:
                    for s in meta.stats:
                        if s.metadata_id in sm:
                            st.setdefault(sm[s.metadata_id].name, stat(s))
                name = (meta.name or meta.display_name) if meta is not None else ""
                evs.append(XEvent(name, ln.timestamp_ns + e.offset_ps / 1e3,
                                  e.duration_ps / 1e3, st))
            lines.append(XLine(ln.name or ln.display_name, evs))
        planes.append(XPlane(p.name, lines))
    return planes


def read_chrome_planes(path: str | Path) -> list[XPlane]:
    """Read a Chrome-trace JSON written from an XSpace (jax.profiler's ``*.trace.json.gz``, or
    :func:`to_chrome_trace`) back into planes: processes are planes (``process_name``), threads
    lines (``thread_name``), ``args`` the stats, microseconds to nanoseconds."""
    p = Path(path)
    with (gzip.open(p, "rt", encoding="utf-8") if p.suffix == ".gz" else open(p, encoding="utf-8")) as f:
        doc = json.load(f)
    evs = doc.get("traceEvents", []) if isinstance(doc, dict) else doc
    pnames: dict[Any, str] = {}
    tnames: dict[tuple[Any, Any], str] = {}
    for e in evs:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            pnames[e.get("pid")] = str((e.get("args") or {}).get("name", e.get("pid")))
        elif e.get("ph") == "M" and e.get("name") == "thread_name":
            tnames[(e.get("pid"), e.get("tid"))] = str((e.get("args") or {}).get("name", ""))
    lines: dict[Any, dict[Any, list[XEvent]]] = {}
    for e in evs:
        if e.get("ph") == "X" and isinstance(e.get("ts"), (int, float)):
            lines.setdefault(e.get("pid"), {}).setdefault(e.get("tid"), []).append(
                XEvent(str(e.get("name", "")), float(e["ts"]) * 1e3,
                       float(e.get("dur") or 0.0) * 1e3, dict(e.get("args") or {})))
    return [XPlane(pnames.get(pid, str(pid)),
                   [XLine(tnames.get((pid, tid), str(tid)), ev) for tid, ev in tids.items()])
            for pid, tids in lines.items()]


def load_planes(folder: str | Path, prefer: str = "profiledata") -> tuple[list[XPlane], Path | None]:
    """Planes of the newest trace under ``folder`` and the XSpace file they came from.

    Tries the readers in order (``prefer`` first): ``profiledata`` (jax's reader),
    ``protobuf`` (TensorFlow's ``xplane_pb2``), then the Chrome-trace JSON the profiler wrote
    next to the XSpace (jax writes ``<host>.trace.json.gz``).

    Raises:
        RuntimeError: no trace under ``folder``, or no reader could read it.
    """
    xplane = find_xplane(folder)
    readers = {"profiledata": read_with_profiledata, "protobuf": read_with_protobuf}
    order = [prefer] + [k for k in readers if k != prefer]
    errors = []
    if xplane is not None:
        for name in order:
            try:
                return readers[name](xplane), xplane
            except Exception as e:  # noqa: BLE001 - a reader's framework may be absent
                errors.append(f"{name}: {type(e).__name__}: {e}")
    chrome = sorted(glob.glob(os.path.join(str(folder), "**", "*.trace.json.gz"), recursive=True))
    if chrome:
        return read_chrome_planes(chrome[0]), xplane
    raise RuntimeError(f"no readable profiler trace under {folder}"
                       + (f" ({'; '.join(errors)})" if errors else ""))


def to_chrome_trace(planes: Sequence[XPlane], path: str | Path) -> Path:
    """Write ``planes`` as a gzipped Chrome-trace JSON file (``traceEvents``; Perfetto and
    chrome://tracing open it); returns ``path``."""
    evs: list[dict[str, Any]] = []
    for pid, p in enumerate(planes, start=1):
        evs.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": p.name}})
        for tid, ln in enumerate(p.lines, start=1):
            evs.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                        "args": {"name": ln.name}})
            for e in ln.events:
                evs.append({"ph": "X", "name": e.name, "pid": pid, "tid": tid,
                            "ts": e.start_ns / 1e3, "dur": e.dur_ns / 1e3,
                            "args": {k: v if isinstance(v, (int, float, str)) else str(v)
                                     for k, v in e.stats.items()}})
    path = Path(path)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump({"displayTimeUnit": "ns", "traceEvents": evs}, f)
    return path


def _host_events(planes: Sequence[XPlane]) -> Iterator[tuple[XLine, XEvent]]:
    for p in planes:
        if p.name.startswith("/host:"):
            for ln in p.lines:
                for e in ln.events:
                    yield ln, e


def steps_of(planes: Sequence[XPlane]) -> list[tuple[float, float]]:
    """Host intervals (ns) of the ``dlperf_step`` annotations, in step order."""
    found: list[tuple[int, float, float]] = []
    for _, e in _host_events(planes):
        if e.name == STEP_NAME:
            n = e.stats.get("step_num")
            found.append((int(n) if n is not None else len(found), e.start_ns, e.end_ns))
    found.sort()
    return [(s, t) for _, s, t in found]


def _gpu_planes(planes: Sequence[XPlane]) -> list[XPlane]:
    return [p for p in planes if p.name.startswith("/device:GPU")]


def _device_events(planes: Sequence[XPlane], keep: Callable[[XEvent], bool]
                   ) -> Iterator[tuple[XEvent, bool]]:
    """(event, on_gpu) for device activity: GPU stream lines if there are GPU planes, else host
    events that ``keep`` accepts."""
    gpus = _gpu_planes(planes)
    if gpus:
        for p in gpus:
            lines = [ln for ln in p.lines if ln.name.startswith("Stream")] or \
                [ln for ln in p.lines if ln.name not in DERIVED_LINES]
            for ln in lines:
                for e in ln.events:
                    yield e, True
        return
    for _, e in _host_events(planes):
        if keep(e):
            yield e, False


def _assign_steps(raw: list[tuple[XEvent, dict[str, Any]]], steps: list[tuple[float, float]],
                  run_key: str | None) -> list[int | None]:
    """Step index of each op: by ``run_key`` stat groups in time order when their number equals
    the number of steps, else the last step that started before the op."""
    n = len(steps)
    if run_key:
        first: dict[Any, float] = {}
        for e, _ in raw:
            r = e.stats.get(run_key)
            if r is not None:
                first[r] = min(first.get(r, e.start_ns), e.start_ns)
        if len(first) == n and n:
            order = {r: i for i, r in enumerate(sorted(first, key=lambda r: first[r]))}
            return [order.get(e.stats.get(run_key)) for e, _ in raw]
    starts = [s for s, _ in steps]
    out = []
    for e, _ in raw:
        k = None
        for i, s in enumerate(starts):
            if s <= e.start_ns:
                k = i
        out.append(k)
    return out


def _make(raw: list[tuple[XEvent, dict[str, Any]]], steps: list[tuple[float, float]],
          run_key: str | None, on_gpu: bool = True) -> list[TraceOp]:
    if steps:  # ops of the profiled warm-up step (before the first annotated one) are dropped
        raw = [(e, d) for e, d in raw if e.start_ns >= steps[0][0]]
    idx = _assign_steps(raw, steps, run_key)
    return [TraceOp(name=d.get("name") or e.name, start_s=e.start_ns * 1e-9, end_s=e.end_ns * 1e-9,
                    ops=tuple(d["ops"]), layers=tuple(d["layers"]), context=tuple(d["context"]),
                    phase=d["phase"], step=k, kind=_kind(e) if on_gpu else "host_op",
                    extra={**_xextra(e), **d.get("cost", {})})
            for (e, d), k in zip(raw, idx)]


#: XPlane event stats kept in the timeline (small scalars only).
_XSTATS = ("kernel_details", "memcpy_details", "correlation_id", "hlo_op", "hlo_module",
           "tf_op", "stream_id", "device_id")


def _kind(e: XEvent) -> str:
    """``memcpy``/``memset`` for XLA's copy events (by their stats or name), else ``kernel``."""
    name = e.name.lower()
    if "memcpy_details" in e.stats or "memcpy" in name:
        return "memcpy"
    return "memset" if "memset" in name else "kernel"


def _xextra(e: XEvent) -> dict[str, Any]:
    return {k: v for k in _XSTATS if isinstance(v := e.stats.get(k), (int, float, str))
            and (not isinstance(v, str) or len(v) <= 300)}


def jax_trace(planes: Sequence[XPlane], hlo: dict[str, HloInstr] | None) -> TraceData:
    """The :class:`TraceData` of a jax.profiler trace of the jitted train step.

    Device ops are events with an ``hlo_op`` stat (module docstring); each is described by
    its HLO instruction in ``hlo`` (:func:`~dlperf.measure.breakdown.xla.parse_hlo` of the compiled
    step), which gives its phase (jvp / transpose(jvp) / neither), its op class and, in the
    op's ``extra``, ``op_flops``/``op_bytes`` (:func:`~dlperf.measure.breakdown.hlocost.
    kernel_costs`, computed once per trace; absent where not derivable or not mapped).
    """
    steps = steps_of(planes)
    hlo = hlo or {}
    inferred = infer_phases(hlo, jax_phase)
    costs = kernel_costs(hlo)
    raw = []
    on_gpu = False
    for e, gpu in _device_events(planes, lambda e: "hlo_op" in e.stats):
        on_gpu = on_gpu or gpu
        op = str(e.stats.get("hlo_op") or "")
        if not gpu and not op:
            continue
        ins = hlo.get(op) if op else None
        d = jax_names(ins, e.name, inferred.get(op))
        if ins is None and op:
            d["ops"] = (e.name, op)
        if op in costs:  # op_flops/op_bytes of the kernel's HLO instruction (hlocost)
            d["cost"] = {k: v for k, v in costs[op].items() if v is not None}
        raw.append((e, d))
    notes = []
    if raw and not any(d["phase"] for _, d in raw):
        notes.append("no HLO metadata matched the trace's ops: forward/backward/update "
                     "cannot be told apart")
    return TraceData(ops=_make(raw, steps, "run_id", on_gpu), steps=[(s * 1e-9, t * 1e-9) for s, t in steps],
                     device_kind="gpu" if on_gpu else "cpu",
                     source="jax.profiler (XSpace: " + ("GPU kernels" if on_gpu else
                                                         "XLA:CPU thunks") + ")",
                     phase_source="HLO op_name metadata: transpose(jvp(...)) = t_b, jvp(...) = "
                                  "t_f, neither = t_u; ops without metadata: the latest "
                                  "phase of their operands", notes=notes)


def tf_trace(planes: Sequence[XPlane], mode: str, hlo: dict[str, HloInstr] | None = None,
             model_scope: str | None = None) -> TraceData:
    """The :class:`TraceData` of a tf.profiler trace of the train step in ``mode``.

    ``graph``: executor op events ``name:Type``; ``xla``: ``hlo_op`` events described by
    ``hlo`` (the TensorFlow op names are in its metadata); ``eager``: ``EagerExecute`` events
    (op type from ``eager_op``) under the worker's ``dlperf_phase:`` annotations. On a GPU,
    device events with a ``tf_op`` (``name:Type``) or ``hlo_op`` stat.
    """
    steps = steps_of(planes)
    inferred = infer_phases(hlo, tf_phase) if hlo else {}
    raw = []
    on_gpu = bool(_gpu_planes(planes))
    phase_source = "TensorFlow op names: gradient_tape/ = t_b, optimizer scope = t_u, else t_f"
    if mode == "eager" and not on_gpu:
        marks = sorted((e.start_ns, e.end_ns, e.name[len(PHASE_PREFIX):])
                       for _, e in _host_events(planes) if e.name.startswith(PHASE_PREFIX))
        for _, e in _host_events(planes):
            if e.name != "EagerExecute" or not e.stats.get("eager_op"):
                continue
            if str(e.stats.get("is_func", "0")) == "1":
                continue
            ph = next((p for s, t, p in marks if s <= e.start_ns and e.end_ns <= t), None)
            typ = str(e.stats["eager_op"])
            raw.append((e, {"name": typ, "ops": (typ,), "layers": (), "context": (),
                            "phase": ph}))
        # Nested eager ops (an op run inside another's kernel) would be counted twice: keep
        # outermost ones only.
        raw = _outermost(raw)
        phase_source = "dlperf_phase annotations around each phase of the eager step"
    else:
        for e, gpu in _device_events(planes, lambda e: bool(_TF_OP.match(e.name)) or
                                     "hlo_op" in e.stats):
            op = str(e.stats.get("hlo_op") or "")
            if op and hlo is not None and op in hlo:
                ins = hlo[op]
                d = tf_names(ins.op_name, ins.op_type, model_scope,
                             (ins.target, ins.opcode, *ins.fused, op), inferred.get(op))
            elif op:
                d = {"ops": (e.name, op), "layers": (), "context": (), "phase": None}
            else:
                m = _TF_OP.match(str(e.stats.get("tf_op") or e.name))
                if not m:
                    if gpu:
                        raw.append((e, {"ops": (e.name,), "layers": (), "context": (),
                                        "phase": None}))
                    continue
                if _TF_WRAPPERS.match(m.group(2)):
                    continue
                d = tf_names(m.group(1), m.group(2), model_scope,
                             (e.name,) if gpu else ())
            raw.append((e, d))
    return TraceData(ops=_make(raw, steps, None, on_gpu), steps=[(s * 1e-9, t * 1e-9) for s, t in steps],
                     device_kind="gpu" if on_gpu else "cpu",
                     source=f"tf.profiler (XSpace: {'GPU kernels' if on_gpu else 'host ops'}, "
                            f"{mode} mode)", phase_source=phase_source)


def _outermost(raw: list[tuple[XEvent, dict[str, Any]]]) -> list[tuple[XEvent, dict[str, Any]]]:
    raw = sorted(raw, key=lambda r: (r[0].start_ns, -r[0].dur_ns))
    out, end = [], float("-inf")
    for e, d in raw:
        if e.start_ns >= end:
            out.append((e, d))
            end = e.end_ns
    return out
