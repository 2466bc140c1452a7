"""PyTorch implementations of the CNNs (alexnet, alexnet_cifar, vgg16, googlenet, resnet50,
resnet56, + tiny).

Layouts and sources are described in :mod:`dlperf.zoo.cnn.spec`; this module reads the layout
constants from there and the sizes from ``spec.hyper``. Every model maps a float image batch
``[B, C, H, W]`` to logits ``[B, num_classes]``; all ops work with channels_last inputs and
under ``torch.autocast`` (bf16), and none synchronises with the host.
"""

from __future__ import annotations

from collections.abc import Callable

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


# --- VGG (torchvision layout, no BN) ------------------------------------------------------------


class VGG(nn.Module):
    """torchvision's VGG without batch norm: ``[B, 3, H, W]`` -> ``[B, num_classes]`` logits.

    ``features``: per block conv3x3 (pad 1, bias) + ReLU for each width, then max-pool 2x2/2;
    AdaptiveAvgPool to ``avgpool x avgpool``; ``classifier``
    Linear-ReLU-Dropout-Linear-ReLU-Dropout-Linear. Module names and order match
    ``torchvision.models.vgg16``; so does the initialisation (Kaiming-normal fan-out convs,
    N(0, 0.01) linears, zero biases), which a 16-layer net without BN needs to train.
    """

    def __init__(self, in_channels: int, blocks: tuple[tuple[int, ...], ...], fc: int,
                 avgpool: int, dropout: float, num_classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c_in = in_channels
        k, s, p = layout.VGG_CONV
        pk, ps, pp = layout.VGG_POOL
        for block in blocks:
            for c_out in block:
                layers += [nn.Conv2d(c_in, c_out, k, stride=s, padding=p), nn.ReLU(inplace=True)]
                c_in = c_out
            layers.append(nn.MaxPool2d(pk, stride=ps, padding=pp))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((avgpool, avgpool))
        self.classifier = nn.Sequential(
            nn.Linear(c_in * avgpool * avgpool, fc),
            nn.ReLU(inplace=True),
            nn.Dropout(p=dropout),
            nn.Linear(fc, fc),
            nn.ReLU(inplace=True),
            nn.Dropout(p=dropout),
            nn.Linear(fc, num_classes),
        )
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0.0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``[B, C, H, W]`` float -> logits ``[B, num_classes]``."""
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


# --- GoogLeNet (torchvision layout: BN, no auxiliary heads) ------------------------------------


class BasicConv2d(nn.Module):
    """torchvision GoogLeNet ``BasicConv2d``: bias-free conv, BN (eps 0.001), ReLU."""

    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int = 1,
                 padding: int = 0) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, kernel, stride=stride, padding=padding, bias=False)
        self.bn = nn.BatchNorm2d(c_out, eps=layout.GOOGLENET_BN_EPS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, c_in, H, W]`` -> ``[B, c_out, H', W']``."""
        return F.relu(self.bn(self.conv(x)), inplace=True)


class Inception(nn.Module):
    """torchvision ``Inception`` block: four branches concatenated along channels.

    1x1; 1x1 -> 3x3; 1x1 -> 3x3 (torchvision's "5x5" branch); max-pool 3x3/1 pad 1 (ceil
    mode) -> 1x1. The spatial size is kept.
    """

    def __init__(self, c_in: int, ch1x1: int, ch3x3red: int, ch3x3: int, ch5x5red: int,
                 ch5x5: int, pool_proj: int) -> None:
        super().__init__()
        self.branch1 = BasicConv2d(c_in, ch1x1, 1)
        self.branch2 = nn.Sequential(BasicConv2d(c_in, ch3x3red, 1),
                                     BasicConv2d(ch3x3red, ch3x3, 3, padding=1))
        self.branch3 = nn.Sequential(BasicConv2d(c_in, ch5x5red, 1),
                                     BasicConv2d(ch5x5red, ch5x5, 3, padding=1))
        self.branch4 = nn.Sequential(nn.MaxPool2d(3, stride=1, padding=1, ceil_mode=True),
                                     BasicConv2d(c_in, pool_proj, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, c_in, H, W]`` -> ``[B, ch1x1 + ch3x3 + ch5x5 + pool_proj, H, W]``."""
        return torch.cat([self.branch1(x), self.branch2(x), self.branch3(x), self.branch4(x)],
                         1)


class GoogLeNet(nn.Module):
    """torchvision's GoogLeNet (``aux_logits=False``, ``transform_input=False``).

    ``[B, 3, H, W]`` -> stem (conv7x7/2, max-pool, conv1x1, conv3x3, max-pool) -> inception
    3a 3b, max-pool, 4a-4e, max-pool 2x2, 5a 5b -> global average pool -> dropout -> FC ->
    ``[B, num_classes]``. Module names match torchvision (conv1..conv3, maxpool1..maxpool4,
    inception3a..inception5b, fc), as does the initialisation (truncated normal, std 0.01,
    for convs and the FC; BN weight 1, bias 0).
    """

    def __init__(self, in_channels: int, stem: tuple[int, ...],
                 inception: tuple[tuple[int, ...], ...], dropout: float,
                 num_classes: int) -> None:
        super().__init__()
        c_in = in_channels
        for i, (c_out, (k, s, p)) in enumerate(zip(stem, layout.GOOGLENET_STEM, strict=True)):
            self.add_module(f"conv{i + 1}", BasicConv2d(c_in, c_out, k, stride=s, padding=p))
            c_in = c_out
        pk, ps, pp = layout.GOOGLENET_STEM_POOLS[0]
        self.maxpool1 = nn.MaxPool2d(pk, stride=ps, padding=pp, ceil_mode=True)
        pk, ps, pp = layout.GOOGLENET_STEM_POOLS[2]
        self.maxpool2 = nn.MaxPool2d(pk, stride=ps, padding=pp, ceil_mode=True)
        rows = iter(inception)
        self.blocks: list[str] = []  # forward order of the inception blocks and stage pools
        for stage, n in enumerate(layout.GOOGLENET_STAGES):
            for j in range(n):
                row = next(rows)
                name = f"inception{stage + 3}{'abcde'[j]}"
                self.add_module(name, Inception(c_in, *row))
                self.blocks.append(name)
                c_in = layout.inception_out(row)
            if stage < len(layout.GOOGLENET_STAGE_POOLS):
                pk, ps, pp = layout.GOOGLENET_STAGE_POOLS[stage]
                name = f"maxpool{stage + 3}"
                self.add_module(name, nn.MaxPool2d(pk, stride=ps, padding=pp, ceil_mode=True))
                self.blocks.append(name)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.dropout = nn.Dropout(p=dropout)
        self.fc = nn.Linear(c_in, num_classes)
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.trunc_normal_(m.weight, mean=0.0, std=0.01, a=-2, b=2)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``[B, C, H, W]`` float -> logits ``[B, num_classes]``."""
        x = self.maxpool1(self.conv1(x))
        x = self.maxpool2(self.conv3(self.conv2(x)))
        for name in self.blocks:
            x = getattr(self, name)(x)
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(self.dropout(x))


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


#: ``hyper["arch"]`` -> the model of that layout, from ``(hyper, spec)``.
LAYOUTS: dict[str, Callable[[dict, ModelSpec], nn.Module]] = {
    "alexnet": lambda h, s: AlexNet(s.input_shape[0], tuple(h["channels"]), h["fc"],
                                    h["avgpool"], h["dropout"], s.num_classes),
    "alexnet_cifar": lambda h, s: AlexNetCifar(s.input_shape[0], tuple(h["channels"]),
                                               tuple(h["pools"]), tuple(s.input_shape[1:]),
                                               s.num_classes),
    "vgg": lambda h, s: VGG(s.input_shape[0], tuple(tuple(b) for b in h["blocks"]), h["fc"],
                            h["avgpool"], h["dropout"], s.num_classes),
    "googlenet": lambda h, s: GoogLeNet(s.input_shape[0], tuple(h["stem"]),
                                        tuple(tuple(r) for r in h["inception"]), h["dropout"],
                                        s.num_classes),
    "resnet_bottleneck": lambda h, s: ResNetBottleneck(s.input_shape[0], h["stem"],
                                                       tuple(h["widths"]), tuple(h["blocks"]),
                                                       h["expansion"], s.num_classes),
    "resnet_cifar": lambda h, s: ResNetCifar(s.input_shape[0], tuple(h["channels"]),
                                             tuple(h["blocks"]), s.num_classes),
}


def build(spec: ModelSpec) -> nn.Module:
    """Build the CNN of ``spec`` (family ``cnn``; layout ``spec.hyper["arch"]``).

    Weights use PyTorch's default initialisation, except VGG and GoogLeNet, which use
    torchvision's (see their classes).
    """
    if spec.family != "cnn":
        raise ValueError(f"{spec.name} is a {spec.family} model, not a cnn")
    arch = spec.hyper["arch"]
    if arch not in LAYOUTS:
        raise ValueError(f"{spec.name}: unknown cnn layout {arch!r}; known: {', '.join(LAYOUTS)}")
    return LAYOUTS[arch](spec.hyper, spec)
