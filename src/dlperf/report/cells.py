"""Cell formats and table builders shared by the report's tables (no result reading here
beyond the identity fields of a cell).

Numbers print with :func:`fmt_sig` (4 significant digits, fixed notation); a missing value
prints as :data:`DASH`. Comparison cells (:func:`batch_cell`, :func:`data_cell`,
:func:`device_cell`) take a comparison dict of the report (its point fields under the store's
column names); a record's cell is that of its fields (``fields(rec, BATCH_CELL_KEYS)``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeGuard

from rich.table import Table
from rich.text import Text

__all__ = ["DASH", "ENV_MARK", "BATCH_CELL_KEYS", "fmt_sig", "fmt_opt", "finite", "md_escape",
           "batch_cell",
           "devices_cell", "data_cell", "device_cell", "env_footnote", "rich_table", "md_table"]

DASH = "–"
#: Marks a comparison whose two results ran in different environments (:func:`env_footnote`).
ENV_MARK = " †"
#: The fields :func:`batch_cell` reads.
BATCH_CELL_KEYS = ("batch_size", "grad_accum")


def finite(v: Any) -> TypeGuard[int | float]:
    """True for an int or float that is neither NaN nor infinite."""
    return v is not None and isinstance(v, (int, float)) and math.isfinite(v)


def fmt_sig(v: Any, sig: int = 4) -> str:
    """Format a number with ``sig`` significant digits in fixed notation (no exponent).

    ``12.3456 -> '12.35'``, ``0.0523412 -> '0.05234'``, ``123456.7 -> '123457'``; None, NaN and
    inf give a dash.
    """
    if not finite(v):
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


def fmt_opt(v: Any, fmt: str) -> str:
    """``format(v, fmt)``, or ``-`` for None."""
    return "-" if v is None else format(v, fmt)


def md_escape(s: str) -> str:
    """Escape text for a GFM table cell: backslashes, pipes, HTML angle brackets, newlines."""
    s = s.replace("\\", "\\\\").replace("|", "\\|")
    s = s.replace("<", "&lt;").replace(">", "&gt;")
    return s.replace("\r", " ").replace("\n", " ")


_TAG_OPEN = re.compile(r"<(?=[A-Za-z/!?])")


def md_safe_body(text: str) -> str:
    """A section's Markdown made safe from the stored text inside it, for every section at
    once (:func:`dlperf.report.markdown.write_report`, ``results --compare``): an HTML tag
    opening (``<`` before a letter, ``/``, ``!`` or ``?``; dlperf's own Markdown has no HTML)
    becomes ``&lt;``, so a model name or warning cannot add markup, as the HTML report escapes
    it; and a table row broken by a line break inside a stored text is joined back into one
    row. Pipes inside cells are escaped where the cells are made (:func:`md_escape`)."""
    text = _TAG_OPEN.sub("&lt;", text)
    out: list[str] = []
    pending: str | None = None
    for line in text.split("\n"):
        if pending is not None:
            pending = f"{pending} {line.strip()}"
            if pending.rstrip().endswith("|"):
                out.append(pending)
                pending = None
            continue
        in_table = bool(out) and out[-1].startswith("|")
        if in_table and line.startswith("|") and not line.rstrip().endswith("|"):
            pending = line.rstrip()
        else:
            out.append(line)
    if pending is not None:
        out.append(pending)
    return "\n".join(out)


def batch_cell(c: Mapping[str, Any]) -> str:
    """The global batch of a comparison (``batch_size``; a record's is
    ``fields(rec, BATCH_CELL_KEYS)``), with ``(K accum)`` when it ran as K
    gradient-accumulation micro-batches (``grad_accum``, ``--grad-accum K``)."""
    b, k = c.get("batch_size"), c.get("grad_accum")
    text = DASH if b is None or b == "" else str(b)
    return text + (f" ({k} accum)" if isinstance(k, int) and k > 1 else "")


def devices_cell(c: Mapping[str, Any]) -> str:
    """The data-parallel devices of a comparison (``world_size``; ``2x4`` for 2 nodes of 4;
    1 where it has none: before data parallelism every run had one device)."""
    n, nodes = c.get("world_size") or 1, c.get("nnodes") or 1
    return str(n) if nodes == 1 else f"{nodes}x{n // nodes}"


def data_cell(c: Mapping[str, Any]) -> str:
    """The data set of a comparison, with its loader workers when a pipeline read it."""
    w = c.get("loader_workers")
    return f"{c.get('data')}" + ("" if w is None else f", {w} wkr")


def device_cell(c: Mapping[str, Any]) -> str:
    """The device of a comparison, ``xN`` for N data-parallel devices."""
    n = c.get("world_size") or 1
    return f"{c.get('device')}" + (f" x{n}" if n > 1 else "")


def env_footnote(pairs: Iterable[tuple[str, Sequence[str] | None]],
                 compared: str = "frameworks'") -> str:
    """Markdown lines for the marked comparisons: ``(label, differences)`` pairs, from
    :func:`dlperf.env.environment_differences`; empty when none differ. A ratio across
    environments mixes the machines' difference with the one compared (``compared``: the
    ``frameworks'`` by default; ``thread counts'`` for thread scaling)."""
    marked = [(lab, diffs) for lab, diffs in pairs if diffs]
    if not marked:
        return ""
    lines = ["", f"{ENV_MARK.strip()} measured in different environments (machine, software "
             "or the optimizer implementation that ran), so the ratio mixes that difference "
             f"with the {compared}; re-measure both in one environment to compare them:"]
    lines += [f"- {lab}: {'; '.join(diffs)}" for lab, diffs in marked]
    return "\n".join(lines) + "\n"


def rich_table(columns: Sequence[str], rows: list[list[str]], title: str,
               numeric_from: int) -> Table:
    """A rich table of text cells (never read as markup); columns from ``numeric_from`` on
    are right-aligned."""
    t = Table(title=title)
    for i, c in enumerate(columns):
        t.add_column(c, justify="right" if i >= numeric_from else "left", overflow="fold")
    for cells in rows:
        t.add_row(*(Text(c) for c in cells))
    return t


def md_table(columns: Sequence[str], rows: list[list[str]], numeric_from: int) -> str:
    """The same table as GitHub Markdown (cells escaped), ending in a newline."""
    lines = ["| " + " | ".join(columns) + " |",
             "|" + "|".join("---:" if i >= numeric_from else "---" for i in range(len(columns)))
             + "|"]
    lines += ["| " + " | ".join(md_escape(c) for c in cells) + " |" for cells in rows]
    return "\n".join(lines) + "\n"
