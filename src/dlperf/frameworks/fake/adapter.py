"""A fake framework for tests: no training, scripted durations on a fake clock, scripted failures.

Enabled only when ``DLPERF_FAKE_FRAMEWORK=1`` (then ``--framework fake`` is valid). Each step
takes ``DLPERF_FAKE_STEP_S`` seconds (default 0.001) of a :class:`~dlperf.frameworks.fake.clock.
FakeClock`, without sleeping: the run's timer, the harness's loops (:attr:`FakeRun.clock`), the
phase timer and the data-wait recorder all read that clock, so every duration is exactly the
scripted one and a run's measured segment costs microseconds of real time. The step returns a
loss that decreases.

``DLPERF_FAKE_STEP_FACTORS`` scales that step time by precision and batch size, e.g.
``bf16=0.5,64=1.9``: a bf16 point steps in half the time, a batch of 64 in 1.9 times it
(:func:`step_factor`; for tests of the precision, summary and batch-size comparisons).

Variation, for tests of the statistics and of ``dlperf compare`` (each off by default):
``DLPERF_FAKE_RUN_NOISE=REL`` multiplies every step of a run by one factor ``exp(REL * z)``
drawn per run (the variation between processes that a run-level interval covers),
``DLPERF_FAKE_NOISE=REL`` each step by its own ``exp(REL * z)``, ``DLPERF_FAKE_DRIFT=REL``
step ``k`` (from 1) by ``1 + REL * k`` (a step that slows steadily), and
``DLPERF_FAKE_MODES=SHARE:FACTOR`` a random ``SHARE`` of the steps by ``FACTOR`` (two modes).
The draws come from ``DLPERF_FAKE_SEED`` and the run's repeat number when the seed is set
(deterministic, and each repeat a run of its own), else from fresh entropy, so two runs differ
as two processes do (:class:`StepVariation`).

``DLPERF_FAKE_FAIL`` scripts failures by batch size, e.g. ``64=oom,128=crash,256=nan,512=hang``:
``oom`` raises an out-of-memory error, ``memerr`` a plain ``MemoryError`` (the host allocator's,
also an out-of-memory result), ``crash`` kills the process without a result, ``segv`` sends
the process SIGSEGV (a segmentation fault in native code), ``nan`` returns NaN losses, ``hang``
sleeps forever in real time (for timeout tests), ``error`` raises a DataError.
``DLPERF_FAKE_REAL_CLOCK=1`` makes the steps take real time (they sleep, and the run's clock is
``time.perf_counter``), for tests that interrupt a run from outside (benchmarks/reliability.py).

The step is one staged step (:meth:`FakeRun.staged_step`): its stages take
:data:`PHASE_SHARES` of the step time (they add up to the fused step); the fused timing runs it
with no-op marks, the breakdown (``--breakdown``) with timed ones. The "profile" writes a small
Chrome-trace JSON and returns a trace with one op per stage per step, of those durations.

With real data (``data`` not ``synthetic``) each step first waits ``DLPERF_FAKE_DATA_WAIT_S``
seconds (default 0) for its "batch", recorded as the data wait of a pipeline.
``DLPERF_FAKE_BREAKDOWN_APART=1`` makes a ``--breakdown`` run two processes, as JAX's on a GPU
(:meth:`FakeAdapter.breakdown_apart`). ``DLPERF_FAKE_NVML=1`` makes the run claim GPU 0 for
NVML (tests of the power sampling patch :func:`dlperf.nvml.power_readers`); the power sampler
is a thread on the real clock, so then the steps take real time (they sleep, and the run's
clock is ``time.perf_counter``).

Compilation (docs/measurement.md, "Recompiles"), scripted when any of these is set:
``DLPERF_FAKE_COMPILE_BEFORE_S`` seconds of compile work before the loop (as JAX's
ahead-of-time compile), ``DLPERF_FAKE_COMPILE_S`` seconds added to the first step (a lazy
compile, as ``torch.compile``'s), and recompiles: ``DLPERF_FAKE_RECOMPILE_EVERY=K`` at every
K-th step (steps counted from 1, the first included), ``DLPERF_FAKE_RECOMPILE_AT=7,30`` at
those steps; each adds ``DLPERF_FAKE_RECOMPILE_S`` seconds (default 100 x the step) to its
step. The run then has a compile counter (:meth:`FakeRun.compile_count`) and
:meth:`FakeRun.compile_info`, as a compiling framework's.

Data parallel (``nproc x nnodes > 1``, under a launcher): the process joins a gloo process group
(PyTorch must be installed), each step ends with an all-reduce of one number, as DDP's
gradient all-reduce does (so a rank that dies or hangs stops the others, as in real training),
and ``DLPERF_FAKE_FAIL_RANK=R`` limits the scripted failures to rank ``R``.
"""

from __future__ import annotations

import json
import math
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dlperf.config import RunConfig
from dlperf.errors import DataError
from dlperf.frameworks.base import OutOfMemory, TrainingRun
from dlperf.frameworks.fake.clock import FakeClock
from dlperf.measure.timers import HostTimer
from dlperf.zoo.spec import ModelSpec

#: Share of the step each stage takes in the fake staged step (sums to 1).
PHASE_SHARES = {"t_io": 0.1, "t_h2d": 0.1, "t_f": 0.3, "t_b": 0.4, "t_u": 0.1}
#: Op class of each fake stage's op in the fake trace.
PHASE_OPS = {"t_io": "aten::index_select", "t_h2d": "Memcpy HtoD (Pinned -> Device)",
             "t_f": "aten::conv2d", "t_b": "aten::convolution_backward",
             "t_u": "aten::_foreach_add_"}


def step_factor(cfg: RunConfig) -> float:
    """The product of the ``$DLPERF_FAKE_STEP_FACTORS`` factors (``KEY=FACTOR``, comma-separated)
    whose key is ``cfg``'s precision or batch size; 1.0 when none is."""
    f = 1.0
    for item in filter(None, os.environ.get("DLPERF_FAKE_STEP_FACTORS", "").split(",")):
        key, _, value = item.partition("=")
        if key.strip() in (cfg.precision, str(cfg.batch_size)):
            f *= float(value)
    return f


class StepVariation:
    """The scripted variation of a fake run's step times (module docstring): :meth:`factor`
    of step ``k`` multiplies its scripted time. All off (factor 1.0) when no
    ``DLPERF_FAKE_{RUN_NOISE,NOISE,DRIFT,MODES}`` is set.

    Raises:
        ValueError: a value that is not a number (``MODES``: ``SHARE:FACTOR``, share in [0, 1]).
    """

    def __init__(self, env: dict[str, str] | None = None, repeat: int = 0) -> None:
        import numpy as np

        e = os.environ if env is None else env
        self.run_noise = float(e.get("DLPERF_FAKE_RUN_NOISE") or 0.0)
        self.noise = float(e.get("DLPERF_FAKE_NOISE") or 0.0)
        self.drift = float(e.get("DLPERF_FAKE_DRIFT") or 0.0)
        share, _, factor = (e.get("DLPERF_FAKE_MODES") or "").partition(":")
        self.mode_share, self.mode_factor = float(share or 0.0), float(factor or 1.0)
        if not 0.0 <= self.mode_share <= 1.0:
            raise ValueError(f"DLPERF_FAKE_MODES share {self.mode_share} is not in [0, 1]")
        seed = e.get("DLPERF_FAKE_SEED")
        self.rng = np.random.default_rng([int(seed), repeat] if seed else None)
        self.active = bool(self.run_noise or self.noise or self.drift or self.mode_share)
        self.run_factor = float(np.exp(self.run_noise * self.rng.standard_normal())
                                ) if self.run_noise else 1.0

    def factor(self, k: int) -> float:
        """The factor of step ``k`` (1-based) of this run."""
        if not self.active:
            return 1.0
        f = self.run_factor * (1.0 + self.drift * k)
        if self.noise:
            f *= float(math.exp(self.noise * self.rng.standard_normal()))
        if self.mode_share and self.rng.random() < self.mode_share:
            f *= self.mode_factor
        return f


def scripted_failure(batch_size: int) -> str | None:
    """The failure scripted for ``batch_size`` in ``$DLPERF_FAKE_FAIL``, if any."""
    for item in filter(None, os.environ.get("DLPERF_FAKE_FAIL", "").split(",")):
        b, _, kind = item.partition("=")
        if int(b) == batch_size:
            return kind
    return None


def scripted_compiles(step_s: float) -> dict[str, Any] | None:
    """The scripted compilation (module docstring): ``{"before_s", "first_s", "every",
    "at", "recompile_s"}``, or None when no ``DLPERF_FAKE_*COMPILE*`` variable is set."""
    env = os.environ
    keys = ("DLPERF_FAKE_COMPILE_BEFORE_S", "DLPERF_FAKE_COMPILE_S",
            "DLPERF_FAKE_RECOMPILE_EVERY", "DLPERF_FAKE_RECOMPILE_AT", "DLPERF_FAKE_RECOMPILE_S")
    if not any(env.get(k) for k in keys):
        return None
    return {"before_s": float(env.get("DLPERF_FAKE_COMPILE_BEFORE_S") or 0.0),
            "first_s": float(env.get("DLPERF_FAKE_COMPILE_S") or 0.0),
            "every": int(env.get("DLPERF_FAKE_RECOMPILE_EVERY") or 0),
            "at": {int(x) for x in (env.get("DLPERF_FAKE_RECOMPILE_AT") or "").split(",")
                   if x.strip()},
            "recompile_s": float(env.get("DLPERF_FAKE_RECOMPILE_S") or 100 * step_s)}


def stage_durations(step_s: float) -> dict[str, float]:
    """Each stage's duration in seconds for a step of ``step_s``: :data:`PHASE_SHARES` of it,
    the last stage taking what the others left, so that they add up to ``step_s`` (to float
    rounding)."""
    out, left = {}, step_s
    names = list(PHASE_SHARES)
    for p in names[:-1]:
        out[p] = step_s * PHASE_SHARES[p]
        left -= out[p]
    out[names[-1]] = left
    return out


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
        return isinstance(exc, (OutOfMemory, MemoryError))

    def prepare(self, cfg: RunConfig, spec: ModelSpec) -> FakeRun:
        """A :class:`FakeRun` for ``cfg`` (``spec`` is not used: nothing is trained).

        Raises:
            DataError: ``DLPERF_FAKE_FAIL`` scripts ``error`` for this batch size.
        """
        return FakeRun(cfg)


class FakeRun(TrainingRun):
    """One prepared fake configuration (see the module docstring).

    Attributes:
        clock: the run's clock in seconds: a :class:`FakeClock` (``time.perf_counter`` with
            ``DLPERF_FAKE_NVML=1``); every timer of the run reads it.
        step_s: the scripted step time in seconds (``DLPERF_FAKE_STEP_S``).
    """

    def __init__(self, cfg: RunConfig) -> None:
        self.step_s = float(os.environ.get("DLPERF_FAKE_STEP_S", "0.001")) * step_factor(cfg)
        self._fail = scripted_failure(cfg.batch_size)
        if os.environ.get("DLPERF_FAKE_NVML") == "1" or os.environ.get(
                "DLPERF_FAKE_REAL_CLOCK") == "1":
            self.clock: Callable[[], float] = time.perf_counter
            self._take: Callable[[float], None] = time.sleep
            if os.environ.get("DLPERF_FAKE_NVML") == "1":
                self.nvml_target = (None, 0)
        else:
            fake = FakeClock()
            self.clock, self._take = fake, fake.advance
        self._sync: Callable[[], None] | None = None
        if cfg.distributed:
            self._join_process_group(cfg)
        if self._fail == "error":
            raise DataError("scripted data error")
        self._n = 0
        self._stages = stage_durations(self.step_s)
        self._vary = StepVariation(repeat=cfg.repeat)
        self._comp = scripted_compiles(self.step_s)
        self._compiles, self._compile_s, self._compiles_at_measure = 0, 0.0, 0
        if self._comp is not None:
            self._take(self._comp["before_s"])  # compile work before the loop
            self.compile_count = lambda: self._compiles
            self.compile_info = self._compile_info
        self.timer = HostTimer(clock=self.clock)
        self.versions = {"framework": "fake", "fake": "0", "device_name": "fake"}
        self.flags = {"step_s": self.step_s}
        self.data_info = {"kind": cfg.data}
        self._next_batch: Callable[[], Any] | None = None
        if cfg.data != "synthetic":
            from dlperf.data.pipeline import DataWaitRecorder

            wait_s = float(os.environ.get("DLPERF_FAKE_DATA_WAIT_S", "0"))
            self.data_wait = DataWaitRecorder(clock=self.clock)
            self._next_batch = self.data_wait.wrap(lambda: self._take(wait_s) if wait_s > 0
                                                   else None)

    def _join_process_group(self, cfg: RunConfig) -> None:
        """Join the run's gloo process group; each step then ends in an all-reduce."""
        import torch
        import torch.distributed as dist

        from dlperf.frameworks.torch.dist import init_process_group

        self.dist, _ = init_process_group(torch, cfg)
        only = os.environ.get("DLPERF_FAKE_FAIL_RANK")
        if only is not None and int(only) != self.dist.rank:
            self._fail = None
        one = torch.ones(1)
        self._sync = lambda: dist.all_reduce(one)

    def staged_step(self, mark: Callable[..., None]) -> float:
        """One fake iteration: the scripted failure, if due, then each stage taking its share
        of the step on the run's clock, ``mark(stage)`` after each; returns the loss
        (``1/n``, NaN from the 4th step with ``nan``)."""
        self._n += 1
        n, fail = self._n, self._fail
        if self._next_batch is not None:
            self._next_batch()
        if fail == "oom" and n > 2:
            raise OutOfMemory("scripted out of memory")
        if fail == "memerr" and n > 2:
            raise MemoryError("scripted host allocation failure")
        if fail == "crash" and n > 2:
            os._exit(9)
        if fail == "segv" and n > 2:
            os.kill(os.getpid(), signal.SIGSEGV)
        if fail == "hang":
            time.sleep(3600)  # real time: what a timeout is for
        if self._comp is not None:
            self._compile_in_step(n)
        f = self._vary.factor(n)
        for p, dt in self._stages.items():
            self._take(dt * f)
            mark(p)
        if self._sync is not None:
            self._sync()
        return float("nan") if fail == "nan" and n > 3 else 1.0 / n

    def phased_step(self, mark: Callable[..., None]) -> float:
        """The breakdown's step: :meth:`staged_step` with the phase timer's marks."""
        return self.staged_step(mark)

    def phase_timer(self) -> Any:
        """A host-clock phase timer reading the run's clock."""
        from dlperf.measure.phases import HostPhaseTimer

        return HostPhaseTimer(clock=self.clock)

    def _compile_in_step(self, n: int) -> None:
        """The scripted compile work of step ``n`` (1-based), on the run's clock."""
        c = self._comp
        assert c is not None
        dt = 0.0
        if n == 1 and c["first_s"] > 0:
            dt += c["first_s"]
            self._compiles += 1
        if (c["every"] and n % c["every"] == 0) or n in c["at"]:
            dt += c["recompile_s"]
            self._compiles += 1
        if dt > 0:
            self._take(dt)
            self._compile_s += dt

    def _compile_info(self) -> dict[str, Any]:
        """``{"compile_time_s", "n_compiles", "recompiles_measured", "compile_before_loop_s"}``
        of the scripted compilation (s, counts)."""
        c = self._comp
        assert c is not None
        return {"compile_time_s": c["before_s"] + self._compile_s, "n_compiles": self._compiles,
                "recompiles_measured": self._compiles - self._compiles_at_measure,
                "compile_before_loop_s": c["before_s"]}

    def on_phase(self, phase: str) -> None:
        """Start counting the data wait (and the recompiles) at the measured segment."""
        if phase == "measure":
            self._compiles_at_measure = self._compiles
        if phase == "measure" and self.data_wait is not None:
            self.data_wait.mark_measure()

    def profile(self, n: int, folder: Any) -> dict[str, Any]:
        """``n`` fake traced steps: one op per stage, with its start and end on the run's
        clock, as a :class:`~dlperf.measure.breakdown.trace.TraceData` and a Chrome-trace
        JSON file ``folder/trace.json``."""
        from dlperf.measure.breakdown.trace import TraceData, TraceOp

        ops, steps, evs = [], [], []
        clock = self.clock
        for i in range(n):
            t0 = clock()
            for p, dt in self._stages.items():
                s = clock()
                self._take(dt)
                e = clock()
                ops.append(TraceOp(PHASE_OPS[p], s, e, ops=(PHASE_OPS[p],),
                                   phase=None if p == "t_io" else p, step=i))
                evs.append({"ph": "X", "name": PHASE_OPS[p], "ts": s * 1e6,
                            "dur": (e - s) * 1e6, "pid": 0, "tid": 0, "cat": "kernel"})
            steps.append((t0, clock()))
        path = Path(folder) / "trace.json"
        path.write_text(json.dumps({"traceEvents": evs}))
        return {"trace": TraceData(ops=ops, steps=steps, device_kind="cpu", source="fake",
                                   phase_source="fake"), "files": {"chrome_trace": path}}


def breakdown_apart(cfg: Any) -> str | None:
    """The registry's ``breakdown_apart`` hook (read by :mod:`dlperf.launch.process`):
    :meth:`FakeAdapter.breakdown_apart`."""
    return FakeAdapter().breakdown_apart(cfg)
