"""trial16's findings fixed (trialfix16): ``--gpu`` refuses a precision the target GPU's
profile gives no GEMM rate for (G12)."""

import dataclasses
from pathlib import Path

import pytest

from dlperf.errors import ConfigError
from dlperf.perfmodel import gpuanswer, retarget
from dlperf.perfmodel import hardware as H

ROOT = Path(__file__).resolve().parents[2] / "benchmarks/results"
H200 = str(ROOT / "h200")
CFG = ("resnet50", "torch", "eager")


def test_a_precision_the_target_gpu_has_no_rate_for_is_refused():
    """G12: the V100's datasheet has no bf16 or tf32 rate (no such tensor cores); the replay
    scaled the H200's bf16 kernels onto it by clock and waves (46.7 ms, rc 0)."""
    for prec in ("bf16", "tf32"):
        with pytest.raises(ConfigError, match=rf"--precision {prec} on v100 .*no {prec} GEMM "
                                              r"rate.*it gives: fp32\. Predict --precision fp32"):
            gpuanswer.answer([H200], *CFG, prec, 64, "v100")
    assert gpuanswer.answer([H200], *CFG, "fp32", 64, "v100")["predicted_step_time_s"] > 0
    assert gpuanswer.answer([H200], *CFG, "bf16", 64, "h100")["predicted_step_time_s"] > 0


def test_a_measured_rate_lets_the_precision_through():
    v100 = H.DATASHEETS["v100"]
    with pytest.raises(ConfigError, match="datasheet gives no bf16"):
        retarget.check_precision(v100, "bf16")
    measured = dataclasses.replace(v100, measured=("gemm_flops_per_s",),
                                   gemm_flops_per_s={**v100.gemm_flops_per_s, "bf16": 1e14})
    retarget.check_precision(measured, "bf16")  # no error
    gone = dataclasses.replace(measured, gemm_flops_per_s={"fp32": 1e13})
    with pytest.raises(ConfigError, match="profile gives no bf16 GEMM rate"):
        retarget.check_precision(gone, "bf16")


def test_compare_notes_a_files_revisions_once(tmp_path):
    """G13: ``compare g.db g.db`` (tags v1 and v2) printed the revisions note for BASE and
    again for NEW; two files with revisions each get their own."""
    from cli_here import cli
    from fakes import make_db

    db = make_db(tmp_path / "g.db")
    code, text = cli("compare", str(db), str(db))
    assert code == 0 and text.count("holds 2 revisions (v1, v2)") == 1, text
    assert "same file" in text
    other = make_db(tmp_path / "o.db")
    code, text = cli("compare", str(db), str(other))
    assert text.count("holds 2 revisions (v1, v2)") == 2, text


def test_gpu_predict_of_an_unstored_model_names_the_run(tmp_path):
    """G10: ``predict --gpu`` on a file without the model said only "no stored result of
    'lstm'"; it names the run that stores one, as the step-level refusal does."""
    from cli_here import cli
    from dlperf.results.store import ResultStore

    db = tmp_path / "fresh.db"
    with ResultStore(str(db)):
        pass
    code, text = cli("predict", "--db", str(db), "--model", "lstm", "-b", "96", "--gpu", "h100")
    assert code == 2, text
    flat = " ".join(text.split())
    assert "no stored result of 'lstm'" in flat
    assert "dlperf run --model lstm --framework F --precision P -b N --timeline --db FILE" in flat


def _series(path, noisy):
    """fcn5_tiny cpu fp32 at b=8, 16, 32 (40 measured steps each); the batches in ``noisy``
    alternate between 10 and 25 ms (two modes), the others sit at 10-11 ms."""
    from dlperf.config import make_run_config
    from dlperf.results.schema import new_record
    from dlperf.results.store import ResultStore
    from dlperf.stats import summarize, throughput

    steady = [0.010 + 0.001 * (i % 7) / 7 for i in range(40)]
    two = [0.010 + 0.0002 * (i % 5) if i % 2 else 0.025 + 0.0002 * (i % 5) for i in range(40)]
    with ResultStore(path) as s:
        for b in (8, 16, 32):
            times = two if b in noisy else steady
            r = new_record(make_run_config(model="fcn5_tiny", batch_size=b), "ok").to_dict()
            r.update(summary=summarize(times).to_dict(), throughput=throughput(40, b, sum(times)),
                     samples={"first": [0.5], "warmup": [0.02], "measure": times},
                     n_measured=40, steady_state=True)
            s.add(r)
    return path


def test_a_prediction_fitted_on_two_mode_points_names_them(tmp_path):
    """G8: a series whose points have two modes got a narrow borrowed interval and no word of
    it; the warning names the fitted points that have (b=8, b=32), not the withheld b=16."""
    import json

    from cli_here import cli

    db = _series(tmp_path / "s.db", noisy=(8, 16, 32))
    code, text = cli("predict", "--db", str(db), "--model", "fcn5_tiny", "-b", "16")
    assert code == 0, text
    flat = " ".join(text.split())
    assert "2 of the 2 stored results the prediction is fitted on" in flat, flat
    assert f"{db}:1, {db}:3) have two modes" in flat and f"{db}:2," not in flat
    code, out = cli("predict", "--db", str(db), "--model", "fcn5_tiny", "-b", "16", "--format",
                    "json")
    assert code == 0 and any("two modes" in w for w in json.loads(out[out.index("{"):])["warnings"])
    clean = _series(tmp_path / "c.db", noisy=(16,))  # only the withheld point is noisy
    code, text = cli("predict", "--db", str(clean), "--model", "fcn5_tiny", "-b", "16")
    assert code == 0 and "two modes" not in text, text
