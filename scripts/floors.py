"""The declared minimum of every core dependency of dlperf (pyproject.toml's ``>=`` bounds), for
``scripts/test_floors.sh``: prints them as pip constraints (``name==version``), or with
``--check`` checks that the installed versions are those minimums.

    python3 scripts/floors.py > floors.txt      # constraints for pip install -c
    python3 scripts/floors.py --check           # exit 1 (naming them) when one differs
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def floors(path: Path = PYPROJECT) -> dict[str, str]:
    """``{name: minimum}`` of ``[project].dependencies``; a dependency without a ``>=`` bound
    is an error (it would have no floor to test)."""
    deps = tomllib.loads(path.read_text())["project"]["dependencies"]
    out = {}
    for d in deps:
        m = re.fullmatch(r"\s*([A-Za-z0-9_.\-]+)\s*>=\s*([0-9][0-9A-Za-z.]*)\s*(?:,.*)?", d)
        if m is None:
            raise SystemExit(f"floors.py: {d!r} has no '>=' minimum to test")
        out[m.group(1)] = m.group(2)
    return out


def _key(v: str) -> tuple[int, ...]:
    """``"1.26.0"`` and ``"1.26"`` -> ``(1, 26)``: release numbers without trailing zeros."""
    parts = [int(x) for x in re.findall(r"\d+", v)]
    while parts and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def main(argv: list[str]) -> int:
    want = floors()
    if argv[:1] != ["--check"]:
        print("\n".join(f"{k}=={v}" for k, v in want.items()))
        return 0
    from importlib.metadata import PackageNotFoundError, version

    bad = []
    for name, v in want.items():
        try:
            have = version(name)
        except PackageNotFoundError:
            have = None
        if have is None or _key(have) != _key(v):
            bad.append(f"{name}: {have} installed, {v} declared")
    if bad:
        print("not at the declared minimum: " + "; ".join(bad), file=sys.stderr)
        return 1
    print("every core dependency at its declared minimum: "
          + ", ".join(f"{k} {v}" for k, v in want.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
