"""Typed, validated run and sweep configurations.

A :class:`RunConfig` is one benchmark point (model x framework x mode x device x precision x
batch size x data). It is frozen and validated on construction; every error names the bad
field and the valid choices. Its :meth:`RunConfig.run_key` identifies the measurement, so a
resumed sweep can tell which points are already done.

A :class:`SweepConfig` is a grid read from YAML (``dlperf sweep FILE.yaml``)::

    name: dlbench-h200
    defaults:                 # any RunConfig field
      device: cuda
      iterations: {min_iters: 30, min_time_s: 2.0}
      repeats: 3              # each point 3 times, each run a fresh process (default 1)
    grid:                     # each entry: lists are crossed (Cartesian product)
      - model: [fcn5, fcn8]
        batch_size: [16, 64, 256]
        precision: [fp32, bf16]
      - suite: quick          # expands to the suite's (model, data) entries
        batch_size: 16
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import (BaseModel, ConfigDict, Field, ValidationError, ValidationInfo,
                      field_validator, model_validator)

from dlperf.errors import ConfigError, did_you_mean, unknown_choice

DEVICES = ("cpu", "cuda")
PRECISIONS = ("fp32", "tf32", "bf16")
LAYOUTS = ("auto", "nchw", "nhwc")
#: torch.compile's modes (``torch.compile(mode=...)``; PyTorch's torch.compile documentation):
#: ``default``; ``reduce-overhead`` replays the compiled graphs as CUDA graphs (one launch for
#: many kernels: the remedy PyTorch gives for steps bound by kernel-launch overhead);
#: ``max-autotune`` also autotunes matmul/conv templates (and uses CUDA graphs);
#: ``max-autotune-no-cudagraphs`` autotunes without them.
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
#: How a JAX input pipeline's ``loader_workers`` run (``RunConfig.loader_impl``): ``auto``
#: (Grain worker processes where Grain is installed, else dlperf's host threads), ``processes``
#: (Grain, required) or ``threads`` (dlperf's :class:`~dlperf.data.pipeline.HostPipeline`).
#: PyTorch (DataLoader processes) and TensorFlow (tf.data) have one pipeline each: ``auto`` only.
LOADER_IMPLS = ("auto", "processes", "threads")
#: Fields added after the first stored results, with their defaults: a field at its default
#: is left out of :meth:`RunConfig.run_key`, so adding a field does not change the key (and the
#: resumability) of every point already stored.
KEY_OMIT_AT_DEFAULT: dict[str, Any] = {"layout": "auto", "repeat": 0, "loader_impl": "auto",
                                       "compile_mode": "default"}
SCALINGS = ("strong", "weak")
#: How data-parallel replicas map to processes: one process per device (PyTorch DDP, JAX
#: multi-process, TensorFlow MultiWorkerMirroredStrategy with one worker per device) or one
#: process per node driving all its local devices (JAX sharded jit, TensorFlow
#: MirroredStrategy on one node / MultiWorkerMirroredStrategy with one worker per node).
DP_LAYOUT_KINDS = ("per_device", "per_node")
#: Each framework's own data-parallel engine and its process layouts (first = default).
DP_LAYOUTS = {"torch": ("per_device",), "jax": ("per_node", "per_device"),
              "tensorflow": ("per_node", "per_device"), "fake": ("per_device",),
              "mxnet": ("per_device",)}
#: What data parallelism is not built for (checked before anything runs): TensorFlow's XLA mode
#: under a tf.distribute strategy (XLA cannot reach mirrored variables on other devices).
DP_MODES = {"tensorflow": ("eager", "graph")}
from dlperf.registry import FRAMEWORK_MODES, FRAMEWORKS  # noqa: E402 (framework-free table)


class IterationPolicy(BaseModel):
    """How many iterations to run: warm-up detection and the stopping rule (docs/measurement.md 3, 5).

    Warm-up runs in windows of ``warmup_window`` iterations; it ends when the median of the last
    window is within ``warmup_rel_tol`` of the median of the window before it (steady state), or
    when ``max_warmup_iters`` / ``max_warmup_time_s`` is reached (then the result is flagged
    ``steady_state = False``). Measurement stops once *both* ``min_iters`` iterations and
    ``min_time_s`` seconds are reached, or earlier at ``max_iters`` / ``max_time_s`` (the time
    budget), whichever comes first.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    min_iters: int = Field(20, ge=1)
    min_time_s: float = Field(1.0, ge=0.0)
    max_iters: int = Field(100_000, ge=1)
    max_time_s: float = Field(60.0, gt=0.0)
    warmup_window: int = Field(5, ge=2)
    warmup_rel_tol: float = Field(0.05, gt=0.0, lt=1.0)
    min_warmup_iters: int = Field(10, ge=0)
    max_warmup_iters: int = Field(500, ge=0)
    max_warmup_time_s: float = Field(20.0, ge=0.0)

    @model_validator(mode="after")
    def _check(self) -> IterationPolicy:
        if self.max_iters < self.min_iters:
            raise ValueError(f"max_iters ({self.max_iters}) must be >= min_iters ({self.min_iters})")
        if self.max_time_s < self.min_time_s:
            raise ValueError(f"max_time_s ({self.max_time_s}) must be >= min_time_s ({self.min_time_s})")
        return self


def crossed_compile_mode(mode: Any, compile_mode: Any, modes_listed: Any) -> bool:
    """True for a combination that a cross product of ``--mode eager,graph`` with
    ``--compile-mode default,reduce-overhead`` makes but that means nothing: a compile mode
    other than the default with a mode other than ``graph``, when ``graph`` is among the modes
    listed. Such combinations are dropped (the eager point is kept once, with the default);
    without ``graph`` in the list the combination is kept, and refused with its reason."""
    listed = modes_listed if isinstance(modes_listed, (list, tuple)) else [modes_listed]
    return (compile_mode not in (None, "default") and mode != "graph" and "graph" in listed)


def _has_image_layout(model: str) -> bool:
    """True if ``model`` has image (4-D) activations, where ``layout`` applies; True for an
    unknown name (the layout then stays in its key; the model is refused elsewhere)."""
    from dlperf.zoo import get_spec, is_model

    return not is_model(model) or get_spec(model).input_kind == "image"


class DDPOptions(BaseModel):
    """``torch.nn.parallel.DistributedDataParallel`` options (docs/measurement.md rule 6: recorded and
    settable). Defaults are PyTorch's own (``bucket_cap_mb=25``, ``broadcast_buffers`` on: rank
    0's buffers, e.g. BatchNorm running statistics, are broadcast at every forward; the rest
    off); see the PyTorch DDP documentation for what each changes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bucket_cap_mb: float = Field(25.0, gt=0.0)
    gradient_as_bucket_view: bool = False
    static_graph: bool = False
    find_unused_parameters: bool = False
    broadcast_buffers: bool = True

    def changed(self) -> list[str]:
        """``["broadcast_buffers=False", ...]``: the options not at their default, for labels."""
        return ddp_changes(self.model_dump())

    def key_dict(self) -> dict[str, Any]:
        """The options for a run key: fields added after the first results count only when
        not at their default (``broadcast_buffers``), so older keys stay valid."""
        d = self.model_dump()
        if d["broadcast_buffers"]:
            del d["broadcast_buffers"]
        return d


def layout_change(framework: Any, dp_layout: Any) -> str | None:
    """``dp_layout`` when it is not the framework's default (:data:`DP_LAYOUTS`), e.g.
    ``"per_device"`` for a TensorFlow or JAX run with one process per device; else None."""
    layouts = DP_LAYOUTS.get(framework) if isinstance(framework, str) else None
    return dp_layout if layouts and dp_layout and dp_layout != layouts[0] else None


def ddp_changes(options: Any) -> list[str]:
    """The DDP options of a stored result (``config.ddp``, a dict) that are not at their
    default, as ``"name=value"``; ``[]`` for none or for anything that is not a dict.

    Used by run labels, result lines and results tables, so that two runs differing only in a
    DDP option tell apart.
    """
    if not isinstance(options, dict):
        return []
    dflt = DDPOptions().model_dump()
    return [f"{k}={v}" for k, v in options.items() if k in dflt and v != dflt[k]]


class RunConfig(BaseModel):
    """One benchmark point. ``batch_size`` is the global mini-batch (samples per iteration).

    With ``grad_accum = K`` each iteration runs K micro-batches of ``batch_size / K`` before one
    optimizer update, so the samples per iteration stay ``batch_size`` (docs/measurement.md rule 9).
    ``data`` is ``"synthetic"`` (generated on the device before timing), a data-set name
    (``mnist``, ``cifar10``, ``ptb``, ``wikitext2``, ``imagefolder``, looked up under
    ``data_dir`` or ``$DLPERF_DATA``), ``imagefolder:PATH``, or a path to a data file or folder.

    Real input (dlperf.data.pipeline): with ``loader_workers = N`` (>= 0) real data go through
    the framework's input pipeline during training (PyTorch DataLoader with N worker processes,
    tf.data with N threads, JAX: N Grain worker processes, or N host threads), ``loader_prefetch``
    batches ahead; ``None`` (the default) cycles batches prepared before timing, except for an
    ImageFolder, which is always read through the pipeline (with 0 workers by default).
    ``loader_impl`` (:data:`LOADER_IMPLS`, JAX only) picks what the JAX workers are: ``auto``
    (Grain processes where Grain is installed, else threads, with a warning in the result),
    ``processes`` or ``threads``; with 0 workers the batch is made on the calling thread
    whatever it says.
    ``input_bound_share`` is the share of the measured time spent waiting for data above which
    the run is labelled input-bound (dlperf.data.pipeline says why totals, not medians). ``measure_ceilings`` runs the matmul and memory
    bandwidth microbenchmarks after the measurement (for MFU); ``power_interval_s`` is the NVML
    sampling interval on a GPU.

    ``layout`` is the memory layout of image activations: ``auto`` lets the adapter apply its
    framework's recommendation (PyTorch: channels_last on CUDA for convolutional networks in bf16
    and tf32, where cuDNN's Tensor Core kernels want NHWC, per its performance tuning guide, and
    NCHW in fp32; Flax and Keras: NHWC, their native layout); ``nchw``/``nhwc``
    force one (PyTorch only). The layout as applied is recorded in the result's flags.
    ``compile_mode`` is ``torch.compile``'s mode in PyTorch's graph mode (:data:`COMPILE_MODES`);
    the result's ``flags.compile`` records it and, for the CUDA-graph modes, how many graphs
    Inductor declined to capture (``cudagraph_skips``).

    Data parallelism (docs/measurement.md "Scaling"): ``nproc`` devices per node on ``nnodes`` nodes,
    ``world_size = nproc * nnodes`` replicas. ``scaling="strong"`` (default): ``batch_size`` is
    the global mini-batch, split evenly across the replicas (it must be divisible by
    ``world_size * grad_accum``); ``scaling="weak"``: ``batch_size`` is the per-device batch
    and the global batch is ``batch_size * world_size``. :attr:`global_batch` and
    :attr:`per_device_batch` give both. ``dp_layout`` is how replicas map to processes
    (:data:`DP_LAYOUT_KINDS`; default: the framework's first in :data:`DP_LAYOUTS`); ``ddp`` holds
    PyTorch DDP's options. ``target_loss`` (reporting only) is the training loss whose time
    to reach is reported (:mod:`dlperf.perfmodel.convergence`).

    ``repeat`` (>= 0) tells apart repeated runs of one point (docs/measurement.md rule 5: between-run
    variation), each measured in its own fresh worker process: ``dlperf run --repeats N`` and
    ``repeats: N`` in a sweep make repeats 0 .. N-1 (:func:`with_repeats`). It is part of the
    run key only when non-zero, so repeat 0 is the point as it was always keyed;
    :meth:`point_key` is the key shared by all repeats of a point.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    framework: str = "torch"
    mode: str = ""  # "" -> the framework's first (default) mode
    device: str = "cpu"
    precision: str = "fp32"
    batch_size: int = Field(..., ge=1, strict=True)
    grad_accum: int = Field(1, ge=1, strict=True)
    data: str = "synthetic"
    data_dir: str | None = None
    threads: int | None = Field(None, ge=1)
    seed: int = 0
    layout: str = "auto"
    compile_mode: str = "default"
    iterations: IterationPolicy = Field(default_factory=IterationPolicy)
    timeout_s: float = Field(900.0, gt=0.0)
    breakdown: bool = False
    trace_dir: str | None = None
    loader_workers: int | None = Field(None, ge=0, strict=True)
    loader_prefetch: int = Field(2, ge=1, strict=True)
    loader_impl: str = "auto"
    input_bound_share: float = Field(0.10, gt=0.0, lt=1.0)
    measure_ceilings: bool = True
    power_interval_s: float = Field(0.025, ge=0.005, le=1.0)
    nproc: int = Field(1, ge=1, strict=True)
    nnodes: int = Field(1, ge=1, strict=True)
    scaling: str = "strong"
    dp_layout: str = ""  # "" -> the framework's default (DP_LAYOUTS)
    ddp: DDPOptions = Field(default_factory=DDPOptions)
    comm_profile_iters: int = Field(5, ge=0, strict=True)
    target_loss: float | None = None
    repeat: int = Field(0, ge=0, strict=True)

    @field_validator("model")
    @classmethod
    def _model_known(cls, v: str) -> str:
        from dlperf.zoo import get_spec

        return get_spec(v).name  # a source's model by its canonical name (dlperf.zoo.sources)

    @field_validator("framework", "device", "precision", "layout", "scaling", "loader_impl",
                     "compile_mode")
    @classmethod
    def _choice_known(cls, v: str, info: ValidationInfo) -> str:
        choices = {"framework": FRAMEWORK_MODES, "device": DEVICES,
                   "precision": PRECISIONS, "layout": LAYOUTS, "compile_mode": COMPILE_MODES,
                   "scaling": SCALINGS, "loader_impl": LOADER_IMPLS}[info.field_name]
        if v not in choices:
            raise unknown_choice(info.field_name, v, choices)
        return v

    @model_validator(mode="before")
    @classmethod
    def _default_mode(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("mode"):
            modes = FRAMEWORK_MODES.get(data.get("framework", "torch"))
            if modes:
                data = {**data, "mode": modes[0]}
        if isinstance(data, dict) and not data.get("dp_layout"):
            layouts = DP_LAYOUTS.get(data.get("framework", "torch"))
            if layouts:
                data = {**data, "dp_layout": layouts[0]}
        if (isinstance(data, dict) and data.get("loader_workers") is None
                and str(data.get("data") or "").startswith("imagefolder")):
            # An ImageFolder is always read through the pipeline, with 0 workers by default:
            # one point, one run key (None and 0 were two keys for one measurement).
            data = {**data, "loader_workers": 0}
        return data

    @model_validator(mode="after")
    def _check(self) -> RunConfig:
        modes = FRAMEWORK_MODES[self.framework]
        if self.mode not in modes:
            raise unknown_choice("mode", self.mode, modes,
                                 plural=f"modes of framework {self.framework!r}")
        # (tests register a fake framework in FRAMEWORK_MODES only: no capability limits)
        info = FRAMEWORKS.get(self.framework)
        if info is None:
            pass
        elif self.device not in info.devices:
            raise ValueError(
                f"device {self.device!r} is not available for framework {self.framework!r}, "
                f"which runs on {', '.join(info.devices)} only"
                + (" (the MXNet 1.9.1 pip wheel is a CPU build)" if self.framework == "mxnet"
                   else "") + f"; use --device {info.devices[0]}")
        if info is not None and self.precision not in info.precisions:
            raise ValueError(f"precision {self.precision!r} is not implemented for framework "
                             f"{self.framework!r}; use --precision "
                             f"{' or '.join(info.precisions)}")
        if info is not None and info.models is not None:
            base = self.model.removesuffix("_tiny")
            if base not in info.models:
                raise ValueError(f"model {self.model!r} has no {self.framework} implementation; "
                                 f"{self.framework} has {', '.join(info.models)} (and their "
                                 "_tiny variants)")
        if info is not None and not info.breakdown and (self.breakdown or self.trace_dir):
            raise ValueError(f"--breakdown and --trace are not available for framework "
                             f"{self.framework!r} (no profiler split of its step); run without "
                             "them")
        if info is not None and not info.pipelines and (
                self.loader_workers is not None or str(self.data).startswith("imagefolder")):
            raise ValueError(f"framework {self.framework!r} has no input pipeline: "
                             "--loader-workers and ImageFolder data are not available; use "
                             "synthetic data or a data set read into memory (mnist, cifar10, "
                             "ptb, wikitext2)")
        if info is not None and not info.data_parallel and self.world_size > 1:
            raise ValueError(f"data parallelism (nproc x nnodes = {self.world_size}) is not "
                             f"available for framework {self.framework!r}; use --nproc 1")
        if self.framework == "mxnet":
            if self.layout == "nhwc":
                raise ValueError("layout 'nhwc' is not available for framework 'mxnet': its "
                                 "models are NCHW (MXNet's native layout); use --layout auto")
        elif self.layout == "nchw" and self.framework != "torch":
            raise ValueError(f"layout 'nchw' is a PyTorch option: the {self.framework} models "
                             "are NHWC (channels last); use --layout auto or nhwc")
        if self.compile_mode != "default" and (self.framework, self.mode) != ("torch", "graph"):
            raise ValueError(f"compile_mode {self.compile_mode!r} is torch.compile's mode: it "
                             f"needs --framework torch --mode graph (got {self.framework}/"
                             f"{self.mode}); leave --compile-mode at default for the others")
        if self.trace_dir is not None:
            if not self.trace_dir.strip():
                raise ValueError("trace_dir is empty; give a folder for the traces, e.g. "
                                 "--trace traces/")
            p = Path(self.trace_dir).expanduser()
            if p.exists() and not p.is_dir():
                raise ValueError(f"trace_dir {self.trace_dir!r} is a file; give a folder for "
                                 f"the traces (created if missing)")
            # The folder is created after the measurement: a file on its path would only fail
            # then (the point stored without its trace), so it is refused here.
            for anc in p.parents:
                if anc.exists():
                    if not anc.is_dir():
                        raise ValueError(f"trace_dir {self.trace_dir!r}: '{anc}' is a file, so "
                                         f"the trace folder cannot be created there; give a "
                                         f"folder path that does not pass through a file")
                    break
        if self.loader_workers is not None and self.data == "synthetic":
            raise ValueError(
                f"loader_workers {self.loader_workers} needs real data (--data mnist, cifar10, "
                f"ptb, wikitext2, imagefolder:PATH, ...): synthetic data are made on the device "
                f"and have no input pipeline")
        if self.loader_impl != "auto":
            if self.framework != "jax":
                own = {"torch": "its DataLoader's worker processes",
                       "tensorflow": "tf.data's own threads"}.get(self.framework,
                                                                  "its own input pipeline")
                raise ValueError(
                    f"loader_impl {self.loader_impl!r} is a JAX option: framework "
                    f"{self.framework!r} always uses {own}; use --loader-impl auto")
            if self.loader_workers is None and not str(self.data).startswith("imagefolder"):
                raise ValueError(
                    f"loader_impl {self.loader_impl!r} applies to an input pipeline, and this "
                    f"run has none (batches prepared before timing); give --loader-workers N "
                    f"(or ImageFolder data), or use --loader-impl auto")
        layouts = DP_LAYOUTS.get(self.framework, ("per_device",))
        if self.dp_layout not in layouts:
            raise unknown_choice("dp_layout", self.dp_layout, layouts,
                                 plural=f"data-parallel layouts of framework {self.framework!r}")
        if self.framework not in ("torch", "fake") and self.ddp != DDPOptions():
            raise ValueError(f"DDP options (--bucket-cap-mb, --static-graph, ...) are PyTorch "
                             f"DistributedDataParallel's; framework {self.framework!r} has none")
        n = self.world_size
        if n > 1 and self.mode not in DP_MODES.get(self.framework, (self.mode,)):
            raise ValueError(f"data parallelism (nproc x nnodes > 1) is not available for "
                             f"{self.framework}/{self.mode}; use mode "
                             f"{' or '.join(DP_MODES[self.framework])}")
        if (self.framework == "tensorflow" and self.device == "cpu" and self.nnodes > 1
                and self.nproc > 1 and self.dp_layout == "per_node"):
            # TensorFlow's CollectiveAllReduceExtended gives a worker without GPUs exactly one
            # device (CPU:0), so a worker cannot drive several logical CPU devices.
            raise ValueError(f"dp_layout 'per_node' with TensorFlow on the CPU across nodes: "
                             f"MultiWorkerMirroredStrategy drives one CPU device per worker "
                             f"process, so --nproc {self.nproc} on each of --nnodes "
                             f"{self.nnodes} nodes needs one process per device; use "
                             f"--dp-layout per_device")
        if self.scaling == "strong" and self.batch_size % n:
            raise ValueError(
                f"batch_size {self.batch_size} is not divisible by the {n} devices "
                f"(nproc {self.nproc} x nnodes {self.nnodes}): with strong scaling the global "
                f"batch is split evenly; give a multiple of {n} (e.g. "
                f"{max(n, self.batch_size - self.batch_size % n)}) or use --scaling weak")
        if self.per_device_batch % self.grad_accum:
            raise ValueError(
                f"the per-device batch {self.per_device_batch} is not divisible by grad_accum "
                f"{self.grad_accum}; choose a batch size that is a multiple of the accumulation "
                "steps" + (" times the devices" if n > 1 and self.scaling == "strong" else ""))
        return self

    @property
    def world_size(self) -> int:
        """Data-parallel replicas (devices): ``nproc * nnodes``."""
        return self.nproc * self.nnodes

    @property
    def global_batch(self) -> int:
        """Samples per iteration over all replicas (docs/measurement.md: per-device x devices)."""
        return self.batch_size * self.world_size if self.scaling == "weak" else self.batch_size

    @property
    def per_device_batch(self) -> int:
        """Samples per iteration on one replica."""
        return self.batch_size if self.scaling == "weak" else self.batch_size // self.world_size

    @property
    def processes_per_node(self) -> int:
        """Processes a launcher starts on each node: ``nproc`` (per_device) or 1 (per_node)."""
        return self.nproc if self.dp_layout == "per_device" else 1

    @property
    def distributed(self) -> bool:
        """True when more than one replica trains (data parallelism)."""
        return self.world_size > 1

    def run_key(self) -> str:
        """A stable 16-hex-digit key of the benchmark point: what is trained, where and how.

        ``iterations``, ``data_dir`` and ``timeout_s`` are excluded: they say how long and from
        where, not what is measured, so changing them does not make a finished point of a
        sweep run again (the policy actually used is stored with every result); so are the
        labelling and probing settings ``input_bound_share``, ``measure_ceilings`` and
        ``power_interval_s``. A breakdown or a trace is part of what is measured:
        ``breakdown: true`` and ``trace: true`` enter the key when set (not the trace folder).
        Fields added after the first results (``layout``, ``repeat``, ``compile_mode``, the
        input-pipeline fields) count only when set, so keys of results stored before they existed stay valid:
        repeat 0 has the key the point always had, repeat k > 0 a key of its own;
        ``loader_impl`` counts when it is not ``auto`` and there are workers (with 0 workers
        every implementation makes the batch on the calling thread: one measurement).
        """
        d = self.model_dump(exclude={"data_dir", "timeout_s", "iterations", "breakdown",
                                     "trace_dir", "input_bound_share", "measure_ceilings",
                                     "power_interval_s", "target_loss", "comm_profile_iters",
                                     "scaling", "nproc", "nnodes", "dp_layout", "ddp",
                                     "batch_size"})
        for k, default in KEY_OMIT_AT_DEFAULT.items():
            if d.get(k) == default:
                del d[k]
        if "layout" in d and not _has_image_layout(self.model):
            del d["layout"]  # no 4-D activations: the layout changes nothing measured
        if d["loader_workers"] is None:
            del d["loader_workers"], d["loader_prefetch"]
        if not self.loader_workers:  # 0 workers: the calling thread, whatever loader_impl says
            d.pop("loader_impl", None)
        if self.breakdown:
            d["breakdown"] = True
        if self.trace_dir:
            d["trace"] = True
        # The batch by what it measures: the global batch (one replica: the batch as before, so
        # keys of single-device results made before data parallelism existed do not change).
        d["batch_size"] = self.global_batch
        if self.distributed:
            d.update(nproc=self.nproc, nnodes=self.nnodes, dp_layout=self.dp_layout)
            if self.framework in ("torch", "fake"):
                d["ddp"] = self.ddp.key_dict()
        blob = json.dumps(d, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def point_key(self) -> str:
        """The run key of this point's repeat 0: the same for every repeat of a point (what
        ``dlperf results --compare repeats`` groups by)."""
        return self.run_key() if self.repeat == 0 else self.model_copy(
            update={"repeat": 0}).run_key()

    def label(self) -> str:
        """Short human label, e.g. ``resnet50 torch/eager cuda bf16 b=64 synthetic`` (a
        torch.compile mode other than the default after the mode: ``torch/graph
        [reduce-overhead]``); data
        parallel: ``b=128 (2x64)`` and ``x2`` devices (``2x2`` for 2 nodes of 2); a repeated run
        ends in ``#k`` (its ``repeat``, 0-based; repeat 0 has none)."""
        thr = f" threads={self.threads}" if self.threads else ""
        thr += (f" layout={self.layout}" if self.layout != "auto" and _has_image_layout(self.model)
                else "")
        lw = f" workers={self.loader_workers}" if self.loader_workers is not None else ""
        lw += f" loader={self.loader_impl}" if self.loader_impl != "auto" else ""
        extra = (" +breakdown" if self.breakdown else "") + (" +trace" if self.trace_dir else "")
        b, par = f"b={self.global_batch}", ""
        if self.distributed:
            b += f" ({self.world_size}x{self.per_device_batch})"
            par = (f" x{self.nproc}" if self.nnodes == 1 else f" {self.nnodes}x{self.nproc}")
            lay = layout_change(self.framework, self.dp_layout)
            extra += f" {lay}" if lay else ""
            if self.framework in ("torch", "fake"):
                changed = self.ddp.changed()
                extra += f" ddp({', '.join(changed)})" if changed else ""
        extra += f" #{self.repeat}" if self.repeat else ""
        cm = f" [{self.compile_mode}]" if self.compile_mode != "default" else ""
        return (f"{self.model} {self.framework}/{self.mode}{cm} {self.device}{par} "
                f"{self.precision} {b} {self.data}{thr}{lw}{extra}")


def check_repeats(value: Any, where: str = "--repeats") -> int:
    """``value`` as a number of runs per point (an integer >= 1).

    Raises:
        ConfigError: anything else (0, a negative number, a list, a bool, text), naming
            ``where`` (``--repeats``, or ``grid[i].repeats:`` in a sweep file) and the value.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where} {value!r} is not a valid number of runs per point: give an "
                          "integer >= 1 (each run is a fresh process; 3 or more give the "
                          "olympic mean)")
    return value


def with_repeats(points: Sequence[RunConfig], repeats: int | Sequence[int]) -> list[RunConfig]:
    """Each point as ``repeats`` runs (``repeat`` 0 .. N-1), in rounds: repeat 0 of every
    point, then repeat 1 of every point, and so on (a point with fewer repeats drops out of
    the later rounds).

    Rounds rather than a point's repeats back to back: slow drift over a sweep (clocks and
    temperature, other tenants of the machine, caches) then spreads over every point instead
    of landing on one point's runs, so the spread of a point's runs covers the whole sweep; a
    sweep stopped early has every point at least once. Each run is a fresh worker process
    either way (:mod:`dlperf.sweep`), which is what makes the runs independent.

    Args:
        points: the points (their own ``repeat`` is replaced).
        repeats: runs per point, one number for all or one per point.

    Raises:
        ConfigError: a count below 1 (:func:`check_repeats`); ValueError if a list of counts
            does not match ``points`` in length.
    """
    counts = [repeats] * len(points) if isinstance(repeats, int) else list(repeats)
    if len(counts) != len(points):
        raise ValueError(f"{len(counts)} repeat counts for {len(points)} points")
    for n in counts:
        check_repeats(n)
    return [p if p.repeat == r else p.model_copy(update={"repeat": r})
            for r in range(max(counts, default=0))
            for p, n in zip(points, counts) if r < n]


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` if a GPU is usable here, else ``cpu``; ``cpu``/``cuda`` are checked.

    Raises:
        ConfigError: an unknown device, or ``cuda`` on a machine where none is usable.
    """
    if device not in ("auto", "cpu", "cuda"):
        raise unknown_choice("device", device, ("auto", "cpu", "cuda"))
    if device == "cpu":
        return device
    from dlperf import nvml

    usable = False
    if nvml.gpus():
        try:
            import torch

            usable = torch.cuda.is_available()
        except ImportError:
            usable = True  # another framework may use it; its adapter checks
    if device == "auto":
        return "cuda" if usable else "cpu"
    if not usable:
        raise ConfigError("device 'cuda' was asked for but no CUDA GPU is usable here; "
                          "use --device cpu or --device auto")
    return device


#: RunConfig field -> the CLI flag that sets it, for error messages.
CLI_FLAGS = {"min_iters": "--min-iters", "min_time_s": "--min-time", "max_iters": "--max-iters",
             "max_time_s": "--max-time", "warmup_window": "--warmup-window",
             "max_warmup_iters": "--max-warmup-iters", "max_warmup_time_s": "--max-warmup-time",
             "timeout_s": "--timeout", "batch_size": "--batch-size", "grad_accum": "--grad-accum",
             "threads": "--threads", "layout": "--layout", "loader_workers": "--loader-workers",
             "loader_prefetch": "--loader-prefetch", "loader_impl": "--loader-impl",
             "input_bound_share": "--input-bound-share",
             "power_interval_s": "--power-interval", "nproc": "--nproc", "nnodes": "--nnodes",
             "scaling": "--scaling", "dp_layout": "--dp-layout", "bucket_cap_mb": "--bucket-cap-mb",
             "comm_profile_iters": "--comm-profile-iters", "target_loss": "--target-loss"}


def make_policy(**fields: Any) -> IterationPolicy:
    """Construct an :class:`IterationPolicy`; ConfigError names the CLI flag that is wrong."""
    try:
        return IterationPolicy(**fields)
    except ValidationError as e:
        raise ConfigError(_format_validation(e, flags=True)) from None


def make_run_config(**fields: Any) -> RunConfig:
    """Construct a :class:`RunConfig`, turning pydantic's errors into one :class:`ConfigError`.

    Raises:
        ConfigError: naming each bad field, its value and what is allowed.
    """
    try:
        return RunConfig(**fields)
    except ValidationError as e:
        raise ConfigError(_format_validation(e, flags=True)) from None


def _unknown_field_message(name: str) -> str:
    """``unknown field 'gird'; did you mean 'grid'?`` (the closest field of any config model)."""
    known = sorted({f for m in (RunConfig, IterationPolicy, DDPOptions, SweepConfig)
                    for f in m.model_fields})
    return f"unknown field {name!r}{did_you_mean(name, known)}"


def _format_validation(e: ValidationError, where: str = "", flags: bool = False) -> str:
    parts = []
    for err in e.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "config"
        if flags and err["loc"] and str(err["loc"][-1]) in CLI_FLAGS:
            loc = f"{CLI_FLAGS[str(err['loc'][-1])]} ({loc})"
        msg = err["msg"]
        ctx = err.get("ctx") or {}
        if "error" in ctx and isinstance(ctx["error"], Exception):
            msg = str(ctx["error"])
        msg = msg.removeprefix("Value error, ")
        if err.get("type") == "extra_forbidden" and err["loc"]:
            msg = _unknown_field_message(str(err["loc"][-1]))
        inp = err.get("input")
        shown = (f" (got {inp!r})" if inp is not None and not isinstance(inp, dict)
                 and repr(inp) not in msg else "")
        if loc == "config":  # a whole-config check: name the field its message starts with
            first = msg.split(" ", 1)[0]
            if first in ("mode", "layout", "batch_size", "dp_layout", "loader_impl"):
                loc = f"{CLI_FLAGS[first]} ({first})" if flags and first in CLI_FLAGS else first
            elif "per-device batch" in msg:
                loc = "--batch-size (batch_size)" if flags else "batch_size"
            elif re.search(r"\bmode\b", msg):
                loc = "mode"
        parts.append(f"{where}{loc}: {msg}{shown}")
    if len(parts) == 1:
        return parts[0]
    return "invalid configuration:\n  " + "\n  ".join(parts)


class SweepConfig(BaseModel):
    """A sweep file: a name, defaults for every point and a list of grid entries."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(..., min_length=1)
    defaults: dict[str, Any] = Field(default_factory=dict)
    grid: list[dict[str, Any]] = Field(..., min_length=1)

    def expand(self) -> list[RunConfig]:
        """All points of the grid, in file order, duplicates removed (first one kept).

        ``device: auto`` is resolved here (cuda if a GPU is usable, else cpu). ``repeats: N``
        (in ``defaults`` or a grid entry; one integer >= 1, not crossed) runs each point of
        that entry N times, as :func:`with_repeats` orders them: repeat 0 of every point, then
        repeat 1, ...; a point listed by two entries runs the larger number of times.

        Raises:
            ConfigError: naming the grid entry (0-based) and field that is wrong.
        """
        from dlperf.zoo import get_suite

        valid = (set(RunConfig.model_fields) - {"repeat"}) | {"suite", "repeats"}
        for where, d in [("defaults", self.defaults),
                         *((f"grid[{i}]", e) for i, e in enumerate(self.grid))]:
            for k in d:
                if k == "repeat":
                    raise ConfigError(f"{where}: 'repeat' is set by dlperf for each run; give "
                                      "'repeats: N' for N runs of each point")
                if k not in valid:
                    e = unknown_choice("key", k, sorted(valid))
                    raise ConfigError(f"{where}: {e}") from None
                if k == "repeats":
                    check_repeats(d[k], f"{where}.repeats:")
        points: list[RunConfig] = []
        repeats: dict[str, int] = {}  # run key (repeat 0) -> runs of that point
        for i, entry in enumerate(self.grid):
            entry = dict(entry)
            suite = entry.pop("suite", None)
            if suite is not None and "model" in entry:
                raise ConfigError(f"grid[{i}]: give 'model' or 'suite', not both (a suite names "
                                  "its models); split the entry in two for both")
            if suite is not None and "model" in self.defaults:
                raise ConfigError(f"grid[{i}] runs suite {suite!r}, whose models would replace "
                                  f"defaults.model ({self.defaults['model']!r}); move 'model' "
                                  "from defaults into the grid entries without a suite")
            merged = {**self.defaults, **entry}
            n_rep = merged.pop("repeats", 1)
            axes: dict[str, list[Any]] = {}
            for k, v in merged.items():
                if k == "iterations" or not isinstance(v, list):
                    axes[k] = [v]
                else:
                    if not v:
                        raise ConfigError(f"grid[{i}].{k}: empty list; give at least one value")
                    axes[k] = v
            if suite is not None:
                try:
                    entries = get_suite(suite)
                except ConfigError as e:
                    raise ConfigError(f"grid[{i}].suite: {e}") from None
                axes.pop("model", None)
                data_override = axes.pop("data", None)
                pairs = ([{"model": s.model, "data": s.data} for s in entries]
                         if data_override is None else
                         [{"model": s.model, "data": d} for s in entries for d in data_override])
            else:
                if "model" not in axes:
                    raise ConfigError(f"grid[{i}]: needs 'model' (or 'suite'); e.g. model: [resnet50]")
                pairs = [{}]
            if "device" in axes:
                axes["device"] = [resolve_device(d) if d == "auto" else d for d in axes["device"]]
            keys = list(axes)
            for pair in pairs:
                for combo in itertools.product(*(axes[k] for k in keys)):
                    fields = {**dict(zip(keys, combo)), **pair}
                    if crossed_compile_mode(fields.get("mode"), fields.get("compile_mode"),
                                            axes.get("mode", [])):
                        continue  # eager x reduce-overhead from crossing two lists
                    try:
                        cfg = RunConfig(**fields)
                    except ValidationError as e:
                        raise ConfigError(_format_validation(e, where=f"grid[{i}].")) from None
                    key = cfg.run_key()
                    if key not in repeats:
                        points.append(cfg)
                    repeats[key] = max(repeats.get(key, 0), n_rep)
        return with_repeats(points, [repeats[p.run_key()] for p in points])


def load_sweep(path: str | Path) -> SweepConfig:
    """Read and validate a sweep YAML file.

    Raises:
        ConfigError: the file is missing, is not YAML, or a field is invalid (the message names
            the file and the field).
    """
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"sweep file {str(p)!r} is a folder; give the path of a YAML file")
    if not p.is_file():
        raise ConfigError(f"sweep file {str(p)!r} does not exist; give the path of a YAML file")
    try:
        with p.open(encoding="utf-8") as f:  # a named stream: YAML's errors name the file
            raw = yaml.safe_load(f)
    except yaml.YAMLError as e:
        raise ConfigError(f"sweep file {str(p)!r} is not valid YAML: {e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"sweep file {str(p)!r} is not UTF-8 text ({e.reason} at byte "
                          f"{e.start}); give a YAML file") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"sweep file {str(p)!r} must be a mapping with 'name' and 'grid' keys")
    try:
        cfg = SweepConfig(**raw)
    except ValidationError as e:
        raise ConfigError(f"in {p}: " + _format_validation(e)) from None
    try:
        cfg.expand()  # validate every point now, before anything runs
    except ConfigError as e:
        raise ConfigError(f"in {p}: {e}") from None
    return cfg
