"""``--optimizer-impl`` (issue 23 item 5): PyTorch's optimizer implementations are selectable
(``auto``, ``fused``, ``foreach``, ``single``), recorded in ``flags["optimizer"]``, keyed only
when not ``auto``; the other frameworks refuse anything but ``auto``."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from dlperf.config import RunConfig, make_run_config  # noqa: E402
from dlperf.config.sweep import expand_grid  # noqa: E402
from dlperf.errors import ConfigError  # noqa: E402
from dlperf.frameworks.torch.step import auto_impl, fused_devices, make_optimizer  # noqa: E402
from dlperf.zoo.spec import OptimizerSpec  # noqa: E402


def _param() -> list:
    p = torch.nn.Parameter(torch.ones(4))
    p.grad = torch.full((4,), 0.5)
    return [p]


@pytest.mark.parametrize("name", ["sgd", "adam", "adamw"])
@pytest.mark.parametrize("impl,foreach,fused", [("foreach", True, None), ("single", False, None),
                                                 ("fused", None, True)])
def test_each_implementation_is_applied_and_recorded(name, impl, foreach, fused):
    o = OptimizerSpec(name=name, lr=0.1, momentum=0.9, weight_decay=0.01)
    params = _param()
    opt, flags = make_optimizer(torch, params, o, impl)
    assert opt.defaults.get("foreach") is foreach and opt.defaults.get("fused") is fused
    assert flags["impl"] == impl and flags["impl_asked"] == impl
    assert flags["fused"] is (impl == "fused") and flags["foreach"] is (impl == "foreach")
    opt.step()  # fused runs on the CPU too (PyTorch >= 2.4)
    assert not torch.equal(params[0].detach(), torch.ones(4))


def test_implementations_compute_the_same_update():
    o = OptimizerSpec(name="adamw", lr=0.1, weight_decay=0.01)
    out = {}
    for impl in ("auto", "fused", "foreach", "single"):
        params = _param()
        opt, _ = make_optimizer(torch, params, o, impl)
        for _ in range(3):
            opt.step()
        out[impl] = params[0].detach().clone()
    for impl in ("fused", "foreach", "single"):
        torch.testing.assert_close(out[impl], out["auto"])


def test_auto_runs_fused_where_pytorch_has_it_and_records_what_ran():
    """auto (issue 23 item 5) runs the fastest standard implementation: ``fused=True`` for
    SGD/Adam/AdamW on the CPU (PyTorch >= 2.4 has the kernels there); the record says
    ``impl: fused`` while ``foreach`` stays ``"default"`` (no ``foreach=`` keyword passed)."""
    for name in ("sgd", "adam", "adamw"):
        params = _param()
        opt, flags = make_optimizer(torch, params, OptimizerSpec(name=name, lr=0.1), "auto")
        assert opt.defaults.get("fused") is True and opt.defaults.get("foreach") is None
        assert flags["foreach"] == "default" and flags["impl_asked"] == "auto"
        assert flags["impl"] == "fused" and flags["fused"] is True
        assert "auto_fallback" not in flags
        opt.step()
        assert not torch.equal(params[0].detach(), torch.ones(4))


@pytest.mark.parametrize("name,devices,fused_on,want", [
    ("sgd", {"cuda"}, ("cuda", "cpu"), "fused"),
    ("adamw", {"cuda"}, ("cuda",), "fused"),
    ("adam", {"cpu"}, ("cuda", "cpu"), "fused"),
    ("adam", {"cpu"}, ("cuda",), "default"),        # a PyTorch without CPU kernels
    ("sgd", {"cuda", "cpu"}, ("cuda",), "default"),  # a parameter left on the CPU
    ("sgd", {"meta"}, ("cuda", "cpu"), "default"),
    ("rmsprop", {"cuda"}, ("cuda", "cpu"), "default"),  # no fused kernel for it
    ("sgd", set(), ("cuda", "cpu"), "default"),
])
def test_auto_resolution_by_device_type(name, devices, fused_on, want):
    """:func:`auto_impl` decides from the parameters' device types, so CUDA is covered here
    without a GPU."""
    assert auto_impl(name, devices, fused_on) == want


def test_this_pytorch_has_fused_kernels_on_cuda_and_the_cpu():
    """The device types read from PyTorch (a private function; an empty tuple would silently
    make auto PyTorch's default again): CUDA and, since PyTorch 2.4, the CPU."""
    assert {"cuda", "cpu"} <= set(fused_devices(torch))


def test_auto_falls_back_to_pytorchs_default_without_a_fused_kernel():
    """Where fused cannot serve (here: no fused kernels on the parameters' device), auto passes
    no keyword, as dlperf did before issue 23, and records what PyTorch ran."""
    import dlperf.frameworks.torch.step as step

    orig = step.fused_devices
    step.fused_devices = lambda torch: ("cuda",)
    try:
        opt, flags = make_optimizer(torch, _param(), OptimizerSpec(name="sgd", lr=0.1), "auto")
    finally:
        step.fused_devices = orig
    assert opt.defaults.get("foreach") is None and not opt.defaults.get("fused")
    assert flags["foreach"] == "default" and flags["impl_asked"] == "auto"
    assert flags["impl"] == "single" and flags["fused"] is False


def test_an_unknown_implementation_is_refused():
    with pytest.raises(ValueError, match="'fast' is unknown"):
        make_optimizer(torch, _param(), OptimizerSpec(name="sgd", lr=0.1), "fast")
    with pytest.raises(ConfigError, match=r"--optimizer-impl.*'fast'.*auto, foreach, fused, single"):
        make_run_config(model="fcn5_tiny", batch_size=8, optimizer_impl="fast")


def test_run_key_unchanged_at_auto_and_distinct_otherwise():
    base = RunConfig(model="fcn5_tiny", batch_size=8)
    auto = RunConfig(model="fcn5_tiny", batch_size=8, optimizer_impl="auto")
    assert base.runtime.optimizer_impl == "auto" and auto.run_key() == base.run_key()
    assert "optimizer_impl" not in base.label() and "opt=" not in base.label()
    keys = {RunConfig(model="fcn5_tiny", batch_size=8, optimizer_impl=i).run_key()
            for i in ("auto", "fused", "foreach", "single")}
    assert len(keys) == 4
    assert "opt=fused" in RunConfig(model="fcn5_tiny", batch_size=8,
                                    optimizer_impl="fused").label()


@pytest.mark.parametrize("fw,words", [("jax", "Optax"), ("tensorflow", "Keras")])
def test_other_frameworks_refuse_anything_but_auto(fw, words):
    with pytest.raises(ConfigError) as e:
        make_run_config(model="fcn5_tiny", batch_size=8, framework=fw, optimizer_impl="fused")
    msg = str(e.value)
    assert "--optimizer-impl" in msg and "PyTorch option" in msg and words in msg
    assert "use --optimizer-impl auto" in msg
    assert make_run_config(model="fcn5_tiny", batch_size=8, framework=fw).runtime.optimizer_impl == "auto"


def test_a_sweep_takes_optimizer_impl_as_an_axis():
    pts = expand_grid({"batch_size": 8}, [{"model": "fcn5_tiny",
                                           "optimizer_impl": ["auto", "fused"]}])
    assert [p.runtime.optimizer_impl for p in pts] == ["auto", "fused"]
    assert pts[0].run_key() != pts[1].run_key()


def test_the_adapter_applies_the_configured_implementation():
    from dlperf.frameworks.torch.adapter import TorchAdapter
    from dlperf.zoo import get_spec

    cfg = make_run_config(model="fcn5_tiny", batch_size=4, device="cpu", measure_ceilings=False,
                          optimizer_impl="foreach")
    run = TorchAdapter().prepare(cfg, get_spec(cfg.workload.model))
    try:
        assert run.opt.defaults["foreach"] is True
        assert run.flags["optimizer"]["impl"] == "foreach"
    finally:
        run.close()
