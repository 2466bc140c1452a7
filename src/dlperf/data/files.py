"""Opening data files defensively: regular files only, sizes checked before reading.

A data path can name anything a file system holds. A FIFO (named pipe) blocks ``open`` until a
writer appears and a device node can stream without end, so the readers of dlperf.data open
through :func:`open_regular`, which never blocks and refuses what is not a regular file, and
check a file's size against a documented limit (:func:`check_size`) before reading it whole.
"""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

from dlperf.errors import DataError


def open_regular(path: str | os.PathLike, what: str = "data file") -> io.BufferedReader:
    """Open ``path`` for binary reading if it is a regular file (symbolic links followed).

    The file is opened with ``O_NONBLOCK`` (opening a FIFO then returns at once instead of
    waiting for a writer), checked with ``fstat`` and only then used.

    Raises:
        DataError: the file cannot be opened (missing, a broken link, no permission, a
            folder), or it is not a regular file (a FIFO, socket or device); the message names
            ``what`` and the path.
    """
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise DataError(f"cannot read {what} {p}: {e.strerror or e}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = ("a folder" if stat.S_ISDIR(mode) else "a FIFO (named pipe)"
                    if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
                    else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                    else "not a regular file")
            raise DataError(f"{what} {p} is {kind}, not a regular file; give the path of the "
                            f"file itself")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def check_size(path: str | os.PathLike, size: int, max_bytes: int, what: str,
               limit_name: str) -> None:
    """Refuse a file of ``size`` bytes over ``max_bytes`` (the limit named ``limit_name``).

    Raises:
        DataError: naming the file, its size, the limit and where it is set.
    """
    if size > max_bytes:
        raise DataError(f"{what} {path} is {size:,} bytes, more than the {max_bytes:,}-byte "
                        f"limit ({limit_name}); a file this size is not one of the data sets "
                        f"dlperf reads: check the path, or split the file")
