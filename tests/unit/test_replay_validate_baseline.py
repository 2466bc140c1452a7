"""The step-level baseline of the replay back-test's precision rows
(benchmarks/replay_validate.py, :func:`whatif_baseline`) is the step-level back-test's what-if
(``what-if fp32->bf16``, :func:`dlperf.validation.backtest.whatif_rows`): the target
configuration withheld at every batch, never predicted from its own series at other batches."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import replay_validate as rv  # noqa: E402

from dlperf.perfmodel import api  # noqa: E402
from dlperf.perfmodel.calibrate import Calibration, Config  # noqa: E402
from dlperf.perfmodel.records import point_id  # noqa: E402
from dlperf.validation import backtest as bt  # noqa: E402

DB = str(rv.ROOT / "benchmarks/results/h200/calibration2.db")


def test_precision_baseline_is_the_backtests_whatif_with_the_target_withheld():
    recs = api.gpu_records(api.records_of([DB]), None)
    base = Calibration(recs, share_efficiencies=api.shared_fits(recs))
    # the first four stored fp32 / bf16 pairs at one batch in one file
    rows = bt.whatif_rows(recs, base, categories=["what-if fp32->bf16"],
                          budget=bt.Budget(4 * bt.COST_S["what-if"]))
    assert len(rows) == 4
    by_id = {point_id(p): p for p in recs.points}
    steps = bt._steps(recs)
    leaks = 0
    for r in rows:
        p = by_id[r.point]  # the bf16 target
        q = [x for x in steps if (x.source, x.batch_size) == (p.source, p.batch_size)
             and Config.of(x) == Config.of(p).with_(precision="fp32")][-1]
        assert rv.whatif_baseline([DB], p, q) == pytest.approx(r.predicted_s, rel=1e-9), r.label
        # where the target is stored at other batches, api.predict's what-if answers from the
        # target's own series: the leak the replay baseline must not have
        if api.stored_target(recs, Config.of(p), p.batch_size):
            own = api.predict([DB], q.model, q.framework, q.mode, q.precision, q.device,
                              batch_size=q.batch_size, what_if={"precision": "bf16"})
            leaks += abs(own.predicted_step_time_s / r.predicted_s - 1) > 0.01
    assert leaks, "no row where the target's own series would give another baseline"
