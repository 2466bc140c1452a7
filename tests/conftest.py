"""Shared pytest fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

#: stash key: test-file basename -> path (pytest_collect_file below)
_BASENAMES = pytest.StashKey[dict]()

# The real data sets live next to the project, at ../shared/data (see its README.md), or where
# $DLPERF_DATA points when it is set.
SHARED_DATA = (Path(os.environ["DLPERF_DATA"]) if os.environ.get("DLPERF_DATA")
               else Path(__file__).resolve().parents[1].parent / "shared" / "data")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The folder of real data sets (``../shared/data``); skips the test if it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data sets not found at {SHARED_DATA} (expected ../shared/data next "
                    f"to the project, or DLPERF_DATA set; see its README.md)")
    return SHARED_DATA


@pytest.fixture
def data_env(shared_data: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Set ``DLPERF_DATA`` to the shared data folder for one test; returns that folder."""
    monkeypatch.setenv("DLPERF_DATA", str(shared_data))
    return shared_data


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the GPU smoke suite (``tests/gpu/test_gpu_smoke.py``, opt-in with ``-m gpu``) before the
    other tests: its JAX runs are worker processes that pre-allocate 95% of the GPU, which
    finds no room once an older GPU test has started JAX inside the pytest process (its pool
    stays there). The order is otherwise unchanged; without ``-m gpu`` those tests are
    deselected anyway."""
    items.sort(key=lambda item: Path(str(item.fspath)).name != "test_gpu_smoke.py")


def pytest_collect_file(file_path, parent):  # noqa: D103 - a guard, not a hook that collects
    # Test folders have no __init__.py (pytest's "prepend" import mode), so two test files with
    # one basename in two folders collide at import time; refuse that at collection, with why.
    if file_path.name.startswith("test_") and file_path.suffix == ".py":
        seen = parent.config.stash.setdefault(_BASENAMES, {})
        other = seen.setdefault(file_path.name, file_path)
        if other != file_path:
            raise pytest.UsageError(f"two test files named {file_path.name}: {other} and "
                                    f"{file_path}; give one a unique basename")
    return None
