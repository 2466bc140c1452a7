"""Measuring BASE and NEW alternately, for the regression gate (``dlperf compare --run``).

A side is a directory (a checkout of the code at one revision) and, optionally, environment
variables of its own. Each round runs ``dlperf run RUN_FLAGS`` once per side, as a child
process whose working directory is the side's directory, with ``DIR/src`` (where it exists)
first on ``PYTHONPATH`` and the side's variables set: a ``file:`` model given by a relative
path is the side's own file, a package of a ``src/`` layout is the side's own code, and
``python -m`` puts the directory itself first on the module path. Round ``r`` stores repeat
``r`` of every point under the side's tag (``--tag``, ``--repeats r+1``: a tagged run resumes
the repeats it holds and runs the next), so the results file holds ``rounds`` runs a side.

The order alternates as BASE NEW, NEW BASE, BASE NEW, ... (an ABBA order): a slow change of the
host during the gate (other work, clocks, temperature) falls on both sides alike instead of on
whichever ran last. This is what ``asv run --interleave-processes`` does for the processes of
two commits (asv 0.3 release notes: "to obtain better sampling over long-time background
performance variations"); hyperfine runs each command's runs together (its issue #21 asks for
interleaving). The comparison itself is :func:`dlperf.report.regress.compare_records`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlperf.errors import ConfigError

__all__ = ["Side", "RESERVED_FLAGS", "check_run_flags", "parse_env", "rounds_order",
           "side_environment", "run_rounds", "RoundResult", "run_child", "INTERRUPTED"]

#: ``dlperf run`` flags the gate sets itself (or that make no sense in it).
RESERVED_FLAGS = ("--db", "--tag", "--repeats", "--rerun", "--retry-failed", "--failed-final",
                  "--report", "--emit-slurm", "--node-rank", "--nnodes", "--rdzv-endpoint")


@dataclass
class Side:
    """One side of the gate: ``name`` (``BASE`` or ``NEW``), its ``tag`` in the results
    file, the ``directory`` its runs start in and its own environment variables ``env``."""

    name: str
    tag: str
    directory: Path
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class RoundResult:
    """One ``dlperf run`` of one side in one round: its exit status and the last lines of its
    output (stderr)."""

    round: int
    side: str
    returncode: int
    tail: str


def parse_env(items: Sequence[str] | None, flag: str) -> dict[str, str]:
    """``["K=V", ...]`` of ``--base-env``/``--new-env`` as a dict.

    Raises:
        ConfigError: an item without ``=`` or with an empty name.
    """
    out: dict[str, str] = {}
    for item in items or ():
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ConfigError(f"{flag} {item!r}: give NAME=VALUE, e.g. {flag} "
                              "OMP_NUM_THREADS=4")
        out[key.strip()] = value
    return out


def check_run_flags(args: Sequence[str]) -> list[str]:
    """The ``dlperf run`` flags after ``--``, checked: they must name what to measure and must
    not set what the gate sets (:data:`RESERVED_FLAGS`).

    Raises:
        ConfigError: no flags, or a reserved one.
    """
    args = list(args)
    if not args:
        raise ConfigError("dlperf compare --run BASE_DIR NEW_DIR needs the points to measure "
                          "after --, as for dlperf run, e.g. dlperf compare --run ../base . "
                          "--fail-if-slower 5% -- --model file:bench/model.py:build -b 32")
    for a in args:
        name = a.split("=", 1)[0]
        if name in RESERVED_FLAGS:
            raise ConfigError(f"{name} is set by dlperf compare --run (each side's runs go into "
                              "its --db under the tags base and new, --rounds runs a side); "
                              "leave it out of the flags after --")
    return args


def rounds_order(rounds: int) -> list[tuple[int, int]]:
    """``(round, side index)`` in the order run: BASE NEW, NEW BASE, BASE NEW, ... (0 is BASE).

    Raises:
        ConfigError: fewer than 2 rounds (a run-level interval needs 2 runs a side), or
            more than :data:`~dlperf.config.limits.MAX_REPEATS`.
    """
    from dlperf.config.limits import MAX_REPEATS, over

    if rounds < 2:
        raise ConfigError(f"--rounds {rounds}: give 2 or more (a point is judged on at least 2 "
                          "runs a side; 5, the default, leaves spares and a narrow interval)")
    msg = over(rounds, MAX_REPEATS, "runs per point (round r is dlperf run --repeats r)")
    if msg:  # the order itself was a list of 2 x 10^9 pairs before anything ran
        raise ConfigError(f"--rounds {msg}")
    return [(r, s) for r in range(rounds) for s in ((0, 1) if r % 2 == 0 else (1, 0))]


def side_environment(side: Side, base_env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of ``side``'s runs: ``base_env`` (default: this process's) with the
    side's variables, and ``DIR/src`` first on ``PYTHONPATH`` where that folder exists (the
    side's variables win, ``PYTHONPATH`` among them)."""
    env = dict(os.environ if base_env is None else base_env)
    src = side.directory / "src"
    if src.is_dir():
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(src.resolve()),
                                                        env.get("PYTHONPATH")) if p)
    env.update(side.env)
    return env


#: How long an interrupted gate waits for the side's ``dlperf run`` to store what it measured
#: and exit (seconds) before it stops it.
CHILD_STOP_S = 120.0
#: Exit statuses of a ``dlperf run`` that was interrupted (SIGINT: 130) or terminated
#: (SIGTERM: 143), or that the signal ended before its own handler was in place (negative).
INTERRUPTED = (130, 143, -signal.SIGINT, -signal.SIGTERM)


def run_child(cmd: Sequence[str], **how: Any) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, **how)``, except when this process is interrupted while the child
    runs: the child gets SIGINT too (a terminal's Ctrl-C reaches both already) and is waited
    for, up to :data:`CHILD_STOP_S`, so the result it is storing is stored whole (``subprocess.
    run`` kills it after 0.25 s); then the ``KeyboardInterrupt`` goes on.

    Raises:
        KeyboardInterrupt: this process was interrupted (after the child ended).
    """
    capture = how.pop("capture_output", False)
    how.pop("check", None)
    if capture:
        how.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p = subprocess.Popen(list(cmd), **how)
    try:
        out, err = p.communicate()
    except KeyboardInterrupt:
        deadline = time.monotonic() + CHILD_STOP_S
        while p.poll() is None:
            try:
                p.send_signal(signal.SIGINT)
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            except KeyboardInterrupt:  # Ctrl-C again: keep waiting for the store to end
                continue
        raise
    return subprocess.CompletedProcess(list(cmd), p.returncode, out, err)


def run_rounds(sides: tuple[Side, Side], run_args: Sequence[str], db: Path, rounds: int, *,
               runner: Callable[..., Any] = run_child,
               echo: Callable[[str], None] = print) -> list[RoundResult]:
    """Run ``dlperf run RUN_ARGS`` for each side in :func:`rounds_order`, storing into ``db``
    (an absolute path) under each side's tag, repeat ``r`` in round ``r``; ``echo`` gets one
    line per run. A run that exits 1 (its points failed or were unavailable: stored as
    results) does not stop the gate; the side's later rounds pass ``--failed-final``, so a
    point that failed is not tried again (one attempt per round, not ``r``). A side whose run exits otherwise (its code refused the
    flags: a ``file:`` model gone from NEW, say) is not run again and its error is echoed: the
    comparison then finds its points missing, which fails the gate.

    A run that was interrupted (exit 130 or 143: a Ctrl-C or ``kill`` that reached it, not
    this process) stops the gate as an interrupt of its own would.

    Raises:
        ConfigError: both sides' runs exited so (the flags themselves are wrong), with the
            last output lines.
        KeyboardInterrupt: this process or a side's run was interrupted; what was stored
            stays (``--resume`` goes on).
    """
    out: list[RoundResult] = []
    order = rounds_order(rounds)
    broken: dict[str, str] = {}
    failing: set[str] = set()
    for k, (r, s) in enumerate(order, 1):
        side = sides[s]
        if side.name in broken:
            continue
        cmd = [sys.executable, "-m", "dlperf", "run", *run_args, "--db", str(db),
               "--tag", side.tag, "--repeats", str(r + 1)]
        echo(f"[{k}/{len(order)}] round {r + 1} of {rounds}: {side.name} "
             f"({side.directory}, tag {side.tag})")
        # points that failed in an earlier round are not tried again: the code is the same
        final = ["--failed-final"] if side.name in failing else []
        how = {"cwd": str(side.directory), "env": side_environment(side),
               "capture_output": True, "text": True, "check": False}
        proc = runner([*cmd, *final], **how)
        if final and proc.returncode == 2 and "--failed-final" in (proc.stderr or ""):
            proc = runner(cmd, **how)  # a side's older dlperf, without the flag
        lines = [ln for ln in (proc.stderr or "").splitlines() if ln.strip()]
        tail = "\n".join(lines[-12:])
        out.append(RoundResult(r, side.name, proc.returncode, tail))
        if proc.returncode in INTERRUPTED:
            raise KeyboardInterrupt
        last = next((ln for ln in reversed(lines) if " run, " in ln), None)
        if last:
            echo(f"    {last.strip()}")
        if proc.returncode not in (0, 1):
            broken[side.name] = tail
            echo(f"    {side.name}: dlperf run exited with status {proc.returncode} and is not "
                 f"run again; its last lines:\n{tail}")
            if len(broken) == 2:
                raise ConfigError(f"dlperf run failed on both sides (in {sides[0].directory} "
                                  f"and {sides[1].directory}); the last lines:\n{tail}")
        elif proc.returncode == 1:
            failing.add(side.name)
            echo(f"    {side.name}: some points failed or were unavailable (stored as such; "
                 "the comparison shows them)")
    return out
