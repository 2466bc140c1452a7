"""``dlperf report`` computes each costly section once for report.md and report.html
(:func:`dlperf.report.reuse.reusing_computations`), and every call outside it computes
afresh."""

from __future__ import annotations

from dlperf.report import glance, predicted
from dlperf.report.reuse import reusing_computations
from dlperf.report.sections import Inputs, report_sections
from dlperf.results.store import ResultStore
from fakes import make_db


def test_sections_computed_once_while_reusing(tmp_path, monkeypatch):
    db = make_db(tmp_path / "r.db")
    calls = {"summary": 0, "backtest": 0}
    real_summary, real_backtest = glance.relative_summary, predicted.backtest

    def summary(*a, **k):
        calls["summary"] += 1
        return real_summary(*a, **k)

    def backtest(*a, **k):
        calls["backtest"] += 1
        return real_backtest(*a, **k)

    monkeypatch.setattr(glance, "relative_summary", summary)
    monkeypatch.setattr(predicted, "backtest", backtest)

    def sections(figures):
        with ResultStore(db, read_only=True) as store:
            return report_sections(Inputs(store, store.rows(), output=tmp_path / "out",
                                          figures=figures, source=str(db)))

    first = sections(None)
    sections({})
    assert calls["summary"] == 2 and calls["backtest"] == 2  # no reuse outside the context
    with reusing_computations() as memo:
        again = sections(None)
        sections({})
        assert calls["summary"] == 3 and calls["backtest"] == 3, calls
        assert len(memo) == 2
    assert again == first  # reuse changes nothing shown
    sections(None)
    assert calls["summary"] == 4  # the memo is gone with the context
