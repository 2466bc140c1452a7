"""``torch.distributed`` set-up shared by the PyTorch adapter and the fake framework, and the
DDP wrapper of the PyTorch adapter (:func:`wrap_ddp`).

A process started by torchrun (or :mod:`dlperf.launch.distributed`) finds its place in the
environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT``; torchrun's
``GROUP_RANK`` or dlperf's ``DLPERF_NODE_RANK`` for the node). :func:`init_process_group` joins
the default process group (NCCL on CUDA with one GPU per local rank, gloo on the CPU) and
returns a :class:`~dlperf.frameworks.base.DistContext` whose ``agree_max`` and ``all_gather``
run over a gloo group (on the CPU, so gathering results never touches the GPUs' streams).
"""

from __future__ import annotations

import datetime as _dt
import os
from typing import Any

from dlperf.config import RunConfig
from dlperf.errors import ConfigError, UnavailableError
from dlperf.frameworks.base import DistContext
from dlperf.measure.breakdown.nccl import nccl_record


def env_ranks() -> tuple[int, int, int, int]:
    """(rank, world_size, local_rank, node_rank) from the launcher's environment.

    Raises:
        ConfigError: not started by a distributed launcher (``RANK``/``WORLD_SIZE`` missing).
    """
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        raise ConfigError("a data-parallel run (nproc x nnodes > 1) must be started by a "
                          "launcher (dlperf run --nproc N, or torchrun); RANK and WORLD_SIZE "
                          "are not set in this process")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    node = int(os.environ.get("DLPERF_NODE_RANK", os.environ.get("GROUP_RANK", "0")))
    return rank, world, local, node


def init_process_group(torch: Any, cfg: RunConfig) -> tuple[DistContext, Any]:
    """Join the default process group for ``cfg``; return (context, this rank's torch device).

    Raises:
        ConfigError: the launcher started a different number of processes than ``cfg`` asks.
        UnavailableError: on CUDA, no GPU ``LOCAL_RANK`` (fewer GPUs visible than processes
            on this node); checked before the device or the process group is touched.
    """
    import torch.distributed as dist

    rank, world, local, node = env_ranks()
    if world != cfg.world_size:
        raise ConfigError(f"the launcher started {world} processes but the configuration has "
                          f"nproc {cfg.parallel.nproc} x nnodes {cfg.parallel.nnodes} = {cfg.world_size}")
    cuda = cfg.hardware.device == "cuda"
    timeout = _dt.timedelta(seconds=cfg.measure.timeout_s)
    if cuda:
        n_gpus = torch.cuda.device_count()
        if local >= n_gpus:
            raise UnavailableError(
                f"LOCAL_RANK {local} needs GPU {local}, but this process sees {n_gpus} GPU(s) "
                f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}): one "
                f"process per GPU; use --nproc {n_gpus}" + (" or fewer" if n_gpus > 1 else ""))
        dev = torch.device(f"cuda:{local}")
        torch.cuda.set_device(dev)
        if not dist.is_initialized():
            dist.init_process_group("nccl", timeout=timeout, device_id=dev)
        group = dist.new_group(backend="gloo", timeout=timeout)
    else:
        dev = torch.device("cpu")
        if not dist.is_initialized():
            dist.init_process_group("gloo", timeout=timeout)
        group = None  # the default group is gloo already
    backend = dist.get_backend()

    def agree_max(values: list[float]) -> list[float]:
        t = torch.tensor([float(v) for v in values], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        return t.tolist()

    def all_gather(obj: Any) -> list[Any]:
        out: list[Any] = [None] * world
        dist.all_gather_object(out, obj, group=group)
        return out

    info = {"process_group_backend": backend, "master_addr": os.environ.get("MASTER_ADDR"),
            # an outside launcher (dlperf.launch.outside) names itself; else torchrun or dlperf's
            "launcher": os.environ.get("DLPERF_LAUNCHED_BY") or (
                "torchrun" if "TORCHELASTIC_RUN_ID" in os.environ else "dlperf"),
            "gather_backend": "gloo"}
    ctx = DistContext(rank=rank, world_size=world, local_rank=local, node_rank=node,
                      replicas=world, backend=f"ddp/{backend}", agree_max=agree_max,
                      all_gather=all_gather, info=info)
    return ctx, dev


def wrap_ddp(torch: Any, model: Any, dev: Any, cfg: RunConfig, ctx: DistContext
             ) -> tuple[Any, dict[str, Any]]:
    """``(DistributedDataParallel(model), flags)`` with ``cfg.runtime.ddp``'s options (bucket size,
    gradient-as-bucket-view, static graph, unused-parameter search, buffer broadcast); the
    flags (``ddp``, ``per_device_batch``) record them, and ``ctx.info["ddp"]`` too.
    ``torch.nn.parallel.DistributedDataParallel`` is looked up at call time (tests stand in
    for it)."""
    o = cfg.runtime.ddp
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[dev.index] if dev.type == "cuda" else None,
        bucket_cap_mb=o.bucket_cap_mb, gradient_as_bucket_view=o.gradient_as_bucket_view,
        static_graph=o.static_graph, find_unused_parameters=o.find_unused_parameters,
        broadcast_buffers=o.broadcast_buffers)
    ctx.info["ddp"] = o.model_dump()
    return ddp, {"ddp": o.model_dump(), "per_device_batch": cfg.per_device_batch}


#: Keys of DDP's own logging data (``DistributedDataParallel._get_ddp_logging_data()``, PyTorch's
#: ``DDPLoggingData``) kept in the record: the bucket layout after DDP rebuilt its buckets in
#: gradient-ready order, the ready order of the last iteration, and the compute/communication
#: times (ns) DDP samples on CUDA every few iterations (``avg_*`` where present).
DDP_RUNTIME_KEYS = ("bucket_cap_bytes", "bucket_sizes", "rebuilt_bucket_sizes",
                    "rebuilt_per_bucket_param_indices", "prev_iteration_grad_ready_order_indices",
                    "num_parameter_tensors", "total_parameter_size_bytes", "has_rebuilt_buckets",
                    "num_buckets_reduced", "gradient_as_bucket_view", "iteration", "dtypes",
                    "forward_compute_time", "backward_compute_time", "backward_comm_time",
                    "backward_compute_comm_overlap_time", "avg_forward_compute_time",
                    "avg_backward_compute_time", "avg_backward_comm_time",
                    "avg_backward_compute_comm_overlap_time", "nccl_version")


def _ints(v: Any) -> Any:
    """DDP logs lists as comma-separated strings ("1050624, 1050624"); give them as ints."""
    if isinstance(v, str) and v and all(p.strip().lstrip("-").isdigit() for p in v.split(",")):
        xs = [int(p) for p in v.split(",")]
        return xs if "," in v else xs[0]
    return v


def ddp_runtime(ddp: Any) -> dict[str, Any]:
    """DDP's record of itself after the measured segment (:data:`DDP_RUNTIME_KEYS` from
    ``_get_ddp_logging_data()``, a private but long-standing PyTorch API): ``buckets`` is one
    ``{"index", "bytes", "params"}`` per bucket in the order DDP reduces them (parameter
    indices as DDP numbers them), from the rebuilt layout where DDP rebuilt its buckets;
    times are nanoseconds as DDP logs them; ``source`` names the API; with the NCCL backend,
    ``nccl`` (:func:`dlperf.measure.breakdown.nccl.nccl_record`: NCCL's version and the
    ``NCCL_*`` variables in force). Raises what the API
    raises (the caller keeps it as an error)."""
    data = ddp._get_ddp_logging_data()
    out = {k: _ints(data[k]) for k in DDP_RUNTIME_KEYS if k in data}
    sizes = out.get("rebuilt_bucket_sizes") or out.get("bucket_sizes")
    params = data.get("rebuilt_per_bucket_param_indices")
    sizes = sizes if isinstance(sizes, list) else [sizes] if isinstance(sizes, int) else []
    per = ([[int(x) for x in grp.split()] for grp in params.split(",")]
           if isinstance(params, str) and params.strip() else [])
    out["buckets"] = [{"index": i, "bytes": b, "params": per[i] if i < len(per) else None}
                      for i, b in enumerate(sizes)]
    out["source"] = "torch DistributedDataParallel._get_ddp_logging_data()"
    if data.get("backend_name") == "nccl":  # NCCL version and NCCL_* overrides in force
        out["nccl"] = nccl_record(data.get("nccl_version") or _nccl_version(), os.environ)
    return out


def _nccl_version() -> Any:
    """``torch.cuda.nccl.version()`` where this torch build has NCCL (a CUDA build), else
    None: a capability check, not a framework one."""
    import torch

    nccl = getattr(torch.cuda, "nccl", None)
    try:
        return nccl.version() if nccl is not None and torch.cuda.is_available() else None
    except (AttributeError, RuntimeError):  # a build without NCCL
        return None
