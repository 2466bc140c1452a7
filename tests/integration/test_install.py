"""Installed as a new user would, dlperf goes into an environment that already has another torch
version, and that version stays (docs/install.md).

The user's environment is a throwaway venv: its own ``torch`` is a stand-in distribution of
version :data:`USER_TORCH` (inside dlperf's range, not the version of constraints/ci.txt; a
real torch wheel of another version is gigabytes), and the rest of a working stack (numpy,
scipy, pydantic, ...) is this test venv's packages, seen through a ``.pth`` file over a folder
of links that leaves out torch and dlperf. pip installs ``dlperf[torch]`` from a copy of this
checkout with ``--no-index`` (nothing is downloaded; a requirement that the environment does
not meet fails the install instead of being fetched) and ``--no-build-isolation``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.install]

ROOT = Path(__file__).resolve().parents[2]
USER_TORCH = "2.6.0"
#: What the overlay of this venv's packages leaves out: the user's torch is their own, and
#: dlperf is what is installed.
LEFT_OUT = ("torch", "dlperf", "__editable__", "_dlperf", "functorch", "torchgen")


def _fake_torch_wheel(folder: Path, version: str) -> Path:
    """A wheel of a distribution ``torch`` whose module only says its version."""
    whl = folder / f"torch-{version}-py3-none-any.whl"
    info = f"torch-{version}.dist-info"
    files = {
        "torch/__init__.py": f'__version__ = "{version}"\n',
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: dlperf-test\nRoot-Is-Purelib: true\n"
                         "Tag: py3-none-any\n",
    }
    with zipfile.ZipFile(whl, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
        z.writestr(f"{info}/RECORD", "".join(f"{n},,\n" for n in files) + f"{info}/RECORD,,\n")
    return whl


def _overlay(folder: Path) -> Path:
    """Links to this venv's site-packages entries, less :data:`LEFT_OUT`."""
    site = Path(sysconfig.get_paths()["purelib"])
    folder.mkdir()
    for entry in site.iterdir():
        low = entry.name.lower()
        if low.startswith(LEFT_OUT) or low.endswith(".pth"):
            continue
        (folder / entry.name).symlink_to(entry)
    return folder


def _pip(py: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_CONSTRAINT")}
    return subprocess.run([sys.executable, "-m", "pip", "--python", str(py), *args],
                          capture_output=True, text=True, timeout=240, env=env, check=False)


def _version_in(py: Path, dist: str) -> str:
    out = subprocess.run([str(py), "-c", f"import importlib.metadata as m; "
                          f"print(m.version({dist!r}))"], capture_output=True, text=True,
                         env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
                         check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_dlperf_installs_beside_the_users_torch_and_keeps_it(tmp_path):
    venv = tmp_path / "user-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; "
                                "print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "user_stack.pth").write_text(str(_overlay(tmp_path / "stack")) + "\n")
    r = _pip(py, "install", "--no-index", "--isolated",
             str(_fake_torch_wheel(tmp_path, USER_TORCH)))
    assert r.returncode == 0, r.stdout + r.stderr
    assert _version_in(py, "torch") == USER_TORCH
    # dlperf as a user gets it: a copy of the project (its build writes nothing here)
    src = tmp_path / "dlperf-src"
    shutil.copytree(ROOT / "src", src / "src", ignore=shutil.ignore_patterns(
        "__pycache__", "*.egg-info"))
    for f in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / f, src / f)
    r = _pip(py, "install", "--no-index", "--no-build-isolation", f"{src}[torch]")
    log = r.stdout + r.stderr
    assert r.returncode == 0, log
    assert "Successfully installed dlperf" in log, log
    assert _version_in(py, "torch") == USER_TORCH, log
    assert "Uninstalling torch" not in log and "Collecting torch" not in log, log
    # the installed dlperf is the copy's, in the user's venv, and it runs
    out = subprocess.run([str(venv / "bin" / "dlperf"), "--version"], capture_output=True,
                         text=True, env={k: v for k, v in os.environ.items()
                                         if k != "PYTHONPATH"}, check=False, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    where = subprocess.run([str(py), "-c", "import dlperf; print(dlperf.__file__)"],
                           capture_output=True, text=True, check=True,
                           env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert where.stdout.strip().startswith(str(venv)), where.stdout
