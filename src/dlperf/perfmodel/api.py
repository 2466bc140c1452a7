"""The performance model's public API for predictions: :func:`predict` (its validation,
``validate``, lives in :mod:`dlperf.validation`, outside a prediction's imports).

``predict`` answers "how fast would this train at another batch size, precision or mode, on
more GPUs or more nodes" from stored results. It is pure over the results files (read once per
process and kept by path and modification time); no framework is imported. One prediction is
one composition, read top to bottom in :func:`predict`:

1. the request checked and resolved to stored configurations (:func:`_request`);
2. the one-device host time ``H`` and device time ``D`` (:func:`_one_device`): the
   configuration's own series, a what-if from another configuration's, or the roofline;
3. real data with a worker ladder: the compute part first (:func:`_input_compute`);
4. another host's speed scales ``H`` (:func:`_host_speed`);
5. the step ``equations.step_s(H, D)``; N devices: ``equations.dp_step_s`` with WFBP
   (:func:`_data_parallel`); real data: the input overlap (:func:`_input`);
6. the interval from the residuals of the back-test category that makes predictions the way
   this one was made, its *path* (:func:`dlperf.perfmodel.intervalchoice.interval_of`), and
   the stored measurement of the
   point, withheld from every fit (:func:`_measured`).

The interval is a Mondrian conformal interval (:func:`dlperf.perfmodel.intervals.mondrian`)
from the path's residuals of the prediction's own bound (host or device) when there are
enough, else the category's (:mod:`dlperf.perfmodel.intervalchoice` chooses them).
``predict`` never runs the back-test: it reads the residual table that ``dlperf predict
--validate`` wrote beside the results files (:func:`dlperf.perfmodel.fitcache.read_table`,
keyed by the model's source and the files' content), or, in the same process, the residuals a
validation of the same files left in memory. Without either a prediction has no interval and
says how to get one. The roofline
group fits are stored too (:func:`dlperf.perfmodel.fitcache.fits_file`, same key), so a new
process reads them back instead of fitting each group again.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dlperf.errors import ConfigError
from dlperf.perfmodel import dataparallel as dp
from dlperf.perfmodel import equations as eq
from dlperf.perfmodel import fitcache as fc
from dlperf.perfmodel import inputpipe as ip
from dlperf.perfmodel import intervalchoice as ic
from dlperf.perfmodel import lsq, memory
from dlperf.perfmodel import model as pm
from dlperf.perfmodel import onedevice as od
from dlperf.perfmodel import request as rq
from dlperf.perfmodel import roofline as rl
from dlperf.perfmodel.calibrate import Calibration, Config, Shared, instrumented_only
from dlperf.perfmodel.comm import network_for, whole
from dlperf.perfmodel.memo import once
from dlperf.perfmodel.records import Records, load, point_id
from dlperf.perfmodel.request import Request
from dlperf.perfmodel.whatifs import whatif_category, whatif_changes

#: The back-test category of an N-device prediction: every stored N-device point predicted
#: through :func:`predict` itself (:mod:`dlperf.validation`).
NPROC_CATEGORY = "N-GPU via predict --nproc"

_RECORDS: dict[tuple, Records] = {}


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
        parts: ``host_s`` and ``device_s``, the ``H`` and ``D`` of the step, so that the step
            is ``equations.step_s(host_s, device_s) + input_s``: on N devices the data-parallel
            ``H (1 + rho)`` and ``D + kappa H + X`` (:func:`equations.dp_parts_s`, ``X`` =
            ``exposed_comm_s``, inside ``device_s``), with the one device's ``H`` and ``D``
            at the per-device batch as ``one_device_host_s`` and ``one_device_device_s``;
            ``device_by_class_s`` {op class: s} splits the one device's ``D``;
            ``exposed_comm_s``; ``input_s`` (the input pipeline's exposed time).
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
            far outside the measured series, a configuration picked among several stored ones
            (:mod:`dlperf.perfmodel.request`), the damaged rows of the files that were skipped
            (:meth:`records.Records.damaged_notes`).
        interval_note: why there is no interval (``interval_s`` is NaN), else None.
        interval_group: which held-out residuals the interval came from, e.g.
            ``held-out batch, host-bound: 105 rows, conformal`` (:class:`intervals.Interval`),
            or ``borrowed from N-GPU via predict --nproc at 95%: ...`` where the prediction's
            own path has no back-test rows (N devices never stored, a host-speed or framework
            what-if), ``borrowed from the h200 residual table (...) at 95%: ...`` where these
            files have no residual table of their own (:mod:`~dlperf.perfmodel.intervalchoice`); None
            without an interval.
        gpu: the device the prediction is for, by name (``NVIDIA H200``; a CPU's model),
            from the stored points it was calibrated on.
        host_session: the host session (``host/cpu model/date``) the host time came from: the
            session of the series fitted, or how it was estimated without one.
        explanation: the numbers the prediction was composed of, read from what it computed
            (no fit of its own): the series and every row of its fit, a what-if's ratios and
            pairs, the host-speed scaling, the data-parallel terms, the interval's rows and
            ranks (:func:`_explanation`; ``dlperf predict --explain``); left out of
            :meth:`to_dict` unless asked for.
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
    explanation: dict[str, Any] = field(default_factory=dict, repr=False)

    def to_dict(self, explain: bool = False) -> dict[str, Any]:
        """JSON-ready dict (``interval_s`` as a list; ``explanation`` only with ``explain``)."""
        d = asdict(self)
        d["interval_s"] = list(self.interval_s)
        if not explain:
            d.pop("explanation")
        return d


def records_of(db: str | os.PathLike | Iterable[str | os.PathLike]) -> Records:
    """:func:`records.load` cached per (paths, modification times).

    Raises:
        ConfigError: a missing or unreadable results file, a folder with no ``*.db``.
    """
    paths = [db] if isinstance(db, (str, os.PathLike)) else list(db)
    for p in paths:
        if not Path(p).exists():
            raise ConfigError(f"{str(p)!r} does not exist: give a results file (*.db) or "
                              "a folder of them (the CLI's --db, repeatable)")
    key = tuple((str(p), Path(p).stat().st_mtime_ns) for p in paths)
    return once(_RECORDS, key, lambda: load(paths))


_GPU_RECORDS: dict[tuple[int, str | None], Records] = {}


def gpu_records(recs: Records, gpu: str | None) -> Records:
    """:func:`request.for_gpu`, one :class:`Records` per (records, GPU) in a process (the fits
    shared per records object, :func:`shared_fits`, are made once)."""
    return once(_GPU_RECORDS, (id(recs), gpu), lambda: rq.for_gpu(recs, gpu))


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
    req = _request(db, model, framework, mode, precision, device, batch_size, nproc, nnodes,
                   network, what_if, data=data, layout=layout, loader_workers=loader_workers,
                   threads=threads, grad_accum=grad_accum, compile_mode=compile_mode)
    recs = gpu_records(records_of(db), req.gpu)  # one GPU model's points: rq.gpu_of
    cal = Calibration(recs, lambda p: req.target.matches(p) and (
        (req.world == 1 and p.per_device_batch == req.batch) or req.from_base),
        share_efficiencies=shared_fits(recs))
    d = _one_device(recs, cal, req)       # H and D of one device: series, what-if or analytic
    _input_compute(d, recs, cal, req)     # real data with a worker ladder: t_c first
    _host_speed(d, cal, req)              # another host: H scaled by the probes
    t1 = d.step_s = d.one.step_time_s     # equations.step_s(H, D)
    _data_parallel(d, recs, cal, req)     # N devices: equations.dp_step_s with WFBP
    _input(d, req)                        # real data: equations.input_iteration_s
    pred = _prediction(d, recs, cal, req, t1, level)
    _store_fits(recs)
    return pred


def _request(db: Any, model: str, framework: str | None, mode: str | None,
             precision: str | None, device: str | None, batch_size: Any, nproc: Any,
             nnodes: Any, network: Any, what_if: Any, **selectors: Any) -> Request:
    """:func:`predict`'s arguments checked (each refusal a :class:`ConfigError` saying how to
    fix it) and resolved to a :class:`Request` (:mod:`dlperf.perfmodel.request`)."""
    for name, v in (("batch_size", batch_size), ("nproc", nproc), ("nnodes", nnodes)):
        if not whole(v) or v < 1:
            raise ConfigError(f"{name} {v!r}: give a whole number >= 1 (e.g. {name}=64)")
    batch_size, nproc, nnodes = int(batch_size), int(nproc), int(nnodes)
    if not isinstance(what_if, Mapping | None):
        raise ConfigError(f"what_if {what_if!r}: give a mapping such as "
                          "{'precision': 'bf16'} or {'batch_size': '2x'}")
    what_if = dict(what_if or {})
    if not isinstance(db, (str, os.PathLike)) and not (
            isinstance(db, Iterable) and all(isinstance(x, (str, os.PathLike)) for x in db)):
        raise ConfigError(f"db {db!r}: give a results file, a folder of them, or a list of "
                          "either")
    net = network_for(network, nnodes)
    world = nproc * nnodes
    rq.check_divisible(batch_size, world)
    device, gpu = rq.gpu_of(records_of(db), device)
    recs = gpu_records(records_of(db), gpu)
    layout = selectors["layout"]
    given = {"framework": framework, "mode": mode, "precision": precision,
             "device": rq.device_for(recs, device), "data": selectors["data"],
             "layout": layout.lower() if layout else None,
             **{k: selectors[k] for k in ("loader_workers", "threads", "grad_accum",
                                          "compile_mode")}}
    rq.check_names(recs, model, given)
    base, note = rq.resolve(recs, model, given)
    target, gbatch, host_ns = rq.apply_what_if(what_if, base, int(batch_size))
    target, implied = rq.implied_mode(what_if, base, target)
    if what_if and target == base and gbatch == batch_size and host_ns is None:
        implied = ("--what-if " + ", ".join(f"{k}={v}" for k, v in what_if.items())
                   + f" changes nothing: {base.label()} at batch {batch_size} is the base "
                   "itself, predicted as without --what-if")
    if target != base:
        rq.check_target(recs, target, "--what-if " + ", ".join(
            f"{k}={v}" for k, v in what_if.items()))
    rq.check_divisible(gbatch, world)
    b = gbatch // world
    rq.check_scale_out(recs, target, world, nnodes)
    _, no_fit = memory.check([p for p in recs.points if target.matches(p)], b)
    if no_fit:
        raise ConfigError(f"{target.label()}: {no_fit}")
    withheld = tuple(p for p in recs.points if Config.of(p) == target
                     and (p.world_size, p.nnodes, p.per_device_batch) == (world, nnodes, b)
                     and not p.variant)
    stored = target != base and stored_target(recs, target, b)
    frm = target if stored else base  # a stored target is predicted as without --what-if
    return Request(base, target, gbatch, b, world, nnodes, net, host_ns,
                   gbatch != batch_size and target == base, withheld, note, implied,
                   whatif_changes(frm, target, gbatch != batch_size and not stored, host_ns),
                   gpu, stored)


def stored_target(recs: Records, target: Config, batch: int) -> bool:
    """Whether ``target`` has a stored one-device series point at a per-device batch other
    than ``batch``: a what-if to it is then the prediction of ``target`` itself, from its own
    series with its points at ``batch`` withheld (:func:`_one_device`), as without
    ``--what-if``. Chosen on the development rows of the frozen split: of the 184
    single-change what-if back-test pairs (``what-if fp32->bf16``, ``what-if eager->graph``),
    160 have the target stored at another batch; on those the target's own series gives 4.81%
    median error, the what-if from the base 13.84%."""
    return any(target.matches(p) and not p.instrumented and not p.variant
               and p.per_device_batch != batch for p in recs.points)


@dataclass
class Draft:
    """A prediction being composed: the one-device parts (``one``), the step so far (s), the
    back-test category that judges it (its path), the stored worker ladder its input is
    estimated from (``rungs``: empty unless the configuration's loader workers are given and
    a ladder is stored), and the provenance and assumptions each step adds."""

    one: pm.OneDevice
    path: str
    provenance: dict[str, str]
    assumptions: list[str]
    step_s: float = 0.0
    exposed_s: float = 0.0
    dp_parts_s: tuple[float, float] | None = None
    input_s: float = 0.0
    rungs: list = field(default_factory=list)
    explain: dict[str, Any] = field(default_factory=dict)


def _one_device(recs: Records, cal: Calibration, req: Request) -> Draft:
    """The one-device host and device times (:mod:`dlperf.perfmodel.model`): a what-if from
    the base's series, else the configuration's own series, else the group's roofline
    (analytic); the path is the back-test category of that way.

    Raises:
        ConfigError: no way works (the reason, and how to give a FLOP count where that was
            it).
    """
    base, target, b = req.base, req.target, req.batch
    try:
        if req.from_base:
            one = _first(lambda x: pm.what_if(cal, base, target, b, x), req.sources)
            path = whatif_category(base, target)
        elif cal.series(target):
            one = _first(lambda x: pm.from_series(cal, target, b, x),
                         [_series_file(cal, req), None])
            path = ic.series_category(one.fit.batch_sizes if one.fit else (), b)
            one.provenance |= _stored_target_words(req)
        else:
            one, path = pm.analytic(cal, target, b), "leave-one-model-out"
    except (LookupError, ValueError) as e:
        side = f" (what-if from {base.label()})" if req.from_base else ""
        raise ConfigError(f"{target.label()}{side}: {e}{_withheld_words(req, e, cal)}"
                          f"{_how_to_give_flops(recs, target, e)}"
                          + "".join(f" ({n})" for n in recs.damaged_notes())) from None
    path = "what-if B->2B" if req.batch_what_if else path
    return Draft(one, path, dict(one.provenance), list(one.assumptions))


def _stored_target_words(req: Request) -> dict[str, str]:
    """The provenance line of a what-if whose target is stored (:func:`stored_target`): that
    the target's own series answered it; none for any other prediction."""
    return {"what-if": f"{req.target.label()} is stored at other batches: predicted from its "
                       f"own series, as without --what-if (not from {req.base.label()}'s "
                       "with ratios)"} if req.target_stored else {}


def _withheld_words(req: Request, e: Exception, cal: Calibration) -> str:
    """Where a series fit failed for want of batch sizes (:func:`onedevice.fit_series`'s
    ``ValueError``), or no series was left to fit (the analytic way refused), and the point
    predicted is stored: that its stored measurements are withheld from the fit (their
    medians), why, and what would allow a prediction."""
    short = isinstance(e, ValueError) and "one batch size" in str(e)
    if not req.withheld or not (short or (not req.from_base and not cal.series(req.target))):
        return ""
    meds = "; ".join(f"{p.step_time_s * 1e3:.3f} ms, {p.source}:{p.result_id}"
                     for p in req.withheld)
    return (f". The stored measurement at b={req.batch} (median {meds}) is withheld from "
            "its own fit: a prediction of a stored point is made without it, to be judged "
            "against it, which leaves the series too few batch sizes. To predict it, store "
            "another batch size of this configuration (dlperf run ... -b N, or dlperf sweep); "
            "the measurement itself is in dlperf results / dlperf report")


def _series_file(cal: Calibration, req: Request) -> str:
    """The results file whose series a prediction from the configuration's own series fits:
    the one with the most batch sizes once the point's stored measurements are withheld
    (:meth:`Calibration.series`); among those tied, the last loaded that holds a stored
    measurement of the point on one device (its host session, and the measurement printed
    beside the prediction), else the last loaded.

    Chosen on the development rows of the frozen split (``benchmarks/series_choice.py``):
    of 283 stored one-device measurements whose configuration is stored in 2+ files, 66 are
    fitted from another file by this rule than by the point's own file's series; on those
    the median error is 3.80% against 4.20% (mean 8.44% against 9.19%), closer on 40 of 66.
    """
    ser = cal.series(req.target)
    mine = set(req.withheld_files)
    # the first (cal.series' order: last loaded first) of the most batch sizes, holding the
    # point where one does
    return min(ser, key=lambda s: (-len({p.batch_size for p in s}),
                                   s[0].source not in mine))[0].source


def _input_compute(d: Draft, recs: Records, cal: Calibration, req: Request) -> None:
    """Real data with a stored worker ladder: the step's compute part ``t_c`` is the
    synthetic-data step of the configuration (:func:`inputpipe.compute_part`), and the path
    the input pipeline's back-test category."""
    rungs, notes = ip.ladder_for(recs.points, d.one.cfg, list(req.withheld))
    if rungs and d.one.cfg.loader_workers is not None:
        d.rungs = rungs
        d.one, cnotes = ip.compute_part(cal, d.one)
        # the lines of the step that made t_c, not of the real-data fit it replaced
        d.provenance, d.assumptions = dict(d.one.provenance), list(d.one.assumptions)
        notes, d.path = [*notes, *cnotes], ip.INPUT_CATEGORY
    d.assumptions += notes


def _host_speed(d: Draft, cal: Calibration, req: Request) -> None:
    """A host-speed what-if: ``H`` scaled by the ratio of the given probe to the calibration
    points' median probe (:func:`equations.host_scaled_s`)."""
    if req.host_ns is None:
        return
    probes = [min(x for x in p.host_speed_ns if x) for p in cal.points
              if d.one.cfg.matches(p) and any(p.host_speed_ns)]
    if not probes:
        d.assumptions.append("host speed given but not recorded with the calibration points: "
                             "host time unscaled")
        return
    ref = float(np.median(probes))
    d.explain["host speed"] = {"H_before_s": d.one.host_s, "probe_ns": req.host_ns,
                               "calibration_probe_ns": ref}
    d.one.host_s = eq.host_scaled_s(d.one.host_s, req.host_ns, ref)
    d.provenance["host speed"] = (f"given: probe {req.host_ns:g} ns against the calibration "
                                  f"points' median {ref:.3g} ns: host x {req.host_ns / ref:.3g}")


def _data_parallel(d: Draft, recs: Records, cal: Calibration, req: Request) -> None:
    """N devices: the data-parallel step over the one-device parts (:func:`model.
    data_parallel`: DDP's fitted overhead, the exposed all-reduce of WFBP over the recorded or
    default buckets); the path is :data:`NPROC_CATEGORY`."""
    if req.world > 1:
        fn, desc, measured, algorithm = pm.comm_time_fn(cal, req.world, req.nnodes,
                                                        req.network)
        ddp, fitted = _ddp_overhead(recs, list(req.withheld))
        if not fitted:
            raise ConfigError(_no_ddp_pairs(recs, req))
        prof = dp.recorded_profile(recs.points, d.one.cfg, req.world, d.one.batch,
                                   req.withheld)
        d.step_s, d.exposed_s, dprov = pm.data_parallel(d.one, ddp, fn, desc, measured,
                                                        profile=prof)
        d.dp_parts_s = eq.dp_parts_s(d.one.host_s, d.one.device_s, d.exposed_s, ddp.rho,
                                     ddp.kappa)
        d.explain["data parallel"] = {
            "world": req.world, "H_s": d.one.host_s, "D_s": d.one.device_s, "rho": ddp.rho,
            "kappa": ddp.kappa, "X_s": d.exposed_s, "pairs": len(ddp.pairs),
            "params": d.one.params, "comm": desc,
            "backward_s": dp.BACKWARD_SHARE * d.one.device_s,
            "buckets": _bucket_schedule(d.one, fn, algorithm, prof)}
        d.provenance.update(dprov)
        d.assumptions += dp.assumptions(prof)
        d.one.how += " + data parallel"
        d.path = NPROC_CATEGORY


def _no_ddp_pairs(recs: Records, req: Request) -> str:
    """Why an N-device prediction is refused when no stored N-device point of ``recs`` (its
    own measurements withheld) pairs with a one-device series of its configuration
    (:func:`no_ddp_pairs`)."""
    own = any(p.world_size > 1 for p in req.withheld)
    return no_ddp_pairs(recs, req.target.label(), req.world, req.target.device, own)


def no_ddp_pairs(recs: Records, label: str, world: int, device: str, own: bool = False
                 ) -> str:
    """The refusal of a data-parallel prediction of ``label`` on ``world`` devices when no
    stored N-device point of ``recs`` pairs with a one-device series: DDP's own overhead
    (``rho``, ``kappa``) is fitted on those pairs only, and taking it as 0 predicts a
    near-perfect scaling no stored run supports (resnet50 torch eager bf16 b=192 on 2 H200s:
    24.4 ms with it 0 against 28.9 ms fitted and 30.7-31.1 ms stored). Names the results
    files of the residual tables that hold data-parallel back-test rows and are not loaded
    (:func:`intervalchoice.borrowable`), where there are such, and the run that measures
    one (``dlperf run --device DEVICE --nproc 2``). ``own``: the point's own N-device
    measurements are withheld. Used by the step-level model and by ``predict --gpu --nproc``
    (:func:`dlperf.perfmodel.retarget.data_parallel`)."""
    mine = {os.path.realpath(s) for s in recs.sources}
    extra = sorted({fc.relative_if_under_cwd(os.path.dirname(f)) for e in ic.borrowable(recs)
                    if e[2].get(NPROC_CATEGORY) for f in e[1] - mine})
    return (f"{label} on {world} devices: no stored data-parallel run of "
            f"these files{' other than the point itself (withheld)' if own else ''} pairs "
            "with a one-device series of its configuration, so DDP's own overhead (rho, kappa) "
            "is not measured and the step's scaling is not known; "
            + (f"add the files that hold such runs ({' '.join('--db ' + x for x in extra)}) "
               "or " if extra else "")
            + f"measure one (dlperf run --device {device} --nproc 2 ... and the "
            "same configuration on one device), or predict one device")


def _bucket_schedule(one: pm.OneDevice, fn: Any, algorithm: Any, prof: Any
                     ) -> list[list[Any]]:
    """``--explain``'s WFBP schedule: per bucket ``[bytes, ready s, c(M) s, start s, end s,
    algorithm]`` (:func:`equations.wfbp_schedule` over :func:`dataparallel.buckets_of`, the
    buckets the exposed all-reduce was computed over)."""
    bks = dp.buckets_of(one.params, one.device_s, profile=prof)
    sched = eq.wfbp_schedule(bks, fn)
    return [[b.size_bytes, b.ready_s, e - s, s, e, algorithm(b.size_bytes)]
            for b, (s, e) in zip(bks, sched, strict=True)]


def _input(d: Draft, req: Request) -> None:
    """The input pipeline's time the step does not hide (:func:`inputpipe.estimate`); none for
    synthetic data on the device."""
    cfg = d.one.cfg
    if cfg.data == "synthetic":
        d.assumptions.append("synthetic data on the device: no input time")
        return
    est = ip.estimate(d.rungs, cfg.loader_workers or 0, d.one.batch, d.step_s)
    d.input_s, d.step_s = est.input_s, est.step_s
    d.provenance["input"] = est.provenance
    d.assumptions += est.assumptions
    d.one.calibrated_on = [*d.one.calibrated_on, *est.calibrated_on]


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


_SHARED: dict[int, Shared] = {}
_DDP: dict[tuple, dp.DDPOverhead] = {}


def shared_fits(recs: Records) -> Shared:
    """The fits every prediction on ``recs`` shares (:class:`~dlperf.perfmodel.calibrate.
    Shared`), made once per process: its roofline group fits read, when it is made, from those
    stored with the files' residual table (:func:`fitcache.read_table_fits`: committed with
    the H200 results) and from the user's store (:func:`fitcache.read_fits`). Each group fit
    leaves out the model it serves, and a prediction withholds only its own model's points, so
    they are valid for every prediction. The fit solutions stored in the same two places
    (:func:`fitcache.read_table_solutions`, :func:`fitcache.read_solutions`) are taken too
    (:func:`lsq.remember`): a problem met there is not solved again."""
    def make() -> Shared:
        shared = Shared(recs)
        shared.load({**fc.read_fits(fc.fits_file(recs)), **fc.read_table_fits(recs.sources)})
        lsq.remember(fc.read_table_solutions(recs.sources))
        lsq.remember(fc.read_solutions(fc.solutions_file(recs)))
        return shared
    return once(_SHARED, id(recs), make)


def _store_fits(recs: Records) -> None:
    """Write the shared group fits, and the fit solutions made in this process, to the user's
    stores when there are new ones."""
    shared = _SHARED.get(id(recs))
    if shared is not None and shared.unstored():
        fc.write_fits(fc.fits_file(recs), shared.groups)
        shared.saved()
    solved = lsq.take_solved()
    if solved:
        f = fc.solutions_file(recs)
        fc.write_solutions(f, {**fc.read_solutions(f), **solved})


def ddp_overhead(recs: Records) -> dp.DDPOverhead:
    """DDP's own overhead ``rho``, ``kappa`` fitted on every stored N-device / 1-device pair of
    ``recs`` (:func:`dlperf.perfmodel.dataparallel.fit_ddp_overhead`; both 0 and no pairs
    without one), as an N-device prediction of the step-level model takes them; made once per
    process and records."""
    return _ddp_overhead(recs, [])[0]


def _ddp_overhead(recs: Records, withheld: list) -> tuple[dp.DDPOverhead, bool]:
    def make() -> dp.DDPOverhead:
        dp_cal = Calibration(recs, lambda p: p in withheld,
                             share_efficiencies=shared_fits(recs))
        pairs = dp.pairs_of(dp_cal, dp.comm_for_records(recs))
        return dp.fit_ddp_overhead(pairs) if pairs else dp.DDPOverhead(0.0, 0.0, (), 0.0)
    ddp = once(_DDP, (id(recs), tuple(sorted((p.source, p.result_id) for p in withheld))),
               make)
    return ddp, bool(ddp.pairs)


def _measured(d: Draft, req: Request
              ) -> tuple[dict[str, float], str | None, float | None]:
    """The stored measurements of the point predicted (``{file:id: s}``; none for a
    host-speed what-if, measured at another host's speed) and the one it is judged against
    (``file:id`` and s; None, None without one): the last stored in the file of the fitted
    series, else the last loaded. The mean
    iteration where the input model predicted one (:mod:`inputpipe`: the median hides the
    stalls), else the median."""
    if req.host_ns is not None:
        return {}, None, None
    real = d.one.cfg.data != "synthetic" and d.path == ip.INPUT_CATEGORY
    stored = {point_id(p): (p.step_time_mean_s or p.step_time_s) if real else p.step_time_s
              for p in req.withheld}
    # the fit names its points by the path as given, point_id by the resolved path: compare
    # resolved paths, so a relative and an absolute --db pick the same measurement
    fit = d.one.fit  # a fit names at least one point (onedevice.fit_series)
    src = os.path.realpath(fit.result_ids[0].rsplit(":", 1)[0]) if fit else None
    order = {k: i for i, k in enumerate(stored)}
    pick, meas = max(stored.items(), key=lambda kv: (kv[0].rsplit(":", 1)[0] == src,
                                                     order[kv[0]]), default=(None, None))
    return stored, pick, meas


def _roofline_terms(cal: Calibration, cfg: Config, fit: od.SeriesFit | None = None
                    ) -> dict[str, Any] | None:
    """The roofline terms of ``cfg`` the series prior (and an analytic ``D``) is made of, for
    ``--explain``: ``f1`` (FLOPs/sample), ``y0`` (bytes), ``y1`` (bytes/sample) and where
    ``Y`` came from (:func:`roofline.work_of`), ``P`` (FLOP/s), ``W`` (bytes/s) and their
    source, ``e_F``, ``e_Y``, ``t_k`` (s/kernel), ``K`` (kernels/step or None), and the
    per-sample and fixed device times they give (``d1``, ``d0``: s/sample, s); where ``fit``
    (``cfg``'s series fit) has at most ``FIXED_PRIOR_MAX_BATCHES`` batch sizes and the model's
    other groups move its ``d1`` prior (:meth:`Calibration.sibling_scale`), ``d1_scale`` and
    ``d1_scale_source`` too. None where the group has no roofline (a CPU, no FLOP count).
    Cached reads: fits nothing new."""
    try:
        eff, k = cal.roofline(cfg)
        if eff is None:
            return None
        work = cal.work(cfg.model, cfg.framework, cfg.precision, cfg.device)
        ceil = cal.ceiling(cfg.framework, cfg.precision, cal.device_name(cfg), cfg.model)
    except (LookupError, ValueError):
        return None
    p, w = ceil.flops_per_s, ceil.bandwidth_bytes_per_s
    moved: dict[str, Any] = {}
    if (fit is not None and len(set(fit.batch_sizes)) <= od.FIXED_PRIOR_MAX_BATCHES
            and (scale := cal.sibling_scale(cfg))):
        moved = {"d1_scale": scale[0], "d1_scale_source": scale[1]}
    return {**moved, "config": cfg.label(), "f1": work.flops_per_sample, "y0": work.bytes_fixed,
            "y1": work.bytes_per_sample, "bytes_source": work.source, "P": p, "W": w,
            "ceiling_source": ceil.source, "e_F": eff.e_flops, "e_Y": eff.e_bytes,
            "t_k": eff.kernel_s, "K": k,
            "d1_s_per_sample": work.flops_per_sample / (eff.e_flops * p)
            + work.bytes_per_sample / (eff.e_bytes * w),
            "d0_s": work.bytes_fixed / (eff.e_bytes * w) + (k or 0.0) * eff.kernel_s}


def _prediction(d: Draft, recs: Records, cal: Calibration, req: Request, t1: float,
                level: float) -> Prediction:
    """The :class:`Prediction` of a composed draft: its interval, the stored measurement, the
    warnings and what the model could not judge."""
    one, t = d.one, d.step_s
    gpu = cal.device_name(one.cfg) or _cpu_name(recs, one.cfg)
    rl_words = _roofline_terms(cal, req.base, one.fit)  # a what-if's base, else one.cfg
    if rl_words:
        d.explain["roofline"] = rl_words
    interval, group, note = ic.interval_of(d, recs, req, level, gpu)
    warnings = _warnings(recs, req, one)
    flat = _flat_series(one)
    if flat:
        warnings.append(flat[0])
        d.assumptions.append("no interval: " + flat[1])
        interval, group, note = (float("nan"), float("nan")), None, flat[1]
    stored, pick, meas = _measured(d, req)
    scaling = 1.0
    if req.world > 1:  # scaling.py reads stored results' views: loaded for N devices only
        from dlperf.perfmodel.scaling import efficiency

        scaling = efficiency(t1, t, one.batch, req.global_batch, req.world)
    return Prediction(
        predicted_step_time_s=t, interval_s=interval, interval_level=level,
        samples_per_s=req.global_batch / t, scaling_efficiency=scaling,
        parts=_parts(d),
        bound="input" if d.input_s > t - d.input_s else one.bound, how=one.how,
        calibrated_on=sorted(set(one.calibrated_on)),
        provenance=d.provenance, assumptions=d.assumptions,
        config={**asdict(one.cfg), "global_batch": req.global_batch,
                "per_device_batch": one.batch, "nproc": req.world // req.nnodes,
                "nnodes": req.nnodes},
        measured_step_time_s=meas, measured_point=pick,
        measured_points=stored, validation_category=d.path, warnings=warnings,
        interval_note=note, interval_group=group,
        gpu=gpu,
        host_session=_session(recs, one), explanation=_explanation(d, t1))


#: A fitted per-sample device time ``d1`` at its bound: ``d1`` times the largest measured batch
#: under this share of the fixed device time ``d0`` (the fit's lower bound on ``d1`` is
#: ``exp(-60)`` s; a series whose steps do not grow with the batch lands there).
FLAT_SLOPE_SHARE = 1e-6


def _flat_series(one: pm.OneDevice) -> tuple[str, str] | None:
    """``(warning, why no interval)`` for a prediction above the measured batches of a series
    whose fitted ``d1`` sits at its bound (:data:`FLAT_SLOPE_SHARE`: the series does not grow
    with the batch, so the prediction is its floor ``max(H, d0)`` at any batch, whatever the
    batch); None otherwise, and for a batch within or below the series."""
    fit = one.fit
    if fit is None or not fit.batch_sizes or one.batch <= max(fit.batch_sizes):
        return None
    hi = max(fit.batch_sizes)
    if fit.device_per_sample_s * hi > FLAT_SLOPE_SHARE * fit.device_fixed_s:
        return None
    floor = max(fit.host_s, fit.device_fixed_s)
    warn = (f"the measured series ({', '.join(f'b={b}' for b in sorted(set(fit.batch_sizes)))}) "
            f"shows no growth with batch: the fitted per-sample device time is 0 (d1 at its "
            f"bound), so the prediction at b={one.batch} is the series' floor, "
            f"{floor * 1e3:.3f} ms whatever the batch, not a time that grows with it; the "
            f"throughput it implies is not to be trusted. Measure b={one.batch} (or a batch "
            f"above b={hi}) to know it")
    why = ("dropped: the series shows no growth with batch (d1 fitted at its bound) and the "
           f"batch is beyond the measured ones (up to b={hi}); the back-test residuals, of "
           "series whose device time grows with the batch, do not cover this case")
    return warn, why


def _explanation(d: Draft, t1: float) -> dict[str, Any]:
    """:attr:`Prediction.explanation` of a composed draft (times in s, ``d1`` in s/sample):
    ``series``: the fitted series' file, batch sizes, ``H``, ``d0``, ``d1``, the prior's
    words and every row of its fit (:class:`onedevice.FitRow`: the points' median steps with
    their log-widths first); ``one device``: its ``H``, ``D`` and step
    (``equations.step_s``) at the batch; ``what-if`` (:attr:`model.OneDevice.ratios`);
    ``host speed``; ``data parallel``: ``rho``, ``kappa``, ``X`` and the one device's ``H``,
    ``D``; ``input_s``; ``interval``. Reads what the prediction computed: fits nothing."""
    one, fit = d.one, d.one.fit
    out: dict[str, Any] = {"path": d.path}
    if fit is not None:
        out["series"] = {
            "file": fit.result_ids[0].rsplit(":", 1)[0],  # a fit names at least one point
            "batch_sizes": list(fit.batch_sizes),
            "H_s": fit.host_s, "d0_s": fit.device_fixed_s,
            "d1_s_per_sample": fit.device_per_sample_s, "prior": fit.prior,
            "rms_log": fit.rms_log,
            "rows": [[r.term, r.target, r.sigma, r.side, r.source] for r in fit.rows]}
    if one.ratios:
        out["what-if"] = one.ratios
    out["one device"] = {"batch": one.batch, "H_s": one.host_s, "D_s": one.device_s,
                         "step_s": t1, "bound": one.bound}
    out.update(d.explain)
    if d.input_s:
        out["input_s"] = d.input_s
    out["step_s"] = d.step_s
    return out


def _parts(d: Draft) -> dict[str, Any]:
    """:attr:`Prediction.parts` of a composed draft: the step's ``H`` and ``D`` (on N devices
    the data-parallel ones, the one device's beside them)."""
    one = d.one
    host, dev = d.dp_parts_s or (one.host_s, one.device_s)
    parts = {"host_s": host, "device_s": dev, "device_by_class_s": one.device_classes_s or {},
             "exposed_comm_s": d.exposed_s, "input_s": d.input_s}
    if d.dp_parts_s:
        parts |= {"one_device_host_s": one.host_s, "one_device_device_s": one.device_s}
    return parts


def _warnings(recs: Records, req: Request, one: pm.OneDevice) -> list[str]:
    """The prediction's warnings: a batch outside the measured series, which of several stored
    configurations was picked, the analytic hint, damaged rows. Beside a what-if each starts
    with the side it concerns (``what-if base: ``, ``what-if target: `` or ``what-if base and
    target: ``), since a warning naming the base's configuration would otherwise read as if
    it were about the configuration predicted."""
    same = req.target == req.base
    if req.from_base:  # the base's series, fitted for the target
        series, fitted = "base", req.base
    else:
        series = "target" if not same or req.batch_what_if else "base and target"
        fitted = req.target
    sided = [(series, w) for w in rq.extrapolation(recs, fitted, req.batch)]
    far = ic.beyond_validated(one, req.batch)  # None on N devices: not a series ("+ data parallel")
    if far:
        sided.append((series, f"batch {req.batch} per device is {far[1]:.3g}x from the nearest "
                              f"fitted batch, {far[3]} (the series of one results file the "
                              f"prediction is fitted to), beyond the {far[2]:g}x the "
                              f"'{far[0]}' back-test went: not validated, its interval is "
                              "borrowed at a wider level"))
    sided += [(side, w) for side, w in (("base", req.note), ("target", req.target_note)) if w]
    sided += [("base and target", w) for w in _analytic_hint(recs, req, one)]
    sided += [("base and target", w) for w in recs.damaged_notes()]
    if same and not req.batch_what_if and req.host_ns is None:  # no what-if: no sides
        return [w for _, w in sided]
    return [f"what-if {side}: {w}" for side, w in sided]


def _analytic_hint(recs: Records, req: Request, one: pm.OneDevice) -> list[str]:
    """An analytic prediction of a model stored in another configuration: the warning that a
    what-if from it would use the model's own measurements. A configuration stored only in
    instrumented runs (traced, ``--breakdown``: :attr:`~dlperf.perfmodel.records.Point.
    instrumented`), which no series is fitted to, is said to be so, not "not stored"; such a
    configuration is not offered as the what-if's base."""
    target = req.target
    if one.how != "analytic" or target != req.base:
        return []
    own = sorted({Config.of(p) for p in recs.points if p.model == target.model
                  and p.world_size == 1 and p.framework == target.framework
                  and p.device == target.device and Config.of(p) != target
                  and not p.instrumented},
                 key=lambda c: c.label())
    if not own:
        return []
    o = own[0]
    traced = sum(target.matches(p) and p.instrumented for p in recs.points)
    return [f"analytic: {target.label()} is "
            + (f"stored only at batch {req.batch}, which a prediction of it withholds"
               if req.withheld else f"stored {instrumented_only(traced)} (the instrumentation is in "
               "their steps)" if traced else "not stored") + f", but {o.label()} is; a what-if "
            f"from it uses {target.model}'s own measurements (e.g. --precision {o.precision} "
            f"--mode {o.mode}" + "".join(f" --what-if {k}={getattr(target, k)}"
                                         for k in ("precision", "mode")
                                         if getattr(target, k) != getattr(o, k)) + ")"]


def _cpu_name(recs: Records, cfg: Config) -> str | None:
    """A CPU device's model (``env.cpu_model`` of the stored points) for a ``cpu`` prediction;
    None where none was recorded."""
    if cfg.device != "cpu":
        return None
    return max(rq.calibrated_devices(recs).get("cpu", []), default=None)  # the last sorted


def _session(recs: Records, one: pm.OneDevice) -> str:
    """Where the host time came from: the session of the series fitted, or how it was had."""
    # the series' own points: the first of its result ids (the rest are its D(b) anchors)
    ids = set(one.fit.result_ids[:len(one.fit.batch_sizes)]) if one.fit else set()
    sess = sorted({p.session for p in recs.points if f"{p.source}:{p.result_id}" in ids
                   and p.session})
    if sess:
        return ", ".join(sess)
    return "not measured for this configuration: " + one.provenance.get(
        "host time H", "estimated from other stored configurations")
