"""`dlperf sweep --slurm-array FILE.sbatch`: a sweep as a SLURM job array, one array task per
`--shard K/N`, each into its own results file (fake framework)."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from cli_here import dlperf_here as _here
from dlperf.cli.sweep import shard_points
from dlperf.launch.slurm import array_script, shard_db_path

FAKE_ENV = {"DLPERF_FAKE_FRAMEWORK": "1"}


def dlperf(*args, cwd=None, env=None):
    return subprocess.run([sys.executable, "-m", "dlperf", *args], capture_output=True, text=True,
                          env={**os.environ, **FAKE_ENV, **(env or {})}, timeout=180, cwd=cwd)


def dlperf_here(*args):
    """``dlperf ARGS`` in this process (:func:`cli_here.dlperf_here`) with the fake framework,
    for a sweep refused before it writes anything."""
    return _here(*args, env=FAKE_ENV)


def write_sweep(path: Path, batches) -> Path:
    path.write_text(f"""
name: array-sweep
defaults:
  framework: fake
  model: fcn5_tiny
  options: {{step_s: 0.002}}
  timeout_s: 60
  iterations: {{min_iters: 3, min_time_s: 0.0, warmup_window: 2, min_warmup_iters: 0}}
grid:
  - batch_size: {list(batches)}
""")
    return path


class _P:
    def __init__(self, key):
        self.key = key

    def point_key(self):
        return self.key


def test_shards_go_by_point_and_keep_repeats_together():
    pts = [_P(k) for k in "aabcdde"]  # a and d have two repeats each
    parts = [[p.key for p in shard_points(pts, k, 2)] for k in (0, 1)]
    assert parts == [["a", "a", "c", "e"], ["b", "d", "d"]]


def test_array_script_has_one_task_per_shard():
    text = array_script("/s/sweep.yaml", 3, db="/r/out.db", gpus_per_task=2,
                        options=["--tag", "v1"], python="python3")
    assert "#SBATCH --array=0-2" in text and "#SBATCH --gpus-per-task=2" in text
    run = [ln for ln in text.splitlines() if ln.startswith("exec ")]
    assert run == ['exec python3 -m dlperf sweep /s/sweep.yaml --tag v1 --shard '
                   '"${SLURM_ARRAY_TASK_ID}/3" --db "/r/out.shard${SLURM_ARRAY_TASK_ID}.db"']
    assert "dlperf merge /r/out.shard0.db /r/out.shard1.db /r/out.shard2.db --db /r/out.db" \
        in text
    assert "gpus" not in array_script("/s/sweep.yaml", 1, db="/r/out.db")
    with pytest.raises(ValueError, match="at least one task"):
        array_script("/s/sweep.yaml", 0, db="/r/out.db")


@pytest.mark.slow
def test_the_array_task_runs_its_shard(tmp_path):
    """The script written for 5 points in 2 tasks, run with SLURM_ARRAY_TASK_ID=1, measures
    exactly shard 1/2 into its own file; the merged files hold the whole grid once."""
    sw = write_sweep(tmp_path / "s.yaml", [1, 2, 3, 4, 5])
    job = tmp_path / "job.sbatch"
    db = tmp_path / "results" / "s.db"
    db.parent.mkdir()
    r = dlperf("sweep", str(sw), "--slurm-array", str(job), "--shards", "2", "--db", str(db))
    assert r.returncode == 0, r.stdout + r.stderr
    text = job.read_text()
    assert "#SBATCH --array=0-1" in text and "gpus" not in text  # CPU points
    assert not db.exists() and not Path(shard_db_path(str(db), "0")).exists()  # nothing ran
    want = {1: [2, 4], 0: [1, 3, 5]}  # as `dlperf sweep --shard K/2` (test_sweep.py)
    for k in (1, 0):
        out = subprocess.run(["bash", str(job)], capture_output=True, text=True, timeout=180,
                             cwd=tmp_path, env={**os.environ, **FAKE_ENV,
                                                "SLURM_ARRAY_TASK_ID": str(k)})
        assert out.returncode == 0, out.stdout + out.stderr
        con = sqlite3.connect(shard_db_path(str(db), str(k)))
        rows = con.execute("SELECT batch_size, status FROM results").fetchall()
        con.close()
        assert sorted(b for b, _ in rows) == want[k] and {s for _, s in rows} == {"ok"}
    merge = re.search(r"#   (.* -m dlperf merge .*)$", text, re.M).group(1)
    m = subprocess.run(merge, shell=True, capture_output=True, text=True, timeout=120)
    assert m.returncode == 0, m.stderr
    con = sqlite3.connect(db)
    assert sorted(b for (b,) in con.execute("SELECT batch_size FROM results")) == [1, 2, 3, 4, 5]
    con.close()
    # without a task id the script refuses instead of running everything
    out = subprocess.run(["bash", str(job)], capture_output=True, text=True, timeout=60,
                         env={k: v for k, v in os.environ.items() if k != "SLURM_ARRAY_TASK_ID"})
    assert out.returncode != 0 and "SLURM_ARRAY_TASK_ID" in out.stderr


def test_bad_array_options_are_refused(tmp_path):
    sw = write_sweep(tmp_path / "s.yaml", [1, 2])
    r = dlperf_here("sweep", str(sw), "--slurm-array", str(tmp_path / "j.sbatch"), "--shards", "3")
    assert r.returncode == 2 and "--shards 3: give 1 to 2" in " ".join(r.stderr.split())
    r = dlperf_here("sweep", str(sw), "--slurm-array", str(tmp_path / "j.sbatch"), "--shard", "0/2")
    assert r.returncode == 2 and "leave out --shard" in r.stderr
    r = dlperf_here("sweep", str(sw), "--shards", "2", "--db", str(tmp_path / "x.db"))
    assert r.returncode == 2 and "--shard K/N" in r.stderr
    assert not (tmp_path / "j.sbatch").exists() and not (tmp_path / "x.db").exists()
