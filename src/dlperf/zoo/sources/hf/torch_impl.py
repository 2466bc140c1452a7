"""PyTorch side of ``hf:`` models: build the transformers model of a spec, count it.

The transformers model returns a ``ModelOutput``; dlperf's step calls ``model(x)`` and scores
a tensor of logits (zoo/spec.py contract), so :class:`Logits` wraps the model and maps the
batch to the model's keyword inputs: ``input_ids`` (tokens), ``input_ids`` and
``decoder_input_ids`` (token pairs ``x[:, 0]``, ``x[:, 1]``), ``pixel_values`` (images). The
wrapper adds no parameters (its parameter names gain a ``model.`` prefix). Token-pair models
are not ``default_io``; their batches and loss are the zoo Transformer's
(:func:`dlperf.zoo.transformer.torch_impl.synthetic_batch` and ``loss_fn``: uniform token ids,
mean cross-entropy over the target tokens).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from dlperf.zoo.sources import torch_count
from dlperf.zoo.sources.hf.spec import TASKS, make_config
from dlperf.zoo.spec import ModelSpec
from dlperf.zoo.transformer import torch_impl as _transformer


class Logits(nn.Module):
    """A transformers model as ``x -> logits``: ``[B, T]`` int64 -> ``[B, T, V]``; ``[B, 2,
    T]`` int64 (source, decoder input) -> ``[B, T, V]``; ``[B, C, H, W]`` float ->
    ``[B, num_labels]``."""

    def __init__(self, model: nn.Module, input_kind: str) -> None:
        super().__init__()
        self.model = model
        self.input_kind = input_kind

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The logits of batch ``x`` (class docstring)."""
        if self.input_kind == "token_pairs":
            return self.model(input_ids=x[:, 0], decoder_input_ids=x[:, 1]).logits
        if self.input_kind == "image":
            return self.model(pixel_values=x).logits
        return self.model(input_ids=x).logits


def _hf_model(hyper: dict[str, Any]) -> nn.Module:
    import transformers

    auto = getattr(transformers, TASKS[hyper["task"]][1])
    kwargs = {}
    if "attn" in hyper["options"]:
        kwargs["attn_implementation"] = hyper["options"]["attn"]
    try:
        return auto.from_config(make_config(hyper), **kwargs)
    except (ValueError, ImportError) as e:  # e.g. an attention implementation not installed
        from dlperf.errors import ConfigError

        raise ConfigError(f"model {hyper['name']!r}: transformers cannot build it: "
                          f"{str(e)[:400]}") from None


def build(spec: ModelSpec) -> nn.Module:
    """The :class:`Logits`-wrapped transformers model of ``spec`` (family ``sources.hf``),
    random weights on the CPU in float32 (the adapter moves it and sets precision)."""
    if spec.hyper.get("source") != "hf":
        raise ValueError(f"{spec.name} is not an hf: model")
    return Logits(_hf_model(spec.hyper), spec.input_kind)


def count(hyper: dict[str, Any], input_kind: str, input_shape: tuple[int, ...]
          ) -> dict[str, Any]:
    """Parameters and forward FLOPs per sample of the model of ``hyper``, built on the meta
    device (no memory, no arithmetic: :mod:`dlperf.zoo.sources.torch_count`).

    Returns ``params``, ``forward_flops`` (None if the forward cannot run on fake tensors),
    ``flops_source`` (the counter, or why there is no count), ``model_class`` and ``attn``
    (the attention implementation transformers chose).
    """
    with torch.device("meta"):
        hf = _hf_model(hyper)
    model = Logits(hf, input_kind)
    vocab = getattr(hf.config, "vocab_size", 2)

    def inputs():
        shape = (1, *input_shape)
        if input_kind == "image":
            return (torch.randn(shape, device="meta"),), {}
        return (torch.randint(0, vocab, shape, device="meta"),), {}

    where = (f"{torch_count.COUNTER} (torch {torch_count.torch_version()}): forward of one "
             "sample on fake meta tensors, counted by dlperf.zoo.sources.hf; train = 3 x "
             "forward")
    try:
        flops: int | None = torch_count.forward_flops_fake(model, inputs)
    except Exception as e:  # an op without a meta kernel: the count is unknown, not wrong
        flops, where = None, f"not counted: the forward failed on fake tensors ({e!r:.300})"
    return {"params": torch_count.count_params(model), "forward_flops": flops,
            "flops_source": where, "model_class": type(hf).__name__,
            "attn": getattr(hf.config, "_attn_implementation", None)}


def synthetic_batch(spec: ModelSpec, batch_size: int, generator: torch.Generator,
                    device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """One synthetic ``(x, y)`` batch of a token-pair (seq2seq) model: the zoo Transformer's
    (``x`` ``[B, 2, T]``, ``y`` ``[B, T]``, uniform ids)."""
    return _transformer.synthetic_batch(spec, batch_size, generator, device)


def loss_fn(spec: ModelSpec):
    """The loss of a token-pair (seq2seq) model: mean cross-entropy over the target tokens
    (the zoo Transformer's, with the spec's label smoothing, 0 here)."""
    return _transformer.loss_fn(spec)
