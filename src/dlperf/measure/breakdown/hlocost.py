"""FLOPs and bytes of the kernels of a compiled XLA program, from its optimized HLO text.

An XLA trace names each device kernel (XLA:GPU) or thunk (XLA:CPU) after the HLO instruction
it runs (stat ``hlo_op``: ``fusion.12``, ``ynn_fusion.4``, ``dot.1``, ``custom-call.3``). The
compiled step's text (``jitted.lower(...).compile().as_text()``, parsed by
:func:`dlperf.measure.breakdown.xla.parse_hlo`) gives every instruction's result type, its
operands (whose types are their own definitions' result types) and its attributes, which is
enough to count, per kernel-level instruction (one that appears in the entry computation or
in a loop body, not inside a fusion):

* ``op_flops``: the FLOPs of its dots and convolutions (the instruction itself, or those
  inside the fused computation it calls, nested fusions included), 2 per multiply-add:

  - dot: ``2 x elements(result) x product(lhs contracting dimension sizes)`` (= 2·M·N·K,
    batch dimensions in the result), XLA ``HloCostAnalysis::HandleDot``/``GetDotFlops``;
  - convolution: ``2 x (input features / feature_group_count) x output features x
    (batch / batch_group_count) x product over spatial dimensions of the valid (non-padding)
    input positions``, XLA ``HloCostAnalysis::GetConvolutionFlops`` (openxla/xla,
    xla/service/hlo_cost_analysis.cc; the same count, padding and dilations included);
  - library calls on a GPU: a cuBLAS GEMM custom call (``__cublas$gemm``,
    ``__cublas$lt$matmul``...) by the dot formula from its ``backend_config``'s
    ``dot_dimension_numbers``; a cuDNN convolution (``__cudnn$conv...``) by the convolution
    formula with the forward convolution's tensors (forward: result = output; backward input:
    result = input, operand 0 = output gradient; backward filter: result = filter, operand 1 =
    output gradient). Not checked on a GPU by this project yet;
  - 0 for an instruction with no dot or convolution in it (elementwise work, reductions,
    copies: XLA's cost analysis counts these at about 1 FLOP per element; left out here), and
    None where a custom call's work is not known (another library call).

* ``op_bytes``: operand bytes + result bytes of the kernel-level instruction (a custom call's
  trailing ``u8``/``s8`` scratch buffer left out): what the kernel reads and writes if every
  operand is read once, as XLA's cost analysis assumes for a fusion's parameters (it may count
  a fusion's partially used operand lower).

Consistency with XLA's own total (checked on XLA:CPU in tests/unit/test_xla_costs.py): over one
iteration's kernels, the sum of ``op_flops`` is the dots' and convolutions' 2·M·N·K by hand,
and lies within :data:`FLOPS_TOLERANCE` below the compiled step's
``cost_analysis()["flops"]`` for a step whose FLOPs are mostly matmuls or convolutions (the
difference is the elementwise work that cost analysis counts and this does not). An
instruction inside a loop body runs once per loop trip and is a kernel each time in the
trace, while cost analysis counts a loop body once, so a step with a loop sums above it.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from dlperf.measure.breakdown.xla import HloInstr

#: How far below the compiled step's ``cost_analysis()["flops"]`` the dot/convolution sum of a
#: matmul- or convolution-dominated step may lie (its elementwise FLOPs; 1.1% for the
#: tests' MLP step on XLA:CPU).
FLOPS_TOLERANCE = 0.05
#: Where the numbers come from (kept in the trace's notes).
SOURCE = ("optimized HLO of the compiled step (as_text()): op_flops = 2 x multiply-adds of "
          "the kernel's dots and convolutions (XLA HloCostAnalysis formulas), op_bytes = "
          "operand + result bytes of its instruction")

#: Bits per element of an HLO primitive type (xla/xla_data.proto PrimitiveType).
_BITS = {"pred": 8, "s1": 1, "u1": 1, "s2": 2, "u2": 2, "s4": 4, "u4": 4, "s8": 8, "u8": 8,
         "s16": 16, "u16": 16, "f16": 16, "bf16": 16, "s32": 32, "u32": 32, "f32": 32,
         "s64": 64, "u64": 64, "f64": 64, "c64": 64, "c128": 128, "tf32": 32,
         "f8e5m2": 8, "f8e4m3fn": 8, "f8e4m3": 8, "f8e4m3b11fnuz": 8, "f8e5m2fnuz": 8,
         "f8e4m3fnuz": 8, "f8e3m4": 8, "f8e8m0fnu": 8, "f4e2m1fn": 4, "token": 0}
_ARRAY = re.compile(r"\b([a-z][a-z0-9]*)\[([^\]]*)\]")
_GEMM_TARGETS = ("__cublas$gemm", "__cublas$lt$matmul")
_CONV_TARGET = "__cudnn$conv"


def arrays(shape: str) -> list[tuple[str, tuple[int, ...]]]:
    """The arrays of an HLO type text, in order: ``f32[64,512]{1,0}`` -> ``[("f32", (64,
    512))]``; a tuple type gives each element; ``f32[]`` a scalar ``()``; dynamic bounds
    (``<=8``) count at their bound.

    Raises:
        ValueError: an element type this table does not know (name it in :data:`_BITS`).
    """
    out = []
    for m in _ARRAY.finditer(shape):
        dtype = m.group(1)
        if dtype not in _BITS:
            raise ValueError(f"HLO element type {dtype!r} in {shape!r} has no known size")
        dims = tuple(int(d.strip().lstrip("<=")) for d in m.group(2).split(",") if d.strip())
        out.append((dtype, dims))
    return out


def nbytes(shape: str) -> int:
    """Bytes of every array in an HLO type text (sub-byte types rounded up per array)."""
    return _bytes_of(arrays(shape))


def _bytes_of(arrs: list[tuple[str, tuple[int, ...]]]) -> int:
    return sum(math.ceil(_BITS[t] * math.prod(d) / 8) for t, d in arrs)


def _dims_attr(attrs: str, key: str) -> tuple[int, ...]:
    m = re.search(key + r"=\{([\d,\s]*)\}", attrs)
    return tuple(int(x) for x in m.group(1).split(",") if x.strip()) if m else ()


def _int_attr(attrs: str, key: str, default: int = 1) -> int:
    m = re.search(key + r"=(\d+)", attrs)
    return int(m.group(1)) if m else default


def dot_flops(lhs: tuple[int, ...], result: tuple[int, ...], contracting: tuple[int, ...]
              ) -> int:
    """2 x elements(result) x product of the lhs contracting dimensions (XLA
    ``HloCostAnalysis::GetDotFlops``): 2·M·N·K for ``[M,K] x [K,N]``."""
    return 2 * math.prod(result) * math.prod(lhs[i] for i in contracting)


def _window(attrs: str) -> list[dict[str, int]]:
    """Per spatial dimension: size, stride, padding low/high, lhs (base) and rhs (window)
    dilation, from ``window={size=3x3 stride=2x2 pad=1_1x1_1 lhs_dilate=2x2 rhs_dilate=1x1}``."""
    m = re.search(r"window=\{([^}]*)\}", attrs)
    if not m:
        return []
    f = dict(kv.split("=", 1) for kv in m.group(1).split() if "=" in kv)
    size = [int(x) for x in f.get("size", "").split("x") if x]
    n = len(size)

    def ints(key: str, default: int) -> list[int]:
        return [int(x) for x in f[key].split("x")] if key in f else [default] * n

    pads = [tuple(int(v) for v in p.split("_")) for p in f["pad"].split("x")] if "pad" in f \
        else [(0, 0)] * n
    stride, lhs_d, rhs_d = ints("stride", 1), ints("lhs_dilate", 1), ints("rhs_dilate", 1)
    return [{"size": size[i], "stride": stride[i], "lo": pads[i][0], "hi": pads[i][1],
             "base": lhs_d[i], "wdil": rhs_d[i]} for i in range(n)]


def _valid_positions(w: dict[str, int], inp: int, out: int, ker: int) -> int:
    """Input positions a kernel dimension really multiplies, summed over kernel taps and
    outputs (XLA ``GetConvolutionFlops``'s ``valid_position_count``, its two shortcuts
    included)."""
    if (inp == out and ker == out and inp == w["base"] and w["wdil"] == 1
            and max(1, inp - 1) == w["stride"] and w["lo"] == 0 and w["hi"] == 0):
        return inp
    if (inp == 1 and ker == out and w["wdil"] == 1 and w["base"] == 1 and w["stride"] == 1
            and w["hi"] == out - 1 and w["lo"] == out - 1):
        return out
    count = 0
    for k in range(ker):
        if w["stride"] == 1 and w["base"] == 1:
            base = w["lo"] - k * w["wdil"]
            count += max(min(inp + base, out) - max(base, 0), 0)
            continue
        for o in range(out):
            und = o * w["stride"] - w["lo"] + k * w["wdil"]
            idx = und // w["base"] if w["base"] > 1 else und
            if und != idx * w["base"] or idx < 0 or idx >= inp:
                continue
            count += 1
    return count


def conv_flops(lhs: tuple[int, ...], rhs: tuple[int, ...], out: tuple[int, ...],
               attrs: str) -> int | None:
    """FLOPs of a convolution with input ``lhs``, kernel ``rhs`` and output ``out`` (shapes)
    and its ``window=``/``dim_labels=``/group attributes (XLA ``GetConvolutionFlops``:
    2 x (input features / feature groups) x output features x (batch / batch groups) x the
    product of valid positions per spatial dimension). None without ``dim_labels``."""
    m = re.search(r"dim_labels=(\w+)_(\w+)->(\w+)", attrs)
    if not m:
        return None
    li, ki, oi = m.group(1), m.group(2), m.group(3)
    n_sp = sum(c.isdigit() for c in li)
    win = _window(attrs) or [{"size": 1, "stride": 1, "lo": 0, "hi": 0, "base": 1, "wdil": 1}]
    counts = []
    for s in range(n_sp):
        c = str(s)
        counts.append(_valid_positions(win[s], lhs[li.index(c)], out[oi.index(c)],
                                       rhs[ki.index(c)]))
    if n_sp == 0:
        counts = [1]
    fma = (lhs[li.index("f")] // _int_attr(attrs, "feature_group_count")) \
        * out[oi.index("f")] * (lhs[li.index("b")] // _int_attr(attrs, "batch_group_count")) \
        * math.prod(counts)
    return 2 * fma


def _shape_of(instrs: dict[str, HloInstr], name: str) -> tuple[int, ...] | None:
    ins = instrs.get(name)
    a = arrays(ins.shape) if ins is not None else []
    return a[0][1] if a else None


def _backend_config(attrs: str) -> dict[str, Any] | None:
    """The JSON ``backend_config={...}`` of an instruction's attributes, None if absent or not
    JSON."""
    at = attrs.find("backend_config={")
    if at < 0:
        return None
    try:
        cfg, _ = json.JSONDecoder().raw_decode(attrs, at + len("backend_config="))
    except ValueError:
        return None
    return cfg if isinstance(cfg, dict) else None


def _gemm_flops(ins: HloInstr, instrs: dict[str, HloInstr]) -> int | None:
    lhs, res = _shape_of(instrs, ins.operands[0]) if ins.operands else None, arrays(ins.shape)
    cfg = _backend_config(ins.attrs)
    if cfg is None or lhs is None or not res:
        return None
    dn = (cfg.get("gemm_backend_config") or cfg).get("dot_dimension_numbers") or {}
    k = dn.get("lhs_contracting_dimensions")
    return dot_flops(lhs, res[0][1], tuple(int(x) for x in k)) if k is not None else None


def _cudnn_flops(ins: HloInstr, instrs: dict[str, HloInstr]) -> int | None:
    res = arrays(ins.shape)
    ops = [_shape_of(instrs, o) for o in ins.operands[:2]]
    if not res or len(ops) < 2 or ops[0] is None or ops[1] is None:
        return None
    r = res[0][1]
    if "BackwardInput" in ins.target:
        return conv_flops(r, ops[1], ops[0], ins.attrs)
    if "BackwardFilter" in ins.target:
        return conv_flops(ops[0], r, ops[1], ins.attrs)
    return conv_flops(ops[0], ops[1], r, ins.attrs)


def instruction_flops(ins: HloInstr, instrs: dict[str, HloInstr],
                      members: dict[str, list[str]], _depth: int = 0) -> int | None:
    """Dot and convolution FLOPs of one instruction (module docstring): its own, or summed
    over the computation a fusion calls; None where a custom call's work is unknown."""
    if ins.opcode == "dot":
        lhs = _shape_of(instrs, ins.operands[0]) if ins.operands else None
        res = arrays(ins.shape)
        if lhs is None or not res:
            return None
        return dot_flops(lhs, res[0][1], _dims_attr(ins.attrs, "lhs_contracting_dims"))
    if ins.opcode == "convolution":
        lhs, rhs = (_shape_of(instrs, o) for o in (ins.operands + ("", ""))[:2])
        res = arrays(ins.shape)
        return conv_flops(lhs, rhs, res[0][1], ins.attrs) if lhs and rhs and res else None
    if ins.opcode == "custom-call":
        if ins.target.startswith(_GEMM_TARGETS):
            return _gemm_flops(ins, instrs)
        if ins.target.startswith(_CONV_TARGET):
            return _cudnn_flops(ins, instrs)
        return None
    if ins.opcode == "fusion" and ins.calls and _depth < 8:
        total = 0
        for n in members.get(ins.calls, []):
            f = instruction_flops(instrs[n], instrs, members, _depth + 1)
            if f is None:
                return None
            total += f
        return total
    return 0


def instruction_bytes(ins: HloInstr, instrs: dict[str, HloInstr]) -> int | None:
    """Operand + result bytes of one kernel-level instruction (a library custom call's
    trailing ``u8``/``s8`` scratch buffer left out); None where an operand's type is not in
    the text."""
    res = arrays(ins.shape)
    if ins.opcode == "custom-call" and len(res) > 1 and res[-1][0] in ("u8", "s8"):
        res = res[:-1]
    total = _bytes_of(res)
    for o in ins.operands:
        src = instrs.get(o)
        if src is None:
            return None
        total += nbytes(src.shape)
    return total


def kernel_costs(instrs: dict[str, HloInstr]) -> dict[str, dict[str, int | None]]:
    """``{instruction name: {"op_flops", "op_bytes"}}`` for every instruction of a parsed HLO
    module (:func:`~dlperf.measure.breakdown.xla.parse_hlo`) that can be a kernel: not a
    parameter, constant, tuple plumbing or bitcast, and not inside a fused computation.
    Computed once per compiled step; a value that cannot be derived is None (module
    docstring), never guessed."""
    members: dict[str, list[str]] = {}
    for n, ins in instrs.items():
        members.setdefault(ins.computation, []).append(n)
    fused = {ins.calls for ins in instrs.values() if ins.calls}
    skip = ("parameter", "constant", "tuple", "get-tuple-element", "bitcast")
    out: dict[str, dict[str, int | None]] = {}
    for n, ins in instrs.items():
        if ins.computation in fused or ins.opcode in skip:
            continue
        try:
            out[n] = {"op_flops": instruction_flops(ins, instrs, members),
                      "op_bytes": instruction_bytes(ins, instrs)}
        except (ValueError, IndexError, KeyError):
            out[n] = {"op_flops": None, "op_bytes": None}
    return out


def step_flops(costs: dict[str, dict[str, Any]]) -> int:
    """Sum of ``op_flops`` over the instructions of ``costs`` (each once; None counts 0)."""
    return sum(c["op_flops"] or 0 for c in costs.values())
