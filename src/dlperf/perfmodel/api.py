"""The performance model's public API for predictions: :func:`predict` (its validation,
``validate``, lives in :mod:`dlperf.perfmodel.validation`, outside a prediction's imports).

``predict`` answers "how fast would this train at another batch size, precision or mode, on
more GPUs or more nodes" from stored results. It is pure over the results files (read once per
process and kept by path and modification time); no framework is imported.

The prediction interval comes from held-out residuals ``log(measured / predicted)`` of the
back-test category that matches how the prediction was made: a Mondrian conformal interval
(:func:`dlperf.perfmodel.intervals.mondrian`) from the residuals of the prediction's own bound
(host or device) in that category when there are enough, else the category's. ``predict`` never
runs the back-test: it reads the residual table that ``dlperf predict --validate`` wrote beside
the results files (:func:`dlperf.perfmodel.fitcache.read_table`, keyed by the model's source and
the files' content), or, in the same process, the residuals a :func:`validate` of the same files
left in memory. Without either a prediction has no interval and says how to get one. The roofline
group fits are stored too (:func:`dlperf.perfmodel.fitcache.fits_file`, same key), so a new
process reads them back instead of fitting each group again.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dlperf.errors import ConfigError
from dlperf.perfmodel import dataparallel as dp
from dlperf.perfmodel import equations as eq
from dlperf.perfmodel import fitcache as fc
from dlperf.perfmodel import inputpipe as ip
from dlperf.perfmodel import intervals as iv
from dlperf.perfmodel import memory
from dlperf.perfmodel import model as pm
from dlperf.perfmodel import request as rq
from dlperf.perfmodel import roofline as rl
from dlperf.perfmodel.calibrate import Calibration, Config
from dlperf.perfmodel.netspec import network_for, whole
from dlperf.perfmodel.records import Records, load, point_id
from dlperf.perfmodel.scaling import efficiency

#: The back-test category of an N-device prediction: every stored N-device point predicted
#: through :func:`predict` itself (:mod:`dlperf.perfmodel.validation`).
NPROC_CATEGORY = "N-GPU via predict --nproc"

_RECORDS: dict[tuple, Records] = {}
#: This process's residual tables: (model key, data digest) -> category ->
#: ``(residual, bound, point)``, read from the table beside the data or left by :func:`validate`.
_RESIDUALS: dict[tuple[str, str], dict[str, list[iv.KeyedResidual]]] = {}
#: Why a set of results files has no residual table (same key), for the prediction's note.
_NO_TABLE: dict[tuple[str, str], str] = {}


@dataclass
class Prediction:
    """A predicted training step.

    Attributes:
        predicted_step_time_s: one iteration (s).
        interval_s: ``(low, high)`` (s) holding ``interval_level`` of held-out measurements of
            this kind of prediction (``how``); ``(nan, nan)`` when no back-test residual exists.
        interval_level: e.g. 0.9.
        samples_per_s: global batch / step.
        scaling_efficiency: the one-device step at the per-device batch over the N-device step
            (weak scaling; 1.0 on one device).
        parts: ``host_s``, ``device_s``, ``device_by_class_s`` {op class: s}, ``exposed_comm_s``,
            ``input_s`` (the one-device host and device parts before DDP's overhead).
        bound: ``host`` or ``device`` (of the one-device step), ``input`` where the exposed input
            time is more than half of the iteration (:mod:`dlperf.perfmodel.inputpipe`).
        how: ``series``, ``what-if``, ``analytic`` (+ ``+ data parallel``).
        calibrated_on: ``file:id`` of every stored result whose measurement chose a constant.
        provenance: each constant and where it came from (``measured: ...``, ``given: ...``,
            ``fitted: ...``).
        assumptions: what the model assumed for lack of a record.
        config: the predicted configuration and batch.
        measured_step_time_s: the stored measurement of exactly this point, if any (it was
            withheld from the fit): the one in the results file whose series the prediction
            came from, else the last loaded; none for a ``host_speed_ns`` what-if (measured
            at another host's speed).
        measured_point: its ``file:id``; ``measured_points``: every stored measurement of the
            point, ``{file:id: s}`` (the same point differs between host sessions).
        warnings: what makes this prediction less trustworthy than its interval says: a batch
            far outside the measured series (device memory is not modelled), a configuration
            picked among several stored ones (:mod:`dlperf.perfmodel.request`).
        interval_note: why there is no interval (``interval_s`` is NaN), else None.
        interval_group: which held-out residuals the interval came from, e.g.
            ``held-out batch, host-bound: 105 rows, conformal`` (:class:`intervals.Interval`),
            or ``borrowed from 2-GPU from 1-GPU at 95%: ...`` where the prediction's own path
            has no back-test rows; None without an interval.
        gpu: the device the prediction is for, by name (``NVIDIA H200``; a CPU's model),
            from the stored points it was calibrated on.
        host_session: the host session (``host/cpu model/date``) the host time came from: the
            session of the series fitted, or how it was estimated without one.
    """

    predicted_step_time_s: float
    interval_s: tuple[float, float]
    interval_level: float
    samples_per_s: float
    scaling_efficiency: float
    parts: dict[str, Any]
    bound: str
    how: str
    calibrated_on: list[str]
    provenance: dict[str, str]
    assumptions: list[str]
    config: dict[str, Any]
    measured_step_time_s: float | None = None
    measured_point: str | None = None
    measured_points: dict[str, float] = field(default_factory=dict)
    validation_category: str | None = field(default=None, repr=False)
    warnings: list[str] = field(default_factory=list)
    interval_note: str | None = None
    interval_group: str | None = None
    gpu: str | None = None
    host_session: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (``interval_s`` as a list)."""
        d = asdict(self)
        d["interval_s"] = list(self.interval_s)
        return d


def records_of(db: str | os.PathLike | Iterable[str | os.PathLike]) -> Records:
    """:func:`records.load` cached per (paths, modification times).

    Raises:
        ConfigError: a missing or unreadable results file, a folder with no ``*.db``.
    """
    paths = [db] if isinstance(db, (str, os.PathLike)) else list(db)
    key = tuple((str(p), Path(p).stat().st_mtime_ns if Path(p).exists() else None) for p in paths)
    if key not in _RECORDS:
        for p in paths:
            if not Path(p).exists():
                raise ConfigError(f"{str(p)!r} does not exist: give a results file (*.db) or "
                                  "a folder of them")
        _RECORDS[key] = load(paths)
    return _RECORDS[key]


def _interval(recs: Records, category: str, level: float, bound: str | None,
              withheld: Iterable = ()) -> iv.Interval | None:
    """The Mondrian conformal interval of a prediction of ``bound`` made as ``category``,
    without the residuals of the ``withheld`` points (the stored measurements of the point
    predicted: :func:`intervals.without_points`)."""
    ids = {point_id(p) for p in withheld}
    return iv.mondrian(bounded_residuals(recs, category, ids), bound, level, category)


def table_key(recs: Records) -> tuple[str, str]:
    """The residual table's key of ``recs``: the model's source and the files' content."""
    return fc.model_key(), fc.data_digest(recs.sources)


def residuals(recs: Records, category: str) -> list[float]:
    """Held-out ``log(measured / predicted)`` of one back-test category on ``recs``
    (:func:`bounded_residuals` without the bounds)."""
    return [r for r, _ in bounded_residuals(recs, category)]


def bounded_residuals(recs: Records, category: str,
                      exclude: Collection[str] = ()) -> list[iv.Residual]:
    """Held-out ``(log(measured / predicted), bound)`` of one back-test category on ``recs``,
    from the residual table (:func:`_keyed_residuals`); ``exclude``: the measured points
    (``source:result_id``) whose residuals are left out (:func:`intervals.without_points`)."""
    return iv.without_points(_keyed_residuals(recs, category), exclude)


def _keyed_residuals(recs: Records, category: str) -> list[iv.KeyedResidual]:
    """The category's residuals from this process's tables or the one beside the data
    (:func:`fitcache.read_table`); empty when there is none of the current key (the reason is
    kept in :data:`_NO_TABLE`). Never runs a back-test."""
    key = table_key(recs)
    if key not in _RESIDUALS and key not in _NO_TABLE:
        table, why = fc.read_table(recs.sources)
        if table is None:
            _NO_TABLE[key] = why
        else:
            _RESIDUALS[key] = table
    return _RESIDUALS.get(key, {}).get(category, [])


def predict(db: str | os.PathLike | Iterable[str | os.PathLike], model: str,
            framework: str | None = None, mode: str | None = None, precision: str | None = None,
            device: str | None = None, batch_size: int = 0, nproc: int = 1, nnodes: int = 1,
            network: Any = None, what_if: Mapping[str, Any] | None = None,
            level: float = 0.9, *, data: str | None = None, layout: str | None = None,
            loader_workers: int | None = None, threads: int | None = None,
            grad_accum: int | None = None, compile_mode: str | None = None) -> Prediction:
    """Predict one training iteration from the stored results in ``db``.

    Args:
        db: a results file, several, or a folder of ``*.db``.
        model, framework, mode, precision, device: the configuration (None: the one stored, if
            exactly one matches; all four needed for a model with no stored point). Names are
            checked against the zoo and the registry (:func:`request.check_names`).
        batch_size: the *global* mini-batch (samples per iteration over all devices).
        nproc, nnodes: devices per node and nodes (data parallel when their product > 1).
        network: inter-node link (``"ib_ndr"``, ``"eth100"``, ...), or ``{"inter": ..,
            "intra": .., "algorithm": "ring"|"tree"|"hierarchical"|"best"}``, a link being a
            name of :data:`comm.LINKS` or ``{"alpha_s": .., "bandwidth_bytes_per_s": ..}``;
            required when ``nnodes > 1``.
        what_if: predict a changed configuration from the given one's measurements:
            ``{"precision": "bf16"}``, ``{"mode": "graph"}``, ``{"framework": "jax"}``,
            ``{"batch_size": "2x"}`` (or ``256``), ``{"host_speed_ns": 90}`` (another host's
            ``env.host_speed`` probe).
        level: coverage of the interval.
        data, layout, loader_workers, threads, grad_accum, compile_mode: select among stored
            series of the same model, framework, mode, precision and device
            (:data:`request.SELECTORS`; None: any, the default one preferred, which
            ``warnings`` then names). ``compile_mode``: the compiler's mode of a graph run
            (PyTorch: ``reduce-overhead`` replays CUDA graphs), a configuration of its own.

    Raises:
        ConfigError: bad arguments (an unknown model, framework, mode, precision, device or
            layout; a what-if out of range or one the framework cannot run; several nodes
            without a network), no matching stored configuration or several with no default,
            a batch not divisible by the devices, or nothing stored to calibrate on.
    """
    for name, v in (("batch_size", batch_size), ("nproc", nproc), ("nnodes", nnodes)):
        if not whole(v):
            raise ConfigError(f"{name} {v!r}: give a whole number >= 1 (e.g. {name}=64)")
    batch_size, nproc, nnodes = int(batch_size), int(nproc), int(nnodes)
    if what_if is not None and not isinstance(what_if, Mapping):
        raise ConfigError(f"what_if {what_if!r}: give a mapping such as "
                          "{'precision': 'bf16'} or {'batch_size': '2x'}")
    if not isinstance(db, (str, os.PathLike)) and not (
            isinstance(db, Iterable) and all(isinstance(x, (str, os.PathLike)) for x in db)):
        raise ConfigError(f"db {db!r}: give a results file, a folder of them, or a list of "
                          "either")
    if batch_size < 1 or nproc < 1 or nnodes < 1:
        raise ConfigError(f"batch_size, nproc and nnodes must be >= 1 (got {batch_size}, "
                          f"{nproc}, {nnodes})")
    net = network_for(network, nnodes)
    world = nproc * nnodes
    if batch_size % world:
        raise ConfigError(f"global batch {batch_size} is not divisible by {world} devices")
    recs = records_of(db)
    device = rq.device_for(recs, device)
    given = {"framework": framework, "mode": mode, "precision": precision, "device": device,
             "data": data, "layout": layout.lower() if layout else None,
             "loader_workers": loader_workers, "threads": threads, "grad_accum": grad_accum,
             "compile_mode": compile_mode}
    rq.check_names(recs, model, given)
    base, note = rq.resolve(recs, model, given)
    target, gbatch, host_ns = rq.apply_what_if(what_if, base, batch_size)
    if target != base:
        rq.check_target(recs, target, "--what-if " + ", ".join(
            f"{k}={v}" for k, v in (what_if or {}).items()))
    if gbatch % world:
        raise ConfigError(f"global batch {gbatch} is not divisible by {world} devices")
    b = gbatch // world
    _check_scale_out(recs, target, world, nnodes)
    _, no_fit = memory.check([p for p in recs.points if target.matches(p)], b)
    if no_fit:
        raise ConfigError(f"{target.label()}: {no_fit}")
    # the point predicted is withheld from every fit (one device: the configuration at this
    # batch; N devices: its N-device measurements, the one-device ones stay: they are the input)
    withheld = [p for p in recs.points if Config.of(p) == target and p.world_size == world
                and p.nnodes == nnodes and p.per_device_batch == b and not p.variant]
    cal = Calibration(recs, lambda p: target.matches(p) and (
        (world == 1 and p.per_device_batch == b) or target != base),
        share_efficiencies=_base_calibration(recs))
    # a point stored in one file is predicted from that file's series (its host session), as
    # the back-test does; else from the best-measured series
    files = [p.source for p in withheld if world == 1]
    sources: list[str | None] = [files[-1], None] if files else [None]
    try:
        if target != base:
            one, cat = _first(lambda x: pm.what_if(cal, base, target, b, x),
                              sources), _whatif_category(base, target)
        elif cal.series(target):
            one = _first(lambda x: pm.from_series(cal, target, b, x), sources)
            cat = series_category(one.fit.batch_sizes if one.fit else (), b)
        else:
            one, cat = pm.analytic(cal, target, b), "leave-one-model-out"
    except (LookupError, ValueError) as e:
        raise ConfigError(f"{target.label()}: {e}{_how_to_give_flops(recs, target, e)}") from None
    if gbatch != batch_size and target == base:
        cat = "what-if B->2B"
    pred = _finish(recs, cal, one, cat, world, nnodes, gbatch, net, host_ns, level, withheld)
    pred.warnings = [*rq.extrapolation(recs, base, b), *([note] if note else [])]
    if host_ns is not None or target.framework != base.framework:
        pred.assumptions.append(
            f"interval from the '{cat}' back-test: "
            + ("a host-speed change" if host_ns is not None else "a change of framework")
            + " is not back-tested on stored pairs, so its error is not known here")
    if pred.how == "analytic" and target == base:  # the model's own series in another config
        own = sorted({Config.of(p) for p in recs.points if p.model == model and p.world_size == 1
                      and p.framework == target.framework and p.device == target.device
                      and Config.of(p) != target}, key=lambda c: c.label())
        if own:
            pred.warnings.append(
                f"analytic: {target.label()} is "
                + (f"stored only at batch {b}, which a prediction of it withholds"
                   if withheld else "not stored") + f", but {own[0].label()} is; a what-if "
                f"from it uses {model}'s own measurements (e.g. --precision {own[0].precision} "
                f"--mode {own[0].mode} --what-if precision={target.precision}"
                + (f" --what-if mode={target.mode}" if target.mode != own[0].mode else "") + ")")
    _store_fits(recs)
    return pred


def series_category(batches: Iterable[int], batch: int) -> str:
    """The back-test category whose residuals judge a prediction at per-device ``batch`` from a
    series fitted on ``batches``: a series of one or two batch sizes has its own categories,
    up or down; a longer one is ``extrapolate 2x`` (``extrapolate down 2x``) at twice its
    largest batch or more (half its smallest or less), else ``held-out batch``."""
    bs = sorted(set(batches))
    if not bs:
        return "held-out batch"
    way = "up" if batch > bs[-1] else "down" if batch < bs[0] else None
    if len(bs) <= 2 and way:
        return f"{'one' if len(bs) == 1 else 'two'}-point series {way}"
    if len(bs) > 2 and batch >= 2 * bs[-1]:
        return "extrapolate 2x"
    if len(bs) > 2 and 2 * batch <= bs[0]:
        return "extrapolate down 2x"
    return "held-out batch"


def _check_scale_out(recs: Records, target: Config, world: int, nnodes: int) -> None:
    """Refuse a data-parallel prediction of a device with no stored data-parallel run: the
    DDP overhead, the all-reduce and the interval all come from such runs (a CPU-only file
    would otherwise get a GPU's NVLink defaults and the 2-GPU interval)."""
    if world == 1 or target.device == "cuda":
        return
    stored = {p.world_size for p in recs.points if p.device == target.device and p.world_size > 1
              and p.nnodes == 1}
    if nnodes > 1 or not stored:
        raise ConfigError(
            f"{target.label()} on {world} {target.device} devices"
            + (f" over {nnodes} nodes" if nnodes > 1 else "") + ": the model has no "
            f"data-parallel measurement of device {target.device} to calibrate or judge it "
            + ("across nodes" if nnodes > 1 and stored else "") + "; measure one (dlperf run "
            f"--device {target.device} --nproc 2 ...) or predict one device")


def _first(make: Any, sources: list[str | None]) -> pm.OneDevice:
    """``make(source)`` for the first of ``sources`` that works, else the last one's error
    (a source without a series of the configuration: LookupError; one point: ValueError)."""
    *firsts, last = sources
    for x in firsts:
        try:
            return make(x)
        except (LookupError, ValueError):
            pass
    return make(last)


def _how_to_give_flops(recs: Records, target: Config, e: Exception) -> str:
    """For a missing FLOP count (:func:`roofline.work_of`), how to give one: store a run of this
    configuration (``dlperf run`` records ``train_flops_per_sample``); names the model's stored
    configurations in other frameworks, whose counts are not taken across."""
    if not isinstance(e, rl.NoFlopCount):
        return ""
    own = sorted({Config.of(p) for p in recs.points if p.model == target.model
                  and p.train_flops_per_sample}, key=lambda c: c.label())
    run = (f" Give one: store a run of it (dlperf run --model {target.model} --framework "
           f"{target.framework} --precision {target.precision} ...: a run records "
           "train_flops_per_sample) and predict from that file")
    if not own:
        return "." + run
    return (f". {target.model} is stored only as {', '.join(c.label() for c in own[:3])}, "
            f"whose FLOP count is not taken for {target.framework} (the graphs may differ)." + run)


_BASE: dict[int, Calibration] = {}
_FITS_STORED: dict[int, int] = {}  # group fits on disk per records (id)
_DDP: dict[tuple, dp.DDPOverhead] = {}


def _base_calibration(recs: Records) -> Calibration:
    """One calibration per loaded records whose roofline fits later calibrations share: each
    fit leaves out the model it serves, and a prediction withholds only its own model's points
    (:class:`Calibration`'s ``share_efficiencies``)."""
    if id(recs) not in _BASE:
        _BASE[id(recs)] = cal = Calibration(recs)
        cal._eff.update(fc.read_fits(fc.fits_file(recs)))  # fitcache.py
        _FITS_STORED[id(recs)] = len(cal._eff)
    return _BASE[id(recs)]


def _store_fits(recs: Records) -> None:
    """Write the base calibration's group fits to disk when this process added some."""
    cal = _BASE.get(id(recs))
    if cal is not None and len(cal._eff) > _FITS_STORED.get(id(recs), 0):
        fc.write_fits(fc.fits_file(recs), cal._eff)
        _FITS_STORED[id(recs)] = len(cal._eff)


def _ddp_overhead(recs: Records, withheld: list) -> tuple[dp.DDPOverhead, bool]:
    key = (id(recs), tuple(sorted((p.source, p.result_id) for p in withheld)))
    if key not in _DDP:
        dp_cal = Calibration(recs, lambda p: p in withheld,
                             share_efficiencies=_base_calibration(recs))
        pairs = dp.pairs_of(dp_cal, dp.comm_for_records(recs))
        _DDP[key] = dp.fit_ddp_overhead(pairs) if pairs else dp.DDPOverhead(0.0, 0.0, (), 0.0)
    ddp = _DDP[key]
    return ddp, bool(ddp.pairs)


def _whatif_category(base: Config, target: Config) -> str:
    if base.mode != target.mode:
        return "what-if eager->graph"
    return "what-if fp32->bf16"


def _finish(recs: Records, cal: Calibration, one: pm.OneDevice, cat: str, world: int,
            nnodes: int, gbatch: int, network: pm.Network | None, host_ns: float | None,
            level: float, withheld: list) -> Prediction:
    rungs, notes = ip.ladder_for(recs.points, one.cfg, withheld)
    if rungs and one.cfg.loader_workers is not None:  # Shi & Chu: t_c + the ladder's t_io
        one, cnotes = ip.compute_part(cal, one)
        notes, cat = [*notes, *cnotes], ip.INPUT_CATEGORY
    prov, assumptions = dict(one.provenance), [*one.assumptions, *notes]
    if host_ns is not None:
        probes = [min(x for x in p.host_speed_ns if x) for p in cal.points
                  if one.cfg.matches(p) and any(p.host_speed_ns)]
        if probes:
            scale = host_ns / float(np.median(probes))
            one.host_s = eq.host_scaled_s(one.host_s, host_ns, float(np.median(probes)))
            prov["host speed"] = (f"given: probe {host_ns:g} ns against the calibration "
                                  f"points' median {np.median(probes):.3g} ns: host x {scale:.3g}")
        else:
            assumptions.append("host speed given but not recorded with the calibration points: "
                               "host time unscaled")
    t1 = one.step_time_s
    t, exposed = t1, 0.0
    how = one.how
    if world > 1:
        fn, desc, measured = pm.comm_time_fn(cal, world, nnodes, network)
        ddp, fitted = _ddp_overhead(recs, withheld)
        if not fitted:
            assumptions.append("no stored N-device pair: DDP's own overhead taken as 0")
        prof = dp.recorded_profile(recs.points, one.cfg, world, one.batch, withheld)
        t, exposed, dprov = pm.data_parallel(one, ddp, fn, desc, measured, profile=prof)
        prov.update(dprov)
        assumptions += dp.assumptions(prof)
        how += " + data parallel"
        cat = NPROC_CATEGORY
    if one.cfg.data == "synthetic":
        input_s = 0.0
        assumptions.append("synthetic data on the device: no input time")
    else:  # inputpipe.py: the mean iteration with the input prefetching does not hide
        est = ip.estimate(rungs if one.cfg.loader_workers is not None else [],
                          one.cfg.loader_workers or 0, one.batch, t)
        input_s, t = est.input_s, est.step_s
        prov["input"] = est.provenance
        assumptions += est.assumptions
        one.calibrated_on = [*one.calibrated_on, *est.calibrated_on]
    if network is not None and network.inter is not None and nnodes == 1:
        assumptions.append(f"inter-node link {network.inter.name} not used: one node")
    # N devices: the back-test judges the stored 2-GPU points; other counts on one node
    # borrow its residuals at a wider level, several nodes are not validated at all
    stored_n = {p.world_size for p in recs.points if p.world_size > 1 and p.nnodes == 1}
    borrowed = world > 1 and nnodes == 1 and world not in stored_n
    note = None
    if world > 1 and nnodes > 1:
        ivl = None
        note = (f"multi-node: not validated (no stored measurement of {nnodes} nodes to "
                "judge this kind of prediction against)")
        assumptions.append("no interval: " + note)
    else:
        ivl = _interval(recs, cat, 1 - (1 - level) / 2 if borrowed else level, one.bound,
                        withheld)
    interval = ((t * ivl.low_ratio, t * ivl.high_ratio) if ivl
                else (float("nan"), float("nan")))
    group = ivl.describe() if ivl else None
    if ivl is not None and borrowed:
        group = f"borrowed from {cat} at {1 - (1 - level) / 2:.0%}: {group}"
        assumptions.append(f"interval borrowed from the {sorted(stored_n)}-device back-test at "
                           f"a wider level: no stored measurement of {world} devices")
    if ivl is None and note is None:
        why = _NO_TABLE.get(table_key(recs))
        if why:
            assumptions.append(f"no residual table for these files: no interval ({why})")
            note = (f"not validated on these results files ({why}); run dlperf predict "
                    "--validate with the same --db to back-test the model and store the table")
        else:
            assumptions.append(f"no back-test residual of kind '{cat}' in these files: no "
                               "interval")
            note = (f"the back-test found no stored point it could predict as a '{cat}' while "
                    "withholding it in these results files, so this kind of prediction's "
                    "error is not known here")
    # the measurement the prediction is judged against: the mean iteration where the input
    # model predicted one (inputpipe.py: the median hides the stalls), else the median
    real = one.cfg.data != "synthetic" and cat == ip.INPUT_CATEGORY
    stored = {point_id(p): (p.step_time_mean_s or p.step_time_s) if real else p.step_time_s
              for p in withheld} if host_ns is None else {}  # not at another host's speed
    # the fit names its points by the path as given, point_id by the resolved path: compare
    # resolved paths, so a relative and an absolute --db pick the same measurement (the last
    # stored of the series' file, else the last loaded)
    src = (os.path.realpath(one.fit.result_ids[0].rsplit(":", 1)[0])
           if one.fit and one.fit.result_ids else None)
    pick = [k for k in stored if k.rsplit(":", 1)[0] == src][-1:] or list(stored)[-1:]
    return Prediction(
        predicted_step_time_s=t, interval_s=interval, interval_level=level,
        samples_per_s=gbatch / t,
        scaling_efficiency=efficiency(t1, t, one.batch, gbatch, world) if world > 1 else 1.0,
        parts={"host_s": one.host_s, "device_s": one.device_s,
               "device_by_class_s": one.device_classes_s or {}, "exposed_comm_s": exposed,
               "input_s": input_s},
        bound="input" if input_s > t - input_s else one.bound, how=how,
        calibrated_on=sorted(set(one.calibrated_on)),
        provenance=prov, assumptions=assumptions,
        config={**asdict(one.cfg), "global_batch": gbatch, "per_device_batch": one.batch,
                "nproc": world // nnodes, "nnodes": nnodes},
        measured_step_time_s=stored[pick[0]] if pick else None,
        measured_point=pick[0] if pick else None, measured_points=stored,
        validation_category=cat,
        interval_note=note, interval_group=group,
        gpu=cal.device_name(one.cfg) or _cpu_name(recs, one.cfg), host_session=_session(
            recs, one))


def _cpu_name(recs: Records, cfg: Config) -> str | None:
    """A CPU device's model (``env.cpu_model`` of the stored points) for a ``cpu`` prediction;
    None where none was recorded."""
    if cfg.device != "cpu":
        return None
    names = rq.calibrated_devices(recs).get("cpu") or []
    return names[-1] if names else None


def _session(recs: Records, one: pm.OneDevice) -> str:
    """Where the host time came from: the session of the series fitted, or how it was had."""
    ids = set(one.fit.result_ids) if one.fit else set()
    sess = sorted({p.session for p in recs.points if f"{p.source}:{p.result_id}" in ids
                   and p.session})
    if sess:
        return ", ".join(sess)
    return "not measured for this configuration: " + one.provenance.get(
        "host time H", "estimated from other stored configurations")
