"""Combining results files (``dlperf results --merge``): the union of their rows, each once;
and reading a folder of results files as one (:func:`open_results`, for ``dlperf results``
and ``report``)."""

from __future__ import annotations

import sqlite3
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from dlperf.errors import ConfigError
from dlperf.results.dbfile import results_files, same_file, sqlite_errors
from dlperf.results.rowcheck import ROW_SUMS_SQL, collective_problem, describe, scan, seal
from dlperf.results.store import COLLECTIVE_COLUMNS, COLUMNS, ResultStore

__all__ = ["merge_stores", "open_results", "origin_of", "PROFILE_PREFIX"]

#: ``meta`` keys of the device profiles ``dlperf calibrate`` stores
#: (:data:`dlperf.perfmodel.hardware.META_PREFIX`): copied by a merge like the rows.
PROFILE_PREFIX = "device_profile:"


def _profiles(db: sqlite3.Connection) -> dict[str, str]:
    """The device profiles of an open store (``meta`` key -> its JSON text), those whose
    value is a JSON object (a damaged one is left out, as a damaged row is)."""
    import json

    out = {}
    for k, v in db.execute("SELECT key, value FROM meta WHERE substr(key, 1, ?) = ?",
                           (len(PROFILE_PREFIX), PROFILE_PREFIX)):
        try:
            ok = isinstance(v, str) and isinstance(json.loads(v), dict)
        except ValueError:
            ok = False
        if ok and isinstance(k, str):
            out[k] = v
    return out


def _read_store(db: sqlite3.Connection, skip: set[int] | frozenset[int] = frozenset()
                ) -> tuple[list, list, list]:
    """(result rows, collective rows, sweep records) of an open store, without the result
    rows of ``skip`` (damaged: :meth:`ResultStore.damaged`) and the collective rows that are
    damaged (:func:`dlperf.results.rowcheck.collective_problem`). Their samples and
    timelines are copied by SQLite (:func:`_stage`).

    Only dlperf's own columns are read (:data:`COLUMNS`, :data:`COLLECTIVE_COLUMNS`, named
    here, never taken from the file), so a file with columns of other names (a foreign file
    made to look like a results file) can add nothing to the SQL that is run; the layout of
    every file was checked on opening (:func:`dlperf.results.dbfile.check_layout`)."""
    cols = ", ".join(("id", *COLUMNS))
    results = [row for r in db.execute(f"SELECT {cols} FROM results ORDER BY id").fetchall()
               if (row := dict(r))["id"] not in skip]
    ccols = ", ".join(("id", *COLLECTIVE_COLUMNS))
    colls = [c for r in db.execute(f"SELECT {ccols} FROM collectives ORDER BY id")
             if not collective_problem(c := dict(r))]
    sweeps = [tuple(r) for r in db.execute("SELECT name, created_at, config_json FROM sweeps")]
    return results, colls, sweeps


#: The merge's scratch tables (in ``dest``'s connection's temporary database): every file's
#: samples and timelines as stored (``file``: its index in the merge, ``result_id``: its own
#: row id), and the row id each kept result has in ``dest``.
_SCRATCH = {"merge_samples": "file INTEGER NOT NULL, result_id, phase, idx, step_time_s, loss",
            "merge_timelines": "file INTEGER NOT NULL, result_id, format, data",
            "merge_ids": "file INTEGER NOT NULL, old INTEGER NOT NULL, new INTEGER NOT NULL, "
                         "PRIMARY KEY (file, old)"}


def _stage(db: sqlite3.Connection, fi: int, src: sqlite3.Connection | None) -> None:
    """Copy the samples and timelines of file ``fi`` into ``db``'s scratch tables
    (:data:`_SCRATCH`): those of the open store ``src`` (an in-memory copy, attached to
    ``db`` as :data:`_ATTACHED` for the copy: outside a transaction, as SQLite attaches), or
    ``db``'s own (``src`` None). The rows never become Python objects: building a tuple per
    sample and inserting it again took 1.2 s for the 188,767 samples of the H200 files on a
    2-core VM, copying them in SQL 0.17 s."""
    where = "main"
    if src is not None:
        db.execute(f"ATTACH ':memory:' AS {_ATTACHED}")
        db.deserialize(src.serialize(), name=_ATTACHED)
        where = _ATTACHED
    try:
        db.execute(f"INSERT INTO temp.merge_samples SELECT {fi:d}, result_id, phase, idx, "
                   f"step_time_s, loss FROM {where}.samples")
        db.execute(f"INSERT INTO temp.merge_timelines SELECT {fi:d}, result_id, format, data "
                   f"FROM {where}.timelines")
    finally:
        if src is not None:
            db.execute(f"DETACH {_ATTACHED}")


#: The schema name of a source attached for :func:`_stage`.
_ATTACHED = "merge_source"


def merge_stores(dest: str | Path, sources: Sequence[str | Path], *, seal_rows: bool = True,
                 damaged_into: dict[str, dict[int, str]] | None = None) -> dict[str, Any]:
    """Combine results files: ``dest`` becomes the union of its own rows and every source's.

    For results measured in pieces on different machines or calls (sweep shards, a sweep
    resumed from an older copy of its file). Every result row with its raw samples and its
    per-kernel timeline (``--timeline``), every collective benchmark run and every sweep
    record is kept once: a result that is in several
    files (same run key, ``created_at`` and ``result_json``) is stored once, as is a collective
    run (``run_id``) or a sweep record. Results are written in order of ``created_at`` (then
    file, then row), so "the newest row of a point" (:meth:`ResultStore.rows`) stays the newest
    by time.

    The device profiles of ``dlperf calibrate`` (``meta`` keys :data:`PROFILE_PREFIX`) are
    copied too: a source's replaces one of the same name in ``dest`` or an earlier source
    (a merge dropped them, so ``predict --gpu NAME`` found none in the merged file).

    Sources are read as :class:`ResultStore` ``read_only`` (a consistent copy in memory,
    migrated there to the current schema); the source files are not changed. ``dest`` is
    rewritten inside one SQLite write transaction: a failure or a kill leaves it as it was, a
    sweep writing into it at the same time waits for the merge (up to the store's lock timeout,
    ``DLPERF_DB_TIMEOUT_S``) and then goes on writing into the merged file, and the file stays where it is (a symbolic link
    keeps pointing at it, its permissions are kept). Row ids of ``dest`` change.

    Args:
        dest: the results file to write; it may not exist yet (then it is created).
        sources: results files to add (at least one; ``dest`` itself among them is skipped).
        seal_rows: write each row's checksums (:func:`dlperf.results.rowcheck.seal`). Off
            only for a copy this process reads and then removes (:func:`open_results`): its
            rows were checked in their sources, and sealing reads every sample back (half
            the cost of reading a folder of results).
        damaged_into: where to put each source's damaged rows (``str(source)`` -> row id ->
            what is wrong) as it is read, instead of warning of them (:func:`open_results`
            says them, whether the folder was merged or its merged copy kept).

    A damaged row of a source (:mod:`dlperf.results.rowcheck`: wrong types, values out of
    bounds, a checksum that does not match) is not copied: a warning names it and
    ``"skipped"`` counts it (the source keeps it). A ``dest`` that holds damaged rows is
    refused (rewriting it would drop them): merge into a new file instead. Every row written
    gets its checksums (with ``seal_rows``).

    Returns:
        ``{"results": n, "samples": n, "collectives": n, "sweeps": n, "profiles": n}``: the
        totals in ``dest`` afterwards, ``"added": {source: {"results": n, "collectives": n,
        "sweeps": n, "profiles": n}}``:
        what each source added that neither ``dest`` nor an earlier source held,
        ``"skipped": {source: n}``: its damaged rows not copied, and ``"origin": {result id
        in dest: the file it came from}`` (``dest`` itself for its own rows; a row held by
        several files: the first of them).

    Raises:
        ConfigError: no sources, a source that does not exist or is a folder, a file that
            is not a dlperf results database, or a ``dest`` with damaged rows.
    """
    dest = Path(dest)
    srcs = [Path(s) for s in dict.fromkeys(Path(s) for s in sources)]
    if not srcs:
        raise ConfigError("nothing to merge: name at least one results file to add")
    for s in srcs:
        if s.is_dir():
            raise ConfigError(f"source {str(s)!r} is a folder; give a results file")
        if not s.is_file():
            raise ConfigError(f"results file {str(s)!r} does not exist; give an existing file")
    srcs = [s for s in srcs if not same_file(s, dest)]
    with ExitStack() as opened:
        return _merge(dest, srcs, opened, seal_rows, damaged_into)


def _merge(dest: Path, srcs: list[Path], opened: ExitStack, seal_rows: bool,
           damaged_into: dict[str, dict[int, str]] | None) -> dict[str, Any]:
    """:func:`merge_stores` of checked paths; the sources' stores stay open (on ``opened``)
    until their samples are copied."""
    read, skipped, profiles, stores = [], {}, [], []
    for s in srcs:
        # a copy in memory, migrated there
        st = opened.enter_context(ResultStore(s, read_only=True))
        bad = st.damaged(warn=damaged_into is None)
        if damaged_into is not None:
            damaged_into[str(s)] = dict(bad)
        skipped[str(s)] = len(bad)
        read.append((str(s), _read_store(st._db, set(bad))))
        profiles.append((str(s), _profiles(st._db)))
        stores.append(st)
    with ResultStore(dest) as out:
        db = out._db
        with sqlite_errors(dest, "copying the samples"):
            for table, schema in _SCRATCH.items():  # temp: no lock on dest
                db.execute(f"CREATE TEMP TABLE {table} ({schema})")
            for fi, st in enumerate(stores, 1):
                _stage(db, fi, st._db)
                st.close()  # its copy in memory is no longer needed
        with out.transaction():  # BEGIN IMMEDIATE: dest's rows read and rewritten at once
            own_bad = scan(db, COLUMNS)
            if own_bad:
                raise ConfigError(describe(dest, own_bad, doing="would be dropped by the "
                                           "merge, so nothing was merged")
                                  + f"; give a new file for --db (e.g. {dest.stem}-merged.db) "
                                  f"and name {str(dest)!r} among the files to merge")
            _stage(db, 0, None)
            files = [(None, _read_store(db))] + read
            results: dict[tuple, tuple] = {}
            collectives: dict[str, list[dict]] = {}
            sweeps: dict[tuple, None] = {}
            added: dict[str, dict[str, int]] = {}
            for fi, (name, (res, colls, swps)) in enumerate(files):
                n = {"results": 0, "collectives": 0, "sweeps": 0}
                for row in res:
                    ident = (row["run_key"], row.get("created_at"), row.get("result_json"))
                    if ident not in results:
                        results[ident] = ((row.get("created_at") or "", fi, row["id"]), row)
                        n["results"] += 1
                runs: dict[str, list[dict]] = {}
                for c in colls:
                    runs.setdefault(c["run_id"], []).append(c)
                for run_id, rows in runs.items():
                    if run_id not in collectives:
                        collectives[run_id] = rows
                        n["collectives"] += 1
                for sw in swps:
                    if sw not in sweeps:
                        sweeps[sw] = None
                        n["sweeps"] += 1
                if name is not None:
                    added[name] = n
            db.execute("DELETE FROM samples")
            db.execute("DELETE FROM timelines")
            db.execute("DELETE FROM results")
            db.execute("DELETE FROM collectives")
            db.execute("DELETE FROM sweeps")
            db.execute(ROW_SUMS_SQL)
            db.execute("DELETE FROM row_sums")
            cols = list(COLUMNS)
            origin: dict[int, str] = {}
            ids = []
            for key, row in sorted(results.values(), key=lambda v: v[0]):
                cur = db.execute(
                    f"INSERT INTO results ({', '.join(cols)}) VALUES "
                    f"({', '.join('?' * len(cols))})", [row.get(c) for c in cols])
                rid = cur.lastrowid
                assert rid is not None  # sqlite sets it after an INSERT
                origin[rid] = files[key[1]][0] or str(dest)
                ids.append((key[1], key[2], rid))
            db.executemany("INSERT INTO temp.merge_ids VALUES (?, ?, ?)", ids)
            n_samples = db.execute(
                "INSERT INTO samples SELECT i.new, s.phase, s.idx, s.step_time_s, s.loss "
                "FROM temp.merge_samples s JOIN temp.merge_ids i "
                "ON i.file = s.file AND i.old = s.result_id").rowcount
            db.execute("INSERT INTO timelines SELECT i.new, t.format, t.data "
                       "FROM temp.merge_timelines t JOIN temp.merge_ids i "
                       "ON i.file = t.file AND i.old = t.result_id")
            for table in _SCRATCH:
                db.execute(f"DROP TABLE temp.{table}")
            if seal_rows:
                for _, _, rid in ids:
                    seal(db, rid, cols)
            for rows in collectives.values():
                db.executemany(
                    f"INSERT INTO collectives ({', '.join(COLLECTIVE_COLUMNS)}) VALUES "
                    f"({', '.join('?' * len(COLLECTIVE_COLUMNS))})",
                    [[c[k] for k in COLLECTIVE_COLUMNS] for c in rows])
            db.executemany("INSERT INTO sweeps VALUES (?, ?, ?)", list(sweeps))
            # device profiles (meta): dest's, then each source's; a later file's profile of
            # the same name replaces an earlier one (as dlperf.perfmodel.hardware.
            # stored_profiles reads several files)
            have = _profiles(db)
            for name, profs in profiles:
                new = {k: v for k, v in profs.items() if have.get(k) != v}
                added[name]["profiles"] = len(new)
                have.update(new)
                db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", list(new.items()))
    return {"results": len(results), "added": added, "samples": n_samples,
            "collectives": len(collectives), "sweeps": len(sweeps), "skipped": skipped,
            "profiles": len(have), "origin": origin}


@contextmanager
def open_results(path: str | Path) -> Iterator[ResultStore]:
    """A results file, or a folder of them read as one, opened read-only.

    A folder stands for every ``*.db`` in it (:func:`dlperf.results.dbfile.results_files`,
    the resolver ``predict`` uses); two or more are merged (:func:`merge_stores`: every row
    once, the newest row of a point the newest by time) into a copy in memory, named ``path``
    in messages. The merged copy is kept in the user's cache (:mod:`dlperf.results.foldercache`,
    keyed by the files' bytes and the code that reads them) and read back while no file
    changes: the same content, and the same warning per file of its damaged rows
    (:class:`~dlperf.results.rowcheck.DamagedRows`), as merging them again. The files
    themselves are only read.

    Raises:
        ConfigError: a folder without ``*.db``; what :class:`ResultStore` refuses.
    """
    files = results_files(path)
    if len(files) == 1:
        with ResultStore(files[0], read_only=True) as store:
            yield store
        return
    from dlperf.results import foldercache
    from dlperf.results.dbfile import db_timeout_s

    db_timeout_s()  # a bad $DLPERF_DB_TIMEOUT_S is refused as reading the files refuses it
    key = foldercache.folder_key(files)
    got = None
    data = foldercache.load(key) if key is not None else None
    if data is not None:
        try:
            got = foldercache.unpack(data, len(files))
        except ValueError as e:
            import warnings

            from dlperf.jsoncache import CacheIgnored

            warnings.warn(f"ignored the cached copy of {str(path)!r}: {e}; reading the "
                          "results files again", CacheIgnored, stacklevel=2)
    if got is None:
        got = _merge_folder(files, key)
    db, origin, damaged = got
    _say_damaged(files, damaged)
    with ResultStore(path, memory=db) as store:
        store.vouch_scanned()  # every row was scanned in its source
        _ORIGINS[store] = {rid: files[i] for rid, i in origin.items()}
        yield store


def _merge_folder(files: list[str], key: str | None
                  ) -> tuple[sqlite3.Connection, dict[int, int], list[dict[int, str]]]:
    """The merged copy of ``files`` (:func:`dlperf.results.foldercache.unpack`), kept under
    ``key`` when no file changed while it was made. A failure says the damaged rows found
    before it (as each file's were said when it was read) and is raised."""
    from dlperf.results import foldercache
    from dlperf.tempdirs import owned_tempdir

    found: dict[str, dict[int, str]] = {}
    index = {str(Path(f)): i for i, f in enumerate(files)}
    try:
        with owned_tempdir("dlperf-union-") as tmp:
            union = Path(tmp) / "union.db"
            done = merge_stores(union, list[str | Path](files), seal_rows=False,
                                damaged_into=found)  # reads (and refuses) every source first
            data = foldercache.pack(union, {rid: index[src] for rid, src in
                                            done["origin"].items()},
                                    [found.get(str(Path(f)), {}) for f in files])
    except BaseException:
        _say_damaged(files, [found.get(str(Path(f)), {}) for f in files])
        raise
    if key is not None and foldercache.folder_key(files) == key:
        foldercache.save(key, data)
    return foldercache.unpack(data, len(files))


def _say_damaged(files: list[str], damaged: list[dict[int, str]]) -> None:
    """One :class:`~dlperf.results.rowcheck.DamagedRows` warning per file of ``files`` with
    damaged rows (``damaged``, in the same order), as :meth:`ResultStore.damaged` gives it."""
    import warnings

    from dlperf.results.rowcheck import DamagedRows

    for f, bad in zip(files, damaged):
        if bad:
            warnings.warn(describe(Path(f), bad), DamagedRows, stacklevel=2)


#: The results file each result of a folder's merged copy came from (:func:`open_results`).
_ORIGINS: weakref.WeakKeyDictionary[ResultStore, dict[int, str]] = weakref.WeakKeyDictionary()


def origin_of(store: ResultStore) -> Callable[[int], str]:
    """result id -> the results file it was read from: for a folder read as one
    (:func:`open_results`) the file of the folder that held it, else the store's own file."""
    where = _ORIGINS.get(store, {})
    own = str(store.path)
    return lambda rid: where.get(rid, own)
