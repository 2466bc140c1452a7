"""TensorFlow ``MultiWorkerMirroredStrategy``: TF_CONFIG and its exchange between nodes (no
TensorFlow), the configuration rules, the sharded input pipeline, and end to end on the CPU:
two worker processes on one machine and two nodes of one worker process each over loopback,
each training like one process on the same global batch (same losses: the loss scaling and the
gradient all-reduce are right)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from dlperf.config import IterationPolicy, make_run_config
from dlperf.errors import ConfigError
from dlperf.frameworks.tensorflow import cluster as tf_cluster
from dlperf.launch.distributed import free_port, launch_command

SRC = str(Path(__file__).resolve().parents[3] / "src")
FAST = ["--min-iters", "4", "--min-time", "0", "--warmup-window", "2", "--max-warmup-iters", "4",
        "--no-ceilings"]
POL = IterationPolicy(min_iters=4, min_time_s=0.0, warmup_window=2, min_warmup_iters=0,
                      max_warmup_iters=4)


# --- TF_CONFIG and the exchange (framework-free) -----------------------------------------------

def test_tf_config_is_worker_rank_of_the_cluster_and_parses_back():
    workers = ["127.0.0.1:4000", "127.0.0.1:4001", "10.0.0.2:4000", "10.0.0.2:4001"]
    text = tf_cluster.tf_config(workers, 2)
    assert json.loads(text) == {"cluster": {"worker": workers},
                                "task": {"type": "worker", "index": 2}}
    assert tf_cluster.parse_tf_config(text) == (workers, 2)
    with pytest.raises(ValueError, match="outside"):
        tf_cluster.tf_config(workers, 4)
    with pytest.raises(ValueError, match="repeated"):
        tf_cluster.tf_config(["h:1", "h:1"], 0)
    with pytest.raises(ValueError, match="not set"):
        tf_cluster.parse_tf_config(None)
    with pytest.raises(ValueError, match="workers only"):
        tf_cluster.parse_tf_config(json.dumps({"cluster": {"worker": ["h:1"], "ps": ["h:2"]},
                                               "task": {"type": "worker", "index": 0}}))
    with pytest.raises(ValueError, match="not a worker cluster"):
        tf_cluster.parse_tf_config("{not json")
    assert tf_cluster.format_address("::1", 5) == "[::1]:5"
    assert tf_cluster.split_address("[::1]:5") == ("::1", 5)
    with pytest.raises(ValueError, match="HOST:PORT"):
        tf_cluster.split_address("host")


def test_worker_host_and_ports():
    assert tf_cluster.worker_host("127.0.0.1", env={}) == "127.0.0.1"
    assert tf_cluster.worker_host("localhost", env={}) == "127.0.0.1"
    assert tf_cluster.worker_host("10.1.2.3", env={tf_cluster.HOST_ENV: "node7"}) == "node7"
    ports = tf_cluster.pick_ports(4)
    assert len(set(ports)) == 4 and all(0 < p < 65536 for p in ports)


def _node(results: dict, k: int, **kw):
    try:
        results[k] = tf_cluster.exchange(node_rank=k, **kw)
    except Exception as e:  # noqa: BLE001 - the test looks at it
        results[k] = e


def test_nodes_exchange_addresses_through_node_0_in_node_order():
    ep = f"127.0.0.1:{free_port()}"
    common = dict(nnodes=3, coordinator=ep, run_id="run-a", timeout_s=20.0)
    res: dict = {}
    addrs = {k: [f"10.0.0.{k}:{5000 + i}" for i in range(2)] for k in range(3)}

    def start(k, out=res, **kw):
        t = threading.Thread(target=_node, args=(out, k),
                             kwargs={**common, "addresses": addrs[k], **kw})
        t.start()
        return t

    threads = [start(2)]  # node 2 starts before node 0: it retries until node 0 listens
    threads.append(start(0))
    # a node of another run is refused while node 0 still waits for node 1, and not counted
    stray: dict = {}
    start(1, stray, run_id="run-b", addresses=["9.9.9.9:1", "9.9.9.9:2"]).join(timeout=25)
    assert isinstance(stray[1], RuntimeError) and "another run" in str(stray[1])
    assert res == {}  # nobody has a cluster yet
    threads.append(start(1))
    for t in threads:
        t.join(timeout=25)
    want = addrs[0] + addrs[1] + addrs[2]
    assert res == {0: want, 1: want, 2: want}


def test_two_nodes_of_two_processes_get_tf_config_of_their_global_ranks():
    """The spawner's hook on each of two nodes of two processes: one cluster of four workers,
    node 0's first, and ``TF_CONFIG`` index ``node_rank * nproc + i`` for local process ``i``
    (the ``RANK`` that :mod:`dlperf.launch.spawn` gives it). End to end, the nodes below run
    one process each; the launcher's ranks of two nodes of two processes are run end to end in
    tests/integration/test_distributed.py (PyTorch)."""
    ep = f"127.0.0.1:{free_port()}"
    args = ["--tf-config", "--run-id", "run-a", "--timeout", "20"]
    res: dict = {}

    def node(k):
        try:
            res[k] = tf_cluster.process_env(args, node_rank=k, nnodes=2, nproc=2, coordinator=ep)
        except Exception as e:  # noqa: BLE001 - the test looks at it
            res[k] = e

    threads = [threading.Thread(target=node, args=(k,)) for k in (1, 0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=25)
    parsed = {k: [tf_cluster.parse_tf_config(e[tf_cluster.TF_CONFIG_ENV]) for e in res[k]]
              for k in (0, 1)}
    workers = parsed[0][0][0]
    assert len(workers) == len(set(workers)) == 4
    assert {tuple(w) for envs in parsed.values() for w, _ in envs} == {tuple(workers)}
    assert [[i for _, i in parsed[k]] for k in (0, 1)] == [[0, 1], [2, 3]]
    assert tf_cluster.process_env(["--run-id", "r"], node_rank=1, nnodes=2, nproc=2,
                                  coordinator=ep) == [{}, {}]  # no --tf-config: nothing


def test_a_missing_node_is_a_timeout_naming_it():
    ep = f"127.0.0.1:{free_port()}"
    with pytest.raises(TimeoutError, match=r"node\(s\) \[1\]"):
        tf_cluster.exchange(node_rank=0, nnodes=2, coordinator=ep, addresses=["h:1"],
                            run_id="r", timeout_s=0.5)
    with pytest.raises(TimeoutError, match="could not get the TensorFlow cluster"):
        tf_cluster.exchange(node_rank=1, nnodes=2, coordinator=ep, addresses=["h:1"],
                            run_id="r", timeout_s=0.5)
    # one node: no exchange, no socket
    assert tf_cluster.cluster_addresses(node_rank=0, nnodes=1, nproc=2, coordinator=ep,
                                        run_id="r", timeout_s=1.0, env={})[0].startswith(
        "127.0.0.1:")


# --- configuration ---------------------------------------------------------------------------

def test_tensorflow_layouts_and_refusals():
    from dlperf.frameworks.tensorflow import dist as tf_dist

    one = make_run_config(model="fcn5_tiny", framework="tensorflow", batch_size=16, nproc=2)
    assert one.parallel.dp_layout == "per_node" and not tf_dist.multi_worker(one)
    assert tf_dist.strategy_name(one) == "MirroredStrategy"
    pd = make_run_config(model="fcn5_tiny", framework="tensorflow", batch_size=16, nproc=2,
                         dp_layout="per_device")
    assert tf_dist.workers(pd) == 2 and tf_dist.local_replicas(pd) == 1
    assert tf_dist.strategy_name(pd) == "MultiWorkerMirroredStrategy"
    assert [tf_dist.worker_rows(pd, r) for r in (0, 1)] == [(0, 8), (8, 16)]
    two = make_run_config(model="fcn5_tiny", framework="tensorflow", batch_size=32, nproc=2,
                          nnodes=2, dp_layout="per_device")
    assert tf_dist.workers(two) == 4 and tf_dist.worker_rows(two, 3) == (24, 32)
    gpu_nodes = make_run_config(model="fcn5_tiny", framework="tensorflow", batch_size=32,
                                nproc=4, nnodes=2, device="cuda")  # one worker per node
    assert tf_dist.workers(gpu_nodes) == 2 and tf_dist.local_replicas(gpu_nodes) == 4
    assert tf_dist.worker_rows(gpu_nodes, 1) == (16, 32)
    cpu_nodes = make_run_config(model="fcn5_tiny", framework="tensorflow", batch_size=8,
                                nnodes=2)  # one CPU device per node: per_node is fine
    assert tf_dist.workers(cpu_nodes) == 2
    with pytest.raises(ConfigError, match=r"--dp-layout \(dp_layout\).*one CPU device per "
                                          r"worker.*--dp-layout per_device"):
        make_run_config(model="fcn5_tiny", framework="tensorflow", batch_size=16, nproc=2,
                        nnodes=2)
    with pytest.raises(ConfigError, match="not available for tensorflow/xla"):
        make_run_config(model="fcn5_tiny", framework="tensorflow", mode="xla", batch_size=16,
                        nproc=2, dp_layout="per_device")
    assert pd.run_key() != one.run_key()  # another layout is another measurement


def test_launch_command_gives_tensorflow_workers_tf_config(tmp_path):
    cfg = make_run_config(model="fcn5_tiny", framework="tensorflow", batch_size=16, nproc=2,
                          dp_layout="per_device", timeout_s=120.0)
    cmd = launch_command(cfg, tmp_path / "c.json", tmp_path, node_rank=1, endpoint="h:29500")
    assert cmd[1:3] == ["-m", "dlperf.launch.spawn"]
    i = cmd.index("--tf-config")
    assert cmd[i + 1:i + 5] == ["--run-id", f"dlperf-{cfg.run_key()}", "--timeout", "120"]
    assert cmd[cmd.index("--coordinator") + 1] == "h:29500"
    jax = make_run_config(model="fcn5_tiny", framework="jax", batch_size=16, nproc=2,
                          dp_layout="per_device")
    assert "--tf-config" not in launch_command(jax, tmp_path / "c.json", tmp_path)


def test_a_rank_exception_is_the_failure_message_when_no_rank_died_silently(tmp_path):
    from dlperf.launch.distributed import _collect

    cfg = make_run_config(model="fcn5_tiny", framework="tensorflow", batch_size=16, nproc=2,
                          dp_layout="per_device")
    for rank, err in ((0, ""), (1, "ValueError: destinations can not be empty")):
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(
            {"status": "crash", "error": err, "worker": {"rank": rank}}))
    (tmp_path / "launcher.log").write_text("dlperf spawn: rank 1 exited with code 1\n")
    rec = _collect(cfg, tmp_path, 1, False, 60.0, ["spawn"])
    assert rec.identity.status == "crash"
    assert rec.identity.error == "rank 1: ValueError: destinations can not be empty"
    assert [p.status for p in rec.ranks] == ["crash", "crash"]


# --- the sharded input pipeline (TensorFlow in this process, no strategy) -----------------------

def test_sharded_pipeline_batches_hold_the_samples_of_the_global_batch(data_env):
    tf = pytest.importorskip("tensorflow")
    import numpy as np

    from dlperf.data import load_dataset
    from dlperf.frameworks.tensorflow.input import make_dataset
    from dlperf.zoo import SPECS

    cfg = make_run_config(model="fcn_mnist_tiny", framework="tensorflow", data="mnist",
                          batch_size=16, nproc=2, dp_layout="per_device", loader_workers=0)
    spec, ds = SPECS["fcn_mnist_tiny"], load_dataset("mnist")

    def batches(**kw):
        tf.random.set_seed(cfg.workload.seed)  # as keras.utils.set_random_seed in every worker
        nxt, info, _ = make_dataset(tf, cfg, spec, ds, **kw)
        return [tuple(np.asarray(t) for t in nxt()) for _ in range(3)], info

    whole, _ = batches()
    parts = [batches(batch=8, shard=(2, i)) for i in (0, 1)]
    assert parts[1][1]["shard"] == {"workers": 2, "index": 1}
    for j in range(3):
        assert whole[j][0].shape[0] == 16 and parts[0][0][j][0].shape[0] == 8
        got = np.concatenate([parts[0][0][j][0], parts[1][0][j][0]])
        # the same 16 samples (in another order): rows sorted lexicographically
        assert np.array_equal(np.unique(got, axis=0), np.unique(whole[j][0], axis=0))
        assert sorted(np.concatenate([parts[0][0][j][1], parts[1][0][j][1]])) == \
            sorted(whole[j][1])


# --- end to end ------------------------------------------------------------------------------

def _env() -> dict[str, str]:
    pp = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": SRC + (os.pathsep + pp if pp else "")}


@pytest.fixture(scope="module")
def one_process_losses():
    """Losses and FLOPs per step of fcn5_tiny (graph mode, one device, global batch 16) in this
    process."""
    pytest.importorskip("tensorflow")
    from dlperf.worker import run_config

    r = run_config(make_run_config(model="fcn5_tiny", framework="tensorflow", mode="graph",
                                   batch_size=16, iterations=POL, measure_ceilings=False))
    assert r["status"] == "ok", r["error"]
    return r["losses"]["first"] + r["losses"]["warmup"], r["flops"]["framework_flops_per_step"]


def _check_ranks(r: dict, n: int, one: list[float]) -> dict:
    assert r["status"] == "ok", r["error"]
    d = r["dist"]
    assert d["backend"] == "tf.distribute.MultiWorkerMirroredStrategy"
    assert d["engine"]["strategy"] == "MultiWorkerMirroredStrategy"
    assert d["engine"]["communication"] == "RING"
    assert d["engine"]["tf_config"]["workers"] == n and d["processes"] == n and d["replicas"] == n
    assert "127.0.0.1" not in json.dumps(d)  # cluster size recorded, not the addresses
    assert sorted(p["rank"] for p in d["per_rank"]) == list(range(n))
    for ph in ("first", "warmup", "measure"):
        per = [r["samples"][f"rank{k}:{ph}"] for k in range(n)]
        assert r["samples"][ph] == [max(c) for c in zip(*per)]  # the slowest rank's
    meds = sorted(p["median_s"] for p in d["per_rank"])
    assert r["rank_imbalance"] == pytest.approx(max(meds) / meds[len(meds) // 2]
                                                if n % 2 else
                                                max(meds) / ((meds[n // 2 - 1] + meds[n // 2])
                                                             / 2))
    # Each rank's loss is the mean over its rows (different rows: different losses); their
    # mean is the global batch's loss, and every later loss depends on the averaged update:
    # the same training as one process on the same global batch.
    ranks = [r["losses"][f"rank{k}:first"][0] for k in range(n)]
    assert len({round(x, 6) for x in ranks}) == n
    merged = r["losses"]["first"] + r["losses"]["warmup"]
    assert len(merged) == len(one) and merged == pytest.approx(one, rel=1e-5)
    return d


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_two_worker_processes_train_like_one_process(one_process_losses):
    from dlperf.launch.distributed import run_point

    cfg = make_run_config(model="fcn5_tiny", framework="tensorflow", mode="graph",
                          batch_size=16, nproc=2, dp_layout="per_device", iterations=POL,
                          measure_ceilings=False, timeout_s=140.0)
    r = run_point(cfg, env={"PYTHONPATH": SRC}).to_dict()
    d = _check_ranks(r, 2, one_process_losses[0])
    assert d["engine"]["tf_config"]["task_index"] == 0 and d["engine"]["local_replicas"] == 1
    assert r["per_device_batch"] == 8 and r["data_info"]["rows"] == "[0, 8) of each global " \
                                                                   "batch of 16"
    # one replica's step on its per-device batch (8 rows), not the global batch's (16)
    assert 0 < r["flops"]["framework_flops_per_step"] < one_process_losses[1]


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_two_nodes_of_one_worker_process_over_loopback(tmp_path, one_process_losses):
    """Two nodes (``--nnodes 2``, one process each: the TensorFlow cluster is exchanged through
    node 0 and every rank trains on its rows of the global batch); the global ranks of nodes
    of two processes: test_two_nodes_of_two_processes_get_tf_config_of_their_global_ranks."""
    from dlperf.results.store import ResultStore

    ep = f"127.0.0.1:{free_port()}"
    procs = [subprocess.Popen(
        [sys.executable, "-m", "dlperf", "run", "--model", "fcn5_tiny", "--framework",
         "tensorflow", "--mode", "eager", "--batch-size", "16", "--nproc", "1", "--nnodes", "2",
         "--dp-layout", "per_device", "--node-rank", str(k), "--rdzv-endpoint", ep,
         "--device", "cpu", "--db", str(tmp_path / "r.db"), *FAST],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env())
        for k in (1, 0)]  # node 1 first: it waits for node 0
    outs = [p.communicate(timeout=190)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][-2000:] + outs[1][-2000:]
    for db in ("r.db", "r.node1.db"):  # node 0 stores in --db, node 1 in its own copy
        with ResultStore(tmp_path / db) as s:
            (row,) = s.rows()
            raw = s.samples(row["id"])
        assert row["world_size"] == 2 and row["nnodes"] == 2 and row["per_device_batch"] == 8
        r = json.loads(row["result_json"])
        r["samples"] = {ph: v["step_time_s"] for ph, v in raw.items()}
        r["losses"] = {ph: v["loss"] for ph, v in raw.items()}
        d = _check_ranks(r, 2, one_process_losses[0])
        assert sorted(p["node_rank"] for p in d["per_rank"]) == [0, 1]
        assert r["flags"]["mode"] == "eager"


@pytest.mark.gpu
@pytest.mark.timeout(300)
def test_two_gpu_workers_use_nccl_and_train_like_one_gpu():
    tf = pytest.importorskip("tensorflow")
    if len(tf.config.list_physical_devices("GPU")) < 2:
        pytest.skip("needs 2 GPUs visible to TensorFlow")
    from dlperf.launch.distributed import run_point

    kw = dict(model="fcn5_tiny", framework="tensorflow", mode="graph", batch_size=16,
              device="cuda", iterations=POL, measure_ceilings=False)
    one = run_point(make_run_config(**kw), env={"PYTHONPATH": SRC}).to_dict()
    assert one["status"] == "ok", one["error"]
    for layout in ("per_device", "per_node"):  # per_node on one node: MirroredStrategy
        r = run_point(make_run_config(**kw, nproc=2, dp_layout=layout),
                      env={"PYTHONPATH": SRC}).to_dict()
        assert r["status"] == "ok", r["error"]
        if layout == "per_device":
            assert r["dist"]["engine"]["communication"] == "NCCL"
            assert r["dist"]["engine"]["tf_config"]["workers"] == 2
        assert r["losses"]["first"] + r["losses"]["warmup"] == pytest.approx(
            one["losses"]["first"] + one["losses"]["warmup"], rel=1e-3)
