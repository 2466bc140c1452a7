"""Flax (linen) implementations of the Transformers: ``transformer`` (encoder-decoder base),
``bert_base`` and ``gpt2_small`` (+ tiny variants).

Same models as :mod:`dlperf.zoo.transformer.torch_impl` (layouts, counts and sources in
:mod:`dlperf.zoo.transformer.spec`), with the module names of the torch ``state_dict`` (a numeric
component joined with ``_``: torch ``encoder.0.ffn.2`` is Flax ``encoder_0/ffn_2``), so
:func:`dlperf.zoo.convert.torch_to_flax` maps the weights one to one:

* attention: fused ``qkv`` ``Dense(3d)`` (cross-attention: ``q`` and fused ``kv``), output
  ``proj``; scaled dot-product attention written as einsum + softmax (float32 softmax) so that
  BERT's and GPT-2's dropout on the attention probabilities can be applied in train mode
  (``jax.nn.dot_product_attention`` has no dropout); GPT-2 and the Transformer decoder are
  causal (masked scores set to the dtype's minimum before the softmax);
* FFN: ``ffn_0`` -> activation -> ``ffn_2`` (GPT-2: ``mlp_0``/``mlp_2``); LayerNorms with
  torch's eps (1e-5; BERT 1e-12);
* embeddings ``nn.Embed``; tied output projections via ``Embed.attend``; BERT's ``head_bias``
  is a top-level parameter.

Dropout (``nn.Dropout``, rng collection ``"dropout"``) where torch has it, active only with
``train=True``. ``dtype`` is the compute dtype (parameters float32).

Inputs: ``transformer`` ``[B, 2, T]`` int token pairs (source, decoder input) -> ``[B, T, V]``;
``bert`` ``[B, T]`` -> ``[B, n_predictions, V]`` (the fixed masked positions are gathered
before the head); ``gpt2`` ``[B, T]`` -> ``[B, T, V]``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from dlperf.zoo.spec import ModelSpec

_ZEROS = nn.initializers.zeros


def _dense(n: int, name: str, dtype: Any, kernel_init: Any) -> nn.Dense:
    return nn.Dense(n, dtype=dtype, param_dtype=jnp.float32, kernel_init=kernel_init,
                    bias_init=_ZEROS, name=name)


def _ln(eps: float, name: str, dtype: Any) -> nn.LayerNorm:
    return nn.LayerNorm(epsilon=eps, dtype=dtype, param_dtype=jnp.float32, name=name)


def _attend(q: jnp.ndarray, k: jnp.ndarray, v: jnp.ndarray, heads: int, causal: bool,
            dropout: nn.Module | None) -> jnp.ndarray:
    """Multi-head scaled dot-product attention: ``q`` ``[B, T, d]``, ``k``/``v`` ``[B, S, d]``
    -> ``[B, T, d]``; softmax in float32; ``dropout`` (or None) on the probabilities."""
    b, t, d = q.shape
    s = k.shape[1]
    dh = d // heads
    q = q.reshape(b, t, heads, dh)
    k = k.reshape(b, s, heads, dh)
    v = v.reshape(b, s, heads, dh)
    scores = jnp.einsum("bthe,bshe->bhts", q, k).astype(jnp.float32) / math.sqrt(dh)
    if causal:
        mask = jnp.tril(jnp.ones((t, s), bool))
        scores = jnp.where(mask, scores, jnp.finfo(jnp.float32).min)
    p = jax.nn.softmax(scores, axis=-1)
    if dropout is not None:
        p = dropout(p)
    y = jnp.einsum("bhts,bshe->bthe", p.astype(v.dtype), v)
    return y.reshape(b, t, d)


class SelfAttention(nn.Module):
    """Fused ``qkv`` projection, attention, output ``proj`` (torch ``SelfAttention``)."""

    d: int
    heads: int
    attn_dropout: float
    causal: bool
    kernel_init: Any
    proj_init: Any
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jnp.ndarray, train: bool) -> jnp.ndarray:
        """``[B, T, d]`` -> ``[B, T, d]``."""
        qkv = _dense(3 * self.d, "qkv", self.dtype, self.kernel_init)(x)
        q, k, v = jnp.split(qkv, 3, axis=-1)
        drop = (nn.Dropout(self.attn_dropout, deterministic=not train)
                if self.attn_dropout > 0 else None)
        y = _attend(q, k, v, self.heads, self.causal, drop)
        return _dense(self.d, "proj", self.dtype, self.proj_init)(y)


class CrossAttention(nn.Module):
    """Decoder queries ``q`` over the encoder output (fused ``kv``), output ``proj``."""

    d: int
    heads: int
    kernel_init: Any
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jnp.ndarray, memory: jnp.ndarray) -> jnp.ndarray:
        """``x`` ``[B, T, d]`` over ``memory`` ``[B, S, d]`` -> ``[B, T, d]``."""
        q = _dense(self.d, "q", self.dtype, self.kernel_init)(x)
        k, v = jnp.split(_dense(2 * self.d, "kv", self.dtype, self.kernel_init)(memory), 2,
                         axis=-1)
        y = _attend(q, k, v, self.heads, False, None)
        return _dense(self.d, "proj", self.dtype, self.kernel_init)(y)


def sinusoidal_positions(length: int, d: int) -> np.ndarray:
    """Vaswani et al. 2017 sec. 3.5 (as ``torch_impl.sinusoidal_positions``); ``[length, d]``."""
    pos = np.arange(length, dtype=np.float32)[:, None]
    inv = np.exp(np.arange(0, d, 2, dtype=np.float32) * (-math.log(10000.0) / d))
    pe = np.zeros((length, d), np.float32)
    pe[:, 0::2] = np.sin(pos * inv)
    pe[:, 1::2] = np.cos(pos * inv)[:, : d // 2]
    return pe


# --- Transformer (Vaswani et al. 2017), post-LN ----------------------------------------------

_XAVIER = nn.initializers.xavier_uniform()


class EncoderLayer(nn.Module):
    """Post-LN: ``x = LN(x + drop(attn(x)))``, ``x = LN(x + drop(ffn(x)))``."""

    d: int
    heads: int
    ffn: int
    dropout: float
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jnp.ndarray, train: bool) -> jnp.ndarray:
        dt = self.dtype
        drop = nn.Dropout(self.dropout, deterministic=not train)
        a = SelfAttention(self.d, self.heads, 0.0, False, _XAVIER, _XAVIER, dt, name="attn")(
            x, train)
        x = _ln(1e-5, "ln1", dt)(x + drop(a))
        f = _dense(self.d, "ffn_2", dt, _XAVIER)(nn.relu(_dense(self.ffn, "ffn_0", dt,
                                                                _XAVIER)(x)))
        return _ln(1e-5, "ln2", dt)(x + drop(f))


class DecoderLayer(nn.Module):
    """Post-LN: causal self-attention, cross-attention, FFN, each + residual + LN."""

    d: int
    heads: int
    ffn: int
    dropout: float
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jnp.ndarray, memory: jnp.ndarray, train: bool) -> jnp.ndarray:
        dt = self.dtype
        drop = nn.Dropout(self.dropout, deterministic=not train)
        a = SelfAttention(self.d, self.heads, 0.0, True, _XAVIER, _XAVIER, dt,
                          name="self_attn")(x, train)
        x = _ln(1e-5, "ln1", dt)(x + drop(a))
        c = CrossAttention(self.d, self.heads, _XAVIER, dt, name="cross_attn")(x, memory)
        x = _ln(1e-5, "ln2", dt)(x + drop(c))
        f = _dense(self.d, "ffn_2", dt, _XAVIER)(nn.relu(_dense(self.ffn, "ffn_0", dt,
                                                                _XAVIER)(x)))
        return _ln(1e-5, "ln3", dt)(x + drop(f))


class Transformer(nn.Module):
    """Encoder-decoder Transformer: ``[B, 2, T]`` int -> logits ``[B, T, vocab]`` (shared
    embedding scaled by sqrt(d), sinusoidal positions, tied output projection without bias)."""

    vocab: int
    d: int
    heads: int
    ffn: int
    enc_layers: int
    dec_layers: int
    seq_len: int
    dropout: float
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jnp.ndarray, train: bool = True) -> jnp.ndarray:
        dt = self.dtype
        emb = nn.Embed(self.vocab, self.d, embedding_init=nn.initializers.normal(self.d ** -0.5),
                       dtype=dt, param_dtype=jnp.float32, name="embedding")
        pe = jnp.asarray(sinusoidal_positions(self.seq_len, self.d))
        drop = nn.Dropout(self.dropout, deterministic=not train)
        scale = math.sqrt(self.d)

        def embed(tokens):
            return drop((emb(tokens) * scale + pe[: tokens.shape[1]]).astype(dt))

        memory = embed(x[:, 0])
        for i in range(self.enc_layers):
            memory = EncoderLayer(self.d, self.heads, self.ffn, self.dropout, dt,
                                  name=f"encoder_{i}")(memory, train)
        h = embed(x[:, 1])
        for i in range(self.dec_layers):
            h = DecoderLayer(self.d, self.heads, self.ffn, self.dropout, dt,
                             name=f"decoder_{i}")(h, memory, train)
        return emb.attend(h)


# --- BERT (Devlin et al. 2019), post-LN, masked-LM head ---------------------------------------

_BERT_INIT = nn.initializers.normal(0.02)


class BertLayer(nn.Module):
    """Post-LN BERT layer (erf-GELU FFN, dropout on attention probabilities)."""

    d: int
    heads: int
    ffn: int
    dropout: float
    eps: float
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jnp.ndarray, train: bool) -> jnp.ndarray:
        dt = self.dtype
        drop = nn.Dropout(self.dropout, deterministic=not train)
        a = SelfAttention(self.d, self.heads, self.dropout, False, _BERT_INIT, _BERT_INIT, dt,
                          name="attn")(x, train)
        x = _ln(self.eps, "ln1", dt)(x + drop(a))
        f = _dense(self.ffn, "ffn_0", dt, _BERT_INIT)(x)
        f = _dense(self.d, "ffn_2", dt, _BERT_INIT)(nn.gelu(f, approximate=False))
        return _ln(self.eps, "ln2", dt)(x + drop(f))


class Bert(nn.Module):
    """BERT with a masked-LM head: ``[B, T]`` int -> logits ``[B, n_predictions, vocab]``."""

    vocab: int
    d: int
    heads: int
    ffn: int
    layers: int
    max_positions: int
    type_vocab: int
    positions: tuple[int, ...]
    dropout: float
    eps: float
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, tokens: jnp.ndarray, train: bool = True) -> jnp.ndarray:
        dt = self.dtype

        def embed(n, name):
            return nn.Embed(n, self.d, embedding_init=_BERT_INIT, dtype=dt,
                            param_dtype=jnp.float32, name=name)

        word = embed(self.vocab, "word")
        t = tokens.shape[1]
        x = (word(tokens) + embed(self.max_positions, "position")(jnp.arange(t))
             + embed(self.type_vocab, "token_type")(jnp.zeros((), jnp.int32)))
        x = nn.Dropout(self.dropout, deterministic=not train)(_ln(self.eps, "ln", dt)(x))
        for i in range(self.layers):
            x = BertLayer(self.d, self.heads, self.ffn, self.dropout, self.eps, dt,
                          name=f"layers_{i}")(x, train)
        x = jnp.take(x, jnp.asarray(self.positions, jnp.int32), axis=1)
        x = nn.gelu(_dense(self.d, "head_0", dt, _BERT_INIT)(x), approximate=False)
        x = _ln(self.eps, "head_2", dt)(x)
        bias = self.param("head_bias", _ZEROS, (self.vocab,), jnp.float32)
        return word.attend(x) + bias.astype(dt)


# --- GPT-2 (Radford et al. 2019), pre-LN ------------------------------------------------------


class GPT2Block(nn.Module):
    """Pre-LN block: ``x = x + drop(attn(LN(x)))``, ``x = x + drop(mlp(LN(x)))``, causal."""

    d: int
    heads: int
    ffn: int
    dropout: float
    eps: float
    layers: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jnp.ndarray, train: bool) -> jnp.ndarray:
        dt = self.dtype
        drop = nn.Dropout(self.dropout, deterministic=not train)
        proj_init = nn.initializers.normal(0.02 / math.sqrt(2 * self.layers))
        a = SelfAttention(self.d, self.heads, self.dropout, True, _BERT_INIT, proj_init, dt,
                          name="attn")(_ln(self.eps, "ln1", dt)(x), train)
        x = x + drop(a)
        m = _dense(self.ffn, "mlp_0", dt, _BERT_INIT)(_ln(self.eps, "ln2", dt)(x))
        m = _dense(self.d, "mlp_2", dt, proj_init)(nn.gelu(m, approximate=True))
        return x + drop(m)


class GPT2(nn.Module):
    """GPT-2: ``[B, T]`` int -> next-token logits ``[B, T, vocab]`` (tied output, no bias)."""

    vocab: int
    d: int
    heads: int
    ffn: int
    layers: int
    context: int
    dropout: float
    eps: float
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, tokens: jnp.ndarray, train: bool = True) -> jnp.ndarray:
        dt = self.dtype
        wte = nn.Embed(self.vocab, self.d, embedding_init=_BERT_INIT, dtype=dt,
                       param_dtype=jnp.float32, name="wte")
        wpe = nn.Embed(self.context, self.d, embedding_init=_BERT_INIT, dtype=dt,
                       param_dtype=jnp.float32, name="wpe")
        x = wte(tokens) + wpe(jnp.arange(tokens.shape[1]))
        x = nn.Dropout(self.dropout, deterministic=not train)(x)
        for i in range(self.layers):
            x = GPT2Block(self.d, self.heads, self.ffn, self.dropout, self.eps, self.layers, dt,
                          name=f"blocks_{i}")(x, train)
        return wte.attend(_ln(self.eps, "ln_f", dt)(x))


#: ``hyper["arch"]`` -> the Flax model of that layout, from ``(hyper, dtype)``.
LAYOUTS: dict[str, Callable[[dict, Any], nn.Module]] = {
    "transformer": lambda h, dt: Transformer(h["vocab"], h["d_model"], h["heads"], h["ffn"],
                                             h["enc_layers"], h["dec_layers"], h["seq_len"],
                                             h["dropout"], dtype=dt),
    "bert": lambda h, dt: Bert(h["vocab"], h["d_model"], h["heads"], h["ffn"], h["layers"],
                               h["max_positions"], h["type_vocab"], tuple(h["positions"]),
                               h["dropout"], h["ln_eps"], dtype=dt),
    "gpt2": lambda h, dt: GPT2(h["vocab"], h["d_model"], h["heads"], h["ffn"], h["layers"],
                               h["seq_len"], h["dropout"], h["ln_eps"], dtype=dt),
}


def build(spec: ModelSpec, dtype: Any = jnp.float32) -> nn.Module:
    """Build the Flax Transformer of ``spec`` (family ``transformer``; ``hyper["arch"]``).

    ``dtype`` is the compute dtype; parameters are float32.
    """
    if spec.family != "transformer":
        raise ValueError(f"{spec.name} is a {spec.family} model, not a transformer")
    arch = spec.hyper["arch"]
    if arch not in LAYOUTS:
        raise ValueError(f"{spec.name}: unknown transformer layout {arch!r}")
    return LAYOUTS[arch](spec.hyper, dtype)
