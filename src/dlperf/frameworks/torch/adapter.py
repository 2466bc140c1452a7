"""PyTorch adapter: eager and compiled (``torch.compile``, mode ``graph``) training on CPU or CUDA.

:class:`TorchAdapter` says what is here (``available``, ``devices``, ``is_oom``) and prepares a
:class:`TorchRun`, the :class:`~dlperf.frameworks.base.TrainingRun` of one configuration. The
folder's other modules hold the pieces: the staged step, precision, optimizer and loss
(:mod:`.step`), the data (:mod:`.input`), the probes and compile counters (:mod:`.probes`), the
profiler (:mod:`.profile`) and ``torch.distributed`` (:mod:`.dist`).

Choices (each recorded in ``TrainingRun.flags``, docs/measurement.md rule 6):

* precision: ``fp32`` sets matmul and cuDNN float32 precision to IEEE (TF32 off, explicitly:
  cuDNN convolutions default to TF32 in PyTorch); ``tf32`` turns TF32 on for both; ``bf16`` is
  mixed precision with ``torch.autocast(dtype=bfloat16)`` over fp32 master weights, and TF32
  off for what autocast leaves in fp32. No loss scaling is needed for bf16.
* ``cudnn.benchmark = True`` on CUDA (PyTorch performance tuning guide): autotuning happens in
  the first iteration and warm-up of each shape, which the harness reports apart.
* optimizer: ``torch.optim.SGD``/``Adam``/``AdamW``; ``--optimizer-impl auto`` (default)
  runs the fastest standard implementation, ``fused=True`` where PyTorch has fused kernels
  (CUDA and the CPU; :func:`~dlperf.frameworks.torch.step.auto_impl`), PyTorch's default
  elsewhere; ``fused``/``foreach``/``single`` force one;
  ``flags.optimizer.impl`` records the one that ran; ``zero_grad(set_to_none=True)``.
* data (:mod:`dlperf.frameworks.torch.input`): synthetic batches made on the device before
  timing; real data prepared on the host (pinned on CUDA) and copied with ``non_blocking=True``
  inside each step; with ``--loader-workers N`` (and always for an ImageFolder) a
  ``DataLoader`` during training, the time the step waits for each batch recorded
  (``TrainingRun.data_wait``).
* after the measurement: one more iteration of the eager model under ``FlopCounterMode`` and a
  byte counter (:mod:`dlperf.frameworks.torch.probes`), and the matmul/bandwidth ceilings.
* data parallelism (``cfg.world_size > 1``, one process per device started by torchrun):
  the process joins the process group (NCCL on CUDA, gloo on the CPU;
  :mod:`dlperf.frameworks.torch.dist`) and the model is wrapped in
  ``DistributedDataParallel`` with ``cfg.runtime.ddp``'s options (recorded in ``flags["ddp"]``); each
  rank trains on ``cfg.per_device_batch`` samples. Real data: the global batch ``k`` is cut
  as on one device and rank ``r`` takes its rows ``[r b, (r + 1) b)``, so runs on different
  device counts at the same global batch see the same samples in the same order. Synthetic
  data is drawn with seed ``seed + rank``. With gradient accumulation the first ``K - 1``
  micro-batches run under ``no_sync()`` (one all-reduce per iteration). After the measured
  segment, ``TrainingRun.comm_profile`` runs a few more iterations under ``torch.profiler`` and
  computes the exposed communication from the trace (:mod:`dlperf.measure.breakdown.overlap`).
"""

from __future__ import annotations

from typing import Any

from dlperf import nvml
from dlperf.config import RunConfig
from dlperf.env import cpu_model
from dlperf.errors import UnavailableError
from dlperf.frameworks.base import DataSource, DistContext, TrainingRun, identity
from dlperf.frameworks.common import memory_record
from dlperf.frameworks.torch import dist as torch_dist

# trace_activities and graph_break_reasons are imported from here by tests and scripts.
from dlperf.frameworks.torch.probes import (
    CUDAGRAPH_MODES,
    CompileWatch,
    TorchCeilings,
    count_step,
    graph_break_reasons,  # noqa: F401
)
from dlperf.frameworks.torch.profile import (
    profile_comm,
    profile_steps,
    trace_activities,  # noqa: F401
)
from dlperf.frameworks.torch.step import (
    TorchStep,
    apply_precision,
    make_autocast,
    make_loss,
    make_optimizer,
)
from dlperf.measure.phases import CudaPhaseTimer, HostPhaseTimer
from dlperf.measure.timers import CudaEventTimer, HostTimer
from dlperf.zoo import build_torch
from dlperf.zoo.spec import ModelSpec


def _nothing() -> None:
    return None


def _check_cpu_bf16_lstm(torch: Any) -> None:
    """Refuse bf16 on a CPU where PyTorch's ``nn.LSTM`` cannot run it.

    Under CPU autocast, ``nn.LSTM`` runs oneDNN's bf16 LSTM, which needs bf16 instructions
    (AVX512-BF16 or AMX); on an AVX2-only CPU (an AMD EPYC VM, torch 2.13) it fails with
    "could not create a primitive descriptor for the LSTM forward propagation primitive".
    A one-step probe (a 1x1 LSTM on 1 sample) tells.

    Raises:
        UnavailableError: naming the CPU capability and what to measure instead.
    """
    probe = torch.nn.LSTM(1, 1)
    try:
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            probe(torch.zeros(1, 1, 1))
    except RuntimeError as e:
        cap = torch.backends.cpu.get_cpu_capability()
        raise UnavailableError(
            f"bf16 on this CPU (capability {cap}): PyTorch's oneDNN LSTM has no bf16 kernel "
            f"without AVX512-BF16 or AMX ({str(e).splitlines()[0].split('. ')[0]}); measure "
            f"--precision fp32 here, or bf16 on a CPU with AVX512-BF16/AMX or on a GPU") from None


def channels_last(cfg: RunConfig, spec: ModelSpec) -> bool:
    """True if the run uses ``torch.channels_last`` (NHWC) for a convolutional network.

    ``layout=auto``: channels_last on CUDA when the convolutions run on Tensor Cores (bf16,
    tf32), NCHW otherwise. PyTorch's performance tuning guide recommends channels_last for
    CNNs "notably under AMP" (cuDNN's Tensor Core kernels are NHWC; NCHW costs transposes),
    and NVIDIA's cuDNN/Deep Learning Performance guide gives NHWC for Tensor Core
    convolutions; fp32 with TF32 off uses no Tensor Cores, and there channels_last was
    measured slower on the H200 (alexnet b=128 12.10 against 11.42 ms per iteration,
    alexnet_cifar 1.79 against 1.51 ms; benchmarks/results/h200/overhead_ab/ab4_*.json)
    while bf16 resnet50 b=128 ran 1.86x faster (29.37 against 54.57 ms; frameworks.db).
    NCHW on the CPU. Only ``image`` models have 4-D activations; for the others the layout
    does not apply.
    """
    if spec.input_kind != "image":
        return False
    if cfg.runtime.layout == "auto":
        return cfg.hardware.device == "cuda" and cfg.hardware.precision in ("bf16", "tf32")
    return cfg.runtime.layout == "nhwc"


class TorchAdapter:
    """The PyTorch framework adapter (see module docstring for the choices it makes)."""

    name = "torch"
    modes = ("eager", "graph")
    #: available() imports torch (seconds): ``dlperf env`` asks it in a child process.
    available_imports = True
    apply_precision = staticmethod(apply_precision)
    channels_last = staticmethod(channels_last)

    def available(self) -> tuple[bool, str]:
        """(True, version) if torch imports, else (False, reason)."""
        try:
            import torch
        except Exception as e:  # pragma: no cover - depends on the install
            from dlperf.install import install_hint

            return False, (f"torch is not installed ({e}); "
                           f"{install_hint('torch', 'torch-cuda')}")
        return True, torch.__version__

    def devices(self) -> list[str]:
        """``cpu`` always, ``cuda`` when a GPU is visible to torch."""
        import torch

        return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])

    def is_oom(self, exc: BaseException) -> bool:
        """True for ``torch.OutOfMemoryError`` and the CPU allocator's failure."""
        import torch

        if isinstance(exc, torch.OutOfMemoryError):
            return True
        msg = str(exc)
        return isinstance(exc, RuntimeError) and ("out of memory" in msg
                                                  or "can't allocate memory" in msg)

    def prepare(self, cfg: RunConfig, spec: ModelSpec) -> TorchRun:
        """Build model, optimizer, data and the staged step for ``cfg`` (see module docs).

        Raises:
            UnavailableError: CUDA asked for but not visible; bf16 LSTM on a CPU without bf16
                instructions; a DataLoader pipeline with data parallelism.
            ConfigError: the launcher started another number of processes than ``cfg`` has.
            DataError: the data cannot feed this model.
        """
        return TorchRun(cfg, spec)


class TorchRun(TrainingRun):
    """One prepared PyTorch configuration (the worker's ``session``); see the module docstring
    and :class:`~dlperf.frameworks.base.TrainingRun` for the contract.

    ``step`` and ``phased_step`` are the same bound method, :meth:`TorchStep.run
    <dlperf.frameworks.torch.step.TorchStep.run>` of :attr:`train`: the fused timing calls it
    with its no-op default mark, the breakdown with timed marks.
    """

    def __init__(self, cfg: RunConfig, spec: ModelSpec) -> None:
        import torch

        self.cfg, self.spec, self.torch = cfg, spec, torch
        self.dev, self.dist = self._device()
        self.cuda = self.dev.type == "cuda"
        self.flags = self._settings()
        model = self._build_model()
        self.opt, self.flags["optimizer"] = make_optimizer(torch, model.parameters(),
                                                           spec.optimizer, cfg.runtime.optimizer_impl)
        if self.dist is not None:
            model, ddp_flags = torch_dist.wrap_ddp(torch, model, self.dev, cfg, self.dist)
            self.flags.update(ddp_flags)
            self.dist_details = lambda ddp=model: torch_dist.ddp_runtime(ddp)
        self.eager_model, self.watch = model, None
        if cfg.runtime.mode == "graph":
            self.watch = CompileWatch(torch, cfg.runtime.compile_mode, self.cuda)
            model = self.watch.compile(model)
            self.flags["compile"] = self.watch.flags
            self.compile_info = self.watch.info
            self.compile_count = self.watch.graphs
        src = self._data()
        self.data_info, self.data_wait, self._close_data = src.info, src.wait, src.close
        self.train = self._make_step(model, src)
        self.step = self.phased_step = self.train.run
        if self.dist is not None:
            self.comm_profile = self._comm_profile
        self.nvml_target = self._nvml_target()
        self.versions = self._versions()
        self.timer = CudaEventTimer(torch) if self.cuda else HostTimer()

    # -- preparing ---------------------------------------------------------------------------

    def _device(self) -> tuple[Any, DistContext | None]:
        """This process's device, and the data-parallel context after joining the process
        group (``cfg.distributed``), else None."""
        torch, cfg = self.torch, self.cfg
        if cfg.hardware.device == "cuda" and not torch.cuda.is_available():
            raise UnavailableError("device 'cuda' was asked for but torch sees no CUDA GPU; "
                                   "use --device cpu (or --device auto)")
        if cfg.distributed:
            ctx, dev = torch_dist.init_process_group(torch, cfg)
            return dev, ctx
        return torch.device(cfg.hardware.device), None

    def _settings(self) -> dict[str, Any]:
        """Threads, seed, precision and cuDNN autotuning; the flags as applied."""
        torch, cfg = self.torch, self.cfg
        if cfg.hardware.threads:
            torch.set_num_threads(cfg.hardware.threads)
        torch.manual_seed(cfg.workload.seed)
        flags: dict[str, Any] = {"mode": cfg.runtime.mode, **apply_precision(torch, cfg.hardware.precision)}
        if self.cuda:
            torch.backends.cudnn.benchmark = True
            torch.cuda.reset_peak_memory_stats(self.dev)
        flags["cudnn_benchmark"] = bool(torch.backends.cudnn.benchmark) if self.cuda else None
        flags["threads"] = torch.get_num_threads()
        flags["grad_accum"] = cfg.workload.grad_accum
        return flags

    def _build_model(self) -> Any:
        """The zoo's module of the spec, in training mode, in the run's memory layout.

        The parameters are built (and initialised) on the device directly: initialising a
        118 M parameter FCN on the host and copying it costs seconds per configuration."""
        torch, cfg, spec = self.torch, self.cfg, self.spec
        with torch.device(self.dev):
            model = build_torch(spec)
        model.train()
        if (self.dev.type == "cpu" and cfg.hardware.precision == "bf16"
                and any(isinstance(m, torch.nn.LSTM) for m in model.modules())):
            _check_cpu_bf16_lstm(torch)
        self.nhwc = channels_last(cfg, spec)
        if self.nhwc:
            model = model.to(memory_format=torch.channels_last)
        # the same spelling as the JAX and TensorFlow adapters
        self.flags["layout"] = (("NHWC" if self.nhwc else "NCHW")
                                if spec.input_kind == "image" else None)
        return model

    def _data(self) -> DataSource:
        """The run's batches (:func:`dlperf.frameworks.torch.input.make_source`)."""
        from dlperf.frameworks.torch.input import make_source  # imports torch

        rank = self.dist.rank if self.dist is not None else 0
        return make_source(self.cfg, self.spec, self.dev, self.nhwc, rank)

    def _make_step(self, model: Any, src: DataSource) -> TorchStep:
        """The staged step of ``model`` (eager or compiled) on ``src``'s batches; under DDP with
        gradient accumulation the micro-batches use the DDP module's ``no_sync``."""
        torch, cfg = self.torch, self.cfg
        begin = None
        if cfg.runtime.mode == "graph" and cfg.runtime.compile_mode in CUDAGRAPH_MODES:
            begin = torch.compiler.cudagraph_mark_step_begin
        no_sync = None
        if self.dist is not None and cfg.workload.grad_accum > 1:
            no_sync = self.eager_model.no_sync
        return TorchStep(model=model, opt=self.opt, loss_fn=make_loss(torch, self.spec),
                         fetch=src.fetch,
                         to_device=None if src.to_device is identity else src.to_device,
                         autocast=make_autocast(torch, cfg.hardware.precision, self.dev.type),
                         begin=begin, grad_accum=cfg.workload.grad_accum, no_sync=no_sync)

    def _nvml_target(self) -> tuple[str | None, int] | None:
        """``(uuid or None, NVML index)`` of this run's GPU; None on a CPU."""
        if not self.cuda:
            return None
        props = self.torch.cuda.get_device_properties(self.dev)
        return str(getattr(props, "uuid", "") or "") or None, self.dev.index or 0

    def _versions(self) -> dict[str, Any]:
        """torch, CUDA, cuDNN and NCCL versions, the device's name (and on CUDA its capability
        and multiprocessor count), the process group's backend."""
        torch, dev = self.torch, self.dev
        v: dict[str, Any] = {"framework": "torch", "torch": torch.__version__,
                             "cuda": torch.version.cuda,
                             "cudnn": torch.backends.cudnn.version() if self.cuda else None}
        if self.cuda:
            v["device_name"] = torch.cuda.get_device_name(dev)
            v["capability"] = ".".join(map(str, torch.cuda.get_device_capability(dev)))
            v["multiprocessors"] = torch.cuda.get_device_properties(dev).multi_processor_count
            try:
                v["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
            except Exception:  # noqa: BLE001 - a build without NCCL
                v["nccl"] = None
        else:
            v["device_name"] = cpu_model()
        if self.dist is not None:
            v["process_group_backend"] = self.dist.info["process_group_backend"]
        return v

    # -- the contract ------------------------------------------------------------------------

    def staged_step(self, mark: Any) -> Any:
        """One iteration with ``mark(stage)`` after each stage (:meth:`TorchStep.run
        <dlperf.frameworks.torch.step.TorchStep.run>`)."""
        return self.train.run(mark)

    def phase_timer(self) -> Any:
        """CUDA events on a GPU, the host clock on a CPU (:mod:`dlperf.measure.phases`)."""
        return CudaPhaseTimer(self.torch) if self.cuda else HostPhaseTimer()

    def profile(self, n: int, folder: Any) -> dict[str, Any]:
        """One warm-up and ``n`` fused steps under ``torch.profiler``
        (:func:`dlperf.frameworks.torch.profile.profile_steps`), with input shapes and FLOPs
        only when the run keeps a timeline (``cfg.measure.timeline``)."""
        return profile_steps(self.torch, self.step, self.cuda, n, folder,
                             shapes=bool(self.cfg.measure.timeline))

    def _comm_profile(self, k: int) -> dict[str, Any]:
        """``comm_profile`` of a data-parallel run
        (:func:`dlperf.frameworks.torch.profile.profile_comm`)."""
        return profile_comm(self.torch, self.step, k, self.cuda)

    def count_flops(self) -> dict[str, Any]:
        """One more iteration of the eager model (a dispatch mode under ``torch.compile``
        would recompile) under the FLOP and byte counters (:func:`count_step`)."""
        return count_step(self.torch, self.train.with_model(self.eager_model).run)

    def ceiling_backend(self) -> TorchCeilings:
        """The matmul/bandwidth ceiling kernels on this run's device."""
        return TorchCeilings(self.torch, self.dev)

    def on_phase(self, phase: str) -> None:
        """Right before the measured segment: snapshot the compile counters and start the
        pipeline's measured data waits."""
        if self.watch is not None:
            self.watch.on_phase(phase)
        if phase == "measure" and self.data_wait is not None:
            self.data_wait.mark_measure()

    def losses_to_floats(self, handles: list[Any]) -> list[float]:
        """Loss handles -> floats in one device-to-host copy."""
        if not handles:
            return []
        return self.torch.stack([h.float() for h in handles]).cpu().tolist()

    def memory(self) -> dict[str, int | None]:
        """Peak RSS; on CUDA the allocator's peaks and the NVML reading, in bytes."""
        if not self.cuda:
            return memory_record()
        cuda, (uuid, index) = self.torch.cuda, self.nvml_target
        return memory_record(int(cuda.max_memory_allocated(self.dev)),
                             int(cuda.max_memory_reserved(self.dev)),
                             nvml.memory_used_bytes(uuid, index))

    def close(self) -> None:
        """Stop the pipeline and free the model, optimizer and cached device memory. The
        process group is left to the process's exit (dlperf.launch.rank): destroying it after
        a peer failed can block."""
        self._close_data()
        self._close_data = _nothing
        self.step = self.phased_step = None  # type: ignore[assignment]
        for name in ("train", "opt", "eager_model"):  # a second close finds nothing to free
            self.__dict__.pop(name, None)
        if self.cuda:
            self.torch.cuda.empty_cache()
