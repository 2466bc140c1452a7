"""The batch-size part of the performance model: recovery of known parameters, held-out
back-testing on the committed H200 series."""

from pathlib import Path

import numpy as np
import pytest

from dlperf.perfmodel import batch as pb
from dlperf.results.store import ResultStore

DLBENCH = Path(__file__).resolve().parents[2] / "benchmarks/results/h200/dlbench.db"


@pytest.mark.parametrize("h,d0,d1", [(2e-3, 1e-4, 5e-6), (1e-3, 5e-4, 1e-5), (8e-3, 1e-4, 2e-6)])
def test_fit_recovers_known_parameters(h, d0, d1):
    bs = [16, 32, 64, 128, 256, 512, 1024, 2048]
    t = pb._model(np.array(bs, float), h, d0, d1)
    fit = pb.fit_batch(bs, t)
    assert fit.rms_log_residual < 1e-6
    for b in (24, 3000):  # between and beyond the fitted points
        assert fit.step_time_s(b) == pytest.approx(pb._model(np.array([b], float), h, d0, d1)[0],
                                                   rel=1e-4)
    assert fit.host_s == pytest.approx(h, rel=0.02)
    assert fit.device_per_sample_s == pytest.approx(d1, rel=0.02)
    assert fit.bound(16) == ("host" if h > d0 + d1 * 16 else "device")


def test_flat_host_bound_series_beats_a_straight_line():
    bs = [16, 64, 256, 1024, 4096]
    t = pb._model(np.array(bs, float), 3e-3, 1e-4, 1e-6)  # flat until ~3000 samples
    fit = pb.fit_batch(bs[:-1], t[:-1])
    a, b = pb.fit_linear(bs[:-1], t[:-1])
    assert abs(fit.step_time_s(16) / t[0] - 1) < 0.01
    assert abs(fit.step_time_s(16) / t[0] - 1) < abs((a + b * 16) / t[0] - 1)


def test_fit_refuses_bad_input():
    with pytest.raises(ValueError, match="2 distinct"):
        pb.fit_batch([64, 64], [1e-3, 1e-3])
    with pytest.raises(ValueError, match="positive"):
        pb.fit_batch([16, 64], [1e-3, 0.0])


def test_validation_on_committed_dlbench_is_held_out():
    with ResultStore(DLBENCH, read_only=True) as s:
        series = pb.series_from_rows(s.rows())
    rows = pb.validate_batch(series)
    long_series = [x for x in series if len(x.points) >= 4]
    assert len(long_series) == 10
    n_points = sum(len(x.points) for x in long_series)
    held = [r for r in rows if r.category == "held-out batch"]
    assert len(held) == n_points
    assert len([r for r in rows if r.category == "extrapolate largest"]) == 10
    # each held-out prediction differs from an in-sample fit of the same point
    summary = {d["category"]: d for d in pb.summarize_validation(rows)}
    assert summary["held-out batch"]["count"] == n_points
    assert 0 < summary["held-out batch"]["mdape_pct"] < 20
    lo, hi = pb.prediction_interval(rows)
    assert lo < 1 < hi


def test_predict_cli_on_committed_files(tmp_path):
    import json

    from typer.testing import CliRunner

    from dlperf.cli import app

    r = CliRunner().invoke(app, ["predict", "--db", str(DLBENCH), "--validate"])
    assert r.exit_code == 0, r.output
    assert "held-out batch | 50 |" in r.output
    r = CliRunner().invoke(app, ["predict", "--db", str(DLBENCH), "--model", "lstm",
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
