"""Isolation, failures as results, timeouts, and resume after kill -9 (fake framework)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_here import dlperf_here as _here
from dlperf.results.schema import RunRecord

FAKE_ENV = {"DLPERF_FAKE_FRAMEWORK": "1"}
#: The fake framework's step (its option ``step_s``) in these tests' points.
STEP = {"step_s": 0.002}


def dlperf(*args, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "dlperf", *args], capture_output=True, text=True,
                          env={**os.environ, **FAKE_ENV, **(env or {})}, timeout=timeout)


def dlperf_here(*args, env=None):
    """``dlperf ARGS`` in this process (:func:`cli_here.dlperf_here`) with the fake framework,
    for a dry run or a refused sweep (no point runs)."""
    return _here(*args, env={**FAKE_ENV, **(env or {})})


def write_sweep(path: Path, batches, min_time=0.0, timeout_s=60, **options):
    path.write_text(f"""
name: fake-sweep
defaults:
  framework: fake
  model: fcn5_tiny
  options: {json.dumps({**STEP, **options})}
  timeout_s: {timeout_s}
  iterations: {{min_iters: 5, min_time_s: {min_time}, warmup_window: 2, min_warmup_iters: 0}}
grid:
  - batch_size: {list(batches)}
""")
    return path


def statuses(db):
    con = sqlite3.connect(db)
    rows = con.execute("SELECT batch_size, status, error FROM results ORDER BY id").fetchall()
    con.close()
    return rows


def test_failures_are_recorded_and_the_sweep_goes_on(tmp_path):
    # 512 hangs until its timeout: 4 s, several times what a fake point takes on a busy host
    batches = [1, 64, 128, 256, 512, 1024, 2]
    sw = write_sweep(tmp_path / "s.yaml", batches, timeout_s=4,
                     fail={64: "oom", 128: "crash", 256: "nan", 512: "hang", 1024: "error"})
    r = dlperf("sweep", str(sw), "--db", str(tmp_path / "r.db"))
    assert r.returncode == 0, r.stderr
    got = {b: (s, e) for b, s, e in statuses(tmp_path / "r.db")}
    assert {b: s for b, (s, _) in got.items()} == {
        1: "ok", 64: "oom", 128: "crash", 256: "nan_loss", 512: "timeout", 1024: "error", 2: "ok"}
    assert "scripted out of memory" in got[64][1]
    assert "code 9" in got[128][1]
    assert "timeout" in got[512][1]
    # the dry run marks the 4 final failures as failed, not stored ('error' is pending again)
    dry = dlperf_here("sweep", str(sw), "--db", str(tmp_path / "r.db"), "--dry-run")
    tags = [ln.split()[0] for ln in dry.stdout.splitlines()[:7]]
    assert sorted(tags) == ["failed"] * 4 + ["pending"] + ["stored"] * 2, dry.stdout
    assert "(4 of them failed: timeout, crash, OOM, ...; add --retry-failed" in dry.stdout
    dry = dlperf_here("sweep", str(sw), "--db", str(tmp_path / "r.db"), "--dry-run", "--retry-failed")
    assert "5 pending, 2 stored" in dry.stdout and "of them failed" not in dry.stdout
    # run again: the 4 final failures are kept, and the output says how to measure them again
    # ('error' is not final: that point runs again, and with the fault gone it is ok; the
    # scripted faults are options, not part of a point's run key)
    write_sweep(sw, batches, timeout_s=4)
    r = dlperf("sweep", str(sw), "--db", str(tmp_path / "r.db"))
    assert r.returncode == 0, r.stderr
    assert "6 of 7 points already in" in r.stderr
    assert "4 of them only failed before" in r.stderr and "--retry-failed" in r.stderr
    r = dlperf("sweep", str(sw), "--db", str(tmp_path / "r.db"), "--retry-failed")
    assert r.returncode == 0, r.stderr
    assert "only failed before" not in r.stderr
    latest = {}
    for b, st, _ in statuses(tmp_path / "r.db"):
        latest[b] = st
    assert set(latest.values()) == {"ok"}


def test_resume_after_kill_9_loses_and_redoes_nothing(tmp_path):
    db = tmp_path / "r.db"
    batches = list(range(1, 9))
    sw = write_sweep(tmp_path / "s.yaml", batches, min_time=0.4)
    cmd = [sys.executable, "-m", "dlperf", "sweep", str(sw), "--db", str(db)]
    proc = subprocess.Popen(cmd, env={**os.environ, **FAKE_ENV}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            if db.exists() and len(statuses(db)) >= 2:
                break
        except sqlite3.OperationalError:  # the file exists, its tables not yet (one transaction)
            pass
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)  # the sweep process, mid-point
    proc.wait()
    first = statuses(db)
    assert 2 <= len(first) < len(batches)
    time.sleep(1.0)  # the orphaned worker notices its parent died and exits
    r = dlperf("sweep", str(sw), "--db", str(db))
    assert r.returncode == 0, r.stderr
    assert f"{len(first)} of {len(batches)} points already" in r.stderr
    final = statuses(db)
    assert final[: len(first)] == first  # nothing lost
    assert sorted(b for b, _, _ in final) == batches  # each point exactly once
    assert all(s == "ok" for _, s, _ in final)


def test_orphaned_worker_exits_when_its_parent_dies(tmp_path):
    # The worker's watchdog ends it once the launching process is gone (no GPU left busy).
    cfg = tmp_path / "c.json"
    cfg.write_text('{"model": "fcn5_tiny", "framework": "fake", "batch_size": 512, '
                   '"options": {"fail": {"512": "hang"}}}')
    # A parent pid that is not ours: the watchdog sees getppid() != it and exits with code 3.
    p = subprocess.run([sys.executable, "-m", "dlperf.worker", str(cfg), str(tmp_path / "o.json"),
                        "1"], env={**os.environ, **FAKE_ENV},
                       timeout=30)
    assert p.returncode == 3


def test_shards_split_a_sweep_into_disjoint_parts_sharing_one_db(tmp_path):
    """--shard 0/2 and 1/2 run every other point each, side by side into one db; together they
    are the whole grid, once; a bad --shard is refused before anything runs."""
    sw = write_sweep(tmp_path / "s.yaml", [1, 2, 3, 4, 5])
    db = tmp_path / "s.db"
    procs = [subprocess.Popen([sys.executable, "-m", "dlperf", "sweep", str(sw), "--db", str(db),
                               "--shard", f"{k}/2"], env={**os.environ, **FAKE_ENV},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for k in (0, 1)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert all("share its CPU cores" in " ".join(o.split()) for o in outs)  # CPU points
    rows = statuses(db)
    assert sorted(b for b, st, _ in rows) == [1, 2, 3, 4, 5]
    assert all(st == "ok" for _, st, _ in rows)
    dry = dlperf_here("sweep", str(sw), "--dry-run", "--shard", "1/2")
    assert dry.returncode == 0 and "2 points" in dry.stdout and "b=2" in dry.stdout
    assert "2 points: 0 pending, 2 stored" in dry.stdout  # its default db: s.db, the one used
    # against the db: every point stored, and the file read, not changed
    before = db.read_bytes()
    dry = dlperf_here("sweep", str(sw), "--db", str(db), "--dry-run", env={"COLUMNS": "300"})
    assert dry.returncode == 0 and "5 points: 0 pending, 5 stored in" in dry.stdout
    assert all(ln.startswith("stored ") for ln in dry.stdout.splitlines()[:5])
    assert db.read_bytes() == before
    dry = dlperf_here("sweep", str(sw), "--db", str(db), "--dry-run", "--restart")
    assert "5 pending, 0 stored" in dry.stdout
    (tmp_path / "foreign.db").write_bytes(b"not a database" * 100)
    dry = dlperf_here("sweep", str(sw), "--db", str(tmp_path / "foreign.db"), "--dry-run")
    assert dry.returncode == 2 and "not a dlperf results database" in " ".join(dry.stderr.split())
    bad = dlperf_here("sweep", str(sw), "--db", str(tmp_path / "x.db"), "--shard", "2/2")
    assert bad.returncode == 2 and "--shard '2/2'" in bad.stderr + bad.stdout
    assert not (tmp_path / "x.db").exists()


def test_result_line_prints_brackets_from_errors_and_labels():
    """Error texts and labels with brackets are printed as written, not eaten as rich markup."""
    from rich.console import Console

    from dlperf.sweep import result_line

    failed = {"status": "unavailable", "model": "lstm_tiny", "framework": "jax", "mode": "xla",
              "device": "cpu", "precision": "fp32", "batch_size": 32, "data": "synthetic",
              "error": "jax not installed; pip install 'dlperf[jax]' (GPUs: 'jax[cuda12]')"}
    c = Console(record=True, width=300)
    c.print(result_line(RunRecord.from_dict(failed)), highlight=False)
    text = c.export_text()
    assert "pip install 'dlperf[jax]'" in text and "'jax[cuda12]'" in text
    ok = {**failed, "status": "ok", "error": None, "throughput": {"samples_per_s": 100.0},
          "summary": {"median": 0.01, "ci_low": 0.009, "ci_high": 0.011},
          "data_wait": {"share": 0.5, "input_bound": True}, "warnings": ["see [docs]"]}
    c = Console(record=True, width=300)
    c.print(result_line(RunRecord.from_dict(ok)), highlight=False)
    text = c.export_text()
    assert "data wait 50.0% [input-bound]" in text and "warning: see [docs]" in text


def test_list_shows_the_install_hint_with_its_extra(monkeypatch, capsys):
    """`dlperf list` names the extra to install (``dlperf[jax]``), not a bare ``dlperf``."""
    from typer.testing import CliRunner

    import dlperf.cli as cli
    from dlperf.cli import common, list_

    monkeypatch.setattr(list_, "installed_version", lambda n: (
        "no: jax is not installed; pip install 'dlperf[jax]'" if n == "jax" else "1.0"))
    monkeypatch.setattr(common, "out", __import__("rich.console").console.Console(
        record=True, width=300))
    r = CliRunner().invoke(cli.app, ["list", "frameworks"])
    assert r.exit_code == 0, r.output
    assert "pip install 'dlperf[jax]'" in common.out.export_text()


def test_a_cuda_sweep_without_a_gpu_is_refused_before_anything_runs(tmp_path):
    """As `dlperf run --device cuda`: one error, exit 2, no failed row per point."""
    from dlperf.config import resolve_device

    if resolve_device("auto") == "cuda":
        pytest.skip("a CUDA GPU is usable here")
    sw = tmp_path / "s.yaml"
    sw.write_text(write_sweep(tmp_path / "c.yaml", [1, 2]).read_text()
                  .replace("framework: fake", "framework: fake\n  device: cuda"))
    db = tmp_path / "r.db"
    r = dlperf("sweep", str(sw), "--db", str(db))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "2 of 2 point(s) ask for device cuda" in " ".join(r.stderr.split())
    assert "Traceback" not in r.stderr
    assert not db.exists()
    # listing needs no GPU (a login node), but the dry run ends with the sweep's refusal
    dry = dlperf_here("sweep", str(sw), "--db", str(db), "--dry-run")
    assert dry.returncode == 0
    counts = dry.stdout.splitlines()[2]
    assert counts.startswith("2 points: 2 pending") and "would not start on this host" in counts
    last = " ".join(dry.stderr.split())
    assert last.endswith("2 of 2 point(s) ask for device cuda, but no CUDA GPU is usable here; "
                         "run the sweep on a GPU machine, or set device: cpu (or auto) in the "
                         "file")
    assert "the sweep would stop before its first point (exit 2)" in last
    assert not db.exists()


def test_more_threads_than_usable_cpus_is_a_warning_of_the_result(tmp_path):
    """--threads above the CPUs the worker may use measures the oversubscription: the result
    says so (a 64-thread fcn5_tiny on 2 CPUs ran 36x slower than on 1)."""
    import json

    usable = len(os.sched_getaffinity(0))
    db = tmp_path / "r.db"
    r = dlperf("run", "--framework", "fake", "--model", "fcn5_tiny", "--batch-size", "8",
               "--device", "cpu", "--threads", f"{usable},{usable + 1}", "--min-iters", "5",
               "--min-time", "0", "--no-ceilings", "--db", str(db))
    assert r.returncode == 0, r.stderr
    con = sqlite3.connect(db)
    got = {json.loads(j)["config"]["hardware"]["threads"]: json.loads(j)["warnings"]
           for (j,) in con.execute("SELECT result_json FROM results")}
    con.close()
    assert not any("oversubscribed" in w for w in got[usable])
    assert any(f"{usable + 1} threads on {usable} usable CPUs" in w for w in got[usable + 1])
