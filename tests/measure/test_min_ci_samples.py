"""A point measured with fewer iterations than a 95% CI of the median needs
(:data:`dlperf.stats.MIN_CI_SAMPLES` = 6) is stored with no CI and a warning (issue 23: one
sample was stored ``ok`` with a zero-width CI and no warning), and everything downstream
(store, exports, tables, report, comparisons, the sweep's result line) takes the missing CI."""

from __future__ import annotations

import csv
import io
import json

import pytest
from rich.console import Console
from typer.testing import CliRunner

from dlperf.results.schema import RunRecord
from dlperf.results.view import as_records
from dlperf.stats import MIN_CI_SAMPLES


@pytest.fixture
def run_fake(monkeypatch):
    """``run(n, batch=8)``: an in-process fake run of exactly ``n`` measured iterations."""
    from dlperf import registry
    from dlperf.config import IterationPolicy, make_run_config
    from dlperf.frameworks import ADAPTERS
    from dlperf.worker import run_config

    monkeypatch.setitem(registry.FRAMEWORK_MODES, "fake", ("eager",))
    monkeypatch.setitem(ADAPTERS, "fake", "dlperf.frameworks.fake.adapter:FakeAdapter")

    def run(n: int, batch: int = 8):
        pol = IterationPolicy(min_iters=n, max_iters=n, min_time_s=0.0, max_warmup_iters=2,
                              min_warmup_iters=0, warmup_window=2)
        cfg = make_run_config(model="fcn5_tiny", framework="fake", batch_size=batch,
                              iterations=pol, measure_ceilings=False,
                              options={"step_s": 0.002})
        r = run_config(cfg)
        assert r["status"] == "ok", r["error"]
        assert r["n_measured"] == n
        return r

    return run


def test_min_ci_samples_is_six_at_95_percent():
    assert MIN_CI_SAMPLES == 6


@pytest.mark.parametrize("n", [1, 3, MIN_CI_SAMPLES - 1])
def test_too_few_iterations_store_no_ci_and_a_warning(run_fake, n):
    r = run_fake(n)
    assert r["summary"]["ci_low"] is None and r["summary"]["ci_high"] is None
    assert r["summary"]["median"] == pytest.approx(0.002)
    (w,) = [w for w in r["warnings"] if "too few for a 95% confidence interval" in w]
    assert f"only {n} measured iteration(s)" in w and "it needs 6" in w and "--min-iters" in w
    assert not any("wide CI" in w for w in r["warnings"])


def test_enough_iterations_have_a_ci_and_no_such_warning(run_fake):
    r = run_fake(MIN_CI_SAMPLES)
    s = r["summary"]
    assert s["ci_low"] is not None and s["ci_low"] <= s["median"] <= s["ci_high"]
    assert not any("confidence interval of the median" in w for w in r["warnings"])


def test_a_missing_ci_goes_through_store_exports_report_and_comparisons(run_fake, tmp_path):
    from dlperf.cli import app
    from dlperf.report.regress import compare_records
    from dlperf.report.tables import results_table
    from dlperf.results.export import to_csv, to_json
    from dlperf.results.store import ResultStore
    from dlperf.sweep import result_line

    few, enough = run_fake(3, batch=8), run_fake(MIN_CI_SAMPLES, batch=16)
    db = tmp_path / "r.db"
    with ResultStore(db) as s:
        s.add(few)
        s.add(enough)
    with ResultStore(db, read_only=True) as s:
        rows = s.rows()
        assert rows[0]["step_time_ci_low_s"] is None and rows[0]["step_time_ci_high_s"] is None
        assert "too few for a 95% confidence interval" in rows[0]["warnings"]
        assert rows[1]["step_time_ci_low_s"] is not None
        parsed = list(csv.DictReader(io.StringIO(to_csv(rows))))
        assert parsed[0]["step_time_ci_low_s"] == "" and parsed[1]["step_time_ci_low_s"] != ""
        js = json.loads(to_json(rows, s, include_samples=True))
        assert js[0]["result"]["summary"]["ci_low"] is None
        recs = s.records()
        c = Console(record=True, width=300)
        c.print(results_table(as_records(rows)))
        lines = [ln for ln in c.export_text().splitlines() if "fcn5_tiny" in ln]
        cells = [[x.strip() for x in ln.split("│")] for ln in lines]
        assert "2.000" in cells[0] and not any("[" in x for x in cells[0])  # median, no CI
        assert any(x.startswith("2.000 [") for x in cells[1])
    c = Console(record=True, width=300)
    c.print(result_line(RunRecord.from_dict(few)), highlight=False)
    line = c.export_text()
    assert "2.000 ms/iter [no CI: too few iterations]" in line and "warning: only 3" in line
    comp = compare_records(recs[:1], recs[:1])
    (pc,) = comp.points
    assert pc.ci is None and not pc.significant
    assert any("a 95% interval needs 6" in n for n in pc.notes)
    out = tmp_path / "rep"
    for args in (["results", "--db", str(db)], ["results", "--db", str(db), "-f", "json"],
                 ["report", "--db", str(db), "-o", str(out)],
                 ["compare", str(db), str(db)], ["compare", str(db), str(db), "-f", "json"],
                 *(["results", "--db", str(db), "--compare", k]
                   for k in ("modes", "frameworks", "matrix", "threads", "data", "repeats",
                             "scaling", "convergence"))):
        res = CliRunner().invoke(app, args)
        assert res.exception is None or isinstance(res.exception, SystemExit), (args, res.output)
        assert res.exit_code == 0, (args, res.output)
    md = (out / "report.md").read_text()
    assert "too few for a 95% confidence interval" in md
    assert (out / "report.html").stat().st_size > 1000
