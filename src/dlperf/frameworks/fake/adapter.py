"""A fake framework for tests: no training, scripted durations on a fake clock, scripted failures.

Enabled only when ``DLPERF_FAKE_FRAMEWORK=1`` (then ``--framework fake`` is valid). What it does
is its options (:class:`dlperf.frameworks.fake.options.Options`: a run config's ``options``,
``--framework-option KEY=VALUE`` or ``options:`` in a sweep file). Each
step takes ``step_s`` seconds (default 0.001) of a :class:`~dlperf.frameworks.fake.clock.
FakeClock`, times ``slowdown`` and the ``step_factors`` of the point's precision and batch size,
without sleeping: the run's timer, the harness's loops (:attr:`FakeRun.clock`), the phase timer
and the data-wait recorder all read that clock, so every duration is exactly the scripted one
and a run's measured segment costs microseconds of real time. The step returns a loss that
decreases. ``run_noise``, ``noise``, ``drift`` and ``mode_share``/``mode_factor`` vary the step
times (:class:`StepVariation`; draws from ``seed`` and the run's repeat number, else fresh
entropy, so two runs differ as two real runs do).

``fail`` scripts failures by batch size: ``oom`` raises an out-of-memory error, ``memerr`` a
plain ``MemoryError`` (the host allocator's, also an out-of-memory result), ``crash`` kills the
process without a result, ``segv`` sends the process SIGSEGV (a segmentation fault in native
code), ``nan`` returns NaN losses, ``hang`` sleeps forever in real time (for timeout tests),
``error`` raises a DataError. ``real_clock`` makes the steps take real time (they sleep, and
the run's clock is ``time.perf_counter``), for tests that interrupt a run from outside.

The step is one staged step (:meth:`FakeRun.staged_step`): its stages take
:data:`PHASE_SHARES` of the step time (they add up to the fused step); the fused timing runs it
with no-op marks, the breakdown (``--breakdown``) with timed ones. The "profile" writes a small
Chrome-trace JSON and returns a trace with one op per stage per step, of those durations.

With real data (``data`` not ``synthetic``) each step first waits ``data_wait_s`` seconds for
its "batch", recorded as the data wait of a pipeline. ``breakdown_apart`` makes a
``--breakdown`` run two processes, as JAX's on a GPU (:meth:`FakeAdapter.breakdown_apart`).
``nvml`` makes the run claim GPU 0 for NVML (tests of the power sampling patch
:func:`dlperf.nvml.power_readers`); the power sampler is a thread on the real clock, so then the
steps take real time.

Compilation (docs/measurement.md, "Recompiles"), scripted when any of these is set:
``compile_before_s`` of compile work before the loop (as JAX's ahead-of-time compile),
``compile_s`` added to the first step (a lazy compile, as ``torch.compile``'s), and recompiles
at every ``recompile_every``-th step (counted from 1, the first included) or at the steps of
``recompile_at``, each adding ``recompile_s`` (default 100 x the step). The run then has a
compile counter (:meth:`FakeRun.compile_count`) and :meth:`FakeRun.compile_info`, as a
compiling framework's.

Data parallel (``nproc x nnodes > 1``, under a launcher): the process joins a gloo process group
(PyTorch must be installed), each step ends with an all-reduce of one number, as DDP's
gradient all-reduce does (so a rank that dies or hangs stops the others, as in real training),
and ``fail_rank`` limits the scripted failures to that rank.
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
from dlperf.frameworks.fake.options import Options, settings
from dlperf.measure.timers import HostTimer
from dlperf.zoo.spec import ModelSpec

#: Share of the step each stage takes in the fake staged step (sums to 1).
PHASE_SHARES = {"t_io": 0.1, "t_h2d": 0.1, "t_f": 0.3, "t_b": 0.4, "t_u": 0.1}
#: Op class of each fake stage's op in the fake trace.
PHASE_OPS = {"t_io": "aten::index_select", "t_h2d": "Memcpy HtoD (Pinned -> Device)",
             "t_f": "aten::conv2d", "t_b": "aten::convolution_backward",
             "t_u": "aten::_foreach_add_"}


class StepVariation:
    """The scripted variation of a fake run's step times (module docstring): :meth:`factor`
    of step ``k`` multiplies its scripted time; 1.0 when no variation is scripted."""

    def __init__(self, opts: Options, repeat: int = 0) -> None:
        import numpy as np

        self.run_noise, self.noise, self.drift = opts.run_noise, opts.noise, opts.drift
        self.mode_share, self.mode_factor = opts.mode_share, opts.mode_factor
        # a seed gives each repeat draws of its own (repeats of one point are runs of their
        # own, as in a real framework), deterministically
        self.rng = np.random.default_rng(None if opts.seed is None else [opts.seed, repeat])
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


def scripted_compiles(opts: Options, step_s: float) -> dict[str, Any] | None:
    """The scripted compilation (module docstring): ``{"before_s", "first_s", "every",
    "at", "recompile_s"}``, or None when none is scripted."""
    if not opts.compiles:
        return None
    return {"before_s": opts.compile_before_s, "first_s": opts.compile_s,
            "every": opts.recompile_every, "at": set(opts.recompile_at),
            "recompile_s": opts.recompile_s if opts.recompile_s is not None else 100 * step_s}


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
        """Option ``breakdown_apart``: act like an adapter whose breakdown needs its own
        process (JAX on a GPU), for tests of :func:`dlperf.launch.process.
        run_breakdown_apart`."""
        if cfg.measure.breakdown and settings(cfg.runtime.options).breakdown_apart:
            return "fake: the breakdown changes process-wide settings"
        return None

    def available(self) -> tuple[bool, str]:
        """(True, "0"); ``$DLPERF_FAKE_AVAILABLE`` scripts how the answer comes, for tests of
        :mod:`dlperf.frameworks.probe`: ``chatty`` first writes a line to standard output and
        a native start-up log line to standard error, ``crash`` writes ``boom`` to standard
        error and ends the process with status 3, ``segv`` sends the process SIGSEGV,
        ``hang`` sleeps forever."""
        how = os.environ.get("DLPERF_FAKE_AVAILABLE", "")
        if how == "chatty":
            print("fake: a line on standard output")
            os.write(2, b"I0000 00:00:1.5   1 port.cc:153] fake start-up notice\n")
        elif how == "crash":
            os.write(2, b"boom\n")
            os._exit(3)
        elif how == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        elif how == "hang":
            while True:
                time.sleep(60)
        return True, "0"

    def devices(self) -> list[str]:  # noqa: D102
        return ["cpu"]

    def is_oom(self, exc: BaseException) -> bool:  # noqa: D102
        return isinstance(exc, (OutOfMemory, MemoryError))

    def prepare(self, cfg: RunConfig, spec: ModelSpec) -> FakeRun:
        """A :class:`FakeRun` for ``cfg`` (``spec`` is not used: nothing is trained).

        Raises:
            DataError: option ``fail`` scripts ``error`` for this batch size.
        """
        return FakeRun(cfg)


class FakeRun(TrainingRun):
    """One prepared fake configuration (see the module docstring).

    Attributes:
        clock: the run's clock in seconds: a :class:`FakeClock` (``time.perf_counter`` with
            the options ``real_clock`` or ``nvml``); every timer of the run reads it.
        step_s: the scripted step time in seconds (options ``step_s`` x ``slowdown`` x the
            point's ``step_factors``).
    """

    def __init__(self, cfg: RunConfig) -> None:
        opts = self.opts = settings(cfg.runtime.options)
        self.step_s = opts.step_s * opts.step_factor(cfg.hardware.precision, cfg.workload.batch_size)
        self._fail = opts.failure(cfg.workload.batch_size)
        if opts.nvml or opts.real_clock:
            self.clock: Callable[[], float] = time.perf_counter
            self._take: Callable[[float], None] = time.sleep
            if opts.nvml:
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
        self._vary = StepVariation(opts, repeat=cfg.measure.repeat)
        self._comp = scripted_compiles(opts, self.step_s)
        self._compiles, self._compile_s, self._compiles_at_measure = 0, 0.0, 0
        if self._comp is not None:
            self._take(self._comp["before_s"])  # compile work before the loop
            self.compile_count = lambda: self._compiles
            self.compile_info = self._compile_info
        self.timer = HostTimer(clock=self.clock)
        self.versions = {"framework": "fake", "fake": "0", "device_name": "fake"}
        self.flags = {"step_s": self.step_s}
        self.data_info = {"kind": cfg.input.data}
        self._next_batch: Callable[[], Any] | None = None
        if cfg.input.data != "synthetic":
            from dlperf.data.pipeline import DataWaitRecorder

            wait_s = opts.data_wait_s
            self.data_wait = DataWaitRecorder(clock=self.clock)
            self._next_batch = self.data_wait.wrap(lambda: self._take(wait_s) if wait_s > 0
                                                   else None)

    def _join_process_group(self, cfg: RunConfig) -> None:
        """Join the run's gloo process group; each step then ends in an all-reduce."""
        import torch
        import torch.distributed as dist

        from dlperf.frameworks.torch.dist import init_process_group

        self.dist, _ = init_process_group(torch, cfg)
        only = self.opts.fail_rank
        if only is not None and only != self.dist.rank:
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
