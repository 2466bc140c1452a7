"""The performance model's special cases: every rule that applies to some configurations and
not to others, one function each, listed once in :data:`SPECIAL_CASES`.

Everything else in :mod:`dlperf.perfmodel` applies the same equations
(:mod:`dlperf.perfmodel.equations`) to every configuration, with inputs found the same way.
A configuration that needs another rule gets it here, as Habitat keeps the operations it
predicts apart from the rest in one constant (``habitat.analysis.SPECIAL_OPERATIONS``) and
dispatches on it in one place (``analysis/predictor.py``). Each case says which
configurations it applies to, what it does and the measurement or source that called for it;
a new one is a new function here and a line in :data:`SPECIAL_CASES` (docs/perfmodel.md lists
them from that table; ``tests/unit/test_perfmodel_special.py`` holds each to its doc and to a
caller).

The functions take a calibration and configurations typed ``Any``: this module is imported by
:mod:`dlperf.perfmodel.records` and :mod:`dlperf.perfmodel.calibrate`, and imports nothing of
dlperf but the framework registry, so there is no import cycle.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from statistics import median
from typing import Any

from dlperf.registry import framework_info

#: Precisions that dispatch the operators of another: TF32 is a math mode of cuBLAS/cuDNN
#: (PyTorch ``allow_tf32``/``fp32_precision``, JAX ``jax_default_matmul_precision``) over the
#: fp32 program (:func:`operator_precision`).
SAME_OPERATORS = {"tf32": "fp32"}
#: Precisions whose measured GEMM ceiling is the tensor-core rate the model's own matmuls and
#: convolutions run at (:func:`flops_efficiency_cap`).
TENSOR_CORE_PRECISIONS = ("bf16", "fp16", "tf32")
#: Joins a mode and a compile mode other than ``default`` in a group's mode (:func:`mode_key`).
COMPILE_SEP = "+"
#: Frameworks whose allocator reserves a pool at start (XLA: 75% of the device by default,
#: ``XLA_PYTHON_CLIENT_MEM_FRACTION``; TensorFlow: all of it unless memory growth is on).
PREALLOCATING = ("jax", "tensorflow")
#: Zoo families whose step is a time-step loop (:func:`recurrent_note`).
RECURRENT_FAMILIES = ("rnn",)
#: Device kinds whose stored ceilings the roofline reads (:func:`ceilings_read`) and whose
#: data-parallel predictions may rest on the default links without a stored data-parallel run
#: of their own (:func:`dp_defaults_apply`).
GPU_KINDS = ("cuda",)
#: What a step's host work is counted in, first found first (:func:`count_kinds`): an eager
#: mode dispatches operators; a compiled one launches XLA programs' command buffers, else
#: kernels, else (no trace of that mode) its operators.
EAGER_COUNTS = ("ops",)
COMPILED_COUNTS = ("launches", "kernels", "ops")


def operator_precision(precision: str) -> str:
    """The precision whose operator count ``precision``'s step has: fp32's for tf32, else its
    own. A tf32 run dispatches fp32's operators (a math mode of the same program), so where a
    tf32 run's operators were not counted, fp32's count is its count. Kernel and launch counts
    are not carried over: the libraries pick other kernels (JAX resnet50: 1,302 kernels in
    fp32, 994 in bf16)."""
    return SAME_OPERATORS.get(precision, precision)


def flops_efficiency_cap(precision: str) -> float:
    """The largest ``e_F`` a group's roofline fit may choose at ``precision`` (a ratio to the
    measured GEMM ceiling).

    1 for :data:`TENSOR_CORE_PRECISIONS`: no step's FLOPs run faster than the ceiling measured
    at the same precision. Without the bound the joint fit trades the FLOP term for the byte
    term when a group's FLOPs and bytes grow alike with the batch, and chose e_F = 7.39 (its
    old bound, e^2) for torch graph bf16 and 1.26-1.49 for JAX and torch eager bf16 on
    benchmarks/results/h200 (JAX bf16 still 1.42 with the kernel term); leave-one-model-out
    on h200 + h200x2: 20.35% -> 19.78% without the kernel term, 16.33% -> 16.28% with it.
    ``e^2`` for fp32: the fp32 ceiling is the CUDA cores' (FP32 SIMT), while the frameworks'
    defaults run fp32 convolutions on TF32 tensor cores (cuDNN's ``allow_tf32``, on by default
    in PyTorch) and XLA:GPU's default-precision fp32 dots on TF32 too, so a fitted e_F above 1
    is real there (1.2-1.6 on those files; capping it at 1 raised that MdAPE to 23.9%).
    """
    return 1.0 if precision in TENSOR_CORE_PRECISIONS else math.e ** 2


def mode_key(mode: str, compile_mode: str | None) -> str:
    """The mode of a fitted group: ``mode``, or ``mode+compile_mode`` for a compile mode other
    than ``default`` (``graph+reduce-overhead``). Replaying CUDA graphs (PyTorch
    ``torch.compile(mode="reduce-overhead")``) removes the per-operator host work, so such runs
    are fitted and compared apart; their device kernels are the base mode's
    (:func:`base_mode`)."""
    return mode if compile_mode in (None, "", "default") else f"{mode}{COMPILE_SEP}{compile_mode}"


def compile_of(mode: str) -> str:
    """The compile mode in a group's mode (:func:`mode_key`): ``default`` when there is none."""
    return mode.split(COMPILE_SEP, 1)[1] if COMPILE_SEP in mode else "default"


def base_mode(mode: str) -> str:
    """The mode without its compile mode (:func:`mode_key`): a CUDA-graph replay runs its base
    mode's kernels, so its roofline fit takes the base mode's device points too and its kernel
    count is the base mode's where it has none of its own."""
    return mode.split(COMPILE_SEP, 1)[0]


def count_kinds(framework: str, mode: str) -> tuple[str, ...]:
    """What a step's host work is counted in, in ``framework``'s group mode ``mode``, in order
    of preference: operators (``ops``) in the registry's ``eager_mode`` (Dai et al. 2022:
    a framework's host time follows the operators it dispatches), else XLA host launches,
    kernels, operators (:data:`COMPILED_COUNTS`): torch.compile's default mode launches each
    generated kernel from Python (resnet50 and the transformer read 28-30 us of host per
    graph-mode kernel on the H200, calibration2.db), XLA launches command buffers
    (:mod:`dlperf.perfmodel.hostcount`)."""
    info = framework_info(framework)
    return EAGER_COUNTS if info is not None and info.eager_mode == mode else COMPILED_COUNTS


def layout_base(base: Any, target: Any) -> Any | None:
    """The configuration a what-if from ``base`` to ``target`` should start from instead of
    ``base`` (``base`` at layout ``auto``), or None to start from ``base``.

    A target mode whose compiler picks the layout itself (the registry's
    ``layout_free_modes``: torch.compile converts convolutions to channels_last) runs the same
    kernels whatever layout was asked for, so a base of a mode that does not, with a layout of
    its own, starts from the base mode's ``auto`` series where one is stored (the caller
    checks): frameworks.db's resnet50 bf16 NCHW eager step is 54.6 ms against 29.4 ms at
    ``auto`` (channels_last), while both compiled steps read 21.0 and 20.7 ms. The same rule
    skips such pairs in a what-if's transfer ratios (:func:`changes_layout`)."""
    return base.with_(layout="auto") if changes_layout(base, target) else None


def changes_layout(base: Any, target: Any) -> bool:
    """True when going from ``base`` to ``target`` also changes the layout: ``base`` asked for
    a layout of its own and ``target``'s mode picks its own where ``base``'s does not
    (:func:`layout_base`; resnet50 bf16 NCHW eager -> graph 0.38, at ``auto`` 0.70,
    frameworks.db)."""
    free = getattr(framework_info(target.framework), "layout_free_modes", ())
    return base.layout != "auto" and target.mode in free and base.mode not in free


def added_ops_terms(cal: Any, frm: Any, to: Any, device_name: str | None = None
                    ) -> tuple[int, int, dict[str, float]] | None:
    """The terms of :func:`added_ops_host`: ``(n_frm, n_to, {model: c_add of that model})``,
    each other model's ``c_add = (H_to - H_frm) / (n_to - n_frm)`` (s per operator: the
    change of its identified host time over the change of its operator count, roofline fits
    without ``frm.model``), models by name. None where :func:`added_ops_host` does not apply
    (the same conditions, but for a result that is not positive)."""
    # a change of precision alone, in modes whose host work is counted in operators
    if (frm.with_(precision=to.precision) != to or frm.precision == to.precision
            or any(cal.facts.count_kind(c.framework, c.group[1]) != "ops" for c in (frm, to))):
        return None
    n_frm = cal.facts.op_count(frm.model, frm.framework, frm.precision, "ops")
    n_to = cal.facts.op_count(to.model, to.framework, to.precision, "ops")
    if not n_frm or not n_to or n_frm == n_to:
        return None
    a = cal.counted_hosts(frm.group, frm.model, device_name, "ops")
    b = cal.counted_hosts(to.group, frm.model, device_name, "ops")
    per = {m: (b[m][0] - a[m][0]) / (b[m][1] - a[m][1])
           for m in sorted(set(a) & set(b)) if b[m][1] != a[m][1]}
    return (n_frm, n_to, per) if per else None


def added_ops_host(cal: Any, frm: Any, to: Any, host_s: float,
                   device_name: str | None = None) -> tuple[float, str] | None:
    """The host time (s) of ``to`` from ``frm``'s, ``host_s``, where the two differ in
    precision only and their mode dispatches operators (:func:`count_kinds` ``ops``: eager):
    ``H_to = H_frm + (n_to - n_frm) c_add``, with ``n`` the model's operators per step in each
    precision (``Facts.op_count``, a count of its code) and ``c_add`` the host cost of an
    operator the change adds, the median over *other* models with an identified host time in
    both groups (roofline fits without ``frm.model``) of ``(H_to - H_frm) / (n_to - n_frm)``.
    With the second value, where from.

    Mixed precision in eager PyTorch adds autocast's cast operators (``aten::_to_copy``) to
    every step: 1.4-2.5x the fp32 operator count on the zoo, while the step's host time grows
    by less (benchmarks/results/h200: torch eager's identified host times are a median 51 us
    per fp32 operator and 37 us per bf16 one; the operators bf16 adds cost 16 us each, the
    median over 12 models, from -30 us (deepspeech2, whose cuDNN RNN's host is cheaper in
    bf16) to 40 us (gpt2_small)). A step ratio of other models' pairs, the alternative,
    carries their device change into the host term: with it 164 of 190 fp32->bf16 what-if
    signs came right on the H200 files, 169 with this. Dai et al. 2022 (sec. 4) model a
    framework's host time by the operators it dispatches.

    None when the configurations differ in anything but precision, the mode is not counted in
    operators, a count is missing or equal in both, no other model has both host times, or
    the result is not positive.
    """
    terms = added_ops_terms(cal, frm, to, device_name)
    if terms is None:
        return None
    n_frm, n_to, per = terms
    c_add = median(per.values())
    h = host_s + (n_to - n_frm) * c_add
    if h <= 0:
        return None
    return h, (f"{host_s * 1e3:.3g} ms {'+' if n_to > n_frm else '-'} {abs(n_to - n_frm)} "
               f"operators x {c_add * 1e6:.3g} us (host per added operator, median of "
               f"{len(per)} other models: {', '.join(per)})")


def measured_base(points: Iterable[Any], batch: int, fit_step_s: float,
                  bound: str) -> tuple[float, str] | None:
    """``(m, words)``: the factor that puts a what-if's device-bound base on its own
    measurement at ``batch`` (``m`` = the median stored step of ``points`` at that per-device
    batch over the series fit's ``fit_step_s``; the what-if's ``H`` and ``D`` are both scaled
    by it, so its step by ``m``), or None: a host-bound base, or no stored point at the batch.

    A what-if is the base's step times the change (:func:`dlperf.perfmodel.model.what_if`);
    a mode change moves a device-bound step by 0-10% (torch.compile on fp32), about as much
    as the series fit misses its own point (median 1.2-1.6% on the H200 what-if bases), so
    from the fit the sign is the fit's error. A device-bound point repeats within 0.3% (the
    ``repeat (noise floor)`` rows) and is taken as it is; a host-bound one repeats within 15%,
    and the fit over the series averages that noise. Chosen on the development rows of the
    frozen split: eager->graph 8.10% -> 7.66% MdAPE, signs 37 -> 41 of 53; fp32->bf16
    19.13% -> 18.81%, signs unchanged (120 of 131); anchoring host-bound bases too made both
    worse in a replay of the rows (7.46% against 7.01%, 20.09% against 18.81%, judged on the
    what-if's bound).

    Args:
        points: the base series' stored points (``per_device_batch``, ``step_time_s``).
        batch: the per-device batch of the what-if.
        fit_step_s: the series fit's step at ``batch`` (s), > 0.
        bound: the series fit's bound at ``batch`` (``host`` or ``device``).
    """
    if bound != "device" or fit_step_s <= 0:
        return None
    steps = [p.step_time_s for p in points if p.per_device_batch == batch and p.step_time_s > 0]
    if not steps:
        return None
    m = median(steps) / fit_step_s
    return m, (f"{m:.4g}: the device-bound base measured at batch {batch} ({len(steps)} "
               f"point(s), median {median(steps) * 1e3:.4g} ms) over its series fit")


def recurrent_note(model: str) -> str | None:
    """The warning an analytic prediction of a recurrent model carries (its zoo family in
    :data:`RECURRENT_FAMILIES`), else None: its time-step loop is bound by kernel latency, not
    by its FLOPs or bytes, and can run far longer than the roofline says (JAX deepspeech2
    bf16 b=32: 1.50 ms predicted, 31.04 ms measured)."""
    from dlperf.zoo import SPECS

    spec = SPECS.get(model)
    if spec is None or spec.family not in RECURRENT_FAMILIES:
        return None
    return ("device time: a roofline of FLOPs and bytes; a recurrent model's time-step loop "
            "is bound by kernel latency, not by either, and can run far longer "
            "(docs/perfmodel.md, special cases)")


def memory_judged(framework: str) -> bool:
    """Whether a configuration's stored reserved peak says what a batch needs: not for
    :data:`PREALLOCATING` frameworks, whose allocator reserves a pool up front (its reserved
    peak is the pool, the same at every batch), so their batches are not refused for memory."""
    return framework not in PREALLOCATING


def allreduce_floor(stored_ranks: set[int], world: int,
                    fitted: Callable[[int], Callable[[float], float]]
                    ) -> tuple[int, Callable[[float], float]] | None:
    """The all-reduce time that more ranks than any stored sweep never beat: the fitted sweep
    (``fitted(n)``) of the largest stored rank count ``n <= world``, and ``n``; None when no
    sweep of at most ``world`` ranks is stored. A ring's ``2(p-1)/p M beta`` grows with ``p``,
    while an alpha-beta cost over datasheet links can come out below what 2 GPUs measured
    (the H200's NVLink sweep), which made 4 and 8 GPUs faster per step than 2 at the same
    per-device batch; with the floor a prediction is monotone in ``N``."""
    below = [n for n in stored_ranks if n <= world]
    return (max(below), fitted(max(below))) if below else None


def cpu_rank_threads(threads: int | None, device: str, world: int,
                     rank_threads: Iterable[Any]) -> int | None:
    """The host threads of a stored row (``threads``: its column): for an N-device CPU row with
    none asked for, the count every rank recorded running with (``dist.per_rank[*].threads``,
    e.g. 1 under the launcher's one-thread-per-rank policy, ``env.thread_policy``), so that
    it matches the one-device series run at that count. GPU rows keep None: threads do not
    shape a GPU step here, and their one-device series are stored with None."""
    if threads is not None or world < 2 or device != "cpu":
        return threads
    counts = set(rank_threads)
    only = next(iter(counts), None)
    return only if len(counts) == 1 and isinstance(only, int) else None


def ceilings_read(device: str) -> bool:
    """Whether the roofline reads the measured GEMM and bandwidth ceilings stored with a point
    of device kind ``device``: a GPU's only (:data:`GPU_KINDS`). The roofline is fitted and
    the datasheet kept for GPUs; a CPU point's ceilings are not read, so a CPU configuration
    has no roofline: an analytic CPU prediction is refused naming the missing ceiling, and a
    CPU series is fitted without the roofline prior."""
    return device in GPU_KINDS


def dp_defaults_apply(device: str) -> bool:
    """Whether an N-device prediction of device kind ``device`` may rest on the model's
    defaults without a stored data-parallel run of that kind: a GPU's only
    (:data:`GPU_KINDS`: NVLink 4 inside a node, DDP's overhead and the interval from the
    GPUs' stored pairs). Another kind (a CPU-only results file) is refused unless one of its
    own one-node data-parallel runs is stored: its DDP overhead, all-reduce and interval would
    otherwise all be a GPU's, a confident 16-GPU-like answer for a CPU."""
    return device in GPU_KINDS


@dataclass(frozen=True)
class SpecialCase:
    """One named special case: ``applies_to`` which configurations, ``does`` what, and its
    ``function`` (the one place it is decided)."""

    name: str
    applies_to: str
    does: str
    function: Callable[..., Any]


def _launches(timeline: Any) -> float | None:
    """XLA host launches per iteration of a stored timeline
    (:func:`dlperf.perfmodel.hostcount.launches_per_iter`)."""
    from dlperf.perfmodel.hostcount import launches_per_iter

    return launches_per_iter(timeline)


#: Every special case of the model, in the order docs/perfmodel.md lists them.
SPECIAL_CASES: tuple[SpecialCase, ...] = (
    SpecialCase("host of an added operator", "a precision what-if in a mode counted in "
                "operators (PyTorch eager)", "H_t = H_b + (n_t - n_b) c_add, c_add from other "
                "models' pairs", added_ops_host),
    SpecialCase("layout picked by the compiler", "a what-if into a mode in the registry's "
                "layout_free_modes (torch.compile) from a base with a layout of its own",
                "start from the base mode's auto-layout series; skip such pairs' ratios",
                layout_base),
    SpecialCase("measured device-bound base", "a precision or mode what-if whose base is "
                "device-bound and stored at the batch", "scale the base's measured step, not "
                "its series fit", measured_base),
    SpecialCase("tf32 operators", "tf32 configurations without an operator count",
                "take fp32's operator count", operator_precision),
    SpecialCase("tensor-core FLOP cap", "bf16, fp16, tf32 groups", "e_F <= 1 in the roofline "
                "fit (fp32: e^2, its convolutions run on TF32 tensor cores)",
                flops_efficiency_cap),
    SpecialCase("compile mode", "graph runs with a compile mode other than default "
                "(reduce-overhead: CUDA graphs)", "a group of its own; device points and "
                "kernel counts shared with the base mode", mode_key),
    SpecialCase("host-work count", "every mode", "eager: operators; compiled: XLA launches, "
                "else kernels, else operators", count_kinds),
    SpecialCase("XLA host launches", "JAX/XLA timelines", "kernels folded into the command "
                "buffers and loop bodies an unprofiled step launches", _launches),
    SpecialCase("recurrent analytic", "an analytic prediction of an rnn-family model",
                "warned: latency-bound, not roofline-bound", recurrent_note),
    SpecialCase("allocator pools", "JAX and TensorFlow", "device memory not judged",
                memory_judged),
    SpecialCase("all-reduce floor", "more ranks than any stored sweep",
                "at least the largest stored sweep below: monotone in N", allreduce_floor),
    SpecialCase("CPU rank threads", "N-rank CPU rows with no thread count asked for",
                "the thread count every rank ran with", cpu_rank_threads),
    SpecialCase("GPU ceilings", "points of a device kind other than a GPU (cpu)",
                "their stored ceilings are not read: no roofline for a CPU", ceilings_read),
    SpecialCase("data-parallel defaults", "N-device predictions of a device kind other than a "
                "GPU", "refused unless a data-parallel run of that kind is stored",
                dp_defaults_apply),
)
