"""Data-parallel runs end to end on the CPU: torchrun + DDP over gloo, two "nodes" over
loopback, failed ranks, convergence at the same global batch on 1 and 2 workers, JAX sharded
jit over 2 host devices and jax.distributed over 2 processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytest.importorskip("torch")

from dlperf.config import IterationPolicy, make_run_config  # noqa: E402
from dlperf.launch.distributed import free_port, run_point  # noqa: E402
from dlperf.results.store import ResultStore  # noqa: E402

SRC = str(Path(__file__).resolve().parents[2] / "src")
FAST = ["--min-iters", "6", "--min-time", "0", "--warmup-window", "2", "--max-warmup-iters", "4"]


def _env(**extra: str) -> dict[str, str]:
    pp = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": SRC + (os.pathsep + pp if pp else ""), **extra}


def _dlperf(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "dlperf", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env or _env())


def _processes_with(mark: str) -> list[int]:
    """Pids of live processes whose environment contains ``mark`` (our run's processes)."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            if mark.encode() in (d / "environ").read_bytes():
                stat = (d / "stat").read_text()
                if stat.rsplit(")", 1)[-1].split()[0] != "Z":
                    pids.append(int(d.name))
        except OSError:
            continue
    return pids


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_two_process_ddp_run_is_one_stored_result_with_both_ranks(tmp_path):
    db = tmp_path / "r.db"
    p = _dlperf("run", "--model", "fcn5_tiny", "--batch-size", "16", "--nproc", "2",
                "--device", "cpu", "--bucket-cap-mb", "1", "--comm-profile-iters", "2",
                "--no-broadcast-buffers", "--cpu-bind", "cores", "--db", str(db), *FAST)
    out, _ = p.communicate(timeout=140)
    assert p.returncode == 0, out[-3000:]
    with ResultStore(db) as s:
        rows = s.rows()
        assert len(rows) == 1
        row = rows[0]
        assert row["status"] == "ok" and row["world_size"] == 2 and row["nnodes"] == 1
        assert row["batch_size"] == 16 and row["per_device_batch"] == 8
        raw = s.samples(row["id"])
    r = json.loads(row["result_json"])
    d = r["dist"]
    assert d["backend"] == "ddp/gloo" and d["processes"] == 2 and d["scaling"] == "strong"
    assert d["ddp"] == {"bucket_cap_mb": 1.0, "gradient_as_bucket_view": False,
                        "static_graph": False, "find_unused_parameters": False,
                        "broadcast_buffers": False}
    assert [pr["rank"] for pr in d["per_rank"]] == [0, 1]
    m0, m1 = raw["rank0:measure"]["step_time_s"], raw["rank1:measure"]["step_time_s"]
    assert len(m0) == len(m1) == len(raw["measure"]["step_time_s"]) == row["n_measured"] >= 6
    assert raw["measure"]["step_time_s"] == [max(a, b) for a, b in zip(m0, m1)]
    l0, l1 = raw["rank0:measure"]["loss"], raw["rank1:measure"]["loss"]
    assert raw["measure"]["loss"] == pytest.approx([(a + b) / 2 for a, b in zip(l0, l1)])
    meds = sorted(pr["median_s"] for pr in d["per_rank"])
    assert row["rank_imbalance"] == pytest.approx(meds[1] / ((meds[0] + meds[1]) / 2))
    assert row["samples"] == row["n_measured"] * 16
    c = d["comm"]
    assert c["rule"] == "cpu-gloo" and c["profiled_iters"] == 2 and c["n_comm_spans"] >= 2
    assert 0 <= c["exposed"] <= c["comm"] and row["exposed_comm_s"] == c["exposed"]
    assert c["exposed"] == min(pr["comm"]["exposed"] for pr in d["per_rank"])
    # --cpu-bind cores: each rank bound to its own block of the usable CPUs, recorded per rank
    from dlperf.placement import parse_cpulist, usable_cpus

    sets = [set(parse_cpulist(pr["cpus"])) for pr in d["per_rank"]]
    assert sets[0] and sets[1] and not sets[0] & sets[1]
    assert sets[0] | sets[1] == set(usable_cpus())
    bind = r["env"]["cpu_bind"]
    assert bind["mode"] == "cores" and bind["applied"] and bind["local_procs"] == 2
    assert parse_cpulist(bind["cpus"]) == sorted(sets[0]) and r["config"]["hardware"]["cpu_bind"] == "cores"
    assert r["env"]["cpu_list"] == bind["cpus"]  # the env is read after binding
    # threads not given: one per rank, recorded with the reason and warned about
    assert r["env"]["thread_policy"]["policy"] == "ranks"
    assert [pr["threads"] for pr in d["per_rank"]] == [1, 1]
    assert any("CPU ranks ran" in w for w in r["warnings"])


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_two_nodes_of_two_processes_over_loopback(tmp_path):
    ep = f"127.0.0.1:{free_port()}"
    procs = [_dlperf("run", "--model", "fcn5_tiny", "--batch-size", "8", "--nproc", "2",
                     "--nnodes", "2", "--node-rank", str(k), "--rdzv-endpoint", ep,
                     "--device", "cpu", "--comm-profile-iters", "0",
                     "--db", str(tmp_path / "r.db"), *FAST) for k in (0, 1)]
    outs = [p.communicate(timeout=140)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][-2000:] + outs[1][-2000:]
    for db in ("r.db", "r.node1.db"):  # node 0 stores in --db, node 1 in its own copy
        with ResultStore(tmp_path / db) as s:
            (row,) = s.rows()
            assert row["status"] == "ok" and row["world_size"] == 4 and row["nnodes"] == 2
            assert row["per_device_batch"] == 2
            phases = set(s.samples(row["id"]))
        assert {f"rank{r}:measure" for r in range(4)} <= phases
        per_rank = json.loads(row["result_json"])["dist"]["per_rank"]
        # c10d assigns global ranks to nodes in rendezvous order: two on each node
        assert sorted(p["rank"] for p in per_rank) == [0, 1, 2, 3]
        assert sorted(p["node_rank"] for p in per_rank) == [0, 0, 1, 1]


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_jax_two_nodes_of_two_devices_over_loopback(tmp_path):
    """jax.distributed across two 'nodes' on one machine: one process per node driving two
    CPU devices (per_node), four replicas in one mesh; both nodes store the same result."""
    pytest.importorskip("jax")
    ep = f"127.0.0.1:{free_port()}"
    procs = [_dlperf("run", "--model", "fcn5_tiny", "--framework", "jax", "--batch-size", "8",
                     "--nproc", "2", "--nnodes", "2", "--node-rank", str(k),
                     "--rdzv-endpoint", ep, "--device", "cpu", "--comm-profile-iters", "0",
                     "--db", str(tmp_path / "r.db"), *FAST) for k in (0, 1)]
    outs = [p.communicate(timeout=140)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][-2000:] + outs[1][-2000:]
    for db in ("r.db", "r.node1.db"):
        with ResultStore(tmp_path / db) as s:
            (row,) = s.rows()
            assert row["status"] == "ok" and row["world_size"] == 4 and row["nnodes"] == 2
            assert row["per_device_batch"] == 2
            phases = set(s.samples(row["id"]))
        d = json.loads(row["result_json"])["dist"]
        assert d["backend"] == "jax-sharded-jit/jax.distributed" and d["processes"] == 2
        assert len(d["engine"]["mesh"]["devices"]) == 4 and {"rank0:measure", "rank1:measure"} <= phases


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind,status", [("crash", "crash"), ("oom", "oom"),
                                         ("hang", "timeout")])
def test_a_failed_rank_is_a_recorded_result_and_leaves_no_process(monkeypatch, kind, status):
    from dlperf import registry

    monkeypatch.setitem(registry.FRAMEWORK_MODES, "fake", ("eager",))  # as DLPERF_FAKE_FRAMEWORK=1
    mark = f"DLPERF_TEST_MARK={uuid.uuid4().hex}"
    # a hang ends at the timeout; a crash or OOM must end before it (a busy machine may need
    # many seconds to start two PyTorch processes)
    cfg = make_run_config(model="fcn5_tiny", framework="fake", batch_size=16, nproc=2,
                          options={"fail": {16: kind}, "fail_rank": 1},
                          timeout_s=5.0 if kind == "hang" else 90.0, iterations=IterationPolicy(
                              min_iters=10, min_time_s=0.0, warmup_window=2,
                              min_warmup_iters=0, max_warmup_iters=4))
    r = run_point(cfg, env={"DLPERF_FAKE_FRAMEWORK": "1", "PYTHONPATH": SRC,
                            mark.split("=")[0]: mark.split("=")[1]}).to_dict()
    assert r["status"] == status, r["error"]
    assert r["world_size"] == 2 and r["per_device_batch"] == 8
    if kind != "hang":
        assert "rank 1" in r["error"]
        assert {p["rank"]: p["status"] for p in r["ranks"]}[1] == status
    assert _processes_with(mark) == []


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_convergence_on_one_and_two_workers_at_the_same_global_batch(tmp_path, data_env):
    from dlperf.report.convergence import convergence_groups, convergence_markdown
    from dlperf.worker import run_config

    pol = IterationPolicy(min_iters=30, min_time_s=0.0, warmup_window=5, min_warmup_iters=0,
                          max_warmup_iters=10)
    cfgs = {n: make_run_config(model="fcn_mnist_tiny", data="mnist", batch_size=32, nproc=n,
                               target_loss=2.2, comm_profile_iters=0, iterations=pol)
            for n in (1, 2)}
    res = {1: run_config(cfgs[1]),  # one worker in this process (PyTorch is imported already)
           2: run_point(cfgs[2], env={"PYTHONPATH": SRC, "DLPERF_DATA": str(data_env)}).to_dict()}
    assert [res[n]["status"] for n in (1, 2)] == ["ok", "ok"], res[2]["error"]
    with ResultStore(tmp_path / "c.db") as s:
        for n in (1, 2):
            s.add(res[n])
        rows = {r["world_size"]: r for r in s.rows()}
        l1, l2 = ([x for ph in ("first", "warmup", "measure")
                   for x in s.samples(rows[n]["id"])[ph]["loss"]] for n in (1, 2))
        (g,) = convergence_groups(s.records(), s.samples)
    # Same global batches, same initialisation, averaged gradients: the same training (up to
    # the order of float sums) while both ran.
    n = min(len(l1), len(l2))
    assert n >= 30 and l1[:n] == pytest.approx(l2[:n], rel=2e-3, abs=2e-3)
    assert sum(l1[-10:]) / 10 < 0.98 * sum(l1[:10]) / 10  # it trains
    for w in (1, 2):
        conv = res[w]["convergence"]
        assert conv["target_loss"] == 2.2 and conv["window"] == 10
        assert conv["iterations"] == len(res[w]["losses"]["first"] + res[w]["losses"]["warmup"]
                                         + res[w]["losses"]["measure"])
        if conv["reached"]:
            assert rows[w]["time_to_target_s"] == conv["time_to_target_s"] > 0
    assert [r["devices"] for r in g["runs"]] == [1, 2] and g["batch_size"] == 32
    assert "| fcn_mnist_tiny |" in convergence_markdown([g])


@pytest.fixture(scope="module")
def jax_sharded_cli(tmp_path_factory) -> dict:
    """``dlperf run`` of fcn5_tiny on JAX's sharded jit over two host devices of one process
    (global batch 16, FAST, 3 profiled iterations): the stored row (``row``) and its record
    (``record``) with its samples and losses per phase put back (``samples``, ``losses``),
    as :func:`dlperf.worker.run_config` returns them."""
    pytest.importorskip("jax")
    db = tmp_path_factory.mktemp("jax_sharded") / "r.db"
    p = _dlperf("run", "--model", "fcn5_tiny", "--framework", "jax", "--batch-size", "16",
                "--nproc", "2", "--device", "cpu", "--comm-profile-iters", "3",
                "--db", str(db), *FAST)
    out, _ = p.communicate(timeout=110)
    assert p.returncode == 0, out[-3000:]
    with ResultStore(db) as s:
        (row,) = s.rows()
        raw = s.samples(row["id"])
    rec = json.loads(row["result_json"])
    rec["samples"] = {ph: v["step_time_s"] for ph, v in raw.items()}
    rec["losses"] = {ph: v["loss"] for ph, v in raw.items()}
    return {"row": row, "record": rec}


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_jax_sharded_jit_and_jax_distributed_train_like_one_device(jax_sharded_cli):
    pytest.importorskip("jax")
    pol = IterationPolicy(min_iters=6, min_time_s=0.0, warmup_window=2, min_warmup_iters=0,
                          max_warmup_iters=4)
    from dlperf.worker import run_config

    # the sharded run over two host devices: the same point through `dlperf run` (its
    # iterations are FAST's, this test's ``pol``), shared with the test of its stored
    # communication
    runs = {"sharded": jax_sharded_cli["record"]}
    for name, kw in {"one": {}, "processes": {"nproc": 2, "dp_layout": "per_device"}}.items():
        cfg = make_run_config(model="fcn5_tiny", framework="jax", batch_size=16, iterations=pol,
                              **kw)
        # one device: in this process; several: fresh processes (devices are set at start-up)
        runs[name] = (run_config(cfg) if name == "one" else
                      run_point(cfg, env={"PYTHONPATH": SRC}).to_dict())
    for r in runs.values():
        assert r["status"] == "ok", r["error"]
    sh, pr = runs["sharded"], runs["processes"]
    assert sh["dist"]["backend"] == "jax-sharded-jit" and sh["dist"]["processes"] == 1
    assert sh["dist"]["engine"]["mesh"]["devices"] == ["cpu:0", "cpu:1"]
    assert sh["world_size"] == 2 and sh["per_device_batch"] == 8 and sh["batch_size"] == 16
    assert pr["dist"]["backend"] == "jax-sharded-jit/jax.distributed"
    assert pr["dist"]["processes"] == 2 and "rank1:measure" in pr["samples"]
    assert pr["samples"]["measure"] == [max(a, b) for a, b in zip(
        pr["samples"]["rank0:measure"], pr["samples"]["rank1:measure"])]
    # the same global batches from the same initial state: the same losses
    first = runs["one"]["losses"]["first"] + runs["one"]["losses"]["warmup"]
    for r in (sh, pr):
        assert r["losses"]["first"] + r["losses"]["warmup"] == pytest.approx(first, rel=1e-4)
    # exposed communication (default 5 profiled iterations): each process's own device
    per_rank = [p["comm"] for p in pr["dist"]["per_rank"]]
    assert [c["devices"] for c in per_rank] == [1, 1]
    assert pr["dist"]["comm"]["exposed"] == min(c["exposed"] for c in per_rank)
    assert pr["dist"]["comm"]["exposed_max"] == max(c["exposed"] for c in per_rank)
    for c in per_rank:
        assert c["rule"] == "xspace-cpu-thunks" and c["n_comm_spans"] >= 5
        assert 0 <= c["exposed"] <= c["comm"] and c["profiled_iters"] == 5


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_jax_sharded_jit_run_stores_its_exposed_communication(jax_sharded_cli):
    row = jax_sharded_cli["row"]
    assert row["status"] == "ok" and row["world_size"] == 2
    c = json.loads(row["result_json"])["dist"]["comm"]
    # XLA:CPU traces its collective thunks: a number, from both host devices of the process
    assert c["reason"] is None and c["rule"] == "xspace-cpu-thunks"
    assert c["devices"] == 2 and set(c["per_device"]) == {"/device:CPU:0", "/device:CPU:1"}
    assert c["profiled_iters"] == 3 and c["n_comm_spans"] >= 6  # >= one per device and step
    assert any(op.startswith("all-reduce") for op in c["comm_ops"])
    assert 0 < c["comm"] and 0 <= c["overlapped"] <= c["comm"]
    # the means over the devices; the headline is the device that waits least
    assert c["exposed_mean"] == pytest.approx(c["comm"] - c["overlapped"])
    per = [d["exposed"] for d in c["per_device"].values()]
    assert c["exposed_mean"] == pytest.approx(sum(per) / 2)
    assert c["exposed"] == min(per) and c["exposed_max"] == max(per)
    assert set(c["exposed_per_device"]) == {"rank0:/device:CPU:0", "rank0:/device:CPU:1"}
    assert row["exposed_comm_s"] == c["exposed"]
    assert 0 < c["exposed_share_of_step"] <= 1.0


_TF_SCRIPT = """
import json, sys
from dlperf.config import IterationPolicy, make_run_config
from dlperf.worker import run_config
pol = IterationPolicy(min_iters=4, min_time_s=0.0, warmup_window=2, min_warmup_iters=0,
                      max_warmup_iters=4)
out = {}
for n in (2, 1):  # the 2-device run first: logical CPU devices are set before TF starts
    cfg = make_run_config(model="fcn5_tiny", framework="tensorflow", mode="graph",
                          batch_size=16, nproc=n, iterations=pol)
    r = run_config(cfg)
    out[n] = {k: r.get(k) for k in ("status", "error", "dist", "per_device_batch", "losses")}
json.dump(out, open(sys.argv[1], "w"))
"""


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_tensorflow_mirrored_strategy_over_two_logical_cpus_trains_like_one_device(tmp_path):
    pytest.importorskip("tensorflow")
    # one process for both runs (one TensorFlow start-up instead of two)
    res = tmp_path / "r.json"
    p = subprocess.run([sys.executable, "-c", _TF_SCRIPT, str(res)], env=_env(),
                       capture_output=True, text=True, timeout=190)
    assert p.returncode == 0, p.stderr[-3000:]
    runs = {int(k): v for k, v in json.loads(res.read_text()).items()}
    for r in runs.values():
        assert r["status"] == "ok", r["error"]
    d = runs[2]["dist"]
    assert d["backend"] == "tf.distribute.MirroredStrategy" and d["replicas"] == 2
    assert d["engine"]["devices"] == ["/CPU:0", "/CPU:1"] and d["engine"]["replicas_in_sync"] == 2
    assert runs[2]["per_device_batch"] == 8
    # synthetic batches are drawn for the global batch, then split: the same training
    one = runs[1]["losses"]["first"] + runs[1]["losses"]["warmup"]
    two = runs[2]["losses"]["first"] + runs[2]["losses"]["warmup"]
    assert two == pytest.approx(one, rel=1e-4)
