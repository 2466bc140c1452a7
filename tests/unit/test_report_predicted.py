"""The report's "Predicted vs measured" section (dlperf.report.predicted) and the back-test
budget it runs under (dlperf.validation.backtest.Budget), on the committed H200 results."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlperf import validation
from dlperf.errors import ConfigError
from dlperf.report import predicted as pr
from dlperf.validation import backtest as bt

H200 = Path(__file__).resolve().parents[2] / "benchmarks/results/h200"
CAL = H200 / "calibration.db"
BATCH = ["held-out batch", "extrapolate 2x"]


def test_budget_leaves_out_whole_units_and_changes_no_prediction():
    full = validation.validate(CAL, BATCH)
    part = validation.validate(CAL, BATCH, budget_s=0.5)
    assert full.left_out == {} and full.budget_s is None
    assert part.budget_s == 0.5 and sum(part.left_out.values()) > 0
    for cat in BATCH:
        n_full = sum(r.category == cat for r in full.rows)
        n_part = sum(r.category == cat for r in part.rows)
        assert n_part + part.left_out.get(cat, 0) == n_full, cat
    # the predictions made are the ones the full run makes (the budget only skips series)
    made = {(r.category, r.label): r.predicted_s for r in full.rows}
    for r in part.rows:
        assert r.predicted_s == pytest.approx(made[(r.category, r.label)], rel=1e-9)
    # whole series: a series is either all in or all out
    def series(r):
        return r.label.split(" b=")[0], r.label.rpartition(" [")[2]
    kept = {series(r) for r in part.rows}
    assert kept and {(r.category, r.label) for r in full.rows if series(r) in kept} == \
        {(r.category, r.label) for r in part.rows}
    # deterministic: the estimate decides, not a clock
    again = validation.validate(CAL, BATCH, budget_s=0.5)
    assert [(r.label, r.predicted_s) for r in again.rows] == \
        [(r.label, r.predicted_s) for r in part.rows]


def test_budget_accounting():
    b = bt.Budget(1.0)
    assert b.take("batch", ["held-out batch"] * 10)  # 10 x 0.045 s
    assert b.spent_s == pytest.approx(10 * bt.COST_S["batch"])
    assert not b.take("what-if", ["what-if B->2B"] * 5)  # 0.75 s more does not fit
    assert b.left_out == {"what-if B->2B": 5}
    assert b.take("lomo", ["leave-one-model-out"] * 7, units=2)  # 2 groups x 0.1 s
    assert b.spent_s == pytest.approx(10 * 0.045 + 0.2)
    with pytest.raises(ValueError, match=">= 0 s"):
        bt.Budget(-1.0)
    with pytest.raises(ConfigError, match=">= 0 s"):
        validation.validate(CAL, BATCH, budget_s=-1.0)


def test_section_markdown_with_png(tmp_path):
    body = pr.predicted_section(CAL, tmp_path)
    assert body is not None
    assert "| category | n | MdAPE % | max % | baseline MdAPE % | baseline max % | left out |" \
        in body
    assert "| held-out batch |" in body
    assert f"![predicted against measured step time]({pr.PLOT_NAME})" in body
    assert (tmp_path / pr.PLOT_NAME).stat().st_size > 10_000
    assert f"dlperf predict --validate --db {CAL}" in body  # runnable where the report ran
    assert "without the what-if categories" in body
    # the table's counts are the bounded back-test's
    v = pr.backtest(CAL)
    n = sum(r.category == "held-out batch" for r in v.rows)
    assert f"| held-out batch | {n} |" in body
    assert bt.Budget(pr.BUDGET_S).seconds >= 0 and v.budget_s == pr.BUDGET_S


def test_step_categories_are_the_step_time_ones():
    """The scatter's categories: the report's step-time categories and every what-if
    category (a full validation's rows), each one the back-test makes; not the all-reduce or
    noise-floor rows, which are not step predictions."""
    step = set(pr.STEP_CATEGORIES)
    assert set(bt.WHATIF_CATEGORIES) <= step <= set(validation.CATEGORIES)
    assert set(pr.REPORT_CATEGORIES) - step == {"all-reduce >= 1 MiB", "repeat (noise floor)"}


def test_section_html_figure_instead_of_png(tmp_path):
    figures: dict = {}
    body = pr.predicted_section(CAL, tmp_path, figures)
    assert body is not None and pr.PLOT_NAME in body
    assert not (tmp_path / pr.PLOT_NAME).exists()  # no PNG for the page
    fig = figures[pr.PLOT_NAME]
    cats = [t.name for t in fig.data if t.mode == "markers"]
    assert cats and all(c.split(" (")[0] in pr.STEP_CATEGORIES for c in cats)
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    line = next(t for t in fig.data if t.name == "y = x")
    assert list(line.x) == list(line.y)
    pts = next(t for t in fig.data if t.mode == "markers")
    assert "measured" in pts.hovertext[0] and "calibration.db" in pts.hovertext[0]
    assert "/" + "benchmarks" not in pts.hovertext[0]  # the file's name, not its path


def test_markdown_image_becomes_the_interactive_figure():
    import plotly.graph_objects as go

    from dlperf.report.html import _markdown_html

    fig = go.Figure(go.Scatter(x=[1, 2], y=[1, 2]))
    html = _markdown_html("a table\n\n![scatter](x.png)\n\n![other](y.png)\n", None,
                          {"x.png": fig}, "plot-section-3")
    assert "id=\"plot-section-3-0\"" in html or "id='plot-section-3-0'" in html
    assert "x.png" not in html and "y.png" in html  # only the named image is replaced
    assert "<p>a table</p>" in html


def test_too_few_points_leave_the_section_out(tmp_path):
    from dlperf.report.sections import Inputs, report_sections
    from dlperf.results.store import ResultStore

    assert pr.predicted_section(H200 / "reproduce.db", tmp_path) is None
    assert not (tmp_path / pr.PLOT_NAME).exists()
    with ResultStore(H200 / "reproduce.db", read_only=True) as store:
        titles = [t for t, _ in report_sections(Inputs(store, store.rows()))]
    assert titles and not any(t.startswith("Predicted vs measured") for t in titles)


def test_report_and_page_carry_the_section(tmp_path):
    from dlperf.report.html import write_html_report
    from dlperf.report.sections import write_full_report

    md = write_full_report(str(CAL), tmp_path / "md", "t", None).read_text()
    assert "## Predicted vs measured: the performance model's back-test" in md
    assert (tmp_path / "md" / pr.PLOT_NAME).exists()
    page = write_html_report(str(CAL), tmp_path / "html").read_text()
    assert "Predicted vs measured" in page
    assert "Predicted against measured step time" in page
    assert pr.PLOT_NAME not in page  # the figure, not a link to a PNG
