"""Repeated runs (docs/measurement.md rule 5): the ``repeat`` identity, ``--repeats N`` / ``repeats:``,
resume per repeat, and ``dlperf results --compare repeats`` (between-run variation, olympic
mean) against hand-computed numbers."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
import sqlite3
import subprocess
import sys

import pytest

from dlperf.config import RunConfig, SweepConfig, check_repeats, make_run_config, with_repeats
from dlperf.errors import ConfigError
from dlperf.results.schema import RunRecord, new_record
from dlperf.results.store import ResultStore
from dlperf.results.view import as_records
from dlperf.stats import summarize, throughput

FAKE_ENV = {"DLPERF_FAKE_FRAMEWORK": "1", "COLUMNS": "200"}
STEP = ("--framework-option", "step_s=0.002")
#: A point measured on the H200 (benchmarks/results/h200/frameworks.db): its stored config, made
#: before ``repeat`` existed, and the run key it was stored under.
H200_CONFIG = {"model": "resnet50", "framework": "torch", "mode": "eager", "device": "cuda",
               "precision": "bf16", "batch_size": 128, "grad_accum": 1, "data": "synthetic",
               "data_dir": None, "threads": None, "seed": 0,
               "iterations": {"min_iters": 10, "min_time_s": 1.0, "max_iters": 100000,
                              "max_time_s": 20.0, "warmup_window": 5, "warmup_rel_tol": 0.05,
                              "min_warmup_iters": 10, "max_warmup_iters": 500,
                              "max_warmup_time_s": 15.0},
               "timeout_s": 600.0, "layout": "nchw"}
H200_KEY = "22dd6f5103964e26"


def dlperf(*args, env=None, timeout=180):
    return subprocess.run([sys.executable, "-m", "dlperf", *args], capture_output=True, text=True,
                          env={**os.environ, **FAKE_ENV, **(env or {})}, timeout=timeout)


# --- identity -----------------------------------------------------------------------------

def test_repeat_0_keeps_the_stored_key_and_other_repeats_get_their_own():
    stored = RunConfig.model_validate(H200_CONFIG)
    assert stored.measure.repeat == 0 and stored.run_key() == H200_KEY
    assert RunConfig.model_validate({**H200_CONFIG, "repeat": 0}).run_key() == H200_KEY
    reps = [RunConfig.model_validate({**H200_CONFIG, "repeat": k}) for k in range(4)]
    assert len({c.run_key() for c in reps}) == 4
    assert {c.point_key() for c in reps} == {H200_KEY}
    # the key of a default config is the hash of the fields without `repeat`
    cfg = make_run_config(model="fcn5_tiny", batch_size=8)
    d = {k: v for k, v in cfg.flat().items()
         if k in {"model", "framework", "mode", "device", "precision", "batch_size",
                  "grad_accum", "data", "threads", "seed"}}
    old = hashlib.sha256(json.dumps(d, sort_keys=True, separators=(",", ":")).encode())
    assert cfg.run_key() == old.hexdigest()[:16]
    # labels: repeat k > 0 ends in #k
    assert not cfg.label().endswith("#0") and "#" not in cfg.label()
    assert reps[2].label().endswith(" #2") and reps[2].label()[:-3] == reps[0].label()
    with pytest.raises(ConfigError, match="repeat"):
        make_run_config(model="fcn5_tiny", batch_size=8, repeat=-1)


def test_with_repeats_runs_in_rounds():
    a, b, c = (make_run_config(model="fcn5_tiny", batch_size=n) for n in (1, 2, 4))
    pts = with_repeats([a, b, c], 2)
    assert [(p.workload.batch_size, p.measure.repeat) for p in pts] == [(1, 0), (2, 0), (4, 0), (1, 1), (2, 1),
                                                       (4, 1)]
    pts = with_repeats([a, b, c], [1, 3, 2])
    assert [(p.workload.batch_size, p.measure.repeat) for p in pts] == [(1, 0), (2, 0), (4, 0), (2, 1), (4, 1),
                                                       (2, 2)]
    assert with_repeats([a, b], 1) == [a, b]
    for bad in (0, -2, True, 1.5, "3", [2]):
        with pytest.raises(ConfigError, match="number of runs per point"):
            check_repeats(bad)


def test_sweep_repeats_from_defaults_and_entries():
    sw = SweepConfig(name="s", defaults={"model": "fcn5_tiny", "repeats": 2},
                     grid=[{"batch_size": [1, 2]}, {"batch_size": 4, "repeats": 3},
                           {"batch_size": 1, "repeats": 1}])  # b=1 twice: the larger count
    pts = sw.expand()
    assert [(p.workload.batch_size, p.measure.repeat) for p in pts] == [(1, 0), (2, 0), (4, 0), (1, 1), (2, 1),
                                                       (4, 1), (4, 2)]
    assert len({p.run_key() for p in pts}) == 7
    for _where, grid, needle in [
            ("grid", [{"batch_size": 1, "repeats": 0}], "grid[0].repeats: 0 is not"),
            ("grid", [{"batch_size": 1, "repeats": [1, 2]}], "grid[0].repeats: [1, 2] is not"),
            ("grid", [{"batch_size": 1, "repeat": 2}], "give 'repeats: N'")]:
        with pytest.raises(ConfigError) as e:
            SweepConfig(name="s", defaults={"model": "fcn5_tiny"}, grid=grid).expand()
        assert needle in str(e.value)
    with pytest.raises(ConfigError, match=r"defaults\.repeats: -1 is not"):
        SweepConfig(name="s", defaults={"model": "fcn5_tiny", "repeats": -1},
                    grid=[{"batch_size": 1}]).expand()


def test_resume_after_a_partial_sweep_redoes_no_finished_repeat(tmp_path):
    from dlperf.sweep import execute

    calls = []

    def runner(cfg):
        calls.append((cfg.workload.batch_size, cfg.measure.repeat))
        return RunRecord.from_dict(fake_result(cfg, [0.010 + 0.001 * cfg.measure.repeat]))

    pts = with_repeats([make_run_config(model="fcn5_tiny", batch_size=n) for n in (1, 2)], 3)
    with ResultStore(tmp_path / "r.db") as store:
        out = execute(pts[:4], store, runner=runner, show_progress=False)  # stopped after 4
        assert out.ran == 4 and calls == [(1, 0), (2, 0), (1, 1), (2, 1)]
        calls.clear()
        out = execute(pts, store, runner=runner, show_progress=False)
        assert (out.ran, out.skipped) == (2, 4) and calls == [(1, 2), (2, 2)]
        rows = store.rows()
    assert len(rows) == 6 and len({r["run_key"] for r in rows}) == 6


# --- the comparison -----------------------------------------------------------------------

def fake_result(cfg, medians_s, status="ok", ci_rel=0.02):
    """A stored-looking result of ``cfg`` whose median is ``medians_s[0]`` (s) with a CI of
    ``+-ci_rel`` of it."""
    r = new_record(cfg, status, None if status == "ok" else "boom").to_dict()
    if status == "ok":
        m = medians_s[0]
        times = [m * 0.99, m, m * 1.01]
        s = summarize(times).to_dict()
        s.update(median=m, ci_low=m * (1 - ci_rel), ci_high=m * (1 + ci_rel))
        r.update(summary=s, throughput=throughput(3, cfg.global_batch, sum(times)),
                 samples={"measure": times}, n_measured=3, steady_state=True)
    return r


def _h200_store(path):
    """resnet56 b=128 fp32 on the H200 in four processes (15.3, 21.2, 18.7, 15.7 ms, each with
    a +-2% CI), a point with two ok runs and a crash, one with a single ok run."""
    base = make_run_config(model="resnet56", batch_size=128, device="cpu")
    two = make_run_config(model="fcn5_tiny", batch_size=8)
    one = make_run_config(model="fcn5_tiny", batch_size=16)
    with ResultStore(path) as s:
        for k, ms in enumerate((15.3, 21.2, 18.7, 15.7)):
            s.add(fake_result(base.with_(repeat=k), [ms / 1e3]))
        s.add(fake_result(two, [0.010], ci_rel=0.5))
        s.add(fake_result(two.with_(repeat=1), [0.012], ci_rel=0.5))
        s.add(fake_result(two.with_(repeat=2), [], status="crash"))
        s.add(fake_result(one, [0.020]))
        s.add(fake_result(one.with_(repeat=1), [], status="oom"))
    return base


def test_repeat_runs_match_hand_computed_values(tmp_path):
    from dlperf.report.compare import repeat_runs, repeats_markdown

    base = _h200_store(tmp_path / "r.db")
    with ResultStore(tmp_path / "r.db") as s:
        got = repeat_runs(s.records())
    assert [g["model"] for g in got] == ["fcn5_tiny", "resnet56"]  # b=16 has one ok run only
    small, r56 = got
    assert r56["point_key"] == base.run_key() and r56["repeats"] == [0, 1, 2, 3]
    assert r56["medians_ms"] == pytest.approx([15.3, 21.2, 18.7, 15.7])
    mean = (15.3 + 21.2 + 18.7 + 15.7) / 4  # 17.725
    # deviations -2.425 3.475 0.975 -2.025: squares sum to 23.0075, / (n - 1) = 7.66917
    stdev = math.sqrt(23.0075 / 3)
    assert r56["mean_ms"] == pytest.approx(mean, rel=1e-12)
    assert r56["stdev_ms"] == pytest.approx(stdev, rel=1e-12)
    assert r56["cv"] == pytest.approx(stdev / mean, rel=1e-12)  # 0.156
    assert r56["olympic_mean_ms"] == pytest.approx((15.7 + 18.7) / 2, rel=1e-12)  # 17.2
    assert (r56["min_ms"], r56["max_ms"]) == pytest.approx((15.3, 21.2))
    # Student's t 95% CI of the mean, 3 degrees of freedom: t = 3.182446
    half = 3.182446305284263 * stdev / 2
    assert (r56["mean_ci_low_ms"], r56["mean_ci_high_ms"]) == pytest.approx(
        (mean - half, mean + half), rel=1e-9)
    assert r56["within_ci_half"] == pytest.approx(0.02)
    assert r56["between_dominates"] is True and r56["between_over_within"] == pytest.approx(
        stdev / mean / 0.02)
    # two ok runs and a crash: no olympic mean; a CV of 13.1% inside +-50% CIs is not flagged
    assert (small["n"], small["failed"], small["olympic_mean_ms"]) == (2, 1, None)
    assert small["stdev_ms"] == pytest.approx(math.sqrt(2.0))  # 10 and 12 ms
    assert small["between_dominates"] is False
    md = repeats_markdown(got)
    assert "resnet56 torch/eager cpu fp32 b=128 synthetic | 4 | 15.30, 21.20, 18.70, 15.70" in md
    assert "17.20" in md and "15.6%" in md and "**between-run > within-run**" in md
    assert "| 2 (+1 failed) |" in md


def cli(*args):
    """``dlperf ARGS`` in this process (no worker runs): (exit code, stdout + stderr)."""
    from typer.testing import CliRunner

    from dlperf.cli import app

    r = CliRunner().invoke(app, list(args))
    return r.exit_code, r.output


def test_compare_repeats_formats_and_report(tmp_path):
    db = tmp_path / "r.db"
    _h200_store(db)
    rc, text = cli("results", "--db", str(db), "--compare", "repeats", "-f", "json")
    assert rc == 0, text
    js = json.loads(text)
    assert [d["n"] for d in js] == [2, 4] and js[1]["olympic_mean_ms"] == pytest.approx(17.2)
    rc, text = cli("results", "--db", str(db), "--compare", "repeats", "-f", "csv")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert rows[1]["repeats"] == "0 1 2 3" and float(rows[1]["cv"]) == pytest.approx(
        math.sqrt(23.0075 / 3) / 17.725)
    rc, text = cli("results", "--db", str(db), "--compare", "repeats")
    assert rc == 0 and "between-run > within-run" in text
    # the main table: one row per stored result, repeats labelled
    rc, text = cli("results", "--db", str(db))
    assert text.count("resnet56") == 4 and "resnet56 #3" in text
    rc, text = cli("results", "--db", str(db), "-f", "csv", "--model", "resnet56")
    assert [r["repeat"] for r in csv.DictReader(io.StringIO(text))] == ["0", "1", "2", "3"]
    rc, text = cli("report", "--db", str(db), "-o", str(tmp_path / "rep"))
    assert rc == 0, text
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Repeated runs: between-run variation" in md and "15.30, 21.20, 18.70, 15.70" in md


def test_other_comparisons_pair_repeat_k_with_repeat_k():
    from dlperf.report.compare import mode_speedups

    def row(i, mode, rep, med):
        return {"id": i, "status": "ok", "model": "m", "device": "cuda", "precision": "fp32",
                "batch_size": 8, "data": "synthetic", "threads": None, "framework": "torch",
                "mode": mode, "step_time_median_s": med,
                "result_json": json.dumps({"repeat": rep})}

    rows = [row(1, "eager", 0, 2.0), row(2, "graph", 0, 1.0), row(3, "eager", 1, 3.0),
            row(4, "graph", 1, 1.0)]
    samples = {1: [2.0] * 5, 2: [1.0] * 5, 3: [3.0] * 5, 4: [1.0] * 5}
    got = mode_speedups(as_records(rows), samples.__getitem__)
    assert [(c["other"], c["speedup"]) for c in got] == [("torch/graph", 2.0),
                                                         ("torch/graph #1", 3.0)]


def test_scaling_series_pair_repeat_k_with_repeat_k():
    from dlperf.perfmodel.scaling import scaling_points

    def row(i, n, rep, t):
        return {"id": i, "status": "ok", "model": "m", "framework": "torch", "mode": "eager",
                "device": "cuda", "precision": "fp32", "data": "synthetic", "threads": None,
                "grad_accum": 1, "batch_size": 64 * n, "per_device_batch": 64, "world_size": n,
                "nnodes": 1, "step_time_median_s": t, "samples_per_s": 64 * n / t,
                "result_json": json.dumps({"config": {"repeat": rep}})}

    rows = [row(1, 1, 0, 1.0), row(2, 1, 1, 2.0), row(3, 2, 0, 1.25), row(4, 2, 1, 2.0)]
    weak = [(p["repeat"], p["devices"], p["efficiency"]) for p in scaling_points(as_records(rows))
            if p["scaling"] == "weak"]
    assert weak == [(0, 1, 1.0), (0, 2, pytest.approx(0.8)), (1, 1, 1.0), (1, 2, 1.0)]


# --- end to end: --repeats on the command line --------------------------------------------

def test_run_repeats_stores_each_run_and_resumes_per_repeat(tmp_path):
    """A point run before --repeats existed (plain `dlperf run`) is repeat 0: `--repeats 3`
    runs only repeats 1 and 2, each in its own worker, each stored under its own key."""
    db = tmp_path / "r.db"
    args = ("run", "--framework", "fake", "--model", "fcn5_tiny", "-b", "8", "--device", "cpu",
            "--min-iters", "5", "--min-time", "0", "--no-ceilings", "--db", str(db), *STEP)
    r = dlperf(*args)
    assert r.returncode == 0 and "1 run, 0 already" in r.stderr, r.stderr
    r = dlperf(*args, "--repeats", "3")
    assert r.returncode == 0 and "2 run, 1 already" in r.stderr, r.stderr
    assert "synthetic #2" in r.stderr and "mean of runs" in r.stdout
    con = sqlite3.connect(db)
    stored = con.execute("SELECT run_key, result_json FROM results ORDER BY id").fetchall()
    con.close()
    keys = [k for k, _ in stored]
    res = [json.loads(j) for _, j in stored]
    assert len(set(keys)) == 3 and [x["repeat"] for x in res] == [0, 1, 2]
    assert {x["point_key"] for x in res} == {keys[0]}


@pytest.mark.parametrize("value", ["0", "-1"])
def test_bad_repeats_is_a_clear_error(value, tmp_path):
    rc, text = cli("run", "--model", "fcn5_tiny", "--device", "cpu", "--repeats", value,
                   "--db", str(tmp_path / "r.db"))
    assert rc == 2 and f"--repeats {value} is not a valid number of runs" in text, text
    assert "Traceback" not in text and not (tmp_path / "r.db").exists()


def test_bad_repeats_in_a_sweep_file_is_a_clear_error(tmp_path):
    sw = tmp_path / "s.yaml"
    sw.write_text("name: s\ndefaults: {model: fcn5_tiny, device: cpu}\n"
                  "grid:\n  - batch_size: 8\n    repeats: 0\n")
    rc, text = cli("sweep", str(sw), "--db", str(tmp_path / "r.db"))
    assert rc == 2 and "grid[0].repeats: 0 is not a valid" in text, text
    assert not (tmp_path / "r.db").exists()


def test_between_run_interval_of_times_stops_at_zero():
    from dlperf.stats import between_run
    # three runs far apart (a busy machine): the t interval of the mean reaches below zero
    vals = [0.64e-3, 1.13e-3, 216e-3]
    free = between_run(vals)
    assert free["mean_ci_low"] < 0
    cut = between_run(vals, lower_bound=0.0)
    assert cut["mean_ci_low"] == 0.0 and cut["mean_ci_high"] == free["mean_ci_high"]
    assert between_run([1.0, 1.1, 1.2], lower_bound=0.0)["mean_ci_low"] == pytest.approx(
        between_run([1.0, 1.1, 1.2])["mean_ci_low"])  # far from zero: unchanged


def test_plot_point_of_repeats_is_the_median_of_runs_with_their_range():
    import json

    from dlperf.report.plots import _point

    def row(rep, med, created, sps=1000.0):
        return {"step_time_median_s": med, "step_time_ci_low_s": med * 0.99,
                "step_time_ci_high_s": med * 1.01, "samples_per_s": sps, "created_at": created,
                "run_key": f"k{rep}{created}", "result_json": json.dumps({"repeat": rep})}
    m, lo, hi, sps, n = _point(as_records([row(0, 0.010, "1")]))
    assert (n, m) == (1, pytest.approx(10.0)) and lo == pytest.approx(9.9) and sps == 1000.0
    # three repeats, repeat 1 re-run (the newest of it counts): median of 10, 12, 30 ms
    rows = [row(0, 0.010, "1", 100.0), row(1, 0.500, "2"), row(1, 0.012, "5", 80.0),
            row(2, 0.030, "3", 30.0)]
    m, lo, hi, sps, n = _point(as_records(rows))
    assert n == 3 and m == pytest.approx(12.0) and lo == pytest.approx(10.0)
    assert hi == pytest.approx(30.0) and sps == pytest.approx(80.0)


def test_compare_in_a_terminal_draws_tables_and_piped_stays_markdown(tmp_path):
    import pty

    db = tmp_path / "r.db"
    r = dlperf("run", "--framework", "fake", "--model", "fcn5_tiny", "-b", "8", "--device", "cpu",
               "--min-iters", "5", "--min-time", "0", "--no-ceilings", "--repeats", "2",
               "--db", str(db), *STEP)
    assert r.returncode == 0, r.stderr
    piped = dlperf("results", "--db", str(db), "--compare", "repeats")
    assert piped.returncode == 0 and "|---|" in piped.stdout
    master, slave = pty.openpty()
    p = subprocess.run([sys.executable, "-m", "dlperf", "results", "--db", str(db), "--compare",
                        "repeats"], stdout=slave, stderr=subprocess.PIPE, timeout=120,
                       env={**os.environ, **FAKE_ENV, "COLUMNS": "200"})
    os.close(slave)
    chunks = []
    while True:
        try:
            b = os.read(master, 65536)
        except OSError:
            break
        if not b:
            break
        chunks.append(b)
    os.close(master)
    shown = b"".join(chunks).decode(errors="replace")
    assert p.returncode == 0, p.stderr
    assert "─" in shown and "|---|" not in shown and "mean of runs" in shown
