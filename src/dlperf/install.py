"""How to install what is missing, in the words of the README: the one place an install hint
is written (:func:`install_hint`).

dlperf run from a checkout of its repository (the README's ``pip install -c
constraints/ci.txt -e '.[torch]'``, or ``PYTHONPATH=src``) is told to add an extra the same
way, with CI's pins, from the repository root: ``.venv/bin/pip install -c constraints/ci.txt
-e '.[jax]'``. Installed as a package it is told ``pip install 'dlperf[jax]'``. The extras
are those of ``pyproject.toml`` (docs/install.md lists them).

This module imports nothing of dlperf, so every package may use it (a framework adapter's
``available()`` too).
"""

from __future__ import annotations

import os
import shlex
import sys
from functools import lru_cache
from pathlib import Path

__all__ = ["source_root", "install_hint", "pip_command"]


@lru_cache(maxsize=1)
def source_root() -> Path | None:
    """The repository root when dlperf runs from a checkout: the folder above ``src/dlperf``
    that holds ``pyproject.toml`` and ``constraints/ci.txt``; None for an installed package."""
    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").is_file() and (root / "constraints" / "ci.txt").is_file():
        return root
    return None


def pip_command(root: Path | None = None) -> str:
    """The pip of the Python that runs dlperf: ``.venv/bin/pip`` (relative, as the README
    writes it) when that is the venv in ``root``, else ``PYTHON -m pip``."""
    prefix = Path(sys.prefix).resolve()
    if root is not None and prefix == (root / ".venv").resolve():
        return ".venv/bin/pip"
    exe = sys.executable or "python3"
    return f"{shlex.quote(exe)} -m pip"


def _pins(extra: str) -> str:
    """``-c constraints/ci.txt `` for a CPU extra; nothing for a GPU one (``*-cuda``): CI's
    pins are CPU builds (``torch==...+cpu``)."""
    return "" if extra.endswith("-cuda") else "-c constraints/ci.txt "


def install_hint(extra: str, gpu_extra: str | None = None) -> str:
    """The command that installs dlperf's ``extra`` (e.g. ``jax``), as the README installs
    dlperf: from a checkout ``[cd ROOT && ].venv/bin/pip install -c constraints/ci.txt -e
    '.[jax]'`` (CI's pins; ``cd`` only when the working folder is elsewhere), else ``pip
    install 'dlperf[jax]'``. With ``gpu_extra``, the NVIDIA GPU variant follows in parentheses
    (from a checkout without ``-c constraints/ci.txt``: CI pins CPU builds).
    """
    root = source_root()
    if root is None:
        hint = f"pip install 'dlperf[{extra}]'"
        gpu = f"pip install 'dlperf[{gpu_extra}]'" if gpu_extra else ""
    else:
        try:
            here = Path(os.getcwd()).resolve() == root
        except OSError:  # the working folder is gone
            here = False
        cd = "" if here else f"cd {shlex.quote(str(root))} && "
        pip = pip_command(root)
        hint = f"{cd}{pip} install {_pins(extra)}-e '.[{extra}]'"
        gpu = f"{cd}{pip} install {_pins(gpu_extra)}-e '.[{gpu_extra}]'" if gpu_extra else ""
    return hint + (f" (for NVIDIA GPUs: {gpu})" if gpu else "")
