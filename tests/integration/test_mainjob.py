"""The README's main job end to end (real PyTorch on the CPU, shorter iterations): the quick
suite's points, the thread policy said once and recorded, the ceilings measured once and
cached for the other points, progress in a log, resume and the --rerun warning; and the
everyday commands `dlperf --version` and `dlperf env`."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import dlperf

#: This dlperf's source, first on the path of the commands (they run in a temporary folder).
SRC = str(Path(dlperf.__file__).resolve().parents[1])


def dlperf_cli(*args, timeout=600, cwd=None):
    path = os.pathsep.join([SRC, *filter(None, [os.environ.get("PYTHONPATH")])])
    return subprocess.run([sys.executable, "-m", "dlperf", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd,
                          env={**os.environ, "COLUMNS": "200", "PYTHONPATH": path})


def test_version():
    r = dlperf_cli("--version")
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(rf"dlperf {re.escape(dlperf.__version__)} \((git [0-9a-f]{{7}}"
                        r"(, modified)?; )?Python \d+\.\d+\.\d+\)\n", r.stdout), r.stdout


def test_env_is_readable_text_and_json_on_request():
    r = dlperf_cli("env", "--no-framework", "--no-threads")
    assert r.returncode == 0, r.stderr
    labels = [line.split("  ")[0] for line in r.stdout.splitlines() if line[:1].strip()]
    assert labels[:5] == ["dlperf", "host", "CPU", "memory", "load"]
    assert "GPU" in labels and "{" not in r.stdout
    raw = json.loads(dlperf_cli("env", "--format", "json", "--no-framework").stdout)
    assert raw["dlperf_version"] == dlperf.__version__ and "cpu_affinity" in raw
    if raw.get("cpu_flags"):  # Linux: the instruction sets, in both forms
        assert "instruction sets: " + " ".join(raw["cpu_flags"]) in r.stdout
    bad = dlperf_cli("env", "--format", "xml")
    assert bad.returncode == 2 and "valid formats: json, text" in bad.stderr


@pytest.mark.slow
def test_quick_suite_main_job(tmp_path):
    from dlperf.zoo import SUITES

    models = [e.model for e in SUITES["quick"]]
    args = ("run", "--suite", "quick", "--device", "cpu", "--min-iters", "5", "--min-time",
            "0.1", "--max-warmup-time", "1", "--report", "rep")
    r = dlperf_cli(*args, cwd=tmp_path)  # the README's command, in shorter iterations
    assert r.returncode == 0, r.stderr
    n = 2 * len(models)
    assert f"{n} run, 0 already" in r.stderr
    # the thread policy: said once, before the points
    assert r.stderr.count("threads: ") == 1 and r.stderr.startswith("threads: ")
    # progress in a log (stderr is a pipe here): one line per point, k of N, an ETA from the 2nd
    lines = [x for x in r.stderr.splitlines() if re.match(r"\[\d+/\d+\] ", x)]
    assert [x.split("]")[0] for x in lines] == [f"[{k}/{n}" for k in range(1, n + 1)]
    assert all("left)" in x for x in lines[1:])
    con = sqlite3.connect(tmp_path / "dlperf-results.db")
    res = [json.loads(j) for (j,) in con.execute("SELECT result_json FROM results ORDER BY id")]
    con.close()
    assert sorted((x["model"], x["batch_size"]) for x in res) == sorted(
        (m, b) for m in models for b in (8, 32))
    for x in res:  # the policy's choice is what ran
        pol = x["env"]["thread_policy"]
        assert pol["policy"] == "auto" and pol["threads"] == x["threads"] == x["config"]["hardware"]["threads"]
    # ceilings: fp32 only, measured by the first point, cached from it by the others
    first = res[0]["ceilings"]
    assert list(first["matmul_flops_per_s"]) == ["fp32"] and first["cached"] is False
    assert {o["how"] for o in first["origin"].values()} == {"measured"}
    for x in res[1:]:
        c = x["ceilings"]
        assert c["cached"] is True and c["matmul"] == first["matmul"]
        assert {(o["how"], o["where"], o["run_key"]) for o in c["origin"].values()} == {
            ("cached", "this sweep", res[0]["run_key"])}
        assert x["mfu"]["ceiling_flops_per_s"] == first["matmul_flops_per_s"]["fp32"]
    report = (tmp_path / "rep" / "report.md").read_text()
    assert all(f"step_time_vs_batch_{m}.png" in report for m in models)

    # again with another --min-time: resumed, and the warning names --rerun
    r2 = dlperf_cli(*[("0.2" if a == "0.1" else a) for a in args[:-2]], cwd=tmp_path)
    assert r2.returncode == 0 and f"0 run, {n} already" in r2.stderr, r2.stderr
    text = " ".join(r2.stderr.split())
    assert (f"warning: {n} of the {n} points already stored were measured with other "
            "settings (iterations.min_time_s: 0.1 stored, 0.2 now") in text
    # (a host quiet now and busy then, or the reverse, adds "threads (auto): 1 stored, ...":
    # the points stored under the policy are resumed whatever it chooses now)
    assert "add --rerun to measure them" in text
