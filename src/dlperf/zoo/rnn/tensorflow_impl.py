"""Keras 3 (TensorFlow backend) implementations of the recurrent networks: the LSTM word
language model (``lstm``, ``lstm_tiny``) and DeepSpeech2 (``deepspeech2``, ``deepspeech2_tiny``).
Layouts, counts and sources: :mod:`dlperf.zoo.rnn.spec`; the PyTorch reference is
``torch_impl``, matched operation for operation.

**LSTM LM.** ``Embedding`` -> ``Dropout`` -> LSTM layer 0 -> ``Dropout`` -> ... -> LSTM layer
L-1 -> ``Dropout`` -> ``Dense`` decoder on every step (``nn.LSTM`` applies its inter-layer
dropout to the output of every layer but the last).

*Two bias vectors.* The spec counts ``b_ih`` and ``b_hh`` per layer (the cuDNN and PyTorch
convention); ``keras.layers.LSTM`` has one. :class:`TorchLSTM` is a ``keras.layers.LSTM`` whose
cell (:class:`TwoBiasLSTMCell`) holds both vectors as trainable weights and exposes their sum
as the ``bias`` the layer uses. The sum is exact (the gates only ever see ``b_ih + b_hh``;
each vector gets the gradient of the sum, as in PyTorch) and costs one ``4*hidden`` add per
call, and the layer keeps ``keras.layers.LSTM``'s cuDNN path on a GPU (``CudnnRNNV3``, to
which Keras passes the bias as the recurrent bias and zeros as the input bias). An extra bias
added to the layer's input instead would be a different computation. The cuDNN kernel cannot
be compiled by XLA, so the TensorFlow adapter turns it off (``use_cudnn=False``, see
:func:`recurrent_layers`) in ``xla`` mode and records that.

*The loop without cuDNN* (no GPU visible, or ``use_cudnn=False``, as under XLA) is not
Keras's generic one: Keras's ``while_loop`` calls the cell per time step, which multiplies
each step's input by ``W_ih`` separately. :meth:`TorchLSTM.inner_loop` computes the input
projection of every step as one matmul (``[B*T, in] x [in, 4H]``, plus the summed bias) and
unrolls the recurrence over the static sequence length (at most :data:`FUSED_MAX_STEPS`
steps), so each step does only ``h @ W_hh`` and the gates. The same computation, as a
hand-written TensorFlow (or JAX, ``benchmarks/plain_jax_loop.py``) LSTM does it: on a 2-core
CPU the lstm step (b=16, fp32, graph mode, 2 threads) took 355 and 332 ms against 545 and
420 ms with Keras's generic loop (two runs of ``benchmarks/tf_model_ab.py``: one process,
alternating blocks; ``benchmarks/results/cpu-dev/COMMANDS.md``). The steps are taken with ``unstack``, not
``xproj[:, t]``: the gradient of T strided slices is T zero-filled ``[B, T, 4H]`` tensors
summed (that cost 25% of the step). Flag ``rnn_loop`` of the TensorFlow adapter says which
loop ran (:func:`rnn_loop`).

*Gate order.* PyTorch stacks the LSTM gates as ``(i, f, g, o)``, Keras as ``(i, f, c, o)``: the
same order (``g`` and ``c`` are both the cell candidate), so converting weights is a transpose.

**DeepSpeech2.** ``[B, bins, frames]`` -> ``[B, bins, frames, 1]`` (NHWC, no transpose) ->
(zero padding, bias-free ``Conv2D``, BN, clipped ReLU ``ReLU(max_value=20)``) x 2 -> ``Permute``
+ ``Reshape`` to ``[B, T_out, C * bins_out]`` with features ordered ``(c, bin)`` like
PyTorch's ``reshape(b, c * f, t)`` -> per layer ``Bidirectional(GRU, merge_mode="sum")`` ->
``Dense`` per frame -> logits ``[B, T_out, classes]``. ``keras.layers.GRU(reset_after=True)``
is cuDNN's and PyTorch's GRU ("linear before reset") with two bias vectors (its bias is
``[2, 3*hidden]``: input and recurrent), so its parameter count matches the spec natively. Gate
order differs: PyTorch ``(r, z, n)``, Keras ``(z, r, h)``; :mod:`dlperf.zoo.convert_keras`
reorders. The time-axis padding of the first conv (5 on both sides of a stride-2 kernel of 11)
is not TensorFlow's ``"same"``, so both convs pad explicitly and convolve ``"valid"``.

Initialisation as PyTorch's: embedding ``N(0, 1)``; every LSTM/GRU weight and bias
``U(+-1/sqrt(hidden))`` (no forget-gate bias of 1, no orthogonal recurrent kernel); convs and
``Linear`` layers PyTorch's default (``U(+-1/sqrt(fan_in))`` weights and biases); BN 1 and 0.

Layer names are PyTorch's module names: ``embedding``, ``lstm.l0``, ``lstm.l1`` (the layer
index of ``weight_ih_l<k>``), ``decoder``; ``conv.0``, ``conv.1`` (BN), ``conv.3``, ``conv.4``,
``rnns.0``, ``rnns.1``, ``fc``.

DeepSpeech2 is outside the default input/loss contract (spectrogram input, CTC loss), so this
module also exports the hooks :func:`synthetic_batch` and :func:`loss_fn` that the TensorFlow
adapter uses for it, as ``torch_impl`` does for PyTorch.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import keras
from keras import ops

from dlperf.zoo.rnn import spec as layout
from dlperf.zoo.spec import ModelSpec

#: Longest static sequence :meth:`TorchLSTM.inner_loop` unrolls; longer (or dynamic) sequences
#: run Keras's generic ``while_loop``.
FUSED_MAX_STEPS = 256


class TwoBiasLSTMCell(keras.layers.LSTMCell):
    """An ``LSTMCell`` with PyTorch's two bias vectors ``bias_ih`` and ``bias_hh`` (``[4*units]``
    each); ``bias`` (read by the cell and by the cuDNN path) is their sum.

    Weights: ``kernel`` ``[input_dim, 4*units]``, ``recurrent_kernel`` ``[units, 4*units]``,
    ``bias_ih``, ``bias_hh``; gate order ``(i, f, c, o)``.
    """

    def __init__(self, units: int, *, bias_init_config: dict, **kwargs) -> None:
        super().__init__(units, use_bias=True, unit_forget_bias=False, **kwargs)
        self._bias_init_config = bias_init_config

    def build(self, input_shape):  # noqa: D102
        keras.layers.Layer.build(self, input_shape)
        input_dim = input_shape[-1]
        self.kernel = self.add_weight(shape=(input_dim, self.units * 4), name="kernel",
                                      initializer=self.kernel_initializer)
        self.recurrent_kernel = self.add_weight(shape=(self.units, self.units * 4),
                                                name="recurrent_kernel",
                                                initializer=self.recurrent_initializer)
        # One initialiser instance per vector: an unseeded Keras initialiser called twice
        # returns the same values.
        self.bias_ih = self.add_weight(shape=(self.units * 4,), name="bias_ih",
                                       initializer=keras.initializers.get(
                                           self._bias_init_config))
        self.bias_hh = self.add_weight(shape=(self.units * 4,), name="bias_hh",
                                       initializer=keras.initializers.get(
                                           self._bias_init_config))

    @property
    def bias(self):
        """``bias_ih + bias_hh`` ``[4*units]``: what the gates add (PyTorch's two biases)."""
        return ops.add(self.bias_ih, self.bias_hh)


class TorchLSTM(keras.layers.LSTM):
    """One LSTM layer with PyTorch's parameters (two biases) and initialisation, returning the
    full sequence: ``[B, T, in]`` -> ``[B, T, units]``, zero initial state.

    It is a ``keras.layers.LSTM`` (so it keeps Keras's cuDNN path on GPUs, ``use_cudnn="auto"``)
    with its cell replaced by :class:`TwoBiasLSTMCell`. Every weight and bias is
    ``U(+-1/sqrt(units))`` like ``torch.nn.LSTM``.
    """

    def __init__(self, units: int, *, use_cudnn: str | bool = "auto", **kwargs) -> None:
        k = 1.0 / math.sqrt(units)
        uniform = {"class_name": "RandomUniform", "config": {"minval": -k, "maxval": k}}
        cell = TwoBiasLSTMCell(
            units, bias_init_config=uniform,
            kernel_initializer=keras.initializers.RandomUniform(-k, k),
            recurrent_initializer=keras.initializers.RandomUniform(-k, k),
            dtype=kwargs.get("dtype"), name="lstm_cell")
        # keras.layers.LSTM.__init__ would build its own LSTMCell; initialise the RNN base with
        # ours and set what LSTM.__init__ adds on top (the input spec and the cuDNN switch).
        keras.layers.RNN.__init__(self, cell, return_sequences=True, **kwargs)
        self.input_spec = keras.layers.InputSpec(ndim=3)
        self.use_cudnn = use_cudnn

    def uses_cudnn(self) -> bool:
        """True if this layer runs Keras's cuDNN path: ``use_cudnn`` is not False and
        TensorFlow sees a GPU (Keras's own test, ``tf.config.list_logical_devices``)."""
        import tensorflow as tf

        return self.use_cudnn in ("auto", True) and bool(tf.config.list_logical_devices("GPU"))

    def fused(self, steps: int | None, mask=None) -> bool:
        """True if :meth:`inner_loop` runs the fused, unrolled loop for ``steps`` time steps."""
        return (not self.uses_cudnn() and mask is None and not self.go_backwards
                and steps is not None and steps <= FUSED_MAX_STEPS
                and not self.cell.dropout and not self.cell.recurrent_dropout)

    def inner_loop(self, sequences, initial_state, mask, training=False):
        """``(last_output, outputs [B, T, H], [h, c])``: Keras's cuDNN path where it applies,
        else the fused loop (module docstring), else Keras's generic loop."""
        if not self.fused(sequences.shape[1], mask):
            return super().inner_loop(sequences, initial_state, mask, training=training)
        dt = sequences.dtype
        cell = self.cell
        h, c = (ops.cast(s, dt) for s in initial_state)
        # Every step's input projection at once: [B, T, in] x [in, 4H] + (b_ih + b_hh).
        xproj = ops.matmul(sequences, ops.cast(cell.kernel, dt)) + ops.cast(cell.bias, dt)
        w_hh = ops.cast(cell.recurrent_kernel, dt)
        outputs = []
        for xp in ops.unstack(xproj, axis=1):
            i, f, g, o = ops.split(xp + ops.matmul(h, w_hh), 4, axis=-1)  # Keras's (i, f, c, o)
            sigmoid, tanh = cell.recurrent_activation, cell.activation
            c = sigmoid(f) * c + sigmoid(i) * tanh(g)
            h = sigmoid(o) * tanh(c)
            outputs.append(h)
        return h, ops.stack(outputs, axis=1), [h, c]


def _torch_linear_init(n_in: int):
    """PyTorch's default ``Linear``/``Conv2d`` init for ``n_in`` inputs per output: (kernel,
    bias) initialisers, both ``U(+-1/sqrt(n_in))``."""
    b = 1.0 / math.sqrt(n_in)
    return (keras.initializers.VarianceScaling(1.0 / 3.0, "fan_in", "uniform"),
            keras.initializers.RandomUniform(-b, b))


def _lstm_lm(spec: ModelSpec) -> keras.Model:
    h = spec.hyper
    vocab, emb, hidden, n_layers, p = h["vocab"], h["emb"], h["hidden"], h["layers"], h["dropout"]
    tokens = keras.Input(shape=tuple(spec.input_shape), dtype="int64", name="tokens")
    x = keras.layers.Embedding(vocab, emb, name="embedding",
                               embeddings_initializer=keras.initializers.RandomNormal(0.0, 1.0)
                               )(tokens)
    x = keras.layers.Dropout(p)(x)
    for layer in range(n_layers):
        x = TorchLSTM(hidden, name=f"lstm.l{layer}")(x)
        if layer < n_layers - 1:
            x = keras.layers.Dropout(p)(x)  # nn.LSTM(dropout=p): between layers
    x = keras.layers.Dropout(p)(x)
    w_init, b_init = _torch_linear_init(hidden)
    logits = keras.layers.Dense(vocab, name="decoder", kernel_initializer=w_init,
                                bias_initializer=b_init)(x)
    return keras.Model(tokens, logits, name=spec.name)


def _deepspeech2(spec: ModelSpec) -> keras.Model:
    h = spec.hyper
    geo = layout.deepspeech2_geometry(h)
    c, hidden = h["conv_channels"], h["hidden"]
    bins, frames = spec.input_shape
    spec_in = keras.Input(shape=(bins, frames), dtype="float32", name="spectrogram")
    x = keras.layers.Reshape((bins, frames, 1))(spec_in)  # NHWC: H = bins, W = frames, C = 1
    c_in, idx = 1, 0
    for (kf, kt), stride, (pf, pt) in layout.DS2_CONVS:
        if pf or pt:
            x = keras.layers.ZeroPadding2D(((pf, pf), (pt, pt)))(x)
        w_init, _ = _torch_linear_init(c_in * kf * kt)
        x = keras.layers.Conv2D(c, (kf, kt), strides=stride, padding="valid", use_bias=False,
                                kernel_initializer=w_init, name=f"conv.{idx}")(x)
        x = keras.layers.BatchNormalization(axis=-1, momentum=0.9, epsilon=1e-5,
                                            name=f"conv.{idx + 1}")(x)
        x = keras.layers.ReLU(max_value=layout.DS2_CLIP)(x)  # Hardtanh(0, 20)
        c_in, idx = c, idx + 3
    f_out, t_out = geo["bins"][-1], geo["frames"][-1]
    x = keras.layers.Permute((2, 3, 1))(x)  # [B, T', C, F']
    x = keras.layers.Reshape((t_out, c * f_out))(x)  # features (c, bin), as PyTorch's reshape
    k = 1.0 / math.sqrt(hidden)
    for i in range(h["layers"]):
        gru = keras.layers.GRU(
            hidden, return_sequences=True, reset_after=True,
            kernel_initializer=keras.initializers.RandomUniform(-k, k),
            recurrent_initializer=keras.initializers.RandomUniform(-k, k),
            bias_initializer=keras.initializers.RandomUniform(-k, k))
        x = keras.layers.Bidirectional(gru, merge_mode="sum", name=f"rnns.{i}")(x)
    w_init, b_init = _torch_linear_init(hidden)
    logits = keras.layers.Dense(spec.num_classes, name="fc", kernel_initializer=w_init,
                                bias_initializer=b_init)(x)
    return keras.Model(spec_in, logits, name=spec.name)


#: ``hyper["arch"]`` (``lstm`` where absent) -> the Keras model of that layout.
LAYOUTS: dict[str, Callable[[ModelSpec], keras.Model]] = {"lstm": _lstm_lm, "deepspeech2": _deepspeech2}


def build(spec: ModelSpec) -> keras.Model:
    """Build the recurrent model of ``spec`` (family ``rnn``) in Keras.

    * LSTM LM (no ``hyper["arch"]`` or ``"lstm"``): token ids ``[B, T]`` int64 -> logits
      ``[B, T, vocab]``;
    * ``hyper["arch"] == "deepspeech2"``: spectrogram ``[B, bins, frames]`` float32 -> logits
      ``[B, T_out, classes]``.

    Logits are in the compute dtype of the global Keras policy; every call starts from zero
    recurrent state. Trainable parameters == ``spec.params`` (two bias vectors per recurrent
    layer and direction, see the module docstring).

    Raises:
        ValueError: not an ``rnn`` spec.
        NotImplementedError: a layout this module does not implement.
    """
    if spec.family != "rnn":
        raise ValueError(f"{spec.name} is a {spec.family} model, not an rnn")
    arch = spec.hyper.get("arch", "lstm")
    if arch not in LAYOUTS:
        raise NotImplementedError(f"{spec.name}: no Keras implementation of rnn layout {arch!r} "
                                  f"(implemented: {', '.join(LAYOUTS)})")
    return LAYOUTS[arch](spec)


def rnn_loop(layer: keras.layers.Layer, steps: int | None) -> str:
    """Which loop a recurrent ``layer`` of this module runs for ``steps`` time steps:
    ``"cudnn"``, ``"fused_unrolled"`` (:meth:`TorchLSTM.inner_loop`) or ``"keras_while_loop"``
    (GRUs without cuDNN, and LSTMs the fused loop does not cover)."""
    if isinstance(layer, TorchLSTM):
        if layer.uses_cudnn():
            return "cudnn"
        return "fused_unrolled" if layer.fused(steps) else "keras_while_loop"
    import tensorflow as tf

    gpu = bool(tf.config.list_logical_devices("GPU"))
    return "cudnn" if getattr(layer, "use_cudnn", False) in ("auto", True) and gpu \
        else "keras_while_loop"


def recurrent_layers(model: keras.Model) -> list[keras.layers.Layer]:
    """Every LSTM/GRU layer of ``model`` (also both directions of a ``Bidirectional``): the
    layers whose ``use_cudnn`` switch the TensorFlow adapter sets."""
    out: list[keras.layers.Layer] = []
    for layer in model.layers:
        if isinstance(layer, keras.layers.Bidirectional):
            out += [layer.forward_layer, layer.backward_layer]
        elif isinstance(layer, (keras.layers.LSTM, keras.layers.GRU)):
            out.append(layer)
    return out


# --- harness hooks (dlperf.zoo.spec contract; used for specs that are not ``default_io``) -----


def synthetic_batch(spec: ModelSpec, batch_size: int, seed: tuple[int, int]):
    """One synthetic ``(x, y)`` batch for a spectrogram/CTC spec, made where the current
    TensorFlow device scope puts it (stateless RNG: the same ``seed`` gives the same batch).

    ``x`` float32 ``[B, bins, frames]`` ~ N(0, 1); ``y`` int64 ``[B, S]`` uniform in
    ``[1, num_classes)`` (0 is the CTC blank). ``seed`` is a pair of ints.
    """
    import tensorflow as tf

    if spec.input_kind != "spectrogram" or spec.loss != "ctc":
        raise ValueError(f"{spec.name}: no synthetic_batch hook for {spec.input_kind}/"
                         f"{spec.loss} in the rnn family (the harness default covers tokens)")
    x = tf.random.stateless_normal((batch_size, *spec.input_shape), seed=seed,
                                   dtype=tf.float32)
    y = tf.random.stateless_uniform((batch_size, *spec.targets), seed=(seed[0], seed[1] + 1),
                                    minval=1, maxval=spec.num_classes, dtype=tf.int64)
    return x, y


def ctc_loss(out, y):
    """Mean CTC loss of logits ``[B, T, C]`` against full-length targets ``[B, S]`` (blank 0).

    The log-softmax is taken in float32 (also under the ``mixed_bfloat16`` policy); every input
    has ``T`` frames and every target ``S`` labels; as PyTorch's ``reduction="mean"``, each
    utterance's loss is divided by ``S`` and the batch averaged (``tf.nn.ctc_loss`` with dense
    labels; a scalar float32 tensor).
    """
    import tensorflow as tf

    logits = tf.cast(out, tf.float32)
    b, t, s = tf.shape(logits)[0], tf.shape(logits)[1], tf.shape(y)[1]
    per = tf.nn.ctc_loss(labels=tf.cast(y, tf.int32), logits=tf.nn.log_softmax(logits),
                         label_length=tf.fill([b], s), logit_length=tf.fill([b], t),
                         logits_time_major=False, blank_index=0)
    return tf.reduce_mean(per / tf.cast(s, tf.float32))


def loss_fn(spec: ModelSpec):
    """The loss ``(out, y) -> scalar float32`` of a non-default spec of this family (``ctc``)."""
    if spec.loss != "ctc":
        raise ValueError(f"{spec.name}: no loss hook for {spec.loss!r} in the rnn family")
    return ctc_loss
