"""Every SIGINT that stops a sweep says so: "interrupted: finished points are in ...; ..."
and exit 130, wherever it lands (a point being measured or stored, between points, the
summary printed after the last point), never a silent exit 130. The attack of
benchmarks/reliability.py at CI size, with the fake framework."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))
import reliability as rel  # noqa: E402

sys.path.remove(str(BENCH))


def test_a_sigint_in_the_summary_says_interrupted(tmp_path):
    """Deterministic: the signal lands while the summary after the last point prints."""
    yaml = rel.sweep_yaml(tmp_path / "s.yaml", [1], min_iters=3)
    code = textwrap.dedent(f"""
        import os, signal, time
        import dlperf.cli.common as common
        def glance(store, rows):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        common.print_glance = glance
        from dlperf.cli import main
        main(["sweep", {str(yaml)!r}, "--db", {str(tmp_path / 'r.db')!r}])
    """)
    p = subprocess.run([sys.executable, "-c", code], env=rel.environment(), text=True,
                       capture_output=True, timeout=120, preexec_fn=rel._default_sigint)
    assert p.returncode == 130, p.stderr[-2000:]
    assert "interrupted: finished points are in" in " ".join(p.stderr.split()), p.stderr[-2000:]


def test_a_sigint_while_a_command_starts_says_interrupted(tmp_path, monkeypatch, capsys):
    """Deterministic: a KeyboardInterrupt inside the command before its own handler (the sweep
    file being read), which typer ends with a silent exit 130 (0.29; "Aborted!" and exit 1
    in older click), is said by main. A user error and an interrupt dlperf said stay as
    they are."""
    import dlperf.cli.sweep as sweep_cli
    from dlperf.cli import _unsaid_interrupt, main

    yaml = rel.sweep_yaml(tmp_path / "s.yaml", [1], min_iters=3)

    def interrupted(file):
        raise KeyboardInterrupt

    monkeypatch.setenv("DLPERF_FAKE_FRAMEWORK", "1")
    monkeypatch.setattr(sweep_cli, "_spec_limit", interrupted)
    with pytest.raises(SystemExit) as e:
        main(["sweep", str(yaml), "--db", str(tmp_path / "r.db")])
    assert e.value.code == 130
    assert "interrupted: what was stored before stays stored" in capsys.readouterr().err
    assert not (tmp_path / "r.db").exists()
    # the chain a traceback shows decides: an interrupt raised "from None" was said already
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise SystemExit(130) from None
    except SystemExit as said:
        assert not _unsaid_interrupt(said)
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise SystemExit(130)  # noqa: B904 - the chain under test
    except SystemExit as unsaid:
        assert _unsaid_interrupt(unsaid)
    assert not _unsaid_interrupt(SystemExit(2))
    # Python 3.11 raises an interrupt that lands in a class being made (an import, inside a
    # command) as this RuntimeError; said the same way
    def making_a_class(file):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as e:
            raise RuntimeError("Error calling __set_name__ on 'Field' instance") from e

    monkeypatch.setattr(sweep_cli, "_spec_limit", making_a_class)
    with pytest.raises(SystemExit) as e:
        main(["sweep", str(yaml), "--db", str(tmp_path / "r.db")])
    assert e.value.code == 130
    assert "interrupted: what was stored before stays stored" in capsys.readouterr().err


#: ``dlperf ARGS...`` as ``python -m dlperf`` runs it, that writes ``time.monotonic()`` (one
#: clock for every process) to the file $MAIN_REACHED once main's handlers are in force: its
#: first call inside them (``build_app``) writes it.
ENTERED = """
import os, sys, time
import dlperf.cli as cli
build = cli.build_app
def build_app(*a, **k):
    with open(os.environ["MAIN_REACHED"], "w") as f:
        f.write(repr(time.monotonic()))
    return build(*a, **k)
cli.build_app = build_app
sys.argv = ["dlperf", *sys.argv[1:]]
cli.main()
"""


def _start(args: list[str], env: dict[str, str], log: Path, mark: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", ENTERED, *args],
                            env={**env, "MAIN_REACHED": str(mark)}, stdout=subprocess.DEVNULL,
                            stderr=open(log, "ab"), preexec_fn=rel._default_sigint)


def _reached(mark: Path, p: subprocess.Popen, limit_s: float = 120.0) -> float:
    """The moment (``time.monotonic()``) the process ``p`` wrote to ``mark``: its main
    entered. The limit only matters if it never starts."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        text = mark.read_text() if mark.exists() else ""
        if text:
            return float(text)
        assert p.poll() is None, f"exit {p.returncode} before main"
        time.sleep(0.01)
    raise AssertionError(f"main not reached in {limit_s} s")


def test_a_sigint_at_any_moment_says_interrupted(tmp_path):
    """SIGINT at delays spread over a whole sweep (arguments and sweep file read, points,
    stores, summary): every trial that exits 130 printed the line. The delays count from
    the moment main's handlers are in force (a file the process writes), not from its
    start: Python's start and the imports before main are not dlperf's to handle, and on a
    busy host they took up to the whole of a delay counted from the start."""
    yaml = rel.sweep_yaml(tmp_path / "s.yaml", [1, 2], min_iters=3)
    env = rel.environment()
    db = tmp_path / "r.db"
    args = ["sweep", str(yaml), "--db", str(db)]
    p = _start(args, env, tmp_path / "first.log", tmp_path / "first.mark")
    t0 = _reached(tmp_path / "first.mark", p)
    assert p.wait(timeout=300) == 0, (tmp_path / "first.log").read_text()[-2000:]
    whole = time.monotonic() - t0
    silent, stopped = [], 0
    n = 10
    for i in range(n):
        frac = 1.05 * i / n  # the first at once: that trial is interrupted on any host
        log, mark = tmp_path / f"t{i}.log", tmp_path / f"t{i}.mark"
        p = _start([*args, "--rerun"], env, log, mark)
        time.sleep(max(0.0, _reached(mark, p) + whole * frac - time.monotonic()))
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
        rc = p.wait(timeout=120)
        text = " ".join(log.read_text(errors="replace").split())
        if rc == 130:
            stopped += 1
            if "interrupted:" not in text:
                silent.append((round(frac, 2), text[-300:]))
        else:
            assert rc == 0, (rc, text[-2000:])
        assert "Traceback" not in text, text[-2000:]
    assert stopped, "no trial was interrupted: the delays missed the sweep"
    assert not silent, silent


def test_a_resumed_tagged_run_counts_what_it_found_stored(tmp_path):
    """``compare --run --resume`` reruns each round's ``dlperf run --tag``; a round whose run
    is stored prints "0 run, 1 already in", never "0 run, 0 already"."""
    db = tmp_path / "g.db"
    flags = ["-m", "fcn5_tiny", "--framework", "fake", "--device", "cpu", "--min-iters", "6",
             "--max-iters", "6", "--min-time", "0", "--db", str(db), "--tag", "base"]
    for expect in ("1 run, 0 already in", "0 run, 1 already in"):
        p = subprocess.run([sys.executable, "-m", "dlperf", "run", *flags], env=rel.environment(),
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0 and expect in " ".join(p.stderr.split()), p.stderr[-2000:]
