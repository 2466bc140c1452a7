"""Flax (linen) implementation of the LSTM word language model (``lstm``, ``lstm_tiny``).

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
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from dlperf.zoo.cnn.flax_impl import torch_dense
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


def build(spec: ModelSpec, dtype: Any = jnp.float32) -> LSTMLanguageModel:
    """Build the Flax LSTM language model of ``spec`` (family ``rnn``), torch-default init.

    Input ``[B, T]`` int token ids, output ``[B, T, vocab]`` logits. ``dtype`` is the compute
    dtype; parameters are float32.

    Raises:
        NotImplementedError: an rnn without a Flax implementation (``deepspeech2``).
    """
    if spec.family != "rnn":
        raise ValueError(f"{spec.name} is a {spec.family} model, not an rnn")
    if spec.input_kind != "tokens":
        raise NotImplementedError(f"{spec.name}: no Flax implementation of this rnn "
                                  f"({spec.input_kind} input) yet")
    h = spec.hyper
    return LSTMLanguageModel(h["vocab"], h["emb"], h["hidden"], h["layers"], h["dropout"],
                             dtype=dtype)
