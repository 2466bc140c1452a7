"""Counting a PyTorch model of a source: parameters and forward FLOPs (imports torch lazily).

The zoo's own specs carry analytic counts (:mod:`dlperf.zoo.spec`); a model from a source has
no formula, so its spec takes the parameter count from the built model and the FLOPs from
PyTorch's own counter, ``torch.utils.flop_counter.FlopCounterMode``, which counts matmuls and
convolutions as 2 FLOPs per multiply-add: the convention of every zoo spec. The forward of
``batch`` samples is counted and divided by ``batch``; training FLOPs are 3x forward as for
the zoo (Kaplan et al. 2020, sec. 2.1).

Models whose construction the source controls (Hugging Face, timm) are built on the ``meta``
device and run under ``FakeTensorMode``: no memory is allocated and no arithmetic is done, so
counting a 7-billion-parameter model takes about a second. Fake tensors (not bare meta
tensors) are needed because some library code asks a tensor for a value (transformers'
packed-sequence check calls ``.all()`` unless the tensor is fake, ``is_tracing``). On meta
tensors scaled-dot-product attention decomposes into its two batched matmuls, so attention
counts in full (also when causal), as in the zoo's convention.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: Recorded in ``spec.flops_source`` of every source spec counted here.
COUNTER = "torch.utils.flop_counter.FlopCounterMode"


def count_params(model: Any) -> int:
    """Trainable parameters of a ``torch.nn.Module`` (tied weights once: ``parameters()``
    yields each tensor once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def forward_flops_fake(model: Any, make_inputs: Callable[[], tuple[tuple, dict]],
                       batch: int = 1) -> int:
    """Forward FLOPs per sample of ``model`` (built on the ``meta`` device): ``make_inputs()``
    is called under ``FakeTensorMode`` and returns ``(args, kwargs)`` of meta tensors for a
    batch of ``batch`` samples; the count is divided by ``batch``.

    Raises whatever the model's forward raises on fake tensors (the caller records the count
    as unknown then).
    """
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with FakeTensorMode(allow_non_fake_inputs=True), torch.no_grad():
        args, kwargs = make_inputs()
        with counter:
            model(*args, **kwargs)
    return int(counter.get_total_flops()) // batch


def forward_flops_real(model: Any, args: tuple, batch: int) -> int:
    """Forward FLOPs per sample of ``model(*args)`` run for real (on the CPU, without
    gradients), for models the user built; the count of ``batch`` samples / ``batch``."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(*args)
    return int(counter.get_total_flops()) // batch


def torch_version() -> str:
    """The installed torch's version, for the ``flops_source`` text."""
    import torch

    return str(torch.__version__)
