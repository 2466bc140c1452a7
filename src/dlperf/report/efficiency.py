"""Efficiency of stored results: MFU against the measured ceiling and the datasheet peak, the
roofline position and energy per iteration (the report's "Efficiency" section)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dlperf.report.cells import device_cell, md_escape
from dlperf.report.cells import fmt_opt as _f
from dlperf.results.parts import Flops, Mfu, Part
from dlperf.results.schema import RunRecord
from dlperf.results.view import fields, framework_mode, is_ok

__all__ = ["LIBRARY_BLIND_MARK", "LIBRARY_BLIND_NOTE", "library_blind_count", "datasheet_mfu",
           "efficiency_markdown"]


#: Marks a framework FLOP count that misses the library calls (:func:`library_blind_count`).
LIBRARY_BLIND_MARK = "‡"
LIBRARY_BLIND_NOTE = ("XLA's count of the *compiled* program on a GPU: the dots and convolutions "
                      "XLA hands to cuBLAS/cuDNN count 0 FLOPs there, so this is not the step's "
                      "FLOP count, and FLOP/byte and the roofline are not given. Runs since "
                      "dlperf counts the HLO before optimisation (framework source says so) do "
                      "not have this mark.")


def library_blind_count(flops: Flops | Mapping[str, Any] | None, device: Any) -> bool:
    """True when a stored result's framework FLOP count is JAX's compiled-program cost analysis
    on a GPU (stored before dlperf counted the HLO before optimisation): it omits every
    cuBLAS/cuDNN custom call (measured on an H200: 1.7% of resnet50's analytic FLOPs), so
    neither the ratio to the analytic count nor the roofline built on it means anything.

    Args:
        flops: the result's ``flops`` part (``framework_source`` names the count).
        device: the result's device (``"cuda"``, ``"cpu"``).
    """
    fl = flops if isinstance(flops, Flops) else Flops.model_validate(flops or {})
    src = str(fl.framework_source or "")
    return device == "cuda" and src.startswith("XLA cost analysis of the compiled step")


def datasheet_mfu(mfu: Mfu | Mapping[str, Any] | None,
                  rec: RunRecord) -> float | None:
    """MFU against the dense datasheet peak: the stored ``mfu_datasheet``, or for a GPU row
    stored without one (until December 2026 dlperf looked the device name up before the
    session had set it, so every GPU row got None), achieved FLOP/s over
    :func:`dlperf.perfmodel.datasheet.datasheet_peaks` of the row's ``device_name`` at its
    precision; None where neither is known (CPUs, devices missing from the table)."""
    from dlperf.perfmodel.datasheet import datasheet_peaks

    m = mfu if isinstance(mfu, Mfu) else Mfu.model_validate(mfu or {})
    if m.mfu_datasheet is not None:
        return m.mfu_datasheet
    if rec.identity.device != "cuda":
        return None
    peak = (datasheet_peaks(rec.device_name) or {}).get(str(rec.identity.precision))
    achieved = m.achieved_flops_per_s
    return achieved / peak if achieved is not None and peak else None


def _given(part: Part | None) -> bool:
    """True for a part that holds something (not absent, not stored empty)."""
    return part is not None and bool(part.model_dump(exclude_unset=True))


def _efficiency_line(r: RunRecord) -> str | None:
    """The efficiency table's line of one ok result; None when it has no MFU and no power."""
    if not _given(r.mfu) and not _given(r.power):
        return None
    m = r.mfu if r.mfu is not None else Mfu()
    fl = r.flops if r.flops is not None else Flops()
    roof = m.roofline or {}
    ceil = r.ceilings or {}
    i = r.identity
    blind = library_blind_count(fl, i.device)
    ratio = _f(fl.framework_to_analytic, '.3f') + (" " + LIBRARY_BLIND_MARK if blind else "")
    if blind:
        roof = {}
    power = r.power
    return (
        f"| {md_escape(str(i.model))} | {framework_mode(r)} | {device_cell(fields(r, ('device', 'world_size')))}"
        f"{'' if i.threads is None else ', ' + str(i.threads) + ' thr'} | "
        f"{i.precision} | {i.batch_size} | {i.data} | "
        f"{_f(_div(m.achieved_flops_per_s, 1e12), '.4g')} | "
        f"{_f(_div(m.ceiling_flops_per_s, 1e12), '.4g')} | {_f(m.mfu, '.1%')} | "
        f"{_f(datasheet_mfu(m, r), '.1%')} | {ratio} | "
        f"{_f(_div(ceil.get('bandwidth_bytes_per_s'), 1e9), ',.0f')} | "
        f"{_f(roof.get('intensity_flop_per_byte'), '.3g')} | {roof.get('bound') or '-'} | "
        f"{_f(power.mean_power_w if power is not None else None, '.0f')} | "
        f"{_f(power.energy_per_iter_j if power is not None else None, '.4g')} |")


def efficiency_markdown(rows: Sequence[RunRecord]) -> str:
    """MFU, the measured ceilings, roofline position and energy of each ok result (Markdown);
    empty when no result has any of them."""
    ok = [r for r in rows if is_ok(r)]
    ok.sort(key=lambda r: (str(r.identity.model), str(r.identity.framework),
                           str(r.identity.mode), str(r.identity.precision),
                           r.identity.batch_size or 0, str(r.identity.data)))
    lines = [ln for ln in map(_efficiency_line, ok) if ln is not None]
    if not lines:
        return ""
    head = ["| model | framework/mode | device | precision | batch | data | achieved TFLOP/s | "
            "ceiling TFLOP/s | MFU | MFU (datasheet) | framework / analytic FLOPs | "
            "bandwidth GB/s | FLOP/byte | roofline | power W | J/iter |",
            "|---|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
    foot = ["", "*achieved*: analytic training FLOPs per sample x samples/s; *ceiling*: the best "
            "square-matmul rate at the run's precision measured in the same worker; *MFU* = "
            "achieved / ceiling (datasheet: against the dense datasheet peak). *FLOP/byte*: "
            "the framework's FLOP count over its byte estimate per iteration; *roofline*: "
            "memory- or compute-bound against the measured ridge point (ceiling / bandwidth). "
            "Power and energy per iteration from NVML over the measured segment (GPU only)."]
    if any(LIBRARY_BLIND_MARK in ln for ln in lines):
        foot.append(f"{LIBRARY_BLIND_MARK} {LIBRARY_BLIND_NOTE}")
    return "\n".join(head + lines + foot) + "\n"


def _div(a: Any, b: float) -> float | None:
    return None if a is None else a / b
