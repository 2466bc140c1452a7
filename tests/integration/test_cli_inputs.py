"""The command line for input pipelines: the ImageFolder generator, --loader-workers, the
input-bound label in results, `results --compare data` and the report (fake framework)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from cli_here import dlperf_here as _here

FAKE_ENV = {"DLPERF_FAKE_FRAMEWORK": "1"}


def dlperf(*args, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "dlperf", *args], capture_output=True, text=True,
                          env={**os.environ, **FAKE_ENV, **(env or {})}, timeout=timeout)


def dlperf_here(*args):
    """``dlperf ARGS`` in this process (:func:`cli_here.dlperf_here`) with the fake framework,
    for the commands that start no run (data, results, report; a refused run)."""
    return _here(*args, env=FAKE_ENV)


def test_make_imagefolder_and_its_errors(tmp_path):
    p = dlperf_here("data", "make-imagefolder", str(tmp_path / "f"), "--images", "6", "--classes", "2",
               "--size", "32")
    assert p.returncode == 0, p.stderr
    assert "wrote 6 JPEGs" in p.stdout and "imagefolder:" in p.stdout
    assert len(list((tmp_path / "f").glob("class_*/*.jpg"))) == 6
    bad = dlperf_here("data", "make-imagefolder", str(tmp_path / "g"), "--images", "3", "--classes", "5")
    assert bad.returncode == 2 and "--classes 5 is more than --images 3" in bad.stderr


def test_loader_workers_with_synthetic_data_is_refused(tmp_path):
    p = dlperf_here("run", "--framework", "fake", "--model", "fcn5_tiny", "--loader-workers", "2",
               "--db", str(tmp_path / "x.db"))
    assert p.returncode == 2 and "needs real data" in p.stderr
    p = dlperf_here("run", "--framework", "fake", "--model", "fcn5_tiny", "--data", "imagefolder:/nope",
               "--db", str(tmp_path / "x.db"))
    assert p.returncode == 2 and "/nope is not an existing folder" in p.stderr


def test_input_bound_runs_are_labelled_and_compared_with_synthetic(tmp_path):
    folder, db = tmp_path / "jpegs", str(tmp_path / "r.db")
    assert dlperf_here("data", "make-imagefolder", str(folder), "--images", "8", "--classes", "2",
                  "--size", "32").returncode == 0
    common = ["--framework", "fake", "--model", "resnet50_tiny", "--batch-size", "4",
              "--min-iters", "20", "--min-time", "0", "--max-warmup-iters", "4", "--db", db,
              "--framework-option", "step_s=0.004"]
    p = dlperf("run", *common)
    assert p.returncode == 0, p.stderr
    # every step waits 4 ms for its batch and computes 4 ms: half of the iteration is input
    p = dlperf("run", *common, "--data", f"imagefolder:{folder}", "--loader-workers", "0,2",
               "--framework-option", "data_wait_s=0.004")
    assert p.returncode == 0, p.stderr
    table = dlperf_here("results", "--db", db).stdout
    assert table.count("input-bound") == 2 and "0 wkr" in table and "2 wkr" in table
    cmp = dlperf_here("results", "--db", db, "--compare", "data", "--format", "json")
    assert cmp.returncode == 0, cmp.stderr
    gaps = json.loads(cmp.stdout)
    assert [g["loader_workers"] for g in gaps] == [0, 2]
    for g in gaps:
        assert g["input_bound"] is True and 0.35 < g["data_wait_share"] < 0.65
        assert 0.3 < g["relative_throughput"] < 0.75  # about half the synthetic speed
        assert g["synthetic_samples_per_s"] > g["real_samples_per_s"]
    md = dlperf_here("results", "--db", db, "--compare", "data").stdout
    assert "| resnet50_tiny | fake/eager |" in md and "**yes**" in md
    rep = dlperf_here("report", "--db", db, "-o", str(tmp_path / "rep"))
    assert rep.returncode == 0, rep.stderr
    text = (tmp_path / "rep" / "report.md").read_text()
    assert "## Input pipelines: real data against synthetic data" in text
    assert "data wait" in text


def test_make_imagefolder_does_not_mix_into_another_data_set(tmp_path):
    # Writing 10 images in 10 classes into a folder of 200 in 4 classes overwrote images of
    # the old set, added 6 one-image classes and said only "wrote 10 JPEGs": a mixed data set.
    import pytest

    from dlperf.config import ConfigError
    from dlperf.data.imagefolder import make_imagefolder

    root = tmp_path / "if"
    make_imagefolder(root, images=8, classes=2, size=16)
    before = sorted(p.relative_to(root) for p in root.rglob("*.jpg"))
    with pytest.raises(ConfigError, match="would not write") as e:
        make_imagefolder(root, images=4, classes=4, size=16)
    assert "class_000/img_000002.jpg" in str(e.value) and "empty folder" in str(e.value)
    with pytest.raises(ConfigError, match="16x16"):
        make_imagefolder(root, images=8, classes=2, size=32)
    assert sorted(p.relative_to(root) for p in root.rglob("*.jpg")) == before
    # the same command again completes (or rewrites) the same set
    (root / "class_001" / "img_000007.jpg").unlink()
    assert make_imagefolder(root, images=8, classes=2, size=16)["images"] == 8
    assert sorted(p.relative_to(root) for p in root.rglob("*.jpg")) == before
