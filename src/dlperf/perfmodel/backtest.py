"""Back-testing: every prediction judged against a stored measurement it was not fitted on.

Categories (each row says which stored points were withheld):

* ``held-out batch``: in every series with 4+ batch sizes, each batch in turn; the point is
  withheld from every results file (repeats of it elsewhere too);
* ``extrapolate 2x``: the largest batch from those at most half of it (every point of the
  configuration above half the largest withheld, in every file); ``extrapolate down 2x``: the
  smallest from those at least twice it;
* ``one-point series up`` / ``down``: in every series with 2+ batch sizes, each batch from its
  neighbour below (up) or above (down) alone, every other batch withheld in every file: what
  ``dlperf predict`` does with one of the 157 stored series of one batch size;
  ``two-point series up`` / ``down``: each batch from the two next below (above) it;
* ``leave-one-model-out``: every one-device point of a model from the other models only (its
  FLOP and byte counts are used, none of its times);
* ``what-if fp32->bf16``, ``what-if eager->graph``, ``what-if B->2B``: pairs of stored points
  in one file differing only in that; the target configuration (or batch) withheld;
* ``all-reduce >= 1 MiB``: each size of a stored sweep from the others (same rank count);
* ``2-GPU from 1-GPU``: each stored N-device point from its one-device series, DDP's overhead
  fitted on the pairs of other configurations;
* ``repeat (noise floor)``: one stored measurement taken as the prediction of a repeat of the
  same point in the same file: how far the measurements themselves scatter;
* the WFBP recursion and the bucket all-reduce cost on recorded bucket timelines
  (:mod:`dlperf.perfmodel.bucketcheck`), where a results file holds them.

Baselines beside the model: ``t(B) = a + b B`` on the same points (batch categories), the
roofline with one FLOP efficiency per group (leave-one-model-out), no change (what-ifs), one
``a + b M`` line over the sizes >= 1 MiB (all-reduce), the one-device step plus the gradient
all-reduce without overlap (2-GPU).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from statistics import median

import numpy as np

from dlperf.perfmodel import bucketcheck as bc
from dlperf.perfmodel import comm
from dlperf.perfmodel import dataparallel as dp
from dlperf.perfmodel import inputcheck as ic
from dlperf.perfmodel import intervals as iv
from dlperf.perfmodel import model as pm
from dlperf.perfmodel.btrows import COST_S as COST_S
from dlperf.perfmodel.btrows import Budget as Budget
from dlperf.perfmodel.btrows import Row as Row
from dlperf.perfmodel.btrows import charge, point_id
from dlperf.perfmodel.calibrate import Calibration, Config
from dlperf.perfmodel.records import Point, Records
from dlperf.perfmodel.scaling import efficiency
from dlperf.perfmodel.split import SIDES, Split

#: The categories of predictions from a series of one or two stored batch sizes.
FEW_POINT_CATEGORIES = ("one-point series up", "one-point series down", "two-point series up",
                        "two-point series down")
CATEGORIES = ("held-out batch", "extrapolate 2x", "extrapolate down 2x", *FEW_POINT_CATEGORIES,
              "leave-one-model-out",
              "what-if fp32->bf16", "what-if eager->graph", "what-if B->2B",
              "all-reduce >= 1 MiB", "2-GPU from 1-GPU", "N-GPU via predict --nproc",
              "repeat (noise floor)", *bc.CATEGORIES, *ic.CATEGORIES)


def fit_linear(batch_sizes: Sequence[float], step_times_s: Sequence[float]
               ) -> tuple[float, float]:
    """The baseline ``t(B) = a + b B`` by least squares: ``(a, b)`` in (s, s/sample).

    Raises:
        ValueError: fewer than 2 points (``numpy.polyfit`` needs two for a line).
    """
    if len(batch_sizes) < 2:
        raise ValueError(f"a line needs 2 points, got {len(batch_sizes)}")
    b, a = np.polyfit(np.asarray(batch_sizes, float), np.asarray(step_times_s, float), 1)
    return float(a), float(b)


def _one(cal: Calibration, cfg: Config, batch: int, source: str | None) -> pm.OneDevice:
    return pm.from_series(cal, cfg, batch, source)


def _batch_is(b: int) -> Callable[[int], bool]:
    """Batch size -> True for ``b`` (one held-out batch size)."""
    return lambda x: x == b


def _batch_over_half(top: int) -> Callable[[int], bool]:
    """Batch size -> True above ``top / 2`` (withheld to extrapolate 2x up to ``top``)."""
    return lambda x: 2 * x > top


def _batch_under_double(bottom: int) -> Callable[[int], bool]:
    """Batch size -> True below ``2 x bottom`` (withheld to extrapolate down to ``bottom``)."""
    return lambda x: x < 2 * bottom


def _batch_not_in(kept: Sequence[int]) -> Callable[[int], bool]:
    """Batch size -> True for every batch but ``kept`` (a series cut to one or two points)."""
    return lambda x: x not in kept


def _points_at(cfg: Config, withheld: Callable[[int], bool]) -> Callable[[Point], bool]:
    """Point -> True for ``cfg``'s points at a withheld batch size (a calibration's exclude)."""
    return lambda q: cfg.matches(q) and withheld(q.batch_size)


def _model_is(model: str) -> Callable[[Point], bool]:
    """Point -> True for the points of ``model`` (a calibration's exclude)."""
    return lambda q: q.model == model


def batch_rows(records: Records, base: Calibration, min_points: int = 4,
               categories: Sequence[str] = ("held-out batch", "extrapolate 2x"),
               budget: Budget | None = None) -> list[Row]:
    """``held-out batch`` and ``extrapolate 2x`` rows (those of ``categories``), one series
    at a time within ``budget``."""
    out = []
    seen = set()
    for p in records.points:
        cfg = Config.of(p)
        if p.world_size != 1 or p.instrumented or (cfg, p.source) in seen:
            continue
        seen.add((cfg, p.source))
        s = [q for q in records.points if q.source == p.source and cfg.matches(q)
             and not q.instrumented]
        bs = sorted({q.batch_size for q in s})
        if len(bs) < min_points:
            continue
        at = {q.batch_size: q for q in s}
        meas = {b: q.step_time_s for b, q in at.items()}
        # (category, batch predicted, batch sizes withheld in every file)
        tests = [("held-out batch", b, _batch_is(b)) for b in bs]
        if [b for b in bs if 2 * b <= bs[-1]]:
            tests.append(("extrapolate 2x", bs[-1], _batch_over_half(bs[-1])))
        if [b for b in bs if b >= 2 * bs[0]]:
            tests.append(("extrapolate down 2x", bs[0], _batch_under_double(bs[0])))
        tests = [t for t in tests if t[0] in categories
                 and len([x for x in bs if not t[2](x)]) >= 2]
        if not tests or not charge(budget, "batch", [t[0] for t in tests]):
            continue
        for cat, b, withheld in tests:
            cal = Calibration(records, _points_at(cfg, withheld), share_efficiencies=base)
            train = [x for x in bs if not withheld(x)]
            one = _one(cal, cfg, b, p.source)
            a, slope = fit_linear(train, [meas[x] for x in train])
            out.append(Row(cat, f"{cfg.label()} b={b} [{p.source}]", meas[b], one.step_time_s,
                           a + slope * b, bound=one.bound, point=point_id(at[b]),
                           model=cfg.model))
    return out


def few_point_rows(records: Records, base: Calibration,
                   categories: Sequence[str] = FEW_POINT_CATEGORIES,
                   budget: Budget | None = None) -> list[Row]:
    """The :data:`FEW_POINT_CATEGORIES` rows (those of ``categories``): every series with two
    (three) or more batch sizes cut to one (two) neighbouring batch sizes, every other batch
    of the configuration withheld in every file, and the next batch up or down predicted.
    Baselines: the same samples/s as the one point (``t0 B / b0``); the line through the two."""
    out = []
    seen = set()
    for p in records.points:
        cfg = Config.of(p)
        if p.world_size != 1 or p.instrumented or (cfg, p.source) in seen:
            continue
        seen.add((cfg, p.source))
        at = {q.batch_size: q for q in records.points if q.source == p.source
              and cfg.matches(q) and not q.instrumented}
        bs = sorted(at)
        tests: list[tuple[str, int, tuple[int, ...]]] = []
        for lo, hi in zip(bs, bs[1:]):
            tests += [("one-point series up", hi, (lo,)), ("one-point series down", lo, (hi,))]
        for a, b, c in zip(bs, bs[1:], bs[2:]):
            tests += [("two-point series up", c, (a, b)), ("two-point series down", a, (b, c))]
        tests = [t for t in tests if t[0] in categories]
        if not tests or not charge(budget, "batch", [t[0] for t in tests]):
            continue
        for cat, b, kept in tests:
            cal = Calibration(records, _points_at(cfg, _batch_not_in(kept)),
                              share_efficiencies=base)
            try:
                one = _one(cal, cfg, b, p.source)
            except (LookupError, ValueError):
                continue
            meas = {x: at[x].step_time_s for x in kept}
            if len(kept) == 1:
                bl = meas[kept[0]] * b / kept[0]
            else:
                a0, slope = fit_linear(list(kept), [meas[x] for x in kept])
                bl = a0 + slope * b
            out.append(Row(cat, f"{cfg.label()} b={b} from b={'/'.join(map(str, kept))} "
                           f"[{p.source}]", at[b].step_time_s, one.step_time_s, bl,
                           bound=one.bound, point=point_id(at[b]), model=cfg.model))
    return out


def lomo_rows(records: Records, base: Calibration, budget: Budget | None = None) -> list[Row]:
    """``leave-one-model-out`` rows (synthetic one-device points on an accelerator), one model
    at a time (models in name order) within ``budget``."""
    out = []
    pts = [p for p in records.points if p.world_size == 1 and not p.instrumented
           and p.data == "synthetic" and p.device != "cpu"]
    for m in sorted({p.model for p in pts}):
        mine = [q for q in pts if q.model == m]
        if not charge(budget, "lomo", ["leave-one-model-out"] * len(mine),
                     len({q.group for q in mine})):
            continue
        cal = Calibration(records, _model_is(m), share_efficiencies=base)
        for p in (q for q in pts if q.model == m):
            cfg = Config.of(p)
            try:
                one = pm.analytic(cal, cfg, p.per_device_batch)
                ceil = cal.ceiling(cfg.framework, cfg.precision, cal.device_name(cfg), m)
                work = cal.work(m, cfg.framework, cfg.precision)
            except (LookupError, ValueError):
                continue
            # baseline: FLOPs / (measured ceiling x one efficiency), the efficiency the median
            # achieved FLOP rate share of the group's other points
            others = [q for q in pts if q.group == p.group and q.model != m]
            e1 = median(cal.work(q.model, q.framework, q.precision).flops(q.per_device_batch)
                        / q.step_time_s / ceil.flops_per_s for q in others) if others else None
            bl = work.flops(p.per_device_batch) / (e1 * ceil.flops_per_s) if e1 else None
            out.append(Row("leave-one-model-out", f"{cfg.label()} b={p.batch_size} "
                           f"[{p.source}]", p.step_time_s, one.step_time_s, bl, bound=one.bound,
                           point=point_id(p), model=m))
    return out


def whatif_rows(records: Records, base: Calibration,
                categories: Sequence[str] = ("what-if fp32->bf16", "what-if eager->graph",
                                             "what-if B->2B"),
                budget: Budget | None = None) -> list[Row]:
    """``what-if`` rows (those of ``categories``): fp32->bf16, eager->graph (same batch) and
    B->2B (same configuration), one pair at a time within ``budget``."""
    out = []
    pts = [p for p in records.points if p.world_size == 1 and not p.instrumented]
    by: defaultdict[str, dict[tuple[Config, int], Point]] = defaultdict(dict)
    for p in pts:
        by[p.source][(Config.of(p), p.batch_size)] = p
    for src, d in by.items():
        for (cfg, b), p in d.items():
            cands = []
            if cfg.precision == "fp32":
                cands.append(("what-if fp32->bf16", cfg.with_(precision="bf16"), b))
            if cfg.mode == "eager":
                cands.append(("what-if eager->graph", cfg.with_(mode="graph"), b))
            cands.append(("what-if B->2B", cfg, 2 * b))
            for cat, tcfg, tb in cands:
                t = d.get((tcfg, tb))
                if t is None or cat not in categories or not charge(budget, "what-if", [cat]):
                    continue
                try:  # a B->2B base series left with one batch size cannot be fitted
                    if tcfg == cfg:
                        one = _one(Calibration(records, _points_at(cfg, _batch_is(tb)),
                                               share_efficiencies=base), cfg, tb, src)
                    else:
                        one = pm.what_if(Calibration(records, tcfg.matches,
                                                     share_efficiencies=base), cfg, tcfg, tb, src)
                except (LookupError, ValueError):
                    continue
                pred, meas = one.step_time_s, t.step_time_s
                ok = (pred > p.step_time_s) == (meas > p.step_time_s)
                out.append(Row(cat, f"{cfg.label()} b={b} -> {tcfg.label()} b={tb} [{src}]",
                               meas, pred, p.step_time_s, sign_ok=ok, bound=one.bound,
                               point=point_id(t), model=cfg.model))
    return out


def allreduce_rows(records: Records, min_bytes: int = 1 << 20,
                   budget: Budget | None = None) -> list[Row]:
    """``all-reduce >= 1 MiB`` rows, leave one size out per rank count (one rank count at a
    time within ``budget``)."""
    out = []
    colls = [c for c in records.collectives if c.benchmark == "allreduce"]
    for n in sorted({c.nranks for c in colls}):
        cn = [c for c in colls if c.nranks == n]
        if not charge(budget, "all-reduce", ["all-reduce >= 1 MiB"]
                     * sum(c.size_bytes >= min_bytes for c in cn)):
            continue
        for held in cn:
            if held.size_bytes < min_bytes:
                continue
            train = [c for c in cn if c.size_bytes != held.size_bytes]
            try:
                fit = comm.fit_allreduce(train, n)
            except ValueError:
                continue
            big = [c for c in train if c.size_bytes >= min_bytes]
            bl = None
            if len(big) >= 2:
                a, b, _ = comm._line_rel(np.array([c.size_bytes for c in big], float),
                                         np.array([c.time_s for c in big], float))
                bl = a + b * held.size_bytes
            out.append(Row("all-reduce >= 1 MiB", f"{n} ranks {held.size_bytes} B [{held.source}]",
                           held.time_s, fit.time_s(held.size_bytes), bl, run_id=held.run_id))
    return out


def dp_rows(records: Records, base: Calibration, budget: Budget | None = None) -> list[Row]:
    """``2-GPU from 1-GPU`` rows: DDP's overhead fitted without the pair's configuration (all
    pairs or none within ``budget``: each row's fit uses the other pairs)."""
    cands = sum(p.world_size > 1 and p.nnodes == 1 and not p.instrumented
                and p.data == "synthetic" for p in base.points)
    if not charge(budget, "2-GPU", ["2-GPU from 1-GPU"] * cands):
        return []
    comm_for = dp.comm_for_records(records)
    pairs = dp.pairs_of(base, comm_for)
    out = []
    for pr in pairs:
        key = (pr.cfg, pr.dp.per_device_batch)
        train = [q for q in pairs if (q.cfg, q.dp.per_device_batch) != key]
        if not train:
            continue
        ddp = dp.fit_ddp_overhead(train)
        pred = dp.predict_pair(pr, ddp)
        bl = pr.one_device_s + comm_for(pr.dp.world_size)(dp.gradient_bytes(pr.dp.params))
        err = None
        if pr.base is not None:
            t1, n, b = pr.base.step_time_s, pr.dp.world_size, pr.dp.per_device_batch
            err = abs(efficiency(t1, pred, b, n * b, n)
                      - efficiency(t1, pr.dp.step_time_s, b, n * b, n)) * 100
        var = f" ({pr.dp.variant})" if pr.dp.variant else ""
        out.append(Row("2-GPU from 1-GPU", f"{pr.dp.label}{var} [{pr.dp.source}]",
                       pr.dp.step_time_s, pred, bl, eff_err_pts=err, point=point_id(pr.dp),
                       model=pr.dp.model))
    return out


def repeat_rows(records: Records, base: Calibration | None = None,
                budget: Budget | None = None) -> list[Row]:
    """``repeat (noise floor)`` rows: the same one-device point (configuration and batch, data
    on the device) stored in several results files (other sessions, often other hosts); the
    earliest file's measurement taken as the prediction of each later one."""
    groups: defaultdict[tuple[Config, int], dict[str, Point]] = defaultdict(dict)
    for p in records.points:
        if not p.instrumented and p.world_size == 1 and p.data == "synthetic":
            groups[(Config.of(p), p.batch_size)].setdefault(p.source, p)
    order = {s: i for i, s in enumerate(records.sources)}
    out = []
    for (cfg, b), by_src in groups.items():
        srcs = sorted(by_src, key=lambda s: order.get(s, 0))
        if len(srcs) < 2 or not charge(budget, "repeat", ["repeat (noise floor)"] * (len(srcs) - 1)):
            continue
        bound = None
        if base is not None and len(srcs) > 1:
            try:  # the bound of the point by the model fitted on everything (a label only)
                bound = pm.from_series(base, cfg, b).bound
            except (LookupError, ValueError):
                bound = None
        for s in srcs[1:]:
            out.append(Row("repeat (noise floor)", f"{cfg.label()} b={b} [{srcs[0]} -> {s}]",
                           by_src[s].step_time_s, by_src[srcs[0]].step_time_s, bound=bound,
                           point=point_id(by_src[s]), model=cfg.model))
    return out


@dataclass
class Validation:
    """The back-test's rows, with a summary per category and a markdown table."""

    rows: list[Row]
    sources: list[str]
    #: predictions a :class:`Budget` left out, per category (empty: the back-test is complete)
    left_out: dict[str, int] = field(default_factory=dict)
    #: the budget it ran under (estimated s), None for none
    budget_s: float | None = None

    def noise_pct(self) -> dict[str | None, float]:
        """The median ``repeat (noise floor)`` scatter (%) per prediction bound (``host``,
        ``device``): how far two measurements of one point lie apart, typically. Empty when
        the back-test ran no repeat rows."""
        by: dict[str | None, list[float]] = defaultdict(list)
        for r in self.rows:
            if r.category == "repeat (noise floor)":
                by[r.bound].append(r.ape)
        return {b: median(v) for b, v in by.items()}

    def resolved(self, r: Row, noise: dict[str | None, float]) -> bool:
        """Whether a what-if row's *measured* change ``|measured / baseline - 1|`` exceeds the
        median repeat scatter of its bound (:meth:`noise_pct`): a smaller change is within
        the noise of measuring the same point twice, so its sign says nothing about the model
        (on the committed H200 files: 15.0% for host-bound points, 0.26% for device-bound).
        Every row counts when no repeat rows ran."""
        if r.baseline_s is None:
            return True
        return abs(r.measured_s / r.baseline_s - 1.0) * 100.0 > noise.get(r.bound, 0.0)

    def summary(self, rows: Sequence[Row] | None = None) -> list[dict]:
        """Per category: count, MdAPE and max (%), the baseline's, sign accuracy (all pairs, and
        the pairs whose measured change exceeds the noise floor, :meth:`resolved`),
        efficiency error (points); of ``rows`` (a subset of :attr:`rows`, e.g. one side of
        the split; None: all). The noise floor is always that of all the repeat rows."""
        by: dict[str, list[Row]] = defaultdict(list)
        for r in self.rows if rows is None else rows:
            by[r.category].append(r)
        noise = self.noise_pct()
        out = []
        for cat in [c for c in CATEGORIES if c in by]:
            rs = by[cat]
            apes = [r.ape for r in rs]
            base = [r.baseline_ape for r in rs if r.baseline_ape is not None]
            signs = [r.sign_ok for r in rs if r.sign_ok is not None]
            resolved = [r.sign_ok for r in rs if r.sign_ok is not None and self.resolved(r, noise)]
            effs = [r.eff_err_pts for r in rs if r.eff_err_pts is not None]
            host = [r.ape for r in rs if r.bound == "host"]
            out.append({"category": cat, "count": len(rs), "mdape_pct": median(apes),
                        "max_pct": max(apes),
                        "host_bound_mdape_pct": median(host) if host else None,
                        "baseline_mdape_pct": median(base) if base else None,
                        "baseline_max_pct": max(base) if base else None,
                        "sign_right": (sum(signs), len(signs)) if signs else None,
                        "sign_right_resolved": ((sum(resolved), len(resolved)) if signs
                                                else None),
                        "eff_err_median_pts": median(effs) if effs else None,
                        "eff_err_max_pts": max(effs) if effs else None})
        return out

    def residuals(self, category: str) -> list[float]:
        """``log(measured / predicted)`` of the category's rows."""
        return [math.log(r.measured_s / r.predicted_s) for r in self.rows
                if r.category == category]

    def bounded_residuals(self, category: str) -> list[iv.Residual]:
        """``(log(measured / predicted), bound)`` of the category's rows: what a Mondrian
        interval (:func:`dlperf.perfmodel.intervals.mondrian`) is built from."""
        return iv.residuals_of(self.rows, category)

    def keyed_residuals(self, category: str) -> list[iv.KeyedResidual]:
        """``(log(measured / predicted), bound, point)`` of the category's rows
        (:func:`dlperf.perfmodel.intervals.keyed_residuals_of`)."""
        return iv.keyed_residuals_of(self.rows, category)

    def coverage(self, level: float = 0.9, rule: str = "mondrian") -> list[dict]:
        """Leave-one-out coverage of the prediction intervals per category
        (:func:`dlperf.perfmodel.intervals.coverage`: overall and per bound, and the median
        width ``high / low``); ``rule`` ``mondrian`` (what :func:`~dlperf.perfmodel.api.predict`
        uses) or ``pooled`` (the rule before it). Cheap: no model is re-fitted.

        Raises:
            ValueError: an unknown rule or a level outside (0, 1).
        """
        return iv.coverage(self.rows, level, rule)

    def coverage_table(self, level: float = 0.9) -> str:
        """Markdown: per interval category, the coverage and width of the pooled rule beside
        the Mondrian one (:meth:`coverage`)."""
        return iv.coverage_markdown(self.coverage(level, "pooled"), self.coverage(level), level)

    def split_table(self, split: Split, level: float = 0.9) -> str:
        """Markdown: one line per category, each measure for the development and the test
        side of ``split`` (:mod:`dlperf.perfmodel.split`) as ``dev / test``: rows, MdAPE,
        host-bound MdAPE, the baseline's MdAPE, signs right (all pairs) and those of the best
        trivial rule (the target always faster, or always slower, whichever gets more
        development pairs right), the ``level`` interval's leave-one-out coverage
        (:meth:`coverage`, Mondrian; intervals built from all the category's other rows,
        judged on the side's rows)."""
        def on(side: str) -> Callable[[Row], bool]:
            return lambda r: split.side(r.model, r.run_id) == side

        sums = {s: {d["category"]: d for d in self.summary([r for r in self.rows if on(s)(r)])}
                for s in SIDES}
        judged = [c for c in CATEGORIES if c != "repeat (noise floor)"]
        covs = {s: {d["category"]: d for d in iv.coverage(self.rows, level, counted=on(s),
                                                           categories=judged)}
                for s in SIDES}

        def pct(x: float | None) -> str:
            return "–" if x is None else f"{x:.2f}"

        def trivial(cat: str) -> dict[str, str]:
            """The best constant sign rule of ``cat``, chosen on development: per side."""
            pairs = {s: [r for r in self.rows if r.category == cat and r.sign_ok is not None
                         and r.baseline_s is not None and on(s)(r)] for s in SIDES}
            if not any(pairs.values()):
                return {s: "–" for s in SIDES}
            faster = {s: sum(r.measured_s < (r.baseline_s or 0.0) for r in v)
                      for s, v in pairs.items()}
            dev = len(pairs[SIDES[0]])
            use_faster = faster[SIDES[0]] >= dev - faster[SIDES[0]]
            word = "faster" if use_faster else "slower"
            return {s: f"{word} {faster[s] if use_faster else len(v) - faster[s]}/{len(v)}"
                    for s, v in pairs.items()}

        def one(d: dict | None, c: dict | None, triv: str) -> list[str]:
            if d is None:
                return ["0", "–", "–", "–", "–", "–", "–"]
            sr = d["sign_right"]
            return [str(d["count"]), pct(d["mdape_pct"]), pct(d["host_bound_mdape_pct"]),
                    pct(d["baseline_mdape_pct"]), f"{sr[0]}/{sr[1]}" if sr else "–",
                    triv if sr else "–", _coverage_cell(c)]

        def cells(cat: str) -> list[str]:
            triv = trivial(cat)
            dev, test = (one(sums[s].get(cat), covs[s].get(cat), triv[s]) for s in SIDES)
            return [f"{a} / {b}" for a, b in zip(dev, test, strict=True)]
        lines = ["| category (dev / test) | rows | MdAPE % | host-bound MdAPE % | "
                 "baseline MdAPE % | sign right | trivial rule's signs | "
                 f"{level:.0%} interval coverage |",
                 "|---|---:|---:|---:|---:|---:|---:|---:|"]
        cats = [c for c in CATEGORIES if any(c in sums[s] for s in SIDES)]
        for cat in cats:
            lines.append(f"| {cat} | " + " | ".join(cells(cat)) + " |")
        return "\n".join(lines) + "\n"

    def table(self) -> str:
        """Markdown: one line per category."""
        def f(x, d=2):
            return "–" if x is None else f"{x:.{d}f}"
        lines = ["| category | count | MdAPE % | max % | host-bound MdAPE % | baseline MdAPE % | "
                 "baseline max % | sign right | scaling eff. error (pts, median/max) |",
                 "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for d in self.summary():
            sr = ("–" if d["sign_right"] is None else
                  f"{d['sign_right'][0]}/{d['sign_right'][1]} "
                  f"(beyond noise {d['sign_right_resolved'][0]}/{d['sign_right_resolved'][1]})")
            ee = ("–" if d["eff_err_median_pts"] is None
                  else f"{d['eff_err_median_pts']:.1f} / {d['eff_err_max_pts']:.1f}")
            lines.append(f"| {d['category']} | {d['count']} | {f(d['mdape_pct'])} | "
                         f"{f(d['max_pct'], 1)} | {f(d['host_bound_mdape_pct'])} | "
                         f"{f(d['baseline_mdape_pct'])} | {f(d['baseline_max_pct'], 1)} | {sr} | "
                         f"{ee} |")
        return "\n".join(lines) + "\n"


def _coverage_cell(c: dict | None) -> str:
    """``92% (h 94%, d 91%)``: a coverage row's share, and per bound where rows have one."""
    if not c:
        return "–"
    per = [f"{b[0]} {c['coverage_' + b]:.0%}" for b in ("host", "device")
           if c.get("coverage_" + b) is not None]
    return f"{c['coverage']:.0%}" + (f" ({', '.join(per)})" if per else "")


def run(records: Records, categories: Sequence[str] | None = None,
        budget_s: float | None = None, base: Calibration | None = None) -> Validation:
    """Run the back-test categories (all by default) on ``records``.

    Args:
        records: the stored results (:func:`dlperf.perfmodel.records.load`).
        categories: which of :data:`CATEGORIES` (None: all).
        budget_s: None runs everything; else a :class:`Budget` of this many estimated seconds,
            spent in the order held-out batch and extrapolation, all-reduce, 2-GPU, repeats,
            leave-one-model-out, what-ifs (the cheap and the goal-setting ones first); what it
            left out is in :attr:`Validation.left_out`.
        base: a :class:`Calibration` of ``records`` without exclusions whose shared fits
            (``share_efficiencies``) this run reuses and extends, so that several runs on the
            same records fit each roofline and plain series once (None: a fresh one; the rows
            are the same either way).

    Raises:
        ValueError: an unknown category, or a negative budget.
    """
    cats = list(categories or CATEGORIES)
    bad = [c for c in cats if c not in CATEGORIES]
    if bad:
        raise ValueError(f"unknown back-test categor{'ies' if len(bad) > 1 else 'y'} "
                         f"{', '.join(bad)}; known: {', '.join(CATEGORIES)}")
    budget = None if budget_s is None else Budget(budget_s)
    base = Calibration(records) if base is None else base
    part: dict[str, list[Row]] = {}
    # spent in this order (a budget favours the first), listed in the historical order below
    if {"held-out batch", "extrapolate 2x", "extrapolate down 2x"} & set(cats):
        part["batch"] = batch_rows(records, base, categories=cats, budget=budget)
    if set(FEW_POINT_CATEGORIES) & set(cats):
        part["few"] = few_point_rows(records, base, cats, budget)
    if "all-reduce >= 1 MiB" in cats:
        part["all-reduce"] = allreduce_rows(records, budget=budget)
    if "2-GPU from 1-GPU" in cats:
        part["2-GPU"] = dp_rows(records, base, budget)
    if "repeat (noise floor)" in cats:
        part["repeat"] = repeat_rows(records, base, budget)
    if set(bc.CATEGORIES) & set(cats):
        part["wfbp"] = bc.rows(records, cats, budget)
    part["input"] = ic.rows(records, cats, budget)  # input-pipeline ladders
    if "leave-one-model-out" in cats:
        part["lomo"] = lomo_rows(records, base, budget)
    if any(c.startswith("what-if") for c in cats):
        part["what-if"] = whatif_rows(records, base, categories=cats, budget=budget)
    order = ("batch", "lomo", "what-if", "all-reduce", "2-GPU", "repeat", "wfbp", "input", "few")
    rows = [r for k in order for r in part.get(k, [])]
    return Validation(rows, list(records.sources), dict(budget.left_out) if budget else {},
                      budget_s)
