"""One benchmark point: :class:`RunConfig`, its field choices, and the constructors that turn
pydantic's errors into one :class:`~dlperf.errors.ConfigError`.

The fields of a run config, by axis (each axis validated in one place):

- what is trained: ``model``, ``batch_size``, ``grad_accum``, ``seed``, ``target_loss``;
- the framework: ``framework``, ``mode``, ``precision``, ``layout``, ``compile_mode``,
  ``optimizer_impl``, ``threads``, ``cpu_bind`` (capabilities and options:
  :mod:`dlperf.config.rules`, the registry and the framework's own ``options.py``), and
  ``options``: the framework's own options, validated by its ``Options`` model;
- the device: ``device``;
- the data and its input pipeline: ``data``, ``data_dir``, ``loader_workers``,
  ``loader_prefetch``, ``loader_impl``, ``input_bound_share``;
- data parallelism: ``nproc``, ``nnodes``, ``scaling``, ``dp_layout``,
  ``comm_profile_iters`` (DDP's options are PyTorch's own ``options``; :attr:`RunConfig.ddp`
  is what a run applies);
- the measurement: ``iterations`` (:class:`~dlperf.config.axes.IterationPolicy`),
  ``timeout_s``, ``breakdown``, ``trace_dir``, ``timeline``, ``measure_ceilings``, ``power_interval_s``,
  ``repeat``.

They stay flat (two nested sub-models) because ``RunConfig.model_dump()`` is stored with every
result and its fields make the run key (:mod:`dlperf.config.identity`).
"""

from __future__ import annotations

from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    computed_field,
    field_validator,
    model_validator,
)

from dlperf.config.axes import DDPOptions, IterationPolicy, ddp_given, ddp_of
from dlperf.config.defaults import RUN
from dlperf.config.identity import label, point_key, run_key
from dlperf.config.limits import (
    MAX_BATCH,
    MAX_GRAD_ACCUM,
    MAX_ITERS,
    MAX_NODES,
    MAX_PREFETCH,
    MAX_PROCESSES,
    MAX_REPEATS,
    MAX_SECONDS,
    MAX_SEED,
    MAX_THREADS,
    MAX_WORKERS,
    over,
)
from dlperf.config.messages import format_validation
from dlperf.config.rules import check_run
from dlperf.errors import ConfigError, unknown_choice
from dlperf.registry import COMPILE_MODES, FRAMEWORK_MODES, OPTIMIZER_IMPLS, framework_info

DEVICES = ("cpu", "cuda")
PRECISIONS = ("fp32", "tf32", "bf16")
LAYOUTS = ("auto", "nchw", "nhwc")
#: How an input pipeline's ``loader_workers`` run (``RunConfig.loader_impl``; a framework
#: offering several kinds lists them in its registry ``loader_impls``, JAX today): ``auto``
#: (Grain worker processes where Grain is installed, else dlperf's host threads),
#: ``processes`` (Grain, required) or ``threads`` (dlperf's
#: :class:`~dlperf.data.pipeline.HostPipeline`). The others have one pipeline each: ``auto``.
LOADER_IMPLS = ("auto", "processes", "threads")
SCALINGS = ("strong", "weak")
#: How data-parallel replicas map to processes: one process per device (PyTorch DDP, JAX
#: multi-process, TensorFlow MultiWorkerMirroredStrategy with one worker per device) or one
#: process per node driving all its local devices (JAX sharded jit, TensorFlow
#: MirroredStrategy on one node / MultiWorkerMirroredStrategy with one worker per node). Each
#: framework's own are its registry ``dp_layouts`` (first = default).
DP_LAYOUT_KINDS = ("per_device", "per_node")

#: Field -> its choices, for the field validator.
_CHOICES: dict[str, Any] = {"framework": FRAMEWORK_MODES, "device": DEVICES,
                            "precision": PRECISIONS, "layout": LAYOUTS,
                            "compile_mode": COMPILE_MODES, "scaling": SCALINGS,
                            "loader_impl": LOADER_IMPLS, "optimizer_impl": OPTIMIZER_IMPLS}


#: Field -> (limit, what it counts): the user-sized quantities of a point
#: (:mod:`dlperf.config.limits`).
_LIMITS: dict[str, tuple[float, str]] = {
    "batch_size": (MAX_BATCH, "samples per iteration"),
    "grad_accum": (MAX_GRAD_ACCUM, "micro-batches per step"),
    "seed": (MAX_SEED, "(the largest seed every framework takes)"),
    "threads": (MAX_THREADS, "threads"), "nproc": (MAX_PROCESSES, "processes per node"),
    "nnodes": (MAX_NODES, "nodes"), "loader_workers": (MAX_WORKERS, "loader workers"),
    "loader_prefetch": (MAX_PREFETCH, "batches prefetched"),
    "comm_profile_iters": (MAX_ITERS, "iterations"), "repeat": (MAX_REPEATS - 1, "(repeat index)"),
    "timeout_s": (MAX_SECONDS, "seconds"),
}


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
    ``loader_impl`` (:data:`LOADER_IMPLS`, for a framework whose registry entry offers several)
    picks what the workers are: ``auto`` (Grain processes where Grain is installed, else
    threads, with a warning in the result), ``processes`` or ``threads``; with 0 workers the
    batch is made on the calling thread whatever it says.
    ``input_bound_share`` is the share of the measured time spent waiting for data above which
    the run is labelled input-bound (dlperf.data.pipeline says why totals, not medians).
    ``measure_ceilings`` runs the matmul and memory bandwidth microbenchmarks after the
    measurement (for MFU); ``power_interval_s`` is the NVML sampling interval on a GPU.

    ``layout`` is the memory layout of image activations: ``auto`` lets the adapter apply its
    framework's recommendation (PyTorch: channels_last on CUDA for convolutional networks in bf16
    and tf32, where cuDNN's Tensor Core kernels want NHWC, per its performance tuning guide, and
    NCHW in fp32; Flax and Keras: NHWC, their native layout); ``nchw``/``nhwc``
    force one (where the framework's own options allow it). The layout as applied is recorded
    in the result's flags. ``compile_mode`` is the mode of the framework's compiler
    (:data:`~dlperf.registry.COMPILE_MODES`, torch.compile's) in the modes of its registry entry's
    ``compile_modes``; the result's ``flags.compile`` records it and, for the CUDA-graph modes,
    how many graphs Inductor declined to capture (``cudagraph_skips``).
    ``optimizer_impl`` (:data:`~dlperf.registry.OPTIMIZER_IMPLS`, in the framework's registry
    ``optimizer_impls``) picks the implementation of the optimizer update: ``auto`` is the
    fastest standard one of the framework (PyTorch: ``fused`` where it has fused kernels, CUDA
    and the CPU; before issue 23 PyTorch's default, ``foreach`` on CUDA; Optax/Keras/Gluon
    updates inside the compiled step); PyTorch also offers ``fused``, ``foreach`` and
    ``single`` to compare.
    The implementation as applied is recorded in the result's ``flags.optimizer``.
    ``cpu_bind`` (:mod:`dlperf.placement`: ``none``, ``cores``, ``numa`` or a cpulist such as
    ``0-3``) binds the worker, and each data-parallel rank to a disjoint set, to CPUs before
    the framework starts; what was bound is recorded in the result's ``env.cpu_bind``.

    Data parallelism (docs/measurement.md "Scaling"): ``nproc`` devices per node on ``nnodes``
    nodes, ``world_size = nproc * nnodes`` replicas. ``scaling="strong"`` (default):
    ``batch_size`` is the global mini-batch, split evenly across the replicas (it must be
    divisible by ``world_size * grad_accum``); ``scaling="weak"``: ``batch_size`` is the
    per-device batch and the global batch is ``batch_size * world_size``. :attr:`global_batch`
    and :attr:`per_device_batch` give both. ``dp_layout`` is how replicas map to processes
    (:data:`DP_LAYOUT_KINDS`; default: the first of the framework's registry ``dp_layouts``);
    PyTorch DDP's options are options of the frameworks that take them (registry ``ddp``; their
    ``Options`` model is a :class:`~dlperf.config.axes.DDPOptions`), and :attr:`ddp` is the
    DDP options the run applies. ``target_loss`` (reporting only) is the training loss
    whose time to reach is reported (:mod:`dlperf.perfmodel.convergence`).

    ``options`` are the framework's own options (``--framework-option KEY=VALUE``,
    ``options:`` in a sweep file), checked by the ``Options`` model of its
    ``frameworks/<name>/options.py`` (:func:`dlperf.config.rules.check_own_options`); only the
    fields that model names in ``KEY_FIELDS`` are part of the run key.

    ``repeat`` (>= 0) tells apart repeated runs of one point (docs/measurement.md rule 5:
    between-run variation), each measured in its own fresh worker process: ``dlperf run
    --repeats N`` and ``repeats: N`` in a sweep make repeats 0 .. N-1
    (:func:`~dlperf.config.sweep.with_repeats`). It is part of the run key only when non-zero,
    so repeat 0 is the point as it was always keyed; :meth:`point_key` is the key shared by
    all repeats of a point.

    Raises (on construction):
        pydantic.ValidationError: a bad value or combination; each error names its field
            (:mod:`dlperf.config.messages`), :func:`make_run_config` makes it a ConfigError.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    model: str
    framework: str = RUN.framework
    mode: str = ""  # "" -> the framework's first (default) mode
    device: str = RUN.device
    precision: str = RUN.precision
    batch_size: int = Field(..., ge=1, strict=True)
    grad_accum: int = Field(RUN.grad_accum, ge=1, strict=True)
    data: str = RUN.data
    data_dir: str | None = None
    threads: int | None = Field(None, ge=1)
    cpu_bind: str = RUN.cpu_bind
    seed: int = 0
    layout: str = RUN.layout
    compile_mode: str = RUN.compile_mode
    optimizer_impl: str = RUN.optimizer_impl
    iterations: IterationPolicy = Field(default_factory=IterationPolicy)
    timeout_s: float = Field(RUN.timeout_s, gt=0.0)
    breakdown: bool = False
    trace_dir: str | None = None
    timeline: bool = False
    loader_workers: int | None = Field(None, ge=0, strict=True)
    loader_prefetch: int = Field(RUN.loader_prefetch, ge=1, strict=True)
    loader_impl: str = RUN.loader_impl
    input_bound_share: float = Field(RUN.input_bound_share, gt=0.0, lt=1.0)
    measure_ceilings: bool = RUN.measure_ceilings
    power_interval_s: float = Field(RUN.power_interval_s, ge=0.005, le=1.0)
    nproc: int = Field(RUN.nproc, ge=1, strict=True)
    nnodes: int = Field(RUN.nnodes, ge=1, strict=True)
    scaling: str = RUN.scaling
    dp_layout: str = ""  # "" -> the framework's default (registry dp_layouts[0])
    comm_profile_iters: int = Field(RUN.comm_profile_iters, ge=0, strict=True)
    target_loss: float | None = None
    repeat: int = Field(0, ge=0, strict=True)
    options: dict[str, Any] = Field(default_factory=dict)

    @field_validator(*_LIMITS)
    @classmethod
    def _within_limits(cls, v: Any, info: ValidationInfo) -> Any:
        """Every user-sized quantity under its limit (:mod:`dlperf.config.limits`)."""
        name = info.field_name
        assert name is not None  # pydantic sets it for a field validator
        limit, what = _LIMITS[name]
        msg = over(v, limit, what)
        if msg:
            raise ValueError(msg)
        if name == "seed" and v < 0:
            raise ValueError(f"{v} is negative; give a seed from 0 to {MAX_SEED:,}")
        return v

    @field_validator("model")
    @classmethod
    def _model_known(cls, v: str) -> str:
        from dlperf.zoo import get_spec

        return get_spec(v).name  # a source's model by its canonical name (dlperf.zoo.sources)

    @field_validator("cpu_bind", mode="before")
    @classmethod
    def _cpu_bind_known(cls, v: Any) -> str:
        from dlperf.placement import check_cpu_bind

        if isinstance(v, int) and not isinstance(v, bool):
            v = str(v)  # YAML `cpu_bind: 7` is one CPU, as `--cpu-bind 7` is
        if not isinstance(v, str):
            raise ValueError(f"got {v!r}; give none, cores, numa or a CPU list such as 0-3,8")
        return check_cpu_bind(v)  # a cpulist in its canonical form: one point, one key

    @field_validator(*_CHOICES)
    @classmethod
    def _choice_known(cls, v: str, info: ValidationInfo) -> str:
        name = info.field_name
        assert name is not None  # pydantic sets it for a field validator
        choices = _CHOICES[name]
        if v not in choices:
            raise unknown_choice(name, v, choices)
        return v

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: Any) -> Any:
        """The framework's default mode and data-parallel layout for ``""``; 0 loader workers
        for an ImageFolder without any; a ``ddp`` mapping (DDP's options as a run config took
        them before they were framework options, and as every stored config holds them) read
        into ``options``, its options not at their default."""
        if not isinstance(data, dict):
            return data
        if "ddp" in data:
            data = dict(data)
            legacy = ddp_given(data.pop("ddp"))
            if not isinstance(legacy, dict):
                raise ValueError(f"ddp: got {legacy!r}; give a mapping of PyTorch DDP's "
                                 "options, e.g. {bucket_cap_mb: 50}")
            opts = dict(data.get("options") or {})
            for k, v in legacy.items():
                if k in opts and opts[k] != v:
                    raise ValueError(f"ddp.{k} is {v!r} and options.{k} is {opts[k]!r}; "
                                     "give it once, in options")
                opts[k] = v
            if opts:
                data["options"] = opts
        name = data.get("framework", cls.model_fields["framework"].default)
        if isinstance(name, str) and name in FRAMEWORK_MODES:
            if not data.get("mode"):
                data = {**data, "mode": FRAMEWORK_MODES[name][0]}
            if not data.get("dp_layout"):
                info = framework_info(name)
                data = {**data, "dp_layout": info.dp_layouts[0] if info else "per_device"}
        if (data.get("loader_workers") is None
                and str(data.get("data") or "").startswith("imagefolder")):
            # An ImageFolder is always read through the pipeline, with 0 workers by default:
            # one point, one run key (None and 0 were two keys for one measurement).
            data = {**data, "loader_workers": 0}
        return data

    @model_validator(mode="after")
    def _check(self) -> RunConfig:
        check_run(self)
        return self

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ddp(self) -> DDPOptions:
        """The PyTorch DDP options the run applies (:func:`dlperf.config.axes.ddp_of` of its
        ``options``; DDP's defaults for the options not given). Stored in the result's config
        as ``"ddp"``; a framework without DDP (registry ``ddp``) is given none."""
        return ddp_of(self.options)

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
    def traced(self) -> bool:
        """True if a profiler trace is taken after the measurement (``--breakdown``,
        ``--trace`` or ``--timeline``)."""
        return bool(self.breakdown or self.trace_dir or self.timeline)

    @property
    def distributed(self) -> bool:
        """True when more than one replica trains (data parallelism)."""
        return self.world_size > 1

    def run_key(self) -> str:
        """A stable 16-hex-digit key of the point (:func:`dlperf.config.identity.run_key`)."""
        return run_key(self)

    def point_key(self) -> str:
        """The run key shared by every repeat of the point
        (:func:`dlperf.config.identity.point_key`)."""
        return point_key(self)

    def label(self) -> str:
        """Short human label (:func:`dlperf.config.identity.label`)."""
        return label(self)


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` if a GPU is usable here, else ``cpu``; ``cpu``/``cuda`` are checked.

    Raises:
        ConfigError: an unknown device, or ``cuda`` on a machine where none is usable.
    """
    if device not in ("auto", *DEVICES):
        raise unknown_choice("device", device, ("auto", *DEVICES))
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


def make_policy(**fields: Any) -> IterationPolicy:
    """Construct an :class:`IterationPolicy`; ConfigError names the CLI flag that is wrong."""
    try:
        return IterationPolicy(**fields)
    except ValidationError as e:
        raise ConfigError(format_validation(e, IterationPolicy, flags=True)) from None


def make_run_config(**fields: Any) -> RunConfig:
    """Construct a :class:`RunConfig`, turning pydantic's errors into one :class:`ConfigError`.

    Raises:
        ConfigError: naming each bad field (with its ``dlperf run`` flag), its value and what
            is allowed.
    """
    try:
        return RunConfig(**fields)
    except ValidationError as e:
        raise ConfigError(format_validation(e, RunConfig, flags=True)) from None
