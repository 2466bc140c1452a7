"""Ranks started by a launcher outside dlperf: torchrun, SLURM's ``srun``, or a Kubernetes
``PyTorchJob`` (the Kubeflow training operator), which join through their environment instead of
dlperf's own spawner.

:func:`detect` reads the environment (first match wins):

=============  =====================================================  ========================
launcher       recognised by                                          rank / world / local
=============  =====================================================  ========================
``torchrun``   ``TORCHELASTIC_RUN_ID`` with ``RANK``, ``WORLD_SIZE``  ``RANK``, ``WORLD_SIZE``,
               (also torchrun inside a PyTorchJob: ``platform``       ``LOCAL_RANK``,
               ``kubernetes``)                                        ``LOCAL_WORLD_SIZE``
``slurm``      ``SLURM_PROCID`` with ``SLURM_STEP_NUM_TASKS`` (set    ``SLURM_PROCID``,
               by ``srun`` for its tasks, not in a batch script,      ``SLURM_STEP_NUM_TASKS``,
               whose one shell is no rank)                            ``SLURM_LOCALID``,
                                                                      ``SLURM_NODEID``
``pytorchjob`` ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` in a pod     ``RANK``, ``WORLD_SIZE``,
               (``KUBERNETES_SERVICE_HOST``): the operator's          one process per pod
               env:// variables                                       unless ``LOCAL_*``
``env``        the same outside Kubernetes (e.g. a hand-written       as ``pytorchjob``
               launch script)
=============  =====================================================  ========================

``DLPERF_LAUNCHER=dlperf`` turns detection off (dlperf's own ``--emit-slurm`` script sets it:
its ``srun`` tasks start dlperf's launcher, one per node, and are no ranks).

A detected launch is translated into the env:// variables that every framework's data-parallel
set-up in dlperf reads, as :mod:`dlperf.launch.spawn` sets them (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``DLPERF_NODE_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``),
plus ``DLPERF_LAUNCHED_BY``. Under SLURM the master is the first host of the step's node list
and the port ``MASTER_PORT`` if set, else :func:`slurm_port` of the job id (every rank computes
the same one without talking). What a framework needs beyond that (the JAX coordinator, or
``jax.distributed.initialize()``'s own SLURM detection; TensorFlow's ``TF_CONFIG`` from
``SlurmClusterResolver``) comes from its registry entry's ``outside_env`` hook, in its own
folder. This module imports no framework.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from dlperf.errors import ConfigError

__all__ = ["OutsideLaunch", "detect", "first_host", "slurm_port", "LAUNCHER_ENV"]

#: ``auto`` (default: detect) or ``dlperf`` (ignore the environment, dlperf starts its ranks).
LAUNCHER_ENV = "DLPERF_LAUNCHER"
#: Ports of :func:`slurm_port`: ``BASE + job id % SPAN`` (inside the unprivileged range and
#: below Linux's default ephemeral ports, 32768-60999, so no client socket holds it).
SLURM_PORT_BASE, SLURM_PORT_SPAN = 20000, 10000


@dataclass(frozen=True)
class OutsideLaunch:
    """Where this process stands in a launch that dlperf did not start (module docstring).

    Attributes:
        launcher: ``torchrun``, ``slurm``, ``pytorchjob`` or ``env``.
        rank, world_size: this process's global rank and the number of processes.
        local_rank, local_world_size: its index among its node's processes, and their number.
        node_rank, nnodes: its node's index and the number of nodes.
        master_addr, master_port: rank 0's host and the rendezvous port (env://).
        platform: ``kubernetes`` inside a pod, else None.
        details: what else the launcher said (job id, node list), for the record.
    """

    launcher: str
    rank: int
    world_size: int
    local_rank: int = 0
    local_world_size: int = 1
    node_rank: int = 0
    nnodes: int = 1
    master_addr: str | None = None
    master_port: int | None = None
    platform: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        """The env:// variables dlperf's data-parallel set-up reads (module docstring)."""
        out = {"RANK": str(self.rank), "WORLD_SIZE": str(self.world_size),
               "LOCAL_RANK": str(self.local_rank),
               "LOCAL_WORLD_SIZE": str(self.local_world_size),
               "DLPERF_NODE_RANK": str(self.node_rank), "DLPERF_LAUNCHED_BY": self.launcher}
        if self.master_addr is not None:
            out["MASTER_ADDR"] = self.master_addr
        if self.master_port is not None:
            out["MASTER_PORT"] = str(self.master_port)
        return out

    def record(self) -> dict[str, Any]:
        """The launch as stored in a result (``worker.launched_by``)."""
        return asdict(self)


def _int(env: Mapping[str, str], name: str, default: int | None = None) -> int:
    value = env.get(name)
    if value is None:
        if default is None:
            raise ConfigError(f"the launcher set no {name}")
        return default
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"{name}={value!r} from the launcher is not an integer") from None


def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list: ``gpu[07-09,12],cpu1`` -> ``gpu07`` (the bracket's
    first number, its zero padding kept), ``a,b`` -> ``a``.

    Raises:
        ConfigError: an empty list or an unclosed bracket.
    """
    text = nodelist.strip()
    m = re.match(r"([^,\[]*)(?:\[([^\]]*)\])?([^,]*)", text)
    if not text or m is None or ("[" in text.split(",")[0] and m.group(2) is None):
        raise ConfigError(f"cannot read the first host of SLURM node list {nodelist!r}")
    prefix, ranges, suffix = m.groups()
    if ranges is None:
        return prefix + suffix
    first = ranges.split(",")[0].split("-")[0]
    return prefix + first + suffix


def slurm_port(job_id: int) -> int:
    """The rendezvous port of SLURM job ``job_id``: ``20000 + job_id % 10000`` (the same on
    every rank; two jobs on one node collide only when their ids agree modulo 10000)."""
    return SLURM_PORT_BASE + job_id % SLURM_PORT_SPAN


def _slurm(env: Mapping[str, str]) -> OutsideLaunch:
    world = _int(env, "SLURM_STEP_NUM_TASKS")
    nnodes = _int(env, "SLURM_STEP_NUM_NODES", _int(env, "SLURM_NNODES", 1))
    if nnodes < 1 or world % nnodes:
        raise ConfigError(f"srun started {world} tasks on {nnodes} nodes; dlperf needs the same "
                          "number on every node (srun --ntasks-per-node=N)")
    nodelist = (env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")
                or env.get("SLURM_NODELIST") or "localhost")
    job = _int(env, "SLURM_JOB_ID", 0)
    port = _int(env, "MASTER_PORT", slurm_port(job))
    return OutsideLaunch(
        "slurm", rank=_int(env, "SLURM_PROCID"), world_size=world,
        local_rank=_int(env, "SLURM_LOCALID", 0), local_world_size=world // nnodes,
        node_rank=_int(env, "SLURM_NODEID", 0), nnodes=nnodes,
        master_addr=env.get("MASTER_ADDR") or first_host(nodelist), master_port=port,
        details={"job_id": job or None, "step_id": env.get("SLURM_STEP_ID"),
                 "nodelist": nodelist})


def _env_launch(env: Mapping[str, str], launcher: str, platform: str | None) -> OutsideLaunch:
    world = _int(env, "WORLD_SIZE")
    local_world = _int(env, "LOCAL_WORLD_SIZE", 1)
    rank = _int(env, "RANK")
    if local_world < 1 or world % local_world:
        raise ConfigError(f"WORLD_SIZE {world} is not a multiple of LOCAL_WORLD_SIZE "
                          f"{local_world}: dlperf needs the same number of processes per node")
    port = env.get("MASTER_PORT")
    return OutsideLaunch(
        launcher, rank=rank, world_size=world, local_rank=_int(env, "LOCAL_RANK", 0),
        local_world_size=local_world,
        node_rank=_int(env, "GROUP_RANK", rank // local_world), nnodes=world // local_world,
        master_addr=env.get("MASTER_ADDR"),
        master_port=int(port) if port and port.isdigit() else None, platform=platform,
        details={k: env[k] for k in ("TORCHELASTIC_RUN_ID", "PET_NNODES",
                                     "PET_NPROC_PER_NODE") if k in env})


def detect(env: Mapping[str, str] | None = None) -> OutsideLaunch | None:
    """The outside launch this process belongs to (module docstring), or None.

    Raises:
        ConfigError: ``DLPERF_LAUNCHER`` is neither ``auto`` nor ``dlperf``, or the launcher's
            variables are not integers or give an uneven number of processes per node.
    """
    env = os.environ if env is None else env
    choice = env.get(LAUNCHER_ENV, "auto")
    if choice not in ("auto", "dlperf"):
        raise ConfigError(f"{LAUNCHER_ENV}={choice!r}: use auto (join ranks started by "
                          "torchrun, srun or a PyTorchJob) or dlperf (dlperf starts them)")
    if choice == "dlperf":
        return None
    platform = "kubernetes" if "KUBERNETES_SERVICE_HOST" in env else None
    if "TORCHELASTIC_RUN_ID" in env and "RANK" in env and "WORLD_SIZE" in env:
        return _env_launch(env, "torchrun", platform)
    if "SLURM_PROCID" in env and "SLURM_STEP_NUM_TASKS" in env:
        return _slurm(env)
    if "RANK" in env and "WORLD_SIZE" in env and "MASTER_ADDR" in env:
        return _env_launch(env, "pytorchjob" if platform else "env", platform)
    return None
