"""Reading torch.profiler's Chrome-trace JSON (``prof.export_chrome_trace``) into a TraceData.

The file is plain JSON (no torch import here). Event categories used (Kineto's names):

* ``user_annotation``: ``record_function`` ranges; the worker wraps each traced step in
  ``dlperf_step#<i>``, and PyTorch's optimizers wrap ``step``/``zero_grad`` in
  ``Optimizer.step#<Class>.step`` / ``Optimizer.zero_grad#...``;
* ``cpu_op``: ATen ops and autograd nodes (``autograd::engine::evaluate_function: XBackward0``);
* ``kernel``, ``gpu_memcpy``, ``gpu_memset``: device activity (CUPTI), ``args.correlation``
  linking it to the ``cuda_runtime``/``cuda_driver`` launch on the host, ``args["External id"]``
  to the launching ``cpu_op``.

On a GPU each kernel gets the host call stack of its launch: the launch's correlation id gives
its host thread and time, and the ``cpu_op``/``user_annotation`` ranges open on that thread at
that time are the stack (ranges of one thread nest). The classifier's ``ops`` are the outermost
ATen op under the innermost autograd node (what the model or the autograd engine called, e.g.
``aten::linear``) and the kernel name; its ``context`` is the stack's annotations and autograd
nodes. On a CPU device there are no kernels: the self time of each ``cpu_op`` (its interval
minus its children's) is the op time, with the same names.

With ``record_shapes``/``with_flops`` (``--timeline``), each ``cpu_op`` carries
``args["Input Dims"]`` and ``args["Input type"]``, and :func:`dlperf.frameworks.torch.profile.
profile_steps` puts the profiler's FLOP count of an op (torch 2.13's Chrome trace leaves it out)
in ``args["flops"]``; every op (kernel or host-op slice) then gets ``op_flops`` and ``op_bytes``
of its launching ATen op in ``extra`` (:func:`_op_cost`).

Phase of an op: ``t_u`` under an ``Optimizer.`` annotation, ``t_b`` under an autograd node,
``t_h2d`` for a top-level ``aten::to``/``aten::copy_``/``aten::_to_copy`` (the input copy),
else ``t_f``.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator, Mapping
from typing import Any

from dlperf.measure.breakdown.trace import TraceData, TraceOp

STEP_PREFIX = "dlperf_step#"
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
_AUTOGRAD = "autograd::engine::evaluate_function"
_COPY_OPS = ("aten::to", "aten::copy_", "aten::_to_copy")
_STEP_RX = re.compile(re.escape(STEP_PREFIX) + r"(\d+)")


_KINDS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
#: Kineto's kernel/copy ``args`` kept in the timeline, under dlperf's names.
_ARGS = {"stream": "stream", "device": "device", "grid": "grid", "block": "block",
         "registers per thread": "registers", "shared memory": "shared_memory",
         "bytes": "bytes"}


#: Bytes per element of the tensor types torch.profiler names in ``args["Input type"]`` (c10's
#: type names, as torch 2.13 writes them); other entries (``Scalar``, ``ScalarList``, ``""``,
#: lists) are not tensors and count nothing.
DTYPE_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8,
               "int": 4, "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1,
               "c10::complex<float>": 8, "c10::complex<double>": 16, "c10::complex<c10::Half>": 4,
               "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1, "c10::Float8_e4m3fnuz": 1,
               "c10::Float8_e5m2fnuz": 1}


def _op_cost(e: Mapping[str, Any] | None) -> dict[str, Any]:
    """``{"op_flops", "op_bytes"}`` of one ``cpu_op`` event (keys only where known).

    ``op_flops``: the profiler's ``args["flops"]`` (torch's own formulas, e.g. 2*M*N*K for
    ``aten::mm``/``aten::addmm``; only matmul, convolution and a few elementwise ops report
    it). ``op_bytes``: the sum over the op's tensor inputs of numel x element size (from
    ``args["Input Dims"]`` and ``args["Input type"]``, :data:`DTYPE_BYTES`; a 0-d tensor counts
    one element); absent when no input is a tensor of a known type or the op was not traced with
    shapes. Bytes read, not written: outputs are not in the trace.
    """
    args = (e or {}).get("args") or {}
    out: dict[str, Any] = {}
    fl = args.get("flops")
    if isinstance(fl, (int, float)) and not isinstance(fl, bool):
        out["op_flops"] = int(fl)
    dims, types = args.get("Input Dims"), args.get("Input type")
    if isinstance(dims, list) and isinstance(types, list):
        total, seen = 0, False
        for d, t in zip(dims, types):
            size = DTYPE_BYTES.get(t) if isinstance(t, str) else None
            if size is None or not isinstance(d, list) \
                    or not all(isinstance(v, int) for v in d):
                continue
            n = 1
            for v in d:
                n *= v
            total += n * size
            seen = True
        if seen:
            out["op_bytes"] = total
    return out


def _cost_op(stack: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The ATen op a device op's FLOPs and bytes are read from: below the innermost autograd
    node, the innermost ``cpu_op`` reporting ``flops`` (``aten::addmm`` under ``aten::linear``,
    ``aten::conv2d`` above the backend's convolution), else the innermost ``cpu_op``."""
    nodes = [i for i, e in enumerate(stack) if e["name"].startswith(_AUTOGRAD)]
    below = [e for e in (stack[nodes[-1] + 1:] if nodes else stack) if e.get("cat") == "cpu_op"]
    for e in reversed(below):
        if "flops" in (e.get("args") or {}):
            return e
    return below[-1] if below else None


def _extra(args: Mapping[str, Any], launch: Mapping[str, Any] | None,
           ops: tuple[str, ...]) -> dict[str, Any]:
    """The timeline's fields of one device event (see :class:`TraceOp`): Kineto's args, the
    launching ATen op and the host launch call's interval (s)."""
    out = {k: args[a] for a, k in _ARGS.items() if a in args}
    if ops:
        out["op"] = ops[0]
    if launch is not None:
        out["launch_start_s"] = float(launch["ts"]) * 1e-6
        out["launch_end_s"] = _end(launch) * 1e-6
    return out


def _events(doc: Mapping[str, Any] | list) -> list[dict[str, Any]]:
    evs = doc.get("traceEvents", []) if isinstance(doc, Mapping) else doc
    return [e for e in evs if isinstance(e, dict) and e.get("ph") == "X"
            and isinstance(e.get("ts"), (int, float))]


def _end(e: Mapping[str, Any]) -> float:
    return float(e["ts"]) + float(e.get("dur") or 0.0)


def _stack_names(stack: list[dict[str, Any]]) -> tuple[tuple[str, ...], tuple[str, ...], str | None]:
    """(ops, context, phase) from a host stack (outermost first)."""
    context = tuple(e["name"] for e in stack if e.get("cat") == "user_annotation"
                    and not e["name"].startswith(STEP_PREFIX))
    nodes = [i for i, e in enumerate(stack) if e["name"].startswith(_AUTOGRAD)]
    below = stack[nodes[-1] + 1:] if nodes else stack
    aten = [e["name"] for e in below if e.get("cat") == "cpu_op"
            and not e["name"].startswith(_AUTOGRAD)]
    ops = (aten[0], aten[-1]) if len(aten) > 1 else tuple(aten)
    if not ops and nodes:  # the autograd engine's own time in a node: the node names the op
        ops = (stack[nodes[-1]]["name"].split(":", 1)[-1].strip(),)
    context += tuple(stack[i]["name"] for i in nodes)
    if any(c.startswith("Optimizer.") for c in context):
        phase = "t_u"
    elif nodes:
        phase = "t_b"
    elif aten and aten[0] in _COPY_OPS:
        phase = "t_h2d"
    else:
        phase = "t_f"
    return ops, context, phase


def _steps(evs: list[dict[str, Any]]) -> list[tuple[int, float, float]]:
    out = []
    for e in evs:
        if e.get("cat") == "user_annotation":
            m = _STEP_RX.fullmatch(e["name"])
            if m:
                out.append((int(m.group(1)), float(e["ts"]), _end(e)))
    out.sort()
    return out


def _step_of(t: float, starts: list[float], steps: list[tuple[int, float, float]]) -> int | None:
    i = bisect.bisect_right(starts, t) - 1
    if i >= 0 and t <= steps[i][2]:
        return i
    return None


def from_chrome_trace(doc: Mapping[str, Any] | list) -> TraceData:
    """Parse a torch.profiler Chrome trace (the loaded JSON) into a :class:`TraceData`.

    Steps are the ``dlperf_step#<i>`` annotations; times are converted from microseconds to
    seconds. A trace with device events (``kernel``/``gpu_memcpy``/``gpu_memset``) gives GPU
    ops; one without gives host-op self time (CPU device).
    """
    evs = _events(doc)
    steps = _steps(evs)
    starts = [s for _, s, _ in steps]
    device = [e for e in evs if e.get("cat") in DEVICE_CATS]
    host = [e for e in evs if e.get("cat") in ("cpu_op", "user_annotation")]
    by_thread: dict[Any, list[dict[str, Any]]] = {}
    for e in host:
        by_thread.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    us = 1e-6
    ops: list[TraceOp] = []
    if device:
        launches = {}
        for e in evs:
            if e.get("cat") in LAUNCH_CATS:
                c = (e.get("args") or {}).get("correlation")
                if c is not None:
                    launches[c] = e
        by_ext: dict[Any, dict[str, Any]] = {}
        for e in host:
            x = (e.get("args") or {}).get("External id")
            if x is not None and e.get("cat") == "cpu_op":
                by_ext.setdefault(x, e)
        # Host stack at each launch (and at each External-id op, the fallback).
        probes: dict[Any, list[tuple[float, int, Any]]] = {}
        for c, e in launches.items():
            probes.setdefault((e.get("pid"), e.get("tid")), []).append((float(e["ts"]), 0, ("c", c)))
        for x, e in by_ext.items():
            probes.setdefault((e.get("pid"), e.get("tid")), []).append((float(e["ts"]), 1, ("x", x)))
        snap: dict[Any, tuple[list[dict[str, Any]], float]] = {}
        for key, pr in probes.items():
            snap.update(_stacks_at(by_thread.get(key, []), pr))
        for e in device:
            args = e.get("args") or {}
            c, x = args.get("correlation"), args.get("External id")
            hit = snap.get(("c", c)) if c is not None else None
            if hit is None and x is not None:
                hit = snap.get(("x", x))
            if hit is not None:
                stack, t_host = hit
                o, ctx, ph = _stack_names(stack)
                step = _step_of(t_host, starts, steps)
                cost = _op_cost(_cost_op(stack))
            else:
                o, ctx, ph, step, cost = (), (), None, None, {}
            if e.get("cat") != "kernel" and not o:
                o = ("memcpy",) if e.get("cat") == "gpu_memcpy" else ("memset",)
            ops.append(TraceOp(name=e["name"], start_s=float(e["ts"]) * us, end_s=_end(e) * us,
                               ops=(*o, e["name"]), context=ctx, phase=ph, step=step,
                               kind=_KINDS.get(e.get("cat") or "", "kernel"),
                               extra={**_extra(args, launches.get(c), o), **cost}))
        source = "torch.profiler (CUPTI kernels and copies)"
        kind = "gpu"
    else:
        for tevs in by_thread.values():
            for inner, stack, s, t in _self_slices(tevs):
                o, ctx, ph = _stack_names(stack)
                ops.append(TraceOp(name=inner["name"], start_s=s * us, end_s=t * us,
                                   ops=o, context=ctx, phase=ph, uid=id(inner), kind="host_op",
                                   step=_step_of(s, starts, steps), extra=_op_cost(inner) or None))
        source = "torch.profiler (host ops: self time of each ATen op)"
        kind = "cpu"
    return TraceData(ops=ops, steps=[(s * us, t * us) for _, s, t in steps], device_kind=kind,
                     source=source, collectives=_collectives(host, starts, steps),
                     phase_source="host stack: autograd nodes = t_b, "
                     "Optimizer.* annotations = t_u, top-level input copies = t_h2d, else t_f")


#: A process group's collective span (``record_function`` of gloo/NCCL/UCC/MPI work, e.g.
#: ``gloo:all_reduce`` on gloo's worker thread, ``nccl:all_reduce`` at the enqueue).
_COLLECTIVE_RX = re.compile(r"^(gloo|nccl|ucc|mpi):\w+")


def _collectives(host: list[dict[str, Any]], starts: list[float],
                 steps: list[tuple[int, float, float]]) -> list[TraceOp]:
    """The collective spans (``user_annotation``s named ``<backend>:<collective>``) of any
    thread, as ``kind="collective"`` ops with their ``tid`` in ``extra["stream"]``."""
    us = 1e-6
    return [TraceOp(name=e["name"], start_s=float(e["ts"]) * us, end_s=_end(e) * us,
                    ops=(e["name"],), phase=None, kind="collective", cls="communication",
                    step=_step_of(float(e["ts"]), starts, steps),
                    extra={"stream": e.get("tid")})
            for e in host if e.get("cat") == "user_annotation"
            and _COLLECTIVE_RX.match(str(e.get("name")))]


def _ordered(tevs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # Parents first at equal start (longer first), so nesting is respected.
    return sorted(tevs, key=lambda e: (float(e["ts"]), -float(e.get("dur") or 0.0)))


def _stacks_at(tevs: list[dict[str, Any]], probes: list[tuple[float, int, Any]]
               ) -> dict[Any, tuple[list[dict[str, Any]], float]]:
    """For each probe (time, order, key) on one thread: (the open ranges, time)."""
    out: dict[Any, tuple[list[dict[str, Any]], float]] = {}
    stack: list[dict[str, Any]] = []
    evs = _ordered(tevs)
    probes = sorted(probes, key=lambda p: (p[0], p[1]))
    i = 0
    for t, _, key in probes:
        while i < len(evs) and float(evs[i]["ts"]) <= t:
            e = evs[i]
            while stack and _end(stack[-1]) <= float(e["ts"]):
                stack.pop()
            stack.append(e)
            i += 1
        while stack and _end(stack[-1]) < t:
            stack.pop()
        # An External-id probe sits at its op's own start: the op is on the stack already.
        out[key] = (list(stack), t)
    return out


def _self_slices(tevs: list[dict[str, Any]]) -> Iterator[list[Any]]:
    """Self-time slices of ``cpu_op`` ranges on one thread: ``[op, stack, start_us, end_us]``
    where ``op`` is the innermost open ``cpu_op`` (the stack's last element); contiguous
    slices of one op are merged."""
    evs = _ordered(tevs)
    bounds = sorted({float(e["ts"]) for e in evs} | {_end(e) for e in evs})
    # Walk boundaries; at each, the stack of ranges open over [b_k, b_k+1).
    stack: list[dict[str, Any]] = []
    cur: list[Any] | None = None  # [innermost op, stack, start, end] being merged
    i = 0
    for k in range(len(bounds) - 1):
        b, nb = bounds[k], bounds[k + 1]
        while stack and _end(stack[-1]) <= b:
            stack.pop()
        while i < len(evs) and float(evs[i]["ts"]) <= b:
            e = evs[i]
            i += 1
            if _end(e) <= b:
                continue
            while stack and _end(stack[-1]) <= float(e["ts"]):
                stack.pop()
            stack.append(e)
        ops_open = [e for e in stack if e.get("cat") == "cpu_op"]
        inner = ops_open[-1] if ops_open and nb > b else None
        if cur is not None and (inner is not cur[0] or cur[2] != b):
            yield cur
            cur = None
        if inner is not None:
            if cur is None:
                cur = [inner, stack[: stack.index(inner) + 1], b, nb]
            else:
                cur[3] = nb
    if cur is not None:
        yield cur
