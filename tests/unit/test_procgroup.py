"""A worker's whole process group ends with its point (dlperf.procgroup): what a worker forks
(a ``file:`` model that starts processes, a loader's workers left behind) does not outlive it,
whether the worker ends normally, times out, or is killed."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

from dlperf.config import make_run_config
from dlperf.launch.process import run_in_subprocess
from dlperf.procgroup import end_group, wait_group

#: Imported by every Python that starts with this folder on its path: when $LEAVE_CHILD names a
#: file, start a sleeper (in the same process group) and write its pid there.
SITE = """
import os, subprocess, sys
if os.environ.get("LEAVE_CHILD") and not os.environ.get("IS_CHILD"):
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                         env={**os.environ, "IS_CHILD": "1"})
    open(os.environ["LEAVE_CHILD"], "a").write(f"{p.pid}\\n")
"""


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def gone_soon(pid: int, limit_s: float = 5.0) -> bool:
    t = time.monotonic() + limit_s
    while time.monotonic() < t and alive(pid):
        time.sleep(0.02)
    return not alive(pid)


def test_what_a_child_forks_ends_with_it(tmp_path):
    pids = tmp_path / "pids"
    code = ("import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', "
            "'import time; time.sleep(300)']); "
            f"open({str(pids)!r}, 'w').write(str(p.pid))")
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    assert wait_group(proc, 60) == 0
    assert gone_soon(int(pids.read_text()))
    proc = subprocess.Popen([sys.executable, "-c", code + "; import time; time.sleep(300)"],
                            start_new_session=True)
    t0 = time.monotonic()
    while not pids.read_text().strip() or time.monotonic() - t0 < 0.5:
        time.sleep(0.05)
    try:
        wait_group(proc, 0.2)
        raise AssertionError("no timeout")
    except subprocess.TimeoutExpired:
        end_group(proc)
    assert gone_soon(int(pids.read_text())) and proc.returncode == -9


def test_a_worker_leaves_no_process_after_its_point(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITE)
    pids = tmp_path / "pids"
    from dlperf import registry

    monkeypatch.setitem(registry.FRAMEWORK_MODES, "fake", ("eager",))
    env = {"LEAVE_CHILD": str(pids), "DLPERF_FAKE_FRAMEWORK": "1",
           "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    cfg = make_run_config(model="fcn5_tiny", batch_size=2, framework="fake", timeout_s=60)
    r = run_in_subprocess(cfg, env=env)
    status = r["status"] if isinstance(r, dict) else r.identity.status
    assert status == "ok", r
    left = [int(x) for x in pids.read_text().split()]
    assert left and all(gone_soon(p) for p in left), left
