"""A source model's spec (``file:``, ``hf:``, ``timm:``) made in a child process with a time
and a memory limit.

Making the spec of ``file:PATH.py:FUNCTION`` runs the user's code: the file is imported and
the function called (:mod:`dlperf.zoo.sources.custom.contract`). In ``dlperf run`` and
``dlperf sweep`` that happens while the points are validated, before any worker starts, so a
file that hangs at import (a ``time.sleep``, a lock, a network call) would hang dlperf itself,
outside the per-point ``--timeout``. Within :func:`bounded` (the two commands' bodies) the
spec is made instead by ``python -m dlperf.zoo.sources.custom.spec_child NAME OUT`` (the
same :func:`dlperf.zoo.get_spec`, in a fresh process of this interpreter, working directory and
``sys.path``), killed with its process group after the bound (``--timeout``; a sweep file's
``defaults.timeout_s``), its address space capped (:func:`memory_limit_bytes`), and the spec
comes back pickled. ``hf:`` and ``timm:`` names go the same way: building a model of absurd
size on the meta device grew to gigabytes in minutes before any point started. The answer, spec or error, is
cached per name and file version, so a sweep of many points starts one child per model.

Outside :func:`bounded` (``dlperf predict``/``list``, the Python API, the worker, which its
launcher already bounds) the spec is made in the calling process as before.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dlperf import errors
from dlperf.errors import ConfigError, DlperfError
from dlperf.procgroup import end_group, wait_group

#: The bound in force (seconds), innermost last; empty: specs are made in this process.
_BOUNDS: list[float] = []
#: (name, file version) -> ("ok", spec) or ("error", error class name, message).
_ANSWERS: dict[tuple[str, int], tuple[Any, ...]] = {}
#: The child's module (not imported here: it imports :mod:`dlperf.zoo`, which imports this).
CHILD = "dlperf.zoo.sources.custom.spec_child"
#: Environment variable: GiB of address space a spec child may take (:func:`memory_limit_bytes`).
MEMORY_ENV = "DLPERF_SPEC_MEMORY_GB"
#: Characters of the child's output quoted when it dies without an answer.
_TAIL = 1500


@contextlib.contextmanager
def bounded(timeout_s: float) -> Iterator[None]:
    """Within: ``file:`` specs are made in a child process stopped after ``timeout_s``."""
    _BOUNDS.append(float(timeout_s))
    try:
        yield
    finally:
        _BOUNDS.pop()


def current_bound() -> float | None:
    """The bound in force (seconds), or None outside :func:`bounded`."""
    return _BOUNDS[-1] if _BOUNDS else None


def resolve(name: str, stamp: int, timeout_s: float) -> Any:
    """The spec of ``file:`` model ``name`` (file version ``stamp``), made in a child process
    that may take ``timeout_s``; cached per name and version (also under the spec's canonical
    name, which the validated config carries).

    Raises:
        ConfigError: the child ran out of time (it is killed), died without an answer (the
            tail of its output quoted), or the spec was refused there (the same message as in
            this process); UnavailableError and the other errors of :mod:`dlperf.errors` as
            raised there.
    """
    key = (name, stamp)
    if key not in _ANSWERS:
        answer = _run_child(name, timeout_s)
        _ANSWERS[key] = answer
        if answer[0] == "ok":
            _ANSWERS[(answer[1].name, stamp)] = answer
    answer = _ANSWERS[key]
    if answer[0] == "ok":
        return answer[1]
    cls = getattr(errors, answer[1], None)
    if not (isinstance(cls, type) and issubclass(cls, DlperfError)):
        cls = ConfigError
    raise cls(answer[2])


#: The most :data:`MEMORY_ENV` may give (GiB): 2^20 (1 PiB), far over any host's memory and
#: under what the address-space limit can hold.
MAX_SPEC_MEMORY_GB = 2**20


def memory_limit_bytes() -> int:
    """The address space a spec child may take: ``$DLPERF_SPEC_MEMORY_GB`` GiB, else half the
    host's memory and at least 4 GiB (importing torch and transformers takes under 1 GiB of
    address space; building an absurd model on the meta device takes what it can get).

    Raises:
        ConfigError: the variable is set but not a number above 0 and at most
            :data:`MAX_SPEC_MEMORY_GB`.
    """
    raw = os.environ.get(MEMORY_ENV, "").strip()
    if raw:
        try:
            gb = float(raw)
        except ValueError:
            gb = float("nan")
        if not 0 < gb <= MAX_SPEC_MEMORY_GB:  # inf and 1e30 were raw OverflowErrors
            raise ConfigError(f"{MEMORY_ENV}={raw!r}: give the GiB of address space a model's "
                              f"spec may take, a number above 0 and at most "
                              f"{MAX_SPEC_MEMORY_GB:,} (e.g. 16), or unset it for half the "
                              "host's memory")
        return int(gb * 2**30)
    try:
        import psutil

        total = int(psutil.virtual_memory().total)
    except Exception:  # noqa: BLE001 - no psutil or no /proc: the floor
        total = 0
    return max(4 * 2**30, total // 2)


def _limit_memory(pid: int) -> None:
    """Cap the address space of process ``pid`` (Linux ``prlimit``; elsewhere nothing)."""
    import resource

    if hasattr(resource, "prlimit"):
        lim = memory_limit_bytes()
        with contextlib.suppress(OSError, ValueError):
            resource.prlimit(pid, resource.RLIMIT_AS, (lim, lim))


def _run_child(name: str, timeout_s: float) -> tuple[Any, ...]:
    """Run the child for ``name``; its answer, or an ``("error", ...)`` of why there is none."""
    path = (name[5:].partition("?")[0].rpartition(":")[0] if name.startswith("file:")
            else f"the {name.partition(':')[0]}: source")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    from dlperf.tempdirs import owned_tempdir

    memory_limit_bytes()  # a bad $DLPERF_SPEC_MEMORY_GB is refused before the child starts
    with owned_tempdir("dlperf-spec-") as tmp:
        out, log = Path(tmp) / "spec.pickle", Path(tmp) / "output.txt"
        with open(log, "wb") as logf:
            proc = subprocess.Popen([sys.executable, "-m", CHILD, name, str(out)],
                                    stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, env=env,
                                    start_new_session=True)
            _limit_memory(proc.pid)
            try:
                rc = wait_group(proc, timeout_s)  # what the file forked ends with it
            except subprocess.TimeoutExpired:
                _kill(proc)
                return ("error", "ConfigError",
                        f"model {name!r}: importing {path} and calling its function to make "
                        f"the model's spec took more than {timeout_s:g} s and was stopped (the "
                        "time limit is --timeout of dlperf run, a sweep file's defaults."
                        "timeout_s); a model file must not wait at import: fix the file, or "
                        "raise the limit if building the model is slow")
            except BaseException:  # Ctrl-C: the child is in a session of its own
                _kill(proc)
                raise
        if rc == 0 and out.is_file():
            with open(out, "rb") as f:
                answer = tuple(pickle.load(f))
            if answer[0] == "error" and "MemoryError" in str(answer[2]):
                answer = (*answer[:2], f"{answer[2]} (making a spec may take "
                          f"{memory_limit_bytes() / 2**30:.1f} GiB of address space, "
                          f"{MEMORY_ENV}; the model is too large to describe)")
            return answer
        tail = log.read_bytes()[-_TAIL:].decode("utf-8", "replace").strip()
        how = (f"was killed by signal {signal.Signals(-rc).name}" if rc < 0
               else f"exited with status {rc}")
        return ("error", "ConfigError",
                f"model {name!r}: the process making the model's spec from {path} {how} "
                f"without an answer{': ' + tail if tail else ''}")


def _kill(proc: subprocess.Popen) -> None:
    end_group(proc)
