"""The framework adapter protocol: the one seam where framework names appear.

An adapter turns a :class:`~dlperf.config.RunConfig` and a :class:`~dlperf.zoo.ModelSpec` into
a :class:`TrainingRun` (formerly a :class:`Session`): a ready-to-run staged training step plus
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


@dataclass
class Session:
    """A prepared training run, owned by the worker for the duration of one configuration.

    Attributes:
        step: runs one iteration (input, forward, backward, update); returns a loss handle.
        timer: per-iteration timer suited to the device.
        losses_to_floats: turns loss handles into Python floats (called after the loop).
        memory: returns the memory peaks in bytes (keys ``peak_allocated_bytes``,
            ``peak_reserved_bytes``, ``nvml_used_bytes``, ``peak_rss_bytes``; None if unknown).
        versions: framework, CUDA, cuDNN, NCCL versions and the device name.
        flags: every setting that changes speed (docs/measurement.md rule 6), as applied.
        data_info: what fed the model (synthetic, or the data set, split, batches, checksums).
        close: frees the device memory.
        on_phase: called by the harness with ``"measure"`` right before the measured segment
            (an adapter snapshots its compile counters there).
        compile_info: after the loop, ``{"compile_time_s": float | None, "n_compiles": int |
            None, "recompiles_measured": int | None}``: compile/trace time, number of compiled
            graphs or traces, and how many happened during measurement (docs/measurement.md rule 4;
            > 0 means the measured steps were not at steady state), and
            ``compile_before_loop_s``: the compile/trace work done before the first timed
            iteration (0 where compilation is lazy, inside the first step).
        compile_count: the number of compilations (graphs, traces, builds) so far, as a cheap
            Python read: the harness calls it after every step, also in the measured segment
            (docs/measurement.md, "Recompiles"); None where the framework compiles nothing.
        phased_step: for ``--breakdown``: runs one iteration calling ``mark(phase, handle)``
            after each phase (``t_io``, ``t_h2d``, ``t_f``, ``t_b``, ``t_u``, or ``t_fbu`` for a
            step compiled as one program); see :mod:`dlperf.measure.phases`. None: no
            breakdown for this framework.
        phase_timer: makes the :class:`~dlperf.measure.phases.PhaseTimer` for it.
        profile: for ``--breakdown``/``--trace``: ``profile(n, folder) -> {"trace":
            TraceData, "files": {kind: path}}`` runs one warm-up and ``n`` annotated steps
            (``dlperf_step``) under the framework's profiler, writes the trace files into
            ``folder`` and parses them (:mod:`dlperf.measure.breakdown`).
        data_wait: real data through an input pipeline: the
            :class:`~dlperf.data.pipeline.DataWaitRecorder` around the step's next-batch call
            (its ``mark_measure`` is called from ``on_phase``); None for synthetic data.
        nvml_target: ``(uuid or None, NVML index)`` of the GPU the run uses; None on a CPU.
        count_flops: after the measurement, runs one more iteration under the framework's
            FLOP counter (or reads its compiler's cost analysis) and returns
            ``{"flops_per_step", "bytes_per_step", "source", "bytes_source"}`` (None where a
            count is not available).
        ceiling_backend: returns the framework's
            :class:`~dlperf.perfmodel.ceilings.CeilingBackend` for the run's device.
        dist: set for data-parallel runs (:class:`DistContext`).
        comm_profile: for data-parallel runs whose framework has a profiler: runs ``k`` more
            iterations under it, after the measured segment (a separate, labelled
            measurement), and returns the exposed-communication numbers of
            :func:`dlperf.measure.breakdown.overlap.exposed_communication` in seconds per iteration
            (``comm``, ``compute``, ``overlapped``, ``exposed``, ``hidden_share``,
            ``profiled_iters``, ``rule``, ``profiled_wall_s_per_iter``,
            ``exposed_share_of_step``, ``n_comm_spans``, ``note``; JAX adds ``per_device``,
            ``devices``, ``comm_ops`` and ``reason``: why ``exposed`` is None, if it is).
            Every process must run the same iterations (their collectives match), whatever
            its profiler does; the worker records an exception from it as the ``reason``.
        clock: the host clock in seconds that the harness's loops read (``time.perf_counter``;
            the fake framework's virtual clock in tests).
    """

    step: Callable[[], Any]
    timer: StepTimer
    losses_to_floats: Callable[[list[Any]], list[float]]
    memory: Callable[[], dict[str, int | None]]
    versions: dict[str, Any] = field(default_factory=dict)
    flags: dict[str, Any] = field(default_factory=dict)
    data_info: dict[str, Any] = field(default_factory=dict)
    close: Callable[[], None] = lambda: None
    on_phase: Callable[[str], None] | None = None
    compile_info: Callable[[], dict[str, Any]] | None = None
    compile_count: Callable[[], int] | None = None
    phased_step: Callable[..., Any] | None = None
    phase_timer: Callable[[], Any] | None = None
    profile: Callable[[int, Any], dict[str, Any]] | None = None
    data_wait: Any = None
    nvml_target: tuple[str | None, int] | None = None
    count_flops: Callable[[], dict[str, Any]] | None = None
    ceiling_backend: Callable[[], Any] | None = None
    dist: DistContext | None = None
    comm_profile: Callable[[int], dict[str, Any]] | None = None
    dist_details: Callable[[], dict[str, Any]] | None = None
    clock: Callable[[], float] = time.perf_counter


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
            (:attr:`Session.compile_count`).
        count_flops(): ``{"flops_per_step", "bytes_per_step", "source", "bytes_source"}`` of
            one more iteration under the framework's counter.
        ceiling_backend(): the :class:`~dlperf.perfmodel.ceilings.CeilingBackend` of the device.
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
        """(installed?, version or reason)."""

    def devices(self) -> list[str]:
        """The device kinds this framework can use here, e.g. ``["cpu", "cuda"]``."""

    def is_oom(self, exc: BaseException) -> bool:
        """True if ``exc`` is this framework's out-of-memory error."""

    def prepare(self, cfg: RunConfig, spec: ModelSpec) -> TrainingRun | Session:
        """Build the model, optimizer, data and step for ``cfg``: a :class:`TrainingRun`
        (a :class:`Session` from an adapter not yet moved to it; both have the same attributes).

        Raises:
            UnavailableError: the framework or device is not present.
            DataError: the data cannot feed this model.
        """
