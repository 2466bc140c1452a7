"""CPU placement of a worker: the CPUs and NUMA nodes it may run on, and ``--cpu-bind``.

Recorded with every result (:func:`dlperf.env.collect_env`: ``cpu_list``, ``numa_nodes``) and,
when binding is asked for, applied in the worker process before the framework starts
(:func:`bind_cpus`: ``os.sched_setaffinity``, which a framework's thread pool, created later,
inherits). The names follow Slurm's ``--cpu-bind`` (``none``, ``cores``) and numactl's
``--cpunodebind`` (``numa``); an explicit list is written as Linux's cpulist
(``0-3,8``, as ``taskset -c`` and ``numactl --physcpubind`` take it):

* ``none`` (default): the process keeps the CPUs it was started with;
* ``cores``: the usable CPUs are split into as many disjoint contiguous blocks as the node runs
  processes (data-parallel ranks, :attr:`RunConfig.processes_per_node`); local rank ``r`` is
  bound to block ``r`` (one process: all usable CPUs, fixed at start);
* ``numa``: local rank ``r`` is bound to the usable CPUs of NUMA node ``r mod nodes`` (the
  node's CPUs split among the ranks that share it); without NUMA information (no
  /sys/devices/system/node) the usable CPUs count as one node;
* a cpulist such as ``0-3`` or ``0,2,4``: those CPUs, split among the node's processes as
  ``cores`` splits the usable ones.

Pure planning (:func:`plan_cpus`) is apart from reading the machine (:func:`usable_cpus`,
:func:`numa_topology`) and from applying (:func:`bind_cpus`), so it is tested without binding.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["CPU_BIND_MODES", "NODE_DIR", "parse_cpulist", "check_cpu_bind", "usable_cpus",
           "numa_topology", "numa_nodes_of", "plan_cpus", "bind_cpus", "format_cpulist"]

#: The named ``--cpu-bind`` modes; anything else must be a cpulist.
CPU_BIND_MODES = ("none", "cores", "numa")
#: Where Linux lists the NUMA nodes and their CPUs (``node<N>/cpulist``).
NODE_DIR = Path("/sys/devices/system/node")
_CPULIST = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")
#: The most CPUs a cpulist may name (a typo such as ``0-99999999`` is refused, not expanded).
MAX_CPUS = 65536


def parse_cpulist(text: str) -> list[int]:
    """The CPUs of a Linux cpulist (``"0-3,8"`` -> ``[0, 1, 2, 3, 8]``), sorted, unique.

    Raises:
        ValueError: not a cpulist, a range that runs backwards, or more than
            :data:`MAX_CPUS` CPUs.
    """
    t = text.strip()
    if not _CPULIST.match(t):
        raise ValueError(f"{text!r} is not a CPU list (write it as 0-3,8)")
    cpus: set[int] = set()
    for part in t.split(","):
        lo, _, hi = part.partition("-")
        a, b = int(lo), int(hi or lo)
        if b < a:
            raise ValueError(f"CPU range {part!r} runs backwards")
        if b >= MAX_CPUS or len(cpus) + b - a + 1 > MAX_CPUS:
            raise ValueError(f"{text!r} names more than {MAX_CPUS} CPUs")
        cpus.update(range(a, b + 1))
    return sorted(cpus)


def format_cpulist(cpus: Sequence[int]) -> str:
    """The cpulist of ``cpus`` (``[0, 1, 2, 5]`` -> ``"0-2,5"``); ``""`` for none."""
    out: list[str] = []
    s = sorted(set(cpus))
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[j] + 1:
            j += 1
        out.append(str(s[i]) if i == j else f"{s[i]}-{s[j]}")
        i = j + 1
    return ",".join(out)


def check_cpu_bind(value: str) -> str:
    """``value`` if it is a ``--cpu-bind`` setting (a mode of :data:`CPU_BIND_MODES` or a
    cpulist), with a cpulist in its canonical form (``"3,0-2"`` -> ``"0-3"``).

    Raises:
        ValueError: neither, naming the accepted forms.
    """
    if value in CPU_BIND_MODES:
        return value
    try:
        return format_cpulist(parse_cpulist(value))
    except ValueError as e:
        raise ValueError(f"cpu_bind {value!r}: one of {', '.join(CPU_BIND_MODES)} or a CPU "
                         f"list such as 0-3,8 ({e})") from None


def usable_cpus() -> list[int]:
    """The CPUs this process may run on (its affinity), sorted; all CPUs where the OS has no
    affinity call."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return list(range(os.cpu_count() or 1))


def numa_topology(node_dir: Path = NODE_DIR) -> dict[int, list[int]] | None:
    """NUMA node -> its CPUs, from ``node_dir/node<N>/cpulist``; None where the directory is
    absent or unreadable (not Linux, a container without /sys): the caller records that."""
    try:
        entries = sorted(node_dir.glob("node[0-9]*"))
    except OSError:
        return None
    out: dict[int, list[int]] = {}
    for d in entries:
        try:
            text = (d / "cpulist").read_text().strip()
            out[int(d.name[4:])] = parse_cpulist(text) if text else []
        except (OSError, ValueError):
            continue
    return out or None


def numa_nodes_of(cpus: Sequence[int],
                  topology: Mapping[int, Sequence[int]] | None) -> list[int] | None:
    """The NUMA nodes holding any of ``cpus`` (sorted); None without a topology."""
    if topology is None:
        return None
    want = set(cpus)
    return sorted(n for n, cs in topology.items() if want & set(cs))


def _split(cpus: Sequence[int], parts: int, index: int) -> list[int]:
    """Block ``index`` of ``cpus`` cut into ``parts`` contiguous, disjoint, near-equal blocks
    (the first ``len % parts`` blocks one CPU longer)."""
    n = len(cpus)
    size, extra = divmod(n, parts)
    start = index * size + min(index, extra)
    return list(cpus[start:start + size + (1 if index < extra else 0)])


def plan_cpus(mode: str, usable: Sequence[int], local_rank: int = 0, local_procs: int = 1,
              topology: Mapping[int, Sequence[int]] | None = None) -> list[int] | None:
    """The CPUs local rank ``local_rank`` of ``local_procs`` processes on this node is bound to
    under ``mode`` (see the module docstring); None for ``none`` (no binding). Ranks of one
    node get disjoint sets.

    Raises:
        ValueError: ``mode`` is not a setting (:func:`check_cpu_bind`), a cpulist names CPUs
            this process may not use, or there are fewer CPUs than processes to share them.
    """
    mode = check_cpu_bind(mode)
    if mode == "none":
        return None
    if not 0 <= local_rank < local_procs:
        raise ValueError(f"local rank {local_rank} is not in 0..{local_procs - 1}")
    usable = sorted(set(usable))
    if mode == "numa":
        nodes = [sorted(set(cs) & set(usable)) for _, cs in sorted((topology or {}).items())]
        nodes = [cs for cs in nodes if cs] or [usable]
        node = nodes[local_rank % len(nodes)]
        sharing = len(range(local_rank % len(nodes), local_procs, len(nodes)))
        pool, index = node, local_rank // len(nodes)
    else:
        pool = usable if mode == "cores" else parse_cpulist(mode)
        outside = sorted(set(pool) - set(usable))
        if outside:
            raise ValueError(f"--cpu-bind {mode}: CPU(s) {format_cpulist(outside)} are not "
                             f"usable by this process (usable: {format_cpulist(usable)})")
        sharing, index = local_procs, local_rank
    if len(pool) < sharing:
        raise ValueError(f"--cpu-bind {mode}: {len(pool)} CPU(s) for {sharing} processes; "
                         "each process needs one of its own (fewer processes or more CPUs)")
    return _split(pool, sharing, index)


def _threads() -> list[int]:
    """The thread ids of this process (/proc/self/task), or ``[0]`` (the calling thread)
    where the OS has no such list."""
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except (OSError, ValueError):
        return [0]


def bind_cpus(mode: str, local_rank: int = 0, local_procs: int = 1) -> dict[str, Any]:
    """Bind this process to :func:`plan_cpus`'s CPUs (``os.sched_setaffinity``) and return
    what was done, for the result (``env.cpu_bind``): ``mode``, ``local_rank``, ``local_procs``,
    ``cpus`` (the cpulist bound to; None for ``none``), ``numa_nodes`` (of those CPUs; None
    without NUMA information) and ``applied``. Every thread of the process is bound (Linux:
    each of /proc/self/task; elsewhere the calling thread), and threads made later inherit
    it; call it before the framework starts, so that its thread pools are made inside.

    Raises:
        ValueError: as :func:`plan_cpus`.
        OSError: the OS refused the affinity.
    """
    topo = numa_topology()
    cpus = plan_cpus(mode, usable_cpus(), local_rank, local_procs, topo)
    if cpus is not None:
        for tid in _threads():  # threads already running (a BLAS pool made at import) too
            try:
                os.sched_setaffinity(tid, cpus)
            except ProcessLookupError:  # the thread ended meanwhile
                pass
    return {"mode": mode, "local_rank": local_rank, "local_procs": local_procs,
            "cpus": None if cpus is None else format_cpulist(cpus),
            "numa_nodes": None if cpus is None else numa_nodes_of(cpus, topo),
            "applied": cpus is not None}


def thread_policy_cpus(binds: Iterable[str]) -> list[int] | None:
    """The CPUs the thread policy (:func:`dlperf.env.choose_threads`) should count for
    one-process points bound by ``binds`` (their ``cpu_bind``): the CPUs the worker will be bound
    to, so that a busy host's thread count fits the binding (``--cpu-bind 0-3`` on a busy
    16-CPU host: at most 3 threads, not 15). With several bindings among the points, the
    smallest set (a count that fits each); None when no point is bound (the process's own
    usable CPUs) or a binding cannot be made here (:func:`check_here` refuses it first)."""
    modes = sorted({str(b) for b in binds} - {"none"})
    if not modes:
        return None
    usable, sets = usable_cpus(), []
    for mode in modes:
        try:
            cpus = plan_cpus(mode, usable, 0, 1, numa_topology() if mode == "numa" else None)
        except ValueError:
            return None
        if cpus is not None:
            sets.append(cpus)
    return min(sets, key=len) if sets else None


def check_here(binds: Iterable[tuple[str, int]]) -> None:
    """Refuse, before anything runs, a ``cpu_bind`` that cannot be made on this host for
    points bound by ``binds`` (``(cpu_bind, nproc ranks per node)`` each): the same check as the
    worker's :func:`plan_cpus` for every local rank, against this process's usable CPUs and
    NUMA nodes. Without it, ``--cpu-bind 0-99`` on a 2-CPU host started a worker and stored an
    error row. (The processes a point starts are checked by
    :func:`dlperf.config.limits.check_points_here`.)

    Raises:
        ConfigError: naming the setting and why it cannot be made here.
    """
    from dlperf.errors import ConfigError

    usable, topo = usable_cpus(), None
    seen: set[tuple[str, int]] = set()
    for mode, procs in binds:
        mode, procs = str(mode), int(procs or 1)
        if mode == "none" or (mode, procs) in seen:
            continue
        seen.add((mode, procs))
        if mode == "numa" and topo is None:
            topo = numa_topology() or {}
        try:
            for rank in range(procs):
                plan_cpus(mode, usable, rank, procs, topo)
        except ValueError as e:
            raise ConfigError(f"{e}; on this host use --cpu-bind none, cores or a list within "
                              f"{format_cpulist(usable)}") from None
