"""``dlperf env`` asks the adapters that import their framework in forked child processes,
all at once (:mod:`dlperf.frameworks.probe`): the same answers as in this process, without
importing a framework here; a child that crashes, dies of a signal or hangs is a framework
not available."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from dlperf.frameworks import get_adapter, probe


@pytest.fixture
def fake(monkeypatch):
    """The fake framework, here (its adapter) and in the children (its variable)."""
    from dlperf.frameworks import ADAPTERS

    monkeypatch.setitem(ADAPTERS, "fake", "dlperf.frameworks.fake.adapter:FakeAdapter")
    monkeypatch.setenv("DLPERF_FAKE_FRAMEWORK", "1")
    return monkeypatch


def test_a_child_answers_as_the_adapter_does_here_and_passes_its_output_on(fake, capfd):
    fake.setenv("DLPERF_FAKE_AVAILABLE", "chatty")
    got = probe.available_all(["fake"], children=["fake"])
    out, err = capfd.readouterr()
    assert got == {"fake": (True, "0")}
    assert out == "fake: a line on standard output\n"  # what the child printed, once
    assert "fake start-up notice" in err  # descriptor 2: env filters it (quiet_native_logs)
    fake.setenv("DLPERF_FAKE_AVAILABLE", "")
    assert probe.available_all(["fake"]) == {"fake": get_adapter("fake").available()}
    assert not probe.imports_to_answer("fake")


def test_a_child_that_crashes_or_hangs_is_a_framework_not_available(fake):
    fake.setenv("DLPERF_FAKE_AVAILABLE", "crash")
    ok, why = probe.available_all(["fake"], children=["fake"])["fake"]
    assert not ok and "exit status 3" in why and why.endswith(": boom"), why
    fake.setenv("DLPERF_FAKE_AVAILABLE", "segv")
    ok, why = probe.available_all(["fake"], children=["fake"])["fake"]
    assert not ok and "(signal 11)" in why, why
    fake.setenv("DLPERF_FAKE_AVAILABLE", "hang")
    t0 = time.monotonic()
    ok, why = probe.available_all(["fake"], timeout_s=3, children=["fake"])["fake"]
    assert not ok and "did not finish within 3 s" in why, why
    assert time.monotonic() - t0 < 30


def test_every_child_starts_before_the_first_is_waited_for(monkeypatch):
    calls = []
    monkeypatch.setattr(probe, "imports_to_answer", lambda n: n in ("torch", "tensorflow"))

    class Child:
        def __init__(self, name):
            self.name = name
            calls.append(("start", name))

        def poll(self):
            calls.append(("poll", self.name))
            return True

        def result(self):
            return True, f"{self.name} 1"

        def stop(self):
            pass

        def close(self):
            pass

    monkeypatch.setattr(probe, "_Child", Child)
    got = probe.available_all(["torch", "jax", "tensorflow"])
    assert list(got) == ["torch", "jax", "tensorflow"]  # the order asked for
    assert got == {"torch": (True, "torch 1"), "tensorflow": (True, "tensorflow 1"),
                   "jax": get_adapter("jax").available()}
    assert calls[:3] == [("start", "torch"), ("start", "tensorflow"), ("poll", "torch")]


def test_torch_is_asked_in_a_child_and_answers_as_here_without_being_imported_there():
    pytest.importorskip("torch")
    assert probe.imports_to_answer("torch") and probe.imports_to_answer("tensorflow")
    assert not probe.imports_to_answer("jax") and not probe.imports_to_answer("mxnet")
    code = ("import json, sys\nfrom dlperf.frameworks.probe import available_all\n"
            "a = available_all(['torch', 'jax'])\n"
            "print(json.dumps([a, 'torch' in sys.modules]))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=240, env={**os.environ,
                                         "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)})
    assert p.returncode == 0, p.stderr
    answers, imported = json.loads(p.stdout.splitlines()[-1])
    assert not imported
    assert {n: tuple(v) for n, v in answers.items()} == {
        n: get_adapter(n).available() for n in ("torch", "jax")}
