"""DDP's per-bucket gradient-ready and all-reduce start/end from a decoded timeline
(dlperf.measure.breakdown.buckets): matching by order, counts that do not match, missing
collectives, and the collective spans the torch trace parser keeps for the timeline."""

from __future__ import annotations

import pytest
from test_breakdown import _x  # tests/measure is on sys.path

from dlperf.measure.breakdown.buckets import match_buckets, summarize_buckets
from dlperf.measure.breakdown.timeline import decode, encode, per_step_counts
from dlperf.measure.breakdown.torch_trace import from_chrome_trace
from dlperf.measure.breakdown.trace import analyse


def _op(step, kind, name, start, dur, *, op=None, phase="t_b", op_class="other", launch=None):
    return {"step": step, "kind": kind, "name": name, "op": op or name, "phase": phase,
            "op_class": op_class, "start_ns": start, "dur_ns": dur, "launch_start_ns": launch}


BUCKETS = [{"index": 0, "bytes": 4000, "params": [3, 2]},
           {"index": 1, "bytes": 8000, "params": [1, 0]}]


def cpu_step(step, t0=0):
    """One CPU iteration: backward ops, two enqueues (the second in two self-time slices)
    and two gloo spans on the worker thread, started after their enqueues."""
    return [
        _op(step, "host_op", "AddmmBackward0", t0 + 100, 50),
        _op(step, "host_op", "c10d::allreduce_", t0 + 160, 5, op_class="communication"),
        _op(step, "host_op", "AddmmBackward0", t0 + 170, 100),
        _op(step, "host_op", "c10d::allreduce_", t0 + 280, 3, op_class="communication"),
        _op(step, "host_op", "aten::empty", t0 + 283, 2, op="c10d::allreduce_"),
        _op(step, "host_op", "aten::view", t0 + 300, 10, phase="t_b"),
        _op(step, "collective", "gloo:all_reduce", t0 + 170, 200, phase=None,
            op_class="communication"),
        _op(step, "collective", "gloo:all_reduce", t0 + 400, 150, phase=None,
            op_class="communication"),
    ]


def test_cpu_buckets_match_by_order_with_enqueue_as_ready():
    (row,) = match_buckets(cpu_step(0), BUCKETS)
    assert row["matched"] and row["reason"] is None
    assert row["ready_source"] == "allreduce_enqueue"
    b0, b1 = row["buckets"]
    assert (b0["index"], b0["ready_ns"], b0["start_ns"], b0["end_ns"]) == (0, 160, 170, 370)
    assert (b1["index"], b1["ready_ns"], b1["start_ns"], b1["end_ns"]) == (1, 280, 400, 550)
    assert b1["params"] == [1, 0] and b1["bytes"] == 8000
    # backward ends with its last non-communication op (aten::view, 300 + 10) and starts with
    # its first (AddmmBackward0 at 100; the enqueues and gloo spans are not backward compute)
    assert row["t_b_end_ns"] == 310 and row["t_b_start_ns"] == 100
    assert summarize_buckets([row])["t_b_start_ns"] == 100


def test_gpu_buckets_use_nccl_kernels_and_their_launch():
    ops = [_op(0, "kernel", "sm90_gemm", 50, 100, op="aten::mm"),
           _op(0, "kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 200, 80,
               op="c10d::allreduce_", op_class="communication", launch=120),
           _op(0, "kernel", "sm90_gemm", 210, 90, op="aten::mm"),
           _op(0, "kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 300, 60,
               op="c10d::allreduce_", op_class="communication", launch=290),
           # the host span of the enqueue is ignored where kernels exist
           _op(0, "collective", "nccl:all_reduce", 118, 4, phase=None,
               op_class="communication")]
    (row,) = match_buckets(ops, BUCKETS)
    assert row["matched"] and row["ready_source"] == "kernel_launch"
    assert [(b["ready_ns"], b["start_ns"], b["end_ns"]) for b in row["buckets"]] == [
        (120, 200, 280), (290, 300, 360)]
    assert row["t_b_end_ns"] == 300


def test_count_mismatch_is_not_matched_and_says_why():
    three = [*BUCKETS, {"index": 2, "bytes": 10, "params": [9]}]
    (row,) = match_buckets(cpu_step(0), three)
    assert not row["matched"] and row["buckets"] == []
    assert "2 all-reduces" in row["reason"] and "3 DDP buckets" in row["reason"]
    s = summarize_buckets([row])
    assert s["matched_iterations"] == 0 and s["buckets"] == [] and s["reasons"] == [row["reason"]]


def test_missing_collectives_are_not_matched():
    ops = [o for o in cpu_step(0) if o["kind"] != "collective"]
    (row,) = match_buckets(ops, BUCKETS)
    assert not row["matched"] and "no all-reduce" in row["reason"]


def test_one_bucket_and_medians_over_iterations():
    one = [{"index": 0, "bytes": 12000, "params": [3, 2, 1, 0]}]
    ops = []
    for k, shift in enumerate((0, 10, 40)):
        ops += [_op(k, "host_op", "AddmmBackward0", 100, 50 + shift),
                _op(k, "host_op", "c10d::allreduce_", 160 + shift, 5),
                _op(k, "collective", "gloo:all_reduce", 170 + shift, 100, phase=None)]
    rows = match_buckets(ops, one)
    assert len(rows) == 3 and all(r["matched"] for r in rows)
    s = summarize_buckets(rows)
    assert s["n_buckets"] == 1 and s["matched_iterations"] == 3
    (b,) = s["buckets"]
    assert (b["ready_ns"], b["start_ns"], b["end_ns"], b["dur_ns"], b["n_params"]) == (
        170, 180, 280, 100, 4)
    # exposed tail per iteration: 270-150, 280-160, 310-190 -> median 120
    assert s["exposed_tail_ns"] == 120 and s["t_b_end_ns"] == 160


def test_no_buckets_is_an_error():
    with pytest.raises(ValueError, match="no DDP buckets"):
        match_buckets(cpu_step(0), [])


def test_enqueue_count_differing_from_spans_leaves_ready_unknown():
    ops = [o for o in cpu_step(0) if not (o["name"] == "c10d::allreduce_" and o["start_ns"] == 160)]
    (row,) = match_buckets(ops, BUCKETS)
    assert row["matched"] and row["ready_source"] is None
    assert all(b["ready_ns"] is None for b in row["buckets"])


def test_torch_trace_keeps_collective_spans_for_the_timeline_only():
    doc = {"traceEvents": [
        _x("dlperf_step#0", "user_annotation", 0, 1000),
        _x("aten::mm", "cpu_op", 10, 100),
        _x("c10d::allreduce_", "cpu_op", 200, 20),
        _x("gloo:all_reduce", "user_annotation", 230, 500, tid=9),
    ]}
    td = from_chrome_trace(doc)
    assert [o.name for o in td.collectives] == ["gloo:all_reduce"]
    assert td.collectives[0].step == 0 and td.collectives[0].kind == "collective"
    # the analysis does not count the wire: busy time is the two host ops only
    assert analyse(td)["busy_s"] == pytest.approx(120e-6)
    ops = decode(encode(td))
    (span,) = [o for o in ops if o["kind"] == "collective"]
    assert (span["start_ns"], span["dur_ns"], span["stream"]) == (230_000, 500_000, 9)
    assert span["op_class"] == "communication"
    assert per_step_counts(ops, 1)["kernels_per_iter"] == 2.0
