"""``dlperf calibrate``: on a new machine, one command measures what the timeline replay
(:mod:`dlperf.perfmodel.replay`) needs to predict there, and stores a device profile in the
results file.

What runs, in order, each point a fresh worker through the sweep machinery (resumable: a
second call continues where the first stopped, a finished point is not measured again):

1. the **profile points**: a small model (``--profile-model``, default ``fcn5``) at each
   precision the framework has (on the CPU not tf32, a GPU tensor-core mode: fp32 there), with the ceilings microbenchmarks on (a square-GEMM ladder at
   2048-8192 per precision and the ``y = 2x`` bandwidth kernel,
   :mod:`dlperf.measure.ceilings`) and ``--timeline``: GEMM ceilings per precision at a few
   shapes, memory bandwidth, host-to-device copy bandwidth from pinned and pageable memory
   (frameworks whose ceilings backend copies: PyTorch), the host-speed probe, the untraced host dispatch of the profile
   model (the *dispatch probe*: the same work timed on every machine, which the replay's host
   scales by) and the launch calls of a traced iteration;
2. the **model points**: one traced iteration (``--timeline``) of each ``--model`` at each of
   ``--batch-sizes`` (two by default) at ``--precision``.

Then the device profile (:class:`dlperf.perfmodel.hardware.GpuProfile`: the datasheet of the
GPU with everything measured put in its place, assembled from the stored profile points by
:mod:`dlperf.measure.device_profile`) is stored under ``--name`` in the results
file's ``meta`` table, where ``dlperf predict --gpu NAME`` finds it. A point that fails is a
stored failure, not the end of the calibration. The budget (``--budget-s``) bounds the
whole command (:func:`_run_within`): the profile points run first (the model points'
precision first among them), then the model points, and a point starts only when the time
spent plus the longest point measured so far fits in the budget; the first profile point
always runs where the results file holds none (a profile needs one), so a budget shorter than
one point is exceeded by that point. Once a point does not fit, it and every later one are
left out and named in the output; the profile is made of the points measured, and the same
command again measures the rest. Every input is checked before anything runs, as ``dlperf run`` checks
its own (:func:`check_inputs`: a misspelt model is refused with a "did you mean", a precision
other than the framework's fp32 / tf32 / bf16 with the list, ``--device cuda`` where no CUDA
GPU is usable, ...), and when no profile point is measured no profile is stored (exit 2, with the first
failure): a profile of nothing would give ``predict --gpu NAME`` absurd times.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from dlperf.cli import common
from dlperf.cli.common import guard
from dlperf.errors import ConfigError
from dlperf.outputs import shown_path

#: The measurement policy of a calibration point: short, since a traced point only needs a
#: steady step (the timeline itself is 5 traced iterations after the measured segment).
ITERATIONS = {"min_iters": 10, "min_time_s": 0.3, "max_time_s": 3.0, "max_warmup_time_s": 4.0}


def _profile_entries(framework: str, device: str, profile_model: str, batch: int,
                     precisions: Sequence[str]) -> list[dict[str, Any]]:
    return [{"framework": framework, "device": device, "model": profile_model,
             "batch_size": batch, "precision": p, "measure_ceilings": True, "timeline": True}
            for p in precisions]


def _model_entries(framework: str, device: str, models: list[str], batches: list[int],
                   precision: str, mode: str | None) -> list[dict[str, Any]]:
    return [{"framework": framework, "device": device, "model": m, "batch_size": b,
             "precision": precision, "measure_ceilings": False, "timeline": True,
             **({"mode": mode} if mode else {})} for m in models for b in batches]


def _label(e: dict[str, Any]) -> str:
    return f"{e['model']} {e['precision']} b={e['batch_size']}"


def calibrate(
    db: Annotated[str, typer.Option("--db", help="Results file the points and the profile go "
                                                 "into (created if missing; resumable).")],
    name: Annotated[str, typer.Option("--name", help="Name of the device profile, for "
                                                     "`dlperf predict --gpu NAME` (e.g. h100).")],
    framework: Annotated[str, typer.Option("--framework", help="Framework of the points.")]
    = "torch",
    device: Annotated[str, typer.Option("--device", help="cuda or cpu.")] = "cuda",
    model: Annotated[list[str] | None, typer.Option(
        "--model", help="A model to trace (repeatable); none: the device profile only.")] = None,
    batch_sizes: Annotated[str, typer.Option(
        "--batch-sizes", help="Batch sizes of each model's traced points, comma-separated.")]
    = "16,64",
    precision: Annotated[str, typer.Option("--precision", help="Precision of the model "
                                                               "points: fp32, tf32 or bf16 (those "
                                                               "the framework has).")] = "bf16",
    mode: Annotated[str | None, typer.Option("--mode", help="Mode of the model points (the "
                                                            "framework's default if not "
                                                            "given).")] = None,
    profile_model: Annotated[str, typer.Option(
        "--profile-model", help="Small model whose points measure the ceilings.")] = "fcn5",
    profile_batch: Annotated[int, typer.Option("--profile-batch", help="Its batch size.")] = 64,
    budget_s: Annotated[float, typer.Option(
        "--budget-s", help="Seconds for the whole command, profile points included: a point "
        "starts only if the time spent plus the longest point so far fits (the first profile "
        "point always runs); the points left out are named, and the same command again "
        "measures them.")] = 600.0,
    json_out: Annotated[bool, typer.Option("--json", help="Print the profile as JSON.")]
    = False,
) -> None:
    """Measure a device profile (GEMM ceilings, bandwidth, host speed, launch call) and one
    traced iteration at two batch sizes per model, in at most --budget-s seconds; store the
    profile in --db for `dlperf predict --gpu NAME`."""
    guard(lambda: _calibrate(db, name, framework, device, list(model or []), batch_sizes,
                             precision, mode, profile_model, profile_batch, budget_s, json_out))


def _calibrate(db: str, name: str, framework: str, device: str, models: list[str],
               batch_sizes: str, precision: str, mode: str | None, profile_model: str,
               profile_batch: int, budget_s: float, json_out: bool) -> None:
    from dlperf import registry
    from dlperf.config.limits import check_seconds
    from dlperf.config.run import resolve_device
    from dlperf.measure import device_profile
    from dlperf.perfmodel import hardware
    from dlperf.registry import framework_info

    t0 = time.monotonic()
    check_seconds(budget_s, "--budget-s")
    info = framework_info(framework)
    if info is None:
        raise ConfigError(f"--framework {framework!r} is not a framework dlperf knows; "
                          "`dlperf list frameworks` lists them")
    try:
        batches = [int(b) for b in batch_sizes.split(",") if b.strip()]
    except ValueError:
        raise ConfigError(f"--batch-sizes {batch_sizes!r}: give whole numbers separated by "
                          "commas, e.g. 16,64") from None
    if any(b < 1 for b in batches) or (models and not batches):
        raise ConfigError(f"--batch-sizes {batch_sizes!r}: give whole numbers >= 1")
    if not name.strip():
        raise ConfigError("--name: give the profile a name, e.g. h100")
    if not info.breakdown:  # every calibration point is traced (--timeline)
        with_traces = [n for n, i in registry.FRAMEWORKS.items()  # test doubles unnamed
                       if i.breakdown and n not in registry.TEST_DOUBLES]
        raise ConfigError(f"--framework {framework}: calibrate traces every point (--timeline), "
                          f"and {framework} has no profiler split of its step; use --framework "
                          f"{', '.join(with_traces[:-1])} or {with_traces[-1]}")
    device = resolve_device(device)  # cuda where none is usable: refused before anything runs
    precs = [p for p in ("fp32", "tf32", "bf16") if p in info.precisions] or ["fp32"]
    no_tf32 = device == "cpu" and "tf32" in precs  # a GPU tensor-core mode: fp32 on a CPU
    if no_tf32:
        precs.remove("tf32")
    # the model points' precision first: the ceiling their replay needs, should the budget
    # leave the others out
    precs.sort(key=lambda p: p != precision)
    defaults = {"iterations": ITERATIONS, "data": "synthetic", "timeout_s": 300}
    n_profile = len(precs)
    entries = (_profile_entries(framework, device, profile_model, profile_batch, precs)
               + _model_entries(framework, device, models, batches, precision, mode))
    points = check_inputs(db, defaults, entries[:n_profile], entries[n_profile:])
    if not models:  # --precision and --mode are the model points': checked all the same
        check_inputs(db, defaults, [], _model_entries(framework, device, [profile_model],
                                                      [profile_batch], precision, mode))
    if no_tf32:
        typer.echo("no tf32 profile point on the CPU: TF32 is a GPU tensor-core mode, so a "
                   "CPU's tf32 is its fp32 (measured as fp32)", err=True)
    results, left = _run_within(db, name, defaults, entries, points, n_profile, budget_s, t0)
    profile_results = [r for i, r in results if i < n_profile and r.identity.status == "ok"]
    ids = device_profile.profile_point_ids(db, profile_model, framework, device, profile_batch)
    if not ids:
        why = next((f"{r.identity.status}: {(r.identity.error or '').splitlines()[0]}"
                    for _, r in results if r.identity.error), "no point finished")
        raise ConfigError(f"no profile point of {profile_model} on {device} measured, so there "
                          f"is nothing to make device profile {name!r} of and none is stored "
                          f"({why}); `dlperf results --db {shown_path(db)}` lists the stored failures")
    if left:
        typer.echo(f"--budget-s {budget_s:g} spent after {time.monotonic() - t0:.0f} s: left "
                   f"out (not measured): {'; '.join(left)}; run the same command again (with a "
                   "larger --budget-s) to measure them", err=True)
    device_name = device_profile.device_name_of(db, ids) or (
        profile_results[0].device_name if profile_results else None)
    prof = device_profile.build_profile(db, name, device_name, ids)
    hardware.store_profile(db, prof)
    took = time.monotonic() - t0
    if json_out:
        typer.echo(json.dumps({**prof.to_dict(), "calibrate_s": took}, indent=1))
        return
    g = ", ".join(f"{k} {_tflops(v)}" for k, v in prof.gemm_flops_per_s.items())
    typer.echo(f"device profile {prof.name!r} ({prof.device_name}) stored in {db} after "
               f"{took:.0f} s")
    typer.echo(f"  GEMM ceilings (TFLOP/s): {g}; bandwidth {prof.bandwidth_bytes_per_s / 1e9:.0f}"
               f" GB/s; host probe {_shown(prof.host_speed_ns, 1, 'ns', 'not measured')}; "
               f"launch call {_shown(prof.launch_s, 1e6, 'us', _NO_LAUNCH.get(device))}")
    h2d = {"pinned": prof.h2d_bytes_per_s, "pageable": prof.h2d_pageable_bytes_per_s}
    typer.echo("  host-to-device copies (GB/s): " + ", ".join(
        f"{k} {v / 1e9:.1f}" if v else f"{k} not measured" for k, v in h2d.items()))
    typer.echo(f"  measured: {', '.join(prof.measured) or 'nothing'}; the rest: {prof.source}")


def _run_within(db: str, name: str, defaults: dict[str, Any], entries: list[dict[str, Any]],
                points: list[Any], n_profile: int, budget_s: float, t0: float
                ) -> tuple[list[tuple[int, Any]], list[str]]:
    """Measure the points (``entries``, their configs ``points``; the first ``n_profile`` the
    profile's) in order, each through the sweep machinery, within ``budget_s`` seconds from
    ``t0`` (``time.monotonic``): a point already stored in ``db`` is skipped (resume); another
    starts only when the time spent plus the longest point this call has measured fits in the
    budget, except the first profile point where ``db`` holds none (a profile needs one). Once
    one does not fit, it and every later one are left out.

    Returns:
        The new records (in order, each with the index of its entry) and the labels of the points left out, profile points
        first (``profile fcn5 fp32 b=64``).
    """
    from dlperf import api
    from dlperf.results.store import ResultStore

    done: set[str] = set()
    if Path(db).is_file() and Path(db).stat().st_size:
        with ResultStore(db, read_only=True) as store:
            done = store.done_keys(include_failed=True)
    stored = [i for i, p in enumerate(points) if p.run_key() in done]
    if stored:
        typer.echo(f"resuming: {len(stored)} of {len(points)} calibration points already in "
                   f"{shown_path(db)}", err=True)
    have_profile = any(i < n_profile for i in stored)
    results: list[tuple[int, Any]] = []
    took: list[float] = []
    for i, e in enumerate(entries):
        if i in stored:
            continue
        first = i < n_profile and not have_profile and not took
        if not first and time.monotonic() - t0 + max(took, default=0.0) > budget_s:
            return results, [("profile " if j < n_profile else "") + _label(entries[j])
                             for j in range(i, len(entries)) if j not in stored]
        t = time.monotonic()
        kind = "-profile" if i < n_profile else ""
        results += [(i, r) for r in api.sweep([e], defaults=defaults,
                                              name=f"calibrate-{name}{kind}", db=db,
                                              console=common.err).results]
        took.append(time.monotonic() - t)
    return results, []


def check_inputs(db: str, defaults: dict[str, Any], profile_grid: list[dict[str, Any]],
                 model_grid: list[dict[str, Any]]) -> list[Any]:
    """Every point of the calibration checked before any is measured, as ``dlperf run``
    checks its points (:func:`dlperf.config.expand_grid` with its flag names: models with a
    "did you mean", precisions, modes, batch sizes; :func:`dlperf.sweep.preflight`: the
    framework has the model; :func:`dlperf.cli.common.check_memory`: the batch fits; the
    processes can be made here; ``--db`` can be written). Returns the points (profile points
    first).

    Raises:
        ConfigError: the first bad input, naming its flag (``--profile-model`` /
            ``--profile-batch`` for the profile points); nothing is run or stored.
    """
    from dlperf.cli.common import check_db, check_memory
    from dlperf.config import expand_grid
    from dlperf.config.limits import check_points_here
    from dlperf.placement import check_here
    from dlperf.sweep import preflight

    check_db(db, must_exist=False, write=True)
    try:
        points = [p for e in profile_grid for p in expand_grid(defaults, [e], cli=True)]
    except ConfigError as e:
        raise ConfigError(f"--profile-model / --profile-batch: {e}") from None
    points += [p for e in model_grid for p in expand_grid(defaults, [e], cli=True)]
    preflight(points)  # the framework implements each model; synthetic data need no check
    check_memory(points, db)
    check_points_here(points)
    check_here((p.hardware.cpu_bind, p.parallel.nproc) for p in points)
    return points


#: What the output says of a profile without a launch call, by device: a CPU's traces have no
#: kernel launches (the profile stores none, not a NaN).
_NO_LAUNCH = {"cpu": "n/a (cpu: no kernel launches)"}


def _tflops(flops_per_s: float) -> str:
    """A GEMM ceiling in TFLOP/s, one decimal from 1 TFLOP/s up (a GPU's) and three
    significant digits below (a CPU's tens of GFLOP/s would read 0.0)."""
    t = flops_per_s / 1e12
    return f"{t:.1f}" if t >= 1 else f"{t:.3g}"


def _shown(value: float | None, scale: float, unit: str, missing: str | None) -> str:
    """``value x scale`` with its ``unit`` (one decimal), or ``missing`` (default ``not
    measured``) where there is no finite value: never ``nan``."""
    import math

    if value is None or not math.isfinite(value):
        return missing or "not measured"
    return f"{value * scale:.1f} {unit}"
