"""A writer (``run``, ``sweep``, ``merge`` into, the Python API) given an empty (0-byte)
``--db`` starts a new store in it and says so in one line (issue 23: "3 empty files silently
turned into new stores"); readers refuse it (tests/unit/test_store_attacks.py). Nothing can
be lost: the file holds nothing."""

from __future__ import annotations

import os
import subprocess
import sys

from typer.testing import CliRunner

from dlperf.cli import app
from dlperf.results.store import ResultStore, stored_keys

NOTE = "was empty (0 bytes); started a new dlperf results database in it"


def test_a_writer_initialises_an_empty_file_and_says_so(tmp_path, capsys):
    db = tmp_path / "touched.db"
    db.write_bytes(b"")
    with ResultStore(db) as store:
        assert store.notice is not None and NOTE in store.notice
        assert store.rows() == []
    assert NOTE in capsys.readouterr().err
    assert db.stat().st_size > 0 and stored_keys(db) == set()
    with ResultStore(db) as store:  # a store now: opened again without a note
        assert store.notice is None
    with ResultStore(tmp_path / "new.db") as store:  # a missing file: no note either
        assert store.notice is None
    assert NOTE not in capsys.readouterr().err


def test_merge_into_an_empty_file_says_so(tmp_path):
    src, dest = tmp_path / "src.db", tmp_path / "dest.db"
    ResultStore(src).close()
    dest.write_bytes(b"")
    r = CliRunner().invoke(app, ["merge", str(src), "--db", str(dest)])
    assert r.exit_code == 0, r.output
    assert NOTE in " ".join(r.output.split())
    with ResultStore(dest, read_only=True) as store:
        assert store.rows() == []


def test_run_into_an_empty_file_stores_the_point_and_says_so(tmp_path):
    db = tmp_path / "r.db"
    db.write_bytes(b"")
    r = subprocess.run([sys.executable, "-m", "dlperf", "run", "--framework", "fake", "--model",
                        "fcn5_tiny", "-b", "8", "--min-time", "0.05", "--no-ceilings", "--db",
                        str(db)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "COLUMNS": "200", "DLPERF_FAKE_FRAMEWORK": "1"})
    assert r.returncode == 0, r.stderr
    assert r.stderr.count(NOTE) == 1, r.stderr
    assert len(stored_keys(db)) == 1
