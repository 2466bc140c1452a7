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
from typing import TYPE_CHECKING, Any

from dlperf.interrupts import held
from dlperf.outputs import atomic_write
from dlperf.results.dbfile import StoreError

if TYPE_CHECKING:
    from dlperf.results.schema import RunRecord

__all__ = ["unsaved_dir", "keep_unsaved", "unsaved_files", "read_unsaved", "store_or_keep",
           "quarantine"]

_seq = itertools.count()


def unsaved_dir(db: str | Path) -> Path:
    """The folder of results kept for ``db``: ``<db>.unsaved`` beside it."""
    return Path(f"{db}.unsaved")


def keep_unsaved(result: Any, db: str | Path, sweep: str | None) -> Path | None:
    """Write ``result`` (a :class:`~dlperf.results.schema.RunRecord` or a result dict, raw
    samples included) and its ``sweep`` name to a new file under :func:`unsaved_dir`; its
    path, or None when it cannot be written either (the same full disk: the caller's error
    then says the result is lost)."""
    if not isinstance(result, dict):
        result = result.to_dict()
    folder = unsaved_dir(db)
    key = "".join(c for c in str(result.get("run_key") or "result") if c.isalnum())[:64]
    name = f"{key or 'result'}-{os.getpid()}-{next(_seq)}.json"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write(folder / name, json.dumps({"sweep": sweep, "result": result},
                                               default=str))
    except (OSError, ValueError):
        return None
    return folder / name


def unsaved_files(db: str | Path) -> list[Path]:
    """The kept results of ``db``, oldest first (none when the folder does not exist)."""
    folder = unsaved_dir(db)
    if not folder.is_dir():
        return []
    files = [p for p in folder.glob("*.json") if p.is_file()]
    return sorted(files, key=lambda p: (p.stat().st_mtime, p.name))


def quarantine(path: Path) -> Path | None:
    """Move a kept file that cannot be stored to ``quarantine/`` in its folder (a name not
    taken there); its new path, or None when it cannot be moved (it stays)."""
    folder = path.parent / "quarantine"
    try:
        folder.mkdir(exist_ok=True)
        for n in itertools.count():
            dest = folder / (path.name if n == 0 else f"{path.stem}-{n}{path.suffix}")
            if not dest.exists():
                os.replace(path, dest)
                return dest
    except OSError:
        pass
    return None


def read_unsaved(path: Path) -> tuple[dict[str, Any], str | None] | None:
    """``(result, sweep)`` of a kept file, or None when it cannot be read (left in place)."""
    try:
        if path.stat().st_size > 256 * 2**20:  # no kept result is that large
            return None
        d = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(d, dict) or not isinstance(d.get("result"), dict):
        return None
    return d["result"], d.get("sweep")


def store_or_keep(store: Any, result: RunRecord, sweep: str | None) -> None:
    """``store.add(result, sweep=sweep)`` (a writable :class:`~dlperf.results.store.ResultStore`)
    with SIGINT/SIGTERM held for the process until its transaction ends
    (:func:`dlperf.interrupts.held`: the result is stored whole, then the signal acts); when
    the store cannot take it (locked past the timeout, a full disk, a read-only file) the
    result is kept beside the file (:func:`keep_unsaved`) for the next writer.

    Raises:
        StoreError: the store's error (nothing stored before is lost), saying where the result
            was kept, or that it could not be.
    """
    with held():
        try:
            store.add(result, sweep=sweep)
        except StoreError as e:
            kept = keep_unsaved(result.to_dict(), store.path, sweep)
            where = (f"the result just measured is kept in {str(kept)!r} and is stored by the "
                     f"next `dlperf run` or `dlperf sweep` that writes to {str(store.path)!r}"
                     if kept is not None else
                     "the result just measured could not be kept beside it either; that point "
                     "is measured again when the sweep is resumed")
            raise type(e)(f"{e}; {where}") from None
