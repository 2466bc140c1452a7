"""The replay back-test's noise floor and host-bound scatter (benchmarks/replay_validate.py,
:func:`repeat_errors`, :func:`host_scatter`, :func:`summarise`): a row's target point
predicted by its other stored measurements (the step-level back-test's repeat groups), and a
host-bound target by its configuration's other host-bound steps."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import replay_validate as rv  # noqa: E402

from dlperf.perfmodel import replay  # noqa: E402
from dlperf.perfmodel.records import Point, Records  # noqa: E402
from dlperf.validation import backtest as bt  # noqa: E402

BASE = Point(source="a.db", result_id=1, model="m", framework="torch", mode="eager",
             precision="fp32", device="cuda", data="synthetic", layout=None, threads=None,
             grad_accum=1, batch_size=64, world_size=1, nnodes=1, per_device_batch=64,
             variant="", instrumented=False, step_time_s=0.010, ci_rel=0.01, n_measured=50,
             train_flops_per_sample=None, params=None, bytes_per_step=None,
             device_name="NVIDIA H200")


def _records() -> tuple[Point, Records]:
    target = BASE
    pts = [target,
           replace(BASE, source="b.db", result_id=4, step_time_s=0.011),
           replace(BASE, source="b.db", result_id=5, step_time_s=0.020),  # b.db's second
           replace(BASE, source="c.db", result_id=2, step_time_s=0.0095),
           replace(BASE, source="d.db", result_id=3, step_time_s=0.030,
                   device_name="NVIDIA H100 80GB HBM3"),                   # another GPU
           replace(BASE, source="e.db", result_id=6, step_time_s=0.040, instrumented=True),
           replace(BASE, source="f.db", result_id=7, step_time_s=0.050, threads=4),
           replace(BASE, source="g.db", result_id=8, step_time_s=0.060, batch_size=128,
                   per_device_batch=128),
           replace(BASE, source="h.db", result_id=9, step_time_s=0.070, data="imagenet")]
    return target, Records(pts, [], ["a.db", "b.db", "c.db", "d.db", "e.db", "f.db", "g.db",
                                     "h.db"])


def test_a_targets_repeats_are_its_other_files_first_measurements_on_its_gpu():
    target, recs = _records()
    groups = bt.repeat_groups(recs)
    errs = rv.repeat_errors(target, groups)
    # b.db's first (not its second), c.db's; not another GPU's, an instrumented run, other
    # threads, another batch or other data
    assert errs == pytest.approx([0.011 / 0.010 - 1, 0.0095 / 0.010 - 1], rel=1e-12)
    assert rv.repeat_errors(replace(target, source="b.db", result_id=4, step_time_s=0.011),
                            groups) == pytest.approx([0.010 / 0.011 - 1, 0.0095 / 0.011 - 1])
    # an N-device point has none, though a one-device point of its configuration is stored
    two = replace(target, source="z.db", world_size=2, per_device_batch=32)
    assert rv.repeat_errors(two, groups) == []
    # the step-level noise floor reads the same groups: the earliest file predicts the later
    # on its GPU (d.db's H100 point is no repeat of the H200's)
    rows = bt.repeat_rows(recs)
    assert [(r.measured_s, r.predicted_s) for r in rows] == [(0.011, 0.010), (0.0095, 0.010)]


def test_repeat_groups_split_by_gpu():
    """H100 and H200 files given together: each GPU's measurements of a point are one group,
    its earliest file predicting the later; the other GPU's are none of its repeats."""
    h100 = "NVIDIA H100 80GB HBM3"
    pts = [BASE, replace(BASE, source="b.db", result_id=2, step_time_s=0.030, device_name=h100),
           replace(BASE, source="c.db", result_id=3, step_time_s=0.011),
           replace(BASE, source="d.db", result_id=4, step_time_s=0.033, device_name=h100)]
    recs = Records(pts, [], ["a.db", "b.db", "c.db", "d.db"])
    groups = bt.repeat_groups(recs)
    assert sorted((k[2], list(v)) for k, v in groups.items()) == [
        (h100, ["b.db", "d.db"]), ("NVIDIA H200", ["a.db", "c.db"])]
    rows = bt.repeat_rows(recs)
    assert sorted((r.measured_s, r.predicted_s) for r in rows) == [(0.011, 0.010),
                                                                   (0.033, 0.030)]
    assert rv.repeat_errors(pts[3], groups) == pytest.approx([0.030 / 0.033 - 1])


def _pt(step: float, probe: float | None, busy: float | None, b: int, mode: str = "eager",
        rid: int | None = None, source: str = "a.db") -> SimpleNamespace:
    return SimpleNamespace(step_time_s=step, host_dispatch_s=probe, busy_s=busy, mode=mode,
                           batch_size=b, source=source, result_id=b if rid is None else rid)


def test_host_level_of_a_pool_of_two_files_reads_each_trace_by_its_file():
    """Two files' points with the same row id, neither with a busy time: host-bound by its own
    trace's kernel time (1 ms under a 2.4 ms probe) or not (8.9 ms over 2.0 ms). Keyed by row
    id alone, the second trace's kernel time would stand for the first's, and the level would
    be the median probe (2.2 ms) instead of the host-bound step (2.0 ms)."""
    a = _pt(2.0e-3, 2.4e-3, None, 8, rid=1, source="a.db")
    b = _pt(9.0e-3, 2.0e-3, None, 64, rid=1, source="b.db")
    pool = [(a, SimpleNamespace(kernel_s=1.0e-3)), (b, SimpleNamespace(kernel_s=8.9e-3))]
    assert rv.host_of(pool) == pytest.approx(2.0e-3)
    assert rv.host_of(pool[::-1]) == pytest.approx(2.0e-3)
    assert rv.host_scatter(a, [*pool, (_pt(2.6e-3, 2.8e-3, None, 16, rid=1, source="c.db"),
                                       SimpleNamespace(kernel_s=1.0e-3))]) == pytest.approx(0.3)


def test_host_scatter_is_the_other_host_bound_steps_level_against_the_step():
    hb = [_pt(2.0e-3, 2.4e-3, 1.0e-3, 8), _pt(2.2e-3, 2.6e-3, 1.5e-3, 16),
          _pt(3.0e-3, 3.1e-3, 2.0e-3, 32)]
    dev = _pt(9.0e-3, 2.0e-3, 8.9e-3, 64)
    no_busy = _pt(2.5e-3, 2.4e-3, None, 4)  # host-bound by its trace's kernel time
    pool = [(p, SimpleNamespace(kernel_s=1e-3)) for p in [*hb, dev, no_busy]]
    assert replay.host_bound(no_busy, {("a.db", 4): 1e-3}) and not replay.host_bound(dev)
    # the median of the other host-bound steps (2.2, 3.0, 2.5 ms -> 2.5) against 2.0 ms
    assert rv.host_scatter(hb[0], pool) == pytest.approx(2.5e-3 / 2.0e-3 - 1)
    assert rv.host_scatter(no_busy, pool) == pytest.approx(2.2e-3 / 2.5e-3 - 1)
    assert rv.host_scatter(dev, pool) is None  # device-bound
    assert rv.host_scatter(hb[0], pool[:1]) is None  # no other host-bound point
    graph = [(_pt(2e-3, 3e-3, 1e-3, b, mode="graph"), SimpleNamespace(kernel_s=1e-3))
             for b in (8, 16)]
    assert rv.host_scatter(graph[0][0], graph) is None  # a compiled step is no host level


def _row(err: float, repeats: list[float], scatter: float | None) -> dict:
    return {"category": "batch, interpolated", "side": "test", "error": err,
            "baseline_error": None, "repeat_errors": repeats, "host_scatter": scatter}


def test_the_table_gives_each_floor_on_the_rows_that_have_one():
    rows = [_row(0.10, [0.02, -0.04], 0.05), _row(-0.20, [], -0.15), _row(0.01, [0.5], None),
            _row(0.30, [], None)]
    line = rv.summarise(rows).splitlines()[2]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[2:4] == ["4", "15.0%"]  # the replay's rows and MdAPE: all four
    # noise floor: rows 1 (median |error| of its repeats: 3%) and 3 (50%) -> 26.5%
    assert cells[8] == "26.5% (2 of 4; replay 5.5%)"
    assert cells[9] == "10.0% (2 of 4; replay 15.0%)"
    none = rv.summarise([_row(0.1, [], None)]).splitlines()[2]
    assert none.endswith("| - | - |")
