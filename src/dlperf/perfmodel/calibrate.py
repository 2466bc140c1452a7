"""Calibration: every fitted constant of the one-device model, from stored points, cached.

:class:`Calibration` holds the stored points a prediction may use (``exclude`` drops the ones a
back-test withholds) and fits, on demand and once each:

* the work model of a (model, framework, precision) (:func:`roofline.work_of`);
* the ceilings of a (framework, precision, device) (:func:`roofline.ceiling_of`);
* the roofline efficiencies of a (framework, mode, precision, device) group, always *without*
  the model being predicted (so the roofline is never fitted on the model it predicts), with
  the per-kernel term for a configuration whose kernel count is known (:meth:`roofline`);
* a series' host and device line (:func:`onedevice.fit_series`) with its prior: the roofline,
  the configuration's traced device busy times and its device-bound steps stored in other
  results files (other sessions; device time does not depend on the host).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from statistics import median
from typing import Any

import numpy as np

from dlperf.perfmodel import onedevice as od
from dlperf.perfmodel import roofline as rl
from dlperf.perfmodel.hostmove import host_elsewhere
from dlperf.perfmodel.records import COMPILE_SEP, Point, Records, compile_of, mode_key
from dlperf.registry import framework_info

#: Precisions that dispatch the operators of another: TF32 is a math mode of cuBLAS/cuDNN
#: (PyTorch ``allow_tf32``/``fp32_precision``, JAX ``jax_default_matmul_precision``) over
#: the fp32 program, so where a tf32 run's operators were not counted, fp32's count is its
#: count (:meth:`Calibration.op_count`). Kernel and launch counts are not carried over: the
#: libraries pick other kernels (JAX resnet50: 1,302 kernels in fp32, 994 in bf16).
SAME_OPERATORS = {"tf32": "fp32"}
#: The :class:`Point` attribute of each host-work count kind (:meth:`Calibration.count_kind`).
_COUNT_ATTR = {"ops": "ops_per_step", "launches": "launches_per_iter",
               "kernels": "kernels_per_iter"}
#: A step this much longer than the fitted host time counts as device-bound for an anchor.
DEVICE_BOUND_MARGIN = 1.25


def layout_key(layout: str | None) -> str:
    """``auto`` for a default or unrecorded layout, else the layout asked for."""
    return "auto" if layout in (None, "auto") else layout


@dataclass(frozen=True)
class Config:
    """A one-device training configuration (store column values; ``compile_mode``: the
    compiler's mode of a graph run, ``default`` where none was recorded)."""

    model: str
    framework: str
    mode: str
    precision: str
    device: str = "cuda"
    data: str = "synthetic"
    layout: str = "auto"
    loader_workers: int | None = None
    threads: int | None = None
    grad_accum: int = 1
    compile_mode: str = "default"

    @classmethod
    def of(cls, p: Point) -> Config:
        """The configuration of a stored point."""
        return cls(p.model, p.framework, p.mode, p.precision, p.device, p.data,
                   layout_key(p.layout), p.loader_workers, p.threads, p.grad_accum,
                   p.compile_mode)

    @property
    def group(self) -> tuple[str, str, str, str]:
        """``(framework, mode, precision, device)``, the mode with a compile mode other than
        ``default`` (:func:`dlperf.perfmodel.records.mode_key`)."""
        return (self.framework, mode_key(self.mode, self.compile_mode), self.precision,
                self.device)

    def matches(self, p: Point) -> bool:
        """True for a one-device point of this configuration."""
        return (p.world_size == 1 and p.model == self.model and p.framework == self.framework
                and p.mode == self.mode and p.precision == self.precision
                and p.device == self.device and p.data == self.data
                and layout_key(p.layout) == self.layout and p.loader_workers == self.loader_workers
                and p.threads == self.threads and p.grad_accum == self.grad_accum
                and p.compile_mode == self.compile_mode)

    def label(self) -> str:
        """``model framework/mode precision device`` (+ data, layout when not default)."""
        extra = "".join(f" {x}" for x in (
            self.data if self.data != "synthetic" else None,
            self.layout if self.layout != "auto" else None,
            f"workers={self.loader_workers}" if self.loader_workers is not None else None,
            f"threads={self.threads}" if self.threads is not None else None,
            f"accum={self.grad_accum}" if self.grad_accum != 1 else None) if x)
        return (f"{self.model} {self.framework}/{mode_key(self.mode, self.compile_mode)} "
                f"{self.precision} {self.device}{extra}")

    def with_(self, **changes: Any) -> Config:
        """A copy with some fields changed."""
        return replace(self, **changes)


class Calibration:
    """Fitted constants over the stored points that ``exclude`` does not reject.

    Args:
        records: what :func:`dlperf.perfmodel.records.load` read.
        exclude: points a back-test withholds (never seen by any fit made here).
        share_efficiencies: a calibration whose roofline fits (each made *without* the model it
            serves) may be reused: valid when ``exclude`` rejects only points of the models
            predicted, since those models' points never enter their own roofline fit anyway.
    """

    def __init__(self, records: Records, exclude: Callable[[Point], bool] | None = None,
                 share_efficiencies: Calibration | None = None) -> None:
        self.records = records
        out = [(p, bool(exclude and exclude(p))) for p in records.points]  # exclude once each
        self.points = [p for p, withheld in out if not withheld]
        # the one-device models this calibration withholds points of: a roofline fit without
        # another model would differ from the shared one, so it stays in this calibration
        self._withheld_models = {p.model for p, withheld in out if withheld and p.world_size == 1}
        self._eff_own: dict = {}
        self._work: dict = {}
        self._ceil: dict = {} if share_efficiencies is None else share_efficiencies._ceil
        self._eff: dict = {} if share_efficiencies is None else share_efficiencies._eff
        self._fit: dict = {}
        # fits without other-session terms depend only on the series' points, its traced
        # anchors and the (shared) roofline: keyed by those, they are shared too
        self._fit_plain: dict = ({} if share_efficiencies is None
                                 else share_efficiencies._fit_plain)
        # host-work counts read every stored point (withheld ones too): they depend on the
        # records alone, so they are shared like the plain fits
        self._counts: dict = {} if share_efficiencies is None else share_efficiencies._counts

    # --- work and ceilings --------------------------------------------------------------
    def work(self, model: str, framework: str, precision: str) -> rl.Work:
        """Work model of (model, framework, precision) from the FLOP and byte counts stored with
        any result (counts, not times: a back-test's exclusions do not apply to them); the
        spec's FLOPs when none is stored."""
        key = (model, framework, precision)
        if key not in self._work:
            from dlperf.zoo import SPECS

            spec = SPECS.get(model)
            # FLOP and byte counts are static properties of a configuration's graph, not
            # timings: they come from every stored point, withheld or not
            self._work[key] = rl.work_of(self.records.points, model, framework, precision,
                                         spec.train_flops_per_sample if spec else None,
                                         spec.params if spec else None)
        return self._work[key]

    def ceiling(self, framework: str, precision: str, device_name: str | None,
                without_model: str | None = None) -> rl.Ceiling:
        """Measured (else datasheet) ceilings (:func:`roofline.ceiling_of`) over the workers of
        every stored point but ``without_model``'s (the model predicted or fitted without):
        device microbenchmarks, not step times, depending on the records and ``without_model``
        alone, so a shared cache gives the same value whichever back-test filled it first."""
        key = (framework, precision, device_name, without_model)
        if key not in self._ceil:
            self._ceil[key] = rl.ceiling_of(
                [p for p in self.records.points if p.model != without_model], framework,
                precision, device_name)
        return self._ceil[key]

    def device_name(self, cfg: Config) -> str | None:
        """The accelerator the configuration's points ran on (else any stored one)."""
        names = [p.device_name for p in self.points if p.device == cfg.device and p.device_name]
        own = [p.device_name for p in self.points if cfg.matches(p) and p.device_name]
        pick = own or names
        return pick[-1] if pick else None

    def efficiency(self, group: tuple[str, str, str, str], without_model: str | None,
                   device_name: str | None, kernels: bool = False) -> rl.Efficiency | None:
        """Roofline efficiencies of ``group`` fitted on every model but ``without_model``;
        None when the group has no other stored point. A group whose mode carries a compile
        mode (``graph+reduce-overhead``) is fitted with its base mode's points too: replaying
        CUDA graphs changes the host's work, not the kernels. With ``kernels``, the points'
        kernel counts (:meth:`kernel_count`) enter the fit and ``t_k`` is fitted with ``e_F``,
        ``e_Y`` (:func:`~dlperf.perfmodel.onedevice.fit_group`)."""
        key = (group, without_model, device_name, kernels)
        # shared (share_efficiencies, and fitcache.py's file) only if made on every point but
        # those of without_model, as any calibration of the same records would make it
        eff = self._eff if self._withheld_models <= {without_model} else self._eff_own
        if key not in eff:
            try:
                ceil = self.ceiling(group[0], group[2], device_name, without_model)
                base = group[1].split(COMPILE_SEP)[0]
                eff[key] = od.fit_group(
                    self.points, group, lambda p: self.work(p.model, p.framework, p.precision),
                    ceil, exclude=lambda p: p.model == without_model
                    or (device_name is not None and p.device_name != device_name),
                    device_groups=[(group[0], base, *group[2:])] if base != group[1] else [],
                    kernels_for=(lambda p: self.kernel_count(Config.of(p))) if kernels
                    else lambda p: None)
            except ValueError:
                eff[key] = None
        return eff[key]

    def kernel_count(self, cfg: Config) -> float | None:
        """Device kernels per step of ``cfg``'s model, framework, precision and group mode (else
        its base mode: a CUDA-graph replay runs the base mode's kernels): the median over the
        stored one-device points whose traced run counted them (``trace.kernels_per_iter``,
        the kernels of the stored timeline per step), withheld ones included (a count of the
        program, as :meth:`op_count`, not a time); so a point without a timeline of its own
        borrows its configuration's count from the other batch sizes. None where none was
        counted."""
        key = ("kernel_count", cfg.model, cfg.framework, cfg.precision, cfg.group[1])
        if key not in self._counts:
            self._counts[key] = None
            for mode in dict.fromkeys((cfg.group[1], cfg.group[1].split(COMPILE_SEP)[0])):
                xs = [p.kernels_per_iter for p in self.records.points if p.kernels_per_iter
                      and p.world_size == 1 and (p.model, p.framework, p.precision, p.group[1])
                      == (cfg.model, cfg.framework, cfg.precision, mode)]
                if xs:
                    self._counts[key] = float(median(xs))
                    break
        return self._counts[key]

    def roofline(self, cfg: Config) -> tuple[rl.Efficiency | None, float | None]:
        """``(efficiencies, K)`` that model ``cfg``'s device time (fitted without its model):
        with the kernel term where its kernel count is known, else the roofline alone fitted
        without kernel counts (K None): kernel-term efficiencies without the term would leave
        out the floor they were fitted with (docs/perfmodel.md, "Constants and choices")."""
        k = self.kernel_count(cfg)
        return self.efficiency(cfg.group, cfg.model, self.device_name(cfg), k is not None), k

    # --- series ---------------------------------------------------------------------------
    def series(self, cfg: Config) -> list[list[Point]]:
        """The configuration's un-instrumented one-device series, one per results file, the one
        with the most batch sizes first (ties: the file loaded last)."""
        out: dict[str, list[Point]] = {}
        for p in self.points:
            if cfg.matches(p) and not p.instrumented:
                out.setdefault(p.source, []).append(p)
        order = {s: i for i, s in enumerate(self.records.sources)}
        ser = [sorted(v, key=lambda p: p.batch_size) for v in out.values()]
        return sorted(ser, key=lambda s: (-len({p.batch_size for p in s}),
                                          -order.get(s[0].source, 0)))

    def prior(self, cfg: Config, source: str | None, with_sessions: bool = True
              ) -> od.DevicePrior | None:
        """Device prior of ``cfg`` for its series in ``source``: roofline (fitted without this
        model), traced busy times of ``cfg`` and, with ``with_sessions``, device-bound steps of
        ``cfg`` in other results files and a host time: carried over from a host-bound series
        of the model (:func:`~dlperf.perfmodel.hostmove.host_elsewhere`), else estimated from
        other models (:meth:`host_of_group`,
        :data:`~dlperf.perfmodel.onedevice.HOST_ESTIMATE_SIGMA`)."""
        dn = self.device_name(cfg)
        eff, kernels = self.roofline(cfg)
        anchors = [od.Anchor(p.per_device_batch, p.busy_s, od.TRACE_SIGMA,
                             f"{p.source}:{p.result_id} (trace busy)")
                   for p in self.points if p.busy_s and cfg.matches(p)]
        if with_sessions:
            for s in self.series(cfg):
                if s[0].source == source:
                    continue
                fit = self.fit_points(cfg, s, with_sessions=False)
                anchors += [od.Anchor(p.per_device_batch, p.step_time_s, od.SESSION_SIGMA,
                                      f"{p.source}:{p.result_id} (device-bound step)")
                            for p in s if fit.device_s(p.per_device_batch)
                            >= DEVICE_BOUND_MARGIN * fit.host_s]
        work = self.work(cfg.model, cfg.framework, cfg.precision)
        ceil = self.ceiling(cfg.framework, cfg.precision, dn, cfg.model) if eff else None
        host = host_elsewhere(self, cfg, source) if with_sessions else None
        sigma = od.HOST_TRANSFER_SIGMA
        if with_sessions and host is None:
            est = self.host_of_group(cfg.group, cfg.model, dn)
            if est is not None and est[0] > 0:
                host = (est[0], f"estimated from {est[2]} ({len(est[1])} other models)")
                sigma = od.HOST_ESTIMATE_SIGMA
        return od.device_prior(work, ceil, eff, anchors, host, sigma, kernels)

    def fit_points(self, cfg: Config, s: list[Point], with_sessions: bool) -> od.SeriesFit:
        """The fit of ``cfg``'s series ``s`` (one results file's points), cached; without
        ``with_sessions`` its prior has no other-session anchors and no host from elsewhere."""
        if not with_sessions:
            pkey = (cfg, tuple((p.source, p.result_id) for p in s), tuple(
                (p.source, p.result_id) for p in self.points if p.busy_s and cfg.matches(p)))
            if pkey not in self._fit_plain:
                self._fit_plain[pkey] = od.fit_series(s, self.prior(cfg, s[0].source, False))
            return self._fit_plain[pkey]
        key = (cfg, s[0].source, with_sessions)
        if key not in self._fit:
            self._fit[key] = od.fit_series(s, self.prior(cfg, s[0].source, with_sessions))
        return self._fit[key]

    def fit(self, cfg: Config, source: str | None = None) -> tuple[od.SeriesFit, list[Point]]:
        """The fitted series of ``cfg`` (in ``source``, else the best-measured one) and its points.

        Raises:
            LookupError: no stored one-device point of ``cfg`` (in ``source``).
        """
        ser = [s for s in self.series(cfg) if source is None or s[0].source == source]
        if not ser:
            raise LookupError(f"no stored one-device point of {cfg.label()}"
                              + (f" in {source}" if source else ""))
        return self.fit_points(cfg, ser[0], with_sessions=True), ser[0]

    def count_kind(self, framework: str, mode: str | None = None) -> str:
        """What :meth:`op_count` counts for ``framework`` (in group mode ``mode``): ``"ops"``
        (``Point.ops_per_step``, operators an eager step dispatches), ``"launches"``
        (``Point.launches_per_iter``, an XLA program's host launches,
        :mod:`dlperf.perfmodel.hostcount`) or ``"kernels"`` (``Point.kernels_per_iter``).
        Without ``mode``: the first of these any stored point of the framework has (kernels
        if none). In the registry's ``eager_mode``: ops (Dai et al. 2022); in a compiled mode
        the first of launches, kernels, ops a point of that mode has (torch.compile's default
        mode launches each generated kernel from Python: resnet50 and the transformer read
        28-30 us of host per graph-mode kernel on the H200, calibration2.db)."""
        key = ("kind", framework, mode)
        if key not in self._counts:
            pts = [p for p in self.records.points if p.framework == framework
                   and (mode is None or p.group[1] == mode)]
            order: tuple[str, ...] = ("ops", "launches", "kernels")
            if mode is not None:
                info = framework_info(framework)
                eager = info is not None and info.eager_mode == mode
                order = ("ops",) if eager else ("launches", "kernels", "ops")
            kind = next((k for k in order if any(getattr(p, _COUNT_ATTR[k]) for p in pts)),
                        order[0] if mode is not None else "kernels")
            self._counts[key] = kind
        return self._counts[key]

    def op_count(self, model: str, framework: str, precision: str, kind: str | None = None,
                 mode: str | None = None) -> int | None:
        """The host-work count of one step of ``model`` in ``framework`` at ``precision``:
        ``kind`` (default :meth:`count_kind` of the framework), the median over every stored
        point (of group mode ``mode`` for kernels and launches, which a trace of that mode
        counts; operators are counted in eager mode whatever the run's mode), withheld ones
        included. The operator count is a count of the model's code, made without the device
        and without timing, like its FLOPs; the kernel and launch counts come from a trace of
        the model, counts that a compile of the program would give without running it, not
        times. None where none was counted."""
        kind = kind or self.count_kind(framework)
        mode = None if kind == "ops" else mode
        key = (model, framework, precision, kind, mode)
        if key not in self._counts:
            attr = _COUNT_ATTR[kind]
            xs = sorted(round(c) for p in self.records.points
                        if p.model == model and p.framework == framework
                        and p.precision == precision and (mode is None or p.group[1] == mode)
                        for c in [getattr(p, attr)] if c)
            self._counts[key] = xs[len(xs) // 2] if xs else None
            same = SAME_OPERATORS.get(precision)
            if not xs and kind == "ops" and same:  # the same code, the same operators
                self._counts[key] = self.op_count(model, framework, same, kind, mode)
        return self._counts[key]

    def counted_hosts(self, group: tuple[str, str, str, str], without_model: str | None,
                       device_name: str | None, kind: str | None = None
                       ) -> dict[str, tuple[float, int]]:
        """``{model: (median identified host time (s), its count)}`` of ``group``'s series
        (roofline fit without ``without_model``) whose model has a host-work count of ``kind``
        (default: the framework's) in the group's mode."""
        eff = self.efficiency(group, without_model, device_name)
        per: dict[str, list[float]] = {}
        counts: dict[str, int] = {}
        for h in (eff.hosts if eff else ()):
            n = self.op_count(h.model, group[0], group[2], kind, group[1])
            if h.identified and n and h.model != without_model:
                per.setdefault(h.model, []).append(h.host_s)
                counts[h.model] = n
        return {m: (median(v), counts[m]) for m, v in per.items()}

    def host_line(self, group: tuple[str, str, str, str], without_model: str | None,
                  device_name: str | None) -> tuple[float, float, tuple[str, ...]] | None:
        """``(fixed_s, per_launch_s, models)``: the host time of a compiled program as a fixed
        part per call plus a cost per host launch (:meth:`count_kind` ``"launches"``), fitted
        over ``group``'s models with an identified host time and a launch count (without
        ``without_model``; one value per model, the median of its series) by non-negative least
        squares on relative error. The fixed part is what the smallest programs show (fcn5: one
        command buffer, 0.28-0.51 ms of dispatch on the H200); the per-launch part, 9-18 us on
        the H200 (calibration2.db), is the ~1 us per kernel of the LSTM's ``lax.scan`` and the
        6-9 us per kernel of the ResNets alike. With one such model only: its host time per
        launch, no fixed part. None without any."""
        from scipy.optimize import nnls

        per = self.counted_hosts(group, without_model, device_name, "launches")
        if not per:
            return None
        models = tuple(sorted(per))
        if len(per) == 1:
            (h, n), = per.values()
            return 0.0, h / n, models
        a = np.array([[1.0, n] for _, n in per.values()])
        y = np.array([h for h, _ in per.values()])
        (fixed, slope), _ = nnls(a / y[:, None], np.ones_like(y))
        return float(fixed), float(slope), models

    def host_per_op(self, group: tuple[str, str, str, str], without_model: str | None,
                    device_name: str | None, kind: str | None = None
                    ) -> tuple[float, tuple[str, ...]] | None:
        """The host time per dispatched operator (s) of ``group`` (per counted ``kind``,
        default the framework's, :meth:`count_kind`): the median over its models with an
        identified host time (roofline fit without ``without_model``) of ``H / count``
        (:meth:`op_count`), with the models it came from; None when no such series has a count.
        Dai et al. 2022 (sec. 4) found the host's share set by the operators a framework
        dispatches; on the H200 (calibration2.db) ``H / ops`` of torch eager spread 35-66 us
        over 8 of 9 networks (the LSTM's cuDNN ops: 99-212 us)."""
        per = self.counted_hosts(group, without_model, device_name, kind)
        if not per:
            return None
        return median(h / n for h, n in per.values()), tuple(sorted(per))

    def host_of_group(self, group: tuple[str, str, str, str], without_model: str | None,
                      device_name: str | None) -> tuple[float, tuple[str, ...], str] | None:
        """The host time (s) for a model with no measurement of its own, with the models and
        the group it came from. Where the model's host-work count is known (:meth:`op_count`),
        a group's host time per counted operator or kernel (:meth:`host_per_op`) times that
        count, or for host launches of a compiled program the group's fixed part plus its cost
        per launch times the count (:meth:`host_line`); else a group's host floor, its smallest
        identified host time. Groups are tried in tiers, each fitted without ``without_model``:
        ``group`` itself; the other precisions of its framework and mode; then the framework's
        other modes on the device with the same compile mode (a CUDA-graph replay has no
        per-operator host work to borrow), same precision first (PyTorch's compiled step in default mode still launches every kernel
        from the host: on the H200 its host probe read 23.5 ms for resnet50 bf16 b=8 against
        eager's 20.7 ms at b=16, calibration2.db). In a tier with several groups the smallest
        estimate is taken. None when no tier has one."""
        # the group's own count kind, else operators (a compiled mode's model with no trace
        # of that mode still has its operator count)
        kind, n = self.count_kind(group[0], group[1]), None
        for k in dict.fromkeys((kind, "ops")):
            n = self.op_count(without_model, group[0], group[2], k, group[1]) \
                if without_model else None
            if n:
                kind = k
                break
        # other modes only with the same compile mode: a CUDA-graph replay has no per-operator
        # host work to borrow from a mode that launches every kernel
        same = [p.group for p in self.points if p.framework == group[0]
                and p.device == group[3] and compile_of(p.group[1]) == compile_of(group[1])]
        tiers = [
            [group],
            sorted({g for g in same if g[1] == group[1] and g != group}),
            sorted({g for g in same if g[1] != group[1] and g[2] == group[2]}),
            sorted({g for g in same if g[1] != group[1] and g[2] != group[2]}),
        ]
        for tier in tiers:
            cands = []
            for g in tier:
                if n and kind == "launches":
                    line = self.host_line(g, without_model, device_name)
                    if line is not None:
                        cands.append((line[0] + line[1] * n, line[2], "/".join(g) + (
                            f" ({line[0] * 1e3:.3g} ms + {line[1] * 1e6:.3g} us x {n} "
                            f"{kind})")))
                        continue
                per = self.host_per_op(g, without_model, device_name, kind) if n else None
                if per is not None and n:
                    cands.append((per[0] * n, per[1],
                                  "/".join(g) + f" ({per[0] * 1e6:.3g} us x {n} {kind})"))
                    continue
                e = self.efficiency(g, without_model, device_name)
                f = e.host_floor() if e else None
                if f:
                    cands.append((f[0], f[1], "/".join(g)))
            if cands:
                return min(cands)
        return None

    def host_ratio(self, frm: tuple[str, str, str, str], to: tuple[str, str, str, str],
                   without_model: str | None, device_name: str | None
                   ) -> tuple[float, tuple[str, ...]] | None:
        """Median over models of ``H(to) / H(from)`` for models with host-bound series in both
        groups (same data and layout, median per model), both groups fitted without
        ``without_model``; None when no model has both."""
        def hosts(g):
            eff = self.efficiency(g, without_model, device_name)
            out: dict[tuple, list[float]] = {}
            for h in (eff.hosts if eff else ()):
                if h.identified:
                    out.setdefault((h.model, h.data, h.layout), []).append(h.host_s)
            return {k: median(v) for k, v in out.items()}
        a, b = hosts(frm), hosts(to)
        both = sorted(set(a) & set(b))
        if not both:
            return None
        return median(b[k] / a[k] for k in both), tuple(sorted({k[0] for k in both}))
