"""A fake framework for tests: no training, scripted durations and failures.

Enabled only when ``DLPERF_FAKE_FRAMEWORK=1`` (then ``--framework fake`` is valid). Each step
sleeps ``DLPERF_FAKE_STEP_S`` seconds (default 0.001) and returns a loss that decreases.
``DLPERF_FAKE_FAIL`` scripts failures by batch size, e.g. ``64=oom,128=crash,256=nan,512=hang``:
``oom`` raises an out-of-memory error, ``crash`` kills the process without a result, ``nan``
returns NaN losses, ``hang`` sleeps forever (for timeout tests), ``error`` raises a DataError.

Breakdown (``--breakdown``/``--trace``): the phased step sleeps :data:`PHASE_SHARES` of the
step time per phase (they add up to the fused step); the "profile" writes a small Chrome-trace
JSON and returns a trace with one op per phase per step, of the slept durations.

With real data (``data`` not ``synthetic``) each step first waits ``DLPERF_FAKE_DATA_WAIT_S``
seconds (default 0) for its "batch", recorded as the data wait of a pipeline.
``DLPERF_FAKE_BREAKDOWN_APART=1`` makes a ``--breakdown`` run two processes, as JAX's on a GPU
(:meth:`FakeAdapter.breakdown_apart`). ``DLPERF_FAKE_NVML=1`` makes the session claim GPU 0 for NVML (tests of the power sampling
patch :func:`dlperf.nvml.power_readers`).

Data parallel (``nproc x nnodes > 1``, under a launcher): the process joins a gloo process group
(PyTorch must be installed), each step ends with an all-reduce of one number, as DDP's
gradient all-reduce does (so a rank that dies or hangs stops the others, as in real training),
and ``DLPERF_FAKE_FAIL_RANK=R`` limits the scripted failures to rank ``R``.
"""

from __future__ import annotations

import os
import resource
import time
from typing import Any

from dlperf.config import RunConfig
from dlperf.errors import DataError
from dlperf.frameworks.base import OutOfMemory, Session
from dlperf.measure.timers import HostTimer
from dlperf.zoo.spec import ModelSpec


#: Share of the step each phase sleeps in the fake phased step (sums to 1).
PHASE_SHARES = {"t_io": 0.1, "t_h2d": 0.1, "t_f": 0.3, "t_b": 0.4, "t_u": 0.1}
#: Op class of each fake phase's op in the fake trace.
PHASE_OPS = {"t_io": "aten::index_select", "t_h2d": "Memcpy HtoD (Pinned -> Device)",
             "t_f": "aten::conv2d", "t_b": "aten::convolution_backward",
             "t_u": "aten::_foreach_add_"}


def scripted_failure(batch_size: int) -> str | None:
    """The failure scripted for ``batch_size`` in ``$DLPERF_FAKE_FAIL``, if any."""
    for item in filter(None, os.environ.get("DLPERF_FAKE_FAIL", "").split(",")):
        b, _, kind = item.partition("=")
        if int(b) == batch_size:
            return kind
    return None


class FakeAdapter:
    """Test double of a framework adapter (see module docstring)."""

    name = "fake"
    modes = ("eager",)

    def breakdown_apart(self, cfg: Any) -> str | None:
        """``DLPERF_FAKE_BREAKDOWN_APART=1``: act like an adapter whose breakdown needs its
        own process (JAX on a GPU), for tests of :func:`dlperf.launch.process.
        run_breakdown_apart`."""
        if cfg.breakdown and os.environ.get("DLPERF_FAKE_BREAKDOWN_APART") == "1":
            return "fake: the breakdown changes process-wide settings"
        return None

    def available(self) -> tuple[bool, str]:  # noqa: D102
        return True, "0"

    def devices(self) -> list[str]:  # noqa: D102
        return ["cpu"]

    def is_oom(self, exc: BaseException) -> bool:  # noqa: D102
        return isinstance(exc, OutOfMemory)

    def prepare(self, cfg: RunConfig, spec: ModelSpec) -> Session:  # noqa: D102
        fail = scripted_failure(cfg.batch_size)
        dt = float(os.environ.get("DLPERF_FAKE_STEP_S", "0.001"))
        ctx, sync = None, None
        if cfg.distributed:
            import torch
            import torch.distributed as dist

            from dlperf.frameworks.torch.dist import init_process_group

            ctx, _ = init_process_group(torch, cfg)
            only = os.environ.get("DLPERF_FAKE_FAIL_RANK")
            if only is not None and int(only) != ctx.rank:
                fail = None
            one = torch.ones(1)

            def sync() -> None:
                dist.all_reduce(one)
        if fail == "error":
            raise DataError("scripted data error")
        n = [0]
        rec = None
        next_batch = None
        if cfg.data != "synthetic":
            from dlperf.data.pipeline import DataWaitRecorder

            wait = float(os.environ.get("DLPERF_FAKE_DATA_WAIT_S", "0"))
            rec = DataWaitRecorder()
            next_batch = rec.wrap(lambda: time.sleep(wait) if wait > 0 else None)

        def step() -> Any:
            n[0] += 1
            if next_batch is not None:
                next_batch()
            if fail == "oom" and n[0] > 2:
                raise OutOfMemory("scripted out of memory")
            if fail == "crash" and n[0] > 2:
                os._exit(9)
            if fail == "hang":
                time.sleep(3600)
            time.sleep(dt)
            if sync is not None:
                sync()
            return float("nan") if fail == "nan" and n[0] > 3 else 1.0 / n[0]

        def memory() -> dict[str, int | None]:
            rss = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
            return {"peak_rss_bytes": rss, "peak_allocated_bytes": None,
                    "peak_reserved_bytes": None, "nvml_used_bytes": None}

        def phased_step(mark):
            for p, share in PHASE_SHARES.items():
                time.sleep(dt * share)
                mark(p)
            return 1.0

        def phase_timer():
            from dlperf.measure.phases import HostPhaseTimer

            return HostPhaseTimer()

        def profile(n: int, folder):
            import json
            from pathlib import Path

            from dlperf.measure.breakdown.trace import TraceData, TraceOp

            ops, steps, evs = [], [], []
            for i in range(n):
                t0 = time.perf_counter()
                for p, share in PHASE_SHARES.items():
                    s = time.perf_counter()
                    time.sleep(dt * share)
                    e = time.perf_counter()
                    ops.append(TraceOp(PHASE_OPS[p], s, e, ops=(PHASE_OPS[p],),
                                       phase=None if p == "t_io" else p, step=i))
                    evs.append({"ph": "X", "name": PHASE_OPS[p], "ts": s * 1e6,
                                "dur": (e - s) * 1e6, "pid": 0, "tid": 0, "cat": "kernel"})
                steps.append((t0, time.perf_counter()))
            path = Path(folder) / "trace.json"
            path.write_text(json.dumps({"traceEvents": evs}))
            return {"trace": TraceData(ops=ops, steps=steps, device_kind="cpu", source="fake",
                                       phase_source="fake"), "files": {"chrome_trace": path}}

        return Session(step=step, timer=HostTimer(), losses_to_floats=lambda h: [float(x) for x in h],
                       memory=memory, versions={"framework": "fake", "fake": "0",
                                                "device_name": "fake"},
                       flags={"step_s": dt}, data_info={"kind": cfg.data}, data_wait=rec,
                       on_phase=(lambda ph: ph == "measure" and rec.mark_measure())
                       if rec is not None else None,
                       nvml_target=(None, 0) if os.environ.get("DLPERF_FAKE_NVML") == "1"
                       else None,
                       phased_step=phased_step, phase_timer=phase_timer, profile=profile,
                       dist=ctx)


def breakdown_apart(cfg: Any) -> str | None:
    """The registry's ``breakdown_apart`` hook (read by :mod:`dlperf.launch.process`):
    :meth:`FakeAdapter.breakdown_apart`."""
    return FakeAdapter().breakdown_apart(cfg)
