"""A test run keeps dlperf's on-disk caches in a folder of its own (tests/conftest.py,
``_run_cache_dir``), never in the user's ``~/.cache/dlperf``: in this process and in the
processes a test starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from dlperf.jsoncache import CACHE_DIR_ENV, cache_root


def _inside(path: Path, folder: Path) -> bool:
    return path.resolve().is_relative_to(folder.resolve())


def test_the_cache_folder_is_the_runs_own(_run_cache_dir, tmp_path_factory):
    """``$DLPERF_CACHE_DIR`` names the run's folder, inside pytest's temporary folders (the
    one the xdist workers share), and the cache root resolves there, not under the home
    folder's cache."""
    temp = tmp_path_factory.getbasetemp().parent
    assert os.environ[CACHE_DIR_ENV] == str(_run_cache_dir)
    assert _run_cache_dir.is_dir()
    assert _inside(_run_cache_dir, temp), (_run_cache_dir, temp)
    assert cache_root().resolve() == _run_cache_dir.resolve()
    assert not _inside(cache_root(), Path.home() / ".cache")


def test_a_started_process_caches_in_the_runs_folder(_run_cache_dir):
    """A process a test starts (the CLI, a worker) inherits the run's cache folder."""
    out = subprocess.run([sys.executable, "-c",
                          "from dlperf.jsoncache import cache_root; print(cache_root())"],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    assert Path(out.strip()).resolve() == _run_cache_dir.resolve()


def test_a_tests_own_folder_is_set_on_top_and_undone(_run_cache_dir, tmp_path, monkeypatch):
    """A test that points ``$DLPERF_CACHE_DIR`` elsewhere (``monkeypatch``) gets that folder,
    and the run's afterwards."""
    with monkeypatch.context() as mp:
        mp.setenv(CACHE_DIR_ENV, str(tmp_path / "mine"))
        assert cache_root() == tmp_path / "mine"
    assert cache_root() == _run_cache_dir
