"""The SQLite store: round trip, raw samples, schema version, bad files, exports."""

from __future__ import annotations

import csv
import io
import json
import sqlite3

import pytest

from dlperf.config import make_run_config
from dlperf.errors import ConfigError
from dlperf.results.export import to_csv, to_json
from dlperf.results.schema import RunRecord, new_record
from dlperf.results.store import SCHEMA_VERSION, ResultStore
from dlperf.stats import summarize, throughput


def fake_result(batch=8, status="ok", times=(0.01, 0.012, 0.011)):
    cfg = make_run_config(model="fcn5_tiny", batch_size=batch)
    r = new_record(cfg, status, None if status == "ok" else "boom").to_dict()
    if status == "ok":
        r.update(summary=summarize(list(times)).to_dict(),
                 throughput=throughput(len(times), batch, sum(times)),
                 samples={"first": [0.5], "warmup": [0.02, 0.011], "measure": list(times)},
                 losses={"first": [2.3], "warmup": [2.2, 2.1], "measure": [2.0, 1.9, float("nan")]},
                 memory={"peak_rss_bytes": 123, "peak_allocated_bytes": None},
                 n_measured=len(times), steady_state=True, timing_consistent=False,
                 env={"git": {"sha": "abc"}}, versions={"torch": "2.13.0"})
    return r


def test_round_trip_with_raw_samples(tmp_path):
    db = tmp_path / "r.db"
    with ResultStore(db) as s:
        rid = s.add(fake_result(), sweep="sw")
        s.add(fake_result(batch=16, status="oom"))
    with ResultStore(db) as s:
        rows = s.rows()
        assert [r["status"] for r in rows] == ["ok", "oom"]
        ok = rows[0]
        assert ok["sweep"] == "sw" and ok["batch_size"] == 8
        assert ok["step_time_median_s"] == pytest.approx(0.011)
        assert ok["samples"] == 24 and ok["samples_per_s"] == pytest.approx(24 / 0.033)
        assert ok["steady_state"] is True and ok["timing_consistent"] is False
        assert ok["git_sha"] == "abc" and ok["framework_version"] == "2.13.0"
        assert ok["peak_rss_bytes"] == 123
        raw = s.samples(rid)
        assert raw["measure"]["step_time_s"] == [0.01, 0.012, 0.011]
        assert raw["warmup"]["loss"] == [2.2, 2.1]
        assert raw["measure"]["loss"][2] is None or raw["measure"]["loss"][2] != raw["measure"]["loss"][2]
        assert s.done_keys() == {r["run_key"] for r in rows}
        assert s.done_keys(include_failed=False) == {ok["run_key"]}
        assert s.schema_version == SCHEMA_VERSION


def test_latest_row_per_point_and_filters(tmp_path):
    with ResultStore(tmp_path / "r.db") as s:
        s.add(fake_result(status="crash"))
        s.add(fake_result())
        assert [r["status"] for r in s.rows()] == ["ok"]
        assert len(s.rows(latest=False)) == 2
        assert s.rows(status="crash") == []
        with pytest.raises(ConfigError, match="unknown result column"):
            s.rows(colour="red")


def test_not_a_database_and_newer_schema_are_refused(tmp_path):
    bad = tmp_path / "bad.db"
    bad.write_text("this is not sqlite" * 100)
    with pytest.raises(ConfigError, match="not a dlperf results database"):
        ResultStore(bad)
    newer = tmp_path / "newer.db"
    ResultStore(newer).close()
    con = sqlite3.connect(newer)
    con.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    con.commit()
    con.close()
    with pytest.raises(ConfigError, match="newer"):
        ResultStore(newer)


def test_exports(tmp_path):
    with ResultStore(tmp_path / "r.db") as s:
        s.add(fake_result())
        s.add(fake_result(batch=32, status="oom"))
        rows = s.rows()
        parsed = list(csv.DictReader(io.StringIO(to_csv(rows))))
        assert [p["status"] for p in parsed] == ["ok", "oom"]
        assert "result_json" not in parsed[0]
        assert parsed[0]["layout"] == "auto" and parsed[0]["compile_mode"] == ""  # torch eager
        ro = fake_result()
        ro["config"] = {**ro["config"], "runtime": {**ro["config"]["runtime"], "mode": "graph",
                                                    "compile_mode": "reduce-overhead"}}
        ro["mode"] = "graph"
        s.add(ro)
        (g,) = [p for p in csv.DictReader(io.StringIO(to_csv(s.rows()))) if p["mode"] == "graph"]
        assert g["compile_mode"] == "reduce-overhead"
        js = json.loads(to_json(rows, s, include_samples=True))
        assert js[0]["result"]["config"]["workload"]["model"] == "fcn5_tiny"
        assert js[0]["raw_samples"]["measure"]["step_time_s"] == [0.01, 0.012, 0.011]


def test_version_1_file_is_migrated_and_keeps_its_rows(tmp_path):
    from dlperf.results.store import COLUMNS, MIGRATIONS

    db = tmp_path / "v1.db"
    added = {c for cols in MIGRATIONS.values() for c in cols}
    v1_cols = {k: t for k, t in COLUMNS.items() if k not in added}
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
    con.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    con.execute("CREATE TABLE results (id INTEGER PRIMARY KEY AUTOINCREMENT, "
                + ", ".join(f"{k} {t}" for k, t in v1_cols.items()) + ")")
    con.execute("CREATE TABLE samples (result_id INTEGER, phase TEXT, idx INTEGER, "
                "step_time_s REAL, loss REAL)")
    con.execute("CREATE TABLE sweeps (name TEXT, created_at TEXT, config_json TEXT)")
    con.execute("INSERT INTO results (run_key, status, model) VALUES ('k1', 'ok', 'lstm')")
    con.commit()
    con.close()
    with ResultStore(db) as s:
        assert s.schema_version == SCHEMA_VERSION == max(MIGRATIONS)
        rows = s.rows()
        assert rows[0]["model"] == "lstm" and rows[0]["compile_time_s"] is None
        assert rows[0]["mfu"] is None and rows[0]["input_bound"] is None
        assert rows[0]["world_size"] is None and rows[0]["per_device_batch"] is None
        s.add(fake_result())
        assert len(s.rows()) == 2
        assert s.collectives() == []  # the table added by version 7 exists


def _allreduce_report(times=(2e-5, 4e-5)):
    return {"benchmark": "allreduce", "backend": "gloo", "nranks": 2, "dtype": "float32",
            "framework": {"device_name": None}, "env": {"git": {"sha": "abc"}},
            "rows": [{"size_bytes": 8 * 4**i, "count": 2 * 4**i, "time_s": t,
                      "algbw_GBps": 8 * 4**i / t / 1e9, "busbw_GBps": 8 * 4**i / t / 1e9,
                      "imbalance": 1.01, "wrong": 0} for i, t in enumerate(times)]}


def test_collectives_are_stored_once_per_run_and_read_back(tmp_path):
    with ResultStore(tmp_path / "c.db") as s:
        rid = s.add_collectives(_allreduce_report(), "2026-11-30T00:00:00+00:00")
        assert s.add_collectives(_allreduce_report(), "later") == rid  # not stored twice
        other = s.add_collectives(_allreduce_report((3e-5, 5e-5)), "later")
        rows = s.collectives()
    assert other != rid and len(rows) == 4
    assert [r["size_bytes"] for r in rows[:2]] == [8, 32]
    assert rows[1]["busbw_gbps"] == pytest.approx(32 / 4e-5 / 1e9) and rows[0]["git_sha"] == "abc"
    with ResultStore(tmp_path / "c.db") as s, pytest.raises(ConfigError, match="not an all-reduce"):
        s.add_collectives({"rows": [{"size_bytes": 8}]}, "x")


def test_a_foreign_sqlite_file_is_refused_and_left_alone(tmp_path):
    p = tmp_path / "other.db"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE people (name TEXT)")
    con.commit()
    con.close()
    with pytest.raises(ConfigError, match="not a dlperf results database"):
        ResultStore(p)
    con = sqlite3.connect(p)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    con.close()
    assert tables == {"people"}


def test_version_7_data_wait_is_restated_by_total_time(tmp_path):
    """Schema 8 makes a stored run's data-wait share total wait / total time and relabels it."""
    from dlperf.results.store import flatten

    db = tmp_path / "v7.db"
    with ResultStore(db) as s:
        old = fake_result()
        old["data_wait"] = {"n": 16, "median_s": 0.0, "share": 0.0, "time_share": 0.71,
                            "threshold": 0.10, "input_bound": False}
        s.add(old)
        fresh = fake_result(batch=32)
        fresh["data_wait"] = {"share": 0.05, "time_share": 0.05, "median_share": 0.01,
                              "threshold": 0.10, "input_bound": False, "criterion": "x"}
        s.add(fresh)
        assert flatten(RunRecord.from_dict(old))["data_wait_share"] == 0.0
    con = sqlite3.connect(db)
    con.execute("UPDATE meta SET value='7' WHERE key='schema_version'")
    con.commit()
    con.close()
    with ResultStore(db) as s:
        assert s.schema_version == SCHEMA_VERSION
        a, b = sorted(s.rows(), key=lambda r: r["batch_size"])
        assert a["data_wait_share"] == pytest.approx(0.71) and a["input_bound"] is True
        dw = json.loads(a["result_json"])["data_wait"]
        assert dw["median_share"] == 0.0 and dw["share"] == 0.71 and dw["input_bound"] is True
        assert b["data_wait_share"] == 0.05 and b["input_bound"] is False  # already by the rule


def _at(result, when):
    result["created_at"] = when
    return result


def test_merge_keeps_every_result_once_in_time_order_with_samples(tmp_path):
    from dlperf.results.merge import merge_stores

    a, b, dest = tmp_path / "a.db", tmp_path / "b.db", tmp_path / "dest.db"
    shared = _at(fake_result(), "2026-12-01T10:00:00+00:00")
    with ResultStore(a) as s:
        s.add(shared)
        s.add(_at(fake_result(batch=16, times=(0.02, 0.02, 0.03)), "2026-12-01T12:00:00+00:00"))
        s.add_collectives(_allreduce_report(), "2026-12-01T10:00:00+00:00")
        s.add_sweep("sw", {"grid": []}, "2026-12-01T10:00:00+00:00")
    with ResultStore(b) as s:
        s.add(shared)  # the same run, copied into both files
        # a newer run of point a#1 measured on the other machine, and an older one of b=32
        s.add(_at(fake_result(batch=16, times=(0.05, 0.05, 0.05)), "2026-12-01T13:00:00+00:00"))
        s.add(_at(fake_result(batch=32), "2026-12-01T09:00:00+00:00"))
        s.add_collectives(_allreduce_report(), "2026-12-01T10:00:00+00:00")
        s.add_sweep("sw", {"grid": []}, "2026-12-01T10:00:00+00:00")
    a_bytes = a.read_bytes()
    summary = merge_stores(dest, [a, b])
    assert a.read_bytes() == a_bytes  # sources are read from copies
    assert summary["added"] == {
        str(a): {"results": 2, "collectives": 1, "sweeps": 1, "profiles": 0},
        str(b): {"results": 2, "collectives": 0, "sweeps": 0, "profiles": 0}}
    assert summary["results"] == 4 and summary["collectives"] == 1 and summary["sweeps"] == 1
    with ResultStore(dest) as s:
        every = s.rows(latest=False)
        assert [r["created_at"][11:13] for r in every] == ["09", "10", "12", "13"]
        latest = {r["batch_size"]: r for r in s.rows()}
        # the newest run of b=16 is the one measured later, wherever it was stored
        assert latest[16]["step_time_median_s"] == pytest.approx(0.05)
        assert s.samples(latest[16]["id"])["measure"]["step_time_s"] == [0.05, 0.05, 0.05]
        assert s.samples(latest[8]["id"])["warmup"]["loss"] == [2.2, 2.1]
        assert len(s.collectives()) == 2  # one run of two message sizes
    # merging again adds nothing; dest's own rows are kept when it is also the target
    again = merge_stores(dest, [a, b, dest])
    nothing = {"results": 0, "collectives": 0, "sweeps": 0, "profiles": 0}
    assert again["added"] == {str(a): nothing, str(b): nothing} and again["results"] == 4


def test_merge_refuses_a_missing_source_and_leaves_dest_alone(tmp_path):
    from dlperf.results.merge import merge_stores

    dest = tmp_path / "dest.db"
    with ResultStore(dest) as s:
        s.add(fake_result())
    before = dest.read_bytes()
    with pytest.raises(ConfigError, match="does not exist"):
        merge_stores(dest, [tmp_path / "nope.db"])
    (tmp_path / "foreign.db").write_bytes(b"not sqlite at all, just text" * 10)
    with pytest.raises(ConfigError, match="not a dlperf results database"):
        merge_stores(dest, [tmp_path / "foreign.db"])
    (tmp_path / "adir").mkdir()
    with pytest.raises(ConfigError, match="is a folder"):
        merge_stores(dest, [tmp_path / "adir"])
    assert dest.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir", "dest.db", "foreign.db"]


def test_merge_keeps_an_old_schema_source_unchanged_a_linked_dest_and_a_concurrent_writer(
        tmp_path):
    import os

    from dlperf.results.merge import merge_stores

    old = tmp_path / "old.db"  # a version-1 file (no meta row of a newer schema)
    with ResultStore(old) as s:
        s.add(_at(fake_result(batch=4), "2026-12-01T08:00:00+00:00"))
    con = sqlite3.connect(old)
    con.execute("UPDATE meta SET value='7' WHERE key='schema_version'")
    con.commit()
    con.close()
    old_bytes = old.read_bytes()
    real = tmp_path / "real.db"
    with ResultStore(real) as s:
        s.add(_at(fake_result(batch=8), "2026-12-01T09:00:00+00:00"))
    os.chmod(real, 0o600)
    link = tmp_path / "link.db"
    link.symlink_to(real)
    writer = ResultStore(real)  # a sweep with the file open
    merge_stores(link, [old])
    assert old.read_bytes() == old_bytes  # migrated in a copy only
    assert link.is_symlink() and (real.stat().st_mode & 0o777) == 0o600
    writer.add(_at(fake_result(batch=16), "2026-12-01T10:00:00+00:00"))  # goes on writing
    writer.close()
    with ResultStore(real) as s:
        assert [r["batch_size"] for r in s.rows()] == [4, 8, 16]


def test_merge_cli(tmp_path):
    from cli_here import dlperf_here  # the command in this process (tests/cli_here.py)

    a, dest = tmp_path / "a.db", tmp_path / "d.db"
    with ResultStore(a) as s:
        s.add(fake_result())
    r = dlperf_here("merge", str(a), "--db", str(dest), env={"COLUMNS": "300"})
    assert r.returncode == 0, r.stderr
    assert "1 new result(s), 0 new collective run(s)" in r.stderr
    with ResultStore(dest) as s:
        assert len(s.rows()) == 1
    r = dlperf_here("merge", str(tmp_path / "x.db"), "--db", str(dest), env={"COLUMNS": "300"})
    assert r.returncode == 2 and "does not exist" in r.stderr


def test_read_only_store_reads_an_older_file_without_changing_it(tmp_path):
    db = tmp_path / "old.db"
    with ResultStore(db) as s:
        s.add(fake_result())
    con = sqlite3.connect(db)
    con.execute("UPDATE meta SET value='7' WHERE key='schema_version'")
    con.commit()
    con.close()
    before = db.read_bytes()
    with ResultStore(db, read_only=True) as s:
        assert s.schema_version == SCHEMA_VERSION and len(s.rows()) == 1  # migrated in memory
    assert db.read_bytes() == before
    with pytest.raises(ConfigError, match="does not exist"):
        ResultStore(tmp_path / "none.db", read_only=True)
    (tmp_path / "t.db").write_bytes(b"plain text, not sqlite " * 50)
    with pytest.raises(ConfigError, match="not a dlperf results database"):
        ResultStore(tmp_path / "t.db", read_only=True)
    assert not (tmp_path / "none.db").exists()


def test_merge_keeps_each_results_timeline(tmp_path):
    """A result's per-kernel timeline (``--timeline``) lives in the ``timelines`` table, not
    in its row: a merge carries it to the new row, for the target's own rows as for the
    sources' (deleting the target's rows deletes their timelines)."""
    from dlperf.results import timelines
    from dlperf.results.merge import merge_stores

    a, dest = tmp_path / "a.db", tmp_path / "dest.db"
    tl = {"format": timelines.FORMAT, "data": "eJyrrgUAAXUA+Q==", "n_ops": 0}
    with ResultStore(a) as s:
        s.add({**_at(fake_result(batch=8), "2026-12-01T10:00:00+00:00"), "timeline": tl})
    with ResultStore(dest) as s:
        s.add({**_at(fake_result(batch=16), "2026-12-01T09:00:00+00:00"), "timeline": tl})
    merge_stores(dest, [a])
    with ResultStore(dest, read_only=True) as s:
        got = {r["batch_size"]: timelines.load(s, r["id"]) for r in s.rows()}
    assert {b: (t or {}).get("data") for b, t in got.items()} == {8: tl["data"],
                                                                  16: tl["data"]}
