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
   this one was made, its *path* (:func:`_interval_of`), and the stored measurement of the
   point, withheld from every fit (:func:`_measured`).

The interval is a Mondrian conformal interval (:func:`dlperf.perfmodel.intervals.mondrian`)
from the path's residuals of the prediction's own bound (host or device) when there are
enough, else the category's. ``predict`` never runs the back-test: it reads the residual table
that ``dlperf predict --validate`` wrote beside the results files
(:func:`dlperf.perfmodel.fitcache.read_table`, keyed by the model's source and the files'
content), or, in the same process, the residuals a validation of the same files left in
memory. Without either a prediction has no interval and says how to get one. The roofline
group fits are stored too (:func:`dlperf.perfmodel.fitcache.fits_file`, same key), so a new
process reads them back instead of fitting each group again.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dlperf.errors import ConfigError
from dlperf.perfmodel import comm, lsq, memory, special
from dlperf.perfmodel import dataparallel as dp
from dlperf.perfmodel import equations as eq
from dlperf.perfmodel import fitcache as fc
from dlperf.perfmodel import inputpipe as ip
from dlperf.perfmodel import intervals as iv
from dlperf.perfmodel import model as pm
from dlperf.perfmodel import onedevice as od
from dlperf.perfmodel import request as rq
from dlperf.perfmodel import roofline as rl
from dlperf.perfmodel.calibrate import Calibration, Config, Shared, instrumented_only
from dlperf.perfmodel.comm import network_for, whole
from dlperf.perfmodel.memo import once
from dlperf.perfmodel.records import Point, Records, load, point_id
from dlperf.perfmodel.whatifs import (
    FRAMEWORK_WHATIFS,
    JUDGED_CHANGES,
    JUDGED_STEPS,
    steps_of,
    whatif_category,
    whatif_changes,
)

#: The back-test category of an N-device prediction: every stored N-device point predicted
#: through :func:`predict` itself (:mod:`dlperf.validation`).
NPROC_CATEGORY = "N-GPU via predict --nproc"

_RECORDS: dict[tuple, Records] = {}
#: This process's residual tables: (model key, data digest) -> ``(category -> ``(residual,
#: bound, point)``, "")``, read from the table beside the data or installed by a validation
#: (:func:`install_residuals`); ``(None, why)`` where the files have none (why: for the
#: prediction's note).
_TABLES: dict[tuple[str, str], tuple[dict[str, list[iv.KeyedResidual]] | None, str]] = {}


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
            files have no residual table of their own (:func:`_borrowed_interval`); None
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


def _interval(recs: Records, category: str, level: float, bound: str | None,
              withheld: Iterable = ()) -> iv.Interval | None:
    """The Mondrian conformal interval of a prediction of ``bound`` made as ``category``,
    without the residuals of the ``withheld`` points (the stored measurements of the point
    predicted: :func:`intervals.without_points`)."""
    ids = {point_id(p) for p in withheld}
    return iv.mondrian([x for c in iv.calibration_categories(category)
                        for x in bounded_residuals(recs, c, ids)], bound, level, category)


def table_key(recs: Records) -> tuple[str, str]:
    """The residual table's key of ``recs``: the model's source and the files' content."""
    return fc.model_key(), fc.data_digest(recs.sources)


def install_residuals(recs: Records, table: dict[str, list[iv.KeyedResidual]]) -> None:
    """Make ``table`` (category -> ``(residual, bound, point)``: a full validation's,
    :func:`dlperf.validation.residual_table`) this process's residual table of ``recs`` under
    the current model (:func:`table_key`): later predictions on the same files take their
    intervals from it, and the reason recorded for a missing table (:data:`_TABLES`) is
    dropped. Writes nothing to disk (:func:`fitcache.write_table` does)."""
    _TABLES[table_key(recs)] = table, ""


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
    """The category's residuals from this process's table of ``recs`` (:func:`_table`); empty
    when there is none of the current key. Never runs a back-test."""
    return (_table(recs)[0] or {}).get(category, [])


def _table(recs: Records) -> tuple[dict[str, list[iv.KeyedResidual]] | None, str]:
    """This process's residual table of ``recs`` under the current model and ``""``, read
    once from the one beside the data (:func:`fitcache.read_table`) unless a validation
    installed one; None and why there is none."""
    return once(_TABLES, table_key(recs), lambda: fc.read_table(recs.sources))


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


@dataclass(frozen=True)
class Request:
    """A prediction's arguments, checked and resolved against the stored results
    (:func:`_request`): the stored configuration it starts from (``base``), the one predicted
    (``target``, another for a what-if), the global and per-device batch, the devices, the
    network, another host's speed probe (ns) and the stored measurements of the point itself,
    withheld from every fit (``withheld``: one device, the configuration at this batch; N
    devices, its N-device measurements)."""

    base: Config
    target: Config
    global_batch: int
    batch: int
    world: int
    nnodes: int
    network: comm.Network | None
    host_ns: float | None
    batch_what_if: bool
    withheld: tuple[Point, ...]
    note: str | None
    target_note: str | None = None  # a mode the what-if implied (rq.implied_mode)
    changes: tuple[str, ...] = ()  # what the what-if changes (whatif_changes)
    gpu: str | None = None  # the GPU model selected among several loaded (rq.gpu_of)
    target_stored: bool = False  # a what-if's target stored at another batch (stored_target)

    @property
    def from_base(self) -> bool:
        """A what-if predicted from its base's series (:func:`model.what_if`): the target
        differs from the base and is not stored at another batch on one device
        (:func:`stored_target`); every stored point of the target is withheld."""
        return self.target != self.base and not self.target_stored

    @property
    def withheld_files(self) -> list[str]:
        """The results files of the stored one-device measurements of the point, in load
        order (none on N devices, whose withheld points are N-device ones)."""
        return [p.source for p in self.withheld] if self.world == 1 else []

    @property
    def sources(self) -> list[str | None]:
        """Where a what-if's base series is looked for: the results file of the last loaded
        stored measurement of the target (its host session: the what-if back-test pairs two
        configurations within one file), then the best-measured one
        (:meth:`Calibration.fit`)."""
        return [*self.withheld_files[-1:], None]


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
    _divisible(batch_size, world)
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
    _divisible(gbatch, world)
    b = gbatch // world
    _check_scale_out(recs, target, world, nnodes)
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


def _divisible(global_batch: int, world: int) -> None:
    """Refuse a global batch that ``world`` devices cannot split evenly, naming the nearest
    multiples of ``world``."""
    if global_batch % world:
        lo = global_batch // world * world
        near = " or ".join(str(b) for b in (lo, lo + world) if b > 0)
        raise ConfigError(f"global batch {global_batch} is not divisible by {world} devices "
                          "(--batch-size/-b is the global batch, split over all devices): "
                          f"give a multiple of {world}, such as {near}")


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
            path = series_category(one.fit.batch_sizes if one.fit else (), b)
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
    own measurements withheld) pairs with a one-device series of its configuration: DDP's
    own overhead (``rho``, ``kappa``) is fitted on those pairs only, and taking it as 0
    predicts a near-perfect scaling no stored run supports (resnet50 torch eager bf16 b=192 on
    2 H200s: 24.4 ms with it 0 against 28.9 ms fitted and 30.7-31.1 ms stored). Names the
    results files of the residual tables that hold data-parallel back-test rows and are not
    loaded (:func:`_borrowable`), where there are such."""
    mine = {os.path.realpath(s) for s in recs.sources}
    extra = sorted({fc.relative_if_under_cwd(os.path.dirname(f)) for e in _borrowable(recs)
                    if e[2].get(NPROC_CATEGORY) for f in e[1] - mine})
    own = any(p.world_size > 1 for p in req.withheld)
    return (f"{req.target.label()} on {req.world} devices: no stored data-parallel run of "
            f"these files{' other than the point itself (withheld)' if own else ''} pairs "
            "with a one-device series of its configuration, so DDP's own overhead (rho, kappa) "
            "is not measured and the step's scaling is not known; "
            + (f"add the files that hold such runs ({' '.join('--db ' + x for x in extra)}) "
               "or " if extra else "")
            + f"measure one (dlperf run --device {req.target.device} --nproc 2 ... and the "
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


#: The back-test category (path) of a prediction from a series, by ``(batch sizes in the
#: series: 1, 2, or 3 for more; the batch above (1), below (-1) or within (0) them; at least
#: twice the largest (1), at most half the smallest (-1), or neither (0))``; any other key:
#: ``held-out batch`` (:func:`series_category`).
SERIES_PATHS = {
    (1, 1, 0): "one-point series up", (1, 1, 1): "one-point series up",
    (1, -1, 0): "one-point series down", (1, -1, -1): "one-point series down",
    (2, 1, 0): "two-point series up", (2, 1, 1): "two-point series up",
    (2, -1, 0): "two-point series down", (2, -1, -1): "two-point series down",
    (3, 1, 1): "extrapolate 2x", (3, -1, -1): "extrapolate down 2x",
}


def series_category(batches: Iterable[int], batch: int) -> str:
    """The back-test category whose residuals judge a prediction at per-device ``batch`` from a
    series fitted on ``batches`` (:data:`SERIES_PATHS`): a series of one or two batch sizes
    has its own categories, up or down; a longer one is ``extrapolate 2x`` (``extrapolate
    down 2x``) at twice its largest batch or more (half its smallest or less), else
    ``held-out batch``."""
    bs = sorted(set(batches)) or [batch]
    side = (batch > bs[-1]) - (batch < bs[0])
    far = (batch >= 2 * bs[-1]) - (2 * batch <= bs[0])
    return SERIES_PATHS.get((min(len(bs), 3), side, far), "held-out batch")


#: The most GPUs one node holds (``--nproc``): 8 on a DGX/HGX H100 or H200, 16 on the
#: largest boards sold (HGX-2); more devices are more nodes (``--nnodes``, ``--network``).
MAX_GPUS_PER_NODE = 16


#: The largest ratio of a predicted batch to the nearest batch of the series fitted that each
#: series category's back-test holds (:func:`backtest.batch_rows`, :func:`backtest.
#: few_point_rows`), on the development rows of benchmarks/results/h200 + h200x2 (test rows:
#: the same): ``extrapolate 2x`` predicts a series' largest batch from those at most half of it,
#: up to 4x the largest kept; the one- and two-point categories predict a neighbouring stored
#: batch, up to 16x. A prediction further out is not validated (:func:`beyond_validated`).
VALIDATED_RATIO = {"extrapolate 2x": 4.0, "extrapolate down 2x": 4.0,
                   "one-point series up": 16.0, "one-point series down": 16.0,
                   "two-point series up": 16.0, "two-point series down": 16.0}


def beyond_validated(one: pm.OneDevice, batch: int) -> tuple[str, float, float, int] | None:
    """``(category, ratio, the category's validated ratio, the nearest fitted batch)`` where
    ``batch`` (per device) is further from the fitted series' batch sizes than its category's
    back-test went (:data:`VALIDATED_RATIO`): ``ratio`` is the batch over the largest fitted
    batch (above it) or the smallest over the batch (below it), the nearest that batch; None
    otherwise, or without a series."""
    if one.how != "series" or one.fit is None or not one.fit.batch_sizes:
        return None
    bs = one.fit.batch_sizes
    cat = series_category(bs, batch)
    ratio = max(batch / max(bs), min(bs) / batch)
    limit = VALIDATED_RATIO.get(cat)
    near = min(bs, key=lambda x: abs(batch / x - x / batch))
    return (cat, ratio, limit, near) if limit is not None and ratio > limit else None


def _check_scale_out(recs: Records, target: Config, world: int, nnodes: int) -> None:
    """Refuse a data-parallel prediction of a device with no stored data-parallel run: the
    DDP overhead, the all-reduce and the interval all come from such runs (a CPU-only file
    would otherwise get a GPU's NVLink defaults and the 2-GPU interval); and more GPUs on one
    node than a node holds (:data:`MAX_GPUS_PER_NODE`), naming the ``--nnodes`` that gives
    as many."""
    nproc = world // nnodes
    if special.dp_defaults_apply(target.device) and nproc > MAX_GPUS_PER_NODE:
        # 8 GPUs per node (a DGX) where they divide the devices, else the most that do
        per = next(g for g in (8, *range(MAX_GPUS_PER_NODE, 0, -1)) if world % g == 0)
        raise ConfigError(
            f"--nproc {nproc}: one node holds at most {MAX_GPUS_PER_NODE} GPUs (8 on a DGX "
            f"H200); for {world} GPUs give GPUs per node and nodes, e.g.\n  --nproc {per} "
            f"--nnodes {world // per} --network ib_ndr")
    if world == 1 or special.dp_defaults_apply(target.device):
        return
    stored = {p.world_size for p in recs.points if p.device == target.device and p.world_size > 1
              and p.nnodes == 1}
    if nnodes > 1 or not stored:
        raise ConfigError(
            f"{target.label()} on {world} {target.device} devices"
            + (f" over {nnodes} nodes" if nnodes > 1 else "") + ": the model has no "
            f"data-parallel measurement of device {target.device} to calibrate or judge it"
            + (" across nodes" if nnodes > 1 and stored else "") + "; measure one (dlperf run "
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


def _unjudged_steps(d: Draft, req: Request) -> list[tuple[str, str, str]]:
    """The precision and mode changes of ``req``'s what-if (:func:`whatif_changes`) that the
    back-test rows of its path ``d.path`` never make (:data:`JUDGED_STEPS`), sorted."""
    return sorted(steps_of(req.base, req.target, req.changes)
                  - JUDGED_STEPS.get(d.path, frozenset()))


def _judged_words(path: str) -> str:
    """How many changes at once the back-test rows of ``path`` make, in words."""
    return ("one change alone", "two changes at once")[JUDGED_CHANGES.get(path, 1) - 1]


def _not_tested(d: Draft, change: str) -> str:
    return (f"the '{d.path}' back-test: {change} is not back-tested on stored pairs, so its own "
            "error is not known here")


#: The predictions whose own path no back-test judges, in the order they are checked, each
#: ``(found, why)``: ``found(draft, request, the device counts of the stored N-device points)``
#: gives what keeps the prediction off its path's back-test (falsy where nothing does), and
#: ``why(draft, request, counts, what found gave)`` says it (:func:`_not_backtested`):
#: N devices of a count no stored point has (the stored counts' residuals stand in), a batch
#: further from the series than its category's back-test went (:func:`beyond_validated`), a
#: what-if of several changes at once (:func:`whatif_changes`: the category
#: :func:`whatif_category` gives it, which judges one of them, stands in), a host-speed
#: what-if, a framework what-if not in :data:`FRAMEWORK_WHATIFS` (its path's residuals stand
#: in), a what-if changing precision or mode in a direction its path's rows never take
#: (:func:`_unjudged_steps`). Their interval is borrowed at a wider level (:func:`_interval_of`).
NOT_BACKTESTED: tuple[tuple[Callable[[Draft, Request, set[int]], Any],
                            Callable[[Draft, Request, set[int], Any], str]], ...] = (
    (lambda d, req, stored: req.world > 1 and req.world not in stored,
     lambda d, req, stored, _: f"the {sorted(stored)}-device back-test: no stored measurement "
                               f"of {req.world} devices"),
    (lambda d, req, stored: (beyond_validated(d.one, req.batch) or ("",))[0] == d.path,
     lambda d, req, stored, _: "the '{0}' back-test, which went up to {2:g}x the nearest "
                               "fitted batch: {1:.3g}x is not validated".format(
                                   *(beyond_validated(d.one, req.batch) or ("", 0.0, 0.0)))),
    (lambda d, req, stored: len(req.changes) > JUDGED_CHANGES.get(d.path, 1),
     lambda d, req, stored, _: _not_tested(
         d, f"a what-if of several changes ({rq._and(list(req.changes))}: the category judges "
            f"{_judged_words(d.path)})")),
    (lambda d, req, stored: req.host_ns is not None,
     lambda d, req, stored, _: _not_tested(d, "a host-speed change")),
    (lambda d, req, stored: (req.from_base and req.target.framework != req.base.framework
                             and whatif_category(req.base, req.target.with_(
                                 precision=req.base.precision)) not in FRAMEWORK_WHATIFS.values()),
     lambda d, req, stored, _: _not_tested(d, "a change of framework")),
    (lambda d, req, stored: _unjudged_steps(d, req),
     lambda d, req, stored, steps: _not_tested(d, "a change of " + rq._and(
         [f"{k} {a} -> {b}" for k, a, b in steps]))),
)


def _not_backtested(d: Draft, req: Request, stored: set[int]) -> str | None:
    """Why the drafted prediction's own path does not judge it: the first of
    :data:`NOT_BACKTESTED` that finds something, each looked for once; None where none does.
    ``stored``: the device counts of the stored one-node N-device points."""
    return next((why(d, req, stored, got) for found, why in NOT_BACKTESTED
                 if (got := found(d, req, stored))), None)


def _interval_of(d: Draft, recs: Records, req: Request, level: float, gpu: str | None = None
                 ) -> tuple[tuple[float, float], str | None, str | None]:
    """``(interval (s), where it came from, why there is none)`` of the drafted step: the
    Mondrian conformal interval of its path's residuals in the files' own residual table
    (:func:`_interval`). Borrowed at the wider level ``1 - (1 - level) / 2`` (95% for 90%),
    and said so: the residuals of a path that is not the prediction's own (N devices of a
    count no stored point has: the stored counts'; a host-speed what-if, or a framework
    what-if not in :data:`FRAMEWORK_WHATIFS`, never back-tested: its path's), and those of
    the same path in a committed residual table of other files where the files' own table has
    none (:func:`_borrowed_interval`), widened where that table's devices are not the
    prediction's ``gpu`` (:func:`intervals.cross_gpu`). A borrowed interval holds the same
    residuals' interval at ``level`` on each side (:func:`intervals.conformal_bounds` is
    monotone in the level). Several nodes are not validated: no interval."""
    if req.nnodes > 1:
        note = (f"multi-node: not validated (no stored measurement of {req.nnodes} nodes to "
                "judge this kind of prediction against)")
        d.assumptions.append("no interval: " + note)
        return (float("nan"), float("nan")), None, note
    stored_n = {p.world_size for p in recs.points if p.world_size > 1 and p.nnodes == 1}
    why = _not_backtested(d, req, stored_n)
    wider = 1 - (1 - level) / 2
    at = wider if why else level
    ivl = _interval(recs, d.path, at, d.one.bound, req.withheld)
    if ivl is None:  # no residual of the path in these files' table: another table's
        return _other_tables_interval(d, recs, req, level, wider, gpu)
    group = (f"{ivl.describe()}; these files' residual table "
             f"({fc.relative_if_under_cwd(fc.table_file(recs.sources))})")
    d.explain["interval"] = _interval_words(ivl, at, d.step_s)
    if why:
        group = f"borrowed from {d.path} at {wider:.0%}: {group}"
        _say_widened(d, at, level, why)
    t = d.step_s
    return (t * ivl.low_ratio, t * ivl.high_ratio), group, None


def _other_tables_interval(d: Draft, recs: Records, req: Request, level: float, wider: float,
                           gpu: str | None) -> tuple[tuple[float, float], str | None, str | None]:
    """:func:`_interval_of` from the same path in another residual table
    (:func:`_borrowed_interval`) at the ``wider`` level, widened where its devices are not the
    prediction's ``gpu``; no interval (and why) without one."""
    got = _borrowed_interval(recs, d.path, wider, d.one.bound, req.withheld)
    own, no_interval, note = _no_own_residual(d, recs)
    if got is None:
        d.assumptions.append(no_interval)
        return (float("nan"), float("nan")), None, note
    ivl, table, gpus = got
    d.explain["interval"] = _interval_words(ivl, wider, d.step_s)
    ivl, gpu_words = iv.cross_gpu(ivl, gpu, gpus, d.one.cfg.device)
    d.explain["interval"]["widened"] = [ivl.low_ratio, ivl.high_ratio, gpu_words]
    d.assumptions.append(f"borrowed interval: {gpu_words}")
    _say_widened(d, wider, level, f"the same path in {table}: {own}")
    t = d.step_s
    return ((t * ivl.low_ratio, t * ivl.high_ratio),
            f"borrowed from {table} at {wider:.0%}: {ivl.describe()}; {gpu_words}", None)


def _interval_words(ivl: iv.Interval, level: float, step_s: float) -> dict[str, Any]:
    """The interval's numbers for :attr:`Prediction.explanation`: its residual group, rows,
    method, level, the ranks taken (:func:`intervals.ranks_of`), the ratios and the step they
    multiply (s)."""
    return {"group": ivl.group, "rows": ivl.n, "method": ivl.method, "level": level,
            "ranks": iv.ranks_of(ivl.n, level, ivl.method), "low_ratio": ivl.low_ratio,
            "high_ratio": ivl.high_ratio, "step_s": step_s}


def _say_widened(d: Draft, at: float, level: float, why: str) -> None:
    d.assumptions.append(f"interval borrowed at a wider level ({at:.0%} for {level:.0%}) "
                         f"from {why}")


def _borrowed_interval(recs: Records, category: str, level: float, bound: str | None,
                       withheld: Iterable = ()
                       ) -> tuple[iv.Interval, str, frozenset[str]] | None:
    """The interval of ``category``'s residuals (with those it is pooled with,
    :func:`intervals.calibration_categories`) in the best other residual table of the
    current model (:func:`fitcache.borrowable`: the tables beside the files and the ones
    committed with the repository's results), that table in words and the devices of its
    fits; None without one.
    The best: the entry with residuals of the category that shares the most results files
    with ``recs``, then the one with the fewest others (the closest data: a file of the H200
    folder borrows the folder's table). The points predicted keep out of it
    (:func:`intervals.without_points`). Reads tables only: never runs a back-test."""
    ids = {point_id(p) for p in withheld}
    mine = {os.path.realpath(s) for s in recs.sources}
    best = max((e for e in _borrowable(recs) if e[2].get(category)), default=None,
               key=lambda e: (len(mine & e[1]), -len(e[1] - mine)))  # ties: the first
    if best is None:
        return None
    name, _, cats, gpus = best
    rows = [x for c in iv.calibration_categories(category) for x in cats.get(c, [])]
    ivl = iv.mondrian(iv.without_points(rows, ids), bound, level, category)
    return None if ivl is None else (ivl, name, gpus)


_BORROWABLE: dict[tuple, list[tuple[str, frozenset[str], dict[str, list[iv.KeyedResidual]],
                                    frozenset[str]]]] = {}


def _borrowable(recs: Records) -> list[tuple[str, frozenset[str],
                                              dict[str, list[iv.KeyedResidual]],
                                              frozenset[str]]]:
    """:func:`fitcache.borrowable` for ``recs``' files, read once per process."""
    return once(_BORROWABLE, (fc.model_key(), tuple(recs.sources)),
                lambda: fc.borrowable(recs.sources))


def _no_own_residual(d: Draft, recs: Records) -> tuple[str, str, str]:
    """Why the residual table of ``recs`` gives the drafted path no residual (no table of the
    current key, or no residual of the path in it), as each place says it: ``(where a
    borrowed interval came from, the assumption of a prediction with no interval, its
    interval note)``."""
    why = _table(recs)[1]
    if why:
        return (f"no residual table for these files ({why})",
                f"no residual table for these files: no interval ({why})",
                f"not validated on these results files ({why}); run dlperf predict --validate "
                "with the same --db to back-test the model and store the table")
    return (f"these files' back-test has no residual of kind '{d.path}'",
            f"no back-test residual of kind '{d.path}' in these files: no interval",
            f"the back-test found no stored point it could predict as a '{d.path}' while "
            "withholding it in these results files, so this kind of prediction's error is not "
            "known here")


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
    interval, group, note = _interval_of(d, recs, req, level, gpu)
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
    far = beyond_validated(one, req.batch)  # None on N devices: not a series ("+ data parallel")
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
