"""The model spec: one framework-independent description per model.

A :class:`ModelSpec` carries everything a framework implementation, the data layer, the
harness and the (future) performance model need to know about a model without importing any
framework: input shape, number of classes or vocabulary, the analytic parameter count and the
analytic training FLOPs per sample, each with its source.

FLOP convention (used by every spec, and by MFU later):
    * only matrix multiplications and convolutions are counted, as 2 FLOPs per multiply-add
      (the convention of ``torch.utils.flop_counter`` and of MFU in Chowdhery et al. 2022,
      PaLM, appendix B); element-wise ops, normalisation, pooling and softmax are not;
    * ``forward_flops_per_sample`` is the forward pass of one sample;
    * ``train_flops_per_sample = 3 * forward_flops_per_sample``: the backward pass costs two
      forward passes (one for the input gradients, one for the weight gradients), Kaplan et al.
      2020, "Scaling Laws for Neural Language Models", sec. 2.1. The first layer needs no input
      gradient, so a profiler's count of a real step is slightly below 3x; tests allow that.
    * attention counts its two batched matmuls (scores ``Q K^T`` and ``P V``) in full, also
      when causal: ``4 * T_q * T_k * d_model`` per layer and sample (PaLM appendix B counts the
      same); recurrent cells count their input and recurrent matmuls at every step.

Inputs, targets and loss (the contract every framework adapter implements; the defaults are
those of the first models, so their specs set none of the fields below):

    ===============  =====================  ==================  ============================
    ``input_kind``   x (one sample)         y (one sample)      model output (one sample)
    ===============  =====================  ==================  ============================
    ``vector``       float32 ``(F,)``       int64 ``()``        ``(num_classes,)``
    ``image``        float32 ``(C, H, W)``  int64 ``()``        ``(num_classes,)``
    ``tokens``       int64 ``(T,)``         int64 target_shape  ``(*target_shape, V)``
    ``token_pairs``  int64 ``(2, T)``       int64 target_shape  ``(*target_shape, V)``
    ``spectrogram``  float32 ``(F, T)``     int64 target_shape  ``(T_out, num_classes)``
    ``custom``       any tensor             any tensor          what the loss takes
    ===============  =====================  ==================  ============================

    ``custom`` (models from a source, :mod:`dlperf.zoo.sources`): the source's batch maker
    and loss define x, y and the output; the adapters call its hooks (below).

    * ``target_shape`` (:attr:`ModelSpec.targets`): ``()`` for vector/image, ``input_shape``
      for tokens unless the spec sets it (bert: ``(n_predictions,)``), ``(T,)`` for token
      pairs (``x[:, 0]`` is the source, ``x[:, 1]`` the decoder input, i.e. the target shifted
      right), ``(S,)`` for a spectrogram (``S`` characters per utterance).
    * synthetic data: floats ~ N(0, 1); token ids uniform in ``[0, num_classes)``; targets
      uniform in ``[0, num_classes)``, except for ``ctc`` where they are uniform in
      ``[1, num_classes)`` (0 is the CTC blank). Every utterance is full length and every
      transcript has exactly ``S`` characters (fixed shapes: no padding, no masks).
    * ``loss``:
        - ``ce``: mean softmax cross-entropy of ``out.reshape(-1, num_classes)`` against
          ``y.reshape(-1)``, with label smoothing ``eps = label_smoothing`` (0 by default):
          the target distribution is ``(1 - eps) * one_hot(y) + eps / num_classes``
          (Szegedy et al. 2016; ``torch.nn.functional.cross_entropy(label_smoothing=eps)``,
          ``optax.smooth_labels``, Keras ``label_smoothing``);
        - ``mlm``: masked-LM cross-entropy; the model itself gathers the (fixed) masked
          positions before its output head and returns ``(n_predictions, V)`` logits per
          sample, so the loss is computed exactly like ``ce``;
        - ``ctc``: CTC (Graves et al. 2006) of the per-frame log-softmax of the output against
          ``y``, blank 0, input lengths all ``T_out``, target lengths all ``S``; per
          utterance divided by ``S`` and then averaged over the batch (PyTorch ``ctc_loss``
          ``reduction="mean"``; with optax/Keras: the per-utterance CTC loss / ``S``, mean);
        - ``custom``: the loss of a model from a source (``file:`` and entry points), returned
          by its implementation module's ``loss_fn(spec)`` hook.
    * :attr:`ModelSpec.default_io` is True for a spec that needs nothing beyond the first three
      rows with default targets and plain ``ce`` (every model before this table grew, and
      vgg16, googlenet, gpt2_small); the PyTorch adapter handles those itself and asks the
      model's implementation module (hooks ``synthetic_batch(spec, batch_size, generator,
      device) -> (x, y)`` and ``loss_fn(spec) -> callable(out, y)``) for the others.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

InputKind = Literal["vector", "image", "tokens", "token_pairs", "spectrogram", "custom"]
#: The zoo's families, and one per model source (``sources.<source>``: the package
#: ``dlperf.zoo.sources.<source>`` holds its ``<framework>_impl`` modules).
Family = Literal["fcn", "cnn", "rnn", "transformer", "sources.hf", "sources.timm",
                 "sources.custom"]
LossKind = Literal["ce", "mlm", "ctc", "custom"]


@dataclass(frozen=True)
class OptimizerSpec:
    """The optimizer that is part of a model's spec (the same in every framework).

    ``name`` is ``"sgd"`` (with ``momentum``) or ``"adam"``/``"adamw"`` (with ``betas`` and
    ``eps``, whose defaults 0.9, 0.999, 1e-8 are PyTorch's and optax's; Keras's default epsilon
    is 1e-7, so adapters pass ``eps`` explicitly; only the Adam family reads them); ``lr`` is
    the learning rate; AdamW's ``weight_decay`` is decoupled (Loshchilov & Hutter 2019).
    dlperf measures speed, so the values matter only for the loss curve of real-data runs.
    """

    name: Literal["sgd", "adam", "adamw"] = "sgd"
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8


@dataclass(frozen=True)
class ModelSpec:
    """A framework-independent model description.

    Attributes:
        name: registry name, e.g. ``"resnet50"`` or ``"resnet50_tiny"``.
        family: ``fcn``, ``cnn``, ``rnn`` or ``transformer``; ``sources.hf``,
            ``sources.timm`` or ``sources.custom`` for a model from a source.
        input_kind: ``vector`` (float features), ``image`` (float CHW), ``tokens`` (int ids),
            ``token_pairs`` (int ids, source and decoder input), ``spectrogram`` (float,
            frequency bins x frames) or ``custom`` (a source's own); see the module docstring.
        input_shape: shape of one sample without the batch dimension: ``(features,)``,
            ``(C, H, W)``, ``(seq_len,)``, ``(2, seq_len)`` or ``(bins, frames)``.
        num_classes: output classes; for a language model, the vocabulary size; for CTC the
            characters including the blank (index 0).
        params: analytic number of trainable parameters (exact; tests compare every
            implementation with it); for a model from a source, counted on the built model.
        forward_flops_per_sample: analytic forward FLOPs of one sample (see module docstring);
            for a model from a source, counted by the framework's FLOP counter, or None where
            it could not be counted (``flops_source`` says why).
        source: where the architecture comes from (paper, docs/zoo.md row).
        flops_source: where the counting formula (or the counter) comes from.
        optimizer: the optimizer of the spec.
        tiny_of: for a tiny variant, the name of the full model; ``None`` otherwise.
        real_data: data-set names this model can train on besides synthetic data.
        hyper: the architecture's sizes (layer widths, hidden size, ...), for implementations.
        loss: ``ce`` (default), ``mlm``, ``ctc`` or ``custom`` (module docstring).
        label_smoothing: label smoothing of the ``ce`` loss (0 = none).
        target_shape: shape of one sample's target; ``None`` = the input kind's default
            (:attr:`targets`).
        code: a fingerprint of the code that builds the model, for a model from a source
            (:func:`code_fingerprint`): of a ``file:`` model's file, an entry point's module
            file, an ``hf:`` model's resolved config; ``None`` for the zoo's own models (their
            code is dlperf's, whose commit each result records). A point measured with
            another fingerprint is measured again (:mod:`dlperf.resume`).
    """

    name: str
    family: Family
    input_kind: InputKind
    input_shape: tuple[int, ...]
    num_classes: int
    params: int
    forward_flops_per_sample: int | None
    source: str
    flops_source: str
    optimizer: OptimizerSpec = field(default_factory=OptimizerSpec)
    tiny_of: str | None = None
    real_data: tuple[str, ...] = ()
    hyper: dict = field(default_factory=dict, hash=False, compare=False)
    loss: LossKind = "ce"
    label_smoothing: float = 0.0
    target_shape: tuple[int, ...] | None = None
    code: str | None = None

    @property
    def targets(self) -> tuple[int, ...]:
        """Shape of one sample's integer target (module docstring table).

        ``target_shape`` when set; otherwise ``()`` (one class) for vector and image inputs,
        ``input_shape`` for tokens (a label per position) and ``input_shape[1:]`` for token
        pairs (a label per target position).
        """
        if self.target_shape is not None:
            return tuple(self.target_shape)
        if self.input_kind == "tokens":
            return tuple(self.input_shape)
        if self.input_kind == "token_pairs":
            return tuple(self.input_shape[1:])
        if self.input_kind == "spectrogram":
            raise ValueError(f"{self.name}: a spectrogram model needs target_shape")
        return ()

    @property
    def default_io(self) -> bool:
        """True for the original contract (vector/image/tokens, default targets, plain CE)."""
        return (self.input_kind in ("vector", "image", "tokens") and self.target_shape is None
                and self.loss == "ce" and self.label_smoothing == 0.0)

    @property
    def train_flops_per_sample(self) -> int | None:
        """Training FLOPs (forward + backward) per sample: 3 x forward (Kaplan 2020); None
        where the forward FLOPs are unknown."""
        f = self.forward_flops_per_sample
        return None if f is None else 3 * f

    @property
    def tokens_per_sample(self) -> int:
        """Tokens per sample for sequence models, else 0.

        ``tokens``: the sequence length (every input position is processed, also for BERT whose
        loss covers only the masked positions); ``token_pairs``: source plus target tokens
        (``2 * T``, the usual count of translation throughput); ``spectrogram``: the input
        frames (10 ms each, so tokens/s is 100x the seconds of audio per second).
        """
        if self.input_kind == "tokens":
            return self.input_shape[0]
        if self.input_kind == "token_pairs":
            return self.input_shape[0] * self.input_shape[1]
        if self.input_kind == "spectrogram":
            return self.input_shape[-1]
        return 0

    @property
    def is_tiny(self) -> bool:
        """True for a ``<name>_tiny`` CPU-test variant."""
        return self.tiny_of is not None


def code_fingerprint(*parts: bytes | str) -> str:
    """``sha256:`` and the first 16 hex digits of the SHA-256 of ``parts`` (bytes, or text as
    UTF-8), each preceded by its length so that no two lists of parts collide: what
    :attr:`ModelSpec.code` holds."""
    import hashlib

    h = hashlib.sha256()
    for p in parts:
        b = p.encode() if isinstance(p, str) else p
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return "sha256:" + h.hexdigest()[:16]
