"""Start the processes of one node for a data-parallel run of JAX or TensorFlow.

``python -m dlperf.launch.spawn --nproc P --nnodes M --node-rank K --coordinator HOST:PORT
--framework NAME CONFIG.json OUT_DIR [-- FRAMEWORK-OPTIONS]`` starts ``P`` copies of
:mod:`dlperf.launch.rank` with the environment of torchrun (``RANK = K P + i``,
``LOCAL_RANK = i``, ``WORLD_SIZE = M P``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK`` /
``DLPERF_NODE_RANK = K``) plus ``DLPERF_COORDINATOR`` (the JAX coordinator address), and behaves
like torchrun with ``--max-restarts 0``: when one process fails, the others are stopped
(SIGTERM, then SIGKILL after a grace period) and the first failure's exit status is returned;
SIGTERM or SIGINT to the spawner stops every child. PyTorch runs go through torchrun itself.

A framework whose processes need more environment names a ``process_env`` hook in its registry
entry (:class:`dlperf.registry.FrameworkInfo`); it gets the options after ``--`` (from its
``spawn_args`` hook) and returns each process's extra environment, before any process starts.
TensorFlow's (``MultiWorkerMirroredStrategy``, options ``--tf-config --run-id ID --timeout S``)
gives each process ``TF_CONFIG``: worker ``RANK`` of a cluster of ``WORLD_SIZE`` gRPC
addresses, picked on this node and exchanged with the other nodes through the coordinator
address (:mod:`dlperf.frameworks.tensorflow.cluster`). No framework is named here.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

from dlperf.registry import launch_info, load_hook

GRACE_S = 3.0


def _stop(children: list[subprocess.Popen]) -> None:
    for p in children:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + GRACE_S
    for p in children:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _process_envs(a: argparse.Namespace, hook_args: list[str]) -> list[dict[str, str]]:
    """The extra environment of each of the node's processes, from the framework's
    ``process_env`` hook (an empty one each without a hook).

    Raises:
        ValueError: the framework is not in the registry.
        OSError, RuntimeError: the hook could not make the environment (its reason).
    """
    try:
        info = launch_info(a.framework)
    except KeyError as e:
        raise ValueError(e.args[0]) from None
    hook = load_hook(info.process_env)
    if hook is None:
        return [{} for _ in range(a.nproc)]
    envs = hook(hook_args, node_rank=a.node_rank, nnodes=a.nnodes, nproc=a.nproc,
                coordinator=a.coordinator)
    if len(envs) != a.nproc:
        raise RuntimeError(f"{info.process_env} gave {len(envs)} environments for "
                           f"{a.nproc} processes")
    return envs


def main(argv: list[str] | None = None) -> int:
    """Start, watch and stop the node's processes; see the module docstring."""
    argv = sys.argv[1:] if argv is None else list(argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    argv, hook_args = argv[:cut], argv[cut + 1:]
    ap = argparse.ArgumentParser(prog="python -m dlperf.launch.spawn")
    ap.add_argument("--nproc", type=int, required=True)
    ap.add_argument("--nnodes", type=int, default=1)
    ap.add_argument("--node-rank", type=int, default=0)
    ap.add_argument("--coordinator", required=True, help="HOST:PORT of process 0")
    ap.add_argument("--framework", required=True,
                    help="the registry's name of the framework (its process_env hook)")
    ap.add_argument("config")
    ap.add_argument("out_dir")
    a = ap.parse_args(argv)
    children: list[subprocess.Popen] = []

    def on_signal(signum, frame):  # noqa: ARG001
        _stop(children)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    host, _, port = a.coordinator.rpartition(":")
    try:
        extra = _process_envs(a, hook_args)
    except (OSError, RuntimeError, ValueError) as e:  # TimeoutError is an OSError
        print(f"dlperf spawn: the environment of node {a.node_rank}'s processes could not be "
              f"made: {e}", file=sys.stderr, flush=True)
        return 1
    for i in range(a.nproc):
        rank = a.node_rank * a.nproc + i
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(i),
               "WORLD_SIZE": str(a.nnodes * a.nproc), "LOCAL_WORLD_SIZE": str(a.nproc),
               "GROUP_RANK": str(a.node_rank), "DLPERF_NODE_RANK": str(a.node_rank),
               "DLPERF_COORDINATOR": a.coordinator, "MASTER_ADDR": host, "MASTER_PORT": port,
               **extra[i]}
        children.append(subprocess.Popen([sys.executable, "-m", "dlperf.launch.rank", a.config,
                                          a.out_dir], env=env))
    return _watch(children, a.node_rank, a.nproc)


def _watch(children: list[subprocess.Popen], node_rank: int, nproc: int) -> int:
    """Wait for the children; at the first failure stop the others and return its status."""
    while True:
        codes = [p.poll() for p in children]
        bad = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
        if bad:
            i, code = bad[0]
            print(f"dlperf spawn: rank {node_rank * nproc + i} exited with code {code}",
                  file=sys.stderr, flush=True)
            _stop(children)
            return code if code > 0 else 128 - code
        if all(c == 0 for c in codes):
            return 0
        time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main())
