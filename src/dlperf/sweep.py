"""Executing a list of configurations: isolation, resume, progress, failures as results.

Used by ``dlperf run`` and ``dlperf sweep``. Each point runs in its own worker process
(:mod:`dlperf.launch.process`) and its result is stored in one transaction as soon as it is
known, so a sweep stopped at any moment (even by ``kill -9``) resumes without redoing finished
points and without losing any: points whose run key is already in the store are skipped.
Repeated runs of a point (``--repeats N``) have run keys of their own (:meth:`RunConfig.run_key`
includes ``repeat`` when non-zero), so each repeat is resumed on its own.

Missing data (``dlperf sweep``): a real data set that is not there (not downloaded, not made,
no data root; :class:`~dlperf.errors.DataMissing`) does not stop the sweep. :func:`preflight`
reports it, and :func:`execute` prints one warning, stores each of its points as an
``unavailable`` result with the message (no worker is started) and runs the others; since
``unavailable`` is not final (:meth:`ResultStore.done_keys`), running the sweep again once the
data are there measures exactly those points. Corrupt data, data that do not fit a model and
bad configurations still refuse the whole sweep before anything runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from dlperf.config import RunConfig
from dlperf.results.parts import Env
from dlperf.results.schema import RunRecord, failure_record
from dlperf.results.store import ResultStore
from dlperf.results.unsaved import store_or_keep
from dlperf.results.view import label_of_record

if TYPE_CHECKING:
    from dlperf.env import ThreadChoice


@dataclass
class SweepOutcome:
    """What :func:`execute` did: counts and the new results, in order.

    ``ran``: points given to the runner (a worker); ``failed``: of those, results not ``ok``;
    ``skipped``: points already in the store; ``missing_data``: points stored ``unavailable``
    without running because their data set is missing; ``elsewhere``: points another process
    measured meanwhile; ``results``: every record stored.
    """

    ran: int = 0
    skipped: int = 0
    failed: int = 0
    missing_data: int = 0
    #: Points of this call that another process writing to the same file measured meanwhile
    #: (:mod:`dlperf.results.claims`): not run here.
    elsewhere: int = 0
    #: Points still claimed by another process when the wait for them ended
    #: (:func:`dlperf.results.claims.run_claimed`): not measured, not stored by this call.
    left: int = 0
    results: list[RunRecord] = field(default_factory=list)
    #: The points as run or found stored: threads chosen by the policy filled in
    #: (:func:`dlperf.resume.resolve_threads`); their run keys select this call's rows.
    points: list[RunConfig] = field(default_factory=list)

    @property
    def unavailable(self) -> int:
        """Results of this call with status ``unavailable`` (missing data, recorded without a
        worker, or a framework that is not installed): points still to measure."""
        return sum(r.identity.status == "unavailable" for r in self.results)


#: Identity of a point's data: (``data``, ``data_dir``), as :func:`preflight` loads them.
DataKey = tuple[str, str | None]


def data_key(p: RunConfig) -> DataKey:
    """The (``data``, ``data_dir``) pair of a point, the key of :func:`preflight`'s result."""
    return (p.input.data, p.input.data_dir)


def result_line(rec: RunRecord) -> str:
    """One-line human summary of a record (rich markup): its label
    (:func:`~dlperf.results.view.label_of_record`), then the median step with its CI, the
    throughput and what else was measured; a failure's status and the first line of its error.

    Everything taken from the record (model, error text, warnings) is escaped, so brackets in
    it (an install hint's ``'.[jax]'``, ``[input-bound]``) are printed, not read as markup.
    """
    i = rec.identity
    label = escape(label_of_record(rec))
    if i.status != "ok":
        err = i.error.splitlines()[0][:120] if i.error else ""
        return f"[red]{i.status:>8}[/] {label}  {escape(err)}"
    s, tp = rec.summary, rec.throughput
    assert s is not None and tp is not None  # an ok record has both
    extra = f", {tp.tokens_per_s:,.0f} tokens/s" if tp.tokens_per_s else ""
    mfu = rec.mfu.mfu if rec.mfu is not None else None
    extra += f", MFU {mfu:.1%}" if mfu is not None else ""
    dw = rec.data_wait
    if dw is not None and dw.share is not None:
        extra += f", data wait {dw.share:.1%}" + (" \\[input-bound]" if dw.input_bound else "")
    e = rec.power.energy_per_iter_j if rec.power is not None else None
    extra += f", {e:.4g} J/iter" if e is not None else ""
    warn = "".join(f"\n         [yellow]warning: {escape(str(w))}[/]" for w in rec.warnings or [])
    d = rec.dist
    if d is not None:
        extra += f", imbalance {d.imbalance:.3f}" if d.imbalance else ""
        exposed = (d.comm or {}).get("exposed")
        if exposed is not None:
            extra += f", exposed comm {exposed * 1e3:.3f} ms/iter"
    conv = rec.convergence
    if conv is not None and conv.target_loss is not None:
        extra += (f", target loss {conv.target_loss:g} reached after "
                  f"{conv.iterations_to_target} iterations, {conv.time_to_target_s:.3f} s"
                  if conv.reached else f", target loss {conv.target_loss:g} not reached")
    ci = ("\\[no CI: too few iterations]" if s.ci_low is None or s.ci_high is None
          else f"[{s.ci_low * 1e3:.3f}, {s.ci_high * 1e3:.3f}]")
    med = "no median" if s.median is None else f"{s.median * 1e3:.3f} ms/iter"
    return (f"[green]{'ok':>8}[/] {label}  {med} {ci}, "
            f"{tp.samples_per_s:,.1f} samples/s{extra}{warn}")


def preflight(points: list[RunConfig], *, allow_missing: bool = False) -> dict[DataKey, str]:
    """Check what can be checked before anything runs, so a user error costs no measurement.

    Each real data set is resolved, read and cut into one batch for each model that uses it
    (corrupt files and data that do not fit the model are refused here). A framework that runs
    in an interpreter of its own (MXNet) has that interpreter tried once. Points with
    ``loader_impl: processes`` and workers (JAX's Grain processes) need Grain to be installed.

    Args:
        points: the configurations about to run.
        allow_missing: return data sets that are not there instead of raising (``dlperf
            sweep``: their points are recorded as ``unavailable`` and the others run). Every
            data set that is there is still checked in full.

    Returns:
        The missing data sets: :func:`data_key` -> the :class:`DataMissing` message (what was
        looked for and how to get it); always empty without ``allow_missing``.

    Raises:
        ConfigError: a model has no implementation in the point's framework, a framework
            interpreter (e.g. ``DLPERF_MXNET_PYTHON``) is missing or broken, or Grain is
            missing for ``loader_impl: processes``.
        DataMissing: a data set is not there (only without ``allow_missing``).
        DataError: a corrupt or truncated file, or data that do not fit a model, naming the
            data set, the file or the model and how to fix it.
    """
    import importlib.util

    from dlperf.data import load_dataset, make_batches
    from dlperf.errors import ConfigError, DataMissing
    from dlperf.registry import FRAMEWORKS
    from dlperf.zoo import get_spec, impl_module

    def has_impl(family: str, framework: str) -> bool:
        return importlib.util.find_spec(impl_module(family, framework)) is not None

    from dlperf.launch.process import check_framework_python

    for framework in sorted({p.runtime.framework for p in points}):
        check_framework_python(framework)  # a framework with an interpreter of its own
    # loader_impl 'processes' is valid only for a framework that offers it (registry
    # loader_impls); with workers, its workers are Grain processes.
    grain_points = [p for p in points if p.input.loader_impl == "processes" and p.input.loader_workers]
    if grain_points:
        from dlperf.data.grain_pipeline import grain_installed
        from dlperf.install import install_hint

        if not grain_installed():
            p = grain_points[0]
            title = FRAMEWORKS[p.runtime.framework].title or p.runtime.framework
            raise ConfigError(f"--loader-impl processes ({p.label()}) runs {title}'s "
                              "loader workers as Grain processes, and grain is not installed; "
                              f"{install_hint(*FRAMEWORKS[p.runtime.framework].extras[:1])} (it "
                              "brings grain), or use --loader-impl auto or threads")
    for model, framework in {(p.workload.model, p.runtime.framework) for p in points}:
        family = get_spec(model).family
        info = FRAMEWORKS.get(framework)
        if info is not None and info.zoo_impls and not has_impl(family, framework):
            have = [fw for fw, i in FRAMEWORKS.items() if i.zoo_impls and has_impl(family, fw)]
            raise ConfigError(f"{model} has no {framework} implementation yet "
                              f"(family {family}); available in: {', '.join(have)}")
    loaded: dict[DataKey, Any] = {}
    missing: dict[DataKey, str] = {}
    checked: set[tuple[str, str | None, str, int]] = set()
    for p in points:
        key = data_key(p)
        if p.input.data == "synthetic" or key in missing:
            continue
        if key not in loaded:
            try:
                loaded[key] = load_dataset(p.input.data, p.input.data_dir)
            except DataMissing as e:
                if not allow_missing:
                    raise
                missing[key] = str(e)
                continue
        ck = (p.input.data, p.input.data_dir, p.workload.model, p.global_batch)
        if ck not in checked:
            make_batches(loaded[key], get_spec(p.workload.model), p.global_batch, max_batches=1)
            checked.add(ck)
    return missing


def missing_data_result(cfg: RunConfig, message: str, env: dict[str, Any] | None = None
                        ) -> RunRecord:
    """The record of a point whose data set is missing, made without starting a worker: a
    :func:`~dlperf.results.schema.failure_record` with status ``unavailable``.

    Args:
        cfg: the point.
        message: the :class:`~dlperf.errors.DataMissing` message (what is missing, how to fix):
            the record's ``error``.
        env: the environment fingerprint (:func:`dlperf.env.collect_env`) to store with it.
    """
    return failure_record(cfg, "unavailable", message,
                          **({"env": env} if env is not None else {}))


def missing_data_warning(missing: Mapping[DataKey, str], points: list[RunConfig],
                         n_todo: int) -> str | None:
    """The one warning (plain text) a sweep prints before it runs when data sets are missing.

    Args:
        missing: :func:`preflight`'s result.
        points: the points of ``missing``'s data sets that are about to be recorded
            ``unavailable``.
        n_todo: the number of points this call was going to run.

    Returns:
        For each missing data set used by ``points``: its name, how many points it affects and
        its message (which says what was looked for and how to get it); then what happens to
        them. ``None`` when ``points`` is empty.
    """
    if not points:
        return None
    counts: dict[DataKey, int] = {}
    for p in points:
        counts[data_key(p)] = counts.get(data_key(p), 0) + 1
    lines = [f"warning: {len(points)} of {n_todo} points to run need data that are not here; "
             f"they are stored as 'unavailable' without running, the other points run:"]
    for key, n in counts.items():
        where = f" (data_dir {key[1]})" if key[1] else ""
        lines.append(f"  - data {key[0]!r}{where}: {n} point{'s' if n != 1 else ''}: "
                     f"{missing[key]}")
    lines.append("  Provide the data (set DLPERF_DATA or data_dir to the folder that holds "
                 "them) and run the same command again: it measures just these points.")
    return "\n".join(lines)


def _clock(seconds: float) -> str:
    """``m:ss`` (``h:mm:ss`` from an hour)."""
    m, sec = divmod(round(seconds), 60)
    return f"{m // 60}:{m % 60:02d}:{sec:02d}" if m >= 60 else f"{m}:{sec:02d}"


def progress_line(k: int, n: int, label: str, elapsed_s: float,
                  durations_s: list[float]) -> str:
    """The line printed before point ``k`` of ``n`` starts where no progress bar is drawn (a
    log, a pipe): ``[3/8] LABEL (0:21 elapsed, about 0:35 left)``; the time left is the mean
    time of the points done so far times the points left, this one included (none before the
    first point ends)."""
    left = ""
    if durations_s:
        left = f", about {_clock(sum(durations_s) / len(durations_s) * (n - k + 1))} left"
    return f"[{k}/{n}] {label} ({_clock(elapsed_s)} elapsed{left})"


def _note_policy(rec: RunRecord, cfg: RunConfig, auto_keys: set[str],
                 threads: ThreadChoice | None) -> None:
    """Record in ``rec.env.thread_policy`` how the threads of an auto-threads point were
    chosen (:meth:`dlperf.env.ThreadChoice.record`)."""
    if threads is not None and cfg.run_key() in auto_keys:
        rec.env = rec.env or Env()
        rec.env.thread_policy = threads.record()


class _PointRunner:
    """Runs the claimed points of :func:`execute` one at a time: progress line, worker, store
    (:func:`~dlperf.results.unsaved.store_or_keep`), ceilings cache, counts and the result line."""

    def __init__(self, store: ResultStore, sweep: str | None,
                 runner: Callable[[RunConfig], RunRecord], out: SweepOutcome,
                 progress: Progress, task: Any, cache: Any, n: int, line_per_point: bool,
                 note: Callable[[RunRecord, RunConfig], None]) -> None:
        self.store, self.sweep, self.runner, self.out = store, sweep, runner, out
        self.progress, self.task, self.cache, self.n = progress, task, cache, n
        self.line_per_point, self.note = line_per_point, note
        self.started, self.durations = time.monotonic(), list[float]()

    def run(self, k: int, cfg: RunConfig) -> None:
        """Measure point ``k`` (1-based) and store its result."""
        self.progress.update(self.task, description=escape(cfg.label()))
        if self.line_per_point:
            self.progress.console.print(progress_line(k, self.n, cfg.label(),
                                                      time.monotonic() - self.started,
                                                      self.durations),
                                        markup=False, highlight=False)
        t0 = time.monotonic()
        rec = self.runner(cfg)
        self.durations.append(time.monotonic() - t0)
        self.note(rec, cfg)
        store_or_keep(self.store, rec, self.sweep)
        if self.cache is not None and self.cache[0].add_result(rec.to_dict(raw=False),
                                                               "this sweep"):
            self.cache[0].save(self.cache[1])
        self.out.ran += 1
        self.out.failed += rec.identity.status != "ok"
        self.out.results.append(rec)
        self.progress.console.print(result_line(rec), highlight=False)
        self.progress.advance(self.task)

    def elsewhere(self) -> None:
        """A point another process measured: counted, not run."""
        self.out.elsewhere += 1
        self.progress.advance(self.task)


def execute(points: list[RunConfig], store: ResultStore, *, sweep: str | None = None,
            resume: bool = True, retry_failed: bool = False,
            runner: Callable[[RunConfig], RunRecord] | None = None,
            console: Console | None = None, show_progress: bool = True,
            missing_data: Mapping[DataKey, str] | None = None,
            threads: ThreadChoice | None = None, rerun_flag: str = "--rerun") -> SweepOutcome:
    """Run ``points`` in order, storing each result as it arrives.

    Args:
        points: configurations to run.
        store: where results go (and where finished points are looked up for resume).
        sweep: sweep name recorded with each result.
        resume: skip points whose run key already has a result in ``store``.
        retry_failed: with ``resume``, run again points whose stored results all failed.
        runner: ``RunConfig -> RunRecord``; default: a fresh worker process per point, or a
            distributed launch for data-parallel points (:func:`dlperf.launch.distributed.run_point`).
        console: where progress and one line per result go.
        show_progress: draw a progress bar on a terminal; elsewhere (a log, a pipe) print one
            line per point before it starts, "[k/N] label (elapsed, about ... left)".
        missing_data: data sets that are not there (:func:`preflight` with
            ``allow_missing``); the points to run that use one are stored as ``unavailable``
            results with its message before the others run, without a worker, after one
            warning (:func:`missing_data_warning`).
        threads: the thread policy's choice for CPU points without threads
            (:func:`dlperf.env.choose_threads`; :func:`dlperf.resume.resolve_threads` says how
            it meets stored points); recorded in each such result's ``env.thread_policy``.
            None: points run as given.
        rerun_flag: the flag named by the warning about stored points measured with other
            settings (:func:`dlperf.resume.changed_settings`).

    The matmul and bandwidth ceilings are measured once per framework, device, precision and
    thread count and handed to the workers (:func:`dlperf.resume.ceilings_cache`). Each point
    is claimed in the store before it runs (:mod:`dlperf.results.claims`): sweeps writing into
    one file at once share the points, none measured twice; a point another process is
    measuring is waited for at the end.

    Returns:
        SweepOutcome with counts and the results produced by this call (``ran``: points given
        to ``runner``; ``missing_data``: points stored unavailable without running;
        ``elsewhere``: points another process measured meanwhile).

    Raises:
        StoreError: the store could not take a result (the result is kept beside it:
            :func:`dlperf.results.unsaved.store_or_keep`).
    """
    from dlperf.results.claims import Claims, run_claimed
    from dlperf.resume import (
        ceilings_cache,
        changed_settings,
        code_changes,
        code_notice,
        resolve_threads,
    )

    if runner is None:
        from dlperf.launch.distributed import run_point
        runner = run_point
    console = console or Console(stderr=True)
    done = store.done_keys(include_failed=not retry_failed) if resume else set()
    points, auto_keys = resolve_threads(points, threads, store, done)
    recode = code_changes(points, store, done)
    if recode:
        done = done - {p.run_key() for p in recode}
        console.print(code_notice(recode), markup=False, highlight=False)
    claims = Claims(store, resume=resume, retry_failed=retry_failed, sweep=sweep,
                    redo={p.run_key() for p in recode})
    todo = [p for p in points if p.run_key() not in done]
    out = SweepOutcome(skipped=len(points) - len(todo), points=points)
    if out.skipped:
        console.print(f"resuming: {out.skipped} of {len(points)} points already in {store.path}",
                      markup=False, highlight=False)
        if not retry_failed:  # a stored failure is kept, not retried: say how to retry it
            ok_keys = store.done_keys(include_failed=False)
            failed = sum(1 for p in points if p.run_key() in done and p.run_key() not in ok_keys)
            if failed:
                console.print(f"  {failed} of them only failed before (timeout, crash, OOM, ...) "
                              "and are not run again: add --retry-failed to measure them again "
                              "(for a timeout, with a larger --timeout or timeout_s)",
                              markup=False, highlight=False)
        changed = changed_settings([p for p in points if p.run_key() in done], store,
                                   threads, rerun_flag)
        if changed:
            console.print(f"[yellow]{escape(changed)}[/]", highlight=False)
    missing_data = missing_data or {}
    absent = [p for p in todo if data_key(p) in missing_data]
    warning = missing_data_warning(missing_data, absent, len(todo))
    if warning:
        from dlperf.env import collect_env

        console.print(f"[yellow]{escape(warning)}[/]", highlight=False)
        env = collect_env()
        for cfg in absent:  # stored at once: `dlperf results` shows them while the rest runs
            rec = missing_data_result(cfg, missing_data[data_key(cfg)], env)
            store_or_keep(store, rec, sweep)
            out.missing_data += 1
            out.results.append(rec)
            console.print(result_line(rec), highlight=False)
        todo = [p for p in todo if data_key(p) not in missing_data]
    bar = show_progress and console.is_terminal
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                        console=console, transient=True, disable=not bar)
    with progress, ceilings_cache(todo, store) as cache, claims.beating():
        task = progress.add_task("", total=len(todo))
        pr = _PointRunner(store, sweep, runner, out, progress, task, cache, len(todo),
                          show_progress and not bar,
                          lambda r, cfg: _note_policy(r, cfg, auto_keys, threads))
        out.left = len(run_claimed(todo, claims, pr.run, pr.elsewhere, progress.console,
                                   store.path))
    if out.elsewhere:
        console.print(f"{out.elsewhere} point(s) were measured by another process writing to "
                      f"{store.path} at the same time (shared, not repeated)", markup=False,
                      highlight=False)
    return out
