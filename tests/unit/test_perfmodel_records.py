"""The performance model's reader (perfmodel/records.py): typed records through the results
package's reader, and the points kept per results file's content (beside the files, in the
user's cache) read back as the same points."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dlperf.perfmodel import records

ROOT = Path(__file__).resolve().parents[2] / "benchmarks/results"
SMALL = ROOT / "h200x2" / "ddp_diag.db"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DLPERF_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _copy(tmp_path: Path) -> str:
    d = tmp_path / "data"
    d.mkdir()
    return str(shutil.copy(SMALL, d / SMALL.name))


def test_points_from_the_store_the_user_cache_and_beside_the_file_are_the_same(tmp_path, cache):
    f = _copy(tmp_path)
    first = records.read_file(f)  # read through the store, kept in the user's cache
    assert first[0] and all(p.source == f for p in first[0])
    assert len(list(cache.glob("perfmodel-points-*.json"))) == 1
    assert records.read_file(f) == first
    records.store_points([f])
    beside = Path(f).parent / records.POINTS_NAME
    assert beside.is_file()
    shutil.rmtree(cache)
    assert records.read_file(f) == first  # from beside the file
    assert not cache.exists() or not list(cache.glob("perfmodel-points-*.json"))
    assert records.read_store(f).points == [p.__class__(**{**p.__dict__, "source": ""})
                                            for p in first[0]]


def test_a_damaged_or_stale_entry_beside_the_file_is_read_again(tmp_path, cache):
    f = _copy(tmp_path)
    records.store_points([f])
    beside = Path(f).parent / records.POINTS_NAME
    raw = json.loads(beside.read_text())
    (key, entry), = raw.items()
    truth = records.read_store(f)
    entry["points"][0]["step_time_s"] = "fast"  # not a number: refused, the file is read
    beside.write_text(json.dumps(raw))
    records._points_file.cache_clear()
    pts, _ = records.read_file(f)
    assert pts[0].step_time_s == truth.points[0].step_time_s
    entry["points"][0]["step_time_s"] = 123.0  # a planted value under another key: ignored
    beside.write_text(json.dumps({"0" * 24: entry}))
    records._points_file.cache_clear()
    assert records.read_file(f)[0][0].step_time_s == truth.points[0].step_time_s


def test_committed_points_are_current():
    """The points committed beside the H200 results were read by the current reader from the
    files' current content: a fresh clone's first prediction does not read every row again
    (regenerate with ``benchmarks/perfmodel_validate.py --committed``)."""
    for folder in ("h200", "h200x2"):
        raw = json.loads((ROOT / folder / records.POINTS_NAME).read_text())
        keys = {records.file_key(str(f)) for f in (ROOT / folder).glob("*.db")}
        assert keys <= set(raw), (f"{folder}: stale {records.POINTS_NAME}; run PYTHONPATH=src "
                                  "python benchmarks/perfmodel_validate.py --committed")


def test_a_session_names_the_cpu_by_its_name_with_or_without_a_cpu_id():
    """Some of mfu_inputs.db's records predate ``env.cpu_id``: every session names the CPU by
    its name, those that hold the CPU's identity with its family and model number after it;
    none says None."""
    sessions = {p.session for p in records.load([str(ROOT / "h200" / "mfu_inputs.db")]).points}
    assert sessions == {"vm/Intel(R) Xeon(R) Processor/2026-12-01",
                        "vm/Intel(R) Xeon(R) Processor (family 6 model 207)/2026-12-01"}


def test_the_session_label_has_one_writer():
    """The session label is written by :func:`dlperf.config.identity.session_of` alone, for
    a record with the CPU's identity, without it, and with parts missing."""
    from dlperf.config.identity import session_of

    assert session_of("h", "Xeon", {"family": "6", "model": "207"}, "2026-12-01T10:00") \
        == "h/Xeon (family 6 model 207)/2026-12-01"
    assert session_of("h", "Xeon", None, "2026-12-01T10:00") == "h/Xeon/2026-12-01"
    assert session_of(None, None, {"model": 207}, None) \
        == "host unrecorded/cpu (model 207)/date unrecorded"
    assert session_of("", "", {}, "") == "host unrecorded/cpu unrecorded/date unrecorded"


def test_unchanged_tables_and_points_are_not_written_again(tmp_path, cache):
    """``dlperf predict --validate`` makes the residual table and the points beside the
    results files again: where their content is the same, the files are left as they are
    (their mtime kept: a checkout's tree stays clean), and a changed content is written."""
    import os

    from dlperf.perfmodel import fitcache as fc

    f = _copy(tmp_path)
    keyed = {"held-out batch": [(0.1, "host", None), (-0.2, None, None)]}
    written = [records.store_points([f])[0], fc.write_table([f], keyed)]
    for p in written:
        os.utime(p, ns=(10**9, 10**9))
    assert records.store_points([f])[0] == written[0]
    assert fc.write_table([f], keyed) == written[1]
    assert [p.stat().st_mtime_ns for p in written] == [10**9, 10**9]
    before = written[1].read_text()
    fc.write_table([f], {"held-out batch": [(0.3, "host", None)]})
    assert written[1].stat().st_mtime_ns != 10**9 and written[1].read_text() != before


@pytest.mark.parametrize("bad", ["{bad", "[]"])
def test_a_damaged_row_with_a_timeline_is_skipped_with_the_rest(tmp_path, cache, bad):
    import sqlite3
    import warnings

    from dlperf.results import timelines
    from dlperf.results.rowcheck import DamagedRows
    from dlperf.results.store import ResultStore

    f = _copy(tmp_path)
    truth = records.read_store(f).points
    db = sqlite3.connect(f)
    rid = truth[0].result_id
    db.execute("CREATE TABLE IF NOT EXISTS timelines (result_id INTEGER PRIMARY KEY, "
               "format TEXT, data TEXT NOT NULL)")
    db.execute("INSERT INTO timelines VALUES (?, ?, ?)", (rid, timelines.FORMAT, "eJwDAAAAAAE="))
    db.execute("UPDATE results SET result_json=? WHERE id=?", (bad, rid))
    db.commit()
    db.close()
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        got = records.load(f)
    assert [p.result_id for p in got.points] == [p.result_id for p in truth if p.result_id != rid]
    assert list(got.damaged[f]) == [rid]
    assert any(issubclass(w.category, DamagedRows) and f"id {rid}" in str(w.message)
               for w in said)
    with ResultStore(f, read_only=True) as store, pytest.raises(Exception, match="damaged"):
        timelines.load(store, rid)
