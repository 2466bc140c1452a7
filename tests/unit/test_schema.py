"""The typed result record: every committed results file reads into records and round-trips,
old record versions are upgraded, a newer one is refused, a failure record has its identity."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import pytest

from dlperf.config import make_run_config
from dlperf.config.axes import AXES, flat_settings
from dlperf.errors import ConfigError
from dlperf.results.migrations import SCHEMA_VERSION, upgrade_record
from dlperf.results.parts import Dist
from dlperf.results.schema import (
    TOP_LEVEL_ORDER,
    Identity,
    RunRecord,
    failure_record,
    new_record,
    upgrade,
)
from dlperf.results.store import ResultStore, flatten, record_of

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = sorted((ROOT / "benchmarks" / "results").rglob("*.db"))


def canonical(obj) -> str:
    """JSON text with sorted keys: NaN compares equal to NaN, key order does not matter."""
    return json.dumps(obj, sort_keys=True, default=str)


def test_the_committed_databases_are_all_found():
    """Every results database git tracks is among those the round-trip tests below read
    (the H200 and H100 sweeps, reproduce.db, calibration2.db, yourmodel/yourmodel.db,
    cpu-dev/ddp_buckets.db, ...), and there are at least the 24 the schema-11 migration was
    written against."""
    import subprocess

    listed = subprocess.run(["git", "ls-files", "benchmarks/results/*.db",
                             "benchmarks/results/**/*.db"], cwd=ROOT, capture_output=True,
                            text=True)
    if listed.returncode != 0:
        pytest.skip(f"not a git checkout: {listed.stderr.strip()}")
    tracked = {ROOT / line for line in listed.stdout.split()}
    assert tracked <= set(COMMITTED), sorted(str(p) for p in tracked - set(COMMITTED))
    assert len(COMMITTED) >= 24, [str(p) for p in COMMITTED]


@pytest.mark.parametrize("db", COMMITTED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_committed_row_parses_and_round_trips(db, tmp_path):
    """Each stored row's JSON parses into a record whose flat dict is that JSON upgraded to
    the current version (``schema_version``, a data-parallel ``dist``'s engine keys moved
    into ``dist.engine``, the config on its axes, read back by name as stored: nothing else
    changes, no key is unrecognised); every record stored again reads back equal, raw
    samples and columns included."""
    con = sqlite3.connect(db)
    stored = [json.loads(js) for (js,) in con.execute("SELECT result_json FROM results "
                                                      "ORDER BY id")]
    con.close()
    for js in stored:
        rec = RunRecord.from_dict(js)
        assert rec.identity.run_key == js["run_key"] and rec.identity.status == js["status"]
        assert rec.schema_version == SCHEMA_VERSION
        again = rec.to_dict()
        assert again["schema_version"] == SCHEMA_VERSION
        assert "unrecognised" not in again  # every stored key has its field
        assert canonical(again) == canonical(upgrade(js))
        moved = {k: v for k, v in js.get("dist", {}).items() if k not in Dist.model_fields}
        assert rec.dist is None or rec.dist.engine == (moved or None)
        assert set(again.get("config") or {}) <= set(AXES)  # the config on its axes
        if rec.dist is None:
            as_stored = {**again, "schema_version": js["schema_version"]}
            if "config" in js:
                if set(js["config"]) & set(AXES):  # stored on its axes (schema 12 and later)
                    assert as_stored["config"] == js["config"]
                else:  # stored flat (schema 11 and older): read back by name
                    assert flat_settings(as_stored["config"]) == js["config"]
                as_stored["config"] = js["config"]
            assert canonical(as_stored) == canonical(js)
        assert list(again) == [k for k in TOP_LEVEL_ORDER if k in again] + [
            k for k in again if k not in TOP_LEVEL_ORDER]
    with ResultStore(db, read_only=True) as src:
        records = src.records(latest=False)
        rows = src.rows(latest=False)
    assert len(records) == len(rows) == len(stored)
    copy = tmp_path / "copy.db"
    with ResultStore(copy) as dst:
        for rec in records:
            dst.add(rec, sweep=rec.stored.sweep)
        back = dst.records(latest=False)
        rows2 = dst.rows(latest=False)
    assert len(back) == len(records)
    for a, b, js in zip(records, back, stored):
        assert canonical(a.to_dict()) == canonical(b.to_dict())  # raw samples included
        assert a.stored.sweep == b.stored.sweep
        # the raw samples came from the samples table: one time per measured iteration
        assert len(a.samples["measure"]) == js["n_measured"] == len(b.samples["measure"])
        assert len(a.losses["measure"]) == js["n_measured"]
    for r1, r2, rec in zip(rows, rows2, records):
        # the columns come from the record: re-stored, they are what was stored
        for col, v in r1.items():
            if col in ("id", "result_json"):
                continue
            w = r2[col]
            same = v == w or (isinstance(v, float) and isinstance(w, float)
                              and math.isclose(v, w, rel_tol=1e-12))
            assert same, (db.name, rec.identity.run_key, col, v, w)


def test_a_flat_config_of_schema_11_is_read_onto_its_axes():
    """A record of schema 11 or older stored its config flat: it is read onto the run
    config's axes (a key that is no setting stays at the top), reads back by name, and makes
    the run config it was made from; a record of this version keeps its config as given."""
    from dlperf.config import RunConfig
    from dlperf.results.view import config_of, setting

    cfg = make_run_config(model="fcn5_tiny", batch_size=8, threads=2, nproc=2,
                          options={"broadcast_buffers": False})
    flat = {**cfg.flat(), "retired_setting": 1}
    old = {"schema_version": 11, "run_key": cfg.run_key(), "status": "ok", "config": flat}
    rec = RunRecord.from_dict(old)
    stored = rec.identity.config
    assert stored["workload"] == cfg.workload.model_dump()
    assert stored["runtime"]["ddp"]["broadcast_buffers"] is False
    assert stored["retired_setting"] == 1 and set(stored) - {"retired_setting"} <= set(AXES)
    assert config_of(rec) == flat and setting(rec, "threads") == 2
    assert setting(rec, "nproc") == 2 and setting(rec, "no_such_setting", "x") == "x"
    again = RunConfig(**{k: v for k, v in stored.items() if k in AXES})
    assert again == cfg and again.run_key() == cfg.run_key()
    now = RunRecord.from_dict({**old, "schema_version": SCHEMA_VERSION,
                               "config": cfg.model_dump()})
    assert now.identity.config == cfg.model_dump() and config_of(now) == cfg.flat()


def test_a_v1_record_is_upgraded_without_invented_fields():
    v1 = {"schema_version": 1, "run_key": "k", "status": "ok", "model": "lstm",
          "batch_size": 4, "summary": {"median": 0.1}, "an_old_key": {"kept": True}}
    rec = RunRecord.from_dict(v1)
    assert rec.identity.world_size is None and rec.dist is None  # absent: one device
    d = rec.to_dict()
    kept = {k: v for k, v in v1.items() if k != "an_old_key"}
    assert d == {**kept, "schema_version": SCHEMA_VERSION,
                 "unrecognised": {"an_old_key": {"kept": True}}}  # kept, not lost
    assert "world_size" not in d


def test_a_v2_data_wait_is_restated_by_the_total_time_rule():
    """Store version 8 restated stored rows; a worker's v2 JSON read directly gets the same."""
    dw = {"n": 16, "median_s": 0.0, "share": 0.0, "time_share": 0.71, "threshold": 0.10,
          "input_bound": False}
    old = {"schema_version": 2, "run_key": "k", "status": "ok", "data_wait": dict(dw)}
    rec = RunRecord.from_dict(old)
    assert rec.data_wait.share == 0.71 and rec.data_wait.median_share == 0.0
    assert rec.data_wait.input_bound is True and rec.data_wait.criterion
    assert old["data_wait"] == dw  # the input is not changed
    new = {**old, "schema_version": SCHEMA_VERSION}
    assert RunRecord.from_dict(new).data_wait.share == 0.0  # current records are as written


def test_a_newer_record_and_a_newer_file_are_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"schema version 99, newer than this dlperf .*upgrade"):
        RunRecord.from_dict({"schema_version": 99, "run_key": "k"})
    with pytest.raises(ConfigError, match="which no dlperf wrote"):
        upgrade_record({"schema_version": 5})
    db = tmp_path / "newer.db"
    ResultStore(db).close()
    con = sqlite3.connect(db)
    con.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION + 1),))
    con.commit()
    con.close()
    with pytest.raises(ConfigError, match=f"schema version {SCHEMA_VERSION + 1}, newer"):
        ResultStore(db)
    with pytest.raises(ConfigError, match=f"schema version {SCHEMA_VERSION + 1}, newer"):
        ResultStore(db, read_only=True)
    # a row whose record is newer than the file's reader: refused when read as a record
    ok = tmp_path / "ok.db"
    cfg = make_run_config(model="fcn5_tiny", batch_size=2)
    with ResultStore(ok) as s:
        s.add(failure_record(cfg, "crash", "x"))
    con = sqlite3.connect(ok)
    js = json.loads(con.execute("SELECT result_json FROM results").fetchone()[0])
    con.execute("UPDATE results SET result_json=?", (json.dumps({**js, "schema_version": 42}),))
    from dlperf.results.rowcheck import seal
    from dlperf.results.rows import COLUMNS

    seal(con, 1, COLUMNS)  # as a newer dlperf would have stored it: its checksum matches
    con.commit()
    con.close()
    with ResultStore(ok) as s, pytest.raises(ConfigError, match="42, newer"):
        s.records()


def test_a_failure_record_has_the_identity_fields():
    cfg = make_run_config(model="fcn5_tiny", batch_size=8, grad_accum=2)
    rec = failure_record(cfg, "oom", "CUDA out of memory", env={"hostname": "h"},
                         worker={"returncode": 1, "stderr_tail": "boom"})
    ident = rec.identity
    assert ident.run_key == cfg.run_key() and ident.point_key == cfg.point_key()
    assert ident.status == "oom" and ident.error == "CUDA out of memory"
    assert (ident.model, ident.framework, ident.mode, ident.device) == (
        cfg.workload.model, cfg.runtime.framework, cfg.runtime.mode, cfg.hardware.device)
    assert ident.batch_size == cfg.global_batch and ident.grad_accum == 2
    assert ident.config == cfg.model_dump() and ident.spec.params > 0
    assert ident.created_at and ident.repeat == 0
    d = rec.to_dict()
    # every identity field but the tag (set only by a tagged run: dlperf run --tag)
    assert set(Identity.model_fields) - {"tag"} <= set(d) and "tag" not in d
    assert d["env"] == {"hostname": "h"}
    assert "summary" not in d and "samples" not in d  # a failure measured nothing
    assert d["worker"] == {"returncode": 1, "stderr_tail": "boom"}
    row = flatten(rec)
    assert row["status"] == "oom" and row["run_key"] == cfg.run_key()
    assert row["step_time_median_s"] is None and row["batch_size"] == 8
    with pytest.raises(ValueError, match="new_record"):
        failure_record(cfg, "ok")
    with pytest.raises(ValueError, match="unknown status"):
        failure_record(cfg, "exploded")


def test_the_record_is_typed_and_refuses_what_it_does_not_know():
    import pydantic

    cfg = make_run_config(model="fcn5_tiny", batch_size=2)
    rec = new_record(cfg, "ok", summary={"median": 0.01, "mean": 0.011, "n": 3},
                     memory={"peak_rss_bytes": 7}, samples={"measure": [0.01, 0.012, 0.011]},
                     timing={"wall_time_s": 0.04, "n_measured": 3})
    assert rec.summary.median == 0.01 and rec.summary.model_extra is None
    assert rec.timing.wall_time_s == 0.04 and rec.measured_s == [0.01, 0.012, 0.011]
    d = rec.to_dict()
    assert d["wall_time_s"] == 0.04 and d["n_measured"] == 3 and "timing" not in d
    assert RunRecord.from_dict(d).to_dict() == d
    for bad in ({"summary": {"median": 0.01, "new_stat": 1.5}}, {"future_part": {"a": 1}}):
        with pytest.raises(pydantic.ValidationError, match="Extra inputs are not permitted"):
            new_record(cfg, "ok", **bad)
    # numbers are not coerced: an int stays an int, a string is refused
    assert type(RunRecord.from_dict({"wall_time_s": 2}).timing.wall_time_s) is int
    with pytest.raises(ValueError):
        RunRecord.from_dict({"summary": {"median": "fast"}})
    rec.memory = {"peak_rss_bytes": 9}  # assignments are validated into parts
    assert rec.memory.peak_rss_bytes == 9


def test_records_read_raw_samples_and_losses_back(tmp_path):
    cfg = make_run_config(model="fcn5_tiny", batch_size=2)
    rec = new_record(cfg, "ok", samples={"first": [0.5], "measure": [0.01, 0.02],
                                         "data_wait": [0.001, 0.0]},
                     losses={"first": [2.0], "measure": [1.0, float("nan")]})
    with ResultStore(tmp_path / "r.db") as s:
        rid = s.add(rec, sweep="sw")
        (back,) = s.records()
        (no_raw,) = s.records(samples=False)
        row = s.rows()[0]
    assert back.stored.id == rid and back.stored.sweep == "sw"
    assert back.samples == {"data_wait": [0.001, 0.0], "first": [0.5], "measure": [0.01, 0.02]}
    assert back.losses == {"first": [2.0], "measure": [1.0, None]}  # SQLite keeps no NaN
    assert no_raw.samples is None and record_of(row).identity.run_key == cfg.run_key()
    assert "stored" not in back.to_dict()


def test_a_part_refuses_a_key_it_does_not_declare():
    """A misspelt field is an error where it is made (in the worker, a launcher or a test), not
    a new key in the store; the error names the key."""
    import pydantic

    cfg = make_run_config(model="fcn5_tiny", batch_size=2)
    with pytest.raises(pydantic.ValidationError, match="summary.medain"):
        RunRecord.from_dict({"schema_version": SCHEMA_VERSION, "run_key": "k", "status": "ok",
                             "summary": {"medain": 0.01}})
    rec = new_record(cfg, "ok")
    with pytest.raises(pydantic.ValidationError, match="thread_polciy"):
        rec.env = {"thread_polciy": {}}
    with pytest.raises(pydantic.ValidationError, match="tagg"):
        RunRecord.from_dict({**rec.to_dict(), "tagg": "v1"})


def test_an_older_record_keeps_its_unknown_keys_in_unrecognised():
    """Records written before parts refused unknown keys (version < 11) read: a key that no
    part declares is kept under its dotted path, not lost and not refused; a data-parallel
    record's engine description moves into ``dist.engine``."""
    old = {"schema_version": 10, "run_key": "k", "status": "ok", "odd": 1,
           "env": {"hostname": "h", "gpu_clock_mhz": 1980},
           "dist": {"replicas": 2, "master_addr": "localhost", "ddp": {"bucket_cap_mb": 25.0},
                    "per_rank": [{"rank": 0, "cpus": "0-1", "numa": 0}]},
           "breakdown_run": {"why": "x", "worker": {"pid": 1, "host": "h"}}}
    rec = RunRecord.from_dict(old)
    assert rec.unrecognised == {"odd": 1, "env.gpu_clock_mhz": 1980,
                                "dist.per_rank[0].numa": 0, "breakdown_run.worker.host": "h"}
    assert rec.dist.engine == {"master_addr": "localhost"}
    assert rec.dist.ddp == {"bucket_cap_mb": 25.0} and rec.env.hostname == "h"
    again = RunRecord.from_dict(rec.to_dict())  # version 11 now: read as it is
    assert canonical(again.to_dict()) == canonical(rec.to_dict())
    assert old["dist"]["master_addr"] == "localhost"  # the input is not changed
