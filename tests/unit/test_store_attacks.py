"""The results file under attack (issue 23): odd paths, outputs that are the database, locks,
full disks, read-only files, bad schema versions, foreign and damaged files, SQL built from a
foreign file's column names, empty files; and readers that never change the file."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dlperf.cli import app
from dlperf.config import make_run_config
from dlperf.errors import ConfigError
from dlperf.results.dbfile import StoreBusy, StoreError, file_uri
from dlperf.results.migrations import SCHEMA_VERSION
from dlperf.results.schema import RunRecord, new_record
from dlperf.results.store import ResultStore, stored_keys
from dlperf.stats import summarize, throughput


def result(batch=8, status="ok", times=(0.01, 0.012, 0.011, 0.0105, 0.0111, 0.0108)):
    cfg = make_run_config(model="fcn5_tiny", batch_size=batch)
    r = new_record(cfg, status, None if status == "ok" else "boom").to_dict()
    if status == "ok":
        r.update(summary=summarize(list(times)).to_dict(),
                 throughput=throughput(len(times), batch, sum(times)),
                 samples={"first": [0.5], "warmup": [0.02], "measure": list(times)},
                 losses={"first": [2.3], "warmup": [2.2], "measure": [2.0] * len(times)},
                 n_measured=len(times), steady_state=True)
    return r


def make_db(path: Path, batches=(8, 16)) -> Path:
    with ResultStore(path) as s:
        for b in batches:
            s.add(result(batch=b))
    return path


def cli(*args: str) -> tuple[int, str, BaseException | None]:
    """A command in this process: (exit code, output, an exception that is not an exit)."""
    r = CliRunner().invoke(app, list(args))
    exc = r.exception if not isinstance(r.exception, SystemExit) else None
    return r.exit_code, " ".join(r.output.split()), exc


def snapshot(path: Path) -> tuple[bytes, int, list[str]]:
    """The file's bytes and mtime, and the files beside it named after it (journal, ...)."""
    return (path.read_bytes(), path.stat().st_mtime_ns,
            sorted(n for n in os.listdir(path.parent) if n.startswith(path.name)))


@pytest.mark.parametrize("name", ["a#b.db", "q?x=1.db", "p%41.db", "with space.db",
                                  "all #?% of it.db"])
def test_a_path_with_uri_characters_is_one_file(tmp_path, name):
    """``#``, ``?``, ``%`` and spaces are part of the name: the rows are read back, merge finds
    them, and no stray file appears (unquoted, ``a#b.db`` read a new empty file ``a``)."""
    db = make_db(tmp_path / name)
    assert file_uri(db, "ro").startswith("file:///") and "#" not in file_uri(db, "ro")
    with ResultStore(db, read_only=True) as s:
        assert [r["batch_size"] for r in s.rows()] == [8, 16]
    code, out, exc = cli("results", "--db", str(db), "-f", "csv")
    assert code == 0 and exc is None and out.count("fcn5_tiny") == 2
    dest = tmp_path / f"merged {name}"
    assert cli("merge", str(db), "--db", str(dest))[0] == 0
    with ResultStore(dest, read_only=True) as s:
        assert len(s.rows()) == 2
    assert sorted(os.listdir(tmp_path)) == sorted([name, f"merged {name}"])


def test_an_output_that_is_the_database_is_refused(tmp_path):
    db = make_db(tmp_path / "r.db")
    before = snapshot(db)
    (tmp_path / "link.csv").symlink_to(db)
    os.link(db, tmp_path / "hard.csv")
    before = snapshot(db)
    for out in (db, tmp_path / "link.csv", tmp_path / "hard.csv", tmp_path / "." / "r.db"):
        code, text, exc = cli("results", "--db", str(db), "-f", "csv", "-o", str(out))
        assert code == 2 and exc is None and "would destroy it" in text, text
        code, text, exc = cli("compare", str(db), str(db), "-o", str(out))
        assert code == 2 and exc is None and "would destroy it" in text, text
    assert snapshot(db) == before
    rep = tmp_path / "rep"
    rep.mkdir()
    inside = make_db(rep / "report.md")
    code, text, exc = cli("report", "--db", str(inside), "-o", str(rep))
    assert code == 2 and exc is None and "under a name the report writes" in text
    ok = make_db(rep / "results.db")  # a db beside the report's files is fine, but the
    code, text, exc = cli("report", "--db", str(ok), "-o", str(rep), "-f", "md")  # other db
    assert code == 2 and exc is None and "SQLite database" in text, text  # is never replaced
    code, text, exc = cli("report", "--db", str(ok), "-o", str(rep), "-f", "md", "--force")
    assert code == 2 and "not even with --force" in text, text
    assert (rep / "report.md").read_bytes() == inside.read_bytes()  # not overwritten


def test_an_output_named_relatively_that_is_the_database_is_refused(tmp_path, monkeypatch):
    """The fresh-user trial's cases: ``-o X.db``, ``-o ./X.db`` and a path through ``..``,
    relative to the working directory, for CSV and JSON; the file stays byte for byte."""
    sub = tmp_path / "dbt"
    sub.mkdir()
    db = make_db(sub / "g1.db")
    before = db.read_bytes()
    monkeypatch.chdir(sub)
    for out in ("g1.db", "./g1.db", "../dbt/g1.db", str(tmp_path / "dbt" / ".." / "dbt" /
                                                          "g1.db")):
        for fmt in ("csv", "json"):
            code, text, exc = cli("results", "--db", "g1.db", "--format", fmt, "-o", out)
            assert code == 2 and exc is None and "would destroy it" in text, (out, fmt, text)
            assert "wrote" not in text
        code, text, exc = cli("results", "--db", "./g1.db", "-f", "csv", "-o", out)
        assert code == 2 and "would destroy it" in text, (out, text)
    assert db.read_bytes() == before
    with ResultStore(db, read_only=True) as s:  # still a results database
        assert len(s.rows()) == 2


def test_a_locked_file_waits_then_fails_clearly_and_keeps_what_was_stored(tmp_path,
                                                                            monkeypatch):
    db = make_db(tmp_path / "r.db")
    monkeypatch.setenv("DLPERF_DB_TIMEOUT_S", "0.3")
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another writer holding the lock
    store = ResultStore(tmp_path / "other.db")  # unrelated file: fine
    store.close()
    t0 = time.monotonic()
    with pytest.raises(StoreBusy, match="stayed locked by another process for 0.3 s"):
        ResultStore(db)
    assert time.monotonic() - t0 < 5
    holder.execute("ROLLBACK")
    store = ResultStore(db)
    holder.execute("BEGIN IMMEDIATE")
    with pytest.raises(StoreBusy, match="DLPERF_DB_TIMEOUT_S"):
        store.add(result(batch=32))
    holder.execute("ROLLBACK")
    store.add(result(batch=64))  # the store goes on once the lock is gone
    assert [r["batch_size"] for r in store.rows()] == [8, 16, 64]
    store.close()
    holder.close()
    # a reader does not wait for a writer's RESERVED lock: it reads the committed rows
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("DELETE FROM samples")
    with ResultStore(db, read_only=True) as s:
        assert len(s.rows()) == 3 and s.samples(1)
    holder.execute("ROLLBACK")
    holder.close()


@pytest.mark.timeout(60, method="thread")  # the unbounded wait is in C: no signal ends it
def test_a_reader_waits_for_an_exclusive_lock_within_the_timeout_saying_so(tmp_path,
                                                                           monkeypatch,
                                                                           capfd):
    """SQLite's backup (the reader's copy) retried an EXCLUSIVE lock forever without a word:
    `dlperf results` on a file another program held in a write transaction never ended."""
    db = make_db(tmp_path / "r.db")
    monkeypatch.setenv("DLPERF_DB_TIMEOUT_S", "1.5")
    monkeypatch.setenv("DLPERF_LOCK_NOTICE_S", "0.3")
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("DELETE FROM samples")
    t0 = time.monotonic()
    with pytest.raises(StoreBusy, match="stayed locked by another process for 1.5 s while "
                                        "reading it"):
        ResultStore(db, read_only=True)
    assert time.monotonic() - t0 < 10
    assert "waiting for another process's lock" in capfd.readouterr().err
    r = CliRunner().invoke(app, ["results", "--db", str(db)])
    assert r.exit_code == 2 and "stayed locked" in r.output
    holder.execute("ROLLBACK")
    holder.close()
    with ResultStore(db, read_only=True) as s:  # free again: read whole
        assert len(s.rows()) == 2 and s.samples(1)


def test_a_result_measured_while_the_file_is_locked_is_kept_and_stored_later(tmp_path,
                                                                           monkeypatch):
    """The point just measured is not lost: kept beside the file, stored once by the next
    writer (issue 23: a lock held over 30 s aborted the sweep and lost it)."""
    from rich.console import Console

    from dlperf.sweep import execute

    db = make_db(tmp_path / "r.db", batches=())
    monkeypatch.setenv("DLPERF_DB_TIMEOUT_S", "0.3")
    holder = sqlite3.connect(db, isolation_level=None)
    cfgs = [make_run_config(model="fcn5_tiny", batch_size=b) for b in (1, 2)]

    def runner(cfg):
        r = result(batch=cfg.workload.batch_size)
        r.update(run_key=cfg.run_key(), config=cfg.model_dump())
        if cfg.workload.batch_size == 2:
            holder.execute("BEGIN IMMEDIATE")  # somebody takes the lock while it runs
        return RunRecord.from_dict(r)

    with ResultStore(db) as store, pytest.raises(StoreBusy) as err:
        execute(cfgs, store, runner=runner, console=Console(quiet=True))
    assert "is kept in" in str(err.value) and "r.db.unsaved" in str(err.value)
    holder.execute("ROLLBACK")
    kept = list((tmp_path / "r.db.unsaved").glob("*.json"))
    assert len(kept) == 1
    with ResultStore(db, read_only=True) as s:  # a reader stores nothing
        assert [r["batch_size"] for r in s.rows()] == [1]
    assert kept[0].exists()
    with ResultStore(db) as s:
        assert [r["batch_size"] for r in s.rows()] == [1, 2]
    assert not (tmp_path / "r.db.unsaved").exists()
    with ResultStore(db) as s:  # once
        assert len(s.rows(latest=False)) == 2
    holder.close()


def test_a_full_disk_and_a_read_only_file_are_clear_errors_and_lose_nothing(tmp_path):
    db = make_db(tmp_path / "r.db")
    store = ResultStore(db)
    pages = store._db.execute("PRAGMA page_count").fetchone()[0]
    store._db.execute(f"PRAGMA max_page_count = {pages}")  # the disk is full at this size
    big = result(batch=99, times=tuple(0.01 + i * 1e-6 for i in range(5000)))
    with pytest.raises(StoreError, match="is full: storing a result failed and was rolled "
                                         "back; nothing stored before is lost"):
        store.add(big)
    assert [r["batch_size"] for r in store.rows()] == [8, 16]
    store._db.execute("PRAGMA query_only = 1")  # as a file opened read-only
    with pytest.raises(StoreError, match="cannot be written"):
        store.add(result(batch=3))
    store.close()
    with ResultStore(db) as s:
        assert [r["batch_size"] for r in s.rows()] == [8, 16]
        assert s._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


@pytest.mark.parametrize("value", ["abc", "", "8.5", "-1", "0", "9" * 30])
def test_a_malformed_schema_version_is_named(tmp_path, value):
    db = make_db(tmp_path / "r.db")
    con = sqlite3.connect(db)
    con.execute("UPDATE meta SET value=? WHERE key='schema_version'", (value,))
    con.commit()
    con.close()
    before = snapshot(db)
    for read_only in (True, False):
        with pytest.raises(StoreError) as e:
            ResultStore(db, read_only=read_only)
        msg = str(e.value)
        assert repr(value) in msg or "newer than this dlperf" in msg, msg
    assert snapshot(db) == before
    code, text, exc = cli("results", "--db", str(db))
    assert code == 2 and exc is None and "schema" in text


def test_a_newer_or_hollow_file_is_refused_by_every_command(tmp_path):
    newer = make_db(tmp_path / "newer.db")
    con = sqlite3.connect(newer)
    con.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION + 1),))
    con.commit()
    con.close()
    hollow = tmp_path / "hollow.db"  # a foreign file that claims version 8
    con = sqlite3.connect(hollow)
    con.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
    con.execute("INSERT INTO meta VALUES ('schema_version', '8')")
    con.commit()
    con.close()
    sweep = tmp_path / "s.yaml"
    sweep.write_text("name: s\ndefaults: {model: fcn5_tiny, framework: torch}\n"
                     "grid:\n  - batch_size: [1, 2]\n")
    expect = {newer: f"schema version {SCHEMA_VERSION + 1}, newer than this dlperf understands",
              hollow: "claims dlperf schema version 8 but lacks results"}
    ok = make_db(tmp_path / "ok.db")
    for db, words in expect.items():
        before = snapshot(db)
        for args in (["results", "--db", str(db)], ["report", "--db", str(db), "-o",
                                                    str(tmp_path / "rep")],
                     ["compare", str(db), str(db)], ["merge", str(db), "--db",
                                                     str(tmp_path / "m.db")],
                     ["sweep", str(sweep), "--db", str(db), "--dry-run"],
                     ["predict", "--db", str(db), "--validate"],
                     ["merge", str(ok), "--db", str(db)]):
            code, text, exc = cli(*args)
            assert code == 2 and exc is None and words in text, (args, text)
        assert snapshot(db) == before


def test_merge_never_builds_sql_from_a_foreign_file_s_column_names(tmp_path):
    evil = make_db(tmp_path / "evil.db")
    bad = 'x"; DROP TABLE results; --'
    con = sqlite3.connect(evil)
    quoted = '"' + bad.replace('"', '""') + '"'
    con.execute(f"ALTER TABLE collectives ADD COLUMN {quoted} TEXT")
    con.execute(f"ALTER TABLE results ADD COLUMN {quoted} TEXT")
    con.execute(f"INSERT INTO collectives (run_id, benchmark, size_bytes, time_s, {quoted}) "
                "VALUES ('r1', 'allreduce', 1024, 0.001, 'boom')")
    con.commit()
    con.close()
    from dlperf.results.merge import merge_stores

    dest = make_db(tmp_path / "dest.db", batches=(4,))
    summary = merge_stores(dest, [evil])
    assert summary["results"] == 3 and summary["collectives"] == 1
    con = sqlite3.connect(dest)
    assert bad not in {r[1] for r in con.execute("PRAGMA table_info(collectives)")}
    assert con.execute("SELECT COUNT(*) FROM results").fetchone()[0] == 3
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    # a source lacking dlperf's columns is refused with what it lacks
    thin = tmp_path / "thin.db"
    con = sqlite3.connect(thin)
    con.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
    con.execute("INSERT INTO meta VALUES ('schema_version', '8')")
    for t in ("results", "samples", "sweeps", "collectives"):
        con.execute(f"CREATE TABLE {t} (id INTEGER PRIMARY KEY, {quoted} TEXT)")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="lacks results.run_key"):
        merge_stores(dest, [thin])


def test_an_empty_file_is_refused_by_readers_and_left_empty(tmp_path):
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    with pytest.raises(StoreError, match=r"is empty \(0 bytes\)"):
        ResultStore(empty, read_only=True)
    for args in (["results", "--db", str(empty)], ["report", "--db", str(empty), "-o",
                                                   str(tmp_path / "rep")],
                 ["compare", str(empty), str(empty)], ["predict", "--db", str(empty), "--validate"],
                 ["merge", str(empty), "--db", str(tmp_path / "m.db")]):
        code, text, exc = cli(*args)
        assert code == 2 and exc is None and "empty (0 bytes)" in text, (args, text)
    assert empty.stat().st_size == 0 and not (tmp_path / "m.db").exists()
    assert stored_keys(empty) == set()  # a sweep's dry run: nothing stored yet


def _damage(db: Path) -> None:
    """Overwrite the middle pages of ``db`` with garbage (the header stays valid)."""
    data = bytearray(db.read_bytes())
    page = 4096
    assert len(data) > 3 * page
    data[page:len(data) - page] = b"\xa5" * (len(data) - 2 * page)
    db.write_bytes(bytes(data))


def test_a_damaged_file_is_refused_clearly_even_by_a_dry_run(tmp_path):
    db = make_db(tmp_path / "r.db", batches=tuple(range(1, 30)))
    _damage(db)
    before = snapshot(db)
    with pytest.raises(StoreError, match="damaged|not a dlperf results database"):
        ResultStore(db, read_only=True)
    with pytest.raises(StoreError, match="damaged|not a dlperf results database"):
        ResultStore(db)
    sweep = tmp_path / "s.yaml"
    sweep.write_text("name: s\ndefaults: {model: fcn5_tiny, framework: torch}\n"
                     "grid:\n  - batch_size: [1, 2]\n")
    for args in (["sweep", str(sweep), "--db", str(db), "--dry-run"],
                 ["results", "--db", str(db), "-f", "json"]):
        code, text, exc = cli(*args)
        assert code == 2 and exc is None and ("damaged" in text or "not a dlperf" in text), text
        assert "stored" not in text.split("error")[0]
    assert snapshot(db) == before


def test_readers_never_change_the_file(tmp_path):
    """results (every format), a comparison, report, compare, predict, merge's source, the
    dry run and the Python exports leave the bytes, mtime and folder as they were, also for an
    older schema (migrated in memory only) and with a hot journal of a killed writer."""
    db = make_db(tmp_path / "r.db", batches=(8, 16, 32))
    con = sqlite3.connect(db)
    con.execute("UPDATE meta SET value='7' WHERE key='schema_version'")
    con.commit()
    con.close()
    code = ("import os, signal, sqlite3, sys\n"
            "con = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
            "con.execute('PRAGMA cache_size=1')\n"
            "con.execute('BEGIN IMMEDIATE')\n"
            "con.execute('DELETE FROM samples')\n"
            "con.execute('UPDATE results SET model = \"gone\"')\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n")
    subprocess.run([sys.executable, "-c", code, str(db)], check=False)
    assert Path(f"{db}-journal").is_file()  # a hot journal: the writer died mid-transaction
    journal = Path(f"{db}-journal").read_bytes()
    before = snapshot(db)
    time.sleep(0.05)
    sweep = tmp_path / "s.yaml"
    sweep.write_text("name: s\ndefaults: {model: fcn5_tiny, framework: torch}\n"
                     "grid:\n  - batch_size: [8, 64]\n")
    out = tmp_path / "out"
    out.mkdir()
    runs = [["results", "--db", str(db)], ["results", "--db", str(db), "-f", "csv", "-o",
                                           str(out / "r.csv")],
            ["results", "--db", str(db), "-f", "json", "--samples"],
            ["results", "--db", str(db), "--compare", "modes"],
            ["report", "--db", str(db), "-o", str(out / "rep")],
            ["compare", str(db), str(db), "-f", "json"],
            ["predict", "--db", str(db), "--validate"],
            ["merge", str(db), "--db", str(out / "m.db")],
            ["sweep", str(sweep), "--db", str(db), "--dry-run"]]
    for args in runs:
        code, text, exc = cli(*args)
        assert exc is None, (args, exc)
        assert code == 0, (args, text)
        assert snapshot(db) == before, args
    assert "gone" not in (out / "r.csv").read_text()  # the committed state, rolled back in a copy
    code, text, _ = cli("sweep", str(sweep), "--db", str(db), "--dry-run")
    assert "1 pending, 1 stored" in text
    from dlperf.results.export import to_csv, to_json

    with ResultStore(db, read_only=True) as s:
        assert to_csv(s.rows()).count("fcn5_tiny") == 3
        assert len(to_json(s.rows(), s, include_samples=True)) > 100
        assert all(s.samples(r["id"]) for r in s.rows())
    assert snapshot(db) == before and Path(f"{db}-journal").read_bytes() == journal
    with ResultStore(db) as s:  # the next writer rolls the journal back for good
        assert [r["model"] for r in s.rows()] == ["fcn5_tiny"] * 3
    assert not Path(f"{db}-journal").exists()


KILLED_WRITER = ("import os, signal, sqlite3, sys\n"
                 "con = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
                 "con.execute('PRAGMA cache_size=1')\n"
                 "con.execute('BEGIN IMMEDIATE')\n"
                 "for sql in sys.argv[2:]:\n"
                 "    con.execute(sql)\n"
                 "os.kill(os.getpid(), signal.SIGKILL)\n")


def kill_a_writer_mid_transaction(db: Path, *sql: str) -> bytes:
    """A writer of ``db`` killed with SIGKILL inside a transaction of ``sql`` (default: every
    sample deleted, every model renamed ``gone``) whose pages reached the file
    (``cache_size=1`` spills them): its hot journal's bytes."""
    sql = sql or ("DELETE FROM samples", "UPDATE results SET model = 'gone'")
    subprocess.run([sys.executable, "-c", KILLED_WRITER, str(db), *sql], check=False)
    return Path(f"{db}-journal").read_bytes()


@pytest.mark.parametrize("meanwhile", ["rolled back", "rolled back, then another killed"])
def test_a_reader_beside_a_hot_journal_never_copies_a_writer_s_half_state(tmp_path,
                                                                          monkeypatch,
                                                                          meanwhile):
    """A reader beside a killed writer's hot journal copies the file and the journal; another
    writer (a second sweep) may roll the journal back, and write, between the two copies. The
    reader sees the committed rows, never the half-written transaction (which showed as
    damaged rows, or a damaged file), and leaves the file as the writers left it."""
    import dlperf.results.dbfile as dbfile

    db = make_db(tmp_path / "r.db", batches=(8, 16, 32))
    first = kill_a_writer_mid_transaction(db)
    real_copy, interfered = dbfile.shutil.copyfile, []

    def copy_while_a_writer_takes_over(src, dst, **kw):
        out = real_copy(src, dst, **kw)
        if Path(src) == db and not interfered:
            interfered.append(True)
            ResultStore(db).close()  # the survivor rolls the journal back for good
            if meanwhile != "rolled back":
                # a new hot journal, of another page than most the first one changed
                assert kill_a_writer_mid_transaction(
                    db, "UPDATE meta SET value = 'x' WHERE key = 'created_by'") != first
        return out

    monkeypatch.setattr(dbfile.shutil, "copyfile", copy_while_a_writer_takes_over)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a damaged row is a warning: none may come
        with ResultStore(db, read_only=True) as s:
            got = [(r["model"], r["batch_size"]) for r in s.rows()]
            assert all(s.samples(r["id"]) for r in s.rows())
    assert interfered and got == [("fcn5_tiny", b) for b in (8, 16, 32)]
    assert Path(f"{db}-journal").exists() == (meanwhile != "rolled back")


def test_a_hot_journal_that_never_settles_is_a_bounded_clear_error(tmp_path, monkeypatch):
    """Beside a hot journal that changes every time the file is copied (writers that keep
    rolling back and writing), a reader gives up after the lock timeout, saying why."""
    import dlperf.results.dbfile as dbfile

    db = make_db(tmp_path / "r.db")
    kill_a_writer_mid_transaction(db)
    journal = Path(f"{db}-journal")
    real_copy, copies = dbfile.shutil.copyfile, []

    def copy_and_change_the_journal(src, dst, **kw):
        copies.append(src)
        journal.write_bytes(journal.read_bytes() + b"\0")
        return real_copy(src, dst, **kw)

    monkeypatch.setattr(dbfile.shutil, "copyfile", copy_and_change_the_journal)
    monkeypatch.setenv("DLPERF_DB_TIMEOUT_S", "0.3")
    t0 = time.monotonic()
    with pytest.raises(StoreBusy, match=r"stopped mid-write.*for 0.3 s.*DLPERF_DB_TIMEOUT_S"):
        ResultStore(db, read_only=True)
    assert 0.3 <= time.monotonic() - t0 < 10 and len(copies) > 1


def test_db_timeout_must_be_a_positive_number(monkeypatch, tmp_path):
    from dlperf.results.dbfile import db_timeout_s

    for bad in ("abc", "0", "-3", "inf", "nan"):
        monkeypatch.setenv("DLPERF_DB_TIMEOUT_S", bad)
        with pytest.raises(ConfigError, match="DLPERF_DB_TIMEOUT_S"):
            db_timeout_s()
    monkeypatch.setenv("DLPERF_DB_TIMEOUT_S", "7.5")
    assert db_timeout_s() == 7.5


def test_a_wait_for_a_locked_file_says_so_and_ctrl_c_stops_it(tmp_path):
    """A writer waiting for another process's lock says what it waits for after a few
    seconds, and Ctrl-C stops it at once (SQLite's busy handler sleeps in C, where Python does
    not see a signal: one wait of the whole timeout kept Ctrl-C from acting, silently, for
    up to DLPERF_DB_TIMEOUT_S, 120 s by default)."""
    import signal

    db = make_db(tmp_path / "r.db")
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    code = ("import sys\nfrom dlperf.results.store import ResultStore\n"
            "try:\n    ResultStore(sys.argv[1])\nexcept KeyboardInterrupt:\n"
            "    print('interrupted', flush=True)\n")
    p = subprocess.Popen([sys.executable, "-c", code, str(db)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "DLPERF_DB_TIMEOUT_S": "60",
                              "DLPERF_LOCK_NOTICE_S": "0.5"})
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(p.stderr), daemon=True)
    reader.start()
    try:
        # the notice is the sign that the child waits (its start, imports included, took
        # seconds on a busy host): the clock starts at the signal, not at the child's start
        end = time.monotonic() + 120
        while time.monotonic() < end and not any("waiting" in ln for ln in lines):
            assert p.poll() is None, " ".join(lines)
            time.sleep(0.05)
        err = " ".join(" ".join(lines).split())
        assert "waiting for another process's lock on" in err and "r.db" in err
        assert "60 s" in err and "DLPERF_DB_TIMEOUT_S" in err
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        out = p.stdout.read()
        p.wait(timeout=90)
        assert "interrupted" in out
        assert time.monotonic() - t0 < 30  # not the rest of the 60 s timeout
    finally:
        if p.poll() is None:
            p.kill()
        holder.execute("ROLLBACK")
        holder.close()


@pytest.mark.parametrize("suffix", ["-journal", "-wal", "-shm"])
def test_a_results_file_named_as_a_side_file_is_never_written(tmp_path, suffix):
    """`dlperf run --db x.db-journal` made a results file that the next write to x.db took for
    its rollback journal and deleted: every result in it lost."""
    base = make_db(tmp_path / "x.db")
    side = Path(f"{base}{suffix}")
    with pytest.raises(StoreError, match="side file of the database 'x.db'"):
        ResultStore(side)
    assert not side.exists()
    code, out, exc = cli("merge", str(base), "--db", str(side))
    assert code == 2 and exc is None and "delete it" in out and not side.exists()


@pytest.mark.parametrize("suffix", ["-journal", "-wal"])
def test_a_database_beside_under_a_side_name_is_kept(tmp_path, suffix):
    """A results database sitting at x.db-journal was deleted by SQLite at the next write to
    x.db; that write is refused until it is renamed, and readers leave both alone."""
    base = make_db(tmp_path / "x.db")
    other = make_db(tmp_path / "o.db", batches=(32,))
    side = other.rename(Path(f"{base}{suffix}"))
    before = side.read_bytes()
    with pytest.raises(StoreError, match="is an SQLite database, not a"):
        ResultStore(base)
    with ResultStore(base, read_only=True) as s:  # a reader: both untouched
        assert [r["batch_size"] for r in s.rows()] == [8, 16]
    code, out, exc = cli("merge", str(side), "--db", str(tmp_path / "m.db"))
    assert code == 0 and exc is None
    with ResultStore(tmp_path / "m.db", read_only=True) as s:
        assert [r["batch_size"] for r in s.rows()] == [32]
    assert side.read_bytes() == before


@pytest.mark.parametrize("keep", [50, 5000])
def test_a_truncated_file_is_called_damaged_not_foreign(tmp_path, keep):
    """A results file cut short (a copy interrupted, a full disk) is a damaged results file:
    the message says truncated and to restore it, never that it is somebody else's file."""
    db = make_db(tmp_path / "r.db", batches=tuple(range(1, 30)))
    size = db.stat().st_size
    assert size > keep
    db.write_bytes(db.read_bytes()[:keep])
    for read_only in (True, False):
        with pytest.raises(StoreError) as e:
            ResultStore(db, read_only=read_only)
        msg = str(e.value)
        assert "truncated" in msg and "restore it from a copy" in msg, msg
        assert "not a dlperf results database" not in msg, msg
        if keep > 100:
            assert f"{keep:,} of the {size:,} bytes" in msg, msg
    foreign = tmp_path / "notes.db"
    foreign.write_text("hello\n" * 100)
    with pytest.raises(StoreError, match="not a dlperf results database"):
        ResultStore(foreign, read_only=True)
