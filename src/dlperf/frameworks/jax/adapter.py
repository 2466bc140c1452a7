"""JAX adapter: the whole training step compiled by XLA (``jax.jit``), Flax models, Optax.

Mode ``xla``: one ``jax.jit`` of forward, loss, gradient and the Optax update, with the train
state (parameters, BN statistics, optimizer state, dropout key) donated
(``donate_argnums=0``), so XLA updates it in place. Choices, each recorded in
``Session.flags`` (docs/measurement.md rule 6):

* precision: ``fp32`` sets ``jax_default_matmul_precision = "highest"`` (TF32 off, explicitly:
  XLA defaults to TF32-like "default" precision for float32 dots and convolutions on NVIDIA
  GPUs); ``tf32`` sets ``"tensorfloat32"``; ``bf16`` runs the model with compute dtype
  bfloat16 over float32 parameters (Flax ``dtype=bfloat16, param_dtype=float32``), the loss in
  float32, and ``"highest"`` for what stays float32.
* compilation (rule 4): the step is lowered and compiled ahead of the loop
  (``jitted.lower(...).compile()``, timed: ``lower_time_s`` = trace + StableHLO lowering,
  ``backend_compile_time_s`` = XLA, ``compile_time_s`` = both). The loop then calls the same
  ``jax.jit`` function, whose caches that compilation filled. ``retraces`` counts how many
  times the Python step function was traced (1 = traced once, never again); ``recompiles``
  counts XLA compilations of any function after the ahead-of-time one (0 in steady state;
  from ``jax.monitoring``). ``Session.compile_info`` reports them (``n_compiles`` = traces)
  with ``recompiles_measured``: traces or compilations during the measured segment.
* loss (zoo/spec.py contract): ``ce``/``mlm`` softmax cross-entropy (``optax.smooth_labels``
  for a spec's label smoothing); ``ctc``: ``optax.ctc_loss`` (blank 0, no paddings), per
  utterance divided by the target length, batch mean (PyTorch's ``reduction="mean"``).
* layout: images are NHWC (the Flax CNNs' layout); synthetic images are made NHWC, real ones
  transposed once on the host before the loop. Token ids are int32 (JAX's default, x64 off).
* timer: :class:`~dlperf.measure.timers.LaggedSyncTimer` with ``jax.block_until_ready`` and
  ``lag=2`` on CPU and GPU (JAX has no device-event API). The step returns the loss array
  without reading it.
* threads (``--threads N``): XLA's CPU client sizes its thread pool by the CPUs the process may
  run on (``sched_getaffinity``), and ``XLA_FLAGS`` has no thread-count flag
  (``--xla_cpu_multi_thread_eigen=false`` does not limit the pool of the current CPU runtime:
  measured CPU/wall time 1.93 on 2 cores with it). So the adapter restricts the CPU affinity of
  every thread of the process to ``N`` CPUs, before the XLA backend starts when it has not yet
  (each configuration runs in a fresh worker process, so normally it has not).
* gradient accumulation (``--grad-accum K``): the K micro-batches are unrolled inside the one
  compiled step (gradients summed, divided by K; BN statistics updated micro-batch by
  micro-batch, as in PyTorch), one optimizer update per step.
* the framework's FLOP count (``Session.count_flops``, without running anything): XLA's static
  cost analysis of the step's HLO *before* optimisation (``xla_hlo_flops_per_step``), beside
  the analytic FLOPs of the spec, and the bytes of the *compiled* program
  (``xla_cost_bytes_per_step``, after fusion) for the roofline. The compiled program's own
  FLOP count is kept too (``xla_cost_flops_per_step``) but not used: on a GPU, XLA turns dots
  and convolutions into cuBLAS/cuDNN custom calls, which its cost analysis counts as 0 FLOPs
  (measured on an H200: 1.7% of the analytic count for resnet50, 2.5% for fcn5, 52% for
  gpt2_small; ``benchmarks/results/h200/mfu_inputs.db``). Loop bodies such as the LSTM's
  scan are counted once by either analysis. See :func:`xla_costs`.
* real data through a pipeline (``--loader-workers N``, always for an ImageFolder): a host
  pipeline (:class:`~dlperf.data.pipeline.HostPipeline`, ``frameworks/jax_input.py``): N
  threads make numpy batches (Pillow decode and augment for JPEGs), a feeder thread
  ``device_put``s them into a queue ``--loader-prefetch`` deep; the step takes the next device
  batch from the queue, and the wait is recorded (``Session.data_wait``).
* synthetic data: a pool of 4 distinct batches made on the device before timing, cycled.
  Real data: batches prepared on the host (pageable memory) and copied with
  ``jax.device_put`` inside each step, so the host-to-device copy is part of the iteration.
* device ``cpu``: ``jax_platforms = "cpu"`` if the backend has not started, so a GPU build of
  JAX does not claim (pre-allocate) a GPU it is not measured on.
* device ``cuda``: JAX's pre-allocated memory pool is kept but set to 95% of the GPU
  (``XLA_PYTHON_CLIENT_MEM_FRACTION=0.95``; JAX's default 75% would put the out-of-memory
  batch size a quarter of the card below PyTorch's) unless the user set any
  ``XLA_PYTHON_CLIENT_*`` allocator variable. Memory: ``peak_allocated_bytes`` =
  ``memory_stats()["peak_bytes_in_use"]``, ``peak_reserved_bytes`` = the pool size
  (``peak_pool_bytes`` / ``pool_bytes`` / ``bytes_reserved`` / ``bytes_limit``, whichever the
  runtime reports first; recorded in ``flags["reserved_bytes_source"]``), NVML used.
* data parallelism (``cfg.world_size > 1``): sharded ``jax.jit`` over a device mesh, and
  ``jax.distributed`` across processes (:mod:`dlperf.frameworks.jax.dist`); the state is
  initialised replicated, each step takes the global batch sharded over the devices (real
  data: each process feeds its rows of every global batch), and the loss and updated state
  come out replicated. With gradient accumulation each device's micro-batch ``i`` is its own
  ``i``-th slice. After the measured segment, ``Session.comm_profile`` runs one warm-up and
  ``k`` steps under ``jax.profiler`` and computes the exposed communication per iteration
  from the trace's device ops (XLA collectives against the device's other ops;
  :func:`dlperf.measure.breakdown.overlap.exposed_from_xspace`).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import itertools
import os
import resource
import sys
import time
from typing import Any

from dlperf import nvml
from dlperf.config import RunConfig
from dlperf.errors import UnavailableError
from dlperf.frameworks.base import DataSource, Session
from dlperf.frameworks.base import identity as _identity
from dlperf.measure.timers import LaggedSyncTimer
from dlperf.zoo import impl_module
from dlperf.zoo.convert import flax_input_shape
from dlperf.zoo.spec import ModelSpec

SYNTHETIC_POOL = 4
#: Real data: at most this many distinct batches are kept on the host and cycled.
MAX_REAL_BATCHES = 512
#: Steps that may be in flight when the lagged timer reads the clock.
TIMER_LAG = 2

#: ``XLA_PYTHON_CLIENT_MEM_FRACTION`` set for GPU runs when the user has set no allocator
#: variable (JAX's default is 0.75).
GPU_MEM_FRACTION = "0.95"

#: ``jax_default_matmul_precision`` per precision policy.
MATMUL_PRECISION = {"fp32": "highest", "tf32": "tensorfloat32", "bf16": "highest"}

#: Random-number generator of initialisation, dropout and synthetic data: XLA's RngBitGenerator
#: (Philox, like PyTorch's CUDA generator) instead of JAX's default threefry, which XLA compiles
#: into a large unrolled program per call site (initialising resnet56_tiny took 6-15 s to
#: compile on 2 CPU cores with threefry, 1.5 s with rbg).
PRNG_IMPL = "rbg"

_BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
#: Counters of XLA compilations after a session's ahead-of-time compile (the flags dict of the
#: active session, written by the ``jax.monitoring`` listener below).
_ACTIVE_FLAGS: dict[str, Any] | None = None
_LISTENER_REGISTERED = False


def _compile_listener(event: str, duration_s: float, **_: Any) -> None:
    if event == _BACKEND_COMPILE_EVENT and _ACTIVE_FLAGS is not None:
        _ACTIVE_FLAGS["recompiles"] += 1
        _ACTIVE_FLAGS["recompile_time_s"] += float(duration_s)


def _peak_rss_bytes() -> int:
    # ru_maxrss is in kilobytes on Linux (getrusage(2)).
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


#: XLA flag that turns GPU command buffers (CUDA graphs of several thunks) off: kernels run
#: inside a command buffer carry no HLO op in the profiler trace, so a JAX breakdown could not
#: tell forward, backward and update apart (openxla/xprof issues #3070, #2544; seen on the H200:
#: "no HLO metadata matched the trace's ops" for lstm and transformer).
NO_COMMAND_BUFFERS = "--xla_gpu_enable_command_buffer="


def _traced_on_gpu(cfg: RunConfig) -> bool:
    """True for a run on a GPU whose profiler trace is analysed: ``--breakdown`` or
    ``--trace DIR`` (both store op classes and the trace's phase split, which need every
    kernel's HLO op)."""
    return cfg.device == "cuda" and bool(cfg.breakdown or cfg.trace_dir)


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


def _cuda_visible_entry(ordinal: int) -> tuple[str | None, int]:
    """(NVML uuid or None, NVML index) of CUDA device ``ordinal`` under CUDA_VISIBLE_DEVICES."""
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if not vis:
        return None, ordinal
    items = [s.strip() for s in vis.split(",") if s.strip()]
    if ordinal >= len(items):
        return None, ordinal
    item = items[ordinal]
    if item.startswith(("GPU-", "MIG-")):
        return item, ordinal
    try:
        return None, int(item)
    except ValueError:
        return None, ordinal


def _targets(spec: ModelSpec) -> tuple[int, ...]:
    """Shape of one sample's integer target (``spec.targets`` where the spec has it)."""
    t = getattr(spec, "targets", None)
    if t is not None:
        return tuple(t)
    return tuple(spec.input_shape) if spec.input_kind == "tokens" else ()

def make_loss_fn(spec: ModelSpec):
    """The spec's loss ``(logits, y) -> float32 scalar`` in JAX (zoo/spec.py contract).

    ``ce``/``mlm``: mean softmax cross-entropy of ``logits.reshape(-1, V)`` against
    ``y.reshape(-1)``, with ``optax.smooth_labels`` for ``spec.label_smoothing``; ``ctc``:
    ``optax.ctc_loss`` of ``[B, T, C]`` logits against ``[B, S]`` labels (blank 0, no
    paddings), each utterance divided by ``S``, then the batch mean (torch ``reduction="mean"``).
    """
    import jax
    import jax.numpy as jnp
    import optax

    n_classes = spec.num_classes
    smoothing = float(getattr(spec, "label_smoothing", 0.0) or 0.0)
    ctc = getattr(spec, "loss", "ce") == "ctc"

    def loss_fn(logits, y):
        if ctc:
            # Blank 0, every utterance T_out frames and S labels (no paddings); optax
            # takes the log-softmax itself. Per utterance / S, then the batch mean
            # (PyTorch ctc_loss reduction="mean").
            logits = logits.astype(jnp.float32)
            per_seq = optax.ctc_loss(logits, jnp.zeros(logits.shape[:2], jnp.float32), y,
                                     jnp.zeros(y.shape, jnp.float32), blank_id=0)
            return (per_seq / y.shape[1]).mean()
        logits = logits.astype(jnp.float32).reshape(-1, n_classes)
        y = y.reshape(-1)
        if smoothing:
            labels = optax.smooth_labels(jax.nn.one_hot(y, n_classes), smoothing)
            return optax.softmax_cross_entropy(logits, labels).mean()
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    return loss_fn


#: Where the JAX FLOP count comes from (stored as ``flops.framework_source``).
HLO_FLOPS_SOURCE = ("XLA cost analysis of the step's HLO before optimisation ('flops' of "
                    "jit(...).lower(...).cost_analysis(), or on a GPU plugin, where that is "
                    "not implemented, XLA's HloCostAnalysis of the same HLO through the CPU "
                    "client: dots and convolutions counted before they become library calls; "
                    "loop bodies counted once)")
#: The compiled program's count, used only where the pre-optimisation one is unavailable.
COMPILED_FLOPS_SOURCE = ("XLA cost analysis of the compiled step ('flops'; loop bodies counted "
                         "once; cuBLAS/cuDNN custom calls count 0 FLOPs on a GPU)")


def _cost_dict(obj: Any) -> dict[str, Any] | None:
    cost = obj.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return dict(cost) if cost else None


def _hlo_cost_on_cpu(lowered: Any) -> dict[str, Any] | None:
    """XLA's ``HloCostAnalysis`` of ``lowered``'s HLO (before optimisation) through the CPU
    client. ``Lowered.cost_analysis()`` returns None on a backend behind the PJRT C API (the
    CUDA plugin: jax ``pxla.MeshComputation.cost_analysis`` raises NotImplementedError, which
    ``stages.Lowered`` turns into None; jax-ml/jax#22713); the analysis of an HLO module
    before optimisation does not depend on the backend, so the CPU client computes the same
    count (checked equal to ``cost_analysis()`` on the CPU in the tests). Uses JAX internals
    (``jax._src.lib._jax.hlo_module_cost_analysis``); any failure gives None."""
    from jax._src import xla_bridge as xb
    from jax._src.lib import _jax

    module = lowered.compiler_ir("hlo").as_hlo_module()
    cost = _jax.hlo_module_cost_analysis(xb.get_backend("cpu"), module)
    return dict(cost) if cost else None


def xla_costs(lowered: Any, compiled: Any) -> dict[str, float | None]:
    """XLA's static cost estimates of one training step, for the FLOP count and the roofline.

    Args:
        lowered: ``jax.stages.Lowered`` of the step (``jitted.lower(...)``).
        compiled: its ``jax.stages.Compiled``.

    Returns ``{"xla_hlo_flops_per_step", "xla_cost_flops_per_step",
    "xla_cost_bytes_per_step"}`` (FLOPs and bytes per step; None where the backend gives no
    estimate; never raises). ``xla_hlo_flops_per_step`` is the cost analysis of the HLO before
    optimisation, where every dot and convolution is still an HLO instruction with its
    shape; the compiled program's (``xla_cost_flops_per_step``) misses what XLA:GPU hands to
    cuBLAS and cuDNN as custom calls, which ``HloCostAnalysis`` counts as 0 FLOPs.
    ``xla_cost_bytes_per_step`` is the compiled program's "bytes accessed" (after fusion: the
    traffic the fused kernels and library calls move, as far as XLA estimates it).
    """
    out: dict[str, float | None] = {"xla_hlo_flops_per_step": None,
                                    "xla_cost_flops_per_step": None,
                                    "xla_cost_bytes_per_step": None}
    for count in (_cost_dict, _hlo_cost_on_cpu):
        try:
            hlo = count(lowered)
        except Exception:  # noqa: BLE001 - not every backend reports costs
            continue
        if hlo and hlo.get("flops"):
            out["xla_hlo_flops_per_step"] = float(hlo["flops"])
            break
    try:
        cost = _cost_dict(compiled)
        if cost:
            out["xla_cost_flops_per_step"] = float(cost["flops"]) if cost.get("flops") else None
            out["xla_cost_bytes_per_step"] = (float(cost["bytes accessed"])
                                              if cost.get("bytes accessed") else None)
    except Exception:  # noqa: BLE001
        pass
    return out


def framework_flop_count(flags: dict[str, Any]) -> dict[str, Any]:
    """``Session.count_flops`` for JAX from the step's stored cost estimates (:func:`xla_costs`):
    ``{"flops_per_step", "bytes_per_step", "source", "bytes_source"}``; the pre-optimisation
    FLOP count where there is one, else the compiled program's (its source says so)."""
    hlo = flags.get("xla_hlo_flops_per_step")
    return {"flops_per_step": hlo if hlo is not None else flags.get("xla_cost_flops_per_step"),
            "bytes_per_step": flags.get("xla_cost_bytes_per_step"),
            "source": HLO_FLOPS_SOURCE if hlo is not None else COMPILED_FLOPS_SOURCE,
            "bytes_source": "XLA cost analysis of the compiled step ('bytes accessed')"}


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
            return False, (f"{', '.join(missing)} not installed; pip install 'dlperf[jax]' "
                           "(for NVIDIA GPUs: pip install 'jax[cuda12]')")
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
        if cfg.threads:
            before = os.sched_getaffinity(0)
            cpus = set(sorted(before)[: cfg.threads])
            _set_affinity_all_threads(cpus)
            undo = lambda: _set_affinity_all_threads(before)  # noqa: E731
            flags["cpu_affinity"] = sorted(cpus)
            flags["threads_mechanism"] = "sched_setaffinity (XLA CPU pool = schedulable CPUs)"
            # Applied before the backend's thread pool exists: it has len(cpus) threads. After:
            # its threads are confined to those CPUs but the pool keeps its size.
            flags["threads_pool_sized"] = not started
        if not started and cfg.device == "cuda" and not (
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
        if not started and cfg.device == "cpu":
            # Only the CPU backend: a GPU build of jaxlib would otherwise start (and by default
            # pre-allocate 75% of) every GPU although this run does not use them.
            import jax

            if not jax.config.jax_platforms:
                jax.config.update("jax_platforms", "cpu")
        if cfg.distributed:
            from dlperf.frameworks.jax.dist import setup_process

            flags["data_parallel_setup"] = setup_process(cfg, started)
        return flags, undo

    def prepare(self, cfg: RunConfig, spec: ModelSpec) -> Session:
        """Build model, optimizer, data and the compiled step for ``cfg`` (see module docs)."""
        flags, undo_threads = self._process_setup(cfg)
        try:
            return self._prepare(cfg, spec, flags, undo_threads)
        except BaseException:
            if undo_threads is not None:
                undo_threads()
            raise

    def _prepare(self, cfg: RunConfig, spec: ModelSpec, flags: dict[str, Any],
                 undo_threads: Any) -> Session:
        global _ACTIVE_FLAGS, _LISTENER_REGISTERED
        import flax
        import jax
        import jax.numpy as jnp
        import jaxlib
        import optax

        if getattr(spec, "loss", "ce") not in ("ce", "mlm", "ctc"):
            raise UnavailableError(f"the jax adapter has no {spec.loss!r} loss yet "
                                   f"(model {spec.name})")
        if cfg.device == "cuda":
            try:
                dev = jax.local_devices(backend="gpu")[0]
            except RuntimeError as e:
                # JAX's reason is kept: a GPU backend that exists but failed to start (its
                # pre-allocated pool did not fit beside another process, a driver mismatch)
                # says so here, and is not a missing CUDA build.
                raise UnavailableError(f"device 'cuda' was asked for but JAX has no GPU "
                                       f"backend: {str(e)[:600]} (without a CUDA build of "
                                       f"jaxlib: pip install 'jax[cuda12]' or 'jax[cuda13]'); "
                                       f"use --device cpu") from None
        else:
            dev = jax.local_devices(backend="cpu")[0]
        gpu = dev.platform == "gpu"
        dist_ctx, data_sh, repl = None, None, None
        if cfg.distributed:
            from dlperf.frameworks.jax.dist import make_context

            dist_ctx, _mesh, data_sh, repl = make_context(jax, cfg, "gpu" if gpu else "cpu")
            flags["data_parallel"] = dist_ctx.info
        jax.config.update("jax_default_device", dev)
        if not _LISTENER_REGISTERED:
            jax.monitoring.register_event_duration_secs_listener(_compile_listener)
            _LISTENER_REGISTERED = True

        # Precision (rule 6): explicit, process-wide, read when the step is traced.
        jax.config.update("jax_default_matmul_precision", MATMUL_PRECISION[cfg.precision])
        bf16 = cfg.precision == "bf16"
        compute_dtype = jnp.bfloat16 if bf16 else jnp.float32
        image = spec.input_kind == "image"
        flags.update({
            "mode": cfg.mode, "jit": True, "donate_state": True,
            "jax_default_matmul_precision": jax.config.jax_default_matmul_precision,
            "tf32": cfg.precision == "tf32",
            "compute_dtype": "bfloat16" if bf16 else "float32",
            "param_dtype": "float32", "loss_dtype": "float32",
            "layout": "NHWC" if image else None,
            "threads": cfg.threads or len(os.sched_getaffinity(0)),
            "grad_accum": cfg.grad_accum,
            "grad_accum_impl": "unrolled in the step" if cfg.grad_accum > 1 else None,
            "jax_platforms": jax.config.jax_platforms,
            "xla_flags": os.environ.get("XLA_FLAGS"),
            "xla_python_client_preallocate": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE"),
            "xla_python_client_mem_fraction": os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION"),
            "prng_impl": PRNG_IMPL,
            "compilation_cache_dir": jax.config.jax_compilation_cache_dir,
            "timer": f"lagged_sync(block_until_ready, lag={TIMER_LAG})",
        })

        # Model (compute dtype bf16 or f32; float32 parameters).
        try:
            impl = importlib.import_module(impl_module(spec.family, "jax"))
            model = impl.build(spec, dtype=compute_dtype)
        except (ModuleNotFoundError, NotImplementedError) as e:
            raise UnavailableError(f"no Flax implementation of model {spec.name!r} "
                                   f"(family {spec.family}): {e}") from None
        uses_dropout = float(spec.hyper.get("dropout", 0.0) or 0.0) > 0.0
        flags["dropout_rng"] = uses_dropout

        o = spec.optimizer
        tx = self._optimizer(optax, o)
        flags["optimizer"] = {"name": o.name, "lr": o.lr, "momentum": o.momentum,
                              "weight_decay": o.weight_decay, "impl": "optax"}

        # Parameters initialised on the device by a jitted init (a host init of a 118 M
        # parameter FCN and its copy cost seconds).
        B, K = cfg.global_batch, cfg.grad_accum
        W = cfg.world_size  # devices the global batch is sharded over
        in_shape = flax_input_shape(spec)
        int_input = spec.input_kind in ("tokens", "token_pairs")
        in_dtype = jnp.int32 if int_input else jnp.float32
        key = jax.random.key(cfg.seed, impl=PRNG_IMPL)
        k_init, k_drop, k_data = jax.random.split(key, 3)
        t0 = time.perf_counter()

        def init(k):
            v = model.init(k, jnp.zeros((1, *in_shape), in_dtype), train=False)
            return v, tx.init(v["params"])

        variables, opt_state = jax.jit(init, out_shardings=repl)(k_init)
        state: dict[str, Any] = {"params": variables["params"], "opt_state": opt_state}
        has_bs = "batch_stats" in variables
        if has_bs:
            state["batch_stats"] = variables["batch_stats"]
        if uses_dropout:
            state["rng"] = k_drop
        if dist_ctx is None:
            state = jax.device_put(state, dev)
        jax.block_until_ready(state)
        flags["init_time_s"] = time.perf_counter() - t0
        n_params = sum(int(p.size) for p in jax.tree.leaves(state["params"]))
        if n_params != spec.params:
            raise RuntimeError(f"{spec.name}: the Flax model has {n_params} parameters, the spec "
                               f"{spec.params}")

        src = self._data(jax, jnp, cfg, spec, dev, k_data, in_shape, in_dtype, data_sh)
        next_batch, first_batch, data_info, data_arrays = (src.next_batch, src.first, src.info,
                                                           src.arrays)
        fetch, to_device, data_wait, close_data = src.fetch, src.to_device, src.wait, src.close

        # The train step.
        counters = {"traces": 0}

        loss_fn = make_loss_fn(spec)

        def forward_loss(params, batch_stats, x, y, rng):
            variables = {"params": params}
            kw: dict[str, Any] = {"rngs": {"dropout": rng}} if rng is not None else {}
            if batch_stats is not None:
                variables["batch_stats"] = batch_stats
                logits, upd = model.apply(variables, x, train=True, mutable=["batch_stats"], **kw)
                return loss_fn(logits, y), upd["batch_stats"]
            return loss_fn(model.apply(variables, x, train=True, **kw), y), None

        grad_fn = jax.value_and_grad(forward_loss, has_aux=True)

        def train_step(state, x, y):
            # Runs in Python once per trace: counts (re)traces (rule 4).
            counters["traces"] += 1
            flags["retraces"] = counters["traces"]
            params = state["params"]
            bs = state.get("batch_stats")
            rng = state.get("rng")
            new_state = dict(state)
            if K == 1:
                sub = None
                if rng is not None:
                    rng, sub = jax.random.split(rng)
                (loss, bs), grads = grad_fn(params, bs, x, y, sub)
            else:
                # Device d holds rows [d B/W, (d+1) B/W); its micro-batch i is its i-th slice
                # (W = 1: the plain split into K consecutive micro-batches).
                def micro(a):
                    a = a.reshape(W, K, B // (W * K), *a.shape[1:])
                    return jnp.swapaxes(a, 0, 1).reshape(K, B // K, *a.shape[3:])
                xs, ys = micro(x), micro(y)

                # Unrolled over the K micro-batches (K is small): inside a lax.scan XLA:CPU ran
                # resnet56_tiny's convolutions 5x slower than unrolled (measured, K=2).
                grads, loss = None, jnp.zeros((), jnp.float32)
                for i in range(K):
                    sub = None
                    if rng is not None:
                        rng, sub = jax.random.split(rng)
                    (l, bs), g = grad_fn(params, bs, xs[i], ys[i], sub)
                    grads = g if grads is None else jax.tree.map(jnp.add, grads, g)
                    loss = loss + l
                grads = jax.tree.map(lambda g: g / K, grads)
                loss = loss / K
            updates, new_state["opt_state"] = tx.update(grads, state["opt_state"], params)
            new_state["params"] = optax.apply_updates(params, updates)
            if bs is not None:
                new_state["batch_stats"] = bs
            if rng is not None:
                new_state["rng"] = rng
            return new_state, loss

        if dist_ctx is None:
            jitted = jax.jit(train_step, donate_argnums=0)
        else:  # state and loss stay replicated; the batch comes in sharded
            jitted = jax.jit(train_step, donate_argnums=0,
                             out_shardings=(jax.tree.map(lambda _: repl, state), repl))
        flags["retraces"] = 0
        x0, y0 = first_batch
        t0 = time.perf_counter()
        lowered = jitted.lower(state, x0, y0)
        t1 = time.perf_counter()
        compiled = lowered.compile()
        t2 = time.perf_counter()
        flags["lower_time_s"] = t1 - t0
        flags["backend_compile_time_s"] = t2 - t1
        flags["compile_time_s"] = t2 - t0
        flags.update(xla_costs(lowered, compiled))
        # The compiled program's text names every instruction a trace shows, with its
        # metadata (phase and op class for --breakdown/--trace, dlperf.measure.breakdown.xla).
        hlo_text = compiled.as_text() if (cfg.breakdown or cfg.trace_dir) else None
        del lowered, compiled
        flags["recompiles"] = 0
        flags["recompile_time_s"] = 0.0
        _ACTIVE_FLAGS = flags

        holder = {"state": state, "data": data_arrays}
        del state, variables

        def step():
            x, y = next_batch()
            holder["state"], loss = jitted(holder["state"], x, y)
            return loss

        def phased_step(mark):
            # Forward, backward and update are one XLA program here: t_fbu, split by the trace.
            b = fetch()
            mark("t_io")
            x, y = to_device(b)
            mark("t_h2d")  # enqueued; the copy runs on the device ahead of the step
            holder["state"], loss = jitted(holder["state"], x, y)
            mark("t_fbu", loss)
            return loss

        def phase_timer():
            from dlperf.measure.phases import LaggedPhaseTimer

            # No device events in JAX: iterations are timed by completion, 2 behind the
            # dispatch as in the fused loop (waiting at each phase boundary would stop host
            # dispatch overlapping device work: +16-50% on the H200, breakdown.db).
            return LaggedPhaseTimer(block=jax.block_until_ready, lag=2)

        def profile(n: int, folder):
            return self._profile(jax, step, holder, hlo_text, n, folder)

        at_measure: dict[str, int] = {}

        def on_phase(phase: str) -> None:
            if phase == "measure":
                at_measure.update(traces=counters["traces"], compiles=flags["recompiles"])
                if data_wait is not None:
                    data_wait.mark_measure()

        def count_flops() -> dict[str, Any]:
            return framework_flop_count(flags)

        def ceiling_backend():
            global _ACTIVE_FLAGS
            from dlperf.frameworks.jax.probes import JaxCeilings

            # The measurement is over: the microbenchmarks' compilations are not the step's.
            if _ACTIVE_FLAGS is flags:
                _ACTIVE_FLAGS = None
            return JaxCeilings(jax, dev)

        def compile_info() -> dict[str, Any]:
            # A retrace during measurement nearly always compiles too; a compile without a
            # retrace (e.g. arguments placed differently) is a recompile all the same.
            measured = None
            if at_measure:
                measured = max(counters["traces"] - at_measure["traces"],
                               flags["recompiles"] - at_measure["compiles"])
            return {"compile_time_s": flags["compile_time_s"], "n_compiles": counters["traces"],
                    "lower_time_s": flags["lower_time_s"],
                    "backend_compile_time_s": flags["backend_compile_time_s"],
                    "recompiles": flags["recompiles"], "recompiles_measured": measured}

        def losses_to_floats(handles: list[Any]) -> list[float]:
            # device_get: one transfer per scalar, no compilation (a jnp.stack would compile
            # once per list length, and count as a recompile).
            if dist_ctx is not None:  # replicated over processes: read the local copy
                return [float(h.addressable_data(0)) for h in handles]
            return [float(v) for v in jax.device_get(handles)]

        uuid, nvml_index = (_cuda_visible_entry(dev.local_hardware_id
                                                if getattr(dev, "local_hardware_id", None)
                                                is not None else dev.id) if gpu else (None, 0))

        def memory() -> dict[str, int | None]:
            m: dict[str, int | None] = {"peak_rss_bytes": _peak_rss_bytes(),
                                        "peak_allocated_bytes": None, "peak_reserved_bytes": None,
                                        "nvml_used_bytes": None}
            stats = dev.memory_stats() if gpu else None
            if stats:
                m["peak_allocated_bytes"] = int(stats.get("peak_bytes_in_use", 0)) or None
                for k in ("peak_pool_bytes", "pool_bytes", "bytes_reserved", "bytes_limit"):
                    if stats.get(k):
                        m["peak_reserved_bytes"] = int(stats[k])
                        flags["reserved_bytes_source"] = f"memory_stats()[{k!r}]"
                        break
            if gpu:
                m["nvml_used_bytes"] = nvml.memory_used_bytes(uuid, nvml_index)
            return m

        versions: dict[str, Any] = {
            "framework": "jax", "jax": jax.__version__, "jaxlib": jaxlib.__version__,
            "flax": flax.__version__, "optax": optax.__version__,
            "backend": dev.platform, "device_kind": dev.device_kind,
            "platform_version": getattr(dev.client, "platform_version", None),
        }
        if gpu:
            versions["device_name"] = dev.device_kind
            versions["capability"] = getattr(dev, "compute_capability", None)
            try:
                from jax._src.lib import cuda_versions

                if cuda_versions is not None:
                    versions["cuda_runtime"] = cuda_versions.cuda_runtime_get_version()
                    versions["cudnn"] = cuda_versions.cudnn_get_version()
            except Exception:  # noqa: BLE001 - private module, optional
                pass
        else:
            from dlperf.env import cpu_model

            versions["device_name"] = cpu_model()

        timer = LaggedSyncTimer(jax.block_until_ready, lag=TIMER_LAG)

        def close() -> None:
            global _ACTIVE_FLAGS
            close_data()
            if _ACTIVE_FLAGS is flags:
                _ACTIVE_FLAGS = None
            for leaf in jax.tree.leaves([holder.pop("state", None), holder.pop("data", None)]):
                try:
                    leaf.delete()
                except Exception:  # noqa: BLE001 - already donated or deleted
                    pass
            if undo_threads is not None:
                undo_threads()

        comm_profile = None
        if dist_ctx is not None:
            def comm_profile(k: int) -> dict[str, Any]:
                return self._profile_comm(jax, step, holder, k)

        return Session(step=step, timer=timer, losses_to_floats=losses_to_floats, memory=memory,
                       versions=versions, flags=flags, data_info=data_info, close=close,
                       on_phase=on_phase, compile_info=compile_info, phased_step=phased_step,
                       phase_timer=phase_timer, profile=profile, data_wait=data_wait,
                       nvml_target=(uuid, nvml_index) if gpu else None,
                       count_flops=count_flops, ceiling_backend=ceiling_backend,
                       dist=dist_ctx, comm_profile=comm_profile)

    @staticmethod
    def _profile(jax: Any, step: Any, holder: dict[str, Any], hlo_text: str | None, n: int,
                 folder: Any) -> dict[str, Any]:
        """Trace one warm-up and ``n`` steps with ``jax.profiler.trace(folder)`` (Python
        function tracing off: it would inflate the host times), each step in
        ``StepTraceAnnotation("dlperf_step", step_num=i)``; parse the XSpace it writes with
        ``jax.profiler.ProfileData`` and the compiled step's HLO (dlperf.measure.breakdown.xspace)."""
        import glob
        from pathlib import Path

        from dlperf.measure.breakdown.xla import parse_hlo
        from dlperf.measure.breakdown.xspace import STEP_NAME, jax_trace, load_planes, to_chrome_trace

        jax.block_until_ready(holder["state"])
        kw: dict[str, Any] = {}
        if hasattr(jax.profiler, "ProfileOptions"):
            opts = jax.profiler.ProfileOptions()
            if hasattr(opts, "python_tracer_level"):
                opts.python_tracer_level = 0
            kw["profiler_options"] = opts
        with jax.profiler.trace(str(folder), **kw):
            jax.block_until_ready(step())  # warm-up inside the profiler, not annotated
            loss = None
            for i in range(n):
                with jax.profiler.StepTraceAnnotation(STEP_NAME, step_num=i):
                    loss = step()
            jax.block_until_ready((loss, holder["state"]))
        planes, xplane = load_planes(folder, prefer="profiledata")
        trace = jax_trace(planes, parse_hlo(hlo_text) if hlo_text else None)
        chrome = sorted(glob.glob(str(Path(folder) / "**" / "*.trace.json.gz"), recursive=True))
        files: dict[str, Any] = {"xplane": xplane, "logdir": folder}
        files["chrome_trace"] = Path(chrome[0]) if chrome else to_chrome_trace(
            planes, Path(folder) / "trace.json.gz")
        return {"trace": trace, "files": files}

    @staticmethod
    def _profile_comm(jax: Any, step: Any, holder: dict[str, Any], k: int) -> dict[str, Any]:
        """Run one warm-up and ``k`` steps under ``jax.profiler`` and return the exposed
        communication per iteration (s) from the trace's device ops
        (:func:`dlperf.measure.breakdown.overlap.exposed_from_xspace`; the same keys as the PyTorch
        adapter's, plus ``per_device``, ``devices``, ``comm_ops`` and ``reason``).

        Runs after the measured segment. Every process runs the same ``k + 1`` steps whatever
        happens to its profiler (the steps' collectives must match across processes); a
        profiler that does not start or stop, or a trace that cannot be read or holds no
        collective, gives ``exposed: None`` with the ``reason`` instead of an exception. The
        warm-up step (blocked on) keeps profiler start-up costs out; only device ops that start
        after the first annotated step's start are counted. Rank 0's numbers are stored.
        """
        import shutil
        import tempfile
        import time as _time

        from dlperf.measure.breakdown.xspace import STEP_NAME, load_planes, steps_of
        from dlperf.measure.breakdown.overlap import exposed_from_xspace

        out: dict[str, Any] = {"comm": None, "compute": None, "overlapped": None,
                               "exposed": None, "hidden_share": None, "profiled_iters": k,
                               "rule": None, "profiled_wall_s_per_iter": None,
                               "exposed_share_of_step": None, "n_comm_spans": 0,
                               "note": "separate profiled iterations after the measured segment",
                               "reason": None}
        folder = tempfile.mkdtemp(prefix="dlperf-jaxcomm-")
        try:
            jax.block_until_ready(holder["state"])
            started = False
            try:
                kw: dict[str, Any] = {}
                if hasattr(jax.profiler, "ProfileOptions"):
                    opts = jax.profiler.ProfileOptions()
                    if hasattr(opts, "python_tracer_level"):
                        opts.python_tracer_level = 0  # Python tracing would slow the host
                    kw["profiler_options"] = opts
                jax.profiler.start_trace(folder, **kw)
                started = True
            except Exception as e:  # noqa: BLE001 - recorded; the steps still run
                out["reason"] = f"jax.profiler did not start: {type(e).__name__}: {e}"[:500]
            try:
                jax.block_until_ready(step())  # warm-up inside the profiler, not counted
                t0 = _time.perf_counter()
                loss = None
                for i in range(k):
                    with jax.profiler.StepTraceAnnotation(STEP_NAME, step_num=i):
                        loss = step()
                jax.block_until_ready((loss, holder["state"]))
                wall = _time.perf_counter() - t0
            except BaseException:  # a failed step is the run's failure: leave no trace running
                if started:
                    try:
                        jax.profiler.stop_trace()
                    except Exception:  # noqa: BLE001
                        pass
                raise
            out["profiled_wall_s_per_iter"] = wall / k
            if not started:
                return out
            try:
                jax.profiler.stop_trace()
            except Exception as e:  # noqa: BLE001
                out["reason"] = f"jax.profiler did not stop: {type(e).__name__}: {e}"[:500]
                return out
            try:
                planes, _ = load_planes(folder, prefer="profiledata")
                steps = steps_of(planes)
                since = steps[0][0] if len(steps) == k else None
                res = exposed_from_xspace(planes, k if since is not None else k + 1, since)
            except Exception as e:  # noqa: BLE001
                out["reason"] = f"the trace could not be read: {type(e).__name__}: {e}"[:500]
                return out
            out.update(res)
            if since is None:
                out["note"] += (f"; {len(steps)} of {k} step annotations found: the warm-up "
                                f"step's ops are counted too (divided by {k + 1})")
            if out["exposed"] is not None and wall > 0:
                out["exposed_share_of_step"] = out["exposed"] / (wall / k)
            return out
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    @staticmethod
    def _optimizer(optax: Any, o: Any):
        """The spec's optimizer in Optax, with PyTorch's semantics.

        SGD: ``optax.sgd`` (trace: ``buf = momentum * buf + g``, as ``torch.optim.SGD`` without
        dampening); weight decay added to the gradient first (torch's coupled L2). Adam: L2 into
        the gradient like ``torch.optim.Adam``; AdamW: decoupled (``optax.adamw``).
        """
        b1, b2 = getattr(o, "betas", (0.9, 0.999))
        eps = getattr(o, "eps", 1e-8)
        if o.name == "sgd":
            tx = optax.sgd(o.lr, momentum=o.momentum or None)
        elif o.name == "adam":
            tx = optax.adam(o.lr, b1=b1, b2=b2, eps=eps)
        else:
            return optax.adamw(o.lr, b1=b1, b2=b2, eps=eps, weight_decay=o.weight_decay)
        if o.weight_decay:
            tx = optax.chain(optax.add_decayed_weights(o.weight_decay), tx)
        return tx

    @staticmethod
    def _data(jax: Any, jnp: Any, cfg: RunConfig, spec: ModelSpec, dev: Any, key: Any,
              in_shape: tuple[int, ...], in_dtype: Any, sharding: Any = None) -> DataSource:
        """The run's :class:`~dlperf.frameworks.base.DataSource`.

        ``next_batch()`` gives the ``(x, y)`` device arrays of one step: ``x`` ``[B, *in_shape]``
        (float32, or int32 token ids), ``y`` ``[B, *targets]`` int32; ``first`` is what the
        step is compiled for; ``arrays`` are the device arrays it holds (freed with the
        session); ``to_device(fetch())`` is ``next_batch()`` in two parts (the batch as held,
        then its copy to the device), for the breakdown's t_io and t_h2d; ``wait`` is the
        recorder of a pipeline (else None) and ``close`` stops the pipeline. ``B`` is the global batch; with a ``sharding`` (data
        parallel) the arrays are global arrays sharded over the devices, and each process holds
        (and, for real data, feeds) only its rows.
        """
        B = cfg.global_batch
        tgt = _targets(spec)
        y_low = 1 if getattr(spec, "loss", "ce") == "ctc" else 0
        if cfg.data == "synthetic":
            def gen(kx, ky):
                if jnp.issubdtype(in_dtype, jnp.integer):
                    x = jax.random.randint(kx, (B, *in_shape), 0, spec.num_classes, in_dtype)
                else:
                    x = jax.random.normal(kx, (B, *in_shape), in_dtype)
                return x, jax.random.randint(ky, (B, *tgt), y_low, spec.num_classes, jnp.int32)

            if sharding is not None:  # each device draws its own rows
                gen_sharded = jax.jit(gen, out_shardings=(sharding, sharding))
            pool = []
            for _ in range(SYNTHETIC_POOL):
                key, kx, ky = jax.random.split(key, 3)
                pool.append(gen_sharded(kx, ky) if sharding is not None
                            else jax.device_put(gen(kx, ky), dev))
            jax.block_until_ready(pool)
            it = itertools.cycle(pool)
            info = {"kind": "synthetic", "placement": "device", "distinct_batches": SYNTHETIC_POOL,
                    "layout": "NHWC" if spec.input_kind == "image" else None}
            return DataSource(it.__next__, info, it.__next__, _identity, first=pool[0],
                              arrays=pool)

        import numpy as np

        from dlperf.data import load_dataset, make_batches

        ds = load_dataset(cfg.data, cfg.data_dir)
        if cfg.loader_workers is not None or ds.kind == "imagefolder":
            if sharding is not None:
                raise UnavailableError("a JAX input pipeline (loader_workers, ImageFolder) with "
                                       "data parallelism is not built yet; use --nproc 1, or "
                                       "prepared batches (no --loader-workers)")
            from dlperf.frameworks.jax.input import make_pipeline

            nxt, first, pipe, rec, close = make_pipeline(
                jax, cfg, spec, ds, dev, int_ids=bool(jnp.issubdtype(in_dtype, jnp.integer)))
            info = {"kind": "real", "dataset": ds.name, "path": str(ds.path),
                    "placement": "pipeline", "pipeline": pipe,
                    "layout": "NHWC" if spec.input_kind == "image" else None,
                    **{k: v for k, v in ds.meta.items()
                       if isinstance(v, (int, float, str, bool))}}
            # The pipeline hands over device arrays: no separate copy step to split off.
            return DataSource(nxt, info, nxt, _identity, wait=rec, close=close, first=first,
                              arrays=[first])
        X, Y = make_batches(ds, spec, B, max_batches=MAX_REAL_BATCHES)
        rows = None
        if sharding is not None:  # this process's rows of every global batch
            n_local = len(sharding.addressable_devices)
            b = cfg.per_device_batch * n_local
            first_dev = min(sharding.addressable_devices_indices_map((B,)).values(),
                            key=lambda ix: ix[0].start or 0)[0].start or 0
            X, Y = X[:, first_dev:first_dev + b], Y[:, first_dev:first_dev + b]
            rows = f"[{first_dev}, {first_dev + b}) of each global batch of {B}"
        if spec.input_kind == "image":  # NCHW -> NHWC, once, on the host
            X = X.transpose(0, 1, 3, 4, 2)
        X = np.ascontiguousarray(X, dtype=np.int32 if jnp.issubdtype(in_dtype, jnp.integer)
                                 else np.float32)
        Y = np.ascontiguousarray(Y, dtype=np.int32)
        batches = [(X[i], Y[i]) for i in range(X.shape[0])]
        it = itertools.cycle(batches)

        if sharding is not None:
            def put(batch):
                return tuple(jax.make_array_from_process_local_data(sharding, a) for a in batch)
        else:
            def put(batch):
                return jax.device_put(batch, dev)

        def next_batch():
            return put(next(it))

        first = put(batches[0])
        info = {"kind": "real", "dataset": ds.name, "path": str(ds.path),
                "placement": "host", "distinct_batches": int(X.shape[0]),
                "layout": "NHWC (transposed on the host)" if spec.input_kind == "image" else None,
                **({"rows": rows} if rows else {}),
                **{k: v for k, v in ds.meta.items() if isinstance(v, (int, float, str, bool))}}
        return DataSource(next_batch, info, it.__next__, put, first=first, arrays=[first])
