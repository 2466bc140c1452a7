"""Which frameworks are available, asked of every adapter at once (``dlperf env``).

An adapter's :meth:`~dlperf.frameworks.base.FrameworkAdapter.available` that imports its
framework to answer (``available_imports = True``: PyTorch, TensorFlow) takes seconds of CPU
(on a 2-core VM, TensorFlow with Keras 4-7 s, PyTorch 1.5-3 s). :func:`available_all` asks
each of those in a child process of its own (``python -m dlperf.frameworks.probe NAME``), all
started together, and the others (JAX, MXNet: package metadata, no import) in this process
meanwhile; the children's answers are the same calls' answers, and this process never imports
a framework (nor waits for its exit handlers). A child that does not answer within
``timeout_s`` is stopped and its framework reported unavailable with that reason.

Run as a module, it prints the JSON ``[available, version or reason]`` of one framework as
the last line of its standard output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from typing import IO

#: How long one framework's child may take to answer (s): TensorFlow's import on a busy 2-core
#: host took up to 12 s; a hung import (a driver that never answers) ends here, not never.
PROBE_TIMEOUT_S = 180.0


def imports_to_answer(name: str) -> bool:
    """Whether the adapter of framework ``name`` imports the framework in ``available()``
    (its class attribute ``available_imports``; False where it has none).

    Raises:
        ConfigError: ``name`` is not a framework.
    """
    from dlperf.frameworks import get_adapter

    return bool(getattr(get_adapter(name), "available_imports", False))


def _start(name: str) -> tuple[subprocess.Popen[bytes], IO[bytes], IO[bytes]]:
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.Popen([sys.executable, "-m", __name__, name], stdin=subprocess.DEVNULL,
                            stdout=out, stderr=err, env=env)
    return proc, out, err


def _answer(name: str, proc: subprocess.Popen[bytes], out: IO[bytes], err: IO[bytes],
            timeout_s: float) -> tuple[bool, str]:
    """Wait for ``proc`` (at most ``timeout_s``), pass on what it wrote (standard output
    before its answer to ``sys.stdout``, standard error to file descriptor 2, where
    :func:`~dlperf.frameworks.common.quiet_native_logs` filters it) and return its answer."""
    try:
        rc = proc.wait(timeout=max(timeout_s, 0.0))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return False, (f"importing {name} to read its version did not finish within "
                       f"{timeout_s:g} s and was stopped")
    out.seek(0)
    err.seek(0)
    text, errs = out.read().decode("utf-8", "replace"), err.read()
    sys.stderr.flush()
    if errs:
        os.write(2, errs)
    head, _, last = text.rstrip("\n").rpartition("\n")  # main() wrote "\n" before its answer
    if head:
        sys.stdout.write(head)
    try:
        ok, what = json.loads(last)
        return bool(ok), str(what)
    except (ValueError, TypeError):
        tail = errs.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
        return False, (f"importing {name} to read its version failed (exit status {rc})"
                       + (f": {tail[0]}" if tail[0] else ""))


def available_all(names: Iterable[str], timeout_s: float = PROBE_TIMEOUT_S,
                  children: Iterable[str] | None = None) -> dict[str, tuple[bool, str]]:
    """``name -> adapter.available()`` for each framework of ``names``, in their order: those
    of ``children`` (default: those whose adapters import the framework to answer,
    :func:`imports_to_answer`) each in a child process, all started at once; the others here
    while the children run (see the module docstring). ``timeout_s`` bounds the wait for all
    children together.

    Raises:
        ConfigError: a name is not a framework.
    """
    from dlperf.frameworks import get_adapter

    names = list(names)
    heavy = ([n for n in names if imports_to_answer(n)] if children is None
             else [n for n in names if n in set(children)])
    started: dict[str, tuple[subprocess.Popen[bytes], IO[bytes], IO[bytes]]] = {}
    answers: dict[str, tuple[bool, str]] = {}
    try:
        for n in heavy:
            started[n] = _start(n)
        for n in names:
            if n not in started:
                answers[n] = get_adapter(n).available()
        deadline = time.monotonic() + timeout_s
        for n, (proc, out, err) in started.items():
            answers[n] = _answer(n, proc, out, err, deadline - time.monotonic())
    finally:
        for proc, out, err in started.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            out.close()
            err.close()
    return {n: answers[n] for n in names}


def main(argv: list[str] | None = None) -> int:
    """Print ``json.dumps([ok, what])`` of ``get_adapter(NAME).available()`` (NAME: the one
    argument) as the last line of standard output, as dlperf's own process does it
    (:data:`dlperf.OWNS_PROCESS`: TensorFlow is imported without its optional imports)."""
    import dlperf
    from dlperf.frameworks import get_adapter

    (name,) = sys.argv[1:] if argv is None else argv
    dlperf.OWNS_PROCESS = True
    ok, what = get_adapter(name).available()
    sys.stdout.write("\n" + json.dumps([bool(ok), str(what)]) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
