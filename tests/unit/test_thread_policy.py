"""The thread policy (dlperf.env.choose_threads), how it meets stored points
(dlperf.resume.resolve_threads), the warning about stored points measured with other settings
(dlperf.resume.changed_settings), and what dlperf.sweep.execute does with them: progress lines
with an ETA off a terminal, the policy recorded in each result, the ceilings cache handed to
the workers."""

from __future__ import annotations

import io
import json
import os

import pytest
from rich.console import Console

from dlperf.config import make_policy, make_run_config
from dlperf.env import BUSY_OTHER_CPUS, ThreadChoice, choose_threads
from dlperf.measure.ceilings import CACHE_ENV, CeilingCache
from dlperf.results.schema import RunRecord, new_record
from dlperf.results.store import ResultStore
from dlperf.resume import auto_threads, changed_settings, resolve_threads
from dlperf.stats import summarize, throughput
from dlperf.sweep import execute, progress_line


@pytest.mark.parametrize("usable,other,load,want,busy", [
    (2, 0.1, 0.3, None, False),   # quiet: the framework's default
    (2, 1.4, 3.5, 1, True),       # busy 2-core host: 1 thread per worker
    (2, 0.1, 2.5, 1, True),       # quiet at the sample, but a minute of runnable work
    (8, 3.2, 4.0, 4, True),       # floor(8 - 3.2)
    (8, 0.6, 0.6, 7, True),       # at most usable - 1
    (8, 9.0, 9.0, 1, True),       # at least 1
    (1, 0.9, 5.0, None, False),   # nothing to choose
])
def test_choose_threads(usable, other, load, want, busy):
    c = choose_threads(usable=list(range(usable)), other=other, load_1m=load)
    assert (c.threads, c.busy, c.usable_cpus) == (want, busy, usable)
    assert "--threads N chooses" in c.line()
    assert c.record()["policy"] == "auto" and c.record()["threads"] == want
    if busy:
        assert "busy" in c.reason and f"{other:.1f}" in c.reason and f"{load:.1f}" in c.reason


def test_the_busy_threshold_is_half_a_cpu():
    below = choose_threads(usable=[0, 1], other=BUSY_OTHER_CPUS - 0.01, load_1m=0.0)
    at = choose_threads(usable=[0, 1], other=BUSY_OTHER_CPUS, load_1m=0.0)
    assert below.threads is None and at.threads == 1


QUIET = ThreadChoice(None, 2, 0.1, 0.2, False, "auto: the host was quiet")
BUSY = ThreadChoice(1, 2, 1.5, 3.0, True, "auto: the host was busy")
FAST = make_policy(min_iters=3, min_time_s=0.0)


def ok_result(cfg, ms=2.0, policy=None):
    r = new_record(cfg, "ok").to_dict()
    times = [ms / 1e3] * 3
    r.update(summary=summarize(times).to_dict(),
             throughput=throughput(3, cfg.global_batch, sum(times)), samples={"measure": times},
             n_measured=3, env={"thread_policy": policy} if policy else {})
    return r


def test_only_cpu_points_without_threads_of_a_real_framework_take_the_policy():
    assert auto_threads(make_run_config(model="fcn5_tiny", batch_size=8, device="cpu"))
    assert not auto_threads(make_run_config(model="fcn5_tiny", batch_size=8, threads=2))
    assert not auto_threads(make_run_config(model="fcn5_tiny", batch_size=8, device="cuda"))


def test_resolve_threads_fills_the_choice_and_resumes_what_the_policy_stored(tmp_path):
    p = make_run_config(model="fcn5_tiny", batch_size=8, device="cpu")
    given = make_run_config(model="fcn5_tiny", batch_size=16, device="cpu", threads=2)
    with ResultStore(tmp_path / "r.db") as s:
        pts, keys = resolve_threads([p, given], BUSY, s, s.done_keys())
        assert [q.hardware.threads for q in pts] == [1, 2] and keys == {pts[0].run_key()}
        assert pts[1] is given
        # stored by the policy at 1 thread on a busy host; now the host is quiet: resumed
        s.add(ok_result(pts[0], policy=BUSY.record()))
        again, _ = resolve_threads([p], QUIET, s, s.done_keys())
        assert again[0].hardware.threads == 1
        assert resolve_threads([p], None, s, s.done_keys())[0] == [p]  # no policy: as given


def test_a_thread_count_given_by_hand_is_not_taken_for_the_policys(tmp_path):
    p = make_run_config(model="fcn5_tiny", batch_size=8, device="cpu")
    with ResultStore(tmp_path / "r.db") as s:
        s.add(ok_result(p.with_(threads=1)))  # --threads 1, no policy
        pts, _ = resolve_threads([p], QUIET, s, s.done_keys())
        assert pts[0].hardware.threads is None  # the quiet host's choice is measured
        s.add(ok_result(p))  # a point stored with the framework's default before the policy
        pts, _ = resolve_threads([p], BUSY, s, s.done_keys())
        assert pts[0].hardware.threads is None  # is that point: resumed, not measured again


def test_changed_settings_warn_and_name_rerun(tmp_path):
    p = make_run_config(model="fcn5_tiny", batch_size=8, iterations=FAST)
    with ResultStore(tmp_path / "r.db") as s:
        s.add(ok_result(p))
        assert changed_settings([p], s) is None
        longer = p.with_(iterations=make_policy(min_iters=3, min_time_s=1.0), measure_ceilings=False)
        w = changed_settings([longer], s, rerun_flag="--rerun")
    assert w.startswith("warning: 1 of the 1 points already stored were measured with other")
    assert "iterations.min_time_s: 0.0 stored, 1.0 now" in w
    assert "measure_ceilings: True stored, False now" in w and "add --rerun" in w


def test_progress_line():
    assert progress_line(1, 8, "fcn5_tiny b=8", 0.0, []) == "[1/8] fcn5_tiny b=8 (0:00 elapsed)"
    assert progress_line(3, 8, "x", 21.0, [10.0, 12.0]) == "[3/8] x (0:21 elapsed, about 1:06 left)"
    assert "1:00:05 elapsed" in progress_line(2, 2, "x", 3605.0, [1.0])


def test_execute_prints_progress_off_a_terminal_records_the_policy_and_shares_ceilings(tmp_path):
    pts = [make_run_config(model="fcn5_tiny", batch_size=b, device="cpu", iterations=FAST)
           for b in (8, 16)]
    seen = []

    def runner(cfg):
        path = os.environ[CACHE_ENV]  # the sweep's ceilings file, for the worker
        seen.append((cfg.hardware.threads, sorted(CeilingCache.load(path).entries)))
        r = ok_result(cfg)
        r["ceilings"] = {"framework": "torch", "device": "cpu", "threads": cfg.hardware.threads,
                         "matmul": {"fp32": {"best": 1e11}}, "bandwidth": {"best": 1e10},
                         "fingerprint": {"hostname": "h"},
                         "origin": {c: {"how": "measured", "measured_at": "2027-01-01T00:00:00"}
                                    for c in ("matmul:fp32", "bandwidth")}}
        return RunRecord.from_dict(r)

    buf = io.StringIO()
    con = Console(file=buf, force_terminal=False, width=200)
    with ResultStore(tmp_path / "r.db") as s:
        out = execute(pts, s, runner=runner, console=con, threads=BUSY)
        stored = [json.loads(r["result_json"]) for r in s.rows()]
    text = buf.getvalue()
    assert "[1/2] fcn5_tiny torch/eager cpu fp32 b=8 synthetic threads=1 (0:00 elapsed)" in text
    assert "[2/2] fcn5_tiny torch/eager cpu fp32 b=16 synthetic threads=1 (" in text
    assert "left)" in text.split("[2/2]")[1].splitlines()[0]
    assert [q.hardware.threads for q in out.points] == [1, 1]
    assert all(r["env"]["thread_policy"] == BUSY.record() for r in stored)
    # the first worker found an empty cache, the second the first one's ceilings
    assert seen == [(1, []), (1, ["torch|cpu|bandwidth|threads=1",
                                  "torch|cpu|matmul:fp32|threads=1"])]
    assert CACHE_ENV not in os.environ  # gone after the sweep


def test_the_first_line_names_what_made_the_host_busy():
    """A load average at the CPUs with no other work sampled is busy by the load average: the
    line says so, not that the sampled CPUs were busy."""
    by_load = choose_threads(usable=[0, 1], other=0.0, load_1m=3.4)
    assert by_load.threads == 1
    assert by_load.reason.startswith("auto: the host was busy: a load average of 3.4 processes "
                                     "running or waiting for its 2 usable CPUs")
    assert "(the 0.5 s sample found 0.0 CPUs of other work)" in by_load.reason
    by_other = choose_threads(usable=[0, 1], other=1.2, load_1m=0.4)
    assert by_other.reason.startswith("auto: the host was busy: other work kept 1.2 of the 2 "
                                      "usable CPUs busy") and "(load average 0.4)" in by_other.reason


def test_the_choice_is_made_once_per_results_file(tmp_path, monkeypatch):
    """The first run's choice is stored with its points and kept by the next run on the same
    file whatever the load now; --rechoose-threads measures again and warns when it differs;
    another count of usable CPUs chooses again."""
    from dlperf.cli import common
    from dlperf.resume import stored_thread_choice

    err = io.StringIO()
    monkeypatch.setattr(common, "err", Console(file=err, width=300))
    cfg = make_run_config(model="fcn5_tiny", framework="torch", batch_size=8, device="cpu")
    db = tmp_path / "r.db"
    monkeypatch.setattr("dlperf.env.choose_threads", lambda cpus=None: BUSY)
    first = common.choose_threads_once([cfg], str(db))
    assert first is BUSY
    with ResultStore(str(db)) as store:
        store.add(ok_result(cfg.with_(threads=1), policy=BUSY.record()))
        kept = stored_thread_choice(store)
    assert kept is not None and kept.threads == 1 and kept.chosen_at
    usable = len(os.sched_getaffinity(0))
    monkeypatch.setattr("dlperf.env.choose_threads", lambda cpus=None: QUIET)
    if usable != 2:
        pytest.skip(f"the stored choice was made for 2 usable CPUs, this process has {usable}")
    again = common.choose_threads_once([cfg], str(db))
    assert again.threads == 1 and again.chosen_at == kept.chosen_at  # kept, not re-measured
    assert "this results file's choice since" in err.getvalue()
    assert "--rechoose-threads" in again.line() and again.record()["chosen_at"]
    new = common.choose_threads_once([cfg], str(db), rechoose=True)
    assert new is QUIET
    assert ("warning: the thread policy chose the framework's default threads now; this "
            "results file's other CPU points ran with 1 thread(s)") in err.getvalue()


def test_another_count_of_usable_cpus_chooses_again(tmp_path, monkeypatch):
    from dlperf.cli import common

    err = io.StringIO()
    monkeypatch.setattr(common, "err", Console(file=err, width=300))
    cfg = make_run_config(model="fcn5_tiny", framework="torch", batch_size=8, device="cpu")
    other = ThreadChoice(3, 64, 10.0, 70.0, True, "auto: the host was busy")
    with ResultStore(str(tmp_path / "r.db")) as store:
        store.add(ok_result(cfg.with_(threads=3), policy=other.record()))
    monkeypatch.setattr("dlperf.env.choose_threads", lambda cpus=None: QUIET)
    assert common.choose_threads_once([cfg], str(tmp_path / "r.db")) is QUIET
    assert "made for 64 usable CPUs" in err.getvalue()
