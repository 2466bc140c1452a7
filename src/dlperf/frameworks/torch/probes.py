"""PyTorch probes: the compile counters read around the measured segment (:class:`CompileWatch`),
and after the measurement the FLOP and byte counts of one iteration and the kernels of the
ceiling microbenchmarks (:mod:`dlperf.measure.ceilings`).

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

from dlperf.frameworks.torch.step import apply_precision

#: How many distinct graph-break reasons a result keeps (their count is complete).
MAX_BREAK_REASONS = 5
#: The ``torch.compile`` modes that capture CUDA graphs (where Inductor may skip a graph).
CUDAGRAPH_MODES = ("reduce-overhead", "max-autotune")


def graph_break_reasons(counters: Any) -> dict[str, int]:
    """Dynamo's graph breaks so far: first line of each reason -> how many times, most first.

    Dynamo files a break under ``counters["graph_break"]`` when it splits a frame and resumes
    after the unsupported code (``print``, data-dependent control flow), and under
    ``counters["unimplemented"]`` when it stops tracing at something it does not support, such
    as an ``nn.LSTM`` module with ``torch._dynamo.config.allow_rnn`` off (the default in torch
    2.11-2.13: the embedding and dropout before it are compiled, the LSTM and everything after
    it run eagerly; measured on torch 2.13 CPU, one graph of two ops for ``lstm``). Both count:
    reading only the first would record 0 breaks for the LSTM.
    """
    out: dict[str, int] = {}
    for kind in ("graph_break", "unimplemented"):
        for reason, n in counters[kind].items():
            key = str(reason).strip().splitlines()[0][:200] if str(reason).strip() else kind
            out[key] = out.get(key, 0) + int(n)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


class CompileWatch:
    """``torch.compile`` (graph mode) and its counters, read around the measured segment.

    TorchDynamo + Inductor in ``mode`` (:data:`dlperf.config.COMPILE_MODES`; ``default``
    unless ``--compile-mode`` says otherwise): forward and backward are compiled (the backward
    through AOTAutograd, on the first backward call); the optimizer update stays eager, as in
    PyTorch's own training recipes. Compilation happens in the first iteration, which the
    harness reports apart; compile time is read from Dynamo's ``compilation_time_metrics`` and
    the number of compiled graphs from its counters, so a graph compiled during the measured
    segment (a recompile) is detected. In the CUDA-graph modes (``reduce-overhead``,
    ``max-autotune``) Inductor may decline to capture a graph (CPU tensors, mutated inputs,
    ...): ``cudagraph_skips`` in :meth:`info` counts those, from Inductor's counter (on CUDA
    only; the CPU has no CUDA graphs); 0 means every compiled graph ran as a CUDA graph.
    ``graph_breaks`` and ``graph_break_reasons``: :func:`graph_break_reasons`.
    """

    def __init__(self, torch: Any, mode: str = "default", cuda: bool = False) -> None:
        from torch._dynamo.utils import compilation_time_metrics, counters

        self.torch, self.mode, self.cuda = torch, mode, cuda
        self._times, self._counters = compilation_time_metrics, counters
        self._graphs_at_measure: int | None = None
        # Fresh counters (one configuration per process anyway): Dynamo's reset() drops its
        # caches but not these module-level tallies, so a second watch in one process (the
        # tests' in-process runs) would count the first one's graphs and compile time too.
        torch._dynamo.reset()
        counters.clear()
        compilation_time_metrics.clear()

    def compile(self, model: Any) -> Any:
        """``torch.compile(model)`` in this watch's mode."""
        if self.mode == "default":
            return self.torch.compile(model)
        return self.torch.compile(model, mode=self.mode)

    @property
    def flags(self) -> dict[str, Any]:
        """``flags["compile"]``: backend, mode, fullgraph."""
        return {"backend": "inductor", "mode": self.mode, "fullgraph": False}

    def graphs(self) -> int:
        """Compiled graphs so far (Dynamo's ``unique_graphs``; a recompile adds one): two
        dict reads, about 50 ns on the dev CPU, as the harness calls it after every step
        (``TrainingRun.compile_count``; docs/measurement.md, "Recompiles")."""
        return self._counters["stats"]["unique_graphs"]  # type: ignore[no-any-return]

    def on_phase(self, phase: str) -> None:
        """Snapshot the graph count right before the measured segment."""
        if phase == "measure":
            self._graphs_at_measure = self.graphs()

    def info(self) -> dict[str, Any]:
        """``{"compile_time_s", "n_compiles", "graph_breaks", "graph_break_reasons",
        "recompiles_measured", "compile_before_loop_s"}`` (+ ``cudagraph_skips`` in the CUDA-graph modes on CUDA)."""
        t = sum(self._times.get("_compile.compile_inner", []))
        t += sum(self._times.get("backward._backward_impl", []))
        reasons = graph_break_reasons(self._counters)
        n = self.graphs()
        at = n if self._graphs_at_measure is None else self._graphs_at_measure
        info = {"compile_time_s": t, "n_compiles": n, "graph_breaks": sum(reasons.values()),
                "graph_break_reasons": dict(list(reasons.items())[:MAX_BREAK_REASONS]),
                "recompiles_measured": n - at,
                # compilation is lazy: all of it happens inside steps
                "compile_before_loop_s": 0.0}
        if self.mode in CUDAGRAPH_MODES and self.cuda:
            info["cudagraph_skips"] = int(self._counters["inductor"]["cudagraph_skips"])
        return info


def count_step(torch: Any, step: Callable[[], Any]) -> dict[str, Any]:
    """Run ``step`` once under the FLOP counter and the byte counter; return the counts."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten
    from torch.utils.flop_counter import FlopCounterMode

    class BytesCounter(TorchDispatchMode):
        """Sum of operand and result bytes of every non-view ATen operator, and how many
        operators (views apart) one step dispatches."""

        def __init__(self) -> None:
            super().__init__()
            self.total = 0
            self.ops = 0
            self.views = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if getattr(func, "is_view", False):
                self.views += 1
            else:
                self.ops += 1
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
            # what a per-operator host cost multiplies (docs/perfmodel.md): the eager step's
            # ATen operators below autograd, without and with views
            "aten_ops_per_step": bc.ops, "aten_views_per_step": bc.views,
            "source": "torch.utils.flop_counter.FlopCounterMode (matmul/conv/attention, fwd+bwd)",
            "bytes_source": "sum of ATen operator operands and results (unfused, no cache)"}


class TorchCeilings:
    """:class:`~dlperf.measure.ceilings.CeilingBackend` for PyTorch on ``dev``."""

    framework = "torch"

    def __init__(self, torch: Any, dev: Any) -> None:
        self.torch, self.dev = torch, dev
        self.device_kind = "cuda" if dev.type == "cuda" else "cpu"
        self.device_key = f"{dev.type}:{dev.index or 0}" if dev.type == "cuda" else "cpu"

    @contextlib.contextmanager
    def precision(self, precision: str) -> Iterator[None]:
        """TF32 on for ``tf32`` only, for matmuls (restored afterwards)."""
        b = self.torch.backends
        if hasattr(b.cuda.matmul, "fp32_precision"):  # PyTorch >= 2.9 API
            knobs = [(b.cuda.matmul, "fp32_precision"), (b.cudnn.conv, "fp32_precision"),
                     (b.cudnn.rnn, "fp32_precision")]
        else:  # pragma: no cover - older PyTorch
            knobs = [(b.cuda.matmul, "allow_tf32"), (b.cudnn, "allow_tf32")]
        before = [(o, k, getattr(o, k)) for o, k in knobs]
        apply_precision(self.torch, "tf32" if precision == "tf32" else "fp32")
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

    def host_copy(self, nbytes: int, pinned: bool) -> Callable[[], Any]:
        """A copy of ``nbytes`` from host memory (page-locked if ``pinned``) into the
        device's; on a CPU device, a host memcpy (pinned memory needs a GPU: refused).

        Raises:
            RuntimeError: ``pinned`` on a CPU device.
        """
        t = self.torch
        if pinned and self.device_kind != "cuda":
            raise RuntimeError("pinned host memory needs a GPU: the device is the host")
        src = t.ones(nbytes, dtype=t.uint8, pin_memory=pinned)
        dst = t.empty(nbytes, dtype=t.uint8, device=self.dev)
        return lambda: dst.copy_(src, non_blocking=pinned)

    def block(self, out: Any) -> None:  # noqa: D102
        if self.device_kind == "cuda":
            self.torch.cuda.synchronize(self.dev)

    def release(self) -> None:  # noqa: D102
        if self.device_kind == "cuda":
            self.torch.cuda.empty_cache()
