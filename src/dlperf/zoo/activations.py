"""Activation memory of the zoo's models: the bytes one sample's forward pass leaves behind.

:func:`leaf_output_bytes` builds a model's PyTorch implementation on PyTorch's ``meta``
device (shapes only: no memory, no arithmetic; about 0.1 s a model) and adds up the
floating-point outputs of every leaf module for one sample, at 4 bytes a value. A training
step keeps most of them for the backward pass, so the sum is the usual first estimate of
activation memory (Sohoni et al. 2019, "Low-Memory Neural Network Training: A Technical
Report", section 2: activations dominate and scale linearly with the batch).

:data:`ACTIVATION_BYTES` holds the sum for every model of the zoo, so that the memory check
before a run (:mod:`dlperf.guards`) needs no framework import; ``tests/unit/test_zoo_activations.py``
recomputes it, and ``python -m dlperf.zoo.activations`` prints the table to paste here after a
model changes. Models from outside the zoo (``hf:``, ``timm:``, ``file:``) are not in it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ACTIVATION_BYTES", "leaf_output_bytes", "activation_bytes"]

#: Floating-point bytes of every leaf module's output for one sample, fp32 (4 bytes a value),
#: by zoo model name; from :func:`leaf_output_bytes`.
ACTIVATION_BYTES: dict[str, int] = {
    "alexnet": 4392864,
    "alexnet_cifar": 307240,
    "alexnet_cifar_tiny": 104488,
    "alexnet_tiny": 75944,
    "bert_base": 81580032,
    "bert_base_tiny": 120704,
    "deepspeech2": 6635600,
    "deepspeech2_tiny": 43792,
    "fcn5": 156160,
    "fcn5_tiny": 5120,
    "fcn8": 205312,
    "fcn8_tiny": 8192,
    "fcn_mnist": 57384,
    "fcn_mnist_tiny": 12328,
    "googlenet": 31491360,
    "googlenet_tiny": 81368,
    "gpt2_small": 651165696,
    "gpt2_small_tiny": 118784,
    "lstm": 1764000,
    "lstm_tiny": 648192,
    "resnet50": 128161696,
    "resnet50_tiny": 287272,
    "resnet56": 6390056,
    "resnet56_tiny": 442536,
    "transformer": 63963136,
    "transformer_tiny": 139264,
    "vgg16": 114704288,
    "vgg16_tiny": 157992,
}


def leaf_output_bytes(spec: Any) -> int:
    """The bytes (fp32) of the floating-point outputs of every leaf module of ``spec``'s PyTorch
    model for one sample (batch 1, eval mode: the same shapes as training), counted on the
    ``meta`` device.

    Raises:
        ImportError: PyTorch is not installed.
        Exception: whatever the model's build or forward raises on the meta device.
    """
    import torch

    from dlperf.zoo import build

    with torch.device("meta"):
        model = build(spec, "torch").eval()  # the same shapes; batch-norm takes batch 1
        ints = spec.input_kind in ("tokens", "token_pairs")
        x = torch.zeros((1, *spec.input_shape), dtype=torch.long if ints else torch.float32)
    total = 0

    def count(_module: Any, _inputs: Any, out: Any) -> None:
        nonlocal total
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                total += t.numel() * 4

    for m in model.modules():
        if not any(True for _ in m.children()):
            m.register_forward_hook(count)
    with torch.no_grad():
        model(x)
    return total


def activation_bytes(name: str) -> int | None:
    """:data:`ACTIVATION_BYTES` of the zoo model ``name``; ``None`` for a model outside the zoo."""
    return ACTIVATION_BYTES.get(name)


if __name__ == "__main__":  # prints the table (module docstring)
    from dlperf.zoo import SPECS

    for n in sorted(SPECS):
        print(f'    "{n}": {leaf_output_bytes(SPECS[n])},')
