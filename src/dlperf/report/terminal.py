"""Tables that fit a terminal of a given width, with words kept whole.

A table is printed at the console's width (:func:`fit_table`): columns whose every cell is
empty (or a dash) are dropped; if the table still cannot be drawn without splitting a word
(the sum of each column's longest word, its padding and the borders is wider than the width),
it is drawn in a compact style (no frame, two spaces between columns); then the columns with
one value in every row move to a caption under the table ("device: cpu · precision: fp32");
if that is still too wide, each row is shown as a block of ``column  value`` lines
(stacked). Cells wrap at spaces, never inside a word, except a single word longer than
the whole width (a long path), which has to be folded.

:func:`markdown_blocks` renders the Markdown of a comparison for a terminal: its tables as fitted
tables, the rest as rich Markdown. Written to a file or a pipe, Markdown stays Markdown (the
CLI decides that, :func:`dlperf.cli.common.print_markdown`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.markdown import Markdown
from rich.table import Table
from rich.text import Text

__all__ = ["EMPTY_CELLS", "fit_table", "min_table_width", "markdown_blocks", "md_cell_text"]

#: Cell texts that count as empty when deciding whether a column is dropped.
EMPTY_CELLS = frozenset({"", "–", "-", "—"})
#: The caption's separator between the settings moved out of the columns.
_SEP = " · "


def _plain(cell: Any) -> str:
    """The text of a cell (a :class:`~rich.text.Text` or a string; other renderables: their
    ``str``)."""
    return cell.plain if isinstance(cell, Text) else str(cell)


def _longest_word(text: str) -> int:
    return max((len(w) for w in text.split()), default=0)


def _columns(table: Table) -> list[list[Any]]:
    return [list(col.cells) for col in table.columns]


def _overhead(table: Table, n: int, compact: bool) -> int:
    """Characters a table of ``n`` columns adds to its cells: padding and borders (boxed, as
    ``table``), or two per gap between columns (compact, :data:`_COMPACT`)."""
    if compact:
        return 2 * max(n - 1, 0)
    pad = (table.padding[1] + table.padding[3]) * n
    if table.box is None:
        return pad
    return pad + (n + 1 if table.show_edge else max(n - 1, 0))


def min_table_width(table: Table, keep: Sequence[int] | None = None,
                    compact: bool = False, whole_cells: bool = False) -> int:
    """The narrowest width (characters) at which ``table`` (its columns ``keep``; default
    all) is drawn without splitting a word: per column its longest word (header and cells),
    plus the padding and borders (``compact``: of the compact style, two per gap). With
    ``whole_cells``: without wrapping any cell either (each column as wide as its longest
    cell line; headers may still wrap at spaces)."""
    cols = table.columns
    keep = range(len(cols)) if keep is None else keep
    total = 0
    cell = _longest_line if whole_cells else _longest_word
    for i in keep:
        col = cols[i]
        total += max([_longest_word(_plain(col.header))]
                     + [cell(_plain(c)) for c in col.cells])
    return total + _overhead(table, len(keep), compact)


#: The compact style (no frame; a rule under the header; columns two spaces apart), tried
#: when the boxed table would split words.
_COMPACT = {"box": box.SIMPLE_HEAD, "show_edge": False, "padding": (0, 1),
            "collapse_padding": True, "pad_edge": False}


def _longest_line(text: str) -> int:
    return max((len(line) for line in text.splitlines()), default=0)


def _spread(natural: Sequence[int], minimum: Sequence[int], room: int) -> list[int]:
    """Column widths that add up to at most ``room``: each its ``natural`` width (its longest
    line) when they all fit; else each starts at its ``minimum`` (its longest word), the
    columns that need the least more get their natural width first (short cells such as
    ``12.35 [12.20, 12.51]`` stay on one line), and the room left is shared by the rest in
    proportion to what they lack. Needs ``sum(minimum) <= room``."""
    if sum(natural) <= room:
        return list(natural)
    widths = list(minimum)
    left = room - sum(minimum)
    rest = sorted(range(len(widths)), key=lambda i: natural[i] - minimum[i])
    while rest and natural[rest[0]] - minimum[rest[0]] <= left:
        i = rest.pop(0)
        left -= natural[i] - minimum[i]
        widths[i] = natural[i]
    lack = sum(natural[i] - widths[i] for i in rest)
    for i in rest:
        widths[i] += (natural[i] - widths[i]) * left // lack if lack else 0
    for i in rest:  # what the rounding left over, one character at a time
        if sum(widths) < room and widths[i] < natural[i]:
            widths[i] += 1
    return widths


def _copy(table: Table, keep: Sequence[int], width: int, compact: bool = False) -> Table:
    """``table`` with the columns ``keep`` only (in the compact style: :data:`_COMPACT`) at
    widths that add up to ``width`` (:func:`_spread`: none narrower than its longest word, so
    cells wrap at spaces). Needs ``min_table_width(table, keep, compact) <= width``."""
    style: dict[str, Any] = (dict(_COMPACT) if compact else
                             {"box": table.box, "show_edge": table.show_edge,
                              "padding": table.padding})
    t = Table(title=table.title, caption=table.caption, show_lines=table.show_lines,
              show_header=table.show_header, title_style=table.title_style,
              caption_style=table.caption_style, header_style=table.header_style,
              caption_justify="left", **style)
    cells = _columns(table)
    texts = [[_plain(table.columns[i].header)] + [_plain(c) for c in cells[i]] for i in keep]
    room = width - _overhead(table, len(keep), compact)
    whole = [max(map(_longest_line, col)) for col in texts]
    minimum = [max(map(_longest_word, col)) for col in texts]
    # too wide with whole headers: the headers wrap first (their cells' lines are the aim)
    aim = whole if sum(whole) <= room else [
        max([_longest_word(col[0])] + [_longest_line(c) for c in col[1:]]) for col in texts]
    widths = _spread(aim, minimum, room)
    for i, w in zip(keep, widths):
        col = table.columns[i]
        t.add_column(col.header, justify=col.justify, style=col.style,
                     header_style=col.header_style, no_wrap=False, overflow="fold",
                     width=max(w, 1))
    for r in range(table.row_count):
        t.add_row(*(cells[i][r] for i in keep), style=table.rows[r].style)
    return t


def _stacked(table: Table, keep: Sequence[int], caption: str | None, width: int
             ) -> RenderableType:
    """Each row of ``table`` as a block of ``column: value`` lines (empty cells left out),
    under the title; for a width too narrow for any table of these columns."""
    cells = _columns(table)
    heads = [_plain(table.columns[i].header) for i in keep]
    key_w = min(max((len(h) for h in heads), default=1), max(width // 3, 8))
    parts: list[RenderableType] = []
    if table.title:
        parts.append(Text(_plain(table.title), style="bold"))
    if caption:
        parts.append(Text(caption, style="dim"))
    for r in range(table.row_count):
        grid = Table.grid(padding=(0, 1))
        grid.add_column(style="bold", width=key_w, overflow="fold")
        grid.add_column(overflow="fold", max_width=max(width - key_w - 1, 1))
        style = table.rows[r].style or ""
        for h, i in zip(heads, keep):
            cell = cells[i][r]
            if _plain(cell).strip() in EMPTY_CELLS:
                continue
            value = cell.copy() if isinstance(cell, Text) else Text(_plain(cell))
            if style:
                value.stylize(style)
            grid.add_row(Text(h), value)
        parts += [Text(""), grid] if r or parts else [grid]
    return Group(*parts)


def fit_table(table: Table, width: int) -> RenderableType:
    """``table`` drawn within ``width`` characters with words kept whole (module docstring):
    all-empty columns dropped; then the first of these that fits with every cell on one line,
    else with cells wrapped at spaces: framed, unframed (the compact style), framed with the
    constant columns moved to a line under it, unframed so; last, stacked rows.

    Args:
        table: a rich table whose cells are text (:class:`~rich.text.Text` or strings).
        width: the console's width in characters (>= 1).

    Returns:
        A renderable: a new table (the given one is not changed) or a group of row blocks.
    """
    cells = _columns(table)
    n = table.row_count
    keep = [i for i in range(len(cells))
            if n == 0 or any(_plain(c).strip() not in EMPTY_CELLS for c in cells[i])]
    keep = keep or list(range(len(cells)))
    rest, caption = keep, None
    if n >= 2:  # the columns with one value in every row can go to a line under the table
        const = [i for i in keep if len({_plain(c) for c in cells[i]}) == 1]
        if const and len(const) < len(keep):
            rest = [i for i in keep if i not in const]
            caption = _SEP.join(f"{_plain(table.columns[i].header)}: {_plain(cells[i][0])}"
                                for i in const)
    # Every cell whole if that fits (framed, unframed, the constant columns moved out), else
    # the cells wrapped at spaces (in the same order), else the rows stacked.
    tries = [(keep, False), (keep, True)] + ([(rest, False), (rest, True)] if caption else [])
    for whole in (True, False):
        for k, (cols, compact) in enumerate(tries):
            if min_table_width(table, cols, compact, whole_cells=whole) <= width:
                t = _copy(table, cols, width, compact)
                # the caption is as wide as the console (a table's own wraps at its width)
                return t if k < 2 else Group(t, Text(caption or ""))
    return _stacked(table, rest, caption, width)


_INLINE = re.compile(r"\*\*(.+?)\*\*|`([^`]+)`|(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])")


def md_cell_text(cell: str) -> Text:
    """A Markdown table cell as styled text: ``**bold**``, ``*italic*`` and ```code```
    styled, ``\\|`` and ``\\*`` unescaped, ``&lt;``/``&gt;``/``&amp;`` decoded."""
    cell = (cell.replace("\\|", "|").replace("&lt;", "<").replace("&gt;", ">")
            .replace("&amp;", "&"))
    out, pos = Text(), 0
    for m in _INLINE.finditer(cell):
        out.append(cell[pos:m.start()].replace("\\*", "*"))
        bold, code, italic = m.groups()
        out.append(bold if bold is not None else code if code is not None else italic,
                   style="bold" if bold is not None else "cyan" if code is not None
                   else "italic")
        pos = m.end()
    out.append(cell[pos:].replace("\\*", "*"))
    return out


def _split_row(line: str) -> list[str]:
    """The cells of a Markdown table row (``\\|`` is a pipe inside a cell)."""
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    return [c.strip() for c in re.split(r"(?<!\\)\|", body)]


_ALIGN_ROW = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")


def _md_table(lines: list[str]) -> Table:
    heads, aligns = _split_row(lines[0]), _split_row(lines[1])
    t = Table()
    for h, a in zip(heads, aligns + [""] * len(heads)):
        t.add_column(md_cell_text(h), justify="right" if a.endswith(":") and not
                     a.startswith(":") else "left")
    for line in lines[2:]:
        cells = _split_row(line)
        cells = (cells + [""] * len(heads))[:len(heads)]
        t.add_row(*(md_cell_text(c) for c in cells))
    return t


def markdown_blocks(text: str, width: int) -> list[RenderableType]:
    """The Markdown ``text`` as renderables for a terminal ``width`` characters wide: each
    table (a header row, an alignment row ``|---|---:|``, body rows) as a fitted table
    (:func:`fit_table`), the text between them as rich Markdown."""
    lines = text.splitlines()
    out: list[RenderableType] = []
    prose: list[str] = []
    i = 0
    while i < len(lines):
        if (lines[i].lstrip().startswith("|") and i + 1 < len(lines)
                and _ALIGN_ROW.match(lines[i + 1])):
            j = i + 2
            while j < len(lines) and lines[j].lstrip().startswith("|"):
                j += 1
            if "".join(prose).strip():
                out.append(Markdown("\n".join(prose)))
            prose = []
            out.append(fit_table(_md_table(lines[i:j]), width))
            i = j
            continue
        prose.append(lines[i])
        i += 1
    if "".join(prose).strip():
        out.append(Markdown("\n".join(prose)))
    return out
