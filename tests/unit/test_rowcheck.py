"""Damaged values inside a results file's rows (dlperf.results.rowcheck): NaN as text, wrong
types, deeply nested JSON, negative or huge medians, raw samples that are not numbers, bits
changed after storing. Readers skip such a row with one warning and never crash; merge never
copies one and refuses to rewrite a file that holds one; rows stored before checksums get them
from the next writer; a bad file among the kept results is quarantined, not fatal."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dlperf.cli import app
from dlperf.config import make_run_config
from dlperf.errors import ConfigError
from dlperf.results.dbfile import StoreError
from dlperf.results.rowcheck import DamagedRows, json_depth, scan
from dlperf.results.schema import new_record
from dlperf.results.store import COLUMNS, ResultStore, check_writer
from dlperf.results.unsaved import keep_unsaved, unsaved_dir
from dlperf.stats import summarize, throughput


def ok(batch: int) -> dict:
    r = new_record(make_run_config(model="fcn5_tiny", batch_size=batch), "ok").to_dict()
    times = [0.01, 0.012, 0.011, 0.0105]
    r.update(summary=summarize(times).to_dict(), throughput=throughput(4, batch, sum(times)),
             samples={"measure": times}, losses={"measure": [2.0] * 4}, n_measured=4,
             steady_state=True)
    return r


def make_db(path: Path, batches=(8, 16, 32)) -> Path:
    with ResultStore(path) as s:
        for b in batches:
            s.add(ok(b))
    return path


def tamper(db: Path, sql: str, *args) -> None:
    con = sqlite3.connect(db)
    con.execute(sql, args)
    con.commit()
    con.close()


def cli(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(app, list(args))
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    return r.exit_code, " ".join(r.output.split())


DAMAGE = {
    "nan_as_text": ("UPDATE results SET step_time_median_s='NaN' WHERE id=2", "not a number"),
    "negative_median": ("UPDATE results SET step_time_median_s=-0.5 WHERE id=2", "negative"),
    "huge_median": ("UPDATE results SET step_time_median_s=1e300 WHERE id=2", "over"),
    "wrong_type": ("UPDATE results SET batch_size='sixteen' WHERE id=2", "not a whole number"),
    "bool_not_0_1": ("UPDATE results SET steady_state=7 WHERE id=2", "not 0 or 1"),
    "bad_status": ("UPDATE results SET status='fine' WHERE id=2", "status"),
    "deep_json": ("UPDATE results SET result_json=? WHERE id=2", "nested deeper"),
    "not_json": ("UPDATE results SET result_json='{oops' WHERE id=2", "does not parse"),
    "sample_text": ("UPDATE samples SET step_time_s='fast' WHERE result_id=2 AND idx=1",
                    "raw step time"),
    "sample_negative": ("UPDATE samples SET step_time_s=-1 WHERE result_id=2 AND idx=1",
                        "raw step time"),
}


@pytest.mark.parametrize("name", sorted(DAMAGE))
def test_a_damaged_row_is_named_skipped_and_crashes_no_reader(tmp_path, name):
    db = make_db(tmp_path / "r.db")
    sql, said = DAMAGE[name]
    tamper(db, sql, *(['{"a": ' + "[" * 5000 + "]" * 5000 + "}"] if "?" in sql else []))
    tamper(db, "DELETE FROM row_sums")  # value checks alone (a file from before checksums)
    with ResultStore(db, read_only=True) as s, pytest.warns(DamagedRows, match=said):
        assert [r["batch_size"] for r in s.rows()] == [8, 32]
    before = db.read_bytes()
    for args in (["results", "--db", str(db)], ["results", "--db", str(db), "-f", "json"],
                 ["results", "--db", str(db), "-f", "csv"],
                 ["results", "--db", str(db), "--compare", "frameworks"],
                 ["report", "--db", str(db), "-o", str(tmp_path / "rep")],
                 ["compare", str(db), str(db)],
                 ["sweep", "--help"]):
        code, text = cli(*args)
        assert code in (0, 1), (args, text)
    assert db.read_bytes() == before  # readers never change it


ODD_SAMPLES = [("fast", None), (-1.0, None), (-0.0, None), (float("inf"), None), (2e6, None),
               (1e6, None), (None, None), (None, "low"), (3, None), (0.01, 2), (0.01, b"x"),
               (b"\x00", None), (0.01, float("-inf")), (0.01, True), (0.01, 1.5)]


@pytest.mark.parametrize("with_sums", [False, True])
def test_samples_are_judged_in_sql_as_in_python(tmp_path, with_sums):
    """A file without checksums has its plain samples passed in SQL; each row with an odd
    sample is read and judged by ``sample_problem`` as every sample was: the same rows and
    the same words, with or without checksums."""
    from dlperf.results.rowcheck import sample_problem

    db = make_db(tmp_path / "r.db", batches=tuple(range(1, len(ODD_SAMPLES) + 2)))
    con = sqlite3.connect(db)
    for rid, (t, loss) in enumerate(ODD_SAMPLES, 2):  # row 1 keeps its plain samples
        con.execute("UPDATE samples SET step_time_s=?, loss=? WHERE result_id=? AND idx=2",
                    (t, loss, rid))
    if not with_sums:
        con.execute("DELETE FROM row_sums")
    else:
        con.execute("UPDATE row_sums SET samples_sha=(SELECT samples_sha FROM row_sums "
                    "WHERE result_id=1)")  # every row's samples match row 1's sum but row 1
    con.commit()
    con.close()
    with ResultStore(db, read_only=True) as s:
        got = scan(s._db, COLUMNS)
        stored = [s._db.execute("SELECT step_time_s, loss FROM samples WHERE result_id=? "
                                "ORDER BY phase, idx", (rid,)).fetchall()
                  for rid in range(2, len(ODD_SAMPLES) + 2)]
    want = {}
    for rid, rows in enumerate(stored, 2):
        problem = next((p for t, loss in rows if (p := sample_problem(t, loss))), None)
        if problem:
            want[rid] = problem
        elif with_sums:
            want[rid] = ("the checksum of its raw samples does not match them (changed after "
                         "they were stored)")
    assert len(want) >= 7 and (1 not in got)
    assert got == want


def test_a_change_after_storing_is_caught_by_the_checksum(tmp_path):
    """A plausible value (bit rot: 0.011 -> 0.019 s) passes every value check; the checksum
    names it, for a column, a sample, and the record's JSON."""
    db = make_db(tmp_path / "r.db")
    tamper(db, "UPDATE results SET step_time_median_s=0.019 WHERE id=1")
    tamper(db, "UPDATE samples SET step_time_s=0.013 WHERE result_id=2 AND idx=0")
    js = sqlite3.connect(db).execute("SELECT result_json FROM results WHERE id=3").fetchone()[0]
    tamper(db, "UPDATE results SET result_json=? WHERE id=3", js.replace('"fcn5_tiny"',
                                                                        '"fcn8_tiny"', 1))
    with ResultStore(db, read_only=True) as s:
        bad = scan(s._db, COLUMNS)
    assert sorted(bad) == [1, 2, 3] and all("checksum" in v for v in bad.values())


def test_rows_stored_before_checksums_are_sealed_by_the_next_writer(tmp_path):
    db = make_db(tmp_path / "r.db")
    tamper(db, "DROP TABLE row_sums")
    tamper(db, "UPDATE results SET batch_size='x' WHERE id=3")  # damaged: never sealed
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DamagedRows)
        with ResultStore(db) as s:
            sealed = {r[0] for r in s._db.execute("SELECT result_id FROM row_sums")}
    assert sealed == {1, 2}
    tamper(db, "UPDATE results SET step_time_median_s=0.5 WHERE id=1")
    with ResultStore(db, read_only=True) as s, pytest.warns(DamagedRows):
        assert [r["id"] for r in s.rows()] == [2]


def test_merge_skips_damaged_rows_and_refuses_a_damaged_target(tmp_path):
    src = make_db(tmp_path / "a.db")
    tamper(src, "UPDATE results SET step_time_median_s='NaN' WHERE id=1")
    code, text = cli("merge", str(src), "--db", str(tmp_path / "m.db"))
    assert code == 0 and "damaged" in text
    with ResultStore(tmp_path / "m.db", read_only=True) as s:
        assert len(s.rows()) == 2 and scan(s._db, COLUMNS) == {}
    before = src.read_bytes()
    other = make_db(tmp_path / "b.db", batches=(64,))
    code, text = cli("merge", str(other), "--db", str(src))
    assert code == 2 and "nothing was merged" in text and src.read_bytes() == before


def test_a_bad_kept_result_is_quarantined_and_the_good_ones_stored(tmp_path):
    db = make_db(tmp_path / "r.db", batches=(8,))
    folder = unsaved_dir(db)
    folder.mkdir()
    (folder / "garbage.json").write_text("{not json")
    (folder / "deep.json").write_text("[" * 100000 + "]" * 100000)
    bad = ok(4)
    bad["summary"]["median"] = "NaN"
    (folder / "wrong.json").write_text(json.dumps({"sweep": None, "result": bad}))
    assert keep_unsaved(ok(16), db, "s") is not None
    with pytest.warns(DamagedRows) as got, ResultStore(db) as s:
        assert sorted(r["batch_size"] for r in s.rows()) == [8, 16]
    assert len(got) == 3
    assert sorted(p.name for p in (folder / "quarantine").iterdir()) == [
        "deep.json", "garbage.json", "wrong.json"]
    with ResultStore(db) as s:  # the next write is not in the way of anything
        s.add(ok(64))


def test_the_dry_run_refuses_what_the_sweep_refuses(tmp_path):
    db = make_db(tmp_path / "r.db")
    check_writer(db)
    check_writer(tmp_path / "new.db")
    tamper(db, "UPDATE meta SET value='x' WHERE key='schema_version'")
    with pytest.raises(ConfigError, match=str(db)):
        check_writer(db)


def test_json_depth_counts_without_recursion():
    assert json_depth(1) == 0 and json_depth([[1], {"a": []}]) == 3
    deep: list = []
    for _ in range(100000):
        deep = [deep]
    assert json_depth(deep, limit=64) == 65


def test_the_dry_run_refuses_a_file_the_sweep_cannot_write(tmp_path):
    db = make_db(tmp_path / "r.db")
    os.chmod(db, stat.S_IREAD)
    try:
        if os.access(db, os.W_OK):
            pytest.skip("running as a user who may write a read-only file (root)")
        with pytest.raises(StoreError, match="cannot be written"):
            check_writer(db)
    finally:
        os.chmod(db, stat.S_IREAD | stat.S_IWRITE)


def test_a_record_that_cannot_be_stored_is_kept_beside_the_file(tmp_path):
    """store_or_keep is given the sweep's RunRecord (not a dict): when the store refuses it,
    it is kept in DB.unsaved/ and the next writer stores it."""
    from dlperf.results.schema import RunRecord
    from dlperf.results.unsaved import store_or_keep, unsaved_files

    db = make_db(tmp_path / "r.db", batches=(8,))

    class Full:
        path = db

        def add(self, result, sweep=None):
            raise StoreError("the disk is full")

    with pytest.raises(StoreError, match="kept in"):
        store_or_keep(Full(), RunRecord.from_dict(ok(16)), "s")
    assert len(unsaved_files(db)) == 1
    with ResultStore(db) as s:
        assert sorted(r["batch_size"] for r in s.rows()) == [8, 16]
