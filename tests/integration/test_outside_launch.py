"""Ranks started outside dlperf (torchrun, srun, a Kubernetes PyTorchJob) join through their
environment (dlperf.launch.outside, dlperf.launch.joined): detection, the frameworks' hooks, and
`dlperf run` under torchrun (PyTorch, gloo on the CPU) and under a simulated srun (fake
framework: one rank, and two ranks joined over loopback)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dlperf.errors import ConfigError
from dlperf.launch.outside import detect, first_host, slurm_port

SRC = str(Path(__file__).resolve().parents[2] / "src")
FAST = ["--min-iters", "4", "--min-time", "0", "--warmup-window", "2", "--max-warmup-iters",
        "4", "--no-ceilings", "--comm-profile-iters", "0"]
#: Launchers' variables that must not leak from the test's own environment into a case.
LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
               "MASTER_PORT", "TORCHELASTIC_RUN_ID", "GROUP_RANK", "KUBERNETES_SERVICE_HOST",
               "DLPERF_LAUNCHER", "DLPERF_COORDINATOR", "TF_CONFIG")


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in LAUNCH_VARS and not k.startswith("SLURM_")}
    pp = env.get("PYTHONPATH")
    return {**env, "PYTHONPATH": SRC + (os.pathsep + pp if pp else ""), **extra}


def srun_env(rank: int, ntasks: int, **extra: str) -> dict[str, str]:
    """What srun sets for task ``rank`` of a one-node step of ``ntasks`` tasks."""
    return {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_PROCID": str(rank),
            "SLURM_LOCALID": str(rank), "SLURM_NODEID": "0", "SLURM_NTASKS": str(ntasks),
            "SLURM_STEP_NUM_TASKS": str(ntasks), "SLURM_STEP_NUM_NODES": "1",
            "SLURM_NNODES": "1", "SLURM_STEP_NODELIST": "localhost",
            "SLURM_JOB_NODELIST": "localhost", "SLURM_STEP_TASKS_PER_NODE": str(ntasks),
            **extra}


# --- detection -------------------------------------------------------------------------------

def test_torchrun_is_detected_with_its_local_world():
    got = detect({"TORCHELASTIC_RUN_ID": "x", "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1",
                  "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1", "MASTER_ADDR": "h0",
                  "MASTER_PORT": "29500"})
    assert (got.launcher, got.rank, got.world_size, got.local_rank, got.local_world_size,
            got.node_rank, got.nnodes, got.platform) == ("torchrun", 3, 4, 1, 2, 1, 2, None)
    assert got.env() == {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1",
                         "LOCAL_WORLD_SIZE": "2", "DLPERF_NODE_RANK": "1",
                         "DLPERF_LAUNCHED_BY": "torchrun", "MASTER_ADDR": "h0",
                         "MASTER_PORT": "29500"}


def test_srun_tasks_are_ranks_but_a_batch_script_is_not():
    env = srun_env(1, 4, SLURM_STEP_NUM_NODES="2", SLURM_NODEID="0", SLURM_LOCALID="1",
                   SLURM_STEP_NODELIST="gpu[007-008]")
    got = detect(env)
    assert (got.launcher, got.rank, got.world_size, got.local_world_size, got.nnodes) == \
        ("slurm", 1, 4, 2, 2)
    assert (got.master_addr, got.master_port) == ("gpu007", slurm_port(4242)) == \
        ("gpu007", 24242)
    assert got.record()["details"]["job_id"] == 4242
    # sbatch's own shell: SLURM_PROCID=0 and SLURM_NTASKS, but no step variables
    batch = {k: v for k, v in env.items() if not k.startswith("SLURM_STEP")}
    assert detect(batch) is None
    assert detect({**env, "DLPERF_LAUNCHER": "dlperf"}) is None  # dlperf's own --emit-slurm
    assert detect({**env, "MASTER_PORT": "1234"}).master_port == 1234


def test_a_pytorchjob_pod_is_one_rank():
    got = detect({"RANK": "2", "WORLD_SIZE": "3", "MASTER_ADDR": "job-master-0",
                  "MASTER_PORT": "23456", "KUBERNETES_SERVICE_HOST": "10.0.0.1"})
    assert (got.launcher, got.platform, got.rank, got.local_rank, got.node_rank,
            got.nnodes) == ("pytorchjob", "kubernetes", 2, 0, 2, 3)
    assert detect({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h"}).launcher == "env"
    assert detect({"PATH": "/bin"}) is None


def test_bad_launch_environments_are_refused():
    with pytest.raises(ConfigError, match="DLPERF_LAUNCHER='spawn': use auto"):
        detect({"DLPERF_LAUNCHER": "spawn"})
    with pytest.raises(ConfigError, match="same number on every node"):
        detect(srun_env(0, 3, SLURM_STEP_NUM_NODES="2"))
    with pytest.raises(ConfigError, match="RANK='x'"):
        detect({"TORCHELASTIC_RUN_ID": "1", "RANK": "x", "WORLD_SIZE": "2"})


@pytest.mark.parametrize("nodelist, host", [("node001", "node001"), ("a,b", "a"),
                                            ("gpu[07-09,12],cpu1", "gpu07"),
                                            ("n[3,5]-ib", "n3-ib")])
def test_first_host_of_a_node_list(nodelist, host):
    assert first_host(nodelist) == host


def test_first_host_refuses_a_broken_list():
    with pytest.raises(ConfigError, match="first host"):
        first_host("gpu[07-09")


# --- the frameworks' hooks -----------------------------------------------------------------

def test_jax_finds_its_coordinator(monkeypatch):
    from dlperf.frameworks.jax.dist import outside_env

    monkeypatch.delenv("DLPERF_COORDINATOR", raising=False)
    rec = detect(srun_env(0, 2)).record()
    assert outside_env(rec) == {"DLPERF_JAX_INIT": "auto"}  # jax.distributed's SLURM detection
    tr = {"launcher": "torchrun", "master_addr": "h0", "master_port": 29500}
    assert outside_env(tr) == {"DLPERF_COORDINATOR": "h0:29501"}  # the agent holds 29500
    assert outside_env({**tr, "launcher": "pytorchjob"}) == {"DLPERF_COORDINATOR": "h0:29500"}
    with pytest.raises(ConfigError, match="need MASTER_ADDR"):
        outside_env({"launcher": "env", "master_addr": None, "master_port": None})
    monkeypatch.setenv("DLPERF_COORDINATOR", "c:1")
    assert outside_env(tr) == {}


@pytest.mark.slow
def test_tensorflow_workers_of_an_srun_step_get_tf_config(monkeypatch):
    pytest.importorskip("tensorflow")
    from dlperf.frameworks.tensorflow.dist import outside_env

    monkeypatch.delenv("TF_CONFIG", raising=False)
    for k, v in srun_env(1, 2, MASTER_PORT="30000").items():
        monkeypatch.setenv(k, v)
    cfg = json.loads(outside_env(detect().record())["TF_CONFIG"])
    assert cfg == {"cluster": {"worker": ["localhost:30001", "localhost:30002"]},
                   "task": {"type": "worker", "index": 1}}
    with pytest.raises(ConfigError, match="need TF_CONFIG"):
        outside_env({"launcher": "torchrun"})
    monkeypatch.setenv("TF_CONFIG", "{}")
    assert outside_env({"launcher": "torchrun"}) == {}


# --- dlperf run under a launcher --------------------------------------------------------------

def _record(db: Path) -> tuple[dict, dict]:
    from dlperf.results.store import ResultStore

    with ResultStore(db) as s:
        rows = s.rows()
    assert len(rows) == 1, rows
    return rows[0], json.loads(rows[0]["result_json"])


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_dlperf_run_under_torchrun_joins_its_ranks(tmp_path):
    """`torchrun --nproc_per_node 2 -m dlperf run --framework torch ...` (gloo on the CPU): the
    two ranks are torchrun's (dlperf starts no launcher of its own), --nproc comes from the
    launch, and rank 0 stores one result with both ranks' samples."""
    pytest.importorskip("torch")
    db = tmp_path / "r.db"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           "--standalone", "--max-restarts", "0", "-m", "dlperf", "run", "--framework",
           "torch", "--model", "fcn5_tiny", "--batch-size", "8", "--device", "cpu",
           "--threads", "1", "--db", str(db), *FAST]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=280, cwd=tmp_path,
                         env=_clean_env(GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1"))
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    assert "launched by torchrun: rank 0 of 2" in out.stderr
    row, rec = _record(db)
    assert row["status"] == "ok" and row["world_size"] == 2 and row["per_device_batch"] == 4
    assert rec["worker"]["launched_by"]["launcher"] == "torchrun"
    assert rec["worker"]["launched_by"]["world_size"] == 2
    assert "launcher" not in rec["worker"]  # not dlperf's own torchrun
    assert [p["rank"] for p in rec["dist"]["per_rank"]] == [0, 1]
    assert not list(tmp_path.glob("*.db")) or [p.name for p in tmp_path.glob("*.db")] == ["r.db"]


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_one_srun_task_runs_as_always_and_records_slurm(tmp_path):
    db = tmp_path / "r.db"
    out = subprocess.run([sys.executable, "-m", "dlperf", "run", "--framework", "fake",
                          "--model", "fcn5_tiny", "--batch-size", "8", "--db", str(db), *FAST],
                         capture_output=True, text=True, timeout=180,
                         env=_clean_env(DLPERF_FAKE_FRAMEWORK="1", **srun_env(0, 1)))
    assert out.returncode == 0, out.stdout + out.stderr
    row, rec = _record(db)
    assert row["status"] == "ok" and row["world_size"] == 1
    lb = rec["worker"]["launched_by"]
    assert (lb["launcher"], lb["rank"], lb["world_size"]) == ("slurm", 0, 1)
    assert lb["details"]["job_id"] == 4242
    assert rec["worker"]["pid"] != os.getpid()  # its own worker process, as always


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_two_srun_tasks_join_over_loopback(tmp_path):
    """Two `dlperf run` processes with the variables srun gives two tasks of one step: they
    meet at localhost:MASTER_PORT (env://) and rank 0 stores the merged result."""
    pytest.importorskip("torch")
    from dlperf.launch.distributed import free_port

    db = tmp_path / "r.db"
    port = str(free_port())
    procs = [subprocess.Popen([sys.executable, "-m", "dlperf", "run", "--framework", "fake",
                               "--model", "fcn5_tiny", "--batch-size", "8", "--device", "cpu",
                               "--db", str(db), *FAST], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
                              env=_clean_env(DLPERF_FAKE_FRAMEWORK="1", GLOO_SOCKET_IFNAME="lo",
                                             **srun_env(k, 2, MASTER_PORT=port)))
             for k in (0, 1)]
    outs = [p.communicate(timeout=180)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    row, rec = _record(db)
    assert row["status"] == "ok" and row["world_size"] == 2
    assert rec["worker"]["launched_by"]["launcher"] == "slurm"
    assert rec["dist"]["engine"]["launcher"] == "slurm"  # torch.distributed set-up records it too
    assert [p["rank"] for p in rec["dist"]["per_rank"]] == [0, 1]
    assert [p.name for p in tmp_path.glob("*.db")] == ["r.db"]  # rank 1 stored nothing here


def test_a_point_of_another_world_size_is_refused(tmp_path):
    out = subprocess.run([sys.executable, "-m", "dlperf", "run", "--framework", "fake",
                          "--model", "fcn5_tiny", "--nproc", "4", "--db",
                          str(tmp_path / "r.db"), *FAST], capture_output=True, text=True,
                         timeout=120, env=_clean_env(DLPERF_FAKE_FRAMEWORK="1",
                                                     **srun_env(0, 2)))
    assert out.returncode == 2
    msg = " ".join(out.stderr.split())
    assert "slurm started 2 processes" in msg and "--nproc 2 --nnodes 1" in msg
    assert not (tmp_path / "r.db").exists()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_srun_tasks_of_jax_join_by_jax_distributed_detection(tmp_path):
    """JAX ranks of a simulated srun step: jax.distributed.initialize() finds the coordinator,
    process count and id in the SLURM variables itself (JAX's SlurmCluster)."""
    pytest.importorskip("jax")
    import random

    db = tmp_path / "r.db"
    job = str(random.randrange(10_000, 1_000_000))  # JAX's port: 61440 + job id % 4096
    procs = [subprocess.Popen([sys.executable, "-m", "dlperf", "run", "--framework", "jax",
                               "--model", "fcn5_tiny", "--batch-size", "8", "--device", "cpu",
                               "--nproc", "2", "--dp-layout", "per_device", "--threads", "1",
                               "--db", str(db), *FAST], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
                              env=_clean_env(**srun_env(k, 2, SLURM_JOB_ID=job)))
             for k in (0, 1)]
    outs = [p.communicate(timeout=280)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[-3000:] for o in outs]
    row, rec = _record(db)
    assert row["status"] == "ok" and row["world_size"] == 2
    assert rec["worker"]["launched_by"]["launcher"] == "slurm"
    jd = rec["flags"]["data_parallel_setup"]["jax_distributed"]
    assert jd["coordinator"] == "auto-detected by jax.distributed"
    assert (jd["num_processes"], jd["process_id"]) == (2, 0)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_two_srun_tasks_of_tensorflow_join_through_slurm_cluster_resolver(tmp_path):
    """TensorFlow workers of a simulated srun step: TF_CONFIG from SlurmClusterResolver
    (workers on localhost at MASTER_PORT + 1, + 2), MultiWorkerMirroredStrategy over gRPC."""
    pytest.importorskip("tensorflow")
    from dlperf.launch.distributed import free_port

    db = tmp_path / "r.db"
    port = str(free_port())
    procs = [subprocess.Popen([sys.executable, "-m", "dlperf", "run", "--framework",
                               "tensorflow", "--mode", "graph", "--model", "fcn5_tiny",
                               "--batch-size", "8", "--device", "cpu", "--nproc", "2",
                               "--dp-layout", "per_device", "--threads", "1", "--db", str(db),
                               *FAST], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, cwd=tmp_path,
                              env=_clean_env(**srun_env(k, 2, MASTER_PORT=port)))
             for k in (0, 1)]
    outs = [p.communicate(timeout=380)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[-3000:] for o in outs]
    row, rec = _record(db)
    assert row["status"] == "ok" and row["world_size"] == 2
    assert rec["worker"]["launched_by"]["launcher"] == "slurm"
    assert rec["dist"]["engine"]["strategy"] == "MultiWorkerMirroredStrategy"
    assert rec["dist"]["engine"]["tf_config"] == {"workers": 2, "task_index": 0, "task_type": "worker"}
