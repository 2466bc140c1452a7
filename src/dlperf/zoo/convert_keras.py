"""Weight conversion from the PyTorch implementations to the Keras ones (for parity tests).

:func:`torch_to_keras` loads the ``state_dict`` of a ``torch_impl`` model into the matching
``tensorflow_impl`` model, so both compute the same function and their outputs can be compared.
The Keras layers carry the PyTorch module names (``features.0``, ``layer1.0.conv1``, ``lstm.l0``,
``rnns.0``, ...), so weights are matched by name; every PyTorch tensor must be used exactly once
and every Keras weight set, or :class:`ValueError` says which are left over.

Rules (PyTorch -> Keras):

* ``Linear.weight [out, in]`` -> ``Dense.kernel [in, out]`` (transpose); ``bias`` unchanged. A
  ``Dense`` listed in the model's ``torch_flatten_hwc`` (it reads a flattened NHWC feature map of
  size ``(H, W, C)``: AlexNet ``classifier.1``, AlexNet-R ``fc``, VGG ``classifier.0``) also has
  its input rows permuted from PyTorch's ``(c, h, w)`` order to NHWC's ``(h, w, c)``;
* ``Conv2d.weight [O, I, kh, kw]`` (OIHW) -> ``Conv2D.kernel [kh, kw, I, O]`` (HWIO);
* ``BatchNorm2d``: ``weight`` -> ``gamma``, ``bias`` -> ``beta``, ``running_mean`` ->
  ``moving_mean``, ``running_var`` -> ``moving_variance``; ``num_batches_tracked`` dropped;
* ``Embedding.weight [V, E]`` -> ``embeddings [V, E]``;
* ``LSTM.weight_ih_l<k> [4H, in]`` / ``weight_hh_l<k> [4H, H]`` -> layer ``lstm.l<k>``'s
  ``kernel [in, 4H]`` / ``recurrent_kernel [H, 4H]`` (transposes: PyTorch's gate order
  ``(i, f, g, o)`` is Keras's ``(i, f, c, o)``), ``bias_ih_l<k>`` / ``bias_hh_l<k>`` ->
  ``bias_ih`` / ``bias_hh`` (:class:`dlperf.zoo.rnn.tensorflow_impl.TwoBiasLSTMCell`);
* bidirectional ``GRU`` ``rnns.<i>.{weight,bias}_{ih,hh}_l0[_reverse]`` -> the forward
  (backward) layer of ``Bidirectional`` ``rnns.<i>``: gates reordered from PyTorch's
  ``(r, z, n)`` to Keras's ``(z, r, h)``, weights transposed, ``bias [2, 3H]`` = ``(b_ih,
  b_hh)`` (Keras ``reset_after=True`` is PyTorch's GRU);
* ``LayerNorm``: ``weight`` -> ``gamma``, ``bias`` -> ``beta``;
* a layer with a ``torch_params()`` method (the Transformers' learned position / token-type
  tables and BERT's tied-output bias, :mod:`dlperf.zoo.transformer.tensorflow_impl`) names its own
  ``(variable, PyTorch key)`` pairs; the tied output projections have no weights of their own
  (the embedding is converted once, under its ``Embedding`` layer).

No framework is imported at module level; torch tensors are read through
``.detach().cpu().numpy()``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from dlperf.zoo.spec import ModelSpec


def _np(v: Any) -> np.ndarray:
    """A torch tensor (or anything array-like) as a numpy array on the host."""
    if hasattr(v, "detach"):
        v = v.detach().cpu().numpy()
    return np.asarray(v)


def nchw_to_nhwc(x: np.ndarray) -> np.ndarray:
    """Move the channel axis of image batches ``[..., C, H, W]`` to the end: ``[..., H, W, C]``
    (contiguous copy). Used for parity inputs and, once on the host, for real image data."""
    return np.ascontiguousarray(np.moveaxis(x, -3, -1))


def keras_input(spec: ModelSpec, x: Any) -> np.ndarray:
    """A PyTorch-layout input batch of ``spec`` as the Keras model takes it: images NCHW ->
    NHWC, everything else unchanged (numpy)."""
    x = _np(x)
    return nchw_to_nhwc(x) if spec.input_kind == "image" else x


def _gru_gates(w: np.ndarray) -> np.ndarray:
    """Reorder the ``3H`` gate blocks of axis 0: PyTorch ``(r, z, n)`` -> Keras ``(z, r, h)``."""
    r, z, n = np.split(w, 3, axis=0)
    return np.concatenate([z, r, n], axis=0)


class _Loader:
    """Assigns PyTorch tensors to Keras variables, tracking which tensors were used."""

    def __init__(self, state_dict: Mapping[str, Any]) -> None:
        self.sd = {k: _np(v) for k, v in state_dict.items()
                   if not k.endswith("num_batches_tracked")}
        self.used: set[str] = set()

    def get(self, key: str) -> np.ndarray:
        """The PyTorch tensor ``key`` (marked used); ValueError if absent."""
        if key not in self.sd:
            raise ValueError(f"PyTorch state_dict has no {key!r} (needed by the Keras model)")
        self.used.add(key)
        return self.sd[key]

    def has(self, key: str) -> bool:
        """True if the state dict has ``key``."""
        return key in self.sd

    @staticmethod
    def assign(var: Any, value: np.ndarray, what: str) -> None:
        """``var.assign(value)`` after checking the shapes agree."""
        if tuple(var.shape) != tuple(value.shape):
            raise ValueError(f"{what}: Keras shape {tuple(var.shape)} != converted PyTorch "
                             f"shape {tuple(value.shape)}")
        var.assign(value.astype(np.float32) if value.dtype.kind == "f" else value)


def torch_to_keras(spec: ModelSpec, torch_state_dict: Mapping[str, Any], keras_model: Any) -> Any:
    """Load the PyTorch ``state_dict`` of ``spec``'s ``torch_impl`` model into ``keras_model``
    (built by ``tensorflow_impl.build(spec)``), in place; returns ``keras_model``.

    Args:
        spec: the model spec (for error messages and sanity checks).
        torch_state_dict: ``module.state_dict()`` of the PyTorch model (torch tensors or numpy
            arrays, parameters and BN buffers).
        keras_model: the Keras model of the same spec.

    Raises:
        ValueError: a tensor is missing, has the wrong shape, or is not used; or the Keras model
            has a layer with weights that this converter does not know.
    """
    import keras

    ld = _Loader(torch_state_dict)
    flat = dict(getattr(keras_model, "torch_flatten_hwc", None) or {})
    for layer in keras_model.layers:
        n = layer.name
        if not layer.weights:
            continue
        if hasattr(layer, "torch_params"):
            for var, key in layer.torch_params():
                ld.assign(var, ld.get(key), f"{spec.name}:{n}:{key}")
        elif isinstance(layer, keras.layers.LayerNormalization):
            ld.assign(layer.gamma, ld.get(f"{n}.weight"), f"{spec.name}:{n}.gamma")
            ld.assign(layer.beta, ld.get(f"{n}.bias"), f"{spec.name}:{n}.beta")
        elif isinstance(layer, keras.layers.Dense):
            w = ld.get(f"{n}.weight")  # [out, in]
            if n in flat:
                h, wd, c = flat[n]
                w = w.reshape(w.shape[0], c, h, wd).transpose(0, 2, 3, 1).reshape(w.shape[0], -1)
            ld.assign(layer.kernel, w.T, f"{spec.name}:{n}.kernel")
            if layer.bias is not None:
                ld.assign(layer.bias, ld.get(f"{n}.bias"), f"{spec.name}:{n}.bias")
        elif isinstance(layer, keras.layers.Conv2D):
            ld.assign(layer.kernel, ld.get(f"{n}.weight").transpose(2, 3, 1, 0),
                      f"{spec.name}:{n}.kernel")
            if layer.use_bias:
                ld.assign(layer.bias, ld.get(f"{n}.bias"), f"{spec.name}:{n}.bias")
        elif isinstance(layer, keras.layers.BatchNormalization):
            for k_attr, t_name in (("gamma", "weight"), ("beta", "bias"),
                                   ("moving_mean", "running_mean"),
                                   ("moving_variance", "running_var")):
                ld.assign(getattr(layer, k_attr), ld.get(f"{n}.{t_name}"),
                          f"{spec.name}:{n}.{k_attr}")
        elif isinstance(layer, keras.layers.Embedding):
            ld.assign(layer.embeddings, ld.get(f"{n}.weight"), f"{spec.name}:{n}.embeddings")
        elif isinstance(layer, keras.layers.Bidirectional):
            for sub, suffix in ((layer.forward_layer, ""), (layer.backward_layer, "_reverse")):
                if not isinstance(sub, keras.layers.GRU):
                    raise ValueError(f"{spec.name}:{n}: only bidirectional GRUs are converted")
                cell, p = sub.cell, f"{n}.{{}}_l0{suffix}"
                ld.assign(cell.kernel, _gru_gates(ld.get(p.format("weight_ih"))).T,
                          f"{spec.name}:{n}{suffix}.kernel")
                ld.assign(cell.recurrent_kernel, _gru_gates(ld.get(p.format("weight_hh"))).T,
                          f"{spec.name}:{n}{suffix}.recurrent_kernel")
                bias = np.stack([_gru_gates(ld.get(p.format("bias_ih"))),
                                 _gru_gates(ld.get(p.format("bias_hh")))])
                ld.assign(cell.bias, bias, f"{spec.name}:{n}{suffix}.bias")
        elif isinstance(layer, keras.layers.LSTM) and hasattr(layer.cell, "bias_ih"):
            prefix, _, idx = n.rpartition(".l")  # "lstm.l1" -> torch "lstm.*_l1"
            cell, p = layer.cell, f"{prefix}.{{}}_l{idx}"
            ld.assign(cell.kernel, ld.get(p.format("weight_ih")).T, f"{spec.name}:{n}.kernel")
            ld.assign(cell.recurrent_kernel, ld.get(p.format("weight_hh")).T,
                      f"{spec.name}:{n}.recurrent_kernel")
            ld.assign(cell.bias_ih, ld.get(p.format("bias_ih")), f"{spec.name}:{n}.bias_ih")
            ld.assign(cell.bias_hh, ld.get(p.format("bias_hh")), f"{spec.name}:{n}.bias_hh")
        else:
            raise ValueError(f"{spec.name}: no conversion rule for Keras layer {n!r} "
                             f"({type(layer).__name__})")
    left = sorted(set(ld.sd) - ld.used)
    if left:
        raise ValueError(f"{spec.name}: PyTorch tensors not used by the Keras model: "
                         f"{', '.join(left[:10])}{' ...' if len(left) > 10 else ''}")
    return keras_model
