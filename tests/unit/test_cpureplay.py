"""The data-parallel replay of CPU (gloo) timelines (dlperf.perfmodel.cpureplay)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlperf.perfmodel import cpureplay as cr

DB = Path(__file__).resolve().parents[2] / "benchmarks/results/cpu-dev/ddp_buckets.db"


def _step(work=(1.0, 1.0, 1.0, 1.0), ready=(1,), barrier=3) -> cr.CpuStep:
    return cr.CpuStep(tuple(work), tuple(0.0 for _ in work), tuple(ready), barrier, (),
                      (0, barrier - 1), 0.0, sum(work))


def test_simulate_free_overlap_hides_the_all_reduce_behind_backward():
    # all-reduce released at t=2, runs to 3.5 beside item 2; item 3 waits for it
    r = cr.simulate(_step(), [100.0], lambda b: 1.5, 1.0, 1.0)
    assert r.step_s == pytest.approx(4.5)
    assert r.exposed_s == pytest.approx(0.5)


def test_simulate_shared_cores_conserve_work():
    # not overlapped (0, 1) and halves (0.5, 0.5) both keep one core busy throughout
    serial = cr.simulate(_step(), [100.0], lambda b: 1.5, 0.0, 1.0)
    shared = cr.simulate(_step(), [100.0], lambda b: 1.5, 0.5, 0.5)
    assert serial.step_s == pytest.approx(5.5)
    assert shared.step_s == pytest.approx(5.5)
    # a smaller all-reduce than what is left of backward: shared still adds only its work
    assert cr.simulate(_step(), [1.0], lambda b: 0.2, 0.5, 0.5).step_s == pytest.approx(4.2)


def test_simulate_runs_buckets_in_order_on_one_thread():
    st = _step(work=(1.0, 1.0, 1.0, 1.0, 1.0), ready=(0, 1), barrier=4)
    r = cr.simulate(st, [1.0, 2.0], lambda b: 1.5 * b, 1.0, 1.0)
    # bucket 0: 1 -> 2.5, bucket 1 (3 s of work) queued behind it: 2.5 -> 5.5; item 4 after
    assert r.step_s == pytest.approx(6.5)
    with pytest.raises(ValueError):
        cr.simulate(st, [1.0], lambda b: 1.0)
    with pytest.raises(ValueError):
        cr.simulate(st, [1.0, 2.0], lambda b: 1.0, 0.0, 0.0)


def _op(start, dur, name, phase="t_b", context="", kind="host_op", step=0):
    return {"step": step, "kind": kind, "start_ns": start, "dur_ns": dur, "name": name,
            "phase": phase, "context": context}


def test_cpu_iteration_finds_hooks_and_cuts_the_wait():
    acc = "x > autograd::engine::evaluate_function: torch::autograd::AccumulateGrad"
    ev = "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad"
    ops = [
        _op(0, 100, "aten::mm", "t_f"),
        _op(100, 100, "MmBackward0"),
        _op(200, 10, ev, context=acc), _op(210, 10, cr.ACCUMULATE, context=acc),
        _op(220, 10, "aten::copy_", context=acc), _op(230, 10, cr.ENQUEUE, context=acc),
        _op(240, 100, "MmBackward0"),
        _op(340, 10, ev, context=acc), _op(350, 10, cr.ACCUMULATE, context=acc),
        _op(360, 10, cr.ENQUEUE, context=acc),
        _op(235, 3_000_000, "gloo:all_reduce", None, kind="collective"),
        # the training thread waits 2.99 ms for the all-reduce, then copies back and steps
        _op(3_000_370, 50, "aten::as_strided", "t_f"),
        _op(3_000_420, 80, "aten::_fused_sgd_", "t_u"),
    ]
    st = cr.cpu_iteration({"steps_ns": [[0, 3_000_500]]}, ops, 0, [1, 1])
    assert st.ready == (5, 9)
    assert cr.ready_check(st) == [0, 0]
    assert st.barrier == 10
    # the gap after backward overlapping the all-reduce is cut, up to the all-reduce's end
    assert st.waits_s == pytest.approx((3_000_235 - 370) * 1e-9)
    assert st.compute_s == pytest.approx((3_000_500 - (3_000_235 - 370)) * 1e-9)
    with pytest.raises(ValueError):
        cr.cpu_iteration({"steps_ns": [[0, 3_000_500]]}, ops, 0, [2, 1])


def test_deinflate_and_decontend():
    st = cr.CpuStep((1.0, 2.0, 1.0), (0.0, 1.0, 0.0), (1,), 2, (), (0, 1), 0.0, 4.0)
    d = cr.deinflate(st, 1.5)
    assert sum(d.work_s[:2]) == pytest.approx(1.5)
    assert d.work_s[2] == pytest.approx(0.5)
    assert cr.deinflate(st, None) is st
    c = cr.decontend(st, 0.5)
    assert c.work_s == pytest.approx((1.0, 1.5, 1.0))
    assert cr.bucket_params_of({"dist": {"runtime": {
        "rebuilt_per_bucket_param_indices": "7 6, 5 4 3 2, 1 0"}}}) == [2, 4, 2]
    assert cr.ddp_compute_s({"dist": {"runtime": {"avg_forward_compute_time": 1e8,
                                                  "avg_backward_compute_time": 2e8}}}) \
        == pytest.approx(0.3)


@pytest.mark.skipif(not DB.exists(), reason="benchmarks/results/cpu-dev/ddp_buckets.db absent")
def test_stored_runs_ready_ops_are_ddps_enqueues():
    """On every stored 2-rank gloo run, each bucket's predicted gradient-ready op (the
    parameter count rule) is DDP's own enqueue of that bucket or at most 2 ops after it (the
    rest of the same hook)."""
    import sqlite3

    from dlperf.results import timelines

    con = sqlite3.connect(f"file:{DB}?mode=ro", uri=True)
    n = 0
    for rid, rj, fmt, data in con.execute(
            "SELECT r.id, r.result_json, t.format, t.data FROM results r "
            "JOIN timelines t ON t.result_id = r.id"):
        res = json.loads(rj)
        params = cr.bucket_params_of(res)
        tl = {**res["timeline"], "format": fmt, "data": data}
        ops = timelines.decode(tl)
        for k in range(len(tl["steps_ns"])):
            st = cr.cpu_iteration(tl, ops, k, params)
            chk = cr.ready_check(st)
            assert len(chk) == len(params), (rid, k)
            assert all(0 <= c <= 2 for c in chk), (rid, k, chk)
            assert st.waits_s >= 0 and st.compute_s < st.window_s + 1e-9
            n += 1
    assert n >= 25
