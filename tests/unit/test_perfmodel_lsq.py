"""The series fit's solver (:mod:`dlperf.perfmodel.lsq`) is scipy's ``least_squares`` (TRF,
``x_scale="jac"``, no bounds) to the last bit, on the series fit's own residuals and on a
generic problem; a solved fit is kept by problem and read back from a store."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import least_squares

from dlperf.perfmodel import api, lsq
from dlperf.perfmodel import fitcache as fc
from dlperf.perfmodel import onedevice as od
from dlperf.perfmodel.equations import SMOOTH_P, overlap

H200 = ["benchmarks/results/h200", "benchmarks/results/h200x2"]


def _problems():
    """Series-fit problems of several shapes: anchors or none, host probes (exact and
    one-sided), a fixed prior, and starts inside and outside the clipped range."""
    rng = np.random.default_rng(7)
    out = []
    for k in range(40):
        n = 1 + k % 5
        b = np.sort(rng.choice([8, 16, 32, 64, 128, 256], size=n, replace=True)).astype(float)
        t = 0.004 + 2e-4 * b * rng.uniform(0.5, 2.0) + rng.uniform(0, 0.002)
        w = 1.0 / rng.uniform(0.02, 0.06, size=n)
        anchors = tuple(od.Anchor(int(x), 1.5e-4 * x, 0.05, "a") for x in b[: k % 3])
        prior = od.NO_PRIOR if k % 7 == 0 else od.DevicePrior(
            2e-4 if k % 2 else None, 0.5, anchors, "p", 0.003 if k % 4 == 1 else None, 0.3, "",
            0.001 if k % 3 == 0 else None)
        hosts = [(0.003, bool(k % 2)), (0.0035, False)][: k % 3]
        fixed = 0.001 if k % 5 == 2 else None
        p = od._SeriesProblem(b, t, w, prior, fixed, hosts, float(t.min()))
        x0 = np.log([t.min() * 0.9, t.min() * 0.05, 1e-4])
        out.append((p, x0 + (0.0 if k % 8 else 75.0)))  # some starts clipped at 10
    return out


def _reference_resid(p, x):
    """The residuals as scipy was given them before the solver was replaced."""
    u = np.clip(x, -60.0, 10.0)
    h, d0, d1 = np.exp(u)
    data = (np.log(overlap(h, d0 + d1 * p.b)) - p.lt) * p.w
    lin = (u[p.lin_i] - p.lin_c) / p.lin_s
    anchor = (np.log(d0 + d1 * p.ab) - p.ad) / p.asg
    over = np.maximum(0.0, u[0] - p.ub_c) * np.where(p.ub_sign < 0, -1.0, 1.0)
    return np.concatenate([data, lin, anchor, over / p.ub_s])


def _reference_jac(p, x):
    u = np.clip(x, -60.0, 10.0)
    h, d0, d1 = np.exp(u)
    inside = ((x >= -60.0) & (x <= 10.0)).astype(float)
    d = d0 + d1 * p.b
    m = np.maximum(np.maximum(h, d), 1e-300)
    hp, dp = (h / m) ** SMOOTH_P, (d / m) ** SMOOTH_P
    sh, sd = hp / (hp + dp), dp / (hp + dp)
    data = np.stack([sh, sd * d0 / d, sd * d1 * p.b / d], axis=1) * p.w[:, None]
    lin = np.zeros((len(p.lin_i), 3))
    lin[np.arange(len(p.lin_i)), p.lin_i] = 1.0 / p.lin_s
    da = d0 + d1 * p.ab
    anchor = np.stack([np.zeros_like(da), d0 / da, d1 * p.ab / da], axis=1) / p.asg[:, None]
    over = np.zeros((len(p.ub_c), 3))
    over[:, 0] = np.where(u[0] > p.ub_c, np.where(p.ub_sign < 0, -1.0, 1.0), 0.0) / p.ub_s
    return np.concatenate([data, lin, anchor, over]) * inside[None, :]


def test_the_series_residuals_and_jacobian_are_the_reference_ones():
    for p, x0 in _problems():
        for x in (x0, x0 + [0.3, -2.0, 1.0], np.array([12.0, -70.0, -3.0])):
            assert np.array_equal(p.resid(x), _reference_resid(p, x))
            assert np.array_equal(p.jac(x), _reference_jac(p, x))


def test_trf_is_scipys_least_squares_to_the_bit():
    for p, x0 in _problems():
        for start in (x0, x0 + np.log([0.3, 1.0, 1.0]), x0 + np.log([1.0, 0.2, 1.0])):
            ref = least_squares(lambda x, p=p: _reference_resid(p, x), start,
                                jac=lambda x, p=p: _reference_jac(p, x), method="trf",
                                x_scale="jac", max_nfev=300)
            x, cost = lsq.trf(p.resid, p.jac, start, max_nfev=300)
            assert np.array_equal(x, ref.x) and cost == ref.cost


def test_trf_on_a_generic_problem_and_its_refusals():
    t = np.linspace(0, 3, 12)
    y = 2.5 * np.exp(-1.3 * t) + 0.1 * np.sin(7 * t)

    def f(x):
        return x[0] * np.exp(-x[1] * t) - y

    def j(x):
        return np.stack([np.exp(-x[1] * t), -x[0] * t * np.exp(-x[1] * t)], axis=1)

    for x0, nfev in (([1.0, 1.0], None), ([10.0, 0.01], 5), ([0.0, 0.0], 100)):
        ref = least_squares(f, x0, jac=j, method="trf", x_scale="jac", max_nfev=nfev)
        x, cost = lsq.trf(f, j, np.array(x0), max_nfev=nfev)
        assert np.array_equal(x, ref.x) and cost == ref.cost
    with pytest.raises(ValueError, match="not finite in the initial point"):
        lsq.trf(lambda x: np.array([np.nan, 1.0]), j, np.array([1.0, 1.0]))


def test_a_series_fit_is_solved_once_per_problem(monkeypatch):
    monkeypatch.setattr(lsq, "SOLVED", {})
    monkeypatch.setattr(lsq, "_SOLVED_HERE", set())
    calls = []
    real = lsq.trf
    monkeypatch.setattr(lsq, "trf", lambda *a, **k: calls.append(1) or real(*a, **k))
    p, x0 = _problems()[3]
    with lsq.tracked() as keys:
        a = od._solved(p, x0)
        b = od._solved(p, x0)
    assert a == b and len(calls) == 3 and keys == {p.key(x0)}  # three starts, once
    assert p.key(x0) != p.key(x0 + 1e-12)  # another start is another problem
    assert lsq.take_solved() == {p.key(x0): a} and lsq.take_solved() == {}


def test_stored_solutions_are_read_back_checked(tmp_path, monkeypatch):
    monkeypatch.setenv("DLPERF_CACHE_DIR", str(tmp_path))
    f = tmp_path / "s.json"
    fc.write_solutions(f, {"a" * 32: (0.5, -3.0, -9.25), "b" * 32: (1.0, 2.0)})
    assert fc.read_solutions(f) == {"a" * 32: (0.5, -3.0, -9.25), "b" * 32: (1.0, 2.0)}
    bad = {"k1": [], "k2": [1.0, math.inf, 0.0], "k3": [True, 0.0, 0.0],
           "k4": [1e9, 0.0, 0.0], "k5": "x", "k6": [0.25, 0.5, -1.0], "k7": [0.0] * 9}
    assert fc._solutions_of(bad) == {"k6": (0.25, 0.5, -1.0)}


def test_the_committed_table_holds_the_fits_of_a_prediction(tmp_path, monkeypatch):
    """A prediction from the committed H200 table of a batch not stored solves no series fit:
    the table holds them (``dlperf predict --validate`` primes them)."""
    monkeypatch.setenv("DLPERF_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(lsq, "SOLVED", {})
    monkeypatch.setattr(lsq, "_SOLVED_HERE", set())
    monkeypatch.setattr(api, "_SHARED", {})
    monkeypatch.setattr(api, "_RECORDS", {})
    monkeypatch.setattr(lsq, "trf", lambda *a, **k: pytest.fail("a series fit was solved"))
    import scipy.optimize

    monkeypatch.setattr(scipy.optimize, "least_squares",
                        lambda *a, **k: pytest.fail("a DDP or group fit was solved"))
    p = api.predict(H200, "resnet50", "torch", "eager", "bf16", "cuda", batch_size=96,
                    data="synthetic", layout="auto")
    assert p.how == "series" and p.interval_group is not None
    p2 = api.predict(H200, "resnet50", "torch", "eager", "bf16", "cuda", batch_size=192,
                     nproc=2, data="synthetic", layout="auto")
    assert p2.provenance["DDP overhead rho, kappa"].startswith("measured")


@pytest.mark.parametrize("what_if", [{"framework": "jax"}, {"mode": "graph"},
                                     {"mode": "graph", "precision": "fp32"}])
def test_a_what_if_from_the_committed_table_fits_no_group(tmp_path, monkeypatch, what_if):
    """A first what-if on the committed H200 files with an empty cache reads every roofline
    group fit it needs (the base's pairs', each without its model) from the committed table:
    its calibration withholds the target's points, which no such fit reads
    (:meth:`Calibration._shares`), so none is fitted again (each is 0.3-0.6 s)."""
    from dlperf.perfmodel import calibrate

    monkeypatch.setenv("DLPERF_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(lsq, "SOLVED", {})
    monkeypatch.setattr(lsq, "_SOLVED_HERE", set())
    monkeypatch.setattr(api, "_SHARED", {})
    monkeypatch.setattr(api, "_RECORDS", {})
    monkeypatch.setattr(od, "GROUP_SOLVED", {})
    fitted = []
    real = calibrate.Calibration._fit_group
    monkeypatch.setattr(calibrate.Calibration, "_fit_group",
                        lambda self, *a: fitted.append(a) or real(self, *a))
    monkeypatch.setattr(lsq, "trf", lambda *a, **k: pytest.fail("a series fit was solved"))
    # vgg16's jax xla and torch graph are stored at b=128 alone: what-ifs from a torch eager
    # series, not the target's own
    p = api.predict(H200, "vgg16", "torch", "eager", "bf16", "cuda", batch_size=128,
                    data="synthetic", layout="auto", what_if=what_if)
    pairs = p.explanation["what-if"]["pairs"]
    assert p.how == "what-if" and pairs["host"] + pairs["device"]  # other models' pairs
    assert fitted == []


def test_a_group_fit_is_shared_only_where_it_reads_no_withheld_point(tmp_path, monkeypatch):
    """:meth:`Calibration._shares`: a calibration withholding a point of another model in a
    group (or in its base mode, whose points a compile mode's fit reads) keeps that group's
    fits without other models to itself; withholding points elsewhere, its fit is the shared
    one, to the bit."""
    from dlperf.perfmodel import special
    from dlperf.perfmodel.calibrate import Calibration, Config

    monkeypatch.setenv("DLPERF_CACHE_DIR", str(tmp_path))
    recs = api.records_of(H200)
    eager = ("torch", "eager", "bf16", "cuda")
    graph, jax = ("torch", "graph", "bf16", "cuda"), ("jax", "xla", "bf16", "cuda")
    replay = ("torch", special.mode_key("graph", "reduce-overhead"), "bf16", "cuda")
    cal = Calibration(recs, lambda p: p.model == "resnet50" and p.group == graph)
    assert cal._shares(eager, "fcn5") and cal._shares(jax, "fcn5")
    assert cal._shares(graph, "resnet50") and cal._shares(replay, "resnet50")
    assert not cal._shares(graph, "fcn5") and not cal._shares(replay, "fcn5")
    assert Calibration(recs)._shares(graph, "fcn5")
    dn = cal.device_name(Config("fcn5", *eager))
    monkeypatch.setattr(od, "GROUP_SOLVED", {})
    assert cal._fit_group(eager, "fcn5", dn, True) == Calibration(recs)._fit_group(
        eager, "fcn5", dn, True)
    assert cal._fit_group(graph, "fcn5", dn, True) != Calibration(recs)._fit_group(
        graph, "fcn5", dn, True)
