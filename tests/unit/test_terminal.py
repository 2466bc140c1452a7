"""Tables fitted to the terminal's width (dlperf.report.terminal) and the console width the
CLI takes from $COLUMNS (dlperf.cli.common.console_width)."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from dlperf.cli.common import PIPE_WIDTH, console_width
from dlperf.report.terminal import (
    RICH_LAYOUT_COPIED,
    fit_table,
    markdown_blocks,
    md_cell_text,
    min_table_width,
)

ROWS = [
    ["alexnet_cifar_tiny", "torch/eager", "cpu", "1", "fp32", "8", "synthetic", "ok",
     "12.35 [12.20, 12.51]", "647.8", "–", "–", "–", "–", "RSS 1.20 GiB"],
    ["alexnet_cifar_tiny", "torch/graph", "cpu", "1", "fp32", "32", "synthetic",
     "OOM: RuntimeError: DefaultCPUAllocator: can't allocate memory", "–", "–", "–", "–",
     "–", "–", "RSS 3.80 GiB"],
    ["resnet50_tiny", "torch/eager", "cpu", "1", "fp32", "8", "synthetic", "ok",
     "40.10 [39.90, 40.33]", "199.5", "–", "–", "–", "–", "RSS 1.51 GiB"],
]
HEADS = ["model", "framework/mode", "device", "devices", "precision", "batch", "data", "status",
         "median ms [CI]", "samples/s", "tokens/s", "MFU", "data wait", "J/iter",
         "peak mem (alloc / resv / NVML)"]


def table() -> Table:
    t = Table(title="dlperf results")
    for h in HEADS:
        t.add_column(h, overflow="fold")
    for i, r in enumerate(ROWS):
        t.add_row(*(Text(c) for c in r), style="red" if i == 1 else "")
    return t


def render(renderable, width: int) -> str:
    c = Console(file=io.StringIO(), width=width, record=True, color_system=None)
    c.print(renderable)
    return c.export_text()


def words_whole(text: str) -> set[str]:
    """The words of the rendered text (box characters and separators stripped)."""
    return set(re.sub(r"[│┃┏┓┗┛┡┩└┘┌┐├┤┬┴┼━─╇╈╋┳┻]", " ", text).split())


@pytest.mark.parametrize("width", [60, 80, 90, 100, 110, 120, 140, 160, 200])
def test_tables_fit_the_width_and_never_split_a_word(width):
    out = render(fit_table(table(), width), width)
    assert max(len(ln) for ln in out.splitlines()) <= width
    seen = words_whole(out)
    for row in ROWS:
        for cell in row:
            for word in cell.split():
                if word != "–":
                    assert word in seen, (word, width, out)
    # the all-empty columns are gone at every width
    for head in ("tokens/s", "MFU", "J/iter", "wait"):
        assert head not in out


def test_wide_keeps_columns_narrow_moves_constants_then_stacks():
    wide = render(fit_table(table(), 200), 200)
    # every non-empty column, every cell on one line: without the frame, which would not fit
    assert "framework/mode" in wide and "device: cpu" not in wide and "┃" not in wide
    assert re.search(r"^alexnet_cifar_tiny +torch/graph +cpu +1 +fp32 +32 +synthetic +OOM: "
                     r"RuntimeError: DefaultCPUAllocator: can't allocate memory", wide, re.M)
    framed = render(fit_table(table(), 240), 240)
    assert "┃ model" in framed and "┃ device" in framed
    mid = render(fit_table(table(), 120), 120)
    # device, devices, precision and data are the same in every row: a caption under the table
    assert "device: cpu · devices: 1 · precision: fp32 · data: synthetic" in " ".join(mid.split())
    assert "┃ model" in mid
    narrow = render(fit_table(table(), 60), 60)
    assert "┃" not in narrow  # stacked: one block of "column value" lines per row
    assert re.search(r"^model\s+alexnet_cifar_tiny", narrow, re.M)
    assert narrow.count("samples/s") == 2  # the failed row has no throughput cell
    assert min_table_width(table()) > 60


def test_fit_table_keeps_a_small_table_and_an_empty_one_as_is():
    t = Table(title="x")
    t.add_column("a")
    t.add_column("b")
    t.add_row("1", "–")
    assert [c.header for c in fit_table(t, 80).columns] == ["a"]
    empty = Table()
    empty.add_column("a")
    assert [c.header for c in fit_table(empty, 80).columns] == ["a"]


def test_markdown_tables_are_fitted_and_the_prose_kept():
    md = ("| model | speed-up [95% CI] | flag |\n|---|---:|---|\n"
          "| alexnet_cifar_tiny | 1.234 [1.200, 1.260] | **between-run > within-run** |\n"
          "| a\\|b | 0.9 | `x` |\n\n*speed-up* = median of the baseline / of the other.\n")
    blocks = markdown_blocks(md, 40)
    assert len(blocks) == 2
    out = render(blocks[0], 40) + render(blocks[1], 40)
    assert max(len(ln) for ln in out.splitlines()) <= 40
    assert "alexnet_cifar_tiny" in out and "a|b" in out and "speed-up = median" in out
    assert "**" not in out
    t = md_cell_text("**bold** and `code` and *it*")
    assert t.plain == "bold and code and it" and len(t.spans) == 3


def test_console_width_follows_columns_then_the_terminal_then_the_pipe_default():
    assert console_width(False, {"COLUMNS": "60"}) == 60
    assert console_width(True, {"COLUMNS": "200"}) == 200
    assert console_width(True, {}) is None  # rich asks the terminal
    assert console_width(False, {}) == PIPE_WIDTH
    assert console_width(False, {"COLUMNS": "wide"}) == PIPE_WIDTH


def _both(renderable, width: int, **console) -> tuple[str, str]:
    """``renderable`` printed by rich and through :func:`plain_fast`, each on a fresh console
    ``width`` wide (``console``: its other settings; default without colours, a pipe's)."""
    from dlperf.report.terminal import plain_fast

    texts = []
    for r in (renderable, plain_fast(renderable)):
        c = Console(file=io.StringIO(), width=width, **{"color_system": None, **console})
        c.print(r, soft_wrap=False)
        texts.append(c.file.getvalue())
    return texts[0], texts[1]


_WORDS = ["a", "ok", "torch/eager", "12.35 [12.20, 12.51]", "–", "", " lead", "trail ",
          "  both  ", "x" * 23, "RSS 1.20 GiB", "⚠ 2", "漢字の幅", "é́", "tab\there", "two\nlines",
          "end\n", "\nstart", "[bold]markup[/bold]", "[not markup", ":thumbs_up:", "a  b   c",
          "OOM: RuntimeError: DefaultCPUAllocator: can't allocate memory", "0.002880"]


def _random_table(rng) -> Table:
    from rich import box as boxes

    t = Table(title=rng.choice([None, "dlperf results", "a title much longer than the table"]),
              caption=rng.choice([None, "device: cpu · precision: fp32"]),
              box=rng.choice([None, boxes.SIMPLE_HEAD, boxes.ROUNDED, boxes.HEAVY_HEAD,
                              boxes.ASCII, boxes.MINIMAL, boxes.SQUARE_DOUBLE_HEAD]),
              show_edge=rng.random() < 0.5, show_header=rng.random() < 0.8,
              show_lines=rng.random() < 0.2, expand=rng.random() < 0.2,
              padding=(rng.randint(0, 1), rng.randint(0, 2), rng.randint(0, 1),
                       rng.randint(0, 2)),
              collapse_padding=rng.random() < 0.5, pad_edge=rng.random() < 0.5,
              caption_justify=rng.choice(["left", "center", "right"]))
    n = rng.randint(1, 6)
    for _ in range(n):
        t.add_column(rng.choice(["model", "median ms [CI]", "peak mem (alloc / resv)", ""]),
                     justify=rng.choice(["left", "right", "center", "default"]),
                     overflow=rng.choice(["fold", "crop", "ellipsis", "ignore"]),
                     no_wrap=rng.random() < 0.2, vertical=rng.choice(["top", "middle",
                                                                      "bottom"]),
                     width=rng.choice([None, None, rng.randint(1, 20)]),
                     min_width=rng.choice([None, rng.randint(1, 8)]),
                     max_width=rng.choice([None, rng.randint(2, 30)]))
    for _ in range(rng.randint(0, 8)):
        cells = []
        for _ in range(n):
            w = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 3)))
            cells.append(w if rng.random() < 0.3 else Text(
                w, justify=rng.choice([None, None, "right", "center"]),
                overflow=rng.choice([None, None, "crop"]), style="red"))
        t.add_row(*cells, end_section=rng.random() < 0.2)
    return t


@pytest.mark.skipif(not RICH_LAYOUT_COPIED,
                    reason="rich < 14.3 draws its tables itself (plain_fast leaves them to it)")
def test_plain_tables_are_drawn_as_rich_draws_them():
    """:class:`PlainTable` puts every character where rich's Table does, on random tables
    (boxes, padding, justification, overflow, wrapping, wide characters, markup in strings,
    titles and captions) at random widths; a console with colours gets rich's own table."""
    import random

    rng = random.Random(20261206)
    drawn = 0
    for _ in range(1500):
        t = _random_table(rng)
        width = rng.randint(8, 120)
        rich_text, plain_text = _both(t, width)
        assert plain_text == rich_text, (width, rich_text, plain_text)
        drawn += bool(rich_text.strip())
    assert drawn > 1200
    colours = _both(_random_table(rng), 80, force_terminal=True, color_system="truecolor")
    assert colours[0] == colours[1] and "\x1b[" in colours[0]


def test_a_rich_whose_layout_is_not_copied_draws_its_own_tables(monkeypatch):
    """Before rich 14.3, or without the private members :class:`PlainTable` calls, tables
    are left to rich; from 14.3 on they are drawn by :class:`PlainTable`."""
    from importlib.metadata import version

    from dlperf.report import terminal

    t = Table("a", "b")
    t.add_row("1", "2")
    major, minor = (int(x) for x in version("rich").split(".")[:2])
    assert terminal.RICH_LAYOUT_COPIED == ((major, minor) >= (14, 3))
    assert isinstance(terminal.plain_fast(t), terminal.PlainTable) == terminal.RICH_LAYOUT_COPIED
    monkeypatch.delattr(Table, "_calculate_column_widths")
    assert terminal._rich_layout_copied() is False
    monkeypatch.setattr(terminal, "RICH_LAYOUT_COPIED", False)
    group = Group(t)
    assert terminal.plain_fast(t) is t and terminal.plain_fast(group) is group


@pytest.mark.parametrize("width", [40, 80, 160, 250])
def test_results_tables_are_drawn_plain_as_rich_draws_them(width):
    """The results and breakdown tables of a committed results file, fitted to each width
    (framed, compact, a caption, or stacked rows), print the same through plain_fast."""
    from pathlib import Path

    from dlperf.report.breakdown import breakdown_table
    from dlperf.report.tables import results_table
    from dlperf.results.store import ResultStore
    from dlperf.results.view import as_records

    db = Path(__file__).resolve().parents[2] / "benchmarks/results/h200/breakdown.db"
    with ResultStore(db, read_only=True) as store:
        recs = as_records(store.rows(latest=True))
    assert len(recs) > 10
    for t in (results_table(recs), breakdown_table(recs)):
        rich_text, plain_text = _both(fit_table(t, width), width)
        assert plain_text == rich_text and len(rich_text.splitlines()) > len(recs)
