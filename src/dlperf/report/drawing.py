"""The report's PNG figures, drawn in worker processes while the report goes on.

Drawing a figure with matplotlib (layout, text, PNG encoding) is most of ``dlperf
report``'s time. The plot functions hand each figure to :func:`draw`; while
:func:`drawing_aside` is open (``dlperf report``, ``run``/``sweep --report``) the figures are
drawn by worker processes as the sections and report.html are computed here, and the figures
no worker has started when it closes are drawn here. Outside it, :func:`draw` draws at once.
Either way a figure is the same PNG, byte for byte: the same function draws it from the same
data with the same matplotlib defaults (dlperf changes no ``rcParams``).

A worker is a fresh ``python`` of this interpreter (:data:`sys.executable`) with this
process's ``sys.path``, reading pickled figures on its stdin and answering each on its stdout
(None, or the error the figure raised); it runs nothing of this process's ``__main__`` (unlike
:mod:`multiprocessing`'s ``spawn``, which imports it again), ignores SIGINT (this process
decides) and ends at the end of its stdin, so it ends with this process.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import subprocess
import sys
import threading
import traceback
from collections import deque
from collections.abc import Callable, Iterator
from typing import IO, Any

__all__ = ["MAX_WORKERS", "draw", "drawing_aside", "spare_cpus"]

#: The most worker processes :func:`drawing_aside` starts by default (each imports
#: matplotlib and the plot's module, about 0.5 s of CPU, before its first figure).
MAX_WORKERS = 4

#: A worker's program: this process's ``sys.path`` first (pickled on stdin), then :func:`_serve`.
_BOOT = ("import pickle, sys; sys.path[:] = pickle.load(sys.stdin.buffer); "
         "from dlperf.report.drawing import _serve; _serve()")


def spare_cpus() -> int:
    """The CPUs this process may run on that are idle (less the one-minute load average,
    rounded), less the one it runs on itself; 0 on one CPU or a busy machine, where a worker
    would only add its start-up (under Linux's autogroup scheduling the processes of one
    session share that session's part of a busy machine: a second one gets no more CPU)."""
    from dlperf.placement import usable_cpus

    n = len(usable_cpus())
    try:
        idle = min(n, round(n - os.getloadavg()[0]))
    except (AttributeError, OSError):  # pragma: no cover - Windows: no load average
        idle = n
    return max(0, idle - 1)


def _unpickled(blob: bytes) -> None:
    """Draw the figure :func:`draw` pickled."""
    fn, args = pickle.loads(blob)  # noqa: S301 (this process's or its parent's own pickle)
    fn(*args)


def _serve() -> None:
    """A worker's loop: draw each figure read from stdin, answer None or its error."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the report's process decides
    # what every figure needs, imported while the first one is being asked for
    import matplotlib.backends.backend_agg  # noqa: F401
    import matplotlib.figure  # noqa: F401
    inp = sys.stdin.buffer
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # what a figure prints goes to stderr, not into the answers
    sys.stdout = sys.stderr
    while True:
        try:
            blob = pickle.load(inp)  # noqa: S301 (the parent's pickle)
        except EOFError:
            return
        answer: BaseException | None = None
        try:
            _unpickled(blob)
        except Exception as e:  # noqa: BLE001 (sent to the parent, which raises it)
            e.add_note("in the drawing worker:\n" + traceback.format_exc())
            answer = e
        try:
            data = pickle.dumps(answer)
        except Exception:  # noqa: BLE001 (an error that does not pickle: its text)
            data = pickle.dumps(RuntimeError(f"{type(answer).__name__}: {answer}"))
        out.write(data)
        out.flush()


class _Aside:
    """The open :func:`drawing_aside`: the figures not started (``todo``: index, pickle), the
    errors by figure index, and the threads that each feed one worker process."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.todo: deque[tuple[int, bytes]] = deque()
        self.count = 0
        self.errors: dict[int, BaseException] = {}
        self.closing = False
        self.cond = threading.Condition()
        self.threads: list[threading.Thread] = []

    def submit(self, blob: bytes) -> None:
        with self.cond:
            self.todo.append((self.count, blob))
            self.count += 1
            self.cond.notify()
        if len(self.threads) < self.workers:
            self.start_worker()

    def start_worker(self) -> None:
        """One more worker process (and the thread that feeds it)."""
        t = threading.Thread(target=self._feed, name="dlperf-drawing", daemon=True)
        self.threads.append(t)
        t.start()

    def _next(self) -> tuple[int, bytes] | None:
        with self.cond:
            while not self.todo and not self.closing:
                self.cond.wait()
            return self.todo.popleft() if self.todo else None

    def _feed(self) -> None:
        """One worker process: send it figures until none is left and the context closes."""
        try:
            proc = subprocess.Popen([sys.executable, "-c", _BOOT], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE)
        except OSError:
            return  # no worker: the figures are drawn here on closing
        stdin: IO[bytes] = proc.stdin  # type: ignore[assignment]
        stdout: IO[bytes] = proc.stdout  # type: ignore[assignment]
        job = None
        try:
            pickle.dump(sys.path, stdin)
            while (job := self._next()) is not None:
                pickle.dump(job[1], stdin)
                stdin.flush()
                answer = pickle.load(stdout)  # noqa: S301 (the worker's pickle)
                if answer is not None:
                    with self.cond:
                        self.errors[job[0]] = answer
                job = None
        except (OSError, EOFError, pickle.UnpicklingError):  # the worker died
            if job is not None:
                with self.cond:
                    self.todo.appendleft(job)  # drawn here on closing
        finally:
            with contextlib.suppress(OSError):
                stdin.close()
            proc.wait()
            stdout.close()

    def finish(self) -> None:
        """Draw here the figures no worker started (the newest first: the workers take the
        oldest), then wait for the workers' figures and for the workers to end."""
        while True:
            with self.cond:
                if not self.todo:
                    self.closing = True
                    self.cond.notify_all()
                    break
                i, blob = self.todo.pop()
            try:
                _unpickled(blob)
            except Exception as e:  # noqa: BLE001 (raised below, in draw order)
                self.errors[i] = e
        for t in self.threads:
            t.join()
        while self.todo:  # a worker that died after the last look
            i, blob = self.todo.pop()
            try:
                _unpickled(blob)
            except Exception as e:  # noqa: BLE001
                self.errors[i] = e

    def drop(self) -> None:
        """Drop the figures not started and wait for the workers to end."""
        with self.cond:
            self.todo.clear()
            self.closing = True
            self.cond.notify_all()
        for t in self.threads:
            t.join()


_ASIDE: _Aside | None = None


def draw(fn: Callable[..., Any], *args: Any) -> None:
    """``fn(*args)``, which writes one figure: at once, or, while :func:`drawing_aside` is
    open, in a worker process from ``args`` as they are now (pickled here), its error raised
    when the context closes. A figure whose ``fn`` or ``args`` do not pickle (``fn`` must be
    a module-level function) is drawn at once."""
    if _ASIDE is not None:
        try:
            blob = pickle.dumps((fn, args))
        except (pickle.PicklingError, TypeError, AttributeError):  # not picklable
            pass
        else:
            _ASIDE.submit(blob)
            return
    fn(*args)


@contextlib.contextmanager
def drawing_aside(workers: int | None = None, *, prestart: bool = False) -> Iterator[None]:
    """While open, :func:`draw` hands figures to up to ``workers`` worker processes
    (default: :func:`spare_cpus`, at most :data:`MAX_WORKERS`; 0, or a context already open:
    :func:`draw` draws at once) and returns; a worker is started at the first figure, or,
    with ``prestart`` (figures are sure to come), at once, so that it has imported matplotlib
    by then. On closing, the figures no worker has started
    are drawn here, the others awaited and the workers ended: every figure is written when
    it closes. A worker that dies (killed, out of memory) has its figures drawn here. When
    the ``with`` body raises, the figures not started are dropped, the running ones awaited
    (no process is left behind), and its error goes on.

    Raises:
        Exception: the first error (in :func:`draw` order) a figure raised, once every figure
            is done.
    """
    global _ASIDE  # noqa: PLW0603 (the open context)
    n = min(spare_cpus(), MAX_WORKERS) if workers is None else workers
    if n < 1 or _ASIDE is not None:
        yield
        return
    aside = _ASIDE = _Aside(n)
    if prestart:
        aside.start_worker()
    try:
        try:
            yield
        finally:
            _ASIDE = None
    except BaseException:
        aside.drop()
        raise
    try:
        aside.finish()
    except BaseException:  # interrupted while drawing here
        aside.drop()
        raise
    if aside.errors:
        raise aside.errors[min(aside.errors)]
