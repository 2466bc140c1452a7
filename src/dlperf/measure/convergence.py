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

Compilation is counted the same way in every framework (docs/measurement.md, "Recompiles and
time to target"), with and without it:

* **with compile** (``training_time_s``, ``time_to_target_s``): the compile work the framework
  did before its first timed iteration (``compile_before_loop_s``: JAX's ahead-of-time
  ``lower().compile()``, TensorFlow's tracing; 0 where compilation is lazy, as
  ``torch.compile``'s and MXNet's) plus the step times, which hold the compile work done
  inside steps (the first iteration; later steps that compiled);
* **without compile** (``training_time_no_compile_s``, ``time_to_target_no_compile_s``): the
  step times with each *compile step* (the first iteration, and every step after which the
  framework's compile counter moved: ``compiled_at``) counted at no more than the reference
  step, the median of the measured steps that did not compile; nothing before the loop. The
  difference is ``compile_time_s`` = ``compile_before_loop_s`` + ``compile_in_loop_s`` (the
  compile steps' excess over the reference, which includes the first iteration's other
  one-off work: autotuning, allocator growth), a measured estimate that needs no framework's
  own timer, so it means the same in each.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["DEFAULT_WINDOW", "training_time", "smoothed", "time_to_target", "curve",
           "compile_steps", "without_compile", "summarize_convergence"]

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


def curve(samples: Mapping[str, Sequence[float]], losses: Mapping[str, Sequence[float]]
          ) -> tuple[list[float], list[float]]:
    """All iterations in order (first, warm-up, measure): (step times s, losses)."""
    times: list[float] = []
    ls: list[float] = []
    for ph in ("first", "warmup", "measure"):
        times += [float(x) for x in samples.get(ph, [])]
        ls += [float(x) for x in losses.get(ph, [])]
    return times, ls


def compile_steps(samples: Mapping[str, Sequence[float]],
                  compiled_at: Mapping[str, Sequence[int]] | None) -> list[int]:
    """Indices along :func:`curve` of the compile steps: the first iteration (always: it
    carries the compilation wherever the framework compiles lazily) and each step after which
    the compile counter moved (``compiled_at``: phase -> indices into that phase's samples;
    None: no counter, the first iteration only). Sorted, without duplicates."""
    out = {0} if samples.get("first") else set()
    offset = 0
    for ph in ("first", "warmup", "measure"):
        out.update(offset + int(i) for i in (compiled_at or {}).get(ph, ())
                   if 0 <= int(i) < len(samples.get(ph, [])))
        offset += len(samples.get(ph, []))
    return sorted(out)


def without_compile(times_s: Sequence[float], steps: Sequence[int],
                    reference_s: float | None) -> list[float]:
    """``times_s`` with each compile step (index in ``steps``) counted at no more than
    ``reference_s`` (the steady step, s); unchanged where ``reference_s`` is None."""
    out = [float(x) for x in times_s]
    if reference_s is None:
        return out
    for i in steps:
        if 0 <= i < len(out):
            out[i] = min(out[i], reference_s)
    return out


def _reference_step(samples: Mapping[str, Sequence[float]],
                    compiled_at: Mapping[str, Sequence[int]] | None) -> float | None:
    """Median of the measured steps that did not compile (all measured steps if every one
    did), s; None without measured steps."""
    meas = [float(x) for x in samples.get("measure", [])]
    skip = set((compiled_at or {}).get("measure", ()))
    kept = [x for i, x in enumerate(meas) if i not in skip] or meas
    return statistics.median(kept) if kept else None


def summarize_convergence(samples: Mapping[str, Sequence[float]],
                          losses: Mapping[str, Sequence[float]], target: float | None,
                          window: int = DEFAULT_WINDOW, *,
                          compiled_at: Mapping[str, Sequence[int]] | None = None,
                          compile_before_loop_s: float | None = None) -> dict[str, Any]:
    """What a result stores about convergence: ``iterations``, ``training_time_s`` (with
    compile: ``compile_before_loop_s`` + the step times), ``training_time_no_compile_s``,
    ``final_smoothed_loss`` (last value of :func:`smoothed`, None if fewer than ``window``
    iterations), ``window``, ``target_loss``, the compile accounting (module docstring:
    ``compile_before_loop_s`` as given, None if unknown and then counted as 0;
    ``compile_in_loop_s``, ``compile_time_s``, ``compile_steps``, ``recompiles``: the compile
    steps after the first iteration) and, with a target, ``reached`` plus
    ``iterations_to_target``, ``time_to_target_s`` and ``time_to_target_no_compile_s`` (None
    when not reached). ``compiled_at``: phase -> indices of the steps after which the
    framework's compile counter moved (None: it has none)."""
    times, ls = curve(samples, losses)
    n = min(len(times), len(ls))
    times, ls = times[:n], ls[:n]
    steps = [i for i in compile_steps(samples, compiled_at) if i < n]
    bare = without_compile(times, steps, _reference_step(samples, compiled_at))
    before = float(compile_before_loop_s or 0.0)
    in_loop = math.fsum(times) - math.fsum(bare)
    sm = smoothed(ls, window) if ls else []
    out: dict[str, Any] = {"iterations": n, "training_time_s": before + math.fsum(times),
                           "training_time_no_compile_s": math.fsum(bare),
                           "final_smoothed_loss": sm[-1] if sm else None, "window": window,
                           "target_loss": target, "compile_before_loop_s": compile_before_loop_s,
                           "compile_in_loop_s": in_loop, "compile_time_s": before + in_loop,
                           "compile_steps": len(steps),
                           "recompiles": sum(1 for i in steps if i > 0)}
    if target is not None:
        hit = time_to_target(ls, times, target, window)
        out.update(reached=hit is not None, iterations_to_target=None, time_to_target_s=None,
                   time_to_target_no_compile_s=None)
        if hit:
            out.update(iterations_to_target=hit["iteration"],
                       time_to_target_s=before + hit["time_s"],
                       time_to_target_no_compile_s=math.fsum(bare[:hit["iteration"]]))
    return out
