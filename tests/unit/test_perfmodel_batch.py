"""The batch-size part of the performance model (the one-device series fit of
:mod:`dlperf.perfmodel.onedevice`, which replaced the batch-only ``perfmodel.batch`` fit):
recovery of known parameters, held-out back-testing on the committed H200 series."""

from pathlib import Path

import numpy as np
import pytest

from dlperf import validation
from dlperf.perfmodel import onedevice as od
from dlperf.perfmodel.records import Point, load, point_of
from dlperf.results.view import as_record
from dlperf.validation import backtest as bt

DLBENCH = Path(__file__).resolve().parents[2] / "benchmarks/results/h200/dlbench.db"


def _points(bs, ts):
    """One synthetic series (one-device, un-instrumented, no CI stored)."""
    return [Point(source="synthetic", result_id=i, model="m", framework="fake", mode="eager",
                  precision="fp32", device="cuda", data="synthetic", layout=None, threads=None,
                  grad_accum=1, batch_size=int(b), world_size=1, nnodes=1,
                  per_device_batch=int(b), variant="", instrumented=False,
                  step_time_s=float(t), ci_rel=None, n_measured=None,
                  train_flops_per_sample=None, params=None, bytes_per_step=None)
            for i, (b, t) in enumerate(zip(bs, ts))]


def _model(b, h, d0, d1):
    return od.overlap(h, d0 + d1 * np.asarray(b, float))


@pytest.mark.parametrize("h,d0,d1", [(2e-3, 1e-4, 5e-6), (1e-3, 5e-4, 1e-5), (8e-3, 1e-4, 2e-6)])
def test_fit_recovers_known_parameters(h, d0, d1):
    bs = [16, 32, 64, 128, 256, 512, 1024, 2048]
    t = _model(bs, h, d0, d1)
    # the series fit always carries priors (a weak pull of an unidentified host time, each
    # point weighted by a 2% model floor); with the roofline's per-sample time right it
    # recovers the parameters, the third series (host-bound at every batch) included
    prior = od.DevicePrior(d1, od.PRIOR_SIGMA, (), "roofline (true d1)")
    fit = od.fit_series(_points(bs, t), prior)
    # the priors keep the fit from being exact (the retired prior-free fit reached 1e-6)
    assert fit.rms_log < 1e-4
    for b in (24, 3000):  # between and beyond the fitted points
        assert fit.step_time_s(b) == pytest.approx(float(_model(b, h, d0, d1)), rel=5e-4)
    assert fit.host_s == pytest.approx(h, rel=0.02)
    assert fit.device_per_sample_s == pytest.approx(d1, rel=0.02)
    assert fit.bound(16) == ("host" if h > d0 + d1 * 16 else "device")


def test_flat_host_bound_series_beats_a_straight_line():
    bs = [16, 64, 256, 1024, 4096]
    t = _model(bs, 3e-3, 1e-4, 1e-6)  # flat until ~3000 samples
    fit = od.fit_series(_points(bs[:-1], t[:-1]), None)
    a, b = bt.fit_linear(bs[:-1], t[:-1])
    assert abs(fit.step_time_s(16) / t[0] - 1) < 0.01
    assert abs(fit.step_time_s(16) / t[0] - 1) < abs((a + b * 16) / t[0] - 1)


def test_fit_refuses_bad_input():
    with pytest.raises(ValueError, match="one batch size and no device prior"):
        od.fit_series(_points([64, 64], [1e-3, 1e-3]), None)
    with pytest.raises(ValueError, match="at least one point"):
        od.fit_series([], None)
    with pytest.raises(ValueError, match="2 points"):
        bt.fit_linear([64], [1e-3])
    # a non-positive step time never reaches a fit: the one loader drops it
    row = {"id": 1, "status": "ok", "model": "m", "batch_size": 16, "step_time_median_s": 0.0}
    assert point_of(as_record(row), "x.db") is None
    assert point_of(as_record({**row, "step_time_median_s": float("nan")}), "x.db") is None


def test_validation_on_committed_dlbench_is_held_out():
    v = validation.validate(DLBENCH, ["held-out batch", "extrapolate 2x"])
    recs = load(DLBENCH)
    series: dict = {}
    for p in recs.points:
        if p.world_size == 1 and not p.instrumented:
            series.setdefault((p.config, p.layout, p.threads), set()).add(p.batch_size)
    long_series = [bs for bs in series.values() if len(bs) >= 4]
    assert len(long_series) == 10
    n_points = sum(len(bs) for bs in long_series)
    held = [r for r in v.rows if r.category == "held-out batch"]
    assert len(held) == n_points
    assert len([r for r in v.rows if r.category == "extrapolate 2x"]) == 10
    summary = {d["category"]: d for d in v.summary()}
    assert summary["held-out batch"]["count"] == n_points
    assert 0 < summary["held-out batch"]["mdape_pct"] < 20
    # each held-out prediction differs from the measurement it was not fitted on
    assert all(r.predicted_s != r.measured_s for r in held)
    lo, hi = np.quantile(v.residuals("held-out batch"), [0.05, 0.95])
    assert lo < 0 < hi


def test_predict_cli_on_committed_files(tmp_path):
    import json
    import shutil

    from typer.testing import CliRunner

    from dlperf.cli import app

    db = tmp_path / "dlbench.db"  # --validate writes its table beside the file: a copy
    shutil.copy(DLBENCH, db)
    r = CliRunner().invoke(app, ["predict", "--db", str(db), "--validate"])
    assert r.exit_code == 0, r.output
    assert "held-out batch | 50 |" in r.output
    assert (tmp_path / "perfmodel_residuals.json").is_file()
    r = CliRunner().invoke(app, ["predict", "--db", str(db), "--model", "lstm",
                                 "--precision", "fp32", "-b", "64", "--format", "json"])
    assert r.exit_code == 0, r.output
    p = json.loads(r.output)
    lo, hi = p["interval_s"]
    assert lo < p["predicted_step_time_s"] < hi
    # the measured point (dlbench.db row of lstm fp32 b=64) is withheld from the fit
    import sqlite3

    with sqlite3.connect(DLBENCH) as db:
        (rid,) = db.execute("SELECT id FROM results WHERE model='lstm' AND precision='fp32' AND "
                            "batch_size=64 AND status='ok'").fetchone()
    assert p["calibrated_on"] and f"{DLBENCH}:{rid}" not in p["calibrated_on"]
    assert p["measured_step_time_s"] == pytest.approx(7.282e-3, rel=1e-3)
    assert p["config"]["global_batch"] == 64
    r = CliRunner().invoke(app, ["predict", "--db", str(DLBENCH), "--model", "resnet50", "-b", "8"])
    assert r.exit_code == 2 and "several stored configurations match" in r.output
    r = CliRunner().invoke(app, ["predict", "--db", str(DLBENCH), "--model", "nosuch", "-b", "8"])
    assert r.exit_code == 2 and "no stored one-device point of nosuch" in r.output
    r = CliRunner().invoke(app, ["predict", "--db", str(tmp_path / "none.db"), "--validate"])
    assert r.exit_code == 2 and "does not exist" in r.output
