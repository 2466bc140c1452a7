"""Every file dlperf writes for a user goes through one door: it never replaces a file it did
not make for that purpose, and it writes atomically.

A flag that takes a path to write (``results -o``, ``compare -o``, ``report -o``, ``run
--emit-slurm``, ``sweep --slurm-array``, ``allreduce --json``, ...) names an *output kind*
(:data:`KINDS`: CSV, JSON, Markdown, HTML, PNG, a SLURM script). :func:`check_target` decides
whether the path may be written:

- a folder, or one of the results files the same command reads or writes (``protect``; the same
  file through a link counts), is refused;
- an existing **SQLite database** (a results file above all), or its rollback journal or
  write-ahead log, is never replaced, not even with ``--force``: dlperf never writes one
  through an output flag, and a results database holds measurements that cannot be made again;
- an existing file that is empty, or that is an earlier output of the same kind (its head
  recognised by :attr:`Kind.recognise`: the same CSV header, the same first JSON key, the same
  first Markdown line, dlperf's HTML generator tag, a PNG, dlperf's SLURM header) is replaced;
- any other existing file is refused unless ``force`` (``--force``), naming what it starts with.

:func:`write_output` then writes through :func:`atomic_write`: a temporary file with an
unpredictable name in the same folder (``tempfile.mkstemp``: created exclusively, so a link
planted at a guessable name is never followed), flushed to disk, then renamed over the target,
so a reader or a kill sees the old file or the new one, never half of one. A file replaced keeps
its permission bits. ``-``, ``/dev/stdout``, ``/dev/stderr`` and ``/dev/fd/N`` are written to
the process's own descriptor (:func:`own_descriptor`), never replaced by name. Another target
that is not a regular file (a device, a named pipe) is written in place; a named pipe only
once a process reads it (:func:`open_in_place`: a pipe no process reads within
:data:`PIPE_WAIT_S` is refused instead of waiting for ever).

:func:`format_for` makes the format follow the suffix (``-o out.csv`` writes CSV).

:func:`shown_path` is how a path (or any text taken from outside, such as a file name inside
a message) is printed to a terminal: its control characters escaped.

This module imports nothing of dlperf but its errors, so every package may use it.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from dlperf.errors import ConfigError

__all__ = ["Kind", "KINDS", "SQLITE_MAGIC", "check_target", "write_output", "atomic_write",
           "format_for", "is_sqlite", "sqlite_side_of", "same_file", "OutputRefused",
           "safe_filename", "shown_path", "open_in_place", "own_descriptor", "PIPE_WAIT_S",
           "WriteFailed", "stream_name"]

#: The first 16 bytes of every SQLite 3 database file (sqlite.org/fileformat.html, 1.3).
SQLITE_MAGIC = b"SQLite format 3\x00"
#: The first bytes of an SQLite rollback journal and of a write-ahead log (the two WAL magic
#: numbers, big- and little-endian checksums; sqlite.org/fileformat.html, 4.1): files that are
#: part of a database (a hot journal rolls it back to its last commit, a WAL holds commits not
#: yet in it).
SQLITE_SIDE_MAGIC = (b"\xd9\xd5\x05\xf9\x20\xa1\x63\xd7", b"\x37\x7f\x06\x82", b"\x37\x7f\x06\x83")
#: Suffixes SQLite appends to a database's name for its side files.
SQLITE_SIDE_SUFFIXES = ("-journal", "-wal", "-shm")
#: Bytes of an existing file read to recognise it.
HEAD_BYTES = 65536


class OutputRefused(ConfigError):
    """An output path that may not be written: a folder, a results file of the same command, a
    database, or a file that is not an earlier output of the same kind (without ``--force``)."""


class WriteFailed(OutputRefused, OSError):
    """A write that the system refused (a full device, a folder that takes no new file), its
    message naming what was being written: the target and, when the folder refused the
    temporary file, that folder; or "standard output". It is an :class:`OSError` too (``errno``,
    ``strerror`` and ``filename`` kept), so a caller that handles a failed write still does."""

    def __init__(self, cause: OSError, message: str, filename: str | None = None) -> None:
        OSError.__init__(self, cause.errno, cause.strerror or str(cause), filename)
        self.message = message

    def __str__(self) -> str:
        return self.message


#: errno values that mean the device written to has no room left.
_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
#: errno values that mean a folder or file may not be written by this user or at all.
_DENIED = {errno.EACCES, errno.EPERM, errno.EROFS}


def stream_name(fd: int) -> str:
    """How this process's descriptor ``fd`` is named in a message: "standard output",
    "standard error", else "file descriptor N"."""
    return {1: "standard output", 2: "standard error"}.get(fd, f"file descriptor {fd}")


def write_failed(cause: OSError, target: str | Path | int, *,
                 folder: str | Path | None = None) -> WriteFailed:
    """The :class:`WriteFailed` for ``cause`` raised while writing ``target`` (a path, or a
    descriptor of this process: 1 is standard output). ``folder``: the folder that refused
    the temporary file or the rename (:func:`atomic_write`), named with the target. The advice
    follows ``cause.errno``: a full device -> free space or write elsewhere; a denied folder
    -> a folder you can write; a reader gone (``EPIPE``) -> said so; else another path."""
    why = cause.strerror or str(cause)
    if isinstance(target, int):
        name = stream_name(target)
        if cause.errno in _FULL:
            advice = (f"free space on the device {name} goes to, or redirect it to a file "
                      "elsewhere")
        elif cause.errno == errno.EPIPE:
            advice = f"the command reading {name} stopped before dlperf finished writing"
        else:
            advice = f"redirect {name} elsewhere"
        return WriteFailed(cause, f"cannot write to {name}: {why}; {advice}", name)
    t = repr(os.fspath(target))  # repr escapes what a terminal would obey
    if folder is not None:
        f = repr(os.fspath(folder))
        advice = _path_advice(cause, "free space there, or give a path on another device",
                              "give a path in a folder you can write")
        return WriteFailed(cause, f"cannot write {t}: its folder {f} does not take a new file "
                                  f"({why}); {advice}", os.fspath(folder))
    advice = _path_advice(cause, "free space on its device, or give a path on another one",
                          "give a path you can write")
    return WriteFailed(cause, f"cannot write {t}: {why}; {advice}", os.fspath(target))


def _path_advice(cause: OSError, full: str, denied: str) -> str:
    """The fix a failed path write suggests: ``full`` for a full device, ``denied`` for a
    refused permission, else another path."""
    if cause.errno in _FULL:
        return full
    return denied if cause.errno in _DENIED else "give another path"


def shown_path(text: str | os.PathLike[str], *, lines: bool = False) -> str:
    """``text`` (a path, or a message holding paths) as printed to a terminal: every character
    that is not printable (``str.isprintable``: control characters such as ESC, CR and
    newline, DEL, Unicode format characters such as a right-to-left override, a file name's
    undecodable bytes) written as its Python escape (``\\x1b``, ``\\n``, ``\\u202e``,
    ``\\udcff``), as ``repr`` writes it, so a file name cannot move the cursor, recolour the
    terminal or start a line of its own. With ``lines``, newlines and tabs are kept: a message
    of several lines, whose paths were escaped where it was made."""
    s = os.fspath(text) if isinstance(text, os.PathLike) else str(text)
    if s.isprintable():
        return s
    keep = "\n\t" if lines else ""
    return "".join(c if c.isprintable() or c in keep else repr(c)[1:-1] for c in s)


#: How long writing to a named pipe waits for a process to read it (s) before refusing
#: (:func:`open_in_place`).
PIPE_WAIT_S = 5.0


#: Output names that stand for a descriptor this process already has: ``-`` and
#: ``/dev/stdout`` (1), ``/dev/stderr`` (2), ``/dev/fd/N`` and ``/proc/self/fd/N`` (N).
_OWN_FD = re.compile(r"/(?:dev|proc/self)/fd/(\d+)")


def own_descriptor(path: str | Path) -> int | None:
    """The descriptor an output name stands for (:data:`_OWN_FD`), written as it is, never
    opened by name: ``/dev/stdout`` is a link to ``/proc/self/fd/1``, and when standard output
    is a regular file, replacing that "file" atomically replaced the link in ``/dev`` itself.
    None for any other name."""
    s = os.fspath(path)
    if s in ("-", "/dev/stdout"):
        return 1
    if s == "/dev/stderr":
        return 2
    m = _OWN_FD.fullmatch(s)
    return int(m.group(1)) if m else None


def _write_descriptor(fd: int, raw: bytes) -> None:
    """``raw`` written whole to descriptor ``fd`` of this process: standard output and error
    through ``sys.stdout``/``sys.stderr`` (what a caller redirected them to, after what they
    buffered), another descriptor directly."""
    import sys

    stream = {1: sys.stdout, 2: sys.stderr}.get(fd)
    if stream is not None:
        buf = getattr(stream, "buffer", None)
        if buf is not None:
            stream.flush()
            buf.write(raw)
            buf.flush()
        else:
            stream.write(raw.decode("utf-8", "replace"))
            stream.flush()
        return
    view = memoryview(raw)
    while view:
        view = view[os.write(fd, view):]


def open_in_place(path: str | Path) -> int:
    """An existing file that is not a regular one (a device such as ``/dev/null`` or a
    terminal, a named pipe, ``/dev/stdout``) opened for writing in place; returns the file
    descriptor (blocking writes).

    A named pipe is opened without blocking (``O_NONBLOCK``): opening one that no process
    reads fails at once (``ENXIO``) where a plain open waits for a reader for ever (``-o
    fifo`` with no reader hung the command). It is tried again every 0.05 s for
    :data:`PIPE_WAIT_S`, so a reader started just after the command is still served; a
    pipe that already has a reader (``/dev/stdout`` piped into another command) opens at once.

    Raises:
        OutputRefused: a named pipe that no process read within :data:`PIPE_WAIT_S`.
        OSError: the file cannot be opened.
    """
    p = os.fspath(path)
    if not stat.S_ISFIFO(os.stat(p).st_mode):
        return os.open(p, os.O_WRONLY)
    deadline = time.monotonic() + PIPE_WAIT_S
    while True:
        try:
            fd = os.open(p, os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError as e:
            if e.errno != errno.ENXIO:
                raise
            if time.monotonic() >= deadline:
                raise OutputRefused(
                    f"{shown_path(p)} is a named pipe that no process reads (none opened it "
                    f"within {PIPE_WAIT_S:g} s): start its reader first (e.g. `cat "
                    f"{shown_path(p)} &`), or give a regular file") from None
            time.sleep(0.05)
    os.set_blocking(fd, True)  # the reader is there: write as to any pipe
    return fd


def same_file(a: str | Path, b: str | Path) -> bool:
    """``a`` and ``b`` name one file: the same path once links are followed, or two names
    (hard links) of one existing file."""
    pa, pb = Path(a), Path(b)
    try:
        if pa.resolve() == pb.resolve():
            return True
        return pa.exists() and pb.exists() and pa.samefile(pb)
    except (OSError, RuntimeError):  # a link loop, an unreadable folder
        return False


def _first_line(text: str) -> str:
    return text.lstrip("\ufeff").split("\n", 1)[0].rstrip("\r")


_JSON_KEY = re.compile(r'"((?:[^"\\]|\\.){0,200})"\s*:')


def _csv(old: str, new: str) -> bool:
    """An earlier CSV export: its header starts with the same two column names."""
    a, b = _first_line(old).split(","), _first_line(new).split(",")
    return len(a) >= 2 and a[:2] == b[:2]


def _json(old: str, new: str) -> bool:
    """An earlier JSON output: the same top-level type and the same first key (or no key in
    either: an empty list)."""
    o, n = old.lstrip(), new.lstrip()
    if not o or not n or o[0] != n[0] or o[0] not in "[{":
        return False
    ko, kn = _JSON_KEY.search(o), _JSON_KEY.search(n)
    return (ko is None and kn is None) or (ko is not None and kn is not None
                                           and ko.group(1) == kn.group(1))


def _markdown(old: str, new: str) -> bool:
    """An earlier Markdown output: the same first line (a report's title, a table's header), or
    a first line that starts with the same label (``BASE: a.db`` and ``BASE: b.db``: a
    comparison of other files)."""
    fo, fn = _first_line(old), _first_line(new)
    if not fo.strip():
        return False
    if fo == fn:
        return True
    to, tn = fo.split(None, 1)[0], (fn.split(None, 1) or [""])[0]
    return to == tn and len(to) > 1 and to.endswith(":") and to[:-1].isalpha()


def _html(old: str, new: str) -> bool:
    return '<meta name="generator" content="dlperf' in old


def _slurm(old: str, new: str) -> bool:
    return old.startswith("#!") and "# Generated by `dlperf" in old[:2000]


def _png(old: str, new: str) -> bool:
    return old.startswith("\x89PNG\r\n\x1a\n")


@dataclass(frozen=True)
class Kind:
    """An output format: its name (in messages), its suffixes, and how an earlier output of it
    is recognised from the head of the existing file and of the new content (both decoded as
    text; binary formats by their magic bytes, read as Latin-1)."""

    name: str
    suffixes: tuple[str, ...]
    recognise: Callable[[str, str], bool]
    binary: bool = False


KINDS: Mapping[str, Kind] = {
    "csv": Kind("CSV", (".csv",), _csv),
    "json": Kind("JSON", (".json",), _json),
    "markdown": Kind("Markdown", (".md", ".markdown", ".txt"), _markdown),
    "html": Kind("HTML", (".html", ".htm"), _html),
    "png": Kind("PNG", (".png",), _png, binary=True),
    "slurm": Kind("SLURM batch script", (".sh", ".sbatch", ".slurm"), _slurm),
}


def is_sqlite(path: str | Path) -> bool:
    """Whether ``path`` is an existing file that starts as an SQLite database does."""
    try:
        with open(path, "rb") as f:
            return f.read(16) == SQLITE_MAGIC
    except OSError:
        return False


def sqlite_side_of(path: str | Path) -> str | None:
    """What ``path`` is when it is part of an SQLite database other than its main file: a
    rollback journal or write-ahead log (by its first bytes, :data:`SQLITE_SIDE_MAGIC`), or a
    file named ``<db>-journal``, ``<db>-wal`` or ``<db>-shm`` beside an SQLite database
    ``<db>``; None otherwise."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError:
        head = b""
    if head.startswith(SQLITE_SIDE_MAGIC):
        return "an SQLite rollback journal" if head[:1] == b"\xd9" else "an SQLite write-ahead log"
    name = str(path)
    for suffix in SQLITE_SIDE_SUFFIXES:
        if name.endswith(suffix) and is_sqlite(name[:-len(suffix)]):
            return f"a side file of the SQLite database {name[:-len(suffix)]!r}"
    return None


def _head(path: Path, binary: bool) -> str:
    with open(path, "rb") as f:
        raw = f.read(HEAD_BYTES)
    return raw.decode("latin-1") if binary else raw.decode("utf-8", "replace")


def _shown(head: str) -> str:
    line = _first_line(head)[:60]
    return repr(line) if line.isprintable() else "bytes that are not text"


def check_target(path: str | Path, kind: str, new: str | bytes | None = None, *,
                 flag: str = "--output", force: bool = False,
                 protect: Iterable[str | Path | None] = ()) -> None:
    """Whether ``path`` may be written as an output of ``kind`` (module docstring).

    Args:
        path: the file to write.
        kind: a key of :data:`KINDS`.
        new: the content about to be written (its head is compared with the existing file's);
            None: the content is not known yet, so only what does not depend on it is checked
            (a folder, a protected file, a database, a missing folder), as a command does
            before it works; the write checks again with the content.
        flag: the flag that named ``path``, for messages.
        force: replace an existing file that is not an earlier output of this kind (never a
            database, never a file of ``protect``).
        protect: results files the same command reads or writes.

    Raises:
        OutputRefused: naming the path, what it is, and what to give instead.
    """
    p, k = Path(path), KINDS[kind]
    where = f"{flag} {str(path)!r}"
    if not str(path).strip():
        raise OutputRefused(f"{flag} is empty; give a file name, e.g. {flag} out"
                            f"{k.suffixes[0]}")
    if own_descriptor(path) is not None:
        return  # standard output (``-``) or another descriptor: written, nothing replaced
    for db in protect:
        if db is not None and same_file(p, db):
            what = ("the results file" if is_sqlite(db) or Path(db).suffix == ".db"
                    else "the input file")
            raise OutputRefused(f"{where} is {what} {str(db)!r}: writing there would destroy "
                                f"it; give another file for {flag}")
    if p.is_dir():
        raise OutputRefused(f"{where} is a folder; give a file name for {flag}, e.g. "
                            f"{str(p / ('out' + k.suffixes[0]))!r}")
    if not p.exists():
        if p.is_symlink():  # a dangling link: replaced by the file, its target never made
            return
        parent = p.absolute().parent
        if not parent.is_dir():
            raise OutputRefused(f"{where}: the folder {str(parent)!r} does not exist; make it "
                                "first, or give another path")
        return
    try:
        st = p.stat()
    except OSError as e:
        raise OutputRefused(f"{where} cannot be examined ({e.strerror}); give another path"
                            ) from None
    if not stat.S_ISREG(st.st_mode):
        return  # a device or a pipe (/dev/stdout): written in place, nothing is replaced
    if is_sqlite(p):
        raise OutputRefused(f"{where} is an SQLite database (a results file?): dlperf never "
                            f"replaces one with {k.name}, not even with --force; give another "
                            f"file for {flag}")
    side = sqlite_side_of(p)
    if side is not None:
        raise OutputRefused(f"{where} is {side}: part of a database (a results file?), which "
                            f"dlperf never replaces, not even with --force; give another file "
                            f"for {flag}")
    if st.st_size == 0 or force or new is None:
        return
    try:
        old = _head(p, k.binary)
    except OSError as e:
        raise OutputRefused(f"{where} cannot be read ({e.strerror}); give another path") from None
    text = (new.decode("latin-1" if k.binary else "utf-8", "replace")[:HEAD_BYTES]
            if isinstance(new, bytes) else new[:HEAD_BYTES])
    if k.recognise(old, text):
        return
    raise OutputRefused(f"{where} exists and is not a {k.name} file that dlperf wrote for this "
                        f"(it starts with {_shown(old)}); give another file name, or add "
                        "--force to replace it")


def write_if_changed(path: str | Path, data: str | bytes, *, mode: int | None = None) -> bool:
    """:func:`atomic_write` ``data`` to ``path`` unless ``path`` is a regular file (not a
    link) that holds exactly ``data`` already and has permission bits ``mode`` (where given):
    a file dlperf makes again with the same content (a committed residual table) keeps its
    modification time, so a checkout's tree stays clean and a read-only checkout works.
    Returns whether it wrote.

    Raises:
        WriteFailed: as :func:`atomic_write`, where it writes.
    """
    p = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        st = os.lstat(p)
        if (stat.S_ISREG(st.st_mode) and st.st_size == len(raw)
                and (mode is None or stat.S_IMODE(st.st_mode) == mode)
                and p.read_bytes() == raw):
            return False
    except OSError:
        pass
    atomic_write(p, raw, mode=mode)
    return True


def atomic_write(path: str | Path, data: str | bytes, *, mode: int | None = None,
                 sync: bool = True) -> Path:
    """Write ``data`` (text as UTF-8, ``\\n`` line ends) to ``path`` atomically: a new file
    with an unpredictable name in the same folder (``tempfile.mkstemp``, created with
    ``O_EXCL``: a link planted there is never followed), flushed and synced (unless
    ``sync=False``: many files that can be made again, a data set's images), then renamed over
    ``path`` (a link at ``path`` is replaced, never written through). Permission bits: ``mode``,
    else those of the file replaced, else ``0o666`` less the umask. A target that exists and is
    not a regular file (a device, a pipe) is written in place (:func:`open_in_place`);
    ``-``, ``/dev/stdout``, ``/dev/stderr`` and ``/dev/fd/N`` are written to this process's
    descriptor (:func:`own_descriptor`).

    Raises:
        OutputRefused: a named pipe that no process reads (:func:`open_in_place`).
        WriteFailed: (an OSError too) the write failed: its message names the target, the
            folder that refused the temporary file, or "standard output" (:func:`write_failed`);
            the temporary file is removed.
    """
    p = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd = own_descriptor(path)
    if fd is not None:
        try:
            _write_descriptor(fd, raw)
        except OSError as e:
            raise write_failed(e, fd) from None
        return p
    try:
        st = os.stat(p)
    except OSError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        try:
            with os.fdopen(open_in_place(p), "wb") as f:
                f.write(raw)
        except OutputRefused:
            raise
        except OSError as e:
            raise write_failed(e, p) from None
        return p
    if mode is None:
        if st is not None and not p.is_symlink():
            mode = stat.S_IMODE(st.st_mode)
        else:
            um = os.umask(0)
            os.umask(um)
            mode = 0o666 & ~um
    folder = p.absolute().parent
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name[:80]}.", suffix=".tmp", dir=str(folder))
    except OSError as e:
        raise write_failed(e, p, folder=folder) from None
    try:
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(raw)
                f.flush()
                if sync:
                    os.fsync(f.fileno())
            os.chmod(tmp, mode)
        except OSError as e:
            raise write_failed(e, p) from None
        try:
            os.replace(tmp, p)
        except OSError as e:
            raise write_failed(e, p, folder=folder) from None
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return p


def write_output(path: str | Path, data: str | bytes, kind: str, *, flag: str = "--output",
                 force: bool = False, protect: Iterable[str | Path | None] = ()) -> Path:
    """:func:`check_target` then :func:`atomic_write`; the path written.

    Raises:
        OutputRefused: as :func:`check_target`.
        OSError: the folder cannot be written.
    """
    check_target(path, kind, data, flag=flag, force=force, protect=protect)
    try:
        return atomic_write(path, data)
    except WriteFailed:  # names its target already
        raise
    except OutputRefused as e:  # a named pipe no process reads: say which flag named it
        raise OutputRefused(f"{flag} {e}") from None


def format_for(path: str | Path | None, given: str | None, formats: Mapping[str, str],
               default: str, flag: str = "--output") -> str:
    """The format to write: ``given`` (``--format``) when set, else the one ``path``'s suffix
    names in ``formats`` (suffix -> format, e.g. ``{".csv": "csv", ".json": "json"}``), else
    ``default``.

    Raises:
        ConfigError: ``given`` contradicts the suffix (``-f json -o out.csv``).
    """
    suffix = Path(path).suffix.lower() if path is not None else ""
    by_suffix = formats.get(suffix)
    if given is None:
        return by_suffix or default
    if by_suffix is not None and by_suffix != given:
        raise ConfigError(f"--format {given} and {flag} {str(path)!r} disagree (a {suffix} file "
                          f"holds {by_suffix}); leave --format out (the suffix decides), or "
                          f"give a file ending in the format's suffix")
    return given



#: The longest file name :func:`safe_filename` makes (characters; file systems allow 255
#: bytes, and a report names files after models whose ``file:`` paths can be longer).
MAX_NAME = 120


def safe_filename(text: str, suffix: str = "", max_len: int = MAX_NAME) -> str:
    """A file name for ``text`` (a model, a label): characters other than letters, digits,
    ``.``, ``_`` and ``-`` become ``_``; a name longer than ``max_len`` (``suffix``
    included) keeps its start and ends with 10 hex digits of the text's SHA-1, so distinct
    long names stay distinct and every name fits any file system (a long ``file:`` model
    path made ``dlperf report`` fail with "File name too long")."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", str(text)).strip("._") or "x"
    if len(safe) + len(suffix) > max_len:
        digest = hashlib.sha1(str(text).encode("utf-8", "surrogatepass")).hexdigest()[:10]
        safe = safe[:max(1, max_len - len(suffix) - 11)].rstrip("._-") + "_" + digest
    return safe + suffix
