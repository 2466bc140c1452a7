"""Which frameworks exist and which execution modes each has (no framework imports).

This is the one table to edit when a framework is added: the adapter class (imported lazily,
``"module:attribute"``) and its modes. ``config`` validates ``--framework`` / ``--mode``
against it and ``frameworks.get_adapter`` instantiates the adapter.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class FrameworkInfo:
    """A framework dlperf can drive: its adapter and execution modes.

    Attributes:
        adapter: ``"module:attribute"`` of the adapter class (imported lazily).
        modes: execution modes; the first is the default.
        python_env: for a framework that runs in an interpreter of its own (a venv whose
            pinned dependencies cannot live beside the others, e.g. MXNet 1.9.1 with
            numpy < 1.24): the environment variable that holds that interpreter's path. Its
            worker processes are started with it (:mod:`dlperf.launch.process`); None: this
            interpreter.
        devices: the devices it can run on here (``cpu``, ``cuda``).
        precisions: the precision policies it implements.
        data_parallel: whether it has a data-parallel engine in dlperf.
        setup: how to make its environment (quoted in errors), for ``python_env`` frameworks.
        models: the models it implements (base names; their ``_tiny`` variants too), None: all.
        breakdown: whether it has ``--breakdown``/``--trace``.
        pipelines: whether it reads real data through an input pipeline (``--loader-workers``,
            ImageFolder).
        zoo_impls: whether it builds the zoo's models from ``dlperf.zoo.<family>.<name>_impl``
            modules (False for a test double that builds no model).
    """

    adapter: str
    modes: tuple[str, ...]
    python_env: str | None = None
    devices: tuple[str, ...] = ("cpu", "cuda")
    precisions: tuple[str, ...] = ("fp32", "tf32", "bf16")
    data_parallel: bool = True
    setup: str = ""
    models: tuple[str, ...] | None = None
    breakdown: bool = True
    pipelines: bool = True
    zoo_impls: bool = True


#: How to make the MXNet interpreter (README "Frameworks"); quoted in errors.
MXNET_SETUP = ("python3 -m venv .venv-mxnet && .venv-mxnet/bin/pip install -r "
               "requirements-mxnet.txt && export DLPERF_MXNET_PYTHON=$PWD/.venv-mxnet/bin/python")


FRAMEWORKS: dict[str, FrameworkInfo] = {
    "torch": FrameworkInfo("dlperf.frameworks.torch.adapter:TorchAdapter", ("eager", "graph")),
    "jax": FrameworkInfo("dlperf.frameworks.jax.adapter:JaxAdapter", ("xla",)),
    "tensorflow": FrameworkInfo("dlperf.frameworks.tensorflow.adapter:TensorFlowAdapter",
                                ("eager", "graph", "xla")),
    # MXNet 1.9.1 (a framework of Shi et al. 2016) needs numpy < 1.24, so it runs in a venv
    # of its own; the pip wheel is CPU-only (no CUDA, no bf16 policy in dlperf).
    "mxnet": FrameworkInfo("dlperf.frameworks.mxnet.adapter:MXNetAdapter", ("eager", "graph"),
                           python_env="DLPERF_MXNET_PYTHON", devices=("cpu",),
                           precisions=("fp32",), data_parallel=False, setup=MXNET_SETUP,
                           models=("fcn5", "fcn8", "fcn_mnist", "alexnet", "alexnet_cifar",
                                   "resnet50", "resnet56", "lstm"),
                           breakdown=False, pipelines=False),
}

if os.environ.get("DLPERF_FAKE_FRAMEWORK") == "1":  # test double, see frameworks/fake/adapter.py
    FRAMEWORKS["fake"] = FrameworkInfo("dlperf.frameworks.fake.adapter:FakeAdapter", ("eager",),
                                       zoo_impls=False)

#: framework -> modes, for validation.
FRAMEWORK_MODES: dict[str, tuple[str, ...]] = {k: v.modes for k, v in FRAMEWORKS.items()}
