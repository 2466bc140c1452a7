"""Calibration: the fitting of the one-device model's constants from stored points.

:class:`Calibration` holds the stored points a prediction may use (``exclude`` drops the ones a
back-test withholds) and fits, each once:

* the roofline efficiencies of a (framework, mode, precision, device) group, always *without*
  the model being predicted (so the roofline is never fitted on the model it predicts), with
  the per-kernel term for a configuration whose kernel count is known (:meth:`roofline`);
* a series' host and device line (:func:`onedevice.fit_series`) with its prior: the roofline,
  the configuration's traced device busy times, its device-bound steps stored in other
  results files (other sessions; device time does not depend on the host) and a host time
  carried over from the model's other series or estimated from other models
  (:meth:`host_of_group`).

What it reads besides times (work, host-work counts, ceilings) is the records' :class:`~dlperf.
perfmodel.facts.Facts`; the fits every calibration of the same records would make alike are
kept in one :class:`Shared` store, which a prediction reads from and writes to disk
(:mod:`dlperf.perfmodel.fitcache`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from statistics import median
from typing import Any, NamedTuple

import numpy as np

from dlperf.config.identity import label_of
from dlperf.perfmodel import lsq, special
from dlperf.perfmodel import onedevice as od
from dlperf.perfmodel import roofline as rl
from dlperf.perfmodel.facts import facts_of
from dlperf.perfmodel.memo import once
from dlperf.perfmodel.records import Point, Records, label_data
from dlperf.perfmodel.special import mode_key

#: A step this much longer than the fitted host time counts as device-bound for an anchor.
DEVICE_BOUND_MARGIN = 1.25


class HostEstimate(NamedTuple):
    """A host time (s) estimated for a model from other models' (:meth:`Calibration.
    host_of_group`): the ``models`` it came from, ``where`` (group and rule, for the
    provenance) and whether it is ``counted``: a cost per operator, launch or kernel times the
    model's own count (else the group's host floor, its smallest identified host time, whose
    model ``where`` names; ``models``: every model of the group with an identified host)."""

    host_s: float
    models: tuple[str, ...]
    where: str
    counted: bool


def layout_key(layout: str | None) -> str:
    """``auto`` for a default or unrecorded layout, else the layout asked for."""
    return "auto" if layout in (None, "auto") else layout


def instrumented_only(runs: int) -> str:
    """Words for a configuration stored only in ``runs`` instrumented runs (traced,
    ``--breakdown``: :attr:`~dlperf.perfmodel.records.Point.instrumented`), which a refusal or
    a warning says instead of "not stored"."""
    return (f"only in {runs} instrumented run(s) (traced or --breakdown), which no series is "
            "fitted to")


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
        ``default`` (:func:`dlperf.perfmodel.special.mode_key`)."""
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

    def label(self, batch: int | None = None) -> str:
        """The configuration's label, at global batch ``batch`` where given, written by the one
        label function (:func:`dlperf.config.identity.label_of`): data, layout, loader
        workers, threads and gradient accumulation only where not at their default."""
        return label_of({"batch_size": batch,
            "model": self.model, "framework": self.framework, "mode": self.mode,
            "compile_mode": self.compile_mode, "device": self.device,
            "precision": self.precision, "grad_accum": self.grad_accum,
            "data": label_data(self.data), "layout": self.layout,
            "loader_workers": self.loader_workers, "threads": self.threads})

    def with_(self, **changes: Any) -> Config:
        """A copy with some fields changed."""
        return replace(self, **changes)


class Memo:
    """A calibration's one cache: every value a fit makes, made once, keyed by ``kind`` (the
    fit that made it: ``group``, ``series``, ``plain``, ``session``) and that fit's arguments.

    Nothing reads or writes the values but :meth:`get` and, for the group fits a store on disk
    holds (:mod:`dlperf.perfmodel.fitcache`), :meth:`of_kind`, :meth:`asked` and :meth:`put`."""

    def __init__(self) -> None:
        self._made: defaultdict[str, dict[Any, Any]] = defaultdict(dict)
        self._asked: defaultdict[str, set[Any]] = defaultdict(set)

    def get(self, kind: str, key: Any, make: Callable[[], Any]) -> Any:
        """The value of ``(kind, key)``, ``make()`` the first time it is asked for."""
        self._asked[kind].add(key)
        return once(self._made[kind], key, make)

    def asked(self, kind: str) -> dict[Any, Any]:
        """``{key: value}`` of every value of ``kind`` that :meth:`get` was asked for, made
        here or :meth:`put` (read from a store): what this process used, not what a store
        happened to hold (``dlperf predict --validate`` writes these beside the data, so that
        the table does not depend on the fits the user's own predictions cached)."""
        made = self._made[kind]
        return {k: made[k] for k in self._asked[kind] & made.keys()}

    def of_kind(self, kind: str) -> dict[Any, Any]:
        """``{key: value}`` of every value of ``kind`` made or put so far."""
        return dict(self._made[kind])

    def put(self, kind: str, values: Mapping[Any, Any]) -> None:
        """Take values of ``kind`` made elsewhere (read from a store)."""
        self._made[kind].update(values)


class Shared:
    """The fits that calibrations of one set of records share, in one :class:`Memo`.

    Attributes:
        facts: the records' counts, work models and ceilings (:func:`facts.facts_of`).
        memo: the fits any calibration of these records would make alike: roofline fits of a
            (framework, mode, precision, device) group made on every stored point but one
            model's (``group``, :meth:`Calibration.efficiency`, keyed by ``(group,
            without_model, device_name, kernels)``; :meth:`load` fills them from a store),
            series fits without other-session terms (``plain``, :meth:`Calibration.
            fit_points`, keyed by the series' points and traced anchors) and every series fit
            (``series``, :meth:`fit_series`, keyed by its points and prior).

    A calibration that withholds points of other models than the one a group fit leaves out,
    in a group that fit reads, keeps that fit to itself (:attr:`Calibration.memo`,
    :meth:`Calibration._shares`): only fits that any calibration of these records would make
    alike are shared.
    """

    def __init__(self, records: Records) -> None:
        self.records = records
        self.facts = facts_of(records)
        self.memo = Memo()
        self.stored = 0
        #: the one-device points of each configuration, in file order
        self.by_config: dict[Config, list[Point]] = {}
        for p in records.points:
            if p.world_size == 1:
                self.by_config.setdefault(Config.of(p), []).append(p)

    def fit_series(self, points: Sequence[Point], prior: od.DevicePrior | None
                   ) -> od.SeriesFit:
        """:func:`onedevice.fit_series` of ``points`` with ``prior``, made once for the same
        points and prior (the back-test's cuts of a series meet the same fit many times)."""
        return self.memo.get("series", (tuple((p.source, p.result_id) for p in points), prior),
                             lambda: od.fit_series(points, prior))

    @property
    def groups(self) -> dict[Any, rl.Efficiency | None]:
        """The shared roofline group fits, by ``(group, without_model, device_name,
        kernels)``."""
        return self.memo.of_kind("group")

    def load(self, fits: dict[Any, rl.Efficiency | None]) -> None:
        """Take group fits read from a store (:func:`dlperf.perfmodel.fitcache.read_fits`)."""
        self.memo.put("group", fits)
        self.stored = len(self.groups)

    def unstored(self) -> bool:
        """Whether fits were made since :meth:`load` (or :meth:`saved`)."""
        return len(self.groups) > self.stored

    def saved(self) -> None:
        """Mark the group fits as stored."""
        self.stored = len(self.groups)


class Calibration:
    """Fitted constants over the stored points that ``exclude`` does not reject.

    Args:
        records: what :func:`dlperf.perfmodel.records.load` read.
        exclude: points a back-test withholds (never seen by any fit made here).
        share_efficiencies: a :class:`Shared` store (or a calibration whose store) this one
            reuses and extends: valid when ``exclude`` rejects only points of the models
            predicted, since those models' points never enter their own roofline fit anyway;
            None: a store of its own.
    """

    def __init__(self, records: Records, exclude: Callable[[Point], bool] | None = None,
                 share_efficiencies: Shared | Calibration | None = None) -> None:
        self.records = records
        out = [(p, bool(exclude and exclude(p))) for p in records.points]  # exclude once each
        self.points = [p for p, withheld in out if not withheld]
        self._out = {id(p) for p, withheld in out if withheld}
        # the (model, group) of each one-device point this calibration withholds: a roofline
        # fit of a group it reads points of, without another model, would differ from the
        # shared one, so it stays in this calibration (:meth:`_shares`)
        self._withheld = {(p.model, p.group) for p, withheld in out
                          if withheld and p.world_size == 1}
        shared = share_efficiencies
        self.shared: Shared = (Shared(records) if shared is None else
                       shared.shared if isinstance(shared, Calibration) else shared)
        self.facts = self.shared.facts
        #: the fits only this calibration makes: group fits without a model it alone withholds
        #: points of, series fits with other-session terms (they read its points)
        self.memo = Memo()

    def of(self, cfg: Config) -> list[Point]:
        """The one-device points of ``cfg`` this calibration may use, in file order (those
        :meth:`Config.matches`)."""
        return [p for p in self.shared.by_config.get(cfg, ()) if id(p) not in self._out]

    # --- work and ceilings --------------------------------------------------------------
    def work(self, model: str, framework: str, precision: str, device: str) -> rl.Work:
        """:meth:`Facts.work <dlperf.perfmodel.facts.Facts.work>`."""
        return self.facts.work(model, framework, precision, device)

    def ceiling(self, framework: str, precision: str, device_name: str | None,
                without_model: str | None = None) -> rl.Ceiling:
        """:meth:`Facts.ceiling <dlperf.perfmodel.facts.Facts.ceiling>`."""
        return self.facts.ceiling(framework, precision, device_name, without_model)

    def device_name(self, cfg: Config) -> str | None:
        """The accelerator the configuration's points ran on (else any stored one): the last
        named in file order."""
        for pts in (self.of(cfg), self.points):
            for p in reversed(pts):
                if p.device_name and (pts is not self.points or p.device == cfg.device):
                    return p.device_name
        return None

    def efficiency(self, group: tuple[str, str, str, str], without_model: str | None,
                   device_name: str | None, kernels: bool = False) -> rl.Efficiency | None:
        """Roofline efficiencies of ``group`` fitted on every model but ``without_model``;
        None when the group has no other stored point. A group whose mode carries a compile
        mode (``graph+reduce-overhead``) is fitted with its base mode's points too: replaying
        CUDA graphs changes the host's work, not the kernels (:func:`special.base_mode`). With
        ``kernels``, the points' kernel counts (:meth:`kernel_count`) enter the fit and ``t_k``
        is fitted with ``e_F``, ``e_Y`` (:func:`~dlperf.perfmodel.onedevice.fit_group`)."""
        # shared (and stored, fitcache.py) only if made on every point of the groups it reads
        # but those of without_model, as any calibration of the same records would make it
        memo = self.shared.memo if self._shares(group, without_model) else self.memo
        return memo.get("group", (group, without_model, device_name, kernels),
                        lambda: self._fit_group(group, without_model, device_name, kernels))

    def _shares(self, group: tuple[str, str, str, str], without_model: str | None) -> bool:
        """Whether the roofline fit of ``group`` without ``without_model`` reads the same
        points here as in a calibration that withholds nothing else: no point this one
        withholds, of another model, lies in a group the fit reads (``group`` and its base
        mode's, :func:`special.base_mode`; :func:`onedevice.fit_group` reads no other point).
        A what-if's calibration withholds the target's points, in another group than the
        base's pairs, so their fits are the shared (stored) ones."""
        read = {group, (group[0], special.base_mode(group[1]), *group[2:])}
        return all(m == without_model or g not in read for m, g in self._withheld)

    def _fit_group(self, group: tuple[str, str, str, str], without_model: str | None,
                   device_name: str | None, kernels: bool) -> rl.Efficiency | None:
        """:meth:`efficiency`, made (None when the group has no other stored point)."""
        try:
            ceil = self.ceiling(group[0], group[2], device_name, without_model)
            base = special.base_mode(group[1])
            return od.fit_group(
                self.points, group, lambda p: self.work(p.model, p.framework, p.precision,
                                                      p.device),
                ceil, exclude=lambda p: p.model == without_model
                or (device_name is not None and p.device_name != device_name),
                # the base mode runs the same kernels (the group itself without a compile mode)
                device_groups=[(group[0], base, *group[2:])],
                kernels_for=(lambda p: self.kernel_count(Config.of(p))) if kernels
                else lambda p: None, fit_own=self.shared.fit_series)
        except ValueError:
            return None

    def kernel_count(self, cfg: Config) -> float | None:
        """Device kernels per step of ``cfg``'s model, framework, precision and group mode
        (:meth:`Facts.kernel_count <dlperf.perfmodel.facts.Facts.kernel_count>`); None where
        none was counted."""
        return self.facts.kernel_count(cfg.model, cfg.framework, cfg.precision, cfg.group[1])

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
        for p in self.of(cfg):
            if not p.instrumented:
                out.setdefault(p.source, []).append(p)
        order = {s: i for i, s in enumerate(self.records.sources)}
        ser = [sorted(v, key=lambda p: p.batch_size) for v in out.values()]
        return sorted(ser, key=lambda s: (-len({p.batch_size for p in s}),
                                          -order.get(s[0].source, 0)))

    def prior(self, cfg: Config, source: str | None, with_sessions: bool = True,
              batches: int | None = None) -> od.DevicePrior | None:
        """Device prior of ``cfg`` for its series in ``source``: roofline (fitted without this
        model), traced busy times of ``cfg`` and, with ``with_sessions``, device-bound steps of
        ``cfg`` in other results files and a host time: carried over from a host-bound series
        of the model (:meth:`host_elsewhere`), else estimated from
        other models (:meth:`host_of_group`,
        :data:`~dlperf.perfmodel.onedevice.HOST_ESTIMATE_SIGMA`). With ``with_sessions`` and a
        series of ``batches`` <= :data:`~dlperf.perfmodel.onedevice.FIXED_PRIOR_MAX_BATCHES`
        batch sizes, the roofline's ``d1`` is moved by the model's other groups
        (:meth:`sibling_scale`)."""
        dn = self.device_name(cfg)
        eff, kernels = self.roofline(cfg)
        anchors = [od.Anchor(p.per_device_batch, p.busy_s, od.TRACE_SIGMA,
                             f"{p.source}:{p.result_id} (trace busy)")
                   for p in self.of(cfg) if p.busy_s]
        work = self.work(cfg.model, cfg.framework, cfg.precision, cfg.device)
        ceil = self.ceiling(cfg.framework, cfg.precision, dn, cfg.model) if eff else None
        host, sigma, scale = None, od.HOST_TRANSFER_SIGMA, None
        if with_sessions:
            anchors += self._session_anchors(cfg, source)
            host, sigma = self._host_prior(cfg, source, dn)
            if eff and batches is not None and batches <= od.FIXED_PRIOR_MAX_BATCHES:
                scale = self.sibling_scale(cfg)
        return od.device_prior(work, ceil, eff, anchors, host, sigma, kernels, scale)

    def sibling_scale(self, cfg: Config) -> tuple[float, str] | None:
        """``(factor, where from)``: how far ``cfg``'s model departs from its group's roofline
        ``d1`` in its *other* (framework, mode) groups at the same precision and device, where
        a series shows its own ``d1``: 3+ batch sizes
        (:data:`~dlperf.perfmodel.onedevice.IDENTIFY_MIN_BATCHES`), device-bound at the largest
        in its own fit (:meth:`fit_points` without session terms). The factor is ``exp`` of
        the median over those groups of the median over each group's series of
        ``log(fitted d1 / roofline d1)``, one vote per group; None without such a series.
        A per-model effect shared across groups (partial pooling, Gelman & Hill 2007, ch. 12):
        on the development series the roofline's ``d1`` is off by a log RMS of 0.52, this
        factor taken from the other groups by 0.34 (lstm bf16 +1.0 in torch eager, +0.84 in
        JAX; transformer bf16 -0.31, -0.15, -0.12)."""
        by: dict[tuple[str, str, str, str], list[float]] = {}
        for c in self.shared.by_config:
            if (c.model, c.precision, c.device) != (cfg.model, cfg.precision, cfg.device) \
                    or c.group == cfg.group:
                continue
            for s in self.series(c):
                if len({p.batch_size for p in s}) < od.IDENTIFY_MIN_BATCHES:
                    continue
                pr = self.prior(c, s[0].source, False)
                fit = self.fit_points(c, s, with_sessions=False)
                if pr is None or not pr.d1 or fit.bound(max(fit.batch_sizes)) != "device":
                    continue
                by.setdefault(c.group, []).append(float(np.log(fit.device_per_sample_s
                                                               / pr.d1)))
        if not by:
            return None
        u = median(median(v) for v in by.values())
        return float(np.exp(u)), (f"the model's {cfg.precision} d1 over the roofline's in "
                                  + ", ".join("/".join(g[:2]) for g in sorted(by)))

    def _session_anchors(self, cfg: Config, source: str | None) -> list[od.Anchor]:
        """The device-bound steps of ``cfg``'s series in results files other than ``source``
        (by each series' own fit without session terms), as measurements of ``D``."""
        fits = [(s, self.fit_points(cfg, s, with_sessions=False)) for s in self.series(cfg)
                if s[0].source != source]
        return [od.Anchor(p.per_device_batch, p.step_time_s, od.SESSION_SIGMA,
                          f"{p.source}:{p.result_id} (device-bound step)")
                for s, fit in fits for p in s
                if fit.device_s(p.per_device_batch) >= DEVICE_BOUND_MARGIN * fit.host_s]

    def _host_prior(self, cfg: Config, source: str | None, dn: str | None
                    ) -> tuple[tuple[float, str] | None, float]:
        """``(host time (s) and where from, log-width)`` of a series' host prior: carried over
        from the model's other series (:meth:`host_elsewhere`,
        :data:`~dlperf.perfmodel.onedevice.HOST_TRANSFER_SIGMA`), else estimated from other
        models (:meth:`host_of_group`, :data:`~dlperf.perfmodel.onedevice.
        HOST_ESTIMATE_SIGMA`); ``(None, HOST_TRANSFER_SIGMA)`` without either."""
        host = self.host_elsewhere(cfg, source)
        est = self.host_of_group(cfg.group, cfg.model, dn) if host is None else None
        if est is not None and est.host_s > 0:
            n = len(est.models)
            said = f"{n} other models counted" if est.counted else f"of {n} other models with one"
            return (est.host_s, f"estimated from {est.where} ({said})"), od.HOST_ESTIMATE_SIGMA
        return host, od.HOST_TRANSFER_SIGMA

    def fit_points(self, cfg: Config, s: list[Point], with_sessions: bool) -> od.SeriesFit:
        """The fit of ``cfg``'s series ``s`` (one results file's points), cached; without
        ``with_sessions`` its prior has no other-session anchors and no host from elsewhere."""
        if not with_sessions:
            return self.shared.memo.get(
                "plain", (cfg, tuple((p.source, p.result_id) for p in s),
                          tuple((p.source, p.result_id) for p in self.of(cfg) if p.busy_s)),
                lambda: self.shared.fit_series(s, self.prior(cfg, s[0].source, False)))
        return self.memo.get("session", (cfg, s[0].source), lambda: self.shared.fit_series(
            s, self.prior(cfg, s[0].source, True, len({p.batch_size for p in s}))))

    def fit(self, cfg: Config, source: str | None = None) -> tuple[od.SeriesFit, list[Point]]:
        """The fitted series of ``cfg`` (in ``source``, else the best-measured one) and its points.

        Raises:
            LookupError: no stored one-device point of ``cfg`` (in ``source``) outside
                instrumented runs: the message says "stored only in N instrumented run(s)
                (traced or --breakdown), which no series is fitted to" where such runs hold it, else "no stored
                one-device point".
        """
        ser = [s for s in self.series(cfg) if source is None or s[0].source == source]
        if not ser:
            where = f" in {source}" if source else ""
            traced = sum(source in (None, p.source) for p in self.of(cfg))  # all instrumented
            raise LookupError(f"{cfg.label()} is stored{where} {instrumented_only(traced)}"
                              if traced else
                              f"no stored one-device point of {cfg.label()}{where}")
        return self.fit_points(cfg, ser[0], with_sessions=True), ser[0]

    def count_kind(self, framework: str, mode: str) -> str:
        """:meth:`Facts.count_kind <dlperf.perfmodel.facts.Facts.count_kind>`."""
        return self.facts.count_kind(framework, mode)

    def op_count(self, model: str, framework: str, precision: str, kind: str,
                 mode: str | None = None) -> int | None:
        """:meth:`Facts.op_count <dlperf.perfmodel.facts.Facts.op_count>`."""
        return self.facts.op_count(model, framework, precision, kind, mode)

    def counted_hosts(self, group: tuple[str, str, str, str], without_model: str | None,
                       device_name: str | None, kind: str
                       ) -> dict[str, tuple[float, int]]:
        """``{model: (median identified host time (s), its count)}`` of ``group``'s series
        (roofline fit without ``without_model``) whose model has a host-work count of ``kind``
        (:meth:`count_kind`) in the group's mode."""
        per: dict[str, list[float]] = {}
        counts: dict[str, int] = {}
        for h in self.identified_hosts(group, without_model, device_name):
            n = self.op_count(h.model, group[0], group[2], kind, group[1])
            if n:
                per.setdefault(h.model, []).append(h.host_s)
                counts[h.model] = n
        return {m: (median(v), counts[m]) for m, v in per.items()}

    def identified_hosts(self, group: tuple[str, str, str, str], without_model: str | None,
                         device_name: str | None) -> list[rl.SeriesHost]:
        """The identified host times (:attr:`~dlperf.perfmodel.roofline.SeriesHost.
        identified`) of ``group``'s series in its roofline fit without ``without_model`` (so
        none of that model's); none where the group has no fit."""
        eff = self.efficiency(group, without_model, device_name)
        return [h for h in (eff.hosts if eff else ()) if h.identified]

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
        launch, no fixed part. None without any. The problem is solved once
        (:func:`lsq.solved`: a solution stored with the residual table is read, and scipy is
        not loaded)."""
        per = self.counted_hosts(group, without_model, device_name, "launches")
        if not per:
            return None
        models = tuple(sorted(per))
        if len(per) == 1:
            (h, n), = per.values()
            return 0.0, h / n, models
        a = np.array([[1.0, n] for _, n in per.values()])
        y = np.array([h for h, _ in per.values()])

        def solve() -> np.ndarray:
            from scipy.optimize import nnls

            return nnls(a / y[:, None], np.ones_like(y))[0]
        fixed, slope = lsq.solved("nnls " + lsq.digest(a, y), solve)
        return float(fixed), float(slope), models

    def host_per_op(self, group: tuple[str, str, str, str], without_model: str | None,
                    device_name: str | None, kind: str
                    ) -> tuple[float, tuple[str, ...]] | None:
        """The host time per dispatched operator (s) of ``group`` (per counted ``kind``,
        :meth:`count_kind`): the median over its models with an
        identified host time (roofline fit without ``without_model``) of ``H / count``
        (:meth:`op_count`), with the models it came from; None when no such series has a count.
        Dai et al. 2022 (sec. 4) found the host's share set by the operators a framework
        dispatches; on the H200 (calibration2.db) ``H / ops`` of torch eager spread 35-66 us
        over 8 of 9 networks (the LSTM's cuDNN ops: 99-212 us)."""
        per = self.counted_hosts(group, without_model, device_name, kind)
        if not per:
            return None
        return median(h / n for h, n in per.values()), tuple(sorted(per))

    def host_of_group(self, group: tuple[str, str, str, str], without_model: str,
                      device_name: str | None) -> HostEstimate | None:
        """The host time (s) for a model with no measurement of its own (:class:`HostEstimate`). Where the model's host-work count is known (:meth:`op_count`),
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
            n = self.op_count(without_model, group[0], group[2], k, group[1])
            if n:
                kind = k
                break
        # other modes only with the same compile mode: a CUDA-graph replay has no per-operator
        # host work to borrow from a mode that launches every kernel
        same = [p.group for p in self.points if p.framework == group[0]
                and p.device == group[3]
                and special.compile_of(p.group[1]) == special.compile_of(group[1])]
        # the tiers, keyed (other mode, other precision) so that they sort in order: the
        # group; its mode at other precisions; its precision in other modes; other modes at
        # other precisions
        tiers: dict[tuple[bool, bool], list[tuple[str, str, str, str]]] = {
            (False, False): [group]}
        for g in sorted(set(same) - {group}):
            tiers.setdefault((g[1] != group[1], g[2] != group[2]), []).append(g)
        for _, tier in sorted(tiers.items()):
            cands = [e for g in tier if (e := self._group_host(g, without_model, device_name,
                                                               kind, n))]
            if cands:
                return min(cands)
        return None

    def _group_host(self, group: tuple[str, str, str, str], without_model: str | None,
                    device_name: str | None, kind: str, n: int | None) -> HostEstimate | None:
        """One group's estimate for :meth:`host_of_group`: its fixed part plus cost per launch
        times ``n`` launches (:meth:`host_line`), else its host per counted ``kind`` times ``n``
        (:meth:`host_per_op`), else its host floor; None without any."""
        line = self.host_line(group, without_model, device_name) \
            if n and kind == "launches" else None
        if line is not None and n:
            return HostEstimate(line[0] + line[1] * n, line[2], "/".join(group) + (
                f" ({line[0] * 1e3:.3g} ms + {line[1] * 1e6:.3g} us x {n} {kind})"), True)
        per = self.host_per_op(group, without_model, device_name, kind) if n else None
        if per is not None and n:
            return HostEstimate(per[0] * n, per[1], "/".join(group)
                                + f" ({per[0] * 1e6:.3g} us x {n} {kind})", True)
        e = self.efficiency(group, without_model, device_name)
        f = e.host_floor() if e else None
        return HostEstimate(f[0], f[2], f"{f[1]}'s host time, the smallest identified in "
                            f"{'/'.join(group)}", False) if f else None

    def host_ratio(self, frm: tuple[str, str, str, str], to: tuple[str, str, str, str],
                   without_model: str | None, device_name: str | None
                   ) -> tuple[float, tuple[str, ...]] | None:
        """Median over models of ``H(to) / H(from)`` for models with host-bound series in both
        groups (same data and layout, median per model), both groups fitted without
        ``without_model``; None when no model has both."""
        def hosts(g):
            out: dict[tuple, list[float]] = {}
            for h in self.identified_hosts(g, without_model, device_name):
                out.setdefault((h.model, h.data, h.layout), []).append(h.host_s)
            return {k: median(v) for k, v in out.items()}
        a, b = hosts(frm), hosts(to)
        both = sorted(set(a) & set(b))
        if not both:
            return None
        return median(b[k] / a[k] for k in both), tuple(sorted({k[0] for k in both}))

    def host_elsewhere(self, cfg: Config, source: str | None) -> tuple[float, str] | None:
        """A host time (s) for ``cfg`` carried over from host-bound series of the same model,
        framework, mode, device, data and layout in other precisions or other results files
        than ``source`` (fitted without session anchors; the series fit's host prior,
        :meth:`prior`): from another precision by :func:`special.added_ops_host` where the mode
        counts operators, else times the groups' host ratio (:meth:`host_ratio`); 1 for the
        same group. The median over them, and where from; None when there is none."""
        dn = self.device_name(cfg)
        vals, where = [], []
        for prec in sorted({p.precision for p in self.points if p.model == cfg.model}):
            other = cfg.with_(precision=prec)
            for s in self.series(other):
                if (s[0].source == source and prec == cfg.precision) \
                        or len({p.batch_size for p in s}) < 2:
                    continue  # the series itself; one point cannot show its host time
                fit = self.fit_points(other, s, with_sessions=False)
                if fit.bound(min(fit.batch_sizes)) != "host":
                    continue
                h = fit.host_s if prec == cfg.precision else self._moved_host(other, cfg,
                                                                              fit.host_s, dn)
                if h is not None:
                    vals.append(h)
                    where.append(f"{prec} in {s[0].source}")
        return (median(vals), "; ".join(where)) if vals else None

    def _moved_host(self, frm: Config, to: Config, host_s: float, dn: str | None
                    ) -> float | None:
        """``host_s`` of ``frm`` moved to ``to`` (another precision): by the operators it adds
        (:func:`special.added_ops_host`) where its mode counts them, else by the groups' host
        ratio (:meth:`host_ratio`); None without either."""
        add = special.added_ops_host(self, frm, to, host_s, dn)
        if add:
            return add[0]
        r = self.host_ratio(frm.group, to.group, to.model, dn)
        return host_s * r[0] if r else None
