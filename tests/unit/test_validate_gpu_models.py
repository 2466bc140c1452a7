"""``--validate`` back-tests one GPU model at a time: files of several are refused without a
``--device`` (naming each model, its ``--device`` and its table), ``--device`` back-tests the
records a prediction with it reads and writes the table that prediction reads, and a table
entry pooling several GPU models is neither written nor read."""

import json
import shutil
from pathlib import Path

import pytest

from dlperf import validation
from dlperf.errors import ConfigError
from dlperf.perfmodel import api
from dlperf.perfmodel import fitcache as fc

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks/results"
H100, H200 = str(RESULTS / "h100"), str(RESULTS / "h200")
H100_NAME = "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize("device", [None, "cuda", "nvidia"])
def test_validate_of_several_gpu_models_is_refused_naming_each(device):
    with pytest.raises(ConfigError) as e:
        validation.validate([H200, H100], device=device)
    msg = str(e.value)
    for words in ("2 GPU models", H100_NAME, "NVIDIA H200", "--device h100", "--device h200",
                  str(RESULTS / "h100" / fc.TABLE_NAME), str(RESULTS / "h200" / fc.TABLE_NAME)):
        assert words in msg


def test_validate_device_takes_what_predict_device_reads():
    for dbs in ([H200, H100], [H100, H200]):
        got = validation.validated_records(dbs, "h100")
        assert got.sources == api.records_of([H100]).sources
        assert {p.device_name for p in got.points} == {H100_NAME}
    with pytest.raises(ConfigError, match="no CUDA point"):
        validation.validated_records([H100], "h200")


def test_the_table_goes_where_the_gpus_predictions_read_it(tmp_path):
    for d in ("h100", "h200"):
        shutil.copytree(RESULTS / d, tmp_path / d, ignore=shutil.ignore_patterns(
            "logs", "report*", "*.csv", "*.md", "registered", "yourmodel", "overhead*"))
    dbs = [str(tmp_path / "h200"), str(tmp_path / "h100")]
    cats = ["held-out batch"]
    v = validation.validate(dbs, cats, device="h100")
    alone = validation.validate([str(tmp_path / "h100")], cats)
    assert [(r.label, r.predicted) for r in v.rows] == [(r.label, r.predicted)
                                                        for r in alone.rows]
    with pytest.raises(ConfigError, match="2 GPU models"):
        validation.store_table(dbs, v)  # no --device: not pooled under the shared folder
    assert validation.store_table(dbs, v, "h100") == tmp_path / "h100" / fc.TABLE_NAME
    assert not (tmp_path / fc.TABLE_NAME).exists()
    assert fc.read_table(api.records_of([str(tmp_path / "h100")]).sources)[0] is not None


def _fit(gpu):
    return [[["torch", "eager", "bf16", "cuda"], "resnet50", gpu, False], None]


def test_a_table_entry_of_several_gpus_is_neither_written_nor_read(tmp_path):
    shutil.copy(RESULTS / "h100" / "calibrate.db", tmp_path / "calibrate.db")
    srcs = [str(tmp_path / "calibrate.db")]
    key = (("torch", "eager", "bf16", "cuda"), "resnet50")
    with pytest.raises(ValueError, match="one GPU model"):
        fc.write_table(srcs, {"held-out batch": [(0.01, "host", None)]},
                       {(*key, "NVIDIA H200", False): None, (*key, H100_NAME, False): None})
    entry = {"model_key": fc.model_key(), "data_key": fc.data_digest(srcs, tmp_path),
             "categories": {"held-out batch": [[0.01, "host", None]] * 30},
             "fits": [_fit("NVIDIA H200"), _fit(H100_NAME)], "solutions": {}}
    (tmp_path / fc.TABLE_NAME).write_text(json.dumps({"calibrate.db": entry}))
    table, why = fc.read_table(srcs)
    assert table is None and "2 GPU models" in why
    assert not [e for e in fc.borrowable(srcs) if str(tmp_path) in e[0]]
    entry["fits"] = [_fit(H100_NAME)]  # one GPU: read
    (tmp_path / fc.TABLE_NAME).write_text(json.dumps({"calibrate.db": entry}))
    assert fc.read_table(srcs)[0] is not None
    assert [e for e in fc.borrowable(srcs) if str(tmp_path) in e[0]]
