"""The README's tour as a new user reads it: every ``dlperf`` line is a command dlperf takes
(its subcommand, options and option values parse, as the shell would split the line), every
committed file or folder it reads exists, and every ``pip install`` line is the README's own
install with another extra (:func:`dlperf.install.install_hint`'s words). Running the lines is
the clean-clone check (benchmarks/results/cpu-dev/report-screens/COMMANDS.md)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer

ROOT = Path(__file__).resolve().parents[2]


def tour_lines() -> list[str]:
    """The lines of the code blocks of the README's "A short tour" section."""
    text = (ROOT / "README.md").read_text()
    tour = text[text.index("## A short tour"):]
    tour = tour[:tour.index("\n## ", 3)]
    blocks = re.findall(r"```bash\n(.*?)```", tour, re.S)
    return [ln for b in blocks for ln in b.splitlines() if ln.strip()]


def words(line: str) -> list[str]:
    return shlex.split(line, comments=True)


def test_the_tour_has_cpu_framework_and_gpu_blocks():
    lines = tour_lines()
    assert len(lines) >= 20
    assert any("--framework jax" in ln for ln in lines)
    assert any("--device cuda" in ln for ln in lines)


@pytest.mark.parametrize("line", [ln for ln in tour_lines() if ln.startswith("dlperf ")])
def test_every_dlperf_line_parses(line):
    from dlperf.cli import app

    args = words(line)[1:]
    cmd = typer.main.get_command(app)
    name, rest = "dlperf", args
    while hasattr(cmd, "list_commands"):  # a group: dlperf, dlperf data
        name, rest = rest[0], rest[1:]
        cmd = cmd.get_command(None, name)
        assert cmd is not None, f"no command {name!r}: {line}"
    cmd.make_context(name, list(rest))  # unknown options and bad values raise here
    for w in args:  # committed results named by the tour exist
        if w.startswith("benchmarks/"):
            assert (ROOT / w).exists(), w


def test_install_lines_are_the_readmes_install():
    from dlperf.install import install_hint

    pips = [ln for ln in tour_lines() if "pip install" in ln]
    assert pips
    for ln in pips:
        extras = re.search(r"-e '\.\[([a-z0-9,-]+)\]'", ln).group(1)
        hint = install_hint(extras)
        assert ln.split("#")[0].strip().endswith(hint.split(" install ", 1)[1]), (ln, hint)


def tour_outputs() -> list[str]:
    """The files and folders the tour's lines write in the checkout: ``-o`` targets, the
    formats a comment offers instead (``# or results.json``), make-imagefolder's folder and
    the default database."""
    out = {"dlperf-results.db"}
    for ln in tour_lines():
        if not ln.startswith("dlperf "):
            continue
        w = words(ln)
        for i, a in enumerate(w[:-1]):
            if a in ("-o", "--output"):
                out.add(w[i + 1])
        if "make-imagefolder" in w:
            out.add(w[w.index("make-imagefolder") + 1].rstrip("/") + "/")
        if "-o" in w and "#" in ln:
            out.update(re.findall(r"\bor (\S+\.\w+)", ln.split("#", 1)[1]))
    return sorted(out)


def test_tour_outputs_are_git_ignored():
    """A new user running the tour in a clone gets a clean ``git status``."""
    import shutil
    import subprocess

    outs = tour_outputs()
    assert "results.json" in outs and "results.csv" in outs
    git = shutil.which("git")
    assert git, "git is needed to check .gitignore"
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    r = subprocess.run([git, "-C", str(ROOT), "check-ignore", "--no-index", "-v", "-n", *outs],
                       capture_output=True, text=True)
    unignored = [ln.split("\t")[-1] for ln in r.stdout.splitlines() if ln.startswith("::")]
    assert not unignored, f"the tour writes files .gitignore does not cover: {unignored}"
