"""A fresh user's trial of ``dlperf predict`` (session 16): a real-data prediction prints the
lines of the step that made its numbers, and ``--gpu`` reads each file's device profiles once."""

import shutil
from pathlib import Path

from dlperf.perfmodel import api
from dlperf.perfmodel import hardware as H

ROOT = Path(__file__).resolve().parents[2] / "benchmarks/results"


def test_real_data_prints_the_provenance_of_the_synthetic_step_it_used():
    """resnet50 ImageFolder with 3 loader workers (not stored; the ladder 0/2/4/8/16 is): the
    compute part is calibration2.db's synthetic series (``how`` series, H 22.3 ms), so the
    provenance and assumptions are that series', not those of the analytic fit of the
    real-data configuration it replaced ("own measurements not used (analytic)", "host time
    per dispatched operator")."""
    p = api.predict([str(ROOT / "h200"), str(ROOT / "h200x2")], "resnet50", "torch", "eager",
                    "bf16", "cuda", batch_size=64, data="imagefolder", loader_workers=3)
    assert p.how == "series" and p.bound == "input"
    assert "t_c" in p.provenance and "(series)" in p.provenance["t_c"]
    said = " ".join([*p.provenance.values(), *p.assumptions])
    assert "series of 4 points in" in said and "calibration2.db" in said
    assert "analytic" not in said and "per dispatched operator" not in said
    assert any("3 workers" in a for a in p.assumptions)  # the input part's own line kept


def test_stored_profiles_reads_a_file_once_per_content(tmp_path, monkeypatch):
    """``--gpu`` asks for the same files' profiles several times in one prediction: each file
    is read once for its content, and read again once its content changes."""
    db = tmp_path / "cal.db"
    shutil.copy(ROOT / "h100/calibrate.db", db)
    read = []
    real = H._read_profiles
    monkeypatch.setattr(H, "_read_profiles", lambda p: read.append(p) or real(p))
    first = H.stored_profiles(str(db))
    assert H.stored_profiles(str(tmp_path)) == first and len(read) == 1
    assert set(first) == {"h100"}
    first.pop("h100")  # a caller's dict is its own
    assert set(H.stored_profiles(str(db))) == {"h100"} and len(read) == 1
    H.store_profile(str(db), H.datasheet("a100"))
    assert set(H.stored_profiles(str(db))) >= {"h100", H.datasheet("a100").name}
    assert len(read) == 2


def test_a_what_if_refusal_names_the_base_it_failed_on():
    """resnet50 on the CPU is stored at one batch size (h200/cpu_threads.db): a bf16 what-if
    from it fails on the fp32 base's series, so the refusal names that base beside the target
    (bf16 is not stored at all) and says what would give a series."""
    from typer.testing import CliRunner

    from dlperf.cli import app

    r = CliRunner().invoke(app, ["predict", "--db", str(ROOT / "h200"), "--model", "resnet50",
                                 "--framework", "torch", "--mode", "eager", "--precision",
                                 "fp32", "--device", "cpu", "--threads", "8", "-b", "24",
                                 "--what-if", "precision=bf16"])
    out = " ".join(r.output.split())
    assert r.exit_code == 2 and "Traceback" not in out
    assert ("resnet50 torch/eager cpu bf16 threads=8 (what-if from resnet50 torch/eager cpu "
            "fp32 threads=8): one batch size") in out
    assert "measure another batch size (dlperf run ... -b N)" in out


def test_report_of_an_empty_results_file_says_how_to_fill_it(tmp_path):
    """A dlperf results file with no result: `dlperf report` says what to run, as `dlperf
    results` does, not only that the file is empty."""
    from typer.testing import CliRunner

    from dlperf.cli import app
    from dlperf.results.store import ResultStore

    db = tmp_path / "fresh.db"
    ResultStore(db).close()
    for out in ("rep", "rep.html"):
        r = CliRunner().invoke(app, ["report", "--db", str(db), "-o", str(tmp_path / out)])
        said = " ".join(r.output.split())
        assert r.exit_code == 2 and "holds no results yet" in said, said
        assert f"store some with `dlperf run ... --db {db}`" in said
