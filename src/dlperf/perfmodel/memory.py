"""Device memory: whether a per-device batch fits, from the memory measured at other batches.

A training step's peak device memory is the model's state, which does not change with the
batch (parameters, gradients, optimizer state, the framework's workspaces), plus the
activations kept for backward, which grow with it::

    M(B) = m0 + m1 B

(Rajbhandari et al. 2020, ZeRO, sec. 3: model states and residual states; Korthikanti et al.
2022, sec. 4: activation memory linear in the micro-batch). ``M`` is the allocator's reserved
peak (``memory.peak_reserved_bytes``, what the framework's caching allocator held: more than
it handed out, fragmentation included). ``m0`` and ``m1`` come from a least-squares line
through the stored points of the configuration (model, framework, mode, precision, device)
when two or more batch sizes are stored; from one point, ``m0`` is
:data:`STATE_BYTES_PER_PARAM` bytes per parameter and ``m1`` the rest over its batch.

The memory a batch can use is the device's total (``env.gpus[].memory_total_bytes``) less
what the process holds outside the allocator (CUDA context, libraries: NVML's used bytes
minus the reserved peak, the median over the stored points of that device). A batch whose
``M`` is above it does not fit; the largest that fits is ``floor((capacity - m0) / m1)``.
A configuration without stored memory counts is not judged, nor one of a framework whose
allocator takes a fixed pool up front (:func:`special.memory_judged`: its reserved peak is the pool,
the same at every batch, not what the step needs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from statistics import median

import numpy as np

from dlperf.perfmodel import special
from dlperf.perfmodel.records import Point

#: Model state per parameter when one batch size is stored: fp32 weights (4), fp32 gradients
#: (4) and two fp32 Adam moments (8) (Rajbhandari et al. 2020, sec. 3.1: 16 bytes per
#: parameter of mixed-precision Adam is 16 + the fp16 copies; dlperf keeps fp32 parameters).
STATE_BYTES_PER_PARAM = 16.0


@dataclass(frozen=True)
class MemoryFit:
    """``M(B) = m0 + m1 B`` (bytes, B per device) and the device's usable bytes.

    Attributes:
        m0_bytes, m1_bytes_per_sample: the line.
        capacity_bytes: what a step can use on the device.
        device_name: the device's name (``NVIDIA H200``).
        batches: the stored per-device batch sizes the line went through.
        source: how the line was made (for the message).
        outside_bytes: what the process held outside the allocator (the device's total less
            ``capacity_bytes``).
    """

    m0_bytes: float
    m1_bytes_per_sample: float
    capacity_bytes: float
    device_name: str | None
    batches: tuple[int, ...]
    source: str
    outside_bytes: float = 0.0

    def on(self, total_bytes: float, device_name: str | None) -> MemoryFit:
        """The same line on another device of ``total_bytes`` (the same model, framework and
        precision need the same bytes on any GPU; the process holds as much outside the
        allocator there): its capacity is ``total_bytes - outside_bytes``."""
        return replace(self, capacity_bytes=total_bytes - self.outside_bytes,
                       device_name=device_name)

    def need_bytes(self, batch: int) -> float:
        """``M(batch)`` (bytes)."""
        return self.m0_bytes + self.m1_bytes_per_sample * batch

    def largest_batch(self) -> int:
        """The largest per-device batch with ``M <= capacity`` (0: not even one sample)."""
        if self.m1_bytes_per_sample <= 0:
            return 0 if self.m0_bytes > self.capacity_bytes else 2**31
        # + 1e-9: a whole quotient computed a hair below itself (a fitted line's rounding)
        return max(0, math.floor((self.capacity_bytes - self.m0_bytes)
                                 / self.m1_bytes_per_sample + 1e-9))


def _gpu_total(p: Point) -> float | None:
    return p.device_memory_total_bytes


def fit(points: Sequence[Point]) -> MemoryFit | None:
    """The memory line of one configuration's stored one-device points (all files), or None
    when they hold no reserved peak or the device's total memory."""
    pts = [p for p in points if p.world_size == 1 and p.peak_reserved_bytes
           and _gpu_total(p) and special.memory_judged(p.framework)]
    if not pts:
        return None
    by: dict[int, list[float]] = {}
    for p in pts:
        by.setdefault(p.per_device_batch, []).append(float(p.peak_reserved_bytes or 0.0))
    bs = sorted(by)
    peak = [max(by[b]) for b in bs]
    if len(bs) >= 2:
        m1, m0 = np.polyfit(np.asarray(bs, float), np.asarray(peak, float), 1)
        m1 = max(float(m1), 0.0)
        m0 = max(float(m0), 0.0)
        source = f"a line through the reserved peaks at batch {', '.join(map(str, bs))}"
    else:
        params = float(pts[0].params or 0.0)
        m0 = min(STATE_BYTES_PER_PARAM * params, peak[0])
        m1 = (peak[0] - m0) / bs[0]
        source = (f"the reserved peak at batch {bs[0]}, {STATE_BYTES_PER_PARAM:g} bytes per "
                  "parameter of it taken as model state")
    outside = [p.nvml_used_bytes - p.peak_reserved_bytes for p in pts
               if p.nvml_used_bytes and p.peak_reserved_bytes
               and p.nvml_used_bytes > p.peak_reserved_bytes]
    total = float(median(_gpu_total(p) or 0.0 for p in pts))
    held = float(median(outside)) if outside else 0.0
    return MemoryFit(m0, m1, total - held, pts[-1].device_name, tuple(bs), source, held)


def check(points: Sequence[Point], batch: int, on: tuple[float, str | None] | None = None
          ) -> tuple[MemoryFit | None, str | None]:
    """``(fit, refusal)``: the configuration's memory line (None if not stored) and, when
    ``batch`` (per device) needs more than the device has, the reason to refuse it (naming
    the largest batch that fits), else None. ``on``: ``(total bytes, name)`` of another
    device the batch is asked for (:meth:`MemoryFit.on`; ``dlperf predict --gpu``); None:
    the stored points' own device."""
    mf = fit(points)
    if mf is not None and on is not None:
        mf = mf.on(*on)
    if mf is None or mf.need_bytes(batch) <= mf.capacity_bytes:
        return mf, None
    gib = 2.0**30
    return mf, (f"batch {batch} per device does not fit in the {mf.device_name or 'device'}'s "
                f"memory: it needs an estimated {mf.need_bytes(batch) / gib:.1f} GiB "
                f"({mf.source}), {mf.capacity_bytes / gib:.1f} GiB can be used; the largest "
                f"batch that fits is {mf.largest_batch()} per device")
