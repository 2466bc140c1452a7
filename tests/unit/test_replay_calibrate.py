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


def test_cuda_without_a_gpu_is_refused_before_anything_runs(tmp_path, monkeypatch):
    """No usable GPU here: ``--device cuda`` (the default) is refused at once, as ``dlperf run
    --device cuda`` is, instead of running every point as unavailable and storing a profile
    that measured nothing."""
    import dlperf.nvml

    monkeypatch.setattr(dlperf.nvml, "gpus", lambda: [])
    db = tmp_path / "c.db"
    r = CliRunner().invoke(app, ["calibrate", "--db", str(db), "--name", "h100",
                                 "--model", "resnet50"])
    assert r.exit_code == 2 and "no CUDA GPU is usable here" in r.output
    assert not db.exists()


def test_a_profile_of_nothing_measured_is_not_stored(tmp_path, monkeypatch):
    """Every profile point failed: calibrate exits 2 with the first failure and stores no
    profile (a profile of nothing gives `predict --gpu NAME` absurd times), the failures
    staying in the results file."""
    from types import SimpleNamespace

    import dlperf.api
    from dlperf.results.store import ResultStore

    db = str(tmp_path / "c.db")
    ResultStore(db).close()
    failed = SimpleNamespace(identity=SimpleNamespace(status="crash",
                                                      error="worker died: signal 9\ntrace"))
    monkeypatch.setattr(dlperf.api, "sweep", lambda *a, **k: SimpleNamespace(results=[failed]))
    r = CliRunner().invoke(app, ["calibrate", "--db", db, "--name", "cpu-x", "--device", "cpu"])
    assert r.exit_code == 2, r.output
    assert "no profile point of fcn5 on cpu measured" in r.output
    assert "crash: worker died: signal 9" in r.output and "trace" not in r.output
    assert H.stored_profiles(db) == {}


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


@pytest.mark.parametrize("args, said", [
    (["--model", "resnt50"], "did you mean 'resnet50'"),
    (["--model", "resnet50", "--precision", "fp16"], "valid precisions: bf16, fp32, tf32"),
    (["--model", "resnet50", "--mode", "grph"], "did you mean 'graph'"),
    (["--profile-model", "fcn55"], "--profile-model"),
    (["--device", "gpu"], "valid devices"),
    # the model points' flags are checked without a --model too, not silently ignored
    (["--precision", "fp16"], "valid precisions: bf16, fp32, tf32"),
    (["--mode", "xla"], "valid modes of framework 'torch': eager, graph"),
    (["--framework", "mxnet"], "--framework mxnet: calibrate traces every point"),
])
def test_every_input_is_checked_before_anything_is_measured(tmp_path, monkeypatch, args, said):
    """A typo in a model name, a precision calibrate cannot run, a bad mode, profile model or
    device is refused at once with the valid choices, not after the profile points have
    been measured (a fresh user waited 164 s for a profile and never heard of the typo)."""
    import dlperf.api

    ran = []
    monkeypatch.setattr(dlperf.api, "sweep", lambda *a, **k: ran.append(a))
    db = tmp_path / "c.db"
    r = CliRunner().invoke(app, ["calibrate", "--db", str(db), "--name", "x", "--device", "cpu",
                                 "--budget-s", "1", *args])
    assert r.exit_code == 2, r.output
    assert said in r.output and "no tf32 profile point" not in r.output  # the error alone
    assert ran == [] and not db.exists()


def _timed_sweep(monkeypatch, point_s: float):
    """``api.sweep`` replaced by one that stores an ok result of each point at once and moves
    calibrate's clock on by ``point_s`` per point; returns the labels of the points run."""
    from types import SimpleNamespace

    import dlperf.api
    import dlperf.cli.calibrate as C
    from dlperf.config import expand_grid
    from dlperf.results.schema import new_record
    from dlperf.results.store import ResultStore
    from dlperf.stats import summarize
    from fakes import FakeClock

    clock, ran = FakeClock(), []

    def sweep(grid, *, defaults=None, name="", db=None, **kw):
        consoles.append(kw.get("console"))
        recs = []
        for cfg in expand_grid(defaults or {}, grid):
            rec = new_record(cfg, "ok", summary=summarize([0.01] * 5).to_dict())
            with ResultStore(db) as s:
                s.add(rec.to_dict())
            ran.append(f"{cfg.workload.model} {cfg.hardware.precision} b={cfg.global_batch}")
            clock.advance(point_s)
            recs.append(rec)
        return SimpleNamespace(results=recs)

    monkeypatch.setattr(dlperf.api, "sweep", sweep)
    monkeypatch.setattr(C, "time", SimpleNamespace(monotonic=lambda: clock.t))
    return ran


#: The console each ``api.sweep`` of :func:`_timed_sweep` was given.
consoles: list = []


def test_the_budget_bounds_the_profile_points_too(tmp_path, monkeypatch):
    """--budget-s 15 with 10 s points: the first profile point runs (a profile needs one), no
    other starts once the time spent plus the longest point would pass the budget, and the
    output names every point left out; the same command again continues with the next."""
    ran = _timed_sweep(monkeypatch, 10.0)
    db = str(tmp_path / "c.db")
    args = ["calibrate", "--db", db, "--name", "cpu-x", "--device", "cpu", "--precision",
            "fp32", "--model", "resnet50", "--batch-sizes", "16,64", "--budget-s", "15"]
    consoles.clear()
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert ran == ["fcn5 fp32 b=64"]  # the model points' precision first
    # the point lines go to the CLI's stderr console, as run's: full width in a pipe, not 80
    from dlperf.cli import common
    assert consoles == [common.err] and common.err.width > 80
    assert "--budget-s 15 spent after 10 s" in r.output
    assert ("left out (not measured): profile fcn5 bf16 b=64; resnet50 fp32 b=16; resnet50 "
            "fp32 b=64") in r.output.replace("\n", " ")
    assert "cpu-x" in H.stored_profiles(db)
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert ran == ["fcn5 fp32 b=64", "fcn5 bf16 b=64"]
    assert "resuming: 1 of 4 calibration points already in" in r.output
    assert "left out (not measured): resnet50 fp32 b=16; resnet50 fp32 b=64" in r.output


def test_no_tf32_profile_point_on_the_cpu(tmp_path, monkeypatch):
    """TF32 is a GPU tensor-core mode: on the CPU a tf32 point measures fp32 again, so the
    profile has none there, and the output says why."""
    ran = _timed_sweep(monkeypatch, 1.0)
    db = str(tmp_path / "c.db")
    r = CliRunner().invoke(app, ["calibrate", "--db", db, "--name", "cpu-x", "--device", "cpu"])
    assert r.exit_code == 0, r.output
    assert ran == ["fcn5 bf16 b=64", "fcn5 fp32 b=64"]
    assert "no tf32 profile point on the CPU" in r.output


def test_a_cpu_profile_prints_and_stores_no_nan(tmp_path, monkeypatch):
    """A CPU's traces have no kernel launches: the output says the launch call is n/a there,
    not ``nan us``, and the stored profile holds null, not a NaN that `predict --gpu`'s
    readers would take for a number."""
    import json
    import re
    import sqlite3

    _timed_sweep(monkeypatch, 1.0)
    db = str(tmp_path / "c.db")
    r = CliRunner().invoke(app, ["calibrate", "--db", db, "--name", "cpu-x", "--device", "cpu"])
    assert r.exit_code == 0, r.output
    assert "launch call n/a (cpu: no kernel launches)" in r.output
    assert "host probe not measured" in r.output  # the fake results have no probe
    assert not re.search(r"\bnan\b", r.output, re.IGNORECASE), r.output
    con = sqlite3.connect(db)
    (raw,) = con.execute("SELECT value FROM meta WHERE key = 'device_profile:cpu-x'").fetchone()
    con.close()
    assert "NaN" not in raw and json.loads(raw)["launch_s"] is None
    assert H.stored_profiles(db)["cpu-x"].launch_s is None


@pytest.mark.parametrize("bad", ["{bad", "[]", '{"name": "x", "sms": 1, "clock_mhz": 1, '
                                 '"bandwidth_bytes_per_s": 1, "gemm_flops_per_s": [1]}'])
def test_a_damaged_stored_profile_is_skipped(tmp_path, bad):
    import shutil
    import sqlite3
    from pathlib import Path

    db = tmp_path / "p.db"
    shutil.copy(Path(__file__).resolve().parents[2] / "benchmarks/results/h200x2/ddp_diag.db", db)
    with sqlite3.connect(db) as c:
        c.execute("INSERT INTO meta VALUES (?, ?)", (H.META_PREFIX + "bad", bad))
    assert "bad" not in H.stored_profiles(str(db))


def test_predict_on_a_cpu_profile_is_refused(tmp_path, monkeypatch):
    """A profile calibrated on a CPU records its device kind, and ``predict --gpu`` refuses
    it: replaying an H200 trace on a CPU's cores and host memory gave 19 s per step with the
    GPU back-test's band (a fresh user's `calibrate --device auto` on a machine without a
    GPU). A datasheet GPU named beside it is still predicted."""
    from pathlib import Path

    _timed_sweep(monkeypatch, 1.0)
    db = str(tmp_path / "c.db")
    r = CliRunner().invoke(app, ["calibrate", "--db", db, "--name", "cpu-x", "--device", "cpu"])
    assert r.exit_code == 0, r.output
    assert H.stored_profiles(db)["cpu-x"].extra["device"] == "cpu"
    h200 = str(Path(__file__).resolve().parents[2] / "benchmarks/results/h200")
    args = ["predict", "--db", h200, "--db", db, "--model", "resnet50", "--framework", "torch",
            "--mode", "eager", "--precision", "bf16", "-b", "64", "--gpu"]
    r = CliRunner().invoke(app, [*args, "cpu-x"])
    assert r.exit_code == 2, r.output
    out = " ".join(r.output.split())
    assert "the profile 'cpu-x' was measured on a cpu" in out
    assert "predicts only on a GPU" in out and "ms per iteration" not in out
    _api_refuses_as_the_cli([h200, db], "cpu-x", out)
    r = CliRunner().invoke(app, [*args, "a100"])
    assert r.exit_code == 0, r.output
    assert "on NVIDIA A100-SXM4-80GB (datasheet only" in r.output


def _old_cpu_row(launch_s: str) -> str:
    """A CPU's device profile as ``dlperf calibrate --device cpu`` stored it without a device
    kind (``extra`` holds the dispatch probe only): no datasheet names the CPU, no launch
    call (``null``, or the ``NaN`` of a trace without launch spans), no pinned copy, a
    tf32 ceiling measured as fp32."""
    return ('{"name": "cpu-old", "sms": 2, "clock_mhz": 2450.0, "bandwidth_bytes_per_s": '
            '9.1e9, "gemm_flops_per_s": {"fp32": 1.5e11, "tf32": 1.5e11, "bf16": 4e10}, '
            '"compute_capability": "9.0", "l2_bytes": null, "device_name": "AMD EPYC", '
            f'"host_speed_ns": 95.0, "launch_s": {launch_s}, "measured": ["gemm_fp32", '
            '"gemm_tf32", "gemm_bf16", "bandwidth", "host_speed", "dispatch_probe"], '
            '"source": "dlperf calibrate (no datasheet: measured values only)", "extra": '
            '{"dispatch_probe": {"model": "fcn5", "framework": "torch", "mode": "eager", '
            '"batch_size": 64, "host_dispatch_s": 0.004, "points": 2}}}')


@pytest.mark.parametrize("launch_s", ["null", "NaN"])
def test_an_old_cpu_profile_without_its_kind_is_refused(tmp_path, launch_s):
    """A CPU profile stored without ``extra["device"]`` is refused by ``predict --gpu`` too:
    the refusal reads what the profile holds (no datasheet device name, no launch call, no
    pinned copy), names its ceilings and says what to run. The committed H100 profile, also
    stored without a kind, is a GPU's by its datasheet name and launch call."""
    import sqlite3
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "benchmarks/results"
    db = tmp_path / "old.db"
    H.store_profile(str(db), H.GpuProfile("x", 1, 1.0, 1.0, {}))  # creates the meta table
    with sqlite3.connect(db) as c:
        c.execute("INSERT INTO meta VALUES (?, ?)", (H.META_PREFIX + "cpu-old",
                                                      _old_cpu_row(launch_s)))
    old = H.stored_profiles(str(db))["cpu-old"]
    assert "device" not in old.extra and old.device_kind is None
    h100 = H.stored_profiles(str(root / "h100/calibrate.db"))["h100"]
    assert "device" not in h100.extra and h100.device_kind == "cuda"
    assert H.datasheet("l40s").device_kind == "cuda"
    args = ["predict", "--db", str(root / "h200"), "--db", str(db), "--model", "resnet50",
            "--framework", "torch", "--mode", "eager", "--precision", "bf16", "-b", "64",
            "--gpu", "cpu-old"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, r.output
    out = " ".join(r.output.split())
    assert "the profile 'cpu-old' (AMD EPYC; fp32 GEMM 0.15 TFLOP/s, bandwidth 9.1 GB/s)" in out
    assert "does not say what it was measured on" in out and "predicts only on a GPU" in out
    assert "dlperf calibrate --device cuda --name NAME" in out
    assert "ms per iteration" not in out
    _api_refuses_as_the_cli([str(root / "h200"), str(db)], "cpu-old", out)


def _api_refuses_as_the_cli(db: list[str], gpu: str, cli_out: str) -> None:
    """The Python API (:func:`dlperf.perfmodel.gpuanswer.answer`) refuses the profile ``gpu``
    with the message ``dlperf predict --gpu`` printed (``cli_out``, whitespace collapsed)."""
    from dlperf.errors import ConfigError
    from dlperf.perfmodel import gpuanswer

    with pytest.raises(ConfigError) as e:
        gpuanswer.answer(db, "resnet50", "torch", "eager", "bf16", 64, gpu)
    msg = " ".join(str(e.value).split())
    assert msg.startswith(f"--gpu {gpu}: the profile '{gpu}'") and "predicts only on a GPU" in msg
    assert msg in cli_out, (msg, cli_out)


def test_a_framework_without_traces_is_refused_by_its_flag(tmp_path, monkeypatch):
    """Every calibration point is traced: a framework with no profiler split (MXNet) is
    refused naming --framework and the frameworks that have one, not --profile-model or a
    --breakdown the user never gave; a test double enabled in the process
    (``DLPERF_FAKE_FRAMEWORK=1``, as the suite runs) is not offered."""
    import dlperf.api
    from dlperf import registry

    monkeypatch.setattr(dlperf.api, "sweep", lambda *a, **k: pytest.fail("measured"))
    monkeypatch.setitem(registry.FRAMEWORKS, "fake", registry.TEST_DOUBLES["fake"])
    r = CliRunner().invoke(app, ["calibrate", "--db", str(tmp_path / "c.db"), "--name", "x",
                                 "--device", "cpu", "--framework", "mxnet"])
    assert r.exit_code == 2, r.output
    assert "use --framework torch, jax or tensorflow" in r.output
    assert "--profile-model" not in r.output and "run without them" not in r.output


def test_gemm_ceilings_print_a_cpus_tens_of_gflops():
    """A CPU's GEMM ceiling (tens of GFLOP/s) prints with significant digits, not as 0.0
    TFLOP/s; a GPU's keeps one decimal."""
    from dlperf.cli.calibrate import _tflops

    assert _tflops(3.14e10) == "0.0314"
    assert _tflops(7.816e14) == "781.6"
    assert _tflops(1.0e12) == "1.0"
