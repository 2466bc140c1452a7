"""What a ``dlperf predict`` process loads: the step-level model and the files beside the data,
not the other commands, the back-test, the report, a framework or the results store (a guard of
its start-up time that does not depend on the machine's speed or load: each module named here
cost 10-500 ms of a first prediction on a 2-core VM)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
H200 = ["--db", "benchmarks/results/h200", "--db", "benchmarks/results/h200x2"]
#: Modules no prediction of a batch size not stored on the committed H200 files loads: its
#: fits' solutions are stored with the residual table, so not even the solver's scipy.
NEVER = ("dlperf.validation", "dlperf.validation.backtest", "dlperf.report",
         "dlperf.cli.run", "dlperf.cli.sweep", "dlperf.cli.report", "dlperf.cli.compare",
         "dlperf.results.store", "dlperf.results.parts", "scipy", "plotly", "matplotlib", "torch", "jax", "tensorflow")


def _modules(tmp_path: Path, args: list[str]) -> tuple[set[str], str]:
    """The modules loaded by ``dlperf ARGS`` run as the console script runs it
    (:func:`dlperf.cli.main`) in a new process with an empty cache, and its output."""
    out = tmp_path / "modules.txt"
    code = ("import atexit, sys\n"
            f"atexit.register(lambda: open({str(out)!r}, 'w').write('\\n'.join(sys.modules)))\n"
            "from dlperf.cli import main\n"
            f"main({args!r})\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"),
           "DLPERF_CACHE_DIR": str(tmp_path / "cache")}
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return set(out.read_text().split("\n")), r.stdout


@pytest.mark.parametrize("extra, allowed", [
    (["--model", "resnet50", "--framework", "torch", "--mode", "eager", "--precision", "bf16",
      "--data", "synthetic", "--layout", "auto", "-b", "96"], ()),
    # --explain reads what the prediction computed: no solver, no back-test
    (["--model", "resnet50", "--framework", "torch", "--mode", "eager", "--precision", "bf16",
      "--data", "synthetic", "--layout", "auto", "-b", "96", "--explain"], ()),
    (["--model", "transformer", "--framework", "jax", "--precision", "fp32", "-b", "32"], ()),
    # a first what-if reads its pairs' group fits and host lines from the table: no solver
    (["--model", "resnet50", "--framework", "torch", "--mode", "eager", "--precision", "bf16",
      "--data", "synthetic", "--layout", "auto", "-b", "96", "--what-if", "framework=jax"], ()),
    (["--model", "resnet50", "--framework", "torch", "--mode", "eager", "--precision", "fp32",
      "--data", "synthetic", "--layout", "auto", "-b", "96", "--what-if", "precision=bf16",
      "--what-if", "mode=graph"], ()),
    (["--model", "lstm", "--framework", "jax", "--precision", "bf16", "-b", "64",
      "--what-if", "framework=torch"], ()),
    # N devices: the scaling efficiency is perfmodel/scaling.py's, which reads result views
    (["--model", "resnet50", "--framework", "torch", "--mode", "eager", "--precision", "bf16",
      "--data", "synthetic", "--layout", "auto", "-b", "192", "--nproc", "2"],
     ("dlperf.results.parts",)),
])
def test_a_prediction_loads_the_model_and_nothing_else(tmp_path, extra, allowed):
    mods, out = _modules(tmp_path, ["predict", *H200, *extra])
    assert "ms per iteration [" in out  # an interval: the committed table was read
    assert "dlperf.perfmodel.api" in mods and "dlperf.cli.predict" in mods
    never = [n for n in NEVER if n not in allowed]
    assert not {m for m in mods if any(m == n or m.startswith(n + ".") for n in never)}


@pytest.mark.parametrize("args", [["predict", "--help"], ["predict", "--bogus"],
                                  ["data", "--help"], ["compare", "--help"]])
def test_one_command_builds_an_app_of_that_command_alone(args):
    """``dlperf CMD ...`` builds an app of ``CMD`` alone; what it prints is the whole app's."""
    from typer.main import get_command
    from typer.testing import CliRunner

    from dlperf.cli import COMMANDS, app, build_app

    one = build_app(args[0])
    assert list(get_command(one).commands) == [args[0]]  # type: ignore[attr-defined]
    assert set(get_command(app).commands) == set(COMMANDS)  # type: ignore[attr-defined]
    runner = CliRunner()
    a, b = runner.invoke(one, args, prog_name="dlperf"), runner.invoke(app, args,
                                                                       prog_name="dlperf")
    assert (a.exit_code, a.output) == (b.exit_code, b.output)
    assert a.output.strip()
