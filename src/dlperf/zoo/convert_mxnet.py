"""Weight conversion from the PyTorch implementations to the MXNet Gluon ones (parity tests).

:func:`torch_to_mxnet` turns the ``state_dict`` of a ``torch_impl`` model into the arrays of the
matching ``mxnet_impl`` model, keyed by Gluon parameter name. The Gluon models carry the PyTorch
module paths as their parameter prefixes (``features.0.weight``, ``layer1.0.bn1.gamma``,
``lstm.l0_i2h_weight``, ...), and MXNet's layouts are PyTorch's (``Dense`` ``[out, in]``,
``Conv2D`` OIHW, NCHW activations, LSTM gates ``(i, f, g, o)`` with two biases), so the rules
are renames only:

* ``BatchNorm2d``: ``weight`` -> ``gamma``, ``bias`` -> ``beta``; ``running_mean`` and
  ``running_var`` keep their names; ``num_batches_tracked`` is dropped;
* ``LSTM``: ``<m>.weight_ih_l<k>`` -> ``<m>.l<k>_i2h_weight``, ``weight_hh`` -> ``h2h_weight``,
  ``bias_ih`` -> ``i2h_bias``, ``bias_hh`` -> ``h2h_bias``;
* everything else (``Linear``, ``Conv2d``, ``Embedding``) unchanged.

Every PyTorch tensor must be used exactly once and every Gluon parameter set, with equal shapes,
or :class:`ValueError` names what is left over. No framework is imported here (numpy only): the
MXNet side loads the arrays with ``Parameter.set_data``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

_LSTM = re.compile(r"^(?P<m>.*)\.(?P<kind>weight|bias)_(?P<io>ih|hh)_l(?P<k>\d+)$")


def _np(v: Any) -> np.ndarray:
    if hasattr(v, "detach"):
        v = v.detach().cpu().numpy()
    return np.asarray(v)


def mxnet_name(torch_key: str, bn_prefixes: set[str]) -> str:
    """The Gluon parameter name of PyTorch ``state_dict`` key ``torch_key``.

    ``bn_prefixes``: the module paths (``"layer1.0.bn1"``) of BatchNorm layers, whose
    ``weight``/``bias`` become ``gamma``/``beta``.
    """
    m = _LSTM.match(torch_key)
    if m:
        io = "i2h" if m["io"] == "ih" else "h2h"
        return f"{m['m']}.l{m['k']}_{io}_{m['kind']}"
    mod, _, leaf = torch_key.rpartition(".")
    if mod in bn_prefixes and leaf in ("weight", "bias"):
        return f"{mod}.{'gamma' if leaf == 'weight' else 'beta'}"
    return torch_key


def torch_to_mxnet(state_dict: Mapping[str, Any],
                   mx_shapes: Mapping[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """Arrays for the Gluon parameters ``mx_shapes`` (name -> shape) from a PyTorch
    ``state_dict`` (torch tensors or numpy arrays), float32.

    BatchNorm layers are recognised by their ``running_mean`` entries.

    Raises:
        ValueError: a PyTorch tensor with no Gluon parameter, a Gluon parameter with no tensor,
            or a shape mismatch (each named).
    """
    sd = {k: _np(v) for k, v in state_dict.items() if not k.endswith("num_batches_tracked")}
    bn = {k.rpartition(".")[0] for k in sd if k.endswith(".running_mean")}
    out: dict[str, np.ndarray] = {}
    unused = []
    for k, v in sd.items():
        name = mxnet_name(k, bn)
        if name not in mx_shapes:
            unused.append(f"{k} (as {name})")
            continue
        if tuple(v.shape) != tuple(mx_shapes[name]):
            raise ValueError(f"{k} has shape {tuple(v.shape)} but Gluon parameter {name} has "
                             f"{tuple(mx_shapes[name])}")
        out[name] = np.ascontiguousarray(v, dtype=np.float32)
    missing = sorted(set(mx_shapes) - set(out))
    if unused or missing:
        raise ValueError(f"state_dict and Gluon model do not match: unused PyTorch tensors "
                         f"{unused or 'none'}; Gluon parameters without a tensor "
                         f"{missing or 'none'}")
    return out
