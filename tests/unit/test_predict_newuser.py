"""What a new user's first ``dlperf predict`` on a small sweep must say: a series that does not
grow with the batch predicted beyond it (warned, no interval), a stored point withheld from its
own fit (its median shown), a CPU borrowing GPU residuals (not widened), and bad flags in
``dlperf run``'s style. Results files are written with the store itself (fake framework)."""

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dlperf.cli import app
from dlperf.perfmodel import api
from dlperf.perfmodel import intervals as iv
from dlperf.results.store import ResultStore

sys.path.insert(0, str(Path(__file__).parent))
from test_perfmodel_predict_requests import _result  # noqa: E402 - the same fake results

H200 = Path(__file__).resolve().parents[2] / "benchmarks/results/h200"


pytestmark = pytest.mark.usefixtures("module_fit_cache")


def _store(path, steps, **kw):
    with ResultStore(path) as store:
        for b, t in steps.items():
            res = _result("fcn5_tiny", b, t, precision="fp32", device="cpu", threads=4, **kw)
            res["env"]["cpu_model"] = "AMD EPYC 7B13"
            store.add(res)
    return path


@pytest.fixture(scope="module")
def flat(tmp_path_factory):
    """The sweep a user stored: b=16 measured faster than b=8 (noise)."""
    return _store(tmp_path_factory.mktemp("sw") / "sw.db", {8: 0.671e-3, 16: 0.637e-3})


@pytest.fixture(scope="module")
def growing(tmp_path_factory):
    return _store(tmp_path_factory.mktemp("sw") / "grow.db", {8: 0.7e-3, 16: 1.3e-3})


def _cli(*args):
    r = CliRunner().invoke(app, ["predict", *map(str, args)])
    return r.exit_code, " ".join(r.output.split()), r


@pytest.mark.parametrize("b", [32, 256, 4096])
def test_a_flat_series_beyond_its_batches_warns_and_has_no_interval(flat, b):
    p = api.predict(flat, "fcn5_tiny", batch_size=b)
    assert p.explanation["series"]["d1_s_per_sample"] * 16 < 1e-6 * p.explanation["series"]["d0_s"]
    assert any("shows no growth with batch" in w and f"prediction at b={b} is the series' "
               "floor" in w for w in p.warnings)
    assert all(x != x for x in p.interval_s) and "shows no growth with batch" in p.interval_note
    # 2x the largest gets the extrapolation warning as beyond it does, saying from where
    assert any(f"{b / 16:.3g}x the largest batch measured in any results file, 16 (warned from 2x" in w
               for w in p.warnings)
    code, out, _ = _cli("--db", flat, "--model", "fcn5_tiny", "-b", b)
    assert code == 0 and "(no 90% interval: dropped: the series shows no growth" in out


def test_a_flat_series_inside_its_batches_and_a_growing_one_keep_their_interval(flat, growing):
    inside = api.predict(flat, "fcn5_tiny", batch_size=12)
    assert not any("no growth" in w for w in inside.warnings)
    up = api.predict(growing, "fcn5_tiny", batch_size=32)
    assert up.explanation["series"]["d1_s_per_sample"] > 1e-6
    assert not any("no growth" in w for w in up.warnings)
    assert all(x == x for x in up.interval_s) and up.interval_s[0] < up.interval_s[1]


def test_a_stored_point_withheld_from_its_own_fit_is_shown(flat):
    code, out, _ = _cli("--db", flat, "--model", "fcn5_tiny", "-b", 8)
    assert code == 2
    assert "The stored measurement at b=8 (median 0.671 ms, " in out
    assert "is withheld from its own fit" in out and "store another batch size" in out


def test_a_cpu_borrowing_gpu_residuals_is_not_widened_and_says_so(growing):
    p = api.predict(growing, "fcn5_tiny", batch_size=32)
    assert p.gpu == "AMD EPYC 7B13"
    assert "borrowed for a CPU (AMD EPYC 7B13) from residuals of fits on " in p.interval_group
    assert "not validated for this CPU" in p.interval_group
    assert "widened by" not in p.interval_group
    ivl = iv.Interval(0.9, 1.2, "g", 30, "conformal")
    cpu, _ = iv.cross_gpu(ivl, "AMD EPYC 7B13", frozenset({"NVIDIA H200"}), "cpu")
    gpu, _ = iv.cross_gpu(ivl, "NVIDIA A100", frozenset({"NVIDIA H200"}), "cuda")
    assert cpu == ivl and gpu.high_ratio > ivl.high_ratio


@pytest.mark.parametrize("args, words", [
    (["-b", "0"], "error: --batch-size: 0 must be >= 1"),
    (["-b", "32", "--nproc", "0"], "error: --nproc: 0 must be >= 1"),
    (["-b", "1e23"], "--batch-size 100,000,000,000,000,000,000,000 is over dlperf's limit"),
    (["-b", "abc"], "--batch-size: 'abc' is not a whole number"),
    (["-b", "32", "--gpu", "h100"], "needs one in the --db files (store one with dlperf run "
                                    "--device cuda --trace, or dlperf calibrate"),
])
def test_bad_flags_are_refused_in_one_style(flat, args, words):
    code, out, r = _cli("--db", flat, "--model", "fcn5_tiny", *args)
    assert code == 2 and words in out and "╭" not in r.output, out


def test_a_batch_in_e_notation_is_read_exactly(flat):
    code, out, r = _cli("--db", flat, "--model", "fcn5_tiny", "-b", "1e2", "--format", "json")
    assert code == 0 and json.loads(r.output)["config"]["global_batch"] == 100, out


def test_validate_prints_the_split_and_names_categories_as_its_help_does(tmp_path):
    from test_perfmodel_predict_requests import _db

    db = _db(tmp_path / "synthetic.db")
    code, out, r = _cli("--db", db, "--validate")
    assert code == 0, out
    assert "development / test side of the frozen split" in out and "| held-out batch |" in r.output
    r = CliRunner().invoke(app, ["predict", "--help"], env={"COLUMNS": "400"})
    helptext = " ".join(r.output.split())
    assert "extrapolate 2x" in helptext and "largest batch" not in helptext


@pytest.mark.parametrize("steps", [{}, {8: 0.671e-3}])
def test_validate_with_nothing_to_back_test_is_refused(tmp_path, steps):
    """``--validate`` of a results file the back-test can make no row from (no result, or
    one point) exits 2 and says what it needs, instead of printing empty tables, exiting 0
    and writing an empty residual table beside the file (which later predictions read)."""
    db = str(tmp_path / "r.db")
    if steps:
        _store(db, steps)
    else:
        ResultStore(db).close()
    r = CliRunner().invoke(app, ["predict", "--db", db, "--validate"])
    assert r.exit_code == 2, r.output
    out = " ".join(r.output.split())
    assert "the back-test made no row from" in out and "two batch sizes or more" in out
    assert "| category |" not in out
    assert not (tmp_path / "perfmodel_residuals.json").exists()
