"""What bf16 autocast adds to a full-precision step (:mod:`dlperf.perfmodel.transforms.precision`
adds it going to bf16 and takes it away going back): the casts of the weights
(:func:`cast_times`) and of the activations (:func:`activation_casts`), the host's added
dispatch in an eager program (:func:`autocast_host`), and the convolution library's helper
kernels, which its bf16 convolutions run without (:func:`drop_conv_helpers`).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from dlperf.perfmodel.gemmshape import gemm_dims
from dlperf.perfmodel.hardware import GpuProfile
from dlperf.perfmodel.replay import DeviceOp, StepTrace
from dlperf.perfmodel.transforms.kernels import (
    GEMM_CLASSES,
    KERNEL_FLOOR_S,
    is_eager,
    is_gemm,
    without,
)
from dlperf.perfmodel.transforms.weights import (
    WEIGHT_CAST_BYTES,
    WEIGHT_GRAD_CAST_BYTES,
)

#: An eager program's untraced host time under bf16 autocast / at fp32: the median over the
#: development torch eager models of calibration2.db of their median bf16 host probe over
#: their median fp32 one (transformer 0.98, fcn5 1.12, fcn_mnist 1.14, lstm 1.16,
#: alexnet_cifar 1.22, resnet50 1.32, gpt2_small 1.63; benchmarks/replay_kernels.py, part 6).
#: Their host levels (:func:`~dlperf.perfmodel.replay.host_level`) give 1.19 on the H200 and
#: 1.10 on the H100's development models (vgg16 0.79: its fp32 convolutions' helper
#: launches), 1.14 over both; the probes 1.16 and 1.09.
AUTOCAST_HOST = 1.16


def autocast_host(step: StepTrace) -> float:
    """The factor by which bf16 autocast multiplies the host work of ``step``'s program:
    :data:`AUTOCAST_HOST` for an eager program, 1 for a compiled one (an XLA program, or a
    torch.compile graph, ``meta['mode'] == 'graph'``: the casts are in the graph, not
    dispatched operator by operator).

    Autocast dispatches more operators (the casts of GEMM operands and their backward): a
    torch eager bf16 step runs 1.4-2.5x the fp32 step's ATen operators (``ops_per_step`` on
    calibration2.db), each through the dispatcher (docs/perfmodel.md: the host is per
    operator), but the casts are cheaper than the average operator: the untraced host probes
    give the whole step's host 1.16x (an added host cost per cast, 16 or 40 us, gave the
    fp32 -> bf16 development rows of calibration2.db 10.8% and 12.7% median error against
    10.0% without: the factor already covers the casts' dispatch)."""
    return AUTOCAST_HOST if is_eager(step) else 1.0


def is_conv_helper(op: DeviceOp) -> bool:
    """True for a library kernel of a convolution that is not its GEMM (op class
    ``convolution``): cuDNN's fp32 FFT and Winograd transforms, layout conversions and split
    reductions around the GEMM. The framework's own kernels of the operator (PyTorch's
    ``at::native`` bias addition and bias-gradient reduction, an XLA fusion, a TorchInductor
    kernel, :data:`_FRAMEWORK_KERNEL`) are not: they run
    in both precisions (vgg16's on the H100, the only development model with convolution
    biases: 15.5 ms at fp32 and 15.3 ms at bf16 over its three traced batches,
    benchmarks/replay_kernels.py, part 5)."""
    return (op.kind == "kernel" and op.op_class == "convolution" and not is_gemm(op)
            and not _FRAMEWORK_KERNEL.search(op.name))


#: A kernel the framework generated or owns rather than the convolution library: PyTorch's
#: ``at::native`` kernels, an XLA fusion, a TorchInductor kernel (``triton_...``).
_FRAMEWORK_KERNEL = re.compile(r"at::native|fusion|^triton_")


def drop_conv_helpers(step: StepTrace) -> StepTrace:
    """``step`` without its convolutions' library helper kernels (:func:`is_conv_helper`), as
    at bf16: cuDNN and XLA's bf16 convolutions run their tensor-core kernels without them. On
    the development points traced in both precisions what remains of them at bf16 is 4% of
    their fp32 time in torch eager (ConvolutionBackward0: 14.9 -> 0.56 ms, 643 -> 170
    kernels) and 2% in XLA programs (22.8 -> 0.40 ms), while the GEMM kernels keep their
    count. An XLA program loses the launches left without a kernel, and their share of the
    host (its host is spread over launches, :func:`~dlperf.perfmodel.replay.deinflate`; the
    development resnet50 XLA programs launch 0.53x as often at bf16 and probe 0.64x the
    host); a PyTorch program keeps its launches: :data:`AUTOCAST_HOST` is the net of the
    helpers' launches gone and the casts' and batch norms' added (dropping the helpers'
    launch calls and their work inside the operator, then re-deriving the factor, 1.16
    again, gave fp32 -> bf16 8.4% on the H200 development rows and 6.4% on the H100's,
    against 7.4% and 6.7%: the convolution nets' bf16 host grows by more than the others')."""
    ops = without(step.ops, is_conv_helper)
    launches = step.launches
    if step.meta.get("xla"):
        used = sorted({o.launch for o in ops})
        new = {old: i for i, old in enumerate(used)}
        ops = [replace(o, launch=new[o.launch]) for o in ops]
        launches = tuple(step.launches[i] for i in used)
    return replace(step, ops=tuple(ops), launches=launches)


def cast_times(step: StepTrace, gpu: GpuProfile, n_fwd: int, n_bwd: int
               ) -> tuple[float | None, float | None]:
    """Duration (s) of each of the ``n_fwd`` forward casts and ``n_bwd`` backward casts bf16
    autocast adds to ``step``: :data:`KERNEL_FLOOR_S` plus an even share of the model's
    parameters (``meta['params']``) x :data:`WEIGHT_CAST_BYTES` (forward) or
    :data:`WEIGHT_GRAD_CAST_BYTES` (backward, eager programs only: 0 for a compiled one) over
    ``gpu``'s bandwidth; ``(None, None)`` where the parameter count is unknown."""
    params = step.meta.get("params")
    if not params:
        return None, None
    bw = gpu.bandwidth_bytes_per_s
    fwd = KERNEL_FLOOR_S + params * WEIGHT_CAST_BYTES / bw / max(1, n_fwd)
    bwd = KERNEL_FLOOR_S + params * WEIGHT_GRAD_CAST_BYTES / bw / max(1, n_bwd) \
        if is_eager(step) else 0.0
    return fwd, bwd


#: Forward operators whose output autocast leaves in float32 (PyTorch, "Automatic Mixed
#: Precision package - torch.amp", "CUDA Ops that can autocast to float32": ``layer_norm``,
#: ``group_norm``, ``softmax``, ``log_softmax`` among them) and the embedding, which no list
#: names and which runs in its float32 weight's type: a GEMM fed from one of them gets its
#: input cast to bf16 (one kernel), and in backward autograd casts that input's gradient
#: back to float32 (``ToCopyBackward0``). A GEMM fed from another GEMM (the lower-precision
#: list: ``linear``, ``matmul``, convolutions, attention) reads bf16 and needs no cast.
AUTOCAST_FP32_OPS = re.compile(r"layer_norm|group_norm|softmax|embedding", re.I)
#: Bytes per element of a cast down to bf16 (read 4, write 2: PyTorch's vectorized
#: ``bfloat16_copy_kernel_cuda``) and of a cast up to float32 (``direct_copy_kernel_cuda``,
#: unrolled: it moves its 6 bytes at half the bandwidth). The same figures per parameter as
#: :data:`WEIGHT_CAST_BYTES` and :data:`WEIGHT_GRAD_CAST_BYTES`; on the development GPT-2
#: points the logits' upcast in forward takes 1.00-1.02x ``12 B`` a logit over the H200's
#: bandwidth and its gradient's downcast 0.96-1.02x ``6 B`` (benchmarks/replay_kernels.py,
#: part 9).
DOWNCAST_BYTES = WEIGHT_CAST_BYTES
UPCAST_BYTES = WEIGHT_GRAD_CAST_BYTES
#: A loss's own kernels at bf16 / at fp32 where autocast's upcast of its logits is a kernel of
#: its own (:func:`activation_casts`): summed over the development torch eager points traced
#: in both precisions, 0.477 on the H200 and 0.471 / 0.484 on the H100's two files
#: (:data:`~dlperf.perfmodel.transforms.precision.PRECISION_RATIO`'s 0.8 for losses is the
#: same operators with the upcast kernel in them: 0.81 / 0.72-0.75;
#: benchmarks/replay_kernels.py, part 9).
LOSS_KERNELS_BF16 = 0.48


@dataclass(frozen=True)
class ActivationCasts:
    """The activation casts bf16 autocast adds to an eager step (:func:`activation_casts`).

    Attributes:
        fwd: op index of a forward GEMM kernel -> bytes of its input's cast to bf16.
        loss_at: op index of the first forward kernel of the loss whose bf16 logits autocast
            casts up (None where the trace holds no loss with bytes).
        loss_bytes: bytes of that upcast (the logits x :data:`UPCAST_BYTES`).
        bwd_bytes: bytes of the backward casts: the cast-in activations' gradients back to
            float32, the logits' gradient down to bf16, and the gradients of mixed adds
            (float32 + bf16) down to bf16.
        bwd_kernels: how many backward cast kernels those are.
    """

    fwd: dict[int, float] = field(default_factory=dict)
    loss_at: int | None = None
    loss_bytes: float = 0.0
    bwd_bytes: float = 0.0
    bwd_kernels: int = 0


def _gemm_input_elems(ks: Sequence[DeviceOp], batch: int) -> float | None:
    """Elements of the activation input (``m x k``) of the matmul call of kernels ``ks``
    (traced at fp32): its shape from its FLOPs and bytes (:func:`gemm_dims` at 4 B, the
    rows ``m`` a multiple of ``batch``; the median over the shapes that fit), None where
    the trace holds no figures or they give no such shape."""
    g = [k for k in ks if is_gemm(k) and k.flops and k.bytes]
    if not g or batch <= 0:
        return None
    fl, nb = round(sum(k.flops or 0.0 for k in g)), round(sum(k.bytes or 0.0 for k in g))
    try:
        dims = gemm_dims(fl, nb, 4)
    except ValueError:
        return None
    mk = sorted(m * k for m, _, k in dims if m % batch == 0)
    return float(mk[len(mk) // 2]) if mk else None


#: autocast's walk over an eager step's forward calls (:func:`activation_casts`) as data: for
#: a call's role (:func:`_autocast_role`) and the dtype state its input is in, the state after
#: it and the cast autocast adds there (:data:`AUTOCAST_CASTS`); a state a role does not
#: name is kept, with no cast. The states: ``data`` the step's input (float32, no gradient),
#: ``bf16`` a GEMM's output with no float32 producer run yet, ``fp32`` a float32 op's output,
#: ``bf16+fp32`` a GEMM's output beside a float32 stream (a residual connection). The roles
#: follow PyTorch's op lists ("Automatic Mixed Precision package - torch.amp", "CUDA Ops
#: that can autocast to bfloat16/float16": ``linear``, ``matmul``, the convolutions, the RNN
#: cells, ``scaled_dot_product_attention``, one per GEMM op class of :data:`GEMM_CLASSES`;
#: "CUDA Ops that can autocast to float32": :data:`AUTOCAST_FP32_OPS` as ``fp32`` and the
#: losses, ``loss``, which read their logits in float32 and leave the stream's type as it
#: is) and type promotion (``aten::add`` of a bf16 tensor to the float32 stream gives
#: float32); other operators keep the type they are given. Only a matmul's float32 input is
#: sized (the other GEMM classes' inputs have no figures in most traces, and a network's
#: image is its only float32 convolution input). A compiled program (XLA, torch.compile)
#: fuses its casts and is not walked; a JAX model's layers run in the dtype it names
#: (:data:`~dlperf.perfmodel.transforms.precision.PRECISION_CLASS_BY_FRAMEWORK`).
AUTOCAST_WALK: dict[str, dict[str, tuple[str, str]]] = {
    "matmul": {"data": ("bf16", "input"), "bf16": ("bf16", ""),
               "fp32": ("bf16+fp32", "input+grad"), "bf16+fp32": ("bf16+fp32", "")},
    "convolution": {"data": ("bf16", ""), "fp32": ("bf16+fp32", "")},
    "attention": {"data": ("bf16", ""), "fp32": ("bf16+fp32", "")},
    "recurrent": {"data": ("bf16", ""), "fp32": ("bf16+fp32", "")},
    "loss": {"bf16": ("bf16", "logits"), "bf16+fp32": ("bf16+fp32", "logits")},
    "fp32": {"data": ("fp32", ""), "bf16": ("fp32", ""), "fp32": ("fp32", ""),
             "bf16+fp32": ("fp32", "")},
    "aten::add": {"bf16+fp32": ("fp32", "add")}}
#: The casts of :data:`AUTOCAST_WALK` as ``(elements, forward bytes, backward bytes, backward
#: kernels)`` a call's kernels give: the elements from the call's figures (None or 0 where
#: the trace holds none: no cast), the bytes per element of the forward cast and of the
#: backward one. ``input``: a matmul's ``m x k`` input (:func:`_gemm_input_elems`) cast down,
#: the step's data's with no gradient to cast back; ``input+grad``: another float32 input's,
#: its gradient cast back up; ``logits``: a loss's bf16 logits (its recorded input bytes / 4,
#: the maximum over its kernels, each of which may repeat the operator's figures) cast up,
#: their gradient down; ``add``: a mixed ``add``'s bf16 input (its recorded bytes / 8), its
#: gradient down.
AUTOCAST_CASTS: dict[str, tuple[Callable[[Sequence[DeviceOp], int], float | None],
                                float, float, int]] = {
    "": (lambda ks, b: None, 0.0, 0.0, 0),
    "input": (_gemm_input_elems, DOWNCAST_BYTES, 0.0, 0),
    "input+grad": (_gemm_input_elems, DOWNCAST_BYTES, UPCAST_BYTES, 1),
    "logits": (lambda ks, b: max(o.bytes or 0.0 for o in ks) / 4, UPCAST_BYTES,
               DOWNCAST_BYTES, 1),
    "add": (lambda ks, b: sum(o.bytes or 0.0 for o in ks) / 8, 0.0, DOWNCAST_BYTES, 1)}


def _autocast_role(op: str, kernels: Sequence[DeviceOp]) -> str:
    """A forward call's role in :data:`AUTOCAST_WALK`: its GEMM op class where it launches a
    GEMM-like kernel (:func:`is_gemm`), ``loss``, ``fp32`` for :data:`AUTOCAST_FP32_OPS`,
    else the operator's name."""
    cls = kernels[0].op_class or ""
    if cls in GEMM_CLASSES and any(is_gemm(o) for o in kernels):
        return cls
    if cls == "loss":
        return cls
    return "fp32" if AUTOCAST_FP32_OPS.search(op) else op


def activation_casts(step: StepTrace) -> ActivationCasts:
    """The activation casts bf16 autocast adds to ``step`` (an eager fp32 trace), from its
    forward operators in launch order (consecutive kernels of one operator are one call),
    walked through :data:`AUTOCAST_WALK` from the state ``data``, each cast sized by
    :data:`AUTOCAST_CASTS`: a matmul's input cast joins its first GEMM kernel's forward
    cast (:attr:`ActivationCasts.fwd`), the first loss's logits' upcast is a kernel of its
    own (:attr:`ActivationCasts.loss_at`), the backward casts are summed.

    Figures recorded at another batch (the trace's before a batch transform,
    ``meta['figures_batch_size']``) are scaled to ``meta['batch_size']``. A matmul, loss or
    add whose trace holds no figures adds nothing."""
    batch = int(step.meta.get("batch_size") or 0)
    b_fig = int(step.meta.get("figures_batch_size") or batch)
    scale = batch / b_fig if b_fig > 0 else 1.0
    forward = [(i, o) for i, o in enumerate(step.ops)
               if o.kind == "kernel" and o.phase in (None, "t_f")]
    fwd: dict[int, float] = {}
    loss_at, loss_bytes, bwd_bytes, bwd_kernels = None, 0.0, 0.0, 0
    state = "data"
    for op, call in itertools.groupby(forward, key=lambda io: io[1].op or ""):
        ks = list(call)  # one call: consecutive kernels of the operator ``op``
        kernels = [o for _, o in ks]
        state, cast = AUTOCAST_WALK.get(_autocast_role(op, kernels), {}).get(state,
                                                                             (state, ""))
        elems, fwd_b, bwd_b, n_bwd = AUTOCAST_CASTS[cast]
        n = elems(kernels, b_fig)
        if not n or (cast == "logits" and loss_at is not None):
            continue
        if cast == "logits":
            loss_at, loss_bytes = ks[0][0], n * scale * fwd_b
        elif fwd_b:
            fwd[next(i for i, o in ks if is_gemm(o))] = n * scale * fwd_b
        bwd_bytes += n * scale * bwd_b
        bwd_kernels += n_bwd
    return ActivationCasts(fwd, loss_at, loss_bytes, bwd_bytes, bwd_kernels)
