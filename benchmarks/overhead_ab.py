"""Where does dlperf's overhead come from? A/B variants of one training step in one process.

``overhead.py`` compares dlperf with the plain loop across processes. When the ratio is below
0.98, this script finds the cause: it times, in one process and interleaved round by round, the
plain loop's model/optimizer/step and dlperf's session step, each toggle apart:

* ``plain``        plain_torch_loop's model and step, legacy TF32 flags (allow_tf32)
* ``plain+api``    the same after dlperf's precision call (``fp32_precision`` API)
* ``plain+keep``   the same, returning ``loss.detach()`` and keeping every handle (as dlperf)
* ``plain+event``  the same, recording a CUDA event per step (as dlperf's timer)
* ``plain+harness`` the plain step under dlperf's harness ``measure`` and its CUDA event timer
* ``dlperf-step``  dlperf's ``Session.step`` (its model, optimizer, data), no timer
* ``dlperf+power`` dlperf's step under the harness with the worker's NVML power sampler on
* ``dlperf``       dlperf's ``Session.step`` under dlperf's harness ``measure`` (what it reports)

Besides wall time per iteration, each variant's host CPU time per iteration (``time.thread_time``
of the main thread) is printed: for a host-bound step it is the host work itself, without the
preemption and frequency noise that dominates wall time on a shared host.

Each variant runs ``--iters`` steps per round after a warm-up; the wall time over the round,
synchronised at both ends, gives ms/iteration. Prints the median over rounds per variant.

    PYTHONPATH=src python benchmarks/overhead_ab.py --model alexnet --batch-size 128 --rounds 5
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import plain_torch_loop as plain  # noqa: E402

from dlperf.config import IterationPolicy, make_run_config  # noqa: E402
from dlperf.frameworks.torch.adapter import TorchAdapter  # noqa: E402
from dlperf.measure.loop import measure  # noqa: E402
from dlperf.zoo import get_spec  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--iters", type=int, default=300)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--device", default="cuda")
    p.add_argument("--json")
    p.add_argument("--dlperf-first", action="store_true",
                   help="let dlperf's step run (and autotune cuDNN) before the plain variants")
    p.add_argument("--variants", default="plain,plain+api,plain+keep,plain+event,dlperf-step",
                   help="comma-separated subset of the variants above (dlperf always runs)")
    a = p.parse_args()
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"

    def sync():
        if cuda:
            torch.cuda.synchronize(dev)

    def legacy_flags():
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = True

    # --- plain model, optimizer and batches (plain_torch_loop.py's own code) ---
    legacy_flags()
    torch.manual_seed(0)
    model, kind, in_shape, ncls, _ = plain.build_model(a.model, None)
    model = model.to(dev).train()
    opt = plain.make_optimizer(a.model, model)
    B = a.batch_size
    batches = []
    for _ in range(4):
        if kind == "tokens":
            x = torch.randint(0, ncls, (B, *in_shape), device=dev)
            y = torch.randint(0, ncls, (B, *in_shape), device=dev)
        else:
            x = torch.randn((B, *in_shape), device=dev)
            y = torch.randint(0, ncls, (B,), device=dev)
        batches.append((x, y))

    def plain_step(i):
        x, y = batches[i % 4]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).reshape(-1, ncls), y.reshape(-1))
        loss.backward()
        opt.step()
        return loss.detach()

    # --- dlperf's session ---
    cfg = make_run_config(model=a.model, batch_size=B, device=a.device, precision="fp32")
    session = TorchAdapter().prepare(cfg, get_spec(a.model))
    dstep = session.step
    if session.flags.get("layout") == "NHWC":  # the plain step in the layout dlperf applied
        model.to(memory_format=torch.channels_last)
        batches = [(x.contiguous(memory_format=torch.channels_last), y) for x, y in batches]
    print(f"layout: {session.flags.get('layout')}")

    events = [torch.cuda.Event(enable_timing=True) for _ in range(max(a.iters, 30) + 1)] if cuda else []

    cpu_ms: dict[str, list[float]] = {}

    def timed(body, n, name):
        gc.collect()
        sync()
        t, c = time.perf_counter(), time.thread_time()
        out = body(n)
        sync()
        t, c = (time.perf_counter() - t) / n * 1e3, (time.thread_time() - c) / n * 1e3
        if out is not None:  # a harness variant: its measured segment only
            _, t, c = out
        cpu_ms.setdefault(name, []).append(c)
        return t

    def v_plain(n):
        for i in range(n):
            plain_step(i)

    def v_keep(n):
        keep = []
        for i in range(n):
            keep.append(plain_step(i))

    def v_event(n):
        for i in range(n):
            plain_step(i)
            if cuda:
                events[i].record()

    def v_dstep(n):
        keep = []
        for _ in range(n):
            keep.append(dstep())

    def policy(n):
        return IterationPolicy(min_iters=n, max_iters=n, min_time_s=0.0, warmup_window=10,
                               max_warmup_iters=10, max_warmup_time_s=5.0)

    def harness(step, n, on_measure=None):
        """dlperf's measure() over ``step``: (wall ms, host CPU ms) per measured iteration only
        (its first iteration and warm-up excluded, as in what dlperf reports)."""
        c0 = [0.0]

        def on_phase(ph):
            if on_measure is not None:
                on_measure()
            c0[0] = time.thread_time()  # last thing before the measured segment

        r = measure(step, session.timer, policy(n), on_phase=on_phase)
        c = time.thread_time() - c0[0]
        k = len(r.measured_s)
        return r, r.wall_s / k * 1e3, c / k * 1e3

    def v_harness(n):
        return harness(dstep, n)

    def v_plain_harness(n):
        it = iter(range(1 << 62))
        return harness(lambda: plain_step(next(it)), n)

    def v_power(n):
        from dlperf.worker import PowerControl

        power = PowerControl(session.nvml_target, 0.025)
        try:
            return harness(dstep, n, on_measure=power.start)
        finally:
            power.stop()

    variants = {
        "plain": (legacy_flags, v_plain),
        "plain+api": (lambda: TorchAdapter.apply_precision(torch, "fp32"), v_plain),
        "plain+keep": (legacy_flags, v_keep),
        "plain+event": (legacy_flags, v_event),
        "plain+harness": (legacy_flags, v_plain_harness),
        "dlperf-step": (lambda: TorchAdapter.apply_precision(torch, "fp32"), v_dstep),
        "dlperf+power": (lambda: TorchAdapter.apply_precision(torch, "fp32"), v_power),
    }
    variants = {k: variants[k] for k in a.variants.split(",")}
    res: dict[str, list[float]] = {k: [] for k in [*variants, "dlperf", "dlperf(events)"]}
    if a.dlperf_first:  # cuDNN autotunes under dlperf's settings, the plain loop reuses it
        TorchAdapter.apply_precision(torch, "fp32")
        v_dstep(30)
    for setup, body in variants.values():  # warm-up every variant (autotune, allocator)
        setup()
        body(30)
    sync()
    for _ in range(a.rounds):
        for name, (setup, body) in variants.items():
            setup()
            res[name].append(timed(body, a.iters, name))
        # per-round ratio of dlperf's harness to the first variant, below
        TorchAdapter.apply_precision(torch, "fp32")
        gc.collect()
        sync()
        r, wall_ms, c = v_harness(a.iters)
        cpu_ms.setdefault("dlperf", []).append(c)
        # measure() syncs at its end; its wall_s covers the measured segment only.
        res["dlperf"].append(wall_ms)
        res["dlperf(events)"].append(statistics.fmean(r.measured_s) * 1e3)
    out = {k: {"median_ms": statistics.median(v), "all_ms": v,
               **({"median_cpu_ms": statistics.median(cpu_ms[k]), "all_cpu_ms": cpu_ms[k]}
                  if k in cpu_ms else {})} for k, v in res.items()}
    ref = res[next(iter(variants))]
    # Rounds interleave the variants, so a slow patch of the host hits all of them alike: the
    # median of per-round ratios is steadier than the ratio of medians.
    per_round = [r / d for r, d in zip(ref, res["dlperf"], strict=True)]
    out["dlperf_throughput_ratio_per_round"] = per_round
    out["dlperf_throughput_ratio_median"] = statistics.median(per_round)
    base = out[next(iter(variants))]["median_ms"]
    first = "dlperf's step" if a.dlperf_first else "the plain loop"
    print(f"{a.model} b={B} on {a.device}: ms/iteration, median of {a.rounds} rounds "
          f"of {a.iters} steps (ratio = first variant / variant, throughput ratio); "
          f"{first} autotuned first")
    for k, v in out.items():
        if not isinstance(v, dict):
            continue
        cpu = f"cpu {v['median_cpu_ms']:8.4f} ms" if "median_cpu_ms" in v else " " * 15
        print(f"  {k:16s} {v['median_ms']:9.4f} ms  {base / v['median_ms']:.4f}  {cpu}  "
              f"[{', '.join(f'{x:.3f}' for x in v['all_ms'][:12])}{' ...' if a.rounds > 12 else ''}]")
    print(f"  dlperf / {next(iter(variants))} throughput, median of per-round ratios: "
          f"{out['dlperf_throughput_ratio_median']:.4f}")
    if a.json:
        Path(a.json).write_text(json.dumps({"model": a.model, "batch_size": B, **out}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
