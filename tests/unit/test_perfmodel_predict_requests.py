"""``dlperf predict`` and :func:`dlperf.perfmodel.api.predict` on requests a fresh user makes:
bad input refused with a message that says what to give (never a traceback), stored series told
apart by --threads/--data/--layout, a batch far outside the measured ones warned about, a
prediction without an interval saying why. On the committed H200 files and on small synthetic
results files written with the store itself (the fake framework, as test_perfmodel_fit does).
"""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dlperf.cli import app
from dlperf.errors import ConfigError
from dlperf.perfmodel import api
from dlperf.perfmodel import intervalchoice as ic
from dlperf.perfmodel import onedevice as od
from dlperf.results.store import ResultStore

ROOT = Path(__file__).resolve().parents[2] / "benchmarks/results"
H200 = ROOT / "h200"
#: One- and two-GPU folders: the back-test residuals of these are the session's h200_validation
H200_BOTH = [H200, ROOT / "h200x2"]
BASE = ["--model", "resnet50", "--framework", "torch", "--mode", "eager", "--precision", "bf16",
        "--device", "cuda", "-b", "64"]


pytestmark = pytest.mark.usefixtures("module_fit_cache")


def _result(model, batch, step_s, *, precision="bf16", device="cuda", layout="auto",
            threads=None, data="synthetic", rid=0):
    f1 = 2e9
    return {
        "run_key": f"{model}-{precision}-{device}-{layout}-{threads}-{data}-{batch}-{rid}",
        "status": "ok", "model": model, "framework": "fake", "mode": "eager",
        "device": device, "device_name": "Fake GPU" if device == "cuda" else None,
        "precision": precision, "batch_size": batch, "grad_accum": 1, "data": data,
        "threads": threads, "world_size": 1, "nnodes": 1, "per_device_batch": batch,
        "summary": {"median": step_s, "ci_low": step_s * 0.995, "ci_high": step_s * 1.005},
        "spec": {"params": 10_000_000, "train_flops_per_sample": f1},
        "flops": {"bytes_per_step": 1e8 + 2e6 * batch},
        "ceilings": {"matmul_flops_per_s": {precision: 100e12}, "bandwidth_bytes_per_s": 2e12},
        "config": {"layout": layout, "breakdown": False},
        "env": {"hostname": "h", "host_speed": {"python_loop_ns": 70.0}},
    }


def _step(b, host_s=2e-3, per_sample_s=1e-4):
    return float(od.overlap(host_s, 1e-3 + per_sample_s * b))


def _db(path, batches=(16, 32, 64, 128)):
    """Two models of fake/eager/bf16/cuda, m_cnn also in layouts nchw and nhwc, and a CPU
    series of m_cpu at threads 1 and 4."""
    with ResultStore(path) as store:
        for b in batches:
            store.add(_result("m_cnn", b, _step(b)))
            store.add(_result("m_cnn", b, _step(b, per_sample_s=1.2e-4), layout="nchw"))
            store.add(_result("m_other", b, _step(b, 3e-3, 2e-4)))
            for t in (1, 4):
                store.add(_result("m_cpu", b, _step(b, 1e-3, 1e-3 / t), precision="fp32",
                                  device="cpu", threads=t))
        for b in batches[:2]:
            store.add(_result("m_cnn", b, _step(b, per_sample_s=0.9e-4), layout="nhwc"))
    return path


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    return _db(tmp_path_factory.mktemp("pred") / "synthetic.db")


@pytest.fixture(scope="module")
def short(tmp_path_factory):
    """Series of 3 batch sizes: too short for the held-out batch back-test (no interval)."""
    return _db(tmp_path_factory.mktemp("pred") / "short.db", batches=(16, 32, 64))


def _cli(*args):
    r = CliRunner().invoke(app, ["predict", *map(str, args)])
    return r.exit_code, " ".join(r.output.split()), r


def _refused(*args):
    code, out, r = _cli(*args)
    assert code == 2, out
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert "Traceback" not in r.output
    return out


# -- 1. no tracebacks, bad values refused -----------------------------------------------------

def test_nodes_without_network_name_the_flag_and_its_choices():
    out = _refused("--db", H200, *BASE, "--nproc", "8", "--nnodes", "2")
    assert "--network" in out and "ib_ndr" in out and "eth100" in out and "nvlink4" in out
    with pytest.raises(ConfigError, match="--network"):
        api.predict(H200, "resnet50", "torch", "eager", "bf16", "cuda", batch_size=64,
                    nproc=8, nnodes=2)
    with pytest.raises(ConfigError, match="hierarchical all-reduce needs more than one node"):
        api.predict(H200, "resnet50", "torch", "eager", "bf16", "cuda", batch_size=64,
                    nproc=2, network={"inter": "ib_ndr", "algorithm": "hierarchical"})


@pytest.mark.parametrize("flags, words", [
    (["--network", "eth100"], "--network eth100 (network= in the API) is the link between nodes"),
    (["--network", "pcie5", "--nnodes", "1"], "one node (--nnodes 1) has none: it would be "
                                               "ignored"),
    (["--network", "ib_ndr", "--nproc", "2", "--nics-per-node", "2"], "--network ib_ndr"),
    (["--nics-per-node", "4"], "give --network with it"),
    (["--network", "ib_ndx", "--nnodes", "2"], "did you mean 'ib_ndr'?"),
])
def test_network_flags_one_node_ignores_are_refused(flags, words):
    out = _refused("--db", H200, *BASE, *flags)
    assert words in out


def test_an_inter_node_link_on_one_node_is_refused_in_the_api_and_an_intra_one_is_not():
    kw = dict(model="resnet50", framework="torch", mode="eager", precision="bf16",
              device="cuda", data="synthetic", layout="auto", batch_size=128, nproc=2)
    for net in ("eth100", {"inter": "ib_ndr"}, {"nics_per_node": 4}):
        with pytest.raises(ConfigError, match="one node .--nnodes 1. has none"):
            api.predict(H200_BOTH, network=net, **kw)
    fast, slow = (api.predict(H200_BOTH, network={"intra": link}, **kw).predicted_step_time_s
                  for link in ("nvlink4", {"alpha_s": 1e-3, "bandwidth_bytes_per_s": 1e8}))
    assert slow > fast


def test_unknown_options_suggest_by_name_and_refusals_read_cleanly():
    from dlperf.cli import option_suggestions

    opts = ["--gpu", "--model", "--mode", "--explain", "--help"]
    assert option_suggestions("--bogus", opts) == []  # "--" alone is no likeness
    assert option_suggestions("--explan", opts) == ["--explain"]
    assert set(option_suggestions("--mdoel", opts)) <= {"--model", "--mode"}
    code, out, _ = _cli("--model", "x", "-b", "1", "--bogus")
    assert code == 2 and "--bogus" in out and "Possible options" not in out
    code, out, _ = _cli("--model", "x", "-b", "1", "--gpus")
    assert code == 2 and "Possible options: --gpu" in out
    out = _refused("--db", H200, "--model", "lstm", "--framework", "torch", "--mode", "eager",
                   "-b", "8", "--nproc", "2", "--device", "cpu", "--threads", "1")
    assert "data-parallel measurement" in out and " ;" not in out


@pytest.mark.parametrize("item, words", [
    ("batch-size=abc", "give a whole batch"),
    ("batch-size=0x", "factor must be a positive finite number"),
    ("batch-size=-2x", "factor must be a positive finite number"),
    ("batch-size=nanx", "factor must be a positive finite number"),
    ("batch-size=1.3x", "83.2 is not a whole batch"),
    ("batch-size=0", "at least 1 sample"),
    ("batch-size=-3", "at least 1 sample"),
    ("host_speed_ns=-5", "positive number of ns"),
    ("host_speed_ns=0", "positive number of ns"),
    ("host_speed_ns=nan", "positive number of ns"),
    ("host-speed-ns=fast", "positive number of ns"),
    ("host_speed_ns=1e9", "give 5 to 2000 ns"),
    ("host_speed_ns=2001", "give 5 to 2000 ns"),
    ("host_speed_ns=4.9", "give 5 to 2000 ns"),
    ("precision=fp8", "unknown precision 'fp8'"),
    ("mode=xla", "PyTorch has no mode 'xla' (its modes: eager, graph); add --what-if mode=eager"),
    ("framework=mxnet", "MXNet has no precision 'bf16'"),
    ("framework=pytorch", "unknown framework 'pytorch'; did you mean 'torch'?"),
])
def test_what_if_values_are_checked(item, words):
    out = _refused("--db", H200, *BASE, "--what-if", item)
    assert words in out


def test_what_if_given_twice_or_malformed_is_refused():
    assert "given twice" in _refused("--db", H200, *BASE, "--what-if", "precision=tf32",
                                     "--what-if", "precision=fp32")
    assert "give KEY=VALUE" in _refused("--db", H200, *BASE, "--what-if", "precision=")


@pytest.mark.parametrize("flag, value", [("-b", "0"), ("-b", "-1"), ("--nproc", "0"),
                                         ("--nnodes", "0"), ("--threads", "0")])
def test_counts_below_one_are_refused(flag, value):
    args = [a for a in BASE if a not in ("-b", "64")] + ["-b", "64"]
    out = _refused("--db", H200, *args, flag, value)
    assert flag in out


def test_what_if_that_the_framework_can_run_still_predicts(h200_validation):
    # the checks do not get in the way of a valid what-if: jax/xla from torch/eager (vgg16's
    # jax xla is stored at b=128 alone, withheld: a what-if from the torch series)
    p = api.predict(H200_BOTH, "vgg16", "torch", "eager", "bf16", "cuda", batch_size=128,
                    what_if={"framework": "jax", "mode": "xla"})
    assert p.config["framework"] == "jax" and p.config["mode"] == "xla" and p.how == "what-if"
    p = api.predict(H200_BOTH, "resnet50", "torch", "eager", "bf16", "cuda", batch_size=64,
                    what_if={"batch_size": 128})  # a number, from the Python API
    assert p.config["global_batch"] == 128


def test_framework_what_if_without_a_mode_takes_the_frameworks_default_mode(h200_validation):
    # JAX has no eager mode: framework=jax alone from torch eager predicts jax xla, says so,
    # and prints what framework=jax mode=xla prints
    kw = dict(batch_size=128)
    alone = api.predict(H200_BOTH, "vgg16", "torch", "eager", "bf16", "cuda",
                        what_if={"framework": "jax"}, **kw)
    both = api.predict(H200_BOTH, "vgg16", "torch", "eager", "bf16", "cuda",
                       what_if={"framework": "jax", "mode": "xla"}, **kw)
    assert alone.config["mode"] == "xla" and alone.how == "what-if"
    assert alone.predicted_step_time_s == both.predicted_step_time_s
    assert any("its default mode 'xla' is predicted" in w for w in alone.warnings)
    assert not any("default mode" in w for w in both.warnings)


def test_a_what_if_that_changes_nothing_says_so(synth):
    kw = dict(batch_size=64)
    plain = api.predict(synth, "m_cnn", "fake", "eager", "bf16", "cuda", layout="auto", **kw)
    for wi in ({"precision": "bf16"}, {"batch_size": "1x"}, {"batch-size": 64}):
        p = api.predict(synth, "m_cnn", "fake", "eager", "bf16", "cuda", layout="auto",
                        what_if=wi, **kw)
        assert p.predicted_step_time_s == plain.predicted_step_time_s
        assert sum("changes nothing" in w for w in p.warnings) == 1, (wi, p.warnings)
    assert not any("changes nothing" in w for w in plain.warnings)
    two = api.predict(synth, "m_cnn", "fake", "eager", "bf16", "cuda", layout="auto",
                      what_if={"batch_size": "2x"}, **kw)
    assert not any("changes nothing" in w for w in two.warnings)


def test_implied_mode_only_where_the_base_mode_is_missing():
    from dlperf.perfmodel.calibrate import Config
    from dlperf.perfmodel.request import implied_mode
    base = Config("resnet50", "jax", "xla", "bf16", "cuda")
    to_torch = base.with_(framework="torch")
    # torch has no xla mode: its first mode (eager)
    got, note = implied_mode({"framework": "torch"}, base, to_torch)
    assert got.mode == "eager" and "default mode 'eager'" in note
    # a mode given is kept (and judged by check_target)
    assert implied_mode({"framework": "torch", "mode": "xla"}, base, to_torch) == (
        to_torch, None)
    eager = Config("resnet50", "torch", "eager", "bf16", "cuda")
    assert implied_mode({"precision": "fp32"}, eager, eager.with_(precision="fp32"))[1] is None


def test_a_compile_mode_is_kept_only_where_the_target_mode_takes_one():
    from dlperf.perfmodel.calibrate import Config
    from dlperf.perfmodel.request import apply_what_if, implied_mode
    ro = Config("lstm", "torch", "graph", "bf16", "cuda", compile_mode="reduce-overhead")
    for wi, mode in (({"framework": "jax"}, "xla"), ({"framework": "jax", "mode": "xla"}, "xla"),
                     ({"mode": "eager"}, "eager")):
        got, note = implied_mode(wi, ro, apply_what_if(wi, ro, 64)[0])
        assert (got.framework, got.mode, got.compile_mode) == (wi.get("framework", "torch"),
                                                                 mode, "default"), wi
        assert "base's compile mode 'reduce-overhead' is not carried over" in note
    # torch graph takes a compile mode: a precision what-if keeps it, and says nothing
    fp32 = ro.with_(precision="fp32")
    assert implied_mode({"precision": "fp32"}, ro, fp32) == (fp32, None)


def test_a_framework_what_if_from_reduce_overhead_predicts_the_default_compile_mode():
    """torch graph ``reduce-overhead`` -> jax: the target is jax xla at the default compile
    mode (the one every stored jax point has), so its stored measurement is found and the
    base's pairs are other models' reduce-overhead points with their jax twins."""
    # alexnet_cifar's jax xla is stored at b=128 alone (withheld): a what-if from the base
    p = api.predict(H200_BOTH, "alexnet_cifar", "torch", "graph", "bf16", "cuda",
                    batch_size=128, compile_mode="reduce-overhead", what_if={"framework": "jax"})
    assert p.config["compile_mode"] == "default" and p.config["mode"] == "xla"
    assert p.measured_point is not None and p.measured_step_time_s > 0
    pairs = p.explanation["what-if"]["pairs"]
    assert pairs["host"] + pairs["device"]
    assert p.explanation["what-if"]["base"] == ("alexnet_cifar torch/graph [reduce-overhead] "
                                                "cuda bf16")
    assert any("is not carried over" in w and w.startswith("what-if target: ")
               for w in p.warnings)
    code, out, _ = _cli("--db", H200, "--db", ROOT / "h200x2", "--model", "alexnet_cifar",
                        "--framework", "torch", "--mode", "graph", "--precision", "bf16",
                        "--compile-mode", "reduce-overhead", "-b", "128", "--what-if",
                        "framework=jax")
    assert code == 0 and out.startswith("alexnet_cifar jax/xla cuda bf16 b=128 synthetic on "), out


# -- 2. extrapolation ---------------------------------------------------------------------------

def test_far_batches_warn_in_text_and_json(synth):
    code, out, _ = _cli("--db", synth, "--model", "m_cnn", "--layout", "auto", "-b", "1000")
    assert code == 0, out
    assert ("warning: batch 1000 per device is 7.81x the largest batch measured in any results "
            "file, 128 (warned from 2x, where the back-test's 'extrapolate 2x' starts): the prediction extrapolates "
            "from the measured batches 16..128") in out
    # no reserved peak stored for m_cnn: above the series its memory is not judged
    assert "device memory is not judged for it" in out and "may not fit" in out
    code, out, r = _cli("--db", synth, "--model", "m_cnn", "--layout", "auto", "-b", "4",
                        "--format", "json")
    assert code == 0, out
    w = json.loads(r.output)["warnings"]
    assert len(w) == 1 and "1/4 of the smallest batch measured in any results file, 16 (warned from 1/2)" in w[0]
    # below the measured batches memory is no concern: the warning does not mention it
    assert "16..128" in w[0] and "memory" not in w[0]
    # exactly 2x the largest (half the smallest) is the back-test's 'extrapolate 2x': warned
    for b, words in (("256", "2x the largest"), ("8", "1/2 of the smallest")):
        code, out, r = _cli("--db", synth, "--model", "m_cnn", "--layout", "auto", "-b", b,
                            "--format", "json")
        assert code == 0 and words in json.loads(r.output)["warnings"][0], out
    # inside the measured range, and short of 2x beyond it: no warning
    for b in ("9", "64", "255"):
        code, out, r = _cli("--db", synth, "--model", "m_cnn", "--layout", "auto", "-b", b,
                            "--format", "json")
        assert code == 0 and json.loads(r.output)["warnings"] == [], out
    # a what-if batch is judged against the series it is predicted from
    p = api.predict(synth, "m_cnn", layout="auto", batch_size=64, what_if={"batch_size": "8x"})
    assert p.config["global_batch"] == 512 and "512 per device" in p.warnings[0]


def test_extrapolation_on_the_h200_series(h200_validation):
    # far outside the measured batches: a warning where it still fits in device memory,
    # refused (with the largest batch that fits) where it does not
    p = api.predict(H200_BOTH, "resnet50", "torch", "eager", "bf16", "cuda", batch_size=1024)
    far = [w for w in p.warnings if "extrapolates from the measured batches 16..256" in w]
    # its memory is judged (memory.py: the stored reserved peaks) and the batch fits, so the
    # warning does not say it may not fit
    assert len(far) == 1 and "memory" not in far[0]
    with pytest.raises(ConfigError, match="does not fit in the NVIDIA H200's memory"):
        api.predict(H200_BOTH, "resnet50", "torch", "eager", "bf16", "cuda",
                    batch_size=100_000_000)


# -- 3. selecting among stored series -----------------------------------------------------------

def test_cpu_thread_series_are_told_apart_by_threads(synth):
    out = _refused("--db", synth, "--model", "m_cpu", "--framework", "fake", "--mode", "eager",
                   "--precision", "fp32", "--device", "cpu", "-b", "32")
    assert "differ in --threads: add one of --threads 1; --threads 4" in out
    assert "narrow with" not in out and "--framework" not in out.split("differ in")[1]
    code, out, r = _cli("--db", synth, "--model", "m_cpu", "--device", "cpu", "--threads", "4",
                        "-b", "32", "--format", "json")
    assert code == 0, out
    p = json.loads(r.output)
    assert p["config"]["threads"] == 4 and p["warnings"] == []
    code, out, _ = _cli("--db", synth, "--model", "m_cpu", "--device", "cpu", "--threads", "4",
                        "-b", "32")
    assert code == 0 and out.startswith("m_cpu fake/eager cpu fp32 b=32 synthetic threads=4: "), out
    one = api.predict(synth, "m_cpu", device="cpu", threads=1, batch_size=32)
    assert one.predicted_step_time_s > p["predicted_step_time_s"]  # 1 thread is slower here
    out = _refused("--db", synth, "--model", "m_cpu", "--device", "cpu", "--threads", "3",
                   "-b", "32")
    assert "has --threads 3; stored: --threads 1, 4" in out


def test_the_default_layout_is_used_and_named(synth):
    p = api.predict(synth, "m_cnn", batch_size=64)
    assert p.config["layout"] == "auto"
    assert len(p.warnings) == 1
    assert ("3 stored configurations match m_cnn; predicted m_cnn fake/eager cuda bf16, the one "
            "with the default --layout; for another add --layout nchw; --layout nhwc"
            ) in p.warnings[0]
    nchw = api.predict(synth, "m_cnn", layout="NCHW", batch_size=64)
    assert nchw.config["layout"] == "nchw" and nchw.warnings == []
    assert nchw.predicted_step_time_s > p.predicted_step_time_s  # its series is slower
    out = _refused("--db", synth, "--model", "m_cnn", "--layout", "chw", "-b", "64")
    assert "unknown layout 'chw'; did you mean 'nchw'?" in out


def _series_file(path, batches, step=_step):
    with ResultStore(path) as store:
        for b in batches:
            store.add(_result("m_cnn", b, step(b), rid=path.stem))
            store.add(_result("m_other", b, _step(b, 3e-3, 2e-4), rid=path.stem))
    return path


def test_a_stored_point_is_fitted_from_the_series_with_most_batch_sizes(tmp_path):
    # b=64 is stored in both files; the file loaded last (alphabetical) holds a one-point
    # series once it is withheld, the first three points: the longer one is fitted, and the
    # measurement printed is that file's
    long = _series_file(tmp_path / "a_long.db", (16, 32, 64, 128))
    _series_file(tmp_path / "b_short.db", (32, 64), lambda b: 1.1 * _step(b))
    p = api.predict(tmp_path, "m_cnn", batch_size=64)
    assert p.provenance["host time H"] == f"fitted: series of 3 points in {long}"
    assert p.measured_point.rsplit(":", 1)[0] == str(long.resolve())
    assert p.validation_category == "held-out batch"
    # a tie in batch sizes goes to the file that holds the point, though loaded first
    tie = tmp_path / "tie"
    tie.mkdir()
    held = _series_file(tie / "a_held.db", (16, 32, 64, 128))
    _series_file(tie / "b_other.db", (16, 32, 128), lambda b: 1.1 * _step(b))
    t = api.predict(tie, "m_cnn", batch_size=64)
    assert t.provenance["host time H"] == f"fitted: series of 3 points in {held}"
    # nothing stored at the batch: the longest series
    free = api.predict(tie, "m_cnn", batch_size=96)
    assert free.provenance["host time H"] == f"fitted: series of 4 points in {held}"
    assert free.measured_point is None


def test_h200_cpu_points_and_layouts_are_reachable(h200_validation):
    # on the session's validated files (both folders): the intervals of the predictions that
    # go through come from its residuals in memory, not from a back-test of h200 alone (36 s)
    dbs = [a for d in H200_BOTH for a in ("--db", d)]
    base = [*dbs, "--model", "resnet50", "--framework", "torch", "--mode", "eager",
            "--precision", "fp32"]
    out = _refused(*base, "--device", "cpu", "-b", "64")
    assert ("differ in --threads: add one of --threads 1; --threads 2; --threads 4; --threads 8;"
            " --threads 16") in out
    assert "framework/mode/precision/device" not in out
    # --threads selects one: whatever the model then says, it is about that series
    code, out, _ = _cli(*base, "--device", "cpu", "--threads", "8", "-b", "64")
    assert "resnet50 torch/eager cpu fp32 threads=8" in out and "several" not in out
    code, out, r = _cli(*base, "--device", "cuda", "-b", "64", "--format", "json")
    assert code == 0, out
    w = json.loads(r.output)["warnings"]
    assert any("3 stored configurations match" in x and "--layout nchw; --layout nhwc" in x
               for x in w)
    code, out, r = _cli(*base, "--device", "cuda", "--layout", "nhwc", "-b", "64",
                        "--format", "json")
    assert code == 0, out
    p = json.loads(r.output)
    # the layout picked: no "several configurations" warning, only that b=64 is half of the
    # nhwc series' one batch (128), where extrapolation warnings start
    assert p["config"]["layout"] == "nhwc" and len(p["warnings"]) == 1
    assert "is 1/2 of the smallest batch measured in any results file, 128 (warned from 1/2)" in (
        p["warnings"][0])
    code, out, r = _cli(*dbs, "--model", "resnet50", "--framework", "jax",
                        "--precision", "bf16", "--data", "imagefolder", "-b", "64")
    assert code == 2 and "differ in --loader-workers: add one of --loader-workers 0;" in out
    code, out, r = _cli(*dbs, "--model", "resnet50", "--framework", "jax",
                        "--precision", "bf16", "--data", "imagefolder", "--loader-workers", "4",
                        "-b", "64", "--format", "json")
    assert code == 0, out
    assert json.loads(r.output)["config"]["loader_workers"] == 4


def test_ambiguity_lists_only_what_was_not_given():
    out = _refused("--db", H200, "--model", "resnet50", "--device", "cpu", "-b", "8")
    assert "differ in --framework and --mode (and some in --threads): add one of " in out
    assert "--framework jax --mode xla; --framework torch --mode eager" in out
    assert "--device" not in out.split("differ in")[1]


# -- 4. messages --------------------------------------------------------------------------------

def test_unknown_model_and_framework_say_so(synth):
    out = _refused("--db", H200, "--model", "resnt50", "-b", "64")
    assert "unknown model 'resnt50'; did you mean 'resnet50'?" in out
    out = _refused("--db", H200, "--model", "resnt50", "--framework", "torch", "--mode", "eager",
                   "--precision", "bf16", "--device", "cuda", "-b", "64")
    assert "unknown model 'resnt50'" in out and "FLOP" not in out
    out = _refused("--db", H200, "--model", "resnet50", "--framework", "pytorch", "-b", "64")
    assert "unknown framework 'pytorch'; did you mean 'torch'?" in out
    assert "alexnet" not in out  # no list of unrelated stored configurations
    out = _refused("--db", H200, "--model", "resnet50", "--framework", "torch", "--mode", "xla",
                   "-b", "64")
    assert "unknown mode 'xla'" in out or "mode 'xla' is not available for framework" in out
    out = _refused("--db", H200, "--model", "resnet50", "--framework", "mxnet", "--device",
                   "cuda", "-b", "64")
    assert "device 'cuda' is not available for framework 'mxnet'" in out
    assert "give --device cpu" in out
    # a model only stored (not in the zoo) is known
    code, out, _ = _cli("--db", synth, "--model", "m_other", "-b", "64")
    assert code == 0, out


def test_empty_files_and_folders(tmp_path):
    (tmp_path / "zero.db").write_bytes(b"")
    out = _refused("--db", tmp_path / "zero.db", "--model", "fcn5_tiny", "-b", "8")
    assert "empty (0 bytes)" in out
    with ResultStore(tmp_path / "none.db"):
        pass
    out = _refused("--db", tmp_path / "none.db", "--model", "fcn5_tiny", "-b", "8")
    assert "no stored one-device results in" in out and "nothing to calibrate" in out
    (tmp_path / "empty").mkdir()
    out = _refused("--db", tmp_path / "empty", "--model", "fcn5_tiny", "-b", "8")
    assert "holds no results file" in out
    out = _refused("--db", tmp_path / "empty", "--validate")
    assert "holds no results file" in out


def test_no_interval_is_explained(short, synth, monkeypatch):
    """Files of no table, where no table of the current model can be borrowed from either (the
    committed ones left out): no interval, and how to get one."""
    from dlperf.perfmodel import fitcache as fc

    monkeypatch.setattr(fc, "COMMITTED_TABLES", ())
    monkeypatch.setattr(ic, "_BORROWABLE", {})
    code, out, _ = _cli("--db", short, "--model", "m_other", "-b", "48")
    assert code == 0, out
    assert "(90% interval)" not in out
    assert "ms per iteration (no 90% interval: not validated on these results files" in out
    code, out, r = _cli("--db", short, "--model", "m_other", "-b", "48", "--format", "json")
    p = json.loads(r.output)  # strict JSON: no NaN
    assert p["interval_s"] == [None, None] and "--validate" in p["interval_note"]
    code, out, r = _cli("--db", synth, "--validate")  # writes the table beside the file
    assert code == 0 and "perfmodel_residuals.json" in out
    code, out, r = _cli("--db", synth, "--model", "m_other", "-b", "48", "--format", "json")
    p = json.loads(r.output)
    lo, hi = p["interval_s"]
    assert lo < p["predicted_step_time_s"] < hi and p["interval_note"] is None


def test_validate_and_dai_table_refuse_selectors_they_would_ignore(synth):
    """``--validate --model nosuch`` is refused: the back-test would ignore the selector."""
    out = _refused("--db", synth, "--validate", "--model", "nosuch")
    assert "--validate back-tests every stored result" in out and "--model" in out
    out = _refused("--db", synth, "--dai-table", "--precision", "bf16", "-b", "8")
    assert "--dai-table splits" in out and "--precision, --batch-size" in out


def test_validate_prints_interval_coverage_and_json_keeps_interval_keys(synth):
    """``--validate`` adds the intervals' leave-one-out coverage (a second table; a key per
    category in JSON); a prediction's ``interval_s`` stays ``[low, high]`` and it names the
    residual group its interval came from."""
    code, out, r = _cli("--db", synth, "--validate")
    assert code == 0, out
    assert "90% coverage, Mondrian (all/host/device)" in r.output
    row = [ln for ln in r.output.splitlines() if ln.startswith("| held-out batch |")]
    # the error table's row, the coverage row, then the development / test split's row
    assert len(row) == 3 and "%" in row[1] and " / " in row[2]
    # each cell judged on its own sampling spread, beside the split table
    assert "Cells whose coverage is consistent with 90% (exact binomial" in r.output
    code, out, r = _cli("--db", synth, "--validate", "--format", "json")
    d = {x["category"]: x for x in json.loads(r.output)}
    cov = d["held-out batch"]["interval_coverage_90"]
    assert cov["count"] == d["held-out batch"]["count"] and 0.0 <= cov["coverage"] <= 1.0
    from dlperf.perfmodel.intervals import INTERVAL_CATEGORIES

    assert all(x["interval_coverage_90"] is None for c, x in d.items()
               if c not in INTERVAL_CATEGORIES) and "extrapolate 2x" in d
    code, out, r = _cli("--db", synth, "--model", "m_other", "-b", "48", "--format", "json")
    p = json.loads(r.output)
    assert isinstance(p["interval_s"], list) and len(p["interval_s"]) == 2
    assert p["interval_level"] == 0.9
    assert p["interval_group"].startswith("held-out batch, ")
    assert p["interval_group"].split(": ")[1].split(" rows")[0].isdigit()
    # the files' own table named as a borrowed one is (trial 15, F7)
    own = p["interval_group"].split("; these files' residual table (")[1]
    assert own.endswith("perfmodel_residuals.json)") and Path(own[:-1]).exists(), own


def test_validate_refuses_nproc_and_a_second_report(short):
    # --validate back-tests every stored result: a --nproc it would ignore is refused, and it
    # is one report: --dai-table beside it is refused too (it was dropped silently)
    out = _refused("--db", short, "--validate", "--nproc", "2")
    assert "--nproc" in out and "ignored" in out
    out = _refused("--db", short, "--validate", "--dai-table")
    assert "one of them" in out


def test_missing_flop_count_says_how_to_give_one():
    from pathlib import Path

    from dlperf.errors import ConfigError
    from dlperf.perfmodel import api

    root = Path(__file__).resolve().parents[2] / "benchmarks/results/h200"
    with pytest.raises(ConfigError, match=r"stored only as hf:gpt2 torch.*Give one: store a "
                                          r"run of it \(dlperf run --model hf:gpt2"):
        api.predict([root, root / "yourmodel/yourmodel.db"], "hf:gpt2", framework="jax",
                    mode="xla", precision="bf16", device="cuda", batch_size=8)


# -- a break test's findings -------------------------------------------------------------------

@pytest.mark.parametrize("kw, words", [
    ({"batch_size": "16"}, "batch_size '16': give a whole number"),
    ({"batch_size": True}, "batch_size True: give a whole number"),
    ({"batch_size": 16.5}, "batch_size 16.5: give a whole number"),
    ({"batch_size": 64, "nproc": None}, "nproc None: give a whole number"),
    ({"batch_size": 64, "what_if": ["precision=bf16"]}, "what_if ['precision=bf16']: give a mapping"),
    ({"batch_size": 256, "nproc": 8, "nnodes": 2,
      "network": {"inter": {"alpha_s": float("nan"), "bandwidth_bytes_per_s": 1e9}}},
     "alpha_s nan: give the latency per step in seconds, a finite number >= 0"),
    ({"batch_size": 256, "nproc": 8, "nnodes": 2,
      "network": {"inter": {"alpha_s": -1.0, "bandwidth_bytes_per_s": 1e9}}}, "alpha_s -1.0"),
    ({"batch_size": 256, "nproc": 8, "nnodes": 2,
      "network": {"inter": {"alpha_s": 1e-5, "bandwidth_bytes_per_s": 0}}},
     "bandwidth_bytes_per_s 0: give the bandwidth per direction in bytes/s, a finite number > 0"),
    ({"batch_size": 256, "nproc": 8, "nnodes": 2,
      "network": {"inter": {"alpha_s": "x", "bandwidth_bytes_per_s": 1e9}}}, "alpha_s 'x'"),
])
def test_the_python_api_refuses_wrong_types_and_links_before_loading_anything(kw, words):
    # a NaN latency had predicted 22.3 ms at 100% scaling efficiency; a string batch, a list
    # what-if, a zero bandwidth raised TypeError, AttributeError, ZeroDivisionError
    with pytest.raises(ConfigError, match=None) as e:
        api.predict(H200, "resnet50", "torch", "eager", "bf16", "cuda", **kw)
    assert words in str(e.value)
    with pytest.raises(ConfigError, match="give a results file, a folder of them"):
        api.predict(None, "resnet50", batch_size=16)


def test_a_prediction_names_the_measurement_it_is_judged_against(h200_validation):
    # the same point is stored in two files (two host sessions); the prediction comes from the
    # series of the file of the point it compares with, as the back-test's pair does (6.81 ms
    # there for this what-if), and names it; the CLI had fitted dlbench.db, compared with
    # calibration2.db, and named neither
    # vgg16 jax xla bf16 is stored at b=128 alone, in frameworks.db and mfu_inputs.db; its
    # fp32 base in frameworks.db alone, whose series the what-if fits and compares with
    jx = dict(framework="jax", mode="xla", precision="fp32", device="cuda", data="synthetic",
              batch_size=128)
    p = api.predict(H200_BOTH, "vgg16", what_if={"precision": "bf16"}, **jx)
    assert p.how == "what-if"
    assert len(p.measured_points) == 2 and p.measured_point in p.measured_points
    assert p.measured_step_time_s == p.measured_points[p.measured_point]
    src = p.measured_point.rsplit(":", 1)[0]
    assert src.endswith("frameworks.db") and src in p.provenance["host time H"]
    row = [r for r in h200_validation.rows if r.category == "what-if fp32->bf16"
           and r.label.startswith("vgg16 jax/xla cuda fp32 b=128 ->") and "frameworks" in r.label]
    assert len(row) == 1 and p.predicted_step_time_s == pytest.approx(row[0].predicted_s, rel=1e-6)
    code, out, _ = _cli("--db", H200, "--db", ROOT / "h200x2", "--model", "vgg16", "--framework",
                        "jax", "--mode", "xla", "--precision", "fp32", "--device", "cuda", "--data", "synthetic",
                        "-b", "128", "--what-if", "precision=bf16")
    assert code == 0 and "frameworks.db:" in out and "also measured:" in out
    kw = dict(framework="torch", mode="eager", precision="fp32", device="cuda", data="synthetic",
              batch_size=16)
    # another host's speed: the stored measurements were taken at this host's, no comparison
    h = api.predict(H200_BOTH, "lstm", what_if={"host_speed_ns": 900}, **kw)
    assert h.measured_step_time_s is None and h.measured_points == {}
    assert any("host-speed change is not back-tested" in a for a in h.assumptions)


def test_cli_warnings_are_one_line_and_a_comma_gives_two_what_ifs(tmp_path, h200_validation):
    f = tmp_path / "a_file"
    f.write_text("")
    mp = pytest.MonkeyPatch()
    mp.setenv("DLPERF_CACHE_DIR", str(f))  # not a folder: the fits cannot be stored
    from dlperf import jsoncache

    for name in ("_SHARED",):  # as a new process: the group fits are made
        mp.setattr(api, name, {})
    mp.setattr(jsoncache, "_warned", set())
    try:
        code, out, r = _cli("--db", H200, "--db", ROOT / "h200x2", *BASE,
                            "--what-if", "precision=fp32,mode=graph")
    finally:
        mp.undo()
    assert code == 0, out
    # the cache cannot be read or written: said in one line each, never a traceback
    assert "warning: ignored the cache file" in out or "warning: cannot write the cache in" in out
    assert "UserWarning" not in out and "api.py" not in out
    assert "resnet50 torch/graph cuda fp32 b=64 synthetic on NVIDIA H200:" in out


def test_a_cpu_without_a_series_is_refused_with_what_would_give_one():
    out = _refused("--db", H200, "--model", "resnet50", "--framework", "torch", "--mode", "eager",
                   "--precision", "fp32", "--device", "cpu", "-b", "16", "--threads", "8")
    assert "no roofline for torch/eager/fp32/cpu: a cpu configuration has none" in out
    assert "other than resnet50" not in out
    # a CPU's ceilings are never read: measuring them would not help; the stored b=16 point
    # is withheld from its own fit, and another batch size is what would (as at b=24)
    assert "--measure-ceilings" not in out
    assert "is withheld from its own fit" in out and "store another batch size" in out
    out = _refused("--db", H200, "--model", "resnet50", "--framework", "torch", "--mode", "eager",
                   "--precision", "fp32", "--device", "cpu", "-b", "24", "--threads", "8")
    assert "measure another batch size" in out and "--measure-ceilings" not in out
    assert "did you mean 'lstm'?" in _refused("--db", H200, "--model", "LSTM", "-b", "16")


@pytest.mark.parametrize("ns", [5, 2000])
def test_host_speed_at_the_ends_of_its_range_is_predicted(ns):
    p = api.predict(H200, "resnet50", "torch", "eager", "bf16", "cuda", batch_size=64,
                    data="synthetic", layout="auto", what_if={"host_speed_ns": ns})
    assert p.predicted_step_time_s > 0 and p.samples_per_s > 0
    assert p.explanation["host speed"]["probe_ns"] == ns


def test_data_parallel_without_a_stored_pair_is_refused_naming_the_files():
    # the H200 folder holds no N-device run: DDP's own overhead is unmeasured, and rho = kappa
    # = 0 would predict a near-perfect 2-GPU step (24.4 ms against 30.7/31.1 ms stored)
    kw = dict(model="resnet50", framework="torch", mode="eager", precision="bf16",
              device="cuda", data="synthetic", layout="auto", batch_size=192, nproc=2)
    with pytest.raises(ConfigError) as e:
        api.predict(H200, **kw)
    msg = str(e.value)
    assert "DDP's own overhead" in msg and "--nproc 2" in msg
    assert "--db " in msg and "h200x2" in msg  # the committed table's 2-GPU folder
    p = api.predict(H200_BOTH, **kw)
    assert p.provenance["DDP overhead rho, kappa"].startswith("measured")
    out = _refused("--db", H200, "--model", "resnet50", "--framework", "torch", "--mode",
                   "eager", "--precision", "bf16", "--data", "synthetic", "--layout", "auto",
                   "-b", "768", "--nproc", "8")
    assert "DDP's own overhead" in out


def test_a_what_if_with_neither_ratio_measured_is_refused_saying_what_to_measure():
    # no other model stored in both lstm torch and tensorflow, no TensorFlow roofline: the
    # answer would be torch's step unchanged, with an interval
    with pytest.raises(ConfigError) as e:
        api.predict(H200, "lstm", "torch", "eager", "bf16", "cuda", batch_size=96,
                    what_if={"framework": "tensorflow"})
    msg = str(e.value)
    assert "neither the host nor the device" in msg
    assert "dlperf run --model lstm --framework tensorflow" in msg
    # with the ratios measured the what-if is answered (the H200 holds other models' torch
    # graph pairs), its target withheld as the back-test does
    from dlperf.perfmodel import model as pm
    from dlperf.perfmodel.calibrate import Calibration, Config

    recs = api.records_of(H200)
    base = Config("resnet50", "torch", "eager", "bf16", "cuda", layout="auto")
    target = base.with_(mode="graph")
    one = pm.what_if(Calibration(recs, target.matches), base, target, 96, None)
    assert one.how == "what-if" and "none measured" not in one.provenance["device ratio"]


def test_a_two_change_what_if_names_the_changes_it_counts():
    # framework=torch with mode=graph is one change (jax xla -> torch graph), the precision
    # the other: the assumption names both as counted, and the path is the two-change one
    p = api.predict(H200, "bert_base", "jax", precision="bf16", batch_size=48,
                    what_if={"framework": "torch", "mode": "graph", "precision": "tf32"})
    words = [a for a in p.assumptions if a.startswith("what-if of two changes")]
    assert words and ("framework and its mode jax/xla -> torch/graph; precision bf16 -> tf32"
                      in words[0])
    assert "starts from bert_base torch/graph cuda bf16" in words[0]
