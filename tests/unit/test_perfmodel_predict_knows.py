"""What a prediction says it knows: its GPU and host session, a device or batch it cannot
answer for refused, N devices monotone, NICs per node, the measured point whatever the path."""

import os
from pathlib import Path

import pytest

from dlperf.errors import ConfigError
from dlperf.perfmodel import api, comm

ROOT = Path(__file__).resolve().parents[2] / "benchmarks/results"
H200 = [ROOT / "h200", ROOT / "h200x2"]
R50 = dict(model="resnet50", framework="torch", mode="eager", precision="bf16", device="cuda",
           data="synthetic", layout="auto")


@pytest.fixture(scope="module", autouse=True)
def _cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DLPERF_CACHE_DIR", str(tmp_path_factory.mktemp("fits")))
        yield


def test_a_prediction_names_its_gpu_and_host_session():
    p = api.predict(H200, batch_size=96, **R50)
    assert p.gpu == "NVIDIA H200"
    assert p.host_session and p.host_session.startswith("vm/")
    by_name = api.predict(H200, batch_size=96, **{**R50, "device": "h200"})
    assert by_name.predicted_step_time_s == p.predicted_step_time_s


def test_a_device_never_measured_is_refused_with_the_calibrated_ones():
    with pytest.raises(ConfigError, match=r"'A100' was never measured.*cuda \(NVIDIA H200\)"):
        api.predict(H200, batch_size=64, **{**R50, "device": "A100"})


def test_a_batch_that_cannot_fit_is_refused():
    with pytest.raises(ConfigError, match=r"batch 4096 per device does not fit.*largest batch "
                                          r"that fits is \d+ per device"):
        api.predict(H200, "gpt2_small", "torch", "eager", "bf16", "cuda", batch_size=4096)


def test_more_devices_never_step_faster_and_a_nic_per_node_costs():
    t = [api.predict(H200, batch_size=64 * n, nproc=n, **R50).predicted_step_time_s
         for n in (1, 2, 4, 8)]
    assert t == sorted(t)
    one = api.predict(H200, batch_size=1024, nproc=8, nnodes=2, network={"inter": "eth100",
                                                                         "nics_per_node": 1},
                      **R50)
    eight = api.predict(H200, batch_size=1024, nproc=8, nnodes=2,
                        network={"inter": "eth100", "nics_per_node": 8}, **R50)
    assert one.parts["exposed_comm_s"] > eight.parts["exposed_comm_s"]
    assert "1 NIC(s) per node" in one.provenance["all-reduce"]
    assert one.interval_note.startswith("multi-node: not validated")
    assert all(x != x for x in one.interval_s)


def test_hierarchical_inter_rings_share_the_nodes_nics():
    link = comm.LINKS["eth100"]
    fast = comm.LINKS["nvlink4"]
    per_gpu = comm.hierarchical_allreduce_s(1e9, 8, 2, fast, link)
    shared = comm.hierarchical_allreduce_s(1e9, 8, 2, fast, link, nics_per_node=1)
    intra = 2 * (7 * fast.alpha_s + 7 / 8 * 1e9 * fast.beta_s_per_byte)
    assert shared - intra == pytest.approx(8 * (per_gpu - intra) - 7 * 2 * link.alpha_s)
    assert comm.Network(inter=link).nics() == 1 and comm.Network(inter=comm.LINKS["ib_ndr"]).nics() == 8


def test_cpu_data_parallel_without_a_stored_cpu_run_is_refused():
    with pytest.raises(ConfigError, match="no data-parallel measurement of device cpu"):
        api.predict(H200, "resnet50", "torch", "eager", "fp32", "cpu", batch_size=32, nproc=2,
                    threads=16)


def test_the_measured_point_is_the_same_for_a_relative_and_an_absolute_db(monkeypatch):
    monkeypatch.chdir(ROOT.parents[1])
    rel = api.predict([os.path.relpath(d) for d in H200], batch_size=64, **R50)
    ab = api.predict([os.path.abspath(d) for d in H200], batch_size=64, **R50)
    assert rel.measured_point == ab.measured_point and rel.measured_point
    assert rel.measured_step_time_s == ab.measured_step_time_s
