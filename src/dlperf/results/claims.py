"""Claims: which process is measuring which point of a results file, so that sweeps writing
into one file share the work instead of repeating it (issue 23: two identical sweeps on one
database measured every overlapping point twice).

Table ``claims(run_key PRIMARY KEY, owner, pid, host, sweep, started_at, heartbeat)`` (times in
seconds since the epoch; ``owner`` a random id of one sweep call, so two sweeps in one process
are told apart), made by the first sweep that claims a point. It is coordination state, not
results: it is not part of the schema version (an older dlperf ignores it), merges and exports
leave it out, and readers never touch it.

Before a point runs, :meth:`Claims.claim` decides in one write transaction:

- ``done``: the point has a final result (not ``error``/``unavailable``) stored by another
  process since this sweep started, or (when resuming) one stored before it started, ``ok``
  only with ``retry_failed``: it is not measured again;
- ``busy``: another process holds a live claim on it: the sweep goes on with other points and
  comes back to it at the end (:meth:`Claims.claim` again);
- ``mine``: no claim, this sweep's own, or a *stale* one, which is taken over: the holder's
  process is gone (same host: no such process id, or a zombie), its heartbeat is older than
  :func:`stale_after_s` (any host; a sweep killed with ``kill -9`` or a crashed machine), is
  not a number, or has not changed for :func:`stale_after_s` of this process's own clock while
  it was watched (a heartbeat in the future: a clock set ahead, a copied or tampered file; a
  live holder changes it every :func:`heartbeat_s`, so it never waits forever).

The claim is dropped once the point's result is stored (:meth:`Claims.release`); while points
run, a thread renews this sweep's claims every :func:`heartbeat_s` (:meth:`Claims.beating`),
on a connection of its own. Heartbeats on different hosts compare wall clocks: clocks that
differ by more than :func:`stale_after_s` would take over live claims (use NTP).

Waiting is bounded (:func:`run_claimed`): a line names the points waited for and their
holders, another follows every :data:`WAIT_NOTE_S`, and after :func:`wait_limit_s` (the
longest the holder may take to measure them, plus :func:`stale_after_s`) the sweep stops
waiting and says which points it left to their holder.
"""

from __future__ import annotations

import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dlperf.results.dbfile import StoreError, open_writer, seconds_from_env

__all__ = ["Claims", "run_claimed", "CLAIMS_SQL", "STALE_ENV", "DEFAULT_STALE_S", "stale_after_s",
           "heartbeat_s", "process_gone", "wait_limit_s", "WAIT_NOTE_S"]

CLAIMS_SQL = ("CREATE TABLE IF NOT EXISTS claims (run_key TEXT PRIMARY KEY, owner TEXT, "
              "pid INTEGER, host TEXT, sweep TEXT, started_at REAL, heartbeat REAL)")
#: Environment variable: seconds without a heartbeat after which a claim is stale.
STALE_ENV = "DLPERF_CLAIM_STALE_S"
#: Default of :data:`STALE_ENV`: six missed heartbeats (:func:`heartbeat_s`).
DEFAULT_STALE_S = 120.0


def stale_after_s() -> float:
    """Seconds without a heartbeat after which another process's claim is taken over:
    ``$DLPERF_CLAIM_STALE_S`` or :data:`DEFAULT_STALE_S`.

    Raises:
        ConfigError: the variable is not a positive, finite number.
    """
    return seconds_from_env(STALE_ENV, DEFAULT_STALE_S,
                            "the seconds after which a silent claim is taken over", 120)


#: Seconds between the lines that say a sweep is still waiting for another's points.
WAIT_NOTE_S = 60.0


def wait_limit_s(points: Sequence[Any]) -> float:
    """The longest a sweep waits for ``points`` another process claimed: twice the longest
    point timeout (a breakdown measured in a process of its own runs two workers, each with the
    full timeout) plus :func:`stale_after_s` and a minute for storing."""
    longest = max((float(p.measure.timeout_s) for p in points), default=0.0)
    return 2 * longest + stale_after_s() + 60.0


def heartbeat_s() -> float:
    """Seconds between heartbeats: a sixth of :func:`stale_after_s` (at least 0.05 s)."""
    return max(0.05, stale_after_s() / 6)


def process_gone(pid: int) -> bool:
    """True when no process ``pid`` runs on this host, or it is a zombie (dead, not yet reaped
    by its parent; Linux's ``/proc/PID/stat``)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[:1] == ["Z"]


class Claims:
    """The claims of one sweep (one call; a process may run several) on a writable
    :class:`~dlperf.results.store.ResultStore` (see the module docstring).

    Args:
        store: the store the sweep writes into (its connection and transactions are used).
        resume: results stored before this sweep started count as done.
        retry_failed: with ``resume``, only ``ok`` results stored before count.
        sweep: the sweep's name, recorded with its claims.
        redo: run keys whose results stored before this sweep do not count as done, even
            with ``resume`` (points measured again because their code changed).

    Raises:
        StoreError: the claims table cannot be made (a read-only or locked file).
    """

    def __init__(self, store: Any, *, resume: bool, retry_failed: bool,
                 sweep: str | None = None, redo: set[str] | None = None) -> None:
        self.store, self.resume, self.retry_failed, self.sweep = (store, resume, retry_failed,
                                                                  sweep)
        self.redo = set(redo or ())
        self.host, self.pid, self.owner = socket.gethostname(), os.getpid(), uuid.uuid4().hex
        self.held: set[str] = set()
        #: run key -> (owner, heartbeat, time.monotonic() when first seen so): how long
        #: another's claim has been seen without a change, on this process's own clock.
        self.seen: dict[str, tuple[Any, Any, float]] = {}
        db = store._db
        with store.transaction("preparing to share it with other sweeps"):
            db.execute(CLAIMS_SQL)
            self.since_id = db.execute("SELECT COALESCE(MAX(id), 0) FROM results").fetchone()[0]

    def _done(self, run_key: str) -> bool:
        q = ("SELECT 1 FROM results WHERE run_key=? AND status NOT IN ('error', 'unavailable') "
             "AND (id > ? OR (? AND (status = 'ok' OR ?))) LIMIT 1")
        return self.store._db.execute(q, (run_key, self.since_id,
                                          self.resume and run_key not in self.redo,
                                          not self.retry_failed)).fetchone() is not None

    def _stale(self, run_key: str, owner: str, pid: Any, host: str, heartbeat: Any,
               now: float) -> bool:
        if owner == self.owner:
            return True  # this sweep's own
        if host == self.host and isinstance(pid, int) and pid > 0 and process_gone(pid):
            return True
        if not isinstance(heartbeat, (int, float)) or not math.isfinite(heartbeat):
            return True  # not written by a dlperf sweep
        limit = stale_after_s()
        if now - heartbeat > limit:
            return True
        seen = self.seen.get(run_key)
        t = time.monotonic()
        if seen is None or seen[:2] != (owner, heartbeat):
            self.seen[run_key] = (owner, heartbeat, t)
            return False
        return t - seen[2] > limit  # no beat for that long by this process's clock

    def claim(self, run_key: str) -> tuple[str, dict[str, Any] | None]:
        """``("mine", None)``, ``("done", None)`` or ``("busy", holder)`` for the point
        ``run_key`` (see the module docstring); ``holder``: ``pid``, ``host``, ``sweep``,
        ``age_s`` (since its heartbeat). A ``mine`` claim is recorded before this returns.

        Raises:
            StoreError: the file stayed locked, or cannot be written.
        """
        db = self.store._db
        with self.store.transaction("claiming a point"):
            if self._done(run_key):
                return "done", None
            now = time.time()
            row = db.execute("SELECT owner, pid, host, sweep, heartbeat FROM claims "
                             "WHERE run_key=?", (run_key,)).fetchone()
            if row is not None and not self._stale(run_key, row[0], row[1], row[2], row[4],
                                                   now):
                return "busy", {"pid": row[1], "host": row[2], "sweep": row[3],
                                "age_s": now - row[4]}
            db.execute("INSERT OR REPLACE INTO claims VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (run_key, self.owner, self.pid, self.host, self.sweep, now, now))
        self.held.add(run_key)
        return "mine", None

    def release(self, run_key: str) -> None:
        """Drop this sweep's claim on ``run_key`` (after its result is stored); a failure to
        (a locked file) leaves it to go stale. Never raises for the file."""
        self.held.discard(run_key)
        try:
            with self.store.transaction("releasing a claim"):
                self.store._db.execute("DELETE FROM claims WHERE run_key=? AND owner=?",
                                       (run_key, self.owner))
        except StoreError:
            pass

    def release_all(self) -> None:
        """Drop every claim this object still holds (a sweep stopped early)."""
        for k in list(self.held):
            self.release(k)

    @contextmanager
    def beating(self) -> Iterator[None]:
        """While the block runs, a thread renews this sweep's claims every
        :func:`heartbeat_s` on a connection of its own; afterwards every claim still held is
        released (also when the block raises: an interrupted sweep)."""
        stop = threading.Event()
        path, owner = self.store.path, self.owner

        def beat() -> None:
            con = None
            try:
                con = open_writer(path)
                while not stop.wait(heartbeat_s()):
                    try:
                        con.execute("UPDATE claims SET heartbeat=? WHERE owner=?",
                                    (time.time(), owner))
                    except Exception:  # noqa: BLE001 - a missed beat only risks a takeover
                        pass
            except Exception:  # noqa: BLE001 - no heartbeat: claims go stale, never a crash
                pass
            finally:
                if con is not None:
                    con.close()

        t = threading.Thread(target=beat, name="dlperf-claims-heartbeat", daemon=True)
        t.start()
        try:
            yield
        finally:
            stop.set()
            t.join(timeout=5.0)
            self.release_all()


def _holders(holders: dict[str, dict[str, Any]]) -> str:
    """``pid 12 on host a (heartbeat 3 s ago), ...``: who holds the points waited for."""
    seen: dict[tuple[Any, Any], float] = {}
    for h in holders.values():
        seen[(h["pid"], h["host"])] = h["age_s"]
    parts = []
    for (pid, host), age in list(seen.items())[:3]:
        when = (f"{age:.0f} s ago" if age >= 0 else
                f"{-age:.0f} s in the future by this host's clock: clock skew or a copied file")
        parts.append(f"pid {pid} on host {host} (heartbeat {when})")
    return ", ".join(parts) + (" and others" if len(seen) > 3 else "")


def run_claimed(points: Sequence[Any], claims: Claims, run: Callable[[int, Any], None],
                elsewhere: Callable[[], None], console: Any, path: str | Path,
                *, clock: Callable[[], float] = time.monotonic,
                sleep: Callable[[float], None] = time.sleep) -> list[Any]:
    """Run each point (a :class:`~dlperf.config.RunConfig`) that this sweep claims:
    ``run(k, point)`` (``k`` 1-based) for ``mine``, ``elsewhere()`` for ``done``. Points
    another process is measuring (``busy``) are revisited every few seconds until they are
    stored or their claim goes stale and is taken over; a line on ``console`` (a rich Console)
    says which and who holds them, another every :data:`WAIT_NOTE_S`. The wait is bounded by
    :func:`wait_limit_s`: past it the points still held are left to their holder, named in a
    line. ``clock``/``sleep``: the time source (tests give a fake one).

    Returns:
        The points left to another process at the bound (empty: every point is stored).

    Raises:
        StoreError: from claiming (a locked or unwritable file) or from ``run``.
    """
    holders: dict[str, dict[str, Any]] = {}

    def attempt(items: list[tuple[int, Any]]) -> list[tuple[int, Any]]:
        """Claim each point: run it (ours), count it (stored elsewhere) or keep it (busy)."""
        busy = []
        for k, cfg in items:
            state, holder = claims.claim(cfg.run_key())
            if state == "mine":
                run(k, cfg)
            elif state == "done":
                elsewhere()
            else:
                busy.append((k, cfg))
                holders[cfg.run_key()] = holder or {"pid": None, "host": None, "age_s": 0.0}
        return busy

    waiting = attempt(list(enumerate(points, 1)))
    if not waiting:
        return []
    limit = wait_limit_s([cfg for _, cfg in waiting])
    console.print(f"waiting for {len(waiting)} point(s) that another process is measuring in "
                  f"{path} (shared, not repeated): {_holders(holders)}; a claim without a new "
                  f"heartbeat for {stale_after_s():g} s is taken over, and the wait ends "
                  f"after {limit:.0f} s", markup=False, highlight=False)
    t0 = note = clock()
    while waiting:
        if clock() - t0 > limit:
            keys = {cfg.run_key() for _, cfg in waiting}
            console.print(f"stopped waiting after {clock() - t0:.0f} s for {len(waiting)} "
                          f"point(s) still claimed in {path} by "
                          f"{_holders({k: v for k, v in holders.items() if k in keys})}: not "
                          "measured here; run the same command again once that process has "
                          "ended (its claims are taken over then)", markup=False,
                          highlight=False)
            return [cfg for _, cfg in waiting]
        sleep(min(2.0, heartbeat_s()))
        holders.clear()
        waiting = attempt(waiting)
        if waiting and clock() - note >= WAIT_NOTE_S:
            note = clock()
            console.print(f"still waiting ({clock() - t0:.0f} s of at most {limit:.0f} s) for "
                          f"{len(waiting)} point(s): {_holders(holders)}", markup=False,
                          highlight=False)
    return []
