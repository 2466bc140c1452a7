"""Op classes: a table-driven classifier of kernel and op names (issue 4, "key layers").

Dai et al. 2022 found that the implementation of a few key layers decides most of a
framework's speed. To compare frameworks layer by layer, every piece of device time in a
trace is put into one of :data:`OP_CLASSES` from the names the trace gives it:

* **ops**: names of the executed op itself, in the order the trace parser trusts them (PyTorch:
  the outermost ATen op the model called, e.g. ``aten::linear``, then the CUDA kernel, e.g.
  ``sm90_xmma_gemm_f32f32_...``; XLA: the custom-call target and a library kernel's name,
  then the primitive the HLO
  instruction's metadata names, its opcode, fused opcodes and name, e.g. ``dot_general``,
  ``fusion``, ``dot``, ``ynn_fusion.5`` (a kernel named after the instruction, such as
  XLA:GPU's ``input_scatter_fusion_8``, comes after the primitive:
  :func:`dlperf.measure.breakdown.xla.is_instruction_kernel`); TensorFlow: the op type, e.g.
  ``Conv2DBackpropFilter``);
* **layers**: the innermost layer that issued it, when the framework names layers (a Flax
  module instance and class, e.g. ``bn1``/``BatchNorm``; a Keras layer scope, e.g. ``sdpa``);
* **context**: enclosing names (annotations such as ``Optimizer.step#SGD.step``, autograd
  nodes, name scopes, source functions such as optax's ``update_fn``);
* **phase**: ``t_u`` when the op belongs to the optimizer update.

Decision order (first hit wins), chosen so that one layer gets one class in every framework:

1. phase ``t_u`` -> ``optimizer``;
2. :data:`CONTEXT_RULES` over context, layers and ops: communication, optimizer, recurrent
   (a cuDNN RNN does its GEMMs inside one op, so a recurrent layer's GEMMs count as recurrent
   in every framework), loss;
3. :data:`LAYER_RULES` over the layer names, innermost first (so the attention core inside an
   ``attn`` module is attention while its ``qkv`` projection, a Dense, is matmul);
4. :data:`OP_RULES` over the op names in the given order: for each name, the rules in table
   order (conv before matmul, so ``implicit_gemm`` convolution kernels are convolutions);
5. ``other``.

Names are matched case-insensitively; ``(?<![a-z])``/``(?![a-z])`` keep short words such as
``mm`` or ``to`` from matching inside longer ones (``_`` and digits still separate words, so
``triton_tem_fused_mm`` is a matmul). The tests in ``tests/unit/test_opclass.py`` use real names
from PyTorch, cuDNN, cuBLAS, XLA and TensorFlow traces.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence

#: Op classes, in display order, with their labels.
OP_CLASSES: dict[str, str] = {
    "convolution": "convolution",
    "matmul": "matmul/linear",
    "recurrent": "recurrent",
    "attention": "attention",
    "normalisation": "normalisation",
    "elementwise": "elementwise/activation",
    "pooling": "pooling",
    "loss": "loss/softmax",
    "optimizer": "optimizer",
    "memory_copy": "memory copy",
    "communication": "communication",
    "other": "other",
}

_B = r"(?<![a-z])"   # no letter before
_E = r"(?![a-z])"    # no letter after


def _words(*ws: str) -> str:
    return _B + "(?:" + "|".join(ws) + ")" + _E


_COMM = (r"nccl|" + _words("all[-_]?reduce(?:[-_]?(?:start|done))?", "all[-_]?gather(?:[-_]?(?:start|done))?",
                            "reduce[-_]?scatter", "all[-_]?to[-_]?all", "collective[-_]?permute",
                            "collectivereduce(?:v2)?", "ncclallreduce", "broadcast_coalesced")
         + r"|c10d::|ProcessGroup|rccl")
_OPTIMIZER = (r"^optimizer\.|optimizer\.step|_foreach_|multi_tensor_apply|_fused_adamw?|"
              r"fused_sgd|resourceapply|applygradientdescent|applymomentum|applyadam|"
              r"optax/(?!losses)|apply_updates|scale_by_|" + _B + r"update_fn" + _E + "|"
              + _words("sgd(?:_\\d+)?", "adam(?:_\\d+)?", "adamw(?:_\\d+)?", "lamb", "adagrad",
                       "rmsprop"))
_RECURRENT = (r"lstm|" + _B + r"gru|" + _B + r"rnn|cudnn_?rnn|rnn_blockpersist|elemwisernncell|"
              r"lstmblockcell|cudnnrnn")
_LOSS = (r"cross_?entropy|nll_?loss|ctc_?loss|ctcloss|log_?softmax|smooth_labels|"
         r"sparsesoftmaxcrossentropy|softmaxcrossentropy|" + _words("loss(?:_fn)?", "losses"))
_ATTENTION = (r"scaled_dot_product|" + _words("sdpa", "mha", "attn", "attend", "self_attn",
                                               "cross_attn")
              + r"|flash|fmha|attention|_efficient_attention|mem_eff")
# dgrad/wgrad (cuDNN's convolution backward kernels) only at the start of a word: "SigmoidGrad"
# and "BiasAddGrad" spell d-g-r-a-d too.
_CONV = (r"conv(?!ert)|fprop|" + _B + r"[dw]grad|implicit_gemm|implicit_convolve|winograd|fft2d_|"
         r"im2col|col2im|nchwtonhwc|nhwctonchw|depthwise")
_NORM = (r"batch_?norm|layer_?norm|group_?norm|rms_?norm|instance_?norm|normali[sz](?:ation|e)|"
         r"fusedbatchnorm|bn_fw|bn_bw|rowwisemoments|" + _words("bn\\d*", "ln\\d*", "ln_f",
                                                              "norm\\d*", "moments"))
_POOL = (r"pool|reduce[-_]?window|select[-_]?and[-_]?scatter|adaptive_avg|adaptiveavg|"
         r"avg_pool|max_pool")
_MATMUL = (r"gemm|gemv|cublas|cutlass|xmma|nvjet|matmul|einsum|" + _words(
    "mm", "addmm", "bmm", "baddbmm", "linear", "dot", "dot_general", "dense", "dense_\\d+",
    "densegeneral", "fc\\d*"))
_MEMCPY = (r"memcpy|memset|copy|" + _words("to", "clone", "contiguous", "transpose", "permute",
                                           "concatenate", "concat(?:v2)?", "cat", "slice",
                                           "dynamic[-_]?slice", "dynamic[-_]?update[-_]?slice",
                                           "pad", "bitcast", "reshape", "identity", "_eagerconst",
                                           "htod", "dtoh", "dtod", "catarraybatchedcopy")
           + r"|catarray|eagercopytodevice|memcpyh2d|memcpyd2h")
_GATHER = (r"embedding|" + _words("embed", "wte", "wpe", "gather", "gatherv2", "resourcegather",
                                   "index_select", "indexselect\\w*", "take", "take_along_axis",
                                   "scatter", "scatter[-_]add", "index_add")
           + r"|indexselect|index_put|embedding_dense_backward")
_ELEMENTWISE = (r"elementwise|elemwise|triton_poi|triton_red|triton_per|eigenmetakernel|"
                r"reduce_kernel|" + _words(
                    "add_?", "addv2", "addn", "sub", "subtract", "mul_?", "multiply", "div_?",
                    "divide", "realdiv", "truediv", "neg", "negate", "exp", "log", "sqrt", "rsqrt",
                    "pow", "power", "square", "squareddifference", "maximum", "minimum", "max",
                    "min", "relu", "relu_", "relugrad", "relu6", "re_lu(?:_\\d+)?", "gelu",
                    "gelugrad", "silu", "sigmoid", "sigmoidgrad", "tanh", "tanhgrad", "erf",
                    "select", "select_n", "selectv2", "where", "clamp", "clamp_min", "clip",
                    "threshold", "threshold_backward", "hardtanh", "hardtanh_backward", "dropout",
                    "native_dropout", "fill_?", "zero_?", "zeros", "ones", "ones_like",
                    "zeros_like", "abs", "sign", "compare", "convert", "convert_element_type",
                    "cast", "biasadd", "biasaddgrad", "addcmul_?", "addcdiv_?", "lerp_?", "reduce",
                    "reduce_sum", "reduce_max", "reduce_min", "reduce_precision", "sum", "mean",
                    "prod", "tile", "broadcast", "broadcast_in_dim", "broadcastto", "iota",
                    "rng", "rng_bit_generator", "random", "bernoulli_?", "activation"))

#: (class, regex) checked over context, layers and ops (step 2), in this order.
CONTEXT_RULES: tuple[tuple[str, str], ...] = (
    ("communication", _COMM), ("optimizer", _OPTIMIZER), ("recurrent", _RECURRENT),
    ("loss", _LOSS),
)
#: (class, regex) for layer names (step 3).
LAYER_RULES: tuple[tuple[str, str], ...] = (
    ("attention", _ATTENTION), ("normalisation", _NORM), ("convolution", _CONV),
    ("pooling", _POOL), ("loss", _LOSS),
    ("matmul", _words("dense", "dense_\\d+", "densegeneral", "linear", "fc\\d*", "fc_\\d+")),
    ("other", _words("embed", "embedding", "embedding_\\d+", "wte", "wpe")),
    ("elementwise", _words("re_lu(?:_\\d+)?", "relu", "activation(?:_\\d+)?", "dropout(?:_\\d+)?")),
)
#: PyTorch view ops: metadata only, no data moves (a host-side op on a CPU trace; "reshape"
#: of an XLA or TensorFlow program, by contrast, can be a real copy).
_TORCH_VIEW = (r"^aten::(?:reshape|view|_unsafe_view|expand|t|transpose|permute|as_strided|"
               r"squeeze|unsqueeze|flatten|select|slice|detach|alias|unflatten|split|chunk)$")
#: (class, regex) for op names (step 4), in table order for each name.
OP_RULES: tuple[tuple[str, str], ...] = (
    ("communication", _COMM), ("recurrent", _RECURRENT), ("attention", _ATTENTION),
    ("loss", _LOSS + r"|softmax"), ("convolution", _CONV), ("normalisation", _NORM),
    ("pooling", _POOL), ("matmul", _MATMUL), ("other", _TORCH_VIEW),
    ("memory_copy", _MEMCPY), ("other", _GATHER),
    ("elementwise", _ELEMENTWISE),
)

_COMPILED: dict[tuple[tuple[str, str], ...], tuple[tuple[str, re.Pattern[str]], ...]] = {}


def _compiled(rules: tuple[tuple[str, str], ...]) -> tuple[tuple[str, re.Pattern[str]], ...]:
    c = _COMPILED.get(rules)
    if c is None:
        c = tuple((cls, re.compile(rx, re.IGNORECASE)) for cls, rx in rules)
        _COMPILED[rules] = c
    return c


def _first(rules: tuple[tuple[str, str], ...], names: Iterable[str], *,
           rule_major: bool) -> str | None:
    names = [n for n in names if n]
    comp = _compiled(rules)
    if rule_major:  # the first rule that matches any name
        for cls, rx in comp:
            if any(rx.search(n) for n in names):
                return cls
        return None
    for n in names:  # the first name that matches any rule
        for cls, rx in comp:
            if rx.search(n):
                return cls
    return None


def classify(ops: Sequence[str] = (), layers: Sequence[str] = (), context: Sequence[str] = (),
             phase: str | None = None) -> str:
    """The op class (a key of :data:`OP_CLASSES`) of one piece of device or op time.

    Args:
        ops: names of the op itself, most trusted first (see the module docstring).
        layers: layer names, innermost first (dotted Keras names: only the last part counts).
        context: enclosing names (annotations, scopes, source functions), any order.
        phase: ``"t_u"`` if the op is part of the optimizer update, else anything.

    Returns:
        The class key; ``"other"`` when no rule matches (never raises).

    A pure function of its arguments over the fixed rule tables, so results are memoised
    (:func:`_classify`): a trace repeats each kernel once per traced step, and two passes
    (op-class totals, timeline rows) ask for every op's class (~50 us a call on the dev CPU,
    1.5 s of a 15,000-op XLA:CPU transformer trace before the memo).
    """
    return _classify(tuple(ops), tuple(layers), tuple(context), phase)


@functools.lru_cache(maxsize=1 << 16)
def _classify(ops: tuple[str, ...], layers: tuple[str, ...], context: tuple[str, ...],
              phase: str | None) -> str:
    """:func:`classify` of hashable arguments (memoised)."""
    if phase == "t_u":
        return "optimizer"
    short = [ln.rsplit(".", 1)[-1] if "." in ln and not ln.endswith("__call__") else ln
             for ln in layers if ln]
    hit = _first(CONTEXT_RULES, [*context, *short, *ops], rule_major=True)
    if hit:
        return hit
    hit = _first(LAYER_RULES, short, rule_major=False)
    if hit:
        return hit
    return _first(OP_RULES, ops, rule_major=False) or "other"


def label(cls: str) -> str:
    """Display label of a class key (the key itself if unknown)."""
    return OP_CLASSES.get(cls, cls)
