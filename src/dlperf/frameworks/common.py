"""What every framework adapter shares: the memory record, the optimizer record, the
process's peak RSS, native start-up log lines kept quiet (:func:`quiet_native_logs`), and the
interpreter of a framework that runs in a Python of its own
(:func:`framework_python`, :func:`check_framework_python`, :func:`worker_interpreter`; the
launcher starts such a framework's workers with it). No framework imports here, and nothing
from :mod:`dlperf.launch` (which imports this module, not the other way round).
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dlperf.errors import ConfigError
from dlperf.registry import FRAMEWORKS


def peak_rss_bytes() -> int:
    """This process's peak resident set size in bytes (``getrusage``: KiB on Linux, bytes on
    macOS)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)


def memory_record(peak_allocated_bytes: int | None = None, peak_reserved_bytes: int | None = None,
                  nvml_used_bytes: int | None = None) -> dict[str, int | None]:
    """The memory part of a result, in bytes, with the process's peak RSS filled in; the
    device fields are None where the framework cannot tell them (a CPU run)."""
    return {"peak_rss_bytes": peak_rss_bytes(), "peak_allocated_bytes": peak_allocated_bytes,
            "peak_reserved_bytes": peak_reserved_bytes, "nvml_used_bytes": nvml_used_bytes}


def optimizer_flags(o: Any, implementation: str | bool = "default") -> dict[str, Any]:
    """The ``flags["optimizer"]`` record of a zoo :class:`~dlperf.zoo.spec.OptimizerSpec` ``o``
    (name, learning rate, momentum, weight decay; betas and eps for Adam/AdamW) and the
    framework's ``implementation`` of it, under ``foreach`` (torch: ``"default"``, or the
    ``foreach=`` keyword passed)."""
    rec: dict[str, Any] = {"name": o.name, "lr": o.lr, "momentum": o.momentum,
                           "weight_decay": o.weight_decay, "foreach": implementation}
    if o.name != "sgd":
        rec.update(betas=list(o.betas), eps=o.eps)
    return rec


def framework_python(framework: str) -> str | None:
    """The interpreter that runs ``framework``'s workers when it is not this one, else None.

    Read from the environment variable named by the registry (``DLPERF_MXNET_PYTHON`` for
    MXNet, whose numpy < 1.24 cannot share a venv with the other frameworks).

    Raises:
        ConfigError: the variable is unset, or names no executable file; the message says how
            to make the environment.
    """
    info = FRAMEWORKS.get(framework)
    if info is None or info.python_env is None:
        return None
    var = info.python_env
    path = os.environ.get(var, "").strip()
    how = f"make it with `{info.setup}`" if info.setup else "point it at that interpreter"
    if not path:
        raise ConfigError(f"framework {framework!r} runs in an interpreter of its own, given by "
                          f"{var}, which is not set; {how}")
    p = Path(path).expanduser()
    if not p.is_file() or not os.access(p, os.X_OK):
        raise ConfigError(f"{var}={path!r} is not an executable Python interpreter; {how}")
    return str(p)


def check_framework_python(framework: str, timeout_s: float = 120.0) -> str | None:
    """Check, before anything runs, that ``framework``'s own interpreter (if it has one) can
    import the framework and dlperf's worker; return the framework's version there, or None
    when the framework runs in this interpreter.

    Raises:
        ConfigError: the interpreter is missing, the import fails (the error's last line
            is quoted, with how to make the environment), or it reports no version.
    """
    python = framework_python(framework)
    if python is None:
        return None
    info = FRAMEWORKS[framework]
    from dlperf.tempdirs import owned_tempdir

    with owned_tempdir("dlperf-") as tmp:
        exe, wenv = worker_interpreter(framework, Path(tmp))
        code = (f"import importlib.metadata as m, dlperf.worker; import {framework}; "
                f"print(m.version({framework!r}))")
        try:
            cp = subprocess.run([exe, "-c", code], capture_output=True, text=True,
                                timeout=timeout_s, env={**os.environ, **wenv})
        except (OSError, subprocess.TimeoutExpired) as e:
            raise ConfigError(f"{info.python_env}={python!r} could not be run ({e}); make the "
                              f"environment with `{info.setup}`") from None
    if cp.returncode != 0:
        last = (cp.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise ConfigError(f"{info.python_env}={python!r} cannot run dlperf's {framework} worker: "
                          f"{last}; make the environment with `{info.setup}`")
    if not cp.stdout.strip():
        raise ConfigError(f"{info.python_env}={python!r} ran but did not report a {framework} "
                          f"version: it is not a Python interpreter with {framework}; make the "
                          f"environment with `{info.setup}`")
    return cp.stdout.strip().splitlines()[-1]


def worker_interpreter(framework: str, tmp: Path) -> tuple[str, dict[str, str]]:
    """``(python, extra environment)`` for a worker of ``framework``.

    This interpreter and nothing extra, unless the framework has an interpreter of its own
    (:func:`framework_python`). That interpreter gets this dlperf's source on its path, and
    nothing else of this environment: a folder under ``tmp`` holding only a link named
    ``dlperf`` to this package is put first on ``PYTHONPATH`` (this venv's site-packages would
    bring numpy 2 into a numpy 1.23 interpreter).
    """
    python = framework_python(framework)
    if python is None:
        return sys.executable, {}
    pkgs = tmp / "dlperf-src"
    pkgs.mkdir(exist_ok=True)
    link = pkgs / "dlperf"
    if not link.exists():
        link.symlink_to(Path(__file__).resolve().parent.parent, target_is_directory=True)
    old = os.environ.get("PYTHONPATH")
    return python, {"PYTHONPATH": str(pkgs) + (os.pathsep + old if old else "")}


#: A line of the C++ logging that TensorFlow and XLA use (absl / glog format):
#: ``I0000 00:00:1796299601.823106   23165 port.cc:153] message``: severity, date, time, thread,
#: file:line.
_NATIVE_LOG_LINE = re.compile(r"^([IWEF])\d{4} [\d:.]+\s+\d+ [^\]\s]+:\d+\] ?(.*)$")
#: absl's notice before its logging is set up; it comes before every early line.
_ABSL_NOTICE = "WARNING: All log messages before absl::InitializeLog() is called are written"


def filter_native_log(text: str) -> str:
    """``text`` (what native code wrote to stderr) without the C++ log lines of severity INFO
    and WARNING and their continuation lines, without absl's pre-initialisation notice, and
    with each remaining line once (TensorFlow 2.21's shared libraries each print the same
    start-up lines, so they came twice). Errors (``E``/``F`` lines) and any other output stay.

    Why not ``TF_CPP_MIN_LOG_LEVEL``: TensorFlow 2.21 writes its start-up lines (the oneDNN
    notice, the CPU-feature guard) before absl's logging reads it, so they print at any level
    (checked: ``TF_CPP_MIN_LOG_LEVEL=3 python -c 'import tensorflow'``).
    """
    kept: list[str] = []
    seen: set[str] = set()
    dropping = False
    for line in text.splitlines():
        m = _NATIVE_LOG_LINE.match(line)
        if line.startswith(_ABSL_NOTICE):
            dropping = False
            continue
        if m is not None:
            dropping = m.group(1) in "IW"
            key = m.group(1) + m.group(2)
        else:
            key = line
        if dropping or key in seen:
            continue
        seen.add(key)
        kept.append(line)
    return "".join(k + "\n" for k in kept)


@contextlib.contextmanager
def quiet_native_logs() -> Iterator[None]:
    """Within: what is written to file descriptor 2 (native libraries write there directly,
    past ``sys.stderr``) is collected and, on exit, written back through
    :func:`filter_native_log`: a framework imported here (``dlperf env``) prints no start-up
    log lines, while its errors still show. Python's own ``sys.stderr`` is flushed around it."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            rest = filter_native_log(tmp.read().decode("utf-8", "replace"))
            if rest:
                sys.stderr.write(rest)
                sys.stderr.flush()
