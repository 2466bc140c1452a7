"""The architecture rules of docs/architecture.md, measured on src/dlperf with ast alone (nothing
imported): no import cycle between modules or between dlperf's packages (function-level imports
included), no framework name in a conditional or a framework-keyed table outside
frameworks/, zoo/ and registry.py, and no pydantic model that accepts keys it does not
declare. Sizes are not rules: modules over 500 lines and functions over 120 are listed as a
warning for review (a long module is a prompt to look at its concept, never a reason to cut it
in two)."""

from __future__ import annotations

import ast
import functools
import sys
import warnings
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "dlperf"
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 500, 120

FW = {"torch", "jax", "tensorflow", "mxnet", "fake"}

def modname(root: Path, p: Path) -> str:
    rel = p.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)

def scan(root: Path):
    mods, funcs, edges, conds = {}, [], {}, []
    files = sorted(root.rglob("*.py"))
    names = {modname(root, p): p for p in files}
    for p in files:
        m = modname(root, p)
        src = p.read_text()
        tree = ast.parse(src)
        mods[m] = len(src.splitlines())
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                funcs.append((n.end_lineno - n.lineno + 1, f"{p}:{n.lineno} {n.name}"))
            if isinstance(n, ast.ImportFrom) and n.module:
                base = n.module
                if n.level:
                    pkg = m.split(".") if p.name == "__init__.py" else m.split(".")[:-1]
                    pkg = pkg[: len(pkg) - (n.level - 1)]
                    base = ".".join(pkg + ([n.module] if n.module else []))
                if base.startswith("dlperf"):
                    for a in n.names:
                        cand = f"{base}.{a.name}"
                        tgt = cand if cand in names else base
                        edges.setdefault(m, set()).add(tgt)
            if isinstance(n, ast.Import):
                for a in n.names:
                    if a.name.startswith("dlperf"):
                        edges.setdefault(m, set()).add(a.name)
            if ("dlperf/frameworks/" not in str(p) and "/zoo/" not in str(p)
                    and not str(p).endswith("dlperf/registry.py")):
                tests = []
                if isinstance(n, (ast.If, ast.While, ast.IfExp, ast.Assert)):
                    tests.append(n.test)
                if isinstance(n, ast.comprehension):
                    tests.extend(n.ifs)
                for t in tests:
                    for c in ast.walk(t):
                        if isinstance(c, ast.Constant) and c.value in FW:
                            conds.append(f"{p}:{c.lineno} condition on {c.value!r}")
                if isinstance(n, ast.Dict):
                    keys = [k.value for k in n.keys if isinstance(k, ast.Constant)]
                    if sum(k in FW for k in keys) >= 2:
                        conds.append(f"{p}:{n.lineno} framework-keyed table {keys}")
    # drop package-self edges and edges to missing modules
    edges = {a: {b for b in bs if b in names and b != a} for a, bs in edges.items()}
    return mods, funcs, edges, conds

def cycles(edges):
    # Tarjan SCC
    index, low, stack, on, out, i = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def strong(v):  # Tarjan's strongly connected components
        index[v] = low[v] = i[0]
        i[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in list(edges):
        if v not in index:
            strong(v)
    return out



def _package_edges(edges):
    def pkg(m):
        return ".".join(m.split(".")[:2])
    out = {}
    for a, bs in edges.items():
        for b in bs:
            if pkg(a) != pkg(b):
                out.setdefault(pkg(a), set()).add(pkg(b))
    return out


@functools.cache
def scan_src():
    """:func:`scan` of src/dlperf, once per process, when a test first asks (not at import:
    every pytest-xdist worker imports this file to collect it, one runs its tests)."""
    return scan(SRC)


def review_list(mods, funcs) -> list[str]:
    """Modules over MAX_MODULE_LINES and functions over MAX_FUNCTION_LINES, longest first."""
    out = [f"module {m}: {n} lines" for m, n in sorted(mods.items(), key=lambda kv: -kv[1])
           if n > MAX_MODULE_LINES]
    out += [f"function {where}: {n} lines" for n, where in sorted(funcs, reverse=True)
            if n > MAX_FUNCTION_LINES]
    return out


def test_sizes_are_listed_for_review():
    """Long modules and functions are reported (a pytest warning), not failed."""
    listed = review_list(*scan_src()[:2])
    if listed:
        warnings.warn("sizes to review: " + "; ".join(listed), stacklevel=1)
    assert all(int(x.rsplit(": ", 1)[1].split()[0]) > 0 for x in listed)


def test_no_import_cycle_between_modules_or_packages():
    edges = scan_src()[2]
    assert cycles(edges) == []
    assert cycles(_package_edges(edges)) == []


def test_no_framework_name_in_conditionals_outside_frameworks():
    assert scan_src()[3] == []


def allowing_extra(root: Path) -> list[str]:
    """Classes under ``root`` whose pydantic ``model_config`` allows keys they do not declare
    (``extra="allow"`` or ``extra="ignore"``): a record part or a config must name every field,
    so a misspelt one is an error, not a silent new key."""
    found = []
    for p in sorted(root.rglob("*.py")):
        for n in ast.walk(ast.parse(p.read_text())):
            if not isinstance(n, ast.Call) or getattr(n.func, "id", None) != "ConfigDict":
                continue
            for kw in n.keywords:
                if (kw.arg == "extra" and isinstance(kw.value, ast.Constant)
                        and kw.value.value in ("allow", "ignore")):
                    found.append(f"{p}:{n.lineno} extra={kw.value.value!r}")
    return found


def test_no_model_accepts_keys_it_does_not_declare():
    assert allowing_extra(SRC) == []


def test_the_checks_can_fail(tmp_path):
    """The scanner finds each kind of violation in a planted tree."""
    pkg = tmp_path / "dlperf"
    (pkg / "a").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "__init__.py").write_text("")
    (pkg / "a" / "x.py").write_text("from dlperf.a import y\n" + "\n" * 501)
    (pkg / "a" / "y.py").write_text(
        "def f(fw):\n    from dlperf.a import x\n    if fw == 'jax':\n        pass\n"
        + "    pass\n" * 121)
    mods, funcs, edges, conds = scan(pkg)
    listed = review_list(mods, funcs)
    assert any(x.startswith("module dlperf.a.x:") for x in listed)
    assert any(x.startswith("function ") and " f: " in x for x in listed)
    assert cycles(edges) == [["dlperf.a.x", "dlperf.a.y"]]
    assert conds and "'jax'" in conds[0]
    (pkg / "a" / "z.py").write_text("from pydantic import BaseModel, ConfigDict\n\n\n"
                                    "class P(BaseModel):\n"
                                    "    model_config = ConfigDict(extra='allow')\n")
    assert [x.rsplit(" ", 1)[1] for x in allowing_extra(pkg)] == ["extra='allow'"]
