"""Which frameworks are available, asked of every adapter at once (``dlperf env``).

An adapter's :meth:`~dlperf.frameworks.base.FrameworkAdapter.available` that imports its
framework to answer (``available_imports = True``: PyTorch, TensorFlow) takes seconds of CPU
(on a 2-core VM, TensorFlow with Keras 4-7 s, PyTorch 1.5-3 s). :func:`available_all` asks
each of those in a child process of its own, all started together, and the others (JAX, MXNet:
package metadata, no import) in this process meanwhile. A child is a fork of this process
(``os.fork``): it starts with what this process has imported, at no cost of its own, asks the
adapter as this process would and writes the answer to a file; it ends with ``os._exit``
(TensorFlow's exit handlers never run). This process never imports a framework. A child that
does not answer within ``timeout_s`` is stopped and its framework reported unavailable with
that reason. Where there is no ``fork`` (Windows) every adapter is asked here, one after the
other.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Iterable
from typing import IO

#: How long the children may take to answer, all together (s): TensorFlow's import on a busy
#: 2-core host took up to 20 s; a hung import (a driver that never answers) ends here.
PROBE_TIMEOUT_S = 180.0
#: How often a waiting parent looks whether a child has ended (s).
_POLL_S = 0.01


def imports_to_answer(name: str) -> bool:
    """Whether the adapter of framework ``name`` imports the framework in ``available()``
    (its class attribute ``available_imports``; False where it has none).

    Raises:
        ConfigError: ``name`` is not a framework.
    """
    from dlperf.frameworks import get_adapter

    return bool(getattr(get_adapter(name), "available_imports", False))


class _Child:
    """One forked child asking one adapter: its pid and the files it writes (its standard
    output, its standard error, its answer)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.out: IO[bytes] = tempfile.TemporaryFile()
        self.err: IO[bytes] = tempfile.TemporaryFile()
        self.answer: IO[bytes] = tempfile.TemporaryFile()
        self.status: int | None = None
        sys.stdout.flush()
        sys.stderr.flush()
        self.pid = os.fork()
        if self.pid == 0:  # the child: never returns
            self._ask()

    def _ask(self) -> None:
        code = 3
        try:
            os.dup2(self.out.fileno(), 1)
            os.dup2(self.err.fileno(), 2)
            # Python's own streams onto those descriptors too, whatever they were (a test's
            # capture); UTF-8 here, the parent writes the text on in its own encoding
            sys.stdout = open(1, "w", encoding="utf-8", errors="replace", closefd=False)
            sys.stderr = open(2, "w", encoding="utf-8", errors="replace", closefd=False)
            import faulthandler

            if faulthandler.is_enabled():  # a fatal error's report with its standard error
                faulthandler.enable(file=sys.stderr)
            from dlperf.frameworks import get_adapter

            ok, what = get_adapter(self.name).available()
            self.answer.write(json.dumps([bool(ok), str(what)]).encode())
            self.answer.flush()
            code = 0
        except BaseException as e:  # noqa: BLE001 - said on its standard error, then exit 3
            try:
                sys.stderr.write(f"{type(e).__name__}: {e}\n")
            except BaseException:  # noqa: BLE001
                pass
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)

    def poll(self) -> bool:
        """Whether the child has ended (reaped; :attr:`status` its exit status)."""
        if self.status is None:
            pid, st = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(st)
        return self.status is not None

    def stop(self) -> None:
        """Kill the child if it runs, and reap it."""
        if not self.poll():
            try:
                os.kill(self.pid, 9)
            except ProcessLookupError:  # pragma: no cover - ended meanwhile
                pass
            self.status = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])

    def result(self) -> tuple[bool, str]:
        """Its answer, after passing on what it wrote (standard output to ``sys.stdout``,
        standard error to file descriptor 2, where
        :func:`~dlperf.frameworks.common.quiet_native_logs` filters it)."""
        self.out.seek(0)
        self.err.seek(0)
        self.answer.seek(0)
        text, errs, answer = self.out.read(), self.err.read(), self.answer.read()
        if text:
            sys.stdout.write(text.decode("utf-8", "replace"))
            sys.stdout.flush()
        sys.stderr.flush()
        if errs:
            os.write(2, errs)
        try:
            ok, what = json.loads(answer)
            return bool(ok), str(what)
        except ValueError:
            if self.status is not None and self.status < 0:  # its standard error says more
                return False, (f"importing {self.name} to read its version failed (signal "
                               f"{-self.status})")
            tail = errs.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
            return False, (f"importing {self.name} to read its version failed (exit status "
                           f"{self.status})" + (f": {tail[0]}" if tail[0] else ""))

    def close(self) -> None:
        for f in (self.out, self.err, self.answer):
            f.close()


def available_all(names: Iterable[str], timeout_s: float = PROBE_TIMEOUT_S,
                  children: Iterable[str] | None = None) -> dict[str, tuple[bool, str]]:
    """``name -> adapter.available()`` for each framework of ``names``, in their order: those
    of ``children`` (default: those whose adapters import the framework to answer,
    :func:`imports_to_answer`) each in a forked child process, all started at once; the
    others here while the children run (see the module docstring). ``timeout_s`` bounds the
    wait for all children together; a child still running then is killed and its framework
    is ``(False, why)``.

    Raises:
        ConfigError: a name is not a framework.
    """
    from dlperf.frameworks import get_adapter

    names = list(names)
    heavy = ([n for n in names if imports_to_answer(n)] if children is None
             else [n for n in names if n in set(children)])
    if not hasattr(os, "fork"):  # pragma: no cover - Windows: one after the other, here
        heavy = []
    kids: dict[str, _Child] = {}
    answers: dict[str, tuple[bool, str]] = {}
    try:
        for n in heavy:
            kids[n] = _Child(n)
        for n in names:
            if n not in kids:
                answers[n] = get_adapter(n).available()
        deadline = time.monotonic() + timeout_s
        while not all(k.poll() for k in kids.values()) and time.monotonic() < deadline:
            time.sleep(_POLL_S)
        for n, k in kids.items():
            if k.poll():
                answers[n] = k.result()
            else:
                k.stop()
                answers[n] = (False, f"importing {n} to read its version did not finish "
                                     f"within {timeout_s:g} s and was stopped")
    finally:
        for k in kids.values():
            k.stop()
            k.close()
    return {n: answers[n] for n in names}
