"""JAX data parallelism: sharded ``jax.jit`` over a 1-D device mesh, and ``jax.distributed``
across processes.

* One process driving several local devices (``dp_layout`` ``per_node``, JAX's usual way on one
  machine): the global batch is sharded along its first axis over a ``Mesh`` of
  ``world_size`` devices (``NamedSharding(mesh, P("data"))``), parameters and optimizer state
  are replicated (``P()``), and XLA inserts the gradient all-reduce into the one compiled
  step. On the CPU the devices are host devices: ``jax_num_cpu_devices`` (or
  ``--xla_force_host_platform_device_count``) is set before the backend starts.
* Several processes (``dp_layout`` ``per_device``, or several nodes): each process calls
  ``jax.distributed.initialize`` with the coordinator address of process 0
  (``DLPERF_COORDINATOR``, set by :mod:`dlperf.launch.spawn`), its ``RANK`` and ``WORLD_SIZE``
  before the backend starts; the mesh then spans every process's devices and each process
  feeds its rows of the global batch (``jax.make_array_from_process_local_data``). CPU
  collectives across processes use gloo (``jax_cpu_collectives_implementation``).

The :class:`~dlperf.frameworks.base.DistContext` of a multi-process run agrees and gathers with
``multihost_utils.process_allgather`` (objects travel as JSON bytes).
"""

from __future__ import annotations

import json
import os
from typing import Any

from dlperf.config import RunConfig
from dlperf.errors import ConfigError, UnavailableError
from dlperf.frameworks.base import DistContext


def processes(cfg: RunConfig) -> int:
    """Processes of the run: ``nproc * nnodes`` (per_device) or ``nnodes`` (per_node)."""
    return cfg.processes_per_node * cfg.parallel.nnodes


def local_devices(cfg: RunConfig) -> int:
    """Devices each process drives: 1 (per_device) or ``nproc`` (per_node)."""
    return 1 if cfg.parallel.dp_layout == "per_device" else cfg.parallel.nproc


def setup_process(cfg: RunConfig, backend_started: bool) -> dict[str, Any]:
    """Before the XLA backend starts: host device count, CPU collectives and
    ``jax.distributed.initialize``; returns what was set (for ``flags``).

    Raises:
        UnavailableError: the backend already started with too few devices (an in-process
            run after other JAX work), or the launcher's environment is missing.
    """
    import jax

    flags: dict[str, Any] = {}
    n_local = local_devices(cfg)
    if cfg.hardware.device == "cpu" and n_local > 1:
        if backend_started:
            have = len(jax.local_devices(backend="cpu"))
            if have < n_local:
                raise UnavailableError(
                    f"JAX already started with {have} CPU device(s) and {n_local} are needed; "
                    f"run in a fresh process (dlperf run does) or set XLA_FLAGS="
                    f"--xla_force_host_platform_device_count={n_local} before JAX starts")
        elif "jax_num_cpu_devices" in jax.config.values:
            jax.config.update("jax_num_cpu_devices", n_local)
            flags["cpu_devices_set_by"] = "jax_num_cpu_devices"
        else:  # pragma: no cover - older JAX
            os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                       f" --xla_force_host_platform_device_count={n_local}")
            flags["cpu_devices_set_by"] = "XLA_FLAGS"
    nproc = processes(cfg)
    if nproc > 1:
        auto = os.environ.get(AUTO_INIT_ENV) == "auto"
        if "RANK" not in os.environ or not (auto or "DLPERF_COORDINATOR" in os.environ):
            raise ConfigError("a multi-process JAX run must be started by dlperf's launcher "
                              "(dlperf run --nproc N --dp-layout per_device, or --nnodes > 1) "
                              "or by torchrun, srun or a PyTorchJob running `dlperf run`")
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        if world != nproc:
            raise ConfigError(f"the launcher started {world} processes but the configuration "
                              f"needs {nproc}")
        if cfg.hardware.device == "cpu":
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
            flags["cpu_collectives"] = "gloo"
        kw: dict[str, Any] = {}
        if cfg.hardware.device == "cuda" and cfg.parallel.dp_layout == "per_device":
            kw["local_device_ids"] = [int(os.environ.get("LOCAL_RANK", "0"))]
        timeout = int(min(cfg.measure.timeout_s, 300))
        if auto:  # JAX's own cluster detection (SLURM: coordinator, count and id from srun)
            jax.distributed.initialize(initialization_timeout=timeout, **kw)
            flags["jax_distributed"] = {"coordinator": "auto-detected by jax.distributed",
                                        "num_processes": jax.process_count(),
                                        "process_id": jax.process_index(), **kw}
            if (jax.process_count(), jax.process_index()) != (world, rank):
                raise ConfigError(f"jax.distributed detected process {jax.process_index()} of "
                                  f"{jax.process_count()}, the launcher said {rank} of {world}")
            return flags
        jax.distributed.initialize(coordinator_address=os.environ["DLPERF_COORDINATOR"],
                                   num_processes=world, process_id=rank,
                                   initialization_timeout=timeout, **kw)
        flags["jax_distributed"] = {"coordinator": os.environ["DLPERF_COORDINATOR"],
                                    "num_processes": world, "process_id": rank, **kw}
    return flags


#: ``auto``: :func:`setup_process` calls ``jax.distributed.initialize()`` without a coordinator,
#: so JAX detects its cluster itself (set by :func:`outside_env` for ranks started by srun).
AUTO_INIT_ENV = "DLPERF_JAX_INIT"


def outside_env(launch: dict[str, Any]) -> dict[str, str]:
    """The registry's ``outside_env`` hook: how JAX ranks started by an outside launcher
    (:mod:`dlperf.launch.outside`; ``launch`` is its record) find their coordinator.

    * ``slurm``: ``jax.distributed.initialize()`` detects the job itself (JAX's ``SlurmCluster``:
      coordinator on the first host of ``SLURM_STEP_NODELIST``, a port from the job id; process
      count and id from ``SLURM_NTASKS`` / ``SLURM_PROCID``).
    * ``torchrun``: the coordinator on ``MASTER_ADDR`` at ``MASTER_PORT + 1`` (torchrun's agent
      holds ``MASTER_PORT`` for its own store).
    * ``pytorchjob`` / ``env``: ``MASTER_ADDR:MASTER_PORT`` (nobody else listens there).

    A ``DLPERF_COORDINATOR`` already in the environment is kept.

    Raises:
        ConfigError: no ``MASTER_ADDR``/``MASTER_PORT`` outside SLURM.
    """
    if "DLPERF_COORDINATOR" in os.environ:
        return {}
    if launch["launcher"] == "slurm":
        return {AUTO_INIT_ENV: "auto"}
    addr, port = launch.get("master_addr"), launch.get("master_port")
    if not addr or port is None:
        raise ConfigError(f"JAX ranks started by {launch['launcher']} need MASTER_ADDR and "
                          "MASTER_PORT (or DLPERF_COORDINATOR=HOST:PORT) for jax.distributed")
    step = 1 if launch["launcher"] == "torchrun" else 0
    return {"DLPERF_COORDINATOR": f"{addr}:{int(port) + step}"}


def _gather_bytes(multihost_utils: Any, np: Any, data: bytes) -> list[bytes]:
    n = np.array([len(data)], dtype=np.int32)
    lens = multihost_utils.process_allgather(n).reshape(-1)
    buf = np.zeros(int(lens.max()), dtype=np.uint8)
    buf[: len(data)] = np.frombuffer(data, dtype=np.uint8)
    allb = multihost_utils.process_allgather(buf)
    return [bytes(allb[i, : int(lens[i])]) for i in range(allb.shape[0])]


def make_context(jax: Any, cfg: RunConfig, platform: str) -> tuple[DistContext, Any, Any, Any]:
    """(context, mesh, data sharding, replicated sharding) over the run's ``world_size``
    devices of ``platform`` (``"cpu"`` or ``"gpu"``).

    Raises:
        UnavailableError: fewer devices than the configuration asks for.
    """
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    devs = [d for d in jax.devices(platform)]
    if len(devs) < cfg.world_size:
        raise UnavailableError(f"{cfg.world_size} {platform} devices are needed (nproc {cfg.parallel.nproc}"
                               f" x nnodes {cfg.parallel.nnodes}) but JAX sees {len(devs)}")
    devs = sorted(devs, key=lambda d: (d.process_index, d.id))[: cfg.world_size]
    mesh = Mesh(np.array(devs), ("data",))
    data_sh, repl = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())
    nproc = processes(cfg)
    rank = jax.process_index()
    if nproc > 1:
        from jax.experimental import multihost_utils

        def agree_max(values: list[float]) -> list[float]:
            # float32 under JAX's default x64-off: exact for the flags and counts agreed on
            a = multihost_utils.process_allgather(np.asarray(values, dtype=np.float32))
            return [float(v) for v in np.asarray(a).reshape(nproc, -1).max(axis=0)]

        def all_gather(obj: Any) -> list[Any]:
            blobs = _gather_bytes(multihost_utils, np, json.dumps(obj).encode())
            return [json.loads(b) for b in blobs]
        backend = "jax-sharded-jit/jax.distributed"
    else:
        def agree_max(values: list[float]) -> list[float]:
            return list(values)

        def all_gather(obj: Any) -> list[Any]:
            return [obj]
        backend = "jax-sharded-jit"
    info = {"mesh": {"axis": "data", "devices": [str(d) for d in devs]},
            "processes": nproc, "local_devices": local_devices(cfg),
            "parameters": "replicated (P())", "batch": "sharded on axis 0 (P('data'))",
            "gradient_reduction": "inserted by XLA (GSPMD) into the compiled step",
            "batch_norm": "statistics over the global batch (a cross-device mean)"}
    ctx = DistContext(rank=rank, world_size=nproc,
                      local_rank=int(os.environ.get("LOCAL_RANK", "0")),
                      node_rank=int(os.environ.get("DLPERF_NODE_RANK", "0")),
                      replicas=cfg.world_size, backend=backend, agree_max=agree_max,
                      all_gather=all_gather, info=info)
    return ctx, mesh, data_sh, repl


def breakdown_apart(cfg: RunConfig) -> str | None:
    """The registry's ``breakdown_apart`` hook (read by :mod:`dlperf.launch.process`, which
    imports no adapter): the rule of :meth:`JaxAdapter.breakdown_apart
    <dlperf.frameworks.jax.adapter.JaxAdapter.breakdown_apart>`. On a GPU a ``--breakdown`` or
    ``--trace`` run turns XLA command buffers off, process-wide and for the fused step too, so
    the headline is measured in a process without them; not when the user set the flag in
    ``XLA_FLAGS`` (then both processes have it)."""
    if (cfg.hardware.device == "cuda" and cfg.traced
            and "xla_gpu_enable_command_buffer" not in os.environ.get("XLA_FLAGS", "")):
        return "XLA command buffers off for the breakdown's trace, process-wide"
    return None


def leave_distributed() -> None:
    """The registry's ``rank_exit`` hook: after a good run that joined ``jax.distributed``,
    wait at its shutdown barrier (``jax.distributed.shutdown``) before exiting. Process 0 hosts
    the coordination service; had it exited while another process was still finishing (its
    probes, writing its result), that process's coordination client would abort it (SIGABRT,
    its result lost: seen with two nodes over loopback). Each process has written its result
    before it gets here, so a failure of the barrier loses nothing; it is printed."""
    import sys

    jax = sys.modules.get("jax")
    if jax is None:
        return
    try:
        initialized = getattr(jax.distributed, "is_initialized", None)
        if initialized is not None and not initialized():
            return
        jax.distributed.shutdown()
    except Exception as e:  # noqa: BLE001 - reported, never fatal: the result is written
        print(f"jax.distributed.shutdown failed: {e}", file=sys.stderr)
