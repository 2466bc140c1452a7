"""TensorFlow adapter: Keras 3 models (TensorFlow backend) trained by a hand-written step.

Modes (``--framework tensorflow --mode ...``): the same Python train step (``tf.GradientTape``
forward + loss, gradient, ``optimizer.apply``) run

* ``eager``: op by op, as plain Python;
* ``graph``: wrapped in ``tf.function`` (traced once into a graph, optimised by Grappler);
* ``xla``: wrapped in ``tf.function(jit_compile=True)`` (the whole step compiled by XLA).

Choices (each recorded in ``Session.flags``, docs/measurement.md rule 6):

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
* compilation (rule 4): in ``graph``/``xla`` the step is traced before timing
  (``get_concrete_function`` on the first batch's shapes: ``trace_time_s``). Graph
  optimisation / XLA compilation happen in the first call, which the harness times as its
  first iteration; the adapter also times the first two calls, each to completion
  (``first_call_s``, ``second_call_s``), and reports ``compile_time_s = trace_time_s +
  max(0, first_call_s - second_call_s)`` (compilation, without the one step the first call also
  executes). ``retraces`` is ``tf.function``'s ``experimental_get_tracing_count()``: 1 means
  traced once and never again; ``recompiles_measured`` counts traces during measurement. In
  ``eager`` mode nothing is traced or compiled: ``compile_time_s = 0`` and ``retraces = 0``.
* synthetic data: a pool of 4 distinct batches made on the device before timing (stateless
  RNG, seeded by ``cfg.seed``), cycled. Real data: batches from :func:`dlperf.data.make_batches`
  (images transposed NCHW -> NHWC once, on the host) kept as host tensors; on a GPU each step
  copies its batch to the device (inside the iteration, as PyTorch's adapter does; TensorFlow
  has no pinned host tensors, so the copy is from pageable memory).
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

Real data through a pipeline (``--loader-workers N``, always for an ImageFolder): ``tf.data``
with map / batch / prefetch (``frameworks/tf_input.py``); the time the step waits for
``next(iterator)`` is recorded (``Session.data_wait``). FLOPs: TensorFlow's profiler over the
traced step graph (``frameworks/tf_probes.py``); ceilings with ``tf.linalg.matmul``.

Memory: CPU: peak RSS, and ``get_memory_info("CPU:0")``'s peak as ``peak_allocated_bytes``
(TensorFlow's CPU allocator, since the process's first op). GPU: ``tf.config.experimental.get_memory_info("GPU:0")`` peak (as
``peak_allocated_bytes``, the BFC allocator's peak in use; reset in ``prepare``) and current,
plus NVML's device view; TensorFlow does not expose its reserved pool, so
``peak_reserved_bytes`` is None (NVML ``used`` includes it, plus the CUDA context).
Versions: tensorflow, keras, and CUDA/cuDNN of the build (``tf.sysconfig.get_build_info()``).

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
import itertools
import os
import resource
import sys
import time
from typing import Any

# TensorFlow's C++ INFO/WARNING lines (oneDNN notice, absl) would clutter dlperf's output;
# errors still print. A user's own setting wins.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from dlperf import nvml  # noqa: E402
from dlperf.config import RunConfig
from dlperf.errors import ConfigError, UnavailableError
from dlperf.frameworks.base import DataSource, Session, build_model, identity
from dlperf.measure.timers import HostTimer, LaggedSyncTimer
from dlperf.zoo.spec import ModelSpec

SYNTHETIC_POOL = 4
#: Real data: at most this many distinct batches are kept on the host and cycled.
MAX_REAL_BATCHES = 512
#: Steps that may be in flight when the lagged timer reads the clock.
TIMER_LAG = 2
#: Keras global policy per precision.
KERAS_POLICY = {"fp32": "float32", "tf32": "float32", "bf16": "mixed_bfloat16"}


def _peak_rss_bytes() -> int:
    # ru_maxrss is in kilobytes on Linux (getrusage(2)).
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def import_tf() -> tuple[Any, Any]:
    """Import TensorFlow and Keras 3 with the TensorFlow backend; return ``(tf, keras)``.

    Sets ``KERAS_BACKEND=tensorflow`` before keras is first imported, and turns GPU memory
    growth on for every GPU before TensorFlow runs anything (a no-op on a CPU-only build).

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
    import tensorflow as tf

    for gpu in tf.config.list_physical_devices("GPU"):
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except (RuntimeError, ValueError):  # the runtime already started: recorded in flags
            pass
    import keras

    return tf, keras


def _gpu_nvml_target(offset: int = 0) -> tuple[str | None, int]:
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


class _NullContext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


_nullcontext = _NullContext()


def _tf_block(tf: Any):
    """Wait for a phase's output on a GPU: ``tf.test.experimental.sync_devices()`` where
    TensorFlow has it (>= 2.13), else read the output's first element to the host."""
    sync = getattr(getattr(getattr(tf, "test", None), "experimental", None), "sync_devices",
                   None)
    if sync is not None:
        return lambda handle: sync()
    return lambda handle: tf.reshape(handle, [-1])[:1].numpy()


class TensorFlowAdapter:
    """The TensorFlow framework adapter (see the module docstring for its choices)."""

    name = "tensorflow"
    modes = ("eager", "graph", "xla")

    def available(self) -> tuple[bool, str]:
        """(True, TensorFlow version) if TensorFlow and Keras 3 import, else (False, reason)."""
        try:
            tf, keras = import_tf()
        except UnavailableError as e:
            return False, str(e)
        except Exception as e:  # pragma: no cover - depends on the install
            return False, (f"tensorflow/keras is not installed ({e}); "
                           f"pip install 'dlperf[tensorflow]'")
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

    # --- settings that must precede any TensorFlow op ------------------------------------------

    @staticmethod
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

    @staticmethod
    def select_device(tf: Any, device: str) -> tuple[str, bool, dict[str, Any]]:
        """Make only the devices of ``device`` visible; return (TF device name, is_gpu, flags).

        Raises:
            UnavailableError: ``cuda`` asked for but TensorFlow sees no GPU.
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

    @staticmethod
    def apply_precision(tf: Any, keras: Any, precision: str) -> dict[str, Any]:
        """Set TF32 and the Keras policy for ``precision``; return them as applied."""
        tf32 = precision == "tf32"
        tf.config.experimental.enable_tensor_float_32_execution(tf32)
        keras.mixed_precision.set_global_policy(KERAS_POLICY[precision])
        policy = keras.mixed_precision.global_policy()
        return {"tf32": bool(tf.config.experimental.tensor_float_32_execution_enabled()),
                "keras_policy": policy.name, "compute_dtype": policy.compute_dtype,
                "variable_dtype": policy.variable_dtype, "loss_dtype": "float32"}

    # --- the session ---------------------------------------------------------------------------

    def prepare(self, cfg: RunConfig, spec: ModelSpec) -> Session:
        """Build model, optimizer, data and the step function for ``cfg`` (module docstring)."""
        tf, keras = import_tf()
        flags: dict[str, Any] = {"mode": cfg.mode}
        flags.update(self.apply_threads(tf, cfg.threads))  # before TensorFlow runs anything
        strategy, dist_ctx, rows, first_replica = None, None, None, 0
        nvml_offset = 0
        if cfg.distributed:
            from dlperf.frameworks.tensorflow import dist as tf_dist

            # Before anything else runs: devices, then the strategy (a MultiWorkerMirrored-
            # Strategy must be created before any other TensorFlow op).
            devices, gpu, dev_flags = tf_dist.configure_devices(tf, cfg)
            strategy, dist_ctx = tf_dist.make_strategy(tf, cfg, devices)
            dev = devices[0]
            flags["data_parallel"] = dist_ctx.info
            if tf_dist.multi_worker(cfg):  # this worker feeds its replicas' rows only
                rows = tf_dist.worker_rows(cfg, dist_ctx.rank)
                first_replica = dist_ctx.rank * tf_dist.local_replicas(cfg)
                nvml_offset = dev_flags.get("first_gpu_index", 0)
        else:
            dev, gpu, dev_flags = self.select_device(tf, cfg.device)
        flags.update(dev_flags)
        n_rep = cfg.world_size
        # This process's replicas: the loss it returns is the mean over its rows.
        n_local = n_rep if strategy is None else len(strategy.extended.worker_devices)
        # Model and optimizer variables: mirrored under the strategy, else on the device.
        placement = (strategy.scope if strategy is not None else lambda: tf.device(dev))
        flags.update(self.apply_precision(tf, keras, cfg.precision))
        flags["grad_accum"] = cfg.grad_accum
        flags["jit_compile"] = cfg.mode == "xla"
        flags["onednn_opts"] = os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default (on for x86)")
        keras.utils.set_random_seed(cfg.seed)
        if gpu:
            tf.config.experimental.reset_memory_stats("GPU:0")

        impl, model = build_model(spec, "tensorflow", "Keras", around=placement)
        flags["layout"] = "NHWC" if spec.input_kind == "image" else None
        rnns = impl.recurrent_layers(model) if hasattr(impl, "recurrent_layers") else []
        if rnns:
            for layer in rnns:
                if cfg.mode == "xla":
                    layer.use_cudnn = False
            flags["rnn_cudnn"] = rnns[0].use_cudnn if gpu else False
            steps = spec.input_shape[0] if spec.input_kind == "tokens" else None
            flags["rnn_loop"] = (impl.rnn_loop(rnns[0], steps) if hasattr(impl, "rnn_loop")
                                 else None)
        else:
            flags["rnn_cudnn"] = flags["rnn_loop"] = None
        tvars = list(model.trainable_variables)
        with placement():
            opt, l2 = self._optimizer(keras, spec, flags)
            opt.build(tvars)

        src = self._data(tf, cfg, spec, dev, gpu, impl, rows=rows, on_host=strategy is not None)
        next_batch, data_info, first_batch = src.next_batch, src.info, src.first
        fetch, to_device, data_wait, close_data = src.fetch, src.to_device, src.wait, src.close
        loss_fn = self._loss(tf, spec, impl)
        K = cfg.grad_accum

        def train_step(x, y):
            # One replica's step; n_rep replicas' gradients are summed by the optimizer.
            if K == 1:
                with tf.GradientTape() as tape:
                    loss = loss_fn(model(x, training=True), y)
                    if n_rep > 1:
                        loss = loss / n_rep
                grads = tape.gradient(loss, tvars)
            else:
                grads, loss = None, None
                for xs, ys in zip(tf.split(x, K), tf.split(y, K)):
                    with tf.GradientTape() as tape:
                        part = loss_fn(model(xs, training=True), ys) / (K * n_rep)
                    g = [tf.convert_to_tensor(gi) for gi in tape.gradient(part, tvars)]
                    grads = g if grads is None else [a + b for a, b in zip(grads, g)]
                    loss = part if loss is None else loss + part
            if l2:
                grads = [tf.convert_to_tensor(g) + (l2 / n_rep) * v.value
                         for g, v in zip(grads, tvars)]
            opt.apply(grads, tvars)
            return loss

        step_fn = train_step
        if strategy is not None:
            from dlperf.frameworks.tensorflow.dist import distribute

            scale = n_rep / n_local  # replicas' losses are divided by n_rep: this gives the mean

            def step_fn(x, y):
                # This process's replicas only (no collective for the loss; module docstring).
                per = strategy.run(train_step, args=(x, y))
                local = tf.add_n(strategy.experimental_local_results(per))
                return local * scale if scale != 1 else local

            host_batch = next_batch
            pdb = cfg.per_device_batch
            if cfg.data == "synthetic":  # placed on the replicas' devices once, before timing
                pool = [distribute(tf, strategy, host_batch(), pdb, first_replica)
                        for _ in range(SYNTHETIC_POOL)]
                next_batch = itertools.cycle(pool).__next__
                first_batch = pool[0]
            else:  # each step copies its rows to each replica's device

                def next_batch():
                    return distribute(tf, strategy, host_batch(), pdb, first_replica)

                first_batch = distribute(tf, strategy, first_batch, pdb, first_replica)
        traced = cfg.mode in ("graph", "xla")
        fn = tf.function(step_fn, jit_compile=cfg.mode == "xla") if traced else step_fn
        flags["trace_time_s"] = 0.0
        if traced:
            specs = ([tf.TensorSpec.from_tensor(t) for t in first_batch]
                     if strategy is None else list(first_batch))
            t0 = time.perf_counter()
            fn.get_concrete_function(*specs)
            flags["trace_time_s"] = time.perf_counter() - t0
        flags["first_call_s"] = flags["second_call_s"] = None

        def tracing_count() -> int:
            return int(fn.experimental_get_tracing_count()) if traced else 0

        def compile_time() -> float:
            if not traced:
                return 0.0
            first, second = flags["first_call_s"], flags["second_call_s"]
            extra = max(0.0, first - second) if first is not None and second is not None \
                else (first or 0.0)
            return flags["trace_time_s"] + extra

        flags["compile_time_s"] = compile_time()
        flags["retraces"] = tracing_count()
        calls = 0

        def timed_call(x, y):
            # The first two calls only: each timed to completion (compile time, module docs).
            nonlocal calls
            t0 = time.perf_counter()
            out = fn(x, y)
            out.numpy()
            flags["first_call_s" if calls == 0 else "second_call_s"] = time.perf_counter() - t0
            calls += 1
            return out

        def step():
            x, y = next_batch()
            if calls < 2:
                return timed_call(x, y)
            return fn(x, y)

        at_measure: dict[str, int] = {}

        def on_phase(phase: str) -> None:
            if phase == "measure":
                at_measure["traces"] = tracing_count()
                if data_wait is not None:
                    data_wait.mark_measure()

        def count_flops() -> dict[str, Any]:
            from dlperf.frameworks.tensorflow.probes import count_graph_flops

            if strategy is not None:
                # The distributed step holds one copy of the replica step per local device
                # (graph: the function already traced; eager: a trace, never run; every rank
                # traces the same, so collective keys stay matched): one device's share is
                # the count over the local replicas (MFU is per device, per-device batch).
                g = fn if traced else tf.function(step_fn)
                out = count_graph_flops(tf, g.get_concrete_function(*first_batch))
                if out["flops_per_step"]:
                    out["flops_per_step"] /= n_local
                    out["source"] += (f" (tf.distribute step over {n_local} local replica(s), "
                                      f"divided by {n_local}; collectives count 0)")
                return out
            specs = [tf.TensorSpec.from_tensor(t) for t in first_batch]
            # Graph modes: the concrete function already traced (no retrace); eager: a trace of
            # the same Python step, never run.
            g = fn if traced else tf.function(train_step)
            return count_graph_flops(tf, g.get_concrete_function(*specs))

        def ceiling_backend():
            from dlperf.frameworks.tensorflow.probes import TfCeilings

            return TfCeilings(tf, dev, gpu)

        def compile_info() -> dict[str, Any]:
            n = tracing_count()
            flags["retraces"], flags["compile_time_s"] = n, compile_time()
            return {"compile_time_s": flags["compile_time_s"], "n_compiles": n,
                    "recompiles_measured": n - at_measure.get("traces", n)}

        def phased_step(mark, annotate=None):
            # eager: the step cut at its phase boundaries (each phase's output waited for on
            # a GPU); graph/xla: the compiled step as one phase, t_fbu, split by the trace.
            # ``annotate``: a TraceMe per phase, for the profiled eager steps.
            span = annotate or (lambda name: _nullcontext)
            b = fetch()
            mark("t_io")
            with span("t_h2d"):
                x, y = to_device(b)
            mark("t_h2d", y)
            if traced:
                out = fn(x, y)
                mark("t_fbu", out)
                return out
            grads, total = None, None
            for xs, ys in (zip(tf.split(x, K), tf.split(y, K)) if K > 1 else ((x, y),)):
                with span("t_f"):
                    with tf.GradientTape() as tape:
                        part = loss_fn(model(xs, training=True), ys)
                        if K > 1:
                            part = part / K
                mark("t_f", part)
                with span("t_b"):
                    g = [tf.convert_to_tensor(gi) for gi in tape.gradient(part, tvars)]
                mark("t_b", g[-1])
                grads = g if grads is None else [a + b_ for a, b_ in zip(grads, g)]
                total = part if total is None else total + part
            with span("t_u"):
                if l2:
                    grads = [g + l2 * v.value for g, v in zip(grads, tvars)]
                opt.apply(grads, tvars)
            mark("t_u", tvars[-1].value)
            return total

        def phase_timer():
            from dlperf.measure.phases import HostPhaseTimer

            # CPU: TensorFlow runs synchronously, nothing to wait for. GPU: wait for the phase's
            # output tensor (no device-event API in TensorFlow).
            return HostPhaseTimer(block=_tf_block(tf) if gpu else None)

        def profile(n: int, folder):
            # Under a strategy every rank traces the same whole steps (eager too: the phased
            # step is not data parallel), so the workers' collectives stay matched.
            return self._profile(tf, step, phased_step if strategy is None else None, cfg.mode,
                                 fn if cfg.mode == "xla" else None, first_batch, model.name, n,
                                 folder)

        def losses_to_floats(handles: list[Any]) -> list[float]:
            if not handles:
                return []
            return tf.stack([tf.cast(h, tf.float32) for h in handles]).numpy().tolist()

        uuid, index = _gpu_nvml_target(nvml_offset)

        def memory() -> dict[str, int | None]:
            m: dict[str, int | None] = {"peak_rss_bytes": _peak_rss_bytes(),
                                        "peak_allocated_bytes": None, "peak_reserved_bytes": None,
                                        "nvml_used_bytes": None}
            if gpu:
                info = tf.config.experimental.get_memory_info("GPU:0")
                m["peak_allocated_bytes"] = int(info["peak"])
                m["current_allocated_bytes"] = int(info["current"])
                m["nvml_used_bytes"] = nvml.memory_used_bytes(uuid, index)
            else:
                try:  # TensorFlow's CPU allocator tracks its peak too (since its first op)
                    info = tf.config.experimental.get_memory_info("CPU:0")
                    m["peak_allocated_bytes"] = int(info["peak"])
                    m["current_allocated_bytes"] = int(info["current"])
                except (ValueError, RuntimeError):  # not tracked by this build
                    pass
            return m

        build_info = dict(tf.sysconfig.get_build_info())
        versions: dict[str, Any] = {
            "framework": "tensorflow", "tensorflow": tf.__version__, "keras": keras.__version__,
            "cuda": build_info.get("cuda_version"), "cudnn": build_info.get("cudnn_version"),
            "nccl": None, "cuda_build": bool(build_info.get("is_cuda_build"))}
        if gpu:
            details = tf.config.experimental.get_device_details(
                tf.config.get_visible_devices("GPU")[0])
            versions["device_name"] = details.get("device_name")
            cc = details.get("compute_capability")
            versions["capability"] = ".".join(map(str, cc)) if cc else None
        else:
            from dlperf.env import cpu_model

            versions["device_name"] = cpu_model()
        # CPU: TensorFlow runs synchronously there, so the host clock is exact and a lagged
        # read would misattribute time; GPU: lagged reads (see "Timing" in the module docs).
        if gpu:
            timer: Any = LaggedSyncTimer(block=lambda t: t.numpy(), lag=TIMER_LAG)
            flags["timer"] = f"lagged_sync(lag={TIMER_LAG}, block=Tensor.numpy)"
        else:
            timer = HostTimer()
            flags["timer"] = "host_clock (synchronous CPU execution)"

        def close() -> None:
            nonlocal model, opt, fn
            close_data()
            del model, opt, fn
            keras.mixed_precision.set_global_policy("float32")
            keras.backend.clear_session()
            gc.collect()

        return Session(step=step, timer=timer, losses_to_floats=losses_to_floats, memory=memory,
                       versions=versions, flags=flags, data_info=data_info, close=close,
                       on_phase=on_phase, compile_info=compile_info,
                       # the phased step splits one device's step: not under a strategy
                       phased_step=phased_step if strategy is None else None,
                       phase_timer=phase_timer, profile=profile, data_wait=data_wait,
                       nvml_target=(uuid, index) if gpu else None, count_flops=count_flops,
                       ceiling_backend=ceiling_backend,
                       dist=dist_ctx)

    @staticmethod
    def _profile(tf: Any, step: Any, phased_step: Any, mode: str, xla_fn: Any, first_batch: Any,
                 model_scope: str, n: int, folder: Any) -> dict[str, Any]:
        """Trace one warm-up and ``n`` steps with ``tf.profiler.experimental`` into ``folder``,
        each step in ``Trace("dlperf_step", step_num=i)`` (eager: each phase in
        ``Trace("dlperf_phase:t_x")`` too); read the XSpace with TensorFlow's ``xplane_pb2``,
        write it as Chrome-trace JSON (``folder/trace.json.gz``) and parse it; in ``xla`` mode
        with the optimised HLO of the step (``experimental_get_compiler_ir``) for op names."""
        from pathlib import Path

        from dlperf.measure.breakdown.xspace import (PHASE_PREFIX, STEP_NAME, load_planes, tf_trace,
                                             to_chrome_trace)

        trace_me = tf.profiler.experimental.Trace
        if mode == "eager" and phased_step is not None:
            def run():
                return phased_step(lambda *a, **k: None,
                                   annotate=lambda p: trace_me(PHASE_PREFIX + p))
        else:
            run = step
        tf.profiler.experimental.start(str(folder))
        try:
            out = run()  # warm-up inside the profiler, not annotated
            for i in range(n):
                with trace_me(STEP_NAME, step_num=i, _r=1):
                    out = run()
            out.numpy()
        finally:
            tf.profiler.experimental.stop()
        planes, xplane = load_planes(folder, prefer="protobuf")
        hlo = None
        if xla_fn is not None:
            from dlperf.measure.breakdown.xla import parse_hlo

            hlo = parse_hlo(xla_fn.experimental_get_compiler_ir(*first_batch)(
                stage="optimized_hlo"))
        trace = tf_trace(planes, mode, hlo, model_scope=model_scope)
        chrome = to_chrome_trace(planes, Path(folder) / "trace.json.gz")
        return {"trace": trace, "files": {"xplane": xplane, "logdir": folder,
                                          "chrome_trace": chrome}}

    # --- parts -------------------------------------------------------------------------------

    @staticmethod
    def _optimizer(keras: Any, spec: ModelSpec, flags: dict[str, Any]) -> tuple[Any, float]:
        """The spec's optimizer and the coupled L2 coefficient to add to the gradients."""
        o = spec.optimizer
        betas = tuple(getattr(o, "betas", (0.9, 0.999)))
        eps = float(getattr(o, "eps", 1e-8))
        if o.name == "sgd":
            opt = keras.optimizers.SGD(learning_rate=o.lr, momentum=o.momentum)
            l2 = o.weight_decay
        elif o.name == "adam":
            opt = keras.optimizers.Adam(learning_rate=o.lr, beta_1=betas[0], beta_2=betas[1],
                                        epsilon=eps)
            l2 = o.weight_decay
        else:
            opt = keras.optimizers.AdamW(learning_rate=o.lr, weight_decay=o.weight_decay,
                                         beta_1=betas[0], beta_2=betas[1], epsilon=eps)
            l2 = 0.0
        flags["optimizer"] = {"name": o.name, "lr": o.lr, "momentum": o.momentum,
                              "weight_decay": o.weight_decay,
                              "weight_decay_kind": ("decoupled" if o.name == "adamw"
                                                    else "l2_in_gradient"),
                              "impl": f"keras.optimizers.{type(opt).__name__}"}
        if o.name != "sgd":
            flags["optimizer"].update(betas=list(betas), eps=eps)
        return opt, float(l2)

    @staticmethod
    def _loss(tf: Any, spec: ModelSpec, impl: Any):
        """``loss(out, y) -> scalar float32``: mean softmax cross-entropy of
        ``out.reshape(-1, C)`` against ``y.reshape(-1)`` (logits cast to float32), or the
        implementation module's ``loss_fn`` hook for specs outside the default contract."""
        if not getattr(spec, "default_io", True):
            if not hasattr(impl, "loss_fn"):
                raise UnavailableError(f"{spec.name}: {impl.__name__} has no loss_fn hook for "
                                       f"loss {spec.loss!r}")
            return impl.loss_fn(spec)
        n_classes = spec.num_classes

        def loss_fn(out, y):
            logits = tf.reshape(tf.cast(out, tf.float32), [-1, n_classes])
            return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=tf.reshape(y, [-1]), logits=logits))

        return loss_fn

    @staticmethod
    def _data(tf: Any, cfg: RunConfig, spec: ModelSpec, dev: str, gpu: bool, impl: Any,
              rows: tuple[int, int] | None = None, on_host: bool = False) -> DataSource:
        """The run's :class:`~dlperf.frameworks.base.DataSource`: ``next_batch()`` gives
        ``(x, y)``; ``to_device(fetch())`` gives the same in two parts (the batch as held, then
        placed on the run's device), for the breakdown's t_io and t_h2d; ``first`` is the batch
        the step is traced for; ``wait`` is the recorder of a pipeline (else None).

        The batches are global batches (``cfg.global_batch`` rows; data parallel: split across
        the replicas by the caller), or with ``rows = (lo, hi)`` (a multi-worker process) rows
        ``[lo, hi)`` of each global batch: synthetic batches are drawn for the global batch and
        cut (the same samples as one process would train on), prepared real batches are cut
        on the host, and a ``tf.data`` pipeline is sharded (worker ``i`` of ``W`` takes every
        ``W``-th sample from ``i``, before decoding, so each global batch holds the same
        samples as without sharding). ``on_host``: synthetic batches are drawn on the host CPU
        (the caller places the replicas' rows on their devices), so no device holds a global
        batch."""
        B = cfg.global_batch
        lo, hi = rows if rows is not None else (0, B)
        image = spec.input_kind == "image"
        if cfg.data == "synthetic":
            hook = None
            if not getattr(spec, "default_io", True):
                hook = getattr(impl, "synthetic_batch", None)
                if hook is None:
                    raise UnavailableError(f"{spec.name}: {impl.__name__} has no "
                                           f"synthetic_batch hook for {spec.input_kind} inputs")
            pool = []
            with tf.device("/CPU:0" if on_host else dev):
                for i in range(SYNTHETIC_POOL):
                    sx, sy = (cfg.seed, 2 * i), (cfg.seed, 2 * i + 1)
                    if hook is not None:
                        x, y = hook(spec, B, sx)
                    elif spec.input_kind == "tokens":
                        shape = (B, *spec.input_shape)
                        x = tf.random.stateless_uniform(shape, sx, 0, spec.num_classes, tf.int64)
                        y = tf.random.stateless_uniform(shape, sy, 0, spec.num_classes, tf.int64)
                    else:
                        c_h_w = tuple(spec.input_shape)
                        shape = (B, *c_h_w[1:], c_h_w[0]) if image else (B, *c_h_w)
                        x = tf.random.stateless_normal(shape, sx, dtype=tf.float32)
                        y = tf.random.stateless_uniform((B,), sy, 0, spec.num_classes, tf.int64)
                    if rows is not None:  # this worker's rows only (a copy: the rest is freed)
                        x, y = tf.identity(x[lo:hi]), tf.identity(y[lo:hi])
                    pool.append((x, y))
            it = itertools.cycle(pool)
            info = {"kind": "synthetic", "placement": "device",
                    "distinct_batches": SYNTHETIC_POOL, "layout": "NHWC" if image else None}
            if on_host:
                info["drawn_on"] = "host, then the replicas' rows copied to their devices"
            if rows is not None:
                info["rows"] = f"[{lo}, {hi}) of each global batch of {B}"
            return DataSource(it.__next__, info, it.__next__, identity, first=pool[0])

        from dlperf.data import load_dataset, make_batches
        from dlperf.zoo.convert_keras import nchw_to_nhwc

        ds = load_dataset(cfg.data, cfg.data_dir)
        if cfg.loader_workers is not None or ds.kind == "imagefolder":
            from dlperf.data.pipeline import DataWaitRecorder
            from dlperf.frameworks.tensorflow.input import make_dataset

            shard = None
            if rows is not None:
                shard = (B // (hi - lo), lo // (hi - lo))  # (workers, this worker's index)
            host_next, pipe, close = make_dataset(tf, cfg, spec, ds, batch=hi - lo,
                                                  shard=shard)
            first = host_next()  # for tracing; not part of the recorded waits
            rec = DataWaitRecorder()
            info = {"kind": "real", "dataset": ds.name, "path": str(ds.path),
                    "placement": "pipeline" + ("-host-pageable" if gpu else ""),
                    "pipeline": pipe, "layout": "NHWC" if image else None,
                    **{k: v for k, v in ds.meta.items()
                       if isinstance(v, (int, float, str, bool))}}
            nxt = rec.wrap(host_next)  # tf.data places the batches itself: no copy to split off
            return DataSource(nxt, info, nxt, identity, wait=rec, close=close, first=first)
        X, Y = make_batches(ds, spec, B, max_batches=MAX_REAL_BATCHES)
        if rows is not None:  # this worker's rows of every global batch
            X, Y = X[:, lo:hi], Y[:, lo:hi]
        if image:
            X = nchw_to_nhwc(X)  # [nb, B, C, H, W] -> [nb, B, H, W, C], once, on the host
        with tf.device("/CPU:0"):
            batches = [(tf.constant(X[i]), tf.constant(Y[i])) for i in range(X.shape[0])]
        it = itertools.cycle(batches)
        info = {"kind": "real", "dataset": ds.name, "path": str(ds.path),
                "placement": "host-pageable" if gpu else "host",
                "distinct_batches": int(X.shape[0]), "layout": "NHWC" if image else None,
                **({"rows": f"[{lo}, {hi}) of each global batch of {B}"} if rows else {}),
                **{k: v for k, v in ds.meta.items() if isinstance(v, (int, float, str, bool))}}

        def to_device(b):
            # The step function places its inputs on its device; here the copy is explicit so
            # that it is its own phase (an identity on the CPU).
            if not gpu:
                return b
            with tf.device(dev):
                return tf.identity(b[0]), tf.identity(b[1])

        return DataSource(it.__next__, info, it.__next__, to_device, first=batches[0])
