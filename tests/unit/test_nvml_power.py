"""NVML's instantaneous power is preferred over the 1 s averaged ``nvmlDeviceGetPowerUsage``
where the driver offers it (issue 23 item 6), and the result records which was sampled. NVML
is a fake module here (``pynvml`` in ``sys.modules``)."""

from __future__ import annotations

import sys
import types

import pytest

from dlperf import nvml
from dlperf.measure.power import PowerSampler, energy_summary
from fakes import FakeClock

FI_POWER_INSTANT = 186  # nvml.h NVML_FI_DEV_POWER_INSTANT


class _NVMLError(Exception):
    pass


def _fake_pynvml(*, instant: bool, field_error: int = 0) -> types.ModuleType:
    """A pynvml whose board draws 250 W instantaneously and 200 W averaged over 1 s (mW);
    without ``instant`` it predates the field (no constant, no ``nvmlDeviceGetFieldValues``)."""
    nv = types.ModuleType("pynvml")
    nv.calls = []
    nv.nvmlInit = lambda: None
    nv.nvmlDeviceGetHandleByIndex = lambda i: ("h", i)
    nv.nvmlDeviceGetHandleByUUID = lambda u: ("h", u)

    def usage(h):
        nv.calls.append("usage")
        return 200_000

    nv.nvmlDeviceGetPowerUsage = usage
    nv.nvmlDeviceGetTotalEnergyConsumption = lambda h: 1_000_000
    nv.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=2**30)
    if instant:
        nv.NVML_FI_DEV_POWER_INSTANT = FI_POWER_INSTANT

        def field_values(h, ids):
            nv.calls.append(("fields", tuple(ids)))
            return [types.SimpleNamespace(fieldId=ids[0], nvmlReturn=field_error, valueType=1,
                                          value=types.SimpleNamespace(uiVal=250_000))]

        nv.nvmlDeviceGetFieldValues = field_values
    return nv


def _readers(monkeypatch, nv):
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    readers, why = nvml.power_readers(None, 0)
    assert readers is not None, why
    return readers


def test_the_instant_power_field_is_preferred_where_the_driver_has_it(monkeypatch):
    nv = _fake_pynvml(instant=True)
    power_w, energy_j, mem = _readers(monkeypatch, nv)
    nv.calls.clear()
    assert power_w() == pytest.approx(250.0) and power_w.source == nvml.POWER_INSTANT
    assert nv.calls == [("fields", (FI_POWER_INSTANT,))]  # never the averaged reading
    assert energy_j() == pytest.approx(1000.0) and mem() == 2**30


@pytest.mark.parametrize("instant,field_error", [(False, 0), (True, 3)])
def test_the_averaged_power_is_used_without_the_field(monkeypatch, instant, field_error):
    """An old pynvml/driver (no field), or one answering NVML_ERROR_NOT_SUPPORTED (3) for it."""
    nv = _fake_pynvml(instant=instant, field_error=field_error)
    power_w, _, _ = _readers(monkeypatch, nv)
    assert power_w() == pytest.approx(200.0) and power_w.source == nvml.POWER_AVERAGE


def test_a_raising_field_query_falls_back_to_the_average(monkeypatch):
    nv = _fake_pynvml(instant=True)

    def broken(h, ids):
        raise _NVMLError("Invalid Argument")

    nv.nvmlDeviceGetFieldValues = broken
    power_w, _, _ = _readers(monkeypatch, nv)
    assert power_w.source == nvml.POWER_AVERAGE and power_w() == pytest.approx(200.0)


def test_the_result_records_which_power_reading_was_sampled(monkeypatch):
    power_w, energy_j, mem = _readers(monkeypatch, _fake_pynvml(instant=True))
    clock = FakeClock()
    s = PowerSampler(power_w, None, mem, interval_s=1.0, clock=clock)
    s.start()
    clock.t += 2.0
    rec = s.stop()
    e = energy_summary(rec, measured_time_s=2.0, n_iters=4, batch_size=8)
    assert e["power_source"] == "nvml_field_power_instant" and e["power_w"][0] == 250.0
    assert energy_summary(None, 1.0, 1, 1, reason="cpu")["power_source"] is None
    # a reader without a source (a test's lambda) records None, or what the caller says
    assert PowerSampler(lambda: 1.0).power_source is None
    assert PowerSampler(lambda: 1.0, power_source="x").power_source == "x"


def test_a_second_start_replaces_the_running_sampler():
    """A segment measured again (after a recompile) starts the sampler again: one thread
    samples, and the record covers the last segment (its energy from the second start)."""
    import threading

    energy = iter([10.0, 25.0, 40.0])
    s = PowerSampler(lambda: 100.0, lambda: next(energy), interval_s=0.001)
    s.start()
    first = s._thread
    s.start()
    assert not first.is_alive() and s._thread is not first
    assert sum(t.name == "dlperf-power" for t in threading.enumerate()) == 1
    rec = s.stop()
    assert rec.energy_start_j == 25.0 and rec.energy_stop_j == 40.0
