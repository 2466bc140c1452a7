"""Exposed communication of JAX data-parallel runs: the XSpace parser and its interval
arithmetic on synthetic traces with known overlap (GPU stream kernels; XLA:CPU thunks), the
JAX adapter's profiler failures as recorded reasons, and the worker's guard."""

from __future__ import annotations

import gzip
import json
from types import SimpleNamespace

import pytest

from dlperf.measure.breakdown.overlap import COLLECTIVE_OP, exposed_from_xspace, spans_from_xspace
from dlperf.measure.breakdown.xspace import XEvent, XLine, XPlane, load_planes, steps_of

US = 1_000  # ns per microsecond


def _x(pid, tid, name, ts, dur, **args):
    return {"ph": "X", "pid": pid, "tid": tid, "name": name, "ts": ts, "dur": dur, "args": args}


def _gpu_trace(path):
    """A two-GPU trace in the shape jax.profiler writes for sharded jit (times in us).

    Per device: a compute stream with fusions / a cuBLAS gemm and a NCCL stream whose kernel
    belongs to ``all-reduce-start.1``; the derived ``XLA Ops`` line repeats the ops (must not
    count twice); a memcpy on the compute stream is neither computation nor communication.
    Step annotations on the host: a warm-up step (unannotated) before 1000 us, then two steps.
    """
    meta = [{"ph": "M", "name": "process_name", "pid": p, "args": {"name": n}}
            for p, n in ((1, "/host:CPU"), (2, "/device:GPU:0"), (3, "/device:GPU:1"))]
    for p, t, n in ((1, 1, "python"), (2, 1, "Stream #13(compute)"), (2, 2, "Stream #20(nccl)"),
                    (2, 3, "XLA Ops"), (3, 1, "Stream #13(compute)"),
                    (3, 2, "Stream #20(nccl)"), (3, 3, "XLA Ops")):
        meta.append({"ph": "M", "name": "thread_name", "pid": p, "tid": t, "args": {"name": n}})
    ev = [_x(1, 1, "dlperf_step", 1000, 400, step_num=0),
          _x(1, 1, "dlperf_step", 1500, 400, step_num=1)]
    # warm-up step's ops (before the first annotated step): excluded
    ev += [_x(2, 1, "loop_fusion", 100, 300, hlo_op="fusion.1"),
           _x(2, 2, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 300, 500,
              hlo_op="all-reduce-start.1")]
    for base in (1000, 1500):
        # GPU 0: compute [b+0, b+100] [b+100, b+180] [b+260, b+300]; all-reduce [b+150, b+280]
        # -> comm 130; overlapped [150, 180] + [260, 280] = 50; exposed 80 per step
        ev += [_x(2, 1, "input_fusion_convolution", base, 100, hlo_op="fusion.7"),
               _x(2, 1, "sm90_xmma_gemm_f32f32", base + 100, 80, hlo_op="custom-call.3"),
               _x(2, 1, "MemcpyD2D", base + 200, 50, memcpy_details="kind:D2D"),
               _x(2, 1, "loop_add_fusion", base + 260, 40, hlo_op="fusion.9"),
               _x(2, 2, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", base + 150, 130,
                  hlo_op="all-reduce-start.1"),
               _x(2, 3, "all-reduce-start.1", base + 150, 130),
               _x(2, 3, "fusion.9", base + 200, 300)]
        # GPU 1: compute [b+0, b+200]; all-reduce [b+100, b+300] -> comm 200, overlapped 100,
        # exposed 100 per step
        ev += [_x(3, 1, "input_fusion_convolution", base, 200, hlo_op="fusion.7"),
               _x(3, 2, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", base + 100, 200,
                  hlo_op="all-reduce-start.1")]
    folder = path / "plugins" / "profile" / "run1"
    folder.mkdir(parents=True)
    with gzip.open(folder / "host.trace.json.gz", "wt") as f:
        json.dump({"traceEvents": meta + ev}, f)
    return path


def test_gpu_trace_exposed_communication_is_exact(tmp_path):
    planes, xplane = load_planes(_gpu_trace(tmp_path))
    assert xplane is None  # read from the Chrome-trace JSON
    steps = steps_of(planes)
    assert [s for s, _ in steps] == [1000 * US, 1500 * US]
    r = exposed_from_xspace(planes, iterations=2, since_ns=steps[0][0])
    assert r["rule"] == "xspace-gpu-streams" and r["reason"] is None
    assert r["devices"] == 2 and r["n_comm_spans"] == 4
    assert r["comm_ops"] == ["all-reduce-start.1"]
    g0, g1 = r["per_device"]["/device:GPU:0"], r["per_device"]["/device:GPU:1"]
    assert g0["comm"] == pytest.approx(130e-6) and g0["overlapped"] == pytest.approx(50e-6)
    assert g0["exposed"] == pytest.approx(80e-6) and g0["compute"] == pytest.approx(220e-6)
    assert g1["comm"] == pytest.approx(200e-6) and g1["exposed"] == pytest.approx(100e-6)
    assert g1["overlapped"] == pytest.approx(100e-6)
    # the mean over the two devices; the share from the sums
    assert r["exposed"] == pytest.approx(90e-6) and r["comm"] == pytest.approx(165e-6)
    assert r["overlapped"] == pytest.approx(75e-6)
    assert r["hidden_share"] == pytest.approx(150 / 330)
    # without the step filter the warm-up step's kernels count too: GPU 0's warm-up all-reduce
    # [300, 800] overlaps its fusion [100, 400] by 100 us -> exposed 400 more, over 3 steps
    w = exposed_from_xspace(planes, iterations=3)
    assert w["per_device"]["/device:GPU:0"]["exposed"] == pytest.approx((160 + 400) * 1e-6 / 3)


def _thunk(name, start_us, dur_us, dev, hlo_op=None):
    return XEvent(name, start_us * US, dur_us * US,
                  {"hlo_op": hlo_op or name, "device_ordinal": dev, "hlo_module": "jit_step"})


def _flat(spans):
    return [t for s in spans for t in s]


def test_cpu_thunks_grouped_by_device_ordinal_and_parents_dropped():
    # XLA:CPU: one device's thunks on several pool threads; a `call` thunk around the
    # all-reduce on the same thread is its parent, not computation overlapping it.
    t1 = XLine("tf_XLAEigen/1", [_thunk("fusion", 0, 50, 0), _thunk("all-reduce.2", 60, 40, 0),
                                 _thunk("call.1", 55, 50, 1),
                                 _thunk("all-reduce.2", 58, 45, 1),
                                 XEvent("ThunkExecutor::Execute (wait for completion)", 0,
                                        200 * US, {"device_ordinal": 0})])
    t2 = XLine("tf_XLAEigen/2", [_thunk("dot.1", 40, 30, 0), _thunk("fusion.3", 0, 58, 1),
                                 XEvent("end: dot.1", 70 * US, 0, {})])
    planes = [XPlane("/host:metadata", []), XPlane("/host:CPU", [t1, t2])]
    spans, rule = spans_from_xspace(planes)
    assert rule == "xspace-cpu-thunks" and set(spans) == {"/device:CPU:0", "/device:CPU:1"}
    d0, d1 = spans["/device:CPU:0"], spans["/device:CPU:1"]
    assert _flat(d0["comm"]) == pytest.approx([60e-6, 100e-6])
    assert d0["comm_ops"] == ["all-reduce.2"]
    assert _flat(sorted(d0["compute"])) == pytest.approx([0.0, 50e-6, 40e-6, 70e-6])
    assert _flat(d1["compute"]) == pytest.approx([0.0, 58e-6])  # call.1 (the parent) dropped
    r = exposed_from_xspace(planes, iterations=1)
    # device 0: comm [60, 100], compute [0, 70] -> overlapped 10, exposed 30
    # device 1: comm [58, 103], compute [0, 58] -> overlapped 0, exposed 45
    assert r["per_device"]["/device:CPU:0"]["exposed"] == pytest.approx(30e-6)
    assert r["per_device"]["/device:CPU:1"]["exposed"] == pytest.approx(45e-6)
    assert r["exposed"] == pytest.approx(37.5e-6) and r["n_comm_spans"] == 2


def test_no_device_ops_or_no_collectives_give_a_reason():
    empty = exposed_from_xspace([XPlane("/host:CPU", [XLine("python", [
        XEvent("PjitFunction(step)", 0, 10, {})])])], iterations=2)
    assert empty["exposed"] is None and "no device op events" in empty["reason"]
    no_comm = exposed_from_xspace([XPlane("/host:CPU", [XLine("t", [_thunk("fusion", 0, 5, 0)])])],
                                  iterations=2)
    assert no_comm["exposed"] is None and "no collective ops" in no_comm["reason"]
    assert no_comm["devices"] == 1
    with pytest.raises(ValueError, match="iterations"):
        exposed_from_xspace([], iterations=0)


@pytest.mark.parametrize("name,is_comm", [
    ("all-reduce.2", True), ("all-reduce-start.1", True), ("all-gather-done.3", True),
    ("reduce-scatter.7", True), ("collective-permute-start", True), ("psum", True),
    ("add_reduce_fusion", False), ("reduce-window.2", False), ("fusion.12", False)])
def test_collective_names(name, is_comm):
    assert bool(COLLECTIVE_OP.search(name)) is is_comm


class _FakeProfiler:
    """jax.profiler's surface used by the adapter; fails where told."""

    def __init__(self, fail: str | None):
        self.fail, self.calls = fail, []

    def start_trace(self, folder, **kw):
        self.calls.append("start")
        if self.fail == "start":
            raise RuntimeError("Profile has already been started")

    def stop_trace(self):
        self.calls.append("stop")
        if self.fail == "stop":
            raise RuntimeError("no trace to stop")

    def StepTraceAnnotation(self, name, step_num):  # noqa: N802 - jax's name
        import contextlib

        return contextlib.nullcontext()


@pytest.mark.parametrize("fail,reason", [("start", "did not start"), ("stop", "did not stop"),
                                         (None, "could not be read")])
def test_profiler_failure_is_a_reason_and_every_step_still_runs(fail, reason):
    from dlperf.frameworks.jax.profile import profile_comm

    prof = _FakeProfiler(fail)
    fake_jax = SimpleNamespace(profiler=prof, block_until_ready=lambda x: x)
    steps = []
    run = SimpleNamespace(step=lambda: steps.append(1) or 0.0, state=None)
    out = profile_comm(fake_jax, run, 3)
    assert len(steps) == 4  # one warm-up + k, whatever the profiler did (ranks stay matched)
    assert out["exposed"] is None and reason in out["reason"]
    assert out["profiled_iters"] == 3 and out["profiled_wall_s_per_iter"] >= 0
    assert prof.calls == (["start"] if fail == "start" else ["start", "stop"])


def test_a_failed_step_under_the_profiler_stops_the_trace():
    from dlperf.frameworks.jax.profile import profile_comm

    prof = _FakeProfiler(None)
    fake_jax = SimpleNamespace(profiler=prof, block_until_ready=lambda x: x)

    def step():
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        profile_comm(fake_jax, SimpleNamespace(step=step, state=None), 2)
    assert prof.calls == ["start", "stop"]


def test_worker_records_a_failing_comm_profile(monkeypatch):
    from dlperf import registry, worker
    from dlperf.config import IterationPolicy, make_run_config
    from dlperf.frameworks.base import DistContext, TrainingRun
    from dlperf.measure.timers import HostTimer

    monkeypatch.setitem(registry.FRAMEWORK_MODES, "fake", ("eager",))

    def boom(k):
        raise RuntimeError(f"profiler exploded after {k} iterations")

    class Adapter:
        name, modes = "fake", ("eager",)

        def available(self):
            return True, "test"

        def is_oom(self, e):
            return False

        def prepare(self, cfg, spec):
            class Run(TrainingRun):
                timer, versions, flags, data_info = HostTimer(), {}, {}, {}
                dist = DistContext(replicas=2)
                comm_profile = staticmethod(boom)

                def staged_step(self, mark):
                    return 1.0

                def memory(self):
                    return {"peak_rss_bytes": 1}

            return Run()

    monkeypatch.setattr(worker, "get_adapter", lambda name: Adapter())
    cfg = make_run_config(model="fcn5_tiny", framework="fake", batch_size=16, nproc=2,
                          comm_profile_iters=3, measure_ceilings=False,
                          iterations=IterationPolicy(min_iters=3, min_time_s=0.0, warmup_window=2,
                                                     min_warmup_iters=0, max_warmup_iters=3))
    r = worker.run_config(cfg)
    assert r["status"] == "ok", r["error"]
    c = r["dist"]["comm"]
    assert c["exposed"] is None and "profiler exploded after 3 iterations" in c["reason"]
    assert r["exposed_comm_s"] is None and "comm_profile" in r["worker"]["phases_s"]


def test_combine_rank_comm_takes_the_device_that_waits_least():
    from dlperf.measure.breakdown.overlap import combine_rank_comm
    from dlperf.results.schema import RunRecord
    from dlperf.worker import quality_warnings
    r0 = {"comm": 0.020, "exposed": 0.0167, "profiled_wall_s_per_iter": 0.0505, "rule": "gpu-kernels"}
    r1 = {"comm": 0.004, "exposed": 0.0015, "profiled_wall_s_per_iter": 0.0500, "rule": "gpu-kernels"}
    c = combine_rank_comm([r0, r1], measured_step_s=0.0317)
    assert c["exposed"] == 0.0015 and c["exposed_max"] == 0.0167
    assert c["exposed_mean"] == pytest.approx((0.0167 + 0.0015) / 2)
    assert c["exposed_per_device"] == {"rank0": 0.0167, "rank1": 0.0015}
    assert c["comm"] == 0.020  # rank 0's other numbers stay as they were
    assert c["profiled_slowdown"] == pytest.approx(0.0505 / 0.0317)
    w = quality_warnings(RunRecord.from_dict({"dist": {"comm": c}}))
    assert any("1.59x the measured step" in x for x in w)
    assert not quality_warnings(
        RunRecord.from_dict({"dist": {"comm": combine_rank_comm([r0], 0.0500)}}))
    # one process driving two devices: its per-device numbers; ranks without numbers skipped
    jax_c = {"exposed": 0.5, "per_device": {"/device:GPU:0": {"exposed": 0.4},
                                            "/device:GPU:1": {"exposed": 0.6}}}
    c = combine_rank_comm([jax_c, {"exposed": None, "reason": "x"}])
    assert c["exposed"] == 0.4 and set(c["exposed_per_device"]) == {
        "rank0:/device:GPU:0", "rank0:/device:GPU:1"} and c["profiled_slowdown"] is None
    assert combine_rank_comm([None, None]) is None
    assert combine_rank_comm([{"exposed": None, "reason": "no trace"}])["reason"] == "no trace"
