"""``dlperf calibrate`` on the CPU: the device profile is measured, stored in the results file
and found again by name; bad arguments are refused before anything runs."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from dlperf.cli import app
from dlperf.perfmodel import hardware as H


def test_bad_batch_sizes_and_framework_are_refused(tmp_path):
    db = str(tmp_path / "c.db")
    r = CliRunner().invoke(app, ["calibrate", "--db", db, "--name", "x", "--device", "cpu",
                                 "--model", "fcn5_tiny", "--batch-sizes", "8,a"])
    assert r.exit_code == 2 and "--batch-sizes" in r.output
    r = CliRunner().invoke(app, ["calibrate", "--db", db, "--name", "x", "--framework", "nope"])
    assert r.exit_code == 2 and "not a framework" in r.output
    assert not (tmp_path / "c.db").exists() or H.stored_profiles(db) == {}


@pytest.mark.slow
def test_calibrate_on_cpu_stores_a_profile(tmp_path):
    db = str(tmp_path / "c.db")
    r = CliRunner().invoke(app, ["calibrate", "--db", db, "--name", "cpu-test", "--device",
                                 "cpu", "--framework", "torch", "--profile-model", "fcn5_tiny",
                                 "--profile-batch", "4", "--model", "fcn5_tiny",
                                 "--batch-sizes", "4,8", "--precision", "fp32"])
    assert r.exit_code == 0, r.output
    prof = H.stored_profiles(db)["cpu-test"]
    assert prof.gemm("fp32") and prof.gemm("fp32") > 0
    assert "gemm_fp32" in prof.measured and "bandwidth" in prof.measured
    assert prof.host_speed_ns and prof.host_speed_ns > 0
    # host-to-device copies: on a CPU device a host memcpy; no pinned memory without a GPU
    assert prof.h2d_pageable_bytes_per_s and prof.h2d_pageable_bytes_per_s > 0
    assert "h2d_pageable" in prof.measured and prof.h2d_bytes_per_s is None
    assert "host-to-device copies (GB/s): pinned not measured, pageable" in r.output
    assert H.resolve("cpu-test", paths=db) == prof
    import sqlite3
    con = sqlite3.connect(db)
    traced = {b for (b,) in con.execute(
        "SELECT r.batch_size FROM results r JOIN timelines t ON t.result_id = r.id "
        "WHERE r.model = 'fcn5_tiny' AND r.precision = 'fp32'")}
    con.close()
    assert traced >= {4, 8}  # one traced iteration at each batch size asked for
