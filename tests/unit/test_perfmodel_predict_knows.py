"""What a prediction says it knows: its GPU and host session, a device or batch it cannot
answer for refused, N devices monotone, NICs per node, the measured point whatever the path."""

import os
import shutil

import pytest

from committed import H200, R50, ROOT
from dlperf.errors import ConfigError
from dlperf.perfmodel import api, comm, whatifs
from dlperf.perfmodel import intervalchoice as ic
from dlperf.perfmodel.calibrate import Config

pytestmark = pytest.mark.usefixtures("module_fit_cache")


def test_a_prediction_names_its_gpu_and_host_session():
    p = api.predict(H200, batch_size=96, **R50)
    assert p.gpu == "NVIDIA H200"
    assert p.host_session and p.host_session.startswith("vm/")
    by_name = api.predict(H200, batch_size=96, **{**R50, "device": "h200"})
    assert by_name.predicted_step_time_s == p.predicted_step_time_s


def test_a_device_never_measured_is_refused_with_the_calibrated_ones():
    with pytest.raises(ConfigError, match=r"'A100' was never measured.*cuda \(NVIDIA H200\)"):
        api.predict(H200, batch_size=64, **{**R50, "device": "A100"})


def test_the_gpu_a_refusal_suggests_has_a_datasheet():
    from dlperf.perfmodel import records, request

    cpu = records.load(ROOT / "h200" / "cpu_threads.db")
    with pytest.raises(ConfigError, match=r"--gpu NAME, NAME one of the datasheet GPUs h100, "):
        request.device_for(cpu, "cuda")  # a device kind is no GPU name
    with pytest.raises(ConfigError, match=r"with --gpu A100 \(a datasheet GPU"):
        request.device_for(cpu, "A100")


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


def test_a_session_is_named_from_what_an_older_record_has():
    """mfu_inputs.db's records hold no ``env.cpu_id``: the session names the CPU by its model
    name, never ``None``."""
    p = api.predict(ROOT / "h200", "vgg16", "jax", "xla", "bf16", "cuda", batch_size=64)
    assert "None" not in p.host_session
    assert p.host_session.startswith("vm/Intel(R) Xeon(R) Processor/2026-")


def _ratios(p):
    return p.interval_s[0] / p.predicted_step_time_s, p.interval_s[1] / p.predicted_step_time_s


def _expected(table_dir, files, category, bound, level):
    """The interval the committed table of ``files`` gives ``category`` at ``level``."""
    from dlperf.perfmodel import fitcache as fc
    from dlperf.perfmodel import intervals as iv

    table, why = fc.read_table([str(f) for f in files])
    assert table is not None, why
    return iv.mondrian([(r, b) for r, b, _ in table[category]], bound, level, category)


def test_files_without_a_table_borrow_the_committed_tables_interval_wider(tmp_path):
    h200 = sorted((ROOT / "h200").glob("*.db"))
    one = api.predict(ROOT / "h200/dlbench.db", "alexnet", "torch", "eager", "bf16", "cuda",
                      batch_size=128)
    assert one.interval_group.startswith("borrowed from the h200 residual table (")
    assert " at 95%: held-out batch, " in one.interval_group
    want = _expected(ROOT / "h200", h200, "held-out batch", one.bound, 0.95)
    assert _ratios(one) == pytest.approx((want.low_ratio, want.high_ratio))
    assert any("interval borrowed at a wider level (95% for 90%)" in a for a in one.assumptions)
    # the H100's files of the two folders: no table of their own (h100/ has none)
    two = api.predict([ROOT / "h200", ROOT / "h100"], batch_size=96, **{**R50, "device": "h100"})
    assert two.interval_group.startswith("borrowed from the h200 residual table")
    assert two.interval_s[0] < two.predicted_step_time_s < two.interval_s[1]
    mine = tmp_path / "mine"
    mine.mkdir()
    cpu = shutil.copy(ROOT / "cpu-dev/ddp_buckets.db", mine / "cpu.db")
    p = api.predict(cpu, "fcn5", "torch", "eager", "fp32", "cpu", batch_size=48)
    assert p.interval_group.startswith("borrowed from the h200")
    assert p.interval_s[0] < p.predicted_step_time_s < p.interval_s[1]


def test_an_h100_prediction_borrowing_h200_residuals_is_widened_for_the_other_gpu():
    """The H100 files have no residual table: their prediction borrows the h200 table's
    residuals of its path at 95%, widened by the measured H200 -> H100 error, and says so;
    an H200 prediction borrowing the same table is not widened."""
    from dlperf.perfmodel import intervals as iv

    h200 = sorted((ROOT / "h200").glob("*.db"))
    p = api.predict(ROOT / "h100/suite.db", batch_size=48, **R50)
    assert p.gpu.startswith("NVIDIA H100")
    assert p.interval_group.startswith("borrowed from the h200 residual table (")
    assert f"widened by 4.8% for {p.gpu} from " in p.interval_group
    assert "NVIDIA H200 residuals (median cross-GPU error" in p.interval_group
    assert "only" not in p.interval_group
    want = iv.widened(_expected(ROOT / "h200", h200, p.validation_category, p.bound, 0.95),
                      iv.CROSS_GPU_ERROR)
    assert _ratios(p) == pytest.approx((want.low_ratio, want.high_ratio))
    same = api.predict(ROOT / "h200/dlbench.db", "alexnet", "torch", "eager", "bf16", "cuda",
                       batch_size=128)
    assert "residuals measured on this device (NVIDIA H200)" in same.interval_group


def test_a_host_speed_or_framework_what_if_borrows_its_paths_interval_wider():
    p = api.predict(H200, batch_size=96, what_if={"host_speed_ns": 50}, **R50)
    assert p.interval_group.startswith("borrowed from held-out batch at 95%: held-out batch")
    want = ic._interval(api.records_of(H200), "held-out batch", 0.95, p.bound)
    assert _ratios(p) == pytest.approx((want.low_ratio, want.high_ratio))
    # torch eager -> jax xla is back-tested: its own residuals, not borrowed (vgg16's jax xla
    # and torch graph are stored at b=128 alone, withheld: a what-if from the base's series)
    vgg = {**R50, "model": "vgg16"}
    f = api.predict(H200, batch_size=128, what_if={"framework": "jax", "mode": "xla"}, **vgg)
    assert f.how == "what-if" and f.interval_group.startswith("what-if torch->jax"), f
    # each direction of the other back-tested framework pairs: its own category, own level
    for base, what_if, cat in (
            (("torch", "graph"), {"framework": "jax", "mode": "xla"},
             "what-if torch graph->jax"),
            (("jax", "xla"), {"framework": "torch", "mode": "graph"},
             "what-if jax->torch graph")):
        o = api.predict(H200, batch_size=128, what_if=what_if,
                        **{**vgg, "framework": base[0], "mode": base[1]})
        assert o.how == "what-if" and o.validation_category == cat, (base, o.validation_category)
        assert o.interval_group.startswith(cat + ","), o.interval_group
        assert not any("borrowed" in a for a in o.assumptions), o.assumptions
    jax = Config("vgg16", "jax", "xla", "bf16", "cuda", "synthetic", "auto")
    assert whatifs.whatif_category(jax, jax.with_(framework="torch", mode="eager")) == (
        "what-if jax->torch")
    # torch graph at a compile mode of its own -> jax xla is not: eager->graph's, wider
    g = api.predict(H200, batch_size=128, what_if={"framework": "jax", "mode": "xla"},
                    **{**R50, "model": "alexnet_cifar", "mode": "graph",
                       "compile_mode": "reduce-overhead"})
    assert g.how == "what-if" and g.validation_category == "what-if eager->graph"
    assert g.interval_group.startswith("borrowed from what-if eager->graph at 95%: ")


def _damaged_lstm(tmp_path, monkeypatch, value: str, batches: tuple[int, ...]):
    """A copy of the H200 calibration file whose lstm bf16 rows at ``batches`` hold the SQL
    literal ``value`` as their median step time, with a cache of this test's own."""
    import sqlite3

    db = tmp_path / "c.db"
    shutil.copy(ROOT / "h200/calibration.db", db)
    con = sqlite3.connect(db)
    con.execute(f"UPDATE results SET step_time_median_s = {value} WHERE model = 'lstm' AND "
                f"precision = 'bf16' AND batch_size IN {batches}")
    con.commit()
    con.close()
    monkeypatch.setenv("DLPERF_CACHE_DIR", str(tmp_path / "cache"))
    return db


def test_damaged_rows_are_said_on_every_prediction(tmp_path, monkeypatch):
    """Three of lstm bf16's four rows damaged: the prediction (from the file, then from the
    points kept in the cache) says how many rows were skipped."""
    import warnings

    from dlperf.perfmodel import records
    from dlperf.results.rowcheck import DamagedRows

    db = _damaged_lstm(tmp_path, monkeypatch, "'oops'", (16, 64, 128))
    for _ in range(2):  # read through the store, then from the user's cache
        api._RECORDS.clear()
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            p = api.predict(db, "lstm", "torch", "eager", "bf16", "cuda", batch_size=48)
        assert [w for w in p.warnings if "3 damaged result row(s)" in w and "skipped" in w]
        assert sum("3 damaged result row(s)" in str(w.message) for w in got) == 1
        with pytest.warns(DamagedRows, match="3 damaged"):
            assert records.load([str(db)]).damaged[str(db)].keys() == {25, 27, 28}


def test_a_refused_series_names_the_damaged_rows_skipped(tmp_path, monkeypatch):
    """A series that cannot be fitted ("measure another batch size") where rows were skipped
    says so: the user measured them."""
    from dlperf.perfmodel import model as pm
    from dlperf.results.rowcheck import DamagedRows

    db = _damaged_lstm(tmp_path, monkeypatch, "-1.0", (16, 64))

    def one_batch(*a, **k):
        raise ValueError("one batch size and no device prior; measure another batch size")
    monkeypatch.setattr(pm, "from_series", one_batch)
    with pytest.raises(ConfigError, match=r"measure another batch size \(2 damaged result "
                                          r"row\(s\) in .* skipped"), \
            pytest.warns(DamagedRows):
        api.predict(db, "lstm", "torch", "eager", "bf16", "cuda", batch_size=48)


FW = ROOT / "h200" / "frameworks.db"  # resnet50 torch/eager bf16 stored at two layouts
R50_BASE = dict(model="resnet50", framework="torch", mode="eager", precision="bf16")


@pytest.mark.parametrize("what_if, side", [
    ({"precision": "fp32"}, "target"), ({"mode": "graph"}, "target"),
    ({"batch_size": "0.25x"}, "target"), ({"host_speed_ns": 90}, "base and target")])
def test_a_warning_beside_a_what_if_names_the_side_it_concerns(what_if, side):
    """The note naming which of two stored layouts was picked is about the what-if's base, so
    it says so on every axis; the batch outside the measured series (16 and 4 per device
    against 128..256) is the target's series for a precision or mode what-if (the target is
    stored at 128 and 256 in frameworks.db, so it is predicted from its own series), the
    target's batch for a batch what-if and both for a host-speed one."""
    p = api.predict(FW, batch_size=16, what_if=what_if, **R50_BASE)
    picked = [w for w in p.warnings if "2 stored configurations match" in w]
    outside = [w for w in p.warnings if "measured batches 128..256" in w]
    assert len(picked) == 1 and picked[0].startswith("what-if base: 2 stored")
    assert len(outside) == 1 and outside[0].startswith(f"what-if {side}: batch ")
    assert all(w.startswith("what-if ") for w in p.warnings)


def test_a_warning_without_a_what_if_names_no_side():
    p = api.predict(FW, batch_size=16, **R50_BASE)
    assert any(w.startswith("2 stored configurations match") for w in p.warnings)
    assert not any(w.startswith("what-if") for w in p.warnings)
