"""Convergence rate: training loss against iterations and against training time (pure).

Shi et al. 2016 compared how fast the loss falls on 1, 2 and 4 GPUs at the same global batch
(docs/measurement.md, "Convergence rate"). dlperf stores every iteration's loss and step time (the
slowest rank's, for data-parallel runs), in order: the first iteration, the warm-up, the
measured segment. From them:

* **training time** after iteration ``i`` is the sum of the step times of iterations ``0..i``
  (the first iteration, with its compilation, included). It leaves out dlperf's own pauses
  between warm-up windows (reading the timer), which are not training;
* the **smoothed loss** at iteration ``i`` is the mean of the ``window`` losses ending at ``i``
  (a trailing moving average; a mini-batch loss alone is too noisy to compare to a target);
* the **time to target** is the training time at the first iteration whose smoothed loss is at
  or below the target loss.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

__all__ = ["DEFAULT_WINDOW", "training_time", "smoothed", "time_to_target", "curve",
           "summarize_convergence"]

#: Trailing window (iterations) of the smoothed loss.
DEFAULT_WINDOW = 10


def training_time(step_times_s: Sequence[float]) -> list[float]:
    """Cumulative training time (s) after each iteration: ``t[i] = sum(step_times_s[:i+1])``
    (a running sum)."""
    return list(itertools.accumulate(float(x) for x in step_times_s))


def smoothed(losses: Sequence[float], window: int = DEFAULT_WINDOW) -> list[float | None]:
    """Trailing mean of ``window`` losses: ``s[i] = mean(losses[i-window+1 : i+1])`` for
    ``i >= window - 1``, None before (not enough iterations yet).

    Raises:
        ValueError: ``window < 1``.
    """
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    out: list[float | None] = []
    for i in range(len(losses)):
        out.append(None if i < window - 1 else
                   math.fsum(losses[i - window + 1: i + 1]) / window)
    return out


def time_to_target(losses: Sequence[float], step_times_s: Sequence[float], target: float,
                   window: int = DEFAULT_WINDOW) -> dict[str, Any] | None:
    """The first iteration whose smoothed loss is ``<= target``, and the training time then.

    Returns ``{"iteration": i + 1 (iterations run, 1-based), "time_s": training time after
    it, "smoothed_loss": s[i]}``, or None if the target is never reached.

    Raises:
        ValueError: ``losses`` and ``step_times_s`` differ in length, or ``target`` is not a
            finite number.
    """
    if len(losses) != len(step_times_s):
        raise ValueError(f"{len(losses)} losses but {len(step_times_s)} step times")
    if not math.isfinite(target):
        raise ValueError(f"target loss must be a finite number, got {target!r}")
    t = training_time(step_times_s)
    for i, s in enumerate(smoothed(losses, window)):
        if s is not None and math.isfinite(s) and s <= target:
            return {"iteration": i + 1, "time_s": t[i], "smoothed_loss": s}
    return None


def curve(samples: dict[str, Sequence[float]], losses: dict[str, Sequence[float]]
          ) -> tuple[list[float], list[float]]:
    """All iterations in order (first, warm-up, measure): (step times s, losses)."""
    times: list[float] = []
    ls: list[float] = []
    for ph in ("first", "warmup", "measure"):
        times += [float(x) for x in samples.get(ph, [])]
        ls += [float(x) for x in losses.get(ph, [])]
    return times, ls


def summarize_convergence(samples: dict[str, Sequence[float]],
                          losses: dict[str, Sequence[float]], target: float | None,
                          window: int = DEFAULT_WINDOW) -> dict[str, Any]:
    """What a result stores about convergence: ``iterations``, ``training_time_s``,
    ``final_smoothed_loss`` (last value of :func:`smoothed`, None if fewer than ``window``
    iterations), ``window``, ``target_loss`` and, with a target, ``reached`` plus
    ``iterations_to_target`` and ``time_to_target_s`` (None when not reached)."""
    times, ls = curve(samples, losses)
    n = min(len(times), len(ls))
    times, ls = times[:n], ls[:n]
    sm = smoothed(ls, window) if ls else []
    out: dict[str, Any] = {"iterations": n, "training_time_s": math.fsum(times),
                           "final_smoothed_loss": sm[-1] if sm else None, "window": window,
                           "target_loss": target}
    if target is not None:
        hit = time_to_target(ls, times, target, window)
        out.update(reached=hit is not None,
                   iterations_to_target=hit["iteration"] if hit else None,
                   time_to_target_s=hit["time_s"] if hit else None)
    return out
