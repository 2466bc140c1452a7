"""A framework that is not installed is reported with dlperf's own extras (pyproject.toml's
``[project.optional-dependencies]``): ``pip install 'dlperf[jax]'`` / ``'dlperf[jax-cuda]'``,
not a framework's own extra such as ``jax[cuda12]`` (issue 23 follow-up)."""

from __future__ import annotations

import importlib.util
import re
import sys
import tomllib
from pathlib import Path

import pytest

EXTRAS = set(tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
             ["project"]["optional-dependencies"])


def _extras_named(msg: str) -> list[str]:
    return re.findall(r"'dlperf\[([a-z0-9-]+)\]'", msg)


def _check(msg: str, cpu: str, gpu: str) -> None:
    named = _extras_named(msg)
    assert cpu in named and gpu in named, msg
    assert set(named) <= EXTRAS, (named, msg)
    assert "jax[cuda" not in msg and "and-cuda" not in msg, msg


def test_jax_names_dlperfs_extras(monkeypatch):
    from dlperf.frameworks.jax.adapter import JaxAdapter

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "optax" else real(name, *a))
    ok, msg = JaxAdapter().available()
    assert not ok and "optax not installed" in msg
    _check(msg, "jax", "jax-cuda")


def test_torch_names_dlperfs_extras(monkeypatch):
    from dlperf.frameworks.torch.adapter import TorchAdapter

    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    ok, msg = TorchAdapter().available()
    assert not ok and "torch is not installed" in msg
    _check(msg, "torch", "torch-cuda")


def test_tensorflow_names_dlperfs_extras(monkeypatch):
    import dlperf.frameworks.tensorflow.adapter as tfa

    def missing():
        raise ImportError("No module named 'tensorflow'")

    monkeypatch.setattr(tfa, "import_tf", missing)
    ok, msg = tfa.TensorFlowAdapter().available()
    assert not ok and "not installed" in msg
    _check(msg, "tensorflow", "tensorflow-cuda")


@pytest.mark.parametrize("path", ["src/dlperf/frameworks/jax/adapter.py",
                                  "src/dlperf/frameworks/torch/adapter.py",
                                  "src/dlperf/frameworks/tensorflow/adapter.py"])
def test_every_extra_the_adapters_name_exists(path):
    text = (Path(__file__).resolve().parents[2] / path).read_text()
    assert set(_extras_named(text)) <= EXTRAS
