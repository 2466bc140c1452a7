#!/usr/bin/env python
"""A plain, hand-written JAX training loop: the yardstick for dlperf's JAX harness overhead.

What it is for
--------------
dlperf's JAX harness must reach at least 0.95 of the throughput this script reports for the
same model, batch size, precision and device. This file is deliberately *independent* of
dlperf (it does not import it: only jax, flax.linen, optax and the standard library) and is as
close as reasonable to the fastest loop a JAX user would write by hand:

* one ``jax.jit`` of forward + loss + grad + optax update, the train state donated
  (``donate_argnums=0``) so parameters and optimizer state are updated in place;
* the step compiled ahead of time (``.lower(...).compile()``), so the compile is never timed;
* synthetic data generated on the device before timing (4 batches, cycled);
* no host synchronisation inside the timed loop.

How to run it
-------------
    python benchmarks/plain_jax_loop.py --model resnet50 --batch-size 128 --precision bf16 \
        --device gpu --warmup 30 --iters 200 --json out.json

    python benchmarks/plain_jax_loop.py --model lstm_tiny --batch-size 4 --device cpu \
        --warmup 2 --iters 5            # a quick CPU check

Models: resnet50 (ResNet-50 v1.5, NHWC, 25,557,032 params), lstm (Zaremba medium word LM,
19,780,400 params), and the CPU-test variants resnet50_tiny and lstm_tiny.
Precision: fp32 -> ``jax.default_matmul_precision("highest")``; tf32 -> "tensorfloat32";
bf16 -> compute in bfloat16 with float32 parameters (and a float32 loss).

Timing: ``--warmup`` steps, then block_until_ready on state and loss, t0, ``--iters`` steps
with no host sync, block_until_ready on the final state and loss, t1.
Mean step time = (t1 - t0) / iters; samples/s = batch / mean step time.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import json
import platform
import sys
import time
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import flax.linen as nn
import optax

MODEL_NAMES = ("resnet50", "lstm", "resnet50_tiny", "lstm_tiny")

# --------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------

# torchvision's conv init (kaiming normal, fan_out); speed does not depend on it.
conv_init = nn.initializers.variance_scaling(2.0, "fan_out", "normal")


class Bottleneck(nn.Module):
    """ResNet v1.5 bottleneck: the stride sits in the 3x3 conv."""

    width: int
    stride: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, train: bool):
        conv = functools.partial(nn.Conv, use_bias=False, dtype=self.dtype,
                                 param_dtype=jnp.float32, kernel_init=conv_init)
        norm = functools.partial(nn.BatchNorm, use_running_average=not train, momentum=0.9,
                                 epsilon=1e-5, dtype=self.dtype, param_dtype=jnp.float32)
        cout = self.width * 4
        residual = x
        y = nn.relu(norm()(conv(self.width, (1, 1))(x)))
        y = conv(self.width, (3, 3), strides=(self.stride, self.stride),
                 padding=((1, 1), (1, 1)))(y)
        y = nn.relu(norm()(y))
        y = norm()(conv(cout, (1, 1))(y))
        if self.stride != 1 or x.shape[-1] != cout:
            residual = conv(cout, (1, 1), strides=(self.stride, self.stride))(x)
            residual = norm()(residual)
        return nn.relu(y + residual)


class ResNet(nn.Module):
    """ResNet v1.5 (torchvision layout), NHWC. ``small_input`` uses a 3x3 stride-1 stem
    without max-pool (for the 32x32 tiny variant)."""

    stage_sizes: Sequence[int]
    widths: Sequence[int]
    stem_width: int = 64
    num_classes: int = 1000
    small_input: bool = False
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, train: bool = True):
        x = x.astype(self.dtype)
        if self.small_input:
            x = nn.Conv(self.stem_width, (3, 3), padding=((1, 1), (1, 1)), use_bias=False,
                        dtype=self.dtype, kernel_init=conv_init)(x)
        else:
            x = nn.Conv(self.stem_width, (7, 7), strides=(2, 2), padding=((3, 3), (3, 3)),
                        use_bias=False, dtype=self.dtype, kernel_init=conv_init)(x)
        x = nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-5,
                         dtype=self.dtype)(x)
        x = nn.relu(x)
        if not self.small_input:
            x = nn.max_pool(x, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
        for i, (n, width) in enumerate(zip(self.stage_sizes, self.widths)):
            for j in range(n):
                stride = 2 if (i > 0 and j == 0) else 1
                x = Bottleneck(width, stride, dtype=self.dtype)(x, train)
        x = jnp.mean(x, axis=(1, 2))
        return nn.Dense(self.num_classes, dtype=self.dtype)(x)


class LSTMLayer(nn.Module):
    """One LSTM layer with cuDNN's parameters (W_ih, W_hh, b_ih, b_hh; gates i, f, g, o).
    The input projection is one matmul for all time steps; lax.scan runs the recurrence."""

    hidden: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, xs):  # xs: [B, T, in]
        H = self.hidden
        k = 1.0 / (H ** 0.5)
        init = nn.initializers.uniform(2 * k)
        shift = lambda f: (lambda key, shape, dtype=jnp.float32: f(key, shape, dtype) - k)  # noqa: E731
        w_ih = self.param("w_ih", shift(init), (xs.shape[-1], 4 * H))
        w_hh = self.param("w_hh", shift(init), (H, 4 * H))
        b_ih = self.param("b_ih", shift(init), (4 * H,))
        b_hh = self.param("b_hh", shift(init), (4 * H,))
        dt = self.dtype
        xs = xs.astype(dt)
        w_hh_c = w_hh.astype(dt)
        # [T, B, 4H]: transpose the (small) input first so the projection comes out time-major.
        xproj = jnp.einsum("tbi,ih->tbh", jnp.swapaxes(xs, 0, 1), w_ih.astype(dt))
        xproj = xproj + (b_ih + b_hh).astype(dt)
        B = xs.shape[0]

        def cell(carry, xp):
            h, c = carry
            gates = xp + h @ w_hh_c
            i, f, g, o = jnp.split(gates, 4, axis=-1)
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            h = (jax.nn.sigmoid(o) * jnp.tanh(c)).astype(dt)
            return (h, c), h

        h0 = jnp.zeros((B, H), dt)
        c0 = jnp.zeros((B, H), jnp.float32 if dt == jnp.float32 else dt)
        _, hs = jax.lax.scan(cell, (h0, c0), xproj)
        return jnp.swapaxes(hs, 0, 1)  # [B, T, H]


class WordLM(nn.Module):
    """Zaremba et al. 2014 word LM: embedding, stacked LSTM, decoder; dropout after the
    embedding, between layers and before the decoder. Hidden state starts at zero each step."""

    vocab: int
    emb: int
    hidden: int
    layers: int
    dropout: float
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, tokens, train: bool = True):
        x = nn.Embed(self.vocab, self.emb, embedding_init=nn.initializers.normal(1.0))(tokens)
        x = x.astype(self.dtype)
        x = nn.Dropout(self.dropout, deterministic=not train)(x)
        for layer in range(self.layers):
            x = LSTMLayer(self.hidden, dtype=self.dtype)(x)
            x = nn.Dropout(self.dropout, deterministic=not train)(x)
        return nn.Dense(self.vocab, dtype=self.dtype)(x)  # [B, T, vocab]


def build_model(name: str, dtype):
    """Return (module, input_kind, per-sample input shape, num_classes)."""
    if name == "resnet50":
        return (ResNet((3, 4, 6, 3), (64, 128, 256, 512), dtype=dtype),
                "image", (224, 224, 3), 1000)
    if name == "resnet50_tiny":
        return (ResNet((1, 1, 1, 1), (4, 8, 16, 32), stem_width=8, num_classes=10,
                       small_input=True, dtype=dtype), "image", (32, 32, 3), 10)
    if name == "lstm":
        return WordLM(10000, 650, 650, 2, 0.5, dtype=dtype), "tokens", (35,), 10000
    if name == "lstm_tiny":
        return WordLM(10000, 32, 32, 2, 0.5, dtype=dtype), "tokens", (16,), 10000
    raise ValueError(f"unknown model {name!r}; choose one of: {', '.join(MODEL_NAMES)}")


def make_optimizer(name: str) -> optax.GradientTransformation:
    if name.startswith("lstm"):
        return optax.sgd(1.0)
    return optax.sgd(0.01, momentum=0.9)


# --------------------------------------------------------------------------------------------
# Measurement
# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="one of: " + ", ".join(MODEL_NAMES))
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--precision", choices=("fp32", "tf32", "bf16"), default="fp32")
    p.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--json", metavar="OUT.json", help="write the result as JSON here")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    if args.model not in MODEL_NAMES:
        p.error(f"unknown model {args.model!r}; choose one of: {', '.join(MODEL_NAMES)}")
    if args.batch_size < 1 or args.iters < 1 or args.warmup < 0:
        p.error("--batch-size and --iters must be >= 1, --warmup >= 0")
    try:
        device = jax.devices(args.device)[0]
    except RuntimeError as e:
        p.error(f"--device {args.device} requested but JAX has no such backend: {e}")

    # Matmul/conv precision, set explicitly around the whole run (tracing reads it).
    prec = {"fp32": "highest", "tf32": "tensorfloat32", "bf16": None}[args.precision]
    prec_ctx = (jax.default_matmul_precision(prec) if prec else contextlib.nullcontext())
    with prec_ctx, jax.default_device(device):
        return run(args, device)


def run(args, device) -> int:
    dtype = jnp.bfloat16 if args.precision == "bf16" else jnp.float32
    model, kind, in_shape, num_classes = build_model(args.model, dtype)
    B = args.batch_size
    tx = make_optimizer(args.model)

    key = jax.random.PRNGKey(args.seed)
    k_init, k_drop, k_data = jax.random.split(key, 3)

    # Synthetic data on the device: 4 distinct batches, cycled.
    def make_batch(k):
        kx, ky = jax.random.split(k)
        if kind == "tokens":
            x = jax.random.randint(kx, (B, *in_shape), 0, num_classes, jnp.int32)
            y = jax.random.randint(ky, (B, *in_shape), 0, num_classes, jnp.int32)
        else:
            x = jax.random.normal(kx, (B, *in_shape), jnp.float32)
            y = jax.random.randint(ky, (B,), 0, num_classes, jnp.int32)
        return x, y

    batches = [jax.device_put(make_batch(k), device) for k in jax.random.split(k_data, 4)]
    tokens_per_sample = in_shape[0] if kind == "tokens" else 0

    @jax.jit
    def init_state():
        variables = model.init({"params": k_init, "dropout": k_drop}, batches[0][0][:1],
                               train=False)
        params = variables["params"]
        return {
            "params": params,
            "batch_stats": variables.get("batch_stats", {}),
            "opt_state": tx.init(params),
            "step": jnp.zeros((), jnp.int32),
        }

    state = jax.device_put(init_state(), device)
    n_params = sum(int(x.size) for x in jax.tree_util.tree_leaves(state["params"]))
    has_bn = bool(jax.tree_util.tree_leaves(state["batch_stats"]))

    def train_step(state, x, y):
        rng = jax.random.fold_in(k_drop, state["step"])

        def loss_fn(params):
            variables = {"params": params}
            if has_bn:
                variables["batch_stats"] = state["batch_stats"]
                logits, updates = model.apply(variables, x, train=True,
                                              rngs={"dropout": rng}, mutable=["batch_stats"])
                new_bs = updates["batch_stats"]
            else:
                logits = model.apply(variables, x, train=True, rngs={"dropout": rng})
                new_bs = state["batch_stats"]
            logits = logits.astype(jnp.float32).reshape(-1, num_classes)
            loss = optax.softmax_cross_entropy_with_integer_labels(
                logits, y.reshape(-1)).mean()
            return loss, new_bs

        (loss, new_bs), grads = jax.value_and_grad(loss_fn, has_aux=True)(state["params"])
        updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
        params = optax.apply_updates(state["params"], updates)
        return {"params": params, "batch_stats": new_bs, "opt_state": opt_state,
                "step": state["step"] + 1}, loss

    # Compiled ahead of time: the compile is never part of warm-up or timing.
    t = time.perf_counter()
    step = jax.jit(train_step, donate_argnums=0).lower(state, *batches[0]).compile()
    compile_s = time.perf_counter() - t

    loss = None
    t = time.perf_counter()
    for i in range(args.warmup):
        state, loss = step(state, *batches[i % 4])
    jax.block_until_ready((state, loss))
    warmup_s = time.perf_counter() - t

    gc.collect()
    gc.disable()  # no collection mid-block
    try:
        t0 = time.perf_counter()
        for i in range(args.iters):
            state, loss = step(state, *batches[i % 4])
        jax.block_until_ready((state, loss))
        t1 = time.perf_counter()
    finally:
        gc.enable()

    total = t1 - t0
    mean_step_s = total / args.iters
    final_loss = float(loss)
    result = {
        "model": args.model,
        "batch_size": B,
        "precision": args.precision,
        "device": args.device,
        "iters": args.iters,
        "warmup": args.warmup,
        "mean_step_s": mean_step_s,
        "samples_per_s": B / mean_step_s,
        "tokens_per_s": B * tokens_per_sample / mean_step_s,
        "total_s": total,
        "compile_s": compile_s,
        "warmup_s": warmup_s,
        "final_loss": final_loss,
        "params": n_params,
        "seq_len": tokens_per_sample or None,
        "flags": {
            "default_matmul_precision": {"fp32": "highest", "tf32": "tensorfloat32",
                                         "bf16": None}[args.precision],
            "compute_dtype": jnp.dtype(dtype).name,
            "param_dtype": "float32",
            "donate_state": True,
            "optimizer": "sgd(lr=1.0)" if args.model.startswith("lstm")
            else "sgd(lr=0.01, momentum=0.9)",
        },
        "jax_version": jax.__version__,
        "python_version": platform.python_version(),
        "device_name": getattr(device, "device_kind", str(device)),
    }

    line = (f"{args.model} bs={B} {args.precision} {args.device} params={n_params:,}: "
            f"{mean_step_s * 1e3:.3f} ms/step, {result['samples_per_s']:.1f} samples/s")
    if tokens_per_sample:
        line += f", {result['tokens_per_s']:.0f} tokens/s"
    print(line, flush=True)

    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
