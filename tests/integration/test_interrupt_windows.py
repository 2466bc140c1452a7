"""Every SIGINT that stops a sweep says so: "interrupted: finished points are in ...; ..."
and exit 130, wherever it lands (a point being measured or stored, between points, the
summary printed after the last point), never a silent exit 130. The attack of
benchmarks/reliability.py at CI size, with the fake framework."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

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


def test_a_sigint_at_any_moment_says_interrupted(tmp_path):
    """SIGINT at delays spread over a whole sweep (start, points, stores, summary): every
    trial that exits 130 printed the line."""
    yaml = rel.sweep_yaml(tmp_path / "s.yaml", [1, 2], min_iters=3)
    env = rel.environment()
    db = tmp_path / "r.db"
    t0 = time.monotonic()
    rc, _ = rel.run_sweep(yaml, db, tmp_path / "first.log", env, timeout_s=300)
    whole = time.monotonic() - t0
    assert rc == 0
    silent, stopped = [], 0
    n = 10
    for i in range(n):
        delay = whole * (0.35 + 0.75 * i / n)
        log = tmp_path / f"t{i}.log"
        p = subprocess.Popen([sys.executable, "-m", "dlperf", "sweep", str(yaml), "--db",
                              str(db), "--rerun"], env=env, stdout=subprocess.DEVNULL,
                             stderr=open(log, "ab"), preexec_fn=rel._default_sigint)
        time.sleep(delay)
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
        rc = p.wait(timeout=120)
        text = " ".join(log.read_text(errors="replace").split())
        if rc == 130:
            stopped += 1
            if "interrupted:" not in text:
                silent.append((round(delay, 2), text[-300:]))
        else:
            assert rc == 0, (rc, text[-2000:])
        assert "Traceback" not in text, text[-2000:]
    assert stopped, "no trial was interrupted: the delays missed the sweep"
    assert not silent, silent
