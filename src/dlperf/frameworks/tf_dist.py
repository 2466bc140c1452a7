"""TensorFlow data parallelism: ``tf.distribute.MirroredStrategy`` over the local devices.

One process drives ``nproc`` devices (``dp_layout`` ``per_node``): GPUs, or on the CPU ``nproc``
logical CPU devices (``tf.config.set_logical_device_configuration``, set before TensorFlow
runs anything). The model and optimizer are created under ``strategy.scope()`` (mirrored
variables); each step runs the replica step on every device (``strategy.run``) with the
replica's rows of the global batch (``experimental_distribute_values_from_function``), Keras's
optimizer all-reduces (sums) the gradients across replicas, so each replica's loss is divided
by the number of replicas (the sum is then the gradient of the global mean loss), and the
returned loss is the replicas' sum (the global mean loss).

Several nodes (``MultiWorkerMirroredStrategy`` with ``TF_CONFIG``) are not built yet, nor is
mode ``xla`` under the strategy: such configurations are refused with a message that says so.
"""

from __future__ import annotations

from typing import Any

from dlperf.config import RunConfig
from dlperf.errors import ConfigError, UnavailableError
from dlperf.frameworks.base import DistContext


def configure_devices(tf: Any, cfg: RunConfig) -> tuple[list[str], bool, dict[str, Any]]:
    """Make ``cfg.nproc`` devices of ``cfg.device`` visible; return (device names, is_gpu,
    flags). Must run before TensorFlow runs anything.

    Raises:
        ConfigError: ``nnodes > 1`` (MultiWorkerMirroredStrategy is not built yet).
        UnavailableError: too few GPUs, or TensorFlow already started with other devices.
    """
    if cfg.nnodes > 1:
        raise ConfigError("TensorFlow data parallelism across nodes (MultiWorkerMirroredStrategy "
                          "with TF_CONFIG) is not built yet; use --nnodes 1 (MirroredStrategy "
                          "over the local devices)")
    if cfg.mode == "xla":
        # A jit_compile step around strategy.run cannot reach the mirrored variables on the
        # other devices (InvalidArgumentError "Trying to access resource ... located in device
        # CPU:1 from device CPU:0"; TensorFlow's XLA known issues), and jit_compile inside
        # strategy.run fails the same way with Keras 3 (seen with TensorFlow 2.21).
        raise ConfigError("TensorFlow --mode xla does not run under MirroredStrategy (XLA cannot "
                          "reach mirrored variables on other devices); use --mode graph or eager "
                          "with --nproc > 1")
    n = cfg.nproc
    gpus = tf.config.list_physical_devices("GPU")
    if cfg.device == "cuda":
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


def make_strategy(tf: Any, cfg: RunConfig, devices: list[str]) -> tuple[Any, DistContext]:
    """A ``MirroredStrategy`` over ``devices`` and the run's context (one process)."""
    strategy = tf.distribute.MirroredStrategy(devices=devices)
    info = {"strategy": "MirroredStrategy", "devices": devices,
            "replicas_in_sync": int(strategy.num_replicas_in_sync),
            "cross_device_ops": type(strategy.extended._cross_device_ops).__name__
            if getattr(strategy.extended, "_cross_device_ops", None) is not None else None,
            "gradient_reduction": "Keras optimizer all-reduce (sum) of loss/replicas gradients",
            "batch_norm": "per-replica statistics"}
    ctx = DistContext(rank=0, world_size=1, replicas=cfg.world_size,
                      backend="tf.distribute.MirroredStrategy", info=info)
    return strategy, ctx


def distribute(tf: Any, strategy: Any, batch: tuple[Any, Any], per_replica: int) -> Any:
    """The replicas' rows of a global ``(x, y)`` batch: replica ``r`` gets rows
    ``[r b, (r + 1) b)``, placed on its device."""
    x, y = batch

    def part(ctx):
        r = ctx.replica_id_in_sync_group
        return x[r * per_replica:(r + 1) * per_replica], y[r * per_replica:(r + 1) * per_replica]

    return strategy.experimental_distribute_values_from_function(part)
