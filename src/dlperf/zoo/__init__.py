"""The model zoo: specs (framework-free) and per-framework implementations.

Each family package (``fcn``, ``cnn``, ``rnn``, ``transformer``) has ``spec.py`` exporting
``SPECS: dict[str, ModelSpec]`` (full models and their ``_tiny`` variants) and one implementation module per
framework (``torch_impl.py`` with ``build(spec) -> torch.nn.Module``). Adding a model is a spec
entry plus one implementation per framework; this file only gathers them.

Models from outside the zoo (Hugging Face, timm, a user's file, a package's entry point) come
through :mod:`dlperf.zoo.sources` and the same seam: :func:`get_spec` resolves their names to
a :class:`ModelSpec` whose ``family`` (``sources.hf``, ...) names their implementation package.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from dlperf.errors import ConfigError, DlperfError, unknown_choice
from dlperf.zoo.spec import ModelSpec, OptimizerSpec

FAMILY_PACKAGES = ("fcn", "cnn", "rnn", "transformer")


def _collect() -> dict[str, ModelSpec]:
    specs: dict[str, ModelSpec] = {}
    for fam in FAMILY_PACKAGES:
        mod = importlib.import_module(f"dlperf.zoo.{fam}.spec")
        for name, spec in mod.SPECS.items():
            assert name == spec.name and name not in specs, name
            specs[name] = spec
    return specs


SPECS: dict[str, ModelSpec] = _collect()


@dataclass(frozen=True)
class SuiteEntry:
    """One point of a suite: a model and the data it trains on by default."""

    model: str
    data: str = "synthetic"


# docs/zoo.md, "Standard suites".
SUITES: dict[str, tuple[SuiteEntry, ...]] = {
    # The README's main job: one model per family (FCN, CNN, RNN, Transformer), which
    # `dlperf run --suite quick` runs at batch sizes 8 and 32 (dlperf.cli.run), 8 points in
    # under a minute on 2 CPU cores. On one thread of a 2-core Xeon VM the steps took 0.6/0.8,
    # 15/55, 21/85 and 4.5/17 ms at b=8/32: the small FCN is bound by per-step overhead (its
    # throughput triples from b=8 to 32), the CNN and the LSTM are bound by compute (flat).
    "quick": tuple(SuiteEntry(n) for n in ("fcn5_tiny", "resnet56_tiny", "lstm_tiny",
                                           "gpt2_small_tiny")),
    # Every tiny variant (the quick suite before it became the main job): a smoke test of the
    # whole zoo.
    "tiny": tuple(
        SuiteEntry(n)
        for n in ("fcn5_tiny", "fcn8_tiny", "fcn_mnist_tiny", "alexnet_tiny",
                  "alexnet_cifar_tiny", "resnet50_tiny", "resnet56_tiny", "lstm_tiny",
                  # Each of these takes under 15 ms per batch-8 step on one CPU thread.
                  "vgg16_tiny", "googlenet_tiny", "deepspeech2_tiny", "transformer_tiny",
                  "bert_base_tiny", "gpt2_small_tiny")
    ),
    "dlbench": (
        SuiteEntry("fcn5"), SuiteEntry("fcn8"), SuiteEntry("alexnet"), SuiteEntry("resnet50"),
        SuiteEntry("lstm"), SuiteEntry("fcn_mnist", "mnist"), SuiteEntry("alexnet_cifar", "cifar10"),
        SuiteEntry("resnet56", "cifar10"), SuiteEntry("lstm", "ptb"),
    ),
    # Shi & Chu 2017 (distributed training of CNNs).
    "distributed": (SuiteEntry("alexnet"), SuiteEntry("googlenet"), SuiteEntry("resnet50")),
    # Dai et al. 2022: CNN, RNN, speech and Transformer.
    "seven": tuple(SuiteEntry(n) for n in ("resnet50", "vgg16", "googlenet", "lstm",
                                          "deepspeech2", "transformer", "bert_base")),
}


def get_spec(name: str) -> ModelSpec:
    """Return the spec of model ``name``: a zoo model, a model from a source (``hf:TYPE``,
    ``timm:NAME``, ``file:PATH.py:FUNCTION``, with ``?key=value&...`` options), or a model
    that an installed package registers as a ``dlperf.models`` entry point
    (:mod:`dlperf.zoo.sources`). A source's spec is made once per process and name (it
    builds the model to count it); its ``name`` is the canonical form of ``name`` (options
    sorted, a file's path absolute).

    Raises:
        ConfigError: ``name`` is not a model (the message suggests the closest zoo or
            entry-point name and shows the source forms), or the source refuses it (its
            message says why: an unknown Hugging Face type with close ones, a missing file,
            a function whose return breaks the contract, ...).
        UnavailableError: the source's library (transformers, timm, torch) is not installed.
    """
    spec = SPECS.get(name)
    if spec is not None:
        return spec
    from dlperf.zoo import sources

    spec = sources.resolve(name)
    if spec is None:
        err = unknown_choice("model", name, [*SPECS, *sources.entry_point_names()])
        raise ConfigError(f"{err}; or a model from a source: hf:TYPE (e.g. hf:gpt2), "
                          "timm:NAME, file:PATH.py:FUNCTION, each with ?key=value options "
                          "(docs/zoo.md)") from None
    return spec


def is_model(name: str) -> bool:
    """True if ``name`` is a zoo model or resolves to a model from a source (which then is
    resolved and cached, see :func:`get_spec`); False for an unknown name, a bad option or
    a missing library."""
    try:
        get_spec(name)
    except DlperfError:
        return False
    return True


def get_suite(name: str) -> tuple[SuiteEntry, ...]:
    """Return the entries of suite ``name``; raises ConfigError naming the valid suites."""
    try:
        return SUITES[name]
    except KeyError:
        raise unknown_choice("suite", name, SUITES) from None


def impl_module(family: str, framework: str) -> str:
    """The dotted name of ``family``'s implementation for ``framework``: every family package
    names its implementations ``<framework>_impl.py`` (``torch_impl``, ``jax_impl``,
    ``tensorflow_impl``, ``mxnet_impl``), so a new framework needs no table here."""
    return f"dlperf.zoo.{family}.{framework}_impl"


def build(spec: ModelSpec, framework: str) -> Any:
    """Build the model of ``spec`` in ``framework`` (imports that framework lazily).

    Each family package has one module per framework (``torch_impl``, ``jax_impl``,
    ``tensorflow_impl``) exporting ``build(spec)``.
    """
    mod = importlib.import_module(impl_module(spec.family, framework))
    return mod.build(spec)


def build_torch(spec: ModelSpec) -> Any:
    """Build the PyTorch ``nn.Module`` of ``spec`` (imports torch lazily).

    The module maps a batch to logits: ``[B, num_classes]`` for vector/image inputs
    (``[B, F]`` float32 or ``[B, C, H, W]`` float32), ``[B, T, V]`` for token inputs
    (``[B, T]`` int64; ``[B, n_predictions, V]`` for BERT) and token pairs (``[B, 2, T]``
    int64), ``[B, T_out, classes]`` for spectrograms (``[B, bins, frames]`` float32); see the
    table in :mod:`dlperf.zoo.spec`.
    """
    return build(spec, "torch")


__all__ = ["ModelSpec", "OptimizerSpec", "SPECS", "SUITES", "SuiteEntry", "build",
           "build_torch", "get_spec", "get_suite", "impl_module", "is_model"]
