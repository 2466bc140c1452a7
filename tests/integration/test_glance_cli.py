"""After a run on the fake framework: the relative summary, the batch-size advice, ``--compare
precision`` and ``--compare batch``, the report's sections, tables fitted to $COLUMNS, and what
``sweep --dry-run`` says about the thread policy and the tag."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cli_here import dlperf_here as _here

#: fp32 steps of 10 ms at b=8; bf16 at 0.55x; b=16, 32 take 1.8x, 3.5x (throughput grows 11%,
#: then 3%); b=64 runs out of memory.
FAKE_ENV = {"DLPERF_FAKE_FRAMEWORK": "1"}
STEP = ["--framework-option", "step_s=0.01"]
SCRIPT = [*STEP, "--framework-option", "step_factors={bf16: 0.55, 16: 1.8, 32: 3.5}",
          "--framework-option", "fail={64: oom}"]


def dlperf(*args, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "dlperf", *args], capture_output=True, text=True,
                          check=False, timeout=timeout,
                          env={**os.environ, "COLUMNS": "200", **FAKE_ENV, **(env or {})})


def dlperf_here(*args):
    """``dlperf ARGS`` in this process (:func:`cli_here.dlperf_here`), ``COLUMNS=200`` and the
    fake framework as for :func:`dlperf`, for commands that start no run (results, sweep
    --dry-run). The tests of $COLUMNS itself run processes."""
    return _here(*args, env={"COLUMNS": "200", **FAKE_ENV})


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """One run over precisions fp32,bf16 and batches 8..64 (the CLI's output and the files)."""
    tmp = tmp_path_factory.mktemp("glance")
    db, rep = tmp / "r.db", tmp / "report"
    r = dlperf("run", "-m", "fcn5_tiny", "--framework", "fake", "--device", "cpu",
               # 6 iterations: the fewest that give a CI of the median (MIN_CI_SAMPLES)
               "-b", "8,16,32,64", "--precision", "fp32,bf16", "--min-iters", "6",
               "--min-time", "0.05", "--no-ceilings", "--db", str(db), "--report", str(rep),
               *SCRIPT)
    return r, db, rep


def test_a_run_over_precisions_and_batches_ends_with_the_summary_and_the_advice(swept):
    r, _, _ = swept
    assert r.returncode == 0, r.stderr  # points failing by OOM are results, not an error
    out = r.stdout
    assert "relative speed (step time, 95% CI):" in out
    assert re.search(r"bf16 runs 1\.82x as fast as fp32 \[1\.82, 1\.82\] over 3 points "
                     r"\(fcn5_tiny\)", out), out
    assert "--repeats 3 gives intervals from runs" in out  # one run a side: said so
    assert "batch size (within 5% of the best throughput, 95% CI):" in out
    for prec, best, ms in (("fp32", "914.3", "35.00"), ("bf16", "1662", "19.25")):
        assert (f"fcn5_tiny fake/eager cpu {prec} synthetic: fits up to b=32 (b=64: OOM); "
                f"throughput stops growing at b=16: 97% [97%, 97%] of the best ({best} "
                f"samples/s at b=32: 32 / {ms} ms median step)") in out, out
    summary = out[out.index("relative speed"):]
    assert len(summary.splitlines()) <= 8  # concise


def test_a_single_point_run_prints_no_summary(tmp_path):
    r = dlperf("run", "-m", "fcn5_tiny", "--framework", "fake", "--device", "cpu", "-b", "8",
               "--min-iters", "5", "--min-time", "0.05", "--no-ceilings",
               "--db", str(tmp_path / "one.db"), *STEP)
    assert r.returncode == 0, r.stderr
    assert "relative speed" not in r.stdout and "batch size (" not in r.stdout


def test_compare_precision_and_batch_in_every_format(swept):
    _, db, _ = swept
    table = dlperf_here("results", "--db", str(db), "--compare", "precision").stdout
    assert table.count("| bf16 vs fp32 |") == 3 and "iterations* (1 vs 1 run)" in table
    assert "1.818 [1.818, 1.818]" in table and "leaves out the variation between processes" in table
    js = json.loads(dlperf_here("results", "--db", str(db), "--compare", "precision",
                           "-f", "json").stdout)
    assert sorted(c["batch_size"] for c in js) == [8, 16, 32]
    assert all(c["ci_from"] == "iterations" and c["speedup"] == pytest.approx(1 / 0.55)
               for c in js)
    rows = list(csv.DictReader(io.StringIO(dlperf_here("results", "--db", str(db), "--compare",
                                                  "precision", "-f", "csv").stdout)))
    assert len(rows) == 3 and {r["other"] for r in rows} == {"bf16"}
    batch = json.loads(dlperf_here("results", "--db", str(db), "--compare", "batch",
                              "-f", "json").stdout)
    assert [(a["precision"], a["fits_up_to"], a["first_failure"]["status"],
             a["plateau"]["batch"]) for a in batch] == [("bf16", 32, "OOM", 16),
                                                         ("fp32", 32, "OOM", 16)]
    summary = json.loads(dlperf_here("results", "--db", str(db), "--compare", "summary",
                                "-f", "json").stdout)
    assert [(s["axis"], s["baseline"], s["other"], s["points"]) for s in summary] == [
        ("precision", "fp32", "bf16", 3)]


def test_the_report_has_the_summary_precision_and_batch_sections(swept):
    _, _, rep = swept
    md = (rep / "report.md").read_text()
    for head in ("## Relative speed at a glance", "## Precision effect (speed-up over fp32)",
                 "## Batch size: what fits and where throughput stops growing"):
        assert head in md
    assert "- **bf16** runs **1.82x** as fast as **fp32**" in md
    assert "| fcn5_tiny | fake/eager | cpu | fp32 | synthetic | 8, 16, 32, 64 | 32 (RSS" in md
    html = (rep / "report.html").read_text()
    assert "Relative speed at a glance" in html and "Batch size: what fits" in html
    assert '<td style="text-align:right">b=16: 97% [97%, 97%]</td>' in html


@pytest.mark.parametrize("columns", [60, 200])
def test_results_fit_the_terminal_width_with_words_whole(swept, columns):
    _, db, _ = swept
    out = dlperf("results", "--db", str(db), env={"COLUMNS": str(columns)}).stdout
    lines = out.splitlines()
    assert lines and max(len(ln) for ln in lines) <= columns, out
    words = set(re.sub(r"[│┃┏┓┗┛┡┩└┘┌┐├┤┬┴┼━─╇╈╋┳┻]", " ", out).split())
    for w in ("fcn5_tiny", "fake/eager", "synthetic", "OutOfMemory:", "[35.00,", "35.00]"):
        assert w in words, (w, out)
    for empty in ("tokens/s", "MFU", "J/iter", "data wait"):  # no value in any row
        assert empty not in out
    if columns == 200:
        assert "┃ model" in out  # one table
    else:  # the settings shared by every row in a caption under the table. Whether the
        # table keeps its frame depends on the peak-memory column: it is measured (the
        # process's RSS), so it is one value in every row on some machines and a column on
        # others; tests/unit/test_terminal.py covers the frame choice with fixed cells.
        assert "precision" in out and "16" in words
        assert ("model: fcn5_tiny · framework/mode: fake/eager · device: cpu (fake) · "
                "devices: 1 · data: synthetic") in " ".join(out.split())


def test_markdown_to_a_file_is_unchanged_by_the_width(swept, tmp_path):
    _, db, _ = swept
    a, b = tmp_path / "a.md", tmp_path / "b.md"
    dlperf("results", "--db", str(db), "--compare", "precision", "-o", str(a),
           env={"COLUMNS": "60"})
    dlperf("results", "--db", str(db), "--compare", "precision", "-o", str(b),
           env={"COLUMNS": "200"})
    assert a.read_text() == b.read_text() and a.read_text().startswith("| model |")


def test_dry_run_shows_the_tag_and_counts_only_results_under_it(tmp_path):
    sw = tmp_path / "s.yaml"
    sw.write_text("name: t\ndefaults:\n  framework: fake\n  device: cpu\n"
                  "  options: {step_s: 0.01}\n"
                  "  iterations: {min_iters: 5, min_time_s: 0.05}\n  measure_ceilings: false\n"
                  "grid:\n  - model: fcn5_tiny\n    batch_size: [8, 16]\n")
    db = tmp_path / "s.db"
    assert dlperf("sweep", str(sw), "--db", str(db), "--tag", "v1").returncode == 0
    same = dlperf_here("sweep", str(sw), "--db", str(db), "--dry-run", "--tag", "v1").stdout
    assert "2 points: 0 pending, 2 stored in" in same and "under tag 'v1'" in same
    assert "tag: 'v1': the results are labelled with it" in same
    other = dlperf_here("sweep", str(sw), "--db", str(db), "--dry-run", "--tag", "v2").stdout
    assert "2 points: 2 pending, 0 stored" in other
    assert all(ln.startswith("pending ") for ln in other.splitlines()[:2])
    plain = dlperf_here("sweep", str(sw), "--db", str(db), "--dry-run").stdout
    assert "2 points: 0 pending, 2 stored" in plain and "tag: none" in plain
    # the fake framework builds no model: the thread policy does not apply to it
    assert "threads: as each point gives them" in plain
    bad = dlperf_here("sweep", str(sw), "--db", str(db), "--dry-run", "--tag", "a b")
    assert bad.returncode == 2 and "--tag 'a b'" in bad.stderr


def test_dry_run_shows_the_thread_policy_it_would_apply(tmp_path):
    """CPU points of a framework that runs the zoo, without threads: the policy's choice,
    measured now, and which points it sets; a point with threads keeps them."""
    sw = tmp_path / "s.yaml"
    sw.write_text("name: t\ndefaults:\n  framework: torch\n  device: cpu\ngrid:\n"
                  "  - model: fcn5_tiny\n    batch_size: [8, 16]\n"
                  "  - model: fcn5_tiny\n    batch_size: [32]\n    threads: 2\n")
    r = dlperf_here("sweep", str(sw), "--db", str(tmp_path / "s.db"), "--dry-run")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert [ln.endswith("(threads: policy)") for ln in lines[:3]] == [True, True, False]
    assert "b=32 synthetic threads=2" in lines[2]
    policy = next(ln for ln in lines if ln.startswith("thread policy"))
    assert policy.startswith("thread policy for the 2 CPU point(s) without threads, measured "
                             "now: threads: ")
    assert "auto: the host was" in policy and "--threads N chooses" in policy
    assert not Path(tmp_path / "s.db").exists()  # a dry run stores nothing
