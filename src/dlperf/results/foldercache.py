"""A folder of results files read as one, kept between commands: the merged copy that
:func:`dlperf.results.merge.open_results` makes, under ``$DLPERF_CACHE_DIR``.

Reading a folder merges its files (:func:`~dlperf.results.merge.merge_stores`): every row of
every file is checked (:mod:`dlperf.results.rowcheck`: its values, its record, its checksums)
and copied with its samples into one file, each time ``dlperf results``, ``report`` or
``compare`` reads the folder. What that gives (the merged content, the file each result came
from, each file's damaged rows) is a function of the files' bytes and of the code that reads
them, so it is kept (:func:`save`) and read back (:func:`load`) under a key of both
(:func:`folder_key`):

- **Key**: SHA-256 of every file's bytes, in the folder's order (a file changed, truncated,
  replaced, added or removed makes a new key; its bytes, not its size and time, so a change
  that keeps those, or damage at rest, is never served stale), and of the code that merges
  and judges rows (:func:`code_key`: the source of :data:`CODE_SOURCES`, the versions of
  Python, SQLite and pydantic, :data:`FORMAT`). A file with a rollback journal or write-ahead
  log beside it (a writer inside a transaction, or killed in one: its reader rolls the
  journal back or reads the log, so the file's bytes are not what is read) is read without
  the cache, and the merged copy is kept only when the key after merging is the key before
  (no file changed while it was read).
- **File**: ``results-folder-KEYDIGEST.db`` in :func:`dlperf.jsoncache.cache_root`: the
  merged copy, an SQLite file, with a table :data:`TABLE` of where each result came from and
  each file's damaged rows; ``DIGEST`` is the SHA-256 of its bytes. It is written through
  :func:`dlperf.outputs.atomic_write` (an exclusively created temporary file of an
  unpredictable name, then ``os.replace``: a concurrent reader or writer sees a whole file or
  none), owner-only, and read back only when it is a regular file of this user that others
  may not write, in a folder others may not write (:func:`dlperf.jsoncache.untrusted`), and
  its bytes match ``DIGEST``; anything else is ignored with one
  :class:`~dlperf.jsoncache.CacheIgnored` warning, and the folder is merged again. The
  :data:`KEEP` most recently used files are kept.
- **Same answers**: a hit opens the same content in memory as a miss (:func:`unpack` in both
  cases: the merged copy as bytes, deserialized), with the same origins, and the damaged rows
  of each file are said by :func:`dlperf.results.merge.open_results` in both cases (one
  :class:`~dlperf.results.rowcheck.DamagedRows` warning per file, in the folder's order).
- **No cache**: a cache folder that cannot be made or written, or an SQLite without
  ``deserialize``, is no cache, silently (each read merges the files). To clear it, remove
  the files: ``rm ~/.cache/dlperf/results-folder-*.db`` (or those in ``$DLPERF_CACHE_DIR``).

Why a cache of the whole merged copy (measured on ``benchmarks/results/h200``: 13 files,
33 MB, 704 results, 188,767 samples; a 2-core VM at load 6.6, CPU seconds of three merges
each): merging took 1.4-2.2 s, checking the rows 0.5-0.9 s of it, most of that parsing and
validating each stored record, and the rest reading, copying and writing the samples, the
rows and the records. Copying the samples in SQL (:func:`dlperf.results.merge._stage`) and
judging plain samples in SQL (:mod:`dlperf.results.rowcheck`) brought it to 0.9-1.4 s; what
is left is spread over opening, migrating and checking 13 files, none of it avoidable by a
faster check (each record must be parsed to be judged), and lazily copied samples would
save only the 0.2 s the copy in SQL costs while changing every reader of samples. A hit
costs 0.09 s: hashing the files (0.03 s) and reading, verifying and deserializing the merged
copy (0.06 s); the command is then its imports, reading the records and drawing the table.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sqlite3
import sys
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["KIND", "SUFFIX", "FORMAT", "KEEP", "TABLE", "CODE_SOURCES", "available",
           "code_key", "folder_key", "cache_file", "load", "save", "pack", "unpack"]

#: The cache files' names: ``KIND-KEYDIGEST`` + :data:`SUFFIX`.
KIND = "results-folder"
SUFFIX = ".db"
#: The layout of a cached file (its :data:`TABLE`); part of every key.
FORMAT = 1
#: Merged copies kept in the cache folder (the most recently used; 33 MB each for the H200
#: folder).
KEEP = 8
#: The table of a cached file that holds where each result came from and the damaged rows
#: (dropped from the copy a store reads).
TABLE = "dlperf_folder"
#: The source that decides what a folder reads as (relative to the ``dlperf`` package;
#: folders: every ``*.py`` in them): the store, its checks, migrations and records, the
#: configuration a record is validated against, and what they import (a test checks that
#: reading a folder imports no other dlperf module).
CODE_SOURCES = ("results", "config", "__init__.py", "errors.py", "interrupts.py",
                "outputs.py", "registry.py", "tempdirs.py")
#: Side files whose presence means a file's bytes are not what a reader reads
#: (:data:`dlperf.results.dbfile.SIDE_SUFFIXES` without ``-shm``, which holds no content).
_SIDES = ("-journal", "-wal")


def available() -> bool:
    """Whether this Python's SQLite can open a database from bytes (``deserialize``, Python
    3.11 with SQLite 3.23 or newer); without it there is no cache."""
    return hasattr(sqlite3.Connection, "deserialize")


def _framed(h: Any, data: bytes) -> None:
    h.update(len(data).to_bytes(8, "big"))
    h.update(data)


@functools.lru_cache(maxsize=1)
def code_key() -> str:
    """A digest of the code that merges a folder and judges its rows (:data:`CODE_SOURCES`),
    the versions of Python, SQLite and pydantic, and :data:`FORMAT` (32 hex digits).

    Raises:
        OSError: a source file cannot be read.
    """
    import pydantic

    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    _framed(h, f"format {FORMAT}; python {sys.version_info[:2]}; sqlite "
               f"{sqlite3.sqlite_version}; pydantic {pydantic.VERSION}".encode())
    for name in CODE_SOURCES:
        p = root / name
        for f in sorted(p.glob("*.py")) if p.is_dir() else [p]:
            _framed(h, f.relative_to(root).as_posix().encode())
            _framed(h, f.read_bytes())
    return h.hexdigest()[:32]


def folder_key(files: Sequence[str | os.PathLike[str]]) -> str | None:
    """The key of the merged copy of ``files`` (module docstring; 32 hex digits): their
    bytes in this order and :func:`code_key`. None: no cache for them (a journal or log beside
    one, a file that cannot be read, no :func:`available` SQLite)."""
    if not available():
        return None
    try:
        h = hashlib.sha256(code_key().encode())
        for f in files:
            if any(os.path.lexists(f"{f}{side}") for side in _SIDES):
                return None
            with open(f, "rb") as fh:
                h.update(hashlib.file_digest(fh, "sha256").digest())
    except OSError:
        return None
    return h.hexdigest()[:32]


def cache_file(key: str, digest: str) -> Path:
    """The cache file of ``key`` whose bytes have the SHA-256 ``digest`` (hex)."""
    from dlperf.jsoncache import cache_root

    return cache_root() / f"{KIND}-{key}{digest}{SUFFIX}"


def load(key: str) -> bytes | None:
    """The bytes of the cached merged copy of ``key``, or None: there is none, or none that
    may be trusted (module docstring; a :class:`~dlperf.jsoncache.CacheIgnored` warning names
    a file that was not used and why). A file used is marked as used (its modification
    time), so it is among the last :data:`KEEP` removed."""
    from dlperf.jsoncache import CacheIgnored, cache_root, untrusted

    try:
        found = sorted(cache_root().glob(f"{KIND}-{key}*{SUFFIX}"))
    except OSError:
        return None
    for p in found:
        digest = p.name[len(KIND) + 1 + len(key):-len(SUFFIX)]
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            continue
        why = untrusted(p, max_bytes=None)
        if why == "":
            continue  # removed since it was listed (another process's prune)
        if why is None:
            try:
                data = p.read_bytes()
            except OSError as e:
                why = f"it cannot be read ({e.strerror})"
            else:
                if hashlib.sha256(data).hexdigest() == digest:
                    try:
                        os.utime(p)
                    except OSError:
                        pass
                    return data
                why = "its content does not match its digest (changed after it was written)"
        warnings.warn(f"ignored the cache file {str(p)!r}: {why}; reading the results "
                      "files again", CacheIgnored, stacklevel=2)
    return None


def save(key: str, data: bytes) -> Path | None:
    """Keep ``data`` (a merged copy made by :func:`pack`) as the cache file of ``key``
    (atomically, owner-only; the other files of its kind but the :data:`KEEP` newest are
    removed); its path, or None when the cache folder cannot be made or written (silently:
    the folder is merged again next time)."""
    from dlperf.jsoncache import prune
    from dlperf.outputs import atomic_write

    p = cache_file(key, hashlib.sha256(data).hexdigest())
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(p, data, mode=0o600, sync=False)  # can be made again: no fsync
    except OSError:
        return None
    prune(p, KEEP, suffix=SUFFIX)
    return p


def pack(union: str | os.PathLike[str], origin: Mapping[int, int],
         damaged: Sequence[Mapping[int, str]]) -> bytes:
    """The bytes of a merged copy to keep: the SQLite file ``union`` (closed) with a table
    :data:`TABLE` that holds ``origin`` (result id -> index of the file it came from) and
    ``damaged`` (per file, in order: row id -> what is wrong)."""
    mem = sqlite3.connect(":memory:", isolation_level=None)
    try:
        mem.deserialize(Path(union).read_bytes())
        mem.execute(f"CREATE TABLE {TABLE} (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        mem.executemany(f"INSERT INTO {TABLE} VALUES (?, ?)", [
            ("origin", json.dumps(sorted(origin.items()))),
            ("damaged", json.dumps([sorted(d.items()) for d in damaged]))])
        return mem.serialize()
    finally:
        mem.close()


def unpack(data: bytes, n_files: int
           ) -> tuple[sqlite3.Connection, dict[int, int], list[dict[int, str]]]:
    """A merged copy's bytes (:func:`pack`) of a folder of ``n_files`` files opened in memory
    without its :data:`TABLE` (the content a store reads: ``ResultStore(..., memory=...)``),
    with its origins (result id -> file index) and each file's damaged rows.

    Raises:
        ValueError: the bytes are not such a copy (not SQLite, no table, an origin or damaged
            row of the wrong type, a result without an origin or a file index out of range).
    """
    mem = sqlite3.connect(":memory:", isolation_level=None)
    try:
        mem.deserialize(data)
        raw = dict(mem.execute(f"SELECT key, value FROM {TABLE}").fetchall())
        pairs, bad = json.loads(raw["origin"]), json.loads(raw["damaged"])
        origin = {int(rid): int(i) for rid, i in pairs
                  if type(rid) is int and type(i) is int and 0 <= i < n_files}
        ids = {r[0] for r in mem.execute("SELECT id FROM results")}
        if len(origin) != len(pairs) or set(origin) != ids:
            raise ValueError("results without an origin, or origins of no result")
        if not isinstance(bad, list) or len(bad) != n_files:
            raise ValueError(f"damaged rows of {len(bad)} files, not {n_files}")
        damaged = []
        for rows in bad:
            d = {rid: why for rid, why in rows if type(rid) is int and isinstance(why, str)}
            if len(d) != len(rows):
                raise ValueError("a damaged row of the wrong type")
            damaged.append(d)
        mem.execute(f"DROP TABLE {TABLE}")
    except (sqlite3.Error, ValueError, KeyError, TypeError, RecursionError) as e:
        mem.close()
        raise ValueError(f"not a merged copy of {n_files} results files ({e})") from None
    return mem, origin, damaged
