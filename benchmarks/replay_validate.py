"""Back-test of the timeline replay (docs/replay.md, "Back-test") on stored timelines, one
category per transform, development and test models apart (benchmarks/results/split.json),
with the step-level model on the same rows as the baseline, seeing what the replay's row
sees: a batch prediction from the configuration's other stored batches for the batch and
compile rows (:func:`baseline`), the what-if from the other precision's series with the
target precision withheld at every batch for the precision rows (:func:`whatif_baseline`).

Categories (each row: one stored point predicted without its own trace unless said):

* ``own trace``: the point's own trace replayed, host de-inflated to its own untraced probe;
* ``batch, one trace``: from the trace of each other traced batch of the configuration
  (:func:`dlperf.perfmodel.transforms.batch.to_batch`), batches at most 2x apart and further
  apart in separate rows;
* ``batch, interpolated``: from the two nearest other traced batches (leave the point out);
* ``precision``: from the trace of the other precision (fp32 <-> bf16) at the same batch;
  the sign check counts rows whose measured change is beyond the two points' noise (their
  95% CIs, at least 2%) and whose predicted change has the same sign;
* ``compile``: a torch.compile (graph) point from graph traces at other batch sizes (the
  replay refuses eager -> graph: a compiled program's kernels are not the eager ones);
* ``data parallel (CPU gloo)``: each stored N-rank CPU gloo run with a timeline and a bucket
  record (``--dp-db``, default benchmarks/results/cpu-dev/ddp_buckets.db) predicted from rank
  0's traced iterations with their all-reduces removed (:mod:`dlperf.perfmodel.cpureplay`:
  each bucket's all-reduce at its gradient-ready op, its cost from the file's all-reduce
  sweep, the cores shared); baseline the step-level WFBP recursion
  (:func:`dlperf.perfmodel.dataparallel.exposed_comm`: DDP's default buckets ready uniformly
  over backward, 2/3 of the step) over the same de-inflated compute. ``--dp-designs`` prints
  the alternatives' development rows.

Beside each category, on the same rows, what the measurements themselves repeat to:

* ``noise floor``: a row's target point predicted by the other stored measurements of the
  same point (:func:`repeat_errors`: same configuration and batch on the same GPU, data on
  the device, not instrumented, in another file of those the table reads: ``--db`` and the
  ``--ceilings`` files; :func:`dlperf.validation.backtest.repeat_groups`, the step-level
  back-test's ``repeat (noise floor)`` points); the row's value is the median |error| over
  its repeats, the category's the median over the rows that have one;
* ``host-bound scatter``: a host-bound target point (:func:`dlperf.perfmodel.replay.host_bound`)
  predicted by the median step of its configuration's other host-bound traced points, the
  host level the replay takes from them (:func:`host_scatter`): how far one configuration's
  host-bound steps scatter between points.

    PYTHONPATH=src python benchmarks/replay_validate.py [--db FILE ...] [--no-baseline]
        [--json OUT] [--only own|batch|precision|dp] [--ceilings FILE] [--side dev|test]
        [--dp-db FILE] [--dp-designs]

``--json OUT`` writes ``{"inputs_key": ..., "rows": [...]}``: the rows, and :func:`inputs_key`
of what made them. The committed ``benchmarks/results/replay_validate_rows.json`` is the
default run's (no options); tests/unit/test_replay_validate_rows.py checks that its key is the
key of the current inputs and source, without running the back-test (minutes on 2 cores).

Several ``--db`` files are one pool (the H100's points of a model are in suite.db and
suite_extra.db: three batch sizes between them); ``--side dev`` computes the development rows
only (constants are chosen on those; the test rows are run once, at the end).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from dlperf.perfmodel import cpureplay, hardware, replay
from dlperf.perfmodel.transforms.batch import interpolate_batch, to_batch
from dlperf.perfmodel.transforms.precision import to_precision

ROOT = Path(__file__).resolve().parents[1]
DP_DB = ROOT / "benchmarks/results/cpu-dev/ddp_buckets.db"
DP_CATEGORY = "data parallel (CPU gloo)"
SPLIT_FILE = ROOT / "benchmarks/results/split.json"
SPLIT = json.loads(SPLIT_FILE.read_text())
#: The committed rows of the default run (``--json``; :func:`inputs_key`).
ROWS_FILE = ROOT / "benchmarks/results/replay_validate_rows.json"
#: The modules of :mod:`dlperf.perfmodel` the rows come from, each with every module of the
#: package it imports (:func:`dlperf.perfmodel.fitcache.prediction_modules`): the replay, the
#: batch and precision transforms, the GPU profiles, the CPU replay, and the step-level
#: baseline (``api``).
REPLAY_ENTRIES = ("replay", "transforms.batch", "transforms.precision", "hardware",
                  "cpureplay", "api")
#: Source outside :mod:`dlperf.perfmodel` that the rows depend on: the timeline reader, and
#: the bucket records' reader (:mod:`dlperf.validation.bucketcheck`, with the row and budget
#: it takes from :mod:`dlperf.validation.backtest`; the perfmodel modules they import are
#: ``api``'s).
OTHER_SOURCES = ("src/dlperf/results/timelines.py", "src/dlperf/validation/bucketcheck.py",
                 "src/dlperf/validation/backtest.py")


def default_ceilings() -> list[str]:
    """The results files whose measured ceilings give the GPU profile by default: every file
    of benchmarks/results/h200."""
    return sorted(str(p) for p in (ROOT / "benchmarks/results/h200").glob("*.db"))


def inputs_key(dbs: list[str], ceilings: list[str], dp_db: str | None,
               cats: tuple[str, ...], sides: tuple[str, ...], with_baseline: bool) -> str:
    """A hex digest of what a run's rows are a function of: the options (``cats``, ``sides``,
    ``with_baseline``), the content of the results files (``dbs``, ``ceilings``, ``dp_db``
    when ``dp`` is in ``cats``; each named by its path relative to the checkout,
    :func:`dlperf.perfmodel.fitcache.data_digest`), the split, this script's source and the
    source of the modules of :data:`REPLAY_ENTRIES` and :data:`OTHER_SOURCES`. A change to
    any of them changes the key; a change to other code the rows pass through (the results
    store, the records reader outside :mod:`dlperf.perfmodel`) does not."""
    from dlperf.perfmodel import fitcache

    h = hashlib.sha256(json.dumps({"cats": sorted(cats), "sides": sorted(sides),
                                   "baseline": with_baseline}, sort_keys=True).encode())
    files = [*dbs, *ceilings, *([dp_db] if dp_db and "dp" in cats else [])]
    h.update(fitcache.data_digest(files, relative_to=ROOT).encode())
    names = sorted(set().union(*(fitcache.prediction_modules(e) for e in REPLAY_ENTRIES)))
    sources = [fitcache.module_file(n) for n in names] + [ROOT / f for f in OTHER_SOURCES] \
        + [Path(__file__).resolve(), SPLIT_FILE]
    for f in sources:
        h.update(f.resolve().relative_to(ROOT).as_posix().encode())
        h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()[:20]


def side(model: str) -> str:
    return "test" if model in SPLIT["test_models"] else "dev"


def _row(cat: str, p: Any, pred: float, how: str, base: float | None = None,
         **extra: Any) -> dict[str, Any]:
    return {"category": cat, "side": side(p.model), "model": p.model,
            "framework": p.framework, "mode": p.mode, "precision": p.precision,
            "batch_size": p.batch_size, "measured_s": p.step_time_s, "predicted_s": pred,
            "error": pred / p.step_time_s - 1, "how": how, "baseline_s": base,
            "baseline_error": (base / p.step_time_s - 1) if base else None, **extra}


def baseline(files: list[str], p: Any) -> float | None:
    """The step-level model's prediction of ``p`` (:func:`dlperf.perfmodel.api.predict`, s):
    from its configuration's own series, its stored measurements at ``p``'s batch withheld
    in every file, the other batches kept. The baseline of the batch and compile rows: those
    predict a batch of a configuration from its traces at other batches, so a batch
    prediction from the same configuration's other stored batches is the like-for-like
    step-level answer (a whole series fit against the replay's one or two traces). None on
    error."""
    try:
        from dlperf.perfmodel.api import predict

        return predict(files, p.model, p.framework, p.mode, p.precision, p.device,
                       batch_size=p.batch_size).predicted_step_time_s
    except Exception:  # noqa: BLE001 - a baseline that cannot answer is left out
        return None


def whatif_baseline(files: list[str], p: Any, q: Any) -> float | None:
    """The step-level model's what-if of ``p`` from ``q`` (s): ``q``'s configuration at
    ``p``'s batch changed to ``p``'s (:func:`dlperf.perfmodel.model.what_if`), every stored
    point of ``p``'s configuration withheld at every batch in every file, ``q``'s series
    taken from ``q``'s results file, else the best-measured one. The baseline of the
    precision rows, which predict ``p`` from ``q``'s trace (the other precision at the same
    batch) without seeing any point of ``p``'s precision: the prediction of the back-test's
    what-if rows (``what-if fp32->bf16``, :func:`dlperf.validation.backtest.whatif_rows`,
    whose target configuration is withheld the same way), on the records and shared fits
    :func:`dlperf.perfmodel.api.predict` reads. Not ``api.predict`` with a precision what-if:
    that answers a target stored at other batches from the target's own series
    (:func:`dlperf.perfmodel.api.stored_target`). None on error."""
    try:
        from dlperf.perfmodel import api
        from dlperf.perfmodel import model as pm
        from dlperf.perfmodel import request as rq
        from dlperf.perfmodel.calibrate import Calibration, Config

        loaded = api.records_of(files)
        recs = api.gpu_records(loaded, rq.gpu_of(loaded, p.device_name or p.device)[1])
        target = Config.of(p)
        cal = Calibration(recs, target.matches, share_efficiencies=api.shared_fits(recs))
        for src in (q.source, None):
            try:
                return pm.what_if(cal, Config.of(q), target, p.batch_size, src).step_time_s
            except (LookupError, ValueError):
                continue
        return None
    except Exception:  # noqa: BLE001 - a baseline that cannot answer is left out
        return None


def host_of(pool: list[tuple[Any, replay.StepTrace]]) -> float | None:
    """The pool's host time per step (:func:`dlperf.perfmodel.replay.host_level`; the traces'
    kernel times by file and row id: the pool may hold points of several files)."""
    return replay.host_level([p for p, _ in pool],
                             {replay.trace_key(p): st.kernel_s for p, st in pool})


def repeat_errors(p: Any, groups: dict[tuple[Any, int, str | None], dict[str, Any]]
                  ) -> list[float]:
    """The errors ``q / p - 1`` of each other stored measurement ``q`` of ``p``'s point taken
    as the prediction of ``p``'s measured step: ``groups``
    (:func:`dlperf.validation.backtest.repeat_groups`, the first stored of each one-device
    point in each file, by GPU) at ``p``'s configuration, batch and GPU (``device_name``),
    ``p``'s own file left out, in the groups' file order; none for an N-device point (the
    groups are one-device)."""
    from dlperf.perfmodel.calibrate import Config

    if p.world_size != 1:
        return []
    own = os.path.realpath(p.source)
    return [q.step_time_s / p.step_time_s - 1
            for src, q in groups.get((Config.of(p), p.batch_size, p.device_name), {}).items()
            if os.path.realpath(src) != own]


def host_scatter(p: Any, pool: list[tuple[Any, replay.StepTrace]]) -> float | None:
    """For a host-bound point ``p`` (:func:`dlperf.perfmodel.replay.host_bound`, its traced
    kernel time the busy time where no ``busy_s`` is stored), the error ``level / p - 1`` of
    its configuration's host level taken as its step, the level
    (:func:`dlperf.perfmodel.replay.host_level`) of the other host-bound points of ``pool``
    (its configuration's traced points) at other batch sizes; None where ``p`` is not
    host-bound or no other point is."""
    ks = {replay.trace_key(q): st.kernel_s for q, st in pool}
    if not replay.host_bound(p, ks):
        return None
    others = [q for q, _ in pool if q.batch_size != p.batch_size and replay.host_bound(q, ks)]
    level = replay.host_level(others, ks) if others else None
    return level / p.step_time_s - 1 if level else None


def repeats_of(files: list[str]) -> dict[tuple[Any, int, str | None], dict[str, Any]]:
    """:func:`dlperf.validation.backtest.repeat_groups` of the results files ``files`` (each
    file once, by its resolved path: :func:`dlperf.results.dbfile.results_files`)."""
    from dlperf.perfmodel import records
    from dlperf.validation import backtest

    return backtest.repeat_groups(records.load(files))


def floors(p: Any, groups: dict[tuple[Any, int], dict[str, Any]],
           pool: list[tuple[Any, replay.StepTrace]]) -> dict[str, Any]:
    """A row's noise-floor fields for its target point ``p``: ``repeat_errors``
    (:func:`repeat_errors`) and ``host_scatter`` (:func:`host_scatter` in ``pool``)."""
    return {"repeat_errors": repeat_errors(p, groups), "host_scatter": host_scatter(p, pool)}


def profile(pairs: list[tuple[Any, replay.StepTrace]], ceilings: list[str]) -> Any:
    """The traces' GPU profile: its datasheet with the ceilings every stored result of the
    ``ceilings`` files measured on it (the H200's: bandwidth 4.23 TB/s, not the datasheet's
    4.8)."""
    from dlperf.perfmodel import records

    name = pairs[0][0].device_name or "NVIDIA H200"
    pts = records.load(ceilings).points if ceilings else [p for p, _ in pairs]
    return hardware.profile_from_points(pts, name)


def run(db: str | list[str], with_baseline: bool,
        cats: tuple[str, ...] = ("own", "batch", "precision"),
        ceilings: list[str] | None = None,
        pairs: list[tuple[Any, replay.StepTrace]] | None = None,
        sides: tuple[str, ...] = ("dev", "test")) -> list[dict[str, Any]]:
    """The back-test's rows of the categories ``cats`` (``own``, ``batch`` (with compile),
    ``precision``) on the traces of ``db`` (one results file or several, one pool; or
    ``pairs``, already loaded), of the models on ``sides`` of the split. Each row carries its
    target point's noise-floor fields (:func:`floors`; the repeats from ``db`` and the
    ``ceilings`` files)."""
    files = [db] if isinstance(db, str) else list(db)
    if pairs is None:
        pairs = [x for f in files for x in replay.load_traces(f)]
    pairs = [x for x in pairs if side(x[0].model) in sides]
    gpu = profile(pairs, ceilings or [])
    fam: dict[tuple, list[tuple[Any, replay.StepTrace]]] = {}
    for p, st in pairs:
        if p.compile_mode == "default":
            fam.setdefault((p.model, p.framework, p.mode, p.precision), []).append((p, st))
    groups = repeats_of([*files, *(ceilings or [])])

    def fl(p: Any) -> dict[str, Any]:
        pool = fam.get((p.model, p.framework, p.mode, p.precision), []) \
            if p.compile_mode == "default" else []
        return floors(p, groups, pool)
    rows: list[dict[str, Any]] = []
    for p, st in pairs if "own" in cats else []:
        r = replay.replay_own(p, st)
        rows.append(_row("own trace", p, r.step_s, "own trace, own probe", **fl(p)))
    for key, pool in fam.items() if "batch" in cats else []:
        pool.sort(key=lambda x: x[0].batch_size)
        cat_b = "compile" if key[2] == "graph" else "batch"
        for p, _ in pool:
            others = [x for x in pool if (x[0].source, x[0].result_id)
                      != (p.source, p.result_id) and x[0].batch_size != p.batch_size]
            if not others:
                continue
            h = host_of(others)
            base = baseline(files, p) if with_baseline else None
            floor = fl(p)  # the target's: the same for each of its rows
            for q, st in others:
                pred = replay.simulate(to_batch(
                    replay.deinflate(st, h, q.dispatch_s), p.batch_size, gpu)).step_s
                near = 0.5 <= p.batch_size / q.batch_size <= 2
                rows.append(_row(f"{cat_b}, one trace ({'1/2-2x' if near else 'further'})", p,
                                 pred, f"b={q.batch_size} -> {p.batch_size}", base, **floor))
            lo = [x for x in others if x[0].batch_size < p.batch_size]
            hi = [x for x in others if x[0].batch_size > p.batch_size]
            two = (lo[-1], hi[0]) if lo and hi else (
                tuple(others[:2]) if not lo else tuple(others[-2:]))
            if len(two) == 2:
                a, b = (replay.deinflate(x[1], h, x[0].dispatch_s) for x in two)
                pred = replay.simulate(interpolate_batch(a, b, p.batch_size)).step_s
                rows.append(_row(f"{cat_b}, interpolated", p, pred,
                                 f"b={two[0][0].batch_size},{two[1][0].batch_size} -> "
                                 f"{p.batch_size}", base, **floor))
    for key, pool in fam.items() if "precision" in cats else []:
        other = "bf16" if key[3] == "fp32" else ("fp32" if key[3] == "bf16" else None)
        if other is None:
            continue
        src_pool = {q.batch_size: (q, st) for q, st in fam.get((*key[:3], other), [])}
        h_src = host_of(list(src_pool.values()))
        for p, _ in pool:
            if p.batch_size not in src_pool:
                continue
            q, st = src_pool[p.batch_size]
            pred = replay.simulate(to_precision(
                replay.deinflate(st, h_src, q.dispatch_s), key[3], gpu)).step_s
            base = whatif_baseline(files, p, q) if with_baseline else None
            noise = max(0.02, (p.ci_rel or 0) + (q.ci_rel or 0))
            change = p.step_time_s / q.step_time_s - 1
            rows.append(_row(f"precision {other} -> {key[3]}", p, pred, f"{other} -> {key[3]}",
                             base,
                             measured_change=change, predicted_change=pred / q.step_time_s - 1,
                             beyond_noise=abs(change) > noise, **fl(p)))
    return rows


def dp_inputs(db: str, sides: tuple[str, ...] = ("dev", "test")) -> list[dict[str, Any]]:
    """Each stored N-rank point of ``db`` (one results file) with a timeline, a bucket record
    and an all-reduce sweep of its rank count, of the models on ``sides``: the point, its
    traced iterations (:func:`cpureplay.cpu_iteration`), bucket bytes in reduction order,
    DDP's untraced compute and the sweep's fit."""
    from dlperf.perfmodel import records
    from dlperf.results import timelines
    from dlperf.results.store import ResultStore
    from dlperf.validation import bucketcheck

    recs = records.load([db])
    out = []
    with ResultStore(db, read_only=True) as store:
        for p in recs.points:
            if p.world_size < 2 or not p.buckets or side(p.model) not in sides:
                continue
            fit = bucketcheck.sweep_fit(recs.collectives, p)
            tl = timelines.load(store, p.result_id)
            row = store._db.execute("SELECT result_json FROM results WHERE id=?",
                                    (p.result_id,)).fetchone()
            res = json.loads(row[0] or "{}")
            params = cpureplay.bucket_params_of(res)
            if fit is None or not tl or not params:
                continue
            ops = timelines.decode(tl)
            try:
                steps = [cpureplay.cpu_iteration(tl, ops, k, params)
                         for k in range(len(tl.get("steps_ns") or []))]
            except ValueError:
                continue
            one = [q.step_time_s for q in recs.points if q.world_size == 1
                   and (q.model, q.framework, q.mode, q.precision, q.device)
                   == (p.model, p.framework, p.mode, p.precision, p.device)
                   and q.batch_size == p.per_device_batch]
            out.append({"point": p, "steps": steps, "fit": fit,
                        "sizes": [b.size_bytes for b in p.buckets[0].buckets],
                        "untraced_s": cpureplay.ddp_compute_s(res),
                        "one_rank_s": statistics.median(one) if one else None})
    return out


def dp_baseline(x: dict[str, Any], s: cpureplay.CpuStep) -> float:
    """The step-level WFBP (:func:`dlperf.perfmodel.dataparallel.exposed_comm`) over the same
    de-inflated compute ``C`` as the replay: ``C + X``, ``X`` the recursion's exposed
    all-reduce over DDP's default buckets of the point's parameters, ready uniformly over a
    backward of 2/3 of ``C``, each at the sweep's fit."""
    from dlperf.perfmodel import dataparallel

    c = cpureplay.deinflate(s, x["untraced_s"]).compute_s
    return c + dataparallel.exposed_comm(x["point"].params, c, x["fit"].time_s)[0]


def dp_rows(db: str, with_baseline: bool, sides: tuple[str, ...] = ("dev", "test")
            ) -> list[dict[str, Any]]:
    """The ``data parallel (CPU gloo)`` rows of ``db``: the median prediction over the
    traced iterations after the first (:func:`cpureplay.median_prediction`). Their noise-floor
    fields (:func:`floors`) are empty: the repeats are of one-device points."""
    rows = []
    for x in dp_inputs(db, sides):
        p = x["point"]
        pred = cpureplay.median_prediction(x["steps"], lambda s, x=x: cpureplay.predict(
            s, x["untraced_s"], x["sizes"], x["fit"].time_s).step_s)
        base = cpureplay.median_prediction(x["steps"], lambda s, x=x: dp_baseline(x, s)) \
            if with_baseline else None
        rows.append(_row(DP_CATEGORY, p, pred, f"{p.world_size} ranks x {p.per_device_batch}, "
                         f"{len(x['sizes'])} buckets, rank 0's trace", base,
                         **floors(p, {}, [])))
    return rows


#: The data-parallel designs compared on the development rows (``--dp-designs``): name ->
#: ``(de-inflate, compute_rate, comm_rate, de-contend)``; None rates: no all-reduce at all.
DP_DESIGNS = {
    "traced, free overlap (1, 1)": (False, 1.0, 1.0, False),
    "traced, shared 0.5, de-contended": (False, 0.5, 0.5, True),
    "de-inflated, no all-reduce": (True, None, None, False),
    "de-inflated, free overlap (1, 1)": (True, 1.0, 1.0, False),
    "de-inflated, not overlapped (0, 1)": (True, 0.0, 1.0, False),
    "de-inflated, all-reduce at half speed (1, 0.5)": (True, 1.0, 0.5, False),
    "de-inflated, shared 0.3, de-contended": (True, 0.3, 0.3, True),
    "de-inflated, shared 0.5, de-contended (chosen)": (True, 0.5, 0.5, True),
    "de-inflated, shared 0.7, de-contended": (True, 0.7, 0.7, True),
}


def dp_designs(db: str) -> str:
    """The development rows' MdAPE and errors of each of :data:`DP_DESIGNS`, and the
    baseline's (a table in markdown)."""
    xs = dp_inputs(db, ("dev",))
    out = ["| design | dev MdAPE | mean abs. error | errors |", "|---|---:|---:|---|"]

    def one(x: dict[str, Any], s: cpureplay.CpuStep, d: tuple) -> float:
        dfl, rc, rm, dec = d
        s = cpureplay.deinflate(s, x["untraced_s"]) if dfl else s
        if rc is None:
            return s.compute_s
        return cpureplay.predict(s, None, x["sizes"], x["fit"].time_s, rc, rm, dec).step_s

    designs: dict[str, Any] = {k: (lambda x, s, d=d: one(x, s, d)) for k, d in
                               DP_DESIGNS.items()}
    designs["baseline: step-level WFBP, same compute"] = dp_baseline

    def one_rank(x: dict[str, Any], s: cpureplay.CpuStep) -> float:
        # the compute of the stored untraced 1-rank run of the per-device batch, the
        # all-reduces shared as chosen: what a 1-rank input gives without a contention term
        if not x["one_rank_s"]:
            return float("nan")
        s = cpureplay.scale(s, x["one_rank_s"] / s.compute_s)
        return cpureplay.predict(s, None, x["sizes"], x["fit"].time_s, contended=False).step_s

    designs["compute from the untraced 1-rank run (fcn5 only), shared 0.5"] = one_rank
    for name, fn in designs.items():
        errs = [(x["point"], cpureplay.median_prediction(
                    x["steps"], lambda s, x=x, fn=fn: fn(x, s))
                 / x["point"].step_time_s - 1) for x in xs]
        errs = [(p, e) for p, e in errs if e == e]
        med = statistics.median(abs(e) for _, e in errs) if errs else float("nan")
        mean = statistics.fmean(abs(e) for _, e in errs) if errs else float("nan")
        out.append(f"| {name} | {med * 100:.1f}% | {mean * 100:.1f}% | " + ", ".join(
            f"{p.model} {p.world_size}x{p.per_device_batch} {e * 100:+.1f}%" for p, e in errs)
            + " |")
    return "\n".join(out)


def floor_cell(rs: list[dict[str, Any]], value: Any) -> str:
    """A noise-floor cell of the rows ``rs``: the median of ``value(row)`` (an |error|, None
    for a row without one) over the rows that have one, how many of the rows those are, and
    the replay's MdAPE on those rows; ``-`` where none has one."""
    on = [(v, abs(r["error"])) for r in rs if (v := value(r)) is not None]
    if not on:
        return "-"
    return (f"{statistics.median(v for v, _ in on) * 100:.1f}% ({len(on)} of {len(rs)}; "
            f"replay {statistics.median(e for _, e in on) * 100:.1f}%)")


def repeat_floor(r: dict[str, Any]) -> float | None:
    """A row's noise floor: the median |error| of its target's repeats
    (``repeat_errors``, :func:`repeat_errors`), None without one."""
    e = r.get("repeat_errors") or []
    return statistics.median(abs(x) for x in e) if e else None


def scatter_floor(r: dict[str, Any]) -> float | None:
    """A row's host-bound scatter: ``|host_scatter|`` (:func:`host_scatter`), None without."""
    x = r.get("host_scatter")
    return None if x is None else abs(x)


def summarise(rows: list[dict[str, Any]]) -> str:
    """The back-test's table (markdown), a line per category and side: rows, the replay's
    MdAPE, 90th percentile |error| and share within 3%, the step-level MdAPE on the rows it
    answers, the signs right beyond noise (precision rows), then on the same rows the noise
    floor (:func:`repeat_floor`) and the host-bound scatter (:func:`scatter_floor`), each
    with the rows that have one and the replay's MdAPE on those (:func:`floor_cell`)."""
    cats = list(dict.fromkeys(r["category"] for r in rows))
    out = ["| category | side | rows | replay MdAPE | replay p90 | within 3% | "
           "step-level MdAPE (same rows) | signs right (beyond noise) | "
           "noise floor MdAPE (n of rows; replay on them) | "
           "host-bound scatter MdAPE (n of rows; replay on them) |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in cats:
        for s in ("dev", "test"):
            rs = [r for r in rows if r["category"] == c and r["side"] == s]
            if not rs:
                continue
            a = sorted(abs(r["error"]) for r in rs)
            b = [abs(r["baseline_error"]) for r in rs if r.get("baseline_error") is not None]
            sig = [r for r in rs if r.get("beyond_noise")]
            right = sum(1 for r in sig if math.copysign(1, r["predicted_change"])
                        == math.copysign(1, r["measured_change"]))
            out.append(f"| {c} | {s} | {len(rs)} | {statistics.median(a) * 100:.1f}% | "
                       f"{a[min(len(a) - 1, int(0.9 * len(a)))] * 100:.1f}% | "
                       f"{sum(x <= 0.03 for x in a) / len(a):.0%} | "
                       + (f"{statistics.median(b) * 100:.1f}% ({len(b)})" if b else "-")
                       + " | " + (f"{right}/{len(sig)}" if sig else "-") + " | "
                       + floor_cell(rs, repeat_floor) + " | "
                       + floor_cell(rs, scatter_floor) + " |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", action="append",
                    help="results file (repeatable: one pool; default the H200's "
                         "calibration2.db)")
    ap.add_argument("--side", choices=("dev", "test"), default=None,
                    help="only the development or only the test models' rows")
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--json", default=None)
    ap.add_argument("--only", action="append", choices=("own", "batch", "precision", "dp"),
                    help="run only these categories (repeatable)")
    ap.add_argument("--ceilings", action="append",
                    help="results files whose measured ceilings give the GPU profile "
                         "(default: every file of benchmarks/results/h200)")
    ap.add_argument("--dp-db", default=str(DP_DB),
                    help="N-rank CPU gloo runs with timelines and bucket records "
                         "(the data parallel category)")
    ap.add_argument("--dp-designs", action="store_true",
                    help="print the data-parallel designs' development rows and exit")
    args = ap.parse_args()
    if args.dp_designs:
        print(dp_designs(args.dp_db))
        return 0
    t = time.perf_counter()
    ceilings = args.ceilings or default_ceilings()
    dbs = args.db or [str(ROOT / "benchmarks/results/h200/calibration2.db")]
    cats = tuple(args.only or ("own", "batch", "precision", "dp"))
    sides = (args.side,) if args.side else ("dev", "test")
    rows = run(dbs, not args.no_baseline, cats, ceilings, sides=sides) \
        if set(cats) - {"dp"} else []
    if "dp" in cats:
        rows += dp_rows(args.dp_db, not args.no_baseline, sides)
    if args.json:
        key = inputs_key(dbs, ceilings, args.dp_db, cats, sides, not args.no_baseline)
        Path(args.json).write_text(json.dumps({"inputs_key": key, "rows": rows}, indent=1)
                                   + "\n")
    print(summarise(rows))
    print(f"\n{len(rows)} rows in {time.perf_counter() - t:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
