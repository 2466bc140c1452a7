"""Candidate interval rules judged on the development rows of the frozen split, as the
comparison in docs/perfmodel.md ("Why a cell misses 85-95%") was made.

Reads the committed back-test rows (no model is fitted: a second or two) and judges each rule
leave-one-model-out the way :meth:`dlperf.validation.Validation.split_table` does,
except that a development row's interval is calibrated on the other *development* models'
rows only, so that no test row enters the choice. Per rule: the cells (category x bound) whose
90% coverage is inside 85-95% (:func:`dlperf.validation.inside`) and the median over
cells of the cell's median interval width (high / low); then every cell.

The rules:

* ``mondrian``: :func:`dlperf.perfmodel.intervals.mondrian`, the rule ``predict`` uses;
* ``normalized fallback``: the same, except that a bound's group under ``MIN_GROUP_ROWS``
  takes the category's residuals each divided by its own bound's scale (median ``|r|`` of the
  bound's rows, of all rows where the bound has fewer than 5), the conformal quantiles of
  those, times the predicted bound's scale (normalized nonconformity scores: Papadopoulos,
  Vovk & Gammerman 2008; locally weighted conformal, Lei et al. 2018, section 5.2);
* ``normalized``: that for every cell, the bound's own group never used alone;
* ``centred normalized``: ``(r - median_b) / scale_b``, the interval ``median_b + scale_b x``
  the quantiles.

    PYTHONPATH=src python benchmarks/interval_rules.py            # development
    PYTHONPATH=src python benchmarks/interval_rules.py --test mondrian   # one rule's test side

``--test RULE`` judges the test rows (calibrated on every other model's rows, as
``split_table`` does): run it for the rule chosen on development, once.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from collections.abc import Sequence

from dlperf import validation as va
from dlperf.perfmodel import intervals as iv
from dlperf.validation import intervalcheck as cv
from dlperf.validation import split as sp
from dlperf.validation.backtest import Row

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROWS = os.path.join(ROOT, "benchmarks/results/h200/perfmodel_validate_rows.json")
#: Fewest rows of a bound whose median |r| is its own scale (else all rows'); fixed a priori.
MIN_SCALE_ROWS = 5


def _scale(res: Sequence[iv.Residual], bound: str | None, stat) -> float:
    own = [r for r, b in res if bound is not None and b == bound]
    vals = own if len(own) >= MIN_SCALE_ROWS else [r for r, _ in res]
    return stat(vals)


def _normalized(res, bound, level, category, center):
    bounds = {b for _, b in res} | {bound}
    sc = {b: max(_scale(res, b, lambda v: statistics.median(map(abs, v))), 1e-9)
          for b in bounds}
    mu = {b: _scale(res, b, statistics.median) if center else 0.0 for b in bounds}
    lo, hi, method = iv.conformal_bounds([(r - mu[b]) / sc[b] for r, b in res], level)
    return iv.Interval(*iv._ratios(mu[bound] + sc[bound] * lo, mu[bound] + sc[bound] * hi),
                       f"{category}, normalized", len(res), method)


def normalized_fallback(res, bound, level, category=""):
    if not res:
        return None
    if sum(b == bound for _, b in res if bound is not None) >= iv.MIN_GROUP_ROWS:
        return iv.mondrian(res, bound, level, category)
    return _normalized(res, bound, level, category, False)


RULES = {"mondrian": iv.mondrian,
         "normalized fallback": normalized_fallback,
         "normalized": lambda res, b, lv, c="": _normalized(res, b, lv, c, False) if res else None,
         "centred normalized": lambda res, b, lv, c="": (_normalized(res, b, lv, c, True)
                                                         if res else None)}
#: The interval paths' categories judged (the table's, less the all-reduce sizes and the
#: input ladder, which have no development models to leave out).
CATEGORIES = tuple(c for c in va.CATEGORIES if c not in (
    "repeat (noise floor)", "all-reduce >= 1 MiB", "input: leave-one-worker-count-out"))


def judge(rows: list[Row], side: str, rule) -> dict:
    """``{(category, bound): (covered, rows, median width)}`` of ``side``'s rows."""
    spl = sp.load()
    on = [r for r in rows if side == sp.TEST or spl.side(r.model, r.run_id) == side]
    covs = cv.coverage(on, 0.9, rule, categories=CATEGORIES, holdout="model",
                       counted=lambda r: spl.side(r.model, r.run_id) == side)
    width = {d["category"]: d for d in covs}
    out = {}
    for cat, b, k, n in va.coverage_cells(covs):
        out[(cat, b)] = (k, n, width[cat]["median_width" + (f"_{b}" if b else "")])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--test", metavar="RULE", choices=list(RULES),
                    help="judge this rule's test rows instead")
    args = ap.parse_args()
    rows = [Row(**{k: v for k, v in d.items() if k not in ("ape_pct", "baseline_ape_pct")})
            for d in json.load(open(ROWS))]
    side, rules = (sp.TEST, [args.test]) if args.test else (sp.DEVELOPMENT, list(RULES))
    got = {name: judge(rows, side, RULES[name]) for name in rules}
    print(f"{side} rows, leave-one-model-out, 90%: cells inside 85-95% | median width")
    for name, cells in got.items():
        n_in = sum(va.inside(k, n) for k, n, _ in cells.values())
        chance = sum(va.chance_inside(n) for _, n, _ in cells.values())
        print(f"  {name:20s} {n_in} of {len(cells)} (an exact 90% rule on independent rows: "
              f"{chance:.1f}) | {statistics.median(w for *_, w in cells.values()):.3f}")
    print("\n| cell | rows | " + " | ".join(f"{n}: coverage, width" for n in rules) + " |")
    print("|---|---:|" + "---:|" * len(rules))
    for key in got[rules[0]]:
        k0, n, _ = got[rules[0]][key]
        print(f"| {key[0]}{', ' + key[1] if key[1] else ''} | {n} | " + " | ".join(
            f"{got[r][key][0] / n:.1%}{'' if va.inside(got[r][key][0], n) else ' (out)'}, "
            f"{got[r][key][2]:.2f}" for r in rules) + " |")


if __name__ == "__main__":
    main()
