"""NCCL algorithm/protocol from kernel names of every naming generation (NVIDIA/nccl sources,
dlperf.measure.breakdown.nccl), per bucket of dist.buckets_timeline, and the NCCL record of
dist.runtime (version, NCCL_* overrides). Synthetic names: no multi-GPU machine was lent."""

from __future__ import annotations

import json

import pytest
from test_buckets import BUCKETS, _op, cpu_step  # tests/measure is on sys.path

from dlperf.measure.breakdown.buckets import match_buckets, summarize_buckets
from dlperf.measure.breakdown.nccl import nccl_record, parse_kernel, version_text


@pytest.mark.parametrize("name, coll, algo, proto, kalgo, kproto, naming", [
    # NCCL >= 2.19 (src/device/generate.py): TREE is the algorithm; RING stands for every
    # non-tree algorithm; LL is the kernel's specialisation, not the protocol in force.
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "AllReduce", None, None, "RING", "LL",
     "nccl>=2.19"),
    ("ncclDevKernel_AllReduce_Sum_bf16_TREE_LL", "AllReduce", "TREE", None, "TREE", "LL",
     "nccl>=2.19"),
    ("ncclDevKernel_AllGather_RING_LL", "AllGather", None, None, "RING", "LL", "nccl>=2.19"),
    ("ncclDevKernel_Generic", "Generic", None, None, None, None, "nccl>=2.19"),
    ("ncclDevKernel_Generic_4", "Generic", None, None, None, None, "nccl>=2.19"),
    ("ncclDevKernel_SendRecv", "SendRecv", None, None, None, None, "nccl>=2.19"),
    # NCCL 2.7-2.18 (NCCL_KERN_NAME(func, algo, proto, devredop, type)): one kernel per
    # algorithm, always the LL one.
    ("ncclKernel_AllReduce_RING_LL_Sum_float", "AllReduce", "RING", None, "RING", "LL",
     "nccl 2.7-2.18"),
    ("ncclKernel_AllReduce_TREE_LL_Sum_half", "AllReduce", "TREE", None, "TREE", "LL",
     "nccl 2.7-2.18"),
    ("ncclKernel_AllReduce_COLLNET_DIRECT_LL_Sum_float", "AllReduce", "COLLNET_DIRECT", None,
     "COLLNET_DIRECT", "LL", "nccl 2.7-2.18"),
    ("ncclKernel_AllReduce_NVLS_TREE_LL_Sum_float", "AllReduce", "NVLS_TREE", None,
     "NVLS_TREE", "LL", "nccl 2.7-2.18"),
    # NCCL <= 2.6 (NCCL_KERN_NAME(coll, op, dtype)): the collective only.
    ("ncclAllReduceKernel_sum_f32", "AllReduce", None, None, None, None, "nccl<=2.6"),
    ("ncclAllReduceLLKernel_sum_f32", "AllReduce", None, None, None, None, "nccl<=2.6"),
    # NCCL >= 2.27 symmetric kernels (src/device/symmetric/generate.py)
    ("ncclSymkDevKernel_AllReduce_AGxLL_R_sum_f32", "AllReduce", "symmetric:AGxLL_R", None,
     "AGxLL_R", None, "nccl>=2.27 symmetric"),
    ("ncclSymkDevKernel_AllReduce_RSxLD_AGxST_sum_bf16_profile", "AllReduce",
     "symmetric:RSxLD_AGxST", None, "RSxLD_AGxST", None, "nccl>=2.27 symmetric"),
])
def test_kernel_names_of_every_generation(name, coll, algo, proto, kalgo, kproto, naming):
    p = parse_kernel(name)
    assert p == {"collective": coll, "algorithm": algo, "protocol": proto,
                 "kernel_algorithm": kalgo, "kernel_protocol": kproto, "naming": naming}


def test_demangled_names_and_long_non_matching_names():
    p = parse_kernel("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)")
    assert (p["algorithm"], p["naming"]) == ("RING", "nccl 2.7-2.18")
    p = parse_kernel("ncclDevKernel_AllReduce_Sum_f32_TREE_LL(ncclDevKernelArgsStorage<4096ul>)")
    assert (p["algorithm"], p["kernel_protocol"]) == ("TREE", "LL")
    # no catastrophic backtracking on a long name that matches no generation
    assert parse_kernel("ncclDevKernel_AllReduce" + "_ab" * 4000 + "!") is None
    assert parse_kernel("ncclDevKernel_AllReduce" + "_ab" * 4000 + "_RING_LL")["kernel_algorithm"] \
        == "RING"


@pytest.mark.parametrize("name", ["sm90_xmma_gemm", "gloo:all_reduce", "", None,
                                  "nccl:all_reduce"])
def test_names_that_are_not_nccl_kernels(name):
    assert parse_kernel(name) is None


def _gpu_step(step, kernel, shift=0):
    return [_op(step, "kernel", "sm90_gemm", 50, 100, op="aten::mm"),
            _op(step, "kernel", kernel, 200 + shift, 80, op="c10d::allreduce_",
                op_class="communication", launch=120),
            _op(step, "kernel", kernel.replace("RING", "TREE"), 300 + shift, 60,
                op="c10d::allreduce_", op_class="communication", launch=290)]


def test_each_bucket_gets_the_algorithm_its_kernel_name_determines():
    (row,) = match_buckets(_gpu_step(0, "ncclKernel_AllReduce_RING_LL_Sum_float"), BUCKETS)
    b0, b1 = row["buckets"]
    assert (b0["algorithm"], b0["protocol"]) == ("RING", None)
    assert (b1["algorithm"], b1["protocol"]) == ("TREE", None)
    assert b1["nccl_kernel"] == "ncclKernel_AllReduce_TREE_LL_Sum_float"
    s = summarize_buckets([row])
    assert [(b["algorithm"], b["protocol"]) for b in s["buckets"]] == [("RING", None),
                                                                       ("TREE", None)]
    assert s["nccl_kernels"] == ["ncclKernel_AllReduce_RING_LL_Sum_float",
                                 "ncclKernel_AllReduce_TREE_LL_Sum_float"]
    json.dumps(s)


def test_iterations_that_disagree_leave_the_algorithm_unknown():
    rows = match_buckets(_gpu_step(0, "ncclKernel_AllReduce_RING_LL_Sum_float")
                         + _gpu_step(1, "ncclKernel_AllReduce_TREE_LL_Sum_float", 5), BUCKETS)
    s = summarize_buckets(rows)
    assert s["matched_iterations"] == 2
    assert s["buckets"][0]["algorithm"] is None  # RING once, TREE once
    assert s["buckets"][1]["algorithm"] == "TREE"


def test_gloo_spans_have_no_algorithm():
    (row,) = match_buckets(cpu_step(0), BUCKETS)
    assert all(b["algorithm"] is None and b["protocol"] is None and b["nccl_kernel"] is None
               for b in row["buckets"])
    assert summarize_buckets([row])["nccl_kernels"] == []


def test_nccl_record_keeps_version_and_overrides():
    env = {"NCCL_ALGO": "Tree", "NCCL_PROTO": "Simple", "NCCL_DEBUG": "INFO",
           "NCCL_SOCKET_IFNAME": "x" * 500, "PATH": "/usr/bin", "CUDA_VISIBLE_DEVICES": "0,1"}
    r = nccl_record((2, 21, 5), env)
    assert r["version"] == "2.21.5"
    assert r["env"] == {"NCCL_ALGO": "Tree", "NCCL_DEBUG": "INFO", "NCCL_PROTO": "Simple",
                        "NCCL_SOCKET_IFNAME": "x" * 200}
    assert r["forced"] == ["NCCL_ALGO", "NCCL_PROTO"]
    assert (r["algo"], r["proto"]) == ("Tree", "Simple")
    plain = nccl_record(None, {"HOME": "/root"})
    assert plain["version"] is None and plain["env"] == {} and plain["algo"] is None


@pytest.mark.parametrize("v, text", [((2, 18, 3), "2.18.3"), ("2.27.7", "2.27.7"),
                                     (22105, "2.21.5"), (2708, "2.7.8"), ("21903", "2.19.3"),
                                     (None, None)])
def test_version_text(v, text):
    assert version_text(v) == text


class _FakeDDP:
    def __init__(self, data):
        self._data = data

    def _get_ddp_logging_data(self):
        return self._data


def test_ddp_runtime_records_nccl_only_with_the_nccl_backend(monkeypatch):
    from dlperf.frameworks.torch.dist import ddp_runtime

    monkeypatch.setenv("NCCL_PROTO", "LL128")
    monkeypatch.delenv("NCCL_ALGO", raising=False)
    base = {"bucket_sizes": "4000, 8000", "rebuilt_per_bucket_param_indices": "3 2, 1 0"}
    info = ddp_runtime(_FakeDDP({**base, "backend_name": "nccl", "nccl_version": "2.21.5"}))
    assert info["nccl"]["version"] == "2.21.5" and info["nccl"]["proto"] == "LL128"
    assert info["nccl"]["env"]["NCCL_PROTO"] == "LL128" and info["nccl"]["algo"] is None
    assert [b["params"] for b in info["buckets"]] == [[3, 2], [1, 0]]
    assert "nccl" not in ddp_runtime(_FakeDDP({**base, "backend_name": "gloo"}))
