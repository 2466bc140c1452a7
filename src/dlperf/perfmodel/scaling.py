"""Scaling efficiency of data-parallel results against their one-device point (pure).

Definitions (docs/measurement.md "Scaling", after Shi et al. 2016 and Shi & Chu 2017): with ``N``
devices, global batch ``B_N`` and step time ``T_N``, throughput is ``B_N / T_N`` and the speed-up
over one device is ``S(N) = (B_N / T_N) / (B_1 / T_1)``. Scaling efficiency is ``E(N) = S(N) / N``:

* **weak scaling** (per-device batch fixed, ``B_N = N B_1``): ``E = T_1 / T_N``;
* **strong scaling** (global batch fixed, ``B_N = B_1``): ``E = T_1 / (N T_N)``.

:func:`efficiency` is that one formula; :func:`scaling_points` finds, for every stored
data-parallel result, the one-device result of the same configuration that serves as its
baseline (same model, framework, mode, device, precision, data, threads, gradient
accumulation; batch = its per-device batch for weak scaling, its global batch for strong
scaling) and computes both the efficiency from throughput (mean step times) and from the
median step times with a bootstrap CI (:func:`dlperf.stats.ratio_of_medians_ci`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from dlperf.env import environment_differences
from dlperf.results.schema import RunRecord
from dlperf.results.view import (
    config_of,
    dp_variant_of,
    env_of,
    median_s,
    result_id,
    samples_per_s,
)
from dlperf.results.view import per_device_of as _per_device
from dlperf.results.view import world_of as _world
from dlperf.stats import ratio_of_medians_ci

__all__ = ["efficiency", "speedup", "scaling_points", "MATCH_KEYS", "threads_of",
           "thread_mismatch"]

#: What must be equal between a data-parallel result and its one-device baseline.
MATCH_KEYS = ("model", "framework", "mode", "device", "precision", "data", "threads",
              "grad_accum")

def speedup(t1_s: float, tn_s: float, b1: int, bn: int) -> float:
    """``S = (bn / tn) / (b1 / t1)``: throughput with N devices over throughput with one.

    Raises:
        ValueError: a time or batch that is not > 0.
    """
    for name, v in (("t1_s", t1_s), ("tn_s", tn_s), ("b1", b1), ("bn", bn)):
        if not v > 0:
            raise ValueError(f"{name} must be > 0, got {v!r}")
    return (bn / tn_s) / (b1 / t1_s)


def efficiency(t1_s: float, tn_s: float, b1: int, bn: int, n: int) -> float:
    """Scaling efficiency ``E(N) = S(N) / N`` (weak: ``t1/tn``; strong: ``t1/(n tn)``).

    Args:
        t1_s, tn_s: step time (s) on one device and on ``n`` devices.
        b1, bn: global batch on one device and on ``n`` devices.
        n: devices (>= 1).

    Raises:
        ValueError: ``n < 1`` or a time or batch that is not > 0.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n!r}")
    return speedup(t1_s, tn_s, b1, bn) / n


#: Config fields (kept in the result JSON, not in columns) that also change what is measured:
#: a baseline must agree on them too (a --breakdown or --trace run is another measurement);
#: repeated runs (``--repeats``) form one series per repeat (repeat k against repeat k).
MATCH_CONFIG = {"layout": "auto", "loader_workers": None, "loader_impl": "auto",
                "breakdown": False, "trace_dir": None, "repeat": 0, "cpu_bind": "none"}


def threads_of(rec: RunRecord) -> int | None:
    """The threads one process of a result ran with: the framework's count as applied
    (``flags.threads``), else ``--threads`` as given; None where neither was recorded."""
    t = (rec.flags or {}).get("threads")
    if isinstance(t, int) and not isinstance(t, bool) and t > 0:
        return t
    return rec.identity.threads


def thread_mismatch(baseline: RunRecord, run: RunRecord) -> str | None:
    """Why an efficiency of CPU run ``run`` (N ranks) against its one-device ``baseline``
    compares different thread counts, or None when the baseline's threads equal one rank's,
    either is unrecorded, or the device is not the CPU (there the threads feed the device and
    the ranks' one thread each is the launchers' usual setting). On a CPU a data-parallel rank
    without ``--threads`` runs 1 thread while a one-device run takes the thread policy's count
    (every usable CPU on a quiet host): 2 ranks against 1 then measure threads as much as
    devices (an efficiency of 19.5 was seen)."""
    t1, tn = threads_of(baseline), threads_of(run)
    if run.identity.device != "cpu" or t1 is None or tn is None or t1 == tn:
        return None
    return (f"threads differ: the one-device baseline ran {t1} thread(s), each of the "
            f"{_world(run)} ranks {tn}; the efficiency measures the thread counts "
            f"as well as the devices (measure both with the same --threads)")


def _match(rec: RunRecord) -> tuple:
    cfg = config_of(rec)
    extra = tuple(bool(cfg.get(k)) if k == "trace_dir" else cfg.get(k, default)
                  for k, default in MATCH_CONFIG.items())
    ident = rec.identity
    return tuple(getattr(ident, k) if not (k == "grad_accum" and ident.grad_accum is None)
                 else 1 for k in MATCH_KEYS) + extra


def _no_threads(match: tuple) -> tuple:
    """A :func:`_match` key without its ``threads``."""
    i = MATCH_KEYS.index("threads")
    return match[:i] + match[i + 1:]


def _batch(rec: RunRecord) -> int:
    """The global batch of a result that has one (:func:`scaling_points` keeps only those)."""
    return int(rec.identity.batch_size or 0)


def _fields(rec: RunRecord) -> dict[str, Any]:
    return {k: getattr(rec.identity, k) for k in MATCH_KEYS}


def scaling_points(records: Sequence[RunRecord],
                   samples_of: Callable[[int], list[float]] | None = None
                   ) -> list[dict[str, Any]]:
    """One entry per (data-parallel ok result, kind of scaling with a baseline in
    ``records``).

    Args:
        records: results read from a store (``ResultStore.records``, or rows read by
            :func:`dlperf.results.view.as_records`): their status, global and per-device
            batch, devices and nodes, median step time, samples/s, exposed communication,
            rank imbalance and the :data:`MATCH_KEYS`.
        samples_of: result id -> measured step times (s), for the CI of the median-based
            efficiency; without it the CI is omitted.

    Returns:
        Dicts with the match keys, ``variant`` (:func:`dlperf.results.view.dp_variant_of`:
        non-default DDP options or data-parallel layout, ``""`` for none), ``scaling``
        (``weak``/``strong``), ``devices``,
        ``nnodes``, ``global_batch``, ``per_device_batch``, ``baseline_batch``, ``t1_s`` and
        ``tn_s`` (medians), ``samples_per_s_1`` / ``_n``, ``speedup``, ``efficiency`` (from
        throughput), ``efficiency_median`` with ``ci_low`` / ``ci_high``, ``imbalance``,
        ``exposed_comm_s``, the two result ids, ``env_differs`` (the environment fields in
        which the two runs differ, :func:`dlperf.env.environment_differences`), ``threads_1``
        and ``threads_per_rank`` (:func:`threads_of`) and ``warnings`` (why the efficiency is
        not like for like: :func:`thread_mismatch`; empty when it is). Every entry has the
        same keys; sorted by model, precision, batch, devices.
        One-device results with the baseline's batch appear as ``devices = 1`` rows
        (efficiency 1) so a table or plot starts at one device.
    """
    ok = [r for r in records if r.identity.status == "ok" and samples_per_s(r)
          and r.identity.batch_size is not None]
    base: dict[tuple, RunRecord] = {}
    loose: dict[tuple, RunRecord] = {}  # the same, whatever its threads
    for r in ok:  # newest one-device result per (configuration, batch)
        if _world(r) == 1:
            base[(_match(r), _batch(r))] = r
            loose[(_no_threads(_match(r)), _batch(r))] = r
    out: list[dict[str, Any]] = []
    used: set[tuple[int, str]] = set()
    for r in ok:
        n = _world(r)
        if n == 1:
            continue
        pdb, gb = _per_device(r), _batch(r)
        for kind, b1 in (("weak", pdb), ("strong", gb)):
            # a baseline with other threads still counts: its entry says so
            # (thread_mismatch); without it, ranks started without --threads (their own
            # default) found no baseline and the efficiency silently went missing
            b = base.get((_match(r), b1)) or loose.get((_no_threads(_match(r)), b1))
            if b is None or b1 is None:
                continue
            entry = _entry(r, b, kind, b1, samples_of)
            out.append(entry)
            if (id(b), kind) not in used:
                used.add((id(b), kind))
                out.append(_one_device(b, kind, entry["repeat"]))
    # A series (weak: per-device batch fixed; strong: global batch fixed) is identified by
    # its baseline batch.
    return sorted(out, key=lambda e: (str(e["model"]), str(e["framework"]), str(e["mode"]),
                                      str(e["device"]), str(e["precision"]), str(e["data"]),
                                      e["scaling"], e["baseline_batch"], e["repeat"],
                                      e["devices"], e["variant"]))


def _entry(r: RunRecord, b: RunRecord, kind: str, b1: int,
           samples_of: Callable[[int], list[float]] | None) -> dict[str, Any]:
    """The entry of data-parallel result ``r`` against its one-device baseline ``b`` (at
    batch ``b1``) under ``kind`` (``weak``/``strong``) scaling."""
    n, gb = _world(r), _batch(r)
    t1, tn = median_s(b), median_s(r)
    e_thr = (samples_per_s(r) / samples_per_s(b)) / n
    rep = _match(r)[len(MATCH_KEYS) + list(MATCH_CONFIG).index("repeat")]
    entry = {**_fields(r), "variant": dp_variant_of(r),
             "repeat": rep, "scaling": kind, "devices": n,
             "nnodes": r.identity.nnodes or 1, "global_batch": gb,
             "per_device_batch": _per_device(r), "baseline_batch": b1, "t1_s": t1, "tn_s": tn,
             "samples_per_s_1": samples_per_s(b), "samples_per_s_n": samples_per_s(r),
             "speedup": e_thr * n, "efficiency": e_thr,
             "efficiency_median": efficiency(t1, tn, b1, gb, n) if t1 and tn else None,
             "ci_low": None, "ci_high": None, "imbalance": r.rank_imbalance,
             "exposed_comm_s": r.exposed_comm_s,
             "id_1": result_id(b), "id_n": result_id(r),
             "env_differs": environment_differences(env_of(b), env_of(r)),
             "threads_1": threads_of(b), "threads_per_rank": threads_of(r),
             "warnings": [w for w in (thread_mismatch(b, r),) if w]}
    id_1, id_n = result_id(b), result_id(r)
    if samples_of is not None and id_1 is not None and id_n is not None:
        ratio, lo, hi = ratio_of_medians_ci(samples_of(id_1), samples_of(id_n))
        f = gb / (n * b1)
        entry.update(efficiency_median=ratio * f, ci_low=lo * f, ci_high=hi * f)
    return entry


def _one_device(b: RunRecord, kind: str, rep: Any) -> dict[str, Any]:
    """The ``devices = 1`` entry of baseline ``b`` that starts a series."""
    b1, t1 = _batch(b), median_s(b)
    return {**_fields(b), "variant": "", "repeat": rep, "scaling": kind, "devices": 1,
            "nnodes": 1, "global_batch": b1, "per_device_batch": b1, "baseline_batch": b1,
            "t1_s": t1, "tn_s": t1, "samples_per_s_1": samples_per_s(b),
            "samples_per_s_n": samples_per_s(b), "speedup": 1.0, "efficiency": 1.0,
            "efficiency_median": 1.0, "ci_low": None, "ci_high": None, "imbalance": None,
            "exposed_comm_s": None, "id_1": result_id(b), "id_n": result_id(b),
            "env_differs": [], "threads_1": threads_of(b), "threads_per_rank": threads_of(b),
            "warnings": []}
