"""A back-test of the prediction intervals' coverage (:mod:`dlperf.perfmodel.intervals`).

:func:`coverage` judges an interval rule the way the back-test judges the model: every held-out
row's interval is built from the *other* rows of its category and the row counts as covered
when its measurement lies inside. ``holdout="point"`` leaves the row alone out (a new point of a
model whose other points are in the table); ``holdout="model"`` leaves out every row of the
row's model (a model the table has never seen, which is what a test-side row of the frozen
split is): the residuals of one model are correlated (a model the roofline misses is missed at
every batch), so the first reads higher than a new model gets. Two rules are judged
(:data:`RULES`): ``pooled`` and ``mondrian`` (:mod:`dlperf.perfmodel.intervals`, the rule
:func:`dlperf.perfmodel.api.predict` uses).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from statistics import fmean, median
from typing import Any, Protocol, TypeVar

from dlperf.perfmodel import intervals as iv


class Row(Protocol):
    """What a held-out back-test row gives an interval (:class:`dlperf.validation.backtest.Row`;
    a protocol, so that predictions never import the back-test)."""

    category: str
    measured_s: float
    predicted_s: float
    bound: str | None
    point: str | None
    model: str | None


R = TypeVar("R", bound=Row)


#: Interval rule: (residuals, bound of the prediction, level, category) -> interval or None.
Rule = Callable[[Sequence[iv.Residual], str | None, float, str], iv.Interval | None]


RULES: dict[str, Rule] = {"pooled": iv.pooled, "mondrian": iv.mondrian}


def residuals_of(rows: Sequence[Row], category: str) -> list[iv.Residual]:
    """``(log(measured / predicted), bound)`` of the category's rows."""
    return [(r, b) for r, b, _ in keyed_residuals_of(rows, category)]


def keyed_residuals_of(rows: Sequence[Row], category: str) -> list[iv.KeyedResidual]:
    """``(log(measured / predicted), bound, point)`` of the category's rows (``point``:
    :attr:`Row.point`, the measured point's ``source:result_id``)."""
    return [(math.log(r.measured_s / r.predicted_s), r.bound, r.point) for r in rows
            if r.category == category]


#: What :func:`coverage` leaves out of a row's interval: the row (``point``) or every row of
#: its model (``model``; a row without a model: itself). Each rule takes the judged row
#: (its index and row) and a row of its pool (index and row), True for one left out.
HOLDOUTS: dict[str, Callable[[int, Any, int, Any], bool]] = {
    "point": lambda i, me, j, q: j == i,
    "model": lambda i, me, j, q: j == i or (me.model is not None and q.model == me.model)}


def coverage(rows: Sequence[R], level: float = 0.9, rule: str | Rule = "mondrian",
             categories: Sequence[str] = iv.INTERVAL_CATEGORIES,
             counted: Callable[[R], bool] | None = None, holdout: str = "point") -> list[dict]:
    """Held-out coverage of an interval rule on back-test rows.

    For every row of each category its interval comes from the other rows of the category and
    of those it is pooled with (:func:`intervals.calibration_categories`; ``rule``: a name of
    :data:`RULES` or a :data:`Rule`); the row is covered when
    ``low_ratio <= measured / predicted <= high_ratio``. ``holdout``: ``point`` leaves the
    row out, ``model`` every row of its model (module docstring; where every row is of that
    model, as in a one-model category, the row alone). ``counted``: only the rows
    it accepts are judged (e.g. one side of the development/test split); the intervals are
    still built from all the other rows left in (None: every row is judged).

    Returns:
        Per category with rows, in ``categories`` order: ``category``, ``count``,
        ``coverage`` (share of rows covered, 0-1), ``coverage_host`` / ``coverage_device``
        (same, rows of that predicted bound; None without any), ``count_host`` /
        ``count_device``, ``median_width`` (median ``high_ratio / low_ratio``, unitless) and
        ``median_width_host`` / ``median_width_device``,
        ``uncovered`` (rows with no interval: a category of one row), ``groups``
        ({group: rows whose interval came from it}).

    Raises:
        ValueError: an unknown rule name or holdout, or ``level`` outside (0, 1).
    """
    fn = RULES.get(rule) if isinstance(rule, str) else rule
    if fn is None:
        raise ValueError(f"unknown interval rule {rule!r}; known: {', '.join(RULES)}")
    if holdout not in HOLDOUTS:
        raise ValueError(f"unknown holdout {holdout!r}; known: {', '.join(HOLDOUTS)}")
    iv.check_level(level)
    out = []
    for cat in categories:
        mine = [r for r in rows if r.category == cat]
        res = residuals_of(mine, cat)
        judged = [counted is None or counted(r) for r in mine]
        if not any(judged):
            continue
        pooled_rows = [r for c in iv.calibration_categories(cat)[1:] for r in rows
                       if r.category == c]
        pool = [*mine, *pooled_rows]
        pool_res = [*res, *[(math.log(r.measured_s / r.predicted_s), r.bound)
                            for r in pooled_rows]]
        hit: dict[str | None, list[bool]] = {"host": [], "device": [], None: []}
        widths: dict[str | None, list[float]] = {"host": [], "device": [], None: []}
        groups: dict[str, int] = {}
        none = 0
        for i, (r, b) in enumerate(res):
            if not judged[i]:
                continue
            key = b if b in ("host", "device") else None
            cal = [x for j, (x, q) in enumerate(zip(pool_res, pool, strict=True))
                   if not HOLDOUTS[holdout](i, mine[i], j, q)]
            if not cal:  # every row is of this model (the input ladder's): the row alone
                cal = [x for j, x in enumerate(pool_res) if j != i]
            ivl = fn(cal, b, level, cat)
            if ivl is None:
                none += 1
                ok = False
            else:
                ok = math.log(ivl.low_ratio) <= r <= math.log(ivl.high_ratio)
                widths[key].append(ivl.high_ratio / ivl.low_ratio)
                groups[ivl.group] = groups.get(ivl.group, 0) + 1
            hit[key].append(ok)
        every = [x for v in hit.values() for x in v]
        every_w = [x for v in widths.values() for x in v]
        out.append({"category": cat, "count": len(every), "coverage": sum(every) / len(every),
                    "coverage_host": of_any(fmean, hit["host"]),
                    "coverage_device": of_any(fmean, hit["device"]),
                    "count_host": len(hit["host"]), "count_device": len(hit["device"]),
                    "median_width": of_any(median, every_w),
                    "median_width_host": of_any(median, widths["host"]),
                    "median_width_device": of_any(median, widths["device"]),
                    "uncovered": none, "groups": groups})
    return out


def of_any(stat: Callable[[list], Any], values: list) -> Any:
    """``stat(values)``; None for no values (a category or bound without such rows)."""
    return stat(values) if values else None


def cell(x: float | None, spec: str) -> str:
    """A table cell: ``x`` formatted by ``spec`` (``.0%``, ``.2f``), ``–`` for None."""
    return "–" if x is None else format(x, spec)


def coverage_markdown(before: Sequence[dict], after: Sequence[dict], level: float = 0.9) -> str:
    """Markdown table of two :func:`coverage` results side by side (pooled -> Mondrian); a
    width is the median ``high / low`` ratio (overall, then host-bound / device-bound rows)."""
    def pct(x: float | None) -> str:
        return cell(x, ".0%")

    def covered(d: dict) -> str:
        return (f"{pct(d['coverage'])} / {pct(d['coverage_host'])} / "
                f"{pct(d['coverage_device'])}")

    def width(d: dict) -> str:
        def w(x: float | None) -> str:
            return cell(x, ".2f")
        if d["median_width_host"] is None and d["median_width_device"] is None:
            return w(d["median_width"])
        return (f"{w(d['median_width'])} ({w(d['median_width_host'])} / "
                f"{w(d['median_width_device'])})")
    lines = [f"| category | rows (host/device) | {level:.0%} coverage, pooled (all/host/device) "
             f"| width (host/device) | {level:.0%} coverage, Mondrian (all/host/device) "
             "| width (host/device) |",
             "|---|---:|---:|---:|---:|---:|"]
    by = {d["category"]: d for d in after}
    for b in before:
        a = by.get(b["category"])
        if a is None:
            continue
        lines.append(f"| {b['category']} | {b['count']} ({b['count_host']}/{b['count_device']}) "
                     f"| {covered(b)} | {width(b)} | {covered(a)} | {width(a)} |")
    return "\n".join(lines) + "\n"
