"""NVIDIA Management Library probes (through ``nvidia-ml-py``), all optional.

Every function returns ``None`` (or an empty result) when NVML or a GPU is absent, so callers
never need to guard against a CPU-only machine.
"""

from __future__ import annotations

from typing import Any


def _nvml():
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # library missing, no driver, no GPU
        return None


def _handle(nv, uuid: str | None, index: int):
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


def power_readers(uuid: str | None = None, index: int = 0):
    """Readers for :class:`dlperf.measure.power.PowerSampler` of one GPU, or ``(None, reason)``.

    Returns ``((read_power_w, read_energy_j | None, read_memory_used_bytes), None)``:
    ``nvmlDeviceGetPowerUsage`` (milliwatts -> W), ``nvmlDeviceGetTotalEnergyConsumption``
    (millijoules since the driver loaded -> J; None where the device does not support it, i.e.
    before Volta) and ``nvmlDeviceGetMemoryInfo().used`` (bytes). Each reader is tried once here.
    """
    nv = _nvml()
    if nv is None:
        return None, "NVML is not available (no NVIDIA driver or nvidia-ml-py)"
    try:
        h = _handle(nv, uuid, index)
        nv.nvmlDeviceGetPowerUsage(h)
    except Exception as e:  # noqa: BLE001
        return None, f"NVML power reading is not supported here: {e}"

    def power_w() -> float:
        return nv.nvmlDeviceGetPowerUsage(h) / 1000.0

    def memory_used() -> int:
        return int(nv.nvmlDeviceGetMemoryInfo(h).used)

    energy_j = None
    try:
        nv.nvmlDeviceGetTotalEnergyConsumption(h)

        def energy_j() -> float:
            return nv.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0
    except Exception:  # noqa: BLE001 - older GPUs: fall back to the sampled power
        pass
    return (power_w, energy_j, memory_used), None
