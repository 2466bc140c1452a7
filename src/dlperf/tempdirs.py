"""dlperf's temporary folders: owned, and reclaimed once their owner is gone (issue 23: a
sweep killed with SIGKILL left its worker folder, ``dlperf-XXXX``, in the temporary folder:
7 of them in the reliability attack, benchmarks/reliability.py).

Each folder made with :func:`owned_tempdir` holds a small file :data:`OWNER_FILE` naming the
process that made it (process id, its start time, the host). The folder goes when its block
ends, also on Ctrl-C and on SIGTERM (which ``dlperf run``/``sweep`` turn into an interrupt,
:func:`dlperf.cli.common.terminated_as_interrupt`); only SIGKILL (or a power cut) can leave it.
:func:`reclaim_stale`, called as every ``run`` and ``sweep`` starts, removes the folders whose
owner is gone: no process with that id on this host, or one that started at another time (the
id was reused). A folder of another user, of another host, of a live process or without an
owner file (an older dlperf's, or not dlperf's) is left alone, except an *empty* one (nothing
in it, or only an owner file that is empty: a kill between making the folder and writing its
owner file) whose last change is older than :data:`EMPTY_GRACE_S`: it holds nothing of anyone's.
The owner file is written atomically (:func:`dlperf.outputs.atomic_write`).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

from dlperf.outputs import atomic_write

__all__ = ["OWNER_FILE", "PREFIX", "make_owned", "owned_tempdir", "reclaim_stale"]

#: Every dlperf temporary folder's name starts so (``dlperf-``, ``dlperf-dist-``, ...).
PREFIX = "dlperf-"
#: The file in an owned folder naming its owner: ``{"pid", "started", "host"}``.
OWNER_FILE = ".dlperf-owner.json"
#: An empty ``dlperf-*`` folder older than this (s) is reclaimed without an owner file (its
#: maker writes the owner file microseconds after making it, or was killed in between).
EMPTY_GRACE_S = 60.0
#: Start times of one process read at two moments agree within this (s; psutil's
#: ``create_time`` is derived from boot time and clock ticks, exact to 1/100 s on Linux).
START_TOLERANCE_S = 1.0


def _started(pid: int) -> float | None:
    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.Error, OSError):
        return None


def make_owned(prefix: str = PREFIX) -> Path:
    """A new temporary folder (``tempfile.mkdtemp(prefix=prefix)``, under ``$TMPDIR``) that
    names this process as its owner (:data:`OWNER_FILE`); the caller removes it. Put what a
    tool writes as a tree (a profiler's trace) in a subfolder, so that the owner file is not
    read as one of its files.

    Raises:
        ValueError: ``prefix`` does not start with :data:`PREFIX` (:func:`reclaim_stale` would
            never find the folder).
    """
    if not prefix.startswith(PREFIX):
        raise ValueError(f"temporary folder prefix {prefix!r} must start with {PREFIX!r}")
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    pid = os.getpid()
    atomic_write(tmp / OWNER_FILE, json.dumps(
        {"pid": pid, "started": _started(pid), "host": socket.gethostname()}))
    return tmp


@contextmanager
def owned_tempdir(prefix: str = PREFIX) -> Iterator[str]:
    """:func:`make_owned` as a block: the folder (a str) is removed when the block ends.

    Raises:
        ValueError: as :func:`make_owned`.
    """
    tmp = make_owned(prefix)
    try:
        yield str(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _owner_gone(info: dict) -> bool:
    pid, started = info.get("pid"), info.get("started")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False  # not an owner file this module wrote: leave the folder alone
    now = _started(pid)
    if now is None:
        return not psutil.pid_exists(pid)  # gone (or, if it exists, not readable: keep)
    return isinstance(started, (int, float)) and abs(now - started) > START_TOLERANCE_S


def _empty_and_old(d: Path, now: float) -> bool:
    """``d`` holds nothing but maybe an empty owner file (or that file's temporary), and
    nothing in it changed for :data:`EMPTY_GRACE_S`."""
    try:
        names = os.listdir(d)
        if any(not (n == OWNER_FILE or n.startswith(f".{OWNER_FILE}.")) for n in names):
            return False
        if any((d / n).stat().st_size > 0 for n in names if n == OWNER_FILE):
            return False
        return now - d.stat().st_mtime > EMPTY_GRACE_S
    except OSError:
        return False


def reclaim_stale(root: str | Path | None = None) -> list[Path]:
    """Remove the owned temporary folders under ``root`` (default: ``tempfile.gettempdir()``)
    whose owner is gone (module docstring); returns those removed. Never raises for a folder
    it cannot read or remove (it is skipped)."""
    base = Path(root) if root is not None else Path(tempfile.gettempdir())
    host, uid = socket.gethostname(), os.getuid()
    removed = []
    try:
        folders = sorted(base.glob(f"{PREFIX}*"))
    except OSError:
        return []
    now = time.time()
    for d in folders:
        try:
            if not d.is_dir() or d.is_symlink() or d.stat().st_uid != uid:
                continue
            if _empty_and_old(d, now):
                shutil.rmtree(d, ignore_errors=True)
                if not d.exists():
                    removed.append(d)
                continue
            info = json.loads((d / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(info, dict) or info.get("host") != host or not _owner_gone(info):
            continue
        shutil.rmtree(d, ignore_errors=True)
        if not d.exists():
            removed.append(d)
    return removed
