"""A prediction's interval: which back-test residuals judge it, and at which level.

:func:`interval_of` gives :func:`dlperf.perfmodel.api.predict` its interval. The residuals
are those of the prediction's *path*, the back-test category that makes predictions the way
it was made (a series' by its batch sizes, :func:`series_category`; a what-if's,
:func:`dlperf.perfmodel.whatifs.whatif_category`; N devices',
:data:`dlperf.perfmodel.api.NPROC_CATEGORY`), from the residual table of the files predicted
from (this process's tables, :func:`install_residuals`, else the one written beside the
files, :func:`dlperf.perfmodel.fitcache.read_table`), else from the same path in another
table (:func:`borrowable`), widened where its devices are not the prediction's. A
prediction its path's back-test does not judge (:data:`NOT_BACKTESTED`: N devices never
stored, a batch beyond the validated ratio, a what-if of more changes or in a direction no
back-test pairs, a host-speed what-if) borrows its path's residuals at a wider level and says
why. The interval itself is :func:`dlperf.perfmodel.intervals.mondrian`'s. Reads tables only:
never runs a back-test.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterable
from typing import Any, Protocol

from dlperf.perfmodel import fitcache as fc
from dlperf.perfmodel import intervals as iv
from dlperf.perfmodel import model as pm
from dlperf.perfmodel import request as rq
from dlperf.perfmodel.memo import once
from dlperf.perfmodel.records import Records, point_id
from dlperf.perfmodel.request import Request
from dlperf.perfmodel.whatifs import (
    FRAMEWORK_WHATIFS,
    JUDGED_CHANGES,
    JUDGED_STEPS,
    steps_of,
    whatif_category,
)


class Drafted(Protocol):
    """What the interval choice reads of a prediction being composed
    (:class:`dlperf.perfmodel.api.Draft`): its one-device parts, its path and its step (s),
    and what it adds to it: assumptions, and the interval's numbers for ``--explain``."""

    one: pm.OneDevice
    path: str
    step_s: float
    assumptions: list[str]
    explain: dict[str, Any]


#: This process's residual tables: (model key, data digest) -> ``(category -> ``(residual,
#: bound, point)``, "")``, read from the table beside the data or installed by a validation
#: (:func:`install_residuals`); ``(None, why)`` where the files have none (why: for the
#: prediction's note).
_TABLES: dict[tuple[str, str], tuple[dict[str, list[iv.KeyedResidual]] | None, str]] = {}


def table_key(recs: Records) -> tuple[str, str]:
    """The residual table's key of ``recs``: the model's source and the files' content."""
    return fc.model_key(), fc.data_digest(recs.sources)


def install_residuals(recs: Records, table: dict[str, list[iv.KeyedResidual]]) -> None:
    """Make ``table`` (category -> ``(residual, bound, point)``: a full validation's,
    :func:`dlperf.validation.residual_table`) this process's residual table of ``recs`` under
    the current model (:func:`table_key`): later predictions on the same files take their
    intervals from it, and the reason recorded for a missing table (:data:`_TABLES`) is
    dropped. Writes nothing to disk (:func:`fitcache.write_table` does)."""
    _TABLES[table_key(recs)] = table, ""


def residuals(recs: Records, category: str) -> list[float]:
    """Held-out ``log(measured / predicted)`` of one back-test category on ``recs``
    (:func:`bounded_residuals` without the bounds)."""
    return [r for r, _ in bounded_residuals(recs, category)]


def bounded_residuals(recs: Records, category: str,
                      exclude: Collection[str] = ()) -> list[iv.Residual]:
    """Held-out ``(log(measured / predicted), bound)`` of one back-test category on ``recs``,
    from the residual table (:func:`_keyed_residuals`); ``exclude``: the measured points
    (``source:result_id``) whose residuals are left out (:func:`intervals.without_points`)."""
    return iv.without_points(_keyed_residuals(recs, category), exclude)


def _keyed_residuals(recs: Records, category: str) -> list[iv.KeyedResidual]:
    """The category's residuals from this process's table of ``recs`` (:func:`_table`); empty
    when there is none of the current key. Never runs a back-test."""
    return (_table(recs)[0] or {}).get(category, [])


def _table(recs: Records) -> tuple[dict[str, list[iv.KeyedResidual]] | None, str]:
    """This process's residual table of ``recs`` under the current model and ``""``, read
    once from the one beside the data (:func:`fitcache.read_table`) unless a validation
    installed one; None and why there is none."""
    return once(_TABLES, table_key(recs), lambda: fc.read_table(recs.sources))


def _interval(recs: Records, category: str, level: float, bound: str | None,
              withheld: Iterable = ()) -> iv.Interval | None:
    """The Mondrian conformal interval of a prediction of ``bound`` made as ``category``,
    without the residuals of the ``withheld`` points (the stored measurements of the point
    predicted: :func:`intervals.without_points`)."""
    ids = {point_id(p) for p in withheld}
    return iv.mondrian([x for c in iv.calibration_categories(category)
                        for x in bounded_residuals(recs, c, ids)], bound, level, category)


#: The back-test category (path) of a prediction from a series, by ``(batch sizes in the
#: series: 1, 2, or 3 for more; the batch above (1), below (-1) or within (0) them; at least
#: twice the largest (1), at most half the smallest (-1), or neither (0))``; any other key:
#: ``held-out batch`` (:func:`series_category`).
SERIES_PATHS = {
    (1, 1, 0): "one-point series up", (1, 1, 1): "one-point series up",
    (1, -1, 0): "one-point series down", (1, -1, -1): "one-point series down",
    (2, 1, 0): "two-point series up", (2, 1, 1): "two-point series up",
    (2, -1, 0): "two-point series down", (2, -1, -1): "two-point series down",
    (3, 1, 1): "extrapolate 2x", (3, -1, -1): "extrapolate down 2x",
}


def series_category(batches: Iterable[int], batch: int) -> str:
    """The back-test category whose residuals judge a prediction at per-device ``batch`` from a
    series fitted on ``batches`` (:data:`SERIES_PATHS`): a series of one or two batch sizes
    has its own categories, up or down; a longer one is ``extrapolate 2x`` (``extrapolate
    down 2x``) at twice its largest batch or more (half its smallest or less), else
    ``held-out batch``."""
    bs = sorted(set(batches)) or [batch]
    side = (batch > bs[-1]) - (batch < bs[0])
    far = (batch >= 2 * bs[-1]) - (2 * batch <= bs[0])
    return SERIES_PATHS.get((min(len(bs), 3), side, far), "held-out batch")


#: The largest ratio of a predicted batch to the nearest batch of the series fitted that each
#: series category's back-test holds (:func:`backtest.batch_rows`, :func:`backtest.
#: few_point_rows`), on the development rows of benchmarks/results/h200 + h200x2 (test rows:
#: the same): ``extrapolate 2x`` predicts a series' largest batch from those at most half of it,
#: up to 4x the largest kept; the one- and two-point categories predict a neighbouring stored
#: batch, up to 16x. A prediction further out is not validated (:func:`beyond_validated`).
VALIDATED_RATIO = {"extrapolate 2x": 4.0, "extrapolate down 2x": 4.0,
                   "one-point series up": 16.0, "one-point series down": 16.0,
                   "two-point series up": 16.0, "two-point series down": 16.0}


def beyond_validated(one: pm.OneDevice, batch: int) -> tuple[str, float, float, int] | None:
    """``(category, ratio, the category's validated ratio, the nearest fitted batch)`` where
    ``batch`` (per device) is further from the fitted series' batch sizes than its category's
    back-test went (:data:`VALIDATED_RATIO`): ``ratio`` is the batch over the largest fitted
    batch (above it) or the smallest over the batch (below it), the nearest that batch; None
    otherwise, or without a series."""
    if one.how != "series" or one.fit is None or not one.fit.batch_sizes:
        return None
    bs = one.fit.batch_sizes
    cat = series_category(bs, batch)
    ratio = max(batch / max(bs), min(bs) / batch)
    limit = VALIDATED_RATIO.get(cat)
    near = min(bs, key=lambda x: abs(batch / x - x / batch))
    return (cat, ratio, limit, near) if limit is not None and ratio > limit else None


def _unjudged_steps(d: Drafted, req: Request) -> list[tuple[str, str, str]]:
    """The precision and mode changes of ``req``'s what-if (:func:`~dlperf.perfmodel.whatifs.whatif_changes`) that the
    back-test rows of its path ``d.path`` never make (:data:`JUDGED_STEPS`), sorted."""
    return sorted(steps_of(req.base, req.target, req.changes)
                  - JUDGED_STEPS.get(d.path, frozenset()))


def _beyond_its_path(d: Drafted, req: Request) -> tuple[str, float, float, int] | None:
    """:func:`beyond_validated` of the drafted series at ``req``'s per-device batch where its
    category is the draft's own path ``d.path``, else None; looked up once."""
    far = beyond_validated(d.one, req.batch)
    return far if far is not None and far[0] == d.path else None


def _judged_words(path: str) -> str:
    """How many changes at once the back-test rows of ``path`` make, in words."""
    return ("one change alone", "two changes at once")[JUDGED_CHANGES.get(path, 1) - 1]


def _not_tested(d: Drafted, change: str) -> str:
    return (f"the '{d.path}' back-test: {change} is not back-tested on stored pairs, so its own "
            "error is not known here")


#: The predictions whose own path no back-test judges, in the order they are checked, each
#: ``(found, why)``: ``found(draft, request, the device counts of the stored N-device points)``
#: gives what keeps the prediction off its path's back-test (falsy where nothing does), and
#: ``why(draft, request, counts, what found gave)`` says it (:func:`_not_backtested`):
#: N devices of a count no stored point has (the stored counts' residuals stand in), a batch
#: further from the series than its category's back-test went (:func:`beyond_validated`), a
#: what-if of several changes at once (:func:`~dlperf.perfmodel.whatifs.whatif_changes`: the category
#: :func:`whatif_category` gives it, which judges one of them, stands in), a host-speed
#: what-if, a framework what-if not in :data:`FRAMEWORK_WHATIFS` (its path's residuals stand
#: in), a what-if changing precision or mode in a direction its path's rows never take
#: (:func:`_unjudged_steps`). Their interval is borrowed at a wider level (:func:`interval_of`).
NOT_BACKTESTED: tuple[tuple[Callable[[Drafted, Request, set[int]], Any],
                            Callable[[Drafted, Request, set[int], Any], str]], ...] = (
    (lambda d, req, stored: req.world > 1 and req.world not in stored,
     lambda d, req, stored, _: f"the {sorted(stored)}-device back-test: no stored measurement "
                               f"of {req.world} devices"),
    (lambda d, req, stored: _beyond_its_path(d, req),
     lambda d, req, stored, far: "the '{0}' back-test, which went up to {2:g}x the nearest "
                                 "fitted batch: {1:.3g}x is not validated".format(*far)),
    (lambda d, req, stored: len(req.changes) > JUDGED_CHANGES.get(d.path, 1),
     lambda d, req, stored, _: _not_tested(
         d, f"a what-if of several changes ({rq._and(list(req.changes))}: the category judges "
            f"{_judged_words(d.path)})")),
    (lambda d, req, stored: req.host_ns is not None,
     lambda d, req, stored, _: _not_tested(d, "a host-speed change")),
    (lambda d, req, stored: (req.from_base and req.target.framework != req.base.framework
                             and whatif_category(req.base, req.target.with_(
                                 precision=req.base.precision)) not in FRAMEWORK_WHATIFS.values()),
     lambda d, req, stored, _: _not_tested(d, "a change of framework")),
    (lambda d, req, stored: _unjudged_steps(d, req),
     lambda d, req, stored, steps: _not_tested(d, "a change of " + rq._and(
         [f"{k} {a} -> {b}" for k, a, b in steps]))),
)


def _not_backtested(d: Drafted, req: Request, stored: set[int]) -> str | None:
    """Why the drafted prediction's own path does not judge it: the first of
    :data:`NOT_BACKTESTED` that finds something, each looked for once; None where none does.
    ``stored``: the device counts of the stored one-node N-device points."""
    return next((why(d, req, stored, got) for found, why in NOT_BACKTESTED
                 if (got := found(d, req, stored))), None)


def interval_of(d: Drafted, recs: Records, req: Request, level: float, gpu: str | None = None
                 ) -> tuple[tuple[float, float], str | None, str | None]:
    """``(interval (s), where it came from, why there is none)`` of the drafted step: the
    Mondrian conformal interval of its path's residuals in the files' own residual table
    (:func:`_interval`). Borrowed at the wider level ``1 - (1 - level) / 2`` (95% for 90%),
    and said so: the residuals of a path that is not the prediction's own (N devices of a
    count no stored point has: the stored counts'; a host-speed what-if, or a framework
    what-if not in :data:`FRAMEWORK_WHATIFS`, never back-tested: its path's), and those of
    the same path in a committed residual table of other files where the files' own table has
    none (:func:`_borrowed_interval`), widened where that table's devices are not the
    prediction's ``gpu`` (:func:`intervals.cross_gpu`). A borrowed interval holds the same
    residuals' interval at ``level`` on each side (:func:`intervals.conformal_bounds` is
    monotone in the level). Several nodes are not validated: no interval."""
    if req.nnodes > 1:
        note = (f"multi-node: not validated (no stored measurement of {req.nnodes} nodes to "
                "judge this kind of prediction against)")
        d.assumptions.append("no interval: " + note)
        return (float("nan"), float("nan")), None, note
    stored_n = {p.world_size for p in recs.points if p.world_size > 1 and p.nnodes == 1}
    why = _not_backtested(d, req, stored_n)
    wider = 1 - (1 - level) / 2
    at = wider if why else level
    ivl = _interval(recs, d.path, at, d.one.bound, req.withheld)
    if ivl is None:  # no residual of the path in these files' table: another table's
        return _other_tables_interval(d, recs, req, level, wider, gpu)
    group = (f"{ivl.describe()}; these files' residual table "
             f"({fc.relative_if_under_cwd(fc.table_file(recs.sources))})")
    d.explain["interval"] = _interval_words(ivl, at, d.step_s)
    if why:
        group = f"borrowed from {d.path} at {wider:.0%}: {group}"
        _say_widened(d, at, level, why)
    t = d.step_s
    return (t * ivl.low_ratio, t * ivl.high_ratio), group, None


def _other_tables_interval(d: Drafted, recs: Records, req: Request, level: float, wider: float,
                           gpu: str | None) -> tuple[tuple[float, float], str | None, str | None]:
    """:func:`interval_of` from the same path in another residual table
    (:func:`_borrowed_interval`) at the ``wider`` level, widened where its devices are not the
    prediction's ``gpu``; no interval (and why) without one."""
    got = _borrowed_interval(recs, d.path, wider, d.one.bound, req.withheld)
    own, no_interval, note = _no_own_residual(d, recs)
    if got is None:
        d.assumptions.append(no_interval)
        return (float("nan"), float("nan")), None, note
    ivl, table, gpus = got
    d.explain["interval"] = _interval_words(ivl, wider, d.step_s)
    ivl, gpu_words = iv.cross_gpu(ivl, gpu, gpus, d.one.cfg.device)
    d.explain["interval"]["widened"] = [ivl.low_ratio, ivl.high_ratio, gpu_words]
    d.assumptions.append(f"borrowed interval: {gpu_words}")
    _say_widened(d, wider, level, f"the same path in {table}: {own}")
    t = d.step_s
    return ((t * ivl.low_ratio, t * ivl.high_ratio),
            f"borrowed from {table} at {wider:.0%}: {ivl.describe()}; {gpu_words}", None)


def _interval_words(ivl: iv.Interval, level: float, step_s: float) -> dict[str, Any]:
    """The interval's numbers for :attr:`Prediction.explanation`: its residual group, rows,
    method, level, the ranks taken (:func:`intervals.ranks_of`), the ratios and the step they
    multiply (s)."""
    return {"group": ivl.group, "rows": ivl.n, "method": ivl.method, "level": level,
            "ranks": iv.ranks_of(ivl.n, level, ivl.method), "low_ratio": ivl.low_ratio,
            "high_ratio": ivl.high_ratio, "step_s": step_s}


def _say_widened(d: Drafted, at: float, level: float, why: str) -> None:
    d.assumptions.append(f"interval borrowed at a wider level ({at:.0%} for {level:.0%}) "
                         f"from {why}")


def _borrowed_interval(recs: Records, category: str, level: float, bound: str | None,
                       withheld: Iterable = ()
                       ) -> tuple[iv.Interval, str, frozenset[str]] | None:
    """The interval of ``category``'s residuals (with those it is pooled with,
    :func:`intervals.calibration_categories`) in the best other residual table of the
    current model (:func:`fitcache.borrowable`: the tables beside the files and the ones
    committed with the repository's results), that table in words and the devices of its
    fits; None without one.
    The best: the entry with residuals of the category that shares the most results files
    with ``recs``, then the one with the fewest others (the closest data: a file of the H200
    folder borrows the folder's table). The points predicted keep out of it
    (:func:`intervals.without_points`). Reads tables only: never runs a back-test."""
    ids = {point_id(p) for p in withheld}
    mine = {os.path.realpath(s) for s in recs.sources}
    best = max((e for e in borrowable(recs) if e[2].get(category)), default=None,
               key=lambda e: (len(mine & e[1]), -len(e[1] - mine)))  # ties: the first
    if best is None:
        return None
    name, _, cats, gpus = best
    rows = [x for c in iv.calibration_categories(category) for x in cats.get(c, [])]
    ivl = iv.mondrian(iv.without_points(rows, ids), bound, level, category)
    return None if ivl is None else (ivl, name, gpus)


_BORROWABLE: dict[tuple, list[tuple[str, frozenset[str], dict[str, list[iv.KeyedResidual]],
                                    frozenset[str]]]] = {}


def borrowable(recs: Records) -> list[tuple[str, frozenset[str],
                                              dict[str, list[iv.KeyedResidual]],
                                              frozenset[str]]]:
    """:func:`fitcache.borrowable` for ``recs``' files, read once per process."""
    return once(_BORROWABLE, (fc.model_key(), tuple(recs.sources)),
                lambda: fc.borrowable(recs.sources))


def _no_own_residual(d: Drafted, recs: Records) -> tuple[str, str, str]:
    """Why the residual table of ``recs`` gives the drafted path no residual (no table of the
    current key, or no residual of the path in it), as each place says it: ``(where a
    borrowed interval came from, the assumption of a prediction with no interval, its
    interval note)``."""
    why = _table(recs)[1]
    if why:
        return (f"no residual table for these files ({why})",
                f"no residual table for these files: no interval ({why})",
                f"not validated on these results files ({why}); run dlperf predict --validate "
                "with the same --db to back-test the model and store the table")
    return (f"these files' back-test has no residual of kind '{d.path}'",
            f"no back-test residual of kind '{d.path}' in these files: no interval",
            f"the back-test found no stored point it could predict as a '{d.path}' while "
            "withholding it in these results files, so this kind of prediction's error is not "
            "known here")
