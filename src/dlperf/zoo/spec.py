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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

InputKind = Literal["vector", "image", "tokens"]
Family = Literal["fcn", "cnn", "rnn", "transformer"]


@dataclass(frozen=True)
class OptimizerSpec:
    """The optimizer that is part of a model's spec (the same in every framework).

    ``name`` is ``"sgd"`` (with ``momentum``) or ``"adam"``/``"adamw"``; ``lr`` is the learning
    rate. dlperf measures speed, so the values matter only for the loss curve of real-data runs.
    """

    name: Literal["sgd", "adam", "adamw"] = "sgd"
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 0.0


@dataclass(frozen=True)
class ModelSpec:
    """A framework-independent model description.

    Attributes:
        name: registry name, e.g. ``"resnet50"`` or ``"resnet50_tiny"``.
        family: ``fcn``, ``cnn``, ``rnn`` or ``transformer``.
        input_kind: ``vector`` (float features), ``image`` (float CHW) or ``tokens`` (int ids).
        input_shape: shape of one sample without the batch dimension: ``(features,)``,
            ``(C, H, W)`` or ``(seq_len,)``.
        num_classes: output classes; for a language model, the vocabulary size.
        params: analytic number of trainable parameters (exact; tests compare every
            implementation with it).
        forward_flops_per_sample: analytic forward FLOPs of one sample (see module docstring).
        source: where the architecture comes from (paper, MODELS.md row).
        flops_source: where the counting formula comes from.
        optimizer: the optimizer of the spec.
        tiny_of: for a tiny variant, the name of the full model; ``None`` otherwise.
        real_data: data-set names this model can train on besides synthetic data.
        hyper: the architecture's sizes (layer widths, hidden size, ...), for implementations.
    """

    name: str
    family: Family
    input_kind: InputKind
    input_shape: tuple[int, ...]
    num_classes: int
    params: int
    forward_flops_per_sample: int
    source: str
    flops_source: str
    optimizer: OptimizerSpec = field(default_factory=OptimizerSpec)
    tiny_of: str | None = None
    real_data: tuple[str, ...] = ()
    hyper: dict = field(default_factory=dict, hash=False, compare=False)

    @property
    def train_flops_per_sample(self) -> int:
        """Analytic training FLOPs (forward + backward) per sample: 3 x forward (Kaplan 2020)."""
        return 3 * self.forward_flops_per_sample

    @property
    def tokens_per_sample(self) -> int:
        """Tokens per sample for sequence models (the sequence length), else 0."""
        return self.input_shape[0] if self.input_kind == "tokens" else 0

    @property
    def is_tiny(self) -> bool:
        """True for a ``<name>_tiny`` CPU-test variant."""
        return self.tiny_of is not None
