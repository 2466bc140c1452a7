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
* no host synchronisation inside the timed loop;
* JAX's ``rbg`` PRNG (XLA's RngBitGenerator) for dropout instead of the default threefry,
  whose masks XLA computes with many integer rounds per element (``--prng``; dlperf's JAX
  adapter uses rbg too, so both pay the same for GPT-2's dropout masks).

How to run it
-------------
    python benchmarks/plain_jax_loop.py --model resnet50 --batch-size 128 --precision bf16 \
        --device gpu --warmup 30 --iters 200 --json out.json

    python benchmarks/plain_jax_loop.py --model lstm_tiny --batch-size 4 --device cpu \
        --warmup 2 --iters 5            # a quick CPU check

    python benchmarks/plain_jax_loop.py --model gpt2_small --batch-size 8 --precision bf16 \
        --device gpu --warmup 30 --iters 100 --json out.json

Models: resnet50 (ResNet-50 v1.5, NHWC, 25,557,032 params), lstm (Zaremba medium word LM,
19,780,400 params), gpt2_small (GPT-2 small, 124,439,808 params, context 1024, AdamW), and the
CPU-test variants resnet50_tiny, lstm_tiny and gpt2_small_tiny. Language models report
tokens/s = samples/s x sequence length (35, 1024); the loss is the cross-entropy over every
position.
Precision: fp32 -> ``jax.default_matmul_precision("highest")``; tf32 -> "tensorfloat32";
bf16 -> compute in bfloat16 with float32 parameters (and a float32 loss).

GPT-2's attention is written as einsum + float32 softmax + dropout on the probabilities
(``--attention einsum``, the default), because the model has attention dropout 0.1 and
``jax.nn.dot_product_attention`` (cuDNN's fused flash attention on GPU) has no dropout: with it
(``--attention dpa``) the loop trains a different model, which is never the yardstick; it is
there to show what the fused kernel would be worth.

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
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

MODEL_NAMES = ("resnet50", "lstm", "gpt2_small", "resnet50_tiny", "lstm_tiny", "gpt2_small_tiny")

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
        for _layer in range(self.layers):
            x = LSTMLayer(self.hidden, dtype=self.dtype)(x)
            x = nn.Dropout(self.dropout, deterministic=not train)(x)
        return nn.Dense(self.vocab, dtype=self.dtype)(x)  # [B, T, vocab]


class GPT2Block(nn.Module):
    """Pre-LN GPT-2 block: x += drop(attn(ln_1(x))); x += drop(mlp(ln_2(x))), GELU (tanh).

    Attention ``"einsum"`` (default): causal scaled dot-product attention written out, scores
    in the compute dtype, mask and softmax in float32, dropout on the probabilities (GPT-2 has
    attention dropout 0.1; ``jax.nn.dot_product_attention`` has no dropout argument, so it
    cannot compute this model). ``"dpa"``: ``jax.nn.dot_product_attention(is_causal=True)``
    (cuDNN's fused kernel on GPU in bf16, XLA otherwise) *without* attention-probability
    dropout: a different model, for comparison only, never the yardstick.
    """

    d: int
    heads: int
    ffn: int
    dropout: float
    layers: int
    attention: str = "einsum"
    dpa_impl: str | None = None
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, train: bool):
        dense = functools.partial(nn.Dense, dtype=self.dtype, param_dtype=jnp.float32,
                                  kernel_init=nn.initializers.normal(0.02),
                                  bias_init=nn.initializers.zeros)
        # Residual projections N(0, 0.02 / sqrt(2 * layers)) (Radford et al. 2019 sec. 2.3).
        proj_init = nn.initializers.normal(0.02 / (2 * self.layers) ** 0.5)
        drop = nn.Dropout(self.dropout, deterministic=not train)
        ln = functools.partial(nn.LayerNorm, epsilon=1e-5, dtype=self.dtype,
                               param_dtype=jnp.float32)
        B, T, d = x.shape
        H, dh = self.heads, d // self.heads

        qkv = dense(3 * d, name="c_attn")(ln(name="ln_1")(x)).reshape(B, T, 3, H, dh)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]  # [B, T, H, dh] each
        if self.attention == "dpa":
            y = jax.nn.dot_product_attention(q, k, v, is_causal=True,
                                             implementation=self.dpa_impl)
        else:
            scores = jnp.einsum("bqhd,bkhd->bhqk", q * jnp.asarray(dh ** -0.5, q.dtype), k)
            causal = jnp.tril(jnp.ones((T, T), bool))
            scores = jnp.where(causal, scores.astype(jnp.float32), jnp.finfo(jnp.float32).min)
            probs = drop(jax.nn.softmax(scores, axis=-1).astype(self.dtype))
            y = jnp.einsum("bhqk,bkhd->bqhd", probs, v)
        x = x + drop(dense(d, kernel_init=proj_init, name="attn_c_proj")(y.reshape(B, T, d)))

        m = nn.gelu(dense(self.ffn, name="c_fc")(ln(name="ln_2")(x)), approximate=True)
        return x + drop(dense(d, kernel_init=proj_init, name="c_proj")(m))


class GPT2(nn.Module):
    """GPT-2 (Radford et al. 2019), written here from the paper and OpenAI's released layout:
    token ``wte`` and learned position ``wpe`` embeddings (N(0, 0.02)), dropout, pre-LN blocks,
    final ``ln_f``, logits = ``x @ wte.T`` (tied, no bias). Parameters float32; activations,
    the residual stream included, in ``dtype`` (LayerNorm statistics, softmax and the loss in
    float32). [B, T] int -> [B, T, vocab]. Small: 124,439,808 parameters."""

    vocab: int
    context: int
    layers: int
    d: int
    heads: int
    ffn: int
    dropout: float
    attention: str = "einsum"
    dpa_impl: str | None = None
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, tokens, train: bool = True):
        init = nn.initializers.normal(0.02)
        wte = self.param("wte", init, (self.vocab, self.d), jnp.float32)
        wpe = self.param("wpe", init, (self.context, self.d), jnp.float32)
        T = tokens.shape[1]
        x = (jnp.take(wte, tokens, axis=0) + wpe[:T]).astype(self.dtype)
        x = nn.Dropout(self.dropout, deterministic=not train)(x)
        for i in range(self.layers):
            x = GPT2Block(self.d, self.heads, self.ffn, self.dropout, self.layers,
                          self.attention, self.dpa_impl, self.dtype, name=f"h_{i}")(x, train)
        x = nn.LayerNorm(epsilon=1e-5, dtype=self.dtype, param_dtype=jnp.float32,
                         name="ln_f")(x)
        return x @ wte.astype(self.dtype).T  # [B, T, vocab]


#: GPT-2 sizes: (vocab, context, layers, d, heads, ffn, dropout). The tiny variant has the
#: hyper-parameters of dlperf's gpt2_small_tiny (CPU tests).
GPT2_SIZES = {
    "gpt2_small": (50257, 1024, 12, 768, 12, 3072, 0.1),
    "gpt2_small_tiny": (256, 32, 2, 32, 2, 64, 0.1),
}


def build_model(name: str, dtype, attention: str = "einsum", dpa_impl: str | None = None):
    """Return (module, input_kind, per-sample input shape, num_classes).

    ``attention`` and ``dpa_impl`` apply to GPT-2 only (see :class:`GPT2Block`)."""
    if name in GPT2_SIZES:
        vocab, context = GPT2_SIZES[name][:2]
        return (GPT2(*GPT2_SIZES[name], attention=attention, dpa_impl=dpa_impl, dtype=dtype),
                "tokens", (context,), vocab)
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
    """The optimizer of each model's spec: SGD + momentum 0.9 (CNN), SGD lr 1.0 (LSTM), and for
    GPT-2 AdamW lr 6e-4, betas (0.9, 0.95), eps 1e-8, decoupled weight decay 0.1 on *every*
    parameter (no mask), as dlperf's spec (which cannot exempt biases and LayerNorms)."""
    if name.startswith("gpt2"):
        return optax.adamw(6e-4, b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.1)
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
    p.add_argument("--prng", choices=("rbg", "threefry2x32", "unsafe_rbg"), default="rbg",
                   help="JAX PRNG of dropout, init and data (default rbg: XLA's RngBitGenerator, "
                        "much cheaper than JAX's default threefry for dropout masks; dlperf's "
                        "JAX adapter uses rbg too)")
    p.add_argument("--attention", choices=("einsum", "dpa"), default="einsum",
                   help="GPT-2 attention: einsum (the model: dropout on the attention "
                        "probabilities) or dpa (jax.nn.dot_product_attention, cuDNN on GPU in "
                        "bf16, WITHOUT attention dropout: a different model, comparison only)")
    args = p.parse_args(argv)

    if args.model not in MODEL_NAMES:
        p.error(f"unknown model {args.model!r}; choose one of: {', '.join(MODEL_NAMES)}")
    if args.batch_size < 1 or args.iters < 1 or args.warmup < 0:
        p.error("--batch-size and --iters must be >= 1, --warmup >= 0")
    try:
        device = jax.devices(args.device)[0]
    except RuntimeError as e:
        p.error(f"--device {args.device} requested but JAX has no such backend: {e}")

    # Before any key is made: PRNGKey / split / fold_in below then use this implementation.
    jax.config.update("jax_default_prng_impl", args.prng)
    # Matmul/conv precision, set explicitly around the whole run (tracing reads it).
    prec = {"fp32": "highest", "tf32": "tensorfloat32", "bf16": None}[args.precision]
    prec_ctx = (jax.default_matmul_precision(prec) if prec else contextlib.nullcontext())
    with prec_ctx, jax.default_device(device):
        return run(args, device)


def run(args, device) -> int:
    dtype = jnp.bfloat16 if args.precision == "bf16" else jnp.float32
    gpt2 = args.model.startswith("gpt2")
    dpa_impl = "cudnn" if (device.platform == "gpu" and dtype == jnp.bfloat16) else None
    model, kind, in_shape, num_classes = build_model(args.model, dtype, args.attention, dpa_impl)
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
            "optimizer": ("adamw(lr=6e-4, b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.1)" if gpt2
                          else "sgd(lr=1.0)" if args.model.startswith("lstm")
                          else "sgd(lr=0.01, momentum=0.9)"),
            "prng_impl": args.prng,
            "attention": ((f"jax.nn.dot_product_attention(is_causal=True, implementation="
                           f"{dpa_impl!r}), no attention dropout") if args.attention == "dpa"
                          else "einsum, float32 softmax, attention dropout") if gpt2 else None,
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
