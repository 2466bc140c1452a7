#!/usr/bin/env python
"""In one process, the plain TensorFlow loop against dlperf's model, step and harness.

Across processes (``benchmarks/overhead.py --framework tensorflow``) a shared 2-core CPU varies
by 10-50% from process to process, which hides a few percent. Here every variant is built in
one process and trained by the same ``tf.function`` step (forward, float32 cross-entropy,
``tf.GradientTape``, the Keras optimizer of the model), in alternating blocks of ``--steps``
steps (the order reversed every second block), so the ratio of two variants' block times
compares the *models* only. This is how Keras's generic LSTM loop was found to cost 1.3-1.5x
the step of a hand-written one on the CPU (``benchmarks/results/cpu-dev/COMMANDS.md``).

Variants (``--variants``, comma-separated):

* ``plain`` or ``plain:IMPL``: the model of ``benchmarks/plain_tf_loop.py`` (IMPL is its
  ``--lstm-impl``: fused, keras, keras_rnn), the step above, a bare loop;
* ``dlperf``: ``dlperf.zoo``'s Keras model with dlperf's optimizer, the same step, a bare loop;
* ``dlperf-step``: dlperf's whole fused ``step()`` (``TensorFlowAdapter.prepare`` in
  ``--mode``: its model, optimizer, data pool and ``tf.function``), a bare loop;
* ``dlperf-harness``: that step under dlperf's harness (``harness.loop.measure`` with the
  session's timer, a block = its measured segment): what ``dlperf run`` times.

    python benchmarks/tf_model_ab.py --model lstm --batch-size 16 --threads 2 \
        --variants plain:keras,plain:fused,dlperf --blocks 6 --steps 5 --json out.json
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv: list[str] | None = None) -> int:
    """Build the variants, warm each up, time alternating blocks, print and write ratios."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--threads", type=int, default=None, help="intra-op N, inter-op 1")
    p.add_argument("--variants", default="plain,dlperf")
    p.add_argument("--blocks", type=int, default=6)
    p.add_argument("--steps", type=int, default=5, help="steps per block")
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--mode", default="graph", choices=("graph", "xla"),
                   help="tf.function, or with jit_compile (every variant)")
    p.add_argument("--json", metavar="OUT.json")
    a = p.parse_args(argv)
    variants = a.variants.split(",")

    os.environ["KERAS_BACKEND"] = "tensorflow"
    import tensorflow as tf

    if a.threads:
        tf.config.threading.set_intra_op_parallelism_threads(a.threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.set_visible_devices([], "GPU")
    tf.config.experimental.enable_tensor_float_32_execution(False)
    import keras
    import plain_tf_loop as plain

    from dlperf.frameworks.base import build_model
    from dlperf.frameworks.tensorflow.adapter import TensorFlowAdapter
    from dlperf.frameworks.tensorflow.step import make_optimizer
    from dlperf.zoo import get_spec

    spec = get_spec(a.model)
    keras.utils.set_random_seed(0)
    B = a.batch_size

    def make(variant: str):
        if variant in ("dlperf-step", "dlperf-harness"):
            return make_session(variant)
        if variant.startswith("plain"):
            impl = variant.partition(":")[2] or "fused"
            model, kind, shape, classes, opt, _ = plain.build_model(a.model, impl)
        else:
            _, model = build_model(spec, "tensorflow", "Keras",
                                   around=lambda: tf.device("/CPU:0"))
            opt, _ = make_optimizer(keras, spec, {})
            kind, classes = spec.input_kind, spec.num_classes
            c_h_w = tuple(spec.input_shape)
            shape = (*c_h_w[1:], c_h_w[0]) if kind == "image" else c_h_w
        tvars = list(model.trainable_variables)
        opt.build(tvars)
        batches = plain.synthetic_batches(tf, B, kind, shape, classes, 0)

        step = tf.function(plain.make_train_step(tf, model, opt, tvars, classes),
                           jit_compile=a.mode == "xla")

        def block(n):
            t0 = time.perf_counter()
            for i in range(n):
                loss = step(*batches[i % 4])
            loss.numpy()
            return (time.perf_counter() - t0) / n

        return block, sum(int(math.prod(v.shape)) for v in tvars)

    def make_session(variant: str):
        from dlperf.config import IterationPolicy, make_run_config
        from dlperf.measure.loop import measure

        cfg = make_run_config(model=a.model, batch_size=B, device="cpu", framework="tensorflow",
                              mode=a.mode, threads=a.threads)
        s = TensorFlowAdapter().prepare(cfg, spec)
        n_params = spec.params  # dlperf's Keras models have exactly the spec's count

        def bare(n):
            t0 = time.perf_counter()
            for _ in range(n):
                loss = s.step()
            loss.numpy()
            return (time.perf_counter() - t0) / n

        def harness(n):
            pol = IterationPolicy(min_iters=n, max_iters=n, min_time_s=0.0, warmup_window=2,
                                  min_warmup_iters=0, max_warmup_iters=0)
            r = measure(s.step, s.timer, pol)  # one unmeasured first step, then n measured
            return r.wall_s / len(r.measured_s)

        return (bare if variant == "dlperf-step" else harness), n_params

    runs = {v: make(v) for v in variants}
    for block, _ in runs.values():
        block(a.warmup)
    times: dict[str, list[float]] = {v: [] for v in variants}
    gc.collect()
    gc.disable()
    for blk in range(a.blocks):
        for v in (variants if blk % 2 == 0 else variants[::-1]):
            times[v].append(runs[v][0](a.steps))
    gc.enable()

    base = variants[0]
    out = {"model": a.model, "batch_size": B, "threads": a.threads, "mode": a.mode,
           "blocks": a.blocks,
           "steps": a.steps, "load_average_end": list(os.getloadavg()), "variants": {}}
    for v in variants:
        med = statistics.median(times[v])
        ratios = [b / t for b, t in zip(times[base], times[v])]
        out["variants"][v] = {"params": runs[v][1], "block_mean_step_s": times[v],
                              "median_step_s": med,
                              "throughput_vs_first": ratios,
                              "median_throughput_vs_first": statistics.median(ratios)}
        print(f"{v:<14} params={runs[v][1]:,} median {med * 1e3:.1f} ms/step, throughput / "
              f"{base}: {statistics.median(ratios):.3f} (blocks: "
              f"{', '.join(f'{r:.3f}' for r in ratios)})", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
