"""The TensorFlow step is written once: the fused timing (``run.step()``, no-op marks) and the
breakdown (``run.phased_step(mark)``, timed marks) go through the same staged iteration.

* from the same seed, a fused run and a phased run of a tiny model give the same losses,
  iteration by iteration (eager, graph, xla; eager with gradient accumulation);
* the fused step calls its no-op mark once per stage, and the phased step marks the stages in
  order: ``t_io, t_h2d, (t_f, t_b) x K, t_u`` eager, ``t_io, t_h2d, t_fbu`` compiled;
* the phased iterations of a compiled mode run the fused step's traced function: no retrace;
* the folder keeps its standard files, its modules and functions short.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

from dlperf.frameworks.tensorflow.adapter import TensorFlowAdapter, TensorFlowRun, import_tf  # noqa: E402

tf, keras = import_tf()

import dlperf.zoo as zoo  # noqa: E402
from dlperf.config import make_run_config  # noqa: E402
from dlperf.frameworks import base  # noqa: E402
from dlperf.frameworks.tensorflow import step as tf_step  # noqa: E402

ITERS = 4
FOLDER = Path(tf_step.__file__).parent


def _prepare(model: str, mode: str, grad_accum: int = 1) -> TensorFlowRun:
    cfg = make_run_config(model=model, framework="tensorflow", mode=mode, batch_size=8,
                          grad_accum=grad_accum, seed=3)
    return TensorFlowAdapter().prepare(cfg, zoo.SPECS[model])


def _expected_stages(mode: str, grad_accum: int) -> list[str]:
    if mode == "eager":
        return ["t_io", "t_h2d", *(["t_f", "t_b"] * grad_accum), "t_u"]
    return ["t_io", "t_h2d", "t_fbu"]


@pytest.mark.parametrize("model,mode,grad_accum", [("fcn5_tiny", "eager", 1),
                                                   ("fcn5_tiny", "graph", 1),
                                                   ("fcn5_tiny", "xla", 1),
                                                   ("lstm_tiny", "eager", 2)])
def test_fused_and_phased_steps_are_the_same_staged_iteration(model, mode, grad_accum,
                                                             monkeypatch):
    stages = _expected_stages(mode, grad_accum)
    # The fused step: its no-op marks counted (the module's no_mark, looked up at each call).
    fused_marks: list[str] = []

    def counting_no_mark(stage, handle=None):
        fused_marks.append(stage)

    monkeypatch.setattr(tf_step, "no_mark", counting_no_mark)
    run = _prepare(model, mode, grad_accum)
    assert isinstance(run, base.TrainingRun) and run.phased_step is not None
    try:
        fused = run.losses_to_floats([run.step() for _ in range(ITERS)])
    finally:
        run.close()
    monkeypatch.undo()
    assert fused_marks == stages * ITERS

    # The phased step from the same seed: timed marks in stage order, the same losses.
    phased_marks: list[str] = []
    handles: list[object] = []

    def mark(stage, handle=None):
        phased_marks.append(stage)
        handles.append(handle)

    run = _prepare(model, mode, grad_accum)
    try:
        phased = run.losses_to_floats([run.phased_step(mark) for _ in range(ITERS)])
        n_compiles = run.compile_info()["n_compiles"]
    finally:
        run.close()
    assert phased_marks == stages * ITERS
    assert phased == fused, (phased, fused)
    assert all(h is not None for s, h in zip(phased_marks, handles) if s != "t_io")
    # graph/xla: the phased iterations called the traced function of the fused step.
    assert n_compiles == (0 if mode == "eager" else 1)


def _functions(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node.end_lineno - node.lineno + 1


def test_folder_has_the_standard_files_and_short_modules():
    for name in ("adapter", "step", "input", "probes", "dist", "profile", "cluster"):
        assert (FOLDER / f"{name}.py").is_file(), name
    for path in FOLDER.glob("*.py"):
        text = path.read_text()
        assert len(text.splitlines()) <= 500, path.name
        long = [(f, n) for f, n in _functions(ast.parse(text)) if n > 120]
        assert not long, (path.name, long)
