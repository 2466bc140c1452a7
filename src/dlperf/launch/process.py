"""Run one configuration in a fresh worker process (docs/measurement.md rule 11: isolation).

A fresh process per configuration means one configuration's compiled kernels, autotune caches,
allocator state or crash cannot leak into the next. The launcher only starts the process and
gathers its result: the worker's JSON is read back into a :class:`~dlperf.results.schema.
RunRecord` right after the process boundary (a file that does not read as one is a ``crash``),
and a process that dies without a result, or outlives its timeout, becomes a ``crash`` or
``timeout`` record here (:func:`~dlperf.results.schema.failure_record`).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from dlperf import heartbeat
from dlperf.config import RunConfig
from dlperf.errors import ConfigError

# The interpreter of a framework with a Python of its own; re-exported (sweep, tests).
from dlperf.frameworks.common import check_framework_python, framework_python, worker_interpreter  # noqa: F401
from dlperf.procgroup import end_group, wait_group
from dlperf.registry import launch_info, load_hook
from dlperf.results.parts import Breakdown, BreakdownRun, WorkerInfo
from dlperf.results.schema import RunRecord, failure_record, identity_of
from dlperf.tempdirs import owned_tempdir

STDERR_TAIL = 4000


def run_in_subprocess(cfg: RunConfig, timeout_s: float | None = None,
                      env: dict[str, str] | None = None) -> RunRecord:
    """Run ``cfg`` in ``python -m dlperf.worker`` and return its record.

    Args:
        cfg: the configuration.
        timeout_s: wall-clock limit for the whole process (default ``cfg.measure.timeout_s``); on
            expiry the process group is killed and a ``timeout`` result returned.
        env: extra environment variables for the worker.

    Returns:
        The worker's record, or a ``crash`` / ``timeout`` record with the exit code and the
        tail of the worker's stderr (``worker.returncode``, ``worker.stderr_tail``).
    """
    timeout_s = cfg.measure.timeout_s if timeout_s is None else timeout_s
    with owned_tempdir("dlperf-") as tmp:  # reclaimed if this process is killed (SIGKILL)
        cpath, rpath = Path(tmp) / "config.json", Path(tmp) / "result.json"
        cpath.write_text(cfg.model_dump_json())
        python, wenv = worker_interpreter(cfg.runtime.framework, Path(tmp))
        hb = Path(tmp) / "heartbeat.json"
        penv = {**os.environ, "PYTHONUNBUFFERED": "1", **wenv, heartbeat.ENV: str(hb),
                **(env or {})}
        cmd = [python, "-m", "dlperf.worker", str(cpath), str(rpath), str(os.getpid())]
        errf = Path(tmp) / "stderr.txt"
        with open(errf, "wb") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=penv,
                                    start_new_session=True)
            try:
                # what it forked ends with it; a worker without progress is named meanwhile
                rc = _wait(proc, timeout_s, heartbeat.Watch(hb, cfg.label(), timeout_s))
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                return failure_record(
                    cfg, "timeout", f"worker exceeded its timeout of {timeout_s:g} s; raise it "
                    "(--timeout for dlperf run, timeout_s in a sweep file) and add "
                    "--retry-failed to measure this point again, or lower the time budget",
                    worker=WorkerInfo(returncode=None, stderr_tail=_tail(errf)))
            except BaseException:  # Ctrl-C: do not leave the worker running
                _kill_group(proc)
                raise
        if rc == 0 and rpath.is_file():
            return read_record(rpath, cfg, errf)
        tail = _tail(errf)
        return failure_record(cfg, "crash", crash_message(rc, tail),
                              worker=WorkerInfo(returncode=rc, stderr_tail=tail))


def read_record(path: Path, cfg: RunConfig, stderr: Path | None = None) -> RunRecord:
    """The record a worker wrote to ``path`` (its flat JSON, :meth:`RunRecord.to_dict`), read
    back right after the process boundary; a file that is not a record of this dlperf (cut
    short, a field of the wrong type, an unknown key) is a ``crash`` record of ``cfg`` that says
    why, with the tail of the worker's output ``stderr``."""
    try:
        return RunRecord.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, ConfigError) as e:  # pydantic's ValidationError is a ValueError
        tail = _tail(stderr) if stderr is not None else ""
        return failure_record(cfg, "crash", f"the worker's result {path.name} is not a record "
                              f"this dlperf reads: {str(e)[:2000]}",
                              worker=WorkerInfo(returncode=0, stderr_tail=tail))


#: How often (s) a waiting parent looks at its worker's heartbeat.
POLL_S = 5.0


def _wait(proc: subprocess.Popen, timeout_s: float, watch: heartbeat.Watch) -> int:
    """:func:`~dlperf.procgroup.wait_group` of ``proc`` up to ``timeout_s``, printing to
    stderr the :class:`~dlperf.heartbeat.Watch`'s line whenever the worker has made no
    progress for a while.

    Raises:
        subprocess.TimeoutExpired: at ``timeout_s``, as ``wait_group`` does.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        try:
            return wait_group(proc, max(0.0, min(POLL_S, left)))
        except subprocess.TimeoutExpired:
            if left <= POLL_S:
                raise
        line = watch.poll()
        if line:
            print(line, file=sys.stderr, flush=True)


#: A line that names an exception (``ValueError: ...``, ``torch.OutOfMemoryError: ...``).
_EXC_LINE = re.compile(r"^(?:[\w.]+\.)?\w*(?:Error|Exception|Interrupt|Exit)\b:?.*$")


def last_error_line(log: str) -> str | None:
    """The last line of ``log`` (a launcher's or worker's output) that names an exception, as
    Python prints it last in a traceback (``ValueError: bad batch``), cut to 300 characters;
    None when there is none (a rank killed by a signal prints nothing)."""
    for line in reversed(log.splitlines()):
        line = line.strip()
        if _EXC_LINE.match(line) and not line.startswith("Traceback"):
            return line[:300]
    return None


#: Where the whole output of a worker or rank that died is kept, for its error message.
OUTPUT_KEPT = "all of its output: worker.stderr_tail in --format json"


def exited(rc: int) -> str:
    """``exited with code RC [(killed by signal NAME)] and no result``: a worker or rank
    that ended with code ``rc`` (negative: killed by that signal) without a result."""
    sig = ""
    if rc < 0:
        try:
            sig = f" (killed by signal {signal.Signals(-rc).name})"
        except ValueError:  # not a signal this OS names
            pass
    return f"exited with code {rc}{sig} and no result"


def crash_message(rc: int, tail: str) -> str:
    """The error of a worker that exited with code ``rc`` (negative: killed by that signal)
    without writing a result, from the end of its output ``tail``: the last exception line
    where it printed one; else, when a signal killed it, a pointer to the output (its last
    lines are whatever it printed before, e.g. a profiler's log line, not a cause); else the
    last 1,500 characters of the output."""
    head = f"worker {exited(rc)}"
    cause = last_error_line(tail)
    if cause:
        return f"{head}: {cause} ({OUTPUT_KEPT})"
    if rc < 0:
        return f"{head}; its output is in worker.stderr_tail (dlperf results --format json)"
    return f"{head}: {tail[-1500:]}"


def _kill_group(proc: subprocess.Popen) -> None:
    end_group(proc)


def _tail(path: Path) -> str:
    try:
        return path.read_bytes()[-STDERR_TAIL:].decode("utf-8", "replace")
    except OSError:
        return ""


def breakdown_apart(cfg: RunConfig) -> str | None:
    """Why ``cfg``'s ``--breakdown`` must run in a process of its own, or None.

    A framework whose breakdown changes process-wide settings that also slow the fused step
    names a hook in its registry entry (``FrameworkInfo.breakdown_apart``; JAX on a GPU turns
    XLA command buffers off, read once when the backend starts). Frameworks without one never
    need it. No adapter is imported here.
    """
    if not cfg.traced:
        return None
    hook = load_hook(launch_info(cfg.runtime.framework).breakdown_apart)
    return hook(cfg) if hook is not None else None


def run_breakdown_apart(cfg: RunConfig, why: str, timeout_s: float | None = None,
                        env: dict[str, str] | None = None) -> RunRecord:
    """Run ``cfg`` as two fresh worker processes: the fused-step measurement with the
    framework's own settings (the headline, as without ``--breakdown``), then the breakdown
    run, whose sections are merged in (:func:`merge_breakdown`). Each process gets the full
    timeout. A failed headline is the result (no breakdown is run)."""
    head = run_in_subprocess(cfg.with_(breakdown=False, trace_dir=None, timeline=False),
                             timeout_s, env)
    head = _as_point(head, cfg)
    if head.identity.status != "ok":
        return head
    return merge_breakdown(head, run_in_subprocess(cfg, timeout_s, env), why)


def _as_point(rec: RunRecord, cfg: RunConfig) -> RunRecord:
    """``rec`` under ``cfg``'s identity (its run key, point key, repeat and config): it is that
    point's record, stored and resumed as such."""
    ident = identity_of(cfg, rec.identity.status or "crash")
    rec.identity = rec.identity.model_copy(update={
        k: getattr(ident, k) for k in ("run_key", "point_key", "repeat", "config")})
    return rec


#: The parts the breakdown's own process contributes to the headline's record.
BREAKDOWN_PARTS = ("breakdown", "op_classes", "trace", "timeline")
#: Prefixes of the samples and warnings that belong to the breakdown.
BREAKDOWN_PREFIXES = ("breakdown:", "trace:")


def merge_breakdown(head: RunRecord, bd: RunRecord, why: str) -> RunRecord:
    """The headline record ``head`` with the breakdown of the separate run ``bd``.

    Taken from ``bd``: the parts :data:`BREAKDOWN_PARTS`, its samples and warnings under
    :data:`BREAKDOWN_PREFIXES`. Kept beside them: ``breakdown_run`` (:class:`BreakdownRun`: why
    apart, how that process ended, its own fused summary, against which its phases are
    reconciled, its flags and its :class:`WorkerInfo`: where its time went). A failed ``bd``
    leaves ``breakdown`` unavailable with its error; the headline stands. ``head`` is not
    changed.
    """
    rec = head.model_copy(deep=True)
    rec.samples = dict(rec.samples or {})
    rec.warnings = list(rec.warnings or [])
    status = bd.identity.status
    run = BreakdownRun(why=why, status=status, error=bd.identity.error, summary=bd.summary,
                       flags=bd.flags)
    if bd.worker is not None:
        run.worker = bd.worker
    rec.breakdown_run = run
    if status != "ok":
        rec.breakdown = Breakdown(available=False,
                                  error=f"the breakdown's own process ended {status}: "
                                        f"{str(bd.identity.error)[:500]}")
        rec.warnings = [*rec.warnings, f"breakdown: its process ended {status}"]
        return rec
    for k in BREAKDOWN_PARTS:
        if k in bd.model_fields_set:
            setattr(rec, k, getattr(bd, k))
    rec.samples = {**rec.samples, **{k: v for k, v in (bd.samples or {}).items()
                                     if k.startswith(BREAKDOWN_PREFIXES)}}
    rec.warnings = [*rec.warnings, *(w for w in bd.warnings or []
                                      if w.startswith(BREAKDOWN_PREFIXES))]
    return rec
