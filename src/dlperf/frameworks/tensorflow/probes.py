"""TensorFlow probes: the profiler's FLOP count of the traced train step, the kernels of the
ceiling microbenchmarks (:mod:`dlperf.measure.ceilings`), memory peaks and versions.

FLOPs: ``tf.compat.v1.profiler.profile(graph, options=float_operation())`` over the graph of the
step traced by ``tf.function`` (nothing runs): it adds the ``flops`` statistics TensorFlow
registers per op type (MatMul, Conv2D and their gradient kernels, element-wise ops...), so it
counts more op kinds than the analytic convention and than PyTorch's counter; ops without a
registered statistic (e.g. fused cuDNN RNN kernels) count 0.

Memory: CPU: peak RSS, and ``get_memory_info("CPU:0")``'s peak as ``peak_allocated_bytes``
(TensorFlow's CPU allocator, since the process's first op: it is not reset) where the build
tracks it (tensorflow-cpu 2.21 does); None where it raises. That allocator (oneDNN's CPU
allocator) counts only the allocations of :data:`CPU_TRACKED_MIN_BYTES` or more, which it
takes from its BFC pool; smaller ones go to ``malloc`` uncounted (checked with
tensorflow-cpu 2.21: a 262,140-byte tensor leaves the count at 0, a 262,144-byte one adds
262,144). So the CPU number is the peak of the large tensors, a lower bound, and a peak of 0
means no tensor was that large (a small model at a small batch), not that nothing was
allocated: it is reported as None (unknown), with peak RSS. GPU:
``tf.config.experimental.get_memory_info("GPU:0")`` peak (as ``peak_allocated_bytes``, the BFC
allocator's peak in use; reset when the run is prepared) and current, plus NVML's device view;
TensorFlow does not expose its reserved pool, so ``peak_reserved_bytes`` is None (NVML
``used`` includes it, plus the CUDA context). Versions: tensorflow, keras, and CUDA/cuDNN of
the build (``tf.sysconfig.get_build_info()``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from dlperf import nvml
from dlperf.env import cpu_model
from dlperf.frameworks.common import memory_record

#: Smallest allocation TensorFlow's oneDNN CPU allocator counts in ``get_memory_info("CPU:0")``
#: (its ``kSmallAllocationsThreshold``, 256 KiB; measured with tensorflow-cpu 2.21: module
#: docstring).
CPU_TRACKED_MIN_BYTES = 262_144


def count_graph_flops(tf: Any, concrete_fn: Any) -> dict[str, Any]:
    """Float operations of a concrete function's graph, by TensorFlow's profiler."""
    from tensorflow.python.profiler import model_analyzer, option_builder

    opts = option_builder.ProfileOptionBuilder.float_operation()
    opts["output"] = "none"
    prof = model_analyzer.profile(graph=concrete_fn.graph, options=opts)
    return {"flops_per_step": float(prof.total_float_ops) or None, "bytes_per_step": None,
            "source": "tf.compat.v1.profiler float_operation() over the traced step graph",
            "bytes_source": None}


def count_step_flops(tf: Any, fn: Any, traced: bool, first_batch: Any,
                     local_replicas: int | None) -> dict[str, Any]:
    """The profiler's count (:func:`count_graph_flops`) of the training step ``fn`` for
    ``first_batch``. Graph modes: ``fn`` is the ``tf.function`` already traced (no retrace);
    eager: a trace of the same Python step (``tf.function(fn)``), never run.

    ``local_replicas`` (data parallel, else None): ``fn`` is the distributed step, holding
    one copy of the replica step per local device (every rank traces the same, so collective
    keys stay matched) and ``first_batch`` the distributed batch; one device's share is the
    count over the local replicas (MFU is per device, per-device batch).
    """
    g = fn if traced else tf.function(fn)
    if local_replicas is None:
        return count_graph_flops(tf, g.get_concrete_function(
            *[tf.TensorSpec.from_tensor(t) for t in first_batch]))
    out = count_graph_flops(tf, g.get_concrete_function(*first_batch))
    if out["flops_per_step"]:
        out["flops_per_step"] /= local_replicas
        out["source"] += (f" (tf.distribute step over {local_replicas} local replica(s), "
                          f"divided by {local_replicas}; collectives count 0)")
    return out


def memory(tf: Any, gpu: bool, nvml_target: tuple[str | None, int] | None
           ) -> dict[str, int | None]:
    """Memory peaks in bytes (module docstring): ``peak_rss_bytes``, ``peak_allocated_bytes``,
    ``current_allocated_bytes`` (where TensorFlow tracks them; on a CPU None also where its
    allocator counted nothing, which means no tensor of :data:`CPU_TRACKED_MIN_BYTES` or more,
    not none at all), ``peak_reserved_bytes`` (None) and ``nvml_used_bytes`` (GPU
    ``nvml_target = (uuid, index)``; None on a CPU)."""
    m = memory_record()
    if gpu:
        info = tf.config.experimental.get_memory_info("GPU:0")
        m["peak_allocated_bytes"] = int(info["peak"])
        m["current_allocated_bytes"] = int(info["current"])
        if nvml_target is not None:
            m["nvml_used_bytes"] = nvml.memory_used_bytes(*nvml_target)
        return m
    try:  # TensorFlow's CPU allocator tracks its peak too (since its first op)
        info = tf.config.experimental.get_memory_info("CPU:0")
    except (ValueError, RuntimeError):  # not tracked by this build
        return m
    if int(info["peak"]) > 0:  # 0: only small tensors, which it does not count (unknown)
        m["peak_allocated_bytes"] = int(info["peak"])
        m["current_allocated_bytes"] = int(info["current"])
    return m


def versions(tf: Any, keras: Any, gpu: bool) -> dict[str, Any]:
    """``framework``, ``tensorflow``, ``keras``, the build's ``cuda`` / ``cudnn``,
    ``cuda_build``, ``device_name`` (the GPU's, or the CPU model) and a GPU's ``capability``."""
    build_info = dict(tf.sysconfig.get_build_info())
    out: dict[str, Any] = {
        "framework": "tensorflow", "tensorflow": tf.__version__, "keras": keras.__version__,
        "cuda": build_info.get("cuda_version"), "cudnn": build_info.get("cudnn_version"),
        "nccl": None, "cuda_build": bool(build_info.get("is_cuda_build"))}
    if gpu:
        details = tf.config.experimental.get_device_details(
            tf.config.get_visible_devices("GPU")[0])
        out["device_name"] = details.get("device_name")
        cc = details.get("compute_capability")
        out["capability"] = ".".join(map(str, cc)) if cc else None
    else:
        out["device_name"] = cpu_model()
    return out


class TfCeilings:
    """:class:`~dlperf.measure.ceilings.CeilingBackend` for TensorFlow on ``dev``."""

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
