"""A fresh user's trial of ``dlperf predict`` (session 14): the refusals and lines it printed,
each naming what is wrong and how to fix it, and files named the same way on every line."""

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dlperf.cli import app

ROOT = Path(__file__).resolve().parents[2] / "benchmarks/results"
R50 = ["--model", "resnet50", "--framework", "torch", "--mode", "eager", "--precision", "bf16"]


def _cli(*args):
    r = CliRunner().invoke(app, ["predict", *map(str, args)])
    assert "Traceback" not in r.output
    return r.exit_code, " ".join(r.output.split())


def test_measured_lines_name_files_as_the_from_lines_do(monkeypatch):
    monkeypatch.chdir(ROOT.parents[1])
    code, out = _cli("--db", "benchmarks/results/h200", "--db", "benchmarks/results/h200x2",
                     *R50, "-b", "64")
    assert code == 0, out
    assert "in benchmarks/results/h200/calibration2.db:51);" in out
    assert "also measured: " in out and "in benchmarks/results/h200x2/scaling.db:1" in out
    assert "from: host time H: fitted: series of 3 points in benchmarks/results/h200/" in out
    lines = [x for x in CliRunner().invoke(app, [
        "predict", "--db", "benchmarks/results/h200", "--db", "benchmarks/results/h200x2", *R50,
        "-b", "64"]).output.splitlines() if x.startswith(("measured:", "also measured:"))]
    assert len(lines) == 2 and not any(os.path.abspath("benchmarks") in x for x in lines)


def test_counts_of_one_are_singular(monkeypatch):
    # alexnet jax/xla bf16 is stored at b=128 only in frameworks.db
    monkeypatch.chdir(ROOT.parents[1])
    code, out = _cli("--db", "benchmarks/results/h200/frameworks.db", "--model", "alexnet",
                     "--framework", "jax", "--mode", "xla", "--precision", "bf16", "-b", "256")
    assert code == 0, out
    assert "extrapolates from the measured batch 128 of alexnet jax/xla cuda bf16;" in out
    assert "calibrated on 1 stored result " in out
    assert "series of 1 point in benchmarks/results/h200/frameworks.db" in out
    assert "(1 sizes)" not in out and "point(s)" not in out and "1 stored results" not in out


def test_an_indivisible_global_batch_names_the_nearest_multiples():
    code, out = _cli("--db", ROOT / "h200x2", *R50, "-b", "100", "--nproc", "8")
    assert code == 2, out
    assert "global batch 100 is not divisible by 8 devices (--batch-size/-b is the global " in out
    assert "give a multiple of 8, such as 96 or 104" in out


def test_a_missing_default_results_file_says_give_db(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out = _cli("--model", "resnet50", "-b", "16")
    assert code == 2, out
    assert "no --db given, and the default results file 'dlperf-results.db' is not in" in out
    assert "give --db with a results file" in out
    code, out = _cli("--db", "nothere.db", "--model", "resnet50", "-b", "16")
    assert code == 2 and "'nothere.db' does not exist" in out and "--db" in out


def test_every_equally_close_model_is_suggested():
    code, out = _cli("--db", ROOT / "h200", "--model", "resnet5", "-b", "16")
    assert code == 2, out
    assert "did you mean 'resnet50' or 'resnet56'?" in out


@pytest.mark.parametrize("value, choices, said", [
    ("resnt50", ["resnet50", "resnet56", "lstm"], "; did you mean 'resnet50'?"),
    ("LSTM", ["lstm", "lstm_tiny"], "; did you mean 'lstm'?"),
    ("zzz", ["lstm"], ""),
])
def test_did_you_mean_names_one_where_one_is_closest(value, choices, said):
    from dlperf.errors import did_you_mean

    assert did_you_mean(value, choices) == said


def test_a_layout_asked_of_an_auto_series_explains_the_names():
    code, out = _cli("--db", ROOT / "h200x2", *R50, "-b", "64", "--layout", "nhwc")
    assert code == 2, out
    assert "has --layout nhwc; stored: --layout auto; a series is named by the --layout" in out
    assert "is predicted with --layout auto" in out
