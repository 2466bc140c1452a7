"""Step-time gaps between frameworks or modes at the same point, attributed to op classes
(``dlperf results --op-classes``, the report's "Step-time gaps" section).

:func:`gap_attribution`: for two frameworks or modes at the same point (model, device,
precision, batch, data, threads, loader workers, devices), the difference in step time split
into the difference of each op class's device time, the difference in the fused step's device
idle time (fused step - traced device time), and the rest (traced device time beyond the fused
step). Idle counts as explained where the host is shown to set the pace of that side (its host
issue time is at least :data:`HOST_BOUND` of the step: the device waits for the host's
dispatch, the CPU cost Dai et al. 2022 weigh against the GPU work); other idle and the rest
are not. A gap that is not told apart from noise (:func:`gap_significance`) is not attributed.
:func:`gap_markdown` and :func:`gap_tables` show them. Nothing here imports a framework.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rich.table import Table

from dlperf.measure.breakdown.opclass import OP_CLASSES
from dlperf.measure.breakdown.phases import HOST_BOUND, RECONCILE_TOL
from dlperf.registry import FRAMEWORKS
from dlperf.report.cells import DASH, batch_cell, data_cell, device_cell, md_table, rich_table
from dlperf.report.opclasses import class_changes, op_classes_of
from dlperf.report.opclasses import ms_cell as _ms
from dlperf.results.schema import RunRecord
from dlperf.results.view import (
    POINT_KEYS,
    ci_s,
    config_of,
    env_of,
    fields,
    framework_mode,
    is_ok,
    median_s,
    point_of,
    result_id,
)

__all__ = ["BASELINE_ORDER", "MIN_GAP_SHARE", "GAP_CI_LEVEL", "REST_WARN_SHARE", "GAP_LEGEND",
           "ENV_NOTE", "slowed_by_breakdown", "gap_significance", "host_paced",
           "gap_attribution", "gap_verdict", "gap_markdown", "gap_tables"]

#: Order of framework/mode when choosing the baseline of a pair: the registry's frameworks,
#: each with its modes, in their order (torch/eager, torch/graph, jax/xla, tensorflow/eager,
#: ...).
BASELINE_ORDER = tuple(f"{fw}/{mode}" for fw, info in FRAMEWORKS.items() for mode in info.modes)
#: Below this share of the baseline's step a gap is not attributed, even when its CI excludes
#: 0: the breakdown's own parts are held to agree with the fused step within 3%
#: (:data:`dlperf.measure.breakdown.phases.RECONCILE_TOL`, issue 4), and the two steps come from
#: separate processes, whose medians vary by more than a within-run CI says (README,
#: "Repeated runs"). See :func:`gap_significance`.
MIN_GAP_SHARE = RECONCILE_TOL
#: Confidence level of the step-time gap's interval.
GAP_CI_LEVEL = 0.95


def _order(lab: str) -> int:
    return BASELINE_ORDER.index(lab) if lab in BASELINE_ORDER else len(BASELINE_ORDER)


def slowed_by_breakdown(rec: RunRecord) -> bool:
    """True for a JAX ``--breakdown`` run on a GPU that turned XLA command buffers off (flags
    ``command_buffers`` = ``off ...``): its fused step ran without them too, which is not the
    framework's own speed (a scanned LSTM on the H200: 10.30 ms against 4.39 ms)."""
    flags = rec.flags or {}
    return str(flags.get("command_buffers", "")).startswith("off")


def _references(recs: Sequence[RunRecord]) -> dict[tuple, RunRecord]:
    """Ok results measured without --breakdown/--trace, newest per (point, framework/mode)."""
    refs: dict[tuple, RunRecord] = {}
    for r in recs:
        cfg = config_of(r)
        if (not is_ok(r) or not median_s(r) or cfg.get("breakdown")
                or cfg.get("trace_dir") or op_classes_of(r)):
            continue
        key = (point_of(r), framework_mode(r))
        if key not in refs or str(r.identity.created_at or "") >= str(
                refs[key].identity.created_at or ""):
            refs[key] = r
    return refs


def _ci_of(rec: RunRecord) -> tuple[float, float] | None:
    lo, hi = ci_s(rec)
    if isinstance(lo, (int, float)) and isinstance(hi, (int, float)):
        return float(lo), float(hi)
    return None


def gap_significance(a: RunRecord, b: RunRecord,
                     samples_of: Callable[[int], Sequence[float] | None] | None = None
                     ) -> dict[str, Any]:
    """Whether the fused-step gap ``b - a`` of two rows is told apart from noise.

    Rule (both must hold for the gap to be attributed to op classes):

    1. **Not within noise**: the 95% (:data:`GAP_CI_LEVEL`) confidence interval of
       median(b) - median(a) excludes 0. The interval is the two-sample percentile bootstrap
       of the two runs' stored measured samples (phase ``measure``; each run resampled on its
       own, 2000 resamples, seed 0: :func:`dlperf.stats.median_diff_ci`, after Efron &
       Tibshirani 1993, ch. 8 and 13, the same resampling as the speed-up CIs of
       ``--compare``). Where samples are missing, the interval made of the two steps' own 95%
       CIs of the median, ``[lo_b - hi_a, hi_b - lo_a]``: wider than the bootstrap's, so it
       can call a real difference noise but never the reverse (two 95% intervals that do not
       overlap mean a difference at the 5% level or stricter; Schenker & Gentleman 2001).
    2. **Not too small**: |gap| is at least :data:`MIN_GAP_SHARE` (3%) of ``a``'s step. A
       within-run interval covers iteration-to-iteration noise only; two runs are two
       processes, whose medians differ by more (README, "Repeated runs"), and the
       attribution's parts (the profiler trace, the phases) are held to agree with the fused
       step within 3% (issue 4; :data:`dlperf.measure.breakdown.phases.RECONCILE_TOL`), so a smaller
       gap is below what the attribution can resolve.

    Args:
        a, b: records (their median step, its CI and their ids): the
            results whose fused steps make the gap (a run without --breakdown where the gap
            takes its step from one).
        samples_of: result id -> measured per-iteration times in s (None or empty: not stored).

    Returns:
        ``{"gap_s", "ci_s": [low, high] or None, "ci_source", "within_noise", "too_small",
        "attributed", "why_not"}`` (``why_not``: ``"within noise"``, ``"too small"``, ``"no
        gap"`` or None); ``within_noise`` is None when neither samples nor CIs are stored
        (then only rule 2 decides, and ``ci_source`` says so).
    """

    sa, sb = float(median_s(a)), float(median_s(b))
    gap = sb - sa
    ia, ib = result_id(a), result_id(b)
    xa = list(samples_of(ia) or []) if samples_of and ia is not None else []
    xb = list(samples_of(ib) or []) if samples_of and ib is not None else []
    ci: tuple[float, float] | None = None
    if len(xa) >= 2 and len(xb) >= 2:
        from dlperf.stats import median_diff_ci  # numpy, for the gaps that have samples only

        _, lo, hi = median_diff_ci(xa, xb, level=GAP_CI_LEVEL)
        ci = (lo, hi)
        source = (f"bootstrap of the measured samples ({len(xa)} and {len(xb)} iterations; "
                  f"{GAP_CI_LEVEL:.0%})")
    elif (ca := _ci_of(a)) and (cb := _ci_of(b)):
        ci = (cb[0] - ca[1], cb[1] - ca[0])
        source = f"the two steps' own {GAP_CI_LEVEL:.0%} CIs (no stored samples)"
    else:
        source = "none: no samples and no CIs stored"
    within = None if ci is None else bool(ci[0] <= 0.0 <= ci[1])
    too_small = abs(gap) < MIN_GAP_SHARE * sa
    why = None
    if within:
        why = "within noise"
    elif too_small:
        why = "too small"
    elif gap == 0:
        why = "no gap"
    return {"gap_s": gap, "ci_s": None if ci is None else [ci[0], ci[1]], "ci_source": source,
            "within_noise": within, "too_small": too_small, "attributed": why is None,
            "why_not": why}


def host_paced(r: RunRecord, step_s: float) -> dict[str, Any] | None:
    """Evidence that the host sets the pace of ``r``'s fused step of ``step_s`` seconds, or
    None: its phased breakdown, timed by CUDA events (so its host times are the host's issue
    work alone, with no wait for the device), took at least :data:`HOST_BOUND` (90%) of the
    step on the host per iteration. Then the device cannot run ahead of the host, and its
    idle time in the fused step is time spent waiting for the host's dispatch.

    Returns ``{"dispatch_s", "step_s", "ratio"}`` (seconds per iteration) or None (no
    breakdown, another timer, or a host that issues the step faster than the device runs it).
    """
    bd = r.breakdown
    if bd is None:
        return None
    disp = (bd.dispatch_s or {}).get("median")
    if bd.timer != "cuda_events" or not disp or not step_s:
        return None
    return ({"dispatch_s": disp, "step_s": step_s, "ratio": disp / step_s}
            if disp >= HOST_BOUND * step_s else None)


def _fused_idle(step_s: float, busy_s: float) -> float:
    """Device idle per iteration in the fused step: the step less the traced device time,
    assuming the device ops take as long in the trace as in the fused step (0 where the
    traced ops take longer than the whole step)."""
    return max(0.0, step_s - busy_s)


def gap_attribution(rows: Sequence[RunRecord],
                    samples_of: Callable[[int], Sequence[float] | None] | None = None
                    ) -> list[dict[str, Any]]:
    """Step-time gaps between frameworks/modes at the same point, attributed to op classes.

    For each pair of ``ok`` rows with op classes at the same :data:`POINT_KEYS` and different
    framework/mode (baseline ``a`` first in :data:`BASELINE_ORDER`): ``gap_s`` = fused median
    of ``b`` - of ``a``; per class ``diff_s`` = class time of ``b`` - of ``a`` (device time per
    iteration from each run's profiler trace) and ``share`` = diff / gap; ``class_diff_s`` =
    the sum of the class differences. Each side's device idle in its fused step,
    ``a_idle_s``/``b_idle_s`` = max(0, fused step - traced device time) (the kernels take as
    long traced as untraced; the trace's own idle is not used, since the profiler slows the
    host and so lengthens the idle of a host-bound step: ``traced_idle_diff_s`` keeps it for
    reference). ``a_host_paced``/``b_host_paced``: :func:`host_paced`'s evidence, or None.
    ``host_idle_diff_s`` = the difference of the idle of host-paced sides (the device waiting
    for the host), ``idle_diff_s`` = the rest of the idle difference (cause not shown),
    ``rest_s`` = gap - classes - both idles (traced device time beyond a fused step), so
    classes + host idle + idle + rest = gap exactly. ``explained`` = (``class_diff_s`` +
    ``host_idle_diff_s``) / gap; ``explained_by_classes`` = ``class_diff_s`` / gap;
    ``explained_with_idle`` adds ``idle_diff_s`` too, for reference. ``env_differs``: where
    the rows that make the gap (steps and traces) ran in different environments
    (:func:`dlperf.env.environment_differences`); such a gap mixes the machines' difference
    with the frameworks' and is marked.

    ``significance`` is :func:`gap_significance` of the two rows whose fused steps make the
    gap (``samples_of``: result id -> measured samples, e.g. from
    :meth:`dlperf.results.store.ResultStore.samples`; without it, the rows' own CIs). A gap
    that is not ``attributed`` (within noise, or under :data:`MIN_GAP_SHARE` of ``a``'s step)
    keeps its class differences in ms but has ``explained``, ``explained_by_classes``,
    ``explained_with_idle`` and every ``share`` None, and ``not_attributed`` says why.

    A side whose breakdown run was slowed by the breakdown itself (:func:`slowed_by_breakdown`)
    takes its fused step from a run of the same point without --breakdown in ``rows`` when
    there is one (``a_ref``/``b_ref`` True; the breakdown run's own step stays in
    ``a_bd_step_s``/``b_bd_step_s``), so the gap is the frameworks' and not the breakdown
    mode's; without one, ``note`` says that the gap is partly the breakdown mode's.
    """
    ok = [r for r in rows if is_ok(r) and op_classes_of(r) and median_s(r)]
    refs = _references(rows)
    out = []
    for i, a in enumerate(ok):
        for b in ok[i + 1:]:
            if point_of(a) != point_of(b) or framework_mode(a) == framework_mode(b):
                continue
            first = (_order(framework_mode(b)), framework_mode(b)) < (_order(framework_mode(a)), framework_mode(a))
            out.append(_gap(b, a, refs, samples_of) if first else
                       _gap(a, b, refs, samples_of))
    return sorted(out, key=lambda d: (str(d["model"]), str(d["precision"]), d["batch_size"] or 0,
                                      d["a"], d["b"]))


def _step_of(r: RunRecord, refs: Mapping[tuple, RunRecord]) -> tuple[RunRecord, bool]:
    """The result whose fused step stands for ``r``'s: a run of its point without
    --breakdown where the breakdown slowed ``r`` (and True), else ``r`` (and False)."""
    if slowed_by_breakdown(r):
        ref = refs.get((point_of(r), framework_mode(r)))
        if ref is not None:
            return ref, True
    return r, False


def _gap(a: RunRecord, b: RunRecord, refs: Mapping[tuple, RunRecord],
         samples_of: Callable[[int], Sequence[float] | None] | None) -> dict[str, Any]:
    """One entry of :func:`gap_attribution`: ``b`` against the baseline ``a``."""
    ca, cb = op_classes_of(a) or {}, op_classes_of(b) or {}
    (ra, ref_a), (rb, ref_b) = _step_of(a, refs), _step_of(b, refs)
    sa, sb = float(median_s(ra)), float(median_s(rb))
    gap = sb - sa
    sig = gap_significance(ra, rb, samples_of)
    attributed = sig["attributed"]
    unref = [framework_mode(x) for x, ref in ((a, ref_a), (b, ref_b))
             if slowed_by_breakdown(x) and not ref]
    note = (f"{', '.join(unref)} ran with XLA command buffers off (--breakdown) and no "
            f"run without --breakdown of this point is here: the gap is partly the "
            f"breakdown mode's" if unref else None)
    classes = class_changes(ca, cb, OP_CLASSES, gap if attributed else None)
    cls_sum = math.fsum(d["diff_s"] for d in classes)
    ia = a.trace.idle_s if a.trace is not None else None
    ib = b.trace.idle_s if b.trace is not None else None
    traced_idle = (ib or 0.0) - (ia or 0.0) if ia is not None and ib is not None else None
    idle_a = _fused_idle(sa, math.fsum(ca.values()))
    idle_b = _fused_idle(sb, math.fsum(cb.values()))
    # host pace from the run whose phases were measured (the breakdown row), against the step
    # the gap uses
    hp_a, hp_b = host_paced(a, sa), host_paced(b, sb)
    host_idle = (idle_b if hp_b else 0.0) - (idle_a if hp_a else 0.0)
    other_idle = (0.0 if hp_b else idle_b) - (0.0 if hp_a else idle_a)
    same_fw = a.identity.framework == b.identity.framework
    from dlperf.env import environment_differences

    env = list(dict.fromkeys(
        d for x, y in ((ra, rb), (a, b))
        for d in environment_differences(env_of(x), env_of(y), same_framework=same_fw)))
    return {
        **fields(a, POINT_KEYS),
        "a": framework_mode(a), "b": framework_mode(b), "a_step_s": sa, "b_step_s": sb,
        "a_ref": ref_a, "b_ref": ref_b, "a_bd_step_s": median_s(a),
        "b_bd_step_s": median_s(b), "note": note,
        "gap_s": gap, "gap_ci_s": sig["ci_s"], "significance": sig, "env_differs": env,
        "not_attributed": sig["why_not"], "classes": classes,
        "class_diff_s": cls_sum, "a_idle_s": idle_a, "b_idle_s": idle_b,
        "a_host_paced": hp_a, "b_host_paced": hp_b,
        "host_idle_diff_s": host_idle, "idle_diff_s": other_idle,
        "traced_idle_diff_s": traced_idle,
        "rest_s": gap - cls_sum - host_idle - other_idle,
        "explained": (cls_sum + host_idle) / gap if attributed else None,
        "explained_by_classes": cls_sum / gap if attributed else None,
        "explained_with_idle": ((cls_sum + host_idle + other_idle) / gap
                                if attributed else None),
    }


def _ci_text(g: Mapping[str, Any]) -> str:
    ci = g.get("gap_ci_s")
    return "no CI" if not ci else f"CI [{ci[0] * 1e3:+.4g}, {ci[1] * 1e3:+.4g}] ms"


#: A gap whose rest (traced device time beyond the fused steps) exceeds this share of it is
#: flagged: its class differences come from traced steps unlike the measured ones.
REST_WARN_SHARE = 0.25


def gap_verdict(g: Mapping[str, Any]) -> str:
    """One phrase on a gap: its CI and the classes' share, or why it is not attributed."""
    why = g.get("not_attributed")
    if why == "within noise":
        return f"gap within noise ({_ci_text(g)}): not attributed"
    if why == "too small":
        return (f"{abs(g['gap_s']) / g['a_step_s']:.1%} of {g['a']}'s step, under the "
                f"{MIN_GAP_SHARE:.0%} floor ({_ci_text(g)}): not attributed")
    if why:
        return f"{why} ({_ci_text(g)}): not attributed"
    if g.get("host_idle_diff_s"):
        text = (f"{_ci_text(g)}; op classes and the host-paced idle explain "
                f"{g['explained']:.0%} of it (op classes alone {g['explained_by_classes']:.0%})")
    else:
        text = f"{_ci_text(g)}; op classes explain {g['explained']:.0%} of it"
    rest = g.get("rest_s") or 0.0
    if abs(rest) > REST_WARN_SHARE * abs(g["gap_s"]):
        text += (f"; the rest is {rest / g['gap_s']:+.0%} of the gap (traced steps unlike the "
                 f"fused ones): read the shares with care")
    return text


def _share(g: Mapping[str, Any], v: float | None) -> str:
    return DASH if v is None or g.get("explained") is None else f"{v / g['gap_s']:+.0%}"


def _gap_rows(g: Mapping[str, Any]) -> list[list[str]]:
    rows = [[OP_CLASSES.get(c["class"], c["class"]), _ms(c["a_s"]), _ms(c["b_s"]),
             f"{c['diff_s'] * 1e3:+.4g}", _share(g, c["diff_s"])] for c in g["classes"]]
    rows.append(["sum of op classes (explained)", DASH, DASH, f"{g['class_diff_s'] * 1e3:+.4g}",
                 _share(g, g["class_diff_s"])])

    def idle(side: str, host: bool) -> str:
        paced = bool(g.get(f"{side}_host_paced"))
        v = g.get(f"{side}_idle_s")
        return _ms(v) if v is not None and paced == host else DASH

    if g.get("a_host_paced") or g.get("b_host_paced"):
        rows.append(["device idle, waiting for the host (explained)", idle("a", True),
                     idle("b", True), f"{g['host_idle_diff_s'] * 1e3:+.4g}",
                     _share(g, g["host_idle_diff_s"])])
    if g.get("idle_diff_s") is not None:
        rows.append(["device idle, other (not explained)", idle("a", False), idle("b", False),
                     f"{g['idle_diff_s'] * 1e3:+.4g}", _share(g, g["idle_diff_s"])])
    rows.append(["rest: traced device time beyond the fused step (not explained)", DASH, DASH,
                 f"{g['rest_s'] * 1e3:+.4g}", _share(g, g["rest_s"])])
    return rows


GAP_LEGEND = (
    "*gap*: fused step of the second framework/mode minus the first's (median ms per "
    "iteration). Op-class times are device time per iteration from each run's profiler trace. "
    "*device idle* = fused step - traced device time (max 0), per side; it counts as explained "
    f"only for a side whose host is shown to set its pace (its phased breakdown took at least "
    f"{HOST_BOUND:.0%} of the step to issue the step, timed by CUDA events: the device waits "
    "for the host's dispatch); other idle and the *rest* (traced device time beyond the fused "
    "step: kernels slower under the profiler or in the breakdown's process) are not. "
    "*explained* = (op classes + host-paced idle) / gap; classes + idle + rest = gap. "
    "Shares are signed: a row with the gap's sign adds to it, one with the other sign offsets "
    "it, so the explained parts can sum past 100% when other rows pull the other way; a "
    f"rest over {REST_WARN_SHARE:.0%} of the gap is flagged. "
    "A gap is attributed only when the "
    f"{GAP_CI_LEVEL:.0%} CI of the difference of the two medians excludes 0 (bootstrap of the "
    "two runs' measured samples, each resampled on its own; without samples, the two steps' "
    f"own CIs) and the gap is at least {MIN_GAP_SHARE:.0%} of the first's step (the agreement "
    "the breakdown holds its parts to; separate processes vary more than a within-run CI "
    "says); otherwise the differences are listed without shares.")


#: Said of a gap whose two sides ran in different environments.
ENV_NOTE = ("measured in different environments (the gap mixes the difference of machine, "
            "software or optimizer implementation with the frameworks'; re-measure both sides "
            "in one)")


def gap_markdown(gaps: Sequence[Mapping[str, Any]]) -> str:
    """One Markdown table per pair (classes by |difference|, their sum, idle, rest) and the
    legend; the heading line says the gap, its CI and the explained share, or why the gap is
    not attributed."""
    if not gaps:
        return ""
    parts = []
    for g in gaps:
        w = "" if g.get("loader_workers") is None else f" ({data_cell(g)})"
        head = (f"**{g['model']}** {g['precision']} batch {batch_cell(g)}{w} on "
                f"{device_cell(g)}: "
                f"{g['b']} vs {g['a']}: step {g['b_step_s'] * 1e3:.4g} vs "
                f"{g['a_step_s'] * 1e3:.4g} ms, gap {g['gap_s'] * 1e3:+.4g} ms")
        refd = [g[s_] for s_, f in (("a", "a_ref"), ("b", "b_ref")) if g.get(f)]
        if refd:
            head += (f" ({', '.join(refd)}: the fused step of its run without --breakdown; "
                     f"the breakdown run slowed it)")
        head += "; " + gap_verdict(g)
        if g.get("env_differs"):
            head += f". {ENV_NOTE}: {'; '.join(g['env_differs'])}"
        if g.get("note"):
            head += f". Note: {g['note']}"
        parts.append(head + "\n\n" + md_table(("op class", f"{g['a']} ms", f"{g['b']} ms", "diff ms",
                                          "share of gap"), _gap_rows(g), 1))
    return "\n".join(parts) + "\n" + GAP_LEGEND + "\n"


def gap_tables(gaps: Sequence[Mapping[str, Any]]) -> list[Table]:
    """The same as :func:`gap_markdown`, one rich table per pair."""
    out = []
    for g in gaps:
        w = "" if g.get("loader_workers") is None else f" {g['loader_workers']} wkr"
        n = g.get("world_size") or 1
        title = (f"{g['model']} {g['precision']} b={batch_cell(g)}{w}"
                 f"{f' x{n}' if n > 1 else ''}: {g['b']} vs {g['a']}, gap "
                 f"{g['gap_s'] * 1e3:+.4g} ms, " + gap_verdict(g)
                 + (" (a step from a run without --breakdown)" if g.get("a_ref") or g.get("b_ref")
                    else "") + (f"\nnote: {g['note']}" if g.get("note") else "")
                 + (f"\n{ENV_NOTE}: {'; '.join(g['env_differs'])}" if g.get("env_differs")
                    else ""))
        out.append(rich_table(("op class", f"{g['a']} ms", f"{g['b']} ms", "diff ms", "share of gap"),
                         _gap_rows(g), title, 1))
    return out


