"""``dlperf compare`` end to end with the fake framework: a regression injected on purpose (the
fake's step made 10% slower, its option ``step_s`` or ``slowdown``) is caught with a non-zero exit; two runs of
the same code are not flagged; tags in one file (``run --tag``, ``merge``) compare the same
way, ``results --tag`` filters and the HTML report draws the trend."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from cli_here import dlperf_here as _here

STEP_S = 0.010  # the fake's step: long enough that a 10% change is far above sleep jitter
FAKE_ENV = {"DLPERF_FAKE_FRAMEWORK": "1"}


def dlperf(*args, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "dlperf", *args], capture_output=True, text=True,
                          check=False, env={**os.environ, **FAKE_ENV, **(env or {})}, timeout=timeout)


def dlperf_here(*args):
    """``dlperf ARGS`` in this process (:func:`cli_here.dlperf_here`) with the fake framework,
    for the commands that read files and start no run (compare of files, merge, results,
    report; a refused run)."""
    return _here(*args, env=FAKE_ENV)


def measure(db, tag, step_s):
    """Two runs (--repeats 2: a run-level interval) of one fake point, tagged."""
    r = dlperf("run", "-m", "fcn5_tiny", "--framework", "fake", "-b", "8", "--repeats", "2",
               "--min-iters", "15", "--min-time", "0.15", "--max-warmup-time", "2",
               "--no-ceilings", "--db", str(db), "--tag", tag,
               "--framework-option", f"step_s={step_s}")
    assert r.returncode == 0, r.stderr
    return db


@pytest.fixture(scope="module")
def dbs(tmp_path_factory):
    d = tmp_path_factory.mktemp("cmp")
    return {"base": measure(d / "base.db", "base", STEP_S),
            "same": measure(d / "same.db", "same", STEP_S),
            "slow": measure(d / "slow.db", "slow", STEP_S * 1.10), "dir": d}


@pytest.mark.slow
def test_injected_regression_is_caught_and_same_code_is_not(dbs):
    slow = dlperf_here("compare", str(dbs["base"]), str(dbs["slow"]), "--fail-if-slower", "5%")
    assert slow.returncode == 1, slow.stdout + slow.stderr
    assert "REGRESSION" in slow.stdout and "1 point(s) regressed" in slow.stderr
    m = re.search(r"NEW is (\d\.\d+)x \[(\d\.\d+), (\d\.\d+)\] slower than BASE over 1 point",
                  slow.stdout)
    assert m and 1.05 < float(m.group(1)) < 1.15 and float(m.group(2)) > 1.0, slow.stdout
    assert "| 2 / 2 |" in slow.stdout and "| runs |" in slow.stdout  # both runs, run-level CI
    same = dlperf_here("compare", str(dbs["base"]), str(dbs["same"]), "--fail-if-slower", "5%")
    assert same.returncode == 0, same.stdout + same.stderr
    assert "REGRESSION" not in same.stdout and "regressed" not in same.stderr
    # JSON: the ratio and every run used
    js = dlperf_here("compare", str(dbs["base"]), str(dbs["slow"]), "--format", "json")
    assert js.returncode == 0, js.stderr  # no threshold: no failing exit
    data = json.loads(js.stdout)
    (p,) = data["points"]
    assert p["ci_from"] == "runs" and len(p["base_runs"]) == len(p["new_runs"]) == 2
    assert 1.05 < p["ratio"] < 1.15 and p["ci"][0] > 1.0
    assert [r["tag"] for r in p["new_runs"]] == ["slow", "slow"]


@pytest.mark.slow
def test_tags_in_one_file(dbs):
    hist = dbs["dir"] / "hist.db"
    r = dlperf_here("merge", str(dbs["base"]), str(dbs["same"]), str(dbs["slow"]), "--db", str(hist))
    assert r.returncode == 0, r.stderr
    slow = dlperf_here("compare", "--db", str(hist), "base", "slow", "--fail-if-slower", "5%")
    assert slow.returncode == 1 and "tag 'slow'" in slow.stdout, slow.stdout + slow.stderr
    same = dlperf_here("compare", "--db", str(hist), "tag:base", "same", "--fail-if-slower", "5%")
    assert same.returncode == 0, same.stdout + same.stderr
    bad = dlperf_here("compare", "--db", str(hist), "base", "nope")
    assert bad.returncode == 2 and "tags: base, same, slow" in bad.stderr
    rows = json.loads(dlperf_here("results", "--db", str(hist), "--tag", "slow", "--format", "json"
                             ).stdout)
    assert len(rows) == 2 and all(r["run_key"] for r in rows)
    out = dbs["dir"] / "report"
    r = dlperf_here("report", "--db", str(hist), "-o", str(out), "-f", "html")
    assert r.returncode == 0, r.stderr
    page = (out / "report.html").read_text()
    assert "id=\"plot-trend-0\"" in page and "Across revisions" in page


def copy_db(src, dst):
    """A copy of the results file ``src`` (closed: no write-ahead log beside it) at ``dst``."""
    assert not any(src.with_name(src.name + x).exists() for x in ("-wal", "-journal"))
    shutil.copyfile(src, dst)
    return dst


@pytest.mark.slow
def test_a_new_tag_measures_again(dbs, tmp_path):
    db = copy_db(dbs["base"], tmp_path / "t.db")  # two runs of measure(), tagged "base"
    r = dlperf("run", "-m", "fcn5_tiny", "--framework", "fake", "-b", "8", "--repeats", "2",
               "--min-iters", "15", "--min-time", "0.15", "--no-ceilings", "--db", str(db),
               "--tag", "base", "--framework-option", f"step_s={STEP_S}")
    assert r.returncode == 0 and "2 point(s) already stored with tag 'base'" in r.stderr
    assert "0 run, 2 already in" in " ".join(r.stderr.split()), r.stderr
    r = dlperf("run", "-m", "fcn5_tiny", "--framework", "fake", "-b", "8", "--repeats", "2",
               "--min-iters", "15", "--min-time", "0.15", "--no-ceilings", "--db", str(db),
               "--tag", "two", "--framework-option", f"step_s={STEP_S}")
    assert r.returncode == 0 and "2 run, 0 already in" in r.stderr, r.stderr
    bad = dlperf_here("run", "-m", "fcn5_tiny", "--framework", "fake", "--db", str(db),
                      "--tag", "two words")
    assert bad.returncode == 2 and "--tag 'two words'" in bad.stderr


@pytest.mark.slow
def test_compare_run_alternates_and_gates(dbs, tmp_path):
    """``dlperf compare --run``, the command for CI: BASE and NEW measured alternately (two
    rounds), with run-to-run noise in the fake's steps. Identical sides pass (exit 0, judged);
    NEW made 10% slower by its own environment (the fake's ``slowdown`` in
    ``DLPERF_FAKE_OPTIONS``: both sides run the same flags) fails (exit 1); a NEW file that
    lacks a point of BASE fails with exit 3; an existing gate file is refused without
    --resume."""
    flags = ["--", "-m", "fcn5_tiny", "--framework", "fake", "-b", "8", "--no-ceilings",
             "--max-warmup-time", "2", "--framework-option", "run_noise=0.01",
             "--framework-option", "noise=0.05"]
    seeds = ["--base-env", "DLPERF_FAKE_OPTIONS={seed: 1}"]
    same = dlperf("compare", "--run", str(tmp_path), str(tmp_path), "--rounds", "2", "--db",
                  str(tmp_path / "same.db"), "--fail-if-slower", "5%", *seeds,
                  "--new-env", "DLPERF_FAKE_OPTIONS={seed: 2}", *flags)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "1 point: 1 judged" in same.stdout and "| 2 / 2 |" in same.stdout
    assert "[4/4] round 2 of 2: BASE" in same.stderr  # BASE NEW, NEW BASE
    slow = dlperf("compare", "--run", str(tmp_path), str(tmp_path), "--rounds", "2", "--db",
                  str(tmp_path / "slow.db"), "--fail-if-slower", "5%",
                  "--new-env", "DLPERF_FAKE_OPTIONS={seed: 2, slowdown: 1.10}", *seeds, *flags)
    assert slow.returncode == 1, slow.stdout + slow.stderr
    assert "REGRESSION" in slow.stdout and "1 point(s) regressed" in slow.stderr
    again = dlperf("compare", "--run", str(tmp_path), str(tmp_path), "--db",
                   str(tmp_path / "same.db"), *flags)
    assert again.returncode == 2 and "--resume" in again.stderr
    # a point of BASE gone from NEW: exit 3 (the two-file workflow). NEW: the two runs of
    # b=8 of the module's base.db; BASE: those and two runs of b=16 measured into a copy
    two = copy_db(dbs["base"], tmp_path / "b.db")
    r = dlperf("run", "-m", "fcn5_tiny", "--framework", "fake", "-b", "16", "--repeats", "2",
               "--min-iters", "15", "--min-time", "0.15", "--max-warmup-time", "2",
               "--no-ceilings", "--db", str(two), "--tag", "base",
               "--framework-option", f"step_s={STEP_S}")
    assert r.returncode == 0 and "2 run, 0 already in" in r.stderr, r.stderr
    gone = dlperf_here("compare", str(two), str(dbs["base"]), "--fail-if-slower", "5%")
    assert gone.returncode == 3, gone.stdout + gone.stderr
    assert "1 point(s) of BASE missing from NEW" in gone.stderr
    assert dlperf_here("compare", str(two), str(dbs["base"])).returncode == 0


@pytest.mark.slow
def test_compare_run_with_new_refusing_its_flags_is_missing(tmp_path):
    """``compare --run`` where NEW's ``dlperf run`` refuses the flags (here its framework is
    unknown there: the fake switched off by NEW's environment) in every round: NEW holds no
    runs, and the gate fails as for a vanished point (exit 3, the documented status: the two
    share no point), writing its comparison, instead of a user error about a tag it never
    stored (exit 2)."""
    out = tmp_path / "gate.md"
    gone = dlperf("compare", "--run", str(tmp_path), str(tmp_path), "--rounds", "2", "--db",
                  str(tmp_path / "gone.db"), "--fail-if-slower", "5%", "-o", str(out),
                  "--new-env", "DLPERF_FAKE_FRAMEWORK=0", "--", "-m", "fcn5_tiny",
                  "--framework", "fake", "-b", "8", "--no-ceilings", "--max-warmup-time", "2")
    assert gone.returncode == 3, gone.stdout + gone.stderr
    assert "NEW: dlperf run exited with status 2 and is not run again" in gone.stderr
    assert "no point in common" in gone.stderr
    assert out.is_file() and "tag 'new': 0 runs" in out.read_text()



@pytest.mark.slow
def test_compare_run_with_base_refusing_its_flags_fails_as_nothing_in_common(tmp_path):
    """``compare --run`` where BASE's ``dlperf run`` refuses the flags in every round (a model
    that only NEW's checkout has: here the fake switched off in BASE's environment): BASE
    holds no runs, and the gate fails as for two sides with no point in common (exit 3),
    writing its comparison, as when NEW refuses, instead of a user error (exit 2)."""
    out = tmp_path / "gate.md"
    new_only = dlperf("compare", "--run", str(tmp_path), str(tmp_path), "--rounds", "2", "--db",
                      str(tmp_path / "new.db"), "--fail-if-slower", "5%", "-o", str(out),
                      "--base-env", "DLPERF_FAKE_FRAMEWORK=0", "--", "-m", "fcn5_tiny",
                      "--framework", "fake", "-b", "8", "--no-ceilings", "--max-warmup-time",
                      "2")
    assert new_only.returncode == 3, new_only.stdout + new_only.stderr
    assert "BASE: dlperf run exited with status 2 and is not run again" in new_only.stderr
    assert "no point in common" in new_only.stderr
    assert out.is_file() and "tag 'base': 0 runs" in out.read_text()
    assert "1 only in NEW" in " ".join(out.read_text().split())
