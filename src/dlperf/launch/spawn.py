"""Start the processes of one node for a data-parallel run of JAX or TensorFlow.

``python -m dlperf.launch.spawn --nproc P --nnodes M --node-rank K --coordinator HOST:PORT
[--tf-config --run-id ID --timeout S] CONFIG.json OUT_DIR`` starts ``P`` copies of
:mod:`dlperf.launch.rank` with the environment of torchrun (``RANK = K P + i``,
``LOCAL_RANK = i``, ``WORLD_SIZE = M P``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK`` /
``DLPERF_NODE_RANK = K``) plus ``DLPERF_COORDINATOR`` (the JAX coordinator address), and behaves
like torchrun with ``--max-restarts 0``: when one process fails, the others are stopped
(SIGTERM, then SIGKILL after a grace period) and the first failure's exit status is returned;
SIGTERM or SIGINT to the spawner stops every child. PyTorch runs go through torchrun itself.

With ``--tf-config`` (TensorFlow ``MultiWorkerMirroredStrategy``) each process also gets
``TF_CONFIG``: worker ``RANK`` of a cluster of ``WORLD_SIZE`` gRPC addresses, picked on this
node and exchanged with the other nodes through the coordinator address before any process
starts (:mod:`dlperf.frameworks.tensorflow.cluster`); ``--run-id`` keeps nodes of different runs apart and
``--timeout`` bounds the wait for the other nodes.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

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


def main(argv: list[str] | None = None) -> int:
    """Start, watch and stop the node's processes; see the module docstring."""
    ap = argparse.ArgumentParser(prog="python -m dlperf.launch.spawn")
    ap.add_argument("--nproc", type=int, required=True)
    ap.add_argument("--nnodes", type=int, default=1)
    ap.add_argument("--node-rank", type=int, default=0)
    ap.add_argument("--coordinator", required=True, help="HOST:PORT of process 0")
    ap.add_argument("--tf-config", action="store_true",
                    help="set TF_CONFIG (TensorFlow MultiWorkerMirroredStrategy)")
    ap.add_argument("--run-id", default="dlperf", help="identity of the run (--tf-config)")
    ap.add_argument("--timeout", type=float, default=300.0,
                    help="seconds to wait for the other nodes (--tf-config)")
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
    workers: list[str] | None = None
    if a.tf_config:
        from dlperf.frameworks.tensorflow.cluster import cluster_addresses

        try:
            workers = cluster_addresses(node_rank=a.node_rank, nnodes=a.nnodes, nproc=a.nproc,
                                        coordinator=a.coordinator, run_id=a.run_id,
                                        timeout_s=a.timeout)
        except (OSError, RuntimeError, ValueError) as e:  # TimeoutError is an OSError
            print(f"dlperf spawn: the TensorFlow cluster of node {a.node_rank} could not be "
                  f"formed: {e}", file=sys.stderr, flush=True)
            return 1
    for i in range(a.nproc):
        rank = a.node_rank * a.nproc + i
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(i),
               "WORLD_SIZE": str(a.nnodes * a.nproc), "LOCAL_WORLD_SIZE": str(a.nproc),
               "GROUP_RANK": str(a.node_rank), "DLPERF_NODE_RANK": str(a.node_rank),
               "DLPERF_COORDINATOR": a.coordinator, "MASTER_ADDR": host, "MASTER_PORT": port}
        if workers is not None:
            from dlperf.frameworks.tensorflow.cluster import TF_CONFIG_ENV, tf_config

            env[TF_CONFIG_ENV] = tf_config(workers, rank)
        children.append(subprocess.Popen([sys.executable, "-m", "dlperf.launch.rank", a.config,
                                          a.out_dir], env=env))
    while True:
        codes = [p.poll() for p in children]
        bad = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
        if bad:
            i, code = bad[0]
            print(f"dlperf spawn: rank {a.node_rank * a.nproc + i} exited with code {code}",
                  file=sys.stderr, flush=True)
            _stop(children)
            return code if code > 0 else 128 - code
        if all(c == 0 for c in codes):
            return 0
        time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main())
