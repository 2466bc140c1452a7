"""The performance model's predictions on one device and over data-parallel devices.

Pure functions over a :class:`~dlperf.perfmodel.calibrate.Calibration`; the public entry point
with its result type is :mod:`dlperf.perfmodel.api`. Three ways to get the one-device parts
``H`` (host) and ``D(B)`` (device) of a configuration, in order of preference:

1. **measured series**: the configuration's own stored series, fitted (onedevice.fit_series);
2. **what-if** from a measured configuration that differs in precision or mode: ``H`` times the
   median host ratio between the two groups over other models, ``D`` times the ratio of the two
   groups' rooflines for this model (each fitted without it);
3. **analytic**: the roofline of the group (fitted without this model) for ``D`` and the median
   host time of the group's host-bound series for ``H``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from dlperf.perfmodel import comm, special
from dlperf.perfmodel import dataparallel as dp
from dlperf.perfmodel import equations as eq
from dlperf.perfmodel import onedevice as od
from dlperf.perfmodel import roofline as rl
from dlperf.perfmodel.calibrate import Calibration, Config, HostEstimate
from dlperf.perfmodel.whatifs import changes_words


@dataclass
class OneDevice:
    """The one-device parts of a configuration at one per-device batch.

    ``host_s`` and ``device_s`` are ``H`` and ``D(B)``; ``how``: ``series``, ``what-if`` or
    ``analytic``; ``calibrated_on``: result ids (``file:id``) whose measurements chose them;
    ``provenance``: constant -> where it came from; ``params``: the model's parameters;
    ``ratios``: a what-if's numbers (:func:`what_if`: ``H_b``, ``D_b`` (s), ``r_H``, ``r_D``,
    ``m``, the rule of each ratio and the pairs they came from), None otherwise.
    """

    cfg: Config
    batch: int
    host_s: float
    device_s: float
    how: str
    calibrated_on: list[str]
    provenance: dict[str, str]
    assumptions: list[str] = field(default_factory=list)
    params: int | None = None
    fit: od.SeriesFit | None = None
    device_classes_s: dict[str, float] | None = None
    ratios: dict | None = None

    @property
    def step_time_s(self) -> float:
        """``overlap(H, D)`` (s)."""
        return eq.step_s(self.host_s, self.device_s)

    @property
    def bound(self) -> str:
        """``host`` or ``device``."""
        return eq.bound_of(self.host_s, self.device_s)


def _roofline_of(cal: Calibration, cfg: Config
                 ) -> tuple[rl.Efficiency, rl.Ceiling, float | None]:
    """The efficiencies of ``cfg``'s group fitted without its model, its ceilings and its
    kernel count ``K`` (None: no kernel term), as :meth:`Calibration.roofline` gives them.

    Raises:
        LookupError: no ceilings for the device (why, and how to predict it instead), or no
            other model's stored point of the group to fit on.
    """
    dn = cal.device_name(cfg)
    eff, kernels = cal.roofline(cfg)
    try:  # the ceilings first: without them no roofline fits, and the reason is theirs
        ceil = cal.ceiling(cfg.framework, cfg.precision, dn, cfg.model)
    except ValueError as e:
        why = (f"a {cfg.device} configuration has none (only a GPU's measured ceilings are "
               "read), so it is predicted from its own stored series, of two or more batch "
               "sizes (dlperf run ... -b N)" if not special.ceilings_read(cfg.device) else e)
        raise LookupError(f"no roofline for {'/'.join(cfg.group)}: {why}") from None
    if eff is None:
        raise LookupError(f"no stored point of {'/'.join(cfg.group)} (other than {cfg.model}) "
                          "to fit its roofline on")
    return eff, ceil, kernels


def _roofline_d(cal: Calibration, cfg: Config, batch: float) -> tuple[float, rl.Efficiency,
                                                                        rl.Ceiling, rl.Work]:
    """``cfg``'s roofline device time at ``batch`` (s, :func:`roofline.device_time_s`) and the
    efficiencies, ceilings and work it is made of (:func:`_roofline_of`)."""
    eff, ceil, kernels = _roofline_of(cal, cfg)
    work = cal.work(cfg.model, cfg.framework, cfg.precision, cfg.device)
    return rl.device_time_s(work, ceil, eff, batch, kernels), eff, ceil, work


def _classes(cal: Calibration, cfg: Config, batch: int, device_s: float,
             work: rl.Work | None = None) -> dict[str, float]:
    """Device time by op class at ``batch``: scaled from a traced run of ``cfg`` when there is
    one, else split into the roofline's compute and memory terms; normalised to ``device_s``."""
    work = work or cal.work(cfg.model, cfg.framework, cfg.precision, cfg.device)
    traced = [p for p in cal.points if cfg.matches(p) and p.op_class_s]
    cls = rl.class_times_s(traced, work, batch)
    if not cls:
        try:
            eff, ceil, kernels = _roofline_of(cal, cfg)
        except LookupError:  # no roofline either
            return {"device": device_s}
        cls = {"compute (roofline FLOP term)": work.flops(batch) / (eff.e_flops * ceil.flops_per_s),
               "memory (roofline byte term)": work.bytes(batch) / (eff.e_bytes
                                                                  * ceil.bandwidth_bytes_per_s)}
        if kernels and eff.kernel_s:
            cls["kernels (roofline kernel term)"] = kernels * eff.kernel_s
    tot = sum(cls.values()) or 1.0
    return {k: v * device_s / tot for k, v in sorted(cls.items(), key=lambda kv: -kv[1])}


def from_series(cal: Calibration, cfg: Config, batch: int, source: str | None = None) -> OneDevice:
    """One-device parts from the configuration's own stored series.

    Raises:
        LookupError: no stored point of ``cfg``.
        ValueError: the series cannot be fitted (one batch size and no prior).
    """
    fit, pts = cal.fit(cfg, source)
    n = len(pts)
    prov = {"host time H": f"fitted: series of {n} point{'' if n == 1 else 's'} in {pts[0].source}",
            "device line d0 + d1 B": f"fitted: same series; prior {fit.prior}"}
    return OneDevice(cfg, batch, fit.host_s, fit.device_s(batch), "series", list(fit.result_ids),
                     prov, params=pts[0].params, fit=fit,
                     device_classes_s=_classes(cal, cfg, batch, fit.device_s(batch)))


def analytic(cal: Calibration, cfg: Config, batch: int) -> OneDevice:
    """One-device parts from the group's roofline and host median, without ``cfg.model``'s data.

    Raises:
        LookupError: the group has no other stored point.
    """
    d, eff, ceil, work = _roofline_d(cal, cfg, batch)
    h, host_from, host_assumed = _host(cfg, cal.host_of_group(cfg.group, cfg.model,
                                                              cal.device_name(cfg)))
    kernels = cal.kernel_count(cfg) if eff.kernel_models else None
    kterm = (f" x {kernels:.0f} kernels (counts of {len(eff.kernel_models)} models)"
             if kernels else "")
    prov = {"device D": f"roofline of {'/'.join(cfg.group)} fitted without {cfg.model} "
                        f"({eff.describe()}{kterm}, on {len(eff.models)} models); "
                        f"ceilings {ceil.source}; {work.source}",
            "host time H": host_from}
    assumptions = [host_assumed, special.recurrent_note(cfg.model)]
    from dlperf.zoo import SPECS

    spec = SPECS.get(cfg.model)
    return OneDevice(cfg, batch, h, d, "analytic", list(eff.result_ids), prov,
                     [a for a in assumptions if a]
                     + [f"{cfg.model}'s own measurements not used (analytic)"],
                     params=getattr(spec, "params", None),
                     device_classes_s=_classes(cal, cfg, batch, d, work))


def _host(cfg: Config, host: HostEstimate | None) -> tuple[float, str, str | None]:
    """An analytic prediction's host time (s), where it came from, and what it assumed (None
    for a counted estimate): one branch per kind of :class:`HostEstimate`."""
    if host is None:
        return 0.0, "none (0)", (f"host time 0: no series of {cfg.framework}/{cfg.mode} shows "
                                 "its host time (3+ batch sizes and host-bound at the "
                                 "smallest, or host probes that waited on the device)")
    if host.counted:
        return host.host_s, (f"host time per dispatched operator or kernel of {host.where}, "
                             f"from models {', '.join(host.models)}"), None
    return host.host_s, (f"host floor: {host.where} (models with one: "
                         f"{', '.join(host.models)})"), (
        f"host time: no operator or launch count of {cfg.model} is stored, so its host is "
        f"{host.where} ({host.host_s * 1e3:.3g} ms); a model that launches many "
        "small kernels is under-predicted (a --timeline run of it gives the count)")


#: Pairs of other models a what-if ratio takes the median of (the nearest in FLOPs per step).
#: Chosen on the what-if back-test of benchmarks/results/h200 (see docs/perfmodel.md).
TRANSFER_NEAREST = 3


def nearest_pairs(samples: list[tuple], nearest: int) -> list[tuple]:
    """The pairs a what-if ratio is the median of: ``samples`` ``(other family 0/1, FLOPs
    distance, T ratio, model, results file, batch)`` ordered by (other family, distance), the
    first ``nearest`` and every further pair tied with the last of them on both (the same
    model at the same batch in several files has the same FLOPs): a tie is never broken by
    the ratio, the file or the load order, so the median neither leans to the smaller ratio
    nor depends on ``--db`` order. Returned in that order, ties by (model, file, batch).

    Chosen on the development rows of the frozen split (what-if fp32->bf16: MdAPE 18.81% both
    ways, host-bound 13.57% -> 11.91%; eager->graph 7.66% both, host-bound 13.59% -> 12.61%;
    against the first ``nearest`` sorted with the ratio as tie-break)."""
    srt = sorted(samples, key=lambda s: (s[0], s[1], s[3], s[4], s[5]))
    cut = srt[:nearest]
    if not cut:
        return cut
    edge = cut[-1][:2]
    return cut + [s for s in srt[nearest:] if s[:2] == edge]


def transfer_ratios(cal: Calibration, frm: Config, to: Config, batch: int,
                    nearest: int = TRANSFER_NEAREST
                    ) -> dict[str, tuple[float, str, tuple[tuple[str, str, int, float], ...]]]:
    """Measured ``T(to) / T(from)`` of *other* models' pairs (same batch, same results file),
    split by the bound of the ``from`` point in its own series fit: ``{"host": (ratio,
    where from, pairs), "device": (...)}``, each present only when measured; ``pairs``: the
    pairs the median was taken of, ``(model, results file, batch, T ratio)``. The ratio is the
    median of the ``nearest`` pairs closest in training FLOPs per step to ``frm.model`` at
    ``batch`` (a GEMM's speed-up from bf16 grows with its size), models of the same family
    first, with every pair tied with the last at that distance (:func:`nearest_pairs`). A pair
    is two points of one configuration (:meth:`Config.of`, data and loader workers included)
    and its changed twin (precision, mode, framework and compile mode as ``to``'s): real-data
    points pair too, whatever ``frm``'s data. A pair that also changes the layout is skipped (:func:`special.changes_layout`)."""
    from dlperf.zoo import SPECS
    fam = getattr(SPECS.get(frm.model), "family", None)
    f_target = cal.work(frm.model, frm.framework, frm.precision, frm.device).flops(batch)
    changes = {k: getattr(to, k) for k in ("precision", "mode", "framework", "compile_mode")
               if getattr(to, k) != getattr(frm, k)}
    samples: dict[str, list[tuple[int, float, float, str, str, int]]] = {"host": [],
                                                                         "device": []}
    by = {}
    for p in cal.points:
        if p.world_size == 1 and not p.instrumented and p.model != frm.model:
            by[(Config.of(p), p.source, p.batch_size)] = p
    for (c, src, b), p in by.items():
        if c.group != frm.group or special.changes_layout(c, to):
            continue  # a pair at a layout of its own changes the layout too
        q = by.get((c.with_(**changes), src, b))
        if q is None:
            continue
        ser = [x for x in cal.series(c) if x[0].source == src]
        try:  # the pair's bound by its own series (no other-session terms: cheap, and
            # never touching the configuration a what-if back-test withholds)
            fit = cal.fit_points(c, ser[0], with_sessions=False)
        except (IndexError, ValueError):
            continue
        f = cal.work(c.model, c.framework, c.precision, c.device).flops(p.per_device_batch)
        dist = abs(math.log(max(f, 1.0) / max(f_target, 1.0)))
        other_family = int(getattr(SPECS.get(c.model), "family", None) != fam)
        samples[fit.bound(p.per_device_batch)].append(
            (other_family, dist, q.step_time_s / p.step_time_s, c.model, src, b))
    out = {}
    for kind, ss in samples.items():
        if ss:
            pick = nearest_pairs(ss, nearest)
            models = sorted({s[3] for s in pick})
            out[kind] = (median(s[2] for s in pick),
                         f"median T ratio of the {len(pick)} {kind}-bound pair(s) of "
                         f"{len(models)} other model(s) nearest in FLOPs per step "
                         f"({', '.join(models)}"
                         + (", same family)" if pick[0][0] == 0 else ")"),
                         tuple((x[3], x[4], x[5], x[2]) for x in pick))
    return out


def what_if(cal: Calibration, base: Config, target: Config, batch: int,
            source: str | None = None) -> OneDevice:
    """``target``'s parts from ``base``'s measured series (they differ in precision or mode):
    its series in ``source`` (a results file: one host session, whose host time the target
    shares), else the best-measured one.

    ``H_t = H_b * r_H`` and ``D_t = D_b * r_D``: ``r_H`` the median step ratio of other models'
    host-bound pairs measured in both configurations (same family preferred; a precision change
    in a mode counted in operators adds the operators' host instead,
    :func:`~dlperf.perfmodel.special.added_ops_host`), ``r_D`` that of
    their device-bound pairs, else the ratio of the two groups' rooflines for this model (each
    fitted without it), else 1; which one was used is in the provenance. The base series is
    the one in ``source`` when given: a what-if of a pair measured in one file starts from
    that file's host (the same point read 15 ms in one session and 22 ms in another).

    A device-bound base stored at ``batch`` is taken at its measurement, not its series fit
    (:func:`~dlperf.perfmodel.special.measured_base`: ``H_t`` and ``D_t`` times the measured
    over the fitted step).

    A what-if of two changes (framework or mode, and precision) starts from the model's
    stored configuration one change from ``target`` where there is one
    (:func:`one_change_base`: eager fp32 for eager bf16 -> graph fp32), not from ``base``.

    A target mode whose compiler picks the layout itself (the registry's
    ``layout_free_modes``: torch.compile converts convolutions to channels_last) runs the same
    kernels whatever layout was asked for, so a base with a layout of its own starts from the
    base mode's series at the framework's own choice (``auto``, in ``source``) where one is
    stored, and says so: frameworks.db's resnet50 bf16 NCHW eager step is 54.6 ms against 29.4
    ms at ``auto`` (channels_last), while both compiled steps read 21.0 and 20.7 ms.

    Raises:
        LookupError: no stored point of ``base``; neither ratio measured (no pair of other
            models for either and no roofline of the target, no added-operator count).
    """
    base, source, nearer = one_change_base(cal, base, target, batch, source)
    base, layout_notes = _layout_base(cal, base, target, batch, source)
    b = from_series(cal, base, batch, source)
    ratios = transfer_ratios(cal, base, target, batch)
    assumptions = [*b.assumptions, *nearer, *layout_notes]
    prov = dict(b.provenance)
    ids = list(b.calibrated_on)
    r_h, why_h, pairs_h = ratios.get("host", (None, "", ()))
    r_d, why_d, pairs_d = ratios.get("device", (None, "", ()))
    rule_h, rule_d = "pairs", "pairs"
    work_t, no_roofline = None, ""
    if r_d is None:
        try:
            rb = _roofline_d(cal, base, batch)[0]
            rt, eff_t, _, work_t = _roofline_d(cal, target, batch)
            r_d, why_d = rt / rb, (f"roofline {'/'.join(target.group)} ({eff_t.describe()}) "
                                   f"over {'/'.join(base.group)} for {base.model}, each fitted "
                                   "without it")
            ids += list(eff_t.result_ids)
            rule_d = "roofline ratio"
        except LookupError as e:
            r_d, why_d, rule_d = 1.0, "none measured: unchanged", "none"
            no_roofline = str(e)
            assumptions.append("device time unchanged: no pair and no roofline for the target")
    added = special.added_ops_host(cal, base, target, b.host_s, cal.device_name(base))
    counted: dict[str, Any] = {}  # the added operators' numbers (c_add), where counted
    if added is not None:
        r_h, why_h, rule_h, pairs_h = added[0] / b.host_s, added[1], "added operators", ()
        terms = special.added_ops_terms(cal, base, target, cal.device_name(base))
        assert terms is not None  # the terms added_ops_host was made of
        n_b, n_t, per_model = terms
        counted["c_add"] = {"n_b": n_b, "n_t": n_t, "per_model_s": per_model,
                            "median_s": median(per_model.values())}
    elif r_h is None:
        if rule_d == "none":
            raise LookupError(
                f"what-if {base.label()} -> {target.label()}: no other model has a pair of "
                "stored points in both configurations (same batch, same results file) and the "
                f"target has no roofline ({no_roofline}), so neither the host nor the device "
                "time's change is measured and the base's step would be returned unchanged. "
                f"Measure {target.label()} (dlperf run --model {target.model} --framework "
                f"{target.framework} --mode {target.mode} --precision {target.precision} ...), "
                "or another model in both configurations at one batch")
        r_h, why_h, rule_h = 1.0, "none measured: unchanged", "none"
        assumptions.append(f"host time unchanged from {'/'.join(base.group)}: no other model "
                           "has a host-bound pair in both configurations")
    prov["host ratio"] = f"{r_h:.3g}: {why_h}"
    prov["device ratio"] = f"{r_d:.3g}: {why_d}"
    anchor = special.measured_base(cal.fit(base, source)[1], batch, b.step_time_s, b.bound)
    m = 1.0
    if anchor is not None:
        m, prov["measured base"] = anchor
    d = b.device_s * r_d * m
    nums = {"base": base.label(), "H_b": b.host_s, "D_b": b.device_s, "r_H": r_h,
            "r_H_rule": rule_h, "r_D": r_d, "r_D_rule": rule_d, "m": m,
            "pairs": {"host": list(pairs_h), "device": list(pairs_d)}, **counted}
    return OneDevice(target, batch, b.host_s * r_h * m, d, "what-if", ids, prov, assumptions,
                     params=b.params, fit=b.fit,
                     device_classes_s=_classes(cal, target, batch, d, work_t), ratios=nums)


#: The configurations a what-if of two changes (framework or mode, and precision) starts from
#: before its base, each the base with these fields of the target (one change left between it
#: and the target), the first whose series is stored (:func:`one_change_base`): the base at
#: the target's precision (the framework or mode change left to the ratios), then the base at
#: the target's framework, mode and compile mode (the precision change left). Chosen on the
#: development rows of the frozen split (``what-if two changes``, 246 pairs with both
#: in-between configurations stored: MdAPE 15.0% from the first, 25.9% from the second,
#: 41.2% from the base with the ratios of other models' pairs changed in both at once; 10.0%,
#: 53.4% and 38.3% on the 44 torch eager -> graph pairs, 16.4%, 24.4% and 41.7% on the 202
#: torch <-> jax ones): a precision's speed-up depends on the model (fcn5's fp32 step is 5x
#: its bf16 one, lstm's 1.5x), a compiler's less.
ONE_CHANGE_BASES: tuple[tuple[str, ...], ...] = (("precision",),
                                                 ("framework", "mode", "compile_mode"))


def one_change_base(cal: Calibration, base: Config, target: Config, batch: int,
                    source: str | None) -> tuple[Config, str | None, list[str]]:
    """The configuration and results file a what-if from ``base`` to ``target`` starts from:
    the first of :data:`ONE_CHANGE_BASES` that is neither ``base`` nor ``target`` (so a
    what-if of one change keeps its base) and whose series fits at ``batch`` in ``source``,
    else in its best-measured file (None); else ``base`` and ``source``. The third value says
    which, for the assumptions (empty: the base itself)."""
    for fields in ONE_CHANGE_BASES:
        mid = base.with_(**{k: getattr(target, k) for k in fields})
        src = next((x for x in dict.fromkeys((source, None))
                    if mid not in (base, target) and _fits(cal, mid, batch, x)), "")
        if src != "":
            return mid, src, [f"what-if of two changes ({changes_words(base, target)}): "
                              f"starts from {mid.label()}, {target.model}'s stored "
                              f"configuration one change from {target.label()}, not from "
                              f"{base.label()}"]
    return base, source, []


def _fits(cal: Calibration, cfg: Config, batch: int, source: str | None) -> bool:
    """Whether ``cfg``'s series in ``source`` (None: its best-measured one) fits at ``batch``."""
    try:
        from_series(cal, cfg, batch, source)
    except (LookupError, ValueError):
        return False
    return True


def _layout_base(cal: Calibration, base: Config, target: Config, batch: int,
                 source: str | None) -> tuple[Config, list[str]]:
    """The base a what-if starts from (:func:`special.layout_base`) where its series is stored
    (in ``source`` when given), else ``base``; the second value says why, for the assumptions
    (none: unchanged)."""
    alt = special.layout_base(base, target)
    if alt is None or not _fits(cal, alt, batch, source):
        return base, []
    return alt, [f"{target.framework}/{target.mode} picks the layout itself: the what-if starts "
                 f"from {alt.label()} (its own layout choice), not from layout {base.layout}"]


def comm_time_fn(cal: Calibration, world: int, nnodes: int, network: comm.Network | None
                 ) -> tuple[Callable[[float], float], str, bool, Callable[[float], str]]:
    """The all-reduce time of a bucket for ``world`` ranks on ``nnodes`` nodes: the stored
    sweep's fit when this machine measured that rank count on one node, else the algorithm over
    the topology (intra link: measured from the stored sweep of the most ranks when there is
    one, its large-message regime, :func:`comm.measured_link`; else given).
    Returns ``(fn, description, measured, algorithm)``: ``algorithm(M)`` names the way a
    bucket of ``M`` bytes is timed (``sweep fit``, ``ring``, ``tree``, ``hierarchical``, with
    ``floor`` where the stored sweep's floor was larger)."""
    nranks = {c.nranks for c in cal.records.collectives if c.benchmark == "allreduce"}
    net = network or comm.Network()
    if nnodes == 1 and world in nranks and net.intra is None:
        fit = comm.fit_allreduce(cal.records.collectives, world)
        return fit.time_s, (f"all-reduce sweep of {world} ranks "
                            f"({', '.join(fit.sources)}), piecewise a + b M "
                            f"({len(fit.regimes)} regimes)"), True, lambda size: "sweep fit"
    intra = net.intra
    if intra is None and nranks:
        intra = comm.measured_link(comm.fit_allreduce(cal.records.collectives, max(nranks)),
                                   "intra (measured)")
    intra = intra or comm.LINKS["nvlink4"]
    gpn = world // nnodes
    nics = net.nics()  # read by the inter-node link only
    floor = special.allreduce_floor(
        nranks, world, lambda n: comm.fit_allreduce(cal.records.collectives, n).time_s)

    def timed(size: float) -> tuple[float, str]:
        """The time of a bucket of ``size`` bytes and how it was timed: the algorithm, or the
        stored sweep's floor where that is slower."""
        t, name = comm.allreduce_s(size, gpn, nnodes, intra, net.inter, net.algorithm, nics)
        if floor and floor[1](size) > t:
            return floor[1](size), f"floor ({floor[0]} ranks)"
        return t, name

    def fn(size: float) -> float:
        return timed(size)[0]

    def algorithm(size: float) -> str:
        return timed(size)[1]

    desc = (f"{net.algorithm} all-reduce over {gpn} GPU(s) x {nnodes} node(s); intra: "
            f"{intra.source}" + (f"; inter: {net.inter.source}, {nics} NIC(s) per node"
                                 if nnodes > 1 and net.inter else "")
            + (f"; at least the stored sweep of {floor[0]} ranks" if floor else ""))
    return fn, desc, intra.measured and nnodes == 1, algorithm


def data_parallel(one: OneDevice, ddp: dp.DDPOverhead, comm_fn: Callable[[float], float],
                  comm_desc: str,
                  comm_measured: bool, bucket_cap_mb: float = dp.DEFAULT_BUCKET_CAP_MB,
                  profile: dp.BucketProfile | None = None
                  ) -> tuple[float, float, dict[str, str]]:
    """``(step, exposed communication, provenance)`` of the N-device step (s); the WFBP
    recursion runs over ``profile``'s recorded buckets when given (:func:`dp.recorded_profile`),
    else over DDP's default buckets of uniformly ready gradients."""
    x, _ = dp.exposed_comm(one.params, one.device_s, comm_fn, bucket_cap_mb, profile)
    t = dp.dp_step_s(one.host_s, one.device_s, x, ddp)
    prov = {"all-reduce": ("measured" if comm_measured else "given") + f": {comm_desc}",
            "DDP overhead rho, kappa": (f"measured: rho={ddp.rho:.3g} (host), kappa="
                                        f"{ddp.kappa:.3g} (device) fitted on {len(ddp.pairs)} "
                                        "stored N-device/1-device pairs" if ddp.pairs else
                                        "not measured: no stored N-device point of these "
                                        "files pairs with a one-device series of the same "
                                        "configuration; rho = kappa = 0 (DDP's own overhead "
                                        "left out)"),
            "gradient buckets": (f"measured: recorded buckets_timeline of {profile.record}"
                                 if profile else "assumed: DDP's default buckets, gradients "
                                 "ready uniformly over backward")}
    return t, x, prov
