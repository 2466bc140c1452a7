"""Shared pytest fixtures."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest

#: stash key: test-file basename -> path (pytest_collect_file below)
_BASENAMES = pytest.StashKey[dict]()

# The real data sets live next to the project, at ../shared/data (see its README.md), or where
# $DLPERF_DATA points when it is set.
SHARED_DATA = (Path(os.environ["DLPERF_DATA"]) if os.environ.get("DLPERF_DATA")
               else Path(__file__).resolve().parents[1].parent / "shared" / "data")


#: XLA's LLVM back end at its lowest optimisation level, for the JAX and TensorFlow-XLA
#: compilations of a CPU test run (this process and every process it starts, through
#: ``$XLA_FLAGS``): what is compiled, and dlperf's records of it, are the same; the compile
#: takes less CPU (measured on the 2-core VM: TensorFlow's XLA step of lstm_tiny 14.7 -> 10.6
#: CPU-s, tests/frameworks/jax/test_jax.py 78 -> 71 CPU-s) and the compiled code runs a little
#: slower, which no test's assertion is about.
XLA_TEST_FLAGS = "--xla_backend_optimization_level=0"


def _gpu_selected(config: pytest.Config) -> bool:
    """Whether this run may select ``gpu`` tests (``-m gpu``, or no ``-m`` that excludes them):
    their timings run on the XLA a user gets, without :data:`XLA_TEST_FLAGS`."""
    expr = " ".join((config.getoption("markexpr", "") or "").split())
    return "not gpu" not in expr


def pytest_configure(config: pytest.Config) -> None:
    """Make ``$PYTHONPATH`` absolute (``PYTHONPATH=src pytest``, as the developers run it), so
    that a subprocess started in another folder (``cwd=tmp_path``) imports this checkout's
    source, not whatever ``dlperf`` is installed. Add :data:`XLA_TEST_FLAGS` to ``$XLA_FLAGS``
    unless ``gpu`` tests may run or it is set already (before any test module imports JAX or
    TensorFlow)."""
    pp = os.environ.get("PYTHONPATH")
    if pp:
        os.environ["PYTHONPATH"] = os.pathsep.join(str(Path(p).resolve()) if p else p
                                                   for p in pp.split(os.pathsep))
    flags = os.environ.get("XLA_FLAGS", "")
    if not _gpu_selected(config) and "xla_backend_optimization_level" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {XLA_TEST_FLAGS}".strip()


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


#: Where a test run keeps dlperf's on-disk caches (``$DLPERF_CACHE_DIR``,
#: :func:`dlperf.jsoncache.cache_root`): a folder of the run's own, never the user's
#: ``~/.cache/dlperf``.
TEST_CACHE_NAME = "dlperf-cache"


def cache_dir_of_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run's cache folder: :data:`TEST_CACHE_NAME` in the folder of the run's temporary
    files, the one that the pytest-xdist workers' temporary folders share
    (``getbasetemp().parent`` in a worker; ``getbasetemp()`` without xdist), so the
    performance model's fits and residuals that one worker computes and stores, another
    reads back instead of computing them again within one run."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / TEST_CACHE_NAME


@pytest.fixture(scope="session", autouse=True)
def _run_cache_dir(tmp_path_factory: pytest.TempPathFactory):
    """Point ``$DLPERF_CACHE_DIR`` at :func:`cache_dir_of_run` for the whole session, in
    ``os.environ`` (so the processes a test starts inherit it), and restore it after: tests
    neither write into the user's ``~/.cache/dlperf`` nor read what a user's or an earlier
    run's dlperf left there. A test that sets ``DLPERF_CACHE_DIR`` itself (``monkeypatch``)
    sets it on top of this one and gets this one back."""
    folder = cache_dir_of_run(tmp_path_factory)
    folder.mkdir(exist_ok=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DLPERF_CACHE_DIR", str(folder))
        yield folder


@pytest.fixture(scope="session", autouse=True)
def _no_worker_terminal_size():
    """Unset ``$COLUMNS`` and ``$LINES`` for the session (restored after): a pytest-xdist
    worker sets them to 80 and 24, so every process a test starts would see an 80-column
    terminal that a user's pipe or log does not have (dlperf wraps its error messages at
    ``$COLUMNS``). A test of a width sets ``COLUMNS`` itself."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("COLUMNS", raising=False)
        mp.delenv("LINES", raising=False)
        yield


@pytest.fixture(autouse=True)
def _young_heap(request: pytest.FixtureRequest):
    """Keep the objects alive before each test (the imported frameworks, cached models: some
    560,000 objects once PyTorch, JAX and TensorFlow are in this process) out of the garbage
    collector's full collections for the test's duration (``gc.freeze``), and hand them back
    after it (``gc.unfreeze``; both O(1)).

    Why: every in-process measurement starts with a full collection
    (:func:`dlperf.measure.loop.frozen_heap`), which walked that whole heap: 0.3-0.9 s per
    ``run_config`` or ``measure`` call on 2 cores, over a hundred calls in the suite. Frozen,
    it walks only the test's own objects; a worker process (a few hundred thousand objects of
    its own, as a user's) is not affected. Between tests nothing is frozen, so the collector
    reclaims garbage as usual. Tests marked ``gc_state`` (they check the collector's freeze
    state themselves) run without it."""
    if request.node.get_closest_marker("gc_state") is not None:
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the GPU smoke suite (``tests/gpu/test_gpu_smoke.py``, opt-in with ``-m gpu``) before the
    other tests: its JAX runs are worker processes that pre-allocate 95% of the GPU, which
    finds no room once an older GPU test has started JAX inside the pytest process (its pool
    stays there). The order is otherwise unchanged; without ``-m gpu`` those tests are
    deselected anyway."""
    items.sort(key=lambda item: Path(str(item.fspath)).name != "test_gpu_smoke.py")


#: Test files that share an expensive session fixture, run by one xdist worker as one unit of
#: ``--dist loadfile`` (scripts/test.sh): a session fixture is built once per worker that uses
#: it, so files spread over two workers built it twice. Both of these ask for
#: ``h200_validation`` (tests/unit/conftest.py: the full back-test of the committed H200 files,
#: 30-40 s on 2 cores), and the predictions on those files take their intervals from it.
SAME_WORKER = {
    "tests/unit/test_perfmodel_validate.py": "h200_validation",
    "tests/unit/test_perfmodel_predict_requests.py": "h200_validation",
}


#: The test files that take longest, longest first (wall seconds in one xdist worker on the
#: 2-core VM, beside the other worker): ``--dist loadfile`` hands these out first, then the
#: other files in xdist's order (most tests first). xdist's order alone leaves the files of a
#: few long tests (test_reliability.py: 2 tests, about a minute) to the end of the run, where
#: one worker runs them while the other has nothing left: the longest-first order ends the run
#: on short files. A file missing here only runs later; tests/unit/test_suite_layout.py checks
#: that each one named exists.
LONG_FIRST = (
    "tests/integration/test_distributed.py",
    "tests/zoo/test_sources_custom_tf.py",
    "tests/integration/test_reliability.py",
    "tests/frameworks/jax/test_jax.py",
    "tests/integration/test_compare_cli.py",
    "tests/frameworks/tensorflow/test_tensorflow.py",
    "tests/frameworks/tensorflow/test_tensorflow_more.py",
    "tests/frameworks/jax/test_grain_pipeline.py",
    "tests/integration/test_outside_launch.py",
    "tests/integration/test_pipeline_frameworks.py",
    "tests/integration/test_mainjob.py",
    "tests/frameworks/tensorflow/test_plain_tf_loop.py",
    "tests/frameworks/tensorflow/test_tf_multiworker.py",
    "tests/frameworks/jax/test_jax_more.py",
    "tests/integration/test_cli.py",
    "tests/integration/test_breakdown_frameworks.py",
    "tests/frameworks/jax/test_plain_jax_loop.py",
    "tests/zoo/test_sources_cli.py",
)


def long_first(units: list[str]) -> list[str]:
    """``units`` (xdist's work units: test files, or a :data:`SAME_WORKER` fixture's name) with
    those of :data:`LONG_FIRST` first, in its order; the others keep their order after them."""
    rank = {u: k for k, u in enumerate(LONG_FIRST)}
    return sorted(units, key=lambda u: rank.get(u, len(rank)))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` with the files of :data:`SAME_WORKER` in one unit each, handed out
    longest first (:func:`long_first`); None (xdist's own scheduler) for any other ``--dist``."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class _LoadFileSharing(LoadFileScheduling):
        _ordered = False

        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return SAME_WORKER.get(path, path)

        def _assign_work_unit(self, node) -> None:
            # the work queue is complete when the first unit is handed out (xdist's schedule())
            if not self._ordered:
                self._ordered = True
                for unit in long_first(list(self.workqueue)):
                    self.workqueue.move_to_end(unit)
            super()._assign_work_unit(node)

    return _LoadFileSharing(config, log)


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
