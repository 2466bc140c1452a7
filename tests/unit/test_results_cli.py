"""``dlperf results`` and ``report`` as a user reads them: a folder of results files read as
one (the resolver ``predict`` uses), the default table showing warnings, and ``--all`` telling
tagged runs apart by tag, time and commit."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dlperf.cli import app
from dlperf.errors import ConfigError
from dlperf.results.dbfile import results_files
from dlperf.results.schema import RunRecord
from dlperf.results.store import ResultStore

runner = CliRunner()


def rec(model: str = "m", batch: int = 8, *, framework: str = "torch", mode: str = "eager",
        step_s: float = 0.01, ci: tuple[float, float] | None = None, tag: str | None = None,
        sha: str = "c0ffee" + "0" * 34, created: str = "2026-01-01T00:00:00+00:00",
        warnings: list[str] | None = None) -> RunRecord:
    """An ok result of ``model`` at ``batch`` (median ``step_s``, CI ``ci``: +-1% unless
    given)."""
    point = f"{model}/{framework}/{mode}/{batch}"
    lo, hi = ci or (0.99 * step_s, 1.01 * step_s)
    d = {"run_key": f"{point}#0", "point_key": point, "repeat": 0, "status": "ok",
         "model": model, "framework": framework, "mode": mode, "device": "cpu",
         "precision": "fp32", "batch_size": batch, "data": "synthetic", "created_at": created,
         "env": {"git": {"sha": sha, "dirty": False}}, "samples": {"measure": [step_s] * 10},
         "summary": {"median": step_s, "ci_low": lo, "ci_high": hi},
         "throughput": {"samples_per_s": batch / step_s}, "n_measured": 10}
    if tag:
        d["tag"] = tag
    if warnings:
        d["warnings"] = warnings
    return RunRecord.from_dict(d)


def store_of(path: Path, records) -> str:
    with ResultStore(path) as s:
        for r in records:
            s.add(r)
    return str(path)


def invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


@pytest.fixture
def folder(tmp_path) -> Path:
    d = tmp_path / "res"
    d.mkdir()
    store_of(d / "a.db", [rec("alpha", 8), rec("alpha", 16)])
    store_of(d / "b.db", [rec("beta", 8, framework="jax", mode="xla")])
    (d / "notes.md").write_text("not a results file")
    return d


def test_one_resolver_for_every_command_that_reads_results(folder):
    from dlperf.perfmodel import records

    assert records.results_files is results_files  # predict's loader shares it
    assert results_files(folder) == [str(folder / "a.db"), str(folder / "b.db")]
    assert results_files([folder / "b.db", folder]) == [str(folder / "b.db"),
                                                        str(folder / "a.db")]
    # one file under two spellings (relative and absolute, a/../a) is read once, as first named
    rel = os.path.relpath(folder / "a.db")
    assert results_files([rel, str((folder / "a.db").resolve()),
                          folder / "x" / ".." / "a.db"]) == [rel]
    empty = folder / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match=r"holds no results file \(\*\.db\).*empty"):
        results_files(empty)


def test_results_and_report_read_a_folder_as_one(folder, tmp_path):
    r = invoke("results", "--db", str(folder), "-f", "csv")
    assert r.exit_code == 0, r.output
    import csv
    import io

    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert sorted(row["model"] for row in rows) == ["alpha", "alpha", "beta"]
    out = tmp_path / "rep"
    r = invoke("report", "--db", str(folder), "-o", str(out))
    assert r.exit_code == 0, r.output
    page = (out / "report.html").read_text()
    assert "results folder res (2 files: a.db, b.db)" in page
    assert "alpha" in page and "beta" in page
    assert "beta" in (out / "report.md").read_text()
    assert sorted(p.name for p in folder.iterdir()) == ["a.db", "b.db", "notes.md"]


def test_a_folder_without_results_is_refused_in_words(tmp_path):
    (tmp_path / "e").mkdir()
    for cmd in ("results", "report"):
        r = runner.invoke(app, [cmd, "--db", str(tmp_path / "e")])
        assert r.exit_code == 2 and "holds no results file" in r.output, r.output


def test_warnings_show_in_the_default_table(tmp_path):
    from dlperf.report.tables import markdown_table, results_table, warning_lines

    wide = rec("noisy", 8, step_s=0.01, ci=(0.0068, 0.0132),
               warnings=["wide CI of the median (64% of it): noisy machine"])
    quiet = rec("quiet", 8)
    table = results_table([wide, quiet])
    status = next(c for c in table.columns if c.header == "status")
    assert [c.plain for c in status.cells] == ["ok ⚠ 1", "ok"]
    assert "| ok ⚠ 1 |" in markdown_table([wide, quiet])
    assert warning_lines([quiet, wide]) == [
        "⚠ noisy torch/eager cpu fp32 b=8 synthetic: wide CI of the median (64% of it): "
        "noisy machine"]
    many = [rec(f"m{k:02d}", 8, warnings=["a", "b"]) for k in range(15)]
    lines = warning_lines(many, limit=12)
    assert len(lines) == 13 and lines[0].endswith(": a (+1 more)")
    assert lines[-1].startswith("... and 3 more results with warnings")
    db = store_of(tmp_path / "w.db", [wide, quiet])
    r = invoke("results", "--db", db)
    assert r.exit_code == 0 and "ok ⚠ 1" in r.stdout
    assert "⚠ noisy torch/eager cpu fp32 b=8 synthetic: wide CI of the median (64% of it)" in r.stdout


def test_all_runs_show_tag_time_and_commit(tmp_path):
    from dlperf.report.tables import HISTORY_COLUMNS, history_cells, results_table

    v1 = rec("m", 8, tag="v1", sha="a" * 40, created="2026-01-01T10:00:00+00:00")
    v2 = rec("m", 8, step_s=0.02, tag="v2", sha="b" * 40, created="2026-02-01T11:30:05+00:00")
    assert history_cells(v2) == ["v2", "2026-02-01 11:30:05", "bbbbbbbbbb"]
    assert [c.header for c in results_table([v1, v2], history=True).columns][-3:] \
        == list(HISTORY_COLUMNS)
    assert "tag" not in [c.header for c in results_table([v1, v2]).columns]
    db = store_of(tmp_path / "h.db", [v1, v2])
    latest = invoke("results", "--db", db)
    assert "aaaaaaaaaa" not in latest.stdout and "bbbbbbbbbb" not in latest.stdout
    every = invoke("results", "--db", db, "--all")
    assert every.exit_code == 0, every.output
    for text in ("v1", "v2", "aaaaaaaaaa", "bbbbbbbbbb", "2026-01-01 10:00:00",
                 "2026-02-01 11:30:05"):
        assert text in every.stdout, text
