"""Specs of the recurrent networks: the LSTM word language model ``lstm`` (+ ``lstm_tiny``).

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


SPECS: dict[str, ModelSpec] = {
    s.name: s
    for s in (
        lstm_spec(),
        # Keeps the 10,000-word vocabulary so it still trains on PTB.
        lstm_spec(16, "lstm_tiny", emb=32, hidden=32, tiny_of="lstm"),
    )
}
