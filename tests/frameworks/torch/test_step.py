"""The PyTorch step is written once (frameworks/torch/step.py): the fused timing and the phased
breakdown run the same staged function, with no-op and timed stage marks, and train alike."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from dlperf.config import make_run_config  # noqa: E402
from dlperf.frameworks.base import TrainingRun, no_mark  # noqa: E402
from dlperf.frameworks.torch.adapter import TorchAdapter, TorchRun  # noqa: E402
from dlperf.frameworks.torch.step import TorchStep, make_optimizer  # noqa: E402
from dlperf.zoo import get_spec  # noqa: E402
from dlperf.zoo.spec import OptimizerSpec  # noqa: E402

TORCH_DIR = Path(__file__).resolve().parents[3] / "src" / "dlperf" / "frameworks" / "torch"
ITERS = 4


def _prepare(**kw) -> TorchRun:
    cfg = make_run_config(device="cpu", measure_ceilings=False, **kw)
    return TorchAdapter().prepare(cfg, get_spec(cfg.workload.model))


def _count_no_marks(fn) -> int:
    """How many times ``fn()`` calls :func:`no_mark` (the fused step's stage marks)."""
    n = 0

    def prof(frame, event, arg):
        nonlocal n
        if event == "call" and frame.f_code is no_mark.__code__:
            n += 1

    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return n


@pytest.mark.parametrize("grad_accum", [1, 2])
def test_fused_and_phased_step_are_one_staged_function(grad_accum):
    run = _prepare(model="fcn5_tiny", batch_size=8, grad_accum=grad_accum)
    try:
        assert isinstance(run, TrainingRun)
        # both are TorchStep.run of the same step object: one function, two kinds of mark
        assert run.step.__func__ is TorchStep.run and run.phased_step.__func__ is TorchStep.run
        assert run.step.__self__ is run.phased_step.__self__ is run.train
        marks: list[str] = []
        run.phased_step(lambda stage, handle=None: marks.append(stage))
        expect = ["t_io", "t_h2d"] + ["t_f", "t_b"] * grad_accum + ["t_u"]
        assert marks == expect
        # the fused step passes the same stages, each through the no-op mark
        assert _count_no_marks(run.step) == len(expect)
        staged: list[str] = []
        run.staged_step(lambda stage, handle=None: staged.append(stage))
        assert staged == expect
    finally:
        run.close()


@pytest.mark.parametrize("model,grad_accum", [("fcn5_tiny", 1), ("fcn5_tiny", 2),
                                              ("lstm_tiny", 1)])
def test_fused_and_phased_steps_train_identically_from_the_same_seed(model, grad_accum):
    """Two runs prepared from one configuration, one after the other (the seed resets the
    global RNG that dropout draws from): one trained by the fused step, one by the phased step
    with marks that do work. Same losses, same parameters afterwards."""
    stages: list[str] = []

    def mark(stage, handle=None):
        stages.append(stage)

    out = []
    for phased in (False, True):
        run = _prepare(model=model, batch_size=8, grad_accum=grad_accum)
        try:
            handles = [run.phased_step(mark) if phased else run.step() for _ in range(ITERS)]
            out.append((run.losses_to_floats(handles),
                        [p.detach().clone() for p in run.train.model.parameters()]))
        finally:
            run.close()
    (a, pa), (b, pb) = out
    assert len(stages) == ITERS * (3 + 2 * grad_accum)
    assert a == b and len(set(a)) > 1  # the same numbers, and training moved them
    assert len(pa) == len(pb) and all(torch.equal(p, q) for p, q in zip(pa, pb))


def test_grad_accumulation_sums_the_scaled_micro_batch_losses():
    """K = 2 over a batch of 8 returns the sum of the two half-batch losses divided by 2: the
    mean loss of the whole batch (both halves of equal size)."""
    run = _prepare(model="fcn5_tiny", batch_size=8, grad_accum=2)
    try:
        x, y = run.train.fetch()
        with torch.no_grad():
            want = float(run.train.loss_fn(run.train.model(x), y))
        run.train.fetch = lambda: (x, y)
        got = float(run.step())
        assert got == pytest.approx(want, rel=1e-5)
    finally:
        run.close()


def test_count_flops_runs_the_staged_step_on_the_eager_model():
    run = _prepare(model="fcn5_tiny", batch_size=8)
    try:
        eager = run.train.with_model(run.eager_model)
        assert eager.model is run.eager_model and eager.opt is run.opt and eager is not run.train
        flops = run.count_flops()
        assert flops["flops_per_step"] and flops["flops_per_step"] > 0
    finally:
        run.close()


@pytest.mark.parametrize("name,cls", [("sgd", "SGD"), ("adam", "Adam"), ("adamw", "AdamW")])
def test_the_optimizer_is_chosen_in_one_place(name, cls):
    o = OptimizerSpec(name=name, lr=0.1, weight_decay=0.01)
    opt, flags = make_optimizer(torch, [torch.nn.Parameter(torch.zeros(2))], o)
    assert type(opt).__name__ == cls and opt.defaults["lr"] == 0.1
    assert flags["name"] == name and flags["foreach"] == "default"
    assert ("betas" in flags) is (name != "sgd")


def test_torch_folder_has_small_modules_and_functions_and_no_cycle():
    """Modules <= 500 lines, functions <= 120, and no module of the folder imports the adapter
    (the adapter imports them: no cycle, function-level imports included)."""
    for path in TORCH_DIR.glob("*.py"):
        text = path.read_text()
        assert len(text.splitlines()) <= 500, path
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert node.end_lineno - node.lineno + 1 <= 120, (path.name, node.name)
            if path.name != "adapter.py" and isinstance(node, ast.ImportFrom):
                assert node.module != "dlperf.frameworks.torch.adapter", path.name
    for name in ("adapter", "step", "input", "probes", "dist", "profile"):
        assert (TORCH_DIR / f"{name}.py").is_file(), name
