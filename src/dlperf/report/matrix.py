"""The framework/mode matrix: one row per point, one column per framework/mode (and whatever
else sets a run apart), the newest run's median and the range of every run
(``dlperf results --compare matrix``, the report's "Frameworks and modes side by side")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
from dlperf.results.schema import RunRecord
from dlperf.results.view import (
    POINT_KEYS,
    compile_mode_label,
    dist_options,
    env_of,
    extra_measurements,
    field,
    framework_mode,
    is_ok,
    layout_setting,
    median_s,
    optimizer_impl_label,
    point_of,
    result_id,
    setting,
    workers_kind,
)

__all__ = ["matrix_column", "framework_matrix", "matrix_flat", "matrix_markdown"]


def _column_order(col: str) -> tuple:
    """Columns by framework in the registry's order, then by its modes' order (an unknown
    framework or mode after the known ones), then the rest of the column's name."""
    fw, _, rest = col.partition("/")
    mode = rest.split(" ")[0]
    order = list(FRAMEWORKS)
    info = framework_info(fw)
    modes = list(info.modes) if info is not None else []
    return (order.index(fw) if fw in order else len(order), fw,
            modes.index(mode) if mode in modes else len(modes), rest)


def matrix_column(rec: RunRecord) -> str:
    """The column of a result in :func:`framework_matrix`: ``framework/mode`` and whatever
    else makes it a different measurement of the same point: a compiler mode other than the
    default (`` [reduce-overhead]``), a forced layout (`` (nchw)``), the kind of loader
    workers where a framework has several (`` processes``/`` threads``), an optimizer
    implementation asked for other than ``auto`` (`` opt=fused``), data-parallel options
    not at their default (`` ddp(broadcast_buffers=False)``) and ``+breakdown``/``+trace``."""
    parts = [framework_mode(rec)]
    cm = compile_mode_label(rec)
    if cm:
        parts.append(cm)
    if layout_setting(rec) != "auto":
        parts.append(f"({layout_setting(rec)})")
    for extra in (workers_kind(rec) if field(rec, "loader_workers") else None,
                  optimizer_impl_label(rec), dist_options(rec), extra_measurements(rec)):
        if extra:
            parts.append(extra)
    return " ".join(parts)


def _forced_layout(col: str) -> bool:
    return "(nchw)" in col or "(nhwc)" in col


def _env_spread(newest: Mapping[str, RunRecord]) -> list[str]:
    """``"field: column value, column value"`` for each field of
    :func:`dlperf.env.environment_of` in which the runs ``newest`` (column -> result) differ
    (unrecorded values skipped; ``framework`` not, it differs by design; the optimizer
    implementation only among columns of one framework that asked for the same
    ``--optimizer-impl``: other columns differ in it by design, and their labels say so; host
    speeds only beyond :data:`dlperf.env.HOST_SPEED_TOLERANCE`, and not where every run names
    the same machine: the probe's spread on one machine,
    :func:`dlperf.env.environment_differences`)."""
    from dlperf.env import IDENTITY_ONLY, environment_of, host_speeds_differ

    envs = {c: environment_of(env_of(r)) for c, r in newest.items()}
    out = []
    for name in next(iter(envs.values()), {}):
        if name == "framework" or name in IDENTITY_ONLY:
            continue
        vals = {c: e[name] for c, e in envs.items() if e.get(name) is not None}
        if name == "optimizer implementation":
            out += _optimizer_spread(newest, vals)
            continue
        if len(set(vals.values())) < 2:
            continue
        if name == "host speed":
            if not host_speeds_differ(list(envs.values())):
                continue  # within tolerance, or one machine: the probe's own spread
            out.append("host speed: " + ", ".join(f"{c} {v:.1f} ns" for c, v in vals.items()))
        else:
            out.append(f"{name}: " + ", ".join(f"{c} {v}" for c, v in vals.items()))
    return out


def _optimizer_spread(newest: Mapping[str, RunRecord], ran: Mapping[str, str]) -> list[str]:
    """``"optimizer implementation: column value, ..."`` for each group of columns of one
    framework and one asked ``--optimizer-impl`` (``auto`` for results stored before it) whose
    runs ran different implementations (``ran``: column -> what ran), e.g. a result of ``auto``
    stored before issue 23 (PyTorch's ``foreach`` on CUDA) beside one of today's (``fused``)."""
    groups: dict[tuple[str, str], dict[str, str]] = {}
    for c, v in ran.items():
        rec = newest[c]
        asked = setting(rec, "optimizer_impl") or "auto"
        groups.setdefault((str(rec.identity.framework), str(asked)), {})[c] = v
    return ["optimizer implementation: " + ", ".join(f"{c} {v}" for c, v in g.items())
            for g in groups.values() if len(set(g.values())) > 1]


def _same_optimizer(newest: Mapping[str, RunRecord]) -> list[str]:
    """``"torch/eager and torch/eager opt=fused ran the same optimizer implementation
    (fused)"`` for each group of columns that differ only in the ``--optimizer-impl`` asked
    (``auto`` against the implementation it chose) and ran one implementation (recorded in
    ``flags.optimizer``): they measured the same thing twice, so their difference is run-to-run
    variation, not the implementations'."""
    from dlperf.env import environment_of

    groups: dict[tuple[str, str], list[str]] = {}
    for c, rec in newest.items():
        ran = environment_of(env_of(rec)).get("optimizer implementation")
        asked = optimizer_impl_label(rec)
        if ran is not None:
            rest = c.replace(f" {asked}", "", 1) if asked else c
            groups.setdefault((rest, str(ran)), []).append(c)
    return [f"{' and '.join(cols)} ran the same optimizer implementation ({ran})"
            for (_, ran), cols in groups.items() if len(cols) > 1]


def framework_matrix(rows: Sequence[RunRecord]) -> list[dict[str, Any]]:
    """The cross-framework table: one entry per point, one column per framework/mode.

    Args:
        rows: records, every run (``ResultStore.records(latest=False)``): a configuration measured more than once (a
            resumed sweep that measured it again, ``--repeats``, a merged file) shows its
            newest run and the range of all its runs.

    Returns:
        Per point (the :data:`POINT_KEYS`, ordered by model, device, precision, batch, data,
        threads, devices): ``columns`` (:func:`matrix_column`) -> ``{"median_s"`` (the newest
        run's median iteration time, s), ``"runs"`` (every run's median, oldest first),
        ``"steady"`` (False when the newest run did not reach steady state)``}``; ``fastest``
        (its column) and ``spread`` (slowest / fastest newest median; None with one column),
        both over the columns without a forced layout where the point has any; ``env_differs``
        (the environment fields in which the newest runs of the columns shown differ, each
        with every column's value, :func:`_env_spread`; empty: one environment as far as
        recorded); ``same_optimizer`` (columns that asked for different ``--optimizer-impl``
        but ran the same implementation, :func:`_same_optimizer`).
    """
    points: dict[tuple, dict[str, list[RunRecord]]] = {}
    for r in rows:
        if not is_ok(r) or not median_s(r):
            continue
        points.setdefault(point_of(r), {}).setdefault(matrix_column(r), []).append(r)
    out = []
    for pt, cols in points.items():
        cells, newest = {}, {}
        for col in sorted(cols, key=_column_order):
            runs = sorted(cols[col], key=lambda r: (r.identity.created_at or "",
                                                    result_id(r) or 0))
            newest[col] = runs[-1]
            steady = runs[-1].timing.steady_state if runs[-1].timing is not None else None
            cells[col] = {"median_s": median_s(runs[-1]),
                          "runs": [median_s(r) for r in runs], "steady": steady is not False}
        meds = {c: v["median_s"] for c, v in cells.items()}
        if any(not _forced_layout(c) for c in meds):  # forced layouts: side notes to `auto`
            meds = {c: m for c, m in meds.items() if not _forced_layout(c)}
        fastest = min(meds, key=lambda c: meds[c])
        diffs = _env_spread(newest)
        out.append({**dict(zip(POINT_KEYS, pt)), "columns": cells, "fastest": fastest,
                    "spread": max(meds.values()) / meds[fastest] if len(meds) > 1 else None,
                    "env_differs": diffs, "same_optimizer": _same_optimizer(newest)})
    return sorted(out, key=lambda d: (str(d["model"]), str(d["device"]), str(d["precision"]),
                                      d["batch_size"] or 0, str(d["data"]),
                                      d["loader_workers"] if d["loader_workers"] is not None
                                      else -1, d["threads"] or 0, d["world_size"] or 1))


def matrix_flat(points: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`framework_matrix` as flat rows for CSV: the point's fields, then per column
    ``<column> median_s``, ``<column> runs`` (how many) and ``<column> min_s``/``max_s`` of its
    runs, then ``fastest``, ``spread``, ``env_differs`` and ``same_optimizer`` (``; ``-joined)."""
    cols = sorted({c for p in points for c in p["columns"]}, key=_column_order)
    out = []
    for p in points:
        d = {k: p[k] for k in POINT_KEYS}
        for c in cols:
            v = p["columns"].get(c)
            d[f"{c} median_s"] = v["median_s"] if v else None
            d[f"{c} runs"] = len(v["runs"]) if v else 0
            d[f"{c} min_s"] = min(v["runs"]) if v else None
            d[f"{c} max_s"] = max(v["runs"]) if v else None
        d.update(fastest=p["fastest"], spread=p["spread"], env_differs="; ".join(p["env_differs"]),
                 same_optimizer="; ".join(p.get("same_optimizer", ())))
        out.append(d)
    return out


def _ms_range(lo: float, hi: float) -> str:
    """``a–b`` in ms with enough significant digits that a != b shows (4 to 7)."""
    for digits in range(4, 8):
        a, b = f"{lo * 1e3:.{digits}g}", f"{hi * 1e3:.{digits}g}"
        if a != b or lo == hi:
            return f"{a}–{b}"
    return f"{a}–{b}"


def matrix_markdown(points: Sequence[dict[str, Any]]) -> str:
    """:func:`framework_matrix` as a Markdown table: median ms per iteration, the fastest in
    bold, the range of a configuration's runs when it ran more than once, slowest/fastest, and
    † where the runs shown in a row ran in different environments (listed below the table)."""
    if not points:
        return "No results.\n"
    cols = sorted({c for p in points for c in p["columns"]}, key=_column_order)
    lines = ["| model | precision | batch | device | data | threads | "
             + " | ".join(cols) + " | slowest / fastest |",
             "|---|---|---:|---|---|---:|" + "---:|" * len(cols) + "---:|"]
    notes, same = [], []
    for p in points:
        same += [f"- {p['model']} {p['precision']} b={p['batch_size']}: {n}"
                 for n in p.get("same_optimizer", ())]
        cells = []
        for c in cols:
            v = p["columns"].get(c)
            if v is None:
                cells.append("–")
                continue
            s = f"{v['median_s'] * 1e3:.4g}"
            s = f"**{s}**" if c == p["fastest"] and p["spread"] is not None else s
            if len(v["runs"]) > 1:
                s += f" ({len(v['runs'])} runs: {_ms_range(min(v['runs']), max(v['runs']))})"
            if not v["steady"]:
                s += " (not steady)"
            cells.append(s)
        spread = "–" if p["spread"] is None else f"{p['spread']:.2f}x"
        mark = ENV_MARK if p["env_differs"] else ""
        lines.append(f"| {md_escape(str(p['model']))} | {p['precision']} | {batch_cell(p)} | {device_cell(p)} | "
                     f"{data_cell(p)} | {p['threads'] or '-'} | " + " | ".join(cells)
                     + f" | {spread}{mark} |")
        if p["env_differs"]:
            notes.append((f"{p['model']} {p['precision']} b={p['batch_size']}",
                          p["env_differs"]))
    lines += ["", "Median ms per iteration of the newest run of each configuration (fastest in "
              "bold); *(n runs: a–b)*: the configuration ran n times (separate processes), the "
              "range of their medians; *(not steady)*: the newest run did not reach steady "
              "state. *slowest / fastest* leaves out forced layouts (nchw, nhwc) where the point "
              "has `auto` runs."]
    if same:
        lines += ["", "Columns that asked for different optimizer implementations but ran the "
                  "same one (`auto` chose it): their difference is run-to-run variation:", *same]
    return "\n".join(lines) + "\n" + env_footnote(notes)
