"""Specs of the recurrent networks: the LSTM word language model ``lstm`` and the speech model
``deepspeech2`` (+ ``lstm_tiny``, ``deepspeech2_tiny``). The DeepSpeech2 layout is described
at :func:`deepspeech2_spec`.

Source: Zaremba, Sutskever, Vinyals 2014, "Recurrent Neural Network Regularization", the
"medium" model: embedding 650, two LSTM layers of 650 units, a linear decoder (not tied) to
the 10,000-word PTB vocabulary, unrolled 35 steps, dropout 0.5 on the non-recurrent
connections; trained with plain SGD (no momentum), lr 1.0. DLBench (Shi et al. 2016) ran the
same kind of LSTM with sequence lengths 32 and 64, hence :func:`lstm_spec` takes ``seq_len``.

Layout (the PyTorch reference, ``nn.Embedding`` + ``nn.LSTM`` + ``nn.Linear``):

* embedding ``vocab x emb`` (lookups cost 0 FLOPs);
* LSTM layer ``l`` with input size ``in_l`` (``emb`` for the first layer, ``hidden`` after):
  ``W_ih [4*hidden, in_l]``, ``W_hh [4*hidden, hidden]`` and TWO bias vectors ``b_ih`` and
  ``b_hh`` of ``4*hidden`` each. Two biases are the cuDNN convention (and PyTorch's); they
  are redundant mathematically, but the parameter count of the spec includes both, so an
  implementation in another framework (which may have a single gate bias) must carry two
  bias vectors to match this count exactly;
* decoder ``Linear(hidden, vocab)`` with bias, applied to every time step.

FLOPs (zoo/spec.py convention): per time step and layer the four gate matmuls over input and
hidden state, ``2 * 4*hidden * (in_l + hidden)``; per token the decoder, ``2 * hidden * vocab``.
Gate non-linearities, the cell update, bias adds and the embedding lookup are not counted.
"""

from __future__ import annotations

from dlperf.zoo.spec import ModelSpec, OptimizerSpec

_FLOPS_SOURCE = ("dlperf FLOP convention (zoo/spec.py): per token and LSTM layer "
                 "2*4*hidden*(in+hidden) for the gate matmuls, plus 2*hidden*vocab for the "
                 "decoder; embedding lookups 0; counted in dlperf.zoo.rnn.spec")


def _layer_inputs(hyper: dict) -> list[int]:
    """Input size of each LSTM layer: the embedding size, then the hidden size."""
    return [hyper["emb"]] + [hyper["hidden"]] * (hyper["layers"] - 1)


def lstm_params(hyper: dict) -> int:
    """Trainable parameters of the LSTM language model of ``hyper``.

    ``hyper``: ``vocab``, ``emb``, ``hidden``, ``layers``. Embedding ``vocab*emb``; per layer
    ``4*hidden*(in_l + hidden)`` weights plus ``2 * 4*hidden`` biases (b_ih and b_hh, the cuDNN
    / ``torch.nn.LSTM`` convention); decoder ``hidden*vocab + vocab``.
    """
    h, v = hyper["hidden"], hyper["vocab"]
    n = v * hyper["emb"]  # embedding table
    for n_in in _layer_inputs(hyper):
        n += 4 * h * n_in + 4 * h * h  # W_ih, W_hh (gates i, f, g, o stacked)
        n += 2 * 4 * h  # b_ih and b_hh (two bias vectors: cuDNN convention)
    n += h * v + v  # decoder Linear(hidden, vocab)
    return n


def lstm_forward_flops(hyper: dict, seq_len: int) -> int:
    """Forward FLOPs of one sample (``seq_len`` tokens) of the LSTM language model.

    Per token: ``sum_l 2 * 4*hidden * (in_l + hidden)`` for the gate matmuls of every layer
    (input and recurrent) and ``2 * hidden * vocab`` for the decoder (zoo/spec.py convention).
    """
    h, v = hyper["hidden"], hyper["vocab"]
    per_token = sum(2 * 4 * h * (n_in + h) for n_in in _layer_inputs(hyper))
    per_token += 2 * h * v  # decoder
    return seq_len * per_token


def lstm_spec(seq_len: int = 35, name: str = "lstm", *, vocab: int = 10000, emb: int = 650,
              hidden: int = 650, layers: int = 2, dropout: float = 0.5,
              tiny_of: str | None = None,
              real_data: tuple[str, ...] = ("ptb", "wikitext2")) -> ModelSpec:
    """Build the :class:`ModelSpec` of a Zaremba-style LSTM language model.

    Defaults are Zaremba et al. 2014 "medium". Input: ``[B, seq_len]`` int64 token ids;
    output: ``[B, seq_len, vocab]`` logits (``num_classes = vocab``). ``dropout`` (kept at
    Zaremba's 0.5, no parameters) is applied to the embedding output, between the LSTM layers
    and before the decoder. Optimizer: SGD lr 1.0 without momentum (Zaremba et al. 2014; they
    also clip the gradient norm at 5, which is not part of :class:`OptimizerSpec`).
    """
    if min(seq_len, vocab, emb, hidden, layers) < 1:
        raise ValueError("lstm sizes must be positive")
    hyper = {"vocab": vocab, "emb": emb, "hidden": hidden, "layers": layers,
             "seq_len": seq_len, "dropout": dropout}
    return ModelSpec(
        name=name,
        family="rnn",
        input_kind="tokens",
        input_shape=(seq_len,),
        num_classes=vocab,
        params=lstm_params(hyper),
        forward_flops_per_sample=lstm_forward_flops(hyper, seq_len),
        source=("Zaremba et al. 2014 (medium LSTM LM, untied decoder); Shi et al. 2016"
                if tiny_of is None else "tiny variant of lstm (Zaremba et al. 2014)"),
        flops_source=_FLOPS_SOURCE,
        optimizer=OptimizerSpec(name="sgd", lr=1.0, momentum=0.0),
        tiny_of=tiny_of,
        real_data=real_data,
        hyper=hyper,
    )


# --- DeepSpeech2 -------------------------------------------------------------------------------

#: DeepSpeech2 convolutions over the ``[1, bins, frames]`` spectrogram: (kernel, stride, padding),
#: each as (frequency, time). Amodei et al. 2016 table 2 ("2 layers 2D, 32 filters, 41x11 and
#: 21x11", strides 2x2 and 2x1) with the padding of deepspeech.pytorch (SeanNaren), which keeps
#: ``ceil(frames / 2)`` output frames.
DS2_CONVS: tuple[tuple[tuple[int, int], tuple[int, int], tuple[int, int]], ...] = (
    ((41, 11), (2, 2), (20, 5)),
    ((21, 11), (2, 1), (10, 5)),
)
#: Clipped ReLU of DeepSpeech2 (Amodei et al. 2016 sec. 3.1): min(max(x, 0), 20).
DS2_CLIP = 20.0

_DS2_FLOPS_SOURCE = ("dlperf FLOP convention (zoo/spec.py): conv = 2*c_in*kf*kt*c_out*f_out*t_out;"
                     " per output frame, GRU layer and direction 2*3*hidden*(in+hidden) for the "
                     "gate matmuls (input and recurrent), plus 2*hidden*classes for the output "
                     "layer; BN, clipped ReLU, gate non-linearities, direction sums and CTC not "
                     "counted; counted in dlperf.zoo.rnn.spec")


def _conv_len(size: int, kernel: int, stride: int, pad: int) -> int:
    return (size + 2 * pad - kernel) // stride + 1


def deepspeech2_geometry(hyper: dict) -> dict:
    """Sizes after the convolutions: ``{"bins": [...], "frames": [...], "rnn_in": int}``.

    ``bins``/``frames`` list the frequency/time length at the input and after each conv;
    ``rnn_in`` (channels x remaining bins) is the input size of the first GRU layer.
    161 bins x 200 frames -> 81 x 100 -> 41 x 100, so ``rnn_in = 32 * 41 = 1312``.
    """
    bins, frames = [hyper["bins"]], [hyper["frames"]]
    for (kf, kt), (sf, st), (pf, pt) in DS2_CONVS:
        bins.append(_conv_len(bins[-1], kf, sf, pf))
        frames.append(_conv_len(frames[-1], kt, st, pt))
    return {"bins": bins, "frames": frames, "rnn_in": hyper["conv_channels"] * bins[-1]}


def _gru_inputs(hyper: dict) -> list[int]:
    """Input size of each GRU layer: the flattened conv output, then ``hidden`` (the two
    directions of a layer are summed, Amodei et al. 2016 sec. 3.1)."""
    return [deepspeech2_geometry(hyper)["rnn_in"]] + [hyper["hidden"]] * (hyper["layers"] - 1)


def deepspeech2_params(hyper: dict, num_classes: int) -> int:
    """Trainable parameters of DeepSpeech2 with ``hyper`` (see :func:`deepspeech2_spec`).

    Convs bias-free (``c_out * c_in * kf * kt``) + BN (2 per channel); per GRU layer and
    direction ``3*hidden*(in + hidden)`` weights and two bias vectors of ``3*hidden`` (b_ih and
    b_hh, the cuDNN / ``torch.nn.GRU`` convention); output ``Linear(hidden, classes)`` + bias.
    """
    c = hyper["conv_channels"]
    n, c_in = 0, 1
    for (kf, kt), _, _ in DS2_CONVS:
        n += c * c_in * kf * kt + 2 * c
        c_in = c
    h = hyper["hidden"]
    for n_in in _gru_inputs(hyper):
        n += 2 * (3 * h * (n_in + h) + 2 * 3 * h)  # two directions
    n += h * num_classes + num_classes
    return n


def deepspeech2_forward_flops(hyper: dict, num_classes: int) -> int:
    """Forward FLOPs of one utterance of ``hyper["frames"]`` frames (zoo/spec.py convention).

    Convs ``2 * c_in*kf*kt * c_out * bins_out * frames_out``; per output frame, GRU layer and
    direction ``2 * 3*hidden * (in + hidden)``; per output frame ``2 * hidden * classes``.
    """
    g = deepspeech2_geometry(hyper)
    c = hyper["conv_channels"]
    flops, c_in = 0, 1
    for i, ((kf, kt), _, _) in enumerate(DS2_CONVS):
        flops += 2 * c_in * kf * kt * c * g["bins"][i + 1] * g["frames"][i + 1]
        c_in = c
    t, h = g["frames"][-1], hyper["hidden"]
    flops += sum(t * 2 * 2 * 3 * h * (n_in + h) for n_in in _gru_inputs(hyper))
    flops += t * 2 * h * num_classes
    return flops


def deepspeech2_spec(frames: int = 200, name: str = "deepspeech2", *, bins: int = 161,
                     conv_channels: int = 32, hidden: int = 800, layers: int = 3,
                     num_classes: int = 29, target_len: int = 30,
                     tiny_of: str | None = None) -> ModelSpec:
    """Build the :class:`ModelSpec` of DeepSpeech2 (Amodei et al. 2016), small variant.

    Layout (docs/zoo.md; layer details from the paper and deepspeech.pytorch):

    * input: a ``bins x frames`` float spectrogram (``input_kind="spectrogram"``). 161 bins are
      those of a 20 ms window (320 samples at 16 kHz: 320 / 2 + 1); frames are 10 ms apart.
      docs/zoo.md allows 1 s to 10 s; the benchmark needs one fixed shape, so the default is
      **2 s = 200 frames** (``frames`` is configurable, like the LSTM's ``seq_len``);
    * two 2-D convs (``DS2_CONVS``) of ``conv_channels`` filters, each bias-free, then BN, then
      the clipped ReLU ``min(max(x, 0), 20)``; output ``[C, 41, 100]`` for 161 x 200;
    * channels and bins are flattened per frame to ``C * 41 = 1312`` features;
    * ``layers`` bidirectional GRU layers of ``hidden`` units, the two directions summed
      (Amodei et al. 2016 sec. 3.1: ``h = h_forward + h_backward``), so every layer after the
      first has ``hidden`` inputs. GRU equations are cuDNN's (and ``torch.nn.GRU``'s): the reset
      gate multiplies ``W_hn h + b_hn`` after the recurrent matmul ("linear before reset",
      Keras ``reset_after=True``), with two bias vectors per direction. The paper's sequence-
      wise batch norm inside the recurrent stack is not used;
    * ``Linear(hidden, num_classes)`` per frame: logits ``[T_out, 29]`` (blank, 26 letters,
      space, apostrophe; blank at index 0);
    * loss: CTC (``loss="ctc"``) against ``target_len`` characters (default 30: 15 characters
      per second of read speech); every utterance full length, every transcript of exactly
      ``target_len`` characters, drawn from 1..28.

    ``tokens_per_sample`` is the number of input frames (200 = 2 s of audio).
    Optimizer: SGD momentum 0.9, lr 3e-4 (deepspeech.pytorch; the paper used Nesterov momentum
    0.99, which :class:`OptimizerSpec` does not express).
    """
    hyper = {"arch": "deepspeech2", "bins": bins, "frames": frames,
             "conv_channels": conv_channels, "hidden": hidden, "layers": layers,
             "target_len": target_len}
    if min(frames, bins, conv_channels, hidden, layers, target_len) < 1 or num_classes < 2:
        raise ValueError("deepspeech2 sizes must be positive")
    t_out = deepspeech2_geometry(hyper)["frames"][-1]
    if 2 * target_len > t_out:  # CTC needs a frame per label and one between repeats
        raise ValueError(f"{name}: {target_len} characters need at least {2 * target_len} "
                         f"output frames, the convs leave {t_out}")
    return ModelSpec(
        name=name,
        family="rnn",
        input_kind="spectrogram",
        input_shape=(bins, frames),
        num_classes=num_classes,
        params=deepspeech2_params(hyper, num_classes),
        forward_flops_per_sample=deepspeech2_forward_flops(hyper, num_classes),
        source=("Amodei et al. 2016, DeepSpeech2 small variant (2 conv + 3 bidirectional GRU "
                "800); deepspeech.pytorch layer details"
                if tiny_of is None else "tiny variant of deepspeech2 (Amodei et al. 2016)"),
        flops_source=_DS2_FLOPS_SOURCE,
        optimizer=OptimizerSpec(name="sgd", lr=3e-4, momentum=0.9),
        tiny_of=tiny_of,
        hyper=hyper,
        loss="ctc",
        target_shape=(target_len,),
    )


SPECS: dict[str, ModelSpec] = {
    s.name: s
    for s in (
        lstm_spec(),
        # Keeps the 10,000-word vocabulary so it still trains on PTB.
        lstm_spec(16, "lstm_tiny", emb=32, hidden=32, tiny_of="lstm"),
        deepspeech2_spec(),
        # 41 bins x 40 frames -> 11 x 20 after the convs; 29 characters kept.
        deepspeech2_spec(40, "deepspeech2_tiny", bins=41, conv_channels=4, hidden=32, layers=2,
                         target_len=8, tiny_of="deepspeech2"),
    )
}
