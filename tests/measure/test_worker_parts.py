"""The measurement half of the worker, without a framework: timing truth, the rank merge into a
record's parts, and the host checks on a record."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dlperf.config import make_run_config
from dlperf.measure.host import CPU_WAIT_WARN, RunDelay, host_checks
from dlperf.measure.ranks import gather_ranks, max_memory, rank_payload
from dlperf.measure.segment import timing_check
from dlperf.results.schema import RunRecord, failure_record, new_record


def test_timing_check_takes_the_largest_difference_and_every_process_must_agree():
    rel, ok = timing_check([(0.99, 1.0)])
    assert rel == pytest.approx(0.01) and ok
    rel, ok = timing_check([(0.99, 1.0), (0.80, 1.0)])  # second process: 20% unaccounted
    assert rel == pytest.approx(0.20) and not ok
    # a very short segment: within the absolute slack (2 ms) though 50% off
    assert timing_check([(0.001, 0.002)])[1]
    with pytest.raises(ValueError, match="at least one"):
        timing_check([])


def _payload(rank, times, mem, recompiles=0, steady=True, comm=None):
    p = rank_payload(rank, samples={"first": [1.0], "warmup": [0.5], "measure": times},
                     losses={"first": [3.0], "warmup": [2.5], "measure": [2.0] * len(times)},
                     wall_s=sum(times) + 0.001, memory=mem, comm=comm)
    return p, steady, recompiles


def test_gather_ranks_merges_samples_memory_and_the_dist_part():
    cfg = make_run_config(model="fcn5_tiny", batch_size=8)
    p0, _, _ = _payload(0, [0.10, 0.30], {"peak_rss_bytes": 5, "nvml_used_bytes": None})
    p1 = {**_payload(1, [0.20, 0.10], {"peak_rss_bytes": 7, "nvml_used_bytes": None})[0],
          "steady_state": False, "recompiles_measured": 2}
    dist = SimpleNamespace(replicas=2, world_size=2, backend="ddp/gloo", info={"launcher": "t"},
                           all_gather=lambda p: [p, p1])
    out = gather_ranks(cfg, dist, p0, steady_state=True, recompiles_measured=0)
    assert out["samples"]["measure"] == [0.20, 0.30]  # slowest rank per iteration
    assert out["samples"]["rank1:measure"] == [0.20, 0.10]
    assert out["steady_state"] is False and out["recompiles_measured"] == 2
    assert out["memory"] == {"nvml_used_bytes": None, "peak_rss_bytes": 7}
    d = out["dist"]
    assert d["processes"] == 2 and d["engine"] == {"launcher": "t"} and d["imbalance"] is not None
    assert [r["rank"] for r in d["per_rank"]] == [0, 1]
    # the dist part reads into the record's typed Dist
    rec = new_record(cfg, "ok", dist=d)
    assert rec.dist.per_rank[1].memory.peak_rss_bytes == 7
    assert rec.dist.engine == {"launcher": "t"}  # the framework's own words, in one field
    assert max_memory([]) == {}


def test_host_checks_warn_about_cpu_wait_only_for_measured_ok_records():
    cfg = make_run_config(model="fcn5_tiny", batch_size=2, threads=4)
    delay = RunDelay()
    delay.start_ns, delay.end_ns = 0, int(0.5e9)  # waited 0.5 s of a 1 s segment
    env = {"cpu_affinity": 2, "load_average_1_5_15": [0.1, 0.1, 0.1]}
    rec = new_record(cfg, "ok", timing={"wall_time_s": 1.0}, warnings=[],
                     data_info={"pipeline": {"warnings": ["grain missing: threads"]}})
    host_checks(rec, env, delay, measured=True)
    assert rec.host_cpu_wait.share == pytest.approx(0.5) and 0.5 > CPU_WAIT_WARN
    assert rec.warnings[0] == "grain missing: threads"
    assert any("oversubscribed" in w for w in rec.warnings)
    assert any("waited for a CPU 50%" in w for w in rec.warnings)
    failed = failure_record(cfg, "crash", "x")
    host_checks(failed, env, delay, measured=True)
    assert failed.warnings is None and failed.host_cpu_wait is None
    nan = new_record(cfg, "nan_loss", "x", timing={"wall_time_s": 1.0}, warnings=[])
    host_checks(nan, env, delay, measured=True)
    assert nan.host_cpu_wait is None and nan.warnings == []
    assert "host_cpu_wait" not in RunRecord.from_dict(nan.to_dict()).to_dict()


def test_the_cpu_wait_share_is_at_most_one_whenever_the_thread_waits(monkeypatch):
    """A simulated scheduler: before every clock or schedstat reading, and in the segment,
    the thread waits a random time (counted in its run delay) or runs; the share of the window
    :class:`RunDelay` records never exceeds 1, wherever the waits fall."""
    import random

    import dlperf.measure.host as host
    from dlperf.measure.host import cpu_wait

    rng = random.Random(7)
    state = {"t": 0, "delay": 0}

    def wait_or_run():
        ns = rng.choice([0, rng.randint(1, 5_000_000)])
        state["t"] += ns
        if rng.random() < 0.8:  # waiting for a CPU, not running
            state["delay"] += ns

    def clock():
        wait_or_run()
        return state["t"]

    def delay():
        wait_or_run()
        return state["delay"]

    monkeypatch.setattr(host.time, "perf_counter_ns", clock)
    monkeypatch.setattr(host, "thread_run_delay_ns", delay)
    shares = []
    for _ in range(2000):
        d = RunDelay()
        d.start()
        wait_or_run()  # the measured segment
        d.stop()
        cw = cpu_wait(d.as_dict(), None)
        if cw is not None:
            shares.append(cw["share"])
    assert len(shares) > 1000 and max(shares) <= 1.0 and max(shares) > 0.5
