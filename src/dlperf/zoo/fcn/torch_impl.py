"""PyTorch implementation of the FCNs (fcn5, fcn8, fcn_mnist and tiny variants).

Layout (zoo/fcn/spec.py): ``Linear(widths[i], widths[i+1])`` with bias for each consecutive pair
of ``spec.hyper["widths"]``, a sigmoid between layers and none after the last (logits).
"""

from __future__ import annotations

import torch
from torch import nn

from dlperf.zoo.spec import ModelSpec


class FCN(nn.Module):
    """Fully connected network: ``[B, widths[0]]`` float -> ``[B, widths[-1]]`` logits."""

    def __init__(self, widths: tuple[int, ...]) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for i, (n_in, n_out) in enumerate(zip(widths[:-1], widths[1:])):
            if i > 0:
                layers.append(nn.Sigmoid())
            layers.append(nn.Linear(n_in, n_out))
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map ``x`` of shape ``[B, F]`` to logits of shape ``[B, num_classes]``."""
        return self.layers(x)


def build(spec: ModelSpec) -> nn.Module:
    """Build the FCN of ``spec`` (family ``fcn``) with PyTorch's default initialisation."""
    if spec.family != "fcn":
        raise ValueError(f"{spec.name} is a {spec.family} model, not an fcn")
    return FCN(tuple(spec.hyper["widths"]))
