"""MXNet adapter: Gluon models trained imperatively (``eager``) or hybridized (``graph``), CPU only.

MXNet 1.9.1 is a framework of the seed papers (Shi et al. 2016 measured MXNet beside Caffe, CNTK,
TensorFlow and Torch). Its last release needs numpy < 1.24, which cannot share a venv with the
other frameworks (numpy 2), so it runs in an interpreter of its own: the launcher starts the
worker of an ``mxnet`` configuration with ``$DLPERF_MXNET_PYTHON`` and this dlperf's source
(:func:`dlperf.launch.process.worker_interpreter`, from ``python_env`` in the registry entry);
this module is imported there. Elsewhere it is only asked whether that interpreter works
(:meth:`MXNetAdapter.available`).

The folder: this module (the adapter and :class:`MXNetRun`, the prepared run), ``step.py`` (the
one staged training step, its loss and trainer), ``input.py`` (the batches).

Modes (``--framework mxnet --mode ...``), the same Python train step
(:class:`~dlperf.frameworks.mxnet.step.GluonStep`) with

* ``eager``: the Gluon model run imperatively, op by op;
* ``graph``: the model and its loss as one ``HybridBlock``, ``hybridize(static_alloc=True,
  static_shape=True)`` (a cached graph, memory planned once for the fixed shapes; Gluon's
  recommendation for speed).

Choices (each recorded in ``flags``, docs/measurement.md rule 6):

* device: ``cpu`` only; the pip wheel of MXNet 1.9.1 is a CPU build (with oneDNN, formerly
  MKL-DNN, and OpenBLAS). ``--device cuda`` and precisions other than ``fp32`` are refused
  before anything runs (:mod:`dlperf.registry`, :mod:`dlperf.config`) and again here.
* threads (``--threads N``): ``OMP_NUM_THREADS=N`` (the OpenMP pool each operator, oneDNN and
  OpenBLAS use) and ``MXNET_CPU_WORKER_NTHREADS=1`` (one engine worker: one operator at a time),
  so a step uses at most N compute threads, like ``torch.set_num_threads(N)`` and TensorFlow's
  ``intra_op = N, inter_op = 1``. MXNet reads both when its library loads, so they are set
  before ``import mxnet``; a process that already imported MXNet with other values gets a
  ConfigError (the CLI runs every configuration in a fresh worker). Without ``--threads``
  MXNet's defaults are kept and recorded.
* models: ``dlperf.zoo.<family>.mxnet_impl`` (fcn5, fcn8, fcn_mnist, alexnet, alexnet_cifar,
  resnet50, resnet56, lstm and their tiny variants; PyTorch's architectures, parameter counts
  and initialisation schemes, NCHW).
* optimizer, loss, gradient accumulation and timing: ``step.py``; data: ``input.py``.

Compilation (rule 4): in ``graph`` mode the cached graph is built in the first call; the adapter
counts and times the builds (``HybridBlock._build_cache``: ``n_compiles``,
``build_cache_s``) and, as the TensorFlow adapter does, times the first two calls to completion
(``compile_time_s = max(0, first_call_s - second_call_s)``: the build and memory planning
without the step itself). A build during measurement counts in ``recompiles_measured``.
``eager``: nothing is compiled.

Memory: peak RSS only (MXNet has no allocator statistics API on the CPU). FLOPs: no counter in
MXNet (``count_flops`` is None; MFU uses the analytic count). No breakdown or trace
(``phased_step``, ``profile`` are None; ``breakdown=False`` in the registry entry).
"""

from __future__ import annotations

import gc
import importlib.util
import os
import sys
import time
from typing import Any

from dlperf.config import RunConfig
from dlperf.errors import ConfigError, UnavailableError
from dlperf.frameworks.base import TrainingRun, build_model, no_mark
from dlperf.frameworks.mxnet.input import make_data
from dlperf.frameworks.mxnet.step import GluonStep, make_trainer, with_loss
from dlperf.measure.timers import HostTimer
from dlperf.registry import FRAMEWORKS
from dlperf.zoo.spec import ModelSpec

#: Environment variables MXNet reads when its library loads, set for ``--threads``.
THREAD_ENV = ("OMP_NUM_THREADS", "MXNET_CPU_WORKER_NTHREADS")
#: Hybridize options of ``graph`` mode (a static graph, memory planned once).
HYBRIDIZE = {"static_alloc": True, "static_shape": True}


def thread_env(threads: int | None) -> dict[str, str]:
    """The environment MXNet needs for ``--threads`` (module docstring); empty without it."""
    if not threads:
        return {}
    return {"OMP_NUM_THREADS": str(threads), "MXNET_CPU_WORKER_NTHREADS": "1"}


def _env_int(name: str) -> int | None:
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() else None


def apply_threads(threads: int | None) -> dict[str, Any]:
    """Set MXNet's thread environment for ``threads`` before it is imported; return it as
    applied (``omp_threads``, ``engine_worker_threads``: the values MXNet reads, ``None`` =
    its default; ``threads``: the effective compute threads, None when MXNet's default).

    Raises:
        ConfigError: MXNet is already imported in this process with other values.
    """
    want = thread_env(threads)
    if "mxnet" in sys.modules:
        have = {k: os.environ.get(k) for k in want}
        if have != want:
            raise ConfigError(f"--threads {threads}: MXNet is already loaded in this process with "
                              f"{have} and reads them only when it loads; run the configuration "
                              f"in a fresh process (the CLI runs each in its own worker)")
    os.environ.update(want)
    return {"omp_threads": _env_int("OMP_NUM_THREADS"),
            "engine_worker_threads": _env_int("MXNET_CPU_WORKER_NTHREADS"),
            "engine_type": os.environ.get("MXNET_ENGINE_TYPE", "ThreadedEnginePerDevice (default)"),
            "threads": threads}


def import_mxnet() -> Any:
    """Import and return ``mxnet``.

    Raises:
        UnavailableError: MXNet is not importable in this interpreter (the message says that
            dlperf's launcher runs MXNet workers with ``$DLPERF_MXNET_PYTHON``).
    """
    try:
        import mxnet
    except Exception as e:  # noqa: BLE001 - ImportError, or a broken install (numpy 2)
        raise UnavailableError(
            f"mxnet cannot be imported by {sys.executable} ({type(e).__name__}: {e}); MXNet "
            f"workers run in their own interpreter, $DLPERF_MXNET_PYTHON, started by dlperf's "
            f"launcher (`dlperf run --framework mxnet ...`)") from None
    return mxnet


def refuse_unsupported(cfg: RunConfig) -> None:
    """Refuse what the MXNet adapter cannot run (the config refuses these first; this guards a
    configuration made without it).

    Raises:
        UnavailableError: a device other than the CPU, a precision other than fp32, or an
            input pipeline (``--loader-workers``); the message says what to use instead.
    """
    if cfg.hardware.device != "cpu":
        raise UnavailableError(f"device {cfg.hardware.device!r}: the MXNet adapter runs on the CPU "
                               f"only (the pip wheel is a CPU build); use --device cpu")
    if cfg.hardware.precision != "fp32":
        raise UnavailableError(f"precision {cfg.hardware.precision!r}: the MXNet adapter implements "
                               f"fp32 only; use --precision fp32")
    if cfg.input.loader_workers is not None:
        raise UnavailableError("--loader-workers: the MXNet adapter has no input pipeline; "
                               "real data are prepared before timing without it")


class MXNetAdapter:
    """The MXNet framework adapter (see the module docstring for its choices)."""

    name = "mxnet"
    modes = FRAMEWORKS["mxnet"].modes

    def available(self) -> tuple[bool, str]:
        """In the MXNet interpreter: (True, MXNet's version). Elsewhere: whether
        ``$DLPERF_MXNET_PYTHON`` can run an MXNet worker: (True, "<version> (in
        $DLPERF_MXNET_PYTHON)") or (False, what is wrong and how to make the environment).
        MXNet is not imported here (its thread settings are read when it loads)."""
        if importlib.util.find_spec("mxnet") is not None:
            from importlib.metadata import PackageNotFoundError, version

            try:
                return True, version("mxnet")
            except PackageNotFoundError:  # pragma: no cover - a source build without metadata
                return True, "unknown"
        from dlperf.frameworks.common import check_framework_python

        try:
            ver = check_framework_python(self.name)
        except ConfigError as e:
            return False, str(e)
        return True, f"{ver} (in ${FRAMEWORKS[self.name].python_env})"

    def devices(self) -> list[str]:
        """``["cpu"]`` (the registry entry's devices): the MXNet 1.9.1 pip wheel is a CPU
        build."""
        return list(FRAMEWORKS[self.name].devices)

    def is_oom(self, exc: BaseException) -> bool:
        """True for ``MemoryError`` and MXNet's allocation failures (``MXNetError`` whose
        message says the memory ran out)."""
        if isinstance(exc, MemoryError):
            return True
        msg = str(exc).lower()
        return type(exc).__name__ == "MXNetError" and (
            "out of memory" in msg or "failed to allocate" in msg or "bad_alloc" in msg)

    def prepare(self, cfg: RunConfig, spec: ModelSpec) -> MXNetRun:
        """Build model, optimizer, data and the step for ``cfg`` (module docstring).

        Raises:
            UnavailableError: MXNet is not importable here, the model has no MXNet
                implementation, or the run asks for something MXNet has not got here.
            ConfigError: ``--threads`` after MXNet was loaded with other settings.
        """
        refuse_unsupported(cfg)
        return MXNetRun(cfg, spec)


class BuildCounter:
    """Counts and times the cached-graph builds of a hybridized block (compile info, rule 4):
    wraps ``block._build_cache``, which Gluon calls on the first call of a shape.

    Attributes:
        n: builds so far; seconds: their host time in seconds (``time.perf_counter``).
    """

    def __init__(self, block: Any) -> None:
        self.n, self.seconds = 0, 0.0
        self._build = block._build_cache
        block._build_cache = self

    def __call__(self, *args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return self._build(*args)
        finally:
            self.n += 1
            self.seconds += time.perf_counter() - t0


class MXNetRun(TrainingRun):
    """One prepared MXNet configuration (:class:`~dlperf.frameworks.base.TrainingRun`): the
    Gluon model with its loss, hybridized in ``graph`` mode, its trainer and batches, and
    :class:`~dlperf.frameworks.mxnet.step.GluonStep` as the staged step.

    The first two fused steps are timed to completion (``flags["first_call_s"]``,
    ``["second_call_s"]``) for :meth:`compile_info`; the ones after are the plain staged step
    with no-op marks.

    Raises (on construction):
        UnavailableError: MXNet is not importable here, the model has no MXNet implementation,
            its loss/inputs or optimizer are not wired for MXNet, or ImageFolder data.
        ConfigError: ``--threads`` after MXNet was loaded with other settings.
    """

    def __init__(self, cfg: RunConfig, spec: ModelSpec) -> None:
        self.flags: dict[str, Any] = {"mode": cfg.runtime.mode}
        self.flags.update(apply_threads(cfg.hardware.threads))  # before MXNet loads
        self.mx = mx = import_mxnet()
        import numpy as np

        feats = mx.runtime.Features()
        self.flags.update(self._build_flags(feats, cfg))
        mx.random.seed(cfg.workload.seed)
        np.random.seed(cfg.workload.seed)
        ctx = mx.cpu()
        self._net, model, self._builds = self._build(cfg, spec, ctx)
        params = self._net.collect_params()
        trainable = [p for p in params.values() if p.grad_req != "null"]
        if cfg.workload.grad_accum > 1:
            for p in trainable:
                p.grad_req = "add"
        trainer, self.flags["optimizer"] = make_trainer(mx, params, spec)
        data = make_data(mx, cfg, spec, ctx)
        self.data_info = data.info
        self._step = GluonStep(mx, model, trainer, trainable, cfg.workload.grad_accum, data.fetch)
        self.versions = self._versions(np, feats)
        self.flags["first_call_s"] = self.flags["second_call_s"] = None
        self.flags["timer"] = ("host_clock; each step ends with mx.nd.waitall() "
                               "(asynchronous engine)")
        self.timer = HostTimer()
        self._calls = 0
        self._builds_at_measure: int | None = None

    @staticmethod
    def _build_flags(feats: Any, cfg: RunConfig) -> dict[str, Any]:
        """The precision, oneDNN and BLAS flags of this MXNet build, and the accumulation."""
        return {"precision": "fp32", "tf32": False,
                "onednn": bool(feats.is_enabled("MKLDNN")),
                "blas": next((b for b in ("MKL", "OPEN", "ATLAS", "APPLE")
                              if feats.is_enabled(f"BLAS_{b}")), None),
                "grad_accum": cfg.workload.grad_accum}

    def _build(self, cfg: RunConfig, spec: ModelSpec,
               ctx: Any) -> tuple[Any, Any, BuildCounter | None]:
        """``(net, net with its loss, build counter or None)``: the zoo model on ``ctx``,
        initialised, wrapped with its loss and, in ``graph`` mode, hybridized."""
        _, net = build_model(spec, "mxnet", "MXNet")
        net.initialize(ctx=ctx)
        self.flags["layout"] = "NCHW" if spec.input_kind == "image" else None
        model = with_loss(self.mx, net, spec)
        builds = None
        if cfg.runtime.mode == "graph":
            model.hybridize(**HYBRIDIZE)
            builds = BuildCounter(model)
        self.flags["hybridize"] = dict(HYBRIDIZE) if builds is not None else None
        return net, model, builds

    def _versions(self, np: Any, feats: Any) -> dict[str, Any]:
        from dlperf.env import cpu_model

        return {"framework": "mxnet", "mxnet": self.mx.__version__, "numpy": np.__version__,
                "python": sys.version.split()[0], "interpreter": sys.executable,
                "cuda": None, "cudnn": None, "nccl": None,
                "features": sorted(f.name for f in feats.values() if f.enabled),
                "device_name": cpu_model()}

    # --- the step ------------------------------------------------------------------------------

    def staged_step(self, mark: Any) -> Any:
        """One iteration of :class:`~dlperf.frameworks.mxnet.step.GluonStep` with ``mark``."""
        return self._step(mark)

    def step(self) -> Any:
        """One fused iteration (the staged step with no-op marks); the first two are timed to
        completion for the compile time."""
        if self._calls < 2:
            return self._timed_call()
        return self._step(no_mark)

    def _timed_call(self) -> Any:
        t0 = time.perf_counter()
        out = self._step(no_mark)
        self.flags["first_call_s" if self._calls == 0 else "second_call_s"] = \
            time.perf_counter() - t0
        self._calls += 1
        return out

    def losses_to_floats(self, handles: list[Any]) -> list[float]:
        """The 0-d loss NDArrays as floats (one concatenation, one copy)."""
        if not handles:
            return []
        nd = self.mx.nd
        return nd.concat(*[h.reshape((1,)) for h in handles], dim=0).asnumpy() \
            .astype("float64").tolist()

    # --- compile accounting (rule 4) -----------------------------------------------------------

    def on_phase(self, phase: str) -> None:
        """Snapshot the build count right before the measured segment."""
        if phase == "measure":
            self._builds_at_measure = self._builds.n if self._builds is not None else 0

    def _compile_time_s(self) -> float:
        first, second = self.flags["first_call_s"], self.flags["second_call_s"]
        if self._builds is None or first is None:
            return 0.0
        return max(0.0, first - second) if second is not None else first

    def compile_count(self) -> int:
        """Cached-graph builds so far (0 without a hybridized model): called by the harness
        after every step (docs/measurement.md, "Recompiles")."""
        return self._builds.n if self._builds is not None else 0

    def compile_info(self) -> dict[str, Any]:
        """``{"compile_time_s", "n_compiles", "recompiles_measured", "compile_before_loop_s"}``
        (module docstring: the graph is built in the first call, so nothing before the loop);
        also recorded in ``flags`` with ``build_cache_s`` and ``n_cached_graph_builds``."""
        n = self._builds.n if self._builds is not None else 0
        self.flags["compile_time_s"] = self._compile_time_s()
        self.flags["build_cache_s"] = self._builds.seconds if self._builds is not None else None
        self.flags["n_cached_graph_builds"] = n
        at = self._builds_at_measure
        return {"compile_time_s": self.flags["compile_time_s"], "n_compiles": n,
                "recompiles_measured": n - (n if at is None else at),
                "compile_before_loop_s": 0.0}

    def close(self) -> None:
        """Wait for the engine, drop the model, trainer and batches, collect."""
        self.mx.nd.waitall()
        self._step = self._net = None
        gc.collect()
