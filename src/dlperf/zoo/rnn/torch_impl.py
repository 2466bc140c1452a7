"""PyTorch implementations of the recurrent networks: the LSTM word language model (``lstm``,
``lstm_tiny``) and DeepSpeech2 (``deepspeech2``, ``deepspeech2_tiny``).

LSTM: ``nn.Embedding`` -> dropout -> ``nn.LSTM`` (all layers in one module, so cuDNN runs the
whole stack and time loop in one call) -> dropout -> ``nn.Linear`` decoder on every step.
DeepSpeech2: two ``Conv2d`` + BN + clipped ReLU, then one bidirectional ``nn.GRU`` per layer
(cuDNN runs each layer's two directions and time loop in one call; the directions are summed,
which a multi-layer ``nn.GRU`` cannot do), then a ``Linear`` per frame. Layouts, counts and
sources: :mod:`dlperf.zoo.rnn.spec`.

DeepSpeech2 has spectrogram inputs and a CTC loss, so this module also exports the harness
hooks :func:`synthetic_batch` and :func:`loss_fn` (the contract of :mod:`dlperf.zoo.spec`);
the LSTM uses the harness's default token data and cross-entropy.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from dlperf.zoo.rnn import spec as layout
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


class DeepSpeech2(nn.Module):
    """DeepSpeech2: spectrogram ``[B, bins, frames]`` float -> logits ``[B, T_out, classes]``.

    ``[B, 1, bins, frames]`` -> (conv, BN, clipped ReLU) x 2 -> ``[T_out, B, C * bins_out]`` ->
    bidirectional GRU layers (time-major, directions summed) -> ``Linear`` per frame ->
    batch-major logits. The loss (:func:`loss_fn`) takes the log-softmax; the logits stay
    un-normalised like every other zoo model's.
    """

    def __init__(self, conv_channels: int, rnn_in: int, hidden: int, layers: int,
                 num_classes: int) -> None:
        super().__init__()
        convs: list[nn.Module] = []
        c_in = 1
        for kernel, stride, pad in layout.DS2_CONVS:
            convs += [nn.Conv2d(c_in, conv_channels, kernel, stride=stride, padding=pad,
                                bias=False),
                      nn.BatchNorm2d(conv_channels),
                      nn.Hardtanh(0.0, layout.DS2_CLIP, inplace=True)]
            c_in = conv_channels
        self.conv = nn.Sequential(*convs)
        self.rnns = nn.ModuleList(
            nn.GRU(rnn_in if i == 0 else hidden, hidden, bidirectional=True)
            for i in range(layers))
        self.hidden = hidden
        self.fc = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``[B, bins, frames]`` float -> logits ``[B, T_out, num_classes]``."""
        x = self.conv(x.unsqueeze(1))  # [B, C, bins', T']
        b, c, f, t = x.shape
        x = x.reshape(b, c * f, t).permute(2, 0, 1)  # [T', B, C * bins'], time-major
        for rnn in self.rnns:
            x, _ = rnn(x)  # [T', B, 2 * hidden]: forward and backward outputs
            x = x[..., :self.hidden] + x[..., self.hidden:]
        return self.fc(x).transpose(0, 1)  # [B, T', classes]


#: ``hyper["arch"]`` (``lstm`` where absent) -> the model of that layout, from ``(hyper, spec)``.
LAYOUTS: dict[str, Callable[[dict, ModelSpec], nn.Module]] = {
    "lstm": lambda h, s: LSTMLanguageModel(h["vocab"], h["emb"], h["hidden"], h["layers"],
                                           h["dropout"]),
    "deepspeech2": lambda h, s: DeepSpeech2(h["conv_channels"],
                                            layout.deepspeech2_geometry(h)["rnn_in"],
                                            h["hidden"], h["layers"], s.num_classes),
}


def build(spec: ModelSpec) -> nn.Module:
    """Build the recurrent model of ``spec`` (family ``rnn``), default initialisation.

    ``hyper["arch"] == "deepspeech2"`` builds :class:`DeepSpeech2`; a spec without an arch is
    the LSTM language model.
    """
    if spec.family != "rnn":
        raise ValueError(f"{spec.name} is a {spec.family} model, not an rnn")
    arch = spec.hyper.get("arch", "lstm")
    if arch not in LAYOUTS:
        raise ValueError(f"{spec.name}: unknown rnn layout {arch!r}")
    return LAYOUTS[arch](spec.hyper, spec)


# --- harness hooks (dlperf.zoo.spec contract; used for specs that are not ``default_io``) -----


def synthetic_batch(spec: ModelSpec, batch_size: int, generator: torch.Generator,
                    device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """One synthetic ``(x, y)`` batch on ``device`` for a spectrogram/CTC spec.

    ``x`` float32 ``[B, bins, frames]`` ~ N(0, 1); ``y`` int64 ``[B, S]`` uniform in
    ``[1, num_classes)`` (0 is the CTC blank).
    """
    if spec.input_kind != "spectrogram" or spec.loss != "ctc":
        raise ValueError(f"{spec.name}: no synthetic_batch hook for {spec.input_kind}/"
                         f"{spec.loss} in the rnn family (the harness default covers tokens)")
    x = torch.randn((batch_size, *spec.input_shape), generator=generator, device=device)
    y = torch.randint(1, spec.num_classes, (batch_size, *spec.targets), generator=generator,
                      device=device)
    return x, y


def ctc_loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean CTC loss of logits ``[B, T, C]`` against full-length targets ``[B, S]`` (blank 0).

    The log-softmax is taken in float32 (also under bf16 autocast); every input has ``T``
    frames and every target ``S`` labels; PyTorch's ``reduction="mean"`` divides each
    utterance's loss by ``S`` and averages over the batch.
    """
    b, t = out.shape[0], out.shape[1]
    log_probs = out.float().log_softmax(-1).transpose(0, 1)  # [T, B, C]
    input_lengths = torch.full((b,), t, dtype=torch.long, device=out.device)
    target_lengths = torch.full((b,), y.shape[1], dtype=torch.long, device=out.device)
    return F.ctc_loss(log_probs, y, input_lengths, target_lengths, blank=0, reduction="mean")


def loss_fn(spec: ModelSpec) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The loss ``(out, y) -> scalar`` of a non-default spec of this family (``ctc``)."""
    if spec.loss != "ctc":
        raise ValueError(f"{spec.name}: no loss hook for {spec.loss!r} in the rnn family")
    return ctc_loss
