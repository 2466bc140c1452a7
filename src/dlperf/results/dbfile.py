"""Opening a results file safely, and the errors of one, in words (issue 23).

- **Paths** go into SQLite as percent-quoted ``file:`` URIs (:func:`file_uri`): ``#``, ``?``,
  ``%`` and spaces are part of the file name, never read as URI syntax (unquoted, ``a#b.db``
  opened a file named ``a`` and showed an empty table).
- **Readers** (:func:`open_copy`) read the file into memory through SQLite's backup (a
  consistent copy) from a read-only connection, so reading never changes the file. A writer
  killed inside a transaction leaves a *hot journal* that a read-only connection may not roll
  back (``SQLITE_READONLY_ROLLBACK``); then the file and its journal are copied to a temporary
  folder and rolled back there: the reader sees the last committed state and the file stays as
  it is (the next writer rolls it back for good). The two copies are not taken under a lock
  (a read-only connection cannot take one beside a hot journal): another writer may roll the
  journal back, and write, between them, so the journal is read before the file and again
  after it, and a copy is used only if the journal stayed the same, byte for byte (a rollback
  deletes it, a new transaction writes a new one with a new random nonce); otherwise the file
  is read again from the start (the writer has usually rolled it back, and the ordinary read
  succeeds), for up to :func:`db_timeout_s` seconds. The ordinary copy is made inside a read
  transaction taken as writers take theirs (:func:`begin_read`: bounded, and said), since the
  backup itself retries another process's exclusive lock forever.
- **Writers** (:func:`open_writer`, :func:`begin_immediate`) wait for another writer's lock
  for :func:`db_timeout_s` seconds, then fail with :class:`StoreBusy`; the wait is made of
  short tries (SQLite's busy handler sleeps in C, where Ctrl-C does not act), and a wait
  longer than a few seconds says on stderr what it waits for.
- **Errors** (:func:`store_error`): a locked file, a full disk, a read-only file or folder, a
  damaged file or an I/O error become a :class:`StoreError` that says what happened and what to
  do; a failed write is rolled back, so nothing stored before is lost.
- **Folders** (:func:`results_files`): wherever a command reads results (``predict``,
  ``results``, ``report``), a folder stands for every ``*.db`` directly in it.
- **Layout** (:func:`parse_version`, :func:`check_layout`, :func:`check_intact`): a
  ``schema_version`` that is not a whole number, one newer than this dlperf, a file that claims
  a version but lacks its tables or columns, and a file whose pages are damaged
  (``PRAGMA quick_check``) are refused with the version and what to do.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from dlperf.errors import ConfigError
from dlperf.outputs import same_file

__all__ = ["StoreError", "StoreBusy", "DB_TIMEOUT_ENV", "DEFAULT_DB_TIMEOUT_S", "db_timeout_s",
           "file_uri", "open_copy", "open_writer", "begin_immediate", "begin_read", "store_error", "sqlite_errors",
           "parse_version", "check_layout", "check_intact", "REQUIRED_TABLES", "SIDE_SUFFIXES",
           "check_side_names",
           "results_files", "same_file"]

#: Environment variable: seconds a writer waits for another process's lock on the file.
DB_TIMEOUT_ENV = "DLPERF_DB_TIMEOUT_S"
#: Default of :data:`DB_TIMEOUT_ENV`: long enough for a merge of a large file or a reader's
#: copy, short enough that a forgotten ``sqlite3`` shell holding a transaction is reported.
DEFAULT_DB_TIMEOUT_S = 120.0
#: Seconds one try for another process's write lock waits inside SQLite (between tries Python
#: runs its signal handlers: Ctrl-C acts).
LOCK_TRY_S = 0.25
#: Seconds between two reads of a file whose hot journal changed while it was copied
#: (:func:`open_copy`).
READ_RETRY_S = 0.02
#: Environment variable: seconds of waiting for a lock before a line on stderr says so.
LOCK_NOTICE_ENV = "DLPERF_LOCK_NOTICE_S"
#: Default of :data:`LOCK_NOTICE_ENV`.
DEFAULT_LOCK_NOTICE_S = 5.0
#: Tables every results file of the current schema has.
REQUIRED_TABLES = ("meta", "results", "samples", "sweeps", "collectives")


class StoreError(ConfigError):
    """A results file that cannot be read or written as asked (locked, full disk, read-only,
    damaged, not dlperf's, a newer schema); the message names the file and what to do."""


class StoreBusy(StoreError):
    """Another process kept the results file locked for longer than :func:`db_timeout_s`."""


def db_timeout_s() -> float:
    """Seconds to wait for another process's lock: ``$DLPERF_DB_TIMEOUT_S`` (a positive number)
    or :data:`DEFAULT_DB_TIMEOUT_S`.

    Raises:
        ConfigError: the variable is set but not a positive, finite number.
    """
    return seconds_from_env(DB_TIMEOUT_ENV, DEFAULT_DB_TIMEOUT_S,
                            "the seconds to wait for a locked results file", 300)


def seconds_from_env(var: str, default: float, what: str, example: float) -> float:
    """``$var`` as a positive, finite number of seconds, or ``default`` when unset or blank.

    Raises:
        ConfigError: the variable is set but not a positive, finite number; the message says
            what it sets (``what``) and gives ``example``.
    """
    raw = os.environ.get(var)
    if raw is None or not raw.strip():
        return default
    try:
        v = float(raw)
    except ValueError:
        v = float("nan")
    if not 0 < v < float("inf"):
        raise ConfigError(f"{var}={raw!r}: give {what} as a positive number, e.g. {example:g}")
    return v


def file_uri(path: str | Path, mode: str) -> str:
    """The SQLite URI of ``path`` opened with ``mode`` (``ro``, ``rw`` or ``rwc``): an absolute
    ``file:`` URI whose path is percent-quoted (:meth:`pathlib.Path.as_uri`), so ``#``, ``?``,
    ``%`` and spaces stay part of the name (SQLite's URI rules: sqlite.org/uri.html)."""
    return f"{Path(os.path.abspath(path)).as_uri()}?mode={mode}"


def _name(e: BaseException) -> str:
    return getattr(e, "sqlite_errorname", None) or ""


def damage(path: str | Path) -> str | None:
    """What is wrong with a file SQLite called corrupt or not a database, from its 100-byte
    header (sqlite.org/fileformat.html, 1.3: the magic string, the page size at offset 16, the
    page count at offset 28): ``"is truncated (N of the M bytes its header declares)"``,
    ``"is damaged"`` for another SQLite file, None for a file that is not one (or cannot be
    read)."""
    from dlperf.outputs import SQLITE_MAGIC

    try:
        with open(path, "rb") as f:
            head = f.read(100)
        size = os.path.getsize(path)
    except OSError:
        return None
    if not head.startswith(SQLITE_MAGIC[:len(head)]) or not head:
        return None
    if len(head) < 100:
        return f"is truncated ({size} bytes: shorter than an SQLite header)"
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    pages = int.from_bytes(head[28:32], "big")
    if pages and size < page * pages:
        return f"is truncated ({size:,} of the {page * pages:,} bytes its header declares)"
    return "is damaged"


def store_error(e: sqlite3.Error, path: str | Path, doing: str) -> StoreError:
    """The :class:`StoreError` (or :class:`StoreBusy`) for SQLite's error ``e`` on the results
    file ``path`` while ``doing`` (e.g. ``"storing a result"``): what happened, that nothing
    stored before is lost (SQLite rolled the write back), and what to do."""
    where, name = repr(str(path)), _name(e)
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return StoreBusy(
            f"{where} stayed locked by another process for {db_timeout_s():g} s while "
            f"{doing} (another sweep or merge writing to it, or a program holding a transaction "
            f"open); nothing stored in it is lost. Run the same command again once it is free, "
            f"or wait longer: {DB_TIMEOUT_ENV}=SECONDS")
    if name.startswith("SQLITE_FULL"):
        return StoreError(f"the disk (or quota) holding {where} is full: {doing} failed and "
                          "was rolled back; nothing stored before is lost. Free some space and "
                          "run the same command again (it resumes)")
    if name.startswith("SQLITE_READONLY"):
        return StoreError(f"{where} cannot be written (a read-only file, folder or file "
                          f"system) while {doing}; nothing stored in it is lost. Make it "
                          "writable, or give another --db path")
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")):
        what = damage(path)
        if what is not None:
            return StoreError(f"{where} {what}: a damaged results file ({e}); restore it from "
                              "a copy, or give another --db path")
        return StoreError(f"{where} is damaged or not a dlperf results database ({e}); restore "
                          "it from a copy, or give another --db path")
    if name.startswith("SQLITE_CANTOPEN"):
        return StoreError(f"{where} cannot be opened ({e}): its folder is missing, "
                          "on a read-only file system or not writable by this user; give "
                          "another --db path")
    if name.startswith("SQLITE_IOERR"):
        return StoreError(f"input/output error on {where} while {doing} ({e}); nothing stored "
                          "before is lost. Check the disk, then run the same command again")
    return StoreError(f"{where}: SQLite failed while {doing} ({e}); nothing stored before is "
                      "lost; if it persists, give another --db path")


@contextmanager
def sqlite_errors(path: str | Path, doing: str) -> Iterator[None]:
    """Turn an :class:`sqlite3.Error` inside the block into :func:`store_error`'s."""
    try:
        yield
    except sqlite3.Error as e:
        raise store_error(e, path, doing) from None


#: Names SQLite gives the side files of a database ``DB`` (``DB-journal``, ``DB-wal``,
#: ``DB-shm``): a results file under such a name is taken by SQLite for ``DB``'s journal (and
#: deleted) the next time ``DB`` is written.
SIDE_SUFFIXES = ("-journal", "-wal", "-shm")


def check_side_names(path: str | Path) -> None:
    """Refuse to write the results file ``path`` where SQLite would destroy a database: a
    name ending as a side file's (``x.db-journal``: the next write to ``x.db`` takes it for
    its rollback journal and deletes it, every result in it lost), or a file beside it under
    such a name that is a database, not a journal (``path``'s own write would delete it).

    Raises:
        StoreError: naming the file, what SQLite would do, and what to give instead.
    """
    p = Path(path)
    name = p.name
    for suffix in SIDE_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            base = name[: -len(suffix)]
            raise StoreError(
                f"results file {str(path)!r} has the name SQLite gives a side file of the "
                f"database {base!r} ({suffix[1:]}): the next write to {base!r} would take it "
                f"for its own and delete it, with every result in it; give another --db path "
                f"(an existing one is read safely: dlperf merge {str(path)!r} --db "
                f"{base.rsplit('.', 1)[0]}{suffix.replace('-', '_')}.db copies it out)")
    for suffix in SIDE_SUFFIXES[:2]:  # -shm is rebuilt only in WAL mode, never replayed
        side = Path(f"{p}{suffix}")
        try:
            with open(side, "rb") as f:
                head = f.read(16)
        except OSError:
            continue
        if head == b"SQLite format 3\x00":
            raise StoreError(
                f"{str(side)!r} beside the results file {str(path)!r} is an SQLite database, "
                f"not a {suffix[1:]} file: writing {str(path)!r} would take it for its own "
                "and delete it, with everything in it; rename it first (e.g. mv "
                f"{str(side)!r} {str(p.with_name(p.stem + suffix.replace('-', '_') + '.db'))!r})"
                ", then run the same command again")


def open_writer(path: str | Path) -> sqlite3.Connection:
    """A connection that may write ``path`` (created if missing; autocommit, transactions are
    explicit), waiting up to :func:`db_timeout_s` for another process's lock.

    Raises:
        StoreError: it cannot be opened (:func:`store_error`).
    """
    with sqlite_errors(path, "opening it"):
        return sqlite3.connect(file_uri(path, "rwc"), uri=True, timeout=db_timeout_s(),
                               isolation_level=None)


def begin_immediate(db: sqlite3.Connection, path: str | Path, doing: str) -> None:
    """``BEGIN IMMEDIATE`` on ``db`` (a connection to the results file ``path``), waiting up
    to :func:`db_timeout_s` for another process's lock in tries of :data:`LOCK_TRY_S`: one
    wait of the whole timeout inside SQLite kept a Ctrl-C from acting, silently, for up to
    that long. After :data:`LOCK_NOTICE_ENV` seconds one line on stderr says what it waits
    for (``doing``), how long it may wait and how to change that.

    Raises:
        sqlite3.OperationalError: the lock was not free within the timeout (``SQLITE_BUSY``,
            which :func:`store_error` words), or another SQLite error.
    """
    def take() -> None:
        db.execute("BEGIN IMMEDIATE")

    _wait_for_lock(db, path, doing, take)


def begin_read(db: sqlite3.Connection, path: str | Path, doing: str) -> None:
    """A read transaction on ``db`` (a connection to the results file ``path``) holding its
    shared lock, waited for as :func:`begin_immediate` waits: SQLite's backup, which
    :func:`open_copy` makes inside it, retried a lock held by another process (an ``sqlite3``
    shell in a write transaction, a program's exclusive lock) forever and without a word.

    Raises:
        sqlite3.OperationalError: as :func:`begin_immediate`.
    """
    def take() -> None:
        db.execute("BEGIN")
        try:
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()  # the shared lock
        except BaseException:
            db.execute("ROLLBACK")
            raise

    _wait_for_lock(db, path, doing, take)


def _wait_for_lock(db: sqlite3.Connection, path: str | Path, doing: str,
                   take: Callable[[], None]) -> None:
    """Call ``take()`` (which takes a lock on ``db``) until it succeeds, in tries of
    :data:`LOCK_TRY_S`, up to :func:`db_timeout_s`, with the notice of :func:`begin_immediate`.
    """
    limit = db_timeout_s()
    notice = seconds_from_env(LOCK_NOTICE_ENV, DEFAULT_LOCK_NOTICE_S,
                              "the seconds of waiting for a lock before saying so", 5)
    start, told = time.monotonic(), False
    db.execute(f"PRAGMA busy_timeout = {int(LOCK_TRY_S * 1000)}")
    try:
        while True:
            try:
                take()
                return
            except sqlite3.OperationalError as e:
                waited = time.monotonic() - start
                if not _name(e).startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or waited >= limit:
                    raise
                if not told and waited >= notice:
                    told = True
                    print(f"waiting for another process's lock on {str(path)!r} ({doing}; up "
                          f"to {limit:g} s, {DB_TIMEOUT_ENV}=SECONDS to change; another "
                          "sweep, merge or program holds it)", file=sys.stderr, flush=True)
    finally:
        db.execute(f"PRAGMA busy_timeout = {int(limit * 1000)}")


def open_copy(path: str | Path) -> sqlite3.Connection:
    """An in-memory copy of the results file ``path`` (see the module docstring); the file is
    opened read-only and never written, a hot journal is rolled back in a temporary copy.

    Raises:
        StoreError: the file cannot be read, or is not an SQLite database.
        StoreBusy: beside a hot journal, the file and its journal kept changing (writers
            rolling it back and writing) for :func:`db_timeout_s` seconds.
    """
    mem = sqlite3.connect(":memory:", isolation_level=None)
    try:
        limit = db_timeout_s()
        start = time.monotonic()
        while True:
            try:
                _backup(file_uri(path, "ro"), mem, path)
                break
            except sqlite3.Error as e:
                if _name(e) != "SQLITE_READONLY_ROLLBACK":
                    raise
            if _backup_rolled_back(path, mem):
                break
            if time.monotonic() - start >= limit:
                raise StoreBusy(
                    f"{str(path)!r} has the journal of a writer that was stopped mid-write, "
                    f"and for {limit:g} s the file and its journal changed while they were "
                    "read (other processes writing to it); nothing stored in it is lost. Run "
                    f"the same command again once they are done, or wait longer: "
                    f"{DB_TIMEOUT_ENV}=SECONDS")
            time.sleep(READ_RETRY_S)
    except sqlite3.Error as e:
        mem.close()
        if _name(e).startswith(("SQLITE_NOTADB", "SQLITE_CORRUPT")):
            what = damage(path)
            if what is not None:
                raise StoreError(f"{str(path)!r} {what}: a damaged results file ({e}); restore "
                                 "it from a copy, or give another --db path") from None
            raise StoreError(f"{str(path)!r} is not a dlperf results database ({e}); give "
                             "another --db path") from None
        raise store_error(e, path, "reading it") from None
    except BaseException:
        mem.close()
        raise
    return mem


def _backup_rolled_back(path: str | Path, dest: sqlite3.Connection) -> bool:
    """Copy the results file ``path`` and its hot journal to a temporary folder, roll the
    journal back there and back the result up into ``dest``; False (``dest`` untouched) when
    the journal was gone, empty, or not the same before and after the file was copied: a
    writer rolled it back (and may have written) meanwhile, so the copy of the file may hold
    a mix of states; the caller reads again."""
    from dlperf.tempdirs import owned_tempdir

    journal = Path(f"{path}-journal")
    try:
        before = journal.read_bytes()
    except FileNotFoundError:
        return False
    if not before:
        return False
    with owned_tempdir("dlperf-read-") as tmp:
        copy = Path(tmp) / "copy.db"
        shutil.copyfile(path, copy)
        try:
            after = journal.read_bytes()
        except FileNotFoundError:
            return False
        if after != before:
            return False
        Path(f"{copy}-journal").write_bytes(before)
        _backup(file_uri(copy, "rw"), dest, path)
    return True


def _backup(uri: str, dest: sqlite3.Connection, path: str | Path) -> None:
    """Copy the database at ``uri`` (the results file ``path``) into ``dest`` inside a read
    transaction taken with a bounded wait (:func:`begin_read`)."""
    src = sqlite3.connect(uri, uri=True, timeout=db_timeout_s(), isolation_level=None)
    try:
        begin_read(src, path, "reading it")
        src.backup(dest)
    finally:
        src.close()


def parse_version(value: object, path: str | Path, newest: int) -> int:
    """The ``meta.schema_version`` ``value`` of the file ``path`` as a number.

    Raises:
        StoreError: not a whole number >= 1 (naming it), or newer than ``newest``.
    """
    try:
        v = int(str(value).strip())
    except ValueError:
        v = 0
    if v < 1:
        raise StoreError(f"{str(path)!r} has schema_version {value!r}, which is not a schema "
                         "version (a whole number from 1): the file is damaged or was not "
                         "written by dlperf; restore it from a copy, or give another --db path")
    if v > newest:
        raise StoreError(f"{str(path)!r} has schema version {v}, newer than this dlperf "
                         f"understands ({newest}): upgrade dlperf (pip install -U dlperf) to "
                         "read or extend it, or give another --db path")
    return v


def check_layout(db: sqlite3.Connection, path: str | Path, version: int,
                 columns: Iterable[str]) -> None:
    """The tables of :data:`REQUIRED_TABLES` are there and ``results`` has ``id`` and every
    column of ``columns`` (run after migrating to the current schema).

    Raises:
        StoreError: naming the version the file claims and what it lacks.
    """
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    missing = [t for t in REQUIRED_TABLES if t not in tables]
    if not missing:
        have = {r[1] for r in db.execute("PRAGMA table_info(results)")}
        missing = [f"results.{c}" for c in ("id", *columns) if c not in have]
        have_s = {r[1] for r in db.execute("PRAGMA table_info(samples)")}
        missing += [f"samples.{c}" for c in ("result_id", "phase", "idx", "step_time_s", "loss")
                    if c not in have_s]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5
                                          else "")
        raise StoreError(f"{str(path)!r} claims dlperf schema version {version} but lacks "
                         f"{shown}: it is damaged or was not written by dlperf; restore it "
                         "from a copy, or give another --db path")


def check_intact(db: sqlite3.Connection, path: str | Path) -> None:
    """SQLite's ``PRAGMA quick_check`` of the open file finds nothing (a page-level check of
    every table and index, O(size of the file)).

    Raises:
        StoreError: the problems it reports (the first three) and what to do.
    """
    with sqlite_errors(path, "checking it"):
        found = [r[0] for r in db.execute("PRAGMA quick_check(3)")]
    if found != ["ok"]:
        raise StoreError(f"{str(path)!r} is damaged (SQLite's quick_check: "
                         f"{'; '.join(map(str, found))}); restore it from a copy, or give "
                         "another --db path")


def results_files(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[str]:
    """The results files that ``paths`` name: a file as itself, a folder as every ``*.db``
    directly in it, sorted by name (one resolver for every command that reads results:
    ``predict``, ``results``, ``report``). Files are not opened here: a missing file is
    :class:`~dlperf.results.store.ResultStore`'s to refuse.

    Args:
        paths: one path or several (files or folders).

    Returns:
        The file paths, in the order given (a folder's files where the folder was named),
        each file once: two spellings of one file (relative and absolute, a link, ``a/../a``)
        are one, kept as first spelled.

    Raises:
        ConfigError: a folder that holds no ``*.db`` file (naming it and what it holds).
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out: list[str] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(str(f) for f in p.glob("*.db") if f.is_file())
            if not found:
                held = sorted(f.name for f in p.iterdir())[:5]
                raise ConfigError(f"folder {str(p)!r} holds no results file (*.db)"
                                  + (f"; it holds {', '.join(held)}" if held else
                                     "; it is empty")
                                  + ": give a results file or a folder of them")
            out.extend(found)
        else:
            out.append(str(p))
    first: dict[str, str] = {}  # the resolved path -> its first spelling
    for f in out:
        first.setdefault(os.path.realpath(f), f)
    return list(first.values())
