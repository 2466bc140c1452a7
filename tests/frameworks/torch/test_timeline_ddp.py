"""PyTorch: --timeline through the CLI into the results file, and DDP's bucket record."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from dlperf.frameworks.torch.dist import ddp_runtime  # noqa: E402
from dlperf.measure.breakdown.timeline import decode  # noqa: E402
from dlperf.results import timelines  # noqa: E402
from dlperf.results.store import ResultStore  # noqa: E402


def _timeline_run(tmp_path, *flags):
    """``dlperf run --framework torch --model fcn5_tiny --batch-size 8 --threads 1 --timeline
    --no-ceilings FLAGS`` into a new file: its one record and decoded timeline."""
    db = tmp_path / "t.db"
    r = subprocess.run([sys.executable, "-m", "dlperf", "run", "--framework", "torch",
                        "--model", "fcn5_tiny", "--batch-size", "8", "--threads", "1",
                        "--timeline", "--no-ceilings", *flags, "--db", str(db)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    with ResultStore(db, read_only=True) as s:
        (rec,) = s.records()
        return rec, decode(timelines.load(s, rec.stored.id))


def test_timeline_run_is_stored_and_decodes(tmp_path):
    rec, ops = _timeline_run(tmp_path)
    assert rec.identity.status == "ok" and rec.identity.config["measure"]["timeline"] is True
    assert rec.timeline.n_steps == 5 and rec.timeline.data is None
    assert len(ops) == rec.timeline.n_ops > 0
    # A CPU device: host-op self time, every op in one of the 5 traced iterations.
    assert {o["kind"] for o in ops} == {"host_op"}
    assert {o["step"] for o in ops} == set(range(5))
    assert any(o["op_class"] == "matmul" for o in ops)
    # Traced with shapes and FLOPs: fcn5_tiny is Linear 512-128-128-128-512 at batch 8, so
    # every forward addmm and backward mm is 2*M*N*K of one layer, 2*8*512*128 or 2*8*128*128,
    # and an fp32 addmm reads bias + input + weight: 4*(n_out + 8*n_in + n_in*n_out) bytes.
    widths = (512, 128, 128, 128, 512)
    layers = list(zip(widths, widths[1:]))
    mms = [o for o in ops if o["name"] in ("aten::addmm", "aten::mm")]
    assert {o["name"] for o in mms} == {"aten::addmm", "aten::mm"}
    assert {o["op_flops"] for o in mms} == {2 * 8 * i * j for i, j in layers}
    addmm_bytes = {o["op_bytes"] for o in mms if o["name"] == "aten::addmm"}
    assert addmm_bytes == {4 * (j + 8 * i + i * j) for i, j in layers}
    assert all(o["op_bytes"] > 0 for o in mms)
    # CPU: the dispatch probe says why it did not run.
    assert rec.host.dispatch_s is None and "CPU device" in rec.host.reason


def test_shapes_and_flops_only_when_asked(tmp_path):
    from dlperf.frameworks.torch.profile import add_flops, profile_steps

    lin = torch.nn.Linear(16, 32)
    x = torch.randn(8, 16)

    def step():
        lin(x).sum().backward()

    plain = profile_steps(torch, step, False, 1, tmp_path)["trace"]
    assert all(not (o.extra or {}).get("op_flops") for o in plain.ops)
    assert all("op_bytes" not in (o.extra or {}) for o in plain.ops)
    shaped = profile_steps(torch, step, False, 1, tmp_path, shapes=True)["trace"]
    addmm = [o for o in shaped.ops if o.name == "aten::addmm"]
    assert addmm and all(o.extra["op_flops"] == 2 * 8 * 16 * 32 for o in addmm)
    assert all(o.extra["op_bytes"] == 4 * (32 + 8 * 16 + 16 * 32) for o in addmm)
    # add_flops matches by External id and name, and keeps a count already there.
    doc = {"traceEvents": [{"cat": "cpu_op", "name": "aten::mm", "args": {"External id": 3}},
                           {"cat": "cpu_op", "name": "aten::mm", "args": {"External id": 4,
                                                                           "flops": 7}},
                           {"cat": "cpu_op", "name": "aten::add", "args": {"External id": 5}}]}
    evs = [SimpleNamespace(id=3, name="aten::mm", flops=64),
           SimpleNamespace(id=4, name="aten::mm", flops=99),
           SimpleNamespace(id=5, name="aten::mul", flops=8)]
    assert add_flops(doc, evs) == 1
    assert [e["args"].get("flops") for e in doc["traceEvents"]] == [64, 7, None]


def _ddp_world_of_one(port: int):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=0, world_size=1)


def test_ddp_runtime_lists_buckets_in_reduction_order():
    _ddp_world_of_one(29611)
    try:
        torch.manual_seed(0)
        m = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(6)])
        d = torch.nn.parallel.DistributedDataParallel(m, bucket_cap_mb=0.5)
        opt = torch.optim.SGD(d.parameters(), lr=0.01)
        for _ in range(3):
            d(torch.randn(4, 256)).sum().backward()
            opt.step()
            opt.zero_grad()
        info = ddp_runtime(d)
    finally:
        torch.distributed.destroy_process_group()
    json.dumps(info)  # stored as JSON
    assert info["num_parameter_tensors"] == 12 and info["bucket_cap_bytes"] == 524288
    b = info["buckets"]
    assert sum(x["bytes"] for x in b) == info["total_parameter_size_bytes"] == 6 * 257 * 256 * 4
    assert len(b) >= 3  # 1.5 MiB of gradients in 0.5 MiB buckets
    # Gradients become ready last layer first: the first bucket holds the last layer.
    assert b[0]["params"][0] == 11 and sorted(p for x in b for p in x["params"]) == list(range(12))
    assert info["prev_iteration_grad_ready_order_indices"][0] == 11


def test_ddp_bucket_timeline_is_recorded_for_every_rank(tmp_path):
    """CPU, gloo, 2 ranks through the CLI: dist.buckets_timeline has both ranks, one entry
    per DDP bucket of dist.runtime, all-reduces in bucket order, ready <= start <= end."""
    rec, ops = _timeline_run(tmp_path, "--device", "cpu", "--nproc", "2",
                             "--bucket-cap-mb", "0.2")
    assert rec.identity.status == "ok"
    bt = rec.dist.buckets_timeline
    assert bt is not None and [p["rank"] for p in bt["per_rank"]] == [0, 1]
    n_buckets = len(rec.dist.runtime["buckets"])
    assert n_buckets >= 2  # 0.63 MiB of gradients in 0.2 MB buckets
    # rank 0's timeline keeps gloo's all-reduce spans (worker thread): one per bucket and step
    spans = [o for o in ops if o["kind"] == "collective" and o["name"] == "gloo:all_reduce"]
    assert sorted(o["step"] for o in spans) == sorted(list(range(5)) * n_buckets)
    for p in bt["per_rank"]:
        assert "error" not in p, p
        assert p["matched_iterations"] == p["n_iterations"] == 5
        assert p["n_buckets"] == len(p["buckets"]) == n_buckets
        assert p["ready_source"] == "allreduce_enqueue"
        assert [b["index"] for b in p["buckets"]] == list(range(n_buckets))
        for b in p["buckets"]:
            assert 0 <= b["ready_ns"] <= b["start_ns"] <= b["end_ns"]
        starts = [b["start_ns"] for b in p["buckets"]]
        assert starts == sorted(starts)
        assert p["exposed_tail_ns"] is not None and p["exposed_tail_ns"] >= 0
