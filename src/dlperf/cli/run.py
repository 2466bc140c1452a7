"""``dlperf run``: measure the points its flags name, a one-entry grid
(:func:`dlperf.config.expand_grid`: the comma-separated lists are its axes).

The flags come in groups, one dataclass each: what to measure (:class:`Point`), how long
(:class:`Iterations`), the input pipeline (:class:`Pipeline`), what else to record
(:class:`Probes`), data parallelism (:class:`Parallel`) and where results go
(:class:`Storage`).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from dlperf.cli import common
from dlperf.cli.common import check_db, check_endpoint, check_out_dir, guard, ints, split
from dlperf.config.defaults import DDP, DEFAULT_BATCH_SIZE, ITERATIONS, QUICK_ITERATIONS, RUN
from dlperf.errors import ConfigError
from dlperf.outputs import shown_path
from dlperf.registry import COMPILE_MODES, FRAMEWORKS, OPTIMIZER_IMPLS
from dlperf.zoo import SUITES

if TYPE_CHECKING:
    from dlperf.results.schema import RunRecord

Opt = typer.Option

#: Help of --mode and --dp-layout, from the registry (each framework's modes and default
#: data-parallel layout).
MODE_HELP = ("Execution mode(s), comma-separated: "
             + "; ".join(f"{n} {'|'.join(i.modes)}" for n, i in FRAMEWORKS.items())
             + ". Default: the framework's first.")
DP_LAYOUT_HELP = ("Data-parallel processes: per_device (one per device) or per_node (one per "
                  "node driving its devices). Default: "
                  + ", ".join(f"{n} {i.dp_layouts[0]}" for n, i in FRAMEWORKS.items()
                              if i.data_parallel)
                  + " (TensorFlow on the CPU across nodes needs per_device).")


#: Default batch sizes of a suite's run (``--batch-size`` not given): the quick suite (the
#: README's main job) shows each model's step time and throughput at two batch sizes, so its
#: plots have lines, not single dots (docs/zoo.md); others: 32.
SUITE_BATCH_SIZES = {"quick": "8,32"}
#: Help of --suite, from the suites registry (:data:`dlperf.zoo.SUITES`).
SUITE_HELP = f"A suite: {', '.join(SUITES)} (see `dlperf list suites`)."


@dataclass
class Point:
    """What to measure: model(s) or a suite, batch sizes, framework, modes, device, data."""

    model: Annotated[str | None, Opt("--model", "-m", help="Model name(s), comma-separated (see `dlperf list models`).")] = None
    suite: Annotated[str | None, Opt("--suite", "-s", help=SUITE_HELP)] = None
    batch_size: Annotated[str | None, Opt("--batch-size", "-b", help=f"Mini-batch size(s), comma-separated: the global batch (split across devices) with --scaling strong, the default; the per-device batch with --scaling weak. Results store both (batch_size: global; per_device_batch) and the scaling. Default: {DEFAULT_BATCH_SIZE}; {SUITE_BATCH_SIZES['quick']} for the quick suite.")] = None
    device: Annotated[str, Opt(help="cpu, cuda, or auto (cuda if available).")] = "auto"
    precision: Annotated[str, Opt(help="fp32 (TF32 off), tf32, bf16 (autocast); comma-separated.")] = RUN.precision
    framework: Annotated[str, Opt(help="Framework (see `dlperf list frameworks`).")] = RUN.framework
    mode: Annotated[str | None, Opt(help=MODE_HELP)] = None
    data: Annotated[str | None, Opt(help="synthetic, a data-set name (mnist, cifar10, ptb, wikitext2, imagefolder), imagefolder:PATH or a PATH. Default: each suite entry's own, else synthetic.")] = None
    data_dir: Annotated[str | None, Opt(help="Data root for data-set names (default: $DLPERF_DATA).")] = None
    grad_accum: Annotated[int, Opt(help="Gradient-accumulation steps per iteration.")] = RUN.grad_accum
    threads: Annotated[str | None, Opt(help="CPU threads for the framework (per process: each data-parallel rank gets this many); comma-separated for a thread sweep, e.g. 1,2,4,8. Default: the thread policy (every usable CPU on a quiet host, fewer on a busy one; 1 per data-parallel CPU rank), chosen once per results file and recorded with each result.")] = None
    cpu_bind: Annotated[str, Opt(help="Bind the worker to CPUs before the framework starts: none (default: as started), cores (the usable CPUs split into disjoint blocks, one per data-parallel rank), numa (each rank on one NUMA node's CPUs) or a CPU list such as 0-3,8 (split among the ranks). Recorded with the result (env.cpu_bind); the YAML field is cpu_bind.")] = RUN.cpu_bind
    layout: Annotated[str, Opt(help="Image activation layout: auto (the framework's recommendation: channels_last for PyTorch CNNs on CUDA in bf16/tf32, NHWC in Flax/Keras), nchw, nhwc.")] = RUN.layout
    compile_mode: Annotated[str, Opt(help="PyTorch graph mode: torch.compile's mode: default, reduce-overhead (CUDA graphs: one launch for many kernels), max-autotune, max-autotune-no-cudagraphs; comma-separated to compare, e.g. default,reduce-overhead.")] = RUN.compile_mode
    optimizer_impl: Annotated[str, Opt(help="PyTorch only: the optimizer update's implementation: auto (the fastest: fused=True where PyTorch has fused kernels, CUDA and the CPU; PyTorch's default elsewhere), fused (fused=True), foreach (foreach=True), single (for-loop); comma-separated to compare, e.g. auto,fused. Recorded in flags.optimizer.")] = RUN.optimizer_impl
    rechoose_threads: Annotated[bool, Opt("--rechoose-threads", help="Measure the host's load again for the thread policy instead of keeping the choice this results file's CPU points were measured with (warned where it differs).")] = False
    framework_option: Annotated[list[str] | None, Opt("--framework-option", help="KEY=VALUE: an option of the framework's own (its Options model in frameworks/<name>/options.py; VALUE read as YAML, e.g. slowdown=1.1 or 'fail={64: oom}'); repeat the flag for several. The YAML field is options.")] = None
    repeats: Annotated[int, Opt(help="Runs of each point, each in a fresh worker process, in rounds (every point once, then again, ...): between-run variation and the olympic mean with `dlperf results --compare repeats`.")] = 1


@dataclass
class Iterations:
    """How long to measure each point (:class:`dlperf.config.IterationPolicy`)."""

    min_iters: Annotated[int, Opt(help="Measure at least this many iterations...")] = ITERATIONS.min_iters
    min_time: Annotated[float | None, Opt(help=f"...and at least this many seconds (default: {ITERATIONS.min_time_s}; {QUICK_ITERATIONS.min_time_s} for the quick suite).")] = None
    max_iters: Annotated[int, Opt(help="Stop measuring after this many iterations.")] = ITERATIONS.max_iters
    max_time: Annotated[float, Opt(help="Time budget of the measurement per point (s).")] = ITERATIONS.max_time_s
    warmup_window: Annotated[int, Opt(help="Warm-up window (iterations) for steady-state detection.")] = ITERATIONS.warmup_window
    max_warmup_iters: Annotated[int, Opt(help="Give up on steady state after this many warm-up iterations.")] = ITERATIONS.max_warmup_iters
    max_warmup_time: Annotated[float | None, Opt(help=f"...or this many seconds of warm-up (default: {ITERATIONS.max_warmup_time_s:g}; {QUICK_ITERATIONS.max_warmup_time_s:g} for the quick suite).")] = None
    ci_target: Annotated[float | None, Opt(help="Measure until the 95% CI of the median is within +- this share of it (e.g. 0.01), up to --max-time / --max-iters; off by default.")] = None
    memory_check: Annotated[bool, Opt("--memory-check/--no-memory-check", help="Refuse, before anything runs, points whose estimated memory (the model's weights, gradients, optimizer state, inputs and logits, or peaks stored at other batch sizes) exceeds the device's or the host's, naming the largest batch that fits.")] = True
    timeout: Annotated[float, Opt(help="Kill a point's worker after this many seconds (also the limit on making a file: model's spec, which imports the file in a process of its own).")] = RUN.timeout_s


@dataclass
class Pipeline:
    """Real data through the framework's input pipeline."""

    loader_workers: Annotated[str | None, Opt(help="Real data through the framework's input pipeline during training with N workers (DataLoader processes / tf.data / JAX: Grain processes, or host threads, see --loader-impl); comma-separated for a sweep, e.g. 0,2,4,8. Default: batches prepared before timing (an ImageFolder always uses the pipeline).")] = None
    loader_prefetch: Annotated[int, Opt(help="Batches the pipeline prepares ahead (DataLoader prefetch_factor per worker; JAX: Grain's per-worker buffer and device_put buffers, or the thread pipeline's queue depth).")] = RUN.loader_prefetch
    loader_impl: Annotated[str, Opt(help="JAX only: what the loader workers are: auto (Grain processes where grain is installed, else Python threads with a warning), processes (Grain; pip install grain), threads (dlperf's host threads); comma-separated to compare, e.g. processes,threads.")] = RUN.loader_impl
    input_bound_share: Annotated[float, Opt(help="Label a run input-bound when its measured iterations spent more than this share of their time waiting for data.")] = RUN.input_bound_share


@dataclass
class Probes:
    """What is recorded besides the fused step."""

    breakdown: Annotated[bool, Opt("--breakdown", help="After the fused-step measurement, a separate one of where the time goes: t_io, t_h2d, t_f, t_b, t_u per iteration, CPU dispatch, GPU busy fraction and device time per op class (from a profiler trace).")] = False
    trace: Annotated[str | None, Opt("--trace", help="Keep a Chrome-trace/Perfetto JSON of a few iterations after the measurement under this folder (path stored in the result).")] = None
    timeline: Annotated[bool, Opt("--timeline", help="Keep the per-kernel timeline of a few profiled iterations (stream, start, duration, op class, launching op, phase, launch geometry, host launch interval), compressed, in the results file: what the performance model is re-fitted from.")] = False
    power_interval: Annotated[float, Opt(help="NVML power sampling interval on a GPU (s).")] = RUN.power_interval_s
    ceilings: Annotated[bool, Opt("--ceilings/--no-ceilings", help="Measure the matmul and memory-bandwidth ceilings after each point (for MFU).")] = RUN.measure_ceilings
    target_loss: Annotated[float | None, Opt(help="Report the training time until the smoothed loss reaches this value (convergence).")] = None


@dataclass
class Parallel:
    """Data parallelism: devices, nodes, process layout, DDP's options, SLURM."""

    nproc: Annotated[str, Opt(help="Data parallel: devices per node (PyTorch: DDP processes via torchrun; JAX: sharded jit; TensorFlow: MirroredStrategy, or MultiWorkerMirroredStrategy with --dp-layout per_device / --nnodes > 1); comma-separated for a scaling series, e.g. 1,2.")] = "1"
    scaling: Annotated[str, Opt(help="strong (default): --batch-size is the global batch, split across devices; weak: --batch-size is the per-device batch (global = per-device x devices). Results store the global batch (batch_size), the per-device batch and this setting.")] = RUN.scaling
    nnodes: Annotated[int, Opt(help="Nodes (machines); run the same command on each with its --node-rank.", min=1)] = RUN.nnodes
    node_rank: Annotated[int, Opt(help="This node's index, 0 .. nnodes-1 (node 0 stores the results in --db, node k in DB.node<k>.db).", min=0)] = 0
    rdzv_endpoint: Annotated[str | None, Opt(help="HOST:PORT of node 0 for the rendezvous (torchrun c10d), coordinator (jax.distributed) or TF_CONFIG exchange (TensorFlow); needed with --nnodes > 1.")] = None
    dp_layout: Annotated[str | None, Opt(help=DP_LAYOUT_HELP)] = None
    bucket_cap_mb: Annotated[float, Opt(help="PyTorch DDP gradient bucket size (MiB).")] = DDP.bucket_cap_mb
    gradient_as_bucket_view: Annotated[bool, Opt("--gradient-as-bucket-view", help="PyTorch DDP option.")] = DDP.gradient_as_bucket_view
    static_graph: Annotated[bool, Opt("--static-graph", help="PyTorch DDP option.")] = DDP.static_graph
    find_unused_parameters: Annotated[bool, Opt("--find-unused-parameters", help="PyTorch DDP option.")] = DDP.find_unused_parameters
    broadcast_buffers: Annotated[bool, Opt("--broadcast-buffers/--no-broadcast-buffers", help="PyTorch DDP: broadcast rank 0's buffers (BatchNorm statistics) at every forward (PyTorch's default).")] = DDP.broadcast_buffers
    comm_profile_iters: Annotated[int, Opt(help="Data parallel: iterations profiled after the measurement for the exposed communication (0: none).", min=0)] = RUN.comm_profile_iters
    emit_slurm: Annotated[Path | None, Opt(help="Write a SLURM sbatch script that runs this command on --nnodes nodes, and exit.")] = None
    nccl_nvls: Annotated[str, Opt(help=common.NVLS_HELP)] = "default"

    def ddp(self) -> dict[str, Any]:
        """The DDP options given (:class:`dlperf.config.DDPOptions` fields not at their
        default): framework options of PyTorch's (``RunConfig.runtime.options``)."""
        from dlperf.config.axes import ddp_given

        return ddp_given({"bucket_cap_mb": self.bucket_cap_mb,
                          "gradient_as_bucket_view": self.gradient_as_bucket_view,
                          "static_graph": self.static_graph,
                          "find_unused_parameters": self.find_unused_parameters,
                          "broadcast_buffers": self.broadcast_buffers})

    def ddp_flags_set(self) -> list[str]:
        """The DDP flags given, as written on the command line."""
        return [flag for flag, on in (
            ("--bucket-cap-mb", self.bucket_cap_mb != DDP.bucket_cap_mb),
            ("--gradient-as-bucket-view",
             self.gradient_as_bucket_view != DDP.gradient_as_bucket_view),
            ("--static-graph", self.static_graph != DDP.static_graph),
            ("--find-unused-parameters",
             self.find_unused_parameters != DDP.find_unused_parameters),
            ("--no-broadcast-buffers", self.broadcast_buffers != DDP.broadcast_buffers)) if on]


@dataclass
class Storage:
    """Where results go, and which points run again."""

    db: Annotated[str, Opt(help="SQLite results file (created if missing).")] = common.DEFAULT_DB
    rerun: Annotated[bool, Opt("--rerun", help="Run points again even if the db has them.")] = False
    retry_failed: Annotated[bool, Opt("--retry-failed", help="Run again points whose stored result is a failure (oom, crash, timeout, nan_loss).")] = False
    report: Annotated[str | None, Opt(help="Also write a Markdown+PNG report to this folder.")] = None
    failed_final: Annotated[bool, Opt("--failed-final", hidden=True, help="With --tag: a stored error or unavailable result of this tag is final too (dlperf compare --run passes it from its second round: the code does not change between rounds, so a point that failed is not tried again).")] = False
    tag: Annotated[str | None, Opt(help="Label the results with this tag (e.g. a branch or version), for `dlperf results --tag` and `dlperf compare --db FILE BASE_TAG NEW_TAG`; points stored under another tag are measured again.")] = None
    force: Annotated[bool, Opt("--force", help="Replace files in the way of --emit-slurm or --report that dlperf did not write for them (never a database).")] = False


def _check_flags(point: Point, par: Parallel) -> None:
    """Flag checks that need no config: one of --model/--suite, one framework, repeats and
    the multi-node flags."""
    from dlperf.config import check_repeats

    if bool(point.model) == bool(point.suite):
        raise ConfigError("give exactly one of --model or --suite (e.g. --suite quick)")
    check_repeats(point.repeats)
    if "," in point.framework:
        raise ConfigError(f"--framework takes one framework, not {point.framework!r} (the modes "
                          "differ between them); run one command per framework, or a sweep "
                          "file with framework: [torch, jax, tensorflow] (each gets its "
                          "default mode unless mode: is given)")
    ints(par.nproc, "nproc")
    if par.nnodes > 1 and not par.rdzv_endpoint and par.emit_slurm is None:
        raise ConfigError(f"--nnodes {par.nnodes} needs --rdzv-endpoint HOST:PORT (node 0's "
                          "address and a free port), the same on every node")
    if par.rdzv_endpoint is not None:
        check_endpoint(par.rdzv_endpoint)
    if par.node_rank >= par.nnodes:
        raise ConfigError(f"--node-rank {par.node_rank} must be < --nnodes {par.nnodes} "
                          f"(nodes are numbered 0 .. {par.nnodes - 1})")


def _listed(value: str, flag: str, choices: tuple[str, ...]) -> list[str]:
    """The comma-separated values of a flag whose default is a value (``--optimizer-impl
    auto``, ``--compile-mode default``, ``--loader-impl auto``): an explicit empty value
    (``--optimizer-impl ''``) is refused, not read as the default (it was, silently).

    Raises:
        ConfigError: an empty value, naming ``choices``; an empty item (:func:`split`).
    """
    items = split(value, flag)
    if not items:
        raise ConfigError(f"--{flag} {value!r} is empty; give {', '.join(choices[:-1])} or "
                          f"{choices[-1]} (comma-separated to compare, e.g. "
                          f"{choices[0]},{choices[1]})")
    return items


def _policy(point: Point, it: Iterations) -> Any:
    """The iteration policy; the quick suite (a first run on a laptop) has shorter defaults
    (docs/zoo.md)."""
    from dlperf.config import make_policy

    base = QUICK_ITERATIONS if point.suite == "quick" else ITERATIONS
    return make_policy(
        min_iters=it.min_iters,
        min_time_s=base.min_time_s if it.min_time is None else it.min_time,
        max_iters=it.max_iters, max_time_s=it.max_time, warmup_window=it.warmup_window,
        max_warmup_iters=it.max_warmup_iters, ci_target_rel=it.ci_target,
        max_warmup_time_s=base.max_warmup_time_s if it.max_warmup_time is None
        else it.max_warmup_time)


def grid_entry(point: Point, it: Iterations, pipe: Pipeline, probes: Probes, par: Parallel,
               device: str) -> dict[str, Any]:
    """The one grid entry of ``dlperf run``: lists (comma-separated flags) are its axes, in the
    order of the nested loops (models outermost, compile modes innermost).

    Raises:
        ConfigError: a bad iteration flag or list value, naming the flag.
    """
    from dlperf.config import LOADER_IMPLS  # (pydantic: not at the CLI's start-up)

    policy = _policy(point, it)
    entry: dict[str, Any] = ({"suite": point.suite} if point.suite else
                             {"model": split(point.model, "model"), "data": point.data or RUN.data})
    if point.suite and point.data:
        entry["data"] = point.data
    entry.update(
        precision=split(point.precision, "precision") or [RUN.precision],
        batch_size=ints(point.batch_size
                        or SUITE_BATCH_SIZES.get(point.suite or "", str(DEFAULT_BATCH_SIZE)),
                        "batch-size"),
        threads=ints(point.threads, "threads") if point.threads else None,
        cpu_bind=point.cpu_bind,
        mode=split(point.mode, "mode") or "",
        nproc=ints(par.nproc, "nproc"),
        loader_workers=(ints(pipe.loader_workers, "loader-workers", low=0)
                        if pipe.loader_workers else None),
        loader_impl=_listed(pipe.loader_impl, "loader-impl", LOADER_IMPLS),
        optimizer_impl=_listed(point.optimizer_impl, "optimizer-impl", OPTIMIZER_IMPLS),
        compile_mode=_listed(point.compile_mode, "compile-mode", COMPILE_MODES),
        framework=point.framework, device=device, grad_accum=point.grad_accum,
        data_dir=point.data_dir, layout=point.layout, iterations=policy,
        timeout_s=it.timeout, loader_prefetch=pipe.loader_prefetch,
        input_bound_share=pipe.input_bound_share, power_interval_s=probes.power_interval,
        measure_ceilings=probes.ceilings, breakdown=probes.breakdown, trace_dir=probes.trace,
        timeline=probes.timeline,
        nnodes=par.nnodes, scaling=par.scaling, dp_layout=par.dp_layout or "",
        comm_profile_iters=par.comm_profile_iters, target_loss=probes.target_loss,
        repeats=point.repeats)
    options = {**par.ddp(), **framework_options(point.framework_option or [])}
    for k, v in par.ddp().items():
        if options[k] != v:
            raise ConfigError(f"--framework-option {k} and its flag --{k.replace('_', '-')} "
                              "are both given; give one")
    if options:
        entry["options"] = options
    return entry


def framework_options(items: list[str]) -> dict[str, Any]:
    """``--framework-option KEY=VALUE`` flags as the run config's ``options`` (each VALUE read
    as YAML: a number, a boolean, a list or a mapping); the framework's ``Options`` model
    checks them when the points are made.

    Raises:
        ConfigError: an item without ``=`` or a key given twice.
    """
    from dlperf.yamlsafe import load_yaml

    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--framework-option {item!r}: give KEY=VALUE, e.g. "
                              "--framework-option slowdown=1.1")
        if key in out:
            raise ConfigError(f"--framework-option {key} is given twice; give it once")
        out[key] = load_yaml(value, f"--framework-option {key}") if value.strip() else ""
    return out


def _note_unused_ddp(points: list[Any], par: Parallel) -> None:
    """Say so when DDP flags were given but no point runs a framework's DDP (registry
    ``ddp``) on more than one device."""
    from dlperf.config.identity import takes_ddp_options
    from dlperf.registry import FRAMEWORKS

    ddp_set = par.ddp_flags_set()
    if ddp_set and not any(takes_ddp_options(p.runtime.framework) and p.distributed for p in points):
        owners = " or ".join(f"--framework {n}" for n, i in FRAMEWORKS.items() if i.ddp)
        common.err.print(f"note: {', '.join(ddp_set)} set PyTorch DDP, which only runs with "
                         f"{owners} and --nproc > 1 (or --nnodes > 1); no point here uses DDP, "
                         "so they change nothing", markup=False, highlight=False)


def _emit_slurm(path: Path, par: Parallel, device: str, db: str, force: bool) -> None:
    """Write the sbatch script of ``--emit-slurm`` (never over the results file ``db``, a
    database, or a file that is not a script dlperf wrote, without ``force``)."""
    from dlperf.launch.slurm import sbatch_script, strip_node_options

    argv = sys.argv[sys.argv.index("run") + 1:] if "run" in sys.argv else []
    text = sbatch_script([a for a in strip_node_options(argv) if a != "--force"],
                         nnodes=par.nnodes,
                         gpus_per_node=max(ints(par.nproc, "nproc")) if device == "cuda" else 0)
    common.write_file(path, text, "slurm", "--emit-slurm", force=force, protect=(db,))
    common.out.print(f"wrote {shown_path(path)}: submit with `sbatch {shown_path(path)}`",
                     markup=False, highlight=False)


@common.grouped(point=Point, it=Iterations, pipe=Pipeline, probes=Probes, par=Parallel,
                store=Storage)
def run(point: Point, it: Iterations, pipe: Pipeline, probes: Probes, par: Parallel,
        store: Storage) -> None:
    """Measure training time per iteration for models x batch sizes x precisions (x devices)."""
    def body() -> None:
        from dlperf.config import expand_grid, resolve_device

        _check_flags(point, par)
        from dlperf.launch.distributed import set_nccl_nvls

        set_nccl_nvls(par.nccl_nvls)
        check_out_dir(store.report, "--report", store.db, force=store.force)
        common.check_output(par.emit_slurm, "--emit-slurm", store.db, kind="slurm",
                            force=store.force)
        check_db(store.db, must_exist=False, write=par.emit_slurm is None)
        # A batch script is often written on a login node without GPUs: take cpu/cuda as given.
        dev = (point.device if par.emit_slurm is not None and point.device in ("cpu", "cuda")
               else resolve_device(point.device))
        outside = _outside_launch(par)
        points = expand_grid({}, [grid_entry(point, it, pipe, probes, par, dev)], cli=True)
        _note_unused_ddp(points, par)
        if par.emit_slurm is not None:
            _emit_slurm(par.emit_slurm, par, dev, store.db, store.force)
            return
        if outside is None:
            from dlperf.config.limits import check_points_here
            from dlperf.placement import check_here

            check_points_here(points)  # the processes they start, before any starts
            check_here((p.hardware.cpu_bind, p.parallel.nproc) for p in points)
        from dlperf.launch.distributed import run_point
        from dlperf.launch.slurm import node_db_path

        def runner(cfg: Any) -> RunRecord:
            return run_point(cfg, node_rank=par.node_rank, endpoint=par.rdzv_endpoint)

        from dlperf.results.history import check_tag, tagging
        from dlperf.resume import resume_plan

        db = node_db_path(store.db, par.node_rank)
        if outside is not None:
            _execute_joined(outside, points, store, db)
            return
        points, resume, n_tagged = resume_plan(
            points, db, check_tag(store.tag), rerun=store.rerun, retry_failed=store.retry_failed,
            failed_final=store.failed_final, notice=lambda line: common.err.print(line, markup=False, highlight=False))
        if n_tagged:
            common.err.print(f"resuming: {n_tagged} point(s) already stored with tag "
                             f"{store.tag!r} in {db}", markup=False, highlight=False)
        common.execute(points, db, sweep=None, resume=resume, retry_failed=store.retry_failed,
                       rechoose_threads=point.rechoose_threads, memory_check=it.memory_check,
                       report_dir=store.report, runner=tagging(runner, store.tag),
                       already=n_tagged)

    guard(lambda: common.spec_bounded(body, it.timeout))


def _outside_launch(par: Parallel) -> Any:
    """The outside launcher that started this process (:mod:`dlperf.launch.outside`), or None
    (none, or dlperf's own multi-node launch: --rdzv-endpoint / --emit-slurm). With several
    ranks and --nproc/--nnodes left at 1, they are taken from the launch."""
    if par.emit_slurm is not None or par.rdzv_endpoint is not None:
        return None
    from dlperf.launch.outside import detect

    outside = detect()
    if outside is not None and outside.world_size > 1 and par.nproc == "1" and par.nnodes == 1:
        par.nproc, par.nnodes = str(outside.local_world_size), outside.nnodes
    return outside


def _execute_joined(outside: Any, points: list[Any], store: Storage, db: str) -> None:
    """Run ``points`` in this rank of an outside launch (:mod:`dlperf.launch.joined`). Every
    rank runs every point (no resume: the ranks must run the same points, and only rank 0
    reads the results file); rank 0 stores them in ``db``, the others in a temporary file, and
    print only their progress."""

    from dlperf.launch.joined import check_points, leave, run_joined
    from dlperf.results.history import check_tag, tagging

    tag = check_tag(store.tag)
    common.err.print(f"launched by {outside.launcher}: rank {outside.rank} of "
                     f"{outside.world_size}; every point runs (no resume)",
                     markup=False, highlight=False)
    single = outside.world_size == 1
    if not single:
        check_points(points, outside)
    runner = tagging(lambda cfg: run_joined(cfg, outside), tag)
    try:
        if outside.rank == 0:
            common.execute(points, db, sweep=None, resume=False,
                           retry_failed=store.retry_failed, report_dir=store.report,
                           runner=runner)
            return
        from rich.console import Console

        common.out = Console(file=open(os.devnull, "w"))  # noqa: SIM115 - the rank's own
        from dlperf.tempdirs import owned_tempdir

        with owned_tempdir("dlperf-rank-") as tmp:  # reclaimed if the rank is SIGKILLed
            common.execute(points, str(Path(tmp) / "rank.db"), sweep=None, resume=False,
                           retry_failed=store.retry_failed, report_dir=None, runner=runner)
    finally:
        if not single:
            leave(points[0].runtime.framework)
