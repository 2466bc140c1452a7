"""Validation of the performance model (:mod:`dlperf.perfmodel`), a package of its own because
judging predictions is not making them: every back-test category (the model's own,
:mod:`dlperf.validation.backtest`; the WFBP recursion's, :mod:`dlperf.validation.bucketcheck`;
the input pipeline's, :mod:`dlperf.validation.inputcheck`; predictions through
:func:`dlperf.perfmodel.api.predict` itself) on stored results, their summary tables
(:class:`Validation`), and the residual table they leave beside the results for predictions'
intervals.

Nothing here is imported by a prediction: ``dlperf predict`` reads the table that
``dlperf predict --validate`` (:func:`validate` and :func:`store_table`) wrote
(:func:`dlperf.perfmodel.fitcache.read_table`).
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

from dlperf.errors import ConfigError
from dlperf.perfmodel import api, intervalchoice, lsq, records
from dlperf.perfmodel import fitcache as fc
from dlperf.perfmodel import intervals as iv
from dlperf.perfmodel import request as rq
from dlperf.perfmodel.calibrate import Calibration
from dlperf.perfmodel.records import Records, point_id
from dlperf.validation import backtest as bt
from dlperf.validation import bucketcheck as bc
from dlperf.validation import inputcheck as ic
from dlperf.validation import intervalcheck as cv
from dlperf.validation.backtest import Budget, Row
from dlperf.validation.intervalcheck import COVERAGE_WINDOW as COVERAGE_WINDOW
from dlperf.validation.intervalcheck import chance_inside as chance_inside
from dlperf.validation.intervalcheck import coverage_cells as coverage_cells
from dlperf.validation.intervalcheck import inside as inside
from dlperf.validation.split import SIDES, Split

#: Every back-test category, in the order tables list them.
CATEGORIES = (*bt.MODEL_CATEGORIES, *bc.CATEGORIES, *ic.CATEGORIES)

#: Each stored one-node N-device point predicted by :func:`dlperf.perfmodel.api.predict`
#: itself (``dlperf predict --nproc N``), which withholds the point; the baseline is perfect
#: weak scaling (the stored one-device step at the per-device batch).
PREDICT_NPROC_CATEGORY = api.NPROC_CATEGORY


def validate(db: str | os.PathLike | Iterable[str | os.PathLike],
             categories: Iterable[str] | None = None,
             budget_s: float | None = None, device: str | None = None) -> Validation:
    """Back-test the model on the stored results (:mod:`dlperf.validation.backtest`); the
    returned object has ``.table()`` (markdown), ``.summary()``, ``.rows`` and ``.left_out``.
    A full run (every category, no budget) also leaves its residuals in this process, so that
    predictions on the same files take their intervals from it (:func:`store_table` writes
    them beside the data).

    Args:
        db: a results file, several, or folders of ``*.db``.
        categories: which of :data:`CATEGORIES` (None: all).
        budget_s: None runs every prediction; else at most this many *estimated* seconds of
            them (:class:`backtest.Budget`: deterministic, the cheap categories first); what
            it left out is counted in ``.left_out``.
        device: the GPU model to back-test where ``db`` holds ``cuda`` points of several
            (``h100``, ``NVIDIA H200``: :func:`validated_records`); None where it holds one.

    Raises:
        ConfigError: a missing results file, an unknown category, a negative budget, or
            files of several GPU models without a ``device`` that picks one.
    """
    recs = validated_records(db, device)
    cats = list(categories) if categories else None
    own = cats is not None and PREDICT_NPROC_CATEGORY in cats
    # the back-test's own categories asked for (None: all); the --nproc rows come from
    # predict() itself and need none of them
    rest = [c for c in cats if c != PREDICT_NPROC_CATEGORY] if cats is not None else None
    with lsq.tracked() as solutions:
        try:
            v = (run(recs, rest, budget_s,
                     base=Calibration(recs, share_efficiencies=api.shared_fits(recs)))
                 if rest is None or rest else empty(recs, budget_s))
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if (cats is None or own) and budget_s is None:
            v.rows += predict_nproc_rows(recs)
    v.solution_keys = solutions
    if budget_s is None and cats is None:  # every row: the residuals predict() uses
        intervalchoice.install_residuals(recs, residual_table(v))
    return v


def validated_records(db: str | os.PathLike | Iterable[str | os.PathLike],
                      device: str | None = None) -> Records:
    """The records ``--validate`` back-tests: those of ``db`` where its files hold ``cuda``
    points of one GPU model at most; else those of the GPU model ``device`` picks
    (:func:`request.gpu_of`), as a prediction with that ``--device`` reads them
    (:func:`request.for_gpu`: its files, its points), so that the table written is the one
    that prediction reads. A residual table holds one GPU model's residuals: pooled, an
    interval labelled as one GPU's would rest on another's rows.

    Raises:
        ConfigError: several GPU models and no ``device`` picking one: the models, and the
            command and table of each.
    """
    recs = api.records_of(db)
    gpus = rq.gpu_models(recs)
    if len(gpus) < 2:
        if device is not None and device != "cuda" and not rq.matching_gpus(gpus, device):
            raise ConfigError(f"--validate --device {device}: these results files hold no CUDA "
                              f"point of it (GPU models: {', '.join(gpus) or 'none'}); "
                              "--device picks one GPU model among several: drop it")
        return recs
    try:
        _, gpu = rq.gpu_of(recs, device)
    except ConfigError:
        gpu = None
    if gpu is None:
        each = "; ".join(f"--device {rq.device_value(g, gpus)} (its table: "
                         f"{fc.table_file(rq.for_gpu(recs, g).sources)})" for g in gpus)
        said = "no --device" if device is None else f"--device {device}"
        raise ConfigError(f"--validate with {said}: these results files hold CUDA points of "
                          f"{len(gpus)} GPU models ({', '.join(gpus)}), and a residual table "
                          "holds one GPU model's residuals (predictions are calibrated on one "
                          "GPU model at a time); back-test each with the same --db files and "
                          f"--validate plus {each}, or give each GPU model's files alone")
    return api.gpu_records(recs, gpu)


def empty(recs: Records, budget_s: float | None = None) -> Validation:
    """A :class:`Validation` of ``recs`` without rows (none of :func:`run`'s categories was
    asked for), under the budget ``budget_s`` (estimated s; None for none).

    Raises:
        ValueError: a negative budget (:class:`Budget`)."""
    if budget_s is not None:
        Budget(budget_s)  # checks it
    return Validation([], list(recs.sources), {}, budget_s)


def predict_nproc_rows(recs: Records) -> list[Row]:
    """:data:`PREDICT_NPROC_CATEGORY` rows: every stored synthetic-data N-device point of one
    node without DDP options, predicted through :func:`api.predict` (its own path and
    withholding), against the one-device step at the same per-device batch."""
    out = []
    for p in recs.points:
        if p.world_size < 2 or p.nnodes != 1 or p.variant or p.instrumented \
                or p.data != "synthetic":
            continue
        one = [q.step_time_s for q in recs.points if q.world_size == 1 and not q.instrumented
               and q.config == p.config and q.per_device_batch == p.per_device_batch
               and q.layout == p.layout and q.threads == p.threads]
        try:
            pred = api.predict(recs.sources, p.model, p.framework, p.mode, p.precision, p.device,
                               batch_size=p.batch_size, nproc=p.world_size, data=p.data,
                               layout=p.layout, threads=p.threads, grad_accum=p.grad_accum,
                               compile_mode=p.compile_mode)
        except ConfigError:
            continue
        out.append(Row(PREDICT_NPROC_CATEGORY, f"{p.label} [{p.source}]", p.step_time_s,
                       pred.predicted_step_time_s, one[-1] if one else None,
                       point=point_id(p), model=p.model))
    return out


def residual_table(v: Validation) -> dict[str, list[iv.KeyedResidual]]:
    """Category -> ``(log(measured / predicted), bound, point)`` of every back-test category
    that made rows (a prediction takes its interval from the category of its path)."""
    return {cat: v.keyed_residuals(cat) for cat in dict.fromkeys(r.category for r in v.rows)}


def store_table(db: str | os.PathLike | Iterable[str | os.PathLike], v: Validation,
                device: str | None = None) -> Path:
    """Write ``v``'s residual table, with the roofline group fits its back-test made and the
    solutions of the fits it and a prediction of each stored configuration
    (:func:`prime_solutions`) use, beside the results files ``db``
    (:func:`fitcache.write_table`), and their points beside each
    (:func:`records.store_points`), so that predictions on a copy of the files read them
    instead of reading every row and fitting again; returns the table's path.

    ``device``: the GPU model ``v`` back-tested among several in ``db``
    (:func:`validated_records`, as :func:`validate` was given it).

    Raises:
        ConfigError: the folder cannot be written, a file there under the table's or the
            points' name is not one dlperf wrote (:func:`_check_ours`: it is never replaced),
            several GPU models without a ``device`` picking one, or ``v`` made from other
            files than those.
    """
    recs = validated_records(db, device)
    if list(v.sources) != list(recs.sources):
        raise ConfigError("this back-test was made from other results files than "
                          f"{len(recs.sources)} file(s) of --db: its table is not theirs")
    for f in [fc.table_file(recs.sources), *sorted(
            {Path(s).resolve().parent / records.POINTS_NAME for s in recs.sources})]:
        _check_ours(f)
    keys = v.solution_keys | prime_solutions(recs)
    try:
        records.store_points(recs.sources)
        # the group fits this process asked for (the back-test's and prime_solutions'), not
        # every one it holds: those read from the user's cache would make the table depend on
        # what the user predicted before (a vgg16 tf32 what-if's fit was committed that way)
        return fc.write_table(recs.sources, residual_table(v),
                              api.shared_fits(recs).memo.asked("group"),
                              {k: lsq.SOLVED[k] for k in keys if k in lsq.SOLVED})
    except OSError as e:
        raise ConfigError(f"{e}: make the folder writable, or copy the results files to one "
                          "that is and validate there") from None
    except ValueError as e:  # fits of several GPU models (fitcache.write_table)
        raise ConfigError(str(e)) from None


def prime_solutions(recs: Records) -> set[str]:
    """The fits a prediction at a batch size not stored makes, made now: each stored
    one-device configuration's series (nothing withheld) with the fits of its prior, and the
    DDP overhead of N devices; their keys, for :func:`store_table` to keep their solutions
    beside the data, so that such a prediction on a clone solves nothing."""
    shared = api.shared_fits(recs)
    cal = Calibration(recs, share_efficiencies=shared)
    with lsq.tracked() as keys:
        for cfg in shared.by_config:
            try:
                cal.fit(cfg)
            except (LookupError, ValueError):
                continue
        api.ddp_overhead(recs)
    return keys


def _check_ours(f: Path) -> None:
    """Refuse to replace ``f`` (the residual table or the points file beside results files)
    unless it is missing, empty, or a JSON object (what dlperf writes there): a file of the
    user's under that name (notes, another program's JSON list, a database) was replaced
    without a word by ``predict --validate``.

    Raises:
        ConfigError: naming the file and what to do.
    """
    import json

    try:
        if not f.is_file() or f.stat().st_size == 0:
            return  # nothing to replace
        if f.stat().st_size <= 2**30 and isinstance(json.loads(f.read_bytes()), dict):
            return  # a JSON object, as dlperf writes (a larger file is not read)
    except (OSError, ValueError, RecursionError):
        pass
    raise ConfigError(f"{str(f)!r} exists and is not a file dlperf wrote there (not a "
                      "JSON object); the back-test stores its table and the results' "
                      "points under that name, and never replaces a file of yours: move "
                      "or rename it, then run --validate again")


@dataclass
class Validation:
    """The back-test's rows, with a summary per category and a markdown table."""

    rows: list[Row]
    sources: list[str]
    #: predictions a :class:`Budget` left out, per category (empty: the back-test is complete)
    left_out: dict[str, int] = field(default_factory=dict)
    #: the budget it ran under (estimated s), None for none
    budget_s: float | None = None
    #: the fits the back-test solved or looked up (:func:`dlperf.perfmodel.lsq.solved`):
    #: :func:`store_table` keeps their solutions with the table
    solution_keys: set[str] = field(default_factory=set)

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
        (on the committed H200 files: 15.1% for host-bound points, 0.32% for device-bound).
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
            base, effs = _known(rs, "baseline_ape"), _known(rs, "eff_err_pts")
            signs = _known(rs, "sign_ok")
            resolved = [r.sign_ok for r in rs if r.sign_ok is not None and self.resolved(r, noise)]
            host = [r.ape for r in rs if r.bound == "host"]
            out.append({"category": cat, "count": len(rs), "mdape_pct": median(apes),
                        "max_pct": max(apes),
                        "host_bound_mdape_pct": cv.of_any(median, host),
                        "baseline_mdape_pct": cv.of_any(median, base),
                        "baseline_max_pct": cv.of_any(max, base),
                        "sign_right": cv.of_any(_tally, signs),
                        "sign_right_resolved": _tally(resolved) if signs else None,
                        "eff_err_median_pts": cv.of_any(median, effs),
                        "eff_err_max_pts": cv.of_any(max, effs)})
        return out

    def residuals(self, category: str) -> list[float]:
        """``log(measured / predicted)`` of the category's rows."""
        return [r for r, _ in self.bounded_residuals(category)]

    def bounded_residuals(self, category: str) -> list[iv.Residual]:
        """``(log(measured / predicted), bound)`` of the category's rows: what a Mondrian
        interval (:func:`dlperf.perfmodel.intervals.mondrian`) is built from."""
        return cv.residuals_of(self.rows, category)

    def keyed_residuals(self, category: str) -> list[iv.KeyedResidual]:
        """``(log(measured / predicted), bound, point)`` of the category's rows
        (:func:`dlperf.validation.intervalcheck.keyed_residuals_of`)."""
        return cv.keyed_residuals_of(self.rows, category)

    def coverage(self, level: float = 0.9, rule: str = "mondrian") -> list[dict]:
        """Leave-one-out coverage of the prediction intervals per category
        (:func:`dlperf.validation.intervalcheck.coverage`: overall and per bound, and the median
        width ``high / low``); ``rule`` ``mondrian`` (what :func:`~dlperf.perfmodel.api.predict`
        uses) or ``pooled`` (the rule before it). Cheap: no model is re-fitted.

        Raises:
            ValueError: an unknown rule or a level outside (0, 1).
        """
        return cv.coverage(self.rows, level, rule)

    def coverage_table(self, level: float = 0.9) -> str:
        """Markdown: per interval category, the coverage and width of the pooled rule beside
        the Mondrian one (:meth:`coverage`)."""
        return cv.coverage_markdown(self.coverage(level, "pooled"), self.coverage(level), level)

    def split_table(self, split: Split, level: float = 0.9,
                    coverage: dict[str, list[dict]] | None = None) -> str:
        """Markdown: one line per category, each measure for the development and the test
        side of ``split`` (:mod:`dlperf.validation.split`) as ``dev / test``: rows, MdAPE,
        host-bound MdAPE, the baseline's MdAPE, signs right and those of the best trivial
        rule (the target always faster, or always slower, whichever gets more development
        pairs right), each as ``right/pairs (beyond noise right/pairs)``: all pairs, then the
        pairs whose measured change exceeds the repeat noise of their bound (:meth:`resolved`;
        a smaller change has no sign to get right), counted alike for the model and the rule;
        the ``level`` interval's coverage leave-one-model-out (:func:`intervalcheck.coverage`,
        ``holdout="model"``, Mondrian: each row's interval built from the rows of the
        category's other models, as a model the table never saw gets it; judged on the side's
        rows): ``coverage``, :meth:`side_coverage` of ``split`` at ``level`` where the caller
        has it already (it is the table's costliest part), else computed here."""
        def on(side: str) -> Callable[[Row], bool]:
            return lambda r: split.side(r.model, r.run_id) == side

        sums = {s: {d["category"]: d for d in self.summary([r for r in self.rows if on(s)(r)])}
                for s in SIDES}
        covs = {s: {d["category"]: d for d in v}
                for s, v in (coverage or self.side_coverage(split, level)).items()}
        noise = self.noise_pct()

        def trivial(cat: str) -> dict[str, str]:
            """The best constant sign rule of ``cat``, chosen on development: per side."""
            pairs = {s: [r for r in self.rows if r.category == cat and r.sign_ok is not None
                         and r.baseline_s is not None and on(s)(r)] for s in SIDES}
            if not any(pairs.values()):
                return {s: "–" for s in SIDES}
            dev = pairs[SIDES[0]]
            use_faster = 2 * sum(r.measured_s < (r.baseline_s or 0.0) for r in dev) >= len(dev)

            def right(v: list[Row]) -> str:
                ok = sum((r.measured_s < (r.baseline_s or 0.0)) == use_faster for r in v)
                return f"{ok}/{len(v)}"
            return {s: (f"{'faster' if use_faster else 'slower'} {right(v)} (beyond noise "
                        f"{right([r for r in v if self.resolved(r, noise)])})")
                    for s, v in pairs.items()}

        def one(d: dict | None, c: dict | None, triv: str) -> list[str]:
            if d is None:
                return ["0", "–", "–", "–", "–", "–", "–"]
            sr, res = d["sign_right"], d["sign_right_resolved"]
            signs = [f"{sr[0]}/{sr[1]} (beyond noise {res[0]}/{res[1]})", triv] if sr else [
                "–", "–"]
            return [str(d["count"]), _num(d["mdape_pct"]), _num(d["host_bound_mdape_pct"]),
                    _num(d["baseline_mdape_pct"]), *signs, _coverage_cell(c)]

        def cells(cat: str) -> list[str]:
            triv = trivial(cat)
            dev, test = (one(sums[s].get(cat), covs[s].get(cat), triv[s]) for s in SIDES)
            return [f"{a} / {b}" for a, b in zip(dev, test, strict=True)]
        lines = ["| category (dev / test) | rows | MdAPE % | host-bound MdAPE % | "
                 "baseline MdAPE % | sign right | trivial rule's signs | "
                 f"{level:.0%} interval coverage (other models' residuals) |",
                 "|---|---:|---:|---:|---:|---:|---:|---:|"]
        cats = [c for c in CATEGORIES if any(c in sums[s] for s in SIDES)]
        for cat in cats:
            lines.append(f"| {cat} | " + " | ".join(cells(cat)) + " |")
        per = {s: coverage_cells(covs[s].values()) for s in SIDES}
        lo, hi = COVERAGE_WINDOW
        said = ", ".join(f"{s} {sum(inside(k, n) for _, _, k, n in c)} of {len(c)}"
                         for s, c in per.items())
        chance = " and ".join(f"{sum(chance_inside(n, level) for *_, n in c):.1f}"
                              for c in per.values())
        lines.append(f"\nCells (category x bound) whose {level:.0%} interval coverage is inside "
                     f"{lo * 100:.0f}-{hi:.0%}: {said}; an interval that covers each of independent "
                     f"rows with probability {level:.0%} reads {chance} of them inside on "
                     "average (`validation.chance_inside`).")
        return "\n".join(lines) + "\n"

    def side_coverage(self, split: Split, level: float = 0.9) -> dict[str, list[dict]]:
        """Per side of ``split``: the ``level`` interval's coverage of each interval category
        (:func:`intervalcheck.coverage`, Mondrian, ``holdout="model"``: each row's interval
        from the rows of the category's other models, of both sides; judged on the side's
        rows): the coverage column of :meth:`split_table`.

        Raises:
            ValueError: ``level`` outside (0, 1).
        """
        judged = [c for c in CATEGORIES if c != "repeat (noise floor)"]

        def on(side: str) -> Callable[[Row], bool]:
            return lambda r: split.side(r.model, r.run_id) == side
        return {s: cv.coverage(self.rows, level, categories=judged, holdout="model",
                               counted=on(s)) for s in SIDES}

    def consistency_table(self, split: Split, level: float = 0.9,
                          coverage: dict[str, list[dict]] | None = None) -> str:
        """Markdown: each (category, bound) cell of :meth:`side_coverage` judged against
        ``level`` on its own sampling spread (:func:`intervalcheck.consistency_markdown`: the
        exact binomial 95% interval on its coverage, the model-clustered one, and the literal
        85-95% test), with the cells consistent with ``level`` counted per side and those
        significantly below it named. ``coverage``: as for :meth:`split_table`.

        Raises:
            ValueError: ``level`` outside (0, 1).
        """
        return cv.consistency_markdown(coverage or self.side_coverage(split, level), level)

    def table(self) -> str:
        """Markdown: one line per category."""
        f = _num
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


def _known(rows: Sequence[Row], attr: str) -> list[Any]:
    """The rows' ``attr`` where it is known (not None)."""
    return [v for r in rows if (v := getattr(r, attr)) is not None]


def _tally(signs: list[bool]) -> tuple[int, int]:
    """``(right, pairs)`` of a category's sign judgements."""
    return sum(signs), len(signs)


def _num(x: float | None, digits: int = 2) -> str:
    """A table cell: ``x`` to ``digits`` decimals, ``–`` for None."""
    return cv.cell(x, f".{digits}f")


def _coverage_cell(c: dict | None) -> str:
    """``92% (h 94%, d 91%)``: a coverage row's share, and per bound where rows have one."""
    if not c:
        return "–"
    per = [f"{b[0]} {c['coverage_' + b]:.0%}" for b in ("host", "device")
           if c.get("coverage_" + b) is not None]
    return f"{c['coverage']:.0%}" + (f" ({', '.join(per)})" if per else "")


#: The back-test's row makers: ``(name, the categories it makes, maker(records, base
#: calibration, categories, budget))``, run when a category asked for is one of theirs, in
#: this order (a budget is spent on the first first). The input ladders' maker runs always
#: (it makes nothing on files without a ladder).
ROW_MAKERS: tuple[tuple[str, Sequence[str], Callable[..., list[Row]]], ...] = (
    ("batch", ("held-out batch", "extrapolate 2x", "extrapolate down 2x"),
     lambda recs, base, cats, budget: bt.batch_rows(recs, base, categories=cats, budget=budget)),
    ("few", bt.FEW_POINT_CATEGORIES, bt.few_point_rows),
    ("all-reduce", ("all-reduce >= 1 MiB",),
     lambda recs, base, cats, budget: bt.allreduce_rows(recs, budget=budget)),
    ("2-GPU", ("2-GPU from 1-GPU",),
     lambda recs, base, cats, budget: bt.dp_rows(recs, base, budget)),
    ("repeat", ("repeat (noise floor)",),
     lambda recs, base, cats, budget: bt.repeat_rows(recs, base, budget)),
    ("wfbp", bc.CATEGORIES, lambda recs, base, cats, budget: bc.rows(recs, cats, budget)),
    ("input", CATEGORIES, lambda recs, base, cats, budget: ic.rows(recs, cats, budget)),
    ("leave-one-model-out", ("leave-one-model-out",),
     lambda recs, base, cats, budget: bt.lomo_rows(recs, base, budget)),
    ("what-if", tuple(c for c in CATEGORIES if c.startswith("what-if")),
     lambda recs, base, cats, budget: bt.whatif_rows(recs, base, categories=cats,
                                                     budget=budget)),
)
#: The order of the makers' rows in a :class:`Validation` (the tables' order).
ROW_ORDER = ("batch", "leave-one-model-out", "what-if", "all-reduce", "2-GPU", "repeat", "wfbp",
             "input", "few")


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
    part = {name: make(records, base, cats, budget) for name, makes, make in ROW_MAKERS
            if set(makes) & set(cats)}
    rows = [r for k in ROW_ORDER for r in part.get(k, [])]
    return Validation(rows, list(records.sources), dict(budget.left_out) if budget else {},
                      budget_s)
