"""``dlperf sweep FILE.yaml``: run a grid from a sweep file (:mod:`dlperf.config.sweep`),
resumable, optionally one shard of it; ``--dry-run`` lists the points."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, cast

import typer
from rich.markup import escape

from dlperf.cli import common
from dlperf.cli.common import check_db, check_endpoint, check_out_dir, guard
from dlperf.errors import ConfigError
from dlperf.outputs import shown_path

#: ``dlperf sweep --help`` (one string per paragraph: the help keeps line breaks as written).
HELP = (
    "Run a grid from a YAML file; resumable: finished points are skipped.\n\n"
    "Bad values, corrupt data files and data that do not fit a model refuse the whole sweep "
    "before anything runs (exit status 2). A real data set that is missing (not downloaded or "
    "made, no DLPERF_DATA) does not: one warning names it, its points are stored as "
    "'unavailable' with the message, the other points run, and running the sweep again once "
    "the data are there measures just those points.\n\n"
    "Exit status: 0; 1 if any point is unavailable (missing data or framework), every point "
    "that ran failed, or another process still held points when the wait for them ended; 2 "
    "for a user error; 130 when interrupted (143: SIGTERM).")


def parse_shard(text: str) -> tuple[int, int]:
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


def shard_points(points: list[Any], k: int, n: int) -> list[Any]:
    """Shard ``k`` of ``n`` of ``points``: every ``n``-th point from the ``k``-th, by point (a
    point's repeats stay on one shard: one GPU, one array task)."""
    order = list(dict.fromkeys(p.point_key() for p in points))
    mine = set(order[k::n])
    return [p for p in points if p.point_key() in mine]


def _write_array(path: Path, file: Path, points: list[Any], shards: int | None, db: str,
                 options: list[str], force: bool = False) -> None:
    """Write the job-array script of ``--slurm-array`` (:func:`dlperf.launch.slurm.
    array_script`): ``shards`` tasks (default: one per point); never over the results file
    ``db``, the sweep file, a database or a file that is not a script dlperf wrote (without
    ``force``: :func:`dlperf.cli.common.write_file`).

    Raises:
        ConfigError: multi-node points (an array task is one node), or more shards than points.
    """
    from dlperf.launch.slurm import array_script, shard_db_path

    n_points = len({p.point_key() for p in points})
    multi = [p for p in points if p.parallel.nnodes > 1]
    if multi:
        raise ConfigError(f"--slurm-array: {len(multi)} point(s) have nnodes > 1, and an array "
                          "task runs on one node; run those with `dlperf run --emit-slurm`")
    n = n_points if shards is None else shards
    if not 1 <= n <= n_points:
        raise ConfigError(f"--shards {n}: give 1 to {n_points} (the sweep has {n_points} "
                          "points; each array task runs at least one)")
    gpus = max((p.world_size for p in points if p.hardware.device == "cuda"), default=0)
    common.write_file(path, array_script(file, n, db=db, gpus_per_task=gpus, options=options),
                      "slurm", "--slurm-array", force=force, protect=(db, file))
    first = shard_db_path(db, "0")
    common.out.print(f"wrote {shown_path(path)}: {n} array task(s) for {n_points} point(s); "
                     f"submit with `sbatch {shown_path(path)}`, then combine the tasks' results "
                     f"files ({shown_path(first)}, ...) with `dlperf merge ... --db "
                     f"{shown_path(db)}` (the script's first lines say how)",
                     markup=False, highlight=False)


def _dry_threads(points: list[Any], path: str, done: set[str], rechoose: bool = False
                 ) -> tuple[list[Any], str]:
    """The points as a sweep would run them (:func:`dlperf.resume.resolve_threads`: CPU points
    without threads get the thread policy's choice, the results file's or measured on this host
    now: :func:`dlperf.cli.common.choose_threads_once`; a point stored under the policy keeps
    its count), and a line saying what the policy chose and why."""
    from dlperf.results.store import ResultStore
    from dlperf.resume import auto_threads, resolve_threads

    auto = [p for p in points if auto_threads(p)]
    if not auto:
        return points, ("threads: as each point gives them (the thread policy sets the threads "
                        "of CPU points without threads only)")
    choice = common.choose_threads_once(auto, path, rechoose, echo=False)
    how = "this results file's" if choice.chosen_at else "measured now"
    line = (f"thread policy for the {len(auto)} CPU point(s) without threads, {how}: "
            f"{choice.line()}")
    if not done:  # nothing stored: no earlier choice to keep, the store is never read
        return resolve_threads(points, choice, cast(Any, None), done)[0], line
    with ResultStore(path, read_only=True) as store:
        return resolve_threads(points, choice, store, done)[0], line


def _dry_code_changes(points: list[Any], path: str, done: set[str]) -> set[str]:
    """Run keys of ``points`` stored in ``path`` whose model's code changed since
    (:func:`dlperf.resume.code_changes`): the sweep measures them again."""
    if not done:
        return set()
    from dlperf.results.store import ResultStore
    from dlperf.resume import code_changes

    with ResultStore(path, read_only=True) as store:
        return {p.run_key() for p in code_changes(points, store, done)}


def _tagged_done(points: list[Any], path: str, tag: str, retry_failed: bool
                 ) -> tuple[set[str], set[str]]:
    """(run keys done under ``tag``, run keys stored ok under it) of ``points``
    (:func:`dlperf.resume.resume_plan`)."""
    from dlperf.resume import resume_plan

    keys = {p.run_key() for p in points}
    todo = resume_plan(points, path, tag, rerun=False, retry_failed=retry_failed)[0]
    todo_ok = resume_plan(points, path, tag, rerun=False, retry_failed=True)[0]
    return keys - {p.run_key() for p in todo}, keys - {p.run_key() for p in todo_ok}


def _dry_run(points: list[Any], path: str, restart: bool, retry_failed: bool,
             tag: str | None, rechoose: bool = False, host_notes: Sequence[str] = ()) -> None:
    """What would run: each point (threads as the thread policy would set them, marked so)
    pending, stored or failed in ``path`` (read, not changed; with a tag, only results stored
    under it count), the counts, then the thread policy and the tag; last, on stderr, each of
    ``host_notes`` (:func:`_dry_checks`: where the sweep would stop on this host), with the
    counts line saying the sweep would not start here."""
    from dlperf.results.history import check_tag
    from dlperf.results.store import check_writer, stored_keys
    from dlperf.resume import auto_threads

    check_db(path, must_exist=False)
    check_writer(path)  # what the sweep itself would refuse (read-only, damaged, ...)
    check_tag(tag)
    done = set() if restart else stored_keys(path, include_failed=not retry_failed)
    ok_keys = set() if restart else stored_keys(path, include_failed=False)
    by_policy = [auto_threads(p) for p in points]
    given = points
    points, threads_line = _dry_threads(points, path, done, rechoose)
    changed = _dry_code_changes(points, path, done) if not restart else set()
    if tag is not None and not restart:
        # as the run decides: on the points as given (a point of the thread policy is stored
        # under the tag at whatever count it chose then)
        gd, gok = _tagged_done(given, path, tag, retry_failed)
        done = {q.run_key() for p, q in zip(given, points, strict=True) if p.run_key() in gd}
        ok_keys = {q.run_key() for p, q in zip(given, points, strict=True)
                   if p.run_key() in gok}
        changed = set()
    done -= changed
    for p, policy in zip(points, by_policy):
        k = p.run_key()
        mark = ("changed" if k in changed else "pending" if k not in done else
                "stored " if k in ok_keys else "failed ")
        auto = " (threads: policy)" if policy else ""
        common.out.print(f"{mark}  {k}  {escape(p.label())}{auto}", highlight=False)
    n_points = len({p.point_key() for p in points})
    plural = "s" if n_points != 1 else ""
    n_done = sum(p.run_key() in done for p in points)
    n_failed = sum(p.run_key() in done and p.run_key() not in ok_keys for p in points)
    where = path + (f" under tag {tag!r}" if tag is not None else "")
    tag_line = ("tag: none (--tag NAME labels the results, for dlperf results --tag and dlperf "
                "compare)" if tag is None else
                f"tag: {tag!r}: the results are labelled with it; a point counts as stored "
                "only under this tag (stored under another tag or none, it is measured again)")
    pending = [p for p in points if p.run_key() not in done]
    rows: list[Any] = []
    if Path(path).is_file() and Path(path).stat().st_size:
        from dlperf.results.store import ResultStore

        with ResultStore(path, read_only=True) as store:
            rows = store.rows(latest=False)
    from dlperf.guards import clock_text, duration_estimate

    secs, how = duration_estimate(pending, rows)
    time_line = (f"estimated time: about {clock_text(secs)} for the {len(pending)} pending "
                 f"run(s) ({how})" if pending else "estimated time: nothing pending")
    for line in ((f"{len(points)} points" if n_points == len(points) else
                  f"{len(points)} runs of {n_points} point{plural} (repeats)")
                 + f": {len(points) - n_done} pending, {n_done} stored in {where}"
                 + (f" ({n_failed} of them failed: timeout, crash, OOM, ...; add "
                    "--retry-failed to run them again)" if n_failed else "")
                 + ("; the sweep would not start on this host (the note below)"
                    if host_notes else ""),
                 time_line, threads_line, tag_line):
        common.out.print(line, markup=False, highlight=False)
    for note in host_notes:
        common.err.print(f"note: on this host the sweep would stop before its first point "
                         f"(exit 2): {note}", markup=False, highlight=False)


def _check_runnable(points: list[Any], file: Path, rdzv_endpoint: str | None,
                    shards: int) -> None:
    """Multi-node points need an endpoint; CPU shards side by side are slow (a note); CUDA
    points need a GPU here (refused once, not once per point)."""
    from dlperf.config import resolve_device

    multi = [p for p in points if p.parallel.nnodes > 1]
    if multi and not rdzv_endpoint:
        raise ConfigError(f"{len(multi)} point(s) have nnodes > 1: give --rdzv-endpoint "
                          "HOST:PORT (node 0's address) and --node-rank on every node")
    if rdzv_endpoint is not None:
        check_endpoint(rdzv_endpoint)
    if shards > 1 and any(p.hardware.device == "cpu" for p in points):
        common.err.print("note: shards that run at the same time on one machine share its CPU "
                         "cores: CPU timings slow down (several-fold for small steps, with no "
                         "warning in the results); run CPU shards one after another, or give "
                         "each its own cores (taskset -c) and threads", markup=False)
    on_gpu = [p for p in points if p.hardware.device == "cuda"]
    if on_gpu:  # as `dlperf run --device cuda`: refused here, not once per point
        try:
            resolve_device("cuda")
        except ConfigError:
            raise ConfigError(
                f"{shown_path(file)}: {len(on_gpu)} of {len(points)} point(s) ask for device "
                "cuda, but no "
                "CUDA GPU is usable here; run the sweep on a GPU machine, or set "
                "device: cpu (or auto) in the file") from None


def _dry_checks(points: list[Any], file: Path, rdzv_endpoint: str | None,
                shards: int) -> list[str]:
    """What the sweep checks before it runs, for ``--dry-run``: the data sets (read and cut
    into a batch, :func:`dlperf.sweep.preflight`) and the frameworks' interpreters are
    refused as the sweep refuses them; what depends on this host (a CUDA GPU, its CPUs for
    ``cpu_bind``, the processes it may start, the node options) is returned, each the sweep's
    own message, for the dry run to print after its listing as a note, since a dry run is
    often made on another machine than the sweep (a login node).

    Returns:
        The messages of the checks the sweep would stop at on this host (empty: none).

    Raises:
        ConfigError, DataError: what the sweep would refuse on any host.
    """
    from dlperf.config.limits import check_points_here
    from dlperf.placement import check_here
    from dlperf.sweep import preflight

    preflight(points, allow_missing=True)
    notes = []
    for check in (lambda: _check_runnable(points, file, rdzv_endpoint, shards),
                  lambda: check_points_here(points), lambda: check_here(_binds(points))):
        try:
            check()
        except ConfigError as e:
            notes.append(str(e))
    return notes


def with_cpu_bind(points: list[Any], cpu_bind: str | None) -> list[Any]:
    """``points`` with ``cpu_bind`` set in each (``--cpu-bind``); unchanged for None.

    Raises:
        ConfigError: ``cpu_bind`` is not a setting (:func:`dlperf.placement.check_cpu_bind`).
    """
    from dlperf.placement import check_cpu_bind

    if cpu_bind is None:
        return points
    try:
        value = check_cpu_bind(cpu_bind)
    except ValueError as e:
        raise ConfigError(f"--cpu-bind: {e}") from None
    return [p.with_(cpu_bind=value) for p in points]


def sweep(
    file: Annotated[Path, typer.Argument(help="Sweep YAML file (name, defaults, grid).")],
    db: Annotated[str | None, typer.Option(help="Results file (default: the YAML file's path with .db instead of .yaml).")] = None,
    restart: Annotated[bool, typer.Option("--restart", "--rerun", help="Ignore results already in the db and run every point (`dlperf run` calls it --rerun; both names work here).")] = False,
    retry_failed: Annotated[bool, typer.Option("--retry-failed", help="Run again points that failed before.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List the points (threads as the thread policy would set them on this host now, stored or pending under --tag) and exit.")] = False,
    report: Annotated[str | None, typer.Option(help="Also write a report to this folder.")] = None,
    node_rank: Annotated[int, typer.Option(help="Multi-node points: this node's index (node k > 0 stores in DB.node<k>.db).", min=0)] = 0,
    rdzv_endpoint: Annotated[str | None, typer.Option(help="Multi-node points: HOST:PORT of node 0 (same on every node).")] = None,
    shard: Annotated[str | None, typer.Option(help="K/N: run only every N-th point from the K-th (0-based; a point's repeats stay on its shard), e.g. 0/2 and 1/2 on two GPUs at once; shards may share one --db.")] = None,
    tag: Annotated[str | None, typer.Option(help="Label the results with this tag (e.g. a branch or version), for `dlperf results --tag` and `dlperf compare --db FILE BASE_TAG NEW_TAG`; points stored under another tag are measured again.")] = None,
    slurm_array: Annotated[Path | None, typer.Option(help="Write a SLURM sbatch script that runs the sweep as a job array (one task per --shard K/N, each into DB.shard<K>.db; combine them with `dlperf merge`), and exit.")] = None,
    shards: Annotated[int | None, typer.Option(help="--slurm-array: array tasks N (default: one per point).", min=1)] = None,
    nccl_nvls: Annotated[str, typer.Option(help=common.NVLS_HELP)] = "default",
    memory_check: Annotated[bool, typer.Option("--memory-check/--no-memory-check", help="Refuse, before anything runs, points whose estimated memory exceeds the device's or the host's (dlperf.guards), naming the largest batch that fits.")] = True,
    rechoose_threads: Annotated[bool, typer.Option("--rechoose-threads", help="Measure the host's load again for the thread policy instead of keeping the choice this results file's CPU points were measured with (warned where it differs).")] = False,
    cpu_bind: Annotated[str | None, typer.Option(help="Bind every point's worker (each data-parallel rank to its own CPUs) as the file's cpu_bind field would: none, cores, numa or a CPU list such as 0-3; overrides the file.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace files in the way of --slurm-array or --report that dlperf did not write for them (never a database).")] = False,
) -> None:
    """Run a grid from a YAML file; resumable: finished points are skipped (help: HELP)."""
    def body() -> None:
        from dlperf.config import load_sweep
        from dlperf.launch.slurm import node_db_path

        check_out_dir(report, "--report", force=force)
        from dlperf.launch.distributed import set_nccl_nvls

        set_nccl_nvls(nccl_nvls)
        k_n = parse_shard(shard) if shard is not None else None
        cfg = load_sweep(file)
        points = with_cpu_bind(cfg.expand(), cpu_bind)
        if slurm_array is not None:
            if shard is not None:
                raise ConfigError("--slurm-array writes one task per shard; leave out --shard")
            opts = [*(["--tag", tag] if tag else []), *(["--retry-failed"] if retry_failed
                                                         else []),
                    *(["--restart"] if restart else []),
                    *(["--nccl-nvls", nccl_nvls] if nccl_nvls != "default" else [])]
            _write_array(slurm_array, file, points, shards,
                         db or str(Path(file).with_suffix(".db")), opts, force)
            return
        if shards is not None:
            raise ConfigError("--shards is the number of array tasks of --slurm-array; for one "
                              "shard of the sweep here give --shard K/N")
        if k_n is not None:  # by point: the repeats of a point stay on one shard (one GPU)
            points = shard_points(points, *k_n)
        path = node_db_path(db or str(Path(file).with_suffix(".db")), node_rank)
        check_out_dir(report, "--report", path, force=force)
        if dry_run:  # the checks the sweep makes before it runs, those of this host as notes
            notes = _dry_checks(points, file, rdzv_endpoint, k_n[1] if k_n is not None else 1)
            _dry_run(points, path, restart, retry_failed, tag, rechoose_threads, notes)
            return
        _check_runnable(points, file, rdzv_endpoint, k_n[1] if k_n is not None else 1)
        from dlperf.config.limits import check_points_here
        from dlperf.placement import check_here

        check_points_here(points)  # the processes they start, before any starts
        check_here(_binds(points))
        from dlperf.launch.distributed import run_point
        from dlperf.results.history import check_tag, tagging
        from dlperf.resume import resume_plan

        check_db(path, must_exist=False, write=True)
        points, resume, n_tagged = resume_plan(
            points, path, check_tag(tag), rerun=restart, retry_failed=retry_failed,
            notice=lambda line: common.err.print(line, markup=False, highlight=False))
        if n_tagged:
            common.err.print(f"resuming: {n_tagged} point(s) already stored with tag {tag!r} "
                             f"in {shown_path(path)}", markup=False, highlight=False)
        common.execute(points, path, sweep=cfg.name, resume=resume,
                       rechoose_threads=rechoose_threads, memory_check=memory_check,
                       retry_failed=retry_failed, report_dir=report,
                       sweep_config=cfg.model_dump(), missing_ok=True, already=n_tagged,
                       runner=tagging(lambda c: run_point(c, node_rank=node_rank,
                                                          endpoint=rdzv_endpoint), tag))

    guard(lambda: common.spec_bounded(body, _spec_limit(file)))


def _binds(points: list[Any]) -> list[tuple[str, int]]:
    """``(cpu_bind, nproc)`` of each point, for :func:`dlperf.placement.check_here`."""
    return [(p.hardware.cpu_bind, p.parallel.nproc) for p in points]


def _spec_limit(file: Path) -> float:
    """The time limit on making a ``file:`` model's spec in a sweep: the file's
    ``defaults.timeout_s`` where it is a positive number, else the run default (a file
    that cannot be read gets the default here and its error from :func:`load_sweep`)."""
    from dlperf.config.defaults import RUN
    from dlperf.yamlsafe import load_yaml_file

    default = float(RUN.timeout_s)
    try:
        doc = load_yaml_file(file)
    except Exception:  # noqa: BLE001 - load_sweep reports it
        return default
    defaults = doc.get("defaults") if isinstance(doc, dict) else None
    t = defaults.get("timeout_s") if isinstance(defaults, dict) else None
    if isinstance(t, (int, float)) and not isinstance(t, bool) and t > 0:
        return float(t)
    return default
