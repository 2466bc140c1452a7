"""Plain-language warnings about a measurement that should not be trusted as it is.

:func:`quality_warnings` reads a finished record (:class:`dlperf.results.schema.RunRecord`)
and says what in it is doubtful: too few iterations for a confidence interval
(:data:`dlperf.stats.MIN_CI_SAMPLES`; none is stored then), a wide one or a long tail, a
warm-up that never settled and a step that recompiled while measured (told apart), bimodal
step times and CPU ranks whose threads differ from a one-device run's
(:mod:`dlperf.measure.spread`), iteration times that disagree with the wall time, settings without effect on the
device, graph breaks, an MFU above 100% (:func:`mfu_above_one` names the likely cause), CPU ceilings measured
beside loader workers, an input-bound run, a profiler that shifted the communication overlap.
The thresholds are below (documented in docs/measurement.md).
"""

from __future__ import annotations

from dlperf.measure.spread import drift_of, spread_warnings
from dlperf.results.schema import RunRecord
from dlperf.results.view import setting
from dlperf.stats import min_samples_for_ci

__all__ = ["WIDE_CI_REL", "LONG_TAIL_RATIO", "PROFILED_SLOWDOWN_WARN", "quality_warnings",
           "mfu_above_one"]

#: A result's quality warnings fire above these (documented in docs/measurement.md).
WIDE_CI_REL = 0.10        # CI of the median wider than 10% of the median
LONG_TAIL_RATIO = 1.25    # mean more than 1.25 x the median
PROFILED_SLOWDOWN_WARN = 1.2  # comm-profiled iterations more than 1.2 x the measured median


def mfu_above_one(r: RunRecord) -> str | None:
    """Why a result's MFU exceeds 100%, most specific cause first, or None when it does not.

    Three causes were seen on an H200 (benchmarks/results/h200/mfu_inputs.db): (1) the analytic
    count (3 x forward, dlperf.zoo.spec) includes the first layer's input gradient, which no
    framework computes: fcn5 fp32 reached 103% analytic, 87% by the profiler's count of the
    executed FLOPs; (2) convolutions: cuDNN's Winograd and FFT algorithms do fewer
    multiplications than the direct convolution the count assumes (vgg16 fp32, all 3x3: 126% by
    either count); (3) the square-GEMM ceiling (dlperf.measure.ceilings) is below the rate
    some other shapes reach.
    """
    m = r.mfu
    if m is None or m.mfu is None or m.mfu <= 1.0:
        return None
    head = f"MFU above 100% ({m.mfu:.0%} of the {m.ceiling_source or 'measured ceiling'})"
    fw = m.mfu_framework
    if fw is not None and fw <= 1.0:
        return (f"{head}: by the framework's count of the FLOPs it executed it is {fw:.0%}; the "
                "analytic count (3 x forward) includes work the step skips, such as the first "
                "layer's input gradient")
    if r.identity.spec is not None and r.identity.spec.family == "cnn":
        return (f"{head}: convolution algorithms such as Winograd and FFT do fewer "
                "multiplications than the direct convolution that the FLOP counts assume")
    return (f"{head}: the square-GEMM ceiling is below the rate this model's matrix shapes "
            "reached; read MFU against the datasheet peak too")


def _timing_warnings(r: RunRecord) -> list[str]:
    w: list[str] = []
    s = r.summary
    if s is not None and s.median and (s.ci_low is None or s.ci_high is None):
        level = s.ci_level or 0.95
        w.append(f"only {s.n} measured iteration(s): too few for a {level:.0%} confidence "
                 f"interval of the median (it needs {min_samples_for_ci(level)}), so none is "
                 "stored; raise --min-iters (iterations.min_iters in a sweep file) or "
                 "--min-time and add --rerun")
    elif s is not None and s.median and s.ci_low is not None and s.ci_high is not None:
        width = (s.ci_high - s.ci_low) / s.median
        if width > WIDE_CI_REL:
            w.append(f"wide CI of the median ({width:.0%} of it): noisy machine or too few "
                     "iterations; raise --min-time (iterations.min_time_s in a sweep file) and add "
                     "--rerun (a stored point is not measured again)")
        if s.mean is not None and s.mean > LONG_TAIL_RATIO * s.median:
            w.append(f"mean is {s.mean / s.median:.2f}x the median: a long tail or two "
                     "speeds in the raw samples")
    t = r.timing
    if (t is not None and t.ci_target_rel is not None and t.ci_rel_reached is not None
            and t.ci_rel_reached > t.ci_target_rel and drift_of(r.measured_s) is not None):
        w.append(f"the CI target (+-{t.ci_target_rel:.1%} of the median) was not reached: "
                 f"+-{t.ci_rel_reached:.1%} after {t.n_measured} measured iterations; the "
                 "measured segment was not extended because its steps drift (see the drift "
                 "warning): more of them would move the median, not narrow its interval")
    elif (t is not None and t.ci_target_rel is not None and t.ci_rel_reached is not None
            and t.ci_rel_reached > t.ci_target_rel):
        w.append(f"the CI target (+-{t.ci_target_rel:.1%} of the median) was not reached: "
                 f"+-{t.ci_rel_reached:.1%} after {t.n_measured} measured iterations "
                 f"({t.ci_extensions} extension(s)); the budget ran out: raise --max-time / "
                 "--max-iters or measure on a quieter machine")
    w += _steady_warnings(r)
    if t is not None and t.timing_consistent is False:
        rel = t.timing_rel_diff if "timing_rel_diff" in t.model_fields_set else 0
        w.append(f"iteration times and wall time differ by {rel:.1%}")
    return w


def _steady_warnings(r: RunRecord) -> list[str]:
    """Whether the run never settled and whether it compiled while measured, apart
    (docs/measurement.md, "Recompiles"); a record from before schema 10 says less."""
    t, comp = r.timing, r.compile
    if t is None:
        return []
    at = (comp.compiled_at if comp is not None else None) or {}
    rm = comp.recompiles_measured if comp is not None else None
    if t.steady_state is None and t.warmup_iters == 0 and r.identity.status == "ok":
        return ["warm-up switched off (--max-warmup-iters 0): steady state was not looked for, "
                "so the first measured steps may still include start-up effects"]
    if t.warmup_settled is None:  # recorded before the loop knew about compiles
        if t.steady_state is not False:
            return []
        if rm:
            return [f"the step recompiled {rm} time(s) while measured and those steps are in "
                    "the median, CI and throughput (recorded before dlperf left them out); "
                    "measure it again"]
        return ["warm-up did not reach steady state (or the step recompiled while measured)"]
    w: list[str] = []
    if t.warmup_settled is False:
        n_warm = t.warmup_iters or 0
        warm_c = at.get("warmup") or []
        if warm_c:
            w.append(f"warm-up never settled: the step was still compiling ({len(warm_c)} "
                     f"compile(s) in {n_warm} warm-up iterations, the last at iteration "
                     f"{warm_c[-1] + 1}); its shapes or guards keep changing")
        else:
            w.append(f"warm-up never settled: the step time did not stabilise in {n_warm} "
                     "warm-up iterations; raise --max-warmup-iters / --max-warmup-time or "
                     "measure on a quieter machine")
    steps = t.excluded_steps or []
    again = f", after measuring again {t.remeasured} time(s)" if t.remeasured else ""
    if t.compile_handling == "excluded" and steps:
        w.append(f"the step recompiled while measured{again}: {len(steps)} of "
                 f"{t.n_measured} measured step(s) compiled and are excluded from the median, "
                 "CI and throughput (their raw samples are kept)")
    elif t.compile_handling == "not located":
        w.append(f"the step recompiled {rm} time(s) while measured, and the framework does "
                 "not say at which steps: none is excluded, so the median, CI and "
                 "throughput include them")
    return w


def _setting_warnings(r: RunRecord) -> list[str]:
    w: list[str] = []
    device = r.identity.device
    if device == "cpu" and r.identity.precision == "tf32":
        w.append("tf32 has no effect on the CPU: this is an fp32 run")
    cm = setting(r, "compile_mode")
    if device == "cpu" and cm in ("reduce-overhead", "max-autotune"):
        w.append(f"compile mode {cm} captures CUDA graphs, which the CPU has not: on the CPU "
                 "it differs from the default mode only in what else the mode sets")
    comp = r.compile
    if comp is not None and comp.graph_breaks:
        why = "; ".join(comp.graph_break_reasons or {}) or "reasons not recorded"
        w.append(f"torch.compile broke the graph {comp.graph_breaks} time(s) ({why}): "
                 "the code after a break the compiler stopped at runs eagerly")
    skips = comp.cudagraph_skips if comp is not None else None
    if device == "cuda" and skips:
        w.append(f"Inductor declined to capture {skips} compiled graph(s) as CUDA graphs: "
                 "those run kernel by kernel, as in the default mode")
    return w


def quality_warnings(r: RunRecord) -> list[str]:
    """Plain-language warnings about a measurement that should not be trusted as it is (see
    the module docstring), in a fixed order; empty when there is nothing to say."""
    w = _timing_warnings(r) + spread_warnings(r) + _setting_warnings(r)
    over = mfu_above_one(r)
    if over:
        w.append(over)
    workers = setting(r, "loader_workers")
    if r.identity.device == "cpu" and workers and r.ceilings:
        # The workers refill their buffers after the measurement, on the CPUs the ceilings
        # then run on (a fresh user saw an fp32 ceiling of 124 against 268 GFLOP/s without).
        w.append(f"the CPU ceilings were measured while {workers} loader workers "
                 f"could still be using the CPUs: the ceiling may read low and MFU high; "
                 f"compare with the same point on synthetic data")
    dw = r.data_wait
    if dw is not None and dw.input_bound:
        w.append(f"input-bound: the iterations waited for data {dw.share:.0%} of the measured "
                 f"time (threshold {dw.threshold:.0%}); more loader workers or a faster "
                 f"pipeline would speed training up")
    slow = ((r.dist.comm if r.dist is not None else None) or {}).get("profiled_slowdown")
    if slow is not None and slow > PROFILED_SLOWDOWN_WARN:
        w.append(f"exposed communication comes from profiled iterations that ran {slow:.2f}x "
                 f"the measured step: the profiler itself shifted the overlap; read it as an "
                 f"upper bound (compare the step-time increase over one device)")
    return w
