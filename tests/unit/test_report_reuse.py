"""``dlperf report`` makes each section body once for report.md and report.html
(:func:`dlperf.report.reuse.reusing_computations`), and every call outside it computes
afresh."""

from __future__ import annotations

from pathlib import Path

from dlperf.report import gaps, glance, predicted, threads
from dlperf.report.reuse import reusing_computations
from dlperf.report.sections import SECTIONS, Inputs, report_sections
from dlperf.results.store import ResultStore
from fakes import make_db

CAL = Path(__file__).resolve().parents[2] / "benchmarks/results/h200/calibration.db"


def _counting(monkeypatch, calls, module, name):
    real = getattr(module, name)

    def counted(*a, **k):
        calls[name] += 1
        return real(*a, **k)

    calls[name] = 0
    monkeypatch.setattr(module, name, counted)


def _sections(db, out, figures):
    with ResultStore(db, read_only=True) as store:
        return report_sections(Inputs(store, store.rows(), output=out, figures=figures,
                                      source=str(db)))


def test_sections_computed_once_while_reusing(tmp_path, monkeypatch):
    db = make_db(tmp_path / "r.db")
    calls: dict[str, int] = {}
    _counting(monkeypatch, calls, glance, "relative_summary")  # a compute= section
    _counting(monkeypatch, calls, threads, "thread_scaling")  # a report= section with PNGs
    _counting(monkeypatch, calls, gaps, "gap_attribution")
    _counting(monkeypatch, calls, predicted, "backtest")
    out = tmp_path / "out"

    first = _sections(db, out, None)
    first_html = _sections(db, out, {})
    assert set(calls.values()) == {2}, calls  # no reuse outside the context
    with reusing_computations() as memo:
        again = _sections(db, out, None)
        again_html = _sections(db, out, {})
        assert set(calls.values()) == {3}, calls  # once for both pages
        assert memo
        _sections(db, tmp_path / "elsewhere", None)  # another plot folder: made there
        assert calls["thread_scaling"] == 4 and calls["backtest"] == 3, calls
    assert again == first and again_html == first_html  # reuse changes nothing shown
    _sections(db, out, None)
    assert calls["relative_summary"] == 5  # the memo is gone with the context


def test_figure_sections_still_give_each_page_its_figure(tmp_path):
    """The predicted section's body depends on the page (PNG for report.md, plotly figure for
    report.html): made for each page, its back-test once."""
    assert [s.title for s in SECTIONS if s.figures] == [
        "Predicted vs measured: the performance model's back-test"]
    plain_md = dict(_sections(CAL, tmp_path / "a", None))
    figs: dict = {}
    plain_html = dict(_sections(CAL, tmp_path / "a", figs))
    with reusing_computations():
        md = dict(_sections(CAL, tmp_path / "b", None))
        figs_b: dict = {}
        html = dict(_sections(CAL, tmp_path / "b", figs_b))
    assert md == plain_md and html == plain_html
    assert predicted.PLOT_NAME in figs_b and set(figs_b) == set(figs)
    assert (tmp_path / "b" / predicted.PLOT_NAME).is_file()
