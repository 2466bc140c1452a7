"""JAX adapter: the whole training step compiled by XLA (``jax.jit``), Flax models, Optax.

Mode ``xla``. :meth:`JaxAdapter.prepare` sets the process up (threads, platforms, allocator,
XLA flags: before the XLA backend starts) and returns a :class:`JaxRun`, the
:class:`~dlperf.frameworks.base.TrainingRun` of one configuration. Where the rest lives:
``step.py`` the one staged training step (jit, donation, compilation counters, loss, gradient
accumulation), ``input.py`` the batches, ``probes.py`` FLOPs, memory, versions and the ceiling
kernels, ``dist.py`` data parallelism, ``profile.py`` the profiler. Choices made here, each
recorded in ``flags`` (docs/measurement.md rule 6):

* precision: ``fp32`` sets ``jax_default_matmul_precision = "highest"`` (TF32 off, explicitly:
  XLA defaults to TF32-like "default" precision for float32 dots and convolutions on NVIDIA
  GPUs); ``tf32`` sets ``"tensorfloat32"``; ``bf16`` runs the model with compute dtype
  bfloat16 over float32 parameters (Flax ``dtype=bfloat16, param_dtype=float32``), the loss in
  float32, and ``"highest"`` for what stays float32.
* timer: :class:`~dlperf.measure.timers.LaggedSyncTimer` with ``jax.block_until_ready`` and
  ``lag=2`` on CPU and GPU (JAX has no device-event API). The step returns the loss array
  without reading it.
* threads (``--threads N``): XLA's CPU client sizes its thread pool by the CPUs the process may
  run on (``sched_getaffinity``), and ``XLA_FLAGS`` has no thread-count flag
  (``--xla_cpu_multi_thread_eigen=false`` does not limit the pool of the current CPU runtime:
  measured CPU/wall time 1.93 on 2 cores with it). So the adapter restricts the CPU affinity of
  every thread of the process to ``N`` CPUs, before the XLA backend starts when it has not yet
  (each configuration runs in a fresh worker process, so normally it has not).
* device ``cpu``: ``jax_platforms = "cpu"`` if the backend has not started, so a GPU build of
  JAX does not claim (pre-allocate) a GPU it is not measured on.
* device ``cuda``: JAX's pre-allocated memory pool is kept but set to 95% of the GPU
  (``XLA_PYTHON_CLIENT_MEM_FRACTION=0.95``; JAX's default 75% would put the out-of-memory
  batch size a quarter of the card below PyTorch's) unless the user set any
  ``XLA_PYTHON_CLIENT_*`` allocator variable. A ``--breakdown``/``--trace`` run turns XLA
  command buffers off (:data:`NO_COMMAND_BUFFERS`), in a process of its own.
* data parallelism (``cfg.world_size > 1``): sharded ``jax.jit`` over a device mesh, and
  ``jax.distributed`` across processes (:mod:`dlperf.frameworks.jax.dist`); the state is
  initialised replicated, each step takes the global batch sharded over the devices (real
  data: each process feeds its rows of every global batch), and the loss and updated state
  come out replicated. With gradient accumulation each device's micro-batch ``i`` is its own
  ``i``-th slice. After the measured segment, :meth:`JaxRun.comm_profile` measures the exposed
  communication under ``jax.profiler`` (:mod:`dlperf.frameworks.jax.profile`).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from dlperf import nvml
from dlperf.config import RunConfig
from dlperf.errors import UnavailableError
from dlperf.frameworks.common import memory_record
from dlperf.frameworks.jax.dist import make_context, setup_process
from dlperf.frameworks.jax.input import make_source
from dlperf.frameworks.jax.probes import (
    COMPILED_FLOPS_SOURCE,
    HLO_FLOPS_SOURCE,
    MATMUL_PRECISION,
    JaxCeilings,
    framework_flop_count,
    nvml_target,
    pool_bytes,
    versions,
    xla_costs,
)
from dlperf.frameworks.jax.profile import profile_comm, trace_steps
from dlperf.frameworks.jax.step import (
    TIMER_LAG,
    JaxStep,
    compiles_counted,
    init_state,
    listen_for_compiles,
    make_loss_fn,
    make_optimizer,
    make_train_step,
    optimizer_flags,
    stop_counting_compiles,
    traced_compiles,
)
from dlperf.measure.timers import LaggedSyncTimer
from dlperf.zoo import impl_module
from dlperf.zoo.convert import flax_input_shape
from dlperf.zoo.spec import ModelSpec

#: Names other modules and tests import from here (their home is probes.py and step.py).
__all__ = ["COMPILED_FLOPS_SOURCE", "GPU_MEM_FRACTION", "HLO_FLOPS_SOURCE", "JaxAdapter",
           "JaxRun", "MATMUL_PRECISION", "NO_COMMAND_BUFFERS", "PRNG_IMPL",
           "framework_flop_count", "make_loss_fn", "xla_costs"]

#: ``XLA_PYTHON_CLIENT_MEM_FRACTION`` set for GPU runs when the user has set no allocator
#: variable (JAX's default is 0.75).
GPU_MEM_FRACTION = "0.95"

#: Random-number generator of initialisation, dropout and synthetic data: XLA's RngBitGenerator
#: (Philox, like PyTorch's CUDA generator) instead of JAX's default threefry, which XLA compiles
#: into a large unrolled program per call site (initialising resnet56_tiny took 6-15 s to
#: compile on 2 CPU cores with threefry, 1.5 s with rbg).
PRNG_IMPL = "rbg"

#: Losses the JAX step implements (:func:`dlperf.frameworks.jax.step.make_loss_fn`).
LOSSES = ("ce", "mlm", "ctc", "custom")


#: XLA flag that turns GPU command buffers (CUDA graphs of several thunks) off: kernels run
#: inside a command buffer carry no HLO op in the profiler trace, so a JAX breakdown could not
#: tell forward, backward and update apart (openxla/xprof issues #3070, #2544; seen on the H200:
#: "no HLO metadata matched the trace's ops" for lstm and transformer).
NO_COMMAND_BUFFERS = "--xla_gpu_enable_command_buffer="


def _traced_on_gpu(cfg: RunConfig) -> bool:
    """True for a run on a GPU whose profiler trace is analysed: ``--breakdown`` or
    ``--trace DIR`` (both store op classes and the trace's phase split, which need every
    kernel's HLO op)."""
    return cfg.hardware.device == "cuda" and cfg.traced


def _command_buffers_off_for_breakdown(started: bool) -> str:
    """For a ``--breakdown`` or ``--trace`` run on a GPU (:func:`_traced_on_gpu`): append
    :data:`NO_COMMAND_BUFFERS` to ``XLA_FLAGS`` before the backend starts (read then), unless
    the user set the flag; returns what happened, for the result's flags. The whole run (its
    fused step too) runs without command buffers: a separate, labelled measurement, as the
    breakdown is."""
    cur = os.environ.get("XLA_FLAGS", "")
    if "xla_gpu_enable_command_buffer" in cur:
        return "as set in XLA_FLAGS by the user"
    if started:
        return "on (the XLA backend had started; the trace may not attribute ops to phases)"
    os.environ["XLA_FLAGS"] = f"{cur} {NO_COMMAND_BUFFERS}".strip()
    return ("off (--breakdown/--trace: kernels in command buffers have no HLO op in the "
            "trace)")


def _backend_started() -> bool:
    """True if this process has already created its XLA backends (then platform, thread-pool
    and XLA_FLAGS settings can no longer take effect)."""
    if "jax" not in sys.modules:
        return False
    try:
        from jax._src import xla_bridge

        return bool(xla_bridge.backends_are_initialized())
    except Exception:  # pragma: no cover - private API moved
        return True


def _set_affinity_all_threads(cpus: set[int]) -> None:
    """Restrict every thread of this process to ``cpus`` (``os.sched_setaffinity`` is per thread
    on Linux; threads created later inherit the creating thread's mask)."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:  # the thread ended meanwhile
            pass


class JaxAdapter:
    """The JAX framework adapter (see module docstring for the choices it makes)."""

    name = "jax"
    modes = ("xla",)

    def breakdown_apart(self, cfg: RunConfig) -> str | None:
        """Why a breakdown or trace of ``cfg`` runs in a process of its own (None: it does
        not): on a GPU a ``--breakdown`` or ``--trace`` run turns XLA command buffers off
        (:func:`_command_buffers_off_for_breakdown`), process-wide and for the fused step too,
        which slowed a scanned LSTM on the H200 2.3x (10.30 against 4.39 ms); the headline is
        measured with them on, in a process without the breakdown or trace
        (:func:`dlperf.launch.process.run_breakdown_apart`). Not when the user set the flag in
        ``XLA_FLAGS`` (then both processes have it)."""
        if (_traced_on_gpu(cfg)
                and "xla_gpu_enable_command_buffer" not in os.environ.get("XLA_FLAGS", "")):
            return "XLA command buffers off for the breakdown's trace, process-wide"
        return None

    def available(self) -> tuple[bool, str]:
        """(True, "jax X, jaxlib Y, flax Z, optax W") if all four are installed, else (False, why).

        Does not import jax (so the worker can still set up threads and platforms before the
        XLA backend starts).
        """
        missing = [m for m in ("jax", "jaxlib", "flax", "optax")
                   if importlib.util.find_spec(m) is None]
        if missing:
            from dlperf.install import install_hint

            return False, (f"{', '.join(missing)} not installed; "
                           f"{install_hint('jax', 'jax-cuda')}")
        vers = []
        for m in ("jax", "jaxlib", "flax", "optax"):
            try:
                vers.append(f"{m} {importlib.metadata.version(m)}")
            except importlib.metadata.PackageNotFoundError:  # pragma: no cover
                vers.append(f"{m} ?")
        return True, ", ".join(vers)

    def devices(self) -> list[str]:
        """``cpu`` always, ``cuda`` when JAX sees an NVIDIA GPU (starts the XLA backends)."""
        import jax

        try:
            gpu = any(d.platform == "gpu" for d in jax.devices("gpu"))
        except RuntimeError:
            gpu = False
        return ["cpu"] + (["cuda"] if gpu else [])

    def is_oom(self, exc: BaseException) -> bool:
        """True for XLA's ``RESOURCE_EXHAUSTED`` errors (device allocator) and host MemoryError."""
        if isinstance(exc, MemoryError):
            return True
        msg = str(exc)
        return isinstance(exc, RuntimeError) and ("RESOURCE_EXHAUSTED" in msg
                                                  or "Out of memory" in msg
                                                  or "out of memory" in msg)

    # --- set-up ------------------------------------------------------------------------------

    @staticmethod
    def _process_setup(cfg: RunConfig) -> tuple[dict[str, Any], Any]:
        """Threads and platforms, before the XLA backend starts; returns (flags, undo)."""
        started = _backend_started()
        flags: dict[str, Any] = {"backend_started_before_prepare": started}
        undo = None
        if cfg.hardware.threads:
            before = os.sched_getaffinity(0)
            cpus = set(sorted(before)[: cfg.hardware.threads])
            _set_affinity_all_threads(cpus)
            undo = lambda: _set_affinity_all_threads(before)  # noqa: E731
            flags["cpu_affinity"] = sorted(cpus)
            flags["threads_mechanism"] = "sched_setaffinity (XLA CPU pool = schedulable CPUs)"
            # Applied before the backend's thread pool exists: it has len(cpus) threads. After:
            # its threads are confined to those CPUs but the pool keeps its size.
            flags["threads_pool_sized"] = not started
        if not started and cfg.hardware.device == "cuda" and not (
                os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION")
                or os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE")
                or os.environ.get("XLA_PYTHON_CLIENT_ALLOCATOR")):
            # JAX pre-allocates 75% of the GPU by default, so the largest batch that fits would
            # be that of a 25% smaller card than PyTorch's caching allocator gets. Keep the
            # pre-allocated pool (JAX's fast path) but let it take 95% (the rest is the CUDA
            # context, cuDNN/cuBLAS workspaces and NCCL). Read when the GPU backend starts.
            os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] = GPU_MEM_FRACTION
            flags["gpu_mem_fraction_set_by_dlperf"] = True
        if _traced_on_gpu(cfg):
            flags["command_buffers"] = _command_buffers_off_for_breakdown(started)
        if not started and cfg.hardware.device == "cpu":
            # Only the CPU backend: a GPU build of jaxlib would otherwise start (and by default
            # pre-allocate 75% of) every GPU although this run does not use them.
            import jax

            if not jax.config.jax_platforms:
                jax.config.update("jax_platforms", "cpu")
        if cfg.distributed:
            flags["data_parallel_setup"] = setup_process(cfg, started)
        return flags, undo

    def prepare(self, cfg: RunConfig, spec: ModelSpec) -> JaxRun:
        """Build model, optimizer, data and the compiled step for ``cfg`` (see module docs).

        Raises:
            UnavailableError: no GPU backend for ``cuda``, no Flax model or no loss for
                ``spec``, too few devices for the data-parallel layout.
            DataError: the data cannot feed this model.
        """
        flags, undo_threads = self._process_setup(cfg)
        try:
            return JaxRun(cfg, spec, flags, undo_threads)
        except BaseException:
            if undo_threads is not None:
                undo_threads()
            raise


def _device(jax: Any, cfg: RunConfig) -> Any:
    """The JAX device of ``cfg.hardware.device`` (the first local one).

    Raises:
        UnavailableError: ``cuda`` without a GPU backend, with JAX's reason: a GPU backend that
            exists but failed to start (its pre-allocated pool did not fit beside another
            process, a driver mismatch) says so, and is not a missing CUDA build.
    """
    if cfg.hardware.device != "cuda":
        return jax.local_devices(backend="cpu")[0]
    try:
        return jax.local_devices(backend="gpu")[0]
    except RuntimeError as e:
        from dlperf.install import install_hint

        raise UnavailableError(f"device 'cuda' was asked for but JAX has no GPU "
                               f"backend: {str(e)[:600]} (without a CUDA build of "
                               f"jaxlib: {install_hint('jax-cuda')}); "
                               f"use --device cpu") from None


class JaxRun(JaxStep):
    """One prepared JAX configuration: the staged step of :class:`JaxStep` (which ``step()``,
    ``phased_step(mark)``, ``profile`` and ``comm_profile`` all run), its data, and the probes
    the worker reads after the loop (:class:`~dlperf.frameworks.base.TrainingRun` contract).

    Built in the order the run needs: device and mesh, process-wide JAX settings, model and
    optimizer, state (initialised on the device), data, then the step compiled ahead of the
    loop for the first batch.

    Raises (from the constructor):
        UnavailableError: see :meth:`JaxAdapter.prepare`.
        RuntimeError: the Flax model's parameter count differs from the spec's.
    """

    def __init__(self, cfg: RunConfig, spec: ModelSpec, flags: dict[str, Any],
                 undo_threads: Callable[[], None] | None) -> None:
        import jax
        import jax.numpy as jnp

        if getattr(spec, "loss", "ce") not in LOSSES:
            raise UnavailableError(f"the jax adapter has no {spec.loss!r} loss yet "
                                   f"(model {spec.name})")
        self._jax, self.cfg, self.spec, self.flags = jax, cfg, spec, flags
        self._undo_threads = undo_threads
        self.dev = _device(jax, cfg)
        data_sharding, replicated = self._data_parallel()
        jax.config.update("jax_default_device", self.dev)
        listen_for_compiles(jax)
        # Precision (rule 6): explicit, process-wide, read when the step is traced.
        jax.config.update("jax_default_matmul_precision", MATMUL_PRECISION[cfg.hardware.precision])
        self._record_settings()
        model, tx = self._model_and_optimizer()
        in_shape = flax_input_shape(spec)
        in_dtype = (jnp.dtype(spec.hyper["x_dtype"]) if "x_dtype" in spec.hyper  # a source's
                    else jnp.int32 if spec.input_kind in ("tokens", "token_pairs")
                    else jnp.float32)
        k_init, k_drop, k_data = jax.random.split(jax.random.key(cfg.workload.seed, impl=PRNG_IMPL), 3)
        self._init_state(model, tx, (k_init, k_drop), (in_shape, in_dtype), replicated)
        self._take_source(make_source(jax, cfg, spec, self.dev, k_data, in_shape, in_dtype,
                                      data_sharding))
        train_step = make_train_step(jax, model, tx, make_loss_fn(spec), cfg.workload.grad_accum,
                                     cfg.world_size, self._count_trace)
        self._hlo_text = self._compile(train_step, self._first, replicated,
                                       keep_hlo=cfg.traced)
        self.versions = versions(jax, self.dev)
        self.timer = LaggedSyncTimer(jax.block_until_ready, lag=TIMER_LAG)
        self.nvml_target = nvml_target(self.dev)
        if self.dist is None:
            self.comm_profile = None  # type: ignore[assignment]  # one device: no collectives

    # --- building -----------------------------------------------------------------------------

    def _data_parallel(self) -> tuple[Any, Any]:
        """Set :attr:`dist` (None without data parallelism); returns ``(data sharding,
        replicated sharding)`` of the mesh, or ``(None, None)``."""
        self.dist = None
        if not self.cfg.distributed:
            return None, None
        platform = "gpu" if self.dev.platform == "gpu" else "cpu"
        self.dist, _mesh, data_sharding, replicated = make_context(self._jax, self.cfg, platform)
        self.flags["data_parallel"] = self.dist.info
        return data_sharding, replicated

    def _record_settings(self) -> None:
        """Every setting that changes speed, as applied (rule 6), into :attr:`flags`."""
        jax, cfg = self._jax, self.cfg
        bf16 = cfg.hardware.precision == "bf16"
        self.flags.update({
            "mode": cfg.runtime.mode, "jit": True, "donate_state": True,
            "jax_default_matmul_precision": jax.config.jax_default_matmul_precision,
            "tf32": cfg.hardware.precision == "tf32",
            "compute_dtype": "bfloat16" if bf16 else "float32",
            "param_dtype": "float32", "loss_dtype": "float32",
            "layout": "NHWC" if self.spec.input_kind == "image" else None,
            "threads": cfg.hardware.threads or len(os.sched_getaffinity(0)),
            "grad_accum": cfg.workload.grad_accum,
            "grad_accum_impl": "unrolled in the step" if cfg.workload.grad_accum > 1 else None,
            "jax_platforms": jax.config.jax_platforms,
            "xla_flags": os.environ.get("XLA_FLAGS"),
            "xla_python_client_preallocate": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE"),
            "xla_python_client_mem_fraction": os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION"),
            "prng_impl": PRNG_IMPL,
            "compilation_cache_dir": jax.config.jax_compilation_cache_dir,
            "timer": f"lagged_sync(block_until_ready, lag={TIMER_LAG})",
        })

    def _model_and_optimizer(self) -> tuple[Any, Any]:
        """The Flax model (compute dtype bfloat16 or float32, float32 parameters) and the Optax
        optimizer of the spec.

        Raises:
            UnavailableError: the spec's family has no Flax implementation (of this model).
        """
        import jax.numpy as jnp
        import optax

        spec = self.spec
        dtype = jnp.bfloat16 if self.cfg.hardware.precision == "bf16" else jnp.float32
        try:
            model = importlib.import_module(impl_module(spec.family, "jax")).build(spec,
                                                                                   dtype=dtype)
        except (ModuleNotFoundError, NotImplementedError) as e:
            raise UnavailableError(f"no Flax implementation of model {spec.name!r} "
                                   f"(family {spec.family}): {e}") from None
        self.flags["dropout_rng"] = float(spec.hyper.get("dropout", 0.0) or 0.0) > 0.0
        tx = make_optimizer(optax, spec.optimizer)
        self.flags["optimizer"] = optimizer_flags(spec.optimizer)
        return model, tx

    def _init_state(self, model: Any, tx: Any, keys: tuple[Any, Any],
                    sample: tuple[tuple[int, ...], Any], replicated: Any) -> None:
        """:attr:`state` initialised on the device (timed: ``flags["init_time_s"]``).

        Raises:
            RuntimeError: the model's parameter count is not the spec's.
        """
        t0 = time.perf_counter()
        self.state = init_state(self._jax, model, tx, keys, sample, self.flags["dropout_rng"],
                                replicated, self.dev)
        self.flags["init_time_s"] = time.perf_counter() - t0
        n_params = sum(int(p.size) for p in self._jax.tree.leaves(self.state["params"]))
        if n_params != self.spec.params:
            raise RuntimeError(f"{self.spec.name}: the Flax model has {n_params} parameters, "
                               f"the spec {self.spec.params}")

    def _take_source(self, src: Any) -> None:
        """Keep what the step and the worker need of the run's DataSource."""
        self._fetch, self._to_device, self._first = src.fetch, src.to_device, src.first
        self.data_info, self.data_wait = src.info, src.wait
        self._close_data, self._data_arrays = src.close, src.arrays

    # --- after the loop -----------------------------------------------------------------------

    def losses_to_floats(self, handles: list[Any]) -> list[float]:
        """Loss arrays -> floats: ``device_get``, one transfer per scalar and no compilation (a
        ``jnp.stack`` would compile once per list length, and count as a recompile); a
        replicated data-parallel loss is read from its local copy."""
        if self.dist is not None:
            return [float(h.addressable_data(0)) for h in handles]
        return [float(v) for v in self._jax.device_get(handles)]

    def memory(self) -> dict[str, int | None]:
        """Peak RSS; on a GPU the allocator's peak and pool size and NVML's used bytes."""
        if self.nvml_target is None:
            return memory_record()
        allocated, reserved = pool_bytes(self.dev.memory_stats(), self.flags)
        return memory_record(allocated, reserved, nvml.memory_used_bytes(*self.nvml_target))

    def count_flops(self) -> dict[str, Any]:
        """XLA's cost analysis of the step, stored at compilation (:func:`framework_flop_count`)."""
        return framework_flop_count(self.flags)

    def ceiling_backend(self) -> JaxCeilings:
        """The ceiling kernels on the run's device; stops counting compilations first (the
        measurement is over: the microbenchmarks' compilations are not the step's)."""
        stop_counting_compiles(self.flags)
        return JaxCeilings(self._jax, self.dev)

    def profile(self, n: int, folder: Any) -> dict[str, Any]:
        """One warm-up and ``n`` annotated steps under ``jax.profiler``, parsed
        (:func:`dlperf.frameworks.jax.profile.trace_steps`), plus ``compiles``: what the traced
        steps compiled (:func:`traced_compiles`; the traced program is the measured one, so
        nothing: its executable is reused)."""
        traces0 = self._traces
        with compiles_counted() as seen:
            out = trace_steps(self._jax, self, self._hlo_text, n, folder)
        out["compiles"] = traced_compiles(self._traces - traces0, seen)
        return out

    def comm_profile(self, k: int) -> dict[str, Any]:
        """Exposed communication of ``k`` profiled steps (data parallel only; None otherwise:
        :func:`dlperf.frameworks.jax.profile.profile_comm`)."""
        return profile_comm(self._jax, self, k)

    def close(self) -> None:
        """Stop the pipeline, stop counting compilations, free the state and the batches,
        give the CPUs back."""
        self._close_data()
        stop_counting_compiles(self.flags)
        held, self.state, self._data_arrays = [self.state, self._data_arrays], None, []
        for leaf in self._jax.tree.leaves(held):
            try:
                leaf.delete()
            except Exception:  # noqa: BLE001 - already donated or deleted
                pass
        if self._undo_threads is not None:
            self._undo_threads()
