"""The data-parallel model over RECORDED DDP buckets (``dist.buckets_timeline``): the record
read into typed ranks, ready times as a fraction of backward, the WFBP recursion over them
by hand, which stored record a prediction takes (never the point predicted), the fallback to
DDP's default buckets, the recursion's back-test on recorded runs (synthetic and the committed
CPU gloo runs of benchmarks/results/cpu-dev/ddp_buckets.db), and the CLI saying what it used.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from dlperf.perfmodel import comm
from dlperf.perfmodel import dataparallel as dp
from dlperf.perfmodel.records import (
    CollectivePoint,
    Point,
    RankBuckets,
    RecordedBucket,
    Records,
    load,
    rank_buckets,
)
from dlperf.validation import bucketcheck as bc

CPU_DB = Path(__file__).resolve().parents[2] / "benchmarks/results/cpu-dev/ddp_buckets.db"


def _point(rid: int = 1, *, model: str = "m", world: int = 2, per_device: int = 32,
           buckets: tuple[RankBuckets, ...] = (), variant: str = "", **kw) -> Point:
    return replace(Point(
        source="s.db", result_id=rid, model=model, framework="fake", mode="eager",
        precision="fp32", device="cpu", data="synthetic", layout=None, threads=None,
        grad_accum=1, batch_size=per_device * world, world_size=world, nnodes=1,
        per_device_batch=per_device, variant=variant, instrumented=False, step_time_s=1.0,
        ci_rel=None, n_measured=None, train_flops_per_sample=None, params=1000,
        bytes_per_step=None, buckets=buckets, comm_backend="gloo"), **kw)


def _rank(rank: int, t0: float | None, t1: float, ready: list[float], sizes: list[float],
          starts: list[float] | None = None, durs: list[float] | None = None,
          tail: float = 0.0) -> RankBuckets:
    starts = starts or ready
    durs = durs or [0.01] * len(ready)
    bks = tuple(RecordedBucket(i, m, r, s, s + d, d)
                for i, (m, r, s, d) in enumerate(zip(sizes, ready, starts, durs)))
    return RankBuckets(rank, t0, t1, max(b.end_s for b in bks), tail, bks, "allreduce_enqueue")


SIZES = [1e6, 2e6, 1e6]


def test_record_read_in_seconds_and_unmatched_ranks_left_out():
    bt = {"per_rank": [
        {"rank": 0, "matched_iterations": 5, "t_b_start_ns": 100_000_000,
         "t_b_end_ns": 500_000_000, "last_end_ns": 560_000_000, "exposed_tail_ns": 60_000_000,
         "ready_source": "allreduce_enqueue",
         "buckets": [{"index": 0, "bytes": 4000, "ready_ns": 200_000_000,
                      "start_ns": 210_000_000, "end_ns": 260_000_000, "dur_ns": 50_000_000}]},
        {"rank": 1, "matched_iterations": 0, "buckets": [], "reasons": ["no all-reduce"]},
        {"rank": 2, "error": "the trace failed"}]}
    (r,) = rank_buckets(bt)
    assert (r.rank, r.t_b_start_s, r.t_b_end_s, r.exposed_tail_s) == pytest.approx(
        (0, 0.1, 0.5, 0.06))
    (b,) = r.buckets
    assert (b.size_bytes, b.ready_s, b.start_s, b.end_s, b.dur_s) == pytest.approx(
        (4000, 0.2, 0.21, 0.26, 0.05))
    assert rank_buckets(None) == () and rank_buckets({"per_rank": []}) == ()


def test_recursion_over_recorded_buckets_by_hand():
    # rank 0: backward 0.1 -> 0.5 s, buckets handed over at 0.2, 0.3, 0.5 s: fractions
    # 0.25, 0.5, 1; rank 1 the same fractions shifted by 0.1 s; rank 2 has no backward start
    # (a record made before it was kept) and is not read
    p = _point(buckets=(_rank(0, 0.1, 0.5, [0.2, 0.3, 0.5], SIZES),
                        _rank(1, 0.2, 0.6, [0.3, 0.4, 0.6], SIZES),
                        _rank(2, None, 0.5, [0.2, 0.3, 0.5], SIZES)))
    prof = dp.profile_of(p)
    assert prof is not None and prof.record == "s.db:1"
    assert prof.ready_fraction == pytest.approx((0.25, 0.5, 1.0))
    assert prof.sizes_bytes == tuple(SIZES)
    # a target with device time 0.3 s: backward 0.2 s, ready at 0.05, 0.1, 0.2 s; an
    # all-reduce costs 6e-8 s/byte: 0.06, 0.12, 0.06 s. WFBP: starts 0.05, 0.11, 0.23;
    # ends 0.11, 0.23, 0.29 -> exposed 0.29 - 0.2 = 0.09 s of 0.24 s of communication
    x, total = dp.exposed_comm(None, 0.3, lambda m: 6e-8 * m, profile=prof)
    assert x == pytest.approx(0.09) and total == pytest.approx(0.24)
    # the recorded layout replaces the parameter count: params do not matter with a profile
    assert dp.exposed_comm(10**9, 0.3, lambda m: 6e-8 * m, profile=prof)[0] == pytest.approx(
        0.09)
    sched = comm.wfbp_schedule(prof.buckets(0.2), lambda m: 6e-8 * m)
    assert [x for se in sched for x in se] == pytest.approx([0.05, 0.11, 0.11, 0.23, 0.23, 0.29])


def test_no_profile_when_ready_times_or_layouts_do_not_allow_one():
    assert dp.profile_of(_point(buckets=(_rank(0, None, 0.5, [0.2], [1e6]),))) is None
    other = _rank(1, 0.1, 0.5, [0.2, 0.3], [1e6, 3e6])
    assert dp.profile_of(_point(buckets=(_rank(0, 0.1, 0.5, [0.2, 0.3], [1e6, 2e6]),
                                         other))) is None
    # a ready time past backward's end (DDP's hand-off after the last op) is clipped to 1
    late = dp.profile_of(_point(buckets=(_rank(0, 0.1, 0.5, [0.52], [1e6]),)))
    assert late is not None and late.ready_fraction == (1.0,)


def test_fallback_is_ddp_default_buckets_ready_uniformly():
    # 2 MiB of gradients (2**19 float32 parameters), device 0.3 s: backward 0.2 s; buckets
    # 1 MiB ready at 0.1 s and 1 MiB at 0.2 s, 0.15 s each: ends 0.25 and 0.4 -> exposed 0.2
    x, total = dp.exposed_comm(2 ** 19, 0.3, lambda m: 0.15)
    assert x == pytest.approx(0.2) and total == pytest.approx(0.3)
    assert dp.assumptions(None) == list(dp.ASSUMPTIONS)
    assert "uniform rate" in dp.assumptions(None)[0]


def test_recorded_profile_picks_a_record_never_the_withheld_point():
    own = _point(1, per_device=32, buckets=(_rank(0, 0.1, 0.5, [0.2, 0.3, 0.5], SIZES),))
    near = _point(2, per_device=64, buckets=(_rank(0, 0.0, 1.0, [0.5, 0.6, 1.0], SIZES),))
    far = _point(3, per_device=512, buckets=(_rank(0, 0.0, 1.0, [0.1, 0.2, 1.0], SIZES),))
    four = _point(4, world=4, per_device=32, buckets=(_rank(0, 0.0, 1.0, [0.9] * 3, SIZES),))
    tuned = _point(5, per_device=32, variant="bucket_cap_mb=1",
                   buckets=(_rank(0, 0.0, 1.0, [0.3] * 3, SIZES),))
    pts = [own, near, far, four, tuned, _point(6, model="other", buckets=own.buckets)]
    # the record at the predicted point itself is never used, withheld or not
    for withheld in ([own], []):
        got = dp.recorded_profile(pts, own, 2, 32, withheld=withheld)
        assert got is not None and got.record == "s.db:2"   # same ranks, nearest batch
    assert got.ready_fraction == pytest.approx((0.5, 0.6, 1.0))
    assert dp.recorded_profile(pts, own, 2, 16).record == "s.db:1"   # another batch: usable
    assert dp.recorded_profile(pts, own, 2, 256).record == "s.db:3"   # nearest in log batch
    assert dp.recorded_profile(pts, own, 4, 64).record == "s.db:4"   # same rank count first
    assert dp.recorded_profile(pts, _point(model="none"), 2, 32) is None
    text = " ".join(dp.assumptions(got))
    assert "s.db:2" in text and "recorded order" in text and "uniform" not in text


def _linear_sweep(a: float, b: float, source: str = "s.db") -> list[CollectivePoint]:
    return [CollectivePoint(source, "r", "allreduce", 2, m, a + b * m, None, None, "gloo")
            for m in (1 << 20, 1 << 22, 1 << 24, 1 << 26)]


def test_backtest_rows_of_a_synthetic_record():
    # backward 0 -> 0.4 s, buckets of 8 MB and 16 MB handed over at 0.1 and 0.4 s; the sweep
    # is exactly 1 ms + 1e-8 s/byte: 0.081 s and 0.161 s. Recursion: 0.1 -> 0.181, then
    # 0.4 -> 0.561: the last end predicted 0.561 s, the exposed tail 0.161 s.
    r = _rank(0, 0.0, 0.4, [0.1, 0.4], [8e6, 16e6], durs=[0.1, 0.2], tail=0.2)
    recs = Records([_point(buckets=(r,))], _linear_sweep(1e-3, 1e-8), ["s.db"])
    rows = bc.rows(recs)
    tail = [x for x in rows if x.category == bc.WFBP_CATEGORY]
    per = [x for x in rows if x.category == bc.BUCKET_CATEGORY]
    assert len(tail) == 1 and len(per) == 2
    assert tail[0].predicted_s == pytest.approx(0.561, rel=1e-6)
    assert tail[0].measured_s == pytest.approx(0.6)       # recorded last end: 0.4 + 0.2
    assert "predicted 161.0 ms" in tail[0].label and "recorded 200.0 ms" in tail[0].label
    assert [x.predicted_s for x in per] == pytest.approx([0.081, 0.161], rel=1e-6)
    assert [x.measured_s for x in per] == pytest.approx([0.1, 0.2])
    # a sweep of another backend or rank count prices nothing
    nccl = [replace(c, backend="nccl") for c in _linear_sweep(1e-3, 1e-8)]
    assert bc.rows(Records([_point(buckets=(r,))], nccl, ["s.db"])) == []
    assert bc.rows(recs, [bc.BUCKET_CATEGORY]) == per


@pytest.fixture(scope="module")
def cpu_records() -> Records:
    return load(CPU_DB)


def test_committed_cpu_records_are_sane(cpu_records):
    dps = [p for p in cpu_records.points if p.buckets]
    assert len(dps) >= 3 and {p.model for p in dps} >= {"fcn5", "lstm", "resnet56"}
    for p in dps:
        assert p.comm_backend == "gloo" and len(p.buckets) == 2
        for r in p.buckets:
            ready = [b.ready_s for b in r.buckets]
            assert all(x is not None for x in ready) and ready == sorted(ready)
            assert all(b.end_s > b.start_s >= (b.ready_s or 0) for b in r.buckets)
            assert r.exposed_tail_s >= 0 and r.last_end_s == max(b.end_s for b in r.buckets)


def test_committed_cpu_backtest(cpu_records):
    from statistics import median

    rows = bc.rows(cpu_records)
    tails = [r for r in rows if r.category == bc.WFBP_CATEGORY]
    per = [r for r in rows if r.category == bc.BUCKET_CATEGORY]
    assert len(tails) == 10 and len(per) == 20
    # docs/perfmodel.md: the recursion over the recorded ready times and the sweep's a + b M
    # puts the last all-reduce end at MdAPE 10.8% (max 28.0%); the same recursion over DDP's
    # default buckets ready uniformly over the recorded backward: 21.2% (max 36.8%)
    assert median(r.ape for r in tails) == pytest.approx(10.8, abs=0.05)
    assert max(r.ape for r in tails) == pytest.approx(28.0, abs=0.05)
    assert median(r.baseline_ape for r in tails) == pytest.approx(21.2, abs=0.05)
    # ... while every bucket all-reduce inside a training step on this shared 2-core VM took
    # longer than the isolated sweep says (backward, the other rank and gloo's concurrent
    # all-reduces share the cores), so the exposed tail is under-predicted on every rank
    assert all(r.measured_s > r.predicted_s for r in per)
    assert median(r.ape for r in per) == pytest.approx(61.9, abs=0.05)


def test_cli_predict_says_it_used_the_recorded_buckets(tmp_path):
    from typer.testing import CliRunner

    from dlperf.cli import app

    res = CliRunner().invoke(app, ["predict", "--db", str(CPU_DB), "--model", "fcn5",
                                   "--framework", "torch", "--device", "cpu", "--precision",
                                   "fp32", "--batch-size", "64", "--nproc", "2",
                                   "--format", "json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    text = " ".join(out["assumptions"]) + json.dumps(out["provenance"])
    assert "recorded order, sizes and ready times" in text and f"{CPU_DB}:" in text
    assert "uniform rate" not in text
    assert out["parts"]["exposed_comm_s"] > 0


def test_validate_has_the_recursion_categories_where_records_exist():
    from dlperf import validation

    s = {d["category"]: d for d in validation.validate(CPU_DB, list(bc.CATEGORIES)).summary()}
    assert set(s) == set(bc.CATEGORIES)
    assert s[bc.WFBP_CATEGORY]["count"] == 10 and s[bc.BUCKET_CATEGORY]["count"] == 20
    assert s[bc.WFBP_CATEGORY]["mdape_pct"] < s[bc.WFBP_CATEGORY]["baseline_mdape_pct"]


def test_cpu_ddp_points_carry_their_ranks_thread_count(cpu_records, tmp_path, monkeypatch):
    """The 2-rank rows of the committed file have no ``threads`` column (the launcher set one
    thread per rank, recorded in ``dist.per_rank[*].threads``); read as threads=1 they match
    the one-device series (threads=1), so a prediction of a stored 2-rank point is judged
    against it (id 8: fcn5 2x32, id 2: 2x64), and the DDP-overhead pairs are found."""
    from dlperf.perfmodel import api

    by_id = {p.result_id: p for p in cpu_records.points}
    assert by_id[8].world_size == 2 and by_id[8].threads == 1 == by_id[5].threads
    monkeypatch.setenv("DLPERF_CACHE_DIR", str(tmp_path))
    p = api.predict(CPU_DB, "fcn5", batch_size=64, nproc=2)
    assert p.measured_step_time_s == by_id[8].step_time_s
    p = api.predict(CPU_DB, "fcn5", batch_size=128, nproc=2)
    assert p.measured_step_time_s == by_id[2].step_time_s
    assert "not measured" not in p.provenance["DDP overhead rho, kappa"]
