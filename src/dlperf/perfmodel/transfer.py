"""What-if transfer ratios: how other models' measured steps changed between two configurations.

:func:`transfer_ratios` gives :func:`dlperf.perfmodel.model.what_if` the ratio ``T(to) /
T(from)`` of other models' pairs stored in both configurations, split by the bound of the base
point: the host part of a what-if is scaled by the host-bound pairs' ratio, the device part by
the device-bound pairs'. A precision change in a mode that dispatches operators moves the host
time by :mod:`dlperf.perfmodel.hostmove` instead.
"""

from __future__ import annotations

import math
from statistics import median

from dlperf.perfmodel.calibrate import Calibration, Config
from dlperf.registry import framework_info

#: Pairs of other models a what-if ratio takes the median of (the nearest in FLOPs per step).
#: Chosen on the what-if back-test of benchmarks/results/h200 (see docs/perfmodel.md).
TRANSFER_NEAREST = 3


def transfer_ratios(cal: Calibration, frm: Config, to: Config, batch: int,
                    nearest: int = TRANSFER_NEAREST) -> dict[str, tuple[float, str]]:
    """Measured ``T(to) / T(from)`` of *other* models' pairs (same batch, same results file),
    split by the bound of the ``from`` point in its own series fit: ``{"host": (ratio,
    where from), "device": (...)}``, each present only when measured. The ratio is the
    median of the ``nearest`` pairs closest in training FLOPs per step to ``frm.model`` at
    ``batch`` (a GEMM's speed-up from bf16 grows with its size), models of the same family
    first. A pair whose base asked for a layout while ``to``'s mode picks its own (registry
    ``layout_free_modes``) is skipped: it changes the layout too (resnet50 bf16 NCHW eager
    -> graph 0.38, at ``auto`` 0.70, frameworks.db)."""
    from dlperf.zoo import SPECS
    lf = getattr(framework_info(to.framework), "layout_free_modes", ())
    free = to.mode in lf and frm.mode not in lf  # pairs at a layout of their own skipped
    fam = getattr(SPECS.get(frm.model), "family", None)
    f_target = cal.work(frm.model, frm.framework, frm.precision).flops(batch)
    changes = {k: getattr(to, k) for k in ("precision", "mode", "framework")
               if getattr(to, k) != getattr(frm, k)}
    samples: dict[str, list[tuple[int, float, float, str]]] = {"host": [], "device": []}
    by = {}
    for p in cal.points:
        if p.world_size == 1 and not p.instrumented and p.model != frm.model:
            by[(Config.of(p), p.source, p.batch_size)] = p
    for (c, src, b), p in by.items():
        if c.group != frm.group or (free and c.layout != "auto"):
            continue
        q = by.get((c.with_(**changes), src, b))
        if q is None:
            continue
        ser = [x for x in cal.series(c) if x[0].source == src]
        try:  # the pair's bound by its own series (no other-session terms: cheap, and
            # never touching the configuration a what-if back-test withholds)
            fit = cal.fit_points(c, ser[0], with_sessions=False)
        except (IndexError, ValueError):
            continue
        f = cal.work(c.model, c.framework, c.precision).flops(p.per_device_batch)
        dist = abs(math.log(max(f, 1.0) / max(f_target, 1.0)))
        other_family = int(getattr(SPECS.get(c.model), "family", None) != fam)
        samples[fit.bound(p.per_device_batch)].append(
            (other_family, dist, q.step_time_s / p.step_time_s, c.model))
    out = {}
    for kind, ss in samples.items():
        if ss:
            pick = sorted(ss)[:nearest]
            models = sorted({s[3] for s in pick})
            out[kind] = (median(s[2] for s in pick),
                         f"median T ratio of the {len(pick)} {kind}-bound pair(s) of "
                         f"{len(models)} other model(s) nearest in FLOPs per step "
                         f"({', '.join(models)}"
                         + (", same family)" if pick[0][0] == 0 else ")"))
    return out
