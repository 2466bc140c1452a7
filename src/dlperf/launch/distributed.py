"""Launch one data-parallel configuration on this node and gather its result.

How the processes start is the framework's registry entry's ``launcher``
(:class:`dlperf.registry.FrameworkInfo`; this module imports no adapter). PyTorch's (one process
per device) is torchrun::

    python -m torch.distributed.run --nproc-per-node P --max-restarts 0 \\
        (--standalone | --nnodes M --node-rank K --rdzv-backend c10d --rdzv-endpoint H:PORT
         --rdzv-id dlperf-<run key>) -m dlperf.launch.rank CONFIG.json OUT_DIR

JAX and TensorFlow multi-process runs go through :mod:`dlperf.launch.spawn` (the same
environment and failure behaviour, with ``DLPERF_COORDINATOR`` for ``jax.distributed``; a
framework's ``spawn_args`` and ``process_env`` hooks add what it needs, e.g. TensorFlow's
``TF_CONFIG`` for ``MultiWorkerMirroredStrategy``, see
:mod:`dlperf.frameworks.tensorflow.cluster`); a run that needs only one process on one node (JAX
sharded jit or TensorFlow MirroredStrategy over local devices) runs in an ordinary worker
process (:mod:`dlperf.launch.process`).

The launcher only starts processes and gathers (docs/architecture.md habit 2): every rank runs
:func:`dlperf.worker.run_record` and writes ``rank<R>.json`` holding the merged record of all
ranks, read back here as a :class:`~dlperf.results.schema.RunRecord`; the lowest rank's record
of this node is the result. When the run fails (a rank's exception, crash, OOM, or the
timeout), the ranks' own records name the cause, and the result is a failure record
(:func:`~dlperf.results.schema.failure_record`) with each rank's outcome (``ranks``), the exit
status and the tail of the launcher's output (``worker``).
On a timeout or Ctrl-C every process of the run is stopped: SIGTERM to the launcher's process
group (torchrun forwards it to its workers), SIGKILL after a grace period, then SIGKILL to any
rank that is still alive (found by the pid files the ranks write), so no orphan remains.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from dlperf.config import RunConfig
from dlperf.errors import ConfigError
from dlperf.launch.process import (
    OUTPUT_KEPT,
    breakdown_apart,
    exited,
    last_error_line,
    run_breakdown_apart,
    run_in_subprocess,
)
from dlperf.procgroup import kill_group, wait_group
from dlperf.registry import LAUNCHERS, launch_info, load_hook
from dlperf.results.parts import RankOutcome, WorkerInfo
from dlperf.results.schema import RunRecord, failure_record
from dlperf.tempdirs import owned_tempdir

__all__ = ["run_distributed", "launch_command", "free_port", "run_point", "FAILURE_ORDER",
           "NVLS_OFF_ENV", "NCCL_NVLS_CHOICES", "set_nccl_nvls"]

STDERR_TAIL = 4000
GRACE_S = 5.0
#: Which rank status explains a failed run best: the first cause, not its consequences (when
#: one rank runs out of memory the others fail in a collective, or are killed).
FAILURE_ORDER = ("oom", "nan_loss", "error", "unavailable", "crash", "timeout")
#: What ``--nccl-nvls off`` sets for every process dlperf starts (:func:`set_nccl_nvls`):
#: NCCL's NVLink SHARP (NVLS) algorithms and the multicast objects of PyTorch's symmetric
#: memory and NVSHMEM off. Left out (NCCL's default), NCCL uses NVLS where the system has it.
NVLS_OFF_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                "NVSHMEM_DISABLE_NVLS": "1"}
#: The values of ``--nccl-nvls``.
NCCL_NVLS_CHOICES = ("default", "off")


def set_nccl_nvls(value: str) -> None:
    """``--nccl-nvls``: ``default`` changes nothing (NCCL decides, and whatever the user's
    environment sets stays); ``off`` sets :data:`NVLS_OFF_ENV` in this process's environment,
    so every worker, rank and all-reduce run it starts inherits it, and each result records it
    (``env.env``, :data:`dlperf.env.RELEVANT_ENV`).

    Raises:
        ConfigError: another value.
    """
    if value not in NCCL_NVLS_CHOICES:
        from dlperf.errors import unknown_choice

        raise unknown_choice("nccl-nvls", value, NCCL_NVLS_CHOICES)
    if value == "off":
        os.environ.update(NVLS_OFF_ENV)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` now (the OS's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def launch_command(cfg: RunConfig, config_path: Path, out_dir: Path, *, node_rank: int = 0,
                   endpoint: str | None = None) -> list[str]:
    """The command that starts this node's processes of ``cfg`` (see the module docstring):
    torchrun or :mod:`dlperf.launch.spawn`, as the framework's registry entry says
    (``FrameworkInfo.launcher``), with its ``spawn_args`` hook's options after ``--``.

    ``endpoint`` (``HOST:PORT``) is the c10d rendezvous / coordinator address; needed when
    ``cfg.parallel.nnodes > 1``, chosen on 127.0.0.1 otherwise.
    """
    py = sys.executable
    P = cfg.processes_per_node
    info = launch_info(cfg.runtime.framework)
    if info.launcher == "torchrun":
        cmd = [py, "-m", "torch.distributed.run", "--nproc-per-node", str(P),
               "--max-restarts", "0", "--monitor-interval", "0.2"]
        if cfg.parallel.nnodes == 1 and endpoint is None:
            cmd.append("--standalone")
        else:
            cmd += ["--nnodes", str(cfg.parallel.nnodes), "--node-rank", str(node_rank),
                    "--rdzv-backend", "c10d", "--rdzv-endpoint",
                    endpoint or f"127.0.0.1:{free_port()}", "--rdzv-id", f"dlperf-{cfg.run_key()}"]
        return cmd + ["-m", "dlperf.launch.rank", str(config_path), str(out_dir)]
    if info.launcher != "spawn":
        raise ValueError(f"framework {cfg.runtime.framework!r}: unknown launcher {info.launcher!r} in "
                         f"its registry entry; use one of {', '.join(LAUNCHERS)}")
    cmd = [py, "-m", "dlperf.launch.spawn", "--nproc", str(P), "--nnodes", str(cfg.parallel.nnodes),
           "--node-rank", str(node_rank), "--coordinator", endpoint or f"127.0.0.1:{free_port()}",
           "--framework", cfg.runtime.framework, str(config_path), str(out_dir)]
    spawn_args = load_hook(info.spawn_args)
    return cmd + (["--", *spawn_args(cfg)] if spawn_args is not None else [])


def run_point(cfg: RunConfig, *, node_rank: int = 0, endpoint: str | None = None,
              env: dict[str, str] | None = None) -> RunRecord:
    """Run ``cfg`` the way it needs (one worker process, or a distributed launch) and return
    its record."""
    if cfg.processes_per_node * cfg.parallel.nnodes == 1:
        why = breakdown_apart(cfg)
        if why:
            return run_breakdown_apart(cfg, why, env=env)
        return run_in_subprocess(cfg, env=env)
    return run_distributed(cfg, node_rank=node_rank, endpoint=endpoint, env=env)


def run_distributed(cfg: RunConfig, *, node_rank: int = 0, endpoint: str | None = None,
                    env: dict[str, str] | None = None,
                    timeout_s: float | None = None) -> RunRecord:
    """Launch this node's processes of ``cfg``, wait, and return the run's record.

    Args:
        cfg: a data-parallel configuration.
        node_rank: this node's index (0 .. nnodes - 1).
        endpoint: ``HOST:PORT`` of the rendezvous (c10d) or coordinator; required for
            ``nnodes > 1``.
        env: extra environment for the processes.
        timeout_s: wall-clock limit of the whole run (default ``cfg.measure.timeout_s``).

    Returns:
        The merged record (every rank's samples), or a failure record (see module docstring).
    """
    timeout_s = cfg.measure.timeout_s if timeout_s is None else timeout_s
    with owned_tempdir("dlperf-dist-") as tmp:
        out = Path(tmp)
        cpath = out / "config.json"
        cpath.write_text(cfg.model_dump_json())
        cmd = launch_command(cfg, cpath, out, node_rank=node_rank, endpoint=endpoint)
        penv = {**os.environ, "PYTHONUNBUFFERED": "1", "DLPERF_NODE_RANK": str(node_rank),
                "DLPERF_LAUNCHER_PID": str(os.getpid())}
        if cfg.parallel.nnodes == 1 and "GLOO_SOCKET_IFNAME" not in os.environ:
            penv["GLOO_SOCKET_IFNAME"] = "lo"  # one node: gloo over loopback
        if cfg.hardware.threads is None and "OMP_NUM_THREADS" not in os.environ:
            # torchrun's default for several processes per node, made explicit for all launchers
            penv["OMP_NUM_THREADS"] = "1"
        penv.update(env or {})
        logf = out / "launcher.log"
        timed_out = False
        with open(logf, "wb") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=penv,
                                    start_new_session=True)
            try:
                rc: int | None = wait_group(proc, timeout_s)
            except subprocess.TimeoutExpired:
                timed_out, rc = True, None
                _stop(proc, out)
            except BaseException:  # Ctrl-C: leave nothing running
                _stop(proc, out)
                raise
            finally:
                _kill_leftover_ranks(out)
        return _collect(cfg, out, rc, timed_out, timeout_s, cmd)


def _stop(proc: subprocess.Popen, out: Path) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _kill_leftover_ranks(out: Path) -> None:
    """SIGKILL every rank of this run still alive (torchrun starts ranks in sessions of their
    own, so killing its process group does not reach them). A pid counts only if its command
    line names this run's folder (no other process that reused the pid is touched)."""
    deadline = time.monotonic() + GRACE_S
    for pf in sorted(out.glob("rank*.pid")):
        try:
            pid = int(pf.read_text())
        except (OSError, ValueError):
            continue
        while time.monotonic() < deadline and _is_rank_of(pid, out):
            time.sleep(0.05)  # the rank's parent watch makes it exit by itself
        if _is_rank_of(pid, out):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _kill_rank_group(pid, out)


def _kill_rank_group(pid: int, out: Path) -> None:
    """SIGKILL what a rank (a session leader: its group's id is its pid) forked and left: only
    when a process of that group is still one of this run's (a fork keeps the rank's command
    line), so the group's id cannot have passed to another process."""
    import psutil

    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pid and _is_rank_of(p.pid, out):
                kill_group(pid)
                return
        except (OSError, psutil.Error):
            continue


def _is_rank_of(pid: int, out: Path) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    if stat.rsplit(")", 1)[-1].split()[0] == "Z":  # a zombie is dead already
        return False
    return str(out).encode() in cmdline


def _tail(path: Path) -> str:
    try:
        return path.read_bytes()[-STDERR_TAIL:].decode("utf-8", "replace")
    except OSError:
        return ""


def _failed_ranks(log: str) -> dict[int, int]:
    """{rank: exit code} of the failed ranks that torchrun's summary (``rank : R (local_rank:
    L)`` / ``exitcode : C``) or dlperf's spawner (``rank R exited with code C``) lists."""
    found = {int(r): int(c) for r, c in re.findall(
        r"rank\s*:\s*(\d+)\s*\(local_rank[^)]*\)\s*exitcode\s*:\s*(-?\d+)", log)}
    found.update({int(r): int(c) for r, c in re.findall(
        r"dlperf spawn: rank (\d+) exited with code (-?\d+)", log)})
    return found


def _rank_of(rec: RunRecord) -> int | None:
    """The rank that wrote ``rec`` (``worker.rank``), or None."""
    return rec.worker.rank if rec.worker is not None else None


def _read_ranks(out: Path) -> list[RunRecord]:
    """The records the ranks wrote (``rank<R>.json``) in rank order; a file that is not a
    record (cut short by a kill) is left out, as a rank that wrote none."""
    recs: list[RunRecord] = []
    for f in out.glob("rank*.json"):
        try:
            recs.append(RunRecord.from_dict(json.loads(f.read_text())))
        except (OSError, ValueError, ConfigError):
            continue
    return sorted(recs, key=lambda r: _rank_of(r) or 0)


def _collect(cfg: RunConfig, out: Path, rc: int | None, timed_out: bool, timeout_s: float,
             cmd: list[str]) -> RunRecord:
    results = _read_ranks(out)
    tail = _tail(out / "launcher.log")
    launcher = {"command": cmd, "returncode": rc, "timed_out": timed_out,
                "ranks_reported": [_rank_of(r) for r in results]}
    complete = [r for r in results if r.summary is not None]
    if complete:  # the measurement finished and was merged (status ok, or e.g. nan_loss)
        rec = complete[0]
        rec.worker = rec.worker or WorkerInfo()
        rec.worker.launcher = launcher
        return rec
    per_rank = [RankOutcome(rank=i if _rank_of(r) is None else _rank_of(r),
                            status=r.identity.status, error=(r.identity.error or "")[:2000])
                for i, r in enumerate(results)]
    failed = [p for p in per_rank if p.status != "ok"]
    cause = min(failed, key=lambda p: (FAILURE_ORDER.index(p.status)
                                       if p.status in FAILURE_ORDER else len(FAILURE_ORDER),
                                       not p.error), default=None)
    n_here = cfg.processes_per_node
    silent = n_here - len(results)
    if cause is not None and cause.status in FAILURE_ORDER[:4]:
        status = str(cause.status)
        msg = f"rank {cause.rank}: {cause.error}"
    elif timed_out:
        status = "timeout"
        msg = (f"data-parallel run exceeded its timeout of {timeout_s:g} s (a rank hung or is "
               "too slow); raise it (--timeout for dlperf run, timeout_s in a sweep file) and "
               "add --retry-failed to measure this point again, or lower the time budget")
    else:
        status = "crash"
        reported = {p.rank for p in per_rank}
        silent_ranks = {rk: c for rk, c in _failed_ranks(tail).items() if rk not in reported}
        if silent_ranks:
            parts = []
            for rk, code in sorted(silent_ranks.items()):
                err = exited(code)
                per_rank.append(RankOutcome(rank=rk, status="crash", error=err))
                parts.append(f"rank {rk} {err}")
            msg = "; ".join(parts)
            last = last_error_line(tail)
            if last:  # what the rank printed as it died (the whole tail: worker.stderr_tail)
                msg += f"; its output ends with: {last} ({OUTPUT_KEPT})"
        elif cause is not None and cause.error:
            # no rank died silently: a rank's own report (an exception it caught) names it
            msg = f"rank {cause.rank}: {cause.error}"
        else:
            why = f"launcher exited with code {rc}" if rc else "no rank wrote a result"
            msg = (f"{why}; {silent} of {n_here} ranks on this node wrote no result: "
                   f"{tail[-1500:]}")
    if cause is not None and status != cause.status:
        msg += f"; rank {cause.rank}: {cause.status}: {(cause.error or '')[:300]}"
    return failure_record(cfg, status, msg[:8000], ranks=per_rank,
                          worker=WorkerInfo(launcher=launcher, stderr_tail=tail))
