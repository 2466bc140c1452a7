"""What a failed data-parallel rank says on the console: its cause, not only "rank 1 exited
with code 1 and no result ... see the errors above" with the cause kept in the stored
worker.stderr_tail alone."""

from __future__ import annotations

from dlperf.config import make_run_config
from dlperf.launch.distributed import _collect
from dlperf.launch.process import last_error_line

TRACEBACK = """[rank1]: Traceback (most recent call last):
  File "model.py", line 9, in make_batch
    raise ValueError("rank 1 cannot make a batch")
ValueError: rank 1 cannot make a batch
dlperf spawn: rank 1 exited with code 1
"""


def test_the_last_exception_line_is_found_or_none():
    assert last_error_line(TRACEBACK) == "ValueError: rank 1 cannot make a batch"
    assert last_error_line("torch.OutOfMemoryError: CUDA out of memory\nbye\n") == \
        "torch.OutOfMemoryError: CUDA out of memory"
    assert last_error_line("dlperf spawn: rank 1 exited with code -9\n") is None
    assert last_error_line("") is None


def test_a_rank_that_died_without_a_result_names_its_error(tmp_path):
    (tmp_path / "launcher.log").write_text(TRACEBACK)
    cfg = make_run_config(model="fcn5_tiny", batch_size=8, device="cpu", nproc=2)
    r = _collect(cfg, tmp_path, rc=1, timed_out=False, timeout_s=60.0, cmd=["x"]).identity
    assert r.status == "crash"
    assert "rank 1 exited with code 1 and no result" in r.error
    assert "ends with: ValueError: rank 1 cannot make a batch" in r.error
    assert "worker.stderr_tail" in r.error
    (tmp_path / "launcher.log").write_text("dlperf spawn: rank 1 exited with code -9\n")
    rec = _collect(cfg, tmp_path, rc=1, timed_out=False, timeout_s=60.0, cmd=["x"])
    assert "SIGKILL" in rec.identity.error and "ends with" not in rec.identity.error
    assert [(o.rank, o.status) for o in rec.ranks] == [(1, "crash")]  # typed rank outcomes


def test_a_worker_crash_names_its_exception_not_a_log_line():
    """A SIGKILLed --timeline worker's cause is its exception, not a Kineto log line."""
    from dlperf.launch.process import crash_message

    kineto = "USDT:2026-12-03 17:23:17 SyncActivityProfilerHandler.cpp:52] profiler_start\n"
    msg = crash_message(-9, kineto)
    assert "killed by signal SIGKILL" in msg and "profiler_start" not in msg
    assert "worker.stderr_tail" in msg
    assert crash_message(1, TRACEBACK).endswith(
        "ValueError: rank 1 cannot make a batch (all of its output: worker.stderr_tail in "
        "--format json)")
    assert crash_message(3, "abort: bad state\n").endswith(": abort: bad state\n")
