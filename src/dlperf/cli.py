"""The ``dlperf`` command line: the only argv parser; thin, calls library functions.

Commands: ``run``, ``sweep``, ``list``, ``results``, ``report``, ``predict``, ``allreduce``, ``data``,
``env``. A user error
(:class:`~dlperf.errors.DlperfError`) prints one clear message and exits with status 2; nothing
already stored is lost.
"""

from __future__ import annotations

import functools
import itertools
import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape

from dlperf.errors import ConfigError, DlperfError, unknown_choice

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Benchmark deep-learning training: time per iteration, throughput, "
                       "memory, over models, frameworks, devices, precisions and batch sizes.")
out = Console(width=None if sys.stdout.isatty() else 250)
# Off a terminal rich would wrap at 80 columns: per-point result lines stay whole in logs.
err = Console(stderr=True, width=None if sys.stderr.isatty() else 250)

DEFAULT_DB = "dlperf-results.db"
LIST_WHAT = ("models", "suites", "frameworks", "datasets", "devices")


def _split(value: str | None) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()] if value else []


def _ints(value: str, what: str, low: int = 1) -> list[int]:
    vals = []
    for v in _split(value):
        try:
            n = int(v)
        except ValueError:
            raise ConfigError(f"--{what}: {v!r} is not an integer; give e.g. --{what} 16,32,64") from None
        if n < low:
            raise ConfigError(f"--{what}: {n} must be >= {low}")
        vals.append(n)
    if not vals:
        raise ConfigError(f"--{what}: give at least one value, e.g. --{what} 32")
    return vals


#: PyTorch DDP's own default bucket size (MB), dlperf's default for --bucket-cap-mb.
_DDP_BUCKET_CAP_MB = 25.0

#: Printed under a breakdown table (``dlperf run --breakdown`` and ``dlperf results``).
_BREAKDOWN_LEGEND = ("t_f/t_b/t_u marked * come from the profiler trace (a step compiled as one "
                     "program); `!`: phases and fused step differ by over 3% (reason in the "
                     "warnings). Op classes: dlperf results --op-classes")


def _guard(fn):
    """Run a command body; a user error (DlperfError, or a file that cannot be written or
    read) -> one message and exit 2."""
    try:
        return fn()
    except DlperfError as e:
        err.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False)
        raise typer.Exit(2) from None
    except OSError as e:
        where = f" {e.filename!r}" if getattr(e, "filename", None) else ""
        err.print(f"[bold red]error:[/] cannot use{escape(where)}: {escape(str(e.strerror or e))}; "
                  "give another path",
                  highlight=False)
        raise typer.Exit(2) from None


def _check_out_dir(path: str | Path | None, flag: str) -> None:
    """A report folder must be a folder (or not exist yet)."""
    if path is not None and Path(path).exists() and not Path(path).is_dir():
        raise ConfigError(f"{flag} {str(path)!r} is a file; give a folder for the report")


def _print_markdown(text: str) -> None:
    """Markdown tables drawn as tables in a terminal; piped or redirected, the Markdown itself
    (so ``dlperf results --compare ... > x.md`` writes a Markdown file)."""
    if sys.stdout.isatty():
        from rich.markdown import Markdown

        out.print(Markdown(text))
    else:
        sys.stdout.write(text)


def _check_db(path: str, must_exist: bool) -> None:
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"--db {path!r} is a folder; give a results file, e.g. {path}/results.db")
    if must_exist and not p.is_file():
        raise ConfigError(f"results file {path!r} does not exist; run `dlperf run ... --db {path}` first")
    if must_exist and p.stat().st_size == 0:  # reading must not turn it into an empty store
        raise ConfigError(f"results file {path!r} is empty (0 bytes), not a dlperf results "
                          f"database; run `dlperf run ... --db {path}` to fill it, or give "
                          f"another --db path")


@app.command()
def run(
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Model name(s), comma-separated (see `dlperf list models`).")] = None,
    suite: Annotated[Optional[str], typer.Option("--suite", "-s", help="A suite: quick, dlbench, seven, distributed (see `dlperf list suites`).")] = None,
    batch_size: Annotated[str, typer.Option("--batch-size", "-b", help="Global mini-batch size(s), comma-separated.")] = "32",
    device: Annotated[str, typer.Option(help="cpu, cuda, or auto (cuda if available).")] = "auto",
    precision: Annotated[str, typer.Option(help="fp32 (TF32 off), tf32, bf16 (autocast); comma-separated.")] = "fp32",
    framework: Annotated[str, typer.Option(help="Framework (see `dlperf list frameworks`).")] = "torch",
    mode: Annotated[Optional[str], typer.Option(help="Execution mode(s), comma-separated: torch eager|graph (torch.compile); jax xla; tensorflow eager|graph|xla. Default: the framework's first.")] = None,
    data: Annotated[Optional[str], typer.Option(help="synthetic, a data-set name (mnist, cifar10, ptb, wikitext2, imagefolder), imagefolder:PATH or a PATH. Default: each suite entry's own, else synthetic.")] = None,
    data_dir: Annotated[Optional[str], typer.Option(help="Data root for data-set names (default: $DLPERF_DATA).")] = None,
    db: Annotated[str, typer.Option(help="SQLite results file (created if missing).")] = DEFAULT_DB,
    min_iters: Annotated[int, typer.Option(help="Measure at least this many iterations...")] = 20,
    min_time: Annotated[Optional[float], typer.Option(help="...and at least this many seconds (default: 1.0; 0.5 for the quick suite).")] = None,
    max_iters: Annotated[int, typer.Option(help="Stop measuring after this many iterations.")] = 100_000,
    max_time: Annotated[float, typer.Option(help="Time budget of the measurement per point (s).")] = 60.0,
    warmup_window: Annotated[int, typer.Option(help="Warm-up window (iterations) for steady-state detection.")] = 5,
    max_warmup_iters: Annotated[int, typer.Option(help="Give up on steady state after this many warm-up iterations.")] = 500,
    max_warmup_time: Annotated[Optional[float], typer.Option(help="...or this many seconds of warm-up (default: 20; 5 for the quick suite).")] = None,
    grad_accum: Annotated[int, typer.Option(help="Gradient-accumulation steps per iteration.")] = 1,
    threads: Annotated[Optional[str], typer.Option(help="CPU threads for the framework; comma-separated for a thread sweep, e.g. 1,2,4,8.")] = None,
    layout: Annotated[str, typer.Option(help="Image activation layout: auto (the framework's recommendation: channels_last for PyTorch CNNs on CUDA in bf16/tf32, NHWC in Flax/Keras), nchw, nhwc.")] = "auto",
    compile_mode: Annotated[str, typer.Option(help="PyTorch graph mode: torch.compile's mode: default, reduce-overhead (CUDA graphs: one launch for many kernels), max-autotune, max-autotune-no-cudagraphs; comma-separated to compare, e.g. default,reduce-overhead.")] = "default",
    timeout: Annotated[float, typer.Option(help="Kill a point's worker after this many seconds.")] = 900.0,
    rerun: Annotated[bool, typer.Option("--rerun", help="Run points again even if the db has them.")] = False,
    retry_failed: Annotated[bool, typer.Option("--retry-failed", help="Run again points whose stored result is a failure (oom, crash, timeout, nan_loss).")] = False,
    report: Annotated[Optional[str], typer.Option(help="Also write a Markdown+PNG report to this folder.")] = None,
    breakdown: Annotated[bool, typer.Option("--breakdown", help="After the fused-step measurement, a separate one of where the time goes: t_io, t_h2d, t_f, t_b, t_u per iteration, CPU dispatch, GPU busy fraction and device time per op class (from a profiler trace).")] = False,
    trace: Annotated[Optional[str], typer.Option("--trace", help="Keep a Chrome-trace/Perfetto JSON of a few iterations after the measurement under this folder (path stored in the result).")] = None,
    loader_workers: Annotated[Optional[str], typer.Option(help="Real data through the framework's input pipeline during training with N workers (DataLoader processes / tf.data / JAX: Grain processes, or host threads, see --loader-impl); comma-separated for a sweep, e.g. 0,2,4,8. Default: batches prepared before timing (an ImageFolder always uses the pipeline).")] = None,
    loader_prefetch: Annotated[int, typer.Option(help="Batches the pipeline prepares ahead (DataLoader prefetch_factor per worker; JAX: Grain's per-worker buffer and device_put buffers, or the thread pipeline's queue depth).")] = 2,
    loader_impl: Annotated[str, typer.Option(help="JAX only: what the loader workers are: auto (Grain processes where grain is installed, else Python threads with a warning), processes (Grain; pip install grain), threads (dlperf's host threads); comma-separated to compare, e.g. processes,threads.")] = "auto",
    input_bound_share: Annotated[float, typer.Option(help="Label a run input-bound when its measured iterations spent more than this share of their time waiting for data.")] = 0.10,
    power_interval: Annotated[float, typer.Option(help="NVML power sampling interval on a GPU (s).")] = 0.025,
    ceilings: Annotated[bool, typer.Option("--ceilings/--no-ceilings", help="Measure the matmul and memory-bandwidth ceilings after each point (for MFU).")] = True,
    nproc: Annotated[str, typer.Option(help="Data parallel: devices per node (PyTorch: DDP processes via torchrun; JAX: sharded jit; TensorFlow: MirroredStrategy, or MultiWorkerMirroredStrategy with --dp-layout per_device / --nnodes > 1); comma-separated for a scaling series, e.g. 1,2.")] = "1",
    scaling: Annotated[str, typer.Option(help="strong: --batch-size is the global batch, split across devices; weak: --batch-size is the per-device batch.")] = "strong",
    nnodes: Annotated[int, typer.Option(help="Nodes (machines); run the same command on each with its --node-rank.", min=1)] = 1,
    node_rank: Annotated[int, typer.Option(help="This node's index, 0 .. nnodes-1 (node 0 stores the results in --db, node k in DB.node<k>.db).", min=0)] = 0,
    rdzv_endpoint: Annotated[Optional[str], typer.Option(help="HOST:PORT of node 0 for the rendezvous (torchrun c10d), coordinator (jax.distributed) or TF_CONFIG exchange (TensorFlow); needed with --nnodes > 1.")] = None,
    dp_layout: Annotated[Optional[str], typer.Option(help="Data-parallel processes: per_device (one per device) or per_node (one per node driving its devices). Default: torch per_device, jax per_node, tensorflow per_node (TensorFlow on the CPU across nodes needs per_device).")] = None,
    bucket_cap_mb: Annotated[float, typer.Option(help="PyTorch DDP gradient bucket size (MB).")] = _DDP_BUCKET_CAP_MB,
    gradient_as_bucket_view: Annotated[bool, typer.Option("--gradient-as-bucket-view", help="PyTorch DDP option.")] = False,
    static_graph: Annotated[bool, typer.Option("--static-graph", help="PyTorch DDP option.")] = False,
    find_unused_parameters: Annotated[bool, typer.Option("--find-unused-parameters", help="PyTorch DDP option.")] = False,
    broadcast_buffers: Annotated[bool, typer.Option("--broadcast-buffers/--no-broadcast-buffers", help="PyTorch DDP: broadcast rank 0's buffers (BatchNorm statistics) at every forward (PyTorch's default).")] = True,
    comm_profile_iters: Annotated[int, typer.Option(help="Data parallel: iterations profiled after the measurement for the exposed communication (0: none).", min=0)] = 5,
    target_loss: Annotated[Optional[float], typer.Option(help="Report the training time until the smoothed loss reaches this value (convergence).")] = None,
    emit_slurm: Annotated[Optional[Path], typer.Option(help="Write a SLURM sbatch script that runs this command on --nnodes nodes, and exit.")] = None,
    repeats: Annotated[int, typer.Option(help="Runs of each point, each in a fresh worker process, in rounds (every point once, then again, ...): between-run variation and the olympic mean with `dlperf results --compare repeats`.")] = 1,
) -> None:
    """Measure training time per iteration for models x batch sizes x precisions (x devices)."""
    def body():
        from dlperf.config import (check_repeats, crossed_compile_mode, make_policy,
                                   make_run_config, resolve_device, with_repeats)
        from dlperf.zoo import get_suite

        if bool(model) == bool(suite):
            raise ConfigError("give exactly one of --model or --suite (e.g. --suite quick)")
        check_repeats(repeats)
        if "," in framework:
            raise ConfigError(f"--framework takes one framework, not {framework!r} (the modes "
                              "differ between them); run one command per framework, or a sweep "
                              "file with framework: [torch, jax, tensorflow] (each gets its "
                              "default mode unless mode: is given)")
        nprocs = _ints(nproc, "nproc")
        if nnodes > 1 and not rdzv_endpoint and emit_slurm is None:
            raise ConfigError(f"--nnodes {nnodes} needs --rdzv-endpoint HOST:PORT (node 0's "
                              "address and a free port), the same on every node")
        if rdzv_endpoint is not None:
            _check_endpoint(rdzv_endpoint)
        if node_rank >= nnodes:
            raise ConfigError(f"--node-rank {node_rank} must be < --nnodes {nnodes} "
                              f"(nodes are numbered 0 .. {nnodes - 1})")
        entries: list[tuple[str, str]] = []
        if suite:
            entries = [(e.model, data or e.data) for e in get_suite(suite)]
        else:
            # each model name is validated by RunConfig below
            entries = [(m, data or "synthetic") for m in _split(model)]
        _check_out_dir(report, "--report")
        _check_db(db, must_exist=False)
        # A batch script is often written on a login node without GPUs: take cpu/cuda as given.
        dev = device if emit_slurm is not None and device in ("cpu", "cuda") \
            else resolve_device(device)
        quick = suite == "quick"  # a first run on a laptop: shorter defaults (docs/zoo.md)
        policy = make_policy(
            min_iters=min_iters, min_time_s=(0.5 if quick else 1.0) if min_time is None else min_time,
            max_iters=max_iters, max_time_s=max_time, warmup_window=warmup_window,
            max_warmup_iters=max_warmup_iters,
            max_warmup_time_s=(5.0 if quick else 20.0) if max_warmup_time is None else max_warmup_time)
        points = []
        for m, d in entries:
            for p in _split(precision) or ["fp32"]:
                for b in _ints(batch_size, "batch-size"):
                    for th in (_ints(threads, "threads") if threads else [None]):
                        for fw_mode in _split(mode) or [""]:
                            for npr in nprocs:
                                for lw, li, cm in itertools.product(
                                        _ints(loader_workers, "loader-workers", low=0)
                                        if loader_workers else [None],
                                        _split(loader_impl) or ["auto"],
                                        _split(compile_mode) or ["default"]):
                                    if crossed_compile_mode(fw_mode, cm, _split(mode)):
                                        continue  # eager x reduce-overhead: no such point
                                    points.append(make_run_config(
                                        model=m, framework=framework, mode=fw_mode, device=dev,
                                        precision=p, batch_size=b, grad_accum=grad_accum, data=d,
                                        data_dir=data_dir, threads=th, layout=layout,
                                        compile_mode=cm, iterations=policy, timeout_s=timeout, loader_workers=lw,
                                        loader_prefetch=loader_prefetch, loader_impl=li,
                                        input_bound_share=input_bound_share,
                                        power_interval_s=power_interval,
                                        measure_ceilings=ceilings, breakdown=breakdown,
                                        trace_dir=trace, nproc=npr, nnodes=nnodes,
                                        scaling=scaling, dp_layout=dp_layout or "",
                                        ddp={"bucket_cap_mb": bucket_cap_mb,
                                             "gradient_as_bucket_view": gradient_as_bucket_view,
                                             "static_graph": static_graph,
                                             "find_unused_parameters": find_unused_parameters,
                                             "broadcast_buffers": broadcast_buffers},
                                        comm_profile_iters=comm_profile_iters,
                                        target_loss=target_loss))
        ddp_set = [flag for flag, on in (
            ("--bucket-cap-mb", bucket_cap_mb != _DDP_BUCKET_CAP_MB),
            ("--gradient-as-bucket-view", gradient_as_bucket_view),
            ("--static-graph", static_graph), ("--find-unused-parameters", find_unused_parameters),
            ("--no-broadcast-buffers", not broadcast_buffers)) if on]
        if ddp_set and not any(p.framework == "torch" and p.nproc * p.nnodes > 1 for p in points):
            err.print(f"note: {', '.join(ddp_set)} set PyTorch DDP, which only runs with "
                      "--framework torch and --nproc > 1 (or --nnodes > 1); no point here "
                      "uses DDP, so they change nothing", markup=False, highlight=False)
        # one run per measurement (0 loader workers under several --loader-impl: one point)
        seen: set[str] = set()
        points = [p for p in points if not (p.run_key() in seen or seen.add(p.run_key()))]
        points = with_repeats(points, repeats)
        if emit_slurm is not None:
            from dlperf.launch.slurm import sbatch_script, strip_node_options

            argv = sys.argv[sys.argv.index("run") + 1:] if "run" in sys.argv else []
            text = sbatch_script(strip_node_options(argv), nnodes=nnodes,
                                 gpus_per_node=max(nprocs) if dev == "cuda" else 0)
            emit_slurm.write_text(text)
            out.print(f"wrote {emit_slurm}: submit with `sbatch {emit_slurm}`")
            return
        from dlperf.launch.distributed import run_point
        from dlperf.launch.slurm import node_db_path

        def runner(cfg):
            return run_point(cfg, node_rank=node_rank, endpoint=rdzv_endpoint)

        _execute(points, node_db_path(db, node_rank), sweep=None, resume=not rerun,
                 retry_failed=retry_failed, report_dir=report, runner=runner)

    _guard(body)


def _check_endpoint(endpoint: str) -> None:
    host, _, port = endpoint.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--rdzv-endpoint {endpoint!r} is not HOST:PORT; give e.g. "
                          "node0.example.org:29500 or 127.0.0.1:29500")


def _execute(points, db: str, *, sweep, resume: bool, retry_failed: bool, report_dir: str | None,
             sweep_config: dict | None = None, runner=None, missing_ok: bool = False) -> None:
    """Check, run and store ``points``, print the results; exit 1 if every point that ran
    failed or any point is ``unavailable`` (missing data or framework: still to measure).
    ``missing_ok`` (``dlperf sweep``): points of a missing data set are stored ``unavailable``
    and the others run, instead of refusing them all (:func:`dlperf.sweep.preflight`)."""
    from dlperf.report.tables import results_table
    from dlperf.results.store import ResultStore
    from dlperf.sweep import execute, preflight
    from dlperf.worker import now_iso

    missing = preflight(points, allow_missing=missing_ok)
    # Trace folders are written after each measurement: one that cannot be made would leave
    # the point stored without its trace (and resumed as done), so they are made now; an
    # OSError is a user error (_guard: exit 2, nothing run or stored).
    for d in sorted({p.trace_dir for p in points if p.trace_dir}):
        Path(d).expanduser().mkdir(parents=True, exist_ok=True)
    with ResultStore(db) as store:
        if sweep_config is not None:
            store.add_sweep(sweep, sweep_config, now_iso())
        try:
            outcome = execute(points, store, sweep=sweep, resume=resume, retry_failed=retry_failed,
                              console=err, runner=runner, missing_data=missing)
        except KeyboardInterrupt:
            again = ("run the same command again to resume" if resume else
                     "the points not reached yet still hold their earlier results, so run the "
                     "same command (with --restart/--rerun) again to measure every point anew; "
                     "without it they count as done")
            err.print(f"[yellow]interrupted[/]: finished points are in {escape(str(db))}; "
                      f"{again}")
            raise typer.Exit(130) from None
        keys = {p.run_key() for p in points}
        rows = [r for r in store.rows() if r["run_key"] in keys]
        out.print(results_table(rows))
        from dlperf.report.breakdown import breakdown_table

        bt = breakdown_table(rows)
        if bt is not None:
            out.print(bt)
            out.print(_BREAKDOWN_LEGEND, highlight=False)
        if any(p.repeat for p in points):
            from dlperf.report.compare import repeat_runs, repeats_markdown

            reps = repeat_runs(rows)
            if reps:
                _print_markdown(repeats_markdown(reps))
        not_run = (f", {outcome.missing_data} not run (data missing)"
                   if outcome.missing_data else "")
        err.print(f"{outcome.ran} run, {outcome.skipped} already in {db}, {outcome.failed} "
                  f"failed{not_run}", markup=False)
        if report_dir:
            path = _write_full_report(db, Path(report_dir), "dlperf report", None)
            out.print(f"report: {path}")
    all_failed = outcome.ran and outcome.failed == outcome.ran
    if all_failed:
        err.print("[red]every point that ran failed[/]; see the errors above")
    if outcome.unavailable:
        err.print(f"[red]{outcome.unavailable} point(s) unavailable[/] (data or framework not "
                  "here; see the errors above): they are stored as such; run the same command "
                  "again once that is fixed to measure them")
    if all_failed or outcome.unavailable:
        raise typer.Exit(1)


#: ``dlperf sweep --help`` (one string per paragraph: the help keeps line breaks as written).
_SWEEP_HELP = (
    "Run a grid from a YAML file; resumable: finished points are skipped.\n\n"
    "Bad values, corrupt data files and data that do not fit a model refuse the whole sweep "
    "before anything runs (exit status 2). A real data set that is missing (not downloaded or "
    "made, no DLPERF_DATA) does not: one warning names it, its points are stored as "
    "'unavailable' with the message, the other points run, and running the sweep again once "
    "the data are there measures just those points.\n\n"
    "Exit status: 0; 1 if any point is unavailable (missing data or framework) or every point "
    "that ran failed; 2 for a user error; 130 when interrupted.")


@app.command(help=_SWEEP_HELP)
def sweep(
    file: Annotated[Path, typer.Argument(help="Sweep YAML file (name, defaults, grid).")],
    db: Annotated[Optional[str], typer.Option(help="Results file (default: the YAML file's path with .db instead of .yaml).")] = None,
    restart: Annotated[bool, typer.Option("--restart", "--rerun", help="Ignore results already in the db and run every point (`dlperf run` calls it --rerun; both names work here).")] = False,
    retry_failed: Annotated[bool, typer.Option("--retry-failed", help="Run again points that failed before.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List the points and exit.")] = False,
    report: Annotated[Optional[str], typer.Option(help="Also write a report to this folder.")] = None,
    node_rank: Annotated[int, typer.Option(help="Multi-node points: this node's index (node k > 0 stores in DB.node<k>.db).", min=0)] = 0,
    rdzv_endpoint: Annotated[Optional[str], typer.Option(help="Multi-node points: HOST:PORT of node 0 (same on every node).")] = None,
    shard: Annotated[Optional[str], typer.Option(help="K/N: run only every N-th point from the K-th (0-based; a point's repeats stay on its shard), e.g. 0/2 and 1/2 on two GPUs at once; shards may share one --db.")] = None,
) -> None:
    """Run a grid from a YAML file; resumable: finished points are skipped (help: _SWEEP_HELP)."""
    def body():
        from dlperf.config import load_sweep

        _check_out_dir(report, "--report")
        k_n = _parse_shard(shard) if shard is not None else None
        cfg = load_sweep(file)
        points = cfg.expand()
        if k_n is not None:  # by point: the repeats of a point stay on one shard (one GPU)
            order = list(dict.fromkeys(p.point_key() for p in points))
            mine = set(order[k_n[0]::k_n[1]])
            points = [p for p in points if p.point_key() in mine]
        if dry_run:  # what would run: the points not stored in the db (read, not changed)
            from dlperf.launch.slurm import node_db_path
            from dlperf.results.store import stored_keys

            path = node_db_path(db or str(Path(file).with_suffix(".db")), node_rank)
            _check_db(path, must_exist=False)
            done = set() if restart else stored_keys(path, include_failed=not retry_failed)
            ok_keys = set() if restart else stored_keys(path, include_failed=False)
            for p in points:
                k = p.run_key()
                tag = ("pending" if k not in done else "stored " if k in ok_keys else "failed ")
                out.print(f"{tag}  {k}  {escape(p.label())}", highlight=False)
            n_points = len({p.point_key() for p in points})
            plural = "s" if n_points != 1 else ""
            n_done = sum(p.run_key() in done for p in points)
            n_failed = sum(p.run_key() in done and p.run_key() not in ok_keys for p in points)
            out.print((f"{len(points)} points" if n_points == len(points) else
                       f"{len(points)} runs of {n_points} point{plural} (repeats)")
                      + f": {len(points) - n_done} pending, {n_done} stored in {path}"
                      + (f" ({n_failed} of them failed: timeout, crash, OOM, ...; add "
                         "--retry-failed to run them again)" if n_failed else ""))
            return
        multi = [p for p in points if p.nnodes > 1]
        if multi and not rdzv_endpoint:
            raise ConfigError(f"{len(multi)} point(s) have nnodes > 1: give --rdzv-endpoint "
                              "HOST:PORT (node 0's address) and --node-rank on every node")
        if rdzv_endpoint is not None:
            _check_endpoint(rdzv_endpoint)
        if k_n is not None and k_n[1] > 1 and any(p.device == "cpu" for p in points):
            err.print("note: shards that run at the same time on one machine share its CPU "
                      "cores: CPU timings slow down (several-fold for small steps, with no "
                      "warning in the results); run CPU shards one after another, or give "
                      "each its own cores (taskset -c) and threads", markup=False)
        on_gpu = [p for p in points if p.device == "cuda"]
        if on_gpu:  # as `dlperf run --device cuda`: refused here, not once per point
            from dlperf.config import resolve_device
            try:
                resolve_device("cuda")
            except ConfigError:
                raise ConfigError(
                    f"{file}: {len(on_gpu)} of {len(points)} point(s) ask for device cuda, but no "
                    "CUDA GPU is usable here; run the sweep on a GPU machine, or set "
                    "device: cpu (or auto) in the file") from None
        from dlperf.launch.distributed import run_point
        from dlperf.launch.slurm import node_db_path

        path = node_db_path(db or str(Path(file).with_suffix(".db")), node_rank)
        _check_db(path, must_exist=False)
        _execute(points, path, sweep=cfg.name, resume=not restart, retry_failed=retry_failed,
                 report_dir=report, sweep_config=cfg.model_dump(), missing_ok=True,
                 runner=lambda c: run_point(c, node_rank=node_rank, endpoint=rdzv_endpoint))

    _guard(body)


def _parse_shard(text: str) -> tuple[int, int]:
    """``"K/N"`` -> ``(K, N)`` with ``0 <= K < N``.

    Raises:
        ConfigError: anything else, naming the value and the form expected.
    """
    k, sep, n = text.partition("/")
    try:
        ki, ni = int(k), int(n)
    except ValueError:
        ki, ni = -1, 0
    if not sep or not 0 <= ki < ni:
        raise ConfigError(f"--shard {text!r}: give K/N with 0 <= K < N, e.g. --shard 0/2 and "
                          "--shard 1/2 for two sweeps side by side")
    return ki, ni


@app.command("list")
def list_(what: Annotated[Optional[str], typer.Argument(help=f"One of: {', '.join(LIST_WHAT)} (default: all).")] = None) -> None:
    """List models, suites, frameworks, data sets and devices."""
    def body():
        from rich.table import Table

        from dlperf.data import DATASETS, data_root
        from dlperf.frameworks import ADAPTERS, get_adapter
        from dlperf.zoo import SPECS, SUITES

        if what is not None and what not in LIST_WHAT:
            raise unknown_choice("list topic", what, LIST_WHAT)
        show = [what] if what else list(LIST_WHAT)
        if "models" in show:
            t = Table(title="models")
            for c in ("name", "family", "input", "classes", "params", "train GFLOP/sample", "real data", "source"):
                t.add_column(c)
            for s in SPECS.values():
                t.add_row(s.name, s.family, f"{s.input_kind} {'x'.join(map(str, s.input_shape))}",
                          str(s.num_classes), f"{s.params:,}", f"{s.train_flops_per_sample / 1e9:.4g}",
                          ",".join(s.real_data), s.source)
            out.print(t)
        if "suites" in show:
            t = Table(title="suites")
            t.add_column("suite")
            t.add_column("entries (model[:data])")
            for n, es in SUITES.items():
                t.add_row(n, ", ".join(e.model + ("" if e.data == "synthetic" else f":{e.data}") for e in es))
            out.print(t)
        if "frameworks" in show:
            from dlperf.config import FRAMEWORK_MODES

            t = Table(title="frameworks")
            for c in ("framework", "modes", "installed"):
                t.add_column(c)
            for n in ADAPTERS:
                ver = _installed_version(n)  # from package metadata: importing TF takes seconds
                if ver is None:
                    ok, ver = get_adapter(n).available()
                    ver = ver if ok else f"no: {ver}"
                t.add_row(n, ", ".join(FRAMEWORK_MODES.get(n, ())), escape(ver))  # 'dlperf[jax]' 
            out.print(t)
        if "datasets" in show:
            root = data_root(None)
            out.print(f"data sets: {', '.join(DATASETS)} (data root: "
                      f"{root if root else 'not set; use --data-dir or DLPERF_DATA'})")
        if "devices" in show:
            from dlperf import nvml
            from dlperf.env import cpu_model

            out.print(f"cpu: {cpu_model()}")
            for g in nvml.gpus():
                out.print(f"cuda:{g['index']}: {g.get('name')} "
                          f"({g.get('memory_total_bytes', 0) / 2**30:.0f} GiB, driver {g.get('driver')})")

    _guard(body)


@app.command()
def results(
    db: Annotated[str, typer.Option(help="Results file.")] = DEFAULT_DB,
    format: Annotated[str, typer.Option("--format", "-f", help="table, csv or json.")] = "table",
    model: Annotated[Optional[str], typer.Option(help="Only these models (comma-separated).")] = None,
    status: Annotated[Optional[str], typer.Option(help="Only these statuses, e.g. ok,oom.")] = None,
    all_runs: Annotated[bool, typer.Option("--all", help="Every stored run, not only the latest per point.")] = False,
    samples: Annotated[bool, typer.Option("--samples", help="JSON: include raw per-iteration samples.")] = False,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write to this file instead of stdout.")] = None,
    compare: Annotated[Optional[str], typer.Option(help="Instead of the results: 'modes' (graph/xla vs eager speed-up), 'frameworks' (each framework/mode vs torch/eager), 'matrix' (median ms per point x framework/mode side by side, each point's runs as a range), 'data' (real-data pipelines vs synthetic data), 'scaling' (data-parallel efficiency against one device) or 'convergence' (loss and time to --target-loss across device counts), 'allreduce' (stored all-reduce sweeps: time, algbw, busbw per message size), 'repeats' (between-run variation of points run several times, --repeats N: run medians, mean, stdev, CV, olympic mean against the within-run CI), 'threads' (CPU thread scaling: step time, speed-up, efficiency and Karp-Flatt serial fraction against --threads).")] = None,
    op_classes: Annotated[bool, typer.Option("--op-classes", help="Instead of the results: device time per op class of results measured with --breakdown/--trace, and step-time gaps between frameworks/modes at the same point attributed to op classes (the gaps in the table and JSON; CSV: one row per result, seconds per iteration).")] = False,
    target_loss: Annotated[Optional[float], typer.Option(help="With --compare convergence: the target loss (default: the one stored with each run).")] = None,
) -> None:
    """Show stored results as a table, CSV or JSON, or compare modes and frameworks."""
    def body():
        from dlperf.report.tables import results_table
        from dlperf.results.export import to_csv, to_json
        from dlperf.results.store import ResultStore

        if format not in ("table", "csv", "json"):
            raise unknown_choice("format", format, ("table", "csv", "json"))
        _check_db(db, must_exist=True)
        if target_loss is not None and compare != "convergence":
            raise ConfigError("--target-loss is the target of --compare convergence; add "
                              "--compare convergence, or leave --target-loss out")
        if samples and (format != "json" or compare is not None or op_classes):
            raise ConfigError("--samples adds the raw samples to the JSON of the results: give "
                              "--format json without --compare/--op-classes, or leave --samples "
                              "out")
        from dlperf.worker import STATUSES

        for s in _split(status):
            if s not in STATUSES:
                raise unknown_choice("status", s, STATUSES, plural="statuses")
        with ResultStore(db, read_only=True) as store:
            rows = store.rows(latest=not all_runs, model=_split(model) or None,
                              status=_split(status) or None)
            if model and not rows:  # a misspelt filter reads as an empty file otherwise
                stored = sorted({r["model"] for r in store.rows(latest=True)})
                missing = [m for m in _split(model) if m not in stored]
                if missing and stored:
                    raise unknown_choice("model", missing[0], stored,
                                         plural=f"models in {db}")
            if op_classes:
                if compare is not None:
                    raise ConfigError("give --op-classes or --compare, not both")
                text = _op_classes_text(rows, format, _measured_or_none(store),
                                        to_file=output is not None)
                if text is None:
                    return
                (output.write_text(text) if output else sys.stdout.write(text))
                return
            if compare is not None:
                from dlperf.report import compare as cmp

                kinds = ("modes", "frameworks", "matrix", "data", "scaling", "convergence",
                         "allreduce", "repeats", "threads")
                if compare not in kinds:
                    raise unknown_choice("comparison", compare, kinds)
                if compare == "allreduce":
                    comps = store.collectives()
                    md = cmp.collectives_markdown
                elif compare == "matrix":  # every run: a point's earlier runs show as a range
                    comps = cmp.framework_matrix(store.rows(
                        latest=False, model=_split(model) or None, status=_split(status) or None))
                    md = cmp.matrix_markdown
                elif compare == "repeats":
                    comps = cmp.repeat_runs(rows)
                    md = cmp.repeats_markdown
                elif compare == "threads":
                    from dlperf.report import threads as thr

                    comps = thr.thread_scaling(rows, _measured_or_none(store))
                    md = thr.threads_markdown
                elif compare == "scaling":
                    from dlperf.report.scaling import scaling_markdown
                    from dlperf.perfmodel.scaling import scaling_points

                    comps = scaling_points(rows, _measured(store))
                    md = scaling_markdown
                elif compare == "convergence":
                    from dlperf.report.convergence import (convergence_groups,
                                                           convergence_markdown)

                    groups = convergence_groups(rows, store.samples, target_loss)
                    md = lambda _c: convergence_markdown(groups)  # noqa: E731
                    comps = [{**{k: v for k, v in g.items() if k != "runs"},
                              **{k: v for k, v in r.items() if k not in ("times", "losses")}}
                             for g in groups for r in g["runs"]]
                else:
                    fn = {"modes": cmp.mode_speedups, "frameworks": cmp.framework_ratios,
                          "data": cmp.data_gaps}[compare]
                    comps = fn(rows, _measured(store))
                    md = (cmp.data_markdown if compare == "data" else
                          functools.partial(cmp.markdown, kind=compare))
                if format == "csv" and compare == "matrix":  # one column per framework/mode
                    comps = cmp.matrix_flat(comps)
                elif format == "csv" and compare == "threads":  # one row per thread count
                    comps = thr.threads_flat(comps)
                text = (md(comps) if format == "table" else
                        json.dumps(comps, indent=1) if format == "json" else _csv(comps))
                if output:
                    output.write_text(text)
                elif format == "table":
                    _print_markdown(text)
                else:
                    sys.stdout.write(text)
                return
            if format == "table":
                if output:
                    raise ConfigError("--output needs --format csv or json")
                out.print(results_table(rows))
                if not rows and store.collectives():
                    err.print(f"{db} holds all-reduce rows only: dlperf results --db {db} "
                              "--compare allreduce", markup=False, highlight=False)
                from dlperf.report.breakdown import breakdown_table

                bt = breakdown_table(rows)
                if bt is not None:
                    out.print(bt)
                    out.print(_BREAKDOWN_LEGEND, highlight=False)
                return
            text = to_csv(rows) if format == "csv" else to_json(rows, store, include_samples=samples)
            if output:
                output.write_text(text)
                err.print(f"wrote {len(rows)} rows to {output}")
            else:
                sys.stdout.write(text)

    _guard(body)


def _op_classes_text(rows, format: str, samples_of=None, to_file: bool = False) -> str | None:
    """The op-class table and gap attribution; printed directly (None) for ``table``, or as
    Markdown (the report's sections) when ``to_file``. ``samples_of``: result id -> measured
    samples, for the gaps' CIs."""
    from dlperf.report import breakdown as bdr

    if not any(bdr.op_classes_of(r) for r in rows):
        raise ConfigError("no result here has op classes; measure with --breakdown or "
                          "--trace DIR")
    gaps = bdr.gap_attribution(rows, samples_of)
    if format == "table" and to_file:
        return bdr.op_class_markdown(rows) + ("\n" + bdr.gap_markdown(gaps) if gaps else "")
    if format == "table":
        out.print(bdr.op_class_table(rows))
        md = bdr.op_class_markdown(rows)
        if "Unclassified device time" in md:
            out.print(md[md.index("Unclassified device time"):].rstrip(), markup=False,
                      highlight=False)
        for g in bdr.gap_tables(gaps):
            out.print(g)
        if gaps:
            out.print(bdr.GAP_LEGEND, markup=False, highlight=False)
        return None
    if format == "json":
        per = [{"id": r.get("id"), "model": r.get("model"), "framework": r.get("framework"),
                "mode": r.get("mode"), "device": r.get("device"), "precision": r.get("precision"),
                "batch_size": r.get("batch_size"), "step_time_median_s": r.get("step_time_median_s"),
                "op_classes": bdr.result_of(r).get("op_classes"),
                "trace": bdr.result_of(r).get("trace")}
               for r in rows if bdr.op_classes_of(r)]
        return json.dumps({"results": per, "gaps": gaps}, indent=1, default=str)
    return _csv(bdr.op_class_records(rows))


def _measured(store):
    return lambda rid: store.samples(rid)["measure"]["step_time_s"]


def _measured_or_none(store):
    """result id -> measured samples, None where the result stored none."""
    return lambda rid: (store.samples(rid).get("measure") or {}).get("step_time_s") or None


def _csv(dicts: list[dict]) -> str:
    import csv
    import io

    buf = io.StringIO()
    if dicts:
        w = csv.DictWriter(buf, fieldnames=list(dicts[0]), lineterminator="\n")
        w.writeheader()
        w.writerows({k: " ".join(map(str, v)) if isinstance(v, (list, tuple)) else v
                     for k, v in d.items()} for d in dicts)  # lists: space-separated
    return buf.getvalue()


@app.command()
def report(
    db: Annotated[str, typer.Option(help="Results file.")] = DEFAULT_DB,
    output: Annotated[Path, typer.Option("--output", "-o", help="Folder for report.md and the PNG plots.")] = Path("dlperf-report"),
    title: Annotated[str, typer.Option(help="Report title.")] = "dlperf report",
    target_loss: Annotated[Optional[float], typer.Option(help="Target loss of the convergence section (default: the one stored with each run).")] = None,
) -> None:
    """Write a Markdown report (table + time-per-iteration plots) from a results file."""
    def body():
        _check_db(db, must_exist=True)
        _check_out_dir(output, "--output")
        path = _write_full_report(db, output, title, target_loss)
        out.print(f"report: {path}")

    _guard(body)


#: framework -> the distributions that make it (all needed), for ``dlperf list``.
_DISTRIBUTIONS = {"torch": (("torch",),), "jax": (("jax",), ("flax",), ("optax",)),
                  "tensorflow": (("tensorflow", "tensorflow-cpu"), ("keras",))}


def _installed_version(framework: str) -> str | None:
    """The framework's version from package metadata without importing it; ``"no: ..."`` if a
    needed distribution is missing; None when unknown here (ask the adapter)."""
    from importlib.metadata import PackageNotFoundError, version

    needs = _DISTRIBUTIONS.get(framework)
    if needs is None:
        return None
    found = []
    for alternatives in needs:
        for d in alternatives:
            try:
                found.append(version(d))
                break
            except PackageNotFoundError:
                continue
        else:
            return f"no: {alternatives[0]} is not installed; pip install 'dlperf[{framework}]'"
    return found[0]


def _write_full_report(db: str, output: Path, title: str, target_loss: float | None) -> Path:
    """The report of ``dlperf report`` (and of ``run``/``sweep --report``): results table,
    plots, comparisons, breakdown, efficiency, scaling, convergence and the environment."""
    from dlperf.report import compare as cmp
    from dlperf.report.markdown import write_report
    from dlperf.results.store import ResultStore

    with ResultStore(db, read_only=True) as store:
        rows = store.rows()
        if not rows and not store.collectives():
            raise ConfigError(f"{db} holds no results yet")
        sections = []
        matrix = [p for p in cmp.framework_matrix(store.rows(latest=False))
                  if len(p["columns"]) > 1]
        if matrix:
            sections.append(("Frameworks and modes side by side (ms per iteration)",
                             cmp.matrix_markdown(matrix)))
        modes = cmp.mode_speedups(rows, _measured(store))
        if modes:
            sections.append(("Graph-optimisation effect (speed-up over eager)",
                             cmp.markdown(modes)))
        fws = cmp.framework_ratios(rows, _measured(store))
        if fws:
            sections.append(("Frameworks against torch/eager (speed-up)", cmp.markdown(fws)))
        sections.extend(_breakdown_sections(rows, _measured_or_none(store)))
        gaps = cmp.data_gaps(rows, _measured(store))
        if gaps:
            sections.append(("Input pipelines: real data against synthetic data",
                             cmp.data_markdown(gaps)))
        reps = cmp.repeat_runs(rows)
        if reps:
            sections.append(("Repeated runs: between-run variation", cmp.repeats_markdown(reps)))
        eff = cmp.efficiency_markdown(rows)
        if eff:
            sections.append(("Efficiency: MFU, roofline, energy", eff))
        sections += _thread_sections(rows, store, output)
        sections += _parallel_sections(rows, store, output, target_loss)
        coll = store.collectives()
        store_env = store.collectives_env() if coll else None
        if coll:
            sections.append(("All-reduce (algbw, busbw per message size)",
                             cmp.collectives_markdown(coll)))
    warned = [r for r in rows if r.get("warnings")]
    if warned:  # the quality warnings stored with each result (worker.quality_warnings)
        thr = any(r.get("threads") is not None for r in warned)  # a thread sweep's rows
        lines = ["| model | framework/mode | device | precision | batch |"
                 + (" threads |" if thr else "") + " warnings |",
                 "|---|---|---|---|---:|" + ("---:|" if thr else "") + "---|"]
        lines += [f"| {r['model']} | {r['framework']}/{r['mode']} | {r['device']} | "
                  f"{r['precision']} | {r['batch_size']} |"
                  + (f" {r.get('threads') if r.get('threads') is not None else '–'} |"
                     if thr else "")
                  + f" {r['warnings'].replace('|', '/')} |"
                  for r in warned]
        sections.append(("Warnings (results to read with care)", "\n".join(lines) + "\n"))
    env = None
    try:
        env = json.loads(rows[-1]["result_json"]).get("env")
    except Exception:  # noqa: BLE001 - the report works without it
        pass
    if env is None and coll:  # only all-reduce runs: the environment they stored
        env = store_env
    return write_report(rows, output, title=title, env=env, sections=sections)


def _breakdown_sections(rows, samples_of=None) -> list[tuple[str, str]]:
    """Report sections of issue 4: breakdown, op classes, gaps, trace files (those present).
    ``samples_of``: result id -> measured samples, for the gaps' CIs."""
    from dlperf.report import breakdown as bdr

    out = []
    if (md := bdr.breakdown_markdown(rows)):
        out.append(("Where the time goes: iteration breakdown", md))
    if (md := bdr.op_class_markdown(rows)):
        out.append(("Device time per op class", md))
    if (md := bdr.gap_markdown(bdr.gap_attribution(rows, samples_of))):
        out.append(("Step-time gaps attributed to op classes", md))
    if (md := bdr.trace_files_markdown(rows)):
        out.append(("Trace files", md))
    return out


def _thread_sections(rows, store, output: Path) -> list[tuple[str, str]]:
    """The report's CPU thread-scaling section (table and one plot per model), when any
    configuration ran at two or more thread counts."""
    from dlperf.report import threads as thr

    groups = thr.thread_scaling(rows, _measured_or_none(store))
    if not groups:
        return []
    body = thr.threads_markdown(groups)
    for png in thr.plot_thread_scaling(groups, output):
        body += f"\n![step time and speed-up against CPU threads]({png.name})\n"
    return [("CPU thread scaling", body)]


def _parallel_sections(rows, store, output: Path, target_loss: float | None) -> list:
    """Report sections for data-parallel scaling and convergence (with their plots)."""
    from dlperf.report.convergence import (convergence_groups, convergence_markdown,
                                           plot_convergence)
    from dlperf.report.scaling import plot_scaling, scaling_markdown
    from dlperf.perfmodel.scaling import scaling_points

    sections = []
    if any((r.get("world_size") or 1) > 1 for r in rows):
        pts = scaling_points(rows, _measured(store))
        body = scaling_markdown(pts)
        png = plot_scaling(pts, output)
        if png is not None:
            body += f"\n![throughput and scaling efficiency against devices]({png.name})\n"
        body += ("\nEfficiency = speed-up / devices, from throughput (mean step times); the "
                 "medians column uses median step times with a bootstrap CI. Weak: per-device "
                 "batch fixed (E = T1/TN); strong: global batch fixed (E = T1/(N TN)). The step "
                 "time of a data-parallel run is the slowest rank's per iteration; imbalance = "
                 "max/median of the ranks' median step times; exposed communication: "
                 "all-reduce time not overlapped by computation, from a profiled trace of rank 0.\n")
        sections.append(("Data-parallel scaling", body))
    groups = convergence_groups(rows, store.samples, target_loss)
    if groups:
        body = convergence_markdown(groups)
        for png in plot_convergence(groups, output):
            body += f"\n![training loss against iterations and time]({png.name})\n"
        sections.append(("Convergence", body))
    return sections


@app.command()
def allreduce(
    nproc: Annotated[int, typer.Option(help="Processes (one per GPU; gloo processes on a CPU-only machine).", min=1)] = 2,
    min_bytes: Annotated[str, typer.Option(help="Smallest message, e.g. 8, 64K.")] = "8",
    max_bytes: Annotated[str, typer.Option(help="Largest message, e.g. 1M, 1G.")] = "1G",
    iters: Annotated[int, typer.Option(help="Timed all-reduces per size.", min=1)] = 20,
    warmup: Annotated[int, typer.Option(help="Untimed all-reduces per size.", min=0)] = 5,
    output: Annotated[Optional[Path], typer.Option("--json", help="Write rows and environment here.")] = None,
    db: Annotated[Optional[str], typer.Option(help="Also store the rows in this results file (see: dlperf results --compare allreduce).")] = None,
    from_json: Annotated[Optional[Path], typer.Option(help="Store the rows of an earlier --json file in --db instead of running.")] = None,
) -> None:
    """All-reduce bandwidth (algbw/busbw) over message sizes, in the manner of nccl-tests."""
    def body():
        import os
        import socket
        import subprocess
        import tempfile

        from dlperf.comm.allreduce import message_sizes, parse_size

        if db is not None:
            _check_db(db, must_exist=False)
        if from_json is not None:
            if db is None:
                raise ConfigError("--from-json stores an earlier run: give --db too")
            _store_collectives(from_json, db)
            return
        for flag, v in (("--min-bytes", min_bytes), ("--max-bytes", max_bytes)):
            try:
                parse_size(v)
            except ValueError as e:
                raise ConfigError(f"{flag}: {e}") from None
        try:  # checked here, not once per rank after the launch
            message_sizes(parse_size(min_bytes), parse_size(max_bytes))
        except ValueError as e:
            raise ConfigError(f"--min-bytes {min_bytes} --max-bytes {max_bytes}: {e}; give "
                              "1 <= --min-bytes <= --max-bytes") from None
        with socket.socket() as s:  # a free loopback port for the rendezvous
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
               "--master-addr", "127.0.0.1", "--master-port", str(port), "-m",
               "dlperf.comm.allreduce", "--min-bytes", min_bytes, "--max-bytes", max_bytes,
               "--iters", str(iters), "--warmup", str(warmup)]
        tmp = None
        json_out = output
        if json_out is None and db is not None:  # the rows travel through a temporary file
            tmp = tempfile.NamedTemporaryFile(suffix=".json", delete=False)
            tmp.close()
            json_out = Path(tmp.name)
        if json_out:
            cmd += ["--json", str(json_out)]
        env = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
               "NVSHMEM_DISABLE_NVLS": "1", **os.environ}
        try:
            rc = subprocess.run(cmd, env=env).returncode
            if rc == 0 and db is not None:
                _store_collectives(json_out, db)
        finally:
            if tmp is not None:
                Path(tmp.name).unlink(missing_ok=True)
        raise typer.Exit(rc)

    _guard(body)


def _store_collectives(path: Path, db: str) -> None:
    """Store the all-reduce JSON at ``path`` in ``db``; ConfigError if it is no such file."""
    from datetime import datetime, timezone

    from dlperf.results.store import ResultStore

    try:
        report = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{str(path)!r} is not a readable all-reduce JSON file ({e})") from None
    if not isinstance(report, dict):
        raise ConfigError(f"{str(path)!r} is not an all-reduce report (a JSON object)")
    created = datetime.fromtimestamp(Path(path).stat().st_mtime, timezone.utc).isoformat(
        timespec="seconds")
    with ResultStore(db) as store:
        before = {r["run_id"] for r in store.collectives()}
        try:
            run_id = store.add_collectives(report, created)
        except ConfigError as e:
            raise ConfigError(f"{str(path)!r}: {e}") from None
    if run_id in before:
        err.print(f"run {run_id} is in {db} already: nothing stored twice", highlight=False)
    else:
        err.print(f"stored {len(report['rows'])} all-reduce sizes (run {run_id}) in {db}",
                  highlight=False)


@app.command()
def merge(
    sources: Annotated[list[str], typer.Argument(metavar="FILE...", help="Results files to add (e.g. the copies that two machines or two device calls wrote); read, not changed.")],
    db: Annotated[str, typer.Option(help="Results file that receives them (created if missing; its own rows are kept). Required.")],
) -> None:
    """Combine results files into --db: every result with its raw samples once, in order of measurement, so tables keep showing each point's newest run. --db is rewritten in one SQLite transaction (an error or a kill leaves it as it was; a sweep writing into it waits, then goes on); resume a sweep from the merged file."""
    def body():
        from dlperf.results.merge import merge_stores

        _check_db(db, must_exist=False)
        for s in sources:
            if Path(s).is_dir():
                raise ConfigError(f"source {s!r} is a folder; give a results file")
            if not Path(s).exists():
                raise ConfigError(f"results file {s!r} to merge does not exist; give an "
                                  "existing file")
            _check_db(s, must_exist=True)
        summary = merge_stores(db, sources)
        for src, n in summary["added"].items():
            err.print(f"{src}: {n['results']} new result(s), {n['collectives']} new collective "
                      f"run(s), {n['sweeps']} new sweep record(s)", highlight=False)
        err.print(f"{db} now holds {summary['results']} results ({summary['samples']} raw "
                  f"samples), {summary['collectives']} collective runs and "
                  f"{summary['sweeps']} sweep records", highlight=False)

    _guard(body)


@app.command()
def predict(
    db: Annotated[str, typer.Option(help="Results file whose stored series calibrate the model.")] = DEFAULT_DB,
    model: Annotated[Optional[str], typer.Option(help="Model of the series to predict.")] = None,
    framework: Annotated[Optional[str], typer.Option(help="Framework of the series (if several are stored).")] = None,
    mode: Annotated[Optional[str], typer.Option(help="Mode of the series (if several are stored).")] = None,
    precision: Annotated[Optional[str], typer.Option(help="Precision of the series (if several are stored).")] = None,
    device: Annotated[Optional[str], typer.Option(help="Device of the series (if several are stored).")] = None,
    batch_size: Annotated[Optional[int], typer.Option("--batch-size", "-b", help="Global mini-batch to predict.")] = None,
    validate: Annotated[bool, typer.Option("--validate", help="Back-test on every stored series with 4+ batch sizes (held-out batch, largest batch) and print MdAPE and max per category.")] = False,
    format: Annotated[str, typer.Option(help="text or json.")] = "text",
) -> None:
    """Predict the iteration time at a batch size that was not measured, from a stored series (one device; a first part of the performance model, docs/perfmodel.md)."""
    def body():
        from dlperf.perfmodel.predict import predict as predict_point, validation_table
        from dlperf.results.store import ResultStore

        if format not in ("text", "json"):
            raise ConfigError(f"--format {format!r}: give text or json")
        _check_db(db, must_exist=True)
        with ResultStore(db, read_only=True) as store:
            rows = store.rows()
        if validate:
            _print_markdown(validation_table(rows))
            return
        if model is None or batch_size is None:
            raise ConfigError("give --model and --batch-size (or --validate)")
        p = predict_point(rows, batch_size=batch_size, model=model, framework=framework,
                          mode=mode, precision=precision, device=device)
        if format == "json":
            sys.stdout.write(json.dumps(p, indent=1) + "\n")
            return
        lo, hi = p["interval_s"]
        meas = (f"; measured {p['measured_step_time_s'] * 1e3:.3f} ms (not used in the fit)"
                if p["measured_step_time_s"] else "")
        out.print(f"{p['series']} b={batch_size}: {p['predicted_step_time_s'] * 1e3:.3f} ms per "
                  f"iteration ({lo * 1e3:.3f}-{hi * 1e3:.3f} ms, {p['interval_level']:.0%} "
                  f"interval), {p['samples_per_s']:.1f} samples/s, {p['bound']}-bound (host "
                  f"{p['parts']['host_s'] * 1e3:.3f} ms, device {p['parts']['device_s'] * 1e3:.3f} ms)"
                  f"{meas}; calibrated on batch sizes "
                  + ", ".join(str(c['batch_size']) for c in p['calibrated_on']), highlight=False)

    _guard(body)


data_app = typer.Typer(no_args_is_help=True, help="Data helpers (a synthetic ImageFolder of JPEGs).")
app.add_typer(data_app, name="data")


@data_app.command("make-imagefolder")
def make_imagefolder_cmd(
    folder: Annotated[Path, typer.Argument(help="Folder to write (one sub-folder per class).")],
    images: Annotated[int, typer.Option(help="Number of JPEG images.")] = 1000,
    classes: Annotated[int, typer.Option(help="Number of classes (sub-folders).")] = 10,
    size: Annotated[int, typer.Option(help="Image side in pixels (square images).")] = 256,
    quality: Annotated[int, typer.Option(help="JPEG quality (Pillow, 1..95).")] = 90,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
) -> None:
    """Write a synthetic ImageFolder of JPEGs (for `--data imagefolder:FOLDER`; no ImageNet needed)."""
    def body():
        from dlperf.data.imagefolder import make_imagefolder

        if folder.exists() and not folder.is_dir():
            raise ConfigError(f"{str(folder)!r} is a file; give a folder for the ImageFolder")
        info = make_imagefolder(folder, images=images, classes=classes, size=size,
                                quality=quality, seed=seed)
        out.print(f"wrote {info['images']} JPEGs ({info['bytes'] / 2**20:.1f} MiB) of "
                  f"{size}x{size} in {classes} classes to {folder}; use --data "
                  f"imagefolder:{folder}", highlight=False)

    _guard(body)


@app.command()
def env(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
        framework: Annotated[bool, typer.Option(help="Also import the frameworks for their versions.")] = True) -> None:
    """Print the environment fingerprint recorded with every result."""
    def body():
        from dlperf.env import collect_env
        from dlperf.frameworks import ADAPTERS, get_adapter

        e = collect_env()
        if framework:
            e["frameworks"] = {n: get_adapter(n).available()[1] for n in ADAPTERS}
        if as_json:
            sys.stdout.write(json.dumps(e, indent=1, default=str) + "\n")
        else:
            from rich.pretty import pprint

            pprint(e, console=out, expand_all=True)

    _guard(body)


def main() -> None:  # pragma: no cover
    """Entry point for ``python -m dlperf``."""
    app()
