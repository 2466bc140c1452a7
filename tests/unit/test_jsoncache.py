"""On-disk caches (dlperf.jsoncache, used by the performance model's caches and the sweep's
ceilings): atomic, owner-only, never through a planted link; a file that was changed, that
others may write, or whose values are out of bounds is ignored with a warning and recomputed,
never trusted to change a result silently."""

from __future__ import annotations

import json
import os
import stat

import pytest

from dlperf import jsoncache
from dlperf.jsoncache import CacheIgnored, read_json, write_json


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(jsoncache, "_warned", set())


def test_written_owner_only_and_read_back(tmp_path):
    f = tmp_path / "c" / "x.json"
    assert write_json(f, {"a": [1, 2.5]})
    assert read_json(f) == {"a": [1, 2.5]}
    assert stat.S_IMODE(f.stat().st_mode) == 0o600
    assert [p.name for p in f.parent.iterdir()] == ["x.json"]


def test_a_planted_link_is_replaced_never_written_through(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    f = tmp_path / "x.json"
    f.symlink_to(victim)
    assert read_json(f) is None  # a link is not a cache file
    write_json(f, [1])
    assert victim.read_text() == "keep" and not f.is_symlink() and read_json(f) == [1]


def test_a_changed_or_shared_file_is_ignored_with_a_warning(tmp_path):
    f = tmp_path / "x.json"
    write_json(f, {"interval": 0.1})
    doc = json.loads(f.read_text())
    doc["payload"]["interval"] = 0.5  # a plausible value: only the digest tells
    f.write_text(json.dumps(doc))
    with pytest.warns(CacheIgnored, match="does not match its digest"):
        assert read_json(f) is None
    write_json(f, {"interval": 0.1})
    os.chmod(f, 0o666)
    with pytest.warns(CacheIgnored, match="others may write it"):
        assert read_json(f) is None


def test_the_callers_check_refuses_values_out_of_bounds(tmp_path):
    f = tmp_path / "x.json"
    write_json(f, {"r": 1e308})

    def check(p):
        if not abs(p["r"]) <= 50:
            raise ValueError(f"residual {p['r']}")

    with pytest.warns(CacheIgnored, match="out of bounds"):
        assert read_json(f, check) is None
    f.write_text("[" * 100000 + "]" * 100000)
    assert read_json(f) is None  # no traceback on a deep file (a warning, or an old format)


def test_a_cache_kind_keeps_its_newest_files_only(tmp_path):
    """A cache keyed by a results file's content got a new file at each change of the file
    and none was removed: the user's cache folder grew without bound."""
    import os

    from dlperf.jsoncache import prune, write_json

    for i in range(10):
        f = tmp_path / f"perfmodel-points-{i:04x}.json"
        assert write_json(f, {"i": i}, keep=4)
        os.utime(f, (1000 + i, 1000 + i))  # distinct ages
    other = tmp_path / "perfmodel-fits-00.json"
    write_json(other, {"x": 1})
    mine = tmp_path / "perfmodel-points-notes.json"  # not a cache key: never removed
    mine.write_text("{}")
    kept = sorted(p.name for p in tmp_path.glob("perfmodel-points-*.json"))
    assert kept == ["perfmodel-points-0006.json", "perfmodel-points-0007.json",
                    "perfmodel-points-0008.json", "perfmodel-points-0009.json",
                    "perfmodel-points-notes.json"]
    assert other.exists()
    newest = tmp_path / "perfmodel-points-0009.json"
    assert prune(newest, 1) and sorted(tmp_path.glob("perfmodel-points-*.json")) == [
        newest, mine]
