"""The armour attacks at CI size (issue 40): damaged results files through every command
(benchmarks/fuzz_databases.py), bad flags, sweep files and every flag that writes a file
(benchmarks/fuzz_flags.py), mutated side files of a database (benchmarks/fuzz_sidefiles.py via
fuzz_inputs.py), and a SIGTERM that lands while a result is being stored
(benchmarks/reliability.py). Each slice must meet its attack's goal: no raw traceback, no hang,
nothing lost, no silent change, every refusal clear."""

from __future__ import annotations

import importlib
import random
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def bench(monkeypatch, tmp_path):
    """``bench(name)``: the attack module, with the fake framework registered for the test;
    the registry and the environment are put back afterwards (other tests in this process
    see them as they were)."""
    from dlperf import registry

    for k, v in (("DLPERF_FAKE_FRAMEWORK", "1"), ("DLPERF_FAKE_STEP_S", "0.001"),
                 ("COLUMNS", "200"), ("DLPERF_CACHE_DIR", str(tmp_path / "cache"))):
        monkeypatch.setenv(k, v)

    saved = dict(registry.FRAMEWORKS), dict(registry.FRAMEWORK_MODES)
    sys.path.insert(0, str(BENCH))

    def load(name: str):
        mod = importlib.import_module(name)
        for m in (mod, sys.modules.get("fuzz_databases")):
            if m is not None and hasattr(m, "_register_fake"):
                m._register_fake()
        return mod
    try:
        yield load
    finally:
        sys.path.remove(str(BENCH))
        for d, old in zip((registry.FRAMEWORKS, registry.FRAMEWORK_MODES), saved):
            d.clear()
            d.update(old)


def test_damaged_databases_through_every_command(bench):
    fdb = bench("fuzz_databases")
    mutants = fdb.all_mutants(seed=1, n_flips=4)
    kinds = {m.kind for m in mutants}
    assert len(mutants) >= 100 and kinds == {"value", "file"}
    rng = random.Random(1)
    small = [m for m in mutants if m.bitflip][:2] + rng.sample(
        [m for m in mutants if not m.bitflip], 5)
    res = fdb.run(small, per=4, seed=1, limit_s=30.0)
    assert res["goal_met"], res["problems"]
    assert res["runs"] >= 25 and res["bitflips"]["silent_change"] == 0


def test_bad_flags_sweep_files_and_every_writer(bench):
    ff = bench("fuzz_flags")
    cases = ff.all_cases()
    assert len(cases) >= 100
    flags = {c.name.split(" -> ")[0] for c in cases if c.kind == "writer"}
    assert {"results -o", "compare -o", "report -o", "run --emit-slurm", "sweep --slurm-array",
            "allreduce --json", "merge --db", "run --db", "run --report", "run --trace",
            "data make-imagefolder"} <= flags
    res = ff.run(ff.pick_small(cases, 24), limit_s=60.0)
    assert res["goal_met"], res["problems"]
    assert res["by_kind"]["writer"].get("ok", 0) >= len(flags)  # each flag at the db


def test_side_files_of_a_database(bench, tmp_path):
    fi = bench("fuzz_inputs")
    side = [c for c in fi.all_cases(0) if c.kind in ("unsaved", "cache")]
    assert len(side) >= 60
    small = [c for c in side if c.mutation == "valid"] + random.Random(0).sample(
        [c for c in side if c.mutation != "valid"], 10)
    res = fi.run(small, limit_s=10.0, yaml_reader="yamlsafe")
    bad = [r for r in res["records"] if r["outcome"] in
           ("silently_accepted", "raw_traceback", "hang", "wrongly_refused", "refused_unclear")]
    assert not bad and res["counts"]["refused"] >= 5, bad


@pytest.mark.slow
def test_a_sigterm_during_a_store_keeps_the_result(bench, tmp_path):
    rel = bench("reliability")
    yaml = rel.sweep_yaml(tmp_path / "s.yaml", [1, 2], min_iters=5)
    work = tmp_path / "w"
    work.mkdir()
    rec = rel.attack_store(work, yaml, rel.environment(), "store_sigterm", nth=1, delay_s=0.3)
    assert rec["signalled"] and rec["dropped"] == 0 and rel.problems(rec) == [], rec
