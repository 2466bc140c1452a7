"""The performance model's back-test and predict API on the committed H200 results.

Every number asserted here was measured on these files (docs/perfmodel.md has the table and the
command); the assertions are the claims the documentation makes, so they fail if the model or
the data change so that a claim no longer holds.
"""

import json
import math
from pathlib import Path

import pytest

from committed import H200, ROOT
from dlperf import validation
from dlperf.errors import ConfigError
from dlperf.perfmodel import api, whatifs
from dlperf.perfmodel import equations as eq
from dlperf.perfmodel import intervalchoice as ic

DLBENCH = ROOT / "h200/dlbench.db"


@pytest.fixture(scope="module")
def summary(h200_validation):
    v = h200_validation  # validation.validate(H200), shared with test_perfmodel_predict_requests
    return {d["category"]: d for d in v.summary()}, v


def test_every_category_ran(summary):
    s, v = summary
    assert set(s) == {"held-out batch", "extrapolate 2x", "extrapolate down 2x",
                      "one-point series up", "one-point series down", "two-point series up",
                      "two-point series down", "leave-one-model-out",
                      "what-if fp32->bf16", "what-if eager->graph", "what-if torch->jax",
                      "what-if jax->torch", "what-if torch graph->jax",
                      "what-if jax->torch graph", "what-if two changes", "what-if B->2B", "all-reduce >= 1 MiB", "2-GPU from 1-GPU", "N-GPU via predict --nproc",
                      "repeat (noise floor)", "input: leave-one-worker-count-out"}
    # one- and two-point series: each neighbouring pair (triple) of a series, both ways
    assert s["one-point series up"]["count"] == s["one-point series down"]["count"] == 238
    assert s["two-point series up"]["count"] == s["two-point series down"]["count"] == 132
    assert s["N-GPU via predict --nproc"]["count"] == 8  # the stored 2-GPU points, no variants
    # every point of the committed series with 4+ batch sizes
    assert s["held-out batch"]["count"] == 250
    assert s["extrapolate 2x"]["count"] == 59
    assert s["2-GPU from 1-GPU"]["count"] == 10  # the stored synthetic-data 2-GPU points
    assert s["all-reduce >= 1 MiB"]["count"] == 11
    assert all(r.measured_s > 0 and r.predicted_s > 0 for r in v.rows)
    assert "| held-out batch | 250 |" in v.table()


def test_framework_what_ifs_pair_stored_points_in_their_own_direction(summary):
    """Each framework category's rows go from its base (framework, mode) to its target, one
    file, one batch; the reverse category pairs the same stored points the other way."""
    from dlperf.perfmodel.records import point_id

    s, v = summary
    pts = {point_id(p): p for p in api.records_of(H200).points}
    pairs: dict[str, set] = {}
    for (src, dst), cat in whatifs.FRAMEWORK_WHATIFS.items():
        rows = [r for r in v.rows if r.category == cat]
        assert s[cat]["count"] == len(rows) >= 8, cat  # >= 8 on development alone (docs)
        for r in rows:
            t = pts[r.point]  # the measured target point, withheld from the prediction
            assert (t.framework, t.mode) == dst, (cat, r.label)
            base = next(p for p in pts.values() if p.source == t.source and p.world_size == 1
                        and (p.framework, p.mode) == src and p.model == t.model
                        and p.precision == t.precision and p.batch_size == t.batch_size
                        and p.step_time_s == r.baseline_s)
            assert r.sign_ok == ((r.predicted_s > base.step_time_s)
                                 == (r.measured_s > base.step_time_s))
        pairs[cat] = {(pts[r.point].source, pts[r.point].model, pts[r.point].precision,
                       pts[r.point].batch_size) for r in rows}
    # the same stored pairs both ways (a direction whose prediction fails would differ)
    assert pairs["what-if torch->jax"] == pairs["what-if jax->torch"]
    assert pairs["what-if torch graph->jax"] == pairs["what-if jax->torch graph"]
    assert not pairs["what-if torch->jax"] <= pairs["what-if torch graph->jax"]


def test_model_beats_the_linear_baseline_on_held_out_batches(summary):
    s, _ = summary
    for cat in ("held-out batch", "extrapolate 2x"):
        d = s[cat]
        assert d["mdape_pct"] < d["baseline_mdape_pct"], cat
        assert d["max_pct"] < d["baseline_max_pct"] or cat == "extrapolate 2x", cat
    # measured: 4.11% against 5.57%, max 45.1% against 76.6%; 3.00% against 7.36%. The max is
    # JAX bert_base bf16 b=16 (7.65 ms, CI 19% of it, between 12.35 ms at b=8 and 11.33 ms
    # at b=32)
    assert s["held-out batch"]["mdape_pct"] < 4.5
    assert s["held-out batch"]["max_pct"] < 50
    assert s["extrapolate 2x"]["mdape_pct"] < 3.3


def test_host_bound_points_are_the_hard_part(summary):
    s, _ = summary
    # the model misses host-bound points by more than the rest, and host-bound points scatter
    # between sessions by more still (the noise floor of one measurement)
    held = s["held-out batch"]
    assert held["host_bound_mdape_pct"] > held["mdape_pct"]
    rep = s["repeat (noise floor)"]
    assert rep["mdape_pct"] < 1.0 < 5.0 < rep["host_bound_mdape_pct"]


def test_analytic_allreduce_dp_and_whatif_against_their_baselines(summary):
    s, v = summary
    lomo = s["leave-one-model-out"]
    assert lomo["mdape_pct"] < 0.4 * lomo["baseline_mdape_pct"]  # 16.28% against 70.87%
    assert lomo["mdape_pct"] < 18  # 19.78% without the kernel term (--no-kernel-term)
    # JAX's host time follows its host launches (kernels folded into XLA's command buffers,
    # a fixed part plus 9-18 us per launch), and a device-bound series whose host probe is
    # two-sided shows its host time; tf32 takes fp32's operator count (SAME_OPERATORS); the
    # worst is JAX fcn5 fp32 b=16 (177.5%), docs/perfmodel.md
    assert lomo["max_pct"] < 200
    tf32_graph_lstm = [r.ape for r in v.rows if r.category == "leave-one-model-out"
                       and r.label.startswith("lstm torch/graph cuda tf32")]
    assert len(tf32_graph_lstm) == 2 and max(tf32_graph_lstm) < 80
    lstm = [r.ape for r in v.rows if r.category == "leave-one-model-out"
            and r.label.startswith("lstm jax/xla") and " tf32 " not in r.label]
    # its device time: 46.5% under (median, max 60%) by the roofline alone; with the kernel
    # term 30.6%, but fp32 b=16 109% over (the other JAX fp32 models' 5.7 us per kernel x its
    # 1,662 kernels; its own busy time is ~3 us per kernel). 318% with a host cost per kernel
    assert sorted(lstm)[len(lstm) // 2] < 35 and max(lstm) < 120
    # a torch graph model's host: the graph group's cost per launched kernel where the model
    # was traced in graph mode, else per operator; CUDA-graph runs (reduce-overhead) apart
    graph = [r for r in v.rows if r.category == "leave-one-model-out" and "torch/graph" in r.label]
    assert sorted(r.ape for r in graph)[len(graph) // 2] < 20  # 15.3%; 0.056 ms of device before
    assert len([r for r in graph if "[reduce-overhead]" in r.label]) == 6
    ar = s["all-reduce >= 1 MiB"]
    assert ar["mdape_pct"] < 5.0 and ar["mdape_pct"] < ar["baseline_mdape_pct"]
    two = s["2-GPU from 1-GPU"]
    assert two["mdape_pct"] < two["baseline_mdape_pct"] and two["max_pct"] < two["baseline_max_pct"]
    assert two["eff_err_median_pts"] < 10.0
    # calibration2.db's host-bound fp32/bf16 pairs differ by less than the host noise
    right, n = s["what-if fp32->bf16"]["sign_right"]
    # 169 of 190 with the host of the operators bf16 adds in eager mode
    # (hostmove.added_ops_host); MdAPE 20.75%, host-bound 13.84%
    assert right / n >= 0.88
    wb = s["what-if fp32->bf16"]
    assert wb["mdape_pct"] < 22.0 and wb["host_bound_mdape_pct"] < 16.0
    right, n = s["what-if B->2B"]["sign_right"]
    assert right / n >= 0.88  # 143 of 161
    # judged only where the measured change exceeds the median repeat scatter of its bound
    # (host-bound 15.1%, device-bound 0.26%): B->2B 137 of 139, fp32->bf16 153 of 167
    noise = v.noise_pct()
    assert 5.0 < noise["host"] and noise["device"] < 1.0
    right, n = s["what-if B->2B"]["sign_right_resolved"]
    assert right >= n - 3 and n >= 100  # 136 of 139
    right, n = s["what-if fp32->bf16"]["sign_right_resolved"]
    assert right / n >= 0.91 and n < s["what-if fp32->bf16"]["sign_right"][1]
    # eager->graph: a pair of one file starts from that file's eager series (its host
    # session); CUDA-graph runs are not eager->graph pairs; torch.compile picks the layout
    # itself, so an NCHW eager base starts from the auto series: 8.01%, max 76.7%
    eg = s["what-if eager->graph"]
    assert eg["mdape_pct"] < 8.5 < eg["baseline_mdape_pct"] and eg["max_pct"] < 80
    right, n = eg["sign_right_resolved"]
    assert right / n >= 0.70  # 33 of 46; "graph is always faster" gets more (docs/perfmodel.md)
    nchw = [r.ape for r in v.rows if r.category == "what-if eager->graph"
            and "b=128 layout=nchw -> " in r.label and (" bf16 " in r.label or " tf32 " in r.label)]
    assert len(nchw) == 2 and max(nchw) < 15  # 13.2%, 9.3% (86%, 55% from the NCHW step)
    assert s["what-if fp32->bf16"]["mdape_pct"] < s["what-if fp32->bf16"]["baseline_mdape_pct"]


def test_the_baseline_comparison_the_docs_state(summary):
    # README's Status and docs/perfmodel.md: by MdAPE the model beats its baseline in every
    # category that has one
    s, _ = summary
    with_baseline = {c for c, d in s.items() if d["baseline_mdape_pct"] is not None}
    beats = {c for c in with_baseline if s[c]["mdape_pct"] < s[c]["baseline_mdape_pct"]}
    assert with_baseline - beats == set()
    assert len(beats) == 20 and "repeat (noise floor)" not in with_baseline
    ar = s["all-reduce >= 1 MiB"]
    assert ar["max_pct"] > ar["baseline_max_pct"]  # its worst miss is the larger one (21.9/16.4)


def test_prediction_intervals_hold_their_level_per_bound(summary):
    """docs/perfmodel.md "Prediction interval": leave-one-out over the H200 back-test rows, the
    pooled empirical 90% interval covered 79% of host-bound and 97% of device-bound held-out
    batch rows (B->2B 75% / 95%, eager->graph 70% / 100%); the Mondrian conformal one 91% / 91%
    (92% / 91%, 93% / 94%), and its device-bound intervals are narrower (1.24x against
    1.40x)."""
    _, v = summary
    before = {d["category"]: d for d in v.coverage(0.9, "pooled")}
    after = {d["category"]: d for d in v.coverage(0.9)}
    for cat in ("held-out batch", "what-if B->2B", "what-if eager->graph"):
        assert before[cat]["coverage_host"] < 0.8 < 0.94 < before[cat]["coverage_device"], cat
        assert 0.88 <= after[cat]["coverage_host"] <= 0.96, cat
        assert 0.88 <= after[cat]["coverage_device"] <= 0.96, cat
        assert after[cat]["median_width_device"] < before[cat]["median_width_device"], cat
    for d in after.values():
        assert 0.88 <= d["coverage"] <= 0.96, d["category"]
    assert after["2-GPU from 1-GPU"]["groups"] == {"2-GPU from 1-GPU, pooled": 10}
    assert before["2-GPU from 1-GPU"]["coverage"] == 0.7  # 7 of 10; Mondrian (|r|) 9 of 10


def test_unknown_category_refused():
    with pytest.raises(ConfigError, match="unknown back-test category"):
        validation.validate(DLBENCH, ["nosuch"])


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DLPERF_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_predict_one_device_withholds_the_point_it_predicts(cache, h200_validation):
    p = api.predict(H200, "lstm", "torch", "eager", "fp32", "cuda", batch_size=64,
                    data="synthetic")
    assert p.how == "series" and p.bound in ("host", "device")
    assert p.measured_step_time_s == pytest.approx(7.282e-3, rel=1e-3)
    lo, hi = p.interval_s
    assert lo < p.predicted_step_time_s < hi
    assert abs(p.predicted_step_time_s / p.measured_step_time_s - 1) < 0.1
    assert not any(i.endswith(":44") for i in p.calibrated_on)  # result 44 is lstm fp32 b=64
    assert p.samples_per_s == pytest.approx(64 / p.predicted_step_time_s)
    assert p.scaling_efficiency == 1.0
    assert set(p.parts) == {"host_s", "device_s", "device_by_class_s", "exposed_comm_s", "input_s"}
    assert p.predicted_step_time_s == pytest.approx(eq.step_s(p.parts["host_s"],
                                                               p.parts["device_s"]), rel=1e-9)
    d = p.to_dict()
    json.dumps(d)
    assert d["interval_s"] == [lo, hi]
    assert p.interval_group.startswith("held-out batch, ")  # its Mondrian group, named


def test_predict_never_back_tests_and_says_how_to_get_an_interval(cache, monkeypatch):
    """A prediction on files with no residual table of the current model (dlbench.db alone:
    the committed tables are for the H200 folders) borrows the h200 folder's table's
    residuals of its path, says so and why; without any table of the current model it has no
    interval and says how to make one. It runs no back-test (validation is not even
    imported)."""
    import sys

    from dlperf.perfmodel import fitcache as fc

    _fresh_process(monkeypatch)
    monkeypatch.delitem(sys.modules, "dlperf.validation.backtest", raising=False)
    p = api.predict(DLBENCH, "lstm", precision="fp32", batch_size=64)
    assert "dlperf.validation.backtest" not in sys.modules
    assert p.interval_group.startswith("borrowed from the h200 residual table")
    assert p.interval_note is None
    assert any("has no entry for these results files" in a for a in p.assumptions)
    _fresh_process(monkeypatch)
    monkeypatch.setattr(fc, "model_key", lambda: "0" * 20)  # other model code: no table
    p = api.predict(DLBENCH, "lstm", precision="fp32", batch_size=64)
    assert "dlperf.validation.backtest" not in sys.modules
    assert all(x != x for x in p.interval_s) and p.interval_group is None
    assert "run dlperf predict --validate" in p.interval_note
    assert "has no entry for these results files" in p.interval_note


def test_predict_data_parallel_and_nodes_say_what_was_measured(cache, h200_validation):
    p2 = api.predict(H200, "resnet50", "torch", "eager", "bf16", "cuda", batch_size=128, nproc=2)
    assert p2.how.endswith("data parallel") and 0 < p2.scaling_efficiency < 1
    assert p2.provenance["all-reduce"].startswith("measured")
    assert p2.provenance["DDP overhead rho, kappa"].startswith("measured")
    assert p2.parts["exposed_comm_s"] > 0
    # the parts printed are the data-parallel step's own: step_s(host_s, device_s) is the step
    parts = p2.parts
    assert p2.predicted_step_time_s == pytest.approx(
        eq.step_s(parts["host_s"], parts["device_s"]), rel=1e-9)
    assert parts["host_s"] > parts["one_device_host_s"]  # rho > 0 on the stored pairs
    assert parts["device_s"] > parts["one_device_device_s"] + parts["exposed_comm_s"]
    pn = api.predict(H200, "resnet50", "torch", "eager", "bf16", "cuda", batch_size=1024,
                     nproc=8, nnodes=2, network="ib_ndr")
    assert pn.provenance["all-reduce"].startswith("given")
    slow = api.predict(H200, "resnet50", "torch", "eager", "bf16", "cuda", batch_size=1024,
                       nproc=8, nnodes=2, network="eth100")
    assert slow.predicted_step_time_s > pn.predicted_step_time_s
    assert slow.parts["exposed_comm_s"] > pn.parts["exposed_comm_s"]
    user = api.predict(H200, "resnet50", "torch", "eager", "bf16", "cuda", batch_size=1024,
                       nproc=8, nnodes=2, network={"inter": {"alpha_s": 5e-6,
                                                             "bandwidth_bytes_per_s": 25e9},
                                                   "algorithm": "ring"})
    assert "given by the user" in user.provenance["all-reduce"]


def test_predict_what_if_and_analytic(cache, h200_validation):
    # resnet50 torch eager bf16 nhwc is not stored: a what-if from the fp32 nhwc series
    w = api.predict(H200, "resnet50", "torch", "eager", "fp32", batch_size=64,
                    what_if={"precision": "bf16"}, layout="nhwc")
    assert w.how == "what-if" and w.config["precision"] == "bf16"
    nhwc = api.predict(H200, "resnet50", "torch", "eager", "fp32", batch_size=64, layout="nhwc")
    assert w.predicted_step_time_s < nhwc.predicted_step_time_s
    # at the default layout bf16 is stored: the what-if is bf16's own prediction
    s = api.predict(H200, "resnet50", "torch", "eager", "fp32", batch_size=64,
                    what_if={"precision": "bf16"})
    assert s.how == "series" and s.predicted_step_time_s == api.predict(
        H200, "resnet50", "torch", "eager", "bf16", batch_size=64).predicted_step_time_s
    base = api.predict(H200, "resnet50", "torch", "eager", "fp32", batch_size=64)
    b2 = api.predict(H200, "resnet50", "torch", "eager", "fp32", batch_size=64,
                     what_if={"batch-size": "2x"})
    assert b2.config["global_batch"] == 128 and b2.predicted_step_time_s > base.predicted_step_time_s
    a = api.predict(DLBENCH, "bert_base", "torch", "eager", "bf16", "cuda", batch_size=64)
    assert a.how == "analytic" and any("own measurements not used" in x for x in a.assumptions)
    assert "ceilings datasheet" in a.provenance["device D"]  # dlbench.db measured no ceilings
    # an analytic prediction of a configuration the model has a series in another precision of
    # points at the what-if that uses the model's own measurements
    t = api.predict(H200, "alexnet", "jax", "xla", "tf32", "cuda", batch_size=64)
    assert t.how == "analytic"
    assert any(w.startswith("analytic: alexnet jax/xla cuda tf32 is not stored") and
               "--what-if precision=tf32" in w for w in t.warnings)
    # stored only at the batch predicted (withheld): the warning says so, not "not stored"
    w64 = api.predict(H200, "bert_base", "jax", "xla", "fp32", "cuda", batch_size=64)
    assert w64.how == "analytic" and w64.measured_step_time_s
    assert any(w.startswith("analytic: bert_base jax/xla cuda fp32 is stored only at batch 64, "
                            "which a prediction of it withholds") for w in w64.warnings)
    # a recurrent model without a launch count: both known weaknesses are said (fp32: the
    # JAX bf16 series of deepspeech2 is stored with its timeline's counts)
    r = api.predict(H200, "deepspeech2", "jax", "xla", "fp32", "cuda", batch_size=32)
    assert r.how == "analytic"
    assert any(x.startswith("host time: no operator or launch count") for x in r.assumptions)
    assert any("recurrent model" in x for x in r.assumptions)


def test_predict_refuses_bad_requests(cache):
    with pytest.raises(ConfigError, match="not divisible"):
        api.predict(H200, "resnet50", "torch", "eager", "bf16", batch_size=127, nproc=2)
    with pytest.raises(ConfigError, match="several stored configurations"):
        api.predict(H200, "resnet50", batch_size=64)
    with pytest.raises(ConfigError, match="network inter 'nosuch'"):
        api.predict(H200, "resnet50", "torch", "eager", "bf16", batch_size=128, nproc=2,
                    nnodes=2, network="nosuch")
    with pytest.raises(ConfigError, match="what-if 'layout'"):
        api.predict(H200, "resnet50", "torch", "eager", "bf16", batch_size=64,
                    what_if={"layout": "nchw"})
    with pytest.raises(ConfigError, match="does not exist"):
        api.predict(ROOT / "nosuch.db", "lstm", batch_size=64)
    assert math.isfinite(api.predict(DLBENCH, "fcn5", precision="bf16",
                                     batch_size=512).predicted_step_time_s)


def test_an_installed_residual_table_gives_the_files_their_intervals(cache, monkeypatch):
    """:func:`intervalchoice.install_residuals` makes a table the one of its records' files in this
    process (as a full validation does): a prediction that had no table, and said why, takes
    its interval from the installed residuals and no longer says a table is missing."""
    from dlperf.perfmodel import fitcache as fc

    _fresh_process(monkeypatch)
    monkeypatch.setattr(fc, "model_key", lambda: "0" * 20)  # other model code: no table
    p = api.predict(DLBENCH, "lstm", precision="fp32", batch_size=64)
    assert p.interval_group is None and "has no entry" in p.interval_note
    recs = api.records_of(DLBENCH)
    assert ic._TABLES[ic.table_key(recs)][0] is None and ic._TABLES[ic.table_key(recs)][1]
    rows = [(0.01 * (i - 10), None, f"x.db:{i}") for i in range(21)]  # -0.1 .. 0.1
    ic.install_residuals(recs, {p.validation_category: rows})
    assert ic._TABLES[ic.table_key(recs)][1] == ""
    q = api.predict(DLBENCH, "lstm", precision="fp32", batch_size=64)
    assert q.interval_note is None and q.interval_group is not None
    lo, hi = q.interval_s
    assert lo < q.predicted_step_time_s < hi < q.predicted_step_time_s * math.exp(0.11)


def _fresh_process(monkeypatch):
    """Forget what this process loaded and fitted, as a new ``dlperf predict`` would."""
    for name in ("_RECORDS", "_SHARED", "_DDP"):
        monkeypatch.setattr(api, name, {})
    for name in ("_TABLES", "_BORROWABLE"):
        monkeypatch.setattr(ic, name, {})


def test_group_fits_are_cached_on_disk_and_read_back_the_same(cache, monkeypatch):
    """A prediction stores the roofline group fits it made (fitcache.py); a later process reads
    them instead of fitting again and predicts the same numbers, to the last bit; a damaged
    cache file is an empty cache."""
    from dlperf.perfmodel import fitcache as fc
    from dlperf.perfmodel import onedevice as od

    args = (DLBENCH, "resnet56", "torch", "eager", "bf16", "cuda")
    _fresh_process(monkeypatch)
    first = api.predict(*args, batch_size=48).to_dict()
    files = list(cache.glob("perfmodel-fits-*.json"))
    assert len(files) == 1
    stored = fc.read_fits(files[0])
    assert stored and all(v is None or v.group[0] == "torch" or v.models for v in stored.values())
    _fresh_process(monkeypatch)
    calls = []
    real = od.fit_group
    monkeypatch.setattr(od, "fit_group", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    again = api.predict(*args, batch_size=48).to_dict()
    # every fit it needed came from the file (json: the intervals are NaN, no table here)
    assert json.dumps(again) == json.dumps(first) and calls == []
    files[0].write_text("[[1, 2], \"not a fit\"]")
    assert fc.read_fits(files[0]) == {}
    _fresh_process(monkeypatch)
    assert json.dumps(api.predict(*args, batch_size=48).to_dict()) == json.dumps(first) \
        and calls  # fitted again


def test_a_cached_fit_names_its_points_as_a_fresh_fit_would(tmp_path, monkeypatch):
    """Group fits name their points by the results file's path as given: fits cached by a
    prediction given the file's absolute path are not read back by one given a relative path
    (their ids would be absolute, and a residual table stored from them would hold absolute
    ids); what it reads back, and the table written from it, equal a fresh fit's to the byte."""
    import shutil

    from dlperf.perfmodel import fitcache as fc

    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(DLBENCH, data / DLBENCH.name)
    monkeypatch.chdir(data)
    args = ("resnet56", "torch", "eager", "bf16", "cuda")

    def groups(cache: str, db: str | Path) -> dict:
        monkeypatch.setenv("DLPERF_CACHE_DIR", str(tmp_path / cache))
        _fresh_process(monkeypatch)
        api.predict(db, *args, batch_size=48)
        return next(iter(api._SHARED.values())).groups

    fresh = groups("fresh", DLBENCH.name)
    assert fresh and all(i.startswith(DLBENCH.name + ":")
                         for v in fresh.values() if v is not None for i in v.result_ids)
    groups("warm", data / DLBENCH.name)  # the same file by its absolute path
    cached = groups("warm", DLBENCH.name)
    assert cached == fresh

    def table(fits: dict) -> bytes:
        f = fc.write_table([DLBENCH.name], {}, fits)
        text = f.read_bytes()
        f.unlink()
        return text
    assert table(cached) == table(fresh)
    assert str(data) not in table(cached).decode()


@pytest.fixture(scope="module")
def stored_fits(tmp_path_factory):
    """The group-fit cache file's rows after one prediction on dlbench.db (its own cache)."""
    cache = tmp_path_factory.mktemp("fits")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DLPERF_CACHE_DIR", str(cache))
        _fresh_process(mp)
        api.predict(DLBENCH, "resnet56", "torch", "eager", "bf16", "cuda", batch_size=48)
    return json.loads(next(cache.glob("perfmodel-fits-*.json")).read_text())["payload"]


@pytest.mark.parametrize("field, bad", [
    ("e_flops", True), ("e_flops", 0), ("e_flops", float("nan")), ("e_flops", -1.0),
    ("e_bytes", "0.5"), ("kernel_s", float("inf")), ("models", "resnet50"), ("hosts", {}),
    ("host_bound", "false"), ("n_batch_sizes", 2.7), ("measured", "no"), ("group", "abcd"),
    ("key_kernels", "false"), ("key_group", [1, 2, 3, 4])])
def test_a_cache_entry_of_the_wrong_type_is_dropped_not_converted(tmp_path, stored_fits, field,
                                                                  bad):
    """Every field of a stored group fit must have its own type (a JSON bool for a bool, a finite
    positive number where the model divides by it): anything else drops the entry, so it is
    fitted again instead of being read as something it is not."""
    import copy

    from dlperf.jsoncache import digest
    from dlperf.perfmodel import fitcache as fc

    def write_json(f, payload):  # as fitcache writes it, digest and all: only a type is wrong
        f.write_text(json.dumps({"dlperf_cache": 1, "sha256": digest(payload),
                                 "payload": payload}))

    rows = copy.deepcopy(stored_fits)
    f = tmp_path / "fits.json"
    write_json(f, rows)
    assert len(fc.read_fits(f)) == len(rows)
    key, val = next(r for r in rows if r[1] is not None and r[1]["hosts"])
    if field == "key_kernels":
        key[3] = bad
    elif field == "key_group":
        key[0] = bad
    elif field in ("host_bound", "n_batch_sizes", "measured"):
        val["hosts"][0][fc.HOST_FIELDS.index(field)] = bad
    else:
        val[field] = bad
    write_json(f, rows)
    assert len(fc.read_fits(f)) == len(rows) - 1


def test_an_unwritable_cache_folder_warns_once_and_leaves_no_temporary_file(tmp_path,
                                                                          monkeypatch):
    import warnings

    from dlperf import jsoncache
    from dlperf.perfmodel import fitcache as fc

    monkeypatch.setattr(jsoncache, "_warned", set())
    (tmp_path / "afile").write_text("")
    target = tmp_path / "afile" / "sub" / "fits.json"  # under a regular file: mkdir fails
    with pytest.warns(UserWarning, match="cannot write the cache"):
        fc.write_fits(target, {})
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        fc.write_fits(target, {})
    assert again == []  # once per folder
    d = tmp_path / "dir.json"
    d.mkdir()  # a folder where the file should be: the rename fails after the temp file exists
    with pytest.warns(UserWarning):
        fc.write_fits(d, {})
    assert list(tmp_path.rglob("*.tmp")) == []


def test_committed_residual_tables_are_current():
    """The residual tables committed beside the H200 results hold an entry made by the model's
    current source from the files' current content, for h200 + h200x2 and for h200 alone: a
    change to a module a prediction imports leaves predictions on a fresh clone without an
    interval until they are regenerated (``benchmarks/perfmodel_validate.py --committed``)."""
    from dlperf.perfmodel import fitcache
    from dlperf.results.dbfile import results_files

    for sets in (["h200", "h200x2"], ["h200"]):
        files = results_files([str(ROOT / s) for s in sets])
        table, why = fitcache.read_table(files)
        assert table is not None, (f"{'+'.join(sets)}: {why}; run PYTHONPATH=src python "
                                   "benchmarks/perfmodel_validate.py --committed and commit "
                                   "the tables")
        assert {"held-out batch", "one-point series up", "leave-one-model-out"} <= set(table)


def test_one_category_runs_alone_and_gives_the_full_runs_rows(summary):
    """``validate(categories=[c])`` makes the rows of ``c`` alone, the same rows as the full
    run makes for it: the ``--nproc`` category (predictions through predict() itself, no
    back-test category) and one of the back-test's own."""
    _, full = summary
    for cat in (validation.PREDICT_NPROC_CATEGORY, "2-GPU from 1-GPU"):
        one = validation.validate(H200, categories=[cat])
        assert {r.category for r in one.rows} == {cat}
        assert one.rows == [r for r in full.rows if r.category == cat]


def test_the_readme_quotes_the_current_test_side(h200_validation):
    """README's Status paragraph quotes the test side of the split table that
    ``perfmodel_validate.py benchmarks/results/h200 benchmarks/results/h200x2`` prints: each
    MdAPE, and the range of the 90% interval coverage over the categories with 18+ test rows."""
    import re

    from dlperf.validation import split

    text = " ".join((ROOT.parents[1] / "README.md").read_text().split())
    cells: dict[str, list[str]] = {}
    for line in h200_validation.split_table(split.load()).splitlines():
        parts = [p.strip() for p in line.strip("|").split("|")]
        if len(parts) > 6 and " / " in parts[1]:
            cells[parts[0]] = [p.split(" / ")[-1] for p in parts[1:]]  # the test side
    def mdape(cat, col=1):  # noqa: E306  columns: rows, MdAPE, host, baseline
        return float(cells[cat][col])
    def pct(x, digits=1):  # noqa: E306
        return f"{x:.{digits}f}%"
    one = sorted([mdape("one-point series up"), mdape("one-point series down")])
    same = sorted([mdape("one-point series up", 3), mdape("one-point series down", 3)])
    quoted = {"held-out batch": f"held-out batch {pct(mdape('held-out batch'))} "
                                f"(a + b*B: {pct(mdape('held-out batch', 3))})",
              "one": f"a series of one batch size {one[0]:.1f}-{pct(one[1])} (same samples/s: "
                     f"{same[0]:.0f}-{pct(same[1], 0)})",
              "lomo": f"leave-one-model-out {pct(mdape('leave-one-model-out'))} (FLOPs over one "
                      f"efficiency: {pct(mdape('leave-one-model-out', 3), 0)})",
              "nproc": f"`predict --nproc 2` {pct(mdape('N-GPU via predict --nproc'))}"}
    for name, words in quoted.items():
        assert words in text, (name, words)
    m = re.search(r"\((\d+)-(\d+)% coverage on test where there are (\d+)\+ rows", text)
    assert m, "the README's coverage range"
    covs = [int(c[-1].split("%")[0]) for c in cells.values()
            if int(c[0]) >= int(m.group(3)) and c[-1].split("%")[0].isdigit()]
    assert len(covs) >= 10
    assert (min(covs), max(covs)) == (int(m.group(1)), int(m.group(2)))
