"""Tables fitted to the terminal's width (dlperf.report.terminal) and the console width the
CLI takes from $COLUMNS (dlperf.cli.common.console_width)."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console
from rich.table import Table
from rich.text import Text

from dlperf.cli.common import PIPE_WIDTH, console_width
from dlperf.report.terminal import fit_table, markdown_blocks, md_cell_text, min_table_width

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
