"""Run points in a rank that an outside launcher started (:mod:`dlperf.launch.outside`).

Every rank runs the same ``dlperf run`` command. With one process in the launch
(``world_size == 1``, e.g. ``srun -n 1``) nothing is joined: the point runs as always
(:func:`dlperf.launch.distributed.run_point`, its own worker process or dlperf's launcher) and
the record notes the launch. With several, each rank runs each point in its own process (the
launcher started it; dlperf starts nothing): the launch's env:// variables and the framework's
``outside_env`` hook (registry) are set, then :func:`dlperf.worker.run_record` joins the
process group and merges the ranks' samples, as in a rank that dlperf's launcher started
(:mod:`dlperf.launch.rank`). Points run one after another in one process, sharing the process
group (each point's world size must be the launch's); the isolation of a fresh process per
point (docs/measurement.md rule 11) is traded for joining the launcher's ranks. Each result
records the launch under ``worker.launched_by``.
"""

from __future__ import annotations

import os

from dlperf.config import RunConfig
from dlperf.errors import ConfigError
from dlperf.launch.outside import OutsideLaunch
from dlperf.registry import launch_info, load_hook
from dlperf.results.parts import WorkerInfo
from dlperf.results.schema import RunRecord, failure_record

__all__ = ["check_points", "run_joined", "leave"]


def check_points(points: list[RunConfig], launch: OutsideLaunch) -> None:
    """Every point of a joined run needs as many processes as the launch has.

    Raises:
        ConfigError: a point with another number of processes, naming the flags to change.
    """
    for p in points:
        n = p.processes_per_node * p.parallel.nnodes
        if n != launch.world_size:
            layout = (f", --dp-layout {p.parallel.dp_layout}: {p.processes_per_node} process(es) per "
                      "node" if p.parallel.dp_layout else "")
            raise ConfigError(
                f"{launch.launcher} started {launch.world_size} processes "
                f"({launch.local_world_size} per node on {launch.nnodes} node(s)), but "
                f"{p.label()} needs {n} (--nproc {p.parallel.nproc}, --nnodes {p.parallel.nnodes}{layout}); give "
                f"--nproc {launch.local_world_size} --nnodes {launch.nnodes} (and --dp-layout "
                "per_device where the framework drives several devices from one process), or "
                f"set DLPERF_LAUNCHER=dlperf to let dlperf start the processes itself")


def _join_env(cfg: RunConfig, launch: OutsideLaunch) -> None:
    """Set the launch's env:// variables and the framework's extra environment in this
    process (before the framework starts)."""
    os.environ.update(launch.env())
    hook = load_hook(launch_info(cfg.runtime.framework).outside_env)
    if hook is not None:
        os.environ.update(hook(launch.record()))


def run_joined(cfg: RunConfig, launch: OutsideLaunch) -> RunRecord:
    """The record of ``cfg`` in this rank of ``launch`` (module docstring); never raises for a
    failure of the run itself (a failure record, as from any launcher)."""
    if launch.world_size == 1:
        from dlperf.launch.distributed import run_point

        rec = run_point(cfg)
    else:
        from dlperf.worker import run_record

        try:
            _join_env(cfg, launch)
        except ConfigError as e:
            rec = failure_record(cfg, "error", str(e))
        else:
            rec = run_record(cfg)
    rec.worker = rec.worker or WorkerInfo()
    rec.worker.launched_by = launch.record()
    return rec


def leave(framework: str) -> None:
    """After the last point: the framework's ``rank_exit`` hook (JAX waits at
    ``jax.distributed``'s shutdown barrier); a failure is printed, never raised."""
    from dlperf.launch.rank import _rank_exit

    _rank_exit(framework)
