"""Data-parallel results: per-rank samples merged into one result (framework-free, pure).

Each process of a data-parallel run measures its own iterations (every process runs the same
number, agreed before the measured segment; :func:`dlperf.measure.loop.measure`). After the
loop every process contributes a *payload* (:func:`rank_payload`) and all payloads are
gathered; :func:`merge_ranks` turns them into what one result stores (docs/measurement.md rule 8,
"the slowest rank defines the step"):

* the step time of iteration ``i`` is the maximum over ranks of rank ``r``'s time of iteration
  ``i`` (per phase: first, warm-up, measure);
* the loss of iteration ``i`` is the mean over ranks (with equal per-rank batches, the loss of
  the global mini-batch, as DDP's gradient average);
* rank imbalance is ``max_r median_r / median over r of median_r``, the medians being each
  rank's measured step times (1.0 = balanced);
* every rank's raw samples are kept, under phases ``rank<r>:<phase>``.

:func:`gather_ranks` is what the worker calls after its loop: it gathers every process's
payload, merges them and returns the record's merged samples, memory (each peak the maximum
over ranks) and its ``dist`` part (:func:`dist_part`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from dlperf.measure.breakdown.overlap import combine_rank_comm

__all__ = ["PHASES", "rank_payload", "merge_ranks", "imbalance", "rank_phase", "max_memory",
           "dist_part", "union_compiled_at", "gather_ranks"]

PHASES = ("first", "warmup", "measure")


def rank_phase(rank: int, phase: str) -> str:
    """Name under which rank ``rank``'s raw samples of ``phase`` are stored: ``rank1:measure``."""
    return f"rank{rank}:{phase}"


def rank_payload(rank: int, *, samples: dict[str, list[float]], losses: dict[str, list[float]],
                 wall_s: float, local_rank: int = 0, node_rank: int = 0,
                 hostname: str | None = None, device: str | None = None,
                 memory: dict[str, Any] | None = None,
                 comm: dict[str, Any] | None = None, cpus: str | None = None,
                 threads: int | None = None) -> dict[str, Any]:
    """What one process contributes: its raw per-iteration times (s) and losses per phase,
    the wall time of its measured segment (s), where it ran (``cpus``: the CPUs it could use,
    a cpulist; ``threads``: the framework's threads) and its memory peaks."""
    return {"rank": int(rank), "local_rank": int(local_rank), "node_rank": int(node_rank),
            "hostname": hostname, "device": device, "cpus": cpus, "threads": threads,
            "samples": {k: [float(x) for x in v] for k, v in samples.items()},
            "losses": {k: [float(x) for x in v] for k, v in losses.items()},
            "wall_s": float(wall_s), "memory": memory or {}, "comm": comm}


def imbalance(per_rank_medians: Sequence[float]) -> float | None:
    """``max / median`` of the ranks' median step times (docs/measurement.md rule 8); None if the
    median is not positive. One rank: 1.0."""
    if not per_rank_medians:
        raise ValueError("per_rank_medians is empty")
    med = statistics.median(per_rank_medians)
    return max(per_rank_medians) / med if med > 0 else None


def _mean(xs: Sequence[float]) -> float:
    return math.fsum(xs) / len(xs)


def merge_ranks(payloads: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Merge the payloads of every rank (any order) into one result's samples.

    Returns ``{"samples": {phase: [max over ranks per iteration], rank_phase(r, phase): [...]},
    "losses": {phase: [mean over ranks per iteration], rank_phase(r, phase): [...]},
    "per_rank": [{"rank", "local_rank", "node_rank", "hostname", "device", "cpus", "threads",
    "n_measured",
    "median_s", "mean_s", "measured_time_s", "wall_s", "memory", "comm"}],
    "imbalance": float, "slowest_rank_counts": {rank: iterations where it was slowest},
    "wall_s": max over ranks}``. With one payload the merged samples equal its own and no
    ``rank<r>:`` phases are added.

    Raises:
        ValueError: no payloads, duplicate ranks, or ranks that ran different numbers of
            iterations in a phase (they must run the same steps in data-parallel training).
    """
    if not payloads:
        raise ValueError("no rank payloads to merge")
    ps = sorted(payloads, key=lambda p: p["rank"])
    ranks = [p["rank"] for p in ps]
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"duplicate ranks in payloads: {ranks}")
    samples: dict[str, list[float]] = {}
    losses: dict[str, list[float]] = {}
    phases = [ph for ph in PHASES if ph in ps[0]["samples"]]
    for ph in phases:
        counts = {p["rank"]: len(p["samples"].get(ph, [])) for p in ps}
        if len(set(counts.values())) != 1:
            raise ValueError(f"ranks ran different numbers of {ph} iterations: {counts}")
        cols = list(zip(*(p["samples"][ph] for p in ps)))
        samples[ph] = [max(c) for c in cols]
        lcols = list(zip(*(p["losses"].get(ph, []) for p in ps)))
        losses[ph] = [_mean(c) for c in lcols]
    slowest: dict[str, int] = {str(r): 0 for r in ranks}
    for c in zip(*(p["samples"].get("measure", []) for p in ps)):
        slowest[str(ranks[max(range(len(c)), key=c.__getitem__)])] += 1
    per_rank = []
    for p in ps:
        m = p["samples"].get("measure", [])
        per_rank.append({"rank": p["rank"], "local_rank": p.get("local_rank", 0),
                         "node_rank": p.get("node_rank", 0), "hostname": p.get("hostname"),
                         "device": p.get("device"), "cpus": p.get("cpus"),
                         "threads": p.get("threads"), "n_measured": len(m),
                         "median_s": statistics.median(m) if m else None,
                         "mean_s": _mean(m) if m else None,
                         "measured_time_s": math.fsum(m), "wall_s": p.get("wall_s"),
                         "memory": p.get("memory") or {}, "comm": p.get("comm")})
        if len(ps) > 1:
            for ph in phases:
                samples[rank_phase(p["rank"], ph)] = list(p["samples"][ph])
                losses[rank_phase(p["rank"], ph)] = list(p["losses"].get(ph, []))
    meds = [r["median_s"] for r in per_rank if r["median_s"] is not None]
    return {"samples": samples, "losses": losses, "per_rank": per_rank,
            "imbalance": imbalance(meds) if meds else None,
            "slowest_rank_counts": slowest,
            "wall_s": max(p.get("wall_s") or 0.0 for p in ps)}


def max_memory(per_rank: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Each memory peak (bytes) as the maximum over ranks (the device that came closest to its
    limit); None where no rank has the number. Keys sorted."""
    keys = {k for m in per_rank for k in m}
    return {k: max((m[k] for m in per_rank if m.get(k) is not None), default=None)
            for k in sorted(keys)}


#: Keys of a framework's ``DistContext.info`` that are fields of the ``dist`` part itself; the
#: rest is the part's ``engine`` (how that framework's data parallelism is set up).
DIST_INFO_FIELDS = ("ddp", "runtime", "process_group_backend")


def dist_part(cfg: Any, dist: Any, merged: dict[str, Any],
              comm: dict[str, Any] | None) -> dict[str, Any]:
    """The ``dist`` part of a data-parallel record (:class:`dlperf.results.schema.Dist`):
    ``cfg`` the RunConfig, ``dist`` the session's :class:`~dlperf.frameworks.base.DistContext`,
    ``merged`` from :func:`merge_ranks`, ``comm`` the combined exposed communication. The
    framework's ``dist.info`` goes into :data:`DIST_INFO_FIELDS` and ``engine``."""
    info = dict(dist.info or {})
    own = {k: info.pop(k) for k in DIST_INFO_FIELDS if k in info}
    return {"replicas": dist.replicas, "processes": dist.world_size, "nproc": cfg.parallel.nproc,
            "nnodes": cfg.parallel.nnodes, "dp_layout": cfg.parallel.dp_layout, "backend": dist.backend,
            "scaling": cfg.parallel.scaling, "global_batch": cfg.global_batch,
            "per_device_batch": cfg.per_device_batch,
            # one process driving several devices: its step already ends with the slowest
            # device, and per-device times are not observable without a trace
            "imbalance": merged["imbalance"] if dist.world_size > 1 else None,
            "slowest_rank_counts": merged["slowest_rank_counts"],
            "per_rank": merged["per_rank"], "step_time": "max over ranks per iteration",
            "loss": "mean over ranks per iteration", "comm": comm, **own,
            "engine": info or None}


def union_compiled_at(per_rank: Sequence[dict[str, list[int]] | None]
                      ) -> dict[str, list[int]] | None:
    """Phase -> sorted indices of the steps after which any rank's compile counter moved
    (the merged step is the slowest rank's, so a compile on one rank makes it a compile
    step); None when no rank has a counter."""
    have = [c for c in per_rank if c is not None]
    if not have:
        return None
    phases = sorted({ph for c in have for ph in c})
    return {ph: sorted({int(i) for c in have for i in c.get(ph, [])}) for ph in phases}


def _all_steady(flags: list[bool | None]) -> bool | None:
    """Every rank's steady state: False if any rank's is False, None (not looked for: warm-up
    off) if any is None, else True."""
    return False if any(f is False for f in flags) else (None if None in flags else True)


def gather_ranks(cfg: Any, dist: Any, payload: dict[str, Any], *, steady_state: bool | None,
                 recompiles_measured: Any,
                 compiled_at: dict[str, list[int]] | None = None) -> dict[str, Any]:
    """Gather every process's ``payload`` (:func:`rank_payload`; a collective: every process
    calls it) and merge them.

    Returns ``{"samples", "losses", "wall_s"}`` as :func:`merge_ranks` gives them, with
    ``steady_state`` (every rank's), ``recompiles_measured`` (the most on any rank, or this
    process's ``recompiles_measured`` when no rank recompiled), ``compiled_at``
    (:func:`union_compiled_at` of the ranks' compile steps), ``memory``
    (:func:`max_memory`), ``comm`` (:func:`~dlperf.measure.breakdown.overlap.
    combine_rank_comm` of the ranks' exposed communication, against the slowest rank's median
    step) and ``dist`` (:func:`dist_part`).
    """
    payload = {**payload, "steady_state": steady_state,
               "recompiles_measured": recompiles_measured, "compiled_at": compiled_at}
    gathered = dist.all_gather(payload)
    merged = merge_ranks(gathered)
    if any(p.get("recompiles_measured") for p in gathered):
        recompiles_measured = max(p.get("recompiles_measured") or 0 for p in gathered)
    per_rank_medians = [p["median_s"] for p in merged["per_rank"] if p["median_s"]]
    comm = combine_rank_comm([p.get("comm") for p in merged["per_rank"]],
                             max(per_rank_medians) if per_rank_medians else None)
    return {"samples": merged["samples"], "losses": merged["losses"], "wall_s": merged["wall_s"],
            "steady_state": _all_steady([p.get("steady_state", True) for p in gathered]),
            "recompiles_measured": recompiles_measured,
            "compiled_at": union_compiled_at([p.get("compiled_at") for p in gathered]),
            "memory": max_memory([p["memory"] for p in merged["per_rank"]]),
            "comm": comm, "dist": dist_part(cfg, dist, merged, comm)}
