"""Schema versions of the result record and of the results file, and how older ones are read.

One number, :data:`SCHEMA_VERSION`, for the record (:class:`dlperf.results.schema.RunRecord`,
its ``schema_version``) and the SQLite file that stores it (:mod:`dlperf.results.store`, its
``meta.schema_version``). Before they were one, each had its own count:

record (the worker's ``schema_version`` in every result dict):
    1  the first results (files of store versions 1-5);
    2  data parallelism: ``world_size``, ``nproc``, ``nnodes``, ``per_device_batch``,
       ``scaling``, ``dist``, per-rank samples, ``convergence`` (store versions 6-8);
    8  the typed record, numbered as the file that stores it: a v2 record whose ``data_wait``
       still has the median rule is restated by the total-time rule (as store version 8 did
       to stored rows), for results read from a worker's JSON file rather than a store.
    9  the host's untraced dispatch time (``host``), kernels and copies per iteration in
       ``trace``, the per-kernel ``timeline`` (``--timeline``; in the file, a table of its
       own) and DDP's bucket record in ``dist.ddp_runtime``. A v8 record reads unchanged.
    10 compile events (docs/measurement.md, "Recompiles"): ``warmup_settled``,
       ``compile_handling``, ``remeasured``, ``excluded_steps`` beside ``steady_state``;
       ``compile.compile_before_loop_s`` and ``compile.compiled_at``; time to target with and
       without compile in ``convergence``. A v9 record reads unchanged (its
       ``time_to_target_s`` leaves out compile work done before the loop, as it did).
       Also in 10, CPU placement and batch semantics (issue 23): ``env.cpu_list``, ``env.numa_nodes``
       (``env.numa_note`` where unknown), ``env.cpu_bind`` and ``config.cpu_bind``
       (``--cpu-bind``), ``env.thread_policy`` for data-parallel CPU ranks; ``world_size``,
       ``nproc``, ``nnodes``, ``per_device_batch`` and ``scaling`` as every record since
       version 2 has them. A v9 record reads unchanged; where an older one lacks the batch
       fields, the readers derive them (:func:`dlperf.results.view.batch_fields`: one device,
       strong scaling) without writing them into the record; the placement stays absent.
       Also in 10, per-bucket DDP all-reduce times on every rank (issue 20):
       ``dist.buckets_timeline`` in traced data-parallel runs, and ``collective`` rows (the
       process group's spans) in the kept timeline; absent from records written before.
    11 every part names its fields and refuses others (a misspelt field is an error, not a
       new key). ``identity.tag`` (``dlperf run --tag``) is a field; the framework's own
       description of its data-parallel engine moves from the top of ``dist`` into
       ``dist.engine`` (:func:`dist_engine`; ``ddp``, ``runtime`` and
       ``process_group_backend`` stay fields of ``dist``). A key of an older record that no
       part declares is kept, not dropped, in the record's ``unrecognised`` (its dotted path
       -> value; :func:`dlperf.results.schema.upgrade`).
    12 the resolved ``config`` is stored by axis (``{"workload": {"model": ..., "batch_size":
       ...}, "runtime": {...}, "hardware": {...}, "input": {...}, "parallel": {...},
       "measure": {...}}``, :mod:`dlperf.config.axes`), as :class:`~dlperf.config.RunConfig`
       holds it; DDP's options as applied are ``runtime.ddp``. An older record's flat config
       is read onto the axes (:func:`~dlperf.config.axes.nest_settings`; a key that is no
       setting stays at the top); readers read settings by name
       (:func:`dlperf.results.view.setting`), whatever the shape.
    Record versions 3-7 were never written. Fields a version added are absent from older
    records (never invented: absent ``world_size`` means one device, as before).

file: the columns each version added (:data:`MIGRATIONS`), tables (:data:`TABLES_ADDED`) and
changes to stored values (:data:`DATA_MIGRATIONS`), applied by :func:`migrate_file` on opening.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from typing import Any

from dlperf.errors import ConfigError
from dlperf.results.parts import Dist

SCHEMA_VERSION = 12

#: Record versions that were written, oldest first (see the module docstring).
RECORD_VERSIONS = (1, 2, 8, 9, 10, 11, 12)
#: The data-wait criterion a restated ``data_wait`` names (:func:`restate_data_wait`): the one
#: of :data:`dlperf.data.pipeline.WAIT_CRITERION` (a test keeps them equal), written here so
#: that reading a results file does not import the data layer and numpy (0.2 s).
WAIT_CRITERION = "total data wait / total measured time"

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
    # The per-kernel timeline (``--timeline``) has a table of its own (TABLES_ADDED[9]); the
    # host dispatch part and the trace's kernel counts stay in result_json.
    9: {},
    # Compile events and time to target with and without compile (issue 23): all in
    # result_json. No new column: the CPU placement stays in result_json; ``scaling`` is read from the
    # record (dlperf.results.export adds it to the CSV, derived for older rows).
    10: {},
    # Parts refuse keys they do not declare; older records are upgraded on reading
    # (upgrade_record, dlperf.results.schema.upgrade). No new column.
    11: {},
    # The config by axis, in result_json; older records are read onto the axes on reading
    # (upgrade_record). No new column.
    12: {},
}


def restate_data_wait(data_wait: Any) -> bool:
    """Restate a result's ``data_wait`` (in place) by the total-time rule; True if it changed.

    Every result since store version 5 kept ``time_share`` (total wait / total measured time)
    beside the median-based ``share``; this makes ``time_share`` the ``share``, keeps the old
    one as ``median_share`` and relabels ``input_bound`` against the result's own
    ``threshold`` (dlperf.data.pipeline says why). Left alone: no ``time_share``, or already
    restated (it has a ``criterion``).
    """
    dw = data_wait
    if not isinstance(dw, dict) or dw.get("time_share") is None or "criterion" in dw:
        return False
    share, thr = dw["time_share"], dw.get("threshold")
    dw.update(median_share=dw.get("share"), share=share,
              input_bound=None if thr is None else share > thr, criterion=WAIT_CRITERION)
    return True


def dist_engine(dist: Any) -> Any:
    """A record's ``dist`` part (a dict) with the keys that :class:`~dlperf.results.parts.Dist`
    does not declare moved into its ``engine`` (record version 11: the framework's own
    description of its data-parallel engine, which older records kept at the top of
    ``dist``); anything else is returned as it is."""
    if not isinstance(dist, dict):
        return dist
    extra = {k: v for k, v in dist.items() if k not in Dist.model_fields}
    if not extra:
        return dist
    engine = dist.get("engine")
    out = {k: v for k, v in dist.items() if k in Dist.model_fields}
    out["engine"] = {**extra, **(engine if isinstance(engine, dict) else {})}
    return out


def upgrade_record(result: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the flat result dict ``result`` upgraded to :data:`SCHEMA_VERSION` (see the
    module docstring); a result without ``schema_version`` is read as version 1.

    Raises:
        ConfigError: ``result`` is not a mapping, or its version is newer than this dlperf
            knows, or one that was never written.
    """
    if not isinstance(result, Mapping):
        raise ConfigError(f"a result record is a JSON object, not {type(result).__name__}")
    out = dict(result)
    v = out.get("schema_version", 1)
    if not isinstance(v, int) or isinstance(v, bool) or v not in RECORD_VERSIONS:
        if isinstance(v, int) and not isinstance(v, bool) and v > SCHEMA_VERSION:
            raise ConfigError(f"result {out.get('run_key')!r} has schema version {v}, newer "
                              f"than this dlperf understands ({SCHEMA_VERSION}); upgrade dlperf")
        raise ConfigError(f"result {out.get('run_key')!r} has schema version {v!r}, which no "
                          f"dlperf wrote (known: {', '.join(map(str, RECORD_VERSIONS))})")
    if v < 8 and isinstance(out.get("data_wait"), dict):
        dw = dict(out["data_wait"])
        if restate_data_wait(dw):
            out["data_wait"] = dw
    if v < 11 and "dist" in out:
        out["dist"] = dist_engine(out["dist"])
    if v < 12 and isinstance(out.get("config"), Mapping):
        from dlperf.config.axes import nest_settings

        out["config"] = nest_settings(out["config"])
    out["schema_version"] = SCHEMA_VERSION
    return out


def _v8_data_wait_share(db: sqlite3.Connection) -> None:
    """File version 8: restate the data wait of stored real-data results by the total-time rule
    (:func:`restate_data_wait`), in the columns and in ``result_json``. The raw samples are
    untouched."""
    for rid, js in db.execute("SELECT id, result_json FROM results "
                              "WHERE data_wait_share IS NOT NULL").fetchall():
        try:
            res = json.loads(js or "{}")
        except ValueError:
            continue
        dw = res.get("data_wait") if isinstance(res, dict) else None
        if not isinstance(dw, dict) or not restate_data_wait(dw):
            continue
        bound = dw["input_bound"]
        db.execute("UPDATE results SET data_wait_share=?, input_bound=?, result_json=? WHERE id=?",
                   (dw["share"], None if bound is None else int(bound),
                    json.dumps(res, default=str), rid))


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
    # ``timelines``: the compressed per-kernel timeline of a result (dlperf.results.timelines),
    # kept out of result_json so that reading results does not decode it.
    9: ("CREATE TABLE IF NOT EXISTS timelines (result_id INTEGER PRIMARY KEY REFERENCES "
        "results(id) ON DELETE CASCADE, format TEXT, data TEXT NOT NULL)"),
}


def migrate_file(db: sqlite3.Connection, version: int) -> None:
    """Bring an open results file of schema ``version`` to :data:`SCHEMA_VERSION`, one version
    at a time (columns, tables, then stored values; ``meta`` updated after each), inside the
    caller's transaction."""
    for v in range(version + 1, SCHEMA_VERSION + 1):
        for col, typ in MIGRATIONS[v].items():
            db.execute(f"ALTER TABLE results ADD COLUMN {col} {typ}")
        if v in TABLES_ADDED:
            db.execute(TABLES_ADDED[v])
        if v in DATA_MIGRATIONS:
            DATA_MIGRATIONS[v](db)
        db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(v),))
