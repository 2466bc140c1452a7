"""Flax (linen) implementations of the CNNs (alexnet, alexnet_cifar, vgg16, googlenet, resnet50,
resnet56, + tiny).

Same layouts as ``torch_impl`` (sources and counts in :mod:`dlperf.zoo.cnn.spec`), with two
differences that change neither the function nor the parameter count:

* **NHWC.** Every model takes a float image batch ``[B, H, W, C]`` (XLA's preferred layout for
  convolutions on GPU; the torch models take ``[B, C, H, W]``). Kernels are ``[kh, kw, c_in,
  c_out]`` (HWIO) instead of torch's OIHW. Flattening a feature map before a Linear layer
  therefore orders the features ``(h, w, c)`` instead of torch's ``(c, h, w)``;
  :func:`dlperf.zoo.convert.torch_to_flax` permutes those weight rows.
* **BatchNorm** is ``flax.linen.BatchNorm`` with torch's constants (flax ``momentum=0.9`` is
  torch ``momentum=0.1``; ``epsilon=1e-5``); scale and bias are parameters, the running mean
  and variance live in the ``batch_stats`` collection (buffers in torch, not parameters). In
  train mode both normalise with the biased batch variance; flax updates the running variance
  with the biased variance where torch uses the unbiased one (n/(n-1) larger), which only
  matters for evaluation, never for a training step.

Initialisation follows ``torch_impl``: PyTorch's defaults (conv and linear weights
U(+-1/sqrt(fan_in)), i.e. ``kaiming_uniform_(a=sqrt(5))``, biases U(+-1/sqrt(fan_in)), BN scale
1, bias 0), except VGG and GoogLeNet, which use torchvision's schemes (see their classes).
Submodules are named after the torch modules (``features.3`` -> ``features_3``,
``layer1.0.downsample.0`` -> ``layer1_0/downsample_0``) so weights map one to one.

Every model is called as ``model.apply(variables, x, train=...)``: ``train=True`` uses batch
statistics (``mutable=["batch_stats"]`` to update the running ones) and active dropout (an
rng named ``"dropout"``); ``train=False`` uses running statistics and no dropout. ``dtype`` is
the compute dtype (``jnp.bfloat16`` for mixed precision); parameters are always float32.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from dlperf.zoo.cnn import spec as layout
from dlperf.zoo.spec import ModelSpec

#: Input layout of the Flax CNNs (the adapter makes and records its data in this layout).
INPUT_LAYOUT = "NHWC"

# --- PyTorch default initialisation ----------------------------------------------------------

#: torch ``kaiming_uniform_(w, a=sqrt(5))``: bound = sqrt(6 / ((1 + 5) * fan_in)) =
#: 1/sqrt(fan_in); flax variance_scaling(1/3, fan_in, uniform) has bound sqrt(3 * (1/3) / fan_in),
#: the same. fan_in is taken from the kernel shape: [in, out] (Dense) or [kh, kw, in, out] (Conv).
TORCH_KERNEL_INIT = nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform")


def torch_bias_init(fan_in: int):
    """torch's default bias init for Linear/Conv: U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0

    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


def torch_dense(n_in: int, n_out: int, name: str, dtype: Any) -> nn.Dense:
    """``nn.Dense`` equivalent to ``torch.nn.Linear(n_in, n_out)`` with its default init."""
    return nn.Dense(n_out, dtype=dtype, param_dtype=jnp.float32, kernel_init=TORCH_KERNEL_INIT,
                    bias_init=torch_bias_init(n_in), name=name)


def _conv(x: jnp.ndarray, c_out: int, k: int, stride: int, pad: int, bias: bool, name: str,
          dtype: Any) -> jnp.ndarray:
    """A ``k x k`` conv with torch's padding rule and default init, NHWC in and out."""
    fan_in = x.shape[-1] * k * k
    return nn.Conv(c_out, (k, k), strides=(stride, stride), padding=((pad, pad), (pad, pad)),
                   use_bias=bias, dtype=dtype, param_dtype=jnp.float32,
                   kernel_init=TORCH_KERNEL_INIT, bias_init=torch_bias_init(fan_in),
                   name=name)(x)


def _bn(x: jnp.ndarray, train: bool, name: str, dtype: Any) -> jnp.ndarray:
    """BatchNorm over N, H, W with torch's constants (momentum 0.1 == flax 0.9, eps 1e-5)."""
    return nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-5, dtype=dtype,
                        param_dtype=jnp.float32, name=name)(x)


def _max_pool(x: jnp.ndarray, k: int, s: int, p: int) -> jnp.ndarray:
    """torch ``MaxPool2d(k, s, p)`` (floor mode; padding never wins the max), NHWC."""
    return nn.max_pool(x, (k, k), strides=(s, s), padding=((p, p), (p, p)))


def _avg_pool_matrix(n_in: int, n_out: int) -> np.ndarray:
    """``[n_out, n_in]`` averaging weights of torch's adaptive average pool along one axis.

    Output cell ``i`` averages input ``[floor(i*n_in/n_out), ceil((i+1)*n_in/n_out))``
    (ATen ``AdaptiveAveragePooling.cpp``, start_index / end_index).
    """
    m = np.zeros((n_out, n_in), np.float32)
    for i in range(n_out):
        a, b = (i * n_in) // n_out, -((-(i + 1) * n_in) // n_out)
        m[i, a:b] = 1.0 / (b - a)
    return m


def adaptive_avg_pool(x: jnp.ndarray, out_hw: tuple[int, int]) -> jnp.ndarray:
    """torch ``AdaptiveAvgPool2d(out_hw)`` on NHWC ``[B, H, W, C]`` -> ``[B, oh, ow, C]``.

    Identity when the sizes agree, a reshape-mean when they divide, a broadcast from 1x1, and
    otherwise two small averaging matrices (exact torch windows, :func:`_avg_pool_matrix`).
    """
    _, h, w, _ = x.shape
    oh, ow = out_hw
    if (h, w) == (oh, ow):
        return x
    if h == 1 and w == 1:
        return jnp.broadcast_to(x, (x.shape[0], oh, ow, x.shape[3]))
    if h % oh == 0 and w % ow == 0:
        return x.reshape(x.shape[0], oh, h // oh, ow, w // ow, x.shape[3]).mean(axis=(2, 4))
    ph = jnp.asarray(_avg_pool_matrix(h, oh), x.dtype)
    pw = jnp.asarray(_avg_pool_matrix(w, ow), x.dtype)
    return jnp.einsum("ih,jw,bhwc->bijc", ph, pw, x)


# --- AlexNet (torchvision layout) ------------------------------------------------------------


class AlexNet(nn.Module):
    """torchvision's AlexNet: ``[B, H, W, 3]`` -> ``[B, num_classes]`` logits.

    conv+ReLU (max-pools 3x3/2 after convs 1, 2, 5), adaptive average pool to ``avgpool``
    squared, Dropout-Linear-ReLU-Dropout-Linear-ReLU-Linear.
    """

    channels: tuple[int, ...]
    fc: int
    avgpool: int
    dropout: float
    num_classes: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jnp.ndarray, train: bool = True) -> jnp.ndarray:
        """``x`` ``[B, H, W, C]`` float -> logits ``[B, num_classes]``."""
        idx = 0  # index in torch's ``features`` nn.Sequential
        for c_out, (k, s, p, pool) in zip(self.channels, layout.ALEXNET_CONVS, strict=True):
            x = nn.relu(_conv(x, c_out, k, s, p, True, f"features_{idx}", self.dtype))
            idx += 2
            if pool:
                x = _max_pool(x, *layout.ALEXNET_POOL)
                idx += 1
        x = adaptive_avg_pool(x, (self.avgpool, self.avgpool))
        x = x.reshape(x.shape[0], -1)  # (h, w, c) order
        n_in = x.shape[-1]
        x = nn.Dropout(self.dropout, deterministic=not train)(x)
        x = nn.relu(torch_dense(n_in, self.fc, "classifier_1", self.dtype)(x))
        x = nn.Dropout(self.dropout, deterministic=not train)(x)
        x = nn.relu(torch_dense(self.fc, self.fc, "classifier_4", self.dtype)(x))
        return torch_dense(self.fc, self.num_classes, "classifier_6", self.dtype)(x)


# --- AlexNet-R: cuda-convnet layers-18pct ------------------------------------------------------


def _cifar_pool(x: jnp.ndarray, kind: str) -> jnp.ndarray:
    k, s, p = layout.CIFAR_POOL
    if kind == "max":
        return _max_pool(x, k, s, p)
    if kind == "avg":
        # Padding excluded from the average, as cuda-convnet (torch count_include_pad=False).
        return nn.avg_pool(x, (k, k), strides=(s, s), padding=((p, p), (p, p)),
                           count_include_pad=False)
    raise ValueError(f"unknown pool type {kind!r} (valid: max, avg)")


class AlexNetCifar(nn.Module):
    """cuda-convnet layers-18pct: ``[B, 32, 32, 3]`` -> ``[B, num_classes]`` logits.

    conv5x5 -> pool -> ReLU, conv5x5 -> ReLU -> pool, conv5x5 -> ReLU -> pool, FC (as
    ``torch_impl.AlexNetCifar``).
    """

    channels: tuple[int, ...]
    pools: tuple[str, ...]
    num_classes: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jnp.ndarray, train: bool = True) -> jnp.ndarray:
        """``x`` ``[B, H, W, C]`` float -> logits ``[B, num_classes]``."""
        k, s, p = layout.CIFAR_CONV
        for i, (c_out, kind) in enumerate(zip(self.channels, self.pools, strict=True)):
            x = _conv(x, c_out, k, s, p, True, f"features_{3 * i}", self.dtype)
            x = nn.relu(_cifar_pool(x, kind)) if i == 0 else _cifar_pool(nn.relu(x), kind)
        x = x.reshape(x.shape[0], -1)  # (h, w, c) order
        return torch_dense(x.shape[-1], self.num_classes, "fc", self.dtype)(x)


# --- VGG (torchvision layout, no BN) ------------------------------------------------------------

#: torchvision VGG init (as torch_impl.VGG): convs Kaiming-normal, fan-out, ReLU gain
#: (std sqrt(2 / (c_out * k * k))), linears N(0, 0.01), zero biases.
VGG_CONV_INIT = nn.initializers.variance_scaling(2.0, "fan_out", "normal")


class VGG(nn.Module):
    """torchvision's VGG without batch norm: ``[B, H, W, 3]`` -> ``[B, num_classes]`` logits.

    Per block conv3x3 (pad 1, bias) + ReLU for each width, then max-pool 2x2/2; adaptive
    average pool to ``avgpool`` squared; Linear-ReLU-Dropout-Linear-ReLU-Dropout-Linear.
    """

    blocks: tuple[tuple[int, ...], ...]
    fc: int
    avgpool: int
    dropout: float
    num_classes: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jnp.ndarray, train: bool = True) -> jnp.ndarray:
        """``x`` ``[B, H, W, C]`` float -> logits ``[B, num_classes]``."""
        k, s, p = layout.VGG_CONV
        idx = 0  # index in torch's ``features`` nn.Sequential
        for block in self.blocks:
            for c_out in block:
                x = nn.relu(nn.Conv(c_out, (k, k), strides=(s, s), padding=((p, p), (p, p)),
                                    dtype=self.dtype, param_dtype=jnp.float32,
                                    kernel_init=VGG_CONV_INIT, bias_init=nn.initializers.zeros,
                                    name=f"features_{idx}")(x))
                idx += 2
            x = _max_pool(x, *layout.VGG_POOL)
            idx += 1
        x = adaptive_avg_pool(x, (self.avgpool, self.avgpool))
        x = x.reshape(x.shape[0], -1)  # (h, w, c) order

        def dense(n: int, name: str) -> nn.Dense:
            return nn.Dense(n, dtype=self.dtype, param_dtype=jnp.float32,
                            kernel_init=nn.initializers.normal(0.01),
                            bias_init=nn.initializers.zeros, name=name)

        x = nn.relu(dense(self.fc, "classifier_0")(x))
        x = nn.Dropout(self.dropout, deterministic=not train)(x)
        x = nn.relu(dense(self.fc, "classifier_3")(x))
        x = nn.Dropout(self.dropout, deterministic=not train)(x)
        return dense(self.num_classes, "classifier_6")(x)


# --- GoogLeNet (torchvision layout: BN, no auxiliary heads) -------------------------------------

#: torchvision GoogLeNet init (as torch_impl.GoogLeNet): convs and FC weight
#: trunc_normal(std=0.01, a=-2, b=2); the bounds are absolute (200 sigma), i.e. N(0, 0.01).
GOOGLENET_INIT = nn.initializers.normal(0.01)


def _max_pool_ceil(x: jnp.ndarray, k: int, s: int, p: int) -> jnp.ndarray:
    """torch ``MaxPool2d(k, s, p, ceil_mode=True)`` on NHWC: extra -inf padding on the right so
    that the output has :func:`dlperf.zoo.cnn.spec.pool_out_ceil` cells per axis."""
    pads = []
    for n in x.shape[1:3]:
        out = layout.pool_out_ceil(n, k, s, p)
        pads.append((p, p + max(0, (out - 1) * s + k - (n + 2 * p))))
    return nn.max_pool(x, (k, k), strides=(s, s), padding=tuple(pads))


class BasicConv2d(nn.Module):
    """torchvision GoogLeNet ``BasicConv2d``: bias-free conv (``conv``), BN eps 1e-3 (``bn``),
    ReLU."""

    c_out: int
    kernel: int
    stride: int = 1
    pad: int = 0
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jnp.ndarray, train: bool = True) -> jnp.ndarray:
        """``[B, H, W, c_in]`` -> ``[B, H', W', c_out]``."""
        k, p = self.kernel, self.pad
        x = nn.Conv(self.c_out, (k, k), strides=(self.stride, self.stride),
                    padding=((p, p), (p, p)), use_bias=False, dtype=self.dtype,
                    param_dtype=jnp.float32, kernel_init=GOOGLENET_INIT, name="conv")(x)
        x = nn.BatchNorm(use_running_average=not train, momentum=0.9,
                         epsilon=layout.GOOGLENET_BN_EPS, dtype=self.dtype,
                         param_dtype=jnp.float32, name="bn")(x)
        return nn.relu(x)


class Inception(nn.Module):
    """torchvision ``Inception`` block, NHWC: 1x1; 1x1 -> 3x3; 1x1 -> 3x3 (torchvision's
    "5x5"); max-pool 3x3/1 pad 1 (ceil mode) -> 1x1; concatenated along channels."""

    row: tuple[int, ...]  # (ch1x1, ch3x3red, ch3x3, ch5x5red, ch5x5, pool_proj)
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jnp.ndarray, train: bool = True) -> jnp.ndarray:
        """``[B, H, W, c_in]`` -> ``[B, H, W, ch1x1 + ch3x3 + ch5x5 + pool_proj]``."""
        c1, c3r, c3, c5r, c5, pp = self.row
        d = self.dtype
        b1 = BasicConv2d(c1, 1, dtype=d, name="branch1")(x, train)
        b2 = BasicConv2d(c3r, 1, dtype=d, name="branch2_0")(x, train)
        b2 = BasicConv2d(c3, 3, pad=1, dtype=d, name="branch2_1")(b2, train)
        b3 = BasicConv2d(c5r, 1, dtype=d, name="branch3_0")(x, train)
        b3 = BasicConv2d(c5, 3, pad=1, dtype=d, name="branch3_1")(b3, train)
        b4 = BasicConv2d(pp, 1, dtype=d, name="branch4_1")(_max_pool_ceil(x, 3, 1, 1), train)
        return jnp.concatenate([b1, b2, b3, b4], axis=-1)


class GoogLeNet(nn.Module):
    """torchvision's GoogLeNet (no aux heads), NHWC: ``[B, H, W, 3]`` -> ``[B, num_classes]``.

    stem (conv7x7/2, max-pool, conv1x1, conv3x3, max-pool) -> inception 3a 3b, max-pool,
    4a-4e, max-pool 2x2, 5a 5b -> global average pool -> dropout -> FC.
    """

    stem: tuple[int, ...]
    inception: tuple[tuple[int, ...], ...]
    dropout: float
    num_classes: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jnp.ndarray, train: bool = True) -> jnp.ndarray:
        """``x`` ``[B, H, W, C]`` float -> logits ``[B, num_classes]``."""
        d = self.dtype
        for i, (c_out, (k, s, p)) in enumerate(zip(self.stem, layout.GOOGLENET_STEM,
                                                   strict=True)):
            x = BasicConv2d(c_out, k, s, p, dtype=d, name=f"conv{i + 1}")(x, train)
            if i in layout.GOOGLENET_STEM_POOLS:
                x = _max_pool_ceil(x, *layout.GOOGLENET_STEM_POOLS[i])
        rows = iter(self.inception)
        for stage, n in enumerate(layout.GOOGLENET_STAGES):
            for j in range(n):
                x = Inception(tuple(next(rows)), dtype=d,
                              name=f"inception{stage + 3}{'abcde'[j]}")(x, train)
            if stage < len(layout.GOOGLENET_STAGE_POOLS):
                x = _max_pool_ceil(x, *layout.GOOGLENET_STAGE_POOLS[stage])
        x = jnp.mean(x, axis=(1, 2))
        x = nn.Dropout(self.dropout, deterministic=not train)(x)
        n_in = x.shape[-1]
        return nn.Dense(self.num_classes, dtype=d, param_dtype=jnp.float32,
                        kernel_init=GOOGLENET_INIT, bias_init=torch_bias_init(n_in),
                        name="fc")(x)


# --- ResNet-50 v1.5 (torchvision layout) --------------------------------------------------------


class Bottleneck(nn.Module):
    """torchvision ``Bottleneck`` (v1.5: the stride is in ``conv2``, the 3x3 conv), NHWC."""

    width: int
    c_out: int
    stride: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jnp.ndarray, train: bool = True) -> jnp.ndarray:
        """``[B, H, W, c_in]`` -> ``[B, H/stride, W/stride, c_out]``."""
        d = self.dtype
        identity = x
        if self.stride != 1 or x.shape[-1] != self.c_out:
            identity = _conv(x, self.c_out, 1, self.stride, 0, False, "downsample_0", d)
            identity = _bn(identity, train, "downsample_1", d)
        out = nn.relu(_bn(_conv(x, self.width, 1, 1, 0, False, "conv1", d), train, "bn1", d))
        out = nn.relu(_bn(_conv(out, self.width, 3, self.stride, 1, False, "conv2", d), train,
                          "bn2", d))
        out = _bn(_conv(out, self.c_out, 1, 1, 0, False, "conv3", d), train, "bn3", d)
        return nn.relu(out + identity)


class ResNetBottleneck(nn.Module):
    """ImageNet ResNet with bottleneck blocks (ResNet-50 v1.5 at the full sizes), NHWC.

    stem (conv7x7/2, BN, ReLU, max-pool 3x3/2) -> stages ``layer1..`` -> global average pool ->
    FC -> ``[B, num_classes]``.
    """

    stem: int
    widths: tuple[int, ...]
    blocks: tuple[int, ...]
    expansion: int
    num_classes: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jnp.ndarray, train: bool = True) -> jnp.ndarray:
        """``x`` ``[B, H, W, C]`` float -> logits ``[B, num_classes]``."""
        d = self.dtype
        k, s, p = layout.RESNET_STEM_CONV
        x = nn.relu(_bn(_conv(x, self.stem, k, s, p, False, "conv1", d), train, "bn1", d))
        x = _max_pool(x, *layout.RESNET_STEM_POOL)
        for i, (width, n) in enumerate(zip(self.widths, self.blocks, strict=True)):
            for b in range(n):
                x = Bottleneck(width, width * self.expansion, 2 if i > 0 and b == 0 else 1,
                               dtype=d, name=f"layer{i + 1}_{b}")(x, train)
        x = jnp.mean(x, axis=(1, 2))
        return torch_dense(x.shape[-1], self.num_classes, "fc", d)(x)


# --- CIFAR ResNet (He et al. 2016 sec. 4.2), option-A shortcuts -----------------------------------


class BasicBlockA(nn.Module):
    """Basic block with an option-A shortcut (identity; on a change: subsample + zero-pad), NHWC.

    conv3x3(stride)-BN-ReLU-conv3x3-BN, plus the shortcut, then ReLU (``torch_impl.BasicBlockA``).
    """

    c_out: int
    stride: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jnp.ndarray, train: bool = True) -> jnp.ndarray:
        """``[B, H, W, c_in]`` -> ``[B, H/stride, W/stride, c_out]``."""
        d = self.dtype
        out = nn.relu(_bn(_conv(x, self.c_out, 3, self.stride, 1, False, "conv1", d), train,
                          "bn1", d))
        out = _bn(_conv(out, self.c_out, 3, 1, 1, False, "conv2", d), train, "bn2", d)
        sc = x
        if self.stride != 1:
            sc = sc[:, ::self.stride, ::self.stride, :]
        extra = self.c_out - x.shape[-1]
        if extra:
            sc = jnp.pad(sc, ((0, 0), (0, 0), (0, 0), (extra // 2, extra - extra // 2)))
        return nn.relu(out + sc.astype(out.dtype))


class ResNetCifar(nn.Module):
    """CIFAR ResNet (6n+2 layers): ``[B, 32, 32, 3]`` -> ``[B, num_classes]`` logits, NHWC."""

    channels: tuple[int, ...]
    blocks: tuple[int, ...]
    num_classes: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jnp.ndarray, train: bool = True) -> jnp.ndarray:
        """``x`` ``[B, H, W, C]`` float -> logits ``[B, num_classes]``."""
        d = self.dtype
        x = nn.relu(_bn(_conv(x, self.channels[0], 3, 1, 1, False, "conv1", d), train, "bn1", d))
        j = 0
        for i, (c_out, n) in enumerate(zip(self.channels, self.blocks, strict=True)):
            for b in range(n):
                x = BasicBlockA(c_out, 2 if i > 0 and b == 0 else 1, dtype=d,
                                name=f"layers_{j}")(x, train)
                j += 1
        x = jnp.mean(x, axis=(1, 2))
        return torch_dense(x.shape[-1], self.num_classes, "fc", d)(x)


#: ``hyper["arch"]`` -> the Flax model of that layout, from ``(hyper, spec, dtype)``.
LAYOUTS: dict[str, Callable[[dict, ModelSpec, Any], nn.Module]] = {
    "alexnet": lambda h, s, dt: AlexNet(tuple(h["channels"]), h["fc"], h["avgpool"],
                                        h["dropout"], s.num_classes, dtype=dt),
    "alexnet_cifar": lambda h, s, dt: AlexNetCifar(tuple(h["channels"]), tuple(h["pools"]),
                                                   s.num_classes, dtype=dt),
    "vgg": lambda h, s, dt: VGG(tuple(tuple(b) for b in h["blocks"]), h["fc"], h["avgpool"],
                                h["dropout"], s.num_classes, dtype=dt),
    "googlenet": lambda h, s, dt: GoogLeNet(tuple(h["stem"]),
                                            tuple(tuple(r) for r in h["inception"]),
                                            h["dropout"], s.num_classes, dtype=dt),
    "resnet_bottleneck": lambda h, s, dt: ResNetBottleneck(h["stem"], tuple(h["widths"]),
                                                           tuple(h["blocks"]), h["expansion"],
                                                           s.num_classes, dtype=dt),
    "resnet_cifar": lambda h, s, dt: ResNetCifar(tuple(h["channels"]), tuple(h["blocks"]),
                                                 s.num_classes, dtype=dt),
}


def build(spec: ModelSpec, dtype: Any = jnp.float32) -> nn.Module:
    """Build the Flax CNN of ``spec`` (family ``cnn``; layout ``spec.hyper["arch"]``).

    Input ``[B, H, W, C]`` float (NHWC; ``spec.input_shape`` is ``(C, H, W)``), output
    ``[B, num_classes]`` logits. ``dtype`` is the compute dtype; parameters are float32.

    Raises:
        NotImplementedError: a layout without a Flax implementation.
    """
    if spec.family != "cnn":
        raise ValueError(f"{spec.name} is a {spec.family} model, not a cnn")
    arch = spec.hyper["arch"]
    if arch not in LAYOUTS:
        raise NotImplementedError(f"{spec.name}: no Flax implementation of cnn layout {arch!r}")
    return LAYOUTS[arch](spec.hyper, spec, dtype)
