"""Results that were measured but could not be stored (the results file stayed locked, the disk
filled up): kept as JSON files beside it until the next writer stores them.

A point that took minutes to measure should not be lost because another process held the file
or the disk was full at the moment of storing. :func:`keep_unsaved` writes the result to
``<db>.unsaved/<run_key>-<pid>-<n>.json`` (atomically: a temporary name, then a rename), and
the next :class:`~dlperf.results.store.ResultStore` opened to write ``<db>`` stores each file
once (a result already in the file, by run key and ``created_at``, is not stored twice) and
deletes it. Readers do not see kept results until then.
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
from typing import Any

__all__ = ["unsaved_dir", "keep_unsaved", "unsaved_files", "read_unsaved"]

_seq = itertools.count()


def unsaved_dir(db: str | Path) -> Path:
    """The folder of results kept for ``db``: ``<db>.unsaved`` beside it."""
    return Path(f"{db}.unsaved")


def keep_unsaved(result: dict[str, Any], db: str | Path, sweep: str | None) -> Path | None:
    """Write ``result`` (a result dict, raw samples included) and its ``sweep`` name to a new
    file under :func:`unsaved_dir`; its path, or None when it cannot be written either (the
    same full disk: the caller's error then says the result is lost)."""
    folder = unsaved_dir(db)
    name = f"{result.get('run_key') or 'result'}-{os.getpid()}-{next(_seq)}.json"
    tmp = folder / f".{name}.tmp"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({"sweep": sweep, "result": result}, default=str))
        os.replace(tmp, folder / name)
    except OSError:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        return None
    return folder / name


def unsaved_files(db: str | Path) -> list[Path]:
    """The kept results of ``db``, oldest first (none when the folder does not exist)."""
    folder = unsaved_dir(db)
    if not folder.is_dir():
        return []
    files = [p for p in folder.glob("*.json") if p.is_file()]
    return sorted(files, key=lambda p: (p.stat().st_mtime, p.name))


def read_unsaved(path: Path) -> tuple[dict[str, Any], str | None] | None:
    """``(result, sweep)`` of a kept file, or None when it cannot be read (left in place)."""
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(d, dict) or not isinstance(d.get("result"), dict):
        return None
    return d["result"], d.get("sweep")
