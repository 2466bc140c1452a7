"""NVIDIA Management Library probes (through ``nvidia-ml-py``), all optional.

Every function returns ``None`` (or an empty result) when NVML or a GPU is absent, so callers
never need to guard against a CPU-only machine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _nvml():
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # library missing, no driver, no GPU
        return None


def _handle(nv: Any, uuid: str | None, index: int) -> Any:  # pynvml: untyped
    if uuid:
        try:
            return nv.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
        except Exception:
            pass
    return nv.nvmlDeviceGetHandleByIndex(index)


def memory_used_bytes(uuid: str | None = None, index: int = 0) -> int | None:
    """Device memory in use as NVML sees it (bytes): every process and the CUDA context.

    This is the third of docs/measurement.md rule 7's numbers; it includes other processes' memory.
    """
    nv = _nvml()
    if nv is None:
        return None
    try:
        return int(nv.nvmlDeviceGetMemoryInfo(_handle(nv, uuid, index)).used)
    except Exception:
        return None


def visible_gpu_count() -> int | None:
    """GPUs this process's CUDA would see: the entries of ``CUDA_VISIBLE_DEVICES`` where it is
    set (an empty value: none; at most NVML's count where NVML answers), else NVML's count;
    None where neither tells (no NVML, no driver) and ``CUDA_VISIBLE_DEVICES`` is unset."""
    import os

    nv = _nvml()
    n: int | None = None
    if nv is not None:
        try:
            n = int(nv.nvmlDeviceGetCount())
        except Exception:
            n = None
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is None:
        return n
    listed = 0
    for item in env.split(","):  # CUDA stops at the first entry that is not a device
        item = item.strip()
        if not item or item.startswith("-"):
            break
        listed += 1
    return listed if n is None else min(listed, n)


def gpus() -> list[dict[str, Any]]:
    """Name, UUID, memory, clocks (MHz), power limit (W) and driver of every visible GPU."""
    nv = _nvml()
    if nv is None:
        return []
    out = []
    try:
        driver = nv.nvmlSystemGetDriverVersion()
        n = nv.nvmlDeviceGetCount()
    except Exception:
        return []
    for i in range(n):
        info: dict[str, Any] = {"index": i, "driver": driver}
        try:
            h = nv.nvmlDeviceGetHandleByIndex(i)
            info["name"] = nv.nvmlDeviceGetName(h)
            info["uuid"] = nv.nvmlDeviceGetUUID(h)
            info["memory_total_bytes"] = int(nv.nvmlDeviceGetMemoryInfo(h).total)
            for key, clk in (("sm", nv.NVML_CLOCK_SM), ("mem", nv.NVML_CLOCK_MEM)):
                info[f"clock_{key}_mhz"] = nv.nvmlDeviceGetClockInfo(h, clk)
                info[f"clock_{key}_max_mhz"] = nv.nvmlDeviceGetMaxClockInfo(h, clk)
            info["power_limit_w"] = nv.nvmlDeviceGetPowerManagementLimit(h) / 1000.0
            info["pci_bus_id"] = nv.nvmlDeviceGetPciInfo(h).busId
        except Exception as e:  # partial information is still useful
            info["error"] = str(e)
        out.append(info)
    return out


#: NVML field value types (``nvmlValueType_t``) -> the member of ``nvmlValue_t`` holding it.
_VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")

#: ``PowerReader.source`` of the two NVML power readings (stored as ``power.power_source``).
POWER_INSTANT = "nvml_field_power_instant"
POWER_AVERAGE = "nvml_power_usage"


class PowerReader:
    """Board power of one GPU in watts, called with no arguments; ``source`` says which NVML
    reading it is (:data:`POWER_INSTANT` or :data:`POWER_AVERAGE`)."""

    def __init__(self, read_mw: Any, source: str) -> None:
        self._read_mw, self.source = read_mw, source

    def __call__(self) -> float:
        return float(self._read_mw()) / 1000.0


def _instant_power_mw(nv: Any, h: Any) -> float:
    """``NVML_FI_DEV_POWER_INSTANT`` of ``h`` through ``nvmlDeviceGetFieldValues`` (mW).

    Raises:
        Exception: the driver lacks the field (old driver: ``NVML_ERROR_NOT_SUPPORTED`` or an
            unknown field id), or answers for it with an error or a value type it has no
            member for.
    """
    v = nv.nvmlDeviceGetFieldValues(h, [nv.NVML_FI_DEV_POWER_INSTANT])[0]
    if v.nvmlReturn != 0:  # NVML_SUCCESS
        raise RuntimeError(f"NVML_FI_DEV_POWER_INSTANT: NVML error {v.nvmlReturn}")
    return float(getattr(v.value, _VALUE_MEMBERS[v.valueType]))


def power_reader(nv: Any, h: Any) -> PowerReader:
    """The board-power reader of GPU handle ``h``: the instantaneous power field
    (``nvmlDeviceGetFieldValues(NVML_FI_DEV_POWER_INSTANT)``, NVML 12.x drivers, Ampere and
    newer) where the driver answers it, else ``nvmlDeviceGetPowerUsage``, which on Ampere and
    newer is a 1 s average (NVML API reference, ``nvmlDeviceGetPowerUsage``): 25 ms samples of it
    are smoothed. Either in mW, read as W.

    Raises:
        Exception: neither reading works here (pynvml's NVMLError).
    """
    if hasattr(nv, "NVML_FI_DEV_POWER_INSTANT") and hasattr(nv, "nvmlDeviceGetFieldValues"):
        try:
            if _instant_power_mw(nv, h) > 0:
                return PowerReader(lambda: _instant_power_mw(nv, h), POWER_INSTANT)
        except Exception:  # noqa: BLE001 - older driver or GPU: the averaged reading
            pass
    nv.nvmlDeviceGetPowerUsage(h)
    return PowerReader(lambda: nv.nvmlDeviceGetPowerUsage(h), POWER_AVERAGE)


#: :func:`power_readers`' readers: power (W), energy (J; None: no counter), memory used (bytes).
PowerReaders = tuple[PowerReader, Callable[[], float] | None, Callable[[], int]]


def power_readers(uuid: str | None = None, index: int = 0
                  ) -> tuple[PowerReaders, None] | tuple[None, str]:
    """Readers for :class:`dlperf.measure.power.PowerSampler` of one GPU, or ``(None, reason)``.

    Returns ``((read_power_w, read_energy_j | None, read_memory_used_bytes), None)``:
    :func:`power_reader` (the instantaneous power where the driver offers it, else
    ``nvmlDeviceGetPowerUsage``; mW -> W; its ``source`` says which),
    ``nvmlDeviceGetTotalEnergyConsumption`` (millijoules since the driver loaded -> J; None
    where the device does not support it, i.e. before Volta) and
    ``nvmlDeviceGetMemoryInfo().used`` (bytes). Each reader is tried once here.
    """
    nv = _nvml()
    if nv is None:
        return None, "NVML is not available (no NVIDIA driver or nvidia-ml-py)"
    try:
        h = _handle(nv, uuid, index)
        power_w = power_reader(nv, h)
    except Exception as e:  # noqa: BLE001
        return None, f"NVML power reading is not supported here: {e}"

    def memory_used() -> int:
        return int(nv.nvmlDeviceGetMemoryInfo(h).used)

    def total_energy_j() -> float:
        return nv.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0

    energy_j: Callable[[], float] | None = None
    try:
        nv.nvmlDeviceGetTotalEnergyConsumption(h)
        energy_j = total_energy_j
    except Exception:  # noqa: BLE001 - older GPUs: fall back to the sampled power
        pass
    return (power_w, energy_j, memory_used), None
