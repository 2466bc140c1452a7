"""Prediction intervals (:mod:`dlperf.perfmodel.intervals`): the conformal quantile, the
Mondrian groups, and the leave-one-out coverage back-test, on residuals of known distribution.
"""

import json
import math
import os

import numpy as np
import pytest

from dlperf.perfmodel import api, whatifs
from dlperf.perfmodel import fitcache as fc
from dlperf.perfmodel import intervalchoice as ic
from dlperf.perfmodel import intervals as iv
from dlperf.validation import Validation
from dlperf.validation import intervalcheck as cv
from dlperf.validation.backtest import Row


def _rows(residuals, bounds, category="held-out batch"):
    """Back-test rows whose ``log(measured / predicted)`` are ``residuals``."""
    return [Row(category, f"r{i}", measured_s=math.exp(r) * 1e-3, predicted_s=1e-3, bound=b)
            for i, (r, b) in enumerate(zip(residuals, bounds, strict=True))]


def test_conformal_quantile_is_the_finite_sample_order_statistic():
    s = list(np.arange(1, 40, dtype=float) - 20.0)  # -19 .. 19, n = 39
    lo, hi, how = iv.conformal_bounds(s, 0.9)
    # k = ceil(40 x 0.95) = 38: the 38th smallest (18) and the 2nd smallest (-18)
    assert (lo, hi, how) == (-18.0, 18.0, "conformal")
    lo, hi, how = iv.conformal_bounds(s[:19], 0.9)  # n = 19: k = 19, the extremes
    assert (lo, hi, how) == (-19.0, -1.0, "conformal")
    # n = 10: two sides need k = ceil(11 x 0.95) = 11 > 10; |r| needs k = ceil(9.9) = 10
    lo, hi, how = iv.conformal_bounds([0.1, -0.3, 0.2, 0.05, -0.1, 0.0, 0.15, -0.2, 0.25, 0.1],
                                      0.9)
    assert (lo, hi, how) == (-0.3, 0.3, "conformal |r|")
    # n = 3: |r| needs k = ceil(4 x 0.9) = 4 > 3, no finite conformal rank: +- the largest
    # |r| (the |r| rule's at 75%), said so
    lo, hi, how = iv.conformal_bounds([0.1, -0.1, 0.2], 0.9)
    assert (lo, hi, how) == (-0.2, 0.2, "max |r|")
    assert iv.conformal_bounds([0.1, -0.1, 0.2], 0.75) == (-0.2, 0.2, "conformal |r|")
    assert "largest of 3 |r|" in iv.ranks_of(3, 0.9, how)
    with pytest.raises(ValueError, match="at least one residual"):
        iv.conformal_bounds([], 0.9)
    with pytest.raises(ValueError, match="level must be in"):
        iv.conformal_bounds([0.1], 1.5)


@pytest.mark.parametrize("n", range(1, 41))
def test_conformal_bounds_are_monotone_in_the_level(n):
    """Random residual sets of every size 1-40 (normal, skewed, all of one sign), levels on a
    grid of 0.01 to 0.99: as the level grows the lower bound never rises and the upper never
    falls, across the switches between the two-sided, ``|r|`` and ``max |r|`` rules."""
    rng = np.random.default_rng(n)
    levels = np.round(np.arange(0.01, 0.995, 0.01), 2)
    for values in (rng.normal(0.0, 0.1, n), rng.lognormal(-2.0, 1.0, n) - 0.05,
                   -rng.exponential(0.1, n), rng.standard_t(2, n)):
        got = [iv.conformal_bounds(list(values), float(lv)) for lv in levels]
        lo, hi = np.array([g[0] for g in got]), np.array([g[1] for g in got])
        assert np.all(np.diff(lo) <= 0) and np.all(np.diff(hi) >= 0), (n, values)
        assert np.all(lo <= hi)
        # the highest level: no narrower than the largest residual on each side
        assert lo[-1] <= values.min() and hi[-1] >= values.max()


def test_conformal_holds_its_level_where_the_plain_quantile_does_not():
    """20 rows per category, each judged from the other 19, over 500 draws of normal
    residuals: the conformal rule covers >= 90% on average (its guarantee), the plain
    empirical quantile about 81% ((17.1 - 0.9) / 20 of the order statistics)."""
    rng = np.random.default_rng(7)
    conf, emp = [], []
    for _ in range(500):
        rows = _rows(rng.normal(0.0, 0.1, 20), ["device"] * 20)
        conf.append(cv.coverage(rows, 0.9, "mondrian")[0]["coverage"])
        emp.append(cv.coverage(rows, 0.9, "pooled")[0]["coverage"])
    assert 0.89 <= np.mean(conf) <= 0.95
    assert np.mean(emp) < 0.85


def test_coverage_catches_a_too_narrow_rule():
    rng = np.random.default_rng(1)
    rows = _rows(rng.normal(0.0, 0.1, 400), ["device"] * 400)

    def narrow(res, bound, level, category):  # the central 50% labelled as 90%
        return iv.pooled(res, bound, 0.5, category)

    ok = cv.coverage(rows, 0.9, "mondrian")[0]
    bad = cv.coverage(rows, 0.9, narrow)[0]
    assert 0.87 <= ok["coverage"] <= 0.94 and ok["count_device"] == 400
    assert bad["coverage"] < 0.6 and bad["median_width"] < ok["median_width"]
    with pytest.raises(ValueError, match="unknown interval rule"):
        cv.coverage(rows, 0.9, "nosuch")


def test_mondrian_groups_fix_coverage_per_bound():
    """Host-bound residuals scatter 7x wider than device-bound ones (as on the H200 files):
    one pooled interval is too narrow for host and too wide for device; per bound, both hold."""
    rng = np.random.default_rng(3)
    res = [*rng.normal(0.05, 0.15, 150), *rng.normal(0.0, 0.02, 250)]
    rows = _rows(res, ["host"] * 150 + ["device"] * 250)
    (p,) = cv.coverage(rows, 0.9, "pooled")
    (m,) = cv.coverage(rows, 0.9, "mondrian")
    assert p["coverage_host"] < 0.8 and p["coverage_device"] > 0.97
    assert 0.85 <= m["coverage_host"] <= 0.95 and 0.85 <= m["coverage_device"] <= 0.95
    assert m["median_width_device"] < p["median_width_device"] < m["median_width_host"]
    assert m["groups"] == {"held-out batch, host-bound": 150, "held-out batch, device-bound": 250}
    # a group under MIN_GROUP_ROWS falls back to the whole category
    few = iv.mondrian([(0.1, "host")] * 5 + [(0.0, "device")] * 30, "host", 0.9, "c")
    assert few.group == "c, pooled" and few.n == 35
    own = iv.mondrian([(0.1, "host")] * 20 + [(0.0, "device")] * 30, "host", 0.9, "c")
    assert own.group == "c, host-bound" and own.n == 20
    assert own.low_ratio == 1.0 and own.high_ratio == pytest.approx(math.exp(0.1))
    assert own.describe() == "c, host-bound: 20 rows, conformal"
    assert iv.mondrian([], "host", 0.9, "c") is None


def test_validation_reports_coverage_and_the_table():
    rng = np.random.default_rng(5)
    rows = (_rows(rng.normal(0, 0.1, 60), ["host"] * 30 + ["device"] * 30)
            + _rows(rng.normal(0, 0.3, 40), [None] * 40, "2-GPU from 1-GPU")
            + _rows([0.1, 0.2], ["device"] * 2, "repeat (noise floor)"))
    v = Validation(rows, [])
    cov = {d["category"]: d for d in v.coverage()}
    assert set(cov) == {"held-out batch", "2-GPU from 1-GPU"}  # not the noise floor
    assert cov["2-GPU from 1-GPU"]["coverage_host"] is None
    assert cov["2-GPU from 1-GPU"]["groups"] == {"2-GPU from 1-GPU, pooled": 40}
    t = v.coverage_table()
    assert "90% coverage, Mondrian" in t and "| held-out batch | 60 (30/30) |" in t
    assert v.bounded_residuals("held-out batch")[0][1] == "host"


def test_every_what_if_category_has_its_interval_coverage_judged():
    """Each what-if category of the back-test is a path ``predict`` takes intervals from
    (the framework directions, two changes too), so ``--validate`` prints its coverage; every
    category listed is one the back-test makes."""
    from dlperf import validation
    from dlperf.validation import backtest as bt

    listed = set(iv.INTERVAL_CATEGORIES)
    assert set(bt.WHATIF_CATEGORIES) <= listed <= set(validation.CATEGORIES)
    assert {*whatifs.FRAMEWORK_WHATIFS.values(), whatifs.TWO_CHANGES} <= listed
    assert "repeat (noise floor)" not in listed and "all-reduce >= 1 MiB" not in listed


def _table(tmp_path):
    """A residual table of one fake results file in ``tmp_path``; returns (sources, file)."""
    db = tmp_path / "a.db"
    db.write_bytes(b"results")
    keyed = {"held-out batch": [(0.1, "host", f"{os.path.realpath(db)}:3"), (-0.2, None, None)]}
    return [str(db)], fc.write_table([str(db)], keyed), keyed


def test_the_residual_table_reads_back_what_was_written(tmp_path):
    sources, f, keyed = _table(tmp_path)
    assert f == tmp_path / fc.TABLE_NAME
    assert json.loads(f.read_text())["a.db"]["categories"]["held-out batch"][0][2] == "a.db:3"
    assert fc.read_table(sources) == (keyed, "")
    (tmp_path / "a.db").write_bytes(b"other results")  # other data: not this table's
    table, why = fc.read_table(sources)
    assert table is None and "other content" in why


@pytest.mark.parametrize("bad", [1e308, float("nan"), "0.1", True, [0.1]])
def test_the_residual_table_refuses_a_value_it_cannot_trust(tmp_path, bad):
    sources, f, _ = _table(tmp_path)
    raw = json.loads(f.read_text())
    raw["a.db"]["categories"]["held-out batch"][0][0] = bad
    f.write_text(json.dumps(raw))
    table, why = fc.read_table(sources)
    assert table is None and "not valid" in why


def test_the_residual_table_of_other_model_code_or_none_is_no_table(tmp_path, monkeypatch):
    sources, f, _ = _table(tmp_path)
    raw = json.loads(f.read_text())
    raw["a.db"]["categories"]["held-out batch"][1][1] = "sideways"
    f.write_text(json.dumps(raw))
    assert "not valid" in fc.read_table(sources)[1]
    raw["a.db"]["model_key"] = "0" * 20
    f.write_text(json.dumps(raw))
    assert "other performance-model code" in fc.read_table(sources)[1]
    f.write_text("not json")
    assert "cannot be read" in fc.read_table(sources)[1]
    f.unlink()
    assert fc.read_table(sources) == (None, f"no residual table {f}")


def test_a_narrower_validate_keeps_the_tables_other_solutions(tmp_path):
    """Fit solutions are keyed by their problem: writing the entry again on the same model and
    data keeps the stored ones beside the new (a `--validate` of one folder after the committed
    run of two must not drop the other folder's fits); other data starts afresh."""
    db = tmp_path / "a.db"
    db.write_bytes(b"results")
    keyed = {"held-out batch": [(0.1, "host", None)]}
    fc.write_table([str(db)], keyed, solutions={"p1": (1.0, 2.0), "p2": (3.0,)})
    f = fc.write_table([str(db)], keyed, solutions={"p2": (4.0,)})
    sol = json.loads(f.read_text())["a.db"]["solutions"]
    assert sol == {"p1": [1.0, 2.0], "p2": [4.0]}
    db.write_bytes(b"other results")
    sol = json.loads(fc.write_table([str(db)], keyed, solutions={"p3": (5.0,)})
                     .read_text())["a.db"]["solutions"]
    assert sol == {"p3": [5.0]}


def test_a_planted_link_is_replaced_not_written_through(tmp_path):
    """The table is written to a fresh, exclusively created temporary file of an unpredictable
    name and renamed over the target: a symbolic link planted at the target is replaced, the
    file it points to is left as it was, and no temporary file is left."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    db = tmp_path / "a.db"
    db.write_bytes(b"results")
    (tmp_path / fc.TABLE_NAME).symlink_to(victim)
    f = fc.write_table([str(db)], {"held-out batch": [(0.1, "host", None)]})
    assert victim.read_text() == "keep me" and not f.is_symlink()
    assert fc.read_table([str(db)])[0] == {"held-out batch": [(0.1, "host", None)]}
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_interval_leaves_out_the_predicted_points_own_residual(monkeypatch):
    """A small category (12 rows) where one row's residual is an outlier (x 12): the interval
    of a prediction of that row's point does not reach it; of any other point, it does."""
    rng = np.random.default_rng(2)
    rows = _rows([*rng.normal(0, 0.05, 11), math.log(12.0)], ["device"] * 12, "input")
    x = os.path.realpath("x.db")  # points are named by their file's resolved path
    for i, r in enumerate(rows):
        r.point = f"{x}:{i + 1}"
    keyed = cv.keyed_residuals_of(rows, "input")
    assert keyed[-1][2] == f"{x}:12" and len(keyed) == 12
    monkeypatch.setattr(ic, "_keyed_residuals", lambda recs, cat: keyed)

    class P:
        source, result_id = "x.db", 12

    own = ic._interval(None, "input", 0.9, "device", [P()])
    other = ic._interval(None, "input", 0.9, "device", [])
    assert own.n == 11 and own.high_ratio < 2.0  # the x 12 residual is gone
    assert other.n == 12 and other.high_ratio == pytest.approx(12.0)
    assert ic.bounded_residuals(None, "input", {f"{x}:12"}) == [(r, b) for r, b, _ in
                                                                 keyed[:-1]]


def test_stored_input_point_interval_does_not_end_at_its_own_measurement(tmp_path, monkeypatch):
    """The committed JAX imagefolder w=8 point (grain, measured mean 616 ms, the input
    category's worst residual): its interval used to end exactly at 616.085 ms."""
    from dlperf import validation

    monkeypatch.setenv("DLPERF_CACHE_DIR", str(tmp_path))
    validation.validate("benchmarks/results/h200/mfu_inputs.db")  # its residuals, in memory
    p = api.predict("benchmarks/results/h200/mfu_inputs.db", "resnet50", framework="jax",
                    data="imagefolder", loader_workers=8, batch_size=128)
    assert p.measured_step_time_s == pytest.approx(0.616085, rel=1e-4)
    assert p.interval_s[1] < 0.5 * p.measured_step_time_s
    assert p.interval_group is not None and "11 rows" in p.interval_group


def _imported(source):
    """Every name an import statement of ``source`` imports, dotted in full, read as
    :func:`~dlperf.perfmodel.fitcache.prediction_modules` reads it (at any indentation)."""
    names = []
    for m in fc._IMPORT_LINE.finditer(source):
        names += ([f"{m['from']}.{n}" for n in fc._first_words(m["names"])]
                  if m["from"] is not None else fc._first_words(m["modules"]))
    return names


def test_the_model_key_covers_what_a_prediction_imports_and_not_the_back_test():
    """The modules :func:`~dlperf.perfmodel.fitcache.model_key` hashes are the prediction's
    import chain, and none of them imports anything of :mod:`dlperf.validation` (at module
    level or in a function): an edit of the back-test changes no key, and a prediction never
    loads it."""
    mods = fc.prediction_modules()
    assert {"api", "equations", "onedevice", "roofline", "intervals", "fitcache"} <= mods
    imported = {n for name in mods for n in _imported(fc.module_file(name).read_text())}
    assert "dlperf.perfmodel.fitcache" in imported  # the scan reads api's imports
    assert not {n for n in imported if n.split(".")[:2] == ["dlperf", "validation"]}
    # the reading finds the back-test however it is imported
    assert _imported("from dlperf import validation\n") == ["dlperf.validation"]
    assert _imported("    import dlperf.validation.backtest as b\n") == [
        "dlperf.validation.backtest"]
    assert _imported("from dlperf.validation.backtest import (\n    Row,  # x\n    WHATIFS)\n") \
        == ["dlperf.validation.backtest.Row", "dlperf.validation.backtest.WHATIFS"]


def test_leave_one_model_out_coverage_leaves_the_models_rows_out():
    """Two models whose residuals sit apart (each model's error is shared by its points): a
    row judged leave-one-point-out has its model's other rows in its interval and is covered;
    judged leave-one-model-out, only the other model's rows, which do not reach it."""
    rows = _rows([0.30] * 20 + [-0.30] * 20, ["device"] * 40)
    for i, r in enumerate(rows):
        r.model = "a" if i < 20 else "b"
    point = cv.coverage(rows, 0.9, holdout="point")[0]
    model = cv.coverage(rows, 0.9, holdout="model")[0]
    assert point["coverage"] == 1.0 and model["coverage"] == 0.0
    for r in rows:  # one model holds every row: each row is judged leave-one-point-out
        r.model = "a"
    assert cv.coverage(rows, 0.9, holdout="model")[0]["coverage"] == point["coverage"]
    with pytest.raises(ValueError, match="unknown holdout"):
        cv.coverage(rows, 0.9, holdout="nosuch")


def test_a_small_category_is_pooled_with_the_same_quantitys_rows():
    """``N-GPU via predict --nproc`` (6 rows: no conformal interval of its own) takes its
    interval from its rows and the 2-GPU-from-1-GPU rows (:data:`POOLED_WITH`), which are not
    judged as its rows."""
    cat, sib = "N-GPU via predict --nproc", "2-GPU from 1-GPU"
    assert iv.calibration_categories(cat) == (cat, sib)
    assert iv.calibration_categories("held-out batch") == ("held-out batch",)
    rows = _rows([0.01, -0.02, 0.03, 0.0, -0.01, 0.21], [None] * 6, cat) + \
        _rows([0.2, -0.2, 0.22, -0.22, 0.18, -0.18, 0.21, -0.21, 0.19, -0.19], [None] * 10, sib)
    (alone,) = cv.coverage([r for r in rows if r.category == cat], 0.9, categories=(cat,))
    (pooled,) = cv.coverage(rows, 0.9, categories=(cat,))
    assert alone["count"] == pooled["count"] == 6
    assert alone["coverage"] < 1.0 == pooled["coverage"]  # the 0.21 row: in only when pooled
    assert pooled["groups"] == {f"{cat}, pooled": 6}


def test_widened_scales_both_sides_and_refuses_a_negative_error():
    ivl = iv.Interval(0.9, 1.2, "g", 30, "conformal")
    w = iv.widened(ivl, 0.05)
    assert w.low_ratio == pytest.approx(0.9 / 1.05) and w.high_ratio == pytest.approx(1.26)
    assert (w.group, w.n, w.method) == ("g", 30, "conformal")
    with pytest.raises(ValueError, match=">= 0"):
        iv.widened(ivl, -0.1)


def test_a_borrowed_interval_is_widened_for_another_gpu_or_says_why_not():
    ivl = iv.Interval(0.9, 1.2, "held-out batch, host-bound", 30, "conformal")
    h100, h200 = iv.CROSS_GPU_MEASURED[1], iv.CROSS_GPU_MEASURED[0]
    same, words = iv.cross_gpu(ivl, h200, frozenset({h200, "Intel(R) Xeon(R) Processor"}))
    assert same == ivl and f"measured on this device ({h200})" in words
    other, words = iv.cross_gpu(ivl, h100, frozenset({h200}))
    assert other.high_ratio == pytest.approx(1.2 * (1 + iv.CROSS_GPU_ERROR))
    assert f"widened by 4.8% for {h100} from {h200}" in words and "only" not in words
    a100, words = iv.cross_gpu(ivl, "NVIDIA A100", frozenset({h200}))
    assert a100 == other and "measured between NVIDIA H200 and" in words
    unknown, words = iv.cross_gpu(ivl, h100, frozenset())
    assert unknown == ivl and "not widened" in words


def test_the_table_entry_names_its_fits_gpus():
    entry = {"fits": [[[["torch", "eager", "bf16", "cuda"], "m", "NVIDIA H200", False], {}],
                      [[["torch", "eager", "fp32", "cuda"], None, "NVIDIA H200", True], None],
                      ["damaged"]]}
    assert fc._fit_devices(entry) == frozenset({"NVIDIA H200"})
    assert fc._fit_devices({}) == frozenset()
