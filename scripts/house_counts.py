"""Counts of how a result travels and how things are named in dlperf's tree (the counts of
issue 41), measured with the standard library alone so that a count before a change and after
it come from the same command.

Usage::

    python scripts/house_counts.py [--root PATH] [--log-rev REV] [--log-n N | --log-since REV]
                                   [--own] [--list]

``--root`` is a checkout (default: this script's); the git counts read that checkout's
history: the ``--log-n`` commits up to ``--log-rev`` (default 357 up to HEAD), or the commits
after ``--log-since`` up to ``--log-rev`` (``--own``: the branch's own commits only, first
parent and no merges). ``--list`` prints what each count found.

What each count is (every rule is here, so that a reader can argue with it):

``perfmodel .get(``
    Lines with ``.get(`` in ``src/dlperf/perfmodel/records.py``, the loader that reads raw rows
    (the issue's 52); the total over ``perfmodel/`` is printed beside it.
``RunRecord | Mapping signatures``
    Function parameters annotated with a union of which one member is ``RunRecord`` and
    another a ``Mapping`` (either order; ``Union``/``Optional`` too, and inside another
    annotation such as ``Iterable[RunRecord | Mapping]``; a module-level alias of such a union
    is resolved) in ``src/``. ``Mapping[str, RunRecord]`` (records by name) is not one.
``worker.base_result call sites``
    Calls of a function named ``base_result`` in ``src/``.
``label writers``
    Functions and methods in ``src/`` with an f-string that formats both a ``device`` and a
    ``precision`` value (a name, attribute, subscript or call with that name: ``i.device``,
    ``r["device"]``, ``r.get("device")``), with the order of the two in it ("device precision"
    or "precision device"); an f-string with a ``|`` (a Markdown table row) or without a space
    (a file name) is not a label. A function named ``*label*`` that names both and writes its
    label by pieces counts too ("by pieces"), unless it hands them to ``label_of``.
``DDP 25 MiB default``
    Source files with a code line (not a comment, not a docstring) that holds the number 25
    (``25``/``25.0``) and the word "bucket" (the number of lines and of files).
``record readers``
    Modules defining a function that turns a stored row or result dict into something read
    field by field: ``as_record``, ``record_of_row``, ``point_from_row``, ``result_of``, or
    ``field``/``setting``/``config_of`` taking a record.
``result dict subscripts``
    Subscripts with a string key (``r["status"]``) or ``.get("...")`` on a name ``r``, ``res``,
    ``result`` or ``bd`` in ``sweep.py``, ``worker.py``, ``launch/`` and ``results/history.py``:
    a result read or written as a dict after the worker.
``fake framework env vars``
    Distinct ``DLPERF_FAKE_*`` names in ``src/``.
``extra="allow" parts``
    Pydantic classes in ``src/`` whose ``model_config`` has ``extra="allow"``, or that inherit
    (by name, within ``src/``) from one.
``if arch == chains``
    Files under ``src/dlperf/zoo`` with an ``if``/``elif`` comparing a name ``arch`` with
    ``==`` (and the number of such comparisons).
``history wording``
    Lines matching ``session N``, ``round N`` or an ISO date (``2026-01-31``; a date after
    ``--since``, ``--tag`` or ``e.g.``, or in backquotes, is an example, not history): in ``docs/`` other than
    ``perfmodel.md``, in ``docs/perfmodel.md``, in test docstrings and comments (``tests/``,
    ``.py``), and in comments and docstrings of ``src/`` (``perfmodel/`` apart).
``commits``
    Of the commits read, how many have a body, and the median and largest subject length.
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import statistics
import subprocess
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

HISTORY = re.compile(r"\bsession \d+|\bround \d+(?![.\d])|(?<!since )(?<!tag )(?<!e\.g\. )"
                     r"(?<![-\w`])20\d\d-\d\d-\d\d(?![\w`])", re.IGNORECASE)


def py_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if ".venv" not in p.parts)


def count_gets(src: Path) -> tuple[int, int]:
    def lines(p: Path) -> int:
        return sum(".get(" in line for line in p.read_text().splitlines())

    rec = lines(src / "perfmodel" / "records.py")
    tot = sum(lines(p) for p in py_files(src / "perfmodel"))
    return rec, tot


def _names(node: ast.AST) -> set[str]:
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str):
            out.add(n.value)
    return out


def _union_members(node: ast.AST) -> list[ast.AST]:
    """The members of a union annotation (``A | B``, ``Union[A, B]``, ``Optional[A]``); the
    annotation itself when it is not a union."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _union_members(node.left) + _union_members(node.right)
    if isinstance(node, ast.Subscript) and _names(node.value) & {"Union", "Optional"}:
        sl = node.slice
        return [m for e in (sl.elts if isinstance(sl, ast.Tuple) else [sl])
                for m in _union_members(e)]
    return [node]


def _record_or_mapping(node: ast.AST, aliases: dict[str, ast.AST]) -> bool:
    """True where ``node`` holds a union (at its top or inside, e.g. ``Iterable[A | B]``) of
    which one member is ``RunRecord`` and another a ``Mapping``, module-level aliases of one
    resolved; ``Mapping[str, RunRecord]`` is not one."""
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and n.id in aliases and aliases[n.id] is not node:
            if _record_or_mapping(aliases[n.id], {}):
                return True
        members = _union_members(n)
        if len(members) < 2:
            continue
        heads = [(m.value if isinstance(m, ast.Subscript) else m) for m in members]
        names = [ast.unparse(h).split(".")[-1] for h in heads]
        if "RunRecord" in names and "Mapping" in names:
            return True
    return False


def record_mapping_params(src: Path) -> list[str]:
    hits = []
    for p in py_files(src):
        tree = ast.parse(p.read_text())
        aliases = {t.id: n.value for n in tree.body if isinstance(n, ast.Assign)
                   for t in n.targets if isinstance(t, ast.Name)}
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for a in [*n.args.posonlyargs, *n.args.args, *n.args.kwonlyargs]:
                    if a.annotation is None:
                        continue
                    if _record_or_mapping(a.annotation, aliases):
                        hits.append(f"{p.relative_to(src.parent)}:{n.lineno} {n.name}({a.arg})")
    return hits


def base_result_calls(src: Path) -> list[str]:
    hits = []
    for p in py_files(src):
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, ast.Call):
                f = n.func
                name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
                if name == "base_result":
                    hits.append(f"{p.relative_to(src.parent)}:{n.lineno}")
    return hits


def _value_name(v: ast.AST) -> str | None:
    if isinstance(v, ast.Name):
        return v.id
    if isinstance(v, ast.Attribute):
        return v.attr
    if isinstance(v, ast.Subscript) and isinstance(v.slice, ast.Constant):
        return str(v.slice.value)
    if isinstance(v, ast.Call) and v.args and isinstance(v.args[0], ast.Constant):
        return str(v.args[0].value)  # r.get("device"), given("device")
    return None


def label_writers(src: Path) -> list[str]:
    hits = []
    for p in py_files(src):
        tree = ast.parse(p.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for n in ast.walk(fn):
                if not isinstance(n, ast.JoinedStr):
                    continue
                lits = [str(v.value) for v in n.values if isinstance(v, ast.Constant)]
                if any("|" in x for x in lits) or not any(" " in x for x in lits):
                    continue  # a Markdown table row or a file name: not a label
                order = [_value_name(v.value) for v in n.values
                         if isinstance(v, ast.FormattedValue)]
                order = [o for o in order if o in ("device", "precision")]
                if "device" in order and "precision" in order:
                    hits.append(f"{p.relative_to(src.parent)}:{fn.lineno} {fn.name}: "
                                f"{' '.join(order[:2])}")
                    break
            else:
                names = _names(fn)
                if "label" in fn.name and {"device", "precision"} <= names and (
                        "label_of" not in names):
                    hits.append(f"{p.relative_to(src.parent)}:{fn.lineno} {fn.name}: "
                                "by pieces")
    # a nested function is walked inside its parent too: keep one line per (file, line)
    return sorted(set(hits))


def _code_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of lines holding code other than strings and comments."""
    toks = list(tokenize.generate_tokens(io.StringIO(text).readline))
    lines: dict[int, list[str]] = {}
    for t in toks:
        if t.type in (tokenize.COMMENT, tokenize.STRING, tokenize.NL, tokenize.NEWLINE,
                      tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER):
            continue
        lines.setdefault(t.start[0], []).append(t.string)
    for k in sorted(lines):
        yield k, " ".join(lines[k])


def bucket_default(src: Path) -> list[str]:
    hits = []
    for p in py_files(src):
        text = p.read_text()
        for k, code in _code_lines(text):
            line = text.splitlines()[k - 1]
            if re.search(r"(?<![\d.])25(\.0)?(?![\d.])", code) and "bucket" in line.lower():
                hits.append(f"{p.relative_to(src.parent)}:{k}")
    return hits


READERS = {"as_record", "record_of_row", "point_from_row", "result_of"}
FIELD_READERS = {"field", "setting", "config_of"}


def record_readers(src: Path) -> list[str]:
    hits = []
    for p in py_files(src):
        for n in ast.parse(p.read_text()).body:
            if isinstance(n, ast.FunctionDef) and (
                    n.name in READERS or (n.name in FIELD_READERS and n.args.args
                                          and "rec" in n.args.args[0].arg)):
                hits.append(f"{p.relative_to(src.parent)} {n.name}")
    mods: dict[str, list[str]] = {}
    for h in hits:
        m, f = h.split(" ")
        mods.setdefault(m, []).append(f)
    return [f"{m}: {', '.join(fs)}" for m, fs in sorted(mods.items())]


DICT_USE = re.compile(r"\b(r|res|result|bd)(\[\"|\.get\(\")")


def dict_uses(src: Path) -> list[str]:
    files = [src / "sweep.py", src / "worker.py", src / "results" / "history.py",
             *py_files(src / "launch")]
    hits = []
    for p in files:
        for k, line in enumerate(p.read_text().splitlines(), 1):
            if DICT_USE.search(line) and not line.lstrip().startswith("#"):
                hits.append(f"{p.relative_to(src.parent)}:{k}")
    return hits


def fake_env(src: Path) -> list[str]:
    names = set()
    for p in py_files(src):
        names.update(re.findall(r"DLPERF_FAKE_[A-Z_]+", p.read_text()))
    return sorted(names)


def allow_parts(src: Path) -> list[str]:
    classes: dict[str, tuple[list[str], bool, str]] = {}
    for p in py_files(src):
        for n in ast.walk(ast.parse(p.read_text())):
            if not isinstance(n, ast.ClassDef):
                continue
            allow = False
            for st in n.body:
                if (isinstance(st, (ast.Assign, ast.AnnAssign))
                        and "model_config" in ast.unparse(st).split("=")[0]
                        and re.search(r"extra\s*=\s*['\"]allow['\"]", ast.unparse(st))):
                    allow = True
            bases = [ast.unparse(b).split(".")[-1] for b in n.bases]
            classes[n.name] = (bases, allow, f"{p.relative_to(src.parent)}:{n.lineno}")

    def allows(name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name not in classes or name in seen:
            return False
        bases, own, _ = classes[name]
        return own or any(allows(b, seen | {name}) for b in bases)

    return sorted(f"{c[2]} {name}" for name, c in classes.items() if allows(name))


def arch_chains(src: Path) -> list[str]:
    hits = []
    for p in py_files(src / "zoo"):
        n_cmp = 0
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, ast.If) and isinstance(n.test, ast.Compare):
                t = n.test
                if (isinstance(t.left, ast.Name) and t.left.id == "arch"
                        and any(isinstance(o, ast.Eq) for o in t.ops)):
                    n_cmp += 1
        if n_cmp:
            hits.append(f"{p.relative_to(src.parent)}: {n_cmp}")
    return hits


def _comment_and_doc_lines(text: str) -> Iterator[tuple[int, str]]:
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return
    prev = None
    for t in toks:
        if t.type == tokenize.COMMENT:
            yield t.start[0], t.string
        elif t.type == tokenize.STRING and (prev is None or prev.type in (
                tokenize.INDENT, tokenize.NEWLINE, tokenize.NL, tokenize.DEDENT)):
            for i, line in enumerate(t.string.splitlines()):
                yield t.start[0] + i, line
        if t.type not in (tokenize.NL, tokenize.COMMENT):
            prev = t


def history(root: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {"docs (not perfmodel.md)": [], "docs/perfmodel.md": [],
                                 "tests": [], "src (not perfmodel/)": [], "src/perfmodel": []}
    for p in sorted((root / "docs").rglob("*.md")):
        key = "docs/perfmodel.md" if p.name == "perfmodel.md" else "docs (not perfmodel.md)"
        for k, line in enumerate(p.read_text().splitlines(), 1):
            if HISTORY.search(line):
                out[key].append(f"{p.relative_to(root)}:{k}")
    for sub, key in (("tests", "tests"), ("src", "src")):
        for p in py_files(root / sub):
            if key == "src":
                key2 = "src/perfmodel" if "perfmodel" in p.parts else "src (not perfmodel/)"
            else:
                key2 = key
            for k, line in _comment_and_doc_lines(p.read_text()):
                if HISTORY.search(line):
                    out[key2].append(f"{p.relative_to(root)}:{k}")
    return {k: sorted(set(v)) for k, v in out.items()}


def commits(root: Path, rev: str, n: int | None, since: str | None,
            own: bool = False) -> tuple[int, int, float, int]:
    args = ["git", "-C", str(root), "log", "--format=%x00%s%x01%b"]
    if own:  # the branch's own commits: not those merged in from elsewhere, not the merges
        args += ["--first-parent", "--no-merges"]
    args += [f"{since}..{rev}"] if since else ["-n", str(n), rev]
    proc = subprocess.run(args, capture_output=True, text=True, check=False)
    if proc.returncode != 0:  # not a git checkout (an exported tree): no commits to count
        return 0, 0, 0.0, 0
    out = proc.stdout
    entries = [e.split("\x01", 1) for e in out.split("\x00")[1:]]
    if not entries:
        return 0, 0, 0.0, 0
    subj = [len(s) for s, _ in entries]
    return (len(entries), sum(1 for _, b in entries if b.strip()), statistics.median(subj),
            max(subj))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=ROOT)
    ap.add_argument("--log-rev", default="HEAD")
    ap.add_argument("--log-n", type=int, default=357)
    ap.add_argument("--log-since", default=None)
    ap.add_argument("--own", action="store_true",
                    help="count only the branch's own commits (first parent, no merges)")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()
    src = a.root / "src" / "dlperf"
    rec, tot = count_gets(src)
    rows: list[tuple[str, str, list[str]]] = [
        ("perfmodel/records.py .get( (all perfmodel/)", f"{rec} ({tot})", []),
    ]
    for name, hits in (("RunRecord | Mapping parameters", record_mapping_params(src)),
                       ("base_result call sites", base_result_calls(src)),
                       ("label writers (device+precision f-string)", label_writers(src)),
                       ("DDP 25 MiB default (code lines)", bucket_default(src)),
                       ("modules defining a record reader", record_readers(src)),
                       ("result dict subscripts after the worker", dict_uses(src)),
                       ("DLPERF_FAKE_* env vars", fake_env(src)),
                       ('extra="allow" parts', allow_parts(src)),
                       ("zoo files with if arch == chains", arch_chains(src))):
        val = str(len(hits))
        if name.startswith("label"):
            orders = sorted({h.rsplit(": ", 1)[1] for h in hits})
            val += f" (orders: {' | '.join(orders)})"
        if name.startswith("DDP"):
            val += f" lines in {len({h.split(':')[0] for h in hits})} files"
        rows.append((name, val, hits))
    for key, hits in history(a.root).items():
        rows.append((f"history wording: {key}", str(len(hits)), hits))
    n, body, med, mx = commits(a.root, a.log_rev, a.log_n, a.log_since, a.own)
    rng = f"{a.log_since}..{a.log_rev}" if a.log_since else f"{a.log_n} up to {a.log_rev}"
    rows.append((f"commits ({rng}): with a body / median / max subject",
                 f"{body} of {n} / {med:g} / {mx}", []))
    w = max(len(r[0]) for r in rows)
    for name, val, hits in rows:
        print(f"{name:<{w}}  {val}")
        if a.list:
            for h in hits:
                print(f"    {h}")


if __name__ == "__main__":
    main()
