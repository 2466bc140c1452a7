"""The worker: one configuration in, one result out.

:func:`run_config` is a plain importable function ``RunConfig -> result dict`` (ARCHITECTURE.md
habit 2): tests call it in-process, :mod:`dlperf.launch.process` runs it in a fresh process per
configuration (``python -m dlperf.worker CONFIG.json RESULT.json``), and later launchers
(torchrun, jax.distributed) will call the same function.

Failures are results (MEASUREMENT.md rule 11): out-of-memory, a NaN loss, a bad data file or a
crash inside the framework all return a result dict with ``status`` set and ``error`` saying
what happened; only the launcher turns a dead process or a timeout into a result.
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
from dlperf.config import RunConfig
from dlperf.env import collect_env
from dlperf.errors import DlperfError
from dlperf.data.pipeline import data_wait_summary
from dlperf.frameworks import NonFiniteLoss, get_adapter
from dlperf.harness.loop import measure
from dlperf.power import PowerRecord, PowerSampler, energy_summary
from dlperf.zoo import get_spec

SCHEMA_VERSION = 1
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
        "status": status,
        "error": error,
        "created_at": now_iso(),
        "config": cfg.model_dump(),
        "model": cfg.model, "framework": cfg.framework, "mode": cfg.mode, "device": cfg.device,
        "precision": cfg.precision, "batch_size": cfg.batch_size, "grad_accum": cfg.grad_accum,
        "data": cfg.data, "threads": cfg.threads,
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
    env = collect_env()
    adapter = get_adapter(cfg.framework)
    ok, why = adapter.available()
    if not ok:
        r = base_result(cfg, "unavailable", why)
        r["env"] = env
        return r
    session = None
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
                power.start()  # last thing before the measured segment

        t0 = time.perf_counter()
        try:
            loop = measure(session.step, session.timer, cfg.iterations, check_losses=check,
                           on_phase=on_phase)
        finally:
            power_record = power.stop()  # first thing after it
        phases["loop"] = time.perf_counter() - t0
        memory = session.memory()  # before the probes below allocate anything
        if power_record is not None and power_record.memory_used_peak_bytes is not None:
            memory["nvml_used_peak_bytes"] = power_record.memory_used_peak_bytes
        t0 = time.perf_counter()
        losses = {k: session.losses_to_floats(v) for k, v in loop.losses.items()}
        summary = stats.summarize(loop.measured_s)
        phases["stats"] = time.perf_counter() - t0
        n = len(loop.measured_s)
        tp = stats.throughput(n, cfg.batch_size, loop.measured_total_s, spec.tokens_per_sample)
        comp = compile_info(session)
        waits = session.data_wait.measured() if session.data_wait is not None else None
        t0 = time.perf_counter()
        probes = run_probes(session, cfg)
        phases["probes"] = time.perf_counter() - t0
        status, error = "ok", None
        if not _finite(losses["measure"]):
            bad = next(i for i, x in enumerate(losses["measure"]) if not math.isfinite(x))
            status, error = "nan_loss", f"loss became non-finite at measured iteration {bad}"
        r = base_result(cfg, status, error)
        r.update({
            "summary": summary.to_dict(),
            "throughput": tp,
            "first_iter_s": loop.first_iter_s,
            "warmup_iters": len(loop.warmup_s),
            "warmup_time_s": math.fsum(loop.warmup_s),
            "steady_state": loop.steady_state and not comp.get("recompiles_measured"),
            "compile": comp,
            "n_measured": n,
            "measured_time_s": loop.measured_total_s,
            "wall_time_s": loop.wall_s,
            "timing_rel_diff": loop.timing_rel_diff,
            "timing_consistent": loop.timing_consistent,
            "memory": memory,
            "samples": {"first": [loop.first_iter_s], "warmup": loop.warmup_s,
                        "measure": loop.measured_s},
            "losses": losses,
            "data_wait": (data_wait_summary(waits, loop.measured_s, cfg.input_bound_share)
                          if waits is not None else None),
            "power": energy_summary(power_record, loop.measured_total_s, n, cfg.batch_size,
                                    power.reason),
        })
        if waits is not None:
            r["samples"]["data_wait"] = waits
        r.update(efficiency(r, spec, probes))
        r["warnings"] = quality_warnings(r)
        if cfg.breakdown or cfg.trace_dir:
            # A separate, labelled measurement after the fused one (which stays the headline).
            from dlperf.breakdown.measure import run_breakdown

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
    r["env"] = env
    r["worker"] = {"pid": os.getpid(), "elapsed_s": time.perf_counter() - t_begin,
                   "phases_s": phases}
    return r


#: A result's quality warnings fire above these (documented in the README).
WIDE_CI_REL = 0.10        # CI of the median wider than 10% of the median
LONG_TAIL_RATIO = 1.25    # mean more than 1.25 x the median


def quality_warnings(r: dict[str, Any]) -> list[str]:
    """Plain-language warnings about a measurement that should not be trusted as it is."""
    w: list[str] = []
    s = r.get("summary") or {}
    if s.get("median"):
        width = (s["ci_high"] - s["ci_low"]) / s["median"]
        if width > WIDE_CI_REL:
            w.append(f"wide CI of the median ({width:.0%} of it): noisy machine or too few "
                     "iterations; raise --min-time")
        if s["mean"] > LONG_TAIL_RATIO * s["median"]:
            w.append(f"mean is {s['mean'] / s['median']:.2f}x the median: a long tail or two "
                     "speeds in the raw samples")
    if r.get("steady_state") is False:
        w.append("warm-up did not reach steady state (or the step recompiled while measured)")
    if r.get("timing_consistent") is False:
        w.append(f"iteration times and wall time differ by {r.get('timing_rel_diff', 0):.1%}")
    if r.get("device") == "cpu" and r.get("precision") == "tf32":
        w.append("tf32 has no effect on the CPU: this is an fp32 run")
    mfu = (r.get("mfu") or {}).get("mfu")
    if mfu is not None and mfu > 1.0:
        w.append(f"MFU above 100% ({mfu:.0%}): the matmul ceiling was measured below the rate "
                 f"the model reached (a busy machine during the microbenchmark?)")
    dw = r.get("data_wait") or {}
    if dw.get("input_bound"):
        w.append(f"input-bound: the median data wait is {dw['share']:.0%} of the median "
                 f"iteration (threshold {dw['threshold']:.0%}); more loader workers or a faster "
                 f"pipeline would speed training up")
    return w


class PowerControl:
    """Starts and stops NVML power sampling around the measured segment (dlperf.power).

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


def efficiency(r: dict[str, Any], spec: Any, probes: dict[str, Any]) -> dict[str, Any]:
    """The ``flops``, ``ceilings``, ``datasheet`` and ``mfu`` parts of a result."""
    from dlperf.perfmodel.datasheet import datasheet_peaks
    from dlperf.perfmodel.mfu import mfu_summary

    fw = probes.get("framework_flops") or {}
    sheet = datasheet_peaks(r.get("versions", {}).get("device_name")
                            if r.get("device") == "cuda" else None)
    fw_step = fw.get("flops_per_step")
    analytic = spec.train_flops_per_sample
    flops = {"analytic_train_flops_per_sample": analytic,
             "analytic_source": spec.flops_source,
             "framework_flops_per_step": fw_step,
             "framework_flops_per_sample": fw_step / r["batch_size"] if fw_step else None,
             "framework_to_analytic": (fw_step / r["batch_size"] / analytic
                                       if fw_step and analytic else None),
             "framework_source": fw.get("source"),
             "bytes_per_step": fw.get("bytes_per_step"), "bytes_source": fw.get("bytes_source")}
    mfu = mfu_summary(train_flops_per_sample=analytic,
                      samples_per_s=(r.get("throughput") or {}).get("samples_per_s"),
                      precision=r["precision"], batch_size=r["batch_size"],
                      ceilings=probes.get("ceilings"), datasheet=sheet,
                      framework_flops_per_step=fw_step, bytes_per_step=fw.get("bytes_per_step"))
    return {"flops": flops, "ceilings": probes.get("ceilings"), "datasheet": sheet, "mfu": mfu,
            "probe_errors": probes.get("errors") or None}


def compile_info(session: Any) -> dict[str, Any]:
    """Compile/trace time and counts from the session (None where it compiles nothing),
    MEASUREMENT.md rule 4."""
    info: dict[str, Any] = {"compile_time_s": None, "n_compiles": None,
                            "recompiles_measured": None}
    if session.compile_info is not None:
        info.update(session.compile_info())
    return info


def _watch_parent(parent: int) -> None:
    """Exit if the launching process dies (e.g. kill -9), so no orphan keeps the GPU busy."""
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(3)


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
    sys.exit(main())
