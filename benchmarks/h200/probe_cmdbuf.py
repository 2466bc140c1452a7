"""Can a JAX ``--timeline``/``--breakdown`` point on a GPU trace in the measured process?

Today such a point runs two worker processes (docs/usage.md, "one compiled program"): XLA's
command buffers (CUDA graphs) hide the HLO op of the kernels they capture, so the breakdown
turns them off with ``XLA_FLAGS=--xla_gpu_enable_command_buffer=`` for a whole second process,
which compiles the step again (70-95 s a point on the H200 for 0.3 s of measurement). This probe
answers, on one GPU, the two questions that decide whether one process can do it:

1. with command buffers on (JAX's default), do the traced kernels carry an ``hlo_op``?
   (``default.trace``: device events with and without one);
2. does ``Lowered.compile(compiler_options={"xla_gpu_enable_command_buffer": ""})`` turn
   command buffers off for that executable alone (``per_executable``: its optimized HLO has no
   command-buffer computation and all its traced kernels carry an ``hlo_op``), leaving the
   default executable's step time unchanged (``*.step_ms``)?

Run (one GPU, about a minute): ``python benchmarks/h200/probe_cmdbuf.py OUT.json``. On a CPU it
runs too (XLA:CPU has no command buffers: question 2's compile may be refused, which it reports).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from typing import Any

import jax
import jax.numpy as jnp

from dlperf.measure.breakdown.xspace import _device_events, load_planes

LAYERS = 24
WIDTH = 512
BATCH = 64


def make_step() -> tuple[Any, Any, Any]:
    """A 24-layer MLP training step (matmul, GELU, normalisation, SGD update): hundreds of small
    kernels, the kind XLA captures into command buffers."""
    keys = jax.random.split(jax.random.PRNGKey(0), LAYERS + 1)
    params = [jax.random.normal(k, (WIDTH, WIDTH), jnp.float32) * 0.02 for k in keys[:-1]]
    x = jax.random.normal(keys[-1], (BATCH, WIDTH), jnp.float32)

    def loss(ps: list, xb: Any) -> Any:
        h = xb
        for w in ps:
            h = jax.nn.gelu(h @ w)
            h = (h - h.mean(-1, keepdims=True)) / (h.std(-1, keepdims=True) + 1e-5)
        return (h ** 2).mean()

    def step(ps: list, xb: Any) -> tuple[list, Any]:
        val, grads = jax.value_and_grad(loss)(ps, xb)
        return [p - 1e-3 * g for p, g in zip(ps, grads, strict=True)], val

    return step, params, x


def step_ms(exe: Any, params: list, x: Any, n: int = 100) -> tuple[float, list]:
    """Median of ``n`` blocked steps (ms) after 10 warm-up steps; the final parameters."""
    for _ in range(10):
        params, val = exe(params, x)
    jax.block_until_ready(params)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        params, val = exe(params, x)
        jax.block_until_ready(val)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), params


def trace_counts(exe: Any, params: list, x: Any, n: int = 3) -> dict[str, Any]:
    """Device events of ``n`` traced steps: all of them, and those with an ``hlo_op`` stat."""
    with tempfile.TemporaryDirectory(prefix="dlperf-probe-") as d:
        with jax.profiler.trace(d):
            for i in range(n):
                with jax.profiler.StepTraceAnnotation("dlperf_step", step_num=i):
                    params, val = exe(params, x)
                    jax.block_until_ready(val)
        planes, _ = load_planes(d, prefer="profiledata")
        events = list(_device_events(planes, lambda e: True))
    gpu = [e for e, on_gpu in events if on_gpu]
    with_op = [e for e in gpu if e.stats.get("hlo_op")]
    names = sorted({e.name for e in gpu if not e.stats.get("hlo_op")})[:10]
    return {"device_events": len(gpu), "with_hlo_op": len(with_op),
            "without_hlo_op_names": names, "steps": n}


def probe(options: dict[str, str] | None) -> dict[str, Any]:
    """Compile the step (with ``options`` as compiler options, or XLA's defaults), time it,
    trace it; every failure is recorded, not raised."""
    step, params, x = make_step()
    out: dict[str, Any] = {"compiler_options": options}
    try:
        t0 = time.perf_counter()
        lowered = jax.jit(step).lower(params, x)
        exe = lowered.compile(compiler_options=options) if options else lowered.compile()
        out["compile_s"] = time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001 - the answer is that it failed
        out["error"] = f"{type(e).__name__}: {e}"[:800]
        return out
    text = exe.as_text() or ""
    out["hlo_mentions_command_buffer"] = "command_buffer" in text
    out["step_ms"], params = step_ms(exe, params, x)
    try:
        out["trace"] = trace_counts(exe, params, x)
    except Exception as e:  # noqa: BLE001
        out["trace_error"] = f"{type(e).__name__}: {e}"[:800]
    return out


def main(path: str) -> None:
    res = {"jax": jax.__version__, "devices": [str(d) for d in jax.devices()],
           "default": probe(None),
           "per_executable": probe({"xla_gpu_enable_command_buffer": ""}),
           "default_again": probe(None)}
    with open(path, "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "probe_cmdbuf.json")
