"""``TF_CONFIG`` for TensorFlow's ``MultiWorkerMirroredStrategy`` (framework-free: no TensorFlow).

``MultiWorkerMirroredStrategy`` reads its cluster from the environment variable ``TF_CONFIG``
(TensorFlow's multi-worker guide, "Multi-worker configuration")::

    {"cluster": {"worker": ["host0:port0", "host1:port1", ...]},
     "task": {"type": "worker", "index": i}}

Every worker lists every worker's gRPC address, in the same order, and its own index; worker 0
is the chief (it also leads the collectives and the coordination service). dlperf runs one
TensorFlow worker per process and makes worker ``i`` the process of global rank ``i``
(:mod:`dlperf.launch.spawn`: ``RANK = node_rank * P + local_rank``), so ``TF_CONFIG`` follows
from the rank, the world size and one address per process.

Addresses: each node's spawner picks ``P`` free TCP ports (the operating system's choice, all
held open together so none repeats) and advertises them on the host that routes to the
coordinator (``127.0.0.1`` on one node; ``$DLPERF_WORKER_HOST`` overrides it). With one node
that is the cluster. With several, node 0's spawner listens on the coordinator address
(``--rdzv-endpoint``, which TensorFlow runs use for nothing else) and the other nodes' spawners
send it their addresses: one line of JSON each way (:func:`exchange`). Node 0 answers every node
with the full list in node order once all ``nnodes`` have reported, so all workers get the same
cluster. A node whose run identity (the configuration's run key) or process count differs is
answered with an error and not counted.

The spawner sets ``TF_CONFIG`` in each process's environment before the process starts, hence
before TensorFlow is imported (the strategy must be created before any other TensorFlow op).
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["tf_config", "parse_tf_config", "worker_host", "pick_ports", "format_address",
           "exchange", "cluster_addresses", "TF_CONFIG_ENV", "HOST_ENV"]

#: The variable TensorFlow's ``TFConfigClusterResolver`` reads.
TF_CONFIG_ENV = "TF_CONFIG"
#: Overrides the address this node advertises to the other workers.
HOST_ENV = "DLPERF_WORKER_HOST"
#: Longest accepted line of the exchange (a few hundred workers' addresses).
_MAX_LINE = 1 << 20


def format_address(host: str, port: int) -> str:
    """``host:port``; an IPv6 literal in brackets (``[::1]:5000``), as gRPC wants it."""
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def split_address(address: str) -> tuple[str, int]:
    """``("host", port)`` of ``host:port`` or ``[v6]:port``.

    Raises:
        ValueError: no port, or a port that is not an integer in 1..65535.
    """
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{address!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def tf_config(workers: Sequence[str], index: int) -> str:
    """The ``TF_CONFIG`` JSON of worker ``index`` in a cluster of ``workers`` (``host:port``
    each, worker 0 first).

    Raises:
        ValueError: no workers, a repeated address, or ``index`` outside ``0 .. len - 1``.
    """
    workers = list(workers)
    if not workers:
        raise ValueError("a TensorFlow cluster needs at least one worker")
    if len(set(workers)) != len(workers):
        raise ValueError(f"repeated worker addresses in {workers}")
    if not 0 <= index < len(workers):
        raise ValueError(f"worker index {index} is outside 0 .. {len(workers) - 1}")
    return json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker",
                                                                "index": int(index)}})


def parse_tf_config(text: str | None) -> tuple[list[str], int]:
    """``(worker addresses, this worker's index)`` of a ``TF_CONFIG`` value.

    Raises:
        ValueError: missing or not JSON, no ``cluster.worker`` list, another job than
            ``worker`` (dlperf makes no chief, evaluator or parameter-server tasks), or an
            index outside the list.
    """
    if not text:
        raise ValueError(f"${TF_CONFIG_ENV} is not set")
    try:
        d = json.loads(text)
        workers = list(d["cluster"]["worker"])
        task = d["task"]
        kind, index = task.get("type"), int(task["index"])
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"${TF_CONFIG_ENV} is not a worker cluster ({type(e).__name__}: {e}): "
                         f"{text[:200]!r}") from None
    extra = sorted(set(d["cluster"]) - {"worker"})
    if kind != "worker" or extra:
        raise ValueError(f"${TF_CONFIG_ENV} has task type {kind!r} and jobs {extra or 'none'} "
                         f"besides 'worker'; dlperf runs workers only")
    if not 0 <= index < len(workers):
        raise ValueError(f"${TF_CONFIG_ENV} task index {index} is outside the {len(workers)} "
                         f"workers")
    return workers, index


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def worker_host(coordinator_host: str, env: Mapping[str, str] | None = None) -> str:
    """The address other workers reach this node's workers at: ``$DLPERF_WORKER_HOST`` if set;
    ``127.0.0.1`` if the coordinator is on the loopback interface (one machine); else the
    local address of the route to the coordinator (a UDP ``connect``, which sends nothing)."""
    env = os.environ if env is None else env
    if env.get(HOST_ENV):
        return env[HOST_ENV]
    if _is_loopback(coordinator_host):
        return "127.0.0.1"
    fam = socket.AF_INET6 if ":" in coordinator_host else socket.AF_INET
    try:
        with socket.socket(fam, socket.SOCK_DGRAM) as s:
            s.connect((coordinator_host, 9))
            return str(s.getsockname()[0])
    except OSError:
        return socket.gethostname()


def pick_ports(n: int, host: str = "") -> list[int]:
    """``n`` distinct TCP ports free on ``host`` now (all bound at once, then released; a
    port can still be taken by another program before TensorFlow binds it)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET,
                              socket.SOCK_STREAM)
            socks.append(s)
            s.bind((host, 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def _send(conn: socket.socket, obj: Any) -> None:
    conn.sendall(json.dumps(obj).encode() + b"\n")


def _recv(conn: socket.socket, deadline: float) -> Any:
    buf = b""
    while not buf.endswith(b"\n"):
        conn.settimeout(max(0.05, deadline - time.monotonic()))
        chunk = conn.recv(65536)
        if not chunk:
            raise ConnectionError("the peer closed the connection before a full message")
        buf += chunk
        if len(buf) > _MAX_LINE:
            raise ConnectionError("message too long")
    return json.loads(buf)


def exchange(*, node_rank: int, nnodes: int, coordinator: str, addresses: Sequence[str],
             run_id: str, timeout_s: float,
             listening: socket.socket | None = None,
             clock: Callable[[], float] = time.monotonic) -> list[str]:
    """Every node's worker addresses, node 0's first (see the module docstring).

    Node 0 serves on ``coordinator`` (or on ``listening``, a socket already listening there)
    until all ``nnodes`` nodes have reported; node ``k > 0`` connects (retrying until the
    deadline: node 0 may start later) and waits for the answer.

    Args:
        node_rank: this node's index, ``0 .. nnodes - 1``.
        nnodes: the number of nodes.
        coordinator: ``HOST:PORT`` of node 0's spawner.
        addresses: this node's workers' ``host:port``, in local-rank order.
        run_id: the identity of the run (the configuration's run key); nodes of another run
            are refused.
        timeout_s: seconds to wait for all nodes.

    Returns:
        The worker addresses of all nodes, in node order (node 0's local ranks first).

    Raises:
        TimeoutError: not every node reported within ``timeout_s``.
        RuntimeError: node 0 refused this node (another run, or a repeated node rank), or
            nodes run different numbers of processes.
    """
    deadline = clock() + timeout_s
    mine = {"node_rank": node_rank, "addresses": list(addresses), "run_id": run_id}
    if nnodes == 1:
        return list(addresses)
    host, port = split_address(coordinator)
    if node_rank == 0:
        return _serve(mine, nnodes, host, port, deadline, listening, clock)
    last: Exception | None = None
    while clock() < deadline:
        try:
            with socket.create_connection((host, port), timeout=max(0.05, deadline - clock())) \
                    as conn:
                _send(conn, mine)
                reply = _recv(conn, deadline)
        except (OSError, ValueError) as e:  # node 0 not up yet, or it went away: retry
            last = e
            time.sleep(0.2)
            continue
        if "error" in reply:
            raise RuntimeError(f"node 0 ({coordinator}) refused node {node_rank}: "
                               f"{reply['error']}")
        return list(reply["workers"])
    raise TimeoutError(f"node {node_rank} could not get the TensorFlow cluster from node 0 at "
                       f"{coordinator} within {timeout_s:g} s (last error: {last}); start the "
                       f"same command on every node with --rdzv-endpoint NODE0:PORT")


def _serve(mine: dict[str, Any], nnodes: int, host: str, port: int, deadline: float,
           listening: socket.socket | None, clock: Callable[[], float]) -> list[str]:
    srv = listening
    if srv is None:
        srv = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET,
                            socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("" if not _is_loopback(host) else host, port))
        srv.listen(64)
    nodes: dict[int, list[str]] = {0: list(mine["addresses"])}
    conns: dict[int, socket.socket] = {}
    try:
        while len(nodes) < nnodes:
            left = deadline - clock()
            if left <= 0:
                missing = sorted(set(range(nnodes)) - set(nodes))
                raise TimeoutError(f"node 0 waited for the TensorFlow workers of node(s) "
                                   f"{missing} and none came; start the same command on every "
                                   f"node with --rdzv-endpoint {format_address(host, port)}")
            srv.settimeout(min(left, 1.0))
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            try:
                msg = _recv(conn, min(deadline, clock() + 10.0))
                k = int(msg["node_rank"])
                err = None
                if msg.get("run_id") != mine["run_id"]:
                    err = (f"another run: run id {msg.get('run_id')!r}, node 0 runs "
                           f"{mine['run_id']!r}")
                elif not 0 < k < nnodes or k in nodes:
                    err = f"node rank {k} is repeated or outside 1 .. {nnodes - 1}"
                elif len(msg["addresses"]) != len(mine["addresses"]):
                    err = (f"node {k} runs {len(msg['addresses'])} processes, node 0 "
                           f"{len(mine['addresses'])}")
            except (OSError, ValueError, KeyError, TypeError) as e:
                conn.close()
                print(f"dlperf spawn: ignored a bad cluster message ({e})", flush=True)
                continue
            if err is not None:
                try:
                    _send(conn, {"error": err})
                finally:
                    conn.close()
                continue
            nodes[k], conns[k] = list(msg["addresses"]), conn
        workers = [a for k in range(nnodes) for a in nodes[k]]
        for conn in conns.values():
            try:
                _send(conn, {"workers": workers})
            except OSError:
                pass  # that node's spawner died: its workers never join; TensorFlow times out
        return workers
    finally:
        for conn in conns.values():
            conn.close()
        srv.close()


def cluster_addresses(*, node_rank: int, nnodes: int, nproc: int, coordinator: str,
                      run_id: str, timeout_s: float,
                      env: Mapping[str, str] | None = None) -> list[str]:
    """This run's TensorFlow workers, ``host:port`` each, in global-rank order: ``nproc``
    fresh ports on this node's :func:`worker_host`, exchanged with the other nodes."""
    chost, cport = split_address(coordinator)
    listening = None
    if nnodes > 1 and node_rank == 0:  # listen before picking ports: they cannot collide
        listening = socket.socket(socket.AF_INET6 if ":" in chost else socket.AF_INET,
                                  socket.SOCK_STREAM)
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listening.bind(("" if not _is_loopback(chost) else chost, cport))
        listening.listen(64)
    host = worker_host(chost, env)
    bind_host = "" if ":" not in host else "::"
    mine = [format_address(host, p) for p in pick_ports(nproc, bind_host)]
    return exchange(node_rank=node_rank, nnodes=nnodes, coordinator=coordinator,
                    addresses=mine, run_id=run_id, timeout_s=timeout_s, listening=listening)


def spawn_args(cfg: Any) -> list[str]:
    """TensorFlow's options for :mod:`dlperf.launch.spawn` (the registry's ``spawn_args``
    hook): ``--tf-config`` (each process gets ``TF_CONFIG``), ``--run-id`` (keeps nodes of
    different runs apart: the configuration's run key) and ``--timeout`` (seconds to wait for
    the other nodes: the run's timeout)."""
    return ["--tf-config", "--run-id", f"dlperf-{cfg.run_key()}", "--timeout",
            f"{cfg.measure.timeout_s:g}"]


def process_env(args: Sequence[str], *, node_rank: int, nnodes: int, nproc: int,
                coordinator: str) -> list[dict[str, str]]:
    """The registry's ``process_env`` hook, run by the spawner before it starts the node's
    ``nproc`` processes: with ``--tf-config`` in ``args`` (:func:`spawn_args`), ``TF_CONFIG`` of
    global rank ``node_rank * nproc + i`` for local process ``i``, from
    :func:`cluster_addresses`; else nothing.

    Raises:
        RuntimeError: the cluster could not be formed (naming the node and the cause).
    """
    import argparse

    ap = argparse.ArgumentParser(prog="dlperf spawn -- (tensorflow)")
    ap.add_argument("--tf-config", action="store_true", help="set TF_CONFIG per process")
    ap.add_argument("--run-id", default="dlperf", help="identity of the run")
    ap.add_argument("--timeout", type=float, default=300.0,
                    help="seconds to wait for the other nodes")
    a = ap.parse_args(list(args))
    if not a.tf_config:
        return [{} for _ in range(nproc)]
    try:
        workers = cluster_addresses(node_rank=node_rank, nnodes=nnodes, nproc=nproc,
                                    coordinator=coordinator, run_id=a.run_id,
                                    timeout_s=a.timeout)
    except (OSError, RuntimeError, ValueError) as e:  # TimeoutError is an OSError
        raise RuntimeError(f"the TensorFlow cluster of node {node_rank} could not be formed: "
                           f"{e}") from e
    return [{TF_CONFIG_ENV: tf_config(workers, node_rank * nproc + i)} for i in range(nproc)]
