"""A GPU model is part of a configuration's identity: with the committed H100 and H200 results
loaded together, a prediction is calibrated on the points of the GPU ``device`` names alone
(the same prediction as that GPU's files alone), and an ambiguous device is refused with the
``--device`` values that pick one."""

from pathlib import Path

import pytest

from dlperf.errors import ConfigError
from dlperf.perfmodel import api
from dlperf.perfmodel import request as rq
from dlperf.perfmodel.records import Records

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks/results"
H100, H200 = str(RESULTS / "h100"), str(RESULTS / "h200")
CFG = dict(model="resnet50", framework="torch", mode="eager", precision="bf16",
           data="synthetic", layout="auto", batch_size=64)


pytestmark = pytest.mark.usefixtures("module_fit_cache")


def _files(p):
    return {Path(p.measured_point.rsplit(":", 1)[0]).parent.name,
            Path(p.explanation["series"]["file"]).parent.name}


@pytest.mark.parametrize("device,folder,name", [
    ("h100", "h100", "NVIDIA H100 80GB HBM3"),
    ("NVIDIA H100 80GB HBM3", "h100", "NVIDIA H100 80GB HBM3"),
    ("h200", "h200", "NVIDIA H200"),
    ("nvidia h200", "h200", "NVIDIA H200")])
def test_device_picks_the_gpu_of_the_fit_and_the_comparison(device, folder, name):
    alone = api.predict([H100 if folder == "h100" else H200], **CFG)
    for dbs in ([H200, H100], [H100, H200]):  # the --db order changes nothing
        p = api.predict(dbs, device=device, **CFG)
        assert p.gpu == name
        assert _files(p) == {folder}
        assert p.predicted_step_time_s == alone.predicted_step_time_s
        assert p.parts == alone.parts
        assert p.host_session == alone.host_session
        assert all(f"/{folder}/" in k for k in p.measured_points)


@pytest.mark.parametrize("device", [None, "cuda", "nvidia"])
def test_an_ambiguous_gpu_is_refused_with_the_device_values(device):
    with pytest.raises(ConfigError) as e:
        api.predict([H200, H100], device=device, **CFG)
    msg = str(e.value)
    for words in ("2 GPU models", "NVIDIA H100 80GB HBM3", "NVIDIA H200", "--device h100",
                  "--device h200", "--device 'NVIDIA H200'"):
        assert words in msg


def test_one_gpu_model_takes_cuda_and_its_name_alike():
    p = api.predict([H100], device="cuda", **CFG)
    q = api.predict([H100], device="h100", **CFG)
    assert p.predicted_step_time_s == q.predicted_step_time_s
    assert rq.gpu_of(api.records_of([H100]), "cuda") == ("cuda", None)


def test_for_gpu_drops_other_gpus_points_and_their_files():
    recs = api.records_of([H200, H100])
    got = rq.for_gpu(recs, "NVIDIA H100 80GB HBM3")
    assert got.points and {p.device_name for p in got.points} == {"NVIDIA H100 80GB HBM3"}
    assert got.sources == api.records_of([H100]).sources
    assert len(got.points) == len(api.records_of([H100]).points)
    assert rq.for_gpu(recs, None) is recs
    assert isinstance(got, Records)


def test_a_cpu_file_beside_a_gpus_files_stays_with_that_gpu():
    # h200/cpu_threads.db holds CPU points only: --device h200 keeps it as h200 alone does
    recs = api.records_of([H200, H100])
    assert rq.for_gpu(recs, "NVIDIA H200").sources == api.records_of([H200]).sources
    assert rq.for_gpu(recs, "NVIDIA H100 80GB HBM3").sources == api.records_of([H100]).sources


@pytest.mark.parametrize("dbs", [[H200, H100], [H100, H200]])
def test_device_reads_the_gpus_own_residual_table(dbs):
    cfg = {**CFG, "batch_size": 96}  # not stored on h200: the held-out batch interval
    alone = api.predict([H200], **cfg)
    p = api.predict(dbs, device="h200", **cfg)
    assert p.interval_s == alone.interval_s
    assert p.interval_group == alone.interval_group
    assert "borrowed" not in (p.interval_group or "")
