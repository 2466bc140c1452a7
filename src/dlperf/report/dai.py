"""Dai et al.'s table on stored results: where one training step's time goes, as shares of the
step, and whether the seed study's findings hold (issue 20, item 5).

Dai et al. (2022), the issue's second seed study, split one-GPU training into I/O, memory copy,
CPU work, GPU work and graph optimisation, and found scheduling, data loading and copies under
3% of the time and graph optimisation at most 2.5%. :func:`dai_rows` makes that split for every
stored result that was traced or broken into phases (``--breakdown``/``--trace``), with the
step as the model of :mod:`dlperf.perfmodel.onedevice` sees it: host dispatch overlapped with
device execution, so the host costs the step only what the device does not cover.

Per result, shares of the fused step ``T`` (the headline median, measured untraced):

* **I/O** ``t_io``: the training thread's time getting the batch, host clock
  (``breakdown.host.t_io``; the phase timer's when the host's is not stored);
* **memory copy** ``t_h2d``: the batch's host-to-device copy (the phase timer: CUDA events on
  a GPU);
* **host work**: the exposed host time, ``max(0, T - busy) - t_io - t_h2d`` (at least 0), with
  ``busy`` the traced device busy time per iteration (union of kernels and copies): the time
  the device waits for Python, the framework and kernel launches (Dai et al.'s CPU work that is
  not overlapped; sec. 3 of their paper: a step is CPU- or GPU-bound);
* **device work by op class**: the trace's device time per op class (``op_classes``), scaled by
  ``min(1, T / busy)`` where the profiled kernels ran longer than the untraced step (the
  profiler's own cost); ``memory_copy`` here is device-side copy kernels, not ``t_h2d``;
* **graph optimisation**: in a graph mode (a mode other than the framework's registry
  ``eager_mode``), the stored compile time (``compile.compile_time_s``: tracing, lowering and
  the backend compiler), else the first step's excess over the median (``timing.first_iter_s -
  T``: compile and autotuning happen there); one-off, so its share depends on how long training
  runs: amortised over ``amortise_iters`` iterations, ``G / (G + N T)``, with the iterations
  after which it falls to the finding's 2.5% (``G (1 - s) / (s T)``). Eager modes have no graph
  to optimise (their first-step cost, CUDA context and autotuning, is not counted).

Nothing here reads a results file or imports a framework: :func:`dai_rows` takes records
(``ResultStore.records()``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

from dlperf.registry import FRAMEWORKS
from dlperf.results.schema import RunRecord
from dlperf.results.view import median_s, result_id

#: Dai et al.'s findings, as thresholds on shares of the step.
SCHEDULING_IO_COPY_MAX = 0.03
GRAPH_OPT_MAX = 0.025
#: Iterations a one-off graph optimisation is amortised over by default: about one ImageNet
#: epoch at batch 128 (1.28 M images). A choice, not a measurement: every row also gives the
#: iterations after which the share falls to :data:`GRAPH_OPT_MAX`.
AMORTISE_ITERS = 10_000

__all__ = ["SCHEDULING_IO_COPY_MAX", "GRAPH_OPT_MAX", "AMORTISE_ITERS", "DaiRow", "dai_row",
           "dai_rows", "compile_shares", "findings", "dai_markdown", "dai_json"]


@dataclass
class DaiRow:
    """One result's split of the step (times in s per iteration; shares of ``step_s``).

    ``None`` marks a part the result did not record. ``graph_opt_s`` is one-off (s per run);
    ``graph_opt_share`` is it amortised over ``amortise_iters``; ``graph_opt_iters_to_max``
    the iterations after which that share is :data:`GRAPH_OPT_MAX`.
    """

    source: str
    result_id: int | None
    model: str
    framework: str
    mode: str
    precision: str
    device: str
    batch_size: int | None
    step_s: float
    io_s: float | None
    h2d_s: float | None
    busy_s: float | None
    host_s: float | None
    dispatch_s: float | None
    device_by_class_s: dict[str, float]
    graph_mode: bool
    graph_opt_s: float | None
    graph_opt_from: str
    amortise_iters: int
    notes: list[str] = field(default_factory=list)

    def share(self, seconds: float | None) -> float | None:
        """``seconds / step_s`` (None stays None)."""
        return None if seconds is None else seconds / self.step_s

    @property
    def device_s(self) -> float | None:
        """Device work per iteration (the op classes' sum, scaled to the step), or None."""
        return math.fsum(self.device_by_class_s.values()) if self.device_by_class_s else None

    @property
    def sched_io_copy_share(self) -> float | None:
        """Host work + I/O + copy, as a share of the step (None without a traced busy time)."""
        if self.host_s is None:
            return None
        return (self.host_s + (self.io_s or 0.0) + (self.h2d_s or 0.0)) / self.step_s

    @property
    def graph_opt_share(self) -> float | None:
        """``G / (G + N T)`` (0 in an eager mode; None where a graph mode recorded nothing)."""
        if not self.graph_mode:
            return 0.0
        if self.graph_opt_s is None:
            return None
        return self.graph_opt_s / (self.graph_opt_s + self.amortise_iters * self.step_s)

    @property
    def graph_opt_iters_to_max(self) -> float | None:
        """Iterations after which the graph optimisation is :data:`GRAPH_OPT_MAX` of the time."""
        if not self.graph_mode or self.graph_opt_s is None:
            return None
        return self.graph_opt_s * (1 - GRAPH_OPT_MAX) / (GRAPH_OPT_MAX * self.step_s)

    def label(self) -> str:
        """``model framework/mode precision b=B [file]``."""
        return (f"{self.model} {self.framework}/{self.mode} {self.precision} b={self.batch_size}"
                f" [{Path(self.source).name}]")


def _med(d: Any, key: str) -> float | None:
    v = (d or {}).get(key) if isinstance(d, Mapping) else None
    v = v.get("median") if isinstance(v, Mapping) else None
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None


def _graph_mode(framework: str, mode: str) -> bool:
    info = FRAMEWORKS.get(framework)
    return info is not None and mode != info.eager_mode


def dai_row(rec: RunRecord, source: str = "",
            amortise_iters: int = AMORTISE_ITERS) -> DaiRow | None:
    """The split of one result; None when it is not an ``ok`` result with a step time and a
    breakdown or op classes.

    Raises:
        ValueError: ``amortise_iters`` < 1.
    """
    if amortise_iters < 1:
        raise ValueError(f"amortise_iters must be >= 1, got {amortise_iters}")
    step = median_s(rec)
    # the optional records this row reads; a getattr of an absent one is None
    bd = rec.breakdown if rec.breakdown is not None and rec.breakdown.available else None
    oc = rec.op_classes if rec.op_classes is not None and rec.op_classes.per_iter_s else None
    if rec.identity.status != "ok" or not step or (bd is None and oc is None):
        return None
    step = float(step)
    notes: list[str] = []
    io = _med(getattr(bd, "host", None), "t_io")
    io = _med(getattr(bd, "phases", None), "t_io") if io is None else io
    h2d = _med(getattr(bd, "phases", None), "t_h2d")
    tr = rec.trace
    busy = getattr(rec.op_classes, "busy_s", None) or (
        tr.busy_s if tr is not None and tr.available else None) or None
    classes: dict[str, float] = {}
    if oc is not None:
        raw = {k: float(v) for k, v in (oc.per_iter_s or {}).items()
               if isinstance(v, (int, float)) and v > 0}
        total = busy or math.fsum(raw.values())
        scale = min(1.0, step / total) if total else 1.0
        if scale < 1.0:
            notes.append(f"traced device time {total * 1e3:.3g} ms exceeds the untraced step "
                         f"{step * 1e3:.3g} ms (profiler cost): classes scaled by {scale:.3f}")
        classes = {k: v * scale for k, v in raw.items()}
    host = None
    if busy is not None:
        host = max(0.0, max(0.0, step - busy) - (io or 0.0) - (h2d or 0.0))
    run = rec.breakdown_run
    if run is not None and run.why:
        other = _med({"s": run.summary}, "s") if run.summary else None
        notes.append(f"traced in a second process ({run.why.rstrip('.')}"
                     + (f"; its own step {other * 1e3:.3g} ms" if other else "") + ")")
    fw, mode = str(rec.identity.framework), str(rec.identity.mode)
    graph = _graph_mode(fw, mode)
    g, g_from = None, "eager mode: no graph to optimise"
    if graph:
        comp = getattr(rec.compile, "compile_time_s", None)
        first = getattr(rec.timing, "first_iter_s", None)
        if comp:
            g, g_from = float(comp), "stored compile time"
        elif first and first > step:
            g, g_from = float(first) - step, "first-step excess (no compile time stored)"
        else:
            g_from = "not recorded"
    disp = getattr(bd, "dispatch_s", None)
    return DaiRow(source, result_id(rec), str(rec.identity.model), fw, mode,
                  str(rec.identity.precision), str(rec.identity.device),
                  rec.identity.batch_size, step, io, h2d, busy, host,
                  _med({"d": disp}, "d"), classes, graph, g, g_from, amortise_iters, notes)


def dai_rows(records: Mapping[str, Sequence[RunRecord]],
             amortise_iters: int = AMORTISE_ITERS) -> list[DaiRow]:
    """:func:`dai_row` of every record that has one, ``records`` being results file ->
    its records; in file order, then model, framework, mode, precision and batch."""
    out = []
    for src, recs in records.items():
        rows = [r for rec in recs if (r := dai_row(rec, src, amortise_iters)) is not None]
        out += sorted(rows, key=lambda r: (r.model, r.framework, r.mode, r.precision,
                                           r.batch_size or 0, r.result_id or 0))
    return out


def compile_shares(records: Mapping[str, Sequence[RunRecord]],
                   amortise_iters: int = AMORTISE_ITERS) -> list[tuple[str, float, float]]:
    """``(label, compile s, share amortised over amortise_iters)`` of every ok one-device
    graph-mode result on an accelerator with a stored compile time, traced or not (the second
    finding on more results than the traced ones)."""
    out = []
    for src, recs in records.items():
        for r in recs:
            comp = getattr(r.compile, "compile_time_s", None)
            step = median_s(r)
            i = r.identity
            if (i.status == "ok" and comp and step and (i.world_size or 1) == 1
                    and i.device != "cpu" and _graph_mode(str(i.framework), str(i.mode))):
                out.append((f"{i.model} {i.framework}/{i.mode} {i.precision} "
                            f"b={i.batch_size} [{Path(src).name}]", float(comp),
                            float(comp) / (float(comp) + amortise_iters * float(step))))
    return out


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def findings(rows: Sequence[DaiRow]) -> list[str]:
    """One line per row and finding: the numbers and true/false (n/a where not recorded)."""
    lines = []
    for r in rows:
        s = r.sched_io_copy_share
        a = ("n/a (no traced device busy time)" if s is None else
             f"{_pct(s)}% (host {_pct(r.share(r.host_s))}, I/O {_pct(r.share(r.io_s))}, copy "
             f"{_pct(r.share(r.h2d_s))}) -> {str(s < SCHEDULING_IO_COPY_MAX).lower()}")
        if not r.graph_mode:
            b = "n/a (eager mode)"
        elif r.graph_opt_share is None:
            b = "n/a (no compile time or first step recorded)"
        else:
            g = r.graph_opt_share
            b = (f"{_pct(g)}% at {r.amortise_iters} iterations ({r.graph_opt_from} "
                 f"{r.graph_opt_s:.3g} s; <= {GRAPH_OPT_MAX:.1%} after "
                 f"{r.graph_opt_iters_to_max:,.0f} iterations) -> "
                 f"{str(g <= GRAPH_OPT_MAX).lower()}")
        lines.append(f"- {r.label()}: scheduling, data loading and copies < "
                     f"{SCHEDULING_IO_COPY_MAX:.0%}: {a}; graph optimisation <= "
                     f"{GRAPH_OPT_MAX:.1%}: {b}")
    return lines


def _classes(rows: Iterable[DaiRow]) -> list[str]:
    tot: dict[str, float] = {}
    for r in rows:
        for k, v in r.device_by_class_s.items():
            tot[k] = tot.get(k, 0.0) + v / r.step_s
    return [k for k, _ in sorted(tot.items(), key=lambda kv: -kv[1])]


def dai_markdown(rows: Sequence[DaiRow],
                 compiled: Sequence[tuple[str, float, float]] = ()) -> str:
    """The table (shares of the step, %), its legend, the findings checked per row and, with
    ``compiled`` (:func:`compile_shares`), the graph-optimisation finding over every result
    with a stored compile time."""
    if not rows:
        return ("No result with a breakdown or op classes (`dlperf run --breakdown`): nothing "
                "to split.\n")
    cls = _classes(rows)
    names = {"memory_copy": "device copy"}
    head = (["model", "framework/mode", "precision", "batch", "file", "step ms", "I/O %",
             "copy (h2d) %", "host %"] + [f"{names.get(c, c)} %" for c in cls]
            + ["device %", "graph opt %", "graph opt from"])
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(
        "---" if i < 5 or i == len(head) - 1 else "---:" for i in range(len(head))) + "|"]
    for r in rows:
        cells = [r.model, f"{r.framework}/{r.mode}", r.precision, str(r.batch_size),
                 Path(r.source).name, f"{r.step_s * 1e3:.3f}", _pct(r.share(r.io_s)),
                 _pct(r.share(r.h2d_s)), _pct(r.share(r.host_s))]
        cells += [_pct(r.share(r.device_by_class_s.get(c, 0.0))) if r.device_by_class_s
                  else "–" for c in cls]
        cells += [_pct(r.share(r.device_s)), _pct(r.graph_opt_share), r.graph_opt_from]
        lines.append("| " + " | ".join(cells) + " |")
    out = "\n".join(lines) + "\n\n" + _legend(rows[0].amortise_iters) + "\n"
    notes = [f"- {r.label()}: " + "; ".join(r.notes) for r in rows if r.notes]
    if notes:
        out += "\nNotes:\n\n" + "\n".join(notes) + "\n"
    out += "\nDai et al.'s findings, per row:\n\n" + "\n".join(findings(rows)) + "\n"
    if compiled:
        sh = [c[2] for c in compiled]
        ok = sum(s <= GRAPH_OPT_MAX for s in sh)
        out += (f"\nGraph optimisation over all {len(sh)} one-device graph-mode results on an "
                "accelerator with a stored compile time in these files (traced or not), "
                f"amortised over {rows[0].amortise_iters} iterations: median {_pct(median(sh))}%, max "
                f"{_pct(max(sh))}% ({max(compiled, key=lambda c: c[2])[0]}); <= "
                f"{GRAPH_OPT_MAX:.1%} in {ok} of {len(sh)} -> {str(ok == len(sh)).lower()}\n")
    return out


def _legend(n: int) -> str:
    return (
        "Shares of the untraced step (%). *I/O*: getting the batch (host clock); *copy (h2d)*: "
        "its host-to-device copy; *host*: the host time the device does not cover, step - "
        "traced device busy - I/O - copy (Python, framework, launches: Dai et al.'s CPU work "
        "that is not overlapped); the op-class columns and *device*: traced device time per "
        "iteration (*device copy*: copy kernels on the device), scaled down where the "
        "profiled kernels outlasted the step; *graph opt*: a graph mode's one-off compile "
        f"time amortised over {n} iterations (docs/perfmodel.md, \"Dai et al.'s table\"). "
        "I/O + copy + host + device is the step up to the parts' own noise.")


def dai_json(rows: Sequence[DaiRow],
             compiled: Sequence[tuple[str, float, float]] = ()) -> dict[str, Any]:
    """JSON-ready: ``rows`` (every field, the shares and the two findings per row) and
    ``compile_shares``."""
    out = []
    for r in rows:
        d = asdict(r)
        s, g = r.sched_io_copy_share, r.graph_opt_share
        d.update(shares={"io": r.share(r.io_s), "h2d": r.share(r.h2d_s),
                         "host": r.share(r.host_s), "device": r.share(r.device_s),
                         "device_by_class": {k: v / r.step_s
                                             for k, v in r.device_by_class_s.items()},
                         "graph_opt": g},
                 graph_opt_iters_to_max=r.graph_opt_iters_to_max,
                 finding_sched_io_copy_lt_3pct=None if s is None else s < SCHEDULING_IO_COPY_MAX,
                 finding_graph_opt_le_2_5pct=(None if not r.graph_mode or g is None
                                              else g <= GRAPH_OPT_MAX))
        out.append(d)
    return {"rows": out, "amortise_iters": rows[0].amortise_iters if rows else AMORTISE_ITERS,
            "compile_shares": [{"result": c[0], "compile_s": c[1], "share": c[2]}
                               for c in compiled]}
