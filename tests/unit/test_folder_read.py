"""Reading a folder of results files as one (dlperf.results.merge.open_results) and pairing
its records (dlperf.report.compare._pairs) cost in proportion to the rows: each row is checked
once, in its own file, and the pairs come from the records grouped by point."""

from __future__ import annotations

import itertools
import random

from dlperf.config import make_run_config
from dlperf.results.schema import new_record
from dlperf.results.store import ResultStore
from dlperf.stats import summarize, throughput


def _db(path, batches, framework_modes):
    with ResultStore(path) as s:
        for b, (fw, mode) in itertools.product(batches, framework_modes):
            r = new_record(make_run_config(model="fcn5_tiny", batch_size=b, framework=fw,
                                           mode=mode), "ok").to_dict()
            times = [0.01, 0.012, 0.011, 0.0105]
            r.update(summary=summarize(times).to_dict(),
                     throughput=throughput(len(times), b, sum(times)),
                     samples={"measure": times}, n_measured=len(times), steady_state=True)
            s.add(r)
    return path


def test_a_folder_is_checked_once_per_row(tmp_path, monkeypatch):
    import dlperf.results.store as store_mod
    from dlperf.results.merge import open_results

    _db(tmp_path / "a.db", (1, 2, 3), [("torch", "eager")])
    _db(tmp_path / "b.db", (4, 5), [("torch", "eager"), ("torch", "graph")])
    scanned: list[int] = []
    real = store_mod.scan

    def counting(db, columns, ids=None, since_id=0, records=None):
        scanned.append(db.execute("SELECT COUNT(*) FROM results WHERE id > ?",
                                  (since_id,)).fetchone()[0])
        return real(db, columns, ids, since_id, records=records)

    monkeypatch.setattr(store_mod, "scan", counting)
    with open_results(tmp_path) as st:
        rows = st.rows()
        assert st.damaged() == {}
    assert len(rows) == 7
    assert sum(scanned) == 7, scanned  # the merged copy is not scanned a second time
    sealed = ResultStore(tmp_path / "b.db", read_only=True)
    assert sealed._db.execute("SELECT COUNT(*) FROM row_sums").fetchone()[0] == 4
    sealed.close()


def test_pairs_are_those_of_the_nested_loop():
    from dlperf.report.compare import _pairs
    from dlperf.results.schema import RunRecord
    from dlperf.results.view import is_ok, layout_setting, point_of, repeat_in

    rng = random.Random(7)
    recs = []
    for _ in range(60):
        r = new_record(make_run_config(
            model=rng.choice(["fcn5_tiny", "lstm_tiny"]), batch_size=rng.choice([1, 2, 4]),
            framework="torch", mode=rng.choice(["eager", "graph"])),
            rng.choice(["ok", "ok", "error"])).to_dict()
        recs.append(RunRecord.from_dict(r))

    def match(b, o):
        return b.identity.mode == "eager" and o.identity.mode != "eager"

    ok = [r for r in recs if is_ok(r)]
    want = [(b, o) for b in ok for o in ok
            if b is not o and point_of(b) == point_of(o) and repeat_in(b) == repeat_in(o)
            and layout_setting(b) == layout_setting(o) and match(b, o)]
    got = list(_pairs(recs, match))
    assert want and [(id(b), id(o)) for b, o in got] == [(id(b), id(o)) for b, o in want]

