"""``dlperf compare --run``'s runner (dlperf.alternate): the ABBA order, each side's folder and
environment, the flags it refuses, and what it does when a side's run fails."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from dlperf import alternate
from dlperf.errors import ConfigError


def test_rounds_alternate_abba():
    assert alternate.rounds_order(3) == [(0, 0), (0, 1), (1, 1), (1, 0), (2, 0), (2, 1)]
    with pytest.raises(ConfigError, match="--rounds 1"):
        alternate.rounds_order(1)


def test_flags_and_env_are_checked():
    assert alternate.check_run_flags(["-m", "x"]) == ["-m", "x"]
    with pytest.raises(ConfigError, match="needs the points to measure after --"):
        alternate.check_run_flags([])
    for bad in (["--db", "x.db"], ["--tag=v1"], ["--repeats", "3"]):
        with pytest.raises(ConfigError, match="set by dlperf compare --run"):
            alternate.check_run_flags(["-m", "x", *bad])
    assert alternate.parse_env(["A=1", "B=x=y"], "--new-env") == {"A": "1", "B": "x=y"}
    with pytest.raises(ConfigError, match="--base-env 'A'"):
        alternate.parse_env(["A"], "--base-env")


def test_side_environment_puts_its_src_first(tmp_path):
    (tmp_path / "src").mkdir()
    side = alternate.Side("NEW", "new", tmp_path, {"X": "1"})
    env = alternate.side_environment(side, {"PYTHONPATH": "/elsewhere", "Y": "2"})
    assert env["PYTHONPATH"] == os.pathsep.join([str((tmp_path / "src").resolve()), "/elsewhere"])
    assert env["X"] == "1" and env["Y"] == "2"
    bare = alternate.Side("BASE", "base", tmp_path / "missing", {})
    assert "PYTHONPATH" not in alternate.side_environment(bare, {})


def _sides(tmp_path: Path) -> tuple[alternate.Side, alternate.Side]:
    (tmp_path / "b").mkdir(exist_ok=True)
    (tmp_path / "n").mkdir(exist_ok=True)
    return (alternate.Side("BASE", "base", tmp_path / "b", {"S": "b"}),
            alternate.Side("NEW", "new", tmp_path / "n", {"S": "n"}))


def test_each_run_starts_in_its_side_with_the_next_repeat(tmp_path):
    calls = []

    def runner(cmd, cwd, env, **kw):
        calls.append((cmd, cwd, env["S"]))
        return SimpleNamespace(returncode=0, stderr="1 run, 0 already in g.db, 0 failed\n")

    lines: list[str] = []
    out = alternate.run_rounds(_sides(tmp_path), ["-m", "x"], tmp_path / "g.db", 2,
                               runner=runner, echo=lines.append)
    assert [(c[2], c[0][-3], c[0][-1]) for c in calls] == [
        ("b", "base", "1"), ("n", "new", "1"), ("n", "new", "2"), ("b", "base", "2")]
    assert all(c[1].endswith(c[2]) for c in calls)  # the side's folder
    assert all(c[0][3:6] == ["run", "-m", "x"] and "--db" in c[0] for c in calls)
    assert [r.returncode for r in out] == [0, 0, 0, 0]
    assert sum("1 run, 0 already" in ln for ln in lines) == 4


def test_a_side_whose_run_is_refused_stops_and_both_refused_is_an_error(tmp_path):
    def new_breaks(cmd, cwd, env, **kw):
        rc = 2 if env["S"] == "n" else 0
        return SimpleNamespace(returncode=rc, stderr="error: no such function build\n")

    lines: list[str] = []
    out = alternate.run_rounds(_sides(tmp_path), ["-m", "x"], tmp_path / "g.db", 3,
                               runner=new_breaks, echo=lines.append)
    assert [(r.side, r.returncode) for r in out] == [("BASE", 0), ("NEW", 2), ("BASE", 0),
                                                     ("BASE", 0)]
    assert any("not run again" in ln and "no such function" in ln for ln in lines)

    def both_break(cmd, cwd, env, **kw):
        return SimpleNamespace(returncode=2, stderr="error: unknown model\n")

    with pytest.raises(ConfigError, match="failed on both sides"):
        alternate.run_rounds(_sides(tmp_path), ["-m", "x"], tmp_path / "g.db", 2,
                             runner=both_break, echo=lambda s: None)


def test_a_side_whose_points_failed_does_not_try_them_again(tmp_path):
    """A run that exits 1 (points failed, stored as results) makes the side's later rounds pass
    --failed-final (one attempt per point a round, not one more each round); a side's dlperf
    that does not know the flag (an older BASE) is run again without it."""
    calls = []

    def runner(cmd, cwd, env, **kw):
        calls.append((env["S"], cmd))
        if env["S"] == "b" and "--failed-final" in cmd:  # an older dlperf: no such option
            return SimpleNamespace(returncode=2, stderr="No such option: --failed-final\n")
        return SimpleNamespace(returncode=1, stderr="0 run, 0 already in g.db, 1 failed\n")

    out = alternate.run_rounds(_sides(tmp_path), ["-m", "x"], tmp_path / "g.db", 3,
                               runner=runner, echo=lambda s: None)
    flags = [(s, "--failed-final" in c) for s, c in calls]
    assert flags[:2] == [("b", False), ("n", False)]  # the first round: no failure known yet
    assert ("n", True) in flags and all(f for s, f in flags[2:] if s == "n")
    # BASE: each later round tried with the flag, refused, then run without it
    assert [f for s, f in flags[2:] if s == "b"] == [True, False, True, False]
    assert [r.returncode for r in out] == [1] * 6  # the refused try is not a round


def test_an_interrupted_side_run_stops_the_gate(tmp_path):
    """A side's ``dlperf run`` that exits 130 (the Ctrl-C reached it) stops the gate as an
    interrupt: no further rounds run."""
    calls = []

    def runner(cmd, cwd, env, **kw):
        calls.append(env["S"])
        rc = 130 if len(calls) == 2 else 0
        return SimpleNamespace(returncode=rc, stderr="1 run, 0 already in g.db, 0 failed\n")

    with pytest.raises(KeyboardInterrupt):
        alternate.run_rounds(_sides(tmp_path), ["-m", "x"], tmp_path / "g.db", 2,
                             runner=runner, echo=lambda s: None)
    assert calls == ["b", "n"]


def test_run_child_lets_an_interrupted_child_finish_its_store(tmp_path):
    """Interrupted while a side's run works, the gate sends it SIGINT and waits for it (it
    stores what it measured, then exits), rather than killing it within 0.25 s."""
    import subprocess
    import sys
    import textwrap

    mark, ready = tmp_path / "stored", tmp_path / "ready"
    child = textwrap.dedent(f"""
        import signal, sys, time
        def stop(*a):
            time.sleep(1.0)  # the store being finished
            open({str(mark)!r}, "w").write("stored")
            sys.exit(130)
        signal.signal(signal.SIGINT, stop)
        open({str(ready)!r}, "w").write("ready")
        time.sleep(120)
    """)
    # The interrupt comes once the child's handler is in place (it says so with a file): a
    # SIGINT sent after a fixed delay reached a child still starting, on a busy host, and
    # ended it before it could store. The 120 s bound matters only if the child never starts.
    parent = textwrap.dedent(f"""
        import os, signal, sys, threading, time
        from dlperf.alternate import run_child
        def interrupt():
            end = time.monotonic() + 120
            while not os.path.exists({str(ready)!r}) and time.monotonic() < end:
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGINT)
        threading.Thread(target=interrupt, daemon=True).start()
        try:
            run_child([sys.executable, "-c", {child!r}], capture_output=True, text=True)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
    """)
    p = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True,
                       timeout=300, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert "interrupted" in p.stdout, p.stdout + p.stderr
    assert mark.exists(), p.stdout + p.stderr


def test_an_interrupted_gate_says_so_and_how_to_resume(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from dlperf.cli import app

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(alternate, "run_rounds", interrupted)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    r = CliRunner().invoke(app, ["compare", "--run", str(tmp_path / "a"), str(tmp_path / "b"),
                                 "--db", str(tmp_path / "g.db"), "--", "-m", "fcn5_tiny"])
    text = " ".join(r.output.split())
    assert r.exit_code == 130, text
    assert "interrupted: finished runs are in" in text and "--resume" in text, text


@pytest.mark.parametrize("signal_name, code", [("Ctrl-C", 130), ("SIGTERM", 143)])
def test_a_gate_interrupted_while_judging_says_how_to_judge_without_running(
        tmp_path, monkeypatch, signal_name, code):
    """Every round stored, the judging step interrupted: the message says where the runs
    are and gives the dlperf compare --db call that judges them with the gate's own flags
    (not the generic line, nor --resume, which would start every run's process again)."""
    from typer.testing import CliRunner

    from dlperf.cli import app, common
    from dlperf.cli import compare as compare_cli

    def judging(*a, **k):
        raise KeyboardInterrupt if signal_name == "Ctrl-C" else common.Terminated()

    monkeypatch.setattr(alternate, "run_rounds", lambda *a, **k: [])
    monkeypatch.setattr(compare_cli, "_sides", judging)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    gate = tmp_path / "g.db"
    r = CliRunner().invoke(app, ["compare", "--run", str(tmp_path / "a"), str(tmp_path / "b"),
                                 "--db", str(gate), "--fail-if-slower", "3%", "--level", "0.9",
                                 "--model", "fcn5_tiny", "--", "-m", "fcn5_tiny"])
    text = " ".join(r.output.split())
    assert r.exit_code == code, text
    how = "interrupted" if code == 130 else "terminated (SIGTERM)"
    assert f"{how} while judging: every run is in {gate};" in text, text
    assert (f"judge them without running again: dlperf compare --db {gate} tag:base tag:new "
            "--fail-if-slower 3% --model fcn5_tiny --level 0.9") in text, text
    assert "what was stored before stays stored" not in text and "--resume" not in text, text
