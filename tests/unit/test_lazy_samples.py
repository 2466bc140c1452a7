"""Records read with ``lazy_samples`` read their raw samples when first asked for, and
``dlperf compare`` reads the samples of the points it compares only: the same output as
records read with every sample, without decoding the samples of points on one side."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_here import dlperf_here
from dlperf.report.regress import ok_runs
from dlperf.results.store import ResultStore
from fakes import make_db


@pytest.fixture
def reads(monkeypatch):
    """The ``(file name, row id)`` of every ``ResultStore.samples`` call."""
    got: list[tuple[str, int]] = []
    orig = ResultStore.samples

    def spy(self, result_id):
        got.append((Path(self.path).name, result_id))
        return orig(self, result_id)

    monkeypatch.setattr(ResultStore, "samples", spy)
    return got


def test_lazy_records_read_their_samples_once_when_asked_and_equal_eager_ones(tmp_path, reads):
    db = make_db(tmp_path / "a.db")
    with ResultStore(db, read_only=True) as s:
        eager = s.records(latest=False)
        reads.clear()
        lazy = s.records(latest=False, lazy_samples=True)
        assert reads == [] and all(r.samples is None for r in lazy)
        assert lazy[1].measured_s == eager[1].measured_s and len(eager[1].measured_s) == 6
        assert lazy[1].measured_s and reads == [("a.db", lazy[1].stored.id)]  # once
        assert [r.to_dict() for r in lazy] == [r.to_dict() for r in eager]  # reads the rest
        assert sorted(reads) == [("a.db", 1), ("a.db", 2)]
        assert [r.samples for r in lazy] == [r.samples for r in eager]
        assert [r.losses for r in lazy] == [r.losses for r in eager]


def test_ok_runs_reads_samples_only_without_a_summary_median(tmp_path, reads):
    db = make_db(tmp_path / "a.db")
    with ResultStore(db, read_only=True) as s:
        a, b = s.records(latest=False, lazy_samples=True)
        b.summary = None  # the median comes from the samples alone
        assert ok_runs([a, b]) == [a, b]
        assert reads == [("a.db", b.stored.id)]


def _compare(*args):
    r = dlperf_here("compare", *args)
    return r.returncode, r.stdout, r.stderr


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_compare_reads_the_samples_it_needs_and_prints_what_eager_records_print(
        tmp_path, reads, monkeypatch, fmt):
    a = make_db(tmp_path / "a.db", tags=("", "", ""), batches=(8, 16, 32))
    b = make_db(tmp_path / "b.db", tags=("", ""), batches=(8, 64), scale=1.1)
    args = (str(a), str(b), "--format", fmt)
    lazy = _compare(*args)
    assert lazy[0] == 0, lazy[2]
    assert "fcn5_tiny" in lazy[1] and "only in BASE" in lazy[1] and "only in NEW" in lazy[1]
    if fmt == "table":  # batch 8 is in both files: its two rows; the others are on one side
        assert sorted(set(reads)) == [("a.db", 1), ("b.db", 1)], reads
    else:  # every run's median_s: every row
        assert sorted(set(reads)) == [("a.db", 1), ("a.db", 2), ("a.db", 3), ("b.db", 1),
                                      ("b.db", 2)], reads
    records = ResultStore.records
    monkeypatch.setattr(ResultStore, "records", lambda self, **kw: records(
        self, **{**kw, "lazy_samples": False}))
    assert _compare(*args) == lazy


def test_a_first_read_parses_each_rows_record_once_and_a_filtered_read_as_before(
        tmp_path, monkeypatch):
    """The damaged-row scan checks each row's JSON as a record; ``records`` hands out those
    records instead of parsing the JSON again (a filtered read, which would hold the records
    of the rows it leaves out, parses its own)."""
    from dlperf.results.schema import RunRecord
    from dlperf.results.view import record_of

    db = make_db(tmp_path / "a.db", tags=("", "", ""), batches=(8, 16, 32))
    with ResultStore(db, read_only=True) as s:
        fresh = [record_of(r) for r in s.rows(latest=False)]
        fresh_raw = [record_of(r, s.samples(r["id"])) for r in s.rows(latest=False)]
    calls = []
    orig = RunRecord.from_dict.__func__
    monkeypatch.setattr(RunRecord, "from_dict",
                        classmethod(lambda cls, d: calls.append(1) or orig(cls, d)))
    with ResultStore(db, read_only=True) as s:
        recs = s.records(latest=False)
        assert len(calls) == 3  # the scan's three; none again
        assert [r.to_dict(raw=False) for r in recs] == [r.to_dict(raw=False) for r in fresh]
        assert [r.measured_s for r in recs] == [r.measured_s for r in fresh_raw]
        assert [r.stored for r in recs] == [r.stored for r in fresh]
        assert len({id(r) for r in recs + s.records(latest=False)}) == 6  # never one twice
    calls.clear()
    with ResultStore(db, read_only=True) as s:
        (one,) = s.records(latest=False, batch_size=16)
        assert len(calls) == 4  # the scan's three, and the row read
        assert one.to_dict() == fresh_raw[1].to_dict()
