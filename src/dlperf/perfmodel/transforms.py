"""Per-kernel transforms of a traced iteration (:class:`~dlperf.perfmodel.replay.StepTrace`):
each a small named function ``StepTrace -> StepTrace`` that says what it did in
``meta['transforms']``. :func:`~dlperf.perfmodel.replay.simulate` then replays the result.

* :func:`to_gpu`: another GPU, Habitat's wave scaling (Yu et al., ATC'21; ``geoffxy/habitat``
  ``analysis/wave_scaling/roofline.py``) kernel by kernel, the host by a dispatch probe;
* :func:`to_precision`: fp32 <-> bf16 by the kernel's tensor-core eligibility (read off its
  name), its memory-boundness and the mixed-precision casts autocast adds;
* :func:`to_batch`, :func:`interpolate_batch`: another batch size, from two traced batches
  (each kernel group's duration a power law of the batch) or from one;
* :func:`host_speed`: the host scaled by a ratio of host times;
* :func:`to_data_parallel`: DDP's bucketed all-reduces inserted at their gradient-ready ops
  and overlapped with the rest of the backward (WFBP).

What a kernel is, is read from the trace alone (no framework is named): a GEMM or
convolution kernel by its op class and name, its arithmetic precision by its name (cuBLAS,
cuDNN and CUTLASS name the math: ``sgemm``/``ffma`` FP32 SIMT, ``tf32``, ``bf16``/``f16``/
``hmma``/``wgmma`` tensor cores), its roofline position by its FLOPs and bytes where the trace
holds them (XLA kernels, eager matmuls).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import replace

from dlperf.perfmodel.hardware import GpuProfile, waves
from dlperf.perfmodel.replay import DeviceOp, HostLaunch, StepTrace, scale_host

#: Op classes whose kernels are GEMM-like (tensor-core eligible): their compute part scales
#: with the GEMM ceiling, not the clock alone.
GEMM_CLASSES = ("matmul", "convolution", "attention", "recurrent")
#: Kernel-name fragments of GEMM/convolution math (cuBLAS, cuBLASLt ``nvjet``, CUTLASS, cuDNN,
#: XLA's Triton GEMMs, flash attention).
_GEMM_NAME = re.compile(r"gemm|xmma|nvjet|cutlass|implicit_convolve|fprop|dgrad|wgrad|fmha|"
                        r"flash|sdpa|conv|triton_.*mm|__cudnn|cublas", re.I)
#: Kernel-name fragments of the math's precision, in order of precedence.
_PREC_NAME = (
    ("fp32", re.compile(r"sgemm|ffma|simt|_f32f32_f32f32_f32|implicit_convolve_sgemm|"
                        r"engine<float|fft2d|_f32_", re.I)),
    ("tf32", re.compile(r"tf32", re.I)),
    ("bf16", re.compile(r"bf16|f16|hmma|wgmma|s1688|s16816|h884|_h_|hsh|tensorop|tst_", re.I)),
)
#: Habitat's memory-boundness (gamma) of a GEMM-like kernel whose FLOPs and bytes the trace
#: does not hold: mostly compute-bound (Habitat's roofline formula gives 0-0.5 above the ridge
#: point; 0.25 is its middle).
GEMM_GAMMA = 0.25
#: A kernel's fixed cost (launch, ramp-up, drain) that neither bandwidth nor FLOPs scale: the
#: 5th-10th percentile of the 142,456 kernel durations of calibration2.db's replayed
#: iterations is 0.83-0.96 us (median 2.6 us).
KERNEL_FLOOR_S = 1.0e-6


def is_gemm(op: DeviceOp) -> bool:
    """True for a GEMM-like kernel: a GEMM op class with GEMM math in its name (a cast or
    transpose kernel launched by a matmul op is not one)."""
    return (op.kind == "kernel" and (op.op_class in GEMM_CLASSES)
            and bool(_GEMM_NAME.search(op.name)))


def math_precision(op: DeviceOp, default: str) -> str:
    """The arithmetic precision a GEMM-like kernel runs at, from its name (``fp32`` SIMT,
    ``tf32`` or ``bf16`` tensor cores), else ``default``."""
    for prec, rx in _PREC_NAME:
        if rx.search(op.name):
            return prec
    return default


def _ridge(gpu: GpuProfile, precision: str) -> float:
    peak = gpu.gemm(precision) or gpu.gemm("fp32") or 1.0
    return peak / gpu.bandwidth_bytes_per_s


def gamma(op: DeviceOp, gpu: GpuProfile, precision: str) -> float:
    """Memory-boundness of ``op`` in [0, 1] (Habitat's gamma): 1 for copies, memsets and
    kernels without FLOPs; from the arithmetic intensity ``I = flops / bytes`` against the
    destination's ridge point ``R`` where the trace holds both (``1 - 0.5 I / R`` below it,
    ``0.5 R / I`` above); :data:`GEMM_GAMMA` for other GEMM-like kernels; 1 otherwise."""
    if op.kind != "kernel":
        return 1.0
    if op.flops is not None and op.bytes and op.flops > 0:
        r = _ridge(gpu, math_precision(op, precision))
        i = op.flops / op.bytes
        return 1.0 - 0.5 * i / r if i <= r else 0.5 * r / i
    if op.flops == 0 and op.bytes:
        return 1.0
    return GEMM_GAMMA if is_gemm(op) else 1.0


def _compute_factor(op: DeviceOp, src: GpuProfile, dst: GpuProfile, precision: str) -> float:
    """Source time / destination time of the compute part: the GEMM ceilings' ratio for a
    GEMM-like kernel, else clock x (waves where the launch geometry is known, else SMs)."""
    if is_gemm(op):
        p = math_precision(op, precision)
        a, b = src.gemm(p), dst.gemm(p)
        if a and b:
            return a / b
    clock = src.clock_mhz / dst.clock_mhz
    if op.blocks and op.threads_per_block:
        w_s = waves(op.blocks, op.threads_per_block, op.registers, op.shared_memory, src)
        w_d = waves(op.blocks, op.threads_per_block, op.registers, op.shared_memory, dst)
        return clock * w_d / w_s
    return clock * src.sms / dst.sms


def kernel_on_gpu(op: DeviceOp, src: GpuProfile, dst: GpuProfile, precision: str) -> float:
    """Duration of ``op`` (traced on ``src``) on ``dst`` (s): above :data:`KERNEL_FLOOR_S`,
    ``t x (bandwidth_src / bandwidth_dst)^gamma x compute_factor^(1 - gamma)`` (Habitat's
    roofline wave scaling, with the GEMM ceilings' ratio as the compute factor of GEMM-like
    kernels and the waves' ratio where the geometry is known)."""
    g = gamma(op, dst, precision)
    bw = src.bandwidth_bytes_per_s / dst.bandwidth_bytes_per_s
    c = _compute_factor(op, src, dst, precision)
    floor = min(op.dur_s, KERNEL_FLOOR_S)
    return floor + (op.dur_s - floor) * bw ** g * c ** (1.0 - g)


def host_speed(step: StepTrace, ratio: float) -> StepTrace:
    """The host's work scaled by ``ratio`` (the target host's time / the source's)."""
    return scale_host(step, ratio).with_note(f"host x{ratio:.3f}")


def to_gpu(step: StepTrace, src: GpuProfile, dst: GpuProfile,
           host_ratio: float | None = None) -> StepTrace:
    """``step`` (traced on ``src``) moved to ``dst``: every kernel by :func:`kernel_on_gpu`,
    the host by ``host_ratio`` (the target machine's host time / the source's for the same
    dispatch work: :func:`dlperf.perfmodel.retarget.host_ratio`); None leaves the host as it
    is, and says so. A datasheet ceiling of ``dst`` is first scaled to the share of its
    datasheet that ``src`` measured (:func:`~dlperf.perfmodel.hardware.achieved_like`).

    The host is not scaled by the Python-loop host-speed probe: across the torch eager points
    of the H200 files the probe explains little of the host dispatch time (correlation 0.19 of
    the logs within a configuration, 100 points; the probe reads 72-97 or 132-203 ns on one
    machine in no order)."""
    from dlperf.perfmodel.hardware import achieved_like

    dst = achieved_like(dst, src)
    prec = str(step.meta.get("precision") or "fp32")
    ops = tuple(replace(o, dur_s=kernel_on_gpu(o, src, dst, prec)) for o in step.ops)
    out = replace(step, ops=ops).with_note(f"gpu {src.name} -> {dst.name}",
                                           device_name=dst.device_name or dst.name)
    if host_ratio is None:
        return out.with_note("host unscaled (no dispatch probe of both machines)")
    return scale_host(out, host_ratio).with_note(f"host x{host_ratio:.3f} (dispatch probe)")


# --- precision ------------------------------------------------------------------------------

#: Time ratio bf16 / fp32 of a memory-bound (non-GEMM) kernel above the floor, by op class:
#: activations and their gradients move half the bytes in bf16; normalisation, softmax and
#: losses run in fp32 under autocast (PyTorch's autocast op lists) on bf16 inputs; the
#: optimizer updates fp32 master weights (unchanged). Chosen on the development pairs of
#: calibration2.db (benchmarks/replay_validate.py, "precision"): elementwise 0.5 and 0.7,
#: normalisation 0.75 and 1.0 were tried (fp32 -> bf16 MdAPE 10.0-11.0%, bf16 -> fp32
#: 24.5-26.5%).
MEMORY_RATIO = {"elementwise": 0.5, "pooling": 0.5, "normalisation": 0.75, "loss": 1.0,
                "optimizer": 1.0, "memory_copy": 0.5, "embedding": 0.5}
#: A bf16 GEMM reaches a smaller share of its (16x larger) ceiling than an fp32 SIMT GEMM of
#: its: the compute part of a GEMM-like kernel scales by ``ceiling ratio / BF16_GEMM_SHARE``.
#: Chosen on the development pairs (benchmarks/replay_validate.py, "precision"; fp32 -> bf16
#: MdAPE 16.4 / 10.0 / 13.9 / 16.2% at 0.2 / 0.35 / 0.6 / 1.0).
BF16_GEMM_SHARE = 0.35


def kernel_to_precision(op: DeviceOp, src: str, dst: str, gpu: GpuProfile) -> float:
    """Duration of ``op`` (traced at precision ``src``) at precision ``dst`` on ``gpu``."""
    if src == dst:
        return op.dur_s
    floor = min(op.dur_s, KERNEL_FLOOR_S)
    body = op.dur_s - floor
    if is_gemm(op):
        p_src = math_precision(op, src)
        p_dst = "bf16" if dst in ("bf16", "fp16") else ("tf32" if p_src == "tf32" else "fp32")
        a, b = gpu.gemm(p_src), gpu.gemm(p_dst)
        if not (a and b):
            return op.dur_s
        c = a / b
        share = BF16_GEMM_SHARE
        c = c / share if p_dst == "bf16" and p_src != "bf16" else (
            c * share if p_src == "bf16" and p_dst != "bf16" else c)
        g = gamma(op, gpu, p_src)
        mem = 0.5 if p_dst == "bf16" and p_src != "bf16" else (2.0 if p_src == "bf16" else 1.0)
        return floor + body * (g * mem + (1 - g) * c)
    r = MEMORY_RATIO.get(op.op_class or "", 0.5)
    if dst in ("bf16", "fp16") and src not in ("bf16", "fp16"):
        return floor + body * r
    if src in ("bf16", "fp16") and dst not in ("bf16", "fp16"):
        return floor + body / r
    return op.dur_s


def to_precision(step: StepTrace, dst: str, gpu: GpuProfile, *,
                 cast_host_s: float = 0.0) -> StepTrace:
    """``step`` at precision ``dst`` on ``gpu``: each kernel by :func:`kernel_to_precision`;
    going to bf16 from fp32, autocast's casts of the GEMM operands are added (one cast kernel
    of :data:`KERNEL_FLOOR_S` plus its bytes per GEMM op, issued with it) with
    ``cast_host_s`` of host work each; going to fp32, the trace's cast kernels are dropped.
    """
    src = str(step.meta.get("precision") or "fp32")
    ops = [replace(o, dur_s=kernel_to_precision(o, src, dst, gpu)) for o in step.ops]
    launches = list(step.launches)
    note = f"precision {src} -> {dst}"
    if dst in ("bf16", "fp16") and src not in ("bf16", "fp16"):
        out: list[DeviceOp] = []
        added = 0
        for o in ops:
            if is_gemm(o) and o.phase in (None, "t_f"):
                nbytes = (o.bytes or 0.0) * 0.75  # read fp32 (4 B), write bf16 (2 B) of 4+2
                cast = replace(o, dur_s=KERNEL_FLOOR_S + nbytes / gpu.bandwidth_bytes_per_s,
                               name="cast (autocast)", op_class="elementwise", after=(),
                               flops=0.0, bytes=nbytes, grid=None, block=None)
                out.append(cast)
                added += 1
            out.append(o)
        ops = _reindex(step.ops, out)
        if added and cast_host_s:
            per = cast_host_s * added / max(1, len(launches))
            launches = [HostLaunch(h.before_s + per, h.call_s) for h in launches]
        note += f", +{added} casts"
    elif src in ("bf16", "fp16") and dst not in ("bf16", "fp16"):
        keep = [o for o in ops if not _is_cast(o)]
        ops = _reindex(step.ops, keep)
        note += f", -{len(step.ops) - len(keep)} casts"
    return replace(step, ops=tuple(ops), launches=tuple(launches)).with_note(note,
                                                                              precision=dst)


def _is_cast(op: DeviceOp) -> bool:
    """A dtype conversion kernel launched by a GEMM op (autocast's cast of an operand)."""
    return (op.op_class in GEMM_CLASSES and not is_gemm(op)
            and ("copy_kernel" in op.name or "cast" in op.name.lower()))


def _reindex(old: Sequence[DeviceOp], new: Sequence[DeviceOp]) -> list[DeviceOp]:
    """``new`` (a subsequence of ``old`` with inserted ops) with cross-lane dependencies
    dropped where the op they named is gone and renumbered otherwise."""
    pos = {id(o): i for i, o in enumerate(new)}
    idx_of_old = {i: pos.get(id(o)) for i, o in enumerate(old)}
    out = []
    for o in new:
        after = tuple(j for j in (idx_of_old.get(a) for a in o.after) if j is not None)
        out.append(o if after == o.after else replace(o, after=after))
    return out


# --- batch size -----------------------------------------------------------------------------

#: The part of a kernel's time that does not grow with the batch (launch, ramp-up, drain, the
#: latency of a kernel too small to fill the GPU), chosen on the development rows of
#: calibration2.db (benchmarks/replay_validate.py, batch from one trace, ratios 1/2-2):
#: MdAPE XLA / torch 16.2 / 4.7% at 1 us, 10.8 / 4.5% at 2, 8.9 / 4.3% at 3, 9.7 / 3.8% at 5,
#: 10.0 / 4.1% at 8 us.
BATCH_FLOOR_S = 3e-6

def batch_scale_one(op: DeviceOp, b_src: int, b_dst: int, gpu: GpuProfile) -> float:
    """Duration of ``op`` at batch ``b_dst`` from one trace at ``b_src``: a kernel of the
    optimizer (phase ``t_u`` or op class ``optimizer``) keeps its time; any other kernel's
    time above :data:`BATCH_FLOOR_S` scales with the batch.

    Wave quantisation (the blocks scaled with the batch, the time with the waves on ``gpu``,
    a launch under one wave kept as it is) was tried and lost on the development rows of
    calibration2.db (torch eager device-bound points, batch ratios 1/4-4: MdAPE 8.7% with
    waves, 10.7% keeping under-filled launches constant, 5.9% proportional): the libraries
    pick other tiles and grids at another batch, so a traced grid does not carry over.
    ``gpu`` is kept for that variant's signature (the waves are in
    :func:`dlperf.perfmodel.hardware.waves`)."""
    if op.phase == "t_u" or op.op_class == "optimizer":
        return op.dur_s
    floor = min(op.dur_s, BATCH_FLOOR_S)
    return floor + (op.dur_s - floor) * b_dst / b_src


def to_batch(step: StepTrace, b_dst: int, gpu: GpuProfile) -> StepTrace:
    """``step`` at batch ``b_dst`` from this one trace (:func:`batch_scale_one` per kernel;
    the host's work does not depend on the batch)."""
    b_src = int(step.meta.get("batch_size") or 0)
    if b_src <= 0:
        raise ValueError("the trace's batch size is unknown (meta['batch_size'])")
    ops = tuple(replace(o, dur_s=batch_scale_one(o, b_src, b_dst, gpu)) for o in step.ops)
    return replace(step, ops=ops).with_note(f"batch {b_src} -> {b_dst} (one trace)",
                                            batch_size=b_dst)


def interpolate_batch(a: StepTrace, b: StepTrace, b_dst: int) -> StepTrace:
    """The iteration at batch ``b_dst`` from traces ``a`` and ``b`` at two other batch sizes:
    the trace whose batch is nearest ``b_dst`` is the template, and each of its kernels'
    duration is a line through the batch (log-log, through both traces' summed durations of
    the kernel's (op class, phase, name) group; where the other trace lacks the group, by
    :func:`batch_scale_one`-like proportionality above the floor)."""
    ba, bb = int(a.meta["batch_size"]), int(b.meta["batch_size"])
    if ba == bb:
        raise ValueError("two traces of the same batch size give no line")
    near, far = (a, b) if abs(math.log(b_dst / ba)) <= abs(math.log(b_dst / bb)) else (b, a)
    bn, bf = int(near.meta["batch_size"]), int(far.meta["batch_size"])

    def key(o: DeviceOp) -> tuple[str | None, str | None, str]:
        return (o.op_class, o.phase, o.name)

    def sums(st: StepTrace) -> dict[tuple[str | None, str | None, str], float]:
        out: dict[tuple[str | None, str | None, str], float] = {}
        for o in st.ops:
            out[key(o)] = out.get(key(o), 0.0) + max(o.dur_s - BATCH_FLOOR_S, 0.0)
        return out

    sn, sf = sums(near), sums(far)
    # exponent per group, slope of log(time above floor) against log(batch)
    cls_n: dict[tuple[str | None, str | None], float] = {}
    cls_f: dict[tuple[str | None, str | None], float] = {}
    for k, v in sn.items():
        cls_n[k[:2]] = cls_n.get(k[:2], 0.0) + v
    for k, v in sf.items():
        cls_f[k[:2]] = cls_f.get(k[:2], 0.0) + v
    lr = math.log(bf / bn)

    def slope(k: tuple[str | None, str | None, str]) -> float:
        if sn.get(k, 0) > 0 and sf.get(k, 0) > 0:
            return math.log(sf[k] / sn[k]) / lr
        c = k[:2]
        if cls_n.get(c, 0) > 0 and cls_f.get(c, 0) > 0:
            return math.log(cls_f[c] / cls_n[c]) / lr
        return 0.0 if (k[1] == "t_u" or k[0] == "optimizer") else 1.0

    t = math.log(b_dst / bn)
    ops = []
    for o in near.ops:
        floor = min(o.dur_s, BATCH_FLOOR_S)
        s = max(-0.5, min(1.5, slope(key(o))))
        ops.append(replace(o, dur_s=floor + (o.dur_s - floor) * math.exp(s * t)))
    return replace(near, ops=tuple(ops)).with_note(
        f"batch {bn} -> {b_dst} (interpolated with the trace at {bf})", batch_size=b_dst)


# --- data parallel --------------------------------------------------------------------------

#: The lane of the inserted all-reduces (a stream of its own, as NCCL's and gloo's are).
COMM_LANE = -1


def to_data_parallel(step: StepTrace, bucket_bytes: Sequence[float],
                     allreduce_s: Callable[[float], float]) -> StepTrace:
    """``step`` (one device) with DDP's gradient all-reduces inserted, wait-free
    backpropagation (WFBP, Zhang et al. 2017; PyTorch DDP, Li et al. VLDB 2020):

    * bucket ``k`` (``bucket_bytes`` in reduction order: DDP fills buckets in reverse
      parameter order, which is the order backward produces gradients) is ready when the
      backward (phase ``t_b``) has run the share ``sum(bytes[:k+1]) / sum(bytes)`` of its
      device time: the first backward op past that share is its gradient-ready op;
    * its all-reduce (``allreduce_s(bytes)``: a measured all-reduce sweep or the link model,
      :mod:`dlperf.perfmodel.comm`) runs on :data:`COMM_LANE` after that op and after the
      previous bucket's all-reduce;
    * the ops after the backward (the optimizer) wait for the last all-reduce.

    Raises:
        ValueError: no bucket, or no backward op in the trace.
    """
    if not bucket_bytes:
        raise ValueError("no gradient bucket to all-reduce")
    ops = list(step.ops)
    back = [i for i, o in enumerate(ops) if o.phase == "t_b"]
    if not back:
        raise ValueError("the trace has no backward op (phase t_b): the gradients' ready times "
                         "are unknown")
    total_b = sum(ops[i].dur_s for i in back) or 1.0
    total_bytes = float(sum(bucket_bytes))
    ready: list[int] = []
    acc, j, done = 0.0, 0, 0.0
    for nbytes in bucket_bytes:
        done += nbytes
        target = done / total_bytes * total_b
        while j < len(back) - 1 and acc + ops[back[j]].dur_s < target - 1e-15:
            acc += ops[back[j]].dur_s
            j += 1
        ready.append(back[j])
    # insert each all-reduce right after its ready op; renumber the dependencies
    inserts: dict[int, list[DeviceOp]] = {}
    for k, (nbytes, i) in enumerate(zip(bucket_bytes, ready)):
        inserts.setdefault(i, []).append(DeviceOp(
            lane=COMM_LANE, dur_s=allreduce_s(nbytes), kind="collective",
            name=f"all-reduce bucket {k}", op_class="communication", op="all_reduce",
            phase="t_b", launch=ops[i].launch, after=(i,), bytes=nbytes))
    new: list[DeviceOp] = []
    pos: dict[int, int] = {}
    comm_idx: list[int] = []
    for i, o in enumerate(ops):
        pos[i] = len(new)
        new.append(o)
        for c in inserts.get(i, []):
            comm_idx.append(len(new))
            new.append(c)
    out: list[DeviceOp] = []
    last_back = max(back)
    for n, o in enumerate(new):
        if o.lane == COMM_LANE:
            out.append(replace(o, after=(pos[o.after[0]],)))
            continue
        old = next(i for i, p in pos.items() if p == n)
        after = tuple(pos[a] for a in o.after)
        if old > last_back and o.phase != "t_b":
            after = (*after, comm_idx[-1])
        out.append(replace(o, after=after))
    return replace(step, ops=tuple(out)).with_note(
        f"data parallel: {len(bucket_bytes)} buckets, {total_bytes / 2**20:.1f} MiB all-reduced")
