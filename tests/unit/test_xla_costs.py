"""Per-kernel FLOPs and bytes of XLA kernels from the compiled step's HLO text
(dlperf.measure.breakdown.hlocost): the formulas on synthetic instructions (XLA:CPU's and
XLA:GPU's library calls), then on XLA:CPU here: a jitted MLP and a conv step, whose kernels'
FLOPs sum to 2*M*N*K by hand and lie within FLOPS_TOLERANCE below XLA's cost_analysis, and a
traced MLP step whose timeline rows carry them (JAX tests grouped at the end: slow import)."""

from __future__ import annotations

import pytest

from dlperf.measure.breakdown.hlocost import (
    FLOPS_TOLERANCE,
    arrays,
    kernel_costs,
    nbytes,
    step_flops,
)
from dlperf.measure.breakdown.xla import parse_hlo

# Instructions as XLA prints them (XLA:CPU lines from jax 0.10's as_text() of a conv step:
# padding, stride, lhs/rhs dilation and feature groups; GPU library calls as XLA:GPU writes
# them, not taken from a GPU run).
HLO = r"""
HloModule jit_step, entry_computation_layout={()->f32[]}

%fused_dot (param_0: f32[64,256], param_1: f32[256,512]) -> f32[64,512] {
  %param_0 = f32[64,256]{1,0} parameter(0)
  %param_1 = f32[256,512]{1,0} parameter(1)
  ROOT %dot.9 = f32[64,512]{1,0} dot(%param_0, %param_1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%outer (p0: f32[64,256], p1: f32[256,512]) -> f32[64,512] {
  %p0 = f32[64,256]{1,0} parameter(0)
  %p1 = f32[256,512]{1,0} parameter(1)
  %inner = f32[64,512]{1,0} fusion(%p0, %p1), kind=kCustom, calls=%fused_dot
  ROOT %t = f32[64,512]{1,0} tanh(%inner)
}

ENTRY %main (x: f32[64,256], w: f32[256,512], b: f32[4,8,16], c: f32[4,16,32], img: f32[2,10,10,4], k: f32[3,3,4,8], h: f32[2,10,10,8], k2: f32[2,2,4,6], dy: f32[2,5,5,6], u: f32[2,10,10,4]) -> f32[] {
  %x = f32[64,256]{1,0} parameter(0)
  %w = f32[256,512]{1,0} parameter(1)
  %b = f32[4,8,16]{2,1,0} parameter(2)
  %c = f32[4,16,32]{2,1,0} parameter(3)
  %img = f32[2,10,10,4]{3,2,1,0} parameter(4)
  %k = f32[3,3,4,8]{3,2,1,0} parameter(5)
  %h = f32[2,10,10,8]{3,2,1,0} parameter(6)
  %k2 = f32[2,2,4,6]{3,2,1,0} parameter(7)
  %dy = f32[2,5,5,6]{3,2,1,0} parameter(8)
  %u = f32[2,10,10,4]{3,2,1,0} parameter(9)
  %dot.1 = f32[64,512]{1,0} dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="jit(step)/jvp()/dot_general"}
  %bmm = f32[4,8,32]{2,1,0} dot(%b, %c), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
  %ynn_fusion.4 = f32[64,512]{1,0} fusion(%x, %w), kind=kCustom, calls=%outer, backend_config={"fusion_config":{"kind":"__ynn_fusion"},"outer_dimension_partitions":[]}
  %conv.same = f32[2,10,10,8]{3,2,1,0} convolution(%img, %k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  %conv.grouped = f32[2,5,5,6]{3,2,1,0} convolution(%h, %k2), window={size=2x2 stride=2x2}, dim_labels=b01f_01io->b01f, feature_group_count=2
  %conv.nowindow = f32[2,10,10,8]{3,2,1,0} convolution(%img, %k), dim_labels=b01f_01io->b01f
  %gemm = (f32[64,512]{1,0}, s8[4194304]{0}) custom-call(%x, %w), custom_call_target="__cublas$gemm", metadata={op_name="jit(step)/dot_general"}, backend_config={"operation_queue_id":"0","gemm_backend_config":{"alpha_real":1,"beta":0,"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],"rhs_contracting_dimensions":["0"],"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]},"epilogue":"DEFAULT"}}
  %cudnn.fwd = (f32[2,10,10,8]{3,2,1,0}, u8[0]{0}) custom-call(%img, %k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, custom_call_target="__cudnn$convForward"
  %cudnn.bwd_in = (f32[2,10,10,4]{3,2,1,0}, u8[0]{0}) custom-call(%h, %k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, custom_call_target="__cudnn$convBackwardInput"
  %cudnn.bwd_w = (f32[3,3,4,8]{3,2,1,0}, u8[16]{0}) custom-call(%u, %h), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, custom_call_target="__cudnn$convBackwardFilter"
  %mystery = f32[64,512]{1,0} custom-call(%x, %w), custom_call_target="my_library_matmul"
  %add.3 = f32[64,512]{1,0} add(%dot.1, %dot.1)
  ROOT %r = f32[] constant(0)
}
"""

#: SAME 3x3 convolution of a 10-wide dimension with padding 1: kernel taps at offsets -1, 0,
#: +1 meet 9, 10 and 9 input positions (XLA counts only valid, unpadded positions).
SAME_VALID = 9 + 10 + 9


def test_shapes_and_bytes():
    assert arrays("(f32[64,512]{1,0}, s8[16]{0})") == [("f32", (64, 512)), ("s8", (16,))]
    assert arrays("f32[]") == [("f32", ())] and nbytes("bf16[3,4]{1,0}") == 24
    assert nbytes("pred[7]") == 7 and nbytes("s4[3]") == 2
    with pytest.raises(ValueError, match="no known size"):
        arrays("q7[3]")


def test_dots_convolutions_and_library_calls():
    c = kernel_costs(parse_hlo(HLO))
    mnk = 2 * 64 * 512 * 256
    assert c["dot.1"] == {"op_flops": mnk, "op_bytes": 4 * (64 * 256 + 256 * 512 + 64 * 512)}
    assert c["bmm"]["op_flops"] == 2 * 4 * 8 * 32 * 16
    assert c["ynn_fusion.4"]["op_flops"] == mnk  # a dot two fusions deep
    assert c["conv.same"]["op_flops"] == 2 * 4 * 8 * 2 * SAME_VALID ** 2
    # 8 input features in 2 groups, stride 2, no padding: 5 outputs x 2 taps per dimension
    assert c["conv.grouped"]["op_flops"] == 2 * (8 // 2) * 6 * 2 * (5 * 2) ** 2
    assert c["conv.nowindow"]["op_flops"] is None  # 2 spatial dimensions, no window: not guessed
    # cuBLAS: the dot formula from backend_config; the s8 workspace is not traffic
    assert c["gemm"] == c["dot.1"]
    # cuDNN: the forward convolution's count whichever tensor is the result
    fwd = 2 * 4 * 8 * 2 * SAME_VALID ** 2
    assert c["cudnn.fwd"]["op_flops"] == c["cudnn.bwd_in"]["op_flops"] == fwd
    assert c["cudnn.bwd_w"]["op_flops"] == fwd
    assert c["cudnn.bwd_w"]["op_bytes"] == 4 * (3 * 3 * 4 * 8 + 2 * 10 * 10 * 4 + 2 * 10 * 10 * 8)
    # an unknown library call: bytes yes, FLOPs not guessed
    assert c["mystery"]["op_flops"] is None and c["mystery"]["op_bytes"] == c["dot.1"]["op_bytes"]
    assert c["add.3"]["op_flops"] == 0  # elementwise work is not counted
    # parameters, constants and instructions inside fused computations are no kernels
    assert not {"x", "r", "dot.9", "inner", "p0"} & set(c)


def test_a_missing_operand_leaves_bytes_unknown():
    text = HLO.replace("%add.3 = f32[64,512]{1,0} add(%dot.1, %dot.1)",
                       "%add.3 = f32[64,512]{1,0} add(%dot.1, %gone)")
    assert kernel_costs(parse_hlo(text))["add.3"]["op_bytes"] is None


# ---- XLA:CPU (jax) ----------------------------------------------------------------------

B, D, H, OUT = 64, 256, 512, 128


def _mlp():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy

    def loss(p, x, y):
        h = jnp.tanh(x @ p["w1"] + p["b1"])
        return jnp.mean((h @ p["w2"] - y) ** 2)

    def step(p, x, y):
        g = jax.grad(loss)(p, x, y)
        return jax.tree.map(lambda a, b: a - 0.1 * b, p, g), loss(p, x, y)

    p = {"w1": jnp.full((D, H), 0.01), "b1": jnp.zeros(H), "w2": jnp.full((H, OUT), 0.01)}
    x, y = jnp.ones((B, D)), jnp.ones((B, OUT))
    return jax, jax.jit(step, donate_argnums=0), p, x, y


#: The MLP step's matmuls by hand: forward x@w1 and h@w2; backward dh = g@w2^T, dw2 = h^T@g,
#: dw1 = x^T@dh (x needs no gradient); the loss is computed twice but XLA shares it.
MLP_FLOPS = 2 * B * D * H * 2 + 2 * B * H * OUT * 3


def _cost_flops(compiled):
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return float(cost["flops"])


def test_mlp_kernel_flops_sum_to_the_matmuls_and_stay_near_cost_analysis():
    jax, jitted, p, x, y = _mlp()
    compiled = jitted.lower(p, x, y).compile()
    costs = kernel_costs(parse_hlo(compiled.as_text()))
    assert step_flops(costs) == MLP_FLOPS
    total = _cost_flops(compiled)
    assert (1 - FLOPS_TOLERANCE) * total <= MLP_FLOPS <= total
    assert all(c["op_bytes"] is not None and c["op_bytes"] > 0 for c in costs.values()
               if c["op_flops"])


def test_conv_kernel_flops_match_xla_count_by_hand():
    jax = pytest.importorskip("jax")
    jnp, lax = jax.numpy, jax.lax
    dn = ("NHWC", "HWIO", "NHWC")

    def loss(p, x):
        h = lax.conv_general_dilated(x, p["k"], (1, 1), "SAME", dimension_numbers=dn)
        h = lax.conv_general_dilated(jax.nn.relu(h), p["k2"], (2, 2), "VALID",
                                     dimension_numbers=dn, feature_group_count=2)
        return jnp.mean(h ** 2)

    def step(p, x):
        g = jax.grad(loss)(p, x)
        return jax.tree.map(lambda a, b: a - 0.1 * b, p, g)

    p = {"k": jnp.full((3, 3, 4, 8), 0.1), "k2": jnp.full((2, 2, 4, 6), 0.1)}
    compiled = jax.jit(step).lower(p, jnp.ones((2, 10, 10, 4))).compile()
    got = step_flops(kernel_costs(parse_hlo(compiled.as_text())))
    conv1 = 2 * 4 * 8 * 2 * SAME_VALID ** 2          # forward, and again for its filter gradient
    conv2 = 2 * (8 // 2) * 6 * 2 * (5 * 2) ** 2       # forward, input and filter gradients
    assert got == 2 * conv1 + 3 * conv2
    total = _cost_flops(compiled)
    assert (1 - FLOPS_TOLERANCE) * total <= got <= total


def test_traced_mlp_timeline_rows_carry_flops_and_bytes(tmp_path):
    from dlperf.frameworks.jax.profile import trace_steps
    from dlperf.measure.breakdown.timeline import decode, encode, rows

    jax, jitted, p, x, y = _mlp()
    compiled = jitted.lower(p, x, y).compile()

    class Run:
        state = p

        def step(self):
            self.state, loss = compiled(self.state, x, y)
            return loss

    trace = trace_steps(jax, Run(), compiled.as_text(), 3, tmp_path / "trace")["trace"]
    ops = rows(trace)
    assert decode(encode(trace)) == ops
    for k in range(3):
        mine = [o for o in ops if o["step"] == k]
        assert sum(o["op_flops"] or 0 for o in mine) == MLP_FLOPS
        assert all(o["op_bytes"] for o in mine)  # every thunk is named after its instruction
    dots = [o for o in ops if o["step"] == 0 and o["op_flops"]]
    assert {o["op_flops"] for o in dots} == {2 * B * D * H, 2 * B * H * OUT}


@pytest.mark.slow
def test_jax_timeline_run_stores_kernel_flops(tmp_path):
    """``dlperf run --framework jax --model fcn5_tiny --timeline`` on the CPU: the stored
    timeline's dot thunks carry 2*M*N*K of one layer, and one iteration's sum is every
    layer's forward and weight-gradient matmul plus the input-gradient matmuls of all
    layers but the first (its input needs no gradient)."""
    import subprocess
    import sys

    pytest.importorskip("jax")
    pytest.importorskip("flax")
    from dlperf.measure.breakdown.timeline import decode
    from dlperf.results import timelines
    from dlperf.results.store import ResultStore

    db = tmp_path / "t.db"
    r = subprocess.run([sys.executable, "-m", "dlperf", "run", "--framework", "jax",
                        "--model", "fcn5_tiny", "--batch-size", "8", "--threads", "1",
                        "--timeline", "--no-ceilings", "--db", str(db)],
                       capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stdout + r.stderr
    with ResultStore(db, read_only=True) as s:
        (rec,) = s.records()
        ops = decode(timelines.load(s, rec.stored.id))
    widths = (512, 128, 128, 128, 512)
    layers = [2 * 8 * i * j for i, j in zip(widths, widths[1:])]
    dots = [o for o in ops if o["step"] == 0 and o["op_flops"]]
    assert {o["op_flops"] for o in dots} == set(layers)
    assert sum(o["op_flops"] for o in dots) == 2 * sum(layers) + sum(layers[1:])
    assert all(o["op_bytes"] for o in ops if o["step"] is not None)
