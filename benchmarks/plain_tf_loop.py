#!/usr/bin/env python
"""A plain, hand-written TensorFlow 2 + Keras 3 training loop: the yardstick for dlperf's
TensorFlow harness overhead.

What it is for
--------------
dlperf's TensorFlow harness must reach at least 0.95 of the throughput this script reports for
the same model, batch size, precision, mode, thread count and device. This file is
deliberately *independent* of dlperf (it imports only tensorflow, keras, numpy and the
standard library) and is as close as reasonable to the fastest loop a TensorFlow user would
write by hand:

* one ``tf.function`` around forward + loss + ``tf.GradientTape`` gradient +
  ``optimizer.apply`` (``--mode graph``; ``--mode xla`` adds ``jit_compile=True``; ``--mode
  eager`` runs the same Python step op by op), traced once before anything is timed
  (``get_concrete_function``), optimizer slots built before the trace;
* synthetic data made on the device before timing (4 distinct batches, cycled);
* no host synchronisation inside the timed loop (on a CPU TensorFlow runs each call to
  completion anyway; on a GPU only the final read waits);
* warm-up steps excluded; Python's garbage collector off during the timed block.

How to run it
-------------
    python benchmarks/plain_tf_loop.py --model resnet50 --batch-size 4 --device cpu \
        --mode graph --threads 2 --warmup 3 --iters 10 --json out.json

    python benchmarks/plain_tf_loop.py --model lstm_tiny --batch-size 4 --device cpu \
        --warmup 2 --iters 5            # a quick CPU check

Models, with the architecture, trainable parameter count, loss and optimizer of dlperf's
TensorFlow models (``dlperf.zoo.*.tensorflow_impl``), written here again without looking at them
as code (only at what they compute):

* ``resnet50``: ResNet-50 v1.5 (torchvision layout: stride in the 3x3 conv, bias-free convs,
  BatchNorm momentum 0.9 / eps 1e-5), NHWC 224x224x3, 1000 classes, 25,557,032 params;
  PyTorch's padding (symmetric ``ZeroPadding2D`` + ``"valid"`` where TensorFlow's ``"same"``
  would put a stride-2 window one pixel off); SGD lr 0.01 momentum 0.9.
* ``lstm``: Zaremba et al. medium word LM (vocab 10,000, embedding and hidden 650, 2 layers,
  35 steps, dropout 0.5 after the embedding, between the layers and before the decoder),
  PyTorch's two bias vectors per layer, 19,780,400 params; SGD lr 1.0.
  ``--lstm-impl fused`` (default): each layer's input projection is one matmul over all time
  steps, the recurrence is unrolled in Python (T is static) with only ``h @ W_hh`` per step;
  ``--lstm-impl keras``: ``keras.layers.LSTM`` with a two-bias cell (its generic
  ``while_loop`` on a CPU, its cuDNN kernel on a GPU outside XLA).
* ``gpt2_small``: GPT-2 small (pre-LN, learned positions, tied bias-free output, GELU tanh,
  attention-probability and residual dropout 0.1, context 1024), 124,439,808 params; AdamW
  lr 6e-4, betas (0.9, 0.95), eps 1e-8, decoupled weight decay 0.1 on every variable.
* tiny variants with dlperf's tiny hyper-parameters: ``resnet50_tiny`` (511,514 params, 32x32,
  10 classes), ``lstm_tiny`` (666,896 params, 16 steps), ``gpt2_small_tiny`` (26,368 params).

Loss: mean softmax cross-entropy of the float32 logits (reshaped to ``[-1, classes]``) against
integer labels (every position for the language models). Language models report tokens/s =
samples/s x sequence length. Precision: fp32 = float32 with TensorFloat-32 off explicitly
(TensorFlow's default is on), tf32 = on, bf16 = the Keras ``mixed_bfloat16`` policy (float32
variables, bfloat16 compute, float32 loss). Threads (``--threads N``): intra-op pool N,
inter-op pool 1, as dlperf's ``--threads``; without it TensorFlow's defaults.

Timing: ``--warmup`` steps (the first one is also timed alone: graph optimisation or XLA
compilation happen in it), then one read of the loss, t0, ``--iters`` steps with no host sync,
a read of the final loss and of one updated variable, t1. Mean step time = (t1 - t0) / iters;
samples/s = batch / mean step time.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import sys
import time
from typing import Any

MODEL_NAMES = ("resnet50", "lstm", "gpt2_small", "resnet50_tiny", "lstm_tiny", "gpt2_small_tiny")

#: ResNet sizes: (stem width, stage widths, blocks per stage, image side, classes).
RESNET_SIZES = {
    "resnet50": (64, (64, 128, 256, 512), (3, 4, 6, 3), 224, 1000),
    "resnet50_tiny": (16, (16, 32, 64, 128), (1, 1, 1, 1), 32, 10),
}
#: LSTM LM sizes: (vocab, embedding, hidden, layers, steps, dropout).
LSTM_SIZES = {
    "lstm": (10000, 650, 650, 2, 35, 0.5),
    "lstm_tiny": (10000, 32, 32, 2, 16, 0.5),
}
#: GPT-2 sizes: (vocab, context, layers, d, heads, ffn, dropout).
GPT2_SIZES = {
    "gpt2_small": (50257, 1024, 12, 768, 12, 3072, 0.1),
    "gpt2_small_tiny": (256, 32, 2, 32, 2, 64, 0.1),
}


def build_model(name: str, lstm_impl: str = "fused"):
    """Return ``(keras model, input kind, per-sample input shape, classes, optimizer,
    optimizer description)`` for ``name`` (the Keras policy must be set before)."""
    import keras

    if name in RESNET_SIZES:
        stem, widths, blocks, side, classes = RESNET_SIZES[name]
        opt = keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)
        return (resnet(stem, widths, blocks, side, classes), "image", (side, side, 3), classes,
                opt, "keras.optimizers.SGD(lr=0.01, momentum=0.9)")
    if name in LSTM_SIZES:
        vocab, emb, hidden, layers, steps, p = LSTM_SIZES[name]
        opt = keras.optimizers.SGD(learning_rate=1.0)
        return (word_lm(vocab, emb, hidden, layers, steps, p, lstm_impl), "tokens", (steps,),
                vocab, opt, "keras.optimizers.SGD(lr=1.0)")
    if name in GPT2_SIZES:
        vocab, context = GPT2_SIZES[name][:2]
        opt = keras.optimizers.AdamW(learning_rate=6e-4, weight_decay=0.1, beta_1=0.9,
                                     beta_2=0.95, epsilon=1e-8)
        return (gpt2(*GPT2_SIZES[name]), "tokens", (context,), vocab, opt,
                "keras.optimizers.AdamW(lr=6e-4, b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.1)")
    raise ValueError(f"unknown model {name!r}; choose one of: {', '.join(MODEL_NAMES)}")


# --------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------


def resnet(stem: int, widths, blocks, side: int, classes: int):
    """ResNet v1.5 with bottlenecks (expansion 4), NHWC ``[B, side, side, 3]`` -> logits."""
    import keras

    L = keras.layers

    def conv(x, filters, k, s=1, p=0):
        # PyTorch's Conv2d(k, stride s, padding p): "same" where it gives the same windows
        # (stride 1, odd k), else symmetric zero padding + "valid".
        if s == 1 and p == (k - 1) // 2:
            return L.Conv2D(filters, k, padding="same", use_bias=False)(x)
        if p:
            x = L.ZeroPadding2D(p)(x)
        return L.Conv2D(filters, k, strides=s, padding="valid", use_bias=False)(x)

    def bn(x):
        return L.BatchNormalization(momentum=0.9, epsilon=1e-5)(x)

    inp = keras.Input((side, side, 3), dtype="float32")
    x = L.ReLU()(bn(conv(inp, stem, 7, 2, 3)))
    # MaxPool2d(3, 2, padding=1) after a ReLU: zero padding gives the same maxima as -inf.
    x = L.MaxPooling2D(3, 2, padding="valid")(L.ZeroPadding2D(1)(x))
    c_in = stem
    for i, (w, n) in enumerate(zip(widths, blocks)):
        for b in range(n):
            s = 2 if i > 0 and b == 0 else 1
            shortcut = x
            if s != 1 or c_in != 4 * w:
                shortcut = bn(conv(x, 4 * w, 1, s))
            y = L.ReLU()(bn(conv(x, w, 1)))
            y = L.ReLU()(bn(conv(y, w, 3, s, 1)))
            y = bn(conv(y, 4 * w, 1))
            x = L.ReLU()(L.Add()([y, shortcut]))
            c_in = 4 * w
    x = L.GlobalAveragePooling2D()(x)
    return keras.Model(inp, L.Dense(classes)(x), name="resnet")


def _lstm_layers():
    """The two LSTM layer classes (defined lazily: keras is imported after the CLI is read)."""
    import keras
    from keras import ops

    def add_torch_lstm_weights(layer, n_in: int) -> None:
        """PyTorch's LSTM weights on ``layer`` (``units`` H): ``kernel [n_in, 4H]``,
        ``recurrent_kernel [H, 4H]``, ``bias_ih`` and ``bias_hh [4H]``, all U(-1/sqrt(H),
        1/sqrt(H)) as ``torch.nn.LSTM`` initialises them."""
        H, k = layer.units, 1.0 / math.sqrt(layer.units)
        u = lambda: keras.initializers.RandomUniform(-k, k)  # noqa: E731
        layer.kernel = layer.add_weight((n_in, 4 * H), initializer=u(), name="kernel")
        layer.recurrent_kernel = layer.add_weight((H, 4 * H), initializer=u(),
                                                  name="recurrent_kernel")
        layer.bias_ih = layer.add_weight((4 * H,), initializer=u(), name="bias_ih")
        layer.bias_hh = layer.add_weight((4 * H,), initializer=u(), name="bias_hh")

    class FusedLSTM(keras.layers.Layer):
        """LSTM layer, gates (i, f, g, o), PyTorch's parameters (``kernel`` ``[in, 4H]``,
        ``recurrent_kernel`` ``[H, 4H]``, ``bias_ih``, ``bias_hh``), zero initial state.
        The input projection of every step is one matmul; the recurrence is unrolled.
        ``[B, T, in]`` -> ``[B, T, H]``."""

        def __init__(self, units: int, **kw):
            super().__init__(**kw)
            self.units = units

        def build(self, shape):
            add_torch_lstm_weights(self, shape[-1])

        def call(self, xs):
            xproj = ops.matmul(xs, ops.cast(self.kernel, xs.dtype))
            xproj = xproj + ops.cast(self.bias_ih + self.bias_hh, xs.dtype)  # [B, T, 4H]
            w_hh = ops.cast(self.recurrent_kernel, xs.dtype)
            # unstack, not xproj[:, t]: the gradient of T strided slices is T zero-filled
            # [B, T, 4H] tensors summed (25% of the lstm step on a CPU), unstack's one stack.
            steps = ops.unstack(xproj, axis=1)
            h = c = ops.zeros_like(steps[0][:, : self.units])
            hs = []
            for xp in steps:
                z = xp + ops.matmul(h, w_hh)
                i, f, g, o = ops.split(z, 4, axis=-1)
                c = ops.sigmoid(f) * c + ops.sigmoid(i) * ops.tanh(g)
                h = ops.sigmoid(o) * ops.tanh(c)
                hs.append(h)
            return ops.stack(hs, axis=1)

        def compute_output_shape(self, shape):
            return (*shape[:-1], self.units)

    class TwoBiasCell(keras.layers.LSTMCell):
        """``keras.layers.LSTMCell`` with PyTorch's two biases; ``bias`` is their sum."""

        def build(self, shape):
            keras.layers.Layer.build(self, shape)
            add_torch_lstm_weights(self, shape[-1])

        @property
        def bias(self):
            return ops.add(self.bias_ih, self.bias_hh)

    class TwoBiasLSTM(keras.layers.LSTM):
        """``keras.layers.LSTM`` (its cuDNN kernel on a GPU, else its ``while_loop``) running
        a :class:`TwoBiasCell`; returns the sequence."""

        def __init__(self, units: int, **kw):
            cell = TwoBiasCell(units, unit_forget_bias=False, name="lstm_cell")
            keras.layers.RNN.__init__(self, cell, return_sequences=True, **kw)
            self.input_spec = keras.layers.InputSpec(ndim=3)
            self.use_cudnn = "auto"

    return FusedLSTM, TwoBiasCell, TwoBiasLSTM


def word_lm(vocab: int, emb: int, hidden: int, layers: int, steps: int, p: float,
            lstm_impl: str = "fused"):
    """Zaremba et al. word LM: ``[B, steps]`` int64 -> ``[B, steps, vocab]`` logits."""
    import keras

    L = keras.layers
    FusedLSTM, TwoBiasCell, TwoBiasLSTM = _lstm_layers()
    inp = keras.Input((steps,), dtype="int64")
    x = L.Embedding(vocab, emb, embeddings_initializer=keras.initializers.RandomNormal(0, 1))(inp)
    x = L.Dropout(p)(x)
    for _layer in range(layers):
        if lstm_impl == "fused":
            x = FusedLSTM(hidden)(x)
        elif lstm_impl == "keras":
            x = TwoBiasLSTM(hidden)(x)
        else:
            x = L.RNN(TwoBiasCell(hidden, unit_forget_bias=False), return_sequences=True)(x)
        x = L.Dropout(p)(x)
    return keras.Model(inp, L.Dense(vocab)(x), name="word_lm")


def gpt2(vocab: int, context: int, layers: int, d: int, heads: int, ffn: int, p: float):
    """GPT-2 (pre-LN): ``[B, context]`` int64 -> ``[B, context, vocab]`` logits."""
    import keras
    import tensorflow as tf
    from keras import ops

    L = keras.layers
    normal = lambda s=0.02: keras.initializers.RandomNormal(0.0, s)  # noqa: E731
    resid = 0.02 / math.sqrt(2 * layers)

    class Positions(L.Layer):
        """Adds the learned ``[context, d]`` position table."""

        def build(self, shape):
            self.table = self.add_weight((context, d), initializer=normal(), name="wpe")

        def call(self, x):
            return x + ops.cast(self.table[: x.shape[1]], x.dtype)

    class CausalAttention(L.Layer):
        """``qkv [B, T, 3d]`` -> ``[B, T, d]``: causal softmax(q k^T / sqrt(dh)), dropout."""

        def __init__(self, **kw):
            super().__init__(**kw)
            self.drop = L.Dropout(p)

        def call(self, qkv, training=None):
            T, dh = qkv.shape[1], d // heads
            q, k, v = [ops.transpose(ops.reshape(t, (-1, T, heads, dh)), (0, 2, 1, 3))
                       for t in ops.split(qkv, 3, axis=-1)]
            s = ops.matmul(q, ops.transpose(k, (0, 1, 3, 2))) * ops.cast(dh ** -0.5, q.dtype)
            keep = tf.constant(np_tril(T))
            s = ops.where(keep, s, ops.cast(-1e9, s.dtype))
            y = ops.matmul(self.drop(ops.softmax(s, axis=-1), training=training), v)
            return ops.reshape(ops.transpose(y, (0, 2, 1, 3)), (-1, T, d))

        def compute_output_shape(self, shape):
            return (*shape[:-1], d)

    class TiedLogits(L.Layer):
        """``x @ wte^T`` with the token embedding's table (tracked once)."""

        def __init__(self, emb, **kw):
            super().__init__(**kw)
            self._table = lambda: emb.embeddings

        def call(self, x):
            return ops.matmul(x, ops.transpose(ops.cast(self._table(), x.dtype)))

        def compute_output_shape(self, shape):
            return (*shape[:-1], vocab)

    def dense(n, init=None, act=None):
        return L.Dense(n, activation=act, kernel_initializer=init or normal(),
                       bias_initializer="zeros")

    inp = keras.Input((context,), dtype="int64")
    wte = L.Embedding(vocab, d, embeddings_initializer=normal())
    x = L.Dropout(p)(Positions()(wte(inp)))
    for _ in range(layers):
        a = CausalAttention()(dense(3 * d)(L.LayerNormalization(epsilon=1e-5)(x)))
        x = x + L.Dropout(p)(dense(d, normal(resid))(a))
        m = dense(ffn, act=lambda t: keras.activations.gelu(t, approximate=True))(
            L.LayerNormalization(epsilon=1e-5)(x))
        x = x + L.Dropout(p)(dense(d, normal(resid))(m))
    logits = TiedLogits(wte)(L.LayerNormalization(epsilon=1e-5)(x))
    return keras.Model(inp, logits, name="gpt2")


def np_tril(t: int):
    """``[t, t]`` boolean lower-triangular mask (numpy)."""
    import numpy as np

    return np.tril(np.ones((t, t), dtype=bool))


# --------------------------------------------------------------------------------------------
# Measurement
# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, configure TensorFlow (threads, devices, precision) before it
    runs anything, build, warm up, time, print one line and optionally write JSON."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="one of: " + ", ".join(MODEL_NAMES))
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--precision", choices=("fp32", "tf32", "bf16"), default="fp32")
    p.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    p.add_argument("--mode", choices=("graph", "xla", "eager"), default="graph",
                   help="graph: tf.function; xla: tf.function(jit_compile=True); eager")
    p.add_argument("--threads", type=int, default=None,
                   help="intra-op threads (inter-op 1), as dlperf's --threads")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--json", metavar="OUT.json", help="write the result as JSON here")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lstm-impl", choices=("fused", "keras", "keras_rnn"), default="fused",
                   help="LSTM layer: fused (one input-projection matmul, unrolled recurrence), "
                        "keras (keras.layers.LSTM with a two-bias cell) or keras_rnn "
                        "(keras.layers.RNN around that cell)")
    args = p.parse_args(argv)

    if args.model not in MODEL_NAMES:
        p.error(f"unknown model {args.model!r}; choose one of: {', '.join(MODEL_NAMES)}")
    if args.batch_size < 1 or args.iters < 1 or args.warmup < 1:
        p.error("--batch-size, --iters and --warmup must be >= 1")
    if args.threads is not None and args.threads < 1:
        p.error("--threads must be >= 1")

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ["KERAS_BACKEND"] = "tensorflow"
    import tensorflow as tf

    # Before TensorFlow runs any op: thread pools, visible devices, GPU memory growth.
    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    gpus = tf.config.list_physical_devices("GPU")
    if args.device == "gpu":
        if not gpus:
            p.error("--device gpu requested but TensorFlow sees no GPU")
        tf.config.set_visible_devices(gpus[0], "GPU")
        tf.config.experimental.set_memory_growth(gpus[0], True)
    elif gpus:
        tf.config.set_visible_devices([], "GPU")
    tf.config.experimental.enable_tensor_float_32_execution(args.precision == "tf32")
    return run(args, tf)


def synthetic_batches(tf, batch: int, kind: str, in_shape, classes: int, seed: int,
                      n: int = 4) -> list:
    """``n`` synthetic ``(x, y)`` batches made on the current device before timing: token ids
    ``[batch, T]`` int64 with next-token targets of the same shape (``kind == "tokens"``), else
    float32 inputs ``[batch, *in_shape]`` and int64 labels ``[batch]`` in ``[0, classes)``."""
    out = []
    for i in range(n):
        sx, sy = (seed, 2 * i), (seed, 2 * i + 1)
        if kind == "tokens":
            x = tf.random.stateless_uniform((batch, *in_shape), sx, 0, classes, tf.int64)
            y = tf.random.stateless_uniform((batch, *in_shape), sy, 0, classes, tf.int64)
        else:
            x = tf.random.stateless_normal((batch, *in_shape), sx, dtype=tf.float32)
            y = tf.random.stateless_uniform((batch,), sy, 0, classes, tf.int64)
        out.append((x, y))
    return out


def make_train_step(tf, model, opt, tvars: list, classes: int):
    """One SGD iteration ``(x, y) -> loss``: forward, float32 cross-entropy over every
    position (``[-1, classes]`` logits), gradient, ``opt.apply`` on ``tvars``. Not yet a
    ``tf.function``: the caller wraps it (graph or ``jit_compile``)."""
    def train_step(x, y):
        with tf.GradientTape() as tape:
            logits = tf.reshape(tf.cast(model(x, training=True), tf.float32), [-1, classes])
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=tf.reshape(y, [-1]), logits=logits))
        opt.apply(tape.gradient(loss, tvars), tvars)
        return loss
    return train_step


def run(args, tf) -> int:
    """Build, trace, warm up and time the step (module docstring); 0 on success."""
    import keras

    keras.mixed_precision.set_global_policy(
        "mixed_bfloat16" if args.precision == "bf16" else "float32")
    keras.utils.set_random_seed(args.seed)
    dev = "/GPU:0" if args.device == "gpu" else "/CPU:0"
    B = args.batch_size
    with tf.device(dev):
        model, kind, in_shape, classes, opt, opt_desc = build_model(args.model, args.lstm_impl)
        tvars = list(model.trainable_variables)
        opt.build(tvars)
        batches = synthetic_batches(tf, B, kind, in_shape, classes, args.seed)
    n_params = sum(int(math.prod(v.shape)) for v in tvars)
    tokens_per_sample = in_shape[0] if kind == "tokens" else 0

    train_step = make_train_step(tf, model, opt, tvars, classes)

    trace_s = 0.0
    step = train_step
    if args.mode != "eager":
        step = tf.function(train_step, jit_compile=args.mode == "xla")
        t = time.perf_counter()
        step.get_concrete_function(*[tf.TensorSpec.from_tensor(t_) for t_ in batches[0]])
        trace_s = time.perf_counter() - t
    smallest = min(tvars, key=lambda v: math.prod(v.shape))

    t = time.perf_counter()
    loss = step(*batches[0])
    first_loss = float(loss.numpy())
    first_call_s = time.perf_counter() - t
    t = time.perf_counter()
    for i in range(1, args.warmup):
        loss = step(*batches[i % 4])
    loss.numpy()
    warmup_s = first_call_s + time.perf_counter() - t

    gc.collect()
    gc.disable()  # no collection mid-block
    try:
        t0 = time.perf_counter()
        for i in range(args.iters):
            loss = step(*batches[(args.warmup + i) % 4])
        final_loss = float(loss.numpy())
        smallest.numpy()  # the last update has run too
        t1 = time.perf_counter()
    finally:
        gc.enable()
    traces = int(step.experimental_get_tracing_count()) if args.mode != "eager" else 0

    total = t1 - t0
    mean_step_s = total / args.iters
    policy = keras.mixed_precision.global_policy()
    result: dict[str, Any] = {
        "model": args.model,
        "batch_size": B,
        "precision": args.precision,
        "device": args.device,
        "mode": args.mode,
        "iters": args.iters,
        "warmup": args.warmup,
        "mean_step_s": mean_step_s,
        "samples_per_s": B / mean_step_s,
        "tokens_per_s": B * tokens_per_sample / mean_step_s,
        "total_s": total,
        "compile_s": trace_s + first_call_s,
        "trace_s": trace_s,
        "first_call_s": first_call_s,
        "warmup_s": warmup_s,
        "first_loss": first_loss,
        "final_loss": final_loss,
        "params": n_params,
        "seq_len": tokens_per_sample or None,
        "traces": traces,
        "flags": {
            "mode": args.mode,
            "jit_compile": args.mode == "xla",
            "tf32": bool(tf.config.experimental.tensor_float_32_execution_enabled()),
            "keras_policy": policy.name,
            "compute_dtype": policy.compute_dtype,
            "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
            "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
            "optimizer": opt_desc,
            "layout": "NHWC" if kind == "image" else None,
            "lstm_impl": args.lstm_impl if args.model.startswith("lstm") else None,
            "onednn_opts": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default (on for x86)"),
            "gc_disabled_in_block": True,
        },
        "tensorflow_version": tf.__version__,
        "keras_version": keras.__version__,
        "python_version": platform.python_version(),
        "device_name": (tf.config.experimental.get_device_details(
            tf.config.get_visible_devices("GPU")[0]).get("device_name")
            if args.device == "gpu" else platform.processor() or platform.machine()),
    }

    line = (f"{args.model} bs={B} {args.precision} {args.device} {args.mode} "
            f"params={n_params:,}: {mean_step_s * 1e3:.3f} ms/step, "
            f"{result['samples_per_s']:.2f} samples/s")
    if tokens_per_sample:
        line += f", {result['tokens_per_s']:.0f} tokens/s"
    print(line, flush=True)

    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
