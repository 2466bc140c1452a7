"""Per-kernel transforms (dlperf.perfmodel.transforms) and the GPU profiles and occupancy
arithmetic they use (dlperf.perfmodel.hardware)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dlperf.errors import ConfigError
from dlperf.perfmodel import hardware as H
from dlperf.perfmodel import replay as R
from dlperf.perfmodel.transforms.autocast import (
    AUTOCAST_CASTS,
    AUTOCAST_HOST,
    AUTOCAST_WALK,
    DOWNCAST_BYTES,
    LOSS_KERNELS_BF16,
    UPCAST_BYTES,
    activation_casts,
    autocast_host,
    cast_times,
    is_conv_helper,
)
from dlperf.perfmodel.transforms.batch import (
    BATCH_FLOOR_S,
    cast_batch_factor,
    gemm_batch_factor,
    interpolate_batch,
    to_batch,
)
from dlperf.perfmodel.transforms.dataparallel import COMM_LANE, to_data_parallel
from dlperf.perfmodel.transforms.gpu import (
    GEMM_GAMMA,
    MEMORY_SHARE,
    gamma,
    kernel_on_gpu,
    memory_share,
    to_gpu,
)
from dlperf.perfmodel.transforms.kernels import (
    GEMM_CLASSES,
    KERNEL_FLOOR_S,
    is_gemm,
    is_weight_cast,
    math_precision,
)
from dlperf.perfmodel.transforms.precision import (
    BATCH_NORM_BACKWARD_BF16,
    BF16_GEMM_SHARE,
    BF16_GEMM_SHARE_BY_CLASS,
    FP32_GEMM_EFFICIENCY,
    GEMM_FIXED_S,
    GEMM_FIXED_S_BY_CLASS,
    GEMM_HELPERS,
    PRECISION_RATIO,
    gemm_fixed_s,
    gemm_roofline_cap,
    gemm_s,
    gemm_weight_floor,
    is_batch_norm_backward,
    kernel_to_precision,
    to_precision,
)
from dlperf.perfmodel.transforms.weights import (
    GEMM_WEIGHT_PASSES,
    WEIGHT_CAST_BYTES,
    WEIGHT_GRAD_CAST_BYTES,
    gemm_roofline_s,
)


def _k(dur_us, name="vectorized_elementwise_kernel", op_class="elementwise", phase="t_f",
       grid=(1024, 1, 1), block=(256, 1, 1), flops=None, nbytes=None, lane=7, launch=0):
    return R.DeviceOp(lane=lane, dur_s=dur_us * 1e-6, kind="kernel", name=name,
                      op_class=op_class, op="aten::x", phase=phase, launch=launch, grid=grid,
                      block=block, registers=32, shared_memory=0, flops=flops, bytes=nbytes)


def _step(ops, precision="fp32", batch=32):
    return R.StepTrace(tuple(ops), (R.HostLaunch(1e-6, 1e-6),), 0.0,
                       {"precision": precision, "batch_size": batch, "host_speed_ns": 100.0,
                        "transforms": []})


def test_blocks_per_sm_follows_the_occupancy_rules():
    lim = H.SM_LIMITS["9.0"]
    assert H.blocks_per_sm(256, 32, 0, lim) == 8       # threads and registers: 8
    assert H.blocks_per_sm(256, 128, 0, lim) == 2      # 4096 registers a warp: 16 warps
    assert H.blocks_per_sm(128, 32, 48 * 1024, lim) == 4  # 49 KB a block of 228 KB
    assert H.blocks_per_sm(32, 16, 0, lim) == 32       # the block limit
    assert H.blocks_per_sm(1024, 255, 0, lim) == 1     # never 0: the kernel ran
    a100 = H.datasheet("a100")
    assert H.waves(108 * 8 + 1, 256, 32, 0, a100) == 2


def test_datasheets_resolve_by_short_or_driver_name():
    assert H.datasheet("NVIDIA H100 80GB HBM3").name == "h100"
    assert H.datasheet("NVIDIA H100 PCIe").name == "h100-pcie"
    assert H.datasheet("h200").bandwidth_bytes_per_s == pytest.approx(4.8e12)
    assert H.datasheet("h200").datasheet_only
    with pytest.raises(ConfigError, match="no datasheet"):
        H.datasheet("tpu-v5")


@pytest.mark.parametrize("name, key", [
    ("h100", "h100"), ("H100", "h100"), ("h100-sxm", "h100"), ("H100_SXM5", "h100"),
    ("nvidia h100 80gb hbm3", "h100"), ("h100 pcie", "h100-pcie"), ("NVIDIA H200", "h200"),
    ("NVIDIA H200 NVL", "h200-nvl"), ("h200 nvl", "h200-nvl"), ("A100-SXM4-80GB", "a100"), ("a100-40gb", "a100-40gb"), ("Tesla V100-SXM2-32GB", "v100"),
    ("L40S", "l40s"), ("a10", "a10")])
def test_a_datasheet_is_found_by_any_of_its_exact_names(name, key):
    assert H.datasheet(name).name == key and H.short_name(name) == key


@pytest.mark.parametrize("name, close", [
    ("h1000", "h100"), ("h100x", "h100"), ("a1000", "a100"), ("a10g", "a10"),
    ("v1000", "v100"), ("NVIDIA RTX A1000", None), ("NVIDIA H200 NVL2", "h200-nvl"),
    ("NVIDIA H200 PCIe", "h200")])
def test_a_name_that_only_contains_or_extends_a_datasheets_is_refused(name, close):
    with pytest.raises(ConfigError, match="no datasheet") as e:
        H.datasheet(name)
    msg = str(e.value)
    assert "known: h100, h100-pcie, h200" in msg
    if close:
        assert "did you mean" in msg and close in msg.split("did you mean")[1].split("?")[0]
    assert H.short_name(name) is None


def test_same_gpu_compares_datasheets_or_exact_names():
    assert H.same_gpu("NVIDIA H100 80GB HBM3", "h100-sxm")
    assert not H.same_gpu("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe")
    assert H.same_gpu("NVIDIA RTX A1000", "nvidia rtx a1000")
    assert not H.same_gpu("NVIDIA RTX A1000", "NVIDIA A100-SXM4-80GB")
    assert not H.same_gpu(None, None)


def test_profile_round_trips_through_a_results_file(tmp_path):
    db = str(tmp_path / "r.db")
    p = replace(H.datasheet("h100"), name="my-h100", host_speed_ns=90.0, measured=("bandwidth",))
    H.store_profile(db, p)
    got = H.stored_profiles(db)["my-h100"]
    assert got == p
    assert H.resolve("my-h100", paths=db) == p
    assert H.resolve("NVIDIA H100 80GB HBM3", paths=db) == p   # by the driver's name
    assert H.resolve("a100", paths=db).name == "a100"           # datasheet only
    assert H.resolve("My_H100", paths=db) == p                  # case, separators
    with pytest.raises(ConfigError, match="did you mean h100.*stored profiles: my-h100"):
        H.resolve("h1000", paths=db)


def test_same_gpu_is_the_identity():
    st = _step([_k(10), _k(50, name="sm90_xmma_gemm_bf16bf16", op_class="matmul")])
    h = H.datasheet("h200")
    out = to_gpu(st, h, h)
    assert [o.dur_s for o in out.ops] == pytest.approx([o.dur_s for o in st.ops])


def test_memory_bound_kernel_follows_bandwidth_and_gemm_follows_the_ceiling():
    src = H.datasheet("h200")
    dst = replace(src, name="slow", bandwidth_bytes_per_s=src.bandwidth_bytes_per_s / 2,
                  gemm_flops_per_s={k: v / 4 for k, v in src.gemm_flops_per_s.items()})
    # a kernel moving its bytes at the full bandwidth (U = 1)
    full = 101e-6 * src.bandwidth_bytes_per_s
    mem, gemm = _k(101, nbytes=full), _k(101, name="sm90_xmma_gemm_bf16bf16_f32",
                                          op_class="matmul")
    f = KERNEL_FLOOR_S * 1e6
    assert kernel_on_gpu(mem, src, dst, "bf16") == pytest.approx((f + (101 - f) * 2) * 1e-6)
    want = f + (101 - f) * 2 ** GEMM_GAMMA * 4 ** (1 - GEMM_GAMMA)
    assert kernel_on_gpu(gemm, src, dst, "bf16") == pytest.approx(want * 1e-6)
    # a roofline position from the trace's FLOPs and bytes: far above the ridge, compute-bound
    hot = replace(gemm, flops=1e12, bytes=1e6)
    assert gamma(hot, dst, "bf16") < 0.01


def test_a_kernel_below_the_bandwidth_slows_down_by_its_utilisation():
    src = H.datasheet("h200")
    dst = replace(src, name="slow", bandwidth_bytes_per_s=src.bandwidth_bytes_per_s / 2)
    f = KERNEL_FLOOR_S * 1e6
    tenth = _k(101, nbytes=0.1 * 101e-6 * src.bandwidth_bytes_per_s)
    assert memory_share(tenth, src) == pytest.approx(0.1)
    assert kernel_on_gpu(tenth, src, dst, "bf16") == pytest.approx(
        (f + (101 - f) * 2 ** 0.1) * 1e-6)
    # no bytes in the trace: the op class's share; copies follow the bandwidth
    assert memory_share(_k(101, op_class="normalisation"), src) == \
        MEMORY_SHARE["normalisation"]
    assert memory_share(replace(_k(101), kind="memcpy"), src) == 1.0
    assert kernel_on_gpu(_k(101, op_class="normalisation"), src, dst, "bf16") < \
        kernel_on_gpu(_k(101, op_class="memory_copy"), src, dst, "bf16")


def test_fewer_sms_add_waves_to_a_full_launch():
    src = H.datasheet("h100")
    dst = replace(src, name="half", sms=66)
    k = _k(101, grid=(132 * 8, 1, 1), nbytes=101e-6 * src.bandwidth_bytes_per_s)
    assert kernel_on_gpu(k, src, dst, "fp32") == pytest.approx(
        (1 + 100 * src.bandwidth_bytes_per_s / dst.bandwidth_bytes_per_s) * 1e-6)
    # a compute-only GEMM: the ceiling's ratio (the same SM count here would leave it)
    c = _k(101, name="sm90_xmma_gemm_f32f32", op_class="matmul", grid=(132 * 8, 1, 1),
           flops=1e15, nbytes=1.0)
    assert gamma(c, dst, "fp32") < 1e-6
    # a compute-bound non-GEMM kernel (no bytes moved): the waves double
    w = _k(101, grid=(132 * 8, 1, 1), nbytes=1.0)
    assert kernel_on_gpu(w, src, dst, "fp32") == pytest.approx((1 + 100 * 2) * 1e-6, rel=1e-3)


def test_host_follows_the_dispatch_ratio_only_when_given():
    src, dst = H.datasheet("h200"), H.datasheet("h100")
    st = _step([_k(1)])
    assert to_gpu(st, src, dst, host_ratio=1.5).host_s == pytest.approx(1.5 * st.host_s)
    same = to_gpu(st, src, dst)
    assert same.host_s == pytest.approx(st.host_s)
    assert "host unscaled" in same.meta["transforms"][-1]


def test_precision_names_and_gemm_speedup():
    assert math_precision(_k(1, name="cutlass_80_simt_sgemm_128x64"), "bf16") == "fp32"
    assert math_precision(_k(1, name="sm80_xmma_gemm_tf32f32"), "fp32") == "tf32"
    assert math_precision(_k(1, name="nvjet_sm90_tst_192x128_h_bz"), "fp32") == "bf16"
    g = H.datasheet("h200")
    sgemm = _k(1001, name="cutlass_80_simt_sgemm_128x64", op_class="matmul")
    bf = kernel_to_precision(sgemm, "fp32", "bf16", g)
    assert bf < 0.5 * sgemm.dur_s
    back = kernel_to_precision(replace(sgemm, name="sm90_xmma_gemm_bf16bf16", dur_s=bf),
                                 "bf16", "fp32", g)
    assert back > bf
    # a large fp32 GEMM at bf16: its time above the fixed part by the ceilings' ratio / share
    c = g.gemm("fp32") / g.gemm("bf16") / BF16_GEMM_SHARE
    assert bf == pytest.approx(GEMM_FIXED_S + (1001e-6 - GEMM_FIXED_S) * c)
    # with its bytes in the trace, no faster than moving half of them
    heavy = replace(sgemm, bytes=1001e-6 * g.bandwidth_bytes_per_s)
    assert kernel_to_precision(heavy, "fp32", "bf16", g) == pytest.approx(
        GEMM_FIXED_S + 0.5 * 1001e-6)
    fixed, r = PRECISION_RATIO["elementwise"]
    ew = _k(101)
    assert kernel_to_precision(ew, "fp32", "bf16", g) == pytest.approx(
        fixed + (101e-6 - fixed) * r)
    assert kernel_to_precision(_k(2), "fp32", "bf16", g) == pytest.approx(2e-6)  # < fixed
    for cls in ("optimizer", "normalisation"):  # fp32 master weights; autocast's layer_norm
        k = _k(101, op_class=cls, phase="t_u" if cls == "optimizer" else "t_f")
        assert kernel_to_precision(k, "fp32", "bf16", g) == pytest.approx(k.dur_s)


def test_to_precision_adds_and_drops_casts():
    g = H.datasheet("h200")
    st = _step([_k(100, name="cutlass_80_simt_sgemm", op_class="matmul", nbytes=4e6), _k(5)])
    bf = to_precision(st, "bf16", g)
    assert len(bf.ops) == 3 and bf.ops[0].name == "cast (autocast)"
    # an eager program's host: autocast's dispatch factor
    assert bf.host_s == pytest.approx(st.host_s * AUTOCAST_HOST)
    assert bf.meta["precision"] == "bf16"
    cast = _k(3, name="vectorized_elementwise_kernel<bfloat16_copy_kernel_cuda>",
              op_class="matmul")
    fp = to_precision(_step([cast, *st.ops], precision="bf16"), "fp32", g)
    assert len(fp.ops) == 2 and "-1 casts" in fp.meta["transforms"][-1]
    assert fp.host_s == pytest.approx(st.host_s / AUTOCAST_HOST)


def test_autocast_host_is_an_eager_programs_only():
    g = H.datasheet("h200")
    st = _step([_k(5)])
    assert autocast_host(st) == AUTOCAST_HOST > 1
    for meta in ({"mode": "graph"}, {"xla": True}):
        other = replace(st, meta={**st.meta, **meta})
        assert autocast_host(other) == 1.0
        assert to_precision(other, "bf16", g).host_s == pytest.approx(st.host_s)


def test_precision_keeps_cross_lane_waits():
    g = H.datasheet("h200")
    a = _k(100, name="cutlass_80_simt_sgemm", op_class="matmul", lane=7)
    b = replace(_k(20, lane=9), after=(0,))
    bf = to_precision(_step([a, b]), "bf16", g)
    assert bf.ops[0].name == "cast (autocast)"
    assert bf.ops[2].after == (1,)  # still the GEMM, now behind its cast
    fp = to_precision(_step([a, b], precision="bf16"), "fp32", g)
    assert fp.ops[1].after == (0,)


def test_bf16_drops_convolution_helpers_and_xla_launches_with_them():
    g = H.datasheet("h200")
    helper = _k(40, name="fft2d_r2c_32x32", op_class="convolution", launch=0)
    conv = _k(100, name="sm80_xmma_fprop_implicit_gemm_f32f32", op_class="convolution",
              launch=1)
    relu = _k(10, launch=2)
    st = replace(_step([helper, conv, relu]),
                 launches=tuple(R.HostLaunch(1e-6, 0.0) for _ in range(3)))
    bf = to_precision(st, "bf16", g)
    assert [o.name for o in bf.ops] == ["cast (autocast)", conv.name, relu.name]
    assert len(bf.launches) == 3  # PyTorch: the host is per operator
    # the convolution's GEMM at its class's share above its class's fixed part
    c = g.gemm("fp32") / g.gemm("bf16") / BF16_GEMM_SHARE_BY_CLASS["convolution"]
    fixed = GEMM_FIXED_S_BY_CLASS["convolution"]
    assert fixed > GEMM_FIXED_S
    assert bf.ops[1].dur_s == pytest.approx(fixed + (100e-6 - fixed) * c)
    x = replace(st, meta={**st.meta, "xla": True})
    bx = to_precision(x, "bf16", g)
    assert len(bx.launches) == 2 and [o.launch for o in bx.ops] == [0, 0, 1]
    assert bx.host_s == pytest.approx(2e-6)


def test_batch_norm_backward_moves_at_bf16_layer_norm_does_not():
    g = H.datasheet("h200")
    bn = replace(_k(100, op_class="normalisation", phase="t_b"), op="CudnnBatchNormBackward0")
    ln = replace(bn, op="NativeLayerNormBackward0")
    assert is_batch_norm_backward(bn) and not is_batch_norm_backward(ln)
    assert kernel_to_precision(bn, "fp32", "bf16", g) == pytest.approx(
        100e-6 * BATCH_NORM_BACKWARD_BF16)
    assert kernel_to_precision(ln, "fp32", "bf16", g) == pytest.approx(100e-6)


def test_batch_from_one_trace_scales_kernels_not_the_optimizer():
    g = H.datasheet("h200")
    full = _k(101, grid=(132 * 8 * 4, 1, 1))
    opt = _k(50, op_class="optimizer", phase="t_u")
    out = to_batch(_step([full, opt], batch=32), 64, g)
    f = BATCH_FLOOR_S * 1e6
    assert out.ops[0].dur_s == pytest.approx((f + (101 - f) * 2) * 1e-6)
    assert out.ops[1].dur_s == pytest.approx(opt.dur_s)
    with pytest.raises(ValueError, match="batch size is unknown"):
        to_batch(_step([full], batch=0), 64, g)


def test_interpolation_between_two_traces_is_exact_at_a_power_law():
    f = BATCH_FLOOR_S * 1e6
    a = _step([_k(f + 100), _k(11, op_class="optimizer", phase="t_u")], batch=16)
    b = _step([_k(f + 400), _k(11, op_class="optimizer", phase="t_u")], batch=64)  # linear
    mid = interpolate_batch(a, b, 32)
    assert mid.ops[0].dur_s == pytest.approx((f + 200) * 1e-6)
    assert mid.ops[1].dur_s == pytest.approx(11e-6)
    assert mid.meta["batch_size"] == 32


def test_interpolation_takes_the_nearer_trace_as_template_the_first_on_a_tie():
    a = _step([_k(100, name="only_in_a")], batch=16)
    b = _step([_k(400, name="only_in_b")], batch=64)
    assert interpolate_batch(a, b, 24).ops[0].name == "only_in_a"  # 16 is nearer 24
    assert interpolate_batch(a, b, 48).ops[0].name == "only_in_b"  # 64 is nearer 48
    assert interpolate_batch(a, b, 32).ops[0].name == "only_in_a"  # as near: the first
    assert interpolate_batch(b, a, 32).ops[0].name == "only_in_b"


def test_data_parallel_overlaps_all_reduces_with_the_backward():
    fwd = [_k(100, phase="t_f", launch=0)]
    back = [_k(100, phase="t_b", launch=0) for _ in range(4)]
    opt = [_k(50, op_class="optimizer", phase="t_u", launch=0)]
    st = _step([*fwd, *back, *opt])
    one = R.simulate(st).step_s
    assert one == pytest.approx(550e-6, rel=1e-6)
    # two equal buckets of 30 us each: the first hides under the backward, the second is
    # exposed after the backward's last op, before the optimizer
    dp = to_data_parallel(st, [1e6, 1e6], lambda b: 30e-6)
    assert sum(o.lane == COMM_LANE for o in dp.ops) == 2
    assert R.simulate(dp).step_s == pytest.approx(580e-6, rel=1e-6)
    # one slow all-reduce of everything: exposed in full
    slow = to_data_parallel(st, [2e6], lambda b: 400e-6)
    assert R.simulate(slow).step_s == pytest.approx(950e-6, rel=1e-6)
    with pytest.raises(ValueError, match="no backward"):
        to_data_parallel(_step(fwd), [1e6], lambda b: 1e-6)


def test_weight_casts_follow_the_parameter_count():
    g = H.datasheet("h200")
    fwd = _k(100, name="cutlass_80_simt_sgemm", op_class="matmul")
    bwd = _k(200, name="cutlass_80_simt_sgemm", op_class="matmul", phase="t_b")
    st = _step([fwd, bwd])
    st = replace(st, meta={**st.meta, "params": 10_000_000})
    bf = to_precision(st, "bf16", g)
    casts = [o for o in bf.ops if o.name == "cast (autocast)"]
    assert [o.phase for o in casts] == ["t_f", "t_b"]  # one before, one after
    bw = g.bandwidth_bytes_per_s
    assert casts[0].dur_s == pytest.approx(KERNEL_FLOOR_S + 1e7 * WEIGHT_CAST_BYTES / bw)
    assert casts[1].dur_s == pytest.approx(
        KERNEL_FLOOR_S + 1e7 * WEIGHT_GRAD_CAST_BYTES / bw)
    # a compiled program adds no backward casts; without a parameter count, none either
    x = to_precision(replace(st, meta={**st.meta, "xla": True}), "bf16", g)
    assert [o.phase for o in x.ops if o.name == "cast (autocast)"] == ["t_f"]
    plain = to_precision(_step([fwd, bwd]), "bf16", g)
    assert [o.phase for o in plain.ops if o.name == "cast (autocast)"] == ["t_f"]
    # going back to fp32, autograd's gradient casts are dropped with the operand casts
    back = replace(_k(3, op_class="memory_copy", phase="t_b"), op="ToCopyBackward0")
    fp = to_precision(_step([fwd, back], precision="bf16"), "fp32", g)
    assert len(fp.ops) == 1


def test_convolution_bias_kernels_are_not_helpers():
    helper = _k(40, name="fft2d_r2c_32x32", op_class="convolution")
    bias = _k(40, name="void at::native::reduce_kernel<128, 4>", op_class="convolution")
    fused = _k(40, name="input_reduce_select_fusion_6", op_class="convolution")
    assert is_conv_helper(helper)
    assert not is_conv_helper(bias) and not is_conv_helper(fused)


def test_kernel_names_give_math_precision_and_gemm_eligibility():
    def k(name, cls="convolution"):
        return _k(10, name=name, op_class=cls)

    # cuDNN's bf16 convolutions name their fp32 accumulator and epilogue: still bf16 math
    bf = k("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x64")
    assert is_gemm(bf) and math_precision(bf, "fp32") == "bf16"
    # memory-efficient attention at fp32 names its element type alone
    att = k("fmha_cutlassB_f32_aligned_64x64_k64_sm80", "attention")
    assert math_precision(att, "bf16") == "fp32"
    assert math_precision(k("sm80_xmma_gemm_f32f32_f32f32_f32_nt_n_ffma"), "bf16") == "fp32"
    # TorchInductor's pointwise and reduction kernels are not GEMMs, nor cuDNN helpers
    for name in ("triton_poi_fused_convolution_backward_native_batch_norm_backward_0",
                 "triton_red_fused_convolution_backward_div_native_batch_norm_backward_1"):
        assert not is_gemm(k(name)) and not is_conv_helper(k(name))
    assert is_gemm(k("triton_tem_fused_mm_0", "matmul"))


def test_fp32_gets_convolution_helpers_back_and_drops_xla_converts():
    g = H.datasheet("h200")
    conv = _k(100, name="sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc",
              op_class="convolution")
    convert = _k(80, name="wrapped_convert_1")
    st = replace(_step([conv, convert], precision="bf16"), meta={
        **_step([], precision="bf16").meta, "xla": True})
    out = to_precision(st, "fp32", g)
    assert [o.name for o in out.ops] == [conv.name]       # the convert fusion is gone
    ratio = g.gemm("bf16") / g.gemm("fp32") * BF16_GEMM_SHARE_BY_CLASS["convolution"]
    assert gemm_fixed_s(conv, -1) == 0.0 < gemm_fixed_s(conv, 1)
    assert out.ops[0].dur_s == pytest.approx(
        100e-6 * ratio * GEMM_HELPERS[-1]["convolution"])


def test_jax_norm_layers_move_with_the_precision_torch_autocast_keeps_them():
    g = H.datasheet("h200")
    ln = replace(_k(100, op_class="normalisation"), op="NativeLayerNormBackward0")
    st = _step([ln])
    torch = to_precision(replace(st, meta={**st.meta, "framework": "torch"}), "bf16", g)
    jax = to_precision(replace(st, meta={**st.meta, "framework": "jax", "xla": True}),
                         "bf16", g)
    fixed, r = PRECISION_RATIO["elementwise"]
    assert [o.dur_s for o in torch.ops if o.op_class == "normalisation"] == \
        pytest.approx([100e-6])
    assert [o.dur_s for o in jax.ops] == pytest.approx([fixed + (100e-6 - fixed) * r])
    assert jax.ops[0].op_class == "normalisation"             # its class is kept
    back = to_precision(replace(jax, meta={**jax.meta, "precision": "bf16"}), "fp32", g)
    assert back.ops[0].dur_s == pytest.approx(100e-6)


def test_fp32_gemms_are_no_slower_than_their_roofline_moved():
    g = H.datasheet("h200")
    bw = g.bandwidth_bytes_per_s
    gemm = _k(200, name="nvjet_sm90_tst_128x16_64x11_4x1_v_bz_TNT", op_class="matmul")
    base = _step([gemm, _k(50)], precision="bf16", batch=16)
    plain = to_precision(base, "fp32", g)                # no figures: no cap
    t_plain = sum(o.dur_s for o in plain.ops if is_gemm(o))
    assert t_plain > 10 * 200e-6                            # the ceilings' ratio
    # fcn5 at batch 16: its bf16 GEMMs stream 118 M weights, their FLOPs are a tenth of that
    meta = {**base.meta, "params": 118e6, "train_flops_per_sample": 7.08e8}
    fc = replace(base, meta=meta)
    r_src = min(200e-6, 7.08e8 * 16 / g.gemm("bf16") + 3 * 118e6 * 2 / bw)
    r_dst = 7.08e8 * 16 / g.gemm("fp32") + 3 * 118e6 * 4 / bw
    got = sum(o.dur_s for o in to_precision(fc, "fp32", g).ops if is_gemm(o))
    assert got == pytest.approx(200e-6 - r_src + r_dst) and got < t_plain
    # a convolution's cap: its roofline part at the fp32 convolutions' efficiency
    conv = replace(fc, ops=(replace(gemm, op_class="convolution",
                                    name="sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32"),))
    cap = gemm_roofline_cap(conv, [replace(conv.ops[0], dur_s=1.0)], "fp32", g)
    e = FP32_GEMM_EFFICIENCY["convolution"]
    assert cap == pytest.approx(200e-6 - r_src + r_dst / e)
    # going to bf16 the weights' floor bounds the GEMMs instead: no cap (it would cut them)
    up = replace(fc, meta={**meta, "precision": "fp32"})
    moved = [replace(o, dur_s=kernel_to_precision(o, "fp32", "bf16", g)) for o in up.ops]
    assert gemm_roofline_cap(up, moved, "bf16", g) < 0.9
    assert gemm_s(to_precision(up, "bf16", g).ops) == pytest.approx(
        gemm_s(moved) * gemm_weight_floor(up, moved, "bf16", g), rel=1e-12)


def test_weight_bound_gemms_and_weight_casts_keep_their_time_at_another_batch():
    g = H.datasheet("h200")
    gemm = _k(180, name="gemm_fusion_dot", op_class="matmul")
    conv = _k(80, name="wrapped_convert_1")
    ew = _k(50)
    base = _step([gemm, conv, ew], precision="bf16", batch=16)
    # fcn5: 118 M weights streamed 3 times a step against 0.7 GFLOP a sample
    fc = replace(base, meta={**base.meta, "params": 118e6, "train_flops_per_sample": 7.08e8})
    w_s = GEMM_WEIGHT_PASSES * 118e6 * 2 / g.bandwidth_bytes_per_s

    def roof(b):  # the weights' time plus the FLOPs' at the bf16 ceiling
        return w_s + 7.08e8 * b / g.gemm("bf16")

    assert gemm_roofline_s(118e6, 7.08e8 * 16, "bf16", g) == pytest.approx(roof(16))
    assert gemm_batch_factor(fc, 32, g) == pytest.approx(roof(32) / roof(16))
    assert gemm_batch_factor(fc, 32, g) < 1.2                       # weight-bound
    assert gemm_batch_factor(fc, 4096, g) > 4                        # compute-bound there
    big = replace(fc, meta={**fc.meta, "params": 1e5})                  # compute-bound
    assert gemm_batch_factor(big, 32, g) == pytest.approx(2.0, rel=0.02)
    assert gemm_batch_factor(base, 32, g) == pytest.approx(2.0)     # nothing known
    assert gemm_roofline_s(None, 1e9, "bf16", g) is None
    # the casts: the weights' part stays, the rest scales
    w = 118e6 * WEIGHT_CAST_BYTES / g.bandwidth_bytes_per_s
    total = 80e-6 - BATCH_FLOOR_S
    xla = replace(fc, meta={**fc.meta, "xla": True})
    assert cast_batch_factor(xla, 32, g) == pytest.approx(
        (min(w, total) + (total - min(w, total)) * 2) / total)
    out = to_batch(fc, 32, g)
    f = roof(32) / roof(16)
    assert out.ops[0].dur_s == pytest.approx(BATCH_FLOOR_S + (180e-6 - BATCH_FLOOR_S) * f)
    assert out.ops[2].dur_s == pytest.approx(BATCH_FLOOR_S + (50e-6 - BATCH_FLOOR_S) * 2)
    assert is_weight_cast(conv) and not is_weight_cast(ew)


def test_bf16_gemms_are_no_faster_than_their_weights_stream():
    g = H.datasheet("h200")
    bw = g.bandwidth_bytes_per_s
    sgemm = _k(500, name="cutlass_80_simt_sgemm_128x64", op_class="matmul")
    ew = _k(50)
    base = _step([sgemm, ew], precision="fp32", batch=16)
    plain = to_precision(base, "bf16", g)              # no parameter count: no floor
    t_plain = sum(o.dur_s for o in plain.ops if is_gemm(o))
    assert t_plain < 100e-6                              # the ceiling ratio alone
    # fcn5: 118 M weights, streamed 3 times a step at 2 B (0.17 ms at the H200's datasheet)
    fc = replace(base, meta={**base.meta, "params": 118e6})
    out = to_precision(fc, "bf16", g)
    gemms = [o for o in out.ops if is_gemm(o)]
    w = GEMM_WEIGHT_PASSES * 118e6 * 2 / bw
    assert sum(o.dur_s for o in gemms) == pytest.approx(w)
    assert [o.dur_s for o in out.ops if o.name == ew.name] == \
        [o.dur_s for o in plain.ops if o.name == ew.name]            # others as they were
    # GEMMs traced faster than the parameter count says: the floor is half their time
    fast = replace(fc, ops=(replace(sgemm, dur_s=200e-6), ew))
    got = sum(o.dur_s for o in to_precision(fast, "bf16", g).ops if is_gemm(o))
    assert got == pytest.approx(100e-6)
    # a small model's compute-bound GEMMs: unchanged
    small = replace(fc, meta={**fc.meta, "params": 1e5})
    assert gemm_weight_floor(small, plain.ops[1:2], "bf16", g) == 1.0
    assert sum(o.dur_s for o in to_precision(small, "bf16", g).ops if is_gemm(o)) == \
        pytest.approx(t_plain)


def _op(k, op):
    return replace(k, op=op)


def _transformer_like(batch=8):
    """embedding -> layer_norm -> linear (fp32 in) -> gelu -> linear (bf16 in) -> mixed add
    (fp32 out) -> layer_norm -> linear (fp32 in) -> cross entropy (bf16 logits), with
    PyTorch's figures: rows m = batch x 4, k = 16, n = 32, bias."""
    m, k, n = batch * 4, 16, 32
    gemm = dict(name="sm80_xmma_gemm_f32f32_f32f32_f32", op_class="matmul",
                flops=2.0 * m * n * k, nbytes=4.0 * (k * (m + n) + n))
    return [_op(_k(2, op_class="other", nbytes=4.0 * m * k), "aten::embedding"),
            _op(_k(3, op_class="normalisation", nbytes=4.0 * m * k), "aten::layer_norm"),
            _op(_k(20, **gemm), "aten::linear"),
            _op(_k(3, nbytes=4.0 * m * n), "aten::gelu"),
            _op(_k(20, **gemm), "aten::linear"),
            _op(_k(3, nbytes=8.0 * m * n), "aten::add"),
            _op(_k(3, op_class="normalisation", nbytes=4.0 * m * k), "aten::layer_norm"),
            _op(_k(20, **gemm), "aten::linear"),
            _op(_k(50, op_class="loss", nbytes=4.0 * m * 1000), "aten::cross_entropy_loss"),
            _op(_k(20, name=gemm["name"], op_class="matmul", phase="t_b"), "MmBackward0")]


def test_activation_casts_follow_autocasts_op_lists():
    st = _step(_transformer_like(8), batch=8)
    ac = activation_casts(st)
    m, k = 32, 16
    # only the linear fed by layer_norm reads float32; the one fed by gelu (bf16) does not
    a = pytest.approx(m * k * DOWNCAST_BYTES)
    assert ac.fwd == {2: a, 7: a}
    assert ac.loss_at == 8
    assert ac.loss_bytes == pytest.approx(m * 1000 * UPCAST_BYTES)
    # backward: the activation's gradient up, the logits' gradient down, the mixed add's
    assert ac.bwd_kernels == 4
    assert ac.bwd_bytes == pytest.approx(2 * m * k * UPCAST_BYTES + m * 1000 * DOWNCAST_BYTES
                                         + m * 32 * DOWNCAST_BYTES)
    # the step's data (no producer) is cast, but has no gradient to cast back
    data = _step(_transformer_like(8)[2:], batch=8)
    ac2 = activation_casts(data)
    assert 0 in ac2.fwd  # the data's cast; the add is no mixed one (no float32 stream yet)
    assert ac2.bwd_kernels == 2  # the second layer_norm's output and the logits
    # figures recorded at batch 8, asked at 16: the activations double
    big = replace(st, meta={**st.meta, "batch_size": 16, "figures_batch_size": 8})
    assert activation_casts(big).fwd[2] == pytest.approx(2 * ac.fwd[2])


def test_batch_norm_and_convolutions_add_no_activation_casts():
    conv = _op(_k(30, name="sm80_xmma_fprop_implicit_gemm_f32f32", op_class="convolution",
                  flops=1e9, nbytes=1e6), "aten::conv2d")
    bn = _op(_k(5, op_class="normalisation", nbytes=1e6), "aten::batch_norm")
    ac = activation_casts(_step([conv, bn, conv], batch=8))
    assert ac.fwd == {} and ac.bwd_kernels == 0 and ac.loss_at is None


def test_autocast_walk_is_closed_over_its_states_and_casts():
    # every next state is one the walk can be in, every cast one AUTOCAST_CASTS sizes; the
    # GEMM roles are the GEMM op classes and each leaves a float32 input in bf16
    states = {"data", "bf16", "fp32", "bf16+fp32"}
    for role, moves in AUTOCAST_WALK.items():
        assert set(moves) <= states, role
        for nxt, cast in moves.values():
            assert nxt in states and cast in AUTOCAST_CASTS, (role, nxt, cast)
    for cls in GEMM_CLASSES:
        assert AUTOCAST_WALK[cls]["data"][0] == "bf16"
        assert AUTOCAST_WALK[cls]["fp32"][0] == "bf16+fp32"
    assert all(m[0] == "fp32" for m in AUTOCAST_WALK["fp32"].values())
    assert set(AUTOCAST_WALK["fp32"]) == states


def test_eager_bf16_adds_activation_and_logit_casts_xla_does_not():
    g = H.datasheet("h200")
    st = _step(_transformer_like(8), batch=8)
    st = replace(st, meta={**st.meta, "params": 1000})
    bf = to_precision(st, "bf16", g)
    casts = [o for o in bf.ops if o.name == "cast (autocast)"]
    assert len(casts) == 5  # three weight casts, the logits' upcast, one backward
    loss = [o for o in bf.ops if o.op_class == "loss"]
    assert loss[0].dur_s == pytest.approx(50e-6 * LOSS_KERNELS_BF16)
    t_f, t_b = cast_times(st, g, 3, 1)
    assert sum(o.dur_s for o in casts) > t_f * 3 + t_b + 7 * KERNEL_FLOOR_S
    x = to_precision(replace(st, meta={**st.meta, "xla": True}), "bf16", g)
    xc = [o for o in x.ops if o.name == "cast (autocast)"]
    assert len(xc) == 3 and sum(o.dur_s for o in xc) == pytest.approx(3 * t_f)
    assert [o for o in x.ops if o.op_class == "loss"][0].dur_s == pytest.approx(50e-6 * 0.8)
