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


def test_dlperf_run_leaves_the_worker_to_its_process(tmp_path):
    """``dlperf run`` measures each point in ``python -m dlperf.worker``: the command's own
    process does not import the worker and the measurement modules it alone uses."""
    out = tmp_path / "modules.txt"
    code = ("import atexit, sys\n"
            f"atexit.register(lambda: open({str(out)!r}, 'w').write('\\n'.join(sys.modules)))\n"
            "from dlperf.cli import main\n"
            "main(['run', '--framework', 'fake', '--model', 'fcn5_tiny', '--batch-size', '8', "
            "'--device', 'cpu', '--min-iters', '6', '--min-time', '0', '--no-ceilings', "
            f"'--db', {str(tmp_path / 'r.db')!r}])\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT / "src"),
                            "DLPERF_FAKE_FRAMEWORK": "1"}, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "1 run, 0 already in" in r.stderr  # the point was measured (in its own process)
    mods = set(out.read_text().split("\n"))
    assert "dlperf.sweep" in mods
    assert not {"dlperf.worker", "dlperf.measure.segment", "dlperf.measure.probes"} & mods


def test_importing_the_worker_builds_no_pydantic_model():
    """The config's axes and the record's parts are built when first validated (pydantic's
    ``defer_build``): importing the worker builds none of them (each costs ~1 ms to build)."""
    code = ("import sys, pydantic, dlperf.worker\n"
            "def walk(c):\n"
            "    for s in c.__subclasses__():\n"
            "        yield s\n"
            "        yield from walk(s)\n"
            "print(sorted({c.__qualname__ for c in walk(pydantic.BaseModel)\n"
            "              if c.__module__.startswith('dlperf.') and c.__pydantic_complete__}))\n"
            "from dlperf.results.schema import RunRecord\n"
            "print(RunRecord.model_validate({'identity': {'model': 'm'}}).identity.model)\n")
    r = subprocess.run([sys.executable, "-c", code], env={**os.environ,
                       "PYTHONPATH": str(ROOT / "src")}, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    built, model = r.stdout.split("\n")[:2]
    assert built == "[]"
    assert model == "m"  # and a record validates when first asked to
