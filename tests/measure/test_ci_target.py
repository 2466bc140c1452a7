"""The CI-width target (``--ci-target``, ``IterationPolicy.ci_target_rel``): a measured segment
is extended until the median's 95% interval is narrow enough, or the budget ends."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from dlperf.config import IterationPolicy, make_policy
from dlperf.errors import ConfigError
from dlperf.measure.loop import measure, median_ci_rel
from dlperf.measure.timers import HostTimer
from dlperf.measure.warnings import quality_warnings
from dlperf.results.schema import RunRecord
from dlperf.stats import summarize
from fakes import FakeClock


def test_median_ci_rel_agrees_with_the_stored_bootstrap_interval():
    rng = np.random.default_rng(1)
    for n in (30, 200, 2000):
        xs = list(0.01 * (1 + 0.05 * rng.standard_normal(n)))
        s = summarize(xs)
        boot = (s.ci_high - s.ci_low) / (2 * s.median)
        assert median_ci_rel(xs) == pytest.approx(boot, rel=0.35), n
    assert median_ci_rel([1.0] * 5) == math.inf  # too few for an interval
    assert median_ci_rel([1.0] * 50) == 0.0


def noisy_run(target, rel_noise=0.05, **policy):
    clock, rnd = FakeClock(), random.Random(7)

    def step():
        clock.t += 0.01 * (1 + rel_noise * rnd.gauss(0, 1))
        return 1.0

    pol = {"min_iters": 20, "min_time_s": 0.0, "warmup_window": 5, "min_warmup_iters": 10,
           "max_warmup_iters": 50, "max_time_s": 60.0, "ci_target_rel": target, **policy}
    return measure(step, HostTimer(clock=clock), IterationPolicy(**pol), clock=clock)


def test_a_target_extends_the_segment_until_the_interval_is_narrow_enough():
    base = noisy_run(None)
    assert len(base.measured_s) == 20 and base.ci_extensions == 0 and base.ci_rel is None
    assert median_ci_rel(base.measured_s) > 0.01  # 20 steps of 5% noise: about +-2%
    res = noisy_run(0.005)
    assert res.ci_extensions >= 2 and len(res.measured_s) > 100
    assert res.ci_rel <= 0.005 == pytest.approx(0.005)
    assert median_ci_rel(res.measured_s) == res.ci_rel
    # every extension doubles the count: the first stop is at or above what the target needs
    assert len(res.measured_s) == 20 * 2 ** res.ci_extensions
    assert res.wall_s == pytest.approx(math.fsum(res.measured_s))  # one contiguous record


def test_the_budget_stops_the_extension_and_the_record_says_so():
    res = noisy_run(0.001, max_time_s=2.0)
    assert res.ci_rel > 0.001 and sum(res.measured_s) <= 2.0 + 0.5
    rec = RunRecord.from_dict({"status": "ok", "n_measured": 80, "ci_target_rel": 0.001,
                     "ci_extensions": 2, "ci_rel_reached": res.ci_rel})
    ws = [w for w in quality_warnings(rec) if "CI target" in w]
    assert len(ws) == 1 and "+-0.1%" in ws[0] and "--max-time" in ws[0]
    met = RunRecord.from_dict({"status": "ok", "ci_target_rel": 0.01, "ci_extensions": 0,
                     "ci_rel_reached": 0.004})
    assert not [w for w in quality_warnings(met) if "CI target" in w]


def drifting_run(target, drift_per_step=0.002, rel_noise=0.05, **policy):
    """A step that is 0.2% slower each step (with 5% noise), measured with ``target``."""
    clock, rnd, n = FakeClock(), random.Random(7), [0]

    def step():
        n[0] += 1
        clock.t += 0.01 * (1 + drift_per_step * n[0]) * (1 + rel_noise * rnd.gauss(0, 1))
        return 1.0

    pol = {"min_iters": 200, "min_time_s": 0.0, "warmup_window": 5, "min_warmup_iters": 10,
           "max_warmup_iters": 10, "max_time_s": 600.0, "ci_target_rel": target, **policy}
    return measure(step, HostTimer(clock=clock), IterationPolicy(**pol), clock=clock)


def test_a_drifting_segment_is_not_extended_and_the_record_says_why():
    """A step that drifts (0.2% slower per step: +40% over the 200 measured steps): a CI target
    does not extend the segment (each extension would move the median further); the record's
    warnings name the drift, as not steady, and why the target was not reached."""
    res = drifting_run(0.001)
    assert res.ci_extensions == 0 and len(res.measured_s) == 200 and res.ci_rel > 0.001
    steady = drifting_run(0.002, drift_per_step=0.0)  # the same noise without the drift
    assert steady.ci_extensions >= 1
    rec = RunRecord.from_dict({"status": "ok", "n_measured": 200, "ci_target_rel": 0.001,
                     "ci_extensions": 0, "ci_rel_reached": res.ci_rel,
                     "samples": {"measure": res.measured_s}})
    ws = quality_warnings(rec)
    assert any(w.startswith("drifting: the step time rose") for w in ws), ws
    target = [w for w in ws if "CI target" in w]
    assert len(target) == 1 and "drift" in target[0] and "--max-time" not in target[0]


def test_a_target_must_be_a_share():
    for bad in (0.0, 1.5, -0.1):
        with pytest.raises(ConfigError, match="--ci-target"):
            make_policy(ci_target_rel=bad)


def test_dlperf_run_stores_the_target(tmp_path):
    import json
    import os
    import sqlite3
    import subprocess
    import sys

    db = tmp_path / "r.db"
    out = subprocess.run([sys.executable, "-m", "dlperf", "run", "--framework", "fake", "-m",
                          "fcn5_tiny", "-b", "4", "--device", "cpu", "--min-iters", "10",
                          "--min-time", "0", "--ci-target", "0.02", "--db", str(db),
                          "--no-ceilings", "--framework-option", "step_s=0.01"],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "DLPERF_FAKE_FRAMEWORK": "1"})
    assert out.returncode == 0, out.stdout + out.stderr
    (js,) = sqlite3.connect(db).execute("SELECT result_json FROM results").fetchone()
    r = json.loads(js)
    assert r["ci_target_rel"] == 0.02 and r["ci_extensions"] == 0  # the fake step is constant
    assert r["ci_rel_reached"] == 0.0 and r["n_measured"] >= 10


@pytest.mark.parametrize("agreed", [False, True])
def test_an_extension_never_passes_max_time_by_more_than_one_step(agreed):
    """With --nproc 2 a --ci-target run must not overrun --max-time by more than a step. A
    data-parallel extension has a fixed count (the processes agree on it before it starts);
    sized from the median step (the fast steps) it overran a step time whose slow steps lift
    the mean above the median. Here every 5th step is slow (median 7.5 ms, mean 12 ms), and
    ``agree`` (an elementwise max, as across processes) fixes the counts as in DDP."""
    clock, n, rnd = FakeClock(), [0], random.Random(3)

    def step():
        n[0] += 1
        clock.t += 0.03 if n[0] % 5 == 0 else 0.0075 * (1 + 0.05 * rnd.gauss(0, 1))
        return 1.0

    pol = IterationPolicy(min_iters=20, min_time_s=1.0, warmup_window=5, min_warmup_iters=10,
                          max_warmup_iters=50, max_time_s=8.0, ci_target_rel=0.0001)
    t0 = [None]

    def on_phase(phase):
        t0[0] = clock.t if t0[0] is None else t0[0]

    res = measure(step, HostTimer(clock=clock), pol, clock=clock, on_phase=on_phase,
                  agree=(lambda xs: list(xs)) if agreed else None)
    assert res.ci_extensions >= 2 and res.ci_rel > 0.0001  # the budget, not the target, ended it
    assert clock.t - t0[0] <= 8.0 + 0.03  # at most one (slow) step past the budget
    assert math.fsum(res.measured_s) <= 8.0 + 0.03
    assert math.fsum(res.measured_s) > 8.0 - 10 * 0.012  # and it used the budget
