"""Which model-clustered judgement of a cell's 90% coverage, chosen on development cells.

A cell (category x bound) covers ``k`` of ``n`` held-out rows, drawn from a few models whose
rows are correlated. The exact binomial (:func:`dlperf.validation.coveragestats.judge`) treats
the rows as independent; each candidate below widens it for the models. Reads the committed
back-test rows (no model is fitted) and judges the development rows leave-one-model-out with
development-only calibration, as ``benchmarks/interval_rules.py`` does, so no test row enters
the choice. Then:

1. the intraclass correlation of "row covered" within a model, pooled over the development
   cells (one-way ANOVA estimator for binary data; Fleiss 1981, section 13.2 / Ridout et al.
   1999, *Biometrics* 55:137-148);
2. per candidate and development cell, simulated with the cell's own rows per model: per-model
   coverage drawn from a beta of mean 90% and that correlation (a calibrated rule whose models
   differ), the share of draws the candidate calls inconsistent with 90% (its false-alarm rate,
   nominally 5%); and the share at a mean of 80% (its power against a rule that covers 80%).

The criterion, fixed before any candidate was computed: the candidates whose mean false-alarm
rate over the development cells is at most 5%; among those the highest mean power at 80%;
ties to the simpler. The candidates:

* ``binomial``: rows independent (the reference; Clopper & Pearson 1934);
* ``design effect``: Clopper-Pearson on the effective sample ``n / d``, ``d`` the Rao-Scott
  design effect over models (:func:`dlperf.validation.coveragestats.clustered`; Korn &
  Graubard 1998);
* ``design effect, df``: the same with Korn & Graubard's degrees-of-freedom factor
  ``(t_{n-1} / t_{m-1})^2`` on the effective sample (``m`` models);
* ``one per model``: each model one observation, ``m`` trials, ``m k / n`` covered (the
  binomial on per-model coverage; correlation 1 within a model);
* ``cluster bootstrap``: the 2.5-97.5% percentiles of the coverage over models resampled
  with replacement (Field & Welsh 2007).

    PYTHONPATH=src python benchmarks/coverage_consistency.py [--draws 2000] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable

import numpy as np
from scipy.special import betainc
from scipy.stats import t as student_t

from dlperf import validation as va
from dlperf.validation import coveragestats as cs
from dlperf.validation import intervalcheck as cv
from dlperf.validation import split as sp
from dlperf.validation.backtest import Row

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROWS = os.path.join(ROOT, "benchmarks/results/h200/perfmodel_validate_rows.json")
LEVEL, ALPHA = 0.9, 1 - cs.CONFIDENCE
#: The interval paths' categories (the validation table's, less the noise floor).
CATEGORIES = tuple(c for c in va.CATEGORIES if c != "repeat (noise floor)")


def dev_cells(rows: list[Row]) -> dict[tuple[str, str | None], list[tuple[int, int]]]:
    """``{(category, bound): [(covered, rows) per model]}`` of the development rows, each
    judged leave-one-model-out on the other development models' rows."""
    spl = sp.load()
    dev = [r for r in rows if spl.side(r.model, r.run_id) == sp.DEVELOPMENT]
    covs = cv.coverage(dev, LEVEL, categories=CATEGORIES, holdout="model")
    return {(c, b): per for c, b, per in cv.cell_tallies(covs)}


def icc(cells: list[list[tuple[int, int]]]) -> float:
    """One-way ANOVA intraclass correlation of a binary outcome, models within cells, pooled:
    ``(MSB - MSW) / (MSB + (n0 - 1) MSW)``; each cell's own mean removed."""
    ssb = ssw = 0.0
    dfb = dfw = 0
    n0_num = 0.0
    for per in cells:
        k = np.array([a for a, _ in per], float)
        n = np.array([b for _, b in per], float)
        if len(per) < 2:
            continue
        c = k.sum() / n.sum()
        ssb += float((n * (k / n - c) ** 2).sum())
        ssw += float((k * (1 - k / n)).sum())
        dfb += len(per) - 1
        dfw += int(n.sum()) - len(per)
        n0_num += float(n.sum() - (n ** 2).sum() / n.sum())
    msb, msw, n0 = ssb / dfb, ssw / dfw, n0_num / dfb
    return max(0.0, (msb - msw) / (msb + (n0 - 1) * msw))


def _reject(k: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Whether 90% is outside the Clopper-Pearson 95% interval of (effective) ``k`` of ``n``."""
    k = np.clip(k, 0, n)
    with np.errstate(all="ignore"):
        ge = np.where(k <= 0, 1.0, betainc(np.maximum(k, 1e-300), n - k + 1, LEVEL))
        le = np.where(k >= n, 1.0, 1 - betainc(k + 1, np.maximum(n - k, 1e-300), LEVEL))
    return np.minimum(ge, le) < ALPHA / 2


def _deff(k: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Design effect per draw (rows: draws, columns: models), as coveragestats.design_effect."""
    m = k.shape[1]
    kt, nt = k.sum(1), n.sum(1)
    c = kt / nt
    if m == 1:
        return np.where((c > 0) & (c < 1), nt, 1.0)
    v = m / (m - 1) * ((k - c[:, None] * n) ** 2).sum(1) / nt ** 2
    with np.errstate(all="ignore"):
        d = np.where((c > 0) & (c < 1), v / (c * (1 - c) / nt), 1.0)
    return np.maximum(1.0, d)


def _bootstrap(k: np.ndarray, n: np.ndarray, rng: np.random.Generator, b: int = 400):
    m = k.shape[1]
    idx = rng.integers(0, m, size=(k.shape[0], b, m))
    kk = np.take_along_axis(np.broadcast_to(k[:, None, :], idx.shape), idx, 2).sum(2)
    nn = np.take_along_axis(np.broadcast_to(n[:, None, :], idx.shape), idx, 2).sum(2)
    q = np.quantile(kk / nn, [ALPHA / 2, 1 - ALPHA / 2], axis=1)
    return (LEVEL < q[0]) | (LEVEL > q[1])


def candidates(rng: np.random.Generator) -> dict[str, Callable[[np.ndarray, np.ndarray],
                                                               np.ndarray]]:
    """Name -> rejects(k, n): ``k``, ``n`` per draw (rows) and model (columns)."""
    def deff(k, n):
        d = _deff(k, n)
        return _reject(k.sum(1) / d, n.sum(1) / d)

    def deff_df(k, n):
        d, m, nt = _deff(k, n), k.shape[1], n.sum(1)
        if m < 2:  # one model: one observation (coveragestats.effective_rows)
            ne = np.ones_like(nt)
        else:
            f = (student_t.ppf(1 - ALPHA / 2, nt - 1) / student_t.ppf(1 - ALPHA / 2, m - 1)) ** 2
            ne = np.minimum(nt / d * f, nt)
        return _reject(k.sum(1) / n.sum(1) * ne, ne)

    def per_model(k, n):
        m = np.full(k.shape[0], float(k.shape[1]))
        return _reject(k.sum(1) / n.sum(1) * m, m)

    return {"binomial": lambda k, n: _reject(k.sum(1).astype(float), n.sum(1).astype(float)),
            "design effect": deff, "design effect, df": deff_df, "one per model": per_model,
            "cluster bootstrap": lambda k, n: _bootstrap(k, n, rng)}


def simulate(per: list[tuple[int, int]], mean: float, rho: float, draws: int,
             rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Draws of ``(covered, rows)`` per model for a cell of these rows per model: per-model
    coverage beta(mean, intraclass correlation ``rho``), rows binomial on it."""
    n = np.array([b for _, b in per], float)
    s = (1 - rho) / rho if rho > 0 else 1e9
    p = rng.beta(mean * s, (1 - mean) * s, size=(draws, len(per)))
    return rng.binomial(n.astype(int), p).astype(float), np.broadcast_to(n, p.shape)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rows = [Row(**{k: v for k, v in d.items() if k not in ("ape_pct", "baseline_ape_pct")})
            for d in json.load(open(ROWS))]
    cells = dev_cells(rows)
    rho = icc(list(cells.values()))
    rng = np.random.default_rng(args.seed)
    cands = candidates(rng)
    print(f"{len(cells)} development cells; intraclass correlation of coverage within a model "
          f"{rho:.3f}; {args.draws} draws per cell")
    print("\n| candidate | false alarms at 90% (mean over cells) | worst cell | power at 80% "
          "| development cells consistent with 90% | below 90% |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, rejects in cands.items():
        size, power = [], []
        for per in cells.values():
            size.append(rejects(*simulate(per, LEVEL, rho, args.draws, rng)).mean())
            power.append(rejects(*simulate(per, 0.8, rho, args.draws, rng)).mean())
        seen = [bool(rejects(np.array([[a for a, _ in per]], float),
                             np.array([[b for _, b in per]], float))[0])
                for per in cells.values()]
        below = [s and sum(a for a, _ in per) / sum(b for _, b in per) < LEVEL
                 for s, per in zip(seen, cells.values(), strict=True)]
        print(f"| {name} | {np.mean(size):.3f} | {max(size):.3f} | {np.mean(power):.3f} | "
              f"{len(cells) - sum(seen)} of {len(cells)} | {sum(below)} |")


if __name__ == "__main__":
    main()
