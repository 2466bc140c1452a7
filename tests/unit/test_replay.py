"""The timeline replay (dlperf.perfmodel.replay): a traced iteration replayed as a host
issuing launches and device lanes running kernels, on hand-made timelines with known
answers."""

from __future__ import annotations

import pytest

from dlperf.perfmodel import replay as R


def _op(step, start_us, dur_us, launch_us=None, call_us=5.0, stream=7, name="k", op_class=None,
        kind="kernel", grid="128,1,1", block="256,1,1"):
    return {"step": step, "kind": kind, "stream": stream, "start_ns": int(start_us * 1e3),
            "dur_ns": int(dur_us * 1e3), "name": name, "op_class": op_class, "op": "aten::x",
            "phase": "t_f", "grid": grid, "block": block, "registers": 32, "shared_memory": 0,
            "launch_start_ns": None if launch_us is None else int(launch_us * 1e3),
            "launch_dur_ns": None if launch_us is None else int(call_us * 1e3),
            "op_flops": None, "op_bytes": None}


def _torch_timeline(host_gap_us, dur_us, n=10, steps=3, window_us=None):
    """``steps`` iterations of ``n`` kernels: launch every ``host_gap_us`` (5 us calls), each
    kernel ``dur_us`` long, run as soon as launched and its lane is free."""
    ops = []
    for s in range(steps):
        free = 0.0
        for i in range(n):
            ls = host_gap_us * (i + 1) + 5.0 * i
            start = max(ls + 5.0, free)
            free = start + dur_us
            ops.append(_op(s, start, dur_us, launch_us=ls))
    w = window_us or (host_gap_us + 5.0) * n + 10.0
    meta = {"steps_ns": [[int(s * 1e6), int(s * 1e6 + w * 1e3)] for s in range(steps)],
            "source": "torch.profiler (CUPTI kernels and copies)"}
    return meta, ops


def test_host_bound_step_is_the_host_work():
    meta, ops = _torch_timeline(host_gap_us=20.0, dur_us=2.0)
    st = R.step_trace(meta, ops)
    r = R.simulate(st)
    assert r.bound == "host"
    assert r.step_s == pytest.approx(st.host_s, rel=1e-9)
    assert st.host_s == pytest.approx((20 + 5) * 10e-6 + 10e-6, rel=1e-6)


def test_device_bound_step_is_the_kernel_sum():
    meta, ops = _torch_timeline(host_gap_us=1.0, dur_us=50.0)
    st = R.step_trace(meta, ops)
    r = R.simulate(st)
    assert r.bound == "device"
    assert r.step_s == pytest.approx(10 * 50e-6, rel=1e-6)


def test_deinflate_scales_host_to_the_untraced_probe():
    meta, ops = _torch_timeline(host_gap_us=20.0, dur_us=2.0)
    st = R.step_trace(meta, ops)
    d = R.deinflate(st, host_untraced_s=0.5 * st.host_s)
    assert d.host_s == pytest.approx(0.5 * st.host_s)
    assert R.simulate(d).step_s == pytest.approx(0.5 * st.host_s, rel=1e-6)
    # without a probe: divided by the traced/untraced ratio
    d2 = R.deinflate(st, None)
    assert d2.host_s == pytest.approx(st.host_s / R.TRACED_HOST_INFLATION)
    assert d.meta["transforms"] and "de-inflated" in d.meta["transforms"][0]


def test_blocked_launch_call_is_not_host_work():
    meta, ops = _torch_timeline(host_gap_us=1.0, dur_us=50.0)
    ops = [dict(o) for o in ops]
    for o in ops:
        if o["step"] == 1 and o["start_ns"] > 300_000:
            o["launch_dur_ns"] = 5_000_000  # 5 ms inside a launch: the queue was full
            break
    st = R.step_trace(meta, ops, iteration=1)
    assert max(h.call_s for h in st.launches) < R.BLOCKED_CALL_S


def test_cross_lane_wait_is_inferred_and_kept():
    # lane 7 runs a 100 us kernel; lane 9's kernel was launched early but started only when
    # the first ended: a cross-stream event
    ops = [_op(0, 10, 100, launch_us=1, stream=7), _op(0, 111, 10, launch_us=2, stream=9)]
    meta = {"steps_ns": [[0, 20_000]], "source": "torch.profiler"}
    st = R.step_trace(meta, ops)
    assert st.ops[1].after == (0,)
    r = R.simulate(st)
    # halving the first kernel moves the second: it waits for it
    from dataclasses import replace
    st2 = replace(st, ops=(replace(st.ops[0], dur_s=50e-6), st.ops[1]))
    assert r.step_s == pytest.approx(100e-6, rel=0.05)  # lane 7 is the bottleneck
    assert R.simulate(st2).step_s < 0.7 * r.step_s
    one = R.simulate(st2, repeats=2, warm=1)
    assert one.step_s == pytest.approx(50e-6 + st.gap_s)


def test_cross_lane_order_of_the_trace_is_kept():
    # lane 9's kernel, launched early, started 60 us after lane 7's ended (an event wait the
    # trace does not show, or a late start): the replay keeps the order, never overlapping
    # them; a kernel that started while the other ran does not wait for it
    ops = [_op(0, 10, 100, launch_us=1, stream=7), _op(0, 170, 10, launch_us=2, stream=9),
           _op(0, 175, 30, launch_us=3, stream=7)]
    meta = {"steps_ns": [[0, 20_000]], "source": "torch.profiler"}
    st = R.step_trace(meta, ops)
    assert st.ops[1].after == (0,)
    assert st.ops[2].after == ()
    from dataclasses import replace
    longer = replace(st, ops=(replace(st.ops[0], dur_s=300e-6), *st.ops[1:]))
    assert R.simulate(longer, repeats=2, warm=1).step_s >= 300e-6 + 10e-6


def test_queue_gap_is_read_off_the_trace_and_replayed():
    # 10 kernels queued well ahead (all launched in the first 50 us), each starting 2 us
    # after the previous one ended: the device's gap between queued kernels is 2 us
    ops, t = [], 100.0
    for i in range(10):
        ops.append(_op(0, t, 40, launch_us=1 + 5 * i, call_us=4))
        t += 42
    meta = {"steps_ns": [[0, 1_000_000]], "source": "torch.profiler"}
    st = R.step_trace(meta, ops)
    assert st.gap_s == pytest.approx(2e-6, rel=1e-3)
    z = R.scale_host(st, 0.0)
    assert R.simulate(z).step_s == pytest.approx(10 * 42e-6, rel=1e-6)
    # too few queued kernels to read it: the development median
    st3 = R.step_trace(meta, ops[:3])
    assert st3.gap_s == R.QUEUE_GAP_S


def test_independent_lanes_overlap():
    ops = [_op(0, 10, 100, launch_us=1, stream=7), _op(0, 12, 100, launch_us=2, stream=9)]
    meta = {"steps_ns": [[0, 20_000]], "source": "torch.profiler"}
    st = R.step_trace(meta, ops)
    assert st.ops[1].after == ()
    assert R.simulate(st).step_s == pytest.approx(100e-6, rel=0.05)


def test_xla_iterations_are_cut_by_position_and_launches_folded():
    # 3 iterations of 12 kernels on one stream, the device lagging the host windows
    ops = []
    for s in range(3):
        for i in range(12):
            name = "__cudnn$convForward" if i == 6 else f"fusion_{i}"
            ops.append({"step": 0, "kind": "kernel", "stream": None, "start_ns": (s * 12 + i)
                        * 10_000, "dur_ns": 8_000, "name": name, "op_class": "elementwise",
                        "op": name, "phase": "t_f"})
    meta = {"steps_ns": [[0, 100_000], [100_000, 200_000], [200_000, 300_000]],
            "source": "jax.profiler (XSpace: GPU kernels)"}
    its = R.iterations(meta, ops)
    assert [len(i) for i in its] == [12, 12, 12]
    st = R.step_trace(meta, ops)
    # 6 fusions (one command buffer), the convolution, 5 fusions (one command buffer)
    assert len(st.launches) == 3
    assert st.gap_s == 0.0  # an XLA program's traced durations hold the gap
    d = R.deinflate(st, host_untraced_s=30e-6)
    assert d.host_s == pytest.approx(30e-6)
    assert R.simulate(d).step_s == pytest.approx(12 * 8e-6, rel=1e-6)


def test_no_iterations_is_a_clear_error():
    with pytest.raises(ValueError, match="no traced iterations"):
        R.step_trace({"steps_ns": []}, [])
    with pytest.raises(ValueError, match="repeats"):
        meta, ops = _torch_timeline(1.0, 1.0)
        R.simulate(R.step_trace(meta, ops), repeats=2, warm=2)


def test_an_operators_figures_are_split_over_its_kernels():
    # one LSTM call launching 3 kernels (its FLOPs and bytes repeated on each), then another
    # operator's single kernel with the same figures
    ops = []
    for i, dur in enumerate((10, 20, 10)):
        o = _op(0, 100 + 30 * i, dur, launch_us=1 + 5 * i, name=f"rnn_{i}")
        o.update(op="aten::lstm", op_flops=4e9, op_bytes=8e6)
        ops.append(o)
    last = _op(0, 300, 10, launch_us=40, name="mm")
    last.update(op="aten::mm", op_flops=4e9, op_bytes=8e6)
    meta = {"steps_ns": [[0, 1_000_000]], "source": "torch.profiler"}
    st = R.step_trace(meta, [*ops, last])
    assert [o.bytes for o in st.ops] == pytest.approx([2e6, 4e6, 2e6, 8e6])
    assert sum(o.flops for o in st.ops[:3]) == pytest.approx(4e9)
    assert st.ops[3].flops == pytest.approx(4e9)


def test_host_level_reads_host_bound_steps_of_an_eager_program():
    from types import SimpleNamespace as P

    def pt(step, probe, busy, mode="eager", rid=0):
        return P(step_time_s=step, host_dispatch_s=probe, busy_s=busy, mode=mode,
                 source="a.db", result_id=rid)

    host_bound = [pt(2.0e-3, 2.4e-3, 1.0e-3), pt(2.2e-3, 2.6e-3, 1.5e-3)]
    device_bound = pt(9.0e-3, 2.0e-3, 8.9e-3)
    # the median host-bound step, not the probes (which read the host higher)
    assert R.host_level([*host_bound, device_bound]) == pytest.approx(2.1e-3)
    # no host-bound point: the median probe
    assert R.host_level([device_bound, pt(5e-3, 3e-3, 4.9e-3)]) == pytest.approx(2.5e-3)
    # a compiled program's step is no host time: the probes
    graph = [pt(s, p, b, mode="xla") for s, p, b in ((2e-3, 3e-3, 1e-3), (4e-3, 5e-3, 1e-3))]
    assert R.host_level(graph) == pytest.approx(4e-3)
    # without busy time, the trace's kernel sum decides
    no_busy = pt(2.0e-3, 2.4e-3, None, rid=7)
    assert R.host_level([no_busy, device_bound], {("a.db", 7): 1e-3}) == pytest.approx(2.0e-3)
    assert R.host_level([no_busy, device_bound], {("a.db", 7): 3e-3}) == pytest.approx(2.2e-3)
    # another file's row 7 is another trace
    assert R.host_level([no_busy, device_bound], {("b.db", 7): 1e-3}) == pytest.approx(2.2e-3)
    assert R.host_level([pt(1e-3, None, None)]) is None


def test_timeline_ids_reads_any_path_and_no_table_as_none(tmp_path):
    import shutil
    import sqlite3
    from pathlib import Path

    src = Path(__file__).resolve().parents[2] / "benchmarks/results/h100/calibrate.db"
    odd = tmp_path / "a #1 ?.db"  # URI-special characters stay part of the name
    shutil.copy(src, odd)
    ids = R.timeline_ids(str(odd))
    assert ids and ids == R.timeline_ids(str(src))
    assert {p.result_id for p, _ in R.load_traces(str(odd))} <= ids
    bare = tmp_path / "bare.db"
    sqlite3.connect(bare).close()
    assert R.timeline_ids(str(bare)) == set()
