"""Keras 3 (TensorFlow backend) implementation of the FCNs (fcn5, fcn8, fcn_mnist and tiny).

Layout (zoo/fcn/spec.py): ``Dense(widths[i+1])`` with bias for each consecutive pair of
``spec.hyper["widths"]``, a sigmoid between layers and none after the last (logits). The
sigmoid is the ``activation`` of the hidden ``Dense`` layers (the same ops as a separate
``Activation`` layer, one layer fewer to dispatch in eager mode).

Layer names are the PyTorch module names (``layers.0``, ``layers.2``, ...; the sigmoids take
the odd indices there), so :func:`dlperf.zoo.convert_keras.torch_to_keras` can map weights by
name. Initialisation: Glorot/Xavier uniform weights and zero biases, as in ``torch_impl`` (and
Keras's own ``Dense`` default).

``KERAS_BACKEND`` must be ``tensorflow`` before keras is first imported; the TensorFlow adapter
(:mod:`dlperf.frameworks.tensorflow.adapter`) sees to that.
"""

from __future__ import annotations

import keras

from dlperf.zoo.spec import ModelSpec


def build(spec: ModelSpec) -> keras.Model:
    """Build the FCN of ``spec`` (family ``fcn``): ``[B, widths[0]]`` float32 -> ``[B,
    widths[-1]]`` logits (float32, or the compute dtype of the global Keras policy).

    Trainable parameters: ``sum(n_in * n_out + n_out)`` = ``spec.params`` (kernel ``[n_in,
    n_out]``, the transpose of PyTorch's ``[n_out, n_in]``).
    """
    if spec.family != "fcn":
        raise ValueError(f"{spec.name} is a {spec.family} model, not an fcn")
    widths = tuple(spec.hyper["widths"])
    x = inputs = keras.Input(shape=(widths[0],), dtype="float32", name="x")
    n_layers = len(widths) - 1
    for i, n_out in enumerate(widths[1:]):
        last = i == n_layers - 1
        # PyTorch Sequential index of this Linear: a Sigmoid sits between consecutive Linears.
        x = keras.layers.Dense(
            n_out, activation=None if last else "sigmoid", name=f"layers.{2 * i}",
            kernel_initializer=keras.initializers.GlorotUniform(),
            bias_initializer="zeros")(x)
    return keras.Model(inputs, x, name=spec.name)
