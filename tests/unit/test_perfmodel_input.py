"""The input model (perfmodel/inputpipe.py): Shi & Chu's prefetch overlap and its back-test."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from dlperf.perfmodel import inputpipe as ip
from dlperf.perfmodel.records import load
from dlperf.validation import inputcheck as ic

MFU_INPUTS = Path(__file__).resolve().parents[2] / "benchmarks/results/h200/mfu_inputs.db"


def _rung(w: int, step: float, wait: float, batch: int = 128) -> ip.Rung:
    return ip.Rung(w, batch, step, step, wait, None, f"x:{w}")


def test_serial_case_adds_t_io_to_t_c() -> None:
    # w = 0: the training thread loads, nothing overlaps: t = t_io + t_c
    t_c, t_io = 0.030, 0.200
    est = ip.estimate([_rung(0, t_io + t_c, t_io)], 0, 128, t_c)
    assert est.step_s == pytest.approx(t_io + t_c)
    assert est.input_s == pytest.approx(t_io)
    assert ip.iteration_s(t_c, t_io, 0) == pytest.approx(0.230)


def test_overlap_recovers_max_form_from_synthetic_ladder() -> None:
    # known per-worker cost 0.4 s per batch of 128, t_c 0.03 s: each pool w has t_io,w = 0.4/w
    t_c, per_worker = 0.030, 0.400
    ladder = [_rung(w, max(t_c, per_worker / w), max(0.0, per_worker / w - t_c))
              for w in (1, 2, 4, 32)]
    for w in (2, 4):  # leave w out: the nearest other measured count scaled 1/w recovers it
        est = ip.estimate([r for r in ladder if r.workers != w], w, 128, t_c)
        assert est.step_s == pytest.approx(max(t_c, per_worker / w))
        assert est.t_io_s == pytest.approx(per_worker / w)
    # 16 workers produce faster than compute: the step is t_c, the input hidden
    est = ip.estimate(ladder[:3], 16, 128, t_c)
    assert est.step_s == pytest.approx(t_c) and est.input_s == 0.0
    # the pool that kept up (w = 32: no wait) gives no time, only "hidden", at its own count
    own = ip.estimate(ladder, 32, 128, t_c)
    assert own.input_s == 0.0 and own.t_io_s is None
    # a serial rung seeds a parallel prediction: its t_io is one worker's time per batch
    par = ip.estimate([_rung(0, per_worker + t_c, per_worker)], 8, 128, t_c)
    assert par.step_s == pytest.approx(per_worker / 8)
    # linear in the batch: b = 256 doubles the loader's time
    assert ip.estimate(ladder[:1], 1, 256, 0.05).step_s == pytest.approx(2 * per_worker)


def test_nothing_stored_is_zero_with_the_assumption() -> None:
    est = ip.estimate([], 4, 128, 0.03)
    assert est.step_s == 0.03 and est.input_s == 0.0
    assert "input time 0" in est.assumptions[0]
    with pytest.raises(ValueError, match="workers"):
        ip.estimate([], -1, 128, 0.03)


def test_backtest_on_committed_ladders_gives_documented_numbers() -> None:
    rows = ic.rows(load([MFU_INPUTS]))
    assert len(rows) == 13  # torch 0..16, JAX threads 0..16, JAX grain 2, 4, 8
    ape = [r.ape for r in rows]
    base = [r.baseline_ape for r in rows if r.baseline_ape is not None]
    assert statistics.median(ape) == pytest.approx(21.66, abs=0.01)
    assert max(ape) == pytest.approx(91.71, abs=0.01)
    assert statistics.median(base) == pytest.approx(71.87, abs=0.01)
    assert statistics.median(ape) < statistics.median(base)
    # never its own measurement: each row's source id differs from its own
    for r in rows:
        own = r.label.rsplit(":", 1)[-1].rstrip("]")
        assert f"from id {own} " not in r.label


def test_predict_real_data_uses_the_ladder_not_its_own_point(tmp_path, monkeypatch) -> None:
    from dlperf.perfmodel.api import predict

    monkeypatch.setenv("DLPERF_CACHE_DIR", str(tmp_path))
    p = predict(MFU_INPUTS, "resnet50", "torch", "eager", "bf16", "cuda", batch_size=128,
                data="imagefolder", loader_workers=4)
    # its own w = 4 point (mfu_inputs.db:4) withheld: scaled from 2 workers (id 3)
    assert "scaled from 2 workers" in p.provenance["input"]
    assert f"{MFU_INPUTS}:4" not in p.calibrated_on and f"{MFU_INPUTS}:3" in p.calibrated_on
    assert p.parts["input_s"] > 0.05
    assert p.predicted_step_time_s == pytest.approx(p.parts["input_s"] + 0.0296, rel=0.2)
    assert p.validation_category == ic.CATEGORY
    syn = predict(MFU_INPUTS, "resnet50", "torch", "eager", "bf16", "cuda", batch_size=128)
    assert syn.parts["input_s"] == 0.0


def test_predict_real_data_is_judged_against_the_mean_and_says_input_bound(tmp_path,
                                                                             monkeypatch) -> None:
    # the input model predicts the MEAN iteration (the median hides the stalls): the withheld
    # point it is compared with must be its mean too; a step that is mostly input is input-bound
    from dlperf.perfmodel.api import predict

    monkeypatch.setenv("DLPERF_CACHE_DIR", str(tmp_path))
    p = predict(MFU_INPUTS, "resnet50", "torch", "eager", "bf16", "cuda", batch_size=128,
                data="imagefolder", loader_workers=0)
    own = [q for q in load([MFU_INPUTS]).points if q.result_id == 2]
    assert own[0].step_time_mean_s != own[0].step_time_s
    assert p.measured_step_time_s == pytest.approx(own[0].step_time_mean_s)
    assert p.bound == "input"
    assert p.parts["input_s"] > p.predicted_step_time_s / 2


def test_jax_ladder_uses_the_predicted_points_own_loader_implementation(tmp_path,
                                                                         monkeypatch) -> None:
    # mfu_inputs.db holds two JAX pipelines (host threads; grain processes): one ladder, never
    # rungs of both, and the one of the point whose measurement is shown
    from dlperf.perfmodel.api import predict

    monkeypatch.setenv("DLPERF_CACHE_DIR", str(tmp_path))
    p = predict(MFU_INPUTS, "resnet50", "jax", "xla", "bf16", "cuda", batch_size=128,
                data="imagefolder", loader_workers=0)
    note = next(a for a in p.assumptions if "loader implementations" in a)
    assert "(the predicted point's own)" in note and "HostPipeline" in note.split(" is used")[0]
    used = {q.loader_impl for q in load([MFU_INPUTS]).points
            if f"{q.source}:{q.result_id}" in p.calibrated_on and q.loader_impl}
    assert len(used) == 1 and "HostPipeline" in next(iter(used))


def test_a_worker_count_never_stored_is_predicted_from_the_ladder(tmp_path, monkeypatch) -> None:
    # mfu_inputs.db's torch ladder holds 0, 2, 4, 8 and 16 workers: 3 workers is predicted by
    # scaling the nearest measured count (a tie goes to the larger: 4 workers, x 4/3), said so
    from dlperf.perfmodel.api import predict

    monkeypatch.setenv("DLPERF_CACHE_DIR", str(tmp_path))
    kw = dict(batch_size=128, data="imagefolder")
    p3 = predict(MFU_INPUTS, "resnet50", "torch", "eager", "bf16", "cuda", loader_workers=3, **kw)
    p4 = predict(MFU_INPUTS, "resnet50", "torch", "eager", "bf16", "cuda", loader_workers=4, **kw)
    assert "scaled from 4 workers" in p3.provenance["input"]
    assert any("no stored series of" in w and "workers=3" in w and "0, 2, 4, 8, 16" in w
               for w in p3.warnings)
    assert p3.measured_step_time_s is None and p3.validation_category == ic.CATEGORY
    own4 = next(q for q in load([MFU_INPUTS]).points if q.result_id == 4)
    assert p3.parts["input_s"] + 0.0296 == pytest.approx(own4.step_time_mean_s * 4 / 3, rel=0.2)
    assert p3.predicted_step_time_s > p4.predicted_step_time_s
    # a count on a configuration with no ladder is still refused, listing what is stored
    from dlperf.errors import ConfigError

    with pytest.raises(ConfigError, match="no stored series of .* has --data synthetic --loader-workers 3"):
        predict(MFU_INPUTS, "resnet50", "torch", "eager", "bf16", "cuda", loader_workers=3,
                batch_size=128, data="synthetic")
