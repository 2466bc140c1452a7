"""Fuzz dlperf's input readers with mutated data and sweep files; count how each case ends.

Writes mutated MNIST IDX (raw and gzip), CIFAR-10 binary, token (PTB / WikiText-2) and
ImageFolder (JPEG / PNG) files made from the real data sets, malformed YAML sweep files, and
mutated side files of a results database: kept results in ``DB.unsaved/`` and on-disk caches
(``fuzz_mutants.py``, ``fuzz_yaml.py``, ``fuzz_sidefiles.py``), then runs dlperf's readers on
each (for the side files: the database's next writer, :func:`dlperf.jsoncache.read_json`), in
this process,
with a time limit per case:

* data: ``load_dataset`` on the mutant, then what a run does next: ``make_batches`` for a model
  that trains on that data set (fcn_mnist, alexnet_cifar, lstm_tiny), and for an ImageFolder
  both image decoders of the input pipelines (``load_train_image``, ``load_eval_image``);
* YAML: ``dlperf.yamlsafe.load_yaml_file`` (``--yaml-reader yamlsafe``, the default where it
  exists) or the sweep loader ``dlperf.config.load_sweep`` (``--yaml-reader load_sweep``).

Each case ends as one of: ``refused`` (a DataError / ConfigError whose message names the file,
under 4000 characters), ``refused_unclear`` (one that does not), ``accepted`` (fine when the
mutant is valid or its change is undetectable), ``silently_accepted`` (a detectable defect was
taken), ``wrongly_refused`` (a valid file was refused), ``raw_traceback`` (any other exception),
``hang`` (over the time limit). The goal is 0 silently accepted, 0 raw tracebacks, 0 hangs.

    PYTHONPATH=src:benchmarks python benchmarks/fuzz_inputs.py \
        [--seed 0] [--small 30] [--limit-s 10] [--max-memory-gb 4] [-o result.json]

The time limit is SIGALRM (it interrupts Python code and blocking system calls); a case still
running 3 x the limit + 10 s later (stuck in C code) is recorded as a hang and the run stops
with exit code 3 after writing what it has.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzz_mutants import Case, cifar_cases, image_cases, mnist_cases, token_cases
from fuzz_sidefiles import cache_cases, cache_reader, unsaved_cases, unsaved_reader
from fuzz_yaml import yaml_cases

KINDS = ("mnist", "cifar10", "tokens", "imagefolder", "yaml", "unsaved", "cache")
OUTCOMES = ("refused", "refused_unclear", "accepted", "silently_accepted", "wrongly_refused",
            "raw_traceback", "hang")
#: A refusal message longer than this is not a clear one (it may print the input).
MAX_CLEAR_MESSAGE = 4000


class CaseTimeout(BaseException):
    """Raised by SIGALRM in the case that ran out of time (a BaseException, so no ``except
    Exception`` in the code under test swallows it)."""


def all_cases(seed: int) -> list[Case]:
    """Every case, in a fixed order for a given seed."""
    rng = np.random.default_rng(seed)
    return (mnist_cases(rng) + cifar_cases(rng) + token_cases(rng) + image_cases(rng)
            + yaml_cases(rng) + unsaved_cases(rng) + cache_cases(rng))


def pick_small(cases: list[Case], n: int, seed: int) -> list[Case]:
    """``n`` light cases spread evenly over the kinds (the seeds first, then a random draw)."""
    rng = np.random.default_rng(seed)
    out: list[Case] = []
    per = {k: [c for c in cases if c.kind == k and not c.heavy] for k in KINDS}
    for k in KINDS:
        lst = per[k]
        want = n // len(KINDS) + (1 if KINDS.index(k) < n % len(KINDS) else 0)
        firsts = [c for c in lst if c.expect == "accept"][:1]
        rest = [c for c in lst if c not in firsts]
        idx = rng.permutation(len(rest))[:max(0, want - len(firsts))]
        out += firsts + [rest[i] for i in sorted(idx)]
    return out


def make_readers(yaml_reader: str) -> dict[str, Any]:
    """The reader of each kind: ``path -> None`` (raises what the reader raises)."""
    from dlperf.data import load_dataset, make_batches
    from dlperf.zoo import get_spec

    def data(model: str):
        def read(path: Path) -> None:
            ds = load_dataset(path)
            make_batches(ds, get_spec(model), 1, max_batches=1)
        return read

    def imagefolder(path: Path) -> None:
        from dlperf.data.imagefolder import load_eval_image, load_train_image

        ds = load_dataset(f"imagefolder:{path}")
        for p in ds.x:
            load_train_image(str(p), 32, np.random.default_rng(0))
            load_eval_image(str(p), 32)

    if yaml_reader == "auto":
        try:
            import dlperf.yamlsafe  # noqa: F401
            yaml_reader = "yamlsafe"
        except ImportError:
            yaml_reader = "load_sweep"
    if yaml_reader == "yamlsafe":
        from dlperf.yamlsafe import load_yaml_file as read_yaml
    else:
        from dlperf.config import load_sweep as read_yaml
    return {"mnist": data("fcn_mnist"), "cifar10": data("alexnet_cifar"),
            "tokens": data("lstm_tiny"), "imagefolder": imagefolder, "yaml": read_yaml,
            "unsaved": unsaved_reader, "cache": cache_reader, "_yaml_reader": yaml_reader}


def classify(case: Case, exc: BaseException | None) -> str:
    """The outcome of a case that ended with ``exc`` (None: the reader returned)."""
    from dlperf.errors import ConfigError, DataError

    if exc is None:
        return "silently_accepted" if case.expect == "refuse" else "accepted"
    if isinstance(exc, CaseTimeout):
        return "hang"
    if not isinstance(exc, (DataError, ConfigError)):
        return "raw_traceback"
    if case.expect == "accept":
        return "wrongly_refused"
    msg = str(exc)
    clear = len(msg) <= MAX_CLEAR_MESSAGE and any(n in msg for n in case.names)
    return "refused" if clear else "refused_unclear"


def _alarm(signum: int, frame: Any) -> None:
    raise CaseTimeout()


class Watchdog:
    """Stops the process (exit code 3) after writing ``on_hang()``'s result when one case runs
    past ``3 * limit_s + 10`` seconds: SIGALRM cannot interrupt C code that never returns."""

    def __init__(self, limit_s: float, on_hang: Any) -> None:
        self.hard_s, self.on_hang = 3 * limit_s + 10, on_hang
        self.started: float | None = None
        self._done = threading.Event()
        threading.Thread(target=self._run, daemon=True, name="fuzz-watchdog").start()

    def stop(self) -> None:
        self._done.set()

    def _run(self) -> None:
        while not self._done.wait(0.5):
            t = self.started
            if t is not None and time.monotonic() - t > self.hard_s:
                self.on_hang()
                os._exit(3)


def run_case(i: int, case: Case, readers: dict[str, Any], work: Path, limit_s: float
             ) -> dict[str, Any]:
    """Write case ``i``, run its reader under the time limit, return its record."""
    d = work / f"{i:04d}"
    exc: BaseException | None = None
    tb = ""
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    try:
        path = case.write(d)
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # the reader's growth only
        t0 = time.perf_counter()
        signal.setitimer(signal.ITIMER_REAL, limit_s)
        try:
            readers[case.kind](path)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        exc = e
        if not isinstance(e, CaseTimeout):
            tb = "".join(traceback.format_exception(e, limit=-6))[-1500:]
    finally:
        shutil.rmtree(d, ignore_errors=True)
    seconds = time.perf_counter() - t0
    outcome = classify(case, exc)
    rec = {"i": i, "kind": case.kind, "mutation": case.mutation, "expect": case.expect,
           "outcome": outcome, "seconds": round(seconds, 4),
           "rss_growth_mb": round((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0)
                                  / 1024, 1)}
    if exc is not None and not isinstance(exc, CaseTimeout):
        rec["error_type"] = type(exc).__name__
        rec["message"] = str(exc)[:400]
    if outcome == "raw_traceback":
        rec["traceback"] = tb
    return rec


def summarize_records(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts over all cases and per kind; ``goal_met``: no silent acceptance, raw traceback or
    hang."""
    counts = Counter(r["outcome"] for r in records)
    by_kind = {k: dict(Counter(r["outcome"] for r in records if r["kind"] == k))
               for k in KINDS}
    return {"cases": len(records), "counts": {o: counts.get(o, 0) for o in OUTCOMES},
            "by_kind": by_kind,
            "goal_met": not any(counts.get(o) for o in ("silently_accepted", "raw_traceback",
                                                        "hang")),
            "max_seconds": max((r["seconds"] for r in records), default=0.0),
            "max_rss_growth_mb": max((r["rss_growth_mb"] for r in records), default=0.0)}


def run(cases: list[Case], *, limit_s: float = 10.0, yaml_reader: str = "auto",
        out: Path | None = None, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run ``cases`` (in the main thread: SIGALRM), return (and write to ``out``) the result."""
    readers = make_readers(yaml_reader)
    records: list[dict[str, Any]] = []
    result: dict[str, Any] = {**(meta or {}), "yaml_reader": readers.pop("_yaml_reader"),
                              "limit_s": limit_s}
    current: dict[str, Any] = {}

    def write(extra: list[dict[str, Any]] | None = None) -> None:
        recs = records + (extra or [])
        result.update(summarize_records(recs), records=recs)
        if out is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(result, indent=1) + "\n")

    def on_hang() -> None:
        c = current.get("case")
        write([{"i": current.get("i"), "kind": c.kind, "mutation": c.mutation,
                "expect": c.expect, "outcome": "hang", "seconds": None,
                "note": "stuck in C code past the hard limit; the run stopped here"}])

    dog = Watchdog(limit_s, on_hang)
    old = signal.signal(signal.SIGALRM, _alarm)
    try:
        with tempfile.TemporaryDirectory(prefix="dlperf-fuzz-") as tmp:
            for i, case in enumerate(cases):
                current.update(i=i, case=case)
                dog.started = time.monotonic()
                records.append(run_case(i, case, readers, Path(tmp), limit_s))
                dog.started = None
    finally:
        dog.stop()
        signal.signal(signal.SIGALRM, old)
    write()
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--small", type=int, default=0, metavar="N",
                    help="run N light cases spread over the kinds (CI), not all of them")
    ap.add_argument("--kind", choices=KINDS, action="append", help="only these kinds")
    ap.add_argument("--limit-s", type=float, default=10.0, help="time limit per case")
    ap.add_argument("--yaml-reader", choices=("auto", "yamlsafe", "load_sweep"),
                    default="auto")
    ap.add_argument("--max-memory-gb", type=float, default=4.0,
                    help="address-space limit of this process (RLIMIT_AS), so a bomb that "
                         "gets through ends as a MemoryError, not a full machine; 0: none")
    ap.add_argument("-o", "--out", type=Path)
    a = ap.parse_args(argv)
    if a.max_memory_gb > 0:
        lim = int(a.max_memory_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
    cases = all_cases(a.seed)
    if a.kind:
        cases = [c for c in cases if c.kind in a.kind]
    if a.small:
        cases = pick_small(cases, a.small, a.seed)
    import PIL
    import yaml

    meta = {"command": "PYTHONPATH=src:benchmarks python benchmarks/fuzz_inputs.py "
                       + " ".join(argv if argv is not None else sys.argv[1:]),
            "seed": a.seed, "python": platform.python_version(), "numpy": np.__version__,
            "pillow": PIL.__version__, "pyyaml": yaml.__version__,
            "max_memory_gb": a.max_memory_gb}
    t0 = time.perf_counter()
    res = run(cases, limit_s=a.limit_s, yaml_reader=a.yaml_reader, out=a.out, meta=meta)
    res["wall_s"] = round(time.perf_counter() - t0, 2)
    if a.out is not None:
        a.out.write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps({k: res[k] for k in ("cases", "counts", "by_kind", "goal_met",
                                          "yaml_reader", "wall_s")}, indent=1))
    for r in res["records"]:
        if r["outcome"] in ("silently_accepted", "raw_traceback", "hang", "wrongly_refused",
                            "refused_unclear"):
            print(f"{r['outcome']:>18} {r['kind']:>11} {r['mutation']:<28} "
                  f"{r.get('error_type', '')}: {str(r.get('message', ''))[:150]}")
    return 0 if res["goal_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
