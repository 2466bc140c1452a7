"""A fresh user's trial of ``dlperf predict`` on the committed H200 results: what-ifs of
several changes, paths beyond what was validated (more devices, a batch far above the series),
a stored point withheld from its own prediction, and the refusals' wording."""

import pytest

from committed import H200, R50
from dlperf.perfmodel import api, whatifs
from dlperf.perfmodel.calibrate import Config

pytestmark = pytest.mark.usefixtures("module_fit_cache")


def test_whatif_changes_counts_each_back_tested_change_once():
    base = Config("resnet50", "torch", "eager", "bf16", "cuda")
    assert whatifs.whatif_changes(base, base) == ()
    assert whatifs.whatif_changes(base, base.with_(mode="graph")) == ("mode",)
    # a framework what-if implies its mode: one change
    assert whatifs.whatif_changes(base, base.with_(framework="jax", mode="xla")) == ("framework",)
    assert whatifs.whatif_changes(base, base.with_(mode="graph", precision="fp32"), True, 90.0) == (
        "mode", "precision", "batch", "host speed")


def test_two_changes_are_said_as_whatif_changes_counts_them():
    """The words a what-if of two changes starts its assumption with name each change
    :func:`whatifs.whatif_changes` counts: the framework with its mode (and compile mode) as
    one, else the mode; the precision. A compile mode alone is no change it counts (the words
    named it a mode change: ``mode torch/graph/reduce-overhead -> torch/graph``)."""
    b = Config("fcn5", "torch", "eager", "bf16")
    assert whatifs.changes_words(b, b.with_(mode="graph", precision="fp32")) == (
        "mode torch/eager -> torch/graph; precision bf16 -> fp32")
    jax = Config("bert_base", "jax", "xla", "bf16")
    assert whatifs.changes_words(jax, jax.with_(framework="torch", mode="graph",
                                                precision="tf32")) == (
        "framework and its mode jax/xla -> torch/graph; precision bf16 -> tf32")
    ro = Config("resnet50", "torch", "graph", "bf16", compile_mode="reduce-overhead")
    assert whatifs.changes_words(ro, ro.with_(mode="eager", compile_mode="default",
                                              precision="fp32")) == (
        "mode torch/graph/reduce-overhead -> torch/eager; precision bf16 -> fp32")
    t = ro.with_(compile_mode="default", precision="fp32")
    assert whatifs.whatif_changes(ro, t) == ("precision",)
    assert whatifs.changes_words(ro, t) == "precision bf16 -> fp32"


def test_a_whatif_to_a_stored_configuration_is_that_configurations_own_prediction():
    # resnet50 torch graph fp32 is stored at b=8, 16, 128, 256: a what-if to it at b=64 is its
    # own series' prediction, not the eager bf16 series times other models' ratios
    plain = api.predict(H200, batch_size=64, **{**R50, "mode": "graph", "precision": "fp32"})
    two = api.predict(H200, batch_size=64, what_if={"mode": "graph", "precision": "fp32"}, **R50)
    assert two.how == "series" and plain.how == "series"
    assert two.predicted_step_time_s == plain.predicted_step_time_s
    assert two.validation_category == plain.validation_category
    assert two.interval_s == plain.interval_s and not two.interval_group.startswith("borrowed")
    assert "stored at other batches" in two.provenance["what-if"]
    assert "what-if" not in plain.provenance and "what-if" not in two.explanation
    # one change too, from the other side: graph bf16 -> eager bf16 (stored at every batch)
    one = api.predict(H200, batch_size=96, what_if={"mode": "eager"}, **{**R50, "mode": "graph"})
    assert one.predicted_step_time_s == api.predict(H200, batch_size=96,
                                                    **R50).predicted_step_time_s


def test_a_whatif_of_two_changes_starts_one_change_from_its_target():
    # fcn5 torch graph fp32 is stored at b=1024 only (withheld): a what-if from eager bf16
    # starts from eager fp32 (the target's precision), so only the mode change is a ratio
    fcn5 = {**R50, "model": "fcn5"}
    two = api.predict(H200, batch_size=1024, what_if={"mode": "graph", "precision": "fp32"},
                      **fcn5)
    assert two.how == "what-if" and two.validation_category == whatifs.TWO_CHANGES
    assert two.explanation["what-if"]["base"] == Config(
        "fcn5", "torch", "eager", "fp32", "cuda", "synthetic", "auto").label()
    assert any("starts from fcn5 torch/eager cuda fp32" in a for a in two.assumptions)
    assert not two.interval_group.startswith("borrowed"), two.interval_group
    # both changes' ratios at once from eager bf16 (other models' pairs) gave half the step
    assert abs(two.predicted_step_time_s / two.measured_step_time_s - 1) < 0.1
    lo, hi = two.interval_s
    assert lo < two.measured_step_time_s < hi
    # three changes (with the batch) are more than the category judges: borrowed, wider
    three = api.predict(H200, batch_size=512, what_if={"mode": "graph", "precision": "fp32",
                                                       "batch_size": "2x"}, **fcn5)
    assert three.predicted_step_time_s == two.predicted_step_time_s
    assert three.interval_group.startswith(f"borrowed from {whatifs.TWO_CHANGES} at 95%")
    assert any("several changes (mode, precision and batch" in a
               and "judges two changes at once" in a for a in three.assumptions), three.assumptions


def _cli(*args, env=None):
    from typer.testing import CliRunner

    from dlperf.cli import app

    r = CliRunner().invoke(app, ["predict", *[a for d in H200 for a in ("--db", str(d))],
                                 *map(str, args)], env=env)
    return r.exit_code, r.output


def test_a_stored_point_says_next_to_the_number_that_it_is_withheld():
    args = ("--model", "resnet50", "--framework", "torch", "--mode", "eager", "--precision",
            "bf16", "--data", "synthetic", "--layout", "auto", "-b")
    code, out = _cli(*args, 64)
    assert code == 0
    second = out.splitlines()[1]
    assert second.startswith("measured: b=64 is stored (25.194 ms in ")
    assert "calibration2.db:51); this prediction withholds it" in second
    assert "need not be monotone" in second
    code, out = _cli(*args, 96)  # not stored: no such line
    assert code == 0 and "measured:" not in out and "withholds" not in out


def test_a_refusal_wraps_at_columns_keeping_each_suggested_command_whole():
    from dlperf.cli.common import wrapped

    msg = ("error: several stored configurations match lstm --precision bf16; they differ in "
           "--framework and --mode (and some in --compile-mode): add one of --framework jax "
           "--mode xla; --framework torch --mode eager; --framework torch --mode graph")
    lines = wrapped(msg, 80).splitlines()
    assert len(lines) > 1 and all(len(x) <= 80 for x in lines)
    for cmd in ("--framework jax --mode xla", "--framework torch --mode eager",
                "--framework torch --mode graph"):
        assert any(cmd in x for x in lines), lines
    assert " ".join(" ".join(lines).split()) == msg
    assert wrapped(msg, None) == msg


def test_the_cli_refusal_follows_columns():
    import subprocess
    import sys

    env = {**__import__("os").environ, "COLUMNS": "80"}
    r = subprocess.run([sys.executable, "-m", "dlperf", "predict",
                        *[a for d in H200 for a in ("--db", str(d))], "--model", "lstm",
                        "--precision", "bf16", "-b", "96"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2
    assert max(map(len, r.stderr.splitlines())) <= 80
    assert "--framework jax --mode xla" in r.stderr


def test_a_model_with_no_stored_point_lists_no_other_models():
    with pytest.raises(api.ConfigError) as e:
        api.predict(H200, "hf:gpt2", batch_size=8)
    msg = str(e.value)
    assert msg.startswith("no stored points of hf:gpt2 in ")
    assert "dlperf run --model hf:gpt2" in msg
    assert "alexnet" not in msg and "in all" not in msg


def test_more_gpus_than_a_node_holds_are_refused_naming_nnodes():
    with pytest.raises(api.ConfigError, match=r"(?s)--nproc 1024: one node holds at most 16 GPUs"
                                                  r".*--nproc 8 --nnodes 128 --network ib_ndr"):
        api.predict(H200, batch_size=1024, nproc=1024, **R50)
    p = api.predict(H200, batch_size=1024, nproc=16, **R50)  # a node's worth is predicted
    assert p.predicted_step_time_s > 0



def test_the_request_refuses_a_node_of_more_gpus_than_it_holds_before_any_records():
    """:func:`request.check_scale_out` refuses more GPUs on a node than
    :data:`request.MAX_GPUS_PER_NODE` from the request alone (no records read), naming the
    nodes that give as many; :func:`request.check_divisible` names the nearest multiples."""
    from dlperf.perfmodel import request as rq

    target = Config("resnet50", "torch", "eager", "bf16", "cuda")
    with pytest.raises(api.ConfigError, match=r"(?s)--nproc 24: one node .*--nproc 8 --nnodes 3"):
        rq.check_scale_out(None, target, 24, 1)
    with pytest.raises(api.ConfigError, match=r"give a multiple of 8, such as 96 or 104"):
        rq.check_divisible(100, 8)
    rq.check_divisible(96, 8)

def _ratios(p):
    return [x / p.predicted_step_time_s for x in p.interval_s]


@pytest.mark.parametrize("n", [3, 8])
def test_device_counts_not_stored_are_at_least_as_wide_as_the_stored_count(n):
    two = _ratios(api.predict(H200, batch_size=2 * 128, nproc=2, **R50))
    more = api.predict(H200, batch_size=n * 128, nproc=n, **R50)
    assert more.interval_group.startswith("borrowed from")
    lo, hi = _ratios(more)
    assert lo <= two[0] and hi >= two[1]


def test_a_batch_beyond_the_validated_extrapolation_is_warned_and_borrowed():
    kw = dict(model="gpt2_small", framework="jax", mode="xla", precision="bf16")
    near = api.predict(H200, batch_size=256, **kw)  # 4x the largest measured (64): validated
    far = api.predict(H200, batch_size=4096, **kw)  # 64x
    assert near.interval_group.startswith("extrapolate 2x")
    assert not any("not validated" in w for w in near.warnings)
    assert far.interval_group.startswith("borrowed from extrapolate 2x at 95%")
    assert any("64x from the nearest fitted batch, 64 (the series of one results file the "
               "prediction is fitted to), beyond the 4x" in w for w in far.warnings)
    assert _ratios(far)[1] > _ratios(near)[1]
