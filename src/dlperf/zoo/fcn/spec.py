"""Specs of the fully connected networks: fcn5, fcn8, fcn_mnist and their tiny variants.

Source: Shi, Wang, Xu, Chu 2016, "Benchmarking State-of-the-Art Deep Learning Software Tools"
(DLBench), networks FCN-5, FCN-8 (synthetic, 26752 inputs and outputs) and FCN-R (MNIST);
docs/zoo.md fixes the sizes. Every layer is ``Linear`` with bias, with a sigmoid between
layers (none after the last: it produces the logits of a softmax cross-entropy loss).

The architecture is a list of widths ``hyper["widths"] = (in, h1, ..., out)``; the
implementations build one ``Linear(widths[i], widths[i+1])`` per consecutive pair.
"""

from __future__ import annotations

from collections.abc import Sequence

from dlperf.zoo.spec import ModelSpec, OptimizerSpec

_FLOPS_SOURCE = ("dlperf FLOP convention (zoo/spec.py): Linear(n_in, n_out) costs 2*n_in*n_out "
                 "FLOPs per sample (one multiply-add per weight); bias adds and sigmoids are not "
                 "counted")


def fcn_params(widths: Sequence[int]) -> int:
    """Trainable parameters of an FCN with layer widths ``(in, h1, ..., out)``.

    Each ``Linear(n_in, n_out)`` has an ``n_out x n_in`` weight and an ``n_out`` bias
    (PyTorch ``nn.Linear`` layout, the DLBench FCNs have biases).
    """
    return sum(n_in * n_out + n_out for n_in, n_out in zip(widths[:-1], widths[1:]))


def fcn_forward_flops(widths: Sequence[int]) -> int:
    """Forward FLOPs of one sample through an FCN with layer widths ``(in, h1, ..., out)``.

    Per layer a ``[1, n_in] x [n_in, n_out]`` matmul: ``2 * n_in * n_out`` FLOPs (2 per
    multiply-add, zoo/spec.py convention); bias and sigmoid are element-wise and not counted.
    """
    return sum(2 * n_in * n_out for n_in, n_out in zip(widths[:-1], widths[1:]))


def fcn_spec(name: str, widths: Sequence[int], source: str, *, tiny_of: str | None = None,
             real_data: tuple[str, ...] = ()) -> ModelSpec:
    """Build the :class:`ModelSpec` of an FCN with layer widths ``(in, h1, ..., out)``.

    The input is a float vector of ``widths[0]`` features, the output ``widths[-1]`` logits.
    Optimizer: SGD, momentum 0.9, lr 0.01 (docs/zoo.md default; DLBench used plain SGD).
    """
    widths = tuple(int(w) for w in widths)
    if len(widths) < 2 or min(widths) < 1:
        raise ValueError(f"an FCN needs at least two positive widths, got {widths}")
    return ModelSpec(
        name=name,
        family="fcn",
        input_kind="vector",
        input_shape=(widths[0],),
        num_classes=widths[-1],
        params=fcn_params(widths),
        forward_flops_per_sample=fcn_forward_flops(widths),
        source=source,
        flops_source=_FLOPS_SOURCE,
        optimizer=OptimizerSpec(name="sgd", lr=0.01, momentum=0.9),
        tiny_of=tiny_of,
        real_data=real_data,
        hyper={"widths": widths, "activation": "sigmoid"},
    )


_SHI = "Shi et al. 2016, DLBench"

SPECS: dict[str, ModelSpec] = {
    s.name: s
    for s in (
        # docs/zoo.md: 26752 -> 2048 -> 2048 -> 2048 -> 26752 (three hidden layers).
        fcn_spec("fcn5", (26752, 2048, 2048, 2048, 26752), f"{_SHI} FCN-5 (synthetic)"),
        # docs/zoo.md: as fcn5 with six hidden layers of 2048.
        fcn_spec("fcn8", (26752,) + (2048,) * 6 + (26752,), f"{_SHI} FCN-8 (synthetic)"),
        # docs/zoo.md: 784 -> 2048 -> 4096 -> 1024 -> 10 on MNIST.
        fcn_spec("fcn_mnist", (784, 2048, 4096, 1024, 10), f"{_SHI} FCN-R (MNIST)",
                 real_data=("mnist",)),
        # Tiny CPU-test variants: same layout, small widths. Hidden layers are wide enough that
        # the first layer (which needs no input gradient) stays well under half of the FLOPs,
        # so a measured training step is 2.5x-3x the forward pass like the full models.
        fcn_spec("fcn5_tiny", (512, 128, 128, 128, 512), f"tiny variant of fcn5 ({_SHI})",
                 tiny_of="fcn5"),
        fcn_spec("fcn8_tiny", (512,) + (128,) * 6 + (512,), f"tiny variant of fcn8 ({_SHI})",
                 tiny_of="fcn8"),
        # Keeps 784 inputs and 10 classes, so it still trains on MNIST.
        fcn_spec("fcn_mnist_tiny", (784, 256, 1024, 256, 10),
                 f"tiny variant of fcn_mnist ({_SHI})", tiny_of="fcn_mnist",
                 real_data=("mnist",)),
    )
}
