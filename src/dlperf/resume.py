"""What a sweep takes from its results file before it runs (:func:`dlperf.sweep.execute`).

- **Threads chosen for the host** (:func:`resolve_threads`): CPU points whose threads were not
  given run with :func:`dlperf.env.choose_threads`'s choice, which enters their run key (the
  result says what was measured). A point stored before under the same policy, at whatever
  count the host's load chose then, is done: running the same command on a busier or quieter
  host resumes instead of measuring everything again.
- **Settings outside the run key** (:func:`changed_settings`): the iteration policy, the
  ceilings, the power sampling and the profiled communication change what is measured but not
  which point it is (run keys of stored results stay valid), so a stored point measured with
  other settings is kept, and one warning says so and names ``--rerun``.
- **Tags** (:func:`resume_plan`): a tagged ``run``/``sweep`` resumes only the points stored
  under its own tag.
- **Code that changed** (:func:`code_changes`): a model from a source (a ``file:`` model, an
  entry point, an ``hf:`` config) carries a fingerprint of its code
  (:attr:`dlperf.zoo.spec.ModelSpec.code`) in each result; a stored point whose fingerprint
  differs from the code's now is not done: it is measured again, and a notice says so.
- **The ceilings cache** (:func:`ceilings_cache`): the matmul and bandwidth ceilings measured
  by recent points of this machine (:mod:`dlperf.measure.ceilings`) are handed to the
  workers in a file, so each is measured once per framework, device, precision and thread
  count, not after every point.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from dlperf.config import RunConfig
from dlperf.env import ThreadChoice
from dlperf.registry import framework_info
from dlperf.results.schema import RunRecord
from dlperf.results.store import ResultStore
from dlperf.results.view import config_of
from dlperf.tempdirs import owned_tempdir

#: Fields outside the run key that change what is measured (the others there say how long a
#: worker may take, where data are, how a result is labelled). ``iterations`` is compared field
#: by field.
MEASUREMENT_SETTINGS = ("iterations", "measure_ceilings", "power_interval_s",
                        "comm_profile_iters")
#: Run keys per query (SQLite's limit on the parameters of one statement is 999 in old builds).
_CHUNK = 500


def auto_threads(cfg: RunConfig) -> bool:
    """Whether the thread policy applies to ``cfg``: a CPU point on one process whose threads
    were not given, of a framework that runs the zoo's models (a test double runs none)."""
    info = framework_info(cfg.runtime.framework)
    return (cfg.hardware.device == "cpu" and cfg.hardware.threads is None and not cfg.distributed
            and bool(info and info.zoo_impls))


def stored_thread_choice(store: ResultStore) -> ThreadChoice | None:
    """The thread policy's choice this results file's points were measured with: the first
    stored result whose ``env.thread_policy`` is an automatic choice
    (:meth:`dlperf.env.ThreadChoice.record`), with when it was made; None when there is none.
    The policy chooses once per results file, so that its CPU points stay comparable (a choice
    that followed the load of each run ran one framework with its default threads and another
    with 1, and the framework comparison lost the first)."""
    q = ("SELECT result_json, created_at FROM results WHERE result_json LIKE "
         "'%thread_policy%' ORDER BY id")
    for text, created in store._db.execute(q):
        try:
            tp = ((json.loads(text or "{}").get("env") or {}).get("thread_policy") or {})
            return ThreadChoice.from_record(tp, created)
        except (ValueError, AttributeError):
            continue
    return None


def thread_variants(cfg: RunConfig, usable: int | None = None) -> list[RunConfig]:
    """``cfg`` with each thread count the policy can choose (1 .. the usable CPUs, ``usable``
    or this process's affinity), for a point of :func:`auto_threads`; [] for other points."""
    if not auto_threads(cfg):
        return []
    if usable is None:
        try:
            usable = len(os.sched_getaffinity(0))
        except AttributeError:  # pragma: no cover - not Linux
            usable = os.cpu_count() or 1
    return [cfg.with_(threads=k) for k in range(1, max(usable, 1) + 1)]


def stored_results(store: ResultStore, keys: Sequence[str]) -> dict[str, RunRecord]:
    """The newest stored record (without samples) of each run key in ``keys``."""
    out: dict[str, RunRecord] = {}
    keys = list(dict.fromkeys(keys))
    for i in range(0, len(keys), _CHUNK):
        for rec in store.records(run_key=keys[i:i + _CHUNK], samples=False):
            out[str(rec.identity.run_key)] = rec
    return out


def code_of(cfg: RunConfig) -> str | None:
    """The fingerprint of ``cfg``'s model's code now (:attr:`dlperf.zoo.spec.ModelSpec.code`);
    None for the zoo's models (and for a model whose spec cannot be made here: the run
    itself then says why)."""
    from dlperf.errors import DlperfError
    from dlperf.zoo import get_spec

    try:
        return get_spec(cfg.workload.model).code
    except DlperfError:
        return None


def stored_code(rec: RunRecord | None) -> str | None:
    """The code fingerprint a stored record was measured with, or None."""
    spec = rec.identity.spec if rec is not None else None
    return spec.code if spec is not None else None


def code_changes(points: Sequence[RunConfig], store: ResultStore, done: set[str]
                 ) -> list[RunConfig]:
    """The points of ``done`` (run keys with a final result) whose model's code changed since
    their newest stored result: both fingerprints known and different. Zoo models (no
    fingerprint) and results stored before fingerprints existed never count as changed."""
    now = {p.run_key(): c for p in points if p.run_key() in done and (c := code_of(p))}
    if not now:
        return []
    stored = stored_results(store, list(now))
    return [p for p in points if (k := p.run_key()) in now
            and (old := stored_code(stored.get(k))) is not None and old != now[k]]


def code_notice(changed: Sequence[RunConfig]) -> str | None:
    """One line for the points measured again because their code changed; None for none."""
    if not changed:
        return None
    models = sorted({p.workload.model for p in changed})
    shown = ", ".join(models[:3]) + (f" and {len(models) - 3} more" if len(models) > 3 else "")
    return (f"note: {len(changed)} stored point(s) of {shown} were measured with other code "
            "(the model's file, entry point module or config changed since): measured again")


def _policy_of(rec: RunRecord | None) -> str | None:
    """How the thread policy chose a stored record's threads (``env.thread_policy``)."""
    env = rec.env if rec is not None else None
    return ((env.thread_policy if env is not None else None) or {}).get("policy")


def resolve_threads(points: Sequence[RunConfig], choice: ThreadChoice | None,
                    store: ResultStore, done: set[str]) -> tuple[list[RunConfig], set[str]]:
    """The points as they run, and the run keys of those the policy applies to.

    Each point of :func:`auto_threads` becomes the one already stored under the policy (the
    framework's default, or a count the policy chose, as the stored result's
    ``env.thread_policy`` says), else ``choice.threads`` (None keeps the framework's default).
    Other points, and all of them without ``choice``, are unchanged."""
    if choice is None:
        return list(points), set()
    counts = [choice.threads] + [k for k in range(1, choice.usable_cpus) if k != choice.threads]
    variants = {i: [p if k is None else p.with_(threads=k) for k in counts]
                for i, p in enumerate(points) if auto_threads(p)}
    stored = stored_results(store, [v.run_key() for vs in variants.values() for v in vs
                                    if v.hardware.threads is not None
                                    and v.run_key() in done])
    out, keys = [], set()
    for i, p in enumerate(points):
        if i not in variants:
            out.append(p)
            continue
        found = [v for v in variants[i] if v.run_key() in done
                 and (v.hardware.threads is None
                      or _policy_of(stored.get(v.run_key())) == "auto")]
        if p.run_key() in done:
            found.append(p)  # the framework's default, stored before the policy existed
        q = found[0] if found else variants[i][0]
        out.append(q)
        keys.add(q.run_key())
    return out, keys


def _differences(old: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """``"field: A stored, B now"`` for each :data:`MEASUREMENT_SETTINGS` field that differs
    (fields the stored config lacks, written by an older dlperf, are not compared)."""
    out = []
    for f in MEASUREMENT_SETTINGS:
        if f not in old:
            continue
        if isinstance(now.get(f), dict) and isinstance(old[f], dict):
            out += [f"{f}.{k}: {old[f][k]} stored, {v} now" for k, v in now[f].items()
                    if k in old[f] and old[f][k] != v]
        elif old[f] != now.get(f):
            out.append(f"{f}: {old[f]} stored, {now.get(f)} now")
    return out


def changed_settings(skipped: Sequence[RunConfig], store: ResultStore,
                     choice: ThreadChoice | None = None, rerun_flag: str = "--rerun"
                     ) -> str | None:
    """One warning (plain text) when stored points that are skipped were measured with other
    settings than these points have (:data:`MEASUREMENT_SETTINGS`, and the threads the policy
    chose: ``choice``), naming the differences and ``rerun_flag``; None when none differ."""
    stored = stored_results(store, [p.run_key() for p in skipped])
    diffs: dict[str, int] = {}
    n = 0
    for p in skipped:
        old = stored.get(p.run_key())
        if old is None:
            continue
        lines = _differences(config_of(old), p.flat())
        if (choice is not None and _policy_of(old) == "auto"
                and p.hardware.threads != choice.threads):
            lines.append(f"threads (auto): {p.hardware.threads or 'default'} stored, "
                         f"{choice.threads or 'default'} now")
        n += bool(lines)
        for line in lines:
            diffs[line] = diffs.get(line, 0) + 1
    if not n:
        return None
    listed = "; ".join(f"{d}" + (f" ({c} points)" if c != n else "")
                       for d, c in list(diffs.items())[:4])
    more = f"; and {len(diffs) - 4} more" if len(diffs) > 4 else ""
    return (f"warning: {n} of the {len(skipped)} points already stored were measured with "
            f"other settings ({listed}{more}); they are kept, not measured again: add "
            f"{rerun_flag} to measure them with this command's settings")


@contextlib.contextmanager
def ceilings_cache(points: Sequence[RunConfig], store: ResultStore
                   ) -> Iterator[tuple[Any, Path] | None]:
    """While a sweep runs: a :class:`~dlperf.measure.ceilings.CeilingCache` file, named by
    ``$DLPERF_CEILINGS_CACHE`` for the workers, holding the ceilings measured by ``store``'s
    results of the points' frameworks and devices within
    :data:`~dlperf.measure.ceilings.CACHE_MAX_AGE_S` (a worker takes one only for the same
    machine: the fingerprint). Yields ``(cache, path)``, or None when no point measures
    ceilings; the caller adds each new result (``cache.add_result(r, "this sweep")``) and saves
    it. The file and the variable are gone afterwards."""
    from dlperf.measure.ceilings import CACHE_ENV, CACHE_MAX_AGE_S, CeilingCache

    if not any(p.measure.measure_ceilings for p in points):
        yield None
        return
    cache = CeilingCache()
    since = (_dt.datetime.now(_dt.UTC)
             - _dt.timedelta(seconds=CACHE_MAX_AGE_S)).isoformat(timespec="seconds")
    for r in store.rows(status="ok", framework=sorted({p.runtime.framework for p in points}),
                        device=sorted({p.hardware.device for p in points})):
        if str(r.get("created_at") or "") >= since and '"origin"' in (r["result_json"] or ""):
            try:
                cache.add_result(json.loads(r["result_json"]), f"results file {store.path}")
            except ValueError:
                continue
    with owned_tempdir("dlperf-ceilings-") as tmp:
        path = Path(tmp) / "ceilings.json"
        cache.save(path)
        _announce(CACHE_ENV, str(path))
        try:
            yield cache, path
        finally:
            _withdraw(CACHE_ENV, str(path))


#: Cache files of the sweeps running in this process, oldest first, and the variable's value
#: before the first: two sweeps run at once in one process (threads, the Python API) each set
#: and restore ``$DLPERF_CEILINGS_CACHE``; restoring in any order must leave the value it had
#: before either, never a file the other sweep already deleted.
_ANNOUNCED: list[str] = []
_BEFORE: dict[str, str | None] = {}
_ANNOUNCE_LOCK = threading.Lock()


def _announce(var: str, value: str) -> None:
    with _ANNOUNCE_LOCK:
        if not _ANNOUNCED:
            _BEFORE[var] = os.environ.get(var)
        _ANNOUNCED.append(value)
        os.environ[var] = value


def _withdraw(var: str, value: str) -> None:
    with _ANNOUNCE_LOCK:
        if value in _ANNOUNCED:
            _ANNOUNCED.remove(value)
        if _ANNOUNCED:
            os.environ[var] = _ANNOUNCED[-1]
            return
        old = _BEFORE.pop(var, None)
        if old is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = old


def resume_plan(points: list[Any], db: str, tag: str | None, *, rerun: bool,
                retry_failed: bool, failed_final: bool = False,
                notice: Callable[[str], Any] | None = None) -> tuple[list[Any], bool, int]:
    """What a tagged ``run``/``sweep`` runs: (points to give the sweep, its ``resume`` flag,
    points left out because they are done under ``tag``).

    Without a tag: every point, resuming as always (``resume = not rerun``). With one: a point
    counts as done only when ``db`` holds a final result of it *with this tag* (``ok``, or
    with ``retry_failed`` not set also a final failure: :data:`FINAL_FAILURES`, and with
    ``failed_final`` any failure, ``error`` and ``unavailable`` included); those are left
    out and the rest run (``resume=False``), so a new tag measures every point again while an
    interrupted tagged sweep resumes. A CPU point whose threads the thread policy chooses
    (:func:`auto_threads`) is done when it is stored under the tag with the
    policy's choice, whatever count that was (the point's run key holds the count chosen when it
    ran). A point of a model whose code changed since (:func:`code_changes`) is
    not done: ``notice`` gets one line saying so.

    Raises:
        ConfigError: ``db`` is not a dlperf results file.
    """
    from dlperf.results.history import FINAL_FAILURES, tag_of

    if tag is None or rerun:
        return points, not rerun, 0
    if not Path(db).is_file() or Path(db).stat().st_size == 0:
        return points, False, 0
    final = ("ok",) if retry_failed else ("ok", *FINAL_FAILURES)
    if failed_final and not retry_failed:
        final = (*final, "error", "unavailable")
    with ResultStore(db, read_only=True) as store:
        done = {r.identity.run_key: r for r in store.records(latest=False, samples=False)
                if tag_of(r) == tag and r.identity.status in final
                and r.identity.run_key is not None}
    todo, recoded = [], []
    for p in points:
        hit = _tagged_hit(p, done)
        if hit is None:
            todo.append(p)
        elif _code_changed(p, hit):
            todo.append(p)
            recoded.append(p)
    if recoded and notice is not None:
        notice(code_notice(recoded) or "")
    return todo, False, len(points) - len(todo)


def _tagged_hit(p: Any, done: dict[str, RunRecord]) -> RunRecord | None:
    """The stored record that makes ``p`` done under a tag: its own run key's, else (a point
    of the thread policy) one of its thread counts' stored with the policy's choice."""
    rec = done.get(p.run_key())
    if rec is not None:
        return rec
    if not isinstance(p, RunConfig):
        return None
    for v in thread_variants(p):
        rec = done.get(v.run_key())
        tp = getattr(rec.env, "thread_policy", None) if rec is not None and rec.env else None
        if isinstance(tp, dict) and tp.get("policy") == "auto":
            return rec
    return None


def _code_changed(p: Any, rec: RunRecord) -> bool:
    """Whether ``p``'s model's code fingerprint now differs from the one ``rec`` stored."""
    if not isinstance(p, RunConfig):
        return False
    old = rec.identity.spec.code if rec.identity.spec is not None else None
    now = code_of(p)
    return old is not None and now is not None and old != now
