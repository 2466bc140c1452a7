"""Executing a list of configurations: isolation, resume, progress, failures as results.

Used by ``dlperf run`` and ``dlperf sweep``. Each point runs in its own worker process
(:mod:`dlperf.launch.process`) and its result is stored in one transaction as soon as it is
known, so a sweep stopped at any moment (even by ``kill -9``) resumes without redoing finished
points and without losing any: points whose run key is already in the store are skipped.
Repeated runs of a point (``--repeats N``) have run keys of their own (:meth:`RunConfig.run_key`
includes ``repeat`` when non-zero), so each repeat is resumed on its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dlperf.config import RunConfig, ddp_changes, layout_change
from dlperf.results.store import ResultStore


@dataclass
class SweepOutcome:
    """What :func:`execute` did: counts and the new results, in order."""

    ran: int = 0
    skipped: int = 0
    failed: int = 0
    results: list[dict[str, Any]] = field(default_factory=list)


def result_line(r: dict[str, Any]) -> str:
    """One-line human summary of a result (rich markup).

    Everything taken from the result (model, error text, warnings) is escaped, so brackets in
    it (``pip install 'dlperf[jax]'``, ``[input-bound]``) are printed, not read as markup.
    """
    thr = f" threads={r['threads']}" if r.get("threads") else ""
    lw = (r.get("config") or {}).get("loader_workers")
    thr += f" workers={lw}" if lw is not None else ""
    n = r.get("world_size") or 1
    par = "" if n == 1 else (f" x{r.get('nproc')}" if (r.get("nnodes") or 1) == 1
                             else f" {r.get('nnodes')}x{r.get('nproc')}")
    b = f"b={r['batch_size']}" + (f" ({n}x{r.get('per_device_batch')})" if n > 1 else "")
    if n > 1:
        cfg = r.get("config") or {}
        lay = layout_change(r.get("framework"), cfg.get("dp_layout"))
        thr += f" {lay}" if lay else ""
        changed = ddp_changes(cfg.get("ddp"))
        thr += f" ddp({', '.join(changed)})" if changed else ""
    rep = r.get("repeat") or (r.get("config") or {}).get("repeat")
    thr += f" #{rep}" if rep else ""
    label = escape(f"{r['model']} {r['framework']}/{r['mode']} {r['device']}{par} "
                   f"{r['precision']} {b} {r['data']}{thr}")
    if r["status"] != "ok":
        err = (r.get("error") or "").splitlines()[0][:120] if r.get("error") else ""
        return f"[red]{r['status']:>8}[/] {label}  {escape(err)}"
    s = r["summary"]
    tp = r["throughput"]
    extra = f", {tp['tokens_per_s']:,.0f} tokens/s" if tp.get("tokens_per_s") else ""
    mfu = (r.get("mfu") or {}).get("mfu")
    extra += f", MFU {mfu:.1%}" if mfu is not None else ""
    dw = r.get("data_wait") or {}
    if dw.get("share") is not None:
        extra += f", data wait {dw['share']:.1%}" + (" \\[input-bound]" if dw["input_bound"] else "")
    e = (r.get("power") or {}).get("energy_per_iter_j")
    extra += f", {e:.4g} J/iter" if e is not None else ""
    warn = "".join(f"\n         [yellow]warning: {escape(str(w))}[/]"
                   for w in r.get("warnings") or [])
    d = r.get("dist") or {}
    if d:
        extra += f", imbalance {d['imbalance']:.3f}" if d.get("imbalance") else ""
        if (d.get("comm") or {}).get("exposed") is not None:
            extra += f", exposed comm {d['comm']['exposed'] * 1e3:.3f} ms/iter"
    conv = r.get("convergence") or {}
    if conv.get("target_loss") is not None:
        extra += (f", target loss {conv['target_loss']:g} reached after "
                  f"{conv['iterations_to_target']} iterations, {conv['time_to_target_s']:.3f} s"
                  if conv.get("reached") else f", target loss {conv['target_loss']:g} not reached")
    return (f"[green]{'ok':>8}[/] {label}  {s['median'] * 1e3:.3f} ms/iter "
            f"[{s['ci_low'] * 1e3:.3f}, {s['ci_high'] * 1e3:.3f}], "
            f"{tp['samples_per_s']:,.1f} samples/s{extra}{warn}")


def preflight(points: list[RunConfig]) -> None:
    """Check what can be checked before anything runs, so a user error costs no measurement.

    Each real data set is resolved, read and cut into one batch for each model that uses it
    (corrupt files and data that do not fit the model are refused here). A framework that runs
    in an interpreter of its own (MXNet) has that interpreter tried once.

    Raises:
        DataError: naming the data set, the file or the model, and how to fix it.
        ConfigError: a model without an implementation in its framework, or a framework
            interpreter that is missing or broken.
    """
    import importlib.util

    from dlperf.data import load_dataset, make_batches
    from dlperf.errors import ConfigError
    from dlperf.zoo import IMPL_MODULES, get_spec

    def has_impl(family: str, framework: str) -> bool:
        mod = f"dlperf.zoo.{family}.{IMPL_MODULES[framework]}"
        return importlib.util.find_spec(mod) is not None

    from dlperf.launch.process import check_framework_python

    for framework in sorted({p.framework for p in points}):
        check_framework_python(framework)  # a framework with an interpreter of its own
    for model, framework in {(p.model, p.framework) for p in points}:
        family = get_spec(model).family
        if framework in IMPL_MODULES and not has_impl(family, framework):
            have = [fw for fw in IMPL_MODULES if has_impl(family, fw)]
            raise ConfigError(f"{model} has no {framework} implementation yet "
                              f"(family {family}); available in: {', '.join(have)}")
    loaded: dict[tuple[str, str | None], Any] = {}
    checked: set[tuple[str, str | None, str, int]] = set()
    for p in points:
        if p.data == "synthetic":
            continue
        key = (p.data, p.data_dir)
        if key not in loaded:
            loaded[key] = load_dataset(p.data, p.data_dir)
        ck = (p.data, p.data_dir, p.model, p.global_batch)
        if ck not in checked:
            make_batches(loaded[key], get_spec(p.model), p.global_batch, max_batches=1)
            checked.add(ck)


def execute(points: list[RunConfig], store: ResultStore, *, sweep: str | None = None,
            resume: bool = True, retry_failed: bool = False,
            runner: Callable[[RunConfig], dict[str, Any]] | None = None,
            console: Console | None = None, show_progress: bool = True) -> SweepOutcome:
    """Run ``points`` in order, storing each result as it arrives.

    Args:
        points: configurations to run.
        store: where results go (and where finished points are looked up for resume).
        sweep: sweep name recorded with each result.
        resume: skip points whose run key already has a result in ``store``.
        retry_failed: with ``resume``, run again points whose stored results all failed.
        runner: ``RunConfig -> result``; default: a fresh worker process per point, or a
            distributed launch for data-parallel points (:func:`dlperf.launch.distributed.run_point`).
        console: where progress and one line per result go.
        show_progress: draw a progress bar.

    Returns:
        SweepOutcome with counts and the results produced by this call.
    """
    if runner is None:
        from dlperf.launch.distributed import run_point
        runner = run_point
    console = console or Console(stderr=True)
    done = store.done_keys(include_failed=not retry_failed) if resume else set()
    todo = [p for p in points if p.run_key() not in done]
    out = SweepOutcome(skipped=len(points) - len(todo))
    if out.skipped:
        console.print(f"resuming: {out.skipped} of {len(points)} points already in {store.path}",
                      markup=False, highlight=False)
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=console, transient=True,
                        disable=not show_progress)
    with progress:
        task = progress.add_task("", total=len(todo))
        for cfg in todo:
            progress.update(task, description=cfg.label())
            r = runner(cfg)
            store.add(r, sweep=sweep)
            out.ran += 1
            out.failed += r["status"] != "ok"
            out.results.append(r)
            progress.console.print(result_line(r), highlight=False)
            progress.advance(task)
    return out
