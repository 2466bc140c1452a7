"""Comparisons between stored results: graph-optimisation effect and framework ratios.

Both are ratios of median iteration times with a bootstrap CI computed from the raw samples
(:func:`dlperf.stats.ratio_of_medians_ci`): ``speed-up = median(baseline) / median(other)``,
so a value above 1 means the other is faster. Only results that measured the same thing are
compared: same model, device, precision, batch size, data and threads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from dlperf.stats import ratio_of_medians_ci

#: What makes two results comparable.
POINT_KEYS = ("model", "device", "precision", "batch_size", "data", "threads")
#: The eager baseline of each framework's graph modes (JAX has no eager training mode here).
EAGER = {"torch": "eager", "tensorflow": "eager"}


def _point(r: dict[str, Any]) -> tuple:
    return tuple(r.get(k) for k in POINT_KEYS)


def _pairs(rows: Sequence[dict[str, Any]], match: Callable[[dict, dict], bool]):
    ok = [r for r in rows if r.get("status") == "ok"]
    for base in ok:
        for other in ok:
            if base is not other and _point(base) == _point(other) and match(base, other):
                yield base, other


def _compare(pairs, samples_of: Callable[[int], list[float]]) -> list[dict[str, Any]]:
    out = []
    for base, other in pairs:
        ratio, lo, hi = ratio_of_medians_ci(samples_of(base["id"]), samples_of(other["id"]))
        out.append({**{k: base.get(k) for k in POINT_KEYS},
                    "baseline": f"{base['framework']}/{base['mode']}",
                    "other": f"{other['framework']}/{other['mode']}",
                    "speedup": ratio, "ci_low": lo, "ci_high": hi})
    return sorted(out, key=lambda d: (str(d["model"]), str(d["other"]), str(d["precision"]),
                                      d["batch_size"] or 0))


def mode_speedups(rows: Sequence[dict[str, Any]],
                  samples_of: Callable[[int], list[float]]) -> list[dict[str, Any]]:
    """Graph-optimisation effect: each framework's graph/xla modes against its eager mode.

    Args:
        rows: result rows (from :meth:`ResultStore.rows`), with ``id``.
        samples_of: result id -> measured per-iteration times (s).
    """
    return _compare(_pairs(rows, lambda b, o: b["framework"] == o["framework"]
                           and EAGER.get(b["framework"]) == b["mode"] and o["mode"] != b["mode"]),
                    samples_of)


def framework_ratios(rows: Sequence[dict[str, Any]], samples_of: Callable[[int], list[float]],
                     baseline: str = "torch/eager") -> list[dict[str, Any]]:
    """Every other framework (each of its modes) against ``baseline`` (``framework/mode``) at
    the same point; modes of the baseline's own framework are :func:`mode_speedups`' job."""
    fw = baseline.split("/")[0]
    return _compare(_pairs(rows, lambda b, o: f"{b['framework']}/{b['mode']}" == baseline
                           and o["framework"] != fw), samples_of)


def markdown(comparisons: Sequence[dict[str, Any]]) -> str:
    """A Markdown table of comparisons (speed-up with its 95% CI)."""
    if not comparisons:
        return "No comparable pairs of results.\n"
    lines = ["| model | precision | batch | device | data | threads | baseline | other | "
             "speed-up [95% CI] |", "|---|---|---:|---|---|---:|---|---|---:|"]
    for c in comparisons:
        lines.append(f"| {c['model']} | {c['precision']} | {c['batch_size']} | {c['device']} | "
                     f"{c['data']} | {c['threads'] or '-'} | {c['baseline']} | {c['other']} | "
                     f"{c['speedup']:.3f} [{c['ci_low']:.3f}, {c['ci_high']:.3f}] |")
    return "\n".join(lines) + "\n"
