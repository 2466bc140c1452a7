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
    return _min_width(table, _column_needs(table), keep, compact, whole_cells)


def _min_width(table: Table, needs: tuple[list[int], list[int]], keep: Sequence[int] | None,
               compact: bool, whole_cells: bool) -> int:
    """:func:`min_table_width` from the table's :func:`_column_needs`."""
    keep = range(len(table.columns)) if keep is None else keep
    per = needs[1 if whole_cells else 0]
    return sum(per[i] for i in keep) + _overhead(table, len(keep), compact)


def _column_needs(table: Table) -> tuple[list[int], list[int]]:
    """Per column of ``table``: its longest word (header and cells), and the larger of its
    header's longest word and its cells' longest line (:func:`min_table_width`)."""
    words, lines = [], []
    for col in table.columns:
        head = _longest_word(_plain(col.header))
        texts = [_plain(c) for c in col.cells]
        words.append(max([head] + [_longest_word(t) for t in texts]))
        lines.append(max([head] + [_longest_line(t) for t in texts]))
    return words, lines


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
    needs = _column_needs(table)  # each column's longest word and line, for every try
    for whole in (True, False):
        for k, (cols, compact) in enumerate(tries):
            if _min_width(table, needs, cols, compact, whole) <= width:
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
    from rich.markdown import Markdown  # here: markdown-it is 0.1 s of a command's start

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


def _rich_layout_copied() -> bool:
    """Whether the installed rich lays a table out as :class:`PlainTable` copies it: rich
    14.3 or later (13.x to 14.2 place header cells differently; ``tests/unit/test_terminal.py``
    compares the two on rich 14.3.0-15.0.0), with the two private members it calls
    (``Table._calculate_column_widths`` and ``Table._extra_width``)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        major, minor = (int(x) for x in version("rich").split(".")[:2])
    except (PackageNotFoundError, ValueError):
        return False
    return ((major, minor) >= (14, 3) and callable(getattr(Table, "_calculate_column_widths", None))
            and isinstance(getattr(Table, "_extra_width", None), property))


#: :func:`_rich_layout_copied` for the rich this process imported.
RICH_LAYOUT_COPIED = _rich_layout_copied()


def plain_fast(renderable: RenderableType) -> RenderableType:
    """``renderable`` with each :class:`~rich.table.Table` in it (itself, or an item of a
    :class:`~rich.console.Group`, at any depth) drawn by :class:`PlainTable`: the same
    characters as rich draws, made in a tenth of the time on a console without colours.
    With a rich whose layout :class:`PlainTable` does not copy (:data:`RICH_LAYOUT_COPIED`
    false), ``renderable`` itself: rich draws it."""
    if not RICH_LAYOUT_COPIED:
        return renderable
    if isinstance(renderable, Table):
        return PlainTable(renderable)
    if isinstance(renderable, Group):
        return Group(*(plain_fast(r) for r in renderable.renderables), fit=renderable.fit)
    return renderable


class PlainTable:
    """A rich table that a console without colours (``color_system`` None: output to a file
    or a pipe, ``NO_COLOR`` aside) gets as plain lines, each character where rich's
    ``Table`` puts it; any other console, or a table this does not draw (a footer, ``leading``
    rows, a cell that is not text, a column narrower than its padding), gets the table
    itself.

    Rich renders every cell through its padding, line splitting and shaping (about 0.15 ms
    a cell on a 2-core VM: 1.3 s for the 507 rows of ``dlperf results --db
    benchmarks/results/h200``). The layout here is rich's: the column widths, title and
    caption come from rich itself; each cell's lines from :meth:`rich.text.Text.wrap` (the
    code ``Text`` renders with; a one-line cell that fits is justified directly, as ``wrap``
    would), padded as ``rich.padding.Padding`` and aligned as ``rich.table.Table._render``
    do, joined with the table's box characters; ``tests/unit/test_terminal.py`` compares the
    two on random tables.
    """

    def __init__(self, table: Table) -> None:
        self.table = table

    def __rich_measure__(self, console: Any, options: Any) -> Any:
        return self.table.__rich_measure__(console, options)

    def __rich_console__(self, console: Any, options: Any) -> Any:
        from rich.segment import Segment

        t = self.table
        lines = None
        if console.color_system is None and not console.record:
            lines = self._lines(console, options)
        if lines is None:
            yield t
            return
        title, widths, body, caption = lines
        yield from title
        line = Segment.line()
        for text in body:
            yield Segment(text)
            yield line
        yield from caption

    def _lines(self, console: Any, options: Any) -> tuple[list, list[int], list[str], list
                                                          ] | None:
        """(title segments, column widths, body lines, caption segments), or None where
        this table is one for rich to draw."""
        from rich.style import Style

        t = self.table
        if not t.columns or t.show_footer or t.leading:
            return None
        max_width = options.max_width if t.width is None else t.width
        extra = t._extra_width
        widths = t._calculate_column_widths(console, options.update_width(max_width - extra))
        render_options = options.update(width=sum(widths) + extra, highlight=t.highlight,
                                        height=None)
        body = self._body(console, render_options, widths)
        if body is None:
            return None

        def annotation(text: Any, style: Any, justify: Any) -> list:
            rt = (console.render_str(text, style=style, highlight=False)
                  if isinstance(text, str) else text)
            return list(console.render(rt, options=render_options.update(justify=justify)))
        title = (annotation(t.title, Style.pick_first(t.title_style, "table.title"),
                            t.title_justify) if t.title else [])
        caption = (annotation(t.caption, Style.pick_first(t.caption_style, "table.caption"),
                              t.caption_justify) if t.caption else [])
        return title, widths, body, caption

    def _body(self, console: Any, options: Any, widths: list[int]) -> list[str] | None:
        """The table's lines from its header to its bottom edge (``Table._render``'s), or
        None where a cell is not text or has no room."""
        t = self.table
        n_cols = len(t.columns)
        rows: list[list[tuple[list[str], str]]] = []  # per row, per column: (lines, vertical)
        memo: dict[tuple, list[str]] = {}
        for ci, col in enumerate(t.columns):
            raw = ([col.header] if t.show_header else []) + list(col.cells)
            for ri, cell in enumerate(raw):
                if not (type(cell) is str or isinstance(cell, Text)):
                    return None
                pad = _cell_padding(t, ci, n_cols, ri == 0, ri == len(raw) - 1)
                lines = _cell_lines(console, options, cell, col, widths[ci], pad, memo)
                if lines is None:
                    return None
                if ci == 0:
                    rows.append([])
                rows[ri].append((lines, getattr(cell, "vertical", None) or col.vertical))
        box_ = t.box.substitute(options, safe=t.safe_box if t.safe_box is not None
                                else console.safe_box) if t.box else None
        box_ = box_.get_plain_headed_box() if box_ and not t.show_header else box_
        edge = t.show_edge
        out: list[str] = []
        if box_ and edge:
            out.append(box_.get_top(widths))
        for index, row in enumerate(rows):
            first, last = index == 0, index == len(rows) - 1
            header_row = first and t.show_header
            height = max(len(lines) for lines, _ in row)
            cells = [_aligned(lines, "bottom" if header_row else vertical, w, height)
                     for (lines, vertical), w in zip(row, widths)]
            if box_:
                left, right, divider = (
                    (box_.head_left, box_.head_right, box_.head_vertical) if first else
                    (box_.foot_left, box_.foot_right, box_.foot_vertical) if last else
                    (box_.mid_left, box_.mid_right, box_.mid_vertical))
                for k in range(height):
                    inner = divider.join(c[k] for c in cells)
                    out.append(f"{left}{inner}{right}" if edge else inner)
            else:
                out.extend("".join(c[k] for c in cells) for k in range(height))
            if box_ and header_row:
                out.append(box_.get_row(widths, "head", edge=edge))
            data_row = t.rows[index - t.show_header] if not header_row else None
            if box_ and (t.show_lines or (data_row is not None and data_row.end_section)) \
                    and not last and not header_row:
                out.append(box_.get_row(widths, "row", edge=edge))
        if box_ and edge:
            out.append(box_.get_bottom(widths))
        return out


def _cell_padding(t: Table, column: int, n_cols: int, first_row: bool, last_row: bool
                  ) -> tuple[int, int, int, int]:
    """A cell's padding ``(top, right, bottom, left)`` as ``Table._get_cells`` gives it."""
    top, right, bottom, left = t.padding
    if not any(t.padding):
        return 0, 0, 0, 0
    if t.collapse_padding:
        if column != 0:
            left = max(0, left - right)
        if not last_row:
            bottom = max(0, top - bottom)
    if not t.pad_edge:
        if column == 0:
            left = 0
        if column == n_cols - 1:
            right = 0
        if first_row:
            top = 0
        if last_row:
            bottom = 0
    return top, right, bottom, left


def _cell_lines(console: Any, options: Any, cell: str | Text, col: Any, width: int,
                pad: tuple[int, int, int, int], memo: dict[tuple, list[str]]
                ) -> list[str] | None:
    """The lines of one cell, each ``width`` cells wide, padding included (what
    ``console.render_lines(Padding(cell, pad), ...)`` gives as text); None where its text
    has no room (``width`` not above its left and right padding) or does not end its last
    line (``Text.end`` other than a newline)."""
    from rich.cells import cell_len, set_cell_size

    top, right, bottom, left = pad
    room = width - left - right
    if room < 1:
        return None
    text = (cell if isinstance(cell, Text)
            else console.render_str(cell, highlight=False, markup=options.markup))
    if text.end != "\n":
        return None
    justify = text.justify or col.justify or "default"
    overflow = text.overflow or col.overflow or "fold"
    no_wrap = text.no_wrap if text.no_wrap is not None else bool(col.no_wrap)
    tab_size = console.tab_size if text.tab_size is None else text.tab_size
    plain = text.plain
    key = (plain, justify, overflow, no_wrap, tab_size, room, pad, width)
    hit = memo.get(key)
    if hit is not None:
        return hit
    n = cell_len(plain)
    if (n <= room and "\n" not in plain and "\t" not in plain and plain == plain.strip()
            and justify in ("default", "left", "full", "right", "center")):
        # one line that fits: Text.wrap breaks nothing and only justifies it (nor that with
        # overflow "ignore")
        justify = "default" if overflow == "ignore" else justify
        if justify == "right":
            lines = [" " * (room - n) + plain]
        elif justify == "center":
            lines = [" " * ((room - n) // 2) + plain + " " * (room - n - (room - n) // 2)]
        else:
            lines = [plain + " " * (room - n)]
    else:
        wrapped = text.wrap(console, room, justify=justify, overflow=overflow,
                            tab_size=tab_size or 8, no_wrap=no_wrap)
        lines = [set_cell_size(w.plain, room) for w in wrapped]
    blank = " " * width
    out = [blank] * top + [" " * left + s + " " * right for s in lines] + [blank] * bottom
    memo[key] = out
    return out


def _aligned(lines: list[str], vertical: str, width: int, height: int) -> list[str]:
    """A cell's lines filled to ``height`` with blank lines (``Segment.align_top``,
    ``align_middle``, ``align_bottom``)."""
    extra = height - len(lines)
    if extra <= 0:
        return lines
    blank = [" " * width]
    if vertical == "top":
        return lines + blank * extra
    if vertical == "middle":
        return blank * (extra // 2) + lines + blank * (extra - extra // 2)
    return blank * extra + lines
