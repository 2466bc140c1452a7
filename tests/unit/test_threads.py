"""CPU thread scaling (dlperf.report.threads): speed-up, efficiency, Karp-Flatt, the table,
the plots, and `dlperf results --compare threads` / `dlperf report` on a stored sweep."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import tempfile
from pathlib import Path

import pytest

from dlperf.report.threads import (
    karp_flatt,
    plot_thread_scaling,
    thread_scaling,
    threads_flat,
    threads_markdown,
)
from dlperf.results.view import as_records


def _row(i, threads, ms, fw="torch", mode="eager", model="fcn5", status="ok", platform="vm-a",
         steady=True, **kw):
    ok = status == "ok"
    return dict(id=i, status=status, model=model, device="cpu", precision="fp32",
                batch_size=64, data="synthetic", threads=threads, framework=fw, mode=mode,
                step_time_median_s=ms / 1e3 if ok else None,
                step_time_ci_low_s=ms * 0.98e-3 if ok else None,
                step_time_ci_high_s=ms * 1.02e-3 if ok else None,
                steady_state=steady if ok else None, created_at=f"T{i:03d}",
                result_json=json.dumps({"env": {"platform": platform}}), **kw)


def test_karp_flatt_is_amdahls_serial_fraction():
    # Amdahl with serial fraction f: S(p) = 1 / (f + (1 - f) / p); Karp-Flatt gives f back
    for f in (0.0, 0.1, 0.5):
        for p in (2, 4, 16):
            assert karp_flatt(1 / (f + (1 - f) / p), p) == pytest.approx(f)
    assert karp_flatt(1.0, 4) == pytest.approx(1.0)      # no gain
    assert karp_flatt(0.5, 2) == pytest.approx(3.0)      # slower on more threads: above 1
    assert karp_flatt(2.0, 1) is None and karp_flatt(float("nan"), 2) is None
    assert karp_flatt(0.0, 2) is None


def test_speedup_efficiency_and_the_base_is_the_fewest_threads():
    rows = [_row(1, 4, 25.0), _row(2, 2, 50.0), _row(3, 8, 20.0), _row(4, 16, 22.0),
            # JAX at two counts, starting at 2 threads
            _row(5, 2, 30.0, fw="jax", mode="xla"), _row(6, 8, 10.0, fw="jax", mode="xla"),
            # one count only: no group
            _row(7, 1, 9.0, model="lstm"),
            # no threads value (the framework's default): not in any group
            _row(8, None, 5.0)]
    jax, torch = thread_scaling(as_records(rows))
    assert torch["column"] == "torch/eager" and torch["base_threads"] == 2
    assert [p["threads"] for p in torch["points"]] == [2, 4, 8, 16]
    s = {p["threads"]: p for p in torch["points"]}
    assert s[2]["speedup"] == pytest.approx(1.0) and s[2]["karp_flatt"] is None
    assert s[4]["speedup"] == pytest.approx(2.0) and s[4]["efficiency"] == pytest.approx(1.0)
    assert s[8]["speedup"] == pytest.approx(2.5) and s[8]["efficiency"] == pytest.approx(2.5 / 4)
    assert s[16]["speedup"] == pytest.approx(50 / 22)
    assert torch["best_threads"] == 8  # 16 threads were slower than 8
    assert jax["base_threads"] == 2 and jax["points"][1]["speedup"] == pytest.approx(3.0)
    assert jax["points"][1]["efficiency"] == pytest.approx(0.75)
    assert torch["env_differs"] == [] and s[4]["speedup_ci_low"] is None  # no samples given


def test_newest_run_counts_failures_are_kept_and_other_environments_marked():
    rows = [_row(1, 1, 100.0), _row(2, 2, 80.0),
            _row(3, 2, 50.0),                          # re-run at 2 threads: the newest counts
            _row(4, 4, 0, status="timeout"),           # a failure is a result
            _row(5, 8, 20.0, platform="vm-b")]         # another host
    (g,) = thread_scaling(as_records(rows))
    by_n = {p["threads"]: p for p in g["points"]}
    assert by_n[2]["speedup"] == pytest.approx(2.0)
    assert by_n[4]["status"] == "timeout" and by_n[4]["median_s"] is None
    assert g["env_differs"] == ["platform: vm-a vs vm-b"]
    md = threads_markdown([g])
    line = [ln for ln in md.splitlines() if ln.startswith("| fcn5 ")][0]
    assert "| 100 (1.00x) | 50 (2.00x) | timeout | 20 (5.00x) |" in line
    assert "62% at 8" in line and line.rstrip().endswith("| 8 † |")
    assert f"{karp_flatt(5.0, 8):.2f}" in line
    assert "- fcn5 torch/eager fp32 b=64: platform: vm-a vs vm-b" in md
    assert "difference with the thread counts'" in md and "frameworks'" not in md
    flat = threads_flat([g])
    assert [r["threads"] for r in flat] == [1, 2, 4, 8] and flat[2]["status"] == "timeout"
    assert threads_markdown([]).startswith("No configuration ran at two or more thread counts")


def test_slower_with_more_threads_and_warned_results_are_marked():
    """2 threads 5.6x slower than 1 on a busy 2-core host: the cell says slower, e (> 1) is
    marked, and a result with quality warnings carries the mark the legend explains."""
    rows = [_row(1, 1, 2.0), _row(2, 2, 11.28, warnings="host busy: the measuring thread "
                                  "waited for a CPU 67% of the segment")]
    (g,) = thread_scaling(as_records(rows))
    assert g["points"][1]["warnings"].startswith("host busy") and g["points"][0]["warnings"] is None
    md = threads_markdown([g])
    line = [ln for ln in md.splitlines() if ln.startswith("| fcn5 ")][0]
    assert "| 11.28 (0.18x, slower) ⚠ |" in line and "| 2 (1.00x) |" in line
    assert f"| {karp_flatt(2.0 / 11.28, 2):.2f} (slower) |" in line
    assert "*slower*: S < 1" in md and "⚠: the result has quality warnings" in md


def test_speedup_ci_comes_from_the_raw_samples():
    samples = {1: [0.100, 0.101, 0.099, 0.100, 0.102], 2: [0.050, 0.051, 0.049, 0.050, 0.05]}
    (g,) = thread_scaling(as_records([_row(1, 1, 100.0), _row(2, 2, 50.0)]), samples.get)
    p = g["points"][1]
    assert p["speedup_ci_low"] <= p["speedup"] <= p["speedup_ci_high"]
    assert 1.9 < p["speedup_ci_low"] and p["speedup_ci_high"] < 2.1


def test_plots_one_png_per_model(tmp_path):
    rows = [_row(1, 1, 100.0), _row(2, 2, 55.0), _row(3, 1, 300.0, model="lstm"),
            _row(4, 4, 90.0, model="lstm"), _row(5, 4, 0, model="lstm", status="crash",
                                                  fw="jax", mode="xla")]
    paths = plot_thread_scaling(thread_scaling(as_records(rows)), tmp_path / "plots")
    assert [p.name for p in paths] == ["step_time_vs_threads_fcn5.png",
                                       "step_time_vs_threads_lstm.png"]
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000
    assert plot_thread_scaling([], tmp_path / "none") == [] and not (tmp_path / "none").exists()
    # two model names that sanitise to one file name get two files, not one overwritten
    rows = [_row(1, 1, 100.0, model="a/b"), _row(2, 2, 55.0, model="a/b"),
            _row(3, 1, 100.0, model="a:b"), _row(4, 2, 60.0, model="a:b")]
    paths = plot_thread_scaling(thread_scaling(as_records(rows)), tmp_path / "dup")
    assert [p.name for p in paths] == ["step_time_vs_threads_a_b.png",
                                       "step_time_vs_threads_a_b_2.png"]
    assert all(p.is_file() for p in paths)


def test_cli_compare_threads_and_report(tmp_path):
    """A real two-point thread sweep (PyTorch, fcn5_tiny on the CPU) through `dlperf run`, then
    `dlperf results --compare threads` in its three formats and `dlperf report`."""
    from typer.testing import CliRunner

    from dlperf.cli import app

    db = tmp_path / "t.db"
    runner = CliRunner()
    r = runner.invoke(app, ["run", "--model", "fcn5_tiny", "--batch-size", "8", "--device", "cpu",
                            "--threads", "1,2", "--min-iters", "5", "--min-time", "0.05",
                            "--no-ceilings", "--db", str(db)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["results", "--db", str(db), "--compare", "threads"])
    assert r.exit_code == 0, r.output
    assert "1 thr" in r.output and "2 thr" in r.output and "fcn5_tiny" in r.output
    r = runner.invoke(app, ["results", "--db", str(db), "--compare", "threads", "-f", "csv"])
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(io.StringIO(r.output)))
    assert [int(x["threads"]) for x in rows] == [1, 2] and float(rows[0]["speedup"]) == 1.0
    r = runner.invoke(app, ["results", "--db", str(db), "--compare", "threads", "-f", "json"])
    (g,) = json.loads(r.output)
    assert g["points"][1]["speedup_ci_low"] is not None  # samples are stored: a CI
    con = sqlite3.connect(db)  # a stored quality warning on the 2-thread run
    with con:
        con.execute("UPDATE results SET warnings = 'noisy' WHERE threads = 2")
        from dlperf.results.rowcheck import seal
        from dlperf.results.rows import COLUMNS

        for (rid,) in con.execute("SELECT id FROM results WHERE threads = 2").fetchall():
            seal(con, rid, COLUMNS)  # as if stored so: its checksum matches
    con.close()
    r = runner.invoke(app, ["report", "--db", str(db), "-o", str(tmp_path / "rep")])
    assert r.exit_code == 0, r.output
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## CPU thread scaling" in md and "step_time_vs_threads_fcn5_tiny.png" in md
    # the warnings table says which thread count the warning belongs to
    assert "| model | framework/mode | device | precision | batch | threads | warnings |" in md
    assert "| fcn5_tiny | torch/eager | cpu | fp32 | 8 | 2 | noisy |" in md
    assert (tmp_path / "rep" / "step_time_vs_threads_fcn5_tiny.png").exists()
    assert sqlite3.connect(db).execute("SELECT COUNT(*) FROM results").fetchone()[0] == 2


def test_a_failed_fewest_count_keeps_the_group_and_its_csv_row():
    """The fewest threads timed out and one count ran: the group is shown with the failure
    (it vanished before), and the CSV has the same columns in every row (it crashed when the
    first row was the failure)."""
    rows = [_row(1, 1, 0, status="timeout"), _row(2, 2, 50.0),
            _row(3, 1, 0, model="lstm", status="crash"), _row(4, 2, 0, model="lstm",
                                                             status="timeout")]
    fcn, lstm = sorted(thread_scaling(as_records(rows)), key=lambda g: g["model"])
    assert fcn["base_threads"] == 2 and fcn["points"][0]["status"] == "timeout"
    assert fcn["points"][1]["speedup"] == pytest.approx(1.0)
    assert lstm["base_threads"] is None and lstm["best_threads"] is None
    flat = threads_flat([fcn, lstm])
    assert len({tuple(r) for r in flat}) == 1  # one set of columns
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(flat[0]))
    w.writeheader()
    w.writerows(flat)
    md = threads_markdown([fcn, lstm])
    assert "| timeout | 50 (1.00x) | – | – | 2 |" in md
    assert "| crash | timeout | – | – | – |" in md
    assert [p.name for p in plot_thread_scaling([fcn, lstm], Path(tempfile.mkdtemp()))] == [
        "step_time_vs_threads_fcn5.png"]


def test_efficiency_table_names_the_thread_count():
    """Rows at 1 and 2 threads were two identical-looking lines of the efficiency table."""
    from dlperf.report.compare import efficiency_markdown

    res = {"mfu": {"mfu": 0.25, "achieved_flops_per_s": 2e11, "ceiling_flops_per_s": 8e11}}
    rows = [{**_row(1, 1, 100.0), "result_json": json.dumps(res)},
            {**_row(2, 2, 55.0), "result_json": json.dumps(res)}]
    md = efficiency_markdown(as_records(rows))
    assert "| fcn5 | torch/eager | cpu, 1 thr | fp32 |" in md
    assert "| fcn5 | torch/eager | cpu, 2 thr | fp32 |" in md
