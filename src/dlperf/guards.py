"""Checks before points run: memory a point cannot fit, and how long a list of points takes.

**Memory** (:func:`memory_refusals`): a point whose estimated peak exceeds the memory it runs
in is refused before anything runs, with the largest batch that would fit (``-b 1000000``
on a CPU ran 294 s and took 15.9 GB of a 24 GB host before this; a larger one takes the host
down). The estimate of one process's peak at per-device batch ``b`` (bytes) is the larger of:

- a **lower bound** from the model's spec alone: the weights, their gradients and the
  optimizer's state in fp32 (``params x 4 x (2 + slots)``, slots 1 for SGD with momentum, 2 for
  Adam/AdamW: Kingma & Ba 2015), plus per sample the input (4 bytes a value, 8 for token ids)
  and the larger of the output logits (``num_classes`` per target position, 2 bytes in bf16,
  else 4), which every framework materialises, and :data:`ACTIVATION_FRACTION` of the
  activations the forward pass leaves for the backward (the leaf modules' outputs of a zoo
  model, :mod:`dlperf.zoo.activations`, halved in bf16; models outside the zoo have no
  activation term); and
- **measured peaks** of the same model, framework, mode, device and precision stored in the
  results file at other batch sizes (the framework's allocated peak on a GPU, the process's
  peak RSS on a CPU): with two or more batch sizes a least-squares line ``a + c b`` through
  them (the per-sample part of a training step's memory grows linearly with the batch); with
  one, the measured peak plus the lower bound's per-sample growth.

The memory is the device's (NVML's total) on a GPU and the host's (``psutil``'s total) on a
CPU, shared by the processes of a data-parallel CPU run. Where neither is known the check is
skipped. ``--no-memory-check`` runs such points anyway.

**Duration** (:func:`duration_estimate`): the time of points from the stored runs of the same
point, else of the same model at another batch size, else of the framework on that device
(each worker's own elapsed time plus :data:`PROCESS_S` for its process to start), else at
least the iteration policy's minimum measured time plus a worker's start-up, which makes the
total a lower bound (said so).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from dlperf.zoo.activations import activation_bytes

__all__ = ["MemoryEstimate", "static_bytes", "per_sample_bytes", "memory_estimate",
           "capacity_bytes", "memory_refusals", "ACTIVATION_FRACTION", "duration_estimate", "STARTUP_S", "PROCESS_S",
           "clock_text"]

#: Optimizer state per parameter, in parameters (SGD with momentum: the velocity; Adam: the
#: first and second moments).
_SLOTS = {"sgd": 1, "adam": 2, "adamw": 2}
#: The share of a zoo model's leaf-module output bytes (:mod:`dlperf.zoo.activations`) counted
#: as per-sample memory: the smallest ratio of the measured per-sample growth of the peak
#: (least squares over batch sizes) to those bytes over the 14 zoo models in the committed H200
#: PyTorch eager files, fp32 and bf16 (0.70 for resnet56 bf16, whose in-place ReLUs and
#: autocast share buffers; 0.76 the smallest in fp32; up to 4.9 where the framework keeps more).
#: The smallest keeps the estimate a lower bound: it refuses only what cannot fit.
ACTIVATION_FRACTION = 0.7
#: A worker's start-up and the steps outside the measured segment (s) where no stored run
#: says better: the least a point takes beyond its measured segment.
STARTUP_S = 2.0
#: A worker process's start before it measures its own elapsed time (the interpreter and
#: dlperf's imports: 0.8-1.1 s on the 2-core development host), added to every stored time.
PROCESS_S = 1.0


def static_bytes(spec: Any) -> int:
    """Bytes of the weights, gradients and optimizer state of ``spec``'s model in fp32."""
    slots = _SLOTS.get(getattr(spec.optimizer, "name", "sgd"), 1)
    return int(spec.params) * 4 * (2 + slots)


def per_sample_bytes(spec: Any, precision: str) -> int:
    """A lower bound of the bytes one more sample adds to a training step: its input, and its
    output logits or its activations, whichever is larger (module docstring)."""
    ints = spec.input_kind in ("tokens", "token_pairs")
    inputs = math.prod(spec.input_shape) * (8 if ints else 4)
    try:
        positions = math.prod(spec.targets) if spec.targets else 1
    except ValueError:  # a spectrogram without a target shape: no logits bound
        positions = 0
    width = 2 if precision == "bf16" else 4  # bytes a value
    logits = positions * int(spec.num_classes) * width
    act = activation_bytes(spec.name) or 0  # counted at 4 bytes a value
    return inputs + max(logits, int(ACTIVATION_FRACTION * act * width / 4))


@dataclass(frozen=True)
class MemoryEstimate:
    """One process's peak memory as a line in the per-device batch ``b``: ``fixed + per_sample
    * b`` bytes, and where it comes from (``source``: ``"spec"``, or the measured batches)."""

    fixed: float
    per_sample: float
    source: str

    def at(self, batch: int) -> float:
        """The estimate at per-device batch ``batch`` (bytes)."""
        return self.fixed + self.per_sample * batch

    def largest_batch(self, capacity: float) -> int:
        """The largest per-device batch whose estimate is within ``capacity`` bytes (0: none)."""
        if self.per_sample <= 0:
            return 0 if self.fixed > capacity else 2**62
        return max(0, math.floor((capacity - self.fixed) / self.per_sample))


def _peak(rec: Any, device: str) -> float | None:
    m = rec.memory
    if m is None:
        return None
    v = m.peak_allocated_bytes if device == "cuda" else m.peak_rss_bytes
    return float(v) if isinstance(v, (int, float)) and v > 0 else None


def memory_estimate(cfg: Any, spec: Any, stored: Iterable[Any] = ()) -> MemoryEstimate:
    """The estimate of one process's peak memory for ``cfg`` (module docstring); ``stored``:
    records of the results file (only those of the same model, framework, mode, device and
    precision, with a memory peak, are used)."""
    lower = MemoryEstimate(static_bytes(spec), per_sample_bytes(spec, cfg.hardware.precision), "spec")
    pts: dict[int, float] = {}
    for r in stored:
        i = r.identity
        if (i.status != "ok" or i.model != cfg.workload.model or i.framework != cfg.runtime.framework
                or i.mode != cfg.runtime.mode or i.device != cfg.hardware.device or i.precision != cfg.hardware.precision):
            continue
        peak = _peak(r, cfg.hardware.device)
        b = i.per_device_batch or i.batch_size
        if peak is not None and b:
            pts[int(b)] = max(pts.get(int(b), 0.0), peak)
    if not pts:
        return lower
    bs = sorted(pts)
    if len(bs) >= 2:
        mb, mp = statistics.fmean(bs), statistics.fmean(pts[b] for b in bs)
        var = sum((b - mb) ** 2 for b in bs)
        slope = max(0.0, sum((b - mb) * (pts[b] - mp) for b in bs) / var)
        slope = max(slope, lower.per_sample)
        fit = MemoryEstimate(mp - slope * mb, slope,
                             f"measured peaks at batch {', '.join(map(str, bs))}")
    else:
        b0 = bs[0]
        fit = MemoryEstimate(pts[b0] - lower.per_sample * b0, lower.per_sample,
                             f"the measured peak at batch {b0}")
    return fit if fit.at(cfg.per_device_batch) >= lower.at(cfg.per_device_batch) else lower


def capacity_bytes(device: str) -> tuple[float, str] | None:
    """(bytes, what) of the memory one process of a point on ``device`` can use: the first
    GPU's total memory (NVML) on ``cuda``, the host's on ``cpu``; None where unknown."""
    if device == "cuda":
        from dlperf import nvml

        g = nvml.gpus()
        total = g[0].get("memory_total_bytes") if g else None
        return (float(total), f"the GPU's {total / 2**30:.0f} GiB") if total else None
    import psutil

    try:
        total = psutil.virtual_memory().total
    except Exception:  # noqa: BLE001 - psutil without memory information
        return None
    return float(total), f"the host's {total / 2**30:.1f} GiB"


def _gib(b: float) -> str:
    return f"{b / 2**30:.1f} GiB"


def memory_refusals(points: Sequence[Any], stored: Sequence[Any] = ()) -> list[str]:
    """One message per point whose estimated peak exceeds the memory it runs in (module
    docstring), naming the estimate, its source, the memory and the largest batch that would
    fit; [] when all fit (or nothing is known to check)."""
    from dlperf.zoo import get_spec

    out = []
    caps: dict[str, tuple[float, str] | None] = {}
    for p in points:
        if p.hardware.device not in caps:
            caps[p.hardware.device] = capacity_bytes(p.hardware.device)
        cap = caps[p.hardware.device]
        if cap is None:
            continue
        est = memory_estimate(p, get_spec(p.workload.model), stored)
        ranks = p.processes_per_node if p.hardware.device == "cpu" else 1  # CPU ranks share the host
        need = est.at(p.per_device_batch) * ranks
        if need <= cap[0]:
            continue
        fit = est.largest_batch(cap[0] / ranks)
        glob = fit * (p.world_size if p.parallel.scaling == "strong" else 1)
        advice = (f"the largest batch that fits is about {glob}" if fit >= 1 else
                  f"not even batch 1 fits: the weights, gradients and optimizer state alone "
                  f"take {_gib(static_bytes(get_spec(p.workload.model)))}")
        out.append(f"{p.label()}: needs about {_gib(need)} (from {est.source}), more than "
                   f"{cap[1]}; {advice}")
    return out


def clock_text(seconds: float) -> str:
    """``45 s``, ``12 min``, ``3.4 h``, ``2.1 days``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def _elapsed(r: dict[str, Any]) -> float | None:
    w = r.get("worker")
    v = w.get("elapsed_s") if isinstance(w, dict) else None
    return float(v) if isinstance(v, (int, float)) and v > 0 else None


def duration_estimate(points: Sequence[Any], rows: Sequence[dict[str, Any]]
                      ) -> tuple[float, str]:
    """How long ``points`` take (s) and how that was estimated (module docstring). ``rows``:
    the results file's rows (``ResultStore.rows(latest=False)``)."""
    by_key: dict[str, list[float]] = {}
    by_model: dict[tuple[Any, ...], list[float]] = {}
    by_fw: dict[tuple[Any, ...], list[float]] = {}
    for row in rows:
        try:
            r = json.loads(row.get("result_json") or "{}")
        except ValueError:
            continue
        t = _elapsed(r)
        if t is None:
            continue
        by_key.setdefault(str(row.get("run_key")), []).append(t)
        by_model.setdefault((r.get("model"), r.get("framework"), r.get("mode"),
                             r.get("device"), r.get("precision")), []).append(t)
        by_fw.setdefault((r.get("framework"), r.get("device")), []).append(t)
    total, n_same, n_model, n_fw, n_floor = 0.0, 0, 0, 0, 0
    for p in points:
        for found, kind in ((by_key.get(p.run_key()), "same"),
                            (by_model.get((p.workload.model, p.runtime.framework, p.runtime.mode, p.hardware.device,
                                           p.hardware.precision)), "model"),
                            (by_fw.get((p.runtime.framework, p.hardware.device)), "fw")):
            if found:
                total += statistics.median(found) + PROCESS_S
                n_same += kind == "same"
                n_model += kind == "model"
                n_fw += kind == "fw"
                break
        else:
            total += p.measure.iterations.min_time_s + STARTUP_S + PROCESS_S
            n_floor += 1
    parts = [f"{n} {what}" for n, what in (
        (n_same, "from stored runs of the same point"),
        (n_model, "from stored runs of the same model at another batch"),
        (n_fw, "from this file's median point of the framework on that device"),
        (n_floor, "at the least the iteration policy allows (minimum time + "
                  f"{STARTUP_S + PROCESS_S:g} s of start-up each)")) if n]
    lower = " (a lower bound)" if n_floor else ""
    return total, "; ".join(parts) + lower
