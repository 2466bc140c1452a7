"""dlperf's temporary folders (issue 23: a sweep killed with SIGKILL left its folder behind):
removed on SIGTERM and Ctrl-C, reclaimed by the next run or sweep once their owner is gone,
left alone while it lives."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlperf.tempdirs import OWNER_FILE, owned_tempdir, reclaim_stale

HOLD = """
import os, signal, sys, time
# as in a terminal: a shell's background job starts with SIGINT ignored, and Python then keeps
# it ignored (no KeyboardInterrupt)
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path.insert(0, {src!r})
from dlperf.cli.common import terminated_as_interrupt
from dlperf.tempdirs import owned_tempdir
try:
    with terminated_as_interrupt(), owned_tempdir("dlperf-") as tmp:
        print(tmp, flush=True)
        time.sleep(60)
except KeyboardInterrupt:
    sys.exit(3)
"""
SRC = str(Path(__file__).resolve().parents[2] / "src")


def _holder(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    p = subprocess.Popen([sys.executable, "-c", HOLD.format(src=SRC)], stdout=subprocess.PIPE,
                         text=True, env={**os.environ, "TMPDIR": str(tmp_path)})
    line = p.stdout.readline().strip() if p.stdout else ""
    assert line, "the holder did not start"
    return p, Path(line)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_and_sigint_remove_the_folder(tmp_path, sig):
    p, d = _holder(tmp_path)
    assert (d / OWNER_FILE).is_file()
    p.send_signal(sig)
    assert p.wait(timeout=30) == 3
    assert not d.exists() and list(tmp_path.iterdir()) == []


def test_a_killed_owners_folder_is_reclaimed_and_a_live_ones_kept(tmp_path):
    live, d_live = _holder(tmp_path)
    dead, d_dead = _holder(tmp_path)
    try:
        dead.send_signal(signal.SIGKILL)
        dead.wait(timeout=30)
        assert d_dead.is_dir()  # SIGKILL: nothing could clean up
        assert reclaim_stale(tmp_path) == [d_dead]
        assert not d_dead.exists() and d_live.is_dir()
        assert reclaim_stale(tmp_path) == []
    finally:
        live.kill()
        live.wait(timeout=30)


def test_a_reused_process_id_does_not_keep_a_folder(tmp_path):
    """The owner file names this process's id but another start time: the id was reused."""
    d = tmp_path / "dlperf-reused"
    d.mkdir()
    import socket

    (d / OWNER_FILE).write_text(json.dumps({"pid": os.getpid(), "started": time.time() - 1e6,
                                            "host": socket.gethostname()}))
    assert reclaim_stale(tmp_path) == [d]


def test_folders_it_cannot_vouch_for_are_left_alone(tmp_path):
    import socket

    foreign = tmp_path / "dlperf-no-owner"  # an older dlperf's, or not dlperf's
    foreign.mkdir()
    other_host = tmp_path / "dlperf-other-host"
    other_host.mkdir()
    (other_host / OWNER_FILE).write_text(json.dumps({"pid": 2 ** 22 + 7, "started": 1.0,
                                                     "host": "elsewhere.example"}))
    garbled = tmp_path / "dlperf-garbled"
    garbled.mkdir()
    (garbled / OWNER_FILE).write_text("{not json")
    not_ours = tmp_path / "other-tool-x"
    not_ours.mkdir()
    (not_ours / OWNER_FILE).write_text(json.dumps({"pid": 2 ** 22 + 7, "started": 1.0,
                                                   "host": socket.gethostname()}))
    assert reclaim_stale(tmp_path) == []
    assert all(p.is_dir() for p in (foreign, other_host, garbled, not_ours))


def test_the_folder_goes_when_its_block_ends_and_prefixes_are_checked(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    with owned_tempdir("dlperf-x-") as tmp:
        owner = json.loads((Path(tmp) / OWNER_FILE).read_text())
        assert owner["pid"] == os.getpid() and Path(tmp).parent == tmp_path
    assert not Path(tmp).exists()
    with pytest.raises(ValueError, match="must start with 'dlperf-'"):
        with owned_tempdir("x-"):
            pass


def test_the_next_run_reclaims_a_killed_runs_folder(tmp_path):
    """End to end: a folder left by a SIGKILLed owner is removed, with a note, when the next
    `dlperf run` starts (the fake framework: a worker in a fraction of a second)."""
    p, d = _holder(tmp_path)
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)
    r = subprocess.run([sys.executable, "-m", "dlperf", "run", "--framework", "fake", "--model",
                        "fcn5_tiny", "-b", "8", "--min-time", "0.05", "--no-ceilings", "--db",
                        str(tmp_path / "r.db")], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "COLUMNS": "200", "DLPERF_FAKE_FRAMEWORK": "1",
                            "TMPDIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    assert "removed 1 temporary folder(s)" in " ".join(r.stderr.split()), r.stderr
    assert not d.exists()
    assert sorted(x.name for x in tmp_path.iterdir()) == ["r.db"]


def test_every_dlperf_temporary_folder_is_an_owned_one():
    """A folder made with tempfile directly is not reclaimed after a SIGKILL: every
    ``dlperf-`` folder in the source (the rank's, trace and framework-version folders
    included) goes through dlperf.tempdirs."""
    import re

    src = Path(__file__).resolve().parents[2] / "src" / "dlperf"
    direct = re.compile(r"(mkdtemp|TemporaryDirectory)\([^)]*dlperf-")
    found = [f"{p.relative_to(src)}:{i}" for p in src.rglob("*.py") if p.name != "tempdirs.py"
             for i, line in enumerate(p.read_text().splitlines(), 1) if direct.search(line)]
    assert found == []
    made = re.compile(r"(owned_tempdir|make_owned)\(\"(dlperf-[a-z-]*)\"\)")
    prefixes = {m.group(2) for p in src.rglob("*.py") for m in made.finditer(p.read_text())}
    assert {"dlperf-rank-", "dlperf-trace-", "dlperf-", "dlperf-spec-"} <= prefixes, prefixes


def test_an_empty_folder_left_by_a_kill_is_reclaimed_after_the_grace(tmp_path):
    """A kill between mkdtemp and the owner file left an empty dlperf-* folder that no run ever
    reclaimed; it goes once older than EMPTY_GRACE_S; a fresh one, or one with content, stays."""
    from dlperf.tempdirs import EMPTY_GRACE_S, OWNER_FILE, reclaim_stale

    old, fresh, partial, full = (tmp_path / f"dlperf-{n}" for n in ("old", "new", "part",
                                                                      "full"))
    for d in (old, fresh, partial, full):
        d.mkdir()
    (partial / OWNER_FILE).write_text("")
    (full / "trace.json").write_text("{}")
    past = time.time() - EMPTY_GRACE_S - 5
    for d in (old, partial, full):
        os.utime(d, (past, past))
    assert sorted(p.name for p in reclaim_stale(tmp_path)) == ["dlperf-old", "dlperf-part"]
    assert fresh.is_dir() and full.is_dir()
