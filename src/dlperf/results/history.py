"""Results over time: tags, commits and dates of stored records, and selecting by them.

A result is tagged with ``dlperf run/sweep --tag NAME``: the tag is the record's
``identity.tag`` (the top-level key ``tag``, :data:`TAG_KEY`, of its flat dict; no column of
its own). The commit is the one the
worker records in ``env.git.sha`` (:func:`dlperf.env.collect_env`); the date is the record's
``created_at`` (UTC, ISO 8601).

A tag is a *label* of a run, not part of a point's identity (the run key stays what it was):
``dlperf run --tag NEW`` on a file that holds the point under another tag measures it again
(:func:`dlperf.resume.resume_plan`), while an interrupted tagged sweep still resumes the points it has
already measured under its own tag.

:func:`select` filters records by tag, commit (prefix) and date; :func:`revision_of` names the
revision a record belongs to (its tag, else its commit) for comparisons and trend plots.
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from dlperf.errors import ConfigError
from dlperf.results.schema import RunRecord

__all__ = ["TAG_KEY", "check_tag", "tag_of", "sha_of", "created_of", "revision_of", "parse_since",
           "select", "select_rows", "tagging", "match_revision",
           "FINAL_FAILURES"]

#: The record key that holds the tag.
TAG_KEY = "tag"
#: Allowed tags: letters, digits and ``._-+/:@``, 1-64 characters (a branch, a version, a
#: date), so a tag is one shell word and one table cell.
_TAG_RE = re.compile(r"[A-Za-z0-9._+/:@-]{1,64}")
#: Statuses that end a point (as :meth:`dlperf.results.store.ResultStore.done_keys`): a point
#: with one of them is not run again on resume; ``error``/``unavailable`` are to be fixed.
FINAL_FAILURES = ("oom", "nan_loss", "crash", "timeout")


def check_tag(tag: str | None) -> str | None:
    """``tag`` itself if it is a valid tag (or None).

    Raises:
        ConfigError: not 1-64 characters of letters, digits and ``._-+/:@``.
    """
    if tag is not None and not _TAG_RE.fullmatch(tag):
        raise ConfigError(f"--tag {tag!r}: give 1-64 letters, digits or . _ - + / : @ (e.g. "
                          "--tag v1.2 or --tag main-2026-01-31)")
    return tag


def tag_of(rec: RunRecord) -> str | None:
    """The record's tag (``dlperf run --tag``), or None."""
    return rec.identity.tag or None


def sha_of(rec: RunRecord) -> str | None:
    """The git commit (40 hex digits) the record was measured at, or None where not recorded."""
    git = (rec.env.git if rec.env is not None else None) or {}
    sha = git.get("sha") if isinstance(git, dict) else None
    return sha if isinstance(sha, str) and sha else None


def created_of(rec: RunRecord) -> _dt.datetime | None:
    """The record's ``created_at`` as an aware UTC datetime, or None (absent or unreadable)."""
    text = rec.identity.created_at
    if not text:
        return None
    try:
        t = _dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return t.replace(tzinfo=_dt.UTC) if t.tzinfo is None else t


def revision_of(rec: RunRecord) -> str:
    """The revision a record belongs to, for comparisons and trend plots: its tag, else the
    first 8 hex digits of its commit (``+dirty`` when the tree had changes), else
    ``"untagged"``."""
    tag = tag_of(rec)
    if tag:
        return tag
    sha = sha_of(rec)
    if sha:
        dirty = bool(((rec.env.git if rec.env else None) or {}).get("dirty"))
        return sha[:8] + ("+dirty" if dirty else "")
    return "untagged"


def parse_since(text: str | None) -> _dt.datetime | None:
    """``--since``: an ISO date or date-time (``2026-01-31``, ``2026-01-31T12:00``; without a
    zone: UTC) as an aware datetime; None for None.

    Raises:
        ConfigError: not an ISO 8601 date or date-time.
    """
    if text is None:
        return None
    try:
        t = _dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigError(f"--since {text!r} is not a date; give an ISO date or date-time, e.g. "
                          "--since 2026-01-31 or --since 2026-01-31T12:00 (UTC)") from None
    return t.replace(tzinfo=_dt.UTC) if t.tzinfo is None else t


def _sha_matches(sha: str | None, prefix: str) -> bool:
    return sha is not None and sha.lower().startswith(prefix.lower())


def select(records: Iterable[RunRecord], *, tag: Sequence[str] | str | None = None,
           sha: str | None = None, since: str | _dt.datetime | None = None) -> list[RunRecord]:
    """The records with one of the tags ``tag``, a commit starting with ``sha`` (at least 4 hex
    digits) and created at or after ``since`` (:func:`parse_since`); None: no filter. Order
    kept.

    Raises:
        ConfigError: ``sha`` is not 4-40 hex digits, or ``since`` is not a date.
    """
    tags = [tag] if isinstance(tag, str) else list(tag or [])
    if sha is not None and not re.fullmatch(r"[0-9a-fA-F]{4,40}", sha):
        raise ConfigError(f"--sha {sha!r}: give 4 to 40 hex digits of a git commit, e.g. "
                          "--sha 466ebcf")
    t0 = parse_since(since) if isinstance(since, str) else since
    out = []
    for r in records:
        if tags and tag_of(r) not in tags:
            continue
        if sha is not None and not _sha_matches(sha_of(r), sha):
            continue
        if t0 is not None:
            t = created_of(r)
            if t is None or t < t0:
                continue
        out.append(r)
    return out


def match_revision(records: Sequence[RunRecord], name: str) -> tuple[str, list[RunRecord]]:
    """The records of revision ``name`` in one file: ``tag:NAME``, ``sha:PREFIX``, or a bare
    name that is a tag there or else a commit prefix. Returns (what it matched, e.g. ``tag
    'v2'`` or ``commit 466ebcf0``, the records).

    Raises:
        ConfigError: nothing matches (the tags and commits there are listed), a bare name is
            both a tag and a commit prefix, or a prefix names several commits.
    """
    kind, _, value = name.partition(":") if name.startswith(("tag:", "sha:")) else ("", "", name)
    tags = sorted({t for r in records if (t := tag_of(r))})
    shas = sorted({s for r in records if (s := sha_of(r))})
    is_tag = value in tags and kind in ("", "tag")
    hexish = re.fullmatch(r"[0-9a-fA-F]{4,40}", value) is not None
    hits = sorted({s for s in shas if _sha_matches(s, value)}) if hexish and kind != "tag" else []
    if is_tag and hits and not kind:
        raise ConfigError(f"{name!r} is both a tag and the start of commit {hits[0][:8]}; write "
                          f"tag:{value} or sha:{value}")
    if is_tag:
        return f"tag {value!r}", [r for r in records if tag_of(r) == value]
    if len(hits) > 1:
        raise ConfigError(f"{name!r} is the start of {len(hits)} commits "
                          f"({', '.join(h[:10] for h in hits)}); give more digits")
    if hits:
        return f"commit {hits[0][:8]}", [r for r in records if sha_of(r) == hits[0]]
    raise ConfigError(f"no results tagged or at a commit {name!r} here; tags: "
                      f"{', '.join(tags) or 'none'}; commits: "
                      f"{', '.join(s[:8] for s in shas) or 'none'} (dlperf run --tag NAME "
                      "tags results)")


def tagging(runner: Callable[[Any], RunRecord], tag: str | None
            ) -> Callable[[Any], RunRecord]:
    """``runner`` (``RunConfig -> RunRecord``) whose records carry ``tag`` in
    ``identity.tag`` (unchanged when ``tag`` is None)."""
    if tag is None:
        return runner

    def run(cfg: Any) -> RunRecord:
        rec = runner(cfg)
        rec.identity.tag = tag
        return rec
    return run


def select_rows(rows: Sequence[dict[str, Any]], *, tag: Sequence[str] | str | None = None,
                sha: str | None = None, since: str | None = None,
                latest: bool = True) -> list[dict[str, Any]]:
    """:func:`select` for store rows (:meth:`ResultStore.rows` with ``latest=False``): the rows
    with one of the tags, a commit starting with ``sha`` and created at or after ``since``;
    with ``latest`` then only the newest of them per run key (so ``--tag v1`` shows v1's
    results even where a later tag re-ran the point). Order kept.

    Raises:
        ConfigError: as :func:`select`.
    """
    from dlperf.results.store import record_of

    keep = {id(r) for r, rec in ((r, record_of(r)) for r in rows)
            if select([rec], tag=tag, sha=sha, since=since)}
    out = [r for r in rows if id(r) in keep]
    if latest:
        newest: dict[Any, int] = {}
        for i, r in enumerate(out):
            newest[r.get("run_key")] = i
        out = [r for i, r in enumerate(out) if newest[r.get("run_key")] == i]
    return out
