"""Back-test of the input model (:mod:`dlperf.perfmodel.inputpipe`) on stored worker ladders.

:data:`CATEGORY`: leave-one-worker-count-out. For every stored real-data point of a ladder
(same model, framework, mode, precision, device, data set, layout, loader implementation and
batch; :func:`dlperf.perfmodel.inputpipe.ladder_key`) with at least one other worker count,
its mean iteration is predicted from the *other* worker counts only (never its own), with
``t_c`` the stored synthetic-data step of the same configuration and batch (the same results
file first; its mean iteration). Measured: the point's mean iteration (Shi & Chu's ``t`` is a
rate; the median is in the row's label). Baseline, the rule ``dlperf predict`` used before:
``t_c x (1 + s)`` with ``s`` the median stored data-wait share of the ladder's other points
(the only way that rule reaches an unmeasured worker count).

A ladder without a synthetic-data step of the same configuration and batch gives no rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import median

from dlperf.perfmodel import inputpipe as ip
from dlperf.perfmodel.records import Point, Records, point_id
from dlperf.validation.backtest import Budget, Row, charge

CATEGORY = ip.INPUT_CATEGORY
CATEGORIES = (CATEGORY,)


def compute_s(points: Sequence[Point], p: Point) -> float | None:
    """``t_c`` of ``p``: the mean iteration (else the median) of the stored synthetic-data,
    un-instrumented, one-device points of ``p``'s configuration at its batch; those of
    ``p``'s own file when it has any; None when none is stored."""
    syn = ip.compute_config(ip.ladder_key(p)[0])
    same = [q for q in points if syn.matches(q) and not q.instrumented
            and q.per_device_batch == p.per_device_batch]
    own = [q for q in same if q.source == p.source] or same
    return float(median(q.step_time_mean_s or q.step_time_s for q in own)) if own else None


def rows(records: Records, categories: Sequence[str] = CATEGORIES,
         budget: Budget | None = None) -> list[Row]:
    """The :data:`CATEGORY` rows (when asked for in ``categories``), charged to ``budget``
    together as cheap arithmetic (kind ``input``): all or none."""
    if CATEGORY not in categories:
        return []
    out = _rows(records.points)
    return out if charge(budget, "input", [r.category for r in out]) else []


def _rows(points: Sequence[Point]) -> list[Row]:
    ladders: dict[tuple, list[tuple[Point, ip.Rung]]] = {}
    for p in points:
        r = ip.rung_of(p)
        if r is not None:
            ladders.setdefault((*ip.ladder_key(p), r.batch), []).append((p, r))
    out: list[Row] = []
    for lad in ladders.values():  # a ladder of one worker count has no others: no row
        for p, r in lad:
            tc = compute_s(points, p)
            others = [o for _, o in lad if o.workers != r.workers]
            if tc is None or not others:
                continue
            est = ip.estimate(others, r.workers, r.batch, tc)
            base = tc * (1.0 + median(o.share for o in others))
            src = est.calibrated_on[0].rsplit(":", 1)[-1] if est.calibrated_on else "-"
            out.append(Row(CATEGORY, f"{p.label} {p.data} workers={r.workers} "
                           f"({p.loader_impl}) mean {r.step_mean_s * 1e3:.1f} ms median "
                           f"{r.step_median_s * 1e3:.1f} ms t_c {tc * 1e3:.1f} ms from id {src} "
                           f"[{p.source}:{p.result_id}]", r.step_mean_s, est.step_s, base,
                           point=point_id(p), model=p.model))
    return out
