"""The worker: one configuration in, one result out.

:func:`run_config` is a plain importable function ``RunConfig -> result dict`` (docs/architecture.md
habit 2): tests call it in-process, :mod:`dlperf.launch.process` runs it in a fresh process per
configuration (``python -m dlperf.worker CONFIG.json RESULT.json``), and later launchers
(torchrun, jax.distributed) will call the same function.

Failures are results (docs/measurement.md rule 11): out-of-memory, a NaN loss, a bad data file or a
crash inside the framework all return a result dict with ``status`` set and ``error`` saying
what happened; only the launcher turns a dead process or a timeout into a result.

Data parallelism (``cfg.world_size > 1``): the same function runs in every process (started by
:mod:`dlperf.launch.distributed`); the adapter joins the process group and the session carries
a :class:`~dlperf.frameworks.DistContext`. After the loop every process contributes its raw
samples (:func:`dlperf.measure.ranks.rank_payload`), all are gathered, and every process returns
the same merged result (:func:`dlperf.measure.ranks.merge_ranks`): the step time is the slowest
rank's per iteration, with each rank's samples, the rank imbalance and the exposed
communication (:mod:`dlperf.measure.breakdown.overlap`) in ``result["dist"]``.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from dlperf import stats
from dlperf.measure import ranks as parallel
from dlperf.perfmodel import convergence
from dlperf.config import RunConfig
from dlperf.env import collect_env, host_speed
from dlperf.errors import DataMissing, DlperfError, UnavailableError
from dlperf.data.pipeline import data_wait_summary
from dlperf.frameworks import NonFiniteLoss, get_adapter
from dlperf.measure.loop import WALL_CHECK_ABS_S, WALL_CHECK_REL, measure
from dlperf.measure.power import PowerRecord, PowerSampler, energy_summary
from dlperf.zoo import get_spec

SCHEMA_VERSION = 2  # 2: data-parallel fields (dist, per-rank samples, convergence)
STATUSES = ("ok", "oom", "nan_loss", "error", "crash", "timeout", "unavailable")


def now_iso() -> str:
    """Current UTC time, ISO 8601 with seconds."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def base_result(cfg: RunConfig, status: str, error: str | None = None) -> dict[str, Any]:
    """The identity part of a result: config, key, status; used for failures too."""
    spec = get_spec(cfg.model)
    return {
        "schema_version": SCHEMA_VERSION,
        "run_key": cfg.run_key(),
        "repeat": cfg.repeat, "point_key": cfg.point_key(),
        "status": status,
        "error": error,
        "created_at": now_iso(),
        "config": cfg.model_dump(),
        "model": cfg.model, "framework": cfg.framework, "mode": cfg.mode, "device": cfg.device,
        "precision": cfg.precision, "batch_size": cfg.global_batch, "grad_accum": cfg.grad_accum,
        "data": cfg.data, "threads": cfg.threads,
        "world_size": cfg.world_size, "nproc": cfg.nproc, "nnodes": cfg.nnodes,
        "per_device_batch": cfg.per_device_batch, "scaling": cfg.scaling,
        "spec": {"family": spec.family, "params": spec.params,
                 "forward_flops_per_sample": spec.forward_flops_per_sample,
                 "train_flops_per_sample": spec.train_flops_per_sample,
                 "tokens_per_sample": spec.tokens_per_sample},
    }


def _finite(xs: list[float]) -> bool:
    return all(math.isfinite(x) for x in xs)


def run_config(cfg: RunConfig) -> dict[str, Any]:
    """Run one configuration in this process and return its result dict (never raises for a
    failure of the run itself; see module docstring)."""
    t_begin = time.perf_counter()
    spec = get_spec(cfg.model)
    env = collect_env(speed=True)
    adapter = get_adapter(cfg.framework)
    ok, why = adapter.available()
    if not ok:
        r = base_result(cfg, "unavailable", why)
        r["env"] = env
        return r
    session = None
    run_delay: dict[str, int | None] = {"start": None, "end": None}  # schedstat, ns
    phases: dict[str, float] = {"start_to_prepare": time.perf_counter() - t_begin}
    try:
        t0 = time.perf_counter()
        session = adapter.prepare(cfg, spec)
        phases["prepare"] = time.perf_counter() - t0

        def check(handles: list[Any]) -> None:
            vals = session.losses_to_floats(handles)
            if not _finite(vals):
                raise NonFiniteLoss(f"loss became non-finite during warm-up: {vals[-5:]}")

        power = PowerControl(session.nvml_target, cfg.power_interval_s)

        def on_phase(phase: str) -> None:
            if session.on_phase is not None:
                session.on_phase(phase)
            if phase == "measure":
                run_delay["start"] = thread_run_delay_ns()
                power.start()  # last thing before the measured segment

        dist = session.dist
        t0 = time.perf_counter()
        try:
            loop = measure(session.step, session.timer, cfg.iterations,
                           clock=getattr(session, "clock", time.perf_counter),
                           check_losses=check, on_phase=on_phase,
                           agree=dist.agree_max if dist is not None and dist.world_size > 1
                           else None)
        finally:
            power_record = power.stop()  # first thing after it
            run_delay["end"] = thread_run_delay_ns()
        phases["loop"] = time.perf_counter() - t0
        memory = session.memory()  # before the probes below allocate anything
        if power_record is not None and power_record.memory_used_peak_bytes is not None:
            memory["nvml_used_peak_bytes"] = power_record.memory_used_peak_bytes
        t0 = time.perf_counter()
        losses = {k: session.losses_to_floats(v) for k, v in loop.losses.items()}
        samples = {"first": [loop.first_iter_s], "warmup": loop.warmup_s,
                   "measure": loop.measured_s}
        comp = compile_info(session)
        waits = session.data_wait.measured() if session.data_wait is not None else None
        steady, wall_s = loop.steady_state, loop.wall_s
        dist_info = None
        if dist is not None:
            comm = None
            if session.comm_profile is not None and cfg.comm_profile_iters > 0:
                t1 = time.perf_counter()
                try:
                    comm = session.comm_profile(cfg.comm_profile_iters)
                except Exception as e:  # noqa: BLE001 - the measurement stands; keep why
                    if adapter.is_oom(e):  # the device's limit, not the profiler's failure
                        raise
                    comm = {"exposed": None, "profiled_iters": cfg.comm_profile_iters,
                            "reason": f"comm profile failed: {type(e).__name__}: {e}"[:500]}
                phases["comm_profile"] = time.perf_counter() - t1
            payload = parallel.rank_payload(
                dist.rank, samples=samples, losses=losses, wall_s=loop.wall_s,
                local_rank=dist.local_rank, node_rank=dist.node_rank, hostname=env.get("hostname"),
                device=session.versions.get("device_name"), memory=memory, comm=comm)
            payload["steady_state"] = loop.steady_state
            payload["recompiles_measured"] = comp.get("recompiles_measured")
            gathered = dist.all_gather(payload)
            merged = parallel.merge_ranks(gathered)
            samples, losses, wall_s = merged["samples"], merged["losses"], merged["wall_s"]
            steady = all(p.get("steady_state", True) for p in gathered)
            if any(p.get("recompiles_measured") for p in gathered):
                comp["recompiles_measured"] = max(p.get("recompiles_measured") or 0
                                                  for p in gathered)
            from dlperf.measure.breakdown.overlap import combine_rank_comm

            per_rank_medians = [p["median_s"] for p in merged["per_rank"] if p["median_s"]]
            comm = combine_rank_comm([p.get("comm") for p in merged["per_rank"]],
                                     max(per_rank_medians) if per_rank_medians else None)
            memory = _max_memory([p["memory"] for p in merged["per_rank"]])
            dist_info = _dist_result(cfg, dist, merged, comm)
        measured = samples["measure"]
        summary = stats.summarize(measured)
        phases["stats"] = time.perf_counter() - t0
        n = len(measured)
        measured_total = math.fsum(measured)
        tp = stats.throughput(n, cfg.global_batch, measured_total, spec.tokens_per_sample)
        t1 = time.perf_counter()
        probes = run_probes(session, cfg)
        phases["probes"] = time.perf_counter() - t1
        status, error = "ok", None
        if not _finite(losses["measure"]):
            bad = next(i for i, x in enumerate(losses["measure"]) if not math.isfinite(x))
            status, error = "nan_loss", f"loss became non-finite at measured iteration {bad}"
        r = base_result(cfg, status, error)
        # Timing truth (rule 2) per process: its own iteration times against its own wall time
        # (the slowest-rank-per-iteration sum may exceed every rank's wall when ranks jitter).
        checks = ([(p["measured_time_s"], p["wall_s"]) for p in dist_info["per_rank"]]
                  if dist_info is not None else [(measured_total, wall_s)])
        rels = [(w - m) / w if w > 0 else 0.0 for m, w in checks]
        rel = max(rels, key=abs)
        consistent = all(abs(w - m) <= max(WALL_CHECK_REL * w, WALL_CHECK_ABS_S)
                         for m, w in checks)
        r.update({
            "summary": summary.to_dict(),
            "throughput": tp,
            "first_iter_s": samples["first"][0],
            "warmup_iters": len(samples["warmup"]),
            "warmup_time_s": math.fsum(samples["warmup"]),
            "steady_state": steady and not comp.get("recompiles_measured"),
            "compile": comp,
            "n_measured": n,
            "measured_time_s": measured_total,
            "wall_time_s": wall_s,
            "timing_rel_diff": rel,
            "timing_consistent": consistent,
            "memory": memory,
            "samples": samples,
            "losses": losses,
            "convergence": convergence.summarize_convergence(samples, losses, cfg.target_loss),
            "data_wait": (data_wait_summary(waits, loop.measured_s, cfg.input_bound_share)
                          if waits is not None else None),
            # NVML samples this process's GPU: energy per sample over its share of the batch.
            "power": energy_summary(power_record, measured_total, n, cfg.per_device_batch,
                                    power.reason),
        })
        if waits is not None:
            r["samples"]["data_wait"] = waits
        r.update(efficiency(r, spec, probes, session.versions.get("device_name")))
        if dist_info is not None:
            r["dist"] = dist_info
            r["rank_imbalance"] = dist_info["imbalance"]
            r["exposed_comm_s"] = (comm or {}).get("exposed")
        r["warnings"] = quality_warnings(r)
        if cfg.breakdown or cfg.trace_dir:
            # A separate, labelled measurement after the fused one (which stays the headline).
            from dlperf.measure.breakdown.run import run_breakdown

            t0 = time.perf_counter()
            try:
                sections, extra, warns = run_breakdown(cfg, session, r["summary"])
            except Exception as e:  # noqa: BLE001 - the fused result stands; the failure is kept
                sections, extra = {"breakdown": {"available": False,
                                                 "error": f"{type(e).__name__}: {e}"}}, {}
                warns = [f"breakdown: failed ({type(e).__name__}: {e})"]
            phases["breakdown"] = time.perf_counter() - t0
            r.update(sections)
            r["samples"].update(extra)
            r["warnings"].extend(warns)
    except Exception as e:  # noqa: BLE001 - every failure becomes a recorded result
        if adapter.is_oom(e):
            status = "oom"
        elif isinstance(e, NonFiniteLoss):
            status = "nan_loss"
        elif isinstance(e, (DataMissing, UnavailableError)):
            # data gone since the preflight, a device or an instruction set this machine lacks:
            # not final (run again where it is present)
            status = "unavailable"
        elif isinstance(e, DlperfError):
            status = "error"
        else:
            status = "crash"
        msg = f"{type(e).__name__}: {e}"
        if status == "crash":
            msg += "\n" + "".join(traceback.format_exc(limit=8))[-4000:]
        r = base_result(cfg, status, msg[:8000])
        if session is not None:
            try:
                r["memory"] = session.memory()
            except Exception:  # noqa: BLE001
                pass
    finally:
        if session is not None:
            try:
                session.close()
            except Exception:  # noqa: BLE001
                pass
    if session is not None:
        r["versions"], r["flags"], r["data_info"] = session.versions, session.flags, session.data_info
        r["device_name"] = session.versions.get("device_name")
    if env.get("host_speed") and session is not None:
        # A second probe after the measurement (~20 ms): a load passing during one probe slows
        # it; environment_of takes the faster of the two.
        env["host_speed_after"] = host_speed()
    r["env"] = env
    # The input pipeline's own warnings (e.g. a JAX pipeline on threads because Grain is missing).
    pipe = (r.get("data_info") or {}).get("pipeline") if isinstance(r.get("data_info"), dict) \
        else None
    if isinstance(pipe, dict) and isinstance(r.get("warnings"), list):
        r["warnings"].extend(str(w) for w in pipe.get("warnings") or [])
    busy = busy_host_warning(env)
    if busy and isinstance(r.get("warnings"), list):
        r["warnings"].append(busy)
    if session is not None and r.get("status") == "ok":
        cw = cpu_wait(run_delay, r.get("wall_time_s"))
        r["host_cpu_wait"] = cw
        threads = (r.get("config") or {}).get("threads")
        usable = env.get("cpu_affinity")
        over = bool(threads and usable and threads > usable)
        if over and isinstance(r.get("warnings"), list):
            r["warnings"].append(
                f"{threads} threads on {usable} usable CPUs: the framework's own threads take "
                "turns on the cores (oversubscribed), which measures the oversubscription, not "
                f"the model; use --threads {usable} or fewer")
        if cw and cw["share"] >= CPU_WAIT_WARN and isinstance(r.get("warnings"), list):
            r["warnings"].append(
                f"the measuring thread waited for a CPU {cw['share']:.0%} of the measured time "
                + ("(its own framework's threads, more than the CPUs, and any other work)"
                   if over else "(other work on its CPUs during the run)")
                + ": host-bound timings are unreliable; rerun on a quiet machine")
    r["worker"] = {"pid": os.getpid(), "elapsed_s": time.perf_counter() - t_begin,
                   "phases_s": phases}
    return r


def _max_memory(per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    """Each memory peak as the maximum over ranks (the device that came closest to its limit);
    None where no rank has the number."""
    keys = {k for m in per_rank for k in m}
    return {k: max((m[k] for m in per_rank if m.get(k) is not None), default=None)
            for k in sorted(keys)}


def _dist_result(cfg: RunConfig, dist: Any, merged: dict[str, Any],
                 comm: dict[str, Any] | None) -> dict[str, Any]:
    """The ``dist`` part of a data-parallel result (see the module docstring)."""
    return {"replicas": dist.replicas, "processes": dist.world_size, "nproc": cfg.nproc,
            "nnodes": cfg.nnodes, "dp_layout": cfg.dp_layout, "backend": dist.backend,
            "scaling": cfg.scaling, "global_batch": cfg.global_batch,
            "per_device_batch": cfg.per_device_batch,
            # one process driving several devices: its step already ends with the slowest
            # device, and per-device times are not observable without a trace
            "imbalance": merged["imbalance"] if dist.world_size > 1 else None,
            "slowest_rank_counts": merged["slowest_rank_counts"],
            "per_rank": merged["per_rank"], "step_time": "max over ranks per iteration",
            "loss": "mean over ranks per iteration", "comm": comm, **dist.info}


#: A result's quality warnings fire above these (documented in the README).
WIDE_CI_REL = 0.10        # CI of the median wider than 10% of the median
LONG_TAIL_RATIO = 1.25    # mean more than 1.25 x the median
PROFILED_SLOWDOWN_WARN = 1.2  # comm-profiled iterations more than 1.2 x the measured median


#: Share of the measured segment the measuring thread may wait for a CPU before a warning.
CPU_WAIT_WARN = 0.05


def thread_run_delay_ns() -> int | None:
    """Time this thread has spent runnable but waiting for a CPU (ns), from the kernel's
    schedstat (``/proc/thread-self/schedstat``, second field; Linux ``Documentation/scheduler/
    sched-stats.rst``); None where it is not available."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None


def cpu_wait(run_delay: dict[str, int | None] | None, wall_s: float | None
             ) -> dict[str, float] | None:
    """The measuring thread's wait for a CPU over the measured segment: ``seconds`` and
    ``share`` of the segment's wall time; None without both schedstat readings."""
    if not run_delay or run_delay.get("start") is None or run_delay.get("end") is None \
            or not wall_s:
        return None
    sec = (run_delay["end"] - run_delay["start"]) / 1e9
    return {"seconds": sec, "share": sec / wall_s}


def busy_host_warning(env: dict[str, Any]) -> str | None:
    """A warning when the host was already busy as the run started.

    Pinned to some of the machine's CPUs (``usable_cpu_busy_percent`` present): busy when the
    usable CPUs, less the busiest one (this worker itself), were on average at least half busy.
    Otherwise: when the 1-minute load average (processes running or waiting for a CPU) is at
    least the number of CPUs this process may use."""
    per, cpus = env.get("usable_cpu_busy_percent"), env.get("cpu_affinity")
    if per is not None:
        others = sorted(per)[:-1]
        if not others:  # pinned to one CPU: nothing to tell this worker's load from others'
            return None
        busy = sum(others) / len(others)
        if busy >= 50.0:
            return (f"the host was busy when this ran (the other CPUs this run may use were "
                    f"{busy:.0f}% busy): host-bound timings are unreliable; rerun on a quiet "
                    "machine")
        return None
    load = env.get("load_average_1_5_15")
    if load and cpus and load[0] >= cpus:
        return (f"the host was busy when this ran (load average {load[0]:.1f} on {cpus} usable "
                "CPUs): host-bound timings are unreliable; rerun on a quiet machine")
    return None


def mfu_above_one(r: dict[str, Any]) -> str | None:
    """Why a result's MFU exceeds 100%, most specific cause first, or None when it does not.

    Three causes were seen on an H200 (benchmarks/results/h200/mfu_inputs.db): (1) the analytic
    count (3 x forward, dlperf.zoo.spec) includes the first layer's input gradient, which no
    framework computes: fcn5 fp32 reached 103% analytic, 87% by the profiler's count of the
    executed FLOPs; (2) convolutions: cuDNN's Winograd and FFT algorithms do fewer
    multiplications than the direct convolution the count assumes (vgg16 fp32, all 3x3: 126% by
    either count); (3) the square-GEMM ceiling (dlperf.perfmodel.ceilings) is below the rate
    some other shapes reach.
    """
    m = r.get("mfu") or {}
    mfu = m.get("mfu")
    if mfu is None or mfu <= 1.0:
        return None
    head = f"MFU above 100% ({mfu:.0%} of the {m.get('ceiling_source') or 'measured ceiling'})"
    fw = m.get("mfu_framework")
    if fw is not None and fw <= 1.0:
        return (f"{head}: by the framework's count of the FLOPs it executed it is {fw:.0%}; the "
                "analytic count (3 x forward) includes work the step skips, such as the first "
                "layer's input gradient")
    if (r.get("spec") or {}).get("family") == "cnn":
        return (f"{head}: convolution algorithms such as Winograd and FFT do fewer "
                "multiplications than the direct convolution that the FLOP counts assume")
    return (f"{head}: the square-GEMM ceiling is below the rate this model's matrix shapes "
            "reached; read MFU against the datasheet peak too")


def quality_warnings(r: dict[str, Any]) -> list[str]:
    """Plain-language warnings about a measurement that should not be trusted as it is."""
    w: list[str] = []
    s = r.get("summary") or {}
    if s.get("median"):
        width = (s["ci_high"] - s["ci_low"]) / s["median"]
        if width > WIDE_CI_REL:
            w.append(f"wide CI of the median ({width:.0%} of it): noisy machine or too few "
                     "iterations; raise --min-time (iterations.min_time_s in a sweep file) and add "
                     "--rerun (a stored point is not measured again)")
        if s["mean"] > LONG_TAIL_RATIO * s["median"]:
            w.append(f"mean is {s['mean'] / s['median']:.2f}x the median: a long tail or two "
                     "speeds in the raw samples")
    if r.get("steady_state") is False:
        w.append("warm-up did not reach steady state (or the step recompiled while measured)")
    if r.get("timing_consistent") is False:
        w.append(f"iteration times and wall time differ by {r.get('timing_rel_diff', 0):.1%}")
    if r.get("device") == "cpu" and r.get("precision") == "tf32":
        w.append("tf32 has no effect on the CPU: this is an fp32 run")
    cm = (r.get("config") or {}).get("compile_mode")
    if r.get("device") == "cpu" and cm in ("reduce-overhead", "max-autotune"):
        w.append(f"compile mode {cm} captures CUDA graphs, which the CPU has not: on the CPU "
                 "it differs from the default mode only in what else the mode sets")
    comp = r.get("compile") or {}
    if comp.get("graph_breaks"):
        why = "; ".join(comp.get("graph_break_reasons") or {}) or "reasons not recorded"
        w.append(f"torch.compile broke the graph {comp['graph_breaks']} time(s) ({why}): "
                 "the code after a break the compiler stopped at runs eagerly")
    skips = comp.get("cudagraph_skips")
    if r.get("device") == "cuda" and skips:
        w.append(f"Inductor declined to capture {skips} compiled graph(s) as CUDA graphs: "
                 "those run kernel by kernel, as in the default mode")
    over = mfu_above_one(r)
    if over:
        w.append(over)
    workers = (r.get("config") or {}).get("loader_workers")
    if r.get("device") == "cpu" and workers and r.get("ceilings"):
        # The workers refill their buffers after the measurement, on the CPUs the ceilings
        # then run on (a fresh user saw an fp32 ceiling of 124 against 268 GFLOP/s without).
        w.append(f"the CPU ceilings were measured while {workers} loader workers "
                 f"could still be using the CPUs: the ceiling may read low and MFU high; "
                 f"compare with the same point on synthetic data")
    dw = r.get("data_wait") or {}
    if dw.get("input_bound"):
        w.append(f"input-bound: the iterations waited for data {dw['share']:.0%} of the measured "
                 f"time (threshold {dw['threshold']:.0%}); more loader workers or a faster "
                 f"pipeline would speed training up")
    comm = (r.get("dist") or {}).get("comm") or {}
    slow = comm.get("profiled_slowdown")
    if slow is not None and slow > PROFILED_SLOWDOWN_WARN:
        w.append(f"exposed communication comes from profiled iterations that ran {slow:.2f}x "
                 f"the measured step: the profiler itself shifted the overlap; read it as an "
                 f"upper bound (compare the step-time increase over one device)")
    return w


class PowerControl:
    """Starts and stops NVML power sampling around the measured segment (dlperf.measure.power).

    ``reason`` says why there is no sampling (a CPU run, no NVML) when it is off.
    """

    def __init__(self, nvml_target: tuple[str | None, int] | None, interval_s: float) -> None:
        self.sampler: PowerSampler | None = None
        self.reason: str | None = None
        self._started = False
        if nvml_target is None:
            self.reason = "not a GPU run: NVML measures NVIDIA GPUs only"
            return
        from dlperf import nvml

        readers, why = nvml.power_readers(*nvml_target)
        if readers is None:
            self.reason = why
            return
        p, e, m = readers
        self.sampler = PowerSampler(p, e, m, interval_s=interval_s)

    def start(self) -> None:  # noqa: D102
        if self.sampler is not None and not self._started:
            self.sampler.start()
            self._started = True

    def stop(self) -> PowerRecord | None:  # noqa: D102
        if self.sampler is None or not self._started:
            return None
        self._started = False
        return self.sampler.stop()


def run_probes(session: Any, cfg: RunConfig) -> dict[str, Any]:
    """After the measurement: the framework's FLOP/byte count of one iteration and the measured
    ceilings (MFU); each failure is recorded in ``errors``, never fails the result."""
    out: dict[str, Any] = {"framework_flops": None, "ceilings": None, "errors": {}}
    if session.count_flops is not None:
        try:
            out["framework_flops"] = session.count_flops()
        except Exception as e:  # noqa: BLE001
            out["errors"]["framework_flops"] = f"{type(e).__name__}: {str(e)[:300]}"
    if cfg.measure_ceilings and session.ceiling_backend is not None:
        from dlperf.perfmodel.ceilings import measure_ceilings

        try:
            out["ceilings"] = measure_ceilings(session.ceiling_backend())
        except Exception as e:  # noqa: BLE001
            out["errors"]["ceilings"] = f"{type(e).__name__}: {str(e)[:300]}"
    elif not cfg.measure_ceilings:
        out["errors"]["ceilings"] = "not measured (measure_ceilings is off)"
    return out


def efficiency(r: dict[str, Any], spec: Any, probes: dict[str, Any],
               device_name: str | None) -> dict[str, Any]:
    """The ``flops``, ``ceilings``, ``datasheet`` and ``mfu`` parts of a result.

    ``device_name`` is the framework session's name of the device (``versions["device_name"]``,
    e.g. "NVIDIA H200"), which picks the datasheet entry on a GPU; it is passed in because the
    result's own ``versions`` are filled in only after the measurement."""
    from dlperf.perfmodel.datasheet import datasheet_peaks
    from dlperf.perfmodel.mfu import mfu_summary

    fw = probes.get("framework_flops") or {}
    sheet = datasheet_peaks(device_name if r.get("device") == "cuda" else None)
    fw_step = fw.get("flops_per_step")  # one process's step: its per-device batch
    analytic = spec.train_flops_per_sample
    # MFU is per device: data parallel throughput is over world_size devices, the ceilings are
    # one device's.
    n_dev = r.get("world_size") or 1
    b_dev = r.get("per_device_batch") or r["batch_size"]
    flops = {"analytic_train_flops_per_sample": analytic,
             "analytic_source": spec.flops_source,
             "framework_flops_per_step": fw_step,
             "framework_flops_per_sample": fw_step / b_dev if fw_step else None,
             "framework_to_analytic": (fw_step / b_dev / analytic
                                       if fw_step and analytic else None),
             "framework_source": fw.get("source"),
             "bytes_per_step": fw.get("bytes_per_step"), "bytes_source": fw.get("bytes_source")}
    mfu = mfu_summary(train_flops_per_sample=analytic,
                      samples_per_s=((r.get("throughput") or {}).get("samples_per_s") or 0)
                      / n_dev or None,
                      precision=r["precision"], batch_size=b_dev,
                      ceilings=probes.get("ceilings"), datasheet=sheet,
                      framework_flops_per_step=fw_step, bytes_per_step=fw.get("bytes_per_step"))
    return {"flops": flops, "ceilings": probes.get("ceilings"), "datasheet": sheet, "mfu": mfu,
            "probe_errors": probes.get("errors") or None}


def compile_info(session: Any) -> dict[str, Any]:
    """Compile/trace time and counts from the session (None where it compiles nothing),
    docs/measurement.md rule 4."""
    info: dict[str, Any] = {"compile_time_s": None, "n_compiles": None,
                            "recompiles_measured": None}
    if session.compile_info is not None:
        info.update(session.compile_info())
    return info


def _watch_parent(parent: int, launcher: int | None = None) -> None:
    """Exit if the launching process dies (e.g. kill -9), so no orphan keeps the GPU busy.

    ``launcher``: a further process to outlive, checked by pid (a rank's parent is torchrun,
    which outlives a killed dlperf)."""
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(3)
        if launcher is not None:
            try:
                os.kill(launcher, 0)
            except ProcessLookupError:
                os._exit(3)
            except PermissionError:  # alive, owned by someone else
                pass


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write JSON to ``path`` through a temporary file and rename (never a half-written file)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, allow_nan=True))
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    """``python -m dlperf.worker CONFIG.json RESULT.json [PARENT_PID]``."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) not in (2, 3):
        print("usage: python -m dlperf.worker CONFIG.json RESULT.json [PARENT_PID]", file=sys.stderr)
        return 2
    if len(argv) == 3:
        threading.Thread(target=_watch_parent, args=(int(argv[2]),), daemon=True).start()
    cfg = RunConfig.model_validate_json(Path(argv[0]).read_text())
    result = run_config(cfg)
    write_json_atomic(Path(argv[1]), result)
    return 0


if __name__ == "__main__":
    # The result is on disk (written atomically): leave without the interpreter's teardown,
    # which on a GPU also destroys the CUDA context and unloads the framework's libraries
    # (seconds per sweep point that measure nothing). Nothing after this needs atexit hooks:
    # traces, the power sampler and the result are written and closed inside run_config.
    _rc = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_rc)
