"""Result tables: a rich table for the terminal and the same content as GitHub Markdown.

Input results are records (``ResultStore.records``, or store rows read once by
:func:`dlperf.results.view.as_records`); missing numeric values print as an
en dash. Cell conventions (shared by both outputs):

- ``median ms [CI]``: median step time in milliseconds with the bootstrap CI of the median,
  4 significant digits, e.g. ``12.35 [12.20, 12.51]``.
- ``samples/s (mean)``, ``tokens/s (mean)``: 4 significant digits; tokens/s is a dash when it
  is missing or 0 (the model has no tokens). DLBench's throughput: measured iterations x global
  batch / the sum of the measured iteration times, i.e. global batch / the *mean* iteration
  time (docs/measurement.md), so with a long tail it sits below global batch / the median
  beside it; the header says so.
- ``MFU (mean)``: model FLOPs utilisation against the matmul ceiling measured in the same run,
  percent, from the same mean-based throughput.
- ``data wait``: median data wait / median iteration time, with ``input-bound`` when above the
  run's threshold; a dash for synthetic data (and prepared batches).
- ``J/iter``: energy per iteration from NVML (GPU runs), 4 significant digits.
- ``peak mem``: three numbers, never one (MEASUREMENT rule 7): framework-allocated peak /
  framework-reserved peak / NVML used, in one unit (GiB, or MiB when all are below 1 GiB).
  Rows without any device memory number show the process peak RSS instead (``RSS 1.20 GiB``).
- ``devices``: data-parallel replicas (``1``; ``2``; ``2x2`` for 2 nodes of 2); ``batch`` is the
  global batch, with the per-device batch and the scaling (``strong``: ``--batch-size`` was
  the global batch; ``weak``: the per-device batch) in parentheses when there are several
  devices.
- ``status``: ``ok``; ``ok (not steady)`` when ``steady_state`` is False; for failures the
  status and the first line of the error, shortened to :data:`ERROR_MAX_CHARS` characters;
  ``⚠ N`` after it when the result carries N quality warnings (a wide CI, a busy host, ...:
  :func:`dlperf.measure.warnings.quality_warnings`), which :func:`warning_lines` lists under
  the table, so a result to read with care never shows as a plain ``ok``.
- ``tag``, ``measured (UTC)``, ``commit`` (:data:`HISTORY_COLUMNS`, with ``history=True``:
  ``dlperf results --all`` and its ``--tag/--sha/--since``): the run's tag, when it was
  measured and the git commit it was measured at (10 hex digits, ``+dirty`` for a working tree
  with changes), so runs of one point at several revisions can be told apart.

- ``model``: ends in ``#k`` for repeat k > 0 of a point (``dlperf run --repeats N``); each
  repeated run is a row of its own.

Rows are ordered by model, framework, precision, batch size, then mode, device, data, threads,
repeat and run_key so that the order is total and deterministic.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from rich.table import Table
from rich.text import Text

from dlperf.report.cells import BATCH_CELL_KEYS, DASH, batch_cell, finite, fmt_sig, md_escape
from dlperf.results.history import sha_of, tag_of
from dlperf.results.schema import RunRecord
from dlperf.results.view import (
    applied_layout,
    ci_s,
    compile_mode_label,
    dist_options,
    extra_measurements,
    field,
    fields,
    is_ok,
    label_of_record,
    median_s,
    optimizer_label,
    repeat_in,
    samples_per_s,
    scaling_of,
    workers_kind,
    world_of,
)

__all__ = [
    "COLUMNS",
    "HISTORY_COLUMNS",
    "history_cells",
    "ERROR_MAX_CHARS",
    "sort_rows",
    "row_cells",
    "results_table",
    "markdown_table",
    "warning_lines",
    "framework_cell",
    "fmt_sig",
    "fmt_bytes_triple",
    "fmt_data_wait",
    "short_error",
    "status_label",
]

COLUMNS: tuple[str, ...] = (
    "model",
    "framework/mode",
    "device",
    "devices",
    "precision",
    "batch",
    "data",
    "status",
    "median ms [CI]",
    "samples/s (mean)",
    "tokens/s (mean)",
    "MFU (mean)",
    "data wait",
    "J/iter",
    "peak mem (alloc / resv / NVML)",
)

#: The columns ``history=True`` adds (:func:`results_table`): what tells runs of one point
#: at several revisions apart.
HISTORY_COLUMNS: tuple[str, ...] = ("tag", "measured (UTC)", "commit")

ERROR_MAX_CHARS = 60
#: Warned results :func:`warning_lines` lists by default (the rest are counted).
WARNING_LINES = 12
_GIB = 1024**3
_MIB = 1024**2
_NUMERIC = {"devices", "batch", "median ms [CI]", "samples/s (mean)", "tokens/s (mean)",
            "MFU (mean)", "J/iter"}


def _str_key(v: Any) -> tuple[bool, str]:
    """Sort key that puts None last and compares everything else as text."""
    return (v is None, "" if v is None else str(v))


def _num_key(v: Any) -> tuple[bool, float]:
    return (v is None, 0.0 if v is None else float(v))


def _sort_key(rec: RunRecord) -> tuple:
    i = rec.identity
    return (_str_key(i.model), _str_key(i.framework), _str_key(i.precision),
            _num_key(i.batch_size), _num_key(i.world_size or 1), _num_key(i.nnodes or 1),
            _str_key(i.mode), _str_key(i.device), _str_key(i.data), _num_key(i.threads),
            repeat_in(rec), _str_key(i.run_key))


def sort_rows(rows: Iterable[RunRecord]) -> list[RunRecord]:
    """Records in report order: model, framework, precision, batch,
    then tie-breakers (total order)."""
    return sorted(rows, key=_sort_key)


def _fmt_ms_ci(rec: RunRecord) -> str:
    med = median_s(rec)
    if not finite(med):
        return DASH
    s = fmt_sig(med * 1e3)
    lo, hi = ci_s(rec)
    if finite(lo) and finite(hi):
        s += f" [{fmt_sig(lo * 1e3)}, {fmt_sig(hi * 1e3)}]"
    return s


def fmt_bytes_triple(r: RunRecord) -> str:
    """``'alloc / resv / NVML UNIT'`` (rule 7); falls back to ``'RSS x UNIT'``; dash if none."""
    mem = r.memory
    if mem is None:
        return DASH
    vals = [mem.peak_allocated_bytes, mem.peak_reserved_bytes, mem.nvml_used_bytes]
    if any(finite(v) for v in vals):
        biggest = max(float(v) for v in vals if finite(v))
        div, unit = (_GIB, "GiB") if biggest >= _GIB else (_MIB, "MiB")
        parts = [f"{float(v) / div:.2f}" if finite(v) else DASH for v in vals]
        return " / ".join(parts) + f" {unit}"
    rss = mem.peak_rss_bytes
    if finite(rss):
        div, unit = (_GIB, "GiB") if float(rss) >= _GIB else (_MIB, "MiB")
        return f"RSS {float(rss) / div:.2f} {unit}"
    return DASH


def short_error(error: Any, max_chars: int = ERROR_MAX_CHARS) -> str:
    """First non-empty line of ``error``, whitespace collapsed, cut to ``max_chars`` with '…'."""
    if not error:
        return ""
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    text = re.sub(r"\s+", " ", lines[0]) if lines else ""
    if len(text) > max_chars:
        text = text[: max_chars - 1].rstrip() + "…"
    return text


def _fmt_status(rec: RunRecord) -> str:
    status = str(rec.identity.status or "unknown")
    if status == "ok":
        steady = rec.timing.steady_state if rec.timing is not None else None
        if steady is None and rec.timing is not None and rec.timing.warmup_iters == 0:
            text = "ok (no warm-up)"
        else:
            text = "ok (not steady)" if steady is False else "ok"
        n = len(rec.warnings or [])
        return text + (f" ⚠ {n}" if n else "")
    label = status_label(status)
    err = short_error(rec.identity.error)
    return f"{label}: {err}" if err else label


def status_label(status: Any) -> str:
    """Short label of a status for tables and plots: ``'oom' -> 'OOM'``, ``'nan_loss' -> 'NaN loss'``."""
    return {"oom": "OOM", "nan_loss": "NaN loss"}.get(str(status), str(status))


def _fmt_tokens(v: Any) -> str:
    return DASH if not finite(v) or v == 0 else fmt_sig(v)


def _text(v: Any) -> str:
    return DASH if v is None or v == "" else str(v)


def framework_cell(rec: RunRecord) -> str:
    """The ``framework/mode`` cell: framework/mode, then the applied image layout, the compile
    mode, the optimizer, the data-parallel options and the extra measurements where a run has
    them (``torch/eager NHWC [max-autotune] +breakdown``)."""
    fw = _text(rec.identity.framework)
    if rec.identity.mode:
        fw += f"/{rec.identity.mode}"
    for extra in (applied_layout(rec), compile_mode_label(rec), optimizer_label(rec),
                  dist_options(rec), extra_measurements(rec)):
        if extra:
            fw += f" {extra}"
    return fw


def _data_cell(rec: RunRecord) -> str:
    i = rec.identity
    data = _text(i.data)
    if i.threads is not None:
        data += f", {i.threads} thr"
    lw = field(rec, "loader_workers")
    if lw is not None:
        data += f", {lw} wkr"
        kind = workers_kind(rec)
        if kind:  # several kinds of workers (JAX: Grain processes or dlperf's threads)
            data += f" ({kind})"
    return data


def history_cells(rec: RunRecord) -> list[str]:
    """The cells of :data:`HISTORY_COLUMNS` of one result: its tag, ``created_at`` to the
    second (UTC) and its commit (10 hex digits, ``+dirty`` when the tree had changes)."""
    created = str(rec.identity.created_at or "")
    when = created[:19].replace("T", " ") if created else DASH
    sha = sha_of(rec)
    git = (rec.env.git if rec.env is not None else None) or {}
    dirty = isinstance(git, dict) and bool(git.get("dirty"))
    commit = sha[:10] + ("+dirty" if dirty else "") if sha else DASH
    return [tag_of(rec) or DASH, when, commit]


def row_cells(rec: RunRecord) -> list[str]:
    """The formatted cells of one result, in :data:`COLUMNS` order (plain text, unescaped)."""
    i = rec.identity
    device = _text(rec.device_name or i.device)
    if rec.device_name and i.device and i.device != rec.device_name:
        device = f"{i.device} ({rec.device_name})"
    ok = is_ok(rec)
    n, nodes = world_of(rec), int(i.nnodes or 1)
    devices = str(n) if nodes == 1 else f"{nodes}x{n // nodes}"
    batch = batch_cell(fields(rec, BATCH_CELL_KEYS))
    if n > 1 and i.per_device_batch is not None:
        batch += f" ({i.per_device_batch}/dev, {scaling_of(rec)})"
    rep = repeat_in(rec)
    tp, mfu, power = rec.throughput, rec.mfu, rec.power
    return [
        _text(i.model) + (f" #{rep}" if rep else ""),
        framework_cell(rec),
        device,
        devices,
        _text(i.precision),
        batch,
        _data_cell(rec),
        _fmt_status(rec),
        _fmt_ms_ci(rec) if ok else DASH,
        fmt_sig(samples_per_s(rec)) if ok else DASH,
        _fmt_tokens(tp.tokens_per_s if tp is not None else None) if ok else DASH,
        _fmt_pct(mfu.mfu if mfu is not None else None) if ok else DASH,
        fmt_data_wait(rec) if ok else DASH,
        fmt_sig(power.energy_per_iter_j if power is not None else None) if ok else DASH,
        fmt_bytes_triple(rec),
    ]


def _fmt_pct(v: Any) -> str:
    return DASH if not finite(v) else f"{100 * float(v):.1f}%"


def fmt_data_wait(r: RunRecord) -> str:
    """``'12.3% input-bound'`` / ``'0.4%'`` (the share of the measured time spent waiting for
    data), dash for synthetic data or results without a pipeline."""
    dw = r.data_wait
    if dw is None or not finite(dw.share):
        return DASH
    return _fmt_pct(dw.share) + (" input-bound" if dw.input_bound else "")


def results_table(rows: Sequence[RunRecord], *,
                  title: str | None = "dlperf results", history: bool = False) -> Table:
    """A :class:`rich.table.Table` of ``rows`` (columns :data:`COLUMNS`, and with ``history``
    :data:`HISTORY_COLUMNS`), failed rows in red, rows with warnings in amber.

    Cells are :class:`rich.text.Text`, so brackets in error messages are never read as markup.
    """
    table = Table(title=title, show_lines=False)
    for col in COLUMNS + (HISTORY_COLUMNS if history else ()):
        table.add_column(col, justify="right" if col in _NUMERIC else "left", overflow="fold")
    for rec in sort_rows(rows):
        style = "red" if not is_ok(rec) else ("yellow" if rec.warnings else "")
        cells = row_cells(rec) + (history_cells(rec) if history else [])
        table.add_row(*(Text(c, style=style) for c in cells))
    return table


def warning_lines(rows: Sequence[RunRecord],
                  limit: int | None = WARNING_LINES) -> list[str]:
    """One line per result with quality warnings, in table order: ``⚠ LABEL: the first
    warning (+k more)`` (LABEL: :func:`dlperf.results.view.label_of_record`); past ``limit``
    results, one line counting the rest (None: every one). Empty when no result has a
    warning."""
    warned = [r for r in sort_rows(rows) if r.warnings]
    out = []
    for rec in warned[:limit] if limit is not None else warned:
        warnings = rec.warnings or []  # not empty: `warned` holds records with warnings
        more = len(warnings) - 1
        out.append(f"⚠ {label_of_record(rec)}: {warnings[0]}"
                   + (f" (+{more} more)" if more else ""))
    if limit is not None and len(warned) > limit:
        out.append(f"... and {len(warned) - limit} more results with warnings (every warning: "
                   "the report's 'Warnings' section, or --format json)")
    return out


def markdown_table(rows: Sequence[RunRecord]) -> str:
    """The same table as GitHub-flavoured Markdown: header, alignment row, one line per row.

    Returns the table text ending in a newline (just the header when ``rows`` is empty).
    """
    lines = [
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join("---:" if c in _NUMERIC else "---" for c in COLUMNS) + "|",
    ]
    for rec in sort_rows(rows):
        lines.append("| " + " | ".join(md_escape(c) for c in row_cells(rec)) + " |")
    return "\n".join(lines) + "\n"
