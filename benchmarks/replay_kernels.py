"""Kernel-level evidence for the timeline replay's transforms (docs/replay.md, "Kernel-level
evidence"), from the stored H200 timelines of the *development* models only
(benchmarks/results/split.json): what part of a kernel's time moves with its bytes, with the
precision and with the batch. Every constant of :mod:`dlperf.perfmodel.transforms` that this
prints is chosen here.

1. **Bandwidth utilisation** ``U = bytes / (duration x measured bandwidth)`` of the non-GEMM
   kernels whose trace holds their bytes, time-weighted by op class: the default
   memory-boundness (:data:`~dlperf.perfmodel.transforms.gpu.MEMORY_SHARE`) of a kernel whose
   trace holds no bytes.
2. **The bytes response**: the same torch eager kernel (same operator, phase and occurrence)
   traced in fp32 and in bf16 at the same batch: bf16 halves an activation's bytes, which for
   the memory part of a kernel is the same change as doubling the bandwidth. Three predictions
   of ``t_bf16 / t_fp32`` are scored by median |log error|: the whole kernel at half
   (Habitat's gamma = 1 for a kernel without FLOPs), the op-class ratio, and ``0.5^U`` (the
   kernel's own utilisation as its memory-boundness).
3. **Precision ratios by op class** from the same matched pairs (t_bf16 / t_fp32 by class and
   duration), the fixed part and ratio of the elementwise kernels, and each class's summed
   bf16 / fp32 time over the operators present in both precisions (a bf16 operator may launch
   a kernel more: a loss's upcast of the logits).
4. **GEMM latency**: ``t = t0 + FLOPs / ceiling`` for the GEMM-like kernels with FLOPs, the
   median implied ``t0`` by framework and math precision.
5. **GEMM shares and operator groups at bf16**: the GEMM kernels of the same torch eager
   operator, phase and occurrence in fp32 and bf16 (groups of equal kernel count), summed
   bf16 time predicted / measured by op class and, for matmuls, by alignment
   (:mod:`~dlperf.perfmodel.gemmshape`) at several bf16 shares
   (:data:`~dlperf.perfmodel.transforms.precision.BF16_GEMM_SHARE_BY_CLASS`, ``_BY_ALIGN``);
   the mean |log(predicted / measured)| of each traced point's summed GEMM time by class at
   several fixed parts and shares (``GEMM_FIXED_S_BY_CLASS``); and the summed time of the
   convolutions' helper kernels, their framework kernels and batch norm's backward in both
   precisions (torch eager and XLA), which ``drop_conv_helpers`` and
   ``BATCH_NORM_BACKWARD_BF16`` rest on.
6. **Autocast's host**: each torch eager model's host level at bf16 over its host level at
   fp32 (:func:`~dlperf.perfmodel.replay.host_level`: its host-bound steps, else its
   probes) and its median untraced probes' ratio
   (:data:`~dlperf.perfmodel.transforms.autocast.AUTOCAST_HOST`: the median over models).
7. **Queue gaps**: the device's gap between kernels queued back to back on a stream
   (:func:`dlperf.perfmodel.replay.queue_gap`), by framework and mode.
8. **Weights**: the bf16 traces' weight casts (autocast's and autograd's in torch eager,
   XLA's ``convert`` fusions) against ``parameters x 6 B / bandwidth``
   (:data:`~dlperf.perfmodel.transforms.weights.WEIGHT_CAST_BYTES`), and the GEMMs' summed
   time against ``3 x parameters x element size / bandwidth``
   (:func:`~dlperf.perfmodel.transforms.batch.gemm_batch_factor`), by point.
9. **Autocast's casts**: each torch eager point traced in both precisions at one batch, the
   bf16 trace's cast kernels (PyTorch's ``bfloat16_copy_kernel_cuda`` and
   ``direct_copy_kernel_cuda`` launched by a GEMM operator, a loss, ``ToCopyBackward0`` or a
   backward ``aten::to``) against what the precision transform adds from the fp32 trace
   (:func:`~dlperf.perfmodel.transforms.autocast.cast_times` for the weights,
   :func:`~dlperf.perfmodel.transforms.autocast.activation_casts` for the activations), and
   the loss's own kernels at bf16 / fp32
   (:data:`~dlperf.perfmodel.transforms.autocast.LOSS_KERNELS_BF16`).
10. **GEMMs from bf16 to fp32**: each point traced in both precisions at one batch (every
    framework and mode), its GEMM-like kernels' summed time at bf16 and fp32 and their
    ratio, the roofline ``R`` (:func:`~dlperf.perfmodel.transforms.weights.gemm_roofline_s`:
    3 x params x element / bandwidth + FLOPs / ceiling) at each precision over that time (the
    share of its ceiling the step's GEMMs reach:
    :data:`~dlperf.perfmodel.transforms.precision.FP32_GEMM_EFFICIENCY`,
    :func:`~dlperf.perfmodel.transforms.precision.gemm_roofline_cap`), the convolutions' GEMMs
    alone at both precisions (their ratio against the ceilings' ratio x the share 0.6:
    ``GEMM_FIXED_S_FROM_BF16``) and their fp32 helper kernels over their fp32 GEMMs
    (:data:`~dlperf.perfmodel.transforms.precision.GEMM_HELPERS`); and each JAX point's
    normalisation kernels at bf16 / fp32 by phase
    (:data:`~dlperf.perfmodel.transforms.precision.PRECISION_CLASS_BY_FRAMEWORK`).

    PYTHONPATH=src python benchmarks/replay_kernels.py [--db FILE ...] [--ceilings FILE ...]

Several ``--db`` files are one pool; ``--ceilings`` gives the files whose measured ceilings make
the GPU's profile (default every H200 file). The H100's development points:
``--db benchmarks/results/h100/suite.db --db benchmarks/results/h100/suite_extra.db --db
benchmarks/results/h100/suite_jax.db --ceilings benchmarks/results/h100/calibrate.db``.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

from dlperf.perfmodel import hardware, records, replay
from dlperf.perfmodel.transforms.autocast import (
    DOWNCAST_BYTES,
    UPCAST_BYTES,
    activation_casts,
    cast_times,
    drop_conv_helpers,
    is_conv_helper,
)
from dlperf.perfmodel.transforms.kernels import (
    GEMM_CLASSES,
    KERNEL_FLOOR_S,
    is_gemm,
    is_weight_cast,
    math_precision,
)
from dlperf.perfmodel.transforms.precision import (
    GEMM_FIXED_S,
    PRECISION_RATIO,
    gemm_alignment,
    is_batch_norm_backward,
)
from dlperf.perfmodel.transforms.weights import gemm_roofline_s

ROOT = Path(__file__).resolve().parents[1]
SPLIT = json.loads((ROOT / "benchmarks/results/split.json").read_text())
DURATION_BINS = ((0, 2e-6), (2e-6, 5e-6), (5e-6, 20e-6), (20e-6, math.inf))


def _bin(d: float) -> str:
    for lo, hi in DURATION_BINS:
        if lo <= d < hi:
            return f"{lo * 1e6:.0f}-{hi * 1e6:.0f} us" if hi < math.inf else f">= {lo * 1e6:.0f} us"
    return "?"


def h200_profile() -> hardware.GpuProfile:
    """The H200's profile from every stored H200 result (its measured ceilings: the bandwidth
    of the ``y = 2x`` kernel, 4.23 TB/s, not the datasheet's 4.8)."""
    return profile_of(sorted(str(p) for p in (ROOT / "benchmarks/results/h200").glob("*.db")),
                      "NVIDIA H200")


def profile_of(ceilings: list[str], device_name: str) -> hardware.GpuProfile:
    """``device_name``'s profile from the measured ceilings of the results files
    ``ceilings``."""
    return hardware.profile_from_points(records.load(ceilings).points, device_name)


def utilisation(pairs: list[tuple[Any, replay.StepTrace]], gpu: hardware.GpuProfile) -> str:
    acc: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0.0])
    for _p, st in pairs:
        for o in st.ops:
            if o.kind != "kernel" or is_gemm(o) or not o.bytes or o.dur_s <= 0:
                continue
            u = min(1.0, o.bytes / (o.dur_s * gpu.bandwidth_bytes_per_s))
            a = acc[str(o.op_class)]
            a[0] += u * o.dur_s
            a[1] += o.dur_s
            a[2] += 1
    out = ["| op class | kernels with bytes | their time (ms) | time-weighted U |",
           "|---|---:|---:|---:|"]
    for c, (uw, t, n) in sorted(acc.items(), key=lambda x: -x[1][1]):
        out.append(f"| {c} | {n:.0f} | {t * 1e3:.1f} | {uw / t:.2f} |")
    allw = sum(a[0] for a in acc.values()) / sum(a[1] for a in acc.values())
    out.append(f"| all | {sum(a[2] for a in acc.values()):.0f} | "
               f"{sum(a[1] for a in acc.values()) * 1e3:.1f} | {allw:.2f} |")
    return "\n".join(out)


def matched_precision_pairs(pairs: list[tuple[Any, replay.StepTrace]]
                            ) -> list[tuple[replay.DeviceOp, replay.DeviceOp]]:
    """(fp32 kernel, bf16 kernel) of the same torch eager operator, phase and occurrence at the
    same batch, where both traces hold the same number of the group's kernels."""
    by = {(p.model, p.framework, p.mode, p.precision, p.batch_size): st for p, st in pairs
          if p.compile_mode == "default" and p.framework == "torch"}
    out = []
    for k, st in by.items():
        if k[3] != "fp32" or (*k[:3], "bf16", k[4]) not in by:
            continue
        other = by[(*k[:3], "bf16", k[4])]

        def groups(s: replay.StepTrace) -> dict[tuple, list[replay.DeviceOp]]:
            g: dict[tuple, list[replay.DeviceOp]] = collections.defaultdict(list)
            for o in s.ops:
                if o.kind == "kernel" and not is_gemm(o):
                    g[(o.op, o.phase, o.op_class)].append(o)
            return g

        g32, g16 = groups(st), groups(other)
        for key, l32 in g32.items():
            l16 = g16.get(key)
            if l16 and len(l16) == len(l32) and key[2] not in GEMM_CLASSES:
                out += list(zip(l32, l16))
    return out


def bytes_response(mp: list, gpu: hardware.GpuProfile) -> str:
    rows = [(a, b) for a, b in mp if a.bytes and a.dur_s > 1.5e-6]

    def err(f: Any) -> float:
        return statistics.median(abs(math.log(f(a) / (b.dur_s / a.dur_s))) for a, b in rows)

    u = lambda a: min(1.0, a.bytes / (a.dur_s * gpu.bandwidth_bytes_per_s))  # noqa: E731
    return (f"{len(rows)} matched kernel pairs with bytes (fp32 kernel > 1.5 us); median "
            f"|log(predicted / measured t_bf16/t_fp32)|: the whole kernel at half "
            f"{err(lambda a: 0.5):.3f}, the op-class ratio of the precision transform "
            f"{err(lambda a: PRECISION_RATIO.get(a.op_class or '', (0, 0.5))[1]):.3f},"
            f" 0.5^U {err(lambda a: 0.5 ** u(a)):.3f}")


def precision_ratios(mp: list) -> str:
    out = ["| op class | fp32 kernel duration | pairs | sum t_bf16 / sum t_fp32 | median ratio |",
           "|---|---|---:|---:|---:|"]
    acc: dict[tuple[str, str], list] = collections.defaultdict(list)
    for a, b in mp:
        acc[(str(a.op_class), _bin(a.dur_s))].append((a.dur_s, b.dur_s))
    for (c, bn), v in sorted(acc.items()):
        if len(v) < 5:
            continue
        out.append(f"| {c} | {bn} | {len(v)} | {sum(y for _, y in v) / sum(x for x, _ in v):.3f}"
                   f" | {statistics.median(y / x for x, y in v):.3f} |")
    ew = [(a.dur_s, b.dur_s) for a, b in mp if a.op_class == "elementwise"]
    best = None
    for f_us in (0.5, 1, 2, 3, 4, 5, 6, 8):
        for r in (0.4, 0.5, 0.55, 0.6, 0.65, 0.7, 0.8):
            f = f_us * 1e-6
            e = sum(abs(min(x, f) + max(0.0, x - f) * r - y) for x, y in ew)
            if best is None or e < best[0]:
                best = (e, f_us, r)
    tot = sum(y for _, y in ew)
    if best:
        out.append(f"\nelementwise: t_bf16 = min(t, F) + (t - F) x r fits best (sum |error| "
                   f"{best[0] / tot:.1%} of their bf16 time) at F = {best[1]} us, r = {best[2]}")
    return "\n".join(out)


def operator_ratios(pairs: list[tuple[Any, replay.StepTrace]]) -> str:
    """Each non-GEMM op class's summed bf16 / fp32 time over the torch eager operators
    (operator, phase, class) present in both precisions of a point, whatever their kernel
    counts."""
    by = {(p.model, p.precision, p.batch_size): st for p, st in pairs
          if (p.framework, p.mode, p.compile_mode) == ("torch", "eager", "default")}
    acc: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0.0])
    for (m, prec, b), st in by.items():
        other = by.get((m, "bf16", b))
        if prec != "fp32" or other is None:
            continue

        def groups(s_: replay.StepTrace) -> dict[tuple, float]:
            g: dict[tuple, float] = collections.defaultdict(float)
            for o in s_.ops:
                if o.kind == "kernel" and not is_gemm(o) and \
                        not is_batch_norm_backward(o) and \
                        not is_conv_helper(o):
                    g[(o.op, o.phase, o.op_class)] += o.dur_s
            return g

        g32, g16 = groups(st), groups(other)
        for k, t in g32.items():
            if k in g16:
                a = acc[str(k[2])]
                a[0] += t
                a[1] += g16[k]
                a[2] += 1
    out = ["| op class | operators | fp32 (ms) | bf16 (ms) | bf16 / fp32 |",
           "|---|---:|---:|---:|---:|"]
    for c, (t32, t16, n) in sorted(acc.items(), key=lambda x: -x[1][0]):
        out.append(f"| {c} | {n:.0f} | {t32 * 1e3:.2f} | {t16 * 1e3:.2f} | {t16 / t32:.3f} |")
    return "\n".join(out)


def gemm_latency(pairs: list[tuple[Any, replay.StepTrace]], gpu: hardware.GpuProfile) -> str:
    acc: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    for p, st in pairs:
        for o in st.ops:
            if not is_gemm(o) or not o.flops:
                continue
            mp = math_precision(o, str(p.precision))
            peak = gpu.gemm(mp)
            if not peak:
                continue
            t0 = o.dur_s - o.flops / peak
            if t0 >= 0:  # a kernel faster than FLOPs / ceiling is one of several of its op
                acc[(p.framework, mp)].append(t0)
    out = ["| framework | math precision | kernels | median t - FLOPs / ceiling (us) | p25 |",
           "|---|---|---:|---:|---:|"]
    for (fw, mp), v in sorted(acc.items()):
        v.sort()
        out.append(f"| {fw} | {mp} | {len(v)} | {statistics.median(v) * 1e6:.1f} | "
                   f"{v[len(v) // 4] * 1e6:.1f} |")
    return "\n".join(out)


def _share_group(o: replay.DeviceOp) -> str:
    if o.op_class != "matmul":
        return str(o.op_class)
    a = gemm_alignment(o)
    return "matmul, " + ("figures unknown" if a is None else f"aligned to {a}")


def gemm_shares(pairs: list[tuple[Any, replay.StepTrace]], gpu: hardware.GpuProfile) -> str:
    by = {(p.model, p.mode, p.precision, p.batch_size): st for p, st in pairs
          if p.framework == "torch" and p.mode == "eager" and p.compile_mode == "default"}
    kp: list[tuple[str, float, float]] = []
    points: list[tuple[str, list[replay.DeviceOp], float]] = []
    for k, st in by.items():
        other = by.get((k[0], k[1], "bf16", k[3]))
        if k[2] != "fp32" or other is None:
            continue

        def groups(s: replay.StepTrace) -> dict[tuple, list[replay.DeviceOp]]:
            g: dict[tuple, list[replay.DeviceOp]] = collections.defaultdict(list)
            for o in s.ops:
                if is_gemm(o):
                    g[(o.op_class, o.op, o.phase)].append(o)
            return g

        g32, g16 = groups(st), groups(other)
        for key, l32 in g32.items():
            if len(g16.get(key, [])) == len(l32):
                kp += [(_share_group(a), a.dur_s, b.dur_s) for a, b in zip(l32, g16[key])]
        for cls in GEMM_CLASSES:
            k32 = [o for o in st.ops if is_gemm(o) and o.op_class == cls]
            t16 = sum(o.dur_s for o in other.ops if is_gemm(o) and o.op_class == cls)
            if k32 and t16 > 0:
                points.append((cls, k32, t16))
    c0 = (gpu.gemm("fp32") or 1.0) / (gpu.gemm("bf16") or 1.0)
    f = GEMM_FIXED_S
    shares = (0.15, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0)
    out = ["| group | kernel pairs | fp32 (ms) | bf16 (ms) | predicted / measured bf16 at "
           "share " + " / ".join(f"{x:g}" for x in shares) + " |", "|---|---:|---:|---:|---|"]
    for grp in sorted({c for c, _, _ in kp}):
        v = [(a, b) for c, a, b in kp if c == grp]
        meas = sum(b for _, b in v)
        preds = [sum(min(a, f) + max(0.0, a - f) * c0 / sh for a, _ in v) / meas for sh in shares]
        out.append(f"| {grp} | {len(v)} | {sum(a for a, _ in v) * 1e3:.1f} | {meas * 1e3:.1f} | "
                   + " / ".join(f"{x:.2f}" for x in preds) + " |")
    out += ["", "| op class | points | mean abs log(predicted / measured) of the summed GEMM "
            "time at fixed part (us) x share |", "|---|---:|---|"]
    grid = {"convolution": ((3, 0.6), (5, 0.6), (8, 0.6), (8, 0.7), (10, 0.7)),
            "attention": ((3, 0.4), (3, 0.5), (6, 0.4), (6, 0.5), (8, 0.5)),
            "recurrent": ((3, 0.3), (3, 0.4), (6, 0.4))}
    for cls, cands in grid.items():
        v = [(k32, t16) for c, k32, t16 in points if c == cls]
        if not v:
            continue
        cells = []
        for fx, sh in cands:
            e = [abs(math.log(sum(min(o.dur_s, fx * 1e-6) + max(0.0, o.dur_s - fx * 1e-6)
                                  * c0 / sh for o in k32) / t16)) for k32, t16 in v]
            cells.append(f"{fx} x {sh}: {sum(e) / len(e):.3f}")
        out.append(f"| {cls} | {len(v)} | " + "; ".join(cells) + " |")
    out += ["", "| framework | kernels | fp32 (ms, kernels) | bf16 (ms, kernels) | ratio |",
            "|---|---|---:|---:|---:|"]
    every = {(p.model, p.framework, p.mode, p.precision, p.batch_size): st for p, st in pairs
             if p.compile_mode == "default" and p.mode != "graph"}

    def framework_conv(o: replay.DeviceOp) -> bool:
        return (o.kind == "kernel" and o.op_class == "convolution"
                and not is_gemm(o) and not is_conv_helper(o))

    for fw in ("torch", "jax"):
        for label, sel in (("convolutions' library helpers", is_conv_helper),
                           ("convolutions' framework kernels", framework_conv),
                           ("batch norm backward", is_batch_norm_backward)):
            t32 = t16 = n32 = n16 = 0.0
            for k, st in every.items():
                other = every.get((*k[:3], "bf16", k[4]))
                if k[1] != fw or k[3] != "fp32" or other is None:
                    continue
                a = [o.dur_s for o in st.ops if sel(o)]
                b = [o.dur_s for o in other.ops if sel(o)]
                t32, n32, t16, n16 = t32 + sum(a), n32 + len(a), t16 + sum(b), n16 + len(b)
            if t32:
                out.append(f"| {fw} | {label} | {t32 * 1e3:.2f} ({n32:.0f}) | "
                           f"{t16 * 1e3:.2f} ({n16:.0f}) | {t16 / t32:.3f} |")
    return "\n".join(out)


def autocast_host(pairs: list[tuple[Any, replay.StepTrace]]) -> str:
    g: dict[str, dict[str, list[tuple[Any, replay.StepTrace]]]] = collections.defaultdict(
        lambda: collections.defaultdict(list))
    for p, st in pairs:
        if (p.framework, p.mode) == ("torch", "eager") and p.host_dispatch_s and \
                p.world_size == 1 and p.data == "synthetic" and p.compile_mode == "default":
            g[p.model][p.precision].append((p, st))
    out = ["| model | fp32 host level (ms) | bf16 host level (ms) | bf16 / fp32 | probes' "
           "bf16 / fp32 (medians) |", "|---|---:|---:|---:|---:|"]
    ratios, probes = [], []
    for m, d in sorted(g.items()):
        if d.get("fp32") and d.get("bf16"):
            lv = {k: replay.host_level([p for p, _ in v], {replay.trace_key(p): st.kernel_s
                                                          for p, st in v})
                  for k, v in d.items()}
            pr = {k: statistics.median(p.host_dispatch_s for p, _ in v) for k, v in d.items()}
            a, b = lv["fp32"] or 0.0, lv["bf16"] or 0.0
            ratios.append(b / a)
            probes.append(pr["bf16"] / pr["fp32"])
            out.append(f"| {m} | {a * 1e3:.2f} | {b * 1e3:.2f} | {b / a:.2f} | "
                       f"{probes[-1]:.2f} |")
    if ratios:
        out.append(f"| median | | | {statistics.median(ratios):.2f} | "
                   f"{statistics.median(probes):.2f} |")
    return "\n".join(out)


def weights(pairs: list[tuple[Any, replay.StepTrace]], gpu: hardware.GpuProfile) -> str:
    bw = gpu.bandwidth_bytes_per_s
    out = ["| framework | model | precision | batch | weight casts forward / backward (ms) | "
           "params x 6 B / bandwidth (ms) | GEMMs (ms) | 3 x params x element / bandwidth "
           "(ms) |", "|---|---|---|---:|---:|---:|---:|---:|"]
    for p, st in sorted(pairs, key=lambda x: (x[0].framework, x[0].model, x[0].precision,
                                              x[0].batch_size)):
        if p.mode == "graph" or not p.params:
            continue
        casts = [o for o in st.ops if is_weight_cast(o)]
        fwd = sum(o.dur_s for o in casts if o.phase in (None, "t_f"))
        bwd = sum(o.dur_s for o in casts if o.phase == "t_b")
        gemm = sum(o.dur_s for o in st.ops if is_gemm(o))
        e = 2 if p.precision in ("bf16", "fp16") else 4
        out.append(f"| {p.framework} | {p.model} | {p.precision} | {p.batch_size} | "
                   f"{fwd * 1e3:.3f} / {bwd * 1e3:.3f} | {p.params * 6 / bw * 1e3:.3f} | "
                   f"{gemm * 1e3:.3f} | {3 * p.params * e / bw * 1e3:.3f} |")
    return "\n".join(out)


def gemms_to_fp32(pairs: list[tuple[Any, replay.StepTrace]], gpu: hardware.GpuProfile) -> str:
    by = {(p.model, p.framework, p.mode, p.precision, p.batch_size): (p, st)
          for p, st in pairs if p.compile_mode == "default"}
    c_b, c_f = gpu.gemm("bf16"), gpu.gemm("fp32")
    out = [f"ceilings' ratio bf16 / fp32 {c_b / c_f:.1f}\n",
           "| model | framework | mode | batch | GEMMs bf16 / fp32 (ms) | fp32 / bf16 | "
           "roofline / time bf16, fp32 | convolution GEMMs bf16 / fp32 (ms) | fp32 / bf16 | "
           "helpers / GEMMs fp32 |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for k, (p, bst) in sorted(by.items()):
        f = by.get((*k[:3], "fp32", k[4]))
        if k[3] != "bf16" or f is None or not (p.params and bst.meta.get(
                "train_flops_per_sample")):
            continue
        fst = f[1]
        flops = bst.meta["train_flops_per_sample"] * p.batch_size
        tb, tf = (sum(o.dur_s for o in st.ops if is_gemm(o)) for st in (bst, fst))
        rb = gemm_roofline_s(p.params, flops, "bf16", gpu) or math.nan
        rf = gemm_roofline_s(p.params, flops, "fp32", gpu) or math.nan
        cb, cf = (sum(o.dur_s for o in st.ops if is_gemm(o)
                      and o.op_class == "convolution") for st in (bst, fst))
        hf = sum(o.dur_s for o in fst.ops if is_conv_helper(o))
        conv = (f"{cb * 1e3:.3f} / {cf * 1e3:.3f} | {cf / cb:.1f} | {hf / cf:.3f}" if cb and cf
                else "- | - | -")
        out.append(f"| {p.model} | {p.framework} | {p.mode} | {p.batch_size} | "
                   f"{tb * 1e3:.3f} / {tf * 1e3:.3f} | {tf / tb:.1f} | "
                   f"{rb / tb:.2f}, {rf / tf:.2f} | {conv} |")
    out += ["", "| model (JAX) | batch | normalisation forward bf16 / fp32 | backward |",
            "|---|---:|---:|---:|"]
    for k, (p, bst) in sorted(by.items()):
        f = by.get((*k[:3], "fp32", k[4]))
        if k[1] != "jax" or k[3] != "bf16" or f is None:
            continue
        r = [sum(o.dur_s for o in bst.ops if o.op_class == "normalisation" and o.phase == ph)
             / (sum(o.dur_s for o in f[1].ops if o.op_class == "normalisation"
                    and o.phase == ph) or math.inf) for ph in ("t_f", "t_b")]
        if any(r):
            out.append(f"| {p.model} | {p.batch_size} | {r[0]:.2f} | {r[1]:.2f} |")
    return "\n".join(out)


def _measured_casts(st: replay.StepTrace) -> dict[str, float]:
    """The cast kernels of a bf16 torch eager trace by kind (s)."""
    out: dict[str, float] = collections.defaultdict(float)
    for o in st.ops:
        if o.kind != "kernel" or "copy_kernel" not in o.name:
            continue
        if o.op == "ToCopyBackward0":
            k = "grad down" if "bfloat16_copy" in o.name else "grad up"
        elif o.op_class in GEMM_CLASSES and o.phase == "t_f":
            k = "operands"
        elif o.op_class == "loss" and o.phase == "t_f":
            k = "logits up"
        elif o.op in ("aten::to", "aten::_to_copy") and o.phase == "t_b":
            k = "add grad down"
        else:
            continue
        out[k] += o.dur_s
    return out


def casts(pairs: list[tuple[Any, replay.StepTrace]], gpu: hardware.GpuProfile) -> str:
    bw = gpu.bandwidth_bytes_per_s
    fl = KERNEL_FLOOR_S
    by = {(p.model, p.batch_size, p.precision): (p, st) for p, st in pairs
          if p.framework == "torch" and p.mode == "eager"}
    out = ["| model | batch | measured casts (ms): operands / grads up / grads down / logits "
           "up / add grads down | total | weights only (ms) | + activations (ms) | "
           "estimate / measured | logits up, grad down: estimate / measured | loss kernels "
           "bf16 / fp32 |", "|---|---:|---|---:|---:|---:|---:|---|---:|"]
    loss32 = loss16 = 0.0
    for (m, b, prec), (_p, st) in sorted(by.items()):
        if prec != "fp32" or (m, b, "bf16") not in by:
            continue
        bst = by[(m, b, "bf16")][1]
        mc = _measured_casts(bst)
        st = drop_conv_helpers(st)
        nf = sum(1 for o in st.ops if is_gemm(o) and o.phase in (None, "t_f"))
        nb = sum(1 for o in st.ops if is_gemm(o) and o.phase == "t_b")
        t_f, t_b = cast_times(st, gpu, nf, nb)
        w = (t_f or 0.0) * nf + (t_b or 0.0) * nb
        ac = activation_casts(st)
        a = (len(ac.fwd) + ac.bwd_kernels + (ac.loss_at is not None)) * fl + (
            sum(ac.fwd.values()) + ac.bwd_bytes + ac.loss_bytes) / bw
        meas = sum(mc.values())
        lf = [o.dur_s for o in st.ops if o.op_class == "loss"]
        lb = [o.dur_s for o in bst.ops if o.op_class == "loss" and "copy_kernel" not in o.name]
        loss32, loss16 = loss32 + sum(lf), loss16 + sum(lb)
        logit = ""
        if ac.loss_at is not None and mc["logits up"] and mc["grad down"]:
            n = ac.loss_bytes / UPCAST_BYTES
            logit = (f"{(fl + ac.loss_bytes / bw) / mc['logits up']:.2f}, "
                     f"{(fl + n * DOWNCAST_BYTES / bw) / mc['grad down']:.2f}")
        out.append(f"| {m} | {b} | " + " / ".join(
            f"{mc[k] * 1e3:.3f}" for k in ("operands", "grad up", "grad down", "logits up",
                                          "add grad down"))
                   + f" | {meas * 1e3:.3f} | {w * 1e3:.3f} | {(w + a) * 1e3:.3f} | "
                   f"{(w + a) / meas:.2f} | {logit} | "
                   f"{sum(lb) / sum(lf) if sum(lf) else float('nan'):.2f} |")
    if loss32:
        out.append(f"\nloss kernels summed, bf16 / fp32: {loss16 / loss32:.3f}")
    return "\n".join(out)


def queue_gaps(db: str) -> str:
    from dlperf.results import timelines
    from dlperf.results.store import ResultStore

    acc: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    per: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    with ResultStore(db, read_only=True) as store:
        for p, st in replay.load_traces(db):
            if p.model in SPLIT["test_models"] or st.meta.get("xla"):
                continue
            tl = timelines.load(store, p.result_id) or {}
            seq = replay.iterations(tl, timelines.decode(tl))[st.meta["iteration"]]
            last: dict[Any, float] = {}
            n0 = len(acc[(p.framework, p.mode)])
            for o in seq:
                lane, s = o.get("stream"), o["start_ns"]
                rdy = (o["launch_start_ns"] + (o.get("launch_dur_ns") or 0)
                       if o.get("launch_start_ns") is not None else None)
                if lane in last and rdy is not None and \
                        rdy < last[lane] - replay.QUEUED_MARGIN_S * 1e9:
                    acc[(p.framework, p.mode)].append((s - last[lane]) * 1e-3)
                last[lane] = max(last.get(lane, float("-inf")), s + o["dur_ns"])
            if len(acc[(p.framework, p.mode)]) - n0 >= replay.QUEUE_GAP_MIN_OPS:
                per[(p.framework, p.mode)].append(st.gap_s * 1e6)
    out = ["| framework | mode | queued gaps | median (us) | p10-p90 (us) | traces' own gap "
           "(us, median, range, traces with enough) |", "|---|---|---:|---:|---|---|"]
    for (fw, md), v in sorted(acc.items()):
        v.sort()
        g = sorted(per[(fw, md)])
        out.append(f"| {fw} | {md} | {len(v)} | {statistics.median(v):.2f} | "
                   f"{v[len(v) // 10]:.2f}-{v[9 * len(v) // 10]:.2f} | {statistics.median(g):.2f}, "
                   f"{g[0]:.2f}-{g[-1]:.2f}, {len(g)} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", action="append",
                    help="results file (repeatable: one pool; default the H200's "
                         "calibration2.db)")
    ap.add_argument("--ceilings", action="append",
                    help="results files whose measured ceilings give the GPU profile "
                         "(default: every file of benchmarks/results/h200)")
    args = ap.parse_args()
    dbs = args.db or [str(ROOT / "benchmarks/results/h200/calibration2.db")]
    pairs = [(p, st) for db in dbs for p, st in replay.load_traces(db)
             if p.model not in SPLIT["test_models"]]
    name = next((p.device_name for p, _ in pairs if p.device_name), "NVIDIA H200")
    gpu = profile_of(args.ceilings, name) if args.ceilings else h200_profile()
    print(f"development traces: {len(pairs)}; {name} bandwidth (measured) "
          f"{gpu.bandwidth_bytes_per_s / 1e12:.2f} TB/s\n")
    print("1. bandwidth utilisation of non-GEMM kernels with bytes\n")
    print(utilisation(pairs, gpu))
    mp = matched_precision_pairs(pairs)
    print("\n2. the bytes response (torch eager fp32 -> bf16, matched kernels)\n")
    print(bytes_response(mp, gpu))
    print("\n3. precision ratios of non-GEMM kernels by op class\n")
    print(precision_ratios(mp))
    print("\nsummed over the operators present in both precisions:\n")
    print(operator_ratios(pairs))
    print("\n4. GEMM latency\n")
    print(gemm_latency(pairs, gpu))
    print("\n5. GEMM shares by op class and alignment, convolution helpers and batch norm at "
          "bf16\n")
    print(gemm_shares(pairs, gpu))
    print("\n6. autocast's host (torch eager host levels and probes)\n")
    print(autocast_host(pairs))
    print("\n7. queue gaps (PyTorch timelines; an XLA program's gap is 0)\n")
    for db in dbs:
        print(queue_gaps(db))
    print("\n8. weights: casts and GEMMs against the parameters' bytes\n")
    print(weights(pairs, gpu))
    print("\n9. autocast's casts: measured at bf16 against the fp32 trace's estimate\n")
    print(casts(pairs, gpu))
    print("\n10. GEMMs from bf16 to fp32: time, roofline, convolutions and their helpers\n")
    print(gemms_to_fp32(pairs, gpu))
    return 0


if __name__ == "__main__":
    sys.exit(main())
