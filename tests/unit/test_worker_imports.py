"""What ``python -m dlperf.worker`` loads before it runs a configuration: the worker starts once
per measured point, so a module it imports on every start that only some runs use (the data
package for a failed run or a data loader's waits, the ranks' merge for a data-parallel run, the
dispatch probe for a GPU run) costs CPU time at every point (a guard that does not depend on the
machine's speed or load)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Modules ``import dlperf.worker`` leaves to the runs that use them.
DEFERRED = ("dlperf.data", "dlperf.measure.ranks", "dlperf.measure.dispatch",
            "dlperf.measure.breakdown")


def _modules_after(code: str) -> set[str]:
    """``sys.modules`` of a new interpreter after ``code`` (this checkout's ``src``)."""
    r = subprocess.run([sys.executable, "-c", f"{code}\nimport sys\nprint('\\n'.join(sys.modules))"],
                       env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return set(r.stdout.split())


def test_the_worker_leaves_the_data_package_and_the_rank_merge_to_their_runs():
    mods = _modules_after("import dlperf.worker")
    assert "dlperf.worker" in mods and "dlperf.measure.segment" in mods
    loaded = {m for m in mods if any(m == n or m.startswith(n + ".") for n in DEFERRED)}
    assert not loaded, f"import dlperf.worker loads {sorted(loaded)}"


def test_the_deferred_modules_still_load_where_used():
    """The functions that use them import them: a failed run's status, a data-parallel merge."""
    mods = _modules_after("from dlperf.worker import failure_status\n"
                          "failure_status(RuntimeError('x'), lambda e: False)\n"
                          "from dlperf.measure.probes import dispatch_into")
    assert "dlperf.data.pipeline" in mods
