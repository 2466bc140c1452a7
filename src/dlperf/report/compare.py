"""Comparisons of modes and frameworks between stored results: the graph-optimisation effect
(:func:`mode_speedups`) and framework ratios (:func:`framework_ratios`).

Both are ratios of median iteration times with a bootstrap CI computed from the raw samples
(:func:`dlperf.stats.ratio_of_medians_ci`): ``speed-up = median(baseline) / median(other)``,
so a value above 1 means the other is faster. Only results that measured the same thing are
compared: same model, device, precision, batch size, data and threads, and the same repeat
(``dlperf run --repeats N``: repeat k against repeat k, labelled ``#k``).

The other comparisons live beside this module: real against synthetic data
(:mod:`dlperf.report.datagaps`), repeated runs (:mod:`dlperf.report.repeats`), the
framework/mode matrix (:mod:`dlperf.report.matrix`), efficiency
(:mod:`dlperf.report.efficiency`) and all-reduce runs (:mod:`dlperf.report.collectives`);
their public names are importable from here too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from dlperf.env import environment_differences, environment_of
from dlperf.report.cells import (
    ENV_MARK,
    batch_cell,
    data_cell,
    device_cell,
    env_footnote,
    md_escape,
)
from dlperf.report.collectives import collectives_markdown
from dlperf.report.datagaps import DATA_POINT_KEYS, data_gaps, data_markdown
from dlperf.report.efficiency import (
    LIBRARY_BLIND_MARK,
    LIBRARY_BLIND_NOTE,
    datasheet_mfu,
    efficiency_markdown,
    library_blind_count,
)
from dlperf.report.matrix import framework_matrix, matrix_column, matrix_flat, matrix_markdown
from dlperf.report.repeats import REPEAT_POINT_KEYS, point_key_of, repeat_runs, repeats_markdown
from dlperf.results.schema import RunRecord
from dlperf.results.view import (
    POINT_KEYS,
    compile_mode_label,
    eager_mode_of,
    env_of,
    fields,
    framework_mode,
    is_ok,
    layout_setting,
    point_of,
    repeat_in,
    result_id,
)
from dlperf.stats import ratio_of_medians_ci

__all__ = ["POINT_KEYS", "NO_PAIRS", "point_of", "layout_setting", "mode_speedups",
           "framework_ratios", "markdown",
           # from the modules beside this one
           "ENV_MARK", "env_footnote", "data_cell", "device_cell", "DATA_POINT_KEYS",
           "data_gaps", "data_markdown", "LIBRARY_BLIND_MARK", "LIBRARY_BLIND_NOTE",
           "library_blind_count", "datasheet_mfu", "efficiency_markdown",
           "collectives_markdown", "REPEAT_POINT_KEYS", "point_key_of", "repeat_runs",
           "repeats_markdown", "matrix_column", "framework_matrix", "matrix_flat",
           "matrix_markdown"]

Rows = Sequence[RunRecord]


def _pairs(recs: Sequence[RunRecord], match: Callable[[RunRecord, RunRecord], bool]
           ) -> Iterator[tuple[RunRecord, RunRecord]]:
    """Pairs of ok results at one point, one repeat and one ``--layout`` setting (so a forced
    NCHW run is compared with forced NCHW, and ``auto`` with ``auto``) that ``match``."""
    ok = [r for r in recs if is_ok(r)]
    # Each record's key once (a record's settings are read from its stored config), then the
    # pairs within a key, in the order of the nested loop over ``ok`` they stand for.
    keys = [(point_of(r), repeat_in(r), layout_setting(r)) for r in ok]
    groups: dict[Any, list[RunRecord]] = {}
    for r, k in zip(ok, keys):
        groups.setdefault(k, []).append(r)
    for base, k in zip(ok, keys):
        for other in groups[k]:
            if base is not other and match(base, other):
                yield base, other


def _rep(r: RunRecord) -> str:
    """`` #k`` for repeat k > 0 of a point, `` [reduce-overhead]`` etc. for a compiler mode
    other than the default and `` (nchw)``/`` (nhwc)`` for a forced layout, else empty."""
    k, lay, cm = repeat_in(r), layout_setting(r), compile_mode_label(r)
    return (f" #{k}" if k else "") + (f" {cm}" if cm else "") + (
        "" if lay == "auto" else f" ({lay})")


def _machine(r: RunRecord) -> str:
    """The machine a result ran on: its GPUs' uuids (``GPU-5e50fffe``, as the environment
    footnote names them), else its host session (:func:`dlperf.config.identity.session_of`)."""
    from dlperf.config.identity import session_of

    gpus = environment_of(env_of(r)).get("machine")
    if gpus:
        return str(gpus)
    e = r.env
    return session_of(e.hostname if e else None, e.cpu_model if e else None,
                      e.cpu_id if e else None, r.identity.created_at)


def _compare(pairs: Iterator[tuple[RunRecord, RunRecord]],
             samples_of: Callable[[int], list[float]],
             origin: Callable[[int], str] | None = None) -> list[dict[str, Any]]:
    out = []
    for base, other in pairs:
        ib, io = result_id(base), result_id(other)  # None: not read from a store, no samples
        ratio, lo, hi = ratio_of_medians_ci(samples_of(ib) if ib is not None else [],
                                            samples_of(io) if io is not None else [])
        files = {side: Path(origin(rid)).stem if origin is not None and rid is not None
                 else None for side, rid in (("baseline", ib), ("other", io))}
        out.append({**fields(base, POINT_KEYS),
                    "baseline": f"{framework_mode(base)}{_rep(base)}",
                    "other": f"{framework_mode(other)}{_rep(other)}",
                    "baseline_file": files["baseline"], "other_file": files["other"],
                    "baseline_machine": _machine(base), "other_machine": _machine(other),
                    "speedup": ratio, "ci_low": lo, "ci_high": hi,
                    "env_differs": environment_differences(
                        env_of(base), env_of(other),
                        same_framework=base.identity.framework == other.identity.framework)})
    return sorted(out, key=lambda d: (str(d["model"]), str(d["other"]), str(d["precision"]),
                                      d["batch_size"] or 0))


def mode_speedups(rows: Rows, samples_of: Callable[[int], list[float]],
                  origin: Callable[[int], str] | None = None) -> list[dict[str, Any]]:
    """Graph-optimisation effect: each framework's other modes (graph, XLA) against its eager
    mode (its registry ``eager_mode``; a framework without one, JAX, has no such pair).

    Args:
        rows: records (``ResultStore.records``) read from a store (their ids name their samples).
        samples_of: result id -> measured per-iteration times (s).
        origin: result id -> the results file it was read from
            (:func:`dlperf.results.merge.origin_of`); None: not known.

    Returns:
        One dict per pair: the :data:`POINT_KEYS`, ``baseline`` and ``other``
        (``framework/mode`` and what else sets the run apart), ``baseline_file`` and
        ``other_file`` (the results files' names without suffix; None without ``origin``),
        ``baseline_machine`` and ``other_machine`` (:func:`_machine`), ``speedup`` with
        ``ci_low`` and ``ci_high`` (95%), ``env_differs``; sorted by model, other, precision
        and batch.
    """
    def match(b: RunRecord, o: RunRecord) -> bool:
        fw = b.identity.framework
        return (fw == o.identity.framework and eager_mode_of(fw) == b.identity.mode
                and o.identity.mode != b.identity.mode)

    return _compare(_pairs(rows, match), samples_of, origin)


def framework_ratios(rows: Rows, samples_of: Callable[[int], list[float]],
                     baseline: str = "torch/eager",
                     origin: Callable[[int], str] | None = None) -> list[dict[str, Any]]:
    """Every other framework (each of its modes) against ``baseline`` (``framework/mode``) at
    the same point; modes of the baseline's own framework are :func:`mode_speedups`' job.
    Arguments and entries as :func:`mode_speedups`'."""
    fw = baseline.split("/")[0]
    return _compare(_pairs(rows, lambda b, o: framework_mode(b) == baseline
                           and o.identity.framework != fw), samples_of, origin)


def origin_cells(comparisons: Sequence[dict[str, Any]], shown: Sequence[str]
                 ) -> list[str] | None:
    """The *from* cell of each comparison (``baseline_file``/``_machine`` and ``other_file``/
    ``_machine``, :func:`mode_speedups`), or None when no two rows read alike without it.

    ``shown``: each comparison's row as printed without it. Among the rows that read alike,
    the results files are shown where they differ between such rows, the machines where the
    files (or their absence) leave two such rows alike; ``baseline vs other``, or one name
    where both sides share it."""
    groups: dict[str, list[int]] = {}
    for i, row in enumerate(shown):
        groups.setdefault(row, []).append(i)
    alike = [g for g in groups.values() if len(g) > 1]
    if not alike:
        return None

    def files(i: int) -> tuple[Any, Any]:
        return comparisons[i].get("baseline_file"), comparisons[i].get("other_file")
    use_file = any(len({files(i) for i in g}) > 1 for g in alike)
    use_machine = any(len({files(i) if use_file else None for i in g}) < len(g) for g in alike)

    def side(c: dict[str, Any], s: str) -> str:
        parts = ([c.get(f"{s}_file")] if use_file else []) + (
            [c.get(f"{s}_machine")] if use_machine else [])
        return " ".join(str(p) for p in parts if p) or "-"
    out = []
    for c in comparisons:
        b, o = side(c, "baseline"), side(c, "other")
        out.append(b if b == o else f"{b} vs {o}")
    return out


#: Why ``--compare modes`` / ``frameworks`` found no pair, and what to run or read instead.
NO_PAIRS = {
    "modes": ("No comparable pairs of results: --compare modes puts each framework's graph/xla "
              "modes against its own eager mode (torch/eager, tensorflow/eager, mxnet/eager) at "
              "the same point (model, precision, batch, device, data, threads); JAX has one mode, "
              "xla. Measure the eager mode there too (--mode eager,graph), or read every "
              "framework/mode and --compile-mode side by side with --compare matrix.\n"),
    "frameworks": ("No comparable pairs of results: --compare frameworks puts every other "
                   "framework/mode against torch/eager at the same point (model, precision, "
                   "batch, device, data, threads). Measure torch/eager there too, or read the "
                   "times side by side with --compare matrix.\n"),
}


def markdown(comparisons: Sequence[dict[str, Any]], kind: str | None = None) -> str:
    """A Markdown table of comparisons (speed-up with its 95% CI); with none, why
    (:data:`NO_PAIRS` of ``kind``, ``modes`` or ``frameworks``)."""
    if not comparisons:
        return NO_PAIRS.get(kind or "", "No comparable pairs of results.\n")
    cells = [f"| {md_escape(str(c['model']))} | {c['precision']} | {batch_cell(c)} | "
             f"{device_cell(c)} | {data_cell(c)} | {c['threads'] or '-'} | {c['baseline']} | "
             f"{c['other']} |" for c in comparisons]
    origins = origin_cells(comparisons, cells)
    lines = ["| model | precision | batch | device | data | threads | baseline | other | "
             + ("from | " if origins else "") + "speed-up [95% CI] |",
             "|---|---|---:|---|---|---:|---|---|" + ("---|" if origins else "") + "---:|"]
    for i, c in enumerate(comparisons):
        lines.append(cells[i] + (f" {md_escape(origins[i])} |" if origins else "")
                     + f" {c['speedup']:.3f} [{c['ci_low']:.3f}, {c['ci_high']:.3f}]"
                     f"{ENV_MARK if c.get('env_differs') else ''} |")
    lines += ["", "*speed-up* = median iteration time of the baseline / of the other: above 1 "
              "the other is faster. The CI covers the variation within the two runs; separate "
              "processes vary more (run points with --repeats N and compare with "
              "--compare repeats)."]
    if origins:
        lines += ["", "*from*: where the baseline's and the other's runs come from (one name "
                  "where both share it), shown because some rows would otherwise read alike: "
                  "the results file (its name without .db) where the runs of those rows come "
                  "from several files, the machine (its GPUs' ids, or the host session) where "
                  "files alone do not tell them apart."]
    return "\n".join(lines) + "\n" + env_footnote(
        (f"{c['model']} {c['precision']} b={c['batch_size']}: {c['baseline']} vs {c['other']}",
         c.get("env_differs")) for c in comparisons)
