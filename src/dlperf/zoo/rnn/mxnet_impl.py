"""MXNet Gluon implementation of the LSTM word language model (``lstm``, ``lstm_tiny``).

``nn.Embedding`` -> dropout -> ``gluon.rnn.LSTM`` (all layers in one block: MXNet's fused
``RNN`` operator runs the stack and the time loop in one call, with oneDNN on the CPU, as cuDNN
does for PyTorch's ``nn.LSTM``) -> dropout -> ``Dense(vocab, flatten=False)`` on every step.
Token ids ``[B, T]`` -> logits ``[B, T, vocab]``; every call starts from zero hidden and cell
states (torch_impl.LSTMLanguageModel). Layout, counts and sources: :mod:`dlperf.zoo.rnn.spec`.

The Gluon LSTM has two bias vectors per layer (``i2h_bias`` and ``h2h_bias``, the cuDNN
convention that the spec counts) and stacks its gates in PyTorch's order ``(i, f, g, o)``, so
PyTorch's ``weight_ih_l<k>``, ``weight_hh_l<k>``, ``bias_ih_l<k>`` and ``bias_hh_l<k>`` load
unchanged as ``lstm.l<k>_i2h_weight``, ``lstm.l<k>_h2h_weight``, ``lstm.l<k>_i2h_bias`` and
``lstm.l<k>_h2h_bias`` (:mod:`dlperf.zoo.convert_mxnet`). Initialisation as PyTorch's defaults:
embedding N(0, 1), LSTM weights and biases U(-1/sqrt(hidden), 1/sqrt(hidden)), decoder
U(-1/sqrt(hidden), 1/sqrt(hidden)) (``kaiming_uniform_(a=sqrt(5))`` and its bias rule).

deepspeech2 has no MXNet implementation (:func:`build` says so). Imported only in the MXNet
interpreter (``DLPERF_MXNET_PYTHON``), never by dlperf's core.
"""

from __future__ import annotations

import math

import mxnet as mx
from mxnet import gluon
from mxnet.gluon import nn

from dlperf.zoo.spec import ModelSpec


class LSTMLanguageModel(nn.HybridBlock):
    """Zaremba-style LSTM LM: token ids ``[B, T]`` -> logits ``[B, T, vocab]``."""

    def __init__(self, vocab: int, emb: int, hidden: int, layers: int, dropout: float) -> None:
        super().__init__(prefix="")
        u = mx.init.Uniform(1 / math.sqrt(hidden))
        with self.name_scope():
            self.embedding = nn.Embedding(vocab, emb, weight_initializer=mx.init.Normal(1.0),
                                          prefix="embedding.")
            self.drop = nn.Dropout(dropout, prefix="drop.")
            self.lstm = gluon.rnn.LSTM(hidden, num_layers=layers, layout="NTC",
                                       dropout=dropout if layers > 1 else 0.0, input_size=emb,
                                       i2h_weight_initializer=u, h2h_weight_initializer=u,
                                       i2h_bias_initializer=u, h2h_bias_initializer=u,
                                       prefix="lstm.")
            self.decoder = nn.Dense(vocab, in_units=hidden, flatten=False,
                                    weight_initializer=u, bias_initializer=u, prefix="decoder.")

    def hybrid_forward(self, F, tokens):  # noqa: N803
        """``tokens`` ``[B, T]`` (float32 or int ids) -> logits ``[B, T, vocab]``."""
        x = self.drop(self.embedding(tokens))
        x = self.lstm(x)  # no states given: zero initial states, output only
        return self.decoder(self.drop(x))


def build(spec: ModelSpec) -> nn.HybridBlock:
    """Build the recurrent model of ``spec`` (family ``rnn``).

    Raises:
        NotImplementedError: deepspeech2 (no MXNet implementation).
    """
    if spec.family != "rnn":
        raise ValueError(f"{spec.name} is a {spec.family} model, not an rnn")
    if spec.input_kind != "tokens":
        raise NotImplementedError(f"{spec.name}: no MXNet implementation (MXNet has the lstm "
                                  f"language model only)")
    h = spec.hyper
    return LSTMLanguageModel(h["vocab"], h["emb"], h["hidden"], h["layers"], h["dropout"])
