"""SIGINT and SIGTERM deferred, for the whole process, around work that must finish whole (a
result being stored).

Blocking the signals with ``pthread_sigmask`` in the thread that stores is not enough: the
kernel hands a process-directed signal to any thread that does not block it (a heartbeat
thread, a progress bar's), Python's C handler marks it there, and the main thread then raises
``KeyboardInterrupt`` at its next instruction, inside the store: the transaction is rolled back
and the result just measured is dropped (8 of 8 trials of the attack in issue 40).

So the deferral is done where Python runs the handlers. :func:`deferring` (in the main thread,
around a command's work) puts :func:`_handler` in front of the handlers of SIGINT and SIGTERM.
While any thread is inside :func:`held` (a counter, not a mask), a signal that arrives is noted
(one line on stderr says so and when it acts) and nothing else happens; when the last :func:`held` block ends, each noted signal is delivered
again: in the main thread by calling the handler that was there before (a ``KeyboardInterrupt``
raised as the block ends, the store complete), from another thread by sending it to the process
again. Outside :func:`held`, the earlier handler runs at once, as if nothing were in front of it.

Without :func:`deferring` in force, :func:`held` in the main thread installs the deferral for
its own block; in another thread it cannot (only the main thread may set handlers) and blocks
the signals in that thread only, as a best effort.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

__all__ = ["SIGNALS", "deferring", "held", "pending"]

#: The signals deferred: those that stop a command (Ctrl-C, ``kill PID``).
SIGNALS = (signal.SIGINT, signal.SIGTERM)

_lock = threading.RLock()  # re-entrant: the handler runs in the main thread, maybe inside it
_depth = 0
_pending: list[int] = []
_before: dict[int, Any] = {}  # the handlers in force before :func:`deferring`, by signal
_installs = 0


def pending() -> list[int]:
    """The signals noted while :func:`held` blocks ran, not yet delivered again."""
    with _lock:
        return list(_pending)


def _call_before(signum: int, frame: FrameType | None) -> None:
    """Run the handler that was in force before the deferral, as Python would have."""
    h = _before.get(signum, signal.SIG_DFL)
    if callable(h):
        h(signum, frame)
    elif h == signal.SIG_IGN:
        return
    elif signum == signal.SIGINT:
        raise KeyboardInterrupt
    else:  # the default action (end the process): the default handler, then the signal again
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def _handler(signum: int, frame: FrameType | None) -> None:
    with _lock:
        if _depth > 0:
            if signum not in _pending:
                _pending.append(signum)
                _say(f"{signal.Signals(signum).name} noted: it acts once the result being "
                     "stored is written (a store may wait for another process's lock on the "
                     "results file; nothing stored is lost)")
            return
    _call_before(signum, frame)


def _say(text: str) -> None:
    """One line on stderr from a signal handler (a plain write: a handler may run while the
    main thread is inside a ``print``)."""
    try:
        os.write(2, f"\n{text}\n".encode("utf-8", "replace"))
    except OSError:
        pass


@contextmanager
def deferring() -> Iterator[None]:
    """While the block runs, SIGINT and SIGTERM go through the deferral (module docstring);
    the handlers in force when it starts run for them outside :func:`held` blocks. In a thread
    other than the main thread it does nothing (Python sets handlers in the main thread only).
    Nested uses share one installation."""
    global _installs
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    with _lock:
        first = _installs == 0
        if first:
            for s in SIGNALS:
                _before[s] = signal.getsignal(s)
                signal.signal(s, _handler)
        _installs += 1
    try:
        yield
    finally:
        with _lock:
            _installs -= 1
            if _installs == 0:
                for s in SIGNALS:
                    signal.signal(s, _before.pop(s, signal.SIG_DFL))


def _installed() -> bool:
    return all(signal.getsignal(s) is _handler for s in SIGNALS)


@contextmanager
def held() -> Iterator[None]:
    """SIGINT and SIGTERM wait while the block runs (any thread), then are delivered (module
    docstring); nests."""
    global _depth
    main = threading.current_thread() is threading.main_thread()
    if not main and not _installed():
        if not hasattr(signal, "pthread_sigmask"):
            yield
            return
        old = signal.pthread_sigmask(signal.SIG_BLOCK, set(SIGNALS))
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
        return
    with deferring() if main else _nothing():
        with _lock:
            _depth += 1
        try:
            yield
        finally:
            with _lock:
                _depth -= 1
                due = list(_pending) if _depth == 0 else []
                if due:
                    _pending.clear()
            for s in due:
                if main:
                    _call_before(s, None)
                else:
                    os.kill(os.getpid(), s)


@contextmanager
def _nothing() -> Iterator[None]:
    yield
