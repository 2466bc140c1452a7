"""A worker's sign of life, and the parent's notice when none comes (a point with no progress
says so while it waits, long before its timeout: a hanging model was silent for the 900 s
default).

The worker writes a small JSON file (:func:`beat`, path in ``$DLPERF_HEARTBEAT``) at the
boundaries where it synchronises anyway: the run prepared, the first step, each warm-up window,
the start of the measured segment (with the segment's time budget, which no beat interrupts:
nothing is written while steps are timed) and its end. The parent (:class:`Watch`, read
by :func:`dlperf.launch.process.run_in_subprocess` while it waits) prints one line when no
beat came for :data:`STALL_S` seconds (beyond a measured segment's budget), and again after
each further :data:`STALL_S`. Imports nothing of dlperf.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

__all__ = ["ENV", "STALL_S", "beat", "Watch", "stall_s"]

#: The environment variable that names the worker's heartbeat file.
ENV = "DLPERF_HEARTBEAT"
#: Seconds without a beat before the parent says so (``$DLPERF_STALL_S`` overrides it).
STALL_S = 60.0


def stall_s() -> float:
    """:data:`STALL_S`, or ``$DLPERF_STALL_S`` where it is a positive number."""
    try:
        v = float(os.environ.get("DLPERF_STALL_S", ""))
    except ValueError:
        return STALL_S
    return v if v > 0 else STALL_S


def beat(phase: str, steps: int | None = None, budget_s: float | None = None) -> None:
    """Record that the worker reached ``phase`` (``prepared``, ``first step``, ``warm-up``,
    ``measuring``, ``measured``) after ``steps`` steps; ``budget_s``: how long the parent should
    expect no further beat (a measured segment's time budget). Nothing without
    ``$DLPERF_HEARTBEAT``; a file that cannot be written is skipped (a sign of life is never
    worth a failed run)."""
    path = os.environ.get(ENV)
    if not path:
        return
    data = {"phase": phase, "steps": steps, "budget_s": budget_s, "t": time.time()}
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        Path(tmp).write_text(json.dumps(data))
        os.replace(tmp, path)
    except OSError:
        pass


class Watch:
    """The parent's side: :meth:`poll` returns a line to print when the worker has made no
    progress for :func:`stall_s` seconds (past a measured segment's budget), else None.

    Args:
        path: the worker's heartbeat file.
        label: the point, for the line.
        timeout_s: the point's timeout (s), named in the line.
        started: ``time.time()`` when the worker was started.
    """

    def __init__(self, path: str | Path, label: str, timeout_s: float,
                 started: float | None = None) -> None:
        self.path, self.label, self.timeout_s = Path(path), label, timeout_s
        self.started = time.time() if started is None else started
        self.limit = stall_s()
        self.said_at: float | None = None

    def _last(self) -> dict[str, Any]:
        try:
            d = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return d if isinstance(d, dict) else {}

    def poll(self, now: float | None = None) -> str | None:
        """The line to print now, or None (see the class docstring)."""
        now = time.time() if now is None else now
        last = self._last()
        t = float(last.get("t") or self.started)
        quiet = now - t - float(last.get("budget_s") or 0.0)
        if quiet < self.limit:
            self.said_at = None
            return None
        if self.said_at is not None and now - self.said_at < self.limit:
            return None
        self.said_at = now
        phase = last.get("phase")
        steps = last.get("steps")
        what = (f"its last progress: {phase}" + (f" after {steps} step(s)" if steps else "")
                + f", {now - t:.0f} s ago" if phase else
                f"it has not finished preparing in {now - self.started:.0f} s")
        hint = (" (a first step that compiles can take this long)"
                if phase in ("prepared", None) else "")
        return (f"waiting: {self.label}: no progress for {now - t:.0f} s ({what}){hint}; it "
                f"is stopped at its timeout of {self.timeout_s:g} s (--timeout), "
                f"{max(0.0, self.started + self.timeout_s - now):.0f} s from now")
