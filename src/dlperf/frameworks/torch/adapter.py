"""PyTorch adapter: eager and compiled (``torch.compile``, mode ``graph``) training on CPU or CUDA.

Choices (each recorded in ``Session.flags``, docs/measurement.md rule 6):

* precision: ``fp32`` sets matmul and cuDNN float32 precision to IEEE (TF32 off, explicitly:
  cuDNN convolutions default to TF32 in PyTorch); ``tf32`` turns TF32 on for both; ``bf16`` is
  mixed precision with ``torch.autocast(dtype=bfloat16)`` over fp32 master weights, and TF32
  off for what autocast leaves in fp32. No loss scaling is needed for bf16.
* ``cudnn.benchmark = True`` on CUDA (PyTorch performance tuning guide): autotuning happens in
  the first iteration and warm-up of each shape, which the harness reports apart.
* optimizer: ``torch.optim.SGD``/``Adam``/``AdamW`` with PyTorch's default ``foreach``
  implementation; ``zero_grad(set_to_none=True)``.
* synthetic data: a pool of 4 distinct batches made on the device before timing, cycled.
  Models outside the default input/loss contract (``not spec.default_io``: token pairs,
  spectrograms, masked-LM or CTC, label smoothing; dlperf.zoo.spec) get their batches and loss
  from their implementation module's hooks ``synthetic_batch`` and ``loss_fn``.
  Real data: batches prepared on the host (pinned memory on CUDA) and copied with
  ``non_blocking=True`` inside each step, so the host-to-device copy is part of the iteration.
  With ``--loader-workers N`` (and always for an ImageFolder) the batches come from a
  ``DataLoader`` during training instead (``frameworks/torch_input.py``), and the time the step
  waits for each batch is recorded (``Session.data_wait``).
* after the measurement: one more iteration of the eager model under ``FlopCounterMode`` and a
  byte counter (``frameworks/torch_probes.py``), and the matmul/bandwidth ceilings.
* data parallelism (``cfg.world_size > 1``, one process per device started by torchrun):
  the process joins the process group (NCCL on CUDA, gloo on the CPU;
  :mod:`dlperf.frameworks.torch.dist`) and the model is wrapped in
  ``DistributedDataParallel`` with ``cfg.ddp``'s options (recorded in ``flags["ddp"]``); each
  rank trains on ``cfg.per_device_batch`` samples. Real data: the global batch ``k`` is cut
  as on one device and rank ``r`` takes its rows ``[r b, (r + 1) b)``, so runs on different
  device counts at the same global batch see the same samples in the same order. Synthetic
  data is drawn with seed ``seed + rank``. With gradient accumulation the first ``K - 1``
  micro-batches run under ``no_sync()`` (one all-reduce per iteration). After the measured
  segment, ``Session.comm_profile`` runs a few more iterations under ``torch.profiler`` and
  computes the exposed communication from the trace (:mod:`dlperf.measure.breakdown.overlap`).
"""

from __future__ import annotations

import contextlib
import itertools
import resource
from typing import Any

from dlperf import nvml
from dlperf.config import RunConfig
from dlperf.errors import UnavailableError
from dlperf.frameworks.base import DataSource, Session
from dlperf.frameworks.base import identity as _identity
from dlperf.measure.timers import CudaEventTimer, HostTimer
from dlperf.zoo import build_torch
from dlperf.zoo.spec import ModelSpec

SYNTHETIC_POOL = 4
#: Real data: at most this many distinct batches are kept on the host and cycled.
MAX_REAL_BATCHES = 512


def _peak_rss_bytes() -> int:
    # ru_maxrss is in kilobytes on Linux (getrusage(2)).
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def trace_activities(activity: Any, cuda: bool, purpose: str) -> list[Any]:
    """The ``torch.profiler`` activities to trace for ``purpose``.

    ``activity`` is ``torch.profiler.ProfilerActivity`` (passed in so this module imports
    without torch). ``purpose``:

    - ``"breakdown"``: CPU and, on a GPU, CUDA. The breakdown needs the CPU side: its steps
      are found by their ``record_function`` spans (CPU events) and the CPU dispatch time is
      read from the CPU ops. Traced with CUDA only, the trace has no step spans and the
      breakdown's trace fails (it did on the H200 in session 6, call 20).
    - ``"comm"``: on a GPU CUDA only (the exposed-communication rule uses kernels only, and
      tracing CPU ops slowed a host-bound step, googlenet fp32 on an H200 pair, from 31.7 to
      50.5 ms per iteration, which shifts the very overlap being measured); CPU on a CPU.

    Raises ValueError for another ``purpose``.
    """
    if purpose == "breakdown":
        return [activity.CPU] + ([activity.CUDA] if cuda else [])
    if purpose == "comm":
        return [activity.CUDA] if cuda else [activity.CPU]
    raise ValueError(f"unknown trace purpose {purpose!r}: use 'breakdown' or 'comm'")


#: How many distinct graph-break reasons a result keeps (their count is complete).
MAX_BREAK_REASONS = 5


def graph_break_reasons(counters: Any) -> dict[str, int]:
    """Dynamo's graph breaks so far: first line of each reason -> how many times, most first.

    Dynamo files a break under ``counters["graph_break"]`` when it splits a frame and resumes
    after the unsupported code (``print``, data-dependent control flow), and under
    ``counters["unimplemented"]`` when it stops tracing at something it does not support, such
    as an ``nn.LSTM`` module with ``torch._dynamo.config.allow_rnn`` off (the default in torch
    2.11-2.13: the embedding and dropout before it are compiled, the LSTM and everything after
    it run eagerly; measured on torch 2.13 CPU, one graph of two ops for ``lstm``). Both count:
    reading only the first (dlperf before 2026-12-02) recorded 0 breaks for the LSTM.
    """
    out: dict[str, int] = {}
    for kind in ("graph_break", "unimplemented"):
        for reason, n in counters[kind].items():
            key = str(reason).strip().splitlines()[0][:200] if str(reason).strip() else kind
            out[key] = out.get(key, 0) + int(n)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))



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

class TorchAdapter:
    """The PyTorch framework adapter (see module docstring for the choices it makes)."""

    name = "torch"
    modes = ("eager", "graph")

    def available(self) -> tuple[bool, str]:
        """(True, version) if torch imports, else (False, reason)."""
        try:
            import torch
        except Exception as e:  # pragma: no cover - depends on the install
            return False, f"torch is not installed ({e}); pip install 'dlperf[torch]'"
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

    @staticmethod
    def apply_precision(torch: Any, precision: str) -> dict[str, Any]:
        """Set the float32 matmul/convolution precision for ``precision``; return it as applied."""
        tf32 = precision == "tf32"
        mm, conv = torch.backends.cuda.matmul, torch.backends.cudnn
        if hasattr(mm, "fp32_precision"):  # PyTorch >= 2.9 API
            mm.fp32_precision = "tf32" if tf32 else "ieee"
            conv.conv.fp32_precision = "tf32" if tf32 else "ieee"
            conv.rnn.fp32_precision = "tf32" if tf32 else "ieee"
            applied = {"matmul_fp32_precision": mm.fp32_precision,
                       "cudnn_conv_fp32_precision": conv.conv.fp32_precision,
                       "cudnn_rnn_fp32_precision": conv.rnn.fp32_precision}
        else:  # pragma: no cover - older PyTorch
            mm.allow_tf32 = tf32
            conv.allow_tf32 = tf32
            applied = {"matmul_allow_tf32": mm.allow_tf32, "cudnn_allow_tf32": conv.allow_tf32}
        applied["autocast_dtype"] = "bfloat16" if precision == "bf16" else None
        applied["tf32"] = tf32
        return applied

    def prepare(self, cfg: RunConfig, spec: ModelSpec) -> Session:
        """Build model, optimizer, data and the step function for ``cfg`` (see module docs)."""
        import torch
        import torch.nn.functional as F

        if cfg.device == "cuda" and not torch.cuda.is_available():
            raise UnavailableError("device 'cuda' was asked for but torch sees no CUDA GPU; "
                                   "use --device cpu (or --device auto)")
        dev = torch.device(cfg.device)
        dist_ctx = None
        if cfg.distributed:
            from dlperf.frameworks.torch.dist import init_process_group

            dist_ctx, dev = init_process_group(torch, cfg)
        rank = dist_ctx.rank if dist_ctx is not None else 0
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        torch.manual_seed(cfg.seed)
        cuda = dev.type == "cuda"
        flags: dict[str, Any] = {"mode": cfg.mode, **self.apply_precision(torch, cfg.precision)}
        if cuda:
            torch.backends.cudnn.benchmark = True
            torch.cuda.reset_peak_memory_stats(dev)
        flags["cudnn_benchmark"] = bool(torch.backends.cudnn.benchmark) if cuda else None
        flags["threads"] = torch.get_num_threads()
        flags["grad_accum"] = cfg.grad_accum

        # Build (and initialise) the parameters on the device directly: initialising a 118 M
        # parameter FCN on the host and copying it costs seconds per configuration.
        with torch.device(dev):
            model = build_torch(spec)
        model.train()
        if (dev.type == "cpu" and cfg.precision == "bf16"
                and any(isinstance(m, torch.nn.LSTM) for m in model.modules())):
            _check_cpu_bf16_lstm(torch)
        channels_last = self.channels_last(cfg, spec)
        if channels_last:
            model = model.to(memory_format=torch.channels_last)
        flags["layout"] = ("NHWC" if channels_last else "NCHW") if spec.input_kind == "image" \
            else None  # the same spelling as the JAX and TensorFlow adapters
        o = spec.optimizer
        if o.name == "sgd":
            opt = torch.optim.SGD(model.parameters(), lr=o.lr, momentum=o.momentum,
                                  weight_decay=o.weight_decay)
        elif o.name == "adam":
            opt = torch.optim.Adam(model.parameters(), lr=o.lr, betas=o.betas, eps=o.eps,
                                   weight_decay=o.weight_decay)
        else:
            opt = torch.optim.AdamW(model.parameters(), lr=o.lr, betas=o.betas, eps=o.eps,
                                    weight_decay=o.weight_decay)
        flags["optimizer"] = {"name": o.name, "lr": o.lr, "momentum": o.momentum,
                              "weight_decay": o.weight_decay, "foreach": "default"}
        if o.name != "sgd":
            flags["optimizer"].update(betas=list(o.betas), eps=o.eps)
        ddp = None
        if dist_ctx is not None:
            from torch.nn.parallel import DistributedDataParallel

            o_ddp = cfg.ddp
            ddp = DistributedDataParallel(
                model, device_ids=[dev.index] if dev.type == "cuda" else None,
                bucket_cap_mb=o_ddp.bucket_cap_mb,
                gradient_as_bucket_view=o_ddp.gradient_as_bucket_view,
                static_graph=o_ddp.static_graph,
                find_unused_parameters=o_ddp.find_unused_parameters,
                broadcast_buffers=o_ddp.broadcast_buffers)
            model = ddp
            flags["ddp"] = o_ddp.model_dump()
            flags["per_device_batch"] = cfg.per_device_batch
            dist_ctx.info["ddp"] = o_ddp.model_dump()
        on_phase, compile_info = None, None
        eager_model = model
        if cfg.mode == "graph":
            model, on_phase, compile_info = self._compile(torch, model, flags, cfg.compile_mode,
                                                          dev.type == "cuda")

        src = self._data(torch, cfg, spec, dev, channels_last, rank)
        next_batch, data_info, fetch, to_device = src.next_batch, src.info, src.fetch, src.to_device
        data_wait, close_data = src.wait, src.close
        if data_wait is not None:
            on_phase = _and_then(on_phase, lambda ph: ph == "measure" and data_wait.mark_measure())

        n_classes = spec.num_classes
        bf16 = cfg.precision == "bf16"
        K = cfg.grad_accum

        def autocast():
            return torch.autocast(device_type=dev.type, dtype=torch.bfloat16) if bf16 \
                else contextlib.nullcontext()

        if spec.default_io:
            def loss_fn(out, y):
                # [B, C] or [B, T, V] logits against [B] or [B, T] targets.
                return F.cross_entropy(out.reshape(-1, n_classes), y.reshape(-1))
        else:
            # Other targets or losses (CTC, masked LM, label smoothing; dlperf.zoo.spec): the
            # model's implementation module defines the loss.
            import importlib

            loss_fn = importlib.import_module(
                f"dlperf.zoo.{spec.family}.torch_impl").loss_fn(spec)

        def no_sync(i: int):
            # DDP: all-reduce once, with the last micro-batch's backward.
            return ddp.no_sync() if ddp is not None and i < K - 1 else contextlib.nullcontext()

        # CUDA-graph compile modes: a new step starts a new generation of CUDA-graph outputs
        # (torch.compiler.cudagraph_mark_step_begin, PyTorch's CUDAGraph Trees documentation);
        # nothing in dlperf reads the previous step's model outputs.
        begin = (torch.compiler.cudagraph_mark_step_begin
                 if cfg.mode == "graph" and cfg.compile_mode in ("reduce-overhead", "max-autotune")
                 else (lambda: None))

        def make_step(model):
            if K == 1:
                def step():
                    x, y = next_batch()
                    begin()
                    opt.zero_grad(set_to_none=True)
                    with autocast():
                        loss = loss_fn(model(x), y)
                    loss.backward()
                    opt.step()
                    return loss.detach()
            else:
                def step():
                    x, y = next_batch()
                    begin()
                    opt.zero_grad(set_to_none=True)
                    total = None
                    for i, (xs, ys) in enumerate(zip(x.chunk(K), y.chunk(K))):
                        with no_sync(i):
                            with autocast():
                                loss = loss_fn(model(xs), ys) / K
                            loss.backward()
                        total = loss.detach() if total is None else total + loss.detach()
                    opt.step()
                    return total
            return step

        step = make_step(model)

        def count_flops() -> dict[str, Any]:
            # One more iteration, eager (a dispatch mode under torch.compile would recompile).
            from dlperf.frameworks.torch.probes import count_step

            return count_step(torch, make_step(eager_model))

        def ceiling_backend():
            from dlperf.frameworks.torch.probes import TorchCeilings

            return TorchCeilings(torch, dev)

        def phased_step(mark):
            # The fused step, cut at its phase boundaries (dlperf.measure.phases); zero_grad
            # (set_to_none: no kernels) counts in t_f. Under DDP the first K - 1 micro-batches
            # run under no_sync(), as in the fused step (one all-reduce, in the last t_b).
            b = fetch()
            mark("t_io")
            x, y = to_device(b)
            mark("t_h2d")
            begin()
            opt.zero_grad(set_to_none=True)
            total = None
            for i, (xs, ys) in enumerate(zip(x.chunk(K), y.chunk(K)) if K > 1
                                         else ((x, y),)):
                with no_sync(i):
                    with autocast():
                        loss = loss_fn(model(xs), ys)
                        if K > 1:
                            loss = loss / K
                    mark("t_f")
                    loss.backward()
                    mark("t_b")
                total = loss.detach() if total is None else total + loss.detach()
            opt.step()
            mark("t_u")
            return total

        def phase_timer():
            from dlperf.measure.phases import CudaPhaseTimer, HostPhaseTimer

            return CudaPhaseTimer(torch) if cuda else HostPhaseTimer()

        def profile(n: int, folder):
            return self._profile(torch, step, cuda, n, folder)

        def losses_to_floats(handles: list[Any]) -> list[float]:
            if not handles:
                return []
            return torch.stack([h.float() for h in handles]).cpu().tolist()

        uuid = None
        if cuda:
            props = torch.cuda.get_device_properties(dev)
            uuid = str(getattr(props, "uuid", "") or "") or None

        def memory() -> dict[str, int | None]:
            m: dict[str, int | None] = {"peak_rss_bytes": _peak_rss_bytes(),
                                        "peak_allocated_bytes": None, "peak_reserved_bytes": None,
                                        "nvml_used_bytes": None}
            if cuda:
                m["peak_allocated_bytes"] = int(torch.cuda.max_memory_allocated(dev))
                m["peak_reserved_bytes"] = int(torch.cuda.max_memory_reserved(dev))
                m["nvml_used_bytes"] = nvml.memory_used_bytes(uuid, dev.index or 0)
            return m

        versions: dict[str, Any] = {"framework": "torch", "torch": torch.__version__,
                                    "cuda": torch.version.cuda,
                                    "cudnn": torch.backends.cudnn.version() if cuda else None}
        if cuda:
            versions["device_name"] = torch.cuda.get_device_name(dev)
            versions["capability"] = ".".join(map(str, torch.cuda.get_device_capability(dev)))
            versions["multiprocessors"] = props.multi_processor_count
            try:
                versions["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
            except Exception:
                versions["nccl"] = None
            timer = CudaEventTimer(torch)
        else:
            from dlperf.env import cpu_model

            versions["device_name"] = cpu_model()
            timer = HostTimer()

        def close() -> None:
            # The process group is left to the process's exit (dlperf.launch.rank): destroying
            # it after a peer failed can block.
            nonlocal model, opt, eager_model
            close_data()
            del model, opt, eager_model
            if cuda:
                torch.cuda.empty_cache()

        comm_profile = None
        if dist_ctx is not None:
            versions["process_group_backend"] = dist_ctx.info["process_group_backend"]

            def comm_profile(k: int) -> dict[str, Any]:
                return self._profile_comm(torch, step, k, cuda)

        return Session(step=step, timer=timer, losses_to_floats=losses_to_floats, memory=memory,
                       versions=versions, flags=flags, data_info=data_info, close=close,
                       on_phase=on_phase, compile_info=compile_info, phased_step=phased_step,
                       phase_timer=phase_timer, profile=profile, data_wait=data_wait,
                       nvml_target=(uuid, dev.index or 0) if cuda else None,
                       count_flops=count_flops, ceiling_backend=ceiling_backend,
                       dist=dist_ctx, comm_profile=comm_profile)

    @staticmethod
    def _profile(torch: Any, step: Any, cuda: bool, n: int, folder: Any) -> dict[str, Any]:
        """Trace one warm-up and ``n`` steps with ``torch.profiler`` (CPU ops; CUDA kernels on
        a GPU), each step in ``record_function("dlperf_step#<i>")``; write the Chrome trace
        (``export_chrome_trace``) to ``folder/trace.json`` and parse it."""
        import json
        from pathlib import Path

        from torch.profiler import ProfilerActivity, profile, record_function, schedule

        from dlperf.measure.breakdown.torch_trace import STEP_PREFIX, from_chrome_trace

        acts = trace_activities(ProfilerActivity, cuda, purpose="breakdown")
        if cuda:
            torch.cuda.synchronize()
        # One warm-up step inside the profiler (CUPTI and profiler start-up costs), then n.
        with profile(activities=acts, schedule=schedule(wait=0, warmup=1, active=n, repeat=1),
                     record_shapes=False) as prof:
            for i in range(n + 1):
                with record_function(f"{STEP_PREFIX}{i - 1}"):
                    step()
                if i == n and cuda:
                    torch.cuda.synchronize()
                prof.step()
        path = Path(folder) / "trace.json"
        prof.export_chrome_trace(str(path))
        trace = from_chrome_trace(json.loads(path.read_text()))
        return {"trace": trace, "files": {"chrome_trace": path}}

    @staticmethod
    def _profile_comm(torch: Any, step: Any, k: int, cuda: bool) -> dict[str, Any]:
        """Run ``k`` iterations under ``torch.profiler`` and return the exposed communication
        per iteration (s; :func:`dlperf.measure.breakdown.overlap.exposed_communication`) from its trace.
        Every rank runs it (DDP needs the same steps everywhere); rank 0's numbers are stored."""
        import json
        import tempfile
        import time as _time

        from torch.profiler import ProfilerActivity, profile

        from dlperf.measure.breakdown.overlap import exposed_communication, spans_from_chrome_trace

        acts = trace_activities(ProfilerActivity, cuda, purpose="comm")
        with profile(activities=acts) as prof:
            t0 = _time.perf_counter()
            for _ in range(k):
                step()
            if cuda:
                torch.cuda.synchronize()
            wall = _time.perf_counter() - t0
        with tempfile.TemporaryDirectory(prefix="dlperf-trace-") as tmp:
            path = f"{tmp}/trace.json"
            prof.export_chrome_trace(path)
            with open(path) as f:
                trace = json.load(f)
        comm, compute, rule = spans_from_chrome_trace(trace)
        if cuda and rule != "gpu-kernels":
            return {"exposed": None, "profiled_iters": k, "rule": rule,
                    "reason": "the CUDA trace has no kernels (CUPTI unavailable?)"}
        out: dict[str, Any] = exposed_communication(comm, compute, k)
        out.update(profiled_iters=k, rule=rule, profiled_wall_s_per_iter=wall / k,
                   exposed_share_of_step=out["exposed"] / (wall / k) if wall > 0 else None,
                   n_comm_spans=len(comm),
                   note="separate profiled iterations after the measured segment")
        return out

    @staticmethod
    def _compile(torch: Any, model: Any, flags: dict[str, Any], mode: str = "default",
                 cuda: bool = False):
        """``torch.compile`` the model (graph mode); return it with compile-counter probes.

        TorchDynamo + Inductor in ``mode`` (:data:`dlperf.config.COMPILE_MODES`; ``default``
        unless ``--compile-mode`` says otherwise): forward and backward are compiled (the
        backward through AOTAutograd, on the first backward call); the optimizer update stays
        eager, as in PyTorch's own training recipes. Compilation happens in the first
        iteration, which the harness reports apart; compile time is read from Dynamo's
        ``compilation_time_metrics`` and the number of compiled graphs from its counters, so
        a graph compiled during the measured segment (a recompile) is detected. In the CUDA-graph
        modes (``reduce-overhead``, ``max-autotune``) Inductor may decline to capture a graph
        (CPU tensors, mutated inputs, ...): ``cudagraph_skips`` in the compile info counts
        those, from Inductor's counter (on CUDA only; the CPU has no CUDA graphs); 0 means every
        compiled graph ran as a CUDA graph. ``graph_breaks`` and ``graph_break_reasons``:
        :func:`graph_break_reasons`.
        """
        from torch._dynamo.utils import compilation_time_metrics, counters

        torch._dynamo.reset()  # fresh counters (one configuration per process anyway)
        compiled = torch.compile(model) if mode == "default" else torch.compile(model, mode=mode)
        flags["compile"] = {"backend": "inductor", "mode": mode, "fullgraph": False}
        at_measure: dict[str, int] = {}

        def graphs() -> int:
            return int(counters["stats"]["unique_graphs"])

        def on_phase(phase: str) -> None:
            if phase == "measure":
                at_measure["graphs"] = graphs()

        def compile_info() -> dict[str, Any]:
            t = sum(compilation_time_metrics.get("_compile.compile_inner", []))
            t += sum(compilation_time_metrics.get("backward._backward_impl", []))
            reasons = graph_break_reasons(counters)
            info = {"compile_time_s": t, "n_compiles": graphs(),
                    "graph_breaks": sum(reasons.values()),
                    "graph_break_reasons": dict(list(reasons.items())[:MAX_BREAK_REASONS]),
                    "recompiles_measured": graphs() - at_measure.get("graphs", graphs())}
            if mode in ("reduce-overhead", "max-autotune") and cuda:
                info["cudagraph_skips"] = int(counters["inductor"]["cudagraph_skips"])
            return info

        return compiled, on_phase, compile_info

    @staticmethod
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
        if cfg.layout == "auto":
            return cfg.device == "cuda" and cfg.precision in ("bf16", "tf32")
        return cfg.layout == "nhwc"

    @staticmethod
    def _data(torch: Any, cfg: RunConfig, spec: ModelSpec, dev: Any, channels_last: bool = False,
              rank: int = 0) -> DataSource:
        """The run's :class:`~dlperf.frameworks.base.DataSource`: ``next_batch()`` gives the
        (x, y) device tensors of one step; ``to_device(fetch())`` does the same in two parts
        (the batch as it is held, then its copy to the device), for the breakdown's t_io/t_h2d;
        ``wait`` is the recorder of a pipeline (else None) and ``close`` stops it. With
        ``channels_last`` the image batches are made channels-last
        (NHWC in memory). Each step has ``cfg.per_device_batch`` samples (this rank's share of
        the global batch)."""
        B = cfg.per_device_batch
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        if cfg.data == "synthetic":
            # Made on the device (a host-side randn of 4 x 8192 x 26752 floats takes seconds).
            g = torch.Generator(device=dev).manual_seed(cfg.seed + rank)
            pool = []
            make = None
            if not spec.default_io:  # other inputs/targets: the model module's hook
                import importlib

                make = importlib.import_module(
                    f"dlperf.zoo.{spec.family}.torch_impl").synthetic_batch
            for _ in range(SYNTHETIC_POOL):
                if make is not None:
                    x, y = make(spec, B, g, dev)
                elif spec.input_kind == "tokens":
                    x = torch.randint(0, spec.num_classes, (B, *spec.input_shape), generator=g,
                                      device=dev)
                    y = torch.randint(0, spec.num_classes, (B, *spec.input_shape), generator=g,
                                      device=dev)
                else:
                    x = torch.randn((B, *spec.input_shape), generator=g, device=dev)
                    y = torch.randint(0, spec.num_classes, (B,), generator=g, device=dev)
                    x = x.contiguous(memory_format=fmt) if x.dim() == 4 else x
                pool.append((x, y))
            it = itertools.cycle(pool)
            info = {"kind": "synthetic", "placement": "device", "distinct_batches": SYNTHETIC_POOL}
            return DataSource(it.__next__, info, it.__next__, _identity)

        import numpy as np

        from dlperf.data import load_dataset, make_batches

        ds = load_dataset(cfg.data, cfg.data_dir)
        if cfg.loader_workers is not None or ds.kind == "imagefolder":
            if cfg.global_batch != B:
                raise UnavailableError("a DataLoader pipeline (loader_workers, ImageFolder) with "
                                       "data parallelism is not built yet; use --nproc 1, or "
                                       "prepared batches (no --loader-workers)")
            return TorchAdapter._pipeline(torch, cfg, spec, dev, ds, fmt)
        X, Y = make_batches(ds, spec, cfg.global_batch, max_batches=MAX_REAL_BATCHES)
        if cfg.global_batch != B:  # this rank's rows of every global batch
            X, Y = X[:, rank * B:(rank + 1) * B], Y[:, rank * B:(rank + 1) * B]
        Xt, Yt = (torch.from_numpy(np.ascontiguousarray(a)) for a in (X, Y))
        cuda = dev.type == "cuda"
        if cuda:
            Xt, Yt = Xt.pin_memory(), Yt.pin_memory()
            batches = [(Xt[i], Yt[i]) for i in range(Xt.shape[0])]
            it = itertools.cycle(batches)

            to_device = _device_copier(dev, fmt)

            def next_batch():
                return to_device(next(it))
            fetch = it.__next__
        else:
            it = itertools.cycle([(Xt[i].contiguous(memory_format=fmt) if Xt.dim() == 5
                                   else Xt[i], Yt[i]) for i in range(Xt.shape[0])])
            next_batch = fetch = it.__next__
            to_device = _identity
        info = {"kind": "real", "dataset": ds.name, "path": str(ds.path),
                "rows": f"[{rank * B}, {(rank + 1) * B}) of each global batch of {cfg.global_batch}",
                "placement":
                "host-pinned" if cuda else "host", "distinct_batches": int(X.shape[0]),
                **{k: v for k, v in ds.meta.items() if isinstance(v, (int, float, str, bool))}}
        return DataSource(next_batch, info, fetch, to_device)

    @staticmethod
    def _pipeline(torch: Any, cfg: RunConfig, spec: ModelSpec, dev: Any, ds: Any,
                  fmt: Any) -> DataSource:
        """Real data through a DataLoader during training (frameworks/torch_input.py); returns
        what :meth:`_data` returns. ``fmt``: the memory format of image batches on the device."""
        from dlperf.data.pipeline import DataWaitRecorder
        from dlperf.frameworks.torch.input import make_loader

        host_next, pipe, close = make_loader(torch, cfg, spec, ds, dev)
        rec = DataWaitRecorder()
        timed_next = rec.wrap(host_next)

        to_device = _device_copier(dev, fmt)
        if dev.type == "cuda" or fmt is not torch.contiguous_format:
            def next_batch():
                return to_device(timed_next())
        else:
            next_batch = timed_next
            to_device = _identity
        info = {"kind": "real", "dataset": ds.name, "path": str(ds.path),
                "placement": "pipeline", "pipeline": pipe,
                **{k: v for k, v in ds.meta.items() if isinstance(v, (int, float, str, bool))}}
        return DataSource(next_batch, info, timed_next, to_device, wait=rec, close=close)


def _device_copier(dev: Any, fmt: Any):
    """``(x, y)`` host batch -> device batch (asynchronous copies from pinned memory); 4-D
    images in memory format ``fmt`` (channels_last or contiguous)."""
    def to_device(b):
        x = b[0].to(dev, non_blocking=True)
        return (x.contiguous(memory_format=fmt) if x.dim() == 4 else x), \
            b[1].to(dev, non_blocking=True)

    return to_device


def _and_then(first, second):
    """``on_phase`` calling ``first`` (if any), then ``second``."""
    if first is None:
        return second

    def both(phase: str) -> None:
        first(phase)
        second(phase)

    return both
