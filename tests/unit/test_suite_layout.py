"""The suite runs as CI runs it: ``.venv/bin/pytest`` (scripts/test.sh), whose ``sys.path``
holds each test file's folder (pytest's ``prepend`` import mode: ``tests/`` and its
subfolders have no ``__init__.py``) but not the working directory. ``python -m pytest`` adds the
working directory too, so an import of the ``tests`` package (``from tests.unit.x import y``)
passes there and fails in CI; helpers shared by test files live in ``tests/`` (``fakes``,
``cli_here``) and are imported by their module name."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def package_imports(root: Path) -> list[str]:
    """``file:line`` of each import of the ``tests`` package under ``root``."""
    found = []
    for p in sorted(root.rglob("*.py")):
        for n in ast.walk(ast.parse(p.read_text())):
            names = ([n.module or ""] if isinstance(n, ast.ImportFrom) and not n.level
                     else [a.name for a in n.names] if isinstance(n, ast.Import) else [])
            if any(m == "tests" or m.startswith("tests.") for m in names):
                found.append(f"{p.relative_to(root)}:{n.lineno}")
    return found


def test_no_test_imports_the_tests_package():
    assert package_imports(TESTS) == []


def test_the_check_can_fail(tmp_path):
    (tmp_path / "a.py").write_text("import os\nfrom tests.unit.b import c\n")
    (tmp_path / "d.py").write_text("import tests.fakes\nfrom .e import f\n")
    assert package_imports(tmp_path) == ["a.py:2", "d.py:1"]


def _root_conftest():
    """tests/conftest.py as a module of its own (``conftest`` names two files of the suite)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_suite_root_conftest", TESTS / "conftest.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_scheduler_names_test_files_that_exist():
    """The files that ``--dist loadfile`` hands out first, or to one worker together, exist
    (a renamed file would silently lose its place)."""
    c = _root_conftest()
    named = [*c.LONG_FIRST, *c.SAME_WORKER]
    assert len(set(c.LONG_FIRST)) == len(c.LONG_FIRST)
    assert [p for p in named if not (TESTS.parent / p).is_file()] == []


def test_long_files_are_handed_out_first_and_the_rest_keep_their_order():
    c = _root_conftest()
    first, second = c.LONG_FIRST[0], c.LONG_FIRST[1]
    units = ["tests/unit/a.py", second, "tests/unit/b.py", first, "h200_validation"]
    assert c.long_first(units) == [first, second, "tests/unit/a.py", "tests/unit/b.py",
                                   "h200_validation"]
