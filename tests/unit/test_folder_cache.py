"""A folder of results files read as one (dlperf.results.merge.open_results) keeps its merged
copy in the user's cache (dlperf.results.foldercache): a second read gives the same content
and the same warnings without merging; any change to a file's bytes, a journal beside one, a
damaged or foreign cache file, or a cache folder that cannot be written means the files are
read again. And the imports of reading one."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import struct
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dlperf.cli import app
from dlperf.results import foldercache
from dlperf.results import merge as merge_mod
from dlperf.results.dbfile import StoreError
from dlperf.results.merge import open_results, origin_of
from dlperf.results.rowcheck import DamagedRows
from dlperf.results.schema import RunRecord
from dlperf.results.store import ResultStore
from dlperf.stats import summarize, throughput

#: A sample time stored in every file (found as its 8 bytes to flip a bit of it).
ODD_TIME = 0.0123456789


def _rec(model: str, batch: int) -> RunRecord:
    """An ok result of ``model`` at ``batch`` whose samples hold :data:`ODD_TIME`."""
    times = [0.01, ODD_TIME, 0.011, 0.0105]
    point = f"{model}/torch/eager/{batch}"
    return RunRecord.from_dict({
        "run_key": f"{point}#0", "point_key": point, "repeat": 0, "status": "ok",
        "model": model, "framework": "torch", "mode": "eager", "device": "cpu",
        "precision": "fp32", "batch_size": batch, "data": "synthetic",
        "created_at": "2026-01-01T00:00:00+00:00", "samples": {"measure": times},
        "losses": {"measure": [2.0] * 4}, "summary": summarize(times).to_dict(),
        "throughput": throughput(4, batch, sum(times)), "n_measured": 4})


def _db(path: Path, model: str, batches) -> Path:
    with ResultStore(path) as s:
        for b in batches:
            s.add(_rec(model, b))
    return path


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("DLPERF_CACHE_DIR", str(d))
    return d


@pytest.fixture
def folder(tmp_path) -> Path:
    d = tmp_path / "res"
    d.mkdir()
    _db(d / "a.db", "alpha", (8, 16))
    _db(d / "b.db", "beta", (8, 32, 64))
    return d


@pytest.fixture
def merges(monkeypatch) -> list[list[str]]:
    """The sources of every merge open_results makes (a cache hit makes none)."""
    calls: list[list[str]] = []
    real = merge_mod.merge_stores

    def counting(dest, sources, **kw):
        calls.append([str(s) for s in sources])
        return real(dest, sources, **kw)

    monkeypatch.setattr(merge_mod, "merge_stores", counting)
    return calls


def _read(folder: Path) -> tuple[list, list, dict, list[str]]:
    """(rows, samples of each row, origin of each row, DamagedRows messages) of the folder."""
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with open_results(folder) as st:
            rows = st.rows(latest=False)
            samples = [st.samples(r["id"]) for r in rows]
            where = origin_of(st)
            origins = {r["id"]: where(r["id"]) for r in rows}
            assert st.path == folder
    damaged = [str(w.message) for w in said if issubclass(w.category, DamagedRows)]
    others = [str(w.message) for w in said if not issubclass(w.category, DamagedRows)]
    assert not others, others
    return rows, samples, origins, damaged


def _files(cache: Path) -> list[Path]:
    return sorted(cache.glob("results-folder-*.db"))


def test_a_second_read_is_the_first_without_merging(folder, cache, merges):
    first = _read(folder)
    assert len(merges) == 1 and len(_files(cache)) == 1
    second = _read(folder)
    assert len(merges) == 1, "the second read merged the files again"
    assert second == first
    rows, samples, origins, damaged = first
    assert sorted(r["model"] for r in rows) == ["alpha", "alpha", "beta", "beta", "beta"]
    assert all(s["measure"]["step_time_s"][1] == ODD_TIME for s in samples)
    assert sorted(set(origins.values())) == [str(folder / "a.db"), str(folder / "b.db")]
    assert damaged == []
    f = _files(cache)[0]
    assert oct(f.stat().st_mode & 0o777) == "0o600"
    assert hashlib.sha256(f.read_bytes()).hexdigest() == f.name[-len(".db") - 64:-len(".db")]


def test_the_cli_output_of_a_hit_is_byte_identical(folder, cache, merges):
    runner = CliRunner()
    outs = []
    for fmt in ("table", "table", "json", "json"):
        r = runner.invoke(app, ["results", "--db", str(folder), "-f", fmt, "--all"],
                          catch_exceptions=False)
        assert r.exit_code == 0, r.output
        outs.append(r.stdout)
    assert len(merges) == 1
    assert outs[0] == outs[1] and outs[2] == outs[3] and "alpha" in outs[0]


def _sql(db: Path, sql: str) -> None:
    con = sqlite3.connect(db)
    con.execute(sql)
    con.commit()
    con.close()


def test_a_damaged_row_is_said_on_a_hit_as_on_a_miss(folder, cache, merges):
    _sql(folder / "b.db", "UPDATE results SET step_time_median_s='NaN' WHERE id=2")
    miss = _read(folder)
    hit = _read(folder)
    assert len(merges) == 1
    assert hit == miss
    rows, _, _, damaged = miss
    assert len(rows) == 4
    assert len(damaged) == 1 and "1 damaged result row(s) in" in damaged[0]
    assert str(folder / "b.db") in damaged[0] and "id 2" in damaged[0]


def test_a_changed_file_is_read_again(folder, cache, merges):
    _read(folder)
    _db(folder / "a.db", "alpha", (128,))  # one result more
    rows = _read(folder)[0]
    assert len(merges) == 2 and len(rows) == 6
    _read(folder)
    assert len(merges) == 2


def test_a_replaced_file_is_read_again(folder, cache, merges, tmp_path):
    _read(folder)
    other = _db(tmp_path / "other.db", "gamma", (8,))
    os.replace(other, folder / "b.db")
    rows = _read(folder)[0]
    assert len(merges) == 2
    assert sorted(r["model"] for r in rows) == ["alpha", "alpha", "gamma"]


def test_an_added_or_removed_file_is_read_again(folder, cache, merges):
    _read(folder)
    _db(folder / "c.db", "gamma", (8,))
    assert len(_read(folder)[0]) == 6
    (folder / "c.db").unlink()
    assert len(_read(folder)[0]) == 5
    assert len(merges) == 2  # the two files alone have their first key again: a hit


def test_a_truncated_file_is_refused_as_without_the_cache(folder, cache, merges):
    _read(folder)
    with open(folder / "b.db", "r+b") as f:
        f.truncate(4096)
    with pytest.raises(StoreError, match="truncated"):
        _read(folder)
    assert len(merges) == 2


def test_a_bit_flipped_in_place_is_found_though_size_and_time_are_kept(folder, cache, merges):
    """Damage at rest keeps a file's size and modification time: the key is its bytes."""
    _read(folder)
    p = folder / "b.db"
    st = p.stat()
    data = bytearray(p.read_bytes())
    at = data.find(struct.pack(">d", ODD_TIME))
    assert at > 0
    data[at + 7] ^= 1
    p.write_bytes(bytes(data))
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (p.stat().st_size, p.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    rows, _, _, damaged = _read(folder)
    assert len(merges) == 2
    assert len(rows) == 4 and len(damaged) == 1 and "checksum" in damaged[0]


def test_a_file_with_a_journal_beside_it_is_read_without_the_cache(folder, cache, merges):
    (folder / "a.db-journal").write_bytes(b"")
    _read(folder)
    _read(folder)
    assert len(merges) == 2 and _files(cache) == []
    assert foldercache.folder_key([str(folder / "a.db"), str(folder / "b.db")]) is None


def test_a_changed_or_foreign_cache_file_is_ignored_with_a_warning(folder, cache, merges):
    first = _read(folder)
    f = _files(cache)[0]
    data = bytearray(f.read_bytes())
    data[-100] ^= 0xFF
    f.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match="does not match its digest"):
        with open_results(folder) as st:
            assert len(st.rows(latest=False)) == 5
    assert len(merges) == 2
    assert _read(folder) == first  # the merged copy written again, and read back
    assert len(merges) == 2
    f = _files(cache)[0]
    f.chmod(0o666)
    with pytest.warns(UserWarning, match="others may write it"):
        with open_results(folder):
            pass
    assert len(merges) == 3


def test_a_cache_that_cannot_be_written_is_no_cache_silently(folder, tmp_path, monkeypatch,
                                                            merges):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    monkeypatch.setenv("DLPERF_CACHE_DIR", str(blocker / "cache"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        first = _read(folder)
        assert _read(folder) == first
    assert len(merges) == 2

    import dlperf.outputs

    def refused(*a, **k):
        raise PermissionError(13, "Permission denied", str(a[0]))

    monkeypatch.setenv("DLPERF_CACHE_DIR", str(tmp_path / "ro"))
    monkeypatch.setattr(dlperf.outputs, "atomic_write", refused)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _read(folder) == first
    assert len(merges) == 3 and not list((tmp_path / "ro").glob("*.db"))


_READER = """
import hashlib, json, sys
from dlperf.results.merge import open_results
with open_results(sys.argv[1]) as st:
    rows = st.rows(latest=False)
    out = [(r, st.samples(r["id"])) for r in rows]
print(hashlib.sha256(json.dumps(out, sort_keys=True, default=str).encode()).hexdigest())
"""


def test_concurrent_readers_see_one_content_and_leave_whole_files(folder, cache):
    env = {**os.environ, "DLPERF_CACHE_DIR": str(cache)}
    procs = [subprocess.Popen([sys.executable, "-c", _READER, str(folder)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
    assert len({o for o, _ in outs}) == 1
    left = sorted(cache.iterdir())
    assert left and all(f.name.startswith("results-folder-") for f in left), left
    for f in left:  # no temporary file left, each file whole
        assert hashlib.sha256(f.read_bytes()).hexdigest() == f.name[-67:-3]
    again = subprocess.run([sys.executable, "-c", _READER, str(folder)], env=env,
                           capture_output=True, text=True, timeout=300)
    assert again.stdout == outs[0][0]


def test_unpack_refuses_what_is_not_a_merged_copy(folder, tmp_path):
    with pytest.raises(ValueError, match="not a merged copy"):
        foldercache.unpack(b"not sqlite at all" * 100, 2)
    plain = (folder / "a.db").read_bytes()  # a results file, without the origins
    with pytest.raises(ValueError, match="not a merged copy"):
        foldercache.unpack(plain, 2)
    union = tmp_path / "u.db"
    merge_mod.merge_stores(union, [folder / "a.db", folder / "b.db"], seal_rows=False)
    ok = foldercache.pack(union, {i: 0 for i in range(1, 6)}, [{}, {}])
    db, origin, damaged = foldercache.unpack(ok, 2)
    assert origin == {i: 0 for i in range(1, 6)} and damaged == [{}, {}]
    assert db.execute(f"SELECT count(*) FROM sqlite_master WHERE name='{foldercache.TABLE}'"
                      ).fetchone()[0] == 0
    db.close()
    with pytest.raises(ValueError, match="not a merged copy"):
        foldercache.unpack(ok, 1)  # file index 0 of 1 is fine, but 2 damaged lists
    short = foldercache.pack(union, {i: 0 for i in range(1, 5)}, [{}, {}])
    with pytest.raises(ValueError, match="without an origin"):
        foldercache.unpack(short, 2)
    bad = foldercache.pack(union, {i: 0 for i in range(1, 6)}, [{1: 2}, {}])
    with pytest.raises(ValueError, match="wrong type"):
        foldercache.unpack(bad, 2)


_MODULES = """
import json, sys, warnings
warnings.simplefilter("ignore")
from dlperf.results.merge import open_results
with open_results(sys.argv[1]) as st:
    st.records()
print(json.dumps(sorted((k, getattr(m, "__file__", None)) for k, m in sys.modules.items()
                        if k == "dlperf" or k.startswith("dlperf."))))
"""


def test_the_key_covers_the_code_that_reads_a_folder(folder, cache, tmp_path):
    """Every dlperf module that merging and reading a folder imports is in CODE_SOURCES
    (with a damaged row and a record of an older version among them), so a change to any
    of them is a new key."""
    _sql(folder / "b.db", "UPDATE results SET step_time_median_s='NaN' WHERE id=2")
    got = subprocess.run([sys.executable, "-c", _MODULES, str(folder)], capture_output=True,
                         text=True, timeout=300,
                         env={**os.environ, "DLPERF_CACHE_DIR": str(cache)})
    assert got.returncode == 0, got.stderr
    root = Path(foldercache.__file__).resolve().parents[1]
    covered = set()
    for name in foldercache.CODE_SOURCES:
        p = root / name
        covered |= {f.resolve() for f in (p.glob("*.py") if p.is_dir() else [p])}
    cache_only = {"dlperf.jsoncache"}  # where the copy is kept, not what it holds
    loaded = json.loads(got.stdout)
    assert len(loaded) > 10
    missing = [k for k, f in loaded if k not in cache_only and Path(f).resolve() not in covered]
    assert not missing, missing


def test_reading_a_folder_imports_no_worker_data_layer_or_numpy(folder, cache):
    """``dlperf results`` (its table) imports none of these (0.1-0.4 s each on a loaded
    2-core VM)."""
    code = ("import sys\nfrom dlperf.cli import app\nfrom typer.testing import CliRunner\n"
            f"r = CliRunner().invoke(app, ['results', '--db', {str(folder)!r}])\n"
            "assert r.exit_code == 0, r.output\n"
            "print(sorted(m for m in ('numpy', 'dlperf.worker', 'dlperf.data', 'dlperf.env', "
            "'rich.markdown', 'markdown_it') if m in sys.modules))")
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "DLPERF_CACHE_DIR": str(cache)})
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == "[]"


def test_the_restated_wait_criterion_is_the_pipelines():
    from dlperf.data.pipeline import WAIT_CRITERION
    from dlperf.results import migrations

    assert migrations.WAIT_CRITERION == WAIT_CRITERION
    dw = {"time_share": 0.4, "share": 0.1, "threshold": 0.3}
    assert migrations.restate_data_wait(dw)
    assert dw["criterion"] == WAIT_CRITERION and dw["share"] == 0.4 and dw["input_bound"]


def test_a_merge_gives_each_result_its_own_samples_and_timeline(tmp_path):
    """Samples and timelines are copied by SQL, joined on (file, row id): each merged result
    has those of the row it came from (the target's own, a source's, the first of a result
    held twice), none of a damaged row."""
    from dlperf.results import timelines

    def made(path, batches, base):
        with ResultStore(path) as s:
            for b in batches:
                r = _rec("m", b).to_dict()
                r["samples"] = {"measure": [base + b * 1e-4 + i * 1e-6 for i in range(5)]}
                r["losses"] = {"measure": [float(b)] * 5}
                r["timeline"] = {"format": timelines.FORMAT, "data": f"tl-{base}-{b}"}
                r["created_at"] = f"2026-01-0{1 + b % 5}T00:00:00+00:00"
                s.add(r)
        return path

    dest = made(tmp_path / "dest.db", (1, 2), 0.5)
    a = made(tmp_path / "a.db", (3, 4, 5), 0.1)
    b = made(tmp_path / "b.db", (6, 7), 0.2)
    with ResultStore(a, read_only=True) as s:  # a result held twice: b's copy of a's first
        first = s.rows()[0]
    con = sqlite3.connect(b)
    con.execute(f"ATTACH '{a}' AS a")
    cols = [c for c in first if c != "id"]
    con.execute(f"INSERT INTO results ({', '.join(cols)}) SELECT {', '.join(cols)} "
                "FROM a.results WHERE id=1")
    con.execute("INSERT INTO samples SELECT (SELECT MAX(id) FROM results), phase, idx, "
                "step_time_s + 1, loss FROM a.samples WHERE result_id=1")
    con.commit()
    con.close()
    _sql(b, "UPDATE results SET step_time_median_s='NaN' WHERE id=2")  # damaged: batch 7
    with pytest.warns(DamagedRows):
        done = merge_mod.merge_stores(dest, [a, b])
    assert done["results"] == 6 and done["samples"] == 30
    with ResultStore(dest, read_only=True) as s:
        assert s.damaged() == {}
        got = {r["batch_size"]: (s.samples(r["id"])["measure"], timelines.load(s, r["id"]))
               for r in s.rows(latest=False)}
    base = {1: 0.5, 2: 0.5, 3: 0.1, 4: 0.1, 5: 0.1, 6: 0.2}
    assert sorted(got) == sorted(base)
    for batch, (sm, tl) in got.items():
        assert sm["step_time_s"] == [base[batch] + batch * 1e-4 + i * 1e-6 for i in range(5)]
        assert sm["loss"] == [float(batch)] * 5
        assert tl["data"] == f"tl-{base[batch]}-{batch}"
