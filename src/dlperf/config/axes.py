"""The axes of a :class:`~dlperf.config.RunConfig`: one sub-model per axis of a benchmark
point, each validating its own fields (types, choices, limits), and the nested models they
hold (:class:`IterationPolicy`, :class:`DDPOptions`).

=================  ==================================================================
axis (field)       fields
=================  ==================================================================
``workload``       what is trained: ``model``, ``batch_size``, ``grad_accum``, ``seed``,
                   ``target_loss``
``runtime``        the framework and how it runs the step: ``framework``, ``mode``,
                   ``compile_mode``, ``optimizer_impl``, ``layout``, ``options``
``hardware``       where and in what number format: ``device``, ``precision``,
                   ``threads``, ``cpu_bind``
``input``          the data and its input pipeline: ``data``, ``data_dir``,
                   ``loader_workers``, ``loader_prefetch``, ``loader_impl``,
                   ``input_bound_share``
``parallel``       data parallelism: ``nproc``, ``nnodes``, ``scaling``, ``dp_layout``,
                   ``comm_profile_iters``
``measure``        how it is measured: ``iterations``, ``timeout_s``, ``breakdown``,
                   ``trace_dir``, ``timeline``, ``measure_ceilings``, ``power_interval_s``,
                   ``repeat``
=================  ==================================================================

Every field has one name across the axes, so a point is also given and read by field name
alone (:data:`AXIS_OF`): ``dlperf run``'s flags, a sweep file's keys, ``make_run_config(
batch_size=64)`` and the run key name fields, and :func:`nest_settings` puts them on their
axis; :func:`flat_settings` reads a stored config of either shape back by field name.

Every model here is built when first used (pydantic's ``defer_build``; a :class:`~dlperf.config.
RunConfig` builds those it holds): a process that never validates an axis alone does not build
it.

DDP's options are options of the frameworks whose data-parallel engine takes them (registry
``ddp``: PyTorch, and the fake framework standing in for it): their ``Options`` models
(``frameworks/<name>/options.py``) are :class:`DDPOptions` subclasses, so they are given as
the runtime's ``options`` (``--bucket-cap-mb`` etc., ``--framework-option``, ``options:`` in a
sweep file; a ``ddp`` mapping is read into them). :attr:`Runtime.ddp` is the DDP options a run
applies (:func:`ddp_of` of its options), stored as ``runtime.ddp`` in every result's config.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    computed_field,
    field_validator,
    model_validator,
)

from dlperf.config.defaults import DDP, ITERATIONS, RUN
from dlperf.config.limits import (
    MAX_BATCH,
    MAX_BUCKET_MB,
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
from dlperf.errors import unknown_choice
from dlperf.registry import COMPILE_MODES, FRAMEWORK_MODES, OPTIMIZER_IMPLS

DEVICES = ("cpu", "cuda")
PRECISIONS = ("fp32", "tf32", "bf16")
LAYOUTS = ("auto", "nchw", "nhwc")
#: How an input pipeline's ``loader_workers`` run (``Input.loader_impl``; a framework
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


class IterationPolicy(BaseModel):
    """How many iterations to run: warm-up detection and the stopping rule (docs/measurement.md 3, 5).

    Warm-up runs in windows of ``warmup_window`` iterations; it ends when the median of the last
    window is within ``warmup_rel_tol`` of the median of the window before it (steady state), or
    when ``max_warmup_iters`` / ``max_warmup_time_s`` is reached (then the result is flagged
    ``steady_state = False``). Measurement stops once *both* ``min_iters`` iterations and
    ``min_time_s`` seconds are reached, or earlier at ``max_iters`` / ``max_time_s`` (the time
    budget), whichever comes first. With ``ci_target_rel`` set, a segment that stopped on its
    minimums is extended (more measured steps, same conditions) until the 95% interval of the
    median is within +-``ci_target_rel`` of the median, or the budget ends (as pytest-benchmark
    and hyperfine calibrate the number of rounds).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, defer_build=True)

    min_iters: int = Field(ITERATIONS.min_iters, ge=1, le=MAX_ITERS)
    min_time_s: float = Field(ITERATIONS.min_time_s, ge=0.0, le=MAX_SECONDS)
    max_iters: int = Field(ITERATIONS.max_iters, ge=1, le=MAX_ITERS)
    max_time_s: float = Field(ITERATIONS.max_time_s, gt=0.0, le=MAX_SECONDS)
    warmup_window: int = Field(ITERATIONS.warmup_window, ge=2, le=MAX_ITERS)
    warmup_rel_tol: float = Field(ITERATIONS.warmup_rel_tol, gt=0.0, lt=1.0)
    min_warmup_iters: int = Field(ITERATIONS.min_warmup_iters, ge=0, le=MAX_ITERS)
    max_warmup_iters: int = Field(ITERATIONS.max_warmup_iters, ge=0, le=MAX_ITERS)
    max_warmup_time_s: float = Field(ITERATIONS.max_warmup_time_s, ge=0.0,
                                     le=MAX_SECONDS)
    ci_target_rel: float | None = Field(None, gt=0.0, lt=1.0)

    @model_validator(mode="after")
    def _check(self) -> IterationPolicy:
        if self.max_iters < self.min_iters:
            raise ValueError(f"max_iters ({self.max_iters}) must be >= min_iters ({self.min_iters})")
        if self.max_time_s < self.min_time_s:
            raise ValueError(f"max_time_s ({self.max_time_s}) must be >= min_time_s ({self.min_time_s})")
        return self


class DDPOptions(BaseModel):
    """``torch.nn.parallel.DistributedDataParallel`` options (docs/measurement.md rule 6: recorded and
    settable). Defaults are PyTorch's own (:data:`dlperf.config.defaults.DDP`; ``broadcast_buffers`` on: rank
    0's buffers, e.g. BatchNorm running statistics, are broadcast at every forward; the rest
    off); see the PyTorch DDP documentation for what each changes. A framework takes them when
    its registry entry says ``ddp=True`` (:mod:`dlperf.registry`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, defer_build=True)

    bucket_cap_mb: float = Field(DDP.bucket_cap_mb, gt=0.0, le=MAX_BUCKET_MB)
    gradient_as_bucket_view: bool = DDP.gradient_as_bucket_view
    static_graph: bool = DDP.static_graph
    find_unused_parameters: bool = DDP.find_unused_parameters
    broadcast_buffers: bool = DDP.broadcast_buffers

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


#: The fields of :class:`DDPOptions` (the keys of a framework's options that are DDP's).
DDP_FIELDS = tuple(DDPOptions.model_fields)


def ddp_of(options: Any) -> DDPOptions:
    """The DDP options among a run config's framework ``options`` (the others ignored; those
    not given at their default).

    Raises:
        pydantic.ValidationError: a DDP option of the wrong kind (its framework's ``Options``
            model refuses it first when the config is made).
    """
    given = {k: v for k, v in (options or {}).items() if k in DDP_FIELDS}
    return DDPOptions.model_validate(given)


def ddp_given(ddp: Any) -> dict[str, Any]:
    """The options of a ``ddp`` mapping (or :class:`DDPOptions`) as a run config was given them
    before they were framework options, those not at their default: what goes into its
    ``options``. Anything that is not a mapping is returned as it is, for the model to refuse.
    """
    if isinstance(ddp, DDPOptions):
        ddp = ddp.model_dump()
    if not isinstance(ddp, dict):
        return ddp
    dflt = DDPOptions().model_dump()
    return {k: v for k, v in ddp.items() if k not in dflt or v != dflt[k]}


def ddp_changes(options: Any) -> list[str]:
    """The DDP options of a stored result (``config.ddp``, a dict; or a run config's
    ``options``, whose keys that are not DDP's are passed over) that are not at their default,
    as ``"name=value"``; ``[]`` for none or for anything that is not a dict.

    Used by run labels, result lines and results tables, so that two runs differing only in a
    DDP option tell apart.
    """
    if not isinstance(options, dict):
        return []
    dflt = DDPOptions().model_dump()
    return [f"{k}={v}" for k, v in options.items() if k in dflt and v != dflt[k]]


class _Axis(BaseModel):
    """One axis of a run config: frozen, refuses unknown fields, and checks each field named
    in :attr:`LIMITS` (``field -> (limit, what it counts)``, :mod:`dlperf.config.limits`) and
    :attr:`CHOICES` (``field -> its choices``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, defer_build=True)

    LIMITS: ClassVar[dict[str, tuple[float, str]]] = {}
    CHOICES: ClassVar[dict[str, Any]] = {}

    @field_validator("*")
    @classmethod
    def _checked(cls, v: Any, info: ValidationInfo) -> Any:
        """Every user-sized quantity under its limit, every choice among its choices."""
        name = info.field_name
        assert name is not None  # pydantic sets it for a field validator
        if name in cls.LIMITS:
            limit, what = cls.LIMITS[name]
            msg = over(v, limit, what)
            if msg:
                raise ValueError(msg)
        if name in cls.CHOICES and v not in cls.CHOICES[name]:
            raise unknown_choice(name, v, cls.CHOICES[name])
        return v


class Workload(_Axis):
    """What is trained. ``batch_size`` is the global mini-batch (samples per iteration; with
    ``parallel.scaling = "weak"`` the per-device batch); with ``grad_accum = K`` each iteration
    runs K micro-batches of ``batch_size / K`` before one optimizer update, so the samples per
    iteration stay ``batch_size`` (docs/measurement.md rule 9). ``target_loss`` (reporting
    only) is the training loss whose time to reach is reported
    (:mod:`dlperf.measure.convergence`)."""

    LIMITS: ClassVar[dict[str, tuple[float, str]]] = {
        "batch_size": (MAX_BATCH, "samples per iteration"),
        "grad_accum": (MAX_GRAD_ACCUM, "micro-batches per step"),
        "seed": (MAX_SEED, "(the largest seed every framework takes)")}

    model: str
    batch_size: int = Field(..., ge=1, strict=True)
    grad_accum: int = Field(RUN.grad_accum, ge=1, strict=True)
    seed: int = 0
    target_loss: float | None = None

    @field_validator("seed")
    @classmethod
    def _seed_not_negative(cls, v: int) -> int:
        if v < 0:
            raise ValueError(f"{v} is negative; give a seed from 0 to {MAX_SEED:,}")
        return v

    @field_validator("model")
    @classmethod
    def _model_known(cls, v: str) -> str:
        from dlperf.zoo import get_spec

        return get_spec(v).name  # a source's model by its canonical name (dlperf.zoo.sources)


class Runtime(_Axis):
    """The framework and how it runs the step.

    ``mode`` ``""`` is the framework's first (default) mode. ``compile_mode`` is the mode of
    the framework's compiler (:data:`~dlperf.registry.COMPILE_MODES`, torch.compile's) in the
    modes of its registry entry's ``compile_modes``; the result's ``flags.compile`` records it
    and, for the CUDA-graph modes, how many graphs Inductor declined to capture.
    ``optimizer_impl`` (:data:`~dlperf.registry.OPTIMIZER_IMPLS`, in the framework's registry
    ``optimizer_impls``) picks the implementation of the optimizer update: ``auto`` is the
    fastest standard one of the framework (PyTorch: ``fused`` where it has fused kernels;
    Optax/Keras/Gluon update inside the compiled step); PyTorch also offers ``fused``,
    ``foreach`` and ``single``; the result's ``flags.optimizer`` records what ran.
    ``layout`` is the memory layout of image activations: ``auto`` lets the adapter apply its
    framework's recommendation (PyTorch: channels_last on CUDA for convolutional networks in
    bf16 and tf32, NCHW in fp32; Flax and Keras: NHWC); ``nchw``/``nhwc`` force one (where the
    framework's own options allow it); the result's flags record the layout applied.
    ``options`` are the framework's own options (``--framework-option KEY=VALUE``,
    ``options:`` in a sweep file, and PyTorch DDP's flags), checked by the ``Options`` model
    of its ``frameworks/<name>/options.py`` (:func:`dlperf.config.rules.check_own_options`);
    only the fields that model names in ``KEY_FIELDS`` are part of the run key. A ``ddp``
    mapping (DDP's options as every stored config holds them) is read into ``options``.
    """

    CHOICES: ClassVar[dict[str, Any]] = {
        "framework": FRAMEWORK_MODES, "compile_mode": COMPILE_MODES,
        "optimizer_impl": OPTIMIZER_IMPLS, "layout": LAYOUTS}

    framework: str = RUN.framework
    mode: str = ""
    compile_mode: str = RUN.compile_mode
    optimizer_impl: str = RUN.optimizer_impl
    layout: str = RUN.layout
    options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _ddp_into_options(cls, data: Any) -> Any:
        """A ``ddp`` mapping read into ``options``, its options not at their default; the
        same option given twice with two values is refused."""
        if not isinstance(data, dict) or "ddp" not in data:
            return data
        data = dict(data)
        given = ddp_given(data.pop("ddp"))
        if not isinstance(given, dict):
            raise ValueError(f"ddp: got {given!r}; give a mapping of PyTorch DDP's options, "
                             "e.g. {bucket_cap_mb: 50}")
        opts = dict(data.get("options") or {})
        for k, v in given.items():
            if k in opts and opts[k] != v:
                raise ValueError(f"ddp.{k} is {v!r} and options.{k} is {opts[k]!r}; give it "
                                 "once, in options")
            opts[k] = v
        if opts:
            data["options"] = opts
        return data

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ddp(self) -> DDPOptions:
        """The PyTorch DDP options the run applies (:func:`ddp_of` of its ``options``; DDP's
        defaults for the options not given). Stored in the result's config; a framework
        without DDP (registry ``ddp``) is given none."""
        return ddp_of(self.options)


class Hardware(_Axis):
    """Where the step runs and in what number format. ``threads`` are the host threads of one
    process (None: the thread policy's choice). ``cpu_bind`` (:mod:`dlperf.placement`:
    ``none``, ``cores``, ``numa`` or a cpulist such as ``0-3``) binds the worker, and each
    data-parallel rank to a disjoint set, to CPUs before the framework starts; what was bound
    is recorded in the result's ``env.cpu_bind``."""

    LIMITS: ClassVar[dict[str, tuple[float, str]]] = {"threads": (MAX_THREADS, "threads")}
    CHOICES: ClassVar[dict[str, Any]] = {"device": DEVICES, "precision": PRECISIONS}

    device: str = RUN.device
    precision: str = RUN.precision
    threads: int | None = Field(None, ge=1)
    cpu_bind: str = RUN.cpu_bind

    @field_validator("cpu_bind", mode="before")
    @classmethod
    def _cpu_bind_known(cls, v: Any) -> str:
        from dlperf.placement import check_cpu_bind

        if isinstance(v, int) and not isinstance(v, bool):
            v = str(v)  # YAML `cpu_bind: 7` is one CPU, as `--cpu-bind 7` is
        if not isinstance(v, str):
            raise ValueError(f"got {v!r}; give none, cores, numa or a CPU list such as 0-3,8")
        return check_cpu_bind(v)  # a cpulist in its canonical form: one point, one key


class Input(_Axis):
    """The data and its input pipeline (:mod:`dlperf.data.pipeline`).

    ``data`` is ``"synthetic"`` (generated on the device before timing), a data-set name
    (``mnist``, ``cifar10``, ``ptb``, ``wikitext2``, ``imagefolder``, looked up under
    ``data_dir`` or ``$DLPERF_DATA``), ``imagefolder:PATH``, or a path to a data file or
    folder. With ``loader_workers = N`` (>= 0) real data go through the framework's input
    pipeline during training (PyTorch DataLoader with N worker processes, tf.data with N
    threads, JAX: N Grain worker processes or N host threads), ``loader_prefetch`` batches
    ahead; ``None`` cycles batches prepared before timing, except for an ImageFolder, which is
    always read through the pipeline (0 workers by default). ``loader_impl``
    (:data:`LOADER_IMPLS`, for a framework whose registry entry offers several) picks what the
    workers are. ``input_bound_share`` is the share of the measured time spent waiting for
    data above which the run is labelled input-bound."""

    LIMITS: ClassVar[dict[str, tuple[float, str]]] = {
        "loader_workers": (MAX_WORKERS, "loader workers"),
        "loader_prefetch": (MAX_PREFETCH, "batches prefetched")}
    CHOICES: ClassVar[dict[str, Any]] = {"loader_impl": LOADER_IMPLS}

    data: str = RUN.data
    data_dir: str | None = None
    loader_workers: int | None = Field(None, ge=0, strict=True)
    loader_prefetch: int = Field(RUN.loader_prefetch, ge=1, strict=True)
    loader_impl: str = RUN.loader_impl
    input_bound_share: float = Field(RUN.input_bound_share, gt=0.0, lt=1.0)


class Parallel(_Axis):
    """Data parallelism (docs/measurement.md "Scaling"): ``nproc`` devices per node on
    ``nnodes`` nodes. ``scaling="strong"``: the workload's ``batch_size`` is the global
    mini-batch, split evenly across the replicas; ``"weak"``: it is the per-device batch.
    ``dp_layout`` is how replicas map to processes (:data:`DP_LAYOUT_KINDS`; ``""``: the
    framework's first registry ``dp_layouts``); ``comm_profile_iters`` iterations are profiled
    for the exposed communication."""

    LIMITS: ClassVar[dict[str, tuple[float, str]]] = {
        "nproc": (MAX_PROCESSES, "processes per node"), "nnodes": (MAX_NODES, "nodes"),
        "comm_profile_iters": (MAX_ITERS, "iterations")}
    CHOICES: ClassVar[dict[str, Any]] = {"scaling": SCALINGS}

    nproc: int = Field(RUN.nproc, ge=1, strict=True)
    nnodes: int = Field(RUN.nnodes, ge=1, strict=True)
    scaling: str = RUN.scaling
    dp_layout: str = ""
    comm_profile_iters: int = Field(RUN.comm_profile_iters, ge=0, strict=True)


class Measure(_Axis):
    """How the point is measured: the iteration policy (:class:`IterationPolicy`), the
    worker's ``timeout_s``, a ``breakdown`` of the step, a profiler trace kept in
    ``trace_dir``, the per-kernel ``timeline``, the matmul and bandwidth ceilings after the
    measurement (``measure_ceilings``, for MFU), the NVML sampling interval on a GPU
    (``power_interval_s``) and ``repeat`` (>= 0), which tells apart repeated runs of one point,
    each in its own fresh worker process (docs/measurement.md rule 5)."""

    LIMITS: ClassVar[dict[str, tuple[float, str]]] = {
        "repeat": (MAX_REPEATS - 1, "(repeat index)"), "timeout_s": (MAX_SECONDS, "seconds")}

    iterations: IterationPolicy = Field(default_factory=IterationPolicy)
    timeout_s: float = Field(RUN.timeout_s, gt=0.0)
    breakdown: bool = False
    trace_dir: str | None = None
    timeline: bool = False
    measure_ceilings: bool = RUN.measure_ceilings
    power_interval_s: float = Field(RUN.power_interval_s, ge=0.005, le=1.0)
    repeat: int = Field(0, ge=0, strict=True)


#: Axis field of a run config -> its model, in the order of the module docstring.
AXES: dict[str, type[_Axis]] = {"workload": Workload, "runtime": Runtime,
                                "hardware": Hardware, "input": Input, "parallel": Parallel,
                                "measure": Measure}
#: A setting's name -> its axis (every field of every axis; ``ddp``: the runtime's DDP
#: options as stored).
AXIS_OF: dict[str, str] = {**{f: a for a, m in AXES.items() for f in m.model_fields},
                           "ddp": "runtime"}
#: The settings a run config is given by, by name (``dlperf run``'s flags, a sweep file's keys).
SETTINGS = tuple(f for m in AXES.values() for f in m.model_fields)


def nest_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` given by name (``{"batch_size": 64, "device": "cuda"}``) as a run config's
    axes (``{"workload": {"batch_size": 64}, "hardware": {"device": "cuda"}}``). An axis given
    as a whole (a mapping or an axis model) is the base its named settings go on; a name that
    is neither a setting nor an axis stays at the top, for the run config to refuse.
    Also the reader of stored configs of schema 11 and older, which were flat."""
    out: dict[str, Any] = {}
    for k, v in settings.items():
        if k in AXES:
            base = v.model_dump() if isinstance(v, BaseModel) else v
            out[k] = {**base, **out[k]} if isinstance(base, dict) and isinstance(
                out.get(k), dict) else base
        elif k in AXIS_OF:
            axis = out.setdefault(AXIS_OF[k], {})
            if isinstance(axis, dict):
                axis[k] = v
            else:  # an axis given whole and by name: the run config refuses the pair
                out[k] = v
        else:
            out[k] = v
    return out


def flat_settings(config: Any) -> dict[str, Any]:
    """A stored or dumped run config (its axes, or the flat shape of schema 11 and older) as
    its settings by name (``{"batch_size": 64, "device": "cuda", ...}``); a key that is not
    an axis is kept as it is; ``{}`` for anything that is not a mapping."""
    if not isinstance(config, Mapping):
        return {}
    out: dict[str, Any] = {}
    for k, v in config.items():
        if k in AXES and isinstance(v, Mapping):
            out.update(v)
        else:
            out[k] = v
    return out
