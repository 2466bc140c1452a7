"""Host launches per iteration of a compiled XLA program, counted from its stored timeline.

A compiled step is one call, but XLA:GPU's runtime issues the program's thunks from the host
thread, and since XLA turns runs of consecutive *command-buffer* thunks into CUDA graphs (one
launch for many kernels), the host's work follows the number of launches, not of kernels. On
the H200 (calibration2.db, JAX 0.11) the untraced host dispatch read ~1 us per kernel for the
LSTM (``lax.scan``: ~1,670 kernels, 1.4-2.2 ms) and 6-9 us per kernel for ResNet-50/56 (860-1,420
kernels, 4.6-10 ms): per *launch* as counted here, 9-18 us for both. A profiled iteration runs
every thunk on its own (XLA does not use command buffers while the profiler is on, which is why
the trace can name every kernel), so the timeline shows the kernels; this module folds them back
into the launches of an unprofiled iteration with XLA's default rules
(``xla/debug_options_flags.cc``, ``xla/service/gpu/transforms/command_buffer_scheduling.cc``):

* fusions, cuBLAS/cuBLASLt GEMMs, cuDNN fMHA, FFI custom calls and device copies are commands;
  cuDNN *convolution* custom calls (``__cudnn$conv...``, XLA's ConvolutionThunk) are not: each
  is launched by the host, and it ends a command buffer (:data:`NOT_CAPTURED`);
* a run of at least ``xla_gpu_graph_min_graph_size`` = 5 consecutive commands becomes one
  command buffer (one launch); a shorter run is launched kernel by kernel
  (:data:`MIN_GRAPH_SIZE`);
* a ``while`` loop is not a command by default (``WHILE`` is not in
  ``xla_gpu_enable_command_buffer``): its body's command buffers are launched once per trip.
  The timeline does not mark loop bodies, so a body is recognised as a block of kernels repeated
  back to back (:func:`loop_starts`: period 2-64 kernels, at least 3 repeats): ``lax.scan``'s
  time steps. Identical unrolled blocks (ResNet stages, whose repeated layers XLA compiles to the
  same kernels) look the same and are cut the same way; their command-buffer runs are short
  anyway, as every convolution ends one.

Nothing here reads a timing: only the kernels' order, names and HLO ops (the program's
structure, which a compile of it would give without running it).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from statistics import median
from typing import Any

#: HLO ops (custom-call targets) XLA launches from the host outside any command buffer:
#: convolution thunks (command_buffer_scheduling.cc has no command for them).
NOT_CAPTURED = ("__cudnn$conv",)
#: ``xla_gpu_graph_min_graph_size``'s default: shorter runs of commands are not captured.
MIN_GRAPH_SIZE = 5
#: A repeated block (a loop body) spans this many kernels at most and at least ...
LOOP_PERIOD_MAX = 64
LOOP_PERIOD_MIN = 2
#: ... and repeats at least this many times back to back.
LOOP_REPEATS_MIN = 3


def loop_starts(keys: Sequence[int], period_min: int = LOOP_PERIOD_MIN,
                period_max: int = LOOP_PERIOD_MAX,
                repeats_min: int = LOOP_REPEATS_MIN) -> set[int]:
    """Indices where a repeated block starts in ``keys`` (one kernel's key per element, in
    launch order) and the index after its last repeat.

    Scanning left to right, at each index the block of ``period_min``..``period_max`` kernels
    repeated back to back at least ``repeats_min`` times that covers the most kernels is taken
    (ties: the shorter period), and the scan continues after it.
    """
    n = len(keys)
    nxt: dict[int, list[int]] = {}
    for i, k in enumerate(keys):
        nxt.setdefault(k, []).append(i)
    starts: set[int] = set()
    i = 0
    while i < n:
        best = (0, 0)
        pos = nxt[keys[i]]
        # candidate periods: where the same kernel comes again
        j = bisect.bisect_right(pos, i)
        while j < len(pos) and pos[j] - i <= period_max:
            p = pos[j] - i
            j += 1
            if p < period_min or (n - i) // p < repeats_min:
                continue
            body = keys[i:i + p]
            r = 1
            while i + (r + 1) * p <= n and keys[i + r * p:i + (r + 1) * p] == body:
                r += 1
            if r >= repeats_min and p * r > best[0] * best[1]:
                best = (p, r)
        p, r = best
        if p:
            starts.update(i + k * p for k in range(r + 1))
            i += p * r
        else:
            i += 1
    return starts


def launches(seq: Sequence[Mapping[str, Any]], min_graph: int = MIN_GRAPH_SIZE) -> int:
    """Host launches of one iteration whose device ops (timeline rows: ``name``, ``op``, in
    launch order) are ``seq``: every op of :data:`NOT_CAPTURED`, plus per run of other ops
    between them and the loop-body boundaries of :func:`loop_starts`, 1 when the run is at
    least ``min_graph`` long (one command buffer), else its length."""
    ids: dict[str, int] = {}
    keys = [ids.setdefault(str(o.get("name")), len(ids)) for o in seq]
    cuts = loop_starts(keys)
    count = run = 0

    def flush() -> int:
        return run if run < min_graph else 1

    for i, o in enumerate(seq):
        if i in cuts:
            count, run = count + flush(), 0
        if str(o.get("op") or "").startswith(NOT_CAPTURED):
            count, run = count + flush() + 1, 0
        else:
            run += 1
    return count + flush()


def launches_per_iter(ops: Iterable[Mapping[str, Any]]) -> float | None:
    """The median of :func:`launches` over the traced iterations of a decoded timeline
    (:func:`dlperf.results.timelines.decode`; rows with ``step`` None are left out);
    None when no row belongs to an iteration."""
    steps: dict[int, list[Mapping[str, Any]]] = {}
    for o in ops:
        if o.get("step") is not None:
            steps.setdefault(int(o["step"]), []).append(o)
    if not steps:
        return None
    return float(median(launches(s) for _, s in sorted(steps.items())))
