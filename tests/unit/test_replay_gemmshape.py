"""A traced GEMM's shape from its FLOPs and bytes (dlperf.perfmodel.gemmshape) and what the
precision transform does with its alignment (dlperf.perfmodel.transforms.precision)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dlperf.perfmodel import gemmshape as G
from dlperf.perfmodel import hardware as H
from dlperf.perfmodel import replay as R
from dlperf.perfmodel.transforms.precision import (
    BF16_GEMM_SHARE,
    BF16_GEMM_SHARE_BY_ALIGN,
    BF16_GEMM_SHARE_BY_CLASS,
    bf16_share,
    gemm_alignment,
    kernel_to_precision,
)


def _figures(m, n, k, elem=4, bias=False):
    return 2 * m * n * k, elem * (k * (m + n) + (n if bias else 0))


def test_gpt2_output_layer_is_recovered_and_misaligned():
    # GPT-2's tied output layer at batch 8 x 1024 tokens, as the stored timeline records it
    f, y = 632_379_408_384, 179_555_328
    assert (f, y) == _figures(8192, 50257, 768)
    assert (8192, 50257, 768) in G.gemm_dims(f, y, 4)
    assert G.alignment(f, y, 8, (4,)) == 1
    # its backward's input gradient: inner dimension 50257, recorded with the same form
    f2, y2 = _figures(8192, 768, 50257)
    assert G.alignment(f2, y2, 8, (4,)) == 1


def test_aligned_and_half_aligned_layers():
    f, y = _figures(4096, 3072, 768, bias=True)
    assert (4096, 3072, 768) in G.gemm_dims(f, y, 4)
    assert G.alignment(f, y, 32, (4,)) == 8
    f, y = _figures(2240, 10000, 650)  # LSTM's decoder: 650 hidden units
    assert G.alignment(f, y, 64, (4,)) == 2


def test_figures_that_are_no_gemm_give_no_alignment():
    assert G.gemm_dims(7, 12, 4) == ()                 # odd FLOPs
    assert G.alignment(1e9 + 0.5, 4e6, 8) is None       # not an exact count
    assert G.alignment(None, 4e6, 8) is None
    assert G.alignment(*_figures(8192, 50257, 768), 0) is None  # batch unknown
    with pytest.raises(ValueError):
        G.gemm_dims(0, 10, 4)


def test_alignment_takes_the_most_favourable_reading():
    # the same figures as a (1024 x 512) @ (512 x 1024) GEMM with a bias, or a degenerate
    # 2-deep one: the real, aligned reading wins
    f, y = _figures(1024, 1024, 512, bias=True)
    assert len(G.gemm_dims(f, y, 4)) > 1
    assert G.alignment(f, y, 8, (4,)) == 8


def test_step_trace_marks_matmul_kernels_with_their_alignment():
    f, y = _figures(8192, 50257, 768)
    ops = [{"step": 0, "kind": "kernel", "stream": 7, "start_ns": 0, "dur_ns": 1000,
            "name": "sm80_xmma_gemm_f32f32", "op_class": "matmul", "op": "aten::linear",
            "phase": "t_f", "launch_start_ns": 0, "launch_dur_ns": 5, "op_flops": f,
            "op_bytes": y},
           {"step": 0, "kind": "kernel", "stream": 7, "start_ns": 2000, "dur_ns": 1000,
            "name": "elementwise", "op_class": "elementwise", "op": "aten::add",
            "phase": "t_f", "launch_start_ns": 10, "launch_dur_ns": 5}]
    st = R.step_trace({"steps_ns": [[0, 5000]]}, ops,
                      meta={"batch_size": 8, "precision": "fp32"})
    assert [o.align for o in st.ops] == [1, None]


def test_bf16_share_follows_the_alignment():
    g = H.datasheet("h200")
    k = R.DeviceOp(lane=7, dur_s=1001e-6, kind="kernel", name="sm80_xmma_gemm_f32f32_ffma",
                   op_class="matmul", op="aten::linear", phase="t_f", launch=0)
    assert bf16_share(k) == BF16_GEMM_SHARE
    assert bf16_share(replace(k, align=8)) == BF16_GEMM_SHARE
    odd = replace(k, align=1)
    assert bf16_share(odd) == BF16_GEMM_SHARE_BY_ALIGN[1] < BF16_GEMM_SHARE
    # a misaligned GEMM keeps more of its fp32 time at bf16
    assert kernel_to_precision(odd, "fp32", "bf16", g) > \
        2 * kernel_to_precision(k, "fp32", "bf16", g)
    # a bf16 kernel's name states its alignment: going to fp32 it gains less
    b1 = replace(k, name="cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn_align1",
                 dur_s=400e-6)
    assert gemm_alignment(b1) == 1
    b8 = replace(b1, name="nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_TNT")
    assert kernel_to_precision(b1, "bf16", "fp32", g) < \
        kernel_to_precision(b8, "bf16", "fp32", g)
    # other classes keep theirs, whatever the alignment
    conv = replace(k, op_class="convolution", align=1)
    assert bf16_share(conv) == BF16_GEMM_SHARE_BY_CLASS["convolution"]
