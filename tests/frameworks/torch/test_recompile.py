"""A real ``torch.compile`` recompile in the measured loop (docs/measurement.md, "Recompiles"):
Dynamo's graph counter (:meth:`dlperf.frameworks.torch.probes.CompileWatch.graphs`, the
session's ``compile_count``) moves on the step whose input shape changed, and the loop measures
again after it. The step runs a real compiled module on the CPU (the ``eager`` backend: Dynamo
traces, guards and recompiles as with Inductor, without building C++ kernels) and takes its
scripted time on a fake clock, so the loop's decisions do not depend on the machine's load."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from dlperf.config import IterationPolicy  # noqa: E402
from dlperf.frameworks.torch.probes import CompileWatch  # noqa: E402
from dlperf.measure.loop import measure  # noqa: E402
from dlperf.measure.segment import compile_handling  # noqa: E402
from dlperf.measure.timers import HostTimer  # noqa: E402
from fakes import FakeClock  # noqa: E402


def test_a_shape_change_while_measured_recompiles_and_is_measured_again():
    watch = CompileWatch(torch)  # resets Dynamo: fresh counters
    model = torch.compile(torch.nn.Linear(8, 4), backend="eager", dynamic=False)
    clock = FakeClock()
    batch = {"n": 4}
    changed = []

    def step():
        out = model(torch.ones(batch["n"], 8)).sum()
        clock.advance(0.01)
        return out

    def on_phase(phase):
        watch.on_phase(phase)
        if not changed:  # the first measured step gets a new batch size: a guard fails
            changed.append(True)
            batch["n"] = 6

    res = measure(step, HostTimer(clock=clock),
                  IterationPolicy(min_iters=10, min_time_s=0.0, warmup_window=3,
                                  min_warmup_iters=6), clock=clock, on_phase=on_phase,
                  compiles=watch.graphs)
    assert res.compiled_at["first"] == [0]  # the first call compiled
    n_warm = 6  # settled after two clean windows of 3
    assert res.remeasured == 1
    assert res.compiled_at["warmup"] == [n_warm]  # the first step of the left-behind segment
    assert res.compiled_at["measure"] == []
    assert watch.graphs() == 2 and watch.info()["recompiles_measured"] == 0
    assert compile_handling(res.compiled_at, res.remeasured, 0) == ("remeasured", [])
