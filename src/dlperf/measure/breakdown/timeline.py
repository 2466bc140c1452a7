"""The kept per-kernel timeline of a few profiled iterations (``--timeline``), compressed.

A profiler trace is tens of megabytes and is deleted after its analysis unless ``--trace DIR``
keeps it. The performance model (docs/perfmodel.md, "Records the model needs") needs less
than the trace and more than its summary: every device op of the traced iterations with its
stream, start and duration, op class, launching operator, phase, launch geometry (grid, block,
registers, shared memory: the wave effect), the host interval of its launch call and the
FLOPs and bytes of what launched it (PyTorch, traced with shapes under ``--timeline``: the
ATen op's FLOPs and input bytes; JAX: the HLO instruction's, from the compiled step,
:mod:`dlperf.measure.breakdown.hlocost`). This
module turns a parsed :class:`~dlperf.measure.breakdown.trace.TraceData` into that table,
column-wise, with a string table, compressed with zlib and base64-encoded, so that a stored
result can carry it (the store keeps it in a table of its own, not in ``result_json``) and a
later model can be re-fitted without running again.

Besides the device ops, the process group's collective spans (kind ``collective``, e.g.
``gloo:all_reduce`` on gloo's worker thread; :attr:`TraceData.collectives`) are kept, for
:mod:`dlperf.measure.breakdown.buckets`.

Times are integer nanoseconds from the host start of the op's traced iteration (from the first
traced iteration's start for an op no iteration claims). Format name :data:`FORMAT`; a reader
refuses another.
"""

from __future__ import annotations

import base64
import json
import zlib
from typing import Any

from dlperf.measure.breakdown.trace import TraceData

# The stored format (FORMAT, COLUMNS, the string columns) and its reader, decode, live with the
# store (dlperf.results.timelines), so that the performance model reads timelines without
# importing dlperf.measure.
from dlperf.results.timelines import COLUMNS, FORMAT, decode  # noqa: F401 - re-exported
from dlperf.results.timelines import STRING_COLS as _STRING_COLS

#: zlib level: 6 (zlib's default) compresses a 2,700-kernel ResNet-50 timeline to ~1/10.
_LEVEL = 6
#: Context (annotations, autograd nodes) kept per op: the innermost entries, joined.
_CONTEXT_KEEP = 3


def _ns(x: float | None) -> int | None:
    return None if x is None else int(round(x * 1e9))


def _text(s: Any) -> str | None:
    """A string column's value as stored: at most 300 characters, ``""`` as absent."""
    return None if s is None or s == "" else str(s)[:300]


def rows(trace: TraceData) -> list[dict[str, Any]]:
    """The ops of ``trace`` (device ops and the process group's collective spans), one dict
    per op with the keys of :data:`COLUMNS`, in start order: exactly what
    :func:`dlperf.results.timelines.decode` gives back from :func:`encode`'s result, without
    the compression round trip (times in ns from the start of the op's traced iteration).

    Raises:
        ValueError: the trace has no traced steps.
    """
    if not trace.steps:
        raise ValueError("the trace has no traced steps: nothing to anchor a timeline to")
    t0 = trace.steps[0][0]
    out = []
    for op in sorted([*trace.ops, *trace.collectives], key=lambda o: o.start_s):
        x = op.extra or {}
        k = op.step if op.step is not None and 0 <= op.step < len(trace.steps) else None
        base = trace.steps[k][0] if k is not None else t0
        ls, le = x.get("launch_start_s"), x.get("launch_end_s")
        row = {
            "step": k, "kind": op.kind or ("host_op" if trace.device_kind == "cpu" else "kernel"),
            "stream": x.get("stream", x.get("stream_id")), "device": x.get("device",
                                                                           x.get("device_id")),
            "start_ns": _ns(op.start_s - base), "dur_ns": _ns(op.end_s - op.start_s),
            "name": op.name, "op_class": op.op_class, "op": x.get("op", op.ops[0] if op.ops
                                                               else None),
            "phase": op.phase, "context": " > ".join(op.context[-_CONTEXT_KEEP:]) or None,
            "grid": _geom(x.get("grid")), "block": _geom(x.get("block")),
            "registers": x.get("registers"), "shared_memory": x.get("shared_memory"),
            "bytes": x.get("bytes"),
            "launch_start_ns": _ns(ls - base) if ls is not None else None,
            "launch_dur_ns": _ns(le - ls) if ls is not None and le is not None else None,
            "op_flops": x.get("op_flops"), "op_bytes": x.get("op_bytes"),
        }
        out.append({c: _text(row[c]) if c in _STRING_COLS else row[c] for c in COLUMNS})
    return out


def encode(trace: TraceData) -> dict[str, Any]:
    """The timeline of ``trace`` (:func:`rows`) as a JSON-able dict:
    ``{"format", "encoding", "n_ops", "n_steps", "device_kind", "source", "steps_ns",
    "columns", "data", "raw_bytes", "stored_bytes"}``; ``steps_ns`` is ``[[start, end], ...]``
    of the traced iterations (ns from the first one's start), ``data`` the base64 of the
    zlib-compressed JSON ``{"strings": [...], "cols": {column: [values]}}``.

    Raises:
        ValueError: the trace has no traced steps.
    """
    ops = rows(trace)
    t0 = trace.steps[0][0]
    strings: list[str] = []
    index: dict[str, int] = {}

    def sid(s: str | None) -> int | None:
        if s is None:
            return None
        if s not in index:
            index[s] = len(strings)
            strings.append(s)
        return index[s]

    cols: dict[str, list[Any]] = {c: [] for c in COLUMNS}
    for row in ops:
        for c in COLUMNS:
            cols[c].append(sid(row[c]) if c in _STRING_COLS else row[c])
    raw = json.dumps({"strings": strings, "cols": cols}, separators=(",", ":")).encode()
    packed = base64.b64encode(zlib.compress(raw, _LEVEL)).decode("ascii")
    return {"format": FORMAT, "encoding": "zlib+base64 JSON columns", "n_ops": len(cols["step"]),
            "n_steps": len(trace.steps), "device_kind": trace.device_kind,
            "source": trace.source,
            "steps_ns": [[_ns(s - t0), _ns(e - t0)] for s, e in trace.steps],
            "columns": list(COLUMNS), "data": packed, "raw_bytes": len(raw),
            "stored_bytes": len(packed)}


def _geom(g: Any) -> str | None:
    """A launch dimension (Kineto gives ``[x, y, z]``) as ``"x,y,z"``."""
    if g is None:
        return None
    if isinstance(g, (list, tuple)):
        return ",".join(str(v) for v in g)
    return str(g)


def per_step_counts(ops: list[dict[str, Any]], n_steps: int) -> dict[str, float]:
    """Kernels and copies per iteration from decoded ``ops`` (ops no iteration claims are
    left out): ``{"kernels_per_iter", "copies_per_iter"}``."""
    k = sum(1 for o in ops if o["step"] is not None
            and o["kind"] not in ("memcpy", "memset", "collective"))
    c = sum(1 for o in ops if o["step"] is not None and o["kind"] in ("memcpy", "memset"))
    n = max(n_steps, 1)
    return {"kernels_per_iter": k / n, "copies_per_iter": c / n}
