"""Processes, iterations, message sizes and the other sized flags of every command are refused
over their limits before anything starts, with the limit in the message and exit status 2
(dlperf.config.limits; issue 40): ``dlperf allreduce --nproc 100000`` started over 2,000
processes and ``--iters 10**12`` ran without end; ``run``/``sweep`` took any ``--nproc`` up to
1,024 on a 2-CPU machine; ``compare --rounds 10**9`` built a list of 2 x 10^9 pairs; ``data
make-imagefolder --seed -1`` was a raw traceback; a ``timm:`` depth of 10^9 was built."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dlperf.cli import app
from dlperf.cli.allreduce import check_allreduce
from dlperf.config import make_run_config
from dlperf.config.limits import (
    MAX_ITERS,
    MAX_MESSAGE_BYTES,
    MAX_SECONDS,
    MIN_LOCAL_PROCESSES,
    PROCESSES_PER_CPU,
    check_local_processes,
    check_seconds,
    local_process_limit,
)
from dlperf.errors import ConfigError

GiB = 2**30
#: A machine for check_allreduce: 4 CPUs, no GPU, 64 GiB available.
CPU_HOST = {"gpus": None, "cpus": 4, "host_bytes": 64 * GiB}


def test_the_process_limit_is_the_gpus_or_a_few_per_cpu():
    assert local_process_limit("cuda", gpus=8, cpus=2)[0] == 8
    assert local_process_limit("cuda", gpus=None, cpus=16)[0] == PROCESSES_PER_CPU * 16
    assert local_process_limit("cuda", gpus=0, cpus=1)[0] == MIN_LOCAL_PROCESSES
    assert local_process_limit("cpu", gpus=8, cpus=32)[0] == PROCESSES_PER_CPU * 32
    check_local_processes(8, "cuda", gpus=8, cpus=1)  # at the limit
    with pytest.raises(ConfigError, match=r"--nproc 9 .* limit of 8 .*8 GPU\(s\)"):
        check_local_processes(9, "cuda", gpus=8, cpus=64)
    with pytest.raises(ConfigError, match=r"100,000 .* limit of 16 .* 4 here"):
        check_local_processes(100_000, "cpu", cpus=4)


@pytest.mark.parametrize("flags,said", [
    ({"nproc": 100_000}, "limit of 16 processes"),
    ({"iters": 10**12}, f"{MAX_ITERS:,}"), ({"warmup": 10**11}, f"{MAX_ITERS:,}"),
    ({"warmup": -1}, "from 0"), ({"iters": 0}, "from 1"),
    ({"max_bytes": "2000G"}, f"{MAX_MESSAGE_BYTES:,}"),
    ({"max_bytes": "9" * 40}, f"{MAX_MESSAGE_BYTES:,}"),
    ({"max_bytes": "32G", "nproc": 2}, "64.0 GiB of memory available"),
    ({"timeout": float("nan")}, "seconds"), ({"timeout": float("inf")}, "seconds"),
    ({"timeout": MAX_SECONDS * 2}, "30 days"),
])
def test_every_sized_allreduce_flag_is_refused_over_its_limit(flags, said):
    args = {"nproc": 2, "iters": 20, "warmup": 5, "min_bytes": "8", "max_bytes": "1M",
            "timeout": 60.0, **flags}
    with pytest.raises(ConfigError, match=said):
        check_allreduce(args["nproc"], args["iters"], args["warmup"], args["min_bytes"],
                        args["max_bytes"], args["timeout"], **CPU_HOST)
    assert check_allreduce(2, 20, 5, "8", "1M", 60.0, **CPU_HOST) == "cpu"


def test_allreduce_on_gpus_counts_one_rank_per_gpu_and_its_memory():
    gpu = {"gpus": 2, "cpus": 64, "host_bytes": 0, "gpu_bytes": 80 * GiB}
    assert check_allreduce(2, 20, 5, "8", "16G", 60.0, **gpu) == "cuda"
    with pytest.raises(ConfigError, match="limit of 2 processes"):
        check_allreduce(3, 20, 5, "8", "1M", 60.0, **gpu)
    with pytest.raises(ConfigError, match="80.0 GiB of a GPU"):
        check_allreduce(2, 20, 5, "8", "64G", 60.0, **gpu)


def test_check_seconds_refuses_what_is_not_a_finite_time():
    check_seconds(1.0, "--x")
    for bad in (0.0, -1.0, float("nan"), float("inf"), MAX_SECONDS + 1):
        with pytest.raises(ConfigError, match="--x"):
            check_seconds(bad, "--x")


def _no_launch(monkeypatch):
    """Any process started by the command fails the test."""
    def boom(*a, **k):
        raise AssertionError(f"a process was started: {a[:1]}")

    monkeypatch.setattr(subprocess, "Popen", boom)


@pytest.mark.parametrize("argv,said", [
    (["--nproc", "100000"], "100,000 is over this machine's limit"),
    (["--iters", str(10**12)], f"{MAX_ITERS:,}"),
    (["--warmup", str(10**12)], f"{MAX_ITERS:,}"),
    (["--max-bytes", "5000G"], f"{MAX_MESSAGE_BYTES:,}"),
])
def test_the_allreduce_command_refuses_before_any_process_starts(monkeypatch, argv, said):
    _no_launch(monkeypatch)
    r = CliRunner().invoke(app, ["allreduce", *argv])
    assert r.exit_code == 2, r.output
    assert said in " ".join(r.output.split()) and "Traceback" not in r.output


def test_run_and_sweep_refuse_more_processes_than_this_machine_takes(monkeypatch, tmp_path):
    _no_launch(monkeypatch)
    limit = local_process_limit("cpu")[0]
    n = limit + 1
    r = CliRunner().invoke(app, ["run", "--model", "fcn5_tiny", "--device", "cpu", "-b",
                                 str(n), "--nproc", str(n), "--db", str(tmp_path / "r.db")])
    assert r.exit_code == 2 and f"limit of {limit} processes" in " ".join(r.output.split())
    y = tmp_path / "s.yaml"
    y.write_text("name: s\ndefaults: {model: fcn5_tiny, device: cpu}\ngrid:\n"
                 f"  - {{batch_size: {n}, nproc: {n}}}\n")
    r = CliRunner().invoke(app, ["sweep", str(y), "--db", str(tmp_path / "s.db")])
    assert r.exit_code == 2 and f"limit of {limit} processes" in " ".join(r.output.split())
    r = CliRunner().invoke(app, ["run", "--model", "fcn5_tiny", "--device", "cpu", "-b", "8",
                                 "--data", "mnist", "--loader-workers", str(limit + 1),
                                 "--db", str(tmp_path / "r.db")])
    assert r.exit_code == 2 and "loader workers" in r.output
    assert not (tmp_path / "r.db").exists() and not (tmp_path / "s.db").exists()


def test_the_python_api_refuses_them_too(monkeypatch):
    from dlperf import api

    _no_launch(monkeypatch)
    n = local_process_limit("cpu")[0] + 1
    with pytest.raises(ConfigError, match="processes per node"):
        api.run(make_run_config(model="fcn5_tiny", device="cpu", batch_size=n, nproc=n))


def test_compare_rounds_over_the_repeat_limit_is_refused_at_once():
    from dlperf.alternate import rounds_order

    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match="1,000"):
        rounds_order(10**9)
    assert time.perf_counter() - t0 < 1.0
    assert len(rounds_order(1000)) == 2000


@pytest.mark.parametrize("argv,said", [
    (["--seed", "-1"], "0 to 4,294,967,295"), (["--seed", str(2**40)], "4,294,967,295"),
    (["--images", str(10**9)], "images"), (["--images", "200000", "--classes", str(10**5)],
                                           "classes"),
])
def test_make_imagefolder_refuses_sizes_and_seeds_out_of_range(tmp_path, argv, said):
    r = CliRunner().invoke(app, ["data", "make-imagefolder", str(tmp_path / "img"),
                                 "--images", "2", "--classes", "1", "--size", "8", *argv])
    assert r.exit_code == 2 and said in " ".join(r.output.split()), r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)
    assert not (tmp_path / "img").exists()


def test_make_imagefolder_counts_the_free_inodes(tmp_path, monkeypatch):
    from dlperf.data import imagefolder

    real = os.statvfs

    class Few:
        def __init__(self, st):
            self.st = st

        def __getattr__(self, k):
            return 100 if k == "f_favail" else getattr(self.st, k)

    monkeypatch.setattr(imagefolder.os, "statvfs", lambda p: Few(real(p)))
    with pytest.raises(ConfigError, match="100 free inodes"):
        imagefolder.make_imagefolder(tmp_path / "img", images=101, classes=1, size=8)


@pytest.mark.parametrize("option,said", [
    ("depth=1000000000", "4,096 layers"), ("image=100000", "8,192 pixels"),
    ("classes=100000000000", "16,777,216 classes"), ("embed_dim=99999999999", "2,147,483,647"),
    ("drop_rate=inf", "finite"),
])
def test_timm_option_sizes_are_refused_before_timm_builds(option, said):
    from dlperf.zoo.sources.timm.source import resolve

    with pytest.raises(ConfigError, match=said):
        resolve(f"vit_base_patch16_224?{option}", f"timm:vit_base_patch16_224?{option}")


@pytest.mark.parametrize("argv,said", [
    (["--what-if", f"batch-size={10**23}"], "16,777,216"),
    (["--what-if", "batch-size=1e20x"], "16,777,216"),
    (["--nics-per-node", str(10**12), "--nnodes", "2", "--network", "ib_ndr"], "NICs"),
    (["--threads", str(10**12)], "threads"),
])
def test_predict_refuses_sizes_over_their_limits(tmp_path, argv, said):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from fuzz_databases import make_valid

    db = make_valid(tmp_path / "v.db")
    r = CliRunner().invoke(app, ["predict", "--db", str(db), "--model", "fcn5_tiny", "-b",
                                 "8", *argv])
    assert r.exit_code == 2 and said in " ".join(r.output.split()), r.output


def test_make_imagefolder_seed_bound_is_the_configs():
    from dlperf.config.limits import MAX_SEED
    from dlperf.data import imagefolder

    assert imagefolder.MAX_SEED == MAX_SEED


@pytest.mark.parametrize("value", ["inf", "1e30", "-5", "nan", "lots"])
def test_a_bad_spec_memory_variable_is_a_clear_error(monkeypatch, value):
    """DLPERF_SPEC_MEMORY_GB=inf (or 1e30) was a raw OverflowError when a file: model's spec
    was made."""
    from dlperf.zoo.sources.custom.isolated import MEMORY_ENV, memory_limit_bytes

    monkeypatch.setenv(MEMORY_ENV, value)
    with pytest.raises(ConfigError, match=MEMORY_ENV):
        memory_limit_bytes()
    monkeypatch.setenv(MEMORY_ENV, "16")
    assert memory_limit_bytes() == 16 * 2**30


def test_end_tree_kills_a_grandchild_in_a_session_of_its_own():
    """procgroup.end_tree: what a child started in a new session (as torchrun starts its
    ranks) is killed with it; killing the child's group alone left it running."""
    from dlperf.procgroup import descendants, end_tree

    code = ("import subprocess, sys, time\n"
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'], "
            "start_new_session=True)\n"
            "time.sleep(300)\n")
    p = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not descendants(p.pid):
            time.sleep(0.1)
        kids = descendants(p.pid)
        assert kids and all(os.getsid(k) == k for k in kids)
        end_tree(p)
        time.sleep(0.3)
        for k in kids:
            try:
                state = Path(f"/proc/{k}/stat").read_text().rpartition(")")[2].split()[0]
            except OSError:
                continue
            assert state == "Z", f"{k} still running"
    finally:
        if p.poll() is None:
            p.kill()


@pytest.mark.parametrize("cmd", [["results", "--compare", "convergence"], ["report", "-f", "md"]])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e400"])
def test_a_target_loss_that_is_not_finite_is_a_clear_error(tmp_path, cmd, value):
    """--target-loss nan reached the convergence section as a raw ValueError."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from fuzz_databases import make_valid

    db = make_valid(tmp_path / "v.db")
    out = ["-o", str(tmp_path / "rep")] if cmd[0] == "report" else []
    r = CliRunner().invoke(app, [cmd[0], "--db", str(db), *cmd[1:], *out,
                                 "--target-loss", value])
    assert r.exit_code == 2 and "--target-loss" in r.output, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)
