"""Keras 3 (TensorFlow backend) implementations of the CNNs: alexnet, alexnet_cifar, vgg16,
googlenet, resnet50, resnet56 and their tiny variants.

Layouts and sources are in :mod:`dlperf.zoo.cnn.spec`; this module reads the layout constants
from there and the sizes from ``spec.hyper``, exactly like ``torch_impl``, and reproduces the
PyTorch architectures operation for operation:

* **Layout NHWC** (``channels_last``): every model maps ``[B, H, W, C]`` float32 images to
  ``[B, num_classes]`` logits. TensorFlow's CPU convolutions and pools only run NHWC, and NHWC
  is also the cuDNN/Tensor Core layout of choice on GPUs. Synthetic data is made NHWC; real
  data (NCHW from :func:`dlperf.data.make_batches`) is transposed once on the host.
* **Padding as PyTorch pads.** PyTorch pads ``p`` on both sides; TensorFlow's ``"same"`` pads
  ``total // 2`` before and the rest after, which for a stride-2 layer on an even size puts
  the window one pixel off. Where ``"same"``/``"valid"`` give PyTorch's windows they are used
  (every stride-1 conv); otherwise an explicit ``ZeroPadding2D`` precedes a ``"valid"`` conv
  (as ``keras.applications`` does). Max-pools pad with ``-inf`` (PyTorch's rule, also under
  ``ceil_mode``), average pools that exclude the padding from the count
  (``count_include_pad=False``) rescale a zero-padded ``"valid"`` average by a constant.
* **Flatten order.** ``Flatten`` of an NHWC map orders features ``(h, w, c)``, PyTorch's
  ``(c, h, w)``: the same parameters, permuted. ``model.torch_flatten_hwc`` records, for each
  ``Dense`` that follows such a flatten, the ``(H, W, C)`` of the map, so that
  :mod:`dlperf.zoo.convert_keras` permutes PyTorch weights into it.
* **BatchNorm** ``momentum=0.9`` (PyTorch's ``momentum=0.1`` is the weight of the new batch,
  Keras's the weight of the old average), ``epsilon=1e-5`` (GoogLeNet: 1e-3, as torchvision).
  One known difference: Keras updates the moving variance with the biased batch variance,
  PyTorch with the unbiased one (factor ``n / (n - 1)``, n = B*H*W); training-mode outputs do
  not depend on it, only inference after training.
* **Initialisation as PyTorch's**: default ``Conv2d``/``Linear`` init (weights
  ``U(+-1/sqrt(fan_in))``, i.e. ``VarianceScaling(1/3, "fan_in", "uniform")``, biases
  ``U(+-1/sqrt(fan_in))``), torchvision's for VGG (Kaiming-normal fan-out convs, N(0, 0.01)
  linears, zero biases) and GoogLeNet (N(0, 0.01) weights; torchvision's truncation at +-2 is
  200 standard deviations out, so it is a plain normal), BN weight 1 and bias 0.

Layers with parameters are named after the PyTorch module (``features.0``, ``layer1.0.conv1``,
``inception3a.branch2.1.bn``, ``fc``), so PyTorch weights load by name. Trainable parameter
counts equal ``spec.params`` exactly (BN moving statistics are non-trainable, as PyTorch's
running statistics are buffers).

``KERAS_BACKEND`` must be ``tensorflow`` before keras is first imported; the TensorFlow adapter
(:mod:`dlperf.frameworks.tensorflow.adapter`) sees to that.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import keras
import numpy as np
from keras import ops

from dlperf.zoo.cnn import spec as layout
from dlperf.zoo.spec import ModelSpec

HW = tuple[int, int]

# --- initialisers (fresh instances per weight: an unseeded Keras initialiser repeats itself) ---


@dataclass(frozen=True)
class _Init:
    """Which PyTorch initialisation a network uses: ``torch``, ``vgg`` or ``googlenet``."""

    scheme: str = "torch"

    def conv_kernel(self) -> keras.initializers.Initializer:
        """Kernel ``[k, k, c_in, c_out]`` initialiser."""
        if self.scheme == "vgg":  # kaiming_normal_(mode="fan_out", nonlinearity="relu")
            return keras.initializers.VarianceScaling(2.0, "fan_out", "untruncated_normal")
        if self.scheme == "googlenet":
            return keras.initializers.RandomNormal(0.0, 0.01)
        # kaiming_uniform_(a=sqrt(5)): bound sqrt(6 / ((1 + 5) * fan_in)) = 1 / sqrt(fan_in)
        return keras.initializers.VarianceScaling(1.0 / 3.0, "fan_in", "uniform")

    def dense_kernel(self) -> keras.initializers.Initializer:
        """Kernel ``[n_in, n_out]`` initialiser."""
        if self.scheme in ("vgg", "googlenet"):
            return keras.initializers.RandomNormal(0.0, 0.01)
        return keras.initializers.VarianceScaling(1.0 / 3.0, "fan_in", "uniform")

    def bias(self, fan_in: int, dense: bool = False) -> keras.initializers.Initializer:
        """Bias initialiser of a layer with ``fan_in`` inputs per output."""
        if self.scheme == "vgg" or (self.scheme == "googlenet" and not dense):
            return keras.initializers.Zeros()
        b = 1.0 / math.sqrt(fan_in)  # PyTorch default bias init (GoogLeNet's fc keeps it too)
        return keras.initializers.RandomUniform(-b, b)


# --- PyTorch-exact pooling layers --------------------------------------------------------------


class TorchMaxPool2D(keras.layers.Layer):
    """PyTorch ``MaxPool2d`` on NHWC: ``-inf`` padding ``((top, bottom), (left, right))``, then a
    ``"valid"`` max-pool. ``[B, H, W, C]`` -> ``[B, H', W', C]``."""

    def __init__(self, pool_size: int, strides: int, pads: tuple[tuple[int, int], tuple[int, int]],
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.pool_size, self.strides = pool_size, strides
        self.pads = tuple(tuple(int(v) for v in p) for p in pads)

    def call(self, x):  # noqa: D102
        (t, b), (l, r) = self.pads  # noqa: E741 - top, bottom, left, right
        if t or b or l or r:
            x = ops.pad(x, [[0, 0], [t, b], [l, r], [0, 0]], constant_values=float("-inf"))
        return ops.max_pool(x, self.pool_size, self.strides, padding="valid")


class AvgPool2DExcludePad(keras.layers.Layer):
    """PyTorch ``AvgPool2d(k, s, p, count_include_pad=False)`` on NHWC, for a static input size.

    Zero padding, a ``"valid"`` average over ``k*k`` pixels, then a constant per-position factor
    ``k*k / (pixels of the window inside the image)``. ``[B, H, W, C]`` -> ``[B, H', W', C]``.
    """

    def __init__(self, pool_size: int, strides: int, pads: tuple[tuple[int, int], tuple[int, int]],
                 in_hw: HW, out_hw: HW, **kwargs) -> None:
        super().__init__(**kwargs)
        self.pool_size, self.strides = pool_size, strides
        self.pads = tuple(tuple(int(v) for v in p) for p in pads)
        counts = [
            np.array([min(i * strides - p[0] + pool_size, n) - max(i * strides - p[0], 0)
                      for i in range(o)], dtype=np.float64)
            for n, o, p in zip(in_hw, out_hw, self.pads, strict=True)]
        factor = pool_size * pool_size / np.outer(counts[0], counts[1])
        self._factor = factor.astype(np.float32)[None, :, :, None]

    def call(self, x):  # noqa: D102
        (t, b), (l, r) = self.pads  # noqa: E741 - top, bottom, left, right
        if t or b or l or r:
            x = ops.pad(x, [[0, 0], [t, b], [l, r], [0, 0]])
        y = ops.average_pool(x, self.pool_size, self.strides, padding="valid")
        return y * ops.convert_to_tensor(self._factor, dtype=y.dtype)


def _adaptive_matrix(n_in: int, n_out: int) -> np.ndarray:
    """``[n_out, n_in]`` averaging matrix of PyTorch's adaptive pooling along one axis: output
    ``i`` averages inputs ``floor(i*n_in/n_out) .. ceil((i+1)*n_in/n_out) - 1``."""
    m = np.zeros((n_out, n_in), dtype=np.float32)
    for i in range(n_out):
        lo, hi = (i * n_in) // n_out, -(-((i + 1) * n_in) // n_out)
        m[i, lo:hi] = 1.0 / (hi - lo)
    return m


class AdaptiveAvgPool2D(keras.layers.Layer):
    """PyTorch ``AdaptiveAvgPool2d((a, a))`` on NHWC for a static input size, as two small
    matmuls with the per-axis averaging matrices (exact for any input size, also when the input
    is smaller than the output, e.g. 1x1 -> 6x6 replicates). ``[B, H, W, C]`` -> ``[B, a, a,
    C]``."""

    def __init__(self, out: int, in_hw: HW, **kwargs) -> None:
        super().__init__(**kwargs)
        self._mh = _adaptive_matrix(in_hw[0], out)
        self._mw = _adaptive_matrix(in_hw[1], out)

    def call(self, x):  # noqa: D102
        mh = ops.convert_to_tensor(self._mh, dtype=x.dtype)
        mw = ops.convert_to_tensor(self._mw, dtype=x.dtype)
        x = ops.einsum("oh,bhwc->bowc", mh, x)
        return ops.einsum("bowc,pw->bopc", x, mw)


class ShortcutA(keras.layers.Layer):
    """Option-A shortcut of a CIFAR ResNet (He et al. 2016 sec. 4.2): take every ``stride``-th
    pixel and zero-pad the channels ``(before, after)``; no parameters.
    ``[B, H, W, c_in]`` -> ``[B, H/stride, W/stride, c_in + before + after]``."""

    def __init__(self, stride: int, pad: tuple[int, int], **kwargs) -> None:
        super().__init__(**kwargs)
        self.stride, self.pad = stride, tuple(pad)

    def call(self, x):  # noqa: D102
        if self.stride != 1:
            x = x[:, :: self.stride, :: self.stride, :]
        if self.pad != (0, 0):
            x = ops.pad(x, [[0, 0], [0, 0], [0, 0], list(self.pad)])
        return x


# --- padding arithmetic -------------------------------------------------------------------------


def _tf_same_matches(n: int, k: int, s: int, p: int, out: int) -> bool:
    """True if TensorFlow ``"same"`` padding gives PyTorch's windows (pad ``p`` before, ``out``
    outputs) along an axis of length ``n``."""
    out_tf = -(-n // s)
    total = max((out_tf - 1) * s + k - n, 0)
    return out_tf == out and total // 2 == p


def _pads(hw: HW, out: HW, k: int, s: int, p: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """``((top, bottom), (left, right))`` so that a ``"valid"`` window of ``k``/``s`` over the
    padded input gives ``out`` (PyTorch pads ``p`` before; after, what the windows reach)."""
    return tuple((p, max(0, (o - 1) * s + k - n - p)) for n, o in zip(hw, out, strict=True))


def _native_padding(hw: HW, out: HW, k: int, s: int, p: int) -> str | None:
    """``"valid"`` or ``"same"`` if that Keras padding gives PyTorch's windows, else None."""
    if p == 0 and all(o == (n - k) // s + 1 for n, o in zip(hw, out, strict=True)):
        return "valid"
    if all(_tf_same_matches(n, k, s, p, o) for n, o in zip(hw, out, strict=True)):
        return "same"
    return None


# --- building blocks (functional API; each returns the new tensor and spatial size) -------------


def _conv(x, hw: HW, c_in: int, c_out: int, k: int, s: int, p: int, *, name: str, bias: bool,
          init: _Init, activation: str | None = None):
    """PyTorch ``Conv2d(c_in, c_out, k, stride=s, padding=p)`` (+ activation) on NHWC."""
    out = (layout.conv_out(hw[0], k, s, p), layout.conv_out(hw[1], k, s, p))
    padding = _native_padding(hw, out, k, s, p)
    if padding is None:
        x = keras.layers.ZeroPadding2D(p)(x)
        padding = "valid"
    x = keras.layers.Conv2D(
        c_out, k, strides=s, padding=padding, use_bias=bias, activation=activation,
        data_format="channels_last", kernel_initializer=init.conv_kernel(),
        bias_initializer=init.bias(c_in * k * k) if bias else "zeros", name=name)(x)
    return x, out


def _bn(x, name: str, eps: float = 1e-5):
    """PyTorch ``BatchNorm2d`` (momentum 0.1, ``eps``) over the channel axis of NHWC."""
    return keras.layers.BatchNormalization(axis=-1, momentum=0.9, epsilon=eps, name=name)(x)


def _relu(x):
    return keras.layers.ReLU()(x)


def _max_pool(x, hw: HW, k: int, s: int, p: int, ceil: bool = False):
    """PyTorch ``MaxPool2d(k, s, p, ceil_mode=ceil)`` on NHWC."""
    f = layout.pool_out_ceil if ceil else layout.conv_out
    out = (f(hw[0], k, s, p), f(hw[1], k, s, p))
    padding = _native_padding(hw, out, k, s, p)
    if padding is not None:
        x = keras.layers.MaxPooling2D(k, s, padding=padding, data_format="channels_last")(x)
    else:
        x = TorchMaxPool2D(k, s, _pads(hw, out, k, s, p))(x)
    return x, out


def _avg_pool_exclude_pad(x, hw: HW, k: int, s: int, p: int):
    """PyTorch ``AvgPool2d(k, s, p, count_include_pad=False)`` on NHWC."""
    out = (layout.conv_out(hw[0], k, s, p), layout.conv_out(hw[1], k, s, p))
    if p == 0:
        return keras.layers.AveragePooling2D(k, s, padding="valid")(x), out
    return AvgPool2DExcludePad(k, s, _pads(hw, out, k, s, p), hw, out)(x), out


def _adaptive_avg_pool(x, hw: HW, a: int):
    """PyTorch ``AdaptiveAvgPool2d((a, a))`` on NHWC: identity, an even pool, or the exact
    matrix form."""
    if hw == (a, a):
        return x, (a, a)
    if hw[0] % a == 0 and hw[1] % a == 0:
        return keras.layers.AveragePooling2D((hw[0] // a, hw[1] // a))(x), (a, a)
    return AdaptiveAvgPool2D(a, hw)(x), (a, a)


def _dense(x, n_in: int, n_out: int, *, name: str, init: _Init, activation: str | None = None):
    """PyTorch ``Linear(n_in, n_out)`` (+ activation)."""
    return keras.layers.Dense(n_out, activation=activation, name=name,
                              kernel_initializer=init.dense_kernel(),
                              bias_initializer=init.bias(n_in, dense=True))(x)


class _Seq:
    """Index counter of a PyTorch ``nn.Sequential`` being mirrored (for module names)."""

    def __init__(self, prefix: str) -> None:
        self.prefix, self.i = prefix, -1

    def next(self) -> str:
        """Name of the next module, e.g. ``features.3``."""
        self.i += 1
        return f"{self.prefix}.{self.i}"

    def skip(self, n: int = 1) -> None:
        """Count ``n`` modules without parameters (ReLU, pools)."""
        self.i += n


# --- architectures ------------------------------------------------------------------------------


def _alexnet(x, hw, c_in, h, num_classes, flat):
    init, seq = _Init(), _Seq("features")
    for c_out, (k, s, p, pool) in zip(h["channels"], layout.ALEXNET_CONVS, strict=True):
        x, hw = _conv(x, hw, c_in, c_out, k, s, p, name=seq.next(), bias=True, init=init,
                      activation="relu")
        seq.skip()  # ReLU
        if pool:
            x, hw = _max_pool(x, hw, *layout.ALEXNET_POOL)
            seq.skip()
        c_in = c_out
    a = h["avgpool"]
    x, hw = _adaptive_avg_pool(x, hw, a)
    x = keras.layers.Flatten()(x)
    flat["classifier.1"] = (a, a, c_in)
    x = keras.layers.Dropout(h["dropout"])(x)
    x = _dense(x, c_in * a * a, h["fc"], name="classifier.1", init=init, activation="relu")
    x = keras.layers.Dropout(h["dropout"])(x)
    x = _dense(x, h["fc"], h["fc"], name="classifier.4", init=init, activation="relu")
    return _dense(x, h["fc"], num_classes, name="classifier.6", init=init)


def _alexnet_cifar(x, hw, c_in, h, num_classes, flat):
    init, seq = _Init(), _Seq("features")
    k, s, p = layout.CIFAR_CONV
    for i, (c_out, kind) in enumerate(zip(h["channels"], h["pools"], strict=True)):
        first = i == 0
        x, hw = _conv(x, hw, c_in, c_out, k, s, p, name=seq.next(), bias=True, init=init,
                      activation=None if first else "relu")
        if kind == "max":
            x, hw = _max_pool(x, hw, *layout.CIFAR_POOL)
        elif kind == "avg":
            x, hw = _avg_pool_exclude_pad(x, hw, *layout.CIFAR_POOL)
        else:
            raise ValueError(f"unknown pool type {kind!r} (valid: max, avg)")
        if first:  # conv -> pool -> ReLU in the first block (torch_impl)
            x = _relu(x)
        seq.skip(2)
        c_in = c_out
    x = keras.layers.Flatten()(x)
    flat["fc"] = (hw[0], hw[1], c_in)
    return _dense(x, c_in * hw[0] * hw[1], num_classes, name="fc", init=init)


def _vgg(x, hw, c_in, h, num_classes, flat):
    init, seq = _Init("vgg"), _Seq("features")
    k, s, p = layout.VGG_CONV
    for block in h["blocks"]:
        for c_out in block:
            x, hw = _conv(x, hw, c_in, c_out, k, s, p, name=seq.next(), bias=True, init=init,
                          activation="relu")
            seq.skip()
            c_in = c_out
        x, hw = _max_pool(x, hw, *layout.VGG_POOL)
        seq.skip()
    a = h["avgpool"]
    x, hw = _adaptive_avg_pool(x, hw, a)
    x = keras.layers.Flatten()(x)
    flat["classifier.0"] = (a, a, c_in)
    x = _dense(x, c_in * a * a, h["fc"], name="classifier.0", init=init, activation="relu")
    x = keras.layers.Dropout(h["dropout"])(x)
    x = _dense(x, h["fc"], h["fc"], name="classifier.3", init=init, activation="relu")
    x = keras.layers.Dropout(h["dropout"])(x)
    return _dense(x, h["fc"], num_classes, name="classifier.6", init=init)


def _basic_conv(x, hw, c_in, c_out, k, s, p, name, init):
    """torchvision GoogLeNet ``BasicConv2d``: bias-free conv, BN (eps 1e-3), ReLU."""
    x, hw = _conv(x, hw, c_in, c_out, k, s, p, name=f"{name}.conv", bias=False, init=init)
    return _relu(_bn(x, f"{name}.bn", layout.GOOGLENET_BN_EPS)), hw


def _inception(x, hw, c_in, row, name, init):
    c1, c3r, c3, c5r, c5, pp = row
    b1, _ = _basic_conv(x, hw, c_in, c1, 1, 1, 0, f"{name}.branch1", init)
    b2, _ = _basic_conv(x, hw, c_in, c3r, 1, 1, 0, f"{name}.branch2.0", init)
    b2, _ = _basic_conv(b2, hw, c3r, c3, 3, 1, 1, f"{name}.branch2.1", init)
    b3, _ = _basic_conv(x, hw, c_in, c5r, 1, 1, 0, f"{name}.branch3.0", init)
    b3, _ = _basic_conv(b3, hw, c5r, c5, 3, 1, 1, f"{name}.branch3.1", init)  # the "5x5" is 3x3
    b4, _ = _max_pool(x, hw, 3, 1, 1, ceil=True)
    b4, _ = _basic_conv(b4, hw, c_in, pp, 1, 1, 0, f"{name}.branch4.1", init)
    return keras.layers.Concatenate(axis=-1)([b1, b2, b3, b4])


def _googlenet(x, hw, c_in, h, num_classes, flat):
    init = _Init("googlenet")
    for i, (c_out, (k, s, p)) in enumerate(zip(h["stem"], layout.GOOGLENET_STEM, strict=True)):
        x, hw = _basic_conv(x, hw, c_in, c_out, k, s, p, f"conv{i + 1}", init)
        c_in = c_out
        if i in layout.GOOGLENET_STEM_POOLS:
            x, hw = _max_pool(x, hw, *layout.GOOGLENET_STEM_POOLS[i], ceil=True)
    rows = iter(h["inception"])
    for stage, n in enumerate(layout.GOOGLENET_STAGES):
        for j in range(n):
            row = next(rows)
            x = _inception(x, hw, c_in, row, f"inception{stage + 3}{'abcde'[j]}", init)
            c_in = layout.inception_out(row)
        if stage < len(layout.GOOGLENET_STAGE_POOLS):
            x, hw = _max_pool(x, hw, *layout.GOOGLENET_STAGE_POOLS[stage], ceil=True)
    x = keras.layers.GlobalAveragePooling2D()(x)
    x = keras.layers.Dropout(h["dropout"])(x)
    return _dense(x, c_in, num_classes, name="fc", init=init)


def _bottleneck(x, hw, c_in, width, c_out, stride, name, init):
    """torchvision ``Bottleneck`` v1.5 (stride in the 3x3 conv), NHWC."""
    identity = x
    if stride != 1 or c_in != c_out:
        identity, _ = _conv(x, hw, c_in, c_out, 1, stride, 0, name=f"{name}.downsample.0",
                            bias=False, init=init)
        identity = _bn(identity, f"{name}.downsample.1")
    y, _ = _conv(x, hw, c_in, width, 1, 1, 0, name=f"{name}.conv1", bias=False, init=init)
    y = _relu(_bn(y, f"{name}.bn1"))
    y, hw = _conv(y, hw, width, width, 3, stride, 1, name=f"{name}.conv2", bias=False, init=init)
    y = _relu(_bn(y, f"{name}.bn2"))
    y, _ = _conv(y, hw, width, c_out, 1, 1, 0, name=f"{name}.conv3", bias=False, init=init)
    y = _bn(y, f"{name}.bn3")
    return _relu(keras.layers.Add()([y, identity])), hw


def _resnet_bottleneck(x, hw, c_in, h, num_classes, flat):
    init = _Init()
    k, s, p = layout.RESNET_STEM_CONV
    x, hw = _conv(x, hw, c_in, h["stem"], k, s, p, name="conv1", bias=False, init=init)
    x = _relu(_bn(x, "bn1"))
    x, hw = _max_pool(x, hw, *layout.RESNET_STEM_POOL)
    c_in = h["stem"]
    for i, (width, n) in enumerate(zip(h["widths"], h["blocks"], strict=True)):
        c_out = width * h["expansion"]
        for b in range(n):
            x, hw = _bottleneck(x, hw, c_in, width, c_out, 2 if i > 0 and b == 0 else 1,
                                f"layer{i + 1}.{b}", init)
            c_in = c_out
    x = keras.layers.GlobalAveragePooling2D()(x)
    return _dense(x, c_in, num_classes, name="fc", init=init)


def _basic_block_a(x, hw, c_in, c_out, stride, name, init):
    """CIFAR ResNet basic block with an option-A shortcut, NHWC."""
    y, out = _conv(x, hw, c_in, c_out, 3, stride, 1, name=f"{name}.conv1", bias=False, init=init)
    y = _relu(_bn(y, f"{name}.bn1"))
    y, _ = _conv(y, out, c_out, c_out, 3, 1, 1, name=f"{name}.conv2", bias=False, init=init)
    y = _bn(y, f"{name}.bn2")
    extra = c_out - c_in
    shortcut = x
    if stride != 1 or extra:
        shortcut = ShortcutA(stride, (extra // 2, extra - extra // 2))(x)
    return _relu(keras.layers.Add()([y, shortcut])), out


def _resnet_cifar(x, hw, c_in, h, num_classes, flat):
    init = _Init()
    channels = h["channels"]
    x, hw = _conv(x, hw, c_in, channels[0], 3, 1, 1, name="conv1", bias=False, init=init)
    x = _relu(_bn(x, "bn1"))
    c_in, j = channels[0], 0
    for i, (c_out, n) in enumerate(zip(channels, h["blocks"], strict=True)):
        for b in range(n):
            x, hw = _basic_block_a(x, hw, c_in, c_out, 2 if i > 0 and b == 0 else 1,
                                   f"layers.{j}", init)
            c_in, j = c_out, j + 1
    x = keras.layers.GlobalAveragePooling2D()(x)
    return _dense(x, c_in, num_classes, name="fc", init=init)


#: layout (``spec.hyper["arch"]``) -> builder.
ARCHS = {
    "alexnet": _alexnet,
    "alexnet_cifar": _alexnet_cifar,
    "vgg": _vgg,
    "googlenet": _googlenet,
    "resnet_bottleneck": _resnet_bottleneck,
    "resnet_cifar": _resnet_cifar,
}


def build(spec: ModelSpec) -> keras.Model:
    """Build the CNN of ``spec`` (family ``cnn``; layout ``spec.hyper["arch"]``) in Keras.

    The model maps ``[B, H, W, C]`` float32 (NHWC; ``spec.input_shape`` is ``(C, H, W)``) to
    ``[B, num_classes]`` logits in the compute dtype of the global Keras policy. Its attribute
    ``torch_flatten_hwc`` maps the name of each ``Dense`` fed by a flattened feature map to that
    map's ``(H, W, C)`` (see the module docstring). Trainable parameters == ``spec.params``.

    Raises:
        ValueError: not a CNN.
        NotImplementedError: a layout this module does not implement.
    """
    if spec.family != "cnn":
        raise ValueError(f"{spec.name} is a {spec.family} model, not a cnn")
    arch = spec.hyper["arch"]
    if arch not in ARCHS:
        raise NotImplementedError(f"{spec.name}: no Keras implementation of cnn layout "
                                  f"{arch!r} (implemented: {', '.join(ARCHS)})")
    c, height, width = spec.input_shape
    inputs = keras.Input(shape=(height, width, c), dtype="float32", name="x")
    flat: dict[str, tuple[int, int, int]] = {}
    out = ARCHS[arch](inputs, (height, width), c, spec.hyper, spec.num_classes, flat)
    model = keras.Model(inputs, out, name=spec.name)
    model.torch_flatten_hwc = dict(flat)
    return model
