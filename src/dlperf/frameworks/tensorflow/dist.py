"""TensorFlow data parallelism: ``tf.distribute.MirroredStrategy`` over the local devices of one
process, and ``tf.distribute.MultiWorkerMirroredStrategy`` across processes.

* One process (``dp_layout`` ``per_node`` on one node): ``MirroredStrategy`` over ``nproc``
  devices: GPUs, or on the CPU ``nproc`` logical CPU devices
  (``tf.config.set_logical_device_configuration``, set before TensorFlow runs anything).
* Several processes (``dp_layout`` ``per_device``: one worker process per device; or
  ``per_node`` with ``nnodes > 1``: one worker per node driving its ``nproc`` GPUs):
  ``MultiWorkerMirroredStrategy``. Each process is started by dlperf's launcher
  (:mod:`dlperf.launch.spawn`) with ``TF_CONFIG`` already in its environment (worker ``RANK``
  of ``WORLD_SIZE`` gRPC addresses, :mod:`dlperf.frameworks.tensorflow.cluster`), and creates the strategy
  before any other TensorFlow op, as TensorFlow requires. Gradients are all-reduced across
  workers by collective ops: ``CommunicationImplementation.RING`` (gRPC) on the CPU, ``NCCL`` on
  GPUs (``tf.distribute.experimental.CommunicationOptions``). On the CPU a worker has exactly
  one device (TensorFlow's ``CollectiveAllReduceExtended`` gives a worker without GPUs only
  ``CPU:0``), so two nodes of two CPU "devices" are four worker processes (``per_device``).

In both, the model and optimizer are created under ``strategy.scope()`` (mirrored variables,
initial values broadcast from worker 0 under ``MultiWorkerMirroredStrategy``); each step runs
the replica step on every device (``strategy.run``) with the replica's rows of the global batch
(``experimental_distribute_values_from_function``; a worker holds only its replicas' rows).
Keras's optimizer all-reduces (sums) the gradients across all replicas of all workers, so each
replica's loss is divided by the number of replicas in sync (the sum is then the gradient of
the global mean loss). The step returns the sum of this process's replicas' losses times
``replicas / local replicas``: the mean loss over this process's rows (one process: the global
mean loss); :func:`dlperf.measure.ranks.merge_ranks` averages the ranks', which with equal rows per
rank is the global mean. No extra collective runs in the step for the loss.

Not built: mode ``xla`` under a strategy (refused before anything runs).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
from collections.abc import Callable
from typing import Any

from dlperf.config import RunConfig
from dlperf.errors import ConfigError, UnavailableError
from dlperf.frameworks.base import DataSource, DistContext, identity
from dlperf.frameworks.tensorflow.cluster import TF_CONFIG_ENV, parse_tf_config
from dlperf.frameworks.tensorflow.input import SYNTHETIC_POOL

MIRRORED = "MirroredStrategy"
MULTI_WORKER = "MultiWorkerMirroredStrategy"


def workers(cfg: RunConfig) -> int:
    """Worker processes of the run: ``nproc * nnodes`` (per_device) or ``nnodes`` (per_node)."""
    return cfg.processes_per_node * cfg.parallel.nnodes


def multi_worker(cfg: RunConfig) -> bool:
    """True when the run needs ``MultiWorkerMirroredStrategy`` (more than one process)."""
    return workers(cfg) > 1


def local_replicas(cfg: RunConfig) -> int:
    """Devices (replicas) each process drives: 1 (per_device) or ``nproc`` (per_node)."""
    return 1 if cfg.parallel.dp_layout == "per_device" else cfg.parallel.nproc


def strategy_name(cfg: RunConfig) -> str:
    """``"MultiWorkerMirroredStrategy"`` or ``"MirroredStrategy"`` for a data-parallel ``cfg``."""
    return MULTI_WORKER if multi_worker(cfg) else MIRRORED


def worker_rows(cfg: RunConfig, rank: int) -> tuple[int, int]:
    """Rows ``[lo, hi)`` of each global batch that worker ``rank`` feeds: its local replicas'
    consecutive slices of ``per_device_batch`` rows (replica ``r`` has rows
    ``[r b, (r + 1) b)``, worker ``w`` replicas ``w L .. (w + 1) L - 1``)."""
    n = local_replicas(cfg) * cfg.per_device_batch
    return rank * n, (rank + 1) * n


def configure_devices(tf: Any, cfg: RunConfig) -> tuple[list[str], bool, dict[str, Any]]:
    """Make this process's devices of ``cfg.hardware.device`` visible; return (device names, is_gpu,
    flags). Must run before TensorFlow runs anything.

    One process: ``cfg.parallel.nproc`` GPUs or logical CPU devices. A worker of a multi-worker run: its
    GPU (``per_device``: the one of index ``$LOCAL_RANK``), its node's ``nproc`` GPUs
    (``per_node``), or ``CPU:0``.

    Raises:
        ConfigError: mode ``xla`` (not under a strategy), or several CPU devices per worker.
        UnavailableError: too few GPUs, or TensorFlow already started with other devices.
    """
    if cfg.runtime.mode == "xla":
        # A jit_compile step around strategy.run cannot reach the mirrored variables on the
        # other devices (InvalidArgumentError "Trying to access resource ... located in device
        # CPU:1 from device CPU:0"; TensorFlow's XLA known issues), and jit_compile inside
        # strategy.run fails the same way with Keras 3 (seen with TensorFlow 2.21).
        raise ConfigError("TensorFlow --mode xla does not run under a tf.distribute strategy "
                          "(XLA cannot reach mirrored variables on other devices); use --mode "
                          "graph or eager for data parallelism")
    if multi_worker(cfg):
        return _worker_devices(tf, cfg)
    n = cfg.parallel.nproc
    gpus = tf.config.list_physical_devices("GPU")
    if cfg.hardware.device == "cuda":
        if len(gpus) < n:
            raise UnavailableError(f"{n} GPUs are needed (--nproc {n}) but TensorFlow sees "
                                   f"{len(gpus)}")
        try:
            tf.config.set_visible_devices(gpus[:n], "GPU")
        except RuntimeError:
            pass
        return [f"/GPU:{i}" for i in range(n)], True, {"visible_gpus": n, "memory_growth": True}
    if gpus:
        try:
            tf.config.set_visible_devices([], "GPU")
        except RuntimeError:
            pass
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(n)])
    except RuntimeError:
        pass
    have = len(tf.config.list_logical_devices("CPU"))
    if have < n:
        raise UnavailableError(f"TensorFlow already runs with {have} logical CPU device(s) and "
                               f"{n} are needed; run in a fresh process (dlperf run does)")
    return [f"/CPU:{i}" for i in range(n)], False, {"visible_gpus": 0, "memory_growth": None,
                                                   "logical_cpu_devices": n}


def _worker_devices(tf: Any, cfg: RunConfig) -> tuple[list[str], bool, dict[str, Any]]:
    """A multi-worker process's devices (no call here may start TensorFlow's runtime: the
    strategy must be created first)."""
    n = local_replicas(cfg)
    gpus = tf.config.list_physical_devices("GPU")
    started = ("TensorFlow already started in this process; a multi-worker run must be "
               "started by dlperf's launcher, one fresh process per worker")
    if cfg.hardware.device == "cuda":
        if cfg.parallel.dp_layout == "per_device":
            local = int(os.environ.get("LOCAL_RANK", "0"))
            if len(gpus) <= local:
                raise UnavailableError(f"worker with local rank {local} needs GPU {local} but "
                                       f"TensorFlow sees {len(gpus)} GPU(s)")
            chosen = [gpus[local]]
        else:
            if len(gpus) < n:
                raise UnavailableError(f"{n} GPUs are needed per node (--nproc {n}) but "
                                       f"TensorFlow sees {len(gpus)}")
            local, chosen = 0, gpus[:n]
        try:
            tf.config.set_visible_devices(chosen, "GPU")
        except RuntimeError:
            raise UnavailableError(started) from None
        return [f"/GPU:{i}" for i in range(n)], True, {
            "visible_gpus": n, "memory_growth": True, "first_gpu_index": local}
    if n > 1:  # RunConfig refuses this already; kept for a config built around the check
        raise ConfigError(f"MultiWorkerMirroredStrategy drives one CPU device per worker; "
                          f"--nproc {cfg.parallel.nproc} CPU devices per node need --dp-layout per_device")
    if gpus:
        try:
            tf.config.set_visible_devices([], "GPU")
        except RuntimeError:
            raise UnavailableError(started) from None
    return ["/CPU:0"], False, {"visible_gpus": 0, "memory_growth": None}


def make_strategy(tf: Any, cfg: RunConfig, devices: list[str]) -> tuple[Any, DistContext]:
    """The run's strategy and this process's context: ``MirroredStrategy`` over ``devices``
    (one process), or ``MultiWorkerMirroredStrategy`` from ``$TF_CONFIG`` (see the module
    docstring).

    Raises:
        ConfigError: a multi-worker run without dlperf's launcher (no or another ``TF_CONFIG``).
        UnavailableError: the strategy has another number of replicas than ``cfg.world_size``.
    """
    if multi_worker(cfg):
        return _make_multi_worker(tf, cfg, devices)
    strategy = tf.distribute.MirroredStrategy(devices=devices)
    info = {"strategy": MIRRORED, "devices": devices,
            "replicas_in_sync": int(strategy.num_replicas_in_sync),
            "cross_device_ops": type(strategy.extended._cross_device_ops).__name__
            if getattr(strategy.extended, "_cross_device_ops", None) is not None else None,
            "gradient_reduction": "Keras optimizer all-reduce (sum) of loss/replicas gradients",
            "batch_norm": "per-replica statistics"}
    ctx = DistContext(rank=0, world_size=1, replicas=cfg.world_size,
                      backend="tf.distribute.MirroredStrategy", info=info)
    return strategy, ctx


def communication(tf: Any, gpu: bool) -> tuple[Any, str]:
    """``(CommunicationOptions, implementation name)``: NCCL on GPUs, RING (gRPC) on the CPU."""
    impl = tf.distribute.experimental.CommunicationImplementation
    chosen = impl.NCCL if gpu else impl.RING
    return tf.distribute.experimental.CommunicationOptions(implementation=chosen), chosen.name


def _make_multi_worker(tf: Any, cfg: RunConfig, devices: list[str]) -> tuple[Any, DistContext]:
    try:
        cluster, index = parse_tf_config(os.environ.get(TF_CONFIG_ENV))
    except ValueError as e:
        raise ConfigError(f"a multi-worker TensorFlow run must be started by dlperf's launcher "
                          f"(dlperf run --nproc N --dp-layout per_device, or --nnodes > 1): "
                          f"{e}") from None
    W = workers(cfg)
    if len(cluster) != W:
        raise ConfigError(f"${TF_CONFIG_ENV} lists {len(cluster)} workers but the configuration "
                          f"needs {W} (nproc {cfg.parallel.nproc} x nnodes {cfg.parallel.nnodes}, dp_layout "
                          f"{cfg.parallel.dp_layout})")
    rank = int(os.environ.get("RANK", index))
    if rank != index:
        raise ConfigError(f"${TF_CONFIG_ENV} task index {index} is not this process's rank "
                          f"{rank}")
    gpu = cfg.hardware.device == "cuda"
    options, impl = communication(tf, gpu)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    L = local_replicas(cfg)
    if int(strategy.num_replicas_in_sync) != cfg.world_size or \
            len(strategy.extended.worker_devices) != L:
        raise UnavailableError(
            f"MultiWorkerMirroredStrategy has {strategy.num_replicas_in_sync} replicas "
            f"({len(strategy.extended.worker_devices)} on this worker) but the configuration "
            f"needs {cfg.world_size} ({L} per worker)")
    agree_max, all_gather = _collectives(tf, strategy, rank, W, L)
    info = {"strategy": MULTI_WORKER, "communication": impl,
            "tf_config": {"workers": W, "task_index": index, "task_type": "worker"},
            "devices": list(strategy.extended.worker_devices), "local_replicas": L,
            "replicas_in_sync": int(strategy.num_replicas_in_sync),
            "gradient_reduction": (f"Keras optimizer all-reduce (sum) of loss/replicas "
                                   f"gradients; collective ops, {impl}"),
            "rank_loss": "the mean over the rank's rows (no collective in the step)",
            "batch_norm": "per-replica statistics"}
    ctx = DistContext(rank=rank, world_size=W,
                      local_rank=int(os.environ.get("LOCAL_RANK", "0")),
                      node_rank=int(os.environ.get("DLPERF_NODE_RANK", "0")),
                      replicas=cfg.world_size,
                      backend="tf.distribute.MultiWorkerMirroredStrategy",
                      agree_max=agree_max, all_gather=all_gather, info=info)
    return strategy, ctx


def _collectives(tf: Any, strategy: Any, rank: int, W: int, L: int):
    """``agree_max`` and ``all_gather`` over the workers, by one all-reduce (sum) of a
    ``[W, n]`` float64 matrix in which each worker fills only its own row (exact: every
    element is one worker's value plus zeros). Only each worker's first replica contributes.
    Lengths are rounded up to a power of two so that few shapes are traced."""
    import numpy as np

    @tf.function
    def allsum(m):
        def rep(v):
            ctx = tf.distribute.get_replica_context()
            v = tf.identity(v)  # on the replica's device (an all-reduce needs a placed value)
            if L > 1:
                v = tf.where(tf.equal(ctx.replica_id_in_sync_group % L, 0), v,
                             tf.zeros_like(v))
            return ctx.all_reduce(tf.distribute.ReduceOp.SUM, v)

        return strategy.experimental_local_results(strategy.run(rep, args=(m,)))[0]

    def gather_rows(row: np.ndarray) -> np.ndarray:
        n = 1 << max(0, int(row.size - 1).bit_length())
        m = np.zeros((W, n), np.float64)
        m[rank, :row.size] = row
        return np.asarray(allsum(tf.constant(m)))[:, :row.size]

    def agree_max(values: list[float]) -> list[float]:
        return [float(v) for v in gather_rows(np.asarray(values, np.float64)).max(axis=0)]

    def all_gather(obj: Any) -> list[Any]:
        data = np.frombuffer(json.dumps(obj).encode(), np.uint8)
        lens = gather_rows(np.asarray([data.size], np.float64))[:, 0].astype(int)
        buf = np.zeros(int(lens.max()), np.float64)
        buf[:data.size] = data
        rows = gather_rows(buf)
        return [json.loads(rows[i, :lens[i]].astype(np.uint8).tobytes()) for i in range(W)]

    return agree_max, all_gather


def distribute(tf: Any, strategy: Any, batch: tuple[Any, Any], per_replica: int,
               first_replica: int = 0) -> Any:
    """The replicas' rows of this process's ``(x, y)`` batch, placed on their devices: replica
    ``r`` (global id in sync) gets rows ``[(r - first_replica) b, (r - first_replica + 1) b)``
    of ``batch``. One process: ``batch`` is the global batch and ``first_replica`` 0; a worker
    holds its replicas' rows (:func:`worker_rows`) and ``first_replica = rank * L``."""
    x, y = batch

    def part(ctx):
        r = ctx.replica_id_in_sync_group - first_replica
        return x[r * per_replica:(r + 1) * per_replica], y[r * per_replica:(r + 1) * per_replica]

    return strategy.experimental_distribute_values_from_function(part)


def replicated_step(tf: Any, strategy: Any, replica_step: Callable[[Any, Any], Any],
                    replicas: int, local: int) -> Callable[[Any, Any], Any]:
    """The data-parallel step ``(x, y) -> loss``: ``replica_step`` on every replica
    (``strategy.run``), returning the mean loss over this process's rows: the sum of its
    ``local`` replicas' losses (each divided by ``replicas``) times ``replicas / local``. No
    collective runs for the loss (module docstring)."""
    scale = replicas / local

    def step_fn(x, y):
        per = strategy.run(replica_step, args=(x, y))
        total = tf.add_n(strategy.experimental_local_results(per))
        return total * scale if scale != 1 else total

    return step_fn


def distribute_source(tf: Any, strategy: Any, src: DataSource, per_replica: int,
                      first_replica: int, synthetic: bool) -> DataSource:
    """``src`` (this process's rows, on the host) with every batch split onto the replicas'
    devices (:func:`distribute`): synthetic batches once, before timing (a pool of
    :data:`~dlperf.frameworks.tensorflow.input.SYNTHETIC_POOL`, cycled); real batches in each
    step (``to_device``). ``first`` is distributed too (the step is traced for it)."""
    def place(batch: tuple[Any, Any]) -> Any:
        return distribute(tf, strategy, batch, per_replica, first_replica)

    if synthetic:
        pool = [place(src.next_batch()) for _ in range(SYNTHETIC_POOL)]
        it = itertools.cycle(pool)
        return dataclasses.replace(src, next_batch=it.__next__, fetch=it.__next__,
                                   to_device=identity, first=pool[0])
    host_next = src.next_batch

    def next_batch() -> Any:
        return place(host_next())

    return dataclasses.replace(src, next_batch=next_batch, fetch=host_next, to_device=place,
                               first=place(src.first))


def outside_env(launch: dict[str, Any]) -> dict[str, str]:
    """The registry's ``outside_env`` hook: the ``TF_CONFIG`` of a worker whose process an
    outside launcher started (:mod:`dlperf.launch.outside`; ``launch`` is its record).

    * ``TF_CONFIG`` already set (a Kubernetes TFJob, or by hand): kept.
    * ``slurm``: from TensorFlow's ``SlurmClusterResolver`` (every task of the ``srun`` step a
      worker, ordered by host and task; worker ``i`` listens on its host at port
      ``MASTER_PORT + 1 + local index``); it sets no ``CUDA_VISIBLE_DEVICES`` (dlperf picks the
      GPU of ``LOCAL_RANK``). The resolver's worker index must be the task's rank.

    Raises:
        ConfigError: another launcher without ``TF_CONFIG`` (torchrun's environment names only
            rank 0's address, and every TensorFlow worker needs every worker's), or a
            resolver whose order differs from the ranks'.
    """
    if TF_CONFIG_ENV in os.environ:
        return {}
    if launch["launcher"] != "slurm":
        raise ConfigError(f"TensorFlow workers started by {launch['launcher']} need "
                          f"{TF_CONFIG_ENV} (every worker's address and this one's index); "
                          "start them with srun, or with dlperf run --nproc N --dp-layout "
                          "per_device (dlperf's launcher writes it)")
    from tensorflow.python.distribute.cluster_resolver.slurm_cluster_resolver import (
        SlurmClusterResolver,
    )

    per_node = int(launch["local_world_size"])
    port = launch.get("master_port")
    resolver = SlurmClusterResolver(port_base=int(port) + 1 if port else 8888,
                                    gpus_per_node=per_node, gpus_per_task=1,
                                    auto_set_gpu=False)
    workers = resolver.cluster_spec().as_dict().get("worker", [])
    index = int(resolver.task_id)
    if index != int(launch["rank"]) or len(workers) != int(launch["world_size"]):
        raise ConfigError(f"SlurmClusterResolver made task {index} of {len(workers)} workers "
                          f"for rank {launch['rank']} of {launch['world_size']}")
    return {TF_CONFIG_ENV: json.dumps({"cluster": {"worker": list(workers)},
                                       "task": {"type": "worker", "index": index}})}
