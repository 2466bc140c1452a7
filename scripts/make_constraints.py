"""Write constraints/ci.txt: the exact versions CI installs, from the current environment.

``python scripts/make_constraints.py [--extras torch,jax,...] [--out constraints/ci.txt]`` reads
dlperf's requirements from pyproject.toml (the core dependencies and the extras that
scripts/test.sh installs), follows every requirement through the installed distributions'
own metadata (``importlib.metadata``: their ``Requires-Dist``, markers evaluated for this
interpreter and the extras asked for) and writes ``name==version`` for each distribution
reached, sorted. pyproject.toml keeps ranges (so dlperf installs beside a user's framework,
docs/install.md); this file pins what CI tested, and scripts/test.sh installs with
``pip install -c constraints/ci.txt``. Run it with the venv's interpreter after upgrading a
package there, and commit the result.

Exit status 1 (naming it) when a requirement has no installed distribution: the environment
is not the one the extras describe.
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
#: The extras scripts/test.sh installs.
CI_EXTRAS = ("torch", "jax", "tensorflow-cpu", "hf", "notebook", "test")


def requirements(pyproject: Path, extras: list[str]) -> list[Requirement]:
    """dlperf's core requirements and those of ``extras`` (pyproject.toml's own)."""
    project = tomllib.loads(pyproject.read_text())["project"]
    reqs = list(project["dependencies"])
    for e in extras:
        if e not in project["optional-dependencies"]:
            raise SystemExit(f"make_constraints: pyproject.toml has no extra {e!r}; extras: "
                             f"{', '.join(project['optional-dependencies'])}")
        reqs += project["optional-dependencies"][e]
    return [Requirement(r) for r in reqs]


def closure(reqs: list[Requirement]) -> dict[str, str]:
    """``{canonical name: installed version}`` of every distribution ``reqs`` reach here.

    Raises:
        SystemExit: a requirement without an installed distribution (its name).
    """
    found: dict[str, str] = {}
    todo: list[tuple[Requirement, frozenset[str]]] = [(r, frozenset()) for r in reqs]
    seen_extras: dict[str, set[str]] = {}
    while todo:
        req, parent_extras = todo.pop()
        # a requirement of a parent installed with extras counts if its marker holds for one
        if req.marker is not None and not any(
                req.marker.evaluate({"extra": e}) for e in (parent_extras or {""})):
            continue
        name = canonicalize_name(req.name)
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            raise SystemExit(f"make_constraints: {req.name} (from {req}) is not installed "
                             "here; install dlperf with the CI extras first") from None
        new_extras = set(req.extras) - seen_extras.get(name, set())
        if name in found and not new_extras:
            continue
        found[name] = dist.version
        seen_extras.setdefault(name, set()).update(req.extras)
        for text in dist.requires or []:
            todo.append((Requirement(text), frozenset(req.extras)))
    return found


def main(argv: list[str] | None = None) -> int:
    """Write the constraints file (module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--extras", default=",".join(CI_EXTRAS))
    ap.add_argument("--out", default=str(ROOT / "constraints" / "ci.txt"))
    a = ap.parse_args(argv)
    extras = [e for e in a.extras.split(",") if e]
    pins = closure(requirements(ROOT / "pyproject.toml", extras))
    pins.pop("dlperf", None)
    lines = ["# Exact versions CI installs (scripts/test.sh: pip install -c constraints/ci.txt).",
             f"# Written by scripts/make_constraints.py from the environment of Python "
             f"{sys.version.split()[0]}",
             f"# for dlperf's dependencies and the extras {', '.join(extras)};",
             "# regenerate it after upgrading a package there. pyproject.toml keeps ranges",
             "# (docs/install.md).",
             *(f"{n}=={v}" for n, v in sorted(pins.items()))]
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {a.out}: {len(pins)} pins")
    return 0


if __name__ == "__main__":
    sys.exit(main())
