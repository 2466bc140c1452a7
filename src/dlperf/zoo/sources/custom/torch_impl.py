"""PyTorch side of ``file:`` and entry-point models: check and count the user's parts, and
the adapter hooks ``build``, ``synthetic_batch``, ``loss_fn`` (contract:
:mod:`dlperf.zoo.sources.custom.contract`).

``build(spec)`` calls the user's function again (a fresh model for each run) and keeps that
call's batch maker and loss for the hooks, which the adapter calls after ``build`` in the same
process; a hook called before any ``build`` calls the function itself.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from dlperf.errors import ConfigError
from dlperf.zoo.sources import torch_count
from dlperf.zoo.sources.custom.contract import call_for, check_arity
from dlperf.zoo.spec import ModelSpec

#: spec name -> (make_batch, loss) of the latest ``build`` in this process.
_PARTS: dict[str, tuple[Any, Any]] = {}
#: Samples in the batch that checks and counts the parts.
CHECK_BATCH = 2


def accepts(model: Any) -> bool:
    """True for a ``torch.nn.Module``."""
    return isinstance(model, nn.Module)


def _check_batch(batch: Any, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    ok = (isinstance(batch, (tuple, list)) and len(batch) == 2
          and all(isinstance(t, torch.Tensor) and t.dim() >= 1 and t.shape[0] == CHECK_BATCH
                  for t in batch))
    if not ok:
        got = (f"({', '.join(_describe(t) for t in batch)})"
               if isinstance(batch, (tuple, list)) else _describe(batch))
        raise ConfigError(f"model {name!r}: make_batch({CHECK_BATCH}, generator, device) must "
                          f"return (x, y), two tensors of {CHECK_BATCH} rows; it returned {got}")
    return batch[0], batch[1]


def _describe(t: Any) -> str:
    if isinstance(t, torch.Tensor):
        return f"tensor {tuple(t.shape)} {str(t.dtype).removeprefix('torch.')}"
    return type(t).__name__


def inspect_parts(parts: tuple[Any, Any, Any], name: str) -> dict[str, Any]:
    """Run the parts once on the CPU and describe them for the spec: a batch of
    :data:`CHECK_BATCH` from ``make_batch``, the forward under ``FlopCounterMode`` (FLOPs per
    sample = count / CHECK_BATCH) and the loss, which must be a one-element float tensor.

    Returns ``input_kind`` (``tokens`` for 2-D integer ``x``, else ``custom``),
    ``input_shape``, ``target_shape``, ``num_classes`` (the output's last dimension, 0 if
    not a tensor), ``params``, ``forward_flops``, ``flops_source``, ``framework``,
    ``x_dtype``.

    Raises:
        ConfigError: a ``make_batch`` or ``loss`` of another signature
            (:func:`~dlperf.zoo.sources.custom.contract.check_arity`), or a batch, forward or
            loss that breaks the contract, naming what came back.
    """
    model, make_batch, loss = parts
    check_arity(make_batch, ("batch_size", "generator", "device"), "make_batch", name)
    check_arity(loss, ("out", "y"), "loss", name)
    g = torch.Generator().manual_seed(0)
    try:
        batch = make_batch(CHECK_BATCH, g, torch.device("cpu"))
    except Exception as e:
        raise ConfigError(f"model {name!r}: make_batch({CHECK_BATCH}, generator, device) "
                          f"failed: {e!r:.400}") from e
    x, y = _check_batch(batch, name)
    try:
        flops = torch_count.forward_flops_real(model, (x,), CHECK_BATCH)
        with torch.no_grad():
            out = model(x)
            value = loss(out, y)
    except Exception as e:
        raise ConfigError(f"model {name!r}: the forward or loss of a {CHECK_BATCH}-sample "
                          f"batch x {_describe(x)}, y {_describe(y)} failed: {e!r:.400}") from e
    if not (isinstance(value, torch.Tensor) and value.numel() == 1
            and value.is_floating_point()):
        raise ConfigError(f"model {name!r}: loss(out, y) must return a one-element float "
                          f"tensor; it returned {_describe(value)}")
    tokens = x.dim() == 2 and not x.is_floating_point()
    return {"input_kind": "tokens" if tokens else "custom", "input_shape": tuple(x.shape[1:]),
            "target_shape": tuple(y.shape[1:]),
            "num_classes": int(out.shape[-1]) if isinstance(out, torch.Tensor) and out.dim()
            else 0,
            "params": torch_count.count_params(model), "forward_flops": flops,
            "flops_source": (f"{torch_count.COUNTER} (torch {torch_count.torch_version()}): "
                             f"forward of a {CHECK_BATCH}-sample batch from make_batch on the "
                             "CPU / 2, counted by dlperf.zoo.sources.custom; train = 3 x "
                             "forward"),
            "framework": "torch", "x_dtype": str(x.dtype).removeprefix("torch.")}


def _call(spec: ModelSpec) -> tuple[Any, Any, Any]:
    return call_for(spec, "torch", accepts, "torch.nn.Module", _PARTS)


def build(spec: ModelSpec) -> nn.Module:
    """A fresh model from the user's function (called again); its batch maker and loss are
    kept for :func:`synthetic_batch` and :func:`loss_fn`."""
    return _call(spec)[0]


def _parts(spec: ModelSpec) -> tuple[Any, Any]:
    return _PARTS[spec.name] if spec.name in _PARTS else _call(spec)[1:]


def synthetic_batch(spec: ModelSpec, batch_size: int, generator: torch.Generator,
                    device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """The user's ``make_batch(batch_size, generator, device)``."""
    return _parts(spec)[0](batch_size, generator, torch.device(device))


def loss_fn(spec: ModelSpec):
    """The user's ``loss(out, y)``."""
    return _parts(spec)[1]
