"""All-reduce bandwidth benchmark over ``torch.distributed``, in the manner of nccl-tests.

Run one process per device with torchrun::

    torchrun --nproc-per-node 2 -m dlperf.comm.allreduce --min-bytes 8 --max-bytes 1G \
        --iters 20 --warmup 5 --json allreduce.json

The backend is NCCL when CUDA is available, else gloo on the CPU. For each message size every
rank warms up, then (after a barrier) times ``iters`` back-to-back all-reduces: with CUDA events
recorded around the loop on the GPU (docs/measurement.md rules 1-2, no host sync per call) and with
``time.perf_counter`` on the CPU (gloo's blocking all-reduce returns when it is complete). The
time of one call is the loop time / ``iters`` on each rank; rank 0 gathers every rank's time and
the slowest rank defines the reported time (rule 8). Correctness is checked once per size,
outside the timed loop: every rank fills its buffer with ``rank + 1`` and after the sum every
element must equal ``n (n + 1) / 2`` on every rank.

Bandwidths follow nccl-tests ``doc/PERFORMANCE.md`` (see :func:`algbw` and :func:`busbw`);
GB here is 1e9 bytes, as there.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from typing import Any

__all__ = ["algbw", "busbw", "message_sizes", "parse_size", "run_rank", "format_table", "main"]

#: dtype names accepted on the command line (the names nccl-tests prints).
DTYPES = {"float": "float32", "float32": "float32", "half": "float16", "float16": "float16",
          "bfloat16": "bfloat16", "double": "float64", "float64": "float64",
          "int32": "int32", "int": "int32"}
_SHORT = {"float32": "float", "float16": "half", "bfloat16": "bfloat16", "float64": "double",
          "int32": "int32"}


def algbw(size_bytes: float, seconds: float) -> float:
    """Algorithm bandwidth in bytes/s: ``S / t`` (nccl-tests ``doc/PERFORMANCE.md``).

    ``S`` is the message size in bytes (the size of one rank's buffer), ``t`` the time of one
    collective in seconds. Raises ValueError when ``seconds`` is not > 0 or ``size_bytes`` < 0.
    """
    if not seconds > 0:
        raise ValueError(f"seconds must be > 0, got {seconds!r}")
    if size_bytes < 0:
        raise ValueError(f"size_bytes must be >= 0, got {size_bytes!r}")
    return size_bytes / seconds


def busbw(size_bytes: float, seconds: float, nranks: int) -> float:
    """Bus bandwidth of an all-reduce in bytes/s: ``algbw * 2 (n - 1) / n``.

    nccl-tests ``doc/PERFORMANCE.md``: a ring all-reduce moves ``2 (n - 1) / n`` times the
    message over the slowest link, so bus bandwidth is comparable with the hardware peak and
    independent of the rank count. Equal to algbw for n = 2; 0 for n = 1 (nothing crosses a
    link). Raises ValueError when ``nranks`` < 1.
    """
    if nranks < 1:
        raise ValueError(f"nranks must be >= 1, got {nranks!r}")
    return algbw(size_bytes, seconds) * 2.0 * (nranks - 1) / nranks


def message_sizes(min_bytes: int = 8, max_bytes: int = 1 << 30, factor: int = 2) -> list[int]:
    """Sizes ``min_bytes, min_bytes * factor, ...`` up to and including ``max_bytes`` if hit.

    Like nccl-tests ``-b/-e/-f``. Raises ValueError on ``min_bytes`` < 1, ``max_bytes`` <
    ``min_bytes`` or ``factor`` < 2.
    """
    if min_bytes < 1:
        raise ValueError(f"min_bytes must be >= 1, got {min_bytes}")
    if max_bytes < min_bytes:
        raise ValueError(f"max_bytes ({max_bytes}) must be >= min_bytes ({min_bytes})")
    if factor < 2:
        raise ValueError(f"factor must be an integer >= 2, got {factor}")
    out, s = [], int(min_bytes)
    while s <= max_bytes:
        out.append(s)
        s *= factor
    return out


def parse_size(text: str | int) -> int:
    """``"8"``, ``"64K"``, ``"1M"``, ``"1G"`` (powers of 1024, as nccl-tests) to bytes."""
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*(\d+)\s*([kKmMgG]?)[bB]?\s*", str(text))
    if not m:
        raise ValueError(f"not a size: {text!r}; give e.g. 8, 64K, 1M or 1G")
    mult = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2).lower()]
    return int(m.group(1)) * mult


def _time_loop_cpu(dist: Any, t: Any, iters: int) -> float:
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(t)
    return (time.perf_counter() - t0) / iters


def _time_loop_cuda(torch: Any, dist: Any, t: Any, iters: int, local_rank: int) -> float:
    dist.barrier(device_ids=[local_rank])
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        dist.all_reduce(t)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / iters


def run_rank(sizes: list[int], dtype: str = "float32", warmup: int = 5, iters: int = 20,
             backend: str | None = None) -> list[dict[str, Any]] | None:
    """Benchmark all-reduce at each size inside an initialised process group.

    Every rank must call this with the same arguments. Returns the rows on rank 0 and None on
    the others. A row: ``size_bytes, count, dtype, nranks, time_s`` (max over ranks, seconds per
    all-reduce), ``time_s_per_rank``, ``imbalance`` (max / median over ranks), ``time_s_rank_summary``
    (:func:`dlperf.stats.summarize` over the ranks' times), ``algbw_GBps``,
    ``busbw_GBps`` (1e9 bytes/s, from the max time), ``wrong`` (elements differing from
    ``n (n + 1) / 2``, summed over ranks) and ``correct`` (wrong == 0). A size that is not a
    multiple of the element size is rounded down to one (at least one element).
    """
    import torch
    import torch.distributed as dist

    from dlperf.stats import summarize

    if not dist.is_initialized():
        raise RuntimeError("run_rank needs an initialised process group (run under torchrun)")
    if iters < 1 or warmup < 0:
        raise ValueError(f"iters must be >= 1 and warmup >= 0, got {iters} and {warmup}")
    backend = backend or dist.get_backend()
    tdtype = getattr(torch, DTYPES.get(dtype, dtype))
    rank, n = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    on_gpu = backend == "nccl"
    device = torch.device(f"cuda:{local_rank}") if on_gpu else torch.device("cpu")
    if on_gpu:
        torch.cuda.set_device(device)
    esize = torch.empty((), dtype=tdtype).element_size()
    expected = n * (n + 1) // 2

    times, wrongs, counts = [], [], []
    for size in sizes:
        count = max(1, int(size) // esize)
        t = torch.empty(count, dtype=tdtype, device=device)
        # Correctness, once per size, outside the timed loop.
        t.fill_(rank + 1)
        dist.all_reduce(t)
        wrongs.append(int((t != expected).sum().item()))
        # Timing on zeros: repeated in-place sums of zeros cannot overflow.
        t.zero_()
        for _ in range(warmup):
            dist.all_reduce(t)
        if on_gpu:
            sec = _time_loop_cuda(torch, dist, t, iters, local_rank)
        else:
            sec = _time_loop_cpu(dist, t, iters)
        times.append(sec)
        counts.append(count)
        del t

    mine = torch.tensor([times, [float(w) for w in wrongs]], dtype=torch.float64, device=device)
    gathered = [torch.empty_like(mine) for _ in range(n)]
    dist.all_gather(gathered, mine)
    if rank != 0:
        return None
    allr = torch.stack(gathered).cpu()  # (ranks, 2, sizes)
    rows = []
    for i, _size in enumerate(sizes):
        per_rank = [float(v) for v in allr[:, 0, i]]
        wrong = int(allr[:, 1, i].sum().item())
        nbytes = counts[i] * esize
        tmax = max(per_rank)
        spread = summarize(per_rank, n_resamples=200)
        med = spread.median
        rows.append({
            "size_bytes": nbytes,
            "count": counts[i],
            "dtype": str(tdtype).removeprefix("torch."),
            "nranks": n,
            "time_s": tmax,
            "time_s_per_rank": per_rank,
            "imbalance": tmax / med if med > 0 else None,
            "time_s_rank_summary": spread.to_dict(),
            "algbw_GBps": algbw(nbytes, tmax) / 1e9,
            "busbw_GBps": busbw(nbytes, tmax, n) / 1e9,
            "wrong": wrong,
            "correct": wrong == 0,
        })
    return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    """An nccl-tests-like table: size, count, type, time (us), algbw, busbw (GB/s), #wrong."""
    lines = [f"{'size':>12} {'count':>12} {'type':>8} {'time':>10} {'algbw':>8} {'busbw':>8} "
             f"{'#wrong':>7}",
             f"{'(B)':>12} {'(elements)':>12} {'':>8} {'(us)':>10} {'(GB/s)':>8} {'(GB/s)':>8} "
             f"{'':>7}"]
    for r in rows:
        lines.append(f"{r['size_bytes']:>12} {r['count']:>12} {_SHORT.get(r['dtype'], r['dtype']):>8} "
                     f"{r['time_s'] * 1e6:>10.2f} {r['algbw_GBps']:>8.2f} {r['busbw_GBps']:>8.2f} "
                     f"{r['wrong']:>7}")
    if rows:
        lines.append(f"# Avg bus bandwidth    : {sum(r['busbw_GBps'] for r in rows) / len(rows):.3f}"
                     f" GB/s over {len(rows)} sizes, {rows[0]['nranks']} ranks")
    return "\n".join(lines)


def _provenance(torch: Any, backend: str) -> dict[str, Any]:
    info: dict[str, Any] = {"torch": torch.__version__, "backend": backend}
    if torch.cuda.is_available():
        info["cuda"] = torch.version.cuda
        try:
            info["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        except Exception:
            info["nccl"] = None
        info["device_name"] = torch.cuda.get_device_name(0)
    return info


def main(argv: list[str] | None = None) -> int:
    """Entry point under torchrun; rank 0 prints the table and writes ``--json``."""
    p = argparse.ArgumentParser(prog="python -m dlperf.comm.allreduce",
                                description="All-reduce bandwidth (nccl-tests style) over "
                                            "torch.distributed; run under torchrun.")
    p.add_argument("--min-bytes", default="8", help="smallest message, e.g. 8, 64K (default 8)")
    p.add_argument("--max-bytes", default="1G", help="largest message, e.g. 1M, 1G (default 1G)")
    p.add_argument("--factor", type=int, default=2, help="size multiplier (default 2)")
    p.add_argument("--iters", type=int, default=20, help="timed all-reduces per size")
    p.add_argument("--warmup", type=int, default=5, help="untimed all-reduces per size")
    p.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    p.add_argument("--backend", default=None, choices=["nccl", "gloo"],
                   help="default: nccl if CUDA is available, else gloo")
    p.add_argument("--json", default=None, help="write rows and environment here (rank 0)")
    a = p.parse_args(argv)

    import torch
    import torch.distributed as dist

    backend = a.backend or ("nccl" if torch.cuda.is_available() else "gloo")
    try:
        sizes = message_sizes(parse_size(a.min_bytes), parse_size(a.max_bytes), a.factor)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if backend == "nccl":
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        dist.init_process_group(backend, device_id=torch.device(f"cuda:{local_rank}"))
    else:
        dist.init_process_group(backend)
    try:
        rows = run_rank(sizes, DTYPES[a.dtype], a.warmup, a.iters, backend)
        if dist.get_rank() == 0:
            assert rows is not None
            print(f"# all-reduce, {backend}, {dist.get_world_size()} ranks, warmup {a.warmup}, "
                  f"iters {a.iters}; time = slowest rank")
            print(format_table(rows), flush=True)
            if a.json:
                from dlperf.env import collect_env

                doc = {"benchmark": "allreduce", "backend": backend,
                       "nranks": dist.get_world_size(), "dtype": DTYPES[a.dtype],
                       "warmup": a.warmup, "iters": a.iters, "factor": a.factor,
                       "rows": rows, "framework": _provenance(torch, backend),
                       "env": collect_env()}
                from dlperf.outputs import atomic_write

                atomic_write(a.json, json.dumps(doc, indent=2))  # checked by the CLI
        ok = rows is None or all(r["correct"] for r in rows)
    finally:
        dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
