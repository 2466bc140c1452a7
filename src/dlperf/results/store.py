"""SQLite result store: versioned schema, raw samples, one transaction per result.

Tables:
    ``meta(key, value)``          ``schema_version`` and the dlperf version that created it.
    ``results(...)``              one row per measured (or failed) configuration: identity
                                  columns, the statistics, throughput, memory, and the full
                                  result as JSON (config, env, versions, flags) in
                                  ``result_json``.
    ``samples(result_id, phase, idx, step_time_s, loss)``
                                  every raw per-iteration time and loss (phases ``first``,
                                  ``warmup``, ``measure``; with ``--breakdown`` also
                                  ``breakdown:<phase>``, ``breakdown:host_<phase>``,
                                  ``breakdown:total`` and ``trace:<phase>``/``trace:dispatch``),
                                  so statistics can be recomputed and the performance model
                                  refitted later; with real data through a pipeline also phase
                                  ``data_wait``: the time each measured iteration waited for its
                                  batch (in ``step_time_s``; no loss); for data-parallel runs
                                  the phases hold the slowest rank's times and the ranks' mean
                                  loss, and each rank's own are under ``rank<r>:<phase>``.
    ``sweeps(name, created_at, config_json)``  the sweep files that wrote into this store.
    ``collectives``, ``timelines``: :data:`TABLES_ADDED` (:mod:`dlperf.results.timelines`).

Each :meth:`ResultStore.add` is one transaction, so a process killed at any moment leaves
every earlier result intact and no half-written one. The store never imports a framework.

It stores :class:`~dlperf.results.schema.RunRecord` objects (a result dict is read as one): the
columns come from the record's typed parts (:func:`flatten`), ``result_json`` is its flat dict
without raw samples. :meth:`ResultStore.records` reads them back as records (upgraded to the
current schema, raw samples from ``samples``); :meth:`ResultStore.rows` gives the columns.
The schema versions and migrations: :mod:`dlperf.results.migrations`; merging files:
:mod:`dlperf.results.merge`.

Opening, locking and the errors of a file: :mod:`dlperf.results.dbfile` (a reader works on an
in-memory copy, a writer waits for another's lock, a locked file, full disk, read-only or
damaged file is a :class:`~dlperf.results.dbfile.StoreError` that says what to do). Results that
could not be stored are kept beside the file and stored by the next writer
(:mod:`dlperf.results.unsaved`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import sqlite3
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dlperf.errors import ConfigError
from dlperf.results import timelines
from dlperf.results.dbfile import (
    StoreBusy,
    StoreError,
    begin_immediate,
    check_intact,
    check_layout,
    check_side_names,
    open_copy,
    open_writer,
    parse_version,
    sqlite_errors,
)
from dlperf.results.migrations import (
    DATA_MIGRATIONS,
    MIGRATIONS,
    SCHEMA_VERSION,
    TABLES_ADDED,
    migrate_file,
)
from dlperf.results.rowcheck import (
    ROW_SUMS_SQL,
    DamagedRows,
    collective_problem,
    describe,
    scan,
    seal,
    seal_missing,
)
from dlperf.results.rows import BOOL_COLUMNS, COLUMNS, SUMMARY_KEYS, flatten
from dlperf.results.schema import RunRecord
from dlperf.results.unsaved import quarantine, read_unsaved, unsaved_dir, unsaved_files
from dlperf.results.view import attach_samples, record_of, result_of

__all__ = ["ResultStore", "check_writer", "COLUMNS", "SCHEMA_VERSION", "MIGRATIONS",
           "DATA_MIGRATIONS", "TABLES_ADDED", "COLLECTIVE_COLUMNS", "SUMMARY_KEYS", "StoreError", "flatten",
           "record_of", "result_of", "stored_keys"]

#: Columns of ``collectives`` after ``id`` (TABLES_ADDED[7]), in order.
COLLECTIVE_COLUMNS = ("run_id", "created_at", "benchmark", "backend", "nranks", "dtype",
                      "size_bytes", "count", "time_s", "algbw_gbps", "busbw_gbps", "imbalance",
                      "wrong", "device_name", "git_sha", "run_json")


class _Refused(Exception):
    """A kept result file that is not stored (:meth:`ResultStore._store_unsaved`)."""


class ResultStore:
    """A results database file (created if missing).

    ``read_only=True`` (``dlperf results``, ``report``, ``compare``, ``predict``, merge's
    sources): the file is read into memory and used from there (:func:`~dlperf.results.dbfile.
    open_copy`), so reading never changes it: a file of an older schema is migrated in the copy
    only, and writes go nowhere. A reader refuses a file that does not exist or is empty
    (0 bytes), rather than reading it as an empty store. Opened to write, the file gets the
    results kept beside it (:mod:`dlperf.results.unsaved`) stored first. A writer given an
    empty (0-byte) file starts a new store in it and says so on stderr (one line, also in
    :attr:`notice`): there is nothing in such a file to lose (SQLite writes a database's
    first page at its first commit, so a file it left empty never held a result; one emptied
    by something else has lost its content already, and refusing would not bring it back),
    and a ``touch r.db`` is a fine way to name a new store. A 0-byte file beside a hot
    journal is rolled back by SQLite first, and then is no new store.

    ``memory`` (an open in-memory database, which the store takes and closes): a read-only
    store of that content, named ``path`` in messages; no file is read, and its pages are not
    checked again (``PRAGMA quick_check``): for content this process made or verified, the
    merged copy of a folder (:func:`dlperf.results.merge.open_results`).

    Raises:
        StoreError (a ConfigError): the file is not a dlperf SQLite database, is damaged,
            claims a schema version it does not have the tables of, was written by a newer
            schema, is locked by another process for longer than the timeout, or cannot be
            read or written (:func:`~dlperf.results.dbfile.store_error`).
    """

    def __init__(self, path: str | Path, read_only: bool = False, *,
                 memory: sqlite3.Connection | None = None) -> None:
        self.path = Path(path)
        self.read_only = read_only or memory is not None
        was_empty = False
        if memory is not None:
            self._db = memory
        elif self.path.is_dir():
            raise StoreError(f"results file {str(self.path)!r} is a folder; give a results "
                             f"file, e.g. {self.path / 'results.db'}")
        elif read_only:  # a copy in memory: an older file is migrated there, not on disk
            if not self.path.is_file():
                raise StoreError(f"results file {str(self.path)!r} does not exist")
            if self.path.stat().st_size == 0:
                raise StoreError(f"results file {str(self.path)!r} is empty (0 bytes), not a "
                                 "dlperf results database; give another --db path")
            self._db = open_copy(self.path)
        else:
            if self.path.parent and not self.path.parent.exists():
                self.path.parent.mkdir(parents=True, exist_ok=True)
            check_side_names(self.path)  # never a file SQLite would delete as a journal
            was_empty = self.path.is_file() and self.path.stat().st_size == 0
            self._db = open_writer(self.path)
        #: A line saying what opening did that the user should know (a new store in an empty
        #: file), or None; printed on stderr when set.
        self.notice: str | None = None
        self._scanned, self._damaged = 0, dict[int, str]()
        try:
            self._db.row_factory = sqlite3.Row
            self._claimed: int | None = None  # the version the file said it had
            if memory is None:
                check_intact(self._db, self.path)
            with sqlite_errors(self.path, "opening it"):
                self._init()
            if not self.read_only and was_empty and self._claimed is None:
                self.notice = (f"note: results file {str(self.path)!r} was empty (0 bytes); "
                               f"started a new dlperf results database in it")
                print(self.notice, file=sys.stderr)
            if not self.read_only:
                self._store_unsaved()
        except BaseException:
            self._db.close()
            raise

    def _init(self) -> None:
        db = self._db
        db.execute("PRAGMA foreign_keys = ON")
        with self.transaction("opening it"):
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if tables and "meta" not in tables:
                # Somebody else's SQLite file: never add dlperf's tables to it.
                raise StoreError(f"{self.path} is an SQLite database but not a dlperf results "
                                 f"database (it has tables {', '.join(sorted(tables))}); give "
                                 "another --db path")
            db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
            row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if row is None and tables:
                raise StoreError(f"{self.path} has a 'meta' table but no dlperf schema version: "
                                 "not a dlperf results database; give another --db path")
            if row is None:
                self._create()
            else:
                self._claimed = parse_version(row[0], self.path, SCHEMA_VERSION)
                migrate_file(db, self._claimed)
            # inside the transaction: a file that fails the check is rolled back unchanged
            check_layout(db, self.path, self._claimed or SCHEMA_VERSION, COLUMNS)
            if not self.read_only:  # rows stored without checksums get them (rowcheck)
                seal_missing(db, COLUMNS, all_rows=(self._claimed or SCHEMA_VERSION)
                             < SCHEMA_VERSION)

    def _create(self) -> None:
        """The tables of an empty file, at :data:`SCHEMA_VERSION`."""
        db = self._db
        cols = ", ".join(f"{k} {t}" for k, t in COLUMNS.items())
        db.execute(f"CREATE TABLE results (id INTEGER PRIMARY KEY AUTOINCREMENT, {cols})")
        db.execute("CREATE INDEX results_run_key ON results(run_key)")
        db.execute("CREATE TABLE samples (result_id INTEGER NOT NULL REFERENCES "
                   "results(id) ON DELETE CASCADE, phase TEXT NOT NULL, idx INTEGER NOT "
                   "NULL, step_time_s REAL, loss REAL, PRIMARY KEY (result_id, phase, idx))")
        db.execute("CREATE TABLE sweeps (name TEXT, created_at TEXT, config_json TEXT)")
        for sql in TABLES_ADDED.values():
            db.execute(sql)
        db.execute(ROW_SUMS_SQL)
        from dlperf import __version__
        db.executemany("INSERT INTO meta VALUES (?, ?)",
                       [("schema_version", str(SCHEMA_VERSION)), ("created_by", __version__)])

    def _store_unsaved(self) -> None:
        """Store the results kept beside the file (:mod:`dlperf.results.unsaved`), each once
        (one transaction per file, skipped when its run key and ``created_at`` are stored),
        then delete their files. A file that is not a kept result, or whose result would be a
        damaged row (:mod:`dlperf.results.rowcheck`), is moved to the folder's
        ``quarantine/`` with a warning (:func:`~dlperf.results.unsaved.quarantine`): never
        stored, never deleted, never in the way of the next write."""
        import warnings

        for f in unsaved_files(self.path):
            try:
                got = read_unsaved(f)
                if got is None:
                    raise _Refused("it is not a kept result (unreadable, or not JSON of one)")
                result, sweep = got
                rec = RunRecord.from_dict(result)
                if rec.identity.run_key is None or rec.identity.status is None:
                    raise _Refused("it has no run_key or status")
                with self.transaction("storing a result kept beside it"):
                    if not self._db.execute(
                            "SELECT 1 FROM results WHERE run_key=? AND created_at IS ? LIMIT 1",
                            (rec.identity.run_key, rec.identity.created_at)).fetchone():
                        rid = self._insert(rec, sweep)
                        bad = scan(self._db, COLUMNS, since_id=rid - 1).get(rid)
                        if bad:
                            raise _Refused(f"its result would be a damaged row: {bad}")
            except (StoreBusy, KeyboardInterrupt):
                raise
            except Exception as e:  # noqa: BLE001 - any file that cannot be stored is set aside
                why = str(e) if isinstance(e, _Refused) else f"{type(e).__name__}: {e}"
                moved = quarantine(f)
                warnings.warn(f"the kept result {str(f)!r} could not be stored ({why[:300]}); "
                              + (f"moved to {str(moved)!r}" if moved else
                                 "it could not be moved aside either"), DamagedRows,
                              stacklevel=2)
                continue
            f.unlink(missing_ok=True)
        if unsaved_dir(self.path).is_dir():
            try:
                unsaved_dir(self.path).rmdir()  # only when empty
            except OSError:
                pass

    @contextmanager
    def transaction(self, doing: str = "writing to it") -> Iterator[None]:
        """Context manager: BEGIN IMMEDIATE ... COMMIT (ROLLBACK on error, also when
        interrupted). Waits for another process's lock up to the store's timeout
        (:func:`~dlperf.results.dbfile.begin_immediate`: Ctrl-C acts, a long wait says so).

        Raises:
            StoreError: an SQLite error in the block or at COMMIT, in words
                (:func:`~dlperf.results.dbfile.store_error`; ``doing`` says what failed).
        """
        db = self._db
        with sqlite_errors(self.path, doing):
            begin_immediate(db, self.path, doing)
            try:
                yield
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    try:
                        db.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass
                raise

    @property
    def schema_version(self) -> int:
        """The schema version stored in the file."""
        return int(self._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0])

    def add(self, result: RunRecord | Mapping[str, Any], sweep: str | None = None) -> int:
        """Store one record (or result dict, read as one) and its raw samples in one
        transaction; return its row id.

        Raises:
            ConfigError: the record has no ``run_key`` or ``status``, or was written by a
                newer dlperf.
            StoreError: the file stayed locked, the disk is full, the file is read-only, ...
                (the write is rolled back: nothing stored before is lost).
        """
        rec = result if isinstance(result, RunRecord) else RunRecord.from_dict(result)
        if rec.identity.run_key is None or rec.identity.status is None:
            raise ConfigError("a result needs its identity (run_key and status) to be stored; "
                              "make failures with dlperf.results.schema.failure_record")
        with self.transaction("storing a result"):
            return self._insert(rec, sweep)

    def _insert(self, rec: RunRecord, sweep: str | None) -> int:
        """INSERT ``rec``'s row and raw samples (inside the caller's transaction); its id."""
        row = flatten(rec, sweep)
        cols = list(row)
        cur = self._db.execute(
            f"INSERT INTO results ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
            [row[c] for c in cols])
        rid = cur.lastrowid
        assert rid is not None  # sqlite sets it after an INSERT
        losses = rec.losses or {}
        recs = []
        for phase, times in (rec.samples or {}).items():
            ls = losses.get(phase) or []
            for i, t in enumerate(times):
                recs.append((rid, phase, i, t, ls[i] if i < len(ls) else None))
        self._db.executemany("INSERT INTO samples VALUES (?, ?, ?, ?, ?)", recs)
        timelines.save(self._db, rid, rec.timeline)
        seal(self._db, rid, COLUMNS)
        return rid

    def add_collectives(self, report: dict[str, Any], created_at: str) -> str:
        """Store one collective benchmark run (the JSON of ``dlperf.comm.allreduce``: its
        ``rows`` one per message size, with ``size_bytes``, ``count``, ``time_s``,
        ``algbw_GBps``, ``busbw_GBps``, ``imbalance``, ``wrong``) in one transaction; return the
        run id (16 hex digits of the run's content; a run stored before is not stored again).

        Raises:
            ConfigError: the report has no rows, or a row lacks ``size_bytes``/``time_s``.
        """
        rows = report.get("rows") or []
        if not rows or any("size_bytes" not in r or "time_s" not in r for r in rows):
            raise ConfigError("not an all-reduce report: it needs 'rows' with 'size_bytes' and "
                              "'time_s' (the JSON that dlperf allreduce --json writes)")
        meta = {k: v for k, v in report.items() if k != "rows"}
        blob = json.dumps(report, sort_keys=True, default=str)
        run_id = hashlib.sha256(blob.encode()).hexdigest()[:16]
        fw = report.get("framework") or {}
        git = ((report.get("env") or {}).get("git") or {})
        sha = git.get("sha") if isinstance(git, dict) else None
        with self.transaction():
            if self._db.execute("SELECT 1 FROM collectives WHERE run_id=? LIMIT 1",
                                (run_id,)).fetchone():
                return run_id  # the same run stored before: nothing twice
            self._db.executemany(
                f"INSERT INTO collectives ({', '.join(COLLECTIVE_COLUMNS)}) VALUES "
                f"({', '.join('?' * len(COLLECTIVE_COLUMNS))})",
                [(run_id, created_at, report.get("benchmark", "allreduce"), report.get("backend"),
                  r.get("nranks", report.get("nranks")), r.get("dtype", report.get("dtype")),
                  r["size_bytes"], r.get("count"), r["time_s"], r.get("algbw_GBps"),
                  r.get("busbw_GBps"), r.get("imbalance"), r.get("wrong"),
                  fw.get("device_name"), sha, json.dumps(meta, default=str)) for r in rows])
        return run_id

    def collectives(self) -> list[dict[str, Any]]:
        """Every stored collective benchmark row (without ``run_json``), oldest run first."""
        cur = self._db.execute(
            "SELECT id, run_id, created_at, benchmark, backend, nranks, dtype, size_bytes, count,"
            " time_s, algbw_gbps, busbw_gbps, imbalance, wrong, device_name, git_sha "
            "FROM collectives ORDER BY id")
        return [d for r in cur.fetchall() if not collective_problem(d := dict(r))]

    def collectives_env(self) -> dict[str, Any] | None:
        """The environment stored with the newest collective benchmark run, or None."""
        row = self._db.execute("SELECT run_json FROM collectives ORDER BY id DESC LIMIT 1"
                               ).fetchone()
        try:
            doc = json.loads(row[0]) if row and isinstance(row[0], str) else None
        except (ValueError, RecursionError):
            return None
        env = doc.get("env") if isinstance(doc, dict) else None
        return env if isinstance(env, dict) else None

    def add_sweep(self, name: str, config: dict[str, Any], created_at: str) -> None:
        """Record that sweep ``name`` (with its full config) wrote into this store."""
        with self.transaction():
            self._db.execute("INSERT INTO sweeps VALUES (?, ?, ?)",
                             (name, created_at, json.dumps(config, default=str)))

    def done_keys(self, include_failed: bool = True) -> set[str]:
        """Run keys that already have a final result.

        A measurement outcome is final: ``ok``, and also ``oom``, ``nan_loss``, ``crash`` and
        ``timeout`` (they are results of the configuration). ``error`` and ``unavailable``
        (a missing data file, a framework not installed) are not: fixing them and running
        again should measure the point. With ``include_failed=False`` only ``ok`` counts.
        """
        q = "SELECT id, run_key FROM results WHERE status NOT IN ('error', 'unavailable')"
        if not include_failed:
            q = "SELECT id, run_key FROM results WHERE status = 'ok'"
        bad = self.damaged()
        return {r[1] for r in self._db.execute(q) if r[0] not in bad}

    def vouch_scanned(self) -> None:
        """Take the rows the file holds now as checked, so :meth:`damaged` scans only rows
        added later: for a file this process has just written from rows it checked (the
        merged copy of a folder, :func:`dlperf.results.merge.open_results`, in a folder only
        this user may write), where a second scan would find nothing and costs as much as
        reading every source again."""
        self._scanned = self._db.execute(
            "SELECT COALESCE(MAX(id), 0) FROM results").fetchone()[0]

    def damaged(self, *, warn: bool = True,
                records: dict[int, tuple[str, RunRecord]] | None = None) -> dict[int, str]:
        """The damaged rows of the file (:func:`dlperf.results.rowcheck.scan`: wrong types,
        values out of bounds, a record that does not read, a checksum that does not match):
        row id -> what is wrong. Readers skip them; a :class:`~dlperf.results.rowcheck.
        DamagedRows` warning names new ones once per store (``warn=False``: not this time,
        for a caller that says it: :func:`dlperf.results.merge.open_results`). Rows are
        scanned once; rows added later (by this store or another process) when next asked.
        ``records``: where the rows scanned now leave their records (:func:`~dlperf.results.
        rowcheck.scan`'s ``records``)."""
        top = self._db.execute("SELECT COALESCE(MAX(id), 0) FROM results").fetchone()[0]
        if top > self._scanned:
            found = scan(self._db, COLUMNS, since_id=self._scanned, records=records)
            self._scanned = top
            self._damaged.update(found)
            if found and warn:
                import warnings

                warnings.warn(describe(self.path, found), DamagedRows, stacklevel=3)
        return self._damaged

    def rows(self, *, latest: bool = True, **filters: Any) -> list[dict[str, Any]]:
        """Result rows as dicts (booleans restored), oldest first.

        Args:
            latest: keep only the newest row per run key (re-runs replace older ones in views).
            filters: column=value (or column=[values]) equality filters, e.g. ``model="lstm"``.

        Raises:
            ConfigError: a filter names an unknown column.
        """
        return self._rows(latest, filters)

    def _rows(self, latest: bool, filters: Mapping[str, Any],
              records: dict[int, tuple[str, RunRecord]] | None = None) -> list[dict[str, Any]]:
        where: list[str] = []
        args: list[Any] = []
        for k, v in filters.items():
            if v is None:
                continue
            if k not in COLUMNS:
                raise ConfigError(f"unknown result column {k!r}; columns: {', '.join(COLUMNS)}")
            vals = v if isinstance(v, (list, tuple)) else [v]
            where.append(f"{k} IN ({', '.join('?' * len(vals))})")
            args.extend(vals)
        q = "SELECT * FROM results"
        if where:
            q += " WHERE " + " AND ".join(where)
        q += " ORDER BY id"
        bad = self.damaged(records=records)
        out = []
        for r in self._db.execute(q, args):
            d = dict(r)
            if d["id"] in bad:
                continue
            for k in BOOL_COLUMNS:
                if d.get(k) is not None:
                    d[k] = bool(d[k])
            out.append(d)
        if latest:  # the newest intact row of each point, whether the filters take it or not
            newest: dict[Any, int] = {}
            for rid, key in self._db.execute("SELECT id, run_key FROM results ORDER BY id"):
                if rid not in bad:
                    newest[key] = rid
            keep = set(newest.values())
            out = [d for d in out if d["id"] in keep]
        return out

    def records(self, *, latest: bool = True, samples: bool = True, lazy_samples: bool = False,
                **filters: Any) -> list[RunRecord]:
        """The rows of :meth:`rows` (same ``latest`` and column filters) as
        :class:`~dlperf.results.schema.RunRecord` objects, oldest first (:func:`record_of`),
        with their raw samples unless ``samples=False``. With ``lazy_samples`` each record
        reads its samples from this store when they are first asked for
        (:meth:`RunRecord.load_samples`: a reader that needs the samples of a few records
        does not decode every row's); the store must then stay open until they are.

        Raises:
            ConfigError: a filter names an unknown column; a row was written by a newer dlperf.
        """
        # the records the first scan of the rows checks their JSON as (a filtered read keeps
        # none: the rows it leaves out would be held until it returns)
        parsed: dict[int, tuple[str, RunRecord]] | None = None if filters else {}
        rows = self._rows(latest, filters, parsed)
        done = parsed or {}
        if not (samples and lazy_samples):
            return [record_of(r, self.samples(r["id"]) if samples else None,
                              parsed=done.get(r["id"])) for r in rows]
        out = []
        for r in rows:
            rec = record_of(r, parsed=done.get(r["id"]))
            rec._samples_from = functools.partial(self._attach_samples, r["id"])
            out.append(rec)
        return out

    def _attach_samples(self, result_id: int, rec: RunRecord) -> None:
        attach_samples(rec, self.samples(result_id))

    def samples(self, result_id: int) -> dict[str, dict[str, list[float]]]:
        """Raw samples of one result: ``{phase: {"step_time_s": [...], "loss": [...]}}``."""
        out: dict[str, dict[str, list[float]]] = {}
        for phase, t, loss in self._db.execute(
                "SELECT phase, step_time_s, loss FROM samples WHERE result_id=? ORDER BY phase, idx",
                (result_id,)):
            d = out.setdefault(phase, {"step_time_s": [], "loss": []})
            d["step_time_s"].append(t)
            d["loss"].append(loss)
        return out

    def close(self) -> None:
        """Close the connection."""
        self._db.close()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def check_writer(path: str | Path) -> None:
    """Refuse what opening ``path`` to write would refuse (:class:`ResultStore`), without
    changing it: for ``dlperf sweep --dry-run``, which must not say "stored" of a file the
    sweep itself refuses. A file or folder that cannot be written is refused; an existing
    non-empty file is copied (with its journal) to a temporary folder and opened there as a
    writer opens it (hot journal rolled back, migrated, layout and values checked, checksums
    made), so every refusal of the run is met; the message names ``path``.

    Raises:
        StoreError: naming ``path`` and what to do.
    """
    import os
    import shutil

    p = Path(path)
    if p.is_dir():
        raise StoreError(f"results file {str(p)!r} is a folder; give a results file, e.g. "
                         f"{p / 'results.db'}")
    folder = next((a for a in [p.absolute().parent, *p.absolute().parents] if a.exists()),
                  None)
    if folder is None or not folder.is_dir():
        raise StoreError(f"results file {str(p)!r} cannot be made: {str(folder)!r} is not a "
                         "folder; give another --db path")
    ro = StoreError(f"{str(p)!r} cannot be written (a read-only file, folder or file system); "
                    "nothing stored in it is lost. Make it writable, or give another --db path")
    if not p.exists():
        if not os.access(folder, os.W_OK | os.X_OK):
            raise ro
        return
    if not os.access(p, os.R_OK | os.W_OK) or not os.access(p.absolute().parent,
                                                            os.W_OK | os.X_OK):
        raise ro
    if p.stat().st_size == 0:
        return
    from dlperf.tempdirs import owned_tempdir

    with owned_tempdir("dlperf-dry-") as tmp:
        copy = Path(tmp) / "copy.db"
        shutil.copyfile(p, copy)
        for side in ("-journal", "-wal"):
            if Path(f"{p}{side}").is_file():
                shutil.copyfile(f"{p}{side}", f"{copy}{side}")
        try:
            ResultStore(copy).close()
        except StoreError as e:
            raise type(e)(str(e).replace(str(copy), str(p))) from None


def stored_keys(path: str | Path, include_failed: bool = True) -> set[str]:
    """:meth:`ResultStore.done_keys` of the file at ``path``, read without changing it (an
    in-memory copy, as every reader: :class:`ResultStore` ``read_only``; for ``dlperf sweep
    --dry-run``); an empty set if it does not exist or is empty (0 bytes: what a sweep would
    start to fill).

    Raises:
        StoreError: the file is not a dlperf results database, is damaged, or has a schema
            version that is not one or is newer than this dlperf's.
    """
    path = Path(path)
    if not path.exists() or (path.is_file() and path.stat().st_size == 0):
        return set()
    with ResultStore(path, read_only=True) as store:
        return store.done_keys(include_failed)
