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
* ``what-if fp32->bf16``, ``what-if eager->graph``, the framework what-ifs (``what-if
  torch->jax``: torch eager -> jax xla, ``what-if jax->torch``, ``what-if torch graph->jax``,
  ``what-if jax->torch graph``; :data:`dlperf.perfmodel.whatifs.WHATIFS`), ``what-if
  B->2B``: pairs of stored points in one file differing only in that; the target
  configuration (or batch) withheld;
  ``what-if two changes``: pairs differing in a mode or framework change of those and in
  the precision (fp32 <-> bf16), the target withheld;
* ``all-reduce >= 1 MiB``: each size of a stored sweep from the others (same rank count);
* ``2-GPU from 1-GPU``: each stored N-device point from its one-device series, DDP's overhead
  fitted on the pairs of other configurations;
* ``repeat (noise floor)``: one stored measurement taken as the prediction of a repeat of the
  same point in the same file: how far the measurements themselves scatter;
* the WFBP recursion and the bucket all-reduce cost on recorded bucket timelines
  (:mod:`dlperf.validation.bucketcheck`), where a results file holds them.

Baselines beside the model: ``t(B) = a + b B`` on the same points (batch categories), the
roofline with one FLOP efficiency per group (leave-one-model-out), no change (what-ifs), one
``a + b M`` line over the sizes >= 1 MiB (all-reduce), the one-device step plus the gradient
all-reduce without overlap (2-GPU).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from statistics import median

import numpy as np

from dlperf.perfmodel import comm
from dlperf.perfmodel import dataparallel as dp
from dlperf.perfmodel import model as pm
from dlperf.perfmodel.calibrate import Calibration, Config
from dlperf.perfmodel.records import CollectivePoint, Point, Records, point_id
from dlperf.perfmodel.scaling import efficiency
from dlperf.perfmodel.whatifs import FRAMEWORK_WHATIFS, TWO_CHANGES, WHATIFS

#: The categories of predictions from a series of one or two stored batch sizes.
FEW_POINT_CATEGORIES = ("one-point series up", "one-point series down", "two-point series up",
                        "two-point series down")
#: The model's own back-test categories (:data:`dlperf.validation.CATEGORIES` adds the
#: WFBP recursion's and the input pipeline's).
MODEL_CATEGORIES = ("held-out batch", "extrapolate 2x", "extrapolate down 2x",
                    *FEW_POINT_CATEGORIES,
              "leave-one-model-out",
              "what-if fp32->bf16", "what-if eager->graph", *FRAMEWORK_WHATIFS.values(),
              TWO_CHANGES, "what-if B->2B",
              "all-reduce >= 1 MiB", "2-GPU from 1-GPU", "N-GPU via predict --nproc",
              "repeat (noise floor)")


@dataclass
class Row:
    """One held-out prediction (times in s); ``sign_ok`` for what-ifs, ``eff_err_pts`` (scaling
    efficiency error in points) for N-device rows, ``bound`` of the model's prediction,
    ``point``: the measured point's identity ``source:result_id`` (:func:`point_id`; None for
    rows that measure no stored point, e.g. an all-reduce size), so that a prediction of that
    very point can leave this row's residual out of its interval; ``model`` of the predicted
    point, or ``run_id`` of the all-reduce run, which decide its side of the frozen
    development/test split (:meth:`dlperf.validation.split.Split.side`)."""

    category: str
    label: str
    measured_s: float
    predicted_s: float
    baseline_s: float | None = None
    sign_ok: bool | None = None
    eff_err_pts: float | None = None
    bound: str | None = None
    point: str | None = None
    model: str | None = None
    run_id: str | None = None

    @property
    def ape(self) -> float:
        """Absolute percentage error of the model (%)."""
        return abs(self.predicted_s / self.measured_s - 1.0) * 100.0

    @property
    def baseline_ape(self) -> float | None:
        """Absolute percentage error of the baseline (%)."""
        return None if self.baseline_s is None else abs(self.baseline_s / self.measured_s - 1) * 100


#: Estimated seconds per unit of back-test work, by kind: per prediction, except
#: leave-one-model-out, whose cost is its roofline refits: per (framework, mode, precision,
#: device) group the model is in. The largest seen on the committed H200 files
#: (benchmarks/results/h200/*.db, h200x2) on the project's shared 2-core VM: held-out batch
#: 0.042 s per prediction (calibration.db), leave-one-model-out 0.094 s per group (alexnet in
#: frameworks.db, 6 groups, 0.56 s), what-if 0.15 s per prediction (mfu_inputs.db), 2-GPU
#: 0.028 s per pair (h200x2); a repeat row costs the series fit that labels its bound, taken
#: as a held-out batch row's. Only a :class:`Budget` reads them: they bound a back-test run
#: inside a report, never a fit.
COST_S = {"batch": 0.045, "lomo": 0.1, "what-if": 0.15, "all-reduce": 0.002, "2-GPU": 0.03,
          "repeat": 0.045, "wfbp": 0.002, "input": 0.002}


@dataclass
class Budget:
    """A bound on a back-test's *estimated* time (s), so a report can include a back-test
    without waiting for all of it. Work comes in units (a series for the batch categories, a
    model for leave-one-model-out, one pair or size otherwise), each estimated by
    :data:`COST_S`; a unit runs only when its estimate fits in what
    is left, else its predictions are counted in ``left_out`` (category -> predictions). The
    estimate, not a clock, decides: the same files give the same rows on every machine.

    Raises:
        ValueError: a negative ``seconds``.
    """

    seconds: float
    spent_s: float = 0.0
    left_out: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.seconds < 0:
            raise ValueError(f"a back-test budget must be >= 0 s, got {self.seconds}")

    def take(self, kind: str, rows: Sequence[str], units: int | None = None) -> bool:
        """True (and charged) when the unit of ``rows`` (their categories) made by ``kind``
        (a key of :data:`COST_S`) fits; else False and counted as left out. ``units``: what
        :data:`COST_S` counts for ``kind`` (None: the rows)."""
        cost = COST_S[kind] * (len(rows) if units is None else units)
        if self.spent_s + cost <= self.seconds:
            self.spent_s += cost
            return True
        for cat in rows:
            self.left_out[cat] = self.left_out.get(cat, 0) + 1
        return False


def charge(budget: Budget | None, kind: str, rows: Sequence[str],
           units: int | None = None) -> bool:
    """True when there is no budget or :meth:`Budget.take` took the unit."""
    return budget is None or budget.take(kind, rows, units)


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


def _steps(records: Records) -> list[Point]:
    """The one-device points whose step is a measurement (not instrumented: no trace or
    breakdown slowed it)."""
    return [p for p in records.points if p.world_size == 1 and not p.instrumented]


def _series(records: Records) -> list[tuple[Config, str, dict[int, Point]]]:
    """Every one-device series: ``(configuration, results file, {batch size: its point})`` of
    the file's :func:`_steps` of the configuration (the last stored of a batch size), in the
    order of their first points."""
    by: dict[tuple[Config, str], dict[int, Point]] = {}
    for p in _steps(records):
        by.setdefault((Config.of(p), p.source), {})[p.batch_size] = p
    return [(cfg, src, at) for (cfg, src), at in by.items()]


def batch_rows(records: Records, base: Calibration, min_points: int = 4,
               categories: Sequence[str] = ("held-out batch", "extrapolate 2x"),
               budget: Budget | None = None) -> list[Row]:
    """``held-out batch`` and ``extrapolate 2x`` rows (those of ``categories``), one series
    at a time within ``budget``."""
    out = []
    for cfg, src, at in _series(records):
        bs = sorted(at)
        if len(bs) < min_points:
            continue
        meas = {b: q.step_time_s for b, q in at.items()}
        # (category, batch predicted, batch sizes withheld in every file); a series spanning
        # a factor of 2 extrapolates both ways
        tests = [("held-out batch", b, _batch_is(b)) for b in bs]
        if 2 * bs[0] <= bs[-1]:
            tests += [("extrapolate 2x", bs[-1], _batch_over_half(bs[-1])),
                      ("extrapolate down 2x", bs[0], _batch_under_double(bs[0]))]
        tests = [t for t in tests if t[0] in categories
                 and sum(not t[2](x) for x in bs) >= 2]  # 2+ batch sizes left to fit
        if not tests or not charge(budget, "batch", [t[0] for t in tests]):
            continue
        for cat, b, withheld in tests:
            cal = Calibration(records, _points_at(cfg, withheld), share_efficiencies=base)
            train = [x for x in bs if not withheld(x)]
            one = _one(cal, cfg, b, src)
            a, slope = fit_linear(train, [meas[x] for x in train])
            out.append(Row(cat, f"{cfg.label(b)} [{src}]", meas[b], one.step_time_s,
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
    for cfg, src, at in _series(records):
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
                one = _one(cal, cfg, b, src)
            except (LookupError, ValueError):
                continue
            meas = {x: at[x].step_time_s for x in kept}
            if len(kept) == 1:
                bl = meas[kept[0]] * b / kept[0]
            else:
                a0, slope = fit_linear(list(kept), [meas[x] for x in kept])
                bl = a0 + slope * b
            out.append(Row(cat, f"{cfg.label(b)} from b={'/'.join(map(str, kept))} "
                           f"[{src}]", at[b].step_time_s, one.step_time_s, bl,
                           bound=one.bound, point=point_id(at[b]), model=cfg.model))
    return out


def lomo_rows(records: Records, base: Calibration, budget: Budget | None = None) -> list[Row]:
    """``leave-one-model-out`` rows (synthetic one-device points on an accelerator), one model
    at a time (models in name order) within ``budget``."""
    out = []
    pts = [p for p in _steps(records) if p.data == "synthetic" and p.device != "cpu"]
    by_model: dict[str, list[Point]] = {}
    for p in pts:
        by_model.setdefault(p.model, []).append(p)
    for m, mine in sorted(by_model.items()):
        if not charge(budget, "lomo", ["leave-one-model-out"] * len(mine),
                     len({q.group for q in mine})):
            continue
        cal = Calibration(records, _model_is(m), share_efficiencies=base)
        for p in mine:
            cfg = Config.of(p)
            try:
                one = pm.analytic(cal, cfg, p.per_device_batch)
                ceil = cal.ceiling(cfg.framework, cfg.precision, cal.device_name(cfg), m)
                work = cal.work(m, cfg.framework, cfg.precision, cfg.device)
            except (LookupError, ValueError):
                continue
            # baseline: FLOPs / (measured ceiling x one efficiency), the efficiency the median
            # achieved FLOP rate share of the group's other points
            others = [q for q in pts if q.group == p.group and q.model != m]
            e1 = median(cal.work(q.model, q.framework, q.precision, q.device).flops(q.per_device_batch)
                        / q.step_time_s / ceil.flops_per_s for q in others) if others else None
            bl = work.flops(p.per_device_batch) / (e1 * ceil.flops_per_s) if e1 else None
            out.append(Row("leave-one-model-out", f"{cfg.label(p.batch_size)} "
                           f"[{p.source}]", p.step_time_s, one.step_time_s, bl, bound=one.bound,
                           point=point_id(p), model=m))
    return out


#: Every what-if category :func:`whatif_rows` makes: those of
#: :data:`~dlperf.perfmodel.whatifs.WHATIFS` and B->2B.
WHATIF_CATEGORIES: tuple[str, ...] = (*dict.fromkeys(cat for cat, _ in WHATIFS),
                                      "what-if B->2B")


def whatif_rows(records: Records, base: Calibration,
                categories: Sequence[str] = WHATIF_CATEGORIES,
                budget: Budget | None = None) -> list[Row]:
    """``what-if`` rows (those of ``categories``): those of
    :data:`~dlperf.perfmodel.whatifs.WHATIFS` (each a pair of stored points at the same batch
    in the same file, the base's configuration changed as the category says and nothing
    else) and B->2B (same configuration), one pair at a time within
    ``budget``. Each row's ``sign_ok``: the prediction moves the step the way the measurement
    does, from the base's measured step (the row's baseline, no change)."""
    out = []
    pts = _steps(records)
    by: defaultdict[str, dict[tuple[Config, int], Point]] = defaultdict(dict)
    for p in pts:
        by[p.source][(Config.of(p), p.batch_size)] = p
    for src, d in by.items():
        for (cfg, b), p in d.items():
            cands = [(cat, cfg.with_(**{k: v[1] for k, v in ch.items()}), b, _config_what_if)
                     for cat, ch in WHATIFS
                     if all(getattr(cfg, k) == v[0] for k, v in ch.items())
                     ] + [("what-if B->2B", cfg, 2 * b, _batch_what_if)]
            for cat, tcfg, tb, make in cands:
                t = d.get((tcfg, tb))
                if t is None or cat not in categories or not charge(budget, "what-if", [cat]):
                    continue
                try:  # a B->2B base series left with one batch size cannot be fitted
                    one = make(records, base, cfg, tcfg, tb, src)
                except (LookupError, ValueError):
                    continue
                pred, meas = one.step_time_s, t.step_time_s
                ok = (pred > p.step_time_s) == (meas > p.step_time_s)
                out.append(Row(cat, f"{cfg.label(b)} -> {tcfg.label(tb)} [{src}]",
                               meas, pred, p.step_time_s, sign_ok=ok, bound=one.bound,
                               point=point_id(t), model=cfg.model))
    return out


def _config_what_if(records: Records, base: Calibration, cfg: Config, tcfg: Config, tb: int,
                    src: str) -> pm.OneDevice:
    """A what-if row's prediction of ``tcfg`` from ``cfg``'s series in ``src``, every point of
    ``tcfg`` withheld."""
    return pm.what_if(Calibration(records, tcfg.matches, share_efficiencies=base), cfg, tcfg, tb,
                      src)


def _batch_what_if(records: Records, base: Calibration, cfg: Config, tcfg: Config, tb: int,
                   src: str) -> pm.OneDevice:
    """A ``what-if B->2B`` row's prediction of ``cfg`` at ``tb`` from its series in ``src``,
    its points at ``tb`` withheld (``tcfg`` is ``cfg``)."""
    return _one(Calibration(records, _points_at(cfg, _batch_is(tb)), share_efficiencies=base),
                cfg, tb, src)


def allreduce_rows(records: Records, min_bytes: int = 1 << 20,
                   budget: Budget | None = None) -> list[Row]:
    """``all-reduce >= 1 MiB`` rows, leave one size out per rank count (one rank count at a
    time within ``budget``)."""
    out = []
    by_ranks: dict[int, list[CollectivePoint]] = {}
    for c in records.collectives:
        if c.benchmark == "allreduce":
            by_ranks.setdefault(c.nranks, []).append(c)
    for n, cn in sorted(by_ranks.items()):
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


def repeat_groups(records: Records
                  ) -> dict[tuple[Config, int, str | None], dict[str, Point]]:
    """The stored measurements of each one-device point, for the noise floor: ``{(configuration,
    batch size, GPU): {results file: its point}}`` over the :func:`_steps` of ``records`` with
    data on the device (``synthetic``), the GPU its :attr:`Point.device_name`, the first stored
    of the point in each file (the files' later ones left out), groups and files in the order
    of their first points. A group of several files is a point repeated in other sessions on
    the same GPU model; files of several GPUs given together make one group per GPU."""
    groups: defaultdict[tuple[Config, int, str | None], dict[str, Point]] = defaultdict(dict)
    for p in _steps(records):
        if p.data == "synthetic":
            groups[(Config.of(p), p.batch_size, p.device_name)].setdefault(p.source, p)
    return groups


def repeat_rows(records: Records, base: Calibration | None = None,
                budget: Budget | None = None) -> list[Row]:
    """``repeat (noise floor)`` rows: the same one-device point (configuration and batch, data
    on the device, the same GPU) stored in several results files (other sessions, often other
    hosts; :func:`repeat_groups`); the earliest file's measurement taken as the prediction of
    each later one."""
    groups = repeat_groups(records)
    order = {s: i for i, s in enumerate(records.sources)}
    out = []
    for (cfg, b, _gpu), by_src in groups.items():
        srcs = sorted(by_src, key=lambda s: order.get(s, 0))
        if len(srcs) < 2 or not charge(budget, "repeat", ["repeat (noise floor)"] * (len(srcs) - 1)):
            continue
        bound = None
        if base is not None:
            try:  # the bound of the point by the model fitted on everything (a label only)
                bound = pm.from_series(base, cfg, b).bound
            except (LookupError, ValueError):
                bound = None
        for s in srcs[1:]:
            out.append(Row("repeat (noise floor)", f"{cfg.label(b)} [{srcs[0]} -> {s}]",
                           by_src[s].step_time_s, by_src[srcs[0]].step_time_s, bound=bound,
                           point=point_id(by_src[s]), model=cfg.model))
    return out
