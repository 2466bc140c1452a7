"""TensorFlow probes: the profiler's FLOP count of the traced train step, and the kernels of the
ceiling microbenchmarks (:mod:`dlperf.perfmodel.ceilings`).

FLOPs: ``tf.compat.v1.profiler.profile(graph, options=float_operation())`` over the graph of the
step traced by ``tf.function`` (nothing runs): it adds the ``flops`` statistics TensorFlow
registers per op type (MatMul, Conv2D and their gradient kernels, element-wise ops...), so it
counts more op kinds than the analytic convention and than PyTorch's counter; ops without a
registered statistic (e.g. fused cuDNN RNN kernels) count 0.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any


def count_graph_flops(tf: Any, concrete_fn: Any) -> dict[str, Any]:
    """Float operations of a concrete function's graph, by TensorFlow's profiler."""
    from tensorflow.python.profiler import model_analyzer, option_builder

    opts = option_builder.ProfileOptionBuilder.float_operation()
    opts["output"] = "none"
    prof = model_analyzer.profile(graph=concrete_fn.graph, options=opts)
    return {"flops_per_step": float(prof.total_float_ops) or None, "bytes_per_step": None,
            "source": "tf.compat.v1.profiler float_operation() over the traced step graph",
            "bytes_source": None}


class TfCeilings:
    """:class:`~dlperf.perfmodel.ceilings.CeilingBackend` for TensorFlow on ``dev``."""

    framework = "tensorflow"

    def __init__(self, tf: Any, dev: str, gpu: bool) -> None:
        self.tf, self.dev = tf, dev
        self.device_kind = "cuda" if gpu else "cpu"
        self.device_key = "cuda:0" if gpu else "cpu"

    @contextlib.contextmanager
    def precision(self, precision: str) -> Iterator[None]:
        """TensorFloat-32 on for ``tf32`` only (restored afterwards)."""
        cfg = self.tf.config.experimental
        before = cfg.tensor_float_32_execution_enabled()
        cfg.enable_tensor_float_32_execution(precision == "tf32")
        try:
            yield
        finally:
            cfg.enable_tensor_float_32_execution(before)

    def matmul(self, n: int, precision: str) -> Callable[[], Any]:  # noqa: D102
        import numpy as np

        tf = self.tf
        rng = np.random.default_rng(0)
        with tf.device(self.dev):
            a, b = (tf.constant(rng.standard_normal((n, n), np.float32)) for _ in range(2))
            if precision == "bf16":
                a, b = tf.cast(a, tf.bfloat16), tf.cast(b, tf.bfloat16)
        f = tf.function(tf.linalg.matmul)

        def run():
            with tf.device(self.dev):
                return f(a, b)

        return run

    def scale(self, nbytes: int) -> Callable[[], Any]:  # noqa: D102
        tf = self.tf
        with tf.device(self.dev):
            x = tf.ones((nbytes // 4,), tf.float32)
        f = tf.function(lambda v: v * 2.0)

        def run():
            with tf.device(self.dev):
                return f(x)

        return run

    def block(self, out: Any) -> None:  # noqa: D102
        # One element to the host: waits for the kernel (not for a copy of the whole result).
        out[(0,) * len(out.shape)].numpy()

    def release(self) -> None:  # noqa: D102
        pass
