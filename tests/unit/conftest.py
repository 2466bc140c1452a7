"""Fixtures shared by the unit tests."""

from __future__ import annotations

from pathlib import Path

import pytest

#: The committed H200 results: one-GPU points (h200) and two-GPU points (h200x2).
H200_DIRS = [Path(__file__).resolve().parents[2] / "benchmarks/results" / d
             for d in ("h200", "h200x2")]


@pytest.fixture(scope="session")
def h200_validation():
    """:func:`dlperf.validation.validate` of every category on :data:`H200_DIRS`,
    run once per session (20-40 s on 2 cores). test_perfmodel_validate asserts its summary;
    a full validation also keeps its residuals in this process (``intervalchoice._TABLES``), so the
    predictions on the same files in test_perfmodel_validate and
    test_perfmodel_predict_requests take their intervals from it instead of running the same
    back-test categories again (they did: 50 s of the suite)."""
    from dlperf import validation

    return validation.validate(H200_DIRS)


@pytest.fixture(scope="module")
def module_fit_cache(tmp_path_factory):
    """``DLPERF_CACHE_DIR`` set to a folder of the test module's own, empty when the module
    starts, for the whole module: its predictions fit (or read from the committed tables)
    what they need, whatever another module left in the session's cache. Used by the
    prediction test modules as ``pytestmark = pytest.mark.usefixtures("module_fit_cache")``."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DLPERF_CACHE_DIR", str(tmp_path_factory.mktemp("fits")))
        yield
