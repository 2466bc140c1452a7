"""The performance model's special cases are one named list (``special.SPECIAL_CASES``): each
has its one documented function, is decided there (called from the model's other modules) and
is listed in docs/perfmodel.md."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from dlperf.perfmodel import special

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "src" / "dlperf" / "perfmodel"


def _called_names() -> set[str]:
    """Names of ``special.X`` attributes and ``from ...special import X`` names used in the
    perfmodel modules other than special.py."""
    out: set[str] = set()
    for f in PKG.rglob("*.py"):
        if f.name == "special.py":
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id == "special":
                out.add(node.attr)
            elif isinstance(node, ast.ImportFrom) and node.module == "dlperf.perfmodel.special":
                out.update(a.name for a in node.names)
    return out


def test_every_special_case_has_a_documented_function_that_the_model_calls():
    called = _called_names()
    names = [c.name for c in special.SPECIAL_CASES]
    assert len(names) == len(set(names)) >= 10
    for case in special.SPECIAL_CASES:
        fn = case.function
        assert case.applies_to and case.does, case.name
        doc = inspect.getdoc(fn) or ""
        assert len(doc) > 80, f"{case.name}: {fn.__name__} needs a docstring saying why"
        if fn is special._launches:  # the counting rule is its own module, hostcount.py
            assert "hostcount.launches_per_iter(" in (PKG / "records.py").read_text()
        else:
            assert fn.__name__ in called, f"{case.name}: {fn.__name__} is not called outside"


def test_docs_list_every_special_case():
    doc = (ROOT / "docs" / "perfmodel.md").read_text()
    missing = [c.name for c in special.SPECIAL_CASES if f"| {c.name} |" not in doc]
    assert not missing, f"docs/perfmodel.md does not list: {missing}"


def test_special_cases_decide_what_they_say():
    assert special.operator_precision("tf32") == "fp32"
    assert special.operator_precision("bf16") == "bf16"
    assert special.mode_key("graph", "reduce-overhead") == "graph+reduce-overhead"
    assert special.base_mode("graph+reduce-overhead") == "graph"
    assert special.compile_of("graph") == "default"
    assert special.count_kinds("torch", "eager") == ("ops",)
    assert special.count_kinds("torch", "graph")[0] == "launches"
    assert not special.memory_judged("jax") and special.memory_judged("torch")
    assert special.recurrent_note("lstm") and special.recurrent_note("resnet50") is None
    floor = special.allreduce_floor({2, 8}, 4, lambda n: (lambda m: float(n)))
    assert floor is not None and floor[0] == 2 and floor[1](1.0) == 2.0
    assert special.allreduce_floor({8}, 4, lambda n: (lambda m: 0.0)) is None
    assert special.cpu_rank_threads(None, "cpu", 2, [1, 1]) == 1
    assert special.cpu_rank_threads(None, "cpu", 2, [1, 2]) is None
    assert special.cpu_rank_threads(None, "cuda", 2, [1, 1]) is None


def test_a_device_bound_base_is_taken_at_its_measurement():
    """The what-if base's factor: measured over fitted step at the batch, device-bound only."""
    from types import SimpleNamespace as P

    pts = [P(per_device_batch=64, step_time_s=0.099), P(per_device_batch=64, step_time_s=0.101),
           P(per_device_batch=128, step_time_s=0.2)]
    m, words = special.measured_base(pts, 64, 0.102, "device")
    assert m == pytest.approx(0.1 / 0.102) and "2 point(s)" in words
    assert special.measured_base(pts, 64, 0.102, "host") is None  # 15% noise: keep the fit
    assert special.measured_base(pts, 32, 0.05, "device") is None  # not stored at the batch
