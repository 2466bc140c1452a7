"""On-disk JSON caches: written atomically under unpredictable names, checked when read, never
trusted to change a result silently.

A cache holds what dlperf can compute again (the performance model's back-test residuals and
fits, launch counts, the ceilings a sweep measured once for its workers). Reading one back must
not be a way to change a result: a cache folder may be shared (``/tmp``, a group's scratch),
files rot, and a hand edit looks like data. So:

- :func:`write_json` writes through :func:`dlperf.outputs.atomic_write` (a temporary file made
  with ``O_EXCL`` under an unpredictable name: a link planted at a guessable name is never
  followed, an overwrite through it was demonstrated), readable and writable by the owner
  only, wrapped in an envelope ``{"dlperf_cache": 1, "sha256": ..., "payload": ...}`` whose
  digest covers the payload;
- :func:`read_json` returns the payload only when the file is a regular file owned by this
  user, not writable by group or others, in a folder that is not writable by others (unless
  sticky, as ``/tmp``), under :data:`MAX_BYTES`, parses (nesting included), matches its digest,
  and passes the caller's ``check`` (bounds and types); anything else is ignored with one
  warning naming the file and why, and the caller recomputes (:class:`CacheIgnored`); a file
  without the envelope (an older dlperf's) is recomputed without a word.

This module imports nothing of dlperf but :mod:`dlperf.outputs`.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dlperf.outputs import atomic_write

__all__ = ["CacheIgnored", "CACHE_DIR_ENV", "MAX_BYTES", "KEEP_FILES", "cache_root",
           "read_json", "write_json", "prune", "untrusted", "digest"]

#: Environment variable: the folder of dlperf's on-disk caches (:func:`cache_root`).
CACHE_DIR_ENV = "DLPERF_CACHE_DIR"

#: The largest cache file read (bytes); a larger one is ignored.
MAX_BYTES = 256 * 2**20
_MAGIC = "dlperf_cache"
_warned: set[str] = set()


def cache_root() -> Path:
    """The folder of dlperf's on-disk caches: ``$DLPERF_CACHE_DIR``, default
    ``~/.cache/dlperf`` (the performance model's, through :mod:`dlperf.perfmodel.records`,
    and a folder of results files read as one, :mod:`dlperf.results.foldercache`)."""
    return Path(os.environ.get(CACHE_DIR_ENV) or Path.home() / ".cache" / "dlperf")


class CacheIgnored(UserWarning):
    """A cache file that was not used (named with the reason); its content is recomputed."""


def digest(payload: Any) -> str:
    """SHA-256 of ``payload``'s canonical JSON (sorted keys, no spaces; a NaN or infinity as
    its JSON token, so a file holding one is judged by the caller's check, not by this)."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


#: Cache files of one kind kept in a folder by :func:`write_json` with ``keep``: a cache keyed
#: by a results file's content got a new file at every change of it, and none was ever
#: removed (133 files after a morning of tests).
KEEP_FILES = 64


def write_json(path: str | Path, payload: Any, *, keep: int | None = KEEP_FILES) -> bool:
    """Write ``payload`` (JSON without NaN or infinity) to the cache file ``path`` (module
    docstring); False (and one warning per folder) when the folder cannot be written: the
    caller goes on without a cache. A cache named ``KIND-KEY.json`` (``KEY`` hex, one file per
    content: the performance model's points and fits) keeps only the ``keep`` newest files
    ``KIND-*.json`` of its folder (:func:`prune`; None: all)."""
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps({_MAGIC: 1, "sha256": digest(payload), "payload": payload},
                          allow_nan=False)
        atomic_write(p, text, mode=0o600)
        if keep is not None:
            prune(p, keep)
        return True
    except (ValueError, TypeError) as e:  # not JSON (a NaN): not cached
        _warn(p, f"not caching {str(p)!r}: {e}")
        return False
    except OSError as e:
        _warn(p.parent, f"cannot write the cache in {str(p.parent)!r} "
                        f"({e.strerror or e}); it is computed again each time")
        return False


def prune(path: str | Path, keep: int, suffix: str = ".json") -> list[Path]:
    """Remove all but the ``keep`` newest (by modification time) cache files of the kind of
    ``path`` (``KIND-KEY`` + ``suffix``: the files ``KIND-*`` + ``suffix`` beside it whose
    ``KEY`` is hex) that are regular files owned by this user; ``path`` itself is always kept.
    Returns the files removed; a file that cannot be removed is left (another process's, a
    race)."""
    p = Path(path)
    kind, sep, _ = p.name.rpartition("-")
    if not sep or not p.name.endswith(suffix):
        return []
    mine: list[tuple[float, Path]] = []
    try:
        siblings = list(p.parent.glob(f"{kind}-*{suffix}"))
    except OSError:
        return []
    for f in siblings:
        key = f.name[len(kind) + 1:-len(suffix)]
        if f == p or not key or any(c not in "0123456789abcdef" for c in key):
            continue
        try:
            st = f.lstat()
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid():
            mine.append((st.st_mtime, f))
    mine.sort(reverse=True)
    gone = []
    for _, f in mine[max(0, keep - 1):]:
        try:
            f.unlink()
            gone.append(f)
        except OSError:
            continue
    return gone


def untrusted(path: str | Path, max_bytes: int | None = MAX_BYTES) -> str | None:
    """Why the file ``path`` may not be trusted as a cache (module docstring: a link or a
    device, another user's, writable by others, in a folder anyone may write that is not
    sticky, over ``max_bytes``; None: no limit), ``""`` when there is no such file, or None
    when it may be read (its content is for the caller to check)."""
    return _why_not(Path(path), max_bytes)


def _why_not(p: Path, max_bytes: int | None = MAX_BYTES) -> str | None:
    """Why the file ``p`` may not be trusted as a cache, or None."""
    try:
        st = p.lstat()
    except FileNotFoundError:
        return ""  # no cache yet: nothing to say
    except OSError as e:
        return f"it cannot be read ({e.strerror})"
    if not stat.S_ISREG(st.st_mode):
        return "it is not a regular file (a link or a device)"
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return "another user owns it"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "others may write it"
    try:
        d = p.parent.stat()
    except OSError as e:
        return f"its folder cannot be read ({e.strerror})"
    if d.st_mode & stat.S_IWOTH and not d.st_mode & stat.S_ISVTX:
        return "its folder may be written by anyone (and is not sticky)"
    if max_bytes is not None and st.st_size > max_bytes:
        return f"it is {st.st_size:,} bytes, over {max_bytes:,}"
    return None


def read_json(path: str | Path, check: Callable[[Any], Any] | None = None) -> Any | None:
    """The payload of the cache file ``path``, or None when there is none or it may not be
    trusted (module docstring; a warning names the file and why). ``check(payload)`` may
    raise ``ValueError``, ``TypeError`` or ``KeyError`` to refuse it, or return the value
    to use (a non-None return replaces the payload)."""
    p = Path(path)
    why = _why_not(p)
    if why == "":
        return None
    if why is None:
        try:
            doc = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as e:
            why = f"it does not parse ({type(e).__name__})"
        else:
            if not isinstance(doc, dict) or doc.get(_MAGIC) != 1 or "payload" not in doc:
                return None  # an older format (or not a cache): recomputed, and replaced
            else:
                payload = doc["payload"]
                try:
                    ok = doc.get("sha256") == digest(payload)
                except (ValueError, TypeError, RecursionError):
                    ok = False
                if not ok:
                    why = "its content does not match its digest (changed after it was written)"
                elif check is not None:
                    try:
                        got = check(payload)
                    except (ValueError, TypeError, KeyError, AttributeError, IndexError) as e:
                        why = f"a value is out of bounds or of the wrong type ({str(e)[:100]})"
                    else:
                        return payload if got is None else got
                else:
                    return payload
    _warn(f"{p}\0{why}", f"ignored the cache file {str(p)!r}: {why}; computing it again")
    return None


def _warn(key: Path | str, message: str) -> None:
    """``message`` as a :class:`CacheIgnored` warning, once per ``key``."""
    if str(key) not in _warned:
        _warned.add(str(key))
        warnings.warn(message, CacheIgnored, stacklevel=3)
