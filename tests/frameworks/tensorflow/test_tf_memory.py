"""The TensorFlow memory claim of docs/measurement.md (issue 23 item 6), checked: on the CPU
``peak_allocated_bytes`` is TensorFlow's CPU allocator peak (``get_memory_info("CPU:0")``)
where the build tracks it, and None (never a made-up number) where it does not."""

from __future__ import annotations

import types

import pytest

pytest.importorskip("tensorflow")

from dlperf.frameworks.tensorflow.adapter import import_tf  # noqa: E402
from dlperf.frameworks.tensorflow.probes import CPU_TRACKED_MIN_BYTES, memory  # noqa: E402

tf, _keras = import_tf()


def test_cpu_allocator_peak_is_reported_where_the_build_tracks_it():
    x = tf.random.normal([512, 512])  # 1 MiB, then a product of the same size
    _ = tf.matmul(x, x).numpy()
    info = tf.config.experimental.get_memory_info("CPU:0")
    m = memory(tf, gpu=False, nvml_target=None)
    assert m["peak_allocated_bytes"] is not None, "this build tracks its CPU allocator"
    assert m["peak_allocated_bytes"] >= 2 * 512 * 512 * 4  # both tensors lived at once
    assert m["peak_allocated_bytes"] >= info["peak"] and m["peak_allocated_bytes"] <= m[
        "peak_rss_bytes"]
    assert m["peak_reserved_bytes"] is None and m["nvml_used_bytes"] is None


@pytest.mark.parametrize("err", [ValueError, RuntimeError])
def test_an_untracked_cpu_allocator_gives_none(err):
    def refuse(device):
        raise err(f"memory info is not available for {device}")

    fake_tf = types.SimpleNamespace(config=types.SimpleNamespace(
        experimental=types.SimpleNamespace(get_memory_info=refuse)))
    m = memory(fake_tf, gpu=False, nvml_target=None)
    assert m["peak_allocated_bytes"] is None and m["peak_rss_bytes"] > 0


def test_a_cpu_allocator_that_counted_nothing_gives_none_not_zero():
    """oneDNN's CPU allocator counts only tensors of 256 KiB or more: a peak of 0 (a small
    Keras model at batch 8, such as a small keras MLP) is unknown, not 0 bytes."""
    fake_tf = types.SimpleNamespace(config=types.SimpleNamespace(
        experimental=types.SimpleNamespace(get_memory_info=lambda d: {"current": 0,
                                                                      "peak": 0})))
    m = memory(fake_tf, gpu=False, nvml_target=None)
    assert m["peak_allocated_bytes"] is None and m.get("current_allocated_bytes") is None
    assert m["peak_rss_bytes"] > 0


def test_the_cpu_allocator_counts_only_tensors_of_256_kib_or_more():
    """The threshold the docstring of probes states, checked against this build (in a fresh
    process: this one's allocator has counted other tests' tensors)."""
    import subprocess
    import sys

    n = CPU_TRACKED_MIN_BYTES // 4  # float32 elements
    code = ("import tensorflow as tf; g = lambda: tf.config.experimental.get_memory_info("
            f"'CPU:0')['current']; a = tf.zeros({n - 1}, tf.float32); s = g(); "
            f"b = tf.zeros({n}, tf.float32); print(s, g() - s)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    small, large = map(int, out.stdout.split()[-2:])
    assert (small, large) == (0, CPU_TRACKED_MIN_BYTES)
