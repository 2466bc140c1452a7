"""The typed parts of a result record (:class:`dlperf.results.schema.RunRecord`).

Every part declares its fields and refuses any other key (a misspelt field is an error where
it is made, not a new key in the store); a key an older record holds that no part declares is
kept in the record's ``unrecognised`` by the upgrade on reading
(:func:`dlperf.results.schema.upgrade`). Parts validate assignments; numbers are strict
(:data:`Num`: an int stays an int, a float a float), so the stored JSON is what the producer
wrote. Every field is optional: a part holds what its producer gave it, and what it did not
give stays unset (absent from the flat dict). A field typed ``dict[str, Any]`` is free-form
by design (a framework's flags, versions, the engine's own description).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, StrictBool, StrictFloat, StrictInt, StrictStr

__all__ = ["Part", "Num", "Bytes", "Spec", "Identity", "Timing", "Summary", "Throughput",
           "Compile", "Memory", "Power", "Flops", "Mfu", "Convergence", "DataWait", "RankInfo",
           "Dist", "Breakdown", "Trace", "OpClasses", "BreakdownRun", "Env", "HostCpuWait",
           "WorkerInfo", "RankOutcome"]

#: A number exactly as measured: an int or a float, never converted (so the stored JSON is what
#: the producer wrote); NaN and infinities allowed (raw samples keep them).
Num = StrictFloat | StrictInt
#: Bytes of memory (an adapter may report them as a float).
Bytes = Num


class Part(BaseModel):
    """Base of every part: a key it does not declare is refused (pydantic's
    ``extra_forbidden`` error names it), and an assignment is validated (``rec.memory =
    {...}`` becomes a :class:`Memory`). Its validator is built when first used
    (``defer_build``): a process that never validates a part does not build it."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, defer_build=True)


class Spec(Part):
    """The model's analytic facts (dlperf.zoo.spec): parameters, FLOPs per sample (forward,
    and training = 3 x forward by dlperf's convention), tokens per sample (0: not a sequence),
    and ``code``, the fingerprint of a source model's code (:attr:`dlperf.zoo.spec.ModelSpec.
    code`; absent for the zoo's models and for records made before it existed)."""

    family: StrictStr | None = None
    params: Num | None = None
    forward_flops_per_sample: Num | None = None
    train_flops_per_sample: Num | None = None
    tokens_per_sample: Num | None = None
    code: StrictStr | None = None


class Identity(Part):
    """Which point this is and how it ended: the run key (:meth:`RunConfig.run_key`), the
    resolved config (``RunConfig.model_dump()``: its axes), the axes as columns, ``status`` (one of
    :data:`STATUSES`) and ``error`` (why, for a failure). ``batch_size`` is the global batch;
    ``created_at`` is UTC ISO 8601. Flat in :meth:`RunRecord.to_dict`."""

    run_key: StrictStr | None = None
    repeat: StrictInt | None = None
    point_key: StrictStr | None = None
    status: StrictStr | None = None
    error: StrictStr | None = None
    created_at: StrictStr | None = None
    config: dict[str, Any] | None = None
    model: StrictStr | None = None
    framework: StrictStr | None = None
    mode: StrictStr | None = None
    device: StrictStr | None = None
    precision: StrictStr | None = None
    batch_size: StrictInt | None = None
    grad_accum: StrictInt | None = None
    data: StrictStr | None = None
    threads: StrictInt | None = None
    world_size: StrictInt | None = None
    nproc: StrictInt | None = None
    nnodes: StrictInt | None = None
    per_device_batch: StrictInt | None = None
    scaling: StrictStr | None = None
    spec: Spec | None = None
    #: The run's label given with ``dlperf run/sweep --tag`` (:mod:`dlperf.results.history`):
    #: not part of the point's identity (the run key), a name for the revision measured.
    tag: StrictStr | None = None


class Timing(Part):
    """The measured segment's timing facts (docs/measurement.md rules 2-3): the first iteration
    (s), warm-up iterations and their time (s), whether warm-up reached steady state, the
    measured iterations, their summed time and the segment's wall time (s), and their relative
    difference with the verdict of the wall-time check. Flat in :meth:`RunRecord.to_dict`."""

    first_iter_s: Num | None = None
    warmup_iters: StrictInt | None = None
    warmup_time_s: Num | None = None
    steady_state: StrictBool | None = None
    n_measured: StrictInt | None = None
    measured_time_s: Num | None = None
    wall_time_s: Num | None = None
    timing_rel_diff: Num | None = None
    timing_consistent: StrictBool | None = None
    # schema 10 (docs/measurement.md, "Recompiles"): whether the warm-up detector itself
    # settled (``steady_state`` is also False when the step compiled while measured), how the
    # compiles in the measured segment were handled ("none", "remeasured": measured again
    # after them; "excluded": their steps left out of summary, CI and throughput; "not
    # located": the framework counted them but not at which step), the segments measured
    # again, and the indices (into samples["measure"]) of the excluded steps.
    warmup_settled: StrictBool | None = None
    compile_handling: StrictStr | None = None
    remeasured: StrictInt | None = None
    excluded_steps: list[StrictInt] | None = None
    # schema 10: the CI-width target (``--ci-target``), the extensions of the measured
    # segment it took and the relative half-width of the median's 95% interval it ended at
    # (dlperf.measure.loop.median_ci_rel); absent without a target.
    ci_target_rel: Num | None = None
    ci_extensions: StrictInt | None = None
    ci_rel_reached: Num | None = None


class Summary(Part):
    """Statistics of the measured step times in seconds (:class:`dlperf.stats.Summary`)."""

    n: StrictInt | None = None
    mean: Num | None = None
    median: Num | None = None
    stdev: Num | None = None
    min: Num | None = None
    max: Num | None = None
    q1: Num | None = None
    q3: Num | None = None
    iqr: Num | None = None
    p5: Num | None = None
    p95: Num | None = None
    ci_low: Num | None = None
    ci_high: Num | None = None
    ci_level: Num | None = None
    mad: Num | None = None
    outliers: list[StrictInt] | None = None


class Throughput(Part):
    """Samples trained in the measured segment and the rates (:func:`dlperf.stats.throughput`)."""

    samples: StrictInt | None = None
    samples_per_s: Num | None = None
    tokens_per_s: Num | None = None


class Compile(Part):
    """Compile/trace time (s) and counts; ``recompiles_measured`` > 0: the measured steps
    were not at steady state (docs/measurement.md rule 4)."""

    compile_time_s: Num | None = None
    n_compiles: Num | None = None
    recompiles_measured: Num | None = None
    lower_time_s: Num | None = None
    backend_compile_time_s: Num | None = None
    recompiles: Any = None
    graph_breaks: Num | None = None
    graph_break_reasons: Any = None
    cudagraph_skips: Num | None = None
    # schema 10: compile work done before the first timed iteration (s; 0 where compilation is
    # lazy) and, where the framework counts compiles, phase -> indices of the steps after
    # which its counter moved ("first", "warmup", "measure"; data parallel: any rank's).
    compile_before_loop_s: Num | None = None
    compiled_at: dict[str, list[StrictInt]] | None = None


class Memory(Part):
    """Memory peaks in bytes (None where the framework cannot tell); fields in the order the
    adapters write them (:func:`dlperf.frameworks.common.memory_record`)."""

    peak_rss_bytes: Bytes | None = None
    peak_allocated_bytes: Bytes | None = None
    peak_reserved_bytes: Bytes | None = None
    nvml_used_bytes: Bytes | None = None
    current_allocated_bytes: Bytes | None = None
    nvml_used_peak_bytes: Bytes | None = None


class Power(Part):
    """Board power and energy of the measured segment (:func:`dlperf.measure.power.
    energy_summary`): W, J, samples per J, the raw power samples; ``reason`` when absent."""

    available: StrictBool | None = None
    reason: StrictStr | None = None
    energy_source: StrictStr | None = None
    window_s: Num | None = None
    energy_j: Num | None = None
    mean_power_w: Num | None = None
    energy_per_iter_j: Num | None = None
    samples_per_j: Num | None = None
    sampled_mean_power_w: Num | None = None
    n_samples: Num | None = None
    interval_s: Num | None = None
    memory_used_peak_bytes: Bytes | None = None
    read_errors: Num | None = None
    power_source: StrictStr | None = None
    power_times_s: list[Any] | None = None
    power_w: list[Any] | None = None


class Flops(Part):
    """FLOPs of a training sample: analytic (dlperf.zoo.spec) and the framework's own count of
    one step, with their sources; bytes moved per step; ``ops_per_step``: operators one eager
    step dispatches (PyTorch: ATen operators other than views, counted by the byte counter)."""

    analytic_train_flops_per_sample: Num | None = None
    analytic_source: StrictStr | None = None
    framework_flops_per_step: Num | None = None
    framework_flops_per_sample: Num | None = None
    framework_to_analytic: Num | None = None
    framework_source: StrictStr | None = None
    bytes_per_step: Num | None = None
    bytes_source: StrictStr | None = None
    ops_per_step: StrictInt | None = None


class Mfu(Part):
    """Model FLOPs utilisation per device (:func:`dlperf.perfmodel.mfu.mfu_summary`): FLOP/s
    achieved against the measured ceiling and the datasheet peak, and the roofline."""

    achieved_flops_per_s: Num | None = None
    ceiling_flops_per_s: Num | None = None
    ceiling_source: StrictStr | None = None
    mfu: Num | None = None
    datasheet_flops_per_s: Num | None = None
    mfu_datasheet: Num | None = None
    framework_flops_per_sample: Num | None = None
    framework_achieved_flops_per_s: Num | None = None
    mfu_framework: Num | None = None
    roofline: dict[str, Any] | None = None


class Convergence(Part):
    """Training progress over the run (:func:`dlperf.measure.convergence.
    summarize_convergence`): time (s) and iterations to ``target_loss`` when reached, with
    and without compile (schema 10; before it, ``time_to_target_s`` left out compile work done
    before the loop)."""

    iterations: Num | None = None
    training_time_s: Num | None = None
    final_smoothed_loss: Num | None = None
    window: Num | None = None
    target_loss: Num | None = None
    reached: StrictBool | None = None
    iterations_to_target: Num | None = None
    time_to_target_s: Num | None = None
    # schema 10: compile counted the same way in every framework, with and without it
    # (dlperf.measure.convergence); times in s.
    training_time_no_compile_s: Num | None = None
    time_to_target_no_compile_s: Num | None = None
    compile_before_loop_s: Num | None = None
    compile_in_loop_s: Num | None = None
    compile_time_s: Num | None = None
    compile_steps: Num | None = None
    recompiles: Num | None = None


class DataWait(Part):
    """How long the measured iterations waited for data (:func:`dlperf.data.pipeline.
    data_wait_summary`): ``share`` of the measured time, ``input_bound`` above ``threshold``."""

    n: Num | None = None
    median_s: Num | None = None
    mean_s: Num | None = None
    max_s: Num | None = None
    share: Num | None = None
    time_share: Num | None = None
    threshold: Num | None = None
    input_bound: StrictBool | None = None
    median_share: Num | None = None
    criterion: StrictStr | None = None


class RankInfo(Part):
    """One process of a data-parallel run (:func:`dlperf.measure.ranks.merge_ranks`): where it
    ran, its measured iterations, median and mean step (s), summed and wall time (s), memory."""

    rank: StrictInt | None = None
    local_rank: StrictInt | None = None
    node_rank: StrictInt | None = None
    hostname: StrictStr | None = None
    device: StrictStr | None = None
    n_measured: StrictInt | None = None
    median_s: Num | None = None
    mean_s: Num | None = None
    measured_time_s: Num | None = None
    wall_s: Num | None = None
    memory: Memory | None = None
    comm: dict[str, Any] | None = None
    #: The CPUs the rank could use (a cpulist such as ``"0-1"``) and its framework threads.
    cpus: StrictStr | None = None
    threads: StrictInt | None = None


class RankOutcome(Part):
    """How one rank of a data-parallel run that failed ended (``RunRecord.ranks``)."""

    rank: StrictInt | None = None
    status: StrictStr | None = None
    error: StrictStr | None = None


class Dist(Part):
    """A data-parallel run (docs/measurement.md rule 8): devices and processes, the layout and
    engine, the rank imbalance (max / median of the ranks' median steps), every rank, and the
    exposed communication (s per iteration, :mod:`dlperf.measure.breakdown.overlap`)."""

    replicas: StrictInt | None = None
    processes: StrictInt | None = None
    nproc: StrictInt | None = None
    nnodes: StrictInt | None = None
    dp_layout: StrictStr | None = None
    backend: StrictStr | None = None
    scaling: StrictStr | None = None
    global_batch: StrictInt | None = None
    per_device_batch: StrictInt | None = None
    imbalance: Num | None = None
    slowest_rank_counts: dict[str, StrictInt] | None = None
    per_rank: list[RankInfo] | None = None
    step_time: StrictStr | None = None
    loss: StrictStr | None = None
    comm: dict[str, Any] | None = None
    #: Per rank, DDP's buckets with gradient-ready and all-reduce start/end (traced runs;
    #: :mod:`dlperf.measure.breakdown.buckets`).
    buckets_timeline: dict[str, Any] | None = None
    #: PyTorch DDP's options as applied (:class:`dlperf.config.DDPOptions` fields).
    ddp: dict[str, Any] | None = None
    #: What the data-parallel machinery recorded of itself after the measured segment
    #: (``TrainingRun.dist_details``; PyTorch: DDP's buckets in ready order and sizes).
    runtime: dict[str, Any] | None = None
    #: The collective backend of the process group (``nccl``, ``gloo``), where there is one.
    process_group_backend: StrictStr | None = None
    #: How the framework's data-parallel engine is set up, in its own terms (JAX's mesh and
    #: shardings, TensorFlow's strategy and devices, PyTorch's launcher and rendezvous): the
    #: framework's ``DistContext.info`` beyond the fields above.
    engine: dict[str, Any] | None = None


class Breakdown(Part):
    """The phased measurement (``--breakdown``, :mod:`dlperf.measure.phases`): per-phase and
    host statistics (s), shares, the phases' total against the fused median and whether they
    reconcile within ``tolerance``; ``reason``/``error`` when not available."""

    available: StrictBool | None = None
    timer: StrictStr | None = None
    n_iters: StrictInt | None = None
    phases_measured: list[StrictStr] | None = None
    phases: dict[str, Any] | None = None
    host: dict[str, Any] | None = None
    shares: dict[str, Any] | None = None
    total: dict[str, Any] | None = None
    dispatch_s: Any = None
    wall_s: Num | None = None
    fused_median_s: Num | None = None
    rel_diff: Num | None = None
    tolerance: Num | None = None
    reconciled: StrictBool | None = None
    reason: StrictStr | None = None
    split: dict[str, Any] | None = None
    error: StrictStr | None = None


class Trace(Part):
    """The profiler trace (``--breakdown``/``--trace``): busy fraction, busy and idle time per
    iteration (s), CPU dispatch time, trace phases and the kept files."""

    available: StrictBool | None = None
    reason: StrictStr | None = None
    error: StrictStr | None = None
    n_steps: StrictInt | None = None
    source: StrictStr | None = None
    device_kind: StrictStr | None = None
    busy_fraction: Num | None = None
    busy_s: Num | None = None
    idle_s: Num | None = None
    step_wall_s: Num | None = None
    dispatch_s: dict[str, Any] | None = None
    kernels_per_iter: Num | None = None
    copies_per_iter: Num | None = None
    phases: dict[str, Any] | None = None
    phase_source: StrictStr | None = None
    notes: list[Any] | None = None
    files: dict[str, Any] | None = None
    dir: StrictStr | None = None
    slowdown: Any = None
    #: What the traced steps compiled, where the framework reports it (JAX: retraces, XLA
    #: compiles and their time, whether the executable was reused).
    compiles: dict[str, Any] | None = None


class OpClasses(Part):
    """Device time per iteration by operator class (s) from the trace, and the top operators."""

    per_iter_s: dict[str, Any] | None = None
    busy_s: Num | None = None
    device_kind: StrictStr | None = None
    source: StrictStr | None = None
    top_ops: list[Any] | None = None
    top_by_class: dict[str, Any] | None = None
    n_steps: StrictInt | None = None
    #: Operators moved to another class after the measurement, by a named script (what moved,
    #: from which class to which, seconds per iteration).
    relabelled: dict[str, Any] | None = None


class WorkerInfo(Part):
    """The process that produced the record: pid, elapsed time (s) by phase, its rank in a
    data-parallel run, the launcher that started the ranks (``command``, ``returncode``,
    ``timed_out``, ``ranks_reported``), the outside launch it joined
    (:meth:`dlperf.launch.outside.OutsideLaunch.record`), or for a launcher-made failure the
    worker's return code and the tail of its output."""

    pid: StrictInt | None = None
    elapsed_s: Num | None = None
    phases_s: dict[str, Any] | None = None
    rank: StrictInt | None = None
    launcher: dict[str, Any] | None = None
    launched_by: dict[str, Any] | None = None
    returncode: StrictInt | None = None
    stderr_tail: StrictStr | None = None


class BreakdownRun(Part):
    """The separate process that measured the breakdown (:func:`dlperf.launch.process.
    merge_breakdown`): why apart, how it ended, its own fused summary and flags, and that
    process's :class:`WorkerInfo`."""

    why: StrictStr | None = None
    status: StrictStr | None = None
    error: StrictStr | None = None
    summary: Summary | None = None
    flags: dict[str, Any] | None = None
    worker: WorkerInfo | None = None


class Env(Part):
    """The machine and process (:func:`dlperf.env.collect_env`, whose key order the fields
    follow). The CPU placement: ``cpu_list`` (the CPUs the worker could use, a cpulist such as
    ``"0-3"``), ``numa_nodes`` (the NUMA nodes holding them; None with ``numa_note`` where the
    OS gave no NUMA information) and ``cpu_bind`` (what ``--cpu-bind`` did,
    :func:`dlperf.placement.bind_cpus`; None when not asked); ``thread_policy`` says how the
    threads were chosen where they were not given (:meth:`dlperf.env.ThreadChoice.record`, or
    the per-rank default of a data-parallel CPU run); ``host_speed_after`` repeats the host
    probe after the measurement. Records older than schema 10 have no placement."""

    hostname: StrictStr | None = None
    platform: StrictStr | None = None
    python: StrictStr | None = None
    cpu_model: StrictStr | None = None
    cpu_id: dict[str, Any] | None = None
    host_speed: dict[str, Any] | None = None
    cpu_logical: StrictInt | None = None
    cpu_physical: StrictInt | None = None
    cpu_affinity: StrictInt | None = None
    cpu_list: StrictStr | None = None
    numa_nodes: list[StrictInt] | None = None
    numa_note: StrictStr | None = None
    memory_total_bytes: Bytes | None = None
    memory_available_bytes: Bytes | None = None
    load_average_1_5_15: list[Any] | None = None
    usable_cpu_busy_percent: list[Any] | None = None
    gpus: list[Any] | None = None
    dlperf_version: StrictStr | None = None
    git: dict[str, Any] | None = None
    env: dict[str, Any] | None = None
    cpu_bind: dict[str, Any] | None = None
    #: The CPU's instruction-set extensions that matter for training kernels
    #: (:func:`dlperf.env.cpu_isa_flags`: a list; a space-separated string is read too).
    cpu_flags: list[StrictStr] | StrictStr | None = None
    #: The host-speed probe again after the measurement (:func:`dlperf.env.host_speed`).
    host_speed_after: dict[str, Any] | None = None
    #: How the threads were chosen where they were not given (:meth:`dlperf.env.ThreadChoice.
    #: record`, or a data-parallel CPU rank's one thread).
    thread_policy: dict[str, Any] | None = None


class HostCpuWait(Part):
    """The measuring thread's wait for a CPU over the measured segment (:func:`dlperf.measure.
    host.cpu_wait`): seconds and share of the segment's wall time."""

    seconds: Num | None = None
    share: Num | None = None


class Host(Part):
    """The host's own time per iteration, untraced (:mod:`dlperf.measure.dispatch`): the step
    call's host time from an idle device (``dispatch_s``) and the wait for its output after it
    returned (``sync_wait_s``); stats in seconds; ``iters`` probed; ``reason``/``error`` when
    not measured."""

    dispatch_s: dict[str, Any] | None = None
    sync_wait_s: dict[str, Any] | None = None
    iters: StrictInt | None = None
    method: StrictStr | None = None
    reason: StrictStr | None = None
    error: StrictStr | None = None


class Timeline(Part):
    """The per-kernel timeline of the traced iterations, compressed (``--timeline``;
    :mod:`dlperf.measure.breakdown.timeline`, whose ``decode`` reads it)."""

    format: StrictStr | None = None
    encoding: StrictStr | None = None
    n_ops: StrictInt | None = None
    n_steps: StrictInt | None = None
    device_kind: StrictStr | None = None
    source: StrictStr | None = None
    steps_ns: list[Any] | None = None
    columns: list[StrictStr] | None = None
    data: StrictStr | None = None
    raw_bytes: StrictInt | None = None
    stored_bytes: StrictInt | None = None
