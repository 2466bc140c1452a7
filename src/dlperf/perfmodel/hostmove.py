"""Moving a host time from one configuration to another of the same model.

:func:`added_ops_host` moves it across a precision change where the mode dispatches operators
(eager): the host of the operators the change adds; :func:`host_elsewhere` gives a series fit
(:meth:`dlperf.perfmodel.calibrate.Calibration.prior`) the host time its model showed in other
precisions or results files. Both take a :class:`~dlperf.perfmodel.calibrate.Calibration` and
its :class:`~dlperf.perfmodel.calibrate.Config` objects (typed ``Any`` here: this module is
imported by ``calibrate`` and imports nothing of dlperf, so no import cycle).
"""

from __future__ import annotations

from statistics import median
from typing import Any


def added_ops_host(cal: Any, frm: Any, to: Any, host_s: float,
                   device_name: str | None = None) -> tuple[float, str] | None:
    """The host time (s) of ``to`` from ``frm``'s, ``host_s``, where the two differ in
    precision only and their mode dispatches operators (``Calibration.count_kind`` ``"ops"``:
    eager mode): ``H_to = H_frm + (n_to - n_frm) c_add``, with ``n`` the model's operators
    per step in each precision (``Calibration.op_count``, a count of its code) and ``c_add``
    the host cost of an operator the change adds, the median over *other* models with an
    identified host time in both groups (roofline fits without ``frm.model``) of
    ``(H_to - H_frm) / (n_to - n_frm)``. With the second value, where from.

    Mixed precision in eager PyTorch adds autocast's cast operators (``aten::_to_copy``) to every
    step: 1.4-2.5x the fp32 operator count on the zoo, while the step's host time grows by less
    (the H200 files, benchmarks/results/h200: torch eager's identified host times are a median
    51 us per fp32 operator and 37 us per bf16 one; the operators bf16 adds cost 16 us each,
    the median over 12 models, from -30 us (deepspeech2, whose cuDNN RNN's host is cheaper in
    bf16) to 40 us (gpt2_small)).
    A step ratio of other models' pairs, the alternative, carries their device change into the
    host term: with it 164 of 190 fp32->bf16 what-if signs came right on the H200 files, 169
    with this (docs/perfmodel.md, "What-if"). Dai et al. 2022 (sec. 4) model a framework's
    host time by the operators it dispatches.

    None when the configurations differ in anything but precision, the mode is not counted in
    operators, a count is missing or equal in both, no other model has both host times, or
    the result is not positive.
    """
    if frm.with_(precision=to.precision) != to or frm.precision == to.precision:
        return None
    if any(cal.count_kind(c.framework, c.group[1]) != "ops" for c in (frm, to)):
        return None
    n_frm = cal.op_count(frm.model, frm.framework, frm.precision, "ops")
    n_to = cal.op_count(to.model, to.framework, to.precision, "ops")
    if not n_frm or not n_to or n_frm == n_to:
        return None
    a = cal.counted_hosts(frm.group, frm.model, device_name, "ops")
    b = cal.counted_hosts(to.group, frm.model, device_name, "ops")
    per = {m: (b[m][0] - a[m][0]) / (b[m][1] - a[m][1])
           for m in sorted(set(a) & set(b)) if b[m][1] != a[m][1]}
    if not per:
        return None
    c_add = median(per.values())
    h = host_s + (n_to - n_frm) * c_add
    if h <= 0:
        return None
    return h, (f"{host_s * 1e3:.3g} ms {'+' if n_to > n_frm else '-'} {abs(n_to - n_frm)} "
               f"operators x {c_add * 1e6:.3g} us (host per added operator, median of "
               f"{len(per)} other models: {', '.join(per)})")


def host_elsewhere(cal: Any, cfg: Any, source: str | None
                   ) -> tuple[float, str] | None:
    """A host time (s) for ``cfg`` carried over from host-bound series of the same model,
    framework, mode, device, data and layout in other precisions or other results files than
    ``source`` (fitted without session anchors; the series fit's host prior,
    ``Calibration.prior``): from another precision by :func:`added_ops_host` where the mode
    counts operators, else times the groups' host ratio (``Calibration.host_ratio``); 1 for
    the same group. The median over them, and where from; None when there is none."""
    dn = cal.device_name(cfg)
    vals, where = [], []
    for prec in sorted({p.precision for p in cal.points if p.model == cfg.model}):
        other = cfg.with_(precision=prec)
        for s in cal.series(other):
            if s[0].source == source and prec == cfg.precision:
                continue
            if len({p.batch_size for p in s}) < 2:
                continue  # one point cannot show its host time
            fit = cal.fit_points(other, s, with_sessions=False)
            if fit.bound(min(fit.batch_sizes)) != "host":
                continue
            h: float | None = fit.host_s
            if prec != cfg.precision:
                add = added_ops_host(cal, other, cfg, fit.host_s, dn)
                r = None if add else cal.host_ratio(other.group, cfg.group, cfg.model, dn)
                h = add[0] if add else (fit.host_s * r[0] if r else None)
            if h is None:
                continue
            vals.append(h)
            where.append(f"{prec} in {s[0].source}")
    if not vals:
        return None
    return median(vals), "; ".join(where)
