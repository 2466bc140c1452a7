"""How often the regression gate's rule flags, passes or cannot tell, simulated (the table of
docs/usage.md, "The command for CI").

Each simulated gate draws ``rounds`` run medians a side, lognormal around 1 (BASE) and around
the true ratio (NEW) with the run-to-run spread ``s`` of each side (``exp(s * z)``), takes the
interval of :func:`dlperf.report.regress.ratio_from_runs` (Welch's t on the log run medians,
95%) and judges it with the gate's rule at ``--threshold`` (:func:`dlperf.report.regress.
gate_verdict`: *regression* = exit 1, *inconclusive* = exit 5, else the point passes). Rows:
spread and rounds; a row "1% / 25%" has BASE's runs spread by 1% and NEW's by 25% (NEW
measured on a loaded host). Columns: identical code, NEW 5% slower, NEW 2x slower.

``--rule noninferiority`` judges instead by the stricter rule of a non-inferiority test
(pass only when the interval's upper end is at most 1 + threshold; a point that is not a
regression and not below that counts as inconclusive), the rule the gate does not use
(dlperf.report.regress's module docstring says why).

    PYTHONPATH=src python benchmarks/gate_simulate.py [--gates 4000] [--threshold 0.03] \
        [--seed 7] [--rule gate|noninferiority]

Prints the Markdown table (about a minute of one CPU at 4,000 gates a cell).
"""

from __future__ import annotations

import argparse

import numpy as np

from dlperf.report.regress import gate_verdict, ratio_from_runs

#: (BASE's spread, NEW's spread, rounds) of the table's rows.
ROWS = [(0.01, 0.01, 3), (0.01, 0.01, 5), (0.02, 0.02, 3), (0.02, 0.02, 5),
        (0.20, 0.20, 3), (0.20, 0.20, 5), (0.30, 0.30, 3), (0.30, 0.30, 5),
        (0.01, 0.25, 3), (0.01, 0.25, 5)]
#: The true ratios NEW/BASE of the table's columns.
TRUE = (1.0, 1.05, 2.0)


def verdict(ratio: float, low: float, high: float, threshold: float, rule: str) -> str:
    """``regression``, ``inconclusive`` or ``pass`` by ``rule`` (module docstring)."""
    v = gate_verdict(ratio, low, high, threshold)
    if rule == "gate" or v == "regression":
        return v
    return "inconclusive" if high > 1.0 + threshold else "pass"


def simulate(spread_base: float, spread_new: float, rounds: int, true: float, gates: int,
             threshold: float = 0.03, seed: int = 7, rule: str = "gate") -> dict[str, float]:
    """The shares of ``gates`` simulated gates (module docstring) judged ``regression``,
    ``inconclusive`` and ``pass``."""
    rng = np.random.default_rng(seed)
    out = {"regression": 0, "inconclusive": 0, "pass": 0}
    for _ in range(gates):
        b = np.exp(spread_base * rng.standard_normal(rounds))
        n = true * np.exp(spread_new * rng.standard_normal(rounds))
        out[verdict(*ratio_from_runs(list(b), list(n)), threshold, rule)] += 1
    return {k: v / gates for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gates", type=int, default=4000)
    ap.add_argument("--threshold", type=float, default=0.03)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--rule", choices=("gate", "noninferiority"), default="gate")
    a = ap.parse_args()
    print("| run-to-run spread s (BASE / NEW) | rounds | identical code flagged | identical "
          "code inconclusive | a 5% slowdown caught | a 5% slowdown inconclusive | a 2x "
          "slowdown caught | a 2x slowdown inconclusive |")
    print("|---|---|---|---|---|---|---|---|")
    for sb, sn, k in ROWS:
        cells = []
        for true in TRUE:
            r = simulate(sb, sn, k, true, a.gates, a.threshold, a.seed, a.rule)
            cells += [f"{r['regression']:.1%}", f"{r['inconclusive']:.1%}"]
        s = f"{sb:.0%}" if sb == sn else f"{sb:.0%} / {sn:.0%}"
        print(f"| {s} | {k}{' (default)' if k == 5 else ''} | " + " | ".join(cells) + " |",
              flush=True)


if __name__ == "__main__":
    main()
