"""dlperf's own work per measured iteration stays a handful of Python calls (deterministic
stand-in for the H200 overhead measurement: benchmarks/overhead.py, overhead_ab.py).

On a host-bound model every Python call inside the loop shows in the step time, so the test
counts them (sys.setprofile), per iteration, for dlperf's step run by dlperf's harness against
the plain loop's step (benchmarks/plain_torch_loop.py, which imports nothing from dlperf).
"""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from dlperf.config import IterationPolicy, make_run_config  # noqa: E402
from dlperf.frameworks.torch.adapter import TorchAdapter  # noqa: E402
from dlperf.measure.loop import measure  # noqa: E402
from dlperf.zoo import get_spec  # noqa: E402

#: Extra Python-level calls per iteration dlperf may add over the plain step: 12-16 (the
#: step closure, autocast's nullcontext enter/exit, the loss function, detach, timer.mark, the
#: clock, list.append). A change that adds work to the loop fails here before it costs
#: throughput on a GPU.
MAX_EXTRA_CALLS = 20


def _count_calls(fn) -> int:
    """Python-level calls made by ``fn()``, with the garbage collector off while counting: a
    collection (and the callbacks libraries hang on it) lands in one count and not the other
    at random, which made the difference flaky by a call or two on a loaded host."""
    import gc

    n = 0

    def prof(frame, event, arg):
        nonlocal n
        if event in ("call", "c_call"):
            n += 1

    was = gc.isenabled()
    gc.collect()
    gc.disable()
    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
        if was:
            gc.enable()
    return n


def test_harness_and_step_add_few_calls_per_iteration():
    spec = get_spec("fcn5_tiny")
    cfg = make_run_config(model="fcn5_tiny", batch_size=4, device="cpu")
    s = TorchAdapter().prepare(cfg, spec)

    def run(n):
        pol = IterationPolicy(min_iters=n, max_iters=n, min_time_s=0.0, max_warmup_iters=0,
                              min_warmup_iters=0)
        measure(s.step, s.timer, pol)

    run(3)  # lazy initialisation out of the way
    per_iter_dlperf = (_count_calls(lambda: run(30)) - _count_calls(lambda: run(10))) / 20

    torch.manual_seed(0)
    widths = spec.hyper["widths"]
    layers = []
    for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
        if i:
            layers.append(torch.nn.Sigmoid())
        layers.append(torch.nn.Linear(a, b))
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(4, widths[0]), torch.randint(0, widths[-1], (4,))

    def plain_step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).reshape(-1, widths[-1]), y.reshape(-1))
        loss.backward()
        opt.step()

    plain_step()
    per_iter_plain = (_count_calls(lambda: [plain_step() for _ in range(30)])
                      - _count_calls(lambda: [plain_step() for _ in range(10)])) / 20
    extra = per_iter_dlperf - per_iter_plain
    print(f"calls per iteration: dlperf {per_iter_dlperf}, plain {per_iter_plain}")
    assert 0 <= extra <= MAX_EXTRA_CALLS, (per_iter_dlperf, per_iter_plain)
