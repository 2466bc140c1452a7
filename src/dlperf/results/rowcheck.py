"""A stored result row's values checked when it is read and when it is merged, and its checksum.

SQLite keeps whatever a column is given (text in a REAL column, ``'NaN'``, a number in a TEXT
column), a results file travels between machines, and bits rot. A row that a reader cannot
trust is *damaged*: :func:`scan` finds them, the store's readers skip them and say so once
(:meth:`dlperf.results.store.ResultStore.rows`), ``merge`` never copies one, and no reader
crashes on one. A row is damaged when:

- a column's value has the wrong type for the column (:func:`column_problem`: text where a
  number belongs, a number where text belongs, a boolean column that is not 0/1) or is out of
  bounds (a negative count or byte size, a time that is negative, not finite or over
  :data:`MAX_SECONDS`, a count over :data:`MAX_COUNT`, text over :data:`MAX_TEXT`);
- its ``status`` is not one of :data:`~dlperf.results.schema.STATUSES` or its ``run_key`` is
  empty or over 1,000 characters;
- its JSON (``result_json``) is not a JSON object, is nested deeper than :data:`MAX_DEPTH`,
  is not a record (:meth:`~dlperf.results.schema.RunRecord.from_dict` refuses it), or its
  statistics (``summary``) or throughput are negative, not finite or over the bounds;
- one of its raw samples (table ``samples``) has a step time that is not a number in bounds,
  or a loss that is not a number;
- its checksum does not match (below).

Checksums (table ``row_sums``, made by any writer; coordination data like ``claims``, not part
of the schema version): for each result, a SHA-256 of its column values as stored
(:func:`row_digest`, ``id`` left out, each value tagged with its SQLite type) and one of its
raw samples (:func:`samples_digest`), written in the same transaction as the row
(:func:`seal`). A bit flipped in a stored number or text then shows as a mismatch instead of a
silently different result. Rows stored before there were checksums (or by an older dlperf)
are sealed by the next writer that opens the file, once their values pass the checks
(:func:`seal_missing`); until then the value checks alone judge them.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
import struct
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["DamagedRows", "ROW_SUMS_SQL", "MAX_SECONDS", "MAX_COUNT", "MAX_TEXT", "MAX_DEPTH", "row_digest",
           "samples_digest", "seal", "seal_missing", "scan", "row_problem", "column_problem",
           "sample_problem", "json_depth", "describe", "collective_problem"]

class DamagedRows(UserWarning):
    """A results file holds damaged rows; readers skip them (:func:`describe` says which)."""


ROW_SUMS_SQL = ("CREATE TABLE IF NOT EXISTS row_sums (result_id INTEGER PRIMARY KEY, "
                "row_sha TEXT NOT NULL, samples_sha TEXT NOT NULL)")
#: The largest time in seconds a stored time may be (11.6 days: no training iteration, warm-up
#: or compile of a benchmark point takes that long; a larger one is damage).
MAX_SECONDS = 1e6
#: The largest count or byte size a stored integer may be (2^53: exact as a float, 8 PiB).
MAX_COUNT = 2**53
#: The longest stored text (characters): an error message, warnings, the record's JSON.
MAX_TEXT = 64 * 2**20
#: The deepest nesting of a record's JSON (a record nests about 6 levels).
MAX_DEPTH = 64
#: Columns of seconds (non-negative, finite, at most :data:`MAX_SECONDS`); ``*_per_s`` are
#: rates.
_SECONDS_SUFFIX = "_s"
#: REAL columns that may be negative (a relative difference, a loss).
_SIGNED = {"timing_rel_diff", "breakdown_rel_diff", "loss_first", "loss_last"}
#: Columns that hold 0 or 1.
_BOOLS = {"timing_consistent", "steady_state", "input_bound"}


def _tag(v: Any) -> bytes:
    """A value as SQLite returns it, tagged with its type (so 1, 1.0 and '1' differ)."""
    if v is None:
        return b"N"
    if isinstance(v, int):
        return b"I" + str(v).encode()
    if isinstance(v, float):
        return b"R" + struct.pack(">d", v)
    if isinstance(v, str):
        return b"T" + v.encode("utf-8", "surrogatepass")
    if isinstance(v, bytes):
        return b"B" + v
    return b"?" + repr(v).encode()


def _digest(parts: Iterable[bytes]) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(len(p).to_bytes(8, "big"))
        h.update(p)
    return h.hexdigest()[:32]


def row_digest(row: Mapping[str, Any], columns: Iterable[str]) -> str:
    """The checksum of a result row's ``columns`` (names and values as stored; ``id`` is not
    among them: a merge renumbers rows)."""
    return _digest(b"%s=%s" % (c.encode(), _tag(row.get(c))) for c in columns)


def samples_digest(samples: Iterable[tuple[Any, ...]]) -> str:
    """The checksum of a result's raw samples: ``(phase, idx, step_time_s, loss)`` tuples in
    the order of ``phase, idx``."""
    return _digest(b"|".join(_tag(v) for v in s) for s in samples)


def _stored(db: sqlite3.Connection, rid: int, columns: list[str]) -> tuple[dict, list]:
    cur = db.execute(f"SELECT {', '.join(columns)} FROM results WHERE id=?", (rid,))
    values = cur.fetchone()
    row = dict(zip(columns, values)) if values is not None else {}
    samples = [tuple(r) for r in db.execute(
        "SELECT phase, idx, step_time_s, loss FROM samples WHERE result_id=? ORDER BY phase, idx",
        (rid,))]
    return row, samples


def seal(db: sqlite3.Connection, rid: int, columns: Iterable[str]) -> None:
    """Write the checksums of result ``rid`` as stored (read back, so SQLite's type affinity
    is what is summed), inside the caller's transaction."""
    cols = list(columns)
    row, samples = _stored(db, rid, cols)
    db.execute("INSERT OR REPLACE INTO row_sums VALUES (?, ?, ?)",
               (rid, row_digest(row, cols), samples_digest(samples)))


def seal_missing(db: sqlite3.Connection, columns: Mapping[str, str], *, all_rows: bool = False
                 ) -> int:
    """Seal the rows without checksums whose values pass the checks (every row when
    ``all_rows``: after a migration changed stored values), inside the caller's transaction;
    the number sealed."""
    db.execute(ROW_SUMS_SQL)
    if all_rows:
        db.execute("DELETE FROM row_sums")
    ids = [r[0] for r in db.execute(
        "SELECT id FROM results WHERE id NOT IN (SELECT result_id FROM row_sums) ORDER BY id")]
    if not ids:
        return 0
    damaged = scan(db, columns, ids=ids)
    n = 0
    for rid in ids:
        if rid not in damaged:
            seal(db, rid, columns)
            n += 1
    return n


def json_depth(value: Any, limit: int = MAX_DEPTH) -> int:
    """The nesting depth of a parsed JSON value (0 for a scalar), counted up to ``limit + 1``
    without recursion."""
    depth, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            depth = max(depth, d)
            if depth > limit:
                return depth
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v)
                         if isinstance(x, (dict, list)))
    return depth


def _shown(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


def column_problem(name: str, sql_type: str, v: Any) -> str | None:
    """What is wrong with value ``v`` of column ``name`` (SQL type ``sql_type``), or None."""
    if v is None:
        return f"{name} is empty" if "NOT NULL" in sql_type else None
    kind = sql_type.split()[0]
    if kind == "TEXT":
        if not isinstance(v, str):
            return f"{name} is {type(v).__name__} {_shown(v)}, not text"
        return f"{name} is {len(v)} characters long" if len(v) > MAX_TEXT else None
    if kind == "INTEGER":
        if not isinstance(v, int):
            return f"{name} is {type(v).__name__} {_shown(v)}, not a whole number"
        if name in _BOOLS and v not in (0, 1):
            return f"{name} is {v}, not 0 or 1"
        return None if 0 <= v <= MAX_COUNT else f"{name} is {v}, outside 0..2^53"
    if kind == "REAL":
        if not isinstance(v, (int, float)):
            return f"{name} is {type(v).__name__} {_shown(v)}, not a number"
        if not math.isfinite(v):
            return f"{name} is {v}, not a finite number"
        if name in _SIGNED:
            return None if abs(v) <= MAX_COUNT else f"{name} is {v:g}, out of bounds"
        if v < 0:
            return f"{name} is {v:g}, negative"
        if name.endswith(_SECONDS_SUFFIX) and not name.endswith("_per_s") and v > MAX_SECONDS:
            return f"{name} is {v:g} s, over {MAX_SECONDS:g} s"
        return None if v <= 1e30 else f"{name} is {v:g}, out of bounds"
    return None


def sample_problem(t: Any, loss: Any) -> str | None:
    """What is wrong with one raw sample (``step_time_s``, ``loss``), or None."""
    if t is not None:
        if not isinstance(t, (int, float)) or isinstance(t, bool):
            return f"a raw step time is {type(t).__name__} {_shown(t)}, not a number"
        if not (0 <= t <= MAX_SECONDS):
            return f"a raw step time is {t!r}, outside 0..{MAX_SECONDS:g} s"
    if loss is not None and (not isinstance(loss, (int, float)) or isinstance(loss, bool)):
        return f"a raw loss is {type(loss).__name__} {_shown(loss)}, not a number"
    return None


def _record_problem(text: str, keep: list[Any] | None = None) -> str | None:
    """What is wrong with a row's ``result_json``, or None; then, where ``keep`` is a list and
    the JSON is not empty, its record is appended to it."""
    try:
        res = json.loads(text)
    except RecursionError:
        return f"its JSON is nested deeper than {MAX_DEPTH} levels"
    except ValueError as e:
        return f"its JSON does not parse ({str(e)[:60]})"
    if not isinstance(res, dict):
        return f"its JSON is {type(res).__name__}, not an object"
    if json_depth(res) > MAX_DEPTH:
        return f"its JSON is nested deeper than {MAX_DEPTH} levels"
    from dlperf.errors import ConfigError
    from dlperf.results.schema import RunRecord

    try:
        rec = RunRecord.from_dict(res)
    except ConfigError:
        raise  # written by a newer dlperf: not damage, the reader says to upgrade
    except Exception as e:  # noqa: BLE001 - any refusal is a damaged row, named
        first = str(e).strip().splitlines()
        return f"its JSON is not a record ({(first[0] if first else type(e).__name__)[:80]})"
    for part, fields, limit in (("summary", ("mean", "median", "stdev", "min", "max", "q1",
                                             "q3", "iqr", "p5", "p95", "ci_low", "ci_high",
                                             "mad"), MAX_SECONDS),
                                ("throughput", ("samples_per_s", "tokens_per_s"), 1e30)):
        obj = getattr(rec, part, None)
        for f in fields:
            v = getattr(obj, f, None) if obj is not None else None
            if v is None:
                continue
            if not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 <= v <= limit:
                return f"its {part}.{f} is {_shown(v)}"
    if keep is not None and res:
        keep.append(rec)
    return None


def row_problem(row: Mapping[str, Any], columns: Mapping[str, str],
                keep: list[Any] | None = None) -> str | None:
    """The first thing wrong with a result row's values (``columns``: name -> SQL type), or
    None (module docstring); then, where ``keep`` is a list, the record of its ``result_json``
    (when it has one) is appended to it."""
    from dlperf.results.schema import STATUSES

    for name, typ in columns.items():
        p = column_problem(name, typ, row.get(name))
        if p:
            return p
    if row.get("status") not in STATUSES:
        return f"status is {_shown(row.get('status'))}, not one of {', '.join(STATUSES)}"
    key = row.get("run_key")
    if not key or len(key) > 1000:
        return f"run_key is {_shown(key)}"
    text = row.get("result_json")
    return _record_problem(text, keep) if text else None


def scan(db: sqlite3.Connection, columns: Mapping[str, str],
         ids: Iterable[int] | None = None, since_id: int = 0,
         records: dict[int, tuple[str, Any]] | None = None) -> dict[int, str]:
    """The damaged rows among ``ids`` (default: every row) with an id above ``since_id`` of
    the ``results`` table: row id -> what is wrong (module docstring). Reads the rows, their
    samples and their checksums (when the file has them) once. Where ``records`` is given,
    the record each intact row's ``result_json`` was checked as is put there:
    ``{row id: (result_json, RunRecord)}`` (a reader of the rows need not parse them again).

    Raises:
        ConfigError: a row's record was written by a newer dlperf (not damage: upgrade).
    """
    from dlperf.errors import ConfigError

    cols = list(columns)
    want = None if ids is None else set(ids)
    has_sums = db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND "
                          "name='row_sums'").fetchone() is not None
    sums = {r[0]: (r[1], r[2]) for r in db.execute(
        "SELECT result_id, row_sha, samples_sha FROM row_sums")} if has_sums else {}
    bad: dict[int, str] = {}
    rows: dict[int, dict[str, Any]] = {}
    for got in db.execute(f"SELECT id, {', '.join(cols)} FROM results WHERE id > ? ORDER BY id",
                          (since_id,)):
        values = tuple(got)
        rid = values[0]
        if want is not None and rid not in want:
            continue
        row = dict(zip(cols, values[1:]))
        if not isinstance(rid, int):
            continue
        rows[rid] = row
        if rid in sums and sums[rid][0] != row_digest(row, cols):
            try:
                problem = row_problem(row, columns)
            except ConfigError:  # a tampered version number is damage here, not "newer"
                problem = None
            bad[rid] = ("its checksum does not match its values (changed after it was "
                        "stored)" + (f": {problem}" if problem else ""))
        else:
            kept: list[Any] | None = [] if records is not None else None
            if problem := row_problem(row, columns, kept):
                bad[rid] = problem
            elif kept and records is not None:
                records[rid] = (row["result_json"], kept[0])
    current: Any = None
    acc: list[tuple[Any, ...]] = []
    sample_bad: str | None = None
    with_samples: set[int] = set()

    def close(rid: Any) -> None:
        if rid is None or rid not in rows or rid in bad:
            return
        if sample_bad:
            bad[rid] = sample_bad
        elif rid in sums and sums[rid][1] != samples_digest(acc):
            bad[rid] = ("the checksum of its raw samples does not match them (changed after "
                        "they were stored)")

    for s in _samples_to_check(db, since_id, [r for r in rows if r not in bad], sums):
        if s[0] != current:
            close(current)
            current, acc, sample_bad = s[0], [], None
            with_samples.add(current)
        if current not in rows:
            continue
        acc.append(tuple(s[1:]))
        t, loss = s[3], s[4]
        if sample_bad is None and not (type(t) is float and 0.0 <= t <= MAX_SECONDS
                                       and (loss is None or type(loss) is float)):
            sample_bad = sample_problem(t, loss)  # the common case is decided above
    close(current)
    empty = samples_digest([])
    for rid in rows:  # rows without samples whose checksum expects some
        if rid not in bad and rid in sums and rid not in with_samples and sums[rid][1] != empty:
            bad[rid] = ("the checksum of its raw samples does not match them (changed after "
                        "they were stored)")
    if records is not None:
        for rid in bad:
            records.pop(rid, None)
    return bad


#: Samples whose values :func:`sample_problem` need not look at: a step time that is a REAL in
#: bounds and a loss that is NULL or a REAL (what Python's check in :func:`scan` passes).
_PLAIN_SAMPLE_SQL = ("typeof(step_time_s) = 'real' AND step_time_s >= 0.0 AND step_time_s <= ? "
                     "AND (loss IS NULL OR typeof(loss) = 'real')")


def _samples_to_check(db: sqlite3.Connection, since_id: int, ids: list[int],
                      sums: Mapping[int, Any]) -> Iterable[Any]:
    """The samples :func:`scan` reads, as ``(result_id, phase, idx, step_time_s, loss)`` in
    the order of ``result_id, phase, idx``: every sample above ``since_id`` when every row of
    ``ids`` (those still undecided) has a checksum, whose samples must all be summed; else
    those of the rows with a checksum and of the rows SQLite finds a sample of that is not
    plain (:data:`_PLAIN_SAMPLE_SQL`). A file stored before checksums (the H200 files) then
    has its 188,767 samples judged in SQL instead of in Python (0.6 s on a 2-core VM)."""
    query = "SELECT result_id, phase, idx, step_time_s, loss FROM samples WHERE result_id "
    order = " ORDER BY result_id, phase, idx"
    summed = [r for r in ids if r in sums]
    if len(summed) == len(ids):
        return db.execute(query + "> ?" + order, (since_id,))
    odd = {r[0] for r in db.execute("SELECT DISTINCT result_id FROM samples WHERE result_id > ? "
                                    f"AND NOT ({_PLAIN_SAMPLE_SQL})", (since_id, MAX_SECONDS))}
    want = sorted(set(summed) | (odd & set(ids)))
    return (s for rid in want for s in db.execute(query + "= ?" + order, (rid,)))


def collective_problem(row: Mapping[str, Any]) -> str | None:
    """What is wrong with a stored all-reduce row (table ``collectives``), or None: a run id
    that is not text, a message size or count that is not a positive whole number, a time
    that is not a positive number in bounds, a bandwidth or imbalance that is not a
    non-negative number."""
    if not isinstance(row.get("run_id"), str):
        return f"run_id is {_shown(row.get('run_id'))}"
    for k in ("size_bytes", "nranks", "count"):
        v = row.get(k)
        if v is not None and (not isinstance(v, int) or not 0 < v <= MAX_COUNT):
            return f"{k} is {_shown(v)}"
    t = row.get("time_s")
    if not isinstance(t, (int, float)) or not 0 < t <= MAX_SECONDS:
        return f"time_s is {_shown(t)}"
    for k in ("algbw_gbps", "busbw_gbps", "imbalance"):
        v = row.get(k)
        if v is not None and (not isinstance(v, (int, float)) or not math.isfinite(v)
                              or v < 0):
            return f"{k} is {_shown(v)}"
    for k in ("benchmark", "backend", "dtype", "device_name", "git_sha", "created_at"):
        v = row.get(k)
        if v is not None and not isinstance(v, str):
            return f"{k} is {_shown(v)}, not text"
    return None


def describe(path: Any, damaged: Mapping[int, str], *, doing: str = "skipped") -> str:
    """One line naming the damaged rows of the file ``path`` (the first three, with what is
    wrong) and what to do."""
    shown = "; ".join(f"id {rid}: {why}" for rid, why in list(sorted(damaged.items()))[:3])
    more = f"; and {len(damaged) - 3} more" if len(damaged) > 3 else ""
    return (f"{len(damaged)} damaged result row(s) in {str(path)!r} {doing} ({shown}"
            f"{more}); the file itself is not changed: restore it from a copy, or `dlperf "
            "merge` it into a new file, which takes the intact rows only")
