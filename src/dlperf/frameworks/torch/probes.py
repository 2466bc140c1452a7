"""PyTorch probes run after the measurement: FLOP and byte counts of one iteration, and the
kernels of the ceiling microbenchmarks (:mod:`dlperf.perfmodel.ceilings`).

* FLOPs: ``torch.utils.flop_counter.FlopCounterMode`` over one eager iteration (forward,
  backward, optimizer): it counts matrix multiplications, convolutions and attention (forward
  and backward) by their shapes, 2 FLOPs per multiply-add; element-wise work is not counted.
* Bytes: :class:`BytesCounter`, a ``TorchDispatchMode`` summing the sizes of the tensor operands
  and results of every ATen operator that is not a view: the traffic of unfused eager execution
  if nothing stayed in cache (an upper bound of what reaches device memory; fusion lowers it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any


def count_step(torch: Any, step: Callable[[], Any]) -> dict[str, Any]:
    """Run ``step`` once under the FLOP counter and the byte counter; return the counts."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten
    from torch.utils.flop_counter import FlopCounterMode

    class BytesCounter(TorchDispatchMode):
        """Sum of operand and result bytes of every non-view ATen operator."""

        def __init__(self) -> None:
            super().__init__()
            self.total = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if not getattr(func, "is_view", False):
                for t in tree_flatten((args, kwargs or {}, out))[0]:
                    if isinstance(t, torch.Tensor):
                        self.total += t.numel() * t.element_size()
            return out

    fc = FlopCounterMode(display=False)
    bc = BytesCounter()
    with fc, bc:
        step()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return {"flops_per_step": float(fc.get_total_flops()) or None,
            "bytes_per_step": float(bc.total) or None,
            "source": "torch.utils.flop_counter.FlopCounterMode (matmul/conv/attention, fwd+bwd)",
            "bytes_source": "sum of ATen operator operands and results (unfused, no cache)"}


class TorchCeilings:
    """:class:`~dlperf.perfmodel.ceilings.CeilingBackend` for PyTorch on ``dev``."""

    framework = "torch"

    def __init__(self, torch: Any, dev: Any) -> None:
        self.torch, self.dev = torch, dev
        self.device_kind = "cuda" if dev.type == "cuda" else "cpu"
        self.device_key = f"{dev.type}:{dev.index or 0}" if dev.type == "cuda" else "cpu"

    @contextlib.contextmanager
    def precision(self, precision: str) -> Iterator[None]:
        """TF32 on for ``tf32`` only, for matmuls (restored afterwards)."""
        from dlperf.frameworks.torch.adapter import TorchAdapter

        b = self.torch.backends
        if hasattr(b.cuda.matmul, "fp32_precision"):  # PyTorch >= 2.9 API
            knobs = [(b.cuda.matmul, "fp32_precision"), (b.cudnn.conv, "fp32_precision"),
                     (b.cudnn.rnn, "fp32_precision")]
        else:  # pragma: no cover - older PyTorch
            knobs = [(b.cuda.matmul, "allow_tf32"), (b.cudnn, "allow_tf32")]
        before = [(o, k, getattr(o, k)) for o, k in knobs]
        TorchAdapter.apply_precision(self.torch, "tf32" if precision == "tf32" else "fp32")
        try:
            yield
        finally:
            for o, k, v in before:
                setattr(o, k, v)

    def matmul(self, n: int, precision: str) -> Callable[[], Any]:  # noqa: D102
        t = self.torch
        dtype = t.bfloat16 if precision == "bf16" else t.float32
        g = t.Generator(device=self.dev).manual_seed(0)
        a = t.randn(n, n, device=self.dev, dtype=dtype, generator=g)
        b = t.randn(n, n, device=self.dev, dtype=dtype, generator=g)
        return lambda: t.mm(a, b)

    def scale(self, nbytes: int) -> Callable[[], Any]:  # noqa: D102
        t = self.torch
        x = t.ones(nbytes // 4, device=self.dev, dtype=t.float32)
        y = t.empty_like(x)
        return lambda: t.mul(x, 2.0, out=y)

    def block(self, out: Any) -> None:  # noqa: D102
        if self.device_kind == "cuda":
            self.torch.cuda.synchronize(self.dev)

    def release(self) -> None:  # noqa: D102
        if self.device_kind == "cuda":
            self.torch.cuda.empty_cache()
