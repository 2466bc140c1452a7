"""The reliability attack on dlperf's sweeps and results file (issue 23), as a benchmark.

Sweeps of tiny points (the fake framework, its option ``real_clock`` so a point takes real
time: a worker process, warm-up and a measured segment of real sleeps) are run with
``python -m dlperf sweep`` and attacked:

* ``kill9_sweep``: the sweep process killed with SIGKILL at a random moment (>= 5 trials);
* ``kill9_worker``: the point's worker process killed with SIGKILL at a random moment (the
  point must be recorded as a crash and the sweep go on);
* ``sigint`` / ``sigterm``: the sweep sent SIGINT / SIGTERM at a random moment (exit 130 /
  143 with a message, no worker left behind);
* ``faults``: points that end in a NaN loss, a timeout, a segmentation fault, a
  ``MemoryError``, an out-of-memory error and a crash (the fake's option ``fail``), each recorded
  with its status;
* ``concurrent``: two identical sweeps against one file at once, while this process reads it
  in a loop (and through ``dlperf results``): every point measured once;
* ``concurrent_kill9``: two sweeps at once, one killed with SIGKILL mid-point: the other
  takes over its claim and finishes the grid;
* ``torch_kill9`` (``--torch``): a real PyTorch tiny sweep killed with SIGKILL, then resumed;
* ``store_sigint`` / ``store_sigterm`` (``--store-trials N`` of each): the signal lands while a
  result is being stored: the sweep runs under a wrapper that slows the store's INSERT (a
  marker file, then a sleep inside the transaction), and the signal is sent when the marker of
  a randomly chosen point appears. The result being stored must be in the file when the sweep
  has stopped (``dropped`` counts those that are not), the exit status 130 / 143 with a
  message, and the resume must not measure it again.

After each attack the sweep is resumed (run again to the end) and counted: ``lost`` (rows that
were in the file after the attack and are gone after the resume), ``redone`` (points with a
final result before the resume that were measured again), ``duplicates`` (points with more than
one row), ``missing`` (points without a final result at the end), ``integrity`` (``PRAGMA
integrity_check`` of the file, and of a reader's copy right after the attack), and whether a
reader could read the file right after the attack. The goal: 0 lost, 0 redone, 0 duplicates,
0 missing, integrity ok everywhere.

    PYTHONPATH=src python benchmarks/reliability.py [--trials 5] [--points 8] [--seed 0] \
        [--torch] [-o benchmarks/results/cpu-dev/reliability.json]

Writes the JSON (every trial) and a Markdown table beside it (``.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
#: The dlperf source the sweeps run (``--src``: e.g. an older tree, for a before/after).
SRC = [ROOT / "src"]
FINAL = ("ok", "oom", "nan_loss", "crash", "timeout")
#: The counts every trial must keep at zero, and the checks that must hold.
ZERO = ("lost", "redone", "duplicates", "missing", "dropped")

#: The wrapper of the ``store_*`` attacks: ``python WRAPPER ARGS...`` runs ``dlperf ARGS...``
#: with every result's INSERT slowed: a marker file ``$ATTACK_MARKS/<n>.<run_key>`` is written
#: inside the store's transaction, then it sleeps ``$ATTACK_STORE_DELAY_S``.
STORE_WRAPPER = """
import os, sys, time, itertools
from pathlib import Path
import dlperf.results.store as st
_insert, _n = st.ResultStore._insert, itertools.count(1)
def slow_insert(self, rec, sweep):
    rid = _insert(self, rec, sweep)
    Path(os.environ["ATTACK_MARKS"], f"{next(_n)}.{rec.identity.run_key}").write_text("")
    time.sleep(float(os.environ["ATTACK_STORE_DELAY_S"]))
    return rid
st.ResultStore._insert = slow_insert
from dlperf.cli import main
sys.argv = ["dlperf", *sys.argv[1:]]
main()
"""


def sweep_yaml(path: Path, batches: list[int], *, min_iters: int = 20, framework: str = "fake",
               model: str = "fcn5_tiny", timeout_s: float = 60.0,
               fail: dict[int, str] | None = None) -> Path:
    """A sweep file of ``batches`` (one point each); the fake framework's points take real
    time (5 ms steps of a real clock) and fail as ``fail`` says (batch size -> failure)."""
    opts = (f"  options: {json.dumps({'step_s': 0.005, 'real_clock': True, 'fail': fail or {}})}\n"
            if framework == "fake" else "")
    path.write_text(
        f"name: reliability\n"
        f"defaults:\n  framework: {framework}\n  model: {model}\n  device: cpu\n{opts}"
        f"  timeout_s: {timeout_s}\n  measure_ceilings: false\n"
        f"  iterations: {{min_iters: {min_iters}, max_iters: {min_iters}, min_time_s: 0.0, "
        f"max_warmup_iters: 3, min_warmup_iters: 0, warmup_window: 2}}\n"
        f"grid:\n  - batch_size: {batches}\n")
    return path


def environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The sweeps' environment: the fake framework registered, this checkout's source."""
    src = str(SRC[0])
    pp = os.environ.get("PYTHONPATH")
    return {**os.environ, "DLPERF_FAKE_FRAMEWORK": "1",
            "PYTHONPATH": src + (os.pathsep + pp if pp else ""),
            "COLUMNS": "200", **(extra or {})}


def _default_sigint() -> None:
    """In the child: SIGINT as a terminal's foreground process has it. A shell starts a
    background job (this attack under ``nohup ... &``) with SIGINT ignored, and a child
    inherits that: its Ctrl-C trials would then test nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_sweep(yaml: Path, db: Path, log: Path, env: dict[str, str]) -> subprocess.Popen:
    """``python -m dlperf sweep YAML --db DB`` in the background, output to ``log``."""
    return subprocess.Popen([sys.executable, "-m", "dlperf", "sweep", str(yaml), "--db",
                             str(db)], env=env, stdout=subprocess.DEVNULL,
                            stderr=open(log, "ab"), preexec_fn=_default_sigint)


def run_sweep(yaml: Path, db: Path, log: Path, env: dict[str, str],
              timeout_s: float = 600) -> tuple[int, float]:
    """Run a sweep to its end: (exit code, seconds)."""
    t0 = time.monotonic()
    p = start_sweep(yaml, db, log, env)
    rc = p.wait(timeout=timeout_s)
    return rc, time.monotonic() - t0


def rows(db: Path) -> list[tuple[int, str, str, str]]:
    """``(id, run_key, status, created_at)`` of every result row, read as dlperf's readers do
    (an in-memory copy: a hot journal is rolled back there, the file is not touched)."""
    from dlperf.results.dbfile import open_copy

    if not db.exists() or db.stat().st_size == 0:
        return []
    con = open_copy(db)
    try:
        return [tuple(r) for r in con.execute(
            "SELECT id, run_key, status, created_at FROM results ORDER BY id")]
    except sqlite3.OperationalError:  # killed before the tables were made
        return []
    finally:
        con.close()


def copy_integrity(db: Path) -> str:
    """``PRAGMA integrity_check`` of a reader's copy (the file as a reader sees it now)."""
    from dlperf.results.dbfile import open_copy

    if not db.exists() or db.stat().st_size == 0:
        return "ok"
    con = open_copy(db)
    try:
        return str(con.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        con.close()


def file_integrity(db: Path) -> str:
    """``PRAGMA integrity_check`` of the file itself (after the resume: no journal left)."""
    con = sqlite3.connect(db)
    try:
        return str(con.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        con.close()


def reader_ok(db: Path) -> bool:
    """Whether dlperf's reader (``ResultStore(read_only=True)``) reads the file now."""
    from dlperf.results.store import ResultStore

    if not db.exists() or db.stat().st_size == 0:
        return True
    try:
        with ResultStore(db, read_only=True) as s:
            s.rows()
        return True
    except Exception:  # noqa: BLE001 - counted, not raised
        return False


def workers_of(pid: int) -> list[psutil.Process]:
    """The live worker processes (``python -m dlperf.worker``) under process ``pid``."""
    try:
        kids = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []
    out = []
    for k in kids:
        try:
            if "dlperf.worker" in " ".join(k.cmdline()) and k.status() != psutil.STATUS_ZOMBIE:
                out.append(k)
        except psutil.Error:
            pass
    return out


def worker_pids_for(parent_pid: int) -> list[int]:
    """Worker processes on this host started by sweep ``parent_pid`` (their last argument),
    also once the sweep is gone (orphans)."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info.get("cmdline") or []
        if "dlperf.worker" in cmd and cmd[-1:] == [str(parent_pid)]:
            try:
                if p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p.pid)
            except psutil.Error:
                pass
    return out


def wait_gone(pids: list[int], limit_s: float = 10.0) -> float | None:
    """Seconds until every process of ``pids`` is gone (None: still there after limit_s)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit_s:
        if not [p for p in pids if psutil.pid_exists(p)
                and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]:
            return time.monotonic() - t0
        time.sleep(0.05)
    return None


def count(db: Path, before: list[tuple], keys: set[str] | None = None) -> dict[str, Any]:
    """The counts of a trial: ``before`` is the rows after the attack, ``db`` the file after the
    resume; ``keys``: the sweep's run keys (default: those in the file)."""
    after = rows(db)
    after_ids = {(r[0], r[1], r[3]) for r in after}
    lost = sum((r[0], r[1], r[3]) not in after_ids for r in before)
    final_before = {r[1] for r in before if r[2] in FINAL}
    top = max((r[0] for r in before), default=0)
    redone = sum(1 for r in after if r[0] > top and r[1] in final_before)
    per_key = Counter(r[1] for r in after)
    keys = keys if keys is not None else set(per_key)
    final_after = {r[1] for r in after if r[2] in FINAL}
    return {"rows_before": len(before), "rows_after": len(after), "lost": lost,
            "redone": redone, "duplicates": sum(1 for k, n in per_key.items() if n > 1),
            "missing": len(keys - final_after), "integrity": file_integrity(db),
            "statuses": dict(Counter(r[2] for r in after))}


_KEYS: dict[Path, set[str]] = {}


def keys_of(yaml: Path) -> set[str]:
    """The run keys of a sweep file's points (``dlperf sweep --dry-run --restart`` lists them;
    in a process of its own, where the fake framework is registered)."""
    if yaml not in _KEYS:
        r = subprocess.run([sys.executable, "-m", "dlperf", "sweep", str(yaml), "--db",
                            str(yaml.with_suffix(".none.db")), "--dry-run", "--restart"],
                           env=environment(), capture_output=True, text=True, timeout=120)
        keys = {ln.split()[1] for ln in r.stdout.splitlines() if ln.startswith("pending")}
        if r.returncode != 0 or not keys:
            raise SystemExit(f"cannot list the points of {yaml}: {r.stderr[-2000:]}")
        _KEYS[yaml] = keys
    return _KEYS[yaml]


def attack_sweep(work: Path, yaml: Path, env: dict[str, str], delay_s: float,
                 how: str) -> dict[str, Any]:
    """One trial: start the sweep, after ``delay_s`` attack it (``kill9_sweep``, ``sigint``,
    ``sigterm``, ``kill9_worker``), wait for it, then resume and count."""
    db, log = work / "r.db", work / "sweep.log"
    (work / "tmp").mkdir(exist_ok=True)  # the sweep's temporary folders: counted at the end
    env = {**env, "TMPDIR": str(work / "tmp")}
    p = start_sweep(yaml, db, log, env)
    time.sleep(delay_s)
    rec: dict[str, Any] = {"attack": how, "delay_s": round(delay_s, 3)}
    workers = workers_of(p.pid)
    if how == "kill9_worker":
        t_end = time.monotonic() + 10
        while not workers and p.poll() is None and time.monotonic() < t_end:
            time.sleep(0.01)
            workers = workers_of(p.pid)
        if workers:
            workers[0].send_signal(signal.SIGKILL)
            rec["killed_worker"] = True
        else:
            rec["killed_worker"] = False
        rc = p.wait(timeout=600)
    else:
        sig = {"kill9_sweep": signal.SIGKILL, "sigint": signal.SIGINT,
               "sigterm": signal.SIGTERM}[how]
        t_sig = time.monotonic()
        p.send_signal(sig)
        rc = p.wait(timeout=120)
        rec["stop_s"] = round(time.monotonic() - t_sig, 3)
        rec["orphans_gone_s"] = wait_gone(worker_pids_for(p.pid) + [w.pid for w in workers])
    rec["exit_code"] = rc
    text = log.read_text(errors="replace") if log.exists() else ""
    rec["message"] = ("terminated (SIGTERM)" in text if how == "sigterm" else
                      "interrupted" in text if how == "sigint" else None)
    rec["traceback"] = "Traceback" in text
    # the sweep printed its first point: dlperf's own handler was in place
    rec["started"] = "[1/" in text or "resuming" in text
    before = rows(db)
    rec["reader_ok_after_attack"] = reader_ok(db)
    rec["copy_integrity_after_attack"] = copy_integrity(db)
    rc2, _ = run_sweep(yaml, db, work / "resume.log", env)
    rec["resume_exit_code"] = rc2
    rec.update(count(db, before, keys_of(yaml)))
    rec["temp_left"] = len(list((work / "tmp").iterdir()))
    if how == "kill9_worker":
        rec["worker_kill_recorded"] = "SIGKILL" in " ".join(
            str(r) for r in sqlite3.connect(db).execute("SELECT error FROM results"))
    return rec


def attack_store(work: Path, yaml: Path, env: dict[str, str], how: str, nth: int,
                 delay_s: float = 0.4) -> dict[str, Any]:
    """One trial of ``store_sigint``/``store_sigterm``: the signal lands while the ``nth``
    result of the sweep is inside its store transaction (module docstring)."""
    db, log, marks = work / "r.db", work / "sweep.log", work / "marks"
    marks.mkdir()
    (work / "tmp").mkdir(exist_ok=True)
    wrapper = work / "slow_store.py"
    wrapper.write_text(STORE_WRAPPER)
    env = {**env, "TMPDIR": str(work / "tmp"), "ATTACK_MARKS": str(marks),
           "ATTACK_STORE_DELAY_S": str(delay_s)}
    p = subprocess.Popen([sys.executable, str(wrapper), "sweep", str(yaml), "--db", str(db)],
                         env=env, stdout=subprocess.DEVNULL, stderr=open(log, "ab"),
                         preexec_fn=_default_sigint)
    sig = signal.SIGINT if how == "store_sigint" else signal.SIGTERM
    rec: dict[str, Any] = {"attack": how, "nth_store": nth}
    key, t_end = None, time.monotonic() + 300
    while key is None and p.poll() is None and time.monotonic() < t_end:
        hit = [m.name for m in marks.iterdir() if m.name.split(".", 1)[0] == str(nth)]
        if hit:
            key = hit[0].split(".", 1)[1]
            p.send_signal(sig)
        else:
            time.sleep(0.005)
    rc = p.wait(timeout=120)
    rec.update(exit_code=rc, signalled=key is not None, run_key=key)
    text = log.read_text(errors="replace") if log.exists() else ""
    rec["message"] = ("terminated (SIGTERM)" in text if how == "store_sigterm"
                      else "interrupted" in text)
    rec["traceback"] = "Traceback" in text
    before = rows(db)
    rec["dropped"] = int(key is not None and key not in {r[1] for r in before})
    rec["reader_ok_after_attack"] = reader_ok(db)
    rec["copy_integrity_after_attack"] = copy_integrity(db)
    rc2, _ = run_sweep(yaml, db, work / "resume.log", {k: v for k, v in env.items()
                                                         if not k.startswith("ATTACK_")})
    rec["resume_exit_code"] = rc2
    rec.update(count(db, before, keys_of(yaml)))
    rec["temp_left"] = len(list((work / "tmp").iterdir()))
    return rec


def faults(work: Path, env: dict[str, str], timeout_s: float = 8.0) -> dict[str, Any]:
    """Points that fail each way, then a resume: each failure recorded, nothing redone;
    ``timeout_s``: the points' timeout (the hanging point waits for it)."""
    kinds = {2: "nan", 3: "hang", 4: "segv", 5: "memerr", 6: "oom", 7: "crash"}
    want = {1: "ok", 2: "nan_loss", 3: "timeout", 4: "crash", 5: "oom", 6: "oom", 7: "crash"}
    yaml = sweep_yaml(work / "faults.yaml", list(want), timeout_s=timeout_s, fail=kinds)
    db = work / "r.db"
    rc, secs = run_sweep(yaml, db, work / "sweep.log", env)
    con = sqlite3.connect(db)
    got = {b: (s, e or "") for b, s, e in con.execute(
        "SELECT batch_size, status, error FROM results")}
    con.close()
    before = rows(db)
    rc2, _ = run_sweep(yaml, db, work / "resume.log", env)
    rec = {"attack": "faults", "exit_code": rc, "seconds": round(secs, 2),
           "recorded": {f"b={b} {kinds.get(b, 'none')}": got.get(b, ("missing", ""))[0]
                        for b in want},
           "as_expected": all(got.get(b, ("",))[0] == s for b, s in want.items())
           and "SIGSEGV" in got.get(4, ("", ""))[1],
           "resume_exit_code": rc2, "traceback": "Traceback" in (work / "sweep.log").read_text()}
    rec.update(count(db, before, keys_of(yaml)))
    return rec


class Reader(threading.Thread):
    """Reads the file in a loop as ``dlperf results`` does (an in-memory copy) while sweeps
    write it; counts the reads and the errors."""

    def __init__(self, db: Path) -> None:
        super().__init__(daemon=True)
        self.db, self.stop, self.reads, self.errors = db, threading.Event(), 0, []

    def run(self) -> None:
        from dlperf.results.store import ResultStore

        while not self.stop.is_set():
            if self.db.exists() and self.db.stat().st_size > 0:
                try:
                    with ResultStore(self.db, read_only=True) as s:
                        s.rows()
                    self.reads += 1
                except Exception as e:  # noqa: BLE001 - counted
                    self.errors.append(f"{type(e).__name__}: {e}"[:300])
            time.sleep(0.005)


def concurrent(work: Path, yaml: Path, env: dict[str, str], kill_after_s: float | None
               ) -> dict[str, Any]:
    """Two sweeps of ``yaml`` into one file at once, read in a loop meanwhile (and by ``dlperf
    results`` from the command line, once the file has content); with ``kill_after_s`` the
    first is killed (SIGKILL) then and the second must finish the grid alone. A read error's
    first three messages are kept (``read_error_examples``, ``cli_read_error_examples``)."""
    db = work / "r.db"
    reader = Reader(db)
    reader.start()
    a = start_sweep(yaml, db, work / "a.log", env)
    time.sleep(0.3)  # the second starts while the first is at its first point
    b = start_sweep(yaml, db, work / "b.log", env)
    cli_reads, cli_errors, cli_examples = 0, 0, []
    rec: dict[str, Any] = {"attack": "concurrent_kill9" if kill_after_s else "concurrent",
                           "delay_s": round(kill_after_s, 3) if kill_after_s else None}
    t0 = time.monotonic()
    killed = False
    while a.poll() is None or b.poll() is None:
        if kill_after_s is not None and not killed and time.monotonic() - t0 > kill_after_s:
            a.send_signal(signal.SIGKILL)
            killed = True
        # a read counts once the file has content when it begins, as the Reader's do: before
        # the first sweep's first commit, "does not exist" and "is empty (0 bytes)" are the
        # right answers, not read errors (the sweeps start at the same time as this loop)
        if not (db.is_file() and db.stat().st_size > 0):
            time.sleep(0.01)
            continue
        r = subprocess.run([sys.executable, "-m", "dlperf", "results", "--db", str(db), "-f",
                            "csv"], env=env, capture_output=True, text=True, timeout=120)
        cli_reads += 1
        if r.returncode != 0 or "Traceback" in r.stderr:
            cli_errors += 1
            cli_examples.append(f"exit {r.returncode}: {r.stderr.strip()[-300:]}")
        if time.monotonic() - t0 > 600:
            break
    rca, rcb = a.wait(timeout=60), b.wait(timeout=600)
    reader.stop.set()
    reader.join(timeout=30)
    before = rows(db)
    rec.update({"exit_codes": [rca, rcb], "killed_first": killed,
                "reads": reader.reads, "read_errors": len(reader.errors),
                "read_error_examples": reader.errors[:3], "cli_reads": cli_reads,
                "cli_read_errors": cli_errors, "cli_read_error_examples": cli_examples[:3],
                "measured_by": [_ran(work / "a.log"), _ran(work / "b.log")],
                "missing_before_resume": len(keys_of(yaml) - {r[1] for r in before
                                                              if r[2] in FINAL})})
    rc2, _ = run_sweep(yaml, db, work / "resume.log", env)
    rec["resume_exit_code"] = rc2
    rec.update(count(db, before, keys_of(yaml)))
    return rec


def _ran(log: Path) -> int:
    """Points a sweep measured itself: its result lines (``ok``/failed lines of its log)."""
    text = log.read_text(errors="replace") if log.exists() else ""
    return sum(1 for ln in text.splitlines() if " fcn5_tiny fake/eager" in ln
               and ln.lstrip().split(" ", 1)[0] in FINAL + ("error", "unavailable"))


def calibrate(work: Path, yaml: Path, env: dict[str, str]) -> float:
    """Seconds a clean run of ``yaml`` takes here (the window attacks are drawn from)."""
    rc, secs = run_sweep(yaml, work / "clean.db", work / "clean.log", env)
    if rc != 0:
        raise SystemExit(f"the clean sweep failed (exit {rc}): "
                         f"{(work / 'clean.log').read_text()[-2000:]}")
    return secs


def run(trials: int = 5, points: int = 8, seed: int = 0, torch: bool = False,
        out: Path | None = None, fault_timeout_s: float = 8.0, store_trials: int = 1,
        only_store: bool = False) -> dict[str, Any]:
    """Every attack (the module docstring); returns (and writes to ``out``) the record.
    ``fault_timeout_s``: the timeout of the ``faults`` points (its hanging point waits that
    long; a point of the fake framework takes under a second); ``store_trials``: trials of
    each ``store_*`` attack; ``only_store``: those alone."""
    rng = random.Random(seed)
    env = environment()
    t_start = time.monotonic()
    records: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="dlperf-reliability-") as tmp:
        base = Path(tmp)
        yaml = sweep_yaml(base / "sweep.yaml", list(range(1, points + 1)))
        clean_s = calibrate(base, yaml, env)
        plan = ([("kill9_sweep", rng.uniform(0.3, clean_s)) for _ in range(trials)]
                + [("kill9_worker", rng.uniform(0.3, clean_s * 0.8)) for _ in range(trials)]
                + [("sigint", rng.uniform(0.5, clean_s * 0.8)),
                   ("sigterm", rng.uniform(0.5, clean_s * 0.8))])
        for i, (how, delay) in enumerate([] if only_store else plan):
            work = base / f"{how}-{i}"
            work.mkdir()
            records.append(attack_sweep(work, yaml, env, delay, how))
        for i in range(store_trials):
            for how in ("store_sigint", "store_sigterm"):
                work = base / f"{how}-{i}"
                work.mkdir()
                records.append(attack_store(work, yaml, env, how, rng.randint(1, points)))
        if not only_store:
            (base / "faults").mkdir()
            records.append(faults(base / "faults", env, fault_timeout_s))
            for name, kill in (("concurrent", None),
                               ("concurrent_kill9", rng.uniform(0.5, clean_s * 0.6))):
                work = base / name
                work.mkdir()
                records.append(concurrent(work, yaml, env, kill))
        if torch and not only_store:
            work = base / "torch"
            work.mkdir()
            tyaml = sweep_yaml(work / "torch.yaml", [4, 8], min_iters=10, framework="torch")
            tenv = {**env, "OMP_NUM_THREADS": "1"}
            t_clean = calibrate(work, tyaml, tenv)
            records.append({**attack_sweep(work, tyaml, tenv, rng.uniform(1.0, t_clean),
                                           "kill9_sweep"), "attack": "torch_kill9"})
    result = summarize(records)
    result.update(trials=trials, points=points, seed=seed, clean_sweep_s=round(clean_s, 2),
                  store_trials=store_trials, only_store=only_store,
                  src=str(SRC[0]),
                  seconds=round(time.monotonic() - t_start, 1),
                  host={"python": platform.python_version(), "cpus": os.cpu_count(),
                        "platform": platform.platform()},
                  records=records)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1, default=str) + "\n")
        out.with_suffix(".md").write_text(markdown(result))
    return result


def problems(r: dict[str, Any]) -> list[str]:
    """What went wrong in one trial record (empty: it met the goal)."""
    bad = [f"{k}={r[k]}" for k in ZERO if r.get(k)]
    if r.get("integrity") != "ok":
        bad.append(f"integrity={r.get('integrity')}")
    if r.get("copy_integrity_after_attack", "ok") != "ok":
        bad.append("reader copy integrity after the attack")
    if r.get("reader_ok_after_attack") is False:
        bad.append("a reader failed right after the attack")
    if r.get("traceback"):
        bad.append("a traceback in the sweep's output")
    if r.get("read_errors") or r.get("cli_read_errors"):
        bad.append("read errors while writing")
    if r.get("resume_exit_code") not in (0, None):
        bad.append(f"resume exit {r.get('resume_exit_code')}")
    if r["attack"] in ("store_sigint", "store_sigterm"):
        want = 130 if r["attack"] == "store_sigint" else 143
        if not r.get("signalled"):
            bad.append("the store to hit never came")
        elif r.get("exit_code") != want:  # it landed during a store: the sweep had not ended
            bad.append(f"exit {r.get('exit_code')} (want {want})")
        elif not r.get("message"):
            bad.append("no message")
    if r["attack"] in ("sigint", "sigterm"):
        want = 130 if r["attack"] == "sigint" else 143
        # 0: the sweep ended before the signal; -SIGINT/-SIGTERM: it came while Python was
        # still importing dlperf (a loaded host), before the CLI's handler: the interpreter's
        # own default (a shell shows 130/143), with nothing stored yet
        early = -2 if r["attack"] == "sigint" else -15
        if r.get("exit_code") == early and not r.get("started"):
            pass
        elif r.get("exit_code") not in (want, 0):
            bad.append(f"exit {r.get('exit_code')} (want {want})")
        if r.get("exit_code") == want and not r.get("message"):
            bad.append("no message")
    if r["attack"] in ("sigint", "sigterm", "kill9_sweep") and r.get("orphans_gone_s") is None:
        bad.append("a worker outlived the sweep by over 10 s")
    if r["attack"] == "kill9_worker" and r.get("killed_worker") and not r.get(
            "worker_kill_recorded"):
        bad.append("the killed worker's point was not recorded as a crash")
    if r["attack"] == "faults" and not r.get("as_expected"):
        bad.append(f"faults recorded as {r.get('recorded')}")
    if r["attack"].startswith("concurrent") and r.get("missing_before_resume"):
        bad.append(f"{r['missing_before_resume']} point(s) left undone by the sweeps")
    return bad


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Totals over the trials and whether the goal was met."""
    tot = {k: sum(int(r.get(k) or 0) for r in records) for k in ZERO}
    return {"totals": {**tot, "trials": len(records),
                       "integrity_ok": sum(r.get("integrity") == "ok" for r in records),
                       "reads_while_writing": sum(int(r.get("reads") or 0) for r in records),
                       "read_errors": sum(int(r.get("read_errors") or 0) for r in records),
                       "cli_reads_while_writing": sum(int(r.get("cli_reads") or 0)
                                                      for r in records),
                       "temp_folders_left": sum(int(r.get("temp_left") or 0) for r in records),
                       "by_attack": dict(Counter(r["attack"] for r in records))},
            "problems": {f"{i}:{r['attack']}": p for i, r in enumerate(records)
                         if (p := problems(r))},
            "goal_met": not any(problems(r) for r in records)}


def markdown(result: dict[str, Any]) -> str:
    """The result as a Markdown report: totals, then one line per trial."""
    t = result["totals"]
    lines = [f"# Reliability attack ({result['trials']} trials per kill attack, "
             f"{result['points']} points per sweep, seed {result['seed']})", "",
             f"Goal met: **{'yes' if result['goal_met'] else 'no'}**. {t['trials']} trials in "
             f"{result['seconds']} s (a clean sweep: {result['clean_sweep_s']} s) on "
             f"{result['host']['cpus']} CPUs, Python {result['host']['python']}.", "",
             "| lost | dropped in a store | redone | duplicates | missing | integrity ok | reads "
             "while writing (errors) | CLI reads while writing |",
             "|---:|---:|---:|---:|---:|---:|---|---:|",
             f"| {t['lost']} | {t['dropped']} | {t['redone']} | {t['duplicates']} | "
             f"{t['missing']} | "
             f"{t['integrity_ok']}/{t['trials']} | {t['reads_while_writing']} "
             f"({t['read_errors']}) | {t['cli_reads_while_writing']} |", "",
             f"Temporary folders left behind by killed sweeps (not part of the goal): "
             f"{t['temp_folders_left']}.", "",
             "| # | attack | at s | exit | resume exit | rows after attack / end | lost | "
             "redone | dup | missing | integrity | notes |",
             "|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---|---|"]
    for i, r in enumerate(result["records"]):
        notes = []
        if r.get("orphans_gone_s") is not None:
            notes.append(f"workers gone after {r['orphans_gone_s']:.2f} s")
        if r.get("temp_left"):
            notes.append(f"{r['temp_left']} temporary folder(s) left behind")
        if r["attack"].startswith("store_"):
            notes.append(f"signal during store #{r['nth_store']}: "
                         + ("result dropped" if r.get("dropped") else "result kept"))
        if r["attack"] == "kill9_worker":
            notes.append("worker killed, recorded as crash" if r.get("worker_kill_recorded")
                         else "no worker was running" if not r.get("killed_worker")
                         else "NOT recorded")
        if r["attack"] == "faults":
            notes.append(", ".join(f"{k}: {v}" for k, v in r["recorded"].items()))
        if r["attack"].startswith("concurrent"):
            notes.append(f"measured by each sweep {r['measured_by']}, {r['reads']} reads "
                         f"({r['read_errors']} errors), {r['cli_reads']} `dlperf results`")
        if r.get("message"):
            notes.append("message printed")
        if problems(r):
            notes.append("PROBLEM: " + "; ".join(problems(r)))
        ec = r.get("exit_code", r.get("exit_codes"))
        lines.append(f"| {i} | {r['attack']} | {r.get('delay_s') or ''} | {ec} | "
                     f"{r.get('resume_exit_code')} | {r['rows_before']} / {r['rows_after']} | "
                     f"{r['lost']} | {r['redone']} | {r['duplicates']} | {r['missing']} | "
                     f"{r['integrity']} | {'; '.join(notes)} |")
    lines += ["", "Command: `PYTHONPATH=src python benchmarks/reliability.py "
              f"--trials {result['trials']} --points {result['points']} --seed {result['seed']}"
              f" --store-trials {result.get('store_trials', 1)}"
              + (" --only-store" if result.get("only_store") else "")
              + (" --torch" if any(r['attack'] == 'torch_kill9' for r in result['records'])
                 else "")
              + (f" --src {result['src']}" if result.get("src") not in (None, str(ROOT / "src"))
                 else "") + " -o <out>.json`"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command line: run the attacks, print the totals; exit 1 when the goal was missed."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=5, help="kill -9 trials of each kind")
    ap.add_argument("--points", type=int, default=8, help="points per sweep")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--torch", action="store_true", help="also a real PyTorch tiny sweep")
    ap.add_argument("--store-trials", type=int, default=1,
                    help="trials of each signal-during-a-store attack (SIGINT, SIGTERM)")
    ap.add_argument("--only-store", action="store_true",
                    help="only the signal-during-a-store attacks")
    ap.add_argument("-o", "--output", type=Path, default=None)
    ap.add_argument("--src", type=Path, default=None,
                    help="the dlperf source folder the sweeps run (default: this checkout's)")
    a = ap.parse_args(argv)
    if a.src is not None:
        SRC[0] = a.src.resolve()
    res = run(a.trials, a.points, a.seed, a.torch, a.output, store_trials=a.store_trials,
              only_store=a.only_store)
    print(json.dumps({"totals": res["totals"], "problems": res["problems"],
                      "goal_met": res["goal_met"], "seconds": res["seconds"]}, indent=1))
    return 0 if res["goal_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
