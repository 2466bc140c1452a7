"""The framework adapter protocol: the one seam where framework names appear.

An adapter turns a :class:`~dlperf.config.RunConfig` and a :class:`~dlperf.zoo.ModelSpec` into
a :class:`TrainingRun`: a ready-to-run staged training step plus
the timer and probes the harness needs.
Adding a framework is one adapter module plus its model implementations; the harness, worker,
store and report do not change.
"""

from __future__ import annotations

import contextlib
import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from dlperf.errors import NonFiniteLoss, OutOfMemory  # noqa: F401 - re-exported
from dlperf.measure.timers import StepTimer
from dlperf.zoo.spec import ModelSpec

if TYPE_CHECKING:  # annotations only: importing config here would be a run-time cycle
    from dlperf.config import RunConfig


@dataclass
class DistContext:
    """How this process takes part in a data-parallel run (set by the adapter's ``prepare``).

    Attributes:
        rank, world_size: this process's index and the number of processes (not devices: a
            process may drive several devices, e.g. JAX sharded jit).
        local_rank, node_rank: index among this node's processes, and the node's index.
        replicas: data-parallel replicas (devices) over all processes.
        backend: the engine, e.g. ``"ddp/gloo"``, ``"ddp/nccl"``, ``"jax-sharded-jit"``.
        agree_max: elementwise maximum of a list of floats over all processes (a collective;
            used by the harness between warm-up windows and before the measured segment,
            never inside it). Identity for one process.
        all_gather: a JSON-able object from every process, in rank order (a collective;
            used after the loop). ``[obj]`` for one process.
        info: what the result records under ``dist`` (options, layout, versions).
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    node_rank: int = 0
    replicas: int = 1
    backend: str = ""
    agree_max: Callable[[list[float]], list[float]] = lambda v: list(v)
    all_gather: Callable[[Any], list[Any]] = lambda obj: [obj]
    info: dict[str, Any] = field(default_factory=dict)


def _nothing() -> None:
    return None


def identity(batch: Any) -> Any:
    """``to_device`` of a batch that is on the device already."""
    return batch


@dataclass
class DataSource:
    """Where an adapter's training batches come from (one per run; built in ``prepare``).

    Attributes:
        next_batch: returns the step's ``(x, y)`` on the device (the fused step's input).
        info: JSON-able description stored with the result (kind, placement, data set, ...).
        fetch: returns the batch as it is held (host or device): the breakdown's ``t_io``.
        to_device: puts what ``fetch`` returned on the device (``t_h2d``); the identity where
            the batch is there already. ``to_device(fetch())`` is ``next_batch()`` in two parts.
        wait: the pipeline's data-wait recorder (dlperf.data.pipeline.DataWaitRecorder), or
            None for synthetic and prepared batches.
        close: stops the pipeline and frees the batches; called once after the run.
        first: one batch as the step sees it, where the step is traced or compiled for a
            batch before the run (JAX, TensorFlow); None where unused.
        arrays: device arrays the source holds (JAX; freed by ``close``); empty otherwise.
    """

    next_batch: Callable[[], Any]
    info: dict[str, Any]
    fetch: Callable[[], Any]
    to_device: Callable[[Any], Any]
    wait: Any = None
    close: Callable[[], None] = _nothing
    first: Any = None
    arrays: list[Any] = field(default_factory=list)


def no_mark(phase: str, handle: Any = None) -> None:
    """The stage mark of the fused step: does nothing (one Python call per stage, ~50 ns)."""
    return None  # a statement, so TensorFlow's AutoGraph can convert it inside tf.function


#: The stages of one training iteration, in order (Shi & Chu 2017: t_io, t_h2d, t_f, t_b, t_u;
#: a step compiled as one program has t_fbu in place of the last three).
STAGES = ("t_io", "t_h2d", "t_f", "t_b", "t_u")


class TrainingRun:
    """One prepared configuration, as the worker drives it (what ``FrameworkAdapter.prepare``
    returns). Each framework subclasses it in ``frameworks/<name>/adapter.py`` with small
    methods; this base holds the defaults and documents the contract.

    The training iteration is written once, in :meth:`staged_step`, which calls
    ``mark(stage, handle)`` after each stage (``t_io``, ``t_h2d``, ``t_f``, ``t_b``, ``t_u``; or
    ``t_io``, ``t_h2d``, ``t_fbu`` for a step compiled as one program). The fused timing runs it
    with :func:`no_mark` (:meth:`step`); the breakdown (:mod:`dlperf.measure.phases`) runs it
    with timed marks (:attr:`phased_step`). So the two measure the same code.

    Attributes set by the subclass while preparing:
        timer: per-iteration timer suited to the device (:mod:`dlperf.measure.timers`).
        versions: framework, CUDA, cuDNN, NCCL versions and ``device_name``.
        flags: every setting that changes speed (docs/measurement.md rule 6), as applied.
        data_info: what fed the model (synthetic, or the data set, split, checksums).
        data_wait: the pipeline's :class:`~dlperf.data.pipeline.DataWaitRecorder`, or None.
        nvml_target: ``(uuid or None, NVML index)`` of the GPU the run uses; None on a CPU.
        dist: :class:`DistContext` for a data-parallel run, else None.
        clock: the host clock in seconds that the harness's loops read (``time.perf_counter``;
            the fake framework's virtual clock, which its timer reads too).

    Optional capabilities are attributes that are None here and methods in a subclass that
    has them; the worker tests ``run.<capability> is not None`` before calling:
        phased_step(mark): :meth:`staged_step` with timed marks (``--breakdown``).
        phase_timer(): the :class:`~dlperf.measure.phases.PhaseTimer` for it.
        profile(n, folder): ``{"trace": TraceData, "files": {kind: path}}`` of one warm-up
            and ``n`` annotated steps under the framework's profiler (``--breakdown``/``--trace``).
        compile_info(): ``{"compile_time_s", "n_compiles", "recompiles_measured",
            "compile_before_loop_s", ...}``.
        compile_count(): compilations so far, a cheap Python read called after every step
            (docs/measurement.md, "Recompiles"); None where the framework compiles nothing.
        count_flops(): ``{"flops_per_step", "bytes_per_step", "source", "bytes_source"}`` of
            one more iteration under the framework's counter.
        ceiling_backend(): the :class:`~dlperf.measure.ceilings.CeilingBackend` of the device.
        comm_profile(k): exposed communication of ``k`` profiled data-parallel iterations
            (:func:`dlperf.measure.breakdown.overlap.exposed_communication`).
        dist_details(): what the data-parallel machinery recorded of itself after the
            measured segment (PyTorch: DDP's buckets in ready order, their sizes and its
            sampled compute/communication times), stored as ``dist.runtime``.
    """

    timer: StepTimer
    versions: dict[str, Any]
    flags: dict[str, Any]
    data_info: dict[str, Any]
    data_wait: Any = None
    nvml_target: tuple[str | None, int] | None = None
    dist: DistContext | None = None
    phased_step: Callable[..., Any] | None = None
    phase_timer: Callable[[], Any] | None = None
    profile: Callable[[int, Any], dict[str, Any]] | None = None
    compile_info: Callable[[], dict[str, Any]] | None = None
    compile_count: Callable[[], int] | None = None
    count_flops: Callable[[], dict[str, Any]] | None = None
    ceiling_backend: Callable[[], Any] | None = None
    comm_profile: Callable[[int], dict[str, Any]] | None = None
    dist_details: Callable[[], dict[str, Any]] | None = None
    clock: Callable[[], float] = staticmethod(time.perf_counter)

    def staged_step(self, mark: Callable[..., None]) -> Any:
        """Run one training iteration (input, forward, backward, update), calling ``mark``
        after each stage; return the loss handle (a device scalar, read after the loop)."""
        raise NotImplementedError

    def step(self) -> Any:
        """One fused iteration: :meth:`staged_step` with no-op marks; returns the loss handle."""
        return self.staged_step(no_mark)

    def losses_to_floats(self, handles: list[Any]) -> list[float]:
        """Loss handles -> Python floats (one device-to-host copy, after the loop)."""
        return [float(h) for h in handles]

    def memory(self) -> dict[str, int | None]:
        """Memory peaks in bytes: ``peak_allocated_bytes``, ``peak_reserved_bytes``,
        ``nvml_used_bytes``, ``peak_rss_bytes`` (None where unknown)."""
        from dlperf.frameworks.common import memory_record

        return memory_record()

    def on_phase(self, phase: str) -> None:
        """Called by the harness with ``"measure"`` right before the measured segment."""

    def close(self) -> None:
        """Free the device memory and stop the input pipeline (called once)."""


def build_model(spec: ModelSpec, framework: str, label: str,
                around: Callable[[], Any] = contextlib.nullcontext) -> tuple[Any, Any]:
    """``(impl module, model)``: the zoo module of ``spec``'s family for ``framework``
    (``dlperf.zoo.<family>.<framework>_impl``) and its ``build(spec)``, called inside
    the context ``around()`` (e.g. a device placement).

    Raises:
        UnavailableError: the family has no module for ``framework`` (``label`` names the
            framework's model library in the message, e.g. "Keras"), or its ``build`` raises
            NotImplementedError for this layout (that message). An import error inside the
            module itself is not caught.
    """
    from dlperf.errors import UnavailableError
    from dlperf.zoo import impl_module

    name = impl_module(spec.family, framework)
    try:
        impl = importlib.import_module(name)
        with around():
            return impl, impl.build(spec)
    except ModuleNotFoundError as e:
        if e.name != name:
            raise
        raise UnavailableError(f"{spec.name}: no {label} implementation of the {spec.family} "
                               f"family yet ({name} does not exist)") from None
    except NotImplementedError as e:
        raise UnavailableError(str(e)) from None


class FrameworkAdapter(Protocol):
    """What a framework provides to dlperf."""

    name: str
    modes: tuple[str, ...]

    def available(self) -> tuple[bool, str]:
        """(installed?, version or reason). An adapter whose answer imports the framework
        (seconds) says so with a class attribute ``available_imports = True``: ``dlperf env``
        then asks it in a child process, beside the others
        (:func:`dlperf.frameworks.probe.available_all`)."""

    def devices(self) -> list[str]:
        """The device kinds this framework can use here, e.g. ``["cpu", "cuda"]``."""

    def is_oom(self, exc: BaseException) -> bool:
        """True if ``exc`` is this framework's out-of-memory error."""

    def prepare(self, cfg: RunConfig, spec: ModelSpec) -> TrainingRun:
        """Build the model, optimizer, data and step for ``cfg``: a :class:`TrainingRun`.

        Raises:
            UnavailableError: the framework or device is not present.
            DataError: the data cannot feed this model.
        """
