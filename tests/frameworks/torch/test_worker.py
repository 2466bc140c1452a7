"""The worker in-process with real PyTorch on the CPU: arithmetic, flags, failures, real data."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from dlperf.config import IterationPolicy, make_run_config  # noqa: E402
from dlperf.worker import run_config  # noqa: E402


@pytest.fixture(autouse=True)
def _one_intra_op_thread():
    """One PyTorch thread for these in-process runs: by this point of the suite the process has
    imported TensorFlow and JAX, whose thread pools share the 2 cores with PyTorch's; with two
    intra-op threads a tiny step slowed 20-fold in the full run (fcn5_tiny graph: 41 ms median
    against ~2 ms alone), failing the compile-in-first-step check on timing alone."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

FAST = IterationPolicy(min_iters=6, min_time_s=0.0, warmup_window=2, min_warmup_iters=0,
                       max_warmup_iters=6)


@pytest.mark.parametrize("accum", [1, 4])
def test_samples_are_measured_steps_times_global_batch(accum):
    r = run_config(make_run_config(model="fcn5_tiny", batch_size=16, grad_accum=accum,
                                   iterations=FAST))
    assert r["status"] == "ok", r["error"]
    tp = r["throughput"]
    assert tp["samples"] == r["n_measured"] * 16  # exactly, whatever the accumulation
    assert tp["samples_per_s"] == pytest.approx(tp["samples"] / r["measured_time_s"])
    assert r["n_measured"] == len(r["samples"]["measure"]) == len(r["losses"]["measure"])
    assert r["flags"]["grad_accum"] == accum


@pytest.mark.parametrize("precision,mm,autocast", [("fp32", "ieee", None), ("tf32", "tf32", None),
                                                    ("bf16", "ieee", "bfloat16")])
def test_precision_is_applied_explicitly_and_recorded(precision, mm, autocast):
    r = run_config(make_run_config(model="fcn5_tiny", batch_size=8, precision=precision,
                                   iterations=FAST))
    assert r["status"] == "ok", r["error"]
    assert r["flags"]["matmul_fp32_precision"] == mm
    assert r["flags"]["cudnn_conv_fp32_precision"] == mm
    assert r["flags"]["autocast_dtype"] == autocast


def test_result_carries_environment_and_memory():
    r = run_config(make_run_config(model="lstm_tiny", batch_size=4, iterations=FAST))
    assert r["status"] == "ok", r["error"]
    assert r["env"]["cpu_logical"] >= 1 and r["env"]["python"]
    assert r["versions"]["torch"].startswith("2.")
    assert r["memory"]["peak_rss_bytes"] > 50 * 2**20
    assert r["tokens_per_sample"] if "tokens_per_sample" in r else r["spec"]["tokens_per_sample"] == 16
    assert r["throughput"]["tokens_per_s"] == pytest.approx(r["throughput"]["samples_per_s"] * 16)
    assert r["summary"]["ci_low"] <= r["summary"]["median"] <= r["summary"]["ci_high"]


def test_data_that_does_not_fit_is_an_error_result(data_env):
    r = run_config(make_run_config(model="fcn5_tiny", batch_size=8, data="mnist", iterations=FAST))
    assert r["status"] == "error"
    assert "fcn5_tiny" in r["error"] and "mnist" in r["error"]


def test_cuda_requested_without_gpu_is_an_unavailable_result():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    r = run_config(make_run_config(model="fcn5_tiny", batch_size=8, device="cuda", iterations=FAST))
    assert r["status"] == "unavailable" and "--device cpu" in r["error"]


@pytest.mark.parametrize("model,data,iters", [("fcn_mnist_tiny", "mnist", 400),
                                              ("lstm_tiny", "ptb", 100)])
def test_real_data_trains_and_loss_falls(data_env, model, data, iters):
    pol = IterationPolicy(min_iters=iters, min_time_s=0.0, warmup_window=5, min_warmup_iters=0,
                          max_warmup_iters=20)
    r = run_config(make_run_config(model=model, batch_size=32, data=data, iterations=pol))
    assert r["status"] == "ok", r["error"]
    assert r["data_info"]["kind"] == "real" and r["data_info"]["dataset"] == data
    losses = r["losses"]["first"] + r["losses"]["warmup"] + r["losses"]["measure"]
    head, tail = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
    assert tail < 0.9 * head, (head, tail)


@pytest.mark.slow
@pytest.mark.parametrize("compile_mode", ["default", "reduce-overhead"])
def test_torch_graph_mode_records_compile_time_and_no_recompiles(compile_mode):
    # torch.compile on the CPU builds C++ kernels: tens of seconds, so one small model only.
    # reduce-overhead on the CPU: the same kernels (no CUDA graphs there), the mode recorded and
    # CUDA-graph steps marked (cudagraph_mark_step_begin) without error.
    r = run_config(make_run_config(model="fcn5_tiny", batch_size=8, mode="graph", iterations=FAST,
                                   compile_mode=compile_mode))
    assert r["status"] == "ok", r["error"]
    c = r["compile"]
    # (> 0, not more: Inductor's on-disk cache can serve a graph compiled by an earlier test)
    assert c["compile_time_s"] > 0 and c["n_compiles"] >= 1
    assert c["recompiles_measured"] == 0  # (steady state itself is noisy on a busy 2-core CPU)
    assert r["first_iter_s"] > 10 * r["summary"]["median"]  # compilation is in the first step
    assert r["flags"]["compile"] == {"backend": "inductor", "mode": compile_mode,
                                     "fullgraph": False}
    assert "cudagraph_skips" not in c  # CUDA only
    assert c["graph_breaks"] == 0 and c["graph_break_reasons"] == {}
    assert r["config"]["runtime"]["compile_mode"] == compile_mode
    assert ("captures CUDA graphs, which the CPU has not" in " ".join(r["warnings"])) == (
        compile_mode == "reduce-overhead")


def test_graph_break_reasons_count_both_kinds_of_break():
    from collections import Counter

    from dlperf.frameworks.torch.adapter import graph_break_reasons

    counters = {"graph_break": Counter({"Failed to trace builtin operator\n  Explanation: x": 2}),
                "unimplemented": Counter({"Attempted to wrap RNN, GRU, or LSTM\n  Hint: y": 1})}
    assert graph_break_reasons(counters) == {"Failed to trace builtin operator": 2,
                                             "Attempted to wrap RNN, GRU, or LSTM": 1}
    assert graph_break_reasons({"graph_break": Counter(), "unimplemented": Counter()}) == {}


@pytest.mark.slow
def test_torch_graph_mode_records_the_lstm_graph_break():
    """torch.compile stops at nn.LSTM (Dynamo's allow_rnn is off): the result says so, with
    the reason, and warns that the rest runs eagerly (it recorded 0 breaks before)."""
    r = run_config(make_run_config(model="lstm_tiny", batch_size=4, mode="graph", iterations=FAST,
                                   measure_ceilings=False))
    assert r["status"] == "ok", r["error"]
    c = r["compile"]
    assert c["graph_breaks"] >= 1
    assert any("LSTM" in k for k in c["graph_break_reasons"]), c
    assert any("broke the graph" in w and "LSTM" in w for w in r["warnings"]), r["warnings"]


@pytest.mark.parametrize("device,precision,layout,expect", [
    ("cuda", "bf16", "auto", True), ("cuda", "tf32", "auto", True), ("cuda", "fp32", "auto", False),
    ("cpu", "bf16", "auto", False), ("cuda", "fp32", "nhwc", True), ("cuda", "bf16", "nchw", False)])
def test_torch_auto_layout_policy(device, precision, layout, expect):
    """auto = channels_last only where convolutions run on Tensor Cores (CUDA, bf16 or tf32);
    fp32 (TF32 off) and the CPU stay NCHW; nchw/nhwc force it. Non-image models never."""
    from dlperf.frameworks.torch.adapter import TorchAdapter
    from dlperf.zoo import get_spec

    cfg = make_run_config(model="resnet50", batch_size=2, device=device, precision=precision,
                          layout=layout)
    assert TorchAdapter.channels_last(cfg, get_spec("resnet50")) is expect
    assert TorchAdapter.channels_last(cfg.with_(model="lstm"),
                                      get_spec("lstm")) is False


@pytest.mark.parametrize("model,layout,expect", [("resnet50_tiny", "auto", "NCHW"),
                                                  ("resnet50_tiny", "nhwc", "NHWC"),
                                                  ("fcn5_tiny", "nhwc", None)])
def test_layout_is_applied_and_recorded(model, layout, expect):
    """auto on the CPU keeps NCHW (channels_last is the CUDA recommendation); nhwc really puts
    the input batches in channels_last; models without 4-D activations record None."""
    import torch

    from dlperf.frameworks.torch.input import make_source
    from dlperf.zoo import get_spec

    cfg = make_run_config(model=model, batch_size=2, layout=layout, iterations=FAST)
    r = run_config(cfg)
    assert r["status"] == "ok", r["error"]
    assert r["flags"]["layout"] == expect
    if expect == "NHWC":
        batch = make_source(cfg, get_spec(model), torch.device("cpu"), True).next_batch()
        assert batch[0].is_contiguous(memory_format=torch.channels_last)
        assert not batch[0].is_contiguous()


def test_a_busy_host_is_warned_about():
    from dlperf.measure.host import busy_host_warning

    assert "host was busy" in busy_host_warning({"load_average_1_5_15": [4.0, 3, 2],
                                                 "cpu_affinity": 2})
    assert busy_host_warning({"load_average_1_5_15": [1.5, 3, 2], "cpu_affinity": 2}) is None
    assert busy_host_warning({}) is None
    # pinned to 4 of a machine's CPUs: the load elsewhere does not count, the usable CPUs do
    # (the busiest one is this worker itself)
    quiet = {"load_average_1_5_15": [9.0, 9, 9], "cpu_affinity": 4,
             "usable_cpu_busy_percent": [100.0, 3.0, 0.0, 5.0]}
    assert busy_host_warning(quiet) is None
    busy = {**quiet, "usable_cpu_busy_percent": [100.0, 90.0, 60.0, 40.0]}
    assert "63% busy" in busy_host_warning(busy)


def test_usable_cpu_busy_only_when_pinned_to_a_subset():
    import os

    from dlperf.env import usable_cpu_busy

    every = sorted(os.sched_getaffinity(0))
    import psutil

    if len(every) < (psutil.cpu_count() or 1):
        pytest.skip("this process is already pinned to a subset")
    assert usable_cpu_busy(every) is None
    one = usable_cpu_busy(every[:1], interval_s=0.05)
    if len(every) > 1:
        assert one is not None and len(one) == 1 and 0.0 <= one[0] <= 100.0


def test_cpu_wait_of_the_measuring_thread_is_stored_and_warned_about():
    """schedstat's run delay over the measured segment: stored with every ok result; a share
    over CPU_WAIT_WARN of the segment is a warning."""
    from dlperf.measure.host import CPU_WAIT_WARN, cpu_wait, thread_run_delay_ns

    assert cpu_wait({"start": 1_000_000, "end": 101_000_000}, 1.0) == {"seconds": 0.1,
                                                                      "share": 0.1}
    assert cpu_wait({"start": None, "end": 5}, 1.0) is None and cpu_wait(None, 1.0) is None
    assert 0.1 > CPU_WAIT_WARN
    if thread_run_delay_ns() is None:
        pytest.skip("no /proc/thread-self/schedstat here")
    cfg = make_run_config(model="fcn5_tiny", batch_size=2, iterations=FAST)
    r = run_config(cfg)
    assert r["status"] == "ok"
    cw = r["host_cpu_wait"]
    assert cw is not None and 0.0 <= cw["share"] <= 1.0
    assert (cw["share"] >= CPU_WAIT_WARN) == any("waited for a CPU" in w for w in r["warnings"])


def test_mfu_above_one_names_the_likely_cause():
    from dlperf.measure.warnings import mfu_above_one, quality_warnings
    from dlperf.results.schema import RunRecord

    def res(mfu, fw=None, family="fcn"):
        return RunRecord.from_dict(
            {"mfu": {"mfu": mfu, "mfu_framework": fw, "ceiling_source": "measured matmul fp32"},
             "spec": {"family": family}})

    assert mfu_above_one(res(0.95)) is None and mfu_above_one(RunRecord.from_dict({})) is None
    first_layer = mfu_above_one(res(1.03, fw=0.87))  # fcn5 fp32 on the H200
    assert "103%" in first_layer and "87%" in first_layer and "input gradient" in first_layer
    assert "Winograd" in mfu_above_one(res(1.26, fw=1.26, family="cnn"))  # vgg16 fp32
    assert "square-GEMM ceiling" in mfu_above_one(res(1.05, fw=1.04, family="transformer"))
    assert any("input gradient" in w for w in quality_warnings(res(1.03, fw=0.87)))


def test_cpu_ceilings_beside_loader_workers_are_warned_about():
    """On a CPU the ceilings run after the measurement while the loader workers refill their
    buffers on the same CPUs (fp32 124 against 268 GFLOP/s in a fresh user's runs)."""
    from dlperf.measure.warnings import quality_warnings
    from dlperf.results.schema import RunRecord

    def res(device, workers, ceilings=True):
        return RunRecord.from_dict(
            {"device": device, "config": {"loader_workers": workers},
             "ceilings": {"matmul_flops_per_s": {"fp32": 1e11}} if ceilings else None})

    def warned(r):
        return any(w.startswith("the CPU ceilings were measured while") for w in
                   quality_warnings(r))

    assert warned(res("cpu", 2))
    assert not warned(res("cpu", 0)) and not warned(res("cpu", None))
    assert not warned(res("cuda", 2)) and not warned(res("cpu", 2, ceilings=False))


def test_cpu_wait_share_is_of_the_window_its_readings_bound():
    """The run delay is read just outside the measured segment: its share is taken of that
    window's own wall time, so waiting right before the segment starts cannot push it over 1
    (seen on a loaded 2-core host: 16 ms of delay against a 13 ms segment)."""
    from dlperf.measure.host import cpu_wait

    assert cpu_wait({"start": 0, "end": 16_000_000, "wall": 20_000_000}, 0.013) == {
        "seconds": 0.016, "share": 0.8}
    assert cpu_wait({"start": 0, "end": 1_000_000, "wall": None}, 0.01)["share"] == 0.1
