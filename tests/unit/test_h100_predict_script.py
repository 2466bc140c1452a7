"""``benchmarks/h100/predict.py`` reads its sweep files' points through the current config."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("h100_predict",
                                                  ROOT / "benchmarks/h100/predict.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_points_are_the_sweeps_configurations():
    pts = _script().points(("suite.yaml",))
    assert pts, "suite.yaml expands to no point"
    assert len(pts) == len(set(pts))
    for _model, fw, mode, prec, b in pts:
        assert fw == "torch" and mode in ("eager", "graph")
        assert prec in ("bf16", "fp32") and isinstance(b, int) and b > 0
    assert {p[0] for p in pts} >= {"resnet50", "vgg16", "gpt2_small"}
