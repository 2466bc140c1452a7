"""MXNet adapter: Gluon models trained imperatively (``eager``) or hybridized (``graph``), CPU only.

MXNet 1.9.1 is a framework of the seed papers (Shi et al. 2016 measured MXNet beside Caffe, CNTK,
TensorFlow and Torch). Its last release needs numpy < 1.24, which cannot share a venv with the
other frameworks (numpy 2), so it runs in an interpreter of its own: the launcher starts the
worker of an ``mxnet`` configuration with ``$DLPERF_MXNET_PYTHON`` and this dlperf's source
(:func:`dlperf.launch.process.worker_interpreter`); this module is imported there. Elsewhere
it is only asked whether that interpreter works (:meth:`MXNetAdapter.available`).

Modes (``--framework mxnet --mode ...``), the same Python train step (``autograd.record``
forward + mean cross-entropy, ``backward``, ``Trainer.step``) with

* ``eager``: the Gluon model run imperatively, op by op;
* ``graph``: the model and its loss as one ``HybridBlock``, ``hybridize(static_alloc=True,
  static_shape=True)`` (a cached graph, memory planned once for the fixed shapes; Gluon's
  recommendation for speed).

Choices (each recorded in ``Session.flags``, docs/measurement.md rule 6):

* device: ``cpu`` only; the pip wheel of MXNet 1.9.1 is a CPU build (with oneDNN, formerly
  MKL-DNN, and OpenBLAS). ``--device cuda`` and precisions other than ``fp32`` are refused
  before anything runs (:mod:`dlperf.registry`, :mod:`dlperf.config`).
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
* optimizer: ``gluon.Trainer(..., "sgd", {learning_rate, momentum, wd})`` stepped with
  ``batch_size=1`` (the loss is already the batch mean). MXNet's momentum update
  ``m = mu m - lr (g + wd w); w += m`` is PyTorch's ``b = mu b + g + wd w; w -= lr b`` at a
  constant learning rate (``m = -lr b``), tested in ``tests/frameworks/mxnet/test_mxnet.py``. Adam/AdamW specs
  (the Transformers) have no MXNet models.
* loss: mean softmax cross-entropy of ``out.reshape(-1, C)`` against ``y.reshape(-1)``
  (``gluon.loss.SoftmaxCrossEntropyLoss``, averaged over the batch and time steps), the same
  as the other adapters.
* data: synthetic: a pool of 4 distinct batches made before timing (``mx.random`` seeded by
  ``cfg.seed``; floats N(0, 1), token ids and labels uniform, as float32 ids: MXNet's
  ``Embedding`` and ``pick`` take float indices), cycled. Real data: batches from
  :func:`dlperf.data.make_batches` held as NDArrays. No input pipeline (``--loader-workers``
  and ImageFolder data are refused).
* gradient accumulation (``--grad-accum K``): ``grad_req = "add"``, gradients zeroed before
  each iteration, each micro-batch's loss divided by K.

Timing (docs/measurement.md rules 1-2): MXNet's engine is asynchronous on the CPU too (an operator
call returns once it is queued for the engine's worker threads), so a host clock alone would
time the dispatch. Each step ends with ``mx.nd.waitall()`` (every queued operator, the
parameter updates included, has finished) and the harness reads a
:class:`~dlperf.measure.timers.HostTimer`: the step time is its completion time. This does
forgo the overlap of the next step's Python dispatch with the current step's execution; on the
CPU, where the engine's threads and the Python thread share the same cores, that overlap is
small, and it is what a Gluon loop that reads its loss or metric every batch (as Gluon's own
training examples do) gets as well. No device events exist in MXNet's API, and a lagged read of
an earlier step's loss would not wait for that step's updates.

Compilation (rule 4): in ``graph`` mode the cached graph is built in the first call; the adapter
counts and times the builds (``HybridBlock._build_cache``: ``n_compiles``,
``build_cache_s``) and, as the TensorFlow adapter does, times the first two calls to completion
(``compile_time_s = max(0, first_call_s - second_call_s)``: the build and memory planning
without the step itself). A build during measurement counts in ``recompiles_measured``.
``eager``: nothing is compiled.

Memory: peak RSS only (MXNet has no allocator statistics API on the CPU). FLOPs: no counter in
MXNet (``count_flops`` is None; MFU uses the analytic count). No breakdown or trace.
"""

from __future__ import annotations

import gc
import importlib.util
import itertools
import os
import resource
import sys
import time
from typing import Any

from dlperf.config import RunConfig
from dlperf.errors import ConfigError, UnavailableError
from dlperf.frameworks.base import Session, build_model
from dlperf.measure.timers import HostTimer
from dlperf.zoo.spec import ModelSpec

SYNTHETIC_POOL = 4
#: Real data: at most this many distinct batches are kept and cycled.
MAX_REAL_BATCHES = 512
#: Environment variables MXNet reads when its library loads, set for ``--threads``.
THREAD_ENV = ("OMP_NUM_THREADS", "MXNET_CPU_WORKER_NTHREADS")


def _peak_rss_bytes() -> int:
    # ru_maxrss is in kilobytes on Linux (getrusage(2)).
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def thread_env(threads: int | None) -> dict[str, str]:
    """The environment MXNet needs for ``--threads`` (module docstring); empty without it."""
    if not threads:
        return {}
    return {"OMP_NUM_THREADS": str(threads), "MXNET_CPU_WORKER_NTHREADS": "1"}


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
    omp = os.environ.get("OMP_NUM_THREADS")
    return {"omp_threads": int(omp) if omp and omp.isdigit() else None,
            "engine_worker_threads": (int(os.environ["MXNET_CPU_WORKER_NTHREADS"])
                                      if os.environ.get("MXNET_CPU_WORKER_NTHREADS", "").isdigit()
                                      else None),
            "engine_type": os.environ.get("MXNET_ENGINE_TYPE", "ThreadedEnginePerDevice (default)"),
            "threads": threads}


def import_mxnet():
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


class MXNetAdapter:
    """The MXNet framework adapter (see the module docstring for its choices)."""

    name = "mxnet"
    modes = ("eager", "graph")

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
            ver = check_framework_python("mxnet")
        except ConfigError as e:
            return False, str(e)
        return True, f"{ver} (in $DLPERF_MXNET_PYTHON)"

    def devices(self) -> list[str]:
        """``["cpu"]``: the MXNet 1.9.1 pip wheel is a CPU build."""
        return ["cpu"]

    def is_oom(self, exc: BaseException) -> bool:
        """True for ``MemoryError`` and MXNet's allocation failures (``MXNetError`` whose
        message says the memory ran out)."""
        if isinstance(exc, MemoryError):
            return True
        msg = str(exc).lower()
        return type(exc).__name__ == "MXNetError" and (
            "out of memory" in msg or "failed to allocate" in msg or "bad_alloc" in msg)

    # --- parts (public: the parity tests use the same code) ------------------------------------

    @staticmethod
    def make_trainer(mx: Any, params: Any, spec: ModelSpec) -> tuple[Any, dict[str, Any]]:
        """``(gluon.Trainer, flags)`` for the spec's optimizer over ``params`` (no kvstore:
        one device). Step it with ``batch_size=1``: the loss is already a batch mean.

        Raises:
            UnavailableError: an optimizer other than SGD (the Adam specs are Transformers',
                which have no MXNet models).
        """
        o = spec.optimizer
        if o.name != "sgd":
            raise UnavailableError(f"{spec.name}: optimizer {o.name!r} is not wired for MXNet "
                                   f"(only the SGD models have MXNet implementations)")
        trainer = mx.gluon.Trainer(params, "sgd",
                                   {"learning_rate": o.lr, "momentum": o.momentum,
                                    "wd": o.weight_decay},
                                   kvstore=None, update_on_kvstore=False)
        return trainer, {"name": "sgd", "lr": o.lr, "momentum": o.momentum,
                         "weight_decay": o.weight_decay, "weight_decay_kind": "l2_in_gradient",
                         "impl": "gluon.Trainer('sgd'), step(batch_size=1)"}

    @staticmethod
    def with_loss(mx: Any, net: Any, spec: ModelSpec) -> Any:
        """A ``HybridBlock`` ``(x, y) -> mean cross-entropy`` over ``net`` (one graph in
        ``graph`` mode): ``SoftmaxCrossEntropyLoss(axis=-1, sparse_label=True)`` of the logits
        ``[B, C]`` or ``[B, T, V]`` against ``[B]`` or ``[B, T]`` float ids, averaged.

        Raises:
            UnavailableError: a spec outside the default input/loss contract.
        """
        if not spec.default_io:
            raise UnavailableError(f"{spec.name}: loss {spec.loss!r} / {spec.input_kind} inputs "
                                   f"are not wired for MXNet")
        gluon = mx.gluon

        class WithLoss(gluon.HybridBlock):
            def __init__(self) -> None:
                super().__init__(prefix="")
                self.net = net  # registered as a child, its parameter names unchanged
                self.ce = gluon.loss.SoftmaxCrossEntropyLoss(axis=-1, sparse_label=True)

            def hybrid_forward(self, F, x, y):  # noqa: N803
                return F.mean(self.ce(self.net(x), y))

        return WithLoss()

    # --- the session ---------------------------------------------------------------------------

    def prepare(self, cfg: RunConfig, spec: ModelSpec) -> Session:
        """Build model, optimizer, data and the step for ``cfg`` (module docstring).

        Raises:
            UnavailableError: MXNet is not importable here, the model has no MXNet
                implementation, or the run asks for something MXNet has not got here.
            ConfigError: ``--threads`` after MXNet was loaded with other settings.
        """
        if cfg.device != "cpu":
            raise UnavailableError(f"device {cfg.device!r}: the MXNet adapter runs on the CPU "
                                   f"only (the pip wheel is a CPU build); use --device cpu")
        if cfg.precision != "fp32":
            raise UnavailableError(f"precision {cfg.precision!r}: the MXNet adapter implements "
                                   f"fp32 only; use --precision fp32")
        if cfg.loader_workers is not None:
            raise UnavailableError("--loader-workers: the MXNet adapter has no input pipeline; "
                                   "real data are prepared before timing without it")
        flags: dict[str, Any] = {"mode": cfg.mode}
        flags.update(apply_threads(cfg.threads))  # before MXNet loads
        mx = import_mxnet()
        import numpy as np
        from mxnet import autograd

        flags["precision"] = "fp32"
        flags["tf32"] = False
        feats = mx.runtime.Features()
        flags["onednn"] = bool(feats.is_enabled("MKLDNN"))
        flags["blas"] = next((b for b in ("MKL", "OPEN", "ATLAS", "APPLE")
                              if feats.is_enabled(f"BLAS_{b}")), None)
        flags["grad_accum"] = cfg.grad_accum
        mx.random.seed(cfg.seed)
        np.random.seed(cfg.seed)
        ctx = mx.cpu()

        _, net = build_model(spec, "mxnet", "MXNet")
        net.initialize(ctx=ctx)
        flags["layout"] = "NCHW" if spec.input_kind == "image" else None
        model = self.with_loss(mx, net, spec)
        graph = cfg.mode == "graph"
        builds = {"n": 0, "s": 0.0}
        if graph:
            model.hybridize(static_alloc=True, static_shape=True)
            build_cache = model._build_cache  # counted and timed: compile info (rule 4)

            def counted_build(*args):
                t0 = time.perf_counter()
                try:
                    return build_cache(*args)
                finally:
                    builds["n"] += 1
                    builds["s"] += time.perf_counter() - t0

            model._build_cache = counted_build
            flags["hybridize"] = {"static_alloc": True, "static_shape": True}
        else:
            flags["hybridize"] = None
        params = net.collect_params()
        trainable = [p for p in params.values() if p.grad_req != "null"]
        K = cfg.grad_accum
        if K > 1:
            for p in trainable:
                p.grad_req = "add"
        trainer, flags["optimizer"] = self.make_trainer(mx, params, spec)

        next_batch, data_info = self._data(mx, np, cfg, spec, ctx)

        def step():
            x, y = next_batch()
            if K == 1:
                with autograd.record():
                    loss = model(x, y)
                loss.backward()
            else:
                for p in trainable:
                    p.zero_grad()
                loss = None
                for xs, ys in zip(mx.nd.split(x, num_outputs=K, axis=0),
                                  mx.nd.split(y, num_outputs=K, axis=0)):
                    with autograd.record():
                        part = model(xs, ys) / K
                    part.backward()
                    loss = part if loss is None else loss + part
            trainer.step(1)
            mx.nd.waitall()  # the engine is asynchronous: the step ends when all has run
            return loss

        flags["first_call_s"] = flags["second_call_s"] = None
        calls = 0

        def timed_step():
            # The first two calls are timed to completion (compile time, module docstring).
            nonlocal calls
            t0 = time.perf_counter()
            out = step()
            flags["first_call_s" if calls == 0 else "second_call_s"] = time.perf_counter() - t0
            calls += 1
            return out

        def run_step():
            return timed_step() if calls < 2 else step()

        def compile_time() -> float:
            if not graph:
                return 0.0
            first, second = flags["first_call_s"], flags["second_call_s"]
            if first is None:
                return 0.0
            return max(0.0, first - second) if second is not None else first

        at_measure: dict[str, int] = {}

        def on_phase(phase: str) -> None:
            if phase == "measure":
                at_measure["builds"] = builds["n"]

        def compile_info() -> dict[str, Any]:
            flags["compile_time_s"] = compile_time()
            flags["build_cache_s"] = builds["s"] if graph else None
            flags["n_cached_graph_builds"] = builds["n"]
            return {"compile_time_s": flags["compile_time_s"],
                    "n_compiles": builds["n"] if graph else 0,
                    "recompiles_measured": builds["n"] - at_measure.get("builds", builds["n"])}

        def losses_to_floats(handles: list[Any]) -> list[float]:
            if not handles:
                return []
            return mx.nd.concat(*[h.reshape((1,)) for h in handles], dim=0).asnumpy() \
                .astype("float64").tolist()

        def memory() -> dict[str, int | None]:
            return {"peak_rss_bytes": _peak_rss_bytes(), "peak_allocated_bytes": None,
                    "peak_reserved_bytes": None, "nvml_used_bytes": None}

        from dlperf.env import cpu_model

        versions: dict[str, Any] = {
            "framework": "mxnet", "mxnet": mx.__version__, "numpy": np.__version__,
            "python": sys.version.split()[0], "interpreter": sys.executable,
            "cuda": None, "cudnn": None, "nccl": None,
            "features": sorted(f.name for f in feats.values() if f.enabled),
            "device_name": cpu_model()}
        flags["timer"] = "host_clock; each step ends with mx.nd.waitall() (asynchronous engine)"

        def close() -> None:
            nonlocal model, net, trainer
            mx.nd.waitall()
            del model, net, trainer
            gc.collect()

        return Session(step=run_step, timer=HostTimer(), losses_to_floats=losses_to_floats,
                       memory=memory, versions=versions, flags=flags, data_info=data_info,
                       close=close, on_phase=on_phase, compile_info=compile_info)

    @staticmethod
    def _data(mx: Any, np: Any, cfg: RunConfig, spec: ModelSpec, ctx: Any):
        """``(next_batch, info)``: ``next_batch()`` gives ``(x, y)`` NDArrays on ``ctx`` (images
        NCHW float32; token ids and labels float32)."""
        B = cfg.global_batch
        if cfg.data == "synthetic":
            pool = []
            for _ in range(SYNTHETIC_POOL):
                if spec.input_kind == "tokens":
                    shape = (B, *spec.input_shape)
                    x = mx.nd.random.randint(0, spec.num_classes, shape, ctx=ctx).astype("float32")
                    y = mx.nd.random.randint(0, spec.num_classes, shape, ctx=ctx).astype("float32")
                else:
                    x = mx.nd.random.normal(0, 1, (B, *spec.input_shape), ctx=ctx)
                    y = mx.nd.random.randint(0, spec.num_classes, (B,), ctx=ctx).astype("float32")
                pool.append((x, y))
            mx.nd.waitall()
            it = itertools.cycle(pool)
            return it.__next__, {"kind": "synthetic", "placement": "device",
                                 "distinct_batches": SYNTHETIC_POOL,
                                 "layout": "NCHW" if spec.input_kind == "image" else None}
        from dlperf.data import load_dataset, make_batches

        ds = load_dataset(cfg.data, cfg.data_dir)
        if ds.kind == "imagefolder":
            raise UnavailableError("ImageFolder data are read through an input pipeline, which "
                                   "the MXNet adapter does not have; use synthetic data, mnist "
                                   "or cifar10")
        X, Y = make_batches(ds, spec, B, max_batches=MAX_REAL_BATCHES)
        batches = [(mx.nd.array(X[i], ctx=ctx, dtype="float32"),
                    mx.nd.array(Y[i], ctx=ctx, dtype="float32")) for i in range(X.shape[0])]
        mx.nd.waitall()
        it = itertools.cycle(batches)
        info = {"kind": "real", "dataset": ds.name, "path": str(ds.path), "placement": "host",
                "distinct_batches": len(batches),
                "layout": "NCHW" if spec.input_kind == "image" else None,
                **{k: v for k, v in ds.meta.items() if isinstance(v, (int, float, str, bool))}}
        return it.__next__, info
