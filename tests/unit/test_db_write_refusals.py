"""A results path that cannot be written is refused before anything is probed or measured,
with the system's cause (a read-only file system, no permission), and a path given as a
positional argument is named as that argument. In-process command line (nothing measures)."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

import pytest

from cli_here import cli
from dlperf.cli.common import check_db_writable
from dlperf.outputs import WriteFailed
from fakes import make_db


@pytest.mark.parametrize(("code", "words"), [(errno.EROFS, "Read-only file system"),
                                             (errno.EACCES, "Permission denied")])
def test_run_names_why_the_results_folder_refuses(tmp_path, monkeypatch, code, words):
    ro = tmp_path / "ro"
    ro.mkdir()
    real = tempfile.mkstemp

    def mkstemp(*a, dir=None, **k):  # noqa: A002 - tempfile's own name
        if dir is not None and Path(dir) == ro:
            raise OSError(code, os.strerror(code), str(ro))
        return real(*a, dir=dir, **k)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    rc, out = cli("run", "--model", "fcn5_tiny", "-b", "32", "--device", "cpu",
                  "--db", str(ro / "new.db"))
    assert rc == 2, out
    assert os.strerror(code) == words and words in out, out
    assert "a folder you can write" in out, out
    assert "missing" not in out, out
    assert "threads:" not in out, out  # refused before the host is probed
    assert not (ro / "new.db").exists()


def test_check_db_writable_leaves_nothing_behind(tmp_path):
    check_db_writable(tmp_path / "sub" / "new.db")  # the nearest existing folder is probed
    check_db_writable(make_db(tmp_path / "r.db"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.db"]


def test_check_db_writable_names_the_file_it_cannot_open(tmp_path, monkeypatch):
    db = make_db(tmp_path / "r.db")
    real = os.open

    def fake(path, flags, *a):
        if Path(path) == db.absolute() and flags & os.O_RDWR:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real(path, flags, *a)

    monkeypatch.setattr(os, "open", fake)
    with pytest.raises(WriteFailed, match="Read-only file system") as e:
        check_db_writable(db)
    assert str(db) in str(e.value)


def test_compare_names_the_positional_argument_that_is_a_folder(tmp_path):
    db = make_db(tmp_path / "base.db")
    folder = tmp_path / "nondb"
    folder.mkdir()
    rc, out = cli("compare", str(folder), str(db))
    assert rc == 2, out
    assert f"BASE '{folder}' is a folder" in out, out
    assert "--db" not in out.split("is a folder")[0], out
    rc, out = cli("compare", str(db), str(folder))
    assert rc == 2 and f"NEW '{folder}' is a folder" in out, out
