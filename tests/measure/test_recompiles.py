"""Compile events in the measured loop (docs/measurement.md, "Recompiles"; issue 23 item 1):
warm-up does not settle while the step compiles, a measured segment that compiled is measured
again or its compile steps are excluded (and the record says which), the warnings tell a run
that never settled from one that recompiled while measured, and time to target counts compile
the same way whatever the framework does before its loop. Scripted steps and the fake
framework, on a fake clock: exact."""

from __future__ import annotations

import sys

import pytest

from dlperf.config import IterationPolicy, make_run_config
from dlperf.measure.convergence import compile_steps, summarize_convergence
from dlperf.measure.loop import MAX_REMEASURES, measure
from dlperf.measure.segment import compile_handling
from dlperf.measure.timers import HostTimer
from dlperf.measure.warnings import quality_warnings
from dlperf.report.cells import fmt_sig
from dlperf.results.schema import RunRecord
from dlperf.results.view import as_records
from fakes import FakeClock

STEP_S = 0.125
COMPILE_S = 1.0


def compiling_step(clock: FakeClock, compile_at):
    """A step of STEP_S (COMPILE_S more at the 1-based step numbers in ``compile_at``, or
    where ``compile_at(n)`` is true), with a compile counter."""
    state = {"n": 0, "compiles": 0}
    due = compile_at if callable(compile_at) else (lambda n: n in compile_at)

    def step():
        state["n"] += 1
        clock.t += STEP_S
        if due(state["n"]):
            clock.t += COMPILE_S
            state["compiles"] += 1
        return 1.0 / state["n"]

    return step, lambda: state["compiles"]


def run(compile_at, **policy):
    clock = FakeClock()
    step, count = compiling_step(clock, compile_at)
    pol = {"min_iters": 20, "min_time_s": 0.0, "warmup_window": 5, "min_warmup_iters": 10,
           "max_warmup_iters": 200, "max_time_s": 60.0, **policy}
    return measure(step, HostTimer(clock=clock), IterationPolicy(**pol), clock=clock,
                   compiles=count)


def test_warm_up_does_not_settle_while_the_step_compiles():
    # Steps 2..12 take STEP_S, but the counter moves at steps 4, 9 and 14 (warm-up iterations
    # 3, 8, 13 counted from 1 after the first): without the counter the first two windows
    # (10 steps) would agree on their median; with it, two windows with no compile are needed.
    res = run({4, 9, 14})
    assert res.compiled_at["first"] == [] and res.compiled_at["warmup"] == [2, 7, 12]
    assert res.steady_state is True
    # the last compile is warm-up index 12 (window 11-15); windows 16-20 and 21-25 are clean
    assert len(res.warmup_s) == 25
    assert res.compiled_at["measure"] == [] and res.remeasured == 0
    assert all(t == STEP_S for t in res.measured_s)


def test_without_a_counter_the_same_run_settles_early_and_measures_a_compile():
    # the contrast: the detector alone declares steady state between the compiles
    clock = FakeClock()
    step, _ = compiling_step(clock, {4, 9, 14})
    res = measure(step, HostTimer(clock=clock),
                  IterationPolicy(min_iters=20, min_time_s=0.0, warmup_window=5,
                                  min_warmup_iters=10), clock=clock)
    assert res.compiled_at is None and res.steady_state is True
    assert len(res.warmup_s) == 10  # 2 windows whose medians agree, compiles and all
    assert max(res.measured_s) == STEP_S + COMPILE_S  # step 14 was measured


def test_a_late_recompile_while_measured_is_measured_again_after_a_new_warm_up():
    # warm-up settles after 10 iterations; step 15 (the 4th measured) recompiles once
    res = run({15})
    assert res.remeasured == 1
    assert res.compiled_at["measure"] == []  # the final segment is clean
    # the first segment (20 steps, one a compile) became warm-up, then 10 more warm-up steps
    assert res.compiled_at["warmup"] == [13]
    assert len(res.warmup_s) == 10 + 20 + 10
    assert res.steady_state is True
    assert len(res.measured_s) == 20 and all(t == STEP_S for t in res.measured_s)
    assert len(res.losses["warmup"]) == len(res.warmup_s)
    assert len(res.losses["measure"]) == 20


def test_recompiles_after_every_new_warm_up_are_excluded_after_the_last_try():
    # settles, then compiles at the 4th step of each measured segment: MAX_REMEASURES tries, then
    # the compile step of the last segment is reported for exclusion
    starts = []

    def due(n):
        return any(n == s + 3 for s in starts)

    clock = FakeClock()
    step, count = compiling_step(clock, due)
    n_seen = []

    def on_phase(phase):  # the next step starts a measured segment
        starts.append(len(n_seen) + 1)

    def counted():
        n_seen.append(1)
        return step()

    res = measure(counted, HostTimer(clock=clock),
                  IterationPolicy(min_iters=20, min_time_s=0.0, warmup_window=5,
                                  min_warmup_iters=10), clock=clock, on_phase=on_phase,
                  compiles=count)
    assert res.remeasured == MAX_REMEASURES == len(starts) - 1
    assert res.compiled_at["measure"] == [3]
    handling, excluded = compile_handling(res.compiled_at, res.remeasured, 1)
    assert (handling, excluded) == ("excluded", [3])


def test_a_step_that_never_settles_is_not_measured_again():
    # a compile every 10th step: no two clean windows of 5 ever (the attack of issue 23)
    res = run(lambda n: n % 10 == 0, max_warmup_iters=60)
    assert res.steady_state is False and res.remeasured == 0
    assert len(res.warmup_s) == 60
    assert res.compiled_at["measure"] == [8, 18]  # steps 70 and 80


def test_the_remeasure_stays_in_the_time_budget():
    # a segment of 3 s with a budget of 3.5 s: no room for a new warm-up and segment
    res = run({15}, min_time_s=2.5, max_time_s=3.5)
    assert res.remeasured == 0 and res.compiled_at["measure"] == [3]


def test_compile_handling_says_which():
    assert compile_handling(None, 0, None) == (None, [])
    assert compile_handling(None, 0, 2) == ("not located", [])
    assert compile_handling({"measure": []}, 0, 0) == ("none", [])
    assert compile_handling({"measure": []}, 1, 0) == ("remeasured", [])
    assert compile_handling({"measure": [7, 3]}, 2, 2) == ("excluded", [3, 7])


# --- through the worker, with the fake framework -------------------------------------------

@pytest.fixture
def fake_record(monkeypatch):
    from dlperf import registry
    from dlperf.frameworks import ADAPTERS
    from dlperf.worker import run_record

    monkeypatch.setitem(registry.FRAMEWORK_MODES, "fake", ("eager",))  # as DLPERF_FAKE_FRAMEWORK=1
    monkeypatch.setitem(ADAPTERS, "fake", "dlperf.frameworks.fake.adapter:FakeAdapter")

    def make(target_loss=None, **options):
        cfg = make_run_config(model="fcn5_tiny", framework="fake", batch_size=8,
                              options={"step_s": 0.01, **options},
                              target_loss=target_loss, measure_ceilings=False,
                              iterations=IterationPolicy(min_iters=20, min_time_s=0.1,
                                                         max_time_s=5.0, warmup_window=5,
                                                         min_warmup_iters=10,
                                                         max_warmup_iters=100))
        return run_record(cfg)

    return make


def test_recompile_steps_are_excluded_from_median_ci_and_throughput(fake_record):
    rec = fake_record(recompile_every=10, recompile_s=0.9)
    t, s = rec.timing, rec.summary
    assert rec.identity.status == "ok"
    assert t.warmup_settled is False and t.steady_state is False
    assert t.compile_handling == "excluded" and t.remeasured == 0
    assert t.n_measured == 20 and t.excluded_steps == [8, 18]
    # every raw sample kept; the statistics over the other 18
    assert len(rec.samples["measure"]) == 20
    assert sorted(rec.samples["measure"])[-2:] == [pytest.approx(0.91)] * 2
    assert s.n == 18 and s.max == pytest.approx(0.01) and s.median == pytest.approx(0.01)
    assert s.ci_high == pytest.approx(0.01)
    assert rec.throughput.samples == 18 * 8
    assert rec.throughput.samples_per_s == pytest.approx(800.0)
    assert rec.compile.recompiles_measured == 2
    assert rec.compile.compiled_at["measure"] == [8, 18]
    w = quality_warnings(rec)
    assert any(x.startswith("warm-up never settled: the step was still compiling (10 compile(s) "
                            "in 100 warm-up iterations, the last at iteration 99)") for x in w)
    assert ("the step recompiled while measured: 2 of 20 measured step(s) compiled and are "
            "excluded from the median, CI and throughput (their raw samples are kept)") in w
    # the stored record reads back with its new fields (schema 10)
    again = RunRecord.from_dict(rec.to_dict())
    assert again.timing.excluded_steps == [8, 18] and again.compile.compiled_at == \
        rec.compile.compiled_at


def test_a_one_off_recompile_is_measured_again_and_the_record_says_so(fake_record):
    # settles after 10 warm-up steps (steps 2-11), measures from step 12: step 15 recompiles
    rec = fake_record(recompile_at=[15], recompile_s=0.5)
    t = rec.timing
    assert t.compile_handling == "remeasured" and t.remeasured == 1
    assert t.warmup_settled is True and t.steady_state is True and t.excluded_steps == []
    assert rec.compile.recompiles_measured == 0  # counted from the final segment's start
    assert rec.summary.max == pytest.approx(0.01) and rec.summary.n == t.n_measured
    assert not [x for x in quality_warnings(rec) if "settled" in x or "recompiled" in x]


def test_a_run_that_never_settles_without_compiling_says_so():
    rec = RunRecord.from_dict({"run_key": "k", "status": "ok", "warmup_iters": 40,
                               "steady_state": False, "warmup_settled": False,
                               "compile_handling": "none", "remeasured": 0,
                               "excluded_steps": [], "n_measured": 20})
    (w,) = [x for x in quality_warnings(rec) if "settled" in x or "recompiled" in x]
    assert w.startswith("warm-up never settled: the step time did not stabilise in 40")


def test_old_records_keep_their_warning_and_say_when_recompiles_were_measured():
    old = {"schema_version": 9, "run_key": "k", "status": "ok", "steady_state": False}
    assert "warm-up did not reach steady state (or the step recompiled while measured)" in \
        quality_warnings(RunRecord.from_dict(old))
    w = quality_warnings(RunRecord.from_dict({**old, "compile": {"recompiles_measured": 2}}))
    assert any(x.startswith("the step recompiled 2 time(s) while measured and those steps are "
                            "in the median") for x in w)


# --- time to target: compile counted the same way -------------------------------------------

def test_compile_steps_along_the_curve():
    s = {"first": [1.0], "warmup": [0.5] * 4, "measure": [0.5] * 3}
    assert compile_steps(s, None) == [0]
    assert compile_steps(s, {"first": [0], "warmup": [2], "measure": [1, 9]}) == [0, 3, 6]


def test_time_to_target_with_and_without_compile():
    s = {"first": [3.5], "warmup": [0.5, 2.5], "measure": [0.5, 0.5, 0.5]}
    ls = {"first": [4.0], "warmup": [3.0, 2.0], "measure": [1.0, 1.0, 0.5]}
    c = summarize_convergence(s, ls, 1.2, window=2, compiled_at={"warmup": [1]},
                              compile_before_loop_s=2.0)
    # with compile: 2.0 before the loop + 3.5 + 0.5 + 2.5 + 0.5 + 0.5 (target at iteration 5)
    assert c["time_to_target_s"] == 9.5 and c["training_time_s"] == 10.0
    # without: the first and the compiling warm-up step counted at the steady 0.5 s
    assert c["time_to_target_no_compile_s"] == 2.5 and c["training_time_no_compile_s"] == 3.0
    assert c["compile_in_loop_s"] == 5.0 and c["compile_time_s"] == 7.0
    assert c["compile_steps"] == 2 and c["recompiles"] == 1


def test_ahead_of_time_and_lazy_compilers_get_the_same_time_to_target(fake_record):
    # the same 2 s of compile work, before the loop (as JAX's) or in the first step (as
    # torch.compile's): the same time to target with compile, and the same without
    aot = fake_record(target_loss=0.1, compile_before_s=2.0)
    lazy = fake_record(target_loss=0.1, compile_s=2.0)
    a, z = aot.convergence, lazy.convergence
    assert a.reached and z.reached and a.iterations_to_target == z.iterations_to_target
    assert a.compile_before_loop_s == 2.0 and z.compile_before_loop_s == 0.0
    assert a.time_to_target_s == pytest.approx(z.time_to_target_s)
    assert a.time_to_target_s == pytest.approx(2.0 + 0.01 * a.iterations_to_target)
    assert a.time_to_target_no_compile_s == pytest.approx(z.time_to_target_no_compile_s)
    assert z.time_to_target_no_compile_s == pytest.approx(0.01 * z.iterations_to_target)
    assert a.compile_time_s == pytest.approx(2.0) and z.compile_time_s == pytest.approx(2.0)
    assert a.recompiles == z.recompiles == 0


def test_the_convergence_table_and_json_carry_compile_time_and_recompiles():
    import json

    from dlperf.report.convergence import convergence_groups, convergence_markdown
    from dlperf.report.sections import _convergence_runs

    def row(id_, comp):
        return {"id": id_, "status": "ok", "model": "fcn_mnist", "framework": "jax",
                "mode": "xla", "device": "cpu", "precision": "fp32", "data": "mnist",
                "threads": None, "batch_size": 32, "world_size": 1, "nnodes": 1,
                "result_json": json.dumps({"config": {"target_loss": 1.5},
                                           **({"compile": comp} if comp else {})})}

    raw = {1: {"first": {"step_time_s": [1.0], "loss": [3.0]},
               "warmup": {"step_time_s": [0.5, 2.0], "loss": [2.5, 2.0]},
               "measure": {"step_time_s": [0.5, 0.5, 0.5], "loss": [1.0, 1.0, 1.0]}}}
    comp = {"compile_before_loop_s": 3.0, "compiled_at": {"first": [], "warmup": [1],
                                                          "measure": []}}
    (g,) = convergence_groups(as_records([row(1, comp)]), raw.__getitem__, window=2)
    (r,) = g["runs"]
    # smoothed (window 2): [None, 2.75, 2.25, 1.5, 1.0, 1.0]: 1.5 at iteration 4
    assert r["iterations_to_target"] == 4
    assert r["time_to_target_s"] == 3.0 + 4.0 and r["time_to_target_no_compile_s"] == 2.0
    assert r["compile_time_s"] == 3.0 + 2.0 and r["recompiles"] == 1
    md = convergence_markdown([g])
    assert "| s to target | s to target without compile | compile s (before loop + in loop) " \
           "| recompiles |" in md
    assert "| 4 | 7.000 | 2.000 | 5.000 (3.000 + 2.000) | 1 |" in md
    (js,) = _convergence_runs([g])
    assert js["compile_before_loop_s"] == 3.0 and js["recompiles"] == 1
    assert js["time_to_target_no_compile_s"] == 2.0
    # a record from before schema 10: nothing known of compile before the loop
    (g,) = convergence_groups(as_records([row(1, None)]), raw.__getitem__, window=2)
    assert g["runs"][0]["compile_before_loop_s"] is None
    md = convergence_markdown([g])
    assert "?" not in md
    assert (f"| {fmt_sig(g['runs'][0]['compile_time_s'])} (in loop; before the loop: not "
            "recorded) |") in md


def test_data_parallel_compile_steps_are_any_ranks():
    from dlperf.measure.ranks import union_compiled_at

    assert union_compiled_at([None, None]) is None
    assert union_compiled_at([{"first": [0], "measure": [3]},
                              {"first": [0], "measure": [1, 3]}, None]) == \
        {"first": [0], "measure": [1, 3]}


def test_warm_up_switched_off_is_not_detected_steady_state():
    """``--max-warmup-iters 0``: the loop does not look for steady state, so it is stored as
    not detected (None), never as True; a compile in the measured steps still makes it
    False."""
    res = run(set(), max_warmup_iters=0)
    assert res.warmup_s == [] and res.steady_state is None
    res = run({5}, max_warmup_iters=0)
    assert res.steady_state is None  # the loop's flag; the record marks the compile (below)
    assert res.compiled_at["measure"] == [3]


def test_warm_up_switched_off_is_stored_and_said(fake_record, monkeypatch):
    import dlperf.config as config_mod

    real = config_mod.IterationPolicy

    def no_warmup(**kw):
        return real(**{**kw, "max_warmup_iters": 0, "min_warmup_iters": 0})

    monkeypatch.setattr(sys.modules[__name__], "IterationPolicy", no_warmup)
    rec = fake_record()
    t = rec.timing
    assert rec.identity.status == "ok" and t.warmup_iters == 0
    assert t.steady_state is None
    ws = [w for w in rec.warnings if "warm-up switched off" in w]
    assert len(ws) == 1 and "not looked for" in ws[0]
    from dlperf.report.tables import _fmt_status

    assert _fmt_status(rec) == f"ok (no warm-up) ⚠ {len(rec.warnings)}"
