"""PyTorch implementations of the CNNs (alexnet, alexnet_cifar, resnet50, resnet56, + tiny).

Layouts and sources are described in :mod:`dlperf.zoo.cnn.spec`; this module reads the layout
constants from there and the sizes from ``spec.hyper``. Every model maps a float image batch
``[B, C, H, W]`` to logits ``[B, num_classes]``; all ops work with channels_last inputs and
under ``torch.autocast`` (bf16), and none synchronises with the host.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dlperf.zoo.cnn import spec as layout
from dlperf.zoo.spec import ModelSpec

# --- AlexNet (torchvision layout) --------------------------------------------------------------


class AlexNet(nn.Module):
    """torchvision's AlexNet: ``[B, 3, H, W]`` -> ``[B, num_classes]`` logits.

    ``features`` (conv+ReLU, max-pools after convs 1, 2, 5), AdaptiveAvgPool to
    ``avgpool x avgpool``, ``classifier`` Dropout-Linear-ReLU-Dropout-Linear-ReLU-Linear.
    Module names and order match ``torchvision.models.alexnet`` so its weights would load.
    """

    def __init__(self, in_channels: int, channels: tuple[int, ...], fc: int, avgpool: int,
                 dropout: float, num_classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c_in = in_channels
        for c_out, (k, s, p, pool) in zip(channels, layout.ALEXNET_CONVS, strict=True):
            layers += [nn.Conv2d(c_in, c_out, k, stride=s, padding=p), nn.ReLU(inplace=True)]
            if pool:
                pk, ps, pp = layout.ALEXNET_POOL
                layers.append(nn.MaxPool2d(pk, stride=ps, padding=pp))
            c_in = c_out
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((avgpool, avgpool))
        self.classifier = nn.Sequential(
            nn.Dropout(p=dropout),
            nn.Linear(c_in * avgpool * avgpool, fc),
            nn.ReLU(inplace=True),
            nn.Dropout(p=dropout),
            nn.Linear(fc, fc),
            nn.ReLU(inplace=True),
            nn.Linear(fc, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``[B, C, H, W]`` float -> logits ``[B, num_classes]``."""
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


# --- AlexNet-R: cuda-convnet layers-18pct -------------------------------------------------------


def _pool(kind: str) -> nn.Module:
    k, s, p = layout.CIFAR_POOL
    if kind == "max":
        return nn.MaxPool2d(k, stride=s, padding=p)
    if kind == "avg":
        # Padding is excluded from the average, as in cuda-convnet (it averages over the
        # pixels inside the image).
        return nn.AvgPool2d(k, stride=s, padding=p, count_include_pad=False)
    raise ValueError(f"unknown pool type {kind!r} (valid: max, avg)")


class AlexNetCifar(nn.Module):
    """cuda-convnet layers-18pct: ``[B, 3, 32, 32]`` -> ``[B, num_classes]`` logits.

    conv5x5 -> pool -> ReLU, conv5x5 -> ReLU -> pool, conv5x5 -> ReLU -> pool, FC (the ReLU of
    the first block comes after its max-pool, as in the original and Caffe's cifar10_full;
    max and ReLU commute, so only the cost differs).
    """

    def __init__(self, in_channels: int, channels: tuple[int, ...], pools: tuple[str, ...],
                 spatial: tuple[int, int], num_classes: int) -> None:
        super().__init__()
        k, s, p = layout.CIFAR_CONV
        layers: list[nn.Module] = []
        c_in, hw = in_channels, spatial
        for i, (c_out, kind) in enumerate(zip(channels, pools, strict=True)):
            layers.append(nn.Conv2d(c_in, c_out, k, stride=s, padding=p))
            if i == 0:
                layers += [_pool(kind), nn.ReLU(inplace=True)]
            else:
                layers += [nn.ReLU(inplace=True), _pool(kind)]
            hw = tuple(layout.conv_out(layout.conv_out(d, k, s, p), *layout.CIFAR_POOL)
                       for d in hw)
            c_in = c_out
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(c_in * hw[0] * hw[1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``[B, C, H, W]`` float -> logits ``[B, num_classes]``."""
        return self.fc(torch.flatten(self.features(x), 1))


# --- ResNet-50 v1.5 (torchvision layout) -------------------------------------------------------


class Bottleneck(nn.Module):
    """torchvision ``Bottleneck`` (v1.5: the stride is in ``conv2``, the 3x3 conv)."""

    def __init__(self, c_in: int, width: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, c_out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(c_out)
        self.relu = nn.ReLU(inplace=True)
        self.downsample: nn.Module | None = None
        if stride != 1 or c_in != c_out:
            self.downsample = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, c_in, H, W]`` -> ``[B, c_out, H/stride, W/stride]``."""
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out += identity
        return self.relu(out)


class ResNetBottleneck(nn.Module):
    """ImageNet ResNet with bottleneck blocks (ResNet-50 v1.5 at the full sizes).

    ``[B, 3, H, W]`` -> stem (conv7x7/2, BN, ReLU, max-pool 3x3/2) -> stages -> global average
    pool -> FC -> ``[B, num_classes]``. Module names match ``torchvision.models.resnet50``.
    """

    def __init__(self, in_channels: int, stem: int, widths: tuple[int, ...],
                 blocks: tuple[int, ...], expansion: int, num_classes: int) -> None:
        super().__init__()
        k, s, p = layout.RESNET_STEM_CONV
        self.conv1 = nn.Conv2d(in_channels, stem, k, stride=s, padding=p, bias=False)
        self.bn1 = nn.BatchNorm2d(stem)
        self.relu = nn.ReLU(inplace=True)
        pk, ps, pp = layout.RESNET_STEM_POOL
        self.maxpool = nn.MaxPool2d(pk, stride=ps, padding=pp)
        c_in = stem
        stages = []
        for i, (width, n) in enumerate(zip(widths, blocks, strict=True)):
            c_out = width * expansion
            stage = []
            for b in range(n):
                stage.append(Bottleneck(c_in, width, c_out, 2 if i > 0 and b == 0 else 1))
                c_in = c_out
            stages.append(nn.Sequential(*stage))
        # torchvision names the stages layer1..layer4.
        for i, stage in enumerate(stages, start=1):
            self.add_module(f"layer{i}", stage)
        self.stages = len(stages)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(c_in, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``[B, C, H, W]`` float -> logits ``[B, num_classes]``."""
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        for i in range(1, self.stages + 1):
            x = getattr(self, f"layer{i}")(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


# --- CIFAR ResNet (He et al. 2016 sec. 4.2), option-A shortcuts ----------------------------------


class BasicBlockA(nn.Module):
    """Basic block with an option-A shortcut (identity; on a change: subsample + zero-pad).

    conv3x3(stride)-BN-ReLU-conv3x3-BN, plus the shortcut, then ReLU. The shortcut of a block
    that changes the shape takes every ``stride``-th pixel and pads the extra channels with
    zeros (He et al. 2016 sec. 4.2, option A): no parameters.
    """

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.relu = nn.ReLU(inplace=True)
        self.stride = stride
        extra = c_out - c_in
        self.pad = (extra // 2, extra - extra // 2)  # zero channels before / after

    def shortcut(self, x: torch.Tensor) -> torch.Tensor:
        """Option-A shortcut: ``[B, c_in, H, W]`` -> ``[B, c_out, H/stride, W/stride]``."""
        if self.stride != 1:
            x = x[:, :, ::self.stride, ::self.stride]
        if self.pad != (0, 0):
            x = F.pad(x, (0, 0, 0, 0, *self.pad))
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, c_in, H, W]`` -> ``[B, c_out, H/stride, W/stride]``."""
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out = out + self.shortcut(x)
        return self.relu(out)


class ResNetCifar(nn.Module):
    """CIFAR ResNet (6n+2 layers): ``[B, 3, 32, 32]`` -> ``[B, num_classes]`` logits.

    conv3x3 to ``channels[0]``, BN, ReLU; one stage of ``blocks[i]`` basic blocks per entry of
    ``channels`` (stride 2 at the start of every stage but the first); global average pool;
    FC.
    """

    def __init__(self, in_channels: int, channels: tuple[int, ...], blocks: tuple[int, ...],
                 num_classes: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, channels[0], 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels[0])
        self.relu = nn.ReLU(inplace=True)
        c_in = channels[0]
        layers = []
        for i, (c_out, n) in enumerate(zip(channels, blocks, strict=True)):
            for b in range(n):
                layers.append(BasicBlockA(c_in, c_out, 2 if i > 0 and b == 0 else 1))
                c_in = c_out
        self.layers = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(c_in, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``[B, C, H, W]`` float -> logits ``[B, num_classes]``."""
        x = self.layers(self.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def build(spec: ModelSpec) -> nn.Module:
    """Build the CNN of ``spec`` (family ``cnn``; layout ``spec.hyper["arch"]``).

    Weights use PyTorch's default initialisation.
    """
    if spec.family != "cnn":
        raise ValueError(f"{spec.name} is a {spec.family} model, not a cnn")
    h = spec.hyper
    c, height, width = spec.input_shape
    arch = h["arch"]
    if arch == "alexnet":
        return AlexNet(c, tuple(h["channels"]), h["fc"], h["avgpool"], h["dropout"],
                       spec.num_classes)
    if arch == "alexnet_cifar":
        return AlexNetCifar(c, tuple(h["channels"]), tuple(h["pools"]), (height, width),
                            spec.num_classes)
    if arch == "resnet_bottleneck":
        return ResNetBottleneck(c, h["stem"], tuple(h["widths"]), tuple(h["blocks"]),
                                h["expansion"], spec.num_classes)
    if arch == "resnet_cifar":
        return ResNetCifar(c, tuple(h["channels"]), tuple(h["blocks"]), spec.num_classes)
    raise ValueError(f"{spec.name}: unknown cnn layout {arch!r}")
