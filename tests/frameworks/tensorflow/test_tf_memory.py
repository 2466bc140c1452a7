"""The TensorFlow memory claim of docs/measurement.md (issue 23 item 6), checked: on the CPU
``peak_allocated_bytes`` is TensorFlow's CPU allocator peak (``get_memory_info("CPU:0")``)
where the build tracks it, and None (never a made-up number) where it does not."""

from __future__ import annotations

import types

import pytest

pytest.importorskip("tensorflow")

from dlperf.frameworks.tensorflow.adapter import import_tf  # noqa: E402
from dlperf.frameworks.tensorflow.probes import memory  # noqa: E402

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
