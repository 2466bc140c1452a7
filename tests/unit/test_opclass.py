"""The op-class classifier on real kernel and op names.

Names are copied from public PyTorch, cuDNN, cuBLAS, XLA and TensorFlow traces and profiler
tables (found with the project's code search), and from traces taken on the development
machine (torch.profiler, jax.profiler and tf.profiler on the CPU).
"""

from __future__ import annotations

import pytest

from dlperf.measure.breakdown.opclass import OP_CLASSES, classify, label

# (ops, expected class): a CUDA kernel name alone, as in a kernel table without its op.
KERNELS = [
    ("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_"
     "segment_k_off_kernel__5x_cublas", "matmul"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_warpgroupsize1x1x1_execute_"
     "segment_k_off_kernel__5x_cublas", "matmul"),
    ("ampere_sgemm_128x64_tn", "matmul"),
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(cutlass_80_simt_"
     "sgemm_256x128_8x4_nn_align1::Params)", "matmul"),
    ("cutlass_80_tensorop_s1688gemm_128x256_16x3_tn_align4", "matmul"),
    ("nvjet_tst_112x64_64x9_2x1_v_bz_bias_TNN", "matmul"),
    ("triton_tem_fused_mm_0", "matmul"),
    ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_"
     "warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn", "convolution"),
    ("sm90_xmma_dgrad_implicit_gemm_indexed_f32f32_tf32f32_f32_nhwckrsc_nhwc", "convolution"),
    ("sm80_xmma_wgrad_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nhwc", "convolution"),
    ("cutlass3x_sm100_tensorop_s256x256x16implicit_gemm_fprop_bf16", "convolution"),
    ("cudnn::winograd_nonfused::winogradForwardOutput4x4", "convolution"),
    ("implicit_convolveNd_sgemm", "convolution"),
    ("void cudnn::detail::bn_fw_tr_1C11_kernel_NCHW<float, float, 512, true, 1>"
     "(cudnnTensorStruct, float const*, cudnnTensorStruct, float*)", "normalisation"),
    ("cudnn::detail::bn_bw_1C11_kernel_new", "normalisation"),
    ("void at::native::batch_norm_collect_statistics_kernel<float, float, float, int>", "normalisation"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>",
     "normalisation"),
    ("void at::native::(anonymous namespace)::RowwiseMomentsCUDAKernel<float, float>",
     "normalisation"),
    ("triton_poi_fused__native_batch_norm_legit_functional_relu_3", "normalisation"),
    ("triton_per_fused_native_layer_norm_7", "normalisation"),
    ("void RNN_blockPersist_fp_LSTM<float, float, float, 128>", "recurrent"),
    ("RNN_blockPersist_bp_GRU", "recurrent"),
    ("void elemWiseRNNcell<float, float, float, (cudnnRNNMode_t)2>", "recurrent"),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 64, 4>>",
     "attention"),
    ("fmha_cutlassF_f32_aligned_64x64_rf_sm80", "attention"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float>",
     "loss"),
    ("void (anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>",
     "loss"),
    ("triton_red_fused__log_softmax_nll_loss_forward_2", "loss"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
     "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, "
     "at::detail::Array<char*, 3>)", "elementwise"),
    ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>",
     "memory_copy"),
    ("triton_poi_fused_add_relu_12", "elementwise"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>", "elementwise"),
    ("void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>", "pooling"),
    ("void at::native::(anonymous namespace)::adaptive_avg_pool2d_cuda_kernel<float>",
     "pooling"),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
     "communication"),
    ("Memcpy HtoD (Pinned -> Device)", "memory_copy"),
    ("Memset (Device)", "memory_copy"),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 4>",
     "memory_copy"),
    ("void at::native::(anonymous namespace)::indexSelectLargeIndex<float, long, unsigned int>",
     "other"),
    ("void at::native::(anonymous namespace)::embedding_backward_feature_kernel<float>",
     "other"),
]


@pytest.mark.parametrize(("kernel", "cls"), KERNELS)
def test_cuda_kernel_names(kernel: str, cls: str) -> None:
    assert classify(ops=[kernel]) == cls


# PyTorch: (outermost ATen op the model called, kernel or innermost op), context.
TORCH = [
    (["aten::conv2d", "void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true>"],
     [], "convolution"),
    (["aten::linear", "sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x32"], [], "matmul"),
    (["aten::addmm"], [], "matmul"),
    (["aten::lstm", "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32"], [],
     "recurrent"),
    (["aten::_cudnn_rnn"], [], "recurrent"),
    (["aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention"], [],
     "attention"),
    (["aten::batch_norm", "aten::native_batch_norm"], [], "normalisation"),
    (["aten::layer_norm"], [], "normalisation"),
    (["aten::adaptive_avg_pool2d", "aten::copy_"], [], "pooling"),
    (["aten::max_pool2d"], [], "pooling"),
    (["aten::cross_entropy_loss", "aten::_log_softmax"], [], "loss"),
    (["aten::relu", "aten::clamp_min"], [], "elementwise"),
    (["aten::gelu"], [], "elementwise"),
    (["aten::dropout", "aten::native_dropout"], [], "elementwise"),
    (["aten::add_", "void at::native::vectorized_elementwise_kernel<4, "
      "at::native::CUDAFunctor_add<float>>"], [], "elementwise"),
    (["aten::to", "aten::copy_"], [], "memory_copy"),
    (["aten::embedding", "aten::index_select"], [], "other"),
    (["aten::convolution_backward"], ["autograd::engine::evaluate_function: "
                                      "ConvolutionBackward0"], "convolution"),
    (["aten::native_batch_norm_backward"], ["autograd::engine::evaluate_function: "
                                            "NativeBatchNormBackward0"], "normalisation"),
    (["aten::threshold_backward"], ["autograd::engine::evaluate_function: ReluBackward0"],
     "elementwise"),
    (["aten::_cudnn_rnn_backward"], ["autograd::engine::evaluate_function: CudnnRnnBackward0"],
     "recurrent"),
    (["aten::nll_loss_backward"], ["autograd::engine::evaluate_function: NllLossBackward0"],
     "loss"),
    (["aten::_foreach_add_"], ["Optimizer.step#SGD.step"], "optimizer"),
    (["aten::add_", "void at::native::vectorized_elementwise_kernel"],
     ["Optimizer.step#AdamW.step"], "optimizer"),
    ([], ["Optimizer.zero_grad#SGD.zero_grad"], "optimizer"),
    (["void at::native::(anonymous namespace)::multi_tensor_apply_kernel<...>"], [],
     "optimizer"),
    (["c10d::allreduce_", "ncclDevKernel_AllReduce_Sum_f32_RING_LL"], [], "communication"),
]


@pytest.mark.parametrize(("ops", "context", "cls"), TORCH)
def test_torch_ops(ops: list[str], context: list[str], cls: str) -> None:
    assert classify(ops=ops, context=["dlperf_step#3", *context]) == cls


# JAX on XLA: (ops, layers (instance, module class), context (op_name path and source
# functions), phase) from HLO metadata seen on CPU (jit(step)/jvp(M)/conv1/add ...).
XLA = [
    (["conv_general_dilated.2", "conv_general_dilated", "convolution"], ["conv1", "Conv"], [],
     None, "convolution"),
    (["add", "broadcast_add_fusion.1", "add", "broadcast"], ["conv1", "Conv"], [], None,
     "convolution"),
    (["reduce_sum", "ynn_fusion.8", "reduce"], ["bn", "BatchNorm"], [], None, "normalisation"),
    (["mul", "select_multiply_fusion", "multiply"], ["downsample_1", "BatchNorm"], [], "t_b",
     "normalisation"),
    (["dot_general", "ynn_fusion.5", "dot"], ["fc", "Dense"], [], None, "matmul"),
    (["add", "add_fusion"], ["qkv", "Dense"], [], None, "matmul"),
    (["dot_general", "gemm_fusion_dot_265"], ["attn", "SelfAttention"], ["_attend"], None,
     "attention"),
    (["dot_general", "__cublas$gemm", "custom-call"], ["qkv", "Dense"], [], None, "matmul"),
    (["conv_general_dilated", "__cudnn$convBackwardFilter", "custom-call"], ["conv2"], [], "t_b",
     "convolution"),
    (["reduce_max", "add_reduce_fusion", "reduce"], [],
     ["loss_fn", "softmax_cross_entropy_with_integer_labels"], None, "loss"),
    (["scatter-add", "wrapped_scatter", "scatter"], [],
     ["loss_fn", "softmax_cross_entropy_with_integer_labels", "jit(take_along_axis)"], "t_b",
     "loss"),
    (["add", "multiply_add_fusion.7"], [], ["trace.<locals>.update_fn"], "t_u", "optimizer"),
    (["dot_general", "loop_fusion"], ["l0"], ["lstm", "while", "body"], None, "recurrent"),
    (["reduce-window", "reduce_window_fusion"], ["maxpool"], [], None, "pooling"),
    (["max", "loop_maximum_fusion", "maximum"], ["layer1_0", "Bottleneck"], [], None,
     "elementwise"),
    (["copy.15", "copy"], [], [], None, "memory_copy"),
    (["gather", "gather_fusion"], ["embedding", "Embed"], [], None, "other"),
    (["all-reduce-start.1"], [], [], None, "communication"),
]


@pytest.mark.parametrize(("ops", "layers", "context", "phase", "cls"), XLA)
def test_xla_ops(ops, layers, context, phase, cls) -> None:
    assert classify(ops=ops, layers=layers, context=context, phase=phase) == cls


# TensorFlow: (op type, op name's last part), layers from the name scope, context.
TF = [
    (["_MklNativeFusedConv2D", "BiasAdd"], ["conv1_1"], [], "convolution"),
    (["Conv2DBackpropFilter"], ["layer1.0.conv2"], ["gradient_tape"], "convolution"),
    (["Mul", "mul"], ["batchnorm", "bn1_1"], [], "normalisation"),
    (["FusedBatchNormGradV3"], ["layer1.0.downsample.1"], [], "normalisation"),
    (["_MklMatMul", "MatMul_1"], ["MatMul", "fc_1"], ["gradient_tape"], "matmul"),
    (["Einsum", "einsum"], ["einsum", "encoder.0.attn.sdpa"], [], "attention"),
    (["MatMul", "MatMul"], ["encoder.0.attn.qkv"], [], "matmul"),
    (["Mean", "Mean"], ["global_average_pooling2d_1"], [], "pooling"),
    (["MaxPoolGrad"], [], ["gradient_tape"], "pooling"),
    (["SparseSoftmaxCrossEntropyWithLogits"], ["SparseSoftmaxCrossEntropyWithLogits"], [],
     "loss"),
    (["ReluGrad"], ["re_lu_1"], ["gradient_tape"], "elementwise"),
    (["Mul", "Mul_2"], [], ["sgd"], "optimizer"),
    (["AssignAddVariableOp"], [], ["SGD"], "optimizer"),
    (["MatMul"], ["lstm_cell"], ["lstm.l0", "while"], "recurrent"),
    (["CudnnRNNV3"], [], [], "recurrent"),
    (["ResourceGather"], ["embedding"], [], "other"),
    (["NcclAllReduce"], [], [], "communication"),
]


@pytest.mark.parametrize(("ops", "layers", "context", "cls"), TF)
def test_tensorflow_ops(ops, layers, context, cls) -> None:
    assert classify(ops=ops, layers=layers, context=context) == cls


def test_update_phase_is_optimizer_and_unknown_is_other() -> None:
    assert classify(ops=["aten::add_"], phase="t_u") == "optimizer"
    assert classify(ops=["some_unknown_kernel_xyz"]) == "other"
    assert classify() == "other"


def test_short_words_do_not_match_inside_longer_ones() -> None:
    # "conv" inside "convert", "to" inside "tools", "mm" inside "summary", "add" inside "addmm"
    assert classify(ops=["loop_convert_fusion", "convert"]) == "elementwise"
    assert classify(ops=["aten::addmm"]) == "matmul"
    assert classify(ops=["summary_tools"]) == "other"


def test_grad_ops_ending_in_dgrad_are_not_convolutions() -> None:
    # cuDNN's dgrad/wgrad kernels are convolutions, but "SigmoidGrad" and "BiasAddGrad" (the
    # letters d-g-r-a-d run across the op's name) are not: seen in a TensorFlow eager and an
    # XLA trace of the MLP fcn5_tiny on the CPU, which has no convolution.
    assert classify(ops=["BiasAddGrad"], context=["gradient_tape"]) == "elementwise"
    assert classify(ops=["SigmoidGrad"], context=["gradient_tape"]) == "elementwise"
    assert classify(ops=["SigmoidGrad", "fusion", "multiply", "broadcast", "subtract",
                         "subtract_multiply_fusion", "SigmoidGrad"], layers=["Sigmoid", "layers.0_1"],
                    context=["gradient_tape", "layers.0_1", "Sigmoid"]) == "elementwise"
    assert classify(ops=["void cudnn::detail::dgrad_engine<float, 128, 6, 7, 3, 3, 5, true>"]) \
        == "convolution"
    assert classify(ops=["void cudnn::detail::wgrad_alg0_engine<float, 512, 6, 5, 3, 3, 3>"]) \
        == "convolution"
    assert classify(ops=["cutlass_cudnn::library::image_network_first_layer_hmma_wgrad_kernel"]) \
        == "convolution"


def test_every_class_has_a_label() -> None:
    assert len(OP_CLASSES) == 12
    assert label("matmul") == "matmul/linear"
    assert label("unknown") == "unknown"


def test_torch_view_ops_move_no_data():
    """aten::reshape/view/transpose are metadata on a PyTorch trace; XLA's reshape may copy."""
    from dlperf.measure.breakdown.opclass import classify

    assert classify(ops=["aten::reshape"]) == classify(ops=["aten::view"]) == "other"
    assert classify(ops=["aten::transpose"]) == "other"
    assert classify(ops=["aten::copy_"]) == "memory_copy"
    assert classify(ops=["reshape.12"]) == "memory_copy"


# XLA:GPU names a fusion's kernel after the instruction with '.' made '_' (H200 traces of the
# JAX GoogLeNet and VGG-16 in benchmarks/results/h200/breakdown.db). The lines below are the
# max-pool backward of the JAX GoogLeNet as XLA compiles it (select_and_scatter expanded to a
# scatter; copied from googlenet_tiny's compiled step on the CPU), wrapped in a fusion named as
# on the GPU.
GOOGLENET_SCATTER_HLO = '''HloModule jit_train_step

%region_212.258 (select_and_scatter.33: f32[], select_and_scatter.34: f32[]) -> f32[] {
  %select_and_scatter.33 = f32[] parameter(0), metadata={op_name="select_and_scatter"}
  %select_and_scatter.34 = f32[] parameter(1), metadata={op_name="select_and_scatter"}
  ROOT %add.528 = f32[] add(%select_and_scatter.33, %select_and_scatter.34), metadata={op_name="jit(train_step)/transpose(jvp(GoogLeNet))/inception4e/add" stack_frame_id=95}
}

%fused_scatter.4 (param_0.3105: f32[8,4,4,66], param_1.4557: s32[2112,4], param_2.4567: f32[2112,1,1,1,1]) -> f32[8,4,4,66] {
  %param_0.3105 = f32[8,4,4,66]{3,2,1,0} parameter(0)
  %param_1.4557 = s32[2112,4]{1,0} parameter(1)
  %param_2.4567 = f32[2112,1,1,1,1]{4,3,2,1,0} parameter(2)
  ROOT %scatter.31 = f32[8,4,4,66]{3,2,1,0} scatter(%param_0.3105, %param_1.4557, %param_2.4567), update_window_dims={1,2,3,4}, inserted_window_dims={}, scatter_dims_to_operand_dims={0,1,2,3}, index_vector_dim=1, to_apply=%region_212.258, metadata={op_name="jit(train_step)/transpose(jvp(GoogLeNet))/inception4e/select_and_scatter" stack_frame_id=95}
}

ENTRY %main.1 (p.1: f32[8,4,4,66], p.2: s32[2112,4], p.3: f32[2112,1,1,1,1]) -> (f32[8,4,4,66], f32[8,4,4,66]) {
  %p.1 = f32[8,4,4,66]{3,2,1,0} parameter(0)
  %p.2 = s32[2112,4]{1,0} parameter(1)
  %p.3 = f32[2112,1,1,1,1]{4,3,2,1,0} parameter(2)
  %input_scatter_fusion = f32[8,4,4,66]{3,2,1,0} fusion(%p.1, %p.2, %p.3), kind=kInput, calls=%fused_scatter.4
  %input_scatter_fusion.8 = f32[8,4,4,66]{3,2,1,0} fusion(%p.1, %p.2, %p.3), kind=kInput, calls=%fused_scatter.4
  ROOT %tuple = (f32[8,4,4,66], f32[8,4,4,66]) tuple(%input_scatter_fusion, %input_scatter_fusion.8)
}
'''


def test_xla_gpu_kernel_named_after_its_fusion_does_not_decide_the_class() -> None:
    from dlperf.measure.breakdown.xla import is_instruction_kernel, jax_names, parse_hlo

    assert is_instruction_kernel("input_scatter_fusion_8", "input_scatter_fusion.8")
    assert is_instruction_kernel("gemm_fusion_dot_21", "gemm_fusion_dot.21")
    assert is_instruction_kernel("loop_reduce_window_fusion_10", "loop_reduce_window_fusion.10")
    assert is_instruction_kernel("wrapped_scatter.4", "wrapped_scatter.4")  # XLA:CPU thunks
    assert is_instruction_kernel("", "fusion.3")
    assert not is_instruction_kernel(
        "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_"
        "warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn", "custom-call.3")
    assert not is_instruction_kernel("input_scatter_fusion_8", "input_scatter_fusion.9")

    hlo = parse_hlo(GOOGLENET_SCATTER_HLO)
    got = {}
    for kernel, instr in (("input_scatter_fusion", "input_scatter_fusion"),
                          ("input_scatter_fusion_8", "input_scatter_fusion.8")):
        d = jax_names(hlo[instr], kernel, None)
        assert d["phase"] == "t_b" and d["layers"] == ("inception4e",)
        assert d["ops"][0] == "select_and_scatter" and kernel not in d["ops"][:-1]
        got[kernel] = classify(d["ops"], d["layers"], d["context"], d["phase"])
        # the kernel name in front (as before): "scatter" made it other, like an embedding's
        # backward, for every such fusion but the one without a number
        old = classify((kernel, *d["ops"]) if kernel != instr else d["ops"], d["layers"],
                       d["context"], d["phase"])
        assert old == ("pooling" if kernel == instr else "other")
    # the same work gets the class torch gives it: a max-pool's backward is pooling
    assert got == {"input_scatter_fusion": "pooling", "input_scatter_fusion_8": "pooling"}
    # a library kernel stays in front of the instruction's names
    lib = parse_hlo(GOOGLENET_SCATTER_HLO)["input_scatter_fusion.8"]
    assert jax_names(lib, "sm90_xmma_dgrad_implicit_gemm", None)["ops"][0] == \
        "sm90_xmma_dgrad_implicit_gemm"


# The same work in torch and in JAX/XLA gets the same class (names from the H200 traces in
# benchmarks/results/h200/breakdown.db: torch kernels under their outermost ATen op; XLA:GPU
# kernels with the primitive and opcodes of their fusion).
SAME_WORK = [
    # max pooling, backward and forward
    (["aten::max_pool2d_with_indices_backward",
      "void at::native::(anonymous namespace)::max_pool_backward_nhwc<c10::BFloat16, float>("
      "c10::BFloat16 const*, long const*, int, long, long, long, int, int, int, int, int, int, "
      "int, int, int, int, int, in"], [], "pooling"),
    (["select_and_scatter", "fusion", "scatter", "select", "input_scatter_fusion.12"],
     ["inception5a"], "pooling"),
    (["aten::max_pool2d_with_indices",
      "void at::native::(anonymous namespace)::max_pool_forward_nhwc<c10::BFloat16, int>("
      "c10::BFloat16 const*, int, int, int, int, int, int, int, int, int, int, int, int, int, "
      "int, int, int, int, int, int, i"], [], "pooling"),
    (["reduce_window_max", "fusion", "reduce-window", "loop_reduce_window_fusion.10"],
     ["inception4b"], "pooling"),
    # the inception blocks' concatenation
    (["aten::cat", "void at::native::(anonymous namespace)::CatArrayBatchedCopy_alignedK_contig"
      "<at::native::(anonymous namespace)::OpaqueType<2u>, unsigned int, 4, 64, 64>"], [],
     "memory_copy"),
    (["concatenate", "fusion", "concatenate", "loop_concatenate_fusion.2"], ["inception3b"],
     "memory_copy"),
    (["pad", "fusion", "concatenate", "pad", "concatenate_pad_fusion.2"], ["inception4d"],
     "memory_copy"),
    (["MemcpyD2D"], [], "memory_copy"),
]


@pytest.mark.parametrize(("ops", "layers", "cls"), SAME_WORK)
def test_same_work_same_class_in_torch_and_xla(ops, layers, cls) -> None:
    assert classify(ops=ops, layers=layers) == cls
