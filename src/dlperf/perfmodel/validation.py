"""Validation of the performance model: the back-test (:mod:`dlperf.perfmodel.backtest`) on
stored results, and the residual table it leaves beside them for predictions' intervals.

Nothing here is imported by a prediction: ``dlperf predict`` reads the table that
``dlperf predict --validate`` (:func:`validate` with ``store=True``) wrote
(:func:`dlperf.perfmodel.fitcache.read_table`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from dlperf.errors import ConfigError
from dlperf.perfmodel import api
from dlperf.perfmodel import backtest as bt
from dlperf.perfmodel import fitcache as fc
from dlperf.perfmodel import intervals as iv
from dlperf.perfmodel.btrows import Row
from dlperf.perfmodel.records import Records, point_id

#: Each stored one-node N-device point predicted by :func:`dlperf.perfmodel.api.predict`
#: itself (``dlperf predict --nproc N``), which withholds the point; the baseline is perfect
#: weak scaling (the stored one-device step at the per-device batch).
PREDICT_NPROC_CATEGORY = api.NPROC_CATEGORY


def validate(db: str | os.PathLike | Iterable[str | os.PathLike],
             categories: Iterable[str] | None = None,
             budget_s: float | None = None) -> bt.Validation:
    """Back-test the model on the stored results (:mod:`dlperf.perfmodel.backtest`); the
    returned object has ``.table()`` (markdown), ``.summary()``, ``.rows`` and ``.left_out``.
    A full run (every category, no budget) also leaves its residuals in this process, so that
    predictions on the same files take their intervals from it (:func:`store_table` writes
    them beside the data).

    Args:
        db: a results file, several, or folders of ``*.db``.
        categories: which of :data:`backtest.CATEGORIES` (None: all).
        budget_s: None runs every prediction; else at most this many *estimated* seconds of
            them (:class:`backtest.Budget`: deterministic, the cheap categories first); what
            it left out is counted in ``.left_out``.

    Raises:
        ConfigError: a missing results file, an unknown category or a negative budget.
    """
    recs = api.records_of(db)
    cats = list(categories) if categories else None
    own = cats is not None and PREDICT_NPROC_CATEGORY in cats
    try:
        v = bt.run(recs, [c for c in cats if c != PREDICT_NPROC_CATEGORY] if own and cats
                   else cats, budget_s, base=api._base_calibration(recs))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if (cats is None or own) and budget_s is None:
        v.rows += predict_nproc_rows(recs)
    if budget_s is None and cats is None:  # every row: the residuals predict() uses
        key = api.table_key(recs)
        api._RESIDUALS[key] = residual_table(v)
        api._NO_TABLE.pop(key, None)
    return v


def predict_nproc_rows(recs: Records) -> list[Row]:
    """:data:`PREDICT_NPROC_CATEGORY` rows: every stored synthetic-data N-device point of one
    node without DDP options, predicted through :func:`api.predict` (its own path and
    withholding), against the one-device step at the same per-device batch."""
    out = []
    for p in recs.points:
        if p.world_size < 2 or p.nnodes != 1 or p.variant or p.instrumented \
                or p.data != "synthetic":
            continue
        one = [q.step_time_s for q in recs.points if q.world_size == 1 and not q.instrumented
               and q.config == p.config and q.per_device_batch == p.per_device_batch
               and q.layout == p.layout and q.threads == p.threads]
        try:
            pred = api.predict(recs.sources, p.model, p.framework, p.mode, p.precision, p.device,
                               batch_size=p.batch_size, nproc=p.world_size, data=p.data,
                               layout=p.layout, threads=p.threads, grad_accum=p.grad_accum,
                               compile_mode=p.compile_mode)
        except ConfigError:
            continue
        out.append(Row(PREDICT_NPROC_CATEGORY, f"{p.label} [{p.source}]", p.step_time_s,
                       pred.predicted_step_time_s, one[-1] if one else None,
                       point=point_id(p), model=p.model))
    return out


def residual_table(v: bt.Validation) -> dict[str, list[iv.KeyedResidual]]:
    """Category -> ``(log(measured / predicted), bound, point)`` of every back-test category
    that made rows (a prediction takes its interval from the category of its path)."""
    return {cat: v.keyed_residuals(cat) for cat in dict.fromkeys(r.category for r in v.rows)}


def store_table(db: str | os.PathLike | Iterable[str | os.PathLike], v: bt.Validation) -> Path:
    """Write ``v``'s residual table beside the results files ``db``
    (:func:`fitcache.write_table`); returns its path.

    Raises:
        ConfigError: the folder cannot be written.
    """
    recs = api.records_of(db)
    try:
        return fc.write_table(recs.sources, residual_table(v))
    except OSError as e:
        raise ConfigError(f"{e}: make the folder writable, or copy the results files to one "
                          "that is and validate there") from None
