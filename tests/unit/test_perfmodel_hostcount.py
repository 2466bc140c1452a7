"""Host-work counts and the configurations the model keeps apart (docs/perfmodel.md).

* XLA's host launches from a stored timeline (:mod:`dlperf.perfmodel.hostcount`): kernels
  folded into command buffers, loop bodies launched once per trip, convolutions on their own;
  read by the one loader and costed as a fixed part plus a cost per launch;
* a series whose steps are flat in the batch is host-bound when its traced device busy times
  say the device is faster (not "device-bound unless the data say otherwise");
* a torch.compile mode other than default (CUDA graphs) is a configuration of its own;
* the ceilings a calibration shares do not depend on which back-test computed them first.
"""

import pytest

from dlperf.measure.breakdown.timeline import encode
from dlperf.measure.breakdown.trace import TraceData, TraceOp
from dlperf.perfmodel import hostcount as hc
from dlperf.perfmodel import onedevice as od
from dlperf.perfmodel import request as rq
from dlperf.perfmodel.calibrate import Calibration, Config
from dlperf.perfmodel.records import load, mode_key
from dlperf.results.store import ResultStore

CONV = "__cudnn$convForward"


def _ops(names_ops):
    return [{"name": n, "op": o, "step": 0} for n, o in names_ops]


def test_a_scan_body_is_one_launch_per_trip_and_a_convolution_ends_a_command_buffer():
    # 3 ops before the loop (a run shorter than 5: launched one by one), then a body of 12
    # fusions repeated 35 times (one command buffer per trip), then 6 fusions (one buffer)
    body = [(f"loop_fusion_{i}", "fusion") for i in range(12)]
    seq = ([(f"pre_{i}", "fusion") for i in range(3)] + body * 35
           + [(f"post_{i}", "fusion") for i in range(6)])
    assert hc.launches(_ops(seq)) == 3 + 35 + 1
    # convolutions are launched by the host and cut the runs between them
    seq = [("c1", CONV), ("f1", "f"), ("f2", "f"), ("c2", CONV)] + [
        (f"g{i}", "f") for i in range(6)] + [("c3", CONV)]
    assert hc.launches(_ops(seq)) == 1 + 2 + 1 + 1 + 1
    # 40 distinct fusions: one command buffer
    assert hc.launches(_ops([(f"k{i}", "fusion") for i in range(40)])) == 1
    assert hc.loop_starts([0, 1, 2] * 4) == {0, 3, 6, 9, 12}
    assert hc.loop_starts([0, 1, 2, 3]) == set()  # nothing repeats
    assert hc.loop_starts([0, 1] * 2 + [5]) == set()  # 2 repeats: not a loop
    steps = _ops(seq) + [{**o, "step": 1} for o in _ops(seq)] + [{"name": "x", "step": None}]
    assert hc.launches_per_iter(steps) == 6.0
    assert hc.launches_per_iter([{"name": "x", "step": None}]) is None


def _timeline(seq, n_steps=2, source="jax.profiler (XSpace: GPU kernels)"):
    ops, t = [], 0.0
    for k in range(n_steps):
        for name, op in seq:
            ops.append(TraceOp(name=name, start_s=t, end_s=t + 1e-6, ops=(op,), step=k))
            t += 2e-6
    steps = [(k * t / n_steps, (k + 1) * t / n_steps) for k in range(n_steps)]
    return encode(TraceData(ops=ops, steps=steps, device_kind="gpu", source=source))


def _result(model, batch, step_s, host_s, wait_s, rid, mode="xla", framework="fake",
            timeline=None, busy_s=None, compile_mode=None):
    res = {
        "run_key": f"{model}-{batch}-{rid}-{mode}-{compile_mode}", "status": "ok",
        "model": model, "framework": framework, "mode": mode, "device": "cuda",
        "device_name": "Fake GPU", "precision": "bf16", "batch_size": batch, "grad_accum": 1,
        "data": "synthetic", "threads": None, "world_size": 1, "nnodes": 1,
        "per_device_batch": batch,
        "summary": {"median": step_s, "ci_low": step_s * 0.995, "ci_high": step_s * 1.005},
        "spec": {"params": 1_000_000, "train_flops_per_sample": 1e8},
        "flops": {"bytes_per_step": 1e7 + 1e5 * batch},
        "ceilings": {"matmul_flops_per_s": {"bf16": 1e14}, "bandwidth_bytes_per_s": 2e12},
        "config": {"layout": "auto", **({"compile_mode": compile_mode} if compile_mode else {})},
        "env": {"hostname": "h"},
        "host": {"dispatch_s": {"median": host_s}, "sync_wait_s": {"median": wait_s}},
    }
    if timeline is not None:
        res["timeline"] = timeline
    if busy_s is not None:
        res["trace"] = {"available": True, "busy_s": busy_s}
    return res


def test_xla_launches_are_loaded_from_timelines_and_cost_a_fixed_part_plus_a_launch(
        tmp_path, monkeypatch):
    """Device-bound compiled programs whose host is 0.3 ms per call plus 10 us per launch
    (two-sided host probes show it); their timelines give 1, 40 and 80 launches (a scan of
    80 trips, 40 distinct ops, a short program). A withheld model with 120 launches gets
    0.3 ms + 120 x 10 us, not a cost per kernel: its 1,200 kernels run in 120 trips."""
    monkeypatch.setenv("DLPERF_CACHE_DIR", str(tmp_path / "cache"))
    fixed, per = 3e-4, 1e-5
    progs = {"m_one": [(f"f{i}", "fusion") for i in range(40)],
             "m_convs": [(f"c{i}", CONV) for i in range(40)],
             "m_scan": [(f"b{i}", "fusion") for i in range(10)] * 80,
             "m_target": [(f"t{i}", "fusion") for i in range(10)] * 120}
    path = tmp_path / "xla.db"
    with ResultStore(path) as s:
        rid = 0
        for name, seq in progs.items():
            n = hc.launches(_ops(seq))
            h = fixed + per * n
            for b in (8, 32, 128):
                rid += 1
                d = 3 * h + 1e-5 * b  # device-bound: the probe's wait is long
                s.add(_result(name, b, d, h, d - h, rid, timeline=_timeline(seq)))
    recs = load(path)
    got = {p.model: p.launches_per_iter for p in recs.points}
    assert got == {"m_one": 1.0, "m_convs": 40.0, "m_scan": 80.0, "m_target": 120.0}
    assert list((tmp_path / "cache").glob("perfmodel-points-*.json"))  # counted once
    assert {p.model: p.launches_per_iter for p in load(path).points} == got  # from the cache
    cal = Calibration(recs, exclude=lambda p: p.model == "m_target")
    group = ("fake", "xla", "bf16", "cuda")
    assert cal.count_kind("fake", "xla") == "launches"
    f, c, models = cal.host_line(group, "m_target", "Fake GPU")
    assert f == pytest.approx(fixed, rel=0.05) and c == pytest.approx(per, rel=0.05)
    assert "m_target" not in models
    h, _, where, _ = cal.host_of_group(group, "m_target", "Fake GPU")
    assert h == pytest.approx(fixed + per * 120, rel=0.05) and "120 launches" in where
    # kernels were counted (1,200 per iteration): a cost per kernel would say 12 ms, not 1.5
    assert recs.points[-1].launches_per_iter == 120.0


def test_a_flat_series_is_host_bound_when_its_traced_device_is_faster(tmp_path):
    """Steps flat at 20 ms over four batch sizes, host probes that say only 'at most 21 ms'
    (the host never waited): alone, the flat line reads as device time. The traced busy
    times (3-11 ms) say the device is faster, so the series shows a 20 ms host time."""
    path = tmp_path / "flat.db"
    with ResultStore(path) as s:
        for rid, (b, busy) in enumerate(((8, 3e-3), (16, 4.5e-3), (32, 6.6e-3),
                                         (64, 11e-3))):
            s.add(_result("m_flat", b, 20e-3, 21e-3, 1e-4, rid, mode="graph", busy_s=busy))
    recs = load(path)
    (p0, *_) = recs.points
    steps = [p for p in recs.points]
    ceil = Calibration(recs).ceiling("fake", "bf16", "Fake GPU")
    eff = od.fit_group(recs.points, p0.group, lambda p: Calibration(recs).work(
        p.model, p.framework, p.precision, p.device), ceil)
    (host,) = eff.hosts
    assert host.identified and host.host_bound and host.host_s == pytest.approx(20e-3, rel=0.05)
    # without the traces the same steps say nothing about the host: pulled to device-bound
    bare = [p.__class__(**{**p.__dict__, "busy_s": None}) for p in steps]
    (host,) = od.fit_group(bare, p0.group, lambda p: Calibration(recs).work(
        p.model, p.framework, p.precision, p.device), ceil).hosts
    assert not host.host_bound


def test_a_compile_mode_other_than_default_is_a_configuration_of_its_own(tmp_path):
    path = tmp_path / "modes.db"
    with ResultStore(path) as s:
        s.add(_result("m", 64, 20e-3, 21e-3, 1e-4, 1, mode="graph"))
        s.add(_result("m", 64, 4e-3, 1e-3, 3e-3, 2, mode="graph",
                      compile_mode="reduce-overhead"))
    recs = load(path)
    cfgs = {Config.of(p) for p in recs.points}
    assert {c.compile_mode for c in cfgs} == {"default", "reduce-overhead"}
    assert {c.group[1] for c in cfgs} == {"graph", mode_key("graph", "reduce-overhead")}
    assert mode_key("graph", "default") == "graph"
    assert len({od.series_key(p) for p in recs.points}) == 2  # two series, not one
    pick, note = rq.resolve(recs, "m", {})
    assert pick.compile_mode == "default" and "--compile-mode reduce-overhead" in note
    cg, _ = rq.resolve(recs, "m", {"compile_mode": "reduce-overhead"})
    assert cg.compile_mode == "reduce-overhead" and "reduce-overhead" in cg.label()


def test_shared_ceilings_do_not_depend_on_which_back_test_filled_the_cache(tmp_path):
    path = tmp_path / "ceil.db"
    with ResultStore(path) as s:
        for rid, (m, flops) in enumerate((("a", 1e14), ("b", 2e14), ("b", 4e14), ("c", 8e14))):
            r = _result(m, 8 * (rid + 1), 1e-3, 1e-3, 1e-4, rid)
            r["ceilings"]["matmul_flops_per_s"]["bf16"] = flops
            s.add(r)
    recs = load(path)
    fresh = Calibration(recs).ceiling("fake", "bf16", "Fake GPU", "a")
    base = Calibration(recs)
    # a held-out batch calibration (one point of b withheld) fills the shared cache first
    held = Calibration(recs, lambda p: p.model == "b" and p.batch_size == 16,
                       share_efficiencies=base)
    assert held.ceiling("fake", "bf16", "Fake GPU", "a") == fresh
    assert base.ceiling("fake", "bf16", "Fake GPU", "a") == fresh
    assert fresh.flops_per_s == pytest.approx(4e14)  # median of b, b, c: a's own left out
