"""Flax (linen) implementation of the FCNs (fcn5, fcn8, fcn_mnist and tiny variants).

Layout (zoo/fcn/spec.py), identical to ``torch_impl``: ``Dense(widths[i+1])`` with bias for each
consecutive pair of ``spec.hyper["widths"]``, a sigmoid between layers and none after the last
(logits). Submodules are named ``layers_<k>`` after the torch module's ``layers.<k>`` (the
indices count the sigmoids, as in the torch ``nn.Sequential``), so
:func:`dlperf.zoo.convert.torch_to_flax` maps torch weights one to one.

Parameters: a Dense kernel is ``[n_in, n_out]`` (the transpose of torch's ``[n_out, n_in]``
weight) plus an ``[n_out]`` bias: the same count as ``nn.Linear``.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from dlperf.zoo.spec import ModelSpec

#: Glorot/Xavier uniform (Glorot & Bengio 2010, eq. 16), as torch_impl: U(+-sqrt(6/(n_in+n_out))).
#: Symmetric in fan-in and fan-out, so the [in, out] kernel has the same law as torch's weight.
GLOROT_UNIFORM = nn.initializers.xavier_uniform()


class FCN(nn.Module):
    """Fully connected network: ``[B, widths[0]]`` float -> ``[B, widths[-1]]`` logits.

    Attributes:
        widths: ``(in, h1, ..., out)``.
        dtype: compute dtype (``jnp.bfloat16`` for mixed precision); parameters stay float32.
    """

    widths: tuple[int, ...]
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jnp.ndarray, train: bool = True) -> jnp.ndarray:
        """Map ``x`` ``[B, F]`` to logits ``[B, num_classes]`` (``train`` is unused: no dropout)."""
        for i, n_out in enumerate(self.widths[1:]):
            if i > 0:
                x = nn.sigmoid(x)
            # torch index of the i-th Linear in nn.Sequential(Linear, Sigmoid, Linear, ...).
            x = nn.Dense(n_out, dtype=self.dtype, param_dtype=jnp.float32,
                         kernel_init=GLOROT_UNIFORM, bias_init=nn.initializers.zeros,
                         name=f"layers_{2 * i}")(x)
        return x


def build(spec: ModelSpec, dtype: Any = jnp.float32) -> FCN:
    """Build the Flax FCN of ``spec`` (family ``fcn``), Glorot-uniform weights, zero biases.

    ``dtype`` is the compute dtype (float32, or bfloat16 for mixed precision); parameters are
    always float32. Input ``[B, widths[0]]`` float, output ``[B, widths[-1]]`` logits.
    """
    if spec.family != "fcn":
        raise ValueError(f"{spec.name} is a {spec.family} model, not an fcn")
    return FCN(tuple(spec.hyper["widths"]), dtype=dtype)
