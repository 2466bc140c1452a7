"""Breakdown logic without a framework: trace attribution, trace readers, phase timers,
reconciliation, report tables, storage and configuration (issue 4)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from dlperf.config import ConfigError, IterationPolicy, RunConfig, SweepConfig, make_run_config
from dlperf.measure.breakdown import phases as bph
from dlperf.measure.breakdown.torch_trace import from_chrome_trace
from dlperf.measure.breakdown.trace import TraceData, TraceOp, analyse, attribute, union_length
from dlperf.measure.breakdown.xla import (
    infer_phases,
    jax_names,
    jax_phase,
    parse_hlo,
    tf_names,
    tf_phase,
)
from dlperf.measure.phases import (
    CudaPhaseTimer,
    HostPhaseTimer,
    LaggedPhaseTimer,
    PhaseLoopResult,
    measure_phases,
)
from dlperf.results.schema import RunRecord
from dlperf.results.view import as_record, as_records
from fakes import FakeClock

# --- attribution -----------------------------------------------------------------------------


def test_union_and_attribution_split_overlaps_equally():
    ops = [TraceOp("a", 0.0, 4.0), TraceOp("b", 2.0, 6.0), TraceOp("c", 8.0, 9.0)]
    assert union_length([(o.start_s, o.end_s) for o in ops]) == 7.0
    # [0,2): a alone; [2,4): a and b share; [4,6): b alone; [8,9): c.
    assert attribute(ops) == [3.0, 3.0, 1.0]


def test_attribution_of_nested_and_zero_length_ops():
    ops = [TraceOp("outer", 0.0, 10.0), TraceOp("inner", 2.0, 4.0), TraceOp("empty", 5.0, 5.0)]
    share = attribute(ops)
    assert share == [9.0, 1.0, 0.0]
    assert math.fsum(share) == union_length([(0.0, 10.0), (2.0, 4.0)])


def test_analyse_busy_fraction_classes_phases_and_dispatch():
    # Two steps of 10 s wall each: a conv (t_f, 4 s) and a gemm (t_b, 3 s); 3 s idle each.
    ops = []
    for k in range(2):
        t = 10.0 * k
        ops.append(TraceOp("conv_kernel", t, t + 4.0, ops=("aten::conv2d",), phase="t_f", step=k))
        ops.append(TraceOp("gemm_kernel", t + 5.0, t + 8.0, ops=("aten::mm",), phase="t_b", step=k))
    ops.append(TraceOp("idle_end", 19.0, 20.0, ops=("aten::_foreach_add_",), phase="t_u", step=1))
    trace = TraceData(ops=ops, steps=[(0.0, 1.0), (10.0, 12.0)], device_kind="gpu", source="test")
    a = analyse(trace)
    assert a["n_steps"] == 2
    assert a["span_s"] == 20.0 and a["step_wall_s"] == 10.0
    assert a["busy_s"] == pytest.approx(7.5)           # (4 + 3) * 2 + 1 over 2 steps
    assert a["idle_s"] == pytest.approx(2.5)
    assert a["busy_fraction"] == pytest.approx(15.0 / 20.0)
    assert a["op_classes"]["convolution"] == pytest.approx(4.0)
    assert a["op_classes"]["matmul"] == pytest.approx(3.0)
    assert a["op_classes"]["optimizer"] == pytest.approx(0.5)
    assert math.fsum(a["op_classes"].values()) == pytest.approx(a["busy_s"])
    assert a["phase_samples"]["t_f"] == [4.0, 4.0]
    assert a["phase_samples"]["t_u"] == [0.0, 1.0]
    assert a["dispatch_samples"] == [1.0, 2.0] and a["dispatch_s"]["median"] == 1.5
    assert a["top_ops"][0]["name"] == "conv_kernel" and a["top_ops"][0]["calls"] == 1.0


def test_analyse_keeps_top_names_per_class_with_the_classifier_inputs():
    # one kernel name in two classes (a torch bias add inside a convolution and on its own),
    # and more unclassified names than a class keeps
    from dlperf.measure.breakdown import trace as tr

    ops = [TraceOp("add_kernel", 0.0, 2.0, ops=("aten::convolution", "add_kernel"), step=0),
           TraceOp("add_kernel", 2.0, 3.0, ops=("aten::add", "add_kernel"), step=0)]
    ops += [TraceOp(f"mystery_{i}", 3.0 + i, 3.5 + i, ops=(f"mystery_{i}",), step=0,
                    layers=("blk",), context=("ctx",)) for i in range(tr.TOP_OTHER + 3)]
    a = analyse(TraceData(ops=ops, steps=[(0.0, 1.0)], device_kind="gpu", source="test"))
    tbc = a["top_by_class"]
    assert [(t["name"], t["s"]) for t in tbc["convolution"]] == [("add_kernel", 2.0)]
    assert [(t["name"], t["s"]) for t in tbc["elementwise"]] == [("add_kernel", 1.0)]
    assert tbc["convolution"][0]["ops"] == ["aten::convolution", "add_kernel"]
    other = tbc["other"]
    assert len(other) == tr.TOP_OTHER and other[0]["layers"] == ["blk"]
    assert other[0]["context"] == ["ctx"] and other[0]["calls"] == 1.0
    assert math.fsum(t["s"] for t in other) == pytest.approx(0.5 * tr.TOP_OTHER)
    # top_ops, by name across classes, keeps the first class it saw
    assert a["top_ops"][0]["name"] == "add_kernel" and a["top_ops"][0]["s"] == 3.0


def test_analyse_needs_steps():
    with pytest.raises(ValueError, match="no traced steps"):
        analyse(TraceData(ops=[], steps=[], device_kind="cpu", source="t"))


# --- torch.profiler Chrome trace ----------------------------------------------------------------

def _x(name, cat, ts, dur, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid,
            "args": args}


def gpu_trace_doc():
    """A small GPU trace in Kineto's format: one step; forward linear, backward on the autograd
    thread (tid 2), optimizer; kernels on stream 7 linked by correlation ids."""
    return {"traceEvents": [
        _x("dlperf_step#0", "user_annotation", 0, 1000),
        _x("aten::linear", "cpu_op", 10, 100),
        _x("aten::addmm", "cpu_op", 20, 80),
        _x("cudaLaunchKernel", "cuda_runtime", 30, 5, correlation=1),
        _x("autograd::engine::evaluate_function: AddmmBackward0", "cpu_op", 200, 200, tid=2),
        _x("AddmmBackward0", "cpu_op", 205, 190, tid=2),
        _x("aten::mm", "cpu_op", 210, 50, tid=2),
        _x("cudaLaunchKernel", "cuda_runtime", 220, 5, tid=2, correlation=2),
        _x("Optimizer.step#SGD.step", "user_annotation", 500, 300),
        _x("aten::_foreach_add_", "cpu_op", 510, 50),
        _x("cudaLaunchKernel", "cuda_runtime", 520, 5, correlation=3),
        _x("aten::copy_", "cpu_op", 850, 20),
        _x("cudaMemcpyAsync", "cuda_runtime", 855, 5, correlation=4),
        {"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n", "pid": 0,
         "tid": 7, "ts": 40, "dur": 300, "args": {"correlation": 1, "stream": 7}},
        {"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_nn", "pid": 0, "tid": 7,
         "ts": 340, "dur": 200, "args": {"correlation": 2}},
        {"ph": "X", "cat": "kernel", "name": "void at::native::multi_tensor_apply_kernel", "pid": 0,
         "tid": 7, "ts": 640, "dur": 100, "args": {"correlation": 3}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "pid": 0,
         "tid": 7, "ts": 900, "dur": 100, "args": {"correlation": 4}},
    ]}


def test_torch_gpu_trace_kernels_get_their_host_stack():
    td = from_chrome_trace(gpu_trace_doc())
    assert td.device_kind == "gpu" and td.steps == [(0.0, 1000e-6)]
    by = {o.name: o for o in td.ops}
    fwd = by["sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n"]
    assert fwd.ops[0] == "aten::linear" and fwd.phase == "t_f" and fwd.step == 0
    assert fwd.op_class == "matmul"
    bwd = by["ampere_sgemm_128x64_nn"]
    assert bwd.phase == "t_b" and bwd.op_class == "matmul" and bwd.step == 0
    upd = by["void at::native::multi_tensor_apply_kernel"]
    assert upd.phase == "t_u" and upd.op_class == "optimizer"
    cp = by["Memcpy DtoD (Device -> Device)"]
    assert cp.phase == "t_h2d" and cp.op_class == "memory_copy"
    a = analyse(td)
    # Kernels 40..740 without overlap plus the copy 900..1000: busy 700 us over a 960 us span.
    assert a["busy_s"] == pytest.approx(700e-6)
    assert a["busy_fraction"] == pytest.approx(700 / 960)
    assert a["phases"]["t_b"] == pytest.approx(200e-6)


def test_breakdown_traces_the_cpu_side_that_finds_its_steps():
    """The breakdown's torch trace must keep CPU activity on a GPU: its steps are the
    record_function spans (CPU events). Traced with CUDA only (as the H200 breakdown was for a
    while) the same trace keeps only kernels and has no steps."""
    from types import SimpleNamespace

    from dlperf.frameworks.torch.adapter import trace_activities

    act = SimpleNamespace(CPU="CPU", CUDA="CUDA")
    assert trace_activities(act, cuda=True, purpose="breakdown") == ["CPU", "CUDA"]
    assert trace_activities(act, cuda=False, purpose="breakdown") == ["CPU"]
    assert trace_activities(act, cuda=True, purpose="comm") == ["CUDA"]
    with pytest.raises(ValueError, match="breakdown"):
        trace_activities(act, cuda=True, purpose="phases")
    kernels_only = {"traceEvents": [e for e in gpu_trace_doc()["traceEvents"]
                                    if e["cat"] in ("kernel", "gpu_memcpy")]}
    with pytest.raises(ValueError, match="no traced steps"):
        analyse(from_chrome_trace(kernels_only))
    assert from_chrome_trace(gpu_trace_doc()).steps  # with the CPU side: one step


def test_torch_cpu_trace_self_time_slices():
    doc = {"traceEvents": [
        _x("dlperf_step#0", "user_annotation", 0, 100),
        _x("aten::adaptive_avg_pool2d", "cpu_op", 10, 50),
        _x("aten::mean", "cpu_op", 12, 40),
        _x("aten::copy_", "cpu_op", 20, 10),
        _x("autograd::engine::evaluate_function: ConvolutionBackward0", "cpu_op", 70, 20),
        _x("aten::convolution_backward", "cpu_op", 72, 15),
    ]}
    td = from_chrome_trace(doc)
    assert td.device_kind == "cpu"
    a = analyse(td)
    # Self time: pool 10 (10..12, 52..60), mean 30, copy 10, node 5, conv bwd 15.
    assert a["op_classes"]["pooling"] == pytest.approx(50e-6)   # pool+mean+copy under pool
    assert a["op_classes"]["convolution"] == pytest.approx(20e-6)
    assert a["busy_s"] == pytest.approx(70e-6)
    assert a["phases"]["t_b"] == pytest.approx(20e-6)
    names = {t["name"]: t for t in a["top_ops"]}
    assert names["aten::adaptive_avg_pool2d"]["s"] == pytest.approx(10e-6)
    assert names["aten::adaptive_avg_pool2d"]["calls"] == 1.0  # two slices, one call


# --- HLO text -------------------------------------------------------------------------------

HLO = '''HloModule jit_train_step, is_scheduled=true

FileNames
1 "/x/optax/_src/transform.py"
2 "/x/flax/linen/normalization.py"
3 "/x/optax/losses/_classification.py"

FunctionNames
1 "trace.<locals>.update_fn"
2 "BatchNorm.__call__"
3 "softmax_cross_entropy_with_integer_labels"

FileLocations
1 {file_name_id=1 function_name_id=1 line=1 end_line=1 column=1 end_column=2}
2 {file_name_id=2 function_name_id=2 line=1 end_line=1 column=1 end_column=2}
3 {file_name_id=3 function_name_id=3 line=1 end_line=1 column=1 end_column=2}

StackFrames
1 {file_location_id=1 parent_frame_id=0}
2 {file_location_id=2 parent_frame_id=0}
3 {file_location_id=3 parent_frame_id=0}

%fused_computation.8 (param_0.11: f32[4,8], param_1.11: f32[]) -> f32[8] {
  %param_0.11 = f32[4,8]{1,0} parameter(0)
  %param_1.11 = f32[] parameter(1)
  ROOT %reduce.1 = f32[8]{0} reduce(%param_0.11, %param_1.11), dimensions={0}, to_apply=%region_0.1, metadata={op_name="jit(train_step)/jvp(ResNet)/layer1_0/bn1/reduce_sum" stack_frame_id=2}
}

ENTRY %main.24 (p.1: f32[4,8], w.1: f32[8,8]) -> (f32[8], f32[8,8]) {
  %p.1 = f32[4,8]{1,0} parameter(0), metadata={op_name="x"}
  %w.1 = f32[8,8]{1,0} parameter(1), metadata={op_name="st['params']"}
  %constant.65 = f32[] constant(0)
  %conv_general_dilated.2 = f32[4,8]{1,0} convolution(%p.1, %w.1), dim_labels=bf_io->bf, metadata={op_name="jit(train_step)/jvp(ResNet)/layer1_0/conv1/conv_general_dilated"}
  %ynn_fusion.8 = f32[8]{0} fusion(%conv_general_dilated.2, %constant.65), kind=kCustom, calls=%fused_computation.8, backend_config={"fusion_config":{"kind":"__ynn_fusion"}}
  %wrapped_scatter = f32[4,8]{1,0} scatter(%p.1), metadata={op_name="jit(train_step)/transpose(jvp(jit(take_along_axis)))/scatter-add" stack_frame_id=3}
  %wrapped_iota = s32[4,8]{1,0} iota(), iota_dimension=1
  %select.9 = f32[4,8]{1,0} select(%wrapped_iota, %wrapped_scatter, %p.1)
  %convolution.5 = f32[8,8]{1,0} convolution(%select.9, %p.1), dim_labels=bf_io->bf
  %copy.15 = f32[8,8]{1,0} copy(%w.1)
  %multiply_add_fusion.7 = f32[8,8]{1,0} add(%convolution.5, %w.1), metadata={op_name="jit(train_step)/add" stack_frame_id=1}
  %cublas-gemm.1 = (f32[8,8]{1,0}, s8[4]{0}) custom-call(%p.1, %w.1), custom_call_target="__cublas$gemm", metadata={op_name="jit(train_step)/jvp(ResNet)/fc/dot_general"}
  ROOT %tuple = (f32[8]{0}, f32[8,8]{1,0}) tuple(%ynn_fusion.8, %multiply_add_fusion.7)
}
'''


def test_parse_hlo_instructions_metadata_frames_and_fusions():
    t = parse_hlo(HLO)
    conv = t["conv_general_dilated.2"]
    assert conv.opcode == "convolution" and conv.operands == ("p.1", "w.1")
    fus = t["ynn_fusion.8"]
    assert fus.opcode == "fusion" and fus.fused == ("reduce",)
    assert fus.op_name.endswith("bn1/reduce_sum")       # the root's metadata
    assert fus.frames == (("BatchNorm.__call__", "/x/flax/linen/normalization.py"),)
    assert t["cublas-gemm.1"].target == "__cublas$gemm"
    assert t["tuple"].opcode == "tuple"
    assert t["wrapped_scatter"].frames[0][0] == "softmax_cross_entropy_with_integer_labels"


def test_jax_phases_and_classes_from_hlo():
    t = parse_hlo(HLO)
    inferred = infer_phases(t, jax_phase)
    assert inferred["conv_general_dilated.2"] == "t_f"
    assert inferred["wrapped_scatter"] == "t_b"
    assert inferred["convolution.5"] == "t_b"      # no metadata: consumes a backward value
    assert inferred["wrapped_iota"] == "t_b"       # no inputs: its user's phase
    assert inferred["copy.15"] is None              # a copy of a parameter nobody uses
    assert inferred["multiply_add_fusion.7"] == "t_u"

    def cls(name):
        d = jax_names(t[name], name, inferred[name])
        from dlperf.measure.breakdown.opclass import classify

        return classify(d["ops"], d["layers"], d["context"], d["phase"]), d["phase"]

    assert cls("conv_general_dilated.2") == ("convolution", "t_f")
    assert cls("ynn_fusion.8") == ("normalisation", "t_f")
    assert cls("wrapped_scatter") == ("loss", "t_b")
    assert cls("convolution.5") == ("convolution", "t_b")
    assert cls("multiply_add_fusion.7") == ("optimizer", "t_u")
    assert cls("cublas-gemm.1") == ("matmul", "t_f")
    assert cls("copy.15") == ("memory_copy", None)


def test_tensorflow_names_and_phases():
    assert tf_phase("gradient_tape/model/conv1/Conv2D/Conv2DBackpropFilter") == "t_b"
    assert tf_phase("SGD/Mul_2") == "t_u" and tf_phase("adamw_1/add") == "t_u"
    assert tf_phase("resnet50_1/conv1/Conv2D") == "t_f"
    d = tf_names("gradient_tape/resnet50_1/layer1.0.bn1_1/batchnorm/mul", "Mul",
                 model_scope="resnet50")
    assert d["layers"] == ("batchnorm", "layer1.0.bn1_1") and d["phase"] == "t_b"
    assert "resnet50_1" not in d["context"]
    d = tf_names("lstm_1/decoder_1/MatMul", "MatMul", model_scope="lstm")
    from dlperf.measure.breakdown.opclass import classify

    # The model's own scope ("lstm") must not make every op recurrent.
    assert classify(d["ops"], d["layers"], d["context"], d["phase"]) == "matmul"


# --- phase timers and loop --------------------------------------------------------------------


def test_host_phase_timer_exact_with_fake_clock_and_waits():
    clock = FakeClock()
    waited = []

    def block(h):
        waited.append(h)
        clock.t += 0.5   # the device finishes 0.5 s after the host issued the phase

    timer = HostPhaseTimer(block=block, clock=clock)
    timer.start()
    for it in range(2):
        clock.t += 1.0
        timer.mark("t_io")
        clock.t += 0.25
        timer.mark("t_fbu", handle=f"loss{it}")
        timer.end_iteration()
    dev, host = timer.collect()
    assert dev == [{"t_io": 1.0, "t_fbu": 0.75}] * 2
    assert host == [{"t_io": 1.0, "t_fbu": 0.25}] * 2
    assert waited == ["loss0", "loss1"]


def _run_lagged(host_io, host_dispatch, device, n=6):
    """A fake asynchronous device: the host spends ``host_io`` + ``host_dispatch`` per
    iteration, the device ``device`` per step, starting when free and the step is issued."""
    clock = FakeClock()
    device_free = [0.0]
    done_at: dict[str, float] = {}
    waited = []

    def block(h):
        waited.append(h)
        clock.t = max(clock.t, done_at[h])

    timer = LaggedPhaseTimer(block=block, lag=2, clock=clock)
    timer.start()
    for it in range(n):
        clock.t += host_io
        timer.mark("t_io")
        clock.t += host_dispatch
        device_free[0] = max(device_free[0], clock.t) + device
        done_at[f"loss{it}"] = device_free[0]
        timer.mark("t_fbu", handle=f"loss{it}")
        timer.end_iteration()
    dev, host = timer.collect()
    assert waited == [f"loss{i}" for i in range(n)]
    return dev, host


def test_lagged_phase_timer_device_bound_hides_the_input_phase():
    """Host 0.25 s per iteration (t_io 0.05 + dispatch 0.2), device 1.0 s: nothing waits at the
    phase boundaries, every completion interval after the first is the device's 1.0 s (what
    the fused loop measures), and t_io is hidden by the host's slack (0 on the device
    timeline, as a CUDA event would show); a blocking timer would give 1.25 s."""
    dev, host = _run_lagged(0.05, 0.2, 1.0)
    assert host == [pytest.approx({"t_io": 0.05, "t_fbu": 0.2})] * 6
    assert dev[0] == pytest.approx({"t_io": 0.0, "t_fbu": 1.25})  # 0.25 issue + 1.0 device
    for d in dev[1:]:
        assert d == pytest.approx({"t_io": 0.0, "t_fbu": 1.0})
    with pytest.raises(ValueError):
        LaggedPhaseTimer(block=lambda h: None, lag=0)


def test_lagged_phase_timer_host_bound_exposes_the_input_phase():
    """Host 1.0 s per iteration (t_io 0.6 + dispatch 0.4), device 0.5 s: the host sets the
    pace, so all of t_io kept the device waiting; the phases add up to the 1.0 s interval.
    (Completions are seen when the host waits, ``lag`` iterations later: the first interval
    holds the pipeline's fill and the drain's are 0, as in the fused loop's lagged timer; the
    total is the segment's.)"""
    dev, _ = _run_lagged(0.6, 0.4, 0.5)
    for d in dev[1:-2]:
        assert d == pytest.approx({"t_io": 0.6, "t_fbu": 0.4})
    # the segment: 6 host iterations of 1.0 s, then the last step's 0.5 s on the device
    assert math.fsum(math.fsum(d.values()) for d in dev) == pytest.approx(6.5)


def test_lagged_phase_timer_reason_when_host_phases_set_the_pace():
    loop = _loop([{"t_io": 0.012, "t_fbu": 0.0}] * 3, timer="lagged_host")
    bd, warns = bph.summarize(loop, FUSED, device="cuda")
    assert not bd["reconciled"] and "host phases" in bd["reason"]
    # near-zero input phases (a JAX step on synthetic data): they are not the reason
    loop = _loop([{"t_io": 0.00001, "t_fbu": 0.012}] * 3, timer="lagged_host")
    bd, warns = bph.summarize(loop, FUSED, device="cuda")
    assert not bd["reconciled"] and "set the pace" not in bd["reason"]
    assert "are not the cause: the phased loop itself ran slower" in bd["reason"]
    assert "(t_io + t_h2d, 0.01 ms)" in bd["reason"]


@pytest.mark.parametrize(("total", "busy", "needle"), [
    # JAX resnet50 bf16 b=64 on an H200 (command buffers off for the trace): 12.2 ms busy,
    # phases 13.9-14.7 ms, fused 12.8-14.2 ms: both signs come from the host's launch pace.
    (0.0115, 0.0080, "waiting for the host to launch its kernels"),
    (0.0085, 0.0080, "waiting for the host to launch its kernels"),
    # a device busy for the whole step: the launch pace is not the cause
    (0.0115, 0.0099, "are not the cause: the phased loop itself ran slower"),
    (0.0085, 0.0084, "the fused measurement was slower"),
])
def test_lagged_timer_reason_names_the_host_launch_pace_when_the_device_idles(total, busy, needle):
    loop = _loop([{"t_io": 0.00001, "t_h2d": 0.0, "t_fbu": total}] * 3, timer="lagged_host")
    trace = {"phases": {"t_f": busy * 0.3, "t_b": busy * 0.65, "t_u": busy * 0.05},
             "busy_s": busy, "step_wall_s": total, "phase_source": "HLO"}
    bd, warns = bph.summarize(loop, FUSED, device="cuda", trace=trace)
    assert not bd["reconciled"] and needle in bd["reason"], bd["reason"]
    if "launch" in needle:
        assert f"busy {busy * 1e3:.3g} ms of a {min(total + 0.00001, 0.010) * 1e3:.3g} ms step" in bd["reason"]
    # without a trace (no busy time) the idle cannot be shown, and is not claimed
    bd, _ = bph.summarize(loop, FUSED, device="cuda")
    assert "launch its kernels" not in bd["reason"]


class FakeEvent:
    def __init__(self, log, clock):
        self.log, self.clock, self.t = log, clock, None

    def record(self, stream=None):
        self.t = self.clock.t  # device time = host time here
        self.log.append(self)

    def elapsed_time(self, other):
        return (other.t - self.t) * 1e3   # milliseconds, as CUDA

    def synchronize(self):
        pass


class FakeTorch:
    def __init__(self, clock):
        log = []

        class cuda:  # noqa: N801 - mimics torch.cuda
            @staticmethod
            def Event(enable_timing=True):  # noqa: N802
                return FakeEvent(log, clock)

            @staticmethod
            def current_stream():
                return "stream"

        self.cuda = cuda
        self.log = log


def test_cuda_phase_timer_sums_repeated_phases_per_iteration():
    clock = FakeClock()
    torch = FakeTorch(clock)
    timer = CudaPhaseTimer(torch, clock=clock)
    timer.reserve(2)
    timer.start()
    for step in ([("t_f", 1.0), ("t_b", 2.0), ("t_f", 1.0), ("t_b", 2.0), ("t_u", 0.5)],
                 [("t_f", 3.0), ("t_u", 1.0)]):
        for p, dt in step:
            clock.t += dt
            timer.mark(p)
        timer.end_iteration()
    dev, host = timer.collect()
    assert dev[0] == pytest.approx({"t_f": 2.0, "t_b": 4.0, "t_u": 0.5})
    assert dev[1] == pytest.approx({"t_f": 3.0, "t_u": 1.0})
    assert all(h == pytest.approx(d) for h, d in zip(host, dev, strict=True))
    assert len(torch.log) == 1 + 7   # one start event plus one per mark (pool grew past 3)


def test_measure_phases_stop_rule_warmup_and_order():
    clock = FakeClock()
    calls = []

    def phased(mark):
        calls.append(1)
        for p in ("t_u", "t_io", "t_f"):   # marks out of the usual order
            clock.t += 0.1
            mark(p)
        return 0.0

    policy = IterationPolicy(min_iters=4, min_time_s=1.0, max_iters=100, max_time_s=60.0)
    res = measure_phases(phased, HostPhaseTimer(clock=clock), policy, warmup_iters=2,
                         clock=clock)
    # 0.3 s per iteration: 4 iterations reach 1.2 s >= 1.0 s.
    assert len(calls) == 2 + 4 and len(res.per_iter) == 4
    assert res.phases == ["t_io", "t_f", "t_u"]
    assert res.totals() == pytest.approx([0.3] * 4)
    assert res.samples("t_b") == [0.0] * 4


# --- reconciliation ------------------------------------------------------------------------


def _loop(per_iter, host=None, timer="cuda_events"):
    phases = []
    for d in per_iter:
        for k in d:
            if k not in phases:
                phases.append(k)
    return PhaseLoopResult(phases=phases, per_iter=per_iter, host_per_iter=host or per_iter,
                           wall_s=1.0, timer=timer)


FUSED = {"median": 0.010, "mean": 0.010, "ci_low": 0.0099, "ci_high": 0.0101}


def test_reconciled_within_three_percent():
    loop = _loop([{"t_io": 0.0001, "t_h2d": 0.0, "t_f": 0.003, "t_b": 0.006, "t_u": 0.0011}] * 5,
                 host=[{"t_f": 0.001}] * 5)
    bd, warns = bph.summarize(loop, FUSED, device="cuda")
    assert bd["total"]["median"] == pytest.approx(0.0102)
    assert bd["rel_diff"] == pytest.approx(0.02) and bd["reconciled"] and not warns
    assert bd["shares"]["t_b"] == pytest.approx(0.006 / 0.0102)
    assert bd["dispatch_s"]["median"] == pytest.approx(0.001)


@pytest.mark.parametrize(("timer", "device", "host_t", "fused", "total", "needle"), [
    ("cuda_events", "cuda", 0.001, FUSED, 0.011, "keep work of one phase from overlapping"),
    ("cuda_events", "cuda", 0.0105, FUSED, 0.011, "bound by the host"),
    ("host", "cuda", 0.001, FUSED, 0.011, "waited for on the host"),
    ("cuda_events", "cuda", 0.001, {"median": 0.010, "ci_low": 0.008, "ci_high": 0.013}, 0.011,
     "within the noise"),
    ("cuda_events", "cuda", 0.001, FUSED, 0.009, "fused measurement was slower"),
    # A CPU device runs the phases synchronously: no overlap to lose (torch eager/graph and
    # TensorFlow eager on the CPU were told "the phase boundaries keep work of one phase
    # from overlapping the next").
    ("host", "cpu", 0.011, FUSED, 0.011, "nothing overlaps on a CPU device"),
])
def test_reasons_for_a_difference_over_three_percent(timer, device, host_t, fused, total, needle):
    loop = _loop([{"t_f": total * 0.4, "t_b": total * 0.6}] * 3, host=[{"t_f": host_t}] * 3,
                 timer=timer)
    bd, warns = bph.summarize(loop, fused, device=device)
    assert not bd["reconciled"] and needle in bd["reason"]
    assert len(warns) == 1 and warns[0].startswith("breakdown: the phases sum to")
    assert needle in warns[0]


def test_fused_program_split_from_the_trace_or_said_unavailable():
    loop = _loop([{"t_io": 0.0, "t_h2d": 0.0, "t_fbu": 0.010}] * 3, timer="host")
    bd, warns = bph.summarize(loop, FUSED, device="cpu", trace=None)
    assert bd["split"]["available"] is False and "only their sum t_fbu" in warns[0]
    trace = {"phases": {"t_f": 0.003, "t_b": 0.005, "t_u": 0.001, "unattributed": 0.0005},
             "phase_samples": {"t_f": [0.003] * 5}, "busy_s": 0.0095, "step_wall_s": 0.011,
             "phase_source": "HLO"}
    bd, warns = bph.summarize(loop, FUSED, device="cpu", trace=trace)
    s = bd["split"]
    assert s["available"] and s["per_iter_s"]["t_b"] == 0.005
    assert s["t_gap_s"] == pytest.approx(0.010 - 0.0095)
    assert s["coverage"] == pytest.approx(0.95) and not warns
    # The traced ops took longer than the untraced compiled step (TensorFlow graph mode on
    # the CPU: t_f*+t_b*+t_u* 0.725 ms against t_fbu 0.610 ms, a gap of -0.115 ms shown
    # without a word): a warning says the split is inflated by the profiler.
    slow = {**trace, "phases": {"t_f": 0.004, "t_b": 0.006, "t_u": 0.002}}
    bd, warns = bph.summarize(loop, FUSED, device="cpu", trace=slow)
    assert bd["split"]["available"] and bd["split"]["t_gap_s"] == pytest.approx(-0.002)
    assert len(warns) == 1 and warns[0].startswith("breakdown: the trace's forward")
    assert "+20%" in warns[0] and "profiler" in warns[0]
    assert bd["split"]["warning"] in warns[0]
    # within the 3% the breakdown allows: no warning
    close = {**trace, "phases": {"t_f": 0.003, "t_b": 0.006, "t_u": 0.0012}}
    assert not bph.summarize(loop, FUSED, device="cpu", trace=close)[1]
    no_phase = {**trace, "phases": {"unattributed": 0.009}, "notes": ["no HLO matched"]}
    bd, warns = bph.summarize(loop, FUSED, device="cpu", trace=no_phase)
    assert bd["split"]["available"] is False and "no HLO matched" in warns[0]


# --- configuration, storage, reports ------------------------------------------------------------


def test_run_key_unchanged_without_breakdown_and_changed_with_it(tmp_path):
    base = RunConfig(model="fcn5_tiny", batch_size=8)
    assert RunConfig(model="fcn5_tiny", batch_size=8, breakdown=False).run_key() == base.run_key()
    bd = RunConfig(model="fcn5_tiny", batch_size=8, breakdown=True)
    tr1 = RunConfig(model="fcn5_tiny", batch_size=8, trace_dir=str(tmp_path / "a"))
    tr2 = RunConfig(model="fcn5_tiny", batch_size=8, trace_dir=str(tmp_path / "b"))
    assert len({base.run_key(), bd.run_key(), tr1.run_key()}) == 3
    assert tr1.run_key() == tr2.run_key()   # where the trace goes is not what is measured
    assert "+breakdown" in bd.label() and "+trace" in tr1.label()


def test_trace_dir_that_is_a_file_is_refused(tmp_path):
    f = tmp_path / "file.txt"
    f.write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        make_run_config(model="fcn5_tiny", batch_size=8, trace_dir=str(f))


def test_trace_dir_inside_a_file_is_refused_before_the_run(tmp_path):
    # A folder that cannot be created because a file is in its path was only found by the
    # profiler after the measurement: the point was stored (exit 0) without its trace, and
    # the next run with a good --trace skipped it as done.
    f = tmp_path / "file.txt"
    f.write_text("x")
    with pytest.raises(ConfigError, match="file.txt' is a file, so the trace folder"):
        make_run_config(model="fcn5_tiny", batch_size=8, trace_dir=str(f / "sub" / "traces"))
    # A folder that does not exist yet under an existing one is fine (created at the run).
    cfg = make_run_config(model="fcn5_tiny", batch_size=8, trace_dir=str(tmp_path / "a" / "b"))
    assert cfg.measure.trace_dir == str(tmp_path / "a" / "b")


def test_sweep_field_breakdown():
    sw = SweepConfig(name="s", defaults={"breakdown": True},
                     grid=[{"model": "fcn5_tiny", "batch_size": [8, 16]}])
    pts = sw.expand()
    assert [p.measure.breakdown for p in pts] == [True, True]


def fake_result(**over):
    r = {
        "run_key": "k1", "status": "ok", "model": "resnet50", "framework": "torch",
        "mode": "eager", "device": "cuda", "precision": "bf16", "batch_size": 64,
        "grad_accum": 1, "data": "synthetic", "threads": None,
        "summary": {"median": 0.010, "mean": 0.010, "ci_low": 0.0099, "ci_high": 0.0101},
        "throughput": {"samples_per_s": 6400.0, "samples": 640},
        "samples": {"measure": [0.010] * 3, "breakdown:t_f": [0.003] * 3},
        "breakdown": {"available": True, "timer": "cuda_events",
                      "phases": {p: {"median": v} for p, v in
                                 (("t_io", 0.0001), ("t_h2d", 0.0), ("t_f", 0.003),
                                  ("t_b", 0.0062), ("t_u", 0.0008))},
                      "dispatch_s": {"median": 0.004}, "rel_diff": 0.011, "reconciled": True,
                      "split": {"available": True}},
        "trace": {"available": True, "busy_fraction": 0.95, "busy_s": 0.0095, "idle_s": 0.0005,
                  "device_kind": "gpu", "dispatch_s": {"median": 0.005},
                  "files": {"chrome_trace": "/t/trace.json"}},
        "op_classes": {"per_iter_s": {"convolution": 0.006, "normalisation": 0.002,
                                      "elementwise": 0.001, "optimizer": 0.0005}},
    }
    r.update(over)
    return r


def test_store_flattens_breakdown_columns_and_keeps_phase_samples(tmp_path):
    from dlperf.results.store import ResultStore

    with ResultStore(tmp_path / "r.db") as s:
        rid = s.add(fake_result())
        row = s.rows()[0]
        assert row["busy_fraction"] == 0.95 and row["dispatch_s"] == 0.005
        assert row["breakdown_rel_diff"] == 0.011 and row["trace_path"] == "/t/trace.json"
        assert s.samples(rid)["breakdown:t_f"]["step_time_s"] == [0.003] * 3
        assert json.loads(row["result_json"])["op_classes"]["per_iter_s"]["convolution"] == 0.006


def _rows(tmp_path, results):
    from dlperf.results.store import ResultStore

    with ResultStore(tmp_path / "r.db") as s:
        for r in results:
            s.add(r)
        return s.rows()


def test_breakdown_and_op_class_tables(tmp_path):
    from dlperf.report import breakdown as bdr

    rows = _rows(tmp_path, [fake_result()])
    cells = bdr.breakdown_cells(as_record(rows[0]))
    col = dict(zip(bdr.BREAKDOWN_COLUMNS, cells))
    assert col["step ms"] == "10.00" and col["t_b"] == "6.200" and col["t_fbu"] == "–"
    assert col["sum vs step"] == "+1.1%" and col["busy"] == "95%"
    assert col["dispatch ms"] == "4.000"     # the phased loop's host time wins over the trace's
    md = bdr.op_class_markdown(as_records(rows))
    assert "| convolution | normalisation | elementwise/activation | optimizer |" in md
    assert "| 6.000 | 2.000 | 1.000 | 0.5000 | 9.500 | 0.5000 | device kernels |" in md
    assert "Where" not in md and bdr.breakdown_markdown(as_records(rows)).count("\n|") == 2


def test_op_class_idle_is_labelled_as_the_traced_steps(tmp_path):
    """The idle time is that of a traced step (the profiler lengthened it to 172 ms against a
    36 ms measured step): the column says so and gives that step, the CSV key stays."""
    from dlperf.report import breakdown as bdr

    trace = {"available": True, "busy_s": 0.0379, "idle_s": 0.1345, "step_wall_s": 0.1724,
             "device_kind": "gpu"}
    recs = as_records(_rows(tmp_path, [fake_result(trace=trace)]))
    cols, (cells,) = bdr.op_class_cells(recs)
    row = dict(zip(cols, cells))
    assert "idle ms" not in cols and row["idle ms (of traced step ms)"] == "134.5 of 172.4"
    assert row["step ms"] == "10.00"
    md = bdr.op_class_markdown(recs)
    assert "| 134.5 of 172.4 |" in md and "can exceed *step ms*" in md
    assert bdr.op_class_records(recs)[0]["idle_s"] == pytest.approx(0.1345)


def test_gap_attribution_between_frameworks(tmp_path):
    from dlperf.report import breakdown as bdr

    jax = fake_result(run_key="k2", framework="jax", mode="xla",
                      summary={"median": 0.008, "mean": 0.008, "ci_low": 0.0079,
                               "ci_high": 0.0081},
                      op_classes={"per_iter_s": {"convolution": 0.0045, "normalisation": 0.0015,
                                                 "elementwise": 0.001, "optimizer": 0.0006}},
                      trace={"available": True, "busy_s": 0.0076, "idle_s": 0.0003})
    other_point = fake_result(run_key="k3", framework="jax", mode="xla", batch_size=128)
    rows = _rows(tmp_path, [jax, fake_result(), other_point])
    gaps = bdr.gap_attribution(as_records(rows))
    assert len(gaps) == 1
    g = gaps[0]
    assert (g["a"], g["b"]) == ("torch/eager", "jax/xla")     # torch is the baseline
    assert g["gap_s"] == pytest.approx(-0.002)
    assert [c["class"] for c in g["classes"]][:2] == ["convolution", "normalisation"]
    assert g["classes"][0]["diff_s"] == pytest.approx(-0.0015)
    assert g["classes"][0]["share"] == pytest.approx(0.75)
    assert g["class_diff_s"] == pytest.approx(-0.0019)
    assert g["explained"] == pytest.approx(0.95)
    # idle of each fused step: 10 - 9.5 and 8 - 7.6 ms; torch's host issues its step in 4 ms
    # of 10, so neither side is host-paced and the idle is not explained
    assert g["a_idle_s"] == pytest.approx(0.0005) and g["b_idle_s"] == pytest.approx(0.0004)
    assert g["a_host_paced"] is None and g["host_idle_diff_s"] == 0.0
    assert g["idle_diff_s"] == pytest.approx(-0.0001)
    assert g["traced_idle_diff_s"] == pytest.approx(-0.0002)
    assert g["rest_s"] == pytest.approx(0.0, abs=1e-12)
    md = bdr.gap_markdown(gaps)
    assert "op classes explain 95% of it" in md and "| convolution | 6.000 | 4.500 | -1.5 | +75% |" in md
    assert "| device idle, other (not explained) | 0.5000 | 0.4000 | -0.1 | +5% |" in md
    assert "waiting for the host" not in md.split("*gap*")[0]


def test_gap_counts_the_idle_of_a_host_paced_side_as_explained(tmp_path):
    """A torch step the host issues no faster than the device runs it (CUDA-event phases: 9.5
    of 10 ms on the host) idles waiting for the host: that idle is explained; JAX's traced
    kernels taking longer than its fused step leave a rest and no idle."""
    from dlperf.report import breakdown as bdr

    torch = fake_result()
    torch["breakdown"] = {**torch["breakdown"], "dispatch_s": {"median": 0.0095}}
    torch["op_classes"] = {"per_iter_s": {"convolution": 0.004, "normalisation": 0.001,
                                          "elementwise": 0.001}}  # 6 of 10 ms busy
    jax = fake_result(run_key="k2", framework="jax", mode="xla",
                      summary={"median": 0.006, "mean": 0.006, "ci_low": 0.0059,
                               "ci_high": 0.0061},
                      breakdown={"available": True, "timer": "lagged_host",
                                 "dispatch_s": {"median": 0.009}},
                      op_classes={"per_iter_s": {"convolution": 0.0045, "normalisation": 0.001,
                                                 "elementwise": 0.0007}})  # 6.2 of 6 ms
    (g,) = bdr.gap_attribution(as_records(_rows(tmp_path, [torch, jax])))
    assert g["gap_s"] == pytest.approx(-0.004)
    assert g["a_host_paced"]["ratio"] == pytest.approx(0.95) and g["b_host_paced"] is None
    assert g["a_idle_s"] == pytest.approx(0.004) and g["b_idle_s"] == 0.0
    assert g["class_diff_s"] == pytest.approx(0.0002)
    assert g["host_idle_diff_s"] == pytest.approx(-0.004) and g["idle_diff_s"] == 0.0
    assert g["rest_s"] == pytest.approx(-0.0002)
    assert g["explained"] == pytest.approx((0.0002 - 0.004) / -0.004)
    assert g["explained_by_classes"] == pytest.approx(-0.05)
    assert (g["class_diff_s"] + g["host_idle_diff_s"] + g["idle_diff_s"] + g["rest_s"]
            == pytest.approx(g["gap_s"]))
    md = bdr.gap_markdown([g])
    assert "op classes and the host-paced idle explain 95% of it (op classes alone -5%)" in md
    assert "| device idle, waiting for the host (explained) | 4.000 | – | -4 | +100% |" in md
    # the same torch run with its host well ahead of the device: its idle is not explained
    torch["breakdown"]["dispatch_s"] = {"median": 0.005}
    (g,) = bdr.gap_attribution(as_records(_rows(tmp_path / "x", [torch, jax])))
    assert g["a_host_paced"] is None and g["explained"] == pytest.approx(-0.05)
    assert g["idle_diff_s"] == pytest.approx(-0.004)
    assert "read the shares with care" not in bdr.gap_verdict(g)  # rest: 5% of the gap
    # JAX's traced kernels take 9 ms of a 6 ms step: a rest of 3 ms against a 4 ms gap
    jax["op_classes"] = {"per_iter_s": {"convolution": 0.007, "normalisation": 0.002}}
    (g,) = bdr.gap_attribution(as_records(_rows(tmp_path / "y", [torch, jax])))
    assert g["rest_s"] == pytest.approx(-0.003)
    assert bdr.gap_verdict(g).endswith("; the rest is +75% of the gap (traced steps unlike the "
                                       "fused ones): read the shares with care")


def test_gap_uses_the_step_without_breakdown_where_the_breakdown_slowed_it(tmp_path):
    from dlperf.report import breakdown as bdr

    def med(m):
        return {"median": m, "mean": m, "ci_low": m * 0.99, "ci_high": m * 1.01}
    jax_bd = fake_result(run_key="k2", framework="jax", mode="xla", summary=med(0.0103),
                         flags={"command_buffers": "off (--breakdown: ...)"},
                         config={"breakdown": True},
                         op_classes={"per_iter_s": {"convolution": 0.0058, "normalisation": 0.0016,
                                                    "elementwise": 0.001, "optimizer": 0.0005}})
    torch_bd = fake_result(summary=med(0.0100), config={"breakdown": True})
    jax_plain = fake_result(run_key="k4", framework="jax", mode="xla", summary=med(0.0080),
                            config={"breakdown": False}, op_classes=None, breakdown=None,
                            trace=None)
    (g,) = bdr.gap_attribution(as_records(_rows(tmp_path, [torch_bd, jax_bd, jax_plain])))
    assert g["b"] == "jax/xla" and g["b_ref"] and not g["a_ref"] and g["note"] is None
    assert g["b_step_s"] == pytest.approx(0.008) and g["b_bd_step_s"] == pytest.approx(0.0103)
    assert g["gap_s"] == pytest.approx(-0.002)
    assert "jax/xla: the fused step of its run without --breakdown" in bdr.gap_markdown([g])
    # without the run without --breakdown: the breakdown run's own step, and a note
    (g,) = bdr.gap_attribution(as_records(_rows(tmp_path / "x", [torch_bd, jax_bd])))
    assert g["gap_s"] == pytest.approx(0.0003) and not g["b_ref"]
    assert "jax/xla ran with XLA command buffers off" in g["note"]
    assert "Note: jax/xla ran with XLA command buffers off" in bdr.gap_markdown([g])


def test_cli_results_op_classes_and_report_in_process(tmp_path):
    from typer.testing import CliRunner

    from dlperf.cli import app
    from dlperf.results.store import ResultStore

    db = tmp_path / "r.db"
    with ResultStore(db) as s:
        s.add(fake_result())
        s.add(fake_result(run_key="k2", framework="jax", mode="xla",
                          summary={"median": 0.008, "mean": 0.008, "ci_low": 0.0079,
                                   "ci_high": 0.0081},
                          breakdown={"available": True, "timer": "host",
                                     "phases": {"t_io": {"median": 0.0}, "t_h2d": {"median": 0.0},
                                                "t_fbu": {"median": 0.0079}},
                                     "rel_diff": -0.0125, "reconciled": True,
                                     "split": {"available": True, "t_gap_s": 0.0004,
                                               "per_iter_s": {"t_f": 0.0025, "t_b": 0.0045,
                                                              "t_u": 0.0005}}}))
    run = CliRunner().invoke
    res = run(app, ["results", "--db", str(db)])
    assert res.exit_code == 0, res.output
    assert "where the time goes" in res.output and "4.500*" in res.output
    res = run(app, ["results", "--db", str(db), "--op-classes"])
    assert res.exit_code == 0, res.output
    assert "device time per op class" in res.output and "jax/xla vs torch/eager" in res.output
    res = run(app, ["results", "--db", str(db), "--op-classes", "--format", "csv"])
    assert res.exit_code == 0 and res.output.splitlines()[0].startswith("id,model,framework,mode")
    res = run(app, ["results", "--db", str(db), "--op-classes", "--compare", "modes"])
    assert res.exit_code == 2
    res = run(app, ["report", "--db", str(db), "-o", str(tmp_path / "rep")])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "rep" / "report.md").read_text()
    for heading in ("Where the time goes: iteration breakdown", "Device time per op class",
                    "Step-time gaps attributed to op classes", "Trace files"):
        assert f"## {heading}" in md
    assert "| 2.500* | 4.500* | 0.5000* | 7.900 | 0.4000 |" in md


def test_xspace_gpu_layout_roundtrip_and_jax_trace(tmp_path):
    from dlperf.measure.breakdown.xspace import (
        XEvent,
        XLine,
        XPlane,
        jax_trace,
        read_chrome_planes,
        to_chrome_trace,
    )

    host = XPlane("/host:CPU", [XLine("python", [
        XEvent("dlperf_step", 0.0, 100.0, {"step_num": 0}),
        XEvent("dlperf_step", 1000.0, 100.0, {"step_num": 1})])])
    k = lambda name, op, t, d, run: XEvent(name, t, d, {"hlo_op": op, "run_id": run})  # noqa: E731
    gpu = XPlane("/device:GPU:0", [
        XLine("Stream #13(Compute)", [
            k("sm90_xmma_fprop_implicit_gemm_bf16", "conv_general_dilated.2", 200, 300, 7),
            k("loop_multiply_fusion", "multiply_add_fusion.7", 600, 100, 7),
            # step 0's kernel runs after step 1 was dispatched: run_id keeps it in step 0
            k("sm90_xmma_dgrad_implicit_gemm", "convolution.5", 1050, 200, 7),
            k("sm90_xmma_fprop_implicit_gemm_bf16", "conv_general_dilated.2", 1300, 300, 8)]),
        # a derived line repeats the kernels: it must not be counted
        XLine("XLA Ops", [XEvent("conv_general_dilated.2", 200, 300, {})])])
    path = to_chrome_trace([host, gpu], tmp_path / "t.trace.json.gz")
    planes = read_chrome_planes(path)
    assert [p.name for p in planes] == ["/host:CPU", "/device:GPU:0"]
    td = jax_trace(planes, parse_hlo(HLO))
    assert td.device_kind == "gpu" and len(td.ops) == 4
    by = [(o.name, o.phase, o.step, o.op_class) for o in td.ops]
    assert by[0] == ("sm90_xmma_fprop_implicit_gemm_bf16", "t_f", 0, "convolution")
    assert by[1][1:] == ("t_u", 0, "optimizer")
    assert by[2][1:] == ("t_b", 0, "convolution")
    assert by[3][2] == 1
    a = analyse(td)
    assert a["busy_s"] == pytest.approx(450e-9) and a["phase_samples"]["t_b"] == [200e-9, 0.0]


def test_breakdown_apart_runs_the_headline_without_it_and_merges(tmp_path):
    """An adapter whose breakdown changes process-wide settings (JAX on a GPU: command buffers
    off) gets two processes: the headline from one without the breakdown, the breakdown's
    sections from the other; stored under the point's own key, resumed as one point."""
    import os
    import subprocess
    import sys

    from dlperf.results.store import ResultStore

    env = {**os.environ, "DLPERF_FAKE_FRAMEWORK": "1", "COLUMNS": "200"}
    db = tmp_path / "r.db"
    args = [sys.executable, "-m", "dlperf", "run", "--framework", "fake", "--model", "fcn5_tiny",
            "-b", "8", "--device", "cpu", "--breakdown", "--min-iters", "5", "--min-time", "0",
            "--no-ceilings", "--framework-option", "step_s=0.002", "--db", str(db)]
    p = subprocess.run([*args, "--framework-option", "breakdown_apart=true"],
                       capture_output=True, text=True, env=env, timeout=180)
    assert p.returncode == 0, p.stderr
    with ResultStore(db) as s:
        (row,) = s.rows()
        raw = s.samples(row["id"])
    r = json.loads(row["result_json"])
    assert row["status"] == "ok" and r["config"]["measure"]["breakdown"] is True
    # the same key as the same point run in one process
    one = subprocess.run(args[:-1] + [str(tmp_path / "one.db")], capture_output=True, text=True,
                         env=env, timeout=180)
    assert one.returncode == 0, one.stderr
    with ResultStore(tmp_path / "one.db") as s:
        (row1,) = s.rows()
    assert row["run_key"] == row1["run_key"] == r["run_key"]
    assert "breakdown" in json.loads(row1["result_json"])["worker"]["phases_s"]
    assert r["breakdown"]["available"] and r["op_classes"]["per_iter_s"]
    assert r["breakdown_run"]["why"].startswith("fake:") and r["breakdown_run"]["status"] == "ok"
    assert "breakdown" not in r["worker"]["phases_s"]  # the headline's process did not run it
    assert any(k.startswith("breakdown:") for k in raw)
    # resumed as one point: nothing runs again
    p = subprocess.run(args, capture_output=True, text=True, env=env, timeout=180)
    assert p.returncode == 0 and "0 run, 1 already" in p.stderr, p.stderr


def test_merge_breakdown_keeps_the_headline_when_the_breakdown_process_fails():
    """Records in, a record out whose parts are typed and whose stored form is the headline's
    with the breakdown's sections; the inputs are not modified."""
    from dlperf.launch.process import merge_breakdown
    from dlperf.results.parts import BreakdownRun, Summary

    rec = RunRecord.from_dict
    head = rec({"status": "ok", "summary": {"median": 0.004}, "samples": {"measure": [0.004]},
                "warnings": []})
    bd = rec({"status": "oom", "error": "out of memory", "summary": None, "flags": {"x": 1}})
    m = merge_breakdown(head, bd, "why")
    assert isinstance(m.breakdown_run, BreakdownRun) and m.breakdown_run.why == "why"
    r = m.to_dict()
    assert r["summary"] == {"median": 0.004} and r["samples"] == {"measure": [0.004]}
    assert r["breakdown"]["available"] is False and "ended oom" in r["breakdown"]["error"]
    assert r["breakdown_run"] == {"why": "why", "status": "oom", "error": "out of memory",
                                  "summary": None, "flags": {"x": 1}}
    assert head.warnings == [] and head.breakdown_run is None  # the inputs are not modified
    ok = rec({"status": "ok", "summary": {"median": 0.005}, "breakdown": {"available": True},
              "samples": {"measure": [0.005], "breakdown:t_f": [0.001], "trace:dispatch": [0.1]},
              "warnings": ["breakdown: x", "wide CI"]})
    m = merge_breakdown(head, ok, "why")
    assert isinstance(m.breakdown_run.summary, Summary)
    r = m.to_dict()
    assert r["summary"] == {"median": 0.004} and r["breakdown"] == {"available": True}
    assert set(r["samples"]) == {"measure", "breakdown:t_f", "trace:dispatch"}
    assert r["samples"]["measure"] == [0.004] and r["warnings"] == ["breakdown: x"]
    # the breakdown process's own time account is kept (a GPU JAX point's second process)
    worker = {"pid": 7, "elapsed_s": 30.0, "phases_s": {"prepare": 25.0, "breakdown": 3.0}}
    r = merge_breakdown(head, rec({**ok.to_dict(), "worker": worker}), "why").to_dict()
    assert r["breakdown_run"]["worker"] == worker and "worker" not in r


def _timed(samples, **over):
    """A fake result whose fused step (median, CI) comes from ``samples`` (s per iteration)."""
    from dlperf.stats import bootstrap_median_ci

    med = float(np.median(samples))
    lo, hi = bootstrap_median_ci(samples)
    r = fake_result(**over)
    r["summary"] = {"median": med, "mean": float(np.mean(samples)), "ci_low": lo, "ci_high": hi}
    r["samples"] = {"measure": list(map(float, samples))}
    return r


_JAX_CLASSES = {"per_iter_s": {"convolution": 0.0045, "normalisation": 0.0015,
                               "elementwise": 0.001, "optimizer": 0.0006}}


def _gap(tmp_path, torch_samples, jax_samples, with_samples=True):
    from dlperf.report import breakdown as bdr
    from dlperf.results.store import ResultStore

    with ResultStore(tmp_path / "g.db") as s:
        s.add(_timed(torch_samples))
        s.add(_timed(jax_samples, run_key="k2", framework="jax", mode="xla",
                     op_classes=_JAX_CLASSES))
        rows = s.rows()
        samples_of = (lambda rid: s.samples(rid)["measure"]["step_time_s"]) if with_samples \
            else None
        (g,) = bdr.gap_attribution(as_records(rows), samples_of)
    return g


def test_gap_within_noise_is_not_attributed(tmp_path):
    from dlperf.report import breakdown as bdr

    spread = np.array([0.008, 0.009, 0.010, 0.011, 0.012] * 4)
    g = _gap(tmp_path, spread, spread + 0.0004)  # 4% slower medians, 40% wide spread
    assert g["gap_s"] == pytest.approx(0.0004)
    sig = g["significance"]
    assert sig["within_noise"] and not sig["too_small"] and not sig["attributed"]
    assert sig["ci_source"].startswith("bootstrap of the measured samples (20 and 20")
    lo, hi = g["gap_ci_s"]
    assert lo < 0 < hi
    assert g["not_attributed"] == "within noise" and g["explained"] is None
    assert g["explained_with_idle"] is None and g["explained_by_classes"] is None
    assert all(c["share"] is None for c in g["classes"])
    # the differences stay, in ms
    assert g["classes"][0]["diff_s"] == pytest.approx(-0.0015)
    md = bdr.gap_markdown([g])
    assert f"gap within noise (CI [{lo * 1e3:+.4g}, {hi * 1e3:+.4g}] ms): not attributed" in md
    assert "explain" not in md.split("\n")[0]
    assert "| convolution | 6.000 | 4.500 | -1.5 | – |" in md
    (t,) = bdr.gap_tables([g])
    assert "gap within noise (CI [" in str(t.title) and "explain" not in str(t.title)


def test_gap_clear_of_noise_keeps_the_shares(tmp_path):
    from dlperf.report import breakdown as bdr

    base = np.array([0.0099, 0.0100, 0.0101, 0.0100, 0.0102, 0.0098] * 5)
    g = _gap(tmp_path, base, base * 0.8)  # 20% faster, tight
    assert g["significance"]["attributed"] and g["not_attributed"] is None
    lo, hi = g["gap_ci_s"]
    assert lo <= g["gap_s"] <= hi < 0
    assert g["explained"] == pytest.approx(g["class_diff_s"] / g["gap_s"])
    assert g["classes"][0]["share"] == pytest.approx(g["classes"][0]["diff_s"] / g["gap_s"])
    # classes + idle + rest add up to the gap; idle that is not host-paced and the rest are
    # not in "explained"
    assert g["host_idle_diff_s"] == 0.0
    assert g["class_diff_s"] + g["idle_diff_s"] + g["rest_s"] == pytest.approx(g["gap_s"])
    md = bdr.gap_markdown([g])
    assert f"op classes explain {g['explained']:.0%} of it" in md
    assert f"| sum of op classes (explained) | – | – | {g['class_diff_s'] * 1e3:+.4g} | " \
           f"{g['explained']:+.0%} |" in md
    assert "| device idle, other (not explained) |" in md
    assert "| rest: traced device time beyond the fused step (not explained) |" in md
    assert bdr.GAP_LEGEND in md


def test_gap_under_the_floor_and_without_samples(tmp_path):
    base = np.array([0.0100, 0.01001, 0.00999, 0.0100] * 10)
    g = _gap(tmp_path, base, base + 0.0002)  # 2%: clear of the noise, under the 3% floor
    sig = g["significance"]
    assert sig["within_noise"] is False and sig["too_small"] and g["not_attributed"] == "too small"
    assert g["explained"] is None
    from dlperf.report.breakdown import gap_verdict

    assert gap_verdict(g).startswith("2.0% of torch/eager's step, under the 3% floor (CI [")
    # no samples: the interval of the two steps' own CIs, [lo_b - hi_a, hi_b - lo_a]
    spread = np.array([0.008, 0.009, 0.010, 0.011, 0.012] * 4)
    g = _gap(tmp_path / "x", spread, spread * 0.7, with_samples=False)
    sig = g["significance"]
    assert sig["ci_source"].startswith("the two steps' own 95% CIs")
    assert g["gap_ci_s"][1] < 0 and sig["attributed"]


def test_cli_op_classes_json_and_report_say_within_noise(tmp_path):
    from typer.testing import CliRunner

    from dlperf.cli import app
    from dlperf.results.store import ResultStore

    spread = np.array([0.008, 0.009, 0.010, 0.011, 0.012] * 4)
    db = tmp_path / "r.db"
    with ResultStore(db) as s:
        s.add(_timed(spread))
        s.add(_timed(spread + 0.0004, run_key="k2", framework="jax", mode="xla",
                     op_classes=_JAX_CLASSES))
    run = CliRunner().invoke
    res = run(app, ["results", "--db", str(db), "--op-classes", "--format", "json"])
    assert res.exit_code == 0, res.output
    (g,) = json.loads(res.output)["gaps"]
    assert g["not_attributed"] == "within noise" and g["explained"] is None
    assert g["significance"]["ci_source"].startswith("bootstrap")
    res = run(app, ["results", "--db", str(db), "--op-classes"], env={"COLUMNS": "250"})
    # the console's width is fixed when dlperf.cli.common is first imported in this process
    # (another test may have done it under another $COLUMNS): read the text unwrapped
    assert res.exit_code == 0 and "gap within noise (CI [" in " ".join(res.output.split()), \
        res.output
    res = run(app, ["report", "--db", str(db), "-o", str(tmp_path / "rep")])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "gap within noise (CI [" in md and "): not attributed" in md


def test_op_class_markdown_lists_the_largest_unclassified_names(tmp_path):
    from dlperf.report import breakdown as bdr

    old = fake_result(op_classes={  # stored before top_by_class: names from top_ops
        "per_iter_s": {"convolution": 0.006, "other": 0.003}, "busy_s": 0.009,
        "top_ops": [{"name": "input_scatter_fusion_8", "class": "other", "s": 0.002},
                    {"name": "sm90_xmma_fprop", "class": "convolution", "s": 0.006}]})
    new = fake_result(run_key="k2", framework="jax", mode="xla", op_classes={
        "per_iter_s": {"convolution": 0.009, "other": 0.0001}, "busy_s": 0.0091,
        "top_by_class": {"other": [{"name": "tiny", "s": 0.0001}]}})
    rows = _rows(tmp_path, [old, new])
    assert bdr.other_names(as_record(rows[0])) == [("input_scatter_fusion_8", 0.002)]
    assert bdr.other_names(as_record(rows[1])) == [("tiny", 0.0001)]
    md = bdr.op_class_markdown(as_records(rows))
    assert ("- resnet50 torch/eager bf16 b=64: other 3.000 ms of 9.000: "
            "`input_scatter_fusion_8` 2.000 (the rest, 1.000 ms, not stored by name)") in md
    assert "`tiny`" not in md  # 1% of its busy time: under the 5% that lists names


def test_relabel_xla_pool_backward_moves_only_stored_scatter_fusions(tmp_path):
    import importlib.util
    from pathlib import Path

    from dlperf.results.store import ResultStore

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "relabel_xla_pool_backward.py"
    spec = importlib.util.spec_from_file_location("relabel_xla_pool_backward", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    top = [{"name": "input_scatter_fusion_8", "class": "other", "s": 0.0008, "calls": 3.0},
           {"name": "input_scatter_fusion", "class": "pooling", "s": 0.0003, "calls": 1.0},
           {"name": "gather_fusion_2", "class": "other", "s": 0.0001, "calls": 1.0}]
    oc = {"per_iter_s": {"pooling": 0.0012, "other": 0.0010}, "top_ops": top}
    db = tmp_path / "r.db"
    with ResultStore(db) as s:
        s.add(fake_result(run_key="g", model="googlenet", framework="jax", mode="xla",
                          op_classes=json.loads(json.dumps(oc))))
        s.add(fake_result(run_key="t", model="transformer", framework="jax", mode="xla",
                          op_classes=json.loads(json.dumps(oc))))  # embeddings scatter too
    (rid, rec), = mod.relabel(str(db))
    assert rec["names"] == ["input_scatter_fusion_8"] and rec["s"] == pytest.approx(0.0008)
    with ResultStore(db) as s:
        by = {r["model"]: json.loads(r["result_json"])["op_classes"] for r in s.rows()}
    g = by["googlenet"]
    assert g["per_iter_s"] == pytest.approx({"pooling": 0.0020, "other": 0.0002})
    assert g["relabelled"]["per_iter_s_before"] == {"other": 0.0010, "pooling": 0.0012}
    assert [t["class"] for t in g["top_ops"]] == ["pooling", "pooling", "other"]
    assert by["transformer"] == oc
    assert mod.relabel(str(db)) == []   # done once


def test_breakdown_without_a_phased_step_says_why_in_a_warning():
    # TensorFlow under a strategy has no phased step: the result said "the tensorflow adapter
    # has no phased step" (it has one, on one device) and printed nothing, so `dlperf run
    # --breakdown --nproc 2` showed a row of dashes with no reason.
    from types import SimpleNamespace

    from dlperf.measure.breakdown.run import run_breakdown

    session = SimpleNamespace(phased_step=None, phase_timer=None, profile=None)
    cfg = SimpleNamespace(measure=SimpleNamespace(breakdown=True, trace_dir=None),
                          runtime=SimpleNamespace(framework="tensorflow"), world_size=2,
                          hardware=SimpleNamespace(device="cpu"))
    out, samples, warns = run_breakdown(cfg, session, {"median": 0.01})
    assert out["breakdown"]["available"] is False
    assert "data parallel" in out["breakdown"]["reason"] and "2 devices" in out["breakdown"]["reason"]
    assert any(w.startswith("breakdown: not measured") and "data parallel" in w for w in warns)
    assert samples == {}
    cfg.world_size = 1
    out, _, warns = run_breakdown(cfg, session, {"median": 0.01})
    assert out["breakdown"]["reason"] == "the tensorflow adapter has no phased step"
    assert any("the tensorflow adapter has no phased step" in w for w in warns)


def test_cli_op_classes_csv_is_machine_readable_and_empty_is_an_error(tmp_path):
    # The CSV was the display table: 4 significant digits of ms as strings, "–" for none,
    # class columns without a unit, only the classes used; with nothing to show it printed
    # nothing and exited 0 (the table exits 2 with a message).
    import csv
    import io

    from typer.testing import CliRunner

    from dlperf.cli import app
    from dlperf.measure.breakdown.opclass import OP_CLASSES
    from dlperf.results.store import ResultStore

    db = tmp_path / "r.db"
    with ResultStore(db) as s:
        s.add(fake_result())
    res = CliRunner().invoke(app, ["results", "--db", str(db), "--op-classes", "--format", "csv"])
    assert res.exit_code == 0, res.output
    (row,) = list(csv.DictReader(io.StringIO(res.output)))
    assert [f"{c}_s" for c in OP_CLASSES] == [k for k in row if k.endswith("_s")][1:-2]
    assert float(row["convolution_s"]) == 0.006 and float(row["attention_s"]) == 0.0
    assert float(row["step_time_median_s"]) == 0.010 and float(row["busy_s"]) == 0.0095
    assert row["framework"] == "torch" and row["mode"] == "eager" and row["device_kind"] == "gpu"
    empty = tmp_path / "e.db"
    with ResultStore(empty) as s:
        s.add(fake_result(op_classes=None, trace=None, breakdown=None))
    for fmt in ("csv", "json", "table"):
        res = CliRunner().invoke(app, ["results", "--db", str(empty), "--op-classes",
                                       "--format", fmt])
        assert res.exit_code == 2 and "no result here has op classes" in res.output, fmt


def test_cli_op_classes_table_with_output_writes_the_markdown(tmp_path):
    # 'results --op-classes -o FILE' printed the table to the terminal, wrote no file and
    # exited 0 ('--compare X -o FILE' writes its Markdown there).
    from typer.testing import CliRunner

    from dlperf.cli import app
    from dlperf.results.store import ResultStore

    db = tmp_path / "r.db"
    with ResultStore(db) as s:
        s.add(fake_result())
        s.add(fake_result(run_key="k2", framework="jax", mode="xla",
                          summary={"median": 0.008, "mean": 0.008, "ci_low": 0.0079,
                                   "ci_high": 0.0081}))
    out = tmp_path / "oc.md"
    res = CliRunner().invoke(app, ["results", "--db", str(db), "--op-classes", "-o", str(out)])
    assert res.exit_code == 0, res.output
    md = out.read_text()
    assert "| convolution |" in md and "jax/xla vs torch/eager" in md
    assert "Device time per iteration (ms;" in md    # the class columns' unit
    assert "device time per op class" not in res.output


def test_a_second_trace_of_a_point_does_not_overwrite_the_first(tmp_path):
    # '--trace DIR --rerun' deleted the first run's trace folder and wrote the new trace at
    # the same path, so the first stored result pointed at the second run's trace.
    from types import SimpleNamespace

    from dlperf.measure.breakdown.run import run_breakdown

    calls = []

    def profile(n, folder):
        calls.append(folder)
        f = folder / "trace.json"
        f.write_text(json.dumps({"traceEvents": [], "run": len(calls)}))
        ops = [TraceOp("k", 0.0, 1.0, ops=("aten::mm",), step=0)]
        return {"trace": TraceData(ops=ops, steps=[(0.0, 1.0)], device_kind="cpu",
                                   source="test"),
                "files": {"chrome_trace": f}}

    cfg = RunConfig(model="fcn5_tiny", batch_size=8, trace_dir=str(tmp_path / "tr"))
    session = SimpleNamespace(phased_step=None, phase_timer=None, profile=profile)
    first = run_breakdown(cfg, session, {"median": 1.0})[0]["trace"]["files"]["chrome_trace"]
    second = run_breakdown(cfg, session, {"median": 1.0})[0]["trace"]["files"]["chrome_trace"]
    assert first != second
    assert json.loads(Path(first).read_text())["run"] == 1
    assert json.loads(Path(second).read_text())["run"] == 2
    assert Path(second).parent.name.startswith(Path(first).parent.name)


def test_trace_dir_that_cannot_be_made_is_refused_before_anything_runs(tmp_path):
    """A trace folder the OS will not create (here under /proc) was found only after the
    measurement: the point stored without its trace and resumed as done. Now it is made
    before the run: exit 2, a message that names the path, nothing stored."""
    from typer.testing import CliRunner

    from dlperf.cli import app

    db = tmp_path / "r.db"
    res = CliRunner().invoke(app, ["run", "--model", "fcn5_tiny", "--device", "cpu",
                                   "--min-time", "0", "--trace", "/proc/dlperf-no/traces",
                                   "--db", str(db)], env={"COLUMNS": "200"})
    assert res.exit_code == 2, res.output
    assert "cannot use '/proc/dlperf-no" in res.output and "give another path" in res.output
    assert not db.exists()
