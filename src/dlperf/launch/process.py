"""Run one configuration in a fresh worker process (MEASUREMENT.md rule 11: isolation).

A fresh process per configuration means one configuration's compiled kernels, autotune caches,
allocator state or crash cannot leak into the next. The launcher only starts the process and
gathers its result; a process that dies without a result, or outlives its timeout, becomes a
``crash`` or ``timeout`` result here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from dlperf.config import RunConfig
from dlperf.worker import base_result

STDERR_TAIL = 4000


def run_in_subprocess(cfg: RunConfig, timeout_s: float | None = None,
                      env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``cfg`` in ``python -m dlperf.worker`` and return its result dict.

    Args:
        cfg: the configuration.
        timeout_s: wall-clock limit for the whole process (default ``cfg.timeout_s``); on
            expiry the process group is killed and a ``timeout`` result returned.
        env: extra environment variables for the worker.

    Returns:
        The worker's result, or a ``crash`` / ``timeout`` result with the exit code and the
        tail of the worker's stderr in ``error``.
    """
    timeout_s = cfg.timeout_s if timeout_s is None else timeout_s
    with tempfile.TemporaryDirectory(prefix="dlperf-") as tmp:
        cpath, rpath = Path(tmp) / "config.json", Path(tmp) / "result.json"
        cpath.write_text(cfg.model_dump_json())
        penv = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        cmd = [sys.executable, "-m", "dlperf.worker", str(cpath), str(rpath), str(os.getpid())]
        errf = Path(tmp) / "stderr.txt"
        with open(errf, "wb") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=penv,
                                    start_new_session=True)
            try:
                rc = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                r = base_result(cfg, "timeout", f"worker exceeded its timeout of {timeout_s:g} s; "
                                "raise it with --timeout and add --retry-failed to measure "
                                "this point again, or lower the time budget")
                r["worker"] = {"returncode": None, "stderr_tail": _tail(errf)}
                return r
            except BaseException:  # Ctrl-C: do not leave the worker running
                _kill_group(proc)
                raise
        if rc == 0 and rpath.is_file():
            return json.loads(rpath.read_text())
        sig = f" (killed by signal {signal.Signals(-rc).name})" if rc < 0 else ""
        tail = _tail(errf)
        r = base_result(cfg, "crash", f"worker exited with code {rc}{sig} and no result: "
                        f"{tail[-1500:]}")
        r["worker"] = {"returncode": rc, "stderr_tail": tail}
        return r


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _tail(path: Path) -> str:
    try:
        return path.read_bytes()[-STDERR_TAIL:].decode("utf-8", "replace")
    except OSError:
        return ""
