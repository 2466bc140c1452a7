"""``dlperf predict --explain``: the numbers a prediction prints it was made of reproduce its
step through :mod:`dlperf.perfmodel.equations`, and its interval through the ranks it names."""

import math

import pytest

from committed import H200
from dlperf.cli.predict import explain_text
from dlperf.perfmodel import api
from dlperf.perfmodel import equations as eq

TORCH = dict(framework="torch", mode="eager", device="cuda", data="synthetic", layout="auto")


pytestmark = pytest.mark.usefixtures("module_fit_cache")


def test_a_series_prediction_is_its_printed_h_d0_d1_through_step_s():
    p = api.predict(H200, "resnet50", precision="bf16", batch_size=96, **TORCH)
    e = p.explanation
    s = e["series"]
    d = s["d0_s"] + s["d1_s_per_sample"] * 96
    assert eq.step_s(s["H_s"], d) == pytest.approx(p.predicted_step_time_s, rel=1e-12)
    assert (s["H_s"], d) == pytest.approx((p.parts["host_s"], p.parts["device_s"]), rel=1e-12)
    # the points' rows are the series' own stored steps, one per batch size fitted
    pts = [r for r in s["rows"] if r[0].startswith("T(B=")]
    assert [int(r[0][4:-1]) for r in pts] == s["batch_sizes"]
    assert all(r[4].startswith(s["file"] + ":") for r in pts)
    assert all(r[2] >= 0.02 for r in pts)  # never under the model floor
    # its interval: the printed ratios times the printed step
    iv = e["interval"]
    assert p.interval_s == pytest.approx((iv["low_ratio"] * iv["step_s"],
                                          iv["high_ratio"] * iv["step_s"]), rel=1e-12)
    n, k = iv["rows"], math.ceil((iv["rows"] + 1) * (1 - (1 - iv["level"]) / 2) - 1e-9)
    assert f"ranks {n + 1 - k} and {k} of {n}" in iv["ranks"]


def test_a_what_if_is_its_base_times_the_printed_ratios():
    # vgg16 torch graph bf16 is stored at b=128 alone (withheld): a what-if from graph fp32
    p = api.predict(H200, "vgg16", precision="fp32", batch_size=128,
                    what_if={"precision": "bf16"}, **{**TORCH, "mode": "graph"})
    w = p.explanation["what-if"]
    h = w["H_b"] * w["r_H"] * w["m"]
    d = w["D_b"] * w["r_D"] * w["m"]
    assert eq.step_s(h, d) == pytest.approx(p.predicted_step_time_s, rel=1e-12)
    s = p.explanation["series"]  # the base's series at the batch
    assert w["D_b"] == pytest.approx(s["d0_s"] + s["d1_s_per_sample"] * 128, rel=1e-12)
    for side, key in (("host", "r_H"), ("device", "r_D")):
        pairs = w["pairs"][side]
        if w[f"{key}_rule"] == "pairs":  # the ratio is the median of the pairs printed
            rs = sorted(r for *_, r in pairs)
            mid = (rs[(len(rs) - 1) // 2] + rs[len(rs) // 2]) / 2
            assert w[key] == pytest.approx(mid, rel=1e-12)


def test_n_devices_are_the_printed_rho_kappa_x_through_dp_step_s():
    p = api.predict(H200, "googlenet", precision="fp32", batch_size=128, nproc=2, **TORCH)
    dp = p.explanation["data parallel"]
    assert dp["world"] == 2 and dp["X_s"] > 0
    t = eq.dp_step_s(dp["H_s"], dp["D_s"], dp["X_s"], dp["rho"], dp["kappa"])
    assert t == pytest.approx(p.predicted_step_time_s, rel=1e-12)


def test_the_explanation_is_kept_out_of_the_json_unless_asked_and_printed_when_asked():
    p = api.predict(H200, "resnet50", precision="bf16", batch_size=96, **TORCH)
    assert "explanation" not in p.to_dict()
    text = explain_text(p.to_dict(explain=True)["explanation"])
    assert f"= {p.predicted_step_time_s * 1e3:.5g} ms" in text
    assert "host prior" in text and "z " in text


def test_the_roofline_prior_is_its_printed_f1_y0_y1_p_w():
    # fcn8 torch graph fp32: a one-point series whose d0 prior is the roofline's and whose d1
    # prior is the roofline's moved by fcn8's torch eager fp32 series (its other group)
    p = api.predict(H200, "fcn8", "torch", "graph", "fp32", "cuda", batch_size=512)
    r = p.explanation["roofline"]
    d1 = r["f1"] / (r["e_F"] * r["P"]) + r["y1"] / (r["e_Y"] * r["W"])
    d0 = r["y0"] / (r["e_Y"] * r["W"]) + (r["K"] or 0.0) * r["t_k"]
    assert (r["d1_s_per_sample"], r["d0_s"]) == pytest.approx((d1, d0), rel=1e-12)
    assert r["d1_scale"] != pytest.approx(1.0) and "torch/eager" in r["d1_scale_source"]
    rows = {row[0]: row[1] for row in p.explanation["series"]["rows"]}
    # the prior rows the fit was pulled to
    assert rows["d1"] == pytest.approx(d1 * r["d1_scale"], rel=1e-9)
    assert rows["d0"] == pytest.approx(d0, rel=1e-9)
    text = explain_text(p.explanation)
    assert "roofline of fcn8" in text and f"d1 prior = d1 x {r['d1_scale']:.4g}" in text


def test_added_operators_print_each_models_c_add_and_their_median():
    # resnet50 torch eager bf16 nhwc is not stored: a what-if from its fp32 series
    p = api.predict(H200, "resnet50", precision="fp32", batch_size=128,
                    what_if={"precision": "bf16"}, **{**TORCH, "layout": "nhwc"})
    w = p.explanation["what-if"]
    ca = w["c_add"]
    assert w["r_H_rule"] == "added operators" and len(ca["per_model_s"]) >= 2
    assert "resnet50" not in ca["per_model_s"]           # other models only
    med = sorted(ca["per_model_s"].values())
    n = len(med)
    want = med[n // 2] if n % 2 else (med[n // 2 - 1] + med[n // 2]) / 2
    assert ca["median_s"] == pytest.approx(want, rel=1e-12)
    h_t = w["H_b"] + (ca["n_t"] - ca["n_b"]) * ca["median_s"]
    assert w["H_b"] * w["r_H"] == pytest.approx(h_t, rel=1e-9)
    assert "c_add = median of each other model's dH/dn" in explain_text(p.explanation)


def test_n_nodes_print_the_bucket_schedule_that_gives_x():
    p = api.predict(H200, "resnet50", precision="bf16", batch_size=256, nproc=2, nnodes=2,
                    network="ib_ndr", **TORCH)
    dp = p.explanation["data parallel"]
    bks = dp["buckets"]
    assert len(bks) >= 2 and {b[5] for b in bks} <= {"ring", "tree", "hierarchical"}
    end = 0.0
    for _m, r, c, s, e, _ in bks:  # the WFBP recursion on the printed numbers
        assert s == pytest.approx(max(r, end), rel=1e-12) and e == pytest.approx(s + c)
        end = e
    assert dp["X_s"] == pytest.approx(max(0.0, end - dp["backward_s"]), rel=1e-9)
    assert sum(b[0] for b in bks) == pytest.approx(4 * dp["params"], rel=1e-9)  # fp32 grads
    assert "bucket 1: M = 1 MiB" in explain_text(p.explanation)


def test_the_hierarchical_all_reduce_is_its_formula():
    # 2 GPUs x 2 nodes, M = 64 MiB, 8 NICs per node (one per GPU here: n = min(8, 2) = 2)
    m, ai, bi, ae, be = 64 * 2**20, 2e-6, 1 / 300e9, 5e-6, 1 / 50e9
    want = 2 * (1 * ai + 0.5 * m * bi) + (2 * 1 * ae + 2 * 1 / 2 * (m / 2) * be * 2 / 2)
    assert eq.hierarchical_allreduce_s(m, 2, 2, ai, bi, ae, be, 8) == pytest.approx(want)
    # one NIC shared by 4 GPUs: each ring sees a quarter of its bandwidth
    one = eq.hierarchical_allreduce_s(m, 4, 2, ai, bi, ae, be, 1)
    want = 2 * (3 * ai + 0.75 * m * bi) + (2 * ae + (m / 4) * be * 4)
    assert one == pytest.approx(want)
