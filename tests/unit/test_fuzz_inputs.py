"""A small run of the input fuzzer (benchmarks/fuzz_inputs.py, issue 23): mutated MNIST, CIFAR-10,
token, ImageFolder and YAML files must each be refused with a clear DataError / ConfigError or
accepted when valid; none silently accepted, no raw traceback, no hang."""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def fuzz(shared_data):
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("fuzz_inputs")
    finally:
        sys.path.remove(str(BENCH))


def test_fuzzer_small_run_meets_the_goal(fuzz, tmp_path):
    cases = fuzz.all_cases(0)
    assert len(cases) >= 200 and {c.kind for c in cases} == set(fuzz.KINDS)
    small = fuzz.pick_small(cases, 30, seed=0)
    assert len(small) == 30 and {c.kind for c in small} == set(fuzz.KINDS)
    t0 = time.perf_counter()
    res = fuzz.run(small, limit_s=5.0, yaml_reader="yamlsafe", out=tmp_path / "r.json")
    assert time.perf_counter() - t0 < 20.0
    bad = [r for r in res["records"] if r["outcome"] in
           ("silently_accepted", "raw_traceback", "hang", "wrongly_refused", "refused_unclear")]
    assert not bad, bad
    assert res["goal_met"] and res["counts"]["refused"] >= 10
    assert (tmp_path / "r.json").stat().st_size > 0


def test_fuzzer_classifies_outcomes(fuzz):
    # The classification itself: what counts as silent, raw, unclear or a hang.
    from dlperf.errors import DataError

    case = fuzz.Case("mnist", "m", "refuse", lambda d: d, ("f.idx",))
    assert fuzz.classify(case, None) == "silently_accepted"
    assert fuzz.classify(case, OverflowError("x")) == "raw_traceback"
    assert fuzz.classify(case, DataError("f.idx is truncated")) == "refused"
    assert fuzz.classify(case, DataError("something is wrong")) == "refused_unclear"
    assert fuzz.classify(case, DataError("f.idx " + "x" * 5000)) == "refused_unclear"
    assert fuzz.classify(case, fuzz.CaseTimeout()) == "hang"
    ok = fuzz.Case("mnist", "m", "accept", lambda d: d, ("f.idx",))
    assert fuzz.classify(ok, DataError("f.idx")) == "wrongly_refused"
    assert fuzz.classify(ok, None) == "accepted"


def test_fuzzer_time_limit_ends_a_hanging_reader(fuzz, tmp_path):
    import signal

    case = fuzz.Case("mnist", "sleeper", "refuse", lambda d: d, ("x",))
    old = signal.signal(signal.SIGALRM, fuzz._alarm)
    try:
        t0 = time.perf_counter()
        rec = fuzz.run_case(0, case, {"mnist": lambda p: time.sleep(30)}, tmp_path, 0.3)
    finally:
        signal.signal(signal.SIGALRM, old)
    assert rec["outcome"] == "hang" and time.perf_counter() - t0 < 5.0
