"""final16's findings fixed: ``predict --gpu`` refuses an unknown precision as the
step-level model does (F1), and a timeline with a damaged number is refused as one that does
not decode instead of failing as a TypeError in the replay (F2)."""

import base64
import json
import zlib
from pathlib import Path

import pytest

from dlperf.errors import ConfigError
from dlperf.perfmodel import gpuanswer
from dlperf.results import timelines

H200 = str(Path(__file__).resolve().parents[2] / "benchmarks/results/h200")
CFG = ("resnet50", "torch", "eager")


@pytest.mark.parametrize("prec", ["fp16", "foo", "int8"])
def test_gpu_predict_refuses_an_unknown_precision(prec):
    """F1: ``--gpu h100 --precision fp16`` answered (21.353 ms, "precision bf16 -> fp16")
    where the step-level model and ``dlperf calibrate`` refuse fp16; ``foo`` and ``int8``
    were said to be missing from the H100's tensor cores."""
    with pytest.raises(ConfigError, match=rf"unknown precision '{prec}'.*valid precisions: "
                                          r"bf16, fp32, tf32"):
        gpuanswer.answer([H200], *CFG, prec, 64, "h100")


def _timeline(cols, strings=("kernel", "k0")):
    doc = {"strings": list(strings), "cols": cols}
    return {"format": timelines.FORMAT,
            "data": base64.b64encode(zlib.compress(json.dumps(doc).encode())).decode()}


def test_a_damaged_number_in_a_timeline_does_not_decode():
    """F2: a timeline whose ``dur_ns`` held a string decoded, and the replay then failed
    with ``TypeError: unsupported operand type(s) for +: 'int' and 'str'`` (rc 1)."""
    cols = {"step": [0, 0], "kind": [0, 0], "name": [1, 1], "start_ns": [0, 10],
            "dur_ns": [5, 7], "op_flops": [1.5e9, None]}
    ops = timelines.decode(_timeline(cols))
    assert [o["dur_ns"] for o in ops] == [5, 7] and ops[0]["name"] == "k0"
    for bad in ("x", True, [1], {"a": 1}):
        with pytest.raises(ValueError, match=r"does not decode .*'dur_ns' holds"):
            timelines.decode(_timeline({**cols, "dur_ns": [5, bad]}))
