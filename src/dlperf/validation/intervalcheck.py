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
from collections.abc import Callable, Iterable, Mapping, Sequence
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
        ({group: rows whose interval came from it}), ``models`` / ``models_host`` /
        ``models_device`` ({model: [covered rows, rows]} of the judged rows, all and per
        bound; a row without a model is its own ``#index``: the clusters of
        :func:`dlperf.validation.coveragestats.clustered`).

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
        tally: dict[str | None, dict[str, list[int]]] = {"host": {}, "device": {}, None: {}}
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
            t = tally[key].setdefault(mine[i].model or f"#{i}", [0, 0])
            t[0] += ok
            t[1] += 1
        every = [x for v in hit.values() for x in v]
        every_w = [x for v in widths.values() for x in v]
        out.append({"category": cat, "count": len(every), "coverage": sum(every) / len(every),
                    "coverage_host": of_any(fmean, hit["host"]),
                    "coverage_device": of_any(fmean, hit["device"]),
                    "count_host": len(hit["host"]), "count_device": len(hit["device"]),
                    "median_width": of_any(median, every_w),
                    "median_width_host": of_any(median, widths["host"]),
                    "median_width_device": of_any(median, widths["device"]),
                    "uncovered": none, "groups": groups,
                    "models": _merged(tally.values()), "models_host": tally["host"],
                    "models_device": tally["device"]})
    return out


def _merged(tallies: Iterable[dict[str, list[int]]]) -> dict[str, list[int]]:
    """``{model: [covered, rows]}`` summed over several such tallies."""
    out: dict[str, list[int]] = {}
    for t in tallies:
        for m, (k, n) in t.items():
            o = out.setdefault(m, [0, 0])
            o[0] += k
            o[1] += n
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


#: The window the goal asks of a 90% interval's coverage in every path and bound.
COVERAGE_WINDOW = (0.85, 0.95)


def inside(k: int, n: int, window: tuple[float, float] = COVERAGE_WINDOW) -> bool:
    """Whether ``k`` covered rows of ``n`` read a coverage ``k / n`` inside ``window`` (both
    ends included, unrounded: 84.6% is outside 85-95% though a table prints it 85%)."""
    return window[0] * n - 1e-9 <= k <= window[1] * n + 1e-9


def chance_inside(n: int, level: float = 0.9,
                  window: tuple[float, float] = COVERAGE_WINDOW) -> float:
    """Probability that a cell of ``n`` independent rows, each inside its interval with
    probability ``level``, reads a coverage inside ``window`` (:func:`inside`): the binomial
    ``sum of C(n, k) level^k (1 - level)^(n - k)`` over those ``k``. It is what a perfectly
    calibrated interval rule can be asked of a cell: 0.49 for 24 rows at 90% in 85-95%, 0 for
    6 (no ``k / 6`` is inside). Rows of one model are correlated, which spreads a cell's
    coverage further.

    Raises:
        ValueError: ``n`` below 1, or ``level`` outside (0, 1).
    """
    if n < 1:
        raise ValueError(f"a cell needs at least one row, got {n}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"interval level must be in (0, 1), got {level}")
    def pmf(k: int) -> float:  # in logs: C(n, k) overflows a float from n ~ 1030
        return math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
                        + k * math.log(level) + (n - k) * math.log1p(-level))
    return sum(pmf(k) for k in range(n + 1) if inside(k, n, window))


def coverage_cells(covs: Iterable[dict]) -> list[tuple[str, str | None, int, int]]:
    """``(category, bound, covered rows, rows)`` per cell of :func:`coverage` results:
    one per bound (``host``, ``device``) that has rows, the category as one cell (bound None)
    where no row has a bound; the sums of :func:`cell_tallies`' per-model counts (a cell's
    covered rows and rows are its models' summed)."""
    return [(cat, b, sum(k for k, _ in per), sum(n for _, n in per))
            for cat, b, per in cell_tallies(covs)]


def cell_tallies(covs: Iterable[dict]) -> list[tuple[str, str | None, list[tuple[int, int]]]]:
    """``(category, bound, [(covered, rows) per model])`` per cell of :func:`coverage` results:
    one per bound (``host``, ``device``) that has rows, the category as one cell (bound None)
    where no row has a bound; the clusters of
    :func:`dlperf.validation.coveragestats.clustered` (:func:`coverage_cells` sums them)."""
    out: list[tuple[str, str | None, list[tuple[int, int]]]] = []
    for d in covs:
        bounds: list[str | None] = [b for b in ("host", "device") if d["count_" + b]]
        for b in bounds or [None]:
            tally = d["models_" + b] if b else d["models"]
            out.append((d["category"], b, [(k, n) for k, n in tally.values()]))
    return out


def consistency_markdown(sides: Mapping[str, Sequence[dict]], level: float = 0.9) -> str:
    """Markdown: each cell's coverage judged against ``level`` on its own sampling spread, a
    row per cell and side (``sides``: side name -> :func:`coverage` results): covered rows,
    the coverage with its exact 95% interval (Clopper-Pearson) and two-sided exact p-value
    (rows independent, :func:`coveragestats.judge`), whether ``level`` is inside that interval
    ("yes", "below": the interval under it, "above"), the same for the rows clustered by model
    (:func:`coveragestats.clustered`: models, effective rows, interval, verdict), and the
    literal :data:`COVERAGE_WINDOW` test (:func:`inside`); then a line per judgement counting
    the cells consistent with ``level`` per side and naming those significantly below it.

    Raises:
        ValueError: ``level`` outside (0, 1).
    """
    from dlperf.validation import coveragestats as cs

    iv.check_level(level)

    def verdict(j: cs.Judgement) -> str:
        return "yes" if j.consistent else "below" if j.below else "above"

    def span(j: cs.Judgement) -> str:
        return f"{j.low:.1%}-{j.high:.1%}"

    def pv(p: float) -> str:
        return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"

    lo, hi = COVERAGE_WINDOW
    lines = [f"| cell | side | covered | coverage (exact 95%) | p (exact, two-sided) | "
             f"{level:.0%} inside | models: effective rows, 95% | {level:.0%} inside, "
             f"by model | {lo * 100:.0f}-{hi:.0%} |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    #: side -> cell name -> (covered, rows, models, binomial, clustered)
    judged: dict[str, dict[str, tuple[int, int, int, cs.Judgement, cs.Judgement]]] = {}
    for side, covs in sides.items():
        judged[side] = {}
        for cat, b, per in cell_tallies(covs):
            k, n = sum(x for x, _ in per), sum(x for _, x in per)
            judged[side][f"{cat}, {b}" if b else cat] = (
                k, n, len(per), cs.judge(k, n, level), cs.clustered(per, level))
    for name in dict.fromkeys(name for cells in judged.values() for name in cells):
        for side, cells in judged.items():
            if name not in cells:
                continue
            k, n, m, j, c = cells[name]
            lines.append(f"| {name} | {side} | {k}/{n} | {j.coverage:.1%} ({span(j)}) | "
                         f"{pv(j.p)} | {verdict(j)} | {m}: {c.rows:.1f}, {span(c)} | "
                         f"{verdict(c)} | {'in' if inside(k, n) else 'out'} |")
    for label, clustered in (("exact binomial, rows independent", False),
                             ("clustered by model, Korn-Graubard effective rows", True)):
        js = {side: {name: v[4] if clustered else v[3] for name, v in cells.items()}
              for side, cells in judged.items()}
        said = ", ".join(f"{side} {sum(j.consistent for j in v.values())} of {len(v)}"
                         for side, v in js.items())
        below = "; ".join(f"{side} " + (", ".join(
            f"{name} {judged[side][name][0]}/{judged[side][name][1]} (p {pv(j.p)})"
            for name, j in v.items() if j.below) or "none") for side, v in js.items())
        above = ", ".join(f"{side} {sum(not j.consistent and not j.below for j in v.values())}"
                          for side, v in js.items())
        lines.append(f"\nCells whose coverage is consistent with {level:.0%} ({label}: "
                     f"{level:.0%} inside the exact 95% interval): {said}. Significantly "
                     f"below {level:.0%}: {below}. Significantly above: {above}.")
    return "\n".join(lines) + "\n"
