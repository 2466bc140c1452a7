"""The report's PNG figures, drawn in worker processes while the report goes on.

Drawing a figure with matplotlib (layout, text, PNG encoding) is most of ``dlperf
report``'s time. The plot functions hand each figure to :func:`draw`; while
:func:`drawing_aside` is open (``dlperf report``, ``run``/``sweep --report``) the figures are
drawn by worker processes, started with ``spawn`` (no fork of a process that holds a database
and threads), as the sections and report.html are computed here; the figures no worker has
started when it closes are drawn here. Outside it, :func:`draw` draws at once. Either way a
figure is the same PNG, byte for byte: the same function draws it from the same data with the
same matplotlib defaults (dlperf changes no ``rcParams``).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

__all__ = ["MAX_WORKERS", "draw", "drawing_aside", "spare_cpus"]

#: The most worker processes :func:`drawing_aside` starts by default (each imports
#: matplotlib and the plot's module, about 0.5-1 s of CPU, before its first figure).
MAX_WORKERS = 4


class _Aside:
    """The open :func:`drawing_aside`: its pool and the figures handed to it, in order."""

    def __init__(self, workers: int) -> None:
        self.pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
        self.jobs: list[tuple[bytes, Future[Any]]] = []  # (pickled figure, its future)


_ASIDE: _Aside | None = None


def spare_cpus() -> int:
    """The CPUs this process may run on, less the one it runs on itself (0 on one CPU)."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS, Windows
        n = os.cpu_count() or 1
    return max(0, n - 1)


def _unpickled(blob: bytes) -> None:
    """Run the figure :func:`draw` pickled (in a worker process)."""
    fn, args = pickle.loads(blob)  # noqa: S301 (this process's own pickle)
    fn(*args)


def draw(fn: Callable[..., Any], *args: Any) -> None:
    """``fn(*args)``, which writes one figure: at once, or, while :func:`drawing_aside` is
    open, in a worker process from ``args`` as they are now (pickled here), its error raised
    when the context closes. A figure whose ``fn`` or ``args`` do not pickle, or that no
    worker can take, is drawn at once."""
    if _ASIDE is not None:
        try:
            blob = pickle.dumps((fn, args))
            _ASIDE.jobs.append((blob, _ASIDE.pool.submit(_unpickled, blob)))
            return
        except (pickle.PicklingError, TypeError, AttributeError,  # not picklable
                BrokenProcessPool, RuntimeError, OSError):  # no worker to be had
            pass
    fn(*args)


@contextlib.contextmanager
def drawing_aside(workers: int | None = None) -> Iterator[None]:
    """While open, :func:`draw` hands figures to up to ``workers`` worker processes
    (default: :func:`spare_cpus`, at most :data:`MAX_WORKERS`; 0, or a context already open:
    :func:`draw` draws at once) and returns. On closing, the figures no worker has started
    are drawn here (newest first, as the workers take the oldest), the others awaited, the
    workers ended: every figure is written when it closes.

    A worker that died (killed, out of memory) has its figures drawn here. When the ``with``
    body raises, the figures not started are dropped and the running ones awaited (no
    process is left behind), and its error goes on.

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
    try:
        try:
            yield
        finally:
            _ASIDE = None
    except BaseException:
        aside.pool.shutdown(wait=True, cancel_futures=True)
        raise
    with aside.pool:
        _finish(aside.jobs)


def _finish(jobs: list[tuple[bytes, Future[Any]]]) -> None:
    """Draw here the figures no worker started, await the others; raise the first error."""
    errors: dict[int, BaseException] = {}
    for i in reversed(range(len(jobs))):
        blob, fut = jobs[i]
        if fut.cancel():
            try:
                _unpickled(blob)
            except Exception as e:  # noqa: BLE001 (raised below, in draw order)
                errors[i] = e
    for i, (blob, fut) in enumerate(jobs):
        if fut.cancelled():
            continue
        try:
            fut.result()
        except BrokenProcessPool:
            try:
                _unpickled(blob)
            except Exception as e:  # noqa: BLE001
                errors[i] = e
        except Exception as e:  # noqa: BLE001
            errors[i] = e
    if errors:
        raise errors[min(errors)]
