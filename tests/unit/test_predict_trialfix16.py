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
