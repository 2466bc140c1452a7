"""Attack dlperf's command line and sweep files with bad values, and every flag that writes a
file with paths it must not replace; count how each case ends.

Three kinds of cases, each run in this process (``typer``'s test runner) with a time limit
and an address-space limit, or in a child process where the case needs one (an ASCII
terminal, an ``hf:`` model's spec):

* ``flag``: a command with a bad flag value (absurd sizes: a batch of 2^63, ``--repeats
  10^9``; negative, non-finite, non-numeric, empty, unknown values; ``hf:`` options such as
  ``__class__=x`` or ``layers=10^23``; a ``file:`` path longer than a file name may be);
* ``yaml``: a sweep file with a bad field (``seed: 2**70``, a grid of 10^6 points, ``repeats:
  10^9``, an unknown key, a NaN timeout, ...), run with ``sweep`` (or ``--dry-run``);
* ``writer``: each flag that takes a path to write (``results -o``, ``compare -o``,
  ``report -o``, ``run --emit-slurm``, ``sweep --slurm-array``, ``allreduce --json``,
  ``merge --db``, ``run --db``, ``run --report``, ``run --trace``, ``data make-imagefolder``)
  pointed at the results database itself, another results database, a foreign file, a folder,
  a path in a missing folder (each must be refused, every file unchanged, also with
  ``--force`` for a database), and at an earlier output of its own kind or a foreign file with
  ``--force`` (each must be written).

A case ends as ``ok`` (as expected: a refusal with exit status 2, an ``error:`` line and no
traceback, every protected file byte for byte; or the expected success), ``raw_traceback``,
``hang`` (over the time limit), ``lost`` (a protected file changed), ``unclear`` (a refusal
without a message, or a message over 2,000 characters) or ``wrong`` (refused where it should
have worked, or worked where it should have refused). The goal: every case ``ok``.

    PYTHONPATH=src python benchmarks/fuzz_flags.py [--small N] [--limit-s 60] \
        [-o benchmarks/results/cpu-dev/fuzz_flags.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("DLPERF_FAKE_FRAMEWORK", "1")


def _register_fake() -> None:
    """The fake framework in this process even when dlperf was imported before the variable
    was set (a test run in a process shared with other tests)."""
    from dlperf import registry

    registry.FRAMEWORKS.setdefault("fake", registry.TEST_DOUBLES["fake"])
    registry.FRAMEWORK_MODES.setdefault("fake", registry.TEST_DOUBLES["fake"].modes)


_register_fake()
os.environ.setdefault("COLUMNS", "200")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzz_databases import make_valid  # noqa: E402

GOOD = ("ok",)
RUN = ["run", "--framework", "fake", "--model", "fcn5_tiny", "--device", "cpu"]
FAST = ["--min-iters", "6", "--max-iters", "6", "--min-time", "0"]


class CaseTimeout(BaseException):
    """SIGALRM in a case over its time limit."""


def _alarm(signum: int, frame: Any) -> None:
    raise CaseTimeout()


@dataclass
class Case:
    """One attack. ``argv`` has ``{db}``, ``{other}``, ``{w}`` (the case's folder),
    ``{yaml}``; ``yaml``: the sweep file's text; ``expect``: ``"refuse"`` or ``"write"``
    (exit 0 and ``target`` written); ``protect``: files (relative to ``{w}``, or ``db``,
    ``other``) that must not change; ``child``: run as a process (env added)."""

    kind: str
    name: str
    argv: list[str]
    expect: str = "refuse"
    yaml: str | None = None
    protect: list[str] = field(default_factory=lambda: ["db", "other"])
    target: str | None = None
    child: dict[str, str] | None = None
    said: str | None = None  # a word the refusal must contain (the limit, the flag)
    keep_rows: bool = False  # a results file written into: every row it held stays


def flag_cases() -> list[Case]:
    out: list[Case] = []

    def add(name: str, argv: list[str], said: str | None = None, child=None) -> None:
        out.append(Case("flag", name, argv, said=said, child=child))

    for v in ("0", "-1", str(2**63), "1e3", "abc", "8,,16", str(10**30), "8;16"):
        add(f"batch={v[:12]}", [*RUN, "-b", v, "--db", "{db}"])
    for v in ("0", "-1", str(10**9), "1001", "x", "2.5"):
        add(f"repeats={v}", [*RUN, "-b", "4", "--repeats", v, "--db", "{db}"])
    for flag, vals in {"--min-iters": ["0", str(10**12), "-5"], "--max-iters": ["0", "10**9"],
                       "--min-time": ["-1", "1e400", "nan", "inf"],
                       "--timeout": ["0", "-1", "nan", "inf", "1e300"],
                       "--threads": ["0", str(10**9), "x,y", "-2"],
                       "--nproc": ["0", str(10**6), "a"], "--grad-accum": ["0", str(2**40)],
                       "--ci-target": ["2", "-1", "nan"], "--loader-workers": ["-1", str(10**6)],
                       "--precision": ["fp7"], "--framework": ["bogus", "torch,jax"],
                       "--device": ["tpu9"], "--data": ["bogus", "mnist:/nonexistent/x"],
                       "--cpu-bind": ["garbage", "0-99999", "-1"], "--mode": ["warp"],
                       "--tag": ["", "a" * 5000], "--layout": ["nchwx"]}.items():
        for v in vals:
            add(f"run {flag}={v[:12]}", [*RUN, "-b", "4", flag, v, "--db", "{db}"])
    add("run min>max iters", [*RUN, "-b", "4", "--min-iters", "50", "--max-iters", "5", "--db",
                              "{db}"])
    add("run nnodes no endpoint", [*RUN, "-b", "4", "--nnodes", "2", "--db", "{db}"])
    add("run no model", ["run", "--framework", "fake", "-b", "4", "--db", "{db}"])
    for m in ("bogus_model", "file:/nonexistent/net.py:build",
              "file:/" + "very_long_folder_name/" * 20 + "net.py:build",
              "nope:thing", "file:" + "x" * 5000 + ".py:f"):
        add(f"model={m[:24]}", [*RUN[:3], "--model", m, "--device", "cpu", "-b", "4", "--db",
                                "{db}"])
    hf = {"DLPERF_FAKE_FRAMEWORK": "0"}
    for m, said in (("hf:gpt2?layers=100000000000000000000000", "2,147,483,647"),
                    ("hf:gpt2?layers=-1", "from 0"), ("hf:gpt2?__class__=x", "not a setting"),
                    ("hf:gpt2?layers=5000", "4,096"),
                    ("hf:gpt2?hidden=4000000&layers=200", "parameters")):
        add(f"model={m}", ["run", "--model", m, "--device", "cpu", "-b", "2", "--db", "{db}"],
            said, child=hf)
    for args in (["results", "--db", "{db}", "--status", "finished"],
                 ["results", "--db", "{db}", "--model", "nonexistent_model"],
                 ["results", "--db", "{db}", "-f", "xml"], ["results", "--db", "{db}", "--tag",
                                                            "nope"],
                 ["results", "--db", "{db}", "--sha", "zz"],
                 ["results", "--db", "{db}", "--since", "not-a-date"],
                 ["results", "--db", "{db}", "--compare", "nothing"],
                 ["results", "--db", "{db}", "--samples"],
                 ["results", "--db", "{w}/none.db"], ["results", "--db", "{w}/s.yaml"],
                 ["compare", "{db}", "{other}", "--fail-if-slower", "abc"],
                 ["compare", "{db}", "{other}", "--fail-if-slower", "-5%"],
                 ["compare", "{db}", "{other}", "--fail-if-slower", "1e400%"],
                 ["compare", "{db}", "{other}", "--level", "2"],
                 ["compare", "{db}", "{w}/none.db"],
                 ["report", "--db", "{db}", "-o", "{w}/r", "-f", "pdf"],
                 ["report", "--db", "{w}/none.db", "-o", "{w}/r"],
                 ["merge", "--db", "{db}"], ["merge", "{w}/none.db", "--db", "{db}"],
                 ["merge", "{w}", "--db", "{db}"],
                 ["sweep", "{yaml}", "--db", "{db}", "--shard", "3/2"],
                 ["sweep", "{yaml}", "--db", "{db}", "--shard", "a/b"],
                 ["sweep", "{yaml}", "--db", "{db}", "--node-rank", "-1"],
                 ["sweep", "{yaml}", "--db", "{db}", "--rdzv-endpoint", "noport"],
                 ["sweep", "{yaml}", "--db", "{db}", "--shards", "0", "--slurm-array",
                  "{w}/a.sh"],
                 ["sweep", "{w}/none.yaml", "--db", "{db}"],
                 ["allreduce", "--min-bytes", "1Z", "--db", "{db}"],
                 ["allreduce", "--min-bytes", "2", "--max-bytes", "1", "--db", "{db}"],
                 ["predict", "--db", "{db}", "--model", "fcn5_tiny", "--batch-size", "0"],
                 ["predict", "--db", "{db}", "--model", "fcn5_tiny", "--batch-size",
                  str(2**63)],
                 ["predict", "--db", "{w}/none.db", "--model", "fcn5_tiny"],
                 ["data", "make-imagefolder", "{w}/img", "--images", "-5"],
                 ["data", "make-imagefolder", "{w}/img", "--size", str(10**6)]):
        add(" ".join(args[:3]).replace("{", "").replace("}", "") + " " + " ".join(args[3:]),
            args)
    # Processes, iterations and sizes over this machine's limits (dlperf.config.limits). Each
    # case also carries a flag that is refused only *after* the limit is checked (an empty
    # size range, a data file that is not there), so a regression that drops the limit is
    # refused later, without the limit's words ("unclear"), instead of starting 10^5
    # processes on the attacking machine.
    late = ["--min-bytes", "2", "--max-bytes", "1"]
    for argv, said in ((["--nproc", "100000"], "processes per node"),
                       (["--nproc", "1000"], "processes per node"),
                       (["--iters", str(10**12)], "10,000,000"),
                       (["--warmup", str(10**12)], "10,000,000"),
                       (["--timeout", "nan"], None)):
        add(f"allreduce {' '.join(argv)[:24]}", ["allreduce", *argv, *late], said)
    for argv, said in ((["--max-bytes", "5000G"], "1,099,511,627,776"),
                       (["--max-bytes", "9" * 40], "1,099,511,627,776"),
                       (["--max-bytes", "512G", "--nproc", "8"], "memory available")):
        # the sizes are checked last: a regression meets --timeout 1 (ranks still importing)
        add(f"allreduce {' '.join(argv)[:24]}", ["allreduce", *argv, "--timeout", "1"], said)
    gone = ["--data", "{w}/no/such/data.bin"]
    for argv, said in ((["-b", "1000", "--nproc", "1000"], "processes per node"),
                       (["-b", "100000", "--nproc", "100000"], "processes per node"),
                       (["-b", "4", "--loader-workers", "1000"], "loader workers"),
                       (["-b", "8", "--loader-workers", "4", "--nproc", "8"],
                        "loader workers")):
        add(f"run {' '.join(argv[2:])[:24]}", [*RUN, *argv, *gone, "--db", "{db}"], said)
    for argv, said in (
            (["--what-if", f"batch-size={10**23}"], "16,777,216"),
            (["--what-if", "batch-size=1e30x"], "16,777,216"),
            (["--nics-per-node", str(10**12), "--nnodes", "2", "--network", "ib_ndr"],
             "NICs"),
            (["--threads", str(10**12)], "threads"),
            (["--loader-workers", str(10**12)], "loader workers"),
            (["--grad-accum", str(10**12)], "micro-batches")):
        add(f"predict {' '.join(argv)[:24]}", ["predict", "--db", "{db}", "--model",
                                                "fcn5_tiny", "-b", "8", *argv], said)
    add("predict --dai-table --amortise-iters 10^30",
        ["predict", "--db", "{db}", "--dai-table", "--amortise-iters", str(10**30)],
        "1,000,000,000,000")
    add("compare --run --rounds 10^9", ["compare", "--run", "{w}", "{w}", "--db",
                                        "{w}/gate.db", "--rounds", str(10**9), "--",
                                        "--model", "fcn5_tiny"], "1,000 runs per point")
    for v in ("nan", "inf", "-inf", "1e400"):
        add(f"results --target-loss {v}", ["results", "--db", "{db}", "--compare",
                                           "convergence", "--target-loss", v], "--target-loss")
        add(f"report --target-loss {v}", ["report", "--db", "{db}", "-o", "{w}/rep",
                                          "--target-loss", v], "--target-loss")
    for v in ("nan", "inf", "-1", "0"):
        add(f"calibrate --budget-s {v}", ["calibrate", "--db", "{w}/cal.db", "--name", "x",
                                          "--device", "cpu", "--budget-s", v], "--budget-s")
    for argv, said in ((["--seed", "-1"], "4,294,967,295"),
                       (["--seed", str(2**70)], "4,294,967,295"),
                       (["--images", str(10**9), "--size", "1"], "images"),
                       (["--images", "200000", "--classes", str(10**6)], "classes")):
        add(f"make-imagefolder {' '.join(argv)[:24]}",
            ["data", "make-imagefolder", "{w}/img", "--size", "8", "--images", "2",
             "--classes", "1", *argv], said)
    for opt, said in (("depth=1000000000", "4,096"), ("image=100000", "8,192"),
                      ("classes=100000000000", "16,777,216")):
        add(f"model=timm:vit?{opt}", [*RUN[:3], "--model", f"timm:vit_base_patch16_224?{opt}",
                                      "--device", "cpu", "-b", "2", "--db", "{db}"], said,
            child=hf)
    # Results files under the names SQLite gives a database's side files: the next write to
    # the database took such a file for its journal and deleted it (independent attack).
    for suffix in ("-journal", "-wal", "-shm"):
        add(f"run --db DB{suffix}", [*RUN, "-b", "4", *FAST, "--db", "{db}" + suffix],
            "side file")
        add(f"merge --db DB{suffix}", ["merge", "{other}", "--db", "{db}" + suffix],
            "side file")
    for key, val in (("DLPERF_SPEC_MEMORY_GB", "inf"), ("DLPERF_SPEC_MEMORY_GB", "1e30")):
        add(f"{key}={val}", [*RUN[:3], "--model", "file:{w}/net.py:build", "--device", "cpu",
                             "-b", "2", "--db", "{db}"], key, child={key: val})
    ascii_env = {"PYTHONIOENCODING": "ascii"}
    out.append(Case("flag", "ascii terminal: results", ["results", "--db", "{db}"],
                    expect="write", child=ascii_env, protect=["db", "other"]))
    out.append(Case("flag", "ascii terminal: results --compare", ["results", "--db", "{db}",
                                                                  "--compare", "frameworks"],
                    expect="write", child=ascii_env))
    return out


GOOD_YAML = ("name: y\ndefaults: {framework: fake, model: fcn5_tiny, device: cpu, "
             "timeout_s: 60}\ngrid:\n  - batch_size: [2]\n")


def yaml_cases() -> list[Case]:
    out: list[Case] = []
    head = "name: y\ndefaults: {framework: fake, model: fcn5_tiny, device: cpu}\ngrid:\n"

    def add(name: str, text: str, dry: bool = False, said: str | None = None) -> None:
        argv = ["sweep", "{yaml}", "--db", "{db}"] + (["--dry-run"] if dry else [])
        out.append(Case("yaml", name, argv, yaml=text, said=said))

    for dry in (False, True):
        add("seed 2**70", head + f"  - {{batch_size: 2, seed: {2**70}}}\n", dry, "4,294,967,295")
        add("seed -1", head + "  - {batch_size: 2, seed: -1}\n", dry)
        add("batch 2**63", head + f"  - {{batch_size: {2**63}}}\n", dry, "16,777,216")
        add("grid 10^6", head + "  - batch_size: [" + ", ".join(map(str, range(1, 1001)))
            + "]\n    seed: [" + ", ".join(map(str, range(1000))) + "]\n", dry, "20,000")
        add("repeats 10^9", head + "  - {batch_size: 2, repeats: 1000000000}\n", dry, "1,000")
        add("repeats 0", head + "  - {batch_size: 2, repeats: 0}\n", dry)
        add("timeout nan", head.replace("cpu}", "cpu, timeout_s: .nan}")
            + "  - {batch_size: 2}\n", dry)
        add("timeout 1e400", head.replace("cpu}", "cpu, timeout_s: 1e400}")
            + "  - {batch_size: 2}\n", dry)
        add("min_iters 10^12", head + "  - {batch_size: 2, iterations: {min_iters: "
            "1000000000000}}\n", dry)
        add("unknown key", head + "  - {batch_size: 2, colour: red}\n", dry)
        add("hf __class__", "name: y\ndefaults: {device: cpu}\ngrid:\n  - {model: "
            "'hf:gpt2?__class__=x', batch_size: 2}\n", dry)
        add("empty grid", "name: y\ngrid: []\n", dry)
        add("grid not a list", "name: y\ngrid: 7\n", dry)
        add("defaults not a mapping", "name: y\ndefaults: [1]\ngrid:\n  - {model: fcn5_tiny, "
            "batch_size: 2}\n", dry)
        add("empty name", "name: ''\ngrid:\n  - {model: fcn5_tiny, batch_size: 2}\n", dry)
        add("threads 10^9", head + "  - {batch_size: 2, threads: 1000000000}\n", dry)
        add("nproc 0", head + "  - {batch_size: 2, nproc: 0}\n", dry)
        if not dry:  # --dry-run notes this host's limits; a missing data file: no launch
            add("nproc 1000", head + "  - {batch_size: 1000, nproc: 1000, data: /no/such.bin}"
                "\n", dry, "processes per node")
            add("loader_workers 1000", head + "  - {batch_size: 2, loader_workers: 1000, "
                "data: /no/such.bin}\n", dry, "loader workers")
        add("cpu_bind garbage", head + "  - {batch_size: 2, cpu_bind: 'all of them'}\n", dry)
        add("framework list bad", "name: y\ndefaults: {model: fcn5_tiny, device: cpu}\ngrid:\n"
            "  - {batch_size: 2, framework: [fake, bogus]}\n", dry)
        add("batch text", head + "  - {batch_size: eight}\n", dry)
        add("batch list empty", head + "  - {batch_size: []}\n", dry)
        add("suite bogus", "name: y\ngrid:\n  - {suite: nothing}\n", dry)
        add("not yaml", "name: [unclosed\n", dry)
    return out


def writer_cases() -> list[Case]:
    """Every flag that takes a path to write, at paths it must not replace (module docstring).
    ``{T}`` is the target (:func:`prepare` makes it); each flag lists, per target, what must
    happen without ``--force`` and with it (None: the flag has no ``--force``)."""
    R, W = "refuse", "write"
    out_file = {"db": (R, R), "otherdb": (R, R), "foreign": (R, W), "folder": (R, R),
                "missing": (R, R)}
    report_dir = {"db": (R, R), "otherdb": (R, R), "foreign": (R, R), "missing": (W, W)}
    results_db = {"db": (W, None), "otherdb": (W, None), "foreign": (R, None),
                  "folder": (R, None), "missing": (W, None)}
    flags: dict[str, tuple[list[str], str, dict[str, tuple[str, str | None]]]] = {
        "results -o": (["results", "--db", "{db}", "-o", "{T}"], ".csv", out_file),
        "results -f json -o": (["results", "--db", "{db}", "-f", "json", "-o", "{T}"], ".json",
                               out_file),
        "results --compare -o": (["results", "--db", "{db}", "--compare", "frameworks", "-o",
                                  "{T}"], ".md", out_file),
        "compare -o": (["compare", "{other}", "{db}", "-o", "{T}"], ".md", out_file),
        "report -o": (["report", "--db", "{db}", "-o", "{T}", "-f", "md"], ".txt", report_dir),
        "run --emit-slurm": ([*RUN, "-b", "4", "--db", "{db}", "--emit-slurm", "{T}"], ".sh",
                             out_file),
        "sweep --slurm-array": (["sweep", "{yaml}", "--db", "{db}", "--slurm-array", "{T}"],
                                ".sh", out_file),
        "allreduce --json": (["allreduce", "--db", "{db}", "--json", "{T}", "--max-bytes", "-1"],
                             ".json", {k: (R, R) for k in out_file}),
        "merge --db": (["merge", "{other}", "--db", "{T}"], ".db", results_db),
        "run --db": ([*RUN, "-b", "4", *FAST, "--db", "{T}"], ".db", results_db),
        "run --report": ([*RUN, "-b", "4", *FAST, "--db", "{db}", "--report", "{T}"], ".txt",
                         {"db": (R, R), "otherdb": (R, R), "foreign": (R, R)}),
        "run --trace": ([*RUN, "-b", "4", *FAST, "--db", "{db}", "--trace", "{T}"], ".txt",
                        {"db": (R, None), "otherdb": (R, None), "foreign": (R, None),
                         "missing": (W, None)}),
        "data make-imagefolder": (["data", "make-imagefolder", "{T}", "--images", "4",
                                   "--classes", "2", "--size", "16"], ".txt",
                                  {"db": (R, None), "otherdb": (R, None), "foreign": (R, None),
                                   "foreignfolder": (R, None), "missing": (W, None)}),
    }
    names = {"db": "the db", "otherdb": "another db", "foreign": "a foreign file",
             "folder": "a folder", "foreignfolder": "a folder of other files",
             "missing": "a missing folder"}
    out: list[Case] = []
    for fname, (argv, suffix, expects) in flags.items():
        db_writer = fname in ("merge --db", "run --db")
        runs = fname.startswith("run ") and fname != "run --emit-slurm"  # a point is stored
        for how, (plain, forced) in expects.items():
            for force, expect in ((False, plain), (True, forced)):
                if expect is None:
                    continue
                protect = ["other"] if db_writer or (runs and expect == W) else ["db", "other"]
                if expect == R:
                    protect = [*protect, "T"]
                out.append(Case("writer", f"{fname} -> {names[how]}{' --force' if force else ''}",
                                argv + (["--force"] if force else []), expect=expect,
                                target=f"{how}:{suffix}", protect=protect,
                                keep_rows=db_writer and expect == W))
    # an earlier output of each kind is replaced without --force
    for fname, first in (("results -o", "{w}/out.csv"), ("compare -o", "{w}/cmp.md"),
                         ("report -o", "{w}/rep"), ("run --emit-slurm", "{w}/job.sh"),
                         ("sweep --slurm-array", "{w}/arr.sh")):
        argv = [x.replace("{T}", first) for x in flags[fname][0]]
        out.append(Case("writer", f"{fname} -> its own earlier output", argv, expect=W,
                        target=f"again:{first}", protect=["db", "other"]))
    return out


def prepare(case: Case, w: Path) -> dict[str, Path]:
    """The case's files under ``w``: ``db``, ``other``, ``yaml`` and the target ``T``."""
    db = make_valid(w / "r.db")
    other = make_valid(w / "other.db")
    yaml = w / "s.yaml"
    yaml.write_text(case.yaml if case.yaml is not None else GOOD_YAML)
    files = {"db": db, "other": other, "yaml": yaml}
    if case.target is None:
        return files
    if case.target.startswith("again:"):
        files["T"] = Path(case.target[6:].replace("{w}", str(w)))
        return files
    how, _, suffix = case.target.partition(":")
    if how == "db":
        files["T"] = db
    elif how == "otherdb":
        files["T"] = make_valid(w / "third.db")
    elif how == "foreign":
        files["T"] = w / f"notes{suffix}"
        files["T"].write_text("my own notes\n")
    elif how in ("folder", "foreignfolder"):
        files["T"] = w / "folder"
        files["T"].mkdir()
        (files["T"] / "mine.txt").write_text("mine\n")
    elif how == "missing":
        files["T"] = w / "no" / "such" / f"out{suffix}"
    return files


def snapshot(paths: list[Path]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for p in paths:
        if p.is_dir():
            out[str(p)] = sorted((str(q), q.read_bytes()) for q in p.rglob("*") if q.is_file())
        elif p.exists():
            out[str(p)] = p.read_bytes()
        else:
            out[str(p)] = None
    return out


def run_case(case: Case, w: Path, limit_s: float) -> dict[str, Any]:
    """Run one case (module docstring); its record."""
    from typer.testing import CliRunner

    from dlperf.cli import app

    files = prepare(case, w)
    fmt = {"db": str(files["db"]), "other": str(files["other"]), "w": str(w),
           "yaml": str(files["yaml"]), "T": str(files.get("T", ""))}
    argv = [a.format(**fmt) for a in case.argv]
    if case.target and case.target.startswith("again:"):  # write it once first
        CliRunner().invoke(app, argv)
    guarded = [files[k] for k in case.protect if k in files]
    before = snapshot(guarded)
    rows_before = _rows(files.get("T")) if case.keep_rows else None
    rec: dict[str, Any] = {"kind": case.kind, "case": case.name, "expect": case.expect}
    t0 = time.perf_counter()
    try:
        if case.child is not None:
            r = subprocess.run([sys.executable, "-m", "dlperf", *argv], capture_output=True,
                               text=True, timeout=limit_s * 3, encoding="utf-8",
                               errors="replace", env={**os.environ, **case.child})
            code, text = r.returncode, r.stdout + r.stderr
        else:
            signal.setitimer(signal.ITIMER_REAL, limit_s)
            try:
                r2 = CliRunner().invoke(app, argv, catch_exceptions=True)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            code, text = r2.exit_code, r2.output
            if r2.exception is not None and not isinstance(r2.exception, SystemExit):
                if isinstance(r2.exception, CaseTimeout):
                    raise r2.exception
                rec["error"] = f"{type(r2.exception).__name__}: {str(r2.exception)[:300]}"
                rec["where"] = "".join(traceback.format_exception(r2.exception))[-800:]
                code = None
    except (CaseTimeout, subprocess.TimeoutExpired):
        rec.update(outcome="hang", seconds=round(time.perf_counter() - t0, 2))
        return rec
    rec["seconds"] = round(time.perf_counter() - t0, 2)
    rec["exit"] = code
    rec["message"] = " ".join(text.split())[-400:]
    if code is None or "Traceback" in text:
        rec["outcome"] = "raw_traceback"
    elif snapshot(guarded) != before or (rows_before and not rows_before <= (
            _rows(files.get("T")) or set())):
        rec["outcome"] = "lost"
    elif case.expect == "refuse":
        if code == 0:
            rec["outcome"] = "wrong"
        elif code == 2 and ("error" in text.lower() or "usage" in text.lower()) and (
                case.said is None or case.said in " ".join(text.split())):
            longest = max((len(ln) for ln in text.splitlines()), default=0)
            rec["outcome"] = "ok" if longest <= 2000 or case.child else "unclear"
        else:
            rec["outcome"] = "unclear"
    else:
        t = files.get("T")
        rec["outcome"] = "ok" if code == 0 and (t is None or t.exists()) else "wrong"
    return rec


def _rows(db: Path | None) -> set[tuple[Any, ...]] | None:
    """(run key, created_at) of every row of the results file ``db``; None if none."""
    if db is None or not db.is_file() or db.stat().st_size == 0:
        return None
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            return set(con.execute("SELECT run_key, created_at FROM results"))
        finally:
            con.close()
    except sqlite3.Error:
        return None


def all_cases() -> list[Case]:
    return flag_cases() + yaml_cases() + writer_cases()


def run(cases: list[Case], limit_s: float, out: Path | None = None,
        meta: dict | None = None) -> dict[str, Any]:
    records: list[dict[str, Any]] = []
    old = signal.signal(signal.SIGALRM, _alarm)
    old_tmpdir = os.environ.get("TMPDIR")
    t0 = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="dlperf-fuzzflags-") as tmp:
            for i, case in enumerate(cases):
                w = Path(tmp) / f"c{i}"
                w.mkdir()
                os.environ["TMPDIR"] = str(w)
                records.append(run_case(case, w, limit_s))
                shutil.rmtree(w, ignore_errors=True)
    finally:
        signal.signal(signal.SIGALRM, old)
        if old_tmpdir is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = old_tmpdir
    counts = Counter(r["outcome"] for r in records)
    res = {"cases": len(records), "counts": dict(counts),
           "by_kind": {k: dict(Counter(r["outcome"] for r in records if r["kind"] == k))
                       for k in ("flag", "yaml", "writer")},
           "writer_flags": sorted({r["case"].split(" -> ")[0] for r in records
                                   if r["kind"] == "writer"}),
           "goal_met": set(counts) <= set(GOOD), "seconds": round(time.perf_counter() - t0, 1),
           "meta": meta or {}, "problems": [r for r in records if r["outcome"] not in GOOD],
           "records": records}
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res, indent=1, default=str) + "\n")
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", type=int, default=0, metavar="N",
                    help="N cases spread over the kinds, no child processes (CI)")
    ap.add_argument("--limit-s", type=float, default=60.0, help="time limit per case")
    ap.add_argument("--max-memory-gb", type=float, default=6.0,
                    help="address-space limit of this process; 0: none")
    ap.add_argument("-o", "--out", type=Path)
    a = ap.parse_args(argv)
    if a.max_memory_gb > 0:
        lim = int(a.max_memory_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
    cases = all_cases()
    if a.small:
        cases = pick_small(cases, a.small)
    meta = {"command": "PYTHONPATH=src python benchmarks/fuzz_flags.py "
                       + " ".join(argv if argv is not None else sys.argv[1:]),
            "python": platform.python_version(), "sqlite": sqlite3.sqlite_version}
    res = run(cases, a.limit_s, a.out, meta)
    print(json.dumps({k: res[k] for k in ("cases", "counts", "by_kind", "goal_met",
                                          "seconds")}, indent=1))
    for r in res["problems"][:60]:
        print(f"{r['outcome']:>14} {r['kind']:>6} {r['case'][:60]:<60} exit={r.get('exit')} "
              f"{r.get('error') or r.get('message', '')}"[:400])
    return 0 if res["goal_met"] else 1


def pick_small(cases: list[Case], n: int) -> list[Case]:
    """``n`` in-process cases, every writer flag's database case first, then spread."""
    own = [c for c in cases if c.child is None]
    first = [c for c in own if c.kind == "writer" and c.name.endswith("-> the db")]
    rest = [c for c in own if c not in first]
    step = max(1, len(rest) // max(1, n - len(first)))
    return (first + rest[::step])[:n]


if __name__ == "__main__":
    sys.exit(main())
