"""A comparison of :mod:`dlperf.report.regress` as text: the Markdown table of ``dlperf
compare`` (one row per point, the op-class attributions, the notes), the hyperfine-style
summary line, and the JSON with every run used."""

from __future__ import annotations

from typing import Any

from dlperf.report.regress import (
    MIN_ATTRIBUTED_SHARE,
    Comparison,
    PointComparison,
    change_text,
    damaged_text,
    gate_status,
    ok_runs,
    pct_change,
    run_median_s,
    threshold_text,
)
from dlperf.results.schema import RunRecord

__all__ = ["change_text", "attribution_text", "summary_line", "comparison_markdown",
           "comparison_json", "counts_line"]


def _ms(v: float | None) -> str:
    from dlperf.report.tables import fmt_sig

    return fmt_sig(v * 1e3) if v is not None else "–"


def _cell(text: Any) -> str:
    """Markdown table cell: pipes escaped, newlines to spaces, HTML brackets escaped."""
    s = str(text).replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")
    return " ".join(s.split())


def attribution_text(pc: PointComparison) -> str | None:
    """``+6.0% [+4.0, +8.0], 80% in normalisation, 15% in matmul/linear (op classes explain
    97%)``, or why the change is not attributed; None without op classes on both sides."""
    from dlperf.measure.breakdown.opclass import OP_CLASSES

    att = pc.attribution
    if att is None:
        return None
    head = change_text(pc)
    if pc.inconclusive:
        return f"{head}: inconclusive, not attributed to op classes"
    if not pc.significant:
        return f"{head}: no significant change, not attributed to op classes"
    named = [c for c in att["classes"]
             if c["share"] is not None and c["share"] >= MIN_ATTRIBUTED_SHARE]
    parts = [f"{c['share']:.0%} in {OP_CLASSES.get(c['class'], c['class'])}" for c in named[:3]]
    expl = att.get("explained")
    tail = f" (op classes explain {expl:.0%}" if expl is not None else " ("
    tail += f"; traces of {att['runs'][0]} and {att['runs'][1]} run(s))"
    return head + (", " + ", ".join(parts) if parts else ", no single op class") + tail


def _by_point(comp: Comparison, mean: int | None) -> list[str]:
    """The points whose verdict the mean's wording would hide: regressed, inconclusive,
    missing from NEW and not judged (with a threshold), significantly slower or faster points
    against the mean's direction ``mean`` (1 slower, -1 faster, 0 no significant difference,
    None no mean: then only the new points not judged, which the line's head does not
    count), failed in NEW (without a threshold; with one it is a regression)."""
    gate = comp.threshold is not None
    judged = [p for p in comp.points if p.outcome == "compared" and p.judged is not False]
    slower = [p for p in judged if p.verdict == "slower" and not p.regression]
    faster = [p for p in judged if p.verdict == "faster"]
    counts = [(len(comp.regressions) if gate else 0, "regressed"),
              (len(comp.inconclusive), "inconclusive"),
              (len(slower) if mean in (0, -1) else 0, "significantly slower"),
              (len(faster) if mean in (0, 1) else 0, "significantly faster"),
              (len(comp.missing) if gate else 0, "missing from NEW"),
              (len(comp.not_judged) if mean is not None else
               sum(not (p.base and p.new) for p in comp.not_judged), "not judged"),
              (0 if gate else sum(p.outcome == "failed in NEW" for p in comp.points),
               "failed in NEW")]
    return [f"{n} {what}" for n, what in counts if n]


def summary_line(comp: Comparison) -> str:
    """The hyperfine-style line: ``NEW is 1.08x [1.05, 1.11] slower than BASE over 12
    points`` (faster: the inverse factor; BASE and NEW are named above it), or why there is
    none. It agrees with every point's verdict and with the exit status: where a point's
    verdict differs from the mean's (a regression, an inconclusive point, a point slower or
    faster against it, one missing or not judged) ``; by point: 1 regressed, 1 not judged``
    follows, then the rows skipped as damaged (``; 1 damaged row(s) of a.db skipped``), and
    with a threshold the gate's outcome, ``; the gate fails (exit 1)`` or ``;
    the gate passes (exit 0)`` (:func:`~dlperf.report.regress.gate_status`)."""
    s = comp.summary
    mean: int | None = None
    nj_both = [p for p in comp.not_judged if p.base and p.new]
    if s is None and nj_both:
        line = (f"no point judged ({len(nj_both)} run on both sides but not "
                "judged): NEW and BASE not compared")
    elif s is None:
        line = "no point measured on both sides: NEW and BASE not compared"
    else:
        r, lo, hi, n = s
        pts = f"over {n} point{'s' if n != 1 else ''} (geometric mean, {comp.level:.0%} CI)"
        if lo <= 1.0 <= hi:
            mean = 0
            line = (f"NEW takes {r:.3f}x [{lo:.3f}, {hi:.3f}] the step time of BASE: no "
                    f"significant difference {pts}")
        elif r > 1:
            mean = 1
            line = f"NEW is {r:.3f}x [{lo:.3f}, {hi:.3f}] slower than BASE {pts}"
        else:
            mean = -1
            line = f"NEW is {1 / r:.3f}x [{1 / hi:.3f}, {1 / lo:.3f}] faster than BASE {pts}"
    parts = _by_point(comp, mean)
    if parts:
        line += "; by point: " + ", ".join(parts)
    if comp.damaged_rows:
        line += "; " + damaged_text(comp.damaged_rows)
    if comp.threshold is not None:
        code, _ = gate_status(comp)
        line += (f"; the gate fails (exit {code})" if code else "; the gate passes (exit 0)")
    return line


#: The most reasons a point was not judged that :func:`counts_line` names; it counts the rest
#: (``+2 more (see the Not judged list)``), which the report lists point by point.
MAX_REASONS = 4


def counts_line(comp: Comparison) -> str:
    """``4 points: 2 judged (1 regression, 1 inconclusive), 1 not judged (1 run in NEW, 2
    needed), 1 only in BASE``: what the gate did with every point. Of the distinct reasons
    points were not judged, the first :data:`MAX_REASONS` are named and the rest counted."""
    pts = comp.points
    regs, inc = comp.regressions, comp.inconclusive
    verdicts = ([f"{len(regs)} regression{'s' if len(regs) != 1 else ''}"] if regs else []) + (
        [f"{len(inc)} inconclusive"] if inc else [])
    parts = [f"{len(comp.judged)} judged"
             + (f" ({', '.join(verdicts)})" if comp.threshold is not None and verdicts else "")]
    nj = comp.not_judged
    if nj:
        why: dict[str, int] = {}
        for p in nj:
            for r in p.not_judged:
                why[r] = why.get(r, 0) + 1
        shown = list(why.items())[:MAX_REASONS]
        reasons = "; ".join(f"{r}" + (f" ({c} points)" if c > 1 else "") for r, c in shown)
        if len(why) > len(shown):  # the rest are in the report's "Not judged" list
            reasons += f"; +{len(why) - len(shown)} more (see the Not judged list)"
        parts.append(f"{len(nj)} not judged ({reasons})")
    others: dict[str, int] = {}
    for p in pts:
        if p.outcome != "compared" and p.judged is not False:  # failed ones: not judged
            others[p.outcome] = others.get(p.outcome, 0) + 1
    parts += [f"{c} {o}" for o, c in others.items()]
    return f"{len(pts)} point{'s' if len(pts) != 1 else ''}: " + ", ".join(parts)


def _runs_cell(pc: PointComparison) -> str:
    """``used / used`` (``2 of 3`` where runs were left out); on a point not judged, also how
    many of them are fit to judge (``3, 1 fit to judge``). Before any step time was computed
    (a point failed or on one side only), the ok runs."""
    measured = pc.base_step_s is not None

    def side(name: str, runs: list[RunRecord], used: list[RunRecord]) -> str:
        n = len(used) if measured else len(ok_runs(runs))
        out = str(n) if n == len(runs) else f"{n} of {len(runs)}"
        if measured and pc.judged is False:
            fit = n - sum(1 for s, _, _ in pc.left_out if s == name)
            out += f", {fit} fit to judge"
        return out
    return (f"{side('BASE', pc.base, pc.base_used)} / "
            f"{side('NEW', pc.new, pc.new_used)}")


def comparison_markdown(comp: Comparison) -> str:
    """The comparison as Markdown: one row per point (runs used on each side, step times,
    NEW/BASE with its interval and where it comes from, the verdict), then the op-class
    attributions, the notes and the summary line."""
    lvl = f"{comp.level:.0%}"
    lines = [f"BASE: {_cell(comp.base_name)}  \nNEW: {_cell(comp.new_name)}", "",
             (f"| point | runs used (BASE / NEW) | BASE ms | NEW ms | NEW/BASE [{lvl} CI] | "
              "change | CI from | verdict |"), "|---|---:|---:|---:|---:|---:|---|---|"]
    for pc in comp.points:
        ratio = ("–" if pc.ratio is None or pc.ci is None else
                 f"{pc.ratio:.3f} [{pc.ci[0]:.3f}, {pc.ci[1]:.3f}]")
        change = "–" if pc.ratio is None else pct_change(pc.ratio)
        verdict = ("**inconclusive**" if pc.inconclusive else
                   pc.verdict + (" **REGRESSION**" if pc.regression else "")
                   + (", not judged" if pc.judged is False and pc.outcome != "compared"
                      else ""))
        lines.append(f"| {_cell(pc.label)} | {_runs_cell(pc)} | {_ms(pc.base_step_s)} | "
                     f"{_ms(pc.new_step_s)} | {ratio} | {change} | {pc.ci_from or '–'} | "
                     f"{verdict} |")
    atts = [(pc, t) for pc in comp.points if (t := attribution_text(pc))]
    if atts:
        lines += ["", "Op classes (device time per iteration from the traces):", ""]
        lines += [f"- {_cell(pc.label)}: {_cell(t)}" for pc, t in atts]
    nj = comp.not_judged
    if nj:
        lines += ["", "Not judged (the gate judges a point on run-level intervals from runs fit "
                      "to judge; these get no verdict):", ""]
        lines += [f"- {_cell(pc.label)}: {_cell('; '.join(pc.not_judged))}. To judge it: "
                  f"{_cell(pc.advice or '')}" for pc in nj]
        left = [(pc, side, rep, why) for pc in nj for side, rep, why in pc.left_out]
        if left:
            lines += [f"  - left out: {side} run #{rep} of {_cell(pc.label)}: "
                      f"{', '.join(why)}" for pc, side, rep, why in left]
    inc = comp.inconclusive
    if inc and comp.threshold is not None:
        lines += ["", f"Inconclusive (slower than {threshold_text(comp.threshold)} by the "
                      "estimate, but the interval includes 1: a regression neither shown nor "
                      "excluded; the gate fails on them):", ""]
        lines += [f"- {_cell(pc.label)}: {_cell(change_text(pc))}. To judge it: "
                  f"{_cell(pc.advice or '')}" for pc in inc]
    judged_left = [(pc, side, rep, why) for pc in comp.judged for side, rep, why in pc.left_out]
    if judged_left:
        lines += ["", "Runs left out of judged points:", ""]
        lines += [f"- {_cell(pc.label)}: {side} run #{rep}: {', '.join(why)}"
                  for pc, side, rep, why in judged_left]
    notes = [(pc, n) for pc in comp.points for n in pc.notes]
    if notes:
        lines += ["", "Notes:", ""]
        lines += [f"- {_cell(pc.label)}: {_cell(n)}" for pc, n in notes]
    lines += ["", ("Runs used: the runs the ms and the interval come from: on a judged point "
                   "every ok run of each side fit to judge (not on a busy host, without two "
                   "modes or a drift); on a point not judged every ok run, with how many of "
                   "them are fit to judge. CI from *runs*: Welch's t "
                   "interval of the ratio of the geometric means of the run medians (>= 2 runs "
                   "a side: a judged point); *iterations*: bootstrap of the median ratio of the "
                   "measured iterations (one run on a side: run-to-run variation not included, "
                   "so not judged).")]
    if comp.threshold is not None:
        regs = comp.regressions
        lines += ["", f"Regression threshold: significantly slower by more than "
                      f"{threshold_text(comp.threshold)}, or failing in NEW only (in every "
                      "NEW run, or in some where BASE failed in none or, by Fisher's exact "
                      "test, less often): "
                      + (f"{len(regs)} point(s): " + "; ".join(_cell(p.label) for p in regs)
                         if regs else "none")
                  + (f"; inconclusive (the estimate beyond it, the interval including 1): "
                     f"{len(inc)} point(s): "
                     + "; ".join(_cell(p.label) for p in inc) if inc else "")]
    lines += ["", counts_line(comp), "", summary_line(comp)]
    return "\n".join(lines) + "\n"


def comparison_json(comp: Comparison) -> dict[str, Any]:
    """The comparison as JSON-able data: every point with the runs used on each side (row
    id, repeat, status, commit, tag, median s, ``used``: whether the step times come from it),
    the ratio, interval, verdict (``regression``, ``inconclusive``), the run-to-run CV of each
    side, attribution and notes, ``failed_runs`` (where NEW runs failed on a point measured
    on both sides: ``{"base": [failed, runs], "new": [failed, runs], "p"`` (Fisher's exact
    test, None where BASE failed in none), ``"regression", "text"}``); the keys of the
    regressed and the inconclusive points; the counts and the summary."""
    from dlperf.results.history import sha_of, tag_of

    def runs(rs: list[RunRecord], used: list[RunRecord]) -> list[dict[str, Any]]:
        return [{"id": r.stored.id if r.stored else None, "repeat": r.identity.repeat,
                 "status": r.identity.status, "created_at": r.identity.created_at,
                 "sha": sha_of(r), "tag": tag_of(r), "median_s": run_median_s(r),
                 "used": any(r is u for u in used)} for r in rs]

    s = comp.summary
    return {"base": comp.base_name, "new": comp.new_name, "level": comp.level,
            "threshold": comp.threshold,
            "summary": None if s is None else {"ratio": s[0], "ci": [s[1], s[2]], "points": s[3],
                                               "text": summary_line(comp)},
            "regressions": [p.key for p in comp.regressions],
            "damaged_rows": comp.damaged_rows,
            "inconclusive": [p.key for p in comp.inconclusive],
            "counts": {"points": len(comp.points), "judged": len(comp.judged),
                       "inconclusive": len(comp.inconclusive),
                       "not_judged": len(comp.not_judged), "missing": len(comp.missing),
                       "text": counts_line(comp)},
            "points": [{"point_key": p.key, "label": p.label, "outcome": p.outcome,
                        "verdict": p.verdict, "ratio": p.ratio,
                        "ci": list(p.ci) if p.ci else None, "ci_from": p.ci_from,
                        "significant": p.significant, "regression": p.regression,
                        "inconclusive": p.inconclusive,
                        "run_cv": list(p.run_cv) if p.run_cv else None,
                        "rounds_needed": p.rounds_needed,
                        "base_step_s": p.base_step_s, "new_step_s": p.new_step_s,
                        "attribution": p.attribution, "notes": p.notes,
                        "judged": p.judged, "not_judged": p.not_judged, "advice": p.advice,
                        "failed_runs": p.failed_runs,
                        "left_out": [{"side": a, "repeat": b, "reasons": c}
                                     for a, b, c in p.left_out],
                        "base_runs": runs(p.base, p.base_used),
                        "new_runs": runs(p.new, p.new_used)}
                       for p in comp.points]}
