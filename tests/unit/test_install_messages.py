"""A framework that is not installed is reported with dlperf's own extras (pyproject.toml's
``[project.optional-dependencies]``), not a framework's own extra such as ``jax[cuda12]``, in
the README's words: from a checkout ``.venv/bin/pip install -c constraints/ci.txt -e
'.[jax]'`` (the README's install, with CI's pins), installed as a package ``pip install
'dlperf[jax]'``; :func:`dlperf.install.install_hint` is the one place that writes them."""

from __future__ import annotations

import importlib.util
import re
import sys
import tomllib
from pathlib import Path

EXTRAS = set(tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
             ["project"]["optional-dependencies"])


ROOT = Path(__file__).resolve().parents[2]


def _extras_named(msg: str) -> list[str]:
    return re.findall(r"'(?:dlperf|\.)\[([a-z0-9-]+)\]'", msg)


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
    _check(msg, "tensorflow-cpu", "tensorflow-cuda")


def test_hints_follow_the_readme_install(monkeypatch, tmp_path):
    from dlperf import install

    readme = (ROOT / "README.md").read_text()
    assert "pip install -q -c constraints/ci.txt -e '.[torch]'" in readme  # the main job's
    assert install.source_root() == ROOT  # the tests run from a checkout
    monkeypatch.chdir(ROOT)
    pip = install.pip_command(ROOT)
    assert install.install_hint("jax") == f"{pip} install -c constraints/ci.txt -e '.[jax]'"
    gpu = install.install_hint("jax", "jax-cuda")
    assert gpu.endswith(f"(for NVIDIA GPUs: {pip} install -e '.[jax-cuda]')")  # no CPU pins
    monkeypatch.chdir(tmp_path)  # elsewhere: the hint goes to the checkout first
    assert install.install_hint("jax").startswith(f"cd {ROOT} && {pip} install -c ")
    monkeypatch.setattr(install, "source_root", lambda: None)  # an installed package
    assert install.install_hint("jax", "jax-cuda") == (
        "pip install 'dlperf[jax]' (for NVIDIA GPUs: pip install 'dlperf[jax-cuda]')")


def test_the_readmes_venv_pip_is_named_as_the_readme_writes_it(monkeypatch):
    from dlperf import install

    monkeypatch.setattr(install.sys, "prefix", str(ROOT / ".venv"))
    assert install.pip_command(ROOT) == ".venv/bin/pip"
    monkeypatch.setattr(install.sys, "prefix", "/elsewhere/venv")
    assert install.pip_command(ROOT).endswith(" -m pip")


def test_list_names_the_registrys_extras(monkeypatch):
    import importlib.metadata as md

    import dlperf.cli.list_ as lst
    from dlperf.install import install_hint
    from dlperf.registry import FRAMEWORKS

    def version(d):
        raise md.PackageNotFoundError(d)

    monkeypatch.setattr(md, "version", version)  # nothing is installed
    for fw, info in FRAMEWORKS.items():
        if info.distributions:
            msg = lst.installed_version(fw)
            assert msg is not None and msg.startswith("no: ")
            assert msg.endswith(install_hint(*info.extras)), msg
            assert set(info.extras) <= EXTRAS


def test_one_place_writes_an_install_command():
    """No module but dlperf.install spells an extra's install command (a hint written
    elsewhere drifted from the README's install)."""
    pattern = re.compile(r"pip install '?dlperf\[|-e '\.\[")
    offenders = [str(f.relative_to(ROOT)) for f in (ROOT / "src/dlperf").rglob("*.py")
                 if f.name != "install.py" and pattern.search(f.read_text())]
    assert offenders == []
    from dlperf.registry import FRAMEWORKS

    assert all(set(info.extras) <= EXTRAS for info in FRAMEWORKS.values())
