"""Result tables: a rich table for the terminal and the same content as GitHub Markdown.

Input rows are dicts as returned by the results store (see :mod:`dlperf.report`); missing
numeric values are ``None`` and print as an en dash. Cell conventions (shared by both outputs):

- ``median ms [CI]``: median step time in milliseconds with the bootstrap CI of the median,
  4 significant digits, e.g. ``12.35 [12.20, 12.51]``.
- ``samples/s``, ``tokens/s``: 4 significant digits; tokens/s is a dash when it is missing or 0
  (the model has no tokens).
- ``MFU``: model FLOPs utilisation against the matmul ceiling measured in the same run, percent.
- ``data wait``: median data wait / median iteration time, with ``input-bound`` when above the
  run's threshold; a dash for synthetic data (and prepared batches).
- ``J/iter``: energy per iteration from NVML (GPU runs), 4 significant digits.
- ``peak mem``: three numbers, never one (MEASUREMENT rule 7): framework-allocated peak /
  framework-reserved peak / NVML used, in one unit (GiB, or MiB when all are below 1 GiB).
  Rows without any device memory number show the process peak RSS instead (``RSS 1.20 GiB``).
- ``devices``: data-parallel replicas (``1``; ``2``; ``2x2`` for 2 nodes of 2); ``batch`` is the
  global batch, with the per-device batch in parentheses when there are several devices.
- ``status``: ``ok``; ``ok (not steady)`` when ``steady_state`` is False; for failures the
  status and the first line of the error, shortened to :data:`ERROR_MAX_CHARS` characters.

- ``model``: ends in ``#k`` for repeat k > 0 of a point (``dlperf run --repeats N``); each
  repeated run is a row of its own.

Rows are ordered by model, framework, precision, batch size, then mode, device, data, threads,
repeat and run_key so that the order is total and deterministic.
"""

from __future__ import annotations


import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rich.table import Table
from rich.text import Text

from dlperf.results.store import repeat_of, result_of

__all__ = [
    "COLUMNS",
    "ERROR_MAX_CHARS",
    "sort_rows",
    "row_cells",
    "results_table",
    "markdown_table",
    "fmt_sig",
    "fmt_bytes_triple",
    "short_error",
    "status_label",
    "is_ok",
    "repeat_of",
    "result_of",
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
    "samples/s",
    "tokens/s",
    "MFU",
    "data wait",
    "J/iter",
    "peak mem (alloc / resv / NVML)",
)

ERROR_MAX_CHARS = 60
DASH = "–"
_GIB = 1024**3
_MIB = 1024**2


def _str_key(v: Any) -> tuple[bool, str]:
    """Sort key that puts None last and compares everything else as text."""
    return (v is None, "" if v is None else str(v))


def _num_key(v: Any) -> tuple[bool, float]:
    return (v is None, 0.0 if v is None else float(v))


def sort_rows(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Rows in report order: model, framework, precision, batch, then tie-breakers (total order)."""
    return sorted(
        rows,
        key=lambda r: (
            _str_key(r.get("model")),
            _str_key(r.get("framework")),
            _str_key(r.get("precision")),
            _num_key(r.get("batch_size")),
            _num_key(r.get("world_size") or 1),
            _num_key(r.get("nnodes") or 1),
            _str_key(r.get("mode")),
            _str_key(r.get("device")),
            _str_key(r.get("data")),
            _num_key(r.get("threads")),
            repeat_of(r),
            _str_key(r.get("run_key")),
        ),
    )


def _finite(v: Any) -> bool:
    return v is not None and isinstance(v, (int, float)) and math.isfinite(v)


def fmt_sig(v: Any, sig: int = 4) -> str:
    """Format a number with ``sig`` significant digits in fixed notation (no exponent).

    ``12.3456 -> '12.35'``, ``0.0523412 -> '0.05234'``, ``123456.7 -> '123457'``; None, NaN and
    inf give a dash.
    """
    if not _finite(v):
        return DASH
    v = float(v)
    if v == 0:
        return "0"
    decimals = max(0, sig - 1 - math.floor(math.log10(abs(v))))
    out = f"{v:.{decimals}f}"
    # rounding can add a digit (9.9996 -> '10.000'); re-format with one decimal fewer
    if decimals > 0 and len(out.replace("-", "").replace(".", "").lstrip("0")) > sig:
        out = f"{v:.{decimals - 1}f}"
    return out


def _fmt_ms_ci(row: Mapping[str, Any]) -> str:
    med = row.get("step_time_median_s")
    if not _finite(med):
        return DASH
    s = fmt_sig(med * 1e3)
    lo, hi = row.get("step_time_ci_low_s"), row.get("step_time_ci_high_s")
    if _finite(lo) and _finite(hi):
        s += f" [{fmt_sig(lo * 1e3)}, {fmt_sig(hi * 1e3)}]"
    return s


def fmt_bytes_triple(row: Mapping[str, Any]) -> str:
    """``'alloc / resv / NVML UNIT'`` (rule 7); falls back to ``'RSS x UNIT'``; dash if none."""
    vals = [row.get("peak_allocated_bytes"), row.get("peak_reserved_bytes"), row.get("nvml_used_bytes")]
    if any(_finite(v) for v in vals):
        biggest = max(float(v) for v in vals if _finite(v))
        div, unit = (_GIB, "GiB") if biggest >= _GIB else (_MIB, "MiB")
        parts = [f"{float(v) / div:.2f}" if _finite(v) else DASH for v in vals]
        return " / ".join(parts) + f" {unit}"
    rss = row.get("peak_rss_bytes")
    if _finite(rss):
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


def is_ok(row: Mapping[str, Any]) -> bool:
    return row.get("status") == "ok"


def _fmt_status(row: Mapping[str, Any]) -> str:
    status = str(row.get("status") or "unknown")
    if status == "ok":
        return "ok (not steady)" if row.get("steady_state") is False else "ok"
    label = status_label(status)
    err = short_error(row.get("error"))
    return f"{label}: {err}" if err else label


def status_label(status: Any) -> str:
    """Short label of a status for tables and plots: ``'oom' -> 'OOM'``, ``'nan_loss' -> 'NaN loss'``."""
    return {"oom": "OOM", "nan_loss": "NaN loss"}.get(str(status), str(status))


def _fmt_tokens(v: Any) -> str:
    return DASH if not _finite(v) or v == 0 else fmt_sig(v)


def _text(v: Any) -> str:
    return DASH if v is None or v == "" else str(v)


def _layout(row: Mapping[str, Any]) -> str | None:
    """The image layout a PyTorch run applied (``NCHW``/``NHWC``, from the stored flags), so
    that rows differing only in layout tell apart; None for other frameworks (always NHWC)
    and for models without 4-D activations."""
    if row.get("framework") != "torch":
        return None
    flags = result_of(row).get("flags") or {}
    return flags.get("layout") if isinstance(flags, dict) else None


def compile_mode_label(row: Mapping[str, Any]) -> str | None:
    """``[reduce-overhead]`` etc. for a PyTorch graph run with a ``torch.compile`` mode other
    than the default (``--compile-mode``), so that it tells apart from the default run; None
    otherwise (and for results stored before the option existed: default)."""
    mode = (result_of(row).get("config") or {}).get("compile_mode")
    return f"[{mode}]" if mode and mode != "default" else None


def extra_measurements(row: Mapping[str, Any]) -> str | None:
    """``+breakdown`` / ``+trace`` for a run measured with --breakdown / --trace (a point of
    its own: its run key says so), so that it tells apart from the plain run; else None."""
    cfg = result_of(row).get("config") or {}
    marks = [m for m, on in (("+breakdown", cfg.get("breakdown")),
                             ("+trace", cfg.get("trace_dir"))) if on]
    return " ".join(marks) or None


def batch_cell(row: Mapping[str, Any]) -> str:
    """The global batch, with ``(K accum)`` when it ran as K gradient-accumulation
    micro-batches (``--grad-accum K``)."""
    k = row.get("grad_accum")
    return _text(row.get("batch_size")) + (f" ({k} accum)" if isinstance(k, int) and k > 1
                                           else "")


def _dist_options(row: Mapping[str, Any]) -> str | None:
    """A data-parallel run's options that are not at their default (:func:`dlperf.perfmodel.scaling.
    variant_of`: ``per_device``, ``ddp(broadcast_buffers=False)``), so rows differing only in
    them tell apart; None for a one-device run or none changed."""
    if int(row.get("world_size") or 1) <= 1:
        return None
    from dlperf.perfmodel.scaling import variant_of  # pydantic only, no framework

    return variant_of(row) or None


def row_cells(row: Mapping[str, Any]) -> list[str]:
    """The formatted cells of one row, in :data:`COLUMNS` order (plain text, unescaped)."""
    fw = _text(row.get("framework"))
    if row.get("mode"):
        fw += f"/{row['mode']}"
    for extra in (_layout(row), compile_mode_label(row), _dist_options(row),
                  extra_measurements(row)):
        if extra:
            fw += f" {extra}"
    device = _text(row.get("device_name") or row.get("device"))
    if row.get("device_name") and row.get("device") and row["device"] != row["device_name"]:
        device = f"{row['device']} ({row['device_name']})"
    data = _text(row.get("data"))
    if row.get("threads") is not None:
        data += f", {row['threads']} thr"
    if row.get("loader_workers") is not None:
        data += f", {row['loader_workers']} wkr"
        kind = workers_kind(result_of(row), row.get("framework"))
        if kind:  # a JAX pipeline: Grain processes or dlperf's threads
            data += f" ({kind})"
    ok = is_ok(row)
    n, nodes = int(row.get("world_size") or 1), int(row.get("nnodes") or 1)
    devices = str(n) if nodes == 1 else f"{nodes}x{n // nodes}"
    batch = batch_cell(row)
    if n > 1 and row.get("per_device_batch") is not None:
        batch += f" ({row['per_device_batch']}/dev)"
    rep = repeat_of(row)
    return [
        _text(row.get("model")) + (f" #{rep}" if rep else ""),
        fw,
        device,
        devices,
        _text(row.get("precision")),
        batch,
        data,
        _fmt_status(row),
        _fmt_ms_ci(row) if ok else DASH,
        fmt_sig(row.get("samples_per_s")) if ok else DASH,
        _fmt_tokens(row.get("tokens_per_s")) if ok else DASH,
        _fmt_pct(row.get("mfu")) if ok else DASH,
        fmt_data_wait(row) if ok else DASH,
        fmt_sig(row.get("energy_per_iter_j")) if ok else DASH,
        fmt_bytes_triple(row),
    ]


def _fmt_pct(v: Any) -> str:
    return DASH if not _finite(v) else f"{100 * float(v):.1f}%"


def fmt_data_wait(row: Mapping[str, Any]) -> str:
    """``'12.3% input-bound'`` / ``'0.4%'`` (median data wait / median iteration), dash for
    synthetic data or results without a pipeline."""
    share = row.get("data_wait_share")
    if not _finite(share):
        return DASH
    return _fmt_pct(share) + (" input-bound" if row.get("input_bound") else "")


def results_table(rows: Sequence[Mapping[str, Any]], *, title: str | None = "dlperf results") -> Table:
    """A :class:`rich.table.Table` of ``rows`` (columns :data:`COLUMNS`), failed rows in red.

    Cells are :class:`rich.text.Text`, so brackets in error messages are never read as markup.
    """
    table = Table(title=title, show_lines=False)
    numeric = {"devices", "batch", "median ms [CI]", "samples/s", "tokens/s", "MFU", "J/iter"}
    for col in COLUMNS:
        table.add_column(col, justify="right" if col in numeric else "left", overflow="fold")
    for row in sort_rows(rows):
        style = "" if is_ok(row) else "red"
        table.add_row(*(Text(c, style=style) for c in row_cells(row)))
    return table


def _md_escape(s: str) -> str:
    """Escape text for a GFM table cell: backslashes, pipes, HTML angle brackets, newlines."""
    s = s.replace("\\", "\\\\").replace("|", "\\|")
    s = s.replace("<", "&lt;").replace(">", "&gt;")
    return s.replace("\r", " ").replace("\n", " ")


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The same table as GitHub-flavoured Markdown: header, alignment row, one line per row.

    Returns the table text ending in a newline (just the header when ``rows`` is empty).
    """
    numeric = {"devices", "batch", "median ms [CI]", "samples/s", "tokens/s", "MFU", "J/iter"}
    lines = [
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join("---:" if c in numeric else "---" for c in COLUMNS) + "|",
    ]
    for row in sort_rows(rows):
        lines.append("| " + " | ".join(_md_escape(c) for c in row_cells(row)) + " |")
    return "\n".join(lines) + "\n"


def workers_kind(res: dict[str, Any], framework: Any) -> str | None:
    """``processes`` or ``threads`` for a JAX pipeline with workers (results stored before
    ``workers_kind`` existed ran dlperf's HostPipeline threads), else None."""
    pipe = (res.get("data_info") or {}).get("pipeline")
    if not isinstance(pipe, dict) or framework != "jax":
        return None
    if pipe.get("workers_kind"):
        return str(pipe["workers_kind"])
    if str(pipe.get("impl", "")).startswith("dlperf HostPipeline") and pipe.get("num_workers"):
        return "threads"
    return None
