"""The command line end to end (real PyTorch on the CPU) and its error messages."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli_here import dlperf_here as _here

#: A committed results file (the 2-core CPU thread sweep), read-only in these tests.
THREADS_DB = str(Path(__file__).resolve().parents[2] / "benchmarks/results/cpu-dev/dlbench_threads.db")


def dlperf_here(*args):
    """``dlperf ARGS`` in this process (:func:`cli_here.dlperf_here`), ``COLUMNS=200`` as for
    :func:`dlperf`."""
    return _here(*args, env={"COLUMNS": "200"})


def dlperf(*args, timeout=300, env=None):
    return subprocess.run([sys.executable, "-m", "dlperf", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "COLUMNS": "200", **(env or {})})


@pytest.mark.slow
def test_quick_suite_end_to_end(tmp_path):
    """The quick suite through the command line: a worker process per model, stored, read in
    every format, resumed, reported. On the fake framework, whose workers start in a fraction
    of a second (14 PyTorch workers took 53 s): PyTorch trains every quick-suite model through
    the same worker code in tests/zoo (test_training_through_the_harness), and runs through
    the command line in tests/unit/test_threads.py and tests/integration/test_distributed.py."""
    db, rep = tmp_path / "q.db", tmp_path / "report"
    fake = {"DLPERF_FAKE_FRAMEWORK": "1"}
    r = dlperf("run", "--suite", "quick", "--framework", "fake", "--device", "cpu",
               "--batch-size", "8", "--min-iters", "5", "--min-time", "0.1",
               "--max-warmup-time", "2", "--db", str(db), "--report", str(rep),
               "--no-ceilings", env=fake)  # ceilings: tests of their own
    assert r.returncode == 0, r.stderr
    from dlperf.zoo import SUITES

    models = [e.model for e in SUITES["quick"]]
    for m in models:
        assert m in r.stdout
    assert f"{len(models)} run, 0 already" in r.stderr
    md = (rep / "report.md").read_text()
    assert all(f"step_time_vs_batch_{m}.png" in md for m in models)

    # results in every format
    # (the commands that only read the file run in this process: cli_here)
    rows = list(csv.DictReader(io.StringIO(_here("results", "--db", str(db), "-f", "csv",
                                                 env=fake).stdout)))
    assert sorted(x["model"] for x in rows) == sorted(models)
    assert all(x["status"] == "ok" and float(x["samples_per_s"]) > 0 for x in rows)
    js = json.loads(_here("results", "--db", str(db), "-f", "json", "--samples",
                          env=fake).stdout)
    assert all(len(x["raw_samples"]["measure"]["step_time_s"]) == x["n_measured"] for x in js)
    assert all(x["result"]["env"]["python"] for x in js)

    # the same command again resumes: nothing re-run
    r2 = dlperf("run", "--suite", "quick", "--framework", "fake", "--device", "cpu",
                "--batch-size", "8", "--min-iters", "5", "--min-time", "0.1",
                "--max-warmup-time", "2", "--db", str(db), env=fake)
    assert r2.returncode == 0 and f"0 run, {len(models)} already" in r2.stderr

    r3 = _here("report", "--db", str(db), "-o", str(tmp_path / "r2"), env=fake)
    assert r3.returncode == 0 and (tmp_path / "r2" / "report.md").is_file()


@pytest.mark.parametrize("args,needle", [
    (["run", "--model", "resnt50"], "did you mean 'resnet50'"),
    (["run", "--model", "fcn5_tiny", "--precision", "fp16"], "fp32"),
    (["run", "--model", "fcn5_tiny", "--batch-size", "abc"], "'abc' is not an integer"),
    (["run", "--model", "fcn5_tiny", "--device", "tpu"], "valid devices: auto, cpu, cuda"),
    (["run"], "exactly one of --model or --suite"),
    (["run", "--suite", "quik"], "did you mean 'quick'"),
    (["run", "--model", "fcn5_tiny", "--min-iters", "0"], "min_iters"),
    (["results", "--db", "/nonexistent.db"], "does not exist"),
    (["results", "--db", "/nonexistent.db", "--format", "xml"], "valid formats"),
    (["list", "colours"], "valid list topics"),
    (["sweep", "/nonexistent.yaml"], "does not exist"),
    (["run", "--model", "fcn5_tiny[bold]"], "unknown model 'fcn5_tiny[bold]'"),  # not markup
    # filters of stored results: a misspelt one is not an empty result
    (["results", "--db", THREADS_DB, "--status", "okk"],
     "unknown status 'okk'; did you mean 'ok'?"),
    (["results", "--db", THREADS_DB, "--model", "resnt50"],
     f"did you mean 'resnet50'? valid models in {THREADS_DB}"),
    (["run", "--model", "fcn5_tiny", "--framework", "torch,jax"],
     "--framework takes one framework, not 'torch,jax'"),
    # flags that did nothing where they were given
    (["results", "--db", THREADS_DB, "--target-loss", "2"],
     "--target-loss is the target of --compare convergence"),
    (["results", "--db", THREADS_DB, "--samples"], "--samples adds the raw samples to the JSON"),
    (["results", "--db", THREADS_DB, "-f", "json", "--samples", "--compare", "threads"],
     "without --compare/--op-classes"),
])
def test_bad_input_gets_a_clear_error(args, needle):
    r = dlperf_here(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert needle in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_ddp_flags_without_a_ddp_point_are_said_to_change_nothing(tmp_path):
    """--static-graph etc. with --nproc 1 (or another framework) used to be taken silently."""
    r = dlperf_here("run", "--model", "fcn5_tiny", "--device", "cpu", "--static-graph",
               "--bucket-cap-mb", "50", "--emit-slurm", str(tmp_path / "a.sh"))
    assert r.returncode == 0, r.stderr
    assert "note: --bucket-cap-mb, --static-graph set PyTorch DDP" in r.stderr
    r = dlperf_here("run", "--model", "fcn5_tiny", "--device", "cpu", "--static-graph", "--nproc",
               "1,2", "--emit-slurm", str(tmp_path / "b.sh"))
    assert r.returncode == 0, r.stderr
    assert "set PyTorch DDP" not in r.stderr  # the 2-process point uses it


def test_reading_an_empty_file_leaves_it_empty(tmp_path):
    db = tmp_path / "empty.db"
    db.write_bytes(b"")
    for cmd in (["results", "--db", str(db)], ["report", "--db", str(db), "-o", str(tmp_path / "r")]):
        r = dlperf_here(*cmd)
        assert r.returncode == 2 and "is empty (0 bytes)" in r.stderr, r.stderr
    assert db.stat().st_size == 0


def test_list_and_env():
    r = dlperf_here("list")
    assert r.returncode == 0, r.stderr
    for word in ("resnet50", "25,557,032", "dlbench", "torch", "mnist", "cpu:"):
        assert word in r.stdout
    # the frameworks' imports (6 s: TensorFlow's alone 4 s) are tested once, with the text
    # output, in tests/unit/test_env_output.py
    e = json.loads(dlperf_here("env", "--json", "--no-framework").stdout)
    assert e["cpu_logical"] >= 1 and "frameworks" not in e


def test_user_errors_are_caught_before_anything_is_stored(tmp_path):
    db = tmp_path / "r.db"
    for args, needle in [
        (["--data", "imagenet"], "imagenet"),
        (["--data", str(tmp_path / "missing")], "missing"),
        (["--report", __file__], "is a file"),
    ]:
        r = dlperf_here("run", "--model", "fcn5_tiny", "--device", "cpu", "--db", str(db), *args)
        assert r.returncode == 2 and needle in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
    assert not db.exists()  # nothing ran, nothing stored
    r = dlperf_here("run", "--model", "fcn5_tiny", "--db", str(tmp_path))
    assert r.returncode == 2 and "is a folder" in r.stderr
    r = dlperf_here("results", "--db", str(db), "-f", "csv", "-o", str(tmp_path / "no" / "a.csv"))
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_cuda_without_gpu_is_a_user_error():
    from dlperf import nvml

    if nvml.gpus():
        pytest.skip("this machine has a GPU")
    r = dlperf_here("run", "--model", "fcn5_tiny", "--device", "cuda")
    assert r.returncode == 2 and "--device cpu" in r.stderr


def test_stored_warnings_reach_the_report(tmp_path):
    db, env = tmp_path / "w.db", {"DLPERF_FAKE_FRAMEWORK": "1"}
    r = dlperf("run", "--framework", "fake", "--model", "fcn5_tiny", "-b", "8", "--precision",
               "tf32", "--min-time", "0.05", "--no-ceilings", "--db", str(db), env=env)
    assert r.returncode == 0, r.stderr
    r = _here("report", "--db", str(db), "-o", str(tmp_path / "rep"), env=env)
    assert r.returncode == 0, r.stderr
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Warnings" in md and "tf32 has no effect on the CPU" in md


def test_compare_and_report_read_one_list_of_sections(tmp_path):
    """`results --compare` offers exactly the named sections of report/sections.py and prints
    what the section computes; `report` writes the titled ones, in the list's order."""
    from typer.testing import CliRunner

    from dlperf.cli import app
    from dlperf.report.sections import COMPARISONS, SECTIONS, Inputs, compare, report_sections
    from dlperf.results.store import ResultStore

    r = CliRunner().invoke(app, ["results", "--db", THREADS_DB, "--compare", "bogus"])
    assert r.exit_code == 2
    assert f"valid comparisons: {', '.join(sorted(COMPARISONS))}" in " ".join(r.output.split())
    assert {"modes", "frameworks", "matrix", "threads", "data", "repeats", "scaling",
            "convergence", "allreduce"} <= set(COMPARISONS)
    r = CliRunner().invoke(app, ["results", "--db", THREADS_DB, "--compare", "threads", "-f",
                                 "json"])
    assert r.exit_code == 0, r.output
    with ResultStore(THREADS_DB, read_only=True) as store:
        inp = Inputs(store, store.rows(), output=tmp_path / "plots")
        assert json.loads(r.output) == json.loads(compare("threads", inp, "json"))
        titles = [t for t, _ in report_sections(inp)]
    order = [s.title for s in SECTIONS]
    assert "CPU thread scaling" in titles and titles == sorted(titles, key=order.index)
    r = CliRunner().invoke(app, ["report", "--db", THREADS_DB, "-o", str(tmp_path / "rep")])
    assert r.exit_code == 0, r.output
    md = (tmp_path / "rep" / "report.md").read_text()
    assert [t for t in order if f"## {t}\n" in md] == titles


def test_list_reads_each_framework_s_distributions_from_the_registry(monkeypatch):
    """`dlperf list frameworks` finds versions from the registry's pip distributions (no
    table of its own); a missing one names the extra to install."""
    import dataclasses

    from dlperf import registry
    from dlperf.cli.list_ import installed_version

    info = registry.FRAMEWORKS["torch"]
    assert installed_version("torch") == __import__("importlib.metadata").metadata.version("torch")
    monkeypatch.setitem(registry.FRAMEWORKS, "torch", dataclasses.replace(
        info, distributions=(("torch",), ("no-such-distribution-dlperf",))))
    from dlperf.install import install_hint

    assert installed_version("torch") == ("no: no-such-distribution-dlperf is not installed; "
                                          + install_hint("torch", "torch-cuda"))
    monkeypatch.setitem(registry.FRAMEWORKS, "torch", dataclasses.replace(info, distributions=()))
    assert installed_version("torch") is None  # ask the adapter
