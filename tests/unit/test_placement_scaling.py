"""CPU placement (--cpu-bind, the CPU list and NUMA nodes in the environment), the batch
semantics of exports and comparisons, the thread check of scaling efficiency and the bimodal
warning (issue 23, items 3 and 4). Framework-free, except the fake framework's worker run."""

from __future__ import annotations

import csv
import io
import os

import pytest

from dlperf.config import IterationPolicy, make_run_config
from dlperf.errors import ConfigError
from dlperf.measure.spread import bimodal_warning
from dlperf.measure.warnings import quality_warnings
from dlperf.placement import (
    bind_cpus,
    check_cpu_bind,
    format_cpulist,
    numa_nodes_of,
    numa_topology,
    parse_cpulist,
    plan_cpus,
    usable_cpus,
)
from dlperf.results.schema import new_record
from dlperf.stats import summarize, throughput

# --- placement --------------------------------------------------------------------------------


def test_cpulists_parse_format_and_refuse_nonsense():
    assert parse_cpulist("0-3,8") == [0, 1, 2, 3, 8]
    assert format_cpulist([5, 0, 1, 2]) == "0-2,5"
    assert check_cpu_bind("3,0-2") == "0-3" and check_cpu_bind("numa") == "numa"
    for bad in ("all", "3-1", "0-99999999", "", "1,,2"):
        with pytest.raises(ValueError, match="cpu_bind"):
            check_cpu_bind(bad)


def test_ranks_get_disjoint_cpus_under_every_mode():
    usable = list(range(8))
    topo = {0: [0, 1, 2, 3], 1: [4, 5, 6, 7]}
    assert plan_cpus("none", usable) is None
    assert plan_cpus("cores", usable) == usable  # one process: every usable CPU
    for mode in ("cores", "numa", "0-5"):
        sets = [set(plan_cpus(mode, usable, r, 4, topo) or []) for r in range(4)]
        assert all(sets) and sum(map(len, sets)) == len(set().union(*sets))  # disjoint
    # numa: ranks alternate over the nodes, each on its node's CPUs
    assert plan_cpus("numa", usable, 0, 2, topo) == [0, 1, 2, 3]
    assert plan_cpus("numa", usable, 1, 2, topo) == [4, 5, 6, 7]
    assert plan_cpus("numa", usable, 0, 1, None) == usable  # no NUMA information: one node
    with pytest.raises(ValueError, match="not usable"):
        plan_cpus("0-9", usable)
    with pytest.raises(ValueError, match="3 CPU.*4 processes"):
        plan_cpus("0-2", usable, 0, 4)


def test_numa_topology_from_sysfs_and_absent(tmp_path):
    for n, cl in ((0, "0-3"), (1, "4-7")):
        (tmp_path / f"node{n}").mkdir()
        (tmp_path / f"node{n}" / "cpulist").write_text(cl + "\n")
    topo = numa_topology(tmp_path)
    assert topo == {0: [0, 1, 2, 3], 1: [4, 5, 6, 7]}
    assert numa_nodes_of([3, 4], topo) == [0, 1] and numa_nodes_of([3], None) is None
    assert numa_topology(tmp_path / "absent") is None


def test_the_environment_records_the_cpu_list_and_numa_nodes():
    from dlperf.env import collect_env

    e = collect_env()
    assert parse_cpulist(e["cpu_list"]) == usable_cpus()
    assert e["cpu_affinity"] == len(usable_cpus())
    if numa_topology() is None:
        assert e["numa_nodes"] is None and "no NUMA information" in e["numa_note"]
    else:
        assert e["numa_nodes"] and e["numa_note"] is None


def test_bind_cpus_binds_every_thread_and_says_so():
    before = os.sched_getaffinity(0)
    first = min(before)
    try:
        done = bind_cpus(str(first))
        assert done["applied"] and done["cpus"] == str(first)
        assert os.sched_getaffinity(0) == {first}
    finally:
        for tid in os.listdir("/proc/self/task"):
            try:
                os.sched_setaffinity(int(tid), before)
            except ProcessLookupError:
                pass
    assert bind_cpus("none") == {"mode": "none", "local_rank": 0, "local_procs": 1,
                                 "cpus": None, "numa_nodes": None, "applied": False}


def test_cpu_bind_is_a_config_field_keyed_only_when_set():
    base = make_run_config(model="fcn5_tiny", batch_size=8)
    assert base.hardware.cpu_bind == "none"
    assert make_run_config(model="fcn5_tiny", batch_size=8, cpu_bind="none").run_key() == \
        base.run_key()
    bound = make_run_config(model="fcn5_tiny", batch_size=8, cpu_bind="1,0")
    assert bound.hardware.cpu_bind == "0-1" and bound.run_key() != base.run_key()
    assert "cpu-bind=0-1" in bound.label()
    with pytest.raises(ConfigError, match="--cpu-bind"):
        make_run_config(model="fcn5_tiny", batch_size=8, cpu_bind="everything")


def test_the_worker_records_its_binding_and_refuses_one_it_cannot_make(monkeypatch):
    from dlperf import registry
    from dlperf.frameworks import ADAPTERS
    from dlperf.worker import run_config

    monkeypatch.setitem(registry.FRAMEWORK_MODES, "fake", ("eager",))
    monkeypatch.setitem(ADAPTERS, "fake", "dlperf.frameworks.fake.adapter:FakeAdapter")
    it = IterationPolicy(min_iters=5, min_time_s=0.0, max_warmup_iters=2, min_warmup_iters=0,
                         warmup_window=2)
    every = format_cpulist(usable_cpus())  # binding to every usable CPU leaves this test's mask
    r = run_config(make_run_config(model="fcn5_tiny", framework="fake", batch_size=8,
                                   iterations=it, cpu_bind=every, measure_ceilings=False,
                                   options={"step_s": 0.001}))
    assert r["status"] == "ok", r["error"]
    assert r["env"]["cpu_bind"]["cpus"] == every and r["env"]["cpu_list"] == every
    r = run_config(make_run_config(model="fcn5_tiny", framework="fake", batch_size=8,
                                   iterations=it, cpu_bind="4000", measure_ceilings=False))
    assert r["status"] == "error" and "--cpu-bind 4000" in r["error"]
    assert "not usable" in r["error"]


# --- bimodal samples ------------------------------------------------------------------------


def test_bimodal_samples_warn_and_unimodal_ones_do_not():
    two = [0.002] * 80 + [0.430] * 20
    w = bimodal_warning(two)
    assert w is not None and "20 of 100" in w and "--cpu-bind" in w
    assert bimodal_warning([0.002] * 95 + [0.430] * 5) is None  # slowest decile is fast
    assert bimodal_warning([0.01 * (1 + i / 100) for i in range(100)]) is None
    assert bimodal_warning([0.002] * 5 + [0.4] * 4) is None  # too few to judge
    cfg = make_run_config(model="fcn5_tiny", batch_size=8)
    rec = new_record(cfg, "ok", summary=summarize(two).to_dict(),
                     samples={"measure": two})
    assert any(x.startswith("bimodal step times") for x in quality_warnings(rec))
    assert rec.identity.status == "ok"  # a warning beside ok, not another status


# --- scaling: batch semantics, threads of the baseline ------------------------------------


def _result(nproc, threads, scaling="strong", batch=16, times=(0.010, 0.011, 0.012)):
    cfg = make_run_config(model="fcn5_tiny", batch_size=batch, nproc=nproc, scaling=scaling)
    r = new_record(cfg, "ok").to_dict()
    r.update(summary=summarize(list(times)).to_dict(),
             throughput=throughput(len(times), cfg.global_batch, sum(times)),
             samples={"first": [0.1], "warmup": [0.02], "measure": list(times)},
             losses={"first": [2.0], "warmup": [2.0], "measure": [2.0] * len(times)},
             n_measured=len(times), flags={"threads": threads})
    return r


def test_efficiency_against_a_baseline_with_other_threads_is_flagged(tmp_path):
    from dlperf.perfmodel.scaling import scaling_points
    from dlperf.report.scaling import FLAG_MARK, scaling_markdown
    from dlperf.results.store import ResultStore

    with ResultStore(tmp_path / "r.db") as s:
        s.add(_result(1, 2))
        s.add(_result(2, 1, times=(0.005, 0.006, 0.006)))
        pts = scaling_points(s.records())
    (dp,) = [p for p in pts if p["devices"] == 2 and p["scaling"] == "strong"]
    assert dp["threads_1"] == 2 and dp["threads_per_rank"] == 1
    assert dp["warnings"] and "threads differ" in dp["warnings"][0]
    md = scaling_markdown(pts)
    assert FLAG_MARK.strip() in md and "threads differ" in md
    with ResultStore(tmp_path / "same.db") as s:
        s.add(_result(1, 1))
        s.add(_result(2, 1, times=(0.005, 0.006, 0.006)))
        pts = scaling_points(s.records())
    assert all(p["warnings"] == [] for p in pts) and FLAG_MARK.strip() not in \
        scaling_markdown(pts)


def test_a_baseline_with_given_threads_serves_ranks_without_them(tmp_path):
    """Seen in a fresh-user trial: the one-device point stored with threads=1 (the thread
    policy on a busy host) and the ranks without --threads: the identity's threads differ,
    and the efficiency went missing ("No scaling series"). It is found, and flagged only
    when the threads as run differ."""
    from dlperf.perfmodel.scaling import scaling_points
    from dlperf.results.store import ResultStore

    one = _result(1, 1)
    one["config"]["hardware"]["threads"] = 1
    one["threads"] = 1
    ranks = _result(2, 1, times=(0.005, 0.006, 0.006))
    with ResultStore(tmp_path / "r.db") as s:
        s.add(one)
        s.add(ranks)
        recs = s.records()
    assert {r.identity.threads for r in recs} == {1, None}
    pts = scaling_points(recs)
    (dp,) = [p for p in pts if p["devices"] == 2 and p["scaling"] == "strong"]
    assert dp["efficiency"] > 0 and dp["warnings"] == []  # 1 thread each, as run
    two = _result(1, 2)
    two["config"]["hardware"]["threads"] = 2
    two["threads"] = 2
    with ResultStore(tmp_path / "r2.db") as s:
        s.add(two)
        s.add(ranks)
        pts = scaling_points(s.records())
    (dp,) = [p for p in pts if p["devices"] == 2 and p["scaling"] == "strong"]
    assert "threads differ" in dp["warnings"][0]


def test_exports_name_global_and_per_device_batch_and_the_scaling(tmp_path):
    from dlperf.results.export import to_csv, to_json
    from dlperf.results.store import ResultStore

    with ResultStore(tmp_path / "r.db") as s:
        s.add(_result(2, 1, scaling="weak", batch=8))
        old = _result(1, 1)
        for k in ("world_size", "nproc", "nnodes", "per_device_batch", "scaling"):
            old.pop(k)  # a result from before data parallelism
        old["config"] = {k: v for k, v in old["config"].items() if k != "scaling"}
        s.add(old)
        rows = s.rows()
        parsed = {int(p["world_size"]): p for p in csv.DictReader(io.StringIO(to_csv(rows)))}
        import json

        js = {d["world_size"]: d for d in json.loads(to_json(rows))}
    weak = parsed[2]
    assert (weak["batch_size"], weak["per_device_batch"], weak["scaling"]) == ("16", "8", "weak")
    assert weak["cpu_bind"] == "none"
    one = parsed[1]  # derived on read: one device, strong, per-device = global
    assert (one["batch_size"], one["per_device_batch"], one["scaling"]) == ("16", "16", "strong")
    assert js[2]["scaling"] == "weak" and js[1]["per_device_batch"] == 16


def test_compare_data_and_the_results_table_show_devices_and_scaling():
    from dlperf.report.datagaps import data_markdown
    from dlperf.report.tables import row_cells

    gap = {"model": "m", "framework": "torch", "mode": "eager", "precision": "fp32",
           "batch_size": 16, "per_device_batch": 8, "world_size": 2, "nnodes": 1,
           "scaling": "weak", "grad_accum": 1, "data": "mnist", "repeat": 0,
           "loader_workers": None, "pipeline": False, "workers_kind": None,
           "synthetic_samples_per_s": None, "real_samples_per_s": 10.0,
           "relative_throughput": None, "ci_low": None, "ci_high": None,
           "data_wait_share": None, "input_bound": None}
    md = data_markdown([gap, {**gap, "world_size": 1, "per_device_batch": 16,
                              "scaling": "strong"}])
    head, _, row2, row1 = md.splitlines()[:4]
    assert "| devices | scaling | global batch | per-device batch |" in head
    assert "| 2 | weak | 16 | 8 |" in row2 and "| 1 | strong | 16 | 16 |" in row1
    from dlperf.results.schema import RunRecord

    cells = row_cells(RunRecord.from_dict(_result(2, 1, scaling="weak", batch=8)))
    assert "16 (8/dev, weak)" in cells


def test_a_binding_this_host_cannot_make_is_refused_before_anything_runs():
    """--cpu-bind 0-99 on a small host stopped only in the worker, as a stored error row."""

    from dlperf.errors import ConfigError
    from dlperf.placement import check_here, format_cpulist, usable_cpus

    usable = usable_cpus()
    check_here([("cores", 1),
                ("none", 64)])
    check_here([(format_cpulist(usable[:1]), 1)])
    beyond = max(usable) + 1
    with pytest.raises(ConfigError, match=f"CPU\\(s\\) {beyond}.*usable by this process"):
        check_here([(f"0-{beyond}", 1)])
    with pytest.raises(ConfigError, match="for .* processes"):
        check_here([("cores", len(usable) + 1)])


def test_the_thread_policy_counts_the_cpus_a_point_is_bound_to(monkeypatch):
    """On a busy host the policy chose floor(usable - other) threads over every usable CPU,
    also for a point bound to fewer (--cpu-bind 0 on a busy 16-CPU host: 15 threads on one
    CPU). It now counts the bound CPUs; unbound points keep the process's own."""
    from types import SimpleNamespace

    from dlperf.cli import common
    from dlperf.placement import thread_policy_cpus

    usable = usable_cpus()
    first = format_cpulist(usable[:1])
    assert thread_policy_cpus(["none"]) is None
    assert thread_policy_cpus([first]) == usable[:1]
    assert thread_policy_cpus(["cores"]) == usable
    both = ["cores", first]
    assert thread_policy_cpus(both) == usable[:1]  # the smallest: a count that fits each
    assert thread_policy_cpus([f"0-{max(usable) + 1}"]) is None

    seen = []
    monkeypatch.setattr("dlperf.env.choose_threads",
                        lambda cpus=None: seen.append(cpus) or SimpleNamespace(line=lambda: "x"))
    monkeypatch.setattr(common, "err", SimpleNamespace(print=lambda *a, **k: None))
    point = make_run_config(model="fcn5_tiny", batch_size=8, device="cpu", cpu_bind=first)
    common.choose_threads_once([point])
    common.choose_threads_once([point.with_(cpu_bind="none")])
    assert seen == [usable[:1], None]


def test_two_modes_is_either_test():
    """``has_two_modes``, the rule compare flags a run by and predict warns of: the slow-decile
    test or the two-cluster test, each alone enough."""
    from dlperf.measure.spread import has_two_modes, modes_of

    decile = [0.002] * 80 + [0.430] * 20
    assert bimodal_warning(decile) is not None and has_two_modes(decile)
    clusters = [0.01] * 50 + [0.02] * 50  # no far slow decile: only the clusters tell
    assert bimodal_warning(clusters) is None and modes_of(clusters) is not None
    assert has_two_modes(clusters)
    assert not has_two_modes([0.01 * (1 + i / 100) for i in range(100)])
