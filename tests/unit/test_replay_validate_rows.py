"""The committed replay back-test rows (benchmarks/results/replay_validate_rows.json, the
default run of benchmarks/replay_validate.py) were made by the current replay source from the
current results files: checked by the key the script stores beside them, without running the
back-test (minutes on 2 cores)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import replay_validate as rv  # noqa: E402

#: The default run's options (replay_validate.main without arguments).
DEFAULT = dict(cats=("own", "batch", "precision", "dp"), sides=("dev", "test"),
               with_baseline=True)


def _default_key() -> str:
    return rv.inputs_key([str(rv.ROOT / "benchmarks/results/h200/calibration2.db")],
                         rv.default_ceilings(), str(rv.DP_DB), **DEFAULT)


def test_committed_replay_rows_are_current():
    committed = json.loads(rv.ROWS_FILE.read_text())
    assert isinstance(committed, dict) and committed.get("rows"), "no rows committed"
    assert committed.get("inputs_key") == _default_key(), (
        "stale benchmarks/results/replay_validate_rows.json: run DLPERF_CACHE_DIR=$(mktemp -d) "
        "PYTHONPATH=src python benchmarks/replay_validate.py --json "
        "benchmarks/results/replay_validate_rows.json and commit it")
    cats = {r["category"] for r in committed["rows"]}
    assert {"own trace", "batch, interpolated", rv.DP_CATEGORY} <= cats
    assert {r["side"] for r in committed["rows"]} == {"dev", "test"}


def test_the_key_follows_the_options_the_data_and_the_source(tmp_path, monkeypatch):
    """Each input of the rows changes the key: an option, a results file's bytes, the source
    of a replay module."""
    db = tmp_path / "a.db"
    shutil.copy(rv.DP_DB, db)
    args = ([str(db)], [], None)
    key = rv.inputs_key(*args, **DEFAULT)
    assert key == rv.inputs_key(*args, **DEFAULT)
    assert key != rv.inputs_key(*args, **{**DEFAULT, "with_baseline": False})
    assert key != rv.inputs_key(*args, **{**DEFAULT, "sides": ("dev",)})
    with db.open("ab") as f:
        f.write(b"\0")
    assert key != rv.inputs_key(*args, **DEFAULT)
    # the source: a copy of the checkout's sources, then one comment added to a transform
    from dlperf.perfmodel import fitcache

    root = tmp_path / "root"
    pkg = root / "src/dlperf/perfmodel"
    shutil.copytree(Path(fitcache.__file__).parent, pkg)
    shutil.copytree(rv.ROOT / "src/dlperf/results", root / "src/dlperf/results")
    shutil.copytree(rv.ROOT / "src/dlperf/validation", root / "src/dlperf/validation")
    for f in ("benchmarks/replay_validate.py", "benchmarks/results/split.json"):
        (root / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(rv.ROOT / f, root / f)
    monkeypatch.setattr(rv, "ROOT", root)
    monkeypatch.setattr(rv, "SPLIT_FILE", root / "benchmarks/results/split.json")
    monkeypatch.setattr(rv, "__file__", str(root / "benchmarks/replay_validate.py"))
    monkeypatch.setattr(fitcache, "__file__", str(pkg / "fitcache.py"))
    key = rv.inputs_key(*args, **DEFAULT)
    moved = pkg / "transforms" / "precision.py"
    moved.write_text(moved.read_text() + "# edit\n")
    assert key != rv.inputs_key(*args, **DEFAULT)
    key = rv.inputs_key(*args, **DEFAULT)
    (pkg / "roofline.py").write_text((pkg / "roofline.py").read_text() + "# edit\n")
    assert key != rv.inputs_key(*args, **DEFAULT)  # the baseline's (api imports roofline)
    key = rv.inputs_key(*args, **DEFAULT)
    val = root / "src/dlperf/validation"
    (val / "__init__.py").write_text((val / "__init__.py").read_text() + "# edit\n")
    assert key == rv.inputs_key(*args, **DEFAULT)  # no row passes through the back-test's
    (val / "bucketcheck.py").write_text((val / "bucketcheck.py").read_text() + "# edit\n")
    assert key != rv.inputs_key(*args, **DEFAULT)  # the dp rows read the bucket records
