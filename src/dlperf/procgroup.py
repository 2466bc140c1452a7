"""A child process started in a session of its own ends with everything it started.

dlperf starts each worker (and each launcher of ranks, each child that makes a ``file:`` model's
spec) with ``start_new_session=True``: the child leads a new process group, and every process
it forks stays in that group unless it makes a session of its own. When the child has exited,
what it left behind (a ``file:`` model that forks, a data loader's workers that did not stop:
3 such processes outlived ``dlperf`` in the attack of issue 40) must not outlive its point.

:func:`wait_group` waits for the child *without reaping it* (``waitid(..., WNOWAIT)``): while
the exited child is a zombie, its process id, which is the group's id, cannot be given to
another process, so the ``SIGKILL`` sent to the group afterwards reaches only what the child
left; then the child is reaped. :func:`end_group` kills the group of a child still running
(a timeout, Ctrl-C) and reaps it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

__all__ = ["wait_group", "end_group", "end_tree", "descendants", "kill_group"]


def kill_group(pgid: int) -> None:
    """``SIGKILL`` to process group ``pgid``; nothing when it has no process left."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _exited(pid: int) -> bool:
    """Whether child ``pid`` has exited, leaving it unreaped (a zombie)."""
    flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
    try:
        return os.waitid(os.P_PID, pid, flags) is not None
    except ChildProcessError:  # reaped already (by Popen)
        return True


def wait_group(proc: subprocess.Popen, timeout_s: float | None = None) -> int:
    """Wait for ``proc`` (a session leader) to exit, then kill what is left of its process
    group, then reap it; its exit code (negative: the signal that ended it).

    Raises:
        subprocess.TimeoutExpired: ``proc`` still runs after ``timeout_s`` (it and its group
            are left running: the caller stops them, :func:`end_group`).
    """
    if not hasattr(os, "waitid"):  # no waitid (not Linux/BSD/macOS): reap, then the group
        rc = proc.wait(timeout=timeout_s)
        kill_group(proc.pid)
        return rc
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    delay = 0.001
    while not _exited(proc.pid):
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise subprocess.TimeoutExpired(proc.args, timeout_s or 0.0)
        time.sleep(min(delay, 0.05) if left is None else max(0.0, min(delay, 0.05, left)))
        delay *= 2
    kill_group(proc.pid)
    return proc.wait()


def end_group(proc: subprocess.Popen) -> None:
    """Kill ``proc`` (a session leader) and its whole process group now, and reap it."""
    kill_group(proc.pid)
    proc.wait()


def descendants(pid: int) -> list[int]:
    """The processes ``pid`` started, and theirs, found by their parent in ``/proc`` (Linux;
    ``[]`` elsewhere): a process that made a session of its own (torchrun's ranks do) is not
    in its parent's group, so killing the group misses it."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode("latin-1")
            ppid = int(stat.rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out.append(c)
                todo.append(c)
    return out


def end_tree(proc: subprocess.Popen) -> None:
    """Kill ``proc`` (a session leader), its group, and every process it started, also those
    in sessions of their own (:func:`descendants`), then reap it. The group is stopped first
    (``SIGSTOP``), so no process is started between finding the processes and killing them;
    a rank left running after its launcher was killed ran on (at 100% CPU) as an orphan."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGSTOP)
    tree = descendants(proc.pid)
    for pid in tree:  # stop them too, then kill them and what they lead
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGSTOP)
    tree = list(dict.fromkeys(tree + [d for pid in tree for d in descendants(pid)]))
    kill_group(proc.pid)
    for pid in tree:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            if os.getpgid(pid) == pid:
                kill_group(pid)
    proc.wait()
