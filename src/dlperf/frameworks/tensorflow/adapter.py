"""TensorFlow adapter: Keras 3 models (TensorFlow backend) trained by a hand-written step.

Modes (``--framework tensorflow --mode ...``): the same Python train step (``tf.GradientTape``
forward + loss, gradient, ``optimizer.apply``) run

* ``eager``: op by op, as plain Python;
* ``graph``: wrapped in ``tf.function`` (traced once into a graph, optimised by Grappler);
* ``xla``: wrapped in ``tf.function(jit_compile=True)`` (the whole step compiled by XLA).

Choices (each recorded in ``TensorFlowRun.flags``, docs/measurement.md rule 6):

* precision: ``fp32`` turns TensorFloat-32 off explicitly
  (``tf.config.experimental.enable_tensor_float_32_execution(False)``: TensorFlow's default
  is on), ``tf32`` turns it on; ``bf16`` is the Keras mixed-precision policy
  ``"mixed_bfloat16"`` (float32 variables, bfloat16 compute), TF32 off for what stays float32,
  and the loss taken in float32 from logits cast to float32 (as under ``torch.autocast``). No
  loss scaling is needed for bf16. The global Keras policy is set on every ``prepare`` (and
  reset to ``float32`` on close), so configurations in one process do not leak into each other.
* models: ``dlperf.zoo.<family>.tensorflow_impl`` (the PyTorch architectures and parameter counts
  exactly; images NHWC, the only layout of TensorFlow's CPU convolutions; see those modules).
* optimizer: ``keras.optimizers.SGD(learning_rate, momentum)`` (the same update as PyTorch's
  SGD at a constant learning rate), ``Adam``/``AdamW`` with the spec's betas and eps (Keras
  adds eps to ``sqrt(v)`` before the bias correction, PyTorch after: a negligible difference
  that no constant can remove). A spec weight decay is applied as PyTorch does: added to the
  gradient (L2, coupled) for SGD and Adam, decoupled (Keras's ``weight_decay``) for AdamW.
  Optimizer slots are created before the step is traced (``optimizer.build``).
* recurrent layers: Keras's cuDNN LSTM/GRU kernels on a GPU in ``eager`` and ``graph`` modes;
  in ``xla`` mode they are switched off (``use_cudnn=False``: XLA cannot compile the cuDNN op).
  Without cuDNN (CPU, XLA) the LSTM LM's layers run a fused loop (every step's input
  projection in one matmul, the recurrence unrolled: ``zoo/rnn/tensorflow_impl.py``), GRUs Keras's
  generic ``while_loop``. Flags ``rnn_cudnn`` and ``rnn_loop`` (``cudnn``, ``fused_unrolled``
  or ``keras_while_loop``, of the first recurrent layer).
* compilation (rule 4): the step is traced before timing in ``graph``/``xla`` and its first
  two calls are timed (``trace_time_s``, ``first_call_s``, ``second_call_s``,
  ``compile_time_s``, ``retraces``): :mod:`dlperf.frameworks.tensorflow.step`.
* data: a pool of seeded synthetic batches on the device, or real batches kept on the host
  (copied to a GPU in each step) or read through ``tf.data``:
  :mod:`dlperf.frameworks.tensorflow.input`.
* threads (``--threads N``): ``intra_op_parallelism_threads = N`` (the thread pool that runs
  each op, which oneDNN kernels share) and ``inter_op_parallelism_threads = 1`` (one op at a
  time), so a step uses at most N compute threads, like ``torch.set_num_threads(N)``;
  ``inter_op = N`` would allow up to N ops of N threads each. TensorFlow fixes both pools when
  it first runs an op, so they are set before anything runs; a process that already ran
  TensorFlow with other values gets a ConfigError (the CLI runs every configuration in a fresh
  worker process). Without ``--threads`` TensorFlow's defaults (0 = one thread per CPU the
  process may use, for both pools) are kept and recorded.
* devices: ``cpu`` hides every GPU from TensorFlow (``set_visible_devices([], "GPU")``) so ops
  cannot be placed on one; ``cuda`` makes the first GPU the only visible one. GPU memory growth
  is turned on before anything runs (``set_memory_growth``): without it TensorFlow reserves
  the whole card, and its memory numbers would mean nothing (docs/measurement.md rule 7).

Timing (docs/measurement.md rules 1-2); the step always returns its loss tensor without reading it:

* CPU: :class:`~dlperf.measure.timers.HostTimer`. TensorFlow executes synchronously on the CPU
  (an eager op, and a ``tf.function`` call, returns when its kernels have run), so the host
  clock at each boundary is the completion time of the step. The lagged timer is deliberately
  not used there: on a synchronous executor it misattributes time, since it reads the clock
  for step *i - 2* only after step *i* has run, so the first interval of every segment spans
  ``lag + 1`` steps and the last ``lag`` are ~0 (measured with ``lag = 2``: fcn5_tiny, 5
  steps, median 25 ms with a CI of [0.002, 88] ms; sums were right, samples and medians not).
* GPU (**unverified**: TensorFlow is not installed on the project's GPU machine):
  ``LaggedSyncTimer(block=lambda t: t.numpy(), lag=2)``, as JAX does: a ``tf.function`` call
  returns once its kernels are enqueued, and the timer reads the clock when step *i - 2*'s loss
  is on the host, so up to two steps stay queued. Caveat to check on a GPU: TensorFlow copies a
  GPU tensor to the host after waiting for everything enqueued on the compute stream so far
  (``GPUUtil::CopyGPUTensorToCPU`` waits on the stream, not on the tensor's producer), so
  reading step *i - 2*'s loss may wait for step *i* too: a host sync per step (rule 2 says that
  costs a few percent on small steps) and the boundary skew described above. Compare with a
  profiler timeline before trusting TensorFlow GPU numbers against other frameworks.

The training step, written once and staged (fused timing: no-op marks; ``--breakdown``:
timed marks), is :mod:`dlperf.frameworks.tensorflow.step`; traces are
:mod:`dlperf.frameworks.tensorflow.profile`; FLOPs (TensorFlow's profiler over the traced step
graph), ceilings (``tf.linalg.matmul``), memory and versions are
:mod:`dlperf.frameworks.tensorflow.probes`.

Data parallelism (:mod:`dlperf.frameworks.tensorflow.dist`): ``--nproc N`` on one node is
``tf.distribute.MirroredStrategy`` over N GPUs or N logical CPU devices in one process;
``--dp-layout per_device`` (one worker process per device) and ``--nnodes > 1`` are
``tf.distribute.MultiWorkerMirroredStrategy``, each worker started by dlperf's launcher with
``TF_CONFIG`` in its environment (RING collectives on the CPU, NCCL on GPUs). The same replica
step runs on each device with its rows of the global batch, its loss (and a coupled L2 term)
divided by the replicas in sync since Keras sums the replicas' gradients; the step returns
the mean loss over this process's rows. A worker draws (synthetic) or keeps (prepared real
batches) only its rows of each global batch, and a ``tf.data`` pipeline is sharded across the
workers. Under a strategy there is no phased breakdown (``--breakdown`` records why), the
trace profiles whole steps, and the FLOP count is the local replicas' step over their number.
"""

from __future__ import annotations

import gc
import os
import sys
from typing import Any

# TensorFlow's C++ INFO/WARNING lines (oneDNN notice, absl) would clutter dlperf's output;
# errors still print. A user's own setting wins.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from dlperf.config import RunConfig  # noqa: E402
from dlperf.errors import ConfigError, UnavailableError  # noqa: E402
from dlperf.frameworks.base import build_model, no_mark  # noqa: E402
from dlperf.frameworks.tensorflow import dist as tf_dist  # noqa: E402
from dlperf.frameworks.tensorflow import probes  # noqa: E402
from dlperf.frameworks.tensorflow.input import make_source  # noqa: E402
from dlperf.frameworks.tensorflow.profile import phase_spans, profile_steps  # noqa: E402
from dlperf.frameworks.tensorflow.step import TfStep, TrainStep, make_loss, make_optimizer, no_span  # noqa: E402
from dlperf.measure.timers import HostTimer, LaggedSyncTimer  # noqa: E402
from dlperf.zoo.spec import ModelSpec  # noqa: E402

#: Steps that may be in flight when the lagged timer reads the clock.
TIMER_LAG = 2
#: Keras global policy per precision.
KERAS_POLICY = {"fp32": "float32", "tf32": "float32", "bf16": "mixed_bfloat16"}


#: Packages that TensorFlow and Keras import at start-up when they are installed, each inside
#: ``try: ... except ImportError``, for what a dlperf worker never uses: tf.lite's JAX
#: converter (``jax``), Keras's DataFrame and sparse-matrix inputs (``pandas``, ``scipy``) and
#: its image-gallery plot (``matplotlib``). Where dlperf is the process's program (its command,
#: a worker, a rank) TensorFlow is imported without them (:func:`import_tf`): 1.2 s less CPU
#: per worker start where all four are installed
#: (``import tensorflow, keras``: 4.0 -> 2.8 s on a 2-core VM, TensorFlow 2.x CPU, Keras 3).
TF_OPTIONAL_IMPORTS = ("jax", "pandas", "scipy", "matplotlib")


def import_tf() -> tuple[Any, Any]:
    """Import TensorFlow and Keras 3 with the TensorFlow backend; return ``(tf, keras)``.

    Sets ``KERAS_BACKEND=tensorflow`` before keras is first imported, and turns GPU memory
    growth on for every GPU before TensorFlow runs anything (a no-op on a CPU-only build).
    Where dlperf is the process's program (:data:`dlperf.OWNS_PROCESS`) and
    TensorFlow is not imported yet, the packages of :data:`TF_OPTIONAL_IMPORTS` not imported yet are
    hidden during that import (TensorFlow and Keras then go without those optional parts) and
    importable again after it.

    Raises:
        UnavailableError: keras was already imported in this process with another backend.
    """
    k = sys.modules.get("keras")
    if k is not None and hasattr(k, "backend") and k.backend.backend() != "tensorflow":
        raise UnavailableError(
            f"keras is already imported with the {k.backend.backend()!r} backend in this "
            f"process; the TensorFlow adapter needs KERAS_BACKEND=tensorflow (run it in a fresh "
            f"process: the CLI does)")
    if k is None:
        os.environ["KERAS_BACKEND"] = "tensorflow"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # hide INFO lines only
    import dlperf

    hidden = [m for m in TF_OPTIONAL_IMPORTS if m not in sys.modules] \
        if dlperf.OWNS_PROCESS and "tensorflow" not in sys.modules else []
    try:
        for m in hidden:  # `import m` raises ImportError while its entry is None
            sys.modules[m] = None  # type: ignore[assignment]
        import tensorflow as tf

        for gpu in tf.config.list_physical_devices("GPU"):
            try:
                tf.config.experimental.set_memory_growth(gpu, True)
            except (RuntimeError, ValueError):  # the runtime already started: in flags
                pass
        import keras
    finally:
        for m in hidden:
            if sys.modules.get(m, 0) is None:
                del sys.modules[m]
    return tf, keras


def gpu_nvml_target(offset: int = 0) -> tuple[str | None, int]:
    """(UUID, index) of TensorFlow's ``GPU:0`` for NVML, which is the ``offset``-th GPU the
    process can see (a multi-worker ``per_device`` worker: its local rank): that entry of
    ``CUDA_VISIBLE_DEVICES`` (a UUID or an index), else index ``offset``."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
               if v.strip()]
    if len(visible) > offset:
        entry = visible[offset]
        if entry.startswith(("GPU-", "MIG-")):
            return entry, 0
        if entry.isdigit():
            return None, int(entry)
    return None, offset


# --- settings that must precede any TensorFlow op -------------------------------------------


def apply_threads(tf: Any, threads: int | None) -> dict[str, Any]:
    """Set TensorFlow's thread pools for ``--threads`` (module docstring); return them as
    applied: ``intra_op_threads``, ``inter_op_threads`` (0 = TensorFlow's default) and
    ``threads`` (the effective compute threads).

    Raises:
        ConfigError: TensorFlow already runs in this process with other pool sizes.
    """
    cur = lambda: (tf.config.threading.get_intra_op_parallelism_threads(),  # noqa: E731
                   tf.config.threading.get_inter_op_parallelism_threads())
    if threads:
        want = (threads, 1)
        try:
            tf.config.threading.set_intra_op_parallelism_threads(want[0])
            tf.config.threading.set_inter_op_parallelism_threads(want[1])
        except RuntimeError:
            if cur() != want:
                raise ConfigError(
                    f"--threads {threads}: TensorFlow already runs in this process with "
                    f"intra/inter-op pools of {cur()} (0 = default) and cannot change them; "
                    f"run the configuration in a fresh process (the CLI runs each in its "
                    f"own worker)") from None
    intra, inter = cur()
    try:
        n_cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        n_cpus = os.cpu_count() or 1
    return {"intra_op_threads": intra, "inter_op_threads": inter,
            "threads": intra if intra > 0 else n_cpus}


def select_device(tf: Any, device: str) -> tuple[str, bool, dict[str, Any]]:
    """Make only the devices of ``device`` visible; return (TF device name, is_gpu, flags).

    Raises:
        UnavailableError: ``cuda`` asked for but TensorFlow sees no GPU, or ``cpu`` asked for
            in a process where TensorFlow already runs on a GPU.
    """
    gpus = tf.config.list_physical_devices("GPU")
    if device == "cuda":
        if not gpus:
            raise UnavailableError(
                "device 'cuda' was asked for but TensorFlow sees no GPU (is this the "
                "tensorflow-cpu build?); use --device cpu (or --device auto)")
        try:
            tf.config.set_visible_devices(gpus[0], "GPU")
        except RuntimeError:  # runtime already started: GPU:0 is the first visible anyway
            pass
        try:
            growth = bool(tf.config.experimental.get_memory_growth(gpus[0]))
        except Exception:  # noqa: BLE001
            growth = None
        return "/GPU:0", True, {"memory_growth": growth, "visible_gpus": 1}
    hidden = True
    if gpus:
        try:
            tf.config.set_visible_devices([], "GPU")
        except RuntimeError:
            hidden = not tf.config.list_logical_devices("GPU")
    if not hidden:
        raise UnavailableError(
            "device 'cpu' was asked for but TensorFlow already runs on a GPU in this "
            "process and cannot hide it; run the configuration in a fresh process")
    return "/CPU:0", False, {"memory_growth": None, "visible_gpus": 0}


def apply_precision(tf: Any, keras: Any, precision: str) -> dict[str, Any]:
    """Set TF32 and the Keras policy for ``precision``; return them as applied."""
    tf32 = precision == "tf32"
    tf.config.experimental.enable_tensor_float_32_execution(tf32)
    keras.mixed_precision.set_global_policy(KERAS_POLICY[precision])
    policy = keras.mixed_precision.global_policy()
    return {"tf32": bool(tf.config.experimental.tensor_float_32_execution_enabled()),
            "keras_policy": policy.name, "compute_dtype": policy.compute_dtype,
            "variable_dtype": policy.variable_dtype, "loss_dtype": "float32"}


class TensorFlowAdapter:
    """The TensorFlow framework adapter (see the module docstring for its choices)."""

    name = "tensorflow"
    modes = ("eager", "graph", "xla")
    #: available() imports TensorFlow and Keras (seconds): ``dlperf env`` asks it in a child
    #: process.
    available_imports = True

    def available(self) -> tuple[bool, str]:
        """(True, TensorFlow version) if TensorFlow and Keras 3 import, else (False, reason)."""
        try:
            tf, keras = import_tf()
        except UnavailableError as e:
            return False, str(e)
        except Exception as e:  # pragma: no cover - depends on the install
            from dlperf.install import install_hint

            return False, (f"tensorflow/keras is not installed ({e}); "
                           f"{install_hint('tensorflow-cpu', 'tensorflow-cuda')}")
        if not keras.__version__.startswith("3"):  # pragma: no cover - depends on the install
            return False, f"keras {keras.__version__} is installed; dlperf needs Keras 3"
        return True, tf.__version__

    def devices(self) -> list[str]:
        """``cpu`` always, ``cuda`` when TensorFlow sees a GPU (never with tensorflow-cpu)."""
        tf, _ = import_tf()
        return ["cpu"] + (["cuda"] if tf.config.list_physical_devices("GPU") else [])

    def is_oom(self, exc: BaseException) -> bool:
        """True for ``tf.errors.ResourceExhaustedError`` (GPU and CPU allocators, XLA) and
        allocator failures reported as other errors ("OOM when allocating")."""
        try:
            import tensorflow as tf
        except Exception:  # pragma: no cover
            return False
        if isinstance(exc, tf.errors.ResourceExhaustedError):
            return True
        msg = str(exc)
        return isinstance(exc, (tf.errors.OpError, RuntimeError, MemoryError)) and (
            "OOM when allocating" in msg or "out of memory" in msg.lower())

    def prepare(self, cfg: RunConfig, spec: ModelSpec) -> TensorFlowRun:
        """Build model, optimizer, data and the step function for ``cfg`` (module docstring).

        Raises:
            ConfigError: ``--threads`` after TensorFlow started, or a data-parallel
                configuration TensorFlow cannot run (:mod:`dlperf.frameworks.tensorflow.dist`).
            UnavailableError: the device, or the model's Keras implementation, is missing.
            DataError: the data set cannot feed this model.
        """
        tf, keras = import_tf()
        return TensorFlowRun(tf, keras, cfg, spec)


class TensorFlowRun(TfStep):
    """A prepared TensorFlow configuration (:class:`~dlperf.frameworks.base.TrainingRun`): the
    staged step of :class:`~dlperf.frameworks.tensorflow.step.TfStep` plus memory, FLOPs,
    ceilings and traces. Preparing follows TensorFlow's order: thread pools and devices (and a
    strategy) before any op, then precision, model, optimizer, data and the traced step."""

    def __init__(self, tf: Any, keras: Any, cfg: RunConfig, spec: ModelSpec) -> None:
        self.tf, self.keras = tf, keras
        self.flags = {"mode": cfg.runtime.mode}
        self.flags.update(apply_threads(tf, cfg.hardware.threads))  # before TensorFlow runs anything
        self._place(cfg)
        self._apply_settings(cfg)
        impl = self._build(cfg, spec)
        data = make_source(tf, cfg, spec, self._dev, self._gpu, impl, rows=self._rows,
                           on_host=self._strategy is not None)
        self._close_data = data.close
        train = TrainStep(tf, self._model, self._tvars, self._opt, self._l2,
                          make_loss(tf, spec, impl), cfg.workload.grad_accum, cfg.world_size)
        step_fn = train.replica
        if self._strategy is not None:
            step_fn = tf_dist.replicated_step(tf, self._strategy, train.replica, cfg.world_size,
                                              len(self._strategy.extended.worker_devices))
            data = tf_dist.distribute_source(tf, self._strategy, data, cfg.per_device_batch,
                                             self._first_replica, cfg.input.data == "synthetic")
        self._init_step(tf, data, train, step_fn, cfg.runtime.mode, self._strategy is not None,
                        self._gpu)
        self.data_info, self.data_wait = data.info, data.wait
        self.versions = probes.versions(tf, keras, self._gpu)
        self.timer = self._make_timer()
        # The staged step splits one device's step: no breakdown under a strategy.
        self.phased_step = self.staged_step if self._strategy is None else None

    # --- preparing ---------------------------------------------------------------------------

    def _place(self, cfg: RunConfig) -> None:
        """Devices, and for a data-parallel run the strategy (created before any other
        TensorFlow op, as ``MultiWorkerMirroredStrategy`` requires) and this worker's rows."""
        tf = self.tf
        self._strategy, self.dist, self._rows, self._first_replica = None, None, None, 0
        nvml_offset = 0
        if cfg.distributed:
            devices, gpu, dev_flags = tf_dist.configure_devices(tf, cfg)
            self._strategy, self.dist = tf_dist.make_strategy(tf, cfg, devices)
            dev = devices[0]
            self.flags["data_parallel"] = self.dist.info
            if tf_dist.multi_worker(cfg):  # this worker feeds its replicas' rows only
                self._rows = tf_dist.worker_rows(cfg, self.dist.rank)
                self._first_replica = self.dist.rank * tf_dist.local_replicas(cfg)
                nvml_offset = dev_flags.get("first_gpu_index", 0)
        else:
            dev, gpu, dev_flags = select_device(tf, cfg.hardware.device)
        self.flags.update(dev_flags)
        self._dev, self._gpu = dev, gpu
        self.nvml_target = gpu_nvml_target(nvml_offset) if gpu else None

    def _placement(self) -> Any:
        """The context variables are made in: the strategy's scope, else the device."""
        if self._strategy is not None:
            return self._strategy.scope()
        return self.tf.device(self._dev)

    def _apply_settings(self, cfg: RunConfig) -> None:
        """Precision, seeds and the recorded settings; resets the GPU's memory peak."""
        tf, keras, flags = self.tf, self.keras, self.flags
        flags.update(apply_precision(tf, keras, cfg.hardware.precision))
        flags["grad_accum"] = cfg.workload.grad_accum
        flags["jit_compile"] = cfg.runtime.mode == "xla"
        flags["onednn_opts"] = os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default (on for x86)")
        keras.utils.set_random_seed(cfg.workload.seed)
        if self._gpu:
            tf.config.experimental.reset_memory_stats("GPU:0")

    def _build(self, cfg: RunConfig, spec: ModelSpec) -> Any:
        """The Keras model (its recurrent layers set for the mode) and its optimizer, built
        under the placement; returns the zoo implementation module."""
        impl, self._model = build_model(spec, "tensorflow", "Keras", around=self._placement)
        self.flags["layout"] = "NHWC" if spec.input_kind == "image" else None
        self._rnn_flags(cfg, spec, impl)
        self._tvars = list(self._model.trainable_variables)
        with self._placement():
            self._opt, self._l2 = make_optimizer(self.keras, spec, self.flags)
            self._opt.build(self._tvars)
        return impl

    def _rnn_flags(self, cfg: RunConfig, spec: ModelSpec, impl: Any) -> None:
        """cuDNN off for XLA (it cannot compile the cuDNN op); ``rnn_cudnn``, ``rnn_loop``."""
        rnns = impl.recurrent_layers(self._model) if hasattr(impl, "recurrent_layers") else []
        if not rnns:
            self.flags["rnn_cudnn"] = self.flags["rnn_loop"] = None
            return
        for layer in rnns:
            if cfg.runtime.mode == "xla":
                layer.use_cudnn = False
        self.flags["rnn_cudnn"] = rnns[0].use_cudnn if self._gpu else False
        steps = spec.input_shape[0] if spec.input_kind == "tokens" else None
        self.flags["rnn_loop"] = (impl.rnn_loop(rnns[0], steps) if hasattr(impl, "rnn_loop")
                                  else None)

    def _make_timer(self) -> Any:
        """CPU: TensorFlow runs synchronously there, so the host clock is exact and a lagged
        read would misattribute time; GPU: lagged reads (module docstring, "Timing")."""
        if self._gpu:
            self.flags["timer"] = f"lagged_sync(lag={TIMER_LAG}, block=Tensor.numpy)"
            return LaggedSyncTimer(block=lambda t: t.numpy(), lag=TIMER_LAG)
        self.flags["timer"] = "host_clock (synchronous CPU execution)"
        return HostTimer()

    # --- after the loop ------------------------------------------------------------------------

    def losses_to_floats(self, handles: list[Any]) -> list[float]:
        """Loss tensors -> floats, in one stacked device-to-host copy."""
        if not handles:
            return []
        tf = self.tf
        return tf.stack([tf.cast(h, tf.float32) for h in handles]).numpy().tolist()

    def memory(self) -> dict[str, int | None]:
        """Memory peaks in bytes (:func:`dlperf.frameworks.tensorflow.probes.memory`)."""
        return probes.memory(self.tf, self._gpu, self.nvml_target)

    def count_flops(self) -> dict[str, Any]:
        """TensorFlow's profiler count of the step's graph (no step runs):
        :func:`~dlperf.frameworks.tensorflow.probes.count_step_flops`."""
        local = (None if self._strategy is None
                 else len(self._strategy.extended.worker_devices))
        return probes.count_step_flops(self.tf, self._fn, self._traced, self._data.first, local)

    def ceiling_backend(self) -> probes.TfCeilings:
        """The ceiling microbenchmarks' kernels on the run's device."""
        return probes.TfCeilings(self.tf, self._dev, self._gpu)

    def profile(self, n: int, folder: Any) -> dict[str, Any]:
        """One warm-up and ``n`` steps under TensorFlow's profiler
        (:func:`~dlperf.frameworks.tensorflow.profile.profile_steps`): an eager step on one
        device with its stages annotated; otherwise whole fused steps (under a strategy every
        rank traces the same steps, so the workers' collectives stay matched)."""
        mode = self.flags["mode"]
        run = self.step
        if mode == "eager" and self.phased_step is not None:
            self._span = phase_spans(self.tf)
            run = lambda: self.staged_step(no_mark)  # noqa: E731
        try:
            return profile_steps(self.tf, run, n, folder, mode,
                                 self._fn if mode == "xla" else None, self._data.first,
                                 self._model.name)
        finally:
            self._span = no_span

    def close(self) -> None:
        """Stop the input, drop the model, optimizer and step, and reset Keras's policy and
        session (so configurations in one process do not leak into each other)."""
        self._close_data()
        self._model = self._opt = self._fn = self._train = self._tvars = None
        self._data = None
        self.keras.mixed_precision.set_global_policy("float32")
        self.keras.backend.clear_session()
        gc.collect()
