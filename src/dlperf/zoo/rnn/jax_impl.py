"""Flax (linen) implementations of the LSTM word language model (``lstm``, ``lstm_tiny``) and
DeepSpeech2 (``deepspeech2``, ``deepspeech2_tiny``; :class:`DeepSpeech2`, GRU layers written
out like the LSTM's, with torch's two bias vectors per direction).

Same model as ``torch_impl`` (layout, counts and sources in :mod:`dlperf.zoo.rnn.spec`):
embedding -> dropout -> stacked LSTM (dropout between layers, as ``nn.LSTM(dropout=...)``) ->
dropout -> linear decoder on every step.

The LSTM layer (:class:`LSTMLayer`) is written out rather than taken from ``flax.linen``
(whose cells have one bias per gate projection set, so a different parameter count):

* parameters per layer, exactly torch's / cuDNN's: ``w_ih [in, 4H]``, ``w_hh [H, 4H]`` (the
  transposes of ``weight_ih_l<k>`` / ``weight_hh_l<k>``) and TWO biases ``b_ih``, ``b_hh``
  ``[4H]``; gates stacked in torch's order i, f, g, o;
* the input projection of all time steps is one matmul ``[B*T, in] x [in, 4H]`` before the
  recurrence (what cuDNN does too); the recurrence is ``jax.lax.scan`` over time (one compiled
  loop body, not a Python loop unrolled into the graph), carrying ``(h, c)`` from zeros;
* ``c = f*c + i*g``, ``h = o*tanh(c)`` (torch ``nn.LSTM`` equations). Gate non-linearities and
  the cell state are float32 even when the matmuls run in bfloat16.

Initialisation as PyTorch's defaults: embedding N(0, 1); every LSTM weight and bias
U(+-1/sqrt(H)); decoder U(+-1/sqrt(H)) weight and bias.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from dlperf.zoo.cnn.jax_impl import torch_dense
from dlperf.zoo.spec import ModelSpec

#: Time steps per iteration of the compiled scan loop (``jax.lax.scan(unroll=...)``).
SCAN_UNROLL = 1


def _uniform(bound: float):
    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


class LSTMLayer(nn.Module):
    """One LSTM layer with torch's parameters: ``[B, T, in]`` -> ``[B, T, H]`` (zero initial state).

    Attributes:
        hidden: ``H``.
        dtype: compute dtype of the matmuls (parameters are float32).
    """

    hidden: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        """``x`` ``[B, T, in]`` -> hidden states of every step ``[B, T, H]`` (dtype ``dtype``)."""
        n_in, h = x.shape[-1], self.hidden
        init = _uniform(1.0 / math.sqrt(h))  # torch nn.LSTM.reset_parameters
        w_ih = self.param("w_ih", init, (n_in, 4 * h), jnp.float32)
        w_hh = self.param("w_hh", init, (h, 4 * h), jnp.float32)
        b_ih = self.param("b_ih", init, (4 * h,), jnp.float32)
        b_hh = self.param("b_hh", init, (4 * h,), jnp.float32)
        d = self.dtype
        # Input projection of all steps at once, time-major for the scan: [T, B, 4H].
        xg = jnp.einsum("bti,ig->tbg", x.astype(d), w_ih.astype(d)) + (b_ih + b_hh).astype(d)
        w_hh_d = w_hh.astype(d)
        batch = x.shape[0]

        def cell(carry, g_x):
            h_prev, c_prev = carry
            g = (g_x + h_prev @ w_hh_d).astype(jnp.float32)
            i, f, gg, o = jnp.split(g, 4, axis=-1)
            c = jax.nn.sigmoid(f) * c_prev + jax.nn.sigmoid(i) * jnp.tanh(gg)
            h_new = (jax.nn.sigmoid(o) * jnp.tanh(c)).astype(d)
            return (h_new, c), h_new

        carry0 = (jnp.zeros((batch, h), d), jnp.zeros((batch, h), jnp.float32))
        _, ys = jax.lax.scan(cell, carry0, xg, unroll=SCAN_UNROLL)
        return jnp.swapaxes(ys, 0, 1)


class LSTMStack(nn.Module):
    """``layers`` LSTM layers (``l0``, ``l1``, ...) with dropout between them (not after the last),
    as ``torch.nn.LSTM(num_layers=layers, dropout=dropout, batch_first=True)``."""

    hidden: int
    layers: int
    dropout: float
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jnp.ndarray, train: bool = True) -> jnp.ndarray:
        """``x`` ``[B, T, in]`` -> ``[B, T, H]``; dropout needs the ``"dropout"`` rng to train."""
        for k in range(self.layers):
            if k > 0 and self.dropout > 0:
                x = nn.Dropout(self.dropout, deterministic=not train)(x)
            x = LSTMLayer(self.hidden, dtype=self.dtype, name=f"l{k}")(x)
        return x


class LSTMLanguageModel(nn.Module):
    """Zaremba-style LSTM LM: token ids ``[B, T]`` int -> logits ``[B, T, vocab]``.

    Every call starts from a zero hidden and cell state (as ``torch_impl``).
    """

    vocab: int
    emb: int
    hidden: int
    layers: int
    dropout: float
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, tokens: jnp.ndarray, train: bool = True) -> jnp.ndarray:
        """``tokens`` ``[B, T]`` int32/int64 -> logits ``[B, T, vocab]``."""
        x = nn.Embed(self.vocab, self.emb, embedding_init=nn.initializers.normal(1.0),
                     dtype=self.dtype, param_dtype=jnp.float32, name="embedding")(tokens)
        x = nn.Dropout(self.dropout, deterministic=not train)(x)
        x = LSTMStack(self.hidden, self.layers, self.dropout, dtype=self.dtype, name="lstm")(
            x, train)
        x = nn.Dropout(self.dropout, deterministic=not train)(x)
        return torch_dense(self.hidden, self.vocab, "decoder", self.dtype)(x)


# --- DeepSpeech2 (Amodei et al. 2016) ---------------------------------------------------------


class GRULayer(nn.Module):
    """One GRU direction with torch's parameters (``w_ih [in, 3H]``, ``w_hh [H, 3H]``, ``b_ih``,
    ``b_hh [3H]``; gates r, z, n; ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``, the cuDNN /
    ``torch.nn.GRU`` equations): ``[B, T, in]`` -> ``[B, T, H]`` from a zero state;
    ``reverse`` runs from the last frame to the first (outputs in input order)."""

    hidden: int
    reverse: bool = False
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        n_in, h = x.shape[-1], self.hidden
        init = _uniform(1.0 / math.sqrt(h))  # torch nn.GRU.reset_parameters
        w_ih = self.param("w_ih", init, (n_in, 3 * h), jnp.float32)
        w_hh = self.param("w_hh", init, (h, 3 * h), jnp.float32)
        b_ih = self.param("b_ih", init, (3 * h,), jnp.float32)
        b_hh = self.param("b_hh", init, (3 * h,), jnp.float32)
        d = self.dtype
        xg = jnp.einsum("bti,ig->tbg", x.astype(d), w_ih.astype(d)) + b_ih.astype(d)
        w_hh_d, b_hh_d = w_hh.astype(d), b_hh.astype(d)

        def cell(h_prev, g_x):
            g_h = (h_prev.astype(d) @ w_hh_d + b_hh_d).astype(jnp.float32)
            g_x = g_x.astype(jnp.float32)
            xr, xz, xn = jnp.split(g_x, 3, axis=-1)
            hr, hz, hn = jnp.split(g_h, 3, axis=-1)
            r = jax.nn.sigmoid(xr + hr)
            z = jax.nn.sigmoid(xz + hz)
            n = jnp.tanh(xn + r * hn)
            h_new = (1.0 - z) * n + z * h_prev
            return h_new, h_new.astype(d)

        h0 = jnp.zeros((x.shape[0], h), jnp.float32)
        _, ys = jax.lax.scan(cell, h0, xg, reverse=self.reverse, unroll=SCAN_UNROLL)
        return jnp.swapaxes(ys, 0, 1)


class BiGRU(nn.Module):
    """Bidirectional GRU layer, directions summed (``l0`` forward, ``l0_reverse`` backward: the
    names of ``torch.nn.GRU(bidirectional=True)``'s weights)."""

    hidden: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        fwd = GRULayer(self.hidden, False, self.dtype, name="l0")(x)
        bwd = GRULayer(self.hidden, True, self.dtype, name="l0_reverse")(x)
        return fwd + bwd


class DeepSpeech2(nn.Module):
    """DeepSpeech2: spectrogram ``[B, bins, frames]`` float -> logits ``[B, T_out, classes]``.

    NHWC ``[B, bins, frames, 1]`` -> (conv, BN, clipped ReLU) x 2 (``conv_0``/``conv_1``,
    ``conv_3``/``conv_4``: torch's ``nn.Sequential`` indices) -> per frame the features in
    torch's ``(channel, bin)`` order -> bidirectional GRU layers (``rnns_<i>``) -> ``fc``.
    """

    conv_channels: int
    hidden: int
    layers: int
    num_classes: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jnp.ndarray, train: bool = True) -> jnp.ndarray:
        from dlperf.zoo.cnn.jax_impl import TORCH_KERNEL_INIT, _bn
        from dlperf.zoo.rnn import spec as layout

        d = self.dtype
        x = x.astype(d)[..., None]  # [B, bins, frames, 1]
        for i, (kernel, stride, pad) in enumerate(layout.DS2_CONVS):
            x = nn.Conv(self.conv_channels, kernel, strides=stride,
                        padding=tuple((p, p) for p in pad), use_bias=False, dtype=d,
                        param_dtype=jnp.float32, kernel_init=TORCH_KERNEL_INIT,
                        name=f"conv_{3 * i}")(x)
            x = _bn(x, train, f"conv_{3 * i + 1}", d)
            x = jnp.clip(x, 0.0, layout.DS2_CLIP)
        b, f, t, c = x.shape
        x = x.transpose(0, 2, 3, 1).reshape(b, t, c * f)  # [B, T', C * bins'], torch order
        for i in range(self.layers):
            x = BiGRU(self.hidden, d, name=f"rnns_{i}")(x)
        return torch_dense(self.hidden, self.num_classes, "fc", d)(x)


#: ``hyper["arch"]`` (``lstm`` where absent) -> the Flax model, from ``(hyper, spec, dtype)``.
LAYOUTS: dict[str, Callable[[dict, ModelSpec, Any], nn.Module]] = {
    "lstm": lambda h, s, dt: LSTMLanguageModel(h["vocab"], h["emb"], h["hidden"], h["layers"],
                                               h["dropout"], dtype=dt),
    "deepspeech2": lambda h, s, dt: DeepSpeech2(h["conv_channels"], h["hidden"], h["layers"],
                                                s.num_classes, dtype=dt),
}


def build(spec: ModelSpec, dtype: Any = jnp.float32) -> nn.Module:
    """Build the Flax recurrent model of ``spec`` (family ``rnn``), torch-default init.

    LSTM: input ``[B, T]`` int token ids, output ``[B, T, vocab]`` logits. DeepSpeech2
    (``hyper["arch"] == "deepspeech2"``): input ``[B, bins, frames]`` float, output
    ``[B, T_out, classes]`` logits. ``dtype`` is the compute dtype; parameters are float32.
    """
    if spec.family != "rnn":
        raise ValueError(f"{spec.name} is a {spec.family} model, not an rnn")
    arch = spec.hyper.get("arch", "lstm")
    if arch not in LAYOUTS:
        raise ValueError(f"{spec.name}: unknown rnn layout {arch!r}")
    return LAYOUTS[arch](spec.hyper, spec, dtype)
