"""Cost of dlperf's NVML power-sampling thread to the measured loop (dlperf.measure.power).

A training loop is a Python thread that dispatches work; the sampler is a second thread that
wakes every interval, reads NVML and sleeps. This script times a GIL-bound Python loop (the
worst case: the dispatching thread never releases the GIL by itself) with and without a sampler
running, interleaved over rounds, and prints the slow-down. Readers: NVML's own where a GPU is
present (``--nvml``), else a stand-in that does the same Python work without a driver call.

    PYTHONPATH=src python benchmarks/sampler_cost.py [--interval 0.025] [--rounds 7] [--nvml]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from dlperf.measure.power import PowerSampler


def busy(n: int) -> float:
    """A GIL-bound loop; returns its duration in seconds."""
    t0 = time.perf_counter()
    x = 0
    for i in range(n):
        x += i * i
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--interval", type=float, default=0.025)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--nvml", action="store_true", help="read the GPU through NVML")
    a = ap.parse_args()
    if a.nvml:
        from dlperf import nvml

        readers, why = nvml.power_readers(None, 0)
        if readers is None:
            raise SystemExit(why)
        power, energy, mem = readers
    else:
        power, energy, mem = (lambda: 300.0), (lambda: 1.0), (lambda: 2**30)
    busy(a.n)  # warm-up
    off, on, samples = [], [], []
    for _ in range(a.rounds):
        off.append(busy(a.n))
        s = PowerSampler(power, energy, mem, interval_s=a.interval)
        s.start()
        on.append(busy(a.n))
        samples.append(len(s.stop().times_s))
    # The sampler's own CPU time while the main thread sleeps: an upper bound of the time it can
    # hold the GIL (process CPU time over wall time).
    s = PowerSampler(power, energy, mem, interval_s=a.interval)
    c0, w0 = time.process_time(), time.perf_counter()
    s.start()
    time.sleep(2.0)
    s.stop()
    cpu_share = (time.process_time() - c0) / (time.perf_counter() - w0)
    t0 = time.perf_counter()
    for _ in range(200):
        power(), mem()
    read_us = (time.perf_counter() - t0) / 200 * 1e6
    res = {"interval_s": a.interval, "readers": "nvml" if a.nvml else "stand-in",
           "loop_off_s": statistics.median(off), "loop_on_s": statistics.median(on),
           "slowdown": statistics.median(on) / statistics.median(off) - 1,
           "samples_per_round": statistics.median(samples), "one_sample_reads_us": read_us,
           "sampler_cpu_share": cpu_share}
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
