"""The ceilings of a point (dlperf.measure.ceilings.point_ceilings): only the point's
precision, measured once per framework, device, precision and thread count, cached in this
process and in the sweep's file, with the origin of each; a cached entry counts only for the
same machine and for a day."""

from __future__ import annotations

import contextlib
import json
import os

import pytest

from dlperf.measure import ceilings as C


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


class CountingBackend:
    """Kernels on a fake clock (matmul 1 TFLOP/s, bf16 2x; bandwidth 100 GB/s) that count
    what they were asked to run."""

    framework, device_kind, device_key = "fake", "cpu", "cpu"

    def __init__(self, clock):
        self.clock, self.calls = clock, []

    @contextlib.contextmanager
    def precision(self, p):
        yield

    def matmul(self, n, p):
        self.calls.append(f"matmul:{p}")
        rate = 2e12 if p == "bf16" else 1e12

        def run():
            self.clock.t += 2 * n ** 3 / rate
        return run

    def scale(self, nbytes):
        self.calls.append("bandwidth")

        def run():
            self.clock.t += 2 * nbytes / 100e9
        return run

    def block(self, out):
        pass

    def release(self):
        pass


FP = {"hostname": "vm", "cpu_model": "x", "cpu": ["6", "167", "1"], "usable_cpus": 2,
      "gpus": [], "framework": "fake 1.0", "device_name": None, "method": 2}
A = {"run_key": "aaaa", "label": "fcn5_tiny fake/eager cpu fp32 b=8 synthetic"}
B = {"run_key": "bbbb", "label": "lstm_tiny fake/eager cpu fp32 b=8 synthetic"}
NOW = 1.8e9


@pytest.fixture(autouse=True)
def fresh_process_cache(monkeypatch):
    monkeypatch.setattr(C, "_POINT_CACHE", {})


def measure(precision="fp32", threads=1, fp=FP, point=A, cache_path=None, now_s=NOW):
    clock = FakeClock()
    be = CountingBackend(clock)
    out = C.point_ceilings(be, precision, threads=threads, fingerprint=fp, point=point,
                           cache_path=cache_path, clock=clock, now_s=now_s)
    return out, be.calls


def test_a_point_measures_its_own_precision_and_the_bandwidth_only():
    c, calls = measure("bf16")
    assert calls == ["matmul:bf16", "bandwidth"]
    assert c["matmul_flops_per_s"] == {"bf16": pytest.approx(2e12)}
    assert c["bandwidth_bytes_per_s"] == pytest.approx(100e9)
    assert c["cached"] is False and c["threads"] == 1 and c["precision"] == "bf16"
    assert c["origin"]["matmul:bf16"] == {"how": "measured", "where": "this point",
                                          "run_key": "aaaa", "label": A["label"],
                                          "measured_at": "2027-01-15T08:00:00+00:00"}
    assert C.origin_text(c) == "matmul:bf16 measured in this point; bandwidth measured in this point"


def test_the_same_process_measures_once_per_precision_and_thread_count():
    measure("fp32", threads=1)
    again, calls = measure("fp32", threads=1, point=B)
    assert calls == [] and again["cached"] is True
    assert again["origin"]["bandwidth"]["where"] == "this process"
    assert again["origin"]["bandwidth"]["run_key"] == "aaaa"  # who measured it
    _, calls = measure("bf16", threads=1)
    assert calls == ["matmul:bf16"]  # the bandwidth of 1 thread is known
    _, calls = measure("fp32", threads=2)
    assert calls == ["matmul:fp32", "bandwidth"]  # another thread count: measured


def test_the_sweeps_file_hands_ceilings_to_the_next_worker(tmp_path, monkeypatch):
    path = tmp_path / "ceilings.json"
    first, _ = measure("fp32")
    cache = C.CeilingCache()
    assert cache.add_result({"run_key": "aaaa", "ceilings": first}, "this sweep") == 2
    cache.save(path)
    monkeypatch.setattr(C, "_POINT_CACHE", {})  # the next worker is a fresh process
    second, calls = measure("fp32", point=B, cache_path=path)
    assert calls == [] and second["cached"] is True
    o = second["origin"]["matmul:fp32"]
    assert (o["how"], o["where"], o["run_key"], o["label"]) == ("cached", "this sweep", "aaaa",
                                                                A["label"])
    assert second["matmul"] == first["matmul"]
    assert "cached from fcn5_tiny" in C.origin_text(second)
    # a cached result adds nothing: an entry always names the point that measured it
    assert C.CeilingCache().add_result({"run_key": "bbbb", "ceilings": second}, "x") == 0


@pytest.mark.parametrize("change", ["machine", "framework", "age"])
def test_a_cached_ceiling_of_another_machine_or_too_old_is_measured_again(tmp_path, change,
                                                                          monkeypatch):
    path = tmp_path / "ceilings.json"
    first, _ = measure("fp32")
    cache = C.CeilingCache()
    cache.add_result({"run_key": "aaaa", "ceilings": first}, "results file r.db")
    cache.save(path)
    monkeypatch.setattr(C, "_POINT_CACHE", {})
    fp, now = dict(FP), NOW
    if change == "machine":
        fp["cpu"] = ["6", "143", "8"]
    elif change == "framework":
        fp["framework"] = "fake 2.0"
    else:
        now = NOW + C.CACHE_MAX_AGE_S + 1
    c, calls = measure("fp32", fp=fp, cache_path=path, now_s=now)
    assert calls == ["matmul:fp32", "bandwidth"] and c["cached"] is False
    # within the day, same machine: taken from the file
    monkeypatch.setattr(C, "_POINT_CACHE", {})
    _, calls = measure("fp32", cache_path=path, now_s=NOW + C.CACHE_MAX_AGE_S - 1)
    assert calls == []


def test_a_cache_file_that_cannot_be_read_is_an_empty_cache(tmp_path):
    bad = tmp_path / "c.json"
    bad.write_text("{not json")
    assert C.CeilingCache.load(bad).entries == {}
    assert C.CeilingCache.load(tmp_path / "missing.json").entries == {}
    c, calls = measure("fp32", cache_path=bad)
    assert calls == ["matmul:fp32", "bandwidth"] and c["cached"] is False


def test_the_newest_measurement_of_a_key_wins_and_failed_ones_are_not_cached():
    old, _ = measure("fp32", now_s=NOW)
    C._POINT_CACHE.clear()
    new, _ = measure("fp32", now_s=NOW + 60)
    cache = C.CeilingCache()
    cache.add_result({"run_key": "new", "ceilings": new}, "this sweep")
    cache.add_result({"run_key": "old", "ceilings": old}, "results file r.db")
    assert {e["run_key"] for e in cache.entries.values()} == {"new"}
    failed = json.loads(json.dumps(new))
    failed["matmul"]["fp32"]["best"] = None
    assert C.CeilingCache().add_result({"run_key": "f", "ceilings": failed}, "x") == 1  # bw only


def test_the_fingerprint_names_the_machine_and_the_framework_version():
    env = {"hostname": "h", "cpu_model": "Xeon", "cpu_id": {"family": "6", "model": "167",
                                                            "stepping": "1", "mhz": 2600.0},
           "cpu_affinity": 2, "gpus": [{"uuid": "GPU-b"}, {"name": "H200"}]}
    fp = C.machine_fingerprint(env, {"torch": "2.13.0", "device_name": "cpu"}, "torch")
    assert fp == {"hostname": "h", "cpu_model": "Xeon", "cpu": ["6", "167", "1"],
                  "usable_cpus": 2, "gpus": ["GPU-b", "H200"], "framework": "torch 2.13.0",
                  "device_name": "cpu", "method": C.CEILINGS_METHOD_VERSION}
    env["cpu_id"]["mhz"] = 3000.0  # the clock read at one moment is not the machine
    assert C.machine_fingerprint(env, {"torch": "2.13.0", "device_name": "cpu"}, "torch") == fp


def test_a_sweep_seeds_its_cache_from_recent_results_of_its_file(tmp_path):
    import datetime as dt
    import os

    from dlperf.config import make_run_config
    from dlperf.results.schema import new_record
    from dlperf.results.store import ResultStore
    from dlperf.resume import ceilings_cache

    p = make_run_config(model="fcn5_tiny", batch_size=8, device="cpu")
    recent, _ = measure("fp32", now_s=dt.datetime.now(dt.UTC).timestamp())
    old_c = json.loads(json.dumps(recent))
    old_c["device"] = "cpu:old"
    with ResultStore(tmp_path / "r.db") as s:
        for ceil, age_s in ((recent, 60), (old_c, C.CACHE_MAX_AGE_S + 60)):
            r = new_record(p.with_(seed=int(age_s)), "ok").to_dict()
            r["created_at"] = (dt.datetime.now(dt.UTC)
                               - dt.timedelta(seconds=age_s)).isoformat(timespec="seconds")
            r["ceilings"] = ceil
            s.add(r)
        with ceilings_cache([p], s) as (_, path):
            assert os.environ[C.CACHE_ENV] == str(path)
            got = C.CeilingCache.load(path).entries
        with ceilings_cache([p.with_(measure_ceilings=False)], s) as none:
            assert none is None and C.CACHE_ENV not in os.environ
    assert sorted(got) == ["fake|cpu|bandwidth|threads=1", "fake|cpu|matmul:fp32|threads=1"]
    assert {e["where"] for e in got.values()} == {f"results file {tmp_path / 'r.db'}"}
    assert C.CACHE_ENV not in os.environ and not path.exists()


def test_two_sweeps_in_one_process_restore_the_cache_variable_in_any_order(monkeypatch):
    """Sweeps running at once in one process (threads) each announce their ceilings cache in
    $DLPERF_CEILINGS_CACHE; ending in either order leaves the value from before both, never
    the path of a file the other sweep deleted."""
    from dlperf import resume
    from dlperf.measure.ceilings import CACHE_ENV

    monkeypatch.setenv(CACHE_ENV, "/user/own.json")
    resume._announce(CACHE_ENV, "/tmp/a.json")
    resume._announce(CACHE_ENV, "/tmp/b.json")
    assert os.environ[CACHE_ENV] == "/tmp/b.json"
    resume._withdraw(CACHE_ENV, "/tmp/b.json")
    assert os.environ[CACHE_ENV] == "/tmp/a.json"
    resume._announce(CACHE_ENV, "/tmp/c.json")
    resume._withdraw(CACHE_ENV, "/tmp/a.json")
    assert os.environ[CACHE_ENV] == "/tmp/c.json"
    resume._withdraw(CACHE_ENV, "/tmp/c.json")
    assert os.environ[CACHE_ENV] == "/user/own.json"


class CopyingBackend(CountingBackend):
    """CountingBackend with host-to-device copies: pinned 25 GB/s, pageable 10 GB/s."""

    def host_copy(self, nbytes, pinned):
        self.calls.append(f"h2d:{'pinned' if pinned else 'pageable'}")

        def run():
            self.clock.t += nbytes / (25e9 if pinned else 10e9)
        return run


class GpuCopyingBackend(CopyingBackend):
    device_kind, device_key = "cuda", "cuda:0"


def test_a_backend_that_copies_measures_pinned_and_pageable_copies_once(tmp_path):
    clock = FakeClock()
    be = GpuCopyingBackend(clock)
    c = C.point_ceilings(be, "fp32", threads=1, fingerprint=FP, point=A, clock=clock,
                         now_s=NOW)
    assert list(dict.fromkeys(be.calls)) == ["matmul:fp32", "bandwidth", "h2d:pinned",
                                             "h2d:pageable"]  # a ladder of sizes each
    assert c["h2d_bytes_per_s"] == {"pinned": pytest.approx(25e9),
                                    "pageable": pytest.approx(10e9)}
    assert c["origin"]["h2d:pageable"]["how"] == "measured"
    assert "host-to-device copies" in c["method"]
    # the sweep's file carries them to the next worker like the other ceilings
    cache = C.CeilingCache()
    assert cache.add_result({"run_key": "aaaa", "ceilings": c}, "this sweep") == 4
    path = tmp_path / "ceilings.json"
    cache.save(path)
    C._POINT_CACHE.clear()
    be2 = GpuCopyingBackend(FakeClock())
    again = C.point_ceilings(be2, "fp32", threads=1, fingerprint=FP, point=B, clock=FakeClock(),
                             cache_path=path, now_s=NOW)
    assert be2.calls == [] and again["h2d"] == c["h2d"]


def test_a_cpu_device_copies_pageable_memory_only():
    clock = FakeClock()
    be = CopyingBackend(clock)
    c = C.point_ceilings(be, "fp32", threads=1, fingerprint=FP, point=A, clock=clock,
                         now_s=NOW)
    assert be.calls == ["matmul:fp32", "bandwidth", "h2d:pageable"]
    assert c["h2d_bytes_per_s"] == {"pageable": pytest.approx(10e9)}


def test_a_copy_that_fails_is_recorded_not_raised():
    clock = FakeClock()

    class NoPinned(GpuCopyingBackend):
        def host_copy(self, nbytes, pinned):
            if pinned:
                raise RuntimeError("cudaHostAlloc failed")
            return super().host_copy(nbytes, pinned)

    c = C.point_ceilings(NoPinned(clock), "fp32", threads=1, fingerprint=FP, point=A,
                         clock=clock, now_s=NOW)
    assert c["h2d_bytes_per_s"]["pinned"] is None
    assert "cudaHostAlloc" in c["h2d"]["pinned"]["error"]
    assert c["h2d_bytes_per_s"]["pageable"] == pytest.approx(10e9)
