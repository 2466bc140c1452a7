"""One door for every file dlperf writes (dlperf.outputs): no flag that takes a path replaces a
results database (not even with --force), another kind of file (without --force) or an input
of the same command; an earlier output of the same kind is replaced; writes are atomic and never
follow a link; the format follows the suffix."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dlperf.cli import app
from dlperf.errors import ConfigError
from dlperf.outputs import OutputRefused, atomic_write, check_target, format_for, write_output
from dlperf.results.store import ResultStore


def make_db(path: Path, batches=(8, 16)) -> Path:
    """A results file with an ok result per batch size."""
    from dlperf.config import make_run_config
    from dlperf.results.schema import new_record
    from dlperf.stats import summarize, throughput

    with ResultStore(path) as s:
        for b in batches:
            r = new_record(make_run_config(model="fcn5_tiny", batch_size=b), "ok").to_dict()
            times = [0.01, 0.012, 0.011, 0.0105]
            r.update(summary=summarize(times).to_dict(),
                     throughput=throughput(len(times), b, sum(times)),
                     samples={"measure": times}, n_measured=len(times), steady_state=True)
            s.add(r)
    return path


def cli(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(app, list(args))
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    return r.exit_code, " ".join(r.output.split())


def foreign_db(path: Path) -> Path:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    return path


def test_a_database_is_never_replaced_not_even_with_force(tmp_path):
    db = foreign_db(tmp_path / "other.csv")
    before = db.read_bytes()
    for force in (False, True):
        with pytest.raises(OutputRefused, match="SQLite database"):
            write_output(db, "id,run_key\n", "csv", force=force)
    assert db.read_bytes() == before


def test_another_kind_of_file_needs_force_an_earlier_output_does_not(tmp_path):
    f = tmp_path / "notes.csv"
    f.write_text("name,age\nada,36\n")
    with pytest.raises(OutputRefused, match=r"starts with 'name,age'.*--force"):
        write_output(f, "id,run_key,model\n1,a,b\n", "csv")
    assert f.read_text() == "name,age\nada,36\n"
    write_output(f, "id,run_key,model\n1,a,b\n", "csv", force=True)
    write_output(f, "id,run_key,model,extra\n2,c,d,e\n", "csv")  # an earlier export: replaced
    assert f.read_text().startswith("id,run_key,model,extra")
    j = tmp_path / "r.json"
    write_output(j, '[\n {\n  "id": 1\n }\n]\n', "json")
    write_output(j, '[\n {\n  "id": 2\n }\n]\n', "json")
    with pytest.raises(OutputRefused):
        write_output(j, '{"benchmark": "allreduce"}', "json")  # another JSON: refused
    (tmp_path / "e").write_text("")
    write_output(tmp_path / "e", "anything", "markdown")  # an empty file holds nothing


def test_folders_inputs_and_missing_folders_are_refused(tmp_path):
    db = make_db(tmp_path / "r.db")
    with pytest.raises(OutputRefused, match="would destroy it"):
        check_target(tmp_path / "." / "r.db", "csv", "x", protect=(db,))
    (tmp_path / "link.csv").symlink_to(db)
    with pytest.raises(OutputRefused, match="would destroy it"):
        check_target(tmp_path / "link.csv", "csv", "x", protect=(db,))
    with pytest.raises(OutputRefused, match="is a folder"):
        check_target(tmp_path, "csv", "x")
    with pytest.raises(OutputRefused, match="does not exist"):
        check_target(tmp_path / "no" / "x.csv", "csv", "x")
    with pytest.raises(OutputRefused, match="is empty"):
        check_target("", "csv", "x")


def test_atomic_write_never_follows_a_link_and_keeps_the_mode(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "out.json"
    out.symlink_to(victim)  # a link at the target: replaced, its target kept
    atomic_write(out, "{}")
    assert victim.read_text() == "precious" and not out.is_symlink() and out.read_text() == "{}"
    f = tmp_path / "m.csv"
    f.write_text("x")
    os.chmod(f, 0o640)
    atomic_write(f, "y")
    assert stat.S_IMODE(f.stat().st_mode) == 0o640 and f.read_text() == "y"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.csv", "out.json", "victim.txt"]


def test_the_format_follows_the_suffix():
    fmts = {".csv": "csv", ".json": "json", ".md": "table"}
    assert format_for("a.csv", None, fmts, "table") == "csv"
    assert format_for("a.JSON", None, fmts, "table") == "json"
    assert format_for("a.out", None, fmts, "table") == "table"
    assert format_for(None, "csv", fmts, "table") == "csv"
    with pytest.raises(ConfigError, match="disagree"):
        format_for("a.csv", "json", fmts, "table")


def test_every_flag_that_takes_a_path_refuses_a_results_database(tmp_path):
    """The issue's cases: --emit-slurm and --slurm-array at the --db path replaced the database
    (exit 0); results -o turned another database into CSV. Each flag is refused, the files
    stay byte for byte; with --force too."""
    db, other = make_db(tmp_path / "r.db"), make_db(tmp_path / "other.db")
    sweep = tmp_path / "s.yaml"
    sweep.write_text("name: s\ndefaults: {model: fcn5_tiny, device: cpu}\ngrid:\n"
                     "  - batch_size: [2]\n")
    keep = {p: p.read_bytes() for p in (db, other, sweep)}
    cases = [
        ("results", "--db", str(db), "-f", "csv", "-o", str(other)),
        ("results", "--db", str(db), "-o", str(other)),
        ("results", "--db", str(db), "--compare", "frameworks", "-o", str(other)),
        ("compare", str(db), str(db), "-o", str(other)),
        ("run", "--model", "fcn5_tiny", "--db", str(db), "--emit-slurm", str(db)),
        ("run", "--model", "fcn5_tiny", "--db", str(db), "--emit-slurm", str(other)),
        ("sweep", str(sweep), "--db", str(db), "--slurm-array", str(db)),
        ("sweep", str(sweep), "--db", str(db), "--slurm-array", str(other)),
        ("sweep", str(sweep), "--db", str(db), "--slurm-array", str(sweep)),
        ("allreduce", "--db", str(db), "--json", str(other)),
    ]
    for args in cases:
        for extra in ((), ("--force",)):
            code, text = cli(*args, *extra)
            assert code == 2 and ("would destroy it" in text or "SQLite database" in text), \
                (args, extra, text)
    assert {p: p.read_bytes() for p in keep} == keep
    with ResultStore(other, read_only=True) as s:
        assert len(s.rows()) == 2


def test_cli_outputs_replace_their_own_and_refuse_others(tmp_path):
    db = make_db(tmp_path / "r.db")
    out = tmp_path / "out.csv"
    assert cli("results", "--db", str(db), "-o", str(out))[0] == 0  # CSV by the suffix
    assert out.read_text().startswith("id,run_key,")
    assert cli("results", "--db", str(db), "-o", str(out))[0] == 0  # its own: replaced
    code, text = cli("results", "--db", str(db), "-f", "json", "-o", str(out))
    assert code == 2 and "disagree" in text
    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": 1}')
    code, text = cli("results", "--db", str(db), "-o", str(notes))
    assert code == 2 and "--force" in text and notes.read_text() == '{"mine": 1}'
    assert cli("results", "--db", str(db), "-o", str(notes), "--force")[0] == 0
    assert notes.read_text().startswith("[")
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\nmy own job\n")
    code, text = cli("run", "--model", "fcn5_tiny", "--device", "cpu", "--db", str(db),
                     "--emit-slurm", str(script))
    assert code == 2 and "--force" in text and "my own job" in script.read_text()
    assert cli("run", "--model", "fcn5_tiny", "--device", "cpu", "--db", str(db),
               "--emit-slurm", str(script), "--force")[0] == 0
    assert "# Generated by `dlperf" in script.read_text()
    assert cli("run", "--model", "fcn5_tiny", "--device", "cpu", "--db", str(db),
               "--emit-slurm", str(script))[0] == 0  # its own script: replaced


def test_a_report_folder_keeps_files_that_are_not_an_earlier_reports(tmp_path):
    db = make_db(tmp_path / "r.db")
    rep = tmp_path / "rep"
    rep.mkdir()
    (rep / "report.md").write_text("my notes\n")
    (rep / "photo.png").write_text("not an image")
    code, text = cli("report", "--db", str(db), "-o", str(rep), "-f", "md")
    assert code == 2 and "report.md" in text and "--force" in text
    (rep / "report.md").unlink()
    code, text = cli("report", "--db", str(db), "-o", str(rep), "-f", "md")
    assert code == 2 and "photo.png" in text
    (rep / "photo.png").unlink()
    assert cli("report", "--db", str(db), "-o", str(rep), "-f", "md")[0] == 0
    assert cli("report", "--db", str(db), "-o", str(rep), "-f", "md")[0] == 0  # again: its own
    code, text = cli("report", "--db", str(db), "-o", str(rep), "-f", "md", "--title", "X")
    assert code == 2  # another title: not known as this report's without --force
    assert cli("report", "--db", str(db), "-o", str(rep), "-f", "md", "--title", "X",
               "--force")[0] == 0


def test_merge_into_a_file_that_is_not_a_results_database_is_refused(tmp_path):
    src = make_db(tmp_path / "a.db")
    csv = tmp_path / "b.csv"
    csv.write_text("id,run_key\n1,x\n")
    code, text = cli("merge", str(src), "--db", str(csv))
    assert code == 2 and csv.read_text() == "id,run_key\n1,x\n"
    other = foreign_db(tmp_path / "c.db")
    before = other.read_bytes()
    code, text = cli("merge", str(src), "--db", str(other))
    assert code == 2 and "not a dlperf results database" in text and other.read_bytes() == before


def test_a_databases_journal_or_wal_is_never_replaced_not_even_with_force(tmp_path):
    """A rollback journal left by a killed writer (``r.db-journal``: what rolls ``r.db`` back
    to its last commit) and a write-ahead log (``r.db-wal``: commits not yet in ``r.db``) are
    part of the database: replacing one damages it or drops results, so neither is written,
    not even with ``--force``, whether recognised by its header or by its name beside the
    database."""
    db = make_db(tmp_path / "r.db")
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("PRAGMA cache_size=1")  # pages spill into the file: the journal is hot
    con.execute("BEGIN IMMEDIATE")
    con.execute("UPDATE samples SET step_time_s = step_time_s + 1")
    con.execute("UPDATE results SET result_json = result_json || ' '")
    journal = (tmp_path / "r.db-journal").read_bytes()
    con.execute("ROLLBACK")
    con.close()
    wal = foreign_db(tmp_path / "w.db")
    con = sqlite3.connect(wal, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA wal_autocheckpoint=0")
    con.execute("INSERT INTO t VALUES (1)")
    wal_bytes = (tmp_path / "w.db-wal").read_bytes()
    (tmp_path / "copy.journal").write_bytes(journal)
    (tmp_path / "copy.wal").write_bytes(wal_bytes)
    (tmp_path / "r.db-journal").write_text("x,y\n1,2\n")  # a journal's name, not its header
    for target in ("copy.journal", "copy.wal", "w.db-wal", "r.db-journal"):
        before = (tmp_path / target).read_bytes()
        for force in (False, True):
            with pytest.raises(OutputRefused, match="SQLite"):
                write_output(tmp_path / target, "x,y\n3,4\n", "csv", force=force)
        assert (tmp_path / target).read_bytes() == before
    con.close()


def _in_thread(fn):
    """``fn()`` in a daemon thread; (thread, {"error": what it raised})."""
    import threading

    box: dict = {}

    def run():
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - handed to the test
            box["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


def test_a_named_pipe_no_process_reads_is_refused_not_waited_on(tmp_path, monkeypatch):
    """``-o FIFO`` with no reader waited for ever in ``open``: it is refused after
    PIPE_WAIT_S, naming the flag and what to do."""
    import dlperf.outputs as outputs

    monkeypatch.setattr(outputs, "PIPE_WAIT_S", 0.2)
    fifo = tmp_path / "p.csv"
    os.mkfifo(fifo)
    t, box = _in_thread(lambda: write_output(fifo, "a,b\n", "csv"))
    t.join(10)
    if t.is_alive():  # blocked in open(): a reader releases it
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
    assert not t.is_alive(), "writing to a named pipe without a reader blocked"
    e = box.get("error")
    assert isinstance(e, OutputRefused)
    assert "--output" in str(e) and "named pipe that no process reads" in str(e)


def test_a_named_pipe_with_a_reader_is_written(tmp_path):
    fifo = tmp_path / "p.csv"
    os.mkfifo(fifo)
    got: list[bytes] = []

    def read():
        with open(fifo, "rb") as f:  # blocks until the writer opens
            got.append(f.read())
    t, _ = _in_thread(read)
    write_output(fifo, "a,b\n1,2\n", "csv")
    t.join(10)
    assert got == [b"a,b\n1,2\n"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)  # written in place, not replaced


def test_standard_output_names_are_written_to_their_descriptor_never_replaced(
        tmp_path, monkeypatch):
    """``/dev/stdout`` is a link to ``/proc/self/fd/1``: with standard output a regular file,
    atomic_write replaced the link in /dev itself. Such names are written to the descriptor,
    and nothing is renamed."""
    from dlperf.outputs import own_descriptor

    assert [own_descriptor(x) for x in ("-", "/dev/stdout", "/dev/stderr", "/dev/fd/7",
                                         "/proc/self/fd/12", "/dev/fdx/1", "out.csv")] \
        == [1, 1, 2, 7, 12, None, None]

    def no_rename(*a):
        raise AssertionError(f"renamed {a}")
    monkeypatch.setattr(os, "replace", no_rename)
    f = tmp_path / "out.txt"
    fd = os.open(f, os.O_WRONLY | os.O_CREAT)
    try:
        check_target(f"/dev/fd/{fd}", "csv", "x")
        atomic_write(f"/dev/fd/{fd}", "hello\n")
    finally:
        os.close(fd)
    assert f.read_text() == "hello\n"
    monkeypatch.chdir(tmp_path)
    code, out = cli("results", "--db", str(make_db(tmp_path / "r.db")), "-f", "csv", "-o", "-")
    assert code == 0 and out.startswith("id,run_key,") and not (tmp_path / "-").exists()


def test_shown_path_escapes_what_a_terminal_would_obey():
    from dlperf.outputs import shown_path

    assert shown_path("a\x1b[31m\nb\u202ec\x7f") == "a\\x1b[31m\\nb\\u202ec\\x7f"
    assert shown_path(Path("runs/ü b.db")) == "runs/ü b.db"
    assert shown_path("line 1\n\tx\x1b", lines=True) == "line 1\n\tx\\x1b"


def test_paths_in_messages_are_printed_escaped(tmp_path, monkeypatch):
    """A file name with a terminal escape and a newline is printed escaped in an error and
    after ``wrote``/``report:``."""
    monkeypatch.chdir(tmp_path)
    db = str(make_db(tmp_path / "r.db"))
    bad = "x\x1b[31mred\nz"
    for args in (("results", "--db", bad + ".db"),
                 ("results", "--db", db, "-f", "csv", "-o", bad + ".csv"),
                 ("report", "--db", db, "-o", bad, "-f", "md")):
        r = CliRunner().invoke(app, list(args))
        assert "\x1b" not in r.output and "x\\x1b[31mred\\nz" in r.output, (args, r.output)


needs_dev_full = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")


@needs_dev_full
def test_a_full_device_is_named_in_the_error(tmp_path):
    db = make_db(tmp_path / "r.db")
    for args in (["results", "--db", str(db), "-f", "csv", "-o", "/dev/full"],
                 ["results", "--db", str(db), "-o", "/dev/full", "-f", "json"]):
        code, text = cli(*args)
        assert code == 2, text
        assert "cannot write '/dev/full': No space left on device" in text, text
        assert "free space" in text and "cannot use:" not in text, text


@needs_dev_full
def test_standard_output_on_a_full_device_is_named_standard_output(tmp_path):
    import subprocess
    import sys

    db = make_db(tmp_path / "r.db")
    for extra in ([], ["-f", "csv"], ["--all", "-f", "json"]):
        with open("/dev/full", "w") as full:
            r = subprocess.run([sys.executable, "-m", "dlperf", "results", "--db", str(db),
                                *extra], stdout=full, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "COLUMNS": "200"})
        assert r.returncode == 2, r.stderr
        msg = " ".join(r.stderr.split())
        assert "cannot write to standard output: No space left on device" in msg, msg
        assert "redirect it" in msg and "Exception ignored" not in msg, msg


def test_a_folder_that_takes_no_new_file_is_named_with_the_target(tmp_path, monkeypatch):
    import errno
    import tempfile

    from dlperf.outputs import WriteFailed

    def refused(*a, dir=None, **k):
        raise PermissionError(errno.EACCES, "Permission denied",
                              os.path.join(dir, ".out.csv.k2j4.tmp"))

    monkeypatch.setattr(tempfile, "mkstemp", refused)
    target = tmp_path / "out.csv"
    with pytest.raises(WriteFailed) as e:
        write_output(target, "id,run_key\n", "csv")
    msg = str(e.value)
    assert repr(str(target)) in msg and repr(str(tmp_path)) in msg, msg
    assert ".tmp" not in msg and "folder you can write" in msg, msg
    assert isinstance(e.value, OSError) and e.value.errno == errno.EACCES
    monkeypatch.chdir(tmp_path)
    code, text = cli("results", "--db", str(make_db(tmp_path / "r.db")), "-o", "out.csv")
    assert code == 2 and "'out.csv'" in text and ".tmp" not in text, text
