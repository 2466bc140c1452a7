"""Real input pipelines, FLOP counts, ceilings and MFU in every framework (CPU, tiny models)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dlperf.config import IterationPolicy, make_run_config
from dlperf.data.imagefolder import make_imagefolder
from dlperf.worker import run_config

FAST = IterationPolicy(min_iters=6, min_time_s=0.0, warmup_window=2, min_warmup_iters=0,
                       max_warmup_iters=4)
FRAMEWORKS = {"torch": "eager", "jax": "xla", "tensorflow": "graph"}
MODULE = {"torch": "torch", "jax": "flax", "tensorflow": "tensorflow"}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("if") / "jpegs"
    make_imagefolder(root, images=40, classes=4, size=48, seed=2)
    return root


def _run(fw, **kw):
    pytest.importorskip(MODULE[fw])
    cfg = make_run_config(framework=fw, mode=FRAMEWORKS[fw], iterations=FAST, **kw)
    r = run_config(cfg)
    assert r["status"] == "ok", r["error"]
    return r


@pytest.fixture
def small_ceilings(monkeypatch):
    """Microbenchmarks at test sizes (the driver is the same; fewer and smaller kernels)."""
    from dlperf.measure import ceilings

    monkeypatch.setitem(ceilings.MATMUL_SIZES, "cpu", (256,))
    monkeypatch.setitem(ceilings.BANDWIDTH_BYTES, "cpu", (16 * 2**20,))
    monkeypatch.setitem(ceilings.TARGET_S, "cpu", 0.01)
    monkeypatch.setattr(ceilings, "_CACHE", {})
    monkeypatch.setattr(ceilings, "_POINT_CACHE", {})


@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")
def test_imagefolder_pipeline_trains_and_records_data_wait(folder):
    fw = "torch"
    r = _run(fw, model="resnet50_tiny", batch_size=8, data=f"imagefolder:{folder}",
             loader_workers=2, measure_ceilings=False)
    pipe = r["data_info"]["pipeline"]
    assert pipe["num_workers"] == 2 and r["data_info"]["dataset"] == "imagefolder"
    assert pipe["augment_impl"]
    waits = r["samples"]["data_wait"]
    assert len(waits) == r["n_measured"] and all(w >= 0 for w in waits)
    dw = r["data_wait"]
    assert dw["n"] == r["n_measured"] and dw["threshold"] == 0.10
    assert dw["input_bound"] == (dw["share"] > 0.10)
    assert r["memory"]["peak_rss_bytes"] > 0
    assert r["power"]["available"] is False and "GPU" in r["power"]["reason"]


@pytest.mark.parametrize("fw", ["jax", "tensorflow"])
def test_imagefolder_pipelines_of_jax_and_tensorflow_give_augmented_batches(fw, folder):
    """The pipelines alone (no model compiled): NHWC float batches, labels, data wait."""
    from dlperf.data import load_dataset
    from dlperf.zoo import get_spec

    pytest.importorskip(MODULE[fw])
    cfg = make_run_config(framework=fw, model="resnet50_tiny", batch_size=4,
                          data=f"imagefolder:{folder}", loader_workers=2)
    ds, spec = load_dataset(cfg.input.data), get_spec(cfg.workload.model)
    if fw == "jax":
        import jax

        from dlperf.frameworks.jax.input import make_pipeline

        nxt, first, info, rec, close = make_pipeline(jax, cfg, spec, ds, jax.devices("cpu")[0],
                                                     int_ids=False)
        assert info["queue_depth"] == 2 and info["num_workers"] == 2
        try:  # Grain worker processes where grain is installed, else host threads
            import grain  # noqa: F401

            assert info["impl"].endswith(" processes") and info["warnings"] == []
        except ImportError:
            assert info["device_put"] == "feeder thread" and info["warnings"]
    else:
        from dlperf.frameworks.tensorflow.adapter import import_tf
        from dlperf.frameworks.tensorflow.input import make_dataset

        tf, _ = import_tf()
        host_next, info, close = make_dataset(tf, cfg, spec, ds)
        from dlperf.data.pipeline import DataWaitRecorder

        rec = DataWaitRecorder()
        nxt = rec.wrap(host_next)
        assert info["map_num_parallel_calls"] == "AUTOTUNE"
        assert info["private_threadpool_size"] == 2
    try:
        for _ in range(12):  # more than one pass over the 40 images
            x, y = nxt()
            x, y = np.asarray(x), np.asarray(y)
            assert x.shape == (4, 32, 32, 3) and x.dtype == np.float32 and y.shape == (4,)
            assert set(y.tolist()) <= {0, 1, 2, 3}
            assert -3 < float(x.mean()) < 3 and float(x.std()) > 0.05
        assert len(rec.waits_s) == 12
    finally:
        close()


@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")  # JAX imported by earlier tests
def test_torch_pipeline_order_does_not_depend_on_workers(data_env):
    a = _run("torch", model="fcn_mnist_tiny", batch_size=16, data="mnist", loader_workers=0,
             measure_ceilings=False)
    b = _run("torch", model="fcn_mnist_tiny", batch_size=16, data="mnist", loader_workers=2,
             measure_ceilings=False)
    assert a["losses"]["first"] == b["losses"]["first"]  # same init, same first batch
    assert a["data_info"]["pipeline"]["prefetch_factor"] is None
    assert b["data_info"]["pipeline"]["persistent_workers"] is True


def test_prepared_batches_have_no_data_wait(data_env):
    r = _run("torch", model="fcn_mnist_tiny", batch_size=16, data="mnist",
             measure_ceilings=False)
    assert r["data_wait"] is None and "data_wait" not in r["samples"]


@pytest.mark.parametrize("fw", list(FRAMEWORKS))
def test_flops_ceilings_and_mfu(fw, small_ceilings):
    r = _run(fw, model="fcn5_tiny", batch_size=16)
    fl, m, c = r["flops"], r["mfu"], r["ceilings"]
    assert r["probe_errors"] is None
    assert fl["analytic_train_flops_per_sample"] == 3 * r["spec"]["forward_flops_per_sample"]
    # torch and XLA count the matmuls of forward and backward (no input gradient of the first
    # layer: below 3x forward); TensorFlow's profiler adds element-wise ops
    lo, hi = (0.8, 1.0) if fw != "tensorflow" else (0.8, 1.6)
    assert lo < fl["framework_to_analytic"] <= hi
    assert list(c["matmul_flops_per_s"]) == ["fp32"]  # the point's precision only
    assert c["matmul_flops_per_s"]["fp32"] > 1e8
    assert c["bandwidth_bytes_per_s"] > 1e8
    assert m["achieved_flops_per_s"] == pytest.approx(
        fl["analytic_train_flops_per_sample"] * r["throughput"]["samples_per_s"])
    assert m["mfu"] == pytest.approx(m["achieved_flops_per_s"] / c["matmul_flops_per_s"]["fp32"])
    assert m["mfu"] > 0  # (on a shared CPU the ceiling can be measured low: then MFU > 1)
    assert (m["mfu"] > 1) == any("MFU above 100%" in w for w in r["warnings"])
    assert m["datasheet_flops_per_s"] is None  # a CPU has no datasheet entry
    if fw in ("torch", "jax"):
        roof = m["roofline"]
        assert roof["intensity_flop_per_byte"] == pytest.approx(
            fl["framework_flops_per_step"] / fl["bytes_per_step"])
        assert roof["bound"] in ("memory", "compute")
    again = _run(fw, model="fcn5_tiny", batch_size=8)
    assert again["ceilings"]["cached"] is True  # measured once per worker process
    assert again["ceilings"]["matmul_flops_per_s"] == c["matmul_flops_per_s"]


@pytest.mark.parametrize("fw", ["jax", "tensorflow"])
def test_mnist_pipeline_trains(fw, data_env):
    r = _run(fw, model="fcn_mnist_tiny", batch_size=16, data="mnist", loader_workers=1,
             measure_ceilings=False)
    assert r["data_info"]["pipeline"]["num_workers"] == 1
    assert len(r["samples"]["data_wait"]) == r["n_measured"]
    if fw == "tensorflow":
        # TensorFlow's CPU allocator reports its peak where it tracks it (it did on an AVX-512
        # host; "Allocator stats not available for device 'CPU:0'" on an AVX2 one, TF 2.21):
        # then it is a positive count, else None; the RSS peak is always there.
        import tensorflow as tf

        try:
            tracked = "peak" in tf.config.experimental.get_memory_info("CPU:0")
        except (ValueError, RuntimeError):
            tracked = False
        peak = r["memory"]["peak_allocated_bytes"]
        assert (peak > 0) if tracked else (peak is None), (tracked, peak)
        assert r["memory"]["peak_rss_bytes"] > 0


def test_results_store_the_new_columns_and_samples(tmp_path, data_env, small_ceilings):
    from dlperf.results.store import ResultStore

    r = _run("torch", model="fcn_mnist_tiny", batch_size=16, data="mnist", loader_workers=0)
    with ResultStore(tmp_path / "r.db") as s:
        rid = s.add(r)
        row = s.rows()[0]
        assert row["loader_workers"] == 0
        assert row["data_wait_share"] == pytest.approx(r["data_wait"]["share"])
        assert row["input_bound"] is r["data_wait"]["input_bound"]
        assert row["mfu"] == pytest.approx(r["mfu"]["mfu"])
        assert row["energy_per_iter_j"] is None
        assert s.samples(rid)["data_wait"]["step_time_s"] == pytest.approx(
            r["samples"]["data_wait"])
        assert json.loads(row["result_json"])["ceilings"]["matmul_flops_per_s"]["fp32"] > 0


def test_loader_workers_need_real_data():
    from dlperf.errors import ConfigError

    with pytest.raises(ConfigError, match="needs real data"):
        make_run_config(model="fcn5_tiny", batch_size=8, loader_workers=2)


def test_run_key_ignores_labels_and_keeps_old_keys():
    base = make_run_config(model="fcn5_tiny", batch_size=8)
    same = make_run_config(model="fcn5_tiny", batch_size=8, input_bound_share=0.2,
                           measure_ceilings=False, power_interval_s=0.05)
    assert base.run_key() == same.run_key()
    # the key of a point without a pipeline is what it was before the pipeline fields existed
    import hashlib

    d = {k: v for k, v in base.flat().items()
         if k in {"model", "framework", "mode", "device", "precision", "batch_size",
                  "grad_accum", "data", "threads", "seed"}}
    old = hashlib.sha256(json.dumps(d, sort_keys=True, separators=(",", ":")).encode())
    assert base.run_key() == old.hexdigest()[:16]
    w0 = make_run_config(model="fcn_mnist_tiny", batch_size=8, data="mnist", loader_workers=0)
    w2 = make_run_config(model="fcn_mnist_tiny", batch_size=8, data="mnist", loader_workers=2)
    assert len({w0.run_key(), w2.run_key(),
                make_run_config(model="fcn_mnist_tiny", batch_size=8, data="mnist").run_key()}) == 3
