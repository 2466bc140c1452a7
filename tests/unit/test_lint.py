"""The linter (ruff) and the type checker (mypy) pass, as configured in pyproject.toml.

Both run as subprocesses from the repository root, so they read ``[tool.ruff]`` and
``[tool.mypy]`` there (rules, ignores with their reasons, the files mypy checks); a failure shows
the tool's own report. Each is skipped only when its package is missing (both come with the
``test`` extra: ``pip install -e .[test]``).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: What ruff lints: the package, its tests and the benchmark scripts.
RUFF_PATHS = ("src", "tests", "benchmarks")


def _run_tool(module: str, *args: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """Run ``python -m <module> <args>`` in the repository root (skip if not installed)."""
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (it is in the test extra: pip install -e .[test])")
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout_s, check=False)


def _report(proc: subprocess.CompletedProcess[str]) -> str:
    return f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"


def test_ruff_clean():
    """``ruff check`` over src, tests and benchmarks finds nothing (rules in pyproject.toml)."""
    proc = _run_tool("ruff", "check", "--no-fix", "--output-format", "concise", *RUFF_PATHS,
                     timeout_s=120)
    assert proc.returncode == 0, _report(proc)


def test_mypy_clean():
    """``mypy`` on the files listed in pyproject.toml (all of src/dlperf but frameworks/ and
    the zoo's ``*_impl.py`` model code) reports no error."""
    proc = _run_tool("mypy", timeout_s=480)
    assert proc.returncode == 0, _report(proc)
    assert "Success: no issues found" in proc.stdout, _report(proc)
