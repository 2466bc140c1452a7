"""Back-test of the WFBP recursion itself on recorded DDP bucket timelines.

A traced PyTorch DDP run records, per rank and per bucket in reduction order, when DDP handed
the bucket to the process group (``ready``), its all-reduce's start and end, and backward's
first and last op (``dist.buckets_timeline``; :class:`dlperf.perfmodel.records.RankBuckets`).
Two checks judge the data-parallel model's communication part on them, each against numbers
it did not use:

* :data:`WFBP_CATEGORY`: the recursion of :func:`dlperf.perfmodel.comm.wfbp_schedule` over
  the *recorded* ready times and bucket bytes, each all-reduce costing ``a + b M`` fitted on a
  stored all-reduce sweep of the same rank count and backend (:func:`sweep_fit`), **not** the
  recorded durations; predicted: the last all-reduce's end (s from backward's start);
  measured: the recorded last end. Baseline: the same recursion over DDP's default buckets of
  the same total bytes with gradients ready uniformly over the recorded backward (what the
  model assumes without a record). The exposed tails (``max(0, end - backward end)``,
  recorded and predicted) are in each row's label: a tail near 0 has no useful relative error;
* :data:`BUCKET_CATEGORY`: each recorded bucket all-reduce's duration against the sweep's
  ``a + b M`` at its bytes; baseline: one ``a + b M`` line over the sweep's sizes >= 1 MiB.

The sweep runs alone; a recorded bucket all-reduce runs beside backward (and, on gloo, beside
other buckets' all-reduces), so the second check measures how far an isolated sweep's cost
carries into a training step.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dlperf.perfmodel import comm
from dlperf.perfmodel.records import CollectivePoint, Point, Records
from dlperf.validation.backtest import Budget, Row, charge

WFBP_CATEGORY = "WFBP last all-reduce end (recorded buckets)"
BUCKET_CATEGORY = "bucket all-reduce vs a + b M"
CATEGORIES = (WFBP_CATEGORY, BUCKET_CATEGORY)


def sweep_points(collectives: list[CollectivePoint], p: Point) -> list[CollectivePoint]:
    """The stored all-reduce sizes that can price ``p``'s buckets: the same rank count, the
    same backend and device name where both are recorded; those of ``p``'s own results file
    when it has any (the same machine), else every file's."""
    pts = [c for c in collectives if c.benchmark == "allreduce" and c.nranks == p.world_size
           and (c.backend is None or p.comm_backend is None or c.backend == p.comm_backend)
           and (c.device_name is None or p.device_name is None
                or c.device_name == p.device_name)]
    same = [c for c in pts if c.source == p.source]
    return same or pts


def sweep_fit(collectives: list[CollectivePoint], p: Point) -> comm.AllReduceFit | None:
    """The piecewise ``a + b M`` (:func:`comm.fit_allreduce`) of :func:`sweep_points`, None
    when too few sizes were stored."""
    return _fit(sweep_points(collectives, p), p.world_size)


def _fit(pts: list[CollectivePoint], nranks: int) -> comm.AllReduceFit | None:
    try:
        return comm.fit_allreduce(pts, nranks)
    except ValueError:
        return None


def _line(pts: list[CollectivePoint]) -> tuple[float, float] | None:
    big = [c for c in pts if c.size_bytes >= 1 << 20]
    if len({c.size_bytes for c in big}) < 2:
        return None
    a, b, _ = comm._line_rel(np.array([c.size_bytes for c in big], float),
                             np.array([c.time_s for c in big], float))
    return a, b


def rows(records: Records, categories: Sequence[str] = CATEGORIES,
         budget: Budget | None = None) -> list[Row]:
    """The rows of ``categories`` (of :data:`CATEGORIES`) over every stored point with a
    recorded bucket timeline and a sweep to price it (a rank without a backward start gives
    no :data:`WFBP_CATEGORY` row). Cheap (a sweep fit and arithmetic per point), so they are
    made first and then charged to ``budget`` all together (``wfbp``): all or none."""
    out = [r for r in _rows(records) if r.category in categories]
    return out if charge(budget, "wfbp", [r.category for r in out]) else []


def _rows(records: Records) -> list[Row]:
    out: list[Row] = []
    for p in records.points:
        if not p.buckets:
            continue
        pts = sweep_points(records.collectives, p)
        fit = _fit(pts, p.world_size)
        if fit is None:
            continue
        line = _line(pts)
        for r in p.buckets:
            tag = f"{p.label} rank {r.rank} [{p.source}:{p.result_id}]"
            for b in r.buckets:
                bl = line[0] + line[1] * b.size_bytes if line else None
                out.append(Row(BUCKET_CATEGORY, f"{tag} bucket {b.index} {b.size_bytes:.0f} B",
                                 b.dur_s, fit.time_s(b.size_bytes), bl, model=p.model))
            t0 = r.t_b_start_s
            if t0 is None or any(b.ready_s is None for b in r.buckets):
                continue
            tb = r.t_b_end_s - t0
            rec = [comm.Bucket(b.size_bytes, (b.ready_s or 0.0) - t0) for b in r.buckets]
            end = comm.wfbp_schedule(rec, fit.time_s)[-1][1]
            uni = comm.wfbp_schedule(comm.uniform_buckets(sum(b.size_bytes for b in r.buckets),
                                                          tb), fit.time_s)[-1][1]
            out.append(Row(WFBP_CATEGORY, f"{tag}: exposed tail recorded "
                             f"{r.exposed_tail_s * 1e3:.1f} ms, predicted "
                             f"{max(0.0, end - tb) * 1e3:.1f} ms", r.last_end_s - t0, end, uni,
                             model=p.model))
    return out
