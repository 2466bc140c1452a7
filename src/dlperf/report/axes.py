"""Comparisons along one axis of a point: the same point at two precisions, in two modes of a
framework, or in two frameworks, each pair with the interval machinery of ``dlperf compare``
(:func:`dlperf.report.regress.compare_point`).

A *point* is every run of one configuration (repeats and re-runs: the records sharing
:func:`dlperf.report.regress.point_key_of`). Two points are a *pair along an axis* when their
settings are the same except the axis' fields (:data:`AXES`): their :func:`free_key` is equal.
The interval of a pair comes from :func:`~dlperf.report.regress.compare_point`:

- both sides have >= 2 ok runs: the ratio of the geometric means of the run medians with
  Welch's t interval on their logs (run-to-run variation included);
- a side has one run: the ratio of the medians of all measured iterations with the two-sample
  percentile bootstrap (iteration noise only), and the pair says so (``ci_from``).

The speed-up of OTHER over BASE is ``step time(BASE) / step time(OTHER)``, the reciprocal of
``compare_point``'s ratio NEW/BASE; its interval is the reciprocal interval (exact for both
methods: the log-scale t interval is symmetric, and the percentile bootstrap's quantiles map
through the monotone reciprocal). Above 1, OTHER is faster.

Nothing here imports a framework; framework facts (eager modes, registry order) come from
:mod:`dlperf.registry`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from dlperf.registry import FRAMEWORKS, framework_info
from dlperf.report.cells import (
    ENV_MARK,
    batch_cell,
    data_cell,
    device_cell,
    env_footnote,
    md_escape,
)
from dlperf.report.regress import PointComparison, compare_point, point_key_of
from dlperf.results.schema import RunRecord
from dlperf.results.view import config_of, label_of_record, setting

__all__ = ["AXES", "Axis", "AxisPair", "free_key", "points_of", "axis_pairs",
           "precision_speedups", "precision_markdown", "BASE_PRECISION"]

#: The precision every other precision is compared against (``--compare precision``).
BASE_PRECISION = "fp32"
#: Settings of a stored config that say how long, from where or how a result is labelled, not
#: which point it measured (as :data:`dlperf.config.identity.KEY_EXCLUDED`; ``breakdown`` and
#: the trace are part of the point, ``repeat`` is what tells runs of a point apart).
_NOT_THE_POINT = frozenset({"data_dir", "timeout_s", "iterations", "input_bound_share",
                            "measure_ceilings", "power_interval_s", "target_loss",
                            "comm_profile_iters", "repeat"})
#: Identity fields that define a point (they override the config's: ``mode`` "" there is the
#: framework's default, resolved in the identity).
_IDENTITY_FIELDS = ("model", "framework", "mode", "device", "precision", "batch_size", "data",
                    "threads", "world_size", "grad_accum", "nnodes")


def free_key(rec: RunRecord, free: Iterable[str]) -> str:
    """The settings of ``rec``'s point without the fields ``free`` (JSON text): two points with
    the same key differ only in ``free``. Read from the stored config (less
    :data:`_NOT_THE_POINT`) and the identity; a trace counts as on or off, not its folder."""
    ident = rec.identity
    cfg = config_of(rec)
    d: dict[str, Any] = {k: v for k, v in cfg.items() if k not in _NOT_THE_POINT}
    d.update({k: getattr(ident, k) for k in _IDENTITY_FIELDS})
    d["world_size"] = d["world_size"] or 1
    d["grad_accum"] = d["grad_accum"] or 1
    d["nnodes"] = d["nnodes"] or 1
    d["trace_dir"] = bool(cfg.get("trace_dir"))
    if d["world_size"] == 1:  # as the run key: the data-parallel settings of one process
        for k in ("nproc", "dp_layout", "ddp", "scaling"):  # change nothing measured
            d.pop(k, None)
    if d.get("loader_workers") is None:
        d.pop("loader_prefetch", None)
    d.setdefault("layout", "auto")
    d.setdefault("compile_mode", "default")
    d.setdefault("optimizer_impl", "auto")  # results stored before --optimizer-impl: auto
    for k in free:
        d.pop(k, None)
    return json.dumps(d, sort_keys=True, default=str)


def points_of(records: Iterable[RunRecord]) -> list[list[RunRecord]]:
    """The records grouped by point (every run of one configuration), in first-seen order."""
    by: dict[str, list[RunRecord]] = {}
    for r in records:
        by.setdefault(point_key_of(r), []).append(r)
    return list(by.values())


def _compile_mode(rec: RunRecord) -> str:
    return str(setting(rec, "compile_mode") or "default")


def mode_label(rec: RunRecord) -> str:
    """``framework/mode``, with ``[compile mode]`` when it is not the default
    (:func:`~dlperf.results.view.label_of_record` of those settings)."""
    return label_of_record(rec, only=("framework", "mode", "compile_mode"))


def _eager_base(labels: Sequence[str], recs: dict[str, RunRecord]) -> dict[str, str]:
    """Modes: per framework, its eager mode (registry ``eager_mode``) at the default compile
    mode is the baseline of its other modes; a framework without one has no pairs."""
    eager: dict[str, str] = {}
    for lab in labels:
        r = recs[lab]
        info = framework_info(r.identity.framework)
        if (info is not None and info.eager_mode and r.identity.mode == info.eager_mode
                and _compile_mode(r) == "default"):
            eager[str(r.identity.framework)] = lab
    return {lab: eager[fw] for lab in labels
            if (fw := str(recs[lab].identity.framework)) in eager and eager[fw] != lab}


def _framework_base(labels: Sequence[str], recs: dict[str, RunRecord]) -> dict[str, str]:
    """Frameworks: the first framework of the registry's order among the labels, in its eager
    mode (else its first registered mode, else the first mode seen) at the default compile
    mode, is the baseline of every other framework's modes."""
    order = {name: i for i, name in enumerate(FRAMEWORKS)}
    fws = sorted({str(recs[lab].identity.framework) for lab in labels},
                 key=lambda f: (order.get(f, len(order)), f))
    if len(fws) < 2:
        return {}
    first = fws[0]
    info = framework_info(first)
    prefer = [m for m in ((info.eager_mode if info else None),
                          *(info.modes if info else ())) if m]
    mine = [lab for lab in labels if str(recs[lab].identity.framework) == first
            and _compile_mode(recs[lab]) == "default"]
    if not mine:
        return {}
    def rank(lab: str) -> tuple[int, str]:
        mode = str(recs[lab].identity.mode)
        return (prefer.index(mode) if mode in prefer else len(prefer), lab)

    mine.sort(key=rank)
    base = mine[0]
    return {lab: base for lab in labels if str(recs[lab].identity.framework) != first}


def _precision_base(labels: Sequence[str], recs: dict[str, RunRecord]) -> dict[str, str]:
    """Precisions: :data:`BASE_PRECISION` is the baseline of every other precision."""
    if BASE_PRECISION not in labels:
        return {}
    return {lab: BASE_PRECISION for lab in labels if lab != BASE_PRECISION}


@dataclass(frozen=True)
class Axis:
    """One axis along which points are compared.

    Attributes:
        name: ``precision``, ``modes`` or ``frameworks`` (the ``--compare`` names).
        free: the setting fields that differ along the axis (:func:`free_key`).
        side: a record -> the label of its side (``bf16``, ``torch/graph``).
        bases: (labels of one group, a record per label) -> ``{other label: baseline label}``.
    """

    name: str
    free: tuple[str, ...]
    side: Callable[[RunRecord], str]
    bases: Callable[[Sequence[str], dict[str, RunRecord]], dict[str, str]]


#: The axes, in the order of the relative summary.
AXES: dict[str, Axis] = {
    "modes": Axis("modes", ("mode", "compile_mode"), mode_label, _eager_base),
    # each framework's own engine settings (its default data-parallel layout, DDP's options)
    # are part of what is compared
    "frameworks": Axis("frameworks", ("framework", "mode", "compile_mode", "loader_impl",
                                      "dp_layout", "ddp"), mode_label, _framework_base),
    "precision": Axis("precision", ("precision",), lambda r: str(r.identity.precision),
                      _precision_base),
}


@dataclass
class AxisPair:
    """Two points that differ only along ``axis``: the ``base`` and ``other`` side labels, a
    record of each side (``base_rec``, ``other_rec``: their settings), and the comparison
    (:func:`~dlperf.report.regress.compare_point` with BASE = ``base``)."""

    axis: str
    base: str
    other: str
    base_rec: RunRecord
    other_rec: RunRecord
    comparison: PointComparison

    @property
    def speedup(self) -> float | None:
        """step time(base) / step time(other); None when a side did not measure."""
        r = self.comparison.ratio
        return 1.0 / r if r else None

    @property
    def ci(self) -> tuple[float, float] | None:
        """The speed-up's interval (the reciprocal of the comparison's), or None."""
        ci = self.comparison.ci
        return (1.0 / ci[1], 1.0 / ci[0]) if ci else None

    @property
    def ci_from(self) -> str | None:
        """``runs`` or ``iterations`` (:class:`~dlperf.report.regress.PointComparison`)."""
        return self.comparison.ci_from


def axis_pairs(records: Iterable[RunRecord], axis: Axis, level: float = 0.95
               ) -> list[AxisPair]:
    """Every pair of points along ``axis`` among ``records`` (every run of a point is used),
    compared (module docstring); pairs where a side never measured are left out. Ordered by
    model, other side, batch and the rest of the settings."""
    groups: dict[str, dict[str, list[RunRecord]]] = {}
    for runs in points_of(records):
        rec = runs[0]
        groups.setdefault(free_key(rec, axis.free), {}).setdefault(axis.side(rec), []).extend(runs)
    out = []
    for key, sides in groups.items():
        if len(sides) < 2:
            continue
        reps = {lab: runs[0] for lab, runs in sides.items()}
        for other, base in axis.bases(list(sides), reps).items():
            pc = compare_point(key, sides[base], sides[other], level=level)
            if pc.outcome != "compared":
                continue
            pc.notes = [n for n in pc.notes if not n.startswith("settings differ: ")
                        or n.split(": ")[1] not in axis.free]
            out.append(AxisPair(axis.name, base, other, reps[base], reps[other], pc))
    return sorted(out, key=lambda p: (str(p.base_rec.identity.model), p.other, p.base,
                                      p.base_rec.identity.batch_size or 0,
                                      free_key(p.base_rec, ())))


def _env_notes(pair: AxisPair) -> list[str]:
    return [n.removeprefix("environment differs: ") for n in pair.comparison.notes
            if n.startswith("environment differs: ")]


def precision_speedups(records: Iterable[RunRecord], level: float = 0.95
                       ) -> list[dict[str, Any]]:
    """``--compare precision``: every other precision (bf16, tf32) against
    :data:`BASE_PRECISION` at the same point (model, framework/mode, device, batch, data,
    threads, ...), all runs of each side used.

    Args:
        records: results with their samples (``ResultStore.records``).
        level: the intervals' confidence level.

    Returns:
        One dict per pair: ``model``, ``framework``, ``mode``, ``label`` (framework/mode),
        ``device``, ``world_size``, ``batch_size``, ``grad_accum``, ``data``,
        ``loader_workers``, ``threads``, ``baseline`` (fp32), ``other``, ``speedup`` (step time
        at fp32 / at the other precision; above 1 the other is faster), ``ci_low``,
        ``ci_high`` (None without an interval), ``ci_from`` (``runs``, ``iterations`` or None),
        ``runs`` ([fp32 runs, other runs] used), ``base_step_ms``, ``other_step_ms``,
        ``env_differs`` (environment differences) and ``notes``.
    """
    out = []
    for p in axis_pairs(records, AXES["precision"], level):
        i, pc = p.base_rec.identity, p.comparison
        ci = p.ci
        out.append({"model": i.model, "framework": i.framework, "mode": i.mode,
                    "label": mode_label(p.base_rec), "device": i.device,
                    "world_size": i.world_size or 1, "batch_size": i.batch_size,
                    "grad_accum": i.grad_accum, "data": i.data,
                    "loader_workers": setting(p.base_rec, "loader_workers"),
                    "threads": i.threads,
                    "baseline": p.base, "other": p.other, "speedup": p.speedup,
                    "ci_low": ci[0] if ci else None, "ci_high": ci[1] if ci else None,
                    "ci_from": p.ci_from,
                    "runs": [len(pc.base), len(pc.new)],
                    "base_step_ms": (pc.base_step_s or 0.0) * 1e3,
                    "other_step_ms": (pc.new_step_s or 0.0) * 1e3,
                    "env_differs": _env_notes(p), "notes": pc.notes})
    return out


#: Why ``--compare precision`` found no pair.
NO_PRECISION_PAIRS = (
    "No comparable pairs of results: --compare precision puts every other precision (bf16, "
    "tf32) against fp32 at the same point (model, framework/mode, device, batch, data, "
    "threads). Measure both there, e.g. dlperf run -m resnet50 --precision fp32,bf16 "
    "(--repeats 3 for an interval from runs).\n")


def _ci_from_cell(c: dict[str, Any]) -> str:
    nb, nn = c["runs"]
    if c["ci_from"] == "runs":
        return f"runs ({nb} vs {nn})"
    if c["ci_from"] == "iterations":
        return f"iterations* ({nb} vs {nn} run{'s' if max(nb, nn) > 1 else ''})"
    return "no interval"


def precision_markdown(comps: Sequence[dict[str, Any]]) -> str:
    """A Markdown table of :func:`precision_speedups` with its legend; with none, why."""
    if not comps:
        return NO_PRECISION_PAIRS
    lines = ["| model | framework/mode | device | batch | data | threads | precision | "
             "ms per iteration | speed-up over fp32 [95% CI] | interval from |",
             "|---|---|---|---:|---|---:|---|---:|---:|---|"]
    for c in comps:
        sp = f"{c['speedup']:.3f}" + (f" [{c['ci_low']:.3f}, {c['ci_high']:.3f}]"
                                      if c["ci_low"] is not None else "")
        lines.append(f"| {md_escape(str(c['model']))} | {c['label']} | {device_cell(c)} | {batch_cell(c)} | "
                     f"{data_cell(c)} | {c['threads'] or '-'} | {c['other']} vs "
                     f"{c['baseline']} | {c['other_step_ms']:.4g} vs {c['base_step_ms']:.4g} | "
                     f"{sp}{ENV_MARK if c['env_differs'] else ''} | {_ci_from_cell(c)} |")
    lines += ["", "*speed-up* = step time at fp32 / at the other precision: above 1 the other "
              "is faster. *runs*: both sides have two or more runs; the ratio of the geometric "
              "means of their run medians with Welch's t interval on the logs (as `dlperf "
              "compare`), which includes run-to-run variation."]
    if any(c["ci_from"] == "iterations" for c in comps):
        lines.append("\n\\* *iterations*: a side has one run, so the interval is a bootstrap "
                     "over the measured iterations of the runs; it leaves out the variation "
                     "between processes. Measure with --repeats 3 for an interval from runs.")
    return "\n".join(lines) + "\n" + env_footnote(
        ((f"{c['model']} {c['label']} b={c['batch_size']}: {c['other']} vs {c['baseline']}",
          c["env_differs"]) for c in comps), compared="precisions")
