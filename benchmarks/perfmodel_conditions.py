"""Code lines per condition in ``src/dlperf/perfmodel`` (issue 38's measure of how many special
cases the model's code carries).

Usage (repository root)::

    python benchmarks/perfmodel_conditions.py [folder]

A *code line* is a line holding a token that is not a comment, a docstring or layout; a
*condition* is an ``if`` / ``elif`` statement, a conditional expression, a ``while`` loop or a
comprehension's ``if`` clause (the branches a reader must follow). The issue's figures
(Calculon one condition per 15 code lines, Habitat one per 18, dlperf's perfmodel one per 5.5
at ae88e0f) are this count.
"""

from __future__ import annotations

import ast
import io
import sys
import tokenize
from pathlib import Path

_LAYOUT = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
           tokenize.ENDMARKER}


def code_lines(source: str) -> int:
    """Lines of ``source`` with a token other than a comment, a docstring or layout."""
    tree = ast.parse(source)
    doc: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first = node.body[0] if node.body else None
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                doc.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    lines = {t.start[0] for t in tokenize.generate_tokens(io.StringIO(source).readline)
             if t.type not in _LAYOUT}
    return len(lines - doc)


def conditions(source: str) -> int:
    """``if``/``elif`` statements, conditional expressions, ``while`` loops and comprehension
    ``if`` clauses in ``source``."""
    n = 0
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.If, ast.IfExp, ast.While)):
            n += 1
        elif isinstance(node, ast.comprehension):
            n += len(node.ifs)
    return n


def count(folder: Path) -> tuple[int, int]:
    """``(code lines, conditions)`` over the ``*.py`` files of ``folder`` and its subpackages."""
    lines = conds = 0
    for f in sorted(folder.rglob("*.py")):
        src = f.read_text()
        lines, conds = lines + code_lines(src), conds + conditions(src)
    return lines, conds


def main() -> None:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else (
        Path(__file__).resolve().parents[1] / "src" / "dlperf" / "perfmodel")
    lines, conds = count(folder)
    print(f"{folder}: {lines} code lines, {conds} conditions, "
          f"{lines / max(conds, 1):.2f} code lines per condition")


if __name__ == "__main__":
    main()
