"""Predictions from stored timelines (dlperf.perfmodel.retarget) on the committed H200
calibration file and the H100 device profile: a traced point reproduces its measurement, the
transforms are chosen by what is stored, and a GPU never at hand is marked and widened."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from dlperf.errors import ConfigError
from dlperf.perfmodel import gpuanswer, retarget

ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "benchmarks/results/h200/calibration2.db"
H100 = ROOT / "benchmarks/results/h100/calibrate.db"


@pytest.fixture(scope="module")
def lib():
    return retarget.TraceLibrary([str(H200), str(H100)])


def test_a_traced_device_bound_point_reproduces_its_measurement(lib):
    p = retarget.predict(lib, "gpt2_small", "torch", "eager", "fp32", 64)
    assert p.category == "own trace" and p.bound == "device"
    assert p.step_s == pytest.approx(p.measured_s, rel=0.02)


def test_batch_and_precision_are_chosen_by_what_is_stored(lib):
    assert retarget.predict(lib, "lstm", "torch", "eager", "fp32", 48).category == \
        "batch, interpolated"
    assert retarget.predict(lib, "lstm", "torch", "eager", "fp32", 512).category == \
        "batch, interpolated"  # the two largest traced batches, extrapolated
    one = retarget.predict(lib, "gpt2_small", "jax", "xla", "bf16", 16)
    assert one.category == "batch, one trace"
    # fp32 of a model traced only in bf16 (JAX bert_base): from the other precision
    assert retarget.predict(lib, "bert_base", "jax", "xla", "fp32", 8).category in (
        "own trace", "precision")


def test_another_gpu_moves_the_device_and_marks_a_datasheet(lib):
    same = retarget.predict(lib, "resnet50", "torch", "eager", "fp32", 128, anchor=False)
    h100 = retarget.predict(lib, "resnet50", "torch", "eager", "fp32", 128, gpu="h100",
                            host="none", anchor=False)
    assert h100.category == "gpu" and not h100.datasheet_only
    assert h100.step_s > same.step_s  # less bandwidth, the same compute
    ds = retarget.predict(lib, "resnet50", "torch", "eager", "fp32", 128,
                          gpu="datasheet:a100", host="none", anchor=False)
    assert ds.datasheet_only and ds.step_s > h100.step_s
    w = lambda p: p.interval_s[1] / p.interval_s[0]  # noqa: E731
    assert w(ds) > w(h100)


def test_anchoring_uses_the_source_measurement(lib):
    a = retarget.predict(lib, "resnet50", "torch", "eager", "bf16", 64, gpu="h100",
                         host="none", anchor=True)
    assert any(t.startswith("anchored") for t in a.transforms)


def test_refusals_name_the_fix(lib):
    with pytest.raises(retarget.NoTimeline, match="no stored timeline"):
        retarget.predict(lib, "vgg16", "torch", "eager", "bf16", 64, gpu="h100")
    with pytest.raises(ConfigError, match="no datasheet") as e:
        retarget.predict(lib, "lstm", "torch", "eager", "fp32", 64, gpu="tpu-v5")
    assert not isinstance(e.value, retarget.NoTimeline)  # answer() falls back on NoTimeline only
    with pytest.raises(ConfigError, match="host="):
        retarget.predict(lib, "lstm", "torch", "eager", "fp32", 64, gpu="h100", host="fast")


def test_answer_fills_the_configuration_and_prints(lib):
    d = gpuanswer.answer([str(H200), str(H100)], "lstm", "torch", "eager", "fp32", 64, "h100")
    assert d["config"]["precision"] == "fp32" and d["gpu_profile"] == "h100"
    assert "on NVIDIA H100 80GB HBM3" in gpuanswer.text(d)
    with pytest.raises(ConfigError, match="several"):
        gpuanswer.answer([str(H200)], "lstm", None, None, None, 64, "h100")


def test_data_parallel_without_a_stored_pair_is_refused_as_the_step_level_model(lib):
    # trial16 G2: rho = kappa = 0 answered 21.97 ms where the fitted overhead gives 26.32 ms
    with pytest.raises(ConfigError, match="DDP's own overhead") as e:
        retarget.predict(lib, "gpt2_small", "torch", "eager", "fp32", 16, anchor=False, nproc=2)
    assert "dlperf run --device cuda --nproc 2" in str(e.value)
    assert not isinstance(e.value, retarget.NoTimeline)  # no fallback to a zero overhead
    # the CLI refuses it as the step-level model does, naming the input and how to add it
    from typer.testing import CliRunner

    from dlperf.cli import app

    q = ["predict", "--db", str(ROOT / "benchmarks/results/h200"), "--model", "resnet50",
         "--framework", "torch", "--mode", "eager", "--precision", "bf16", "--data",
         "synthetic", "--layout", "auto", "-b", "128", "--nproc", "2"]
    step, gpu = (CliRunner().invoke(app, q + extra) for extra in ([], ["--gpu", "h100"]))
    assert step.exit_code == gpu.exit_code == 2
    for r in (step, gpu):
        out = " ".join(r.output.split())
        assert "not measured" in out and "--db benchmarks/results/h200x2" in out, out


def test_data_parallel_widens_the_one_gpu_band():
    dbs = [str(H200), str(H100), str(ROOT / "benchmarks/results/h200x2")]
    lib2 = retarget.TraceLibrary(dbs)
    one = retarget.predict(lib2, "gpt2_small", "torch", "eager", "fp32", 16, anchor=False)
    two = retarget.predict(lib2, "gpt2_small", "torch", "eager", "fp32", 16, anchor=False,
                           nproc=2)
    assert two.step_s >= one.step_s and two.extra["parts"]["exposed_comm_s"] >= 0
    assert "not validated" in two.category and two.measured_s is None
    notes = " ".join(two.extra["assumptions"])
    assert "not back-tested" in notes and "fitted on" in notes and "all-reduce: measured" in notes
    w = lambda p: p.interval_s[1] / p.step_s - 1  # noqa: E731
    assert w(two) == pytest.approx(retarget.DP_WIDEN * w(one))


def test_data_parallel_takes_the_step_level_models_ddp_overhead_and_all_reduce():
    from dlperf.perfmodel import api
    from dlperf.perfmodel import equations as eq

    dbs = [str(ROOT / "benchmarks/results/h200"), str(ROOT / "benchmarks/results/h200x2")]
    cfg = ("resnet50", "torch", "eager", "bf16")
    one = gpuanswer.answer(dbs, *cfg, 64, "h100")
    ddp = api.ddp_overhead(retarget.TraceLibrary(dbs).recs)
    assert ddp.pairs and ddp.rho > 0 and ddp.kappa > 0
    steps = {}
    for n in (2, 4):
        d = gpuanswer.answer(dbs, *cfg, 64 * n, "h100", nproc=n)
        pt = d["parts"]
        h, dv, x = pt["one_device_host_s"], pt["one_device_device_s"], pt["exposed_comm_s"]
        assert pt["one_gpu_step_s"] == pytest.approx(one["predicted_step_time_s"])
        assert (pt["host_s"], pt["device_s"]) == pytest.approx(
            eq.dp_parts_s(h, dv, x, ddp.rho, ddp.kappa))
        # the printed parts compose to the printed step by the printed rule
        assert d["predicted_step_time_s"] == pytest.approx(
            pt["one_gpu_step_s"] * eq.step_s(pt["host_s"], pt["device_s"]) / eq.step_s(h, dv))
        assert "step_s(H (1 + rho), D + kappa H + X)" in d["composition"]
        steps[n] = d["predicted_step_time_s"]
    # DDP's hooks cost: below 100% efficiency (the step-level model's 2-GPU answer: 84%)
    assert one["predicted_step_time_s"] / steps[2] < 0.9 and steps[4] >= steps[2]


def test_data_parallel_answer_splits_the_global_batch(lib):
    d = gpuanswer.answer([str(H200), str(H100), str(ROOT / "benchmarks/results/h200x2")], "lstm", "torch", "eager", "fp32", 128, "h100",
                        nproc=2)
    assert d["config"]["nproc"] == 2 and "data parallel, assuming:" in gpuanswer.text(d)
    assert "2 x NVIDIA H100 80GB HBM3" in gpuanswer.text(d)
    with pytest.raises(ConfigError, match="multiple of --nproc"):
        gpuanswer.answer([str(H200)], "lstm", "torch", "eager", "fp32", 63, "h100", nproc=2)


def test_the_cli_refuses_what_the_replay_does_not_model():
    from typer.testing import CliRunner

    from dlperf.cli import app

    r = CliRunner().invoke(app, ["predict", "--db", str(H200), "--model", "lstm", "-b", "64",
                                 "--gpu", "h100", "--nnodes", "2", "--network", "ib_ndr"])
    assert r.exit_code == 2 and "one node" in r.output
    base = ["predict", "--db", str(H200), "--model", "lstm", "--framework", "torch",
            "--mode", "eager", "--precision", "bf16", "-b", "64", "--gpu", "h100"]
    for extra, named in ((["--explain"], ["--explain (a replay fits nothing to explain"]),
                         (["--device", "cpu", "--threads", "1"],
                          ["--device cpu (it replays CUDA timelines only)",
                           "--threads (a CPU run's thread count"])):
        r = CliRunner().invoke(app, base + extra)
        flat = " ".join(r.output.split())
        assert r.exit_code == 2 and "--gpu replays a stored timeline and cannot honour" in flat
        assert all(n in flat for n in named) and "no fit to explain" not in flat, flat
    r = CliRunner().invoke(app, ["predict", "--db", str(H200), "--validate", "--explain"])
    assert r.exit_code == 2 and "--explain would be ignored" in r.output, r.output
    ok = CliRunner().invoke(app, base + ["--device", "cuda", "--data", "synthetic"])
    assert ok.exit_code == 0, ok.output


def test_the_gpu_path_names_the_device_and_host_session(lib):
    d = gpuanswer.answer([str(H200), str(H100)], "resnet50", "torch", "eager", "bf16", 64,
                        "h100")
    assert d["gpu"] == "NVIDIA H100 80GB HBM3" and d["gpu_profile"] == "h100"
    assert d["host_session"].startswith("vm/Intel(R) Xeon(R) Processor (family 6 model 207)/2026-")
    t = gpuanswer.text(d)
    assert "on NVIDIA H100 80GB HBM3:" in t and "\nhost time from: vm/Intel(R) Xeon(R) Processor (family 6 " in t
    assert "\ninterval from: the replay back-test's 'gpu' rows" in t


def test_a_batch_is_predicted_from_the_two_traced_batches_nearest_it():
    bs = [16, 32, 64, 128]
    assert retarget.nearest_pair(bs, 48) == (32, 64)  # around it
    assert retarget.nearest_pair(bs, 8) == (16, 32)  # below all: the two smallest
    assert retarget.nearest_pair(bs, 1000) == (64, 128)  # above all: the two largest
    assert retarget.nearest_pair([64], 8) == (64, 64)  # one trace: itself twice


def test_the_interval_widens_for_a_datasheet_and_data_parallel():
    h, why = retarget.interval("gpu", False, 1)
    assert h == retarget.INTERVAL_P90["gpu"] and "x2" not in why
    h2, why2 = retarget.interval("gpu", True, 4)
    assert h2 == pytest.approx(h * retarget.DATASHEET_WIDEN * retarget.DP_WIDEN)
    assert "datasheet only" in why2 and "data parallel x4" in why2


def test_a_wide_band_stays_above_zero(lib):
    assert retarget.band(10.0, 1.4) == pytest.approx((10.0 / 2.4, 24.0))
    dbs = [str(H200), str(ROOT / "benchmarks/results/h200x2")]
    d = gpuanswer.answer(dbs, "resnet50", "torch", "eager", "fp32", 64, "h100",
                        nproc=2)  # datasheet only, data parallel: h = 0.35 x 2 x 2
    lo, hi = d["interval_s"]
    assert lo == pytest.approx(d["predicted_step_time_s"] / 2.4) and hi == pytest.approx(d["predicted_step_time_s"] * 2.4)


def test_a_batch_that_cannot_fit_on_the_target_gpu_is_refused(lib):
    with pytest.raises(ConfigError, match=r"on NVIDIA H100 80GB HBM3: batch 100000 per device "
                                          r"does not fit.*largest batch that fits is \d+"):
        gpuanswer.answer([str(H200), str(H100)], "resnet50", "torch", "eager", "bf16", 100000,
                        "h100")
    h100 = gpuanswer.device_memory_bytes(lib, lib.gpu("h100"))
    assert h100 == pytest.approx(85520809984.0)  # as the H100's driver reported it
    big = gpuanswer.answer([str(H200), str(H100)], "resnet50", "torch", "eager", "bf16", 256,
                          "h100")
    assert big["predicted_step_time_s"] > 0


def test_the_measurement_shown_and_anchored_on_is_named_with_its_rows():
    """Several stored measurements of the point: the words say the median of how many and
    name each row, never one row as the measurement; the anchor's words likewise."""
    h200 = ROOT / "benchmarks/results/h200"
    lib2 = retarget.TraceLibrary([str(h200), str(H100)])
    d = gpuanswer.answer([str(h200), str(H100)], "resnet50", "torch", "eager", "bf16", 64,
                        "h200")
    pts = d["measured_points"]
    assert len(pts) >= 2 and d["measured_step_time_s"] == pytest.approx(
        sorted(pts.values())[len(pts) // 2] if len(pts) % 2 else
        sum(sorted(pts.values())[len(pts) // 2 - 1:len(pts) // 2 + 1]) / 2)
    t = gpuanswer.text(d)
    assert "measured there" not in t
    assert f"the median {d['measured_step_time_s'] * 1e3:.3f} ms of {len(pts)} stored measurements" in t
    assert all(f"{k} {v * 1e3:.3f} ms" in t for k, v in pts.items())
    a = retarget.predict(lib2, "resnet50", "torch", "eager", "bf16", 64, "h100")
    note = next(x for x in a.transforms if x.startswith("anchored"))
    assert f"of {len(pts)} stored measurements" in note


def test_a_model_without_a_timeline_says_it_is_not_replayed():
    h200 = ROOT / "benchmarks/results/h200"
    d = gpuanswer.answer([str(h200), str(H100)], "vgg16", "torch", "eager", "bf16", 64, "h100")
    t = gpuanswer.text(d)
    assert d["sources"] == [] and "replayed from -" not in t and "unknown-bound" not in t
    assert "no stored timeline of vgg16, not replayed" in t


def test_the_gpu_answer_uses_the_step_level_key_names_and_prints_throughput():
    """``predict --gpu``'s JSON names what the step-level answer names alike (the step,
    throughput, measurement, interval source, GPU model name); its text prints samples/s."""
    d = gpuanswer.answer([str(H200), str(H100)], "resnet50", "torch", "eager", "bf16", 64,
                        "h100")
    assert not {"step_s", "measured_s", "interval_from", "gpu_name", "host_s"} & set(d)
    assert d["gpu"] == "NVIDIA H100 80GB HBM3"
    assert d["samples_per_s"] == pytest.approx(64 / d["predicted_step_time_s"])
    assert 0 < d["parts"]["device_s"] and 0 < d["parts"]["host_s"]
    assert d["interval_group"].startswith("the replay back-test")
    t = gpuanswer.text(d)
    assert f"{d['samples_per_s']:.1f} samples/s" in t and "parts: host_s" in t


def test_the_cli_refuses_a_gpu_name_that_only_resembles_a_datasheets():
    from typer.testing import CliRunner

    from dlperf.cli import app

    base = ["predict", "--db", str(H200), "--model", "resnet50", "--framework", "torch",
            "--mode", "eager", "--precision", "bf16", "-b", "64", "--gpu"]
    for name, close in (("h1000", "h100"), ("a1000", "a100"), ("a10g", "a10")):
        r = CliRunner().invoke(app, base + [name])
        assert r.exit_code == 2 and f"did you mean {close}" in r.output, r.output
    ok = CliRunner().invoke(app, base + ["H100-SXM", "--format", "json"])
    assert ok.exit_code == 0 and '"gpu": "NVIDIA H100 80GB HBM3"' in ok.output, ok.output


def test_the_gpu_answer_always_holds_its_measured_points():
    # no H100 measurement in the H200 file: an empty {} (the step-level answer's type), not absent
    d = gpuanswer.answer([str(H200)], "lstm", "torch", "eager", "fp32", 64, "h100")
    assert d["measured_points"] == {} and d["measured_step_time_s"] is None
    two = gpuanswer.answer([str(H200), str(ROOT / "benchmarks/results/h200x2")], "lstm", "torch",
                           "eager", "fp32", 128, "h100", nproc=2)
    assert two["measured_points"] == {}
    own = gpuanswer.answer([str(H200)], "lstm", "torch", "eager", "fp32", 64, "h200")
    assert own["measured_points"] and own["measured_step_time_s"] == pytest.approx(
        statistics.median(own["measured_points"].values()))


def test_every_gpu_answer_says_whether_and_why_it_is_anchored():
    move = gpuanswer.answer([str(H200)], "resnet50", "torch", "eager", "bf16", 64, "h100")
    own = gpuanswer.answer([str(H200)], "resnet50", "torch", "eager", "bf16", 64, "h200")
    # the same stored measurements: the move is anchored on them, the own GPU is not, and says why
    assert move["anchor"]["factor"] != 1.0 and move["anchor"]["rule"].startswith("x")
    assert own["measured_points"] and own["anchor"]["factor"] == 1.0
    assert "the traces' own GPU" in own["anchor"]["rule"]
    assert "\nanchor: none: the traces' own GPU" in gpuanswer.text(own)
    off = gpuanswer.answer([str(H200)], "resnet50", "torch", "eager", "bf16", 48, "h100")
    assert off["anchor"]["factor"] == 1.0 and "no stored untraced measurement" in \
        off["anchor"]["rule"]


def test_one_gpu_parts_compose_to_the_step_by_the_printed_rule():
    for gpu, batch in (("h100", 64), ("h200", 48), ("h100", 256)):
        d = gpuanswer.answer([str(H200)], "resnet50", "torch", "eager", "bf16", batch, gpu)
        pt, a = d["parts"], d["anchor"]["factor"]
        assert d["predicted_step_time_s"] == pytest.approx(
            a * (pt["device_s"] + pt["device_gap_s"]))
        assert pt["device_s"] + pt["device_gap_s"] >= pt["host_s"] * (1 - 1e-9)
        assert "step = anchor x (device_s + device_gap_s)" in d["composition"]
        assert "\ncomposed: step = anchor x" in gpuanswer.text(d)


def test_benchmark_scripts_use_the_public_measured_step():
    """benchmarks/h100/*.py read a stored measurement through ``retarget.measured_step`` (the
    median untraced step of the point), no private name of the module."""
    import re

    scripts = sorted((ROOT / "benchmarks" / "h100").glob("*.py"))
    used = {m for f in scripts for m in re.findall(r"retarget\.(\w+)", f.read_text())}
    assert "measured_step" in used
    assert not {u for u in used if u.startswith("_")}
    lib = retarget.TraceLibrary([str(H200)])
    pts = retarget.measured_points(lib, "resnet50", "torch", "eager", "bf16", 64, "NVIDIA H200")
    assert pts and retarget.measured_step(lib, "resnet50", "torch", "eager", "bf16", 64,
                                          "NVIDIA H200") == statistics.median(
        p.step_time_s for p in pts)
