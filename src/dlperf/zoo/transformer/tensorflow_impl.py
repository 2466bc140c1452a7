"""Keras 3 (TensorFlow backend) implementations of the Transformers: ``transformer``,
``bert_base``, ``gpt2_small`` (+ tiny variants).

The layouts, parameter counts and initialisations are those of
:mod:`dlperf.zoo.transformer.torch_impl` (sources and counts: :mod:`dlperf.zoo.transformer.spec`):

* attention: a fused ``Dense(3d)`` Q/K/V projection for self-attention (``Dense(d)`` for Q and a
  fused ``Dense(2d)`` for K/V in cross-attention), the weight-free :class:`Attention` layer
  (scaled dot-product over ``heads`` heads, causal where asked, dropout on the attention
  probabilities where asked; PyTorch's ``scaled_dot_product_attention``), output ``Dense(d)``;
  no padding masks;
* ``transformer``: post-LN encoder/decoder layers (ReLU FFN, dropout on sub-layer outputs and on
  the embedded inputs, no attention dropout, LayerNorm eps 1e-5), one embedding shared by
  source, target and the bias-free output projection (:class:`TiedOutput`), embeddings scaled
  by ``sqrt(d)`` plus sinusoidal positions (:class:`ScaledSinusoidal`, no parameters);
* ``bert``: word + learned position + token-type-0 embeddings (:class:`AddRows`), LayerNorm
  (eps 1e-12), dropout, post-LN layers (GELU erf form, attention dropout), the hidden states at
  the fixed masked positions gathered, then ``Dense(d)``, GELU, LayerNorm, and the output tied
  to the word embedding plus its own ``vocab`` bias;
* ``gpt2``: token + learned positions, dropout, pre-LN causal blocks (GELU tanh form, attention
  and residual dropout), final LayerNorm (eps 1e-5), bias-free output tied to the token
  embedding.

The models are functional ``keras.Model``s whose weight-carrying layers are all at the top
level and named by PyTorch's module names (``encoder.0.attn.qkv``, ``decoder.1.ln3``,
``layers.0.ffn.2``, ``blocks.1.mlp.0``, ``wte``, ...), so :mod:`dlperf.zoo.convert_keras` maps
``state_dict``s by name. Layers holding PyTorch tensors that are not a plain ``Dense`` /
``LayerNormalization`` / ``Embedding`` expose ``torch_params() -> [(variable, torch key)]``.
The tied output reads the embedding variable without tracking it, so it is counted (and
updated) once: trainable parameters == ``spec.params``.

Inputs: ``[B, 2, T]`` int64 token pairs (transformer) or ``[B, T]`` int64 tokens; outputs:
logits ``[B, T, vocab]`` (``[B, n_predictions, vocab]`` for BERT) in the compute dtype of the
global Keras policy. This module also exports the harness hooks :func:`synthetic_batch` and
:func:`loss_fn` that the TensorFlow adapter uses for the specs outside the default contract
(transformer: token pairs and label smoothing 0.1; BERT: masked-LM targets), as ``torch_impl``
does for PyTorch; GPT-2 uses the adapter's defaults.
"""

from __future__ import annotations

import math

import keras
import numpy as np
from keras import ops

from dlperf.zoo.spec import ModelSpec

# --- building blocks ---------------------------------------------------------------------------


class Attention(keras.layers.Layer):
    """Weight-free multi-head scaled dot-product attention: ``(q [B, Tq, d], k [B, Tk, d],
    v [B, Tk, d]) -> [B, Tq, d]``; ``softmax(q k^T / sqrt(d / heads))`` (lower-triangular
    mask when ``causal``), dropout ``rate`` on the probabilities in training, times ``v``."""

    def __init__(self, heads: int, *, causal: bool = False, rate: float = 0.0,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.heads, self.causal, self.rate = heads, causal, rate
        self.dropout = keras.layers.Dropout(rate) if rate > 0 else None

    def _split(self, x):
        b, t, d = ops.shape(x)[0], ops.shape(x)[1], x.shape[-1]
        return ops.transpose(ops.reshape(x, (b, t, self.heads, d // self.heads)), (0, 2, 1, 3))

    def call(self, q, k, v, training=None):  # noqa: D102
        d = q.shape[-1]
        qh, kh, vh = self._split(q), self._split(k), self._split(v)
        scores = ops.matmul(qh, ops.transpose(kh, (0, 1, 3, 2)))
        scores = scores * ops.cast(1.0 / math.sqrt(d // self.heads), scores.dtype)
        if self.causal:
            tq, tk = ops.shape(scores)[2], ops.shape(scores)[3]
            keep = ops.expand_dims(ops.arange(tq), 1) >= ops.expand_dims(ops.arange(tk), 0)
            scores = ops.where(keep, scores, ops.cast(-1e9, scores.dtype))
        p = ops.softmax(scores, axis=-1)
        if self.dropout is not None:
            p = self.dropout(p, training=training)
        y = ops.transpose(ops.matmul(p, vh), (0, 2, 1, 3))
        return ops.reshape(y, (ops.shape(y)[0], ops.shape(y)[1], d))

    def compute_output_shape(self, q_shape, k_shape=None, v_shape=None):  # noqa: D102
        return q_shape


class ScaledSinusoidal(keras.layers.Layer):
    """``x * sqrt(d) + PE[:T]`` with Vaswani et al.'s sinusoidal table (no parameters)."""

    def __init__(self, length: int, d: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.scale = math.sqrt(d)
        self.pe = sinusoidal_positions(length, d)

    def call(self, x):  # noqa: D102
        t = ops.shape(x)[1]
        pe = ops.cast(ops.convert_to_tensor(self.pe), x.dtype)[:t]
        return x * ops.cast(self.scale, x.dtype) + pe


class AddRows(keras.layers.Layer):
    """A learned ``[rows, d]`` table (PyTorch ``nn.Embedding`` ``<name>.weight``) added to
    ``x [B, T, d]``: its first ``T`` rows (``prefix``, learned positions) or its row 0 for every
    position (``first``, BERT's token type 0)."""

    def __init__(self, rows: int, d: int, *, mode: str = "prefix", initializer=None,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.rows, self.d, self.mode = rows, d, mode
        self.initializer = initializer or keras.initializers.RandomNormal(0.0, 0.02)

    def build(self, input_shape):  # noqa: D102
        self.embeddings = self.add_weight(shape=(self.rows, self.d), name="embeddings",
                                          initializer=self.initializer)

    def call(self, x):  # noqa: D102
        table = ops.cast(self.embeddings, x.dtype)
        rows = table[: ops.shape(x)[1]] if self.mode == "prefix" else table[0]
        return x + rows

    def torch_params(self) -> list:
        """``[(variable, PyTorch state_dict key)]`` for the weight converter."""
        return [(self.embeddings, f"{self.name}.weight")]


class TiedOutput(keras.layers.Layer):
    """Logits ``x @ E^T (+ bias)`` with ``E`` the ``[vocab, d]`` table of an ``Embedding`` layer.

    The embedding is read through a function, not an attribute, so Keras does not track it a
    second time (it stays one trainable variable, updated with both gradients). With
    ``bias=True`` the layer owns a ``vocab`` bias (BERT's ``head_bias``, zeros).
    """

    def __init__(self, embedding: keras.layers.Embedding, vocab: int, *, bias: bool = False,
                 torch_bias_key: str | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self._table = lambda: embedding.embeddings
        self.vocab, self.use_bias, self.torch_bias_key = vocab, bias, torch_bias_key

    def build(self, input_shape):  # noqa: D102
        self.bias = (self.add_weight(shape=(self.vocab,), name="bias", initializer="zeros")
                     if self.use_bias else None)

    def call(self, x):  # noqa: D102
        table = ops.cast(self._table(), x.dtype)
        y = ops.matmul(x, ops.transpose(table))
        if self.bias is not None:
            y = y + ops.cast(self.bias, x.dtype)
        return y

    def compute_output_shape(self, input_shape):  # noqa: D102
        return (*input_shape[:-1], self.vocab)

    def torch_params(self) -> list:
        """``[(variable, PyTorch state_dict key)]`` for the weight converter."""
        return [(self.bias, self.torch_bias_key)] if self.bias is not None else []


def sinusoidal_positions(length: int, d: int) -> np.ndarray:
    """Vaswani et al. 2017 sec. 3.5 (as ``torch_impl.sinusoidal_positions``, float32 numpy)."""
    pos = np.arange(length, dtype=np.float32)[:, None]
    inv = np.exp(np.arange(0, d, 2, dtype=np.float32)
                 * np.float32(-math.log(10000.0) / d)).astype(np.float32)
    pe = np.zeros((length, d), np.float32)
    pe[:, 0::2] = np.sin(pos * inv)
    pe[:, 1::2] = np.cos(pos * inv)[:, : d // 2]
    return pe


class _Init:
    """Initialisers of one model: ``dense(name)`` kernel, ``bias``, ``embedding``."""

    def __init__(self, kernel, embedding, residual=None) -> None:
        self.kernel, self.embedding, self.residual = kernel, embedding, residual

    def dense(self, units: int, name: str, *, residual: bool = False, activation=None):
        k = self.residual if residual and self.residual is not None else self.kernel
        return keras.layers.Dense(units, name=name, activation=activation,
                                  kernel_initializer=k, bias_initializer="zeros")


def _ln(name: str, eps: float):
    return keras.layers.LayerNormalization(epsilon=eps, name=name)


def _self_attention(x, init: _Init, prefix: str, d: int, heads: int, *, causal: bool,
                    rate: float):
    qkv = init.dense(3 * d, f"{prefix}.qkv")(x)
    q, k, v = ops.split(qkv, 3, axis=-1)
    y = Attention(heads, causal=causal, rate=rate, name=f"{prefix}.sdpa")(q, k, v)
    return init.dense(d, f"{prefix}.proj", residual=True)(y)


def _cross_attention(x, memory, init: _Init, prefix: str, d: int, heads: int):
    q = init.dense(d, f"{prefix}.q")(x)
    k, v = ops.split(init.dense(2 * d, f"{prefix}.kv")(memory), 2, axis=-1)
    y = Attention(heads, name=f"{prefix}.sdpa")(q, k, v)
    return init.dense(d, f"{prefix}.proj")(y)


def _ffn(x, init: _Init, prefix: str, d: int, ffn: int, activation):
    h = init.dense(ffn, f"{prefix}.0", activation=activation)(x)
    return init.dense(d, f"{prefix}.2", residual=True)(h)


def _drop(rate: float):
    return keras.layers.Dropout(rate)


def _relu(x):
    return keras.activations.relu(x)


def _gelu_erf(x):
    return keras.activations.gelu(x, approximate=False)


def _gelu_tanh(x):
    return keras.activations.gelu(x, approximate=True)


# --- the three models --------------------------------------------------------------------------


def _transformer(spec: ModelSpec) -> keras.Model:
    h = spec.hyper
    d, heads, f, p = h["d_model"], h["heads"], h["ffn"], h["dropout"]
    eps = 1e-5  # nn.LayerNorm's default
    init = _Init(keras.initializers.GlorotUniform(),
                 keras.initializers.RandomNormal(0.0, d ** -0.5))
    pairs = keras.Input(shape=tuple(spec.input_shape), dtype="int64", name="token_pairs")
    emb = keras.layers.Embedding(h["vocab"], d, name="embedding",
                                 embeddings_initializer=init.embedding)
    pos = ScaledSinusoidal(h["seq_len"], d, name="positions")

    def embed(tokens):
        return _drop(p)(pos(emb(tokens)))

    memory = embed(pairs[:, 0])
    for i in range(h["enc_layers"]):
        n = f"encoder.{i}"
        a = _self_attention(memory, init, f"{n}.attn", d, heads, causal=False, rate=0.0)
        memory = _ln(f"{n}.ln1", eps)(memory + _drop(p)(a))
        memory = _ln(f"{n}.ln2", eps)(memory + _drop(p)(_ffn(memory, init, f"{n}.ffn", d, f,
                                                              _relu)))
    x = embed(pairs[:, 1])
    for i in range(h["dec_layers"]):
        n = f"decoder.{i}"
        a = _self_attention(x, init, f"{n}.self_attn", d, heads, causal=True, rate=0.0)
        x = _ln(f"{n}.ln1", eps)(x + _drop(p)(a))
        c = _cross_attention(x, memory, init, f"{n}.cross_attn", d, heads)
        x = _ln(f"{n}.ln2", eps)(x + _drop(p)(c))
        x = _ln(f"{n}.ln3", eps)(x + _drop(p)(_ffn(x, init, f"{n}.ffn", d, f, _relu)))
    logits = TiedOutput(emb, h["vocab"], name="output")(x)
    return keras.Model(pairs, logits, name=spec.name)


def _bert(spec: ModelSpec) -> keras.Model:
    h = spec.hyper
    d, heads, f, p, eps = h["d_model"], h["heads"], h["ffn"], h["dropout"], h["ln_eps"]
    normal = keras.initializers.RandomNormal(0.0, 0.02)
    init = _Init(normal, normal)
    tokens = keras.Input(shape=tuple(spec.input_shape), dtype="int64", name="tokens")
    word = keras.layers.Embedding(h["vocab"], d, name="word", embeddings_initializer=normal)
    x = word(tokens)
    x = AddRows(h["max_positions"], d, mode="prefix", initializer=normal, name="position")(x)
    x = AddRows(h["type_vocab"], d, mode="first", initializer=normal, name="token_type")(x)
    x = _drop(p)(_ln("ln", eps)(x))
    for i in range(h["layers"]):
        n = f"layers.{i}"
        a = _self_attention(x, init, f"{n}.attn", d, heads, causal=False, rate=p)
        x = _ln(f"{n}.ln1", eps)(x + _drop(p)(a))
        x = _ln(f"{n}.ln2", eps)(x + _drop(p)(_ffn(x, init, f"{n}.ffn", d, f, _gelu_erf)))
    x = ops.take(x, np.asarray(h["positions"], dtype=np.int32), axis=1)
    x = init.dense(d, "head.0", activation=_gelu_erf)(x)
    x = _ln("head.2", eps)(x)
    logits = TiedOutput(word, h["vocab"], bias=True, torch_bias_key="head_bias",
                        name="head_bias")(x)
    return keras.Model(tokens, logits, name=spec.name)


def _gpt2(spec: ModelSpec) -> keras.Model:
    h = spec.hyper
    d, heads, f, p, eps = h["d_model"], h["heads"], h["ffn"], h["dropout"], h["ln_eps"]
    normal = keras.initializers.RandomNormal(0.0, 0.02)
    init = _Init(normal, normal,
                 residual=keras.initializers.RandomNormal(0.0, 0.02 / math.sqrt(2 * h["layers"])))
    tokens = keras.Input(shape=tuple(spec.input_shape), dtype="int64", name="tokens")
    wte = keras.layers.Embedding(h["vocab"], d, name="wte", embeddings_initializer=normal)
    x = AddRows(h["seq_len"], d, mode="prefix", initializer=normal, name="wpe")(wte(tokens))
    x = _drop(p)(x)
    for i in range(h["layers"]):
        n = f"blocks.{i}"
        a = _self_attention(_ln(f"{n}.ln1", eps)(x), init, f"{n}.attn", d, heads, causal=True,
                            rate=p)
        x = x + _drop(p)(a)
        x = x + _drop(p)(_ffn(_ln(f"{n}.ln2", eps)(x), init, f"{n}.mlp", d, f, _gelu_tanh))
    logits = TiedOutput(wte, h["vocab"], name="output")(_ln("ln_f", eps)(x))
    return keras.Model(tokens, logits, name=spec.name)


def build(spec: ModelSpec) -> keras.Model:
    """Build the Transformer of ``spec`` (family ``transformer``; layout ``hyper["arch"]``) in
    Keras: token pairs ``[B, 2, T]`` or tokens ``[B, T]`` (int64) -> logits.

    Raises:
        ValueError: not a ``transformer`` spec.
        NotImplementedError: a layout this module does not implement.
    """
    if spec.family != "transformer":
        raise ValueError(f"{spec.name} is a {spec.family} model, not a transformer")
    arch = spec.hyper["arch"]
    builders = {"transformer": _transformer, "bert": _bert, "gpt2": _gpt2}
    if arch not in builders:
        raise NotImplementedError(f"{spec.name}: no Keras implementation of transformer layout "
                                  f"{arch!r} (implemented: {', '.join(builders)})")
    return builders[arch](spec)


# --- harness hooks (dlperf.zoo.spec contract; used for specs that are not ``default_io``) -----


def synthetic_batch(spec: ModelSpec, batch_size: int, seed: tuple[int, int]):
    """One synthetic ``(x, y)`` batch, made where the current TensorFlow device scope puts it
    (stateless RNG: the same ``seed``, a pair of ints, gives the same batch).

    ``x`` int64 ``[B, *input_shape]`` (``[B, 2, T]`` token pairs or ``[B, T]`` tokens), ``y``
    int64 ``[B, *targets]`` (``[B, T]`` target tokens, ``[B, n_predictions]`` masked-LM
    labels), both uniform in ``[0, vocab)``.
    """
    import tensorflow as tf

    if spec.input_kind not in ("tokens", "token_pairs"):
        raise ValueError(f"{spec.name}: no synthetic_batch hook for {spec.input_kind} inputs "
                         f"in the transformer family")
    v = spec.num_classes
    x = tf.random.stateless_uniform((batch_size, *spec.input_shape), seed=seed, minval=0,
                                    maxval=v, dtype=tf.int64)
    y = tf.random.stateless_uniform((batch_size, *spec.targets), seed=(seed[0], seed[1] + 1),
                                    minval=0, maxval=v, dtype=tf.int64)
    return x, y


def loss_fn(spec: ModelSpec):
    """The loss ``(out, y) -> scalar float32``: mean softmax cross-entropy of
    ``out.reshape(-1, V)`` (cast to float32) against ``y.reshape(-1)`` with label smoothing
    ``eps = spec.label_smoothing``: ``(1 - eps) * nll + eps * mean_c(-log p_c)``, PyTorch's
    ``cross_entropy(label_smoothing=eps)`` (``ce``, transformer: 0.1; ``mlm``, BERT: the model
    returns only the masked positions, so it is the same cross-entropy)."""
    if spec.loss not in ("ce", "mlm"):
        raise ValueError(f"{spec.name}: no loss hook for {spec.loss!r} in the transformer "
                         "family")
    import tensorflow as tf

    v, eps = spec.num_classes, float(spec.label_smoothing)

    def loss(out, y):
        logits = tf.reshape(tf.cast(out, tf.float32), [-1, v])
        labels = tf.reshape(y, [-1])
        nll = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        if eps == 0.0:
            return tf.reduce_mean(nll)
        uniform = -tf.reduce_mean(tf.nn.log_softmax(logits), axis=-1)
        return tf.reduce_mean((1.0 - eps) * nll + eps * uniform)

    return loss
