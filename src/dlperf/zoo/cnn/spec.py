"""Specs of the convolutional networks: alexnet, alexnet_cifar, vgg16, googlenet, resnet50,
resnet56 (+ tiny).

Each architecture is one ``hyper["arch"]`` layout with its sizes in ``hyper``; the layout
constants below (kernel sizes, strides, paddings) are shared with the implementations, which
read everything else from ``hyper``. A tiny variant is the same layout with smaller numbers.

* ``alexnet``: torchvision's AlexNet (Krizhevsky 2014, "One weird trick for parallelizing
  convolutional neural networks", arXiv:1404.5997; ``torchvision.models.alexnet``): conv
  64-192-384-256-256, AdaptiveAvgPool 6x6, FC 4096-4096-1000 with dropout, no LRN.
  docs/zoo.md: 61,100,840 parameters.
* ``alexnet_cifar``: cuda-convnet ``layers-18pct.cfg`` (Krizhevsky), as used by DLBench
  (Shi et al. 2016, AlexNet-R): conv5x5x32, max-pool, relu, conv5x5x32, relu, avg-pool,
  conv5x5x64, relu, avg-pool, FC 1024 -> 10. Pools are 3x3 stride 2 pad 1 (32->16->8->4); the
  pool types (max, avg, avg) are those of layers-18pct and of Caffe's ``cifar10_full``, which
  is the same net; the local response normalisation layers of the original are omitted
  (no parameters, no counted FLOPs).
* ``vgg16``: VGG-16, configuration D of Simonyan & Zisserman 2015 ("Very Deep Convolutional
  Networks for Large-Scale Image Recognition", table 1), without batch norm, torchvision layout
  (``torchvision.models.vgg16``): 13 conv3x3 pad 1 with bias + ReLU in 5 blocks
  (64x2, 128x2, 256x3, 512x3, 512x3), a 2x2 stride-2 max-pool after each block,
  AdaptiveAvgPool 7x7, FC 4096-4096-1000 (ReLU, dropout 0.5 after the first two).
  docs/zoo.md: 138,357,544 parameters.
* ``googlenet``: Inception v1 (Szegedy et al. 2015, "Going Deeper with Convolutions", table 1)
  with batch norm and without the auxiliary classifiers, torchvision layout
  (``torchvision.models.googlenet(aux_logits=False, transform_input=False)``): every conv is
  ``BasicConv2d`` = bias-free conv + BN(eps 0.001) + ReLU; stem conv7x7/2 (64), max-pool
  3x3/2, conv1x1 (64), conv3x3 (192), max-pool 3x3/2; inception 3a, 3b, max-pool 3x3/2,
  4a-4e, max-pool 2x2/2, 5a, 5b (all max-pools with ``ceil_mode=True``); global average
  pool, dropout 0.2, FC 1024 -> 1000. An inception block has four branches concatenated:
  1x1; 1x1 -> 3x3; 1x1 -> "5x5"; max-pool 3x3/1 pad 1 -> 1x1. torchvision's "5x5" branch is
  a 3x3 conv (a known quirk kept for weight compatibility, torchvision issue #906), and the
  docs/zoo.md count 6,624,904 is that of this layout, so the 3x3 is kept here too.
* ``resnet50``: ResNet-50 v1.5 (He et al. 2016, "Deep Residual Learning", table 1; v1.5 =
  stride 2 in the 3x3 conv of the bottleneck, as in torchvision and NVIDIA's DeepLearning
  Examples), torchvision layout: bias-free convs, BN with affine weight and bias, 1x1
  projection shortcut + BN on the first block of each stage. docs/zoo.md: 25,557,032 parameters.
* ``resnet56``: CIFAR ResNet (He et al. 2016 sec. 4.2): conv3x3x16, 3 stages x n basic blocks
  with 16/32/64 channels (n = 9 for 56 = 6n + 2 layers), option-A shortcuts (identity;
  on a stride-2 stage change: subsample by 2 and zero-pad the new channels: no parameters),
  BN, global average pool, FC 64 -> 10.

FLOPs follow zoo/spec.py: only convolutions and linear layers, 2 FLOPs per multiply-add,
forward of one sample: a k x k conv from ``c_in`` to ``c_out`` channels producing an
``h x w`` map costs ``2 * c_in * k * k * c_out * h * w`` (bias, BN, ReLU, pooling, residual
adds not counted); ``Linear(n_in, n_out)`` costs ``2 * n_in * n_out``.
"""

from __future__ import annotations

from collections.abc import Sequence

from dlperf.zoo.spec import ModelSpec, OptimizerSpec

# --- layout constants shared with the implementations ----------------------------------------

#: torchvision AlexNet ``features``: (kernel, stride, padding, max-pool 3x3/2 after it) per conv.
ALEXNET_CONVS: tuple[tuple[int, int, int, bool], ...] = (
    (11, 4, 2, True),
    (5, 1, 2, True),
    (3, 1, 1, False),
    (3, 1, 1, False),
    (3, 1, 1, True),
)
ALEXNET_POOL = (3, 2, 0)  # MaxPool2d(kernel_size=3, stride=2), no padding

#: cuda-convnet layers-18pct: every conv 5x5 pad 2 stride 1, every pool 3x3 stride 2 pad 1.
CIFAR_CONV = (5, 1, 2)
CIFAR_POOL = (3, 2, 1)

#: ResNet ImageNet stem: conv 7x7 stride 2 pad 3, then max-pool 3x3 stride 2 pad 1.
RESNET_STEM_CONV = (7, 2, 3)
RESNET_STEM_POOL = (3, 2, 1)

#: VGG: every conv 3x3 stride 1 pad 1 (keeps the size), a 2x2 stride-2 max-pool after each block.
VGG_CONV = (3, 1, 1)
VGG_POOL = (2, 2, 0)

#: GoogLeNet (torchvision): stem convs (kernel, stride, padding) for the three ``stem`` widths.
GOOGLENET_STEM: tuple[tuple[int, int, int], ...] = ((7, 2, 3), (1, 1, 0), (3, 1, 1))
#: max-pools (kernel, stride, padding), all ``ceil_mode=True``: after stem conv 1 and 3.
GOOGLENET_STEM_POOLS = {0: (3, 2, 0), 2: (3, 2, 0)}
#: inception blocks per stage (3a-3b, 4a-4e, 5a-5b) and the ceil-mode max-pool after each
#: stage but the last (maxpool3 3x3/2, maxpool4 2x2/2).
GOOGLENET_STAGES = (2, 5, 2)
GOOGLENET_STAGE_POOLS = ((3, 2, 0), (2, 2, 0))
#: BatchNorm epsilon of torchvision's BasicConv2d (implementations must use it).
GOOGLENET_BN_EPS = 1e-3

_FLOPS_SOURCE = ("dlperf FLOP convention (zoo/spec.py): conv = 2*c_in*k*k*c_out*h_out*w_out, "
                 "linear = 2*n_in*n_out per sample; bias, BN, ReLU, pooling and residual adds "
                 "not counted; counted layer by layer in dlperf.zoo.cnn.spec")


def conv_out(size: int, kernel: int, stride: int = 1, pad: int = 0) -> int:
    """Output length of a conv or pool along one spatial axis (PyTorch floor rule)."""
    return (size + 2 * pad - kernel) // stride + 1


class _Tally:
    """Accumulates parameters and forward FLOPs (per sample) layer by layer."""

    def __init__(self) -> None:
        self.params = 0
        self.flops = 0

    def conv(self, c_in: int, c_out: int, k: int, hw_out: tuple[int, int], bias: bool) -> None:
        """A ``k x k`` conv, weight ``[c_out, c_in, k, k]`` (+ bias), output ``hw_out``."""
        self.params += c_out * c_in * k * k + (c_out if bias else 0)
        self.flops += 2 * c_in * k * k * c_out * hw_out[0] * hw_out[1]

    def bn(self, c: int) -> None:
        """BatchNorm2d with affine weight and bias (running stats are buffers, not params)."""
        self.params += 2 * c

    def linear(self, n_in: int, n_out: int) -> None:
        """``Linear(n_in, n_out)`` with bias."""
        self.params += n_out * n_in + n_out
        self.flops += 2 * n_in * n_out


def pool_out_ceil(size: int, kernel: int, stride: int, pad: int = 0) -> int:
    """Output length of a ``ceil_mode=True`` pool along one axis (PyTorch rule: round up, but
    the last window must start inside the input or its left padding)."""
    out = -(-(size + 2 * pad - kernel) // stride) + 1
    if (out - 1) * stride >= size + pad:
        out -= 1
    return out


def _hw(hw: tuple[int, int], kernel: int, stride: int, pad: int) -> tuple[int, int]:
    return conv_out(hw[0], kernel, stride, pad), conv_out(hw[1], kernel, stride, pad)


def _hw_ceil(hw: tuple[int, int], kernel: int, stride: int, pad: int) -> tuple[int, int]:
    return pool_out_ceil(hw[0], kernel, stride, pad), pool_out_ceil(hw[1], kernel, stride, pad)


def alexnet_counts(hyper: dict, input_shape: Sequence[int], num_classes: int) -> tuple[int, int]:
    """(parameters, forward FLOPs per sample) of torchvision's AlexNet layout.

    ``hyper``: ``channels`` (5 conv widths), ``fc`` (hidden FC width), ``avgpool`` (side of
    the AdaptiveAvgPool output). ``input_shape`` is ``(C, H, W)``. Source: torchvision
    ``models/alexnet.py`` (convs with bias, ReLU, 3x3/2 max-pools after conv 1, 2 and 5,
    AdaptiveAvgPool2d((6, 6)), Dropout-Linear-ReLU-Dropout-Linear-ReLU-Linear).
    """
    t = _Tally()
    c_in, hw = input_shape[0], (input_shape[1], input_shape[2])
    for c_out, (k, s, p, pool) in zip(hyper["channels"], ALEXNET_CONVS, strict=True):
        hw = _hw(hw, k, s, p)
        t.conv(c_in, c_out, k, hw, bias=True)
        if pool:
            hw = _hw(hw, *ALEXNET_POOL)
        c_in = c_out
    a = hyper["avgpool"]  # AdaptiveAvgPool2d((a, a)): output a x a whatever the input size
    t.linear(c_in * a * a, hyper["fc"])  # classifier[1]
    t.linear(hyper["fc"], hyper["fc"])  # classifier[4]
    t.linear(hyper["fc"], num_classes)  # classifier[6]
    return t.params, t.flops


def alexnet_cifar_counts(hyper: dict, input_shape: Sequence[int],
                         num_classes: int) -> tuple[int, int]:
    """(parameters, forward FLOPs per sample) of the cuda-convnet layers-18pct CIFAR net.

    ``hyper``: ``channels`` (3 conv widths), ``pools`` (3 pool types). Each conv is 5x5 pad 2
    with bias and keeps the spatial size; each pool is 3x3 stride 2 pad 1 (32 -> 16 -> 8 -> 4);
    the FC maps ``channels[-1] * 4 * 4`` (1024) features to ``num_classes`` with bias.
    """
    t = _Tally()
    c_in, hw = input_shape[0], (input_shape[1], input_shape[2])
    k, s, p = CIFAR_CONV
    for c_out in hyper["channels"]:
        hw = _hw(hw, k, s, p)
        t.conv(c_in, c_out, k, hw, bias=True)
        hw = _hw(hw, *CIFAR_POOL)
        c_in = c_out
    t.linear(c_in * hw[0] * hw[1], num_classes)
    return t.params, t.flops


def resnet_bottleneck_counts(hyper: dict, input_shape: Sequence[int],
                             num_classes: int) -> tuple[int, int]:
    """(parameters, forward FLOPs per sample) of an ImageNet bottleneck ResNet (v1.5).

    ``hyper``: ``stem`` (stem channels), ``widths`` (bottleneck width per stage), ``blocks``
    (blocks per stage), ``expansion`` (output = width * expansion). Source: He et al. 2016
    table 1 and torchvision ``models/resnet.py`` (``Bottleneck``: conv1x1, conv3x3 with the
    stage's stride, conv1x1, each bias-free and followed by BN; a conv1x1 + BN projection
    shortcut on a block whose stride or channel count changes; global average pool; FC).
    """
    t = _Tally()
    c_in, hw = input_shape[0], (input_shape[1], input_shape[2])
    k, s, p = RESNET_STEM_CONV
    hw = _hw(hw, k, s, p)
    t.conv(c_in, hyper["stem"], k, hw, bias=False)  # conv1
    t.bn(hyper["stem"])  # bn1
    hw = _hw(hw, *RESNET_STEM_POOL)  # maxpool
    c_in = hyper["stem"]
    for stage, (width, n_blocks) in enumerate(zip(hyper["widths"], hyper["blocks"],
                                                  strict=True)):
        c_out = width * hyper["expansion"]
        for b in range(n_blocks):
            stride = 2 if stage > 0 and b == 0 else 1
            t.conv(c_in, width, 1, hw, bias=False)  # conv1 1x1 at the input resolution
            t.bn(width)
            hw_out = _hw(hw, 3, stride, 1)
            t.conv(width, width, 3, hw_out, bias=False)  # conv2 3x3, stride here (v1.5)
            t.bn(width)
            t.conv(width, c_out, 1, hw_out, bias=False)  # conv3 1x1
            t.bn(c_out)
            if stride != 1 or c_in != c_out:
                t.conv(c_in, c_out, 1, hw_out, bias=False)  # downsample conv1x1, stride
                t.bn(c_out)
            c_in, hw = c_out, hw_out
    t.linear(c_in, num_classes)  # fc after global average pooling
    return t.params, t.flops


def resnet_cifar_counts(hyper: dict, input_shape: Sequence[int],
                        num_classes: int) -> tuple[int, int]:
    """(parameters, forward FLOPs per sample) of a CIFAR ResNet with option-A shortcuts.

    ``hyper``: ``channels`` (per stage), ``blocks`` (basic blocks per stage). Source: He et
    al. 2016 sec. 4.2: conv3x3 stem to ``channels[0]``; per stage ``n`` basic blocks
    (conv3x3-BN-ReLU-conv3x3-BN + shortcut, ReLU), stride 2 in the first conv of stages 2 and
    3; option-A shortcuts are parameter- and FLOP-free; global average pool; FC with bias.
    Convs are bias-free (each is followed by BN with affine weight and bias).
    """
    t = _Tally()
    c_in, hw = input_shape[0], (input_shape[1], input_shape[2])
    c0 = hyper["channels"][0]
    t.conv(c_in, c0, 3, hw, bias=False)  # stem conv3x3 pad 1 keeps the size
    t.bn(c0)
    c_in = c0
    for stage, (c_out, n_blocks) in enumerate(zip(hyper["channels"], hyper["blocks"],
                                                  strict=True)):
        for b in range(n_blocks):
            stride = 2 if stage > 0 and b == 0 else 1
            hw = _hw(hw, 3, stride, 1)
            t.conv(c_in, c_out, 3, hw, bias=False)  # conv1 (stride)
            t.bn(c_out)
            t.conv(c_out, c_out, 3, hw, bias=False)  # conv2
            t.bn(c_out)
            c_in = c_out
    t.linear(c_in, num_classes)  # fc after global average pooling
    return t.params, t.flops


def vgg_counts(hyper: dict, input_shape: Sequence[int], num_classes: int) -> tuple[int, int]:
    """(parameters, forward FLOPs per sample) of torchvision's VGG layout without BN.

    ``hyper``: ``blocks`` (conv widths per block; VGG-16 D: (64, 64), (128, 128),
    (256, 256, 256), (512, 512, 512), (512, 512, 512)), ``fc`` (hidden FC width), ``avgpool``
    (side of the AdaptiveAvgPool output), ``dropout``. Convs 3x3 pad 1 with bias keep the size;
    a 2x2/2 max-pool ends each block; FC ``c*a*a -> fc -> fc -> num_classes`` with bias.
    """
    t = _Tally()
    c_in, hw = input_shape[0], (input_shape[1], input_shape[2])
    k, s, p = VGG_CONV
    for block in hyper["blocks"]:
        for c_out in block:
            hw = _hw(hw, k, s, p)
            t.conv(c_in, c_out, k, hw, bias=True)
            c_in = c_out
        hw = _hw(hw, *VGG_POOL)
    a = hyper["avgpool"]
    t.linear(c_in * a * a, hyper["fc"])  # classifier[0]
    t.linear(hyper["fc"], hyper["fc"])  # classifier[3]
    t.linear(hyper["fc"], num_classes)  # classifier[6]
    return t.params, t.flops


def inception_out(row: Sequence[int]) -> int:
    """Output channels of an inception block ``(ch1x1, ch3x3red, ch3x3, ch5x5red, ch5x5,
    pool_proj)``: the four branches are concatenated."""
    return row[0] + row[2] + row[4] + row[5]


def googlenet_counts(hyper: dict, input_shape: Sequence[int],
                     num_classes: int) -> tuple[int, int]:
    """(parameters, forward FLOPs per sample) of torchvision's GoogLeNet (BN, no aux heads).

    ``hyper``: ``stem`` (three stem conv widths), ``inception`` (one row ``(ch1x1, ch3x3red,
    ch3x3, ch5x5red, ch5x5, pool_proj)`` per block, 3a..5b; Szegedy et al. 2015 table 1),
    ``dropout``. Each conv is bias-free + BN (2 parameters per channel); the "5x5" branch is a
    3x3 conv (torchvision layout); the pool branch's max-pool keeps the size. Pools round up
    (``ceil_mode``): 224 -> 112 -> 56 -> 28 -> 14 -> 7.
    """
    t = _Tally()
    c_in, hw = input_shape[0], (input_shape[1], input_shape[2])

    def basic(c_in: int, c_out: int, k: int, hw_out: tuple[int, int]) -> None:
        t.conv(c_in, c_out, k, hw_out, bias=False)
        t.bn(c_out)

    for i, (c_out, (k, s, p)) in enumerate(zip(hyper["stem"], GOOGLENET_STEM, strict=True)):
        hw = _hw(hw, k, s, p)
        basic(c_in, c_out, k, hw)
        c_in = c_out
        if i in GOOGLENET_STEM_POOLS:
            hw = _hw_ceil(hw, *GOOGLENET_STEM_POOLS[i])
    rows = iter(hyper["inception"])
    for stage, n_blocks in enumerate(GOOGLENET_STAGES):
        for _ in range(n_blocks):
            c1, c3r, c3, c5r, c5, pp = next(rows)
            basic(c_in, c1, 1, hw)  # branch1
            basic(c_in, c3r, 1, hw)  # branch2: 1x1 reduce, 3x3
            basic(c3r, c3, 3, hw)
            basic(c_in, c5r, 1, hw)  # branch3: 1x1 reduce, 3x3 (torchvision's "5x5")
            basic(c5r, c5, 3, hw)
            basic(c_in, pp, 1, hw)  # branch4: max-pool 3x3/1 pad 1, 1x1 projection
            c_in = c1 + c3 + c5 + pp
        if stage < len(GOOGLENET_STAGE_POOLS):
            hw = _hw_ceil(hw, *GOOGLENET_STAGE_POOLS[stage])
    if next(rows, None) is not None:
        raise ValueError(f"googlenet needs {sum(GOOGLENET_STAGES)} inception rows")
    t.linear(c_in, num_classes)  # fc after global average pooling and dropout
    return t.params, t.flops


COUNTS = {
    "alexnet": alexnet_counts,
    "alexnet_cifar": alexnet_cifar_counts,
    "vgg": vgg_counts,
    "googlenet": googlenet_counts,
    "resnet_bottleneck": resnet_bottleneck_counts,
    "resnet_cifar": resnet_cifar_counts,
}


def cnn_spec(name: str, arch: str, hyper: dict, input_shape: tuple[int, int, int],
             num_classes: int, source: str, *, tiny_of: str | None = None,
             real_data: tuple[str, ...] = ()) -> ModelSpec:
    """Build the :class:`ModelSpec` of a CNN of layout ``arch`` (a key of :data:`COUNTS`).

    ``input_shape`` is ``(C, H, W)`` of a float image; ``params`` and
    ``forward_flops_per_sample`` come from the layout's analytic counting function.
    Optimizer: SGD, momentum 0.9, lr 0.01 (docs/zoo.md default).
    """
    hyper = {"arch": arch, **hyper}
    params, flops = COUNTS[arch](hyper, input_shape, num_classes)
    return ModelSpec(
        name=name,
        family="cnn",
        input_kind="image",
        input_shape=tuple(input_shape),
        num_classes=num_classes,
        params=params,
        forward_flops_per_sample=flops,
        source=source,
        flops_source=_FLOPS_SOURCE,
        optimizer=OptimizerSpec(name="sgd", lr=0.01, momentum=0.9),
        tiny_of=tiny_of,
        real_data=real_data,
        hyper=hyper,
    )


_ALEXNET_SRC = ("Krizhevsky 2014 'One weird trick' (arXiv:1404.5997), torchvision AlexNet layout,"
                " no LRN")
_CIFAR_SRC = ("cuda-convnet layers-18pct (Krizhevsky), Shi et al. 2016 AlexNet-R; "
              "LRN omitted")
_VGG_SRC = ("Simonyan & Zisserman 2015, VGG-16 configuration D, no BN (torchvision vgg16 "
            "layout)")
_GOOGLENET_SRC = ("Szegedy et al. 2015, Inception v1 with BN, no auxiliary heads (torchvision "
                  "googlenet layout)")
_R50_SRC = "He et al. 2016, ResNet-50 v1.5 (NVIDIA; torchvision layout)"
_R56_SRC = "He et al. 2016 sec. 4.2, CIFAR ResNet-56 (option A); Shi et al. 2016"

SPECS: dict[str, ModelSpec] = {
    s.name: s
    for s in (
        cnn_spec("alexnet", "alexnet",
                 {"channels": (64, 192, 384, 256, 256), "fc": 4096, "avgpool": 6,
                  "dropout": 0.5},
                 (3, 224, 224), 1000, _ALEXNET_SRC, real_data=("imagefolder",)),
        cnn_spec("alexnet_cifar", "alexnet_cifar",
                 {"channels": (32, 32, 64), "pools": ("max", "avg", "avg")},
                 (3, 32, 32), 10, _CIFAR_SRC, real_data=("cifar10",)),
        cnn_spec("vgg16", "vgg",
                 {"blocks": ((64, 64), (128, 128), (256, 256, 256), (512, 512, 512),
                             (512, 512, 512)), "fc": 4096, "avgpool": 7, "dropout": 0.5},
                 (3, 224, 224), 1000, _VGG_SRC, real_data=("imagefolder",)),
        cnn_spec("googlenet", "googlenet",
                 {"stem": (64, 64, 192),
                  "inception": ((64, 96, 128, 16, 32, 32),  # 3a
                                (128, 128, 192, 32, 96, 64),  # 3b
                                (192, 96, 208, 16, 48, 64),  # 4a
                                (160, 112, 224, 24, 64, 64),  # 4b
                                (128, 128, 256, 24, 64, 64),  # 4c
                                (112, 144, 288, 32, 64, 64),  # 4d
                                (256, 160, 320, 32, 128, 128),  # 4e
                                (256, 160, 320, 32, 128, 128),  # 5a
                                (384, 192, 384, 48, 128, 128)),  # 5b
                  "dropout": 0.2},
                 (3, 224, 224), 1000, _GOOGLENET_SRC, real_data=("imagefolder",)),
        cnn_spec("resnet50", "resnet_bottleneck",
                 {"stem": 64, "widths": (64, 128, 256, 512), "blocks": (3, 4, 6, 3),
                  "expansion": 4},
                 (3, 224, 224), 1000, _R50_SRC, real_data=("imagefolder",)),
        cnn_spec("resnet56", "resnet_cifar",
                 {"channels": (16, 32, 64), "blocks": (9, 9, 9)},
                 (3, 32, 32), 10, _R56_SRC, real_data=("cifar10",)),
        # Tiny CPU-test variants: same layouts, small widths (and fewer blocks).
        cnn_spec("alexnet_tiny", "alexnet",
                 {"channels": (16, 48, 64, 64, 32), "fc": 128, "avgpool": 6, "dropout": 0.5},
                 (3, 64, 64), 10, f"tiny variant of alexnet ({_ALEXNET_SRC})",
                 tiny_of="alexnet", real_data=("imagefolder",)),
        cnn_spec("alexnet_cifar_tiny", "alexnet_cifar",
                 {"channels": (8, 16, 32), "pools": ("max", "avg", "avg")},
                 (3, 32, 32), 10, f"tiny variant of alexnet_cifar ({_CIFAR_SRC})",
                 tiny_of="alexnet_cifar", real_data=("cifar10",)),
        cnn_spec("vgg16_tiny", "vgg",
                 {"blocks": ((8,), (16,), (32, 32), (32, 32), (32, 32)), "fc": 64,
                  "avgpool": 1, "dropout": 0.5},
                 (3, 32, 32), 10, f"tiny variant of vgg16 ({_VGG_SRC})", tiny_of="vgg16", real_data=("imagefolder",)),
        # The full layout at 1/8 of the widths (at least 2), on 32x32 images
        # (32 -> 16 -> 8 -> 8 -> 4 -> 4 -> 2 -> 1).
        cnn_spec("googlenet_tiny", "googlenet",
                 {"stem": (8, 8, 24),
                  "inception": ((8, 12, 16, 2, 4, 4), (16, 16, 24, 4, 12, 8),
                                (24, 12, 26, 2, 6, 8), (20, 14, 28, 3, 8, 8),
                                (16, 16, 32, 3, 8, 8), (14, 18, 36, 4, 8, 8),
                                (32, 20, 40, 4, 16, 16), (32, 20, 40, 4, 16, 16),
                                (48, 24, 48, 6, 16, 16)),
                  "dropout": 0.2},
                 (3, 32, 32), 10, f"tiny variant of googlenet ({_GOOGLENET_SRC})",
                 tiny_of="googlenet", real_data=("imagefolder",)),
        cnn_spec("resnet50_tiny", "resnet_bottleneck",
                 {"stem": 16, "widths": (16, 32, 64, 128), "blocks": (1, 1, 1, 1),
                  "expansion": 4},
                 (3, 32, 32), 10, f"tiny variant of resnet50 ({_R50_SRC})",
                 tiny_of="resnet50", real_data=("imagefolder",)),
        cnn_spec("resnet56_tiny", "resnet_cifar",
                 {"channels": (8, 16, 32), "blocks": (1, 1, 1)},
                 (3, 32, 32), 10, f"tiny variant of resnet56 ({_R56_SRC})",
                 tiny_of="resnet56", real_data=("cifar10",)),
    )
}
