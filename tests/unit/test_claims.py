"""Claims (dlperf.results.claims): sweeps writing into one results file share its points; a
claim of a live sweep is respected, a dead or silent one taken over, a stored point is done."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest
from rich.console import Console

from dlperf.config import make_run_config
from dlperf.results.claims import Claims, process_gone
from dlperf.results.schema import RunRecord, new_record
from dlperf.results.store import ResultStore
from dlperf.stats import summarize, throughput


def ok(cfg, status="ok"):
    r = new_record(cfg, status, None if status == "ok" else "boom").to_dict()
    if status == "ok":
        times = [0.01] * 6
        r.update(summary=summarize(times).to_dict(),
                 throughput=throughput(6, cfg.workload.batch_size, sum(times)),
                 samples={"measure": times})
    return r


@pytest.fixture
def cfgs():
    return [make_run_config(model="fcn5_tiny", batch_size=b) for b in (1, 2, 3, 4)]


def test_a_live_claim_is_respected_and_a_dead_or_silent_one_taken_over(tmp_path, cfgs,
                                                                         monkeypatch):
    db = tmp_path / "r.db"
    a_store, b_store = ResultStore(db), ResultStore(db)
    a = Claims(a_store, resume=True, retry_failed=False, sweep="a")
    b = Claims(b_store, resume=True, retry_failed=False, sweep="b")
    k = cfgs[0].run_key()
    assert a.claim(k) == ("mine", None)
    assert a.claim(k) == ("mine", None)  # its own again
    state, holder = b.claim(k)  # same process, another sweep: alive, fresh heartbeat
    assert state == "busy" and holder["sweep"] == "a" and holder["pid"] == a.pid
    a_store.add(ok(cfgs[0]))
    a.release(k)
    assert b.claim(k) == ("done", None)  # stored meanwhile by the other sweep
    # a claim of a process that is gone (same host) is taken over at once
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    k2 = cfgs[1].run_key()
    b_store._db.execute("INSERT INTO claims VALUES (?, 'x', ?, ?, 's', ?, ?)",
                        (k2, other.pid, b.host, time.time(), time.time()))
    assert b.claim(k2)[0] == "busy"
    other.kill()
    other.wait()
    assert process_gone(other.pid)
    assert b.claim(k2) == ("mine", None)
    # another host: only its heartbeat's age tells
    k3 = cfgs[2].run_key()
    b_store._db.execute("INSERT INTO claims VALUES (?, 'y', 1, 'elsewhere', 's', ?, ?)",
                        (k3, time.time(), time.time()))
    assert b.claim(k3)[0] == "busy"
    monkeypatch.setenv("DLPERF_CLAIM_STALE_S", "0.2")
    time.sleep(0.3)
    assert b.claim(k3) == ("mine", None)
    a_store.close()
    b_store.close()


def test_what_counts_as_done(tmp_path, cfgs):
    db = tmp_path / "r.db"
    with ResultStore(db) as s:
        s.add(ok(cfgs[0]))
        s.add(ok(cfgs[1], "crash"))
        s.add(ok(cfgs[2], "error"))
        keys = [c.run_key() for c in cfgs]
        resume = Claims(s, resume=True, retry_failed=False)
        assert [resume.claim(k)[0] for k in keys] == ["done", "done", "mine", "mine"]
        retry = Claims(s, resume=True, retry_failed=True)
        s._db.execute("DELETE FROM claims")
        assert [retry.claim(k)[0] for k in keys] == ["done", "mine", "mine", "mine"]
        rerun = Claims(s, resume=False, retry_failed=False)
        s._db.execute("DELETE FROM claims")
        assert [rerun.claim(k)[0] for k in keys] == ["mine"] * 4
        s.add(ok(cfgs[3], "timeout"))  # stored after the rerun started: done for it
        s._db.execute("DELETE FROM claims")
        assert rerun.claim(keys[3]) == ("done", None)


def test_heartbeat_renews_claims_and_they_are_released_after(tmp_path, cfgs, monkeypatch):
    monkeypatch.setenv("DLPERF_CLAIM_STALE_S", "0.6")  # heartbeat every 0.1 s
    db = tmp_path / "r.db"
    with ResultStore(db) as s, ResultStore(db) as other:
        c = Claims(s, resume=True, retry_failed=False)
        o = Claims(other, resume=True, retry_failed=False)
        with c.beating():
            assert c.claim(cfgs[0].run_key())[0] == "mine"
            time.sleep(1.0)  # longer than the stale time: the heartbeat keeps it live
            assert o.claim(cfgs[0].run_key())[0] == "busy"
        assert s._db.execute("SELECT COUNT(*) FROM claims").fetchone()[0] == 0
        assert o.claim(cfgs[0].run_key()) == ("mine", None)


def test_two_sweeps_on_one_file_share_the_points(tmp_path, cfgs):
    """Two sweeps of the same points into one file at once (threads of one process here; the
    reliability benchmark runs two processes): every point measured once, by one of them."""
    from dlperf.sweep import execute

    db = tmp_path / "r.db"
    ResultStore(db).close()
    ran: list[tuple[str, int]] = []
    lock = threading.Lock()

    def runner_for(name):
        def run(cfg):
            with lock:
                ran.append((name, cfg.workload.batch_size))
            time.sleep(0.2)
            return RunRecord.from_dict(ok(cfg))
        return run

    outs = {}

    def sweep(name):
        with ResultStore(db) as store:
            outs[name] = execute(cfgs, store, sweep=name, runner=runner_for(name),
                                 console=Console(quiet=True))

    ts = [threading.Thread(target=sweep, args=(n,)) for n in ("a", "b")]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=60)
    assert sorted(b for _, b in ran) == [1, 2, 3, 4]  # each point once
    assert outs["a"].ran + outs["b"].ran == 4
    assert outs["a"].elsewhere + outs["b"].elsewhere == 4
    with ResultStore(db, read_only=True) as s:
        assert sorted(r["batch_size"] for r in s.rows(latest=False)) == [1, 2, 3, 4]
        assert s._db.execute("SELECT COUNT(*) FROM claims").fetchone()[0] == 0


def test_a_heartbeat_in_the_future_is_taken_over_once_it_stops_changing(tmp_path, cfgs,
                                                                        monkeypatch):
    """A claim whose heartbeat lies in the future (a clock set ahead, a copied or tampered
    file) made run and sweep wait forever: it is now watched on this process's own clock and
    taken over once it has not changed for the stale time; one that keeps changing is live."""
    monkeypatch.setenv("DLPERF_CLAIM_STALE_S", "0.3")
    store = ResultStore(tmp_path / "r.db")
    c = Claims(store, resume=True, retry_failed=False, sweep="b")
    k = cfgs[0].run_key()
    future = time.time() + 10**6
    store._db.execute("INSERT INTO claims VALUES (?, 'x', 1, 'elsewhere', 's', ?, ?)",
                      (k, future, future))
    state, holder = c.claim(k)
    assert state == "busy" and holder["age_s"] < -1e5
    time.sleep(0.15)
    store._db.execute("UPDATE claims SET heartbeat=? WHERE run_key=?", (future + 1, k))
    time.sleep(0.2)
    assert c.claim(k)[0] == "busy"  # it changed 0.2 s ago: a live holder
    time.sleep(0.4)
    assert c.claim(k) == ("mine", None)  # silent for longer than the stale time
    k2 = cfgs[1].run_key()  # a heartbeat that is not a number: not a sweep's
    store._db.execute("INSERT INTO claims VALUES (?, 'x', 1, 'elsewhere', 's', 0, 'soon')",
                      (k2,))
    assert c.claim(k2) == ("mine", None)


def test_the_wait_for_another_process_is_bounded_and_says_for_whom(tmp_path, cfgs):
    """A live holder that never finishes: the wait ends at wait_limit_s (a fake clock), the
    points are returned as left to it, and the lines name the holder."""
    from dlperf.results.claims import run_claimed, wait_limit_s

    store = ResultStore(tmp_path / "r.db")
    holder = Claims(store, resume=True, retry_failed=False, sweep="a")
    pts = [cfgs[0].with_(timeout_s=5.0)]
    assert holder.claim(pts[0].run_key())[0] == "mine"
    waiter = Claims(store, resume=True, retry_failed=False, sweep="b")
    t = [0.0]

    def sleep(s):
        t[0] += s
        holder.store._db.execute("UPDATE claims SET heartbeat=?", (time.time() + t[0],))

    con = Console(record=True, width=300)
    left = run_claimed(pts, waiter, lambda k, c: None, lambda: None, con, "r.db",
                       clock=lambda: t[0], sleep=sleep)
    text = con.export_text()
    assert left == pts and wait_limit_s(pts) == pytest.approx(2 * 5 + 120 + 60)
    assert f"pid {holder.pid} on host {holder.host}" in text
    assert "stopped waiting after" in text and "still waiting" in text
    assert t[0] == pytest.approx(wait_limit_s(pts), abs=2.5)
