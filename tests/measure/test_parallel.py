"""Data parallelism without processes: rank merging, scaling efficiency, convergence, exposed
communication, agreed step counts, configuration rules and the SLURM script (exact numbers)."""

from __future__ import annotations

import pytest

from dlperf.config import DDPOptions, IterationPolicy, make_run_config
from dlperf.errors import ConfigError
from dlperf.measure.breakdown.overlap import (
    exposed_communication,
    length,
    overlap_length,
    spans_from_chrome_trace,
    union,
)
from dlperf.measure.convergence import (
    smoothed,
    summarize_convergence,
    time_to_target,
    training_time,
)
from dlperf.measure.loop import measure
from dlperf.measure.ranks import imbalance, merge_ranks, rank_payload
from dlperf.measure.timers import HostTimer
from dlperf.perfmodel.scaling import efficiency, scaling_points, speedup
from dlperf.results.view import as_records
from fakes import FakeClock

# --- merging ranks -------------------------------------------------------------------------

def _payload(rank, measure, losses, first=0.5, warm=(0.2, 0.1)):
    return rank_payload(rank, samples={"first": [first], "warmup": list(warm), "measure": measure},
                        losses={"first": [9.0], "warmup": [5.0, 4.0], "measure": losses},
                        wall_s=sum(measure), memory={"peak_rss_bytes": 100 * (rank + 1)})


def test_merge_takes_slowest_rank_per_iteration_and_mean_loss():
    p0 = _payload(0, [0.10, 0.30, 0.20], [2.0, 1.0, 0.5])
    p1 = _payload(1, [0.20, 0.10, 0.25], [4.0, 3.0, 1.5], first=0.75)
    m = merge_ranks([p1, p0])  # any order
    assert m["samples"]["measure"] == [0.20, 0.30, 0.25]
    assert m["samples"]["first"] == [0.75]
    assert m["losses"]["measure"] == [3.0, 2.0, 1.0]
    assert m["samples"]["rank0:measure"] == [0.10, 0.30, 0.20]
    assert m["samples"]["rank1:measure"] == [0.20, 0.10, 0.25]
    assert m["losses"]["rank1:measure"] == [4.0, 3.0, 1.5]
    assert m["slowest_rank_counts"] == {"0": 1, "1": 2}
    # rank medians 0.20 and 0.20 -> balanced
    assert m["imbalance"] == pytest.approx(1.0)
    assert [r["median_s"] for r in m["per_rank"]] == [0.20, 0.20]
    assert m["wall_s"] == pytest.approx(0.60)


def test_one_rank_merges_to_itself_and_mismatched_counts_are_refused():
    p = _payload(0, [0.1, 0.2], [1.0, 2.0])
    m = merge_ranks([p])
    assert m["samples"]["measure"] == [0.1, 0.2] and "rank0:measure" not in m["samples"]
    with pytest.raises(ValueError, match="different numbers of measure"):
        merge_ranks([p, _payload(1, [0.1], [1.0])])
    with pytest.raises(ValueError, match="duplicate"):
        merge_ranks([p, p])


def test_imbalance_is_max_over_median():
    assert imbalance([1.0, 1.0, 1.0, 2.0]) == 2.0  # median 1.0
    assert imbalance([0.1, 0.3, 0.2]) == pytest.approx(1.5)


# --- scaling efficiency --------------------------------------------------------------------

def test_efficiency_weak_and_strong_exact():
    # weak: per-device 64; T1 = 0.10 s, T2 = 0.125 s -> E = 0.8, S = 1.6
    assert efficiency(0.10, 0.125, 64, 128, 2) == pytest.approx(0.8)
    assert speedup(0.10, 0.125, 64, 128) == pytest.approx(1.6)
    # strong: global 128; T1 = 0.2 s, T4 = 0.0625 s -> E = 0.2 / (4 * 0.0625) = 0.8
    assert efficiency(0.2, 0.0625, 128, 128, 4) == pytest.approx(0.8)
    with pytest.raises(ValueError):
        efficiency(0.1, 0.0, 64, 128, 2)
    with pytest.raises(ValueError):
        efficiency(0.1, 0.1, 64, 128, 0)


def _row(id_, world, batch, per_dev, median, sps, **kw):
    base = {"id": id_, "status": "ok", "model": "m", "framework": "torch", "mode": "eager",
            "device": "cuda", "precision": "fp32", "data": "synthetic", "threads": None,
            "grad_accum": 1, "world_size": world, "nnodes": 1, "batch_size": batch,
            "per_device_batch": per_dev, "step_time_median_s": median, "samples_per_s": sps,
            "rank_imbalance": None, "exposed_comm_s": None}
    return {**base, **kw}


def test_scaling_points_match_weak_and_strong_baselines():
    rows = [_row(1, None, 64, None, 0.100, 640.0),      # one device, batch 64 (old row)
            _row(2, 1, 128, 128, 0.200, 640.0),         # one device, batch 128
            _row(3, 2, 128, 64, 0.125, 1024.0, rank_imbalance=1.02, exposed_comm_s=0.004)]
    pts = scaling_points(as_records(rows))
    by = {(p["scaling"], p["devices"]): p for p in pts}
    assert set(by) == {("weak", 1), ("weak", 2), ("strong", 1), ("strong", 2)}
    w = by[("weak", 2)]
    assert w["baseline_batch"] == 64 and w["id_1"] == 1 and w["id_n"] == 3
    assert w["efficiency"] == pytest.approx(1024.0 / 640.0 / 2)       # 0.8
    assert w["efficiency_median"] == pytest.approx(0.100 / 0.125)     # 0.8
    assert w["imbalance"] == 1.02 and w["exposed_comm_s"] == 0.004
    s = by[("strong", 2)]
    assert s["baseline_batch"] == 128 and s["id_1"] == 2
    assert s["efficiency_median"] == pytest.approx(0.200 / (2 * 0.125))  # 0.8
    assert by[("weak", 1)]["efficiency"] == 1.0
    # another framework's one-device row is no baseline
    assert scaling_points(as_records([_row(1, 1, 64, 64, 0.1, 640.0, framework="jax"),
                                      rows[2]])) == []


def test_ddp_variants_are_told_apart_in_table_and_plot(tmp_path):
    import json

    from dlperf.report.scaling import plot_scaling, scaling_markdown
    ddp = {"bucket_cap_mb": 25.0, "gradient_as_bucket_view": False, "static_graph": False,
           "find_unused_parameters": False, "broadcast_buffers": True}
    rj = lambda **d: json.dumps({"config": {"ddp": {**ddp, **d}}})  # noqa: E731
    rows = [_row(1, 1, 64, 64, 0.100, 640.0),
            _row(2, 2, 128, 64, 0.125, 1024.0, result_json=rj()),
            _row(3, 2, 128, 64, 0.110, 1163.6, result_json=rj(broadcast_buffers=False))]
    pts = [p for p in scaling_points(as_records(rows)) if p["scaling"] == "weak"]
    by = {(p["devices"], p["variant"]): p for p in pts}
    assert set(by) == {(1, ""), (2, ""), (2, "ddp(broadcast_buffers=False)")}
    assert by[(2, "ddp(broadcast_buffers=False)")]["efficiency_median"] == pytest.approx(0.1 / 0.11)
    md = scaling_markdown(pts)
    assert "| torch/eager ddp(broadcast_buffers=False) |" in md and "| torch/eager |" in md
    assert "| +25 |" in md and "| +10 |" in md  # weak: T_N - T_1 in ms (0.125 / 0.110 - 0.100 s)
    assert plot_scaling(pts, tmp_path).stat().st_size > 0


def test_scaling_ci_from_samples():
    rows = [_row(1, 1, 64, 64, 0.1, 640.0), _row(3, 2, 128, 64, 0.125, 1024.0)]
    samples = {1: [0.1] * 5, 3: [0.125] * 5}
    p = [x for x in scaling_points(as_records(rows), samples.__getitem__) if x["devices"] == 2][0]
    assert p["efficiency_median"] == pytest.approx(0.8)
    assert p["ci_low"] == pytest.approx(0.8) and p["ci_high"] == pytest.approx(0.8)


# --- convergence ---------------------------------------------------------------------------

def test_time_to_target_uses_trailing_mean_and_training_time():
    losses = [4.0, 3.0, 2.0, 1.0, 1.0, 0.5]
    times = [1.0, 0.5, 0.5, 0.5, 0.5, 0.5]
    assert training_time(times) == [1.0, 1.5, 2.0, 2.5, 3.0, 3.5]
    assert smoothed(losses, 2) == [None, 3.5, 2.5, 1.5, 1.0, 0.75]
    # single losses reach 2.0 at iteration 3, the 2-mean only at iteration 5 (1.0 <= 1.2)
    hit = time_to_target(losses, times, 1.2, window=2)
    assert hit == {"iteration": 5, "time_s": 3.0, "smoothed_loss": 1.0}
    assert time_to_target(losses, times, 0.1, window=2) is None
    with pytest.raises(ValueError):
        time_to_target(losses, times[:-1], 1.0)


def test_summarize_convergence_over_all_phases():
    s = {"first": [1.0], "warmup": [0.5, 0.5], "measure": [0.5, 0.5, 0.5]}
    ls = {"first": [4.0], "warmup": [3.0, 2.0], "measure": [1.0, 1.0, 0.5]}
    c = summarize_convergence(s, ls, 1.2, window=2)
    assert c["iterations"] == 6 and c["training_time_s"] == 3.5
    assert c["final_smoothed_loss"] == 0.75
    assert c["reached"] and c["iterations_to_target"] == 5 and c["time_to_target_s"] == 3.0
    assert "reached" not in summarize_convergence(s, ls, None)


# --- exposed communication -----------------------------------------------------------------

def test_interval_arithmetic():
    assert union([(3, 4), (0, 1), (0.5, 2), (2, 2.5)]) == [(0, 2.5), (3, 4)]
    assert length([(0, 1), (0.5, 2), (5, 6)]) == 3.0
    assert overlap_length([(0, 10)], [(1, 2), (1.5, 3), (9, 12)]) == 3.0


def test_exposed_communication_exact():
    comm = [(0.0, 4.0), (6.0, 8.0)]           # 6 units of all-reduce
    compute = [(0.0, 3.0), (2.0, 5.0), (7.5, 9.0)]  # backward kernels
    e = exposed_communication(comm, compute, iterations=2)
    # overlap: [0, 4] with [0, 5] = 4; [6, 8] with [7.5, 9] = 0.5 -> 4.5; exposed 1.5
    # compute: [0, 5] and [7.5, 9] = 6.5 units
    assert e == {"comm": 3.0, "compute": 3.25, "overlapped": 2.25, "exposed": 0.75,
                 "hidden_share": 0.75}


def test_spans_from_gpu_and_cpu_traces():
    gpu = {"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32", "ts": 100, "dur": 40},
        {"ph": "X", "cat": "kernel", "name": "sm90_gemm", "ts": 90, "dur": 30},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 1000}]}
    comm, comp, rule = spans_from_chrome_trace(gpu)
    assert rule == "gpu-kernels"
    assert comm == [(100e-6, 140e-6)] and comp == [(90e-6, 120e-6)]
    assert exposed_communication(comm, comp)["exposed"] == pytest.approx(20e-6)
    cpu = {"traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "ts": 10, "dur": 10,
         "pid": 1, "tid": 7},
        {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "ts": 9, "dur": 2, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 5, "dur": 10, "pid": 1, "tid": 1}]}
    comm, comp, rule = spans_from_chrome_trace(cpu)
    assert rule == "cpu-gloo" and comm == [(10e-6, 20e-6)] and comp == [(5e-6, 15e-6)]
    assert exposed_communication(comm, comp)["exposed"] == pytest.approx(5e-6)


# --- agreed step counts --------------------------------------------------------------------


def test_agreed_loop_runs_the_count_of_the_slowest_process():
    clock = FakeClock()

    def step():
        clock.t += 0.01
        return 1.0

    calls = []

    def agree(v):  # another process that is slow (its measured count is 37) and steady
        calls.append(list(v))
        return [max(v[0], 37.0)] if v[0] not in (0.0, 1.0) else list(v)

    pol = IterationPolicy(min_iters=5, min_time_s=0.0, warmup_window=2, min_warmup_iters=0,
                          max_warmup_iters=10)
    res = measure(step, HostTimer(clock=clock), pol, clock=clock, agree=agree)
    assert len(res.measured_s) == 37
    assert res.steady_state and len(res.warmup_s) == 4  # two windows of 2, then stable
    assert calls[-1] == [5.0]  # this process alone would have measured min_iters


def test_warmup_continues_until_every_process_is_steady():
    clock = FakeClock()

    def step():
        clock.t += 0.01
        return 1.0

    n_stable = [0]

    def agree(v):  # the other process reports "not stable" for its first three windows
        if v == [0.0] or v == [1.0]:
            n_stable[0] += 1
            # calls alternate: go?, stable?, go?, stable?, ...
            if n_stable[0] % 2 == 0 and n_stable[0] <= 6:
                return [1.0]
        return list(v)

    pol = IterationPolicy(min_iters=3, min_time_s=0.0, warmup_window=2, min_warmup_iters=0,
                          max_warmup_iters=20)
    res = measure(step, HostTimer(clock=clock), pol, clock=clock, agree=agree)
    assert len(res.warmup_s) == 8 and res.steady_state  # 4 windows instead of 2
    assert len(res.measured_s) == 3


# --- configuration -------------------------------------------------------------------------

def test_strong_scaling_needs_a_divisible_global_batch():
    with pytest.raises(ConfigError, match=r"batch_size 65 is not divisible by the 2 devices.*"
                                          r"--scaling weak"):
        make_run_config(model="fcn5_tiny", batch_size=65, nproc=2)
    c = make_run_config(model="fcn5_tiny", batch_size=64, nproc=2, nnodes=2)
    assert (c.world_size, c.global_batch, c.per_device_batch) == (4, 64, 16)
    w = make_run_config(model="fcn5_tiny", batch_size=65, nproc=2, scaling="weak")
    assert (w.global_batch, w.per_device_batch) == (130, 65)
    with pytest.raises(ConfigError, match="grad_accum"):
        make_run_config(model="fcn5_tiny", batch_size=64, nproc=2, grad_accum=3, scaling="weak")


def test_run_keys_identify_what_is_measured():
    one = make_run_config(model="fcn5_tiny", batch_size=64)
    # a one-device point has the key it had before data parallelism existed (resume works)
    assert one.run_key() == make_run_config(model="fcn5_tiny", batch_size=64, scaling="weak",
                                            target_loss=1.0, comm_profile_iters=0).run_key()
    strong = make_run_config(model="fcn5_tiny", batch_size=128, nproc=2)
    weak = make_run_config(model="fcn5_tiny", batch_size=64, nproc=2, scaling="weak")
    assert strong.run_key() == weak.run_key() != one.run_key()
    bucket = make_run_config(model="fcn5_tiny", batch_size=128, nproc=2,
                             ddp=DDPOptions(bucket_cap_mb=1.0))
    assert bucket.run_key() != strong.run_key()
    with pytest.raises(ConfigError, match="PyTorch DistributedDataParallel"):
        make_run_config(model="fcn5_tiny", framework="jax", batch_size=8, nproc=2,
                        ddp={"static_graph": True})
    with pytest.raises(ConfigError, match="dp_layout"):
        make_run_config(model="fcn5_tiny", batch_size=8, nproc=2, dp_layout="per_node")


def test_slurm_script_runs_the_same_command_on_every_node():
    from dlperf.launch.slurm import node_db_path, sbatch_script, strip_node_options

    args = strip_node_options(["--model", "resnet50", "--nproc", "2", "--nnodes", "4",
                               "--node-rank=1", "--rdzv-endpoint", "h:1", "--emit-slurm",
                               "job.sh", "--db", "r.db"])
    assert args == ["--model", "resnet50", "--nproc", "2", "--db", "r.db"]
    text = sbatch_script(args, nnodes=4, gpus_per_node=2, python="python3")
    assert "#SBATCH --nodes=4" in text and "#SBATCH --gpus-per-node=2" in text
    assert "python3 -m dlperf run --model resnet50 --nproc 2 --db r.db --nnodes 4" in text
    assert '--node-rank "$SLURM_NODEID" --rdzv-endpoint "$DLPERF_HEAD"' in text
    # NVLS is left at NCCL's default: the script sets nothing; --nccl-nvls off travels with
    # the command line to every node
    assert "NCCL_NVLS_ENABLE" not in text
    off = sbatch_script([*args, "--nccl-nvls", "off"], nnodes=4, gpus_per_node=2,
                        python="python3")
    assert "--db r.db --nccl-nvls off --nnodes 4" in off
    assert node_db_path("a/r.db", 0) == "a/r.db" and node_db_path("a/r.db", 2) == "a/r.node2.db"


def test_cli_multi_node_needs_an_endpoint_and_writes_a_slurm_script(tmp_path):
    import os
    import subprocess
    import sys

    def dlperf(*args):
        r = subprocess.run([sys.executable, "-m", "dlperf", "run", "--model", "fcn5_tiny",
                            "--device", "cpu", "--db", str(tmp_path / "r.db"), *args],
                           capture_output=True, text=True, timeout=60, env=os.environ)
        r.stderr = " ".join(r.stderr.split())  # the console wraps long lines
        return r

    r = dlperf("--nproc", "2", "--nnodes", "2")
    assert r.returncode == 2 and "--rdzv-endpoint" in r.stderr
    r = dlperf("--nproc", "2", "--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "h:1")
    assert r.returncode == 2 and "--node-rank 2 must be < --nnodes 2" in r.stderr
    r = dlperf("--nproc", "2", "--batch-size", "33")
    assert r.returncode == 2 and "not divisible by the 2 devices" in r.stderr
    job = tmp_path / "job.sbatch"
    r = dlperf("--nproc", "2", "--nnodes", "2", "--emit-slurm", str(job))
    assert r.returncode == 0, r.stderr
    text = job.read_text()
    assert "#SBATCH --nodes=2" in text and "--gpus-per-node" not in text  # a CPU run
    cmd = text.split("bash -c", 1)[1]
    assert "--model fcn5_tiny --device cpu" in cmd and "--emit-slurm" not in cmd
    assert not (tmp_path / "r.db").exists()  # nothing ran


def test_convergence_groups_tables_and_plots(tmp_path):
    import json

    from dlperf.report.convergence import convergence_groups, convergence_markdown, plot_convergence
    from dlperf.report.scaling import plot_scaling, scaling_markdown

    def row(id_, world, data="mnist"):
        return {"id": id_, "status": "ok", "model": "fcn_mnist", "framework": "torch",
                "mode": "eager", "device": "cpu", "precision": "fp32", "data": data,
                "threads": None, "batch_size": 32, "world_size": world, "nnodes": 1,
                "result_json": json.dumps({"config": {
                    "target_loss": None if data == "synthetic" else 1.5}})}

    raw = {1: {"first": {"step_time_s": [1.0], "loss": [3.0]},
               "measure": {"step_time_s": [0.5, 0.5, 0.5], "loss": [2.0, 1.0, 1.0]}},
           2: {"first": {"step_time_s": [1.0], "loss": [3.0]},
               "measure": {"step_time_s": [0.25, 0.25, 0.25], "loss": [2.0, 1.0, 1.0]},
               "rank0:measure": {"step_time_s": [9.0] * 3, "loss": [9.0] * 3}}}
    groups = convergence_groups(as_records([row(2, 2), row(1, None), row(3, 1, "synthetic")]),
                                raw.__getitem__, window=2)
    (g,) = groups  # synthetic data without a target is no convergence run
    r1, r2 = g["runs"]
    assert (r1["devices"], r2["devices"]) == (1, 2)
    # smoothed (window 2): [None, 2.5, 1.5, 1.0]; 1.5 <= 1.5 at iteration 3
    assert r1["iterations_to_target"] == r2["iterations_to_target"] == 3
    assert (r1["time_to_target_s"], r2["time_to_target_s"]) == (2.0, 1.5)  # rank phases ignored
    md = convergence_markdown(groups)
    assert "| fcn_mnist | torch/eager | cpu | fp32 | mnist | 32 | 2 | 4 | 1.750 |" in md
    (png,) = plot_convergence(groups, tmp_path, window=2)
    assert png.stat().st_size > 1000
    pts = scaling_points(as_records([
        {**row(1, 1), "grad_accum": 1, "per_device_batch": 32, "step_time_median_s": 0.1,
         "samples_per_s": 320.0},
        {**row(2, 2), "grad_accum": 1, "batch_size": 64, "per_device_batch": 32,
         "step_time_median_s": 0.125, "samples_per_s": 512.0, "rank_imbalance": 1.1,
         "exposed_comm_s": 0.002}]))
    md = scaling_markdown(pts)
    assert "| weak | 32/dev | 2 | 64 | 125.0 | 512.0 | 1.600 | 0.800 | 0.800 | 1.100 | 2.000 |" in md
    assert plot_scaling(pts, tmp_path).stat().st_size > 1000


def test_scaling_across_environments_is_marked():
    import json

    from dlperf.report.scaling import scaling_markdown

    def env(platform):
        return json.dumps({"env": {"platform": platform}})

    one = _row(1, 1, 64, 64, 0.100, 640.0, result_json=env("fc-v657"))
    two = _row(2, 2, 128, 64, 0.125, 1024.0, result_json=env("fc-v973"))
    (w1, w2) = [p for p in scaling_points(as_records([one, two])) if p["scaling"] == "weak"]
    assert w2["env_differs"] == ["platform: fc-v657 vs fc-v973"]
    md = scaling_markdown([w1, w2])
    assert "0.800 †" in md and "different environments" in md
    same = _row(2, 2, 128, 64, 0.125, 1024.0, result_json=env("fc-v657"))
    assert "†" not in scaling_markdown(scaling_points(as_records([one, same])))
