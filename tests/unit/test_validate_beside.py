"""`dlperf predict --validate` writes its residual table and the results' points beside the
results files; a file of the user's under either name was replaced without a word."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dlperf.cli import app

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))


@pytest.fixture(scope="module")
def valid_db(tmp_path_factory):
    from fuzz_databases import make_valid

    return make_valid(tmp_path_factory.mktemp("v") / "v.db")


@pytest.mark.parametrize("name,content", [("perfmodel_residuals.json", "my notes\n"),
                                          ("perfmodel_points.json", "[1, 2]\n")])
def test_validate_never_replaces_a_file_it_did_not_write(tmp_path, valid_db, name, content):
    shutil.copy(valid_db, tmp_path / "v.db")
    mine = tmp_path / name
    mine.write_text(content)
    r = CliRunner().invoke(app, ["predict", "--validate", "--db", str(tmp_path / "v.db")])
    assert r.exit_code == 0, r.output
    assert "not a file dlperf wrote" in " ".join(r.output.split())
    assert mine.read_text() == content


def test_validate_replaces_its_own_table(tmp_path, valid_db):
    shutil.copy(valid_db, tmp_path / "v.db")
    for _ in range(2):
        r = CliRunner().invoke(app, ["predict", "--validate", "--db", str(tmp_path / "v.db")])
        assert r.exit_code == 0 and "not a file dlperf wrote" not in r.output, r.output
    assert (tmp_path / "perfmodel_residuals.json").read_text().startswith("{")
