"""The report's PNGs drawn by worker processes (dlperf.report.drawing): the same bytes as
drawn in place, drawn while the caller goes on, every one written (or its error raised) when
the context closes, and no process left behind."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from test_report import _row
from test_threads import _row as _thread_row

from dlperf.report import drawing
from dlperf.report.drawing import draw, drawing_aside
from dlperf.report.plots import plot_step_time_vs_batch
from dlperf.report.predicted import plot_predicted
from dlperf.report.threads import plot_thread_scaling, thread_scaling
from dlperf.results.view import as_records


def _write(path: Path, text: str) -> None:
    """A figure: ``text`` and the drawing process's id, into ``path``."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"{text} {os.getpid()}")
    tmp.replace(path)  # seen whole or not at all


def _fail(path: Path) -> None:
    raise ValueError(f"cannot draw {path.name}")


def _all_children() -> set[int]:
    """The ids of this process's child processes (Linux /proc)."""
    return {int(c) for f in Path("/proc/self/task").glob("*/children")
            for c in f.read_text().split()}


#: The children this process had when the running test began: started by other tests of the
#: same pytest process, which outlive them (multiprocessing's resource tracker, once a test has
#: started processes with ``spawn``, e.g. tests/frameworks/jax/test_grain_pipeline.py).
_OTHERS: set[int] = set()


@pytest.fixture(autouse=True)
def _children_of_other_tests():
    """Record :data:`_OTHERS` before each test."""
    _OTHERS.clear()
    _OTHERS.update(_all_children())


def _children() -> set[int]:
    """The ids of this process's child processes that were not there when the test began."""
    return _all_children() - _OTHERS


class _Point:
    def __init__(self, category: str, measured_s: float, predicted_s: float) -> None:
        self.category, self.measured_s, self.predicted_s = category, measured_s, predicted_s


def _pngs(out: Path) -> list[Path]:
    rows = [_row(model=m, batch=b, median_s=0.01 * b ** 0.8, framework=fw)
            for m in ("resnet50", "lstm") for b in (8, 16, 32) for fw in ("torch", "jax")]
    rows.append(_row(model="lstm", batch=64, status="oom"))
    paths = plot_step_time_vs_batch(as_records(rows), out)
    thr = [_thread_row(i, n, 40.0 / n ** 0.7) for i, n in enumerate((1, 2, 4), 1)]
    paths += plot_thread_scaling(thread_scaling(as_records(thr)), out)
    cat = "held-out batch"
    paths.append(plot_predicted([_Point(cat, 0.010, 0.011), _Point(cat, 0.020, 0.018)], out))
    return paths


def test_figures_drawn_aside_are_the_same_bytes(tmp_path):
    here = _pngs(tmp_path / "here")
    with drawing_aside(workers=1):
        aside = _pngs(tmp_path / "aside")
        assert [p.name for p in aside] == [p.name for p in here]
    assert len(here) == 4  # 2 models x batch, 1 model x threads, predicted
    for a, b in zip(here, aside, strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name


def test_a_worker_draws_while_the_caller_goes_on(tmp_path):
    f = tmp_path / "a.txt"
    assert not _children()
    with drawing_aside(workers=1):
        args = ["as handed"]
        draw(_write, f, args[0])
        args[0] = "changed later"
        deadline = time.monotonic() + 120
        while not f.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        text, pid = f.read_text().rsplit(" ", 1)
        assert text == "as handed" and int(pid) != os.getpid()  # another process, meanwhile
    assert not _children()  # the workers are gone with the context


def test_every_figure_is_written_when_the_context_closes(tmp_path):
    files = [tmp_path / f"{i}.txt" for i in range(12)]
    with drawing_aside(workers=1):
        for i, f in enumerate(files):
            draw(_write, f, str(i))
    assert [f.read_text().split()[0] for f in files] == [str(i) for i in range(12)]
    assert not _children()


def test_errors_are_raised_after_the_other_figures(tmp_path):
    with pytest.raises(ValueError, match="cannot draw first"):
        with drawing_aside(workers=1):
            draw(_fail, tmp_path / "first")
            draw(_write, tmp_path / "ok.txt", "fine")
            draw(_fail, tmp_path / "second")
    assert (tmp_path / "ok.txt").read_text().startswith("fine")
    assert not _children()
    with pytest.raises(ValueError, match="cannot draw here"):  # outside: at once
        draw(_fail, tmp_path / "here")


def test_the_body_s_error_goes_on_and_leaves_no_process(tmp_path):
    with pytest.raises(KeyError):
        with drawing_aside(workers=1):
            draw(_write, tmp_path / "x.txt", "x")
            raise KeyError("body")
    assert not _children()
    assert drawing._ASIDE is None


def test_a_worker_that_dies_has_its_figures_drawn_here(tmp_path):
    with drawing_aside(workers=1):
        draw(_write, tmp_path / "0.txt", "first")
        deadline = time.monotonic() + 120
        while not (tmp_path / "0.txt").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid in _children():
            os.kill(pid, 9)
        draw(_write, tmp_path / "1.txt", "second")
    assert (tmp_path / "1.txt").read_text() == f"second {os.getpid()}"
    assert not _children()


def test_what_does_not_pickle_or_no_spare_cpu_is_drawn_at_once(tmp_path, monkeypatch):
    f = tmp_path / "lambda.txt"
    with drawing_aside(workers=1):
        draw(lambda p: p.write_text("here"), f)  # a lambda does not pickle
        assert f.read_text() == "here"
    monkeypatch.setattr(drawing, "spare_cpus", lambda: 0)
    with drawing_aside():
        draw(_write, tmp_path / "one.txt", "one")
        assert (tmp_path / "one.txt").read_text() == f"one {os.getpid()}"


def test_the_report_modules_import_no_matplotlib():
    """matplotlib is imported by the process that draws (a worker, or the report's own
    process for a figure drawn in place), not by the report's modules."""
    import subprocess
    import sys

    mods = ("dlperf.cli", "dlperf.report.sections", "dlperf.report.markdown",
            "dlperf.report.html", "dlperf.report.plots", "dlperf.report.threads",
            "dlperf.report.scaling", "dlperf.report.convergence", "dlperf.report.predicted")
    code = (f"import sys; import {', '.join(mods)}; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.stdout.strip() == "[]", out.stdout


def test_prestart_starts_a_worker_before_any_figure_and_ends_it(tmp_path):
    assert not _children()
    with drawing_aside(workers=1, prestart=True):
        deadline = time.monotonic() + 60
        while not _children() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(_children()) == 1  # up before any figure
    assert not _children()  # no figure came: ended all the same
    with drawing_aside(workers=1):
        time.sleep(0.2)
        assert not _children()  # without prestart: none until a figure comes


@pytest.mark.parametrize(("cpus", "load", "spare"), [
    (2, 0.2, 1), (2, 1.0, 0), (2, 9.0, 0), (8, 0.0, 7), (8, 3.4, 4), (1, 0.0, 0)])
def test_spare_cpus_are_the_idle_ones_less_this_process(monkeypatch, cpus, load, spare):
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(cpus)))
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    assert drawing.spare_cpus() == spare


def test_no_load_average_counts_every_cpu(monkeypatch):
    def no_load():
        raise OSError("no load average here")

    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1, 2})
    monkeypatch.setattr(os, "getloadavg", no_load)
    assert drawing.spare_cpus() == 2
