"""PyTorch implementation of the LSTM word language model (``lstm``, ``lstm_tiny``).

``nn.Embedding`` -> dropout -> ``nn.LSTM`` (all layers in one module, so cuDNN runs the whole
stack and time loop in one call) -> dropout -> ``nn.Linear`` decoder on every step. Layout,
counts and sources: :mod:`dlperf.zoo.rnn.spec`.
"""

from __future__ import annotations

import torch
from torch import nn

from dlperf.zoo.spec import ModelSpec


class LSTMLanguageModel(nn.Module):
    """Zaremba-style LSTM LM: token ids ``[B, T]`` int64 -> logits ``[B, T, vocab]``.

    Every forward call starts from a zero hidden and cell state (the benchmark's samples are
    independent windows; the state is not carried between batches). ``nn.LSTM`` has two bias
    vectors per layer (``b_ih``, ``b_hh``: the cuDNN convention), which the spec counts.
    """

    def __init__(self, vocab: int, emb: int, hidden: int, layers: int, dropout: float) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb)
        self.drop = nn.Dropout(dropout)
        self.lstm = nn.LSTM(emb, hidden, num_layers=layers, batch_first=True,
                            dropout=dropout if layers > 1 else 0.0)
        self.decoder = nn.Linear(hidden, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """``tokens`` ``[B, T]`` int64 -> logits ``[B, T, vocab]``."""
        x = self.drop(self.embedding(tokens))
        x, _ = self.lstm(x)
        return self.decoder(self.drop(x))


def build(spec: ModelSpec) -> nn.Module:
    """Build the LSTM language model of ``spec`` (family ``rnn``), default initialisation."""
    if spec.family != "rnn":
        raise ValueError(f"{spec.name} is a {spec.family} model, not an rnn")
    h = spec.hyper
    return LSTMLanguageModel(h["vocab"], h["emb"], h["hidden"], h["layers"], h["dropout"])
