"""``file:`` models that exit or hang (the fresh-user trial's item 8): a file whose import
raises ``SystemExit`` (or another ``BaseException``) is a clear error naming the file, not a
silent exit with its status; under ``dlperf run``/``sweep`` the spec is made in a child process
that ``--timeout`` (a sweep file's ``defaults.timeout_s``) stops."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from test_sources_custom import NETS  # noqa: E402  (tests/zoo is on sys.path)

import dlperf.zoo as zoo  # noqa: E402
from dlperf.errors import ConfigError  # noqa: E402
from dlperf.zoo.sources.custom import isolated  # noqa: E402

SRC = Path(__file__).resolve().parents[2] / "src"


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def dlperf(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "400",
           "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "dlperf", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("body, raised", [
    ("raise SystemExit(3)", "SystemExit(3)"),
    ("import sys\nsys.exit('bye')", "SystemExit('bye')"),
    ("class Stop(BaseException):\n    pass\nraise Stop('x')", "Stop('x')"),
    ("raise RuntimeError('boom')", "RuntimeError: boom"),
])
def test_a_file_that_raises_at_import_is_an_error_naming_it(tmp_path, body, raised):
    f = write(tmp_path, "bad.py", body + "\n")
    with pytest.raises(ConfigError) as e:
        zoo.get_spec(f"file:{f}:build")
    msg = str(e.value)
    assert f"importing {f} raised {raised}" in msg and "fix the file" in msg, msg
    assert not any(m.startswith("dlperf_file_model_") and getattr(sys.modules[m], "__file__",
                                                                   None) == str(f)
                   for m in list(sys.modules))  # the half-run module is not left behind


def test_keyboard_interrupt_at_import_is_not_swallowed(tmp_path):
    f = write(tmp_path, "ki.py", "raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        zoo.get_spec(f"file:{f}:build")


def test_a_function_that_exits_or_raises_is_an_error_naming_it(tmp_path):
    f = write(tmp_path, "fn.py", "def quits():\n    raise SystemExit(4)\n\n"
                                 "def fails():\n    raise TypeError('no')\n")
    with pytest.raises(ConfigError, match=r"quits\(\) raised SystemExit\(4\) instead of "
                                          r"returning \(model, make_batch, loss\)"):
        zoo.get_spec(f"file:{f}:quits")
    with pytest.raises(ConfigError, match=rf"fails\(\) in {f} \(file: model\) raised "
                                          r"TypeError: no when called"):
        zoo.get_spec(f"file:{f}:fails")


def test_within_a_bound_the_spec_comes_from_a_child_once_per_name(tmp_path, monkeypatch):
    nets = write(tmp_path, "nets.py", NETS)
    here = zoo.get_spec(f"file:{nets}:mlp?width=8")  # in this process
    runs = []
    real = isolated._run_child
    monkeypatch.setattr(isolated, "_run_child",
                        lambda name, t: runs.append(name) or real(name, t))
    monkeypatch.chdir(tmp_path)
    with isolated.bounded(120):
        spec = zoo.get_spec("file:nets.py:mlp?width=8")
        assert zoo.get_spec("file:nets.py:mlp?width=8") is spec
        assert zoo.get_spec(spec.name) is spec  # the canonical name the config carries
    assert runs == ["file:nets.py:mlp?width=8"]  # one child
    assert spec == here and spec.params == here.params and spec.hyper == here.hyper
    assert isolated.current_bound() is None


def test_within_a_bound_a_hanging_file_is_stopped(tmp_path):
    f = write(tmp_path, "slow.py", "import time\ntime.sleep(60)\n\ndef build():\n    pass\n")
    t0 = time.monotonic()
    with isolated.bounded(2), pytest.raises(ConfigError) as e:
        zoo.get_spec(f"file:{f}:build")
    took = time.monotonic() - t0
    assert took < 30, took  # stopped at the bound, not after the file's 60 s
    assert "took more than 2 s and was stopped" in str(e.value) and str(f) in str(e.value)
    with isolated.bounded(2), pytest.raises(ConfigError, match="took more than 2 s"):
        zoo.get_spec(f"file:{f}:build")  # the answer is cached: no second wait
    assert time.monotonic() - t0 < took + 1.5


def test_run_names_the_file_that_exits_and_stops_one_that_hangs(tmp_path):
    write(tmp_path, "exitmodel.py", "raise SystemExit(3)\n")
    r = dlperf("run", "--model", "file:exitmodel.py:f", "--device", "cpu", "--db", "x.db",
               cwd=tmp_path)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert f"importing {tmp_path / 'exitmodel.py'} raised SystemExit(3)" in r.stderr
    write(tmp_path, "sleepmodel.py", "import time\ntime.sleep(120)\n\ndef f():\n    pass\n")
    t0 = time.monotonic()
    r = dlperf("run", "--model", "file:sleepmodel.py:f", "--device", "cpu", "--db", "x.db",
               "--timeout", "3", cwd=tmp_path)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "took more than 3 s and was stopped" in r.stderr and "--timeout" in r.stderr
    assert time.monotonic() - t0 < 60
    assert not (tmp_path / "x.db").exists()  # nothing ran


def test_a_sweep_bounds_the_spec_by_its_files_timeout(tmp_path):
    from dlperf.cli.sweep import _spec_limit

    write(tmp_path, "sleepmodel.py", "import time\ntime.sleep(120)\n\ndef f():\n    pass\n")
    s = write(tmp_path, "s.yaml", "name: s\ndefaults: {device: cpu, timeout_s: 3}\n"
                                  "grid:\n  - model: ['file:sleepmodel.py:f']\n")
    assert _spec_limit(s) == 3.0
    assert _spec_limit(write(tmp_path, "d.yaml", "name: d\ngrid: [{model: fcn5}]\n")) == 900.0
    assert _spec_limit(write(tmp_path, "b.yaml", "{{{")) == 900.0  # load_sweep reports it
    t0 = time.monotonic()
    r = dlperf("sweep", "s.yaml", cwd=tmp_path)
    assert r.returncode == 2 and "took more than 3 s and was stopped" in r.stderr, r.stderr
    assert time.monotonic() - t0 < 60
