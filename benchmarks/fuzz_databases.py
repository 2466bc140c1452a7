"""Attack dlperf's readers and writers with damaged results files; count how each run ends.

A valid results file (ok and failed results of a tiny model, raw samples, an all-reduce run, a
sweep record, checksums) is mutated, then each command that reads or writes a results file is
run on it, in this process, with a time limit:

* **values inside rows** (``value_*``): text where a number belongs (``'NaN'``, ``'fast'``),
  numbers where text belongs, negative, huge and non-finite times, a status that is none,
  deeply nested, truncated or non-object JSON, a record whose summary is negative, raw samples
  that are text or negative, all-reduce rows of the wrong types, sweep records that are not
  JSON; each with its row's checksum kept (the checksum must catch it) or dropped (a file from
  before checksums: the value checks must);
* **the file** (``file_*``): random bits flipped (bit rot), bytes zeroed, truncated, its header
  changed, a schema version that is text, 0, negative or newer, a table or column missing, a
  foreign SQLite file, an empty file, a text file, a hot journal of garbage, bad files in its
  ``.unsaved/`` folder, a claim whose heartbeat lies in the future.

Commands: ``results`` (table, CSV, JSON with samples, ``--compare frameworks``), ``report``,
``compare``, ``merge`` (the damaged file as a source; and as the target), ``sweep --dry-run``,
``predict``, and storing a new result into it as ``run`` does (the writer).

Each run ends as one of: ``ok`` (exit 0, or a clear refusal: exit 1/2 with an ``error:`` line,
no traceback), ``raw_traceback`` (an exception escaped), ``hang`` (over the time limit),
``lost`` (a reader changed the file, or a writer lost a row that was intact before), and for
the readers of ``file_bitflip_*`` also ``silent_change`` (the JSON export differs from the
original's without a warning or refusal: numbers changed silently). The goal: 0 raw
tracebacks, 0 hangs, 0 lost, 0 silent changes.

    PYTHONPATH=src python benchmarks/fuzz_databases.py [--seed 0] [--mutants 70] \
        [--small N] [--limit-s 20] [-o benchmarks/results/cpu-dev/fuzz_databases.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import resource
import shutil
import signal
import sqlite3
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("DLPERF_FAKE_FRAMEWORK", "1")  # sweep --dry-run of fake points


def _register_fake() -> None:
    """The fake framework in this process even when dlperf was imported before the variable
    was set (a test run in a process shared with other tests)."""
    from dlperf import registry

    registry.FRAMEWORKS.setdefault("fake", registry.TEST_DOUBLES["fake"])
    registry.FRAMEWORK_MODES.setdefault("fake", registry.TEST_DOUBLES["fake"].modes)


_register_fake()
os.environ.setdefault("COLUMNS", "200")
if "DLPERF_CACHE_DIR" not in os.environ:  # predict's caches: this run's own, not the user's
    os.environ["DLPERF_CACHE_DIR"] = tempfile.mkdtemp(prefix="dlperf-fuzzdb-cache-")

ROOT = Path(__file__).resolve().parents[1]
GOAL_BAD = ("raw_traceback", "hang", "lost", "silent_change")


class CaseTimeout(BaseException):
    """SIGALRM in a run over its time limit (a BaseException: no ``except Exception`` in the
    code under test swallows it)."""


def _alarm(signum: int, frame: Any) -> None:
    raise CaseTimeout()


# --- the valid file ---------------------------------------------------------------------------

def result(batch: int, status: str = "ok", model: str = "fcn5_tiny", seed: int = 0) -> Any:
    """A result of the tiny model on the CPU (times around 10 ms), as a worker makes it."""
    from dlperf.config import make_run_config
    from dlperf.results.schema import new_record
    from dlperf.stats import summarize, throughput

    rng = random.Random(batch * 31 + seed)
    cfg = make_run_config(model=model, batch_size=batch, framework="torch", device="cpu")
    r = new_record(cfg, status, None if status == "ok" else "out of memory").to_dict()
    if status == "ok":
        times = [0.001 * batch ** 0.5 * (1 + 0.02 * rng.random()) for _ in range(12)]
        r.update(summary=summarize(times).to_dict(), throughput=throughput(12, batch, sum(times)),
                 samples={"first": [times[0] * 3], "warmup": times[:2], "measure": times},
                 losses={"first": [2.3], "warmup": [2.2, 2.2], "measure": [2.0] * 12},
                 n_measured=12, steady_state=True, warnings=["busy host (load 2.0)"])
    return r


ALLREDUCE = {"benchmark": "allreduce", "backend": "gloo", "nranks": 2, "dtype": "float32",
             "rows": [{"size_bytes": 1 << k, "count": (1 << k) // 4, "time_s": 1e-5 * (k + 1),
                       "algbw_GBps": 0.1 * k, "busbw_GBps": 0.1 * k, "imbalance": 0.01,
                       "wrong": 0} for k in range(3, 8)]}


def make_valid(path: Path) -> Path:
    """The file every mutant starts from."""
    from dlperf.results.store import ResultStore

    with ResultStore(path) as s:
        s.add_sweep("fuzz", {"name": "fuzz", "grid": [{"batch_size": [8, 16]}]},
                    "2026-01-01T00:00:00+00:00")
        for b in (4, 8, 16, 32):
            s.add(result(b), sweep="fuzz")
        s.add(result(64, "oom"), sweep="fuzz")
        s.add(result(8, model="fcn8_tiny"))
        s.add_collectives(ALLREDUCE, "2026-01-01T00:00:00+00:00")
    return path


# --- mutations --------------------------------------------------------------------------------

REAL_COLS = ["step_time_median_s", "step_time_mean_s", "step_time_ci_low_s", "samples_per_s",
             "measured_time_s", "peak_rss_bytes", "loss_last", "mfu", "first_iter_s"]
INT_COLS = ["batch_size", "n_measured", "threads", "steady_state", "samples", "n_outliers"]
TEXT_COLS = ["model", "framework", "device", "precision", "warnings", "error", "created_at"]
BAD_REALS = ["'NaN'", "'fast'", "-1.0", "1e300", "-0.0001", "X'00ff'", "'1e400'", "'inf'"]
BAD_INTS = ["'eight'", "-5", "2.5", "9223372036854775807", "'1'", "X'01'"]
BAD_TEXTS = ["12", "3.5", "X'41'", "'" + "w" * 70_000_000 + "'"]


@dataclass
class Mutant:
    """A damaged file: ``make(folder) -> path`` writes it; ``kind`` groups the report;
    ``bitflip``: a mutant whose reader output is compared with the original's."""

    name: str
    kind: str
    make: Callable[[Path], Path]
    bitflip: bool = False


def _sql_mutant(name: str, sqls: list[str], keep_sums: bool, args: tuple = ()) -> Mutant:
    def make(folder: Path) -> Path:
        db = make_valid(folder / "r.db")
        con = sqlite3.connect(db)
        for q in sqls:
            con.execute(q, args) if "?" in q else con.execute(q)
        if not keep_sums:
            con.execute("DROP TABLE IF EXISTS row_sums")
        con.commit()
        con.close()
        return db
    return Mutant(f"{name}{'' if keep_sums else '_nosums'}", "value", make)


def value_mutants(rng: random.Random) -> list[Mutant]:
    out: list[Mutant] = []
    for keep in (True, False):
        for c in REAL_COLS:
            v = rng.choice(BAD_REALS)
            if "70000000" in v:
                continue
            out.append(_sql_mutant(f"value_{c}={v[:10]}", [f"UPDATE results SET {c}={v} WHERE id="
                                                           f"{rng.randint(1, 4)}"], keep))
        for c in INT_COLS:
            v = rng.choice(BAD_INTS)
            out.append(_sql_mutant(f"value_{c}={v[:10]}",
                                   [f"UPDATE results SET {c}={v} WHERE id={rng.randint(1, 4)}"],
                                   keep))
        for c in TEXT_COLS:
            v = rng.choice(BAD_TEXTS[:3])
            out.append(_sql_mutant(f"value_{c}={v[:10]}",
                                   [f"UPDATE results SET {c}={v} WHERE id={rng.randint(1, 5)}"],
                                   keep))
        deep = '{"a": ' + "[" * 50_000 + "]" * 50_000 + "}"
        for nm, js in (("deep", deep), ("array", "[1, 2]"), ("truncated", '{"run_key": "ab'),
                       ("null", "null"), ("number", "7"), ("bad_summary",
                                                             '{"summary": {"median": -1}}')):
            out.append(_sql_mutant(f"value_json_{nm}", ["UPDATE results SET result_json=? "
                                                       "WHERE id=2"], keep, (js,)))
        out.append(_sql_mutant("value_json_summary_nan", [
            "UPDATE results SET result_json=json_set(result_json, '$.summary.median', 'NaN') "
            "WHERE id=3"], keep))
        out.append(_sql_mutant("value_json_summary_huge", [
            "UPDATE results SET result_json=json_set(result_json, '$.summary.median', 1e300) "
            "WHERE id=3"], keep))
        out.append(_sql_mutant("value_json_batch_text", [
            "UPDATE results SET result_json=json_set(result_json, '$.batch_size', 'big') "
            "WHERE id=1"], keep))
        out.append(_sql_mutant("value_status", ["UPDATE results SET status='finished' "
                                                "WHERE id=1"], keep))
        out.append(_sql_mutant("value_run_key_empty", ["UPDATE results SET run_key='' "
                                                       "WHERE id=1"], keep))
        for nm, v in (("text", "'slow'"), ("negative", "-0.5"), ("huge", "1e300"),
                      ("blob", "X'00'")):
            out.append(_sql_mutant(f"value_sample_{nm}", [
                f"UPDATE samples SET step_time_s={v} WHERE result_id=2 AND idx=3 "
                "AND phase='measure'"], keep))
        out.append(_sql_mutant("value_sample_loss_text", [
            "UPDATE samples SET loss='low' WHERE result_id=1 AND idx=0 AND phase='measure'"],
            keep))
        out.append(_sql_mutant("value_samples_deleted", ["DELETE FROM samples WHERE "
                                                         "result_id=3"], keep))
    for nm, q in (("size_text", "UPDATE collectives SET size_bytes='big'"),
                  ("time_negative", "UPDATE collectives SET time_s=-1 WHERE id=2"),
                  ("busbw_text", "UPDATE collectives SET busbw_gbps='NaN'"),
                  ("run_json_deep", "UPDATE collectives SET run_json='" + "[" * 50_000 + "'"),
                  ("sweep_config_garbage", "UPDATE sweeps SET config_json='{oops'")):
        out.append(_sql_mutant(f"value_collective_{nm}", [q], True))
    return out


def _file_mutant(name: str, fn: Callable[[Path, random.Random], None], rng_seed: int,
                 bitflip: bool = False) -> Mutant:
    def make(folder: Path) -> Path:
        db = make_valid(folder / "r.db")
        if bitflip:  # the file as it was, for the comparison of what readers show
            shutil.copyfile(db, folder / "intact.db")
        fn(db, random.Random(rng_seed))
        return db
    return Mutant(name, "file", make, bitflip)


def _flip_bits(k: int) -> Callable[[Path, random.Random], None]:
    def fn(db: Path, rng: random.Random) -> None:
        b = bytearray(db.read_bytes())
        for _ in range(k):
            i = rng.randrange(100, len(b))  # past the header's first bytes
            b[i] ^= 1 << rng.randrange(8)
        db.write_bytes(bytes(b))
    return fn


def _zero(db: Path, rng: random.Random) -> None:
    b = bytearray(db.read_bytes())
    page = 4096
    i = rng.randrange(1, max(2, len(b) // page)) * page
    b[i:i + page] = bytes(min(page, len(b) - i))
    db.write_bytes(bytes(b))


def _truncate(db: Path, rng: random.Random) -> None:
    b = db.read_bytes()
    db.write_bytes(b[:rng.randrange(0, len(b))])


def _sql(*qs: str) -> Callable[[Path, random.Random], None]:
    def fn(db: Path, rng: random.Random) -> None:
        con = sqlite3.connect(db)
        for q in qs:
            con.execute(q)
        con.commit()
        con.close()
    return fn


def _replace(data: bytes) -> Callable[[Path, random.Random], None]:
    def fn(db: Path, rng: random.Random) -> None:
        db.write_bytes(data)
    return fn


def _journal(db: Path, rng: random.Random) -> None:
    Path(f"{db}-journal").write_bytes(bytes(rng.randrange(256) for _ in range(3000)))


def _unsaved(db: Path, rng: random.Random) -> None:
    folder = Path(f"{db}.unsaved")
    folder.mkdir()
    (folder / "a.json").write_text("{not json")
    (folder / "b.json").write_text(json.dumps({"result": {"run_key": None}}))
    (folder / "c.json").write_text("[" * 200_000)
    bad = result(128)
    bad["summary"]["median"] = "NaN"
    (folder / "d.json").write_text(json.dumps({"sweep": None, "result": bad}))
    (folder / "e.json").write_text(json.dumps({"sweep": None, "result": result(256)}))


def _future_claim(db: Path, rng: random.Random) -> None:
    from dlperf.config import make_run_config
    from dlperf.results.claims import CLAIMS_SQL

    key = make_run_config(model="fcn5_tiny", batch_size=2, framework="fake").run_key()
    t = time.time() + 10**7
    con = sqlite3.connect(db)
    con.execute(CLAIMS_SQL)
    con.execute("INSERT INTO claims VALUES (?, 'x', 1, 'another-host', 's', ?, ?)", (key, t, t))
    con.commit()
    con.close()


def file_mutants(rng: random.Random, n_flips: int) -> list[Mutant]:
    out = [_file_mutant(f"file_bitflip_{i}_{k}", _flip_bits(k), rng.randrange(1 << 30),
                        bitflip=True)
           for i in range(n_flips) for k in (1 + i % 4,)]
    out += [_file_mutant(f"file_zero_page_{i}", _zero, rng.randrange(1 << 30)) for i in range(4)]
    out += [_file_mutant(f"file_truncate_{i}", _truncate, rng.randrange(1 << 30))
            for i in range(4)]
    out += [
        _file_mutant("file_header", lambda db, r: db.write_bytes(
            b"SQLite format 2\0" + db.read_bytes()[16:]), 1),
        _file_mutant("file_version_text", _sql("UPDATE meta SET value='ten' "
                                               "WHERE key='schema_version'"), 1),
        _file_mutant("file_version_zero", _sql("UPDATE meta SET value='0' "
                                               "WHERE key='schema_version'"), 1),
        _file_mutant("file_version_negative", _sql("UPDATE meta SET value='-3' "
                                                   "WHERE key='schema_version'"), 1),
        _file_mutant("file_version_newer", _sql("UPDATE meta SET value='99' "
                                                "WHERE key='schema_version'"), 1),
        _file_mutant("file_version_huge", _sql("UPDATE meta SET value='"
                                               + "9" * 40 + "' WHERE key='schema_version'"), 1),
        _file_mutant("file_version_missing", _sql("DELETE FROM meta"), 1),
        _file_mutant("file_no_samples", _sql("DROP TABLE samples"), 1),
        _file_mutant("file_no_results", _sql("DROP TABLE results"), 1),
        _file_mutant("file_no_collectives", _sql("DROP TABLE collectives"), 1),
        _file_mutant("file_column_renamed", _sql("ALTER TABLE results RENAME COLUMN status "
                                                 "TO state"), 1),
        _file_mutant("file_foreign", _replace(b""), 1),  # replaced below by a foreign db
        _file_mutant("file_empty", _replace(b""), 1),
        _file_mutant("file_text", _replace(b"id,run_key\n1,a\n" * 100), 1),
        _file_mutant("file_random", lambda db, r: db.write_bytes(
            bytes(r.randrange(256) for _ in range(8192))), 2),
        _file_mutant("file_hot_journal_garbage", _journal, 3),
        _file_mutant("file_unsaved_garbage", _unsaved, 4),
        _file_mutant("file_future_claim", _future_claim, 5),
        _file_mutant("file_row_sums_garbage", _sql("UPDATE row_sums SET row_sha='x'"), 6),
        _file_mutant("file_row_sums_gone", _sql("DROP TABLE row_sums"), 6),
    ]

    def foreign(folder: Path) -> Path:
        db = folder / "r.db"
        con = sqlite3.connect(db)
        con.execute("CREATE TABLE users (name TEXT)")
        con.execute("INSERT INTO users VALUES ('ada')")
        con.commit()
        con.close()
        return db
    out = [m if m.name != "file_foreign" else Mutant("file_foreign", "file", foreign)
           for m in out]
    return out


# --- commands ---------------------------------------------------------------------------------

SWEEP = ("name: fuzz\ndefaults: {framework: fake, model: fcn5_tiny, device: cpu}\n"
         "grid:\n  - batch_size: [2, 4]\n")

#: name -> (arguments with {db}, {out}, {other}, {yaml}; is it a writer of {db}).
COMMANDS: dict[str, tuple[list[str], bool]] = {
    "results": (["results", "--db", "{db}"], False),
    "results_all": (["results", "--db", "{db}", "--all"], False),
    "results_csv": (["results", "--db", "{db}", "-o", "{out}/r.csv"], False),
    "results_json": (["results", "--db", "{db}", "-f", "json", "--samples"], False),
    "compare_frameworks": (["results", "--db", "{db}", "--compare", "frameworks"], False),
    "compare_allreduce": (["results", "--db", "{db}", "--compare", "allreduce"], False),
    "report": (["report", "--db", "{db}", "-o", "{out}/rep"], False),
    "compare": (["compare", "{db}", "{other}"], False),
    "merge_from": (["merge", "{db}", "--db", "{out}/m.db"], False),
    "merge_into": (["merge", "{other}", "--db", "{db}"], True),
    "dry_run": (["sweep", "{yaml}", "--db", "{db}", "--dry-run"], False),
    "predict": (["predict", "--db", "{db}", "--model", "fcn5_tiny", "--batch-size", "48"],
                False),
    "store": (["<store>"], True),
}


def rows_of(db: Path) -> set[tuple[Any, ...]] | None:
    """The intact rows of ``db`` (run key, created_at, status), read as dlperf's readers do;
    None when the file is not readable."""
    from dlperf.results.store import ResultStore

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with ResultStore(db, read_only=True) as s:
                return {(r["run_key"], r["created_at"], r["status"])
                        for r in s.rows(latest=False)}
    except Exception:  # noqa: BLE001 - not readable: nothing to lose by this measure
        return None


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())
            if p.is_file() and p.name.startswith("r.db")}


def export(db: Path) -> tuple[str | None, bool]:
    """(``results --all -f json --samples`` output or None on a refusal, whether a warning was
    printed)."""
    from typer.testing import CliRunner

    from dlperf.cli import app

    r = CliRunner().invoke(app, ["results", "--db", str(db), "--all", "-f", "json",
                                 "--samples"])
    if r.exit_code != 0 or (r.exception and not isinstance(r.exception, SystemExit)):
        return None, True
    return r.stdout, "warning:" in _stderr(r)


def _stderr(r: Any) -> str:
    """What a command printed on stderr (dlperf's warnings and errors), without stdout."""
    try:
        return str(r.stderr)
    except (ValueError, AttributeError):
        return r.output.replace(r.stdout, "")


def _norm(text: str | None, folder: Path) -> str | None:
    """An export with the file's own path taken out (the intact copy has another name)."""
    return None if text is None else text.replace(str(folder / "intact.db"), "DB").replace(
        str(folder / "r.db"), "DB")


def run_command(name: str, db: Path, folder: Path, other: Path, yaml: Path) -> dict[str, Any]:
    """One command on ``db``; the outcome fields (see the module docstring)."""
    from typer.testing import CliRunner

    from dlperf.cli import app

    args, writer = COMMANDS[name]
    out = folder / f"out-{name}"
    out.mkdir()
    rec: dict[str, Any] = {"command": name}
    before_rows = rows_of(db) if writer else None
    before = snapshot(folder)
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings(record=True) as ws:
            warnings.simplefilter("always")
            if args == ["<store>"]:
                code, text = _store_one(db)
                errors = text
            else:
                a = [x.format(db=db, out=out, other=other, yaml=yaml) for x in args]
                r = CliRunner().invoke(app, a, catch_exceptions=True)
                text = r.output
                errors = _stderr(r)
                code = r.exit_code
                if r.exception is not None and not isinstance(r.exception, SystemExit):
                    raise r.exception
        rec["exit"] = code
        rec["warned"] = "warning:" in errors or any(
            w.category.__name__ in ("DamagedRows", "CacheIgnored") for w in ws)
        rec["message"] = " ".join(text.split())[-300:]
        rec["outcome"] = "ok" if code in (0, 1, 2) and "Traceback" not in text else \
            "raw_traceback"
        if code in (1, 2) and "error" not in text and code == 2:
            rec["outcome"] = "raw_traceback"  # exit 2 without a message is no clear refusal
    except CaseTimeout:
        rec.update(outcome="hang", exit=None)
    except BaseException as e:  # noqa: BLE001 - counted
        rec.update(outcome="raw_traceback", exit=None,
                   error=f"{type(e).__name__}: {str(e)[:300]}",
                   where=traceback.format_exc(limit=-3)[-800:])
    rec["seconds"] = round(time.perf_counter() - t0, 3)
    if rec["outcome"] == "hang":
        return rec
    if writer:
        after_rows = rows_of(db)
        if before_rows and (after_rows is None or not before_rows <= after_rows):
            rec["outcome"] = "lost"
            rec["lost_rows"] = len(before_rows - (after_rows or set()))
    else:
        after = snapshot(folder)
        if after != before:
            rec["outcome"] = "lost"
            rec["changed"] = sorted(k for k in set(before) | set(after)
                                    if before.get(k) != after.get(k))
    return rec


def _store_one(db: Path) -> tuple[int, str]:
    """Store a new result into ``db`` as ``dlperf run`` does (the CLI's error handling:
    a DlperfError is a clear refusal, exit 2)."""
    from dlperf.errors import DlperfError
    from dlperf.results.store import ResultStore
    from dlperf.results.unsaved import store_or_keep

    try:
        with ResultStore(db) as s:
            store_or_keep(s, result(512, seed=7), "fuzz")
        return 0, ""
    except DlperfError as e:
        return 2, f"error: {e}"
    except sqlite3.Error as e:  # the CLI's guard words these too (exit 2)
        return 2, f"error: the results file could not be used ({e})"


def pick_commands(mutant: Mutant, rng: random.Random, per: int) -> list[str]:
    """The commands run on one mutant: the readers that print numbers and the writers always,
    the rest drawn."""
    fixed = ["results_json", "store", "merge_into", "merge_from"]
    rest = [c for c in COMMANDS if c not in fixed]
    return fixed + rng.sample(rest, max(0, min(len(rest), per - len(fixed))))


def run(mutants: list[Mutant], per: int, seed: int, limit_s: float,
        out: Path | None = None, meta: dict | None = None) -> dict[str, Any]:
    """Every mutant through its commands; the record (also written to ``out``)."""
    rng = random.Random(seed)
    records: list[dict[str, Any]] = []
    old = signal.signal(signal.SIGALRM, _alarm)
    old_tmpdir = os.environ.get("TMPDIR")
    t_start = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="dlperf-fuzzdb-") as tmp:
            base = Path(tmp)
            (base / "orig").mkdir()
            yaml = base / "sweep.yaml"
            yaml.write_text(SWEEP)
            for i, m in enumerate(mutants):
                for cmd in pick_commands(m, rng, per):
                    folder = base / f"{i}-{cmd}"
                    folder.mkdir()
                    other = make_valid(folder / "other.db")
                    try:
                        db = m.make(folder)
                    except Exception as e:  # noqa: BLE001 - a mutant that cannot be made
                        records.append({"mutant": m.name, "kind": m.kind, "command": cmd,
                                        "outcome": "skipped", "error": repr(e)[:200]})
                        continue
                    os.environ["TMPDIR"] = str(folder)
                    signal.setitimer(signal.ITIMER_REAL, limit_s)
                    try:
                        rec = run_command(cmd, db, folder, other, yaml)
                    finally:
                        signal.setitimer(signal.ITIMER_REAL, 0)
                    if m.bitflip and cmd == "results_json" and rec["outcome"] == "ok":
                        text, warned = export(db)
                        intact, _ = export(folder / "intact.db")
                        same = text is not None and _norm(text, folder) == _norm(intact, folder)
                        if text is not None and not same and not (warned or rec.get("warned")):
                            rec["outcome"] = "silent_change"
                        rec["same_as_original"] = same
                    rec.update(mutant=m.name, kind=m.kind)
                    records.append(rec)
                    shutil.rmtree(folder, ignore_errors=True)
    finally:
        signal.signal(signal.SIGALRM, old)
        if old_tmpdir is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = old_tmpdir
    return summarize(records, seed, per, limit_s, time.perf_counter() - t_start, out, meta)


def summarize(records: list[dict[str, Any]], seed: int, per: int, limit_s: float,
              seconds: float, out: Path | None, meta: dict | None) -> dict[str, Any]:
    counts = Counter(r["outcome"] for r in records)
    by_kind = {k: dict(Counter(r["outcome"] for r in records if r["kind"] == k))
               for k in ("value", "file")}
    by_command = {c: dict(Counter(r["outcome"] for r in records if r["command"] == c))
                  for c in COMMANDS}
    flips = [r for r in records if r["mutant"].startswith("file_bitflip") and
             r["command"] == "results_json"]
    for r in flips:
        r["bitflip_result"] = ("refused" if r.get("exit") not in (0, None) else
                               "warned" if r.get("warned") else
                               "unchanged" if r.get("same_as_original") else "silent_change")
    res = {"runs": sum(v for k, v in counts.items() if k != "skipped"),
           "mutants": len({r["mutant"] for r in records}), "counts": dict(counts),
           "by_kind": by_kind, "by_command": by_command,
           "bitflips": {"files": len(flips),
                        **{k: sum(r["bitflip_result"] == k for r in flips)
                           for k in ("refused", "warned", "unchanged", "silent_change")}},
           "goal_met": not any(counts.get(k) for k in GOAL_BAD),
           "seed": seed, "commands_per_mutant": per, "limit_s": limit_s,
           "seconds": round(seconds, 1), "meta": meta or {},
           "problems": [r for r in records if r["outcome"] in GOAL_BAD],
           "records": records}
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res, indent=1, default=str) + "\n")
    return res


def all_mutants(seed: int, n_flips: int = 30) -> list[Mutant]:
    rng = random.Random(seed)
    return value_mutants(rng) + file_mutants(rng, n_flips)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--per", type=int, default=6, help="commands per mutant")
    ap.add_argument("--flips", type=int, default=30, help="bit-flipped files")
    ap.add_argument("--small", type=int, default=0, metavar="N",
                    help="only N mutants, spread over the kinds (CI)")
    ap.add_argument("--limit-s", type=float, default=30.0, help="time limit per run")
    ap.add_argument("--max-memory-gb", type=float, default=6.0,
                    help="address-space limit of this process (RLIMIT_AS); 0: none")
    ap.add_argument("-o", "--out", type=Path)
    a = ap.parse_args(argv)
    if a.max_memory_gb > 0:
        lim = int(a.max_memory_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
    mutants = all_mutants(a.seed, a.flips)
    if a.small:
        mutants = random.Random(a.seed).sample(mutants, a.small)
    meta = {"command": "PYTHONPATH=src python benchmarks/fuzz_databases.py "
                       + " ".join(argv if argv is not None else sys.argv[1:]),
            "python": platform.python_version(), "sqlite": sqlite3.sqlite_version}
    res = run(mutants, a.per, a.seed, a.limit_s, a.out, meta)
    print(json.dumps({k: res[k] for k in ("runs", "mutants", "counts", "by_kind", "bitflips",
                                          "goal_met", "seconds")}, indent=1))
    for r in res["problems"][:40]:
        print(f"{r['outcome']:>15} {r['mutant']:<40} {r['command']:<18} "
              f"{r.get('error') or r.get('message', '')}"[:300])
    return 0 if res["goal_met"] else 1


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
