"""Reading XLA HLO text: what each instruction of a compiled program is and where it came from.

XLA traces name device ops by HLO instruction (``fusion.123``, ``convolution.4``,
``ynn_fusion.5``, stat ``hlo_op``); the compiled program's text (JAX:
``jitted.lower(...).compile().as_text()``; TensorFlow XLA:
``fn.experimental_get_compiler_ir(...)(stage="optimized_hlo")``) says for each instruction its
opcode, custom-call target (``__cudnn$convForward``, ``__cublas$gemm``), the opcodes fused into
it, and its metadata: ``op_name`` (JAX: ``jit(step)/transpose(jvp(ResNet))/layer1_0/conv1/
conv_general_dilated``; TensorFlow: ``gradient_tape/model/conv1/Conv2D``), ``op_type``
(TensorFlow) and ``stack_frame_id`` (JAX: the Python stack that traced it, e.g. optax's
``update_fn``). :func:`parse_hlo` builds that table; :func:`jax_names` and :func:`tf_names`
turn one instruction into the classifier's inputs and a phase.

Phases (forward/backward/update) from the names, without running anything again:

* JAX: ``transpose(`` in ``op_name`` -> backward (``t_b``: the transposed linearisation that
  ``jax.grad`` builds); otherwise ``jvp(`` -> forward (``t_f``, loss included); an op_name with
  neither -> update (``t_u``: the optimizer and the rest of the step outside the gradient);
  no metadata -> unattributed (parameter copies and layout changes XLA inserted).
* TensorFlow: a ``gradient_tape/`` scope -> ``t_b``; an optimizer scope (``sgd``, ``adam``,
  ``adamw``, any case, optional ``_N``) -> ``t_u``; else ``t_f``.

A fusion's metadata is its root instruction's, so a fusion that mixes forward and backward
ops is attributed to its root's phase (XLA fuses within a phase far more often than across).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_INSTR = re.compile(r"^\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")
_COMP = re.compile(r"^\s*(ENTRY\s+)?%?([\w.\-]+)\s*(\(.*\))?\s*->.*\{\s*$|^\s*(ENTRY\s+)?%?([\w.\-]+)\s*\{\s*$")
_OP_NAME = re.compile(r'op_name="((?:[^"\\]|\\.)*)"')
_OP_TYPE = re.compile(r'op_type="((?:[^"\\]|\\.)*)"')
_FRAME = re.compile(r"stack_frame_id=(\d+)")
_TARGET = re.compile(r'custom_call_target="([^"]*)"')
_CALLS = re.compile(r"calls=%?([\w.\-]+)")
_KIND = re.compile(r"kind=(k\w+)")
_OPT_SCOPE = re.compile(r"^(sgd|adam|adamw|momentum|rmsprop|adagrad|lamb)(_\d+)?$", re.I)


@dataclass
class HloInstr:
    """One HLO instruction (fields empty where the text has none)."""

    name: str
    opcode: str
    op_name: str = ""
    op_type: str = ""
    frames: tuple[tuple[str, str], ...] = ()   # (function, file), innermost first
    target: str = ""
    fused: tuple[str, ...] = ()                 # opcodes inside a fusion
    computation: str = ""
    operands: tuple[str, ...] = ()
    shape: str = ""                             # result type text: f32[64,512]{1,0}, (..., ...)
    attrs: str = ""                             # text after the operand list (window=, ...)
    calls: str = ""                             # the fused computation of a fusion


def _type_end(s: str) -> int:
    """Index just past the result type at the start of ``s`` (a tuple type is balanced)."""
    if s.startswith("("):
        depth = 0
        for i, ch in enumerate(s):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0:
                return i + 1
    m = re.match(r"\S+", s)
    return m.end() if m else 0


def _operands(s: str) -> tuple[tuple[str, ...], str]:
    """Operand names in ``s`` = the text after ``opcode(``, up to the matching ``)``, and the
    text after that ``)`` (the attributes)."""
    depth, rest = 1, ""
    for i, ch in enumerate(s):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0:
            s, rest = s[:i], s[i + 1:]
            break
    return tuple(re.findall(r"%([\w.\-]+)", s)), rest


def _tables(text: str) -> dict[int, tuple[str, str, int]]:
    """StackFrames of the module: frame id -> (function, file, parent id)."""
    sections: dict[str, dict[int, str]] = {}
    cur = None
    for line in text.splitlines():
        s = line.strip()
        if s in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            cur = s
            sections[cur] = {}
            continue
        if cur is None:
            continue
        m = re.match(r"^(\d+)\s+(.*)$", s)
        if not m:
            if s:
                cur = None
            continue
        sections[cur][int(m.group(1))] = m.group(2)
    files = {k: v.strip('"') for k, v in sections.get("FileNames", {}).items()}
    funcs = {k: v.strip('"') for k, v in sections.get("FunctionNames", {}).items()}
    locs = {}
    for k, v in sections.get("FileLocations", {}).items():
        f = re.search(r"file_name_id=(\d+)", v)
        fn = re.search(r"function_name_id=(\d+)", v)
        locs[k] = (funcs.get(int(fn.group(1)), "") if fn else "",
                   files.get(int(f.group(1)), "") if f else "")
    frames = {}
    for k, v in sections.get("StackFrames", {}).items():
        loc = re.search(r"file_location_id=(\d+)", v)
        par = re.search(r"parent_frame_id=(\d+)", v)
        func, fl = locs.get(int(loc.group(1)), ("", "")) if loc else ("", "")
        frames[k] = (func, fl, int(par.group(1)) if par else 0)
    return frames


def _stack(frames: dict[int, tuple[str, str, int]], fid: int) -> tuple[tuple[str, str], ...]:
    out, seen = [], set()
    while fid and fid in frames and fid not in seen:
        seen.add(fid)
        fn, fl, parent = frames[fid]
        out.append((fn, fl))
        fid = parent
    return tuple(out)


def parse_hlo(text: str) -> dict[str, HloInstr]:
    """Instruction name -> :class:`HloInstr` for every instruction of an HLO module's text.

    Fusion instructions get the opcodes of their fused computation in ``fused`` and, when they
    have no metadata of their own, their root's metadata.
    """
    frames = _tables(text)
    instrs: dict[str, HloInstr] = {}
    comps: dict[str, list[str]] = {}
    roots: dict[str, str] = {}
    comp = ""
    for line in text.splitlines():
        m = _COMP.match(line)
        if m and "=" not in line.split("{", 1)[0].split("->")[0]:
            comp = m.group(2) or m.group(5) or ""
            comps.setdefault(comp, [])
            continue
        m = _INSTR.match(line)
        if not m or not comp:
            continue
        root, name, rest = m.group(1), m.group(2), m.group(3)
        end = _type_end(rest)
        after = rest[end:].lstrip()
        om = re.match(r"([\w\-]+)\(", after)
        if not om:
            continue
        operands, attrs = _operands(after[om.end():])
        ins = HloInstr(name=name, opcode=om.group(1), computation=comp, operands=operands,
                       shape=rest[:end], attrs=attrs)
        md = re.search(r"metadata=\{(.*?)\}(?:,|$)", after)
        if md:
            body = md.group(1)
            if (x := _OP_NAME.search(body)):
                ins.op_name = x.group(1).replace("\\'", "'")
            if (x := _OP_TYPE.search(body)):
                ins.op_type = x.group(1)
            if (x := _FRAME.search(body)):
                ins.frames = _stack(frames, int(x.group(1)))
        if (x := _TARGET.search(after)):
            ins.target = x.group(1)
        if ins.opcode == "fusion" and (x := _CALLS.search(after)):
            ins.calls = x.group(1)
        instrs[name] = ins
        comps[comp].append(name)
        if root:
            roots[comp] = name
    for ins in instrs.values():
        if not (callee := ins.calls):
            continue
        members = [instrs[n] for n in comps.get(callee, []) if n in instrs]
        ins.fused = tuple(dict.fromkeys(i.opcode for i in members if i.opcode not in
                                        ("parameter", "constant", "bitcast", "get-tuple-element",
                                         "tuple")))
        if not ins.target:
            ins.target = next((i.target for i in members if i.target), "")
        if not ins.op_name and callee in roots:
            r = instrs[roots[callee]]
            ins.op_name, ins.op_type, ins.frames = r.op_name, r.op_type, r.frames
    return instrs


_TRANSFORM = re.compile(r"^[\w.\-]*\(.*\)$")   # jit(f), jvp(M), transpose(jvp(M)), vmap(...)
_CONTROL = {"while", "body", "cond", "scan", "branch", "checkpoint", "remat", "rematted_computation"}


def jax_phase(op_name: str) -> str | None:
    """``t_b`` / ``t_f`` / ``t_u`` from a JAX ``op_name`` (module docstring), None if empty."""
    if not op_name:
        return None
    if "transpose(" in op_name:
        return "t_b"
    if "jvp(" in op_name:
        return "t_f"
    return "t_u"


_RANK = {"t_f": 1, "t_b": 2, "t_u": 3}


def infer_phases(instrs: dict[str, HloInstr], phase_of: Callable[[str], str | None]
                 ) -> dict[str, str | None]:
    """Phase of every instruction: its own (``phase_of(op_name)``) if it has metadata, else the
    latest phase among its operands' (forward < backward < update), None if none has one.

    XLA passes drop metadata from some instructions they create (e.g. the weight-gradient
    convolution and its layout copies on XLA:CPU). An instruction that consumes a backward
    value is backward work (forward work never consumes a gradient), and one that consumes an
    update value is update work. What still has no phase (an iota, a broadcast of a constant,
    a layout copy of a parameter) takes the earliest phase among its users: it prepares a value
    for them. Parameters and constants carry no phase. Instructions are visited in text order,
    in which HLO defines operands before their users (and in reverse for the users' pass).
    """
    out: dict[str, str | None] = {}
    for name, ins in instrs.items():
        if ins.opcode in ("parameter", "constant"):
            out[name] = None
        elif ins.op_name:
            out[name] = phase_of(ins.op_name)
        else:
            ph = [p for p in (out.get(o) for o in ins.operands) if p is not None and p in _RANK]
            out[name] = max(ph, key=_RANK.__getitem__) if ph else None
    # Still without a phase (an iota, a broadcast of a constant, a layout copy of a
    # parameter): it prepares a value, so it belongs to the earliest phase that consumes it.
    users: dict[str, list[str]] = {}
    for name, ins in instrs.items():
        for o in ins.operands:
            users.setdefault(o, []).append(name)
    for name in reversed(list(instrs)):
        ins = instrs[name]
        if out[name] is None and ins.opcode not in ("parameter", "constant", "tuple",
                                                    "get-tuple-element"):
            ph = [p for p in (out.get(u) for u in users.get(name, []))
                  if p is not None and p in _RANK]
            out[name] = min(ph, key=_RANK.__getitem__) if ph else None
    return out


def _sanitized(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_$]", "_", name)


def is_instruction_kernel(kernel: str, instruction: str) -> bool:
    """True if the device kernel ``kernel`` is named after the HLO instruction ``instruction``
    itself (empty ``kernel``: True), so it says no more than the instruction does.

    XLA:GPU names the kernel it emits for a fusion after the instruction with every character
    other than a letter, digit, ``_`` or ``$`` replaced by ``_`` (``llvm_ir::SanitizeFunctionName``:
    instruction ``input_scatter_fusion.8`` runs as kernel ``input_scatter_fusion_8``); XLA:CPU
    thunks carry the instruction name as it is. Such a name is the fusion's kind and hero
    opcodes (``input`` + ``scatter``), not what the program computes: the primitive in the
    instruction's ``op_name`` (``select_and_scatter``, a max-pool's backward) must decide
    before it, as it already did for the fusions whose kernel name equals the instruction name
    (on the H200, GoogLeNet's ``input_scatter_fusion`` was pooling while
    ``input_scatter_fusion_1`` ... ``_12`` fell to other). A library kernel
    (``sm90_xmma_fprop_...``, ``nvjet_...``, ``cutlass_...``) is not named after the
    instruction and stays in front.
    """
    return not kernel or kernel == instruction or kernel == _sanitized(instruction)


def jax_names(ins: HloInstr | None, event_name: str = "",
              phase: str | None = None) -> dict[str, Any]:
    """Classifier inputs (``ops``, ``layers``, ``context``) and ``phase`` of one JAX op.

    ``ops``: custom-call target, the device kernel name (when it is not the instruction name:
    see :func:`is_instruction_kernel`), the primitive (last ``op_name`` part), opcode, fused
    opcodes, instruction name. ``layers``:
    the innermost Flax module instance in ``op_name`` and the class of the innermost
    ``Module.__call__`` frame. ``context``: the module path (root module dropped, it names the
    whole model), ``jit(f)`` function names, and the innermost source frame's function and
    file (optax's losses or updates).
    """
    if ins is None:
        return {"ops": (event_name,), "layers": (), "context": (), "phase": None}
    parts = [p for p in ins.op_name.split("/") if p] if ins.op_name else []
    prim = parts[-1] if parts else ""
    mods, funcs = [], []
    for p in parts[:-1]:
        if _TRANSFORM.match(p):
            inner = re.sub(r"^.*\(", "", p).rstrip(")")
            if p.startswith("jit(") and inner not in ("main",) and "(" not in inner:
                funcs.append(inner)
            continue
        if p in _CONTROL or re.match(r"^(branch|cond|body)_?\d*$", p):
            continue
        mods.append(p)
    cls = next((fn.split(".")[0] for fn, _ in ins.frames if fn.endswith(".__call__")), "")
    root = re.search(r"jvp\(([\w.]+)\)", ins.op_name)
    if root and cls == root.group(1):
        cls = ""  # the root module's own ops: its class names the whole model
    layers = tuple(dict.fromkeys(x for x in (mods[-1] if mods else "", cls) if x))
    ctx: list[str] = [*mods, *funcs]
    if ins.frames:
        fn, fl = ins.frames[0]
        if not fn.endswith(".__call__"):
            ctx.append(fn)
        ctx.append(fl.replace("\\", "/"))
    kernel = "" if is_instruction_kernel(event_name, ins.name) else event_name
    ops = [ins.target, kernel, prim, ins.opcode, *ins.fused, ins.name]
    return {"ops": tuple(o for o in ops if o), "layers": layers, "context": tuple(ctx),
            "phase": jax_phase(ins.op_name) or phase}


def tf_phase(op_name: str) -> str | None:
    """``t_b`` / ``t_u`` / ``t_f`` from a TensorFlow op name (module docstring)."""
    if not op_name:
        return None
    first = op_name.split("/", 1)[0]
    if first == "gradient_tape":
        return "t_b"
    if _OPT_SCOPE.match(first):
        return "t_u"
    return "t_f"


def tf_names(op_name: str, op_type: str = "", model_scope: str | None = None,
             extra_ops: tuple[str, ...] = (), phase: str | None = None) -> dict[str, Any]:
    """Classifier inputs and phase of a TensorFlow op from its name and type.

    ``op_name`` like ``gradient_tape/functional_1/bn1_1/batchnorm/mul``: the ``gradient_tape``
    prefix and the model's own scope (``model_scope``, or Keras's ``functional``/``model``/
    ``sequential``, with an optional ``_N``) are dropped; the remaining scopes are the layers
    (innermost first) and the context; ``ops`` are the type, ``extra_ops`` and the last part.
    """
    parts = [p for p in op_name.split("/") if p]
    phase = tf_phase(op_name) or phase
    ctx = list(parts[:-1])
    if parts and parts[0] == "gradient_tape":
        parts = parts[1:]
    rx = r"^(functional|model|sequential" + (f"|{re.escape(model_scope)}" if model_scope else "") \
        + r")(_\d+)?$"
    if len(parts) > 1 and re.match(rx, parts[0]):
        ctx = [c for c in ctx if c != parts[0]]
        parts = parts[1:]
    layers = tuple(reversed(parts[:-1]))
    ops = tuple(o for o in (op_type, *extra_ops, parts[-1] if parts else "") if o)
    return {"ops": ops, "layers": layers, "context": tuple(ctx), "phase": phase}
