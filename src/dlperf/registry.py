"""Which frameworks exist and which execution modes each has (no framework imports).

This is the one table to edit when a framework is added: the adapter class (imported lazily,
``"module:attribute"``), its modes and its capabilities. ``config`` validates a run against it
(``--framework`` / ``--mode``, devices, precisions, data-parallel layouts and modes, which
framework-specific options it takes) and calls the framework's own option rules
(``frameworks/<name>/options.py``, named by :attr:`FrameworkInfo.options`);
``frameworks.get_adapter`` instantiates the adapter; ``dlperf list`` reads its pip
distributions. Nothing here imports a framework.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


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
        title: its name in messages (``"PyTorch"``); ``""``: the registry key.
        options: ``"module:attribute"`` of its own option rules, a function
            ``check(cfg) -> list[tuple[field, message]]`` over a validated
            :class:`~dlperf.config.RunConfig` (imported lazily, when a config of this
            framework is validated); None: no rules of its own.
        dp_layouts: its data-parallel process layouts (``per_device``, ``per_node``; the
            first is its default ``--dp-layout``).
        dp_modes: the modes its data-parallel engine supports; None: all of its modes.
        devices_note: why it runs on :attr:`devices` only, added to that error.
        compiler: the compiler whose mode ``--compile-mode`` picks (``"torch.compile"``).
        compile_modes: its execution modes that take ``--compile-mode``; ``()``: none (the
            option is refused).
        loader_impls: the kinds of input-pipeline workers it offers (``--loader-impl``;
            ``auto`` first); ``("auto",)``: one kind, the option is refused.
        pipeline: its input pipeline's workers, in words, for that refusal.
        optimizer_impls: the implementations of the optimizer update it offers
            (``--optimizer-impl``; ``auto`` first: its default, whatever it resolves to);
            ``("auto",)``: one, the option is refused.
        optimizer: its optimizer update, in words, for that refusal.
        ddp: whether its data-parallel engine takes PyTorch DDP's options (``--bucket-cap-mb``,
            ``--static-graph``, ...; they enter the run key of its data-parallel points).
        distributions: the pip distributions that make it, each a tuple of alternatives (all
            needed), for ``dlperf list`` (read from package metadata, without importing it);
            ``()``: ask the adapter.
        extras: the ``pyproject.toml`` extras that install it, ``(CPU, NVIDIA GPU)``
            (:func:`dlperf.install.install_hint` writes the command); ``()``: none (MXNet has
            its :attr:`setup`).
        eager_mode: the mode that runs op by op, against which ``dlperf results --compare
            modes`` sets its other modes (graph, XLA); None: it has no eager training mode
            (JAX trains through ``jax.jit``), so its modes are not compared that way.
        layouts: the memory layouts of image activations its models run in (``NCHW``,
            ``NHWC``), as recorded in a result's ``flags.layout``; with more than one, each run
            applies one of them (``--layout``, ``auto``: its choice) and the report names it.
        layout_free_modes: its modes whose compiler picks the convolutions' memory layout
            itself, whatever ``--layout`` asked for (torch.compile: Inductor's
            ``layout_optimization``, on by default, converts a graph with convolutions to
            channels_last, ``torch/_inductor/graph.py`` ``decide_layout_opt``); read by the
            performance model's what-if (:func:`dlperf.perfmodel.model.what_if`).

    How :mod:`dlperf.launch` starts its processes (launch reads these and imports no adapter;
    a hook is ``"module:function"`` in the framework's own folder, imported only when used,
    see :func:`load_hook`):
        launcher: how a data-parallel run's processes start: ``"torchrun"`` (``python -m
            torch.distributed.run``) or ``"spawn"`` (:mod:`dlperf.launch.spawn`).
        spawn_args: hook ``(cfg) -> list[str]``: the framework's options for the spawner
            (passed after ``--``), e.g. TensorFlow's cluster settings; None: none.
        process_env: hook ``(args, *, node_rank, nnodes, nproc, coordinator) -> list[dict]``,
            run by the spawner before it starts anything: the extra environment of each of
            the node's ``nproc`` processes (``args``: what ``spawn_args`` gave); raises
            RuntimeError or OSError with the reason when it cannot be made.
        rank_exit: hook ``() -> None`` that a data-parallel process calls after a good run,
            before it exits (e.g. leaving ``jax.distributed`` at its shutdown barrier).
        outside_env: hook ``(launch) -> dict[str, str]``: the extra environment a process
            needs to join ranks that an outside launcher started (torchrun, ``srun``, a
            PyTorchJob; ``launch`` is :meth:`dlperf.launch.outside.OutsideLaunch.record`), set
            in the process before its run (:mod:`dlperf.launch.joined`); raises ConfigError
            when the framework cannot join that launcher. None: the env:// variables suffice.
        breakdown_apart: hook ``(cfg) -> str | None``: why ``cfg``'s ``--breakdown`` or
            ``--trace`` must run in a process of its own (a setting it needs would slow the
            fused step, process-wide), or None; see
            :func:`dlperf.launch.process.run_breakdown_apart`. None: never.
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
    # -- capabilities read by dlperf.config (run validation) and dlperf.cli --
    title: str = ""
    options: str | None = None
    dp_layouts: tuple[str, ...] = ("per_device",)
    dp_modes: tuple[str, ...] | None = None
    devices_note: str = ""
    compiler: str = ""
    compile_modes: tuple[str, ...] = ()
    loader_impls: tuple[str, ...] = ("auto",)
    pipeline: str = "its own input pipeline"
    optimizer_impls: tuple[str, ...] = ("auto",)
    optimizer: str = "one optimizer implementation"
    ddp: bool = False
    distributions: tuple[tuple[str, ...], ...] = ()
    extras: tuple[str, ...] = ()
    # -- how dlperf.launch starts its processes (see the docstring) --
    launcher: str = "spawn"
    spawn_args: str | None = None
    process_env: str | None = None
    rank_exit: str | None = None
    outside_env: str | None = None
    breakdown_apart: str | None = None
    # -- read by dlperf.report (comparisons and table cells) --
    eager_mode: str | None = None
    layouts: tuple[str, ...] = ("NHWC",)
    layout_free_modes: tuple[str, ...] = ()


#: torch.compile's modes (``torch.compile(mode=...)``; PyTorch's torch.compile documentation):
#: ``default``; ``reduce-overhead`` replays the compiled graphs as CUDA graphs (one launch for
#: many kernels: the remedy PyTorch gives for steps bound by kernel-launch overhead);
#: ``max-autotune`` also autotunes matmul/conv templates (and uses CUDA graphs);
#: ``max-autotune-no-cudagraphs`` autotunes without them. The choices of ``--compile-mode``.
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


#: The implementations of the optimizer update (``--optimizer-impl``), PyTorch's
#: (``torch.optim`` documentation, "Algorithms" / foreach and fused): ``auto`` (the fastest:
#: ``fused`` where PyTorch has fused kernels for the optimizer on the parameters' device, CUDA
#: and the CPU; PyTorch's own default elsewhere, which is what ``auto`` ran before issue 23:
#: ``foreach`` on CUDA, the for-loop on the CPU), ``fused`` (one kernel per parameter group,
#: ``fused=True``; on the CPU since PyTorch 2.4), ``foreach`` (``foreach=True``: multi-tensor ops)
#: and ``single`` (``foreach=False``: a Python loop over the parameters).
OPTIMIZER_IMPLS = ("auto", "fused", "foreach", "single")


#: The process launchers of ``FrameworkInfo.launcher``.
LAUNCHERS = ("torchrun", "spawn")


def launch_info(name: str) -> FrameworkInfo:
    """``name``'s entry, for starting its processes (:mod:`dlperf.launch`): from
    :data:`FRAMEWORKS`, or :data:`TEST_DOUBLES` where a test enables its double only in the
    processes it starts (``DLPERF_FAKE_FRAMEWORK=1`` in their environment, not in this one).

    Raises:
        KeyError: ``name`` is in neither table (the message lists the frameworks).
    """
    info = FRAMEWORKS.get(name) or TEST_DOUBLES.get(name)
    if info is None:
        raise KeyError(f"unknown framework {name!r}; known: {', '.join(FRAMEWORKS)}")
    return info


def load_hook(ref: str | None) -> Callable[..., Any] | None:
    """The function a registry hook names (``"package.module:function"``), imported now; None
    for None.

    Raises:
        ValueError: ``ref`` is not of the form ``module:function``.
        ImportError, AttributeError: the module or the function does not exist.
    """
    if ref is None:
        return None
    mod, sep, attr = ref.partition(":")
    if not sep or not mod or not attr:
        raise ValueError(f"registry hook {ref!r} is not 'package.module:function'")
    return getattr(importlib.import_module(mod), attr)


#: How to make the MXNet interpreter (README "Frameworks"); quoted in errors.
MXNET_SETUP = ("python3 -m venv .venv-mxnet && .venv-mxnet/bin/pip install -r "
               "requirements-mxnet.txt && export DLPERF_MXNET_PYTHON=$PWD/.venv-mxnet/bin/python")


FRAMEWORKS: dict[str, FrameworkInfo] = {
    "torch": FrameworkInfo("dlperf.frameworks.torch.adapter:TorchAdapter", ("eager", "graph"),
                           title="PyTorch", options="dlperf.frameworks.torch.options:check",
                           compiler="torch.compile", compile_modes=("graph",),
                           pipeline="its DataLoader's worker processes", ddp=True,
                           optimizer_impls=OPTIMIZER_IMPLS,
                           distributions=(("torch",),), extras=("torch", "torch-cuda"),
                           launcher="torchrun",
                           eager_mode="eager", layouts=("NCHW", "NHWC"),
                           layout_free_modes=("graph",)),
    "jax": FrameworkInfo("dlperf.frameworks.jax.adapter:JaxAdapter", ("xla",),
                         title="JAX", options="dlperf.frameworks.jax.options:check",
                         dp_layouts=("per_node", "per_device"),
                         loader_impls=("auto", "processes", "threads"),
                         optimizer="Optax's update inside the jitted step",
                         distributions=(("jax",), ("flax",), ("optax",)),
                         extras=("jax", "jax-cuda"),
                         rank_exit="dlperf.frameworks.jax.dist:leave_distributed",
                         outside_env="dlperf.frameworks.jax.dist:outside_env",
                         breakdown_apart="dlperf.frameworks.jax.dist:breakdown_apart"),
    # XLA cannot reach mirrored variables on other devices: no XLA mode under a tf.distribute
    # strategy (dp_modes).
    "tensorflow": FrameworkInfo("dlperf.frameworks.tensorflow.adapter:TensorFlowAdapter",
                                ("eager", "graph", "xla"), title="TensorFlow",
                                options="dlperf.frameworks.tensorflow.options:check",
                                dp_layouts=("per_node", "per_device"),
                                dp_modes=("eager", "graph"), pipeline="tf.data's own threads",
                                optimizer="the Keras optimizer's apply inside the traced step",
                                distributions=(("tensorflow", "tensorflow-cpu"), ("keras",)),
                                extras=("tensorflow-cpu", "tensorflow-cuda"),
                                spawn_args="dlperf.frameworks.tensorflow.cluster:spawn_args",
                                process_env="dlperf.frameworks.tensorflow.cluster:process_env",
                                outside_env="dlperf.frameworks.tensorflow.dist:outside_env",
                                eager_mode="eager"),
    # MXNet 1.9.1 (a framework of Shi et al. 2016) needs numpy < 1.24, so it runs in a venv
    # of its own; the pip wheel is CPU-only (no CUDA, no bf16 policy in dlperf).
    "mxnet": FrameworkInfo("dlperf.frameworks.mxnet.adapter:MXNetAdapter", ("eager", "graph"),
                           python_env="DLPERF_MXNET_PYTHON", devices=("cpu",),
                           precisions=("fp32",), data_parallel=False, setup=MXNET_SETUP,
                           models=("fcn5", "fcn8", "fcn_mnist", "alexnet", "alexnet_cifar",
                                   "resnet50", "resnet56", "lstm"),
                           breakdown=False, pipelines=False, title="MXNet",
                           options="dlperf.frameworks.mxnet.options:check",
                           devices_note="the MXNet 1.9.1 pip wheel is a CPU build",
                           optimizer="gluon.Trainer's update",
                           eager_mode="eager", layouts=("NCHW",)),
}

#: Test doubles: registered in :data:`FRAMEWORKS` only with ``DLPERF_FAKE_FRAMEWORK=1``; a test
#: may also register one in :data:`FRAMEWORK_MODES` alone (:func:`framework_info` finds it
#: here). The fake stands in for PyTorch's launch (one process per device, DDP's options).
TEST_DOUBLES: dict[str, FrameworkInfo] = {
    "fake": FrameworkInfo("dlperf.frameworks.fake.adapter:FakeAdapter", ("eager",),
                          zoo_impls=False, options="dlperf.frameworks.fake.options:check",
                          ddp=True, launcher="torchrun",
                          breakdown_apart="dlperf.frameworks.fake.adapter:breakdown_apart"),
}

if os.environ.get("DLPERF_FAKE_FRAMEWORK") == "1":  # test double, see frameworks/fake/adapter.py
    FRAMEWORKS.update(TEST_DOUBLES)

#: framework -> modes, for validation.
FRAMEWORK_MODES: dict[str, tuple[str, ...]] = {k: v.modes for k, v in FRAMEWORKS.items()}


def framework_info(name: object) -> FrameworkInfo | None:
    """The registry entry of framework ``name``: :data:`FRAMEWORKS`, else a test double that a
    test registered in :data:`FRAMEWORK_MODES` only (:data:`TEST_DOUBLES`); None for anything
    else (an unknown name, or not a string: a stored result's field read back)."""
    if not isinstance(name, str):
        return None
    info = FRAMEWORKS.get(name)
    if info is None and name in FRAMEWORK_MODES:
        info = TEST_DOUBLES.get(name)
    return info
