"""A sweep with a missing real data set: its points are stored ``unavailable`` and the rest runs;
corrupt or ill-fitting data still refuse the whole sweep (fake framework; DataMissing classes)."""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from dlperf.config import make_run_config
from dlperf.errors import DataError, DataMissing

FAKE_ENV = {"DLPERF_FAKE_FRAMEWORK": "1"}


def dlperf(*args, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "dlperf", *args], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200", **FAKE_ENV, **(env or {})},
                          timeout=timeout)


def write_sweep(path: Path, real: str, model: str = "resnet50_tiny") -> Path:
    """Two synthetic points (b=2, 4) and one on the data set ``real`` (b=2)."""
    path.write_text(f"""
name: missing-data
defaults:
  framework: fake
  model: {model}
  options: {{step_s: 0.002}}
  timeout_s: 60
  iterations: {{min_iters: 5, min_time_s: 0.0, warmup_window: 2, min_warmup_iters: 0}}
grid:
  - batch_size: [2, 4]
  - batch_size: 2
    data: {real}
""")
    return path


def rows(db: Path) -> list[tuple]:
    con = sqlite3.connect(db)
    got = con.execute("SELECT batch_size, data, status, error, run_key, result_json FROM results "
                      "ORDER BY id").fetchall()
    con.close()
    return got


def test_missing_data_is_stored_unavailable_and_the_rest_runs_then_resume_measures_it(tmp_path):
    root, db = tmp_path / "root", tmp_path / "s.db"
    root.mkdir()
    sw = write_sweep(tmp_path / "s.yaml", "imagefolder")
    env = {"DLPERF_DATA": str(root)}
    r = dlperf("sweep", str(sw), "--db", str(db), env=env)
    assert r.returncode == 1, r.stderr
    err = " ".join(r.stderr.split())  # rich wraps lines
    # one warning, before the results: the data set, how many points, the fix
    head = "warning: 1 of 3 points to run need data that are not here"
    assert err.count("need data that are not here") == 1 and head in err
    assert err.index(head) < err.index("ok resnet50_tiny")
    assert "data 'imagefolder': 1 point:" in err
    assert f"dlperf data make-imagefolder {root / 'imagefolder'}" in err
    assert "2 run, 0 already in" in err and "1 not run (data missing)" in err
    assert "1 point(s) unavailable" in err
    got = rows(db)
    assert [(b, d, s) for b, d, s, *_ in got] == [
        (2, "imagefolder", "unavailable"), (2, "synthetic", "ok"), (4, "synthetic", "ok")]
    msg = got[0][3]
    assert msg.startswith(f"data set 'imagefolder' not found under data root {root} "
                          f"(from DLPERF_DATA)") and "make-imagefolder" in msg
    stored = json.loads(got[0][5])
    assert "worker" not in stored  # recorded without starting a worker
    assert stored["config"]["input"]["data"] == "imagefolder" and stored["env"]["hostname"]
    # `dlperf results` shows it like any result
    # (an ImageFolder point is the 0-worker pipeline point; 250 columns: the width this test
    # was written for, before tables honoured $COLUMNS, so the status cell is not wrapped
    # among the other columns)
    table = dlperf("results", "--db", str(db), env={"COLUMNS": "250"}).stdout
    assert "unavailable: data set 'imagefolder' not" in " ".join(table.split())
    assert "imagefolder, 0 wkr" in table
    # `dlperf run` of that point alone is refused as before: a clear error, exit 2, no result
    one = dlperf("run", "--framework", "fake", "--model", "resnet50_tiny", "--data",
                 "imagefolder", "--db", str(tmp_path / "one.db"), env=env)
    assert one.returncode == 2 and "not found under data root" in one.stderr
    assert not (tmp_path / "one.db").exists()

    made = dlperf("data", "make-imagefolder", str(root / "imagefolder"), "--images", "4",
                  "--classes", "2", "--size", "32")
    assert made.returncode == 0, made.stderr
    r = dlperf("sweep", str(sw), "--db", str(db), env=env)
    assert r.returncode == 0, r.stderr
    assert "resuming: 2 of 3 points already" in r.stderr and "not here" not in r.stderr
    assert "1 run, 2 already in" in " ".join(r.stderr.split())
    again = rows(db)
    assert again[:3] == got  # nothing lost or re-measured
    assert [(b, d, s) for b, d, s, *_ in again[3:]] == [(2, "imagefolder", "ok")]
    assert again[3][4] == got[0][4]  # the same point (run key): the latest row replaces it


@pytest.mark.parametrize("case, needle", [
    ("corrupt", "corrupt or truncated gzip file"),
    ("misfit", "does not fit model 'resnet50_tiny'"),
])
def test_corrupt_or_ill_fitting_data_still_refuse_the_whole_sweep(tmp_path, case, needle):
    """A user error costs no measurement: refused (exit 2) before anything runs, even when the
    sweep also has a missing data set and synthetic points."""
    root, db = tmp_path / "root", tmp_path / "s.db"
    if case == "corrupt":
        (root / "mnist").mkdir(parents=True)
        (root / "mnist" / "t10k-images-idx3-ubyte.gz").write_bytes(b"\x1f\x8b" + b"\x00" * 50)
        (root / "mnist" / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(b"\x00" * 9))
        real = "mnist"
    else:
        (root / "ptb").mkdir(parents=True)
        (root / "ptb" / "ptb.test.txt").write_text("a b c d e f g h\n" * 50)
        real = "ptb"
    sw = write_sweep(tmp_path / "s.yaml", real)
    with sw.open("a") as f:
        f.write("  - batch_size: 2\n    data: imagefolder\n")  # missing: alone it would not refuse
    r = dlperf("sweep", str(sw), "--db", str(db), env={"DLPERF_DATA": str(root)})
    assert r.returncode == 2, r.stderr
    assert needle in " ".join(r.stderr.split()) and "Traceback" not in r.stderr
    assert not db.exists()  # nothing ran, nothing stored


def test_what_counts_as_missing_data(tmp_path, monkeypatch):
    """DataMissing (a DataError) for data that are not there; a plain DataError for data that
    are there but wrong."""
    from dlperf.data import load_dataset

    monkeypatch.delenv("DLPERF_DATA", raising=False)
    empty = tmp_path / "empty"
    empty.mkdir()
    (tmp_path / "loose").mkdir()
    (tmp_path / "loose" / "a.jpg").write_bytes(b"x")
    (tmp_path / "noimg" / "class_0").mkdir(parents=True)
    (tmp_path / "half" / "mnist").mkdir(parents=True)
    (tmp_path / "half" / "mnist" / "t10k-images-idx3-ubyte").write_bytes(b"\x00" * 16)
    missing = [("mnist", None), ("mnist", tmp_path / "nope"), ("cifar10", empty),
               (str(tmp_path / "nope" / "x.bin"), None), (f"imagefolder:{tmp_path / 'nope'}", None),
               (f"imagefolder:{empty}", None), (f"imagefolder:{tmp_path / 'noimg'}", None)]
    for name, data_dir in missing:
        with pytest.raises(DataMissing):
            load_dataset(name, data_dir)
    (empty / "cifar10").mkdir()
    with pytest.raises(DataMissing, match="no data files in"):  # a folder without its files
        load_dataset("cifar10", empty)
    for name, data_dir, match in [(f"imagefolder:{tmp_path / 'loose'}", None, "no class sub"),
                                  ("mnist", tmp_path / "half", "not its partner"),
                                  ("imagenette", None, "unknown dataset")]:
        with pytest.raises(DataError, match=match) as e:
            load_dataset(name, data_dir)
        assert not isinstance(e.value, DataMissing), name


def test_preflight_returns_missing_data_sets_only_when_allowed(tmp_path):
    from dlperf.sweep import preflight

    pts = [make_run_config(model="resnet50_tiny", batch_size=2, data=d,
                           data_dir=str(tmp_path)) for d in ("synthetic", "imagefolder", "cifar10")]
    with pytest.raises(DataMissing, match="'imagefolder' not found"):
        preflight(pts)
    got = preflight(pts, allow_missing=True)
    assert set(got) == {("imagefolder", str(tmp_path)), ("cifar10", str(tmp_path))}
    assert "'cifar10' not found under data root" in got[("cifar10", str(tmp_path))]
    assert preflight(pts[:1], allow_missing=True) == {}


def test_data_gone_after_the_preflight_is_an_unavailable_result_of_the_worker(tmp_path):
    pytest.importorskip("torch")
    from dlperf.config import IterationPolicy
    from dlperf.worker import run_config

    cfg = make_run_config(model="fcn5_tiny", batch_size=2, data=f"imagefolder:{tmp_path / 'x'}",
                          iterations=IterationPolicy(min_iters=2, min_time_s=0.0))
    r = run_config(cfg)
    assert r["status"] == "unavailable" and "is not an existing folder" in r["error"]
