"""The fake framework (the test double of the end-to-end tests): its step takes its scripted
time on a fake clock that every timer of the run reads, so timing arithmetic is exact and no
test waits for it; its staged step serves the fused timing and the breakdown alike."""

from __future__ import annotations

import math
import time

import pydantic
import pytest

from dlperf.config import IterationPolicy, make_run_config
from dlperf.frameworks.base import OutOfMemory
from dlperf.frameworks.fake.adapter import PHASE_SHARES, FakeAdapter, stage_durations
from dlperf.frameworks.fake.clock import FakeClock
from dlperf.measure.loop import measure
from dlperf.measure.phases import measure_phases
from dlperf.zoo import get_spec


@pytest.fixture
def fake_run():
    """``make(batch_size=8, data="synthetic", **options)``: a prepared fake run whose config
    has the fake's ``options`` (:class:`dlperf.frameworks.fake.options.Options`)."""

    def make(batch_size=8, data="synthetic", **options):
        cfg = make_run_config(model="fcn5_tiny", framework="torch", batch_size=batch_size)
        # the fake is not registered in this process: its options are set on the config as
        # a validated fake config holds them
        cfg = cfg.with_(options=options)
        if data != "synthetic":  # the fake reads no data: no folder is checked
            cfg = cfg.with_(data=data)
        return FakeAdapter().prepare(cfg, get_spec("fcn5_tiny"))

    return make


def test_the_clock_moves_only_forward_and_only_when_told():
    c = FakeClock()
    assert c() == 0.0
    c.advance(0.25)
    c.advance(0.0)
    assert c() == 0.25
    with pytest.raises(ValueError, match="only moves forward"):
        c.advance(-1e-9)
    assert c() == 0.25


def test_stage_durations_add_up_to_the_step_exactly():
    for step_s in (0.001, 0.004, 0.02, 1 / 3):
        d = stage_durations(step_s)
        assert list(d) == list(PHASE_SHARES)
        assert math.fsum(d.values()) == pytest.approx(step_s, rel=1e-12)
        for p, share in list(PHASE_SHARES.items())[:-1]:
            assert d[p] == step_s * share


def test_a_measured_second_is_exact_and_costs_no_real_second(fake_run):
    run = fake_run(step_s=0.004)
    pol = IterationPolicy(min_iters=5, min_time_s=1.0, warmup_window=2, min_warmup_iters=0)
    t0 = time.perf_counter()
    loop = measure(run.step, run.timer, pol, clock=run.clock)
    real_s = time.perf_counter() - t0
    # 1 s of the fake clock at 4 ms per step: 250 steps (251 where the float sum of 250
    # steps rounds below 1 s), each 4 ms to float rounding
    assert len(loop.measured_s) in (250, 251)
    assert all(x == pytest.approx(0.004, rel=1e-9) for x in loop.measured_s)
    assert loop.first_iter_s == pytest.approx(0.004, rel=1e-9)
    assert loop.steady_state and loop.timing_consistent
    assert loop.wall_s == pytest.approx(loop.measured_total_s, rel=1e-12)
    assert real_s < 0.5  # no sleeping: a real second would be 1 s
    losses = run.losses_to_floats(loop.losses["measure"])
    assert losses == sorted(losses, reverse=True)  # the loss falls


def test_the_phases_add_up_to_the_fused_step(fake_run):
    run = fake_run(step_s=0.01)
    pol = IterationPolicy(min_iters=6, min_time_s=0.0)
    fused = measure(run.step, run.timer, pol, clock=run.clock)
    phased = measure_phases(run.phased_step, run.phase_timer(), pol, clock=run.clock)
    assert phased.phases == list(PHASE_SHARES)
    for it in phased.per_iter:
        assert it == pytest.approx({p: 0.01 * s for p, s in PHASE_SHARES.items()}, rel=1e-9)
        assert math.fsum(it.values()) == pytest.approx(fused.measured_s[0], rel=1e-9)


def test_data_wait_is_on_the_same_clock(fake_run, tmp_path):
    run = fake_run(step_s=0.004, data_wait_s=0.004, data=f"imagefolder:{tmp_path}")
    pol = IterationPolicy(min_iters=10, min_time_s=0.0, warmup_window=2, max_warmup_iters=4)
    loop = measure(run.step, run.timer, pol, clock=run.clock, on_phase=run.on_phase)
    waits = run.data_wait.measured()
    assert len(waits) == len(loop.measured_s) == 10
    assert all(w == pytest.approx(0.004, rel=1e-9) for w in waits)
    assert all(x == pytest.approx(0.008, rel=1e-9) for x in loop.measured_s)


def test_scripted_failures(fake_run):
    run = fake_run(batch_size=64, fail={64: "oom", 128: "nan"})
    run.step()
    run.step()
    with pytest.raises(OutOfMemory, match="scripted"):
        run.step()
    run = fake_run(batch_size=128, fail={64: "oom", 128: "nan"})
    assert [math.isnan(run.step()) for _ in range(5)] == [False] * 3 + [True] * 2
    assert fake_run(batch_size=8, fail={64: "oom"}).step() == 1.0  # other batch sizes: no failure


def test_the_real_clock_with_fake_nvml(fake_run):
    """The power sampler is a thread on the real clock: with the option ``nvml`` the steps
    take real time."""
    run = fake_run(step_s=0.005, nvml=True)
    assert run.clock is time.perf_counter and run.nvml_target == (None, 0)
    t0 = time.perf_counter()
    run.step()
    assert time.perf_counter() - t0 >= 0.005


def test_options_script_the_run_and_the_environment_gives_them_too(fake_run, monkeypatch):
    """Every behaviour is an option of the fake's own ``Options`` model: a per-step slowdown
    multiplies the step, ``step_factors`` pick the point; a run config's options win over
    those of ``DLPERF_FAKE_OPTIONS`` (a YAML mapping, for a process whose flags a test does
    not write)."""
    from dlperf.errors import ConfigError
    from dlperf.frameworks.fake.options import settings

    assert fake_run(step_s=0.004, slowdown=1.5).step_s == pytest.approx(0.006)
    assert fake_run(step_s=0.004, step_factors={8: 2.0, "bf16": 0.5}).step_s == 0.008
    monkeypatch.setenv("DLPERF_FAKE_OPTIONS", "{step_s: 0.002, slowdown: 3}")
    assert fake_run().step_s == pytest.approx(0.006)
    assert fake_run(slowdown=1.0).step_s == pytest.approx(0.002)
    env = {"DLPERF_FAKE_OPTIONS": "{mode_share: 0.2, mode_factor: 3, fail: {64: oom}}"}
    assert settings({}, env=env).mode_factor == 3.0 and settings({}, env=env).fail == {64: "oom"}
    with pytest.raises(ConfigError, match="YAML mapping"):
        settings({}, env={"DLPERF_FAKE_OPTIONS": "slowdown=3"})
    with pytest.raises(pydantic.ValidationError, match="slowdwn"):
        settings({}, env={"DLPERF_FAKE_OPTIONS": "{slowdwn: 3}"})


def test_an_unknown_or_bad_fake_option_is_refused_naming_it(monkeypatch):
    """The fake's options are checked by its model when the point is made, not when it runs;
    slowing it down does not make another point (same run key)."""
    from dlperf import registry
    from dlperf.config import make_run_config
    from dlperf.errors import ConfigError

    monkeypatch.setitem(registry.FRAMEWORKS, "fake", registry.TEST_DOUBLES["fake"])
    monkeypatch.setitem(registry.FRAMEWORK_MODES, "fake", ("eager",))
    kw = dict(model="fcn5_tiny", framework="fake", batch_size=8)
    with pytest.raises(ConfigError, match="slowdonw: unknown field 'slowdonw'; did you mean "
                                          "'slowdown'"):
        make_run_config(**kw, options={"slowdonw": 2.0})
    with pytest.raises(ConfigError, match="fail 64: 'boom'"):
        make_run_config(**kw, options={"fail": {64: "boom"}})
    slow = make_run_config(**kw, options={"slowdown": 2.0})
    assert slow.run_key() == make_run_config(**kw).run_key()
    assert slow.runtime.options == {"slowdown": 2.0}
    with pytest.raises(ConfigError, match="takes no options of its own"):
        make_run_config(model="fcn5_tiny", framework="jax", batch_size=8, options={"x": 1})
    with pytest.raises(ConfigError, match=r"torch options: x: unknown field 'x'.* \(its options: "
                                          "bucket_cap_mb"):
        make_run_config(model="fcn5_tiny", batch_size=8, options={"x": 1})
