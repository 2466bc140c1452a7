"""Models from sources through ``dlperf run`` in a subprocess, as a user runs them: a tiny
Hugging Face config, a ``file:`` model named by a relative path, and a model of an installed
package's entry point, with the breakdown and a report (issue 22, "Done when")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from test_sources_custom import NETS, make_plugin  # noqa: E402  (tests/zoo is on sys.path)

from dlperf.results.store import ResultStore, result_of  # noqa: E402

HF = "hf:gpt2?layers=2&hidden=64&heads=2&vocab=512&seq=32"
SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.mark.slow
def test_dlperf_run_with_breakdown_and_report(tmp_path):
    (tmp_path / "nets.py").write_text(NETS)
    site = make_plugin(tmp_path / "site")
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(SRC), str(site),
                                          os.environ.get("PYTHONPATH", "")])}
    models = [HF, "file:nets.py:mlp?width=16", "plugin_mlp"]
    r = subprocess.run(
        [sys.executable, "-m", "dlperf", "run", "--model", ",".join(models), "--device", "cpu",
         "-b", "4", "--threads", "1", "--min-iters", "4", "--min-time", "0",
         "--warmup-window", "2", "--max-warmup-iters", "4", "--breakdown", "--no-ceilings",
         "--db", "r.db", "--report", "rep"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=420)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    with ResultStore(tmp_path / "r.db", read_only=True) as store:
        rows = {row["model"]: row for row in store.rows()}
    # names are stored canonically: options sorted, the file's path absolute
    assert set(rows) == {"hf:gpt2?heads=2&hidden=64&layers=2&seq=32&vocab=512",
                         f"file:{tmp_path / 'nets.py'}:mlp?width=16", "plugin_mlp"}
    for name, row in rows.items():
        assert row["status"] == "ok", (name, row["error"])
        res = result_of(row)
        assert res["breakdown"]["available"], (name, res["breakdown"])
        assert res["spec"]["params"] > 0 and res["spec"]["train_flops_per_sample"] > 0
        assert "FlopCounterMode" in res["flops"]["analytic_source"]
    assert rows["plugin_mlp"]["params"] == 16 * 32 + 32 + 32 * 10 + 10
    report = (tmp_path / "rep" / "report.md").read_text()
    assert "3 result(s): 3 ok." in report and "hf:gpt2?heads=2" in report
