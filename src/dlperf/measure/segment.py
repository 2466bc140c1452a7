"""The measured segment: run with its instruments (:func:`run_segment`: power sampling and the
thread's CPU wait around it, memory peaks after it), and turned into record parts
(:func:`segment_parts`: statistics, throughput, timing truth, data wait, energy and
convergence, from the (merged) raw samples; docs/measurement.md rules 2, 3, 9)."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dlperf import stats
from dlperf.errors import NonFiniteLoss
from dlperf.heartbeat import beat
from dlperf.measure import convergence
from dlperf.measure.host import RunDelay
from dlperf.measure.loop import WALL_CHECK_ABS_S, WALL_CHECK_REL, LoopResult, measure
from dlperf.measure.power import PowerRecord, energy_summary
from dlperf.measure.power_control import PowerControl
from dlperf.measure.spread import drift_of

__all__ = ["Segment", "run_segment", "timing_check", "compile_handling", "segment_parts"]


@dataclass
class Segment:
    """One process's measured segment: the loop's raw outcome, the power record (None, with
    ``power_reason``, where there is none) and the memory peaks (bytes) read right after it,
    with NVML's peak of device memory in use when sampled (``nvml_used_peak_bytes``)."""

    loop: LoopResult
    power_record: PowerRecord | None
    power_reason: str | None
    memory: dict[str, Any]


def run_segment(session: Any, cfg: Any, delay: RunDelay) -> Segment:
    """Warm up and measure ``session``'s fused step under ``cfg.measure.iterations``
    (:func:`dlperf.measure.loop.measure`), with power sampling (``cfg.measure.power_interval_s``) and
    the schedstat reading ``delay`` right around the measured segment; data-parallel processes
    agree on their iteration counts (``session.dist.agree_max``).

    Raises:
        NonFiniteLoss: the loss became NaN or infinite during warm-up.
        Exception: whatever the framework's step raises (an out-of-memory error, ...).
    """
    dist = session.dist
    power = PowerControl(session.nvml_target, cfg.measure.power_interval_s)
    steps = [0]

    def check(handles: list[Any]) -> None:
        vals = session.losses_to_floats(handles)
        if not all(math.isfinite(x) for x in vals):
            raise NonFiniteLoss(f"loss became non-finite during warm-up: {vals[-5:]}")
        # the host has synchronised for the losses anyway: a sign of life costs nothing here
        steps[0] += len(handles)
        beat("first step" if steps[0] == 1 else "warm-up", steps[0])

    def on_phase(phase: str) -> None:
        if session.on_phase is not None:
            session.on_phase(phase)
        if phase == "measure":
            # the segment, its re-measures and CI extensions stay within max_time_s of this
            beat("measuring", steps[0], budget_s=cfg.measure.iterations.max_time_s
                 + cfg.measure.iterations.max_warmup_time_s)
            delay.start()
            power.start()  # last thing before the measured segment

    try:
        # the session's clock where it has one (the fake framework's fake clock), else the host's
        loop = measure(session.step, session.timer, cfg.measure.iterations, check_losses=check,
                       on_phase=on_phase, clock=getattr(session, "clock", time.perf_counter),
                       agree=dist.agree_max if dist is not None and dist.world_size > 1 else None,
                       compiles=getattr(session, "compile_count", None))
    finally:
        power_record = power.stop()  # first thing after it
        delay.stop()
    beat("measured", steps[0] + len(loop.measured_s))
    memory = session.memory()  # before the probes allocate anything
    if power_record is not None and power_record.memory_used_peak_bytes is not None:
        memory["nvml_used_peak_bytes"] = power_record.memory_used_peak_bytes
    return Segment(loop, power_record, power.reason, memory)


def timing_check(checks: Sequence[tuple[float, float]]) -> tuple[float, bool]:
    """Timing truth (rule 2) per process: ``checks`` holds ``(summed iteration times, wall
    time)`` in seconds of each process's measured segment. Returns the relative difference
    ``(wall - summed) / wall`` of largest magnitude and whether every process agrees within
    ``max(WALL_CHECK_REL x wall, WALL_CHECK_ABS_S)`` (:mod:`dlperf.measure.loop`). Per process,
    because the slowest-rank-per-iteration sum may exceed every rank's wall when ranks jitter.

    Raises:
        ValueError: ``checks`` is empty.
    """
    if not checks:
        raise ValueError("timing_check needs at least one (measured, wall) pair")
    rels = [(w - m) / w if w > 0 else 0.0 for m, w in checks]
    consistent = all(abs(w - m) <= max(WALL_CHECK_REL * w, WALL_CHECK_ABS_S) for m, w in checks)
    return max(rels, key=abs), consistent


def compile_handling(compiled_at: dict[str, list[int]] | None, remeasured: int,
                     recompiles_measured: Any) -> tuple[str | None, list[int]]:
    """How compiles in the measured segment were handled (docs/measurement.md, "Recompiles")
    and the measured steps left out of the statistics: ``("none", [])`` no compile while
    measured; ``("remeasured", [])`` the step compiled in an earlier segment, which became
    warm-up, and the final one has none; ``("excluded", steps)`` it compiled in the final
    segment too: those steps (indices into the measured samples) are left out of the summary,
    CI and throughput; ``("not located", [])`` the framework counted compiles while measured
    (``recompiles_measured``) but has no per-step counter; ``(None, [])`` no counter and
    nothing counted."""
    if compiled_at is None:
        return ("not located", []) if recompiles_measured else (None, [])
    steps = sorted(set(compiled_at.get("measure") or []))
    if steps:
        return "excluded", steps
    return ("remeasured" if remeasured else "none"), []


def segment_parts(cfg: Any, spec: Any, *, samples: dict[str, list[float]],
                  losses: dict[str, list[float]], wall_s: float, steady_state: bool | None,
                  comp: dict[str, Any], own_measured_s: list[float],
                  per_rank: list[dict[str, Any]] | None, waits: list[float] | None,
                  power_record: PowerRecord | None, power_reason: str | None,
                  compiled_at: dict[str, list[int]] | None = None,
                  remeasured: int = 0,
                  ci_target: tuple[float | None, int, float | None] = (None, 0, None)
                  ) -> dict[str, Any]:
    """The record parts (dicts) of a measured segment.

    Args:
        cfg: the RunConfig (``global_batch``, ``per_device_batch``, ``target_loss``,
            ``input_bound_share``).
        spec: the model's spec (``tokens_per_sample``).
        samples, losses: raw times (s) and losses by phase, merged over ranks.
        wall_s: the segment's wall time (s), the slowest rank's.
        steady_state: warm-up ended at steady state (on every rank); None when warm-up was
            switched off (``--max-warmup-iters 0``).
        comp: the compile part (:func:`dlperf.measure.probes.compile_info`).
        own_measured_s: this process's own measured times (s): the data wait's reference.
        per_rank: the ``dist`` part's ``per_rank`` for a data-parallel run, else None.
        waits: this process's data wait per measured iteration (s), or None.
        power_record, power_reason: the power sampler's record, or why there is none.
        compiled_at: the loop's compile steps by phase (``LoopResult.compiled_at``; any
            rank's), None where the framework has no compile counter.
        remeasured: measured segments left behind because the step compiled in them.
        ci_target: ``(policy.ci_target_rel, LoopResult.ci_extensions, LoopResult.ci_rel)``:
            the CI-width target, how often the segment was extended for it and the relative
            half-width it ended at (this process's steps).

    Returns:
        ``summary``, ``throughput`` (both over the measured steps less the excluded compile
        steps: :func:`compile_handling`), ``timing`` (:class:`dlperf.results.schema.Timing`),
        ``compile``, ``samples`` (with ``data_wait``; every raw sample), ``losses``,
        ``convergence``, ``data_wait`` and ``power``.
    """
    measured = samples["measure"]
    n, total = len(measured), math.fsum(measured)
    checks = ([(p["measured_time_s"], p["wall_s"]) for p in per_rank] if per_rank is not None
              else [(total, wall_s)])
    rel, consistent = timing_check(checks)
    handling, excluded = compile_handling(compiled_at, remeasured,
                                          comp.get("recompiles_measured"))
    skip = set(excluded)
    kept = [x for i, x in enumerate(measured) if i not in skip] if skip else measured
    timing: dict[str, Any] = {"first_iter_s": samples["first"][0], "warmup_iters": len(samples["warmup"]),
              "warmup_time_s": math.fsum(samples["warmup"]),
              # None (warm-up off: not looked for) stays None unless a compile or a drift of
              # the measured steps (dlperf.measure.spread.drift_of) shows it unsteady
              "steady_state": (False if comp.get("recompiles_measured") or excluded
                               or drift_of(kept) is not None else steady_state),
              "n_measured": n, "measured_time_s": total, "wall_time_s": wall_s,
              "timing_rel_diff": rel, "timing_consistent": consistent,
              "warmup_settled": steady_state, "remeasured": remeasured}
    if handling is not None:
        timing.update(compile_handling=handling, excluded_steps=excluded)
    if ci_target[0] is not None:
        timing.update(ci_target_rel=ci_target[0], ci_extensions=ci_target[1],
                      ci_rel_reached=ci_target[2])
    if compiled_at is not None:
        comp = {**comp, "compiled_at": compiled_at}
    from dlperf.data.pipeline import data_wait_summary  # the data package: its loaders' runs

    return {
        # below MIN_CI_SAMPLES no interval reaches 95%: none is stored (and a warning says
        # so: dlperf.measure.warnings)
        "summary": stats.summarize(kept, min_ci_samples=stats.MIN_CI_SAMPLES).to_dict(),
        "throughput": stats.throughput(len(kept), cfg.global_batch, math.fsum(kept),
                                       spec.tokens_per_sample),
        "timing": timing, "compile": comp,
        "samples": {**samples, **({"data_wait": waits} if waits is not None else {})},
        "losses": losses,
        "convergence": convergence.summarize_convergence(
            samples, losses, cfg.workload.target_loss, compiled_at=compiled_at,
            compile_before_loop_s=comp.get("compile_before_loop_s")),
        "data_wait": (data_wait_summary(waits, own_measured_s, cfg.input.input_bound_share)
                      if waits is not None else None),
        # NVML samples this process's GPU: energy per sample over its share of the batch.
        "power": energy_summary(power_record, total, n, cfg.per_device_batch, power_reason),
    }
