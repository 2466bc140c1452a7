"""Specs of the Transformers: ``transformer`` (encoder-decoder base), ``bert_base``,
``gpt2_small`` (+ tiny variants).

Common pieces (the PyTorch layout of :mod:`dlperf.zoo.transformer.torch_impl`):

* multi-head attention of ``d`` = ``d_model`` with ``heads`` heads: Q, K, V and output
  projections ``Linear(d, d)`` with bias each (the implementations may fuse Q, K, V into one
  ``Linear(d, 3d)``: same parameters and FLOPs); scaled dot-product attention with no padding
  masks (every sequence is full length), causal where a model is autoregressive;
* feed-forward ``Linear(d, ffn)`` -> activation -> ``Linear(ffn, d)``, with biases;
* LayerNorm with weight and bias (2 * d parameters).

The three models:

* ``transformer``: Vaswani et al. 2017, "Attention Is All You Need", base model (table 3):
  6 encoder + 6 decoder layers, d_model 512, 8 heads, FFN 2048 (ReLU), dropout 0.1 on every
  sub-layer output and on the embeddings (no attention dropout), **post-LN** (``LN(x +
  sublayer(x))``, no final LayerNorm), sinusoidal positions (no parameters), one 32000-token
  embedding shared by source, target and the pre-softmax projection (sec. 3.4: "we share the
  same weight matrix between the two embedding layers and the pre-softmax linear
  transformation", embeddings multiplied by sqrt(d_model)); the projection has no bias.
  Decoder layer: causal self-attention, cross-attention over the encoder output, FFN. Input
  ``token_pairs`` ``[2, 128]``: the 128 source tokens and the 128 decoder input tokens (target
  shifted right); target: the 128 target tokens; loss: cross-entropy with label smoothing 0.1
  (sec. 5.4). Optimizer: Adam, betas (0.9, 0.98), eps 1e-9 (sec. 5.3), lr 7e-4 (the peak of
  the paper's warm-up schedule for d_model 512 and 4000 warm-up steps; no schedule here).
  ``tokens_per_sample`` = 256 (source + target).
* ``bert_base``: Devlin et al. 2019 BERT-Base: 12 layers, d 768, 12 heads, FFN 3072 (GELU,
  erf form), **post-LN**, LayerNorm eps 1e-12, dropout 0.1 (also on attention probabilities),
  embeddings: word 30522 + learned positions 512 + token types 2, summed, LayerNorm, dropout;
  masked-LM head (Hugging Face ``BertForMaskedLM`` layout): ``Linear(d, d)``, GELU,
  LayerNorm, decoder tied to the word embeddings plus its own bias of ``vocab``. No pooler, no
  next-sentence head (docs/zoo.md: MLM loss only). 109,514,298 parameters (= Hugging Face
  ``BertForMaskedLM`` of bert-base-uncased). Input length 128 (a ``bert_spec(seq_len=512)``
  keeps the parameters: the position table has 512 rows for both). **Masked positions**: a
  speed benchmark needs a fixed shape, so the loss covers ``n = ceil(0.15 * T)`` positions (20
  of 128: the ``max_predictions_per_seq`` of BERT's 128-token pre-training data), the same in
  every sample, spread evenly over the non-special positions (:func:`mlm_positions`); the
  model gathers their hidden states before the head (as NVIDIA's and the MLPerf BERT do), so
  the head costs 20 positions, not 128, and outputs ``[B, 20, vocab]``; targets ``[B, 20]``.
  Token types are all 0 and the input ids are not replaced by ``[MASK]`` (no effect on speed).
  Optimizer: AdamW lr 1e-4, betas (0.9, 0.999), eps 1e-6, weight decay 0.01 (Devlin et al.;
  applied to every parameter, :class:`OptimizerSpec` cannot exempt biases and LayerNorms).
  ``tokens_per_sample`` = 128.
* ``gpt2_small``: Radford et al. 2019 GPT-2 small (the released 124M model): 12 layers, d 768,
  12 heads, FFN 3072 (GELU, tanh approximation), **pre-LN** (``x + sublayer(LN(x))``) with a
  final LayerNorm, LayerNorm eps 1e-5, learned positions for the 1024-token context, causal
  self-attention, dropout 0.1 (embeddings, attention probabilities, residual branches),
  vocabulary 50257, output projection tied to the token embedding, no bias.
  124,439,808 parameters (Hugging Face ``GPT2LMHeadModel``'s count for ``gpt2``). Input
  ``[1024]`` tokens, next-token cross-entropy over all positions (default contract).
  Optimizer: AdamW lr 6e-4, betas (0.9, 0.95), eps 1e-8, weight decay 0.1 (GPT-3 paper table
  2.1 "Small", the usual recipe for this size; the GPT-2 paper gives none).
  ``tokens_per_sample`` = 1024.

FLOPs follow zoo/spec.py: per sample and layer, each ``Linear(n_in, n_out)`` over ``T``
positions ``2 * T * n_in * n_out``; attention scores and weighted sum ``2 * 2 * T_q * T_k * d``
(full square, also when causal); embeddings, LayerNorm, softmax, GELU, dropout, residual adds
not counted; the tied output projection counts ``2 * T * d * vocab``.
"""

from __future__ import annotations

import math

from dlperf.zoo.spec import ModelSpec, OptimizerSpec

_FLOPS_SOURCE = ("dlperf FLOP convention (zoo/spec.py): linear = 2*T*n_in*n_out, attention "
                 "QK^T and PV = 4*T_q*T_k*d per layer (full square, also causal), output "
                 "projection 2*T*d*vocab; embeddings, LayerNorm, softmax, activations not "
                 "counted; counted in dlperf.zoo.transformer.spec")


def _linear(n_in: int, n_out: int) -> int:
    return n_in * n_out + n_out


def _attention_params(d: int) -> int:
    """Q, K, V and output projections, ``Linear(d, d)`` with bias each."""
    return 4 * _linear(d, d)


def _ffn_params(d: int, ffn: int) -> int:
    return _linear(d, ffn) + _linear(ffn, d)


def _ln(d: int) -> int:
    return 2 * d


def _self_attention_flops(t: int, d: int) -> int:
    """Projections (4 d x d over T) and scores/weighted sum over T x T."""
    return 4 * 2 * t * d * d + 2 * 2 * t * t * d


def _ffn_flops(t: int, d: int, ffn: int) -> int:
    return 2 * 2 * t * d * ffn


# --- Transformer (Vaswani et al. 2017) -----------------------------------------------------------


def transformer_params(hyper: dict) -> int:
    """Parameters of the encoder-decoder Transformer of ``hyper``.

    ``hyper``: ``vocab``, ``d_model``, ``ffn``, ``enc_layers``, ``dec_layers`` (``heads`` does
    not change the count). One shared ``vocab x d`` embedding (also the output projection, no
    bias); encoder layer: self-attention, FFN, 2 LayerNorms; decoder layer: self-attention,
    cross-attention, FFN, 3 LayerNorms; positions are sinusoidal (no parameters).
    """
    d, f = hyper["d_model"], hyper["ffn"]
    enc = _attention_params(d) + _ffn_params(d, f) + 2 * _ln(d)
    dec = 2 * _attention_params(d) + _ffn_params(d, f) + 3 * _ln(d)
    return hyper["vocab"] * d + hyper["enc_layers"] * enc + hyper["dec_layers"] * dec


def transformer_forward_flops(hyper: dict) -> int:
    """Forward FLOPs of one pair of ``seq_len`` source and ``seq_len`` target tokens.

    Encoder layer: self-attention + FFN over ``S``; decoder layer: causal self-attention + FFN
    over ``T``, cross-attention (Q and output projections over ``T``, K and V over ``S``,
    scores ``T x S``); output projection ``2 * T * d * vocab``.
    """
    d, f, v = hyper["d_model"], hyper["ffn"], hyper["vocab"]
    s = t = hyper["seq_len"]
    enc = _self_attention_flops(s, d) + _ffn_flops(s, d, f)
    cross = 2 * 2 * t * d * d + 2 * 2 * s * d * d + 2 * 2 * t * s * d
    dec = _self_attention_flops(t, d) + cross + _ffn_flops(t, d, f)
    return hyper["enc_layers"] * enc + hyper["dec_layers"] * dec + 2 * t * d * v


def transformer_spec(name: str = "transformer", *, seq_len: int = 128, vocab: int = 32000,
                     d_model: int = 512, heads: int = 8, ffn: int = 2048, enc_layers: int = 6,
                     dec_layers: int = 6, dropout: float = 0.1,
                     tiny_of: str | None = None) -> ModelSpec:
    """The :class:`ModelSpec` of an encoder-decoder Transformer (defaults: base, length 128)."""
    _check(d_model, heads, seq_len, vocab, ffn, enc_layers, dec_layers)
    hyper = {"arch": "transformer", "vocab": vocab, "d_model": d_model, "heads": heads,
             "ffn": ffn, "enc_layers": enc_layers, "dec_layers": dec_layers,
             "seq_len": seq_len, "dropout": dropout}
    return ModelSpec(
        name=name,
        family="transformer",
        input_kind="token_pairs",
        input_shape=(2, seq_len),
        num_classes=vocab,
        params=transformer_params(hyper),
        forward_flops_per_sample=transformer_forward_flops(hyper),
        source=("Vaswani et al. 2017, Transformer base (post-LN, shared embeddings)"
                if tiny_of is None else "tiny variant of transformer (Vaswani et al. 2017)"),
        flops_source=_FLOPS_SOURCE,
        optimizer=OptimizerSpec(name="adam", lr=7e-4, betas=(0.9, 0.98), eps=1e-9),
        tiny_of=tiny_of,
        hyper=hyper,
        loss="ce",
        label_smoothing=0.1,
        target_shape=(seq_len,),
    )


# --- BERT (Devlin et al. 2019) --------------------------------------------------------------------

#: Fraction of the positions that the masked-LM loss covers (Devlin et al. 2019 sec. 3.1).
MLM_FRACTION = 0.15


def mlm_predictions(seq_len: int) -> int:
    """Masked positions per sequence: ``ceil(0.15 * seq_len)`` (20 for 128, 77 for 512)."""
    return math.ceil(MLM_FRACTION * seq_len)


def mlm_positions(seq_len: int, n: int) -> tuple[int, ...]:
    """The ``n`` masked positions of a ``seq_len`` sequence, the same for every sample.

    Spread evenly over positions ``1 .. seq_len - 2`` (position 0 is ``[CLS]`` and the last
    ``[SEP]`` in BERT's inputs, never masked): ``1 + (i * (seq_len - 2)) // n``. For 128:
    1, 7, 13, 19, 26, ..., 121.
    """
    if not 1 <= n <= seq_len - 2:
        raise ValueError(f"cannot mask {n} of {seq_len} positions")
    return tuple(1 + (i * (seq_len - 2)) // n for i in range(n))


def bert_params(hyper: dict) -> int:
    """Parameters of BERT with a masked-LM head (no pooler, no NSP head).

    ``hyper``: ``vocab``, ``d_model``, ``ffn``, ``layers``, ``max_positions``, ``type_vocab``.
    Embeddings ``(vocab + max_positions + type_vocab) * d`` + LayerNorm; per layer
    self-attention, LayerNorm, FFN, LayerNorm; head ``Linear(d, d)`` + LayerNorm + an output
    bias of ``vocab`` (the output weight is the word embedding).
    """
    d, f, v = hyper["d_model"], hyper["ffn"], hyper["vocab"]
    emb = (v + hyper["max_positions"] + hyper["type_vocab"]) * d + _ln(d)
    layer = _attention_params(d) + _ln(d) + _ffn_params(d, f) + _ln(d)
    head = _linear(d, d) + _ln(d) + v
    return emb + hyper["layers"] * layer + head


def bert_forward_flops(hyper: dict) -> int:
    """Forward FLOPs of one ``seq_len`` sequence: the encoder over every position, the head
    (``Linear(d, d)`` and the ``d x vocab`` output) over the ``predictions`` positions only."""
    d, f, v, t = hyper["d_model"], hyper["ffn"], hyper["vocab"], hyper["seq_len"]
    layer = _self_attention_flops(t, d) + _ffn_flops(t, d, f)
    head = hyper["predictions"] * (2 * d * d + 2 * d * v)
    return hyper["layers"] * layer + head


def bert_spec(name: str = "bert_base", *, seq_len: int = 128, vocab: int = 30522,
              d_model: int = 768, heads: int = 12, ffn: int = 3072, layers: int = 12,
              max_positions: int = 512, type_vocab: int = 2, dropout: float = 0.1,
              tiny_of: str | None = None) -> ModelSpec:
    """The :class:`ModelSpec` of BERT with a masked-LM head (defaults: BERT-Base, length 128)."""
    _check(d_model, heads, seq_len, vocab, ffn, layers)
    if seq_len > max_positions:
        raise ValueError(f"{name}: seq_len {seq_len} > max_positions {max_positions}")
    n = mlm_predictions(seq_len)
    hyper = {"arch": "bert", "vocab": vocab, "d_model": d_model, "heads": heads, "ffn": ffn,
             "layers": layers, "seq_len": seq_len, "max_positions": max_positions,
             "type_vocab": type_vocab, "predictions": n,
             "positions": mlm_positions(seq_len, n), "dropout": dropout, "ln_eps": 1e-12}
    return ModelSpec(
        name=name,
        family="transformer",
        input_kind="tokens",
        input_shape=(seq_len,),
        num_classes=vocab,
        params=bert_params(hyper),
        forward_flops_per_sample=bert_forward_flops(hyper),
        source=("Devlin et al. 2019, BERT-Base with masked-LM head (post-LN; no pooler/NSP)"
                if tiny_of is None else "tiny variant of bert_base (Devlin et al. 2019)"),
        flops_source=_FLOPS_SOURCE,
        optimizer=OptimizerSpec(name="adamw", lr=1e-4, betas=(0.9, 0.999), eps=1e-6,
                                weight_decay=0.01),
        tiny_of=tiny_of,
        hyper=hyper,
        loss="mlm",
        target_shape=(n,),
    )


# --- GPT-2 (Radford et al. 2019) ------------------------------------------------------------------


def gpt2_params(hyper: dict) -> int:
    """Parameters of GPT-2: token ``vocab x d`` and position ``context x d`` embeddings; per
    layer LayerNorm, self-attention, LayerNorm, FFN; final LayerNorm; the output projection
    is the token embedding (tied, no bias)."""
    d, f = hyper["d_model"], hyper["ffn"]
    layer = _ln(d) + _attention_params(d) + _ln(d) + _ffn_params(d, f)
    return (hyper["vocab"] + hyper["seq_len"]) * d + hyper["layers"] * layer + _ln(d)


def gpt2_forward_flops(hyper: dict) -> int:
    """Forward FLOPs of one ``seq_len`` sequence: per layer causal self-attention (full square)
    and FFN over every position, then the ``d x vocab`` output projection at every position."""
    d, f, v, t = hyper["d_model"], hyper["ffn"], hyper["vocab"], hyper["seq_len"]
    layer = _self_attention_flops(t, d) + _ffn_flops(t, d, f)
    return hyper["layers"] * layer + 2 * t * d * v


def gpt2_spec(name: str = "gpt2_small", *, seq_len: int = 1024, vocab: int = 50257,
              d_model: int = 768, heads: int = 12, ffn: int = 3072, layers: int = 12,
              dropout: float = 0.1, tiny_of: str | None = None) -> ModelSpec:
    """The :class:`ModelSpec` of GPT-2 (defaults: small, 124M); the context is ``seq_len``."""
    _check(d_model, heads, seq_len, vocab, ffn, layers)
    hyper = {"arch": "gpt2", "vocab": vocab, "d_model": d_model, "heads": heads, "ffn": ffn,
             "layers": layers, "seq_len": seq_len, "dropout": dropout, "ln_eps": 1e-5}
    return ModelSpec(
        name=name,
        family="transformer",
        input_kind="tokens",
        input_shape=(seq_len,),
        num_classes=vocab,
        params=gpt2_params(hyper),
        forward_flops_per_sample=gpt2_forward_flops(hyper),
        source=("Radford et al. 2019, GPT-2 small (pre-LN, tied embeddings, learned positions)"
                if tiny_of is None else "tiny variant of gpt2_small (Radford et al. 2019)"),
        flops_source=_FLOPS_SOURCE,
        optimizer=OptimizerSpec(name="adamw", lr=6e-4, betas=(0.9, 0.95), eps=1e-8,
                                weight_decay=0.1),
        tiny_of=tiny_of,
        hyper=hyper,
    )


def _check(d_model: int, heads: int, *sizes: int) -> None:
    if min(d_model, heads, *sizes) < 1 or d_model % heads:
        raise ValueError(f"transformer sizes must be positive and d_model ({d_model}) a "
                         f"multiple of heads ({heads})")


SPECS: dict[str, ModelSpec] = {
    s.name: s
    for s in (
        transformer_spec(),
        bert_spec(),
        gpt2_spec(),
        # Tiny CPU-test variants: same layouts, d_model 32, 2 heads, short sequences and small
        # vocabularies (the output projection would dominate otherwise).
        transformer_spec("transformer_tiny", seq_len=16, vocab=256, d_model=32, heads=2,
                         ffn=64, enc_layers=2, dec_layers=2, tiny_of="transformer"),
        bert_spec("bert_base_tiny", seq_len=32, vocab=256, d_model=32, heads=2, ffn=64,
                  layers=2, max_positions=64, tiny_of="bert_base"),
        gpt2_spec("gpt2_small_tiny", seq_len=32, vocab=256, d_model=32, heads=2, ffn=64,
                  layers=2, tiny_of="gpt2_small"),
    )
}
