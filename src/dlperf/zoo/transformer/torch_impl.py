"""PyTorch implementations of the Transformers: ``transformer`` (encoder-decoder, post-LN),
``bert_base`` (post-LN, masked-LM head) and ``gpt2_small`` (pre-LN decoder-only), + tiny.

Attention is ``torch.nn.functional.scaled_dot_product_attention`` (flash / memory-efficient
kernels on CUDA, including their causal and dropout variants), with Q, K and V computed by one
fused ``Linear(d, 3d)`` for self-attention (and K, V by one ``Linear(d, 2d)`` for
cross-attention): the same parameters and FLOPs as four ``Linear(d, d)``, fewer kernel
launches. No padding masks: every sequence is full length. Layouts, counts and sources:
:mod:`dlperf.zoo.transformer.spec`.

Models map ``[B, 2, T]`` token pairs (transformer) or ``[B, T]`` tokens to logits ``[B, T,
vocab]`` (``[B, n_predictions, vocab]`` for BERT). This module exports the harness hooks
:func:`synthetic_batch` and :func:`loss_fn` for the specs that leave the default contract
(transformer: token pairs and label smoothing; BERT: masked-LM targets); GPT-2 uses the
harness defaults (tokens, next-token cross-entropy).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from dlperf.zoo.spec import ModelSpec

# --- building blocks ---------------------------------------------------------------------------


def _heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """``[B, T, d]`` -> ``[B, heads, T, d / heads]``."""
    b, t, d = x.shape
    return x.view(b, t, heads, d // heads).transpose(1, 2)


def _merge(x: torch.Tensor) -> torch.Tensor:
    """``[B, heads, T, dh]`` -> ``[B, T, heads * dh]``."""
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)


class SelfAttention(nn.Module):
    """Multi-head self-attention: fused ``qkv`` projection, SDPA, output ``proj``."""

    def __init__(self, d: int, heads: int, attn_dropout: float, causal: bool) -> None:
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.heads, self.attn_dropout, self.causal = heads, attn_dropout, causal

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, T, d]`` -> ``[B, T, d]``."""
        q, k, v = (_heads(t, self.heads) for t in self.qkv(x).chunk(3, dim=-1))
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.attn_dropout if self.training else 0.0,
            is_causal=self.causal)
        return self.proj(_merge(y))


class CrossAttention(nn.Module):
    """Multi-head attention of decoder queries over the encoder output (``q``, fused ``kv``)."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.q = nn.Linear(d, d)
        self.kv = nn.Linear(d, 2 * d)
        self.proj = nn.Linear(d, d)
        self.heads = heads

    def forward(self, x: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        """``x`` ``[B, T, d]`` attends over ``memory`` ``[B, S, d]`` -> ``[B, T, d]``."""
        q = _heads(self.q(x), self.heads)
        k, v = (_heads(t, self.heads) for t in self.kv(memory).chunk(2, dim=-1))
        return self.proj(_merge(F.scaled_dot_product_attention(q, k, v)))


class FeedForward(nn.Sequential):
    """``Linear(d, ffn)`` -> activation -> ``Linear(ffn, d)``."""

    def __init__(self, d: int, ffn: int, activation: nn.Module) -> None:
        super().__init__(nn.Linear(d, ffn), activation, nn.Linear(ffn, d))


def sinusoidal_positions(length: int, d: int) -> torch.Tensor:
    """Vaswani et al. 2017 sec. 3.5: ``PE[p, 2i] = sin(p / 10000^(2i/d))``, ``PE[p, 2i+1] =
    cos(...)``; ``[length, d]`` float32."""
    pos = torch.arange(length, dtype=torch.float32).unsqueeze(1)
    inv = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
    pe = torch.zeros(length, d)
    pe[:, 0::2] = torch.sin(pos * inv)
    pe[:, 1::2] = torch.cos(pos * inv)[:, : d // 2]
    return pe


# --- Transformer (Vaswani et al. 2017), post-LN ----------------------------------------------


class EncoderLayer(nn.Module):
    """Post-LN encoder layer: ``x = LN(x + drop(attn(x)))``, ``x = LN(x + drop(ffn(x)))``."""

    def __init__(self, d: int, heads: int, ffn: int, dropout: float) -> None:
        super().__init__()
        self.attn = SelfAttention(d, heads, 0.0, causal=False)
        self.ln1 = nn.LayerNorm(d)
        self.ffn = FeedForward(d, ffn, nn.ReLU())
        self.ln2 = nn.LayerNorm(d)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, S, d]`` -> ``[B, S, d]``."""
        x = self.ln1(x + self.drop(self.attn(x)))
        return self.ln2(x + self.drop(self.ffn(x)))


class DecoderLayer(nn.Module):
    """Post-LN decoder layer: causal self-attention, cross-attention, FFN, each + LN."""

    def __init__(self, d: int, heads: int, ffn: int, dropout: float) -> None:
        super().__init__()
        self.self_attn = SelfAttention(d, heads, 0.0, causal=True)
        self.ln1 = nn.LayerNorm(d)
        self.cross_attn = CrossAttention(d, heads)
        self.ln2 = nn.LayerNorm(d)
        self.ffn = FeedForward(d, ffn, nn.ReLU())
        self.ln3 = nn.LayerNorm(d)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        """``x`` ``[B, T, d]``, encoder output ``memory`` ``[B, S, d]`` -> ``[B, T, d]``."""
        x = self.ln1(x + self.drop(self.self_attn(x)))
        x = self.ln2(x + self.drop(self.cross_attn(x, memory)))
        return self.ln3(x + self.drop(self.ffn(x)))


class Transformer(nn.Module):
    """Encoder-decoder Transformer: ``[B, 2, T]`` int64 -> logits ``[B, T, vocab]``.

    ``x[:, 0]`` is the source, ``x[:, 1]`` the decoder input. One embedding (N(0, d^-0.5),
    scaled by sqrt(d)) serves source, target and the output projection (no bias); sinusoidal
    positions; dropout on the embedded inputs. Other weights Xavier-uniform, biases zero
    (fairseq's and tensor2tensor's initialisation).
    """

    def __init__(self, vocab: int, d: int, heads: int, ffn: int, enc_layers: int,
                 dec_layers: int, seq_len: int, dropout: float) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, d)
        self.register_buffer("pe", sinusoidal_positions(seq_len, d), persistent=False)
        self.scale = math.sqrt(d)
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.ModuleList(EncoderLayer(d, heads, ffn, dropout)
                                     for _ in range(enc_layers))
        self.decoder = nn.ModuleList(DecoderLayer(d, heads, ffn, dropout)
                                     for _ in range(dec_layers))
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)
        nn.init.normal_(self.embedding.weight, 0.0, d ** -0.5)

    def _embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.drop(self.embedding(tokens) * self.scale + self.pe[: tokens.shape[1]])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``[B, 2, T]`` int64 (source, decoder input) -> logits ``[B, T, vocab]``."""
        memory = self._embed(x[:, 0])
        for layer in self.encoder:
            memory = layer(memory)
        h = self._embed(x[:, 1])
        for layer in self.decoder:
            h = layer(h, memory)
        return F.linear(h, self.embedding.weight)


# --- BERT (Devlin et al. 2019), post-LN, masked-LM head ---------------------------------------


class BertLayer(nn.Module):
    """Post-LN BERT layer (GELU FFN, attention-probability dropout)."""

    def __init__(self, d: int, heads: int, ffn: int, dropout: float, eps: float) -> None:
        super().__init__()
        self.attn = SelfAttention(d, heads, dropout, causal=False)
        self.ln1 = nn.LayerNorm(d, eps=eps)
        self.ffn = FeedForward(d, ffn, nn.GELU())
        self.ln2 = nn.LayerNorm(d, eps=eps)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, T, d]`` -> ``[B, T, d]``."""
        x = self.ln1(x + self.drop(self.attn(x)))
        return self.ln2(x + self.drop(self.ffn(x)))


class Bert(nn.Module):
    """BERT with a masked-LM head: ``[B, T]`` int64 -> logits ``[B, n_predictions, vocab]``.

    Embeddings (word + position + token type 0) -> LayerNorm -> dropout -> layers; the hidden
    states at the fixed masked positions (``hyper["positions"]``) are gathered, then the head
    (``Linear(d, d)``, GELU, LayerNorm, output tied to the word embedding + bias). Weights
    N(0, 0.02), biases zero, LayerNorm 1/0 (BERT's initialisation).
    """

    def __init__(self, vocab: int, d: int, heads: int, ffn: int, layers: int,
                 max_positions: int, type_vocab: int, positions: tuple[int, ...],
                 dropout: float, eps: float) -> None:
        super().__init__()
        self.word = nn.Embedding(vocab, d)
        self.position = nn.Embedding(max_positions, d)
        self.token_type = nn.Embedding(type_vocab, d)
        self.ln = nn.LayerNorm(d, eps=eps)
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList(BertLayer(d, heads, ffn, dropout, eps)
                                    for _ in range(layers))
        self.register_buffer("masked", torch.tensor(positions, dtype=torch.long),
                             persistent=False)
        self.head = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.LayerNorm(d, eps=eps))
        self.head_bias = nn.Parameter(torch.zeros(vocab))
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """``tokens`` ``[B, T]`` int64 -> logits ``[B, n_predictions, vocab]``."""
        t = tokens.shape[1]
        x = self.word(tokens) + self.position.weight[:t] + self.token_type.weight[0]
        x = self.drop(self.ln(x))
        for layer in self.layers:
            x = layer(x)
        x = self.head(x.index_select(1, self.masked))
        return F.linear(x, self.word.weight, self.head_bias)


# --- GPT-2 (Radford et al. 2019), pre-LN ------------------------------------------------------


class GPT2Block(nn.Module):
    """Pre-LN block: ``x = x + drop(attn(LN(x)))``, ``x = x + drop(mlp(LN(x)))``, causal."""

    def __init__(self, d: int, heads: int, ffn: int, dropout: float, eps: float) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d, eps=eps)
        self.attn = SelfAttention(d, heads, dropout, causal=True)
        self.ln2 = nn.LayerNorm(d, eps=eps)
        self.mlp = FeedForward(d, ffn, nn.GELU(approximate="tanh"))
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, T, d]`` -> ``[B, T, d]``."""
        x = x + self.drop(self.attn(self.ln1(x)))
        return x + self.drop(self.mlp(self.ln2(x)))


class GPT2(nn.Module):
    """GPT-2: ``[B, T]`` int64 -> next-token logits ``[B, T, vocab]``.

    Token + learned position embeddings, dropout, pre-LN blocks, final LayerNorm, output tied
    to the token embedding (no bias). Weights N(0, 0.02), the residual output projections
    N(0, 0.02 / sqrt(2 * layers)) (Radford et al. 2019 sec. 2.3), biases zero.
    """

    def __init__(self, vocab: int, d: int, heads: int, ffn: int, layers: int, context: int,
                 dropout: float, eps: float) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(context, d)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(GPT2Block(d, heads, ffn, dropout, eps)
                                    for _ in range(layers))
        self.ln_f = nn.LayerNorm(d, eps=eps)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)
        for b in self.blocks:
            for proj in (b.attn.proj, b.mlp[2]):
                nn.init.normal_(proj.weight, 0.0, 0.02 / math.sqrt(2 * layers))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """``tokens`` ``[B, T]`` int64 -> logits ``[B, T, vocab]``."""
        x = self.drop(self.wte(tokens) + self.wpe.weight[: tokens.shape[1]])
        for block in self.blocks:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)


# --- build and harness hooks ---------------------------------------------------------------------


#: ``hyper["arch"]`` -> the model of that layout, from ``hyper``.
LAYOUTS: dict[str, Callable[[dict], nn.Module]] = {
    "transformer": lambda h: Transformer(h["vocab"], h["d_model"], h["heads"], h["ffn"],
                                         h["enc_layers"], h["dec_layers"], h["seq_len"],
                                         h["dropout"]),
    "bert": lambda h: Bert(h["vocab"], h["d_model"], h["heads"], h["ffn"], h["layers"],
                           h["max_positions"], h["type_vocab"], tuple(h["positions"]),
                           h["dropout"], h["ln_eps"]),
    "gpt2": lambda h: GPT2(h["vocab"], h["d_model"], h["heads"], h["ffn"], h["layers"],
                           h["seq_len"], h["dropout"], h["ln_eps"]),
}


def build(spec: ModelSpec) -> nn.Module:
    """Build the Transformer of ``spec`` (family ``transformer``; layout ``hyper["arch"]``)."""
    if spec.family != "transformer":
        raise ValueError(f"{spec.name} is a {spec.family} model, not a transformer")
    arch = spec.hyper["arch"]
    if arch not in LAYOUTS:
        raise ValueError(f"{spec.name}: unknown transformer layout {arch!r}")
    return LAYOUTS[arch](spec.hyper)


def synthetic_batch(spec: ModelSpec, batch_size: int, generator: torch.Generator,
                    device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """One synthetic ``(x, y)`` batch on ``device`` (zoo/spec.py contract).

    ``x`` int64 ``[B, *input_shape]`` (``[B, 2, T]`` token pairs or ``[B, T]`` tokens) and
    ``y`` int64 ``[B, *targets]`` (``[B, T]`` target tokens, ``[B, n_predictions]`` masked-LM
    labels), both uniform in ``[0, vocab)``.
    """
    v = spec.num_classes
    x = torch.randint(0, v, (batch_size, *spec.input_shape), generator=generator, device=device)
    y = torch.randint(0, v, (batch_size, *spec.targets), generator=generator, device=device)
    return x, y


def loss_fn(spec: ModelSpec) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The loss ``(out, y) -> scalar``: mean cross-entropy over every predicted position, with
    ``spec.label_smoothing`` (``ce``, transformer: 0.1; ``mlm``, BERT: the model returns only
    the masked positions, so it is the same cross-entropy)."""
    if spec.loss not in ("ce", "mlm"):
        raise ValueError(f"{spec.name}: no loss hook for {spec.loss!r} in the transformer "
                         "family")
    v, smoothing = spec.num_classes, spec.label_smoothing

    def loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(out.reshape(-1, v), y.reshape(-1), label_smoothing=smoothing)

    return loss
