"""JAX's ahead-of-time compile in time to target (docs/measurement.md, "Recompiles" and "Time
to target and compile"): the compile done before the loop is counted with compile, left out
without it, and the loop's compile counter (traces + XLA compilations) sees no compile after
the ahead-of-time one."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")
pytest.importorskip("optax")

from dlperf.config import IterationPolicy, make_run_config  # noqa: E402
from dlperf.worker import run_record  # noqa: E402


def test_jax_time_to_target_counts_the_compile_before_the_loop():
    pol = IterationPolicy(min_iters=10, min_time_s=0.0, max_warmup_iters=6, min_warmup_iters=0,
                          warmup_window=3, warmup_rel_tol=0.5)
    rec = run_record(make_run_config(model="fcn5_tiny", framework="jax", mode="xla",
                                     batch_size=8, iterations=pol, target_loss=1e9,
                                     measure_ceilings=False))
    assert rec.identity.status == "ok", rec.identity.error
    comp, conv, t = rec.compile, rec.convergence, rec.timing
    assert comp.compile_before_loop_s == comp.compile_time_s > 0
    # the step was compiled ahead of time: the loop's counter never moved
    assert comp.compiled_at == {"first": [], "warmup": [], "measure": []}
    assert t.compile_handling == "none" and t.excluded_steps == []
    # a target any loss reaches: the first smoothed loss (iteration 10)
    assert conv.reached and conv.iterations_to_target == 10
    steps = (rec.samples["first"] + rec.samples["warmup"] + rec.samples["measure"])[:10]
    assert conv.time_to_target_s == pytest.approx(comp.compile_before_loop_s + sum(steps))
    assert conv.time_to_target_no_compile_s <= sum(steps)
    assert conv.compile_time_s >= comp.compile_before_loop_s and conv.recompiles == 0


def test_jax_timeline_point_compiles_the_step_once_and_traces_it():
    """A ``--timeline`` point on one device traces the executable it measured: the step is
    traced (Python) and XLA-compiled once, ahead of the loop; the profiled steps compile
    nothing (``trace.compiles``, and the run's own counter, which counts through the trace
    when ceilings are off); the kept timeline holds the traced steps' XLA ops with their HLO
    instruction and phase."""
    from dlperf.results.timelines import decode

    pol = IterationPolicy(min_iters=5, min_time_s=0.0, max_warmup_iters=4, min_warmup_iters=0,
                          warmup_window=2, warmup_rel_tol=0.5)
    rec = run_record(make_run_config(model="fcn5_tiny", framework="jax", mode="xla",
                                     batch_size=8, iterations=pol, timeline=True,
                                     measure_ceilings=False))
    assert rec.identity.status == "ok", rec.identity.error
    assert rec.compile.n_compiles == 1 and rec.compile.recompiles == 0
    assert rec.compile.compile_time_s > 0
    assert rec.trace.available, rec.trace
    assert rec.trace.compiles == {"retraces": 0, "xla_compiles": 0, "xla_compile_time_s": 0.0,
                                  "executable": "reused"}
    assert rec.flags["retraces"] == 1 and rec.flags["recompiles"] == 0
    ops = decode(rec.timeline.model_dump())
    steps = {o["step"] for o in ops}
    assert steps == set(range(rec.trace.n_steps)), steps
    assert all(o["op"] for o in ops)  # every kept op names its HLO instruction
    assert {o["phase"] for o in ops} >= {"t_f", "t_b", "t_u"}
