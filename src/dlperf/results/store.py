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
    ``sweeps(name, created_at, config_json)``  the sweep files that wrote into this store;
    ``collectives``, ``timelines``: :data:`TABLES_ADDED` (:mod:`dlperf.results.timelines`).

Each :meth:`ResultStore.add` is one transaction, so a process killed at any moment leaves
every earlier result intact and no half-written one. The store never imports a framework.

It stores :class:`~dlperf.results.schema.RunRecord` objects (a result dict is read as one): the
columns come from the record's typed parts (:func:`flatten`), ``result_json`` is its flat dict
without raw samples. :meth:`ResultStore.records` reads them back as records (upgraded to the
current schema, raw samples from ``samples``); :meth:`ResultStore.rows` gives the columns.
Schema versions: :mod:`dlperf.results.migrations`; merging: :mod:`dlperf.results.merge`."""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dlperf.errors import ConfigError
from dlperf.results import timelines
from dlperf.results.migrations import (
    DATA_MIGRATIONS,
    MIGRATIONS,
    SCHEMA_VERSION,
    TABLES_ADDED,
    migrate_file,
)
from dlperf.results.schema import RunRecord, StoredAt, Timing, as_record

__all__ = ["ResultStore", "COLUMNS", "SCHEMA_VERSION", "MIGRATIONS", "DATA_MIGRATIONS", "TABLES_ADDED",
           "flatten", "record_of", "result_of", "repeat_of", "stored_keys", "timelines"]

#: Columns of ``results`` after ``id``, with SQL types; order is the export order.
COLUMNS: dict[str, str] = {
    "run_key": "TEXT NOT NULL", "sweep": "TEXT", "created_at": "TEXT", "status": "TEXT NOT NULL",
    "error": "TEXT", "model": "TEXT", "framework": "TEXT", "mode": "TEXT", "device": "TEXT",
    "device_name": "TEXT", "precision": "TEXT", "batch_size": "INTEGER", "grad_accum": "INTEGER",
    "data": "TEXT", "threads": "INTEGER",
    "step_time_median_s": "REAL", "step_time_mean_s": "REAL", "step_time_stdev_s": "REAL",
    "step_time_min_s": "REAL", "step_time_max_s": "REAL", "step_time_q1_s": "REAL",
    "step_time_q3_s": "REAL", "step_time_iqr_s": "REAL", "step_time_p5_s": "REAL",
    "step_time_p95_s": "REAL", "step_time_ci_low_s": "REAL", "step_time_ci_high_s": "REAL",
    "step_time_mad_s": "REAL", "n_outliers": "INTEGER",
    "samples_per_s": "REAL", "tokens_per_s": "REAL", "samples": "INTEGER",
    "n_measured": "INTEGER", "measured_time_s": "REAL", "wall_time_s": "REAL",
    "timing_rel_diff": "REAL", "timing_consistent": "INTEGER", "first_iter_s": "REAL",
    "warmup_iters": "INTEGER", "warmup_time_s": "REAL", "steady_state": "INTEGER",
    "peak_allocated_bytes": "INTEGER", "peak_reserved_bytes": "INTEGER",
    "nvml_used_bytes": "INTEGER", "peak_rss_bytes": "INTEGER",
    "params": "INTEGER", "train_flops_per_sample": "REAL", "tokens_per_sample": "INTEGER",
    "loss_first": "REAL", "loss_last": "REAL", "framework_version": "TEXT", "git_sha": "TEXT",
    "result_json": "TEXT",
    "compile_time_s": "REAL", "n_compiles": "INTEGER", "recompiles_measured": "INTEGER",
    "warnings": "TEXT",
    "busy_fraction": "REAL", "dispatch_s": "REAL", "breakdown_rel_diff": "REAL",
    "trace_path": "TEXT",
    **MIGRATIONS[5],
    **MIGRATIONS[6],
}
SUMMARY_KEYS = ("median", "mean", "stdev", "min", "max", "q1", "q3", "iqr", "p5", "p95",
                "ci_low", "ci_high", "mad")
BOOL_COLUMNS = ("timing_consistent", "steady_state", "input_bound")


def _num(x: Any) -> Any:
    """NaN/inf are not valid JSON; store them as NULL in columns (the raw samples keep them)."""
    return None if isinstance(x, float) and not math.isfinite(x) else x


def flatten(result: RunRecord | Mapping[str, Any], sweep: str | None = None) -> dict[str, Any]:
    """The ``results`` columns of a record (or of a result dict, read as one): identity, the
    step-time statistics (s), throughput, memory peaks (bytes), the model's spec, compile,
    trace, data wait, MFU, power and convergence numbers, the first and last measured loss and
    the full record without its raw samples as ``result_json``. Missing values are None; NaN
    and infinities become None (the raw samples keep them); booleans become 0/1.

    Raises:
        ConfigError: ``result`` was written by a newer dlperf.
    """
    rec = as_record(result)
    ident, t = rec.identity, rec.timing or Timing()
    row: dict[str, Any] = {
        "run_key": ident.run_key, "sweep": sweep, "created_at": ident.created_at,
        "status": ident.status, "error": ident.error, "model": ident.model,
        "framework": ident.framework, "mode": ident.mode, "device": ident.device,
        "device_name": rec.device_name, "precision": ident.precision,
        "batch_size": ident.batch_size, "grad_accum": ident.grad_accum, "data": ident.data,
        "threads": ident.threads, "world_size": ident.world_size, "nnodes": ident.nnodes,
        "per_device_batch": ident.per_device_batch, "rank_imbalance": rec.rank_imbalance,
        "exposed_comm_s": rec.exposed_comm_s,
        **{k: getattr(t, k) for k in Timing.model_fields}}
    s = rec.summary
    for k in SUMMARY_KEYS:
        row[f"step_time_{k}_s"] = getattr(s, k) if s is not None else None
    row["n_outliers"] = len(s.outliers) if s is not None and s.outliers is not None else None
    tp = rec.throughput
    row["samples_per_s"] = tp.samples_per_s if tp else None
    row["tokens_per_s"] = tp.tokens_per_s if tp else None
    row["samples"] = tp.samples if tp else None
    if rec.memory is not None:
        row.update({k: v for k, v in rec.memory.model_dump().items() if k in COLUMNS})
    spec = ident.spec
    for k in ("params", "train_flops_per_sample", "tokens_per_sample"):
        row[k] = getattr(spec, k) if spec is not None else None
    comp = rec.compile
    for k in ("compile_time_s", "n_compiles", "recompiles_measured"):
        row[k] = getattr(comp, k) if comp is not None else None
    row["warnings"] = "; ".join(rec.warnings or []) or None
    tr = rec.trace
    row["busy_fraction"] = tr.busy_fraction if tr else None
    row["dispatch_s"] = (tr.dispatch_s or {}).get("median") if tr else None
    row["trace_path"] = (tr.files or {}).get("chrome_trace") if tr else None
    row["breakdown_rel_diff"] = rec.breakdown.rel_diff if rec.breakdown else None
    row["loader_workers"] = (ident.config or {}).get("loader_workers")
    dw = rec.data_wait
    row["data_wait_share"], row["input_bound"] = (dw.share, dw.input_bound) if dw else (None,
                                                                                       None)
    mfu = rec.mfu
    row["achieved_flops_per_s"] = mfu.achieved_flops_per_s if mfu else None
    row["mfu"] = mfu.mfu if mfu else None
    pw = rec.power
    row["mean_power_w"] = pw.mean_power_w if pw else None
    row["energy_per_iter_j"] = pw.energy_per_iter_j if pw else None
    row["time_to_target_s"] = rec.convergence.time_to_target_s if rec.convergence else None
    meas = (rec.losses or {}).get("measure") or []
    row["loss_first"] = meas[0] if meas else None
    row["loss_last"] = meas[-1] if meas else None
    row["framework_version"] = (rec.versions or {}).get(ident.framework or "", None)
    row["git_sha"] = ((rec.env.git if rec.env else None) or {}).get("sha")
    for k in BOOL_COLUMNS:
        if row.get(k) is not None:
            row[k] = int(bool(row[k]))
    row["result_json"] = json.dumps(timelines.without_data(rec.to_dict(raw=False)), default=str)
    return {k: _num(row.get(k)) for k in COLUMNS}


#: Phases whose losses are stored beside their times (the training phases, per rank too); other
#: phases (``data_wait``, ``breakdown:*``, ``trace:*``) have times only.
LOSS_PHASES = ("first", "warmup", "measure")


def _has_losses(phase: str) -> bool:
    return phase.rsplit(":", 1)[-1] in LOSS_PHASES and (
        ":" not in phase or phase.startswith("rank"))


def record_of(row: Mapping[str, Any],
              raw: Mapping[str, Mapping[str, list[Any]]] | None = None) -> RunRecord:
    """The record of a store row (as from :meth:`ResultStore.rows`): its ``result_json`` read
    as a :class:`~dlperf.results.schema.RunRecord` (upgraded to the current schema), with its
    row id and sweep in ``stored``; with ``raw`` (:meth:`ResultStore.samples` of the row) also
    its raw ``samples`` (s) and ``losses`` (training phases, and any phase with a loss stored;
    a NaN loss reads back as None, SQLite keeps no NaN). A row without readable JSON gives the
    record of its identity columns.

    Raises:
        ConfigError: the row's record was written by a newer dlperf.
    """
    res = result_of(row)
    if not res:
        res = {k: row.get(k) for k in ("run_key", "status", "error", "created_at", "model",
                                       "framework", "mode", "device", "precision", "batch_size",
                                       "grad_accum", "data", "threads") if k in row}
    rec = RunRecord.from_dict(res)
    if raw is not None and raw:
        rec.samples = {ph: list(v["step_time_s"]) for ph, v in raw.items()}
        rec.losses = {ph: list(v["loss"]) for ph, v in raw.items()
                      if _has_losses(ph) or any(x is not None for x in v["loss"])}
    if row.get("id") is not None:
        rec.stored = StoredAt(id=row["id"], sweep=row.get("sweep"))
    return rec


def result_of(row: Mapping[str, Any]) -> dict[str, Any]:
    """The full result dict of a store row: its ``result`` dict if it carries one, else its
    ``result_json`` parsed (``{}`` when absent or unreadable)."""
    r = row.get("result")
    if isinstance(r, dict):
        return r
    try:
        res = json.loads(row.get("result_json") or "{}")
    except (TypeError, ValueError):
        return {}
    return res if isinstance(res, dict) else {}


def repeat_of(row: dict[str, Any]) -> int:
    """Which repeated run of its point a result row is (``repeat`` in its result JSON, kept
    there rather than in a column; ``dlperf run --repeats N``): 0 for the first run and for
    results stored before repeats existed (repeat 0 by their run key)."""
    if row.get("repeat") is not None:
        return int(row["repeat"])
    res = result_of(row)
    rep = res.get("repeat", (res.get("config") or {}).get("repeat"))
    return rep if isinstance(rep, int) and not isinstance(rep, bool) else 0


class ResultStore:
    """A results database file (created if missing).

    ``read_only=True`` (``dlperf results``, ``dlperf report``): the file is read into memory
    and used from there (SQLite's backup, a consistent copy), so reading never changes it:
    a file of an older schema is migrated in the copy only, and writes go nowhere.

    Raises:
        ConfigError: the file is not a dlperf SQLite database, or was written by a newer schema.
    """

    def __init__(self, path: str | Path, read_only: bool = False) -> None:
        self.path = Path(path)
        try:
            if read_only:  # a copy in memory: an older file is migrated there, not on disk
                if not self.path.is_file():
                    raise ConfigError(f"results file {str(self.path)!r} does not exist")
                src = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=30.0)
                self._db = sqlite3.connect(":memory:", isolation_level=None)
                try:
                    src.backup(self._db)
                finally:
                    src.close()
            else:
                if self.path.parent and not self.path.parent.exists():
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                self._db = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None)
            self._db.row_factory = sqlite3.Row
            self._init()
        except sqlite3.DatabaseError as e:
            raise ConfigError(f"{str(self.path)!r} is not a dlperf results database ({e}); "
                              "give another --db path") from None

    def _init(self) -> None:
        db = self._db
        db.execute("PRAGMA foreign_keys = ON")
        with self.transaction():
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if tables and "meta" not in tables:
                # Somebody else's SQLite file: never add dlperf's tables to it.
                raise ConfigError(f"{self.path} is an SQLite database but not a dlperf results "
                                  f"database (it has tables {', '.join(sorted(tables))}); give "
                                  "another --db path")
            db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
            row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if row is None and tables:
                raise ConfigError(f"{self.path} has a 'meta' table but no dlperf schema version: "
                                  "not a dlperf results database; give another --db path")
            if row is None:
                cols = ", ".join(f"{k} {t}" for k, t in COLUMNS.items())
                db.execute(f"CREATE TABLE results (id INTEGER PRIMARY KEY AUTOINCREMENT, {cols})")
                db.execute("CREATE INDEX results_run_key ON results(run_key)")
                db.execute("CREATE TABLE samples (result_id INTEGER NOT NULL REFERENCES "
                           "results(id) ON DELETE CASCADE, phase TEXT NOT NULL, idx INTEGER NOT "
                           "NULL, step_time_s REAL, loss REAL, PRIMARY KEY (result_id, phase, idx))")
                db.execute("CREATE TABLE sweeps (name TEXT, created_at TEXT, config_json TEXT)")
                for sql in TABLES_ADDED.values():
                    db.execute(sql)
                from dlperf import __version__
                db.executemany("INSERT INTO meta VALUES (?, ?)",
                               [("schema_version", str(SCHEMA_VERSION)), ("created_by", __version__)])
            elif int(row[0]) > SCHEMA_VERSION:
                raise ConfigError(f"{self.path} has schema version {row[0]}, newer than this "
                                  f"dlperf understands ({SCHEMA_VERSION}); upgrade dlperf")
            else:
                migrate_file(db, int(row[0]))

    def transaction(self):
        """Context manager: BEGIN IMMEDIATE ... COMMIT (ROLLBACK on error)."""
        db = self._db

        class _Tx:
            def __enter__(self_inner):
                db.execute("BEGIN IMMEDIATE")

            def __exit__(self_inner, et, ev, tb):
                db.execute("ROLLBACK" if et else "COMMIT")
                return False

        return _Tx()

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
        """
        rec = as_record(result)
        if rec.identity.run_key is None or rec.identity.status is None:
            raise ConfigError("a result needs its identity (run_key and status) to be stored; "
                              "make failures with dlperf.results.schema.failure_record")
        row = flatten(rec, sweep)
        cols = list(row)
        with self.transaction():
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
                "INSERT INTO collectives (run_id, created_at, benchmark, backend, nranks, dtype, "
                "size_bytes, count, time_s, algbw_gbps, busbw_gbps, imbalance, wrong, device_name,"
                " git_sha, run_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
        return [dict(r) for r in cur.fetchall()]

    def collectives_env(self) -> dict[str, Any] | None:
        """The environment stored with the newest collective benchmark run, or None."""
        row = self._db.execute("SELECT run_json FROM collectives ORDER BY id DESC LIMIT 1"
                               ).fetchone()
        try:
            return (json.loads(row[0]) or {}).get("env") if row and row[0] else None
        except ValueError:
            return None

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
        q = "SELECT DISTINCT run_key FROM results WHERE status NOT IN ('error', 'unavailable')"
        if not include_failed:
            q = "SELECT DISTINCT run_key FROM results WHERE status = 'ok'"
        return {r[0] for r in self._db.execute(q)}

    def rows(self, *, latest: bool = True, **filters: Any) -> list[dict[str, Any]]:
        """Result rows as dicts (booleans restored), oldest first.

        Args:
            latest: keep only the newest row per run key (re-runs replace older ones in views).
            filters: column=value (or column=[values]) equality filters, e.g. ``model="lstm"``.

        Raises:
            ConfigError: a filter names an unknown column.
        """
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
        if latest:
            where.append("id IN (SELECT MAX(id) FROM results GROUP BY run_key)")
        if where:
            q += " WHERE " + " AND ".join(where)
        q += " ORDER BY id"
        out = []
        for r in self._db.execute(q, args):
            d = dict(r)
            for k in BOOL_COLUMNS:
                if d.get(k) is not None:
                    d[k] = bool(d[k])
            out.append(d)
        return out

    def records(self, *, latest: bool = True, samples: bool = True,
                **filters: Any) -> list[RunRecord]:
        """The rows of :meth:`rows` (same ``latest`` and column filters) as
        :class:`~dlperf.results.schema.RunRecord` objects, oldest first (:func:`record_of`),
        with their raw samples unless ``samples=False``.

        Raises:
            ConfigError: a filter names an unknown column; a row was written by a newer dlperf.
        """
        return [record_of(r, self.samples(r["id"]) if samples else None)
                for r in self.rows(latest=latest, **filters)]

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


def stored_keys(path: str | Path, include_failed: bool = True) -> set[str]:
    """:meth:`ResultStore.done_keys` of the file at ``path``, read without changing it (no
    schema migration; for ``dlperf sweep --dry-run``); an empty set if it does not exist.

    Raises:
        ConfigError: the file is not a dlperf results database.
    """
    path = Path(path)
    if not path.is_file() or path.stat().st_size == 0:
        return set()
    q = ("SELECT DISTINCT run_key FROM results WHERE status NOT IN ('error', 'unavailable')"
         if include_failed else "SELECT DISTINCT run_key FROM results WHERE status = 'ok'")
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30.0)
        try:
            if not con.execute("SELECT 1 FROM sqlite_master WHERE name='meta'").fetchone():
                raise sqlite3.DatabaseError("no dlperf 'meta' table")
            return {r[0] for r in con.execute(q)}
        finally:
            con.close()
    except sqlite3.DatabaseError as e:
        raise ConfigError(f"{str(path)!r} is not a dlperf results database ({e}); give "
                          "another --db path") from None


