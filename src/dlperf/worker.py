"""The worker: one configuration in, one record out.

:func:`run_record` is a plain function ``RunConfig -> RunRecord`` (docs/architecture.md habit 2;
:func:`run_config` gives its flat dict): tests call it in-process, :mod:`dlperf.launch.process`
in a fresh process per configuration (``python -m dlperf.worker CONFIG.json RESULT.json``), the
distributed launchers in every rank (the ranks' samples merged by
:func:`dlperf.measure.ranks.gather_ranks`: every rank returns the same record). It prepares the
run, measures it (:func:`dlperf.measure.segment.run_segment`), probes it
(:mod:`dlperf.measure.probes`) and assembles the record; what is measured and judged lives in
:mod:`dlperf.measure`. Failures are records too (docs/measurement.md rule 11: out of memory, a
NaN loss, a bad data file, a crash in the framework), with ``status`` and ``error`` set
(:func:`dlperf.results.schema.failure_record`); only the launcher turns a dead process or a
timeout into a record.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from dlperf.config import RunConfig
from dlperf.env import collect_env, host_speed
from dlperf.errors import DataMissing, DlperfError, UnavailableError
from dlperf.frameworks import NonFiniteLoss, get_adapter
from dlperf.heartbeat import beat
from dlperf.measure.host import RunDelay, host_checks
from dlperf.measure.power_control import PowerControl  # noqa: F401 (re-exported)
from dlperf.measure.probes import (
    breakdown_into,
    compile_info,
    dispatch_into,
    dist_runtime_into,
    efficiency,
    profile_comm,
    run_probes,
)
from dlperf.measure.segment import run_segment, segment_parts
from dlperf.measure.warnings import quality_warnings
from dlperf.placement import bind_cpus
from dlperf.results.schema import (
    STATUSES,
    Env,
    Host,
    Memory,
    RunRecord,
    WorkerInfo,
    failure_record,
    new_record,
    now_iso,
)

#: Imported from here by the launchers, the CLI, tests and benchmarks (their homes: above).
__all__ = ["run_record", "run_config", "failure_status", "main", "STATUSES",
           "now_iso", "PowerControl", "efficiency", "quality_warnings", "write_json_atomic"]
from dlperf.zoo import get_spec


def failure_status(exc: BaseException, is_oom: Any) -> tuple[str, str]:
    """``(status, error)`` of a run that raised ``exc`` (``is_oom``: the adapter's test)."""
    if is_oom(exc):
        status = "oom"
    elif isinstance(exc, NonFiniteLoss):
        status = "nan_loss"
    elif isinstance(exc, (DataMissing, UnavailableError)):
        # data gone since the preflight, a device or an instruction set this machine lacks:
        # not final (run again where it is present)
        status = "unavailable"
    else:
        from dlperf.data.pipeline import raised_by_input  # the data package: a failed run only

        # a bad input file that surfaced as the framework's own exception (tf.data's decode, a
        # loader worker): "error", not final, so fixing the file gets the point measured
        status = "error" if isinstance(exc, DlperfError) or raised_by_input(exc) else "crash"
    msg = f"{type(exc).__name__}: {exc}"
    if status == "crash":
        msg += "\n" + "".join(traceback.format_exc(limit=8))[-4000:]
    return status, msg[:8000]


def place_worker(cfg: RunConfig) -> dict[str, Any] | None:
    """Bind this process to CPUs as ``cfg.hardware.cpu_bind`` says (:func:`dlperf.placement.
    bind_cpus`; a data-parallel rank by its ``LOCAL_RANK`` among the node's
    :attr:`~RunConfig.processes_per_node`, so ranks get disjoint CPUs) and return what was
    done (``env.cpu_bind``); None for ``none``.

    Raises:
        ValueError: the binding cannot be made here (CPUs not usable, too few CPUs).
        OSError: the OS refused it.
    """
    if cfg.hardware.cpu_bind == "none":
        return None
    local, procs = 0, 1
    if cfg.distributed:
        local, procs = int(os.environ.get("LOCAL_RANK", "0")), cfg.processes_per_node
    return bind_cpus(cfg.hardware.cpu_bind, local, procs)


#: Why a data-parallel CPU run without ``--threads`` gives each rank one thread.
RANK_THREADS_REASON = ("several processes per node: one thread each (OMP_NUM_THREADS=1, "
                       "torchrun's default, set by the launcher for every framework), so the "
                       "ranks do not oversubscribe the CPUs; a one-device baseline without "
                       "--threads takes the thread policy's count (every CPU on a quiet "
                       "host), so give --threads N to both for a like-for-"
                       "like scaling efficiency")


def rank_thread_policy(cfg: RunConfig) -> dict[str, Any] | None:
    """How the threads of a data-parallel CPU rank were chosen when ``--threads`` was not
    given (``env.thread_policy``: ``policy: "ranks"``, the ``OMP_NUM_THREADS`` the rank
    started with and :data:`RANK_THREADS_REASON`); None for other runs (one process: the
    thread policy of :func:`dlperf.env.choose_threads` is recorded by the sweep)."""
    if not (cfg.distributed and cfg.hardware.device == "cpu" and cfg.hardware.threads is None):
        return None
    omp = os.environ.get("OMP_NUM_THREADS")
    return {"policy": "ranks", "threads": int(omp) if omp and omp.isdigit() else None,
            "reason": RANK_THREADS_REASON}


def run_config(cfg: RunConfig) -> dict[str, Any]:
    """Run one configuration in this process and return its record's flat dict
    (:meth:`RunRecord.to_dict`: the JSON the worker process writes), for tests that read it
    as stored; dlperf itself passes the record (:func:`run_record`)."""
    return run_record(cfg).to_dict()


def run_record(cfg: RunConfig) -> RunRecord:
    """Run one configuration in this process and return its record (never raises for a
    failure of the run itself; see module docstring)."""
    t_begin = time.perf_counter()
    spec = get_spec(cfg.workload.model)
    try:
        placed = place_worker(cfg)  # before the framework starts its threads
    except (ValueError, OSError) as e:
        return failure_record(cfg, "error", f"--cpu-bind {cfg.hardware.cpu_bind}: {e}",
                              env=collect_env())
    env = collect_env(speed=True)
    if placed is not None:
        env["cpu_bind"] = placed
    policy = rank_thread_policy(cfg)
    if policy is not None:
        env["thread_policy"] = policy
    adapter = get_adapter(cfg.runtime.framework)
    ok, why = adapter.available()
    if not ok:
        return failure_record(cfg, "unavailable", why, env=env)
    session, delay = None, RunDelay()
    phases: dict[str, float] = {"start_to_prepare": time.perf_counter() - t_begin}
    try:
        t0 = time.perf_counter()
        session = adapter.prepare(cfg, spec)
        phases["prepare"] = time.perf_counter() - t0
        beat("prepared")
        rec = _measure(cfg, spec, adapter, session, env, delay, phases)
    except Exception as e:  # noqa: BLE001 - every failure becomes a recorded result
        rec = failure_record(cfg, *failure_status(e, adapter.is_oom))
        if session is not None:
            try:
                rec.memory = Memory.model_validate(session.memory())
            except Exception:  # noqa: BLE001
                pass
    finally:
        if session is not None:
            try:
                session.close()
            except Exception:  # noqa: BLE001
                pass
    if session is not None:
        rec.versions, rec.flags, rec.data_info = session.versions, session.flags, session.data_info
        rec.device_name = session.versions.get("device_name")
        if env.get("host_speed"):
            # A second probe after the measurement (~20 ms): a load passing during one probe
            # slows it; environment_of takes the faster of the two.
            env["host_speed_after"] = host_speed()
    rec.env = Env.model_validate(env)
    # the thread's wait for a CPU says something of the timings only where they are host time
    # (the fake framework's virtual clock is not: its measured segment lasts microseconds)
    on_host_clock = getattr(session, "clock", time.perf_counter) is time.perf_counter
    host_checks(rec, env, delay, measured=session is not None, host_clock=on_host_clock)
    rec.worker = WorkerInfo(pid=os.getpid(), elapsed_s=time.perf_counter() - t_begin,
                            phases_s=phases)
    return rec


def _measure(cfg: RunConfig, spec: Any, adapter: Any, session: Any, env: dict[str, Any],
             delay: RunDelay, phases: dict[str, float]) -> RunRecord:
    """Measure a prepared session, probe it and assemble its record (ok or nan_loss)."""
    t0 = time.perf_counter()
    seg = run_segment(session, cfg, delay)
    phases["loop"] = time.perf_counter() - t0
    loop, memory, dist, merged = seg.loop, seg.memory, session.dist, None
    t0 = time.perf_counter()
    losses = {k: session.losses_to_floats(v) for k, v in loop.losses.items()}
    samples = {"first": [loop.first_iter_s], "warmup": loop.warmup_s, "measure": loop.measured_s}
    comp, steady, wall_s = compile_info(session), loop.steady_state, loop.wall_s
    compiled_at = loop.compiled_at
    if dist is not None:
        from dlperf.measure.ranks import gather_ranks, rank_payload  # data-parallel runs only

        t1 = time.perf_counter()
        comm = profile_comm(session, cfg.parallel.comm_profile_iters, adapter.is_oom)
        if session.comm_profile is not None and cfg.parallel.comm_profile_iters > 0:
            phases["comm_profile"] = time.perf_counter() - t1
        dist_runtime_into(session, dist)
        merged = gather_ranks(cfg, dist, rank_payload(
            dist.rank, samples=samples, losses=losses, wall_s=loop.wall_s,
            local_rank=dist.local_rank, node_rank=dist.node_rank, hostname=env.get("hostname"),
            device=session.versions.get("device_name"), memory=memory, comm=comm,
            cpus=env.get("cpu_list"), threads=(session.flags or {}).get("threads")),
            steady_state=loop.steady_state, recompiles_measured=comp.get("recompiles_measured"),
            compiled_at=compiled_at)
        samples, losses, wall_s = merged["samples"], merged["losses"], merged["wall_s"]
        steady, memory = merged["steady_state"], merged["memory"]
        comp["recompiles_measured"] = merged["recompiles_measured"]
        compiled_at = merged["compiled_at"]
    parts = segment_parts(
        cfg, spec, samples=samples, losses=losses, wall_s=wall_s, steady_state=steady, comp=comp,
        own_measured_s=loop.measured_s, per_rank=merged["dist"]["per_rank"] if merged else None,
        waits=session.data_wait.measured() if session.data_wait is not None else None,
        power_record=seg.power_record, power_reason=seg.power_reason,
        compiled_at=compiled_at, remeasured=loop.remeasured,
        ci_target=(cfg.measure.iterations.ci_target_rel, loop.ci_extensions, loop.ci_rel))
    phases["stats"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    host = dispatch_into(parts["samples"], cfg, session, (parts.get("summary") or {}).get("median"))
    probes = run_probes(session, cfg, env)
    phases["probes"] = time.perf_counter() - t1
    bad = [i for i, x in enumerate(losses["measure"]) if not math.isfinite(x)]
    rec = new_record(cfg, "nan_loss" if bad else "ok",
                     f"loss became non-finite at measured iteration {bad[0]}" if bad else None,
                     memory=memory, **parts)
    for k, v in efficiency(rec, spec, probes, session.versions.get("device_name")).items():
        setattr(rec, k, v)
    rec.host = Host.model_validate(host)
    if merged is not None:
        rec.dist, rec.rank_imbalance = merged["dist"], merged["dist"]["imbalance"]
        rec.exposed_comm_s = (merged["comm"] or {}).get("exposed")
    rec.warnings = quality_warnings(rec)
    if cfg.traced:
        breakdown_into(rec, cfg, session, phases)
    return rec


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
    write_json_atomic(Path(argv[1]), run_record(cfg).to_dict())
    return 0


if __name__ == "__main__":
    # The result is on disk (written atomically): leave without the interpreter's teardown,
    # which on a GPU also destroys the CUDA context and unloads the framework's libraries
    # (seconds per sweep point that measure nothing). Nothing after this needs atexit hooks:
    # traces, the power sampler and the result are written and closed inside run_config.
    import dlperf as _dlperf

    _dlperf.OWNS_PROCESS = True
    _rc = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_rc)
