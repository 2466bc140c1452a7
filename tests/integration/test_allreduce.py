"""All-reduce benchmark (nccl-tests style): bandwidth arithmetic and a 2-process gloo run."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_here import dlperf_here
from dlperf.comm.allreduce import algbw, busbw, format_table, message_sizes, parse_size


def test_algbw_busbw_hand_computed():
    # 1 GB (1e9 bytes) in 10 ms on 4 ranks: algbw 100 GB/s, busbw 100 * 2 * 3 / 4 = 150 GB/s.
    assert algbw(1e9, 0.010) == pytest.approx(100e9)
    assert busbw(1e9, 0.010, 4) == pytest.approx(150e9)
    # 2 ranks: 2 (n - 1) / n = 1, busbw == algbw; 8 ranks: factor 1.75; 1 rank: nothing moves.
    assert busbw(1 << 20, 1e-4, 2) == pytest.approx(algbw(1 << 20, 1e-4))
    assert busbw(8e9, 0.1, 8) == pytest.approx(80e9 * 1.75)
    assert busbw(1e9, 1.0, 1) == 0.0
    with pytest.raises(ValueError):
        algbw(1e9, 0.0)
    with pytest.raises(ValueError):
        busbw(1e9, 1.0, 0)


def test_message_sizes_and_parse_size():
    assert message_sizes(8, 64) == [8, 16, 32, 64]
    assert message_sizes(8, 100) == [8, 16, 32, 64]
    assert message_sizes(8, 8) == [8]
    assert message_sizes(1, 1000, factor=10) == [1, 10, 100, 1000]
    s = message_sizes()
    assert s[0] == 8 and s[-1] == 1 << 30 and len(s) == 28
    for bad in [(0, 8, 2), (16, 8, 2), (8, 64, 1)]:
        with pytest.raises(ValueError):
            message_sizes(*bad)
    assert parse_size("1M") == 1 << 20 and parse_size("64K") == 65536
    assert parse_size("1G") == 1 << 30 and parse_size("8") == 8
    with pytest.raises(ValueError):
        parse_size("lots")


def test_format_table_columns():
    row = {"size_bytes": 1 << 20, "count": 1 << 18, "dtype": "float32", "nranks": 2,
           "time_s": 1e-5, "algbw_GBps": 104.86, "busbw_GBps": 104.86, "wrong": 0}
    text = format_table([row])
    assert "busbw" in text and "#wrong" in text
    assert "1048576" in text and "10.00" in text and "104.86" in text


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_two_gloo_processes_end_to_end(tmp_path):
    out = tmp_path / "allreduce.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1",
           "GLOO_SOCKET_IFNAME": "lo", "CUDA_VISIBLE_DEVICES": ""}
    r = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
         "--master-addr", "127.0.0.1", "--master-port", str(_free_port()),
         "-m", "dlperf.comm.allreduce", "--max-bytes", "65536", "--iters", "5", "--warmup", "2",
         "--json", str(out)],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "busbw" in r.stdout and "#wrong" in r.stdout
    doc = json.loads(out.read_text())
    assert doc["backend"] == "gloo" and doc["nranks"] == 2
    assert "env" in doc and "hostname" in doc["env"] and doc["framework"]["torch"]
    rows = doc["rows"]
    assert [row["size_bytes"] for row in rows] == [8 << i for i in range(14)]  # 8 .. 65536
    for row in rows:
        assert row["correct"] is True and row["wrong"] == 0
        assert row["nranks"] == 2 and row["dtype"] == "float32"
        assert row["count"] == row["size_bytes"] // 4
        assert len(row["time_s_per_rank"]) == 2
        assert row["time_s"] == max(row["time_s_per_rank"]) > 0
        assert row["algbw_GBps"] == pytest.approx(row["size_bytes"] / row["time_s"] / 1e9)
        assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"])  # 2 (n - 1) / n = 1


def test_cli_allreduce_two_gloo_processes(tmp_path):
    out = tmp_path / "ar.json"
    db = tmp_path / "r.db"
    r = subprocess.run([sys.executable, "-m", "dlperf", "allreduce", "--nproc", "2", "--max-bytes",
                        "1K", "--iters", "3", "--warmup", "1", "--json", str(out), "--db", str(db)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert [x["size_bytes"] for x in rows] == [8 * 2**i for i in range(8)]
    assert all(x["correct"] for x in rows)
    # stored like other results, and shown by dlperf results --compare allreduce (the
    # commands that read the files or refuse their arguments run in this process: cli_here)
    shown = dlperf_here("results", "--db", str(db), "--compare", "allreduce", "-f", "json")
    assert shown.returncode == 0, shown.stderr
    stored = json.loads(shown.stdout)
    assert [x["size_bytes"] for x in stored] == [x["size_bytes"] for x in rows]
    assert [x["time_s"] for x in stored] == [x["time_s"] for x in rows]
    plain = dlperf_here("results", "--db", str(db))
    assert plain.returncode == 0 and "--compare allreduce" in " ".join(plain.stderr.split())
    rep = dlperf_here("report", "--db", str(db), "-o", str(tmp_path / "rep"))
    assert rep.returncode == 0, rep.stderr
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## All-reduce" in md and "No environment information" not in md
    again = dlperf_here("allreduce", "--from-json", str(out), "--db", str(db))
    assert again.returncode == 0 and "nothing stored twice" in again.stderr
    bad = tmp_path / "norows.json"
    bad.write_text('{"rows": []}')
    refused = dlperf_here("allreduce", "--from-json", str(bad), "--db", str(db))
    assert refused.returncode == 2 and "norows.json" in refused.stderr
    bad = dlperf_here("allreduce", "--max-bytes", "lots")
    assert bad.returncode == 2 and "--max-bytes" in bad.stderr
    for lo, hi in (("2K", "1K"), ("0", "8")):  # refused before torchrun starts any rank
        # (a process: a rank torchrun started would write to its stderr, not to cli_here's)
        bad = subprocess.run([sys.executable, "-m", "dlperf", "allreduce", "--min-bytes", lo,
                              "--max-bytes", hi], capture_output=True, text=True, timeout=60)
        assert bad.returncode == 2 and f"--min-bytes {lo} --max-bytes {hi}" in bad.stderr
        assert "Traceback" not in bad.stderr and "torch.distributed" not in bad.stderr


@pytest.mark.timeout(150)
@pytest.mark.parametrize("how", ["sigterm", "timeout"])
def test_allreduce_stopped_stops_its_ranks(tmp_path, how):
    """SIGTERM to `dlperf allreduce`, or its --timeout, ends its ranks too: torchrun starts
    each rank in a session of its own, so killing the launcher's group left them running (an
    orphan with --iters 10^7 at 100% CPU)."""
    pytest.importorskip("torch")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    limit = "120" if how == "sigterm" else "25"
    p = subprocess.Popen([sys.executable, "-m", "dlperf", "allreduce", "--nproc", "1",
                          "--max-bytes", "8", "--iters", str(10**7), "--timeout", limit],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        ranks: list[int] = []
        while time.monotonic() < deadline and not ranks:
            time.sleep(0.5)
            ranks = _ranks_of(p.pid)
        assert ranks, "no rank started"
        if how == "sigterm":
            time.sleep(1.0)
            p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=60)
        if how == "sigterm":
            assert p.returncode == 143 and "terminated" in out
        else:
            assert p.returncode == 2 and "ran past --timeout" in out
        time.sleep(0.5)
        alive = [r for r in ranks if _alive(r)]
        assert not alive, f"ranks still running: {alive}"
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        for r in _ranks_of(p.pid):
            os.kill(r, signal.SIGKILL)


def _ranks_of(pid: int) -> list[int]:
    """The ranks of this test's run: processes running dlperf.comm.allreduce itself (not
    torchrun, whose command line names it too) with its --iters; torchrun starts each in a
    session of its own."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().split(b"\0")
            env_sid = os.getsid(int(d.name))
        except OSError:
            continue
        if (b"dlperf.comm.allreduce" in cmd and b"10000000" in cmd and env_sid != pid
                and b"torch.distributed.run" not in cmd):
            out.append(int(d.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return False
    return state != "Z"
