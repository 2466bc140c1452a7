"""MXNet Gluon implementations of the CNNs: alexnet, alexnet_cifar, resnet50, resnet56 (+ tiny).

Layouts and sources are described in :mod:`dlperf.zoo.cnn.spec`; this module reads the layout
constants from there and the sizes from ``spec.hyper``, as ``torch_impl`` does. Every model maps
a float32 image batch ``[B, C, H, W]`` (NCHW, MXNet's native layout; its oneDNN convolutions
reorder internally) to logits ``[B, num_classes]``. vgg16 and googlenet are not implemented in
MXNet (:func:`build` says so).

Parameter names are the PyTorch ``state_dict`` keys (``features.0.weight``, ``layer1.0.bn1.gamma``
for ``layer1.0.bn1.weight``, ...): the model's prefix is empty and each child's prefix is its
PyTorch module path, so :func:`dlperf.zoo.convert_mxnet.torch_to_mxnet` maps weights by name.
Gluon ``Conv2D`` weights are OIHW and ``Dense`` weights ``[out, in]``, as PyTorch's; a
flattened NCHW feature map has PyTorch's ``(c, h, w)`` order, so no permutation is needed.

Initialisation: PyTorch's default for ``Conv2d``/``Linear`` (``kaiming_uniform_(a=sqrt(5))``:
weights ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``, i.e. ``mx.init.Xavier(rnd_type="uniform",
factor_type="in", magnitude=1)``; biases ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``), BatchNorm
gamma 1, beta 0. BatchNorm: ``momentum=0.9`` (Gluon's convention: running = 0.9 running + 0.1
batch, PyTorch's ``momentum=0.1``) and ``epsilon=1e-5`` as PyTorch; MXNet updates the running
variance with the biased batch variance, PyTorch with the unbiased one (training-mode outputs
are the same).

Imported only in the MXNet interpreter (``DLPERF_MXNET_PYTHON``), never by dlperf's core.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import mxnet as mx
from mxnet.gluon import nn

from dlperf.zoo.cnn import spec as layout
from dlperf.zoo.spec import ModelSpec

#: PyTorch's default weight initialisation of Conv2d/Linear: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
TORCH_DEFAULT_WEIGHT = dict(rnd_type="uniform", factor_type="in", magnitude=1)
BN_MOMENTUM, BN_EPS = 0.9, 1e-5


def _conv(c_in: int, c_out: int, k: int, stride: int, pad: int, bias: bool,
          prefix: str) -> nn.Conv2D:
    fan_in = c_in * k * k
    return nn.Conv2D(c_out, k, strides=stride, padding=pad, in_channels=c_in, use_bias=bias,
                     weight_initializer=mx.init.Xavier(**TORCH_DEFAULT_WEIGHT),
                     bias_initializer=mx.init.Uniform(1 / math.sqrt(fan_in)), prefix=prefix)


def _dense(n_in: int, n_out: int, prefix: str, flatten: bool = True) -> nn.Dense:
    return nn.Dense(n_out, in_units=n_in, flatten=flatten,
                    weight_initializer=mx.init.Xavier(**TORCH_DEFAULT_WEIGHT),
                    bias_initializer=mx.init.Uniform(1 / math.sqrt(n_in)), prefix=prefix)


def _bn(c: int, prefix: str) -> nn.BatchNorm:
    return nn.BatchNorm(momentum=BN_MOMENTUM, epsilon=BN_EPS, in_channels=c, prefix=prefix)


class _Seq(nn.HybridBlock):
    """A list of blocks applied in order, whose names are given by the caller."""

    def __init__(self, prefix: str = "") -> None:
        super().__init__(prefix=prefix)
        self.blocks: list[nn.HybridBlock] = []

    def add(self, block: nn.HybridBlock) -> nn.HybridBlock:  # noqa: D102
        self.register_child(block)
        self.blocks.append(block)
        return block

    def hybrid_forward(self, F, x):  # noqa: N803, D102
        for b in self.blocks:
            x = b(x)
        return x


# --- AlexNet (torchvision layout) --------------------------------------------------------------


class AlexNet(nn.HybridBlock):
    """torchvision's AlexNet: ``[B, 3, H, W]`` -> ``[B, num_classes]`` logits (``features``,
    adaptive average pool to ``avgpool x avgpool``, ``classifier``; torch_impl.AlexNet)."""

    def __init__(self, in_channels: int, channels: tuple[int, ...], fc: int, avgpool: int,
                 dropout: float, num_classes: int) -> None:
        super().__init__(prefix="")
        self.avgpool = avgpool
        with self.name_scope():
            self.features = _Seq()
            i, c_in = 0, in_channels
            for c_out, (k, s, p, pool) in zip(channels, layout.ALEXNET_CONVS, strict=True):
                self.features.add(_conv(c_in, c_out, k, s, p, True, f"features.{i}."))
                self.features.add(nn.Activation("relu", prefix=f"features.{i + 1}."))
                i += 2
                if pool:
                    pk, ps, pp = layout.ALEXNET_POOL
                    self.features.add(nn.MaxPool2D(pk, ps, pp, prefix=f"features.{i}."))
                    i += 1
                c_in = c_out
            self.classifier = _Seq()
            n_flat = c_in * avgpool * avgpool
            for blk in (nn.Dropout(dropout, prefix="classifier.0."),
                        _dense(n_flat, fc, "classifier.1."),
                        nn.Activation("relu", prefix="classifier.2."),
                        nn.Dropout(dropout, prefix="classifier.3."),
                        _dense(fc, fc, "classifier.4."),
                        nn.Activation("relu", prefix="classifier.5."),
                        _dense(fc, num_classes, "classifier.6.")):
                self.classifier.add(blk)

    def hybrid_forward(self, F, x):  # noqa: N803
        """``x`` ``[B, C, H, W]`` -> logits ``[B, num_classes]``."""
        x = F.contrib.AdaptiveAvgPooling2D(self.features(x),
                                           output_size=(self.avgpool, self.avgpool))
        return self.classifier(F.flatten(x))


# --- AlexNet-R: cuda-convnet layers-18pct -------------------------------------------------------


def _pool(kind: str, prefix: str) -> nn.HybridBlock:
    k, s, p = layout.CIFAR_POOL
    if kind == "max":
        return nn.MaxPool2D(k, s, p, prefix=prefix)
    if kind == "avg":  # padding excluded from the average, as in cuda-convnet and torch_impl
        return nn.AvgPool2D(k, s, p, count_include_pad=False, prefix=prefix)
    raise ValueError(f"unknown pool type {kind!r} (valid: max, avg)")


class AlexNetCifar(nn.HybridBlock):
    """cuda-convnet layers-18pct: ``[B, 3, 32, 32]`` -> ``[B, num_classes]`` logits
    (conv-pool-ReLU, then conv-ReLU-pool twice, FC; torch_impl.AlexNetCifar)."""

    def __init__(self, in_channels: int, channels: tuple[int, ...], pools: tuple[str, ...],
                 spatial: tuple[int, int], num_classes: int) -> None:
        super().__init__(prefix="")
        k, s, p = layout.CIFAR_CONV
        with self.name_scope():
            self.features = _Seq()
            c_in, hw, i = in_channels, spatial, 0
            for j, (c_out, kind) in enumerate(zip(channels, pools, strict=True)):
                self.features.add(_conv(c_in, c_out, k, s, p, True, f"features.{i}."))
                relu = nn.Activation("relu", prefix="")
                if j == 0:
                    self.features.add(_pool(kind, f"features.{i + 1}."))
                    self.features.add(relu)
                else:
                    self.features.add(relu)
                    self.features.add(_pool(kind, f"features.{i + 2}."))
                i += 3
                hw = tuple(layout.conv_out(layout.conv_out(d, k, s, p), *layout.CIFAR_POOL)
                           for d in hw)
                c_in = c_out
            self.fc = _dense(c_in * hw[0] * hw[1], num_classes, "fc.")

    def hybrid_forward(self, F, x):  # noqa: N803
        """``x`` ``[B, C, H, W]`` -> logits ``[B, num_classes]``."""
        return self.fc(F.flatten(self.features(x)))


# --- ResNet-50 v1.5 (torchvision layout) -------------------------------------------------------


class Bottleneck(nn.HybridBlock):
    """torchvision ``Bottleneck`` (v1.5: the stride is in the 3x3 conv)."""

    def __init__(self, c_in: int, width: int, c_out: int, stride: int, prefix: str) -> None:
        super().__init__(prefix=prefix)
        with self.name_scope():
            self.conv1 = _conv(c_in, width, 1, 1, 0, False, "conv1.")
            self.bn1 = _bn(width, "bn1.")
            self.conv2 = _conv(width, width, 3, stride, 1, False, "conv2.")
            self.bn2 = _bn(width, "bn2.")
            self.conv3 = _conv(width, c_out, 1, 1, 0, False, "conv3.")
            self.bn3 = _bn(c_out, "bn3.")
            self.downsample = None
            if stride != 1 or c_in != c_out:
                self.downsample = _Seq("downsample.")
                with self.downsample.name_scope():
                    self.downsample.add(_conv(c_in, c_out, 1, stride, 0, False, "0."))
                    self.downsample.add(_bn(c_out, "1."))

    def hybrid_forward(self, F, x):  # noqa: N803
        """``[B, c_in, H, W]`` -> ``[B, c_out, H/stride, W/stride]``."""
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + identity)


class ResNetBottleneck(nn.HybridBlock):
    """ImageNet ResNet with bottleneck blocks (torch_impl.ResNetBottleneck; torchvision names)."""

    def __init__(self, in_channels: int, stem: int, widths: tuple[int, ...],
                 blocks: tuple[int, ...], expansion: int, num_classes: int) -> None:
        super().__init__(prefix="")
        k, s, p = layout.RESNET_STEM_CONV
        with self.name_scope():
            self.conv1 = _conv(in_channels, stem, k, s, p, False, "conv1.")
            self.bn1 = _bn(stem, "bn1.")
            pk, ps, pp = layout.RESNET_STEM_POOL
            self.maxpool = nn.MaxPool2D(pk, ps, pp, prefix="maxpool.")
            c_in = stem
            self.stages = []
            for i, (width, n) in enumerate(zip(widths, blocks, strict=True)):
                c_out = width * expansion
                stage = _Seq(f"layer{i + 1}.")
                with stage.name_scope():
                    for b in range(n):
                        stage.add(Bottleneck(c_in, width, c_out, 2 if i > 0 and b == 0 else 1,
                                             f"{b}."))
                        c_in = c_out
                self.register_child(stage)
                self.stages.append(stage)
            self.fc = _dense(c_in, num_classes, "fc.")

    def hybrid_forward(self, F, x):  # noqa: N803
        """``x`` ``[B, C, H, W]`` -> logits ``[B, num_classes]``."""
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        for stage in self.stages:
            x = stage(x)
        return self.fc(F.flatten(F.mean(x, axis=(2, 3), keepdims=True)))


# --- CIFAR ResNet (He et al. 2016 sec. 4.2), option-A shortcuts ----------------------------------


class BasicBlockA(nn.HybridBlock):
    """Basic block with an option-A shortcut (identity; on a change of shape: every
    ``stride``-th pixel, extra channels zero; no parameters), torch_impl.BasicBlockA."""

    def __init__(self, c_in: int, c_out: int, stride: int, prefix: str) -> None:
        super().__init__(prefix=prefix)
        self.stride = stride
        extra = c_out - c_in
        if extra < 0 or extra // 2 > c_in or extra - extra // 2 > c_in:
            raise ValueError(f"option-A shortcut from {c_in} to {c_out} channels: the zero "
                             f"padding is made from slices of the input, so it needs "
                             f"c_in <= c_out <= 3 * c_in")
        self.pad = (extra // 2, extra - extra // 2)
        with self.name_scope():
            self.conv1 = _conv(c_in, c_out, 3, stride, 1, False, "conv1.")
            self.bn1 = _bn(c_out, "bn1.")
            self.conv2 = _conv(c_out, c_out, 3, 1, 1, False, "conv2.")
            self.bn2 = _bn(c_out, "bn2.")

    def _shortcut(self, F, x):  # noqa: N803
        if self.stride != 1:
            s = self.stride
            x = F.slice(x, begin=(None, None, None, None), end=(None, None, None, None),
                        step=(1, 1, s, s))
        before, after = self.pad
        if before or after:
            parts = []
            if before:
                parts.append(F.zeros_like(F.slice_axis(x, axis=1, begin=0, end=before)))
            parts.append(x)
            if after:
                parts.append(F.zeros_like(F.slice_axis(x, axis=1, begin=0, end=after)))
            x = F.concat(*parts, dim=1)
        return x

    def hybrid_forward(self, F, x):  # noqa: N803
        """``[B, c_in, H, W]`` -> ``[B, c_out, H/stride, W/stride]``."""
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self._shortcut(F, x))


class ResNetCifar(nn.HybridBlock):
    """CIFAR ResNet (6n+2 layers), torch_impl.ResNetCifar: ``[B, 3, 32, 32]`` -> logits."""

    def __init__(self, in_channels: int, channels: tuple[int, ...], blocks: tuple[int, ...],
                 num_classes: int) -> None:
        super().__init__(prefix="")
        with self.name_scope():
            self.conv1 = _conv(in_channels, channels[0], 3, 1, 1, False, "conv1.")
            self.bn1 = _bn(channels[0], "bn1.")
            self.layers = _Seq("layers.")
            c_in, j = channels[0], 0
            with self.layers.name_scope():
                for i, (c_out, n) in enumerate(zip(channels, blocks, strict=True)):
                    for b in range(n):
                        self.layers.add(BasicBlockA(c_in, c_out, 2 if i > 0 and b == 0 else 1,
                                                    f"{j}."))
                        c_in, j = c_out, j + 1
            self.fc = _dense(c_in, num_classes, "fc.")

    def hybrid_forward(self, F, x):  # noqa: N803
        """``x`` ``[B, C, H, W]`` -> logits ``[B, num_classes]``."""
        x = self.layers(F.relu(self.bn1(self.conv1(x))))
        return self.fc(F.flatten(F.mean(x, axis=(2, 3), keepdims=True)))


#: ``hyper["arch"]`` -> the Gluon model of that layout, from ``(hyper, spec)``.
LAYOUTS: dict[str, Callable[[dict, ModelSpec], nn.HybridBlock]] = {
    "alexnet": lambda h, s: AlexNet(s.input_shape[0], tuple(h["channels"]), h["fc"],
                                    h["avgpool"], h["dropout"], s.num_classes),
    "alexnet_cifar": lambda h, s: AlexNetCifar(s.input_shape[0], tuple(h["channels"]),
                                               tuple(h["pools"]), tuple(s.input_shape[1:]),
                                               s.num_classes),
    "resnet_bottleneck": lambda h, s: ResNetBottleneck(s.input_shape[0], h["stem"],
                                                       tuple(h["widths"]), tuple(h["blocks"]),
                                                       h["expansion"], s.num_classes),
    "resnet_cifar": lambda h, s: ResNetCifar(s.input_shape[0], tuple(h["channels"]),
                                             tuple(h["blocks"]), s.num_classes),
}


def build(spec: ModelSpec) -> nn.HybridBlock:
    """Build the CNN of ``spec`` (family ``cnn``; layout ``spec.hyper["arch"]``); parameters
    are initialised by the adapter on its context.

    Raises:
        NotImplementedError: vgg16 and googlenet (no MXNet implementation).
    """
    if spec.family != "cnn":
        raise ValueError(f"{spec.name} is a {spec.family} model, not a cnn")
    arch = spec.hyper["arch"]
    if arch not in LAYOUTS:
        raise NotImplementedError(f"{spec.name}: the {arch} layout has no MXNet implementation "
                                  f"(MXNet has alexnet, alexnet_cifar, resnet50 and resnet56)")
    return LAYOUTS[arch](spec.hyper, spec)
