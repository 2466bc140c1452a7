"""dlperf.yamlsafe: a safe YAML loader with limits, no duplicate keys, FILE:LINE errors."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import yaml

from dlperf.errors import ConfigError
from dlperf.yamlsafe import (
    MAX_ALIAS_NODES,
    MAX_DEPTH,
    MAX_YAML_BYTES,
    LimitedSafeLoader,
    YamlError,
    load_yaml,
    load_yaml_file,
)

REPO = Path(__file__).resolve().parents[2]
LAUGHS = "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 9) if p else '1, 2, 3, 4, 5, 6, 7, 8, 9'}]\n"
                 for p, c in zip([None, *"abcdefgh"], "abcdefghi"))


def test_sweep_files_load_as_safe_load_does():
    files = sorted((REPO / "benchmarks").rglob("*.yaml"))
    assert files
    for f in files:
        assert load_yaml_file(f) == yaml.safe_load(f.read_text()), f
    assert issubclass(LimitedSafeLoader, yaml.SafeLoader) and issubclass(YamlError, ConfigError)


@pytest.mark.parametrize("text, line, key, first", [
    ("name: a\ngrid: []\nname: b\n", 3, "'name'", 1),
    ("name: a\ndefaults:\n  device: cpu\n  threads: 1\n  device: cuda\n", 5, "'device'", 3),
    ("grid:\n  - {model: fcn5, model: fcn8}\n", 2, "'model'", 2),
    ("a: 1\ntrue: 2\nyes: 3\n", 3, r"'yes' \(read as True\)", 2),
])
def test_duplicate_keys_refused_with_lines(text, line, key, first):
    with pytest.raises(YamlError, match=rf"^s\.yaml:{line}:\d+: duplicate key {key} \(first at "
                                        rf"line {first}"):
        load_yaml(text, "s.yaml")
    try:
        load_yaml(text, "s.yaml")
    except YamlError as e:
        assert e.line == line and e.path == "s.yaml"


def test_merge_keys_may_be_overridden_but_not_duplicated():
    d = load_yaml("base: &b {device: cpu, threads: 1}\nx:\n  <<: *b\n  threads: 2\n")
    assert d["x"] == {"device": "cpu", "threads": 2}
    with pytest.raises(YamlError, match=r":3:\d+: duplicate key 'a'"):
        load_yaml("x:\n  <<: {a: 1,\n        a: 2}\n  b: 3\n")


def test_billion_laughs_refused_fast_with_a_short_message():
    assert len(LAUGHS) < 500
    t0 = time.perf_counter()
    with pytest.raises(YamlError) as e:
        load_yaml(LAUGHS, "laughs.yaml")
    assert time.perf_counter() - t0 < 1.0
    msg = str(e.value)
    assert msg.startswith("laughs.yaml:5:") and "aliases expand the document by more than " \
        f"{MAX_ALIAS_NODES:,} nodes" in msg and len(msg) < 400


def test_aliases_within_budget_load():
    d = load_yaml("it: &it {min_iters: 3}\ngrid:\n  - {model: a, iterations: *it}\n"
                  "  - {model: b, iterations: *it}\n")
    assert d["grid"][1]["iterations"] == {"min_iters": 3}
    # 200 references of a 100,000-character string: 20 MB when expanded
    with pytest.raises(YamlError, match=r"1,048,576 characters"):
        load_yaml("v: &v " + "x" * 100_000 + "\nl: [" + ", ".join(["*v"] * 200) + "]\n")


def test_recursive_and_undefined_aliases_refused():
    with pytest.raises(YamlError, match=r"^f:1:\d+: alias \*a is used inside the node it names"):
        load_yaml("v: &a [1, *a]\n", "f")
    with pytest.raises(YamlError, match=r"^f:1:\d+: not valid YAML: found undefined alias"):
        load_yaml("v: *nothing\n", "f")


def test_nesting_limit_no_recursion_error():
    ok = "v: " + "[" * (MAX_DEPTH - 1) + "1" + "]" * (MAX_DEPTH - 1) + "\n"
    assert load_yaml(ok)["v"] is not None
    for text in ("v: " + "[" * MAX_DEPTH + "1" + "]" * MAX_DEPTH + "\n",
                 "v: " + "[" * 10_000 + "]" * 10_000 + "\n",
                 "".join("  " * j + f"k{j}:\n" for j in range(300)) + "  " * 300 + "1\n"):
        with pytest.raises(YamlError, match=rf"collections nested more than {MAX_DEPTH} levels deep"):
            load_yaml(text)


def test_size_limit_checked_before_reading(tmp_path):
    f = tmp_path / "big.yaml"
    f.write_text("name: x\n#" + "y" * MAX_YAML_BYTES + "\n")
    with pytest.raises(YamlError, match=r"big\.yaml: 1,048,586 bytes, more than the 1,048,576-"
                                        r"byte limit"):
        load_yaml_file(f)
    with pytest.raises(YamlError, match=r"more than the 5-byte limit"):
        load_yaml("name: x\n", max_bytes=5)


@pytest.mark.parametrize("raw, match", [
    (b"name: x\n# caf\xe9\n", r"^f\.yaml:2: not UTF-8 text \(byte 0xe9 at offset 13"),
    (b"name: x\nv: a\0b\n", r"^f\.yaml:2: not valid YAML: character U\+0000 is not allowed"),
    (b"name: !!python/object/apply:os.system ['true']\n",
     (r"^f\.yaml:1:7: not valid YAML: could not determine a constructor for the tag "
      r"'tag:yaml.org,2002:python/object/apply:os.system'")),
    (b"a: 1\n\tb: 2\n", r"^f\.yaml:2:1: not valid YAML: found character '\\t'"),
    (b"a: [1, 2\n", r"^f\.yaml:2:1: not valid YAML: expected ',' or ']'"),
    (b"a: 1\n---\nb: 2\n", r"^f\.yaml:2:1: not valid YAML: but found another document"),
    (b"n: " + b"9" * 5000 + b"\n", r"^f\.yaml:1:4: cannot read this value: Exceeds the limit"),
])
def test_bad_documents_refused_with_file_and_line(tmp_path, raw, match):
    f = tmp_path / "f.yaml"
    f.write_bytes(raw)
    with pytest.raises(YamlError, match=match.replace("^f", "^" + str(tmp_path).replace(
            "\\", "\\\\") + "/f")):
        load_yaml_file(f)
    with pytest.raises(YamlError, match=match):
        load_yaml(raw, "f.yaml")


def test_expect_mapping_and_unreadable_files(tmp_path):
    for text, got in (("", "an empty document"), ("- a\n", "a list"),
                      ("1: x\n", "a mapping with a non-text key 1")):
        with pytest.raises(YamlError, match=rf"^c\.yaml: expected a mapping of names to values "
                                            rf"at the top, got {got}"):
            load_yaml(text, "c.yaml", expect_mapping=True)
    assert load_yaml("", "c.yaml") is None
    fifo = tmp_path / "p.yaml"
    os.mkfifo(fifo)
    with pytest.raises(YamlError, match=r"p\.yaml is a FIFO \(named pipe\), not a regular file"):
        load_yaml_file(fifo)
    with pytest.raises(YamlError, match=r"cannot read YAML file .*nope\.yaml: No such file"):
        load_yaml_file(tmp_path / "nope.yaml")
