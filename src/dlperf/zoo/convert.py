"""Weight conversion between the zoo's framework implementations (for parity tests).

:func:`torch_to_flax` turns the ``state_dict`` of a ``torch_impl`` model into the variables of
the matching ``jax_impl`` model, so both compute the same function and their outputs can be
compared. No framework is imported here except JAX/Flax (to check the result against the Flax
model's own variable shapes); torch tensors are read through ``.detach().cpu().numpy()``.

Rules (torch name ``a.3.b.weight`` -> Flax path ``a_3/b/<leaf>``: a numeric path component is
joined to the one before it with ``_``, the naming the Flax implementations use):

* ``Linear.weight [out, in]`` -> ``kernel [in, out]`` (transpose); ``bias`` unchanged. A Linear
  that reads a flattened ``C x H x W`` feature map (AlexNet ``classifier.1``, VGG
  ``classifier.0``, AlexNet-R ``fc``)
  also has its input rows permuted from torch's ``(c, h, w)`` order to NHWC's ``(h, w, c)``;
* ``Conv2d.weight [O, I, kh, kw]`` (OIHW) -> ``kernel [kh, kw, I, O]`` (HWIO);
* ``BatchNorm2d``: ``weight`` -> ``scale``, ``bias`` -> ``bias`` (params); ``running_mean`` ->
  ``mean``, ``running_var`` -> ``var`` (collection ``batch_stats``); ``num_batches_tracked``
  dropped (no Flax counterpart: flax uses a fixed momentum);
* ``Embedding.weight [V, E]`` -> ``embedding [V, E]``;
* ``LSTM.weight_ih_l<k> [4H, in]`` / ``weight_hh_l<k> [4H, H]`` -> ``lstm/l<k>/w_ih [in, 4H]`` /
  ``w_hh [H, 4H]`` (transposes; gate order i, f, g, o kept), ``bias_ih_l<k>`` / ``bias_hh_l<k>``
  -> ``b_ih`` / ``b_hh``; a bidirectional ``nn.GRU``'s ``*_l<k>_reverse`` tensors go to
  ``l<k>_reverse`` (DeepSpeech2: ``rnns_<i>/l0``, ``rnns_<i>/l0_reverse``);
* ``LayerNorm``: ``weight`` -> ``scale`` (a 1-D weight, as BatchNorm's), ``bias`` -> ``bias``;
* the Transformers' embeddings ``word``, ``position``, ``token_type`` (BERT), ``wte``,
  ``wpe`` (GPT-2) -> ``embedding``; a top-level parameter (BERT ``head_bias``) keeps its name.

The TensorFlow helpers live in ``convert_keras.py``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from dlperf.zoo.spec import ModelSpec


def _np(v: Any) -> np.ndarray:
    """A torch tensor (or anything array-like) as a float32/int numpy array on the host."""
    if hasattr(v, "detach"):
        v = v.detach().cpu().numpy()
    return np.asarray(v)


def _flax_path(torch_module: str) -> list[str]:
    """``"layer1.0.downsample.0"`` -> ``["layer1_0", "downsample_0"]``."""
    out: list[str] = []
    for part in torch_module.split("."):
        if part.isdigit() and out:
            out[-1] = f"{out[-1]}_{part}"
        else:
            out.append(part)
    return out


def flattened_linears(spec: ModelSpec) -> dict[str, tuple[int, int, int]]:
    """Linear layers of ``spec`` that read a flattened feature map: torch name -> ``(C, H, W)``.

    Their weight columns are in torch's ``(c, h, w)`` order; the NHWC Flax model flattens
    ``(h, w, c)``.
    """
    h = spec.hyper
    if spec.family != "cnn":
        return {}
    if h["arch"] == "alexnet":
        return {"classifier.1": (h["channels"][-1], h["avgpool"], h["avgpool"])}
    if h["arch"] == "vgg":
        return {"classifier.0": (h["blocks"][-1][-1], h["avgpool"], h["avgpool"])}
    if h["arch"] == "alexnet_cifar":
        from dlperf.zoo.cnn import spec as layout

        _, hh, ww = spec.input_shape
        k, s, p = layout.CIFAR_CONV
        for _c in h["channels"]:
            hh, ww = (layout.conv_out(layout.conv_out(d, k, s, p), *layout.CIFAR_POOL)
                      for d in (hh, ww))
        return {"fc": (h["channels"][-1], hh, ww)}
    return {}


_LSTM_RE = re.compile(r"^(weight|bias)_(ih|hh)_l(\d+)(_reverse)?$")

#: ``nn.Embedding`` modules of the Transformers whose names do not end in ``embedding``.
_EMBEDDINGS = ("word", "position", "token_type", "wte", "wpe")


def _set(tree: dict, path: list[str], value: np.ndarray) -> None:
    for p in path[:-1]:
        tree = tree.setdefault(p, {})
    if path[-1] in tree:
        raise ValueError(f"two torch tensors map to {'/'.join(path)}")
    tree[path[-1]] = value


def torch_to_flax(spec: ModelSpec, torch_state_dict: Mapping[str, Any]) -> dict[str, Any]:
    """Convert a ``torch_impl`` model's ``state_dict`` to the ``jax_impl`` model's variables.

    Args:
        spec: the model (families ``fcn``, ``cnn``, ``rnn``, ``transformer``).
        torch_state_dict: ``model.state_dict()`` of ``dlperf.zoo.build(spec, "torch")``
            (tensors or numpy arrays).

    Returns:
        ``{"params": ..., "batch_stats": ...}`` (``batch_stats`` only for models with BN) as
        nested dicts of numpy arrays, ready for ``flax_model.apply(variables, x, ...)`` with
        NHWC images. float32 throughout.

    Raises:
        ValueError: a tensor has no Flax counterpart, or the result's structure or shapes
            differ from the Flax model's own variables (checked with ``jax.eval_shape``).
    """
    flat_in = flattened_linears(spec)
    params: dict[str, Any] = {}
    stats: dict[str, Any] = {}
    for name, tensor in torch_state_dict.items():
        v = _np(tensor)
        module, _, leaf = name.rpartition(".")
        path = _flax_path(module)
        m = _LSTM_RE.match(leaf)
        if m:  # nn.LSTM: lstm.weight_ih_l0 -> lstm/l0/w_ih
            kind, which, layer, rev = m.groups()
            out = v.T if kind == "weight" else v
            _set(params, path + [f"l{layer}{rev or ''}",
                                 f"{'w' if kind == 'weight' else 'b'}_{which}"],
                 np.ascontiguousarray(out, np.float32))
            continue
        if leaf == "num_batches_tracked":
            continue
        if leaf in ("running_mean", "running_var"):
            _set(stats, path + ["mean" if leaf == "running_mean" else "var"],
                 v.astype(np.float32))
            continue
        if leaf == "weight" and v.ndim == 1:  # BatchNorm affine weight
            _set(params, path + ["scale"], v.astype(np.float32))
            continue
        if not module:  # a top-level nn.Parameter (BERT's head_bias): same name
            _set(params, [leaf], v.astype(np.float32))
            continue
        if leaf == "weight" and (module.endswith("embedding") or (
                spec.family == "transformer" and module in _EMBEDDINGS)):
            _set(params, path + ["embedding"], v.astype(np.float32))
            continue
        if leaf == "weight" and v.ndim == 4:  # Conv2d
            _set(params, path + ["kernel"], np.ascontiguousarray(v.transpose(2, 3, 1, 0),
                                                                  np.float32))
            continue
        if leaf == "weight" and v.ndim == 2:  # Linear
            if module in flat_in:
                c, hh, ww = flat_in[module]
                v = v.reshape(v.shape[0], c, hh, ww).transpose(0, 2, 3, 1).reshape(v.shape[0], -1)
            _set(params, path + ["kernel"], np.ascontiguousarray(v.T, np.float32))
            continue
        if leaf == "bias":
            _set(params, path + ["bias"], v.astype(np.float32))
            continue
        raise ValueError(f"{spec.name}: no Flax counterpart for torch tensor {name!r} "
                         f"{tuple(v.shape)}")
    variables: dict[str, Any] = {"params": params}
    if stats:
        variables["batch_stats"] = stats
    _check_against_flax(spec, variables)
    return variables


def flax_input_shape(spec: ModelSpec) -> tuple[int, ...]:
    """One sample's input shape as the Flax model takes it: ``(H, W, C)`` for images (NHWC),
    else ``spec.input_shape``."""
    if spec.input_kind == "image":
        c, h, w = spec.input_shape
        return (h, w, c)
    return tuple(spec.input_shape)


def _check_against_flax(spec: ModelSpec, variables: dict[str, Any]) -> None:
    """Raise ValueError unless ``variables`` has exactly the Flax model's paths and shapes."""
    import jax
    import jax.numpy as jnp

    from dlperf.zoo import build

    model = build(spec, "jax")
    dtype = jnp.int32 if spec.input_kind in ("tokens", "token_pairs") else jnp.float32
    x = jax.ShapeDtypeStruct((2, *flax_input_shape(spec)), dtype)
    want = jax.eval_shape(lambda x: model.init(jax.random.key(0), x, train=False), x)
    want_shapes = {jax.tree_util.keystr(k): tuple(v.shape)
                   for k, v in jax.tree_util.tree_flatten_with_path(dict(want))[0]}
    got_shapes = {jax.tree_util.keystr(k): tuple(v.shape)
                  for k, v in jax.tree_util.tree_flatten_with_path(variables)[0]}
    if want_shapes != got_shapes:
        missing = sorted(set(want_shapes) - set(got_shapes))
        extra = sorted(set(got_shapes) - set(want_shapes))
        wrong = sorted(k for k in set(want_shapes) & set(got_shapes)
                       if want_shapes[k] != got_shapes[k])
        raise ValueError(f"{spec.name}: converted torch weights do not fit the Flax model: "
                         f"missing {missing[:5]}, unexpected {extra[:5]}, wrong shape "
                         f"{[(k, got_shapes[k], want_shapes[k]) for k in wrong[:5]]}")
