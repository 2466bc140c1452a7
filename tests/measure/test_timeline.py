"""The kept per-kernel timeline (--timeline), kernels per iteration, the untraced dispatch
probe and DDP's bucket record: what the performance model is fitted from."""

from __future__ import annotations

import base64
import json
import sqlite3
import zlib
from types import SimpleNamespace

import pytest
from test_breakdown import _x, gpu_trace_doc  # tests/measure is on sys.path

from dlperf.measure.breakdown.timeline import FORMAT, decode, encode, per_step_counts, rows
from dlperf.measure.breakdown.torch_trace import from_chrome_trace
from dlperf.measure.breakdown.trace import TraceData, TraceOp, analyse, launches_per_iter
from dlperf.measure.dispatch import probe_count, probe_dispatch
from dlperf.measure.probes import DISPATCH_SAMPLE, dispatch_into
from dlperf.results import timelines
from dlperf.results.schema import RunRecord
from dlperf.results.store import SCHEMA_VERSION, ResultStore


def two_step_doc():
    """Two steps of one kernel and one copy each, with launch geometry (Kineto's args)."""
    evs = []
    for k, t0 in enumerate((0, 1000)):
        evs += [
            _x(f"dlperf_step#{k}", "user_annotation", t0, 900),
            _x("aten::mm", "cpu_op", t0 + 10, 50),
            _x("cudaLaunchKernel", "cuda_runtime", t0 + 20, 6, correlation=10 + k),
            _x("aten::copy_", "cpu_op", t0 + 100, 20),
            _x("cudaMemcpyAsync", "cuda_runtime", t0 + 105, 4, correlation=20 + k),
            {"ph": "X", "cat": "kernel", "name": "sm90_gemm", "pid": 0, "tid": 7,
             "ts": t0 + 30, "dur": 400, "args": {"correlation": 10 + k, "stream": 7,
                                                 "device": 0, "grid": [132, 1, 1],
                                                 "block": [256, 1, 1],
                                                 "registers per thread": 168,
                                                 "shared memory": 98304}},
            {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 7,
             "ts": t0 + 500, "dur": 50, "args": {"correlation": 20 + k, "stream": 7,
                                                 "bytes": 4096}},
        ]
    return {"traceEvents": evs}


def test_kernels_and_copies_per_iteration_are_counted_per_traced_step():
    td = from_chrome_trace(two_step_doc())
    assert [o.kind for o in td.ops].count("memcpy") == 2
    a = analyse(td)
    assert a["kernels_per_iter"] == 1.0 and a["copies_per_iter"] == 1.0
    one = from_chrome_trace(gpu_trace_doc())  # 3 kernels and a copy in its one step
    assert launches_per_iter(one) == {"kernels_per_iter": 3.0, "copies_per_iter": 1.0}


def test_cpu_trace_has_no_kernel_count():
    td = TraceData(ops=[TraceOp("aten::mm", 0.0, 1.0, step=0, kind="host_op")],
                   steps=[(0.0, 1.0)], device_kind="cpu", source="t")
    assert launches_per_iter(td) == {"kernels_per_iter": None, "copies_per_iter": None}


def test_timeline_round_trips_with_times_from_each_iterations_start():
    td = from_chrome_trace(two_step_doc())
    enc = encode(td)
    assert enc["format"] == FORMAT and enc["n_ops"] == 4 and enc["n_steps"] == 2
    assert enc["steps_ns"] == [[0, 900_000], [1_000_000, 1_900_000]]
    assert enc["stored_bytes"] == len(enc["data"])
    ops = decode(enc)
    k1 = [o for o in ops if o["name"] == "sm90_gemm"][1]
    # The second step's kernel starts 30 us after its step's host start, lasts 400 us.
    assert k1["step"] == 1 and k1["start_ns"] == 30_000 and k1["dur_ns"] == 400_000
    assert k1["grid"] == "132,1,1" and k1["block"] == "256,1,1"
    assert k1["registers"] == 168 and k1["shared_memory"] == 98304 and k1["stream"] == 7
    assert k1["op"] == "aten::mm" and k1["op_class"] == "matmul" and k1["phase"] == "t_f"
    assert k1["launch_start_ns"] == 20_000 and k1["launch_dur_ns"] == 6_000
    cp = [o for o in ops if o["kind"] == "memcpy"][0]
    assert cp["bytes"] == 4096 and cp["step"] == 0
    assert per_step_counts(ops, 2) == {"kernels_per_iter": 1.0, "copies_per_iter": 1.0}
    # the rows before encoding are what decoding gives back (the bucket matcher reads them)
    assert rows(td) == ops
    for doc in (shapes_doc(), gpu_trace_doc()):
        assert rows(from_chrome_trace(doc)) == decode(encode(from_chrome_trace(doc)))


def test_timeline_refuses_foreign_and_corrupt_data():
    with pytest.raises(ValueError, match="format"):
        decode({"format": "other/1", "data": ""})
    enc = encode(from_chrome_trace(two_step_doc()))
    with pytest.raises(ValueError, match="re-run the point with --timeline"):
        decode({**enc, "data": enc["data"][:-12]})
    with pytest.raises(ValueError, match="no traced steps"):
        encode(TraceData(ops=[], steps=[], device_kind="gpu", source="t"))
    with pytest.raises(ValueError, match="no traced steps"):
        rows(TraceData(ops=[], steps=[], device_kind="gpu", source="t"))


def shapes_doc():
    """One step traced with shapes: aten::linear > aten::addmm (profiler FLOPs, fp32 dims)
    launching a GEMM kernel, then aten::relu (dims, no FLOPs) and a kernel launched under an
    op traced without shapes."""
    mm = {"flops": 2 * 8 * 16 * 32, "Input Dims": [[32], [8, 16], [16, 32], [], []],
          "Input type": ["float", "float", "float", "Scalar", "Scalar"]}
    relu = {"Input Dims": [[8, 32]], "Input type": ["c10::BFloat16"]}
    evs = [_x("dlperf_step#0", "user_annotation", 0, 900),
           _x("aten::linear", "cpu_op", 10, 100, **{"Input Dims": [[8, 16], [32, 16], [32]],
                                                    "Input type": ["float"] * 3}),
           _x("aten::addmm", "cpu_op", 20, 80, **mm),
           _x("cudaLaunchKernel", "cuda_runtime", 30, 6, correlation=1),
           _x("aten::relu", "cpu_op", 200, 50, **relu),
           _x("cudaLaunchKernel", "cuda_runtime", 210, 6, correlation=2),
           _x("aten::neg", "cpu_op", 300, 50),
           _x("cudaLaunchKernel", "cuda_runtime", 310, 6, correlation=3)]
    evs += [_x(k, "kernel", t, 40, tid=7, correlation=c, stream=7)
            for k, t, c in (("sm90_gemm", 40, 1), ("relu_kernel", 220, 2), ("neg_kernel", 320, 3))]
    return {"traceEvents": evs}


def test_timeline_keeps_the_launching_ops_flops_and_input_bytes():
    ops = {o["name"]: o for o in decode(encode(from_chrome_trace(shapes_doc())))}
    g = ops["sm90_gemm"]
    # FLOPs of aten::addmm (not of the outer aten::linear, the op column), bytes of its
    # fp32 tensor inputs: bias 32, input 8x16, weight^T 16x32; Scalars count nothing.
    assert g["op"] == "aten::linear" and g["op_flops"] == 2 * 8 * 16 * 32
    assert g["op_bytes"] == 4 * (32 + 8 * 16 + 16 * 32)
    assert ops["relu_kernel"]["op_flops"] is None and ops["relu_kernel"]["op_bytes"] == 2 * 8 * 32
    assert ops["neg_kernel"]["op_flops"] is None and ops["neg_kernel"]["op_bytes"] is None


def test_cpu_host_op_rows_carry_their_ops_flops_and_bytes():
    doc = shapes_doc()
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e["cat"] in ("cpu_op",
                                                                       "user_annotation")]
    ops = decode(encode(from_chrome_trace(doc)))
    by = {o["name"]: o for o in ops}
    assert by["aten::addmm"]["op_flops"] == 2 * 8 * 16 * 32
    assert by["aten::addmm"]["op_bytes"] == 4 * (32 + 8 * 16 + 16 * 32)
    assert by["aten::linear"]["op_flops"] is None  # linear reports none; addmm under it does
    assert by["aten::linear"]["op_bytes"] == 4 * (8 * 16 + 32 * 16 + 32)


def test_a_timeline_stored_before_the_cost_columns_decodes_them_as_none():
    enc = encode(from_chrome_trace(shapes_doc()))
    doc = json.loads(zlib.decompress(base64.b64decode(enc["data"])))
    for c in ("op_flops", "op_bytes"):
        del doc["cols"][c]
    old = {**enc, "columns": [c for c in enc["columns"] if c not in ("op_flops", "op_bytes")],
           "data": base64.b64encode(zlib.compress(json.dumps(doc).encode())).decode()}
    ops = decode(old)
    assert len(ops) == 3 and {o["name"] for o in ops} >= {"sm90_gemm"}
    assert all(o["op_flops"] is None and o["op_bytes"] is None for o in ops)
    assert [o["start_ns"] for o in ops] == [o["start_ns"] for o in decode(enc)]


def _record(run_key="k1", timeline=None):
    rec = RunRecord.from_dict({"run_key": run_key, "status": "ok", "model": "m",
                               "framework": "torch", "mode": "eager", "device": "cuda",
                               "precision": "fp32", "batch_size": 8,
                               "summary": {"median": 0.01}})
    if timeline is not None:
        rec.timeline = timeline
    return rec


def test_store_keeps_the_timeline_out_of_result_json(tmp_path):
    enc = encode(from_chrome_trace(two_step_doc()))
    db = tmp_path / "r.db"
    with ResultStore(db) as s:
        rid = s.add(_record(timeline=enc))
        s.add(_record("k2"))
        row = s._db.execute("SELECT result_json FROM results WHERE id=?", (rid,)).fetchone()[0]
        assert enc["data"] not in row and '"n_ops": 4' in row
    with ResultStore(db, read_only=True) as s:
        recs = {r.identity.run_key: r for r in s.records()}
        assert recs["k1"].timeline.n_ops == 4 and recs["k1"].timeline.data is None
        back = timelines.load(s, recs["k1"].stored.id)
        assert decode(back) == decode(enc)
        assert timelines.load(s, recs["k2"].stored.id) is None
        with pytest.raises(Exception, match="no result with id 999"):
            timelines.load(s, 999)


def test_a_version_8_file_gets_the_timelines_table(tmp_path):
    db = tmp_path / "old.db"
    with ResultStore(db) as s:
        s.add(_record())
    con = sqlite3.connect(db)
    con.execute("DROP TABLE timelines")
    con.execute("UPDATE meta SET value='8' WHERE key='schema_version'")
    con.commit()
    con.close()
    with ResultStore(db) as s:
        assert s.schema_version == SCHEMA_VERSION >= 9  # the current version, 9 or later
        s.add(_record("k3", timeline=encode(from_chrome_trace(two_step_doc()))))
        assert s._db.execute("SELECT COUNT(*) FROM timelines").fetchone()[0] == 1


# --- the untraced dispatch probe ------------------------------------------------------------

class FakeDevice:
    """A step whose host part takes ``h`` and device part ``d`` on a virtual clock: the host
    returns after ``h``; waiting for the output ends ``d`` after the launch started."""

    def __init__(self, h, d):
        self.t, self.h, self.d, self.done = 0.0, h, d, 0.0

    def clock(self):
        return self.t

    def step(self):
        start = self.t
        self.t += self.h
        self.done = max(self.done, start) + self.d
        return self.done

    def wait(self, done):
        self.t = max(self.t, done)


@pytest.mark.parametrize("h,d", [(0.002, 0.010), (0.010, 0.002)])
def test_dispatch_probe_separates_host_from_device(h, d):
    dev = FakeDevice(h, d)
    out = probe_dispatch(dev.step, dev.wait, 4, clock=dev.clock)
    assert out["iters"] == 4 and len(out["dispatch_samples"]) == 4
    assert out["dispatch_s"]["median"] == pytest.approx(h)
    # Device-bound: the wait after dispatch is the device time the host did not cover.
    assert out["sync_wait_s"]["median"] == pytest.approx(max(d - h, 0.0), abs=1e-12)


def test_probe_count_respects_the_budget_and_refuses_zero():
    assert probe_count(None) == 5 and probe_count(0.01) == 5
    assert probe_count(0.4) == 2 and probe_count(30.0) == 1
    with pytest.raises(ValueError, match="n >= 1"):
        probe_dispatch(lambda: None, lambda h: None, 0)


def test_dispatch_into_records_samples_and_skips_a_cpu_device():
    dev = FakeDevice(0.003, 0.001)
    session = SimpleNamespace(step=dev.step, losses_to_floats=lambda hs: [dev.wait(hs[0])],
                              clock=dev.clock, dist=None)
    samples: dict = {}
    out = dispatch_into(samples, SimpleNamespace(hardware=SimpleNamespace(device="cuda")), session,
                        0.004)
    assert out["dispatch_s"]["median"] == pytest.approx(0.003)
    assert len(samples[DISPATCH_SAMPLE]) == out["iters"] == 5
    cpu = dispatch_into({}, SimpleNamespace(hardware=SimpleNamespace(device="cpu")), session, 0.004)
    assert cpu["dispatch_s"] is None and "CPU device" in cpu["reason"]

    def boom():
        raise RuntimeError("CUDA error: launch failure")

    bad = dispatch_into({}, SimpleNamespace(hardware=SimpleNamespace(device="cuda")),
                        SimpleNamespace(step=boom, losses_to_floats=lambda h: h, dist=None), None)
    assert bad["dispatch_s"] is None and "launch failure" in bad["error"]
