"""Several command lines of a benchmark script run through its ``main(argv)`` in one fresh
process (imported as ``from script_runs import main_runs_in_one_process``: pytest puts this
folder on ``sys.path``), for tests of what each run writes rather than of the process: the
plain reference loops (benchmarks/plain_tf_loop.py, benchmarks/plain_jax_loop.py) import
their framework in 1-5 CPU-s on 2 cores, once per process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

#: Runs ``main(argv)`` of the script ``sys.argv[1]`` for each command line of ``sys.argv[2]``
#: (a JSON list), in order; prints one JSON list of ``[exit status, stdout, stderr]`` (the
#: ``SystemExit`` status of a refused command line, with what it wrote to stderr, e.g.
#: argparse's error; the traceback of an exception after that stderr, status 1).
_DRIVER = """
import contextlib, io, json, runpy, sys, traceback
main = runpy.run_path(sys.argv[1], run_name="benchmark_script")["main"]
out = []
for argv in json.loads(sys.argv[2]):
    buf, ebuf, err = io.StringIO(), io.StringIO(), ""
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(ebuf):
            rc = main(argv)
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
    except Exception:
        rc, err = 1, traceback.format_exc()
    out.append([rc, buf.getvalue(), ebuf.getvalue() + err])
print(json.dumps(out))
"""


def main_runs_in_one_process(script: Path, runs: dict[str, list[str]], env: dict[str, str],
                             timeout_s: float = 600) -> dict[str, subprocess.CompletedProcess]:
    """The command lines ``runs`` (name -> arguments) of ``script`` run one after another
    through its ``main(argv)`` in one fresh process with environment ``env``.

    Process-wide settings a run makes stay for the later ones (the plain TensorFlow loop's
    thread pools: its runs must ask for the same ``--threads``).

    Returns:
        A :class:`subprocess.CompletedProcess` per name: that run's exit status (``main``'s
        return value, or its ``SystemExit`` status), its stdout, and as stderr what it wrote
        to stderr followed by the traceback of an exception it raised (status 1).

    Raises:
        AssertionError: the process itself failed (a crash, or an error outside the runs).
    """
    names = list(runs)
    proc = subprocess.run([sys.executable, "-c", _DRIVER, str(script),
                           json.dumps([runs[n] for n in names])], capture_output=True,
                          text=True, timeout=timeout_s, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    return {n: subprocess.CompletedProcess(runs[n], rc, out, err)
            for n, (rc, out, err) in zip(names, got, strict=True)}
