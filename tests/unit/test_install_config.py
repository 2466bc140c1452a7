"""pyproject.toml declares framework versions as ranges, constraints/ci.txt pins what CI tests,
and the two agree (docs/install.md)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
EXTRAS = PROJECT["optional-dependencies"]
#: The extras that install a framework (each requirement a tested range).
FRAMEWORK_EXTRAS = ("torch", "torch-cuda", "jax", "jax-cuda", "tensorflow", "tensorflow-cpu",
                    "tensorflow-cuda", "hf")


def constraints() -> dict[str, Version]:
    pins = {}
    for line in (ROOT / "constraints" / "ci.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints/ci.txt: {line!r} is not NAME==VERSION"
            pins[canonicalize_name(name)] = Version(version)
    return pins


@pytest.mark.parametrize("extra", FRAMEWORK_EXTRAS)
def test_framework_extras_are_ranges_up_to_the_next_major(extra):
    for text in EXTRAS[extra]:
        req = Requirement(text)
        ops = {s.operator: Version(s.version) for s in req.specifier}
        assert set(ops) == {">=", "<"}, f"{extra}: {text} is not a >=LOW,<HIGH range"
        low, high = ops[">="], ops["<"]
        assert high.release[1:] in ((), (0,), (0, 0)), f"{extra}: {text}: upper bound not a major"
        assert high.major == low.major + 1, f"{extra}: {text}: upper bound is not the next major"


def test_gpu_extras_name_the_frameworks_cuda_builds():
    reqs = {e: [Requirement(t) for t in EXTRAS[e]] for e in ("jax-cuda", "tensorflow-cuda")}
    assert any(r.name == "jax" and r.extras == {"cuda12"} for r in reqs["jax-cuda"])
    assert any(r.name == "tensorflow" and r.extras == {"and-cuda"}
               for r in reqs["tensorflow-cuda"])
    # PyTorch's default Linux wheel is its CUDA build: the two extras are one requirement
    assert EXTRAS["torch-cuda"] == EXTRAS["torch"]


def test_every_pin_of_a_dlperf_requirement_lies_in_its_range():
    pins = constraints()
    test_sh = (ROOT / "scripts" / "test.sh").read_text()
    m = re.search(r"pip install -q (?:--[a-z-]+ )*-c constraints/ci\.txt -e '\.\[([a-z,-]+)\]'",
                  test_sh)
    assert m, "scripts/test.sh does not install dlperf with -c constraints/ci.txt"
    extras = m.group(1).split(",")
    checked = 0
    for text in PROJECT["dependencies"] + [t for e in extras for t in EXTRAS[e]]:
        req = Requirement(text)
        name = canonicalize_name(req.name)
        assert name in pins, f"constraints/ci.txt has no pin for {req.name} (run " \
                             "scripts/make_constraints.py)"
        pinned = Version(pins[name].public)  # 2.13.0+cpu is a build of 2.13.0
        assert req.specifier.contains(pinned, prereleases=True), \
            f"constraints/ci.txt pins {req.name}=={pins[name]} outside {text!r}"
        checked += 1
    assert checked >= len(PROJECT["dependencies"]) + 5


def test_the_check_can_fail():
    """A pin (the old one) is not a range."""
    req = Requirement("torch==2.13.0")
    assert {s.operator for s in req.specifier} != {">=", "<"}
    assert not Requirement("torch>=2.5,<3").specifier.contains(Version("3.0.0"))
