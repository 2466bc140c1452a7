"""MXNet Gluon implementation of the FCNs (fcn5, fcn8, fcn_mnist and tiny variants).

Layout (zoo/fcn/spec.py): ``Dense(widths[i+1])`` with bias for each consecutive pair of
``spec.hyper["widths"]``, a sigmoid between layers and none after the last (logits). Each
``Dense`` is a separate block followed by a separate ``Activation("sigmoid")``, in the order of
the PyTorch ``Sequential`` (Linear, Sigmoid, Linear, ...).

Parameter names are the PyTorch ``state_dict`` keys (``layers.0.weight``, ``layers.0.bias``,
``layers.2.weight``, ...): the model's own prefix is empty and each child's prefix is its
PyTorch module path, so :func:`dlperf.zoo.convert_mxnet.torch_to_mxnet` maps weights by name.
A Gluon ``Dense`` weight is ``[n_out, n_in]``, as PyTorch's. Initialisation: Glorot/Xavier
uniform weights (``mx.init.Xavier(rnd_type="uniform", factor_type="avg", magnitude=3)``, i.e.
``U(-a, a)`` with ``a = sqrt(6 / (n_in + n_out))``, Glorot & Bengio 2010 eq. 16) and zero
biases, as in ``torch_impl``.

Imported only in the MXNet interpreter (``DLPERF_MXNET_PYTHON``), never by dlperf's core.
"""

from __future__ import annotations

import mxnet as mx
from mxnet.gluon import nn

from dlperf.zoo.spec import ModelSpec

#: Glorot/Xavier uniform (Glorot & Bengio 2010, eq. 16): U(-a, a), a = sqrt(6 / (fan_in + fan_out)).
GLOROT_UNIFORM = dict(rnd_type="uniform", factor_type="avg", magnitude=3)


class FCN(nn.HybridBlock):
    """Fully connected network: ``[B, widths[0]]`` float32 -> ``[B, widths[-1]]`` logits."""

    def __init__(self, widths: tuple[int, ...]) -> None:
        super().__init__(prefix="")
        self.layers = []
        with self.name_scope():
            for i, (n_in, n_out) in enumerate(zip(widths[:-1], widths[1:])):
                if i > 0:
                    self._add(nn.Activation("sigmoid", prefix=f"layers.{2 * i - 1}."))
                self._add(nn.Dense(n_out, in_units=n_in, prefix=f"layers.{2 * i}.",
                                   weight_initializer=mx.init.Xavier(**GLOROT_UNIFORM),
                                   bias_initializer="zeros"))

    def _add(self, block: nn.HybridBlock) -> None:
        self.register_child(block)
        self.layers.append(block)

    def hybrid_forward(self, F, x):  # noqa: N803 - Gluon's signature
        """``x`` ``[B, F]`` -> logits ``[B, num_classes]``."""
        for layer in self.layers:
            x = layer(x)
        return x


def build(spec: ModelSpec) -> FCN:
    """Build the FCN of ``spec`` (family ``fcn``); parameters are not initialised yet (the
    adapter calls ``initialize`` on its context)."""
    if spec.family != "fcn":
        raise ValueError(f"{spec.name} is a {spec.family} model, not an fcn")
    return FCN(tuple(spec.hyper["widths"]))
