"""The JAX training step is written once: the fused timing (``run.step()``, no-op marks) and the
breakdown (``run.phased_step(mark)``, timed marks) run the same staged function and the same
compiled program, so from the same seed they give the same losses."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")
pytest.importorskip("optax")

from dlperf.config import make_run_config  # noqa: E402
from dlperf.frameworks import get_adapter  # noqa: E402
from dlperf.frameworks.base import TrainingRun, no_mark  # noqa: E402
from dlperf.frameworks.jax.adapter import JaxRun  # noqa: E402
from dlperf.frameworks.jax.step import JaxStep  # noqa: E402
from dlperf.zoo import get_spec  # noqa: E402

N_ITERS = 4
STAGES = ["t_io", "t_h2d", "t_fbu"]


def _prepare(model: str = "fcn5_tiny", **kw) -> JaxRun:
    cfg = make_run_config(model=model, framework="jax", mode="xla", batch_size=8, seed=3, **kw)
    return get_adapter("jax").prepare(cfg, get_spec(cfg.workload.model))


class _Marks:
    """A phase timer's ``mark``: records each stage and the handle it was given."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, object]] = []

    def __call__(self, phase: str, handle: object = None) -> None:
        self.seen.append((phase, handle))


def _losses(run: JaxRun, phased: bool, marks: _Marks | None = None) -> list[float]:
    handles = [run.phased_step(marks) if phased else run.step() for _ in range(N_ITERS)]
    return run.losses_to_floats(handles)


@pytest.fixture
def counted_staged_step(monkeypatch):
    """Counts calls of :meth:`JaxStep.staged_step`, by mark (the fused step's is ``no_mark``)."""
    calls: list[object] = []
    original = JaxStep.staged_step

    def counting(self, mark):
        calls.append(mark)
        return original(self, mark)

    monkeypatch.setattr(JaxStep, "staged_step", counting)
    monkeypatch.setattr(JaxStep, "phased_step", counting)
    return calls


def test_phased_step_is_the_staged_step():
    """The breakdown's step is the very function the fused step runs (no second copy)."""
    assert issubclass(JaxRun, TrainingRun)
    assert JaxRun.phased_step is JaxRun.staged_step is JaxStep.staged_step
    assert JaxRun.step is TrainingRun.step  # staged_step(no_mark), from the contract


@pytest.mark.parametrize("data", ["synthetic", "real"])
def test_fused_and_phased_runs_give_the_same_losses_from_the_same_seed(
        data, counted_staged_step, request):
    kw = {}
    if data == "real":
        request.getfixturevalue("data_env")
        kw = {"data": "mnist", "model": "fcn_mnist_tiny"}
    runs = {}
    marks = _Marks()
    for phased in (False, True):
        run = _prepare(**kw)
        try:
            runs[phased] = _losses(run, phased, marks if phased else None)
            info = run.compile_info()
        finally:
            run.close()
        assert info["n_compiles"] == 1 and info["recompiles"] == 0
    assert np.isfinite(runs[False]).all()
    assert runs[True] == runs[False]  # bit for bit: one program, the same batches and state
    # every iteration of both went through staged_step: the fused ones with no-op marks
    assert counted_staged_step == [no_mark] * N_ITERS + [marks] * N_ITERS
    # three stage marks per phased iteration, in order; t_fbu carries the loss it returns
    assert [p for p, _ in marks.seen] == STAGES * N_ITERS
    assert all(h is None for p, h in marks.seen if p != "t_fbu")
    assert all(h is not None for p, h in marks.seen if p == "t_fbu")


def test_fused_and_phased_steps_share_one_compiled_program():
    """Alternating fused and phased iterations in one run continue one training trajectory:
    no retrace or recompile, the state flows from one to the other, and the losses are those
    of an all-fused run."""
    ref = _prepare()
    try:
        fused = _losses(ref, phased=False) + _losses(ref, phased=False)
    finally:
        ref.close()
    run = _prepare()
    marks = _Marks()
    try:
        mixed = _losses(run, phased=False) + _losses(run, phased=True, marks=marks)
        assert run.flags["retraces"] == 1 and run.flags["recompiles"] == 0
        assert run.compile_info()["n_compiles"] == 1
    finally:
        run.close()
    assert mixed == fused
    assert len(marks.seen) == 3 * N_ITERS


def test_the_optax_update_runs_inside_the_jitted_step(monkeypatch):
    """Issue 23 item 5 (optax under jit): the Optax update is traced into the compiled step.
    Its Python ``update`` runs once per trace (``flags.retraces``), never per step, while the
    parameters change at every step, so every update is the compiled program's; the record
    says so (``flags.optimizer.in_compiled_step``)."""
    import jax
    import optax

    import dlperf.frameworks.jax.adapter as adapter

    calls: list[int] = []
    real = adapter.make_optimizer

    def counted(optax_mod, o):
        tx = real(optax_mod, o)

        def update(grads, state, params=None):
            calls.append(1)
            return tx.update(grads, state, params)

        return optax.GradientTransformation(tx.init, update)

    monkeypatch.setattr(adapter, "make_optimizer", counted)
    run = _prepare()
    try:
        traced = len(calls)
        assert traced == run.flags["retraces"] == 1
        before = [np.asarray(p).copy() for p in jax.tree.leaves(run.state["params"])]
        for _ in range(N_ITERS):
            prev = [np.asarray(p).copy() for p in jax.tree.leaves(run.state["params"])]
            run.step()
            now = jax.tree.leaves(run.state["params"])
            assert any(not np.array_equal(a, np.asarray(b)) for a, b in zip(prev, now))
        assert len(calls) == traced and run.flags["retraces"] == 1
        assert any(not np.array_equal(a, np.asarray(b))
                   for a, b in zip(before, jax.tree.leaves(run.state["params"])))
        opt = run.flags["optimizer"]
        assert opt["impl"] == "optax" and opt["in_compiled_step"] is True
    finally:
        run.close()
