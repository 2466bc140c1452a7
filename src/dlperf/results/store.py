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

Each :meth:`ResultStore.add` is one transaction, so a process killed at any moment leaves
every earlier result intact and no half-written one. The store never imports a framework.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
from pathlib import Path
from collections.abc import Mapping
from typing import Any

from dlperf.errors import ConfigError

SCHEMA_VERSION = 8

#: Columns added by each schema version (older files are migrated on open).
MIGRATIONS: dict[int, dict[str, str]] = {
    2: {"compile_time_s": "REAL", "n_compiles": "INTEGER", "recompiles_measured": "INTEGER",
        "warnings": "TEXT"},
    3: {},
    # Where the time goes (issue 4): the trace's busy fraction and CPU dispatch time per
    # iteration, the phases' difference from the fused step, the kept trace file. The full
    # breakdown, op classes and trace sections stay in result_json; raw phase samples in
    # ``samples`` (phases "breakdown:t_f", "trace:dispatch", ...).
    4: {"busy_fraction": "REAL", "dispatch_s": "REAL", "breakdown_rel_diff": "REAL",
        "trace_path": "TEXT"},
    # Input pipelines, MFU and energy (issue 4); the details stay in result_json.
    5: {"loader_workers": "INTEGER", "data_wait_share": "REAL", "input_bound": "INTEGER",
        "achieved_flops_per_s": "REAL", "mfu": "REAL", "mean_power_w": "REAL",
        "energy_per_iter_j": "REAL"},
    # Data parallelism: devices, nodes and per-device batch (``batch_size`` stays the global
    # batch), rank imbalance, exposed communication per iteration (s) and the training time to
    # the target loss (s). Rows from before have NULL here: one device.
    6: {"world_size": "INTEGER", "nnodes": "INTEGER", "per_device_batch": "INTEGER",
        "rank_imbalance": "REAL", "exposed_comm_s": "REAL", "time_to_target_s": "REAL"},
    # All-reduce sweeps (issue 5) have a table of their own: COLLECTIVES_SQL.
    7: {},
    # No new column: ``data_wait_share`` becomes total wait / total measured time (it was the
    # median wait / median iteration, which a bursty loader hides); DATA_MIGRATIONS[8].
    8: {},
}


def _v8_data_wait_share(db: sqlite3.Connection) -> None:
    """Schema 8: restate the data wait of stored real-data results by the total-time rule.

    Every result since schema 5 kept ``time_share`` (total wait / total measured time) beside
    the median-based ``share`` in its ``data_wait``; this makes ``time_share`` the ``share``,
    keeps the old one as ``median_share`` and relabels ``input_bound`` against the result's own
    threshold, in the columns and in ``result_json`` (dlperf.data.pipeline says why). The raw
    samples are untouched.
    """
    from dlperf.data.pipeline import WAIT_CRITERION

    for rid, js in db.execute("SELECT id, result_json FROM results "
                              "WHERE data_wait_share IS NOT NULL").fetchall():
        try:
            res = json.loads(js or "{}")
        except ValueError:
            continue
        dw = res.get("data_wait") if isinstance(res, dict) else None
        if not isinstance(dw, dict) or dw.get("time_share") is None or "criterion" in dw:
            continue
        share, thr = dw["time_share"], dw.get("threshold")
        bound = None if thr is None else share > thr
        dw.update(median_share=dw.get("share"), share=share, input_bound=bound,
                  criterion=WAIT_CRITERION)
        db.execute("UPDATE results SET data_wait_share=?, input_bound=?, result_json=? WHERE id=?",
                   (share, None if bound is None else int(bound), json.dumps(res, default=str),
                    rid))


#: Changes to stored values made when a file is migrated to a schema version (after its columns).
DATA_MIGRATIONS = {8: _v8_data_wait_share}

#: Tables added by a schema version (created for new files and by the migration).
#: ``collectives``: one row per message size of a collective benchmark run (dlperf.comm.
#: allreduce): time (s, the slowest rank's mean per call), algbw/busbw (GB/s, nccl-tests'
#: definitions), imbalance, wrong elements; ``run_id`` groups the rows of one run, and
#: ``run_json`` holds that run's settings and environment.
TABLES_ADDED: dict[int, str] = {
    7: ("CREATE TABLE IF NOT EXISTS collectives (id INTEGER PRIMARY KEY AUTOINCREMENT, "
        "run_id TEXT NOT NULL, created_at TEXT, benchmark TEXT NOT NULL, backend TEXT, "
        "nranks INTEGER, dtype TEXT, size_bytes INTEGER, count INTEGER, time_s REAL, "
        "algbw_gbps REAL, busbw_gbps REAL, imbalance REAL, wrong INTEGER, device_name TEXT, "
        "git_sha TEXT, run_json TEXT)"),
}

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


def flatten(result: dict[str, Any], sweep: str | None = None) -> dict[str, Any]:
    """Map a worker result dict to the ``results`` columns (missing values become None)."""
    row: dict[str, Any] = {k: result.get(k) for k in COLUMNS if k in result}
    row["sweep"] = sweep
    s = result.get("summary") or {}
    for k in SUMMARY_KEYS:
        row[f"step_time_{k}_s"] = s.get(k)
    row["n_outliers"] = len(s["outliers"]) if "outliers" in s else None
    tp = result.get("throughput") or {}
    row["samples_per_s"] = tp.get("samples_per_s")
    row["tokens_per_s"] = tp.get("tokens_per_s")
    row["samples"] = tp.get("samples")
    for k, v in (result.get("memory") or {}).items():
        if k in COLUMNS:
            row[k] = v
    spec = result.get("spec") or {}
    for k in ("params", "train_flops_per_sample", "tokens_per_sample"):
        row[k] = spec.get(k)
    meas = (result.get("losses") or {}).get("measure") or []
    comp = result.get("compile") or {}
    for k in ("compile_time_s", "n_compiles", "recompiles_measured"):
        row[k] = comp.get(k)
    row["warnings"] = "; ".join(result.get("warnings") or []) or None
    tr = result.get("trace") or {}
    row["busy_fraction"] = tr.get("busy_fraction")
    row["dispatch_s"] = (tr.get("dispatch_s") or {}).get("median")
    row["trace_path"] = (tr.get("files") or {}).get("chrome_trace")
    row["breakdown_rel_diff"] = (result.get("breakdown") or {}).get("rel_diff")
    row["loader_workers"] = (result.get("config") or {}).get("loader_workers")
    dw = result.get("data_wait") or {}
    row["data_wait_share"], row["input_bound"] = dw.get("share"), dw.get("input_bound")
    mfu = result.get("mfu") or {}
    row["achieved_flops_per_s"], row["mfu"] = mfu.get("achieved_flops_per_s"), mfu.get("mfu")
    pw = result.get("power") or {}
    row["mean_power_w"], row["energy_per_iter_j"] = pw.get("mean_power_w"), pw.get("energy_per_iter_j")
    row["time_to_target_s"] = (result.get("convergence") or {}).get("time_to_target_s")
    row["loss_first"] = meas[0] if meas else None
    row["loss_last"] = meas[-1] if meas else None
    v = result.get("versions") or {}
    row["framework_version"] = v.get(result.get("framework") or "", None)
    row["git_sha"] = ((result.get("env") or {}).get("git") or {}).get("sha")
    for k in BOOL_COLUMNS:
        if row.get(k) is not None:
            row[k] = int(bool(row[k]))
    slim = {k: v for k, v in result.items() if k not in ("samples", "losses")}
    row["result_json"] = json.dumps(slim, default=str)
    return {k: _num(row.get(k)) for k in COLUMNS}


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
                for v in range(int(row[0]) + 1, SCHEMA_VERSION + 1):
                    for col, typ in MIGRATIONS[v].items():
                        db.execute(f"ALTER TABLE results ADD COLUMN {col} {typ}")
                    if v in TABLES_ADDED:
                        db.execute(TABLES_ADDED[v])
                    if v in DATA_MIGRATIONS:
                        DATA_MIGRATIONS[v](db)
                    db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(v),))

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

    def add(self, result: dict[str, Any], sweep: str | None = None) -> int:
        """Store one result and its raw samples in one transaction; return its row id."""
        row = flatten(result, sweep)
        cols = list(row)
        with self.transaction():
            cur = self._db.execute(
                f"INSERT INTO results ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                [row[c] for c in cols])
            rid = int(cur.lastrowid)
            samples = result.get("samples") or {}
            losses = result.get("losses") or {}
            recs = []
            for phase, times in samples.items():
                ls = losses.get(phase) or []
                for i, t in enumerate(times):
                    recs.append((rid, phase, i, t, ls[i] if i < len(ls) else None))
            self._db.executemany("INSERT INTO samples VALUES (?, ?, ?, ?, ?)", recs)
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
        where, args = [], []
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


def _read_store(db: sqlite3.Connection) -> tuple[list, list, list]:
    """(results with their samples, collective rows, sweep records) of an open store."""
    results = []
    for r in db.execute("SELECT * FROM results ORDER BY id").fetchall():
        row = dict(r)
        samples = [tuple(x) for x in db.execute(
            "SELECT phase, idx, step_time_s, loss FROM samples WHERE result_id=? "
            "ORDER BY phase, idx", (row["id"],))]
        results.append((row, samples))
    colls = [dict(r) for r in db.execute("SELECT * FROM collectives ORDER BY id")]
    sweeps = [tuple(r) for r in db.execute("SELECT name, created_at, config_json FROM sweeps")]
    return results, colls, sweeps


def merge_stores(dest: str | Path, sources: list[str | Path]) -> dict[str, Any]:
    """Combine results files: ``dest`` becomes the union of its own rows and every source's.

    For results measured in pieces on different machines or calls (sweep shards, a sweep
    resumed from an older copy of its file). Every result row with its raw samples, every
    collective benchmark run and every sweep record is kept once: a result that is in several
    files (same run key, ``created_at`` and ``result_json``) is stored once, as is a collective
    run (``run_id``) or a sweep record. Results are written in order of ``created_at`` (then
    file, then row), so "the newest row of a point" (:meth:`ResultStore.rows`) stays the newest
    by time.

    Sources are read as :class:`ResultStore` ``read_only`` (a consistent copy in memory,
    migrated there to the current schema); the source files are not changed. ``dest`` is rewritten inside
    one SQLite write transaction: a failure or a kill leaves it as it was, a sweep writing into
    it at the same time waits for the merge (up to the store's 30 s busy timeout) and then
    goes on writing into the merged file, and the file stays where it is (a symbolic link
    keeps pointing at it, its permissions are kept). Row ids of ``dest`` change.

    Args:
        dest: the results file to write; it may not exist yet (then it is created).
        sources: results files to add (at least one; ``dest`` itself among them is skipped).

    Returns:
        ``{"results": n, "samples": n, "collectives": n, "sweeps": n}``: the totals in ``dest``
        afterwards, and ``"added": {source: {"results": n, "collectives": n, "sweeps": n}}``:
        what each source added that neither ``dest`` nor an earlier source held.

    Raises:
        ConfigError: no sources, a source that does not exist or is a folder, or a file that
            is not a dlperf results database.
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
    same = dest.resolve() if dest.exists() else None
    srcs = [s for s in srcs if s.resolve() != same]
    read = []
    for s in srcs:
        with ResultStore(s, read_only=True) as st:  # a copy in memory, migrated there
            read.append((str(s), _read_store(st._db)))
    with ResultStore(dest) as out:
        db = out._db
        with out.transaction():  # BEGIN IMMEDIATE: dest's rows read and rewritten at once
            files = [(None, _read_store(db))] + read
            results: dict[tuple, tuple] = {}
            collectives: dict[str, list[dict]] = {}
            sweeps: dict[tuple, None] = {}
            added: dict[str, dict[str, int]] = {}
            for fi, (name, (res, colls, swps)) in enumerate(files):
                n = {"results": 0, "collectives": 0, "sweeps": 0}
                for row, samples in res:
                    ident = (row["run_key"], row.get("created_at"), row.get("result_json"))
                    if ident not in results:
                        results[ident] = ((row.get("created_at") or "", fi, row["id"]),
                                          row, samples)
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
            db.execute("DELETE FROM results")
            db.execute("DELETE FROM collectives")
            db.execute("DELETE FROM sweeps")
            cols = list(COLUMNS)
            n_samples = 0
            for _, row, samples in sorted(results.values(), key=lambda v: v[0]):
                cur = db.execute(
                    f"INSERT INTO results ({', '.join(cols)}) VALUES "
                    f"({', '.join('?' * len(cols))})", [row.get(c) for c in cols])
                rid = int(cur.lastrowid)
                db.executemany("INSERT INTO samples VALUES (?, ?, ?, ?, ?)",
                               [(rid, *x) for x in samples])
                n_samples += len(samples)
            for rows in collectives.values():
                ccols = [k for k in rows[0] if k != "id"]
                db.executemany(
                    f"INSERT INTO collectives ({', '.join(ccols)}) VALUES "
                    f"({', '.join('?' * len(ccols))})", [[c[k] for k in ccols] for c in rows])
            db.executemany("INSERT INTO sweeps VALUES (?, ?, ?)", list(sweeps))
    return {"results": len(results), "added": added, "samples": n_samples,
            "collectives": len(collectives), "sweeps": len(sweeps)}
