"""Mutated side files for ``benchmarks/fuzz_inputs.py`` (see ``fuzz_mutants.Case``): the results
that a database keeps in ``DB.unsaved/`` until the next writer stores them, and the on-disk
caches of :mod:`dlperf.jsoncache` (the performance model's and the sweep's ceilings).

``unsaved``: the reader is the next writer of the database (``ResultStore(db)``). A kept file
that is a valid result must be stored (``accept``); one that is not JSON, not an object, nested
too deep, lacks its identity, or holds values that would make a damaged row must be refused:
moved to ``quarantine/`` with a warning naming it, the database still writable afterwards
(``refuse``; the reader raises a ConfigError with the warning, for the classifier).

``cache``: the reader is :func:`dlperf.jsoncache.read_json` with a bounds check (every value a
finite number in -50..50, as the residual cache's log ratios). An intact file is read
(``accept``); one changed after writing (digest), written by others or writable by them, a
link, not JSON, nested too deep, or out of bounds is ignored with a warning naming it
(``refuse``); a file of an older format (no envelope) is recomputed without a word (``any``).
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from fuzz_mutants import Case, flip


def _valid_result(batch: int) -> dict[str, Any]:
    from fuzz_databases import result

    return result(batch)


def unsaved_cases(rng: np.random.Generator) -> list[Case]:
    cases: list[Case] = []

    def add(mut: str, data: bytes | str, expect: str) -> None:
        raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data

        def write(d: Path, raw=raw) -> Path:
            from fuzz_databases import make_valid

            d.mkdir(parents=True)
            db = make_valid(d / "r.db")
            folder = Path(f"{db}.unsaved")
            folder.mkdir()
            f = folder / f"kept-{mut[:40]}.json"
            f.write_bytes(raw)
            return f
        cases.append(Case("unsaved", mut, expect, write, (f"kept-{mut[:40]}.json",)))

    good = _valid_result(96)
    text = json.dumps({"sweep": "s", "result": good})
    add("valid", text, "accept")
    add("valid_no_sweep", json.dumps({"result": _valid_result(97)}), "accept")
    for name, data in (("empty", ""), ("not_json", "{oops"), ("list", "[1, 2]"),
                       ("null", "null"), ("string", '"result"'), ("deep", "[" * 300_000),
                       ("deep_object", '{"result": ' + '{"a": ' * 5000 + "1" + "}" * 5001),
                       ("no_result", '{"sweep": "s"}'), ("result_list", '{"result": [1]}'),
                       ("nul", text[:50] + "\0" + text[50:]), ("latin1", b"\xff\xfe{"),
                       ("truncated", text[:len(text) // 2])):
        add(name, data, "refuse")
    for field, value in (("run_key", None), ("status", None), ("status", "finished"),
                         ("batch_size", "big"), ("batch_size", -4), ("summary", "fast"),
                         ("model", 5)):
        bad = {**good, field: value}
        add(f"field_{field}={value}", json.dumps({"sweep": "s", "result": bad}), "refuse")
    for key, value in (("median", -1.0), ("median", 1e300), ("median", "NaN"),
                       ("ci_low", float("inf"))):
        bad = json.loads(json.dumps(good))
        bad["summary"][key] = value
        add(f"summary_{key}={value}", json.dumps({"sweep": "s", "result": bad}), "refuse")
    bad = json.loads(json.dumps(good))
    bad["samples"]["measure"][0] = "slow"
    add("sample_text", json.dumps({"sweep": "s", "result": bad}), "refuse")
    for k in range(12):
        add(f"flip_{k}", flip(text.encode(), rng, 1 + k % 3), "any")
        add(f"truncated_{k}", text[:int(rng.integers(1, len(text)))], "any")
    return cases


def cache_cases(rng: np.random.Generator) -> list[Case]:
    from dlperf.jsoncache import digest

    cases: list[Case] = []
    payload = {"held-out batch": [[0.01 * i, "host", f"a.db:{i}"] for i in range(20)],
               "what-if B->2B": [[-0.2, None, None]]}

    def env(p: Any, sha: str | None = None) -> str:
        return json.dumps({"dlperf_cache": 1, "sha256": sha or digest(p), "payload": p})

    def add(mut: str, data: bytes | str, expect: str, mode: int = 0o600,
            link: bool = False) -> None:
        raw = data.encode() if isinstance(data, str) else data

        def write(d: Path, raw=raw, mode=mode, link=link) -> Path:
            d.mkdir(parents=True)
            f = d / "perfmodel-residuals.json"
            if link:
                target = d / "elsewhere.json"
                target.write_bytes(raw)
                f.symlink_to(target)
            else:
                f.write_bytes(raw)
                os.chmod(f, mode)
            return f
        cases.append(Case("cache", mut, expect, write, ("perfmodel-residuals.json",)))

    good = env(payload)
    add("valid", good, "accept")
    add("old_format", json.dumps(payload), "any")
    add("group_writable", good, "refuse", mode=0o660)
    add("world_writable", good, "refuse", mode=0o666)
    add("a_link", good, "refuse", link=True)
    add("digest_wrong", env(payload, "0" * 64), "refuse")
    edited = json.loads(good)
    edited["payload"]["held-out batch"][3][0] = 0.5  # a plausible value, changed
    add("edited_value", json.dumps(edited), "refuse")
    for name, p in (("huge_value", {"x": [[1e308, None, None]]}),
                    ("nan_value", {"x": [[float("nan"), None, None]]}),
                    ("text_value", {"x": [["0.1", None, None]]}),
                    ("bool_value", {"x": [[True, None, None]]}),
                    ("not_a_list", {"x": 5})):
        add(name, env(p), "refuse")
    add("not_json", "{oops", "refuse")
    add("deep", "[" * 300_000, "refuse")
    add("empty", "", "refuse")
    for k in range(16):
        add(f"flip_{k}", flip(good.encode(), rng, 1 + k % 3), "refuse")
    return cases


def unsaved_reader(path: Path) -> None:
    """The next writer of the kept file's database stores it (accept) or quarantines it
    (a ConfigError with the warning: refuse); the database stays writable either way."""
    from dlperf.errors import ConfigError
    from dlperf.results.store import ResultStore

    db = Path(str(path.parent)[: -len(".unsaved")])
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        with ResultStore(db) as s:
            n = len(s.rows(latest=False))
    with ResultStore(db) as s:  # the next write is not blocked by anything
        s.add(_valid_result(99))
    moved = path.parent / "quarantine" / path.name
    if moved.exists():
        said = " ".join(str(w.message) for w in ws)
        raise ConfigError(f"{path.name} quarantined: {said[:500]}")
    if path.exists():
        raise RuntimeError(f"{path.name} left in place, neither stored nor quarantined")
    if n < 7:
        raise RuntimeError(f"{path.name} disappeared without being stored ({n} rows)")


def cache_reader(path: Path) -> None:
    """:func:`dlperf.jsoncache.read_json` with the residual cache's bounds: the payload
    returned (accept), or None with a warning naming the file (a ConfigError: refuse)."""
    import math

    from dlperf.errors import ConfigError
    from dlperf.jsoncache import read_json

    def check(p: Any) -> None:
        for v in p.values():
            for x in v:
                if not (isinstance(x[0], (int, float)) and not isinstance(x[0], bool)
                        and math.isfinite(x[0]) and abs(x[0]) <= 50):
                    raise ValueError(f"value {x[0]!r}")

    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        got = read_json(path, check)
    if got is None and ws:
        raise ConfigError(" ".join(str(w.message) for w in ws)[:800])
