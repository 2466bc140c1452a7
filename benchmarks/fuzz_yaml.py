"""Malformed YAML sweep files for ``benchmarks/fuzz_inputs.py`` (see ``fuzz_mutants.Case``).

Seeds are the project's own sweep files (``benchmarks/**/*.yaml``). Expectations: ``refuse``
for what no sweep file may be (invalid YAML, not UTF-8, a duplicate key, an alias bomb, nesting
deeper than the loader's limit, a file over its size limit, a Python tag, a recursive or
undefined alias), ``accept`` for the unmodified seeds and for seeds using anchors and merge keys
within the budget, ``any`` for random flips and truncations (often still valid YAML).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from fuzz_mutants import REPO, Case, flip

#: The classic "billion laughs" document (9 levels of 9 aliases: 9^9 = 387,420,489 strings when
#: expanded), as published for XML and ported to YAML (e.g. the PyYAML and yq issue trackers).
BILLION_LAUGHS = """a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""


def seeds() -> dict[str, str]:
    """The project's sweep files, by path relative to the repository."""
    return {str(p.relative_to(REPO)): p.read_text(encoding="utf-8")
            for p in sorted((REPO / "benchmarks").rglob("*.yaml"))}


def yaml_cases(rng: np.random.Generator) -> list[Case]:
    cases: list[Case] = []

    def add(mut: str, data: bytes | str, expect: str, heavy: bool = False) -> None:
        raw = data.encode("utf-8") if isinstance(data, str) else data

        def write(d: Path, raw=raw) -> Path:
            d.mkdir(parents=True, exist_ok=True)
            f = d / "sweep.yaml"
            f.write_bytes(raw)
            return f
        cases.append(Case("yaml", mut, expect, write, ("sweep.yaml",), heavy))

    all_seeds = seeds()
    for i, (name, text) in enumerate(all_seeds.items()):
        tag = Path(name).stem
        add(f"seed_{tag}", text, "accept")
        add(f"dup_top_key_{tag}", text + "\nname: again\n", "refuse")
        if "\n  precision:" in text:
            add(f"dup_nested_key_{tag}", text.replace("\n  precision:",
                                                      "\n  precision: fp32\n  precision:", 1),
                "refuse")
        if i % 2 == 0:
            add(f"truncated_{tag}", text[:int(rng.integers(0, len(text)))], "any")
            add(f"flip_{tag}", flip(text.encode(), rng, 1 + i % 3), "any")
    base = all_seeds["benchmarks/cpu/dlbench_threads.yaml"]
    head = base.split("grid:\n", 1)[0]
    add("anchors_within_budget", head.replace("  iterations:", "  iterations: &it", 1)
        + "grid:\n  - {model: fcn5, batch_size: 4, framework: torch, mode: eager, "
          "iterations: *it}\n  - {model: fcn8, batch_size: 4, framework: torch, mode: eager, "
          "iterations: *it}\n", "accept")
    add("merge_key", "name: m\ndefaults: &d {device: cpu, precision: fp32}\ngrid:\n"
        "  - <<: *d\n    model: fcn5\n    batch_size: 4\n", "accept")
    add("billion_laughs", BILLION_LAUGHS, "refuse")
    add("billion_laughs_in_grid", "name: x\ngrid:\n  - model: &m [fcn5, fcn5, fcn5, fcn5]\n"
        + "".join(f"    k{j}: &m{j} [{', '.join(['*m' if j == 0 else f'*m{j - 1}'] * 9)}]\n"
                  for j in range(9)), "refuse")
    add("many_aliases", "name: x\nv: &v 1\nlist: [" + ", ".join(["*v"] * 50_000) + "]\n",
        "refuse")
    add("quadratic_scalar", "name: x\nv: &v " + "x" * 100_000 + "\nlist: ["
        + ", ".join(["*v"] * 200) + "]\n", "refuse")
    add("deep_flow_10000", "name: x\nv: " + "[" * 10_000 + "]" * 10_000 + "\n", "refuse")
    add("deep_flow_maps_5000", "name: x\nv: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n",
        "refuse")
    add("deep_block_200", "name: x\n" + "".join("  " * j + f"k{j}:\n" for j in range(200))
        + "  " * 200 + "1\n", "refuse")
    add("deep_20", "name: x\nv: " + "[" * 20 + "1" + "]" * 20 + "\n", "any")
    add("over_size_limit", base + "#" + "x" * (2 << 20) + "\n", "refuse")
    add("long_line_scalar", "name: " + "y" * (3 << 20) + "\n", "refuse")
    add("tab_indent", base.replace("  device: cpu", "\tdevice: cpu", 1), "refuse")
    add("unclosed_flow", base.replace("]\n", "\n", 1), "refuse")
    add("bad_indent", base.replace("\n  precision:", "\n precision:", 1), "refuse")
    add("unterminated_quote", base.replace("name: dlbench-cpu-threads",
                                           "name: \"dlbench-cpu-threads", 1), "refuse")
    add("latin1_comment", base.encode() + b"# caf\xe9\n", "refuse")
    add("utf16", base.encode("utf-16"), "refuse")
    add("nul_byte", base.encode()[:40] + b"\0" + base.encode()[40:], "refuse")
    add("python_object", "name: !!python/object/apply:os.system ['true']\ngrid: []\n",
        "refuse")
    add("python_name", "name: x\ngrid:\n  - model: !!python/name:os.system\n", "refuse")
    add("recursive_alias", "name: x\nv: &a [1, *a]\ngrid:\n  - model: fcn5\n", "refuse")
    add("undefined_alias", "name: x\ngrid:\n  - model: *nothing\n", "refuse")
    add("unhashable_key", "name: x\n? [a, b]\n: 1\n", "refuse")
    add("two_documents", base + "---\n" + base, "refuse")
    add("empty", "", "any")
    add("comments_only", "# nothing\n", "any")
    add("scalar_document", "hello\n", "any")
    add("list_document", "- a\n- b\n", "any")
    add("huge_int", base.replace("batch_size: 16", "batch_size: " + "9" * 5000, 1), "any")
    add("dup_key_true_yes", "name: x\ntrue: 1\nyes: 2\n", "refuse")
    return cases
