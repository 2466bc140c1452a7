"""The performance model's fits recover known parameters from synthetic stored results.

Results are written with the store itself (``ResultStore.add``) for the fake framework with
step times made by the model's own equations from chosen parameters, read back through the one
loader (:func:`dlperf.perfmodel.records.load`), and fitted.
"""

import math

import numpy as np
import pytest

from dlperf.perfmodel import comm, special
from dlperf.perfmodel import dataparallel as dp
from dlperf.perfmodel import onedevice as od
from dlperf.perfmodel import roofline as rl
from dlperf.perfmodel.calibrate import Calibration, Config
from dlperf.perfmodel.records import CollectivePoint, load
from dlperf.results.store import ResultStore

P_FLOPS, BW = 100e12, 2e12  # the synthetic device's ceilings
E_F, E_Y = 0.6, 0.5         # the true efficiencies


def _result(model, batch, step_s, *, f1, y0, y1, params=10_000_000, precision="bf16",
            world=1, per_device=None, host_probe=70.0, busy_s=None, rid=0):
    per_device = per_device or batch
    res = {
        "run_key": f"{model}-{precision}-{batch}-{world}-{rid}", "status": "ok",
        "model": model, "framework": "fake", "mode": "eager", "device": "cuda",
        "device_name": "Fake GPU", "precision": precision, "batch_size": batch,
        "grad_accum": 1, "data": "synthetic", "threads": None,
        "world_size": world, "nnodes": 1, "per_device_batch": per_device,
        "summary": {"median": step_s, "ci_low": step_s * 0.995, "ci_high": step_s * 1.005},
        "spec": {"params": params, "train_flops_per_sample": f1},
        "flops": {"bytes_per_step": y0 + y1 * per_device},
        "ceilings": {"matmul_flops_per_s": {precision: P_FLOPS}, "bandwidth_bytes_per_s": BW},
        "config": {"layout": "auto", "breakdown": busy_s is not None},
        "env": {"hostname": "h", "host_speed": {"python_loop_ns": host_probe}},
    }
    if busy_s is not None:
        res["trace"] = {"available": True, "busy_s": busy_s}
    return res


def _device(f1, y0, y1, b):
    return f1 * b / (E_F * P_FLOPS) + (y0 + y1 * b) / (E_Y * BW)


MODELS = {  # name: (flops/sample, fixed bytes, bytes/sample, host s)
    "m_compute": (2e9, 1e8, 2e6, 2e-3),
    "m_memory": (2e8, 5e8, 2e7, 1e-3),
    "m_host": (5e8, 1e8, 5e6, 8e-3),
}
BATCHES = (8, 32, 128, 512, 2048)


@pytest.fixture(scope="module")
def synthetic_db(tmp_path_factory):
    path = tmp_path_factory.mktemp("pm") / "synthetic.db"
    with ResultStore(path) as store:
        for name, (f1, y0, y1, h) in MODELS.items():
            for b in BATCHES:
                t = float(od.overlap(h, _device(f1, y0, y1, b)))
                store.add(_result(name, b, t, f1=f1, y0=y0, y1=y1))
    return path


def test_loader_reads_what_the_model_needs(synthetic_db):
    recs = load(synthetic_db)
    assert len(recs.points) == len(MODELS) * len(BATCHES)
    p = next(p for p in recs.points if p.model == "m_host" and p.batch_size == 32)
    f1, y0, y1, h = MODELS["m_host"]
    assert p.step_time_s == pytest.approx(float(od.overlap(h, _device(f1, y0, y1, 32))))
    assert p.bytes_per_step == pytest.approx(y0 + y1 * 32)
    assert p.matmul_flops_per_s == {"bf16": P_FLOPS}
    assert p.host_speed_ns == (70.0, None)
    assert p.ci_rel == pytest.approx(0.005)


def test_series_fit_recovers_host_and_device_line(synthetic_db):
    recs = load(synthetic_db)
    for name, (f1, y0, y1, h) in MODELS.items():
        pts = sorted((p for p in recs.points if p.model == name), key=lambda p: p.batch_size)
        fit = od.fit_series(pts, None)
        assert fit.rms_log < 1e-3, name
        assert fit.device_per_sample_s == pytest.approx(f1 / (E_F * P_FLOPS) + y1 / (E_Y * BW),
                                                        rel=0.02), name
        if h > fit.device_s(BATCHES[0]):  # the host time is shown by the smallest batch
            assert fit.host_s == pytest.approx(h, rel=0.02), name
        # between and beyond the fitted batch sizes
        for b in (64, 4096):
            assert fit.step_time_s(b) == pytest.approx(
                float(od.overlap(h, _device(f1, y0, y1, b))), rel=0.01), (name, b)


def test_roofline_fit_recovers_efficiencies(synthetic_db):
    recs = load(synthetic_db)
    cal = Calibration(recs)
    eff = cal.efficiency(("fake", "eager", "bf16", "cuda"), None, "Fake GPU")
    assert eff.e_flops == pytest.approx(E_F, rel=0.03)
    assert eff.e_bytes == pytest.approx(E_Y, rel=0.03)
    assert set(eff.models) == set(MODELS)
    # the work model is the line through the stored byte counts
    w = cal.work("m_memory", "fake", "bf16", "cuda")
    assert (w.bytes_fixed, w.bytes_per_sample) == pytest.approx((5e8, 2e7), rel=1e-6)
    # host floor: the smallest host time a series shows
    floor, low, models = eff.host_floor()
    assert floor == pytest.approx(MODELS["m_memory"][3], rel=0.05)
    assert low == "m_memory" and set(models) == set(MODELS)


def test_roofline_without_a_model_predicts_it(synthetic_db):
    from dlperf.perfmodel import model as pm

    recs = load(synthetic_db)
    cal = Calibration(recs, exclude=lambda p: p.model == "m_compute")
    one = pm.analytic(cal, Config("m_compute", "fake", "eager", "bf16"), 2048)
    f1, y0, y1, _ = MODELS["m_compute"]
    assert one.device_s == pytest.approx(_device(f1, y0, y1, 2048), rel=0.03)
    own = {f"{p.source}:{p.result_id}" for p in recs.points if p.model == "m_compute"}
    assert one.calibrated_on and not own & set(one.calibrated_on)
    assert one.how == "analytic"
    # no operator count: the host is the group's floor, and the provenance names whose it is
    # (m_memory's 1 ms, the smaller of the two other hosts), not only the models it was among
    assert one.host_s == pytest.approx(MODELS["m_memory"][3], rel=0.05)
    assert "m_memory's host time, the smallest identified in" in one.provenance["host time H"]


def test_allreduce_regimes_recovered():
    # latency floor 20 us below 1 MiB, then 10 us + M / 200 GB/s
    sizes = [2 ** k for k in range(10, 31)]
    def t(m):
        return 20e-6 if m < 2 ** 20 else 10e-6 + m / 200e9
    pts = [CollectivePoint("x", "r", "allreduce", 2, m, t(m), None, None) for m in sizes]
    fit = comm.fit_allreduce(pts, 2)
    for m in (3 * 2 ** 22, 2 ** 29, 2 ** 12):
        assert fit.time_s(m) == pytest.approx(t(m), rel=0.01)
    assert fit.large.b_s_per_byte == pytest.approx(1 / 200e9, rel=0.01)
    link = comm.measured_link(fit)
    assert link.measured and comm.ring_allreduce_s(2 ** 29, 2, link) == pytest.approx(
        fit.time_s(2 ** 29), rel=0.01)
    with pytest.raises(ValueError, match="sizes stored for 4 ranks"):
        comm.fit_allreduce(pts, 4)


def test_allreduce_algorithms_by_hand():
    link = comm.Link("l", 1e-6, 1e-9, "test")
    # ring, 4 ranks, 1 MB: 2*3*1us + 2*3/4*1e6*1ns = 6us + 1.5ms
    assert comm.ring_allreduce_s(1e6, 4, link) == pytest.approx(6e-6 + 1.5e-3)
    # tree, 8 ranks: 2*3*1us + 2*1e6*1ns
    assert comm.tree_allreduce_s(1e6, 8, link) == pytest.approx(6e-6 + 2e-3)
    fast = comm.Link("nv", 1e-6, 1e-11, "test")
    # hierarchical 4 GPUs x 2 nodes: intra RS+AG 2*(3us + 3/4*1e6*1e-11) + ring over 2 nodes of 250 kB
    want = 2 * (3e-6 + 0.75e6 * 1e-11) + (2 * 1e-6 + 1.0 * 0.25e6 * 1e-9)
    assert comm.hierarchical_allreduce_s(1e6, 4, 2, fast, link) == pytest.approx(want)
    t, name = comm.allreduce_s(1e8, 4, 2, fast, link)
    assert name == "hierarchical" and t < comm.ring_allreduce_s(1e8, 8, link)
    with pytest.raises(ValueError, match="inter-node link"):
        comm.allreduce_s(1e6, 4, 2, fast, None)


def test_wfbp_recursion_by_hand():
    # buckets ready at 1, 2, 3 ms, each taking 1.5 ms: starts 1, 2.5, 4; ends at 5.5 ms
    bks = [comm.Bucket(1, 1e-3), comm.Bucket(1, 2e-3), comm.Bucket(1, 3e-3)]
    exposed, total = comm.wfbp_exposed_s(bks, lambda m: 1.5e-3, backward_s=3e-3)
    assert exposed == pytest.approx(2.5e-3) and total == pytest.approx(4.5e-3)
    # communication faster than backward: only the last bucket shows
    exposed, _ = comm.wfbp_exposed_s(bks, lambda m: 0.2e-3, backward_s=3e-3)
    assert exposed == pytest.approx(0.2e-3)
    b = comm.uniform_buckets(60 * 2 ** 20, 6e-3, bucket_cap_mb=25)
    assert [x.size_bytes / 2 ** 20 for x in b] == [1, 25, 25, 9]
    assert b[-1].ready_s == pytest.approx(6e-3)


def test_ddp_overhead_recovered():
    rho, kappa = 0.3, 0.05
    pairs = []
    for i, (h, d) in enumerate([(20e-3, 10e-3), (5e-3, 30e-3), (12e-3, 12e-3), (3e-3, 3e-3)]):
        base = float(od.overlap(h, d))
        x = 1e-4 * (i + 1)
        t2 = float(od.overlap(h * (1 + rho), d + kappa * h + x))
        dp_pt = type("P", (), {"step_time_s": t2, "source": "s", "result_id": i})()
        pairs.append(dp.Pair(dp_pt, None, None, h, d, x, x, base))
    fit = dp.fit_ddp_overhead(pairs)
    assert fit.rho == pytest.approx(rho, rel=0.02) and fit.kappa == pytest.approx(kappa, rel=0.05)
    assert fit.rms_log < 1e-6
    with pytest.raises(ValueError, match="no stored N-device point"):
        dp.fit_ddp_overhead([])


def test_overlap_limits():
    assert float(od.overlap(3.0, 1e-9)) == pytest.approx(3.0)
    assert float(od.overlap(2.0, 2.0)) == pytest.approx(2.0 * 2 ** (1 / 8))
    assert math.isfinite(float(od.overlap(1e300, 1e300)))
    assert np.allclose(od.overlap(np.array([1.0, 5.0]), np.array([5.0, 1.0])), 5.0, rtol=1e-3)


def test_work_of_one_batch_size_and_refusals():
    recs_pts = []
    with pytest.raises(ValueError, match="no FLOP count"):
        rl.work_of(recs_pts, "nosuch", "fake", "bf16", "cuda")
    w = rl.work_of(recs_pts, "nosuch", "fake", "bf16", "cuda", flops_per_sample=1e9)
    assert w.bytes(100) == 0 and w.flops(100) == 1e11


def test_the_byte_line_reads_counts_of_its_own_device_kind(tmp_path):
    """A byte count is the device's (the ATen operators, the XLA program it ran): a GPU's
    roofline draws its line through the GPU runs' counts alone, and a CPU run of the same
    model, framework and precision at another batch size neither bends it nor, where the GPU
    stored one batch size only, turns it into a line through two devices' counts. The FLOPs
    (analytic) are the same on both."""
    f1, params = 2e8, 10_000_000
    path = tmp_path / "mixed.db"
    with ResultStore(path) as s:
        for rid, b in enumerate((8, 32)):
            s.add(_result("m", b, 1e-2, f1=f1, y0=5e8, y1=2e7, params=params, rid=rid))
        for rid, b in enumerate((16, 64), start=2):
            cpu = _result("m", b, 1.0, f1=f1, y0=9e8, y1=6e7, params=params, rid=rid)
            s.add({**cpu, "device": "cpu", "device_name": "Fake CPU"})
    recs = load(path)
    gpu = rl.work_of(recs.points, "m", "fake", "bf16", "cuda")
    assert (gpu.bytes_fixed, gpu.bytes_per_sample) == pytest.approx((5e8, 2e7), rel=1e-6)
    assert gpu.source == "bytes: line through 2 stored batch sizes"
    cpu = Calibration(recs).work("m", "fake", "bf16", "cpu")
    assert (cpu.bytes_fixed, cpu.bytes_per_sample) == pytest.approx((9e8, 6e7), rel=1e-6)
    assert gpu.flops(64) == cpu.flops(64) == f1 * 64
    one = rl.work_of([p for p in recs.points if p.device == "cpu" or p.batch_size == 8],
                     "m", "fake", "bf16", "cuda")
    assert one.source.startswith("bytes: one stored batch size (8)")
    assert one.bytes(8) == pytest.approx(5e8 + 2e7 * 8, rel=1e-6)


def test_measured_host_dispatch_pins_the_host_time_of_a_flat_series(tmp_path):
    """Two host-bound batch sizes alone cannot tell H from the device line; the untraced host
    dispatch (record ``host``, schema 9) pins H, and an upper-bound probe (no wait after the
    host returned) never pushes H above it."""
    f1, y0, y1, h_true = 5e8, 1e8, 5e6, 8e-3
    path = tmp_path / "host.db"
    with ResultStore(path) as s:
        for rid, b in enumerate((8, 32)):
            d = _device(f1, y0, y1, b)
            t = float(od.overlap(h_true, d))
            res = _result("m_flat", b, t, f1=f1, y0=y0, y1=y1, rid=rid)
            # the probe: host returned after 0.97 H (idle device), then waited for the device
            res["host"] = {"dispatch_s": {"median": 0.97 * h_true},
                           "sync_wait_s": {"median": 0.2 * h_true}}
            s.add(res)
    pts = load(path).points
    assert [p.host_dispatch_s for p in pts] == pytest.approx([0.97 * h_true] * 2)
    fit = od.fit_series(pts, None)
    assert fit.host_s == pytest.approx(0.97 * h_true, rel=0.03)
    assert "host dispatch measured at 2 point(s)" in fit.prior
    assert od.host_measurements(pts) == [(pytest.approx(0.97 * h_true), True)] * 2
    # A probe whose host never waited is an upper bound: H may lie below it, never above.
    upper = [p.__class__(**{**p.__dict__, "host_sync_wait_s": 0.0,
                            "host_dispatch_s": 0.5 * h_true}) for p in pts]
    assert od.host_measurements(upper)[0][1] is False
    assert od.fit_series(upper, None).host_s <= 0.5 * h_true * 1.02


def test_leave_one_model_out_host_is_the_per_operator_cost_times_its_operators(tmp_path):
    """Host-bound series whose host time is 30 us per dispatched operator (record
    ``flops.ops_per_step``): a model withheld gets 30 us x its own operator count (a count, not
    a time), not the group's smallest host time."""
    c = 30e-6
    ops = {"m_a": 100, "m_b": 200, "m_c": 400, "m_target": 800}
    path = tmp_path / "ops.db"
    with ResultStore(path) as s:
        for name, n in ops.items():
            f1, y0, y1 = 5e8, 1e8, 5e6
            for rid, b in enumerate(BATCHES):
                t = float(od.overlap(c * n, _device(f1, y0, y1, b)))
                res = _result(name, b, t, f1=f1, y0=y0, y1=y1, rid=rid)
                res["flops"]["ops_per_step"] = n
                s.add(res)
    recs = load(path)
    cal = Calibration(recs, exclude=lambda p: p.model == "m_target")
    group = ("fake", "eager", "bf16", "cuda")
    assert cal.count_kind("fake", "eager") == "ops"
    assert cal.op_count("m_target", "fake", "bf16", "ops") == 800
    per, models = cal.host_per_op(group, "m_target", "Fake GPU", "ops")
    assert per == pytest.approx(c, rel=0.03) and "m_target" not in models
    h, _, where, _ = cal.host_of_group(group, "m_target", "Fake GPU")
    assert h == pytest.approx(c * 800, rel=0.03) and "800 ops" in where
    # a model never counted has no operator count (its host falls back to the floor)
    assert Calibration(load(synthetic_db_path(tmp_path))).op_count("m_host", "fake", "bf16",
                                                                   "ops") is None


def synthetic_db_path(tmp_path):
    p = tmp_path / "nocount.db"
    with ResultStore(p) as s:
        s.add(_result("m_host", 8, 0.01, f1=5e8, y0=1e8, y1=5e6))
    return p


def test_without_operator_counts_the_host_follows_the_kernel_count_and_probes_show_it(tmp_path):
    """A compiled framework records no operator count; its host time per step follows the
    kernels it launches (record ``trace.kernels_per_iter``). The series here are *device*-bound
    at every batch size, so no batch sweep shows H; their two-sided host probes do, and a
    withheld model gets the group's host time per kernel times its own kernel count."""
    c = 8e-6
    kernels = {"m_a": 50, "m_b": 100, "m_c": 200, "m_target": 400}
    path = tmp_path / "kernels.db"
    f1, y0, y1 = 2e10, 1e9, 5e7  # device time 0.35-2.3 ms: above every H
    with ResultStore(path) as s:
        for name, n in kernels.items():
            for rid, b in enumerate((8, 32, 128)):
                d = _device(f1, y0, y1, b)
                assert d > 1.2 * c * n
                res = _result(name, b, float(od.overlap(c * n, d)), f1=f1, y0=y0, y1=y1,
                              rid=rid)
                res["trace"] = {"available": True, "kernels_per_iter": n}
                res["host"] = {"dispatch_s": {"median": c * n},
                               "sync_wait_s": {"median": d - c * n}}
                s.add(res)
    recs = load(path)
    cal = Calibration(recs, exclude=lambda p: p.model == "m_target")
    group = ("fake", "eager", "bf16", "cuda")
    assert cal.count_kind("fake", "eager") == "kernels"
    assert cal.op_count("m_target", "fake", "bf16", "kernels", "eager") == 400
    eff = cal.efficiency(group, "m_target", "Fake GPU")
    hosts = {h.model: h for h in eff.hosts}
    assert all(h.measured and h.identified and not h.host_bound for h in hosts.values())
    assert hosts["m_b"].host_s == pytest.approx(c * 100, rel=0.05)
    h, _, where, _ = cal.host_of_group(group, "m_target", "Fake GPU")
    assert h == pytest.approx(c * 400, rel=0.05) and "400 kernels" in where
    # without the probes the same device-bound series show no host time at all
    bare = [p.__class__(**{**p.__dict__, "host_dispatch_s": None, "host_sync_wait_s": None})
            for p in recs.points]
    assert od.host_measurements(bare) == []


def test_an_estimated_host_prior_keeps_a_device_bound_series_device_bound(tmp_path):
    """vgg16 fp32 eager in benchmarks/results/h200/calibration.db: a device-bound series whose
    smallest batch lies 5% above its device line. With only the weak pull to a tenth of the
    step, the host takes up that excess through the rounded corner (H ~ 31 ms, close to the
    step); with the host estimated from other models (onedevice.HOST_ESTIMATE_SIGMA) it stays
    near the estimate, and the series stays device-bound at every batch."""
    steps_ms = {16: 35.82, 32: 55.31, 64: 97.83, 128: 182.94}  # calibration.db ids 21-24
    path = tmp_path / "vgg.db"
    with ResultStore(path) as s:
        for rid, (b, t) in enumerate(steps_ms.items()):
            s.add(_result("m_vgg", b, t * 1e-3, f1=1e10, y0=1e8, y1=1e7, rid=rid))
    pts = sorted(load(path).points, key=lambda p: p.batch_size)
    weak = od.fit_series(pts, None)
    assert weak.host_s > 0.75 * 35.82e-3  # the excess absorbed: H close to the b=16 step
    est = od.DevicePrior(None, 1.0, (), "none", 1.9e-3, od.HOST_ESTIMATE_SIGMA, "estimated")
    fit = od.fit_series(pts, est)
    assert fit.host_s < 5e-3
    assert all(fit.bound(b) == "device" for b in steps_ms)
    assert fit.step_time_s(64) == pytest.approx(97.83e-3, rel=0.02)


def test_roofline_fit_recovers_the_device_time_per_kernel(tmp_path):
    """Device-bound series whose device time is ``F/(e_F P) + Y/(e_Y W) + K t_k`` with t_k = 4
    us and each model's kernel count in its trace (``trace.kernels_per_iter``): the kernel-term
    fit recovers t_k, e_F and e_Y; a withheld model is predicted with its own count (a count,
    not a time); a configuration with no count gets the roofline fitted without the term."""
    t_k = 4e-6
    models = {  # name: (flops/sample, fixed bytes, bytes/sample, kernels)
        "k_compute": (2e9, 1e8, 2e6, 300), "k_memory": (2e8, 5e8, 2e7, 150),
        "k_loop": (1e8, 5e7, 1e6, 1600), "k_mixed": (8e8, 2e8, 8e6, 600),
        "k_target": (5e8, 1e8, 4e6, 1000),
    }
    path = tmp_path / "kernels.db"
    with ResultStore(path) as s:
        for name, (f1, y0, y1, k) in models.items():
            for rid, b in enumerate(BATCHES):
                d = _device(f1, y0, y1, b) + k * t_k
                res = _result(name, b, float(od.overlap(1e-4, d)), f1=f1, y0=y0, y1=y1, rid=rid)
                res["trace"] = {"available": True, "kernels_per_iter": k + (rid % 2)}
                s.add(res)
        s.add(_result("k_uncounted", 64, 5e-3, f1=5e8, y0=1e8, y1=4e6))
    recs = load(path)
    cal = Calibration(recs)
    group = ("fake", "eager", "bf16", "cuda")
    eff = cal.efficiency(group, "k_target", "Fake GPU", kernels=True)
    assert eff.kernel_s == pytest.approx(t_k, rel=0.01)
    assert (eff.e_flops, eff.e_bytes) == pytest.approx((E_F, E_Y), rel=0.01)
    assert "k_target" not in eff.models + eff.kernel_models
    plain = cal.efficiency(group, "k_target", "Fake GPU")
    assert plain.kernel_s == 0.0 and plain.rms_log > 10 * eff.rms_log
    target = Config("k_target", "fake", "eager", "bf16")
    assert cal.kernel_count(target) == pytest.approx(1000, abs=1)  # median of 1000/1001
    assert cal.roofline(target) == (eff, cal.kernel_count(target))
    from dlperf.perfmodel import model as pm

    f1, y0, y1, k = models["k_target"]
    one = pm.analytic(Calibration(recs, exclude=lambda p: p.model == "k_target"), target, 16)
    assert one.device_s == pytest.approx(_device(f1, y0, y1, 16) + k * t_k, rel=0.03)
    assert "kernel term" in " ".join(one.device_classes_s or {})
    # no count: the roofline fitted without kernel counts, no kernel term
    bare = Config("k_uncounted", "fake", "eager", "bf16")
    assert cal.kernel_count(bare) is None
    assert cal.roofline(bare) == (cal.efficiency(group, "k_uncounted", "Fake GPU"), None)


@pytest.mark.parametrize("precision, capped", [("bf16", True), ("tf32", True), ("fp32", False)])
def test_flop_efficiency_is_capped_at_the_tensor_core_ceiling(tmp_path, precision, capped):
    """Device-bound points made with e_F = 1.5 (FLOPs faster than the measured GEMM ceiling):
    at a tensor-core precision the fit may not choose e_F > 1 (its best is the bound), at fp32
    (whose ceiling is the CUDA cores', while convolutions run on TF32) it recovers 1.5."""
    e_f = 1.5
    path = tmp_path / "cap.db"
    with ResultStore(path) as s:
        for name, (f1, y0, y1, _h) in MODELS.items():
            for rid, b in enumerate(BATCHES):
                d = f1 * b / (e_f * P_FLOPS) + (y0 + y1 * b) / (E_Y * BW)
                s.add(_result(name, b, float(od.overlap(1e-5, d)), f1=f1, y0=y0, y1=y1,
                              precision=precision, rid=rid))
    eff = Calibration(load(path)).efficiency(("fake", "eager", precision, "cuda"), None,
                                             "Fake GPU")
    assert special.flops_efficiency_cap(precision) == (1.0 if capped else math.e ** 2)
    if capped:
        assert eff.e_flops == pytest.approx(1.0, abs=1e-6)
    else:
        assert eff.e_flops == pytest.approx(e_f, rel=0.03)


def test_a_precision_what_if_in_eager_mode_adds_the_host_of_the_added_operators(tmp_path):
    """Eager host-bound series whose host is 30 us per fp32 operator, and whose bf16 step adds
    operators (autocast's casts) of 10 us each: the target model, its bf16 steps withheld, gets
    ``H_fp32 + (n_bf16 - n_fp32) x 10 us`` in bf16 (``special.added_ops_host``), not the
    other models' step ratio (1.08-1.17 here against its own 1.67)."""
    from dlperf.perfmodel import model as pmodel
    from dlperf.perfmodel.model import transfer_ratios
    from dlperf.perfmodel.special import added_ops_host

    c, c_add = 30e-6, 10e-6
    ops = {"m_a": (100, 150), "m_b": (200, 260), "m_c": (400, 500), "m_target": (100, 300)}
    f1, y0, y1 = 5e8, 1e8, 5e6  # host-bound up to b=128, device-bound above
    path = tmp_path / "casts.db"
    with ResultStore(path) as s:
        rid = 0
        for name, (n32, n16) in ops.items():
            for prec, n in (("fp32", n32), ("bf16", n16)):
                h = c * n32 + c_add * (n - n32)
                for b in BATCHES:
                    rid += 1
                    t = float(od.overlap(h, _device(f1, y0, y1, b)))
                    res = _result(name, b, t, f1=f1, y0=y0, y1=y1, precision=prec, rid=rid)
                    res["flops"]["ops_per_step"] = n
                    s.add(res)
    base, target = Config("m_target", "fake", "eager", "fp32"), Config("m_target", "fake",
                                                                       "eager", "bf16")
    # its bf16 steps withheld, as in the back-test; its operator count (of its code) is not
    cal = Calibration(load(path), exclude=target.matches)
    assert cal.op_count("m_target", "fake", "bf16", "ops") == 300
    h32 = c * 100
    h16, why = added_ops_host(cal, base, target, h32)
    assert h16 == pytest.approx(h32 + 200 * c_add, rel=0.03)
    assert "200 operators x" in why and "m_target" not in why.split(":")[-1]
    one = pmodel.what_if(cal, base, target, 128)
    assert one.step_time_s == pytest.approx(h32 + 200 * c_add, rel=0.05)
    assert "operators x" in one.provenance["host ratio"]
    # the other models' step ratio, which this replaces, would have missed by a third
    r_steps = transfer_ratios(cal, base, target, 128)["host"][0]
    assert r_steps == pytest.approx(1.1, abs=0.08)
    # not a precision change in an operator-counted mode, or nothing added: no answer
    assert added_ops_host(cal, base, base.with_(mode="graph"), h32) is None
    assert added_ops_host(cal, base, base, h32) is None
    assert added_ops_host(cal, base.with_(model="m_none"), target.with_(model="m_none"),
                          h32) is None


def test_a_tf32_run_without_an_operator_count_has_fp32s(tmp_path):
    """TF32 is a math mode over the fp32 program: where a tf32 point's operators were not
    counted, its count is fp32's (``calibrate.SAME_OPERATORS``); a counted tf32 point keeps
    its own, no other precision borrows, and kernel counts are never carried over."""
    path = tmp_path / "tf32.db"
    with ResultStore(path) as s:
        for rid, (model, prec, ops) in enumerate([("m_a", "fp32", 120), ("m_a", "tf32", None),
                                                  ("m_b", "fp32", 80), ("m_b", "tf32", 90),
                                                  ("m_c", "fp32", 50), ("m_c", "bf16", None)]):
            res = _result(model, 32, 0.01, f1=5e8, y0=1e8, y1=5e6, precision=prec, rid=rid)
            if ops:
                res["flops"]["ops_per_step"] = ops
            res["trace"] = {"available": True, "kernels_per_iter": 300.0} if prec == "fp32" \
                else res.get("trace")
            s.add(res)
    cal = Calibration(load(path))
    assert cal.op_count("m_a", "fake", "tf32", "ops") == 120
    assert cal.op_count("m_b", "fake", "tf32", "ops") == 90
    assert cal.op_count("m_c", "fake", "bf16", "ops") is None
    assert cal.kernel_count(Config("m_a", "fake", "eager", "fp32")) == 300.0
    assert cal.kernel_count(Config("m_a", "fake", "eager", "tf32")) is None


def test_result_ids_name_each_stored_result_once(synthetic_db):
    """A series' ``result_ids`` (a series prediction's ``calibrated_on``) are its points, then
    the other results its device anchors read, each ``file:id`` once: a traced point of the
    series is one result, not two."""
    recs = load(synthetic_db)
    pts = sorted((p for p in recs.points if p.model == "m_compute"), key=lambda p: p.batch_size)
    own = [f"{p.source}:{p.result_id}" for p in pts]
    other = next(p for p in recs.points if p.model == "m_memory")
    anchors = (od.Anchor(pts[0].per_device_batch, 1e-3, od.TRACE_SIGMA, f"{own[0]} (trace busy)"),
               od.Anchor(64, 2e-3, od.SESSION_SIGMA,
                         f"{other.source}:{other.result_id} (device-bound step)"))
    fit = od.fit_series(pts, od.DevicePrior(None, 1.0, anchors, "anchors"))
    assert list(fit.result_ids) == [*own, f"{other.source}:{other.result_id}"]
    assert fit.result_ids[:len(fit.batch_sizes)] == tuple(own)


def test_untraced_classes_split_the_roofline_terms_without_a_step_of_their_own(monkeypatch):
    """An untraced configuration's device time by class is its roofline's FLOP, byte and
    kernel terms scaled to the step's ``D``: read from the group's fitted efficiencies, the
    ceilings and the kernel count the roofline came with, not from a roofline step of its
    own or a second count."""
    from types import SimpleNamespace

    from dlperf.perfmodel import model as pm

    eff = rl.Efficiency(("fake", "eager", "bf16", "cuda"), 0.5, 0.25, ("a",), ("x.db:1",), 0.1,
                        kernel_s=2e-6)
    counted = []
    cal = SimpleNamespace(
        points=[], device_name=lambda cfg: "Fake GPU", roofline=lambda cfg: (eff, 300.0),
        ceiling=lambda *a: rl.Ceiling(1e15, 4e12, "measured"),
        kernel_count=lambda cfg: counted.append(cfg) or 300.0)
    monkeypatch.setattr(rl, "device_time_s", lambda *a, **k: pytest.fail("a roofline step"))
    work = rl.Work(2e9, 1e8, 4e6, "fitted")
    cls = pm._classes(cal, Config("m", "fake", "eager", "bf16"), 64, 0.01, work)
    terms = {"compute (roofline FLOP term)": 2e9 * 64 / (0.5 * 1e15),
             "memory (roofline byte term)": (1e8 + 4e6 * 64) / (0.25 * 4e12),
             "kernels (roofline kernel term)": 300.0 * 2e-6}
    assert cls == pytest.approx({k: v * 0.01 / sum(terms.values()) for k, v in terms.items()})
    assert list(cls) == sorted(terms, key=lambda k: -terms[k]) and counted == []
